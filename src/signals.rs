//! Termination signals: the profile is written, then the process ends as the signal would have
//! ended it without us. On by default, with or without the flight recorder; nothing on the
//! start/stop path.
//!
//! **Which signals.** `SCOPE_PROFILER_SIGNALS` unset: SIGTERM and SIGINT, and SIGHUP, SIGUSR1,
//! SIGUSR2 and SIGXCPU where the host leaves them at their default action (which ends the
//! process: batch systems send them as warnings, e.g. Slurm's `--signal=USR1@120`; a host that
//! handles one itself uses it for its own purpose and keeps it). A list (`TERM,INT,USR1`, with
//! `default` for the set above) handles exactly those, host handler or not; `none` handles
//! none. A signal the host ignores (SIG_IGN) is never touched: it stays ignored.
//!
//! **How.** Installed at the end of `sp_setup` (not in a constructor, so runtimes that install
//! theirs at program start or in `MPI_Init` come first, and we chain to them). The handler is
//! async-signal-safe: it notes the signal, its time (CLOCK_MONOTONIC), the thread and the
//! `siginfo_t` in static atomics, wakes the watcher thread with a futex and returns: it
//! allocates nothing, takes no lock, and the interrupted thread goes on (so it leaves any call
//! it was in, and any lock it held). The watcher, a thread created at setup with every signal
//! blocked and asleep in `futex(2)` until then, has the write (`Hooks::write`: no collective,
//! each MPI rank writes its own file, statistics first, then the calls: for a large profile a
//! raw dump of them at memory speed before the call paths and the layout) run on a second thread
//! also started at setup (`sp-signal-write`: no thread is started after a signal, which may
//! have interrupted the dynamic loader on another thread) and waits for it up to
//! `SCOPE_PROFILER_SIGNAL_TIMEOUT` (a second signal shortens that to one second). Then the
//! process ends as the signal would have: the host's actions are put back and the signal is
//! sent again, with its original `siginfo_t`, to the thread it first hit
//! (`rt_tgsigqueueinfo`), so a host handler (plain or SA_SIGINFO) runs there with its own
//! mask and flags and decides, and without one the default action ends the process with status
//! 128+N (and a core where the signal makes one).
//!
//! The watcher is created through libc's own `pthread_create` (found with `dlopen` of libc),
//! so wrappers that count the host's threads to pin them (likwid-pin) do not see it; it is
//! visible in `/proc/<pid>/task` and debuggers as `sp-signals` (and the writer as
//! `sp-signal-write`). Both end at `sp_finalize`, which
//! also puts the host's signal actions back; `SCOPE_PROFILER_SIGNALS=none` creates neither.
//!
//! **Other cases.** A signal during `sp_finalize` (or the write at exit) waits for that write
//! (no second one), then ends the process. A forked child inherits the handler but not the
//! watcher: there the handler runs the host's action alone. A handler the host installs after
//! `sp_setup` replaces ours: the host's handler decides; if it calls `exit()`, the write at
//! exit runs on the watcher while the exiting thread waits (bounded), since the handler may have
//! interrupted a thread that holds a lock the write needs.

use std::ffi::{c_int, c_void};
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// `SCOPE_PROFILER_SIGNALS`: `none`, `default`, or a comma list of signal names.
pub const ENV_SIGNALS: &str = "SCOPE_PROFILER_SIGNALS";
/// `SCOPE_PROFILER_SIGNAL_TIMEOUT`: seconds the write after a signal may take (default 20).
pub const ENV_TIMEOUT: &str = "SCOPE_PROFILER_SIGNAL_TIMEOUT";
const DEFAULT_TIMEOUT_S: f64 = 20.0;
/// What a second signal leaves the write.
const SECOND_SIGNAL_GRACE: Duration = Duration::from_secs(1);

const MAX_SIG: usize = 65;

/// The signals the names of `SCOPE_PROFILER_SIGNALS` stand for.
const NAMES: [(&str, c_int); 9] = [
    ("TERM", libc::SIGTERM),
    ("INT", libc::SIGINT),
    ("HUP", libc::SIGHUP),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("XCPU", libc::SIGXCPU),
    ("QUIT", libc::SIGQUIT),
    ("ALRM", libc::SIGALRM),
    ("VTALRM", libc::SIGVTALRM),
];

/// Handled whatever the host does with them (chained to its handler).
const ALWAYS: [c_int; 2] = [libc::SIGTERM, libc::SIGINT];
/// Handled by default only where the host leaves them at their default action.
const IF_DEFAULT: [c_int; 4] = [libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2, libc::SIGXCPU];

/// "SIGTERM" for 15, "signal 40" for others.
pub fn signal_name(sig: c_int) -> String {
    NAMES.iter().find(|(_, s)| *s == sig).map(|(n, _)| format!("SIG{n}")).unwrap_or_else(|| format!("signal {sig}"))
}

