//! The library as an NVTX injection: a C program annotated with NVTX 3 only (the headers of the
//! PyPI wheel `nvidia-nvtx-cu12`, which scripts/setup.sh installs into .venv; no CUDA, no GPU)
//! run with `NVTX_INJECTION64_PATH`: push/pop on two threads, a domain with a registered
//! string, start/end ranges ended on another thread (on the rank's track of asynchronous
//! ranges, with the threads that started and ended them, the threads' nesting untouched),
//! overlapping ranges of one name, marks, a thread name, misuse; in every layout, read back
//! with the hdf5 crate and the PyPI reader; linked with regions of its own in between; and
//! the adapter off.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::adapters::*;
use support::*;

/// The NVTX headers of the wheel installed in the test Python's environment.
fn nvtx_include() -> PathBuf {
    let out = run(Command::new(python()).args(["-c", "import nvidia.nvtx, os; print(os.path.join(list(nvidia.nvtx.__path__)[0], 'include'))"]));
    assert!(out.status.success(), "the NVTX headers (PyPI nvidia-nvtx-cu12) are not installed: run scripts/setup.sh\n{}", text(&out.stderr));
    let dir = PathBuf::from(text(&out.stdout).trim());
    assert!(dir.join("nvtx3/nvToolsExt.h").exists(), "no nvtx3/nvToolsExt.h in {}", dir.display());
    dir
}

fn build(name: &str, dir: &Path, linked: bool) -> PathBuf {
    build_with(name, dir, linked, &[])
}

fn build_with(name: &str, dir: &Path, linked: bool, defines: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    let mut cmd = Command::new("cc");
    cmd.args(["-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{}", nvtx_include().display()))
        .arg(format!("-I{}", repo_root().join("include").display()))
        .args(defines)
        .arg(repo_root().join("tests/c/nvtx_app.c"))
        .arg("-o")
        .arg(&exe);
    if linked {
        cmd.arg("-DWITH_SP");
        link_library(&mut cmd);
    }
    cmd.args(["-lpthread", "-ldl"]);
    let out = run(&mut cmd);
    assert!(out.status.success(), "building {name} failed:\n{}", text(&out.stderr));
    exe
}

