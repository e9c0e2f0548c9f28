//! The one clock every timestamp comes from, and the one place where it becomes time.
//!
//! The file's timestamps are `CLOCK_MONOTONIC` nanoseconds, the clock CPython's
//! `time.perf_counter_ns()` reads on Linux, so C, Fortran and Python regions of one process tree
//! share a timeline. The hot path does not read that clock, though: it reads **ticks** through
//! `now()` / `now_stop()`, which are either the time stamp counter (x86-64 `rdtsc`, where the
//! hardware and the kernel make it safe) or `CLOCK_MONOTONIC` nanoseconds themselves. Ticks
//! become nanoseconds only when the profile is collected (`profile::merge`), through the
//! `Timebase` that `end_run` builds:
//!
//! - **anchors**: pairs (TSC, `CLOCK_MONOTONIC`) each taken as a `clock_gettime` bracketed by two
//!   fenced TSC reads, the tightest of a few tries; at setup, at finalize, and in between
//!   whenever a stop finds its already-read tick count past the next due tick (one compare on a
//!   read-mostly static; the anchor itself runs on a cold path, a few hundred ns every
//!   `SCOPE_PROFILER_CLOCK_ANCHOR_MS`);
//! - **conversion** piecewise linear between consecutive anchors, each segment with its own
//!   slope, so a slewed `CLOCK_MONOTONIC` (NTP) is followed segment by segment;
//! - **checks**: the clocksource at finalize, each segment's rate against the run's mean
//!   (> 1000 ppm beyond measurement noise), ticks going backwards (between anchors, outside the
//!   anchored span, an end before its start). Any of them marks the profile (`clock_status` in
//!   the rank's attributes) and warns once: times are never wrong silently;
//! - **error bound**: the largest, over segments, of the anchors' half bracket width plus the
//!   most an unseen rate change inside the segment can bend the line (see `Timebase::fit`).
//!
//! In `monotonic` mode ticks are nanoseconds and the conversion is the identity (exact).
//! See docs/clock.md.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// The clock setting (`SCOPE_PROFILER_CLOCK`, `sp_options.clock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockMode {
    /// The TSC where it is safe (x86-64, invariant TSC, kernel clocksource `tsc`), else monotonic.
    Auto,
    /// The TSC even where the checks fail (with a warning); monotonic where there is none.
    Tsc,
    /// `clock_gettime(CLOCK_MONOTONIC)` on every read.
    Monotonic,
}

impl ClockMode {
    pub fn parse(value: &str) -> Option<ClockMode> {
        match value.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Some(ClockMode::Auto),
            "tsc" => Some(ClockMode::Tsc),
            "monotonic" => Some(ClockMode::Monotonic),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ClockMode::Auto => "auto",
            ClockMode::Tsc => "tsc",
            ClockMode::Monotonic => "monotonic",
        }
    }
}

/// The clock the hot path actually reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockKind {
    Tsc,
    Monotonic,
}

impl ClockKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ClockKind::Tsc => "tsc",
            ClockKind::Monotonic => "monotonic",
        }
    }
}

/// Default time between anchors.
pub const DEFAULT_ANCHOR_MS: u64 = 100;
/// Tries per anchor; the one with the narrowest bracket is kept.
const ANCHOR_TRIES: usize = 5;
/// A segment whose rate differs from the run's mean by more than this (beyond the noise its
/// anchors allow) marks the profile.
pub const MAX_RATE_DEVIATION: f64 = 1000e-6;
/// Fixed-point bits of the conversion's slopes (ns per tick).
const SHIFT: u32 = 48;
/// Largest slope the fixed point holds (ns per tick; a counter of at least 1 MHz).
const MAX_SLOPE: f64 = 1000.0;
/// Converted times lie within +-this (146 years of ns): whatever the ticks, the difference of
/// two converted times fits an i64.
const NS_LIMIT: i128 = 1 << 62;

/// What the hot path reads, on one cache line that is written only at setup, at finalize and
/// once per anchor segment.
#[repr(align(64))]
struct Hot {
    use_tsc: AtomicBool,
    /// The tick count at which the next anchor is due (i64::MAX: none).
    next_anchor: AtomicI64,
    /// The histogram's rate: ns per tick in fixed point (`SHIFT` bits), fixed at setup for the
    /// whole run (see `histogram_ns`). 1 ns per tick in monotonic mode.
    hist_mul: AtomicI64,
}

static HOT: Hot = Hot { use_tsc: AtomicBool::new(false), next_anchor: AtomicI64::new(i64::MAX), hist_mul: AtomicI64::new(1 << SHIFT) };

/// How long setup measures the TSC rate that durations are bucketed with (`histogram_ns`).
const HISTOGRAM_CALIBRATION_NS: i64 = 2_000_000;

/// A duration in ticks as the statistics' histogram buckets it: in nanoseconds, at the rate
/// measured at setup over `HISTOGRAM_CALIBRATION_NS` (a fixed-point multiply, rounded to the
/// nearest ns like every conversion), so that a call lands in the bucket of its duration in ns,
/// exactly for that rate, on the hot path. The identity in monotonic mode. The rate is fixed
/// for the run (not refined at each anchor) so that every call of a run is bucketed by one
/// conversion; it differs from the run's mean rate by the calibration's uncertainty (its two
/// anchors' half widths over 2 ms, typically 10-30 ppm), which moves only a call within that
/// fraction of a bucket edge (recorded as the rank's `clock_histogram_tsc_hz`).
#[inline(always)]
pub fn histogram_ns(ticks: i64) -> i64 {
    Timebase::scale(ticks, HOT.hist_mul.load(Ordering::Relaxed))
}

/// `CLOCK_MONOTONIC` in nanoseconds (the file's clock; also what MPI clock offsets use).
#[inline(always)]
pub fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer; CLOCK_MONOTONIC always exists on Linux (vDSO, no syscall).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// A raw tick count: the TSC, or `CLOCK_MONOTONIC` ns, as chosen at setup. The one clock read
/// of the hot path. The choice is a process-global flag that never changes while recording,
/// so the branch is always predicted.
///
/// A plain `rdtsc` (no `lfence`, no `rdtscp`): the CPU may execute it a few dozen cycles early
/// or late relative to neighbouring instructions, which moves a region edge by nanoseconds,
/// far below the conversion's error bound, and it costs half a fenced read (Score-P and Extrae
/// do the same). Anchors, where ordering against `clock_gettime` matters, use fenced reads.
#[inline(always)]
pub fn now() -> i64 {
    #[cfg(target_arch = "x86_64")]
    {
        if HOT.use_tsc.load(Ordering::Relaxed) {
            // SAFETY: rdtsc has no preconditions; `begin_run` enables this path only where
            // the kernel lets user space read the TSC.
            return unsafe { core::arch::x86_64::_rdtsc() } as i64;
        }
    }
    monotonic_ns()
}

/// `now()` where it is a plain `rdtsc`; None where it is a call (`CLOCK_MONOTONIC`), for a hot
/// path that must stay free of calls (the instrumented functions' hooks take their generic
/// path then).
#[inline(always)]
pub fn now_if_tsc() -> Option<i64> {
    #[cfg(target_arch = "x86_64")]
    {
        if HOT.use_tsc.load(Ordering::Relaxed) {
            // SAFETY: as in `now`.
            return Some(unsafe { core::arch::x86_64::_rdtsc() } as i64);
        }
    }
    None
}

/// Whether `now()` reads the TSC (else `CLOCK_MONOTONIC`): fixed from `begin_run` on.
pub fn reads_tsc() -> bool {
    HOT.use_tsc.load(Ordering::Acquire)
}

