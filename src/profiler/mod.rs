//! The process-wide profiler: its state machine (set up -> running -> finalized), the
//! start/stop entry points of the hot path, and finalize, which turns the threads' buffers
//! into one `RankProfile` and hands it to `route`.

use crate::clock;
use crate::config::{Config, Options};
use crate::counters::{self, Counters};
use crate::model::{RankInfo, RankProfile, RunFacts};
use crate::profile::ThreadRecord;
use crate::recorder::{MAX_DEPTH, Mismatch, NAME_SLOTS, NOT_PUSHED, NameSlot, ThreadBuffer, ThreadData, slot_index};
use crate::registry::Registry;
use crate::status::{Error, Result, Status};
use crate::{output, quiesce, route, warn};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, Ordering};
use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod recording;
mod signal_write;
pub use recording::*;
use signal_write::{signal_write_cut_short, write_after_signal};

const UNINIT: u8 = 0;
const RUNNING: u8 = 1;
const DISABLED: u8 = 2;
const FINALIZED: u8 = 3;
/// Running with counter sources (LIKWID markers, perf events): a state of its own so the
/// plain fast path never loads them.
const RUNNING_COUNTERS: u8 = 4;

#[inline(always)]
fn is_running(state: u8) -> bool {
    state == RUNNING || state == RUNNING_COUNTERS
}

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static REGISTRY: Registry = Registry::new();
/// Every thread that ever recorded. Entries are never removed: a thread's TLS pointer
/// must stay valid for the life of the process (only the data inside is freed at finalize).
/// Locks (here and below) are never taken inside a signal handler that interrupted the library's
/// cold code on the same thread (`reentry::busy` refuses such a call first); the write after a
/// termination signal and after an `exit()` from the host's handler runs on a thread of its own
/// with a deadline (`signals`), so a holder the signal interrupted delays it but cannot deadlock it.
static THREADS: Mutex<Vec<Arc<ThreadBuffer>>> = Mutex::new(Vec::new());
static NEXT_THREAD: AtomicU32 = AtomicU32::new(0);
/// The counter sources, or null. Set at setup, taken at finalize once all threads are quiesced.
static COUNTERS: AtomicPtr<Counters> = AtomicPtr::new(std::ptr::null_mut());
static SESSION: Mutex<Option<Session>> = Mutex::new(None);
static AT_EXIT_REGISTERED: AtomicBool = AtomicBool::new(false);
/// The process that set up profiling: a forked child that exits must not write the file.
static SETUP_PID: AtomicU32 = AtomicU32::new(0);
/// When sp_setup ran (CLOCK_MONOTONIC ns): the start of the wall time the summary shares refer to.
static SETUP_NS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
/// Whether threads keep every call (false in the aggregate layout: statistics only).
static KEEP_CALLS: AtomicBool = AtomicBool::new(true);
/// Set up without the program calling sp_setup (`setup_implicit`).
static IMPLICIT: AtomicBool = AtomicBool::new(false);
/// A setup is under way (its session lock held).
static SETTING_UP: AtomicBool = AtomicBool::new(false);
/// The thread (`pthread_self`) of the setup under way, while `SETTING_UP`.
static SETTING_UP_ON: AtomicU64 = AtomicU64::new(0);
/// What set the run up implicitly (`ImplicitOrigin as u8 + 1`; 0: the program's sp_setup).
static IMPLICIT_ORIGIN: AtomicU8 = AtomicU8::new(0);
/// Calls refused because the threads' recording had stopped (counted for the message after a
/// termination signal: the process lives on while the profile is written).
static REFUSED: AtomicU64 = AtomicU64::new(0);
/// CLOCK_MONOTONIC ns when finalize stopped the threads' recording.
static STOPPED_NS: AtomicI64 = AtomicI64::new(0);

/// What setup fixed for the run.
pub struct Session {
    pub config: Config,
    pub facts: RunFacts,
    pub info: RankInfo,
    /// The communicator we gather over, when the host initialized MPI before sp_setup.
    pub mpi: Option<crate::mpi_comm::MpiContext>,
    /// The clock the hot path reads, chosen at setup.
    pub clock: clock::ClockChoice,
}

// The calling thread's buffer pointer lives in initial-exec TLS (src/tls.c): one load instead
// of the __tls_get_addr call a Rust thread_local! costs in a shared library.
unsafe extern "C" {
    #[cfg_attr(all(target_arch = "x86_64", target_os = "linux"), allow(dead_code))]
    fn scope_profiler_tls_get() -> *const std::ffi::c_void;
    fn scope_profiler_tls_set(p: *const std::ffi::c_void);
}

fn session() -> MutexGuard<'static, Option<Session>> {
    SESSION.lock()
}

/// The calling thread's buffer, or null before its first call.
#[inline(always)]
fn current_thread() -> *const ThreadBuffer {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        // The initial-exec load `scope_profiler_tls_get` does, inline (no call on the hot
        // path): the slot's offset from the thread pointer, from the GOT, then the slot.
        let p: *const ThreadBuffer;
        // SAFETY: reads this thread's own TLS slot (src/tls.c); `readonly`: the compiler keeps
        // it after any store (`scope_profiler_tls_set` is a call it cannot see into).
        unsafe {
            std::arch::asm!(
                "mov {p}, qword ptr [rip + scope_profiler_current_thread_buffer@GOTTPOFF]",
                "mov {p}, qword ptr fs:[{p}]",
                p = out(reg) p,
                options(nostack, readonly, preserves_flags, pure),
            );
        }
        p
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    // SAFETY: reads this thread's own TLS slot.
    unsafe {
        scope_profiler_tls_get() as *const ThreadBuffer
    }
}

/// The calling thread as an instrumented function's hook found it (`site_thread`): its buffer,
/// or none yet; handed on to `function_hook`, so that a hook reads the thread's slot once.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct HookThread(*const ThreadBuffer);

/// None when the calling thread no longer records the instrumented function at `addr`
/// (excluded by the filter, or throttled): a few loads, for the hooks to return before
/// anything else; otherwise the thread, for the hook's fast path.
#[inline(always)]
pub fn site_thread(addr: u64) -> Option<HookThread> {
    let p = current_thread();
    // SAFETY: a non-null slot points into THREADS, which never drops its entries.
    if !p.is_null() && unsafe { &*p }.skip.contains(addr) { None } else { Some(HookThread(p)) }
}

