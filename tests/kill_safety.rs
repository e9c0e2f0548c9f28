//! Kill-safe by default: real programs (C with pthreads, OpenMP, Fortran, MPI under mpirun with
//! 3 ranks) run with no setting of ours at all and are ended by SIGTERM, SIGINT or SIGUSR1;
//! their profile is written at the signal and read back with the PyPI reader, holding every
//! call the program reported complete before the signal. Also: a host with its own SIGTERM
//! handler (before and after sp_setup, one that ends the process, one that lets it go on), a
//! host that ignores SIGTERM, a signal during sp_finalize, a signal twice, a forked child that
//! finalizes after its parent, and calls into the library from a signal handler that
//! interrupted it.
//!
//! The programs append "<thread> <completed calls>" to a side file (fsync'd) after every batch:
//! a lower bound of what was complete before the signal.

mod support;
use support::*;

#[path = "fortran/support.rs"]
mod fortran_support;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Our settings, removed so that each program runs with none.
const OURS: [&str; 6] =
    ["SCOPE_PROFILER_SPILL", "SCOPE_PROFILER_SPILL_DIR", "SCOPE_PROFILER_SIGNALS", "SCOPE_PROFILER_SIGNAL_TIMEOUT", "SCOPE_PROFILER_FILE", "SCOPE_PROFILER_DISABLE"];

fn no_settings(cmd: &mut Command) -> &mut Command {
    for k in OURS {
        cmd.env_remove(k);
    }
    cmd
}

fn build(dir: &Path, extra: &[&str]) -> PathBuf {
    let mut flags = vec!["-lpthread"];
    flags.extend_from_slice(extra);
    compile(Lang::C, "flight_loop", &["tests/c/flight_loop.c"], dir, &flags)
}

fn start(exe: &Path, dir: &Path, threads: usize, mode: &str, calls: u64, env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(exe);
    cmd.arg(dir.join("out.h5")).arg(dir.join("side")).arg(threads.to_string()).arg(mode).arg(calls.to_string()).current_dir(dir);
    no_settings(&mut cmd);
    // Small batches with a pause: a file of a few MB, written well within the time a launcher
    // allows (the library's speed is not under test here).
    cmd.env("FLIGHT_LOOP_BATCH", "2000").env("FLIGHT_LOOP_PACE_US", "1000");
    for (k, v) in env {
        cmd.env(k, v);
    }
    programs::spawn(&mut cmd)
}

fn parse_side(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for l in text.lines() {
        if let Some((k, v)) = l.split_once(' ') {
            if let Ok(n) = v.trim().parse::<u64>() {
                let e = m.entry(k.to_string()).or_insert(0);
                *e = (*e).max(n);
            }
        }
    }
    m
}

fn side_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn poll_until(what: &str, done: impl FnMut() -> bool) {
    poll_every(20, what, done);
}

/// `poll_until` for a stage of the write that may last only milliseconds on a fast machine
/// (a check that is cheap: a file's existence, a header).
fn poll_closely(what: &str, done: impl FnMut() -> bool) {
    poll_every(1, what, done);
}

fn poll_every(ms: u64, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !done() {
        assert!(Instant::now() < deadline, "gave up after 90 s waiting for {what}");
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// Until every worker and the slow thread reported, then a random 0.2-0.8 s more.
fn wait_running(side: &Path, workers: &[&str]) {
    poll_until("the program's threads to record", || {
        let m = parse_side(&side_text(side));
        workers.iter().all(|w| m.contains_key(*w))
    });
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() as u64;
    std::thread::sleep(Duration::from_millis(200 + nanos % 600));
}

/// Wait for the program, failing (after killing it) if it is still running after `secs`.
fn wait_bounded(mut child: Child, secs: u64) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            let out = programs::wait(child);
            panic!("still running {secs} s after the signal (killed)\nstderr:\n{}", text(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    programs::wait(child)
}

fn kill(child: &Child, sig: i32) {
    unsafe { libc::kill(child.id() as i32, sig) };
}

/// Calls per region, summed over ranks, as the PyPI reader sees them; and the metadata.
fn read_back(file: &Path) -> (BTreeMap<String, u64>, serde_json::Value) {
    let v = python_view(file);
    let mut out = BTreeMap::new();
    for (name, ranks) in v["regions"].as_object().unwrap() {
        let n: u64 = ranks.as_object().unwrap().values().map(|r| r["calls"].as_u64().unwrap()).sum();
        out.insert(name.clone(), n);
    }
    (out, v["metadata"].clone())
}

fn work(m: &BTreeMap<String, u64>) -> u64 {
    m.iter().filter(|(k, _)| k.starts_with("work")).map(|(_, v)| v).sum()
}

/// Every call the program reported complete before the signal is in the file.
fn check_complete(file: &Path, before: &BTreeMap<String, u64>) -> (BTreeMap<String, u64>, serde_json::Value) {
    let (calls, meta) = read_back(file);
    assert!(calls.get("work").copied().unwrap_or(0) >= work(before), "work: {:?} in the file, {} complete before the signal", calls.get("work"), work(before));
    if let Some(&slow) = before.get("slow") {
        assert!(calls["slow"] >= slow, "slow: {} in the file, {slow} complete before the signal", calls["slow"]);
    }
    (calls, meta)
}

/// The file says which signal ended the run and from when on calls are missing.
fn check_signal_attrs(file: &Path, name: &str) {
    let h5 = hdf5::File::open(file).unwrap();
    let meta = h5.group("metadata").unwrap();
    assert_eq!(str_attr(&meta, "ended_by_signal"), name);
    let (at, until) = (int_attr(&meta, "signal_time_ns"), int_attr(&meta, "complete_until_ns"));
    assert!(at > 0 && until >= at, "signal at {at}, complete until {until}");
    let rank = h5.group("rank0").unwrap();
    assert_eq!(str_attr(&rank, "ended_by_signal"), name);
    assert_eq!(int_attr(&rank, "complete_until_ns"), until);
}

fn no_spill(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().contains(".spill.")).map(|e| e.path()).collect();
    assert!(left.is_empty(), "{left:?}");
}

fn signal_writes_the_profile(name: &str, sig: i32, signame: &str, extra: &[&str]) {
    let dir = scratch(name);
    let exe = build(&dir, extra);
    let child = start(&exe, &dir, 2, "plain", 0, &[]);
    wait_running(&dir.join("side"), &["work0", "work1", "slow"]);
    let before = parse_side(&side_text(&dir.join("side")));
    kill(&child, sig);
    let out = wait_bounded(child, 120);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.signal(), Some(sig), "the process ends as the signal would have: {:?}\n{stderr}", out.status);
    assert_eq!(stderr.matches(&format!("{signame}: profile written to")).count(), 1, "{stderr}");
    assert!(stderr.lines().count() <= 2, "a line or two, not a flood:\n{stderr}");
    let file = dir.join("out.h5");
    let (calls, _) = check_complete(&file, &before);
    check_signal_attrs(&file, signame);
    no_spill(&dir);
    // The signal ends the process: each thread that called after recording stopped waited
    // for the write at its first refused call (one per thread: 2 workers, the slow thread),
    // and no worker completed a batch after the stop.
    let refused = refused_after_stop(&stderr);
    assert!(refused <= 3, "{refused} calls refused: the program's threads went on calling during the write\n{stderr}");
    let after = parse_side(&side_text(&dir.join("side")));
    assert!(work(&after) <= calls["work"], "the workers completed {} calls, {} are in the file: they went on after the stop", work(&after), calls["work"]);
}

/// The calls refused after recording stopped, from the line after a signal write.
fn refused_after_stop(stderr: &str) -> u64 {
    let line = stderr.lines().find(|l| l.contains("after that were not recorded")).unwrap_or_else(|| panic!("no line on refused calls:\n{stderr}"));
    let before = line.split(" start/stop call(s) after that").next().unwrap();
    before.rsplit(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("{line}"))
}

/// Threads in instrumented functions after the stop wait for the write too (the hooks' way
/// in, not the regions'): no batch of calls completes after the stop, every call completed
/// before the signal is in the file.
#[test]
fn sigterm_holds_threads_in_instrumented_functions_until_the_write_is_done() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_functions");
    let exe = compile(Lang::C, "functions_loop", &["tests/c/functions_loop.c"], &dir, &["-g", "-finstrument-functions", "-lpthread"]);
    let (file, side) = (dir.join("out.h5"), dir.join("side"));
    let mut cmd = Command::new(&exe);
    cmd.arg(&side).current_dir(&dir);
    no_settings(&mut cmd).env("SCOPE_PROFILER_FILE", &file).env("SCOPE_PROFILER_THROTTLE", "off");
    let child = programs::spawn(&mut cmd);
    wait_running(&side, &["tick0", "tick1"]);
    let before = parse_side(&side_text(&side));
    kill(&child, libc::SIGTERM);
    let out = wait_bounded(child, 120);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{stderr}");
    let ticks = |m: &BTreeMap<String, u64>| m.iter().filter(|(k, _)| k.starts_with("tick")).map(|(_, v)| v).sum::<u64>();
    let (calls, _) = read_back(&file);
    let recorded = calls.get("tick").copied().unwrap_or_else(|| panic!("no region tick: {calls:?}\n{stderr}"));
    assert!(recorded >= ticks(&before), "{recorded} calls of tick in the file, {} completed before the signal", ticks(&before));
    let after = parse_side(&side_text(&side));
    assert!(ticks(&after) <= recorded, "the threads completed {} calls, {recorded} are in the file: they went on after the stop\n{stderr}", ticks(&after));
}

