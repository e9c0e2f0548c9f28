//! Where a finished run goes: over MPI one file for every rank, written collectively
//! (`collective`, the schema-3 layouts) or through rank 0 (`gather`, the regions layout); this
//! process's own file, or one file per rank when the ranks cannot meet (`output`), as the
//! run's MPI situation allows. Above all of them: none calls back into here.

use crate::config::{Config, Layout, REGIONS_UP_TO_RANKS};
use crate::model::{AttrValue, RankProfile};
use crate::profile::ThreadRecord;
use crate::mpi_comm::{self, MpiContext};
use crate::output::{Outcome, RunContext, report, write_rank_file, write_single};
use crate::status::{Error, Result, Status};
use crate::unify::{Census, Settings};
use crate::warn;
use std::path::PathBuf;

/// Whether finalize may talk to the other ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gather {
    /// sp_finalize or MPI_Finalize: every rank is finalizing, gather into one file.
    Collective,
    /// Process exit: other ranks may never join, so each rank writes its own file.
    LocalOnly,
}

/// Write the run the way its MPI situation allows. `notes` prints this rank's notes on
/// finalize; it is called once, after the write (under MPI before rank 0 prints the summary
/// table: see `write_over_mpi`).
pub fn write_run(run: RunContext<'_>, mpi: Option<MpiContext>, profile: RankProfile, gather: Gather, notes: &mut dyn FnMut()) -> Result<Status> {
    let mut printed = false;
    let mut once = || {
        if !std::mem::replace(&mut printed, true) {
            notes();
        }
    };
    let result = write_run_with(run, mpi, profile, gather, &mut once);
    // Every path but the one over MPI (which prints them before the table) prints them here.
    once();
    result
}

fn write_run_with(run: RunContext<'_>, mpi: Option<MpiContext>, profile: RankProfile, gather: Gather, notes: &mut dyn FnMut()) -> Result<Status> {
    if gather == Gather::LocalOnly {
        let rank = mpi_comm::world_rank_size().or_else(mpi_comm::launcher_rank);
        // Freeing our communicator is local, but MPI's state at exit is unknown: leave it.
        std::mem::forget(mpi);
        return match rank {
            Some((rank, size)) if size > 1 => {
                write_rank_file(run, rank, size, profile, "the program exited without sp_finalize or MPI_Finalize").map(|_| Status::Ok)
            }
            _ => write_single(run, profile),
        };
    }
    match mpi {
        Some(ctx) if mpi_comm::is_usable() => write_over_mpi(run, ctx, profile, notes),
        Some(ctx) => {
            let (rank, size) = (ctx.world_rank as i64, ctx.size as i64);
            // MPI is gone: the communicator can no longer be freed.
            std::mem::forget(ctx);
            write_rank_file(run, rank, size, profile, "MPI was finalized before the profile could be gathered").map(|_| Status::Ok)
        }
        None if mpi_comm::is_usable() => match mpi_comm::attach(None)? {
            // MPI was initialized after sp_setup: gather over MPI_COMM_WORLD now.
            Some(ctx) => write_over_mpi(run, ctx, profile, notes),
            // The MPI plugin is missing (warned): one file per rank, as without MPI.
            None => write_local(run, profile, "the MPI plugin is missing"),
        },
        None => write_local(run, profile, "MPI is not initialized"),
    }
}

/// Without a usable MPI: a rank file when the launcher says this is one of several ranks.
fn write_local(run: RunContext<'_>, profile: RankProfile, why: &str) -> Result<Status> {
    match mpi_comm::launcher_rank() {
        Some((rank, size)) => write_rank_file(run, rank, size, profile, why).map(|_| Status::Ok),
        None => write_single(run, profile),
    }
}

