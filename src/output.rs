//! Writing one file: a single process's profile, or one rank's own file when the ranks cannot
//! write one together (`write_rank_file`), each retried in a fallback directory when the
//! target cannot take it (`write_file`); the message saying where it went, the summary table.
//! Which of these a run takes, or a write over MPI (`gather`, `collective`), is chosen by
//! `route`.

use crate::config::Config;
use crate::metadata::run_metadata;
use crate::model::{AttrValue, RankProfile, RunFacts};
use crate::status::{Error, Result, Status};
use crate::warn;
use crate::writer::{Plan, ProfileFile, Written, layout_writer};
use std::path::{Path, PathBuf};

/// How a write over MPI ended, the same on every rank: `code` 0 (written) or the status code
/// of the failure; rank 0 knows where the file went; `why` says what failed, for the message
/// of the per-rank files every rank then writes.
pub struct Outcome {
    pub code: i32,
    pub written: Option<Written>,
    pub why: String,
}

/// What writing needs to know about the run: plain data, no profiler state.
#[derive(Clone, Copy)]
pub struct RunContext<'a> {
    pub config: &'a Config,
    pub facts: &'a RunFacts,
}

/// The `metadata/` clock attributes of a file holding one process's data.
fn clock_summary(rank: i64, profile: &RankProfile) -> Vec<(String, AttrValue)> {
    let mut summary = crate::metadata::ClockSummary::default();
    summary.add(rank, &profile.info);
    summary.attrs()
}

/// A single-process run: rank 0 of 1.
pub fn write_single(run: RunContext<'_>, profile: RankProfile) -> Result<Status> {
    let meta = run_metadata(run.config, run.facts, 1, 1);
    write_single_with(run, profile, meta)
}

/// `write_single` with the `metadata/` attributes given (recovery: those of the killed run).
pub fn write_single_with(run: RunContext<'_>, profile: RankProfile, meta: Vec<(String, AttrValue)>) -> Result<Status> {
    write_single_at(run, profile, meta).map(|_| Status::Ok)
}

/// `write_single_with`, saying where the file went (the target or a fallback).
pub fn write_single_at(run: RunContext<'_>, mut profile: RankProfile, mut meta: Vec<(String, AttrValue)>) -> Result<Written> {
    crate::metadata::apply_detail(run.config, &mut profile);
    meta.extend(clock_summary(0, &profile));
    let written = write_one(&run.config.file_path, run.config.layout, 0, &profile, &meta)?;
    // The summary table only when it is printed (verbosity 0: nothing is).
    if run.config.verbosity > 0 {
        let mut mpi = crate::model::mpi::Totals::default();
        mpi.add(profile.mpi.as_ref());
        let table = crate::spread::Local::of(&profile).table();
        let no_regions = table.flat.is_empty();
        report(run.config.verbosity, &written, crate::summary::text(run.config, &table), &mpi, no_regions);
    }
    profile.release();
    Ok(written)
}

/// A file holding one process's data as `rank<rank>/`, in `layout`, with `meta` as `metadata/`.
fn write_one(target: &Path, layout: crate::config::Layout, rank: usize, profile: &RankProfile, meta: &[(String, AttrValue)]) -> Result<Written> {
    write_file(target, |file| {
        let mut w = layout_writer(layout, Plan::of(profile));
        file.write_metadata(meta)?;
        file.write_rank(rank, profile, w.as_mut())?;
        w.finish(file.file())
    })
}

/// `<dir>/<stem>.rank<N>.h5` next to the target.
pub fn rank_file_path(target: &Path, rank: i64) -> PathBuf {
    let mut target = target.to_path_buf();
    if target.is_dir() {
        target.push(crate::config::DEFAULT_FILE);
    }
    let stem = target.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "profiling_data".into());
    target.with_file_name(format!("{stem}.rank{rank}.h5"))
}

