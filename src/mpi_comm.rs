//! The MPI the host program initialized, through rsmpi: the communicator we profile over (a
//! duplicate, freed before MPI finalizes), clock offsets to rank 0, and the hook that runs our
//! finalize from inside `MPI_Finalize`. The library never initializes MPI and never owns a
//! `Universe` (dropping one would finalize the host's MPI).

// Offsets in CLOCK_MONOTONIC ns, the clock of the file's timestamps after conversion (the
// hot path may read the TSC; its ticks never enter this comparison).
use crate::clock::monotonic_ns as now_ns;
use crate::status::{Error, Result, Status};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;
use std::ffi::{c_int, c_void};

/// Message tags of our point-to-point traffic on the private communicator.
pub mod tag {
    pub const CLOCK: i32 = 101;
    pub const GO: i32 = 102;
    pub const LEN: i32 = 103;
    pub const DATA: i32 = 104;
}

/// The profiled communicator and what we learned about it at setup.
pub struct MpiContext {
    pub comm: SimpleCommunicator,
    pub rank: i32,
    pub size: i32,
    /// Rank in MPI_COMM_WORLD (differs from `rank` for a split communicator).
    pub world_rank: i32,
    /// On rank 0: per rank, (clock offset to rank 0 in ns, round-trip time of the best probe).
    pub clock_offsets: Vec<(i64, i64)>,
}

// SAFETY: the context is only used by the thread that runs setup/finalize (MPI's main thread
// in every threading level); the Mutex around the session serializes access.
unsafe impl Send for MpiContext {}

pub fn is_usable() -> bool {
    mpi::environment::is_initialized() && !mpi::environment::is_finalized()
}

/// Attach to the host's MPI: a duplicate of `fcomm` (a Fortran handle) or of MPI_COMM_WORLD.
/// Collective over that communicator. `Ok(None)` when MPI is not usable.
pub fn attach(fcomm: Option<i32>) -> Result<Option<MpiContext>> {
    if !is_usable() {
        if fcomm.is_some() {
            return Err(Error::new(Status::Mpi, "a communicator was given but MPI is not initialized (call sp_setup after MPI_Init)"));
        }
        return Ok(None);
    }
    // SAFETY: MPI is initialized; the handles come from the host or are predefined.
    let comm = unsafe {
        let raw = match fcomm {
            Some(f) => mpi::ffi::RSMPI_Comm_f2c(f),
            None => mpi::ffi::RSMPI_COMM_WORLD,
        };
        if raw == mpi::ffi::RSMPI_COMM_NULL {
            return Err(Error::new(Status::Mpi, "the communicator given to sp_setup is MPI_COMM_NULL"));
        }
        let mut dup = mpi::ffi::RSMPI_COMM_NULL;
        if mpi::ffi::MPI_Comm_dup(raw, &mut dup) != mpi::ffi::MPI_SUCCESS as c_int {
            return Err(Error::new(Status::Mpi, "MPI_Comm_dup of the profiled communicator failed"));
        }
        SimpleCommunicator::from_raw(dup)
    };
    let (rank, size) = (comm.rank(), comm.size());
    let world_rank = SimpleCommunicator::world().rank();
    let clock_offsets = measure_clock_offsets(&comm);
    Ok(Some(MpiContext { comm, rank, size, world_rank, clock_offsets }))
}

/// Rank 0 ping-pongs each rank a few times; the probe with the shortest round trip gives the
/// offset (rank clock minus rank 0 clock, at the probe's midpoint). Collective.
fn measure_clock_offsets(comm: &SimpleCommunicator) -> Vec<(i64, i64)> {
    const PROBES: usize = 8;
    let (rank, size) = (comm.rank(), comm.size());
    let mut offsets = vec![(0i64, 0i64); if rank == 0 { size as usize } else { 0 }];
    if rank == 0 {
        for r in 1..size {
            let peer = comm.process_at_rank(r);
            let mut best = (0i64, i64::MAX);
            for _ in 0..PROBES {
                let t0 = now_ns();
                peer.send_with_tag(&t0, tag::CLOCK);
                let (tr, _) = peer.receive_with_tag::<i64>(tag::CLOCK);
                let t1 = now_ns();
                if t1 - t0 < best.1 {
                    best = (tr - (t0 + (t1 - t0) / 2), t1 - t0);
                }
            }
            offsets[r as usize] = best;
        }
    } else {
        let root = comm.process_at_rank(0);
        for _ in 0..PROBES {
            let (_t0, _) = root.receive_with_tag::<i64>(tag::CLOCK);
            root.send_with_tag(&now_ns(), tag::CLOCK);
        }
    }
    offsets
}

/// Runs `on_finalize` when MPI_Finalize deletes the attributes of MPI_COMM_SELF, which it does
/// first, while MPI is still fully usable (MPI-3.1 section 8.7.1).
#[derive(Clone)]
struct FinalizeHook {
    on_finalize: fn(),
}

impl CommAttribute for FinalizeHook {
    unsafe extern "C" fn comm_delete_attr_fn(
        _comm: mpi::ffi::MPI_Comm,
        _key: c_int,
        val: *mut c_void,
        _extra_state: *mut c_void,
    ) -> c_int {
        // SAFETY: `val` is the Box rsmpi's set_attr made for this attribute.
        let hook = unsafe { Box::from_raw(val as *mut FinalizeHook) };
        let _ = std::panic::catch_unwind(hook.on_finalize);
        mpi::ffi::MPI_SUCCESS as c_int
    }
}

/// Attach `on_finalize` to MPI_COMM_SELF (once, at setup): MPI calls it from inside
/// MPI_Finalize, while MPI still works. The caller decides what it does (this layer knows
/// nothing of the profiler above it).
pub fn install_finalize_hook(on_finalize: fn()) {
    let mut self_comm = SimpleCommunicator::self_comm();
    self_comm.set_attr(FinalizeHook { on_finalize });
}

/// The rank and size the launcher gave this process, when MPI itself is not usable.
pub fn launcher_rank() -> Option<(i64, i64)> {
    let get = |names: &[&str]| names.iter().find_map(|n| std::env::var(n).ok()?.trim().parse::<i64>().ok());
    let rank = get(&["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"])?;
    let size = get(&["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"]).unwrap_or(rank + 1);
    (size > 1).then_some((rank, size))
}

/// Send `bytes` to `to` as a length then chunks (messages stay well below 2^31 elements).
pub fn send_bytes(comm: &SimpleCommunicator, to: i32, bytes: &[u8]) {
    const CHUNK: usize = 1 << 28;
    let peer = comm.process_at_rank(to);
    peer.send_with_tag(&(bytes.len() as u64), tag::LEN);
    for chunk in bytes.chunks(CHUNK) {
        peer.send_with_tag(chunk, tag::DATA);
    }
}

pub fn receive_bytes(comm: &SimpleCommunicator, from: i32) -> Vec<u8> {
    const CHUNK: usize = 1 << 28;
    let peer = comm.process_at_rank(from);
    let (len, _) = peer.receive_with_tag::<u64>(tag::LEN);
    let mut buf = vec![0u8; len as usize];
    for chunk in buf.chunks_mut(CHUNK) {
        peer.receive_into_with_tag(chunk, tag::DATA);
    }
    buf
}