/// `now()` for a stop: also takes an anchor when one is due (a compare of the tick just read
/// against a read-mostly static; the anchor itself is a cold call every few hundred ms).
#[inline(always)]
pub fn now_stop() -> i64 {
    #[cfg(target_arch = "x86_64")]
    {
        if HOT.use_tsc.load(Ordering::Relaxed) {
            // SAFETY: as in `now`.
            let t = unsafe { core::arch::x86_64::_rdtsc() } as i64;
            if t >= HOT.next_anchor.load(Ordering::Relaxed) {
                anchor_due(t);
            }
            return t;
        }
    }
    monotonic_ns()
}

/// A TSC read that stays between the instructions around it (for anchors, off the hot path).
#[cfg(target_arch = "x86_64")]
fn fenced_tsc() -> i64 {
    use core::arch::x86_64::{_mm_lfence, _rdtsc};
    // SAFETY: lfence and rdtsc have no preconditions.
    unsafe {
        _mm_lfence();
        let t = _rdtsc();
        _mm_lfence();
        t as i64
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn fenced_tsc() -> i64 {
    monotonic_ns()
}

/// A point where both clocks were read: `ns` was read between two tick reads whose midpoint is
/// `tick`, at most `half_width` ticks from either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    pub tick: i64,
    pub ns: i64,
    pub half_width: i64,
}

/// Take an anchor from `ticks` and `ns`: the tightest of `tries` brackets. `None` if every
/// bracket saw the ticks go backwards.
pub fn take_anchor_with(mut ticks: impl FnMut() -> i64, mut ns: impl FnMut() -> i64, tries: usize) -> Option<Anchor> {
    let mut best: Option<(i64, Anchor)> = None;
    for _ in 0..tries {
        let a = ticks();
        let n = ns();
        let b = ticks();
        if b < a {
            continue;
        }
        let width = b - a;
        if best.is_none_or(|(w, _)| width < w) {
            best = Some((width, Anchor { tick: a + width / 2, ns: n, half_width: (width + 1) / 2 }));
        }
    }
    best.map(|(_, a)| a)
}

fn take_anchor() -> Option<Anchor> {
    take_anchor_with(fenced_tsc, monotonic_ns, ANCHOR_TRIES)
}

/// Why the TSC is not safe to use here, or None if it is.
pub fn tsc_unsafe_reason() -> Option<String> {
    if !cfg!(target_arch = "x86_64") {
        return Some(format!("no time stamp counter on {}", std::env::consts::ARCH));
    }
    if !invariant_tsc() {
        return Some("the CPU does not report an invariant TSC (CPUID 0x80000007 EDX bit 8)".into());
    }
    match current_clocksource() {
        Some(cs) if cs == "tsc" => None,
        Some(cs) => Some(format!("the kernel's clocksource is '{cs}', not 'tsc' (the kernel does not trust the TSC here)")),
        None => Some(format!("cannot read {CLOCKSOURCE}")),
    }
}

const CLOCKSOURCE: &str = "/sys/devices/system/clocksource/clocksource0/current_clocksource";

pub fn current_clocksource() -> Option<String> {
    std::fs::read_to_string(CLOCKSOURCE).ok().map(|s| s.trim().to_string())
}

#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    use core::arch::x86_64::__cpuid;
    // SAFETY: cpuid exists on every x86-64 CPU; leaf 0x80000007 is read only if reported.
    // (`__cpuid` is safe in newer Rust, unsafe in the oldest we support.)
    #[allow(unused_unsafe)]
    unsafe { __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0 }
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc() -> bool {
    false
}

/// Can this process execute rdtsc at all? (prctl(PR_SET_TSC, PR_TSC_SIGSEGV) makes it fault.)
fn rdtsc_allowed() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    let mut mode: libc::c_int = 0;
    // SAFETY: PR_GET_TSC writes one int through the pointer.
    let r = unsafe { libc::prctl(libc::PR_GET_TSC, &mut mode as *mut libc::c_int) };
    r != 0 || mode != libc::PR_TSC_SIGSEGV
}

/// The state of the current run's clock (TSC runs only).
struct RunClock {
    anchors: Vec<Anchor>,
    problems: Vec<String>,
    /// Target segment length.
    segment_ns: i64,
    /// The clocksource at setup, when the TSC was chosen because it was `tsc`.
    clocksource: Option<String>,
    /// The histogram's rate (`Hot::hist_mul`).
    hist_mul: i64,
}

static RUN: Mutex<Option<RunClock>> = Mutex::new(None);

fn run_lock() -> parking_lot::MutexGuard<'static, Option<RunClock>> {
    RUN.lock()
}

/// What setup decided, for the metadata and messages.
#[derive(Debug, Clone)]
pub struct ClockChoice {
    pub kind: ClockKind,
    /// Why the TSC is not used (auto) or why forcing it is unsafe (tsc), if so.
    pub note: Option<String>,
}

/// Choose the clock for a run (at setup, before any thread records) and take the first anchor.
/// `tsc` where unsafe warns once; `auto` falls back to monotonic without a warning (the
/// metadata says why).
pub fn begin_run(mode: ClockMode, anchor_ms: u64) -> ClockChoice {
    let reason = tsc_unsafe_reason();
    let (kind, note) = match mode {
        ClockMode::Monotonic => (ClockKind::Monotonic, None),
        ClockMode::Auto => match reason {
            None if rdtsc_allowed() => (ClockKind::Tsc, None),
            None => (ClockKind::Monotonic, Some("rdtsc is disabled for this process (prctl PR_SET_TSC)".into())),
            Some(r) => (ClockKind::Monotonic, Some(r)),
        },
        ClockMode::Tsc if !rdtsc_allowed() => {
            let r = reason.unwrap_or_else(|| "rdtsc is disabled for this process (prctl PR_SET_TSC)".into());
            crate::warn::once("clock:forced", &format!("SCOPE_PROFILER_CLOCK=tsc: cannot read a TSC ({r}); using CLOCK_MONOTONIC"));
            (ClockKind::Monotonic, Some(r))
        }
        ClockMode::Tsc => {
            if let Some(r) = &reason {
                crate::warn::once(
                    "clock:forced",
                    &format!("SCOPE_PROFILER_CLOCK=tsc although {r}: times may be wrong; the run's checks will flag what they can"),
                );
            }
            (ClockKind::Tsc, reason)
        }
    };
    HOT.next_anchor.store(i64::MAX, Ordering::Relaxed);
    HOT.hist_mul.store(1 << SHIFT, Ordering::Relaxed);
    if kind == ClockKind::Monotonic {
        HOT.use_tsc.store(false, Ordering::Release);
        *run_lock() = None;
        return ClockChoice { kind, note };
    }
    let mut run = RunClock {
        anchors: Vec::new(),
        problems: Vec::new(),
        segment_ns: (anchor_ms.max(1) as i64).saturating_mul(1_000_000),
        clocksource: current_clocksource().filter(|cs| cs == "tsc"),
        hist_mul: 1 << SHIFT,
    };
    match take_anchor() {
        Some(a) => run.anchors.push(a),
        None => run.problems.push("the TSC went backwards while the first anchor was taken".into()),
    }
    calibrate_histogram(&mut run);
    if let Some(a) = run.anchors.first() {
        // No rate known yet: assume 1 tick per ns (a faster TSC only shortens the first segment).
        HOT.next_anchor.store(a.tick.saturating_add(run.segment_ns), Ordering::Relaxed);
    }
    *run_lock() = Some(run);
    HOT.use_tsc.store(true, Ordering::Release);
    ClockChoice { kind, note }
}