#[test]
fn sigterm_without_any_setting_writes_the_profile() {
    let _beside = beside_the_deadline_tests();
    signal_writes_the_profile("kill_term", libc::SIGTERM, "SIGTERM", &[]);
}

#[test]
fn sigint_without_any_setting_writes_the_profile() {
    let _beside = beside_the_deadline_tests();
    signal_writes_the_profile("kill_int", libc::SIGINT, "SIGINT", &[]);
}

/// The first warning of a batch system (Slurm's `--signal=USR1@120`), where the host leaves
/// SIGUSR1 at its default action (which ends the process).
#[test]
fn sigusr1_at_its_default_action_writes_the_profile() {
    let _beside = beside_the_deadline_tests();
    signal_writes_the_profile("kill_usr1", libc::SIGUSR1, "SIGUSR1", &[]);
}

#[test]
fn sigterm_to_an_openmp_program_writes_the_profile() {
    let _beside = beside_the_deadline_tests();
    signal_writes_the_profile("kill_omp", libc::SIGTERM, "SIGTERM", &["-fopenmp"]);
}

#[test]
fn sigterm_to_a_fortran_program_writes_the_profile() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_fortran");
    let exe = fortran_support::build_fortran("gfortran", "tests/fortran/kill_loop.f90", &dir, "kill_loop", &[]);
    let (file, side) = (dir.join("out.h5"), dir.join("side"));
    let mut cmd = Command::new(&exe);
    cmd.arg(&file).arg(&side).current_dir(&dir);
    let child = programs::spawn(no_settings(&mut cmd));
    wait_running(&side, &["work"]);
    let before = parse_side(&side_text(&side));
    kill(&child, libc::SIGTERM);
    let out = wait_bounded(child, 120);
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{:?}\n{}", out.status, text(&out.stderr));
    let (calls, meta) = read_back(&file);
    assert!(calls["work"] >= before["work"] && calls["step"] >= before["work"], "{calls:?} vs {before:?}");
    assert_eq!(meta["language"], "Fortran");
    check_signal_attrs(&file, "SIGTERM");
}

/// What rank `r` of a `start_mpirun` job reported complete so far.
fn side_of_rank(dir: &Path, r: usize) -> BTreeMap<String, u64> {
    parse_side(&side_text(&dir.join(format!("side.r{r}"))))
}

/// `tests/c/flight_loop.c` built with mpicc, started under mpirun with `np` ranks of
/// `threads` workers each (plus the slow thread), with mpirun's `options` and the program's
/// `env` (`-x NAME=VALUE`); returns once every rank's threads have all recorded.
fn start_mpirun(dir: &Path, np: usize, threads: usize, options: &[&str], env: &[&str]) -> Child {
    let exe = compile_with("mpicc", &["-std=c99", "-D_GNU_SOURCE", "-DWITH_MPI"], "flight_loop_mpi", &["tests/c/flight_loop.c"], dir, &["-lpthread"]);
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "-np", &np.to_string()]).args(options);
    for e in env {
        cmd.args(["-x", e]);
    }
    cmd.arg(&exe)
        .arg(dir.join("out.h5"))
        .arg(dir.join("side"))
        .args([&threads.to_string(), "plain", "0"])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = programs::spawn(no_settings(&mut cmd));
    let mut keys: Vec<String> = (0..threads).map(|t| format!("work{t}")).collect();
    keys.push("slow".into());
    poll_until("every rank to record", || {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("mpirun ended before the ranks ran: {status:?}");
        }
        (0..np).all(|r| {
            let m = side_of_rank(dir, r);
            keys.iter().all(|k| m.contains_key(k))
        })
    });
    child
}

