//! Finding the MPI plugin at run time: the core links no MPI. When the process has an MPI
//! (its `PMPI_Initialized` is in the global symbol scope), the plugin built for that MPI's ABI
//! family is loaded from next to this library (`libscope_profiler_mpi_<family>.so`), or taken
//! from the process when it is already there (linked or preloaded for the MPI-call wrappers),
//! or from `SCOPE_PROFILER_MPI_LIBRARY`. The table mirrors `mpi/c/sp_mpi_plugin.h`.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use parking_lot::Mutex;

pub const ENV_LIBRARY: &str = "SCOPE_PROFILER_MPI_LIBRARY";
const VERSION: u32 = 2;

pub const I64: c_int = 0;
pub const U64: c_int = 1;
pub const F64: c_int = 2;
/// Two's-complement 128-bit integers (low word first), summed exactly; SUM only.
pub const I128: c_int = 3;
pub const SUM: c_int = 0;
pub const MIN: c_int = 1;
pub const MAX: c_int = 2;

type Handle = *mut c_void;

#[repr(C)]
pub struct Ops {
    pub struct_size: u32,
    pub version: u32,
    pub family: *const c_char,
    pub state: unsafe extern "C" fn() -> c_int,
    pub world: unsafe extern "C" fn(rank: *mut c_int, size: *mut c_int) -> c_int,
    pub comm_dup: unsafe extern "C" fn(from_fortran: c_int, fint: i32, comm: *mut Handle) -> c_int,
    pub comm_free: unsafe extern "C" fn(comm: Handle) -> c_int,
    pub comm_rank: unsafe extern "C" fn(comm: Handle, rank: *mut c_int) -> c_int,
    pub comm_size: unsafe extern "C" fn(comm: Handle, size: *mut c_int) -> c_int,
    pub send: unsafe extern "C" fn(comm: Handle, buf: *const c_void, len: u64, dest: c_int, tag: c_int) -> c_int,
    pub recv: unsafe extern "C" fn(comm: Handle, buf: *mut c_void, len: u64, source: c_int, tag: c_int) -> c_int,
    pub barrier: unsafe extern "C" fn(comm: Handle) -> c_int,
    pub bcast: unsafe extern "C" fn(comm: Handle, buf: *mut c_void, len: u64, root: c_int) -> c_int,
    pub allreduce: unsafe extern "C" fn(comm: Handle, inp: *const c_void, out: *mut c_void, count: c_int, ty: c_int, op: c_int) -> c_int,
    pub exscan: unsafe extern "C" fn(comm: Handle, inp: *const c_void, out: *mut c_void, count: c_int, ty: c_int, op: c_int) -> c_int,
    pub gather: unsafe extern "C" fn(comm: Handle, inp: *const c_void, len: u64, out: *mut c_void, root: c_int) -> c_int,
    pub file_open: unsafe extern "C" fn(comm: Handle, path: *const c_char, file: *mut Handle) -> c_int,
    pub file_write_at_all: unsafe extern "C" fn(file: Handle, offset: u64, buf: *const c_void, len: u64) -> c_int,
    pub file_write_pieces_all: unsafe extern "C" fn(file: Handle, n: u32, offsets: *const u64, lens: *const u64, bufs: *const *const c_void) -> c_int,
    pub file_close: unsafe extern "C" fn(file: Handle) -> c_int,
    pub at_finalize: unsafe extern "C" fn(cb: extern "C" fn()) -> c_int,
    pub error_string: unsafe extern "C" fn(code: c_int, buf: *mut c_char, cap: c_int),
    pub library_version: unsafe extern "C" fn(buf: *mut c_char, cap: c_int),
    pub world_fint: unsafe extern "C" fn() -> i32,
}

// SAFETY: the table is immutable static data of a library that is never unloaded.
unsafe impl Sync for Ops {}

/// What the process's MPI is doing, read through its own `PMPI_Initialized`/`PMPI_Finalized`
/// (whose C signatures are the same in every MPI), without the plugin. The PMPI names: the
/// MPI_ ones may be the plugin's wrappers, which must not record the profiler's own queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpiState {
    /// No MPI library in the process.
    Absent,
    NotInitialized,
    Usable,
    Finalized,
}

fn global_symbol(name: &str) -> *mut c_void {
    let c = CString::new(name).expect("symbol names have no NUL");
    // SAFETY: dlsym with a valid NUL-terminated name.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) }
}

pub fn state() -> MpiState {
    let (init, fin) = (global_symbol("PMPI_Initialized"), global_symbol("PMPI_Finalized"));
    if init.is_null() || fin.is_null() {
        return MpiState::Absent;
    }
    type Query = unsafe extern "C" fn(*mut c_int) -> c_int;
    let (mut i, mut f) = (0, 0);
    // SAFETY: both are MPI's `int MPI_X(int *flag)`, callable at any time.
    unsafe {
        std::mem::transmute::<*mut c_void, Query>(init)(&mut i);
        std::mem::transmute::<*mut c_void, Query>(fin)(&mut f);
    }
    match (i != 0, f != 0) {
        (_, true) => MpiState::Finalized,
        (true, false) => MpiState::Usable,
        (false, false) => MpiState::NotInitialized,
    }
}

