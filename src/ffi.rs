//! The C ABI: argument checks, the panic boundary and status codes over `profiler`.
//! Every exported function returns a status (0 success, > 0 harmless notice, < 0 error);
//! `sp_last_error()` explains the last error of the calling thread.

#![allow(non_camel_case_types)]
// The safety contract of every export is the C one stated in the header: valid pointers.
#![allow(clippy::missing_safety_doc)]

use crate::config::Options;
use crate::profiler;
use crate::status::{Error, Status};
use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Success.
pub const SP_OK: c_int = 0;
/// Notice: sp_setup was already called; the second call changed nothing.
pub const SP_ALREADY_SET_UP: c_int = 1;
/// Notice: sp_finalize was already called; the second call changed nothing.
pub const SP_ALREADY_FINALIZED: c_int = 2;
/// Error: sp_setup has not been called; the call was ignored.
pub const SP_ERR_NOT_INITIALIZED: c_int = -1;
/// Error: sp_finalize has been called; the call was ignored.
pub const SP_ERR_FINALIZED: c_int = -2;
/// Error: a required pointer is NULL.
pub const SP_ERR_NULL_ARGUMENT: c_int = -3;
/// Error: an argument is invalid (for example an sp_options not prepared by sp_options_init).
pub const SP_ERR_INVALID_ARGUMENT: c_int = -4;
/// Error: the region name is empty.
pub const SP_ERR_EMPTY_NAME: c_int = -5;
/// Error: the region name is longer than SP_MAX_NAME_LEN bytes.
pub const SP_ERR_NAME_TOO_LONG: c_int = -6;
/// Error: the region name is not valid UTF-8 or contains a NUL byte.
pub const SP_ERR_INVALID_UTF8: c_int = -7;
/// Error: the handle was not returned by sp_region_register.
pub const SP_ERR_INVALID_HANDLE: c_int = -8;
/// Error: more than SP_MAX_REGIONS distinct region names.
pub const SP_ERR_TOO_MANY_REGIONS: c_int = -9;
/// Error: more than SP_MAX_DEPTH regions open on this thread; the start was refused.
pub const SP_ERR_NESTING_TOO_DEEP: c_int = -10;
/// Error: stop of a region that is not open on this thread; nothing changed.
pub const SP_ERR_UNMATCHED_STOP: c_int = -11;
/// Error: stop of a region that is not the innermost open one. The region was recorded;
/// the calls opened inside it were closed without being recorded (counted as dropped_calls).
pub const SP_ERR_NOT_INNERMOST: c_int = -12;
/// Error: the profile file could not be written (see sp_last_error and stderr).
pub const SP_ERR_WRITE_FAILED: c_int = -13;
/// Error: an MPI operation failed.
pub const SP_ERR_MPI: c_int = -14;
/// Error: not possible on this machine or in this process (sampling: neither a perf event nor
/// a per-thread timer could be set up); sp_last_error says why.
pub const SP_ERR_UNSUPPORTED: c_int = -15;
/// Error: called from a signal handler that interrupted a call of this library on the same
/// thread. The call was refused without recording, allocating or locking anything, and
/// without setting sp_last_error.
pub const SP_ERR_REENTRANT: c_int = -16;
/// Error: an internal error was caught; the host program is unaffected.
pub const SP_ERR_INTERNAL: c_int = -99;

/// Longest region name accepted, in bytes of UTF-8.
pub const SP_MAX_NAME_LEN: usize = 1024;
/// Most regions open at once on one thread.
pub const SP_MAX_DEPTH: usize = 4096;
/// Most distinct region names per process.
pub const SP_MAX_REGIONS: u32 = 1048576;

/// Options of sp_setup. Always prepare it with sp_options_init, then set what you need:
/// fields added in later versions go at the end, and `struct_size` tells the library which
/// fields the caller knows, so programs built against an older header keep working.
#[repr(C)]
pub struct sp_options {
    /// sizeof(sp_options) as the caller was compiled; set by sp_options_init.
    pub struct_size: usize,
    /// Output file (NUL-terminated UTF-8 path), or NULL for $SCOPE_PROFILER_FILE, else
    /// "profiling_data.h5" in the working directory. A directory means <dir>/profiling_data.h5.
    pub file_path: *const c_char,
    /// Collect LIKWID counters: 1 on, 0 off, -1 unset ($SCOPE_PROFILER_LIKWID decides; default off).
    pub use_likwid: i32,
    /// 0 silent, 1 summary table at finalize, 2 more notes; -1 unset ($SCOPE_PROFILER_VERBOSE, default 1).
    pub verbosity: i32,
    /// Language of the host code recorded in the metadata ("C", "C++", "Fortran"), or NULL for "C".
    pub language: *const c_char,
    /// Fortran handle (from MPI_Comm_c2f) of the communicator to profile over; read only when
    /// has_comm is 1. See scope_profiler_mpi.h for helpers taking an MPI_Comm.
    pub comm: i32,
    /// 1 if `comm` is set, else 0 (MPI_COMM_WORLD when MPI is initialized).
    pub has_comm: i32,
    /// How the file stores the regions: "regions" (every call, per-rank groups; the default up
    /// to 16 ranks), "columnar" (every call, the Python package's schema-3 columns, 17 bytes per
    /// call; the default above 16 ranks, written by every rank collectively) or "aggregate" (per
    /// region and thread statistics only; no calls kept). NULL: $SCOPE_PROFILER_LAYOUT.
    pub layout: *const c_char,
    /// Clock: "auto" (the TSC where the hardware and kernel make it safe, else
    /// CLOCK_MONOTONIC), "tsc" (forced, with a warning where unsafe) or "monotonic"; NULL for
    /// $SCOPE_PROFILER_CLOCK, else "auto". Timestamps in the file are CLOCK_MONOTONIC ns either way.
    pub clock: *const c_char,
    /// perf events to count per region and thread, comma-separated as for `perf stat -e`
    /// (cycles, instructions, task-clock, page-faults, rNNNN, pmu/event=..,umask=../, flops,
    /// flops_dp, flops_sp), or NULL for $SCOPE_PROFILER_PERF_EVENTS (default none).
    pub perf_events: *const c_char,
    /// The regions that count perf events: comma-separated glob patterns matched against whole
    /// names (`*` any characters, `?` one, `\` makes the next one literal), e.g. "solve*,io".
    /// The others read no counters. NULL for $SCOPE_PROFILER_PERF_REGIONS, else every region.
    pub perf_regions: *const c_char,
}

