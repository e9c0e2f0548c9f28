//! perf_event counters per region and thread, with real software events on this machine
//! (task-clock, page-faults, context-switches), threads, MPI, the PyPI reader as oracle, a
//! hardware event (this VM has no PMU: one warning, timings kept, elsewhere it is counted),
//! bad event names, and the analytic FLOP/byte annotations.

mod support;
use support::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SOFT: &str = "task-clock,page-faults,context-switches,cpu-migrations";

fn build(dir: &Path) -> PathBuf {
    compile(Lang::C, "perf_events", &["tests/c/perf_events.c"], dir, &["-lpthread"])
}

fn run_prog(exe: &Path, file: &Path, env_events: Option<&str>, option_events: Option<&str>) -> Output {
    let mut cmd = Command::new(exe);
    cmd.arg(file);
    if let Some(o) = option_events {
        cmd.arg(o);
    }
    cmd.env_remove("SCOPE_PROFILER_PERF_EVENTS");
    if let Some(e) = env_events {
        cmd.env("SCOPE_PROFILER_PERF_EVENTS", e);
    }
    let out = run(&mut cmd);
    assert!(out.status.success(), "perf_events failed\nstdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("DONE"));
    out
}

fn info(stdout: &str, key: &str) -> f64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("INFO\t{key}\t")))
        .unwrap_or_else(|| panic!("no INFO {key} in {stdout}"))
        .trim()
        .parse()
        .unwrap()
}

fn str_list(loc: &hdf5::Location, name: &str) -> Vec<String> {
    let v: Vec<hdf5::types::VarLenUnicode> = loc.attr(name).unwrap().read_raw().unwrap();
    v.iter().map(|s| s.as_str().to_string()).collect()
}

fn f64_attr(loc: &hdf5::Location, name: &str) -> f64 {
    loc.attr(name).unwrap().read_scalar::<f64>().unwrap()
}

/// One region of rank<N>/perf_events as we wrote it.
#[derive(Debug)]
struct PerfRegion {
    calls: i64,
    events: Vec<String>,
    values: BTreeMap<String, u64>,
    running_fraction: Vec<f64>,
    thread_ids: Vec<i64>,
    thread_values: Vec<Vec<f64>>,
    thread_calls: Vec<i64>,
}

fn perf_regions(file: &Path, rank: usize) -> BTreeMap<String, PerfRegion> {
    let h5 = hdf5::File::open(file).unwrap();
    let mut out = BTreeMap::new();
    let Ok(g) = h5.group(&format!("rank{rank}/perf_events")) else { return out };
    for name in g.member_names().unwrap() {
        let r = g.group(&name).unwrap();
        let events = str_list(&r, "event_names");
        let values: Vec<u64> = r.dataset("values").unwrap().read_raw().unwrap();
        let tv = r.dataset("thread_values").unwrap();
        let shape = tv.shape();
        let flat: Vec<f64> = tv.read_raw().unwrap();
        out.insert(
            str_attr(&r, "tag"),
            PerfRegion {
                calls: int_attr(&r, "calls"),
                values: events.iter().cloned().zip(values).collect(),
                events,
                running_fraction: r.dataset("running_fraction").unwrap().read_raw().unwrap(),
                thread_ids: r.dataset("thread_ids").unwrap().read_raw().unwrap(),
                thread_values: flat.chunks(shape[1].max(1)).map(|c| c.to_vec()).collect(),
                thread_calls: r.dataset("thread_calls").unwrap().read_raw().unwrap(),
            },
        );
    }
    out
}

/// Our values must be what the PyPI package's get_perf_events reads.
fn check_python_oracle(file: &Path, ranks: usize) {
    let py = python_view(file);
    for rank in 0..ranks {
        let ours = perf_regions(file, rank);
        let theirs = py["perf_events"][rank.to_string()].as_object().unwrap_or_else(|| panic!("no perf events for rank {rank} in {py}"));
        assert_eq!(theirs.len(), ours.len());
        for (name, r) in &ours {
            let t = &theirs[&name.replace('/', "|")];
            assert_eq!(t["calls"].as_i64().unwrap(), r.calls, "{name}");
            for (ev, v) in &r.values {
                assert_eq!(t["values"][ev].as_u64().unwrap(), *v, "{name} {ev}");
            }
        }
    }
}

