//! The one way sptool reads HDF5: the library's hostile-input reader (`scope_profiler::h5read`,
//! shared with the library's own readers of profiles), which treats everything a file says as
//! hostile (names as bytes, sizes checked against the file before allocating, no links out of
//! the file).

pub use scope_profiler::h5read::{File, Group, Member, open};
