//! `sptool export`: tidy rows, one per (rank, region, hardware thread).

use serde_json::Value;

use crate::common::{golden, ok, tempdir};
use crate::fixtures::make;

fn export_json(dir: &std::path::Path, file: &str, extra: &[&str]) -> Value {
    let mut args = vec!["export", file, "--format", "json", "-o", "out.json"];
    args.extend_from_slice(extra);
    ok(dir, &args);
    serde_json::from_str(&std::fs::read_to_string(dir.join("out.json")).unwrap()).unwrap()
}

fn rows<'a>(doc: &'a Value, rank: u64, region: &str) -> Vec<&'a Value> {
    doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["rank"] == rank && r["region"] == region)
        .collect()
}

#[test]
fn json_timings() {
    let dir = tempdir();
    make(dir.path(), "timings.h5");
    let doc = export_json(dir.path(), "timings.h5", &[]);
    assert_eq!(doc["schema"], 1);
    assert_eq!(doc["metadata"]["mpi_size"], 4);
    assert_eq!(doc["metadata"]["modules"][1], "openmpi/4.1.4");
    assert_eq!(doc["ranks"].as_array().unwrap().len(), 4);
    assert_eq!(doc["ranks"][1]["attributes"]["cpus"], serde_json::json!([2, 3]));
    // one row per rank and region (no LIKWID, so no hardware-thread split)
    assert_eq!(doc["rows"].as_array().unwrap().len(), 4 * 3 + 2 + 1);
    let solve = rows(&doc, 1, "solve");
    assert_eq!(solve.len(), 1);
    let r = solve[0];
    assert_eq!(r["calls"], 10);
    assert_eq!(r["cpu"], Value::Null);
    // durations 50 ms + ((i*7 + 3) % 10) ms, i = 0..9: each of 0..9 ms once
    assert!((r["total_s"].as_f64().unwrap() - 0.545).abs() < 1e-12);
    assert!((r["min_s"].as_f64().unwrap() - 0.050).abs() < 1e-12);
    assert!((r["max_s"].as_f64().unwrap() - 0.059).abs() < 1e-12);
    let std = (82.5f64 / 10.0).sqrt() * 1e-3; // population std of 0..9 ms
    assert!((r["std_s"].as_f64().unwrap() - std).abs() < 1e-12);
    let io = rows(&doc, 2, "io/write");
    assert_eq!(io[0]["open_calls"], 1);
    let idle = rows(&doc, 1, "idle");
    assert_eq!(idle[0]["calls"], 0);
    assert_eq!(idle[0]["mean_s"], Value::Null);
}

#[test]
fn json_likwid_tidy() {
    let dir = tempdir();
    make(dir.path(), "likwid.h5");
    let doc = export_json(dir.path(), "likwid.h5", &[]);
    let columns: Vec<&str> = doc["columns"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    for c in ["CAS_COUNT_RD:MBOX0C0", "CAS_COUNT_RD:MBOX1C0", "CPI", "DP [MFLOP/s]", "event0"] {
        assert!(columns.contains(&c), "{c} not a column: {columns:?}");
    }
    // two hardware threads -> two rows, timing columns repeated
    let mb = rows(&doc, 1, "memory_bound");
    assert_eq!(mb.len(), 2);
    assert_eq!(mb[0]["cpu"], 2);
    assert_eq!(mb[1]["cpu"], 3);
    assert_eq!(mb[1]["calls"], 1);
    assert_eq!(mb[0]["likwid_group"], "MEM_DP");
    assert_eq!(mb[0]["CAS_COUNT_RD:MBOX0C0"], 210000.0);
    // a counter the region's group did not measure is null, not zero
    assert_eq!(mb[0]["FP_ARITH_INST_RETIRED_128B_PACKED_DOUBLE"], Value::Null);
    let main = rows(&doc, 0, "main");
    assert_eq!(main[0]["INSTR_RETIRED_ANY"], 70478340.0);
    assert_eq!(main[0]["likwid_source"], "full_api");
    // NaN counters become null
    let io = rows(&doc, 1, "io/read");
    assert_eq!(io[0]["event1"], Value::Null);
    assert_eq!(io[0]["likwid_source"], "marker_file");
}

#[test]
fn csv_likwid_golden() {
    let dir = tempdir();
    make(dir.path(), "likwid.h5");
    ok(dir.path(), &["export", "likwid.h5", "--format", "csv", "-o", "out.csv"]);
    let text = std::fs::read_to_string(dir.path().join("out.csv")).unwrap();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader.headers().unwrap().clone();
    let records: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert!(records.iter().all(|r| r.len() == header.len()));
    assert_eq!(records.len(), 4 + 1 + 2 + 2); // rank 0: 4 regions; rank 1: io/read, matmul x2, memory_bound x2
    golden("export_likwid.csv", &text);
}

#[test]
fn filters_and_stdout() {
    let dir = tempdir();
    make(dir.path(), "timings.h5");
    let out = ok(dir.path(), &["export", "timings.h5", "--format", "csv", "-o", "-", "--ranks", "3", "--include", "s"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[1].starts_with("3,solve,,10,"));
}