/// The attributes a rank has under MPI: its rank in the communicator profiled, its rank in
/// MPI_COMM_WORLD where that differs, its clock offset to rank 0.
fn mpi_attrs(profile: &mut RankProfile, ctx: &MpiContext) {
    let extra = &mut profile.info.extra;
    extra.retain(|(k, _)| !matches!(k.as_str(), "mpi_rank" | "world_rank" | "clock_offset_ns" | "clock_offset_rtt_ns"));
    extra.push(("mpi_rank".into(), AttrValue::Int(ctx.rank as i64)));
    if ctx.world_rank != ctx.rank {
        extra.push(("world_rank".into(), AttrValue::Int(ctx.world_rank as i64)));
    }
    extra.push(("clock_offset_ns".into(), AttrValue::Int(ctx.clock_offset.0)));
    extra.push(("clock_offset_rtt_ns".into(), AttrValue::Int(ctx.clock_offset.1)));
}

/// Every rank of `ctx` writes the one file together (collective): the ranks unify what they
/// must agree on (`unify::census`), then write collectively or through rank 0 as the layout
/// (rank 0's) says; if that fails anywhere, every rank writes its own file. Rank 0 prints the
/// summary, from the cross-rank statistics of the unified regions.
fn write_over_mpi(run: RunContext<'_>, ctx: MpiContext, mut profile: RankProfile, notes: &mut dyn FnMut()) -> Result<Status> {
    mpi_comm::reset_traffic();
    let started = std::time::Instant::now();
    mpi_attrs(&mut profile, &ctx);
    let host = profile.info.hostname.clone();
    crate::metadata::apply_detail(run.config, &mut profile);
    // This rank's part of the summary (its statistics and call paths), taken before the write.
    let local = crate::spread::Local::of(&profile);
    let mine = Census::of(ctx.rank as i64, &profile, &host, Settings::of(run.config, ctx.size as i64));
    let census = match crate::unify::census(&ctx.comm, &mine) {
        Ok(c) => c,
        Err(e) => return fall_back(run, ctx, profile, &format!("the ranks could not agree on the file ({e})"), e.status.code()),
    };
    let agreed = started.elapsed().as_secs_f64();
    // Rank 0's settings (a rank with another environment must not take another path).
    let layout = census.settings.layout();
    let config = Config { layout, layout_explicit: true, verbosity: census.settings.verbosity, ..run.config.clone() };
    let run = RunContext { config: &config, ..run };
    let collective = layout != Layout::Regions && census.settings.collective;
    if ctx.rank == 0 && !collective && ctx.size as i64 > REGIONS_UP_TO_RANKS {
        let why = if layout == Layout::Regions { "the regions layout is" } else { "SCOPE_PROFILER_COLLECTIVE=0: the layout is" };
        warn::once(
            "mpi-through-rank0",
            &format!(
                "{why} written through rank 0 (every rank's calls are sent to it, and it writes them one rank after another): with {} ranks finalize takes as long as one process writing the whole run; the columnar and aggregate layouts are written by every rank collectively",
                ctx.size
            ),
        );
    }
    let outcome = if collective { crate::collective::write(run, &ctx, &profile, &census) } else { crate::gather::write(run, &ctx, &profile, &census) };
    if outcome.code != 0 {
        let Outcome { code, why, .. } = outcome;
        return fall_back(run, ctx, profile, &why, code);
    }
    if let (true, Some(path)) = (collective, &census.settings.reference) {
        // Tests only: the same data through rank 0, for the collective file to be compared with.
        let reference = Config { file_path: path.into(), ..config.clone() };
        let r = crate::gather::write(RunContext { config: &reference, ..run }, &ctx, &profile, &census);
        if r.code != 0 {
            warn::always(&format!("the reference file {path} was not written: {}", r.why));
        }
    }
    let written = started.elapsed().as_secs_f64();
    // The summary's numbers first (reductions every rank takes part in: rank 0's verbosity
    // decides, the same on every rank), then every rank's notes, then rank 0's table after a
    // barrier that every rank enters once its lines are written: the launcher, which forwards
    // each rank's output as it comes, then has no line of any rank to put inside the table.
    let summary = (config.verbosity >= 1).then(|| {
        // Rank 0, which prints the table, decides for every rank (the census carries it).
        let reduce_started = std::time::Instant::now();
        let table = crate::spread::reduce(&ctx.comm, &local, census.settings.summary);
        (mpi_totals(&ctx, &profile), table, reduce_started.elapsed())
    });
    {
        use std::io::Write;
        notes();
        if config.verbosity >= 2 && ctx.rank == 0 {
            let all = started.elapsed().as_secs_f64();
            warn::always(&format!("finalize over MPI on rank 0: agreeing {agreed:.3} s, writing {:.3} s, the summary's statistics {:.3} s", written - agreed, all - written));
        }
        say_traffic(&config, &ctx, collective);
        let _ = std::io::stderr().flush();
        let _ = std::io::stdout().flush();
        // Nothing follows at verbosity 0 (rank 0's, on every rank): no barrier to order it.
        if summary.is_some() {
            let _ = ctx.comm.barrier();
        }
        // The launcher reads each rank's stdout and stderr from separate pipes, in no fixed
        // order: at verbosity 2 (where every rank has printed notes) rank 0 gives it a moment
        // to pass the notes on before the table follows on stdout.
        if config.verbosity >= 2 && ctx.rank == 0 && summary.is_some() {
            std::thread::sleep(std::time::Duration::from_millis(150));
        }
    }
    match summary {
        Some((mpi_totals, Ok(table), _)) => {
            if let Some(written) = &outcome.written {
                let no_regions = table.as_ref().is_some_and(|t| t.flat.is_empty());
                let text = table.and_then(|t| crate::summary::text(&config, &t));
                report(config.verbosity, written, text, &mpi_totals, no_regions);
            }
        }
        Some((_, Err(e), _)) => warn::always(&format!("the summary over the ranks could not be computed: {e}")),
        None => {}
    }
    drop(ctx); // frees our communicator while MPI is still up
    profile.release();
    Ok(Status::Ok)
}