#[test]
fn software_events_per_region_threads_and_annotations() {
    let dir = scratch("perf_software");
    let exe = build(&dir);
    let file = dir.join("soft.h5");
    let out = run_prog(&exe, &file, Some(SOFT), None);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("perf event"), "software events open without warnings here:\n{stderr}");

    let h5 = hdf5::File::open(&file).unwrap();
    let timings = read_regions(&h5, 0);
    let perf = perf_regions(&file, 0);
    let names: Vec<&str> = perf.keys().map(String::as_str).collect();
    assert_eq!(names, ["busy", "outer", "sleep", "touch", "work"]);
    for (name, r) in &perf {
        assert_eq!(r.events, SOFT.split(',').collect::<Vec<_>>());
        assert_eq!(r.calls as usize, timings[name].starts.len(), "{name}: one reading pair per recorded call");
        // Software events are never multiplexed.
        assert!(r.running_fraction.iter().all(|&f| f == 1.0), "{name}: {:?}", r.running_fraction);
        assert_eq!(r.thread_calls.iter().sum::<i64>(), r.calls);
    }

    // task-clock of the busy region: the thread's own CPU time around the calls, and never
    // more than the wall time the file records for them (a correctness check, not a speed one).
    let busy = &perf["busy"];
    let task = busy.values["task-clock"] as f64;
    let cpu = info(&stdout, "busy_cpu_ns");
    let wall: i64 = timings["busy"].starts.iter().zip(&timings["busy"].ends).map(|(s, e)| e - s).sum();
    // Not bounded above by the thread's CPU time: on a VM the kernel's task-clock most likely counts the
    // time the hypervisor took from a running vCPU (steal time), which the thread's CPU clock
    // leaves out (seen: task-clock 67 ms against 37 ms of thread CPU time at load average 12).
    assert!(task >= 0.5 * cpu, "task-clock {task} ns vs thread CPU time {cpu} ns");
    assert!(task <= 1.1 * wall as f64, "task-clock {task} ns vs wall {wall} ns");
    // Counts include child regions.
    assert!(perf["outer"].values["task-clock"] >= busy.values["task-clock"]);
    assert!(perf["outer"].values["context-switches"] >= busy.values["context-switches"]);

    // First-touched memory faults once per page; a sleeping region switches context.
    let pages = info(&stdout, "touched_pages");
    // One fault per base page in principle (the program asks for base pages); a loaded VM was
    // once seen to report 3074 of 8192 (the kernel backed part of the mapping otherwise), so
    // the check is that the faults of first touch are counted in this region, in bulk, and not
    // in a region that touches nothing new.
    let faults = perf["touch"].values["page-faults"] as f64;
    assert!(faults >= 0.25 * pages, "{:?}", perf["touch"]);
    assert!(faults >= 10.0 * (perf["sleep"].values["page-faults"] as f64 + 10.0), "touch {:?} sleep {:?}", perf["touch"], perf["sleep"]);
    assert!(perf["sleep"].values["context-switches"] >= 3, "{:?}", perf["sleep"]);

    // Worker threads: one row each, ids matching the timings' thread ids.
    let work = &perf["work"];
    assert_eq!(work.calls, 9);
    assert_eq!(work.thread_calls, vec![3, 3, 3]);
    let mut tids: Vec<i64> = timings["work"].thread_ids.clone();
    tids.sort();
    tids.dedup();
    assert_eq!(work.thread_ids, tids);
    assert!(!work.thread_ids.contains(&0), "the main thread did not run 'work'");
    for (row, v) in work.thread_values.iter().enumerate() {
        assert!(v[0] > 0.0, "task-clock of worker row {row}");
    }
    let sum: f64 = work.thread_values.iter().map(|v| v[0]).sum();
    assert!((sum - work.values["task-clock"] as f64).abs() <= 1.0);

    // Annotations: totals per region, per-thread rows, misuse refused.
    let a = h5.group("rank0/annotations").unwrap();
    assert_eq!(a.member_names().unwrap(), ["busy", "work"]);
    let b = a.group("busy").unwrap();
    assert_eq!(f64_attr(&b, "flops"), 5e8);
    assert_eq!(f64_attr(&b, "bytes"), 1e9);
    let w = a.group("work").unwrap();
    assert_eq!(f64_attr(&w, "flops"), 9000.0);
    assert!(w.attr("bytes").is_err(), "bytes were never added to 'work'");
    assert_eq!(w.dataset("thread_flops").unwrap().read_raw::<f64>().unwrap(), vec![3000.0; 3]);
    assert_eq!(info(&stdout, "bad_handle"), -8.0);
    assert_eq!(info(&stdout, "nan"), -4.0);

    check_python_oracle(&file, 1);
    // The PyPI package's inspect shows our table, and still reads the timings.
    let insp = run(Command::new(python()).args(["-m", "scope_profiler", "inspect"]).arg(&file));
    let itext = text(&insp.stdout);
    assert!(insp.status.success(), "{}", text(&insp.stderr));
    assert!(itext.contains("Perf events (rank 0)") && itext.contains("task-clock"), "{itext}");
}

