//! LIKWID C API (5.2 and 5.5, which agree in everything used here) as a table of function
//! pointers, loaded at run time with `dlopen`.
//!
//! Nothing here links against LIKWID: a program using this crate starts and runs on a
//! machine without LIKWID, and [`Likwid::load`] then returns an error value.
//!
//! Search order (first file that `dlopen` accepts wins, see [`candidates`]):
//! 1. `$LIKWID_HOME/lib`
//! 2. the prefix of `likwid-perfctr` found on `PATH`: `<prefix>/lib`, then the Debian
//!    multiarch directory `<prefix>/lib/<triplet>` (`x86_64-linux-gnu` on x86-64)
//! 3. the loader's default search (`LD_LIBRARY_PATH`, `ld.so.cache`, system dirs)
//!
//! with the names `liblikwid.so`, `liblikwid.so.5`, `liblikwid.so.5.5`, `liblikwid.so.5.2` in
//! each place. Only symbols that both `liblikwid.so.5.2` (Debian 12) and `liblikwid.so.5.5`
//! (5.5.1 from source) really export are declared (the data objects
//! `perfmon_verbosity`, `cpuid_info`, ... and `calc_metric` are not exported).
//! The library is never closed: LIKWID keeps state and atexit handlers in it.

#![allow(non_snake_case)]

mod loader;
mod types;

pub use loader::{LoadError, candidates, candidates_from, library_names};
pub use types::{CpuInfo, CpuTopology, LikwidConfiguration, NumaTopology};

use std::ffi::{c_char, c_double, c_int, c_void};
use std::path::PathBuf;
use std::sync::OnceLock;

/// `-EFAULT`: what the marker calls return when LIKWID is not initialised.
pub const EFAULT_RC: c_int = -14;
/// `-EINVAL`: what the perfmon getters return when perfmon is not initialised.
pub const EINVAL_RC: c_int = -22;

