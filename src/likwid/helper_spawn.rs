//! Parent side of the helper: find it, start it with `posix_spawn` in a clean
//! environment, wait with a timeout, read its JSON.
//!
//! * Location: `$SCOPE_PROFILER_LIKWID_HELPER` if set (`off` disables the helper), else
//!   next to the object that holds this code (libscope_profiler.so, found with `dladdr`),
//!   else in `<that dir>/scope_profiler/` (where `cmake --install` puts it), else in
//!   `<that dir>/../libexec/scope_profiler/` ([`find_helper`]).
//! * Environment: the host's, minus MPI/batch launcher variables (`OMPI_*`, `PMI_*`,
//!   `PMIX_*`, `SLURM_*`, and the MVAPICH/Hydra/Intel MPI/Cray ones) so the helper can never
//!   join the job, and minus `LD_PRELOAD`/`LIKWID_PIN` (likwid-perfctr's pinning wrapper).
//! * The helper's stdout goes to our stderr (the host's stdout stays the host's), it runs
//!   in its own process group (a timeout kills it with anything it started, e.g.
//!   likwid-accessD), with default signal dispositions and an empty signal mask.
//! * A JSON document present after the helper ended is used whatever its exit status:
//!   the helper writes it atomically before its risky teardown.

use super::full_api::{HelperArgs, HelperOutput, exit};
use std::ffi::{CString, c_char, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const HELPER_NAME: &str = "scope_profiler_likwid_helper";
/// Override of the helper path; `off` skips the helper (marker file parsed directly).
pub const HELPER_ENV: &str = "SCOPE_PROFILER_LIKWID_HELPER";
/// Helper timeout in seconds (default [`DEFAULT_TIMEOUT`]).
pub const TIMEOUT_ENV: &str = "SCOPE_PROFILER_LIKWID_TIMEOUT";
/// perfmon_init alone spends ~1.1 s calibrating the TSC; daemon mode starts processes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

const LAUNCHER_PREFIXES: &[&str] =
    &["OMPI_", "PMI_", "PMIX_", "SLURM_", "MV2_", "HYDRA_", "HYDI_", "I_MPI_", "PALS_", "ALPS_APP_", "MPI_LOCAL"];
const DROPPED: &[&str] = &["LD_PRELOAD", "LIKWID_PIN"];

pub fn timeout() -> Duration {
    std::env::var(TIMEOUT_ENV)
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs_f64)
}

/// The file (shared library or executable) this code was loaded from.
pub fn our_object_path() -> Option<PathBuf> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: any address inside our code; dladdr fills info or returns 0.
    let rc = unsafe { libc::dladdr(our_object_path as *const c_void, &mut info) };
    if rc == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    let p = PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes()));
    Some(std::fs::canonicalize(&p).unwrap_or(p))
}

/// Where the library's helper programs (this one) are looked for,
/// relative to the directory of the object holding this code: next to it (a cargo build
/// tree), in `scope_profiler/` (the installed layout, `<libdir>/scope_profiler/`), in
/// `../libexec/scope_profiler/`.
pub const HELPER_DIRS: [&str; 3] = ["", "scope_profiler", "../libexec/scope_profiler"];

/// The helper program `name` in [`HELPER_DIRS`]; `Err` names where it was looked for.
pub fn find_helper(name: &str) -> Result<PathBuf, String> {
    let obj = our_object_path().ok_or("cannot locate libscope_profiler (dladdr failed)")?;
    let dir = obj.parent().ok_or("library path has no directory")?;
    let candidates: Vec<PathBuf> =
        HELPER_DIRS.iter().map(|d| if d.is_empty() { dir.join(name) } else { dir.join(d).join(name) }).collect();
    candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        format!("{name} not found next to {} (looked for {})", obj.display(), looked.join(", "))
    })
}

/// `Ok(None)` when the helper is switched off with `SCOPE_PROFILER_LIKWID_HELPER=off`.
pub fn locate() -> Result<Option<PathBuf>, String> {
    if let Some(v) = std::env::var_os(HELPER_ENV).filter(|v| !v.is_empty()) {
        if v == "off" {
            return Ok(None);
        }
        return Ok(Some(PathBuf::from(v)));
    }
    find_helper(HELPER_NAME).map(Some).map_err(|e| format!("{e}; set {HELPER_ENV}"))
}

fn dropped(key: &[u8]) -> bool {
    LAUNCHER_PREFIXES.iter().any(|p| key.starts_with(p.as_bytes())) || DROPPED.iter().any(|d| key == d.as_bytes())
}