/// Statistics of one region's completed calls so far, over every thread of this process
/// (sp_region_get_stats). Set `struct_size` to sizeof(sp_stats) before the call: fields
/// added in later versions go at the end, and only the fields the caller knows are written.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct sp_stats {
    /// sizeof(sp_stats) as the caller was compiled.
    pub struct_size: usize,
    /// Completed calls.
    pub count: i64,
    /// Sum of their durations, nanoseconds.
    pub total_ns: i64,
    /// Shortest and longest call, nanoseconds (0 when count is 0).
    pub min_ns: i64,
    pub max_ns: i64,
    /// Time not spent in the region's recorded child regions on the same thread, nanoseconds.
    pub exclusive_ns: i64,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', "")).unwrap_or_default();
    // try_: a handler that interrupted this very assignment leaves the message as it was.
    let _ = LAST_ERROR.try_with(|e| e.try_borrow_mut().map(|mut m| *m = c));
}

/// Record `e` for sp_last_error, warn once per kind, return its code. A refused reentrant
/// call, or an error while this thread is busy in the library's locked sections (a signal
/// handler interrupted it), returns the code alone: recording the message would allocate.
/// Inside an exported cold entry point (`guard_cold`, which refused to start on a busy
/// thread) the call's own errors are recorded.
#[cold]
fn fail(e: Error) -> c_int {
    let code = e.status.code();
    if e.status == Status::Reentrant || (crate::reentry::busy() && !crate::reentry::in_cold_entry()) {
        return code;
    }
    let _busy = crate::reentry::Busy::enter();
    set_last_error(e.text());
    // Region mismatches warn per region in the core; everything else warns once per kind.
    if !matches!(e.status, Status::UnmatchedStop | Status::NotInnermost | Status::NestingTooDeep) {
        crate::warn::once(&format!("status:{code}"), e.text());
    }
    // Freed while still marked busy.
    drop(e);
    code
}

/// The panic boundary: no unwinding ever crosses into the host.
#[inline(always)]
fn guard(f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(code) => code,
        Err(_) => fail(Error::new(Status::Panic, "internal error in scope_profiler (a panic was caught); the call was ignored")),
    }
}

/// `guard` for the entry points that lock or allocate (everything but the start/stop family):
/// refused with SP_ERR_REENTRANT when a signal handler interrupted this library on the same
/// thread, and marking the thread busy while they run.
#[inline(never)]
fn guard_cold(f: impl FnOnce() -> c_int) -> c_int {
    if crate::reentry::busy() || profiler::thread_in_call() {
        return SP_ERR_REENTRANT;
    }
    let _busy = crate::reentry::Busy::enter_cold_entry();
    guard(f)
}

/// `code` for the start/stop family (async-signal-safe when they succeed): an error on a thread
/// that is busy in the library at all, even inside a cold entry point, comes from a signal
/// handler that interrupted it, and returns its code alone (recording it would allocate).
#[inline(always)]
fn code_hot(r: crate::status::Result<()>) -> c_int {
    match r {
        Ok(()) => SP_OK,
        Err(e) => fail_hot(e),
    }
}

#[cold]
fn fail_hot(e: Error) -> c_int {
    if crate::reentry::busy() {
        return e.status.code();
    }
    fail(e)
}

#[inline(always)]
fn code(r: crate::status::Result<()>) -> c_int {
    match r {
        Ok(()) => SP_OK,
        Err(e) => fail(e),
    }
}

/// An argument error of the start/stop family: with its message, unless the thread is busy in
/// the library (a signal handler interrupted it), where the message would allocate.
#[cold]
fn arg_error(status: Status, message: impl FnOnce() -> String) -> Error {
    if crate::reentry::busy() && !crate::reentry::in_cold_entry() { status.into() } else { Error::new(status, message()) }
}

/// A NUL-terminated name as bytes, reading at most SP_MAX_NAME_LEN + 1 bytes.
#[inline(always)]
unsafe fn c_name<'a>(name: *const c_char) -> Result<&'a [u8], Error> {
    if name.is_null() {
        return Err(arg_error(Status::NullArgument, || "region name is NULL".into()));
    }
    // SAFETY: the caller passes a readable string; strnlen stops at the limit.
    let len = unsafe { libc::strnlen(name, SP_MAX_NAME_LEN + 1) };
    if len > SP_MAX_NAME_LEN {
        return Err(arg_error(Status::NameTooLong, || format!("region name is longer than {SP_MAX_NAME_LEN} bytes")));
    }
    Ok(unsafe { std::slice::from_raw_parts(name as *const u8, len) })
}

/// Does the NUL-terminated string at `p` equal `cached` (which holds no NUL)? Reads byte by
/// byte and stops at the first difference, so it never reads past the caller's terminator.
#[inline(always)]
unsafe fn c_name_equals(p: *const c_char, cached: &[u8]) -> bool {
    let p = p as *const u8;
    for (i, &b) in cached.iter().enumerate() {
        // SAFETY: bytes 0..i matched non-NUL bytes, so the string extends at least to i.
        if unsafe { *p.add(i) } != b {
            return false;
        }
    }
    // SAFETY: as above, the string extends at least to cached.len().
    !cached.is_empty() && unsafe { *p.add(cached.len()) } == 0
}

