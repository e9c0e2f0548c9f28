//! Functions compiled with -finstrument-functions (C, C++, Fortran), linked with the library and
//! never calling sp_*: every instrumented function is a region named after it, with exact call
//! counts, shared libraries included; the filter file and throttling.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::*;

/// Build `sources` with `compiler -finstrument-functions`, linked with the library (and `extra`).
fn build(compiler: &str, name: &str, sources: &[&str], dir: &Path, extra: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    let l = link_dir();
    let mut cmd = Command::new(compiler);
    cmd.args(["-finstrument-functions", "-O2", "-g", "-Wall"])
        .arg(format!("-I{}", repo_root().join("include").display()))
        .args(sources.iter().map(|s| repo_root().join(s)))
        .arg("-o")
        .arg(&exe)
        .args(extra)
        .arg(format!("-L{}", l.display()))
        .arg("-Wl,--disable-new-dtags")
        .arg(format!("-Wl,-rpath,{}", l.display()))
        .arg("-lscope_profiler");
    let out = run(&mut cmd);
    assert!(out.status.success(), "building {name} failed:\n{}", text(&out.stderr));
    exe
}

/// tests/c/instrumented.c with its second file and its instrumented shared library.
fn build_c(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let so = dir.join("libinstrumented_lib.so");
    if !so.exists() {
        let out = run(Command::new("gcc")
            .args(["-shared", "-fPIC", "-finstrument-functions", "-O2", "-g"])
            .arg(repo_root().join("tests/c/instrumented_lib.c"))
            .arg("-o")
            .arg(&so));
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    let libdir = format!("-L{}", dir.display());
    let mut all = vec![libdir.as_str(), rpath.as_str(), "-linstrumented_lib"];
    all.extend_from_slice(extra);
    build("gcc", name, &["tests/c/instrumented.c", "tests/c/instrumented_other.c"], dir, &all)
}

fn ok(out: &Output) {
    assert!(out.status.success(), "the program failed:\n{}{}", text(&out.stdout), text(&out.stderr));
}

fn counts(regions: &BTreeMap<String, ReadRegion>) -> BTreeMap<&str, usize> {
    regions.iter().map(|(k, r)| (k.as_str(), r.starts.len())).collect()
}

fn nested(regions: &BTreeMap<String, ReadRegion>, inner: &str, outer: &str) {
    let (i, o) = (&regions[inner], &regions[outer]);
    for k in 0..i.starts.len() {
        let inside = (0..o.starts.len()).any(|j| o.thread_ids[j] == i.thread_ids[k] && o.starts[j] <= i.starts[k] && i.ends[k] <= o.ends[j]);
        assert!(inside, "call {k} of '{inner}' is not inside a call of '{outer}'");
    }
}

/// A C program (two files, a shared library) that never calls sp_*: set up at its first
/// instrumented call, written at exit, every function with its exact calls. The two static
/// helper()s of the two files are one region.
#[test]
fn c_program_records_every_function() {
    let dir = scratch("functions_c");
    let exe = build_c(&dir, "instrumented", &[]);
    let file = dir.join("fn.h5");
    let out = run(Command::new(&exe).arg("100").env("SCOPE_PROFILER_FILE", &file).env_remove("SCOPE_PROFILER_THROTTLE"));
    ok(&out);
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("sp_finalize was not called") && !stderr.contains("throttled"), "{stderr}");
    let h5 = hdf5::File::open(&file).unwrap();
    let regions = read_regions(&h5, 0);
    let want: BTreeMap<&str, usize> =
        [("main", 1), ("mid", 100), ("leaf", 1000), ("helper", 5), ("other_calls_helper", 1), ("lib_twice", 7), ("tiny", 150)].into_iter().collect();
    assert_eq!(counts(&regions), want);
    nested(&regions, "leaf", "mid");
    nested(&regions, "mid", "main");
    nested(&regions, "lib_twice", "main");
    for r in regions.values() {
        assert_eq!((r.open_calls, r.dropped_calls), (0, 0), "{}", r.tag);
    }
    // Where each function is: its source file (the shared library's too), the first of helper's.
    let source = |name: &str| str_attr(&h5.group(&format!("rank0/regions/{name}")).unwrap(), "source_file");
    assert!(source("lib_twice").ends_with("tests/c/instrumented_lib.c"), "{}", source("lib_twice"));
    assert!(source("mid").ends_with("tests/c/instrumented.c"));
    assert!(source("helper").ends_with("tests/c/instrumented.c"));
    assert!(h5.group("rank0/regions/leaf").unwrap().attr("throttled").is_err());
    // The Python package reads the same numbers.
    let view = python_view(&file);
    for (name, n) in &want {
        assert_eq!(view["regions"][*name]["0"]["calls"].as_u64(), Some(*n as u64), "{name}");
    }
}

