//! The sampling signal: which one, its handler, and chaining to the handler that was there.
//!
//! Not `SIGPROF`: a host that profiles itself (`setitimer(ITIMER_PROF)`, gprof, another
//! profiler) keeps it untouched. By default the first real-time signal from `SIGRTMIN+4`
//! whose action is the default one (nobody handles it) is taken; `SCOPE_PROFILER_SAMPLE_SIGNAL`
//! chooses another. A signal of ours is recognized by how the kernel sent it: `POLL_IN`/
//! `POLL_HUP` (a perf event's overflow, routed with `F_SETSIG`) or `SI_TIMER` with our timers'
//! tag; anything else (a `kill`, `sigqueue`, another timer) goes to the handler that was
//! installed before ours, or gets the default action, as if we were not there.
//!
//! The handler saves and restores `errno`, blocks every other signal while it runs (it is
//! short; a host handler interrupting it could never leave the thread's lock word held), and
//! stays installed after sampling stops and after finalize: a sample signal may still be
//! queued, and the default action of a real-time signal would end the process.

use super::thread::{OUTSIDE, ThreadSampler};
use std::ffi::{c_int, c_void};

const MAX_SIG: usize = 65;
const POLL_IN: c_int = 1;
const POLL_HUP: c_int = 6;
const SI_TIMER: c_int = -2;

/// The action before ours, per signal (written under the control lock before ours is
/// installed, read by the handler afterwards).
static mut OLD: [Option<libc::sigaction>; MAX_SIG] = [None; MAX_SIG];
unsafe extern "C" {
    fn scope_profiler_sampler_tls_get() -> *const c_void;
    fn scope_profiler_sampler_tls_set(p: *const c_void);
    fn scope_profiler_tls_get() -> *const c_void;
}

/// The calling thread's sampler, or null.
pub fn current() -> *const ThreadSampler {
    // SAFETY: reads this thread's own TLS slot (initial-exec: async-signal-safe).
    unsafe { scope_profiler_sampler_tls_get() as *const ThreadSampler }
}

pub fn set_current(p: *const ThreadSampler) {
    // SAFETY: writes this thread's own TLS slot.
    unsafe { scope_profiler_sampler_tls_set(p.cast()) }
}

/// The interrupted thread's innermost open region, or `OUTSIDE` (async-signal-safe).
fn innermost() -> u32 {
    // SAFETY: the recorder's TLS slot of this thread: null, or its buffer (never freed).
    let tb = unsafe { scope_profiler_tls_get() } as *const crate::recorder::ThreadBuffer;
    if tb.is_null() {
        return OUTSIDE;
    }
    // SAFETY: called from the handler on the owning thread; finalize closes every sampler
    // before it takes the threads' data.
    unsafe { (*tb).innermost_from_signal() }.unwrap_or(OUTSIDE)
}

/// `SIGRTMIN+k (n)`, or the usual name.
pub fn name(sig: c_int) -> String {
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    if (min..=max).contains(&sig) {
        format!("SIGRTMIN+{} (signal {sig})", sig - min)
    } else {
        // SAFETY: strsignal returns a static or thread-local string.
        let s = unsafe { libc::strsignal(sig) };
        let text = if s.is_null() { String::new() } else { unsafe { std::ffi::CStr::from_ptr(s) }.to_string_lossy().into_owned() };
        format!("signal {sig} ({text})")
    }
}

fn current_action(sig: c_int) -> Option<libc::sigaction> {
    // SAFETY: a zeroed sigaction is valid output space.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    (unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0).then_some(old)
}

/// Is our handler the one installed for `sig`?
pub fn is_ours(sig: c_int) -> bool {
    current_action(sig).is_some_and(|a| a.sa_sigaction == handler as *const () as usize)
}

/// Signals never usable for sampling.
fn refused(sig: c_int) -> Option<&'static str> {
    match sig {
        libc::SIGKILL | libc::SIGSTOP => Some("cannot be caught"),
        libc::SIGSEGV | libc::SIGBUS | libc::SIGFPE | libc::SIGILL | libc::SIGTRAP | libc::SIGABRT | libc::SIGSYS => Some("reports faults"),
        libc::SIGPROF => Some("belongs to the program's own profiling (setitimer)"),
        s if !(1..MAX_SIG as c_int).contains(&s) => Some("is not a signal number"),
        _ => None,
    }
}

/// The signal to sample with: `wanted` (checked), else the first real-time signal from
/// SIGRTMIN+4 that nobody handles.
pub fn choose(wanted: Option<c_int>) -> Result<c_int, String> {
    if let Some(sig) = wanted {
        return match refused(sig) {
            Some(why) => Err(format!("signal {sig} {why}")),
            None => Ok(sig),
        };
    }
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    for sig in (min + 4)..=max {
        if is_ours(sig) {
            return Ok(sig);
        }
        if current_action(sig).is_some_and(|a| a.sa_sigaction == libc::SIG_DFL) {
            return Ok(sig);
        }
    }
    Err(format!("every real-time signal from SIGRTMIN+4 to SIGRTMAX ({}) has a handler already; choose one with SCOPE_PROFILER_SAMPLE_SIGNAL", max))
}

