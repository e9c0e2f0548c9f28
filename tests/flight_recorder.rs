//! The flight recorder for real: C programs with pthreads recording in a loop are killed with
//! SIGTERM, SIGINT, SIGKILL or a SIGSEGV of their own at a random moment; the profile is then
//! written (at the signal, or by `sptool recover`) and read back with the PyPI reader.
//! Each program appends "<thread> <completed calls>" to a side file (fsync'd) after every
//! batch: every call it reports as completed before the signal must be in the file.

mod support;
use support::*;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn build(dir: &Path) -> PathBuf {
    compile(Lang::C, "flight_loop", &["tests/c/flight_loop.c"], dir, &["-lpthread"])
}

fn start(exe: &Path, dir: &Path, threads: usize, mode: &str, calls: u64, env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(exe);
    cmd.arg(dir.join("out.h5")).arg(dir.join("side")).arg(threads.to_string()).arg(mode).arg(calls.to_string()).current_dir(dir);
    cmd.env("SCOPE_PROFILER_SPILL", "1").env("SCOPE_PROFILER_SIGNAL_TIMEOUT", "120").env_remove("SCOPE_PROFILER_SPILL_DIR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    programs::spawn(&mut cmd)
}

/// The highest count each thread reported so far, and whether `marker` lines appeared.
fn side(dir: &Path) -> (BTreeMap<String, u64>, String) {
    let text = std::fs::read_to_string(dir.join("side")).unwrap_or_default();
    let mut m = BTreeMap::new();
    for l in text.lines() {
        if let Some((k, v)) = l.split_once(' ') {
            if let Ok(n) = v.parse::<u64>() {
                let e = m.entry(k.to_string()).or_insert(0);
                *e = (*e).max(n);
            }
        }
    }
    (m, text)
}

/// Wait until every worker and the slow thread reported, then a random 0.2-1.2 s more.
/// Poll `done` every 20 ms; a test whose program died or stalled fails after 60 s instead of
/// waiting forever.
fn poll_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "gave up after 60 s waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_running(dir: &Path, threads: usize) {
    poll_until("the program's threads to record", || {
        let (m, _) = side(dir);
        m.keys().filter(|k| k.starts_with("work")).count() == threads && m.contains_key("slow")
    });
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos() as u64;
    std::thread::sleep(Duration::from_millis(200 + nanos % 1000));
}

/// Start the test program recording on `threads` threads (mode `plain`), wait until every
/// thread has recorded, and kill it with SIGKILL: its calls are left in its spill file.
fn kill_plain_run(exe: &Path, dir: &Path, threads: usize) {
    let child = start(exe, dir, threads, "plain", 0, &[]);
    wait_running(dir, threads);
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    wait(child);
}

fn wait(child: Child) -> std::process::Output {
    programs::wait(child)
}

/// Calls per region (summed over ranks) as the PyPI reader sees them, and the metadata.
fn read_back(file: &Path) -> (BTreeMap<String, u64>, serde_json::Value) {
    let v = python_view(file);
    let mut out = BTreeMap::new();
    for (name, ranks) in v["regions"].as_object().unwrap() {
        let n: u64 = ranks.as_object().unwrap().values().map(|r| r["calls"].as_u64().unwrap()).sum();
        out.insert(name.clone(), n);
    }
    (out, v["metadata"].clone())
}

fn worker_total(m: &BTreeMap<String, u64>) -> u64 {
    m.iter().filter(|(k, _)| k.starts_with("work")).map(|(_, v)| v).sum()
}

fn spill_dirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).filter(|p| {
        let n = p.file_name().unwrap().to_string_lossy().into_owned();
        n.starts_with('.') && n.contains(".spill.")
    })
    .collect()
}

/// Every call reported before the signal is in the file.
fn check_counts(file: &Path, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let (calls, _) = read_back(file);
    assert!(calls["work"] >= worker_total(before), "work: {} in the file, {} completed before the signal ({before:?})", calls["work"], worker_total(before));
    assert!(calls["slow"] >= before["slow"], "slow: {} in the file, {} completed before the signal", calls["slow"], before["slow"]);
    calls
}

