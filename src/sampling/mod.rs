//! Sampling: which source lines inside each region take the time, on every recording thread.
//!
//! Each sampled thread has its own CPU-time clock: a software `task-clock` perf event
//! (`perf.rs`) where `perf_event_open` is allowed, else a POSIX timer on the thread's CPU-time
//! clock (`timer.rs`). Either signals the thread itself every period of its CPU time; the
//! handler (`signal.rs`, on the interrupted thread) reads the interrupted address (from the
//! perf ring buffer, or the signal's context) and the thread's innermost open region (one
//! load of the recorder's open-call stack: the start/stop hot path does nothing more than
//! without sampling) and counts the pair in the thread's table (`thread.rs`).
//!
//! Threads join when they first record a region (and the thread that starts sampling);
//! threads that start later are armed as they join; a thread that ends disarms its own source
//! (a TLS destructor), so no event or timer outlives its thread. `sp_stop_sampling` disarms
//! every thread and keeps what was counted; finalize closes every thread's sampler before it
//! takes the threads' data, then turns the tables into a `SampleProfile`: the samples per
//! thread, region and address, the modules, and the same samples mapped to source lines
//! (`resolve.rs`, through the shared symbolizer).

mod perf;
mod resolve;
mod signal;
mod thread;
mod timer;

use crate::model::samples::{SampleModule, SampleProfile, SampleRow};
use crate::symbols::{Module, find_module, loaded_modules};
use crate::warn;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use thread::{Held, OUTSIDE, Source, ThreadSampler};

/// The highest rate accepted, per second of a thread's CPU time. A sample costs a signal and
/// a few microseconds; at this rate that is a few percent of the CPU.
pub const MAX_HZ: u32 = 10_000;

/// Environment variables (documented in docs/sampling.md).
pub mod env {
    pub const HZ: &str = "SCOPE_PROFILER_SAMPLE_HZ";
    pub const SOURCE: &str = "SCOPE_PROFILER_SAMPLE_SOURCE";
    pub const SIGNAL: &str = "SCOPE_PROFILER_SAMPLE_SIGNAL";
}

/// Which clock drives the samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SourceChoice {
    /// A perf event where the kernel allows it, else timers.
    #[default]
    Auto,
    Perf,
    Timer,
}

/// The sampling settings of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settings {
    /// Start at setup with this rate (`SCOPE_PROFILER_SAMPLE_HZ`); None: off until
    /// `sp_start_sampling`.
    pub hz: Option<u32>,
    pub source: SourceChoice,
    /// The signal to use; None: the first free real-time signal from SIGRTMIN+4.
    pub signal: Option<i32>,
}

fn parse_signal(v: &str) -> Option<i32> {
    let v = v.trim().to_ascii_uppercase();
    let v = v.strip_prefix("SIG").unwrap_or(&v);
    if let Some(k) = v.strip_prefix("RTMIN") {
        let k = k.trim();
        let k: i32 = if k.is_empty() { 0 } else { k.strip_prefix('+')?.trim().parse().ok()? };
        let s = libc::SIGRTMIN() + k;
        return (k >= 0 && s <= libc::SIGRTMAX()).then_some(s);
    }
    v.parse().ok()
}

impl Settings {
    /// Read the settings from an environment lookup; bad values warn once and are ignored.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Settings {
        let hz = env(env::HZ).and_then(|v| {
            let t = v.trim();
            if t.is_empty() || t == "0" || t.eq_ignore_ascii_case("off") {
                return None;
            }
            match t.parse::<u32>() {
                Ok(n) if (1..=MAX_HZ).contains(&n) => Some(n),
                _ => {
                    warn::once("env:sample_hz", &format!("ignoring {}={v:?}: expected samples per second of CPU time, 1 to {MAX_HZ}; sampling stays off", env::HZ));
                    None
                }
            }
        });
        let source = match env(env::SOURCE).map(|v| v.trim().to_ascii_lowercase()) {
            None => SourceChoice::Auto,
            Some(v) => match v.as_str() {
                "" | "auto" => SourceChoice::Auto,
                "perf" => SourceChoice::Perf,
                "timer" => SourceChoice::Timer,
                _ => {
                    warn::once("env:sample_source", &format!("ignoring {}={v:?}: expected auto, perf or timer; using auto", env::SOURCE));
                    SourceChoice::Auto
                }
            },
        };
        let signal = env(env::SIGNAL).filter(|v| !v.trim().is_empty()).and_then(|v| {
            let s = parse_signal(&v);
            if s.is_none() {
                warn::once("env:sample_signal", &format!("ignoring {}={v:?}: expected a signal number or RTMIN+k; using the first free real-time signal", env::SIGNAL));
            }
            s
        });
        Settings { hz, source, signal }
    }
}

