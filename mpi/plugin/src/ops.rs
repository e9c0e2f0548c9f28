//! The table and its operations (see the crate's documentation).

use mpi::ffi;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{AnyCommunicator, AsRaw, CommAttribute, Communicator, Equivalence, FromRaw};
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

type Handle = *mut c_void;

/// The table's layout version (`SP_MPI_PLUGIN_VERSION`).
const VERSION: u32 = 2;
/// Element types and operations of the reductions (`sp_mpi_plugin.h`).
const I64: c_int = 0;
const U64: c_int = 1;
const F64: c_int = 2;
const I128: c_int = 3;
const SUM: c_int = 0;
const MIN: c_int = 1;
const MAX: c_int = 2;
/// `state()`.
const NOT_INITIALIZED: c_int = 0;
const USABLE: c_int = 1;
const FINALIZED: c_int = 2;
/// Transfers are split into pieces of at most this many bytes (MPI counts are int).
const PIECE: u64 = 1 << 30;

const SUCCESS: c_int = ffi::MPI_SUCCESS as c_int;
const ERR_COMM: c_int = ffi::MPI_ERR_COMM as c_int;
const ERR_OP: c_int = ffi::MPI_ERR_OP as c_int;
const ERR_TYPE: c_int = ffi::MPI_ERR_TYPE as c_int;
const ERR_COUNT: c_int = ffi::MPI_ERR_COUNT as c_int;
const ERR_ARG: c_int = ffi::MPI_ERR_ARG as c_int;
const ERR_INTERN: c_int = ffi::MPI_ERR_INTERN as c_int;

/// "openmpi" or "mpich": the ABI family whose MPICC ../build.rs built this with.
const FAMILY: &str = concat!(env!("SP_MPI_FAMILY"), "\0");

unsafe extern "C" {
    // The MPI-call wrappers' per-thread guard (../c/pmpi_runtime.c), linked into the same
    // shared library: MPI calls made between the two are passed to PMPI unrecorded.
    fn sp_profiler_enter();
    fn sp_profiler_leave();
}

/// Inside the profiler on this thread, for the life of the value; also the panic boundary of
/// every operation (a panic is reported as `MPI_ERR_INTERN`, never unwinds into C).
fn inside<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    struct Guard;
    impl Drop for Guard {
        fn drop(&mut self) {
            // SAFETY: paired with the enter below, on the same thread.
            unsafe { sp_profiler_leave() };
        }
    }
    // SAFETY: increments this thread's guard depth.
    unsafe { sp_profiler_enter() };
    let _g = Guard;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// A private duplicate of a host communicator (freed by rsmpi when dropped).
struct Comm {
    comm: SimpleCommunicator,
}

impl Comm {
    fn raw(&self) -> ffi::MPI_Comm {
        self.comm.as_raw()
    }
}

/// An MPI-IO file opened on a duplicate communicator.
struct File {
    fh: ffi::MPI_File,
    comm: ffi::MPI_Comm,
}

/// # Safety
/// `comm` is a handle made by `comm_dup` and not freed.
unsafe fn comm_ref<'a>(comm: Handle) -> Option<&'a Comm> {
    // SAFETY: per the caller.
    unsafe { (comm as *const Comm).as_ref() }
}

fn bytes() -> ffi::MPI_Datatype {
    u8::equivalent_datatype().as_raw()
}

unsafe extern "C" fn state() -> c_int {
    inside(NOT_INITIALIZED, || {
        if mpi::environment::is_finalized() {
            FINALIZED
        } else if mpi::environment::is_initialized() {
            USABLE
        } else {
            NOT_INITIALIZED
        }
    })
}

unsafe extern "C" fn world(rank: *mut c_int, size: *mut c_int) -> c_int {
    if rank.is_null() || size.is_null() {
        return ERR_ARG;
    }
    inside(ERR_INTERN, || {
        let w = SimpleCommunicator::world();
        // SAFETY: checked non-null above.
        unsafe {
            *rank = w.rank();
            *size = w.size();
        }
        SUCCESS
    })
}

