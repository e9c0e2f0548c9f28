//! The three layouts (regions, columnar, aggregate) end to end: a threaded C program in each,
//! read back through the PyPI package's `read_h5` (the oracle) with exact counts and the
//! program's own live statistics; the same data written in every layout giving the same
//! numbers; the Python CLI on every layout; bad values of the variable.

mod support;
use support::*;

use scope_profiler::config::Layout;
use scope_profiler::model::{RankProfile, RegionData};
use scope_profiler::writer::{Plan, layout_writer};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Run tests/c/layouts.c; `layout` goes through the environment, or through sp_options when
/// `via_options`. The monotonic clock: live statistics and the file are then converted by the
/// same identity and must agree exactly (with the TSC clock they agree to the clock's error
/// bound: `live_statistics_with_the_tsc_clock`).
fn run_program(dir: &Path, layout: &str, via_options: bool) -> (std::process::Output, PathBuf) {
    run_program_with_clock(dir, layout, via_options, "monotonic")
}

fn run_program_with_clock(dir: &Path, layout: &str, via_options: bool, clock: &str) -> (std::process::Output, PathBuf) {
    let exe = compile(Lang::C, "layouts", &["tests/c/layouts.c"], dir, &["-lpthread"]);
    let file = dir.join(format!("{}_{clock}.h5", layout.replace(|c: char| !c.is_ascii_alphanumeric(), "_")));
    let mut cmd = Command::new(&exe);
    cmd.arg(&file).current_dir(dir).env("SCOPE_PROFILER_CLOCK", clock);
    if via_options {
        cmd.arg(layout).env("SCOPE_PROFILER_LAYOUT", "aggregate"); // the option wins
    } else {
        cmd.env("SCOPE_PROFILER_LAYOUT", layout);
    }
    let out = run(&mut cmd);
    assert!(out.status.success(), "layouts {layout} failed\nstdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    (out, file)
}

/// STATS lines: name -> [count, total, min, max, exclusive] (the last line of a name wins).
fn live_stats(stdout: &str) -> BTreeMap<String, Vec<i64>> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("STATS\t"))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].to_string(), f[1..].iter().map(|v| v.parse().unwrap()).collect())
        })
        .collect()
}

fn schema_and_layout(file: &Path) -> (i64, Option<String>) {
    let h5 = hdf5::File::open(file).unwrap();
    let schema = h5.attr("scope_profiler_schema").unwrap().read_scalar::<i64>().unwrap();
    let layout = h5.attr("storage_layout").ok().map(|a| a.read_scalar::<hdf5::types::VarLenUnicode>().unwrap().as_str().to_string());
    (schema, layout)
}

fn check_program_file(layout: &str, out: &std::process::Output, file: &Path) {
    check_program_file_within(layout, out, file, 0.0)
}

