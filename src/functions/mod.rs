//! Functions compiled with `-finstrument-functions` (GCC, Clang; C, C++, Fortran): every call
//! of an instrumented function is a call of a region named after the function, recorded on the
//! thread's own recorder (so it nests with the program's regions and the OpenMP constructs).
//! The compiler's hooks (`__cyg_profile_func_enter`/`_exit`, in `adapters::functions`) hand in
//! the function's address; the region is keyed by it and named at finalize (`late`).
//!
//! Two paths with one outcome: `enter_fast`/`exit_fast` do the common case (a function the
//! thread has seen and records, its call the innermost one) on the thread's data directly, in
//! the plain running state; `enter`/`exit` do everything, through the generic `Recording`.
//!
//! What bounds the cost:
//! - a filter file (`SCOPE_PROFILER_FILTER`, Score-P's syntax, `filter`): with one, a function's
//!   names are resolved the first time it is called and the filter decides once whether it is
//!   recorded; an excluded function then costs a lookup in the thread's skip table per call;
//! - throttling (`SCOPE_PROFILER_THROTTLE=<calls>,<microseconds>`, default `100000,10` as in
//!   TAU; `off`): a function that a thread has called more than `<calls>` times, at less than
//!   `<microseconds>` per call on average (inclusive time), stops being recorded on every
//!   thread (on each once no call of it is open there); the calls recorded until then are
//!   kept, the region is marked `throttled` in the file, and finalize names the throttled
//!   functions in one message.

pub mod filter;

use crate::config::env;
use crate::late::{self, FnState, Named, Recording, ThreadLate, What, id_of, local_of};
use crate::recorder::ThreadData;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use parking_lot::Mutex;
use std::sync::OnceLock;

pub use filter::Filter;

/// Recording functions (the profiler runs and `SCOPE_PROFILER_FUNCTIONS` is not 0).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Throttling: calls on one thread beyond which a function may be throttled (u64::MAX: off),
/// and the time per call below which it is, in ns.
static THROTTLE_CALLS: AtomicU64 = AtomicU64::new(u64::MAX);
static THROTTLE_NS: AtomicU64 = AtomicU64::new(0);
/// The time per call below which a function is throttled, in clock ticks (0: not known yet;
/// converted at the first check, once the clock's rate is known).
static THROTTLE_TICKS: AtomicI64 = AtomicI64::new(0);
/// Throttled region ids, in the order they were throttled; `THROTTLED_COUNT` is its length,
/// which threads compare with what they have taken note of.
static THROTTLED: Mutex<Vec<u32>> = Mutex::new(Vec::new());
static THROTTLED_COUNT: AtomicU32 = AtomicU32::new(0);
/// The filter of this run (read at setup; one profile per process).
static FILTER: OnceLock<Option<Filter>> = OnceLock::new();

pub const DEFAULT_THROTTLE_CALLS: u64 = 100_000;
pub const DEFAULT_THROTTLE_US: f64 = 10.0;

/// What `SCOPE_PROFILER_THROTTLE` says: None for off.
pub fn parse_throttle(value: &str) -> Result<Option<(u64, f64)>, String> {
    let v = value.trim();
    if matches!(v.to_ascii_lowercase().as_str(), "0" | "off" | "no" | "false") {
        return Ok(None);
    }
    let (calls, us) = v.split_once(',').ok_or("expected <calls>,<microseconds> (for example 100000,10) or off")?;
    let calls: u64 = calls.trim().parse().map_err(|_| format!("'{}' is not a number of calls", calls.trim()))?;
    let us: f64 = us.trim().parse().map_err(|_| format!("'{}' is not a number of microseconds", us.trim()))?;
    if calls == 0 || !us.is_finite() || us < 0.0 {
        return Err("expected a positive number of calls and a non-negative number of microseconds".into());
    }
    Ok(Some((calls, us)))
}

