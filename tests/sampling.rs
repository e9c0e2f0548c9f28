//! Sampling for real: `tests/c/sampling.c` (built with -g) spends known CPU time on known
//! source lines in each region, on two threads; the samples must land on those lines (at
//! least 70 % of each region's samples) as read by the PyPI package, both from the `.sps`
//! file (`read_samples` + `line_profile`, what `scope-profiler native-lines` does) and from
//! the profile (`read_profile(...).line_profile`, what `scope-profiler line-profile` prints),
//! and by `sptool lines`. Also: perf events refused (a real seccomp filter) and the timer
//! fallback, a program with its own SIGPROF profiling, a program owning the signal the
//! sampler would take and one forcing the sampler onto its own signal (chaining), sampling
//! started and stopped mid-run, no samples without the switch, MPI ranks, Fortran and C++.
//!
//! No timing is asserted: the regions run for a given CPU time, and only where the samples
//! fall is checked (a loaded machine gives the same samples, later).

mod support;
use support::*;

#[path = "fortran/support.rs"]
mod fortran_support;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The share of a region's samples that must be on its hot line.
const MIN_SHARE: f64 = 0.7;

fn build(dir: &Path) -> PathBuf {
    compile(Lang::C, "sampling", &["tests/c/sampling.c"], dir, &["-lpthread"])
}

/// region -> line of its `HOT:<region>` marker in `source` (relative to the repo root).
fn hot_lines(source: &str) -> BTreeMap<String, u32> {
    let text = std::fs::read_to_string(repo_root().join(source)).unwrap();
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let at = l.find("HOT:")?;
            let name: String = l[at + 4..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            (!l.trim_start().starts_with('*') && !name.is_empty()).then(|| (name, i as u32 + 1))
        })
        .collect()
}

fn run_mode(exe: &Path, dir: &Path, file: &str, mode: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(exe);
    cmd.arg(dir.join(file)).arg(mode).current_dir(dir);
    for v in ["SCOPE_PROFILER_SAMPLE_HZ", "SCOPE_PROFILER_SAMPLE_SOURCE", "SCOPE_PROFILER_SAMPLE_SIGNAL", "SCOPE_PROFILER_FILE"] {
        cmd.env_remove(v);
    }
    cmd.env("SCOPE_PROFILER_VERBOSE", "0");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd);
    assert!(
        out.status.success() && text(&out.stdout).contains("DONE"),
        "sampling {mode} failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

fn info(stdout: &str, key: &str) -> i64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("INFO\t{key}\t")))
        .unwrap_or_else(|| panic!("no INFO {key} in\n{stdout}"))
        .trim()
        .parse()
        .unwrap()
}

/// The PyPI package's view (tests/python/check_samples.py).
fn python_samples(h5: &Path, sps: &[PathBuf]) -> Value {
    let out = run(Command::new(python()).arg(repo_root().join("tests/python/check_samples.py")).arg(h5).args(sps));
    assert!(out.status.success(), "check_samples.py failed:\n{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("bad JSON from check_samples.py: {e}\n{}", text(&out.stdout)))
}

/// Of `region` (`{"total", "lines": {"sampling.c:56": n}}`): at least `min_total` samples and
/// MIN_SHARE of them on `file:line`.
#[track_caller]
fn check_region(what: &str, region: &Value, file: &str, line: u32, min_total: i64) {
    let total = region["total"].as_i64().unwrap_or(0);
    let on = region["lines"][format!("{file}:{line}")].as_i64().unwrap_or(0);
    assert!(total >= min_total, "{what}: only {total} samples (at least {min_total} expected): {region}");
    let share = on as f64 / total as f64;
    assert!(share >= MIN_SHARE, "{what}: {on} of {total} samples ({:.1} %) on {file}:{line}, expected >= {} %: {region}", 100.0 * share, 100.0 * MIN_SHARE);
}

fn sps_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "sps")).collect();
    v.sort();
    v
}