/// Threads whose first instrumented calls come together, before anything set profiling up:
/// the first hook sets it up while the other threads call too, and they wait for the setup
/// instead of losing their calls (every call of every thread is in the file). Two thread
/// counts and a few repetitions, since which thread comes first, and how far the others get
/// meanwhile, differs from run to run.
#[test]
fn threads_calling_during_the_implicit_setup_lose_no_call() {
    let dir = scratch("functions_first_calls");
    let exe = build("gcc", "functions_first_calls", &["tests/c/functions_first_calls.c"], &dir, &["-pthread"]);
    for (threads, calls) in [(2usize, 300_000usize), (4, 100_000), (2, 300_000), (4, 100_000)] {
        let file = dir.join("first.h5");
        let _ = std::fs::remove_file(&file);
        let mut cmd = Command::new(&exe);
        cmd.arg(threads.to_string()).arg(calls.to_string()).env("SCOPE_PROFILER_FILE", &file).env("SCOPE_PROFILER_THROTTLE", "off");
        let out = run(&mut cmd);
        ok(&out);
        let regions = read_regions(&hdf5::File::open(&file).unwrap(), 0);
        let tick = &regions["tick"];
        assert_eq!(
            (tick.starts.len(), tick.open_calls, tick.dropped_calls),
            (threads * calls, 0, 0),
            "{threads} threads x {calls} calls: {:?}\n{}",
            cmd,
            text(&out.stderr)
        );
        let mut per_thread = BTreeMap::new();
        for t in &tick.thread_ids {
            *per_thread.entry(*t).or_insert(0usize) += 1;
        }
        assert!(per_thread.len() == threads && per_thread.values().all(|&n| n == calls), "{per_thread:?}");
    }
}

/// C++: demangled names with their parameter lists; Fortran: module::procedure and the
/// external procedure's own name.
#[test]
fn cxx_and_fortran_names() {
    let dir = scratch("functions_cxx_fortran");
    let exe = build("g++", "instrumented_cxx", &["tests/c/instrumented.cpp"], &dir, &[]);
    let file = dir.join("cxx.h5");
    ok(&run(Command::new(&exe).env("SCOPE_PROFILER_FILE", &file)));
    let regions = read_regions(&hdf5::File::open(&file).unwrap(), 0);
    let want: BTreeMap<&str, usize> =
        [("main", 1), ("solver::Grid::step(int)", 12), ("double solver::twice<double>(double)", 5), ("int solver::twice<int>(int)", 1)].into_iter().collect();
    assert_eq!(counts(&regions), want);
    nested(&regions, "solver::Grid::step(int)", "main");

    let exe = build("gfortran", "instrumented_f", &["tests/fortran/instrumented.f90"], &dir, &[]);
    let file = dir.join("f.h5");
    ok(&run(Command::new(&exe).env("SCOPE_PROFILER_FILE", &file)));
    let h5 = hdf5::File::open(&file).unwrap();
    let regions = read_regions(&h5, 0);
    assert_eq!(regions["physics::flux"].starts.len(), 9, "{:?}", regions.keys());
    assert_eq!(regions["work"].starts.len(), 4, "{:?}", regions.keys());
    assert!(!regions.keys().any(|k| k.contains("_MOD_") || k == "work_"), "{:?}", regions.keys());
    assert_eq!(str_attr(&h5.group("metadata").unwrap(), "language"), "Fortran");
}