#[cold]
fn new_thread_buffer() -> &'static ThreadBuffer {
    let tb = Arc::new(ThreadBuffer::new(NEXT_THREAD.fetch_add(1, Ordering::Relaxed), KEEP_CALLS.load(Ordering::Relaxed)));
    let p = Arc::as_ptr(&tb);
    THREADS.lock().push(tb);
    // Sampled from now on while sampling runs (and its sampler goes when the thread ends).
    crate::sampling::thread_started();
    // Published last: until then a signal handler's call on this thread finds no buffer and is
    // refused (`with_new_thread`: the thread is busy), never records into a buffer while the
    // interrupted code holds the allocator's lock (sampling's setup above allocates).
    // SAFETY: writes this thread's own TLS slot.
    unsafe { scope_profiler_tls_set(p.cast()) };
    // SAFETY: THREADS keeps the Arc alive for the rest of the process.
    unsafe { &*p }
}

#[cold]
fn inactive(state: u8) -> Result<()> {
    match state {
        DISABLED => Ok(()),
        UNINIT => Err(Status::NotInitialized.into()),
        _ => {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            Err(Status::Finalized.into())
        }
    }
}

/// Run `f` on the calling thread's data inside the quiescence window. `f` gets the counter
/// sources when there are any.
#[inline(always)]
fn with_thread<R: Default>(f: impl FnOnce(&mut ThreadData, Option<&Counters>) -> Result<R>) -> Result<R> {
    let p = current_thread();
    if p.is_null() {
        return with_new_thread(f);
    }
    with_buffer(p, f)
}

/// A stop: `f` gets the tick count read at entry. The clock is read only by a thread that has
/// a buffer (it recorded before): a thread of a disabled or not yet set up profiler never has
/// one, so there a stop costs what a start costs (a TLS load, a state check), not a clock read.
#[inline(always)]
fn with_thread_stop<R: Default>(f: impl FnOnce(&mut ThreadData, i64, Option<&Counters>) -> Result<R>) -> Result<R> {
    let p = current_thread();
    if p.is_null() {
        // The thread's first call is a stop (of a region it cannot have started): read the
        // clock once a running profiler gave it a buffer.
        return with_new_thread(|data, cs| f(data, clock::now_stop(), cs));
    }
    let end = clock::now_stop();
    // Inlined by request: a stop's body is large enough that the compiler otherwise calls it
    // (a call, a second stack frame and its register saves on every stop).
    with_buffer(p, #[inline(always)] |data, cs| f(data, end, cs))
}

/// `with_thread` for a thread that has its buffer at `p`.
#[inline(always)]
fn with_buffer<R: Default>(p: *const ThreadBuffer, f: impl FnOnce(&mut ThreadData, Option<&Counters>) -> Result<R>) -> Result<R> {
    // SAFETY: a non-null slot points into THREADS, which never drops its entries.
    let tb = unsafe { &*p };
    // Odd already: a signal handler interrupted a call on this thread and calls again.
    let Some(seq) = tb.seq.try_enter() else { return Err(Status::Reentrant.into()) };
    let state = STATE.load(Ordering::Relaxed);
    let result = if state == RUNNING {
        // SAFETY: owner thread, inside enter/leave.
        f(unsafe { tb.data() }, None)
    } else {
        return with_thread_not_plain(state, tb, seq, f);
    };
    tb.seq.leave(seq);
    result
}

/// The calling thread's first call: only a running profiler gives it a buffer.
#[cold]
fn with_new_thread<R: Default>(f: impl FnOnce(&mut ThreadData, Option<&Counters>) -> Result<R>) -> Result<R> {
    let state = STATE.load(Ordering::Acquire);
    if !is_running(state) {
        let r = inactive(state).map(|_| R::default());
        after_refusal(state);
        return r;
    }
    // A new buffer locks and allocates: not inside a handler that interrupted the library,
    // and a handler interrupting this is refused.
    if crate::reentry::busy() {
        return Err(Status::Reentrant.into());
    }
    {
        let _busy = crate::reentry::Busy::enter();
        new_thread_buffer();
    }
    with_thread(f)
}

/// Inside the window but not plainly running: counter sources on, or stopped.
/// Leaves the window `seq` entered.
#[cold]
fn with_thread_not_plain<R: Default>(
    state: u8,
    tb: &ThreadBuffer,
    seq: u64,
    f: impl FnOnce(&mut ThreadData, Option<&Counters>) -> Result<R>,
) -> Result<R> {
    let result = match (state, counter_sources()) {
        // SAFETY: owner thread, inside enter/leave.
        (RUNNING_COUNTERS, Some(c)) => f(unsafe { tb.data() }, Some(c)),
        (RUNNING_COUNTERS, None) => f(unsafe { tb.data() }, None),
        _ => inactive(state).map(|_| R::default()),
    };
    tb.seq.leave(seq);
    after_refusal(state);
    result
}

/// After a call refused because recording stopped, outside the thread's window: the wait of
/// a program thread while the profile is written after a signal that ends the process
/// (`signals::hold_if_ending`).
#[inline(always)]
fn after_refusal(state: u8) {
    if state == FINALIZED {
        crate::signals::hold_if_ending();
    }
}

#[inline(always)]
fn counter_sources() -> Option<&'static Counters> {
    let p = COUNTERS.load(Ordering::Acquire);
    // SAFETY: non-null only between setup and finalize; finalize frees it only after every
    // thread is quiesced, and callers use it only inside the quiescence window.
    if p.is_null() { None } else { Some(unsafe { &*p }) }
}

#[inline(always)]
fn open_call(data: &mut ThreadData, id: u32, cs: Option<&Counters>) -> Result<()> {
    if !data.has_room() {
        return Err(too_deep(id));
    }
    if let Some(c) = cs {
        c.on_start(&mut data.counters, id);
    }
    // The timestamp is the last thing taken, so our own work is outside the region.
    data.push_open(id, clock::now());
    Ok(())
}

#[inline(always)]
fn close_call(data: &mut ThreadData, id: u32, end: i64, cs: Option<&Counters>) -> Result<()> {
    if data.close(id, end) {
        if let Some(c) = cs {
            c.on_stop(&mut data.counters, id);
        }
        return Ok(());
    }
    close_mismatched(data, id, end, cs)
}

#[cold]
fn close_mismatched(data: &mut ThreadData, id: u32, end: i64, cs: Option<&Counters>) -> Result<()> {
    if crate::reentry::busy() {
        return Err(Status::Reentrant.into()); // closing out of order allocates
    }
    let outcome = data.close_out_of_order(id, end);
    if let (Some(c), Mismatch::ClosedInner(inner)) = (cs, &outcome) {
        c.on_stop_out_of_order(&mut data.counters, inner, id);
    }
    Err(mismatch_error(id, outcome))
}

fn region_name(id: u32) -> String {
    REGISTRY.name(id).unwrap_or_else(|| format!("#{id}"))
}

