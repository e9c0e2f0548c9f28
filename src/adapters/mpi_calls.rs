//! The internal C interface through which the MPI plugin's generated wrappers record the
//! program's MPI calls (mirror of mpi/c/sp_mpi_core.h): one exported symbol,
//! `sp__mpi_core_api`, returning a versioned table of functions. Not part of the public API
//! (not in include/scope_profiler.h). Like `ffi`: arguments checked, panics caught here, and
//! nothing but the conversion of C values; the work is in `mpi_calls` and the recording (through `adapters`).

#![allow(non_camel_case_types)]

use crate::mpi_calls::{self, Finished};
use crate::mpi_stats::{Event, flags};
use super as recording;
use crate::{clock, warn};
use std::ffi::{c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

const VERSION: u32 = 3;
/// More routines than any MPI has; longer names than any routine's.
const MAX_ROUTINES: u32 = 1 << 16;
const MAX_NAME: usize = 256;
/// More requests than one call can complete (the wrappers refuse larger arrays too).
const MAX_REQS: u32 = 1 << 26;

/// The wrappers' event: the call (`mpi_stats::Event`, laid out as the C struct's head, so
/// that the core reads it in place) and its requests.
#[repr(C)]
pub struct sp_mpi_event {
    pub event: Event,
    /// Read only with `flags::REQUEST`.
    pub request: u64,
    /// Read only with `flags::COMPLETES`, `STARTS` or `FREES` (as `nreqs`, `stride`, `reqs_at`).
    pub reqs: *const u64,
    pub nreqs: u32,
    pub stride: u32,
    /// Read only with `flags::REQUEST`.
    pub request_slot: u64,
    pub reqs_at: u64,
}

// The layout mpi/c/sp_mpi_core.h asserts too.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<Event>() == 72 && size_of::<sp_mpi_event>() == 112);
    assert!(offset_of!(Event, start) == 8 && offset_of!(Event, end) == 16 && offset_of!(Event, comm) == 24);
    assert!(offset_of!(Event, comm_size) == 32 && offset_of!(Event, source) == 44 && offset_of!(Event, site) == 64);
    assert!(offset_of!(sp_mpi_event, request) == 72 && offset_of!(sp_mpi_event, reqs) == 80 && offset_of!(sp_mpi_event, nreqs) == 88);
    assert!(offset_of!(sp_mpi_event, request_slot) == 96 && offset_of!(sp_mpi_event, reqs_at) == 104);
};

#[repr(C)]
pub struct sp_mpi_core_api {
    pub struct_size: u32,
    pub version: u32,
    pub routines: unsafe extern "C" fn(names: *const *const c_char, n: u32, family: *const c_char) -> c_int,
    pub end: unsafe extern "C" fn(e: *mut sp_mpi_event),
    pub after_init: extern "C" fn(fortran: c_int, init_ns: i64, thread_level: c_int),
    pub before_finalize: extern "C" fn(),
    pub before_abort: extern "C" fn(errorcode: c_int),
    pub pcontrol: extern "C" fn(level: c_int),
    /// What the wrappers do at the start of a call: 0 nothing, 1 read CLOCK_MONOTONIC, 2 read
    /// the TSC (read with an atomic load; see `mpi_calls::GATE_PTR`).
    pub gate: *const u8,
    /// Time spent because of the profiler inside MPI_Init and MPI_Finalize, as the wrappers
    /// measured it (`mpi_calls::note_spent`).
    pub spent: extern "C" fn(what: c_int, ns: i64, rank: c_int),
}

// SAFETY: the table is immutable; `gate` points to an atomic that lives for the process.
unsafe impl Sync for sp_mpi_core_api {}

static API: sp_mpi_core_api = sp_mpi_core_api {
    struct_size: std::mem::size_of::<sp_mpi_core_api>() as u32,
    version: VERSION,
    routines,
    end,
    after_init,
    before_finalize,
    before_abort,
    pcontrol,
    gate: mpi_calls::GATE_PTR,
    spent,
};

/// The table of the MPI plugin's wrappers (internal).
#[unsafe(no_mangle)]
pub extern "C" fn sp__mpi_core_api() -> *const sp_mpi_core_api {
    &API
}

fn text(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated string of the plugin's static data; at most MAX_NAME + 1 bytes read.
    let len = unsafe { libc::strnlen(p, MAX_NAME + 1) };
    if len > MAX_NAME {
        return None;
    }
    // SAFETY: len bytes are readable.
    std::str::from_utf8(unsafe { std::slice::from_raw_parts(p as *const u8, len) }).ok().map(str::to_string)
}