/// This process's own file, named with its rank, when the ranks cannot write one file together.
/// `scope_profiler_merge` (or sp_merge_rank_files) combines such files into the normal one.
pub fn write_rank_file(run: RunContext<'_>, rank: i64, size: i64, profile: RankProfile, why: &str) -> Result<Written> {
    let meta = run_metadata(run.config, run.facts, size, 1);
    write_rank_file_with(run, rank, profile, Some(why), meta)
}

/// `write_rank_file` with the `metadata/` attributes given; `why` None: no message.
pub fn write_rank_file_with(run: RunContext<'_>, rank: i64, mut profile: RankProfile, why: Option<&str>, mut meta: Vec<(String, AttrValue)>) -> Result<Written> {
    let target = rank_file_path(&run.config.file_path, rank);
    meta.retain(|(k, _)| k != "num_nodes");
    meta.push(("partial_rank_file".into(), AttrValue::Int(1)));
    meta.extend(clock_summary(rank, &profile));
    crate::metadata::apply_detail(run.config, &mut profile);
    if !profile.info.extra.iter().any(|(k, _)| k == "world_rank") {
        profile.info.extra.push(("world_rank".into(), AttrValue::Int(rank)));
    }
    let written = write_one(&target, run.config.layout, rank as usize, &profile, &meta)?;
    profile.release();
    let Some(why) = why else { return Ok(written) };
    warn::once(
        "rank-file",
        &format!(
            "{why}: rank {rank} wrote its own file {}; combine the ranks' files with `scope_profiler_merge -o {} <files>`",
            written.path.display(),
            run.config.file_path.display()
        ),
    );
    Ok(written)
}

/// The first stage of the write after a termination signal: the small, valuable part of the
/// profile (statistics, call paths, metadata, counters: the aggregate layout, no calls) moved
/// into place at `rank`'s file name (None: a single process's target), leaving `profile` as it
/// was for the full write that replaces it. `meta` are the `metadata/` attributes.
pub fn write_statistics_first(run: RunContext<'_>, rank: Option<i64>, profile: &RankProfile, mut meta: Vec<(String, AttrValue)>) -> Result<Written> {
    let (target, index) = match rank {
        Some(r) => {
            meta.retain(|(k, _)| k != "num_nodes");
            meta.push(("partial_rank_file".into(), AttrValue::Int(1)));
            (rank_file_path(&run.config.file_path, r), r)
        }
        None => (run.config.file_path.clone(), 0),
    };
    meta.extend(clock_summary(index, profile));
    write_one(&target, crate::config::Layout::Aggregate, index as usize, profile, &meta)
}

/// Whether a failed write is the place's fault (the file system refused to store more: full,
/// over quota, an I/O error), so that another directory may take the file; or the data's (an
/// attribute HDF5 cannot store, a count that does not add up), which no other directory
/// changes. Errors of the HDF5 library say which layer failed; our own direct column writes
/// say "writing a column"; anything unknown counts as the place's (trying elsewhere loses
/// nothing).
pub fn is_place_error(e: &hdf5::Error) -> bool {
    use hdf5::{MajorErrorCode as Major, MinorErrorCode as Minor};
    match e.stack() {
        Some(stack) => {
            stack.contains_major(Major::Io)
                || [Minor::WriteError, Minor::SeekError, Minor::ReadError, Minor::Truncated, Minor::CantFlush, Minor::SysErrStr, Minor::CantCloseFile, Minor::FileOpen]
                    .into_iter()
                    .any(|m| stack.contains_minor(m))
        }
        None => {
            let text = e.to_string();
            text.starts_with("writing a column") || !DATA_ERRORS.iter().any(|d| text.contains(d))
        }
    }
}

/// Our own errors that are about the data, not the place (see the layout writers).
const DATA_ERRORS: &[&str] = &["more calls than announced", "calls encoded", "calls written of", "column write past its end", "is damaged"];