/// Install our handler for `sig` (keeping the action that was there for chaining).
/// Call with the control lock held.
pub fn install(sig: c_int) -> Result<(), String> {
    if is_ours(sig) {
        return Ok(());
    }
    let old = current_action(sig).ok_or_else(|| format!("sigaction({}) failed", name(sig)))?;
    // SAFETY: written before our handler for `sig` is installed; the handler only reads the
    // entry of a signal it is handling.
    unsafe { (*std::ptr::addr_of_mut!(OLD))[sig as usize] = Some(old) };
    // SAFETY: a zeroed sigaction with our handler, every maskable signal blocked while it runs
    // except the synchronous fault signals.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler as *const () as usize;
    act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
    unsafe {
        libc::sigfillset(&mut act.sa_mask);
        for s in [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL, libc::SIGTRAP, libc::SIGABRT] {
            libc::sigdelset(&mut act.sa_mask, s);
        }
    }
    if unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) } != 0 {
        return Err(format!("sigaction({}): {}", name(sig), std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Block (true) or unblock `sig` on the calling thread.
/// Whether the calling thread has `sig` blocked.
pub fn blocked_here(sig: c_int) -> bool {
    // SAFETY: a zeroed sigset is valid output space; a null new set only reads the mask.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set) == 0 && libc::sigismember(&set, sig) == 1 }
}

/// Whether thread `tid` of this process has `sig` blocked now (its `SigBlk` in /proc).
pub fn blocked_in(tid: i32, sig: c_int) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")) else { return false };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|mask| (1..=64).contains(&sig) && mask & (1u64 << (sig - 1)) != 0)
}

pub fn block(sig: c_int, on: bool) {
    // SAFETY: a signal set built from scratch.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(if on { libc::SIG_BLOCK } else { libc::SIG_UNBLOCK }, &set, std::ptr::null_mut());
    }
}

/// The `siginfo_t` fields we read, at their offsets in the 64-bit Linux layout: `si_code`
/// (8); for SIGPOLL `si_fd` (24); for timers `si_overrun` (20) and the sigval (24).
struct Info(*const u8);

impl Info {
    fn int(&self, at: usize) -> c_int {
        // SAFETY: the kernel's siginfo_t is 128 bytes; `at` is a field offset inside it.
        unsafe { std::ptr::read_unaligned(self.0.add(at) as *const c_int) }
    }
    fn word(&self, at: usize) -> u64 {
        unsafe { std::ptr::read_unaligned(self.0.add(at) as *const u64) }
    }
    fn code(&self) -> c_int {
        self.int(8)
    }
}

/// The interrupted instruction's address, from the signal's context.
fn context_ip(ctx: *mut c_void) -> u64 {
    if ctx.is_null() {
        return 0;
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        // SAFETY: the kernel passes a ucontext_t to an SA_SIGINFO handler.
        let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
        uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64
    }
    #[cfg(all(target_os = "linux", target_arch = "aarch64"))]
    {
        let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
        uc.uc_mcontext.pc
    }
    #[cfg(not(any(all(target_os = "linux", target_arch = "x86_64"), all(target_os = "linux", target_arch = "aarch64"))))]
    {
        0
    }
}

fn errno_location() -> *mut c_int {
    // SAFETY: glibc's thread-local errno.
    unsafe { libc::__errno_location() }
}

extern "C" fn handler(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let saved = unsafe { *errno_location() };
    if !info.is_null() {
        let i = Info(info as *const u8);
        let code = i.code();
        let perf_fd = (POLL_IN..=POLL_HUP).contains(&code).then(|| i.int(24));
        let ours = perf_fd.is_some() || (code == SI_TIMER && super::timer::is_our_value(i.word(24)));
        if ours {
            let t = current();
            if !t.is_null() {
                let overrun = if perf_fd.is_none() { i.int(20).max(0) as u64 } else { 0 };
                // SAFETY: the calling thread's own sampler (never freed), from its handler.
                unsafe { (*t).on_signal(innermost, perf_fd, overrun, context_ip(ctx)) };
            }
            unsafe { *errno_location() = saved };
            return;
        }
    }
    chain(sig, info, ctx);
    unsafe { *errno_location() = saved };
}

/// Hand a signal that is not ours to the action that was there before us.
fn chain(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: written before our handler was installed for `sig`.
    let old = usize::try_from(sig).ok().and_then(|s| unsafe { (*std::ptr::addr_of!(OLD)).get(s).copied().flatten() });
    let Some(old) = old else { return };
    match old.sa_sigaction {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // The default action (a real-time signal's ends the process): restore it and send
            // the signal again; it arrives as soon as this handler returns.
            // SAFETY: async-signal-safe calls.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
                libc::syscall(libc::SYS_tgkill, libc::getpid(), libc::syscall(libc::SYS_gettid), sig);
            }
        }
        f if old.sa_flags & libc::SA_SIGINFO != 0 => {
            host_mask(sig, &old, ctx);
            // SAFETY: the host installed this function as an SA_SIGINFO handler.
            let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) = unsafe { std::mem::transmute(f) };
            f(sig, info, ctx);
        }
        f => {
            host_mask(sig, &old, ctx);
            // SAFETY: the host installed this function as a plain handler.
            let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(f) };
            f(sig);
        }
    }
}

/// The signal mask the host's handler would have run with: the interrupted code's mask, its
/// `sa_mask`, and the signal itself unless `SA_NODEFER` (ours blocks every signal).
fn host_mask(sig: c_int, old: &libc::sigaction, ctx: *mut c_void) {
    // SAFETY: signal sets built from the context's mask and the host's; async-signal-safe.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        if ctx.is_null() {
            libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut set);
        } else {
            set = (*(ctx as *const libc::ucontext_t)).uc_sigmask;
        }
        for s in 1..MAX_SIG as c_int {
            if libc::sigismember(&old.sa_mask, s) == 1 {
                libc::sigaddset(&mut set, s);
            }
        }
        if old.sa_flags & libc::SA_NODEFER == 0 {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}