/// The histogram's rate (`histogram_ns`): a second anchor `HISTOGRAM_CALIBRATION_NS` after the
/// first (sleeping meanwhile; before any thread records), which stays one of the run's anchors.
fn calibrate_histogram(run: &mut RunClock) {
    let rate = run.anchors.first().copied().and_then(|first| {
        let wait = HISTOGRAM_CALIBRATION_NS - (monotonic_ns() - first.ns);
        if wait > 0 {
            std::thread::sleep(std::time::Duration::from_nanos(wait as u64));
        }
        let second = take_anchor()?;
        run.anchors.push(second);
        let (dt, dn) = (second.tick - first.tick, second.ns - first.ns);
        (dt > 0 && dn > 0).then(|| dn as f64 / dt as f64).filter(|x| x.is_finite() && *x > 0.0 && *x < MAX_SLOPE)
    });
    match rate {
        Some(x) => run.hist_mul = fixed_slope(x),
        None => run.problems.push("the TSC rate could not be measured at setup: the histograms count ticks, not ns".into()),
    }
    HOT.hist_mul.store(run.hist_mul, Ordering::Relaxed);
}

/// A slope (ns per tick) in the conversion's fixed point.
fn fixed_slope(x: f64) -> i64 {
    (x.clamp(0.0, MAX_SLOPE) * (1u64 << SHIFT) as f64).round() as i64
}

/// A stop found an anchor due. Whoever gets the lock takes it; the others go on recording.
#[cold]
#[inline(never)]
fn anchor_due(tick: i64) {
    // Not inside a signal handler that interrupted the library's cold code (the anchor
    // allocates); and a handler interrupting this is refused its cold calls (see `reentry`).
    if crate::reentry::busy() {
        return;
    }
    // Marked before the lock is taken and until after it is released (dropped in reverse).
    let _busy = crate::reentry::Busy::enter();
    let Some(mut guard) = RUN.try_lock() else { return };
    let Some(run) = guard.as_mut() else { return };
    if tick < HOT.next_anchor.load(Ordering::Relaxed) {
        return; // another thread just took it
    }
    add_anchor(run);
}

fn add_anchor(run: &mut RunClock) {
    let Some(a) = take_anchor() else {
        run.problems.push("the TSC went backwards while an anchor was taken".into());
        HOT.next_anchor.store(i64::MAX, Ordering::Relaxed);
        return;
    };
    run.anchors.push(a);
    let first = run.anchors[0];
    let ticks_per_ns = if a.ns > first.ns && a.tick > first.tick { (a.tick - first.tick) as f64 / (a.ns - first.ns) as f64 } else { 1.0 };
    let step = (run.segment_ns as f64 * ticks_per_ns).clamp(1.0, 1e15) as i64;
    HOT.next_anchor.store(a.tick.saturating_add(step), Ordering::Relaxed);
}

/// The anchors taken so far in this run (empty in monotonic mode), for a recorder that keeps
/// them next to spilled ticks so that `Timebase::fit` can later convert what a killed run left.
pub fn anchors_so_far() -> Vec<Anchor> {
    run_lock().as_ref().map(|r| r.anchors.clone()).unwrap_or_default()
}

/// The anchors taken in this run after the first `n` (what a spill has not saved yet).
pub fn anchors_since(n: usize) -> Vec<Anchor> {
    run_lock().as_ref().map(|r| r.anchors.get(n..).unwrap_or_default().to_vec()).unwrap_or_default()
}

/// An anchor taken now (recovery on the node and boot of a killed run: its ticks are this
/// TSC's, so a fresh anchor bounds the conversion of calls after the run's last saved one).
pub fn anchor_now() -> Option<Anchor> {
    take_anchor()
}

/// End the run's clock (at finalize, after every thread stopped recording): the last anchor,
/// the clocksource check, and the timebase that converts what was recorded.
pub fn end_run() -> Timebase {
    HOT.next_anchor.store(i64::MAX, Ordering::Relaxed);
    // The lock is held for a microsecond per anchor; wait for it, but never forever (a child
    // forked while another thread held it would otherwise hang in finalize).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let taken = loop {
        match RUN.try_lock() {
            Some(mut g) => break Ok(g.take()),
            None if std::time::Instant::now() < deadline => std::thread::yield_now(),
            None => break Err(()),
        }
    };
    let Ok(taken) = taken else {
        let tsc = HOT.use_tsc.load(Ordering::Relaxed);
        return if tsc { Timebase::fit(Vec::new(), vec!["the clock's anchors could not be reached at finalize".into()]) } else { Timebase::monotonic() };
    };
    let Some(mut run) = taken else {
        return Timebase::monotonic();
    };
    add_anchor(&mut run);
    if let Some(cs) = &run.clocksource {
        match current_clocksource() {
            Some(now) if &now == cs => {}
            now => run.problems.push(format!(
                "the kernel's clocksource changed from '{cs}' to '{}' during the run (it found the TSC unreliable)",
                now.as_deref().unwrap_or("unknown")
            )),
        }
    }
    let mut tb = Timebase::fit(run.anchors, run.problems);
    tb.hist_mul = Some(run.hist_mul);
    *last_run() = Some(tb.clone());
    tb
}

/// The conversion of the last finished run, for statistics read after finalize.
static LAST: Mutex<Option<Timebase>> = Mutex::new(None);

fn last_run() -> parking_lot::MutexGuard<'static, Option<Timebase>> {
    LAST.lock()
}

/// A conversion for statistics read while the run goes on (`sp_region_get_stats`, the mid-run
/// summary). Statistics are lengths of time, converted at the run's mean rate: the run's first
/// anchor and one taken now give it, even before the first periodic anchor. Nothing is added
/// to the run, so a program that asks often neither grows the run's anchors nor pays more per
/// question as the run goes on. After finalize, the run's own conversion; the identity in
/// monotonic mode. Never called on the hot path.
pub fn live_timebase() -> Timebase {
    let guard = run_lock();
    match guard.as_ref() {
        Some(run) => {
            let mut anchors: Vec<Anchor> = run.anchors.first().copied().into_iter().collect();
            anchors.extend(take_anchor().or(run.anchors.last().copied()));
            Timebase::fit(anchors, Vec::new())
        }
        None => {
            drop(guard);
            last_run().clone().unwrap_or_else(Timebase::monotonic)
        }
    }
}

/// Converts ticks to `CLOCK_MONOTONIC` ns for one run. The identity in monotonic mode.
///
/// For collect-time users: `to_ns(tick)` for a point in time (start, end), `duration_ns(ticks)`
/// for a length (total, minimum, maximum, exclusive time, histogram bucket edges: ticks times
/// the run's mean rate), `convert_calls(starts, ends)` for whole columns (also checks them).
#[derive(Debug)]
pub struct Timebase {
    kind: ClockKind,
    anchors: Vec<Anchor>,
    /// ns per tick of segment i (anchors i..i+1).
    slopes: Vec<f64>,
    mean_slope: f64,
    /// The slopes in fixed point (ns per tick times 2^SHIFT), what the conversion multiplies by:
    /// one integer multiply per value, exact to far below a ns over any segment.
    muls: Vec<i64>,
    mean_mul: i64,
    /// The rate the run's histograms were bucketed with (`histogram_ns`), when this timebase is
    /// a finished run's.
    hist_mul: Option<i64>,
    /// Ticks outside [lo, hi] are outside the anchored span.
    lo: i64,
    hi: i64,
    error_bound_ns: i64,
    problems: Vec<String>,
    /// Converted values outside the anchored span, and calls that end before they start.
    outside: AtomicU64,
    backwards: AtomicU64,
}

