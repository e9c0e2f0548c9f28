//! Every example once with a small size, serial and over 2 MPI ranks, built with strict
//! warnings against the library of this test run: the files must hold the regions the
//! examples promise, with the call counts their arguments imply, and matmul's printed FLOP
//! rate must be 2*N^3 (per rank: 2*rows*N^2) over the region's time.

mod support;
use support::*;

#[path = "fortran/support.rs"]
mod fortran_support;
use fortran_support::{build_fortran, mpirun};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn build_c(name: &str, source: &str, dir: &Path, mpi: bool) -> PathBuf {
    if mpi {
        compile_with("mpicc", &["-std=c99", "-DUSE_MPI"], name, &[source], dir, &["-lm"])
    } else {
        compile(Lang::C, name, &[source], dir, &["-lm"])
    }
}

/// Run `cmd` with the profile going to `file`; fail on a non-zero exit.
fn run_example(cmd: &mut Command, dir: &Path, file: &Path) -> String {
    let out: Output = run(cmd.current_dir(dir).env("SCOPE_PROFILER_FILE", file).env_remove("SCOPE_PROFILER_VERBOSE"));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{cmd:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("scope_profiler summary"), "the summary table is printed:\n{stdout}");
    stdout
}

fn open(file: &Path, ranks: usize, language: &str) -> hdf5::File {
    let h5 = hdf5::File::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let meta = h5.group("metadata").unwrap();
    assert_eq!(int_attr(&meta, "mpi_size"), ranks as i64);
    assert_eq!(str_attr(&meta, "language"), language);
    assert!(h5.group(&format!("rank{ranks}")).is_err(), "more ranks than expected");
    h5
}

fn counts(h5: &hdf5::File, rank: usize) -> (BTreeMap<String, usize>, BTreeMap<String, ReadRegion>) {
    let regions = read_regions(h5, rank);
    (regions.iter().map(|(k, r)| (k.clone(), r.starts.len())).collect(), regions)
}

fn expect_counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// `rank<N>/annotations/<region>` FLOPs (sp_region_add_flops).
fn annotated_flops(h5: &hdf5::File, rank: usize, region: &str) -> f64 {
    let g = h5.group(&format!("rank{rank}/annotations/{region}")).unwrap_or_else(|e| panic!("rank{rank}/annotations/{region}: {e}"));
    g.attr("flops").unwrap().read_scalar::<f64>().unwrap()
}

fn check_nbody(h5: &hdf5::File, ranks: usize, steps: usize) {
    for rank in 0..ranks {
        // The documented per-pair counts: 20 (force_div), 18 (force_rcp), 12 per body (update).
        let bodies = annotated_flops(h5, rank, "update") / (12.0 * steps as f64);
        let all = bodies * ranks as f64;
        assert_eq!(annotated_flops(h5, rank, "force_div"), 20.0 * bodies * all * steps as f64, "rank {rank}");
        assert_eq!(annotated_flops(h5, rank, "force_rcp"), 18.0 * bodies * all * steps as f64, "rank {rank}");
        let (got, regions) = counts(h5, rank);
        let mut want = vec![("step", steps), ("force_div", steps), ("force_rcp", steps), ("update", steps)];
        if ranks > 1 {
            want.push(("exchange", steps));
        }
        assert_eq!(got, expect_counts(&want), "rank {rank}");
        // Each kernel call lies inside its step.
        let step = &regions["step"];
        for name in ["force_div", "force_rcp", "update"] {
            let r = &regions[name];
            for i in 0..steps {
                assert!(step.starts[i] <= r.starts[i] && r.ends[i] <= step.ends[i], "{name} call {i} outside its step");
            }
        }
    }
}

#[test]
fn nbody_serial() {
    let dir = scratch("example_nbody");
    let exe = build_c("nbody", "examples/nbody/nbody.c", &dir, false);
    let file = dir.join("nbody.h5");
    let stdout = run_example(Command::new(&exe).args(["200", "3"]), &dir, &file);
    assert!(stdout.contains("nbody: 200 bodies, 3 steps, 1 rank(s)"), "{stdout}");
    check_nbody(&open(&file, 1, "C"), 1, 3);
}

#[test]
fn nbody_mpi_two_ranks() {
    let dir = scratch("example_nbody_mpi");
    let exe = build_c("nbody_mpi", "examples/nbody/nbody.c", &dir, true);
    let file = dir.join("nbody_mpi.h5");
    // 201 bodies are rounded up to 2 blocks of 101.
    let stdout = run_example(mpirun(2).arg(&exe).args(["201", "4"]), &dir, &file);
    assert!(stdout.contains("nbody: 202 bodies, 4 steps, 2 rank(s)"), "{stdout}");
    assert!(stdout.contains("; 2 ranks: time per rank"), "{stdout}");
    check_nbody(&open(&file, 2, "C"), 2, 4);
    // The PyPI reader sees both ranks.
    let py = python_view(&file);
    assert_eq!(py["num_ranks"], 2, "{py}");
    assert_eq!(py["regions"]["force_div"]["1"]["calls"], 4, "{py}");
}

