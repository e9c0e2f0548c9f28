//! The collective write of the schema-3 layouts (columnar, aggregate) over MPI: every rank
//! writes its own part of the one file through MPI-IO (on one node, with its own `pwrite`s:
//! `Way`); no rank receives another rank's calls.
//!
//! Rank 0 lays the file out with serial HDF5, from the unified `Census` (`unify`): it creates
//! the file privately (`writer::ProfileFile`, as every writer does), writes the metadata, the
//! region names and the `rank<N>` groups of the ranks that have counter or LIKWID results
//! (received from them one at a time: the one exception to "nothing through rank 0"), creates
//! every other dataset at its final size, contiguous and allocated (`writer::tables`), notes
//! where each starts in the file, closes it and broadcasts the offsets and the file's path.
//! Each rank learned its place in every dataset from one exclusive prefix sum of its counts;
//! it opens the file with MPI-IO and writes its calls and rows at offset + place, in rounds of
//! at most `BATCH` calls, each round one collective transfer (`MpiFile::write_pieces_all`: a
//! file view made of its pieces, then `MPI_File_write_all`). Then the file is closed, an
//! allreduce says whether every rank succeeded, and rank 0 moves the file into place and says
//! whether that worked.
//!
//! Every step that can fail on one rank ends in an operation every rank takes part in and
//! learns the failure from (a broadcast from rank 0 for what only rank 0 does, an allreduce
//! for the others); a rank that failed keeps taking part in the collective operations with
//! nothing to write, so nobody waits for it, and every rank then writes its own per-rank file
//! (`route`).
//!
//! `SCOPE_PROFILER_TEST_FAULT=<step>@<rank>` (for tests only, read once) makes rank `<rank>`
//! fail at `<step>`: `layout` (rank 0 laying the file out), `open` (opening it),
//! `write` (its data is bad: it writes nothing after its first round), `close` (closing it);
//! and `path`: on one node, rank `<rank>` cannot open the file by its path (every rank then
//! writes through MPI-IO).

use crate::encode::{decode, encode_groups};
use crate::metadata::run_metadata;
use crate::model::RankProfile;
use crate::mpi_comm::{self, MpiContext, MpiFile, tag};
use crate::output::{Outcome, RunContext};
use crate::status::{Error, Result, Status};
use crate::unify::Census;
use crate::warn;
use crate::writer::columnar::{self, Encoded, plain_bytes};
use crate::writer::tables::{Columns, Piece, Positions, RowData, Tables, rank_pieces, region_ids};
use crate::writer::{ProfileFile, RawFile, Written, aggregate};
use std::path::PathBuf;

/// Calls per rank and round of collective transfers: what bounds the memory of a rank's
/// encoded calls (17 bytes each, 17 MiB) whatever it recorded.
pub const BATCH: u64 = 1 << 20;

/// The test-only fault injection (see the module documentation).
pub const ENV_FAULT: &str = "SCOPE_PROFILER_TEST_FAULT";

fn fault(step: &str, rank: i32) -> bool {
    static FAULT: std::sync::OnceLock<Option<(String, i32)>> = std::sync::OnceLock::new();
    let f = FAULT.get_or_init(|| {
        let v = std::env::var(ENV_FAULT).ok()?;
        let (s, r) = v.trim().split_once('@')?;
        Some((s.to_string(), r.parse().ok()?))
    });
    f.as_ref().is_some_and(|(s, r)| s == step && *r == rank)
}

fn failed(msg: String) -> Error {
    Error::new(Status::WriteFailed, msg)
}

/// Write every rank's `profile` (with its MPI attributes and the metadata detail applied) into
/// one file, collectively. Collective; the outcome is the same on every rank.
pub fn write(run: RunContext<'_>, ctx: &MpiContext, profile: &RankProfile, census: &Census) -> Outcome {
    match write_all(run, ctx, profile, census) {
        Ok(o) => o,
        // An MPI operation failed: the ranks may not all know; each says so and falls back.
        Err(e) => {
            warn::always(&format!("rank {}: the collective write failed: {e}", ctx.rank));
            Outcome { code: e.status.code(), written: None, why: format!("the collective write failed ({e})") }
        }
    }
}

/// The first failure over all ranks: (status code, rank), (0, -1) when none. Collective.
fn agree(ctx: &MpiContext, mine: &Option<Error>) -> Result<(i32, i64)> {
    let all = ctx.comm.allreduce(&claim(ctx.rank, mine), mpi_comm::MIN)?;
    Ok(decided(all[0], all[1]))
}

