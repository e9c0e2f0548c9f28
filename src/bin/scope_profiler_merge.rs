//! `scope_profiler_merge -o OUTPUT.h5 INPUT.rank0.h5 INPUT.rank1.h5 ...` (or a directory holding them)
//! Combines the per-rank files a run leaves when MPI was not usable at finalize.
//!
//! The same program is the library's merge helper (`--merge-for-parent`, see
//! `scope_profiler::merge`): the files are read in a child process of this one, under a memory
//! and CPU-time limit, so a damaged file is reported in one line, never by a crash.

use std::path::PathBuf;

#[global_allocator]
static ALLOC: scope_profiler::guard::Alloc = scope_profiler::guard::Alloc;

fn main() {
    scope_profiler::guard::set_tool(scope_profiler::guard::MERGE_TOOL);
    scope_profiler::merge::this_program_is_the_helper();
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let place = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        eprintln!("scope_profiler_merge: internal error: {}{place}; please report this bug", message.replace('\n', "; "));
    }));
    let all: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if all.first().is_some_and(|a| a == scope_profiler::merge::CHILD_FLAG) {
        let code = std::panic::catch_unwind(|| scope_profiler::merge::helper_main(&all[1..])).unwrap_or(101);
        std::process::exit(code);
    }
    let mut args = all.into_iter();
    let mut output: Option<PathBuf> = None;
    let mut inputs = Vec::new();
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("-o" | "--output") => output = args.next().map(PathBuf::from),
            Some("-h" | "--help") => {
                println!("usage: scope_profiler_merge -o OUTPUT.h5 RANKFILE.h5|DIR...\n\nCombines the per-rank files (<stem>.rank<N>.h5) that ranks write when MPI was not usable at finalize into one profile. A directory stands for the per-rank files directly in it (symlinks there are not followed). The output is written to a private temporary file and renamed into place. The inputs are read in a child process limited to SCOPE_PROFILER_MERGE_MAX_MEMORY bytes (default: 64 times their size, at least 4G) and SCOPE_PROFILER_MERGE_MAX_CPU_SECONDS (default: 60 and 2 per MiB); a damaged input is named in one line.");
                return;
            }
            _ => inputs.push(PathBuf::from(a)),
        }
    }
    let Some(output) = output else {
        eprintln!("scope_profiler_merge: missing -o OUTPUT.h5 (see --help)");
        std::process::exit(2);
    };
    if inputs.is_empty() {
        eprintln!("scope_profiler_merge: no input files (see --help)");
        std::process::exit(2);
    }
    match scope_profiler::merge::merge_rank_files(&output, &inputs) {
        Ok(w) => println!("merged {} input(s) into {}", inputs.len(), w.path.display()),
        Err(e) => {
            eprintln!("scope_profiler_merge: {}", e.message.replace('\n', "; "));
            std::process::exit(1);
        }
    }
}
