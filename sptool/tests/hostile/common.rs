//! Running the tools under a memory limit and a timeout, and judging what they did.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Address space each tool run may use (`setrlimit(RLIMIT_AS)` in the child).
pub const MEMORY_LIMIT: u64 = 2 << 30;
/// A run that takes longer than this has hung (sptool's own CPU-time limit, 60 s by default,
/// is set to [`CPU_LIMIT`] in the damage harness).
pub const TIMEOUT: Duration = Duration::from_secs(20);
/// `SPTOOL_MAX_CPU_SECONDS` for the damage harness's runs: several times what the largest
/// corpus file needs in a debug build (under 0.5 s), and well below [`TIMEOUT`] on a loaded
/// machine.
pub const CPU_LIMIT: &str = "3";

/// The sptool under test: this build's, or `SPTOOL_HOSTILE_BIN` (to show that a test fails
/// with an older sptool).
pub fn sptool() -> PathBuf {
    std::env::var_os("SPTOOL_HOSTILE_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_sptool")))
}

/// target/<profile>, where cargo puts the workspace's binaries and libscope_profiler.so.
pub fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_sptool")).parent().unwrap().to_path_buf()
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The library's merge tool, built by `cargo build --workspace` (the test command does that).
pub fn merge_tool() -> PathBuf {
    let exe = target_dir().join("scope_profiler_merge");
    assert!(exe.exists(), "{} not found: run `cargo build --workspace` first", exe.display());
    exe
}

/// Where libscope_profiler.so is: the test run's own (target/<profile>/deps) if cargo built
/// one, else the workspace build's.
pub fn lib_dir() -> PathBuf {
    let deps = target_dir().join("deps");
    if deps.join("libscope_profiler.so").exists() {
        return deps;
    }
    let dir = target_dir();
    assert!(dir.join("libscope_profiler.so").exists(), "libscope_profiler.so not found in {}: run `cargo build --workspace` first", dir.display());
    dir
}

/// A fresh directory for one test's files.
pub fn scratch(name: &str) -> PathBuf {
    let dir = target_dir().join("test-scratch").join("hostile").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Compile a test program of tests/c against the library.
pub fn compile(source: &str, dir: &Path) -> PathBuf {
    let name = Path::new(source).file_stem().unwrap().to_str().unwrap();
    let out = dir.join(name);
    let lib = lib_dir();
    let o = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c99", "-D_GNU_SOURCE", "-O2", "-g"])
        .arg(format!("-I{}", repo_root().join("include").display()))
        .arg(repo_root().join(source))
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", lib.display()))
        .arg("-Wl,--disable-new-dtags")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lscope_profiler", "-lpthread"])
        .output()
        .expect("run the C compiler");
    assert!(o.status.success(), "compiling {source} failed:\n{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// What one run did.
#[derive(Debug)]
pub struct Outcome {
    pub shown: String,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn describe(&self) -> String {
        let how = if self.timed_out {
            format!("hung: killed after {} s", TIMEOUT.as_secs())
        } else if let Some(s) = self.signal {
            format!("died by signal {s}")
        } else {
            format!("exit status {}", self.code.unwrap_or(-1))
        };
        let stderr: String = self.stderr.chars().take(1500).collect();
        format!("{}\n  -> {how}, {:.2} s; stderr:\n{}", self.shown, self.elapsed.as_secs_f64(), indent(&stderr))
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("     | {l}")).collect::<Vec<_>>().join("\n")
}

/// Run `cmd` in its own process group with `RLIMIT_AS` = [`MEMORY_LIMIT`], no core dumps,
/// `RUST_BACKTRACE=1` (a backtrace would show), killed after [`TIMEOUT`].
pub fn run_limited(cmd: &mut Command) -> Outcome {
    let shown = format!("{cmd:?}");
    cmd.env("RUST_BACKTRACE", "1").env_remove("COLUMNS").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpgid(0, 0);
            let mem = libc::rlimit { rlim_cur: MEMORY_LIMIT as libc::rlim_t, rlim_max: MEMORY_LIMIT as libc::rlim_t };
            libc::setrlimit(libc::RLIMIT_AS, &mem);
            let core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::setrlimit(libc::RLIMIT_CORE, &core);
            Ok(())
        });
    }
    let start = Instant::now();
    let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let (out, timed_out) = match rx.recv_timeout(TIMEOUT) {
        Ok(out) => (out.expect("wait for the child"), false),
        Err(_) => {
            // SAFETY: killing the process group we made.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            (rx.recv().unwrap().expect("wait for the killed child"), true)
        }
    };
    Outcome {
        shown,
        code: out.status.code(),
        signal: out.status.signal(),
        timed_out,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: start.elapsed(),
    }
}

/// Words that must never appear on a tool's standard error.
const NEVER: &[&str] = &[
    "panicked",
    "stack backtrace",
    "RUST_BACKTRACE",
    "memory allocation of",
    "fatal runtime error",
    "overflowed its stack",
    "internal error",
    "out of memory",
    "HDF5-DIAG",
];

/// What is wrong with an sptool run, if anything: it must end with status 0, 1 or 3
/// (`check`), by itself, in time, every line of its standard error its own
/// (`sptool: ...`, or the library's `[scope_profiler] ...` during recovery).
pub fn sptool_fault(o: &Outcome) -> Option<String> {
    if o.timed_out {
        return Some("hang".into());
    }
    if let Some(s) = o.signal {
        return Some(format!("signal {s}"));
    }
    if !matches!(o.code, Some(0 | 1 | 3)) {
        return Some(format!("exit status {:?}", o.code));
    }
    if let Some(word) = NEVER.iter().find(|w| o.stderr.contains(*w)) {
        return Some(format!("'{word}' on stderr"));
    }
    if let Some(line) = o.stderr.lines().find(|l| !l.starts_with("sptool: ") && !l.starts_with("[scope_profiler]")) {
        return Some(format!("stray stderr line {line:?}"));
    }
    None
}

/// What is wrong with a run of the merge tool, if anything (status 0, 1 or 2 for usage).
pub fn merge_fault(o: &Outcome) -> Option<String> {
    if o.timed_out {
        return Some("hang".into());
    }
    if let Some(s) = o.signal {
        return Some(format!("signal {s}"));
    }
    if !matches!(o.code, Some(0..=2)) {
        return Some(format!("exit status {:?}", o.code));
    }
    NEVER.iter().find(|w| o.stderr.contains(*w)).map(|w| format!("'{w}' on stderr"))
}

/// Unfinished outputs (`.<name>.<random>.tmp`) left in `dir`.
pub fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with('.') && n.ends_with(".tmp"))
                .collect()
        })
        .unwrap_or_default()
}

/// A small deterministic generator (SplitMix64): the same seed damages files the same way.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}
