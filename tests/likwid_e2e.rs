//! End-to-end tests of the LIKWID support with the real LIKWID, in both supported versions:
//! Debian's `likwid` 5.2.2 (the system's) and 5.5.1 built from the vendored release tarball
//! (scripts/likwid55.sh, into the ignored `.likwid/`). likwid-perfctr / likwid-mpirun start C
//! programs linked to target/<profile>/libscope_profiler.so, and we read the HDF5 file back
//! with the hdf5 crate and with the PyPI package. The scenarios are functions of the LIKWID
//! installation; `both_versions!` makes one test per scenario and version (`likwid52::*`,
//! `likwid55::*`). Where the 5.5 tarball is absent, the `likwid55::*` tests pass as skipped
//! by design (one line says so).
//!
//! This VM has no MSRs, so every run goes through tests/likwid/fake_msr.sh: a private mount
//! namespace with sparse zero-filled /dev/cpu/N/msr files and a LIKWID topology file that
//! claims a Zen3 with this host's core layout (stand-ins for hardware: counters read 0, the
//! group files and event names are zen3's on every host, everything else is LIKWID's real
//! code). In the same namespace LIKWID's access daemon is a stand-in that refuses to start,
//! as the real one does on a CPU it does not know (AMD Zen5), and Debian's likwid-perfctr
//! selects direct access also where likwid-mpirun starts it without `-M 0`: no test needs
//! the daemon, so the tests run alike on Zen3, Zen4, Zen5 and Intel hosts. LIKWID 5.2,
//! util-linux `unshare`, root (or unprivileged user namespaces), cc and (for the MPI tests)
//! OpenMPI are required: a missing tool fails the test, it does not skip it.
//!
//! The oracle for names is likwid-perfctr's own stdout (its region tables are printed
//! from the marker file after our program exits, which also proves the file survived).

mod support;

use scope_profiler::likwid::tags::tag_for;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use support::{repo_root, run, scratch, text};

// ---------------------------------------------------------------------------------------
// Running things

/// One LIKWID installation under test.
struct Lk {
    /// `None`: the system's (Debian 5.2.2, found through PATH and the loader's cache).
    prefix: Option<PathBuf>,
}

impl Lk {
    fn debian() -> Lk {
        Lk { prefix: None }
    }

    /// LIKWID 5.5.1 from the vendored tarball (`None`: skipped by design, see support::likwid55).
    fn v55() -> Option<Lk> {
        support::likwid55().map(|p| Lk { prefix: Some(p) })
    }

    fn label(&self) -> &'static str {
        if self.prefix.is_some() { "5.5" } else { "5.2" }
    }

    /// `lib` belongs to this installation (the system's: under /usr, not our 5.5 build).
    fn owns(&self, lib: &Path) -> bool {
        match &self.prefix {
            Some(p) => lib.starts_with(p),
            None => lib.starts_with("/usr/") && !lib.to_string_lossy().contains("/.likwid/"),
        }
    }

    /// `cmd` sees this installation the way a user's shell would after loading it
    /// (`module load likwid/5.5`): its bin/ first on PATH, LIKWID_HOME set.
    fn apply(&self, cmd: &mut Command) {
        if let Some(p) = &self.prefix {
            let path = std::env::var_os("PATH").unwrap_or_default();
            let path = std::env::join_paths(std::iter::once(p.join("bin")).chain(std::env::split_paths(&path))).unwrap();
            cmd.env("PATH", path).env("LIKWID_HOME", p);
        }
    }
}

fn fake_msr_with(lk: &Lk) -> Command {
    let mut c = fake_msr();
    lk.apply(&mut c);
    c
}

fn fake_msr() -> Command {
    let mut c = Command::new(repo_root().join("tests/likwid/fake_msr.sh"));
    // The helper found next to libscope_profiler.so must be this build's.
    c.env_remove("SCOPE_PROFILER_LIKWID_HELPER").env_remove("SCOPE_PROFILER_LIKWID_HELPER_TEST_FAULT");
    c.env_remove("SCOPE_PROFILER_LIKWID_TIMEOUT").env_remove("SCOPE_PROFILER_DISABLE");
    // cargo test puts target/<profile>[/deps] on LD_LIBRARY_PATH, which wins over the
    // programs' RUNPATH: without this they would load whatever library is there instead
    // of the installed tree under test.
    c.env_remove("LD_LIBRARY_PATH");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("LIKWID_") {
            c.env_remove(k);
        }
    }
    c
}

fn require_tool(name: &str) {
    let found = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file())).unwrap_or(false);
    assert!(found, "{name} not on PATH: these tests need the real LIKWID (apt-get install likwid) and util-linux");
}

struct Run {
    out: Output,
    stdout: String,
    stderr: String,
    h5: PathBuf,
    elapsed: Duration,
}

impl Run {
    fn ok(&self) -> &Self {
        assert!(self.out.status.success(), "run failed ({:?})\nstdout:\n{}\nstderr:\n{}", self.out.status, self.stdout, self.stderr);
        self
    }

    /// Our warning lines (LIKWID sometimes leaves its own message without a newline, so
    /// ours can start mid-line).
    fn warnings(&self) -> Vec<&str> {
        self.stderr.lines().filter_map(|l| l.find("[scope_profiler]").map(|i| &l[i..])).collect()
    }

    fn single_warning_containing(&self, needle: &str) -> String {
        let w = self.warnings();
        let hits: Vec<&&str> = w.iter().filter(|l| l.contains(needle)).collect();
        assert_eq!(hits.len(), 1, "expected exactly one warning containing {needle:?}, got {w:#?}\nstderr:\n{}", self.stderr);
        hits[0].to_string()
    }
}

/// Run `cmd` (already wrapped in fake_msr.sh) in `dir` with the profile going to `dir/out.h5`.
fn run_in(dir: &Path, mut cmd: Command) -> Run {
    let h5 = dir.join("out.h5");
    let _ = std::fs::remove_file(&h5);
    cmd.current_dir(dir).env("SCOPE_PROFILER_FILE", &h5).env("SCOPE_PROFILER_VERBOSE", "0");
    let t0 = Instant::now();
    let out = run(&mut cmd);
    let elapsed = t0.elapsed();
    Run { stdout: text(&out.stdout), stderr: text(&out.stderr), out, h5, elapsed }
}

/// Where the helper sits relative to the library in an installed tree.
#[derive(Clone, Copy)]
enum Layout {
    /// `<prefix>/lib/scope_profiler_likwid_helper`
    NextToLibrary,
    /// `<prefix>/libexec/scope_profiler/scope_profiler_likwid_helper`
    Libexec,
    /// No helper installed.
    Missing,
}

/// Link `src` into `path`, hard link if possible (cheap), else copy.
fn place(src: &Path, path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(path);
    if std::fs::hard_link(src, path).is_err() {
        std::fs::copy(src, path).unwrap_or_else(|e| panic!("copy {} -> {}: {e}", src.display(), path.display()));
    }
}

/// An installed tree `<dir>/prefix` with this build's libscope_profiler.so and helper.
/// `cargo test` leaves target/<profile>/libscope_profiler.so as the last `cargo build`
/// made it; the fresh one is in target/<profile>/deps, and the fresh helper is
/// CARGO_BIN_EXE_scope_profiler_likwid_helper.
fn install(dir: &Path, layout: Layout) -> PathBuf {
    let helper = PathBuf::from(env!("CARGO_BIN_EXE_scope_profiler_likwid_helper"));
    let so = helper.parent().unwrap().join("deps/libscope_profiler.so");
    assert!(so.is_file(), "{} missing", so.display());
    let prefix = dir.join("prefix");
    place(&so, &prefix.join("lib/libscope_profiler.so"));
    // The MPI plugins the library loads for an MPI program (libscope_profiler_mpi_<family>.so).
    for plugin in std::fs::read_dir(so.parent().unwrap()).unwrap().filter_map(|e| e.ok().map(|e| e.path())) {
        let name = plugin.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("libscope_profiler_mpi_") && name.ends_with(".so") {
            place(&plugin, &prefix.join("lib").join(&name));
        }
    }
    let at = match layout {
        Layout::NextToLibrary => Some(prefix.join("lib/scope_profiler_likwid_helper")),
        Layout::Libexec => Some(prefix.join("libexec/scope_profiler/scope_profiler_likwid_helper")),
        Layout::Missing => None,
    };
    if let Some(at) = at {
        place(&helper, &at);
    }
    prefix.join("lib")
}