impl Clone for Timebase {
    fn clone(&self) -> Self {
        Timebase {
            kind: self.kind,
            anchors: self.anchors.clone(),
            slopes: self.slopes.clone(),
            mean_slope: self.mean_slope,
            muls: self.muls.clone(),
            mean_mul: self.mean_mul,
            hist_mul: self.hist_mul,
            lo: self.lo,
            hi: self.hi,
            error_bound_ns: self.error_bound_ns,
            problems: self.problems.clone(),
            outside: AtomicU64::new(self.outside.load(Ordering::Relaxed)),
            backwards: AtomicU64::new(self.backwards.load(Ordering::Relaxed)),
        }
    }
}

/// See `Timebase::converter`.
pub struct Converter<'a> {
    timebase: &'a Timebase,
    identity: bool,
    /// The fast window: ticks in [base_tick, hi) lie in the current segment and convert with
    /// `Timebase::scale_split` (two 64-bit multiplies); any other tick goes through
    /// `enter_segment`. Empty until the first tick.
    hi: i64,
    base_tick: i64,
    base_ns: i64,
    /// The segment's fixed-point slope split at bit 16: mul = mul_hi << 16 | mul_lo.
    mul_hi: i64,
    mul_lo: i64,
    hint: usize,
}

impl Converter<'_> {
    /// `convert_in_place`, for ticks the caller found in order (`in_order`) or not; whether
    /// the converted values are in order. The conversion inside the fast window is monotone
    /// (`convert_window`), so a block in order that lies inside it only needs its first and
    /// last values compared (which catches a sum past `i64::MAX`); any other block is checked
    /// value by value once converted.
    #[inline(always)]
    pub fn convert_in_place_ordered(&mut self, ticks: &mut [i64], in_order: bool) -> bool {
        let Some((&first, &last)) = ticks.first().zip(ticks.last()) else { return true };
        if self.identity {
            return in_order;
        }
        if in_order && self.window_holds(first, last) {
            self.convert_window(ticks);
            return ticks[0] <= ticks[ticks.len() - 1];
        }
        self.convert_in_place(ticks);
        in_order_values(ticks)
    }

    /// Whether ticks from `lo` to `hi` lie in the fast window, with the slope's halves below
    /// 2^32 (`convert_window` converts them).
    #[inline(always)]
    fn window_holds(&self, lo: i64, hi: i64) -> bool {
        let span = self.hi.wrapping_sub(self.base_tick) as u64;
        let inside = |t: i64| (t.wrapping_sub(self.base_tick) as u64) < span;
        inside(lo) && inside(hi) && self.mul_hi <= u32::MAX as i64
    }

    /// `convert_window` with the current window (its checks done by the caller).
    #[inline(always)]
    fn convert_window(&self, ticks: &mut [i64]) {
        let (base_tick, base_ns, h, l) = (self.base_tick, self.base_ns, self.mul_hi as u32, self.mul_lo as u32);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            unsafe { convert_window_avx2(ticks, base_tick, base_ns, h, l) };
            return;
        }
        convert_window(ticks, base_tick, base_ns, h, l);
    }

    /// Convert a block of ticks in place: ticks -> `CLOCK_MONOTONIC` ns, each as
    /// `Timebase::to_ns` converts it.
    #[inline(always)]
    pub fn convert_in_place(&mut self, ticks: &mut [i64]) {
        if self.identity || ticks.is_empty() {
            return;
        }
        // Mostly the whole block lies in the window: then a loop without branches that the
        // compiler vectorizes (both products are 32 x 32 -> 64 bits there; see `split_span`).
        let (lo, hi) = ticks.iter().fold((i64::MAX, i64::MIN), |(lo, hi), &t| (lo.min(t), hi.max(t)));
        if self.window_holds(lo, hi) {
            self.convert_window(ticks);
            return;
        }
        let (mut base_tick, mut span, mut base_ns, mut mul_hi, mut mul_lo) =
            (self.base_tick, self.hi.wrapping_sub(self.base_tick) as u64, self.base_ns, self.mul_hi, self.mul_lo);
        for t in ticks {
            let d = t.wrapping_sub(base_tick);
            if (d as u64) < span {
                *t = base_ns + Timebase::scale_split(d, mul_hi, mul_lo);
            } else {
                *t = self.enter_segment(*t);
                (base_tick, span, base_ns, mul_hi, mul_lo) =
                    (self.base_tick, self.hi.wrapping_sub(self.base_tick) as u64, self.base_ns, self.mul_hi, self.mul_lo);
            }
        }
    }

    /// Convert a tick outside the fast window exactly (`Timebase::scale`), and move the window
    /// to its segment: from the segment's anchor to the segment's end, or less when the
    /// segment is too long for `scale_split` (then ticks past the window take this path).
    #[cold]
    #[inline(never)]
    fn enter_segment(&mut self, tick: i64) -> i64 {
        let tb = self.timebase;
        let i = tb.segment(tick, &mut self.hint);
        let last = tb.muls.len() - 1;
        let (base_tick, base_ns, mul) = (tb.anchors[i].tick, tb.anchors[i].ns, tb.muls[i]);
        let end = if i == last { i64::MAX } else { tb.anchors[i + 1].tick };
        let span = end.saturating_sub(base_tick).min(Timebase::split_span(mul));
        (self.base_tick, self.base_ns, self.mul_hi, self.mul_lo) = (base_tick, base_ns, mul >> 16, mul & 0xFFFF);
        self.hi = base_tick.saturating_add(span);
        Timebase::project(base_ns, base_tick, tick, mul)
    }
}

/// Whether `values` are in order (each at most the next): an OR of the pairs out of order,
/// which vectorizes without packing.
#[inline(always)]
pub fn in_order_values(values: &[i64]) -> bool {
    values.iter().zip(values.get(1..).unwrap_or(&[])).fold(0i64, |bad, (&a, &b)| bad | (b < a) as i64) == 0
}

/// `Converter::convert_in_place` for a block inside the fast window, with the slope's halves
/// below 2^32: `Timebase::scale_split` as 32 x 32 -> 64-bit multiplies, which vectorize.
#[inline(always)]
fn convert_window(ticks: &mut [i64], base_tick: i64, base_ns: i64, h: u32, l: u32) {
    let (h, l) = (h as u64, l as u64);
    for t in ticks.iter_mut() {
        let d = t.wrapping_sub(base_tick) as u64 as u32 as u64;
        let v = (d * h + ((d * l + (1u64 << (SHIFT - 1))) >> 16)) >> 32;
        *t = (base_ns as u64).wrapping_add(v) as i64;
    }
}

/// `convert_window` compiled for AVX2 (four values per instruction instead of two).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn convert_window_avx2(ticks: &mut [i64], base_tick: i64, base_ns: i64, h: u32, l: u32) {
    convert_window(ticks, base_tick, base_ns, h, l)
}

/// What the metadata says about the clock of one rank.
#[derive(Debug, Clone, PartialEq)]
pub struct ClockReport {
    /// "tsc" or "monotonic".
    pub clock: &'static str,
    /// TSC frequency found by the anchors (Hz), TSC runs only.
    pub tsc_hz: Option<i64>,
    /// The TSC frequency the histograms were bucketed with (Hz; measured at setup), TSC runs only.
    pub histogram_hz: Option<i64>,
    pub anchors: usize,
    /// Largest conversion error of the run (0 in monotonic mode).
    pub error_bound_ns: i64,
    /// "ok", or what went wrong (the times are then not to be trusted to the bound).
    pub status: String,
}