/// Is `[p, p + len)` inside a read-only segment of a loaded ELF object (string literals, in
/// C and Fortran alike)? Such bytes never change while the object stays loaded, so the name
/// cache may trust the address alone. (An object unloaded with dlclose and another mapped at
/// the same address is the one way this can go stale; a region profiler can live with that.)
pub(crate) fn in_read_only_segment(p: *const u8, len: usize) -> bool {
    struct Query {
        start: usize,
        end: usize,
        found: bool,
    }
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut std::ffi::c_void) -> c_int {
        // SAFETY: the loader passes a valid info block; `data` is our Query.
        let (info, q) = unsafe { (&*info, &mut *(data as *mut Query)) };
        let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        for ph in phdrs {
            if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_W == 0 {
                let seg_start = info.dlpi_addr as usize + ph.p_vaddr as usize;
                if q.start >= seg_start && q.end <= seg_start + ph.p_memsz as usize {
                    q.found = true;
                    return 1;
                }
            }
        }
        0
    }
    let mut q = Query { start: p as usize, end: p as usize + len, found: false };
    // SAFETY: dl_iterate_phdr calls `visit` with our pointer while it holds the loader lock.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut q as *mut Query as *mut std::ffi::c_void) };
    q.found
}

/// A NUL-terminated name: immutable if it and its terminator lie in read-only memory.
fn c_caller_name(bytes: &[u8]) -> profiler::CallerName<'_> {
    profiler::CallerName { bytes, immutable: in_read_only_segment(bytes.as_ptr(), bytes.len() + 1) }
}

/// A counted name: its address alone does not say its length, so its bytes are always compared
/// (a cheap slice comparison: the length is known).
fn counted_caller_name(bytes: &[u8]) -> profiler::CallerName<'_> {
    profiler::CallerName { bytes, immutable: false }
}

#[inline(always)]
fn start_c(name: *const c_char) -> crate::status::Result<()> {
    if name.is_null() {
        return Err(arg_error(Status::NullArgument, || "region name is NULL".into()));
    }
    let read = || unsafe { c_name(name) }.map(c_caller_name);
    profiler::start_named(name as usize, |cached| unsafe { c_name_equals(name, cached) }, read)
}

#[inline(always)]
fn stop_c(name: *const c_char) -> crate::status::Result<()> {
    if name.is_null() {
        return Err(arg_error(Status::NullArgument, || "region name is NULL".into()));
    }
    let read = || unsafe { c_name(name) }.map(c_caller_name);
    profiler::stop_named(name as usize, |cached| unsafe { c_name_equals(name, cached) }, read)
}

#[inline(always)]
fn start_counted(name: *const c_char, len: usize) -> crate::status::Result<()> {
    let bytes = unsafe { counted_name(name, len) }?;
    profiler::start_named(name as usize, |cached| cached == bytes, || Ok(counted_caller_name(bytes)))
}

#[inline(always)]
fn stop_counted(name: *const c_char, len: usize) -> crate::status::Result<()> {
    let bytes = unsafe { counted_name(name, len) }?;
    profiler::stop_named(name as usize, |cached| cached == bytes, || Ok(counted_caller_name(bytes)))
}

/// A blank-padded name (Fortran's `character`): `len` bytes whose trailing blanks are not part
/// of the name. A cache hit compares the bytes with the cached (trimmed) name and checks that
/// the rest are blanks, so the name is never trimmed on the common path (the scan `len_trim`
/// would do is that check); a miss trims it and checks its length.
#[inline(always)]
fn start_padded(name: *const c_char, len: usize) -> crate::status::Result<()> {
    let bytes = unsafe { padded_name(name, len) }?;
    profiler::start_named(name as usize, |cached| equals_padded(bytes, cached), || trimmed_caller_name(bytes))
}

#[inline(always)]
fn stop_padded(name: *const c_char, len: usize) -> crate::status::Result<()> {
    let bytes = unsafe { padded_name(name, len) }?;
    profiler::stop_named(name as usize, |cached| equals_padded(bytes, cached), || trimmed_caller_name(bytes))
}

#[inline(always)]
unsafe fn padded_name<'a>(name: *const c_char, len: usize) -> Result<&'a [u8], Error> {
    if name.is_null() {
        return Err(Error::new(Status::NullArgument, "region name is NULL"));
    }
    if len > isize::MAX as usize {
        return Err(Error::new(Status::NameTooLong, format!("region name of {len} bytes is longer than {SP_MAX_NAME_LEN}")));
    }
    // SAFETY: the caller passes `len` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(name as *const u8, len) })
}

/// Is the blank-padded `bytes` the (trimmed, non-empty) name `cached`?
#[inline(always)]
fn equals_padded(bytes: &[u8], cached: &[u8]) -> bool {
    bytes.len() >= cached.len() && bytes[..cached.len()] == *cached && bytes[cached.len()..].iter().all(|&b| b == b' ')
}

fn trimmed_caller_name(bytes: &[u8]) -> crate::status::Result<profiler::CallerName<'_>> {
    let end = bytes.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    if end > SP_MAX_NAME_LEN {
        return Err(Error::new(Status::NameTooLong, format!("region name of {end} bytes is longer than {SP_MAX_NAME_LEN}")));
    }
    Ok(counted_caller_name(&bytes[..end]))
}

/// A name given as pointer and length (need not be NUL-terminated).
#[inline(always)]
unsafe fn counted_name<'a>(name: *const c_char, len: usize) -> Result<&'a [u8], Error> {
    if name.is_null() {
        return Err(arg_error(Status::NullArgument, || "region name is NULL".into()));
    }
    if len > SP_MAX_NAME_LEN {
        return Err(arg_error(Status::NameTooLong, || format!("region name of {len} bytes is longer than {SP_MAX_NAME_LEN}")));
    }
    // SAFETY: the caller passes `len` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(name as *const u8, len) })
}

unsafe fn optional_str(p: *const c_char, what: &str) -> Result<Option<String>, Error> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: caller passes a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(|s| Some(s.to_string()))
        .map_err(|_| Error::new(Status::InvalidUtf8, format!("{what} is not valid UTF-8")))
}

