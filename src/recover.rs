//! Recovery: what a killed run left in its spill directories (one per process: every thread
//! of every rank that reached the shared file system) becomes the normal profile file, with a
//! `recovered` note in its metadata. Used by `sptool recover`.
//!
//! Each run directory is read by `read_run` (below: the one reader of the spill format, whose
//! writer is the sink in `spill.rs`) into the profile of its process (logs over the spill
//! file's chunks, statistics, timebase) and written by the normal writers:
//! `output::write_single_with` for one process, `output::write_rank_file_with` per rank and
//! `merge::merge_rank_files` for several (with the ranks' own files, if some wrote one).

use crate::calllog::{HDR, parse_header, scan_chunk, units};
use crate::clock::{Anchor, Timebase};
use crate::config::{Config, Layout, MetadataDetail, Options};
use crate::model::{AttrValue, RankProfile, RunFacts};
use crate::output::RunContext;
use crate::profile::ThreadRecord;
use crate::recorder::ThreadData;
use crate::spill::{ALLOCATED_AT, ANCHORS_FILE, CALLS_FILE, FILE_MAGIC, HEADER_BYTES, META_FILE, NAMES_FILE, PAGE_WORDS, SpillMeta, THREADS_FILE, boot_id, dir_prefix, map_reader, spill_parent};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// How a recovery went: the one-line report, and what was written.
#[derive(Debug)]
pub struct Recovery {
    pub message: String,
    pub written: Option<PathBuf>,
}

/// Does `target` hold a profile already recovered from all of `dirs`? (Read as any file a
/// user names is: `h5read`.)
fn already_recovered(target: &Path, dirs: &[PathBuf]) -> bool {
    let Ok((f, _)) = crate::h5read::open(target) else { return false };
    let Some(have) = f.group("metadata").ok().and_then(|m| m.attr_strings("recovered_from")) else { return false };
    let have: BTreeSet<String> = have.into_iter().collect();
    dirs.iter().all(|d| d.file_name().is_some_and(|n| have.contains(&*n.to_string_lossy())))
}

/// Is `target` a whole profile that the run of each of `dirs` wrote itself (its finalize or its
/// write after a signal finished, and the process was killed before it removed its spill data
/// or raw dump): the same setup time and host, every recorded call kept?
fn written_by_their_runs(target: &Path, dirs: &[PathBuf]) -> bool {
    let Ok((f, _)) = crate::h5read::open(target) else { return false };
    let Ok(m) = f.group("metadata") else { return false };
    if m.attr_string("signal_write_stage").is_some_and(|s| s != "complete") || m.attr_strings("recovered_from").is_some() {
        return false;
    }
    let (Some(started), Some(host)) = (m.attr_string("timestamp"), m.attr_string("hostname")) else { return false };
    dirs.iter().all(|d| {
        let mut notes = Vec::new();
        RunDir::open(d).and_then(|d| read_meta(&d, &mut notes)).is_ok_and(|meta| meta.started == started && meta.info.hostname == host)
    })
}

/// Remove the spill directories (or raw dumps) whose calls a profile already holds.
fn remove_run_dirs(dirs: &[PathBuf]) {
    for d in dirs {
        if let Ok(d) = RunDir::open(d) {
            d.remove();
        }
    }
}

/// Is `target` the first stage of a write after a signal (statistics, no calls)?
fn statistics_only(target: &Path) -> bool {
    let Ok((f, _)) = crate::h5read::open(target) else { return false };
    f.group("metadata").ok().and_then(|m| m.attr_string("signal_write_stage")).is_some_and(|s| s == "statistics")
}

fn is_profile(target: &Path) -> bool {
    crate::h5read::open(target).is_ok_and(|(f, _)| f.has("metadata"))
}

/// An exclusive `flock` on the directory of a target being recovered, held while it is
/// (advisory: only recoveries take it). Where the file system has no such locks, recovery goes
/// on without.
struct RecoveryTurn {
    _lock: Option<std::os::fd::OwnedFd>,
}

/// How long a recovery waits for another one of the same directory before it gives up.
const RECOVERY_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

impl RecoveryTurn {
    fn take(target: &Path) -> Result<RecoveryTurn, String> {
        use std::os::fd::{AsRawFd, FromRawFd};
        let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let Ok(c) = cpath(dir) else { return Ok(RecoveryTurn { _lock: None }) };
        // SAFETY: a valid path; the descriptor is owned below.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Ok(RecoveryTurn { _lock: None });
        }
        // SAFETY: a descriptor we just opened.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let until = std::time::Instant::now() + RECOVERY_WAIT;
        loop {
            // SAFETY: our descriptor.
            if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(RecoveryTurn { _lock: Some(fd) });
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Ok(RecoveryTurn { _lock: None });
            }
            if std::time::Instant::now() >= until {
                return Err(format!(
                    "another recovery in {} has been running for {} s: nothing done (run this again once it is over)",
                    dir.display(),
                    RECOVERY_WAIT.as_secs()
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// Recover the spill directories of `target` into `target`. A complete profile there is never
/// touched, nor are run directories of other users (said in the message).
pub fn recover(target: &Path) -> Result<Recovery, String> {
    // The target is only ever a regular file (or nothing yet): a FIFO, device, socket or
    // directory there is refused before anything opens it (HDF5 would block on a FIFO).
    if let Ok(m) = std::fs::metadata(target).map(|m| std::os::unix::fs::MetadataExt::mode(&m)) {
        if m & libc::S_IFMT != libc::S_IFREG {
            return Err(format!("is {}, not a regular file: not a profile to recover into", safe_file::kind_of(m)));
        }
    }
    // One recovery of a directory's profiles at a time (two `sptool recover` at once, as two
    // nodes' job epilogues may run them): the second finds what the first left.
    let _turn = RecoveryTurn::take(target)?;
    let removed = remove_unfinished_writes(target);
    let (dirs, passed) = scan_runs(target);
    let mut r = recover_dirs(target, &dirs, false);
    let mut said = String::new();
    if !passed.is_empty() {
        said.push_str(&format!("; passed over {}", passed.join("; ")));
    }
    if !removed.is_empty() {
        // A run directory whose removal was cut short held calls that are in the profile; a
        // write's private directory, a half-written file.
        let (removals, writes): (Vec<&PathBuf>, Vec<&PathBuf>) = removed.iter().partition(|d| d.to_string_lossy().ends_with(crate::spill::REMOVING));
        let list = |v: &[&PathBuf]| v.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ");
        if !writes.is_empty() {
            said.push_str(&format!(
                "; removed {} half-written file(s) that an earlier write cut short left behind ({}): what they held is in the spill data or in the file written before them",
                writes.len(),
                list(&writes)
            ));
        }
        if !removals.is_empty() {
            said.push_str(&format!("; removed {} directory(ies) of calls whose removal was cut short after their profile was written ({})", removals.len(), list(&removals)));
        }
    }
    match &mut r {
        Ok(r) => r.message.push_str(&said),
        Err(e) => e.push_str(&said),
    }
    r
}

/// How long a leftover private directory must have been untouched to be taken as abandoned.
const UNFINISHED_QUIET: std::time::Duration = std::time::Duration::from_secs(1);

/// The private directories (`.<name>.<random>.tmpdir`) of writes of `target` or its rank
/// files that were cut short (a SIGKILL during the write, a process that ended before its
/// deadline): a half-written HDF5 file is not a profile, so they are removed, once no process
/// has a file open in them and nothing in them changed for a few seconds. So are run
/// directories whose removal was cut short (`spill::remove_run_dir`: their calls are in the
/// profile). Only the user's own real directories, not writable by others. Returns those
/// removed.
pub fn remove_unfinished_writes(target: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let stem = target.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    if stem.is_empty() {
        return Vec::new();
    }
    let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
    let mut parents = vec![dir];
    let spill = spill_parent(target);
    if !parents.contains(&spill) {
        parents.push(spill);
    }
    let entries = parents.iter().filter_map(|p| std::fs::read_dir(p).ok()).flatten();
    let (single, ranks, runs) = (format!(".{stem}.h5."), format!(".{stem}.rank"), dir_prefix(target));
    let mut candidates = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let write = name.ends_with(".tmpdir") && (name.starts_with(&single) || name.starts_with(&ranks));
        let removal = name.ends_with(crate::spill::REMOVING) && name.starts_with(&runs);
        if !write && !removal {
            continue;
        }
        let path = e.path();
        let Ok(m) = std::fs::symlink_metadata(&path) else { continue };
        if !m.is_dir() || m.uid() != euid() || m.mode() & 0o022 != 0 {
            continue;
        }
        let recent = |m: &std::fs::Metadata| m.modified().ok().and_then(|t| t.elapsed().ok()).is_none_or(|d| d < UNFINISHED_QUIET);
        let inner: Vec<std::fs::Metadata> = std::fs::read_dir(&path).map(|r| r.flatten().filter_map(|e| std::fs::symlink_metadata(e.path()).ok()).collect()).unwrap_or_default();
        if recent(&m) || inner.iter().any(recent) {
            continue;
        }
        candidates.push(path);
    }
    if candidates.is_empty() {
        return Vec::new();
    }
    let open = files_open_by_own_processes();
    candidates.retain(|d| !open.iter().any(|f| f.starts_with(d)));
    for d in &candidates {
        let _ = std::fs::remove_dir_all(d);
    }
    candidates
}

/// Every file the user's processes have open (their `/proc/<pid>/fd` links).
fn files_open_by_own_processes() -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return out };
    for p in procs.flatten() {
        if !p.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if std::fs::metadata(p.path()).map_or(true, |m| m.uid() != euid()) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else { continue };
        out.extend(fds.flatten().filter_map(|f| std::fs::read_link(f.path()).ok()));
    }
    out
}

/// Ranks listed one by one in `recovered_missing_ranks`, at most (beyond, only their count).
const MAX_LISTED_RANKS: i64 = 4096;

/// The ranks of `0..size` not in `have`, as inclusive ranges.
fn missing_ranges(size: i64, have: &BTreeSet<i64>) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut next = 0i64;
    for &r in have.iter().filter(|&&r| r < size) {
        if r > next {
            out.push((next, r - 1));
        }
        next = r + 1;
    }
    if next < size {
        out.push((next, size - 1));
    }
    out
}

