//! Recovery: what a killed run left in its spill directories (one per process: every thread
//! of every rank that reached the shared file system) becomes the normal profile file, with a
//! `recovered` note in its metadata. Used by `sptool recover` and by the signal helper.
//!
//! Each run directory is read by `read_run` (below: the one reader of the spill format, whose
//! writer is the sink in `spill.rs`) into the profile of its process (logs over the spill
//! file's chunks, statistics, timebase) and written by the normal writers:
//! `output::write_single_with` for one process, `output::write_rank_file_with` per rank and
//! `merge::merge_rank_files` for several (with the ranks' own files, if some wrote one).

use crate::calllog::{HDR, parse_header, scan_chunk};
use crate::clock::{Anchor, Timebase};
use crate::config::{Config, Layout, MetadataDetail, Options};
use crate::model::{AttrValue, RankProfile, RunFacts};
use crate::output::RunContext;
use crate::profile::ThreadRecord;
use crate::recorder::ThreadData;
use crate::spill::{ANCHORS_FILE, CALLS_FILE, FILE_MAGIC, HEADER_BYTES, META_FILE, NAMES_FILE, PAGE_WORDS, SpillMeta, THREADS_FILE, boot_id, dir_prefix, map_reader, spill_parent};
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
    let where_ = spill_parent(target);
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
            Err(format!("no spill data of {} found (looked for {}* in {})", target.display(), dir_prefix(target), where_.display()))
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

// ---------------------------------------------------------------------------------------
// The reader: one run directory back into a rank's profile.

/// What a run directory held, as the profile of its process; its logs' chunks stay in the
/// spill file, read through `open_reader_of` while it is written.
pub struct RecoveredRun {
    pub dir: PathBuf,
    pub meta: SpillMeta,
    pub file: File,
    pub profile: RankProfile,
    pub calls: u64,
    /// Chunks whose header was unreadable or cut off, and words of torn calls at chunk ends.
    pub bad_chunks: u64,
    pub torn_words: u64,
    /// Calls after the last saved clock anchor (their times are extrapolated).
    pub extrapolated: bool,
}

impl RecoveredRun {
    /// Map this run's spill file for reading its chunks (until `close_reader`).
    pub fn open_reader(&self) {
        crate::spill::open_reader_of(&self.file);
    }
}

fn read_names(dir: &Path) -> Vec<String> {
    let bytes = std::fs::read(dir.join(NAMES_FILE)).unwrap_or_default();
    let mut names: BTreeMap<u32, String> = BTreeMap::new();
    let mut rest = &bytes[..];
    while rest.len() >= 8 {
        let id = u32::from_le_bytes(rest[..4].try_into().unwrap());
        let len = u32::from_le_bytes(rest[4..8].try_into().unwrap()) as usize;
        let Some(name) = rest.get(8..8 + len) else { break };
        names.insert(id, String::from_utf8_lossy(name).into_owned());
        rest = &rest[8 + len..];
    }
    let n = names.keys().next_back().map_or(0, |&m| m as usize + 1);
    (0..n).map(|i| names.get(&(i as u32)).cloned().unwrap_or_else(|| format!("#{i}"))).collect()
}

fn read_threads(dir: &Path) -> BTreeMap<u32, i64> {
    let bytes = std::fs::read(dir.join(THREADS_FILE)).unwrap_or_default();
    bytes
        .chunks_exact(16)
        .map(|r| (u32::from_le_bytes(r[..4].try_into().unwrap()), i64::from_le_bytes(r[8..].try_into().unwrap())))
        .collect()
}

fn read_anchors(dir: &Path) -> Vec<Anchor> {
    let bytes = std::fs::read(dir.join(ANCHORS_FILE)).unwrap_or_default();
    let w = |b: &[u8]| i64::from_le_bytes(b.try_into().unwrap());
    bytes.chunks_exact(24).map(|r| Anchor { tick: w(&r[..8]), ns: w(&r[8..16]), half_width: w(&r[16..]) }).collect()
}