/// `rel`: how far (relative, plus 2 ns of rounding per call) the file's times may be from the
/// live statistics (0: exactly equal).
fn check_program_file_within(layout: &str, out: &std::process::Output, file: &Path, rel: f64) {
    let near_n = |a: Option<i64>, b: i64, calls: i64| a.is_some_and(|a| (a - b).abs() as f64 <= rel * b.abs() as f64 + if rel > 0.0 { 2.0 * calls as f64 } else { 0.0 });
    let stdout = text(&out.stdout);
    assert!(stdout.contains("monotonic=1") && stdout.contains("bad=0"), "{stdout}");
    // The live summary is printed mid-run, with the regions recorded so far.
    let live = stdout.split("--- live summary ---").nth(1).unwrap().split("--- end live summary ---").next().unwrap();
    assert!(live.contains("scope_profiler summary") && live.contains("outer") && live.contains("3300"), "{live}");
    let expected = expectations(&stdout);
    let stats = live_stats(&stdout);
    let py = python_view(file);
    assert_eq!(py["storage_layout"], layout, "{py}");
    assert_eq!(py["num_ranks"], 1);
    for (name, &calls) in &expected {
        let r = &py["regions"][name]["0"];
        assert_eq!(r["calls"].as_u64(), Some(calls), "{layout}: calls of {name}: {py}");
    }
    // Every thread's calls are in the file, and the live statistics (read once every thread
    // had joined) are exactly what the file says.
    for (name, s) in &stats {
        let r = &py["regions"][name]["0"];
        assert_eq!(r["calls"].as_i64(), Some(s[0]), "{layout} {name}");
        let near = |a: Option<i64>, b: i64| near_n(a, b, s[0]);
        for (key, i) in [("total_ns", 1), ("min_ns", 2), ("max_ns", 3)] {
            assert!(near(r[key].as_i64(), s[i]), "{layout} {name} {key}: file {} live {}", r[key], s[i]);
        }
        if layout == "aggregate" {
            assert!(near(r["exclusive_ns"].as_i64(), s[4]), "{layout} {name} exclusive: file {} live {}", r["exclusive_ns"], s[4]);
        }
        assert!(s[4] <= s[1] && s[4] >= 0, "exclusive within total: {name} {s:?}");
    }
    // inner has no children: all its time is exclusive; outer's children are inner and recursive.
    assert_eq!(stats["inner"][4], stats["inner"][1]);
    assert!(stats["outer"][4] < stats["outer"][1]);
    // Misuse behaves as in every layout: the dropped call and the open call are stored.
    let h5 = hdf5::File::open(file).unwrap();
    assert_eq!(rank_int(&h5, 0, "num_threads"), Some(4), "main thread + 3 workers");
    let (open, dropped) = if layout == "regions" {
        let regions = read_regions(&h5, 0);
        (regions["left open"].open_calls, regions["b"].dropped_calls)
    } else {
        let names: Vec<String> = h5.dataset("region_table/names").unwrap().read_raw::<hdf5::types::VarLenUnicode>().unwrap().iter().map(|s| s.to_string()).collect();
        let ids: Vec<u32> = h5.dataset("rank_region_index/region_ids").unwrap().read_raw().unwrap();
        let open: Vec<i64> = h5.dataset("rank_region_index/open_calls").unwrap().read_raw().unwrap();
        let dropped: Vec<i64> = h5.dataset("rank_region_index/dropped_calls").unwrap().read_raw().unwrap();
        let row = |n: &str| ids.iter().position(|&i| names[i as usize] == n).unwrap();
        (open[row("left open")], dropped[row("b")])
    };
    assert_eq!((open, dropped), (1, 1), "{layout}");
}

/// With the TSC clock (the default where it is safe), the live statistics are converted through
/// the anchors taken so far and the file through the whole run's: they agree to parts per
/// million (the clock's rate variation), counts exactly.
#[test]
fn live_statistics_with_the_tsc_clock() {
    let dir = scratch("layouts_tsc");
    for layout in ["regions", "aggregate"] {
        let (out, file) = run_program_with_clock(&dir, layout, false, "auto");
        check_program_file_within(layout, &out, &file, 5e-4);
    }
}