/// What is left of each thread once finalize has closed it.
struct Taken {
    tid: i32,
    table: Vec<(u32, u64, u64, u64)>,
    taken: u64,
    outside: u64,
    lost: u64,
    sampled: bool,
}

struct Control {
    /// Every thread that joined (never removed: a queued signal may still reach its sampler).
    threads: Vec<&'static ThreadSampler>,
    source: SourceChoice,
    signal_wanted: Option<i32>,
    signal: Option<libc::c_int>,
    /// The period while sampling runs.
    active: Option<u64>,
    hz: u32,
    /// Why perf events are not used (refused by the kernel), once known.
    perf_refused: Option<String>,
    used_perf: bool,
    used_timer: bool,
    started: bool,
    finalized: bool,
    /// Modules seen when sampling started (one that is unloaded later still resolves).
    modules: Vec<Module>,
    taken: Vec<Taken>,
    /// Samples dropped by threads that could not be closed in time.
    unreachable: u64,
}

static CONTROL: Mutex<Control> = Mutex::new(Control {
    threads: Vec::new(),
    source: SourceChoice::Auto,
    signal_wanted: None,
    signal: None,
    active: None,
    hz: 0,
    perf_refused: None,
    used_perf: false,
    used_timer: false,
    started: false,
    finalized: false,
    modules: Vec::new(),
    taken: Vec::new(),
    unreachable: 0,
});

/// The process whose threads joined (set with the first one). A forked child inherits the
/// parent's samplers (and its perf descriptors, but not their ring buffers, which are not
/// copied into a child): it must never touch them, nor take the control lock, which a parent
/// thread may have held at the fork.
static OWNER_PID: AtomicU32 = AtomicU32::new(0);

fn forked() -> bool {
    let owner = OWNER_PID.load(Ordering::Acquire);
    owner != 0 && owner != std::process::id()
}

fn control() -> parking_lot::MutexGuard<'static, Control> {
    CONTROL.lock()
}

/// How long the controller waits for a running handler (a few microseconds of work; a
/// stopped or traced thread may hold it longer).
const PATIENCE: Duration = Duration::from_millis(500);

fn gettid() -> i32 {
    // SAFETY: no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Errors of `perf_event_open` whose meaning is "perf events are not allowed or not there",
/// not "not for this thread" (too many open files; a ring buffer beyond the locked-memory
/// limit `perf_event_mlock_kb`, which many threads reach: `mmap` fails with EPERM).
fn perf_refused(e: i32, what: &str) -> bool {
    what == "perf_event_open" && matches!(e, libc::EACCES | libc::EPERM | libc::ENOSYS | libc::ENOENT | libc::EOPNOTSUPP | libc::EINVAL | libc::ENODEV)
}

struct ExitHook;

impl Drop for ExitHook {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(thread_exited);
    }
}

thread_local! {
    static EXIT_HOOK: ExitHook = const { ExitHook };
}

/// The calling thread's sampler, created (and its exit hook registered) on first use.
fn ensure_current(c: &mut Control) -> &'static ThreadSampler {
    let p = signal::current();
    if !p.is_null() {
        // SAFETY: set below from a leaked (never freed) sampler.
        return unsafe { &*p };
    }
    let t: &'static ThreadSampler = Box::leak(Box::new(ThreadSampler::new(gettid())));
    let _ = OWNER_PID.compare_exchange(0, std::process::id(), Ordering::AcqRel, Ordering::Acquire);
    c.threads.push(t);
    signal::set_current(t);
    // Registers the TLS destructor that disarms the thread's source when it ends.
    let _ = EXIT_HOOK.try_with(|_| {});
    t
}

