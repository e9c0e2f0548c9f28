//! Reading files that may be hostile, in a process of its own, so that nothing a file holds can
//! take down the process that asked: the HDF5 library (1.10) crashes on some damaged files and
//! loops forever on others, and whatever a file declares can ask for more memory than there is.
//!
//! One mechanism, used by the command-line tools (`sptool`, `scope_profiler_merge`, the
//! recovery helper) and by the library itself (`sp_merge_rank_files` runs the merge in the
//! helper `scope_profiler_merge`, started with `posix_spawn`, see `merge`):
//! - the reading process's address space and CPU time are limited ([`memory_limit`]:
//!   64 times the input files' size and at least 4 GiB; [`cpu_limit`]: 60 s and 2 s per MiB of
//!   input; each overridden by the tool's environment variables, see [`Tool`]);
//! - an allocation that fails there ends the process with one line ([`Alloc`], the tools'
//!   global allocator), never an abort with a backtrace;
//! - the reading process tells its parent, through a pipe, which input it is reading and
//!   which unfinished outputs it created ([`note_input`], [`note_temp`]), and its result
//!   ([`note_result`]);
//! - its standard error goes through the parent ([`relay`]), which passes the tool's own lines
//!   on at once and holds anything else (what the C library prints when the HDF5 library
//!   corrupts its heap) until the child has ended;
//! - the parent removes the unfinished outputs of a child that died by a signal and reports
//!   the file it was reading as damaged ([`crash_message`]).
//!
//! This module is a leaf: it uses nothing of the crate.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::{CString, OsString, c_char};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The program that reads: how its lines start and which variables set its limits.
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    /// The program's name, as said in the out-of-memory line (`sptool`).
    pub name: &'static str,
    /// How its own lines on standard error start (`sptool: `, `[scope_profiler] `).
    pub prefix: &'static str,
    /// The variable that sets the memory limit (`SPTOOL_MAX_MEMORY`).
    pub memory_env: &'static str,
    /// The variable that sets the CPU-time limit in seconds (`SPTOOL_MAX_CPU_SECONDS`).
    pub cpu_env: &'static str,
}

/// The merge helper (`scope_profiler_merge`), also what `sp_merge_rank_files` starts.
pub const MERGE_TOOL: Tool = Tool {
    name: "scope_profiler_merge",
    prefix: "scope_profiler_merge: ",
    memory_env: "SCOPE_PROFILER_MERGE_MAX_MEMORY",
    cpu_env: "SCOPE_PROFILER_MERGE_MAX_CPU_SECONDS",
};


static TOOL: OnceLock<Tool> = OnceLock::new();

/// Say which program this is (first thing in `main`).
pub fn set_tool(tool: Tool) {
    let _ = TOOL.set(tool);
}

pub fn tool() -> Tool {
    TOOL.get().copied().unwrap_or(Tool { name: "scope_profiler", prefix: "[scope_profiler] ", memory_env: "", cpu_env: "" })
}

/// The write end of the pipe to the parent, in a reading child; -1 elsewhere.
static NOTE_FD: AtomicI32 = AtomicI32::new(-1);
/// The input being read (leaked bytes), for the out-of-memory line.
static INPUT_PTR: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static INPUT_LEN: AtomicUsize = AtomicUsize::new(0);
/// A spawned reading child: its out-of-memory line goes to the parent as a note (`E`), which
/// the parent reports as its error, instead of to standard error.
static ERRORS_TO_PARENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The address-space limit in force (0: none), for the out-of-memory line.
static LIMIT: AtomicU64 = AtomicU64::new(0);

/// Input files smaller than this share the floor of the memory limit.
pub const MIN_LIMIT: u64 = 4 << 30;
/// The memory limit per byte of input.
pub const LIMIT_PER_INPUT_BYTE: u64 = 64;
/// CPU seconds for any reading child, and per MiB of input on top.
pub const CPU_BASE_SECONDS: u64 = 60;
pub const CPU_SECONDS_PER_MIB: u64 = 2;
/// The descriptor a spawned reading child finds the notes pipe on.
pub const CHILD_NOTE_FD: i32 = 3;

