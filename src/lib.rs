//! scope_profiler: a region profiler for C, C++ and Fortran HPC codes.
//!
//! The safe core (everything but `ffi`) records region calls per thread, merges them at
//! finalize and writes one HDF5 file per run. `ffi` is the thin C ABI over it.

pub mod calllog;
pub mod clock;
pub mod config;
pub mod encode;
pub mod ffi;
pub mod gather;
pub mod likwid;
pub mod merge;
pub mod metadata;
pub mod mpi_comm;
pub mod output;
pub mod profile;
pub mod profiler;
pub mod quiesce;
pub mod recorder;
pub mod registry;
pub mod status;
pub mod summary;
pub mod warn;
pub mod writer;