/// Is the calling thread inside a start/stop call (a signal handler interrupted it)?
pub fn thread_in_call() -> bool {
    let p = current_thread();
    // SAFETY: a non-null slot points into THREADS, which never drops its entries.
    !p.is_null() && unsafe { &*p }.seq.in_call()
}

#[cold]
fn too_deep(id: u32) -> Error {
    if crate::reentry::busy() {
        return Status::NestingTooDeep.into(); // no message: it would allocate
    }
    let name = region_name(id);
    let msg = format!("start of region '{name}' refused: more than {MAX_DEPTH} regions open on this thread (missing stops?)");
    warn::once(&format!("deep:{name}"), &msg);
    Error::new(Status::NestingTooDeep, msg)
}

#[cold]
fn mismatch_error(id: u32, m: Mismatch) -> Error {
    if crate::reentry::busy() {
        // No message: it would allocate (see `reentry`).
        return match m {
            Mismatch::NotOpen => Status::UnmatchedStop.into(),
            Mismatch::ClosedInner(_) => Status::NotInnermost.into(),
        };
    }
    let name = region_name(id);
    match m {
        Mismatch::NotOpen => {
            let msg = format!("stop of region '{name}' which is not open on this thread: ignored");
            warn::once(&format!("unmatched:{name}"), &msg);
            Error::new(Status::UnmatchedStop, msg)
        }
        Mismatch::ClosedInner(inner) => {
            let inner: Vec<String> = inner.iter().map(|&i| format!("'{}'", region_name(i))).collect();
            let msg = format!(
                "stop of region '{name}' while {} still open inside it: '{name}' was recorded, the inner call(s) were closed unrecorded",
                inner.join(", ")
            );
            warn::once(&format!("innermost:{name}"), &msg);
            Error::new(Status::NotInnermost, msg)
        }
    }
}

#[cold]
fn invalid_handle(id: u32) -> Error {
    if crate::reentry::busy() {
        return Status::InvalidHandle.into(); // no message: it would allocate
    }
    let msg = if (id as i32) < 0 {
        format!("region handle {} is negative (a failed sp_region_register?)", id as i32)
    } else {
        format!("region handle {id} was not returned by sp_region_register")
    };
    Error::new(Status::InvalidHandle, msg)
}

fn register_name(bytes: &[u8]) -> Result<u32> {
    register_name_at(bytes, None)
}

fn register_name_at(bytes: &[u8], location: Option<crate::model::SourceLocation>) -> Result<u32> {
    REGISTRY.register_at(bytes, location, |id, name| {
        crate::spill::region_registered(id, name);
        if let Some(c) = counter_sources() {
            c.region_created(id, name);
        }
    })
}

// ---------------------------------------------------------------------------------------
// Public entry points (the FFI layer wraps these).

/// Start profiling with `options` over environment over defaults.
pub fn setup(options: &Options) -> Result<Status> {
    setup_with(options, None)
}

/// `setup`; `implicit`: what sets the run up when the program did not. Such a setup never
/// takes over a run another source set up meanwhile, as the program's own sp_setup does, and
/// leaves MPI alone unless it is MPI_Init's (an implicit setup at an arbitrary point of the
/// program, where a collective could meet the ranks out of step: the run then gathers at its
/// end, or writes rank files).
fn setup_with(options: &Options, implicit: Option<ImplicitOrigin>) -> Result<Status> {
    // Disabled (also in a forked child, where a lock may have been held at the fork): no lock.
    if STATE.load(Ordering::Acquire) == DISABLED {
        return Ok(Status::AlreadySetUp);
    }
    let mut guard = session();
    // SAFETY: no preconditions.
    SETTING_UP_ON.store(unsafe { libc::pthread_self() } as u64, Ordering::Relaxed);
    SETTING_UP.store(true, Ordering::Release);
    let result = setup_locked(&mut guard, options, implicit);
    SETTING_UP.store(false, Ordering::Release);
    result
}

fn setup_locked(guard: &mut MutexGuard<'static, Option<Session>>, options: &Options, implicit: Option<ImplicitOrigin>) -> Result<Status> {
    match STATE.load(Ordering::Acquire) {
        RUNNING | RUNNING_COUNTERS if implicit.is_none() && IMPLICIT.swap(false, Ordering::AcqRel) => return adopt_explicit_setup(guard, options),
        RUNNING | RUNNING_COUNTERS | DISABLED => return Ok(Status::AlreadySetUp),
        FINALIZED => return Err(Error::new(Status::Finalized, "sp_setup after sp_finalize: profiling stays off")),
        _ => {}
    }
    let mut config = Config::from_process_env(options);
    // A relative path means relative to the working directory at setup, even if the program
    // changes directory before finalize.
    if config.file_path.is_relative() {
        if let Ok(cwd) = std::env::current_dir() {
            config.file_path = cwd.join(&config.file_path);
        }
    }
    if config.disabled {
        STATE.store(DISABLED, Ordering::Release);
        return Ok(Status::Ok);
    }
    // Collective when MPI is initialized: every rank calls sp_setup.
    let attach_mpi = implicit.is_none_or(|o| o.is_mpi());
    let mpi = if attach_mpi { crate::mpi_comm::attach(config.mpi_comm)? } else { None };
    if mpi.is_some() {
        crate::mpi_comm::install_finalize_hook(finalize_inside_mpi_finalize);
        stay_loaded();
    }
    // The default layout follows the number of ranks (decided again at finalize, where the
    // ranks agree on it).
    let ranks = mpi.as_ref().map(|m| m.size as i64).or_else(|| crate::mpi_comm::launcher_rank().map(|(_, s)| s)).unwrap_or(1);
    config.layout = config.layout_for(ranks);
    quiesce::prepare();
    KEEP_CALLS.store(config.layout != crate::config::Layout::Aggregate, Ordering::Relaxed);
    let facts = RunFacts::now();
    let info = crate::metadata::local_rank_info();
    let mut running = RUNNING;
    let request = counters::CounterRequest { use_likwid: config.use_likwid, perf_events: &config.perf_events, perf_regions: &config.perf_regions };
    if let Some(c) = Counters::begin(&request) {
        COUNTERS.store(Box::into_raw(Box::new(c)), Ordering::Release);
        running = RUNNING_COUNTERS;
    }
    // Before the state says running: no thread reads the clock before the choice is made.
    let clock = clock::begin_run(config.clock, config.clock_anchor_ms);
    // After the clock choice: the MPI wrappers may read the clock themselves.
    crate::mpi_calls::on_setup(config.mpi, register_name);
    crate::functions::on_setup();
    crate::openmp::on_setup();
    start_flight_recorder(&config, &facts, &info, &clock);
    let sampling = config.sampling;
    **guard = Some(Session { config, facts, info, mpi, clock });
    SETUP_PID.store(std::process::id(), Ordering::Release);
    SETUP_NS.store(clock::monotonic_ns(), Ordering::Release);
    static ATFORK: std::sync::Once = std::sync::Once::new();
    // SAFETY: registering a plain extern "C" fn that only stores atomics.
    ATFORK.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(in_forked_child));
    });
    if let Some(origin) = implicit {
        // Inside the lock: a source that waited for this setup finds the run's origin.
        IMPLICIT.store(true, Ordering::Release);
        IMPLICIT_ORIGIN.store(origin as u8 + 1, Ordering::Release);
    }
    STATE.store(running, Ordering::Release);
    crate::sampling::on_setup(&sampling);
    if !AT_EXIT_REGISTERED.swap(true, Ordering::AcqRel) {
        // SAFETY: registering a plain extern "C" fn.
        unsafe { libc::atexit(finalize_at_exit) };
    }
    if let Some(s) = guard.as_ref() {
        let hooks = crate::signals::Hooks { write: write_after_signal, at_exit: write_at_exit, cut_short: signal_write_cut_short };
        crate::signals::install(hooks, &s.config.file_path, crate::spill::run_dir().as_deref());
    }
    Ok(Status::Ok)
}

