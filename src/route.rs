//! Where a finished run goes: the collective write over MPI (`gather`), this process's own
//! file, or one file per rank when the ranks cannot meet (`output`), as the run's MPI
//! situation allows. Above both: neither calls back into here.

use crate::model::{AttrValue, RankProfile};
use crate::mpi_comm::{self, MpiContext};
use crate::output::{RunContext, write_rank_file, write_single};
use crate::status::{Result, Status};
use std::path::PathBuf;

/// Whether finalize may talk to the other ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gather {
    /// sp_finalize or MPI_Finalize: every rank is finalizing, gather into one file.
    Collective,
    /// Process exit: other ranks may never join, so each rank writes its own file.
    LocalOnly,
}

/// Write the run the way its MPI situation allows.
/// `notes` prints this rank's notes on finalize; it is called once, after the write (under
/// MPI before rank 0 prints the summary table: see `gather::write_collective`).
pub fn write_run(run: RunContext<'_>, mpi: Option<MpiContext>, profile: RankProfile, gather: Gather, notes: &mut dyn FnMut()) -> Result<Status> {
    let mut printed = false;
    let mut once = || {
        if !std::mem::replace(&mut printed, true) {
            notes();
        }
    };
    let result = write_run_with(run, mpi, profile, gather, &mut once);
    // Every path but the collective one (which prints them before the table) prints them here.
    once();
    result
}

fn write_run_with(run: RunContext<'_>, mpi: Option<MpiContext>, profile: RankProfile, gather: Gather, notes: &mut dyn FnMut()) -> Result<Status> {
    if gather == Gather::LocalOnly {
        let rank = mpi_comm::world_rank_size().or_else(mpi_comm::launcher_rank);
        // Freeing our communicator is local, but MPI's state at exit is unknown: leave it.
        std::mem::forget(mpi);
        return match rank {
            Some((rank, size)) if size > 1 => {
                write_rank_file(run, rank, size, profile, "the program exited without sp_finalize or MPI_Finalize").map(|_| Status::Ok)
            }
            _ => write_single(run, profile),
        };
    }
    match mpi {
        Some(ctx) if mpi_comm::is_usable() => crate::gather::write_collective(run, ctx, profile, notes),
        Some(ctx) => {
            let (rank, size) = (ctx.world_rank as i64, ctx.size as i64);
            // MPI is gone: the communicator can no longer be freed.
            std::mem::forget(ctx);
            write_rank_file(run, rank, size, profile, "MPI was finalized before the profile could be gathered").map(|_| Status::Ok)
        }
        None if mpi_comm::is_usable() => match mpi_comm::attach(None)? {
            // MPI was initialized after sp_setup: gather over MPI_COMM_WORLD now.
            Some(ctx) => crate::gather::write_collective(run, ctx, profile, notes),
            // The MPI plugin is missing (warned): one file per rank, as without MPI.
            None => write_local(run, profile, "the MPI plugin is missing"),
        },
        None => write_local(run, profile, "MPI is not initialized"),
    }
}

/// Without a usable MPI: a rank file when the launcher says this is one of several ranks.
fn write_local(run: RunContext<'_>, profile: RankProfile, why: &str) -> Result<Status> {
    match mpi_comm::launcher_rank() {
        Some((rank, size)) => write_rank_file(run, rank, size, profile, why).map(|_| Status::Ok),
        None => write_single(run, profile),
    }
}

/// Where the write after a termination signal went.
#[derive(Debug)]
pub enum SignalWrite {
    /// One process: its profile.
    Single(PathBuf),
    /// One rank of several: its own file, to be merged with the others'.
    Rank { rank: i64, size: i64, path: PathBuf },
}

/// This process's world rank and size, if it is one of several, without calling MPI (after a
/// signal MPI may be in use by the interrupted thread): from the communicator's setup, else
/// the launcher's environment.
pub fn rank_without_mpi(mpi: Option<&MpiContext>) -> Option<(i64, i64)> {
    let launcher = mpi_comm::launcher_rank();
    let found = match mpi {
        Some(c) => Some((c.world_rank as i64, launcher.map_or(c.size as i64, |(_, s)| s))),
        None => launcher,
    };
    found.filter(|&(_, size)| size > 1)
}

/// After a termination signal no collective is possible (the other ranks are ending too, and
/// the interrupted thread may be inside MPI): no MPI call at all, one file per process, each
/// rank its own `<stem>.rank<N>.h5` without a message (the caller says it once per job).
/// `extra` joins the `metadata/` attributes.
pub fn write_after_signal(run: RunContext<'_>, mpi: Option<MpiContext>, profile: RankProfile, extra: Vec<(String, AttrValue)>) -> Result<SignalWrite> {
    let rank = rank_without_mpi(mpi.as_ref());
    // Freeing the communicator would be an MPI call.
    std::mem::forget(mpi);
    match rank {
        Some((rank, size)) => {
            let mut meta = crate::metadata::run_metadata(run.config, run.facts, size, 1);
            meta.extend(extra);
            let w = crate::output::write_rank_file_with(run, rank, profile, None, meta)?;
            Ok(SignalWrite::Rank { rank, size, path: w.path })
        }
        None => {
            let mut meta = crate::metadata::run_metadata(run.config, run.facts, 1, 1);
            meta.extend(extra);
            crate::output::write_single_at(run, profile, meta).map(|w| SignalWrite::Single(w.path))
        }
    }
}