unsafe extern "C" fn comm_dup(from_fortran: c_int, fint: i32, out: *mut Handle) -> c_int {
    if out.is_null() {
        return ERR_ARG;
    }
    inside(ERR_INTERN, || {
        // SAFETY: out checked; the handles are MPI's.
        unsafe {
            *out = std::ptr::null_mut();
            let base = if from_fortran != 0 { ffi::RSMPI_Comm_f2c(fint as ffi::RSMPI_Fint) } else { ffi::RSMPI_COMM_WORLD };
            if base == ffi::RSMPI_COMM_NULL {
                return ERR_COMM;
            }
            let mut dup = ffi::RSMPI_COMM_NULL;
            let rc = ffi::PMPI_Comm_dup(base, &mut dup);
            if rc != SUCCESS {
                return rc;
            }
            ffi::PMPI_Comm_set_errhandler(dup, ffi::RSMPI_ERRORS_RETURN);
            *out = Box::into_raw(Box::new(Comm { comm: SimpleCommunicator::from_raw(dup) })).cast();
        }
        SUCCESS
    })
}

unsafe extern "C" fn comm_free(comm: Handle) -> c_int {
    if comm.is_null() {
        return SUCCESS;
    }
    // SAFETY: a handle made by comm_dup, freed once (rsmpi's drop frees the communicator).
    inside(ERR_INTERN, || {
        drop(unsafe { Box::from_raw(comm as *mut Comm) });
        SUCCESS
    })
}

unsafe extern "C" fn comm_rank(comm: Handle, rank: *mut c_int) -> c_int {
    // SAFETY: as `comm_int` asks.
    unsafe { comm_int(comm, rank, |c| c.comm.rank()) }
}

unsafe extern "C" fn comm_size(comm: Handle, size: *mut c_int) -> c_int {
    // SAFETY: as `comm_int` asks.
    unsafe { comm_int(comm, size, |c| c.comm.size()) }
}

/// One number of a communicator (`get`) into `out`.
///
/// # Safety
/// `comm` is a live handle of `comm_dup` (or NULL); `out` is NULL or writable.
unsafe fn comm_int(comm: Handle, out: *mut c_int, get: impl FnOnce(&Comm) -> c_int) -> c_int {
    // SAFETY: the core passes live handles.
    let Some(c) = (unsafe { comm_ref(comm) }) else { return ERR_COMM };
    if out.is_null() {
        return ERR_ARG;
    }
    // SAFETY: checked non-null.
    inside(ERR_INTERN, || unsafe {
        *out = get(c);
        SUCCESS
    })
}

/// `f` over the pieces of at most `PIECE` bytes of `len` bytes at `p` (once for 0 bytes).
fn in_pieces(p: *mut u8, mut len: u64, mut f: impl FnMut(*mut u8, c_int) -> c_int) -> c_int {
    let mut at = p;
    loop {
        let n = len.min(PIECE);
        let rc = f(at, n as c_int);
        if rc != SUCCESS {
            return rc;
        }
        // SAFETY: within the caller's buffer of len bytes.
        at = unsafe { at.add(n as usize) };
        len -= n;
        if len == 0 {
            return SUCCESS;
        }
    }
}

unsafe extern "C" fn send(comm: Handle, buf: *const c_void, len: u64, dest: c_int, tag: c_int) -> c_int {
    // SAFETY: the core passes live handles and buffers of len bytes.
    let Some(c) = (unsafe { comm_ref(comm) }) else { return ERR_COMM };
    inside(ERR_INTERN, || in_pieces(buf as *mut u8, len, |p, n| unsafe { ffi::PMPI_Send(p as *const c_void, n, bytes(), dest, tag, c.raw()) }))
}

unsafe extern "C" fn recv(comm: Handle, buf: *mut c_void, len: u64, source: c_int, tag: c_int) -> c_int {
    // SAFETY: the core passes live handles and buffers of len bytes.
    let Some(c) = (unsafe { comm_ref(comm) }) else { return ERR_COMM };
    inside(ERR_INTERN, || in_pieces(buf as *mut u8, len, |p, n| unsafe { ffi::PMPI_Recv(p as *mut c_void, n, bytes(), source, tag, c.raw(), ffi::RSMPI_STATUS_IGNORE) }))
}