#[test]
fn every_layout_reads_back_through_the_python_package_with_exact_counts() {
    let dir = scratch("layouts_program");
    for layout in ["regions", "columnar", "aggregate"] {
        let (out, file) = run_program(&dir, layout, false);
        check_program_file(layout, &out, &file);
        let (schema, stored) = schema_and_layout(&file);
        match layout {
            "regions" => assert_eq!((schema, stored), (1, None)),
            _ => assert_eq!((schema, stored.as_deref()), (3, Some(layout))),
        }
        if layout == "columnar" {
            // Thread ids cost one byte per call.
            let h5 = hdf5::File::open(&file).unwrap();
            let t = h5.dataset("events/thread_ids").unwrap();
            assert_eq!(t.dtype().unwrap().size(), 1);
            let tids: Vec<u8> = t.read_raw().unwrap();
            assert_eq!(tids.iter().copied().max(), Some(3));
        }
        if layout == "aggregate" {
            let h5 = hdf5::File::open(&file).unwrap();
            assert!(h5.group("events").is_err(), "no calls are kept");
            // The histogram of each region counts its calls.
            let counts: Vec<u64> = h5.dataset("rank_region_index/aggregate_counts").unwrap().read_raw().unwrap();
            let hist = h5.dataset("rank_region_index/histograms").unwrap();
            assert_eq!(hist.shape(), vec![counts.len(), 64]);
            let flat: Vec<u64> = hist.read_raw().unwrap();
            for (row, c) in counts.iter().enumerate() {
                assert_eq!(flat[row * 64..row * 64 + 64].iter().sum::<u64>(), *c);
            }
            // Per thread: the threads' counts add up to the row's.
            let rows: Vec<u64> = h5.dataset("scope_profiler_threads/rows").unwrap().read_raw().unwrap();
            let tcounts: Vec<u64> = h5.dataset("scope_profiler_threads/counts").unwrap().read_raw().unwrap();
            for (row, c) in counts.iter().enumerate() {
                let sum: u64 = rows.iter().zip(&tcounts).filter(|(r, _)| **r == row as u64).map(|(_, c)| c).sum();
                assert_eq!(sum, *c);
            }
        }
    }
}

#[test]
fn the_option_selects_the_layout_over_the_environment() {
    let dir = scratch("layouts_option");
    let (out, file) = run_program(&dir, "columnar", true);
    check_program_file("columnar", &out, &file);
}

#[test]
fn a_bad_value_warns_once_names_it_and_keeps_every_call_in_the_default_layout() {
    let dir = scratch("layouts_bad");
    let (out, file) = run_program(&dir, "tree", false);
    let stderr = text(&out.stderr);
    assert_eq!(stderr.matches("SCOPE_PROFILER_LAYOUT=\"tree\"").count(), 1, "{stderr}");
    assert!(stderr.contains("using the default layout, regions"), "{stderr}");
    check_program_file("regions", &out, &file);
    // A bad sp_options.layout the same way.
    let (out, file) = run_program(&dir, "rows", true);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("sp_options.layout=\"rows\""), "{stderr}");
    check_program_file("regions", &out, &file);
}

/// Two threads, nested and recursive calls, an open-only region: one process's data.
fn sample_profile() -> RankProfile {
    let mut p = RankProfile::default();
    p.info.hostname = "node".into();
    p.info.thread_os_ids = vec![100, 200];
    let t0 = 1_000_000_000_000i64;
    p.regions.push(RegionData::from_columns(
        "solve",
        vec![t0, t0 + 5, t0 + 100, t0 + 101, t0 + 3_000_000_000],
        vec![t0 + 50, t0 + 90, t0 + 5_000_000_200, t0 + 150, t0 + 3_000_000_001],
        vec![0, 1, 0, 1, 1],
    ));
    p.regions.push(RegionData::from_columns("io/write", vec![t0 + 10], vec![t0 + 20], vec![0]));
    p.regions.push(RegionData { name: "never closed".into(), open_calls: 2, ..Default::default() });
    p
}

/// A file written in this process, as a copy to read: HDF5 opens files without close-on-exec
/// and locks them, so a child started meanwhile by another test of this binary may still hold
/// the lock of the original (the copy was never open here).
fn readable_copy(path: &Path) -> PathBuf {
    let copy = path.with_extension("read.h5");
    std::fs::copy(path, &copy).unwrap();
    copy
}

/// `<dir>/<layout>.h5` holding `profile` as rank 0, written through the layout's writer.
fn write_in_layout(dir: &Path, layout: Layout, profile: &RankProfile, meta: &[(String, scope_profiler::model::AttrValue)]) -> PathBuf {
    let path = dir.join(format!("{}.h5", layout.name()));
    scope_profiler::output::write_file(&path, |f| {
        let mut w = layout_writer(layout, Plan::of(profile));
        f.write_metadata(meta)?;
        f.write_rank(0, profile, w.as_mut())?;
        w.finish(f.file())
    })
    .unwrap();
    path
}

