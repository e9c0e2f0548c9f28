//! The one error type of sptool: a message, optionally about one file.
//!
//! Every failure the user can cause (a missing file, a damaged file, a bad
//! regular expression, ...) ends up here and is printed as a single line,
//! `sptool: FILE: what is wrong`, by `main`. It is the library's reader's error
//! (`scope_profiler::h5read::Error`), so errors of the reader pass through unchanged.

pub use scope_profiler::h5read::{Error, Result, one_line};
