//! Helpers shared by tests/fortran_api.rs and tests/examples.rs (included with #[path]):
//! building Fortran programs against the module and the library, and mpirun.
#![allow(dead_code)]

use crate::support::{link_dir, repo_root, run, text};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The flags the module must compile with, warning-free.
pub const FFLAGS: &[&str] = &["-std=f2008", "-Wall", "-Wextra", "-Werror", "-O2", "-g"];

/// Compile the module into `dir` (its .mod and .o) with `compiler`, then `program`
/// (relative to the repo root) against it and libscope_profiler; returns the executable.
/// Any compiler output (a warning) fails the test.
pub fn build_fortran(compiler: &str, program: &str, dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let root = repo_root();
    let lib = link_dir();
    let moddir = dir.join(format!("{name}.mod.d"));
    std::fs::create_dir_all(&moddir).unwrap();
    let module_obj = moddir.join("scope_profiler.o");
    let out = run(Command::new(compiler)
        .args(FFLAGS)
        .arg("-J")
        .arg(&moddir)
        .arg("-c")
        .arg(root.join("fortran/scope_profiler.f90"))
        .arg("-o")
        .arg(&module_obj));
    assert!(out.status.success(), "{compiler} failed on the module:\n{}", text(&out.stderr));
    assert!(text(&out.stderr).trim().is_empty(), "{compiler}: warnings in the module:\n{}", text(&out.stderr));
    let exe = dir.join(name);
    let out = run(Command::new(compiler)
        .args(FFLAGS)
        .args(extra)
        .arg("-I")
        .arg(&moddir)
        .arg("-J")
        .arg(&moddir)
        .arg(root.join(program))
        .arg(&module_obj)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        // DT_RPATH (not RUNPATH) wins over the LD_LIBRARY_PATH cargo test sets, which may
        // point at an older copy of the library in target/<profile>.
        .arg("-Wl,--disable-new-dtags")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lscope_profiler"));
    assert!(out.status.success(), "{compiler} failed on {program}:\n{}", text(&out.stderr));
    assert!(text(&out.stderr).trim().is_empty(), "{compiler}: warnings in {program}:\n{}", text(&out.stderr));
    exe
}

/// `mpirun -np <np>` that works as root and above the core count (OpenMPI). Always with
/// `--oversubscribe`: OpenMPI's slots are cores, so a 2-CPU machine with one core and two
/// hardware threads has only 1.
pub fn mpirun(np: u32) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.arg("--oversubscribe").arg("-np").arg(np.to_string());
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    cmd
}