/// Fill `options` with "unset" values: every field then defers to the environment and the
/// defaults. Returns SP_OK, or SP_ERR_NULL_ARGUMENT.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_options_init(options: *mut sp_options) -> c_int {
    guard(|| {
        if options.is_null() {
            return fail(Error::new(Status::NullArgument, "sp_options_init: options is NULL"));
        }
        // SAFETY: non-null pointer to caller storage of at least sizeof(sp_options).
        unsafe {
            options.write(sp_options {
                struct_size: std::mem::size_of::<sp_options>(),
                file_path: std::ptr::null(),
                use_likwid: -1,
                verbosity: -1,
                language: std::ptr::null(),
                comm: 0,
                has_comm: 0,
                layout: std::ptr::null(),
                clock: std::ptr::null(),
                perf_events: std::ptr::null(),
                perf_regions: std::ptr::null(),
            })
        };
        SP_OK
    })
}

unsafe fn read_options(o: *const sp_options) -> Result<Options, Error> {
    let mut out = Options::default();
    if o.is_null() {
        return Ok(out);
    }
    // SAFETY: non-null; struct_size is the first field and always present.
    let size = unsafe { (*o).struct_size };
    let min = std::mem::offset_of!(sp_options, language);
    if size < min || size > 65_536 {
        return Err(Error::new(
            Status::InvalidArgument,
            format!("sp_options.struct_size is {size}: prepare the options with sp_options_init"),
        ));
    }
    // SAFETY: the caller's struct holds at least `size` bytes; fields past it are not read.
    let o = unsafe { &*o };
    let has = |end: usize| size >= end;
    out.file_path = unsafe { optional_str(o.file_path, "sp_options.file_path") }?.map(Into::into);
    out.use_likwid = match o.use_likwid {
        -1 => None,
        0 => Some(false),
        1 => Some(true),
        v => return Err(Error::new(Status::InvalidArgument, format!("sp_options.use_likwid is {v}: use -1, 0 or 1"))),
    };
    out.verbosity = match o.verbosity {
        -1 => None,
        v if v >= 0 => Some(v as u32),
        v => return Err(Error::new(Status::InvalidArgument, format!("sp_options.verbosity is {v}: use -1 or >= 0"))),
    };
    if has(std::mem::offset_of!(sp_options, language) + std::mem::size_of::<*const c_char>()) {
        out.language = unsafe { optional_str(o.language, "sp_options.language") }?;
    }
    if has(std::mem::offset_of!(sp_options, has_comm) + 4) && o.has_comm == 1 {
        out.mpi_comm = Some(o.comm);
    }
    if has(std::mem::offset_of!(sp_options, layout) + std::mem::size_of::<*const c_char>()) {
        out.layout = unsafe { optional_str(o.layout, "sp_options.layout") }?;
    }
    if has(std::mem::offset_of!(sp_options, clock) + std::mem::size_of::<*const c_char>()) {
        out.clock = unsafe { optional_str(o.clock, "sp_options.clock") }?;
    }
    if has(std::mem::offset_of!(sp_options, perf_events) + std::mem::size_of::<*const c_char>()) {
        out.perf_events = unsafe { optional_str(o.perf_events, "sp_options.perf_events") }?;
    }
    if has(std::mem::offset_of!(sp_options, perf_regions) + std::mem::size_of::<*const c_char>()) {
        out.perf_regions = unsafe { optional_str(o.perf_regions, "sp_options.perf_regions") }?;
    }
    Ok(out)
}

/// Start profiling. `options` may be NULL: defaults, then the environment
/// (SCOPE_PROFILER_FILE, SCOPE_PROFILER_VERBOSE, SCOPE_PROFILER_DISABLE, SCOPE_PROFILER_LIKWID,
/// SCOPE_PROFILER_METADATA, SCOPE_PROFILER_CLOCK, SCOPE_PROFILER_PERF_EVENTS,
/// SCOPE_PROFILER_PERF_REGIONS); explicit options override the environment.
/// Call once, from the main thread, before worker threads record. A second call while
/// profiling runs returns SP_ALREADY_SET_UP and changes nothing; a call after sp_finalize
/// returns SP_ERR_FINALIZED (one profile per process).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_setup(options: *const sp_options) -> c_int {
    guard_cold(|| match unsafe { read_options(options) }.and_then(|o| profiler::setup(&o)) {
        Ok(s) => s.code(),
        Err(e) => fail(e),
    })
}

/// Register a region name (NUL-terminated UTF-8, at most SP_MAX_NAME_LEN bytes) and return its
/// handle (>= 0) for sp_region_start_id/sp_region_stop_id, or a negative status.
/// Registering the same name again returns the same handle. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_region_register(name: *const c_char) -> i32 {
    guard_cold(|| match unsafe { c_name(name) }.and_then(profiler::register) {
        Ok(id) => id as i32,
        Err(e) => fail(e),
    })
}

/// sp_region_register for a name of `len` bytes that need not be NUL-terminated (Fortran).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_region_register_n(name: *const c_char, len: usize) -> i32 {
    guard_cold(|| match unsafe { counted_name(name, len) }.and_then(profiler::register) {
        Ok(id) => id as i32,
        Err(e) => fail(e),
    })
}

/// sp_region_register that also records where the region is defined in the source, normally
/// `__FILE__` and `__LINE__` (the SP_REGION_START/SP_REGION_STOP macros pass them). The file
/// stores them as the region's `source_file` and `source_lineno`. `file` may be NULL (no
/// location); `line` must be >= 0 (0: line not known). The first location given for a name is kept: registering
/// it from another place warns once on stderr and returns the same handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_region_register_at(name: *const c_char, file: *const c_char, line: i32) -> i32 {
    guard_cold(|| {
        let run = || {
            let bytes = unsafe { c_name(name) }?;
            let file = if file.is_null() {
                None
            } else {
                // SAFETY: the caller passes a readable string; strnlen stops one past the limit,
                // which `source_location` refuses.
                let len = unsafe { libc::strnlen(file, crate::registry::MAX_FILE_LEN + 1) };
                Some(unsafe { std::slice::from_raw_parts(file as *const u8, len) })
            };
            profiler::register_at(bytes, source_location(file, line)?)
        };
        match run() {
            Ok(id) => id as i32,
            Err(e) => fail(e),
        }
    })
}