/// Per-rank files `<stem>.rank<N>.h5` next to `target` (written by ranks that could not
/// gather), by rank. Only regular files: links are not followed.
fn rank_files(target: &Path) -> BTreeMap<i64, PathBuf> {
    let stem = target.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let prefix = format!("{stem}.rank");
    let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Ok((found, _)) = safe_file::files_in(dir, |n| n.to_str().is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".h5"))) else {
        return BTreeMap::new();
    };
    found
        .into_iter()
        .filter_map(|f| {
            let name = f.path.file_name()?.to_str()?.to_string();
            let rank = name.strip_prefix(&prefix)?.strip_suffix(".h5")?.parse::<i64>().ok().filter(|r| (0..=MAX_RANK).contains(r))?;
            Some((rank, f.path.clone()))
        })
        .collect()
}

/// The settings of the killed run, as far as writing needs them.
fn config_of(r: &RecoveredRun, target: &Path) -> Config {
    let mut c = Config::resolve(&Options::default(), |_| None);
    c.file_path = target.to_path_buf();
    c.verbosity = 0;
    c.layout = Layout::parse(&r.meta.layout).unwrap_or_default();
    c.layout_explicit = true;
    c.metadata_detail = if r.meta.full_metadata { MetadataDetail::Full } else { MetadataDetail::Minimal };
    c
}