/// This rank's part of `agree`'s reduction (a minimum): its status code and rank when it
/// failed, (0, i64::MAX) when not.
fn claim(rank: i32, mine: &Option<Error>) -> [i64; 2] {
    match mine {
        Some(e) => [e.status.code().min(-1) as i64, rank as i64],
        None => [0, i64::MAX],
    }
}

/// What `agree`'s reduction decided: the first failure's (status code, rank), (0, -1) when none.
fn decided(code: i64, rank: i64) -> (i32, i64) {
    (code as i32, if code == 0 { -1 } else { rank })
}

fn outcome(code: i32, rank: i64, step: &str, mine: &Option<Error>) -> Outcome {
    let own = mine.as_ref().map(|e| format!(": {e}")).unwrap_or_default();
    Outcome { code, written: None, why: format!("the collective write failed on rank {rank} while {step}{own}") }
}

fn write_all(run: RunContext<'_>, ctx: &MpiContext, profile: &RankProfile, census: &Census) -> Result<Outcome> {
    let comm = &ctx.comm;
    let mut phases = Phases::new(ctx.rank == 0 && run.config.verbosity >= 2);
    let layout = census.settings.layout();
    let plan = &census.plan;
    let cols = Columns::of(layout, plan);
    // Where this rank's part of every dataset goes.
    let counts = Positions::counts(plan, profile);
    let pos = Positions::from_counts(&comm.exscan(&counts, mpi_comm::SUM)?);
    // The counter and LIKWID results of the ranks that have them, to rank 0.
    if ctx.rank != 0 && census.grouped.contains(&(ctx.rank as i64)) {
        let _go: u8 = comm.recv_value(0, tag::GO)?;
        comm.send_bytes(0, &encode_groups(profile))?;
    }

    // A rank whose calls fit in one round encodes them before the file is there (while rank 0
    // lays it out; rank 0 right after); one with more writes them round by round as it
    // encodes them.
    let mut w = Rounds::new(&cols, plan, pos.calls, counts[0]);
    if fault("write", ctx.rank) {
        w.error = Some(failed("test fault injected: this rank's data is bad".into()));
    }
    let early = counts[0] <= BATCH;
    let mut rows = (early && ctx.rank != 0).then(|| encode_events(census, profile, &mut w));
    phases.mark("place");
    // Rank 0 lays the file out and shares where the datasets are, or that it failed.
    let laid = (ctx.rank == 0).then(|| lay_out(run, ctx, profile, census, layout));
    // One broadcast: rank 0's status, then (laid out) the offsets and the file's path.
    let shared = laid.as_ref().map(|l| match l {
        Ok((raw, offsets)) => {
            let mut b = 0i64.to_le_bytes().to_vec();
            b.extend(offsets.iter().flat_map(|o| o.to_le_bytes()));
            // The file's identity (device, inode; zeros if unknown), which a rank that writes
            // it by path on this node checks it opened.
            let id = std::fs::metadata(raw.path()).map_or((0, 0), |m| (std::os::unix::fs::MetadataExt::dev(&m), std::os::unix::fs::MetadataExt::ino(&m)));
            b.extend(id.0.to_le_bytes());
            b.extend(id.1.to_le_bytes());
            b.extend_from_slice(std::os::unix::ffi::OsStrExt::as_bytes(raw.path().as_os_str()));
            b
        }
        Err(e) => (e.status.code().min(-1) as i64).to_le_bytes().to_vec(),
    });
    let shared = comm.bcast_bytes(shared, 0)?;
    let status = shared.get(..8).map_or(-1, |b| i64::from_le_bytes(b.try_into().unwrap()));
    if status != 0 {
        let mine = laid.and_then(|l| l.err());
        return Ok(outcome(status as i32, 0, "laying the file out", &mine));
    }
    let n = cols.defs().len();
    let head = 8 + n * 8 + 16;
    if shared.len() <= head {
        return Err(Error::new(Status::Mpi, format!("rank 0 sent {} bytes of offsets and path, more than {head} expected", shared.len())));
    }
    let words: Vec<u64> = shared[8..head].chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
    let (offsets, id) = (words[..n].to_vec(), (words[n], words[n + 1]));
    let path = PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&shared[head..]));
    // The same on every rank: what every rank was told.
    let way = Way::of(census, id);
    let raw = laid.and_then(|l| l.ok()).map(|(raw, _)| raw);
    if early && ctx.rank == 0 {
        rows = Some(encode_events(census, profile, &mut w));
    }

    phases.mark("lay out");
    // Every rank opens it: on one node by its path, and if any rank cannot (another file
    // system at that path in its mount namespace, say), every rank through MPI-IO instead.
    let (mut way, mut opened) = (way, Target::open(way, comm, &path, id, ctx.rank));
    let injected = fault("open", ctx.rank).then(|| failed("test fault injected while opening the file".into()));
    // On one node one reduction answers both questions: could every rank open the file by its
    // path, and did any fail (there, only by an injected fault: opening by path fails only as
    // "not by its path", which sends every rank to MPI-IO and its own agreement below).
    let mut agreed = None;
    if way == Way::OneNode {
        let [code, rank] = claim(ctx.rank, &injected);
        let all = comm.allreduce(&[i64::from(opened.is_ok()), code, rank], mpi_comm::MIN)?;
        if all.first() == Some(&1) {
            agreed = Some(decided(all[1], all[2]));
        } else {
            match opened {
                Ok(f) => {
                    let _ = f.close();
                }
                Err(e) => warn::once("collective-by-path", &format!("rank {}: {e}; every rank writes through MPI-IO instead", ctx.rank)),
            }
            way = Way::MpiIo;
            opened = Target::open(way, comm, &path, id, ctx.rank);
        }
    }
    let (file, mine) = match opened {
        Ok(f) => (Some(f), injected),
        Err(e) => (None, injected.or(Some(e))),
    };
    let (code, rank) = match agreed {
        Some(both) => both,
        None => agree(ctx, &mine)?,
    };
    if code != 0 {
        if let Some(f) = file {
            let _ = f.close();
        }
        if let Some(r) = raw {
            r.abandon();
        }
        return Ok(outcome(code, rank, way.opening(), &mine));
    }
    let file = file.expect("opened on every rank");

    phases.mark("open");
    // Every rank writes its part, in the same number of rounds.
    w.file = Some(&file);
    w.offsets = &offsets;
    let rows = match rows {
        Some(rows) => rows,
        None => encode_events(census, profile, &mut w),
    };
    phases.mark("encode");
    let pieces = match w.error {
        None => rank_pieces(&cols, plan, &region_ids(plan), ctx.rank as u32, profile, &rows, &pos).unwrap_or_else(|e| {
            w.error = Some(failed(format!("rank {}: {e}", ctx.rank)));
            Vec::new()
        }),
        Some(_) => Vec::new(),
    };
    while w.done + 1 < w.rounds {
        w.round(0, &[]);
    }
    let staged = w.staged.len();
    w.round(staged, &pieces);
    let mut mine = w.error.take();
    drop(w);
    phases.mark("write");
    if let Err(e) = file.close() {
        mine.get_or_insert(e);
    }
    if fault("close", ctx.rank) {
        mine.get_or_insert(failed("test fault injected while closing the file".into()));
    }
    let (code, rank) = agree(ctx, &mine)?;
    if code != 0 {
        if let Some(r) = raw {
            r.abandon();
        }
        return Ok(outcome(code, rank, "writing its part", &mine));
    }

    phases.mark("close");
    // Rank 0 moves the file into place.
    let placed: Option<Result<Written>> = raw.map(|r| r.finish().inspect_err(|e| warn::always(&format!("profile NOT moved into place: {e}"))));
    let mut code: i32 = match &placed {
        Some(Err(e)) => e.status.code().min(-1),
        _ => 0,
    };
    comm.bcast_value(&mut code, 0)?;
    if code != 0 {
        let mine = placed.and_then(|p| p.err());
        return Ok(outcome(code, 0, "moving the file into place", &mine));
    }
    let written = placed.and_then(|p| p.ok());
    if let Some(msg) = written.as_ref().and_then(|w| w.fallback_message()) {
        warn::always(&msg);
    }
    phases.mark("move into place");
    phases.say(way);
    Ok(Outcome { code: 0, written, why: String::new() })
}

