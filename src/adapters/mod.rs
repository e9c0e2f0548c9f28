//! The sources of regions other than the library's own API, one file per adapter: each is
//! the C side of another tool's interface (its exported symbols, its C types, its argument
//! checks and its one panic boundary), and all of them enter the recording through the small
//! interface below, never through `profiler` directly. The next adapter (CUPTI, roctx,
//! Caliper's C API) is one new file here.
//!
//! - `ompt`: the OpenMP tools interface (`ompt_start_tool`); the constructs are `openmp`'s.
//! - `functions`: GCC's and Clang's `-finstrument-functions` hooks; the work is `functions`'.
//! - `mpi_calls`: the MPI plugin's internal table (`sp__mpi_core_api`); the work is
//!   `mpi_calls`'.
//! - `kokkos`: the Kokkos tools interface (`kokkosp_*`, docs/kokkos.md).
//! - `nvtx`: the NVTX injection (`InitializeInjectionNvtx2`, docs/nvtx.md).
//!
//! The interface: register a name once (`register`, or `named` by a name cached by pointer
//! and content, as the C API's by-name calls are); start and stop a region on the calling
//! thread (`start`/`stop` by id, `start_named`/`stop_named` by name, `push_named`/`pop_pushed`
//! for a stack whose pops name no region); an instant event
//! (`instant`); a range that may end on another thread than the one that started it
//! (`range_start`/`range_end`: recorded on the rank's track of asynchronous ranges, never in
//! a thread's nesting); a counter value (`counter`); and, for the adapters whose regions are
//! named at finalize, the calling thread's recorder (`on_thread`, `on_running_thread`), with
//! one fast path beside it for the hooks of instrumented functions, the most frequent of all
//! (`function_hook`). Setting up and writing the profile
//! from another tool's hooks: `set_up`, `not_set_up`, `write_now`, `write_inside_mpi_finalize`,
//! `write_before_abort`.

/// cbindgen:ignore
pub mod functions;
/// cbindgen:ignore
pub mod kokkos;
/// cbindgen:ignore
pub mod mpi_calls;
/// cbindgen:ignore
pub mod nvtx;
/// cbindgen:ignore
pub mod ompt;

use crate::recorder::ThreadData;
use crate::status::{Result, Status};
use crate::{clock, profiler, run_values};

pub use crate::profiler::{CallerName, Hook, HookThread, ImplicitOrigin, Popped, Recorder};

/// The id of `name` (registered at its first use; every later use gets the same id). 0 while
/// profiling is switched off.
pub fn register(name: &[u8]) -> Result<u32> {
    profiler::register(name)
}

/// Open a call of region `id` on the calling thread.
#[inline(always)]
pub fn start(id: u32) -> Result<()> {
    profiler::start_id(id)
}

/// Close the calling thread's innermost call of region `id`.
#[inline(always)]
pub fn stop(id: u32) -> Result<()> {
    profiler::stop_id(id)
}

/// Open a call of the region a caller's name stands for, without hashing it once seen: see
/// `profiler::start_named` (`token` is where the caller keeps the name). The region's id
/// (for `stop`), None when not recording.
#[inline(always)]
pub fn start_named<'a>(token: usize, same: impl Fn(&[u8]) -> bool, read: impl FnOnce() -> Result<CallerName<'a>>) -> Result<Option<u32>> {
    profiler::start_named_id(token, same, read)
}

/// Start the region a caller's name stands for (as `start_named`) and push it on the calling
/// thread's stack `key` of this adapter's regions whose stops name none (NVTX's push/pop, per
/// domain): the push's level on that stack. One window of the thread, no lock, no allocation
/// once the name is seen.
#[inline(always)]
pub fn push_named<'a>(key: usize, token: usize, same: impl Fn(&[u8]) -> bool, read: impl FnOnce() -> Result<CallerName<'a>>) -> Result<u32> {
    profiler::push_named(key, token, same, read)
}

/// A push on stack `key` that starts nothing (a refused name): its pop stops nothing.
pub fn push_nothing(key: usize) -> Result<u32> {
    profiler::push_nothing(key)
}

