//! scope_profiler_likwid_helper: LIKWID's full perfmon read-back of one marker file, run
//! by libscope_profiler at finalize in a child process (spec 3.3). The result goes to
//! `--out` as one JSON document, written atomically BEFORE perfmon_finalize and the
//! other teardown, so a crash there keeps it.
//!
//! Usage (by the library, not by hand):
//!   scope_profiler_likwid_helper --mode M --threads 0,1 --events G1|G2 --marker-file F --out J
//!
//! Exit status: 0 ok, 2 usage, 3 LIKWID not loadable, 4 read-back failed, 5 write failed,
//! 6 internal error.
//!
//! TEST ONLY: `SCOPE_PROFILER_LIKWID_HELPER_TEST_FAULT` makes the helper fail on purpose
//! so the fallbacks can be tested: `crash-before` (SIGSEGV after the read-back, before
//! writing), `crash-after` (SIGSEGV after writing), `hang` (sleeps before writing).

use scope_profiler::likwid::full_api::{self, HelperArgs, exit};
use std::time::Duration;

const TEST_FAULT_ENV: &str = "SCOPE_PROFILER_LIKWID_HELPER_TEST_FAULT";

fn test_fault() -> String {
    std::env::var(TEST_FAULT_ENV).unwrap_or_default()
}

/// A real SIGSEGV with the default action (Rust's own handler is bypassed).
fn segfault() -> ! {
    // SAFETY: resetting a handler and raising a signal.
    unsafe {
        libc::signal(libc::SIGSEGV, libc::SIG_DFL);
        libc::raise(libc::SIGSEGV);
    }
    std::process::abort()
}

fn hang() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn run() -> i32 {
    scope_profiler::likwid::helper_spawn::close_inherited_fds();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match HelperArgs::parse(&argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("scope_profiler_likwid_helper: {e}");
            return exit::USAGE;
        }
    };
    let fault = test_fault();
    if fault == "hang" {
        hang();
    }
    let lib = match likwid_sys::Likwid::load() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("scope_profiler_likwid_helper: {e}");
            return exit::NO_LIKWID;
        }
    };
    let doc = match full_api::read_back(lib, &args) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("scope_profiler_likwid_helper: {e}");
            return exit::READBACK;
        }
    };
    if fault == "crash-before" {
        segfault();
    }
    if let Err(e) = full_api::write_json_atomically(&args.out, &doc) {
        eprintln!("scope_profiler_likwid_helper: {}: {e}", args.out.display());
        return exit::WRITE;
    }
    if fault == "crash-after" {
        segfault();
    }
    full_api::teardown(lib);
    0
}

fn main() {
    let code = std::panic::catch_unwind(run).unwrap_or(exit::PANIC);
    std::process::exit(code);
}
