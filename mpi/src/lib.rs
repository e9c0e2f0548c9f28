//! The MPI plugin of scope_profiler. `build.rs` generates the wrappers of every MPI routine
//! (`codegen/`, from each family's `mpi.h` and exported symbols), compiles them with `c/`
//! (their run-time support) and links them with the operations the core asks of MPI (`plugin/`,
//! Rust on rsmpi, built once per family with that family's `MPICC`) with the
//! `mpicc` of every MPI ABI family it finds (OpenMPI, MPICH) into
//! `libscope_profiler_mpi_<family>.so`, placed in `target/<profile>/` next to
//! `libscope_profiler.so`, which loads the right one at run time; `libscope_profiler_mpi.so`
//! is the one of the family `mpicc` (or `$MPICC`) names. Programs link or preload it to have
//! their MPI calls recorded (docs/mpi.md).

/// The families built, as `family=path` lines (empty when no `mpicc` was found).
pub const BUILT: &str = env!("SCOPE_PROFILER_MPI_BUILT");

/// The generator of the MPI-call wrappers (run by build.rs), here for its unit tests.
#[cfg(test)]
#[path = "../codegen/mod.rs"]
#[allow(dead_code)]
mod codegen;