/// The program's MPI time over the ranks (the summary's MPI line): one reduction of four
/// numbers, whatever the ranks recorded (a rank that recorded none adds zeros).
fn mpi_totals(ctx: &MpiContext, profile: &RankProfile) -> crate::model::mpi::Totals {
    let mut mine = crate::model::mpi::Totals::default();
    mine.add(profile.mpi.as_ref());
    let v = [mine.ranks as i64, mine.app_ns, mine.mpi_ns, mine.calls as i64];
    match ctx.comm.allreduce(&v, mpi_comm::SUM) {
        Ok(s) if s.len() == 4 => crate::model::mpi::Totals { ranks: s[0].max(0) as u64, app_ns: s[1], mpi_ns: s[2], calls: s[3].max(0) as u64 },
        _ => mine,
    }
}

/// At verbosity 2, each rank's MPI traffic during finalize in one line.
fn say_traffic(config: &Config, ctx: &MpiContext, collective: bool) {
    if config.verbosity < 2 {
        return;
    }
    let t = mpi_comm::traffic();
    warn::always(&format!(
        "rank {} of {}: finalize over MPI ({}): {} collective operations, {} messages received ({} bytes, broadcasts included), {} sent ({} bytes)",
        ctx.rank,
        ctx.size,
        if collective { "collective write" } else { "through rank 0" },
        t.collectives,
        t.messages_received,
        t.bytes_received,
        t.messages_sent,
        t.bytes_sent
    ));
}

/// Nothing is lost: each rank keeps its own data in a per-rank file.
fn fall_back(run: RunContext<'_>, ctx: MpiContext, profile: RankProfile, why: &str, code: i32) -> Result<Status> {
    let rank = ctx.world_rank as i64;
    let size = mpi_comm::world_rank_size().map_or(ctx.size as i64, |(_, s)| s);
    say_traffic(run.config, &ctx, true);
    drop(ctx);
    write_rank_file(run, rank, size, profile, why)?;
    let status = Status::from_code(code).filter(|s| s.code() < 0).unwrap_or(Status::WriteFailed);
    Err(Error::new(status, format!("{why}; every rank wrote its own file instead (see stderr)")))
}

/// Where the write after a termination signal went.
#[derive(Debug)]
pub enum SignalWrite {
    /// One process: its profile.
    Single(PathBuf),
    /// One rank of several: its own file, to be merged with the others'.
    Rank { rank: i64, size: i64, path: PathBuf },
}

