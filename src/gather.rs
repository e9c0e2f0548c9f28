//! Finalize over MPI through rank 0: every rank sends its data to rank 0, which writes the one
//! file rank by rank (its memory holds its own data plus one other rank's at a time), then
//! tells every rank whether the write succeeded. The regions layout is written this way, and
//! the schema-3 layouts when the collective write is turned off (`SCOPE_PROFILER_COLLECTIVE=0`,
//! the reference the collective write is tested against). The file is laid out from the
//! unified `Census`, as the collective write lays it out. Chosen by `route`, which makes each
//! rank write its own file if this fails; calls nothing above it.

use crate::encode::{decode, encode};
use crate::metadata::run_metadata;
use crate::model::RankProfile;
use crate::mpi_comm::{MpiContext, tag};
use crate::output::{Outcome, RunContext};
use crate::status::{Error, Result, Status};
use crate::unify::Census;
use crate::warn;
use crate::writer::{ProfileFile, Written, layout_writer};

/// Write every rank's `profile` (each rank's own, with its MPI attributes and the metadata
/// detail applied) into one file through rank 0. Collective.
pub fn write(run: RunContext<'_>, ctx: &MpiContext, profile: &RankProfile, census: &Census) -> Outcome {
    let outcome = if ctx.rank == 0 { gather_and_write(run, ctx, profile, census).map(Some) } else { send_to_root(ctx, profile).map(|_| None) };
    // Everyone learns the result: 0 = written, else the status code.
    let mut code: i32 = match &outcome {
        Ok(_) => 0,
        Err(e) => e.status.code(),
    };
    if let Err(e) = ctx.comm.bcast_value(&mut code, 0) {
        warn::always(&format!("the outcome of the write could not be shared: {e}"));
        code = code.min(-1);
    }
    Outcome { code, written: outcome.ok().flatten(), why: "the write through rank 0 failed".into() }
}

fn send_to_root(ctx: &MpiContext, profile: &RankProfile) -> Result<()> {
    let _go: u8 = ctx.comm.recv_value(0, tag::GO)?;
    ctx.comm.send_bytes(0, &encode(profile))
}

fn gather_and_write(run: RunContext<'_>, ctx: &MpiContext, own: &RankProfile, census: &Census) -> Result<Written> {
    let mut layout = layout_writer(census.settings.layout(), census.plan.clone());
    let file = ProfileFile::create(&run.config.file_path);
    let mut meta = run_metadata(run.config, run.facts, ctx.size as i64, census.hosts.len() as i64);
    meta.extend(census.clock.attrs());
    let mut hdf5_error: Option<String> = match &file {
        Ok(f) => f.write_metadata(&meta).err().map(|e| format!("metadata: {e}")),
        Err(_) => None,
    };
    // After the first error, keep receiving (no rank may be left waiting) but stop writing.
    // A panic must not stop the loop either: the ranks not yet received would wait forever.
    let mut write = |file: &Result<ProfileFile>, rank: usize, p: &RankProfile, error: &mut Option<String>| {
        if let (Ok(f), None) = (file, &*error) {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.write_rank(rank, p, layout.as_mut()))) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => *error = Some(format!("rank{rank}: {e}")),
                Err(_) => *error = Some(format!("rank{rank}: internal error while writing")),
            }
        }
    };
    // Rank 0's own data is written in place (no copy of its calls).
    write(&file, 0, own, &mut hdf5_error);
    // Receive rank by rank, even after a failure, so that no rank is left waiting.
    for r in 1..ctx.size {
        let bytes = ctx.comm.send_value(r, tag::GO, &1u8).and_then(|_| ctx.comm.recv_bytes(r, u64::MAX));
        match bytes.map_err(|e| e.to_string()).and_then(decode) {
            Ok(p) => write(&file, r as usize, &p, &mut hdf5_error),
            Err(e) => hdf5_error = hdf5_error.or(Some(format!("rank{r}: {e}"))),
        }
    }
    let file = file?;
    if hdf5_error.is_none() {
        let finished = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| layout.finish(file.file())));
        match finished {
            Ok(Ok(())) => {}
            Ok(Err(e)) => hdf5_error = Some(format!("index: {e}")),
            Err(_) => hdf5_error = Some("internal error while writing the index".into()),
        }
    }
    drop(layout);
    if let Some(e) = hdf5_error {
        file.abandon();
        let msg = format!("profile NOT written: error while writing {}: {e}", run.config.file_path.display());
        warn::always(&msg);
        return Err(Error::new(Status::WriteFailed, msg));
    }
    let written = file.finish().inspect_err(|e| warn::always(&format!("profile NOT moved into place: {e}")))?;
    if let Some(msg) = written.fallback_message() {
        warn::always(&msg);
    }
    Ok(written)
}
