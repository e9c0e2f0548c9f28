//! The OpenMP tools interface (OMPT, OpenMP 5.0 `omp-tools.h`) as far as the library uses it:
//! `ompt_start_tool`, which the OpenMP runtime looks for in the process (the library linked or
//! preloaded) or in the libraries `OMP_TOOL_LIBRARIES` names, and the callbacks it registers.
//! Like `ffi`: the C types and values, pointers checked, panics caught here; the work is in
//! `openmp` (the regions) and the recording (through `adapters`).
//!
//! `ompt_start_tool` returns NULL, so that the runtime runs with no tool at all, when
//! `SCOPE_PROFILER_OPENMP=0` or `SCOPE_PROFILER_DISABLE=1`, when it was called before (one
//! registration per process: a program linked with the library that also names it in
//! `OMP_TOOL_LIBRARIES`), and when another copy of the library in the process is the one the
//! program uses.

#![allow(non_camel_case_types)]

use crate::late::{Team, teams};
use crate::openmp::{self, Settings};
use super as recording;
use crate::{clock, warn};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};

#[repr(C)]
#[derive(Clone, Copy)]
pub union ompt_data_t {
    pub value: u64,
    pub ptr: *mut c_void,
}

pub type ompt_interface_fn_t = Option<unsafe extern "C" fn()>;
pub type ompt_function_lookup_t = Option<unsafe extern "C" fn(name: *const c_char) -> ompt_interface_fn_t>;
pub type ompt_initialize_t = Option<unsafe extern "C" fn(lookup: ompt_function_lookup_t, initial_device_num: c_int, tool_data: *mut ompt_data_t) -> c_int>;
pub type ompt_finalize_t = Option<unsafe extern "C" fn(tool_data: *mut ompt_data_t)>;
type ompt_set_callback_t = unsafe extern "C" fn(event: c_int, callback: ompt_interface_fn_t) -> c_int;

#[repr(C)]
pub struct ompt_start_tool_result_t {
    pub initialize: ompt_initialize_t,
    pub finalize: ompt_finalize_t,
    pub tool_data: ompt_data_t,
}

// ompt_callbacks_t
const CB_PARALLEL_BEGIN: c_int = 3;
const CB_PARALLEL_END: c_int = 4;
const CB_TASK_CREATE: c_int = 5;
const CB_TASK_SCHEDULE: c_int = 6;
const CB_IMPLICIT_TASK: c_int = 7;
const CB_SYNC_REGION_WAIT: c_int = 16;
const CB_WORK: c_int = 20;
const CB_SYNC_REGION: c_int = 23;
// ompt_set_result_t: the callback is called at least sometimes.
const SET_SOMETIMES: c_int = 3;
// ompt_scope_endpoint_t
const SCOPE_BEGIN: c_int = 1;
const SCOPE_END: c_int = 2;
// ompt_task_flag_t, ompt_parallel_flag_t
const TASK_INITIAL: c_int = 0x1;
const TASK_EXPLICIT: c_int = 0x4;
const PARALLEL_LEAGUE: c_int = 0x4000_0000;

/// The result handed to the runtime (it may write `tool_data`: writable memory).
static mut RESULT: ompt_start_tool_result_t =
    ompt_start_tool_result_t { initialize: Some(initialize), finalize: Some(finalize), tool_data: ompt_data_t { value: 0 } };
static STARTED: AtomicBool = AtomicBool::new(false);
/// The tool started; a program without a setup is set up at its first parallel region.
static PENDING_SETUP: AtomicBool = AtomicBool::new(false);
static TASKS: AtomicBool = AtomicBool::new(false);

/// Called by the OpenMP runtime at its initialization (OpenMP 5.0, 4.2.1).
#[unsafe(no_mangle)]
pub extern "C" fn ompt_start_tool(_omp_version: c_uint, _runtime_version: *const c_char) -> *mut ompt_start_tool_result_t {
    catch_unwind(|| {
        let disabled = std::env::var(crate::config::env::DISABLE).ok().and_then(|v| crate::config::env_bool(&v)) == Some(true);
        let s = Settings::from_env();
        if disabled || !s.on || recording::another_copy_is_used() || STARTED.swap(true, Ordering::AcqRel) {
            return std::ptr::null_mut();
        }
        TASKS.store(s.tasks, Ordering::Relaxed);
        &raw mut RESULT
    })
    .unwrap_or(std::ptr::null_mut())
}