/// Pop the calling thread's stack `key` (of `push_named`) and stop the region popped.
#[inline(always)]
pub fn pop_pushed(key: usize) -> Result<Popped> {
    profiler::pop_pushed(key)
}

/// The id of the region a caller's name stands for, looked up as `start_named` does (no
/// hashing once seen), starting nothing; None when not recording.
#[inline(always)]
pub fn named<'a>(token: usize, same: impl Fn(&[u8]) -> bool, read: impl FnOnce() -> Result<CallerName<'a>>) -> Result<Option<u32>> {
    profiler::named_id(token, same, read)
}

/// The name cache's key (`token` of `start_named`) for a name that an adapter got at address
/// `p` and completes with a suffix of its own: `kind` (1 to 255) tells the suffixes apart, 0
/// is no suffix, the key the C API's by-name calls use for the same address. User-space
/// addresses lie below 2^56, so keys of different kinds never meet, and a name in read-only
/// memory (`CallerName::immutable`, never compared again) cannot be taken for the same
/// name with another suffix.
#[inline(always)]
pub const fn name_token(p: usize, kind: u8) -> usize {
    p ^ ((kind as usize) << 56)
}

/// Whether `len` bytes at `p` lie in a read-only segment of a loaded object (a string literal):
/// a name there never changes (`CallerName::immutable`). Not on the hot path (a walk of the
/// loaded objects): for a cache miss.
pub fn read_only(p: *const u8, len: usize) -> bool {
    crate::ffi::in_read_only_segment(p, len)
}

/// The stop counterpart of `start_named`.
#[inline(always)]
pub fn stop_named<'a>(token: usize, same: impl Fn(&[u8]) -> bool, read: impl FnOnce() -> Result<CallerName<'a>>) -> Result<()> {
    profiler::stop_named(token, same, read)
}

/// None when the calling thread skips this call site (an excluded or throttled instrumented
/// function): a few loads, no clock read; otherwise the thread, for `function_hook`.
#[inline(always)]
pub fn site_thread(addr: u64) -> Option<HookThread> {
    profiler::site_thread(addr)
}

/// The fast path of the instrumented functions' hooks, on the thread `site_thread` gave
/// (`profiler::function_hook`): `f` on the thread's data and its late-named state inside the
/// thread's recorder window, in the plain running state only; `Slow` sends the hook to its
/// generic path (`on_thread`).
#[inline(always)]
pub fn function_hook<T: Copy, R>(
    th: HookThread,
    first: impl FnOnce() -> T,
    f: impl FnOnce(&mut ThreadData, &mut crate::late::ThreadLate, T) -> Option<R>,
) -> Hook<T, R> {
    profiler::function_hook(th, first, f)
}

/// The clock the recording reads (ticks), for a range timed by an adapter.
#[inline(always)]
pub fn now() -> i64 {
    clock::now()
}

/// An instant event of region `id` on the calling thread: a call of no duration, now.
pub fn instant(id: u32) -> bool {
    let t = clock::now_stop();
    on_running_thread(|d| d.record_closed(id, t, t)).is_some()
}


/// A value of the counter `name` (a byte count, a high-water mark): the last one and the
/// largest are the rank's attributes in the file.
pub fn counter(name: &str, value: i64) {
    run_values::set_counter(name, value);
}

/// A fact of the calling process (the name of a thread): a rank attribute in the file.
pub fn note(name: &str, value: &str) {
    run_values::set_note(name, value);
}

/// The adapter `name` is in use (`what` it is): the rank attribute `source:<name>`, which
/// `sptool inspect` lists among the sources of the file's regions.
pub fn note_source(name: &str, what: &str) {
    run_values::set_note(&format!("source:{name}"), what);
}