/// Register `name` and return its handle.
pub fn register(name: &[u8]) -> Result<u32> {
    match STATE.load(Ordering::Acquire) {
        RUNNING | RUNNING_COUNTERS => register_name(name),
        DISABLED => Ok(0),
        s => inactive(s).map(|_| 0),
    }
}

/// Register `name` with the place in the source that defines it, and return its handle.
pub fn register_at(name: &[u8], location: Option<crate::model::SourceLocation>) -> Result<u32> {
    match STATE.load(Ordering::Acquire) {
        RUNNING | RUNNING_COUNTERS => register_name_at(name, location),
        DISABLED => Ok(0),
        s => inactive(s).map(|_| 0),
    }
}

/// Profiling was switched off at run time (`SCOPE_PROFILER_DISABLE`, or a forked child). The
/// C ABI's region calls check this before anything else and return at once, so off costs a
/// load and a branch (without it they would find nothing to do too, since a thread of a
/// switched-off profiler never gets a buffer, but only after a saved-register prologue, the
/// TLS helper and the state checks: 14 ns per pair instead of 1).
#[inline(always)]
pub fn switched_off() -> bool {
    STATE.load(Ordering::Relaxed) == DISABLED
}

// ---------------------------------------------------------------------------------------
// Setting up without the program's sp_setup (the MPI wrappers' MPI_Init; later the OpenMP
// tool interface), and recording calls that other layers time (the program's MPI calls).

/// What set the profiler up without the program calling sp_setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImplicitOrigin {
    /// MPI_Init or MPI_Init_thread of a C or C++ program.
    MpiInitC,
    /// MPI_INIT or MPI_INIT_THREAD of a Fortran program.
    MpiInitFortran,
    /// The OpenMP runtime started the library as its tool (OMPT): linked, preloaded, or
    /// named by OMP_TOOL_LIBRARIES.
    OpenMpTool,
    /// The first call of a function compiled with -finstrument-functions.
    InstrumentedFunction,
    /// Kokkos loaded the library as its tool (`kokkosp_init_library`).
    KokkosTool,
    /// NVTX loaded the library as its injection (`InitializeInjectionNvtx2`).
    NvtxInjection,
}

impl ImplicitOrigin {
    fn language(self) -> &'static str {
        match self {
            ImplicitOrigin::MpiInitFortran => "Fortran",
            // Read from the program: the language runtime its executable links (a C++ program
            // calling MPI_Init through the C binding is C++).
            ImplicitOrigin::MpiInitC => match crate::symbols::program_language() {
                Some(l) if l != "Fortran" => l,
                _ => "C",
            },
            // The Fortran runtime is loaded in a Fortran program.
            ImplicitOrigin::OpenMpTool | ImplicitOrigin::InstrumentedFunction | ImplicitOrigin::KokkosTool | ImplicitOrigin::NvtxInjection => {
                let fortran = crate::symbols::loaded_modules().iter().any(|m| m.path.rsplit('/').next().is_some_and(|f| f.starts_with("libgfortran.")));
                if fortran { "Fortran" } else { crate::symbols::program_language().unwrap_or("C") }
            }
        }
    }

    fn is_mpi(self) -> bool {
        matches!(self, ImplicitOrigin::MpiInitC | ImplicitOrigin::MpiInitFortran)
    }

    /// Whether `IMPLICIT_ORIGIN`'s value `stored` is a setup by a tool other than MPI.
    fn stored_not_mpi(stored: u8) -> bool {
        stored != 0 && stored != ImplicitOrigin::MpiInitC as u8 + 1 && stored != ImplicitOrigin::MpiInitFortran as u8 + 1
    }
}

/// Set up as `sp_setup(NULL)` would (the environment decides), unless the program did already.
/// The program's own sp_setup later adopts the run (`adopt_explicit_setup`); a second one is
/// SP_ALREADY_SET_UP as usual. Set up by the OpenMP tool or an instrumented function, the run
/// leaves MPI alone (those come at any point of a program); a later MPI_Init through the MPI
/// plugin (every rank is in it) attaches the run to MPI then.
pub fn setup_implicit(origin: ImplicitOrigin) -> Result<Status> {
    if STATE.load(Ordering::Acquire) != UNINIT {
        if origin.is_mpi() {
            attach_after_implicit_setup(origin);
        }
        return Ok(Status::AlreadySetUp);
    }
    if !origin.is_mpi() && SETTING_UP.load(Ordering::Acquire) {
        // A setup under way sets the run up. On this thread (the instrumented code or OpenMP
        // runtime it called): go on unrecorded. On another thread (a source's first call
        // while another source sets up): wait for it, as its session lock makes an sp_setup
        // wait, so that this call is recorded.
        // SAFETY: no preconditions.
        if SETTING_UP_ON.load(Ordering::Relaxed) != unsafe { libc::pthread_self() } as u64 {
            drop(session());
        }
        return Ok(Status::AlreadySetUp);
    }
    let options = Options { language: Some(origin.language().to_string()), ..Options::default() };
    let status = setup_with(&options, Some(origin))?;
    if status == Status::AlreadySetUp && origin.is_mpi() {
        // Another source set the run up while this one waited for its lock.
        attach_after_implicit_setup(origin);
    }
    Ok(status)
}