/// `rank R: matmul F flop in T s = X MFLOP/s; ...` lines: rank -> (flop, MFLOP/s).
fn matmul_rates(stdout: &str) -> BTreeMap<usize, (f64, f64)> {
    stdout
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("rank ")?;
            let (rank, rest) = rest.split_once(": matmul ")?;
            let (flop, rest) = rest.split_once(" flop in ")?;
            let (_, rest) = rest.split_once(" s = ")?;
            let (rate, _) = rest.split_once(" MFLOP/s")?;
            Some((rank.parse().ok()?, (flop.parse().ok()?, rate.parse().ok()?)))
        })
        .collect()
}

fn check_matmul(stdout: &str, h5: &hdf5::File, n: u64, ranks: usize, sweeps: usize) {
    let rates = matmul_rates(stdout);
    assert_eq!(rates.len(), ranks, "one rate line per rank:\n{stdout}");
    let mut flop_total = 0.0;
    for rank in 0..ranks {
        let (got, regions) = counts(h5, rank);
        assert_eq!(got, expect_counts(&[("matmul", 1), ("stream", sweeps)]), "rank {rank}");
        let (flop, printed) = rates[&rank];
        let rows = (n * (rank as u64 + 1) / ranks as u64 - n * rank as u64 / ranks as u64) as f64;
        assert_eq!(flop, 2.0 * rows * (n * n) as f64, "rank {rank}: flop count");
        // The same count annotated with sp_region_add_flops, and 24 bytes per stream element.
        assert_eq!(annotated_flops(h5, rank, "matmul"), flop, "rank {rank}: annotated FLOPs");
        let stream = h5.group(&format!("rank{rank}/annotations/stream")).unwrap();
        let bytes = stream.attr("bytes").unwrap().read_scalar::<f64>().unwrap();
        let flops = stream.attr("flops").unwrap().read_scalar::<f64>().unwrap();
        assert_eq!(bytes, 12.0 * flops, "rank {rank}: stream moves 24 bytes per 2 FLOPs");
        flop_total += flop;
        // The region encloses the program's own timing: its rate is at most the printed one
        // (up to the printed rounding), and close to it.
        let ns = (regions["matmul"].ends[0] - regions["matmul"].starts[0]) as f64;
        let from_file = flop / ns * 1e3;
        assert!(
            from_file <= printed * 1.001 + 0.1 && from_file >= printed * 0.5,
            "rank {rank}: printed {printed} MFLOP/s, region time gives {from_file}"
        );
    }
    assert_eq!(flop_total, 2.0 * (n * n * n) as f64);
    assert!(stdout.contains(&format!("total: 2*N^3 = {} flop", 2 * n * n * n)), "{stdout}");
}

#[test]
fn matmul_c_serial() {
    let dir = scratch("example_matmul");
    let exe = build_c("matmul", "examples/matmul/matmul.c", &dir, false);
    let file = dir.join("matmul.h5");
    let stdout = run_example(Command::new(&exe).args(["128", "100000", "3"]), &dir, &file);
    check_matmul(&stdout, &open(&file, 1, "C"), 128, 1, 3);
}

#[test]
fn matmul_c_mpi_two_ranks() {
    let dir = scratch("example_matmul_mpi");
    let exe = build_c("matmul_mpi", "examples/matmul/matmul.c", &dir, true);
    let file = dir.join("matmul_mpi.h5");
    let stdout = run_example(mpirun(2).arg(&exe).args(["129", "100001", "2"]), &dir, &file);
    check_matmul(&stdout, &open(&file, 2, "C"), 129, 2, 2);
}

#[test]
fn matmul_fortran_serial() {
    let dir = scratch("example_matmul_f");
    let exe = build_fortran("gfortran", "examples/matmul/matmul.F90", &dir, "matmul_f", &[]);
    let file = dir.join("matmul_f.h5");
    let stdout = run_example(Command::new(&exe).args(["128", "100000", "3"]), &dir, &file);
    check_matmul(&stdout, &open(&file, 1, "Fortran"), 128, 1, 3);
}

#[test]
fn matmul_fortran_mpi_two_ranks() {
    let dir = scratch("example_matmul_f_mpi");
    let exe = build_fortran("mpif90", "examples/matmul/matmul.F90", &dir, "matmul_f_mpi", &["-DUSE_MPI"]);
    let file = dir.join("matmul_f_mpi.h5");
    let stdout = run_example(mpirun(2).arg(&exe).args(["129", "100001", "2"]), &dir, &file);
    check_matmul(&stdout, &open(&file, 2, "Fortran"), 129, 2, 2);
}

