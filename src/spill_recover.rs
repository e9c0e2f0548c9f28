//! Recovery: what a killed run left in its spill directories (one per process: every thread
//! of every rank that reached the shared file system) becomes the normal profile file, with a
//! `recovered` note in its metadata. Used by `sptool recover` and by the signal helper.
//!
//! Each run directory is read by `spill::read_run` into the profile of its process (logs over
//! the spill file's chunks, statistics, timebase) and written by the normal writers:
//! `output::write_single_with` for one process, `output::write_rank_file_with` per rank and
//! `merge::merge_rank_files` for several (with the ranks' own files, if some wrote one).

use crate::config::{Config, Layout, MetadataDetail, Options};
use crate::model::{AttrValue, RunFacts};
use crate::output::RunContext;
use crate::spill::{RecoveredRun, find_runs, read_run};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// How a recovery went: the one-line report, and what was written.
#[derive(Debug)]
pub struct Recovery {
    pub message: String,
    pub written: Option<PathBuf>,
}

/// Does `target` hold a profile already recovered from all of `dirs`?
fn already_recovered(target: &Path, dirs: &[PathBuf]) -> bool {
    let Ok(f) = hdf5::File::open(target) else { return false };
    let Ok(a) = f.group("metadata").and_then(|m| m.attr("recovered_from")) else { return false };
    let Ok(v) = a.read_raw::<hdf5::types::VarLenUnicode>() else { return false };
    let have: BTreeSet<String> = v.iter().map(|s| s.as_str().to_string()).collect();
    dirs.iter().all(|d| d.file_name().is_some_and(|n| have.contains(&*n.to_string_lossy())))
}

fn is_profile(target: &Path) -> bool {
    hdf5::File::open(target).is_ok_and(|f| f.group("metadata").is_ok())
}

/// Recover the spill directories of `target` into `target`. A complete profile there is never
/// touched.
pub fn recover(target: &Path) -> Result<Recovery, String> {
    recover_dirs(target, &find_runs(target), false)
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
            let rank = name.strip_prefix(&prefix)?.strip_suffix(".h5")?.parse::<i64>().ok()?;
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
    c.metadata_detail = if r.meta.full_metadata { MetadataDetail::Full } else { MetadataDetail::Minimal };
    c
}

