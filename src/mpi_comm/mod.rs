//! The MPI the host program initialized, reached through the MPI plugin (`plugin.rs`): the
//! core links no MPI library. Here: the communicator we profile over (a duplicate, freed
//! before MPI finalizes), byte-level point-to-point and collective operations on it (and the
//! two patterns built from them: a reduction up a binary tree of rank ranges, `reduce_tree`,
//! and a broadcast of bytes of any length), MPI-IO on a shared file, clock offsets to rank 0
//! (measured down the same tree), the count of what each rank took part in (`traffic`), and
//! the hook that runs our finalize from inside `MPI_Finalize`. The library never initializes
//! or finalizes MPI.

pub mod plugin;

// Offsets in CLOCK_MONOTONIC ns, the clock of the file's timestamps after conversion (the
// hot path may read the TSC; its ticks never enter this comparison).
use crate::clock::monotonic_ns as now_ns;
use crate::model::PageVec;
use crate::status::{Error, Result, Status};
use plugin::{MpiState, Ops};
use std::ffi::{CString, c_int, c_void};

pub use plugin::{MAX, MIN, SUM};
use std::sync::atomic::{AtomicU64, Ordering};

/// Message tags of our point-to-point traffic on the private communicator.
pub mod tag {
    pub const CLOCK: i32 = 101;
    pub const GO: i32 = 102;
    pub const LEN: i32 = 103;
    pub const DATA: i32 = 104;
    pub const TREE: i32 = 105;
}

/// What this process took part in over MPI since `reset_traffic`: collective operations
/// (each MPI collective call the plugin makes for us counts once: a broadcast, a reduction,
/// opening and closing a file, setting a file view, a collective write), point-to-point
/// messages and their bytes. Counted so a test can see that finalize's traffic does not grow
/// with the number of ranks (SCOPE_PROFILER_VERBOSE=2 prints it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    pub collectives: u64,
    pub messages_sent: u64,
    pub bytes_sent: u64,
    pub messages_received: u64,
    /// Point-to-point bytes received, and the bytes a broadcast brought from its root.
    pub bytes_received: u64,
}

static TRAFFIC: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];
const COLLECTIVES: usize = 0;
const SENT: usize = 1;
const SENT_BYTES: usize = 2;
const RECEIVED: usize = 3;
const RECEIVED_BYTES: usize = 4;

fn count(what: usize, n: u64) {
    TRAFFIC[what].fetch_add(n, Ordering::Relaxed);
}

pub fn traffic() -> Traffic {
    let get = |i: usize| TRAFFIC[i].load(Ordering::Relaxed);
    Traffic {
        collectives: get(COLLECTIVES),
        messages_sent: get(SENT),
        bytes_sent: get(SENT_BYTES),
        messages_received: get(RECEIVED),
        bytes_received: get(RECEIVED_BYTES),
    }
}

pub fn reset_traffic() {
    TRAFFIC.iter().for_each(|c| c.store(0, Ordering::Relaxed));
}

/// Whether MPI calls can be made now (initialized, not finalized).
pub fn is_usable() -> bool {
    plugin::state() == MpiState::Usable
}

pub fn state() -> MpiState {
    plugin::state()
}

fn check(ops: &Ops, what: &str, code: c_int) -> Result<()> {
    if code == 0 { Ok(()) } else { Err(Error::new(Status::Mpi, format!("{what}: {}", plugin::error_text(ops, code)))) }
}

/// The plugin, when MPI is usable; a missing plugin warns once and counts as no MPI.
fn ops_if_usable() -> Option<&'static Ops> {
    if !is_usable() {
        return None;
    }
    match plugin::load() {
        Ok(ops) => Some(ops),
        Err(e) => {
            crate::warn::once(
                "mpi-plugin",
                &format!("the program runs under MPI, but the MPI plugin could not be loaded ({e}): each rank writes its own file"),
            );
            None
        }
    }
}

