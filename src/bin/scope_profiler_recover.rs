//! `scope_profiler_recover --signal RUN_DIR TARGET.h5`: started by the flight recorder's
//! signal handler (fork + execve) to write the profile of a process that is being terminated,
//! from its spill directory. The same recovery as `sptool recover`, for one process.

use std::path::PathBuf;

// Out of memory: one line, no backtrace.
#[global_allocator]
static ALLOC: scope_profiler::guard::Alloc = scope_profiler::guard::Alloc;

fn main() {
    scope_profiler::guard::set_tool(scope_profiler::guard::RECOVER_TOOL);
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let place = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        eprintln!("[scope_profiler] scope_profiler_recover: internal error: {}{place}; the spill data is kept for `sptool recover`; please report this bug", message.replace('\n', "; "));
    }));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dir, target) = match args.as_slice() {
        [flag, dir, target] if flag == "--signal" => (PathBuf::from(dir), PathBuf::from(target)),
        _ => {
            eprintln!("usage: scope_profiler_recover --signal RUN_DIR TARGET.h5 (started by libscope_profiler; use `sptool recover` yourself)");
            std::process::exit(2);
        }
    };
    scope_profiler::likwid::helper_spawn::close_inherited_fds();
    match scope_profiler::recover::recover_dirs(&target, &[dir], true) {
        Ok(r) => eprintln!("[scope_profiler] terminated by a signal: {}", r.message),
        Err(e) => {
            eprintln!("[scope_profiler] terminated by a signal; profile NOT written: {e} (run `sptool recover {}`)", target.display());
            std::process::exit(1);
        }
    }
}