/// Whether an instrumented program's first call should set profiling up (not with
/// `SCOPE_PROFILER_FUNCTIONS=0`, nor with profiling disabled).
pub fn wants_implicit_setup() -> bool {
    let off = |name: &str, value: bool| std::env::var(name).ok().and_then(|v| crate::config::env_bool(&v)) == Some(value);
    !off(env::FUNCTIONS, false) && !off(env::DISABLE, true)
}

/// The run starts: read the settings (`SCOPE_PROFILER_FUNCTIONS`, `_THROTTLE`, `_FILTER`).
pub fn on_setup() {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let on = match var(env::FUNCTIONS) {
        None => true,
        Some(v) => crate::config::env_bool(&v).unwrap_or_else(|| {
            crate::warn::once("env:functions", &format!("ignoring {}={v:?}: expected 0 or 1", env::FUNCTIONS));
            true
        }),
    };
    let throttle = match var(env::THROTTLE) {
        None => Some((DEFAULT_THROTTLE_CALLS, DEFAULT_THROTTLE_US)),
        Some(v) => parse_throttle(&v).unwrap_or_else(|e| {
            crate::warn::once("env:throttle", &format!("ignoring {}={v:?}: {e}; using {DEFAULT_THROTTLE_CALLS},{DEFAULT_THROTTLE_US}", env::THROTTLE));
            Some((DEFAULT_THROTTLE_CALLS, DEFAULT_THROTTLE_US))
        }),
    };
    match throttle {
        Some((calls, us)) => {
            THROTTLE_CALLS.store(calls, Ordering::Relaxed);
            THROTTLE_NS.store((us * 1000.0) as u64, Ordering::Relaxed);
        }
        None => THROTTLE_CALLS.store(u64::MAX, Ordering::Relaxed),
    }
    FILTER.get_or_init(|| {
        let path = var(env::FILTER)?;
        match Filter::read(std::path::Path::new(&path)) {
            Ok(f) => Some(f),
            Err(e) => {
                crate::warn::once("filter", &format!("{}={path}: {e}; every instrumented function is recorded", env::FILTER));
                None
            }
        }
    });
    ACTIVE.store(on, Ordering::Release);
}

/// Recording stops (finalize).
pub fn stop() {
    ACTIVE.store(false, Ordering::Release);
}

/// Whether calls are recorded now.
#[inline(always)]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

fn include(n: &Named<'_>) -> bool {
    FILTER.get().and_then(Option::as_ref).is_none_or(|f| f.includes(n.name, n.symbol, n.file, n.module))
}

#[inline(always)]
fn what() -> What {
    let include: Option<late::Include> = if FILTER.get().is_some_and(Option::is_some) { Some(include) } else { None };
    What::Function { include }
}

/// An instrumented function was entered. A function this thread does not record (excluded,
/// throttled) is put in the thread's skip table, which the hooks read first
/// (`profiler::site_thread`): its later calls and exits return there. Excluded and skipped
/// functions never touch `fn_overflow`, so that an enter and its exit agree on it whether or
/// not the skip table caught them.
#[inline(always)]
pub fn enter<R: Recording>(rec: &mut R, addr: u64) {
    let p = late::lookup(rec, late::key(0, addr), what);
    let id = id_of(p);
    if id == late::NOT_RECORDED {
        rec.skip_site(addr);
        return;
    }
    let local = local_of(p);
    let l = rec.late();
    if l.throttled_seen != THROTTLED_COUNT.load(Ordering::Relaxed) {
        note_throttled(l);
    }
    let overflow = l.fn_overflow > 0;
    let Some(st) = l.fns.get_mut(local) else { return };
    if st.skip {
        rec.skip_site(addr);
        return;
    }
    if overflow {
        // Nested beyond the thread's deepest stack: not recorded, counted, exit skipped.
        l.fn_overflow += 1;
        rec.dropped(id);
        return;
    }
    if st.pending && st.depth == 0 {
        st.skip = true;
        rec.skip_site(addr);
        return;
    }
    if rec.start(id) {
        if let Some(st) = rec.late().fns.get_mut(local) {
            st.depth += 1;
        }
    } else {
        // The thread's stack of open calls is full: this enter and every one until its exit
        // are not recorded (counted in the region's `dropped_calls`), and their exits are
        // skipped.
        rec.late().fn_overflow = 1;
        rec.dropped(id);
    }
}

