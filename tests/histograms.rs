//! Duration histograms land every call in the bucket of its duration in nanoseconds, with the
//! TSC clock forced: calls busy-waited to 0.75 ... 1.9 times a power of two (1.5 % to 25 % from
//! an edge, on both sides) in the aggregate layout (counted on the hot path) and the columnar
//! layout (built from the converted calls at finalize), each against the buckets the program's
//! own clock brackets give, and the columnar histograms against its calls in the file.
//! (Histograms counted in ticks and moved to the bucket of each tick bucket's middle put
//! a 0.97 x 2^k ns call one bucket up at most TSC frequencies.)

mod support;
use support::*;

use scope_profiler::model::{Calls, HIST_BUCKETS, RegionData, bucket};
use std::path::Path;
use std::process::Command;

/// Every call's bounds from the program: (lo, hi) ns.
fn calls(stdout: &str) -> Vec<(i64, i64)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("CALL "))
        .map(|l| {
            let (a, b) = l.split_once(' ').unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect()
}

/// The buckets a call may be in: its bounds widened by what the clocks may disagree (the
/// conversion's error, the histogram rate's calibration), as (lowest, highest) bucket.
fn candidates(lo: i64, hi: i64) -> (usize, usize) {
    let slack = |d: i64| 300 + d / 1000;
    (bucket(lo - slack(lo)), bucket(hi + slack(hi)))
}

/// Check `hist` against the calls: a call whose candidates are one bucket is counted there; the
/// others (a preemption between a bracket's clock read and the library's) may be in any of
/// theirs. Returns how many calls were certain.
fn check_histogram(what: &str, hist: &[u64], calls: &[(i64, i64)]) -> usize {
    let mut certain = vec![0u64; HIST_BUCKETS];
    let mut loose = vec![0u64; HIST_BUCKETS];
    let mut n_certain = 0;
    for &(lo, hi) in calls {
        let (a, b) = candidates(lo, hi);
        if a == b {
            certain[a] += 1;
            n_certain += 1;
        } else {
            (a..=b).for_each(|x| loose[x] += 1);
        }
    }
    assert_eq!(hist.iter().sum::<u64>(), calls.len() as u64, "{what}: histogram total");
    for b in 0..HIST_BUCKETS {
        assert!(
            certain[b] <= hist[b] && hist[b] <= certain[b] + loose[b],
            "{what}: bucket {b} ([{}, {}) ns) holds {} calls, the program's clock says {} (+ up to {} uncertain)\nhistogram {hist:?}\ncertain   {certain:?}",
            1i64 << (b.max(1) - 1),
            1i64 << b,
            hist[b],
            certain[b],
            loose[b]
        );
    }
    // A test where the brackets decided nothing would pass anything.
    assert!(n_certain * 10 >= calls.len() * 9, "{what}: only {n_certain} of {} calls were unambiguous (a very loaded machine?)", calls.len());
    n_certain
}

fn run_layout(dir: &Path, layout: &str) -> (Vec<(i64, i64)>, RegionData, hdf5::File) {
    let exe = compile(Lang::C, "hist_edges", &["tests/c/hist_edges.c"], dir, &[]);
    let file = dir.join(format!("{layout}.h5"));
    let out = run(Command::new(&exe)
        .arg(&file)
        .current_dir(dir)
        .env("SCOPE_PROFILER_LAYOUT", layout)
        .env("SCOPE_PROFILER_CLOCK", "tsc")
        .env("SCOPE_PROFILER_CLOCK_ANCHOR_MS", "20"));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "hist_edges ({layout}) failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let calls = calls(&stdout);
    assert_eq!(calls.len(), 330, "{stdout}");
    let h5 = hdf5::File::open(&file).unwrap();
    let (read, _) = scope_profiler::h5read::open(&file).unwrap();
    let mut ranks = scope_profiler::writer::read3::read_regions(&read).unwrap();
    let mut regions = ranks.remove(&0).unwrap();
    assert_eq!(regions.len(), 1);
    (calls, regions.remove(0), h5)
}

fn pooled_histogram(region: &RegionData) -> Vec<u64> {
    let mut h = vec![0u64; HIST_BUCKETS];
    for (_, s) in &region.stats {
        for (a, b) in h.iter_mut().zip(&s.hist) {
            *a += b;
        }
    }
    h
}

#[test]
fn aggregate_histograms_bucket_each_call_by_its_duration_in_ns() {
    let dir = scratch("histograms_aggregate");
    let (calls, region, h5) = run_layout(&dir, "aggregate");
    check_histogram("aggregate", &pooled_histogram(&region), &calls);
    // The file says which rate the histogram used (TSC runs): the anchors' rate within 0.1 %.
    // The rank's attributes are a row of the rank table in the schema-3 layouts.
    drop(h5);
    let (file, _) = scope_profiler::h5read::open(&dir.join("aggregate.h5")).unwrap();
    let info = scope_profiler::writer::read3::read_ranks(&file).unwrap().remove(&0).expect("rank 0 in the rank table");
    let attr = |name: &str| info.extra.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    use scope_profiler::model::AttrValue;
    if attr("clock") == Some(AttrValue::Str("tsc".into())) {
        let int = |name: &str| match attr(name) {
            Some(AttrValue::Int(v)) => v as f64,
            other => panic!("{name}: {other:?}"),
        };
        let (hist_hz, tsc_hz) = (int("clock_histogram_tsc_hz"), int("clock_tsc_hz"));
        assert!((hist_hz / tsc_hz - 1.0).abs() < 1e-3, "histogram rate {hist_hz} Hz against the run's {tsc_hz} Hz");
    }
    // Minimum and maximum lie in the first and last buckets the histogram uses.
    let s = &region.stats[0].1;
    let first = s.hist.iter().position(|&n| n > 0).unwrap();
    let last = s.hist.iter().rposition(|&n| n > 0).unwrap();
    assert_eq!((bucket(s.min), bucket(s.max)), (first, last), "min {} max {} hist {:?}", s.min, s.max, s.hist);
}

#[test]
fn columnar_histograms_are_the_buckets_of_the_converted_calls() {
    let dir = scratch("histograms_columnar");
    let (calls, region, _h5) = run_layout(&dir, "columnar");
    let hist = pooled_histogram(&region);
    check_histogram("columnar", &hist, &calls);
    // Built from the same calls the file holds, in order (one thread: calls do not overlap).
    let Calls::Columns(c) = &region.calls else { panic!("no calls in the columnar file") };
    let durations: Vec<i64> = c.starts.iter().zip(&c.ends).map(|(s, e)| e - s).collect();
    assert_eq!(durations.len(), calls.len());
    let mut from_calls = vec![0u64; HIST_BUCKETS];
    for (i, &d) in durations.iter().enumerate() {
        from_calls[bucket(d)] += 1;
        let (lo, hi) = calls[i];
        let (a, b) = candidates(lo, hi);
        assert!((a..=b).contains(&bucket(d)), "call {i}: {d} ns in the file, the program measured [{lo}, {hi}] ns");
    }
    assert_eq!(hist, from_calls, "the columnar histogram is not that of its calls");
}
