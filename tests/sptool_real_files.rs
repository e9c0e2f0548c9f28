//! sptool on files the library really wrote (C programs, a 2-rank mpirun, the PyPI package):
//! `diff` and `check` exit statuses, the chrome-trace export checked event by event against
//! the file, and long region names kept under 200 characters per line in the library's
//! summary and in `sptool inspect`. Uses the workspace's sptool binary (target/<profile>/sptool,
//! built by `cargo build --workspace`).

mod support;
use support::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn sptool() -> PathBuf {
    let exe = lib_dir().join("sptool");
    assert!(exe.exists(), "{} not found: run `cargo build --workspace` first", exe.display());
    exe
}

fn sptool_run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(sptool());
    cmd.args(args).env_remove("COLUMNS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(&mut cmd)
}

/// Run the workload program: "solve" sleeps `solve_us` per call; `extra` adds "only in base".
fn workload(dir: &Path, name: &str, solve_us: u32, extra: bool) -> (PathBuf, String) {
    let exe = dir.join("sptool_workload");
    if !exe.exists() {
        compile(Lang::C, "sptool_workload", &["tests/c/sptool_workload.c"], dir, &["-lpthread"]);
    }
    let file = dir.join(name);
    let out = run(Command::new(&exe).arg(&file).arg(solve_us.to_string()).arg(if extra { "1" } else { "0" }).env_remove("COLUMNS"));
    assert!(out.status.success(), "workload failed: {}", text(&out.stderr));
    (file, text(&out.stdout))
}

fn long_name() -> String {
    format!("{}_end", "L".repeat(296))
}

