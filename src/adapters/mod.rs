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
//!
//! The interface: register a name once (`register`); start and stop a region on the calling
//! thread (`start`/`stop` by id, `start_named`/`stop_named` by a name cached by pointer and
//! content, as the C API's by-name calls are); an instant event (`instant`); a range timed
//! elsewhere, which may have started on another thread (`closed`); a counter value
//! (`counter`); and, for the adapters whose regions are named at finalize, the calling
//! thread's recorder (`on_thread`, `on_running_thread`). Setting up and writing the profile
//! from another tool's hooks: `set_up`, `not_set_up`, `write_now`, `write_inside_mpi_finalize`,
//! `write_before_abort`.

/// cbindgen:ignore
pub mod functions;
/// cbindgen:ignore
pub mod mpi_calls;
/// cbindgen:ignore
pub mod ompt;

use crate::recorder::ThreadData;
use crate::status::{Result, Status};
use crate::{clock, profiler, run_values};

pub use crate::profiler::{CallerName, ImplicitOrigin, Recorder};

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
/// `profiler::start_named` (`token` is where the caller keeps the name).
#[inline(always)]
pub fn start_named<'a>(token: usize, same: impl Fn(&[u8]) -> bool, read: impl FnOnce() -> Result<CallerName<'a>>) -> Result<()> {
    profiler::start_named(token, same, read)
}

/// The stop counterpart of `start_named`.
#[inline(always)]
pub fn stop_named<'a>(token: usize, same: impl Fn(&[u8]) -> bool, read: impl FnOnce() -> Result<CallerName<'a>>) -> Result<()> {
    profiler::stop_named(token, same, read)
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

/// A range of region `id` from `start` (ticks of `now`, possibly taken on another thread) to
/// now, recorded on the calling thread (the one that ends it) as a call closed inside its
/// innermost open call.
pub fn closed(id: u32, start: i64) -> bool {
    let end = clock::now_stop();
    on_running_thread(|d| d.record_closed(id, start.min(end), end)).is_some()
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