/// Create the file (or its fallback), fill it with `fill`, move it into place.
///
/// When writing fails because of the place (a full file system, a quota: `is_place_error`),
/// the file is written again from the start in a fallback directory ($TMPDIR, /tmp, $HOME;
/// the next one if that fails too): `fill` is called once per attempt and must write
/// everything each time. When it fails because of the data, nothing is retried: the message
/// says what HDF5 refused.
pub fn write_file(target: &Path, mut fill: impl FnMut(&ProfileFile) -> hdf5::Result<()>) -> Result<Written> {
    let mut file = ProfileFile::create(target).inspect_err(|e| warn::always(&format!("profile NOT written: {e}")))?;
    let mut tried = Vec::new();
    // Flushed in the attempt, so that a file system full by the time of the metadata is
    // caught here too.
    while let Err(e) = fill(&file).and_then(|_| file.file().flush()) {
        let (dest, dir) = file.destination();
        if !is_place_error(&e) {
            let msg = format!(
                "profile NOT written: the data could not be stored in {} (HDF5: {e}); this is not a problem of the directory, so no other one was tried",
                dest.display()
            );
            file.abandon();
            warn::always(&msg);
            return Err(Error::new(Status::WriteFailed, msg));
        }
        let reason = format!("writing {} failed (HDF5: {e})", dest.display());
        tried.push(dir);
        file.abandon();
        file = match ProfileFile::create_fallback(target, reason.clone(), &tried) {
            Ok(f) => f,
            Err(_) => {
                let msg = format!("profile NOT written: {reason}, and no fallback directory ($TMPDIR, /tmp, $HOME) could take it");
                warn::always(&msg);
                return Err(Error::new(Status::WriteFailed, msg));
            }
        };
    }
    let written = file.finish().inspect_err(|e| warn::always(&format!("profile NOT moved into place: {e}")))?;
    if let Some(msg) = written.fallback_message() {
        warn::always(&msg);
    }
    Ok(written)
}

/// The summary table, the MPI share when MPI calls were recorded, and where the file is
/// (verbosity >= 1). A run that recorded MPI calls and no region (`no_regions`) gets no
/// empty table but what the file holds and the command that shows it.
pub fn report(verbosity: u32, written: &Written, table: Option<String>, mpi: &crate::model::mpi::Totals, no_regions: bool) {
    if verbosity == 0 {
        return;
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match mpi.line() {
        Some(_) if no_regions => {
            let _ = writeln!(out, "{}", mpi.only_mpi_line(&written.path.display().to_string()));
        }
        line => {
            if let Some(table) = table {
                let _ = write!(out, "{table}");
            }
            if let Some(line) = line {
                let _ = writeln!(out, "{line}");
            }
        }
    }
    let _ = writeln!(out, "profile written to {}", written.path.display());
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An attribute HDF5 cannot store (an empty name) is the data's fault: written once, not
    /// again in a fallback directory, and the message says what was refused; nothing is left.
    /// A full disk (our direct column writes say so) is the place's.
    #[test]
    fn data_errors_are_not_retried_elsewhere() {
        let dir = std::env::temp_dir().join(format!("sp_output_test_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut attempts = 0;
        let err = write_file(&dir.join("bad.h5"), |f| {
            attempts += 1;
            crate::writer::put_int(f.file(), "", 1)
        })
        .unwrap_err();
        assert_eq!(attempts, 1, "a data error is not retried in a fallback directory");
        assert_eq!(err.status, Status::WriteFailed);
        assert!(err.message.contains("the data could not be stored") && err.message.contains("not a problem of the directory"), "{}", err.message);
        assert!(!err.message.contains("fallback directory"), "{}", err.message);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "nothing is left");
        assert!(!is_place_error(&hdf5::Error::from("rank 3 has more calls than announced (5 > 4)")));
        assert!(is_place_error(&hdf5::Error::from("writing a column at byte 4096: No space left on device (os error 28)")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