fn write_sample(dir: &Path, layout: Layout) -> PathBuf {
    readable_copy(&write_in_layout(dir, layout, &sample_profile(), &[("mpi_size".into(), scope_profiler::model::AttrValue::Int(1))]))
}

#[test]
fn the_same_data_gives_the_same_numbers_in_every_layout() {
    let dir = scratch("layouts_same_data");
    let files: BTreeMap<&str, PathBuf> = [Layout::Regions, Layout::Columnar, Layout::Aggregate].into_iter().map(|l| (l.name(), write_sample(&dir, l))).collect();
    let view: BTreeMap<&str, Value> = files.iter().map(|(l, f)| (*l, python_view(f))).collect();
    let regions = &view["regions"]["regions"];
    // In the regions layout the Python reader names regions by their group ("io|write").
    let same = |ours: &str, theirs: &str| (ours.to_string(), theirs.to_string());
    for (name, group) in [same("solve", "solve"), same("io/write", "io|write")] {
        let r = &regions[&group]["0"];
        let c = &view["columnar"]["regions"][&name]["0"];
        let a = &view["aggregate"]["regions"][&name]["0"];
        for key in ["calls", "total_ns", "min_ns", "max_ns", "starts_ns", "ends_ns", "durations_ns"] {
            assert_eq!(c[key], r[key], "columnar {name} {key}");
        }
        for key in ["calls", "total_ns", "min_ns", "max_ns"] {
            assert_eq!(a[key], r[key], "aggregate {name} {key}");
        }
    }
    assert_eq!(view["columnar"]["regions"]["solve"]["0"]["thread_ids"], serde_json::json!([0, 1, 0, 1, 1]));
    assert_eq!(view["columnar"]["regions"]["solve"]["0"]["starts_ns"][2], 1_000_000_000_100i64);
    assert_eq!(view["aggregate"]["regions"]["solve"]["0"]["max_ns"], 5_000_000_100i64);
    // The region with only an open call is a row too.
    assert_eq!(view["aggregate"]["regions"]["never closed"]["0"]["calls"], 0);

    // The Python package's CLI reads every layout.
    let cli = python().with_file_name("scope-profiler");
    for (layout, f) in &files {
        for cmd in ["inspect", "report"] {
            let out = run(Command::new(&cli).arg(cmd).arg(f).current_dir(&dir));
            assert!(out.status.success(), "scope-profiler {cmd} on {layout}: {}\n{}", text(&out.stdout), text(&out.stderr));
            if cmd == "inspect" {
                assert!(text(&out.stdout).contains("solve"), "{layout}: {}", text(&out.stdout));
            }
        }
        let out = run(Command::new(&cli).arg("diff").arg(&files["regions"]).arg(f).current_dir(&dir));
        assert!(out.status.success(), "scope-profiler diff regions {layout}: {}\n{}", text(&out.stdout), text(&out.stderr));
    }
}

#[test]
fn columnar_costs_at_most_17_bytes_per_call_and_aggregate_is_small() {
    let dir = scratch("layouts_size");
    let n = 200_000i64;
    let mut p = RankProfile::default();
    p.info.thread_os_ids = vec![1, 2];
    let t0 = 1_000_000_000i64;
    let starts: Vec<i64> = (0..n).map(|i| t0 + i * 100).collect();
    let ends: Vec<i64> = starts.iter().map(|s| s + 40).collect();
    let tids: Vec<i64> = (0..n).map(|i| i % 2).collect();
    p.regions.push(RegionData::from_columns("hot", starts, ends, tids));
    let mut sizes = BTreeMap::new();
    for layout in [Layout::Regions, Layout::Columnar, Layout::Aggregate] {
        let path = write_in_layout(&dir, layout, &p, &[]);
        sizes.insert(layout.name(), std::fs::metadata(&path).unwrap().len());
    }
    // 17 bytes per call, plus a fixed part (index tables, metadata) under 64 KiB.
    assert!(sizes["columnar"] <= 17 * n as u64 + 65536, "{sizes:?}");
    assert!(sizes["regions"] >= 24 * n as u64, "the regions layout keeps 24 bytes per call: {sizes:?}");
    let h5 = hdf5::File::open(dir.join("columnar.h5")).unwrap();
    let event_bytes: u64 = ["start_deltas", "durations", "thread_ids"].iter().map(|c| h5.dataset(&format!("events/{c}")).unwrap().storage_size()).sum();
    assert_eq!(event_bytes, 17 * n as u64);
    assert!(sizes["aggregate"] < 1 << 20, "{sizes:?}");
}

