//! Termination signals with the flight recorder on: the profile is written, then the process
//! ends as it would have without us.
//!
//! Installed at `sp_setup` (not in a constructor, so runtimes that install theirs at program
//! start or at `MPI_Init` do not overwrite ours; ours chains to theirs). The handler runs no
//! HDF5 and allocates nothing: every call is already in the spill file's page cache with its
//! fill count, so it only starts the recovery helper (`scope_profiler_recover`, installed with
//! the library, see `find_helper`) with `fork` (a raw `clone`, so no atfork handler runs) and `execve` on argv and
//! envp prepared at setup (the environment as it was then, without LD_PRELOAD and launcher
//! variables, as for the LIKWID helper), with no signal blocked, waits for it with `waitpid(WNOHANG)` and `nanosleep` up to a bounded
//! time, and then chains: the host's handler runs if it had one; else the default action is
//! restored and the signal re-raised, so the exit status stays 128+N. No thread is created.
//!
//! Under MPI (a rank from the launcher) the helper is not started: the rank's spill directory
//! stays, and `sptool recover` combines the ranks afterwards. Once finalize begins (`disarm`),
//! a signal only chains: finalize writes the profile, or, if it is cut short, leaves the spill
//! directory for `sptool recover`.

use std::ffi::{CString, c_char, c_int, c_void};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

/// `SCOPE_PROFILER_SIGNALS`: `none`, or a comma list of TERM, INT, HUP, USR1, USR2, QUIT.
pub const ENV_SIGNALS: &str = "SCOPE_PROFILER_SIGNALS";
/// `SCOPE_PROFILER_SIGNAL_TIMEOUT`: seconds to wait for the helper (default 5).
pub const ENV_TIMEOUT: &str = "SCOPE_PROFILER_SIGNAL_TIMEOUT";
/// `SCOPE_PROFILER_RECOVER_HELPER`: path of the helper (default: found as the LIKWID helper is).
pub const ENV_HELPER: &str = "SCOPE_PROFILER_RECOVER_HELPER";
pub const HELPER_NAME: &str = "scope_profiler_recover";

const MAX_SIG: usize = 65;

struct Prepared {
    path: CString,
    _args: Vec<CString>,
    argv: Vec<*const c_char>,
    _env: Vec<CString>,
    envp: Vec<*const c_char>,
    timeout_ms: u64,
}

static PREPARED: AtomicPtr<Prepared> = AtomicPtr::new(std::ptr::null_mut());
static HANDLING: AtomicBool = AtomicBool::new(false);
/// The host's action per signal, saved before ours was installed (written at setup only).
static mut OLD: [Option<libc::sigaction>; MAX_SIG] = [None; MAX_SIG];

/// Parse the signal list; `Err` names what was not understood.
pub fn parse(spec: &str) -> Result<Vec<c_int>, String> {
    let spec = spec.trim();
    if spec.eq_ignore_ascii_case("none") || spec.is_empty() || spec == "0" {
        return Ok(Vec::new());
    }
    spec.split(',')
        .map(|s| {
            let s = s.trim().to_ascii_uppercase();
            match s.strip_prefix("SIG").unwrap_or(&s) {
                "TERM" => Ok(libc::SIGTERM),
                "INT" => Ok(libc::SIGINT),
                "HUP" => Ok(libc::SIGHUP),
                "USR1" => Ok(libc::SIGUSR1),
                "USR2" => Ok(libc::SIGUSR2),
                "QUIT" => Ok(libc::SIGQUIT),
                other => Err(other.to_string()),
            }
        })
        .collect()
}

fn helper_path() -> Result<std::path::PathBuf, String> {
    if let Some(p) = std::env::var_os(ENV_HELPER).filter(|p| !p.is_empty()) {
        return Ok(p.into());
    }
    // Where the library's helpers are (next to it, or installed in <libdir>/scope_profiler/);
    // from a test binary in target/<profile>/deps, one level up.
    crate::likwid::helper_spawn::find_helper(HELPER_NAME).or_else(|e| {
        let obj = crate::likwid::helper_spawn::our_object_path();
        let up = obj.as_deref().and_then(|o| o.parent()?.parent()).map(|d| d.join(HELPER_NAME));
        up.filter(|p| p.is_file()).ok_or(e)
    })
}