/// A filter file in Score-P's syntax: by function name, by source file, by library.
#[test]
fn filter_file() {
    let dir = scratch("functions_filter");
    let exe = build_c(&dir, "instrumented", &[]);
    let filter = dir.join("filter.txt");
    std::fs::write(
        &filter,
        "# keep the solver, not its leaves\n\
         SCOREP_REGION_NAMES_BEGIN\n\
           EXCLUDE leaf t?ny\n\
         SCOREP_REGION_NAMES_END\n\
         SCOREP_FILE_NAMES_BEGIN\n\
           EXCLUDE */instrumented_other.c\n\
                   */libinstrumented_lib.so\n\
         SCOREP_FILE_NAMES_END\n",
    )
    .unwrap();
    let file = dir.join("filtered.h5");
    let out = run(Command::new(&exe).arg("100").env("SCOPE_PROFILER_FILE", &file).env("SCOPE_PROFILER_FILTER", &filter));
    ok(&out);
    let regions = read_regions(&hdf5::File::open(&file).unwrap(), 0);
    // helper: only the two calls of instrumented.c's own.
    let want: BTreeMap<&str, usize> = [("main", 1), ("mid", 100), ("helper", 2)].into_iter().collect();
    assert_eq!(counts(&regions), want);
    // mid's time includes its (unrecorded) leaves: its exclusive time is all of it.
    // A broken filter file is reported, and everything is recorded.
    std::fs::write(&filter, "SCOREP_REGION_NAMES_BEGIN\nEXCLUDE leaf\n").unwrap();
    let out = run(Command::new(&exe).arg("10").env("SCOPE_PROFILER_FILE", &file).env("SCOPE_PROFILER_FILTER", &filter));
    ok(&out);
    assert!(text(&out.stderr).contains("SCOPE_PROFILER_FILTER=") && text(&out.stderr).contains("without its SCOREP_REGION_NAMES_END"), "{}", text(&out.stderr));
    assert_eq!(read_regions(&hdf5::File::open(&file).unwrap(), 0)["leaf"].starts.len(), 100);
}

/// Throttling: a function called more than N times at less than T per call stops being
/// recorded after its N+1st call, is marked `throttled` (regions attribute, schema-3 column)
/// and is reported once.
#[test]
fn throttling() {
    let dir = scratch("functions_throttle");
    let exe = build_c(&dir, "instrumented", &[]);
    for layout in ["regions", "aggregate"] {
        let file = dir.join(format!("throttled_{layout}.h5"));
        let out = run(Command::new(&exe).arg("100").env("SCOPE_PROFILER_FILE", &file).env("SCOPE_PROFILER_THROTTLE", "100,1000").env("SCOPE_PROFILER_LAYOUT", layout));
        ok(&out);
        let stderr = text(&out.stderr);
        let line: Vec<&str> = stderr.lines().filter(|l| l.contains("throttled")).collect();
        assert_eq!(line.len(), 1, "{stderr}");
        assert!(line[0].contains("2 instrumented function(s) throttled") && line[0].contains("'leaf'") && line[0].contains("'tiny'"), "{stderr}");
        let h5 = hdf5::File::open(&file).unwrap();
        if layout == "regions" {
            let regions = read_regions(&h5, 0);
            let want: BTreeMap<&str, usize> =
                [("main", 1), ("mid", 100), ("leaf", 101), ("helper", 5), ("other_calls_helper", 1), ("lib_twice", 7), ("tiny", 101)].into_iter().collect();
            assert_eq!(counts(&regions), want);
            for (name, r) in &regions {
                let marked = h5.group(&format!("rank0/regions/{}", r.group)).unwrap().attr("throttled").is_ok();
                assert_eq!(marked, name == "leaf" || name == "tiny", "{name}");
            }
        } else {
            let names: Vec<String> = h5.dataset("region_table/names").unwrap().read_raw::<hdf5::types::VarLenUnicode>().unwrap().iter().map(|s| s.to_string()).collect();
            let index = h5.group("rank_region_index").unwrap();
            let ids: Vec<u32> = index.dataset("region_ids").unwrap().read_raw().unwrap();
            let throttled: Vec<i8> = index.dataset("throttled").unwrap().read_raw().unwrap();
            let counts: Vec<u64> = index.dataset("aggregate_counts").unwrap().read_raw().unwrap();
            for ((id, t), c) in ids.iter().zip(&throttled).zip(&counts) {
                let name = &names[*id as usize];
                assert_eq!(*t != 0, name == "leaf" || name == "tiny", "{name}");
                if *t != 0 {
                    assert_eq!(*c, 101, "{name}");
                }
            }
        }
    }
}

