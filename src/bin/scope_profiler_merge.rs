//! `scope_profiler_merge -o OUTPUT.h5 INPUT.rank0.h5 INPUT.rank1.h5 ...` (or a directory holding them)
//! Combines the per-rank files a run leaves when MPI was not usable at finalize.

use std::path::PathBuf;

fn main() {
    let mut args = std::env::args().skip(1);
    let mut output: Option<PathBuf> = None;
    let mut inputs = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "-o" | "--output" => output = args.next().map(PathBuf::from),
            "-h" | "--help" => {
                println!("usage: scope_profiler_merge -o OUTPUT.h5 RANKFILE.h5|DIR...\n\nCombines the per-rank files (<stem>.rank<N>.h5) that ranks write when MPI was not usable at finalize into one profile. A directory stands for the per-rank files directly in it (symlinks there are not followed). The output is written to a private temporary file and renamed into place.");
                return;
            }
            _ => inputs.push(PathBuf::from(a)),
        }
    }
    let Some(output) = output else {
        eprintln!("scope_profiler_merge: missing -o OUTPUT.h5 (see --help)");
        std::process::exit(2);
    };
    match scope_profiler::merge::merge_rank_files(&output, &inputs) {
        Ok(w) => println!("merged {} input(s) into {}", inputs.len(), w.path.display()),
        Err(e) => {
            eprintln!("scope_profiler_merge: {e}");
            std::process::exit(1);
        }
    }
}
