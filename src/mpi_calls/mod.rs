//! Recording the program's MPI calls, which the MPI plugin's generated wrappers hand in
//! through `ffi_mpi` (no annotation in the program): each outermost MPI call of a thread is
//! timed on the thread's own recorder — as a region named after the routine when calls are
//! kept (`SCOPE_PROFILER_MPI=calls`), so it nests in the program's regions and shows in every
//! layout and reader — and accounted per routine and communicator in the thread's aggregates
//! (`mpi_stats::ThreadMpi`): bytes, message sizes, peers, polls that found nothing, and the
//! requests completed by Wait/Test attributed to the call that created them (`requests`). At
//! finalize, `collect` pools the threads into the rank's `MpiProfile` (`rank<N>/mpi/`).

pub mod requests;
pub mod sites;

use crate::clock;
use crate::model::MpiProfile;
use crate::mpi_stats::{Event, Mode, Origin, Settings, ThreadMpi, ThreadTake, flags};
use crate::recorder::ThreadData;
use crate::status::Result;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU32, Ordering};
use parking_lot::Mutex;
use std::sync::OnceLock;

const OFF: u8 = 0;
const SUMMARY: u8 = 1;
const CALLS: u8 = 2;

/// What is kept while the profiler runs (OFF before setup and after finalize).
static MODE: AtomicU8 = AtomicU8::new(OFF);
/// What the wrappers do at the start of a call, read by them directly (`GATE_PTR`): 0 nothing
/// (not recording), 1 read CLOCK_MONOTONIC, 2 read the TSC: the start time of the call, in
/// the core's clock, is all the core needs from the start (it records the call when it ends).
static GATE: AtomicU8 = AtomicU8::new(0);

/// The byte the wrappers read at the start of every call (see `GATE`), for the C table.
pub const GATE_PTR: *const u8 = GATE.as_ptr() as *const u8;

fn update_gate() {
    let g = match MODE.load(Ordering::Acquire) {
        _ if PAUSED.load(Ordering::Acquire) => 0,
        OFF => 0,
        _ if clock::reads_tsc() => 2,
        _ => 1,
    };
    GATE.store(g, Ordering::Release);
}
static SITES: AtomicBool = AtomicBool::new(false);
/// MPI_Pcontrol(0) pauses the recording of MPI calls; any other level resumes it.
static PAUSED: AtomicBool = AtomicBool::new(false);
/// The settings of the run (kept after finalize, for the file).
static SETTINGS: Mutex<Option<Settings>> = Mutex::new(None);
static RUN_START_NS: AtomicI64 = AtomicI64::new(0);
static INIT_NS: AtomicI64 = AtomicI64::new(0);

/// The routines the wrappers know, and the region of each (registered on its first call).
struct Routines {
    names: Vec<String>,
    regions: Vec<AtomicU32>,
    family: String,
}

static ROUTINES: OnceLock<Routines> = OnceLock::new();
/// Registers a region name and gives its id (the profiler's registry).
pub type Register = fn(&[u8]) -> Result<u32>;
/// How a routine's region is registered (given at setup).
static REGISTER: OnceLock<Register> = OnceLock::new();
const NO_REGION: u32 = u32::MAX;

/// The wrappers' routine table (once per process). Err: another table came first.
pub fn set_routines(names: Vec<String>, family: &str) -> std::result::Result<(), String> {
    let regions = names.iter().map(|_| AtomicU32::new(NO_REGION)).collect();
    let mut ours = Some(Routines { names, regions, family: family.to_string() });
    let r = ROUTINES.get_or_init(|| ours.take().unwrap());
    match ours {
        None => Ok(()),
        Some(o) if o.names == r.names => Ok(()),
        Some(o) => Err(format!("two MPI plugins in one process ({} and {}): MPI calls are recorded through the first", r.family, o.family)),
    }
}

/// The run starts: what to keep, and how regions are registered. Called by the profiler's setup.
pub fn on_setup(settings: Settings, register: Register) {
    let _ = REGISTER.set(register);
    *SETTINGS.lock() = Some(settings);
    RUN_START_NS.store(clock::monotonic_ns(), Ordering::Relaxed);
    SITES.store(settings.sites, Ordering::Relaxed);
    PAUSED.store(false, Ordering::Relaxed);
    let mode = match settings.mode {
        Mode::Off => OFF,
        Mode::Summary => SUMMARY,
        Mode::Calls => CALLS,
    };
    MODE.store(mode, Ordering::Release);
    update_gate();
}

/// How long MPI_Init took (the implicit setup runs right after it).
pub fn note_init_time(ns: i64) {
    INIT_NS.store(ns.max(0), Ordering::Relaxed);
}