#[test]
fn options_field_overrides_environment_and_no_events_writes_no_group() {
    let dir = scratch("perf_options");
    let exe = build(&dir);
    let file = dir.join("opt.h5");
    run_prog(&exe, &file, Some("page-faults"), Some("task-clock"));
    let perf = perf_regions(&file, 0);
    assert_eq!(perf["busy"].events, ["task-clock"]);

    let file = dir.join("none.h5");
    run_prog(&exe, &file, None, None);
    let h5 = hdf5::File::open(&file).unwrap();
    assert!(!h5.group("rank0").unwrap().link_exists("perf_events"));
    // Annotations need no counters.
    assert_eq!(f64_attr(&h5.group("rank0/annotations/busy").unwrap(), "flops"), 5e8);
}

#[test]
fn hardware_event_warns_once_here_and_keeps_everything_else() {
    let dir = scratch("perf_hardware");
    let exe = build(&dir);
    let file = dir.join("hw.h5");
    let out = run_prog(&exe, &file, Some("task-clock,cycles"), None);
    let stderr = text(&out.stderr);
    let perf = perf_regions(&file, 0);
    let h5 = hdf5::File::open(&file).unwrap();
    let timings = read_regions(&h5, 0);
    assert_eq!(timings.len(), 5, "every region keeps its timings");
    let warned = stderr.matches("perf event \"cycles\"").count();
    if warned == 1 {
        // No PMU (this VM): ENOENT, named, once; task-clock is still counted.
        assert!(stderr.contains("not counted"), "{stderr}");
        assert_eq!(perf["busy"].events, ["task-clock"]);
        assert!(perf["busy"].values["task-clock"] > 0);
    } else {
        // A machine with a PMU counts it (listed in the order asked for, though it leads the group).
        assert_eq!(warned, 0, "{stderr}");
        assert_eq!(perf["busy"].events, ["task-clock", "cycles"]);
        assert!(perf["busy"].values["cycles"] > 0);
    }
    check_python_oracle(&file, 1);
}

#[test]
fn bad_event_names_are_named_once_and_lose_nothing() {
    let dir = scratch("perf_bad_names");
    let exe = build(&dir);
    let file = dir.join("bad.h5");
    let out = run_prog(&exe, &file, Some("task-clock,cyclez,nosuchpmu/event=0x3c/,r12xyz,page-faults"), None);
    let stderr = text(&out.stderr);
    for token in ["\"cyclez\"", "\"nosuchpmu/event=0x3c/\"", "\"r12xyz\""] {
        assert_eq!(stderr.matches(token).count(), 1, "one error naming {token}:\n{stderr}");
    }
    let perf = perf_regions(&file, 0);
    assert_eq!(perf["touch"].events, ["task-clock", "page-faults"]);
    assert!(perf["touch"].values["page-faults"] > 0);
    let h5 = hdf5::File::open(&file).unwrap();
    assert_eq!(read_regions(&h5, 0).len(), 5);
}

#[test]
fn flops_event_set_is_one_warning_per_event_without_pmu() {
    let dir = scratch("perf_flops");
    let exe = build(&dir);
    let file = dir.join("flops.h5");
    let out = run_prog(&exe, &file, Some("flops,task-clock"), None);
    let stderr = text(&out.stderr);
    let h5 = hdf5::File::open(&file).unwrap();
    let g = h5.group("rank0/perf_events").unwrap();
    let events = str_list(&g, "event_names");
    let busy = g.group("busy").unwrap();
    if events.len() == 1 {
        // No PMU (or no FLOP events for this CPU): each FLOP event is named once, no counted FLOPs.
        assert_eq!(events, ["task-clock"]);
        assert!(stderr.contains("not counted") || stderr.contains("perf event set \"flops\""), "{stderr}");
        for line in stderr.lines().filter(|l| l.contains("perf event")) {
            assert_eq!(stderr.matches(line).count(), 1, "{stderr}");
        }
        assert!(busy.attr("counted_flops").is_err());
    } else {
        assert!(busy.attr("counted_flops").is_ok());
    }
    assert_eq!(read_regions(&h5, 0).len(), 5);
}

