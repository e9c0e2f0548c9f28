//! scope_profiler: a region profiler for C, C++ and Fortran HPC codes.
//!
//! The safe core (everything but `ffi`) records region calls per thread, merges them at
//! finalize and writes one HDF5 file per run. `ffi` is the thin C ABI over it. The modules
//! form one pipeline over the plain data of `model` (the README's Layout section walks it);
//! imports go one way (`tests/structure.rs`).
//!
//! Only `ffi` goes into the C header: every other module is marked `cbindgen:ignore`.

/// cbindgen:ignore
pub mod adapters;
/// cbindgen:ignore
pub mod calllog;
/// cbindgen:ignore
pub mod callpath;
/// cbindgen:ignore
pub mod clock;
/// cbindgen:ignore
pub mod collective;
/// cbindgen:ignore
pub mod config;
/// cbindgen:ignore
pub mod counters;
/// cbindgen:ignore
pub mod encode;
pub mod ffi;
/// cbindgen:ignore
pub mod functions;
/// cbindgen:ignore
pub mod gather;
/// cbindgen:ignore
pub mod guard;
/// cbindgen:ignore
pub mod h5read;
/// cbindgen:ignore
pub mod late;
/// cbindgen:ignore
pub mod likwid;
/// cbindgen:ignore
pub mod merge;
/// cbindgen:ignore
pub mod metadata;
/// cbindgen:ignore
pub mod model;
/// cbindgen:ignore
pub mod mpi_calls;
/// cbindgen:ignore
pub mod mpi_comm;
/// cbindgen:ignore
pub mod mpi_stats;
/// cbindgen:ignore
pub mod openmp;
/// cbindgen:ignore
pub mod output;
/// cbindgen:ignore
pub mod placement;
/// cbindgen:ignore
pub mod profile;
/// cbindgen:ignore
pub mod profiler;
/// cbindgen:ignore
pub mod quiesce;
/// cbindgen:ignore
pub mod recorder;
/// cbindgen:ignore
pub mod recover;
/// cbindgen:ignore
pub mod reentry;
/// cbindgen:ignore
pub mod registry;
/// cbindgen:ignore
pub mod route;
/// cbindgen:ignore
pub mod run_values;
/// cbindgen:ignore
pub mod sampling;
/// cbindgen:ignore
pub mod signals;
/// cbindgen:ignore
pub mod spill;
/// cbindgen:ignore
pub mod spread;
/// cbindgen:ignore
pub mod stats;
/// cbindgen:ignore
pub mod status;
/// cbindgen:ignore
pub mod summary;
/// cbindgen:ignore
pub mod symbols;
/// cbindgen:ignore
pub mod unify;
/// cbindgen:ignore
pub mod warn;
/// cbindgen:ignore
pub mod writer;
