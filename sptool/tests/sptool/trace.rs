//! `sptool export --format chrome-trace` on hand-made files: every call an "X" event, ranks
//! moved onto rank 0's clock with their clock_offset_ns, the same events from the schema-1
//! and columnar (schema 2) writings of the same run, and `--max-events`.

use serde_json::Value;

use crate::common::{ok, run, tempdir};
use crate::fixtures::{make, timing_ranks};

fn trace(dir: &std::path::Path, file: &str, extra: &[&str]) -> Value {
    let mut args = vec!["export", file, "--format", "chrome-trace", "-o", "trace.json"];
    args.extend_from_slice(extra);
    let r = run(dir, &args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    serde_json::from_str(&std::fs::read_to_string(dir.join("trace.json")).unwrap()).unwrap()
}

fn complete(doc: &Value) -> Vec<&Value> {
    doc["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").collect()
}

/// (pid, tid, name, ts ns, dur ns) of every event, sorted.
fn events(doc: &Value) -> Vec<(u64, i64, String, i64, i64)> {
    let mut out: Vec<_> = complete(doc)
        .iter()
        .map(|e| {
            (
                e["pid"].as_u64().unwrap(),
                e["tid"].as_i64().unwrap(),
                e["name"].as_str().unwrap().to_string(),
                (e["ts"].as_f64().unwrap() * 1000.0).round() as i64,
                (e["dur"].as_f64().unwrap() * 1000.0).round() as i64,
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_call_aligned_on_rank_0() {
    let dir = tempdir();
    make(dir.path(), "timings.h5");
    let doc = trace(dir.path(), "timings.h5", &[]);
    // The fixture: rank r starts at T0 + r*10_000 ns on its own clock, which is r*1000 ns
    // ahead of rank 0's (clock_offset_ns = r*1000).
    let ranks = timing_ranks(4);
    let t0 = ranks.iter().flat_map(|r| r.regions.iter().flat_map(|g| g.starts.first())).min().unwrap();
    let mut want = Vec::new();
    for r in &ranks {
        let offset = r.rank as i64 * 1000;
        for g in &r.regions {
            for i in 0..g.starts.len() {
                want.push((r.rank as u64, g.threads[i], g.name.clone(), g.starts[i] - offset - t0, g.ends[i] - g.starts[i]));
            }
        }
    }
    want.sort();
    assert_eq!(doc["otherData"]["time_origin_ns"].as_i64().unwrap(), *t0);
    assert_eq!(doc["otherData"]["calls"].as_u64().unwrap(), want.len() as u64);
    assert_eq!(events(&doc), want);
    // "main" starts at T0 + r*10_000 on rank r: 9_000 ns after rank 0's on the common clock.
    let main1 = complete(&doc).into_iter().find(|e| e["name"] == "main" && e["pid"] == 1).unwrap();
    assert_eq!(main1["ts"].as_f64().unwrap(), 9.0);
    let meta: Vec<&Value> = doc["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "M").collect();
    assert!(meta.iter().any(|e| e["name"] == "process_name" && e["pid"] == 2 && e["args"]["name"] == "rank 2 (node02)"));
    assert!(meta.iter().any(|e| e["name"] == "thread_name" && e["pid"] == 3 && e["tid"] == 0 && e["args"]["name"] == "thread 0 (tid 4245)"));
    // Selections apply.
    let doc = trace(dir.path(), "timings.h5", &["--ranks", "1", "--include", "solve"]);
    assert_eq!(complete(&doc).len(), 10);
    assert!(complete(&doc).iter().all(|e| e["pid"] == 1 && e["name"] == "solve"));
}

#[test]
fn columnar_file_gives_the_same_events() {
    let dir = tempdir();
    make(dir.path(), "timings.h5");
    make(dir.path(), "columnar2.h5");
    let a = events(&trace(dir.path(), "timings.h5", &[]));
    let b = events(&trace(dir.path(), "columnar2.h5", &[]));
    // The columnar writing keeps no clock offsets or threads: compare names, ranks, durations.
    let strip = |v: &[(u64, i64, String, i64, i64)]| {
        let mut x: Vec<(u64, String, i64)> = v.iter().map(|e| (e.0, e.2.clone(), e.4)).collect();
        x.sort();
        x
    };
    assert_eq!(strip(&a), strip(&b));
    make(dir.path(), "columnar3.h5");
    let c = trace(dir.path(), "columnar3.h5", &[]);
    assert_eq!(complete(&c).len() as u64, c["otherData"]["calls"].as_u64().unwrap());
    assert!(!complete(&c).is_empty());
}

#[test]
fn max_events_keeps_the_longest() {
    let dir = tempdir();
    make(dir.path(), "timings.h5");
    let all = events(&trace(dir.path(), "timings.h5", &[]));
    let r = run(dir.path(), &["export", "timings.h5", "--format", "chrome-trace", "-o", "t.json", "--max-events", "5"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("t.json")).unwrap()).unwrap();
    let kept = events(&doc);
    assert_eq!(kept.len(), 5);
    let mut durs: Vec<i64> = all.iter().map(|e| e.4).collect();
    durs.sort_unstable_by(|a, b| b.cmp(a));
    let mut kept_durs: Vec<i64> = kept.iter().map(|e| e.4).collect();
    kept_durs.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(kept_durs, durs[..5]);
    let left = &doc["otherData"]["left_out"];
    assert_eq!(left["calls"].as_u64().unwrap(), all.len() as u64 - 5);
    assert_eq!(left["per_region"]["solve"].as_u64().unwrap() + left["per_region"]["init"].as_u64().unwrap() + left["per_region"]["io/write"].as_u64().unwrap(), all.len() as u64 - 5);
    assert!(r.stderr.contains("the 5 longest of") && r.stderr.contains("left out"), "{}", r.stderr);
    // Without a cut, no note.
    let r = run(dir.path(), &["export", "timings.h5", "--format", "chrome-trace", "-o", "t.json"]);
    assert!(r.stderr.is_empty());
    // A rank the file does not have is an error, as for the other exports.
    let r = run(dir.path(), &["export", "timings.h5", "--format", "chrome-trace", "-o", "t.json", "--ranks", "7"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("--ranks asks for rank(s) 7"), "{}", r.stderr);
    // --max-events belongs to chrome-trace.
    let r = run(dir.path(), &["export", "timings.h5", "--format", "json", "-o", "t.json", "--max-events", "5"]);
    assert_eq!(r.code, 1);
    assert!(ok(dir.path(), &["export", "timings.h5", "--format", "chrome-trace", "-o", "-"]).starts_with("{\"traceEvents\":["));
}