/// `KEY=VALUE` strings for the helper.
pub fn child_env() -> Vec<CString> {
    std::env::vars_os()
        .filter(|(k, _)| !dropped(k.as_bytes()))
        .filter_map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect()
}

/// A private directory for the helper's JSON (mkdtemp, mode 0700).
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir, String> {
        let base = std::env::temp_dir().join("scope_profiler_likwid_XXXXXX");
        let mut t = base.as_os_str().as_bytes().to_vec();
        t.push(0);
        // SAFETY: NUL-terminated writable template.
        let p = unsafe { libc::mkdtemp(t.as_mut_ptr() as *mut c_char) };
        if p.is_null() {
            return Err(format!("mkdtemp in {}: {}", std::env::temp_dir().display(), std::io::Error::last_os_error()));
        }
        t.pop();
        Ok(TempDir(PathBuf::from(std::ffi::OsStr::from_bytes(&t))))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How the helper ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    Exited(i32),
    Signaled(i32),
    TimedOut(Duration),
    /// Reaped by someone else (the host ignores SIGCHLD or reaps all children).
    Unknown,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Exited(c) => write!(f, "exited with status {c}: {}", exit::describe(*c)),
            Ended::Signaled(s) => write!(f, "killed by signal {s}"),
            Ended::TimedOut(d) => write!(f, "timed out after {:.1} s ({TIMEOUT_ENV})", d.as_secs_f64()),
            Ended::Unknown => write!(f, "ended with unknown status"),
        }
    }
}

/// Close every descriptor above 2 (the helper's first act, for glibc without closefrom).
pub fn close_inherited_fds() {
    crate::guard::close_fds_from(3);
}

fn spawn(helper: &Path, argv: &[String]) -> Result<libc::pid_t, String> {
    let prog = CString::new(helper.as_os_str().as_bytes()).map_err(|_| "helper path has NUL")?;
    let args: Vec<CString> = std::iter::once(prog.clone()).chain(argv.iter().filter_map(|a| CString::new(a.as_bytes()).ok())).collect();
    let mut arg_ptrs: Vec<*mut c_char> = args.iter().map(|a| a.as_ptr() as *mut c_char).collect();
    arg_ptrs.push(std::ptr::null_mut());
    let env = child_env();
    let mut env_ptrs: Vec<*mut c_char> = env.iter().map(|a| a.as_ptr() as *mut c_char).collect();
    env_ptrs.push(std::ptr::null_mut());
    // SAFETY: attr/actions are initialised before use and destroyed after; every pointer
    // array is NULL-terminated and outlives the call.
    unsafe {
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        let mut acts: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        libc::posix_spawnattr_init(&mut attr);
        libc::posix_spawn_file_actions_init(&mut acts);
        let signals = crate::guard::plain_signals(&mut attr);
        libc::posix_spawnattr_setpgroup(&mut attr, 0);
        let flags = signals | libc::POSIX_SPAWN_SETPGROUP;
        libc::posix_spawnattr_setflags(&mut attr, flags as libc::c_short);
        libc::posix_spawn_file_actions_adddup2(&mut acts, 2, 1);
        crate::guard::add_closefrom(&mut acts, 3);
        let mut pid: libc::pid_t = 0;
        let rc = libc::posix_spawn(&mut pid, prog.as_ptr(), &acts, &attr, arg_ptrs.as_ptr(), env_ptrs.as_ptr());
        libc::posix_spawn_file_actions_destroy(&mut acts);
        libc::posix_spawnattr_destroy(&mut attr);
        if rc != 0 {
            return Err(format!("cannot start {}: {}", helper.display(), std::io::Error::from_raw_os_error(rc)));
        }
        Ok(pid)
    }
}

