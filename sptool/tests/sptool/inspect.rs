//! Golden-output tests of `sptool inspect` (BLESS=1 regenerates the files
//! in tests/golden/).

use crate::common::{golden, ok, tempdir};
use crate::fixtures::make;

#[test]
fn timings_four_ranks() {
    let dir = tempdir();
    make(dir.path(), "timings.h5");
    golden("inspect_timings.txt", &ok(dir.path(), &["inspect", "timings.h5"]));
}

#[test]
fn timings_per_rank_with_selection() {
    let dir = tempdir();
    make(dir.path(), "timings.h5");
    let out = ok(
        dir.path(),
        &["inspect", "timings.h5", "--per-rank", "--ranks", "0,2-3", "--exclude", "idle", "--exclude", "init"],
    );
    golden("inspect_timings_per_rank.txt", &out);
}

#[test]
fn likwid_groups_and_repeated_events() {
    let dir = tempdir();
    make(dir.path(), "likwid.h5");
    let out = ok(dir.path(), &["inspect", "likwid.h5"]);
    // Repeated event names are labelled with their counter.
    for label in ["CAS_COUNT_RD:MBOX0C0", "CAS_COUNT_RD:MBOX1C0", "CAS_COUNT_WR:MBOX1C1"] {
        assert!(out.contains(label), "{label} missing");
    }
    assert!(!out.contains("  CAS_COUNT_RD  "), "bare repeated name shown");
    // The documented excerpt: costliest first, values as LIKWID gave them.
    assert!(out.contains("LIKWID counters (rank 0, group MEM_DP)"));
    let header = out.lines().find(|l| l.trim_start().starts_with("counter") && l.contains("main")).unwrap();
    let cols: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(cols, ["counter", "main", "matmul", "memory_bound", "setup"]);
    assert!(out.contains("0.161376") && out.contains("0.0301046") && out.contains("0.796200"));
    // Several hardware threads: one column per CPU.
    assert!(out.contains("memory_bound@cpu2") && out.contains("memory_bound@cpu3"));
    // Every region's source.
    for source in ["full_api", "marker_api", "marker_file"] {
        assert!(out.contains(source), "{source} missing");
    }
    golden("inspect_likwid.txt", &out);
}

#[test]
fn filters_apply_to_likwid_tables() {
    let dir = tempdir();
    make(dir.path(), "likwid.h5");
    let out = ok(dir.path(), &["inspect", "likwid.h5", "--include", "mat", "--include", "io/"]);
    assert!(!out.contains("memory_bound"));
    assert!(out.contains("matmul@cpu2") && out.contains("io/read"));
    golden("inspect_likwid_filtered.txt", &out);
    let out = ok(dir.path(), &["inspect", "likwid.h5", "--ranks", "1", "--exclude", ".*bound"]);
    assert!(!out.contains("rank 0, group"));
    assert!(!out.contains("memory_bound"));
    assert!(out.contains("LIKWID counters (rank 1, group FLOPS_DP)"));
}

#[test]
fn columnar_schema3() {
    let dir = tempdir();
    make(dir.path(), "columnar3.h5");
    let out = ok(dir.path(), &["inspect", "columnar3.h5"]);
    assert!(out.contains("schema 3 (columnar delta-encoded events)"));
    golden("inspect_columnar3.txt", &out);
}

/// The region table must not depend on how the file stores the calls.
#[test]
fn schemas_agree() {
    let dir = tempdir();
    make(dir.path(), "timings.h5");
    make(dir.path(), "columnar2.h5");
    let table = |file: &str| {
        let out = ok(dir.path(), &["inspect", file, "--per-rank"]);
        let start = out.find("Regions (").unwrap();
        let end = out[start..].find("  Durations in seconds").unwrap();
        out[start..start + end].to_string()
    };
    assert_eq!(table("timings.h5"), table("columnar2.h5"));
}