/// sp_region_register_at for a name of `len` and a file name of `file_len` bytes that need not
/// be NUL-terminated (Fortran). `file` may be NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_region_register_at_n(name: *const c_char, len: usize, file: *const c_char, file_len: usize, line: i32) -> i32 {
    guard_cold(|| {
        let run = || {
            let bytes = unsafe { counted_name(name, len) }?;
            let file = if file.is_null() {
                None
            } else if file_len > crate::registry::MAX_FILE_LEN {
                return Err(source_too_long(file_len));
            } else {
                // SAFETY: the caller passes `file_len` readable bytes.
                Some(unsafe { std::slice::from_raw_parts(file as *const u8, file_len) })
            };
            profiler::register_at(bytes, source_location(file, line)?)
        };
        match run() {
            Ok(id) => id as i32,
            Err(e) => fail(e),
        }
    })
}

fn source_too_long(len: usize) -> Error {
    Error::new(Status::InvalidArgument, format!("source file name of {len} bytes is longer than the limit of {}", crate::registry::MAX_FILE_LEN))
}

/// Check a source location given over the C ABI. A file name that is not UTF-8 is kept with
/// its invalid bytes replaced (paths need not be UTF-8); an empty one means no location.
fn source_location(file: Option<&[u8]>, line: i32) -> Result<Option<crate::model::SourceLocation>, Error> {
    if line < 0 {
        return Err(Error::new(Status::InvalidArgument, format!("source line is {line}: use a line number >= 0")));
    }
    match file {
        None | Some([]) => Ok(None),
        Some(bytes) if bytes.len() > crate::registry::MAX_FILE_LEN => Err(source_too_long(bytes.len())),
        Some(bytes) => Ok(Some(crate::model::SourceLocation { file: String::from_utf8_lossy(bytes).replace('\0', ""), line: line as i64 })),
    }
}

/// Start a call of the region with this handle on the calling thread. The hot-loop form:
/// no string work, no lock, no allocation in the steady state. Regions nest and recurse.
/// Async-signal-safe when it succeeds, with a handle registered outside the handler and
/// already used on this thread (docs/signals.md); from a signal handler that interrupted a
/// call of this library on the same thread it returns SP_ERR_REENTRANT and records nothing.
#[unsafe(no_mangle)]
pub extern "C" fn sp_region_start_id(handle: i32) -> c_int {
    if profiler::switched_off() {
        return SP_OK;
    }
    start_id(handle)
}

/// The region calls' bodies, apart from their exports so that a switched-off profiler returns
/// before their prologue (the export tail-calls them: `extern "C"`, so no unwinding edge
/// stands in the way; none can unwind, `guard` catches every panic).
#[inline(never)]
extern "C" fn start_id(handle: i32) -> c_int {
    // A negative handle becomes a huge id, which the handle check refuses.
    guard(|| code_hot(profiler::start_id(handle as u32)))
}

#[inline(never)]
extern "C" fn stop_id(handle: i32) -> c_int {
    guard(|| code_hot(profiler::stop_id(handle as u32)))
}

#[inline(never)]
unsafe extern "C" fn start_by_name(name: *const c_char) -> c_int {
    guard(|| code_hot(start_c(name)))
}

#[inline(never)]
unsafe extern "C" fn stop_by_name(name: *const c_char) -> c_int {
    guard(|| code_hot(stop_c(name)))
}

#[inline(never)]
unsafe extern "C" fn start_by_counted_name(name: *const c_char, len: usize) -> c_int {
    guard(|| code_hot(start_counted(name, len)))
}

#[inline(never)]
unsafe extern "C" fn stop_by_counted_name(name: *const c_char, len: usize) -> c_int {
    guard(|| code_hot(stop_counted(name, len)))
}

#[inline(never)]
unsafe extern "C" fn start_by_padded_name(name: *const c_char, len: usize) -> c_int {
    guard(|| code_hot(start_padded(name, len)))
}

#[inline(never)]
unsafe extern "C" fn stop_by_padded_name(name: *const c_char, len: usize) -> c_int {
    guard(|| code_hot(stop_padded(name, len)))
}

/// Stop the innermost call of the region with this handle on the calling thread.
/// See sp_region_stop for mismatched stops. Async-signal-safe as sp_region_start_id.
#[unsafe(no_mangle)]
pub extern "C" fn sp_region_stop_id(handle: i32) -> c_int {
    if profiler::switched_off() {
        return SP_OK;
    }
    stop_id(handle)
}

/// Add `flops` floating-point operations (your own count, e.g. 2*N*N*N for a matrix product)
/// to the region with this handle, on the calling thread. Callable inside or outside the
/// region, any number of times; the file keeps the total per rank and region
/// (rank<N>/annotations/<region>), and sptool shows GFLOP/s from it. Returns SP_OK, or
/// SP_ERR_INVALID_HANDLE / SP_ERR_INVALID_ARGUMENT (negative, NaN or infinite values).
/// Async-signal-safe as sp_region_start_id.
#[unsafe(no_mangle)]
pub extern "C" fn sp_region_add_flops(handle: i32, flops: f64) -> c_int {
    guard(|| code_hot(profiler::annotate(handle as u32, 0, flops)))
}

/// Add `bytes` of memory traffic (your own count) to the region with this handle, on the
/// calling thread; as sp_region_add_flops. With both, sptool shows GB/s and FLOP/byte.
#[unsafe(no_mangle)]
pub extern "C" fn sp_region_add_bytes(handle: i32, bytes: f64) -> c_int {
    guard(|| code_hot(profiler::annotate(handle as u32, 1, bytes)))
}

