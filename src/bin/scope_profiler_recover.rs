//! `scope_profiler_recover --signal RUN_DIR TARGET.h5`: started by the flight recorder's
//! signal handler (fork + execve) to write the profile of a process that is being terminated,
//! from its spill directory. The same recovery as `sptool recover`, for one process.

use std::path::PathBuf;

fn main() {
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
