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

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// The write end of the pipe to the parent, in the child; -1 elsewhere.
static NOTE_FD: AtomicI32 = AtomicI32::new(-1);
/// The input being read (leaked bytes), for the out-of-memory line.
static INPUT_PTR: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static INPUT_LEN: AtomicUsize = AtomicUsize::new(0);
/// The address-space limit in force (0: none), for the out-of-memory line.
static LIMIT: AtomicU64 = AtomicU64::new(0);
/// The child, in the parent (for passing signals on).
static CHILD: AtomicI32 = AtomicI32::new(0);

/// Input files smaller than this share the floor of the memory limit.
const MIN_LIMIT: u64 = 4 << 30;
/// The memory limit per byte of input.
const LIMIT_PER_INPUT_BYTE: u64 = 64;
pub const MEMORY_ENV: &str = "SPTOOL_MAX_MEMORY";
/// CPU seconds for any command, and per MiB of input on top.
const CPU_BASE_SECONDS: u64 = 60;
const CPU_SECONDS_PER_MIB: u64 = 2;
pub const CPU_ENV: &str = "SPTOOL_MAX_CPU_SECONDS";

fn write_all(fd: i32, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: writing from a valid buffer.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n > 0 {
            bytes = &bytes[n as usize..];
        } else if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        } else {
            return;
        }
    }
}

fn note(kind: u8, path: &Path) {
    let fd = NOTE_FD.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    let mut record = vec![kind];
    record.extend_from_slice(path.as_os_str().as_bytes());
    record.push(0);
    write_all(fd, &record);
}

/// The child is about to read `path`.
pub fn note_input(path: &Path) {
    let bytes: &'static mut [u8] = Box::leak(path.as_os_str().as_bytes().to_vec().into_boxed_slice());
    INPUT_LEN.store(0, Ordering::SeqCst);
    INPUT_PTR.store(bytes.as_mut_ptr(), Ordering::SeqCst);
    INPUT_LEN.store(bytes.len(), Ordering::SeqCst);
    note(b'I', path);
}

/// The child created the unfinished output `path` (removed by the parent if the child dies).
pub fn note_temp(path: &Path) {
    note(b'T', path);
}

/// The global allocator: the system's, but an allocation that fails ends sptool with one
/// line and exit status 1 (Rust's default prints a backtrace and aborts).
pub struct Alloc;

fn out_of_memory(size: usize) -> ! {
    // No allocation here: everything goes through stack buffers and write(2).
    let input_len = INPUT_LEN.load(Ordering::SeqCst);
    let input_ptr = INPUT_PTR.load(Ordering::SeqCst);
    write_all(2, b"sptool: ");
    if !input_ptr.is_null() && input_len > 0 {
        // SAFETY: leaked bytes of this length, never freed.
        write_all(2, unsafe { std::slice::from_raw_parts(input_ptr, input_len) });
        write_all(2, b": ");
    }
    write_all(2, b"out of memory: an allocation of ");
    let mut digits = [0u8; 20];
    write_all(2, decimal(size as u64, &mut digits));
    write_all(2, b" bytes failed");
    let limit = LIMIT.load(Ordering::Relaxed);
    if limit > 0 {
        write_all(2, b" (sptool limits itself to ");
        write_all(2, decimal(limit >> 20, &mut digits));
        write_all(2, b" MiB here; set SPTOOL_MAX_MEMORY to change that)");
    }
    write_all(2, b"\n");
    // SAFETY: ends the process without running anything else.
    unsafe { libc::_exit(1) }
}

fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

// SAFETY: forwards to the system allocator; a null result never returns to the caller.
unsafe impl GlobalAlloc for Alloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            out_of_memory(new_size);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// What the command reads, for the child's limits and the parent's message.
pub struct Plan {
    /// Input files (profiles).
    pub inputs: Vec<PathBuf>,
    /// Limit the child's memory and CPU time (not for `recover`, whose size is the run's).
    pub limited: bool,
}