/// Start a call of the region `name` (registered on first use) on the calling thread.
/// Not async-signal-safe (a name new to the thread locks and allocates): from a signal handler
/// use the handle calls; one that interrupted this library on the same thread gets
/// SP_ERR_REENTRANT.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_region_start(name: *const c_char) -> c_int {
    if profiler::switched_off() {
        return SP_OK;
    }
    unsafe { start_by_name(name) }
}

/// Stop the innermost call of region `name` on the calling thread. A stop of a region that is
/// not open returns SP_ERR_UNMATCHED_STOP and changes nothing; a stop of a region that is open
/// but not innermost records it, closes the calls inside it unrecorded and returns
/// SP_ERR_NOT_INNERMOST. Either warns once per region on stderr.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_region_stop(name: *const c_char) -> c_int {
    if profiler::switched_off() {
        return SP_OK;
    }
    unsafe { stop_by_name(name) }
}

/// sp_region_start for a name of `len` bytes that need not be NUL-terminated (Fortran).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_region_start_n(name: *const c_char, len: usize) -> c_int {
    if profiler::switched_off() {
        return SP_OK;
    }
    unsafe { start_by_counted_name(name, len) }
}

/// sp_region_stop for a name of `len` bytes that need not be NUL-terminated (Fortran).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_region_stop_n(name: *const c_char, len: usize) -> c_int {
    if profiler::switched_off() {
        return SP_OK;
    }
    unsafe { stop_by_counted_name(name, len) }
}

/// sp_region_start_n for a blank-padded name (Fortran's `character`): `len` bytes whose
/// trailing blanks are not part of the name, as the Fortran module passes `len(name)`. Cheaper
/// than trimming before every call: the library compares with the name it cached.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_region_start_padded(name: *const c_char, len: usize) -> c_int {
    if profiler::switched_off() {
        return SP_OK;
    }
    unsafe { start_by_padded_name(name, len) }
}

/// sp_region_stop_n for a blank-padded name (see sp_region_start_padded).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_region_stop_padded(name: *const c_char, len: usize) -> c_int {
    if profiler::switched_off() {
        return SP_OK;
    }
    unsafe { stop_by_padded_name(name, len) }
}

/// Record run metadata of your own (problem size, input deck, code version) in the profile:
/// `key` = `value`, both NUL-terminated UTF-8. Callable any time between sp_setup and
/// sp_finalize, on any rank: the file's `metadata/` holds rank 0's value and each rank's own
/// attributes hold that rank's (so values that differ between ranks are kept). Stored as the
/// attribute `user.<key>` (the library never writes a name starting with `user.`, so no key of
/// yours clashes with its own); a value that is an integer written the canonical way is stored
/// as int64, any other as the string given, and the exports read values that parse as numbers as
/// numbers. Setting a key again replaces its value. Keys: 1 to 64 bytes of letters, digits and
/// `_ . - :`, not starting with `.`; values: at most 4096 bytes, no control characters; at most
/// 64 keys. `SCOPE_PROFILER_METADATA_SET="key=value,key=value"` sets keys from the environment
/// (`\,` is a comma inside a value; sp_set_metadata overrides them). Returns SP_OK,
/// SP_ERR_NULL_ARGUMENT, SP_ERR_EMPTY_NAME, SP_ERR_NAME_TOO_LONG, SP_ERR_INVALID_UTF8,
/// SP_ERR_INVALID_ARGUMENT (a character the rule refuses, a value too long, too many keys),
/// SP_ERR_NOT_INITIALIZED or SP_ERR_FINALIZED; a refusal warns once and stores nothing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_set_metadata(key: *const c_char, value: *const c_char) -> c_int {
    guard_cold(|| {
        if key.is_null() || value.is_null() {
            return fail(Error::new(Status::NullArgument, "sp_set_metadata: the key or the value is NULL"));
        }
        // SAFETY: both are non-NULL and, by the contract, NUL-terminated.
        let (k, v) = unsafe { (std::ffi::CStr::from_ptr(key), std::ffi::CStr::from_ptr(value)) };
        match (k.to_str(), v.to_str()) {
            (Ok(k), Ok(v)) => code(profiler::set_metadata(k, v)),
            _ => fail(Error::new(Status::InvalidUtf8, "sp_set_metadata: the key or the value is not valid UTF-8")),
        }
    })
}

/// sp_set_metadata for a key and a value of `key_len` and `value_len` bytes that need not be
/// NUL-terminated and whose trailing blanks are not part of them (Fortran's `character`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_set_metadata_padded(key: *const c_char, key_len: usize, value: *const c_char, value_len: usize) -> c_int {
    guard_cold(|| {
        if key.is_null() || value.is_null() {
            return fail(Error::new(Status::NullArgument, "sp_set_metadata: the key or the value is NULL"));
        }
        if key_len > 1 << 20 || value_len > 1 << 20 {
            return fail(Error::new(Status::InvalidArgument, "sp_set_metadata: the key or the value is longer than 1 MiB"));
        }
        // SAFETY: the caller passes buffers of these lengths (the Fortran module passes len()).
        let (k, v) = unsafe { (std::slice::from_raw_parts(key as *const u8, key_len), std::slice::from_raw_parts(value as *const u8, value_len)) };
        let trim = |b: &[u8]| -> Vec<u8> {
            let end = b.iter().rposition(|&c| c != b' ').map_or(0, |p| p + 1);
            b[..end].to_vec()
        };
        match (String::from_utf8(trim(k)), String::from_utf8(trim(v))) {
            (Ok(k), Ok(v)) if !k.contains('\0') && !v.contains('\0') => code(profiler::set_metadata(&k, &v)),
            _ => fail(Error::new(Status::InvalidUtf8, "sp_set_metadata: the key or the value is not valid UTF-8 or holds a NUL byte")),
        }
    })
}