impl Control {
    /// Give thread `t` a sample source at the current period. False if it has none.
    fn arm(&mut self, t: &'static ThreadSampler) -> bool {
        let (Some(period), Some(sig)) = (self.active, self.signal) else { return false };
        if t.exited.load(Ordering::Acquire) {
            return false;
        }
        let Some(mut held) = t.hold(PATIENCE) else {
            warn::once("sample-busy", "a thread's sampler stayed busy (is the thread stopped?): it is not sampled");
            return false;
        };
        let same = match held.source() {
            Source::Perf(p) => p.period_ns == period,
            Source::Timer(s) => s.period_ns == period,
            Source::None => false,
        };
        if same {
            return true;
        }
        disarm(&mut held, t);
        if self.source != SourceChoice::Timer && self.perf_refused.is_none() {
            match perf::PerfSource::open(t.tid, period, sig) {
                Ok(p) => {
                    *held.source() = Source::Perf(p);
                    self.used_perf = true;
                    self.note_armed(t);
                    return true;
                }
                Err((e, what)) => {
                    let error = std::io::Error::from_raw_os_error(e);
                    if self.source == SourceChoice::Perf {
                        warn::once("sample-perf", &format!("a thread is not sampled: its perf event failed ({what}: {error}) and {}=perf asks for nothing else", env::SOURCE));
                        return false;
                    }
                    if perf_refused(e, what) {
                        let why = format!("{what}: {error}; kernel.perf_event_paranoid = {}", paranoid());
                        warn::once("sample-perf", &format!("sampling with a timer on each thread's CPU-time clock: perf events are refused here ({why})"));
                        self.perf_refused = Some(why);
                    } else {
                        // This thread only (too many open files, ...): a timer instead.
                        warn::once("sample-perf-thread", &format!("a thread is sampled with a timer: its perf event failed ({what}: {error})"));
                    }
                }
            }
        }
        match timer::TimerSource::create(t.tid, period, sig) {
            Ok(s) => {
                *held.source() = Source::Timer(s);
                self.used_timer = true;
                self.note_armed(t);
                true
            }
            Err((e, what)) => {
                warn::once("sample-timer", &format!("a thread cannot be sampled: {what}: {}", std::io::Error::from_raw_os_error(e)));
                false
            }
        }
    }

    fn note_armed(&mut self, t: &'static ThreadSampler) {
        t.armed_once.store(true, Ordering::Relaxed);
    }

    fn disarm_all(&mut self) {
        for &t in &self.threads {
            if let Some(mut held) = t.hold(PATIENCE) {
                disarm(&mut held, t);
            }
        }
    }
}

fn paranoid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").map(|s| s.trim().to_string()).unwrap_or_else(|_| "?".into())
}

/// Remove the thread's source (the samples still in a perf ring can no longer be attributed
/// to a region: counted lost).
fn disarm(held: &mut Held<'_>, t: &ThreadSampler) {
    match std::mem::replace(held.source(), Source::None) {
        Source::None => {}
        Source::Perf(mut p) => {
            t.lost.fetch_add(p.pending(), Ordering::Relaxed);
            p.close();
        }
        Source::Timer(s) => s.delete(),
    }
}

/// The calling thread is ending: its source goes with it (no event or timer outlives it).
fn thread_exited() {
    let t = signal::current();
    if t.is_null() {
        return;
    }
    // SAFETY: a leaked sampler.
    let t: &ThreadSampler = unsafe { &*t };
    if forked() {
        // The sources a forked child inherited are the parent's (the same perf events):
        // stopping them here would stop the parent's sampling.
        return;
    }
    let c = control();
    let sig = c.signal;
    if let Some(s) = sig {
        signal::block(s, true);
    }
    t.exited.store(true, Ordering::Release);
    if let Some(mut held) = t.hold(PATIENCE) {
        disarm(&mut held, t);
    }
    drop(c);
    if let Some(s) = sig {
        signal::block(s, false);
    }
}

/// Set up at `sp_setup`: remember the settings, and start when `SCOPE_PROFILER_SAMPLE_HZ` says
/// so (a failure to start warns; profiling goes on without samples).
pub fn on_setup(settings: &Settings) {
    {
        let mut c = control();
        c.source = settings.source;
        c.signal_wanted = settings.signal;
    }
    if let Some(hz) = settings.hz {
        if let Err(e) = start(hz) {
            warn::once("sample-start", &format!("sampling ({}={hz}) is off: {e}", env::HZ));
        }
    }
}

