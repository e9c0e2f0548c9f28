//! MPI runs for real (OpenMPI's mpirun, several ranks): one file per run with every rank,
//! whatever the order of sp_finalize and MPI_Finalize, a split communicator, and the
//! per-rank fallback with its merge step.

mod support;
use support::*;

use std::path::{Path, PathBuf};
use std::process::Command;

fn mpirun(np: usize, exe: &Path, args: &[&str], dir: &Path) -> std::process::Output {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "-np", &np.to_string()])
        .arg(exe)
        .args(args)
        .current_dir(dir)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    let out = run(&mut cmd);
    assert!(out.status.success(), "mpirun -np {np} {exe:?} {args:?} failed\nstdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    out
}

fn build(dir: &Path) -> PathBuf {
    compile_with("mpicc", &["-std=c99", "-D_GNU_SOURCE"], "mpi_ranks", &["tests/c/mpi_ranks.c"], dir, &[])
}

/// The file holds exactly ranks 0..n with each rank's calls, metadata and rank attributes.
fn check_file(file: &Path, n: usize, world_ranks: &[i64]) {
    let h5 = hdf5::File::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut groups: Vec<String> = h5.member_names().unwrap().into_iter().filter(|g| g.starts_with("rank")).collect();
    groups.sort();
    let mut want: Vec<String> = (0..n).map(|r| format!("rank{r}")).collect();
    want.sort();
    assert_eq!(groups, want);
    let meta = h5.group("metadata").unwrap();
    assert_eq!(int_attr(&meta, "mpi_size"), n as i64);
    assert_eq!(int_attr(&meta, "num_nodes"), 1);
    assert_eq!(int_attr(&meta, "total_cores"), n as i64 * int_attr(&meta, "omp_num_threads"));
    let mut pids = std::collections::BTreeSet::new();
    let mut allreduce: Vec<(Vec<i64>, Vec<i64>)> = Vec::new();
    for r in 0..n {
        let world = world_ranks[r];
        let g = h5.group(&format!("rank{r}")).unwrap();
        pids.insert(int_attr(&g, "pid"));
        assert_eq!(str_attr(&g, "hostname"), crate_hostname());
        assert_eq!(int_attr(&g, "num_threads"), 1);
        assert!(!int_list_attr(&g, "cpus").is_empty());
        assert_eq!(int_attr(&g, "mpi_rank"), r as i64);
        let rtt = int_attr(&g, "clock_offset_rtt_ns");
        let offset = int_attr(&g, "clock_offset_ns");
        if r == 0 {
            assert_eq!((offset, rtt), (0, 0));
        } else {
            // One host, one clock: the offset is within the probe's round trip.
            assert!(rtt > 0 && offset.abs() <= rtt, "rank {r}: offset {offset} rtt {rtt}");
        }
        let regions = read_regions(&h5, r);
        assert_eq!(regions["compute"].starts.len() as i64, (world + 1) * 10, "rank {r}");
        assert_eq!(regions["comm/allreduce"].starts.len(), 5);
        allreduce.push((regions["comm/allreduce"].starts.clone(), regions["comm/allreduce"].ends.clone()));
        // Each rank converted its own clock (the TSC where safe) and says so.
        assert_eq!(str_attr(&g, "clock_status"), "ok", "rank {r}");
        assert_eq!(str_attr(&g, "clock"), str_attr(&h5.group("rank0").unwrap(), "clock"), "one host, one clock choice");
        assert_eq!(regions[&format!("rank {world} only")].starts.len(), 1);
        assert_eq!(regions.len(), 3);
    }
    assert_eq!(pids.len(), n, "every rank group comes from its own process");
    // The run's clock in metadata/: the ranks' choice, the largest of their bounds, their status.
    let meta = h5.group("metadata").unwrap();
    assert_eq!(str_attr(&meta, "clock"), str_attr(&h5.group("rank0").unwrap(), "clock"));
    let bounds: Vec<i64> = (0..n).map(|r| int_attr(&h5.group(&format!("rank{r}")).unwrap(), "clock_error_bound_ns")).collect();
    assert_eq!(int_attr(&meta, "clock_error_bound_ns"), *bounds.iter().max().unwrap());
    assert_eq!(str_attr(&meta, "clock_status"), "ok");
    // No rank leaves an MPI_Allreduce before every rank entered it: on one host (one
    // CLOCK_MONOTONIC) the k-th calls of all ranks overlap, which holds only if every rank's
    // ticks became the same nanoseconds (2 us allowed for the conversion).
    for k in 0..5 {
        let latest_start = allreduce.iter().map(|(s, _)| s[k]).max().unwrap();
        let earliest_end = allreduce.iter().map(|(_, e)| e[k]).min().unwrap();
        assert!(latest_start <= earliest_end + 2000, "allreduce {k}: a rank started at {latest_start}, after another ended at {earliest_end}");
    }
}