/// Every region of `regions` (and the samples outside every region, when `outside` names
/// the line) on its hot line, in the .sps file and in the profile, for every rank.
fn check_python(h5: &Path, sps: &[PathBuf], regions: &[&str], outside: Option<&str>, min_total: i64) -> Value {
    let hot = hot_lines("tests/c/sampling.c");
    let py = python_samples(h5, sps);
    let ranks = sps.len();
    assert_eq!(py["sps"].as_array().unwrap().len(), ranks);
    for s in py["sps"].as_array().unwrap() {
        assert_eq!(s["samples"], s["ticks"], "every sample taken is in the .sps file: {s}");
        for r in regions {
            check_region(&format!(".sps {} region {r}", s["path"]), &s["regions"][*r], "sampling.c", hot[*r], min_total);
        }
        assert!(s["outside"].as_i64().unwrap() >= if outside.is_some() { min_total } else { 0 }, "{s}");
    }
    for rank in 0..ranks {
        let h = &py["h5"][rank.to_string()];
        for r in regions {
            check_region(&format!("profile rank {rank} region {r}"), &h[*r], "sampling.c", hot[*r], min_total);
        }
        if let Some(o) = outside {
            check_region(&format!("profile rank {rank} outside regions"), &h["(outside regions)"], "sampling.c", hot[o], min_total);
        }
        let cli = py["cli"].as_str().unwrap();
        for r in regions {
            assert!(cli.contains(&format!("Rank {rank} | {r} | hot_{r} (")), "scope-profiler line-profile shows rank {rank} {r}:\n{cli}");
        }
    }
    py
}

/// The workspace's sptool.
fn sptool(args: &[&str]) -> Output {
    let exe = lib_dir().join("sptool");
    assert!(exe.exists(), "{} not found: run `cargo build --workspace` first", exe.display());
    // Wide enough that a stray sample in a long-named function (a library frame) does not
    // squeeze the source column until the hot line's text is clipped in the middle.
    run(Command::new(exe).args(args).env("COLUMNS", "400"))
}

/// `sptool lines`: each region's hot line first, with its source text.
fn check_sptool(h5: &Path, regions: &[&str]) -> String {
    let hot = hot_lines("tests/c/sampling.c");
    let out = sptool(&["lines", h5.to_str().unwrap(), "--top", "3"]);
    let report = text(&out.stdout);
    assert!(out.status.success(), "sptool lines: {}\n{report}", text(&out.stderr));
    for r in regions {
        let block = report.split(&format!("\n{r}: ")).nth(1).unwrap_or_else(|| panic!("no region {r} in\n{report}"));
        let first = block.lines().nth(2).unwrap_or_default();
        // The line, its function, and its source text (clipped).
        let source = format!("static double hot_{r}(long n) {{");
        assert!(
            first.contains(&format!("sampling.c:{} ", hot[*r])) && first.contains(&format!(" hot_{r} ")) && first.contains(&source),
            "{r}: hottest line should be {}:\n{report}",
            hot[*r]
        );
        let share: f64 = first.split_whitespace().next().unwrap().trim_end_matches('%').parse().unwrap();
        assert!(share >= 100.0 * MIN_SHARE, "{first}");
    }
    report
}

struct Sampling {
    mechanism: String,
    signal: i64,
    threads: i64,
    ticks: i64,
    thread_ids: Vec<i64>,
    hz: i64,
}

fn sampling_group(h5: &Path, rank: usize) -> Sampling {
    let f = hdf5::File::open(h5).unwrap();
    let g = f.group(&format!("rank{rank}/sampling")).unwrap_or_else(|e| panic!("{}: no rank{rank}/sampling: {e}", h5.display()));
    let mut thread_ids: Vec<i64> = g.dataset("samples/thread").unwrap().read_raw().unwrap();
    thread_ids.sort();
    thread_ids.dedup();
    Sampling {
        mechanism: str_attr(&g, "mechanism"),
        signal: int_attr(&g, "signal"),
        threads: int_attr(&g, "threads"),
        ticks: int_attr(&g, "ticks"),
        thread_ids,
        hz: int_attr(&g, "hz"),
    }
}

/// The line_profile records are the Python writer's: attribute and dataset types.
fn check_record_types(h5: &Path) {
    use hdf5::types::{FloatSize, IntSize, TypeDescriptor};
    let f = hdf5::File::open(h5).unwrap();
    let lp = f.group("rank0/line_profile").unwrap();
    let names = lp.member_names().unwrap();
    assert!(!names.is_empty());
    for n in names {
        let g = lp.group(&n).unwrap();
        for a in ["region", "filename", "function"] {
            assert!(matches!(g.attr(a).unwrap().dtype().unwrap().to_descriptor().unwrap(), TypeDescriptor::VarLenUnicode), "{n}/{a}");
        }
        assert_eq!(g.attr("first_lineno").unwrap().dtype().unwrap().to_descriptor().unwrap(), TypeDescriptor::Integer(IntSize::U8));
        assert_eq!(g.attr("unit").unwrap().dtype().unwrap().to_descriptor().unwrap(), TypeDescriptor::Float(FloatSize::U8));
        for d in ["line_numbers", "hits"] {
            assert_eq!(g.dataset(d).unwrap().dtype().unwrap().to_descriptor().unwrap(), TypeDescriptor::Integer(IntSize::U8), "{n}/{d}");
        }
        assert_eq!(g.dataset("times").unwrap().dtype().unwrap().to_descriptor().unwrap(), TypeDescriptor::Float(FloatSize::U8));
    }
}

