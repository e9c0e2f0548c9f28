//! The hooks GCC and Clang call at the entry and exit of every function compiled with
//! `-finstrument-functions` (`__cyg_profile_func_enter`/`_exit`). A program not built with
//! the flag never calls them. Like `ffi`: panics caught here; the work is in `functions`.
//!
//! The first call of an instrumented program that has not set profiling up sets it up as
//! `sp_setup(NULL)` would (unless `SCOPE_PROFILER_FUNCTIONS=0` or `SCOPE_PROFILER_DISABLE=1`),
//! and the profile is written at the end of the run. While profiling is off (disabled, not set
//! up, finalized) a hook costs a load or two and returns.

use super as recording;
use crate::{clock, functions};
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};

/// The implicit setup was tried (once per process).
static TRIED: AtomicBool = AtomicBool::new(false);

/// Entry of an instrumented function (GCC's and Clang's hook). Nothing but a check and a jump
/// when not recording.
#[unsafe(no_mangle)]
pub extern "C" fn __cyg_profile_func_enter(this_fn: *mut c_void, _call_site: *mut c_void) {
    if functions::active() {
        if !recording::site_skipped(this_fn as u64) {
            enter(this_fn)
        }
    } else {
        not_active(this_fn)
    }
}

/// Exit of an instrumented function (GCC's and Clang's hook).
#[unsafe(no_mangle)]
pub extern "C" fn __cyg_profile_func_exit(this_fn: *mut c_void, _call_site: *mut c_void) {
    if functions::active() && !recording::site_skipped(this_fn as u64) {
        exit(this_fn)
    }
}

#[inline(never)]
fn enter(this_fn: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| recording::on_thread(|r| functions::enter(r, this_fn as u64))));
}

#[inline(never)]
fn exit(this_fn: *mut c_void) {
    let end = clock::now_stop();
    let _ = catch_unwind(AssertUnwindSafe(|| recording::on_thread(|r| functions::exit(r, this_fn as u64, end))));
}

/// Not recording: the first call of a program that never set profiling up sets it up.
#[cold]
#[inline(never)]
fn not_active(this_fn: *mut c_void) {
    if TRIED.load(Ordering::Relaxed) || !recording::not_set_up() {
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