/// This process's world rank and size, if it is one of several, without calling MPI (after a
/// signal MPI may be in use by the interrupted thread): from the communicator's setup, else
/// the launcher's environment.
pub fn rank_without_mpi(mpi: Option<&MpiContext>) -> Option<(i64, i64)> {
    let launcher = mpi_comm::launcher_rank();
    let found = match mpi {
        Some(c) => Some((c.world_rank as i64, launcher.map_or(c.size as i64, |(_, s)| s))),
        None => launcher,
    };
    found.filter(|&(_, size)| size > 1)
}

/// What the raw dump of the calls after a signal needs besides the calls: the run
/// directory's `meta.json` (its `metadata` is replaced by the file's), the region names by id
/// and the recording threads (index, Linux thread id). None when the flight recorder's spill
/// data holds the calls already.
pub struct DumpPlan {
    pub meta: crate::spill::SpillMeta,
    pub names: Vec<(u32, String)>,
    pub threads: Vec<(u32, i64)>,
}

/// A stage of the write after a signal, done: told to the caller as it happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The statistics, metadata and counters (and the call paths, with `call_paths`) are in
    /// place under the file's name.
    Statistics { call_paths: bool },
    /// The raw dump of the calls is begun in the run directory given.
    Dumping,
    /// Every call is in the raw dump (the run directory given), `bytes` of calls.
    Dumped { bytes: u64 },
    /// The whole profile is in place in the run's layout (the dump is removed).
    Complete,
}

/// The last file of the write after a signal moved into place, with its stage: recorded at
/// its rename, under the lock `placement::abandon_unfinished` takes (`placement::when_placed`),
/// so that once a write cut short at its deadline has abandoned the rest, this names exactly
/// what is in place, even a file renamed a moment before its stage was told.
static IN_PLACE: parking_lot::Mutex<Option<(Stage, PathBuf)>> = parking_lot::Mutex::new(None);

/// What the write after a signal has in place (see `IN_PLACE`); None while it is busy
/// recording one (never waited for).
pub fn in_place() -> Option<(Stage, PathBuf)> {
    IN_PLACE.try_lock().and_then(|g| g.clone())
}

/// `write`, whose file is recorded as `stage` the moment it is moved into place.
fn placing<R>(stage: Stage, write: impl FnOnce() -> R) -> R {
    let _told = crate::placement::when_placed(Box::new(move |p| *IN_PLACE.lock() = Some((stage, p.to_path_buf()))));
    write()
}

/// Calls per file thread id (the statistics' counts), for `calls_*_per_thread`.
fn calls_per_thread(profile: &RankProfile) -> Vec<i64> {
    let mut out: Vec<i64> = vec![0; profile.info.thread_os_ids.len()];
    for r in &profile.regions {
        for (t, st) in &r.stats {
            let Ok(t) = usize::try_from(*t) else { continue };
            if t >= out.len() {
                out.resize(t + 1, 0);
            }
            out[t] += st.count as i64;
        }
    }
    out
}

/// The `metadata/` attributes saying how much of `calls` a stage keeps.
fn counts(calls: usize, per_thread: &[i64], kept: bool) -> Vec<(String, AttrValue)> {
    vec![
        ("calls_kept".to_string(), AttrValue::Int(if kept { calls as i64 } else { 0 })),
        ("calls_recorded".to_string(), AttrValue::Int(calls as i64)),
        ("calls_kept_per_thread".to_string(), AttrValue::IntList(if kept { per_thread.to_vec() } else { vec![0; per_thread.len()] })),
        ("calls_recorded_per_thread".to_string(), AttrValue::IntList(per_thread.to_vec())),
    ]
}

/// The first stage's file (aggregate layout, no calls): `Ok(path)` or, on failure, said.
fn statistics_stage(
    run: RunContext<'_>,
    rank: Option<(i64, i64)>,
    profile: &RankProfile,
    mut meta: Vec<(String, AttrValue)>,
    calls: usize,
    staged: &mut dyn FnMut(Stage, &std::path::Path),
) {
    let paths = profile.call_paths.is_some();
    meta.push(("signal_write_stage".into(), AttrValue::Str("statistics".into())));
    meta.push(("call_paths_kept".into(), AttrValue::Int(paths as i64)));
    meta.extend(counts(calls, &calls_per_thread(profile), false));
    match placing(Stage::Statistics { call_paths: paths }, || crate::output::write_statistics_first(run, rank.map(|r| r.0), profile, meta)) {
        Ok(w) => staged(Stage::Statistics { call_paths: paths }, &w.path),
        Err(e) => warn::always(&format!("the statistics could not be written first ({e}); writing the rest")),
    }
}