unsafe extern "C" fn barrier(comm: Handle) -> c_int {
    // SAFETY: the core passes live handles.
    let Some(c) = (unsafe { comm_ref(comm) }) else { return ERR_COMM };
    inside(ERR_INTERN, || unsafe { ffi::PMPI_Barrier(c.raw()) })
}

unsafe extern "C" fn bcast(comm: Handle, buf: *mut c_void, len: u64, root: c_int) -> c_int {
    // SAFETY: the core passes live handles and buffers of len bytes.
    let Some(c) = (unsafe { comm_ref(comm) }) else { return ERR_COMM };
    inside(ERR_INTERN, || in_pieces(buf as *mut u8, len, |p, n| unsafe { ffi::PMPI_Bcast(p as *mut c_void, n, bytes(), root, c.raw()) }))
}

/// The exact sum of two's-complement 128-bit integers (two u64, low word first).
unsafe extern "C" fn sum_i128(inp: *mut c_void, inout: *mut c_void, len: *mut c_int, _ty: *mut ffi::MPI_Datatype) {
    // SAFETY: MPI passes *len elements of two u64 each in both buffers.
    unsafe {
        let n = (*len).max(0) as usize;
        let a = std::slice::from_raw_parts(inp as *const u64, 2 * n);
        let b = std::slice::from_raw_parts_mut(inout as *mut u64, 2 * n);
        for i in 0..n {
            let (lo, carry) = a[2 * i].overflowing_add(b[2 * i]);
            b[2 * i + 1] = b[2 * i + 1].wrapping_add(a[2 * i + 1]).wrapping_add(carry as u64);
            b[2 * i] = lo;
        }
    }
}

/// The 128-bit type and its sum, made on first use (every rank reaches its first 128-bit
/// reduction at the same point), kept until MPI_Finalize frees them.
fn i128_sum() -> Result<(ffi::MPI_Datatype, ffi::MPI_Op), c_int> {
    struct Made(ffi::MPI_Datatype, ffi::MPI_Op);
    // SAFETY: MPI handles are plain values, used from the threads MPI allows.
    unsafe impl Send for Made {}
    unsafe impl Sync for Made {}
    static MADE: parking_lot::Mutex<Option<Made>> = parking_lot::Mutex::new(None);
    let mut made = MADE.lock();
    if let Some(m) = made.as_ref() {
        return Ok((m.0, m.1));
    }
    // SAFETY: plain MPI calls on out-parameters.
    unsafe {
        let mut ty = ffi::RSMPI_DATATYPE_NULL;
        let mut rc = ffi::PMPI_Type_contiguous(2, u64::equivalent_datatype().as_raw(), &mut ty);
        if rc == SUCCESS {
            rc = ffi::PMPI_Type_commit(&mut ty);
        }
        let mut op = std::mem::zeroed::<ffi::MPI_Op>();
        if rc == SUCCESS {
            rc = ffi::PMPI_Op_create(Some(sum_i128), 1, &mut op);
        }
        if rc != SUCCESS {
            return Err(rc);
        }
        *made = Some(Made(ty, op));
        Ok((ty, op))
    }
}

/// The MPI datatype, operation and element width of a reduction of the table.
fn types(ty: c_int, op: c_int) -> Result<(ffi::MPI_Datatype, ffi::MPI_Op, usize), c_int> {
    use mpi::collective::SystemOperation;
    if ty == I128 {
        if op != SUM {
            return Err(ERR_OP);
        }
        let (t, o) = i128_sum()?;
        return Ok((t, o, 16));
    }
    let t = match ty {
        I64 => i64::equivalent_datatype().as_raw(),
        U64 => u64::equivalent_datatype().as_raw(),
        F64 => f64::equivalent_datatype().as_raw(),
        _ => return Err(ERR_TYPE),
    };
    let o = match op {
        SUM => SystemOperation::sum(),
        MIN => SystemOperation::min(),
        MAX => SystemOperation::max(),
        _ => return Err(ERR_OP),
    };
    Ok((t, o.as_raw(), 8))
}