fn decode(status: libc::c_int) -> Ended {
    if libc::WIFEXITED(status) {
        Ended::Exited(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Ended::Signaled(libc::WTERMSIG(status))
    } else {
        Ended::Unknown
    }
}

fn wait(pid: libc::pid_t, timeout: Duration) -> Ended {
    let start = Instant::now();
    let mut nap = Duration::from_millis(1);
    loop {
        let mut status = 0;
        // SAFETY: our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return decode(status);
        }
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            // ECHILD: someone else reaps our children; wait until the pid is gone.
            // SAFETY: signal 0 only checks existence.
            if unsafe { libc::kill(pid, 0) } != 0 {
                return Ended::Unknown;
            }
        }
        if start.elapsed() >= timeout {
            // SAFETY: the helper's own process group (setpgroup(0) made pgid == pid), then the pid.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGKILL);
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                // SAFETY: as above.
                let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
                if r == pid || r < 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            return Ended::TimedOut(timeout);
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

/// Run the helper; `Ok` with its document (and how it ended) whenever a complete JSON
/// document was written, `Err` with a reason otherwise.
pub fn run(helper: &Path, mode: i32, threads: &[i32], events: &str, marker_file: &Path) -> Result<(HelperOutput, Ended), String> {
    let dir = TempDir::new()?;
    let out = dir.0.join("result.json");
    let args = HelperArgs { mode, threads: threads.to_vec(), events: events.into(), marker_file: marker_file.into(), out: out.clone() };
    let pid = spawn(helper, &args.to_argv())?;
    let ended = wait(pid, timeout());
    match std::fs::read(&out) {
        Ok(bytes) => match serde_json::from_slice::<HelperOutput>(&bytes) {
            Ok(doc) if doc.format == super::full_api::FORMAT && doc.regions.iter().all(|r| r.is_consistent()) => Ok((doc, ended)),
            Ok(_) => Err(format!("helper {ended}; its JSON is inconsistent")),
            Err(e) => Err(format!("helper {ended}; its JSON is unreadable: {e}")),
        },
        Err(_) => Err(format!("helper {ended} without writing its result")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_variables_are_dropped() {
        for k in ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "LD_PRELOAD", "LIKWID_PIN", "I_MPI_PIN"] {
            assert!(dropped(k.as_bytes()), "{k}");
        }
        for k in ["LIKWID_EVENTS", "LIKWID_FORCE", "PATH", "HOME", "PMIX", "OMPI", "LD_LIBRARY_PATH"] {
            assert!(!dropped(k.as_bytes()), "{k}");
        }
    }

    #[test]
    fn ended_texts() {
        assert!(Ended::Exited(4).to_string().contains("perfmon read-back failed"));
        assert!(Ended::Signaled(11).to_string().contains("signal 11"));
        assert!(Ended::TimedOut(Duration::from_secs(2)).to_string().contains("timed out after 2.0 s"));
    }

    #[test]
    fn temp_dir_is_private_and_removed() {
        let d = TempDir::new().unwrap();
        let p = d.0.clone();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o700);
        drop(d);
        assert!(!p.exists());
    }

    /// Processes of process group `pgid` that are not zombies (from /proc/<pid>/stat).
    fn live_members_of_group(pgid: libc::pid_t) -> usize {
        let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
        dir.flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|stat| {
                // After the ")" of the command: state, ppid, pgrp, ...
                let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
                let f: Vec<&str> = rest.split_whitespace().collect();
                f.len() > 2 && f[0] != "Z" && f[2] == pgid.to_string()
            })
            .count()
    }

    #[test]
    fn children_do_not_inherit_descriptors() {
        // An fd without O_CLOEXEC, like a host's open HDF5 file (whose lock would live on).
        let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
        assert!(fd > 2);
        let script = format!("test -e /proc/self/fd/{fd} && exit 1; exit 0");
        let pid = spawn(Path::new("/bin/sh"), &["-c".into(), script]).unwrap();
        let ended = wait(pid, Duration::from_secs(10));
        unsafe { libc::close(fd) };
        assert_eq!(ended, Ended::Exited(0), "descriptor {fd} leaked into the child");
    }

    #[test]
    fn spawn_wait_and_timeout_with_real_processes() {
        // /bin/sh stands in for the helper: only process handling is under test here.
        let pid = spawn(Path::new("/bin/sh"), &["-c".into(), "exit 7".into()]).unwrap();
        assert_eq!(wait(pid, Duration::from_secs(10)), Ended::Exited(7));
        let pid = spawn(Path::new("/bin/sh"), &["-c".into(), "kill -SEGV $$".into()]).unwrap();
        assert_eq!(wait(pid, Duration::from_secs(10)), Ended::Signaled(libc::SIGSEGV));
        let t0 = Instant::now();
        let pid = spawn(Path::new("/bin/sh"), &["-c".into(), "sleep 30 & sleep 30".into()]).unwrap();
        assert_eq!(wait(pid, Duration::from_millis(300)), Ended::TimedOut(Duration::from_millis(300)));
        assert!(t0.elapsed() < Duration::from_secs(6));
        // The whole process group is gone, including the background sleep.
        // Zombies waiting for a reaper do not count: only running members would.
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            live_members_of_group(pid) == 0
        });
        assert!(gone, "process group survived the timeout");
        assert!(spawn(Path::new("/nonexistent/helper"), &[]).is_err());
    }
}