/// Rank and size in MPI_COMM_WORLD (MPI usable and the plugin found), else None.
pub fn world_rank_size() -> Option<(i64, i64)> {
    let ops = ops_if_usable()?;
    let (mut r, mut s) = (0, 0);
    // SAFETY: plugin call with valid out pointers.
    (unsafe { (ops.world)(&mut r, &mut s) } == 0).then_some((r as i64, s as i64))
}

/// A private duplicate communicator, freed on drop while MPI is usable (left alone after).
pub struct Comm {
    ops: &'static Ops,
    handle: *mut c_void,
    rank: i32,
    size: i32,
}

// SAFETY: the communicator is only used by the thread that runs setup/finalize (MPI's main
// thread in every threading level); the session's mutex serializes access.
unsafe impl Send for Comm {}

impl Drop for Comm {
    fn drop(&mut self) {
        if is_usable() {
            // SAFETY: our own handle, freed once.
            unsafe { (self.ops.comm_free)(self.handle) };
        }
    }
}

/// Element types the reductions take.
pub trait Reducible: Copy + Default {
    const TYPE: c_int;
}
impl Reducible for i64 {
    const TYPE: c_int = plugin::I64;
}
impl Reducible for u64 {
    const TYPE: c_int = plugin::U64;
}
impl Reducible for f64 {
    const TYPE: c_int = plugin::F64;
}
/// Summed exactly (SUM only): sums of squares that overflow 64 bits.
impl Reducible for i128 {
    const TYPE: c_int = plugin::I128;
}

impl Comm {
    pub fn rank(&self) -> i32 {
        self.rank
    }

    pub fn size(&self) -> i32 {
        self.size
    }

    pub fn send(&self, to: i32, tag: i32, bytes: &[u8]) -> Result<()> {
        count(SENT, 1);
        count(SENT_BYTES, bytes.len() as u64);
        // SAFETY: the slice is valid for its length.
        check(self.ops, "MPI_Send", unsafe { (self.ops.send)(self.handle, bytes.as_ptr().cast(), bytes.len() as u64, to, tag) })
    }

    pub fn recv_into(&self, from: i32, tag: i32, buf: &mut [u8]) -> Result<()> {
        count(RECEIVED, 1);
        count(RECEIVED_BYTES, buf.len() as u64);
        // SAFETY: the slice is valid for its length.
        check(self.ops, "MPI_Recv", unsafe { (self.ops.recv)(self.handle, buf.as_mut_ptr().cast(), buf.len() as u64, from, tag) })
    }