/// The metadata of every file of the write after a signal.
fn signal_metadata(run: RunContext<'_>, rank: Option<(i64, i64)>, extra: Vec<(String, AttrValue)>) -> Vec<(String, AttrValue)> {
    let size = rank.map_or(1, |(_, s)| s);
    let mut meta = crate::metadata::run_metadata(run.config, run.facts, size, 1);
    meta.extend(extra);
    meta
}

/// The raw dump of the calls in `records` (`spill::Dump`): every chunk of every thread's call
/// logs as recorded, thread by thread. Err says why not (the caller goes on without it).
fn dump_calls(
    records: &[ThreadRecord],
    anchors: &[crate::clock::Anchor],
    plan: DumpPlan,
    meta: Vec<(String, AttrValue)>,
    staged: &mut dyn FnMut(Stage, &std::path::Path),
) -> std::result::Result<(crate::spill::Dump, u64), String> {
    let mut order: Vec<&ThreadRecord> = records.iter().collect();
    order.sort_by_key(|r| r.index);
    let (mut chunks, mut words) = (0u64, 0u64);
    for r in &order {
        for log in r.data.logs() {
            log.for_each_chunk(|_, data| {
                if !data.is_empty() {
                    chunks += 1;
                    words += crate::spill::dump_chunk_words(data.len()) as u64;
                }
            });
        }
    }
    let mut dmeta = plan.meta;
    dmeta.metadata = meta;
    // What recovery writes itself is not saved (it would say it left them out).
    dmeta.metadata.retain(|(k, _)| !crate::recover::WRITTEN_METADATA.contains(&k.as_str()));
    dmeta.info.extra.retain(|(k, _)| !crate::recover::WRITTEN_RANK_ATTRS.contains(&k.as_str()));
    let mut dump = crate::spill::Dump::begin(&dmeta, &plan.names, &plan.threads, anchors, chunks, words, &mut |dir| staged(Stage::Dumping, dir))?;
    let mut failed = None;
    'all: for r in &order {
        for log in r.data.logs() {
            log.for_each_chunk(|h, data| {
                if failed.is_none() && !data.is_empty() {
                    failed = dump.chunk(h, data).err();
                }
            });
            if failed.is_some() {
                break 'all;
            }
        }
    }
    let result = match failed {
        Some(e) => Err(e),
        None => dump.finish(),
    };
    match result {
        Ok(bytes) => Ok((dump, bytes)),
        Err(e) => {
            let dir = dump.dir().display().to_string();
            dump.remove();
            Err(format!("writing {dir} failed: {e}"))
        }
    }
}

/// Profiles with more calls than this get their statistics in place before their call paths
/// are built (`write_early_after_signal`), and their calls in a raw dump once the statistics
/// with the call paths are in place; below it, the call paths (built from the calls: about
/// 10-50 ns a call in a release build) come with the statistics.
pub const PATHS_LATER_FROM_CALLS: usize = if cfg!(debug_assertions) { 1 << 15 } else { 1 << 20 };