/// Stop profiling and write the file: one HDF5 file per run, written under a temporary name
/// and renamed (or to a fallback location named on stderr when the target is not writable).
/// Prints the summary table unless verbosity is 0. Calls still open are reported and counted.
/// Later start/stop calls return SP_ERR_FINALIZED; a second sp_finalize returns
/// SP_ALREADY_FINALIZED. If never called, the file is written at process exit.
#[unsafe(no_mangle)]
pub extern "C" fn sp_finalize() -> c_int {
    guard_cold(|| match profiler::finalize() {
        Ok(s) => s.code(),
        Err(e) => fail(e),
    })
}

/// Start sampling: `hz` times per second of each thread's CPU time, every recording thread
/// (and the calling one) is interrupted and the interrupted source line is counted under the
/// thread's innermost open region (samples outside every region are counted as such).
/// `sp_finalize` writes them into the profile (rank<N>/line_profile, read by `sptool lines`
/// and `scope-profiler line-profile`) and to `<prefix>_rank<NNNNN>.sps` beside it (read by
/// `scope-profiler native-lines`). Each thread is sampled by its own CPU-time clock: a perf
/// `task-clock` event, or a per-thread timer where perf events are refused; the signal is a
/// free real-time signal, never SIGPROF. `SCOPE_PROFILER_SAMPLE_HZ` starts it at sp_setup.
/// Calling it while sampling runs changes the rate. Returns SP_OK, SP_ERR_INVALID_ARGUMENT (hz
/// outside 1..10000), SP_ERR_UNSUPPORTED (no way to sample here: sp_last_error says why),
/// SP_ERR_NOT_INITIALIZED or SP_ERR_FINALIZED. A no-op returning SP_OK when profiling is disabled.
#[unsafe(no_mangle)]
pub extern "C" fn sp_start_sampling(hz: c_int) -> c_int {
    guard(|| code(profiler::start_sampling(hz)))
}

/// Stop sampling every thread, keeping the samples for sp_finalize. A no-op when not sampling.
/// Returns SP_OK, SP_ERR_NOT_INITIALIZED or SP_ERR_FINALIZED.
#[unsafe(no_mangle)]
pub extern "C" fn sp_stop_sampling() -> c_int {
    guard(|| code(profiler::stop_sampling()))
}

/// Statistics of region `handle` over every thread's completed calls so far: count, total,
/// minimum, maximum and exclusive time. Does not stop or slow the recording threads (no lock
/// on their path); a call completing meanwhile may be counted in some fields and not yet in
/// others. Works in every layout, and after sp_finalize (the final numbers). `out->struct_size`
/// must be set to sizeof(sp_stats). Returns SP_OK or a negative status.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_region_get_stats(handle: i32, out: *mut sp_stats) -> c_int {
    guard_cold(|| {
        if out.is_null() {
            return fail(Error::new(Status::NullArgument, "sp_region_get_stats: out is NULL"));
        }
        // SAFETY: non-null; struct_size is the first field.
        let size = unsafe { (*out).struct_size };
        let min = std::mem::offset_of!(sp_stats, max_ns) + 8;
        if size < min || size > 65_536 {
            return fail(Error::new(Status::InvalidArgument, format!("sp_stats.struct_size is {size}: set it to sizeof(sp_stats)")));
        }
        if handle < 0 {
            return fail(Error::new(Status::InvalidHandle, format!("region handle {handle} is negative (a failed sp_region_register?)")));
        }
        match profiler::region_stats(handle as u32) {
            Ok(st) => {
                let full = sp_stats {
                    struct_size: size,
                    count: st.count as i64,
                    total_ns: st.total,
                    min_ns: st.min,
                    max_ns: st.max,
                    exclusive_ns: st.exclusive,
                };
                let n = size.min(std::mem::size_of::<sp_stats>());
                // SAFETY: the caller's struct holds at least `size` bytes; we copy the fields it knows.
                unsafe { std::ptr::copy_nonoverlapping((&full as *const sp_stats).cast::<u8>(), out.cast::<u8>(), n) };
                SP_OK
            }
            Err(e) => fail(e),
        }
    })
}

/// Print the summary table of this process's completed calls so far to stdout (the table
/// sp_finalize prints, for this process only), without stopping the recording threads.
#[unsafe(no_mangle)]
pub extern "C" fn sp_print_summary() -> c_int {
    guard_cold(|| match profiler::live_summary() {
        Ok(text) => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
            SP_OK
        }
        Err(e) => fail(e),
    })
}

/// The message of the last error on the calling thread ("" if none). The pointer stays valid
/// until the next failing call on this thread. Not async-signal-safe; from a signal handler
/// that interrupted this library on the same thread it returns a fixed message.
#[unsafe(no_mangle)]
pub extern "C" fn sp_last_error() -> *const c_char {
    if crate::reentry::busy() || profiler::thread_in_call() {
        return c"(no message: called from a signal handler that interrupted scope_profiler)".as_ptr();
    }
    catch_unwind(|| LAST_ERROR.with(|e| e.borrow().as_ptr())).unwrap_or(c"internal error".as_ptr())
}