#[test]
fn check_and_diff_exit_statuses_on_real_runs() {
    let dir = scratch("sptool_check");
    // "solve" takes 100 times longer per call in the slow run: no machine noise hides that.
    let (fast, _) = workload(&dir, "fast.h5", 200, true);
    let (slow, _) = workload(&dir, "slow.h5", 20_000, false);
    let (f, s) = (fast.to_str().unwrap(), slow.to_str().unwrap());

    // A run against itself passes: every change is +0.0%.
    let out = sptool_run(&["check", f, f], &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("PASSED"), "{stdout}");

    // Slower: exit status 3, "solve" marked SLOWER, the verdict last. Only "solve" (and the
    // region missing in one run) is judged: the short regions vary from run to run.
    let only = ["--include", "solve$", "--include", "only in base"];
    let check = |args: &[&str]| sptool_run(&[&["check"], args, &only[..]].concat(), &[]);
    let out = check(&[f, s]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{}", text(&out.stderr));
    let solve = stdout.lines().find(|l| l.trim_start().starts_with("solve ")).unwrap();
    assert!(solve.trim_end().ends_with("SLOWER") && solve.contains("10%"), "{stdout}");
    assert!(stdout.lines().last().unwrap().starts_with("FAILED: 1 of 1 region(s) got slower than allowed: solve (+"), "{stdout}");
    assert!(stdout.contains("solve (+"), "{stdout}");
    // The region missing in the candidate is reported, and only fails with --fail-missing.
    assert!(stdout.contains("Not recorded in the candidate (not judged): only in base"), "{stdout}");
    // A per-region limit large enough lets it pass; "faster" passes as well.
    let out = check(&[f, s, "--max-slowdown", "solve=1000000%"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let out = check(&[s, f]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.lines().any(|l| l.trim_start().starts_with("solve ") && l.trim_end().ends_with("faster")), "{stdout}");
    assert!(stdout.lines().any(|l| l.trim_start().starts_with("only in base ") && l.trim_end().ends_with("new")), "{stdout}");
    let out = sptool_run(&["check", f, f, "--fail-missing"], &[]);
    assert_eq!(out.status.code(), Some(0));
    let out = check(&[f, s, "--max-slowdown", "solve=1000000%", "--fail-missing"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
    // Rank by rank: the same verdict, with a rank column.
    let out = check(&[f, s, "--ranks"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stdout).contains("solve on rank 0 (+"), "{}", text(&out.stdout));
    // Usage errors are not regressions.
    let out = sptool_run(&["check", f, s, "--max-slowdown", "fast"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));

    // diff: always exit 0; costliest first; the change of solve is large and positive.
    let out = sptool_run(&["diff", f, s], &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", text(&out.stderr));
    let names: Vec<&str> = stdout.lines().skip(4).map_while(|l| l.strip_prefix("  ")).map(|l| l.split("  ").next().unwrap()).collect();
    assert_eq!(names[0], "solve", "{stdout}");
    let solve = stdout.lines().find(|l| l.starts_with("  solve ")).unwrap();
    let cols: Vec<&str> = solve.split_whitespace().collect();
    assert_eq!((cols[1], cols[2]), ("5", "5"), "calls A and B: {solve}");
    assert!(cols[6].starts_with('+') && cols[6].ends_with('%'), "{solve}");
    assert!(stdout.lines().any(|l| l.starts_with("  only in base ") && l.trim_end().ends_with("only in A")), "{stdout}");
}

#[test]
fn diff_and_check_read_python_files() {
    let dir = scratch("sptool_python_diff");
    let py = dir.join("py.h5");
    let script = "import sys, time\nimport scope_profiler as sp\nwith sp.session(file_path=sys.argv[1]):\n    for i in range(5):\n        with sp.region('solve'):\n            time.sleep(0.0002)\n";
    let out = run(Command::new(python()).arg("-c").arg(script).arg(&py));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (ours, _) = workload(&dir, "ours.h5", 200, false);
    let out = sptool_run(&["diff", ours.to_str().unwrap(), py.to_str().unwrap()], &[]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", text(&out.stderr));
    let solve = stdout.lines().find(|l| l.starts_with("  solve ")).unwrap();
    assert_eq!(&solve.split_whitespace().collect::<Vec<_>>()[1..3], ["5", "5"], "{stdout}");
    let out = sptool_run(&["check", py.to_str().unwrap(), py.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
}

#[test]
fn long_names_stay_under_200_columns() {
    let dir = scratch("sptool_long_names");
    let (file, stdout) = workload(&dir, "long.h5", 100, false);
    let f = file.to_str().unwrap();
    let long = long_name();
    // The library's summary.
    assert!(stdout.contains("scope_profiler summary"), "{stdout}");
    assert!(stdout.lines().all(|l| l.chars().count() < 200), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("LLLL") && l.contains('…') && l.contains("L_end ")), "{stdout}");
    // sptool inspect, with and without a (narrower) terminal width.
    for columns in [None, Some("120")] {
        let env: Vec<(&str, &str)> = columns.map(|c| ("COLUMNS", c)).into_iter().collect();
        let out = sptool_run(&["inspect", f, "--per-rank"], &env);
        let shown = text(&out.stdout);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(shown.lines().all(|l| l.chars().count() < 200), "{shown}");
        let row = shown.lines().find(|l| l.starts_with("  LLLL")).unwrap_or_else(|| panic!("{shown}"));
        assert!(row.contains('…') && row.contains("L_end "), "{row}");
        if columns.is_some() {
            assert!(row.chars().count() <= 120, "{row}");
        }
    }
    // The full name in the exports.
    let json = text(&sptool_run(&["export", f, "--format", "json", "-o", "-"], &[]).stdout);
    assert!(json.contains(&format!("\"{long}\"")));
    let trace = text(&sptool_run(&["export", f, "--format", "chrome-trace", "-o", "-"], &[]).stdout);
    assert!(trace.contains(&format!("\"name\":\"{long}\"")));
}

/// Every call of the file, as (rank, thread id, name, start, duration) in nanoseconds.
type Call = (u32, i64, String, i64, i64);

fn calls_in_file(file: &Path) -> (Vec<Call>, BTreeMap<u32, i64>) {
    let h5 = hdf5::File::open(file).unwrap();
    let mut calls = Vec::new();
    let mut offsets = BTreeMap::new();
    for g in h5.member_names().unwrap().into_iter().filter(|g| g.starts_with("rank")) {
        let rank: u32 = g[4..].parse().unwrap();
        let group = h5.group(&g).unwrap();
        offsets.insert(rank, group.attr("clock_offset_ns").map(|a| a.read_scalar::<i64>().unwrap()).unwrap_or(0));
        for (name, r) in read_regions(&h5, rank as usize) {
            for i in 0..r.starts.len() {
                calls.push((rank, r.thread_ids[i], name.clone(), r.starts[i], r.ends[i] - r.starts[i]));
            }
        }
    }
    (calls, offsets)
}

fn micros(ns: i64) -> f64 {
    ns as f64 / 1000.0
}

/// Parse the export and check it event by event against the file's calls.
fn check_trace(file: &Path, json: &str, max: Option<usize>) -> serde_json::Value {
    let doc: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("invalid JSON: {e}\n{json}"));
    let (mut calls, offsets) = calls_in_file(file);
    let events = doc["traceEvents"].as_array().unwrap();
    let complete: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    let origin = calls.iter().map(|c| c.3 - offsets[&c.0]).min().unwrap();
    assert_eq!(doc["otherData"]["time_origin_ns"].as_i64().unwrap(), origin);
    assert_eq!(doc["otherData"]["calls"].as_u64().unwrap(), calls.len() as u64);
    if let Some(n) = max {
        // The n longest calls (ties broken by the later start, as the export does).
        calls.sort_by_key(|c| std::cmp::Reverse((c.4, c.3 - offsets[&c.0])));
        let left = calls.split_off(n.min(calls.len()));
        assert_eq!(doc["otherData"]["left_out"]["calls"].as_u64().unwrap(), left.len() as u64);
    }
    assert_eq!(complete.len(), calls.len(), "one event per call");
    let mut want: Vec<(u32, i64, String, f64, f64)> =
        calls.iter().map(|c| (c.0, c.1, c.2.clone(), micros(c.3 - offsets[&c.0] - origin), micros(c.4))).collect();
    let mut got: Vec<(u32, i64, String, f64, f64)> = complete
        .iter()
        .map(|e| {
            assert_eq!(e["cat"], "region");
            (e["pid"].as_u64().unwrap() as u32, e["tid"].as_i64().unwrap(), e["name"].as_str().unwrap().to_string(), e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap())
        })
        .collect();
    let key = |x: &(u32, i64, String, f64, f64)| (x.0, x.1, x.2.clone(), (x.3 * 1000.0).round() as i64, (x.4 * 1000.0).round() as i64);
    want.sort_by_key(key);
    got.sort_by_key(key);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!((g.0, g.1, &g.2), (w.0, w.1, &w.2));
        assert!((g.3 - w.3).abs() < 1e-6 && (g.4 - w.4).abs() < 1e-6, "{g:?} vs {w:?}");
    }
    // A name for every process and thread that has events.
    for (pid, tid) in got.iter().map(|g| (g.0, g.1)).collect::<std::collections::BTreeSet<_>>() {
        assert!(events.iter().any(|e| e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == pid), "process {pid}");
        assert!(events.iter().any(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == pid && e["tid"] == tid), "thread {pid}/{tid}");
    }
    doc
}

#[test]
fn chrome_trace_of_a_two_rank_mpi_run_event_by_event() {
    let dir = scratch("sptool_trace_mpi");
    let exe = compile_with("mpicc", &["-std=c99", "-D_GNU_SOURCE"], "mpi_ranks", &["tests/c/mpi_ranks.c"], &dir, &[]);
    let file = dir.join("mpi.h5");
    let out = run(Command::new("mpirun")
        .args(["--oversubscribe", "-np", "2"])
        .arg(&exe)
        .arg(&file)
        .arg("normal")
        .current_dir(&dir)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none"));
    assert!(out.status.success(), "mpirun failed: {}", text(&out.stderr));
    let (_, offsets) = calls_in_file(&file);
    assert_eq!(offsets.len(), 2);
    let trace = dir.join("trace.json");
    let out = sptool_run(&["export", file.to_str().unwrap(), "--format", "chrome-trace", "-o", trace.to_str().unwrap()], &[]);
    assert!(out.status.success() && out.stderr.is_empty(), "{}", text(&out.stderr));
    let doc = check_trace(&file, &std::fs::read_to_string(&trace).unwrap(), None);
    assert_eq!(doc["otherData"]["clock_offsets_ns"]["1"].as_i64().unwrap(), offsets[&1]);
    let pids: std::collections::BTreeSet<u64> = doc["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").map(|e| e["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids.into_iter().collect::<Vec<_>>(), vec![0, 1]);

    // --max-events: the longest calls only, and a note of the rest (JSON and stderr).
    let out = sptool_run(&["export", file.to_str().unwrap(), "--format", "chrome-trace", "-o", "-", "--max-events", "7"], &[]);
    assert!(out.status.success());
    let doc = check_trace(&file, &text(&out.stdout), Some(7));
    let note = doc["otherData"]["left_out"]["note"].as_str().unwrap();
    assert!(note.contains("the 7 longest of"), "{note}");
    assert!(text(&out.stderr).contains(note), "{}", text(&out.stderr));
}

#[test]
fn chrome_trace_names_threads() {
    let dir = scratch("sptool_trace_threads");
    let (file, _) = workload(&dir, "threads.h5", 100, true);
    let out = sptool_run(&["export", file.to_str().unwrap(), "--format", "chrome-trace", "-o", "-"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc = check_trace(&file, &text(&out.stdout), None);
    let workers: Vec<&serde_json::Value> = doc["traceEvents"].as_array().unwrap().iter().filter(|e| e["name"] == "worker").collect();
    assert_eq!(workers.len(), 3);
    assert!(workers.iter().all(|e| e["tid"] == 1), "the second recording thread");
}
