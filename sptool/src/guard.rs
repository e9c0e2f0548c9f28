//! Reading untrusted files without letting them take sptool down.
//!
//! The HDF5 library (1.10) can crash on damaged files, and whatever a file declares can make
//! it, or sptool, ask for more memory than there is. So every command runs in a child process
//! ([`run`]), forked before the HDF5 library is touched:
//! - the child's address space is limited ([`memory_limit`]: 64 times the input files' size,
//!   at least 4 GiB, or `SPTOOL_MAX_MEMORY`); an allocation that fails there ends the child
//!   with one line ([`Alloc`]), never an abort with a backtrace;
//! - so is its CPU time ([`cpu_limit`]: 60 s and 2 s per MiB of input, or
//!   `SPTOOL_MAX_CPU_SECONDS`): the HDF5 library loops forever on some damaged files;
//! - the child tells the parent, through a pipe, which input it is reading and which
//!   temporary output files it created ([`note_input`], [`note_temp`]);
//! - the child's standard error goes through the parent, which passes sptool's own lines
//!   (`sptool: ...`, and the library's `[scope_profiler] ...` during recovery) on at once
//!   and holds anything else (what the C library prints when the HDF5 library corrupts
//!   its heap) until the child has ended;
//! - if the child dies by a signal (the HDF5 library crashed on a damaged file, or ran out
//!   of CPU time), the parent removes the child's unfinished outputs, drops the held
//!   lines, and reports the file it was reading as damaged in one line, with exit status 1.
//!   A signal meant for sptool itself (SIGINT, SIGTERM, ...) is passed on to the child,
//!   and sptool then ends by the same signal.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};

use scope_profiler::guard::{self as shared, Tool, write_all};
pub use scope_profiler::guard::{Alloc, note_input, note_temp, note_written};

/// The child, in the parent (for passing signals on).
static CHILD: AtomicI32 = AtomicI32::new(0);

pub const MEMORY_ENV: &str = "SPTOOL_MAX_MEMORY";
pub const CPU_ENV: &str = "SPTOOL_MAX_CPU_SECONDS";

/// sptool as the shared reading machinery knows it (its lines, its limits' variables).
pub const TOOL: Tool = Tool { name: "sptool", prefix: "sptool: ", memory_env: MEMORY_ENV, cpu_env: CPU_ENV };

/// What the command reads, for the child's limits and the parent's message.
pub struct Plan {
    /// Input files (profiles).
    pub inputs: Vec<PathBuf>,
    /// Limit the child's memory and CPU time (not for `recover`, whose size is the run's).
    pub limited: bool,
}

/// The child's address-space limit: `SPTOOL_MAX_MEMORY`, else 64 times the inputs' size and
/// at least 4 GiB (`scope_profiler::guard::memory_limit`). `None`: no limit.
pub fn memory_limit(plan: &Plan) -> Option<u64> {
    if !plan.limited {
        return None;
    }
    shared::memory_limit(&TOOL, &plan.inputs)
}

/// The child's CPU-time limit in seconds: `SPTOOL_MAX_CPU_SECONDS`, else 60 s and 2 s per
/// MiB of input (`scope_profiler::guard::cpu_limit`). `None`: no limit.
pub fn cpu_limit(plan: &Plan) -> Option<u64> {
    if !plan.limited {
        return None;
    }
    shared::cpu_limit(&TOOL, &plan.inputs)
}

/// Signals sptool passes on to the child and then ends by itself.
const PASSED_ON: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

extern "C" fn pass_on(sig: libc::c_int) {
    let child = CHILD.load(Ordering::SeqCst);
    if child > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(child, sig) };
    }
}