/// Recover the given run directories into `target`. `overwrite`: replace what is at the
/// target (the signal helper, whose process is ending now: a rerun replaces the last run's file).
pub fn recover_dirs(target: &Path, dirs: &[PathBuf], overwrite: bool) -> Result<Recovery, String> {
    let where_ = spill_parent(target);
    let rank_files = if overwrite { BTreeMap::new() } else { rank_files(target) };
    if dirs.is_empty() && !rank_files.is_empty() && !target.exists() {
        // Every rank wrote its own file: combine them.
        let inputs: Vec<PathBuf> = rank_files.values().cloned().collect();
        let cut: Vec<String> = rank_files.iter().filter(|(_, p)| statistics_only(p)).map(|(r, _)| r.to_string()).collect();
        if !cut.is_empty() && cut.len() < inputs.len() {
            return Err(format!(
                "rank(s) {} kept only their statistics, call paths and metadata (killed while their calls were written after a signal: signal_write_stage \"statistics\"), the others all their calls: files of two layouts are not merged; each rank file is a readable profile of its rank",
                cut.join(", ")
            ));
        }
        let w = crate::merge::merge_rank_files(target, &inputs).map_err(|e| e.to_string())?;
        return Ok(Recovery {
            message: format!("combined the per-rank files of {} rank(s) into {} (no spill data was left)", inputs.len(), w.path.display()),
            written: Some(w.path),
        });
    }
    if dirs.is_empty() {
        return if is_profile(target) && statistics_only(target) {
            Ok(Recovery {
                message: format!(
                    "nothing to recover: {} holds the statistics, call paths and metadata of a run ended by a signal but none of its calls (the write was cut short after its first stage: signal_write_stage \"statistics\"), and no spill data is left (the flight recorder, SCOPE_PROFILER_SPILL=1, keeps the calls of a run cut short)",
                    target.display()
                ),
                written: None,
            })
        } else if is_profile(target) {
            Ok(Recovery { message: format!("nothing to recover: {} is a complete profile and no spill data is left", target.display()), written: None })
        } else if target.exists() {
            let why = crate::h5read::open(target).err().map(|e| e.to_string()).unwrap_or_else(|| "it has no metadata group".into());
            Err(format!("no spill data of {} found, and {} cannot be read as a profile ({why})", target.display(), target.display()))
        } else {
            Err(format!("no spill data of {} found (looked for {}* in {})", target.display(), dir_prefix(target), where_.display()))
        };
    }
    // The first stage of a write after a signal (statistics, no calls) is replaced by what the
    // spill data or the raw dump of that write holds: every call, and statistics from them.
    if target.exists() && !overwrite && !statistics_only(target) {
        if written_by_their_runs(target, dirs) {
            remove_run_dirs(dirs);
            return Ok(Recovery {
                message: format!(
                    "nothing to recover: {} is the complete profile of the run that left {} spill director(y/ies) (killed after its file was in place, before it removed them); removed them",
                    target.display(),
                    dirs.len()
                ),
                written: None,
            });
        }
        if already_recovered(target, dirs) {
            remove_run_dirs(dirs);
            return Ok(Recovery {
                message: format!("nothing to recover: {} already holds the calls of {} spill director(y/ies); removed them", target.display(), dirs.len()),
                written: None,
            });
        }
        return Err(format!(
            "refusing to overwrite the complete profile {}: move it away first (its spill data stays where it is)",
            target.display()
        ));
    }
    let mut runs: Vec<RecoveredRun> = Vec::new();
    let mut unreadable = Vec::new();
    for d in dirs {
        match read_run(d) {
            Ok(r) => runs.push(r),
            Err(e) => unreadable.push(e),
        }
    }
    if runs.is_empty() {
        return Err(format!("no readable spill data: {}", unreadable.join("; ")));
    }
    // Ranks: from the launcher's environment. Runs without one are separate processes, not
    // ranks of one job: the newest is recovered (as rank 0, when no ranked run is there) and
    // the others are left where they are, as is the older of two runs holding the same rank,
    // for a later `recover` once this profile has been moved away.
    runs.sort_by(|a, b| b.meta.started.cmp(&a.meta.started));
    let ranked = runs.iter().any(|r| r.meta.rank.is_some());
    let mut by_rank: BTreeMap<i64, RecoveredRun> = BTreeMap::new();
    let mut left: Vec<PathBuf> = Vec::new();
    for r in runs {
        let rank = match r.meta.rank {
            Some(rank) => rank,
            None if !ranked => 0,
            None => {
                left.push(r.dir);
                continue;
            }
        };
        if by_rank.contains_key(&rank) {
            left.push(r.dir); // an older run (newest first)
            continue;
        }
        by_rank.insert(rank, r);
    }
    // Ranks without spill data may have written their own file.
    let extra_files: BTreeMap<i64, PathBuf> = rank_files.into_iter().filter(|(r, _)| !by_rank.contains_key(r)).collect();
    // A rank that kept only its statistics (the first stage of a write after a signal, killed
    // before its calls were dumped) is in the aggregate layout; the ranks recovered here keep
    // their calls: files of two layouts are not merged. Said before anything is written.
    let cut: Vec<String> = extra_files.iter().filter(|(_, p)| statistics_only(p)).map(|(r, _)| r.to_string()).collect();
    let layout = by_rank.values().next().map(|r| r.meta.layout.clone()).unwrap_or_default();
    if !cut.is_empty() && Layout::parse(&layout).unwrap_or_default() != Layout::Aggregate {
        return Err(format!(
            "rank(s) {} kept only their statistics, call paths and metadata (killed after the first stage of the write after a signal, before their calls were dumped: signal_write_stage \"statistics\"), the spill data of rank(s) {} holds their calls: files of two layouts are not merged; each rank file is a readable profile of its rank, and the spill data stays where it is",
            cut.join(", "),
            by_rank.keys().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
        ));
    }
    let last_rank = by_rank.keys().chain(extra_files.keys()).max().copied().unwrap_or(0);
    let size = by_rank.values().filter_map(|r| r.meta.size).max().unwrap_or(1).max(last_rank + 1);
    let hosts: BTreeSet<&str> = by_rank.values().map(|r| r.meta.info.hostname.as_str()).collect();
    let sum = |f: fn(&RecoveredRun) -> u64| by_rank.values().map(f).sum::<u64>();
    let calls = sum(|r| r.calls);
    let (torn, bad, impossible, excess) = (sum(|r| r.torn_words), sum(|r| r.bad_chunks), sum(|r| r.dropped_calls), sum(|r| r.excess_calls));
    let (missing, missing_bytes) = (sum(|r| r.missing_chunks), sum(|r| r.missing_bytes));
    let dropped = if torn == 0 && bad == 0 && impossible == 0 && excess == 0 && missing == 0 && missing_bytes == 0 {
        "nothing dropped".to_string()
    } else {
        let mut parts = Vec::new();
        if missing > 0 || missing_bytes > 0 {
            let cut = if missing_bytes > 0 { format!(" (the spill file is {missing_bytes} bytes shorter than it was written)") } else { String::new() };
            parts.push(format!("{missing} chunk(s) of calls that the spill data recorded but that are missing or unreadable{cut}, whose calls cannot be counted"));
        }
        if impossible > 0 {
            parts.push(format!("{impossible} call(s) of chunks holding impossible times"));
        }
        if excess > 0 {
            parts.push(format!("{excess} call(s) of chunks whose headers claim more threads and regions than the run can have had"));
        }
        if torn > 0 {
            parts.push(format!("{torn} unit(s) of 4 bytes of torn calls"));
        }
        if bad > 0 {
            parts.push(format!("{bad} damaged chunk(s)"));
        }
        format!("dropped {}", parts.join(", "))
    };
    let (unnamed_regions, unnamed_calls) = (sum(|r| r.unnamed_regions), sum(|r| r.unnamed_calls));
    let mut remarks: Vec<String> = Vec::new();
    if unnamed_regions > 0 {
        remarks.push(format!("{unnamed_calls} call(s) of {unnamed_regions} region(s) whose names were not saved are kept as #<id>"));
    }
    let bad_fill = sum(|r| r.bad_fill);
    if bad_fill > 0 {
        remarks.push(format!("{bad_fill} chunk header(s) had an impossible fill count (their calls were read up to the first empty word)"));
    }
    remarks.extend(by_rank.values().flat_map(|r| r.notes.iter().cloned()));
    let extrapolated = by_rank.values().any(|r| r.extrapolated);
    let when = crate::metadata::iso8601_utc(std::time::SystemTime::now());
    let names: Vec<String> = by_rank.values().map(|r| r.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()).collect();
    let first = by_rank.values().next().unwrap();
    let started = first.meta.started.clone();
    let mut meta = first.meta.metadata.clone();
    let omp = meta
        .iter()
        .find_map(|(k, v)| if let (true, AttrValue::Int(n)) = (k == "omp_num_threads", v) { Some(*n) } else { None })
        .filter(|n| (1..=1 << 20).contains(n))
        .unwrap_or(1);
    meta.retain(|(k, _)| !matches!(k.as_str(), "mpi_size" | "num_nodes" | "total_cores"));
    meta.push(("mpi_size".into(), AttrValue::Int(size)));
    meta.push(("num_nodes".into(), AttrValue::Int(hosts.len().max(1) as i64)));
    meta.push(("total_cores".into(), AttrValue::Int(size.saturating_mul(omp))));
    let note = format!(
        "recovered at {when} from the spill data of {} process(es) ({}) of a run started at {started}: {calls} calls, {dropped}{}",
        by_rank.len(),
        names.join(", "),
        if extrapolated { "; times after the last saved clock anchor are extrapolated" } else { "" }
    );
    meta.push(("recovered".into(), AttrValue::Str(note)));
    meta.push(("recovered_calls".into(), AttrValue::Int(calls as i64)));
    meta.push(("recovered_from".into(), AttrValue::StrList(names)));
    // Ranks without data, as ranges (a job of millions of ranks may have lost most of them).
    let have: BTreeSet<i64> = by_rank.keys().chain(extra_files.keys()).copied().collect();
    let missing = missing_ranges(size, &have);
    let n_missing: i64 = missing.iter().map(|(a, b)| b - a + 1).sum();
    if n_missing > 0 {
        meta.push(("recovered_missing_ranks_count".into(), AttrValue::Int(n_missing)));
        if n_missing <= MAX_LISTED_RANKS {
            meta.push(("recovered_missing_ranks".into(), AttrValue::IntList(missing.iter().flat_map(|&(a, b)| a..=b).collect())));
        }
    }
    let config = config_of(first, target);
    let facts = RunFacts { timestamp: started, omp_num_threads: omp };
    let run = RunContext { config: &config, facts: &facts };
    let n_ranks = by_rank.len();
    let single = n_ranks == 1 && extra_files.is_empty() && size == 1;
    // A raw dump cut short holds fewer calls than its run recorded: the first-stage file of
    // that write (statistics of every recorded call) is kept beside the profile, not replaced.
    let mut aside: Vec<PathBuf> = Vec::new();
    for (&rank, r) in &by_rank {
        let recorded = r.meta.metadata.iter().find_map(|(k, v)| match (k.as_str(), v) {
            ("calls_recorded", AttrValue::Int(n)) => Some(*n),
            _ => None,
        });
        if !recorded.is_some_and(|n| (r.calls as i64) < n) {
            continue;
        }
        let f = if single { target.to_path_buf() } else { crate::output::rank_file_path(target, rank) };
        if statistics_only(&f) {
            let to = f.with_extension("statistics.h5");
            if !to.exists() && std::fs::rename(&f, &to).is_ok() {
                aside.push(to);
            }
        }
    }
    let mut dirs_done: Vec<RunDir> = Vec::new();
    let written = if single {
        let (_, r) = by_rank.into_iter().next().unwrap();
        let meta = with_recovered_counts(meta, &r);
        let reading = r.read();
        let result = crate::output::write_single_with(run, r.profile, meta);
        drop(reading);
        result.map_err(|e| e.to_string())?;
        dirs_done.push(r.run_dir);
        target.to_path_buf()
    } else {
        // One file per rank through the normal writer, then the normal merge of rank files.
        let mut inputs: Vec<PathBuf> = extra_files.values().cloned().collect();
        let mut ours = Vec::new();
        let mut failed = None;
        for (rank, r) in by_rank {
            let meta = with_recovered_counts(meta.clone(), &r);
            let reading = r.read();
            let result = crate::output::write_rank_file_with(run, rank, r.profile, None, meta);
            drop(reading);
            dirs_done.push(r.run_dir);
            match result {
                Ok(w) => {
                    ours.push(w.path.clone());
                    inputs.push(w.path);
                }
                Err(e) => {
                    failed = Some(e.to_string());
                    break;
                }
            }
        }
        let merged = match failed {
            Some(e) => Err(e),
            None => crate::merge::merge_rank_files(target, &inputs).map_err(|e| e.to_string()),
        };
        for p in &ours {
            let _ = std::fs::remove_file(p);
        }
        merged?.path
    };
    for d in dirs_done {
        d.remove();
    }
    let mut message = format!("recovered {calls} calls of {n_ranks} rank(s) from {n_ranks} spill director(y/ies) into {}; {dropped}", written.display());
    for r in &remarks {
        message.push_str("; ");
        message.push_str(r);
    }
    if !aside.is_empty() {
        let names: Vec<String> = aside.iter().map(|p| p.display().to_string()).collect();
        message.push_str(&format!(
            "; the raw dump of the write after a signal held fewer calls than were recorded: the statistics of every recorded call stay in {}",
            names.join(", ")
        ));
    }
    if !extra_files.is_empty() {
        message.push_str(&format!(
            "; rank(s) {:?} from their own files ({} rank(s) in the file)",
            extra_files.keys().collect::<Vec<_>>(),
            n_ranks + extra_files.len()
        ));
    }
    if n_missing > 0 {
        let shown: Vec<String> = missing.iter().take(20).map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
        let more = if missing.len() > 20 { ", ..." } else { "" };
        message.push_str(&format!("; no data of {n_missing} rank(s): {}{more}", shown.join(", ")));
    }
    if !unreadable.is_empty() {
        message.push_str(&format!("; skipped: {}", unreadable.join("; ")));
    }
    if !left.is_empty() {
        let dirs: Vec<String> = left.iter().map(|d| d.display().to_string()).collect();
        message.push_str(&format!(
            "; left the spill data of {} older run(s) in {} (move {} away, then recover again)",
            left.len(),
            dirs.join(", "),
            written.display()
        ));
    }
    Ok(Recovery { message, written: Some(written) })
}