/// The start/end ranges of tests/c/nvtx_app.c with `n` rounds: region, the thread that
/// starts them and the one that ends them (`M`ain, `W`orker), ranges.
fn async_ranges(n: usize) -> [(&'static str, char, char, usize); 3] {
    [("nv_handed [range]", 'M', 'W', n), ("nv_overlap [range]", 'M', 'M', 2 * n), ("nv_ex [nv_domain, range]", 'W', 'M', n)]
}

/// The file's thread ids of the main thread, the worker and the track of asynchronous ranges,
/// and their Linux ids.
struct Threads {
    main: i64,
    worker: i64,
    track: i64,
    main_tid: i64,
    worker_tid: i64,
}

fn threads(f: &hdf5::File, main: i64, worker: i64) -> Threads {
    let tids = rank_int_list(f, 0, "thread_os_ids").expect("thread_os_ids");
    let tracks: Vec<usize> = (0..tids.len()).filter(|&t| tids[t] == -1).collect();
    assert_eq!(tracks.len(), 1, "one track of asynchronous ranges (Linux thread id -1) among the threads {tids:?}");
    assert_ne!(main, worker, "the worker's ranges are on the main thread");
    Threads { main, worker, track: tracks[0] as i64, main_tid: tids[main as usize], worker_tid: tids[worker as usize] }
}

/// The rank attributes of the asynchronous ranges: region -> (starting thread's Linux id,
/// ending thread's, ranges); and the count of ends of ranges that were not open.
fn range_threads(f: &hdf5::File) -> (BTreeMap<String, Vec<(i64, i64, i64)>>, Option<i64>) {
    let regions = rank_str_list(f, 0, "async_range_regions").expect("async_range_regions");
    let threads = rank_int_list(f, 0, "async_range_threads").expect("async_range_threads");
    assert_eq!(threads.len(), 3 * regions.len(), "async_range_threads: three per region: {threads:?}");
    let mut out: BTreeMap<String, Vec<(i64, i64, i64)>> = BTreeMap::new();
    for (r, t) in regions.iter().zip(threads.chunks(3)) {
        out.entry(r.clone()).or_default().push((t[0], t[1], t[2]));
    }
    (out, rank_int(f, 0, "counter:async_range_unknown_ends"))
}

/// What every layout holds of a run with `n` rounds: the ranges' threads, and the call paths
/// (the asynchronous ranges at the top of their track, enclosing nothing, the threads' own
/// nesting as the program made it).
fn check_common(file: &Path, f: &hdf5::File, t: &Threads, n: usize, err: &str) {
    let (pairs, unknown) = range_threads(f);
    let tid = |c: char| if c == 'M' { t.main_tid } else { t.worker_tid };
    let want: BTreeMap<String, Vec<(i64, i64, i64)>> = async_ranges(n).iter().map(|&(r, a, b, k)| (r.to_string(), vec![(tid(a), tid(b), k as i64)])).collect();
    assert_eq!(pairs, want, "the starting and ending threads of the asynchronous ranges\n{err}");
    // An end of an unknown range and an end of one that had ended.
    assert_eq!(unknown, Some(2), "ends of ranges that were not open\n{err}");
    let paths = call_paths(file, 0);
    let shown: Vec<String> = paths.iter().map(|p| format!("thread {}: {} ({} calls)", p.thread, p.path.join(" > "), p.calls)).collect();
    for (name, _, _, k) in async_ranges(n) {
        let rows: Vec<&PathRow> = paths.iter().filter(|p| p.path.iter().any(|x| x == name)).collect();
        assert_eq!(rows.len(), 1, "'{name}' is one call path:\n{}", shown.join("\n"));
        assert_eq!((rows[0].thread, rows[0].path.clone(), rows[0].calls), (t.track, vec![name.to_string()], k as i64), "'{name}':\n{}", shown.join("\n"));
        assert_eq!(rows[0].exclusive_ns, rows[0].inclusive_ns, "'{name}' encloses nothing");
    }
    assert!(paths.iter().all(|p| p.thread != t.track || p.path.len() == 1), "the track's calls nest in nothing:\n{}", shown.join("\n"));
    // The worker's push range, inside which the main thread's ranges ended, holds only its own
    // push range (and its exclusive time is not cut by the ranges); the main thread's range in
    // which the worker's ranges ended holds nothing.
    let on = |thread: i64, path: &[&str]| paths.iter().find(|p| p.thread == thread && p.path == path).unwrap_or_else(|| panic!("no call path {path:?} on thread {thread}:\n{}", shown.join("\n")));
    let under = |thread: i64, top: &str| -> Vec<Vec<String>> { paths.iter().filter(|p| p.thread == thread && p.path.len() > 1 && p.path[0] == top).map(|p| p.path.clone()).collect() };
    assert_eq!(under(t.worker, "nv_worker"), vec![vec!["nv_worker".to_string(), "nv_w\u{e9}de".to_string()]], "{}", shown.join("\n"));
    assert!(under(t.main, "nv_after").is_empty(), "nv_after encloses nothing:\n{}", shown.join("\n"));
    let (w, wide) = (on(t.worker, &["nv_worker"]), on(t.worker, &["nv_worker", "nv_w\u{e9}de"]));
    assert_eq!((w.calls, wide.calls), (n as i64, n as i64));
    assert!((w.exclusive_ns - (w.inclusive_ns - wide.inclusive_ns)).abs() <= 1000, "nv_worker's exclusive time: {w:?} {wide:?}");
    assert_eq!(on(t.main, &["nv_after"]).calls, 1);
}

fn check(file: &Path, n: usize, own: bool, err: &str) {
    let f = hdf5::File::open(file).unwrap_or_else(|e| panic!("{}: {e}\n{err}", file.display()));
    let regions = read_regions(&f, 0);
    let names: Vec<&String> = regions.keys().collect();
    let t = threads(&f, regions["nv_outer"].thread_ids[0], regions["nv_worker"].thread_ids[0]);
    for (name, thread, k) in [
        ("nv_outer", t.main, n),
        ("nv_registered [nv_domain]", t.main, n),
        ("nv_ex", t.main, n),
        ("nv_mark [mark]", t.main, n),
        ("nv_ex [nv_domain, mark]", t.main, n),
        ("nv_after", t.main, 1),
        ("nv_worker", t.worker, n),
        ("nv_w\u{e9}de", t.worker, n),
    ] {
        assert_eq!(per_thread(&regions, name), BTreeMap::from([(thread, k)]), "calls of '{name}' per thread: {names:?}\n{err}");
    }
    // The start/end ranges: on the track, whichever threads started and ended them.
    for (name, _, _, k) in async_ranges(n) {
        assert_eq!(per_thread(&regions, name), BTreeMap::from([(t.track, k)]), "calls of '{name}' per thread: {names:?}\n{err}");
    }
    assert_eq!(per_thread(&regions, "sp_mine").values().sum::<usize>(), if own { n } else { 0 }, "{names:?}");
    nested(&regions, "nv_ex", "nv_registered [nv_domain]");
    nested(&regions, "nv_registered [nv_domain]", "nv_outer");
    nested(&regions, "nv_w\u{e9}de", "nv_worker");
    nested(&regions, "nv_mark [mark]", "nv_outer");
    if own {
        nested(&regions, "sp_mine", "nv_outer");
        nested(&regions, "nv_registered [nv_domain]", "sp_mine");
    }
    for m in ["nv_mark [mark]", "nv_ex [nv_domain, mark]"] {
        assert_eq!(regions[m].starts, regions[m].ends, "a mark has no duration");
    }
    // Each range the main thread started ended inside the worker's push range of its round,
    // and the ranges of one name on one thread overlap without nesting.
    let (h, w) = (&regions["nv_handed [range]"], &regions["nv_worker"]);
    for i in 0..n {
        assert!(h.starts[i] <= w.starts[i] && w.starts[i] <= h.ends[i] && h.ends[i] <= w.ends[i], "range {i} of nv_handed did not end inside nv_worker {i}");
    }
    let o = &regions["nv_overlap [range]"];
    for i in 0..n {
        let (a, b) = (2 * i, 2 * i + 1);
        assert!(o.starts[a] <= o.starts[b] && o.starts[b] <= o.ends[a] && o.ends[a] <= o.ends[b], "the overlapping ranges of round {i}: {o:?}");
    }
    // The misuse: the malformed message's range is not recorded, the non-UTF-8 one is.
    assert_eq!(per_thread(&regions, "\u{fffd}\u{fffd} not utf8").values().sum::<usize>(), 1, "{names:?}");
    for (name, r) in &regions {
        let open = if name == "nv_left_open [range]" { 1 } else { 0 };
        assert_eq!((r.open_calls, r.dropped_calls), (open, 0), "region '{name}'");
    }
    for said in ["a range pop without a push", "not open", "a NULL message", "an event attribute structure of version", "not UTF-8", "'nv_left_open [range]': 1 call(s) still open"] {
        assert_eq!(err.matches(said).count(), 1, "'{said}' said once:\n{err}");
    }
    let named = rank_str(&f, 0, &format!("thread_name:{}", t.worker_tid));
    assert_eq!(named.as_deref(), Some("nvtx worker"), "the worker's name");
    check_common(file, &f, &t, n, err);
}

#[test]
fn nvtx_program_through_nvtx_injection64_path() {
    let dir = scratch("nvtx_plain");
    let exe = build("nvtx_app", &dir, false);
    let file = dir.join("nv.h5");
    let out = run(Command::new(&exe).arg("4").env("NVTX_INJECTION64_PATH", lib()).env("SCOPE_PROFILER_FILE", &file).env("SCOPE_PROFILER_LAYOUT", "regions"));
    ok(&out);
    check(&file, 4, false, &text(&out.stderr));
    let inspect = sptool(&["inspect", file.to_str().unwrap()]);
    assert!(inspect.contains("Sources of regions") && inspect.contains("NVTX injection"), "sptool inspect lacks the NVTX source:\n{inspect}");
    let f = hdf5::File::open(&file).unwrap();
    let regions = read_regions(&f, 0);
    let t = threads(&f, regions["nv_outer"].thread_ids[0], regions["nv_worker"].thread_ids[0]);
    // The PyPI reader sees the same ranges (this layout keeps no thread ids for it).
    let view = python_view(&file);
    for (name, _, _, k) in async_ranges(4) {
        let r = &view["regions"][name]["0"];
        assert_eq!(r["calls"].as_u64(), Some(k as u64), "the PyPI reader's '{name}': {r}");
        let ours: Vec<i64> = (0..k).map(|i| regions[name].ends[i] - regions[name].starts[i]).collect();
        let mut theirs: Vec<i64> = r["durations_ns"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        let mut ours = ours;
        ours.sort();
        theirs.sort();
        assert_eq!(theirs, ours, "the PyPI reader's durations of '{name}'");
    }
    let line = format!("rank 0: nv_handed [range]: 4 range(s) started on thread {}, ended on thread {}", t.main_tid, t.worker_tid);
    assert!(inspect.contains("Asynchronous ranges") && inspect.contains(&line), "sptool inspect lacks '{line}':\n{inspect}");
    assert!(inspect.contains(&format!("rank 0: nv_overlap [range]: 8 range(s) started and ended on thread {}", t.main_tid)), "{inspect}");
    // sptool tree: the ranges at the top, enclosing nothing; the worker's push range holds its
    // own push range only.
    let tree = sptool(&["tree", file.to_str().unwrap()]);
    let lines: Vec<&str> = tree.lines().collect();
    let depth = |l: &str| l.len() - l.trim_start().len();
    let at = |name: &str| lines.iter().position(|l| l.contains(name)).unwrap_or_else(|| panic!("sptool tree lacks '{name}':\n{tree}"));
    for name in ["nv_handed [range]", "nv_overlap [range]", "nv_ex [nv_domain, range]"] {
        let k = at(name);
        assert_eq!(depth(lines[k]), depth(lines[at("nv_outer")]), "'{name}' is not at the top:\n{tree}");
        assert!(lines.get(k + 1).is_none_or(|next| depth(next) <= depth(lines[k])), "'{name}' encloses something:\n{tree}");
    }
    let k = at("nv_worker");
    assert!(lines[k + 1].contains("nv_w\u{e9}de") && lines.get(k + 2).is_none_or(|l| depth(l) <= depth(lines[k])), "nv_worker holds more than its push range:\n{tree}");
    // Every layout: the ranges on the track, as the PyPI reader sees them too.
    for layout in ["columnar", "aggregate"] {
        let f2 = dir.join(format!("nv_{layout}.h5"));
        let out = run(Command::new(&exe).arg("2").env("NVTX_INJECTION64_PATH", lib()).env("SCOPE_PROFILER_FILE", &f2).env("SCOPE_PROFILER_LAYOUT", layout));
        ok(&out);
        let err = text(&out.stderr);
        let h5 = hdf5::File::open(&f2).unwrap();
        let view = python_view(&f2);
        let region = |name: &str| &view["regions"][name]["0"];
        let stored_thread = |name: &str| -> Option<Vec<i64>> { region(name)["thread_ids"].as_array().map(|a| a.iter().map(|v| v.as_i64().unwrap()).collect()) };
        for (name, k) in [("nv_worker", 2), ("nv_outer", 2), ("nv_handed [range]", 2), ("nv_overlap [range]", 4), ("nv_ex [nv_domain, range]", 2)] {
            assert_eq!(region(name)["calls"].as_u64(), Some(k), "layout {layout}, '{name}': {view}\n{err}");
        }
        let (main, worker) = if layout == "columnar" {
            (stored_thread("nv_outer").unwrap()[0], stored_thread("nv_worker").unwrap()[0])
        } else {
            // No calls kept: the threads from the call paths.
            let paths = call_paths(&f2, 0);
            let of = |name: &str| paths.iter().find(|p| p.path == [name]).unwrap_or_else(|| panic!("no call path of {name}")).thread;
            (of("nv_outer"), of("nv_worker"))
        };
        let t = threads(&h5, main, worker);
        if layout == "columnar" {
            for (name, _, _, k) in async_ranges(2) {
                assert_eq!(stored_thread(name), Some(vec![t.track; k]), "layout {layout}, '{name}': the track's calls");
            }
        } else {
            let r = region("nv_overlap [range]");
            assert_eq!(r["exclusive_ns"], r["total_ns"], "layout {layout}: a range encloses nothing: {r}");
        }
        check_common(&f2, &h5, &t, 2, &err);
    }
}

#[test]
fn linked_nvtx_program_with_regions_of_its_own() {
    let dir = scratch("nvtx_linked");
    let exe = build("nvtx_app_sp", &dir, true);
    let file = dir.join("nv.h5");
    let out = run(Command::new(&exe).arg("3").env("NVTX_INJECTION64_PATH", lib()).env("SCOPE_PROFILER_FILE", &file));
    ok(&out);
    check(&file, 3, true, &text(&out.stderr));
    // Built to look for an injection in the process, the linked program needs no variable.
    let exe = build_with("nvtx_app_preinject", &dir, true, &["-DNVTX_SUPPORT_ALREADY_INJECTED_LIBRARY=1"]);
    let file = dir.join("nv_pre.h5");
    let out = run(Command::new(&exe).arg("2").env_remove("NVTX_INJECTION64_PATH").env("SCOPE_PROFILER_FILE", &file));
    ok(&out);
    check(&file, 2, true, &text(&out.stderr));
}

#[test]
fn nvtx_adapter_off() {
    let dir = scratch("nvtx_off");
    let exe = build("nvtx_app", &dir, false);
    let plain = run(Command::new(&exe).arg("2"));
    ok(&plain);
    for (var, value) in [("SCOPE_PROFILER_NVTX", "0"), ("SCOPE_PROFILER_DISABLE", "1")] {
        let file = dir.join("off.h5");
        let out = run(Command::new(&exe).arg("2").env("NVTX_INJECTION64_PATH", lib()).env("SCOPE_PROFILER_FILE", &file).env(var, value));
        ok(&out);
        assert!(!file.exists(), "{var}={value}: a profile was written");
        assert_eq!(text(&out.stdout), text(&plain.stdout), "{var}={value}: the program's output changed");
        assert!(!text(&out.stderr).contains("[scope_profiler]"), "{var}={value}: the library spoke:\n{}", text(&out.stderr));
    }
}
