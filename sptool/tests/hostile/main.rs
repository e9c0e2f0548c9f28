//! Hostile input: real profiles and spill directories written by the library, damaged on
//! purpose (`fuzz.rs`), and files crafted for each class of attack (`crafted.rs`), through
//! every sptool command, `sptool recover` and `scope_profiler_merge`, each run under a memory
//! limit and a timeout. Nothing may die by a signal, panic, print a backtrace, hang or
//! allocate past the limit.

mod common;
mod corpus;
mod crafted;
mod fuzz;