/// MPI_Init of a run the OpenMP tool or an instrumented function set up before: profile over
/// MPI from now on (collective: every rank is inside MPI_Init), as an MPI_Init setup would.
fn attach_after_implicit_setup(origin: ImplicitOrigin) {
    let mut guard = session();
    let from = IMPLICIT_ORIGIN.load(Ordering::Acquire);
    let earlier_not_mpi = ImplicitOrigin::stored_not_mpi(from);
    let Some(session) = guard.as_mut() else { return };
    if !IMPLICIT.load(Ordering::Acquire) || !earlier_not_mpi || session.mpi.is_some() {
        return;
    }
    match crate::mpi_comm::attach(session.config.mpi_comm) {
        Ok(Some(ctx)) => {
            session.mpi = Some(ctx);
            crate::mpi_comm::install_finalize_hook(finalize_inside_mpi_finalize);
            session.config.language = origin.language().to_string();
            IMPLICIT_ORIGIN.store(origin as u8 + 1, Ordering::Release);
        }
        Ok(None) => {}
        Err(e) => warn::once("implicit-attach", &format!("profiling over MPI from MPI_Init failed: {e}; the run is written at its end")),
    }
}

/// Whether nothing has set the profiler up yet (a cheap check for implicit setups).
#[inline(always)]
pub fn is_uninitialized() -> bool {
    STATE.load(Ordering::Relaxed) == UNINIT
}

/// An explicit sp_setup after an implicit one: the run keeps going with the program's options
/// where they can still apply — the file, verbosity, language and metadata detail (used at
/// finalize), LIKWID and perf events (counter sources start now; the program opened no region
/// before its sp_setup), the communicator (profiling moves to a duplicate of it, collectively
/// as in sp_setup) and the layout (unless statistics only were kept so far). The clock cannot
/// change (the recorded ticks are in it); a request that cannot be met warns once and makes
/// the call return SP_ALREADY_SET_UP, otherwise it returns SP_OK.
fn adopt_explicit_setup(guard: &mut MutexGuard<'static, Option<Session>>, options: &Options) -> Result<Status> {
    let Some(session) = guard.as_mut() else { return Ok(Status::AlreadySetUp) };
    let mut new = Config::from_process_env(options);
    if new.file_path.is_relative() {
        if let Ok(cwd) = std::env::current_dir() {
            new.file_path = cwd.join(&new.file_path);
        }
    }
    let mut refused = Vec::new();
    let cfg = &mut session.config;
    cfg.file_path = new.file_path;
    cfg.verbosity = new.verbosity;
    cfg.language = new.language;
    cfg.metadata_detail = new.metadata_detail;
    if new.use_likwid != cfg.use_likwid || new.perf_events != cfg.perf_events || new.perf_regions != cfg.perf_regions {
        if COUNTERS.load(Ordering::Acquire).is_null() {
            let request = counters::CounterRequest { use_likwid: new.use_likwid, perf_events: &new.perf_events, perf_regions: &new.perf_regions };
            if let Some(c) = Counters::begin(&request) {
                // Regions created so far (the MPI routines') are introduced to the sources.
                for (id, name) in REGISTRY.names().iter().enumerate() {
                    c.region_created(id as u32, name);
                }
                COUNTERS.store(Box::into_raw(Box::new(c)), Ordering::Release);
                STATE.store(RUNNING_COUNTERS, Ordering::Release);
            }
            (cfg.use_likwid, cfg.perf_events, cfg.perf_regions) = (new.use_likwid, new.perf_events, new.perf_regions);
        } else {
            refused.push("use_likwid/perf_events (counters are running already)");
        }
    }
    if new.layout != cfg.layout {
        if cfg.layout == crate::config::Layout::Aggregate {
            refused.push("layout (statistics only were kept so far)");
        } else {
            cfg.layout = new.layout;
            KEEP_CALLS.store(new.layout != crate::config::Layout::Aggregate, Ordering::Relaxed);
        }
    }
    if new.clock != cfg.clock {
        refused.push("clock");
    }
    if new.mpi_comm.is_some() && new.mpi_comm != cfg.mpi_comm {
        // Collective over the program's communicator, like the sp_setup it stands for.
        let ctx = crate::mpi_comm::attach(new.mpi_comm)?;
        session.mpi = ctx;
        session.config.mpi_comm = new.mpi_comm;
    } else if session.mpi.is_none() && crate::mpi_comm::is_usable() {
        // Set up by the OpenMP tool or an instrumented function, before or without MPI: the
        // program's sp_setup is collective, so attach now, as sp_setup does.
        let ctx = crate::mpi_comm::attach(new.mpi_comm)?;
        if ctx.is_some() {
            crate::mpi_comm::install_finalize_hook(finalize_inside_mpi_finalize);
        }
        session.mpi = ctx;
    }
    IMPLICIT_ORIGIN.store(0, Ordering::Release);
    if refused.is_empty() {
        return Ok(Status::Ok);
    }
    warn::once(
        "implicit-setup",
        &format!(
            "sp_setup after profiling was set up without it (MPI_Init, the OpenMP tool or an instrumented function): its other options were taken, but not {} (set it in the environment, SCOPE_PROFILER_*)",
            refused.join(", ")
        ),
    );
    Ok(Status::AlreadySetUp)
}

/// Statistics of region `id` over every thread's completed calls so far, in nanoseconds. Reads
/// the threads' statistics without stopping them (a snapshot may be torn by the calls
/// completing meanwhile, see `stats.rs`). Also after finalize: the final numbers.
pub fn region_stats(id: u32) -> Result<crate::model::Stats> {
    match STATE.load(Ordering::Acquire) {
        UNINIT => return Err(Status::NotInitialized.into()),
        DISABLED => return Ok(crate::model::Stats::default()),
        _ => {}
    }
    if id >= REGISTRY.count() {
        return Err(invalid_handle(id));
    }
    let timebase = clock::live_timebase();
    let mut all = crate::model::Stats::default();
    for tb in THREADS.lock().iter() {
        if let Some(s) = tb.stats.get(id) {
            all.merge(&s.to_ns(&timebase));
        }
    }
    Ok(all)
}

/// The summary table of this process's completed calls so far (the one printed at finalize).
pub fn live_summary() -> Result<String> {
    match STATE.load(Ordering::Acquire) {
        UNINIT => return Err(Status::NotInitialized.into()),
        DISABLED => return Ok(String::new()),
        _ => {}
    }
    let names = REGISTRY.names();
    let timebase = clock::live_timebase();
    let mut pooled: Vec<crate::model::Stats> = vec![crate::model::Stats::default(); names.len()];
    for tb in THREADS.lock().iter() {
        for (id, s) in tb.stats.all() {
            if let Some(p) = pooled.get_mut(id as usize) {
                p.merge(&s.to_ns(&timebase));
            }
        }
    }
    let rows = names
        .into_iter()
        .zip(pooled)
        .filter(|(_, s)| s.count > 0)
        .map(|(name, s)| crate::summary::RegionStats { name, calls: s.count, total_ns: s.total, min_ns: s.min, max_ns: s.max, open_calls: 0 })
        .collect();
    Ok(crate::summary::render(rows, 1))
}

