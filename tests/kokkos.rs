//! The library as a Kokkos tool: a Kokkos C++ program built against Debian's Kokkos 3.4
//! (Serial backend, `libtrilinos-kokkos-dev`) run with `KOKKOS_PROFILE_LIBRARY`, unlinked and
//! linked with regions of its own in between; the same program under mpirun on 2 ranks with
//! the MPI plugin; the adapter off; and a small C driver that loads the library through
//! `KOKKOS_TOOLS_LIBS` and calls it the way Kokkos 4 does (Debian 12 has no Kokkos 4).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::adapters::*;
use support::*;

const APP: &str = "tests/c/kokkos_app.cpp";

/// Build the Kokkos program with `compiler`; linked with the library when `linked`.
fn build(compiler: &str, name: &str, dir: &Path, linked: bool, defines: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    let mut cmd = Command::new(compiler);
    cmd.args(["-std=c++17", "-O1", "-g", "-Wall"])
        .arg("-I/usr/include/trilinos")
        .arg(format!("-I{}", repo_root().join("include").display()))
        .args(defines)
        .arg(repo_root().join(APP))
        .arg("-o")
        .arg(&exe);
    if linked {
        link_library(&mut cmd);
    }
    cmd.args(["-ltrilinos_kokkoscore", "-ldl"]);
    let out = run(&mut cmd);
    assert!(out.status.success(), "building {name} ({cmd:?}) failed (is libtrilinos-kokkos-dev installed? scripts/setup.sh):\n{}", text(&out.stderr));
    exe
}

/// What every run of tests/c/kokkos_app.cpp with `n` rounds records on a rank.
fn check_app(file: &hdf5::File, rank: usize, n: usize, own_regions: bool) {
    let regions = read_regions(file, rank);
    let names: Vec<&String> = regions.keys().collect();
    for (name, want) in [
        ("kk_fill [for]", n),
        ("kk_sum [reduce]", n),
        ("kk_scan [scan]", n),
        ("kk_outer", n),
        ("kk_inner", n),
        ("kk_section", n),
        ("deep_copy kk_h <- kk_b [Host <- Host]", n),
        ("Kokkos::View::initialization [kk_a] [for]", 1),
        ("Kokkos::View::initialization [kk_b] [for]", 1),
        ("Kokkos::View::initialization [kk_h] [for]", 1),
        ("kk_event [event]", 1),
        ("sp_mine", if own_regions { n } else { 0 }),
    ] {
        assert_eq!(calls(&regions, name), want, "calls of '{name}' on rank {rank}: regions {names:?}");
    }
    // The unlabelled kernel, by its functor's type demangled.
    let lambda: Vec<&&String> = names.iter().filter(|k| k.starts_with("main::{lambda(int)#") && k.ends_with("} [for]")).collect();
    assert_eq!(lambda.len(), 1, "the unlabelled kernel: {names:?}");
    assert_eq!(calls(&regions, lambda[0]), 1);
    // An event has no duration.
    let ev = &regions["kk_event [event]"];
    assert_eq!(ev.starts, ev.ends);
    nested(&regions, "kk_inner", "kk_outer");
    nested(&regions, "kk_sum [reduce]", "kk_inner");
    nested(&regions, "kk_scan [scan]", "kk_inner");
    nested(&regions, "deep_copy kk_h <- kk_b [Host <- Host]", "kk_section");
    nested(&regions, "kk_section", "kk_outer");
    if own_regions {
        nested(&regions, "kk_fill [for]", "sp_mine");
        nested(&regions, "kk_inner", "sp_mine");
        nested(&regions, "sp_mine", "kk_outer");
    } else {
        nested(&regions, "kk_fill [for]", "kk_outer");
    }
    for (name, r) in &regions {
        assert_eq!((r.open_calls, r.dropped_calls), (0, 0), "region '{name}'");
    }
    // Three views of 1000 doubles in the host space at once, freed by the end.
    let hwm = rank_int(file, rank, "counter_max:kokkos_bytes:Host");
    assert!(hwm.is_some_and(|b| b >= 3 * 8000), "high-water mark of the host space: {hwm:?}");
    // (Kokkos keeps scratch space of its own allocated until after the tool's finalize.)
    let now = rank_int(file, rank, "counter:kokkos_bytes:Host").unwrap_or(-1);
    assert!(now >= 0 && now + 3 * 8000 <= hwm.unwrap(), "bytes still allocated at the end: {now} of a high-water mark of {hwm:?}");
    let total = rank_int(file, rank, "counter:kokkos_allocated_bytes:Host");
    assert!(total.is_some_and(|b| b >= 3 * 8000), "bytes allocated in the host space: {total:?}");
}