impl Timebase {
    /// Ticks are `CLOCK_MONOTONIC` ns: the identity.
    pub fn monotonic() -> Timebase {
        Timebase {
            kind: ClockKind::Monotonic,
            anchors: Vec::new(),
            slopes: Vec::new(),
            mean_slope: 1.0,
            muls: Vec::new(),
            mean_mul: 1 << SHIFT,
            hist_mul: None,
            lo: i64::MIN,
            hi: i64::MAX,
            error_bound_ns: 0,
            problems: Vec::new(),
            outside: AtomicU64::new(0),
            backwards: AtomicU64::new(0),
        }
    }

    /// Fit the piecewise-linear conversion through `anchors` (in the order taken) and check it.
    ///
    /// Error bound: in segment i (anchors i, i+1, length L ticks), a point is converted from the
    /// two anchors, each known to within its half bracket width u; if the rate changed inside
    /// the segment from r1 to r2, the straight line misses the true curve by at most
    /// |r1 - r2| L / 4 (at a change in the middle). r1 and r2 are estimated by the slopes of the
    /// segment and its neighbours, so the bound is max(u_i, u_i+1) + (largest difference among
    /// the slopes of segments i-1, i, i+1, less what their anchors' uncertainty alone explains)
    /// L / 4 + 1 ns of rounding, maximised over segments. (Without that allowance a short
    /// segment, such as the last one before finalize, would inflate the bound of its long
    /// neighbour by its mere measurement noise.) It assumes the rate changes at most once per
    /// segment, which anchors every 100 ms make a safe assumption for NTP.
    pub fn fit(anchors: Vec<Anchor>, mut problems: Vec<String>) -> Timebase {
        let mut kept: Vec<Anchor> = Vec::with_capacity(anchors.len());
        let mut dropped = 0;
        for a in anchors {
            match kept.last() {
                Some(p) if a.tick <= p.tick || a.ns < p.ns => dropped += 1,
                _ => kept.push(a),
            }
        }
        if dropped > 0 {
            problems.push(format!("the TSC went backwards against CLOCK_MONOTONIC between anchors ({dropped} anchor(s) dropped)"));
        }
        let mut tb = Timebase { kind: ClockKind::Tsc, anchors: kept, ..Timebase::monotonic() };
        tb.problems = problems;
        let n = tb.anchors.len();
        if n < 2 {
            tb.problems.push("fewer than two usable anchors: the TSC rate is unknown".into());
            tb.slopes = vec![1.0];
            tb.muls = vec![1 << SHIFT];
            if tb.anchors.is_empty() {
                tb.anchors.push(Anchor { tick: 0, ns: 0, half_width: 0 });
            }
            tb.error_bound_ns = i64::MAX;
            return tb;
        }
        let (first, last) = (tb.anchors[0], tb.anchors[n - 1]);
        tb.mean_slope = (last.ns - first.ns) as f64 / (last.tick - first.tick) as f64;
        tb.slopes = tb.anchors.windows(2).map(|w| (w[1].ns - w[0].ns) as f64 / (w[1].tick - w[0].tick) as f64).collect();
        // How far each slope may be off from its anchors' uncertainty alone (ns per tick).
        let noise: Vec<f64> = tb
            .anchors
            .windows(2)
            .map(|w| (w[0].half_width + w[1].half_width) as f64 / (w[1].tick - w[0].tick) as f64 * tb.mean_slope)
            .collect();
        let mut bound = 0f64;
        let mut worst: Option<(usize, f64)> = None;
        for i in 0..n - 1 {
            let (a, b) = (tb.anchors[i], tb.anchors[i + 1]);
            let len = (b.tick - a.tick) as f64;
            let u = a.half_width.max(b.half_width) as f64 * tb.mean_slope;
            let near = i.saturating_sub(1)..(i + 2).min(n - 1);
            let mut spread = 0f64;
            for j in near.clone() {
                for k in near.clone().filter(|&k| k > j) {
                    spread = spread.max((tb.slopes[j] - tb.slopes[k]).abs() - noise[j] - noise[k]);
                }
            }
            bound = bound.max(u + spread * len / 4.0 + 1.0);
            // Rate check, allowing for what the anchors' own uncertainty does to the slope.
            let deviation = (tb.slopes[i] / tb.mean_slope - 1.0).abs();
            let noise = (a.half_width + b.half_width) as f64 / len;
            if deviation > MAX_RATE_DEVIATION + noise && worst.is_none_or(|(_, d)| deviation > d) {
                worst = Some((i, deviation));
            }
        }
        if let Some((i, d)) = worst {
            tb.problems.push(format!(
                "the TSC rate of segment {} of {} differs from the run's mean by {:.0} ppm (more than {:.0} ppm)",
                i + 1,
                n - 1,
                d * 1e6,
                MAX_RATE_DEVIATION * 1e6
            ));
        }
        tb.error_bound_ns = bound.ceil() as i64;
        if tb.slopes.iter().any(|&x| !(x.is_finite() && x > 0.0 && x < MAX_SLOPE)) {
            tb.problems.push("a segment's rate is out of range (under 1 MHz?)".into());
        }
        tb.muls = tb.slopes.iter().map(|&x| fixed_slope(x)).collect();
        tb.mean_mul = fixed_slope(tb.mean_slope);
        tb.lo = first.tick - first.half_width;
        tb.hi = last.tick + last.half_width;
        tb
    }

    pub fn kind(&self) -> ClockKind {
        self.kind
    }

    pub fn is_identity(&self) -> bool {
        self.kind == ClockKind::Monotonic
    }

    /// The anchors the conversion runs through.
    pub fn anchors(&self) -> &[Anchor] {
        &self.anchors
    }

    /// The largest conversion error of the run, in ns (0 in monotonic mode).
    pub fn error_bound_ns(&self) -> i64 {
        self.error_bound_ns
    }

    /// Ticks per second (the TSC frequency found), TSC runs only.
    pub fn tsc_hz(&self) -> Option<f64> {
        (self.kind == ClockKind::Tsc && self.anchors.len() >= 2).then(|| 1e9 / self.mean_slope)
    }

    /// The segment holding `tick`, starting the search at `hint` (conversions of a column move
    /// forward, so this is a step or two, not a binary search, on sorted input).
    #[inline]
    fn segment(&self, tick: i64, hint: &mut usize) -> usize {
        let last = self.muls.len() - 1;
        let mut i = (*hint).min(last);
        let a = &self.anchors;
        if tick >= a[i].tick && (i == last || tick < a[i + 1].tick) {
            return i;
        }
        if i < last && tick >= a[i + 1].tick && (i + 1 == last || tick < a[i + 2].tick) {
            i += 1;
        } else {
            // partition_point: first anchor after tick; the segment starts one before it.
            i = a.partition_point(|x| x.tick <= tick).saturating_sub(1).min(last);
        }
        *hint = i;
        i
    }

    /// `ticks` times a fixed-point slope, rounded to the nearest ns (within +-[`NS_LIMIT`]).
    #[inline(always)]
    fn scale(ticks: i64, mul: i64) -> i64 {
        ((ticks as i128 * mul as i128 + (1i128 << (SHIFT - 1))) >> SHIFT).clamp(-NS_LIMIT, NS_LIMIT) as i64
    }