#[test]
fn examples_reject_bad_arguments() {
    let dir = scratch("example_bad_args");
    let exe = build_c("nbody", "examples/nbody/nbody.c", &dir, false);
    let out = run(Command::new(&exe).arg("many").current_dir(&dir));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("bodies must be a positive integer"), "{}", text(&out.stderr));
}

// ---------------------------------------------------------------------------------------
// Unchanged under LIKWID: `likwid-perfctr -m` and `likwid-mpirun -marker`, with
// SCOPE_PROFILER_LIKWID=1 the only addition. This VM has no MSRs: tests/likwid/fake_msr.sh
// (from the LIKWID tests) gives LIKWID zero-filled stand-ins, so counters read 0 but every
// step runs for real. The helper executable is found next to target/<profile>/libscope_profiler.so.

fn under_fake_msr(dir: &Path, file: &Path) -> Command {
    let mut c = Command::new(repo_root().join("tests/likwid/fake_msr.sh"));
    c.current_dir(dir).env("SCOPE_PROFILER_LIKWID", "1").env("SCOPE_PROFILER_FILE", file);
    c.env_remove("LD_LIBRARY_PATH").env_remove("SCOPE_PROFILER_VERBOSE").env_remove("SCOPE_PROFILER_DISABLE");
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("LIKWID_") || k.starts_with("SCOPE_PROFILER_LIKWID_") {
            c.env_remove(k);
        }
    }
    c
}

/// Call counts of the LIKWID regions of `rank`: region -> per-thread counts.
fn likwid_calls(h5: &hdf5::File, rank: usize) -> BTreeMap<String, Vec<i64>> {
    let regions = h5.group(&format!("rank{rank}/likwid/regions")).unwrap_or_else(|e| panic!("rank{rank}/likwid: {e}"));
    regions
        .member_names()
        .unwrap()
        .into_iter()
        .map(|g| {
            let group = regions.group(&g).unwrap();
            (str_attr(&group, "tag"), group.dataset("call_counts").unwrap().read_raw::<i64>().unwrap())
        })
        .collect()
}

#[test]
fn nbody_under_likwid_perfctr_marker_mode() {
    let dir = scratch("example_nbody_likwid");
    let exe = build_c("nbody", "examples/nbody/nbody.c", &dir, false);
    let file = dir.join("nbody_likwid.h5");
    let out = run(under_fake_msr(&dir, &file)
        .args(["likwid-perfctr", "-M", "0", "-C", "0", "-g", "FLOPS_DP", "-m"])
        .arg(&exe)
        .args(["64", "2"]));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    // likwid-perfctr read our regions back from its marker file.
    for region in ["force_div", "force_rcp", "update", "step"] {
        assert!(stdout.contains(&format!("Region {region}, Group 1: FLOPS_DP")), "{region}:\n{stdout}");
    }
    let h5 = open(&file, 1, "C");
    check_nbody(&h5, 1, 2);
    let want: BTreeMap<String, Vec<i64>> =
        ["force_div", "force_rcp", "step", "update"].iter().map(|r| (r.to_string(), vec![2])).collect();
    assert_eq!(likwid_calls(&h5, 0), want);
}

#[test]
fn matmul_fortran_mpi_under_likwid_mpirun_marker() {
    need_cpus(2, "likwid-mpirun -np 2, one CPU per rank");
    let dir = scratch("example_matmul_f_mpi_likwid");
    let exe = build_fortran("mpif90", "examples/matmul/matmul.F90", &dir, "matmul_f_mpi", &["-DUSE_MPI"]);
    let file = dir.join("matmul_likwid.h5");
    let out = run(under_fake_msr(&dir, &file)
        .args(["likwid-mpirun", "-np", "2", "-g", "FLOPS_DP", "-mpi", "openmpi", "-marker"])
        .arg(&exe)
        // N = 256: each rank's matmul takes milliseconds, so the LIKWID marker's own start and
        // stop (tens of us through the stand-in MSRs, more on a loaded machine), which the
        // region encloses and the program's timing does not, stay a small share of it.
        .args(["256", "1000", "2"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("Region: matmul") && stdout.contains("Region: stream"), "{stdout}");
    let h5 = open(&file, 2, "Fortran");
    check_matmul(&stdout, &h5, 256, 2, 2);
    for rank in 0..2 {
        let want: BTreeMap<String, Vec<i64>> =
            [("matmul".to_string(), vec![1]), ("stream".to_string(), vec![2])].into();
        assert_eq!(likwid_calls(&h5, rank), want, "rank {rank}");
    }
}