/// A run directory written by the raw dump after a signal says how many calls the run
/// recorded (`calls_recorded`, `calls_recorded_per_thread`): the recovered file says how many
/// of them it holds (`calls_kept`, `calls_kept_per_thread`, by the file's thread ids), and is
/// `complete` only when that is all of them.
fn with_recovered_counts(mut meta: Vec<(String, AttrValue)>, r: &RecoveredRun) -> Vec<(String, AttrValue)> {
    // This run's own count (the metadata is the first rank's).
    let recorded = r.meta.metadata.iter().find_map(|(k, v)| match (k.as_str(), v) {
        ("calls_recorded", AttrValue::Int(n)) => Some(*n),
        _ => None,
    });
    let Some(recorded) = recorded else { return meta };
    let mut per_thread: Vec<i64> = vec![0; r.profile.info.thread_os_ids.len()];
    for region in &r.profile.regions {
        for (t, st) in &region.stats {
            if let Some(slot) = usize::try_from(*t).ok().and_then(|t| per_thread.get_mut(t)) {
                *slot += st.count as i64;
            }
        }
    }
    let kept = r.calls as i64;
    let own = |k: &str| r.meta.metadata.iter().find(|(n, _)| n == k).cloned();
    meta.retain(|(k, _)| !matches!(k.as_str(), "calls_kept" | "calls_kept_per_thread" | "signal_write_stage" | "calls_recorded" | "calls_recorded_per_thread"));
    meta.extend(own("calls_recorded"));
    meta.extend(own("calls_recorded_per_thread"));
    meta.push(("calls_kept".into(), AttrValue::Int(kept)));
    meta.push(("calls_kept_per_thread".into(), AttrValue::IntList(per_thread)));
    // Recovery builds the call paths from the calls it read.
    meta.retain(|(k, _)| k != "call_paths_kept");
    meta.push(("call_paths_kept".into(), AttrValue::Int(1)));
    let stage = if kept >= recorded { "complete" } else { "calls" };
    meta.push(("signal_write_stage".into(), AttrValue::Str(stage.into())));
    meta
}

// ---------------------------------------------------------------------------------------
// The reader: one run directory back into a rank's profile.
//
// Nothing in a run directory is believed before it is checked: the directory must be the
// user's own and writable by nobody else (checked on its open descriptor, never followed
// through a symlink), every file in it a regular file of the user's (opened with O_NOFOLLOW and
// O_NONBLOCK, so a FIFO or device in its place is refused, never waited on), every size and
// count is checked against the file's real size or a bound stated below before anything is
// allocated, and a chunk whose calls have impossible times is dropped whole and counted.