#[test]
fn every_thread_is_sampled_and_the_python_package_finds_the_hot_lines() {
    need_cpus(2, "two sampled threads");
    let dir = scratch("sampling_threads");
    let exe = build(&dir);
    let out = run_mode(&exe, &dir, "threads.h5", "threads", &[("SCOPE_PROFILER_SAMPLE_HZ", "1000")]);
    let stdout = text(&out.stdout);
    let h5 = dir.join("threads.h5");
    let sps = sps_files(&dir);
    assert_eq!(sps, vec![dir.join("threads_rank00000.sps")], "one .sps file next to the profile");
    // inner runs inside outer: its samples are inner's (the innermost region), not outer's.
    check_python(&h5, &sps, &["alpha", "beta", "outer", "inner"], Some("outside"), 100);
    check_record_types(&h5);
    let s = sampling_group(&h5, 0);
    assert_eq!(s.mechanism, "perf task-clock", "perf_event_open is allowed here (perf_event_paranoid 2)");
    assert_eq!(s.threads, 2);
    assert_eq!(s.thread_ids, vec![0, 1], "both threads' samples, under their file thread ids");
    assert_eq!(s.hz, 1000);
    assert!(s.signal >= libc::SIGRTMIN() as i64 && s.signal <= libc::SIGRTMAX() as i64 && s.signal != libc::SIGPROF as i64, "{}", s.signal);
    // The second thread's event went with it; none is left after finalize.
    assert_eq!((info(&stdout, "perf_fds_after_join"), info(&stdout, "perf_fds_finalized")), (1, 0), "{stdout}");
    assert_eq!(info(&stdout, "timers_finalized"), 0);
    assert!(s.ticks > 0);
    let report = check_sptool(&h5, &["alpha", "beta", "outer", "inner"]);
    assert!(report.contains("(outside regions): "), "{report}");
}

/// A program installed stripped, its debug information split off into `.debug/<name>.debug`
/// beside it and named by its `.gnu_debuglink` (as the CMake package installs our own binaries,
/// and as distributions ship programs): its samples are still named by file and line, read
/// from the debug file, and `sptool lines` shows them with their source text. Without the debug
/// file the hot function is still named (its symbol table stays), with no line, never a wrong one.
#[test]
fn a_stripped_program_is_resolved_through_its_split_debug_file() {
    need_cpus(2, "two sampled threads");
    let dir = scratch("sampling_split_debug");
    let exe = build(&dir);
    let debug_dir = dir.join(".debug");
    std::fs::create_dir_all(&debug_dir).unwrap();
    let debug = debug_dir.join("sampling.debug");
    let objcopy = |args: &[&std::ffi::OsStr]| {
        let o = run(Command::new("objcopy").args(args));
        assert!(o.status.success(), "objcopy {args:?}: {}", text(&o.stderr));
    };
    objcopy(&["--only-keep-debug".as_ref(), exe.as_os_str(), debug.as_os_str()]);
    let link = format!("--add-gnu-debuglink={}", debug.display());
    objcopy(&["--strip-debug".as_ref(), link.as_ref(), exe.as_os_str()]);
    let sections = text(&run(Command::new("readelf").args(["-S", "-W"]).arg(&exe)).stdout);
    assert!(!sections.contains(".debug_line") && sections.contains(".gnu_debuglink"), "the program is stripped and links its debug file:\n{sections}");
    let regions = ["alpha", "beta", "outer", "inner"];
    run_mode(&exe, &dir, "split.h5", "threads", &[("SCOPE_PROFILER_SAMPLE_HZ", "1000")]);
    check_sptool(&dir.join("split.h5"), &regions);
    // Without the debug file: the function from the symbol table, no file and line.
    std::fs::remove_file(&debug).unwrap();
    run_mode(&exe, &dir, "bare.h5", "threads", &[("SCOPE_PROFILER_SAMPLE_HZ", "1000")]);
    let recs = records(&dir.join("bare.h5"));
    for r in regions {
        let top = recs.iter().find(|x| x.0 == r).unwrap_or_else(|| panic!("no samples in {r}: {recs:#?}"));
        assert!(top.1 == format!("hot_{r}") && !top.2.contains("sampling.c"), "{r} without its debug file: {recs:#?}");
    }
}

