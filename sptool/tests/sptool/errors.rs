//! Bad input: one line on stderr naming the file and what is wrong, a
//! non-zero exit, never a panic or a backtrace.

use std::path::Path;

use crate::common::{Run, hdf5_open_guard, run, tempdir};
use crate::fixtures::make;
use crate::writer::{Val, write_attr};

/// Assert a clean failure whose single stderr line contains every `needle`.
fn fails(dir: &Path, args: &[&str], needles: &[&str]) -> Run {
    let r = run(dir, args);
    assert_eq!(r.code, 1, "sptool {args:?}: expected exit 1, got {}: {}", r.code, r.stderr);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "sptool {args:?}: expected one line, got:\n{}", r.stderr);
    assert!(lines[0].starts_with("sptool: "), "{}", lines[0]);
    for needle in needles {
        assert!(lines[0].contains(needle), "sptool {args:?}: {:?} not in {:?}", needle, lines[0]);
    }
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE", "internal error"] {
        assert!(!r.stderr.contains(bad), "{}", r.stderr);
    }
    assert!(r.stdout.is_empty(), "nothing on stdout on failure: {}", r.stdout);
    r
}

/// Every command must report the same way.
fn all_commands(dir: &Path, file: &str, needles: &[&str]) {
    fails(dir, &["inspect", file], needles);
    fails(dir, &["export", file, "--format", "json", "-o", "out.json"], needles);
    fails(dir, &["export", file, "--format", "csv", "-o", "out.csv"], needles);
    fails(dir, &["plot", "roofline", file, "-o", "roof.png"], needles);
    fails(dir, &["plot", "regions", file, "-o", "regions.png"], needles);
    assert!(!dir.join("out.json").exists() && !dir.join("roof.png").exists());
}

#[test]
fn missing_file() {
    let dir = tempdir();
    all_commands(dir.path(), "nope.h5", &["nope.h5: no such file"]);
}

#[test]
fn not_hdf5() {
    let dir = tempdir();
    std::fs::write(dir.path().join("notes.h5"), "this is a text file, not HDF5\n".repeat(100)).unwrap();
    all_commands(dir.path(), "notes.h5", &["notes.h5: is not an HDF5 file"]);
    std::fs::write(dir.path().join("empty.h5"), "").unwrap();
    fails(dir.path(), &["inspect", "empty.h5"], &["empty.h5: is empty"]);
    std::fs::create_dir(dir.path().join("adir.h5")).unwrap();
    fails(dir.path(), &["inspect", "adir.h5"], &["adir.h5: is a directory"]);
}

#[test]
fn truncated() {
    let dir = tempdir();
    let path = make(dir.path(), "likwid.h5");
    let bytes = std::fs::read(&path).unwrap();
    for (name, keep) in [("half.h5", bytes.len() / 2), ("head.h5", 100), ("most.h5", bytes.len() - 1)] {
        std::fs::write(dir.path().join(name), &bytes[..keep]).unwrap();
        all_commands(dir.path(), name, &[&format!("{name}: is a truncated HDF5 file")]);
    }
}

#[test]
fn other_layout() {
    let dir = tempdir();
    {
        let _guard = hdf5_open_guard();
        let f = hdf5::File::create(dir.path().join("other.h5")).unwrap();
        f.new_dataset::<f64>().shape(3).create("temperature").unwrap().write(&[1.0, 2.0, 3.0]).unwrap();
        f.create_group("rank0").unwrap(); // a rank group but no regions
    }
    all_commands(dir.path(), "other.h5", &["other.h5: is not a scope_profiler profile", "schema 1", "schemas 2 and 3"]);
    {
        let _guard = hdf5_open_guard();
        let f = hdf5::File::create(dir.path().join("future.h5")).unwrap();
        write_attr(&f, "scope_profiler_schema", &Val::I(7)).unwrap();
    }
    fails(dir.path(), &["inspect", "future.h5"], &["future.h5: has scope_profiler_schema = 7, which is not supported", "schema 1"]);
    {
        let _guard = hdf5_open_guard();
        let f = hdf5::File::create(dir.path().join("hollow.h5")).unwrap();
        write_attr(&f, "scope_profiler_schema", &Val::I(3)).unwrap();
    }
    fails(dir.path(), &["inspect", "hollow.h5"], &["hollow.h5: has scope_profiler_schema 3 but no region_table group"]);
}