/// Default of `SCOPE_PROFILER_SIGNAL_TIMEOUT`, in seconds.
pub const DEFAULT_TIMEOUT_S: f64 = 5.0;

/// `SCOPE_PROFILER_SIGNAL_TIMEOUT` in seconds: a number of seconds (0 or more, at most a day),
/// else the default, with a warning naming both.
fn helper_timeout() -> f64 {
    let Some(v) = std::env::var_os(ENV_TIMEOUT) else { return DEFAULT_TIMEOUT_S };
    let text = v.to_string_lossy();
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && (0.0..=86_400.0).contains(&s) => s,
        _ => {
            crate::warn::once(
                "env:signal-timeout",
                &format!("ignoring {ENV_TIMEOUT}={text:?}: not a number of seconds (0 to 86400); using the default of {DEFAULT_TIMEOUT_S} s"),
            );
            DEFAULT_TIMEOUT_S
        }
    }
}

/// The helper must be a program this process can start: checked at setup, so that a wrong
/// `SCOPE_PROFILER_RECOVER_HELPER` is said then, not discovered at the signal.
fn check_helper(path: std::path::PathBuf) -> Result<std::path::PathBuf, String> {
    let executable = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        // SAFETY: access(2) on a NUL-terminated path.
        .is_ok_and(|c| unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0);
    if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) && executable {
        return Ok(path);
    }
    let from = if std::env::var_os(ENV_HELPER).is_some_and(|p| !p.is_empty()) { format!(" ({ENV_HELPER})") } else { String::new() };
    Err(format!("the recovery helper {}{from} is not an executable file", path.display()))
}

/// Install the handlers (called at setup once the spill is running). `run_dir` is this
/// process's spill directory; `target` the profile to write; `helper` false under MPI.
pub fn install(target: &Path, run_dir: &Path, helper: bool) {
    let sigs = match std::env::var(ENV_SIGNALS) {
        Err(_) => vec![libc::SIGTERM, libc::SIGINT],
        Ok(v) => parse(&v).unwrap_or_else(|bad| {
            crate::warn::once("env:signals", &format!("ignoring {ENV_SIGNALS}={v:?}: {bad} is not one of TERM, INT, HUP, USR1, USR2, QUIT, none"));
            vec![libc::SIGTERM, libc::SIGINT]
        }),
    };
    if sigs.is_empty() {
        return;
    }
    if helper && PREPARED.load(Ordering::Acquire).is_null() {
        let timeout_s = helper_timeout();
        match helper_path().and_then(check_helper) {
            Ok(path) => {
                let args: Vec<CString> = [path.as_os_str(), "--signal".as_ref(), run_dir.as_os_str(), target.as_os_str()]
                    .iter()
                    .filter_map(|a| CString::new(a.as_encoded_bytes()).ok())
                    .collect();
                let mut argv: Vec<*const c_char> = args.iter().map(|a| a.as_ptr()).collect();
                argv.push(std::ptr::null());
                let env = crate::likwid::helper_spawn::child_env();
                let mut envp: Vec<*const c_char> = env.iter().map(|a| a.as_ptr()).collect();
                envp.push(std::ptr::null());
                if let Ok(path) = CString::new(path.as_os_str().as_encoded_bytes()) {
                    let p = Box::new(Prepared { path, _args: args, argv, _env: env, envp, timeout_ms: (timeout_s.max(0.0) * 1000.0) as u64 });
                    PREPARED.store(Box::into_raw(p), Ordering::Release);
                }
            }
            Err(e) => crate::warn::once(
                "signals-helper",
                &format!("{e}; set {ENV_HELPER}: a caught signal leaves the spill data for `sptool recover`"),
            ),
        }
    }
    for sig in sigs {
        // SAFETY: querying and setting signal actions; OLD is written before our handler can run.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 || old.sa_sigaction == libc::SIG_IGN {
                continue; // the host ignores it: so do we
            }
            if old.sa_sigaction == on_signal as *const () as usize {
                continue;
            }
            OLD[sig as usize] = Some(old);
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_signal as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
            libc::sigemptyset(&mut new.sa_mask);
            libc::sigaction(sig, &new, std::ptr::null_mut());
        }
    }
}

