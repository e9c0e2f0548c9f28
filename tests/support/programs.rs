//! What a test ran, shown when it fails. Every program a test runs through [`run`] (or
//! starts with [`spawn`] and waits for with [`wait`]) is logged for the test's thread: its
//! command line, how it ended, and the tail of its stderr and stdout. A panic hook prints
//! that log after the panic message, so a failing test explains itself in a CI log even
//! when its assertion only shows stdout (the cause of a failed `likwid-mpirun`, for
//! example, is only on stderr). libtest captures the hook's output with the test's, and
//! shows it only for a failing test.
//!
//! Every program started here also gets an OpenMPI session directory of its own (see
//! [`private_mpi_dir`]).
//!
//! Shared by the root crate's tests (`tests/support/mod.rs`) and sptool's
//! (`sptool/tests/sptool/common.rs`, through `#[path]`); std and libc only.
#![allow(dead_code)]

use std::cell::RefCell;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// Lines of stderr / stdout kept per program.
const STDERR_TAIL: usize = 60;
const STDOUT_TAIL: usize = 20;
/// The most recent programs are shown with their output, older ones with one line each.
const DETAILED: usize = 6;
/// Entries kept per test thread (older ones are only counted).
const KEPT: usize = 200;
/// Characters kept of one output line.
const LINE: usize = 400;

struct Ran {
    command: String,
    /// The private OpenMPI directory of a running child, removed when it has ended.
    mpi_dir: Option<PathBuf>,
    /// How it ended ("exit status: 0", "killed: timed out after 300 s", "still running").
    end: String,
    pid: u32,
    elapsed: Option<Duration>,
    started: Instant,
    stderr: Tail,
    stdout: Tail,
}

struct Tail {
    lines: Vec<String>,
    total: usize,
}

impl Tail {
    fn of(bytes: &[u8], keep: usize) -> Tail {
        let text = String::from_utf8_lossy(bytes);
        let all: Vec<&str> = text.lines().collect();
        let lines = all[all.len().saturating_sub(keep)..]
            .iter()
            .map(|l| if l.chars().count() > LINE { format!("{}...", l.chars().take(LINE).collect::<String>()) } else { l.to_string() })
            .collect();
        Tail { lines, total: all.len() }
    }

    fn none() -> Tail {
        Tail { lines: Vec::new(), total: 0 }
    }
}

#[derive(Default)]
struct Log {
    ran: Vec<Ran>,
    dropped: usize,
}

thread_local! {
    static LOG: RefCell<Log> = RefCell::new(Log::default());
}

fn push(r: Ran) {
    install_hook();
    LOG.with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            if l.ran.len() >= KEPT {
                l.ran.remove(0);
                l.dropped += 1;
            }
            l.ran.push(r);
        }
    });
}

/// Every thread's stack of a running process (a hung test program), for the failure report:
/// gdb's backtraces where gdb is installed (at most 60 s of it), else each thread's state and
/// kernel wait channel from /proc.
fn stacks_of(pid: u32) -> String {
    let mut out = String::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let dir = t.path();
            let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default().trim().to_string();
            let state = read("stat").rsplit(')').next().unwrap_or("").split_whitespace().next().unwrap_or("?").to_string();
            out += &format!("    thread {} ({}): state {state}, waiting in {}\n", t.file_name().to_string_lossy(), read("comm"), read("wchan"));
        }
    }
    let gdb = Command::new("timeout")
        .args(["60", "gdb", "-p", &pid.to_string(), "-batch", "-nx", "-ex", "set pagination off", "-ex", "thread apply all bt"])
        .stdin(Stdio::null())
        .output();
    match gdb {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            let frames: Vec<&str> = text.lines().filter(|l| l.starts_with('#') || l.starts_with("Thread ")).take(400).collect();
            out += &format!("    its threads' stacks (gdb):\n      {}\n", frames.join("\n      "));
        }
        _ => out += "    (no stacks: gdb is not installed or could not attach)\n",
    }
    out
}

fn describe(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}{}", if status.core_dumped() { " (core dumped)" } else { "" }),
        _ => format!("{status}"),
    }
}

/// Log a program that has ended (for tests that run one some other way than [`run`]).
pub fn record(cmd: &Command, out: &Output, elapsed: Option<Duration>) {
    record_line(format!("{cmd:?}"), out, elapsed);
}

fn record_line(command: String, out: &Output, elapsed: Option<Duration>) {
    push(Ran {
        command,
        mpi_dir: None,
        end: describe(&out.status),
        pid: 0,
        elapsed,
        started: Instant::now(),
        stderr: Tail::of(&out.stderr, STDERR_TAIL),
        stdout: Tail::of(&out.stdout, STDOUT_TAIL),
    });
}