/// The calling thread just recorded its first call: it is sampled from now on while sampling
/// runs, and until it ends.
pub fn thread_started() {
    if forked() {
        // Sampling does not carry over into a forked child.
        return;
    }
    let mut c = control();
    if c.finalized {
        return;
    }
    let t = ensure_current(&mut c);
    if c.active.is_some() {
        c.arm(t);
    }
}

/// Why sampling could not start.
#[derive(Debug)]
pub enum StartError {
    /// The rate is out of range.
    BadRate(String),
    /// This machine, kernel or process gives no way to sample.
    Unsupported(String),
    /// After finalize.
    Finalized,
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::BadRate(s) | StartError::Unsupported(s) => f.write_str(s),
            StartError::Finalized => f.write_str("profiling was finalized"),
        }
    }
}

/// Start sampling every recording thread (and the calling one) at `hz` samples per second of
/// each thread's CPU time. Sampling already running at another rate restarts at this one.
pub fn start(hz: u32) -> Result<(), StartError> {
    if !(1..=MAX_HZ).contains(&hz) {
        return Err(StartError::BadRate(format!("sp_start_sampling({hz}): the rate must be 1 to {MAX_HZ} samples per second")));
    }
    if forked() {
        return Err(StartError::Unsupported("sampling does not carry over into a forked child".into()));
    }
    let mut c = control();
    if c.finalized {
        return Err(StartError::Finalized);
    }
    let period = 1_000_000_000 / hz as u64;
    let sig = match c.signal {
        Some(s) if signal::is_ours(s) => s,
        Some(s) => {
            // Somebody replaced our handler: take a free signal again (or the one asked for).
            warn::once("sample-signal-replaced", &format!("the program replaced the sampling signal's handler ({}): sampling moves to another signal", signal::name(s)));
            signal::choose(c.signal_wanted.filter(|&w| w != s)).map_err(StartError::Unsupported)?
        }
        None => signal::choose(c.signal_wanted).map_err(StartError::Unsupported)?,
    };
    signal::install(sig).map_err(StartError::Unsupported)?;
    if c.signal != Some(sig) {
        c.disarm_all();
        c.signal = Some(sig);
        c.active = None;
    }
    if c.active == Some(period) {
        return Ok(());
    }
    if c.active.is_some() {
        c.disarm_all();
    }
    c.active = Some(period);
    let me = ensure_current(&mut c);
    if !c.arm(me) {
        c.active = None;
        let why = match (&c.perf_refused, c.source) {
            (_, SourceChoice::Perf) => format!("{}=perf and the perf event could not be opened (see above)", env::SOURCE),
            (Some(p), _) => format!("perf events are refused ({p}) and the per-thread timer failed (see above)"),
            (None, _) => "no sample source could be set up (see above)".into(),
        };
        return Err(StartError::Unsupported(why));
    }
    let others: Vec<&'static ThreadSampler> = c.threads.iter().copied().filter(|&t| !std::ptr::eq(t, me)).collect();
    for t in others {
        c.arm(t);
    }
    c.hz = hz;
    c.started = true;
    let mut now = loaded_modules();
    now.retain(|m| !c.modules.contains(m));
    c.modules.extend(now);
    Ok(())
}

/// Stop sampling every thread; what was counted is kept for finalize. A no-op when not sampling.
pub fn stop() {
    if forked() {
        return;
    }
    let mut c = control();
    if c.active.take().is_some() {
        c.disarm_all();
    }
}

/// Finalize begins: every thread's source is removed and its sampler closed for good (the
/// handler no longer reads the recorder, whose data finalize is about to take); the tables
/// are kept for `collect`.
pub fn stop_for_finalize() {
    if forked() {
        return;
    }
    let mut c = control();
    if c.finalized {
        return;
    }
    c.finalized = true;
    c.active = None;
    if !c.started {
        return;
    }
    let threads = c.threads.clone();
    for t in threads {
        match t.hold(Duration::from_secs(2)) {
            Some(mut held) => {
                disarm(&mut held, t);
                let table = held.take_table();
                let sampled = t.armed_once.load(Ordering::Relaxed);
                c.taken.push(Taken {
                    tid: t.tid,
                    table,
                    taken: t.taken.load(Ordering::Relaxed),
                    outside: t.outside.load(Ordering::Relaxed),
                    lost: t.lost.load(Ordering::Relaxed),
                    sampled,
                });
                held.close();
            }
            None if t.is_closed() => {}
            None => {
                c.unreachable += t.taken.load(Ordering::Relaxed);
                warn::always("a thread's sampler was busy at finalize (a stopped thread?): its samples are not in the file");
            }
        }
    }
}