/// Run `f` on the calling thread's recorder (the regions named at finalize: OpenMP
/// constructs, instrumented functions); None while not recording.
#[inline(always)]
pub fn on_thread<R>(f: impl FnOnce(&mut Recorder<'_>) -> R) -> Option<R> {
    profiler::with_recorder(f)
}

/// Run `f` on the calling thread's recorded data (calls timed elsewhere: MPI calls); None
/// while not recording.
#[inline(always)]
pub fn on_running_thread<R>(f: impl FnOnce(&mut ThreadData) -> R) -> Option<R> {
    profiler::with_running_thread(f)
}

/// A hook whose source stopped recording: a program thread's wait while the profile is
/// written after a signal that ends the process (`signals::hold_if_ending`).
#[inline(always)]
pub fn stopped_hook() {
    profiler::stopped_hook()
}

/// Whether nothing has set profiling up yet.
#[inline(always)]
pub fn not_set_up() -> bool {
    profiler::is_uninitialized()
}

/// Whether profiling was switched off for the run (`SCOPE_PROFILER_DISABLE`, a forked child).
#[inline(always)]
pub fn switched_off() -> bool {
    profiler::switched_off()
}

/// Set profiling up as `sp_setup(NULL)` would, for the tool that `origin` names.
pub fn set_up(origin: ImplicitOrigin) -> Result<Status> {
    profiler::setup_implicit(origin)
}

/// Write the profile now (another tool's end of the run), as `sp_finalize` would.
pub fn write_now() -> Result<Status> {
    profiler::finalize()
}

/// Write the profile inside the program's `MPI_Finalize`.
pub fn write_inside_mpi_finalize() {
    profiler::finalize_inside_mpi_finalize()
}

/// Write this rank's profile before `MPI_Abort` kills the job.
pub fn write_before_abort() {
    profiler::finalize_before_abort()
}

/// Add `bytes` moved to region `id`'s calls on the calling thread (a deep copy's size).
pub fn add_bytes(id: u32, bytes: u64) {
    let _ = profiler::annotate(id, 1, bytes as f64);
}

/// Whether the environment variable `name` says off (`0`, `false`, `off`, `no`), or profiling
/// is disabled altogether (`SCOPE_PROFILER_DISABLE=1`).
pub fn switched_off_by_env(name: &str) -> bool {
    let off = |var: &str, want: bool| std::env::var(var).ok().and_then(|v| crate::config::env_bool(&v)) == Some(want);
    off(name, false) || off(crate::config::env::DISABLE, true)
}

/// Another copy of the library is the one the program sees (it is linked with one, and another
/// tool loaded another file): that copy is profiling, this one stays out.
pub fn another_copy_is_used() -> bool {
    // SAFETY: dlsym with a NUL-terminated name; the result is only compared.
    let seen = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"sp_setup".as_ptr()) };
    let ours = crate::ffi::sp_setup as *const () as *mut std::ffi::c_void;
    !seen.is_null() && seen != ours
}

// ---------------------------------------------------------------------------------------
// Ranges that may end on another thread than the one that started them (NVTX's start/end
// ranges; roctx's and Caliper's asynchronous ones would be the same). They are recorded on the
// rank's track of asynchronous ranges (a pseudo thread of the file, `thread_os_ids` -1, as
// Nsight Systems shows them on a row of their own): none nests in a thread's calls, none
// encloses anything, ranges of the same name may overlap; which threads started and ended
// them is counted in the rank attributes `async_range_regions` / `async_range_threads`.

/// Ranges open at once at most (as deep as a thread's nesting may go): a later start is
/// refused (said once, counted in the region's `dropped_calls`).
pub const MAX_OPEN_RANGES: usize = crate::recorder::MAX_DEPTH;

/// An open range: its region, start (ticks) and the Linux id of the thread that started it.
#[derive(Clone, Copy)]
struct RangeSlot {
    id: u32,
    start: i64,
    started_on: i64,
    /// Bumped each time the slot is taken: a handle of an ended range names an older one.
    generation: u32,
    open: bool,
}

/// The open ranges by handle: a slot per range, reused once it ended.
struct Ranges {
    slots: Vec<RangeSlot>,
    free: Vec<u32>,
    unknown_ends: i64,
}

