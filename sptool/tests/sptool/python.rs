//! A file written by the Python package scope-profiler (PyPI), the
//! reference implementation: sptool must read it and agree with the
//! package's own reader. Needs a Python with `scope-profiler` installed:
//! `SCOPE_PROFILER_PYTHON=/path/to/python`, or `<repo>/.venv/bin/python`.
//! Without one the test fails (it is part of CI, not optional).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{ok, tempdir};

const SETUP: &str = "run the setup: `scripts/setup.sh` (or `python3 -m venv .venv && .venv/bin/pip install scope-profiler==0.7.5`) \
                     in the repository root, or set SCOPE_PROFILER_PYTHON=/path/to/python of an environment \
                     that has scope-profiler installed";

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SCOPE_PROFILER_PYTHON").filter(|p| !p.is_empty()) {
        return p.into();
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(".venv").join("bin").join("python");
    if venv.exists() {
        return venv;
    }
    panic!("no Python with scope-profiler found (SCOPE_PROFILER_PYTHON is unset and {} does not exist); {SETUP}", venv.display());
}

/// Writes a profile with the Python package, then prints what the
/// package's own reader sees: {region: {rank: [calls, total, min, max]}}.
const SCRIPT: &str = r#"
import json, sys, time
import scope_profiler as sp

path, mode = sys.argv[1], sys.argv[2]
options = {"aggregation_mode": True} if mode == "aggregate" else {}
with sp.session(file_path=path, **options):
    for i in range(5):
        with sp.region("solve"):
            time.sleep(0.001 * (1 + i % 3))
    with sp.region("outer"):
        for _ in range(3):
            with sp.region("inner"):
                time.sleep(0.0005)
    for _ in range(2):
        with sp.region("io/write"):
            time.sleep(0.002)

results = sp.read_h5(path)
out = {}
for name in results.region_names:
    region = results.get_region(name)
    out[name] = {
        str(rank): [d.num_calls, d.total_duration, d.min_duration, d.max_duration]
        for rank, d in region.regions.items()
    }
print(json.dumps(out))
"#;

fn write_with_python(dir: &Path, file: &str, mode: &str) -> Value {
    let py = python();
    let script = dir.join("write_profile.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let out = crate::common::output(Command::new(&py).arg(&script).arg(dir.join(file)).arg(mode).current_dir(dir))
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; {SETUP}", py.display()));
    assert!(
        out.status.success(),
        "{} could not write a profile with scope_profiler ({}); {SETUP}",
        py.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().rev().find(|l| l.starts_with('{')).expect("JSON from the script");
    serde_json::from_str(last).unwrap()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 + 1e-9 * b.abs()
}

fn compare(dir: &Path, file: &str, expected: &Value, with_std: bool) {
    ok(dir, &["export", file, "--format", "json", "-o", "out.json"]);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("out.json")).unwrap()).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    let expected = expected.as_object().unwrap();
    for name in ["solve", "outer", "inner", "io/write"] {
        assert!(expected.contains_key(name), "the Python reader did not see {name}");
    }
    assert_eq!(rows.len(), expected.values().map(|v| v.as_object().unwrap().len()).sum::<usize>());
    for (name, ranks) in expected {
        for (rank, v) in ranks.as_object().unwrap() {
            let row = rows
                .iter()
                .find(|r| r["region"] == name.as_str() && r["rank"].as_u64().map(|k| k.to_string()).as_ref() == Some(rank))
                .unwrap_or_else(|| panic!("sptool has no row for {name} on rank {rank}"));
            let v = v.as_array().unwrap();
            assert_eq!(row["calls"], v[0], "{name} calls");
            for (col, i) in [("total_s", 1), ("min_s", 2), ("max_s", 3)] {
                let (a, b) = (row[col].as_f64().unwrap(), v[i].as_f64().unwrap());
                assert!(close(a, b), "{name} {col}: sptool {a} vs scope_profiler {b}");
            }
            assert_eq!(row["std_s"].is_number(), with_std, "{name} std");
        }
    }
    assert_eq!(expected["solve"]["0"][0], 5);
    assert_eq!(expected["inner"]["0"][0], 3);

    let text = ok(dir, &["inspect", file]);
    for name in ["solve", "outer", "inner", "io/write", "scope_profiler_version"] {
        assert!(text.contains(name), "inspect output lacks {name}:\n{text}");
    }
    assert!(text.contains("schema 3"), "{text}");
}

#[test]
fn reads_python_columnar_file() {
    let dir = tempdir();
    let expected = write_with_python(dir.path(), "py.h5", "events");
    compare(dir.path(), "py.h5", &expected, true);
    let text = ok(dir.path(), &["inspect", "py.h5", "--include", "solve"]);
    assert!(text.contains("columnar delta-encoded events"));
    let solve = text.lines().find(|l| l.trim_start().starts_with("solve")).unwrap();
    assert_eq!(solve.split_whitespace().nth(2), Some("5"), "{solve}");
    // The timeline of the Python package's file: one event per call the package read.
    ok(dir.path(), &["export", "py.h5", "--format", "chrome-trace", "-o", "t.json"]);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("t.json")).unwrap()).unwrap();
    let events: Vec<&Value> = doc["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").collect();
    for (name, ranks) in expected.as_object().unwrap() {
        let calls = ranks["0"][0].as_u64().unwrap();
        let mine: Vec<&&Value> = events.iter().filter(|e| e["name"] == name.as_str()).collect();
        assert_eq!(mine.len() as u64, calls, "{name}");
        let total: f64 = mine.iter().map(|e| e["dur"].as_f64().unwrap() * 1e-6).sum();
        assert!(close(total, ranks["0"][1].as_f64().unwrap()) || (total - ranks["0"][1].as_f64().unwrap()).abs() < 1e-8, "{name}: {total}");
    }
    // Inner calls lie within the outer call on the timeline.
    let span = |n: &str| events.iter().filter(|e| e["name"] == n).map(|e| (e["ts"].as_f64().unwrap(), e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap())).collect::<Vec<_>>();
    let outer = span("outer")[0];
    assert!(span("inner").iter().all(|i| i.0 >= outer.0 && i.1 <= outer.1 + 1e-3));
}

#[test]
fn reads_python_aggregate_file() {
    let dir = tempdir();
    let expected = write_with_python(dir.path(), "agg.h5", "aggregate");
    compare(dir.path(), "agg.h5", &expected, false);
    // No single calls, no timeline: a clear error.
    let r = crate::common::run(dir.path(), &["export", "agg.h5", "--format", "chrome-trace", "-o", "t.json"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("aggregates only"), "{}", r.stderr);
    // diff and check compare aggregate files like any other.
    let d = ok(dir.path(), &["diff", "agg.h5", "agg.h5"]);
    assert!(d.lines().any(|l| l.starts_with("  solve ") && l.split_whitespace().nth(1) == Some("5")), "{d}");
    assert!(ok(dir.path(), &["check", "agg.h5", "agg.h5"]).contains("PASSED"));
    let text = ok(dir.path(), &["inspect", "agg.h5"]);
    assert!(text.contains("aggregates only"));
    assert!(text.contains("std is not available"));
}