#[test]
fn perf_events_refused_falls_back_to_a_timer_per_thread() {
    need_cpus(2, "two sampled threads");
    let dir = scratch("sampling_seccomp");
    let exe = build(&dir);
    // The program installs a seccomp filter that makes perf_event_open fail with EACCES (as
    // kernel.perf_event_paranoid = 3 does) before sp_setup. The timers tick with the kernel's
    // clock tick (CONFIG_HZ, 100 to 1000 Hz): regions run longer to get enough samples.
    let out = run_mode(&exe, &dir, "timer.h5", "seccomp", &[("SCOPE_PROFILER_SAMPLE_HZ", "1000"), ("SAMPLING_TEST_SECONDS", "1.2")]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("perf events are refused here") && stderr.contains("Permission denied"), "the fallback is said once:\n{stderr}");
    let h5 = dir.join("timer.h5");
    check_python(&h5, &sps_files(&dir), &["alpha", "beta", "outer", "inner"], Some("outside"), 60);
    let s = sampling_group(&h5, 0);
    assert_eq!(s.mechanism, "timer");
    assert_eq!(s.thread_ids, vec![0, 1]);
    // One timer per live thread: the second thread's was deleted when it ended.
    assert_eq!((info(&stdout, "timers_setup"), info(&stdout, "timers_after_join"), info(&stdout, "timers_finalized")), (1, 1, 0), "{stdout}");
    assert_eq!(info(&stdout, "perf_fds_after_join"), 0);
    // The timer's overruns are weighed in: the samples stand for the regions' CPU time.
    let f = hdf5::File::open(&h5).unwrap();
    let ns: Vec<u64> = f.dataset("rank0/sampling/samples/time_ns").unwrap().read_raw().unwrap();
    let seconds = ns.iter().sum::<u64>() as f64 * 1e-9;
    assert!(seconds > 0.8 * 5.0 * 1.2, "{seconds} s of CPU time in the samples, 6 s spent");
}

#[test]
fn a_program_profiling_itself_with_sigprof_keeps_its_timer_and_handler() {
    need_cpus(2, "two sampled threads");
    let dir = scratch("sampling_sigprof");
    let exe = build(&dir);
    let out = run_mode(&exe, &dir, "p.h5", "sigprof", &[("SCOPE_PROFILER_SAMPLE_HZ", "1000")]);
    let stdout = text(&out.stdout);
    // setitimer(ITIMER_PROF) every 5 ms of the process's CPU time (2.5 s of it): ~500 ticks.
    let host = info(&stdout, "host_sigprof");
    assert!(host >= 100, "the program's own SIGPROF handler ran {host} times:\n{stdout}");
    let h5 = dir.join("p.h5");
    check_python(&h5, &sps_files(&dir), &["alpha", "beta", "inner"], Some("outside"), 100);
    assert_ne!(sampling_group(&h5, 0).signal, libc::SIGPROF as i64);
}

#[test]
fn the_programs_own_real_time_signal_is_left_to_it_or_chained() {
    need_cpus(2, "two sampled threads");
    let dir = scratch("sampling_chain");
    let exe = build(&dir);
    // The program handles SIGRTMIN+4 (the first signal the sampler would take): the sampler
    // takes another, and the program's own raise() reaches its handler.
    let out = run_mode(&exe, &dir, "a.h5", "chain", &[("SCOPE_PROFILER_SAMPLE_HZ", "1000"), ("SAMPLING_TEST_SECONDS", "0.3")]);
    assert_eq!(info(&text(&out.stdout), "host_rt"), 3);
    let h5 = dir.join("a.h5");
    let s = sampling_group(&h5, 0);
    assert_ne!(s.signal, (libc::SIGRTMIN() + 4) as i64, "the program's signal is not taken");
    check_python(&h5, &sps_files(&dir), &["alpha", "beta"], None, 50);

    // Forced onto the program's signal: ours handles the samples and passes the program's
    // own signals to its handler.
    let dir = scratch("sampling_chain_forced");
    let out = run_mode(&exe, &dir, "b.h5", "chain", &[("SCOPE_PROFILER_SAMPLE_HZ", "1000"), ("SAMPLING_TEST_SECONDS", "0.3"), ("SCOPE_PROFILER_SAMPLE_SIGNAL", "RTMIN+4")]);
    assert_eq!(info(&text(&out.stdout), "host_rt"), 3, "the program's handler gets its own signals through ours");
    let h5 = dir.join("b.h5");
    assert_eq!(sampling_group(&h5, 0).signal, (libc::SIGRTMIN() + 4) as i64);
    check_python(&h5, &sps_files(&dir), &["alpha", "beta"], None, 50);
}