/// mpirun forwards SIGTERM to the ranks (and kills them a second later, or after
/// `odls_base_sigkill_timeout` seconds); no collective is possible then, so each rank writes
/// its own file and one line for the job says how to merge them. The merge that line names
/// gives one file with every rank and every call complete before the signal.
#[test]
fn mpirun_sigterm_leaves_rank_files_and_one_line_to_merge_them() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_mpirun");
    let np = 3;
    // Open MPI kills the ranks 1 s after forwarding SIGTERM; this loaded 2-core machine may
    // need longer to write three debug-build files (the library's settings stay unset).
    let child = start_mpirun(&dir, np, 1, &["--mca", "odls_base_sigkill_timeout", "20"], &["FLIGHT_LOOP_BATCH=2000", "FLIGHT_LOOP_PACE_US=2000"]);
    std::thread::sleep(Duration::from_millis(500));
    let before: Vec<BTreeMap<String, u64>> = (0..np).map(|r| side_of_rank(&dir, r)).collect();
    kill(&child, libc::SIGTERM);
    let out = wait_bounded(child, 180);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("[scope_profiler]")).collect();
    assert_eq!(lines.len(), 1, "one line for the job:\n{stderr}");
    assert!(lines[0].contains("SIGTERM") && lines[0].contains("each of the 3 ranks writes its own file"), "{stderr}");
    for r in 0..np {
        assert!(dir.join(format!("out.rank{r}.h5")).is_file(), "rank {r} wrote no file:\n{stderr}");
    }
    assert!(!dir.join("out.h5").exists());
    // The command the line names, as a user would paste it.
    let merge = lines[0].split('`').nth(1).expect("a command in backquotes");
    assert!(merge.starts_with("scope_profiler_merge -o "), "{merge}");
    let merge = merge.replacen("scope_profiler_merge", &lib_dir().join("scope_profiler_merge").to_string_lossy(), 1);
    let m = run(Command::new("sh").arg("-c").arg(&merge).current_dir(&dir));
    assert!(m.status.success(), "{merge}\n{}{}", text(&m.stdout), text(&m.stderr));
    let v = python_view(&dir.join("out.h5"));
    assert_eq!(v["num_ranks"].as_u64().unwrap(), np as u64, "{v}");
    for (rank, b) in before.iter().enumerate() {
        let calls = |name: &str| v["regions"][name][rank.to_string()]["calls"].as_u64().unwrap_or(0);
        assert!(calls("work") >= b["work0"], "rank {rank}: {} < {}", calls("work"), b["work0"]);
        assert!(calls("slow") >= b["slow"], "rank {rank}: {} < {}", calls("slow"), b["slow"]);
    }
    // Its files are large (a 20-s run of three ranks): gone once checked.
    let _ = std::fs::remove_dir_all(&dir);
}

/// A host handler installed before sp_setup runs after the profile is written, on the thread
/// the signal hit, and decides the exit (here `_exit(42)`).
#[test]
fn host_handler_from_before_setup_runs_after_the_write() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_host_before");
    let exe = build(&dir, &[]);
    let child = start(&exe, &dir, 2, "host_handler", 0, &[]);
    wait_running(&dir.join("side"), &["work0", "work1", "slow"]);
    let before = parse_side(&side_text(&dir.join("side")));
    kill(&child, libc::SIGTERM);
    let out = wait_bounded(child, 120);
    assert_eq!(out.status.code(), Some(42), "the host's handler decides the exit: {:?}\n{}", out.status, text(&out.stderr));
    assert!(side_text(&dir.join("side")).contains("HOST_HANDLER_RAN"));
    check_complete(&dir.join("out.h5"), &before);
}

/// A host handler installed after sp_setup replaces ours; it calls exit(), and the write at
/// exit keeps the profile (run on the signal watcher: the handler interrupted a thread).
#[test]
fn host_handler_from_after_setup_that_exits_keeps_the_profile() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_host_after");
    let exe = build(&dir, &[]);
    let child = start(&exe, &dir, 2, "host_exit_after", 0, &[]);
    wait_running(&dir.join("side"), &["work0", "work1", "slow"]);
    let before = parse_side(&side_text(&dir.join("side")));
    kill(&child, libc::SIGTERM);
    let out = wait_bounded(child, 120);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(43), "{:?}\n{stderr}", out.status);
    assert!(side_text(&dir.join("side")).contains("HOST_AFTER_RAN"));
    assert!(stderr.contains("writing the profile at exit"), "{stderr}");
    check_complete(&dir.join("out.h5"), &before);
}

/// A host handler (SA_SIGINFO) that lets the program go on: it runs with the signal's own
/// siginfo (the sender's pid) after the profile is written, the program finishes on its own
/// and exits 0, and its sp_finalize finds the profile already written.
#[test]
fn host_handler_that_lets_the_program_go_on_decides() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_host_flag");
    let exe = build(&dir, &[]);
    let child = start(&exe, &dir, 2, "host_flag", 0, &[]);
    wait_running(&dir.join("side"), &["work0", "work1", "slow"]);
    let before = parse_side(&side_text(&dir.join("side")));
    kill(&child, libc::SIGTERM);
    let out = wait_bounded(child, 120);
    let side = side_text(&dir.join("side"));
    assert_eq!(out.status.code(), Some(0), "{:?}\n{}", out.status, text(&out.stderr));
    assert!(side.contains(&format!("HOST_FLAG_RAN {} {}", libc::SIGTERM, std::process::id())), "the host's handler got the signal's siginfo:\n{side}");
    assert!(side.contains("DONE 2"), "sp_finalize returned SP_ALREADY_FINALIZED:\n{side}");
    check_complete(&dir.join("out.h5"), &before);
    check_signal_attrs(&dir.join("out.h5"), "SIGTERM");
    // The host handles the signal: its threads went on during the write (not held), their
    // calls refused and counted.
    let stderr = text(&out.stderr);
    let refused = refused_after_stop(&stderr);
    assert!(refused > 3, "{refused} calls refused during the write: the program's threads were held\n{stderr}");
}

/// A host that ignores SIGTERM keeps ignoring it: no write, no exit. SIGINT still works.
#[test]
fn ignored_sigterm_stays_ignored() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_ignore");
    let exe = build(&dir, &[]);
    let child = start(&exe, &dir, 1, "ignore_term", 0, &[]);
    let side = dir.join("side");
    wait_running(&side, &["work0", "slow"]);
    kill(&child, libc::SIGTERM);
    let after = work(&parse_side(&side_text(&side)));
    poll_until("recording to go on after the ignored SIGTERM", || work(&parse_side(&side_text(&side))) > after + 20_000);
    assert!(!dir.join("out.h5").exists(), "no profile for an ignored signal");
    let before = parse_side(&side_text(&side));
    kill(&child, libc::SIGINT);
    let out = wait_bounded(child, 120);
    assert_eq!(out.status.signal(), Some(libc::SIGINT), "{}", text(&out.stderr));
    check_complete(&dir.join("out.h5"), &before);
}

/// SIGTERM while sp_finalize writes: that write completes (no second one), then the process
/// ends as the signal asks. (If the signal comes after the write, the host's default action
/// was put back by then: the same end.)
#[test]
fn sigterm_during_sp_finalize_writes_once_then_ends() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_during_finalize");
    let exe = build(&dir, &[]);
    let calls = 1_500_000u64;
    let side = dir.join("side");
    let child = start(&exe, &dir, 2, "finalize_signal", calls, &[("FLIGHT_LOOP_PACE_US", "0"), ("FLIGHT_LOOP_BATCH", "20000")]);
    poll_until("the program to reach sp_finalize", || side_text(&side).contains("FINALIZING"));
    kill(&child, libc::SIGTERM);
    let out = wait_bounded(child, 120);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{:?}\n{stderr}", out.status);
    let (got, meta) = read_back(&dir.join("out.h5"));
    assert_eq!(got["work"], 2 * calls, "every call, written once by sp_finalize");
    assert!(meta.get("ended_by_signal").is_none(), "no second write after the signal: {meta}");
    assert!(!stderr.contains("NOT written"), "{stderr}");
    let tmp: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".tmpdir")).collect();
    assert!(tmp.is_empty(), "{tmp:?}");
}