    /// The time of `tick` on the line through (`base_tick`, `base_ns`) with slope `mul`, within
    /// +-[`NS_LIMIT`]: ticks and anchors read back from a damaged spill may be anything, and
    /// the differences of two converted times must fit an i64.
    #[inline(always)]
    fn project(base_ns: i64, base_tick: i64, tick: i64, mul: i64) -> i64 {
        let d = tick as i128 - base_tick as i128;
        (base_ns as i128 + ((d * mul as i128 + (1i128 << (SHIFT - 1))) >> SHIFT)).clamp(-NS_LIMIT, NS_LIMIT) as i64
    }

    /// `scale(d, mul)` for `0 <= d < split_span(mul)`, with two 64-bit multiplies instead of
    /// one 128-bit one (bit for bit the same: with mul = h * 2^16 + l, d * mul + 2^47 =
    /// 2^16 * (d * h + ((d * l + 2^47) >> 16)) + r with r < 2^16, so shifting right by 48 is
    /// shifting d * h + ((d * l + 2^47) >> 16) right by 32).
    #[inline(always)]
    fn scale_split(d: i64, mul_hi: i64, mul_lo: i64) -> i64 {
        (d * mul_hi + ((d * mul_lo + (1i64 << (SHIFT - 1))) >> 16)) >> 32
    }

    /// The ticks from an anchor that `scale_split` converts without overflow: d * mul_hi below
    /// 2^62 and d * mul_lo below 2^46 (so neither sum reaches 2^63).
    fn split_span(mul: i64) -> i64 {
        const { assert!(SHIFT == 48) };
        // Below 2^32 too, so that both factors fit 32 bits (`convert_in_place`).
        ((1i64 << 62) / (mul >> 16).max(1)).min(1 << 30)
    }

    /// Convert one tick (TSC runs); `outside` counts ticks beyond the anchored span.
    #[inline(always)]
    fn convert(&self, tick: i64, hint: &mut usize, outside: &mut u64) -> i64 {
        let i = self.segment(tick, hint);
        *outside += (tick < self.lo || tick > self.hi) as u64;
        // `segment` returns i < muls.len() <= anchors.len().
        let a = &self.anchors[i];
        Self::project(a.ns, a.tick, tick, self.muls[i])
    }