/// LIKWID results stay in `rank<N>/likwid` in every layout and the Python reader finds them.
/// A stand-in for what this machine cannot do (no PMU, and LIKWID's fake-MSR runs do not yet
/// work on this CPU): the counter results are given, not measured; the real end-to-end run
/// per layout is in tests/likwid_e2e.rs (likwid_results_are_written_in_every_layout).
#[test]
fn likwid_results_are_kept_in_every_layout_given_results() {
    use scope_profiler::model::{LikwidRun, RegionResult};
    let dir = scratch("layouts_likwid");
    for layout in [Layout::Regions, Layout::Columnar, Layout::Aggregate] {
        let mut p = sample_profile();
        p.likwid = LikwidRun {
            env: vec![("LIKWID_EVENTS".into(), "FLOPS_DP".into())],
            regions: vec![RegionResult {
                tag: "solve".into(),
                group_id: 0,
                group_name: "FLOPS_DP".into(),
                source: "full_api".into(),
                event_names: vec!["INSTR_RETIRED_ANY".into()],
                counter_names: vec!["FIXC0".into()],
                metric_names: vec!["CPI".into()],
                cpus: vec![0, 1],
                times: vec![0.5, 0.25],
                call_counts: vec![3, 2],
                events: vec![vec![100.0, 200.0]],
                metrics: vec![vec![1.5, 2.5]],
            }],
        };
        let path = dir.join(format!("{}.h5", layout.name()));
        let mut w = layout_writer(layout, Plan::of(&p));
        scope_profiler::output::write_file(&path, |f| {
            f.write_metadata(&[])?;
            f.write_rank(0, &p, w.as_mut())?;
            w.finish(f.file())
        })
        .unwrap();
        // The writer is still alive: the file must be closed all the same (it can be copied
        // complete, and read).
        let py = python_view(&readable_copy(&path));
        assert_eq!(py["has_likwid"], true, "{}", layout.name());
        let r = &py["likwid"]["0"]["solve"];
        assert_eq!(r["call_counts"], serde_json::json!([3, 2]), "{}", layout.name());
        assert_eq!(r["metrics"], serde_json::json!([[1.5, 2.5]]), "{}", layout.name());
        assert_eq!(py["regions"]["solve"]["0"]["calls"], 5, "{}", layout.name());
    }
}