/// The ABI family of the process's MPI, from `MPI_Get_library_version` (callable before
/// MPI_Init): "openmpi", or "mpich" for MPICH and its ABI relatives.
fn family() -> Option<&'static str> {
    let f = global_symbol("PMPI_Get_library_version");
    if f.is_null() {
        return None;
    }
    type Version = unsafe extern "C" fn(*mut c_char, *mut c_int) -> c_int;
    // Larger than either family's MPI_MAX_LIBRARY_VERSION_STRING (OpenMPI 256, MPICH 8192).
    let mut buf = vec![0u8; 16384];
    let mut len: c_int = 0;
    // SAFETY: the buffer is larger than any MPI writes into it.
    unsafe { std::mem::transmute::<*mut c_void, Version>(f)(buf.as_mut_ptr().cast(), &mut len) };
    let text = String::from_utf8_lossy(&buf[..buf.iter().position(|&b| b == 0).unwrap_or(0)]).into_owned();
    Some(if text.contains("Open MPI") || !global_symbol("ompi_mpi_comm_world").is_null() { "openmpi" } else { "mpich" })
}

/// The directory of this library (or of the executable it is linked into).
fn own_dir() -> Option<std::path::PathBuf> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr on the address of one of our own functions.
    if unsafe { libc::dladdr(own_dir as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr's file name is a NUL-terminated string owned by the loader.
    let path = std::path::PathBuf::from(unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned());
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    path.parent().map(|p| p.to_path_buf())
}

fn table_from(entry: *mut c_void, want: &str, from: &str) -> Result<&'static Ops, String> {
    type Entry = unsafe extern "C" fn() -> *const Ops;
    // SAFETY: `sp_mpi_plugin_ops` has this signature in every plugin version.
    let ops = unsafe { std::mem::transmute::<*mut c_void, Entry>(entry)() };
    if ops.is_null() {
        return Err(format!("{from} returned no table"));
    }
    // SAFETY: the plugin's table is static; its first two fields are the same in every version.
    let (size, version) = unsafe { ((*ops).struct_size, (*ops).version) };
    if version != VERSION || (size as usize) < std::mem::size_of::<Ops>() {
        return Err(format!("{from} is version {version} (size {size}); this library needs version {VERSION}"));
    }
    // SAFETY: checked version and size; static data of a library that stays loaded.
    let ops: &'static Ops = unsafe { &*ops };
    let fam = unsafe { CStr::from_ptr(ops.family) }.to_string_lossy();
    if fam != want {
        return Err(format!("{from} was built for {fam}, but the program runs on {want}"));
    }
    Ok(ops)
}

fn open(path: &str, want: &str) -> Result<&'static Ops, String> {
    let c = CString::new(path).map_err(|_| format!("{path}: NUL in the path"))?;
    // SAFETY: dlopen of a path; RTLD_LOCAL keeps its symbols (wrappers of MPI calls) from
    // interposing on anything: loaded this late, it is only our link to MPI.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        // SAFETY: dlerror returns a NUL-terminated message or null.
        let e = unsafe { libc::dlerror() };
        let msg = if e.is_null() { "unknown error".into() } else { unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned() };
        return Err(msg);
    }
    // SAFETY: valid handle and name.
    let entry = unsafe { libc::dlsym(h, c"sp_mpi_plugin_ops".as_ptr()) };
    if entry.is_null() {
        return Err(format!("{path} has no sp_mpi_plugin_ops"));
    }
    table_from(entry, want, path)
}

/// The plugin for the process's MPI; loaded once, kept for the life of the process. Errors are
/// returned (the caller warns once); a failed attempt is retried on the next call.
pub fn load() -> Result<&'static Ops, String> {
    static LOADED: Mutex<Option<&'static Ops>> = Mutex::new(None);
    let mut loaded = LOADED.lock();
    if let Some(ops) = *loaded {
        return Ok(ops);
    }
    let want = family().ok_or("the process has no MPI library")?;
    let name = format!("libscope_profiler_mpi_{want}.so");
    let mut tried = Vec::new();
    let found = (|| {
        if let Some(path) = std::env::var_os(ENV_LIBRARY).filter(|p| !p.is_empty()) {
            let path = path.to_string_lossy().into_owned();
            return open(&path, want).map_err(|e| format!("{ENV_LIBRARY}={path}: {e}"));
        }
        let entry = global_symbol("sp_mpi_plugin_ops");
        if !entry.is_null() {
            match table_from(entry, want, "the MPI plugin linked into the program") {
                Ok(ops) => return Ok(ops),
                Err(e) => tried.push(e),
            }
        }
        if let Some(dir) = own_dir() {
            let path = dir.join(&name);
            if path.exists() {
                return open(&path.to_string_lossy(), want);
            }
            tried.push(format!("{} does not exist", path.display()));
        }
        // The loader's search path (rpath, LD_LIBRARY_PATH), for a statically linked core.
        open(&name, want).map_err(|e| {
            tried.push(e);
            tried.join("; ")
        })
    })();
    if let Ok(ops) = found {
        *loaded = Some(ops);
    }
    found
}

/// `MPI_SUCCESS` or the plugin's message for an MPI error code.
pub fn error_text(ops: &Ops, code: c_int) -> String {
    let mut buf = vec![0 as c_char; 1024];
    // SAFETY: the buffer's capacity is passed.
    unsafe { (ops.error_string)(code, buf.as_mut_ptr(), buf.len() as c_int) };
    // SAFETY: error_string NUL-terminates within cap.
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
    if text.is_empty() { format!("MPI error {code}") } else { text }
}