static RANGES: parking_lot::Mutex<Ranges> = parking_lot::Mutex::new(Ranges { slots: Vec::new(), free: Vec::new(), unknown_ends: 0 });

/// How an end of a range went.
#[derive(Debug, PartialEq, Eq)]
pub enum RangeEnd {
    /// Recorded.
    Ended,
    /// The handle names no open range (ended already, never given out, or refused at its
    /// start): counted in the rank attribute `counter:async_range_unknown_ends`.
    NotOpen,
    /// Not recording (profiling off or finalized, or a signal handler inside the library).
    NotRecording,
}

/// The Linux id of the calling thread (asked once per thread).
fn this_os_tid() -> i64 {
    thread_local!(static TID: std::cell::Cell<i64> = const { std::cell::Cell::new(0) });
    TID.try_with(|t| {
        if t.get() == 0 {
            // SAFETY: gettid has no preconditions.
            t.set(unsafe { libc::syscall(libc::SYS_gettid) } as i64);
        }
        t.get()
    })
    // SAFETY: as above (the thread's TLS is being torn down).
    .unwrap_or_else(|_| unsafe { libc::syscall(libc::SYS_gettid) } as i64)
}

/// Start a range of region `id` that any thread may end (`range_end`): its handle, never 0;
/// 0 when not recording, or when `MAX_OPEN_RANGES` are open (said once). A lock per call.
pub fn range_start(id: u32) -> u64 {
    let started_on = this_os_tid();
    let start = clock::now();
    profiler::with_track(|d| {
        if !d.open_on_track(id, start) {
            crate::warn::once("async-ranges-open", &format!("more than {MAX_OPEN_RANGES} ranges open at once (their ends missing?): later ones are not recorded (counted as dropped calls)"));
            return 0;
        }
        let mut r = RANGES.lock();
        let slot = match r.free.pop() {
            Some(i) => i as usize,
            None => {
                r.slots.push(RangeSlot { id, start, started_on, generation: 0, open: false });
                r.slots.len() - 1
            }
        };
        let s = &mut r.slots[slot];
        *s = RangeSlot { id, start, started_on, generation: s.generation.wrapping_add(1), open: true };
        (u64::from(s.generation) << 32) | (slot as u64 + 1)
    })
    .unwrap_or(0)
}

/// End the range `handle` (of `range_start`, on any thread): recorded on the track of
/// asynchronous ranges, from its start to now. An end of a handle that names no open range
/// changes nothing (counted). A lock per call.
pub fn range_end(handle: u64) -> RangeEnd {
    let end = clock::now_stop();
    let ended_on = this_os_tid();
    profiler::with_track(|d| {
        let mut r = RANGES.lock();
        let slot = (handle & 0xffff_ffff) as usize;
        let open = slot.checked_sub(1).and_then(|i| r.slots.get(i).map(|s| (i, *s))).filter(|(_, s)| s.open && u64::from(s.generation) == handle >> 32);
        let Some((i, s)) = open else {
            r.unknown_ends += 1;
            counter("async_range_unknown_ends", r.unknown_ends);
            return RangeEnd::NotOpen;
        };
        r.slots[i].open = false;
        r.free.push(i as u32);
        drop(r);
        d.close_on_track(s.id, s.start, end.max(s.start));
        run_values::count_range(s.id, s.started_on, ended_on);
        RangeEnd::Ended
    })
    .unwrap_or(RangeEnd::NotRecording)
}

// ---------------------------------------------------------------------------------------
// Names that other tools hand in (a kernel label, a range message): untrusted C strings.

/// The longest name kept (the registry's limit); a longer one is cut.
pub const MAX_LABEL: usize = crate::registry::MAX_NAME_LEN;