#[test]
fn kokkos_program_through_kokkos_profile_library() {
    let dir = scratch("kokkos_plain");
    let exe = build("c++", "kokkos_app", &dir, false, &[]);
    let file = dir.join("kk.h5");
    let out = run(Command::new(&exe).arg("4").env("KOKKOS_PROFILE_LIBRARY", lib()).env("SCOPE_PROFILER_FILE", &file).env("SCOPE_PROFILER_LAYOUT", "regions"));
    ok(&out);
    let err = text(&out.stderr);
    assert!(file.exists(), "no profile written:\n{err}");
    let f = hdf5::File::open(&file).unwrap();
    check_app(&f, 0, 4, false);
    // The call-path tree: the kernels under their regions.
    let tree = sptool(&["tree", file.to_str().unwrap()]);
    for want in ["kk_outer", "kk_inner", "kk_sum [reduce]", "deep_copy kk_h <- kk_b [Host <- Host]"] {
        assert!(tree.contains(want), "sptool tree lacks '{want}':\n{tree}");
    }
    let inner_at = tree.lines().position(|l| l.contains("kk_inner")).unwrap();
    let outer_at = tree.lines().position(|l| l.contains("kk_outer")).unwrap();
    assert!(outer_at < inner_at, "kk_inner is not under kk_outer:\n{tree}");
    // sptool inspect names the source, and the memory spaces' high-water marks.
    let inspect = sptool(&["inspect", file.to_str().unwrap()]);
    for want in ["Sources of regions", "Kokkos 3.4", "(tools interface version 20210225)", "high-water mark per space", "Host 0.0"] {
        assert!(inspect.contains(want), "sptool inspect lacks '{want}':\n{inspect}");
    }
    // The deep copies' bytes: 4 copies of 1000 doubles (32,000 bytes, 3.2e-05 GB).
    let work = &inspect[inspect.find("FLOPs and bytes").expect("no FLOPs and bytes table")..];
    let row = work.lines().find(|l| l.trim_start().starts_with("deep_copy kk_h <- kk_b")).unwrap_or_else(|| panic!("no deep copy row:\n{work}"));
    assert!(row.contains("3.2e-05"), "the deep copies' bytes: {row}");
    // Every layout holds the kernels.
    for layout in ["columnar", "aggregate"] {
        let f2 = dir.join(format!("kk_{layout}.h5"));
        let out = run(Command::new(&exe).arg("2").env("KOKKOS_PROFILE_LIBRARY", lib()).env("SCOPE_PROFILER_FILE", &f2).env("SCOPE_PROFILER_LAYOUT", layout).env("SCOPE_PROFILER_VERBOSE", "0"));
        ok(&out);
        let view = python_view(&f2);
        for name in ["kk_fill [for]", "kk_inner", "deep_copy kk_h <- kk_b [Host <- Host]"] {
            assert_eq!(view["regions"][name]["0"]["calls"].as_u64(), Some(2), "layout {layout}, '{name}': {view}");
        }
    }
}

#[test]
fn linked_kokkos_program_with_regions_of_its_own() {
    let dir = scratch("kokkos_linked");
    let exe = build("c++", "kokkos_app_sp", &dir, true, &["-DWITH_SP"]);
    let file = dir.join("kk.h5");
    let out = run(Command::new(&exe).arg("3").env("KOKKOS_PROFILE_LIBRARY", lib()).env("SCOPE_PROFILER_FILE", &file));
    ok(&out);
    assert!(file.exists(), "no profile written:\n{}", text(&out.stderr));
    check_app(&hdf5::File::open(&file).unwrap(), 0, 3, true);
}

#[test]
fn kokkos_adapter_off() {
    let dir = scratch("kokkos_off");
    let exe = build("c++", "kokkos_app", &dir, false, &[]);
    let plain = run(Command::new(&exe).arg("2"));
    ok(&plain);
    for (var, value) in [("SCOPE_PROFILER_KOKKOS", "0"), ("SCOPE_PROFILER_DISABLE", "1")] {
        let file = dir.join("off.h5");
        let out = run(Command::new(&exe).arg("2").env("KOKKOS_PROFILE_LIBRARY", lib()).env("SCOPE_PROFILER_FILE", &file).env(var, value));
        ok(&out);
        assert!(!file.exists(), "{var}={value}: a profile was written");
        assert_eq!(text(&out.stdout), text(&plain.stdout), "{var}={value}: the program's output changed");
        assert!(!text(&out.stderr).contains("[scope_profiler]"), "{var}={value}: the library spoke:\n{}", text(&out.stderr));
    }
}