/// A second signal while the profile is written does not hang: the write gets a second more,
/// then the process ends as the signal asks; a file that is there is complete.
#[test]
fn a_second_signal_ends_the_process_without_hanging() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_twice");
    let exe = build(&dir, &[]);
    let child = start(&exe, &dir, 2, "plain", 0, &[]);
    wait_running(&dir.join("side"), &["work0", "work1", "slow"]);
    let before = parse_side(&side_text(&dir.join("side")));
    kill(&child, libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(5));
    kill(&child, libc::SIGTERM);
    let out = wait_bounded(child, 60);
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{:?}\n{}", out.status, text(&out.stderr));
    if dir.join("out.h5").exists() {
        check_complete(&dir.join("out.h5"), &before);
    } else {
        assert!(text(&out.stderr).contains("still being written when a second signal arrived"), "{}", text(&out.stderr));
    }
}

/// `none` turns it off: the signal ends the process as it would without us, nothing written.
#[test]
fn signals_none_leaves_the_signal_alone() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_none");
    let exe = build(&dir, &[]);
    let child = start(&exe, &dir, 1, "plain", 0, &[("SCOPE_PROFILER_SIGNALS", "none")]);
    wait_running(&dir.join("side"), &["work0", "slow"]);
    // No watcher thread either: the program's own threads only (main, slow, one worker).
    let tasks = std::fs::read_dir(format!("/proc/{}/task", child.id())).unwrap().count();
    assert_eq!(tasks, 3, "threads of the program");
    kill(&child, libc::SIGTERM);
    let out = wait_bounded(child, 60);
    assert_eq!(out.status.signal(), Some(libc::SIGTERM));
    assert!(!dir.join("out.h5").exists());
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
}

/// A child forked while the workers record holds a copy of the parent's buffers. It records
/// nothing and writes nothing: its sp_finalize after the parent's write returns SP_OK and
/// leaves the parent's profile as it is (it used to replace it with its own copy).
#[test]
fn a_forked_child_never_writes_over_its_parents_profile() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_fork");
    let exe = build(&dir, &[]);
    let calls = 400_000u64;
    let child = start(&exe, &dir, 2, "fork_finalize", calls, &[("FLIGHT_LOOP_PACE_US", "0"), ("FLIGHT_LOOP_BATCH", "20000")]);
    let out = wait_bounded(child, 120);
    let side = side_text(&dir.join("side"));
    assert!(out.status.success(), "{:?}\n{}\n{side}", out.status, text(&out.stderr));
    assert!(side.contains("CHILD_FINALIZE 0"), "{side}");
    let (got, _) = read_back(&dir.join("out.h5"));
    assert_eq!(got["work"], 2 * calls, "the parent's calls: {got:?}");
    assert!(!got.contains_key("main"), "the child's calls are not in the parent's profile: {got:?}");
    assert_eq!(got["slow"], parse_side(&side)["slow"]);
}

/// Calls from a signal handler that interrupted the library on the same thread (a by-name
/// call allocating or holding the registry lock, the error path formatting its message) are
/// refused with SP_ERR_REENTRANT; they never crash or deadlock, and what was recorded is exact.
#[test]
fn calls_from_a_signal_handler_are_refused_not_crashing() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_reentry");
    let exe = compile(Lang::C, "signal_reentry", &["tests/c/signal_reentry.c"], &dir, &[]);
    let file = dir.join("reentry.h5");
    let mut cmd = Command::new(&exe);
    cmd.arg(&file).arg("3").current_dir(&dir);
    let out = programs::run_with_timeout(no_settings(&mut cmd), Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{:?}\n{stdout}\n{}", out.status, text(&out.stderr));
    let field = |line: &str, key: &str| -> u64 {
        let l = stdout.lines().find(|l| l.starts_with(line)).unwrap_or_else(|| panic!("{line}: {stdout}"));
        l.split_whitespace().find_map(|w| w.strip_prefix(&format!("{key}="))?.parse().ok()).unwrap_or_else(|| panic!("{key}: {l}"))
    };
    assert_eq!(field("HANDLER", "other"), 0, "only SP_OK or SP_ERR_REENTRANT:\n{stdout}");
    assert_eq!(field("MAIN", "refused"), 0, "{stdout}");
    assert!(field("HANDLER", "runs") > 1000, "{stdout}");
    assert!(field("HANDLER", "refused") > 0, "the handler interrupted the library at times:\n{stdout}");
    let (calls, _) = read_back(&file);
    for (name, n) in expectations(&stdout) {
        assert_eq!(calls.get(&name).copied().unwrap_or(0), n, "{name}\n{stdout}");
    }
    let named: u64 = calls.iter().filter(|(k, _)| k.starts_with("name ")).map(|(_, v)| v).sum();
    let want: u64 = stdout.lines().find_map(|l| l.strip_prefix("NAMED ")?.parse().ok()).unwrap();
    assert_eq!(named, want);
}

/// A host that `dlopen`s the library, records 300,000 calls on each of two threads (enough
/// for the call paths of each to be built on a thread of its own at a normal finalize) and
/// `dlclose`s it without `sp_finalize`: inside dlclose the loader holds its lock, so the
/// write must start no thread (one could never end). It returns, with every call written.
#[test]
fn dlclose_with_two_busy_threads_writes_without_starting_threads() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_dlclose_threads");
    let exe = compile_host("dlclose_host", "tests/c/dlclose_host.c", &dir);
    let out = dir.join("out.h5");
    let mut cmd = Command::new(&exe);
    no_settings(&mut cmd).arg(link_dir().join("libscope_profiler.so")).arg(&out).args(["-", "300000", "0"]).current_dir(&dir);
    // Hung for ever before (a scoped thread's start waited for the loader's lock).
    let r = programs::run_with_timeout(&mut cmd, Duration::from_secs(120));
    assert_eq!(r.status.code(), Some(0), "{}", text(&r.stderr));
    assert!(text(&r.stdout).contains("unloaded"), "{}", text(&r.stdout));
    let (calls, _) = read_back(&out);
    assert_eq!(calls.get("thread_work").copied(), Some(600_000), "{calls:?}");
    // The same with every core busy: tests/unload_under_load.rs (a binary of its own, so that
    // its load slows no other test).
}

/// The private directories of unfinished writes in `dir`.
fn tmpdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).filter(|p| p.to_string_lossy().ends_with(".tmpdir")).collect()
}

fn stage_of(file: &Path) -> String {
    str_attr(&hdf5::File::open(file).unwrap().group("metadata").unwrap(), "signal_write_stage")
}

/// The flight loop with 2 threads unpaced (about a million calls, whose write takes far
/// longer than the polling of the tests), sent SIGTERM once every thread records: the child
/// and what it had completed then.
fn unpaced_loop_terminated(exe: &Path, dir: &Path) -> (std::process::Child, BTreeMap<String, u64>) {
    let mut cmd = Command::new(exe);
    cmd.arg(dir.join("out.h5")).arg(dir.join("side")).args(["2", "plain", "0"]).current_dir(dir);
    no_settings(&mut cmd).env("FLIGHT_LOOP_BATCH", "20000");
    let child = programs::spawn(&mut cmd);
    wait_running(&dir.join("side"), &["work0", "work1", "slow"]);
    let before = parse_side(&side_text(&dir.join("side")));
    kill(&child, libc::SIGTERM);
    (child, before)
}

