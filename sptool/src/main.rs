//! sptool: inspect, export and plot scope_profiler HDF5 profiles.
//!
//! See `docs/sptool.md` for the commands. Every user error is reported as
//! one line, `sptool: FILE: what is wrong`, with exit status 1; usage errors
//! exit with 2 (clap); an internal error (a bug) prints one line and exits
//! with 101, without a backtrace. Files are read in a child process with
//! bounded memory ([`guard`]): a damaged file that crashes the HDF5 library,
//! or asks for more memory than allowed, is reported in one line too.

mod caliper;
mod cli;
mod columnar;
mod compare;
mod counters;
mod error;
mod export;
mod extrap;
mod filter;
mod fmt;
mod font;
mod guard;
mod h5util;
mod inspect;
mod likwid;
mod lines;
mod model;
mod mpi;
mod otf2;
mod plot;
mod ranks;
mod read;
mod recover;
mod roofline;
mod source;
mod stats;
mod trace;
mod tree;

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

#[global_allocator]
static ALLOC: guard::Alloc = guard::Alloc;

fn main() -> ExitCode {
    scope_profiler::guard::set_tool(guard::TOOL);
    install_panic_hook();
    let cli = cli::Cli::parse();
    let plan = cli.plan();
    ExitCode::from(guard::run(&plan, move || match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cli::run_status(cli))) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            eprintln!("sptool: {e}");
            1
        }
        Err(_) => 101,
    }))
}