/// A static description of a status code (never NULL).
#[unsafe(no_mangle)]
pub extern "C" fn sp_status_string(status: c_int) -> *const c_char {
    const fn z(s: Status) -> &'static CStr {
        match s {
            Status::Ok => c"success",
            Status::AlreadySetUp => c"profiling was already set up; the second sp_setup was ignored",
            Status::AlreadyFinalized => c"profiling was already finalized; the second sp_finalize was ignored",
            Status::NotInitialized => c"sp_setup has not been called: the call was ignored",
            Status::Finalized => c"profiling has been finalized: the call was ignored",
            Status::NullArgument => c"a required pointer argument is NULL",
            Status::InvalidArgument => c"an argument is invalid",
            Status::EmptyName => c"the region name is empty",
            Status::NameTooLong => c"the region name is longer than SP_MAX_NAME_LEN bytes",
            Status::InvalidUtf8 => c"the region name is not valid UTF-8 or contains a NUL byte",
            Status::InvalidHandle => c"the region handle was not returned by sp_region_register",
            Status::TooManyRegions => c"too many distinct regions (limit SP_MAX_REGIONS)",
            Status::NestingTooDeep => c"regions nest deeper than SP_MAX_DEPTH on this thread (missing stops?)",
            Status::UnmatchedStop => c"stop of a region that is not open on this thread",
            Status::NotInnermost => c"stop of a region that is not the innermost open one; inner regions were closed unrecorded",
            Status::WriteFailed => c"the profile file could not be written",
            Status::Mpi => c"an MPI operation failed",
            Status::Unsupported => c"not possible on this machine or in this process (see sp_last_error)",
            Status::Reentrant => c"called from a signal handler that interrupted a call of scope_profiler on the same thread: refused",
            Status::Panic => c"internal error (a panic was caught); the host program is unaffected",
        }
    }
    match Status::from_code(status) {
        Some(s) => z(s).as_ptr(),
        None => c"unknown status code".as_ptr(),
    }
}

/// Combine the per-rank files (`<stem>.rank<N>.h5`) that ranks write when MPI is not usable at
/// finalize into one profile at `output`, as if the run had gathered over MPI. `inputs` holds
/// `n_inputs` NUL-terminated paths. The command `scope_profiler_merge` does the same.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sp_merge_rank_files(output: *const c_char, inputs: *const *const c_char, n_inputs: usize) -> c_int {
    guard_cold(|| {
        if output.is_null() || (inputs.is_null() && n_inputs > 0) {
            return fail(Error::new(Status::NullArgument, "sp_merge_rank_files: output or inputs is NULL"));
        }
        let path = |p: *const c_char| -> Result<std::path::PathBuf, Error> {
            match unsafe { optional_str(p, "path") }? {
                Some(s) => Ok(s.into()),
                None => Err(Error::new(Status::NullArgument, "sp_merge_rank_files: an input path is NULL")),
            }
        };
        let run = || -> Result<(), Error> {
            let out = path(output)?;
            let mut list = Vec::with_capacity(n_inputs);
            for i in 0..n_inputs {
                // SAFETY: the caller passes n_inputs readable pointers.
                list.push(path(unsafe { *inputs.add(i) })?);
            }
            crate::merge::merge_rank_files(&out, &list).map(|_| ())
        };
        code(run())
    })
}

/// 1 when profiling is switched off for the run (SCOPE_PROFILER_DISABLE=1 at sp_setup): every
/// call is then a no-op returning SP_OK. 0 otherwise. Lets a language binding skip its calls
/// altogether (the Fortran module asks once, after sp_setup).
#[unsafe(no_mangle)]
pub extern "C" fn sp_is_disabled() -> c_int {
    profiler::switched_off() as c_int
}

/// The library version, e.g. "0.1.0".
#[unsafe(no_mangle)]
pub extern "C" fn sp_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_constants_match_the_core() {
        let pairs = [
            (SP_OK, Status::Ok), (SP_ALREADY_SET_UP, Status::AlreadySetUp), (SP_ALREADY_FINALIZED, Status::AlreadyFinalized),
            (SP_ERR_NOT_INITIALIZED, Status::NotInitialized), (SP_ERR_FINALIZED, Status::Finalized),
            (SP_ERR_NULL_ARGUMENT, Status::NullArgument), (SP_ERR_INVALID_ARGUMENT, Status::InvalidArgument),
            (SP_ERR_EMPTY_NAME, Status::EmptyName), (SP_ERR_NAME_TOO_LONG, Status::NameTooLong),
            (SP_ERR_INVALID_UTF8, Status::InvalidUtf8), (SP_ERR_INVALID_HANDLE, Status::InvalidHandle),
            (SP_ERR_TOO_MANY_REGIONS, Status::TooManyRegions), (SP_ERR_NESTING_TOO_DEEP, Status::NestingTooDeep),
            (SP_ERR_UNMATCHED_STOP, Status::UnmatchedStop), (SP_ERR_NOT_INNERMOST, Status::NotInnermost),
            (SP_ERR_WRITE_FAILED, Status::WriteFailed), (SP_ERR_MPI, Status::Mpi), (SP_ERR_UNSUPPORTED, Status::Unsupported),
            (SP_ERR_REENTRANT, Status::Reentrant),
            (SP_ERR_INTERNAL, Status::Panic),
        ];
        assert_eq!(pairs.len(), Status::ALL.len());
        for (c, s) in pairs {
            assert_eq!(c, s.code(), "{s:?}");
        }
        assert_eq!(SP_MAX_NAME_LEN, crate::registry::MAX_NAME_LEN);
        assert_eq!(SP_MAX_DEPTH, crate::recorder::MAX_DEPTH);
        assert_eq!(SP_MAX_REGIONS, crate::registry::MAX_REGIONS);
    }

    #[test]
    fn literals_are_read_only_and_buffers_are_not() {
        let literal: &'static [u8] = b"a literal\0";
        assert!(in_read_only_segment(literal.as_ptr(), literal.len()));
        let heap = b"on the heap\0".to_vec();
        assert!(!in_read_only_segment(heap.as_ptr(), heap.len()));
        let stack = *b"on the stack\0";
        assert!(!in_read_only_segment(stack.as_ptr(), stack.len()));
    }

    #[test]
    fn status_strings_match_core_descriptions() {
        for s in Status::ALL {
            let text = unsafe { CStr::from_ptr(sp_status_string(s.code())) }.to_str().unwrap();
            assert_eq!(text, s.describe());
        }
        let unknown = unsafe { CStr::from_ptr(sp_status_string(777)) };
        assert_eq!(unknown.to_str().unwrap(), "unknown status code");
    }
}
