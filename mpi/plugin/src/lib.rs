//! The operations the core library asks of MPI (the `sp_mpi_ops` table of
//! `../c/sp_mpi_plugin.h`, mirrored by the core's `src/mpi_comm/plugin.rs`), over the host's
//! MPI through rsmpi (the `mpi` crate). `../build.rs` builds this crate once per MPI ABI family
//! with that family's `MPICC` and links it with the MPI-call wrappers into
//! `libscope_profiler_mpi_<family>.so`, which exports the table as `sp_mpi_plugin_ops`.
//!
//! Every operation runs on private duplicates of the host's communicators with
//! `MPI_ERRORS_RETURN` and returns `MPI_SUCCESS` or MPI's error code. rsmpi's safe API is used
//! where it reports what the table must return (the environment, rank and size, datatypes and
//! operations, the communicator's ownership, the attribute whose deletion runs inside
//! `MPI_Finalize`, the library version); its raw `ffi` where the return code matters or the safe
//! API has nothing (collectives, point-to-point, MPI-IO), calling the `PMPI_` names, so that
//! another PMPI tool in the process does not see the profiler's traffic either. Each operation
//! runs inside the MPI-call wrappers' per-thread "inside the profiler" guard
//! (`sp_profiler_enter`/`sp_profiler_leave` in `../c/pmpi_runtime.c`): whatever MPI calls
//! rsmpi makes under the `MPI_` names go straight to PMPI and are never recorded as the
//! program's. Without the `mpi` feature the crate is empty.
#![cfg_attr(not(feature = "mpi"), allow(unused))]

#[cfg(feature = "mpi")]
mod ops;
