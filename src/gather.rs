//! Finalize over MPI: every rank's data goes to rank 0, which writes the one file rank by rank
//! (so its memory holds its own data plus one other rank's at a time), then tells every rank
//! whether the write succeeded. If it did not, every rank writes its own per-rank file
//! (`output`). Chosen by `route`; calls nothing above it.

use crate::encode::{decode, encode};
use crate::metadata::run_metadata;
use crate::model::{AttrValue, RankProfile};
use crate::mpi_comm::{self, MpiContext, tag};
use crate::output::{RunContext, report, write_rank_file};
use crate::status::{Error, Result, Status};
use crate::warn;
use crate::writer::{Plan, ProfileFile, Written, layout_writer};
use std::collections::BTreeSet;

/// Attributes of `rank<N>/` known only to the MPI layer.
fn mpi_attrs(profile: &mut RankProfile, rank: i32, world_rank: Option<i64>, offset: (i64, i64)) {
    let extra = &mut profile.info.extra;
    extra.push(("mpi_rank".into(), AttrValue::Int(rank as i64)));
    if let Some(w) = world_rank {
        extra.push(("world_rank".into(), AttrValue::Int(w)));
    }
    extra.push(("clock_offset_ns".into(), AttrValue::Int(offset.0)));
    extra.push(("clock_offset_rtt_ns".into(), AttrValue::Int(offset.1)));
}

/// `notes` prints this rank's notes on finalize (`route::write_run`).
pub fn write_collective(run: RunContext<'_>, ctx: MpiContext, mut profile: RankProfile, notes: &mut dyn FnMut()) -> Result<Status> {
    // Every rank tells rank 0 its world rank through the profile itself.
    profile.info.extra.push(("world_rank".into(), AttrValue::Int(ctx.world_rank as i64)));
    // This rank's part of the summary, from its statistics and call paths.
    let local = crate::spread::Local::of(&profile);
    // Rank 0 learns the run's size first, so the columnar layout sizes its columns once.
    let plan = gather_plan(&ctx, Plan::of(&profile))?;
    let outcome = if ctx.rank == 0 { gather_and_write(run, &ctx, &mut profile, plan).map(Some) } else { send_to_root(&ctx, &profile).map(|_| None) };
    // Everyone learns the result: 0 = written, else the status code.
    let mut code: i32 = match &outcome {
        Ok(_) => 0,
        Err(e) => e.status.code(),
    };
    let shared = ctx.comm.bcast_value(&mut code, 0);
    if let Err(e) = &shared {
        warn::always(&format!("the outcome of the write could not be shared: {e}"));
        code = code.min(-1);
    }
    // The summary's numbers over the ranks (rank 0 prints it), by reductions: no call data.
    let wants = run.config.verbosity > 0 && run.config.summary != crate::config::SummaryMode::Off;
    let reduce_started = std::time::Instant::now();
    let table = if shared.is_ok() {
        crate::spread::reduce(&ctx.comm, &local, wants).unwrap_or_else(|e| {
            warn::once("summary-reduce", &format!("the summary table could not be computed: {e}"));
            None
        })
    } else {
        None
    };
    let reduced = reduce_started.elapsed();
    let rows = table.as_ref().map(|t| (t.flat.len(), t.tree.len()));
    let text = table.and_then(|t| crate::summary::text(run.config, &t));
    print_in_order(&ctx, shared.is_ok(), notes, outcome.ok().flatten(), text, run.config.verbosity);
    if let (Some((flat, tree)), true) = (rows, run.config.verbosity >= 2) {
        warn::always(&format!("finalize: the summary over {} ranks ({flat} regions, {tree} call paths) took {:.3} ms", ctx.size, reduced.as_secs_f64() * 1e3));
    }
    drop(ctx); // frees our communicator while MPI is still up
    if code == 0 {
        profile.release();
        return Ok(Status::Ok);
    }
    // Nothing is lost: each rank keeps its own data in a per-rank file.
    let rank = profile_rank(&profile);
    let size = world_size();
    write_rank_file(run, rank, size, profile, "the collective write on rank 0 failed")?;
    Err(Error::new(Status::WriteFailed, "rank 0 could not write the profile; every rank wrote its own file instead (see stderr)"))
}

/// Calls summed and threads maximized over the ranks.
fn gather_plan(ctx: &MpiContext, mine: Plan) -> Result<Plan> {
    let total = ctx.comm.allreduce(&[mine.total_calls], mpi_comm::SUM)?;
    let threads = ctx.comm.allreduce(&[mine.max_threads], mpi_comm::MAX)?;
    Ok(Plan { total_calls: total[0], max_threads: threads[0] })
}