unsafe extern "C" fn allreduce(comm: Handle, inp: *const c_void, out: *mut c_void, count: c_int, ty: c_int, op: c_int) -> c_int {
    // SAFETY: the core passes live handles and buffers of count elements.
    let Some(c) = (unsafe { comm_ref(comm) }) else { return ERR_COMM };
    inside(ERR_INTERN, || match types(ty, op) {
        Ok((t, o, _)) => unsafe { ffi::PMPI_Allreduce(inp, out, count, t, o, c.raw()) },
        Err(rc) => rc,
    })
}

unsafe extern "C" fn exscan(comm: Handle, inp: *const c_void, out: *mut c_void, count: c_int, ty: c_int, op: c_int) -> c_int {
    // SAFETY: the core passes live handles and buffers of count elements.
    let Some(c) = (unsafe { comm_ref(comm) }) else { return ERR_COMM };
    inside(ERR_INTERN, || {
        let (t, o, width) = match types(ty, op) {
            Ok(x) => x,
            Err(rc) => return rc,
        };
        // SAFETY: as above.
        let rc = unsafe { ffi::PMPI_Exscan(inp, out, count, t, o, c.raw()) };
        if rc != SUCCESS {
            return rc;
        }
        // Rank 0 gets zeros (MPI leaves its result undefined).
        if c.comm.rank() == 0 {
            // SAFETY: out holds count elements of width bytes.
            unsafe { std::ptr::write_bytes(out as *mut u8, 0, count.max(0) as usize * width) };
        }
        SUCCESS
    })
}

unsafe extern "C" fn gather(comm: Handle, inp: *const c_void, len: u64, out: *mut c_void, root: c_int) -> c_int {
    // SAFETY: the core passes live handles and buffers (size * len bytes at the root).
    let Some(c) = (unsafe { comm_ref(comm) }) else { return ERR_COMM };
    if len > PIECE {
        return ERR_COUNT;
    }
    inside(ERR_INTERN, || unsafe { ffi::PMPI_Gather(inp, len as c_int, bytes(), out, len as c_int, bytes(), root, c.raw()) })
}

unsafe extern "C" fn file_open(comm: Handle, path: *const c_char, out: *mut Handle) -> c_int {
    // SAFETY: the core passes live handles and a NUL-terminated path.
    let Some(c) = (unsafe { comm_ref(comm) }) else { return ERR_COMM };
    if path.is_null() || out.is_null() {
        return ERR_ARG;
    }
    inside(ERR_INTERN, || unsafe {
        *out = std::ptr::null_mut();
        let mut fh = ffi::RSMPI_FILE_NULL;
        let rc = ffi::PMPI_File_open(c.raw(), path as _, ffi::MPI_MODE_WRONLY as c_int, ffi::RSMPI_INFO_NULL, &mut fh);
        if rc != SUCCESS {
            return rc;
        }
        ffi::PMPI_File_set_errhandler(fh, ffi::RSMPI_ERRORS_RETURN);
        *out = Box::into_raw(Box::new(File { fh, comm: c.raw() })).cast();
        SUCCESS
    })
}

/// The plain byte view from the file's start (`etype` and `filetype` bytes, or `filetype`).
///
/// # Safety
/// `fh` is an open file.
unsafe fn set_view(fh: ffi::MPI_File, filetype: ffi::MPI_Datatype) -> c_int {
    // SAFETY: per the caller; "native" is NUL-terminated.
    unsafe { ffi::PMPI_File_set_view(fh, 0, bytes(), filetype, c"native".as_ptr() as _, ffi::RSMPI_INFO_NULL) }
}