fn crate_hostname() -> String {
    scope_profiler::metadata::hostname()
}

fn check_python(file: &Path, n: usize, world_ranks: &[i64]) {
    let py = python_view(file);
    assert_eq!(py["num_ranks"].as_u64().unwrap() as usize, n);
    for r in 0..n {
        let calls = py["regions"]["compute"][r.to_string()]["calls"].as_i64().unwrap();
        assert_eq!(calls, (world_ranks[r] + 1) * 10);
        assert_eq!(py["regions"]["comm|allreduce"][r.to_string()]["calls"], 5);
    }
}

#[test]
fn one_file_with_every_rank_for_1_2_and_4_ranks() {
    let dir = scratch("mpi_sizes");
    let exe = build(&dir);
    for n in [1usize, 2, 4] {
        let file = dir.join(format!("np{n}.h5"));
        let out = mpirun(n, &exe, &[file.to_str().unwrap(), "normal"], &dir);
        let stdout = text(&out.stdout);
        // Rank 0 alone prints the pooled summary.
        assert_eq!(stdout.matches("scope_profiler summary").count(), 1, "{stdout}");
        if n > 1 {
            assert!(stdout.contains(&format!("; {n} ranks: time per rank, mean, min and max over the ranks")), "{stdout}");
        }
        let ranks: Vec<i64> = (0..n as i64).collect();
        check_file(&file, n, &ranks);
        check_python(&file, n, &ranks);
    }
}

#[test]
fn mpi_finalize_before_sp_finalize_still_gathers() {
    let dir = scratch("mpi_order");
    let exe = build(&dir);
    for mode in ["mpi_first", "no_finalize", "setup_before_init"] {
        let file = dir.join(format!("{mode}.h5"));
        mpirun(3, &exe, &[file.to_str().unwrap(), mode], &dir);
        check_file(&file, 3, &[0, 1, 2]);
    }
}

#[test]
fn split_communicator_gets_its_own_file() {
    let dir = scratch("mpi_split");
    let exe = build(&dir);
    let file = dir.join("split.h5");
    mpirun(4, &exe, &[file.to_str().unwrap(), "split"], &dir);
    // Colour 0 holds world ranks 0 and 2, colour 1 world ranks 1 and 3.
    for (color, world) in [(0, [0i64, 2]), (1, [1, 3])] {
        let f = dir.join(format!("split.color{color}.h5"));
        check_file(&f, 2, &world);
        let h5 = hdf5::File::open(&f).unwrap();
        for (r, w) in world.iter().enumerate() {
            let g = h5.group(&format!("rank{r}")).unwrap();
            if *w != r as i64 {
                assert_eq!(int_attr(&g, "world_rank"), *w);
            }
        }
    }
}