/// A program that takes the sampling signal over after setup (its own handler on every
/// real-time signal) gets the samples from then on: that is said once on stderr, in the file
/// (`sampling/handler_replaced`), in the finalize line and by `sptool lines`, never shown as a
/// clean "0 samples, 0 lost". The program's handler and exit status are left alone.
#[test]
fn a_program_that_takes_the_sampling_signal_over_is_said_in_the_file() {
    need_cpus(2, "two sampled threads");
    for source in ["perf", "timer"] {
        let dir = scratch(&format!("sampling_takeover_{source}"));
        let exe = build(&dir);
        let out = run_mode(
            &exe,
            &dir,
            "t.h5",
            "takeover",
            &[("SCOPE_PROFILER_SAMPLE_HZ", "1000"), ("SAMPLING_TEST_SECONDS", "0.2"), ("SCOPE_PROFILER_SAMPLE_SOURCE", source), ("SCOPE_PROFILER_VERBOSE", "1")],
        );
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(info(&stdout, "host_taken") > 0, "the program's handler got the samples:\n{stdout}");
        assert_eq!(stderr.matches("replaced the handler of the sampling signal").count(), 1, "said once:\n{stderr}");
        assert!(stdout.contains("NOT ALL COUNTED"), "{stdout}");
        let f = hdf5::File::open(dir.join("t.h5")).unwrap();
        let said = str_attr(&f.group("rank0/sampling").unwrap(), "handler_replaced");
        assert!(said.contains("replaced the handler"), "{said}");
        let lines = sptool(&["lines", dir.join("t.h5").to_str().unwrap()]);
        assert!(text(&lines.stdout).contains("NOT ALL SAMPLES COUNTED on rank 0"), "{}{}", text(&lines.stdout), text(&lines.stderr));
    }
}

/// A program that blocks every signal in its threads after setup: nothing hangs or dies, the
/// samples that could not arrive are said (stderr once, the file, `sptool lines`), and what
/// was pending when the program unblocks its signals after finalize does not kill it.
#[test]
fn a_program_that_blocks_the_sampling_signal_is_said_and_never_killed() {
    need_cpus(2, "two sampled threads");
    for source in ["perf", "timer"] {
        let dir = scratch(&format!("sampling_block_{source}"));
        let exe = build(&dir);
        let out = run_mode(&exe, &dir, "b.h5", "block", &[("SCOPE_PROFILER_SAMPLE_HZ", "1000"), ("SAMPLING_TEST_SECONDS", "0.2"), ("SCOPE_PROFILER_SAMPLE_SOURCE", source)]);
        let stderr = text(&out.stderr);
        assert_eq!(stderr.matches("had the sampling signal").count(), 1, "said once:\n{stderr}");
        let f = hdf5::File::open(dir.join("b.h5")).unwrap();
        let g = f.group("rank0/sampling").unwrap();
        assert!(str_attr(&g, "handler_replaced").contains("blocked"));
        assert_eq!(int_attr(&g, "blocked_threads"), 2);
        let lines = sptool(&["lines", dir.join("b.h5").to_str().unwrap()]);
        assert!(text(&lines.stdout).contains("NOT ALL SAMPLES COUNTED"), "{}", text(&lines.stdout));
    }
}

/// The line_profile records of rank 0: (region, function, filename, samples).
fn records(h5: &Path) -> Vec<(String, String, String, i64)> {
    let f = hdf5::File::open(h5).unwrap();
    let lp = f.group("rank0/line_profile").unwrap();
    let mut out = Vec::new();
    for name in lp.member_names().unwrap() {
        let g = lp.group(&name).unwrap();
        let hits: Vec<i64> = g.dataset("hits").unwrap().read_raw().unwrap();
        out.push((str_attr(&g, "region"), str_attr(&g, "function"), str_attr(&g, "filename"), hits.iter().sum::<i64>()));
    }
    out.sort_by(|a, b| b.3.cmp(&a.3));
    out
}