/// The write after a signal is staged: the statistics and metadata are in place (under the
/// profile's name) before any call is written. A SIGKILL after that (a launcher's deadline)
/// keeps that file: its statistics count every call completed before the signal, it says it
/// holds no calls; the calls of this profile (a million: large) follow in a raw dump, which
/// `recover` turns into the profile with every call when it was complete, or whose loss it
/// says. The half-written rest (a private directory) stays until `recover` removes it.
#[test]
fn sigkill_while_the_calls_are_written_keeps_the_statistics() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_staged_sigkill");
    let exe = build(&dir, &[]);
    // Unpaced: about a million calls, whose write takes far longer than the polling below.
    let (child, before) = unpaced_loop_terminated(&exe, &dir);
    let file = dir.join("out.h5");
    poll_closely("the statistics to be in place", || file.exists());
    kill(&child, libc::SIGKILL);
    let out = wait_bounded(child, 60);
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{}", text(&out.stderr));
    assert_eq!(stage_of(&file), "statistics", "killed while the calls were written");
    let h5 = hdf5::File::open(&file).unwrap();
    let meta = h5.group("metadata").unwrap();
    assert_eq!(int_attr(&meta, "calls_kept"), 0);
    let recorded = int_attr(&meta, "calls_recorded") as u64;
    assert!(recorded >= work(&before));
    assert_eq!(int_list_attr(&meta, "calls_kept_per_thread").iter().sum::<i64>(), 0);
    assert_eq!(int_list_attr(&meta, "calls_recorded_per_thread").iter().sum::<i64>() as u64, recorded);
    assert_eq!(str_attr(&meta, "ended_by_signal"), "SIGTERM");
    assert!(int_attr(&meta, "complete_until_ns") >= int_attr(&meta, "signal_time_ns"));
    drop((meta, h5));
    // The PyPI reader sees the statistics of every call complete before the signal.
    check_complete(&file, &before);
    assert!(tmpdirs(&dir).len() <= 1, "at most the interrupted write's private directory: {:?}", tmpdirs(&dir));
    let dumps = spill_dirs(&dir);
    let whole = complete_dump(&dir, None);
    // Recovery removes it once it is abandoned (nobody has a file open in it).
    std::thread::sleep(Duration::from_millis(1200));
    let r = scope_profiler::recover::recover(&file);
    assert!(tmpdirs(&dir).is_empty(), "{:?}: {r:?}", tmpdirs(&dir));
    match (dumps.is_empty(), whole) {
        (true, _) => {
            // Killed before the dump was begun: the file is kept as it is.
            let r = r.unwrap();
            assert!(r.message.contains("none of its calls"), "{}", r.message);
            assert_eq!(stage_of(&file), "statistics", "the file itself is kept");
        }
        (false, Some(_)) => {
            // The dump is complete: every call, in the run's layout.
            let r = r.unwrap_or_else(|e| panic!("{e}"));
            assert!(r.message.contains("nothing dropped"), "{}", r.message);
            check_complete(&file, &before);
            assert_eq!(read_back(&file).0["work"] + read_back(&file).0["slow"], recorded, "{}", r.message);
            assert_eq!(stage_of(&file), "complete", "{}", r.message);
            assert!(spill_dirs(&dir).is_empty());
        }
        (false, None) => {
            // Cut short: what it lacks is said.
            let r = r.unwrap_or_else(|e| panic!("{e}"));
            assert!(r.message.contains("missing") || r.message.contains("dropped"), "{}", r.message);
        }
    }
}

/// A write after a signal cut short by its deadline leaves nothing half-written: the private
/// directory of the file being written is removed, and the line says what was not written.
#[test]
fn a_signal_write_cut_short_by_its_deadline_leaves_nothing_half_written() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_staged_deadline");
    let exe = build(&dir, &[]);
    let mut cmd = Command::new(&exe);
    cmd.arg(dir.join("out.h5")).arg(dir.join("side")).args(["2", "plain", "0"]).current_dir(&dir);
    // 10 ms: far less than collecting a million calls takes.
    no_settings(&mut cmd).env("FLIGHT_LOOP_BATCH", "20000").env("SCOPE_PROFILER_SIGNAL_TIMEOUT", "0.01");
    let child = programs::spawn(&mut cmd);
    wait_running(&dir.join("side"), &["work0", "work1", "slow"]);
    kill(&child, libc::SIGTERM);
    let out = wait_bounded(child, 60);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{stderr}");
    assert!(stderr.contains("the profile was still being written when the time allowed (SCOPE_PROFILER_SIGNAL_TIMEOUT) passed"), "{stderr}");
    assert!(tmpdirs(&dir).is_empty(), "{:?}\n{stderr}", tmpdirs(&dir));
    if dir.join("out.h5").exists() {
        // Named as what it is, even when moved into place just as the time ran out.
        match stage_of(&dir.join("out.h5")).as_str() {
            "statistics" => assert!(stderr.contains("holds the statistics"), "{stderr}"),
            "complete" => assert!(stderr.contains("holds the whole profile"), "{stderr}"),
            other => panic!("stage {other}: {stderr}"),
        }
    } else {
        assert!(stderr.contains("out.h5 was not written"), "{stderr}");
    }
}

/// Open MPI's mpirun with its defaults: SIGTERM to mpirun sends the ranks SIGCONT at once,
/// SIGTERM a second later and SIGKILL a second after that. Every rank's statistics, call paths
/// and metadata are in place within that second (its calls too when they fit); the merge of
/// the rank files (`recover`) shows every call completed before the signal.
///
/// One second is all a rank gets, on a machine shared with other jobs (2 cores here): a run
/// in which a rank got no CPU for that second is tried again, twice at most; the mechanism
/// is broken only if no attempt keeps every rank's statistics.
#[test]
fn mpirun_with_its_default_sigkill_timeout_keeps_every_ranks_statistics() {
    let _alone = MPIRUN_DEADLINE.write().unwrap_or_else(|e| e.into_inner());
    retried(5, mpirun_default_attempt);
}

/// Held for writing by each test of a write within mpirun's second, for reading by every other
/// test of this file: such a test runs alone (the test threads run two tests side by side,
/// which would take the 2 cores, and the disk, from its ranks within that second).
static MPIRUN_DEADLINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// What every test but those within mpirun's second holds while it runs (see `MPIRUN_DEADLINE`).
fn beside_the_deadline_tests() -> std::sync::RwLockReadGuard<'static, ()> {
    MPIRUN_DEADLINE.read().unwrap_or_else(|e| e.into_inner())
}

