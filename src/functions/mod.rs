//! Functions compiled with `-finstrument-functions` (GCC, Clang; C, C++, Fortran): every call
//! of an instrumented function is a call of a region named after the function, recorded on the
//! thread's own recorder (so it nests with the program's regions and the OpenMP constructs).
//! The compiler's hooks (`__cyg_profile_func_enter`/`_exit`, in `ffi_functions`) hand in the
//! function's address; the region is keyed by it and named at finalize (`late`).
//!
//! What bounds the cost:
//! - a filter file (`SCOPE_PROFILER_FILTER`, Score-P's syntax, `filter`): with one, a function's
//!   names are resolved the first time it is called and the filter decides once whether it is
//!   recorded; an excluded function then costs a cache lookup per call;
//! - throttling (`SCOPE_PROFILER_THROTTLE=<calls>,<microseconds>`, default `100000,10` as in
//!   TAU; `off`): a function that a thread has called more than `<calls>` times, at less than
//!   `<microseconds>` per call on average (inclusive time), stops being recorded on every
//!   thread (on each once no call of it is open there); the calls recorded until then are
//!   kept, the region is marked `throttled` in the file, and finalize names the throttled
//!   functions in one message.

pub mod filter;

use crate::config::env;
use crate::late::{self, FnState, Named, Recording, ThreadLate, What, id_of, local_of};
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

/// An instrumented function was entered.
#[inline(always)]
pub fn enter<R: Recording>(rec: &mut R, addr: u64) {
    {
        let l = rec.late();
        if l.fn_overflow > 0 {
            l.fn_overflow += 1;
            return;
        }
    }
    let p = late::lookup(rec, late::key(0, addr), what);
    let id = id_of(p);
    if id == late::NOT_RECORDED {
        return;
    }
    let local = local_of(p);
    let l = rec.late();
    if l.throttled_seen != THROTTLED_COUNT.load(Ordering::Relaxed) {
        note_throttled(l);
    }
    let Some(st) = l.fns.get_mut(local) else { return };
    if st.skip {
        return;
    }
    if st.pending && st.depth == 0 {
        st.skip = true;
        return;
    }
    if rec.start(id) {
        if let Some(st) = rec.late().fns.get_mut(local) {
            st.depth += 1;
        }
    } else {
        // The thread's stack of open calls is full: this enter and every one until its exit
        // are not recorded, and their exits are skipped.
        rec.late().fn_overflow = 1;
    }
}

/// An instrumented function returned (`end`: the clock when it did).
#[inline(always)]
pub fn exit<R: Recording>(rec: &mut R, addr: u64, end: i64) {
    {
        let l = rec.late();
        if l.fn_overflow > 0 {
            l.fn_overflow -= 1;
            return;
        }
    }
    let Some(p) = late::known(rec, late::key(0, addr)) else { return };
    let id = id_of(p);
    if id == late::NOT_RECORDED {
        return;
    }
    let local = local_of(p);
    match rec.late().fns.get(local) {
        Some(st) if !st.skip && st.depth > 0 => {}
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