/// Every rank takes part in the same number of collective writes: the largest number of
/// pieces any rank needs (ranks with less to write take part with nothing).
unsafe extern "C" fn file_write_at_all(file: Handle, offset: u64, buf: *const c_void, len: u64) -> c_int {
    // SAFETY: a handle made by file_open, not closed.
    let Some(f) = (unsafe { (file as *const File).as_ref() }) else { return ERR_ARG };
    inside(ERR_INTERN, || unsafe {
        let mine: u64 = len.div_ceil(PIECE);
        let mut rounds: u64 = 0;
        let max = mpi::collective::SystemOperation::max().as_raw();
        let rc = ffi::PMPI_Allreduce((&mine as *const u64).cast(), (&mut rounds as *mut u64).cast(), 1, u64::equivalent_datatype().as_raw(), max, f.comm);
        if rc != SUCCESS {
            return rc;
        }
        // Offsets are bytes from the file's start, whatever view file_write_pieces_all left.
        let rc = set_view(f.fh, bytes());
        if rc != SUCCESS {
            return rc;
        }
        let (mut p, mut offset, mut left) = (buf as *const u8, offset, len);
        let mut failed = SUCCESS;
        for _ in 0..rounds {
            let n = left.min(PIECE);
            let at = if n > 0 { p as *const c_void } else { std::ptr::null() };
            let rc = ffi::PMPI_File_write_at_all(f.fh, offset as ffi::MPI_Offset, at, n as c_int, bytes(), ffi::RSMPI_STATUS_IGNORE);
            if rc != SUCCESS && failed == SUCCESS {
                failed = rc;
            }
            p = p.wrapping_add(n as usize);
            offset += n;
            left -= n;
        }
        failed
    })
}

/// A committed hindexed type of bytes over `blocks` (lengths, displacements).
///
/// # Safety
/// Plain MPI calls; the arrays are as long as each other.
unsafe fn hindexed(lengths: &[c_int], places: &[ffi::MPI_Aint]) -> Result<ffi::MPI_Datatype, c_int> {
    // SAFETY: per the caller.
    unsafe {
        let mut t = ffi::RSMPI_DATATYPE_NULL;
        let rc = ffi::PMPI_Type_create_hindexed(lengths.len() as c_int, lengths.as_ptr() as _, places.as_ptr() as _, bytes(), &mut t);
        if rc != SUCCESS {
            return Err(rc);
        }
        let rc = ffi::PMPI_Type_commit(&mut t);
        if rc != SUCCESS {
            ffi::PMPI_Type_free(&mut t);
            return Err(rc);
        }
        Ok(t)
    }
}