/// Recover the given run directories into `target`. `overwrite`: replace what is at the
/// target (the signal helper, whose process is ending now: a rerun replaces the last run's file).
pub fn recover_dirs(target: &Path, dirs: &[PathBuf], overwrite: bool) -> Result<Recovery, String> {
    let where_ = crate::spill::spill_parent(target);
    let rank_files = if overwrite { BTreeMap::new() } else { rank_files(target) };
    if dirs.is_empty() && !rank_files.is_empty() && !target.exists() {
        // Every rank wrote its own file: combine them.
        let inputs: Vec<PathBuf> = rank_files.values().cloned().collect();
        let w = crate::merge::merge_rank_files(target, &inputs).map_err(|e| e.to_string())?;
        return Ok(Recovery {
            message: format!("combined the per-rank files of {} rank(s) into {} (no spill data was left)", inputs.len(), w.path.display()),
            written: Some(w.path),
        });
    }
    if dirs.is_empty() {
        return if is_profile(target) {
            Ok(Recovery { message: format!("nothing to recover: {} is a complete profile and no spill data is left", target.display()), written: None })
        } else if target.exists() {
            let why = hdf5::File::open(target).err().map(|e| e.to_string()).unwrap_or_else(|| "it has no metadata group".into());
            Err(format!("no spill data of {} found, and {} cannot be read as a profile ({why})", target.display(), target.display()))
        } else {
            Err(format!("no spill data of {} found (looked for {}* in {})", target.display(), crate::spill::dir_prefix(target), where_.display()))
        };
    }
    if target.exists() && !overwrite {
        if already_recovered(target, dirs) {
            for d in dirs {
                let _ = std::fs::remove_dir_all(d);
            }
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
    let last_rank = by_rank.keys().chain(extra_files.keys()).max().copied().unwrap_or(0);
    let size = by_rank.values().filter_map(|r| r.meta.size).max().unwrap_or(1).max(last_rank + 1);
    let hosts: BTreeSet<&str> = by_rank.values().map(|r| r.meta.info.hostname.as_str()).collect();
    let calls: u64 = by_rank.values().map(|r| r.calls).sum();
    let torn: u64 = by_rank.values().map(|r| r.torn_words).sum();
    let bad: u64 = by_rank.values().map(|r| r.bad_chunks).sum();
    let dropped = if torn == 0 && bad == 0 { "nothing dropped".to_string() } else { format!("dropped {torn} word(s) of torn calls and {bad} damaged chunk(s)") };
    let extrapolated = by_rank.values().any(|r| r.extrapolated);
    let when = crate::metadata::iso8601_utc(std::time::SystemTime::now());
    let names: Vec<String> = by_rank.values().map(|r| r.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()).collect();
    let first = by_rank.values().next().unwrap();
    let started = first.meta.started.clone();
    let mut meta = first.meta.metadata.clone();
    let omp = meta.iter().find_map(|(k, v)| if let (true, AttrValue::Int(n)) = (k == "omp_num_threads", v) { Some(*n) } else { None }).unwrap_or(1);
    meta.retain(|(k, _)| !matches!(k.as_str(), "mpi_size" | "num_nodes" | "total_cores"));
    meta.push(("mpi_size".into(), AttrValue::Int(size)));
    meta.push(("num_nodes".into(), AttrValue::Int(hosts.len().max(1) as i64)));
    meta.push(("total_cores".into(), AttrValue::Int(size * omp)));
    let note = format!(
        "recovered at {when} from the spill data of {} process(es) ({}) of a run started at {started}: {calls} calls, {dropped}{}",
        by_rank.len(),
        names.join(", "),
        if extrapolated { "; times after the last saved clock anchor are extrapolated" } else { "" }
    );
    meta.push(("recovered".into(), AttrValue::Str(note)));
    meta.push(("recovered_calls".into(), AttrValue::Int(calls as i64)));
    meta.push(("recovered_from".into(), AttrValue::StrList(names)));
    let missing: Vec<i64> = (0..size).filter(|r| !by_rank.contains_key(r) && !extra_files.contains_key(r)).collect();
    if !missing.is_empty() {
        meta.push(("recovered_missing_ranks".into(), AttrValue::IntList(missing.clone())));
    }
    let config = config_of(first, target);
    let facts = RunFacts { timestamp: started, omp_num_threads: omp };
    let run = RunContext { config: &config, facts: &facts };
    let n_ranks = by_rank.len();
    let dirs_done: Vec<PathBuf> = by_rank.values().map(|r| r.dir.clone()).collect();
    let written = if n_ranks == 1 && extra_files.is_empty() && size == 1 {
        let (_, r) = by_rank.into_iter().next().unwrap();
        r.open_reader();
        let result = crate::output::write_single_with(run, r.profile, meta);
        crate::spill::close_reader();
        result.map_err(|e| e.to_string())?;
        target.to_path_buf()
    } else {
        // One file per rank through the normal writer, then the normal merge of rank files.
        let mut inputs: Vec<PathBuf> = extra_files.values().cloned().collect();
        let mut ours = Vec::new();
        for (rank, r) in by_rank {
            r.open_reader();
            let result = crate::output::write_rank_file_with(run, rank, r.profile, None, meta.clone());
            crate::spill::close_reader();
            let w = result.map_err(|e| e.to_string())?;
            ours.push(w.path.clone());
            inputs.push(w.path);
        }
        let merged = crate::merge::merge_rank_files(target, &inputs).map_err(|e| e.to_string());
        for p in &ours {
            let _ = std::fs::remove_file(p);
        }
        merged?.path
    };
    for d in &dirs_done {
        let _ = std::fs::remove_dir_all(d);
    }
    let mut message = format!("recovered {calls} calls of {n_ranks} rank(s) from {n_ranks} spill director(y/ies) into {}; {dropped}", written.display());
    if !extra_files.is_empty() {
        message.push_str(&format!("; rank(s) {:?} from their own files", extra_files.keys().collect::<Vec<_>>()));
    }
    if !missing.is_empty() {
        message.push_str(&format!("; no data of rank(s) {missing:?}"));
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