/// sptool (built from this workspace) reads every layout: the same calls and totals, and
/// for the schema-3 layouts the exclusive times and duration histograms.
#[test]
fn sptool_inspects_and_exports_every_layout() {
    let mut sptool = lib_dir().join("sptool");
    if !sptool.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let release = lib_dir().ends_with("release");
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "sptool"]).current_dir(repo_root());
        if release {
            cmd.arg("--release");
        }
        let out = run(&mut cmd);
        assert!(out.status.success(), "building sptool: {}", text(&out.stderr));
        sptool = lib_dir().join("sptool");
    }
    let dir = scratch("layouts_sptool");
    for layout in [Layout::Regions, Layout::Columnar, Layout::Aggregate] {
        let file = write_sample(&dir, layout);
        let out = run(Command::new(&sptool).arg("inspect").arg(&file));
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{}: {}", layout.name(), text(&out.stderr));
        let solve = stdout.lines().find(|l| l.trim_start().starts_with("solve ")).unwrap_or_else(|| panic!("{stdout}"));
        assert!(solve.split_whitespace().nth(2) == Some("5"), "5 calls of solve: {solve}");
        if layout != Layout::Regions {
            assert!(stdout.contains("Exclusive time and call durations"), "{stdout}");
            // 50, 85, 5e9+100, 49 and 1 ns: buckets [32ns,64ns) twice, [64ns,128ns), [1ns,2ns) and 2^32 ns.
            assert!(stdout.contains("[32ns, 64ns) 2"), "{stdout}");
        }
        let out = run(Command::new(&sptool).args(["export", "--format", "json", "-o", "-"]).arg(&file));
        assert!(out.status.success(), "{}: {}", layout.name(), text(&out.stderr));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let row = doc["rows"].as_array().unwrap().iter().find(|r| r["region"] == "solve").unwrap().clone();
        assert_eq!(row["calls"], 5, "{}", layout.name());
        assert!((row["total_s"].as_f64().unwrap() - 5.000000285).abs() < 1e-9, "{row}");
        if layout == Layout::Aggregate {
            let h = doc["histograms"].as_array().unwrap().iter().find(|h| h["region"] == "solve").unwrap();
            assert_eq!(h["histogram_counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).sum::<u64>(), 5);
        }
    }
}

/// Large regions go through the pipelined finalize (decoding on a second thread): the same
/// recorded calls (two threads, nesting, recursion) written in the regions and the columnar
/// layout give identical columns, call for call, and the same totals through the Python reader.
/// Forty small regions beside them (1 to 2,000 calls, one with none) are written side by side
/// on two threads with direct writes, one after another through HDF5: the same bytes. Written
/// from a thread bound to one CPU (no helper at all), the same bytes again.
#[test]
fn pipelined_finalize_writes_identical_calls_in_regions_and_columnar() {
    use scope_profiler::profile::{ThreadRecord, merge};
    use scope_profiler::recorder::ThreadData;
    let dir = scratch("layouts_pipelined");
    let small = 40u32;
    let mut names = vec!["outer".to_string(), "inner".to_string()];
    names.extend((0..small).map(|k| format!("small{k}")));
    let record = || -> Vec<ThreadRecord> {
        (0..2u32)
            .map(|t| {
                let mut d = ThreadData::default();
                let mut now = 1_000_000_000i64 + t as i64 * 7;
                for i in 0..400_000i64 {
                    assert!(d.open(0, now));
                    assert!(d.open(1, now + 3));
                    if i % 1000 == 0 {
                        assert!(d.open(1, now + 4)); // recursion: logged out of start order
                        assert!(d.close(1, now + 5));
                    }
                    assert!(d.close(1, now + 10 + i % 13));
                    assert!(d.close(0, now + 40));
                    now += 50 + (i % 3) * 20;
                }
                // The small regions, each a different size (region small7 has no calls).
                for k in 0..small {
                    let calls = if k == 7 { 0 } else { (k as i64 * 389 + t as i64 * 17) % 2000 + 1 };
                    for i in 0..calls {
                        assert!(d.open(2 + k, now));
                        assert!(d.close(2 + k, now + 5 + (i + k as i64) % 29));
                        now += 40;
                    }
                }
                ThreadRecord { index: t, os_tid: 100 + t as i64, data: d }
            })
            .collect()
    };
    let profile = || {
        let (regions, kept) = merge(&names, record(), &scope_profiler::clock::Timebase::monotonic());
        let mut p = RankProfile { regions, ..Default::default() };
        p.info.thread_os_ids = kept.iter().map(|t| t.1).collect();
        p
    };
    // The two large regions are shared between two threads (calls of 4 bytes: 800,000 of them).
    assert!(profile().regions[..2].iter().all(|r| r.shares_its_merge()), "the large regions are large");
    let mut files = BTreeMap::new();
    for layout in [Layout::Regions, Layout::Columnar] {
        files.insert(layout.name(), readable_copy(&write_in_layout(&dir, layout, &profile(), &[])));
        // The same through HDF5's writes: a driver without a file descriptor (the in-memory
        // `core` driver, saved to disk at close) takes the other path, merging on a helper
        // thread while this one writes through HDF5. Same columns, same statistics.
        let path = dir.join(format!("{}_core.h5", layout.name()));
        let p = profile();
        let file = hdf5::File::with_options().with_fapl(|f| f.core_filebacked(true)).create(&path).unwrap();
        let mut w = layout_writer(layout, Plan::of(&p));
        file.create_group("rank0").unwrap();
        w.write_rank(&file, 0, &p).unwrap();
        w.finish(&file).unwrap();
        drop(w);
        file.close().unwrap();
        // The same from a thread that may run on one CPU only (a rank bound to a core): no
        // helper, every slab merged and written by that thread.
        let one_cpu = dir.join("one_cpu");
        std::fs::create_dir_all(&one_cpu).unwrap();
        let bound = std::thread::scope(|s| {
            s.spawn(|| {
                // SAFETY: a zeroed set with one CPU of this thread's mask; sets this thread's own mask.
                unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
                    let first = (0..libc::CPU_SETSIZE as usize).find(|&c| libc::CPU_ISSET(c, &set)).unwrap();
                    let mut one: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(first, &mut one);
                    assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one), 0);
                }
                assert_eq!(scope_profiler::model::workers::workers(2), 1, "bound to one CPU: no helper");
                readable_copy(&write_in_layout(&one_cpu, layout, &profile(), &[]))
            })
            .join()
            .unwrap()
        });
        for other in [path, bound] {
            let (a, b) = (hdf5::File::open(&files[layout.name()]).unwrap(), hdf5::File::open(&other).unwrap());
            let same = |name: &str| {
                let (x, y) = (a.dataset(name).unwrap(), b.dataset(name).unwrap());
                if name.ends_with("thread_ids") && layout == Layout::Columnar {
                    assert!(x.read_raw::<u8>().unwrap() == y.read_raw::<u8>().unwrap(), "{name}");
                } else {
                    assert!(x.read_raw::<i64>().unwrap() == y.read_raw::<i64>().unwrap(), "{name}");
                }
            };
            match layout {
                Layout::Regions => {
                    let regions = a.group("rank0/regions").unwrap().member_names().unwrap();
                    assert_eq!(regions.len(), names.len() - 1, "every region with calls: {regions:?}");
                    regions.iter().flat_map(|r| ["start_times", "end_times", "thread_ids"].map(|c| format!("rank0/regions/{r}/{c}"))).for_each(|d| same(&d))
                }
                _ => {
                    ["events/start_deltas", "events/durations", "events/thread_ids"].iter().for_each(|d| same(d));
                    let stats = |f: &hdf5::File| {
                        let s: Vec<scope_profiler::writer::columnar::Summary> = f.dataset("rank_region_index/summary_statistics").unwrap().read_raw().unwrap();
                        s.iter().map(|s| (s.total, s.minimum, s.maximum, s.first, s.last, s.mean.to_bits(), s.m2.to_bits())).collect::<Vec<_>>()
                    };
                    assert_eq!(stats(&a), stats(&b));
                }
            }
        }
    }
    let regions = read_regions(&hdf5::File::open(&files["regions"]).unwrap(), 0);
    let h5 = hdf5::File::open(&files["columnar"]).unwrap();
    let deltas: Vec<i64> = h5.dataset("events/start_deltas").unwrap().read_raw().unwrap();
    let durations: Vec<i64> = h5.dataset("events/durations").unwrap().read_raw().unwrap();
    let tids: Vec<u8> = h5.dataset("events/thread_ids").unwrap().read_raw().unwrap();
    let offsets: Vec<u64> = h5.dataset("rank_region_index/event_offsets").unwrap().read_raw().unwrap();
    let counts: Vec<u64> = h5.dataset("rank_region_index/event_counts").unwrap().read_raw().unwrap();
    for (row, name) in ["outer", "inner"].iter().enumerate() {
        let r = &regions[*name];
        let range = offsets[row] as usize..(offsets[row] + counts[row]) as usize;
        let mut start = 0i64;
        let starts: Vec<i64> = deltas[range.clone()].iter().map(|d| {
            start += d;
            start
        }).collect();
        let ends: Vec<i64> = starts.iter().zip(&durations[range.clone()]).map(|(s, d)| s + d).collect();
        let threads: Vec<i64> = tids[range].iter().map(|&t| t as i64).collect();
        assert_eq!(starts.len(), if *name == "outer" { 800_000 } else { 800_800 });
        assert!(starts == r.starts && ends == r.ends && threads == r.thread_ids, "{name}: columns differ");
        // The row's summary statistics (summed by the workers that encoded its slabs) equal
        // those of the calls.
        let summaries: Vec<scope_profiler::writer::columnar::Summary> = h5.dataset("rank_region_index/summary_statistics").unwrap().read_raw().unwrap();
        let s = &summaries[row];
        let durations: Vec<i64> = r.starts.iter().zip(&r.ends).map(|(a, b)| b - a).collect();
        let n = durations.len() as f64;
        let mean = durations.iter().sum::<i64>() as f64 / n;
        let m2: f64 = durations.iter().map(|&d| (d as f64 - mean).powi(2)).sum();
        assert_eq!((s.total, s.minimum, s.maximum), (durations.iter().sum(), *durations.iter().min().unwrap(), *durations.iter().max().unwrap()), "{name}");
        assert_eq!((s.first, s.last), (durations[0], *durations.last().unwrap()), "{name}");
        assert_eq!((s.start_minimum, s.end_maximum), (r.starts[0], *r.ends.iter().max().unwrap()), "{name}");
        assert!((s.mean - mean).abs() <= 1e-9 * mean && (s.m2 - m2).abs() <= 1e-9 * m2.max(1.0), "{name}: mean {} vs {mean}, m2 {} vs {m2}", s.mean, s.m2);
    }
    let (a, b) = (python_view(&files["regions"]), python_view(&files["columnar"]));
    for name in ["outer", "inner"] {
        for key in ["calls", "total_ns", "min_ns", "max_ns"] {
            assert_eq!(a["regions"][name]["0"][key], b["regions"][name]["0"][key], "{name} {key}");
        }
    }
}