#[test]
fn mpi_two_ranks_each_count_their_regions() {
    let dir = scratch("perf_mpi");
    let exe = compile_with("mpicc", &["-std=c99", "-D_GNU_SOURCE"], "mpi_ranks", &["tests/c/mpi_ranks.c"], &dir, &[]);
    let file = dir.join("mpi.h5");
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "-np", "2"])
        .arg(&exe)
        .args([file.to_str().unwrap(), "normal"])
        .current_dir(&dir)
        .env("SCOPE_PROFILER_PERF_EVENTS", "task-clock,context-switches")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
    let out = run(&mut cmd);
    assert!(out.status.success(), "{}\n{}", text(&out.stdout), text(&out.stderr));
    for rank in 0..2usize {
        let perf = perf_regions(&file, rank);
        assert_eq!(perf["compute"].calls, (rank as i64 + 1) * 10, "rank {rank}");
        assert_eq!(perf["comm/allreduce"].calls, 5);
        assert!(perf["compute"].values["task-clock"] > 0);
        assert!(perf.contains_key(&format!("rank {rank} only")));
    }
    check_python_oracle(&file, 2);
}

#[path = "fortran/support.rs"]
mod fortran_support;

#[test]
fn fortran_setup_option_and_annotations() {
    let dir = scratch("perf_fortran");
    let exe = fortran_support::build_fortran("gfortran", "tests/fortran/perf_usage.f90", &dir, "perf_usage", &[]);
    let file = dir.join("f.h5");
    let out = run(Command::new(&exe).arg(&file).env_remove("SCOPE_PROFILER_PERF_EVENTS"));
    assert!(out.status.success() && text(&out.stdout).contains("DONE failures=0"), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let perf = perf_regions(&file, 0);
    assert_eq!(perf.keys().collect::<Vec<_>>(), ["axpy"], "perf_regions=\"ax*\": \"setup\" is timed only");
    assert_eq!(perf["axpy"].events, ["task-clock", "page-faults"]);
    assert_eq!(perf["axpy"].calls, 4);
    let h5 = hdf5::File::open(&file).unwrap();
    let a = h5.group("rank0/annotations/axpy").unwrap();
    assert_eq!(f64_attr(&a, "flops"), 8e6);
    assert_eq!(f64_attr(&a, "bytes"), 2.4e7);
}

#[test]
fn cxx_region_annotations() {
    let dir = scratch("perf_cxx");
    let exe = compile(Lang::Cxx, "perf_cxx", &["tests/c/perf_cxx.cpp"], &dir, &[]);
    let file = dir.join("cxx.h5");
    let out = run(Command::new(&exe).arg(&file));
    assert!(out.status.success() && text(&out.stdout).contains("DONE failures=0"), "{}\n{}", text(&out.stdout), text(&out.stderr));
    let h5 = hdf5::File::open(&file).unwrap();
    let a = h5.group("rank0/annotations/kernel").unwrap();
    assert_eq!(f64_attr(&a, "flops"), 5e6);
    assert_eq!(f64_attr(&a, "bytes"), 8e6);
}

/// The counters are written in every layout: the schema-3 layouts keep `rank<N>/perf_events` and
/// `rank<N>/annotations` beside their region tables, and the PyPI reader reads them there too.
#[test]
fn counters_are_written_in_every_layout() {
    let dir = scratch("perf_layouts");
    let exe = build(&dir);
    for layout in ["columnar", "aggregate"] {
        let file = dir.join(format!("{layout}.h5"));
        let mut cmd = Command::new(&exe);
        cmd.arg(&file).env("SCOPE_PROFILER_PERF_EVENTS", SOFT).env("SCOPE_PROFILER_LAYOUT", layout);
        let out = run(&mut cmd);
        assert!(out.status.success() && text(&out.stdout).contains("DONE"), "{layout}: {}", text(&out.stderr));
        let perf = perf_regions(&file, 0);
        assert_eq!(perf.keys().map(String::as_str).collect::<Vec<_>>(), ["busy", "outer", "sleep", "touch", "work"], "{layout}");
        assert_eq!(perf["work"].calls, 9, "{layout}");
        let py = python_view(&file);
        assert_eq!(py["storage_layout"], layout);
        assert_eq!(py["regions"]["work"]["0"]["calls"].as_u64(), Some(9), "{layout}");
        check_python_oracle(&file, 1);
        let h5 = hdf5::File::open(&file).unwrap();
        assert_eq!(h5.group("rank0/annotations").unwrap().member_names().unwrap(), ["busy", "work"], "{layout}");
    }
}

/// Run tests/c/perf_regions.c under strace (reads and writes): its stdout, the file, and the
/// number of read() calls on its perf descriptors between its MARK lines (starts and stops of
/// regions not chosen only).
fn run_perf_regions(dir: &Path, tag: &str, env_regions: Option<&str>, option_regions: Option<&str>) -> (String, PathBuf, usize) {
    let exe = compile(Lang::C, "perf_regions", &["tests/c/perf_regions.c"], dir, &[]);
    let file = dir.join(format!("{tag}.h5"));
    let trace = dir.join(format!("{tag}.strace"));
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-e", "trace=read,write", "-o"]).arg(&trace).arg(&exe).arg(&file);
    if let Some(o) = option_regions {
        cmd.arg(o);
    }
    cmd.env("SCOPE_PROFILER_PERF_EVENTS", "task-clock,page-faults").env_remove("SCOPE_PROFILER_PERF_REGIONS");
    if let Some(e) = env_regions {
        cmd.env("SCOPE_PROFILER_PERF_REGIONS", e);
    }
    let out = run(&mut cmd);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{cmd:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let fds: Vec<String> = stdout.lines().filter_map(|l| l.strip_prefix("FD ")).map(String::from).collect();
    let log = std::fs::read_to_string(&trace).unwrap();
    let (mut inside, mut reads) = (false, 0);
    for line in log.lines() {
        if line.contains("MARK begin") {
            inside = true;
        } else if line.contains("MARK end") {
            inside = false;
        } else if inside {
            if let Some(rest) = line.split_once(" read(").map(|x| x.1) {
                reads += fds.iter().any(|fd| rest.starts_with(&format!("{fd},"))) as usize;
            }
        }
    }
    (stdout, file, reads)
}

/// SCOPE_PROFILER_PERF_REGIONS: only the chosen regions count (and read the counters); the
/// others cost no read(), and a thread that runs none of them opens no group.
#[test]
fn perf_regions_choose_the_regions_that_count() {
    let dir = scratch("perf_regions");
    let (stdout, file, reads) = run_perf_regions(&dir, "env", Some("solve*, io"), None);
    assert!(stdout.contains("PERF_FDS before 0\n"), "a group was opened before any chosen region ran:\n{stdout}");
    let after: usize = stdout.lines().find_map(|l| l.strip_prefix("PERF_FDS after ")).unwrap().trim().parse().unwrap();
    assert!(after >= 1, "no group after the chosen regions:\n{stdout}");
    assert_eq!(reads, 0, "regions not chosen read the counters");
    let regions = perf_regions(&file, 0);
    assert_eq!(regions.keys().collect::<Vec<_>>(), ["io", "solve", "solve/inner"], "only the chosen regions have counts");
    for r in regions.values() {
        assert_eq!(r.calls, 100);
        assert_eq!(r.events, ["task-clock", "page-faults"]);
    }
    // Timings are kept for every region; the request is in the metadata.
    let h5 = hdf5::File::open(&file).unwrap();
    let timed = read_regions(&h5, 0);
    assert_eq!((timed["other"].starts.len(), timed["my_io"].starts.len()), (2000, 2000));
    assert_eq!(str_attr(&h5.group("metadata").unwrap(), "perf_regions"), "solve*, io");
    check_python_oracle(&file, 1);

    // Without the list every region counts, and the others read too (the comparison above
    // would pass for nothing otherwise).
    let (_, file, reads) = run_perf_regions(&dir, "all", None, None);
    assert!(reads >= 2000, "every region reads the counters without a list: {reads} reads");
    assert_eq!(perf_regions(&file, 0).len(), 5);

    // The option field wins over the environment.
    let (_, file, _) = run_perf_regions(&dir, "option", Some("other"), Some("io"));
    assert_eq!(perf_regions(&file, 0).keys().collect::<Vec<_>>(), ["io"]);

    // A list that matches nothing: one warning, no perf groups, timings kept.
    let exe = compile(Lang::C, "perf_regions", &["tests/c/perf_regions.c"], &dir, &[]);
    let nothing = dir.join("nothing.h5");
    let out = run(Command::new(&exe)
        .arg(&nothing)
        .env("SCOPE_PROFILER_PERF_EVENTS", "task-clock")
        .env("SCOPE_PROFILER_PERF_REGIONS", "Solve"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("PERF_FDS after 0\n"), "{}", text(&out.stdout));
    assert_eq!(text(&out.stderr).matches("SCOPE_PROFILER_PERF_REGIONS matched no region").count(), 1, "{}", text(&out.stderr));
    assert!(perf_regions(&nothing, 0).is_empty());
    assert_eq!(read_regions(&hdf5::File::open(&nothing).unwrap(), 0).len(), 5);
}