/// `attempt` run up to `times` times until one succeeds (a rank that got no CPU within the
/// launcher's second is tried again, after a pause that lets a burst of other work pass); the
/// test fails with every attempt's account.
fn retried(times: usize, attempt: impl Fn(usize) -> Result<(), String>) {
    let mut tried = Vec::new();
    for k in 0..times {
        match attempt(k) {
            Ok(()) => return,
            Err(e) => tried.push(e),
        }
        std::thread::sleep(Duration::from_secs(3));
    }
    panic!("no attempt kept every rank's statistics:\n{}", tried.join("\n"));
}

fn mpirun_default_attempt(attempt: usize) -> Result<(), String> {
    let dir = scratch(&format!("kill_mpirun_default{attempt}"));
    let np = 2;
    // Not bound to one core each (Open MPI's default for 2 ranks): on this shared 2-core
    // machine the core of a rank may be busy with other jobs for that second.
    // Verbosity 2: each rank says when its statistics were in place (the account of an
    // attempt that fails).
    let child = start_mpirun(&dir, np, 2, &["--bind-to", "none"], &["FLIGHT_LOOP_BATCH=200", "FLIGHT_LOOP_PACE_US=20000", "FLIGHT_LOOP_VERBOSITY=2"]);
    std::thread::sleep(Duration::from_millis(300));
    let before: Vec<BTreeMap<String, u64>> = (0..np).map(|r| side_of_rank(&dir, r)).collect();
    let signalled = Instant::now();
    kill(&child, libc::SIGTERM);
    let out = wait_bounded(child, 60);
    let took = signalled.elapsed();
    let stderr = text(&out.stderr);
    for r in 0..np {
        let f = dir.join(format!("out.rank{r}.h5"));
        if !f.is_file() {
            // What was there, and how busy the machine was (a rank that got no CPU within
            // the launcher's second is starved, not wrong).
            let listing: Vec<String> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
            let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
            return Err(format!(
                "attempt {attempt}: rank {r} kept nothing (mpirun ended {took:?} after SIGTERM, {}; load average {}; the directory held {listing:?}):\n{stderr}",
                out.status,
                load.trim()
            ));
        }
        let stage = stage_of(&f);
        assert!(stage == "statistics" || stage == "complete", "{stage}");
    }
    // Each rank's file as the PyPI reader sees it.
    let stages: Vec<String> = (0..np).map(|r| stage_of(&dir.join(format!("out.rank{r}.h5")))).collect();
    for (rank, b) in before.iter().enumerate() {
        let v = python_view(&dir.join(format!("out.rank{rank}.h5")));
        let calls = |name: &str| v["regions"][name].as_object().map_or(0, |m| m.values().map(|r| r["calls"].as_u64().unwrap_or(0)).sum::<u64>());
        assert!(calls("work") >= work(b), "rank {rank} ({}): {} < {}", stages[rank], calls("work"), work(b));
        assert!(calls("slow") >= b["slow"], "rank {rank}: {} < {}", calls("slow"), b["slow"]);
    }
    // Recovery combines them (every rank complete, or the calls of those that are not in their
    // raw dumps) and removes what a rank killed while writing its calls left.
    std::thread::sleep(Duration::from_millis(1200));
    let target = dir.join("out.h5");
    let whole = (0..np).all(|r| stages[r] == "complete" || complete_dump(&dir, Some(r)).is_some()) || (stages.iter().all(|s| s == "statistics") && spill_dirs(&dir).is_empty());
    let r = scope_profiler::recover::recover(&target);
    assert!(tmpdirs(&dir).is_empty(), "{:?}: {r:?}", tmpdirs(&dir));
    if whole {
        let r = r.unwrap_or_else(|e| panic!("{e}\n{stderr}"));
        let v = python_view(&target);
        for (rank, b) in before.iter().enumerate() {
            let calls = |name: &str| v["regions"][name][rank.to_string()]["calls"].as_u64().unwrap_or(0);
            assert!(calls("work") >= work(b), "rank {rank}: {} < {}: {}", calls("work"), work(b), r.message);
            assert!(calls("slow") >= b["slow"], "rank {rank}: {} < {}", calls("slow"), b["slow"]);
        }
    } else {
        // A rank that kept only its statistics (killed before its raw dump was complete) and one
        // that kept every call: said, with the ranks, not merged.
        let e = r.err().unwrap_or_default();
        assert!(e.contains("kept only their statistics") || e.contains("dropped"), "{e}\n{stages:?}");
    }
    Ok(())
}

/// A run directory whose removal a kill cut short (renamed `.removing` first, its calls in the
/// profile) is never taken for calls: `sptool recover` removes it and says so.
#[test]
fn a_removal_cut_short_is_cleaned_up_by_recovery() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_removal_cut");
    let gone = dir.join(".out.spill.r1.0123456789abcdef.removing");
    std::fs::create_dir_all(&gone).unwrap();
    std::fs::write(gone.join("calls.spill"), vec![7u8; 4096]).unwrap();
    // Untouched for a second: abandoned.
    std::thread::sleep(Duration::from_millis(1200));
    let r = scope_profiler::recover::recover(&dir.join("out.h5"));
    let said = match &r {
        Ok(r) => r.message.clone(),
        Err(e) => e.clone(),
    };
    assert!(!gone.exists(), "{said}");
    assert!(said.contains(&gone.display().to_string()) && said.contains("whose removal was cut short") && !said.contains("half-written"), "{said}");
}

/// Calls per region name on the call paths of a file: in the aggregate or columnar layout
/// (`/call_paths/`, every rank and thread), or in the regions layout (`rank<N>/call_paths/`).
fn path_calls(h5: &hdf5::File) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let mut add = |names: Vec<hdf5::types::VarLenUnicode>, regions: Vec<u64>, calls: Vec<u64>| {
        for (r, c) in regions.iter().zip(&calls) {
            *out.entry(names[*r as usize].as_str().to_string()).or_insert(0) += c;
        }
    };
    if h5.link_exists("call_paths") {
        let regions: Vec<u32> = h5.dataset("call_paths/regions").unwrap().read_raw().unwrap();
        add(h5.dataset("region_table/names").unwrap().read_raw().unwrap(), regions.into_iter().map(u64::from).collect(), h5.dataset("call_paths/calls").unwrap().read_raw().unwrap());
    }
    for g in h5.member_names().unwrap().iter().filter(|n| n.starts_with("rank") && h5.link_exists(&format!("{n}/call_paths"))) {
        let p = h5.group(&format!("{g}/call_paths")).unwrap();
        let regions: Vec<i64> = p.dataset("region").unwrap().read_raw().unwrap();
        let calls: Vec<i64> = p.dataset("calls").unwrap().read_raw().unwrap();
        add(p.dataset("names").unwrap().read_raw().unwrap(), regions.into_iter().map(|r| r as u64).collect(), calls.into_iter().map(|c| c as u64).collect());
    }
    out
}

/// The raw dump of rank `r`'s calls after a signal (`.out.spill.r<r>.*`; of a single process
/// without a rank), if one was written
/// to its end: its `calls.spill` as long as its header says it was begun for.
fn complete_dump(dir: &Path, rank: Option<usize>) -> Option<PathBuf> {
    let prefix = rank.map_or(".out.spill.".to_string(), |r| format!(".out.spill.r{r}."));
    std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).find(|p| {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        // Complete: the length its header gives is the file's (only the header is read).
        let complete = || -> std::io::Result<bool> {
            use std::io::Read;
            let mut f = std::fs::File::open(p.join("calls.spill"))?;
            let mut head = [0u8; 32];
            f.read_exact(&mut head)?;
            let len = f.metadata()?.len();
            Ok(len >= 40 && u64::from_le_bytes(head[24..32].try_into().unwrap()) == len)
        };
        name.starts_with(&prefix) && complete().unwrap_or(false)
    })
}