/// Finalize merges and writes a large region on two threads (and frees the calls on a third):
/// when no thread can be created (RLIMIT_NPROC of 1, as the unprivileged user `nobody`) it
/// does all of it on the calling thread, and the file holds every call as a normal run of the
/// same program does: exact counts, per thread, starts in order.
#[test]
fn finalize_without_threads_writes_the_same_calls() {
    let dir = scratch("layouts_no_threads").canonicalize().unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let exe = compile(Lang::C, "finalize_threads", &["tests/c/finalize_threads.c"], &dir, &["-lpthread"]);
    let mut shapes = Vec::new();
    for limited in [false, true] {
        let out = dir.join(format!("limited_{limited}.h5"));
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"]).arg(&exe).arg(&out).current_dir(&dir).env("HOME", "/nonexistent");
        if limited {
            cmd.arg("nothreads");
        }
        let o = run(&mut cmd);
        assert!(o.status.success(), "limited {limited}: {}\n{}", text(&o.stdout), text(&o.stderr));
        let expected = expectations(&text(&o.stdout));
        let regions = read_regions(&hdf5::File::open(&out).unwrap(), 0);
        let mut shape = Vec::new();
        for (name, &calls) in &expected {
            let r = &regions[name.as_str()];
            assert_eq!(r.starts.len() as u64, calls, "limited {limited}: calls of {name}");
            assert!(r.starts.is_sorted(), "limited {limited}: {name} in start order");
            assert!(r.starts.iter().zip(&r.ends).all(|(s, e)| s <= e), "limited {limited}: {name}");
            let per_thread: Vec<usize> = (0..2).map(|t| r.thread_ids.iter().filter(|&&x| x == t).count()).collect();
            assert_eq!(per_thread, vec![calls as usize / 2; 2], "limited {limited}: {name} per thread");
            shape.push((name.clone(), r.starts.len(), per_thread));
        }
        shapes.push(shape);
    }
    assert_eq!(shapes[0], shapes[1]);
}