/// One collective transfer of a rank's pieces (see sp_mpi_plugin.h): a file view made of the
/// pieces (an hindexed filetype over bytes, left set; file_write_at_all sets the plain byte
/// view again) and one MPI_File_write_all from the pieces' own buffers (an hindexed memory
/// type of their addresses: nothing is copied together first). A rank whose pieces are
/// unusable (out of order, too large) still takes part, with nothing, and gets the error:
/// every rank makes the same collective calls.
unsafe extern "C" fn file_write_pieces_all(file: Handle, n: u32, offsets: *const u64, lens: *const u64, bufs: *const *const c_void) -> c_int {
    // SAFETY: a handle made by file_open, not closed.
    let Some(f) = (unsafe { (file as *const File).as_ref() }) else { return ERR_ARG };
    if n > 0 && (offsets.is_null() || lens.is_null() || bufs.is_null()) {
        return ERR_ARG;
    }
    inside(ERR_INTERN, || unsafe {
        let (offsets, lens, bufs) = if n == 0 {
            (&[][..], &[][..], &[][..])
        } else {
            // SAFETY: the core passes n elements in each array.
            (std::slice::from_raw_parts(offsets, n as usize), std::slice::from_raw_parts(lens, n as usize), std::slice::from_raw_parts(bufs, n as usize))
        };
        let mut bad = SUCCESS;
        let mut total: u64 = 0;
        for i in 0..offsets.len() {
            total = total.saturating_add(lens[i]);
            if i > 0 && offsets[i] < offsets[i - 1].saturating_add(lens[i - 1]) {
                bad = ERR_ARG;
            }
        }
        if total > PIECE {
            bad = ERR_COUNT;
        }
        let blocks = lens.iter().filter(|&&l| l > 0).count();
        let (mut view, mut memory) = (bytes(), bytes());
        if bad == SUCCESS && blocks > 0 {
            let mut lengths = Vec::with_capacity(blocks);
            let mut places = Vec::with_capacity(blocks);
            let mut addresses = Vec::with_capacity(blocks);
            for i in 0..offsets.len() {
                if lens[i] == 0 {
                    continue;
                }
                lengths.push(lens[i] as c_int);
                places.push(offsets[i] as ffi::MPI_Aint);
                let mut a: ffi::MPI_Aint = 0;
                bad = ffi::PMPI_Get_address(bufs[i] as _, &mut a);
                if bad != SUCCESS {
                    break;
                }
                addresses.push(a);
            }
            if bad == SUCCESS {
                match hindexed(&lengths, &places) {
                    Ok(t) => view = t,
                    Err(rc) => bad = rc,
                }
            }
            if bad == SUCCESS {
                match hindexed(&lengths, &addresses) {
                    Ok(t) => memory = t,
                    Err(rc) => bad = rc,
                }
            }
        }
        let mut writing = bad == SUCCESS && blocks > 0;
        let rc = set_view(f.fh, if writing { view } else { bytes() });
        if bad == SUCCESS {
            bad = rc;
        }
        writing = writing && rc == SUCCESS;
        // MPI_BOTTOM is the null address in every MPI.
        let rc = if writing {
            ffi::PMPI_File_write_all(f.fh, std::ptr::null(), 1, memory, ffi::RSMPI_STATUS_IGNORE)
        } else {
            ffi::PMPI_File_write_all(f.fh, std::ptr::null(), 0, bytes(), ffi::RSMPI_STATUS_IGNORE)
        };
        if bad == SUCCESS {
            bad = rc;
        }
        if view != bytes() {
            ffi::PMPI_Type_free(&mut view);
        }
        if memory != bytes() {
            ffi::PMPI_Type_free(&mut memory);
        }
        bad
    })
}

unsafe extern "C" fn file_close(file: Handle) -> c_int {
    if file.is_null() {
        return SUCCESS;
    }
    // SAFETY: a handle made by file_open, closed once.
    let mut f = unsafe { Box::from_raw(file as *mut File) };
    inside(ERR_INTERN, || unsafe { ffi::PMPI_File_close(&mut f.fh) })
}

/// The callback to run inside MPI_Finalize (the last one given to at_finalize).
static FINALIZE_CB: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// An attribute of MPI_COMM_SELF: MPI deletes it first inside MPI_Finalize, while MPI still
/// works (MPI-3.1 section 8.7.1), and rsmpi's delete callback drops it.
#[derive(Clone)]
struct FinalizeHook;

impl CommAttribute for FinalizeHook {}

impl Drop for FinalizeHook {
    fn drop(&mut self) {
        let cb = FINALIZE_CB.load(Ordering::Acquire);
        if !cb.is_null() {
            // SAFETY: set from an `extern "C" fn()` by at_finalize.
            let cb: extern "C" fn() = unsafe { std::mem::transmute(cb) };
            inside((), || cb());
        }
    }
}

unsafe extern "C" fn at_finalize(cb: extern "C" fn()) -> c_int {
    static SET: AtomicUsize = AtomicUsize::new(0);
    FINALIZE_CB.store(cb as *mut c_void, Ordering::Release);
    if SET.swap(1, Ordering::AcqRel) == 1 {
        return SUCCESS;
    }
    inside(ERR_INTERN, || {
        SimpleCommunicator::self_comm().set_attr(FinalizeHook);
        SUCCESS
    })
}

/// `text` into `buf` (at most cap - 1 bytes and a NUL).
///
/// # Safety
/// `buf` holds `cap` bytes.
unsafe fn put(text: &[u8], buf: *mut c_char, cap: c_int) {
    if buf.is_null() || cap <= 0 {
        return;
    }
    let n = text.len().min(cap as usize - 1);
    // SAFETY: per the caller.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
    }
}