/// Time the profiler took inside MPI_Init (after PMPI_Init) and inside MPI_Finalize (before
/// PMPI_Finalize), as the wrappers measured it.
static SPENT_INIT_NS: AtomicI64 = AtomicI64::new(-1);
static SPENT_FINALIZE_NS: AtomicI64 = AtomicI64::new(-1);

/// What the wrappers measured around MPI_Init and MPI_Finalize (`what`: 0 the profiler's time
/// inside MPI_Init, 1 inside MPI_Finalize, 2 PMPI_Finalize's own time, after it returned): at
/// verbosity 2, one line per rank says the whole time the profiler added to both calls.
pub fn note_spent(what: i32, ns: i64, rank: i32) {
    match what {
        0 => SPENT_INIT_NS.store(ns.max(0), Ordering::Relaxed),
        1 => SPENT_FINALIZE_NS.store(ns.max(0), Ordering::Relaxed),
        2 => {
            let verbose = std::env::var(crate::config::env::VERBOSE).ok().and_then(|v| v.trim().parse::<u32>().ok()).unwrap_or(1);
            if verbose >= 2 {
                crate::warn::always(&spent_line(rank, SPENT_INIT_NS.load(Ordering::Relaxed), INIT_NS.load(Ordering::Relaxed), SPENT_FINALIZE_NS.load(Ordering::Relaxed), ns));
            }
        }
        _ => {}
    }
}

fn spent_line(rank: i32, init: i64, mpi_init: i64, finalize: i64, pmpi_finalize: i64) -> String {
    let s = |ns: i64| if ns < 0 { "-".to_string() } else { format!("{:.3} s", ns as f64 * 1e-9) };
    let who = if rank >= 0 { format!("rank {rank}") } else { "this process".into() };
    format!(
        "{who}: the profiler's time inside MPI_Init {} (loading and setting it up, after PMPI_Init's own {}) and inside MPI_Finalize {} (writing the profile, before PMPI_Finalize's own {}): {} in all",
        s(init),
        s(mpi_init),
        s(finalize),
        s(pmpi_finalize.max(0)),
        s(init.max(0) + finalize.max(0))
    )
}

/// The thread level MPI provided (0 single, 1 funneled, 2 serialized, 3 multiple).
pub fn note_thread_level(level: i32) {
    requests::set_shared(level >= 2);
}

/// MPI_Pcontrol(level).
pub fn pcontrol(level: i32) {
    PAUSED.store(level == 0, Ordering::Release);
    update_gate();
}

/// The region of routine `r`, registered on first use. None for an unknown routine or a
/// region that cannot be registered (the call is then counted only).
#[inline(always)]
fn region_of(r: u32) -> Option<u32> {
    let routines = ROUTINES.get()?;
    match routines.regions.get(r as usize)?.load(Ordering::Relaxed) {
        NO_REGION => register_region(routines, r),
        id => Some(id),
    }
}

#[cold]
#[inline(never)]
fn register_region(routines: &Routines, r: u32) -> Option<u32> {
    let id = (REGISTER.get()?)(routines.names[r as usize].as_bytes()).ok()?;
    routines.regions[r as usize].store(id, Ordering::Relaxed);
    Some(id)
}

/// A finished call, as the wrapper handed it in: the call (read in place) and its requests.
pub struct Finished<'a> {
    pub event: &'a Event,
    /// The request it created (0: none) and the address it was written to (read only with
    /// `flags::REQUEST`).
    pub request: u64,
    pub request_slot: u64,
    /// The requests it completed, started or freed (0: none at that position), and where the
    /// program's array of them is: the handle of `reqs[i]` is at `reqs_at + i * stride`.
    pub reqs: &'a [u64],
    pub reqs_at: u64,
    pub stride: u64,
}

impl Finished<'_> {
    /// The address of the program's handle of `reqs[i]`.
    fn slot(&self, i: usize) -> u64 {
        if self.reqs_at == 0 { 0 } else { self.reqs_at.wrapping_add((i as u64).wrapping_mul(self.stride)) }
    }
}

/// Record a finished call that created, started, completed and freed no request (most calls)
/// on the calling thread (see `as_region`).
#[inline(always)]
pub fn finish(data: &mut ThreadData, e: &Event) {
    debug_assert!(e.flags & flags::REQUESTS == 0);
    as_region(data, e).record(e, SITES.load(Ordering::Relaxed));
}

/// Record a finished call that created, started, completed or freed requests.
#[inline(always)]
pub fn finish_with_requests(data: &mut ThreadData, call: &Finished<'_>) {
    record_requests(as_region(data, call.event), call, SITES.load(Ordering::Relaxed));
}