/// A program that sets profiling up and finalizes it itself: its sp_setup takes over the run
/// the first instrumented call set up, the callers of sp_finalize are counted as open without a
/// warning, and calls after finalize are not recorded. SCOPE_PROFILER_FUNCTIONS=0 and
/// SCOPE_PROFILER_DISABLE=1: no file at all.
#[test]
fn setup_finalize_and_off() {
    let dir = scratch("functions_setup");
    let exe = build_c(&dir, "instrumented_setup", &["-DWITH_SETUP"]);
    let file = dir.join("setup.h5");
    let out = run(Command::new(&exe).arg("20").env("SCOPE_PROFILER_FILE", &file));
    ok(&out);
    assert!(!text(&out.stderr).contains("still open"), "{}", text(&out.stderr));
    let regions = read_regions(&hdf5::File::open(&file).unwrap(), 0);
    assert_eq!(regions["mid"].starts.len(), 20);
    assert_eq!(regions["leaf"].starts.len(), 200);
    assert_eq!((regions["main"].starts.len(), regions["main"].open_calls), (0, 1));
    for (var, value) in [("SCOPE_PROFILER_FUNCTIONS", "0"), ("SCOPE_PROFILER_DISABLE", "1")] {
        let exe = build_c(&dir, "instrumented", &[]);
        let none = dir.join("none.h5");
        let out = run(Command::new(&exe).arg("20").env("SCOPE_PROFILER_FILE", &none).env(var, value));
        ok(&out);
        assert!(!none.exists(), "{var}={value}");
        assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
    }
}

