//! The core C ABI end to end: a C program with nested, recursive and multi-threaded regions,
//! odd names and deliberate misuse; the file it leaves is read back with the hdf5 crate and
//! with the PyPI package's `read_h5`, and must hold exactly the calls it made.

mod support;
use support::*;

use std::process::Command;

fn run_core_usage(dir: &std::path::Path, env: &[(&str, &str)]) -> (std::process::Output, std::path::PathBuf) {
    let exe = compile(Lang::C, "core_usage", &["tests/c/core_usage.c"], dir, &["-lpthread"]);
    let file = dir.join("core.h5");
    let mut cmd = Command::new(&exe);
    cmd.arg(&file).current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    (run(&mut cmd), file)
}

#[test]
fn c_program_file_holds_exactly_the_calls_made() {
    let dir = scratch("core_c_api");
    let (out, file) = run_core_usage(&dir, &[]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "program failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("DONE failures=0"), "{stdout}");
    let expected = expectations(&stdout);

    // The summary table is printed, costliest first, and names the file.
    assert!(stdout.contains("scope_profiler summary"), "{stdout}");
    assert!(stdout.contains(&format!("profile written to {}", file.display())), "{stdout}");
    // Misuse is reported once per region on stderr.
    assert_eq!(stderr.matches("stop of region 'never started'").count(), 1, "{stderr}");
    assert!(stderr.contains("region 'left open': 2 call(s) still open at finalize"), "{stderr}");
    assert!(stderr.contains("'misnested inner'"), "{stderr}");
    assert!(!file.with_file_name("core.h5.tmp").exists());

    let h5 = hdf5::File::open(&file).unwrap();
    assert_eq!(h5.attr("scope_profiler_schema").unwrap().read_scalar::<i64>().unwrap(), 1);
    let meta = h5.group("metadata").unwrap();
    assert_eq!(int_attr(&meta, "mpi_size"), 1);
    assert_eq!(int_attr(&meta, "num_nodes"), 1);
    assert_eq!(str_attr(&meta, "language"), "C");
    assert!(str_attr(&meta, "timestamp").ends_with("+00:00"));
    let rank = h5.group("rank0").unwrap();
    assert_eq!(int_attr(&rank, "pid") as u32, out_pid(&stdout).unwrap_or(int_attr(&rank, "pid") as u32));
    assert_eq!(int_attr(&rank, "num_threads"), 5, "main thread + 4 workers recorded");
    assert_eq!(int_list_attr(&rank, "thread_os_ids").len(), 5);
    assert!(!int_list_attr(&rank, "cpus").is_empty());

    let regions = read_regions(&h5, 0);
    for (name, &calls) in &expected {
        let r = regions.get(name).unwrap_or_else(|| panic!("region {name:?} missing; have {:?}", regions.keys()));
        assert_eq!(r.starts.len() as u64, calls, "calls of {name:?}");
    }
    let names: Vec<&String> = regions.keys().collect();
    let expected_names: Vec<&String> = expected.keys().collect();
    assert_eq!(names, expected_names, "no other regions (bad names and misuse recorded nothing)");

    // Names: '/' is '|' in the group name, the tag keeps the real name.
    assert_eq!(regions["a/b"].group, "a|b");
    assert_eq!(regions["thread/total"].group, "thread|total");
    assert_eq!(regions[&"L".repeat(200)].group.len(), 200);
    // Threads: each worker thread's calls carry its own id; the main thread is 0.
    let mut worker_threads: Vec<i64> = regions["worker"].thread_ids.clone();
    worker_threads.sort();
    worker_threads.dedup();
    assert_eq!(worker_threads, vec![1, 2, 3, 4]);
    assert!(regions["solve"].thread_ids.iter().all(|&t| t == 0));
    // Nesting: every inner call lies within an outer call.
    let (outer, inner) = (&regions["outer"], &regions["inner"]);
    for i in 0..10 {
        assert!(outer.starts[i] <= inner.starts[i] && inner.ends[i] <= outer.ends[i]);
    }
    // Recursion: six calls, properly nested (sorted by start, so ends decrease).
    let rec = &regions["recurse"];
    assert!(rec.ends.windows(2).all(|w| w[0] > w[1]), "{rec:?}");
    // Misuse accounting.
    assert_eq!(regions["left open"].open_calls, 2);
    assert_eq!(regions["misnested inner"].dropped_calls, 1);
    assert_eq!(regions["solve"].open_calls, 0);
}

fn out_pid(_stdout: &str) -> Option<u32> {
    None
}

#[test]
fn python_reader_sees_the_same_calls_and_durations() {
    let dir = scratch("core_c_api_python");
    let (out, file) = run_core_usage(&dir, &[("SCOPE_PROFILER_VERBOSE", "0")]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(!text(&out.stdout).contains("scope_profiler summary"), "verbosity 0 prints no table");
    let h5 = hdf5::File::open(&file).unwrap();
    let ours = read_regions(&h5, 0);
    let py = python_view(&file);
    assert_eq!(py["num_ranks"], 1);
    assert_eq!(py["metadata"]["mpi_size"], 1);
    let py_regions = py["regions"].as_object().unwrap();
    // Schema 1 readers name a region by its group name ('/' shown as '|').
    assert_eq!(py_regions.len(), ours.len());
    for r in ours.values() {
        let p = &py_regions.get(&r.group).unwrap_or_else(|| panic!("Python lacks {:?}", r.group))["0"];
        assert_eq!(p["calls"].as_u64().unwrap(), r.starts.len() as u64, "{}", r.tag);
        let total: i64 = r.starts.iter().zip(&r.ends).map(|(s, e)| e - s).sum();
        assert_eq!(p["total_ns"].as_i64().unwrap(), total, "{}", r.tag);
        if let Some(d) = p["durations_ns"].as_array() {
            let ours_d: Vec<i64> = r.starts.iter().zip(&r.ends).map(|(s, e)| e - s).collect();
            let theirs: Vec<i64> = d.iter().map(|v| v.as_i64().unwrap()).collect();
            assert_eq!(theirs, ours_d, "{}", r.tag);
        }
    }
    // The package's command-line inspector reads it too.
    let cli = python().parent().unwrap().join("scope-profiler");
    let out = run(Command::new(&cli).arg("inspect").arg(&file));
    assert!(out.status.success(), "scope-profiler inspect failed: {}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("solve") && shown.contains("worker inner"), "{shown}");
}

#[test]
fn disabled_run_writes_nothing_and_every_call_succeeds() {
    let dir = scratch("core_c_api_disabled");
    let exe = compile(Lang::C, "disabled", &["tests/c/disabled.c"], &dir, &[]);
    let out = run(Command::new(&exe).current_dir(&dir).env("SCOPE_PROFILER_DISABLE", "1"));
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!dir.join("profiling_data.h5").exists());
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
}

#[test]
fn unwritable_directory_falls_back_and_says_where() {
    let dir = scratch("core_c_api_fallback");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let exe = compile(Lang::C, "simple", &["tests/c/simple.c"], &dir, &[]);
    let out = run(Command::new(&exe)
        .current_dir(&dir)
        .env("SCOPE_PROFILER_FILE", "/proc/not/writable/run.h5")
        .env("TMPDIR", &tmp));
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let written: Vec<_> = std::fs::read_dir(&tmp).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(written.len(), 1, "{written:?}");
    let path = &written[0];
    assert!(stderr.contains("cannot write /proc/not/writable/run.h5"), "{stderr}");
    assert!(stderr.contains(&format!("profile written to {} instead", path.display())), "{stderr}");
    let regions = read_regions(&hdf5::File::open(path).unwrap(), 0);
    assert_eq!(regions["step"].starts.len(), 3);
}

/// A file system that fills up while the profile is written (a real 4 MiB tmpfs as the
/// target directory, for a 14 MB profile; mounting needs root, which the test machines have):
/// the profile is written again in the fallback directory, with every call, and the message
/// says why and where; nothing is left on the full file system. In both call layouts.
#[test]
fn full_file_system_at_finalize_writes_the_profile_elsewhere() {
    let dir = scratch("core_c_api_full_fs");
    let (small, tmp) = (dir.join("small_fs"), dir.join("tmp"));
    std::fs::create_dir_all(&small).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let exe = compile(Lang::C, "finalize_threads", &["tests/c/finalize_threads.c"], &dir, &["-lpthread"]);
    let m = run(Command::new("mount").args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"]).arg(&small));
    assert!(m.status.success(), "cannot mount a small tmpfs (root needed): {}", text(&m.stderr));
    let mut results = Vec::new();
    for layout in ["regions", "columnar"] {
        let target = small.join(format!("{layout}.h5"));
        let out = run(Command::new(&exe).arg(&target).current_dir(&dir).env("TMPDIR", &tmp).env("SCOPE_PROFILER_LAYOUT", layout));
        let left: Vec<_> = std::fs::read_dir(&small).unwrap().flatten().map(|e| e.path()).collect();
        results.push((layout, out, left));
    }
    let _ = Command::new("umount").arg(&small).status();
    for (layout, out, left) in results {
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{layout}: {stderr}");
        let written: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.path()).filter(|p| p.to_string_lossy().contains(layout)).collect();
        assert_eq!(written.len(), 1, "{layout}: {written:?}");
        let path = &written[0];
        assert!(stderr.contains(&format!("writing {} failed", small.join(format!("{layout}.h5")).display())), "{layout}: {stderr}");
        assert!(stderr.contains(&format!("profile written to {} instead", path.display())), "{layout}: {stderr}");
        assert!(left.is_empty(), "{layout}: left on the full file system: {left:?}");
        let py = python_view(path);
        for (name, calls) in expectations(&text(&out.stdout)) {
            assert_eq!(py["regions"][&name]["0"]["calls"].as_u64(), Some(calls), "{layout}: {name}");
        }
    }
}

#[test]
fn never_finalized_program_still_leaves_its_file() {
    let dir = scratch("core_c_api_atexit");
    let exe = compile(Lang::C, "simple", &["tests/c/simple.c"], &dir, &["-DSKIP_FINALIZE"]);
    let out = run(Command::new(&exe).current_dir(&dir));
    assert!(out.status.success());
    assert!(text(&out.stderr).contains("sp_finalize was not called"), "{}", text(&out.stderr));
    let regions = read_regions(&hdf5::File::open(dir.join("profiling_data.h5")).unwrap(), 0);
    assert_eq!(regions["step"].starts.len(), 3);
}

#[test]
fn header_compiles_as_cxx_with_strict_warnings() {
    let dir = scratch("core_c_api_cxx");
    let exe = compile(Lang::Cxx, "simple_cxx", &["tests/c/simple.c"], &dir, &["-x", "none"]);
    let out = run(Command::new(&exe).current_dir(&dir).env("SCOPE_PROFILER_VERBOSE", "0"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(read_regions(&hdf5::File::open(dir.join("profiling_data.h5")).unwrap(), 0)["step"].starts.len(), 3);
}

#[test]
fn c_program_is_clean_under_address_and_undefined_sanitizers() {
    let dir = scratch("core_c_api_asan");
    let exe = compile_with(
        "cc",
        &["-std=c99", "-D_GNU_SOURCE", "-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"],
        "core_usage_asan",
        &["tests/c/core_usage.c"],
        &dir,
        &["-lpthread"],
    );
    let file = dir.join("asan.h5");
    // Leak checking is off: HDF5 and the MPI library keep global allocations until exit.
    let out = run(Command::new(&exe).arg(&file).current_dir(&dir).env("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=0"));
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    assert!(!text(&out.stderr).contains("ERROR: AddressSanitizer"), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("DONE failures=0"));
}

#[test]
fn c_program_is_clean_under_valgrind_memcheck() {
    let dir = scratch("core_c_api_valgrind");
    let exe = compile(Lang::C, "core_usage", &["tests/c/core_usage.c"], &dir, &["-lpthread"]);
    let file = dir.join("vg.h5");
    let out = run(Command::new("valgrind")
        .args(["--error-exitcode=99", "--errors-for-leak-kinds=none", "--quiet"])
        .arg(&exe)
        .arg(&file)
        .current_dir(&dir)
        .env("SCOPE_PROFILER_VERBOSE", "0"));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "valgrind reported errors:\n{stderr}");
    assert!(text(&out.stdout).contains("DONE failures=0"));
    assert_eq!(read_regions(&hdf5::File::open(&file).unwrap(), 0)["worker"].starts.len(), 1000);
}

#[test]
fn openmp_threads_each_record_their_calls() {
    let dir = scratch("core_c_api_openmp");
    let exe = compile(Lang::C, "openmp_regions", &["tests/c/openmp_regions.c"], &dir, &["-fopenmp"]);
    let file = dir.join("omp.h5");
    let out = run(Command::new(&exe).arg(&file).current_dir(&dir).env("OMP_NUM_THREADS", "3"));
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("threads=3 bad=0"), "{}", text(&out.stdout));
    let h5 = hdf5::File::open(&file).unwrap();
    // The library asked the OpenMP runtime, not just the environment.
    assert_eq!(int_attr(&h5.group("metadata").unwrap(), "omp_num_threads"), 3);
    assert_eq!(int_attr(&h5.group("rank0").unwrap(), "num_threads"), 3);
    let regions = read_regions(&h5, 0);
    assert_eq!(regions["omp body"].starts.len(), 300);
    assert_eq!(regions["omp inner"].starts.len(), 300);
    let mut threads = regions["omp body"].thread_ids.clone();
    threads.sort();
    threads.dedup();
    assert_eq!(threads, vec![0, 1, 2]);
    for t in 0..3 {
        assert_eq!(regions["omp body"].thread_ids.iter().filter(|&&x| x == t).count(), 100);
    }
}

#[test]
fn python_ctypes_host_can_dlopen_the_library_and_profile() {
    // A host that loads the library at run time (initial-exec TLS must fit the static TLS
    // surplus) and links no MPI itself.
    let dir = scratch("core_c_api_ctypes");
    let file = dir.join("py.h5");
    let script = format!(
        r#"
import ctypes, sys
lib = ctypes.CDLL({lib:?})
assert lib.sp_setup(None) == 0
for i in range(7):
    assert lib.sp_region_start(b"from python") == 0
    assert lib.sp_region_stop(b"from python") == 0
assert lib.sp_region_stop(b"from python") == -11
lib.sp_last_error.restype = ctypes.c_char_p
assert b"not open" in lib.sp_last_error(), lib.sp_last_error()
assert lib.sp_finalize() == 0
"#,
        lib = link_dir().join("libscope_profiler.so").to_str().unwrap()
    );
    let out = run(Command::new(python()).arg("-c").arg(&script).current_dir(&dir).env("SCOPE_PROFILER_FILE", &file));
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(read_regions(&hdf5::File::open(&file).unwrap(), 0)["from python"].starts.len(), 7);
}

#[test]
fn relative_file_path_is_relative_to_the_directory_at_setup() {
    let dir = scratch("core_c_api_chdir");
    let exe = compile(Lang::C, "simple_chdir", &["tests/c/simple.c"], &dir, &["-DCHDIR_AFTER_SETUP"]);
    let out = run(Command::new(&exe).current_dir(&dir).env("SCOPE_PROFILER_FILE", "run/relative.h5").env("SCOPE_PROFILER_VERBOSE", "0"));
    assert!(!std::path::Path::new("/run/relative.h5").exists());
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The run/ directory does not exist: the fallback message names the absolute target.
    assert!(text(&out.stderr).contains(&format!("cannot write {}", dir.join("run/relative.h5").display())), "{}", text(&out.stderr));
    std::fs::create_dir_all(dir.join("run")).unwrap();
    let out = run(Command::new(&exe).current_dir(&dir).env("SCOPE_PROFILER_FILE", "run/relative.h5").env("SCOPE_PROFILER_VERBOSE", "0"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(read_regions(&hdf5::File::open(dir.join("run/relative.h5")).unwrap(), 0)["step"].starts.len(), 3);
}

/// Blank-padded names (the Fortran module's calls): the padding is not part of the name, a
/// reused buffer never hits a stale cache entry, and the limits apply to the trimmed name.
#[test]
fn blank_padded_names_are_trimmed_without_stale_hits() {
    let dir = scratch("core_c_api_padded");
    let exe = compile(Lang::C, "padded_names", &["tests/c/padded_names.c"], &dir, &[]);
    let file = dir.join("padded.h5");
    let out = run(Command::new(&exe).arg(&file).current_dir(&dir));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success() && stdout.contains("DONE failures=0"), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let expected = expectations(&stdout);
    let regions = read_regions(&hdf5::File::open(&file).unwrap(), 0);
    assert_eq!(regions.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>(), "no other regions");
    for (name, &calls) in &expected {
        assert_eq!(regions[name].starts.len() as u64, calls, "calls of {name:?}");
    }
}