fn set(set_callback: ompt_set_callback_t, event: c_int, callback: *const ()) -> bool {
    // SAFETY: the runtime's ompt_set_callback with one of its events and a callback of the
    // signature the event has (each is declared below with the standard's signature).
    let cb: ompt_interface_fn_t = unsafe { std::mem::transmute::<*const (), ompt_interface_fn_t>(callback) };
    unsafe { set_callback(event, cb) >= SET_SOMETIMES }
}

unsafe extern "C" fn initialize(lookup: ompt_function_lookup_t, _initial_device_num: c_int, _tool_data: *mut ompt_data_t) -> c_int {
    catch_unwind(AssertUnwindSafe(|| {
        let Some(lookup) = lookup else { return 0 };
        // SAFETY: the runtime's lookup with a NUL-terminated name.
        let Some(found) = (unsafe { lookup(c"ompt_set_callback".as_ptr()) }) else { return 0 };
        // SAFETY: the entry point the standard names ompt_set_callback has this signature.
        let set_callback: ompt_set_callback_t = unsafe { std::mem::transmute::<unsafe extern "C" fn(), ompt_set_callback_t>(found) };
        let ok = set(set_callback, CB_PARALLEL_BEGIN, on_parallel_begin as *const ())
            && set(set_callback, CB_PARALLEL_END, on_parallel_end as *const ())
            && set(set_callback, CB_IMPLICIT_TASK, on_implicit_task as *const ());
        if !ok {
            warn::once("ompt-callbacks", "the OpenMP runtime does not report parallel regions to tools: no OpenMP constructs are recorded");
            return 0;
        }
        set(set_callback, CB_SYNC_REGION, on_sync_region as *const ());
        set(set_callback, CB_SYNC_REGION_WAIT, on_sync_region_wait as *const ());
        set(set_callback, CB_WORK, on_work as *const ());
        if TASKS.load(Ordering::Relaxed) {
            set(set_callback, CB_TASK_CREATE, on_task_create as *const ());
            set(set_callback, CB_TASK_SCHEDULE, on_task_schedule as *const ());
        }
        openmp::note_tool_started();
        openmp::note_runtime(found as usize as u64);
        recording::note_source("openmp", "OpenMP tools interface (OMPT)");
        // A program that has not set profiling up (the library only named by
        // OMP_TOOL_LIBRARIES, or linked for this) is set up at its first parallel region: not
        // here, inside the runtime's initialization, which setting up would call back into
        // (omp_get_max_threads for the metadata), nor while a setup is under way (the one
        // that started the runtime).
        PENDING_SETUP.store(true, Ordering::Release);
        1
    }))
    .unwrap_or(0)
}

/// The runtime shuts down. The profile is written at the end of the run (`sp_finalize`,
/// `MPI_Finalize` or exit), not here.
unsafe extern "C" fn finalize(_tool_data: *mut ompt_data_t) {}