#[test]
fn damaged_contents() {
    let dir = tempdir();
    make(dir.path(), "columnar3.h5");
    {
        let _guard = hdf5_open_guard();
        let f = hdf5::File::open_rw(dir.path().join("columnar3.h5")).unwrap();
        let index = f.group("rank_region_index").unwrap();
        index.unlink("event_counts").unwrap();
        index.new_dataset::<u64>().shape(7).create("event_counts").unwrap().write(&[1000u64; 7]).unwrap();
    }
    fails(dir.path(), &["inspect", "columnar3.h5"], &["columnar3.h5: is damaged or truncated", "event columns hold"]);

    make(dir.path(), "timings.h5");
    {
        let _guard = hdf5_open_guard();
        let f = hdf5::File::open_rw(dir.path().join("timings.h5")).unwrap();
        let r = f.group("rank1/regions/solve").unwrap();
        r.unlink("end_times").unwrap();
        r.new_dataset::<i64>().shape(3).create("end_times").unwrap().write(&[1i64, 2, 3]).unwrap();
    }
    fails(dir.path(), &["inspect", "timings.h5"], &["timings.h5: rank1/regions/solve is damaged: 10 start_times but 3 end_times"]);
}

#[test]
fn missing_dataset() {
    let dir = tempdir();
    make(dir.path(), "timings.h5");
    {
        let _guard = hdf5_open_guard();
        let f = hdf5::File::open_rw(dir.path().join("timings.h5")).unwrap();
        f.group("rank2/regions/main").unwrap().unlink("start_times").unwrap();
    }
    fails(dir.path(), &["inspect", "timings.h5"], &["timings.h5: rank2/regions/main/start_times is missing"]);
}

#[test]
fn bad_regex() {
    let dir = tempdir();
    make(dir.path(), "timings.h5");
    fails(dir.path(), &["inspect", "timings.h5", "--include", "("], &["timings.h5: bad regular expression '(' for --include", "unclosed group"]);
    fails(dir.path(), &["export", "timings.h5", "--format", "csv", "-o", "x.csv", "--exclude", "a{2,1}"], &["timings.h5: bad regular expression 'a{2,1}' for --exclude"]);
    fails(dir.path(), &["plot", "regions", "timings.h5", "-o", "x.png", "--include", "[z-a]"], &["bad regular expression '[z-a]'"]);
}

#[test]
fn unknown_metric() {
    let dir = tempdir();
    make(dir.path(), "likwid.h5");
    fails(
        dir.path(),
        &["plot", "roofline", "likwid.h5", "-o", "r.png", "--flops-metric", "GFLOPS"],
        &["likwid.h5: unknown metric 'GFLOPS' for --flops-metric", "available metrics: CPI, DP [MFLOP/s]"],
    );
    fails(
        dir.path(),
        &["plot", "roofline", "likwid.h5", "-o", "r.png", "--bandwidth-metric", "L3 bandwidth [MBytes/s]"],
        &["unknown metric 'L3 bandwidth [MBytes/s]' for --bandwidth-metric"],
    );
    fails(
        dir.path(),
        &["plot", "roofline", "likwid.h5", "-o", "r.png", "--flops-metric", "CPI"],
        &["metric 'CPI' for --flops-metric has no FLOP/s unit"],
    );
    assert!(!dir.path().join("r.png").exists());
}

#[test]
fn roofline_needs_counters() {
    let dir = tempdir();
    make(dir.path(), "timings.h5");
    fails(dir.path(), &["plot", "roofline", "timings.h5", "-o", "r.png"], &["timings.h5: has no LIKWID counters"]);
    make(dir.path(), "likwid.h5");
    fails(dir.path(), &["plot", "roofline", "likwid.h5", "-o", "r.png", "--include", "setup"], &["no selected LIKWID region has both"]);
    fails(dir.path(), &["plot", "roofline", "likwid.h5", "-o", "r.png", "--peak-flops=-3"], &["--peak-flops must be a positive number"]);
}

#[test]
fn bad_ranks_and_outputs() {
    let dir = tempdir();
    make(dir.path(), "timings.h5");
    fails(dir.path(), &["inspect", "timings.h5", "--ranks", "2,9-10"], &["timings.h5: --ranks asks for rank(s) 9-10 but the file has rank(s) 0-3"]);
    fails(dir.path(), &["inspect", "timings.h5", "--ranks", "1,x"], &["bad --ranks '1,x'"]);
    fails(dir.path(), &["plot", "regions", "timings.h5", "-o", "plot.jpg"], &["plot.jpg: the plot output must end in .png or .svg"]);
    fails(dir.path(), &["export", "timings.h5", "--format", "json", "-o", "no/such/dir/out.json"], &["no/such/dir/out.json: cannot write the output"]);
    fails(dir.path(), &["plot", "regions", "timings.h5", "-o", "r.png", "--include", "nothing"], &["no region with recorded calls matches"]);
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempdir();
    for args in [vec![], vec!["inspect"], vec!["export", "x.h5", "--format", "xml", "-o", "o"], vec!["frobnicate"]] {
        let r = run(dir.path(), &args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("panicked"));
    }
}