/// An instrumented function returned (`end`: the clock when it did).
#[inline(always)]
pub fn exit<R: Recording>(rec: &mut R, addr: u64, end: i64) {
    let Some(p) = late::known(rec, late::key(0, addr)) else { return };
    let id = id_of(p);
    if id == late::NOT_RECORDED {
        return;
    }
    let local = local_of(p);
    let l = rec.late();
    match l.fns.get(local) {
        Some(st) if st.skip => return,
        _ if l.fn_overflow > 0 => {
            l.fn_overflow -= 1;
            return;
        }
        Some(st) if st.depth > 0 => {}
        _ => return,
    }
    let start = rec.innermost_start(id);
    rec.stop(id, end);
    let Some(st) = rec.late().fns.get_mut(local) else { return };
    st.depth -= 1;
    if let Some(start) = start {
        st.calls += 1;
        st.ticks = st.ticks.wrapping_add(end.wrapping_sub(start));
        if st.calls >= st.next_check {
            check_throttle(st);
        }
    }
}

/// The entry hook's fast path (`profiler::function_hook`): the common case of `enter` (a
/// function this thread has cached and records, no throttling news, no overflow, room on the
/// stack of open calls) done on the thread's data directly, with exactly the changes `enter`
/// makes then. None, having changed nothing, in every other case: `enter` decides.
#[inline(always)]
pub fn enter_fast(data: &mut ThreadData, l: &mut ThreadLate, addr: u64, now: impl FnOnce() -> Option<i64>) -> Option<()> {
    let p = l.cached(late::key(0, addr))?;
    let id = id_of(p);
    if id == late::NOT_RECORDED || l.fn_overflow != 0 || l.throttled_seen != THROTTLED_COUNT.load(Ordering::Relaxed) {
        return None;
    }
    let st = l.fns.get_mut(local_of(p))?;
    if st.skip || (st.pending && st.depth == 0) || data.open.len() >= data.open.capacity() {
        return None;
    }
    // The timestamp last, as in `open_call`: our own work stays outside the call. (`now` is
    // `clock::now_if_tsc`: a clock that is a call, CLOCK_MONOTONIC, takes the generic path, so
    // that this one stays free of calls.)
    let start = now()?;
    data.push_open(id, start);
    st.depth += 1;
    Some(())
}

/// The exit hook's fast path: the common case of `exit` (the function's recorded call is the
/// thread's innermost open call) with exactly the changes `exit` makes then; None, having
/// changed nothing, otherwise.
#[inline(always)]
pub fn exit_fast(data: &mut ThreadData, l: &mut ThreadLate, addr: u64, end: i64) -> Option<()> {
    let p = l.cached(late::key(0, addr))?;
    let id = id_of(p);
    if id == late::NOT_RECORDED || l.fn_overflow != 0 {
        return None;
    }
    let st = l.fns.get_mut(local_of(p))?;
    let start = match data.open.last() {
        Some(top) if top.id == id && st.depth > 0 && !st.skip => top.start,
        _ => return None,
    };
    if !data.close(id, end) {
        return None; // (cannot be: the innermost call is one of `id`)
    }
    st.depth -= 1;
    st.calls += 1;
    st.ticks = st.ticks.wrapping_add(end.wrapping_sub(start));
    if st.calls >= st.next_check {
        check_throttle(st);
    }
    Some(())
}

/// Every `THROTTLE_CALLS` calls of a function on a thread: throttle it if its calls took less
/// than the limit on average.
#[cold]
#[inline(never)]
fn check_throttle(st: &mut FnState) {
    let limit = THROTTLE_CALLS.load(Ordering::Relaxed);
    st.next_check = st.calls.saturating_add(limit.min(u64::MAX / 2));
    if limit == u64::MAX || st.calls <= limit || st.pending {
        return;
    }
    let per_call = st.ticks / st.calls.max(1) as i64;
    if per_call < throttle_ticks() {
        st.pending = true;
        let mut list = THROTTLED.lock();
        if !list.contains(&st.id) {
            list.push(st.id);
            THROTTLED_COUNT.store(list.len() as u32, Ordering::Release);
        }
    }
}

