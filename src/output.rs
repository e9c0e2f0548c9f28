//! Writing a finished run: the file, the message saying where it went, the summary table.

use crate::metadata::run_metadata;
use crate::profile::RankProfile;
use crate::profiler::Session;
use crate::status::{Error, Result, Status};
use crate::summary::{RegionStats, render};
use crate::warn;
use crate::writer::{ProfileFile, Written};

/// Write a single-process run (rank 0 of 1) and report it.
pub fn write_run(session: &Session, profile: RankProfile) -> Result<Status> {
    let meta = run_metadata(&session.config, &session.facts, 1, 1);
    let written = write_file(&session.config.file_path, |file| {
        file.write_metadata(&meta)?;
        file.write_rank(0, &profile)
    })?;
    report(session.config.verbosity, &written, profile.regions.iter().map(RegionStats::of).collect(), 1);
    Ok(Status::Ok)
}

/// Create the file (or its fallback), fill it with `fill`, move it into place.
pub fn write_file(target: &std::path::Path, fill: impl FnOnce(&ProfileFile) -> hdf5::Result<()>) -> Result<Written> {
    let file = ProfileFile::create(target).inspect_err(|e| warn::always(&format!("profile NOT written: {e}")))?;
    if let Err(e) = fill(&file) {
        file.abandon();
        let msg = format!("profile NOT written: HDF5 error while writing {}: {e}", target.display());
        warn::always(&msg);
        return Err(Error::new(Status::WriteFailed, msg));
    }
    let written = file.finish().inspect_err(|e| warn::always(&format!("profile NOT moved into place: {e}")))?;
    if let Some(reason) = &written.fallback_reason {
        warn::always(&format!("{reason}; profile written to {} instead", written.path.display()));
    }
    Ok(written)
}

/// The summary table and where the file is (verbosity >= 1).
pub fn report(verbosity: u32, written: &Written, stats: Vec<RegionStats>, ranks: usize) {
    if verbosity == 0 {
        return;
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", render(stats, ranks));
    let _ = writeln!(out, "profile written to {}", written.path.display());
    let _ = out.flush();
}