pub fn write_all(fd: i32, mut bytes: &[u8]) {
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

/// Send the parent a note: `kind`, the bytes (no NUL among them), a NUL.
fn note(kind: u8, bytes: &[u8]) {
    let fd = NOTE_FD.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    let mut record = vec![kind];
    record.extend(bytes.iter().copied().filter(|&b| b != 0));
    record.push(0);
    write_all(fd, &record);
}

/// Notes go to `fd` from now on (the reading child; -1: nowhere).
pub fn set_note_fd(fd: i32) {
    NOTE_FD.store(fd, Ordering::SeqCst);
}

/// Whether this process is a reading child that reports to a parent.
pub fn in_child() -> bool {
    NOTE_FD.load(Ordering::Relaxed) >= 0
}

/// The process is about to read `path` (named so in messages).
pub fn note_input(path: &Path) {
    let bytes: &'static mut [u8] = Box::leak(path.as_os_str().as_bytes().to_vec().into_boxed_slice());
    INPUT_LEN.store(0, Ordering::SeqCst);
    INPUT_PTR.store(bytes.as_mut_ptr(), Ordering::SeqCst);
    INPUT_LEN.store(bytes.len(), Ordering::SeqCst);
    note(b'I', path.as_os_str().as_bytes());
}

/// The process created the unfinished output `path` (a file or a private directory), removed
/// by the parent if the process dies.
pub fn note_temp(path: &Path) {
    note(b'T', path.as_os_str().as_bytes());
}

/// An output this process finished (renamed into place): see [`Notes::written`].
pub fn note_written(path: &Path) {
    note(b'W', path.as_os_str().as_bytes());
}

/// The process's result for its parent (text without NUL bytes, e.g. JSON).
pub fn note_result(text: &str) {
    note(b'R', text.as_bytes());
}

/// The global allocator of the tools: the system's, but an allocation that fails ends the
/// program with one line and exit status 1 (Rust's default prints a backtrace and aborts).
pub struct Alloc;

fn out_of_memory(size: usize) -> ! {
    // No allocation here: everything goes through a stack buffer and write(2).
    let t = tool();
    let mut line = Line { buf: [0; 4096], len: 0 };
    let to_parent = ERRORS_TO_PARENT.load(Ordering::Relaxed) && NOTE_FD.load(Ordering::Relaxed) >= 0;
    if to_parent {
        line.push(b"E"); // a note: the parent says it, as its error
    } else {
        line.push(t.prefix.as_bytes());
    }
    let input_len = INPUT_LEN.load(Ordering::SeqCst);
    let input_ptr = INPUT_PTR.load(Ordering::SeqCst);
    if !input_ptr.is_null() && input_len > 0 {
        // SAFETY: leaked bytes of this length, never freed.
        line.push(unsafe { std::slice::from_raw_parts(input_ptr, input_len) });
        line.push(b": ");
    }
    line.push(b"out of memory: an allocation of ");
    let mut digits = [0u8; 20];
    line.push(decimal(size as u64, &mut digits));
    line.push(b" bytes failed");
    let limit = LIMIT.load(Ordering::Relaxed);
    if limit > 0 {
        line.push(b" (");
        line.push(t.name.as_bytes());
        line.push(b" limits itself to ");
        line.push(decimal(limit >> 20, &mut digits));
        line.push(b" MiB here");
        if !t.memory_env.is_empty() {
            line.push(b"; set ");
            line.push(t.memory_env.as_bytes());
            line.push(b" to change that");
        }
        line.push(b")");
    }
    if to_parent {
        line.end(0);
        write_all(NOTE_FD.load(Ordering::Relaxed), line.bytes());
    } else {
        line.end(b'\n');
        write_all(2, line.bytes());
    }
    // SAFETY: ends the process without running anything else.
    unsafe { libc::_exit(1) }
}

/// A line built without allocating (the out-of-memory line); what does not fit is cut.
struct Line {
    buf: [u8; 4096],
    len: usize,
}

impl Line {
    /// Append `bytes` (NUL bytes left out: they would end a note), keeping room for the end.
    fn push(&mut self, bytes: &[u8]) {
        for &b in bytes.iter().filter(|&&b| b != 0) {
            if self.len + 1 < self.buf.len() {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
    }

    /// End the line with `last` (a newline, or the NUL that ends a note).
    fn end(&mut self, last: u8) {
        self.buf[self.len] = last;
        self.len += 1;
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

pub fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
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

/// Parse a memory limit: bytes, with an optional K, M, G or T (binary) suffix; `none`,
/// `unlimited` or 0 for no limit. `Err` for a value that is none of these.
#[allow(clippy::result_unit_err)] // the one way it fails: not a size
pub fn parse_limit(text: &str) -> Result<Option<u64>, ()> {
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

/// Bytes of the regular files among `inputs` (directories count their regular files).
pub fn input_bytes(inputs: &[PathBuf]) -> u64 {
    let size = |p: &Path| std::fs::symlink_metadata(p).ok().filter(|m| m.is_file()).map_or(0, |m| m.len());
    inputs
        .iter()
        .map(|p| match std::fs::metadata(p) {
            Ok(m) if m.is_dir() => std::fs::read_dir(p).map(|d| d.flatten().map(|e| size(&e.path())).sum()).unwrap_or(0),
            _ => size(p),
        })
        .fold(0u64, u64::saturating_add)
}

/// The memory limit of a reading child: the tool's variable, else 64 times the inputs' size
/// and at least 4 GiB. `None`: no limit.
pub fn memory_limit(t: &Tool, inputs: &[PathBuf]) -> Option<u64> {
    if let Some(v) = std::env::var_os(t.memory_env).filter(|v| !v.is_empty() && !t.memory_env.is_empty()) {
        match parse_limit(&v.to_string_lossy()) {
            Ok(limit) => return limit,
            Err(()) => eprintln!(
                "{}warning: {}={} is not a size (like 16G) or none; using the default limit",
                t.prefix,
                t.memory_env,
                v.to_string_lossy()
            ),
        }
    }
    Some(input_bytes(inputs).saturating_mul(LIMIT_PER_INPUT_BYTE).max(MIN_LIMIT))
}

/// The CPU-time limit of a reading child in seconds: the tool's variable, else 60 s and 2 s
/// per MiB of input (`sptool inspect` reads a 230 MiB file in 0.3 s). `None`: no limit.
pub fn cpu_limit(t: &Tool, inputs: &[PathBuf]) -> Option<u64> {
    if let Some(v) = std::env::var_os(t.cpu_env).filter(|v| !v.is_empty() && !t.cpu_env.is_empty()) {
        let text = v.to_string_lossy().trim().to_ascii_lowercase();
        match text.as_str() {
            "none" | "unlimited" | "0" => return None,
            s => match s.parse::<u64>() {
                Ok(s) => return Some(s),
                Err(_) => eprintln!("{}warning: {}={text} is not a number of seconds or none; using the default limit", t.prefix, t.cpu_env),
            },
        }
    }
    Some(CPU_BASE_SECONDS.saturating_add(input_bytes(inputs).div_ceil(1 << 20).saturating_mul(CPU_SECONDS_PER_MIB)))
}

/// Limit this process's CPU time: SIGXCPU at `seconds`, SIGKILL 5 s later.
pub fn set_cpu_limit(seconds: u64) {
    let mut current = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: reading and setting our own limit with valid structs.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_CPU, &mut current) != 0 {
            return;
        }
        let hard = current.rlim_max.min(seconds.saturating_add(5));
        let soft = seconds.min(hard);
        if current.rlim_cur <= soft && current.rlim_cur != libc::RLIM_INFINITY {
            return;
        }
        let new = libc::rlimit { rlim_cur: soft as libc::rlim_t, rlim_max: hard as libc::rlim_t };
        libc::setrlimit(libc::RLIMIT_CPU, &new);
    }
}

/// Limit this process's address space to `limit` bytes (or keep a lower limit in force).
pub fn set_memory_limit(limit: u64) {
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

/// Apply both limits (in the reading child).
pub fn apply_limits(memory: Option<u64>, cpu: Option<u64>) {
    if let Some(m) = memory {
        set_memory_limit(m);
    }
    if let Some(s) = cpu {
        set_cpu_limit(s);
    }
}

pub fn signal_name(sig: libc::c_int) -> String {
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
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// What a reading child said and printed, as [`relay`] collected it.
#[derive(Debug, Default)]
pub struct Relayed {
    pub notes: Vec<u8>,
    /// Lines of its standard error that were not its own, held back.
    pub held: Vec<u8>,
    /// The deadline passed before the child closed its pipes.
    pub timed_out: bool,
}

/// Until the child has closed both pipes (or `deadline`): collect its notes, pass its own
/// stderr lines (those starting with one of `own`) on at once, and hold the others. Notes and
/// held lines are each kept to 1 MiB.
pub fn relay(notes_fd: i32, err_fd: i32, own: &[&str], deadline: Option<Instant>) -> Relayed {
    const CAP: usize = 1 << 20;
    let mut out = Relayed::default();
    let mut partial = Vec::new();
    let mut open = [true, true];
    let mut buf = [0u8; 8192];
    let take_line = |line: &[u8], held: &mut Vec<u8>| {
        if own.iter().any(|p| line.starts_with(p.as_bytes())) {
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
        let wait_ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    out.timed_out = true;
                    break;
                }
                left.as_millis().min(60_000) as libc::c_int + 1
            }
        };
        // SAFETY: polling two valid (or negative, ignored) descriptors.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, wait_ms) };
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
                if out.notes.len() < CAP {
                    out.notes.extend_from_slice(data);
                }
                continue;
            }
            partial.extend_from_slice(data);
            while let Some(end) = partial.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = partial.drain(..=end).collect();
                take_line(&line, &mut out.held);
            }
            if partial.len() > CAP {
                let line = std::mem::take(&mut partial);
                take_line(&line, &mut out.held);
            }
        }
    }
    if !partial.is_empty() {
        partial.push(b'\n');
        take_line(&partial, &mut out.held);
    }
    out
}

/// What the notes say, in order.
#[derive(Debug, Default, PartialEq)]
pub struct Notes {
    pub inputs: Vec<PathBuf>,
    pub temps: Vec<PathBuf>,
    /// Outputs the child finished (renamed into place): removed only if it then died by a
    /// signal, which says it wrote nothing.
    pub written: Vec<PathBuf>,
    pub results: Vec<String>,
    /// Errors the child could only say this way (out of memory).
    pub errors: Vec<String>,
}

pub fn parse_notes(notes: &[u8]) -> Notes {
    let mut out = Notes::default();
    for record in notes.split(|&b| b == 0).filter(|r| r.len() > 1) {
        let bytes = record[1..].to_vec();
        match record[0] {
            b'I' => out.inputs.push(PathBuf::from(OsString::from_vec(bytes))),
            b'T' => out.temps.push(PathBuf::from(OsString::from_vec(bytes))),
            b'W' => out.written.push(PathBuf::from(OsString::from_vec(bytes))),
            b'R' => out.results.push(String::from_utf8_lossy(&bytes).into_owned()),
            b'E' => out.errors.push(String::from_utf8_lossy(&bytes).into_owned()),
            _ => {}
        }
    }
    out
}

/// Remove the unfinished outputs a dead child left (files, or its private directories with
/// what is in them).
pub fn remove_temps(temps: &[PathBuf]) {
    for t in temps {
        match std::fs::symlink_metadata(t) {
            Ok(m) if m.is_dir() => {
                let _ = std::fs::remove_dir_all(t);
            }
            Ok(_) => {
                let _ = std::fs::remove_file(t);
            }
            Err(_) => {}
        }
    }
}

/// The one line that says a child reading `input` died by `sig` (`cpu`: its CPU-time limit,
/// `cpu_spent`: whether it used it up).
pub fn crash_message(input: Option<&Path>, sig: libc::c_int, cpu: Option<u64>, cpu_spent: bool, what: &str) -> String {
    let name = signal_name(sig);
    match input {
        Some(file) if sig == libc::SIGXCPU || (sig == libc::SIGKILL && cpu_spent) => format!(
            "{}: is a damaged file: reading it took more than {} s of CPU time (the HDF5 library loops on some damaged files); {what}",
            file.display(),
            cpu.unwrap_or(0)
        ),
        Some(file) if sig == libc::SIGKILL => format!("{}: killed (SIGKILL) while reading it; out of memory? {what}", file.display()),
        Some(file) => format!("{}: is a damaged file: reading it crashed the HDF5 library ({name}); {what}", file.display()),
        None => format!("the reading process died by {name} before it read any file; {what}"),
    }
}

// ---------------------------------------------------------------------------------------
// A reading child started with posix_spawn (fork + exec in one call: safe in a multi-threaded
// host, no atfork handler runs, nothing of the parent's address space is used in the child).

/// How a spawned child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signaled(i32),
    /// Killed after the wall-clock limit.
    TimedOut,
    /// Reaped by someone else (the host ignores SIGCHLD or reaps all children).
    Unknown,
}