/// How long each step took on rank 0 (said at verbosity 2).
struct Phases {
    on: bool,
    last: std::time::Instant,
    done: Vec<(&'static str, f64)>,
}

impl Phases {
    fn new(on: bool) -> Phases {
        Phases { on, last: std::time::Instant::now(), done: Vec::new() }
    }

    fn mark(&mut self, what: &'static str) {
        if self.on {
            let now = std::time::Instant::now();
            self.done.push((what, (now - self.last).as_secs_f64()));
            self.last = now;
        }
    }

    fn say(&self, way: Way) {
        if self.on {
            let steps: Vec<String> = self.done.iter().map(|(w, t)| format!("{w} {t:.3} s")).collect();
            warn::always(&format!("collective write on rank 0 ({}): {}", way.name(), steps.join(", ")));
        }
    }
}

/// How the ranks write their parts into the file rank 0 laid out.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Way {
    /// MPI-IO's collective transfers: ranks on several nodes (or asked for). On a parallel
    /// file system the MPI library gathers the pieces at a few aggregators that write large
    /// blocks.
    MpiIo,
    /// Every rank on one node (the same kernel): each writes its pieces with `pwrite` into the
    /// file by its path (checked to be the one rank 0 made). MPI-IO would only copy the bytes
    /// between processes of the node on their way to the same page cache, and loading its
    /// components costs each process milliseconds of CPU at its first file.
    OneNode,
}