    /// A converter for a column of ticks in (mostly) increasing order, such as one thread's
    /// calls: it keeps the segment of the last value, so most values cost a compare and a
    /// multiply. Ticks outside the anchored span are extrapolated from the nearest segment; a
    /// TSC that went backwards or was reset there is caught by the anchors themselves (`fit`),
    /// which are taken throughout the run.
    pub fn converter(&self) -> Converter<'_> {
        Converter { timebase: self, identity: self.is_identity(), hi: 0, base_tick: 0, base_ns: 0, mul_hi: 0, mul_lo: 0, hint: 0 }
    }

    /// Record calls that were found to end before they start (counted while recording).
    pub fn note_backwards(&self, calls: u64) {
        if calls > 0 {
            self.backwards.fetch_add(calls, Ordering::Relaxed);
        }
    }

    /// A point in time: ticks -> `CLOCK_MONOTONIC` ns.
    pub fn to_ns(&self, tick: i64) -> i64 {
        if self.is_identity() {
            return tick;
        }
        let mut outside = 0;
        let ns = self.convert(tick, &mut 0, &mut outside);
        if outside > 0 {
            self.outside.fetch_add(outside, Ordering::Relaxed);
        }
        ns
    }

    /// A length of time: ticks -> ns at the run's mean rate (differs from
    /// `to_ns(end) - to_ns(start)` by at most the rate's variation, parts per million).
    pub fn duration_ns(&self, ticks: i64) -> i64 {
        if self.is_identity() { ticks } else { Self::scale(ticks, self.mean_mul) }
    }

    /// Convert the start and end columns of one thread's calls in place, and check that no
    /// call ends before it starts.
    pub fn convert_calls(&self, starts: &mut [i64], ends: &mut [i64]) {
        if self.is_identity() {
            return;
        }
        let (mut hs, mut he) = (0usize, 0usize);
        let (mut backwards, mut outside) = (0u64, 0u64);
        for (s, e) in starts.iter_mut().zip(ends.iter_mut()) {
            backwards += (*e < *s) as u64;
            *s = self.convert(*s, &mut hs, &mut outside);
            *e = self.convert(*e, &mut he, &mut outside);
        }
        if backwards > 0 {
            self.backwards.fetch_add(backwards, Ordering::Relaxed);
        }
        if outside > 0 {
            self.outside.fetch_add(outside, Ordering::Relaxed);
        }
    }

    /// Everything that makes this run's times untrustworthy, or empty.
    pub fn problems(&self) -> Vec<String> {
        let mut out = self.problems.clone();
        let outside = self.outside.load(Ordering::Relaxed);
        if outside > 0 {
            out.push(format!("{outside} timestamp(s) lie outside the span of the run's anchors (the TSC went backwards or was reset)"));
        }
        let backwards = self.backwards.load(Ordering::Relaxed);
        if backwards > 0 {
            out.push(format!("{backwards} call(s) end before they start in TSC ticks (the TSC is not synchronized across CPUs)"));
        }
        out
    }

    /// What the metadata records; call after all conversions (they add to the checks).
    pub fn report(&self) -> ClockReport {
        let problems = self.problems();
        ClockReport {
            clock: self.kind.as_str(),
            tsc_hz: self.tsc_hz().map(|hz| hz.round() as i64),
            histogram_hz: self.hist_mul.filter(|&m| self.kind == ClockKind::Tsc && m > 0).map(|m| (1e9 * (1u64 << SHIFT) as f64 / m as f64).round() as i64),
            anchors: self.anchors.len(),
            error_bound_ns: self.error_bound_ns,
            status: if problems.is_empty() { "ok".into() } else { format!("unreliable: {}", problems.join("; ")) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block converted with the order found on its ticks gives the values and the order of
    /// the block converted and then checked value by value: in order and not, inside one
    /// segment and across several, for the identity, and past `i64::MAX` (a damaged timebase).
    #[test]
    fn converting_in_order_keeps_the_order_found_after_converting() {
        let anchor = |tick, ns| Anchor { tick, ns, half_width: 0 };
        let tsc = Timebase::fit((0..20i64).map(|k| anchor(k * 1_000_000 + k * k, 5_000 + k * 384_615)).collect(), Vec::new());
        let near_max = Timebase::fit(vec![anchor(0, i64::MAX - 1_000), anchor(1_000, i64::MAX - 600)], Vec::new());
        let blocks: Vec<Vec<i64>> = vec![
            (0..512).map(|i| 10 + i * 3).collect(),
            (0..512).map(|i| 999_000 + i * 7).collect(),
            (0..512).map(|i| i * 40_000).collect(),
            (0..512).map(|i| 10 + (i * 7919) % 1000).collect(),
            vec![5, 5, 5, 4],
            vec![7],
            (0..64).map(|i| 500 + i * 100).collect(),
        ];
        for (name, tb) in [("tsc", &tsc), ("identity", &Timebase::monotonic()), ("near i64::MAX", &near_max)] {
            let (mut a, mut b) = (tb.converter(), tb.converter());
            for (k, block) in blocks.iter().enumerate() {
                let in_order = block.windows(2).all(|w| w[0] <= w[1]);
                assert_eq!(in_order_values(block), in_order, "block {k}");
                let (mut x, mut y) = (block.clone(), block.clone());
                let ordered = a.convert_in_place_ordered(&mut x, in_order);
                b.convert_in_place(&mut y);
                assert_eq!(x, y, "{name} block {k}");
                assert_eq!(ordered, y.windows(2).all(|w| w[0] <= w[1]), "{name} block {k}");
            }
        }
    }

    #[test]
    fn monotonic_and_in_nanoseconds() {
        let a = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = monotonic_ns();
        assert!(b - a >= 2_000_000, "{a} {b}");
        assert!(b - a < 2_000_000_000);
    }

    #[test]
    fn split_multiply_is_exact() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // Slopes from a 10 GHz TSC to 1 tick per 2 ns, and some exact ones.
        let mut muls: Vec<i64> = vec![1 << 47, 1 << 48, 1 << 49, (1 << 48) / 3, (1 << 48) / 10, 0xFFFF, 0x1_0000, 1];
        muls.extend((0..200).map(|_| (rnd() % (2 << 48)) as i64 + 1));
        for mul in muls {
            let span = Timebase::split_span(mul);
            assert!(span > 0);
            let (h, l) = (mul >> 16, mul & 0xFFFF);
            for d in [0, 1, span - 1, span / 2].into_iter().chain((0..500).map(|_| (rnd() % span as u64) as i64)) {
                assert_eq!(Timebase::scale_split(d, h, l), Timebase::scale(d, mul), "d {d} mul {mul}");
            }
        }
    }

    /// Blocks converted in place (the vectorized window, the per-value path, segments changing
    /// inside a block, ticks before the first and after the last anchor) equal `to_ns` of
    /// each tick.
    #[test]
    fn block_conversion_agrees_with_to_ns() {
        let anchor = |tick, ns| Anchor { tick, ns, half_width: 0 };
        // A 2.6 GHz TSC with a few ppm of drift per 100 ms segment.
        let anchors: Vec<Anchor> = (0..50i64).map(|k| anchor(5_000 + k * 260_000_000 + k * k * 7, 1_000_000 + k * 100_000_000)).collect();
        let tb = Timebase::fit(anchors, Vec::new());
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut c = tb.converter();
        let mut t = 0i64;
        for round in 0..400 {
            let len = (rnd() % 700) as usize;
            let mut block: Vec<i64> = (0..len)
                .map(|_| {
                    t += (rnd() % 200_000) as i64;
                    match rnd() % 50 {
                        0 => t - (rnd() % 1_000_000_000) as i64, // an end far back: another segment
                        1 => (rnd() % (1 << 40)) as i64,        // anywhere, also past the last anchor
                        _ => t,
                    }
                })
                .collect();
            if round % 7 == 0 {
                t += 300_000_000; // jump a segment between blocks
            }
            let want: Vec<i64> = block.iter().map(|&v| tb.to_ns(v)).collect();
            c.convert_in_place(&mut block);
            assert_eq!(block, want, "round {round}");
        }
        let id = Timebase::monotonic();
        let mut block = vec![3, 1, 2];
        id.converter().convert_in_place(&mut block);
        assert_eq!(block, vec![3, 1, 2]);
    }

    #[test]
    fn converter_agrees_with_to_ns_in_any_order() {
        let anchor = |tick, ns| Anchor { tick, ns, half_width: 0 };
        // Three segments of different rates.
        let tb = Timebase::fit(vec![anchor(1_000, 10_000), anchor(5_000, 12_000), anchor(9_000, 14_100), anchor(20_000, 20_000)], Vec::new());
        let ticks: Vec<i64> = vec![0, 999, 1_000, 1_001, 4_999, 5_000, 8_000, 9_000, 19_999, 20_000, 25_000, 3_000, 100, 30_000, 2];
        // One value at a time: the converter moves between segments in both directions.
        let mut c = tb.converter();
        for &t in &ticks {
            let mut one = [t];
            c.convert_in_place(&mut one);
            assert_eq!(one[0], tb.to_ns(t), "tick {t}");
        }
        let id = Timebase::monotonic();
        let mut c = id.converter();
        let mut all = ticks.clone();
        c.convert_in_place(&mut all);
        assert_eq!(all, ticks);
    }

    #[test]
    fn modes_parse() {
        assert_eq!(ClockMode::parse(" TSC "), Some(ClockMode::Tsc));
        assert_eq!(ClockMode::parse("auto"), Some(ClockMode::Auto));
        assert_eq!(ClockMode::parse("monotonic"), Some(ClockMode::Monotonic));
        assert_eq!(ClockMode::parse("rdtsc"), None);
        for m in [ClockMode::Auto, ClockMode::Tsc, ClockMode::Monotonic] {
            assert_eq!(ClockMode::parse(m.as_str()), Some(m));
        }
    }

    /// A mock machine: true time in ns advances by 1-25 ns (pseudo-random) per read of either
    /// clock, so `clock_gettime` lands anywhere in its bracket; the TSC is `tsc(true ns)`.
    /// Anchors are taken with `take_anchor_with` as the real ones are.
    struct Mock<F: Fn(f64) -> f64> {
        t: std::cell::Cell<f64>,
        tsc: F,
        seed: std::cell::Cell<u64>,
    }

    impl<F: Fn(f64) -> f64> Mock<F> {
        fn new(tsc: F) -> Self {
            Mock { t: std::cell::Cell::new(1e12), tsc, seed: std::cell::Cell::new(42) }
        }
        fn step(&self) {
            let x = self.seed.get().wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            self.seed.set(x);
            self.t.set(self.t.get() + 1.0 + ((x >> 33) % 25) as f64);
        }
        fn tick(&self) -> i64 {
            self.step();
            (self.tsc)(self.t.get()).round() as i64
        }
        fn ns(&self) -> i64 {
            self.step();
            self.t.get().round() as i64
        }
        fn anchor(&self) -> Anchor {
            take_anchor_with(|| self.tick(), || self.ns(), 5).unwrap()
        }
        /// Anchors every `every_ns` over `span_ns`.
        fn anchors(&self, every_ns: f64, span_ns: f64) -> Vec<Anchor> {
            let start = self.t.get();
            let mut out = vec![self.anchor()];
            while self.t.get() < start + span_ns {
                self.t.set(self.t.get() + every_ns);
                out.push(self.anchor());
            }
            out
        }
    }

    /// Every converted tick within the reported bound of the true time, sampled over the span.
    fn assert_within_bound<F: Fn(f64) -> f64>(m: &Mock<F>, tb: &Timebase, from: f64, to: f64) -> f64 {
        let mut worst = 0f64;
        let mut t = from;
        while t < to {
            let tick = (m.tsc)(t).round() as i64;
            let err = (tb.to_ns(tick) as f64 - t).abs();
            worst = worst.max(err);
            assert!(err <= tb.error_bound_ns() as f64, "error {err} ns at {t} above the bound {}", tb.error_bound_ns());
            t += 1_234_567.0;
        }
        worst
    }

    #[test]
    fn tightest_bracket_wins() {
        let widths = std::cell::RefCell::new(vec![10, 2, 6].into_iter());
        let mut t = 0i64;
        let mut second = false;
        let a = take_anchor_with(
            || {
                if second {
                    t += widths.borrow_mut().next().unwrap();
                }
                second = !second;
                t
            },
            || 500,
            3,
        )
        .unwrap();
        assert_eq!(a.half_width, 1);
        assert_eq!(a.tick, 10 + 1);
        // Ticks running backwards in every try: no anchor.
        let mut k = 100;
        assert!(take_anchor_with(|| { k -= 1; k }, || 0, 3).is_none());
    }

    #[test]
    fn constant_rate_is_exact_to_the_anchors() {
        let m = Mock::new(|t| t * 2.9 + 12345.0);
        let start = m.t.get();
        let tb = Timebase::fit(m.anchors(100e6, 2e9), Vec::new());
        assert!(tb.problems().is_empty(), "{:?}", tb.problems());
        assert!((tb.tsc_hz().unwrap() - 2.9e9).abs() < 2.9e9 * 1e-8, "{:?}", tb.tsc_hz());
        // Brackets of 2 reads of up to 25 ns each, plus rounding.
        assert!(tb.error_bound_ns() <= 30, "{}", tb.error_bound_ns());
        assert_within_bound(&m, &tb, start + 10.0, m.t.get() - 10.0);
        assert_eq!(tb.duration_ns(2_900_000), 1_000_000);
        assert_eq!(tb.report().status, "ok");
    }

    #[test]
    fn a_short_last_segment_does_not_inflate_the_bound() {
        let m = Mock::new(|t| t * 3.1);
        let start = m.t.get();
        let mut anchors = m.anchors(100e6, 1e9);
        m.t.set(m.t.get() + 3_000.0); // finalize 3 us after the last periodic anchor
        anchors.push(m.anchor());
        let tb = Timebase::fit(anchors, Vec::new());
        assert_eq!(tb.report().status, "ok");
        assert!(tb.error_bound_ns() <= 30, "{}", tb.error_bound_ns());
        assert_within_bound(&m, &tb, start + 10.0, m.t.get() - 10.0);
    }

    #[test]
    fn rate_step_of_500_ppm_is_followed_within_the_bound() {
        // CLOCK_MONOTONIC slewed by 500 ppm from 1.05 s on (inside a segment, not at an anchor).
        let t0 = 1e12;
        let step_at = t0 + 1.05e9;
        let m = Mock::new(move |t: f64| if t < step_at { (t - t0) * 3.0 } else { (step_at - t0) * 3.0 + (t - step_at) * 3.0 * (1.0 + 500e-6) });
        let tb = Timebase::fit(m.anchors(100e6, 3e9), Vec::new());
        // 500 ppm is a legitimate slew: not flagged.
        assert!(tb.problems().is_empty(), "{:?}", tb.problems());
        // The bend inside one 100 ms segment: 500e-6 * 100 ms / 4 = 12.5 us at most.
        assert!(tb.error_bound_ns() >= 12_000 && tb.error_bound_ns() < 30_000, "{}", tb.error_bound_ns());
        let worst = assert_within_bound(&m, &tb, t0 + 100.0, m.t.get() - 100.0);
        assert!(worst > 1000.0, "the step did bend the line: {worst}");
        // Away from the step's segment the error is that of the anchors.
        let tick = (m.tsc)(t0 + 2.5e9).round() as i64;
        assert!((tb.to_ns(tick) - (t0 + 2.5e9) as i64).abs() <= 30);
        // A duration at the run's mean rate differs from the difference of its converted ends
        // by at most the rate's variation (here under 500 ppm of its length).
        let (a, b) = ((m.tsc)(t0 + 0.2e9).round() as i64, (m.tsc)(t0 + 0.7e9).round() as i64);
        let diff = tb.to_ns(b) - tb.to_ns(a);
        assert!((tb.duration_ns(b - a) - diff).abs() as f64 <= 500e-6 * diff as f64, "{} {diff}", tb.duration_ns(b - a));
    }

    #[test]
    fn segment_off_by_more_than_1000_ppm_is_flagged() {
        let t0 = 1e12;
        let m = Mock::new(move |t: f64| {
            let x = t - t0;
            // 3 GHz, but 1.5 ms extra (ticks at 3 GHz) between 1.0 s and 1.1 s: 15,000 ppm.
            x * 3.0 + if x < 1.0e9 { 0.0 } else if x < 1.1e9 { (x - 1.0e9) * 3.0 * 0.015 } else { 1e8 * 3.0 * 0.015 }
        });
        let tb = Timebase::fit(m.anchors(100e6, 2e9), Vec::new());
        let report = tb.report();
        assert!(report.status.starts_with("unreliable: the TSC rate of segment"), "{}", report.status);
    }

    #[test]
    fn ticks_jumping_backwards_are_flagged() {
        let t0 = 1e12;
        // The TSC is reset by 10^9 ticks half way (a suspend, a VM migration).
        let m = Mock::new(move |t: f64| if t < t0 + 1e9 { (t - t0) * 3.0 + 5e9 } else { (t - t0) * 3.0 + 4e9 });
        let tb = Timebase::fit(m.anchors(100e6, 2e9), Vec::new());
        assert!(tb.report().status.contains("went backwards"), "{}", tb.report().status);

        // Ticks outside the anchored span, and an end before its start, count at conversion.
        let m = Mock::new(|t| t * 2.0);
        let tb = Timebase::fit(m.anchors(100e6, 1e9), Vec::new());
        assert_eq!(tb.report().status, "ok");
        let first = tb.anchors()[0].tick;
        let (mut s, mut e) = (vec![first + 100, first + 10_000], vec![first + 50, first - 1_000_000]);
        tb.convert_calls(&mut s, &mut e);
        let status = tb.report().status;
        assert!(status.contains("1 timestamp(s) lie outside") && status.contains("2 call(s) end before"), "{status}");
    }

    #[test]
    fn monotonic_mode_is_the_identity() {
        let tb = Timebase::monotonic();
        let (mut s, mut e) = (vec![5, 7, -3], vec![6, 9, 1]);
        tb.convert_calls(&mut s, &mut e);
        assert_eq!((s, e), (vec![5, 7, -3], vec![6, 9, 1]));
        assert_eq!(tb.to_ns(123), 123);
        assert_eq!(tb.duration_ns(77), 77);
        let r = tb.report();
        assert_eq!((r.clock, r.tsc_hz, r.error_bound_ns, r.status.as_str()), ("monotonic", None, 0, "ok"));
    }

    #[test]
    fn unsorted_ticks_find_their_segment() {
        let m = Mock::new(|t| t * 2.5);
        let start = m.t.get();
        let tb = Timebase::fit(m.anchors(10e6, 1e9), Vec::new());
        let ts: Vec<f64> = (0..2000).map(|i| start + 100.0 + ((i * 7919) % 2000) as f64 * 4.9e5).collect();
        let mut s: Vec<i64> = ts.iter().map(|&t| (t * 2.5).round() as i64).collect();
        let mut e = s.clone();
        tb.convert_calls(&mut s, &mut e);
        for (c, t) in s.iter().zip(&ts) {
            assert!((*c as f64 - t).abs() <= tb.error_bound_ns() as f64);
        }
        assert_eq!(tb.report().status, "ok");
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn real_anchors_on_this_machine() {
        if tsc_unsafe_reason().is_some() {
            return; // a stand-in machine without a safe TSC: covered by the mock tests
        }
        let a = take_anchor().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = take_anchor().unwrap();
        let tb = Timebase::fit(vec![a, b], Vec::new());
        assert_eq!(tb.report().status, "ok");
        let hz = tb.tsc_hz().unwrap();
        assert!(hz > 1e8 && hz < 1e11, "{hz}");
        // A fresh reading converts to within the bound of a clock_gettime bracketing it
        // (extrapolated a little past the last anchor).
        let before = monotonic_ns();
        let t = fenced_tsc();
        let after = monotonic_ns();
        let c = tb.to_ns(t);
        assert!(c >= before - 2_000 && c <= after + 2_000, "{before} {c} {after}");
    }
}