/// `meta.json` holds the run's metadata: never more than this.
pub const MAX_META_BYTES: u64 = 64 << 20;
/// Anchors kept, at most: beyond, every other one is dropped (the conversion stays piecewise
/// linear, over longer segments); at the default 100 ms that is 4.8 days of anchors.
pub const MAX_ANCHORS: usize = 1 << 22;
/// Ticks (TSC cycles or `CLOCK_MONOTONIC` ns) at or beyond this, or negative, are damage:
/// 2^62 ns is 146 years, 2^62 cycles at 5 GHz 29 years of uptime.
pub const TICK_LIMIT: i64 = 1 << 62;
/// A rank number above this (an MPI rank is an `int`) or a job size above [`MAX_SIZE`] is damage.
pub const MAX_RANK: i64 = i32::MAX as i64;
pub const MAX_SIZE: i64 = 1 << 24;
/// Memory the tables of the recovered threads may take, at least, and per byte of spill file:
/// what the killed process itself held for the same calls is far below that.
const TABLES_FLOOR: u64 = 512 << 20;
const TABLES_PER_SPILL_BYTE: u64 = 64;
/// What recovery's tables cost, for that budget (overestimates): per thread, and per region id
/// up to the highest a thread has calls of (a thread's call logs and statistics are tables
/// indexed by region id, as in the recording process: a call log and a statistics cell each).
const PER_THREAD: u64 = 256 << 10;
const PER_REGION_SLOT: u64 = 768;

/// A run directory, opened and checked (see above): its descriptor is what every file in it is
/// opened through.
pub struct RunDir {
    pub path: PathBuf,
    fd: std::os::fd::OwnedFd,
}

fn cpath(p: &Path) -> Result<std::ffi::CString, String> {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| format!("{}: the name contains a NUL byte", p.display()))
}

/// The current user's effective id.
fn euid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() }
}

fn fstat(fd: i32) -> std::io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid out-buffer for fstat on a descriptor we hold.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

impl RunDir {
    /// Open `path` as a run directory: a real directory (not a symlink), owned by the user
    /// running this and not writable by group or others. `Err` says why not.
    pub fn open(path: &Path) -> Result<RunDir, String> {
        use std::os::fd::FromRawFd;
        let c = cpath(path)?;
        // SAFETY: a valid path; the descriptor is owned below.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK) };
        if fd < 0 {
            return Err(format!("{}: {}", path.display(), std::io::Error::last_os_error()));
        }
        // SAFETY: a descriptor we just opened.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let st = fstat(std::os::fd::AsRawFd::as_raw_fd(&fd)).map_err(|e| format!("{}: {e}", path.display()))?;
        if st.st_uid != euid() {
            return Err(format!("{}: owned by user id {}, not by you (id {}): not touched", path.display(), st.st_uid, euid()));
        }
        if st.st_mode & 0o022 != 0 {
            return Err(format!("{}: writable by others (mode {:o}): not touched", path.display(), st.st_mode & 0o7777));
        }
        Ok(RunDir { path: path.to_path_buf(), fd })
    }

    fn raw(&self) -> i32 {
        std::os::fd::AsRawFd::as_raw_fd(&self.fd)
    }

    /// Open `name` in the directory: a regular file of the user's, or `Ok(None)` if there is
    /// none. Anything else (a symlink, FIFO, device, directory, someone else's file) is refused
    /// without waiting on it.
    fn file(&self, name: &str) -> Result<Option<File>, String> {
        use std::os::fd::FromRawFd;
        let shown = self.path.join(name);
        let c = std::ffi::CString::new(name).expect("our own names");
        // SAFETY: a valid descriptor and name; owned below.
        let fd = unsafe { libc::openat(self.raw(), c.as_ptr(), libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::ENOENT) => Ok(None),
                Some(libc::ELOOP) => Err(format!("{}: is a symlink, not a spill file", shown.display())),
                _ => Err(format!("{}: {e}", shown.display())),
            };
        }
        // SAFETY: a descriptor we just opened.
        let file = unsafe { File::from_raw_fd(fd) };
        let st = fstat(fd).map_err(|e| format!("{}: {e}", shown.display()))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(format!("{}: is not a regular file (a FIFO, device or directory), not a spill file", shown.display()));
        }
        if st.st_uid != euid() {
            return Err(format!("{}: owned by user id {}, not by you", shown.display(), st.st_uid));
        }
        Ok(Some(file))
    }

    /// The whole of `name` (empty if missing), refused if longer than `max` bytes.
    fn read_small(&self, name: &str, max: u64) -> Result<Vec<u8>, String> {
        use std::io::Read;
        let Some(f) = self.file(name)? else { return Ok(Vec::new()) };
        let len = f.metadata().map(|m| m.len()).map_err(|e| format!("{}: {e}", self.path.join(name).display()))?;
        if len > max {
            return Err(format!("{}: {len} bytes, more than the {max} such a file can hold (damaged)", self.path.join(name).display()));
        }
        let mut out = Vec::with_capacity(len as usize);
        f.take(max).read_to_end(&mut out).map_err(|e| format!("{}: {e}", self.path.join(name).display()))?;
        Ok(out)
    }

    /// Records of `size` bytes from `name`, streamed (a missing file has none).
    fn records(&self, name: &str, size: usize, notes: &mut Vec<String>, mut each: impl FnMut(&[u8])) -> Result<(), String> {
        use std::io::Read;
        let f = match self.file(name) {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(()),
            Err(e) => {
                notes.push(format!("{e}: not read"));
                return Ok(());
            }
        };
        let mut r = std::io::BufReader::with_capacity(1 << 16, f);
        let mut rec = vec![0u8; size];
        loop {
            match r.read_exact(&mut rec) {
                Ok(()) => each(&rec),
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(format!("{}: {e}", self.path.join(name).display())),
            }
        }
    }

    /// Remove the directory: its entries through its descriptor, then the directory itself
    /// (which fails, leaving it, if something else was put in its place meanwhile).
    pub fn remove(self) {
        let names: Vec<std::ffi::OsString> =
            std::fs::read_dir(format!("/proc/self/fd/{}", self.raw())).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
        for n in names {
            if let Ok(c) = std::ffi::CString::new(n.as_encoded_bytes()) {
                // SAFETY: a valid descriptor and name.
                unsafe { libc::unlinkat(self.raw(), c.as_ptr(), 0) };
            }
        }
        let _ = std::fs::remove_dir(&self.path);
    }
}

/// What a run directory held, as the profile of its process; its logs' chunks stay in the
/// spill file, read through `read` while it is written.
pub struct RecoveredRun {
    pub dir: PathBuf,
    pub run_dir: RunDir,
    pub meta: SpillMeta,
    pub file: File,
    pub profile: RankProfile,
    /// Calls in the profile: exactly what is written.
    pub calls: u64,
    /// Chunks whose header was unreadable, and words of torn calls at chunk ends or cut off by
    /// the end of the file.
    pub bad_chunks: u64,
    pub torn_words: u64,
    /// Calls of chunks dropped whole because some call in them had impossible times.
    pub dropped_calls: u64,
    /// Calls of chunks dropped because their headers claimed more threads and regions than a
    /// run with a spill file of this size can have had (the tables would not fit).
    pub excess_calls: u64,
    /// Chunks the spill file recorded handing out that are not there (cut off by a file cut
    /// short, or with unreadable headers), and the bytes the file lacks of its recorded end.
    pub missing_chunks: u64,
    pub missing_bytes: u64,
    /// Chunks with a fill count past their end (their calls were read up to their first
    /// zero word, as for a chunk still being filled).
    pub bad_fill: u64,
    /// Regions with calls but no saved name (kept as `#<id>`), and their calls.
    pub unnamed_regions: u64,
    pub unnamed_calls: u64,
    /// Calls after the last saved clock anchor (their times are extrapolated).
    pub extrapolated: bool,
    /// What else was wrong (skipped records, dropped metadata), for the message.
    pub notes: Vec<String>,
}