/// glibc has no line table of its own: a sampled `memset` is named from Debian's split debug
/// file (libc6-dbg, found by build id under /usr/lib/debug) with its source line, and without
/// the debug file (SCOPE_PROFILER_DEBUG_DIR pointing elsewhere) as `libc.so.6+0x<offset>`,
/// never after the dynamic symbol below it (`__nss_database_lookup`). Samples inside this
/// library are `(scope_profiler)`, not the program's code.
#[test]
fn sampled_library_functions_are_named_from_debug_files_or_by_module_and_offset() {
    let debug = std::path::Path::new("/usr/lib/debug/.build-id");
    assert!(debug.is_dir(), "libc6-dbg is not installed (scripts/setup.sh installs it): {} is missing", debug.display());
    let dir = scratch("sampling_memset");
    let exe = build(&dir);
    let empty = dir.join("no_debug_files");
    std::fs::create_dir_all(&empty).unwrap();
    for with_debug in [true, false] {
        let file = if with_debug { "with.h5" } else { "without.h5" };
        let mut env = vec![("SCOPE_PROFILER_SAMPLE_HZ", "1000"), ("SAMPLING_TEST_SECONDS", "0.4")];
        let empty_s = empty.to_string_lossy().into_owned();
        if !with_debug {
            env.push(("SCOPE_PROFILER_DEBUG_DIR", empty_s.as_str()));
        }
        run_mode(&exe, &dir, file, "memset", &env);
        let recs = records(&dir.join(file));
        let fill: Vec<_> = recs.iter().filter(|r| r.0 == "fill").collect();
        let shown = format!("{fill:#?}");
        let top = fill.first().unwrap_or_else(|| panic!("no samples in fill: {recs:?}"));
        let total: i64 = fill.iter().map(|r| r.3).sum();
        if with_debug {
            assert!(top.3 * 2 > total, "memset takes most of fill: {shown}");
            assert!(top.1.contains("memset") && top.2.contains("memset") && top.2.ends_with(".S"), "named from the debug file: {shown}");
        } else {
            // Each address is its own `module+offset` (no function to pool them under): the
            // loop's few instructions together take most of fill, whichever of them a CPU's
            // samples land on.
            assert!(top.1.starts_with("libc.so.6+0x") && top.2 == "??", "module and offset without the debug file: {shown}");
            let libc: i64 = fill.iter().filter(|r| r.1.starts_with("libc.so.6+0x") && r.2 == "??").map(|r| r.3).sum();
            assert!(libc * 2 > total, "memset's addresses take most of fill: {shown}");
        }
        assert!(fill.iter().all(|r| !r.1.contains("nss")), "{shown}");
        // This library's own code.
        let calls: Vec<_> = recs.iter().filter(|r| r.0 == "calls" || r.0 == "tiny").collect();
        let ours: i64 = calls.iter().filter(|r| r.1 == "(scope_profiler)").map(|r| r.3).sum();
        assert!(ours > 0, "samples in the library are (scope_profiler): {calls:#?}");
        assert!(
            recs.iter().all(|r| !(r.1.starts_with("scope_profiler::") || r.1.starts_with("core::") || r.1.starts_with("std::") || r.1.starts_with("alloc::"))),
            "no sample inside the library is named as the program's code: {recs:#?}"
        );
    }
}

#[test]
fn many_short_threads_are_each_sampled_and_leave_nothing_behind() {
    let dir = scratch("sampling_many");
    let exe = build(&dir);
    let out = run_mode(&exe, &dir, "m.h5", "many", &[("SCOPE_PROFILER_SAMPLE_HZ", "1000"), ("SAMPLING_TEST_THREADS", "40")]);
    let stdout = text(&out.stdout);
    let h5 = dir.join("m.h5");
    let s = sampling_group(&h5, 0);
    assert_eq!(s.threads, 41, "every thread that recorded, and the one that set up");
    assert!(s.thread_ids.len() >= 30, "samples from most of the 40 short threads: {:?}", s.thread_ids);
    assert_eq!((info(&stdout, "perf_fds_after_join"), info(&stdout, "timers_after_join")), (1, 0), "only the main thread's event is left: {stdout}");
    let py = python_samples(&h5, &sps_files(&dir));
    check_region("region many", &py["h5"]["0"]["many"], "sampling.c", hot_lines("tests/c/sampling.c")["many"], 500);
}