impl Way {
    /// From what every rank holds alike: the census and the file's identity from rank 0.
    fn of(census: &Census, id: (u64, u64)) -> Way {
        if census.kernel.is_some() && !census.settings.mpiio && id != (0, 0) { Way::OneNode } else { Way::MpiIo }
    }

    fn name(self) -> &'static str {
        match self {
            Way::MpiIo => "MPI-IO",
            Way::OneNode => "one node: pwrite by every rank",
        }
    }

    fn opening(self) -> &'static str {
        match self {
            Way::MpiIo => "opening the file with MPI-IO",
            Way::OneNode => "opening the file",
        }
    }
}

/// The file as every rank writes it.
enum Target {
    Mpi(MpiFile),
    OneNode(std::fs::File),
}

impl Target {
    /// Open the file at `path` the `way` every rank does (collective for MPI-IO).
    fn open(way: Way, comm: &mpi_comm::Comm, path: &std::path::Path, id: (u64, u64), rank: i32) -> Result<Target> {
        match way {
            Way::MpiIo => comm.open_file(path).map(Target::Mpi),
            Way::OneNode => {
                use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
                if fault("path", rank) {
                    return Err(failed(format!("test fault injected: {} cannot be opened by its path here", path.display())));
                }
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(path)
                    .map_err(|e| failed(format!("opening {}: {e}", path.display())))?;
                let m = f.metadata().map_err(|e| failed(format!("{}: {e}", path.display())))?;
                if (m.dev(), m.ino()) != id {
                    return Err(failed(format!("{} is not the file rank 0 laid out (another file system at that path here)", path.display())));
                }
                Ok(Target::OneNode(f))
            }
        }
    }

    /// This rank's pieces (offset in the file, bytes), in one round.
    fn write(&self, pieces: &[(u64, &[u8])]) -> Result<()> {
        match self {
            Target::Mpi(f) => f.write_pieces_all(pieces),
            Target::OneNode(f) => {
                for &(at, bytes) in pieces {
                    std::os::unix::fs::FileExt::write_all_at(f, bytes, at).map_err(|e| failed(format!("writing {} bytes at {at}: {e}", bytes.len())))?;
                }
                Ok(())
            }
        }
    }

    /// Close it (collective for MPI-IO), with what closing reports.
    fn close(self) -> Result<()> {
        match self {
            Target::Mpi(f) => f.close(),
            Target::OneNode(f) => {
                let fd = std::os::fd::IntoRawFd::into_raw_fd(f);
                // SAFETY: the descriptor was just taken out of the File, closed once here.
                match unsafe { libc::close(fd) } {
                    0 => Ok(()),
                    _ => Err(failed(format!("closing the file: {}", std::io::Error::last_os_error()))),
                }
            }
        }
    }
}