#[test]
fn kokkos_program_on_two_ranks_with_the_mpi_plugin() {
    need_cpus(2, "2 MPI ranks");
    let dir = scratch("kokkos_mpi");
    let exe = build("mpicxx.openmpi", "kokkos_app_mpi", &dir, false, &["-DWITH_MPI"]);
    let plugin = link_dir().join("libscope_profiler_mpi_openmpi.so");
    assert!(plugin.exists(), "{} missing", plugin.display());
    let file = dir.join("kk.h5");
    let mut cmd = Command::new("mpirun.openmpi");
    cmd.args(["--oversubscribe", "-np", "2"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .arg("-x")
        .arg(format!("LD_PRELOAD={}", plugin.display()))
        .arg("-x")
        .arg(format!("KOKKOS_PROFILE_LIBRARY={}", lib().display()))
        .arg("-x")
        .arg(format!("SCOPE_PROFILER_FILE={}", file.display()))
        .arg("-x")
        .arg("SCOPE_PROFILER_MPI=calls")
        .arg(&exe)
        .arg("3")
        .current_dir(&dir);
    let out = run(&mut cmd);
    ok(&out);
    assert!(file.exists(), "no profile written:\n{}", text(&out.stderr));
    let f = hdf5::File::open(&file).unwrap();
    for rank in 0..2 {
        check_app(&f, rank, 3, false);
        let regions = read_regions(&f, rank);
        assert_eq!(calls(&regions, "MPI_Allreduce"), 3, "rank {rank}: {:?}", regions.keys().collect::<Vec<_>>());
        nested(&regions, "MPI_Allreduce", "kk_outer");
    }
}

#[test]
fn kokkos_4_loading_through_kokkos_tools_libs() {
    let dir = scratch("kokkos4_driver");
    let exe = dir.join("kokkos4_driver");
    let out = run(Command::new("cc").args(["-std=c99", "-O1", "-Wall", "-Werror"]).arg(repo_root().join("tests/c/kokkos4_driver.c")).arg("-o").arg(&exe).arg("-ldl"));
    assert!(out.status.success(), "building the driver failed:\n{}", text(&out.stderr));
    let file = dir.join("k4.h5");
    let out = run(Command::new(&exe).args(["20240906", "3"]).env("KOKKOS_TOOLS_LIBS", lib()).env("SCOPE_PROFILER_FILE", &file));
    ok(&out);
    assert!(text(&out.stdout).contains("requires_global_fencing 0"), "the tool did not answer the settings request:\n{}", text(&out.stdout));
    let err = text(&out.stderr);
    let f = hdf5::File::open(&file).unwrap_or_else(|e| panic!("{}: {e}\n{err}", file.display()));
    let regions = read_regions(&f, 0);
    let names: Vec<&String> = regions.keys().collect();
    for (name, want) in [
        ("k4_step", 3),
        ("k4_for [for, Serial]", 3),
        ("k4_reduce [reduce, Cuda]", 3),
        ("k4_fence [fence, Serial]", 3),
        ("(null) [for, Serial]", 3),
        ("(unnamed) [for, Serial]", 3),
        ("bad \u{fffd}\u{fffd} label [for, Serial]", 3),
    ] {
        assert_eq!(calls(&regions, name), want, "calls of '{name}': {names:?}\n{err}");
    }
    let long: Vec<&&String> = names.iter().filter(|n| n.starts_with("LLLL")).collect();
    assert_eq!(long.len(), 1, "{names:?}");
    assert!(long[0].len() <= 1024 && long[0].ends_with(" [for, Serial]"), "{}", long[0]);
    nested(&regions, "k4_for [for, Serial]", "k4_step");
    for (name, r) in &regions {
        assert_eq!((r.open_calls, r.dropped_calls), (0, 0), "region '{name}'");
    }
    for said in ["a NULL name", "an empty name", "not UTF-8", "longer than", "popRegion without a pushRegion"] {
        assert_eq!(err.matches(said).count(), 1, "'{said}' said once:\n{err}");
    }
    // A version no Kokkos has: nothing recorded, said once.
    let file = dir.join("k4_bad.h5");
    let out = run(Command::new(&exe).args(["77", "2"]).env("KOKKOS_TOOLS_LIBS", lib()).env("SCOPE_PROFILER_FILE", &file));
    ok(&out);
    assert!(!file.exists(), "a profile was written for a bad interface version");
    assert_eq!(text(&out.stderr).matches("tools interface version 77").count(), 1, "{}", text(&out.stderr));
}