/// Parse `SPTOOL_MAX_MEMORY`: bytes, with an optional K, M, G or T (binary) suffix; `none`,
/// `unlimited` or 0 for no limit. `Err` for a value that is none of these.
fn parse_limit(text: &str) -> Result<Option<u64>, ()> {
    let t = text.trim().to_ascii_lowercase();
    if t == "none" || t == "unlimited" || t == "0" {
        return Ok(None);
    }
    let t = t.strip_suffix("ib").or_else(|| t.strip_suffix('b')).unwrap_or(&t);
    let (digits, shift) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 10),
        Some('m') => (&t[..t.len() - 1], 20),
        Some('g') => (&t[..t.len() - 1], 30),
        Some('t') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let v: u64 = digits.trim().parse().map_err(|_| ())?;
    v.checked_mul(1u64 << shift).filter(|&v| v > 0).map(Some).ok_or(())
}

/// The child's address-space limit: `SPTOOL_MAX_MEMORY`, else 64 times the inputs' size and
/// at least 4 GiB. `None`: no limit.
pub fn memory_limit(plan: &Plan) -> Option<u64> {
    if !plan.limited {
        return None;
    }
    if let Some(v) = std::env::var_os(MEMORY_ENV).filter(|v| !v.is_empty()) {
        match parse_limit(&v.to_string_lossy()) {
            Ok(limit) => return limit,
            Err(()) => eprintln!(
                "sptool: warning: {MEMORY_ENV}={} is not a size (like 16G) or none; using the default limit",
                v.to_string_lossy()
            ),
        }
    }
    Some(input_bytes(plan).saturating_mul(LIMIT_PER_INPUT_BYTE).max(MIN_LIMIT))
}

fn input_bytes(plan: &Plan) -> u64 {
    plan.inputs.iter().filter_map(|p| std::fs::metadata(p).ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
}

/// The child's CPU-time limit in seconds: `SPTOOL_MAX_CPU_SECONDS`, else 60 s and 2 s per
/// MiB of input (`inspect` reads a 230 MiB file in 0.3 s: docs/bench/sptool.md). `None`: no limit.
pub fn cpu_limit(plan: &Plan) -> Option<u64> {
    if !plan.limited {
        return None;
    }
    if let Some(v) = std::env::var_os(CPU_ENV).filter(|v| !v.is_empty()) {
        let text = v.to_string_lossy().trim().to_ascii_lowercase();
        match text.as_str() {
            "none" | "unlimited" | "0" => return None,
            t => match t.parse::<u64>() {
                Ok(s) => return Some(s),
                Err(_) => eprintln!("sptool: warning: {CPU_ENV}={text} is not a number of seconds or none; using the default limit"),
            },
        }
    }
    Some(CPU_BASE_SECONDS.saturating_add(input_bytes(plan).div_ceil(1 << 20).saturating_mul(CPU_SECONDS_PER_MIB)))
}

fn set_cpu_limit(seconds: u64) {
    let mut current = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: reading and setting our own limit with valid structs.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_CPU, &mut current) != 0 {
            return;
        }
        // SIGXCPU at the soft limit (reported by the parent), SIGKILL 5 s later.
        let hard = current.rlim_max.min(seconds.saturating_add(5));
        let soft = seconds.min(hard);
        if current.rlim_cur <= soft && current.rlim_cur != libc::RLIM_INFINITY {
            return;
        }
        let new = libc::rlimit { rlim_cur: soft as libc::rlim_t, rlim_max: hard as libc::rlim_t };
        libc::setrlimit(libc::RLIMIT_CPU, &new);
    }
}

fn set_memory_limit(limit: u64) {
    let mut current = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: reading and setting our own limit with valid structs.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_AS, &mut current) != 0 {
            return;
        }
        let limit = limit.min(current.rlim_max);
        if current.rlim_cur <= limit && current.rlim_cur != libc::RLIM_INFINITY {
            LIMIT.store(current.rlim_cur, Ordering::Relaxed);
            return;
        }
        let new = libc::rlimit { rlim_cur: limit as libc::rlim_t, rlim_max: current.rlim_max };
        if libc::setrlimit(libc::RLIMIT_AS, &new) == 0 {
            LIMIT.store(limit, Ordering::Relaxed);
        }
    }
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