/// Start sampling every recording thread at `hz` samples per second of its CPU time
/// (`sampling`), or change the rate.
pub fn start_sampling(hz: i32) -> Result<()> {
    match STATE.load(Ordering::Acquire) {
        RUNNING | RUNNING_COUNTERS => {}
        s => return inactive(s),
    }
    if hz <= 0 || hz as u32 > crate::sampling::MAX_HZ {
        return Err(Error::new(Status::InvalidArgument, format!("sp_start_sampling({hz}): the rate must be 1 to {} samples per second", crate::sampling::MAX_HZ)));
    }
    crate::sampling::start(hz as u32).map_err(|e| match e {
        crate::sampling::StartError::BadRate(m) => Error::new(Status::InvalidArgument, m),
        crate::sampling::StartError::Unsupported(m) => Error::new(Status::Unsupported, format!("sampling cannot start: {m}")),
        crate::sampling::StartError::Finalized => Status::Finalized.into(),
    })
}

/// Run metadata of the user's own (`sp_set_metadata`): kept for the file's `metadata/` (rank
/// 0's value) and this rank's attributes, as `user.<key>` (see `metadata::set_user`).
pub fn set_metadata(key: &str, value: &str) -> Result<()> {
    match STATE.load(Ordering::Acquire) {
        RUNNING | RUNNING_COUNTERS => {}
        s => return inactive(s),
    }
    crate::metadata::set_user(key, value).map_err(|(status, message)| Error::new(status, message))
}

/// Stop sampling; the samples so far are kept for finalize.
pub fn stop_sampling() -> Result<()> {
    match STATE.load(Ordering::Acquire) {
        RUNNING | RUNNING_COUNTERS => {}
        s => return inactive(s),
    }
    crate::sampling::stop();
    Ok(())
}

/// The sampler's `.sps` file beside the profile (`writer::sps`), when sampling ran. The
/// samples are in the profile too, so a failure here warns and finalize goes on.
fn write_sample_file(config: &Config, profile: &RankProfile) {
    let Some(samples) = &profile.samples else { return };
    let rank = crate::mpi_comm::world_rank_size().or_else(crate::mpi_comm::launcher_rank).map_or(0, |(r, _)| r);
    match crate::writer::sps::write(&config.file_path, samples, rank) {
        Ok(w) => {
            if let Some(why) = &w.fallback_reason {
                warn::always(&format!("{why}; samples written to {} instead", w.path.display()));
            }
            if config.verbosity >= 1 && rank == 0 {
                use std::io::Write;
                let outside = if samples.ticks > 0 { 100.0 * samples.outside as f64 / samples.ticks as f64 } else { 0.0 };
                let _ = writeln!(
                    std::io::stdout().lock(),
                    "samples: {} at {} Hz on {} thread(s) ({}), {outside:.1}% outside regions{}; written to {} (see `sptool lines`)",
                    samples.ticks,
                    samples.hz,
                    samples.threads,
                    samples.mechanism,
                    if samples.handler_replaced.is_some() { " (NOT ALL COUNTED: see the sampling warning)" } else { "" },
                    w.path.display()
                );
            }
        }
        Err(e) => warn::always(&format!("samples NOT written to a .sps file: {e}; they are in the profile (rank<N>/sampling, rank<N>/line_profile)")),
    }
}

/// Stop recording, merge, write the file, print the summary.
pub fn finalize() -> Result<Status> {
    finalize_as(route::Gather::Collective)
}

fn finalize_as(gather: route::Gather) -> Result<Status> {
    // Disabled (also in a forked child, where a lock may have been held at the fork): no lock.
    if STATE.compare_exchange(DISABLED, FINALIZED, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
        return Ok(Status::Ok);
    }
    let mut guard = session();
    match STATE.load(Ordering::Acquire) {
        UNINIT => return Err(Error::new(Status::NotInitialized, "sp_finalize before sp_setup: nothing to write")),
        DISABLED => {
            STATE.store(FINALIZED, Ordering::SeqCst);
            return Ok(Status::Ok);
        }
        FINALIZED => return Ok(Status::AlreadyFinalized),
        _ => {}
    }
    if !is_setup_process() {
        in_forked_child();
        return Ok(Status::Ok);
    }
    let mut session = guard.take().expect("a running profiler has a session");
    let t0 = Instant::now();
    let profile = take_local_profile(session.info.clone(), &session.clock, true);
    write_sample_file(&session.config, &profile);
    let t1 = Instant::now();
    let mpi = session.mpi.take();
    let verbosity = session.config.verbosity;
    // This rank's notes on finalize (verbosity 2). Under MPI they are printed before rank 0's
    // summary table, every rank's before a barrier that the table waits for, so that no
    // rank's line lands inside the table; in one process, after the table.
    let mut notes = || {
        if verbosity >= 2 {
            warn::always(&format!(
                "finalize: collecting the threads' data took {:.3} s (building the call paths {:.3} s: {}); merging, gathering and writing (streamed region by region) {:.3} s",
                (t1 - t0).as_secs_f64(),
                crate::callpath::LAST_BUILD_NS.load(Ordering::Relaxed) as f64 * 1e-9,
                crate::callpath::last_build_note(),
                t1.elapsed().as_secs_f64()
            ));
        }
    };
    let result = route::write_run(output::RunContext { config: &session.config, facts: &session.facts }, mpi, profile, gather, &mut notes);
    end_flight_recorder(result.is_ok());
    crate::signals::finished();
    result
}

/// A forked child of a profiled process records nothing and writes nothing: it holds a copy of
/// its parent's buffers (and, with the flight recorder, shares its spill mappings), and its
/// file would replace the parent's. Every call in it is a no-op returning SP_OK, as with
/// SCOPE_PROFILER_DISABLE; `sp_setup` returns SP_ALREADY_SET_UP; `sp_finalize` and its exit
/// write nothing. (A child that wants a profile of its own execs: a new process starts fresh.)
/// Runs in the child right after fork: atomics only.
extern "C" fn in_forked_child() {
    crate::spill::forget_in_child();
    STATE.store(DISABLED, Ordering::SeqCst);
}

/// Is this the process that set up profiling? (A child made without the atfork handler, by a
/// raw clone, still holds the running state.)
fn is_setup_process() -> bool {
    SETUP_PID.load(Ordering::Acquire) == std::process::id()
}