unsafe extern "C" fn routines(names: *const *const c_char, n: u32, family: *const c_char) -> c_int {
    catch_unwind(|| {
        if names.is_null() || n > MAX_ROUTINES {
            warn::once("mpi-routines", "the MPI plugin gave an invalid routine table: MPI calls are not recorded");
            return -1;
        }
        // SAFETY: the plugin's static array of n string pointers.
        let table = unsafe { std::slice::from_raw_parts(names, n as usize) };
        let Some(list) = table.iter().map(|&p| text(p)).collect::<Option<Vec<String>>>() else {
            warn::once("mpi-routines", "the MPI plugin gave an invalid routine name: MPI calls are not recorded");
            return -1;
        };
        match mpi_calls::set_routines(list, &text(family).unwrap_or_default()) {
            Ok(()) => 0,
            Err(e) => {
                warn::once("mpi-routines", &e);
                -1
            }
        }
    })
    .unwrap_or(-1)
}

unsafe extern "C" fn end(e: *mut sp_mpi_event) {
    let end = clock::now_stop();
    if e.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the wrapper's event on its stack, ours during this call; the wrapper wrote
        // the whole call but its end, and the request fields only as the flags say (they are
        // read only then).
        unsafe { (*e).event.end = end };
        let ev: &Event = unsafe { &(*e).event };
        let f = ev.flags;
        if f & flags::REQUESTS == 0 {
            // No requests (most calls): the request fields are not read at all.
            recording::on_running_thread(|d| mpi_calls::finish(d, ev));
            return;
        }
        let (request, request_slot) = if f & flags::REQUEST != 0 { unsafe { ((*e).request, (*e).request_slot) } } else { (0, 0) };
        let (mut reqs, mut reqs_at, mut stride): (&[u64], u64, u64) = (&[], 0, 0);
        if f & (flags::COMPLETES | flags::STARTS | flags::FREES) != 0 {
            // SAFETY: written by the wrapper with these flags.
            let (p, n) = unsafe { ((*e).reqs, (*e).nreqs) };
            if !p.is_null() && n > 0 && n <= MAX_REQS {
                // SAFETY: the wrapper's array of n handles, alive during this call.
                reqs = unsafe { std::slice::from_raw_parts(p, n as usize) };
                (reqs_at, stride) = unsafe { ((*e).reqs_at, (*e).stride as u64) };
            }
        }
        let call = Finished { event: ev, request, request_slot, reqs, reqs_at, stride };
        recording::on_running_thread(|d| mpi_calls::finish_with_requests(d, &call));
    }));
}

extern "C" fn after_init(fortran: c_int, init_ns: i64, thread_level: c_int) {
    let _ = catch_unwind(|| {
        mpi_calls::note_thread_level(thread_level);
        if !mpi_calls::wants_implicit_setup() {
            return;
        }
        recording::note_source("mpi_calls", "MPI calls (the MPI plugin)");
        let origin = if fortran != 0 { recording::ImplicitOrigin::MpiInitFortran } else { recording::ImplicitOrigin::MpiInitC };
        match recording::set_up(origin) {
            Ok(crate::status::Status::Ok) => mpi_calls::note_init_time(init_ns),
            Ok(_) => {}
            Err(e) => warn::once("implicit-setup-failed", &format!("setting profiling up at MPI_Init failed: {e}")),
        }
    });
}

extern "C" fn before_finalize() {
    let _ = catch_unwind(recording::write_inside_mpi_finalize);
}

extern "C" fn before_abort(_errorcode: c_int) {
    let _ = catch_unwind(recording::write_before_abort);
}

extern "C" fn spent(what: c_int, ns: i64, rank: c_int) {
    let _ = catch_unwind(|| mpi_calls::note_spent(what, ns, rank));
}

extern "C" fn pcontrol(level: c_int) {
    let _ = catch_unwind(|| mpi_calls::pcontrol(level));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_complete_and_names_are_checked() {
        // SAFETY: our own static table.
        let api = unsafe { &*sp__mpi_core_api() };
        assert_eq!(api.version, VERSION);
        assert_eq!(api.struct_size as usize, std::mem::size_of::<sp_mpi_core_api>());
        assert_eq!(text(c"MPI_Send".as_ptr()).as_deref(), Some("MPI_Send"));
        assert!(text(std::ptr::null()).is_none());
        let long = std::ffi::CString::new("x".repeat(MAX_NAME + 1)).unwrap();
        assert!(text(long.as_ptr()).is_none());
        // Nothing recording: the gate is closed, and an end records nothing.
        // SAFETY: the gate points to a live atomic byte.
        assert_eq!(unsafe { *api.gate }, 0);
        let mut e: sp_mpi_event = unsafe { std::mem::zeroed() };
        e.event.flags = flags::REQUEST | flags::COMPLETES;
        unsafe { (api.end)(&mut e) };
        unsafe { (api.end)(std::ptr::null_mut()) };
    }
}