/// The signals to handle: each with whether it is handled even when the host has a handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan(pub Vec<(c_int, bool)>);

impl Plan {
    pub fn default_set() -> Plan {
        Plan(ALWAYS.iter().map(|&s| (s, true)).chain(IF_DEFAULT.iter().map(|&s| (s, false))).collect())
    }
}

/// Parse `SCOPE_PROFILER_SIGNALS`; `Err` names what was not understood.
pub fn parse(spec: &str) -> Result<Plan, String> {
    let spec = spec.trim();
    if spec.eq_ignore_ascii_case("none") || spec == "0" {
        return Ok(Plan(Vec::new()));
    }
    if spec.is_empty() {
        return Ok(Plan::default_set());
    }
    let mut out: Vec<(c_int, bool)> = Vec::new();
    for s in spec.split(',') {
        let s = s.trim().to_ascii_uppercase();
        if s == "DEFAULT" {
            for (sig, always) in Plan::default_set().0 {
                if !out.iter().any(|(o, _)| *o == sig) {
                    out.push((sig, always));
                }
            }
            continue;
        }
        let name = s.strip_prefix("SIG").unwrap_or(&s);
        let sig = NAMES.iter().find(|(n, _)| *n == name).map(|(_, sig)| *sig).ok_or_else(|| s.to_string())?;
        match out.iter_mut().find(|(o, _)| *o == sig) {
            Some(e) => e.1 = true,
            None => out.push((sig, true)),
        }
    }
    Ok(Plan(out))
}

/// The plan from the environment (warning once about a setting not understood).
pub fn plan_from_env() -> Plan {
    match std::env::var(ENV_SIGNALS) {
        Err(_) => Plan::default_set(),
        Ok(v) => parse(&v).unwrap_or_else(|bad| {
            let names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
            crate::warn::once(
                "env:signals",
                &format!("ignoring {ENV_SIGNALS}={v:?}: {bad} is not one of {}, default, none", names.join(", ")),
            );
            Plan::default_set()
        }),
    }
}

/// What the write after a signal is told.
#[derive(Debug, Clone)]
pub struct SignalNote {
    pub signo: c_int,
    pub name: String,
    /// CLOCK_MONOTONIC ns when the handler ran.
    pub time_ns: i64,
}

/// What the profiler does for us (it sits above this module: handed over at install).
#[derive(Clone, Copy)]
pub struct Hooks {
    /// Write the profile after a signal, on an ordinary thread. Returns the line to print
    /// (empty: nothing to say).
    pub write: fn(&SignalNote) -> String,
    /// The write at exit, run on the watcher when `exit()` is called from a signal handler.
    pub at_exit: fn(),
    /// The write after a signal did not finish in time: remove what it left half-written and
    /// say what stays (empty: the message prepared at setup), and whether anything was kept.
    pub cut_short: fn() -> (String, bool),
}

static HOOKS: OnceLock<Hooks> = OnceLock::new();
/// The message if the write does not finish in time (prepared at setup: paths known then).
static LATE: OnceLock<String> = OnceLock::new();
static SPILL_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

// Stages.
const OFF: u32 = 0;
const ARMED: u32 = 1;
const WRITING: u32 = 2;
const ENDING: u32 = 3;

static STAGE: AtomicU32 = AtomicU32::new(OFF);
/// The process that installed the handlers (a forked child inherits them, not the watcher).
static PID: AtomicI32 = AtomicI32::new(0);
/// Signals we installed our handler for (`bit`).
static HANDLED: AtomicU64 = AtomicU64::new(0);
/// The first signal: number, time, thread; further ones while writing are counted.
static SIGNO: AtomicI32 = AtomicI32::new(0);
static SIG_TIME: AtomicI64 = AtomicI64::new(0);
static SIG_TID: AtomicI32 = AtomicI32::new(0);
static SECOND: AtomicU32 = AtomicU32::new(0);
/// The first signal's `siginfo_t`, written by the handler that won ARMED -> WRITING, read by
/// the watcher after the wake-up (which orders the two).
static mut INFO: std::mem::MaybeUninit<libc::siginfo_t> = std::mem::MaybeUninit::zeroed();
/// The host's action per signal, saved before ours was installed (written at install only).
static mut OLD: [Option<libc::sigaction>; MAX_SIG] = [None; MAX_SIG];

/// The watcher's futex word: commands as bits.
static WAKE: AtomicU32 = AtomicU32::new(0);
const CMD_SIGNAL: u32 = 1;
const CMD_QUIT: u32 = 2;
const CMD_EXIT_WRITE: u32 = 4;
/// Counts finished writes (signal or at-exit) for their waiters (a futex word too).
static DONE: AtomicU32 = AtomicU32::new(0);
static WATCHER_UP: AtomicU32 = AtomicU32::new(0);