/// Spill-format run directories in `dir` (the flight recorder's, or raw dumps of calls).
fn spill_dirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(".out.spill.")).collect()
}

/// A profile too big for the write after a signal as it was (it built the call paths from
/// millions of calls before anything was in place, and lost rank 0 under mpirun's defaults):
/// each rank's statistics and then its call paths are in place within the second mpirun
/// gives (every call completed before the signal counted in both), and its calls follow as a
/// raw dump at memory speed, which
/// `sptool recover` turns into the profile with every rank and every call. Runs with the
/// library's verbosity 2, whose timing line of each rank is what BENCHMARKS.md reports.
#[test]
fn mpirun_default_timeout_keeps_a_big_profiles_statistics_and_its_calls_in_a_raw_dump() {
    let _alone = MPIRUN_DEADLINE.write().unwrap_or_else(|e| e.into_inner());
    retried(2, big_mpirun_attempt);
}

fn big_mpirun_attempt(attempt: usize) -> Result<(), String> {
    let dir = scratch(&format!("kill_mpirun_big{attempt}"));
    let np = 2;
    // Unpaced within batches of 7000: close to a million calls per rank in a second or two,
    // well above the size from which the call paths come after the statistics (32,768 calls in
    // this debug build), more than 2^18 calls on each worker thread (so that the signal
    // watcher builds one thread's call paths while the writer builds the other's), and few
    // enough for this debug build to build them within the second (the release library's
    // figures for 30-50 M calls: BENCHMARKS.md section 21). "work" on two paths, so that the
    // call paths are swept from the calls (on one path they come from the statistics at once).
    let child = start_mpirun(&dir, np, 2, &["--bind-to", "none"], &["FLIGHT_LOOP_BATCH=7000", "FLIGHT_LOOP_PACE_US=40000", "FLIGHT_LOOP_VERBOSITY=2", "FLIGHT_LOOP_TWO_PATHS=1"]);
    // About 170,000 calls a second on each worker (a batch, its side file's fsync, the pace):
    // 1.5 s and the second the ranks take to see the signal put each well above 2^18.
    std::thread::sleep(Duration::from_millis(1500));
    let before: Vec<BTreeMap<String, u64>> = (0..np).map(|r| side_of_rank(&dir, r)).collect();
    kill(&child, libc::SIGTERM);
    let out = wait_bounded(child, 60);
    let stderr = text(&out.stderr);
    let mut stages = Vec::new();
    for (r, b) in before.iter().enumerate() {
        let f = dir.join(format!("out.rank{r}.h5"));
        if !f.is_file() {
            return Err(format!("attempt {attempt}: rank {r} kept nothing:\n{stderr}"));
        }
        let stage = stage_of(&f);
        assert!(stage == "statistics" || stage == "complete", "{stage}");
        let h5 = hdf5::File::open(&f).unwrap();
        let meta = h5.group("metadata").unwrap();
        let recorded = int_attr(&meta, "calls_recorded") as u64;
        assert!(recorded >= work(b) + b["slow"], "rank {r}: {recorded} calls recorded, {} completed before the signal", work(b) + b["slow"]);
        assert!(recorded as usize > scope_profiler::route::PATHS_LATER_FROM_CALLS, "rank {r}: {recorded} calls: not a large profile");
        assert_eq!(int_list_attr(&meta, "calls_recorded_per_thread").iter().sum::<i64>() as u64, recorded, "rank {r}");
        // The call paths come before any call: in place within the launcher's second, and
        // counting every call completed before the signal.
        if int_attr(&meta, "call_paths_kept") != 1 {
            return Err(format!("attempt {attempt}: rank {r} ({stage}) kept its statistics but not its call paths:\n{stderr}"));
        }
        let on_paths = path_calls(&h5);
        assert!(on_paths.get("work").copied().unwrap_or(0) >= work(b), "rank {r}: {on_paths:?} on the call paths, {} work calls completed before the signal", work(b));
        assert!(on_paths.get("slow").copied().unwrap_or(0) >= b["slow"], "rank {r}: {on_paths:?}");
        drop((meta, h5));
        // The statistics as the PyPI reader sees them count every call completed before the signal.
        let v = python_view(&f);
        let calls = |name: &str| v["regions"][name].as_object().map_or(0, |m| m.values().map(|x| x["calls"].as_u64().unwrap_or(0)).sum::<u64>());
        assert!(calls("work") >= work(b), "rank {r} ({stage}): {} < {}\n{stderr}", calls("work"), work(b));
        assert!(calls("slow") >= b["slow"], "rank {r}: {} < {}", calls("slow"), b["slow"]);
        stages.push(stage);
    }
    // A rank whose write finished removed its raw dump (renamed first: a kill during the
    // removal leaves a `.removing` directory, which recovery removes). A rank killed between
    // the rename of its complete file into place and the removal of its dump (mpirun's SIGKILL
    // a second after the SIGTERM, on a busy machine) leaves both: its last line is missing,
    // and recovery below uses the dump, with the same calls.
    let finished = stderr.lines().filter(|l| l.contains("profile in its layout after")).count();
    for (r, stage) in stages.iter().enumerate() {
        let live = |p: &PathBuf| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with(&format!(".out.spill.r{r}.")) && !n.ends_with(".removing")
        };
        if stage == "complete" && spill_dirs(&dir).iter().any(live) {
            assert!(finished < np, "rank {r} is complete and every rank finished its write: its dump is removed: {:?}\n{stderr}", spill_dirs(&dir));
        }
    }
    let whole = (0..np).all(|r| stages[r] == "complete" || complete_dump(&dir, Some(r)).is_some());
    // Each rank built its call paths on two threads: the writer and the watcher.
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("with the call paths (built in")).collect();
    assert_eq!(lines.len(), np, "{stderr}");
    if let Some(l) = lines.iter().find(|l| !l.contains("swept from their calls on 2 thread(s)")) {
        return Err(format!("attempt {attempt}: call paths not built on two threads: {l}"));
    }
    // `sptool recover`, as the line of rank 0 says.
    let line = stderr.lines().find(|l| l.contains("each of the 2 ranks writes its own file")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.contains("sptool recover ") && line.contains(".out.spill."), "{line}");
    std::thread::sleep(Duration::from_millis(1200));
    let rec = run(Command::new(lib_dir().join("sptool")).arg("recover").arg(dir.join("out.h5")).current_dir(&dir));
    let said = format!("{}{}", text(&rec.stdout), text(&rec.stderr));
    assert!(!spill_dirs(&dir).iter().any(|p| p.to_string_lossy().ends_with(".removing")), "recovery removes what a cut removal left: {:?}", spill_dirs(&dir));
    if !whole {
        // Cut short: what recovery could not account for is said.
        assert!(!rec.status.success() || said.contains("dropped") || said.contains("missing"), "{said}");
        return Ok(());
    }
    assert!(rec.status.success(), "{said}\n{stages:?}");
    let v = python_view(&dir.join("out.h5"));
    for (r, b) in before.iter().enumerate() {
        let calls = |name: &str| v["regions"][name][r.to_string()]["calls"].as_u64().unwrap_or(0);
        assert!(calls("work") >= work(b), "rank {r}: {} < {}: {said}", calls("work"), work(b));
        assert!(calls("slow") >= b["slow"], "rank {r}: {} < {}", calls("slow"), b["slow"]);
    }
    assert!(spill_dirs(&dir).is_empty(), "recovery removes the dumps it used: {:?}", spill_dirs(&dir));
    Ok(())
}