/// Everything a spawned reading child did.
#[derive(Debug)]
pub struct Finished {
    pub ended: Ended,
    pub notes: Notes,
    /// Lines of its standard error that were not its own.
    pub held: Vec<u8>,
    /// CPU seconds it used (0 when unknown).
    pub cpu_seconds: u64,
}

fn cstring(bytes: &[u8]) -> Option<CString> {
    CString::new(bytes).ok()
}

/// `posix_spawn_file_actions_addclosefrom_np(acts, from)` where glibc has it (2.34+); the
/// helper closes the others itself at start otherwise ([`close_fds_from`]).
pub unsafe fn add_closefrom(acts: &mut libc::posix_spawn_file_actions_t, from: libc::c_int) {
    type CloseFrom = unsafe extern "C" fn(*mut libc::posix_spawn_file_actions_t, libc::c_int) -> libc::c_int;
    // SAFETY: dlsym of a glibc function with the documented signature.
    unsafe {
        let sym = libc::dlsym(libc::RTLD_DEFAULT, c"posix_spawn_file_actions_addclosefrom_np".as_ptr());
        if !sym.is_null() {
            let f: CloseFrom = std::mem::transmute::<*mut libc::c_void, CloseFrom>(sym);
            f(acts, from);
        }
    }
}

/// Spawn attributes for a helper that starts with no signal blocked and every catchable
/// signal at its default action (whatever the host set up); returns the flags to set, to be
/// or-ed with the caller's own.
///
/// # Safety
/// `attr` was initialised with `posix_spawnattr_init`.
pub unsafe fn plain_signals(attr: &mut libc::posix_spawnattr_t) -> libc::c_int {
    // SAFETY: sigset_t values of our own; `attr` is initialised (the caller's promise).
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        let mut defaults: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut defaults);
        for s in 1..32 {
            if s != libc::SIGKILL && s != libc::SIGSTOP {
                libc::sigaddset(&mut defaults, s);
            }
        }
        libc::posix_spawnattr_setsigmask(attr, &empty);
        libc::posix_spawnattr_setsigdefault(attr, &defaults);
    }
    libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF
}