fn futex_wait(word: &AtomicU32, val: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|d| libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as libc::c_long });
    let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: a futex wait on our own word; returns on a wake, a changed value, a timeout or EINTR.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, val, tsp, 0usize, 0u32) };
}

/// Async-signal-safe (one system call).
fn futex_wake(word: &AtomicU32) {
    // SAFETY: a futex wake on our own word.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX, 0usize, 0usize, 0u32) };
}

fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: async-signal-safe (vDSO or system call).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64
}

fn gettid() -> i32 {
    // SAFETY: no arguments.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Signal `sig` (1..=64) in a mask.
fn bit(sig: c_int) -> u64 {
    if (1..=64).contains(&sig) { 1u64 << (sig - 1) } else { 0 }
}

fn old_action(sig: c_int) -> Option<libc::sigaction> {
    // SAFETY: OLD is written at install only, before the handler for `sig` exists.
    if (sig as usize) < MAX_SIG { unsafe { (*std::ptr::addr_of!(OLD))[sig as usize] } } else { None }
}

fn is_handler(a: &libc::sigaction) -> bool {
    a.sa_sigaction != libc::SIG_DFL && a.sa_sigaction != libc::SIG_IGN
}

/// `SCOPE_PROFILER_SIGNAL_TIMEOUT`: a number of seconds (0 to a day), else the default, with a
/// warning (once, at setup) naming both.
fn timeout() -> Duration {
    let s = match std::env::var_os(ENV_TIMEOUT) {
        None => DEFAULT_TIMEOUT_S,
        Some(v) => {
            let text = v.to_string_lossy();
            match text.trim().parse::<f64>() {
                Ok(s) if s.is_finite() && (0.0..=86_400.0).contains(&s) => s,
                _ => {
                    crate::warn::once(
                        "env:signal-timeout",
                        &format!("ignoring {ENV_TIMEOUT}={text:?}: not a number of seconds (0 to 86400); using the default of {DEFAULT_TIMEOUT_S} s"),
                    );
                    DEFAULT_TIMEOUT_S
                }
            }
        }
    };
    Duration::from_secs_f64(s)
}

/// Install the handlers and start the watcher (end of `sp_setup`). `target` is the profile,
/// `spill_dir` the flight recorder's run directory if it is on (both for the message when the
/// write does not finish in time).
pub fn install(hooks: Hooks, target: &Path, spill_dir: Option<&Path>) {
    let plan = plan_from_env();
    // A wrong timeout is said now, not discovered at the signal.
    let _ = timeout();
    if plan.0.is_empty() || STAGE.load(Ordering::Acquire) != OFF || HOOKS.get().is_some() {
        return;
    }
    // Which of them to take: ignored ones never; optional ones only at their default action.
    let mut take = Vec::new();
    for &(sig, always) in &plan.0 {
        // SAFETY: querying a signal action.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 || old.sa_sigaction == libc::SIG_IGN {
            continue;
        }
        if old.sa_sigaction == on_signal as *const () as usize || (!always && old.sa_sigaction != libc::SIG_DFL) {
            continue;
        }
        take.push((sig, old));
    }
    if take.is_empty() {
        return;
    }
    let _ = HOOKS.set(hooks);
    let late = match spill_dir {
        Some(dir) => format!(
            "the flight recorder's data stays in {}: `sptool recover {}` writes the profile",
            dir.display(),
            target.display()
        ),
        None => format!("{} was not written (the flight recorder, SCOPE_PROFILER_SPILL=1, keeps the calls of a run cut short)", target.display()),
    };
    let _ = LATE.set(late);
    SPILL_ON.store(spill_dir.is_some(), Ordering::Release);
    if let Err(e) = start_watcher() {
        crate::warn::once("signals-watcher", &format!("cannot start the signal watcher thread ({e}): a termination signal ends the run without writing the profile"));
        return;
    }
    PID.store(std::process::id() as i32, Ordering::Release);
    STAGE.store(ARMED, Ordering::Release);
    for (sig, old) in take {
        // SAFETY: OLD[sig] is written before our handler for `sig` is installed.
        unsafe { (*std::ptr::addr_of_mut!(OLD))[sig as usize] = Some(old) };
        // SAFETY: installing a handler; its mask and restart behaviour are the host's.
        unsafe {
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_signal as *const () as usize;
            let keep = if is_handler(&old) { old.sa_flags & (libc::SA_RESTART | libc::SA_ONSTACK) } else { libc::SA_RESTART };
            new.sa_flags = libc::SA_SIGINFO | keep;
            new.sa_mask = if is_handler(&old) { old.sa_mask } else { std::mem::zeroed() };
            if !is_handler(&old) {
                libc::sigemptyset(&mut new.sa_mask);
            }
            if libc::sigaction(sig, &new, std::ptr::null_mut()) == 0 {
                HANDLED.fetch_or(bit(sig), Ordering::AcqRel);
            }
        }
    }
}