impl RecoveredRun {
    /// Map this run's spill file for reading its chunks (while the reading lives).
    pub fn read(&self) -> crate::spill::Reading {
        crate::spill::read_file(&self.file)
    }
}

/// Region names by id (records `id u32, len u32, bytes`): only ids a registry can give and
/// names it can hold; a record cut off by the end of the file ends the list.
fn read_names(dir: &RunDir, notes: &mut Vec<String>) -> Result<BTreeMap<u32, String>, String> {
    use std::io::Read;
    let mut names: BTreeMap<u32, String> = BTreeMap::new();
    let f = match dir.file(NAMES_FILE) {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(names),
        Err(e) => {
            notes.push(format!("{e}: no region names read"));
            return Ok(names);
        }
    };
    let mut r = std::io::BufReader::with_capacity(1 << 16, f);
    let (mut bad, mut head) = (0u64, [0u8; 8]);
    let mut name = vec![0u8; crate::registry::MAX_NAME_LEN];
    while r.read_exact(&mut head).is_ok() {
        let id = u32::from_le_bytes(head[..4].try_into().unwrap());
        let len = u32::from_le_bytes(head[4..].try_into().unwrap()) as usize;
        if len > crate::registry::MAX_NAME_LEN || len == 0 {
            // The records after it cannot be found: the rest of the file is lost.
            bad += 1;
            break;
        }
        if r.read_exact(&mut name[..len]).is_err() {
            bad += 1;
            break;
        }
        if id >= crate::registry::MAX_REGIONS {
            bad += 1;
            continue;
        }
        names.entry(id).or_insert_with(|| String::from_utf8_lossy(&name[..len]).into_owned());
    }
    if bad > 0 {
        notes.push(format!("{} has damaged record(s)", dir.path.join(NAMES_FILE).display()));
    }
    Ok(names)
}

/// Anchors that can be real (ticks and times in range, increasing, brackets under a minute),
/// at most [`MAX_ANCHORS`].
fn read_anchors(dir: &RunDir, notes: &mut Vec<String>) -> Result<Vec<Anchor>, String> {
    let mut out: Vec<Anchor> = Vec::new();
    let mut skipped = 0u64;
    let w = |b: &[u8]| i64::from_le_bytes(b.try_into().unwrap());
    let mut skipped_notes = Vec::new();
    dir.records(ANCHORS_FILE, 24, &mut skipped_notes, |r| {
        let a = Anchor { tick: w(&r[..8]), ns: w(&r[8..16]), half_width: w(&r[16..]) };
        let sane = (0..TICK_LIMIT).contains(&a.tick) && (0..TICK_LIMIT).contains(&a.ns) && (0..60_000_000_000).contains(&a.half_width);
        if !sane || out.last().is_some_and(|p| a.tick <= p.tick || a.ns < p.ns) {
            skipped += 1;
            return;
        }
        if out.len() >= MAX_ANCHORS {
            let mut i = 0;
            out.retain(|_| {
                i += 1;
                i % 2 == 1
            });
        }
        out.push(a);
    })?;
    notes.extend(skipped_notes);
    if skipped > 0 {
        notes.push(format!("{} impossible or out-of-order clock anchor(s) skipped", skipped));
    }
    Ok(out)
}

/// `meta.json`, checked: a rank and size that can be, attribute names that can be written.
fn read_meta(dir: &RunDir, notes: &mut Vec<String>) -> Result<SpillMeta, String> {
    let shown = dir.path.join(META_FILE);
    let bytes = dir.read_small(META_FILE, MAX_META_BYTES)?;
    if bytes.is_empty() {
        return Err(format!("{}: missing or empty", shown.display()));
    }
    let mut meta: SpillMeta = serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", shown.display()))?;
    if let Some(r) = meta.rank.filter(|r| !(0..=MAX_RANK).contains(r)) {
        notes.push(format!("{}: rank {r} is out of range (damaged): the run is taken as a process of its own", shown.display()));
        (meta.rank, meta.size) = (None, None);
    }
    if let Some(s) = meta.size.filter(|&s| !(1..=MAX_SIZE).contains(&s) || meta.rank.is_some_and(|r| r >= s)) {
        notes.push(format!("{}: job size {s} is out of range (damaged): the size is taken from the ranks found", shown.display()));
        meta.size = None;
    }
    if !matches!(meta.clock.as_str(), "tsc" | "monotonic") {
        return Err(format!("{}: unknown clock {:?} (damaged)", shown.display(), meta.clock));
    }
    let before = meta.metadata.len() + meta.info.extra.len();
    clean_attrs(&mut meta.metadata, WRITTEN_METADATA);
    clean_attrs(&mut meta.info.extra, WRITTEN_RANK_ATTRS);
    let dropped = before - meta.metadata.len() - meta.info.extra.len();
    if dropped > 0 {
        notes.push(format!("{dropped} metadata attribute(s) of {} with names that cannot be stored were left out", shown.display()));
    }
    Ok(meta)
}

/// `metadata/` attributes recovery and the writer set themselves (the spill's own are taken
/// out: written twice, HDF5 would refuse the file).
pub const WRITTEN_METADATA: &[&str] = &[
    "recovered",
    "recovered_calls",
    "recovered_from",
    "recovered_missing_ranks",
    "recovered_missing_ranks_count",
    "partial_rank_file",
    "merged_from_rank_files",
    "clock",
    "clock_error_bound_ns",
    "clock_tsc_hz",
    "clock_status",
];
/// Rank attributes the writer and recovery's clock set themselves.
pub const WRITTEN_RANK_ATTRS: &[&str] =
    &["hostname", "pid", "cpus", "num_threads", "thread_os_ids", "clock", "clock_error_bound_ns", "clock_status", "clock_tsc_hz", "clock_anchors", "clock_note"];

/// Keep the attributes whose names HDF5 can store (non-empty, no NUL, not `.`) and that are not
/// among `written` (set by the writer), each once.
fn clean_attrs(attrs: &mut Vec<(String, AttrValue)>, written: &[&str]) {
    let mut seen = BTreeSet::new();
    attrs.retain(|(k, _)| !k.is_empty() && k != "." && !k.contains('\0') && k.len() <= 1024 && !written.contains(&k.as_str()) && seen.insert(k.clone()));
}

/// A chunk header that passed the checks.
struct ChunkAt {
    word: usize,
    region: u32,
    thread: u32,
    cap: usize,
    /// Data units holding calls (read up to the first zero unit when the fill is unknown).
    used: usize,
    calls: usize,
}