/// The write after a signal of a large profile, most valuable first, called twice as the
/// profile is collected. Before its call paths are built (they take time in proportion to
/// the calls): its statistics, metadata and counters moved into place under the file's name
/// (`signal_write_stage` "statistics", `call_paths_kept` 0). Once they are built
/// (`profile.call_paths`): the same with the call paths (`call_paths_kept` 1), then, with
/// `dump`, every call of `records` in a raw dump at the speed the page cache takes it.
/// Returns the dump, which `write_after_signal` removes once the profile is in place in its
/// layout. Nothing for a profile of at most `PATHS_LATER_FROM_CALLS` calls, or one without
/// calls.
pub fn write_early_after_signal(
    run: RunContext<'_>,
    rank: Option<(i64, i64)>,
    profile: &RankProfile,
    records: &[ThreadRecord],
    timebase: &crate::clock::Timebase,
    extra: Vec<(String, AttrValue)>,
    dump: Option<DumpPlan>,
    staged: &mut dyn FnMut(Stage, &std::path::Path),
) -> Option<crate::spill::Dump> {
    let calls: usize = records.iter().flat_map(|r| r.data.logs()).map(|l| l.len()).sum();
    if run.config.layout == Layout::Aggregate || calls <= PATHS_LATER_FROM_CALLS {
        return None;
    }
    let meta = signal_metadata(run, rank, extra);
    statistics_stage(run, rank, profile, meta.clone(), calls, staged);
    profile.call_paths.as_ref()?;
    let plan = dump?;
    let mut m = meta;
    m.push(("signal_write_stage".into(), AttrValue::Str("calls".into())));
    m.extend(counts(calls, &calls_per_thread(profile), true));
    match dump_calls(records, timebase.anchors(), plan, m, staged) {
        Ok((d, bytes)) => {
            staged(Stage::Dumped { bytes }, d.dir());
            Some(d)
        }
        Err(e) => {
            warn::always(&format!("the calls could not be dumped before the profile is written ({e}); writing the whole profile"));
            None
        }
    }
}

/// After a termination signal no collective is possible (the other ranks are ending too, and
/// the interrupted thread may be inside MPI): no MPI call at all, one file per process, each
/// rank its own `<stem>.rank<N>.h5` without a message (the caller says it once per job).
/// `extra` joins the `metadata/` attributes.
///
/// Staged, most valuable first, since the launcher may kill the process at any moment (Open
/// MPI's mpirun one second after its SIGTERM), each stage told to `staged` when done. A large
/// profile went through `write_early_after_signal` first (statistics, then statistics with
/// call paths, then the raw dump of its calls, `dumped`). Then:
/// 1. when the profile keeps calls and has no dump, the statistics, call paths, metadata and
///    counters (the aggregate layout, `signal_write_stage` "statistics", `calls_kept` 0) are
///    moved into place under the file's name (with a dump they are there already);
/// 2. the whole profile in the run's layout replaces that file (`signal_write_stage`
///    "complete"), and the dump is removed.
///
/// A process killed in between keeps what was done.
pub fn write_after_signal(
    run: RunContext<'_>,
    mpi: Option<MpiContext>,
    profile: RankProfile,
    extra: Vec<(String, AttrValue)>,
    dumped: Option<crate::spill::Dump>,
    staged: &mut dyn FnMut(Stage, &std::path::Path),
) -> Result<SignalWrite> {
    let rank = rank_without_mpi(mpi.as_ref());
    // Freeing the communicator would be an MPI call.
    std::mem::forget(mpi);
    let mut meta = signal_metadata(run, rank, extra);
    let calls: usize = profile.regions.iter().map(|r| r.calls()).sum();
    if run.config.layout != Layout::Aggregate && calls > 0 && dumped.is_none() {
        statistics_stage(run, rank, &profile, meta.clone(), calls, staged);
    }
    meta.push(("signal_write_stage".into(), AttrValue::Str("complete".into())));
    meta.push(("call_paths_kept".into(), AttrValue::Int(profile.call_paths.is_some() as i64)));
    meta.extend(counts(calls, &calls_per_thread(&profile), true));
    let result = placing(Stage::Complete, || match rank {
        Some((rank, size)) => crate::output::write_rank_file_with(run, rank, profile, None, meta).map(|w| SignalWrite::Rank { rank, size, path: w.path }),
        None => crate::output::write_single_at(run, profile, meta).map(|w| SignalWrite::Single(w.path)),
    });
    if let Ok(SignalWrite::Rank { path, .. } | SignalWrite::Single(path)) = &result {
        staged(Stage::Complete, path);
        if let Some(d) = dumped {
            d.remove();
        }
    }
    // On failure the dump stays: `sptool recover` turns it into the profile.
    result
}