/// The flight recorder (spill sink and signal handlers), when requested.
fn start_flight_recorder(config: &Config, facts: &RunFacts, info: &RankInfo, clock: &clock::ClockChoice) {
    if !crate::spill::requested() {
        return;
    }
    if config.layout == crate::config::Layout::Aggregate {
        warn::once("spill-aggregate", "the flight recorder keeps calls, which the aggregate layout does not: it stays off");
        return;
    }
    let (rank, size) = match crate::mpi_comm::world_rank_size().or_else(crate::mpi_comm::launcher_rank) {
        Some((r, s)) => (Some(r), Some(s)),
        None => (None, None),
    };
    let multi = size.is_some_and(|s| s > 1);
    let meta = crate::spill::SpillMeta {
        format_version: crate::spill::FORMAT_VERSION,
        pid: std::process::id() as i64,
        rank: if multi { rank } else { None },
        size: if multi { size } else { None },
        target: config.file_path.clone(),
        verbosity: config.verbosity,
        layout: config.layout.name().to_string(),
        metadata: crate::metadata::run_metadata(config, facts, size.unwrap_or(1), 1),
        full_metadata: config.metadata_detail == crate::config::MetadataDetail::Full,
        info: info.clone(),
        clock: clock.kind.as_str().into(),
        clock_note: clock.note.clone(),
        boot_id: crate::spill::boot_id(),
        started: facts.timestamp.clone(),
    };
    if let Err(e) = crate::spill::start(&meta) {
        warn::once("spill-start", &format!("flight recorder off: {e}; recording in memory"));
    }
}

/// After the write: a written profile makes the spill data redundant; otherwise keep it.
fn end_flight_recorder(written: bool) {
    if let (false, Some(dir)) = (written, crate::spill::run_dir()) {
        warn::always(&format!("the recorded calls are kept in {}; `sptool recover` turns them into the profile", dir.display()));
    }
    crate::spill::finish(written);
}

/// Called by the hook on MPI_COMM_SELF from inside MPI_Finalize: the program finalized MPI
/// without (or before) calling sp_finalize, so gather now while MPI still works.
pub fn finalize_inside_mpi_finalize() {
    if is_running(STATE.load(Ordering::Acquire)) {
        if let Err(e) = finalize() {
            warn::always(&format!("finalize inside MPI_Finalize failed: {e}"));
        }
    }
}

/// Stop every thread's recording and merge what they recorded (the local part of finalize).
/// `tell_open`: warn about calls still open (after a signal they are expected, and counted).
fn take_local_profile(info: RankInfo, clock_choice: &clock::ClockChoice, tell_open: bool) -> RankProfile {
    take_local_profile_with(info, clock_choice, tell_open, None)
}

/// What `take_local_profile_with` hands over before the calls are attached: the profile
/// without calls (and first without its call paths), the threads' records holding the calls,
/// the timebase.
type Early<'a> = &'a mut dyn FnMut(&RankProfile, &[ThreadRecord], &clock::Timebase);