/// Rank 0: the file with everything but the ranks' parts (see the module documentation); the
/// offsets of the datasets in the order of `Columns`. Receives the `rank<N>` groups of the
/// ranks that have them, also after a failure (no rank may be left waiting).
fn lay_out(run: RunContext<'_>, ctx: &MpiContext, own: &RankProfile, census: &Census, layout: crate::config::Layout) -> Result<(RawFile, Vec<u64>)> {
    let file = ProfileFile::create(&run.config.file_path);
    let mut meta = run_metadata(run.config, run.facts, ctx.size as i64, census.hosts.len() as i64);
    meta.extend(census.clock.attrs());
    let mut error: Option<String> = None;
    let mut offsets = Vec::new();
    if let Ok(f) = &file {
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> hdf5::Result<Vec<u64>> {
            f.write_metadata(&meta)?;
            let tables = Tables::create(f.file(), layout, &census.plan)?;
            f.write_rank_groups(0, own)?;
            Ok(tables.offsets())
        }));
        match made {
            Ok(Ok(o)) => offsets = o,
            Ok(Err(e)) => error = Some(e.to_string()),
            Err(_) => error = Some("internal error while laying the file out".into()),
        }
    }
    for &r in census.grouped.iter().filter(|&&r| r != 0) {
        let bytes = ctx.comm.send_value(r as i32, tag::GO, &1u8).and_then(|_| ctx.comm.recv_bytes(r as i32, u64::MAX));
        match bytes.map_err(|e| e.to_string()).and_then(decode) {
            Ok(p) => {
                if let (Ok(f), None) = (&file, &error) {
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.write_rank_groups(r as usize, &p))) {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => error = Some(format!("rank{r}: {e}")),
                        Err(_) => error = Some(format!("rank{r}: internal error while writing")),
                    }
                }
            }
            Err(e) => error = error.or(Some(format!("rank{r}: {e}"))),
        }
    }
    let file = file.inspect_err(|e| warn::always(&format!("profile NOT written: {e}")))?;
    if fault("layout", ctx.rank) {
        error.get_or_insert("test fault injected".into());
    }
    if let Some(e) = error {
        file.abandon();
        let msg = format!("profile NOT written: error while laying out {}: {e}", run.config.file_path.display());
        warn::always(&msg);
        return Err(failed(msg));
    }
    Ok((file.close_for_raw_writes()?, offsets))
}

/// Encode the rank's calls into the rounds' staging (columnar) and return its rows.
fn encode_events(census: &Census, profile: &RankProfile, w: &mut Rounds<'_>) -> Vec<RowData> {
    if census.settings.layout() != crate::config::Layout::Columnar {
        return profile.regions.iter().map(aggregate::row).collect();
    }
    let mut rows = Vec::with_capacity(profile.regions.len());
    for region in &profile.regions {
        if w.error.is_some() {
            break;
        }
        // Encoded straight into the staging, which is written whenever a round is full.
        let mut staged = std::mem::replace(&mut w.staged, Encoded::new());
        let p = columnar::encode_region_onto(region, census.plan.max_threads, &mut staged, |e| {
            w.flush_full(e);
            Ok::<(), ()>(())
        })
        .unwrap_or_default();
        w.staged = staged;
        if p.count as usize != region.calls() {
            w.error.get_or_insert(failed(format!("region '{}': {} of {} calls encoded", region.name, p.count, region.calls())));
        }
        rows.push(columnar::row(region, p));
    }
    rows
}

/// The rounds of collective transfers of one rank (the same number on every rank).
struct Rounds<'a> {
    /// The file and its datasets' offsets, once open.
    file: Option<&'a Target>,
    offsets: &'a [u64],
    cols: &'a Columns,
    rounds: u64,
    done: u64,
    /// This rank's first event, and the next one to write.
    next_event: u64,
    thread_width: usize,
    /// This rank's encoded calls waiting for their round (from `next_event` on).
    staged: Encoded,
    error: Option<Error>,
}