fn profile_rank(p: &RankProfile) -> i64 {
    p.info
        .extra
        .iter()
        .find_map(|(k, v)| match (k.as_str(), v) {
            ("world_rank", AttrValue::Int(r)) => Some(*r),
            _ => None,
        })
        .unwrap_or(0)
}

fn world_size() -> i64 {
    mpi_comm::world_rank_size().map_or(1, |(_, s)| s)
}

/// What rank 0 prints once every rank's own lines are out.
struct Summary {
    written: Written,
    mpi: crate::model::mpi::Totals,
}

/// Every rank prints its notes, then rank 0 its summary table: the table after a barrier that
/// every rank enters once its lines are written, so that the launcher, which forwards each
/// rank's output as it comes, has no other rank's line to put inside the table. (Without the
/// barrier, the other ranks printed while rank 0's table was on its way.)
fn print_in_order(ctx: &MpiContext, comm_ok: bool, notes: &mut dyn FnMut(), summary: Option<Summary>, table: Option<String>, verbosity: u32) {
    use std::io::Write;
    notes();
    let _ = std::io::stderr().flush();
    let _ = std::io::stdout().flush();
    if comm_ok {
        let _ = ctx.comm.barrier();
    }
    if let Some(s) = summary {
        report(verbosity, &s.written, table, &s.mpi);
    }
}

fn send_to_root(ctx: &MpiContext, profile: &RankProfile) -> Result<Written> {
    let _go: u8 = ctx.comm.recv_value(0, tag::GO)?;
    ctx.comm.send_bytes(0, &encode(profile))?;
    Ok(Written { path: Default::default(), fallback_reason: None, note: None })
}

fn gather_and_write(run: RunContext<'_>, ctx: &MpiContext, own: &mut RankProfile, plan: Plan) -> Result<Summary> {
    let mut layout = layout_writer(run.config.layout, plan);
    let mut hosts = BTreeSet::new();
    let mut clock = crate::metadata::ClockSummary::default();
    let mut mpi = crate::model::mpi::Totals::default();
    let file = ProfileFile::create(&run.config.file_path);
    let mut hdf5_error: Option<String> = None;
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

    // Rank 0's own data is written in place (no copy of its calls); its attributes are put
    // back afterwards, for the per-rank file should the write fail.
    let saved = own.info.extra.clone();
    own.info.extra.retain(|(k, _)| k != "world_rank");
    mpi_attrs(own, 0, (ctx.world_rank != 0).then_some(ctx.world_rank as i64), ctx.clock_offsets[0]);
    hosts.insert(own.info.hostname.clone());
    mpi.add(own.mpi.as_ref());
    clock.add(0, &own.info);
    crate::metadata::apply_detail(run.config, own);
    write(&file, 0, own, &mut hdf5_error);
    own.info.extra = saved;

    // Receive rank by rank, even after a failure, so that no rank is left waiting.
    for r in 1..ctx.size {
        let bytes = ctx.comm.send_value(r, tag::GO, &1u8).and_then(|_| ctx.comm.recv_bytes(r, u64::MAX));
        match bytes.map_err(|e| e.to_string()).and_then(|b| decode(&b)) {
            Ok(mut p) => {
                let world = profile_rank(&p);
                p.info.extra.retain(|(k, _)| k != "world_rank");
                mpi_attrs(&mut p, r, (world != r as i64).then_some(world), ctx.clock_offsets[r as usize]);
                hosts.insert(p.info.hostname.clone());
                mpi.add(p.mpi.as_ref());
                clock.add(r as i64, &p.info);
                crate::metadata::apply_detail(run.config, &mut p);
                write(&file, r as usize, &p, &mut hdf5_error);
            }
            Err(e) => hdf5_error = hdf5_error.or(Some(format!("rank{r}: {e}"))),
        }
    }

    let file = file?;
    let size = ctx.size as i64;
    let mut meta = run_metadata(run.config, run.facts, size, hosts.len() as i64);
    meta.extend(clock.attrs());
    if hdf5_error.is_none() {
        if let Err(e) = file.write_metadata(&meta) {
            hdf5_error = Some(format!("metadata: {e}"));
        }
    }
    if hdf5_error.is_none() {
        let finished = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| layout.finish(file.file())));
        match finished {
            Ok(Ok(())) => {}
            Ok(Err(e)) => hdf5_error = Some(format!("index: {e}")),
            Err(_) => hdf5_error = Some("internal error while writing the index".into()),
        }
    }
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
    Ok(Summary { written, mpi })
}