/// `take_local_profile`; `early` gets the profile twice (the write after a signal): as soon as
/// everything but its call paths (built from the calls, the part that grows with them) is
/// there, and again once the call paths are built, before the calls are attached.
fn take_local_profile_with(mut info: RankInfo, clock_choice: &clock::ClockChoice, tell_open: bool, mut early: Option<Early<'_>>) -> RankProfile {
    // Before the threads' data is taken: the sampling handler reads their open calls.
    crate::sampling::stop_for_finalize();
    crate::mpi_calls::stop();
    crate::functions::stop();
    crate::openmp::stop();
    STATE.store(FINALIZED, Ordering::SeqCst);
    STOPPED_NS.store(clock::monotonic_ns(), Ordering::Release);
    quiesce::barrier();
    let deadline = Instant::now() + Duration::from_secs(2);
    let buffers: Vec<Arc<ThreadBuffer>> = THREADS.lock().clone();
    let mut records = Vec::with_capacity(buffers.len());
    let mut busy = 0;
    for tb in &buffers {
        if tb.seq.wait_idle(deadline) {
            // Read once the thread is idle: after every start it recorded (a thread that began
            // a barrier as another called exit() had its start after a time read before).
            let run_end = clock::now();
            // SAFETY: the owner is outside any call and will see FINALIZED on its next entry.
            let mut data = std::mem::take(unsafe { tb.data() });
            // A worker's part of an OpenMP parallel region that ended, not reported yet (and
            // what the run left open inside a parallel region, at the run's end).
            crate::openmp::close_ended(&mut data, run_end);
            records.push(ThreadRecord { index: tb.index, os_tid: tb.os_tid, data });
        } else {
            busy += 1;
        }
    }
    if busy > 0 {
        warn::always(&format!("{busy} thread(s) were still inside a start/stop call at finalize; their calls are not in the file"));
    }
    let (mut likwid, finished) = {
        let p = COUNTERS.swap(std::ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: set by Box::into_raw in setup; no thread is inside a call any more.
        if p.is_null() { (crate::model::LikwidRun::default(), counters::Finished::default()) } else { unsafe { Box::from_raw(p) }.finish() }
    };
    // Regions keyed by address (OpenMP constructs, instrumented functions) get their names;
    // LIKWID knew them by their provisional ones.
    let late = crate::late::name_all(&REGISTRY);
    for r in likwid.regions.iter_mut() {
        if let Some(name) = late.renamed.get(&r.tag) {
            r.tag = name.clone();
        }
    }
    let names = REGISTRY.names();
    let taken: Vec<(u32, counters::ThreadCounters)> = records.iter_mut().map(|r| (r.index, std::mem::take(&mut r.data.counters))).collect();
    let mpi_taken: Vec<(u32, i64, Option<Box<crate::mpi_stats::ThreadMpi>>)> = records.iter_mut().map(|r| (r.index, r.os_tid, r.data.mpi.take())).collect();
    // Every recorded tick precedes this: the last anchor, and the conversion of the run.
    let timebase = clock::end_run();
    if crate::spill::run_dir().is_some() {
        // Every chunk gets its fill count and leaves its writable mapping; the calls are read
        // back through one read-only mapping of the spill file, released chunk by chunk.
        records.iter_mut().flat_map(|r| r.data.logs_mut().iter_mut()).for_each(|l| l.seal());
        crate::spill::save_anchors(timebase.anchors());
        crate::spill::open_reader();
    }
    let wall_ns = clock::monotonic_ns().saturating_sub(SETUP_NS.load(Ordering::Acquire)).max(0);
    let (mut regions, kept) = crate::profile::statistics(&names, &mut records, &timebase);
    let locations = REGISTRY.locations_by_name();
    let throttled = crate::functions::throttled(&names);
    for r in regions.iter_mut() {
        r.source = locations.get(&r.name).cloned();
        r.throttled = throttled.contains(&r.name);
    }
    crate::openmp::at_finalize();
    let clock_report = timebase.report();
    if clock_report.status != "ok" {
        warn::once("clock:unreliable", &format!("the TSC clock misbehaved during the run; times in the file may be off by more than the recorded bound ({})", clock_report.status));
    }
    info.extra.extend(crate::metadata::clock_attrs(&clock_report, clock_choice.note.as_deref()));
    info.extra.extend(crate::run_values::attributes(&names));
    // The user's own metadata, this rank's values (they may differ between ranks).
    info.extra.extend(crate::metadata::user_attrs());
    // The file's thread ids are positions among the threads that recorded (merge's order);
    // matched by thread index (a Linux thread id can be reused by a later thread).
    let threads = taken
        .into_iter()
        .map(|(index, c)| {
            let id = kept.iter().position(|k| k.0 == index).map_or(-1, |p| p as i64);
            counters::ThreadTake { thread_id: id, counters: c }
        })
        .collect();
    let counters = counters::collect(&names, &finished, threads);
    // The instrumented functions open at finalize are its callers: counted, not a missing stop.
    let functions: std::collections::HashSet<&str> = late.functions.iter().filter_map(|&id| names.get(id as usize)).map(String::as_str).collect();
    for r in regions.iter().filter(|r| tell_open && r.open_calls > 0 && !functions.contains(r.name.as_str())) {
        warn::always(&format!("region '{}': {} call(s) still open at finalize (not recorded; counted as open_calls)", r.name, r.open_calls));
    }
    info.thread_os_ids = kept.iter().map(|t| t.1).collect();
    // A thread that made MPI calls but recorded no region gets the next id.
    let mut mpi_threads = Vec::new();
    for (index, os_tid, m) in mpi_taken {
        let id = match kept.iter().position(|k| k.0 == index) {
            Some(p) => p as i64,
            None if m.is_some() => {
                info.thread_os_ids.push(os_tid);
                info.thread_os_ids.len() as i64 - 1
            }
            None => continue,
        };
        mpi_threads.push((id, m));
    }
    let mpi = crate::mpi_calls::collect(mpi_threads, &timebase);
    let samples = crate::sampling::collect(&names, &info.thread_os_ids);
    let mut profile = RankProfile { info, regions, likwid, counters, mpi, samples, call_paths: None };
    if let Some(f) = early.as_mut() {
        f(&profile, &records, &timebase);
    }
    let mut call_paths = crate::callpath::collect(&names, &records, &timebase, wall_ns);
    call_paths.renumber_threads(|index| kept.iter().position(|k| k.0 as i64 == index).map(|p| p as i64));
    profile.call_paths = Some(call_paths);
    if let Some(f) = early {
        f(&profile, &records, &timebase);
    }
    crate::profile::attach_calls(&names, &mut profile.regions, records, &timebase);
    profile
}

/// A program that set up profiling but never finalized still gets its file.
extern "C" fn finalize_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if !is_setup_process() {
            return;
        }
        // A write after a termination signal is under way: it ends the process when done.
        if crate::signals::writing_after_signal() {
            crate::signals::wait_for_signal_write();
            return;
        }
        if !is_running(STATE.load(Ordering::Acquire)) {
            return;
        }
        // exit() from a signal handler the host installed after sp_setup: the interrupted
        // code may hold a lock the write needs (the allocator's, ours), so the write runs on
        // the signal watcher, and this thread waits for it, bounded.
        if crate::signals::exiting_from_host_handler() && crate::signals::write_at_exit_on_watcher() {
            return;
        }
        write_at_exit();
    });
}

/// Runs when the library is unloaded (`dlclose`), before the handlers registered with `atexit`
/// (which `dlclose` runs too), and at process exit after them. A run still going is written
/// here, and nothing may point into the library once it is gone: the signal handlers of the
/// flight recorder are put back to the host's.
extern "C" fn on_unload() {
    let _ = std::panic::catch_unwind(|| {
        // A write after a termination signal is under way: let it end (bounded) first.
        if crate::signals::writing_after_signal() {
            crate::signals::wait_for_signal_write();
        }
        finalize_unfinished("the library is being unloaded (dlclose) before sp_finalize: writing the profile now");
        crate::signals::restore();
    });
}

// The library's destructor: `.fini_array` entries run when the object is unloaded or the
// process exits (in reverse order, so before the C runtime's entry that runs the `atexit`
// handlers of a shared object inside `dlclose`).
#[used]
#[unsafe(link_section = ".fini_array")]
static ON_UNLOAD: extern "C" fn() = on_unload;

/// The MPI library now holds a callback into this library until MPI_Finalize, which cannot be
/// taken back: keep the library mapped (`RTLD_NODELETE`), so that a `dlclose` before that
/// leaves no dangling callback. The run is then written inside MPI_Finalize or at exit, as
/// without the `dlclose`.
fn stay_loaded() {
    // SAFETY: dladdr on an address of our code; dlopen of the object it names, which is loaded
    // already (RTLD_NOLOAD: never loads anything), to mark it not to be unloaded.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(stay_loaded as *const std::ffi::c_void, &mut info) != 0 && !info.dli_fname.is_null() {
            libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD | libc::RTLD_NODELETE);
        }
    }
}

/// Write a run that was never finalized, on the calling thread alone: at exit or inside
/// `dlclose`, where the dynamic loader holds its lock and a thread started now could never
/// end. No collective at exit: a rank that exits on its own (an error path calling exit())
/// would wait forever for ranks that never join.
fn finalize_unfinished(why: &str) {
    if is_running(STATE.load(Ordering::Acquire)) && SETUP_PID.load(Ordering::Acquire) == std::process::id() {
        // Set up by the OpenMP tool or an instrumented function, with no sp_setup: the end of
        // the run is where such a profile is written, nothing to warn about.
        let origin = IMPLICIT_ORIGIN.load(Ordering::Acquire);
        let expected = ImplicitOrigin::stored_not_mpi(origin);
        if !expected {
            warn::always(why);
        }
        crate::model::forbid_helper_threads();
        if let Err(e) = finalize_as(route::Gather::LocalOnly) {
            warn::always(&format!("writing the profile failed: {e}"));
        }
    }
}

/// The write at exit (on the exiting thread, or on the signal watcher).
fn write_at_exit() {
    finalize_unfinished("sp_finalize was not called: writing the profile at exit");
}
