//! Integration tests of the sptool binary. Every input file is made by the
//! tests themselves (`fixtures.rs`), except the one the Python package
//! writes (`python.rs`).

mod common;
mod counters;
mod errors;
mod export;
mod file_safety;
mod fixtures;
mod inspect;
mod plot;
mod python;
mod trace;
mod writer;