impl<'a> Rounds<'a> {
    /// For a rank whose first event is `first_event`, with `calls` calls.
    fn new(cols: &'a Columns, plan: &crate::writer::Plan, first_event: u64, calls: u64) -> Rounds<'a> {
        // The staging holds at most a round's calls and a slab: reserved once. Mappings of
        // their own (`PageVec`): a few MiB freed through malloc would move glibc's mmap
        // threshold for the host's allocations after finalize.
        let n = (calls.min(BATCH) as usize).saturating_add(crate::model::SLAB.min(calls as usize));
        let thread_width = columnar::thread_width(plan.max_threads);
        let staged = Encoded::with_capacity(n, thread_width);
        Rounds {
            file: None,
            offsets: &[],
            cols,
            rounds: plan.max_rank_calls.div_ceil(BATCH).max(1),
            done: 0,
            next_event: first_event,
            thread_width,
            staged,
            error: None,
        }
    }

    /// After a slab was encoded onto `staged` (taken out of `self` meanwhile): write a round
    /// whenever more than `BATCH` calls wait (the last round takes the rest, with the rows).
    /// After an error nothing more is written: the staging is emptied, so that it stays within
    /// a round and a slab whatever the rank recorded.
    fn flush_full(&mut self, staged: &mut Encoded) {
        while staged.len() as u64 > BATCH && self.error.is_none() {
            if self.done + 1 >= self.rounds {
                self.error = Some(failed("more calls than announced".into()));
                break;
            }
            self.round_of(staged, BATCH as usize, &[]);
        }
        if self.error.is_some() {
            staged.clear();
        }
    }

    /// Where element `at` of column `column` is in the file, for `bytes` bytes of it.
    fn place(&self, column: usize, at: u64, bytes: usize) -> Result<u64> {
        let def = &self.cols.defs()[column];
        let size = def.ty.size() as u64;
        let n = bytes as u64 / size;
        if bytes as u64 % size != 0 || at + n > def.len || self.offsets[column] == u64::MAX {
            return Err(failed(format!("{} bytes at element {at} do not fit {} ({} elements)", bytes, def.path, def.len)));
        }
        Ok(self.offsets[column] + at * size)
    }

    /// One collective transfer: the first `calls` staged calls and `rows` (nothing after an
    /// error: the rank takes part with no pieces).
    fn round(&mut self, calls: usize, rows: &[Piece]) {
        let mut staged = std::mem::replace(&mut self.staged, Encoded::new());
        self.round_of(&mut staged, calls, rows);
        self.staged = staged;
    }

    /// `round` with the calls of `staged`.
    fn round_of(&mut self, staged: &mut Encoded, calls: usize, rows: &[Piece]) {
        let mut pieces: Vec<(u64, &[u8])> = Vec::new();
        if self.error.is_none() && calls > 0 {
            let (s, tw) = (&*staged, self.thread_width);
            let threads = s.thread_bytes();
            for (path, bytes) in [
                ("events/start_deltas", plain_bytes(&s.d[..calls])),
                ("events/durations", plain_bytes(&s.u[..calls])),
                ("events/thread_ids", &threads[..calls * tw]),
            ] {
                match self.place(self.cols.id(path), self.next_event, bytes.len()) {
                    Ok(at) => pieces.push((at, bytes)),
                    Err(e) => {
                        self.error.get_or_insert(e);
                    }
                }
            }
        }
        if self.error.is_none() {
            for p in rows {
                match self.place(p.column, p.at, p.bytes.len()) {
                    Ok(at) => pieces.push((at, &p.bytes)),
                    Err(e) => {
                        self.error.get_or_insert(e);
                    }
                }
            }
        }
        if self.error.is_some() {
            pieces.clear();
        }
        match self.file {
            Some(f) => {
                if let Err(e) = f.write(&pieces) {
                    self.error.get_or_insert(e);
                }
            }
            // Cannot happen (a rank writes rounds only once the file is open); never hang.
            None => {
                self.error.get_or_insert(failed("a round before the file was open".into()));
            }
        }
        self.done += 1;
        staged.remove_front(calls);
        self.next_event += calls as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain writes only with one kernel for every rank, MPI-IO not asked for, and the file's
    /// identity known (the ranks check they opened that file).
    #[test]
    fn the_ranks_write_by_themselves_only_on_one_node() {
        let census = |kernel: Option<&str>, mpiio: bool| {
            let settings = crate::unify::Settings { layout: "columnar".into(), collective: true, mpiio, verbosity: 0, summary: false, reference: None };
            Census { kernel: kernel.map(String::from), ..Census::of(0, &RankProfile::default(), "n1", settings) }
        };
        let k = Some("0b0c5e6d-1f2a-4c3b-9d8e-7f6a5b4c3d2e");
        assert_eq!(Way::of(&census(k, false), (5, 7)), Way::OneNode);
        assert_eq!(Way::of(&census(None, false), (5, 7)), Way::MpiIo);
        assert_eq!(Way::of(&census(k, true), (5, 7)), Way::MpiIo);
        assert_eq!(Way::of(&census(k, false), (0, 0)), Way::MpiIo);
    }
}