#[test]
fn a_forked_child_leaves_the_parents_sampling_alone() {
    need_cpus(2, "two sampled threads");
    let dir = scratch("sampling_fork");
    let exe = build(&dir);
    // The child inherits the parent's perf event descriptors: when it exits, its thread exit
    // hook must not disable them (they are the parent's events).
    let out = run_mode(&exe, &dir, "f.h5", "fork", &[("SCOPE_PROFILER_SAMPLE_HZ", "1000"), ("SAMPLING_TEST_SECONDS", "0.3")]);
    assert_eq!(info(&text(&out.stdout), "child_status"), 0);
    let h5 = dir.join("f.h5");
    assert_eq!(sps_files(&dir), vec![dir.join("f_rank00000.sps")], "the child writes no file");
    check_python(&h5, &sps_files(&dir), &["alpha", "beta", "outer", "inner"], Some("outside"), 60);
}

#[test]
fn sampling_started_and_stopped_mid_run() {
    need_cpus(2, "two sampled threads");
    let dir = scratch("sampling_api");
    let exe = build(&dir);
    let out = run_mode(&exe, &dir, "api.h5", "api", &[]);
    let stdout = text(&out.stdout);
    let h5 = dir.join("api.h5");
    let sps = sps_files(&dir);
    let py = check_python(&h5, &sps, &["during", "w_during"], None, 100);
    // Before the start and after the stop: no sample at all.
    for r in ["before", "after", "w_before", "w_after"] {
        assert!(py["h5"]["0"].get(r).is_none() && py["sps"][0]["regions"].get(r).is_none(), "region {r} was sampled: {py}");
    }
    let s = sampling_group(&h5, 0);
    assert_eq!(s.hz, 1000, "the last rate asked for");
    assert_eq!(s.thread_ids, vec![0, 1], "the thread that recorded before the start is sampled too");
    assert_eq!((info(&stdout, "perf_fds_stopped"), info(&stdout, "timers_stopped")), (0, 0), "sp_stop_sampling removes every event");
}

#[test]
fn no_samples_without_the_switch() {
    let dir = scratch("sampling_off");
    let exe = build(&dir);
    let out = run_mode(&exe, &dir, "off.h5", "none", &[("SAMPLING_TEST_SECONDS", "0.1")]);
    let stdout = text(&out.stdout);
    assert!(sps_files(&dir).is_empty(), "no .sps file");
    let f = hdf5::File::open(dir.join("off.h5")).unwrap();
    assert!(f.group("rank0/sampling").is_err() && f.group("rank0/line_profile").is_err());
    for k in ["perf_fds_setup", "timers_setup", "perf_fds_after_join", "timers_after_join"] {
        assert_eq!(info(&stdout, k), 0, "{k}");
    }
    let out = sptool(&["lines", dir.join("off.h5").to_str().unwrap()]);
    assert!(!out.status.success() && text(&out.stderr).contains("holds no samples"), "{}", text(&out.stderr));
}

#[test]
fn every_mpi_rank_samples_itself() {
    need_cpus(2, "two MPI ranks");
    let dir = scratch("sampling_mpi");
    let exe = compile_with("mpicc", &["-std=c99", "-D_GNU_SOURCE", "-DUSE_MPI"], "sampling_mpi", &["tests/c/sampling.c"], &dir, &["-lpthread"]);
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "-np", "2"])
        .arg(&exe)
        .arg(dir.join("mpi.h5"))
        .arg("threads")
        .current_dir(&dir)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("SCOPE_PROFILER_SAMPLE_HZ", "1000")
        .env("SCOPE_PROFILER_VERBOSE", "0")
        .env("SAMPLING_TEST_SECONDS", "0.4");
    let out = run(&mut cmd);
    assert!(out.status.success(), "mpirun failed\nstdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    let sps = sps_files(&dir);
    assert_eq!(sps, vec![dir.join("mpi_rank00000.sps"), dir.join("mpi_rank00001.sps")], "one .sps per rank");
    let h5 = dir.join("mpi.h5");
    let py = check_python(&h5, &sps, &["alpha", "beta", "inner"], Some("outside"), 80);
    let ranks: Vec<i64> = py["sps"].as_array().unwrap().iter().map(|s| s["rank"].as_i64().unwrap()).collect();
    assert_eq!(ranks, vec![0, 1]);
    for rank in 0..2 {
        assert_eq!(sampling_group(&h5, rank).thread_ids, vec![0, 1], "rank {rank}");
    }
    let pooled = check_sptool(&h5, &["alpha", "beta", "inner"]);
    assert!(pooled.contains("2 ranks pooled"), "{pooled}");
    let out = sptool(&["lines", h5.to_str().unwrap(), "--per-rank", "--region", "alpha", "--no-source"]);
    let per_rank = text(&out.stdout);
    assert!(out.status.success() && per_rank.contains("Rank 0: ") && per_rank.contains("Rank 1: ") && !per_rank.contains("beta:"), "{per_rank}");
}