/// The first word at or after `word` of the spill file that may hold data (holes of a sparse
/// file are skipped without reading them).
fn next_data(file: &File, word: usize) -> usize {
    use std::os::fd::AsRawFd;
    // SAFETY: lseek on a descriptor we hold.
    let at = unsafe { libc::lseek(file.as_raw_fd(), (word * 8) as libc::off_t, libc::SEEK_DATA) };
    if at < 0 {
        // ENXIO: no data from here on; anything else (no SEEK_DATA here): read on.
        return if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO) { usize::MAX / 2 } else { word };
    }
    (at as usize / 8 / PAGE_WORDS * PAGE_WORDS).max(word)
}

/// Read a run directory back into the profile of its process: per-thread logs over the spill
/// file's chunks and per-thread statistics from one pass over the calls, merged by
/// `profile::merge` with the timebase fitted to the saved anchors.
/// The header word holding the file's allocated end (then the chunk count).
const ALLOCATED_WORD: usize = (ALLOCATED_AT / 8) as usize;

pub fn read_run(dir: &Path) -> Result<RecoveredRun, String> {
    read_run_in(RunDir::open(dir)?)
}

fn read_run_in(run_dir: RunDir) -> Result<RecoveredRun, String> {
    let dir = run_dir.path.clone();
    crate::guard::note_input(&dir);
    let mut notes = Vec::new();
    let meta = read_meta(&run_dir, &mut notes)?;
    let path = dir.join(CALLS_FILE);
    let file = run_dir.file(CALLS_FILE)?.ok_or_else(|| format!("{}: missing", path.display()))?;
    let mut magic = [0u8; 8];
    if file.read_exact_at(&mut magic, 0).is_err() || &magic != FILE_MAGIC {
        if magic[..7] == FILE_MAGIC[..7] {
            return Err(format!(
                "{}: a spill file of another version of scope_profiler (format {}, this one reads {}): recover it with that version's sptool",
                path.display(),
                magic[7] as char,
                FILE_MAGIC[7] as char
            ));
        }
        return Err(format!("{}: not a spill file (or of another version)", path.display()));
    }
    let map = map_reader(&file).ok_or_else(|| format!("{}: cannot map: {}", path.display(), std::io::Error::last_os_error()))?;
    let all: &[u64] = if map.base.is_null() {
        &[]
    } else {
        // SAFETY: the whole mapping, 8-byte aligned; `map` outlives this function's use.
        unsafe { std::slice::from_raw_parts(map.base as *const u64, map.len / 8) }
    };
    let (mut bad_chunks, mut torn_words, mut dropped_calls, mut bad_fill) = (0u64, 0u64, 0u64, 0u64);
    // First pass: the chunks, each checked (header, calls' times), nothing allocated per chunk
    // but its entry here (at most one per page of the file).
    let mut chunks: Vec<ChunkAt> = Vec::new();
    let mut threads_seen: BTreeMap<u32, u32> = BTreeMap::new(); // thread -> highest region
    let budget = (map.len as u64).saturating_mul(TABLES_PER_SPILL_BYTE).max(TABLES_FLOOR);
    let (mut need, mut over_budget) = (0u64, 0u64);
    let mut word = (HEADER_BYTES / 8) as usize;
    let mut headers_seen = 0u64;
    while word + HDR <= all.len() {
        let header = parse_header(&all[word..word + HDR])
            .filter(|&(region, _, _, cap)| region < crate::registry::MAX_REGIONS && cap > HDR && cap <= crate::calllog::MAX_CHUNK && cap % PAGE_WORDS == 0);
        if header.is_some() {
            headers_seen += 1;
        }
        let Some((region, fill, thread, cap)) = header else {
            // Past the last chunk (blocks allocated but never used) or a damaged header:
            // chunk sizes are pages, so look for the next header a page further.
            let page = &all[word..(word + PAGE_WORDS).min(all.len())];
            if page.iter().any(|&w| w != 0) {
                bad_chunks += 1;
                word += PAGE_WORDS;
            } else {
                word = next_data(&file, word + PAGE_WORDS);
            }
            continue;
        };
        let end = (word + cap).min(all.len());
        // Data units: the fill count counts them.
        let room = (cap - HDR) * 2;
        let mut data = units(&all[word + HDR..end]);
        // A fill count past the chunk's end is damage in the header: the calls are read as in
        // a chunk still being filled, up to the first zero unit.
        let fill = if fill > room {
            bad_fill += 1;
            0
        } else {
            fill
        };
        if fill > 0 {
            data = &data[..fill.min(data.len())];
        }
        // A file cut short (a truncated copy): the published units that are missing.
        let missing = if fill > data.len() { fill - data.len() } else { 0 };
        let mut plausible = true;
        let scan = scan_chunk(data, |c| plausible &= (0..TICK_LIMIT).contains(&c.start) && (0..TICK_LIMIT).contains(&c.end));
        torn_words += (scan.torn + missing) as u64;
        // What reading it back adds to the tables, against what a run with a spill file of
        // this size can have needed: a chunk beyond that has a damaged header.
        let cost = match threads_seen.get(&thread) {
            Some(&m) => region.saturating_sub(m) as u64 * PER_REGION_SLOT,
            None => PER_THREAD + (region as u64 + 1) * PER_REGION_SLOT,
        };
        if !plausible {
            dropped_calls += scan.calls as u64;
        } else if need + cost > budget {
            over_budget += scan.calls as u64;
        } else {
            need += cost;
            let m = threads_seen.entry(thread).or_insert(0);
            *m = (*m).max(region);
            chunks.push(ChunkAt { word, region, thread, cap, used: scan.used, calls: scan.calls });
        }
        word += cap;
    }
    // What the writer recorded it had handed out, against what is here: chunks cut off or
    // unreadable are counted (their calls cannot be).
    let (allocated_end, allocated_chunks) = (all.get(ALLOCATED_WORD).copied().unwrap_or(0), all.get(ALLOCATED_WORD + 1).copied().unwrap_or(0));
    let file_len = file.metadata().map_or(map.len as u64, |m| m.len());
    let missing_bytes = allocated_end.saturating_sub(file_len);
    // A chunk is counted as handed out before its owner writes its header, and its header
    // before any call: a process killed in between leaves a handed-out chunk with no header
    // and no calls. So while the file holds every byte it was given (nothing cut off: each
    // page with data was read above, as a header or as damage), chunks without a header held
    // no calls; only a file cut short lacks chunks whose calls are lost.
    let missing_chunks = if missing_bytes == 0 { 0 } else { allocated_chunks.saturating_sub(headers_seen) };
    // Second pass: the calls into per-thread statistics, the chunks adopted by the logs.
    let mut threads: BTreeMap<u32, ThreadData> = BTreeMap::new();
    let (mut calls, mut last_tick) = (0u64, i64::MIN);
    let mut per_region: BTreeMap<u32, u64> = BTreeMap::new();
    for c in &chunks {
        let data = &units(&all[c.word + HDR..(c.word + c.cap).min(all.len())])[..c.used];
        let t = threads.entry(c.thread).or_insert_with(|| ThreadData::for_thread(c.thread, true));
        let cell = t.stats().cell(c.region);
        let (mut first, mut last) = (None, 0i64);
        let scan = scan_chunk(data, |call| {
            first.get_or_insert(call.start);
            last = call.start;
            last_tick = last_tick.max(call.end);
            let d = call.end.wrapping_sub(call.start);
            // Exclusive time needs the nesting, which the calls of one region do not show:
            // a recovered call's exclusive time is its whole duration. No histogram: the
            // layouts that keep calls build it from the converted calls.
            cell.record(d, d);
        });
        calls += scan.calls as u64;
        *per_region.entry(c.region).or_insert(0) += scan.calls as u64;
        t.log_mut(c.region).adopt_spilled((c.word * 8) as u64, c.cap, &scan, first, last);
        debug_assert_eq!(scan.calls, c.calls);
        // Read once: let its pages go from this process (the helper's memory stays bounded).
        let end = (c.word + c.cap).min(all.len());
        // SAFETY: a page-aligned range inside the read-only mapping `map`.
        unsafe { libc::madvise(map.base.add(c.word * 8) as *mut libc::c_void, (end - c.word) * 8, libc::MADV_DONTNEED) };
    }
    drop(map);
    // Thread ids of the OS, for the threads that recorded (records `index u32, 0 u32, tid i64`).
    let mut os_tids: BTreeMap<u32, i64> = BTreeMap::new();
    run_dir.records(THREADS_FILE, 16, &mut notes, |r| {
        let index = u32::from_le_bytes(r[..4].try_into().unwrap());
        if threads.contains_key(&index) {
            os_tids.entry(index).or_insert(i64::from_le_bytes(r[8..].try_into().unwrap()));
        }
    })?;
    let saved = read_names(&run_dir, &mut notes)?;
    // Every region with calls gets its saved name, or `#<id>` when none was saved: no call
    // the profile counts is left out of it.
    let top = per_region.keys().next_back().map_or(0, |&m| m as usize + 1);
    let mut names: Vec<String> = vec![String::new(); top];
    let (mut unnamed_regions, mut unnamed_calls) = (0u64, 0u64);
    for (&id, &n) in &per_region {
        names[id as usize] = match saved.get(&id) {
            Some(name) => name.clone(),
            None => {
                unnamed_regions += 1;
                unnamed_calls += n;
                format!("#{id}")
            }
        };
    }
    let records: Vec<ThreadRecord> = threads
        .into_iter()
        .map(|(index, mut data)| {
            let os_tid = os_tids.get(&index).copied().unwrap_or(0);
            // The track of asynchronous ranges: its calls nest in nothing.
            data.track = os_tid == crate::recorder::TRACK_OS_TID;
            ThreadRecord { index, os_tid, data }
        })
        .collect();
    // The clock: the identity, or a fit through the saved anchors (plus one taken now when
    // this is the killed run's node and boot, so that no call lies after the last anchor).
    let (timebase, extrapolated) = if meta.clock == "tsc" {
        let mut anchors = read_anchors(&run_dir, &mut notes)?;
        if !meta.boot_id.is_empty() && meta.boot_id == boot_id() {
            anchors.extend(crate::clock::anchor_now());
        }
        let beyond = calls > 0 && anchors.last().is_none_or(|a| last_tick > a.tick.saturating_add(a.half_width));
        let problems = if beyond {
            vec!["recovered: calls after the last saved clock anchor have extrapolated times".to_string()]
        } else {
            Vec::new()
        };
        (Timebase::fit(anchors, problems), beyond)
    } else {
        (Timebase::monotonic(), false)
    };
    // The killed run's wall time is not known. The logs' chunks are read through the reader's
    // mapping of the spill file (without it they read as empty: no call paths).
    let reading = crate::spill::read_file(&file);
    let mut call_paths = crate::callpath::collect(&names, &records, &timebase, 0);
    drop(reading);
    // The calls of a damaged spill file can add up to path times no run has (in range each,
    // their sums wrap): kept within what a profile holds, so that the rank files of a
    // recovered job merge (`writer::read3` refuses such times as damage).
    for n in &mut call_paths.nodes {
        n.inclusive_ns = n.inclusive_ns.clamp(0, crate::writer::read3::TIME_LIMIT - 1);
        n.exclusive_ns = n.exclusive_ns.clamp(0, crate::writer::read3::TIME_LIMIT - 1);
    }
    let (regions, kept) = crate::profile::merge(&names, records, &timebase);
    call_paths.renumber_threads(|index| kept.iter().position(|k| k.0 as i64 == index).map(|p| p as i64));
    let mut info = meta.info.clone();
    info.thread_os_ids = kept.iter().map(|t| t.1).collect();
    info.extra.extend(crate::metadata::clock_attrs(&timebase.report(), meta.clock_note.as_deref()));
    let profile = RankProfile { info, regions, call_paths: Some(call_paths), ..Default::default() };
    Ok(RecoveredRun {
        dir,
        run_dir,
        meta,
        file,
        profile,
        calls,
        bad_chunks,
        torn_words,
        dropped_calls,
        excess_calls: over_budget,
        missing_chunks,
        missing_bytes,
        bad_fill,
        unnamed_regions,
        unnamed_calls,
        extrapolated,
        notes,
    })
}