/// Run `body` (the command; returns the exit status) in a child process, see the module
/// documentation. Returns the exit status sptool should end with.
pub fn run(plan: &Plan, body: impl FnOnce() -> u8) -> u8 {
    let limit = memory_limit(plan);
    let cpu = cpu_limit(plan);
    let (mut fds, mut err) = ([-1; 2], [-1; 2]);
    // SAFETY: pipe2 fills two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return run_here(limit, None, body);
    }
    // SAFETY: as above; on failure the first pipe is closed.
    if unsafe { libc::pipe2(err.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        return run_here(limit, None, body);
    }
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: sptool has one thread here (nothing has started any), so the child may run Rust.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        // SAFETY: closing our own descriptors.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
            libc::close(err[0]);
            libc::close(err[1]);
        }
        return run_here(limit, None, body);
    }
    if pid == 0 {
        // SAFETY: the child: closing the read end, asking to die with the parent.
        unsafe {
            libc::close(fds[0]);
            libc::close(err[0]);
            libc::dup2(err[1], 2);
            libc::close(err[1]);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            // A crash is reported by the parent; the runtime's own note on SIGSEGV (stack
            // overflow) would only add noise.
            libc::signal(libc::SIGSEGV, libc::SIG_DFL);
            libc::signal(libc::SIGBUS, libc::SIG_DFL);
        }
        shared::set_note_fd(fds[1]);
        let code = run_here(limit, cpu, body);
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::process::exit(code.into());
    }
    // The parent.
    // SAFETY: closing the write end we do not use.
    unsafe {
        libc::close(fds[1]);
        libc::close(err[1]);
    }
    CHILD.store(pid, Ordering::SeqCst);
    for sig in PASSED_ON {
        // SAFETY: a handler that only calls kill(2).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = pass_on as extern "C" fn(libc::c_int) as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
    let relayed = shared::relay(fds[0], err[0], &["sptool: ", "[scope_profiler]"], None);
    let held = relayed.held;
    // SAFETY: closing our read ends.
    unsafe {
        libc::close(fds[0]);
        libc::close(err[0]);
    }
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            break;
        }
        if rc < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return 1;
        }
    }
    let shared::Notes { inputs, temps, written, .. } = shared::parse_notes(&relayed.notes);
    if libc::WIFEXITED(status) {
        write_all(2, &held);
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        return 0;
    }
    shared::remove_temps(&temps);
    if libc::WIFEXITED(status) {
        return libc::WEXITSTATUS(status) as u8;
    }
    // Died by a signal (the HDF5 library crashing, a limit): the line below says sptool wrote
    // nothing, so an output it had already finished goes too.
    shared::remove_temps(&written);
    let sig = if libc::WIFSIGNALED(status) { libc::WTERMSIG(status) } else { 0 };
    if PASSED_ON.contains(&sig) {
        // End the way the child did, as a shell expects.
        // SAFETY: restoring the default action and raising the signal on ourselves.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        return 128u8.wrapping_add(sig as u8);
    }
    let input = inputs.last().cloned().or_else(|| plan.inputs.first().cloned());
    let name = shared::signal_name(sig);
    let what = match (input, plan.limited) {
        (Some(file), true) if sig == libc::SIGXCPU || (sig == libc::SIGKILL && cpu.is_some_and(cpu_used)) => format!(
            "{}: is a damaged file: reading it took more than {} s of CPU time (the HDF5 library loops on some damaged files); \
             sptool stopped and wrote nothing ({CPU_ENV} changes the limit)",
            file.display(),
            cpu.unwrap_or(0)
        ),
        (Some(file), true) if sig == libc::SIGKILL => {
            format!("{}: sptool was killed (SIGKILL) while reading it; out of memory?", file.display())
        }
        (Some(file), true) => format!(
            "{}: is a damaged file: reading it crashed the HDF5 library ({name}); sptool stopped and wrote nothing",
            file.display()
        ),
        (Some(file), false) => format!(
            "{}: recovery died by {name} while reading the run's spill data or per-rank files (damaged?); nothing more was done",
            file.display()
        ),
        (None, _) => format!("internal error: the command died by {name}; please report this bug"),
    };
    eprintln!("sptool: {}", crate::error::one_line(&what));
    1
}

/// Whether the children used up `seconds` of CPU time.
fn cpu_used(seconds: u64) -> bool {
    // SAFETY: getrusage fills the struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    usage.ru_utime.tv_sec as u64 + usage.ru_stime.tv_sec as u64 >= seconds
}

/// Run in this process (the child; or, without a child, with the memory limit only).
fn run_here(limit: Option<u64>, cpu: Option<u64>, body: impl FnOnce() -> u8) -> u8 {
    shared::apply_limits(limit, cpu);
    body()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_limits_grow_with_the_inputs() {
        let dir = std::env::temp_dir().join(format!("sptool-guard-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("in.h5");
        std::fs::write(&file, vec![0u8; 3 << 20]).unwrap();
        let plan = Plan { inputs: vec![file.clone(), dir.join("missing.h5")], limited: true };
        // The environment may set the limits; only the defaults are checked here.
        if std::env::var_os(CPU_ENV).is_none() {
            assert_eq!(cpu_limit(&plan), Some(60 + 3 * 2));
        }
        if std::env::var_os(MEMORY_ENV).is_none() {
            assert_eq!(memory_limit(&plan), Some(4 << 30));
        }
        assert_eq!(cpu_limit(&Plan { inputs: vec![file], limited: false }), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
