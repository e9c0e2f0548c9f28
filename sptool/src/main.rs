//! sptool: inspect, export and plot scope_profiler HDF5 profiles.
//!
//! See `docs/sptool.md` for the commands. Every user error is reported as
//! one line, `sptool: FILE: what is wrong`, with exit status 1; usage errors
//! exit with 2 (clap); an internal error (a bug) prints one line and exits
//! with 101, without a backtrace.

mod cli;
mod columnar;
mod compare;
mod counters;
mod error;
mod export;
mod filter;
mod fmt;
mod font;
mod h5util;
mod inspect;
mod likwid;
mod model;
mod mpi;
mod plot;
mod read;
mod recover;
mod roofline;
mod source;
mod stats;
mod trace;

use std::process::ExitCode;

use clap::Parser;

fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let place = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        eprintln!(
            "sptool: internal error: {}{place}; please report this bug",
            error::one_line(&message)
        );
    }));
}

fn main() -> ExitCode {
    install_panic_hook();
    let cli = cli::Cli::parse();
    match std::panic::catch_unwind(|| cli::run_status(cli)) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            eprintln!("sptool: {e}");
            ExitCode::from(1)
        }
        Err(_) => ExitCode::from(101),
    }
}