#[test]
fn without_mpi_each_rank_writes_its_own_file_and_merge_combines_them() {
    let dir = scratch("mpi_rank_files");
    // A program that never initializes MPI, started by mpirun: MPI is not usable.
    let exe = compile(Lang::C, "simple", &["tests/c/simple.c"], &dir, &[]);
    let out = mpirun(2, &exe, &[], &dir);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("MPI is not initialized: rank 0 wrote its own file"), "{stderr}");
    let files: Vec<PathBuf> = (0..2).map(|r| dir.join(format!("profiling_data.rank{r}.h5"))).collect();
    for (r, f) in files.iter().enumerate() {
        let h5 = hdf5::File::open(f).unwrap();
        assert_eq!(read_regions(&h5, r)["step"].starts.len(), 3);
        assert_eq!(int_attr(&h5.group("metadata").unwrap(), "partial_rank_file"), 1);
    }
    // Rank 1's clock as a misbehaving TSC would leave it (a stand-in: this machine's clock
    // behaves), so the merge must pool the ranks' clocks, not keep the first file's.
    {
        use scope_profiler::model::AttrValue;
        let h5 = hdf5::File::open_rw(&files[1]).unwrap();
        let g = h5.group("rank1").unwrap();
        assert!(g.attr("clock_status").is_ok(), "rank files record their clock");
        scope_profiler::writer::replace_attr(&g, "clock_status", &AttrValue::Str("ticks went backwards".into())).unwrap();
        scope_profiler::writer::replace_attr(&g, "clock_error_bound_ns", &AttrValue::Int(999_999)).unwrap();
    }
    let merged = dir.join("merged.h5");
    let out = run(Command::new(env!("CARGO_BIN_EXE_scope_profiler_merge")).arg("-o").arg(&merged).args(&files));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let h5 = hdf5::File::open(&merged).unwrap();
    let meta = h5.group("metadata").unwrap();
    assert!(str_attr(&meta, "clock_status").contains("rank(s) 1"), "{}", str_attr(&meta, "clock_status"));
    assert_eq!(int_attr(&meta, "clock_error_bound_ns"), 999_999);
    assert_eq!(str_attr(&h5.group("rank0").unwrap(), "clock_status"), "ok");
    assert_eq!(int_attr(&meta, "mpi_size"), 2);
    assert_eq!(int_attr(&meta, "num_nodes"), 1);
    assert!(meta.attr("partial_rank_file").is_err());
    for r in 0..2 {
        assert_eq!(read_regions(&h5, r)["step"].starts.len(), 3);
    }
    let py = python_view(&merged);
    assert_eq!(py["num_ranks"], 2);
    assert_eq!(py["regions"]["step"]["1"]["calls"], 3);
    // Merging the same rank twice is refused.
    let out = run(Command::new(env!("CARGO_BIN_EXE_scope_profiler_merge")).arg("-o").arg(dir.join("bad.h5")).args([&files[0], &files[0]]));
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("rank 0 appears in more than one input file"), "{}", text(&out.stderr));
}

#[test]
fn a_rank_that_exits_on_its_own_writes_its_file_and_never_hangs_the_job() {
    let dir = scratch("mpi_rank_exits");
    let exe = build(&dir);
    let file = dir.join("exits.h5");
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "-np", "3"])
        .arg(&exe)
        .arg(&file)
        .arg("rank1_exits")
        .current_dir(&dir)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    let started = std::time::Instant::now();
    let out = run(&mut cmd); // fails the test on a hang (timeout)
    assert!(!out.status.success(), "the launcher reports the failed rank");
    assert!(started.elapsed() < std::time::Duration::from_secs(120));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("rank 1 wrote its own file"), "{stderr}");
    let h5 = hdf5::File::open(dir.join("exits.rank1.h5")).unwrap();
    let regions = read_regions(&h5, 1);
    assert_eq!(regions["compute"].starts.len(), 20);
    assert_eq!(regions["rank 1 only"].starts.len(), 1);
}

/// The columnar and aggregate layouts gather into one file too, with every rank's calls
/// (also when the gather runs from inside MPI_Finalize).
#[test]
fn columnar_and_aggregate_layouts_gather_every_rank_into_one_file() {
    let dir = scratch("mpi_layouts");
    let exe = build(&dir);
    for layout in ["columnar", "aggregate"] {
        for mode in ["normal", "mpi_first"] {
            let file = dir.join(format!("{layout}_{mode}.h5"));
            let mut cmd = Command::new("mpirun");
            cmd.args(["--oversubscribe", "-np", "3"])
                .arg(&exe)
                .args([file.to_str().unwrap(), mode])
                .current_dir(&dir)
                .env("SCOPE_PROFILER_LAYOUT", layout)
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
                .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
            let out = run(&mut cmd);
            assert!(out.status.success(), "{layout} {mode}: {}\n{}", text(&out.stdout), text(&out.stderr));
            let h5 = hdf5::File::open(&file).unwrap();
            assert_eq!(int_attr(&h5, "scope_profiler_schema"), 3);
            assert_eq!(str_attr(&h5, "storage_layout"), layout);
            for r in 0..3 {
                // The rank attributes are rows of the rank table; no rank has a group (no
                // counters, no LIKWID).
                assert_eq!(rank_int(&h5, r, "mpi_rank"), Some(r as i64), "{layout} {mode}");
                assert_eq!(rank_str(&h5, r, "hostname"), Some(crate_hostname()), "{layout} {mode}");
                assert!(h5.group(&format!("rank{r}")).is_err(), "{layout} {mode}");
            }
            let py = python_view(&file);
            assert_eq!(py["num_ranks"], 3, "{layout} {mode}");
            for r in 0..3i64 {
                assert_eq!(py["regions"]["compute"][r.to_string()]["calls"].as_i64(), Some((r + 1) * 10), "{layout} {mode}");
                assert_eq!(py["regions"]["comm/allreduce"][r.to_string()]["calls"], 5, "{layout} {mode}");
                assert_eq!(py["regions"][format!("rank {r} only")][r.to_string()]["calls"], 1, "{layout} {mode}");
            }
        }
    }
}

