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
use std::sync::atomic::{AtomicU64, Ordering};

/// The implicit setup (once per process): not tried yet, under way on the thread this names
/// (its `pthread_self`), or done (whatever it did).
static FIRST: AtomicU64 = AtomicU64::new(UNTRIED);
const UNTRIED: u64 = 0;
const DONE: u64 = u64::MAX;
/// How long a thread whose first hook comes while another thread's sets profiling up waits
/// for it before going on unrecorded (a setup takes milliseconds; a wait that long means the
/// setup waits for something this thread holds, such as the loader's lock in a constructor).
const SETUP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Entry of an instrumented function (GCC's and Clang's hook). Nothing but a check and a jump
/// when not recording; a function this thread skips (excluded, throttled) returns after the
/// skip table; a recorded one takes the fast path, and only what that does not handle (a
/// function's first call on the thread, throttling news, a full stack, counter sources) the
/// generic one.
#[unsafe(no_mangle)]
pub extern "C" fn __cyg_profile_func_enter(this_fn: *mut c_void, _call_site: *mut c_void) {
    if functions::active() {
        if let Some(th) = recording::site_thread(this_fn as u64) {
            on_enter(this_fn, th)
        }
    } else {
        not_active(this_fn)
    }
}

/// Exit of an instrumented function (GCC's and Clang's hook): the clock is read first (after
/// the skip table), then as the entry hook.
#[unsafe(no_mangle)]
pub extern "C" fn __cyg_profile_func_exit(this_fn: *mut c_void, _call_site: *mut c_void) {
    if functions::active() {
        if let Some(th) = recording::site_thread(this_fn as u64) {
            on_exit(this_fn, th)
        }
    }
}

// The hooks' bodies, apart from the exports so that a hook with the functions off, or of a
// function skipped, is the checks alone (no frame to set up for the paths below).

#[inline(never)]
extern "C" fn on_enter(this_fn: *mut c_void, th: recording::HookThread) {
    let addr = this_fn as u64;
    // (Nothing in the fast path panics; the guard is there for the generic one's sake.)
    let hook = catch_unwind(AssertUnwindSafe(|| recording::function_hook(th, || (), |d, l, ()| functions::enter_fast(d, l, addr, clock::now_if_tsc))));
    if let Ok(Hook::Slow(())) = hook {
        enter(this_fn)
    }
}

#[inline(never)]
extern "C" fn on_exit(this_fn: *mut c_void, th: recording::HookThread) {
    let addr = this_fn as u64;
    let hook = catch_unwind(AssertUnwindSafe(|| recording::function_hook(th, clock::now_stop, |d, l, end| functions::exit_fast(d, l, addr, end))));
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

/// Not recording: the first call of a program that never set profiling up sets it up. The
/// first hooks of other threads meanwhile wait for that setup and are then recorded (threads
/// released together into instrumented code would otherwise lose their first milliseconds of
/// calls, uncounted); a hook inside the setup itself, on its own thread, is not recorded.
#[cold]
#[inline(never)]
fn not_active(this_fn: *mut c_void) {
    let mut first = FIRST.load(Ordering::Acquire);
    if first == DONE || (first == UNTRIED && !recording::not_set_up()) {
        recording::stopped_hook();
        return;
    }
    // SAFETY: no preconditions.
    let me = unsafe { libc::pthread_self() } as u64;
    if first == UNTRIED {
        match FIRST.compare_exchange(UNTRIED, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                set_up();
                FIRST.store(DONE, Ordering::Release);
                if functions::active() {
                    enter(this_fn);
                }
                return;
            }
            Err(now) => first = now,
        }
    }
    if first == me {
        return;
    }
    if first != DONE {
        wait_for_setup();
    }
    if functions::active() {
        enter(this_fn);
    } else {
        recording::stopped_hook();
    }
}

/// The implicit setup, on the thread of the process's first hook.
fn set_up() {
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
}

/// Wait (sleeping) until the first hook's setup is done, at most `SETUP_WAIT`; the program's
/// `errno` is kept.
#[cold]
fn wait_for_setup() {
    // SAFETY: this thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    let until = std::time::Instant::now() + SETUP_WAIT;
    while FIRST.load(Ordering::Acquire) != DONE && !recording::switched_off() {
        if std::time::Instant::now() >= until {
            crate::warn::once("implicit-setup-wait", &format!("a thread waited {} s for profiling to be set up by another thread's first instrumented call, and went on: its calls before the setup ends are not recorded", SETUP_WAIT.as_secs()));
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}
