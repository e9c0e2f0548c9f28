//! Running the sptool binary and comparing against golden files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The HDF5 C library opens files without close-on-exec. A child started
/// while this process has an HDF5 file open inherits the descriptor, and
/// with it the file's lock, until it exits; a test reading that file then
/// fails with "unable to lock file". So HDF5 files are only open in this
/// process under the write guard, and children start under the read guard.
static HDF5_FILES: RwLock<()> = RwLock::new(());

pub fn hdf5_open_guard() -> RwLockWriteGuard<'static, ()> {
    HDF5_FILES.write()
}

fn spawn_guard() -> RwLockReadGuard<'static, ()> {
    HDF5_FILES.read()
}

/// What a test ran, printed when it fails (the root crate's tests share it).
#[path = "../../../tests/support/programs.rs"]
mod programs;

/// Run a command to completion (see [`HDF5_FILES`]); a failing test prints its command
/// line, exit status and output tails.
pub fn output(cmd: &mut Command) -> std::io::Result<Output> {
    let _guard = spawn_guard();
    let started = std::time::Instant::now();
    let out = cmd.output()?;
    programs::record(cmd, &out, Some(started.elapsed()));
    Ok(out)
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn run_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sptool"));
    cmd.current_dir(dir).args(args).env_remove("SPTOOL_FONT").env_remove("RUST_BACKTRACE").env_remove("COLUMNS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let Output { status, stdout, stderr } = output(&mut cmd).expect("run sptool");
    Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

pub fn run(dir: &Path, args: &[&str]) -> Run {
    run_env(dir, args, &[])
}

/// Run and require success with nothing on stderr.
pub fn ok(dir: &Path, args: &[&str]) -> String {
    let r = run(dir, args);
    assert_eq!(r.code, 0, "sptool {args:?} failed: {}", r.stderr);
    assert!(r.stderr.is_empty(), "sptool {args:?} wrote to stderr: {}", r.stderr);
    r.stdout
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("golden")
}

/// Replace what legitimately varies between machines (the file size, which
/// depends on the HDF5 library version).
pub fn normalize(text: &str) -> String {
    let re = regex::Regex::new(r"\d+\.\d\d MiB").unwrap();
    re.replace_all(text, "<size> MiB").into_owned()
}

/// Compare `actual` with `tests/golden/<name>`; `BLESS=1` rewrites it.
pub fn golden(name: &str, actual: &str) {
    let path = golden_dir().join(name);
    let actual = normalize(actual);
    if std::env::var_os("BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("missing {}; run with BLESS=1 to create it", path.display()));
    if expected != actual {
        let diff: Vec<String> = expected
            .lines()
            .zip(actual.lines())
            .enumerate()
            .filter(|(_, (e, a))| e != a)
            .take(8)
            .map(|(i, (e, a))| format!("line {}:\n  expected: {e}\n  actual:   {a}", i + 1))
            .collect();
        panic!(
            "{} differs ({} vs {} lines); rerun with BLESS=1 to accept.\n{}\n--- actual ---\n{actual}",
            path.display(),
            expected.lines().count(),
            actual.lines().count(),
            diff.join("\n")
        );
    }
}