fn signal_name(sig: libc::c_int) -> String {
    let name = match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGABRT => "SIGABRT",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGSYS => "SIGSYS",
        libc::SIGKILL => "SIGKILL",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGPIPE => "SIGPIPE",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
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
        NOTE_FD.store(fds[1], Ordering::SeqCst);
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
    let (notes, held) = relay(fds[0], err[0]);
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
    let (inputs, temps) = parse_notes(&notes);
    if libc::WIFEXITED(status) {
        write_all(2, &held);
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        return 0;
    }
    for t in &temps {
        let _ = std::fs::remove_file(t);
    }
    if libc::WIFEXITED(status) {
        return libc::WEXITSTATUS(status) as u8;
    }
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
    let name = signal_name(sig);
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
    if let Some(limit) = limit {
        set_memory_limit(limit);
    }
    if let Some(seconds) = cpu {
        set_cpu_limit(seconds);
    }
    body()
}

/// Whether a line of the child's standard error is sptool's (or the library's) own.
fn own_line(line: &[u8]) -> bool {
    line.starts_with(b"sptool: ") || line.starts_with(b"[scope_profiler]")
}

/// Until the child has closed both pipes: collect its notes, pass its own stderr lines on,
/// and hold the others. Returns (notes, held lines). Each is kept to 1 MiB.
fn relay(notes_fd: i32, err_fd: i32) -> (Vec<u8>, Vec<u8>) {
    const CAP: usize = 1 << 20;
    let (mut notes, mut held, mut partial) = (Vec::new(), Vec::new(), Vec::new());
    let mut open = [true, true];
    let mut buf = [0u8; 8192];
    let take_line = |line: &[u8], held: &mut Vec<u8>| {
        if own_line(line) {
            write_all(2, line);
        } else if held.len() < CAP {
            held.extend_from_slice(line);
        }
    };
    while open[0] || open[1] {
        let mut fds = [
            libc::pollfd { fd: if open[0] { notes_fd } else { -1 }, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: if open[1] { err_fd } else { -1 }, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: polling two valid (or negative, ignored) descriptors.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if rc < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        for (i, fd) in [notes_fd, err_fd].into_iter().enumerate() {
            if !open[i] || fds[i].revents == 0 {
                continue;
            }
            // SAFETY: reading into a valid buffer.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                open[i] = false;
                continue;
            }
            let data = &buf[..n as usize];
            if i == 0 {
                if notes.len() < CAP {
                    notes.extend_from_slice(data);
                }
                continue;
            }
            partial.extend_from_slice(data);
            while let Some(end) = partial.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = partial.drain(..=end).collect();
                take_line(&line, &mut held);
            }
            if partial.len() > CAP {
                let line = std::mem::take(&mut partial);
                take_line(&line, &mut held);
            }
        }
    }
    if !partial.is_empty() {
        partial.push(b'\n');
        take_line(&partial, &mut held);
    }
    (notes, held)
}

/// (inputs read, temporary files made), in order.
fn parse_notes(notes: &[u8]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let (mut inputs, mut temps) = (Vec::new(), Vec::new());
    for record in notes.split(|&b| b == 0).filter(|r| r.len() > 1) {
        let path = PathBuf::from(OsString::from_vec(record[1..].to_vec()));
        match record[0] {
            b'I' => inputs.push(path),
            b'T' => temps.push(path),
            _ => {}
        }
    }
    (inputs, temps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse() {
        assert_eq!(parse_limit("16G"), Ok(Some(16 << 30)));
        assert_eq!(parse_limit("512m"), Ok(Some(512 << 20)));
        assert_eq!(parse_limit("2GiB"), Ok(Some(2 << 30)));
        assert_eq!(parse_limit("1048576"), Ok(Some(1 << 20)));
        assert_eq!(parse_limit("none"), Ok(None));
        assert_eq!(parse_limit("0"), Ok(None));
        assert_eq!(parse_limit("lots"), Err(()));
        assert_eq!(parse_limit("99999999999T"), Err(()));
    }

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

    #[test]
    fn notes_round_trip() {
        let notes = b"I/a/b.h5\0T/a/.x.tmp\0Irel.h5\0";
        let (i, t) = parse_notes(notes);
        assert_eq!(i, [PathBuf::from("/a/b.h5"), PathBuf::from("rel.h5")]);
        assert_eq!(t, [PathBuf::from("/a/.x.tmp")]);
        let mut d = [0u8; 20];
        assert_eq!(decimal(0, &mut d), b"0");
        assert_eq!(decimal(8796093022208, &mut d), b"8796093022208");
    }
}