/// A process killed in the instant between the rename of its complete file into place and
/// the removal of its raw dump leaves both (made here by copying the dump while the process is
/// stopped, and putting the copy back once it removed its own): `recover` sees that the file is
/// that run's whole profile, leaves it as it is, and removes the dump, saying so.
#[test]
fn a_dump_left_beside_its_runs_complete_file_is_removed_by_recover() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_dump_beside_complete");
    let exe = build(&dir, &[]);
    let (child, _) = unpaced_loop_terminated(&exe, &dir);
    poll_closely("the raw dump to be complete", || complete_dump(&dir, None).is_some());
    kill(&child, libc::SIGSTOP);
    let dump = complete_dump(&dir, None).unwrap();
    let aside = dir.join("dump-copy");
    let cp = run(Command::new("cp").arg("-a").arg(&dump).arg(&aside));
    let other = dir.join("dump-other");
    let cp2 = run(Command::new("cp").arg("-a").arg(&dump).arg(&other));
    kill(&child, libc::SIGCONT);
    assert!(cp.status.success() && cp2.status.success(), "cp -a of the dump: {}{}", text(&cp.stderr), text(&cp2.stderr));
    let out = wait_bounded(child, 120);
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{}", text(&out.stderr));
    let file = dir.join("out.h5");
    assert_eq!(stage_of(&file), "complete", "{}", text(&out.stderr));
    assert!(spill_dirs(&dir).is_empty(), "the write removed its dump: {:?}", spill_dirs(&dir));
    std::fs::rename(&aside, &dump).unwrap();
    let before = std::fs::read(&file).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let r = scope_profiler::recover::recover(&file).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.message.starts_with("nothing to recover") && r.message.contains("complete profile of the run"), "{}", r.message);
    assert!(r.written.is_none());
    assert!(spill_dirs(&dir).is_empty(), "recover removed the dump: {:?}", spill_dirs(&dir));
    assert!(std::fs::read(&file).unwrap() == before, "the profile is left as it was");
    // The dump of another run (another setup time) beside a complete profile is refused, as
    // before: its calls are not in that file.
    let meta_path = other.join("meta.json");
    let mut meta: serde_json::Value = serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    meta["started"] = serde_json::Value::String("2001-01-01T00:00:00.000000+00:00".into());
    std::fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();
    std::fs::rename(&other, &dump).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let e = scope_profiler::recover::recover(&file).err().unwrap_or_else(|| panic!("another run's dump beside a complete profile was taken"));
    assert!(e.contains("refusing to overwrite the complete profile"), "{e}");
    assert_eq!(spill_dirs(&dir).len(), 1, "another run's dump stays where it is");
    assert!(std::fs::read(&file).unwrap() == before);
}

/// A raw dump of the calls cut short (here: its file truncated to half, as a SIGKILL during the
/// dump or a full disk would leave it) is no silent loss: recovery writes the calls it holds,
/// says what it lacks, marks the file `signal_write_stage` "calls" with `calls_kept` below
/// `calls_recorded`, and keeps the first-stage file (the statistics of every recorded call)
/// beside it instead of replacing it.
#[test]
fn a_raw_dump_cut_short_is_recovered_with_its_loss_said() {
    let _beside = beside_the_deadline_tests();
    let dir = scratch("kill_dump_cut");
    let exe = build(&dir, &[]);
    let (child, before) = unpaced_loop_terminated(&exe, &dir);
    // Once the dump is complete (after the call paths, before the layout, which takes far longer).
    poll_closely("the raw dump to be complete", || complete_dump(&dir, None).is_some());
    kill(&child, libc::SIGKILL);
    let out = wait_bounded(child, 60);
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{}", text(&out.stderr));
    let file = dir.join("out.h5");
    assert_eq!(stage_of(&file), "statistics");
    let recorded = int_attr(&hdf5::File::open(&file).unwrap().group("metadata").unwrap(), "calls_recorded");
    let dump = complete_dump(&dir, None).unwrap();
    let calls = dump.join("calls.spill");
    let len = std::fs::metadata(&calls).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&calls).unwrap().set_len(len / 2).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let r = scope_profiler::recover::recover(&file).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.message.contains("missing") && !r.message.contains("nothing dropped"), "{}", r.message);
    let aside = dir.join("out.statistics.h5");
    assert!(r.message.contains(&aside.display().to_string()), "{}", r.message);
    // The first stage's file, kept: every call completed before the signal in its statistics.
    assert_eq!(stage_of(&aside), "statistics");
    check_complete(&aside, &before);
    // The recovered file: what the dump held, said.
    let h5 = hdf5::File::open(&file).unwrap();
    let meta = h5.group("metadata").unwrap();
    assert_eq!(str_attr(&meta, "signal_write_stage"), "calls");
    assert_eq!(int_attr(&meta, "calls_recorded"), recorded);
    let kept = int_attr(&meta, "calls_kept");
    assert!(kept > 0 && kept < recorded, "{kept} of {recorded}: {}", r.message);
    assert_eq!(int_list_attr(&meta, "calls_kept_per_thread").iter().sum::<i64>(), kept);
    drop((meta, h5));
    let (got, _) = read_back(&file);
    assert_eq!(got.values().sum::<u64>() as i64, kept, "{got:?}");
}

/// A test program that hangs is killed at the test's timeout, and the failure says where it
/// hung: each thread's state and, with gdb, its stack (a hang seen once in CI could not be
/// told apart from a slow machine without them).
#[test]
fn a_hung_program_is_reported_with_its_stacks() {
    let _beside = beside_the_deadline_tests();
    let mut cmd = Command::new("sleep");
    cmd.arg("300");
    let started = Instant::now();
    let hung = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| programs::run_with_timeout(&mut cmd, Duration::from_secs(2))));
    assert!(hung.is_err(), "a program past its timeout fails the test");
    assert!(started.elapsed() < Duration::from_secs(120), "killed at the timeout, not waited for");
    let report = programs::report();
    assert!(report.contains("killed (SIGKILL) after the test's timeout of 2 s"), "{report}");
    assert!(report.contains("(sleep): state S, waiting in"), "each thread's state and wait channel:\n{report}");
    assert!(report.contains("its threads' stacks (gdb):") && report.contains("#0 "), "gdb's backtrace of the hung program:\n{report}");
}