/// Run `f` on the calling thread's recorder, never unwinding into the runtime.
#[inline(always)]
fn record(f: impl FnOnce(&mut recording::Recorder<'_>)) {
    let _ = catch_unwind(AssertUnwindSafe(|| recording::on_thread(f)));
}

/// A construct's begin or end (`endpoint`) on this thread: the end's time is read first,
/// before anything else is done for it.
#[inline(always)]
fn scoped(endpoint: c_int, begin: impl FnOnce(&mut recording::Recorder<'_>), end: impl FnOnce(&mut recording::Recorder<'_>, i64)) {
    scoped_or_late(endpoint, false, begin, end)
}

/// `scoped`, where an end that is `late` is not read: its time is the team's
/// (`openmp::UNREAD`).
#[inline(always)]
fn scoped_or_late(endpoint: c_int, late: bool, begin: impl FnOnce(&mut recording::Recorder<'_>), end: impl FnOnce(&mut recording::Recorder<'_>, i64)) {
    match endpoint {
        SCOPE_BEGIN => record(begin),
        SCOPE_END if late => record(|r| end(r, openmp::UNREAD)),
        SCOPE_END => {
            let t = clock::now_stop();
            record(|r| end(r, t));
        }
        _ => {}
    }
}

/// Whether a sync region's end (or its wait's) is that of the barrier that ends a worker's part
/// of a parallel region, as libomp reports it when the worker is next given work: an implicit
/// barrier with no region (it ended) and no code pointer (a worker's end barrier has none). Its
/// end is the team's, so the clock is not read for it (`openmp::UNREAD`); where the team's end
/// is not known when it is recorded, the clock is read then.
#[inline(always)]
fn ends_a_workers_part(kind: c_int, parallel_data: *const ompt_data_t, codeptr: *const c_void) -> bool {
    // ompt_sync_region_barrier_implicit, _implicit_parallel
    matches!(kind, 2 | 9) && parallel_data.is_null() && codeptr.is_null()
}

/// The value of a data word the runtime hands us, 0 for NULL.
#[inline(always)]
unsafe fn value(d: *const ompt_data_t) -> u64 {
    // SAFETY: the runtime passes a valid data word or NULL.
    if d.is_null() { 0 } else { unsafe { (*d).value } }
}

unsafe extern "C" fn on_parallel_begin(
    _encountering_task_data: *mut ompt_data_t,
    _encountering_task_frame: *const c_void,
    parallel_data: *mut ompt_data_t,
    _requested_parallelism: c_uint,
    flags: c_int,
    codeptr_ra: *const c_void,
) {
    if PENDING_SETUP.load(Ordering::Relaxed) {
        set_up_now();
    }
    if parallel_data.is_null() || !openmp::active() {
        return;
    }
    let _ = catch_unwind(|| {
        // The team, shared with the region's threads through its data word (a slot that lives
        // as long as the process, taken again after the region's end once no thread holds it).
        let (codeptr, league) = (codeptr_ra as u64, flags & PARALLEL_LEAGUE != 0);
        let team: &'static Team = recording::on_thread(|r| openmp::parallel_begin(r, codeptr, league)).unwrap_or_else(|| {
            // A thread without a recorder: a slot of the shared ring (inside the runtime, no
            // code pointer).
            let codeptr = if openmp::in_runtime(codeptr) { 0 } else { codeptr };
            teams::take_orphan(openmp::team_key(&[], codeptr, league))
        });
        // SAFETY: the region's data word, ours to write.
        unsafe { (*parallel_data).ptr = team as *const Team as *mut c_void };
    });
}

unsafe extern "C" fn on_parallel_end(parallel_data: *mut ompt_data_t, _encountering_task_data: *mut ompt_data_t, _flags: c_int, _codeptr_ra: *const c_void) {
    if parallel_data.is_null() {
        return;
    }
    // SAFETY: the word on_parallel_begin wrote, or 0.
    let p = unsafe { (*parallel_data).ptr } as *const Team;
    if p.is_null() {
        return;
    }
    // SAFETY: a slot on_parallel_begin took (slots are never freed); the word is cleared, so
    // that the region is ended once.
    let team = unsafe {
        (*parallel_data).ptr = std::ptr::null_mut();
        &*p
    };
    // The primary thread's part ended just before and set the team's end (one clock read
    // less per region); where it was not seen, now.
    if team.end() == 0 {
        team.set_end(clock::now_stop());
    }
    team.ended();
}

/// The team in a region's data word.
unsafe fn team_of(parallel_data: *const ompt_data_t) -> Option<&'static Team> {
    if parallel_data.is_null() {
        return None;
    }
    // SAFETY: the runtime's word for the region: on_parallel_begin's team, or 0.
    let p = unsafe { (*parallel_data).ptr } as *const Team;
    if p.is_null() {
        return None;
    }
    // SAFETY: a slot on_parallel_begin took (never freed); the region has not ended (its
    // threads begin before its primary thread ends it), so the slot is still its team.
    Some(unsafe { &*p })
}

/// The first parallel region of a program that has not set profiling up: set it up (once).
#[cold]
#[inline(never)]
fn set_up_now() {
    if !PENDING_SETUP.swap(false, Ordering::AcqRel) {
        return;
    }
    let _ = catch_unwind(|| {
        if recording::not_set_up() {
            if let Err(e) = recording::set_up(recording::ImplicitOrigin::OpenMpTool) {
                warn::once("implicit-setup-failed", &format!("setting profiling up for the OpenMP tool failed: {e}"));
            }
        }
    });
}