/// Instrumented code left the hard way, on the main thread and on two threads at once: C++
/// exceptions thrown through instrumented frames (their exits run as they unwind: every call
/// recorded), longjmp out of instrumented frames (the calls it left open are closed unrecorded
/// and counted in `dropped_calls` when the function that called setjmp returns), and recursion
/// deeper than the 4096 calls a thread may have open (the calls beyond are counted in
/// `dropped_calls`, and the thread records again once back). Nothing stays falsely open; then
/// the same with the filter excluding some of these functions and throttling others.
#[test]
fn exceptions_longjmp_and_deep_recursion() {
    let dir = scratch("functions_hostile");
    let exe = build("g++", "instrumented_hostile", &["tests/c/instrumented_hostile.cpp"], &dir, &["-pthread", "-Wno-infinite-recursion"]);
    let (rounds, depth) = (50usize, 6000usize);
    let threads = 3;
    let file = dir.join("hostile.h5");
    let started = std::time::Instant::now();
    let out = run(Command::new(&exe).args([rounds.to_string(), depth.to_string()]).env("SCOPE_PROFILER_FILE", &file).env("SCOPE_PROFILER_THROTTLE", "off"));
    ok(&out);
    assert!(started.elapsed().as_secs() < 60, "the run took {:?}", started.elapsed());
    assert_eq!(text(&out.stdout).lines().last(), Some(format!("caught {}", rounds * threads).as_str()), "{}", text(&out.stderr));
    let h5 = hdf5::File::open(&file).unwrap();
    call_log_pages(&h5, true);
    let regions = read_regions(&h5, 0);
    let get = |name: &str| regions.get(name).unwrap_or_else(|| panic!("no region '{name}' in {:?}", regions.keys().collect::<Vec<_>>()));
    // Exceptions: every call of thrower (6 a throw) and catcher recorded, none open or dropped.
    assert_eq!(get("thrower(int)").starts.len(), 6 * rounds * threads);
    assert_eq!(get("catcher()").starts.len(), rounds * threads);
    // longjmp: jump_root recorded; the 4 jumper calls of each jump dropped, none recorded.
    assert_eq!(get("jump_root()").starts.len(), rounds * threads);
    let jumper = get("jumper(int)");
    assert_eq!((jumper.starts.len(), jumper.dropped_calls), (0, (4 * rounds * threads) as i64));
    // Deep recursion: what the stack held recorded, the rest counted, and recording goes on.
    let d = get("deep(int)");
    let recorded = d.starts.len();
    assert_eq!(recorded + d.dropped_calls as usize, depth * threads, "recorded {recorded}, dropped {}", d.dropped_calls);
    assert!(recorded <= 4096 * threads && d.dropped_calls as usize >= (depth - 4096) * threads, "recorded {recorded}, dropped {}", d.dropped_calls);
    assert_eq!(get("after()").starts.len(), 10 * threads);
    for (name, r) in &regions {
        assert_eq!(r.open_calls, 0, "{name} falsely open");
        if !matches!(name.as_str(), "jumper(int)" | "deep(int)") {
            assert_eq!(r.dropped_calls, 0, "{name}");
        }
    }
    // The filter excludes thrower and after, throttling (after 20 calls on a thread) stops
    // catcher: what is recorded stays exact.
    let filter = dir.join("filter.txt");
    std::fs::write(&filter, "SCOREP_REGION_NAMES_BEGIN\nEXCLUDE thrower* after*\nSCOREP_REGION_NAMES_END\n").unwrap();
    let out = run(Command::new(&exe)
        .args([rounds.to_string(), depth.to_string()])
        .env("SCOPE_PROFILER_FILE", &file)
        .env("SCOPE_PROFILER_FILTER", &filter)
        .env("SCOPE_PROFILER_THROTTLE", "20,1000000"));
    ok(&out);
    let regions = read_regions(&hdf5::File::open(&file).unwrap(), 0);
    assert!(!regions.contains_key("thrower(int)") && !regions.contains_key("after()"), "{:?}", regions.keys().collect::<Vec<_>>());
    // Throttled after its 21st call on the thread that throttled it; the others stop at their
    // next call once no call of it is open there.
    let n = regions["catcher()"].starts.len();
    assert!((21..=21 * threads).contains(&n), "catcher(): {n}");
    // jump_root's calls end with the jumps' calls open inside them: closed out of order, they
    // are recorded but not timed for throttling.
    assert_eq!(regions["jump_root()"].starts.len(), rounds * threads);
    // The jumps a throttled jump_root no longer closes are closed by the thread's outer calls.
    assert_eq!(regions["jumper(int)"].dropped_calls, (4 * rounds * threads) as i64);
    for (name, r) in &regions {
        assert_eq!(r.open_calls, 0, "{name} falsely open");
    }
    let stderr = text(&out.stderr);
    assert!(stderr.contains("instrumented function(s) throttled") && stderr.contains("'catcher()'"), "{stderr}");
    // The calls' chunks off the huge-page blocks: no attribute.
    let out = run(Command::new(&exe).args(["2", "10"]).env("SCOPE_PROFILER_FILE", &file).env("SCOPE_PROFILER_HUGE_PAGES", "0"));
    ok(&out);
    call_log_pages(&hdf5::File::open(&file).unwrap(), false);
}

/// `metadata/call_log_pages`: what the kernel gave the blocks of the calls' chunks, present when
/// transparent huge pages are offered (`always`, `madvise`) and the blocks are used (`used`).
fn call_log_pages(h5: &hdf5::File, used: bool) {
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let offered = thp.contains("[always]") || thp.contains("[madvise]");
    let meta = h5.group("metadata").unwrap();
    if !(offered && used) {
        assert!(meta.attr("call_log_pages").is_err(), "THP {thp:?}, used {used}: the attribute should be absent");
        return;
    }
    let pages = str_attr(&meta, "call_log_pages");
    // Huge pages, or small ones because the kernel gave them, or because a huge page's first
    // touch cost more than the small pages it replaces (a VM's host backing fresh memory), or
    // because a VM guest does not ask for them.
    assert!(
        pages == "2 MiB (transparent huge pages)"
            || pages.starts_with("4 KiB (the kernel gave small pages: ")
            || pages.starts_with("2 MiB, then 4 KiB (the first touch of huge block ")
            || pages.starts_with("4 KiB (a VM guest: huge pages not asked for"),
        "{pages}"
    );
}
