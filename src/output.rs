//! Writing one file: a single process's profile, or one rank's own file when the ranks cannot
//! write one together (`write_rank_file`), each retried in a fallback directory when the
//! target cannot take it (`write_file`); the message saying where it went, the summary table.
//! Which of these a run takes, or the collective write (`gather`), is chosen by `route`.

use crate::config::Config;
use crate::metadata::run_metadata;
use crate::model::{AttrValue, RankProfile, RunFacts};
use crate::status::{Error, Result, Status};
use crate::warn;
use crate::writer::{Plan, ProfileFile, Written, layout_writer};
use std::path::{Path, PathBuf};

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
pub fn write_single_with(run: RunContext<'_>, mut profile: RankProfile, mut meta: Vec<(String, AttrValue)>) -> Result<Status> {
    crate::metadata::apply_detail(run.config, &mut profile);
    meta.extend(clock_summary(0, &profile));
    let written = write_one(&run.config.file_path, run.config.layout, 0, &profile, &meta)?;
    let mut mpi = crate::model::mpi::Totals::default();
    mpi.add(profile.mpi.as_ref());
    let table = crate::summary::text(run.config, &crate::spread::Local::of(&profile).table());
    report(run.config.verbosity, &written, table, &mpi);
    profile.release();
    Ok(Status::Ok)
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

/// Create the file (or its fallback), fill it with `fill`, move it into place.
///
/// When writing fails (a full file system, a quota), the file is written again from the start
/// in a fallback directory ($TMPDIR, /tmp, $HOME; the next one if that fails too): `fill` is
/// called once per attempt and must write everything each time.
pub fn write_file(target: &Path, mut fill: impl FnMut(&ProfileFile) -> hdf5::Result<()>) -> Result<Written> {
    let mut file = ProfileFile::create(target).inspect_err(|e| warn::always(&format!("profile NOT written: {e}")))?;
    let mut tried = Vec::new();
    // Flushed in the attempt, so that a file system full by the time of the metadata is
    // caught here too.
    while let Err(e) = fill(&file).and_then(|_| file.file().flush()) {
        let (dest, dir) = file.destination();
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
/// (verbosity >= 1).
pub fn report(verbosity: u32, written: &Written, table: Option<String>, mpi: &crate::model::mpi::Totals) {
    if verbosity == 0 {
        return;
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Some(table) = table {
        let _ = write!(out, "{table}");
    }
    if let Some(line) = mpi.line() {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "profile written to {}", written.path.display());
    let _ = out.flush();
}