/// Put the host's actions back where ours is still installed.
fn restore_host_actions() {
    let handled = HANDLED.swap(0, Ordering::AcqRel);
    for sig in 1..MAX_SIG as c_int {
        if handled & bit(sig) == 0 {
            continue;
        }
        let Some(old) = old_action(sig) else { continue };
        // SAFETY: querying and setting signal actions.
        unsafe {
            let mut cur: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut cur) == 0 && cur.sa_sigaction == on_signal as *const () as usize {
                libc::sigaction(sig, &old, std::ptr::null_mut());
            }
        }
    }
}

/// Finalize wrote the profile (sp_finalize, MPI_Finalize or at exit): the host's actions go
/// back and the watcher ends. During a write after a signal this does nothing: the watcher
/// ends the process when the write is done.
pub fn finished() {
    if STAGE.compare_exchange(ARMED, OFF, Ordering::AcqRel, Ordering::Acquire).is_ok() {
        restore_host_actions();
        WAKE.fetch_or(CMD_QUIT, Ordering::AcqRel);
        futex_wake(&WAKE);
        stop_writer();
        join_helpers();
    }
}

/// The library is being unloaded (`dlclose`): nothing may point into it afterwards. The
/// host's actions go back and the watcher is told to end (as [`finished`], whatever the stage).
pub fn restore() {
    STAGE.store(OFF, Ordering::Release);
    restore_host_actions();
    WAKE.fetch_or(CMD_QUIT, Ordering::AcqRel);
    futex_wake(&WAKE);
    stop_writer();
    join_helpers();
}

/// Is a write after a signal under way (the process ends when it is done)?
pub fn writing_after_signal() -> bool {
    STAGE.load(Ordering::Acquire) == WRITING && PID.load(Ordering::Acquire) == std::process::id() as i32
}

/// Until when (CLOCK_MONOTONIC ns) a program thread whose call was refused waits for the write
/// after a signal (`hold_if_ending`); 0: it does not wait. Set by the watcher when the signal's
/// action ends the process.
static HOLD_UNTIL_NS: AtomicI64 = AtomicI64::new(0);
/// For a program thread whose call the library refused because recording stopped, outside
/// every lock and window of the library: while the profile is written after a signal whose
/// action ends the process (the host left it at its default), wait until the process ends or
/// the write's deadline passes. Without the library the process would have ended at the
/// signal, so nothing the thread would do meanwhile would have happened; the write gets the
/// CPUs the thread would take from it under a launcher's deadline. With a handler of the
/// host's for the signal, the thread goes on (the handler may need it). errno is kept.
#[inline(always)]
pub fn hold_if_ending() {
    if HOLD_UNTIL_NS.load(Ordering::Relaxed) != 0 {
        hold();
    }
}

/// The watcher's and the writer's thread ids: never held (the write may call into the
/// library's own entry points).
static OWN_TIDS: [AtomicI32; 2] = [AtomicI32::new(0), AtomicI32::new(0)];

