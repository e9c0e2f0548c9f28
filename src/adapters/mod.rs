//! The sources of regions other than the library's own API, one file per adapter: each is
//! the C side of another tool's interface (its exported symbols, its C types, its argument
//! checks and its one panic boundary), and all of them enter the recording the same way.
//!
//! - `ompt`: the OpenMP tools interface (`ompt_start_tool`); the constructs are `openmp`'s.
//! - `functions`: GCC's and Clang's `-finstrument-functions` hooks; the work is `functions`'.
//! - `mpi_calls`: the MPI plugin's internal table (`sp__mpi_core_api`); the work is
//!   `mpi_calls`'.

/// cbindgen:ignore
pub mod functions;
/// cbindgen:ignore
pub mod mpi_calls;
/// cbindgen:ignore
pub mod ompt;