fn caught_signal_writes_profile(name: &str, sig: i32) {
    let dir = scratch(name);
    let exe = build(&dir);
    let child = start(&exe, &dir, 2, "plain", 0, &[]);
    wait_running(&dir, 2);
    let (before, _) = side(&dir);
    unsafe { libc::kill(child.id() as i32, sig) };
    let out = wait(child);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.signal(), Some(sig), "the default action must end the process: {:?}\n{stderr}", out.status);
    assert!(stderr.contains(&format!("{}: profile written to", if sig == libc::SIGTERM { "SIGTERM" } else { "SIGINT" })), "{stderr}");
    check_counts(&dir.join("out.h5"), &before);
    assert!(spill_dirs(&dir).is_empty(), "the helper removes the spill data it wrote out");
}

#[test]
fn sigterm_writes_the_profile_and_keeps_the_exit_status() {
    caught_signal_writes_profile("flight_term", libc::SIGTERM);
}

#[test]
fn sigint_writes_the_profile_and_keeps_the_exit_status() {
    caught_signal_writes_profile("flight_int", libc::SIGINT);
}

fn killed_then_recovered(name: &str, mode: &str, calls: u64, sig: i32) {
    killed_then_recovered_with(name, mode, calls, sig, false)
}

fn killed_then_recovered_with(name: &str, mode: &str, calls: u64, sig: i32, openmp: bool) {
    let dir = scratch(name);
    let exe = if openmp {
        compile(Lang::C, "flight_loop", &["tests/c/flight_loop.c"], &dir, &["-fopenmp", "-lpthread"])
    } else {
        build(&dir)
    };
    let child = start(&exe, &dir, 3, mode, calls, &[]);
    if sig != libc::SIGSEGV {
        wait_running(&dir, 3);
        unsafe { libc::kill(child.id() as i32, sig) };
    }
    let out = wait(child);
    assert_eq!(out.status.signal(), Some(sig), "{:?}\n{}", out.status, text(&out.stderr));
    // After death nothing more is reported: the side file is what the program completed.
    let (completed, _) = side(&dir);
    let file = dir.join("out.h5");
    assert!(!file.exists());
    assert_eq!(spill_dirs(&dir).len(), 1);
    let sptool = lib_dir().join("sptool");
    assert!(sptool.exists(), "build the workspace first (sptool)");
    let r = run(Command::new(&sptool).arg("recover").arg(&file));
    let said = text(&r.stdout);
    assert!(r.status.success(), "{said}{}", text(&r.stderr));
    assert!(said.starts_with("recovered ") && said.contains("nothing dropped") && said.lines().count() == 1, "{said}");
    let got = check_counts(&file, &completed);
    let (_, meta) = read_back(&file);
    assert!(meta["recovered"].as_str().unwrap().contains(&format!("{} calls", got.values().sum::<u64>())), "{meta}");
    assert!(spill_dirs(&dir).is_empty());
    // Idempotent: a second run says there is nothing left to do and changes nothing.
    let r = run(Command::new(&sptool).arg("recover").arg(&file));
    assert!(r.status.success() && text(&r.stdout).starts_with("nothing to recover"), "{:?}\n{}{}", r.status, text(&r.stdout), text(&r.stderr));
    assert_eq!(read_back(&file).0, got);
}

#[test]
fn sigkill_then_recover_keeps_every_completed_call() {
    killed_then_recovered("flight_kill", "plain", 0, libc::SIGKILL);
}

#[test]
fn sigkill_of_an_openmp_program_then_recover() {
    killed_then_recovered_with("flight_kill_omp", "plain", 0, libc::SIGKILL, true);
}

#[test]
fn segfault_of_the_host_then_recover() {
    killed_then_recovered("flight_segv", "segv", 200_000, libc::SIGSEGV);
}

#[test]
fn host_sigterm_handler_still_runs_after_the_profile_is_written() {
    let dir = scratch("flight_host_handler");
    let exe = build(&dir);
    let child = start(&exe, &dir, 2, "host_handler", 0, &[]);
    wait_running(&dir, 2);
    let (before, _) = side(&dir);
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = wait(child);
    assert_eq!(out.status.code(), Some(42), "the host's handler decides the exit: {:?}", out.status);
    assert!(side(&dir).1.contains("HOST_HANDLER_RAN"));
    check_counts(&dir.join("out.h5"), &before);
}

/// A termination signal after `sp_finalize` (a time limit arriving late) ends the process as
/// it would without us: the written profile stays as it is, no recovery is attempted on the
/// finished run, nothing is left behind.
#[test]
fn sigterm_after_finalize_just_ends_the_process() {
    let dir = scratch("flight_term_after_finalize");
    let exe = build(&dir);
    let out = wait(start(&exe, &dir, 1, "term_after_finalize", 60_000, &[]));
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("recover") && !stderr.contains("NOT written"), "{stderr}");
    let (calls, _) = read_back(&dir.join("out.h5"));
    assert_eq!(calls["work"], 60_000);
    assert!(spill_dirs(&dir).is_empty());
}