#[cold]
#[inline(never)]
fn hold() {
    if !writing_after_signal() {
        return;
    }
    let tid = gettid();
    if OWN_TIDS.iter().any(|t| t.load(Ordering::Acquire) == tid) {
        return;
    }
    // SAFETY: this thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    loop {
        let seen = DONE.load(Ordering::Acquire);
        let until = HOLD_UNTIL_NS.load(Ordering::Acquire);
        let now = monotonic_ns();
        if until == 0 || now >= until || !writing_after_signal() {
            break;
        }
        futex_wait(&DONE, seen, Some(Duration::from_nanos((until - now).min(100_000_000) as u64)));
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Wait (bounded by the timeout) until the write after a signal is done: an exit meanwhile
/// must not end the process under it.
pub fn wait_for_signal_write() {
    let deadline = Instant::now() + timeout();
    while writing_after_signal() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Is the calling thread (probably) inside a handler of one of our signals that the host
/// installed after `sp_setup`? During a handler its signal is blocked (unless SA_NODEFER).
pub fn exiting_from_host_handler() -> bool {
    let handled_once = HOOKS.get().is_some() && PID.load(Ordering::Acquire) == std::process::id() as i32;
    if !handled_once || WATCHER_UP.load(Ordering::Acquire) == 0 {
        return false;
    }
    // SAFETY: querying this thread's mask and the signal actions.
    unsafe {
        let mut mask: libc::sigset_t = std::mem::zeroed();
        if libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask) != 0 {
            return false;
        }
        (1..MAX_SIG as c_int).filter(|&s| old_action(s).is_some()).any(|sig| {
            let mut cur: libc::sigaction = std::mem::zeroed();
            libc::sigismember(&mask, sig) == 1
                && libc::sigaction(sig, std::ptr::null(), &mut cur) == 0
                && is_handler(&cur)
                && cur.sa_sigaction != on_signal as *const () as usize
        })
    }
}

/// Run the write at exit on the watcher and wait for it, up to the timeout. False if the
/// watcher is not there (the caller writes itself).
pub fn write_at_exit_on_watcher() -> bool {
    if WATCHER_UP.load(Ordering::Acquire) == 0 || STAGE.load(Ordering::Acquire) != ARMED {
        return false;
    }
    let seen = DONE.load(Ordering::Acquire);
    WAKE.fetch_or(CMD_EXIT_WRITE, Ordering::AcqRel);
    futex_wake(&WAKE);
    let deadline = Instant::now() + timeout();
    while DONE.load(Ordering::Acquire) == seen {
        let now = Instant::now();
        if now >= deadline {
            crate::warn::always("the write at exit did not finish in time: exiting without it");
            break;
        }
        futex_wait(&DONE, seen, Some(deadline - now));
    }
    true
}

// ---------------------------------------------------------------------------------------
// The handler: async-signal-safe only.

extern "C" fn on_signal(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: errno of this thread; getpid and the rest are async-signal-safe.
    unsafe {
        let errno = *libc::__errno_location();
        let ours = libc::getpid() == PID.load(Ordering::Acquire);
        let mut stage = STAGE.load(Ordering::Acquire);
        if ours && stage == ARMED {
            if STAGE.compare_exchange(ARMED, WRITING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                SIGNO.store(sig, Ordering::Relaxed);
                SIG_TIME.store(monotonic_ns(), Ordering::Relaxed);
                SIG_TID.store(gettid(), Ordering::Relaxed);
                if !info.is_null() {
                    std::ptr::copy_nonoverlapping(info, (*std::ptr::addr_of_mut!(INFO)).as_mut_ptr(), 1);
                }
                WAKE.fetch_or(CMD_SIGNAL, Ordering::Release);
                futex_wake(&WAKE);
                *libc::__errno_location() = errno;
                return;
            }
            stage = STAGE.load(Ordering::Acquire);
        }
        if ours && stage == WRITING {
            SECOND.fetch_add(1, Ordering::AcqRel);
            WAKE.fetch_or(CMD_SIGNAL, Ordering::Release);
            futex_wake(&WAKE);
        } else {
            // Not ours to handle (a forked child; after the write): what the host would do.
            chain(sig, info, ctx);
        }
        *libc::__errno_location() = errno;
    }
}

/// End the process by `sig` at its default action, unblocked on this thread (signal-safe).
unsafe fn die_by_default(sig: c_int) {
    // SAFETY: signal-safe calls on values of our own.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &dfl, std::ptr::null_mut());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
}

/// The host's action for `sig`, as the kernel would have run it.
unsafe fn chain(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: signal-safe calls only.
    unsafe {
        match old_action(sig) {
            Some(old) if old.sa_sigaction == libc::SIG_IGN => {}
            Some(old) if is_handler(&old) => {
                if old.sa_flags & libc::SA_RESETHAND != 0 {
                    let mut dfl: libc::sigaction = std::mem::zeroed();
                    dfl.sa_sigaction = libc::SIG_DFL;
                    libc::sigaction(sig, &dfl, std::ptr::null_mut());
                }
                let mut prev: libc::sigset_t = std::mem::zeroed();
                libc::pthread_sigmask(libc::SIG_BLOCK, &old.sa_mask, &mut prev);
                if old.sa_flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) = std::mem::transmute(old.sa_sigaction);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(c_int) = std::mem::transmute(old.sa_sigaction);
                    f(sig);
                }
                libc::pthread_sigmask(libc::SIG_SETMASK, &prev, std::ptr::null_mut());
            }
            _ => {
                die_by_default(sig);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The watcher.

type PthreadCreate = unsafe extern "C" fn(*mut libc::pthread_t, *const libc::pthread_attr_t, extern "C" fn(*mut c_void) -> *mut c_void, *mut c_void) -> c_int;

/// libc's own pthread_create, not a wrapper preloaded in front of it.
fn libc_pthread_create() -> PthreadCreate {
    // SAFETY: dlopen of the already loaded libc (NOLOAD), dlsym of a known function.
    unsafe {
        for name in [c"libc.so.6", c"libpthread.so.0"] {
            let h = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            if h.is_null() {
                continue;
            }
            let f = libc::dlsym(h, c"pthread_create".as_ptr());
            libc::dlclose(h);
            if !f.is_null() {
                return std::mem::transmute::<*mut c_void, PthreadCreate>(f);
            }
        }
        std::mem::transmute::<*const (), PthreadCreate>(libc::pthread_create as *const ())
    }
}

/// The watcher's and the writer's pthread ids (0: none), joined when they are told to end
/// (`join_helpers`).
static HELPERS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// A joinable thread running `main` (its id in `HELPERS[slot]`), named `name`, with every
/// signal blocked, created through libc's own `pthread_create` (at setup only).
fn start_thread(main: extern "C" fn(*mut c_void) -> *mut c_void, name: &std::ffi::CStr, stack: usize, slot: usize) -> Result<(), String> {
    let create = libc_pthread_create();
    // SAFETY: creating a joinable thread with every signal blocked (it inherits this mask).
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut prev: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut prev);
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        libc::pthread_attr_init(&mut attr);
        if stack > 0 {
            libc::pthread_attr_setstacksize(&mut attr, stack);
        }
        let mut t: libc::pthread_t = 0;
        let rc = create(&mut t, &attr, main, std::ptr::null_mut());
        libc::pthread_attr_destroy(&mut attr);
        libc::pthread_sigmask(libc::SIG_SETMASK, &prev, std::ptr::null_mut());
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc).to_string());
        }
        libc::pthread_setname_np(t, name.as_ptr());
        HELPERS[slot].store(t as u64, Ordering::Release);
    }
    Ok(())
}

