//! The hooks GCC and Clang call at the entry and exit of every function compiled with
//! `-finstrument-functions` (`__cyg_profile_func_enter`/`_exit`). A program not built with
//! the flag never calls them. Like `ffi`: panics caught here; the work is in `functions`.
//!
//! The first call of an instrumented program that has not set profiling up sets it up as
//! `sp_setup(NULL)` would (unless `SCOPE_PROFILER_FUNCTIONS=0` or `SCOPE_PROFILER_DISABLE=1`),
//! and the profile is written at the end of the run. While profiling is off (disabled, not set
//! up, finalized) a hook costs a load or two and returns.

use super::{self as recording, Hook};
use crate::{clock, functions};
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};

/// The implicit setup was tried (once per process).
static TRIED: AtomicBool = AtomicBool::new(false);

/// Entry of an instrumented function (GCC's and Clang's hook). Nothing but a check and a jump
/// when not recording; a function this thread skips (excluded, throttled) returns after the
/// skip table; a recorded one takes the fast path, and only what that does not handle (a
/// function's first call on the thread, throttling news, a full stack, counter sources) the
/// generic one.
#[unsafe(no_mangle)]
pub extern "C" fn __cyg_profile_func_enter(this_fn: *mut c_void, _call_site: *mut c_void) {
    if functions::active() {
        if !recording::site_skipped(this_fn as u64) {
            on_enter(this_fn)
        }
    } else {
        not_active(this_fn)
    }
}

/// Exit of an instrumented function (GCC's and Clang's hook): the clock is read first (after
/// the skip table), then as the entry hook.
#[unsafe(no_mangle)]
pub extern "C" fn __cyg_profile_func_exit(this_fn: *mut c_void, _call_site: *mut c_void) {
    if functions::active() && !recording::site_skipped(this_fn as u64) {
        on_exit(this_fn)
    }
}

// The hooks' bodies, apart from the exports so that a hook with the functions off, or of a
// function skipped, is the checks alone (no frame to set up for the paths below).

#[inline(never)]
extern "C" fn on_enter(this_fn: *mut c_void) {
    let addr = this_fn as u64;
    // (Nothing in the fast path panics; the guard is there for the generic one's sake.)
    let hook = catch_unwind(AssertUnwindSafe(|| recording::function_hook(|| (), |d, l, ()| functions::enter_fast(d, l, addr, clock::now_if_tsc))));
    if let Ok(Hook::Slow(())) = hook {
        enter(this_fn)
    }
}

#[inline(never)]
extern "C" fn on_exit(this_fn: *mut c_void) {
    let addr = this_fn as u64;
    let hook = catch_unwind(AssertUnwindSafe(|| recording::function_hook(clock::now_stop, |d, l, end| functions::exit_fast(d, l, addr, end))));
    if let Ok(Hook::Slow(end)) = hook {
        exit(this_fn, end)
    }
}

#[inline(never)]
fn enter(this_fn: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| recording::on_thread(|r| functions::enter(r, this_fn as u64))));
}

#[inline(never)]
fn exit(this_fn: *mut c_void, end: i64) {
    let _ = catch_unwind(AssertUnwindSafe(|| recording::on_thread(|r| functions::exit(r, this_fn as u64, end))));
}

/// Not recording: the first call of a program that never set profiling up sets it up.
#[cold]
#[inline(never)]
fn not_active(this_fn: *mut c_void) {
    if TRIED.load(Ordering::Relaxed) || !recording::not_set_up() {
        recording::stopped_hook();
        return;
    }
    if TRIED.swap(true, Ordering::AcqRel) {
        return;
    }
    let _ = catch_unwind(|| {
        if !functions::wants_implicit_setup() {
            return;
        }
        recording::note_source("functions", "functions compiled with -finstrument-functions");
        match recording::set_up(recording::ImplicitOrigin::InstrumentedFunction) {
            Ok(_) => {}
            Err(e) => crate::warn::once("implicit-setup-failed", &format!("setting profiling up for the instrumented functions failed: {e}")),
        }
    });
    if functions::active() {
        enter(this_fn);
    }
}