    pub fn send_value<T: Copy>(&self, to: i32, tag: i32, v: &T) -> Result<()> {
        // SAFETY: plain data viewed as bytes.
        self.send(to, tag, unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) })
    }

    pub fn recv_value<T: Copy + Default>(&self, from: i32, tag: i32) -> Result<T> {
        let mut v = T::default();
        // SAFETY: plain data viewed as bytes.
        self.recv_into(from, tag, unsafe { std::slice::from_raw_parts_mut((&mut v as *mut T).cast::<u8>(), std::mem::size_of::<T>()) })?;
        Ok(v)
    }

    /// A length, then the bytes.
    pub fn send_bytes(&self, to: i32, bytes: &[u8]) -> Result<()> {
        self.send_bytes_tagged(to, tag::DATA, bytes)
    }

    /// The counterpart of `send_bytes`. The length comes from a rank of our own job over our
    /// private communicator, and `limit` bounds it all the same.
    pub fn recv_bytes(&self, from: i32, limit: u64) -> Result<PageVec<u8>> {
        self.recv_bytes_tagged(from, tag::DATA, limit)
    }

    /// `send_bytes` with the bytes under `tag` (the length goes under `tag::LEN`).
    fn send_bytes_tagged(&self, to: i32, tag: i32, bytes: &[u8]) -> Result<()> {
        self.send_value(to, tag::LEN, &(bytes.len() as u64))?;
        self.send(to, tag, bytes)
    }

    /// The bytes in a mapping of their own when large (`PageVec`): a rank's calls, megabytes
    /// freed through malloc, would move glibc's mmap threshold for the host's allocations.
    fn recv_bytes_tagged(&self, from: i32, tag: i32, limit: u64) -> Result<PageVec<u8>> {
        let len: u64 = self.recv_value(from, tag::LEN)?;
        if len > limit {
            return Err(Error::new(Status::Mpi, format!("rank {from} announced {len} bytes, more than the {limit} expected")));
        }
        let no_memory = || Error::new(Status::Mpi, format!("no memory for {len} bytes from rank {from}"));
        let mut buf = usize::try_from(len).ok().and_then(PageVec::try_zeroed).ok_or_else(no_memory)?;
        self.recv_into(from, tag, &mut buf)?;
        Ok(buf)
    }

    /// Combine every rank's `mine` up a binary tree of rank ranges: at each level the rank at
    /// the start of a range receives what the rank at the start of the range's right half
    /// combined, and keeps `merge(left, right)`. Rank 0 gets the result over all ranks (None
    /// elsewhere) after ceil(log2 P) messages; no rank receives more than that many. With an
    /// associative `merge`, the result is the left-to-right fold over the ranks in rank order.
    pub fn reduce_tree(&self, mine: Vec<u8>, merge: impl Fn(Vec<u8>, &[u8]) -> std::result::Result<Vec<u8>, String>) -> Result<Option<Vec<u8>>> {
        let (rank, size) = (self.rank, self.size);
        let mut acc = mine;
        let mut step = 1i32;
        while step < size {
            if rank % (2 * step) != 0 {
                // The start of a right half: hand the range up and stop.
                self.send_bytes_tagged(rank - step, tag::TREE, &acc)?;
                return Ok(None);
            }
            if rank + step < size {
                let right = self.recv_bytes_tagged(rank + step, tag::TREE, u64::MAX)?;
                acc = merge(acc, &right).map_err(|e| Error::new(Status::Mpi, format!("combining rank {}'s data: {e}", rank + step)))?;
            }
            step = step.saturating_mul(2);
        }
        Ok(Some(acc))
    }

    /// `bytes` from `root` (which passes Some) on every rank: one broadcast of a fixed-size
    /// block holding the length and the first bytes, and a second one for the rest only when
    /// they do not fit (most broadcasts of small data are one operation).
    pub fn bcast_bytes(&self, bytes: Option<Vec<u8>>, root: i32) -> Result<Vec<u8>> {
        self.bcast_bytes_at_most(bytes, root, u64::MAX)
    }

    /// `bcast_bytes`, where more than `max` bytes is an error on every rank (root included,
    /// before the second broadcast and before any allocation of that size).
    pub fn bcast_bytes_at_most(&self, bytes: Option<Vec<u8>>, root: i32, max: u64) -> Result<Vec<u8>> {
        const FIRST: usize = 4096;
        let mut block = vec![0u8; FIRST];
        let mine = if self.rank == root { bytes.unwrap_or_default() } else { Vec::new() };
        if self.rank == root {
            block[..8].copy_from_slice(&(mine.len() as u64).to_le_bytes());
            let n = mine.len().min(FIRST - 8);
            block[8..8 + n].copy_from_slice(&mine[..n]);
        }
        self.bcast(&mut block, root)?;
        let announced = u64::from_le_bytes(block[..8].try_into().unwrap());
        if announced > max {
            return Err(Error::new(Status::Mpi, format!("{announced} bytes broadcast, more than the {max} expected")));
        }
        let len = announced as usize;
        if len <= FIRST - 8 {
            block.truncate(8 + len);
            block.drain(..8);
            return Ok(block);
        }
        if self.rank == root {
            let mut rest = mine[FIRST - 8..].to_vec();
            self.bcast(&mut rest, root)?;
            return Ok(mine);
        }
        let mut buf = Vec::new();
        buf.try_reserve_exact(len).map_err(|_| Error::new(Status::Mpi, format!("no memory for {len} broadcast bytes")))?;
        buf.extend_from_slice(&block[8..]);
        let mut rest = vec![0u8; len - (FIRST - 8)];
        self.bcast(&mut rest, root)?;
        buf.extend_from_slice(&rest);
        Ok(buf)
    }

    pub fn barrier(&self) -> Result<()> {
        count(COLLECTIVES, 1);
        // SAFETY: our handle.
        check(self.ops, "MPI_Barrier", unsafe { (self.ops.barrier)(self.handle) })
    }

    pub fn bcast(&self, buf: &mut [u8], root: i32) -> Result<()> {
        count(COLLECTIVES, 1);
        if self.rank != root {
            count(RECEIVED_BYTES, buf.len() as u64);
        }
        // SAFETY: the slice is valid for its length.
        check(self.ops, "MPI_Bcast", unsafe { (self.ops.bcast)(self.handle, buf.as_mut_ptr().cast(), buf.len() as u64, root) })
    }

    pub fn bcast_value<T: Copy>(&self, v: &mut T, root: i32) -> Result<()> {
        // SAFETY: plain data viewed as bytes.
        self.bcast(unsafe { std::slice::from_raw_parts_mut((v as *mut T).cast::<u8>(), std::mem::size_of::<T>()) }, root)
    }

    /// Element-wise reduction over every rank; every rank gets the result.
    pub fn allreduce<T: Reducible>(&self, values: &[T], op: c_int) -> Result<Vec<T>> {
        count(COLLECTIVES, 1);
        let mut out = vec![T::default(); values.len()];
        // SAFETY: in and out hold values.len() elements of T's MPI type.
        let rc = unsafe { (self.ops.allreduce)(self.handle, values.as_ptr().cast(), out.as_mut_ptr().cast(), values.len() as c_int, T::TYPE, op) };
        check(self.ops, "MPI_Allreduce", rc)?;
        Ok(out)
    }

    /// Exclusive prefix reduction (rank 0 gets zeros).
    pub fn exscan<T: Reducible>(&self, values: &[T], op: c_int) -> Result<Vec<T>> {
        count(COLLECTIVES, 1);
        let mut out = vec![T::default(); values.len()];
        // SAFETY: in and out hold values.len() elements of T's MPI type.
        let rc = unsafe { (self.ops.exscan)(self.handle, values.as_ptr().cast(), out.as_mut_ptr().cast(), values.len() as c_int, T::TYPE, op) };
        check(self.ops, "MPI_Exscan", rc)?;
        Ok(out)
    }

    /// Every rank's `mine` (all the same length) on `root`, in rank order; None elsewhere.
    pub fn gather(&self, mine: &[u8], root: i32) -> Result<Option<Vec<u8>>> {
        count(COLLECTIVES, 1);
        if self.rank == root {
            count(RECEIVED_BYTES, (mine.len() * self.size as usize) as u64);
        }
        let mut out = if self.rank == root { vec![0u8; mine.len() * self.size as usize] } else { Vec::new() };
        // SAFETY: the root's buffer holds size * len bytes; others pass an unused pointer.
        let rc = unsafe { (self.ops.gather)(self.handle, mine.as_ptr().cast(), mine.len() as u64, out.as_mut_ptr().cast(), root) };
        check(self.ops, "MPI_Gather", rc)?;
        Ok((self.rank == root).then_some(out))
    }

    /// Open an existing file for writing by every rank (collective).
    pub fn open_file(&self, path: &std::path::Path) -> Result<MpiFile> {
        use std::os::unix::ffi::OsStrExt;
        let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::new(Status::Mpi, "NUL in the file path"))?;
        let mut fh = std::ptr::null_mut();
        count(COLLECTIVES, 1);
        // SAFETY: valid path and out pointer.
        check(self.ops, "MPI_File_open", unsafe { (self.ops.file_open)(self.handle, c.as_ptr(), &mut fh) })?;
        Ok(MpiFile { ops: self.ops, handle: fh })
    }
}