/// Wait (at most 2 s each) until the watcher and the writer, told to end, have ended: once the
/// library is unloaded (`dlclose`) no thread may still run its code, and a joined thread leaves
/// no stack behind. Safe inside `dlclose`: an ending thread takes no loader lock. A helper that
/// is the calling thread (the write at exit on the watcher) is detached instead; in a forked
/// child, which has no such threads, nothing is done.
fn join_helpers() {
    // SAFETY: joining or detaching threads this library created joinable, each once (the slot
    // is taken); a join is bounded by its deadline.
    unsafe {
        let me = libc::pthread_self();
        let ours = PID.load(Ordering::Acquire) == std::process::id() as i32;
        for slot in &HELPERS {
            let t = slot.swap(0, Ordering::AcqRel) as libc::pthread_t;
            if t == 0 || !ours {
                continue;
            }
            if libc::pthread_equal(t, me) != 0 {
                libc::pthread_detach(t);
                continue;
            }
            let mut until: libc::timespec = std::mem::zeroed();
            libc::clock_gettime(libc::CLOCK_REALTIME, &mut until);
            until.tv_sec += 2;
            if libc::pthread_timedjoin_np(t, std::ptr::null_mut(), &until) != 0 {
                libc::pthread_detach(t);
            }
        }
    }
}

fn start_watcher() -> Result<(), String> {
    start_thread(watcher_main, c"sp-signals", 0, 0)?;
    WATCHER_UP.store(1, Ordering::Release);
    // The write after a signal runs here, so that the watcher can end the process at the
    // deadline whatever the write waits for. Without it, the watcher writes (unbounded).
    WRITER_UP.store(1, Ordering::Release);
    if start_thread(writer_main, c"sp-signal-write", 8 << 20, 1).is_err() {
        WRITER_UP.store(0, Ordering::Release);
    }
    Ok(())
}

extern "C" fn watcher_main(_: *mut c_void) -> *mut c_void {
    OWN_TIDS[0].store(gettid(), Ordering::Release);
    let _ = std::panic::catch_unwind(watch);
    WATCHER_UP.store(0, Ordering::Release);
    std::ptr::null_mut()
}

fn watch() {
    loop {
        let cmd = WAKE.swap(0, Ordering::AcqRel);
        if cmd == 0 {
            futex_wait(&WAKE, 0, None);
            continue;
        }
        if cmd & CMD_EXIT_WRITE != 0 {
            if let Some(h) = HOOKS.get() {
                (h.at_exit)();
            }
            DONE.fetch_add(1, Ordering::AcqRel);
            futex_wake(&DONE);
        }
        if cmd & CMD_SIGNAL != 0 && STAGE.load(Ordering::Acquire) == WRITING {
            after_signal();
            return;
        }
        if cmd & CMD_QUIT != 0 || STAGE.load(Ordering::Acquire) == OFF {
            return;
        }
    }
}

