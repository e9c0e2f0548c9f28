//! The compile-time switch: with `-DSP_DISABLE` the C and C++ annotations compile away (the
//! program links without libscope_profiler and references none of its symbols), and
//! fortran/scope_profiler_disabled.f90 is a drop-in module for every Fortran test program that
//! needs no library. Each compiled-out program returns what a run switched off at run time
//! (`SCOPE_PROFILER_DISABLE=1`) returns, which the same source built normally shows.

mod support;
use support::*;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Compile `source` with `-DSP_DISABLE` and strict warnings, without the library.
fn compile_out(compiler: &str, std: &str, source: &str, dir: &Path, name: &str) -> PathBuf {
    let exe = dir.join(name);
    let mut cmd = Command::new(compiler);
    cmd.args([std, "-DSP_DISABLE", "-O2", "-Wall", "-Wextra", "-Wpedantic", "-Werror"])
        .arg(format!("-I{}", repo_root().join("include").display()))
        .arg(repo_root().join(source))
        .arg("-o")
        .arg(&exe);
    let out = run(&mut cmd);
    assert!(out.status.success(), "{cmd:?} failed:\n{}", text(&out.stderr));
    exe
}

/// The program references nothing of the library: not linked, no sp_* symbol undefined.
fn assert_no_library(exe: &Path) {
    let out = run(Command::new("readelf").arg("-d").arg(exe));
    assert!(out.status.success(), "readelf failed: {}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("scope_profiler"), "{} links the library:\n{}", exe.display(), text(&out.stdout));
    let out = run(Command::new("nm").arg("-u").arg(exe));
    assert!(out.status.success(), "nm failed: {}", text(&out.stderr));
    let symbols = text(&out.stdout);
    let undefined: Vec<&str> = symbols.lines().filter(|l| l.contains("sp_") || l.contains("scope_profiler")).collect();
    assert!(undefined.is_empty(), "{} still calls the library: {undefined:?}", exe.display());
}

/// Run `exe` in `dir` with the profile file pointed at `dir/profile.h5`: it must succeed, print
/// "DONE bad=0" and write nothing. Returns its stdout.
fn run_off(exe: &Path, dir: &Path, disable_env: bool) -> String {
    let file = dir.join("profile.h5");
    let mut cmd = Command::new(exe);
    cmd.current_dir(dir).env("SCOPE_PROFILER_FILE", &file).env_remove("SCOPE_PROFILER_DISABLE");
    if disable_env {
        cmd.env("SCOPE_PROFILER_DISABLE", "1");
    }
    let out = run(&mut cmd);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success() && stdout.contains("DONE bad=0"), "{cmd:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(!stdout.contains("scope_profiler summary"), "{stdout}");
    assert!(stderr.is_empty(), "{cmd:?} wrote to stderr:\n{stderr}");
    let left: Vec<_> = std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).filter(|n| n.to_string_lossy().ends_with(".h5")).collect();
    assert!(left.is_empty(), "{cmd:?} wrote a profile: {left:?}");
    stdout
}

#[test]
fn c_annotations_compile_away_and_match_the_run_time_switch() {
    let dir = scratch("disabled_build_c");
    let off = compile_out("cc", "-std=c99", "tests/c/compiled_out.c", &dir, "compiled_out");
    assert_no_library(&off);
    let compiled_out = run_off(&off, &dir, false);
    let on = compile(Lang::C, "compiled_in", &["tests/c/compiled_out.c"], &dir, &[]);
    let switched_off = run_off(&on, &dir, true);
    assert_eq!(compiled_out, switched_off);
}

#[test]
fn cxx_scope_compiles_away_and_matches_the_run_time_switch() {
    let dir = scratch("disabled_build_cxx");
    let off = compile_out("c++", "-std=c++11", "tests/c/compiled_out.cpp", &dir, "compiled_out_cxx");
    assert_no_library(&off);
    let compiled_out = run_off(&off, &dir, false);
    let on = compile(Lang::Cxx, "compiled_in_cxx", &["tests/c/compiled_out.cpp"], &dir, &[]);
    let switched_off = run_off(&on, &dir, true);
    assert_eq!(compiled_out, switched_off);
}

/// The disabled module has the real module's public names, and every Fortran test program
/// compiles against it unchanged; one runs without the library.
#[test]
fn fortran_disabled_module_is_a_drop_in_without_the_library() {
    let dir = scratch("disabled_build_fortran");
    let root = repo_root();
    let flags = ["-std=f2008", "-Wall", "-Wextra", "-Werror", "-O2"];
    let public = |path: &str| -> std::collections::BTreeSet<String> {
        let src = std::fs::read_to_string(root.join(path)).unwrap();
        src.lines()
            .filter_map(|l| {
                let l = l.trim();
                if let Some(rest) = l.strip_prefix("public ::") {
                    return Some(rest.split(',').map(|n| n.trim().to_lowercase()).collect::<Vec<_>>());
                }
                // `integer, parameter, public :: SP_OK = 0`
                let (decl, names) = l.split_once("::")?;
                decl.contains("public").then(|| vec![names.split('=').next().unwrap().trim().to_lowercase()])
            })
            .flatten()
            .collect()
    };
    assert_eq!(public("fortran/scope_profiler.f90"), public("fortran/scope_profiler_disabled.f90"), "public names differ");

    let moddir = dir.join("mod");
    std::fs::create_dir_all(&moddir).unwrap();
    let module = moddir.join("scope_profiler_disabled.o");
    let out = run(Command::new("gfortran").args(flags).arg("-J").arg(&moddir).arg("-c").arg(root.join("fortran/scope_profiler_disabled.f90")).arg("-o").arg(&module));
    assert!(out.status.success() && text(&out.stderr).trim().is_empty(), "the disabled module:\n{}", text(&out.stderr));
    // Every program of the Fortran tests (the MPI one with mpif90, the .F90 one preprocessed).
    for entry in std::fs::read_dir(root.join("tests/fortran")).unwrap() {
        let path = entry.unwrap().path();
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if ext != "f90" && ext != "F90" {
            continue;
        }
        let src = std::fs::read_to_string(&path).unwrap();
        let compiler = if src.contains("use mpi") { "mpif90" } else { "gfortran" };
        let obj = dir.join(path.file_name().unwrap()).with_extension("o");
        let out = run(Command::new(compiler).args(flags).arg("-ffree-line-length-none").arg("-I").arg(&moddir).arg("-c").arg(&path).arg("-o").arg(&obj));
        assert!(out.status.success(), "{} against the disabled module:\n{}", path.display(), text(&out.stderr));
    }
    // One linked without the library, run: every call succeeds, nothing is written.
    let exe = dir.join("defaults");
    let out = run(Command::new("gfortran").args(flags).arg("-I").arg(&moddir).arg(root.join("tests/fortran/defaults.f90")).arg(&module).arg("-o").arg(&exe));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_no_library(&exe);
    let out = run(Command::new(&exe).current_dir(&dir).env_remove("SCOPE_PROFILER_DISABLE"));
    let stdout = text(&out.stdout);
    assert!(out.status.success() && stdout.contains("DONE failures=0"), "{stdout}\n{}", text(&out.stderr));
    assert!(!dir.join("profiling_data.h5").exists());
}