/// Run a command to completion with piped stdout and stderr, failing the test after
/// `timeout` (the program is then killed with SIGKILL, and what it wrote until then is
/// logged). The program is logged for the failure report either way.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    let mpi_dir = private_mpi_dir(cmd);
    let _removed_at_the_end = RemoveDir(mpi_dir);
    let started = Instant::now();
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => {
            let out = out.unwrap_or_else(|e| panic!("waiting for {cmd:?}: {e}"));
            record(cmd, &out, Some(started.elapsed()));
            out
        }
        Err(_) => {
            // Where it hangs, before it is killed: every thread's stack.
            let stacks = stacks_of(pid);
            // SAFETY: kill(2) on the pid of our own child, which has not been reaped (the
            // waiting thread has not returned).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let line = format!("{cmd:?}");
            // Its output, once the pipes close (a grandchild may keep them open: then none).
            match rx.recv_timeout(Duration::from_secs(10)) {
                Ok(Ok(out)) => push(Ran {
                    command: line,
                    mpi_dir: None,
                    end: format!("killed (SIGKILL) after the test's timeout of {} s, then {}\n{stacks}", timeout.as_secs(), describe(&out.status)),
                    pid,
                    elapsed: Some(started.elapsed()),
                    started,
                    stderr: Tail::of(&out.stderr, STDERR_TAIL),
                    stdout: Tail::of(&out.stdout, STDOUT_TAIL),
                }),
                _ => push(Ran {
                    command: line,
                    mpi_dir: None,
                    end: format!("killed (SIGKILL) after the test's timeout of {} s; its output stayed in pipes a child of it holds open\n{stacks}", timeout.as_secs()),
                    pid,
                    elapsed: Some(started.elapsed()),
                    started,
                    stderr: Tail::none(),
                    stdout: Tail::none(),
                }),
            }
            panic!("{cmd:?} timed out after {} s", timeout.as_secs());
        }
    }
}

/// Start a command with piped stdout and stderr, logged as running until [`wait`].
pub fn spawn(cmd: &mut Command) -> Child {
    let mpi_dir = private_mpi_dir(cmd);
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    push(Ran {
        command: format!("{cmd:?}"),
        mpi_dir,
        end: "still running (started by the test, not waited for)".into(),
        pid: child.id(),
        elapsed: None,
        started: Instant::now(),
        stderr: Tail::none(),
        stdout: Tail::none(),
    });
    child
}

/// Wait for a child from [`spawn`] and log how it ended, with its output.
pub fn wait(child: Child) -> Output {
    let pid = child.id();
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("waiting for pid {pid}: {e}"));
    let logged = LOG.with(|l| {
        let Ok(mut l) = l.try_borrow_mut() else { return true };
        let Some(r) = l.ran.iter_mut().rev().find(|r| r.pid == pid && r.elapsed.is_none()) else { return false };
        r.end = describe(&out.status);
        drop(RemoveDir(r.mpi_dir.take()));
        r.elapsed = Some(r.started.elapsed());
        r.stderr = Tail::of(&out.stderr, STDERR_TAIL);
        r.stdout = Tail::of(&out.stdout, STDOUT_TAIL);
        true
    });
    if !logged {
        record_line(format!("(child pid {pid}, started elsewhere)"), &out, None);
    }
    out
}

/// OpenMPI keeps a job's session directory under `<orte_tmpdir_base>/ompi.<host>.<uid>/`
/// (`/tmp` by default), one per user, and a job that starts while another one ends can find
/// that directory removed under it: `A call to mkdir was unable to create the desired
/// directory ... File exists` (open-mpi/ompi#8510). Two test threads, or two test runs on one
/// machine, start such jobs at the same time, so every program started here (mpirun,
/// likwid-mpirun, ctest, a script: whatever may start one) gets a base directory of its own,
/// short enough for the sockets OpenMPI creates in it. Only OpenMPI reads the variable; one
/// already set is left alone.
fn private_mpi_dir(cmd: &mut Command) -> Option<PathBuf> {
    const VAR: &str = "OMPI_MCA_orte_tmpdir_base";
    if std::env::var_os(VAR).is_some() || cmd.get_envs().any(|(k, _)| k == VAR) {
        return None;
    }
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("sp-ompi.{}.{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).ok()?;
    cmd.env(VAR, &dir);
    Some(dir)
}

/// Removes its directory when dropped.
struct RemoveDir(Option<PathBuf>);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The log of this thread as text (what the panic hook prints).
pub fn report() -> String {
    LOG.with(|l| {
        let Ok(l) = l.try_borrow() else { return String::new() };
        if l.ran.is_empty() {
            return String::new();
        }
        let mut s = format!("---- the {} program(s) this test ran, most recent last ----\n", l.ran.len() + l.dropped);
        if l.dropped > 0 {
            s += &format!("({} earlier one(s) not kept)\n", l.dropped);
        }
        let first_detailed = l.ran.len().saturating_sub(DETAILED);
        for (i, r) in l.ran.iter().enumerate() {
            let took = r.elapsed.map(|d| format!(" after {:.1} s", d.as_secs_f64())).unwrap_or_default();
            s += &format!("[{}] $ {}\n    -> {}{took}\n", i + 1 + l.dropped, r.command, r.end);
            if i < first_detailed {
                continue;
            }
            for (name, t) in [("stderr", &r.stderr), ("stdout", &r.stdout)] {
                if t.total == 0 {
                    if r.elapsed.is_some() {
                        s += &format!("    {name}: (empty)\n");
                    }
                    continue;
                }
                if t.total > t.lines.len() {
                    s += &format!("    {name} (last {} of {} lines):\n", t.lines.len(), t.total);
                } else {
                    s += &format!("    {name}:\n");
                }
                for line in &t.lines {
                    s += &format!("    | {line}\n");
                }
            }
        }
        s
    })
}

/// Print [`report`] after the panic message of any thread that ran programs (once per
/// process; the previous hook, libtest's or the default, still prints the message).
fn install_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            let r = report();
            if !r.is_empty() {
                eprint!("{r}");
            }
        }));
    });
}