macro_rules! likwid_api {
    ($( $(#[$m:meta])* fn $name:ident ( $($arg:ty),* ) $(-> $ret:ty)? ; )*) => {
        /// The LIKWID C API (5.2 and 5.5) as function pointers. Obtain it with [`Likwid::load`].
        /// Every call is `unsafe`: the contracts are LIKWID's (see the spec, section 3).
        pub struct Likwid {
            /// The file that was loaded.
            pub path: PathBuf,
            /// `(major, minor, bugfix)` from `likwid_get{Major,Minor,Bugfix}Version`, which
            /// 5.5 exports and 5.2 does not (`None`).
            pub version: Option<(c_int, c_int, c_int)>,
            _handle: *mut c_void,
            $( $(#[$m])* pub $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
        }

        impl Likwid {
            /// Resolve every symbol from an open `dlopen` handle.
            ///
            /// # Safety
            /// `handle` must come from a successful `dlopen` of LIKWID 5.2 or 5.5.
            unsafe fn from_handle(handle: *mut c_void, path: PathBuf) -> Result<Likwid, LoadError> {
                Ok(Likwid {
                    $( $name: {
                        let sym = unsafe { loader::symbol(handle, stringify!($name)) }
                            .ok_or_else(|| LoadError::MissingSymbol {
                                path: path.clone(),
                                symbol: stringify!($name),
                            })?;
                        // SAFETY: the symbol has the C signature declared in likwid.h 5.2.
                        unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(sym) }
                    }, )*
                    version: unsafe { version_of(handle) },
                    path,
                    _handle: handle,
                })
            }
        }
    };
}

likwid_api! {
    // --- Marker API (likwid.h 3.1) ---
    fn likwid_markerInit();
    fn likwid_markerThreadInit();
    fn likwid_markerRegisterRegion(*const c_char) -> c_int;
    fn likwid_markerStartRegion(*const c_char) -> c_int;
    fn likwid_markerStopRegion(*const c_char) -> c_int;
    fn likwid_markerResetRegion(*const c_char) -> c_int;
    fn likwid_markerGetRegion(*const c_char, *mut c_int, *mut c_double, *mut c_double, *mut c_int);
    fn likwid_markerNextGroup();
    fn likwid_markerClose();
    fn likwid_getProcessorId() -> c_int;
    /// Returns 1 on success, 0 on failure (not 0/-errno).
    fn likwid_pinThread(c_int) -> c_int;
    // --- Configuration, topology, NUMA, affinity, access mode ---
    fn init_configuration() -> c_int;
    fn get_configuration() -> *mut LikwidConfiguration;
    fn topology_init() -> c_int;
    fn topology_finalize();
    fn get_cpuInfo() -> *mut CpuInfo;
    fn get_cpuTopology() -> *mut CpuTopology;
    /// Valid after `numa_init`.
    fn get_numaTopology() -> *mut NumaTopology;
    fn numa_init() -> c_int;
    fn numa_finalize();
    /// `void` in 5.2, `int` in 5.5 (ignored: same calling convention).
    fn affinity_init();
    fn affinity_finalize();
    /// Call after `topology_init` (which resets the mode to the build default).
    fn HPMmode(c_int);
    // --- perfmon (read-back, 3.2) ---
    fn perfmon_init(c_int, *const c_int) -> c_int;
    fn perfmon_addEventSet(*const c_char) -> c_int;
    fn perfmon_readMarkerFile(*const c_char) -> c_int;
    fn perfmon_getNumberOfRegions() -> c_int;
    fn perfmon_getGroupOfRegion(c_int) -> c_int;
    fn perfmon_getTagOfRegion(c_int) -> *mut c_char;
    fn perfmon_getEventsOfRegion(c_int) -> c_int;
    fn perfmon_getMetricsOfRegion(c_int) -> c_int;
    fn perfmon_getThreadsOfRegion(c_int) -> c_int;
    fn perfmon_getCpulistOfRegion(c_int, c_int, *mut c_int) -> c_int;
    fn perfmon_getTimeOfRegion(c_int, c_int) -> c_double;
    fn perfmon_getCountOfRegion(c_int, c_int) -> c_int;
    fn perfmon_getResultOfRegionThread(c_int, c_int, c_int) -> c_double;
    fn perfmon_getMetricOfRegionThread(c_int, c_int, c_int) -> c_double;
    fn perfmon_getNumberOfGroups() -> c_int;
    fn perfmon_getNumberOfEvents(c_int) -> c_int;
    fn perfmon_getNumberOfMetrics(c_int) -> c_int;
    fn perfmon_getMetricName(c_int, c_int) -> *mut c_char;
    fn perfmon_getEventName(c_int, c_int) -> *mut c_char;
    fn perfmon_getCounterName(c_int, c_int) -> *mut c_char;
    fn perfmon_getGroupName(c_int) -> *mut c_char;
    fn perfmon_getGroups(*mut *mut *mut c_char, *mut *mut *mut c_char, *mut *mut *mut c_char) -> c_int;
    fn perfmon_returnGroups(c_int, *mut *mut c_char, *mut *mut c_char, *mut *mut c_char);
    /// Never call before `perfmon_finalize` (double free, spec 5).
    fn perfmon_destroyMarkerResults();
    fn perfmon_finalize();
    fn perfmon_setVerbosity(c_int);
    /// TSC Hz calibrated by `timer_init` (run inside `perfmon_init`).
    fn timer_getCycleClock() -> u64;
}

/// The version functions, where the library has them.
///
/// # Safety
/// `handle` must be a live `dlopen` handle of LIKWID.
unsafe fn version_of(handle: *mut c_void) -> Option<(c_int, c_int, c_int)> {
    let get = |name: &str| -> Option<c_int> {
        let sym = unsafe { loader::symbol(handle, name) }?;
        // SAFETY: `int likwid_get*Version(void)` (likwid.h 5.5).
        let f = unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(sym) };
        Some(unsafe { f() })
    };
    Some((get("likwid_getMajorVersion")?, get("likwid_getMinorVersion")?, get("likwid_getBugfixVersion")?))
}

impl Likwid {
    /// LIKWID 5.5 keeps marker results per thread (gettid) where 5.2 keeps them per CPU.
    pub fn results_per_thread(&self) -> bool {
        self.version.is_some_and(|(major, minor, _)| (major, minor) >= (5, 5))
    }
}

// SAFETY: the table holds plain function pointers and an opaque handle that is never
// closed; LIKWID's own thread rules are the caller's business.
unsafe impl Send for Likwid {}
unsafe impl Sync for Likwid {}

static LOADED: OnceLock<Result<Likwid, LoadError>> = OnceLock::new();

impl Likwid {
    /// Load LIKWID once per process (cached, also the error). Never panics.
    pub fn load() -> Result<&'static Likwid, &'static LoadError> {
        LOADED.get_or_init(|| Likwid::load_from(&candidates())).as_ref()
    }

    /// Try each candidate in order and return the first that loads with every symbol.
    /// Not cached; a successful load stays mapped for the life of the process.
    pub fn load_from(candidates: &[PathBuf]) -> Result<Likwid, LoadError> {
        let mut tried = Vec::new();
        for cand in candidates {
            match loader::open(cand) {
                Ok(handle) => {
                    // SAFETY: a LIKWID library was opened; symbols are checked one by one.
                    match unsafe { Likwid::from_handle(handle, cand.clone()) } {
                        Ok(lib) => return Ok(lib),
                        Err(e) => tried.push((cand.clone(), e.to_string())),
                    }
                }
                Err(msg) => tried.push((cand.clone(), msg)),
            }
        }
        Err(LoadError::NotFound { tried })
    }
}

/// Copy a LIKWID-owned C string (never freed by us). NULL gives `None`.
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string that stays valid for the call.
pub unsafe fn owned_string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    Some(unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned())
}
