//! LIKWID hardware counters: markers around every region, read back in an
//! isolated child process at finalize.
//!
//! Contract with the core (signatures kept):
//! - `Session::begin(use_likwid)` runs once in `sp_setup`, on the setup thread, before workers exist.
//! - `region_created` runs under the region-registry lock for every new dense region id.
//! - `start`/`stop` run on the recording thread around the timing.
//! - `finish` runs once at finalize after recording has stopped; its result (plain data,
//!   `model::likwid`) is written into `rank<N>/likwid` by the writer (`writer::likwid`).
//!
//! Modules, one job each:
//! `env` (marker environment, LIKWID_EVENTS validation), `tags` (region name → LIKWID tag),
//! `markers` (in-process marker calls), `marker_file` (parser), `perfgroup` + `formula`
//! (group files, METRICS evaluation), `naming` (records → named results), `full_api`
//! (the helper's perfmon read-back), `helper_spawn` (starting the helper), `readback`
//! (choosing full_api / marker_file / marker_api). The result types (`LikwidRun`,
//! `RegionResult`, their JSON form) are plain data in `model::likwid`.
//! Nothing here panics into the core: setup and finish run under `catch_unwind`, and the
//! hot path has no panicking operation.

pub mod env;
pub mod formula;
pub mod full_api;
pub mod helper_spawn;
pub mod marker_file;
pub mod markers;
pub mod naming;
pub mod perfgroup;
pub mod readback;
pub mod tags;

use crate::model::LikwidRun;

use crate::warn;
use env::{EnvError, EventSet, MarkerEnv};
use likwid_sys::Likwid;
use markers::Markers;
use naming::{MetricInputs, SetInfo};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// LIKWID writes its marker file once per process, so the markers are set up once.
static STARTED: AtomicBool = AtomicBool::new(false);

/// The LIKWID side of one profiling run. `Send + Sync`: the core shares it with every
/// recording thread.
pub struct Session {
    markers: Markers,
    env: MarkerEnv,
    /// Modification time of a marker file that existed before markerInit (a leftover that
    /// must not be mistaken for this run's results).
    stale_marker: Option<std::time::SystemTime>,
    vars: Vec<(String, String)>,
    sets: Vec<Option<SetInfo>>,
    inputs: MetricInputs,
}

/// What LIKWID's topology tells us before markerInit: the perfgroup arch and where groups live.
struct Machine {
    /// `None` when LIKWID does not know this CPU model (its perfmon would fail or crash).
    arch: Option<String>,
    /// `family F model M` as LIKWID read it (cpuid, or its topology file).
    cpu: String,
    topology_rc: i32,
    group_dirs: Vec<PathBuf>,
    is_intel: bool,
    smt: bool,
}

fn machine(lib: &Likwid) -> Machine {
    // SAFETY: topology_init/init_configuration are idempotent and run again inside
    // likwid_markerInit; we only read fields of the structs they fill.
    unsafe {
        let topology_rc = (lib.topology_init)();
        (lib.init_configuration)();
        let info = (lib.get_cpuInfo)();
        let arch = if info.is_null() { None } else { likwid_sys::owned_string((*info).short_name) };
        let cpu = if info.is_null() {
            "unknown".to_string()
        } else {
            let name = likwid_sys::owned_string((*info).osname).map(|n| format!(", {}", n.trim())).unwrap_or_default();
            format!("family {} model {}{name}", (*info).family, (*info).model)
        };
        let is_intel = !info.is_null() && (*info).is_intel != 0;
        let conf = (lib.get_configuration)();
        let configured = if conf.is_null() { None } else { likwid_sys::owned_string((*conf).group_path) };
        let topo = (lib.get_cpuTopology)();
        let smt = !topo.is_null() && (*topo).num_threads_per_core > 1;
        Machine {
            arch: arch.filter(|a| !a.is_empty()),
            cpu,
            topology_rc,
            group_dirs: perfgroup::group_dirs(configured.as_deref().map(std::path::Path::new)),
            is_intel,
            smt,
        }
    }
}

/// Everything LIKWID's `perfmon_addEventSet` would reject (and crash markerInit over)
/// that we can see from outside: unknown groups, REQUIRE_NOHT groups with SMT on.
fn check_event_sets(env: &MarkerEnv, m: &Machine) -> Result<(), String> {
    let has_groups = env.sets.iter().any(|s| matches!(s, EventSet::Group(_)));
    let Some(arch) = &m.arch else {
        return if has_groups {
            Err("LIKWID cannot tell this CPU's architecture, so group names cannot be checked".into())
        } else {
            Ok(())
        };
    };
    let files = env::check_groups(&env.sets, &m.group_dirs, arch)?;
    for (set, file) in env.sets.iter().zip(files) {
        if let (EventSet::Group(name), Some(file)) = (set, file) {
            let text = safe_file::read_regular_text(&file, perfgroup::MAX_GROUP_BYTES).map_err(|e| format!("{}: {e}", file.display()))?;
            if m.smt && perfgroup::parse(name, &text).require_noht {
                return Err(format!("group {name} requires SMT off (REQUIRE_NOHT)"));
            }
        }
    }
    Ok(())
}

const TIMINGS_ONLY: &str = "timings only";

impl Session {
    /// Set up LIKWID markers, or print one `[scope_profiler]` warning and return `None`
    /// (timings only). Never panics, never fails the run.
    pub fn begin(use_likwid: bool) -> Option<Session> {
        if !use_likwid {
            return None;
        }
        catch_unwind(Session::begin_inner).unwrap_or_else(|_| {
            warn::once("likwid-setup", &format!("internal error while setting up LIKWID; {TIMINGS_ONLY}"));
            None
        })
    }