/// The first signal arrived: write, wait for it (bounded), end the process as the signal would.
fn after_signal() {
    let sig = SIGNO.load(Ordering::Acquire);
    let note = SignalNote { signo: sig, name: signal_name(sig), time_ns: SIG_TIME.load(Ordering::Acquire) };
    let allowed = timeout();
    let mut deadline = Instant::now() + allowed;
    let seen = DONE.load(Ordering::Acquire);
    // The program's threads that call the library from now on wait for the write when the
    // process ends with it (`hold_if_ending`).
    if old_action(sig).is_some_and(|a| a.sa_sigaction == libc::SIG_DFL) {
        HOLD_UNTIL_NS.store(monotonic_ns().saturating_add(allowed.as_nanos().min(i64::MAX as u128) as i64), Ordering::Release);
    }
    WATCHER_WAITS.store(WRITER_UP.load(Ordering::Acquire) != 0, Ordering::Release);
    // On the writer started at setup, so that the deadline holds whatever the write waits for
    // (no thread is started now: see `model::helper_threads_allowed`); without it, here.
    if WRITER_UP.load(Ordering::Acquire) != 0 {
        WRITE_REQ.store(REQ_WRITE, Ordering::Release);
        futex_wake(&WRITE_REQ);
    } else {
        signal_write();
    }
    let mut second_seen = false;
    loop {
        if DONE.load(Ordering::Acquire) != seen {
            break;
        }
        if !second_seen && SECOND.load(Ordering::Acquire) > 0 {
            second_seen = true;
            deadline = deadline.min(Instant::now() + SECOND_SIGNAL_GRACE);
            if HOLD_UNTIL_NS.load(Ordering::Acquire) != 0 {
                HOLD_UNTIL_NS.fetch_min(monotonic_ns().saturating_add(SECOND_SIGNAL_GRACE.as_nanos() as i64).max(1), Ordering::AcqRel);
            }
        }
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        // A part of the write lent to this thread (`lend`): done, then back to watching.
        run_lent();
        // Woken by the write's end, by a second signal (WAKE), by a job lent, or at the deadline.
        futex_wait(&DONE, seen, Some((deadline - now).min(Duration::from_millis(50))));
    }
    WATCHER_WAITS.store(false, Ordering::Release);
    let said = SAID.lock().take();
    match said {
        Some(s) if !s.is_empty() => crate::warn::always(&s),
        Some(_) => {}
        None => {
            let why = if second_seen { "a second signal arrived" } else { "the time allowed (SCOPE_PROFILER_SIGNAL_TIMEOUT) passed" };
            let (cut, kept) = HOOKS.get().map(|h| (h.cut_short)()).unwrap_or_default();
            let late = LATE.get().map_or("", |s| s.as_str());
            // The flight recorder's data is always worth naming; without it, what was missing
            // only when nothing at all was kept.
            let what = if cut.is_empty() {
                late.to_string()
            } else if SPILL_ON.load(Ordering::Acquire) {
                format!("{cut}; {late}")
            } else if kept {
                cut
            } else {
                format!("{late}; {cut}")
            };
            crate::warn::always(&format!("{}: the profile was still being written when {why}; ending as the signal asks: {what}", note.name));
        }
    }
    end_as_signal(sig);
}

/// A job lent to the watcher (`lend`): the address of the lender's `&(dyn Fn() + Sync)`.
static LENT: std::sync::atomic::AtomicPtr<c_void> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
/// `LENT`'s state, a futex word: none, offered, taken by the watcher, done by it.
static LENT_STATE: AtomicU32 = AtomicU32::new(LENT_NONE);
const LENT_NONE: u32 = 0;
const LENT_OFFERED: u32 = 1;
const LENT_TAKEN: u32 = 2;
const LENT_DONE: u32 = 3;
/// Whether the watcher waits for the write after a signal (and so may take a job).
static WATCHER_WAITS: AtomicBool = AtomicBool::new(false);

