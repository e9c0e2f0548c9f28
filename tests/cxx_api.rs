//! The header-only C++ API (include/scope_profiler.hpp): compiled with strict warnings as
//! C++11 and C++17, run, and its file read back. SP_SCOPE must close its region on every
//! exit path, exceptions included, before the handler runs.

mod support;
use support::*;

use std::process::Command;

const STRICT: &[&str] = &["-Wall", "-Wextra", "-Wpedantic", "-Werror", "-Wshadow", "-Wconversion", "-Wsign-conversion"];

fn check_scope_program(std: &str) {
    let dir = scratch(&format!("cxx_api_{}", std.replace('+', "x")));
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let mut flags = vec![std];
    flags.extend_from_slice(STRICT);
    let exe = compile_with(&cxx, &flags, "cxx_scope", &["tests/c/cxx_scope.cpp"], &dir, &[]);
    let file = dir.join("cxx.h5");
    let out = run(Command::new(&exe).arg(&file).current_dir(&dir));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("DONE failures=0"), "{stdout}\n{stderr}");
    // verbosity 0 from Session: no table at finalize; the tables are the mid-run
    // print_summary of each hot_loop, the first showing the kernel's 1000 calls so far.
    assert_eq!(stdout.matches("scope_profiler summary").count(), stdout.matches("kernel ").count(), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("kernel ") && l.contains(" 1000 ")), "{stdout}");

    let h5 = hdf5::File::open(&file).unwrap();
    assert_eq!(str_attr(&h5.group("metadata").unwrap(), "language"), "C++");
    let expected = expectations(&stdout);
    let regions = read_regions(&h5, 0);
    assert_eq!(
        regions.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "exactly the expected regions (the empty name and calls after finalize record nothing)"
    );
    for (name, &calls) in &expected {
        let r = &regions[name];
        assert_eq!(r.starts.len() as u64, calls, "calls of {name:?}");
        assert_eq!(r.open_calls, 0, "{name:?} left open");
        assert_eq!(r.dropped_calls, 0, "{name:?} dropped calls");
    }
    // Exceptions: each "throwing" call (and its inner scope) ended before its handler began.
    let (throwing, inner, handler) = (&regions["throwing"], &regions["throwing inner"], &regions["handler"]);
    for i in 0..6 {
        assert!(throwing.ends[i] <= handler.starts[i], "call {i}: region stopped only after the handler");
        if i + 1 < 6 {
            assert!(handler.ends[i] <= throwing.starts[i + 1]);
        }
    }
    for (k, (s, e)) in inner.starts.iter().zip(&inner.ends).enumerate() {
        let i = 2 * k + 1; // odd iterations throw from the inner scope
        assert!(throwing.starts[i] <= *s && *e <= throwing.ends[i], "inner call {k} not inside its outer call");
    }
    // Two scopes in one block close in reverse order.
    let (a, b) = (&regions["block a"], &regions["block b"]);
    for i in 0..4 {
        assert!(a.starts[i] <= b.starts[i] && b.ends[i] <= a.ends[i]);
    }
    assert_eq!(regions["dynamic/0"].group, "dynamic|0");
}

#[test]
fn cxx11_scopes_close_on_every_exit_path() {
    check_scope_program("-std=c++11");
}

#[test]
fn cxx17_scopes_close_on_every_exit_path() {
    check_scope_program("-std=c++17");
}

/// The header alone, in a translation unit that includes nothing else, under C++11.
#[test]
fn header_is_self_contained() {
    let dir = scratch("cxx_api_self_contained");
    let src = dir.join("only_header.cpp");
    std::fs::write(&src, "#include <scope_profiler.hpp>\nint main() { scope_profiler::Session s(nullptr, 0, 0); SP_SCOPE(\"x\"); return s.status() == SP_OK ? 0 : 1; }\n").unwrap();
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = run(Command::new(&cxx)
        .args(["-std=c++11", "-fsyntax-only"])
        .args(STRICT)
        .arg(format!("-I{}", repo_root().join("include").display()))
        .arg(&src));
    assert!(out.status.success(), "{}", text(&out.stderr));
}