    fn begin_inner() -> Option<Session> {
        if STARTED.swap(true, Ordering::AcqRel) {
            warn::once(
                "likwid-twice",
                &format!("LIKWID markers can be set up once per process (LIKWID writes its marker file once); {TIMINGS_ONLY}"),
            );
            return None;
        }
        let vars = env::likwid_vars();
        let env = match env::detect(&vars) {
            Ok(e) => e,
            Err(EnvError::Missing(missing)) => {
                warn::once(
                    "likwid-env",
                    &format!(
                        "LIKWID counters requested but {} not set: start under likwid-perfctr -m (or likwid-mpirun -marker); {TIMINGS_ONLY}",
                        missing.join(", ")
                    ),
                );
                return None;
            }
            Err(EnvError::Invalid(why)) => {
                warn::once(
                    "likwid-events",
                    &format!("invalid LIKWID marker environment: {why}; LIKWID not started (it would crash); {TIMINGS_ONLY}"),
                );
                return None;
            }
        };
        let lib = match Likwid::load() {
            Ok(l) => l,
            Err(e) => {
                warn::once(
                    "likwid-missing",
                    &format!("LIKWID not installed: {e} (set LIKWID_HOME or put likwid-perfctr on PATH); {TIMINGS_ONLY}"),
                );
                return None;
            }
        };
        let m = machine(lib);
        // LIKWID names every CPU its perfmon supports (the same family/model table). On one
        // it does not know, likwid_markerInit crashes the program (5.2 on a Zen4: SIGSEGV
        // after "Unsupported AMD Zen Processor"), so it is never called there.
        if m.arch.is_none() || m.topology_rc != 0 {
            warn::once(
                "likwid-cpu",
                &format!(
                    "LIKWID ({}) does not support this CPU ({}) and would crash in likwid_markerInit: no hardware counters (a newer LIKWID may support it); {TIMINGS_ONLY}",
                    lib.path.display(),
                    m.cpu
                ),
            );
            return None;
        }
        if let Err(why) = check_event_sets(&env, &m) {
            warn::once(
                "likwid-events",
                &format!("invalid LIKWID_EVENTS={:?}: {why}; LIKWID not started (it would crash); {TIMINGS_ONLY}", env.events),
            );
            return None;
        }
        let stale_marker = std::fs::metadata(&env.filepath).and_then(|m| m.modified()).ok();
        let Some(markers) = Markers::init(lib, &env.threads) else {
            warn::once(
                "likwid-init",
                &format!(
                    "likwid_markerInit did not activate (no access to the hardware counters? see LIKWID's messages above); {TIMINGS_ONLY}"
                ),
            );
            return None;
        };
        let (num_sockets, num_numadomains) = markers.topology_counts();
        let inputs = MetricInputs { clock_hz: markers.cycle_clock(), num_sockets, num_numadomains, is_intel: m.is_intel };
        let sets = naming::describe_sets(&env.sets, &m.group_dirs, m.arch.as_deref().unwrap_or(""));
        Some(Session { markers, env, stale_marker, vars, sets, inputs })
    }

    /// A new region (dense ids, in creation order): gets its LIKWID tag (see `tags`).
    pub fn region_created(&self, id: u32, name: &str) {
        self.markers.tags.push(id, name);
    }

    #[inline]
    pub fn start(&self, id: u32) {
        self.markers.start(id);
    }

    #[inline]
    pub fn stop(&self, id: u32) {
        self.markers.stop(id);
    }

    /// Snapshots, `likwid_markerClose`, then the read-back. Never panics; on an internal
    /// error the run keeps its timings and gets no counters.
    pub fn finish(self) -> LikwidRun {
        let vars = self.vars.clone();
        catch_unwind(AssertUnwindSafe(|| self.finish_inner())).unwrap_or_else(|_| {
            warn::once("likwid-finish", "internal error while reading LIKWID counters; the run keeps its timings");
            LikwidRun { env: vars, regions: Vec::new() }
        })
    }

    fn finish_inner(self) -> LikwidRun {
        let foreign = self.markers.foreign_cpu_calls.load(Ordering::Relaxed);
        if foreign > 0 {
            warn::once(
                "likwid-foreign-cpu",
                &format!(
                    "{foreign} region start/stop call(s) ran on CPUs outside LIKWID_THREADS={} and were not counted (pin threads, e.g. likwid-perfctr -C)",
                    self.env.threads.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
                ),
            );
        }
        let shared = self.markers.shared_cpu_calls.load(Ordering::Relaxed);
        if shared > 0 {
            warn::once(
                "likwid-shared-cpu",
                &format!(
                    "{shared} region start/stop call(s) ran on a CPU where another thread already records and were not counted (LIKWID 5.5 keeps one result per CPU: give each thread its own CPU, e.g. likwid-perfctr -C with one CPU per thread)"
                ),
            );
        }
        if self.markers.tags.is_empty() {
            // No region was ever created: LIKWID writes no file and there is nothing to read.
            self.markers.close();
            return LikwidRun { env: self.vars.clone(), regions: Vec::new() };
        }
        self.markers.register_all_here();
        let snapshots = self.markers.snapshots();
        self.markers.close();
        let marker_written =
            std::fs::metadata(&self.env.filepath).and_then(|m| m.modified()).is_ok_and(|t| self.stale_marker.is_none_or(|old| t != old));
        let inputs = readback::Inputs {
            marker_written,
            env: &self.env,
            sets: &self.sets,
            metric_inputs: self.inputs,
            snapshots,
            tags: &self.markers.tags,
        };
        let regions = readback::collect(&inputs);
        LikwidRun { env: self.vars.clone(), regions }
    }
}

// The core shares one Session with every recording thread.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Session>();
};