unsafe extern "C" fn on_implicit_task(
    endpoint: c_int,
    parallel_data: *mut ompt_data_t,
    _task_data: *mut ompt_data_t,
    _actual_parallelism: c_uint,
    index: c_uint,
    flags: c_int,
) {
    if !openmp::active() {
        return;
    }
    // An initial task is a league's team (`omp teams`: its region's data word holds the
    // league) or the program's own (no team: not recorded).
    let initial = flags & TASK_INITIAL != 0;
    match endpoint {
        SCOPE_BEGIN => {
            // SAFETY: see `team_of`.
            let team = unsafe { team_of(parallel_data) };
            if initial && team.is_none() {
                return;
            }
            record(|r| openmp::implicit_task_begin(r, team, index != 0));
        }
        // A worker's part: reported after its team ended, at the team's end (`openmp::UNREAD`).
        SCOPE_END if index != 0 && !initial => record(|r| openmp::implicit_task_end(r, openmp::UNREAD, false, false)),
        SCOPE_END => {
            let end = clock::now_stop();
            record(|r| openmp::implicit_task_end(r, end, initial, index == 0));
        }
        _ => {}
    }
}

unsafe extern "C" fn on_sync_region(kind: c_int, endpoint: c_int, parallel_data: *mut ompt_data_t, _task_data: *mut ompt_data_t, codeptr_ra: *const c_void) {
    if !openmp::active() {
        return;
    }
    let late = ends_a_workers_part(kind, parallel_data, codeptr_ra);
    scoped_or_late(endpoint, late, |r| openmp::sync_begin(r, kind, codeptr_ra as u64), |r, end| openmp::sync_end(r, end));
}

unsafe extern "C" fn on_sync_region_wait(kind: c_int, endpoint: c_int, parallel_data: *mut ompt_data_t, _task_data: *mut ompt_data_t, codeptr_ra: *const c_void) {
    if !openmp::active() {
        return;
    }
    let late = ends_a_workers_part(kind, parallel_data, codeptr_ra);
    scoped_or_late(endpoint, late, |r| openmp::wait_begin(r, kind, codeptr_ra as u64), |r, end| openmp::wait_end(r, end));
}

unsafe extern "C" fn on_work(wstype: c_int, endpoint: c_int, _parallel_data: *mut ompt_data_t, _task_data: *mut ompt_data_t, _count: u64, codeptr_ra: *const c_void) {
    if !openmp::active() {
        return;
    }
    scoped(endpoint, |r| openmp::work_begin(r, wstype, codeptr_ra as u64), |r, end| openmp::work_end(r, end));
}

unsafe extern "C" fn on_task_create(
    _encountering_task_data: *mut ompt_data_t,
    _encountering_task_frame: *const c_void,
    new_task_data: *mut ompt_data_t,
    flags: c_int,
    _has_dependences: c_int,
    codeptr_ra: *const c_void,
) {
    if !new_task_data.is_null() && flags & TASK_EXPLICIT != 0 {
        let c = codeptr_ra as u64;
        let inside = || catch_unwind(AssertUnwindSafe(|| recording::on_thread(|r| openmp::task_key_inside(r)))).ok().flatten();
        let key = if openmp::in_runtime(c) { inside().unwrap_or(openmp::task_key(0)) } else { openmp::task_key(c) };
        // SAFETY: the new task's data word, ours to write.
        unsafe { (*new_task_data).value = key };
    }
}

unsafe extern "C" fn on_task_schedule(prior_task_data: *mut ompt_data_t, prior_task_status: c_int, next_task_data: *mut ompt_data_t) {
    if !openmp::active() {
        return;
    }
    let end = clock::now_stop();
    // SAFETY: see `value`.
    let prior = (prior_task_data as u64, unsafe { value(prior_task_data) });
    let next = (next_task_data as u64, unsafe { value(next_task_data) });
    record(|r| openmp::task_schedule(r, prior, prior_task_status, next, end));
}

/// At load: OpenMP constructs asked for explicitly in a program on GCC's libgomp, which will
/// never start the tool, are reported now (the program may never set profiling up).
extern "C" fn at_load() {
    let _ = catch_unwind(|| {
        let s = Settings::from_env();
        if s.wanted {
            openmp::check_runtime(&s);
        }
    });
}

#[used]
#[unsafe(link_section = ".init_array")]
static AT_LOAD: extern "C" fn() = at_load;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn started_once() {
        // The test binary is the only copy of the library; the first call registers the tool,
        // any later one gets NULL.
        let first = ompt_start_tool(201611, c"test".as_ptr());
        let second = ompt_start_tool(201611, c"test".as_ptr());
        assert!(!first.is_null());
        assert!(second.is_null());
        // SAFETY: the result of the first call, our static.
        assert!(unsafe { (*first).initialize.is_some() && (*first).finalize.is_some() });
    }
}