/// Per-rank files of the columnar and aggregate layouts combine too: the merge reads their
/// region tables back and writes them again in the same layout.
#[test]
fn merge_combines_per_rank_files_of_the_schema3_layouts() {
    for layout in ["columnar", "aggregate"] {
        let dir = scratch(&format!("mpi_rank_files_{layout}"));
        let exe = compile(Lang::C, "simple", &["tests/c/simple.c"], &dir, &[]);
        let mut cmd = Command::new("mpirun");
        cmd.args(["--oversubscribe", "-np", "2"])
            .arg(&exe)
            .current_dir(&dir)
            .env("SCOPE_PROFILER_LAYOUT", layout)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        let out = run(&mut cmd);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let files: Vec<PathBuf> = (0..2).map(|r| dir.join(format!("profiling_data.rank{r}.h5"))).collect();
        let merged = dir.join("merged.h5");
        let out = run(Command::new(env!("CARGO_BIN_EXE_scope_profiler_merge")).arg("-o").arg(&merged).args(&files));
        assert!(out.status.success(), "{layout}: {}", text(&out.stderr));
        let h5 = hdf5::File::open(&merged).unwrap();
        assert_eq!(int_attr(&h5, "scope_profiler_schema"), 3);
        assert_eq!(str_attr(&h5, "storage_layout"), layout);
        drop(h5);
        let py = python_view(&merged);
        assert_eq!(py["num_ranks"], 2, "{layout}");
        for r in 0..2 {
            assert_eq!(py["regions"]["step"][r.to_string()]["calls"], 3, "{layout} rank {r}");
            let single = python_view(&files[r]);
            assert_eq!(py["regions"]["step"][r.to_string()]["total_ns"], single["regions"]["step"][r.to_string()]["total_ns"], "{layout}");
            assert_eq!(py["regions"]["step"][r.to_string()]["starts_ns"], single["regions"]["step"][r.to_string()]["starts_ns"], "{layout}");
        }
        // Source locations survive the merge: a program that registers its regions with them.
        let exe = compile(Lang::C, "source_locations", &["tests/c/source_locations.c"], &dir, &[]);
        let mut cmd = Command::new("mpirun");
        cmd.args(["--oversubscribe", "-np", "2"]).arg(&exe).arg(dir.join("at.h5")).current_dir(&dir).env("SCOPE_PROFILER_LAYOUT", layout);
        let out = run(cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"));
        assert!(out.status.success(), "{}", text(&out.stderr));
        let inputs: Vec<PathBuf> = (0..2).map(|r| dir.join(format!("at.rank{r}.h5"))).collect();
        let merged = dir.join("at_merged.h5");
        let out = run(Command::new(env!("CARGO_BIN_EXE_scope_profiler_merge")).arg("-o").arg(&merged).args(&inputs));
        assert!(out.status.success(), "{layout}: {}", text(&out.stderr));
        let rows = |f: &PathBuf| -> std::collections::BTreeSet<(u32, String, String, i64)> {
            let h5 = hdf5::File::open(f).unwrap();
            let names = strings(&h5.dataset("region_table/names").unwrap());
            let col = |n: &str| h5.dataset(&format!("rank_region_index/{n}")).unwrap();
            let (ranks, ids): (Vec<u32>, Vec<u32>) = (col("ranks").read_raw().unwrap(), col("region_ids").read_raw().unwrap());
            let files = strings(&col("source_files"));
            let lines: Vec<i64> = col("source_lines").read_raw().unwrap();
            (0..ranks.len()).map(|i| (ranks[i], names[ids[i] as usize].clone(), files[i].clone(), lines[i])).collect()
        };
        let want: std::collections::BTreeSet<_> = inputs.iter().flat_map(rows).collect();
        assert!(want.iter().any(|r| r.2.ends_with("source_locations.c") && r.3 > 0), "{layout}: {want:?}");
        assert_eq!(rows(&merged), want, "{layout}");
    }
}
