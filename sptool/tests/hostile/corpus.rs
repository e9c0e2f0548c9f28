//! The real inputs everything starts from, made once per test run: profiles the library
//! writes in its three layouts (threads, nesting, misuse, perf events with the software
//! event task-clock, FLOP and byte annotations), one the Python package writes (compressed
//! event columns), and the spill directories of two runs killed by a signal (the flight
//! recorder's data, for `sptool recover`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use crate::common::{compile, repo_root, scratch};

pub struct Corpus {
    /// Complete profiles.
    pub profiles: Vec<PathBuf>,
    /// Directories each holding one killed run's spill directory (`.out.spill.*`), for
    /// `sptool recover <dir>/out.h5`.
    pub spills: Vec<PathBuf>,
}

pub const LAYOUTS: [&str; 3] = ["regions", "columnar", "aggregate"];

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(out.status.success(), "{what} failed ({:?}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
}

/// A program's environment without the caller's profiler settings.
fn clean(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SCOPE_PROFILER_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

fn python() -> PathBuf {
    std::env::var_os("SCOPE_PROFILER_PYTHON").map(PathBuf::from).unwrap_or_else(|| repo_root().join(".venv/bin/python"))
}

/// Run the flight recorder test program until it crashes itself (SIGSEGV after `calls`
/// calls per worker), leaving its spill directory in a fresh directory.
fn killed_run(exe: &Path, dir: &Path, layout: &str) -> PathBuf {
    let run_dir = dir.join(format!("spill_{layout}"));
    std::fs::create_dir_all(&run_dir).unwrap();
    let out = clean(&mut Command::new(exe))
        .arg(run_dir.join("out.h5"))
        .arg(run_dir.join("side"))
        .args(["2", "segv", "40000"])
        .current_dir(&run_dir)
        .env("SCOPE_PROFILER_SPILL", "1")
        .env("SCOPE_PROFILER_LAYOUT", layout)
        .env("SCOPE_PROFILER_PERF_EVENTS", "task-clock")
        .output()
        .expect("run flight_loop");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "flight_loop should crash itself: {:?}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let spills: Vec<_> = std::fs::read_dir(&run_dir).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with(".out.spill.")).collect();
    assert_eq!(spills.len(), 1, "one spill directory in {}", run_dir.display());
    let _ = std::fs::remove_file(run_dir.join("side"));
    run_dir
}

fn make() -> Corpus {
    let t = Instant::now();
    let dir = scratch("corpus");
    let layouts_exe = compile("tests/c/layouts.c", &dir);
    let perf_exe = compile("tests/c/perf_events.c", &dir);
    let flight_exe = compile("tests/c/flight_loop.c", &dir);
    let sampling_exe = compile("tests/c/sampling.c", &dir);
    let mut profiles = Vec::new();
    for layout in LAYOUTS {
        for (exe, name) in [(&layouts_exe, "threads"), (&perf_exe, "perf")] {
            let file = dir.join(format!("{name}_{layout}.h5"));
            run(
                clean(&mut Command::new(exe)).arg(&file).current_dir(&dir).env("SCOPE_PROFILER_LAYOUT", layout).env("SCOPE_PROFILER_PERF_EVENTS", "task-clock"),
                &format!("{} ({layout})", exe.display()),
            );
            profiles.push(file);
        }
    }
    // Sampled (rank0/sampling, rank0/line_profile): what `sptool lines` reads.
    let sampled = dir.join("sampled.h5");
    run(
        clean(&mut Command::new(&sampling_exe))
            .arg(&sampled)
            .arg("threads")
            .current_dir(&dir)
            .env("SCOPE_PROFILER_SAMPLE_HZ", "2000")
            .env("SCOPE_PROFILER_VERBOSE", "0")
            .env("SAMPLING_TEST_SECONDS", "0.05"),
        &format!("{} (sampled)", sampling_exe.display()),
    );
    profiles.push(sampled);
    // The Python package's own writer: schema 3, event columns gzip-compressed (>= 16384 calls).
    let py = dir.join("python.h5");
    let script = "import sys\nimport scope_profiler as sp\nwith sp.session(file_path=sys.argv[1]):\n    for i in range(20000):\n        with sp.region('solve'):\n            with sp.region('inner/step'):\n                pass\n";
    run(clean(&mut Command::new(python())).arg("-c").arg(script).arg(&py), "the Python package (scope-profiler)");
    profiles.push(py);
    let spills = vec![killed_run(&flight_exe, &dir, "regions"), killed_run(&flight_exe, &dir, "columnar")];
    eprintln!("hostile corpus: {} profiles, {} spill directories in {:.1} s ({})", profiles.len(), spills.len(), t.elapsed().as_secs_f64(), dir.display());
    Corpus { profiles, spills }
}

/// The corpus, made by the first test that asks.
pub fn corpus() -> &'static Corpus {
    static CORPUS: OnceLock<Corpus> = OnceLock::new();
    CORPUS.get_or_init(make)
}

/// Copy a directory tree (regular files and directories only).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        let t = e.file_type().unwrap();
        if t.is_dir() {
            copy_dir(&e.path(), &target);
        } else if t.is_file() {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// The spill directory (`.out.spill.*`) inside one of [`Corpus::spills`].
pub fn spill_dir_in(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).find(|p| p.file_name().unwrap().to_string_lossy().starts_with(".out.spill.")).unwrap()
}