/// Close every descriptor from `from` on (a helper's first act where glibc cannot do it).
pub fn close_fds_from(from: i32) {
    let fds: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(d) => d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).filter(|&fd| fd >= from).collect(),
        Err(_) => return,
    };
    for fd in fds {
        // SAFETY: closing descriptors nobody here uses (the read_dir one is gone: EBADF).
        unsafe { libc::close(fd) };
    }
}

struct Pipe([i32; 2]);

impl Pipe {
    fn new() -> std::io::Result<Pipe> {
        let mut fds = [-1; 2];
        // SAFETY: pipe2 fills two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Pipe(fds))
    }

    fn close_write(&mut self) {
        if self.0[1] >= 0 {
            // SAFETY: our own descriptor, closed once.
            unsafe { libc::close(self.0[1]) };
            self.0[1] = -1;
        }
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        for fd in self.0 {
            if fd >= 0 {
                // SAFETY: our own descriptors.
                unsafe { libc::close(fd) };
            }
        }
    }
}

/// Start `program` with `args` (after argv[0]) and the environment `env` (`KEY=VALUE`): its standard input from /dev/null, its
/// standard output and error into one pipe, its notes pipe on descriptor [`CHILD_NOTE_FD`],
/// no other descriptor of ours, no signal blocked, default signal actions. Wait for it, up to
/// `wall` (then it is killed), relaying its lines as [`relay`] does.
pub fn spawn_and_wait(program: &Path, args: &[OsString], env: &[CString], own: &[&str], wall: Option<Duration>) -> Result<Finished, String> {
    let prog = cstring(program.as_os_str().as_bytes()).ok_or("the helper's path contains a NUL byte")?;
    let mut argv_c: Vec<CString> = vec![prog.clone()];
    for a in args {
        argv_c.push(cstring(a.as_bytes()).ok_or("an argument contains a NUL byte")?);
    }
    let mut argv: Vec<*mut c_char> = argv_c.iter().map(|a| a.as_ptr() as *mut c_char).collect();
    argv.push(std::ptr::null_mut());
    let mut envp: Vec<*mut c_char> = env.iter().map(|a| a.as_ptr() as *mut c_char).collect();
    envp.push(std::ptr::null_mut());
    let mut notes = Pipe::new().map_err(|e| format!("cannot make a pipe: {e}"))?;
    let mut err = Pipe::new().map_err(|e| format!("cannot make a pipe: {e}"))?;
    let mut pid: libc::pid_t = 0;
    // SAFETY: attr/actions are initialised before use and destroyed after; every pointer array
    // is NULL-terminated and outlives the call.
    let rc = unsafe {
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        let mut acts: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        libc::posix_spawnattr_init(&mut attr);
        libc::posix_spawn_file_actions_init(&mut acts);
        let flags = plain_signals(&mut attr);
        libc::posix_spawnattr_setflags(&mut attr, flags as libc::c_short);
        libc::posix_spawn_file_actions_addopen(&mut acts, 0, c"/dev/null".as_ptr(), libc::O_RDONLY, 0);
        libc::posix_spawn_file_actions_adddup2(&mut acts, err.0[1], 1);
        libc::posix_spawn_file_actions_adddup2(&mut acts, err.0[1], 2);
        libc::posix_spawn_file_actions_adddup2(&mut acts, notes.0[1], CHILD_NOTE_FD);
        add_closefrom(&mut acts, CHILD_NOTE_FD + 1);
        let rc = libc::posix_spawn(&mut pid, prog.as_ptr(), &acts, &attr, argv.as_ptr(), envp.as_ptr());
        libc::posix_spawn_file_actions_destroy(&mut acts);
        libc::posix_spawnattr_destroy(&mut attr);
        rc
    };
    if rc != 0 {
        return Err(format!("cannot start {}: {}", program.display(), std::io::Error::from_raw_os_error(rc)));
    }
    notes.close_write();
    err.close_write();
    let deadline = wall.map(|w| Instant::now() + w);
    let relayed = relay(notes.0[0], err.0[0], own, deadline);
    if relayed.timed_out {
        // SAFETY: our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    drop(notes);
    drop(err);
    let (mut ended, cpu_seconds) = reap(pid);
    if relayed.timed_out {
        ended = Ended::TimedOut;
    }
    Ok(Finished { ended, notes: parse_notes(&relayed.notes), held: relayed.held, cpu_seconds })
}

/// Wait for our child `pid`: how it ended and the CPU seconds it used.
fn reap(pid: libc::pid_t) -> (Ended, u64) {
    loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid out-buffer.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waiting for our own child.
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if rc == pid {
            let cpu = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec).max(0) as u64;
            let ended = if libc::WIFEXITED(status) {
                Ended::Exited(libc::WEXITSTATUS(status))
            } else if libc::WIFSIGNALED(status) {
                Ended::Signaled(libc::WTERMSIG(status))
            } else {
                Ended::Unknown
            };
            return (ended, cpu);
        }
        if rc < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        // ECHILD: the host reaps its children itself (or ignores SIGCHLD). The pipes are
        // closed, so the child has ended or is about to.
        return (Ended::Unknown, 0);
    }
}