unsafe extern "C" fn error_string(code: c_int, buf: *mut c_char, cap: c_int) {
    inside((), || {
        let mut msg = vec![0u8; ffi::MPI_MAX_ERROR_STRING as usize + 1];
        let mut n: c_int = 0;
        // SAFETY: msg holds MPI_MAX_ERROR_STRING bytes.
        if unsafe { ffi::PMPI_Error_string(code, msg.as_mut_ptr() as _, &mut n) } != SUCCESS {
            n = 0;
        }
        let n = (n.max(0) as usize).min(msg.len());
        // SAFETY: buf holds cap bytes.
        unsafe { put(&msg[..n], buf, cap) };
    })
}

unsafe extern "C" fn library_version(buf: *mut c_char, cap: c_int) {
    inside((), || {
        let v = mpi::environment::library_version().unwrap_or_default();
        let v = v.trim_end_matches('\0');
        // SAFETY: buf holds cap bytes.
        unsafe { put(v.as_bytes(), buf, cap) };
    })
}

unsafe extern "C" fn world_fint() -> i32 {
    // SAFETY: the world communicator's Fortran handle.
    inside(0, || unsafe { ffi::RSMPI_Comm_c2f(ffi::RSMPI_COMM_WORLD) as i32 })
}

#[repr(C)]
pub struct Ops {
    struct_size: u32,
    version: u32,
    family: *const c_char,
    state: unsafe extern "C" fn() -> c_int,
    world: unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int,
    comm_dup: unsafe extern "C" fn(c_int, i32, *mut Handle) -> c_int,
    comm_free: unsafe extern "C" fn(Handle) -> c_int,
    comm_rank: unsafe extern "C" fn(Handle, *mut c_int) -> c_int,
    comm_size: unsafe extern "C" fn(Handle, *mut c_int) -> c_int,
    send: unsafe extern "C" fn(Handle, *const c_void, u64, c_int, c_int) -> c_int,
    recv: unsafe extern "C" fn(Handle, *mut c_void, u64, c_int, c_int) -> c_int,
    barrier: unsafe extern "C" fn(Handle) -> c_int,
    bcast: unsafe extern "C" fn(Handle, *mut c_void, u64, c_int) -> c_int,
    allreduce: unsafe extern "C" fn(Handle, *const c_void, *mut c_void, c_int, c_int, c_int) -> c_int,
    exscan: unsafe extern "C" fn(Handle, *const c_void, *mut c_void, c_int, c_int, c_int) -> c_int,
    gather: unsafe extern "C" fn(Handle, *const c_void, u64, *mut c_void, c_int) -> c_int,
    file_open: unsafe extern "C" fn(Handle, *const c_char, *mut Handle) -> c_int,
    file_write_at_all: unsafe extern "C" fn(Handle, u64, *const c_void, u64) -> c_int,
    file_write_pieces_all: unsafe extern "C" fn(Handle, u32, *const u64, *const u64, *const *const c_void) -> c_int,
    file_close: unsafe extern "C" fn(Handle) -> c_int,
    at_finalize: unsafe extern "C" fn(extern "C" fn()) -> c_int,
    error_string: unsafe extern "C" fn(c_int, *mut c_char, c_int),
    library_version: unsafe extern "C" fn(*mut c_char, c_int),
    world_fint: unsafe extern "C" fn() -> i32,
}

// SAFETY: immutable static data.
unsafe impl Sync for Ops {}

static OPS: Ops = Ops {
    struct_size: std::mem::size_of::<Ops>() as u32,
    version: VERSION,
    family: FAMILY.as_ptr() as *const c_char,
    state,
    world,
    comm_dup,
    comm_free,
    comm_rank,
    comm_size,
    send,
    recv,
    barrier,
    bcast,
    allreduce,
    exscan,
    gather,
    file_open,
    file_write_at_all,
    file_write_pieces_all,
    file_close,
    at_finalize,
    error_string,
    library_version,
    world_fint,
};

/// The plugin's one entry point (`sp_mpi_plugin_ops` in sp_mpi_plugin.h).
#[unsafe(no_mangle)]
pub extern "C" fn sp_mpi_plugin_ops() -> &'static Ops {
    &OPS
}