/// Put the host's actions back where ours is installed (the library is being unloaded:
/// nothing may point into it afterwards).
pub fn restore() {
    HANDLING.store(true, Ordering::Release);
    for sig in 1..MAX_SIG {
        // SAFETY: reading OLD (written at setup only) and setting signal actions.
        unsafe {
            let Some(old) = (*std::ptr::addr_of!(OLD))[sig] else { continue };
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig as c_int, std::ptr::null(), &mut current) == 0 && current.sa_sigaction == on_signal as *const () as usize {
                libc::sigaction(sig as c_int, &old, std::ptr::null_mut());
            }
        }
    }
}

/// From now on a signal only chains (finalize has begun: it writes the profile itself).
pub fn disarm() {
    HANDLING.store(true, Ordering::Release);
}

/// Start the helper and wait for it, with async-signal-safe calls only.
unsafe fn run_helper(p: &Prepared) {
    // SAFETY: raw clone = fork without atfork handlers; the child only calls execve/_exit.
    unsafe {
        let pid = libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0, 0, 0, 0) as libc::pid_t;
        if pid == 0 {
            // The handler runs with the signal blocked: the helper starts with none blocked.
            let none: libc::sigset_t = std::mem::zeroed();
            libc::syscall(libc::SYS_rt_sigprocmask, libc::SIG_SETMASK, &none as *const libc::sigset_t, std::ptr::null_mut::<libc::sigset_t>(), 8usize);
            libc::execve(p.path.as_ptr(), p.argv.as_ptr(), p.envp.as_ptr());
            libc::_exit(127);
        }
        if pid < 0 {
            const MSG: &[u8] = b"[scope_profiler] could not start scope_profiler_recover at the signal: the spill data is kept, run `sptool recover <profile>`\n";
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            return;
        }
        let step = libc::timespec { tv_sec: 0, tv_nsec: 5_000_000 };
        let mut waited = 0u64;
        loop {
            let mut status = 0;
            let r = libc::waitpid(pid, &mut status, libc::WNOHANG);
            if r == pid || (r < 0 && *libc::__errno_location() != libc::EINTR) {
                return;
            }
            if waited >= p.timeout_ms {
                return; // leave it running: it may still finish before we are killed
            }
            libc::nanosleep(&step, std::ptr::null_mut());
            waited += 5;
        }
    }
}

extern "C" fn on_signal(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: errno location and the handler's own statics; see the module comment.
    unsafe {
        let errno = *libc::__errno_location();
        if !HANDLING.swap(true, Ordering::AcqRel) {
            let p = PREPARED.load(Ordering::Acquire);
            if !p.is_null() {
                run_helper(&*p);
            }
        }
        let old = if (sig as usize) < MAX_SIG { (*std::ptr::addr_of!(OLD))[sig as usize] } else { None };
        match old {
            // (A host that ignored the signal kept it: `install` leaves ignored signals alone.)
            Some(old) if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN => {
                *libc::__errno_location() = errno;
                if old.sa_flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) = std::mem::transmute(old.sa_sigaction);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(c_int) = std::mem::transmute(old.sa_sigaction);
                    f(sig);
                }
            }
            _ => {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigemptyset(&mut dfl.sa_mask);
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, sig);
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                libc::raise(sig);
            }
        }
        *libc::__errno_location() = errno;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_signal_lists() {
        assert_eq!(super::parse("TERM,int, SIGHUP").unwrap(), vec![libc::SIGTERM, libc::SIGINT, libc::SIGHUP]);
        assert!(super::parse("none").unwrap().is_empty());
        assert_eq!(super::parse("TERM,KILL").unwrap_err(), "KILL");
    }
}