/// The most bytes one rank passes to one `write_pieces_all` (the plugin's limit per call).
pub const MAX_PIECES_BYTES: u64 = 1 << 30;

/// A file open for MPI-IO by every rank of a communicator; closed (collectively) on `close`.
pub struct MpiFile {
    ops: &'static Ops,
    handle: *mut c_void,
}

impl MpiFile {
    /// Collective: every rank calls it, each with its own offset and bytes (maybe none).
    pub fn write_at_all(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        // An allreduce of the rounds, the plain view, then (at least) one collective write.
        count(COLLECTIVES, 3);
        // SAFETY: the slice is valid for its length.
        let rc = unsafe { (self.ops.file_write_at_all)(self.handle, offset, bytes.as_ptr().cast(), bytes.len() as u64) };
        check(self.ops, "MPI_File_write_at_all", rc)
    }

    /// Collective: every rank calls it, each with its own pieces (file offset, bytes), maybe
    /// none, at most `MAX_PIECES_BYTES` in all; pieces must not overlap. One transfer (a file
    /// view of the pieces, `MPI_File_write_all`).
    pub fn write_pieces_all(&self, pieces: &[(u64, &[u8])]) -> Result<()> {
        count(COLLECTIVES, 2);
        let mut order: Vec<usize> = (0..pieces.len()).filter(|&i| !pieces[i].1.is_empty()).collect();
        order.sort_by_key(|&i| pieces[i].0);
        let total: u64 = order.iter().map(|&i| pieces[i].1.len() as u64).sum();
        // Too much for one call: take part with nothing (the others must not wait), and fail.
        let fits = total <= MAX_PIECES_BYTES;
        if !fits {
            order.clear();
        }
        let offsets: Vec<u64> = order.iter().map(|&i| pieces[i].0).collect();
        let lens: Vec<u64> = order.iter().map(|&i| pieces[i].1.len() as u64).collect();
        let bufs: Vec<*const c_void> = order.iter().map(|&i| pieces[i].1.as_ptr().cast()).collect();
        // SAFETY: offsets, lens and bufs hold n entries; each buffer is valid for its length.
        let rc = unsafe { (self.ops.file_write_pieces_all)(self.handle, offsets.len() as u32, offsets.as_ptr(), lens.as_ptr(), bufs.as_ptr()) };
        check(self.ops, "MPI_File_write_all", rc)?;
        if !fits {
            return Err(Error::new(Status::Mpi, format!("{total} bytes to write in one collective transfer: more than {MAX_PIECES_BYTES}")));
        }
        Ok(())
    }