#[test]
fn fortran_and_cxx_start_and_stop_sampling() {
    let dir = scratch("sampling_languages");
    for (name, exe) in [
        ("fortran", fortran_support::build_fortran("gfortran", "tests/fortran/sampling.f90", &dir, "sampling_f", &[])),
        ("cxx", compile(Lang::Cxx, "sampling_cxx", &["tests/c/sampling_cxx.cpp"], &dir, &[])),
    ] {
        let h5 = dir.join(format!("{name}.h5"));
        let mut cmd = Command::new(&exe);
        cmd.arg(&h5).current_dir(&dir).env("SCOPE_PROFILER_VERBOSE", "0").env_remove("SCOPE_PROFILER_SAMPLE_HZ");
        let out = run(&mut cmd);
        assert!(out.status.success() && text(&out.stdout).contains("DONE"), "{name}\nstdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
        let source = if name == "fortran" { "tests/fortran/sampling.f90" } else { "tests/c/sampling_cxx.cpp" };
        let hot = hot_lines(source)[name];
        let base = Path::new(source).file_name().unwrap().to_str().unwrap();
        let sps = dir.join(format!("{name}_rank00000.sps"));
        let py = python_samples(&h5, std::slice::from_ref(&sps));
        check_region(&format!("{name} .sps"), &py["sps"][0]["regions"]["kernel"], base, hot, 100);
        check_region(&format!("{name} profile"), &py["h5"]["0"]["kernel"], base, hot, 100);
        assert!(py["h5"]["0"].get("unsampled").is_none(), "{name}: sampled after sp_stop_sampling: {py}");
    }
}

/// Run a Python (h5py) script on a copy of `from` written to `to`: `f` is the open copy.
fn craft(from: &Path, to: &Path, script: &str) {
    std::fs::copy(from, to).unwrap();
    let code = format!("import sys, h5py\nwith h5py.File(sys.argv[1], 'r+') as f:\n{}\n", script.lines().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n"));
    let out = run(Command::new(python()).arg("-c").arg(&code).arg(to));
    assert!(out.status.success(), "crafting {}: {}", to.display(), text(&out.stderr));
}

#[test]
fn sptool_lines_refuses_damaged_records_in_one_line_and_never_opens_a_fifo() {
    let dir = scratch("sampling_hostile");
    let exe = build(&dir);
    run_mode(&exe, &dir, "good.h5", "threads", &[("SCOPE_PROFILER_SAMPLE_HZ", "2000"), ("SAMPLING_TEST_SECONDS", "0.05")]);
    let good = dir.join("good.h5");
    let cases: [(&str, &str, &str); 4] = [
        ("lengths.h5", "g = f['rank0/line_profile/0']\nv = g['hits'][()]\ndel g['hits']\ng['hits'] = list(v) + [1, 2]", "differ in length"),
        ("negative.h5", "g = f['rank0/line_profile/0']\nv = g['hits'][()]\nv[0] = -5\ng['hits'][...] = v", "negative count"),
        ("sparse.h5", "g = f['rank0/line_profile/0']\ndel g['line_numbers']\ng.create_dataset('line_numbers', shape=(2**40,), dtype='i8', chunks=(4096,))", "1099511627776"),
        ("strings.h5", "g = f['rank0/line_profile/0']\ng.attrs['region'] = 5\ng.attrs['filename'] = b'\\xff\\xfe/x.c'", ""),
    ];
    for (name, script, needle) in cases {
        let file = dir.join(name);
        craft(&good, &file, script);
        let out = sptool(&["lines", file.to_str().unwrap()]);
        let stderr = text(&out.stderr);
        if needle.is_empty() {
            // Odd attribute types and undecodable bytes: read as far as they go, no failure.
            assert!(out.status.success(), "{name}: {stderr}");
            continue;
        }
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: one line: {stderr}");
        assert!(stderr.starts_with("sptool: ") && stderr.contains(needle) && stderr.contains("line_profile/0"), "{name}: {stderr}");
    }
    // A source file that is a FIFO is never opened (opening it would block).
    let fifo = dir.join("source.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let file = dir.join("fifo.h5");
    craft(&good, &file, &format!("for g in f['rank0/line_profile'].values():\n    g.attrs['filename'] = '{}'", fifo.display()));
    let out = sptool(&["lines", file.to_str().unwrap()]);
    assert!(out.status.success() && text(&out.stdout).contains("source.fifo:"), "{}", text(&out.stderr));
}