/// Run directories of `target` left behind that this user may recover (real directories of
/// the user's own, not writable by others), and what was passed over, with why.
pub fn scan_runs(target: &Path) -> (Vec<PathBuf>, Vec<String>) {
    let prefix = dir_prefix(target);
    let mut parents = vec![target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf()];
    let p = spill_parent(target);
    if !parents.contains(&p) {
        parents.push(p);
    }
    let (mut out, mut passed) = (Vec::new(), Vec::new());
    for parent in parents {
        let Ok(rd) = std::fs::read_dir(&parent) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with(&prefix) || name.ends_with(crate::spill::REMOVING) || !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            match RunDir::open(&e.path()) {
                Ok(_) => out.push(e.path()),
                Err(why) => passed.push(why),
            }
        }
    }
    out.sort();
    passed.sort();
    (out, passed)
}

/// Run directories of `target` left behind that this user may recover (see [`scan_runs`]).
pub fn find_runs(target: &Path) -> Vec<PathBuf> {
    scan_runs(target).0
}

#[cfg(test)]
mod tests {
    #[test]
    fn chunk_words_round_trip_through_the_one_decoder() {
        use crate::calllog::{CallLog, scan_chunk};
        use crate::model::Call;
        let mut log = CallLog::new(3, 7);
        let t = 1_000_000_000_000i64;
        let calls: Vec<Call> = (0..5_000).map(|i| Call { start: t + i * 7, end: t + i * 7 + 3 }).collect();
        calls.iter().for_each(|&c| log.push(c));
        assert!(log.chunk_count() > 3);
        let (s, e) = log.columns();
        assert_eq!(s.len(), calls.len());
        assert_eq!(e[10], calls[10].end);
        // A chunk cut inside an escaped call keeps the complete calls and reports the rest.
        // Units: an escaped call (10, 20), a short one (gap 5, duration 1), then an escape
        // unit with the first of its four time units only.
        let units = [0xFFFF_FFFEu32, 10, 0, 20, 0, 5 << 17 | 1 << 1 | 1, 0xFFFF_FFFE, 99];
        let mut got = Vec::new();
        let scan = scan_chunk(&units, |c| got.push((c.start, c.end)));
        assert_eq!(got, vec![(10, 20), (15, 16)]);
        assert_eq!((scan.calls, scan.escapes, scan.used, scan.torn), (2, 1, 6, 2));
    }
}