/// The throttling's time per call in clock ticks (the clock's rate over the run so far).
fn throttle_ticks() -> i64 {
    let t = THROTTLE_TICKS.load(Ordering::Relaxed);
    if t > 0 {
        return t;
    }
    let ns = THROTTLE_NS.load(Ordering::Relaxed) as f64;
    let tb = crate::clock::live_timebase();
    // ns per tick from a long span: 1e12 ticks.
    let ns_per_tick = tb.duration_ns(1_000_000_000_000) as f64 / 1e12;
    let ticks = if ns_per_tick > 0.0 { (ns / ns_per_tick).round() as i64 } else { ns as i64 };
    let ticks = ticks.max(1);
    THROTTLE_TICKS.store(ticks, Ordering::Relaxed);
    ticks
}

/// Another thread throttled functions: stop recording them here too.
#[cold]
#[inline(never)]
fn note_throttled(l: &mut ThreadLate) {
    let list = THROTTLED.lock();
    for id in list.iter().skip(l.throttled_seen as usize) {
        for st in l.fns.iter_mut().filter(|s| s.id == *id) {
            st.pending = true;
        }
    }
    l.throttled_seen = list.len() as u32;
}

/// At finalize: the names of the throttled functions' regions (`names`: the registry's, by
/// id), reported once on stderr.
pub fn throttled(names: &[String]) -> std::collections::HashSet<String> {
    let list = THROTTLED.lock();
    let mut out: Vec<String> = Vec::new();
    for &id in list.iter() {
        if let Some(n) = names.get(id as usize) {
            if !out.contains(n) {
                out.push(n.clone());
            }
        }
    }
    if !out.is_empty() {
        let calls = THROTTLE_CALLS.load(Ordering::Relaxed);
        let us = THROTTLE_NS.load(Ordering::Relaxed) as f64 / 1000.0;
        let shown: Vec<String> = out.iter().take(10).map(|n| format!("'{n}'")).collect();
        let more = if out.len() > 10 { format!(" and {} more", out.len() - 10) } else { String::new() };
        crate::warn::once(
            "throttled",
            &format!(
                "{} instrumented function(s) throttled (called more than {calls} times on a thread at less than {us} us per call): {}{more}; their later calls are not recorded, and their regions are marked `throttled` in the file (SCOPE_PROFILER_THROTTLE, SCOPE_PROFILER_FILTER)",
                out.len(),
                shown.join(", ")
            ),
        );
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock;
    use crate::recorder::testing::Mock;

    impl Mock {
        /// A hook as the adapter runs it: the skip table, then (if `fast`) the fast path, then
        /// the generic one.
        fn hook(&mut self, fast: bool, addr: u64, entry: bool) {
            if self.skip.contains(addr) {
                return;
            }
            let end = clock::now();
            if fast {
                let done = if entry { enter_fast(&mut self.data, &mut self.late, addr, || Some(clock::now())) } else { exit_fast(&mut self.data, &mut self.late, addr, end) };
                if done.is_some() {
                    return;
                }
            }
            if entry { enter(self, addr) } else { exit(self, addr, end) }
        }

        /// Everything the file would report, and the state that decides the next calls (not
        /// the times, which the two runs read from the clock apart).
        fn state(&self, addrs: &[u64]) -> String {
            let stats: Vec<(u32, u64, usize)> = (0..=self.next_id.max(8)).map(|id| (id, self.data.stats().get(id).map_or(0, |s| s.count), self.data.logs().get(id as usize).map_or(0, |l| l.len()))).collect();
            let open = self.data.open.iter().fold((0usize, 0xcbf2_9ce4_8422_2325u64), |(n, h), c| (n + 1, (h ^ c.id as u64).wrapping_mul(0x100_0000_01b3)));
            let fns: Vec<(u32, u32, u64, u64, bool, bool)> = self.late.fns.iter().map(|f| (f.id, f.depth, f.calls, f.next_check, f.skip, f.pending)).collect();
            let skipped: Vec<bool> = addrs.iter().map(|&a| self.skip.contains(a)).collect();
            format!("stats {stats:?}\ndropped {:?}\nopen {open:?}\nfns {fns:?}\noverflow {} seen {}\nskipped {skipped:?}", self.data.dropped, self.late.fn_overflow, self.late.throttled_seen)
        }
    }

    /// The fast paths change exactly what the generic path changes: two threads' recorders
    /// driven in lockstep through the same calls (nesting, recursion deeper than the stack of
    /// open calls, exits skipped as by a longjmp, throttling, a function another thread
    /// throttled), one with the fast paths in front of the generic path, one without, end in
    /// the same counts, drops, open calls and per-function state at every step.
    #[test]
    fn the_fast_paths_change_what_the_generic_path_changes() {
        // Throttle after 300 calls whatever their time (no other test of this process sets
        // these up).
        THROTTLE_CALLS.store(300, Ordering::Relaxed);
        THROTTLE_TICKS.store(i64::MAX / 4, Ordering::Relaxed);
        let addrs: Vec<u64> = (1..=6u64).map(|k| 0x7f00_dead_0000 + k * 0x40).collect();
        let (mut generic, mut fast) = (Mock::new(), Mock::new());
        let mut stack: Vec<u64> = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut both = |addr: u64, entry: bool, step: usize, check: bool| {
            generic.hook(false, addr, entry);
            fast.hook(true, addr, entry);
            if check {
                let (a, b) = (generic.state(&addrs), fast.state(&addrs));
                assert_eq!(a, b, "step {step}: generic (left) and fast (right) differ");
            }
        };
        for step in 0..60_000usize {
            let r = next();
            match r % 16 {
                // Deep recursion now and then: beyond the 4096 calls a thread may have open.
                _ if step % 10_000 == 5_000 => {
                    let f = addrs[(r >> 8) as usize % addrs.len()];
                    for k in 0..crate::recorder::MAX_DEPTH + 10 {
                        both(f, true, step, k % 61 == 0 || k + 50 > crate::recorder::MAX_DEPTH);
                    }
                    for k in 0..crate::recorder::MAX_DEPTH + 10 {
                        both(f, false, step, k % 61 == 0 || k < 50);
                    }
                }
                // A longjmp: the innermost calls end without their exits.
                1 if stack.len() > 2 && r % 5 == 0 => {
                    let keep = stack.len() - 1 - (r >> 8) as usize % 2;
                    stack.truncate(keep);
                }
                0..=8 if stack.len() < 40 => {
                    let f = addrs[(r >> 8) as usize % addrs.len()];
                    stack.push(f);
                    both(f, true, step, true);
                }
                _ => {
                    if let Some(f) = stack.pop() {
                        both(f, false, step, true);
                    }
                }
            }
        }
        while let Some(f) = stack.pop() {
            both(f, false, usize::MAX, true);
        }
        assert!(generic.late.fns.iter().any(|f| f.pending), "nothing was throttled: {}", generic.state(&addrs));
        assert!(generic.data.dropped.iter().any(|&d| d > 0), "nothing was dropped: {}", generic.state(&addrs));
    }

    #[test]
    fn throttle_settings() {
        assert_eq!(parse_throttle("100000,10"), Ok(Some((100_000, 10.0))));
        assert_eq!(parse_throttle(" 5 , 0.5 "), Ok(Some((5, 0.5))));
        assert_eq!(parse_throttle("off"), Ok(None));
        assert_eq!(parse_throttle("0"), Ok(None));
        assert!(parse_throttle("10").is_err());
        assert!(parse_throttle("x,1").is_err());
        assert!(parse_throttle("0,1").is_err());
        assert!(parse_throttle("5,-1").is_err());
        assert!(parse_throttle("5,nan").is_err());
    }
}