    pub fn close(mut self) -> Result<()> {
        count(COLLECTIVES, 1);
        let h = std::mem::replace(&mut self.handle, std::ptr::null_mut());
        // SAFETY: our handle, closed once.
        check(self.ops, "MPI_File_close", unsafe { (self.ops.file_close)(h) })
    }
}

impl Drop for MpiFile {
    fn drop(&mut self) {
        if !self.handle.is_null() && is_usable() {
            // SAFETY: our handle, closed once.
            unsafe { (self.ops.file_close)(self.handle) };
        }
    }
}

/// The profiled communicator and what we learned about it at setup.
pub struct MpiContext {
    pub comm: Comm,
    pub rank: i32,
    pub size: i32,
    /// Rank in MPI_COMM_WORLD (differs from `rank` for a split communicator).
    pub world_rank: i32,
    /// This rank's clock offset to rank 0 in ns (this rank's clock minus rank 0's) and the
    /// round-trip time it was measured within ((0, 0) on rank 0).
    pub clock_offset: (i64, i64),
}

/// Attach to the host's MPI: a duplicate of `fcomm` (a Fortran handle) or of MPI_COMM_WORLD.
/// Collective over that communicator. `Ok(None)` when MPI is not usable.
pub fn attach(fcomm: Option<i32>) -> Result<Option<MpiContext>> {
    let Some(ops) = ops_if_usable() else {
        if fcomm.is_some() && !is_usable() {
            return Err(Error::new(Status::Mpi, "a communicator was given but MPI is not initialized (call sp_setup after MPI_Init)"));
        }
        return Ok(None);
    };
    let mut handle = std::ptr::null_mut();
    // SAFETY: out pointer valid; the Fortran handle is checked by MPI.
    let rc = unsafe { (ops.comm_dup)(fcomm.is_some() as c_int, fcomm.unwrap_or(0), &mut handle) };
    if rc != 0 {
        let what = if fcomm.is_some() { "the communicator given to sp_setup" } else { "MPI_COMM_WORLD" };
        return Err(Error::new(Status::Mpi, format!("MPI_Comm_dup of {what} failed: {}", plugin::error_text(ops, rc))));
    }
    let (mut rank, mut size) = (0, 0);
    // SAFETY: our fresh handle.
    unsafe {
        (ops.comm_rank)(handle, &mut rank);
        (ops.comm_size)(handle, &mut size);
    }
    let comm = Comm { ops, handle, rank, size };
    let world_rank = world_rank_size().map_or(rank, |(r, _)| r as i32);
    let clock_offset = measure_clock_offset(&comm)?;
    Ok(Some(MpiContext { comm, rank, size, world_rank, clock_offset }))
}

