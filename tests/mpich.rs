//! Programs built with MPICH (the other MPI ABI family: MPICH, Intel MPI, Cray MPICH) instead
//! of Debian's default OpenMPI, run with MPICH's mpiexec against the same library, which loads
//! its MPICH plugin: one file with every rank, also when MPI_Finalize comes first, and over a
//! split communicator.

mod support;
use support::*;

use std::path::Path;
use std::process::Command;

fn regions_per_rank(file: &Path, ranks: usize) -> Vec<std::collections::BTreeMap<String, usize>> {
    let h5 = hdf5::File::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert_eq!(int_attr(&h5.group("metadata").unwrap(), "mpi_size"), ranks as i64);
    let groups = h5.member_names().unwrap().into_iter().filter(|g| g.starts_with("rank")).count();
    assert_eq!(groups, ranks);
    (0..ranks).map(|r| read_regions(&h5, r).into_iter().map(|(k, v)| (k, v.starts.len())).collect()).collect()
}

#[test]
fn one_library_serves_mpich_programs_through_its_mpich_plugin() {
    let root = repo_root();
    // The core links no MPI; the plugin built with mpicc.mpich sits next to it.
    let lib = link_dir();
    let needed = text(&run(Command::new("readelf").arg("-d").arg(lib.join("libscope_profiler.so"))).stdout);
    assert!(!needed.contains("libmpi"), "the core library links an MPI library:\n{needed}");
    let plugin = lib.join("libscope_profiler_mpi_mpich.so");
    let needed = text(&run(Command::new("readelf").arg("-d").arg(&plugin)).stdout);
    assert!(needed.contains("libmpich.so"), "{} is not linked against MPICH:\n{needed}", plugin.display());

    let dir = scratch("mpich");
    let exe = dir.join("mpi_ranks");
    let out = run(Command::new("mpicc.mpich")
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{}", root.join("include").display()))
        .arg(root.join("tests/c/mpi_ranks.c"))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lscope_profiler"));
    assert!(out.status.success(), "{}", text(&out.stderr));

    for mode in ["normal", "mpi_first", "split"] {
        let file = dir.join(format!("{mode}.h5"));
        // cargo test puts the OpenMPI build's directories on LD_LIBRARY_PATH: drop them.
        let out = run(Command::new("mpiexec.mpich")
            .args(["-n", "4"])
            .arg(&exe)
            .arg(&file)
            .arg(mode)
            .current_dir(&dir)
            .env_remove("LD_LIBRARY_PATH"));
        assert!(out.status.success(), "{mode}: {}\n{}", text(&out.stdout), text(&out.stderr));
        let (files, world): (Vec<_>, Vec<Vec<usize>>) = if mode == "split" {
            (vec![dir.join("split.color0.h5"), dir.join("split.color1.h5")], vec![vec![0, 2], vec![1, 3]])
        } else {
            (vec![file], vec![vec![0, 1, 2, 3]])
        };
        for (f, world) in files.iter().zip(world) {
            let per_rank = regions_per_rank(f, world.len());
            for (r, w) in world.iter().enumerate() {
                assert_eq!(per_rank[r]["compute"], (w + 1) * 10, "{mode} rank {r}");
                assert_eq!(per_rank[r]["comm/allreduce"], 5);
                assert_eq!(per_rank[r][&format!("rank {w} only")], 1);
            }
        }
    }
}

/// The collective write through MPICH's MPI-IO (ROMIO, asked for: on one node the ranks write
/// with pwrite by default) and by the ranks themselves writes what the rank-0 path writes from
/// the same data (`SCOPE_PROFILER_TEST_REFERENCE`), in both schema-3 layouts.
#[test]
fn the_collective_write_works_through_mpich() {
    let root = repo_root();
    let lib = link_dir();
    let dir = scratch("mpich_collective");
    let exe = dir.join("mpi_collective");
    let out = run(Command::new("mpicc.mpich")
        .args(["-std=c99", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{}", root.join("include").display()))
        .arg(root.join("tests/c/mpi_collective.c"))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lscope_profiler", "-lpthread"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    for (layout, io) in [("columnar", "mpiio"), ("aggregate", "mpiio"), ("columnar", "auto")] {
        let (file, reference) = (dir.join(format!("{layout}_{io}.h5")), dir.join(format!("{layout}_{io}.rank0.h5")));
        let out = run(Command::new("mpiexec.mpich")
            .args(["-n", "5"])
            .arg(&exe)
            .arg(&file)
            .arg("400")
            .current_dir(&dir)
            .env("SCOPE_PROFILER_LAYOUT", layout)
            .env("SCOPE_PROFILER_COLLECTIVE_IO", io)
            .env("SCOPE_PROFILER_VERBOSE", "2")
            .env("SCOPE_PROFILER_TEST_REFERENCE", &reference)
            .env_remove("LD_LIBRARY_PATH"));
        assert!(out.status.success(), "{layout} {io}: {}\n{}", text(&out.stdout), text(&out.stderr));
        let way = if io == "mpiio" { "(MPI-IO)" } else { "(one node: pwrite by every rank)" };
        assert!(text(&out.stderr).contains(&format!("collective write on rank 0 {way}")), "{layout} {io}: {}", text(&out.stderr));
        let cmp = run(Command::new(python()).arg(root.join("tests/python/compare_files.py")).arg(&file).arg(&reference));
        assert!(cmp.status.success(), "{layout}: the collective file differs from the rank-0 file:\n{}{}", text(&cmp.stdout), text(&cmp.stderr));
        let py = python_view(&file);
        assert_eq!(py["num_ranks"], 5);
        assert_eq!(py["regions"]["solve"]["4"]["calls"], 400 * 5, "{layout}");
        assert!(py["regions"]["solve"].get("3").is_none(), "{layout}: rank 3 records nothing");
    }
}