/// With `SCOPE_PROFILER_MPI=calls`, the call as a region named after the routine, recorded now
/// that it ended inside the thread's innermost open region (a poll that found nothing is only
/// its time there); then the thread's aggregates, in which the caller counts it.
#[inline(always)]
fn as_region<'d>(data: &'d mut ThreadData, e: &Event) -> &'d mut ThreadMpi {
    if MODE.load(Ordering::Relaxed) == CALLS {
        match if e.flags & flags::EMPTY == 0 { region_of(e.routine) } else { None } {
            Some(id) => data.record_closed(id, e.start, e.end),
            None => data.add_child_time(e.duration()),
        }
    }
    data.mpi.get_or_insert_with(Box::default)
}

/// A call that created, started, completed or freed requests, in the thread's aggregates and
/// request table.
fn record_requests(t: &mut ThreadMpi, call: &Finished<'_>, sites: bool) {
    let shared = requests::shared();
    let mut e = *call.event;
    if e.flags & flags::STARTS != 0 {
        for (i, &h) in call.reqs.iter().enumerate().filter(|(_, h)| **h != 0) {
            let slot = call.slot(i);
            if let Some(o) = if shared { requests::get(h, slot) } else { t.requests.get(h, slot) } {
                e.sent += o.sent;
                e.received += o.received;
                t.started(&o);
            }
        }
    }
    if e.flags & flags::REQUEST != 0 && call.request != 0 && e.flags & flags::FAILED == 0 {
        let persistent = e.flags & flags::PERSISTENT != 0;
        let o = Origin { routine: e.routine, sent: e.sent, received: e.received, dest: e.dest, source: e.source, persistent };
        if shared {
            requests::insert(call.request, call.request_slot, o);
        } else if !t.requests.insert(call.request, call.request_slot, o, requests::PER_THREAD) {
            t.untracked_requests += 1;
        }
        if persistent {
            // Its traffic is counted each time it is started.
            (e.sent, e.received, e.dest, e.source) = (0, 0, crate::mpi_stats::PEER_NONE, crate::mpi_stats::PEER_NONE);
        }
    }
    t.record(&e, sites);
    if e.flags & flags::COMPLETES != 0 {
        // Each completed request's share of the call's time (no division for one: the common case).
        let n = call.reqs.iter().filter(|&&h| h != 0).count().max(1) as i64;
        let share = if n == 1 { e.duration() } else { e.duration() / n };
        for (i, &h) in call.reqs.iter().enumerate().filter(|(_, h)| **h != 0) {
            let slot = call.slot(i);
            let origin = if shared { requests::complete(h, slot) } else { t.requests.complete(h, slot) };
            t.completed(e.routine, origin.as_ref(), share);
        }
    }
    if e.flags & flags::FREES != 0 {
        for (i, &h) in call.reqs.iter().enumerate().filter(|(_, h)| **h != 0) {
            let slot = call.slot(i);
            if shared {
                requests::remove(h, slot);
            } else {
                t.requests.remove(h, slot);
            }
        }
    }
}

/// Recording stops (finalize begins): later calls are not recorded.
pub fn stop() {
    MODE.store(OFF, Ordering::Release);
    update_gate();
}

/// The rank's MPI profile from the threads' aggregates (`threads`: each thread's id in the
/// file and its data), or None when MPI calls were not recorded in this run.
pub fn collect(threads: Vec<(i64, Option<Box<ThreadMpi>>)>, timebase: &clock::Timebase) -> Option<MpiProfile> {
    stop();
    let settings = (*SETTINGS.lock())?;
    let routines = ROUTINES.get();
    if settings.mode == Mode::Off || routines.is_none() {
        requests::clear();
        return None;
    }
    let routines = routines.unwrap();
    let takes: Vec<ThreadTake> = threads.into_iter().filter_map(|(thread, d)| d.map(|d| ThreadTake { thread, data: *d })).collect();
    let mut symbolizer = sites::Symbolizer::default();
    let mut p = MpiProfile::from_threads(&routines.names, takes, |t| timebase.duration_ns(t), |a| symbolizer.resolve(a));
    p.mode = if settings.sites { format!("{},sites", settings.mode.name()) } else { settings.mode.name().to_string() };
    p.family = routines.family.clone();
    p.app_time_ns = clock::monotonic_ns() - RUN_START_NS.load(Ordering::Relaxed);
    p.init_time_ns = INIT_NS.load(Ordering::Relaxed);
    p.untracked_requests += requests::untracked();
    requests::clear();
    Some(p)
}

/// Whether MPI_Init should set profiling up (the program did not): not when
/// `SCOPE_PROFILER_MPI=off` (the wrappers then change nothing) or profiling is disabled.
pub fn wants_implicit_setup() -> bool {
    let env = |name: &str| std::env::var(name).ok();
    let mode = env(crate::config::env::MPI).and_then(|v| Settings::parse(&v).ok()).map_or(Mode::Summary, |s| s.mode);
    mode != Mode::Off
}