/// Run `job` on the calling thread and, while the watcher waits for the write after a signal
/// (no thread may be started then), on the watcher too: a job that shares its work out (each
/// call takes parts until none is left) gets a second CPU. Returns when both calls have
/// returned. Elsewhere (no write after a signal under way, or called off the writer) `job`
/// runs here alone. The watcher watches the deadline again after its call, so a lent job's
/// parts must be short (a thread's call paths). Returns how many threads called `job` (1, 2).
pub fn lend(job: &(dyn Fn() + Sync)) -> usize {
    // SAFETY: pthread_self has no preconditions.
    let on_writer = HELPERS[1].load(Ordering::Acquire) == unsafe { libc::pthread_self() } as u64;
    let offered = on_writer && WATCHER_WAITS.load(Ordering::Acquire) && writing_after_signal() && LENT_STATE.load(Ordering::Acquire) == LENT_NONE && {
        // Only the writer lends: no other lender can be between this store and the exchange.
        LENT.store(&job as *const &(dyn Fn() + Sync) as *mut c_void, Ordering::Release);
        LENT_STATE.compare_exchange(LENT_NONE, LENT_OFFERED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    };
    if offered {
        // The watcher waits on DONE: woken, it sees the job.
        futex_wake(&DONE);
    }
    job();
    if !offered {
        return 1;
    }
    // Taken back if the watcher has not begun it; else wait until its call returned (the job
    // borrows from this frame).
    if LENT_STATE.compare_exchange(LENT_OFFERED, LENT_NONE, Ordering::AcqRel, Ordering::Acquire).is_err() {
        loop {
            let st = LENT_STATE.load(Ordering::Acquire);
            if st == LENT_DONE {
                break;
            }
            futex_wait(&LENT_STATE, st, Some(Duration::from_millis(10)));
        }
        LENT.store(std::ptr::null_mut(), Ordering::Release);
        LENT_STATE.store(LENT_NONE, Ordering::Release);
        return 2;
    }
    1
}

/// On the watcher: run the job lent, if one is offered (see `lend`).
fn run_lent() {
    if LENT_STATE.compare_exchange(LENT_OFFERED, LENT_TAKEN, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return;
    }
    let p = LENT.load(Ordering::Acquire) as *const &(dyn Fn() + Sync);
    if !p.is_null() {
        // SAFETY: `lend` stored the address of its `job` argument before offering it, and does
        // not return (so the job and what it borrows live) until this sets LENT_DONE.
        let job = unsafe { *p };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
    LENT_STATE.store(LENT_DONE, Ordering::Release);
    futex_wake(&LENT_STATE);
}

/// The write after the first signal (on the writer thread, or on the watcher without one).
fn signal_write() {
    let sig = SIGNO.load(Ordering::Acquire);
    let note = SignalNote { signo: sig, name: signal_name(sig), time_ns: SIG_TIME.load(Ordering::Acquire) };
    let write = HOOKS.get().map(|h| h.write);
    let said = std::panic::catch_unwind(|| write.map(|w| w(&note)).unwrap_or_default()).unwrap_or_else(|_| "internal error while writing the profile".into());
    *SAID.lock() = Some(said);
    DONE.fetch_add(1, Ordering::AcqRel);
    futex_wake(&DONE);
}

/// The line the write after a signal says when it is done.
static SAID: parking_lot::Mutex<Option<String>> = parking_lot::Mutex::new(None);
/// The writer's futex word.
static WRITE_REQ: AtomicU32 = AtomicU32::new(0);
const REQ_WRITE: u32 = 1;
const REQ_QUIT: u32 = 2;
static WRITER_UP: AtomicU32 = AtomicU32::new(0);

extern "C" fn writer_main(_: *mut c_void) -> *mut c_void {
    OWN_TIDS[1].store(gettid(), Ordering::Release);
    let _ = std::panic::catch_unwind(|| {
        loop {
            match WRITE_REQ.load(Ordering::Acquire) {
                0 => futex_wait(&WRITE_REQ, 0, None),
                REQ_WRITE => {
                    signal_write();
                    return;
                }
                _ => return,
            }
        }
    });
    WRITER_UP.store(0, Ordering::Release);
    std::ptr::null_mut()
}

fn stop_writer() {
    let _ = WRITE_REQ.compare_exchange(0, REQ_QUIT, Ordering::AcqRel, Ordering::Acquire);
    futex_wake(&WRITE_REQ);
}

/// End the process as `sig` would have without us: the host's actions back, the signal sent
/// again (with its siginfo) to the thread it first hit; with the default action, made sure.
fn end_as_signal(sig: c_int) {
    STAGE.store(ENDING, Ordering::Release);
    restore_host_actions();
    let pid = std::process::id() as i32;
    let tid = SIG_TID.load(Ordering::Acquire);
    // SAFETY: sending a signal to our own process with the siginfo it first came with.
    unsafe {
        let info = std::ptr::addr_of_mut!(INFO) as *mut libc::siginfo_t;
        // The kernel lets a thread re-send a kill()/tgkill()/kernel siginfo only to itself:
        // to another thread it goes as SI_QUEUE, keeping the sender's pid and uid.
        if (*info).si_code >= 0 || (*info).si_code == libc::SI_TKILL {
            (*info).si_code = libc::SI_QUEUE;
        }
        (*info).si_signo = sig;
        let sent = libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid, tid, sig, info) == 0
            || libc::syscall(libc::SYS_rt_sigqueueinfo, pid, sig, info) == 0
            || libc::kill(pid, sig) == 0;
        // The action now: the host's from before setup, or one it installed since.
        let mut cur: libc::sigaction = std::mem::zeroed();
        let host_handles = libc::sigaction(sig, std::ptr::null(), &mut cur) != 0 || is_handler(&cur) || cur.sa_sigaction == libc::SIG_IGN;
        if host_handles || !sent {
            return; // the host's handler decides what happens next
        }
        // The default action: the thread may have blocked the signal meanwhile; then here.
        std::thread::sleep(Duration::from_millis(500));
        die_by_default(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_signal_lists() {
        assert_eq!(parse("TERM,int, SIGHUP").unwrap().0, vec![(libc::SIGTERM, true), (libc::SIGINT, true), (libc::SIGHUP, true)]);
        assert!(parse("none").unwrap().0.is_empty());
        assert_eq!(parse("TERM,KILL").unwrap_err(), "KILL");
        assert_eq!(parse("").unwrap(), Plan::default_set());
        let d = parse("default,QUIT,USR1").unwrap().0;
        assert!(d.contains(&(libc::SIGQUIT, true)) && d.contains(&(libc::SIGUSR1, true)) && d.contains(&(libc::SIGTERM, true)));
        assert!(d.contains(&(libc::SIGUSR2, false)), "{d:?}");
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(40), "signal 40");
    }
}