/// In a spawned reading child, first thing: close what it must not hold, take the notes pipe,
/// die with the parent, apply the limits.
pub fn enter_spawned_child(memory: Option<u64>, cpu: Option<u64>) {
    close_fds_from(CHILD_NOTE_FD + 1);
    // SAFETY: fcntl on a descriptor number; a closed one gives -1.
    if unsafe { libc::fcntl(CHILD_NOTE_FD, libc::F_GETFD) } >= 0 {
        // SAFETY: marks our own descriptor close-on-exec.
        unsafe { libc::fcntl(CHILD_NOTE_FD, libc::F_SETFD, libc::FD_CLOEXEC) };
        set_note_fd(CHILD_NOTE_FD);
        ERRORS_TO_PARENT.store(true, Ordering::Relaxed);
    }
    // SAFETY: asking to be killed when the parent goes; no preconditions.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    apply_limits(memory, cpu);
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
    fn notes_round_trip() {
        let notes = b"I/a/b.h5\0T/a/.x.tmp\0Irel.h5\0R{\"ok\":1}\0";
        let n = parse_notes(notes);
        assert_eq!(n.inputs, [PathBuf::from("/a/b.h5"), PathBuf::from("rel.h5")]);
        assert_eq!(n.temps, [PathBuf::from("/a/.x.tmp")]);
        assert_eq!(n.results, ["{\"ok\":1}"]);
        let mut d = [0u8; 20];
        assert_eq!(decimal(0, &mut d), b"0");
        assert_eq!(decimal(8796093022208, &mut d), b"8796093022208");
    }

    /// A real child (/bin/sh stands in for a reader): its own lines pass, others are held,
    /// notes arrive on descriptor 3, a signal death and a wall-clock limit are reported.
    #[test]
    fn spawned_children_report_through_their_pipes() {
        let sh = Path::new("/bin/sh");
        let script = "printf 'Ia.h5\\0R{}\\0' >&3; echo '[scope_profiler] mine'; echo 'not mine'; exit 3";
        let env: Vec<CString> = vec![c"PATH=/usr/bin:/bin".into()];
        let f = spawn_and_wait(sh, &["-c".into(), script.into()], &env, &["[scope_profiler]"], None).unwrap();
        assert_eq!(f.ended, Ended::Exited(3));
        assert_eq!(f.notes.inputs, [PathBuf::from("a.h5")]);
        assert_eq!(f.notes.results, ["{}"]);
        assert_eq!(String::from_utf8_lossy(&f.held), "not mine\n");
        let f = spawn_and_wait(sh, &["-c".into(), "kill -SEGV $$".into()], &env, &[], None).unwrap();
        assert_eq!(f.ended, Ended::Signaled(libc::SIGSEGV));
        let t = Instant::now();
        let f = spawn_and_wait(sh, &["-c".into(), "exec sleep 30".into()], &env, &[], Some(Duration::from_millis(300))).unwrap();
        assert_eq!(f.ended, Ended::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(10));
        // No descriptor of ours beyond the notes pipe leaks into the child.
        let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
        let fd = unsafe { libc::fcntl(null, libc::F_DUPFD, 10) };
        unsafe { libc::close(null) };
        assert!(fd >= 10);
        let f = spawn_and_wait(sh, &["-c".into(), format!("test -e /proc/self/fd/{fd} && exit 1; exit 0").into()], &env, &[], None).unwrap();
        unsafe { libc::close(fd) };
        assert_eq!(f.ended, Ended::Exited(0));
    }
}