/// The samples of this process, once `stop_for_finalize` ran: None if sampling never ran.
/// `names` are the regions by id; `thread_os_ids` the file's threads (their Linux ids, in
/// `thread_ids` order).
pub fn collect(names: &[String], thread_os_ids: &[i64]) -> Option<SampleProfile> {
    if forked() {
        return None;
    }
    let mut c = control();
    if !c.started {
        return None;
    }
    let taken = std::mem::take(&mut c.taken);
    let mut modules = std::mem::take(&mut c.modules);
    for m in loaded_modules() {
        if !modules.contains(&m) {
            // Loaded now: searched first (a module unloaded since may have left its range).
            modules.insert(0, m);
        }
    }
    let mut p = SampleProfile {
        hz: c.hz as i64,
        mechanism: match (c.used_perf, c.used_timer) {
            (true, true) => "perf task-clock+timer",
            (true, false) => "perf task-clock",
            (false, true) => "timer",
            (false, false) => "none",
        }
        .into(),
        signal: c.signal.unwrap_or(0) as i64,
        regions: names.to_vec(),
        lost: c.unreachable,
        ..Default::default()
    };
    drop(c);
    let mut used: Vec<Option<i64>> = vec![None; modules.len()];
    for t in &taken {
        p.ticks += t.taken;
        p.outside += t.outside;
        p.lost += t.lost;
        p.threads += t.sampled as u64;
        let thread = thread_os_ids.iter().position(|&o| o == t.tid as i64).map_or(-1, |i| i as i64);
        for &(region, address, count, ns) in &t.table {
            let module = find_module(&modules, address).map_or(-1, |i| {
                *used[i].get_or_insert_with(|| {
                    p.modules.push(SampleModule { path: modules[i].path.clone(), base: modules[i].base });
                    p.modules.len() as i64 - 1
                })
            });
            let region = if region == OUTSIDE || region as usize >= names.len() { -1 } else { region as i64 };
            p.rows.push(SampleRow { thread, region, module, address, count, time_ns: ns });
        }
    }
    p.rows.sort_by_key(|r| (r.region, r.thread, r.module, r.address));
    p.lines = resolve::lines(&p);
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_from_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
        assert_eq!(Settings::from_env(env(&[])), Settings::default());
        let s = Settings::from_env(env(&[("SCOPE_PROFILER_SAMPLE_HZ", "200"), ("SCOPE_PROFILER_SAMPLE_SOURCE", "timer"), ("SCOPE_PROFILER_SAMPLE_SIGNAL", "RTMIN+7")]));
        assert_eq!(s, Settings { hz: Some(200), source: SourceChoice::Timer, signal: Some(libc::SIGRTMIN() + 7) });
        for bad in ["0", "off", "", "-5", "fast", "10001", "99999999999"] {
            assert_eq!(Settings::from_env(env(Box::leak(Box::new([("SCOPE_PROFILER_SAMPLE_HZ", bad)])))).hz, None, "{bad}");
        }
        assert_eq!(Settings::from_env(env(&[("SCOPE_PROFILER_SAMPLE_SIGNAL", "40")])).signal, Some(40));
        assert_eq!(Settings::from_env(env(&[("SCOPE_PROFILER_SAMPLE_SIGNAL", "SIGRTMIN")])).signal, Some(libc::SIGRTMIN()));
        assert_eq!(Settings::from_env(env(&[("SCOPE_PROFILER_SAMPLE_SIGNAL", "RTMIN+99")])).signal, None);
        assert_eq!(Settings::from_env(env(&[("SCOPE_PROFILER_SAMPLE_SOURCE", "gpu")])).source, SourceChoice::Auto);
    }
}