/// Compile tests/c/<name>.c against the installed library (rpath) and include/.
fn build_with(dir: &Path, name: &str, layout: Layout, compiler: &str) -> PathBuf {
    let lib = install(dir, layout);
    let out = dir.join(name);
    let o = run(Command::new(compiler)
        .args(["-std=c99", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{}", repo_root().join("include").display()))
        .arg(repo_root().join(format!("tests/c/{name}.c")))
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lscope_profiler", "-lpthread"]));
    assert!(o.status.success(), "compiling {name} failed:\n{}", text(&o.stderr));
    out
}

fn build(dir: &Path, name: &str) -> PathBuf {
    build_with(dir, name, Layout::NextToLibrary, "cc")
}

/// `likwid-perfctr -M 0 -C <cpus> -g FLOPS_DP -m <prog>` under fake MSRs, with Debian's LIKWID.
fn perfctr(prog: &Path, cpus: &str, marker: bool) -> Command {
    perfctr_with(&Lk::debian(), prog, cpus, marker)
}

/// `likwid-perfctr -M 0 -C <cpus> -g FLOPS_DP -m <prog>` of `lk` under fake MSRs.
fn perfctr_with(lk: &Lk, prog: &Path, cpus: &str, marker: bool) -> Command {
    require_tool("likwid-perfctr");
    require_tool("unshare");
    let mut c = fake_msr_with(lk);
    c.args(["likwid-perfctr", "-M", "0", "-C", cpus, "-g", "FLOPS_DP"]);
    if marker {
        c.arg("-m");
    }
    c.arg(prog);
    c
}

// ---------------------------------------------------------------------------------------
// likwid-perfctr's own output (the oracle)

#[derive(Debug, Default, Clone)]
struct PerfctrRegion {
    group: String,
    /// (event, counter) rows of the per-thread event table.
    events: Vec<(String, String)>,
    metrics: Vec<String>,
    /// Per metric: the printed value per HWThread column.
    metric_values: Vec<Vec<String>>,
    /// "RDTSC Runtime [s]" as printed, per HWThread column.
    runtimes: Vec<String>,
    /// "call count" per HWThread column.
    calls: Vec<u64>,
    hwthreads: Vec<i64>,
}

fn cells(line: &str) -> Vec<String> {
    line.trim().trim_matches('|').split('|').map(|c| c.trim().to_string()).collect()
}

/// Region tag -> tables, from `Region <tag>, Group <n>: <GROUP>` blocks.
fn parse_perfctr(stdout: &str) -> BTreeMap<String, PerfctrRegion> {
    let mut out: BTreeMap<String, PerfctrRegion> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut header: Option<Vec<String>> = None;
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("Region ") {
            if let Some((tag, group)) = rest.split_once(", Group ") {
                let g = group.split_once(": ").map(|x| x.1).unwrap_or("").to_string();
                out.insert(tag.to_string(), PerfctrRegion { group: g, ..Default::default() });
                current = Some(tag.to_string());
                header = None;
                continue;
            }
        }
        let Some(tag) = &current else { continue };
        if line.starts_with('+') {
            continue;
        }
        if !line.starts_with('|') {
            header = None;
            continue;
        }
        let row = cells(line);
        let Some(h) = &header else {
            header = Some(row);
            continue;
        };
        let r = out.get_mut(tag).unwrap();
        let per_thread = h.iter().skip(1).any(|c| c.starts_with("HWThread"));
        match h[0].as_str() {
            "Region Info" if row[0] == "call count" => {
                r.calls = row[1..].iter().map(|v| v.parse().unwrap()).collect();
                r.hwthreads = h[1..].iter().map(|c| c.trim_start_matches("HWThread ").parse().unwrap()).collect();
            }
            "Region Info" if row[0] == "RDTSC Runtime [s]" => r.runtimes = row[1..].to_vec(),
            "Event" if per_thread => r.events.push((row[0].clone(), row[1].clone())),
            "Metric" if per_thread => {
                r.metrics.push(row[0].clone());
                r.metric_values.push(row[1..].to_vec());
            }
            _ => {}
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Reading our file with the hdf5 crate

#[derive(Debug, Clone)]
struct LikwidRegion {
    group: String,
    tag: String,
    group_id: i64,
    group_name: String,
    source: String,
    event_names: Vec<String>,
    counter_names: Vec<String>,
    metric_names: Vec<String>,
    cpus: Vec<i64>,
    times: Vec<f64>,
    call_counts: Vec<i64>,
    events: Vec<Vec<f64>>,
    metrics: Vec<Vec<f64>>,
}

fn str_list(g: &hdf5::Group, name: &str) -> Vec<String> {
    let v: Vec<hdf5::types::VarLenUnicode> = g.attr(name).unwrap_or_else(|e| panic!("{name}: {e}")).read_raw().unwrap();
    v.iter().map(|s| s.as_str().to_string()).collect()
}

fn matrix(g: &hdf5::Group, name: &str) -> Vec<Vec<f64>> {
    let ds = g.dataset(name).unwrap();
    let shape = ds.shape();
    assert_eq!(shape.len(), 2, "{name} is not 2-D");
    let flat: Vec<f64> = ds.read_raw().unwrap();
    (0..shape[0]).map(|r| flat[r * shape[1]..(r + 1) * shape[1]].to_vec()).collect()
}

/// Open read-only without HDF5's file lock: other test threads start processes that
/// inherit open descriptors (HDF5 does not set O_CLOEXEC), and an inherited descriptor
/// keeps a lock alive so a re-open here would fail with EAGAIN.
fn open_h5(h5: &Path) -> hdf5::File {
    hdf5::File::with_options().with_fapl(|p| p.file_locking(false)).open(h5).unwrap_or_else(|e| panic!("open {}: {e}", h5.display()))
}

/// `rank<N>/likwid`: its `LIKWID_*` attributes, `num_regions`, regions keyed by real name.
type LikwidGroup = (BTreeMap<String, String>, i64, BTreeMap<String, LikwidRegion>);

/// `rank<rank>/likwid`, or `None` when the rank has no counters.
fn read_likwid(h5: &Path, rank: usize) -> Option<LikwidGroup> {
    let f = open_h5(h5);
    let rank_g = f.group(&format!("rank{rank}")).unwrap();
    if !rank_g.link_exists("likwid") {
        return None;
    }
    let g = rank_g.group("likwid").unwrap();
    let mut env = BTreeMap::new();
    for a in g.attr_names().unwrap() {
        if a.starts_with("LIKWID_") {
            env.insert(a.clone(), support::str_attr(&g, &a));
        }
    }
    let num = support::int_attr(&g, "num_regions");
    let regions_g = g.group("regions").unwrap();
    let mut regions = BTreeMap::new();
    for name in regions_g.member_names().unwrap() {
        let r = regions_g.group(&name).unwrap();
        let lr = LikwidRegion {
            tag: support::str_attr(&r, "tag"),
            group_id: support::int_attr(&r, "group_id"),
            group_name: support::str_attr(&r, "group_name"),
            source: support::str_attr(&r, "source"),
            event_names: str_list(&r, "event_names"),
            counter_names: str_list(&r, "counter_names"),
            metric_names: str_list(&r, "metric_names"),
            cpus: r.dataset("cpus").unwrap().read_raw().unwrap(),
            times: r.dataset("times").unwrap().read_raw().unwrap(),
            call_counts: r.dataset("call_counts").unwrap().read_raw().unwrap(),
            events: matrix(&r, "events"),
            metrics: matrix(&r, "metrics"),
            group: name,
        };
        assert_eq!(lr.events.len(), lr.event_names.len(), "{}", lr.tag);
        assert_eq!(lr.metrics.len(), lr.metric_names.len(), "{}", lr.tag);
        assert!(lr.events.iter().chain(&lr.metrics).all(|row| row.len() == lr.cpus.len()), "{}", lr.tag);
        assert_eq!(lr.times.len(), lr.cpus.len());
        assert_eq!(lr.call_counts.len(), lr.cpus.len());
        regions.insert(lr.tag.clone(), lr);
    }
    Some((env, num, regions))
}

/// Calls recorded in the timings, per region name (the timings are never lost).
fn timing_calls(h5: &Path, rank: usize) -> BTreeMap<String, usize> {
    let f = open_h5(h5);
    support::read_regions(&f, rank).into_iter().map(|(k, v)| (k, v.starts.len())).collect()
}

// ---------------------------------------------------------------------------------------
// Expectations shared by several tests

/// likwid_basic.c: region -> calls.
fn basic_calls() -> BTreeMap<String, usize> {
    [("init", 1), ("compute dot", 10), ("solver/inner", 5), ("ünicöde", 3)].into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Our file matches likwid-perfctr's tables: same regions (through the tag mapping),
/// LIKWID's event/counter/metric names, call counts and CPUs.
fn assert_matches_perfctr(regions: &BTreeMap<String, LikwidRegion>, perfctr: &BTreeMap<String, PerfctrRegion>, source: &str) {
    assert_eq!(regions.len(), perfctr.len(), "regions: ours {:?}, perfctr {:?}", regions.keys(), perfctr.keys());
    for (name, r) in regions {
        let tag = tag_for(name);
        let mut p = perfctr.get(&tag).unwrap_or_else(|| panic!("likwid-perfctr printed no table for {name:?} (tag {tag})")).clone();
        // A CPU that registered the region but never ran it shows as a call-count-0 column
        // whose CPU id is uninitialised memory (spec 1.2); our file leaves such records out.
        let keep: Vec<bool> = p.calls.iter().map(|&c| c > 0).collect();
        let kept = |v: &[String]| -> Vec<String> { v.iter().zip(&keep).filter(|x| *x.1).map(|x| x.0.clone()).collect() };
        p.hwthreads = p.hwthreads.iter().zip(&keep).filter(|x| *x.1).map(|x| *x.0).collect();
        p.runtimes = kept(&p.runtimes);
        p.metric_values = p.metric_values.iter().map(|row| kept(row)).collect();
        p.calls.retain(|&c| c > 0);
        assert_eq!(r.source, source, "{name}");
        assert_eq!(r.group_name, p.group, "{name}");
        assert_eq!(r.group_id, 0);
        let ev: Vec<(String, String)> = r.event_names.iter().cloned().zip(r.counter_names.iter().cloned()).collect();
        assert_eq!(ev, p.events, "{name}: events and counters");
        assert_eq!(r.metric_names, p.metrics, "{name}: metrics");
        assert_eq!(r.cpus, p.hwthreads, "{name}: cpus");
        assert_eq!(r.call_counts.iter().map(|&c| c as u64).collect::<Vec<_>>(), p.calls, "{name}: calls");
        // Fake MSRs: every counter reads 0.
        assert!(r.events.iter().flatten().all(|&v| v == 0.0), "{name}: {:?}", r.events);
        // The region times are LIKWID's, as likwid-perfctr printed them (seconds with 6
        // decimals; `inf` where LIKWID knows no TSC frequency: 5.5 on a VM whose CPUID
        // leaf 0x16 reports 0 MHz; 5.2 calibrates the TSC itself).
        assert_eq!(r.times.len(), p.runtimes.len(), "{name}: runtimes {:?}", p.runtimes);
        for (t, printed) in r.times.iter().zip(&p.runtimes) {
            assert!(*t > 0.0, "{name}: time {t}");
            assert!(same_as_printed(*t, printed), "{name}: time {t} vs likwid-perfctr's {printed}");
        }
        // "Runtime (RDTSC) [s]" is the region time in every group (where it is a number).
        let rt = r.metric_names.iter().position(|m| m == "Runtime (RDTSC) [s]").expect("Runtime (RDTSC) [s]");
        for (t, m) in r.times.iter().zip(&r.metrics[rt]) {
            if t.is_finite() && (source != "full_api" || m.is_finite()) {
                assert!((t - m).abs() <= 1e-6 * t.abs().max(1e-9), "{name}: time {t} vs metric {m}");
            }
        }
        // LIKWID's own metric values (full read-back) are the ones likwid-perfctr printed.
        if source == "full_api" {
            assert_eq!(r.metrics.len(), p.metric_values.len());
            for ((m, ours), printed) in r.metric_names.iter().zip(&r.metrics).zip(&p.metric_values) {
                for (v, s) in ours.iter().zip(printed) {
                    assert!(same_as_printed(*v, s), "{name}: metric {m}: ours {v} vs likwid-perfctr's {s}");
                }
            }
        }
    }
}

/// `v` is what likwid-perfctr printed as `printed`: `-` for NaN, `inf`, a number in `%e`
/// form (7 significant digits) or with as many decimals as it shows (rounded).
fn same_as_printed(v: f64, printed: &str) -> bool {
    match printed {
        "-" | "nan" => v.is_nan(),
        "inf" => v == f64::INFINITY,
        "-inf" => v == f64::NEG_INFINITY,
        s => {
            let Ok(p) = s.parse::<f64>() else { return false };
            let rounding = match s.split_once('.') {
                Some((_, frac)) if !s.contains(['e', 'E']) => 0.5 * 10f64.powi(-(frac.len() as i32)),
                None if !s.contains(['e', 'E']) => 0.5,
                _ => 0.0,
            };
            (v - p).abs() <= rounding * 1.000001 + 1e-6 * p.abs().max(v.abs())
        }
    }
}

fn flops_dp_env_ok(env: &BTreeMap<String, String>, threads: &str) {
    assert_eq!(env.get("LIKWID_EVENTS").map(String::as_str), Some("FLOPS_DP"));
    assert_eq!(env.get("LIKWID_THREADS").map(String::as_str), Some(threads));
    assert_eq!(env.get("LIKWID_MODE").map(String::as_str), Some("0"));
    assert!(env.get("LIKWID_FILEPATH").is_some_and(|p| p.starts_with("/tmp/likwid_")), "{env:?}");
}

// ---------------------------------------------------------------------------------------
// The tests

/// One test per scenario and LIKWID version: `likwid52::<scenario>` with Debian's 5.2.2,
/// `likwid55::<scenario>` with 5.5.1 (skipped by design where its tarball is absent).
macro_rules! both_versions {
    ($($scenario:ident),* $(,)?) => {
        mod likwid52 {
            $( #[test] fn $scenario() { super::$scenario(&super::Lk::debian()) } )*
        }
        mod likwid55 {
            $( #[test] fn $scenario() { if let Some(lk) = super::Lk::v55() { super::$scenario(&lk) } } )*
        }
    };
}

both_versions!(
    perfctr_single_thread_gives_full_api_results,
    perfctr_two_threads_counts_each_cpu,
    threads_sharing_a_cpu,
    mpirun_two_ranks_each_collect_their_counters,
    helper_crash_before_writing_falls_back_to_marker_file_with_names_and_metrics,
    no_marker_file_falls_back_to_snapshots,
    python_reader_sees_the_same_likwid_results,
    likwid_and_perf_events_count_together,
    bad_likwid_events_is_refused_before_likwid_crashes,
);

/// Both counter sources at once (LIKWID under likwid-perfctr, and the perf event `task-clock`):
/// each is started and stopped around every call and each writes its own group.
fn likwid_and_perf_events_count_together(lk: &Lk) {
    let dir = scratch(&format!("likwid_with_perf_{}", lk.label()));
    let prog = build(&dir, "likwid_basic");
    let mut c = perfctr_with(lk, &prog, "0", true);
    c.env("SCOPE_PROFILER_PERF_EVENTS", "task-clock");
    let r = run_in(&dir, c);
    r.ok();
    assert!(r.stdout.contains("likwid_basic done rc=0"), "{}", r.stdout);
    assert!(r.warnings().is_empty(), "unexpected warnings: {:#?}", r.warnings());
    let (_, _, regions) = read_likwid(&r.h5, 0).expect("no rank0/likwid");
    assert_matches_perfctr(&regions, &parse_perfctr(&r.stdout), "full_api");
    let h5 = hdf5::File::open(&r.h5).unwrap();
    let perf = h5.group("rank0/perf_events").unwrap();
    for (name, calls) in basic_calls() {
        let g = perf.group(&name.replace('/', "|")).unwrap_or_else(|_| panic!("no perf_events group for {name}"));
        assert_eq!(g.attr("calls").unwrap().read_scalar::<i64>().unwrap(), calls as i64, "{name}");
        assert_eq!(regions[&name].call_counts, vec![calls as i64], "{name}");
    }
    assert_eq!(timing_calls(&r.h5, 0), basic_calls());
}

/// The liblikwid files that libscope_profiler.so itself dlopen'ed, from the dynamic
/// loader's own log (`LD_DEBUG=files`, one file per process under `dir`).
fn likwid_loaded_by_us(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for l in text.lines().filter(|l| l.contains("dynamically loaded by") && l.contains("libscope_profiler.so")) {
            if let Some(f) = l.split("file=").nth(1).and_then(|x| x.split_whitespace().next()) {
                if f.contains("liblikwid.so") {
                    out.push(PathBuf::from(f));
                }
            }
        }
    }
    out
}

fn perfctr_single_thread_gives_full_api_results(lk: &Lk) {
    let dir = scratch(&format!("likwid_single_{}", lk.label()));
    let prog = build(&dir, "likwid_basic");
    let ld = dir.join("ld_debug");
    std::fs::create_dir_all(&ld).unwrap();
    let mut c = perfctr_with(lk, &prog, "0", true);
    c.env("LD_DEBUG", "files").env("LD_DEBUG_OUTPUT", ld.join("ld"));
    let r = run_in(&dir, c);
    r.ok();
    assert!(r.stdout.contains("likwid_basic done rc=0"), "{}", r.stdout);
    assert!(r.warnings().is_empty(), "unexpected warnings: {:#?}", r.warnings());
    assert!(!r.stdout.contains("Marker API result file does not exist"), "{}", r.stdout);
    // Our library loaded the liblikwid of the LIKWID that runs the program (5.5: found
    // through LIKWID_HOME / likwid-perfctr on PATH, although Debian's 5.2 is installed too).
    let loaded = likwid_loaded_by_us(&ld);
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    assert!(lk.owns(&loaded[0]), "libscope_profiler loaded {} under {}", loaded[0].display(), lk.label());
    let perf = parse_perfctr(&r.stdout);
    let (env, num, regions) = read_likwid(&r.h5, 0).expect("no rank0/likwid");
    flops_dp_env_ok(&env, "0");
    assert_eq!(num, 4);
    assert_matches_perfctr(&regions, &perf, "full_api");
    for (name, calls) in basic_calls() {
        assert_eq!(regions[&name].call_counts, vec![calls as i64], "{name}");
        assert_eq!(regions[&name].cpus, vec![0]);
    }
    assert!(regions.contains_key("solver/inner") && regions["solver/inner"].group == "solver|inner");
    assert_eq!(timing_calls(&r.h5, 0), basic_calls());
}

fn perfctr_two_threads_counts_each_cpu(lk: &Lk) {
    support::need_cpus(2, "likwid-perfctr -C 0,1");
    let dir = scratch(&format!("likwid_threads_{}", lk.label()));
    let prog = build(&dir, "likwid_threads");
    let r = run_in(&dir, perfctr_with(lk, &prog, "0,1", true));
    r.ok();
    assert!(r.stdout.contains("likwid_threads done rc=0"), "{}", r.stdout);
    assert!(r.warnings().is_empty(), "unexpected warnings: {:#?}", r.warnings());
    let perf = parse_perfctr(&r.stdout);
    let (env, _, regions) = read_likwid(&r.h5, 0).expect("no rank0/likwid");
    flops_dp_env_ok(&env, "0,1");
    assert_matches_perfctr(&regions, &perf, "full_api");
    assert_eq!(regions["parallel work"].cpus, vec![0, 1]);
    assert_eq!(regions["parallel work"].call_counts, vec![4, 4]);
    assert_eq!(regions["worker loop"].cpus, vec![0, 1]);
    assert_eq!(regions["worker loop"].call_counts, vec![3, 3]);
    assert_eq!(regions["serial"].call_counts, vec![1]);
    let calls = timing_calls(&r.h5, 0);
    assert_eq!(calls["parallel work"], 8);
    assert_eq!(calls["worker loop"], 6);
    assert_eq!(calls["serial"], 1);
}

/// Three threads on two CPUs: the main thread records "serial" on CPU 0, then two pinned
/// pthreads do the work, one of them on CPU 0 as well. LIKWID 5.2 sums everything recorded
/// on a CPU; 5.5 keeps one result per CPU (a second thread's would overwrite the first's), so
/// there only the first thread on a CPU is measured and one warning says how many calls
/// were left out. The timings have every call either way.
fn threads_sharing_a_cpu(lk: &Lk) {
    support::need_cpus(2, "likwid-perfctr -C 0,1");
    let dir = scratch(&format!("likwid_shared_cpu_{}", lk.label()));
    let prog = build(&dir, "likwid_threads");
    let mut c = perfctr_with(lk, &prog, "0,1", true);
    c.arg("shared");
    let r = run_in(&dir, c);
    r.ok();
    assert!(r.stdout.contains("likwid_threads done rc=0"), "{}", r.stdout);
    let (_, _, regions) = read_likwid(&r.h5, 0).expect("no rank0/likwid");
    assert_matches_perfctr(&regions, &parse_perfctr(&r.stdout), "full_api");
    assert_eq!(regions["serial"].cpus, vec![0]);
    assert_eq!(regions["serial"].call_counts, vec![1]);
    if lk.prefix.is_none() {
        assert!(r.warnings().is_empty(), "unexpected warnings: {:#?}", r.warnings());
        assert_eq!(regions["parallel work"].cpus, vec![0, 1]);
        assert_eq!(regions["parallel work"].call_counts, vec![4, 4]);
        assert_eq!(regions["worker loop"].call_counts, vec![3, 3]);
    } else {
        // The worker on CPU 0 made 4 + 3 start/stop pairs there.
        let w = r.single_warning_containing("another thread already records");
        assert!(w.contains("14 region start/stop call(s)"), "{w}");
        assert_eq!(r.warnings().len(), 1, "{:#?}", r.warnings());
        assert_eq!(regions["parallel work"].cpus, vec![1]);
        assert_eq!(regions["parallel work"].call_counts, vec![4]);
        assert_eq!(regions["worker loop"].call_counts, vec![3]);
    }
    let calls = timing_calls(&r.h5, 0);
    assert_eq!((calls["parallel work"], calls["worker loop"], calls["serial"]), (8, 6, 1));
}

/// Each rank measures its own CPU with its own likwid-perfctr and marker file; rank 0
/// writes every rank's counters into the one file (needs the core's MPI gather).
fn mpirun_two_ranks_each_collect_their_counters(lk: &Lk) {
    support::need_cpus(2, "likwid-mpirun -np 2, one CPU per rank");
    require_tool("likwid-mpirun");
    require_tool("mpicc");
    let dir = scratch(&format!("likwid_mpi_{}", lk.label()));
    let prog = build_with(&dir, "likwid_mpi", Layout::NextToLibrary, "mpicc");
    let mut c = fake_msr_with(lk);
    c.args(["likwid-mpirun", "-np", "2", "-g", "FLOPS_DP", "-mpi", "openmpi", "-marker"]).arg(&prog);
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    let r = run_in(&dir, c);
    r.ok();
    for rank in 0..2 {
        assert!(r.stdout.contains(&format!("likwid_mpi rank {rank} done rc=0")), "{}", r.stdout);
    }
    // The metrics of a group recognised in likwid-mpirun's event list are ours to compute;
    // the only acceptable warning is one per rank where LIKWID knows no TSC frequency (5.5
    // on a VM whose CPUID leaf 0x16 is empty: inverseClock is unknown).
    let w = r.warnings();
    assert!(w.len() <= 2 && w.iter().all(|l| l.contains("TSC frequency of 0 Hz")), "{w:#?}");
    // likwid-mpirun merged every rank's likwid-perfctr output by tag: tags without spaces.
    for name in ["halo exchange", "rank compute"] {
        assert!(r.stdout.contains(&format!("Region: {}", tag_for(name))), "{}", r.stdout);
    }
    let mut cpus_seen = Vec::new();
    for rank in 0..2 {
        let (env, num, regions) = read_likwid(&r.h5, rank).unwrap_or_else(|| panic!("no rank{rank}/likwid"));
        // likwid-mpirun chose this rank's CPUs (how many depends on the host's core count).
        let threads: Vec<i64> = env["LIKWID_THREADS"].split(',').map(|c| c.parse().unwrap()).collect();
        // likwid-mpirun hands the group on as its event list (a "Custom" set for LIKWID).
        assert!(env.get("LIKWID_EVENTS").is_some_and(|e| e.contains("RETIRED_SSE_AVX_FLOPS_ALL:PMC2") || e == "FLOPS_DP"), "{env:?}");
        assert_eq!(num, 2);
        for (name, calls) in [("halo exchange", 2), ("rank compute", 5)] {
            let reg = &regions[name];
            assert_eq!(reg.source, "full_api", "rank {rank} {name}");
            // Recognised as FLOPS_DP, so the group's metrics are there too.
            assert_eq!(reg.group_name, "FLOPS_DP", "rank {rank} {name}");
            assert_eq!(reg.call_counts, vec![calls], "rank {rank} {name}");
            assert_eq!(reg.counter_names.len(), reg.event_names.len());
            assert!(reg.metric_names.contains(&"DP [MFLOP/s]".to_string()));
            assert_eq!(reg.cpus.len(), 1, "rank {rank} {name}: one thread, one CPU");
            assert!(threads.contains(&reg.cpus[0]), "rank {rank} {name}: CPU {} not in {threads:?}", reg.cpus[0]);
            cpus_seen.push(reg.cpus[0]);
        }
        let calls = timing_calls(&r.h5, rank);
        assert_eq!(calls["halo exchange"], 2);
        assert_eq!(calls["rank compute"], 5);
    }
    cpus_seen.sort();
    cpus_seen.dedup();
    assert_eq!(cpus_seen.len(), 2, "each rank measured its own CPU: {cpus_seen:?}");
}

/// The helper fault hooks (test-only environment of the helper).
fn perfctr_with_fault(name: &str, fault: &str, timeout_s: Option<&str>, layout: Layout) -> (Run, BTreeMap<String, PerfctrRegion>) {
    perfctr_with_fault_in(&Lk::debian(), name, fault, timeout_s, layout)
}

fn perfctr_with_fault_in(lk: &Lk, name: &str, fault: &str, timeout_s: Option<&str>, layout: Layout) -> (Run, BTreeMap<String, PerfctrRegion>) {
    let dir = scratch(&format!("{name}_{}", lk.label()));
    let prog = build_with(&dir, "likwid_basic", layout, "cc");
    let mut c = perfctr_with(lk, &prog, "0", true);
    c.env("SCOPE_PROFILER_LIKWID_HELPER_TEST_FAULT", fault);
    if let Some(t) = timeout_s {
        c.env("SCOPE_PROFILER_LIKWID_TIMEOUT", t);
    }
    let r = run_in(&dir, c);
    r.ok();
    assert!(r.stdout.contains("likwid_basic done rc=0"), "{}", r.stdout);
    // The marker file survived for likwid-perfctr in every case.
    let perf = parse_perfctr(&r.stdout);
    assert_eq!(perf.len(), 4, "likwid-perfctr region tables missing:\n{}", r.stdout);
    assert_eq!(timing_calls(&r.h5, 0), basic_calls());
    (r, perf)
}

fn helper_crash_before_writing_falls_back_to_marker_file_with_names_and_metrics(lk: &Lk) {
    let (r, perf) = perfctr_with_fault_in(lk, "likwid_crash_before", "crash-before", None, Layout::NextToLibrary);
    let w = r.single_warning_containing("read-back helper failed");
    assert!(w.contains("signal 11") && w.contains("source=marker_file"), "{w}");
    let (_, _, regions) = read_likwid(&r.h5, 0).unwrap();
    // Named events and evaluated metrics, from the group file, same as LIKWID's.
    assert_matches_perfctr(&regions, &perf, "marker_file");
}

#[test]
fn helper_crash_after_writing_keeps_full_api() {
    // Also covers the helper installed in <prefix>/libexec/scope_profiler/.
    let (r, perf) = perfctr_with_fault("likwid_crash_after", "crash-after", None, Layout::Libexec);
    assert!(r.warnings().is_empty(), "{:#?}", r.warnings());
    let (_, _, regions) = read_likwid(&r.h5, 0).unwrap();
    assert_matches_perfctr(&regions, &perf, "full_api");
}

#[test]
fn helper_hang_times_out_and_falls_back() {
    let (r, perf) = perfctr_with_fault("likwid_hang", "hang", Some("2"), Layout::NextToLibrary);
    let w = r.single_warning_containing("read-back helper failed");
    assert!(w.contains("timed out after 2.0 s") && w.contains("source=marker_file"), "{w}");
    // perfctr's own setup costs a few seconds; a hung helper must not add more than the timeout.
    assert!(r.elapsed < Duration::from_secs(60), "took {:?}", r.elapsed);
    let (_, _, regions) = read_likwid(&r.h5, 0).unwrap();
    assert_matches_perfctr(&regions, &perf, "marker_file");
}

#[test]
fn helper_location_override_and_missing_helper() {
    let dir = scratch("likwid_helper_location");
    let prog = build_with(&dir, "likwid_basic", Layout::Missing, "cc");
    // Not installed: the marker file fallback, with one warning saying why.
    let r = run_in(&dir, perfctr(&prog, "0", true));
    r.ok();
    let w = r.single_warning_containing("helper unavailable");
    assert!(w.contains("scope_profiler_likwid_helper not found") && w.contains("source=marker_file"), "{w}");
    let (_, _, regions) = read_likwid(&r.h5, 0).unwrap();
    assert!(regions.values().all(|x| x.source == "marker_file"));
    // SCOPE_PROFILER_LIKWID_HELPER points at it: the full read-back again.
    let elsewhere = dir.join("elsewhere/my_helper");
    place(Path::new(env!("CARGO_BIN_EXE_scope_profiler_likwid_helper")), &elsewhere);
    let mut c = perfctr(&prog, "0", true);
    c.env("SCOPE_PROFILER_LIKWID_HELPER", &elsewhere);
    let r = run_in(&dir, c);
    r.ok();
    assert!(r.warnings().is_empty(), "{:#?}", r.warnings());
    let (_, _, regions) = read_likwid(&r.h5, 0).unwrap();
    assert_eq!(regions.len(), 4);
    assert!(regions.values().all(|x| x.source == "full_api"));
    // `off`: no child at all, marker file parsed in-process, no warning.
    let mut c = perfctr(&prog, "0", true);
    c.env("SCOPE_PROFILER_LIKWID_HELPER", "off");
    let r = run_in(&dir, c);
    r.ok();
    assert!(r.warnings().is_empty(), "{:#?}", r.warnings());
    let (_, _, regions) = read_likwid(&r.h5, 0).unwrap();
    assert!(regions.values().all(|x| x.source == "marker_file" && x.metric_names.len() == 5));
}

/// The four marker variables set by hand, as a user would without likwid-perfctr.
fn manual_marker_env(c: &mut Command, dir: &Path, events: &str) {
    c.env("LIKWID_MODE", "0").env("LIKWID_FILEPATH", dir.join("marker.txt")).env("LIKWID_EVENTS", events).env("LIKWID_THREADS", "0");
}

#[test]
fn no_likwid_installed_keeps_timings() {
    // dlopen must fail for real: fake_msr.sh --hide-likwid bind-mounts /dev/null over
    // every installed liblikwid.so* in a private mount namespace, and LIKWID_HOME points
    // to an empty directory, so every path of the search (LIKWID_HOME, likwid-perfctr's
    // prefix, the loader's cache) finds no loadable library.
    let dir = scratch("likwid_missing");
    let prog = build(&dir, "likwid_basic");
    let empty = dir.join("empty_likwid_home");
    std::fs::create_dir_all(empty.join("lib")).unwrap();
    let mut c = fake_msr();
    c.arg("--hide-likwid").args(["taskset", "-c", "0"]).arg(&prog).env("LIKWID_HOME", &empty);
    manual_marker_env(&mut c, &dir, "FLOPS_DP");
    let r = run_in(&dir, c);
    r.ok();
    let w = r.single_warning_containing("LIKWID not installed");
    assert!(w.contains("timings only"), "{w}");
    assert_eq!(r.warnings().len(), 1, "{:#?}", r.warnings());
    assert!(read_likwid(&r.h5, 0).is_none());
    assert_eq!(timing_calls(&r.h5, 0), basic_calls());
}

#[test]
fn no_marker_mode_warns_and_keeps_timings() {
    let dir = scratch("likwid_no_m");
    let prog = build(&dir, "likwid_basic");
    let r = run_in(&dir, perfctr(&prog, "0", false));
    r.ok();
    let w = r.single_warning_containing("start under likwid-perfctr -m");
    assert!(w.contains("timings only"), "{w}");
    assert_eq!(r.warnings().len(), 1, "{:#?}", r.warnings());
    assert!(read_likwid(&r.h5, 0).is_none());
    assert_eq!(timing_calls(&r.h5, 0), basic_calls());
}

fn bad_likwid_events_is_refused_before_likwid_crashes(lk: &Lk) {
    // Both strings make likwid_markerInit segfault (spec 5); we must not call it.
    for (i, events) in ["NO_SUCH_GROUP", "FLOPS-DP"].into_iter().enumerate() {
        let dir = scratch(&format!("likwid_bad_events_{i}_{}", lk.label()));
        let prog = build(&dir, "likwid_basic");
        let mut c = fake_msr_with(lk);
        c.args(["taskset", "-c", "0"]).arg(&prog);
        manual_marker_env(&mut c, &dir, events);
        let r = run_in(&dir, c);
        r.ok();
        let w = r.single_warning_containing("LIKWID_EVENTS");
        assert!(w.contains("invalid") && w.contains("timings only"), "{w}");
        assert_eq!(r.warnings().len(), 1, "{:#?}", r.warnings());
        assert!(read_likwid(&r.h5, 0).is_none());
        assert!(!dir.join("marker.txt").exists());
        assert_eq!(timing_calls(&r.h5, 0), basic_calls());
    }
}

fn no_marker_file_falls_back_to_snapshots(lk: &Lk) {
    // LIKWID set up by hand (no likwid-perfctr), with LIKWID_FILEPATH in a directory that
    // does not exist: likwid_markerClose cannot write the file, so the marker_api
    // snapshots taken before close are all that is left.
    let dir = scratch(&format!("likwid_snapshots_{}", lk.label()));
    let prog = build(&dir, "likwid_basic");
    let mut c = fake_msr_with(lk);
    c.args(["taskset", "-c", "0"]).arg(&prog);
    manual_marker_env(&mut c, &dir, "FLOPS_DP");
    c.env("LIKWID_FILEPATH", dir.join("no_such_dir/marker.txt"));
    let r = run_in(&dir, c);
    r.ok();
    let w = r.single_warning_containing("no marker file");
    assert!(w.contains("source=marker_api"), "{w}");
    let (_, _, regions) = read_likwid(&r.h5, 0).expect("no rank0/likwid");
    assert_eq!(regions.len(), 4);
    for (name, calls) in basic_calls() {
        let reg = &regions[&name];
        assert_eq!(reg.source, "marker_api");
        assert_eq!(reg.call_counts, vec![calls as i64], "{name}");
        assert_eq!(reg.cpus, vec![0]);
        assert_eq!(reg.counter_names, ["FIXC1", "FIXC2", "PMC0", "PMC1", "PMC2", "PMC3"]);
        assert!(reg.metric_names.contains(&"CPI".to_string()));
    }
    assert_eq!(timing_calls(&r.h5, 0), basic_calls());
}

fn python_reader_sees_the_same_likwid_results(lk: &Lk) {
    support::need_cpus(2, "likwid-perfctr -C 0,1");
    let dir = scratch(&format!("likwid_python_{}", lk.label()));
    let prog = build(&dir, "likwid_threads");
    let r = run_in(&dir, perfctr_with(lk, &prog, "0,1", true));
    r.ok();
    let (_, _, ours) = read_likwid(&r.h5, 0).unwrap();
    let py = support::python_view(&r.h5);
    assert_eq!(py["has_likwid"], true);
    assert_eq!(py["likwid_ranks"], serde_json::json!([0]));
    let pyr = py["likwid"]["0"].as_object().unwrap();
    assert_eq!(pyr.len(), ours.len());
    let num = |x: f64| -> serde_json::Value {
        match x {
            x if x.is_nan() => serde_json::Value::Null,
            f64::INFINITY => "inf".into(),
            f64::NEG_INFINITY => "-inf".into(),
            x => serde_json::json!(x),
        }
    };
    let nums = |v: &[f64]| -> serde_json::Value { v.iter().map(|&x| num(x)).collect() };
    for (name, o) in &ours {
        let p = &pyr[name];
        assert_eq!(p["source"], o.source.as_str(), "{name}");
        assert_eq!(p["group_name"], o.group_name.as_str());
        assert_eq!(p["group_id"], o.group_id);
        assert_eq!(p["event_names"], serde_json::json!(o.event_names));
        assert_eq!(p["counter_names"], serde_json::json!(o.counter_names));
        assert_eq!(p["metric_names"], serde_json::json!(o.metric_names));
        assert_eq!(p["cpus"], serde_json::json!(o.cpus));
        assert_eq!(p["call_counts"], serde_json::json!(o.call_counts));
        assert_eq!(p["times"], nums(&o.times));
        let rows = |m: &[Vec<f64>]| -> serde_json::Value { m.iter().map(|r| nums(r)).collect() };
        assert_eq!(p["events"], rows(&o.events), "{name}");
        assert_eq!(p["metrics"], rows(&o.metrics), "{name}");
    }
    assert_eq!(py["regions"]["parallel work"]["0"]["calls"], 8);
}

// ---------------------------------------------------------------------------------------
// CPUs the LIKWID version does not know, and the stand-in topology itself

/// A LIKWID that does not support the CPU costs the run nothing. LIKWID 5.2 rejects a Zen4
/// (likwid-perfctr stops before the program starts; likwid_markerInit segfaults after
/// "Unsupported AMD Zen Processor") and knows no Zen5 (AMD family 26) at all. The stand-in
/// topology claims each CPU on every host, and the marker variables are set by hand as
/// likwid-perfctr would set them, since likwid-perfctr itself refuses to run there. The
/// custom event string passes every LIKWID_EVENTS check, so only the CPU check stands
/// between the program and the crash.
#[test]
fn unsupported_cpu_keeps_timings_with_one_warning() {
    for (claim, cpu) in [("zen4", "family 25 model 17"), ("zen5", "family 26 model 2")] {
        for (i, events) in ["RETIRED_INSTRUCTIONS:PMC0,CPU_CLOCKS_UNHALTED:PMC1", "FLOPS_DP"].into_iter().enumerate() {
            let dir = scratch(&format!("likwid_unsupported_cpu_{claim}_{i}"));
            let prog = build(&dir, "likwid_basic");
            let mut c = fake_msr();
            c.args(["--claim", claim, "taskset", "-c", "0"]).arg(&prog).env("SCOPE_PROFILER_LIKWID", "1");
            manual_marker_env(&mut c, &dir, events);
            let r = run_in(&dir, c);
            r.ok();
            assert!(r.stdout.contains("likwid_basic done rc=0"), "{}", r.stdout);
            let w = r.single_warning_containing("does not support this CPU");
            assert!(w.contains(cpu) && w.contains("timings only") && w.contains("liblikwid"), "{w}");
            assert_eq!(r.warnings().len(), 1, "{:#?}", r.warnings());
            assert!(read_likwid(&r.h5, 0).is_none());
            assert!(!dir.join("marker.txt").exists());
            assert_eq!(timing_calls(&r.h5, 0), basic_calls());
            // The PyPI reader reads the timings: every region, with its calls, and no counters.
            let py = support::python_view(&r.h5);
            assert_eq!(py["has_likwid"], false, "{py}");
            for (name, calls) in basic_calls() {
                // The reader keys regions by their HDF5 group name ('/' is stored as '|').
                let key = name.replace('/', "|");
                assert_eq!(py["regions"][&key]["0"]["calls"], calls as u64, "{name}: {py}");
            }
        }
    }
}

/// The same stand-in CPUs with LIKWID 5.5, which knows them: counters, LIKWID's names for
/// that CPU (`arch` is its perfgroups directory).
fn measured_by_likwid55(claim: &str, arch: &str) {
    let Some(lk) = Lk::v55() else { return };
    let dir = scratch(&format!("likwid55_{claim}"));
    let prog = build(&dir, "likwid_basic");
    let mut c = fake_msr_with(&lk);
    c.args(["--claim", claim, "taskset", "-c", "0"]).arg(&prog).env("SCOPE_PROFILER_LIKWID", "1");
    manual_marker_env(&mut c, &dir, "FLOPS_DP");
    let r = run_in(&dir, c);
    r.ok();
    assert!(r.warnings().is_empty(), "{:#?}", r.warnings());
    let (_, num, regions) = read_likwid(&r.h5, 0).expect("no rank0/likwid");
    assert_eq!(num, 4);
    let group = lk.prefix.as_ref().unwrap().join(format!("share/likwid/perfgroups/{arch}/FLOPS_DP.txt"));
    let group = std::fs::read_to_string(&group).unwrap_or_else(|e| panic!("{}: {e}", group.display()));
    for (name, calls) in basic_calls() {
        let reg = &regions[&name];
        assert_eq!(reg.source, "full_api");
        assert_eq!(reg.group_name, "FLOPS_DP");
        assert_eq!(reg.call_counts, vec![calls as i64], "{name}");
        // Every event of the group file, in its order.
        let mut from_file = Vec::new();
        let mut in_set = false;
        for l in group.lines() {
            if l.starts_with("EVENTSET") {
                in_set = true;
            } else if in_set && l.trim().is_empty() {
                break;
            } else if in_set {
                let mut it = l.split_whitespace();
                from_file.push((it.next().unwrap().to_string(), it.next().unwrap().to_string()));
            }
        }
        let ours: Vec<(String, String)> = reg.counter_names.iter().cloned().zip(reg.event_names.iter().cloned()).collect();
        assert_eq!(ours, from_file, "{name}");
    }
    assert_eq!(timing_calls(&r.h5, 0), basic_calls());
}

#[test]
fn zen4_is_measured_by_likwid55() {
    measured_by_likwid55("zen4", "zen4");
}

#[test]
fn zen5_is_measured_by_likwid55() {
    measured_by_likwid55("zen5", "zen5");
}

/// The Zen5 condition on every host. Debian's likwid-accessD checks the real CPU with CPUID
/// (never the topology file) and refuses to start on a CPU it does not know, such as an AMD
/// family 26; in the namespace it is a stand-in that always refuses (fake_msr.sh), so a test
/// that needed the daemon would fail here as it does on a Zen5. Debian's likwid-perfctr in
/// its default (daemon) mode then stops before the program starts, with the message a Zen5
/// user sees; the namespace's likwid-perfctr, which selects direct access the way
/// likwid-mpirun calls it (without -M), measures the same program.
#[test]
fn access_daemon_refuses_as_on_zen5_and_direct_access_needs_none() {
    let dir = scratch("likwid_daemon_refuses");
    let prog = build(&dir, "likwid_basic");
    let mut c = fake_msr();
    c.args(["likwid-perfctr", "-C", "0", "-g", "FLOPS_DP", "-m"]).arg(&prog);
    c.env("SP_FAKE_ACCESSD", "refuse").env("SP_FAKE_PERFCTR", "host").env("SCOPE_PROFILER_LIKWID", "1");
    let r = run_in(&dir, c);
    assert!(!r.out.status.success(), "likwid-perfctr ran without the access daemon:\n{}", r.stdout);
    assert!(r.stderr.contains("likwid-accessD is a test stand-in that refuses to start"), "{}", r.stderr);
    assert!(r.stderr.contains("could not be") && r.stderr.contains("likwid-accessD just failed to start"), "{}", r.stderr);
    assert!(!r.stdout.contains("likwid_basic done"), "the program started:\n{}", r.stdout);
    assert!(!r.h5.exists());

    let mut c = fake_msr();
    c.args(["likwid-perfctr", "-C", "0", "-g", "FLOPS_DP", "-m"]).arg(&prog);
    c.env("SP_FAKE_ACCESSD", "refuse").env("SCOPE_PROFILER_LIKWID", "1");
    let r = run_in(&dir, c);
    r.ok();
    assert!(!r.stderr.contains("likwid-accessD"), "{}", r.stderr);
    let (env, _, regions) = read_likwid(&r.h5, 0).expect("no rank0/likwid");
    flops_dp_env_ok(&env, "0");
    assert_matches_perfctr(&regions, &parse_perfctr(&r.stdout), "full_api");
}

/// What a Zen5 (AMD family 26) user meets with Debian's LIKWID 5.2 (docs/likwid.md): whatever
/// the access mode, LIKWID stops before the program starts, so scope_profiler never runs
/// inside LIKWID's failure. likwid-mpirun fails in its Lua code (5.2 has no name for the CPU),
/// likwid-perfctr with direct access in perfmon_init ("Unsupported Processor").
#[test]
fn likwid52_stops_before_the_program_on_zen5() {
    require_tool("likwid-mpirun");
    let dir = scratch("likwid52_zen5");
    let prog = build(&dir, "likwid_basic");
    for (what, args, says) in [
        ("likwid-mpirun", &["likwid-mpirun", "-np", "1", "-g", "FLOPS_DP", "-mpi", "openmpi", "-marker"][..], "short_name"),
        ("likwid-perfctr -M 0", &["likwid-perfctr", "-M", "0", "-C", "0", "-g", "FLOPS_DP", "-m"][..], "Unsupported Processor"),
    ] {
        let mut c = fake_msr();
        c.args(["--claim", "zen5"]).args(args).arg(&prog).env("SCOPE_PROFILER_LIKWID", "1");
        c.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        let r = run_in(&dir, c);
        let all = format!("{}{}", r.stdout, r.stderr);
        assert!(all.contains(says), "{what}: expected {says:?}:\n{all}");
        assert!(!r.stdout.contains("likwid_basic done"), "{what}: the program started:\n{}", r.stdout);
        assert!(!r.h5.exists(), "{what}");
        assert!(r.warnings().is_empty(), "{what}: {:#?}", r.warnings());
    }
}

/// Where likwid-genTopoCfg cannot describe the host, fake_msr.sh writes a topology from a
/// template with the host's CPU count: LIKWID runs the same way with it.
#[test]
fn stand_in_template_topology_runs_likwid() {
    let dir = scratch("likwid_template_topology");
    let prog = build(&dir, "likwid_basic");
    let mut c = perfctr(&prog, "0", true);
    c.env("SP_FAKE_TOPO", "template");
    let r = run_in(&dir, c);
    r.ok();
    assert!(r.stdout.contains("scope_profiler test stand-in") && r.stdout.contains("Zen3"), "{}", r.stdout);
    assert!(r.warnings().is_empty(), "{:#?}", r.warnings());
    let (_, _, regions) = read_likwid(&r.h5, 0).expect("no rank0/likwid");
    assert_matches_perfctr(&regions, &parse_perfctr(&r.stdout), "full_api");
}

// ---------------------------------------------------------------------------------------
// What likwid-sys reads from LIKWID, checked against each version's likwid.h and library

/// `sizeof`/`offsetof` of the structs likwid-sys copies, from a C program compiled against
/// `include_dir/likwid.h`, as `name value` lines.
fn c_layouts(dir: &Path, include_dir: &Path) -> BTreeMap<String, usize> {
    let src = dir.join("layouts.c");
    let mut c = String::from("#include <stdio.h>\n#include <stddef.h>\n#include <likwid.h>\nint main(void) {\n");
    let mut line = |name: &str, expr: &str| c.push_str(&format!("    printf(\"{name} %zu\\n\", (size_t)({expr}));\n"));
    for (ty, fields) in [
        ("CpuInfo", &["family", "model", "osname", "short_name", "isIntel", "architecture", "perf_num_fixed_ctr"][..]),
        ("CpuTopology", &["numHWThreads", "numSockets", "numThreadsPerCore", "threadPool", "topologyTree"][..]),
        ("NumaTopology", &["numberOfNodes", "nodes"][..]),
        ("Likwid_Configuration", &["groupPath", "daemonMode", "maxNumNodes"][..]),
    ] {
        line(&format!("sizeof({ty})"), &format!("sizeof({ty})"));
        for f in fields {
            line(&format!("{ty}.{f}"), &format!("offsetof({ty}, {f})"));
        }
    }
    c.push_str("    return 0;\n}\n");
    std::fs::write(&src, c).unwrap();
    let exe = dir.join("layouts");
    let o = run(Command::new("cc").arg(format!("-I{}", include_dir.display())).arg(&src).arg("-o").arg(&exe));
    assert!(o.status.success(), "compiling against {}/likwid.h failed:\n{}", include_dir.display(), text(&o.stderr));
    let o = run(&mut Command::new(&exe));
    text(&o.stdout)
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

/// The same names for likwid-sys's `#[repr(C)]` copies.
fn rust_layouts() -> BTreeMap<String, usize> {
    use likwid_sys::{CpuInfo, CpuTopology, LikwidConfiguration, NumaTopology};
    use std::mem::{offset_of, size_of};
    [
        ("sizeof(CpuInfo)", size_of::<CpuInfo>()),
        ("CpuInfo.family", offset_of!(CpuInfo, family)),
        ("CpuInfo.model", offset_of!(CpuInfo, model)),
        ("CpuInfo.osname", offset_of!(CpuInfo, osname)),
        ("CpuInfo.short_name", offset_of!(CpuInfo, short_name)),
        ("CpuInfo.isIntel", offset_of!(CpuInfo, is_intel)),
        ("CpuInfo.architecture", offset_of!(CpuInfo, architecture)),
        ("CpuInfo.perf_num_fixed_ctr", offset_of!(CpuInfo, perf_num_fixed_ctr)),
        ("sizeof(CpuTopology)", size_of::<CpuTopology>()),
        ("CpuTopology.numHWThreads", offset_of!(CpuTopology, num_hw_threads)),
        ("CpuTopology.numSockets", offset_of!(CpuTopology, num_sockets)),
        ("CpuTopology.numThreadsPerCore", offset_of!(CpuTopology, num_threads_per_core)),
        ("CpuTopology.threadPool", offset_of!(CpuTopology, thread_pool)),
        ("CpuTopology.topologyTree", offset_of!(CpuTopology, topology_tree)),
        ("sizeof(NumaTopology)", size_of::<NumaTopology>()),
        ("NumaTopology.numberOfNodes", offset_of!(NumaTopology, number_of_nodes)),
        ("NumaTopology.nodes", offset_of!(NumaTopology, nodes)),
        ("sizeof(Likwid_Configuration)", size_of::<LikwidConfiguration>()),
        ("Likwid_Configuration.groupPath", offset_of!(LikwidConfiguration, group_path)),
        ("Likwid_Configuration.daemonMode", offset_of!(LikwidConfiguration, daemon_mode)),
        ("Likwid_Configuration.maxNumNodes", offset_of!(LikwidConfiguration, max_num_nodes)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Struct layouts agree with likwid.h of 5.2.2 (Debian, /usr/include) and of 5.5.1, and
/// each version's library exports every symbol likwid-sys declares.
#[test]
fn likwid_sys_matches_both_versions() {
    let dir = scratch("likwid_sys_layouts");
    let mut versions = vec![("5.2", PathBuf::from("/usr/include"), None)];
    if let Some(p) = support::likwid55() {
        versions.push(("5.5", p.join("include"), Some(p.join("lib/liblikwid.so.5.5"))));
    }
    for (v, include, lib) in versions {
        let d = dir.join(v);
        std::fs::create_dir_all(&d).unwrap();
        assert_eq!(c_layouts(&d, &include), rust_layouts(), "likwid.h {v}");
        let loaded = match lib {
            Some(l) => likwid_sys::Likwid::load_from(&[l]).map(|x| x.path),
            None => likwid_sys::Likwid::load().map(|x| x.path.clone()).map_err(|e| e.clone()),
        };
        let path = loaded.unwrap_or_else(|e| panic!("LIKWID {v}: {e}"));
        assert!(path.to_string_lossy().contains("liblikwid.so"), "{}", path.display());
    }
}

/// Outside this project's machines the LIKWID 5.5.1 tarball is absent: the build script
/// says so in one line and exits with the "skipped by design" status, touching nothing.
#[test]
fn likwid55_without_its_tarball_is_skipped_in_one_line() {
    let out = run(Command::new(repo_root().join("scripts/likwid55.sh")).env("SP_LIKWID55_TARBALL", "/nonexistent/likwid-5.5.1.tar.gz"));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not found") && err.contains("skipped by design"), "{err}");
}

/// What an Intel host's likwid-genTopoCfg writes (a Sapphire Rapids, which LIKWID 5.2 does not
/// know either) becomes the same Zen3 claim: a stand-in likwid-genTopoCfg, first on PATH,
/// rewrites this host's topology with Intel's cpuid fields (uncore and client-memory support too,
/// which a Rocket Lake VM reports and which made LIKWID map a memory BAR the VM lacks) before
/// fake_msr.sh edits it.
#[test]
fn stand_in_claim_is_the_same_from_an_intel_host_topology() {
    let dir = scratch("likwid_intel_host_topology");
    let prog = build(&dir, "likwid_basic");
    let bin = dir.join("intel-host-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let generator = bin.join("likwid-genTopoCfg");
    std::fs::write(
        &generator,
        "#!/bin/bash\n# TEST STAND-IN: this host's topology as an Intel Sapphire Rapids host would describe itself.\n\
         set -e\n/usr/bin/likwid-genTopoCfg \"$@\"\nout=$2\n\
         sed -i -e 's/^cpuid_info family = .*/cpuid_info family = 6/' -e 's/^cpuid_info model = .*/cpuid_info model = 143/' \
         -e 's/^cpuid_info isIntel = .*/cpuid_info isIntel = 1/' -e 's/^cpuid_info perf_version = .*/cpuid_info perf_version = 5/' \
         -e 's/^cpuid_info perf_num_ctr = .*/cpuid_info perf_num_ctr = 8/' -e 's/^cpuid_info perf_width_ctr = .*/cpuid_info perf_width_ctr = 48/' \
         -e 's/^cpuid_info perf_num_fixed_ctr = .*/cpuid_info perf_num_fixed_ctr = 4/' \
         -e 's/^cpuid_info supportUncore = .*/cpuid_info supportUncore = 1/' -e 's/^cpuid_info supportClientmem = .*/cpuid_info supportClientmem = 1/' \
         -e 's/^cpuid_info osname = .*/cpuid_info osname = Intel(R) Xeon(R) Platinum 8480+/' \"$out\"\n\
         grep -q 'isIntel = 1' \"$out\" && grep -q 'supportClientmem = 1' \"$out\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&generator, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut c = perfctr(&prog, "0", true);
    let path = std::env::var_os("PATH").unwrap_or_default();
    c.env("PATH", std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(&path))).unwrap());
    let r = run_in(&dir, c);
    r.ok();
    assert!(r.stdout.contains("Xeon(R) Platinum 8480+") && r.stdout.contains("AMD K19 (Zen3) architecture"), "{}", r.stdout);
    assert!(r.warnings().is_empty(), "{:#?}", r.warnings());
    let (_, _, regions) = read_likwid(&r.h5, 0).expect("no rank0/likwid");
    assert_matches_perfctr(&regions, &parse_perfctr(&r.stdout), "full_api");
    assert_eq!(regions["init"].counter_names, ["FIXC1", "FIXC2", "PMC0", "PMC1", "PMC2", "PMC3"]);
}

/// LIKWID results are written in every layout: the `rank<N>/likwid` group stays beside the
/// columnar and aggregate region tables, and the Python reader sees both.
#[test]
fn likwid_results_are_written_in_every_layout() {
    let dir = scratch("likwid_layouts");
    let prog = build(&dir, "likwid_basic");
    for layout in ["columnar", "aggregate"] {
        let mut c = perfctr(&prog, "0", true);
        c.env("SCOPE_PROFILER_LAYOUT", layout);
        let r = run_in(&dir, c);
        r.ok();
        let perf = parse_perfctr(&r.stdout);
        let (_, num, regions) = read_likwid(&r.h5, 0).unwrap_or_else(|| panic!("{layout}: no rank0/likwid"));
        assert_eq!(num, 4, "{layout}");
        assert_matches_perfctr(&regions, &perf, "full_api");
        for (name, calls) in basic_calls() {
            assert_eq!(regions[&name].call_counts, vec![calls as i64], "{layout} {name}");
        }
        let py = support::python_view(&r.h5);
        assert_eq!(py["storage_layout"], layout);
        assert_eq!(py["has_likwid"], true, "{layout}");
        assert_eq!(py["likwid"]["0"].as_object().unwrap().len(), 4, "{layout}");
        for (name, calls) in basic_calls() {
            assert_eq!(py["regions"][&name]["0"]["calls"].as_u64(), Some(calls as u64), "{layout} {name}");
        }
    }
}