#[test]
fn host_that_ignores_sigterm_keeps_running() {
    let dir = scratch("flight_ignore");
    let exe = build(&dir);
    let child = start(&exe, &dir, 1, "ignore_term", 0, &[]);
    wait_running(&dir, 1);
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    // Still recording after the ignored signal: the counts keep growing.
    let (after_term, _) = side(&dir);
    poll_until("recording to go on after the ignored SIGTERM", || worker_total(&side(&dir).0) > worker_total(&after_term) + 100_000);
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let out = wait(child);
    assert_eq!(out.status.signal(), Some(libc::SIGKILL));
    assert!(!dir.join("out.h5").exists(), "no profile written for an ignored signal");
    let r = scope_profiler::recover::recover(&dir.join("out.h5")).unwrap();
    assert!(r.message.starts_with("recovered"), "{}", r.message);
    check_counts(&dir.join("out.h5"), &side(&dir).0);
}

#[test]
fn clean_run_leaves_exactly_its_calls_and_no_spill() {
    let dir = scratch("flight_clean");
    let exe = build(&dir);
    let out = wait(start(&exe, &dir, 2, "plain", 300_000, &[]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (calls, meta) = read_back(&dir.join("out.h5"));
    assert_eq!(calls["work"], 600_000);
    assert_eq!(calls["slow"], side(&dir).0["slow"]);
    assert!(meta.get("recovered").is_none());
    assert!(spill_dirs(&dir).is_empty(), "a clean run leaves no spill data");
    // A complete profile is never overwritten by recover.
    assert!(scope_profiler::recover::recover(&dir.join("out.h5")).unwrap().message.starts_with("nothing to recover"));
}

#[test]
fn spill_dir_setting_and_private_files() {
    let dir = scratch("flight_spill_dir");
    let spill = dir.join("node_local");
    std::fs::create_dir(&spill).unwrap();
    let exe = build(&dir);
    let child = start(&exe, &dir, 1, "plain", 0, &[("SCOPE_PROFILER_SPILL_DIR", spill.to_str().unwrap())]);
    wait_running(&dir, 1);
    let runs: Vec<_> = std::fs::read_dir(&spill).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&runs[0]).unwrap().permissions().mode() & 0o777, 0o700);
    for f in std::fs::read_dir(&runs[0]).unwrap().flatten() {
        assert_eq!(f.metadata().unwrap().permissions().mode() & 0o777, 0o600, "{:?}", f.path());
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    wait(child);
    let (completed, _) = side(&dir);
    // recover looks in $SCOPE_PROFILER_SPILL_DIR too. Set for that process alone: changing this
    // test process's environment would leak into the commands other tests start meanwhile.
    let r = run(Command::new(lib_dir().join("sptool")).arg("recover").arg(dir.join("out.h5")).env("SCOPE_PROFILER_SPILL_DIR", &spill));
    assert!(r.status.success() && text(&r.stdout).starts_with("recovered"), "{}{}", text(&r.stdout), text(&r.stderr));
    check_counts(&dir.join("out.h5"), &completed);
}

#[test]
fn torn_spill_data_keeps_every_complete_call() {
    let dir = scratch("flight_torn");
    let exe = build(&dir);
    kill_plain_run(&exe, &dir, 1);
    let run = spill_dirs(&dir).pop().unwrap();
    let calls = run.join("calls.spill");
    let full = scope_profiler::recover::read_run(&run).unwrap().calls;
    // Cut the file in the middle of the published units of a chunk (inside a unit): the calls
    // before the cut survive, the cut-off units are reported.
    let bytes = std::fs::read(&calls).unwrap();
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let mut off = 4096;
    let cut = loop {
        let (fill, cap) = (word(off + 8) as usize, (word(off + 16) >> 32) as usize);
        assert!(cap > 0, "no chunk with 200 calls found");
        // The fill count is in 4-byte units.
        if fill >= 200 {
            break off + 32 + 4 * 150 + 2;
        }
        off += cap * 8;
    };
    std::fs::OpenOptions::new().write(true).open(&calls).unwrap().set_len(cut as u64).unwrap();
    let r = scope_profiler::recover::recover(&dir.join("out.h5")).unwrap();
    let (got, _) = read_back(&dir.join("out.h5"));
    let total: u64 = got.values().sum();
    assert!(total < full && total > 0, "{total} of {full}: {}", r.message);
    assert!(r.message.contains("recovered") && r.message.contains("dropped") && !r.message.contains("nothing dropped"), "{}", r.message);
}

/// A spill file of another format version (written by another version of the library) is not
/// read as this version's calls: recovery says which format it is and what to do.
#[test]
fn a_spill_of_another_format_version_is_named_not_misread() {
    let dir = scratch("flight_other_version");
    let exe = build(&dir);
    kill_plain_run(&exe, &dir, 1);
    let run = spill_dirs(&dir).pop().unwrap();
    assert!(scope_profiler::recover::read_run(&run).unwrap().calls > 0);
    // The 8-byte call format of format 2.
    let calls = run.join("calls.spill");
    let mut bytes = std::fs::read(&calls).unwrap();
    assert_eq!(&bytes[..8], scope_profiler::spill::FILE_MAGIC);
    bytes[7] = b'2';
    std::fs::write(&calls, &bytes).unwrap();
    let e = scope_profiler::recover::read_run(&run).err().expect("a spill of format 2 must not be read");
    assert!(e.contains("another version of scope_profiler (format 2, this one reads 3)"), "{e}");
}

/// A spill file cut at a chunk boundary (a truncated copy: every chunk left is whole) or with
/// a hole of zeros where chunks were: recovery counts the chunks the file recorded handing
/// out that are not there, and never says "nothing dropped" while calls are missing.
#[test]
fn spill_cut_at_a_chunk_boundary_counts_what_is_missing() {
    let dir = scratch("flight_cut_chunks");
    let exe = build(&dir);
    let child = start(&exe, &dir, 2, "plain", 0, &[]);
    wait_running(&dir, 2);
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    wait(child);
    let run = spill_dirs(&dir).pop().unwrap();
    let calls = run.join("calls.spill");
    let whole = scope_profiler::recover::read_run(&run).unwrap();
    assert_eq!((whole.missing_chunks, whole.missing_bytes), (0, 0), "an intact file lacks nothing");
    let bytes = std::fs::read(&calls).unwrap();
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    // The chunk boundaries (each chunk's capacity in words is in its header).
    let mut starts = Vec::new();
    let mut off = 4096;
    while off + 32 <= bytes.len() {
        let cap = (word(off + 16) >> 32) as usize;
        if cap == 0 {
            break;
        }
        starts.push(off);
        off += cap * 8;
    }
    assert!(starts.len() >= 4, "too few chunks to cut: {}", starts.len());
    let cut = starts[starts.len() / 2];
    // The chunks the file recorded handing out (its header), of which those before the cut stay;
    // the SIGKILL may have come after the last was handed out and before its header was written.
    let handed = word(scope_profiler::spill::ALLOCATED_AT as usize + 8);
    assert!(handed as usize >= starts.len() && handed as usize <= starts.len() + 2, "{handed} chunks handed out, {} with a header", starts.len());
    let lost = handed - (starts.len() / 2) as u64;
    std::fs::OpenOptions::new().write(true).open(&calls).unwrap().set_len(cut as u64).unwrap();
    let cut_run = scope_profiler::recover::read_run(&run).unwrap();
    assert_eq!(cut_run.missing_chunks, lost, "chunks past the cut");
    assert!(cut_run.missing_bytes > 0 && cut_run.calls < whole.calls && cut_run.calls > 0);
    let r = scope_profiler::recover::recover(&dir.join("out.h5")).unwrap();
    assert!(!r.message.contains("nothing dropped"), "{}", r.message);
    assert!(r.message.contains(&format!("{lost} chunk(s) of calls that the spill data recorded but that are missing")), "{}", r.message);
    assert!(r.message.contains("shorter than it was written"), "{}", r.message);
    let (got, meta) = read_back(&dir.join("out.h5"));
    assert_eq!(got.values().sum::<u64>(), cut_run.calls, "{}", r.message);
    assert!(meta["recovered"].as_str().is_some_and(|m| m.contains("missing or unreadable")), "the file says it too: {meta}");
}

/// The streamed finalize writes exactly what the in-memory one writes: the same C program
/// (threads, nesting, recursion, misuse), once per sink; every column must be identical up
/// to the times themselves, which differ between runs: counts, threads, open and dropped calls.
#[test]
fn streamed_finalize_writes_what_the_memory_sink_writes() {
    let dir = scratch("flight_core_usage");
    let exe = compile(Lang::C, "core_usage", &["tests/c/core_usage.c"], &dir, &["-lpthread"]);
    let mut views = Vec::new();
    for spill in ["0", "1"] {
        let file = dir.join(format!("core{spill}.h5"));
        let out = run(Command::new(&exe).arg(&file).current_dir(&dir).env("SCOPE_PROFILER_SPILL", spill));
        let stdout = text(&out.stdout);
        assert!(out.status.success() && stdout.contains("DONE failures=0"), "{stdout}{}", text(&out.stderr));
        let expected = expectations(&stdout);
        let h5 = hdf5::File::open(&file).unwrap();
        let regions = read_regions(&h5, 0);
        for (name, &calls) in &expected {
            assert_eq!(regions[name].starts.len() as u64, calls, "{name} with SCOPE_PROFILER_SPILL={spill}");
        }
        assert_eq!(int_attr(&h5.group("rank0").unwrap(), "num_threads"), 5);
        let shape: Vec<(String, usize, Vec<i64>, i64, i64)> = regions
            .values()
            .map(|r| {
                let mut t = r.thread_ids.clone();
                t.sort();
                (r.tag.clone(), r.starts.len(), t, r.open_calls, r.dropped_calls)
            })
            .collect();
        let calls: BTreeMap<String, u64> = read_back(&file).0;
        views.push((shape, calls));
        assert!(spill_dirs(&dir).is_empty());
    }
    assert_eq!(views[0], views[1]);
}

/// Under mpirun every rank spills into its own run directory; SIGTERM to mpirun (which
/// forwards it, then kills a second later) leaves each rank's own file where the rank finished
/// writing it, its spill directory where it did not, and one line saying how to combine them;
/// one `sptool recover` writes one file with every rank.
#[test]
fn mpirun_sigterm_then_recover_combines_the_ranks() {
    let dir = scratch("flight_mpirun");
    let exe = build(&dir);
    let np = 3;
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "-np", &np.to_string()])
        .args(["-x", "SCOPE_PROFILER_SPILL=1"])
        .arg(&exe)
        .arg(dir.join("out.h5"))
        .arg(dir.join("side"))
        .args(["1", "plain", "0"])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = programs::spawn(&mut cmd);
    let side_of = |r: usize| {
        let text = std::fs::read_to_string(dir.join(format!("side.r{r}"))).unwrap_or_default();
        let mut m: BTreeMap<String, u64> = BTreeMap::new();
        for l in text.lines() {
            if let Some((k, v)) = l.split_once(' ') {
                if let Ok(n) = v.parse::<u64>() {
                    let e = m.entry(k.to_string()).or_insert(0);
                    *e = (*e).max(n);
                }
            }
        }
        m
    };
    while !(0..np).all(|r| side_of(r).contains_key("work0") && side_of(r).contains_key("slow")) {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            panic!("mpirun ended before the ranks ran: {status:?}\n{err}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let before: Vec<BTreeMap<String, u64>> = (0..np).map(side_of).collect();
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = wait(child);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert_eq!(stderr.matches("MPI cannot gather after a signal").count(), 1, "one line for the job:\n{stderr}");
    assert!(stderr.contains("scope_profiler_merge -o") && stderr.contains("sptool recover"), "{stderr}");
    let spilled = spill_dirs(&dir);
    for r in 0..np {
        let own = dir.join(format!("out.rank{r}.h5")).exists();
        let spill = spilled.iter().any(|d| d.file_name().unwrap().to_string_lossy().contains(&format!(".spill.r{r}.")));
        assert!(own || spill, "rank {r} left neither its file nor its spill data: {spilled:?}\n{stderr}");
    }
    let sptool = lib_dir().join("sptool");
    let r = run(Command::new(&sptool).arg("recover").arg(dir.join("out.h5")));
    let said = text(&r.stdout);
    assert!(r.status.success() && said.contains(&format!("{np} rank(s)")), "{said}{}", text(&r.stderr));
    let v = python_view(&dir.join("out.h5"));
    assert_eq!(v["num_ranks"].as_u64().unwrap(), np as u64, "{v}");
    for (rank, b) in before.iter().enumerate() {
        let calls = |name: &str| v["regions"][name][rank.to_string()]["calls"].as_u64().unwrap_or(0);
        assert!(calls("work") >= b["work0"], "rank {rank}: {} < {}", calls("work"), b["work0"]);
        assert!(calls("slow") >= b["slow"], "rank {rank}: {} < {}", calls("slow"), b["slow"]);
    }
    assert_eq!(v["metadata"]["mpi_size"].as_u64().unwrap(), np as u64);
    assert!(spill_dirs(&dir).is_empty());
}

/// A full disk while spilling: recording goes on in memory with one warning, nothing is lost
/// at a normal end. The full disk is real: a 256 KiB tmpfs mounted for the test (needs root,
/// which the test machines have).
#[test]
fn disk_full_while_spilling_keeps_recording_in_memory() {
    let dir = scratch("flight_disk_full");
    let small = dir.join("small_fs");
    std::fs::create_dir(&small).unwrap();
    let m = run(Command::new("mount").args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"]).arg(&small));
    assert!(m.status.success(), "cannot mount a small tmpfs (root needed): {}", text(&m.stderr));
    let exe = build(&dir);
    let out = wait(start(&exe, &dir, 2, "plain", 300_000, &[("SCOPE_PROFILER_SPILL_DIR", small.to_str().unwrap())]));
    let leftover: Vec<_> = std::fs::read_dir(&small).unwrap().flatten().map(|e| e.path()).collect();
    let _ = Command::new("umount").arg(&small).status();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr.matches("recording goes on in memory").count(), 1, "warned once: {stderr}");
    let (calls, _) = read_back(&dir.join("out.h5"));
    assert_eq!(calls["work"], 600_000);
    assert_eq!(calls["slow"], side(&dir).0["slow"]);
    assert!(leftover.is_empty(), "{leftover:?}");
}

/// Two runs of one program, both killed, left two spill directories for one target: they are
/// two processes, not two ranks. The newer is recovered as the profile; the older stays where it
/// is, said so, and is recovered once that profile is moved away.
#[test]
fn two_killed_runs_are_not_two_ranks() {
    let dir = scratch("flight_two_runs");
    let exe = build(&dir);
    let mut noted = Vec::new();
    for run in 0..2 {
        let _ = std::fs::remove_file(dir.join("side"));
        kill_plain_run(&exe, &dir, 1);
        noted.push(side(&dir).0["work0"]);
        if run == 0 {
            std::thread::sleep(Duration::from_millis(1100)); // a later start time
        }
    }
    assert_eq!(spill_dirs(&dir).len(), 2);
    let file = dir.join("out.h5");
    let r = scope_profiler::recover::recover(&file).unwrap();
    assert!(r.message.contains("of 1 rank(s)") && r.message.contains("left the spill data of 1 older run"), "{}", r.message);
    let (calls, _) = read_back(&file);
    assert_eq!(python_view(&file)["num_ranks"], 1);
    assert!(calls["work"] >= noted[1], "the newer run: {} of {noted:?}", calls["work"]);
    assert_eq!(spill_dirs(&dir).len(), 1);
    std::fs::rename(&file, dir.join("newer.h5")).unwrap();
    scope_profiler::recover::recover(&file).unwrap();
    let (older, _) = read_back(&file);
    assert!(older["work"] >= noted[0], "the older run: {} of {noted:?}", older["work"]);
    assert!(spill_dirs(&dir).is_empty());
}

/// A forked child shares the parent's spill mappings: it records nothing into them.
#[test]
fn forked_child_does_not_touch_the_parents_calls() {
    let dir = scratch("flight_fork");
    let exe = build(&dir);
    let out = wait(start(&exe, &dir, 1, "fork", 100_000, &[]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (calls, _) = read_back(&dir.join("out.h5"));
    assert_eq!(calls["main"], 1000, "only the parent's calls");
    assert_eq!(calls["work"], 100_000);
    // What the spill file itself holds: recovery reads it as it is (every chunk up to its fill
    // count or first zero word), so calls a child wrote into the shared chunks would be there.
    let dir = scratch("flight_fork_killed");
    let exe = build(&dir);
    let child = start(&exe, &dir, 1, "fork", 0, &[]);
    wait_running(&dir, 1);
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    wait(child);
    let r = scope_profiler::recover::recover(&dir.join("out.h5")).unwrap();
    let (calls, _) = read_back(&dir.join("out.h5"));
    assert_eq!(calls["main"], 1000, "only the parent's calls in the spill: {}", r.message);
}

/// An MPI job in which some ranks wrote their own files (`<stem>.rank<N>.h5`) and one was
/// killed: one `sptool recover` writes every rank. Ranks 0 and 1 are a real mpirun run of 2
/// (no MPI_Init: each rank writes its own file); the killed rank 2 is the same program started
/// alone with Open MPI's rank variables set (a stand-in for a third rank of the same job).
#[test]
fn recover_combines_rank_files_and_spill_data() {
    let dir = scratch("flight_rank_files");
    let exe = build(&dir);
    let out = run(Command::new("mpirun")
        .args(["--oversubscribe", "-np", "2", "-x", "SCOPE_PROFILER_SPILL=1"])
        .arg(&exe)
        .arg(dir.join("out.h5"))
        .arg(dir.join("side"))
        .args(["1", "plain", "40000"])
        .current_dir(&dir));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(dir.join("out.rank0.h5").exists() && dir.join("out.rank1.h5").exists());
    assert!(spill_dirs(&dir).is_empty());
    let child = start(&exe, &dir, 1, "plain", 0, &[("OMPI_COMM_WORLD_RANK", "2"), ("OMPI_COMM_WORLD_SIZE", "3")]);
    let side2 = |dir: &Path| std::fs::read_to_string(dir.join("side.r2")).unwrap_or_default();
    poll_until("rank 2 to record", || side2(&dir).contains("work0 "));
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    wait(child);
    let noted: u64 = side2(&dir).lines().filter_map(|l| l.strip_prefix("work0 ")?.parse().ok()).max().unwrap();
    let sptool = lib_dir().join("sptool");
    let r = run(Command::new(&sptool).arg("recover").arg(dir.join("out.h5")));
    let said = text(&r.stdout);
    assert!(r.status.success() && said.contains("rank(s) [0, 1] from their own files"), "{said}{}", text(&r.stderr));
    let v = python_view(&dir.join("out.h5"));
    assert_eq!(v["num_ranks"].as_u64().unwrap(), 3, "{v}");
    assert_eq!(v["regions"]["work"]["0"]["calls"].as_u64().unwrap(), 40_000);
    assert_eq!(v["regions"]["work"]["1"]["calls"].as_u64().unwrap(), 40_000);
    assert!(v["regions"]["work"]["2"]["calls"].as_u64().unwrap() >= noted);
}

/// A rerun killed by SIGKILL next to the complete profile of an earlier run: recover refuses
/// to overwrite that profile, and works once it is moved away.
#[test]
fn recover_never_overwrites_a_complete_profile() {
    let dir = scratch("flight_no_overwrite");
    let exe = build(&dir);
    let out = wait(start(&exe, &dir, 1, "plain", 20_000, &[]));
    assert!(out.status.success());
    let file = dir.join("out.h5");
    let before = std::fs::read(&file).unwrap();
    kill_plain_run(&exe, &dir, 1);
    let err = scope_profiler::recover::recover(&file).unwrap_err();
    assert!(err.contains("refusing to overwrite"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), before, "the earlier profile is untouched");
    assert_eq!(spill_dirs(&dir).len(), 1, "the spill data is kept");
    std::fs::rename(&file, dir.join("earlier.h5")).unwrap();
    let r = scope_profiler::recover::recover(&file).unwrap();
    assert!(r.message.starts_with("recovered"), "{}", r.message);
}

fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// A run of 2 recording threads SIGKILLed in scratch directory `name`: the directory (its
/// spill data beside `out.h5`) and the calls the program completed.
fn killed_run(name: &str) -> (PathBuf, BTreeMap<String, u64>) {
    let dir = scratch(name);
    let exe = build(&dir);
    kill_plain_run(&exe, &dir, 2);
    let (completed, _) = side(&dir);
    (dir, completed)
}

/// Recoveries on several threads of one process at once (a Rust program, or this test binary,
/// calling `recover` in parallel): each reads its own spill file and writes every call of it.
/// The mapping of spill files is one per process; when each recovery opened and closed it as
/// if alone, one unmapped the file another read (this binary died of a SIGSEGV in CI) or read
/// the other's file in its place.
#[test]
fn recoveries_on_several_threads_at_once_each_keep_their_calls() {
    let (dir, completed) = killed_run("flight_parallel_recover");
    assert_eq!(spill_dirs(&dir).len(), 1);
    // Copies of the killed run, each a target with its run directory beside it.
    let copies: Vec<PathBuf> = (0..6)
        .map(|i| {
            let c = dir.join(format!("copy{i}"));
            std::fs::create_dir_all(&c).unwrap();
            let st = Command::new("cp").arg("-a").arg(&spill_dirs(&dir)[0]).arg(&c).status().unwrap();
            assert!(st.success(), "cp -a of the spill directory");
            c.join("out.h5")
        })
        .collect();
    let recovered: Vec<(PathBuf, Result<String, String>)> = std::thread::scope(|s| {
        let hs: Vec<_> = copies.iter().map(|f| s.spawn(move || (f.clone(), scope_profiler::recover::recover(f).map(|r| r.message)))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut first: Option<BTreeMap<String, usize>> = None;
    for (file, r) in recovered {
        let msg = r.unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(msg.starts_with("recovered") && msg.contains("nothing dropped"), "{}: {msg}", file.display());
        let h5 = hdf5::File::open(&file).unwrap();
        let calls: BTreeMap<String, usize> = read_regions(&h5, 0).into_iter().map(|(k, r)| (k, r.starts.len())).collect();
        assert!(calls["work"] as u64 >= worker_total(&completed) && calls["slow"] as u64 >= completed["slow"], "{}: {calls:?}, completed {completed:?}", file.display());
        match &first {
            None => first = Some(calls),
            Some(f) => assert_eq!(f, &calls, "{}: another copy of the same run recovered differently", file.display()),
        }
    }
}

/// Two `sptool recover` of the same profile at once (two nodes' job epilogues): they take
/// turns, so one recovers every call and the other finds nothing left to do; both succeed and
/// the profile holds every completed call once.
#[test]
fn two_recoveries_of_one_profile_at_once_take_turns() {
    let (dir, completed) = killed_run("flight_two_recovers");
    let file = dir.join("out.h5");
    let sptool = lib_dir().join("sptool");
    assert!(sptool.exists(), "build the workspace first (sptool)");
    std::thread::sleep(Duration::from_millis(1100));
    let spawn = || Command::new(&sptool).arg("recover").arg(&file).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let (a, b) = (spawn(), spawn());
    let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
    let said: Vec<String> = outs.iter().map(|o| format!("{}{}", text(&o.stdout), text(&o.stderr))).collect();
    for (o, s) in outs.iter().zip(&said) {
        assert!(o.status.success(), "{s}\n(the other: {said:?})");
    }
    let recovered = said.iter().filter(|s| s.starts_with("recovered ")).count();
    let nothing = said.iter().filter(|s| s.starts_with("nothing to recover")).count();
    assert_eq!((recovered, nothing), (1, 1), "{said:?}");
    check_counts(&file, &completed);
    assert!(spill_dirs(&dir).is_empty());
}

/// Recovery goes through the normal writers, so every layout that keeps calls works; and the
/// recovered times are `CLOCK_MONOTONIC` ns (the TSC ticks converted through the anchors the
/// spill saved): every call lies between the program's start and its kill, for each clock.
#[test]
fn recovered_times_are_monotonic_ns_in_every_layout() {
    for (layout, clock) in [("regions", "auto"), ("columnar", "tsc"), ("regions", "monotonic")] {
        let dir = scratch(&format!("flight_layout_{layout}_{clock}"));
        let exe = build(&dir);
        let t0 = monotonic_ns();
        let child = start(&exe, &dir, 2, "plain", 0, &[("SCOPE_PROFILER_LAYOUT", layout), ("SCOPE_PROFILER_CLOCK", clock)]);
        wait_running(&dir, 2);
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        wait(child);
        let t1 = monotonic_ns();
        let (completed, _) = side(&dir);
        let file = dir.join("out.h5");
        let r = scope_profiler::recover::recover(&file).unwrap();
        assert!(r.message.starts_with("recovered"), "{}", r.message);
        let got = check_counts(&file, &completed);
        if layout == "regions" {
            let h5 = hdf5::File::open(&file).unwrap();
            let regions = read_regions(&h5, 0);
            assert_eq!(regions["work"].starts.len() as u64, got["work"]);
            for (name, reg) in &regions {
                let (lo, hi) = (reg.starts[0], *reg.ends.iter().max().unwrap());
                assert!(lo >= t0 && hi <= t1, "{layout}/{clock}: {name} spans {lo}..{hi}, the program ran {t0}..{t1}");
            }
        }
    }
}