/// The bytes of another tool's NUL-terminated string, at most `MAX_LABEL + 1` of them read
/// (more means over-long); None for NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string (or at least `MAX_LABEL + 1` readable bytes).
#[inline(always)]
pub unsafe fn c_bytes<'a>(p: *const std::ffi::c_char) -> Option<&'a [u8]> {
    if p.is_null() {
        return None;
    }
    // SAFETY: as the caller promises; strnlen reads no further than the limit.
    let len = unsafe { libc::strnlen(p, MAX_LABEL + 1) };
    // SAFETY: len bytes are readable.
    Some(unsafe { std::slice::from_raw_parts(p as *const u8, len) })
}

/// Whether the C string at `p` followed by `suffix` is `cached` (the name cache's check; no
/// byte of `p` beyond the first difference is read).
///
/// # Safety
/// `p` points to a NUL-terminated string.
#[inline(always)]
pub unsafe fn c_equals_with_suffix(p: *const std::ffi::c_char, cached: &[u8], suffix: &[u8]) -> bool {
    let Some(head_len) = cached.len().checked_sub(suffix.len()) else { return false };
    let (head, tail) = cached.split_at(head_len);
    if tail != suffix {
        return false;
    }
    let p = p as *const u8;
    for (i, &b) in head.iter().enumerate() {
        // SAFETY: bytes 0..i matched non-NUL bytes of `cached`, so the string extends to i.
        if unsafe { *p.add(i) } != b {
            return false;
        }
    }
    // SAFETY: as above, the string extends at least to head.len().
    unsafe { *p.add(head.len()) == 0 }
}

/// A region name made of another tool's `raw` label and our `suffix` (` [for]`): an empty or
/// missing label is replaced, one that is not UTF-8 has its bad bytes replaced, an over-long
/// one is cut; each said once per `tool`. Mangled C++ type names (Kokkos labels an unnamed
/// kernel by its functor's type, `Functor/Tag`) are demangled.
pub fn region_name(tool: &str, raw: Option<&[u8]>, suffix: &str) -> String {
    let raw = match raw {
        None => {
            crate::warn::once(&format!("{tool}-label-null"), &format!("{tool}: a NULL name was given; recorded as '(null)'"));
            b"(null)".as_slice()
        }
        Some([]) => {
            crate::warn::once(&format!("{tool}-label-empty"), &format!("{tool}: an empty name was given; recorded as '(unnamed)'"));
            b"(unnamed)".as_slice()
        }
        Some(r) => r,
    };
    let mut name = match std::str::from_utf8(raw) {
        Ok(s) => demangle_label(s),
        Err(_) => {
            let fixed = String::from_utf8_lossy(raw).into_owned();
            crate::warn::once(&format!("{tool}-label-utf8"), &format!("{tool}: a name that is not UTF-8 was given; its bad bytes are replaced ('{fixed}')"));
            fixed
        }
    };
    let room = MAX_LABEL - suffix.len();
    if name.len() > room {
        let mut end = room;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
        let mut shown = 60.min(name.len());
        while !name.is_char_boundary(shown) {
            shown -= 1;
        }
        crate::warn::once(&format!("{tool}-label-long"), &format!("{tool}: a name longer than {room} bytes was given; it is cut to {room} ('{}...')", &name[..shown]));
    }
    name.push_str(suffix);
    name
}