/// Each rank's clock offset to rank 0, measured down the binary tree of `reduce_tree` (from
/// the largest range to the smallest): the rank at the start of a range ping-pongs the rank at
/// the start of its right half a few times, the probe with the shortest round trip gives that
/// rank's offset to it (its clock minus the prober's, at the probe's midpoint), and the prober
/// sends it back with its own offset to rank 0 added (round trips add up too). No rank takes
/// part in more than ceil(log2 P) + 1 probe rounds; rank 0 in ceil(log2 P). Collective.
fn measure_clock_offset(comm: &Comm) -> Result<(i64, i64)> {
    const PROBES: usize = 8;
    let (rank, size) = (comm.rank(), comm.size());
    let mut mine = (0i64, 0i64);
    let mut step = 1i32;
    while step.saturating_mul(2) < size {
        step *= 2;
    }
    while step >= 1 {
        if rank % (2 * step) == 0 && rank + step < size {
            let child = rank + step;
            let mut best = (0i64, i64::MAX);
            for _ in 0..PROBES {
                let t0 = now_ns();
                comm.send_value(child, tag::CLOCK, &t0)?;
                let tr: i64 = comm.recv_value(child, tag::CLOCK)?;
                let t1 = now_ns();
                if t1 - t0 < best.1 {
                    best = (tr - (t0 + (t1 - t0) / 2), t1 - t0);
                }
            }
            comm.send_value(child, tag::CLOCK, &[best.0 + mine.0, best.1 + mine.1])?;
        } else if rank % (2 * step) == step {
            let parent = rank - step;
            for _ in 0..PROBES {
                let _t0: i64 = comm.recv_value(parent, tag::CLOCK)?;
                comm.send_value(parent, tag::CLOCK, &now_ns())?;
            }
            let got: [i64; 2] = comm.recv_value(parent, tag::CLOCK)?;
            mine = (got[0], got[1]);
        }
        step /= 2;
    }
    Ok(mine)
}

static ON_FINALIZE: parking_lot::Mutex<Option<fn()>> = parking_lot::Mutex::new(None);

extern "C" fn run_on_finalize() {
    let f = *ON_FINALIZE.lock();
    if let Some(f) = f {
        let _ = std::panic::catch_unwind(f);
    }
}

/// Run `on_finalize` from inside MPI_Finalize, while MPI still works (MPI-3.1 section
/// 8.7.1). The caller decides what it does (this layer knows nothing of the profiler).
pub fn install_finalize_hook(on_finalize: fn()) {
    *ON_FINALIZE.lock() = Some(on_finalize);
    if let Some(ops) = ops_if_usable() {
        // SAFETY: a plain extern "C" fn that catches panics.
        let rc = unsafe { (ops.at_finalize)(run_on_finalize) };
        if rc != 0 {
            crate::warn::once("mpi-finalize-hook", &format!("the hook inside MPI_Finalize could not be set ({}): call sp_finalize before MPI_Finalize", plugin::error_text(ops, rc)));
        }
    }
}

/// The rank and size the launcher gave this process, when MPI itself is not usable.
pub fn launcher_rank() -> Option<(i64, i64)> {
    let get = |names: &[&str]| names.iter().find_map(|n| std::env::var(n).ok()?.trim().parse::<i64>().ok());
    let rank = get(&["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"])?;
    let size = get(&["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"]).unwrap_or(rank + 1);
    (size > 1 && (0..size).contains(&rank)).then_some((rank, size))
}