/// Read a run directory back into the profile of its process: per-thread logs over the spill
/// file's chunks and per-thread statistics from one pass over the calls, merged by
/// `profile::merge` with the timebase fitted to the saved anchors.
pub fn read_run(dir: &Path) -> Result<RecoveredRun, String> {
    let meta: SpillMeta = std::fs::read(dir.join(META_FILE))
        .map_err(|e| format!("{}: {e}", dir.join(META_FILE).display()))
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| format!("{}: {e}", dir.join(META_FILE).display())))?;
    let path = dir.join(CALLS_FILE);
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&path).map_err(|e| format!("{}: {e}", path.display()))?
    };
    let mut magic = [0u8; 8];
    if file.read_exact_at(&mut magic, 0).is_err() || &magic != FILE_MAGIC {
        return Err(format!("{}: not a spill file (or of another version)", path.display()));
    }
    let map = map_reader(&file).ok_or_else(|| format!("{}: cannot map: {}", path.display(), std::io::Error::last_os_error()))?;
    let all: &[u64] = if map.base.is_null() {
        &[]
    } else {
        // SAFETY: the whole mapping, 8-byte aligned; `map` outlives this function's use.
        unsafe { std::slice::from_raw_parts(map.base as *const u64, map.len / 8) }
    };
    let names = read_names(dir);
    let os_tids = read_threads(dir);
    let mut threads: BTreeMap<u32, ThreadData> = os_tids.keys().map(|&i| (i, ThreadData::for_thread(i, true))).collect();
    let (mut bad_chunks, mut torn_words, mut calls) = (0u64, 0u64, 0u64);
    let mut last_tick = i64::MIN;
    let mut word = (HEADER_BYTES / 8) as usize;
    while word + HDR <= all.len() {
        // A region id no registry can give is a damaged header too (it would size tables by it).
        let header = parse_header(&all[word..word + HDR])
            .filter(|&(region, _, _, cap)| region < crate::registry::MAX_REGIONS && cap > HDR && cap <= crate::calllog::MAX_CHUNK && cap % PAGE_WORDS == 0);
        let Some((region, fill, thread, cap)) = header else {
            // Past the last chunk (blocks allocated but never used) or a damaged header:
            // chunk sizes are pages, so look for the next header a page further.
            if all[word..(word + PAGE_WORDS).min(all.len())].iter().any(|&w| w != 0) {
                bad_chunks += 1;
            }
            word += PAGE_WORDS;
            continue;
        };
        let end = (word + cap).min(all.len());
        let mut data = &all[word + HDR..end];
        if fill > 0 {
            data = &data[..fill.min(data.len())];
        }
        // A file cut short (a truncated copy): the published calls that are missing.
        let missing = if fill > 0 && fill > data.len() { fill - data.len() } else { 0 };
        let t = threads.entry(thread).or_insert_with(|| ThreadData::for_thread(thread, true));
        let cell = t.stats().cell(region);
        let (mut first, mut last) = (None, 0i64);
        let scan = scan_chunk(data, |c| {
            first.get_or_insert(c.start);
            last = c.start;
            last_tick = last_tick.max(c.end);
            let d = c.end.wrapping_sub(c.start);
            // Exclusive time needs the nesting, which the calls of one region do not show:
            // a recovered call's exclusive time is its whole duration. No histogram: the
            // layouts that keep calls build it from the converted calls.
            cell.record(d, d);
        });
        torn_words += (scan.torn + missing) as u64;
        calls += scan.calls as u64;
        t.log_mut(region).adopt_spilled((word * 8) as u64, cap, &scan, first, last);
        // Read once: let its pages go from this process (the helper's memory stays bounded).
        // SAFETY: a page-aligned range inside the read-only mapping `map`.
        unsafe { libc::madvise(map.base.add(word * 8) as *mut libc::c_void, (end - word) * 8, libc::MADV_DONTNEED) };
        word += cap;
    }
    drop(map);
    let records: Vec<ThreadRecord> =
        threads.into_iter().map(|(index, data)| ThreadRecord { index, os_tid: os_tids.get(&index).copied().unwrap_or(0), data }).collect();
    // The clock: the identity, or a fit through the saved anchors (plus one taken now when
    // this is the killed run's node and boot, so that no call lies after the last anchor).
    let (timebase, extrapolated) = if meta.clock == "tsc" {
        let mut anchors = read_anchors(dir);
        if !meta.boot_id.is_empty() && meta.boot_id == boot_id() {
            anchors.extend(crate::clock::anchor_now());
        }
        let beyond = anchors.last().is_none_or(|a| last_tick > a.tick + a.half_width);
        let problems = if beyond {
            vec!["recovered: calls after the last saved clock anchor have extrapolated times".to_string()]
        } else {
            Vec::new()
        };
        (Timebase::fit(anchors, problems), beyond)
    } else {
        (Timebase::monotonic(), false)
    };
    // The killed run's wall time is not known.
    let mut call_paths = crate::callpath::collect(&names, &records, &timebase, 0);
    let (regions, kept) = crate::profile::merge(&names, records, &timebase);
    call_paths.renumber_threads(|index| kept.iter().position(|k| k.0 as i64 == index).map(|p| p as i64));
    let mut info = meta.info.clone();
    info.thread_os_ids = kept.iter().map(|t| t.1).collect();
    info.extra.extend(crate::metadata::clock_attrs(&timebase.report(), meta.clock_note.as_deref()));
    let profile = RankProfile { info, regions, call_paths: Some(call_paths), ..Default::default() };
    Ok(RecoveredRun { dir: dir.to_path_buf(), meta, file, profile, calls, bad_chunks, torn_words, extrapolated })
}

/// Run directories of `target` left behind (real directories only: links are not followed).
pub fn find_runs(target: &Path) -> Vec<PathBuf> {
    let prefix = dir_prefix(target);
    let mut parents = vec![target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf()];
    let p = spill_parent(target);
    if !parents.contains(&p) {
        parents.push(p);
    }
    let mut out = Vec::new();
    for parent in parents {
        let Ok(rd) = std::fs::read_dir(&parent) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) && e.file_type().is_ok_and(|t| t.is_dir()) && e.path().join(META_FILE).is_file() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
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
        let words = [0xFFFF_FFFFu64, 10, 20, 5u64 << 32 | 2, 0xFFFF_FFFF, 99];
        let mut got = Vec::new();
        let scan = scan_chunk(&words, |c| got.push((c.start, c.end)));
        assert_eq!(got, vec![(10, 20), (15, 16)]);
        assert_eq!((scan.calls, scan.escapes, scan.used, scan.torn), (2, 1, 4, 2));
    }
}