/// `a/b` with each part that is a mangled C++ type name (`N6Kokkos4Impl...E`, `Z4mainEUliE_`,
/// `7Functor`) demangled; anything else as it is.
fn demangle_label(s: &str) -> String {
    let looks_mangled = |p: &str| {
        let b = p.as_bytes();
        b.len() > 2 && p.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') && (matches!(b[0], b'N' | b'Z') && b[1].is_ascii_digit() || b[0].is_ascii_digit())
    };
    if !s.split('/').any(looks_mangled) {
        return s.to_string();
    }
    s.split('/')
        .map(|p| {
            if !looks_mangled(p) {
                return p.to_string();
            }
            // A plain class name (`7Functor`) is a name only inside a nested name.
            let mangled = if p.as_bytes()[0].is_ascii_digit() { format!("_ZN{p}E") } else { format!("_Z{p}") };
            let d = crate::symbols::pretty_function(&mangled, None);
            if d.starts_with("_Z") { p.to_string() } else { d }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// A per-thread stack of the regions an adapter opened whose stop names none (Kokkos's
/// `popRegion`, NVTX's `nvtxRangePop`): ids, `NOT_RECORDED` for a start that recorded nothing
/// (so that its stop pops it too), and a count of starts beyond the depth kept.
pub struct Stack {
    ids: Vec<u32>,
    beyond: u32,
}

/// A start that recorded nothing (profiling off, a name refused).
pub const NOT_RECORDED: u32 = u32::MAX;

impl Stack {
    pub const fn new() -> Stack {
        Stack { ids: Vec::new(), beyond: 0 }
    }

    #[inline(always)]
    pub fn push(&mut self, id: u32) {
        if self.ids.len() < crate::recorder::MAX_DEPTH {
            self.ids.push(id);
        } else {
            self.beyond += 1;
        }
    }

    /// The innermost start's id (`NOT_RECORDED` for one beyond the depth kept); None when
    /// nothing is open.
    #[inline(always)]
    pub fn pop(&mut self) -> Option<u32> {
        if self.beyond > 0 {
            self.beyond -= 1;
            return Some(NOT_RECORDED);
        }
        self.ids.pop()
    }

    pub fn depth(&self) -> usize {
        self.ids.len() + self.beyond as usize
    }
}

impl Default for Stack {
    fn default() -> Self {
        Stack::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_made_safe_and_readable() {
        assert_eq!(region_name("T", Some(b"flux"), " [for]"), "flux [for]");
        assert_eq!(region_name("T", None, " [for]"), "(null) [for]");
        assert_eq!(region_name("T", Some(b""), ""), "(unnamed)");
        assert_eq!(region_name("T", Some(b"a\xffb"), ""), "a\u{fffd}b");
        let long = region_name("T", Some(&[b'x'; 5000]), " [scan]");
        assert!(long.len() <= MAX_LABEL && long.ends_with("x [scan]"), "{}", long.len());
        assert_eq!(region_name("T", Some(b"Z4mainEUliE_"), ""), "main::{lambda(int)#1}");
        assert_eq!(region_name("T", Some(b"N6Kokkos4Impl3FooE/5MyTag"), ""), "Kokkos::Impl::Foo/MyTag");
        // Labels that only look a little like mangled names stay as they are.
        assert_eq!(region_name("T", Some(b"Kokkos::View::initialization [x]"), ""), "Kokkos::View::initialization [x]");
        assert_eq!(region_name("T", Some(b"3d_stencil"), ""), "3d_stencil");
    }

    #[test]
    fn c_names_compare_with_their_suffix() {
        // SAFETY: NUL-terminated literals.
        unsafe {
            assert!(c_equals_with_suffix(c"flux".as_ptr(), b"flux [for]", b" [for]"));
            assert!(!c_equals_with_suffix(c"flux".as_ptr(), b"flux [reduce]", b" [for]"));
            assert!(!c_equals_with_suffix(c"flu".as_ptr(), b"flux [for]", b" [for]"));
            assert!(!c_equals_with_suffix(c"fluxx".as_ptr(), b"flux [for]", b" [for]"));
            assert!(!c_equals_with_suffix(c"x".as_ptr(), b"]", b" [for]"));
            assert_eq!(c_bytes(c"abc".as_ptr()), Some(&b"abc"[..]));
            assert_eq!(c_bytes(std::ptr::null()), None);
        }
    }

    #[test]
    fn the_stack_pops_what_it_pushed_and_counts_beyond_its_depth() {
        let mut s = Stack::new();
        assert_eq!(s.pop(), None);
        for i in 0..crate::recorder::MAX_DEPTH as u32 + 2 {
            s.push(i);
        }
        assert_eq!(s.depth(), crate::recorder::MAX_DEPTH + 2);
        assert_eq!((s.pop(), s.pop()), (Some(NOT_RECORDED), Some(NOT_RECORDED)));
        assert_eq!(s.pop(), Some(crate::recorder::MAX_DEPTH as u32 - 1));
    }
}
