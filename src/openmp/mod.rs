//! OpenMP constructs recorded through the OpenMP tools interface (OMPT, OpenMP 5.0), with no
//! annotation: the runtime (LLVM's libomp; GCC's libgomp has no OMPT) calls the tool's
//! callbacks (`ffi_ompt`, the C side) on its own threads, and each becomes a start or stop of a
//! region on the calling thread's recorder, keyed by the construct's code pointer and named at
//! finalize (`late`):
//!
//! - each thread's part of a parallel region (its implicit task): `omp parallel @ file:line`
//!   (`omp teams` for a league);
//! - barriers: `omp barrier @ ...` (explicit, and those the compiler calls like explicit ones:
//!   GCC's after a static loop), `omp barrier (implicit) @ ...` (the runtime's: at the end of a
//!   parallel region, at the end of a worksharing construct), and inside each its waiting time,
//!   `omp wait barrier @ ...` / `omp wait barrier (implicit) @ ...`; likewise `omp taskwait`,
//!   `omp taskgroup`, `omp reduction` and their `omp wait ...`;
//! - worksharing constructs as the runtime reports them: `omp for` (`omp do` in Fortran),
//!   `omp sections`, `omp single` (the thread that runs it), `omp workshare`, `omp
//!   distribute`, `omp taskloop`, `omp scope` (GCC compiles a loop with a static schedule
//!   without calling the runtime: no region for it; GCC's `single` has no end call: it ends at
//!   the thread's next barrier, worksharing construct or the end of its part of the region);
//! - explicit tasks, on request (`SCOPE_PROFILER_OPENMP=tasks`): `omp task @ ...`, a call per
//!   piece of a task run without interruption on one thread.
//!
//! A construct the runtime reports without a code pointer is named after the one it belongs
//! to: the implicit barrier at the end of a parallel region on a worker thread after the
//! parallel construct, the barrier at the end of a GCC loop after the loop.
//! A construct it reports with a code pointer inside itself (`in_runtime`: the program reached
//! it by a tail call) is named after the parallel region it is in, `omp barrier (in parallel)
//! @ ...`; a taskloop and its tasks after the taskgroup around them. A league's teams are
//! `omp teams` (their initial tasks), without the one-thread region libomp runs each team in.

use crate::config::env;
use crate::late::{self, Detached, Hold, Label, OmpOpen, Recording, Team, What, id_of};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What the user asked for with `SCOPE_PROFILER_OPENMP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Record OpenMP constructs.
    pub on: bool,
    /// Record explicit tasks too.
    pub tasks: bool,
    /// Asked for explicitly (a runtime without OMPT is then reported).
    pub wanted: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings { on: true, tasks: false, wanted: false }
    }
}

impl Settings {
    /// Parse `SCOPE_PROFILER_OPENMP`: unset or empty (on where the runtime has OMPT, silent
    /// otherwise), `0`/`off`, `1`/`on`, `tasks` (on, with tasks), or a comma list (`on,tasks`).
    pub fn parse(value: Option<&str>) -> Result<Settings, String> {
        let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else { return Ok(Settings::default()) };
        let mut s = Settings { on: true, tasks: false, wanted: true };
        for word in v.split(',').map(|w| w.trim().to_ascii_lowercase()) {
            match word.as_str() {
                "1" | "on" | "yes" | "true" => {}
                "0" | "off" | "no" | "false" => return Ok(Settings { on: false, tasks: false, wanted: false }),
                "tasks" => s.tasks = true,
                other => return Err(format!("unknown word '{other}': expected on, off or tasks")),
            }
        }
        Ok(s)
    }

    /// From the environment (a bad value warns once and means the default).
    pub fn from_env() -> Settings {
        let v = std::env::var(env::OPENMP).ok();
        Settings::parse(v.as_deref()).unwrap_or_else(|e| {
            crate::warn::once("env:openmp", &format!("ignoring {}={:?}: {e}", env::OPENMP, v.unwrap_or_default()));
            Settings::default()
        })
    }
}

/// Callbacks record (the profiler runs and OpenMP constructs are wanted).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The OpenMP runtime started the tool (its `initialize` ran).
static TOOL_STARTED: AtomicBool = AtomicBool::new(false);

/// The runtime started the tool.
pub fn note_tool_started() {
    TOOL_STARTED.store(true, Ordering::Release);
}

/// The OpenMP runtime's code in memory, [lo, hi) (both 0: unknown): a code pointer in it is
/// not the program's (see `in_runtime`).
static RUNTIME_LO: AtomicU64 = AtomicU64::new(0);
static RUNTIME_HI: AtomicU64 = AtomicU64::new(0);

/// The runtime's module is the one holding `addr` (an entry point the runtime handed the
/// tool): remember where its code lies.
pub fn note_runtime(addr: u64) {
    let modules = crate::symbols::loaded_modules();
    let Some(m) = modules.iter().find(|m| m.ranges.iter().any(|&(s, e)| (s..e).contains(&addr))) else { return };
    let lo = m.ranges.iter().map(|r| r.0).min().unwrap_or(0);
    let hi = m.ranges.iter().map(|r| r.1).max().unwrap_or(0);
    RUNTIME_LO.store(lo, Ordering::Relaxed);
    RUNTIME_HI.store(hi, Ordering::Relaxed);
}

/// A code pointer inside the OpenMP runtime (its GOMP layer included), not in the program.
/// The runtime hands one where the program reached it by a tail call: the compiler ended the
/// outlined body of a parallel region with a jump to `GOMP_barrier`, `__kmpc_barrier` or
/// `__kmpc_fork_call` (GCC does so on the path of a thread whose share of a static loop is
/// empty), so the return address the runtime takes is the one into its own code that called
/// the body (`GOMP_parallel`, the GOMP microtask wrapper, `__kmp_invoke_microtask`); and
/// libomp 14 gives its own address for a `taskloop`.
#[inline(always)]
pub fn in_runtime(codeptr: u64) -> bool {
    let lo = RUNTIME_LO.load(Ordering::Relaxed);
    codeptr.wrapping_sub(lo) < RUNTIME_HI.load(Ordering::Relaxed).wrapping_sub(lo)
}

/// Whether the callbacks record now.
#[inline(always)]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// The run starts (profiler setup).
pub fn on_setup() {
    let s = Settings::from_env();
    ACTIVE.store(s.on, Ordering::Release);
    check_runtime(&s);
}

/// Recording stops (finalize).
pub fn stop() {
    ACTIVE.store(false, Ordering::Release);
}

/// The OpenMP runtime loaded in this process, by its library's file name.
#[derive(Debug, PartialEq, Eq)]
pub enum Runtime {
    /// LLVM's libomp or Intel's libiomp5 (OMPT); with GCC's libgomp loaded too when preloaded
    /// for a GCC program.
    WithTool,
    /// GCC's libgomp alone: no OMPT.
    Gomp,
    None,
}

pub fn runtime_of(module_paths: &[&str]) -> Runtime {
    let file = |p: &&str| p.rsplit('/').next().unwrap_or(p).to_string();
    let names: Vec<String> = module_paths.iter().map(file).collect();
    let omp = |n: &String| n.starts_with("libomp.so") || n.starts_with("libomp-") || n.starts_with("libomp5") || n.starts_with("libiomp");
    if names.iter().any(omp) {
        Runtime::WithTool
    } else if names.iter().any(|n| n.starts_with("libgomp.so")) {
        Runtime::Gomp
    } else {
        Runtime::None
    }
}

pub fn runtime() -> Runtime {
    let modules = crate::symbols::loaded_modules();
    let paths: Vec<&str> = modules.iter().map(|m| m.path.as_str()).collect();
    runtime_of(&paths)
}

const GOMP_ADVICE: &str = "LLVM's libomp runs GCC-built programs through its libgomp layer: LD_PRELOAD=/usr/lib/llvm-14/lib/libomp.so.5 (Debian's libomp5-14; see docs/openmp.md)";

/// OpenMP constructs are wanted (`SCOPE_PROFILER_OPENMP=1`) and the runtime has no tools
/// interface: say so once, and how to run on one.
pub fn check_runtime(s: &Settings) {
    if !s.wanted || TOOL_STARTED.load(Ordering::Acquire) {
        return;
    }
    if runtime() == Runtime::Gomp {
        crate::warn::once(
            "openmp-gomp",
            &format!("{}: this program runs on GCC's libgomp, which has no OpenMP tools interface (OMPT): its OpenMP constructs are not recorded (its own regions are). {GOMP_ADVICE}", env::OPENMP),
        );
    }
}

/// At finalize: OpenMP constructs were wanted but the runtime never started the tool.
pub fn at_finalize() {
    let s = Settings::from_env();
    if !s.wanted || TOOL_STARTED.load(Ordering::Acquire) {
        return;
    }
    match runtime() {
        Runtime::Gomp => check_runtime(&s),
        Runtime::WithTool => crate::warn::once(
            "openmp-no-tool",
            &format!("{}: the OpenMP runtime did not start this library as its tool (OMP_TOOL=disabled, or another tool came first): no OpenMP constructs were recorded", env::OPENMP),
        ),
        Runtime::None => {}
    }
}

// The kinds of key (see `late::key`), each with its label.
const PARALLEL: u8 = 1;
const TEAMS: u8 = 2;
const BARRIER: u8 = 3;
const BARRIER_IMPLICIT: u8 = 4;
const BARRIER_TEAMS: u8 = 5;
const TASKWAIT: u8 = 6;
const TASKGROUP: u8 = 7;
const REDUCTION: u8 = 8;
/// A sync region's wait is its kind plus this.
const WAIT: u8 = 16;
const LOOP: u8 = 32;
const SECTIONS: u8 = 33;
const SINGLE: u8 = 34;
const WORKSHARE: u8 = 35;
const DISTRIBUTE: u8 = 36;
const TASKLOOP: u8 = 37;
const SCOPE: u8 = 38;
const TASK: u8 = 48;
/// Added to a kind: a construct the runtime reported with a code pointer of its own
/// (`in_runtime`), keyed by the parallel region it is in; its label says so.
const IN_PARALLEL: u8 = 64;

fn label(kind: u8) -> Label {
    if kind & IN_PARALLEL != 0 {
        return in_parallel_label(kind & !IN_PARALLEL);
    }
    let same = |c: &'static str| Label { c, fortran: c };
    match kind {
        PARALLEL => same("omp parallel"),
        TEAMS => same("omp teams"),
        BARRIER => same("omp barrier"),
        BARRIER_IMPLICIT => same("omp barrier (implicit)"),
        BARRIER_TEAMS => same("omp barrier (teams)"),
        TASKWAIT => same("omp taskwait"),
        TASKGROUP => same("omp taskgroup"),
        REDUCTION => same("omp reduction"),
        k if k == BARRIER + WAIT => same("omp wait barrier"),
        k if k == BARRIER_IMPLICIT + WAIT => same("omp wait barrier (implicit)"),
        k if k == BARRIER_TEAMS + WAIT => same("omp wait barrier (teams)"),
        k if k == TASKWAIT + WAIT => same("omp wait taskwait"),
        k if k == TASKGROUP + WAIT => same("omp wait taskgroup"),
        k if k == REDUCTION + WAIT => same("omp wait reduction"),
        LOOP => Label { c: "omp for", fortran: "omp do" },
        SECTIONS => same("omp sections"),
        SINGLE => same("omp single"),
        WORKSHARE => same("omp workshare"),
        DISTRIBUTE => same("omp distribute"),
        TASKLOOP => same("omp taskloop"),
        SCOPE => same("omp scope"),
        TASK => same("omp task"),
        _ => same("omp"),
    }
}

/// `omp barrier (in parallel)`, `omp barrier (implicit, in parallel)`, ...: made once per kind
/// (at a key's first sight).
#[cold]
fn in_parallel_label(base: u8) -> Label {
    static MADE: parking_lot::Mutex<Vec<(u8, Label)>> = parking_lot::Mutex::new(Vec::new());
    let mut made = MADE.lock();
    if let Some(&(_, l)) = made.iter().find(|(k, _)| *k == base) {
        return l;
    }
    let b = label(base);
    let with = |l: &str| -> &'static str {
        let s = match l.strip_suffix(')') {
            Some(head) => format!("{head}, in parallel)"),
            None => format!("{l} (in parallel)"),
        };
        Box::leak(s.into_boxed_str())
    };
    let c = with(b.c);
    let l = Label { c, fortran: if b.fortran == b.c { c } else { with(b.fortran) } };
    made.push((base, l));
    l
}

fn kind_of(key: u64) -> u8 {
    (key >> 56) as u8
}

fn addr_of(key: u64) -> u64 {
    key & ((1 << 56) - 1)
}

// What opened an entry of the thread's stack of OpenMP regions.
const OPEN_IMPLICIT: u8 = 1;
const OPEN_SYNC: u8 = 2;
const OPEN_WAIT: u8 = 3;
const OPEN_WORK: u8 = 4;
const OPEN_TASK: u8 = 5;

/// Open the region of `key` and push it on the thread's stack (a region not recorded is
/// pushed too, so that its end finds it).
#[inline(always)]
fn open<R: Recording>(rec: &mut R, what: u8, key: u64, extra: u64, team: Option<Hold>, worker: bool) {
    reattach_partial(rec);
    let id = id_of(late::lookup(rec, key, || What::Construct(label(kind_of(key)))));
    let id = if id != late::NOT_RECORDED && rec.start(id) { id } else { late::NOT_RECORDED };
    rec.late().omp.push(OmpOpen { what, id, extra, team, worker });
}

/// The end of a worker's part of a parallel region (or of the barrier that ends it) that the
/// callback did not read the clock for: the runtime reports it after the team ended (libomp:
/// when the worker is next given work), and it is the team's end (`late_end`), read from the
/// team when the end is recorded; the clock is read only where the team's end is not known.
/// (A clock never reads this: it is 292 years of nanoseconds.)
pub const UNREAD: i64 = i64::MAX;

/// The end of a call ended at `end` (or `UNREAD`) inside a team that ended at `ended` (0: it
/// runs): the team's end where that came first, else `end`, else (`UNREAD`) `now`.
#[inline(always)]
fn late_end(end: i64, ended: i64, now: impl FnOnce() -> i64) -> i64 {
    if ended > 0 && ended < end {
        ended
    } else if end == UNREAD {
        now()
    } else {
        end
    }
}

/// When the team of the innermost implicit task on this thread ended (0: it runs).
fn team_end(omp: &[OmpOpen]) -> i64 {
    omp.iter().rev().find(|o| o.what == OPEN_IMPLICIT).and_then(|o| o.team.as_ref()).map_or(0, |h| h.team().end())
}

/// A worker's end of the barrier that ends its part of a parallel region (its wait, the
/// barrier), then of the part itself, which the runtime reports when the worker is next given
/// work: each ends at the team's end, which the team's primary thread wrote in a line this
/// core must then fetch from the other's, on the path of the next region (the worker reaches
/// its end barrier only after). So they are taken off the stacks unrecorded (`detach`), the
/// team's line is prefetched, and they are recorded at the worker's next end of an OpenMP
/// region, with the same ends, parents and times as if recorded here. Only the chain
/// [part, implicit barrier, its wait] at the bottom of the thread's calls, without counter
/// sources; anything else is closed at once. True if `what`'s entry was taken off.
#[inline(always)]
fn detach_late<R: Recording>(rec: &mut R, what: u8, end: i64) -> bool {
    // The common refusals first: not a worker's part at the bottom of its OpenMP regions (only
    // a worker's implicit task has `worker` set), or not inside the barrier that ends it: the
    // worker's end-of-region barrier has no code pointer of its own and is keyed by the
    // parallel construct, a worksharing construct's by its own (its end is not late).
    let omp = &rec.late().omp;
    let Some(part) = omp.first().filter(|b| b.worker && b.team.is_some()) else { return false };
    if omp.get(1).is_some_and(|s| kind_of(s.extra) & !IN_PARALLEL != BARRIER_IMPLICIT || addr_of(s.extra) != addr_of(part.extra)) {
        return false;
    }
    detach_worker_late(rec, what, end)
}

/// `detach_late` past its first checks: the chain [part, barrier, wait] taken off from the top,
/// one entry per late end.
#[inline(never)]
fn detach_worker_late<R: Recording>(rec: &mut R, what: u8, end: i64) -> bool {
    if what == OPEN_WAIT {
        settle(rec);
    }
    let l = rec.late();
    let n = l.omp.len();
    let (expected, done) = match what {
        OPEN_WAIT => (3, 0),
        OPEN_SYNC => (2, l.detached.len()),
        _ => (1, l.detached.len()),
    };
    // The chain so far: what is above `what` is detached already (a barrier without a wait
    // entry is not taken off: its end closes it as usual).
    if n != expected || done != 3 - expected || l.omp[n - 1].what != what {
        return false;
    }
    let id = l.omp[n - 1].id;
    let call = if id == late::NOT_RECORDED {
        None
    } else {
        match rec.detach(id, what == OPEN_IMPLICIT) {
            Some(c) => Some(c),
            None => return false,
        }
    };
    let l = rec.late();
    let Some(open) = l.omp.pop() else { return false };
    if what == OPEN_IMPLICIT {
        if let Some(h) = &open.team {
            h.team().prefetch_end();
        }
    }
    l.detached.push(Detached { open, call, end });
    true
}

/// Before anything else is opened on this thread: a chain of late ends not taken off to its
/// part (the part's end did not follow) goes back on the stacks, to be closed as usual.
#[inline(always)]
fn reattach_partial<R: Recording>(rec: &mut R) {
    let l = rec.late();
    if !l.detached.is_empty() && l.detached.last().is_some_and(|d| d.open.what != OPEN_IMPLICIT) {
        reattach(rec);
    }
}

#[cold]
#[inline(never)]
fn reattach<R: Recording>(rec: &mut R) {
    let detached = std::mem::take(&mut rec.late().detached);
    let ends: Vec<(u8, i64)> = detached.iter().map(|d| (d.open.what, d.end)).collect();
    for d in detached.into_iter().rev() {
        if let Some(c) = d.call {
            rec.reattach(c);
        }
        rec.late().omp.push(d.open);
    }
    for (what, end) in ends {
        close(rec, what, end, |_| true);
    }
}

/// Before an OpenMP region's end is recorded on this thread: record the detached chain (or
/// put a partial one back and close it).
#[inline(always)]
fn settle<R: Recording>(rec: &mut R) {
    if !rec.late().detached.is_empty() {
        settle_now(rec);
    }
}

#[cold]
#[inline(never)]
fn settle_now<R: Recording>(rec: &mut R) {
    if rec.late().detached.last().is_some_and(|d| d.open.what != OPEN_IMPLICIT) {
        reattach(rec);
        return;
    }
    let mut chain = std::mem::take(&mut rec.late().detached);
    record_chain(&mut chain, crate::clock::now, |c, e, p| rec.record_detached(c, e, p));
    // Its room is used again by the next chain (no allocation per region).
    rec.late().detached = chain;
}

/// Record a complete detached chain (innermost first, the part last): each call inside the
/// next one recorded, the outermost at the top of the thread's calls; each ends at the
/// team's end where that came before the end the runtime reported.
fn record_chain(chain: &mut Vec<Detached>, now: impl FnOnce() -> i64, mut record: impl FnMut(crate::model::OpenCall, i64, Option<&mut crate::model::OpenCall>)) {
    let ended = chain.last().and_then(|d| d.open.team.as_ref()).map_or(0, |h| h.team().end());
    // The clock only for ends not read where the team's end is not known (never on libomp).
    let read = if ended <= 0 && chain.iter().any(|d| d.end == UNREAD) { now() } else { UNREAD };
    for i in 0..chain.len() {
        let Some(call) = chain[i].call else { continue };
        let end = late_end(chain[i].end, ended, || read);
        let (_, outer) = chain.split_at_mut(i + 1);
        let parent = outer.iter_mut().find_map(|d| d.call.as_mut());
        record(call, end, parent);
    }
    // The entries (and the part's hold on its team) go after the team's last read.
    chain.clear();
}

/// Close the innermost open entry of `what` (that `matches`) at `end`. Entries above it, whose
/// end never came, are dropped (the recorder counts their calls as dropped). The end of a
/// worker's part of a parallel region, reported after the team ended, is the team's end.
#[inline]
fn close<R: Recording>(rec: &mut R, what: u8, end: i64, matches: impl Fn(&OmpOpen) -> bool) {
    settle(rec);
    let omp = &mut rec.late().omp;
    let found = match omp.last() {
        Some(top) if top.what == what && matches(top) => Some(omp.len() - 1),
        _ => omp.iter().rposition(|o| o.what == what && matches(o)),
    };
    let Some(pos) = found else { return };
    let ended = if what != OPEN_TASK && what != OPEN_WORK { team_end(&omp[..=pos]) } else { 0 };
    let end = late_end(end, ended, crate::clock::now);
    let id = omp[pos].id;
    if pos + 1 == omp.len() {
        // The common case, one entry: dropped inline (`truncate` loops over a slice).
        omp.pop();
    } else {
        omp.truncate(pos);
    }
    if id != late::NOT_RECORDED {
        rec.stop(id, end);
    }
}

/// At finalize, on a quiesced thread: the parts of parallel regions whose team ended but
/// whose end the runtime has not reported on this (worker) thread yet are closed at the
/// team's end, with what is open inside them; what is open in a team that still runs (the
/// run ends inside a parallel region: `exit` there, a signal) is closed at `now`, the end of
/// the run. A region of the program's own open inside stops the closing (its calls and the
/// OpenMP ones around it stay open, as any region the run left open).
pub fn close_ended(data: &mut crate::recorder::ThreadData, now: i64) {
    let Some(l) = data.late.as_mut() else { return };
    let mut detached = std::mem::take(&mut l.detached);
    if detached.last().is_some_and(|d| d.open.what == OPEN_IMPLICIT) {
        record_chain(&mut detached, || now, |c, e, p| data.record_detached(c, e, p));
    } else if !detached.is_empty() {
        // A partial chain: back on the stacks, each closed at the end reported for it (or
        // the team's, where that came first).
        let ends: Vec<(u32, i64)> = detached.iter().map(|d| (d.open.id, d.end)).collect();
        for d in detached.into_iter().rev() {
            if let Some(c) = d.call {
                data.reattach(c);
            }
            if let Some(l) = data.late.as_mut() {
                l.omp.push(d.open);
            }
        }
        for (id, end) in ends {
            let Some(l) = data.late.as_mut() else { break };
            let ended = team_end(&l.omp);
            l.omp.pop();
            if id != late::NOT_RECORDED {
                data.close(id, late_end(end, ended, || now));
            }
        }
    }
    let Some(l) = data.late.as_mut() else { return };
    let mut omp = std::mem::take(&mut l.omp);
    let mut keep = omp.len();
    while keep > 0 {
        let o = &omp[keep - 1];
        let ended = team_end(&omp[..keep]);
        let end = if ended > 0 { ended } else { now };
        if o.id != late::NOT_RECORDED && !data.close(o.id, end) {
            break;
        }
        keep -= 1;
    }
    if let Some(l) = data.late.as_mut() {
        // The entries closed let go of their teams here, after their last reads.
        omp.truncate(keep);
        l.omp = omp;
    }
}

/// The key of a parallel region's team, from its code pointer (one inside the runtime, see
/// `in_runtime`: the enclosing region's body ended with the call that forks it, so the region
/// is keyed by the enclosing one, which `omp` holds).
pub fn team_key(omp: &[OmpOpen], codeptr: u64, league: bool) -> u64 {
    let kind = if league { TEAMS } else { PARALLEL };
    match in_runtime(codeptr) {
        false => late::key(kind, codeptr),
        true => late::key(kind | IN_PARALLEL, current_parallel(omp).1),
    }
}

/// A parallel region begins on this (its primary) thread: its team, a slot of the thread's
/// ring (`late::teams`), which the region's data word holds for its threads. A slot is taken
/// again once its region ended and no thread holds it (a worker lets go of a region's team
/// when it is next given work: the runtime reports the end of its part then): no allocation
/// per region, and no reference count that the team's threads would write in turn.
pub fn parallel_begin<R: Recording>(rec: &mut R, codeptr: u64, league: bool) -> &'static Team {
    let l = rec.late();
    let key = team_key(&l.omp, codeptr, league);
    l.teams.take(key)
}

/// The parallel construct of the innermost implicit task open on this thread: whether it is
/// itself one keyed by its enclosing region (`IN_PARALLEL` or 0), and its address (0: none).
fn current_parallel(omp: &[OmpOpen]) -> (u8, u64) {
    omp.iter().rev().find(|o| o.what == OPEN_IMPLICIT).map_or((0, 0), |o| (kind_of(o.extra) & IN_PARALLEL, addr_of(o.extra)))
}

/// A thread begins its part of a parallel region (`team`: None if the region began unseen).
pub fn implicit_task_begin<R: Recording>(rec: &mut R, team: Option<&'static Team>, worker: bool) {
    reattach_partial(rec);
    let key = team.map_or(late::key(PARALLEL, 0), |t| t.key());
    let l = rec.late();
    l.omp_last_work = 0;
    let team = team.map(|t| l.holds.hold(t));
    if key == late::key(PARALLEL, 0) {
        // libomp runs each team of a league as a parallel region of one thread with no code
        // pointer: part of the league's `omp teams` call on this thread, not a region of its own.
        if let Some(league) = l.omp.iter().rev().find(|o| o.what == OPEN_IMPLICIT).filter(|o| kind_of(o.extra) & !IN_PARALLEL == TEAMS) {
            let extra = league.extra;
            l.omp.push(OmpOpen { what: OPEN_IMPLICIT, id: late::NOT_RECORDED, extra, team, worker });
            return;
        }
    }
    open(rec, OPEN_IMPLICIT, key, key, team, worker);
}

/// A thread's part of a parallel region ends; `initial`: the runtime says it is an initial
/// task, which ends a part only of a league (a team's initial task, `omp teams`), never the
/// program's own initial task. `primary`: the team's thread 0, whose end is the team's (the
/// region's end that workers' parts reported late are closed at; `parallel_end` then needs
/// no clock read of its own).
pub fn implicit_task_end<R: Recording>(rec: &mut R, end: i64, initial: bool, primary: bool) {
    if !initial && !primary && detach_late(rec, OPEN_IMPLICIT, end) {
        rec.late().omp_last_work = 0;
        return;
    }
    let inner = rec.late().omp.iter().rev().find(|o| o.what == OPEN_IMPLICIT);
    if initial && !inner.is_some_and(|o| kind_of(o.extra) & !IN_PARALLEL == TEAMS) {
        return;
    }
    if primary {
        if let Some(team) = inner.and_then(|o| o.team.as_ref()) {
            team.team().set_end(end);
        }
    }
    end_single(rec, Some(end));
    close(rec, OPEN_IMPLICIT, end, |_| true);
    rec.late().omp_last_work = 0;
}

/// A sync region begins (OMPT's `ompt_sync_region_t`, and its code pointer, 0 if none).
pub fn sync_begin<R: Recording>(rec: &mut R, kind: i32, codeptr: u64) {
    if matches!(kind, 1..=4 | 8..=10) {
        end_single(rec, None);
    }
    let key = sync_key(rec.late(), kind, codeptr);
    open(rec, OPEN_SYNC, key, key, None, false);
}

/// A `single` whose end the runtime does not report (GCC's GOMP_single_start has no end)
/// ends at the thread's next barrier, worksharing construct or the end of its implicit task
/// (none of which a single construct's body may hold).
#[inline(always)]
fn end_single<R: Recording>(rec: &mut R, end: Option<i64>) {
    let open_single = matches!(rec.late().omp.last(), Some(top) if top.what == OPEN_WORK && top.extra == SINGLE as u64);
    if open_single {
        close_single(rec, end);
    }
}

#[cold]
#[inline(never)]
fn close_single<R: Recording>(rec: &mut R, end: Option<i64>) {
    let end = end.unwrap_or_else(crate::clock::now);
    close(rec, OPEN_WORK, end, |_| true);
}

fn sync_key(l: &mut late::ThreadLate, kind: i32, codeptr: u64) -> u64 {
    if in_runtime(codeptr) {
        // Reached by a tail call (see `in_runtime`): named after the parallel region it is in.
        let k = match kind {
            2 | 8 | 9 => BARRIER_IMPLICIT,
            5 => TASKWAIT,
            6 => TASKGROUP,
            7 => REDUCTION,
            10 => BARRIER_TEAMS,
            _ => BARRIER,
        };
        return late::key(k | IN_PARALLEL, current_parallel(&l.omp).1);
    }
    let (flag, addr) = current_parallel(&l.omp);
    // A construct named after its parallel region is named after the enclosing one as that is.
    let parallel = || (flag, addr);
    let (k, addr) = match kind {
        // ompt_sync_region_barrier_implicit, _implicit_workshare, _implicit_parallel
        2 | 8 | 9 if codeptr == 0 => (BARRIER_IMPLICIT | parallel().0, parallel().1),
        2 | 8 | 9 => (BARRIER_IMPLICIT, codeptr),
        // ompt_sync_region_barrier (deprecated), _barrier_implementation: GCC's GOMP_barrier,
        // called from the program (explicit, or the compiler's after a static loop), or from
        // inside the runtime (the end of a loop: no code pointer) with the loop just before.
        1 | 4 if codeptr == 0 && l.omp_last_work != 0 => (BARRIER_IMPLICIT, std::mem::take(&mut l.omp_last_work)),
        1 | 4 if codeptr == 0 => (BARRIER_IMPLICIT | parallel().0, parallel().1),
        1 | 4 => (BARRIER, codeptr),
        // ompt_sync_region_barrier_explicit
        3 if codeptr == 0 => (BARRIER | parallel().0, parallel().1),
        3 => (BARRIER, codeptr),
        5 => (TASKWAIT, codeptr),
        6 => (TASKGROUP, codeptr),
        7 => (REDUCTION, codeptr),
        10 => (BARRIER_TEAMS, codeptr),
        _ => (BARRIER, codeptr),
    };
    late::key(k, addr)
}

pub fn sync_end<R: Recording>(rec: &mut R, end: i64) {
    if detach_late(rec, OPEN_SYNC, end) {
        return;
    }
    close(rec, OPEN_SYNC, end, |_| true);
}

/// The waiting part of a sync region begins: named after the sync region it is in.
pub fn wait_begin<R: Recording>(rec: &mut R, kind: i32, codeptr: u64) {
    let l = rec.late();
    let sync = match l.omp.last() {
        Some(top) if top.what == OPEN_SYNC => top.extra,
        _ => sync_key(l, kind, codeptr),
    };
    let key = late::key(kind_of(sync).saturating_add(WAIT), addr_of(sync));
    open(rec, OPEN_WAIT, key, 0, None, false);
}

pub fn wait_end<R: Recording>(rec: &mut R, end: i64) {
    if detach_late(rec, OPEN_WAIT, end) {
        return;
    }
    close(rec, OPEN_WAIT, end, |_| true);
}

/// A worksharing construct begins (OMPT's `ompt_work_t`). The threads that skip a `single`
/// record nothing.
pub fn work_begin<R: Recording>(rec: &mut R, wstype: i32, codeptr: u64) {
    let kind = match wstype {
        // ompt_work_loop, and OpenMP 5.2's loop schedules
        1 | 9..=12 => LOOP,
        2 => SECTIONS,
        3 => SINGLE,
        5 => WORKSHARE,
        6 => DISTRIBUTE,
        7 => TASKLOOP,
        8 => SCOPE,
        // ompt_work_single_other, and any kind this version does not know
        _ => {
            end_single(rec, None);
            rec.late().omp.push(OmpOpen { what: OPEN_WORK, id: late::NOT_RECORDED, extra: 0, team: None, worker: false });
            return;
        }
    };
    end_single(rec, None);
    let l = rec.late();
    let key = if !in_runtime(codeptr) {
        l.omp_last_work = codeptr;
        late::key(kind, codeptr)
    } else {
        l.omp_last_work = 0;
        // libomp 14 reports a taskloop with its own address: the taskgroup the compiler puts
        // around it has the program's; otherwise (a tail call) the parallel region's.
        match taskgroup(&l.omp) {
            Some(addr) if kind == TASKLOOP => late::key(TASKLOOP, addr),
            _ => late::key(kind | IN_PARALLEL, current_parallel(&l.omp).1),
        }
    };
    open(rec, OPEN_WORK, key, kind as u64, None, false);
}

pub fn work_end<R: Recording>(rec: &mut R, end: i64) {
    close(rec, OPEN_WORK, end, |_| true);
}

/// The address of the innermost taskgroup open in this thread's part of its parallel region.
fn taskgroup(omp: &[OmpOpen]) -> Option<u64> {
    omp.iter().rev().take_while(|o| o.what != OPEN_IMPLICIT).find(|o| o.what == OPEN_SYNC && kind_of(o.extra) == TASKGROUP).map(|o| addr_of(o.extra))
}

/// The value an explicit task keeps in its `task_data` (never 0).
pub fn task_key(codeptr: u64) -> u64 {
    late::key(TASK, codeptr)
}

/// `task_key` of a task created with a code pointer inside the runtime (libomp 14's for the
/// tasks of a taskloop): the taskgroup around the taskloop names it, else the parallel region.
pub fn task_key_inside<R: Recording>(rec: &mut R) -> u64 {
    let omp = &rec.late().omp;
    match taskgroup(omp) {
        Some(addr) => late::key(TASK, addr),
        None => late::key(TASK | IN_PARALLEL, current_parallel(omp).1),
    }
}

fn is_task(value: u64) -> bool {
    value != 0 && kind_of(value) & !IN_PARALLEL == TASK
}

/// The runtime switches tasks on this thread: `prior` and `next` are (task data address, its
/// value); `status` is OMPT's `ompt_task_status_t`.
pub fn task_schedule<R: Recording>(rec: &mut R, prior: (u64, u64), status: i32, next: (u64, u64), end: i64) {
    // ompt_task_early_fulfill and ompt_task_late_fulfill switch nothing.
    if status == 5 || status == 6 {
        return;
    }
    if is_task(prior.1) {
        close(rec, OPEN_TASK, end, |o| o.extra == prior.0);
    }
    if next.0 != 0 && is_task(next.1) {
        open(rec, OPEN_TASK, next.1, next.0, None, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings() {
        let p = |v: Option<&str>| Settings::parse(v).unwrap();
        assert_eq!(p(None), Settings { on: true, tasks: false, wanted: false });
        assert_eq!(p(Some(" ")), Settings::default());
        assert_eq!(p(Some("0")), Settings { on: false, tasks: false, wanted: false });
        assert_eq!(p(Some("off")), Settings { on: false, tasks: false, wanted: false });
        assert_eq!(p(Some("1")), Settings { on: true, tasks: false, wanted: true });
        assert_eq!(p(Some("tasks")), Settings { on: true, tasks: true, wanted: true });
        assert_eq!(p(Some("on, Tasks")), Settings { on: true, tasks: true, wanted: true });
        assert!(Settings::parse(Some("loops")).is_err());
    }

    #[test]
    fn runtimes() {
        assert_eq!(runtime_of(&["/usr/lib/llvm-14/lib/libomp.so.5", "/lib/x86_64-linux-gnu/libgomp.so.1"]), Runtime::WithTool);
        assert_eq!(runtime_of(&["/lib/x86_64-linux-gnu/libgomp.so.1"]), Runtime::Gomp);
        assert_eq!(runtime_of(&["/opt/intel/lib/libiomp5.so"]), Runtime::WithTool);
        // Open MPI's libompitrace is not an OpenMP runtime.
        assert_eq!(runtime_of(&["/usr/lib/libompitrace.so.40", "/lib/libc.so.6"]), Runtime::None);
    }

    #[test]
    fn labels_and_keys() {
        assert_eq!(label(LOOP), Label { c: "omp for", fortran: "omp do" });
        assert_eq!(label(BARRIER_IMPLICIT + WAIT).c, "omp wait barrier (implicit)");
        assert!(label(BARRIER).c.starts_with("omp barrier") && label(BARRIER_IMPLICIT).c.starts_with("omp barrier"));
        assert!(!label(BARRIER + WAIT).c.starts_with("omp barrier"));
        assert_eq!(kind_of(team_key(&[], 0x1234, false)), PARALLEL);
        assert_eq!(kind_of(team_key(&[], 0x1234, true)), TEAMS);
        assert!(is_task(task_key(0)) && !is_task(team_key(&[], 5, false)) && !is_task(0));
        let mut l = late::ThreadLate::default();
        // A worker's implicit barrier without a code pointer: the parallel construct's.
        l.omp.push(OmpOpen { what: OPEN_IMPLICIT, id: 0, extra: late::key(PARALLEL, 0x500), team: None, worker: false });
        assert_eq!(sync_key(&mut l, 2, 0), late::key(BARRIER_IMPLICIT, 0x500));
        assert_eq!(sync_key(&mut l, 2, 0x600), late::key(BARRIER_IMPLICIT, 0x600));
        // GCC: an explicit barrier has its call's pointer; a loop's end barrier has none.
        assert_eq!(sync_key(&mut l, 4, 0x700), late::key(BARRIER, 0x700));
        l.omp_last_work = 0x800;
        assert_eq!(sync_key(&mut l, 4, 0), late::key(BARRIER_IMPLICIT, 0x800));
        assert_eq!(l.omp_last_work, 0);
        assert_eq!(sync_key(&mut l, 4, 0), late::key(BARRIER_IMPLICIT, 0x500));
        assert_eq!(sync_key(&mut l, 5, 0x900), late::key(TASKWAIT, 0x900));
    }

    #[test]
    fn constructs_reported_from_inside_the_runtime() {
        assert_eq!(label(BARRIER | IN_PARALLEL).c, "omp barrier (in parallel)");
        assert_eq!(label((BARRIER_IMPLICIT | IN_PARALLEL) + WAIT).c, "omp wait barrier (implicit, in parallel)");
        assert_eq!(label(LOOP | IN_PARALLEL), Label { c: "omp for (in parallel)", fortran: "omp do (in parallel)" });
        assert_eq!(label(PARALLEL | IN_PARALLEL).c, label(PARALLEL | IN_PARALLEL).c);
        assert!(is_task(late::key(TASK | IN_PARALLEL, 0x10)));
        // A runtime's code at [0x7000_0000, 0x7001_0000).
        RUNTIME_LO.store(0x7000_0000, Ordering::Relaxed);
        RUNTIME_HI.store(0x7001_0000, Ordering::Relaxed);
        assert!(in_runtime(0x7000_0000) && in_runtime(0x7000_ffff) && !in_runtime(0x7001_0000) && !in_runtime(0x500) && !in_runtime(0));
        let mut l = late::ThreadLate::default();
        l.omp.push(OmpOpen { what: OPEN_IMPLICIT, id: 0, extra: late::key(PARALLEL, 0x500), team: None, worker: false });
        // A tail-called GOMP_barrier: the parallel region's, marked; the program's own are not.
        assert_eq!(sync_key(&mut l, 4, 0x7000_0115), late::key(BARRIER | IN_PARALLEL, 0x500));
        assert_eq!(sync_key(&mut l, 2, 0x7000_0115), late::key(BARRIER_IMPLICIT | IN_PARALLEL, 0x500));
        assert_eq!(sync_key(&mut l, 4, 0x700), late::key(BARRIER, 0x700));
        // Inside a region keyed by its enclosing one, the worker's implicit barrier is too.
        l.omp.push(OmpOpen { what: OPEN_IMPLICIT, id: 0, extra: late::key(PARALLEL | IN_PARALLEL, 0x500), team: None, worker: false });
        assert_eq!(sync_key(&mut l, 2, 0), late::key(BARRIER_IMPLICIT | IN_PARALLEL, 0x500));
        RUNTIME_LO.store(0, Ordering::Relaxed);
        RUNTIME_HI.store(0, Ordering::Relaxed);
    }

    /// A worker's late ends (its wait at the barrier that ends a parallel region, the barrier,
    /// its part), taken off its stacks and recorded at its next OpenMP end or at finalize,
    /// leave what recording them at once leaves: the same calls, ends (the team's), parents,
    /// exclusive times and call paths, a last chain cut short by finalize too. And they are
    /// taken off (recorded one region late): without that the two recorders would not differ
    /// in between and the test would fail.
    #[test]
    fn a_workers_late_ends_recorded_later_are_recorded_as_at_once() {
        use crate::recorder::testing::Mock;
        let mut ring = late::teams::Ring::default();
        for keep_calls in [true, false] {
            let (mut at_once, mut later) = (Mock::with(keep_calls), Mock::with(keep_calls));
            at_once.detaching = false;
            let user = 40;
            for r in 0..4i64 {
                let t = 1000 * (r + 1);
                let team = ring.take(late::key(PARALLEL, 0x7a_5000));
                for m in [&mut at_once, &mut later] {
                    m.now = Some(t);
                    implicit_task_begin(m, Some(team), true);
                    m.now = Some(t + 10);
                    assert!(m.start(user));
                    assert!(m.stop(user, t + 20));
                    m.now = Some(t + 30);
                    sync_begin(m, 2, 0);
                    m.now = Some(t + 40);
                    wait_begin(m, 2, 0);
                }
                // The primary thread ends the team; the runtime reports the worker's ends when
                // the next region wakes it (the last run: only the wait's, then finalize).
                team.set_end(t + 60);
                team.ended();
                // One is given the ends read (later than the team's end), the other none, as the
                // callbacks give a worker's late ends (`UNREAD`): both record the team's end.
                for (m, read) in [(&mut at_once, true), (&mut later, false)] {
                    let at = |dt: i64| if read { t + dt } else { UNREAD };
                    wait_end(m, at(900));
                    if r < 3 {
                        sync_end(m, at(901));
                        implicit_task_end(m, at(902), false, false);
                    }
                }
                if r == 0 {
                    // The parallel construct is the first region these recorders registered (id 1).
                    let parts = |m: &Mock| m.data.stats().get(1).map_or(0, |s| s.count);
                    assert_eq!((parts(&at_once), parts(&later)), (1, 0), "the first part is recorded at once by one, later by the other");
                    assert_eq!(later.late.detached.len(), 3);
                }
            }
            for m in [&mut at_once, &mut later] {
                m.data.late = Some(Box::new(std::mem::take(&mut m.late)));
                close_ended(&mut m.data, 99_999);
            }
            let ids = at_once.next_id.max(user);
            for id in 1..=ids {
                let (a, b) = (at_once.data.stats().get(id), later.data.stats().get(id));
                assert_eq!(format!("{a:?}"), format!("{b:?}"), "region {id}'s statistics (calls kept: {keep_calls})");
                if keep_calls && (id as usize) < at_once.data.logs().len() {
                    let (la, lb) = (&at_once.data.logs()[id as usize], &later.data.logs()[id as usize]);
                    assert_eq!((la.columns(), la.parent), (lb.columns(), lb.parent), "region {id}'s calls");
                }
            }
            assert_eq!(format!("{:?}", at_once.data.paths), format!("{:?}", later.data.paths));
            assert_eq!(at_once.data.on_one_path(), later.data.on_one_path());
            assert!(at_once.data.open.is_empty() && later.data.open.is_empty());
            if keep_calls {
                // The worker's parts end at the team's end, not when the runtime reported them.
                let part = &later.data.logs()[1];
                assert_eq!(part.columns().1, vec![1060, 2060, 3060, 4060]);
            }
        }
    }

    /// A late end whose time was not read (`UNREAD`) where the team's end is not known (a
    /// runtime that reports a worker's ends before its primary thread's): the clock is read
    /// then, at once or when a chain taken off is recorded; never the marker itself.
    #[test]
    fn an_unread_end_without_the_teams_end_is_read_when_recorded() {
        use crate::recorder::testing::Mock;
        let mut ring = late::teams::Ring::default();
        for detaching in [false, true] {
            let mut m = Mock::new();
            m.detaching = detaching;
            let team = ring.take(late::key(PARALLEL, 0x7a_6000));
            let before = crate::clock::now();
            m.now = Some(before);
            implicit_task_begin(&mut m, Some(team), true);
            sync_begin(&mut m, 2, 0);
            wait_begin(&mut m, 2, 0);
            wait_end(&mut m, UNREAD);
            sync_end(&mut m, UNREAD);
            implicit_task_end(&mut m, UNREAD, false, false);
            assert_eq!(m.late.detached.len(), if detaching { 3 } else { 0 });
            m.data.late = Some(Box::new(std::mem::take(&mut m.late)));
            close_ended(&mut m.data, crate::clock::now());
            let after = crate::clock::now();
            let ends: Vec<i64> = (1..=3).flat_map(|id| m.data.logs()[id].columns().1).collect();
            assert_eq!(ends.len(), 3, "taken off: {detaching}");
            assert!(ends.iter().all(|&e| (before..=after).contains(&e)), "ends {ends:?} not read in [{before}, {after}] (taken off: {detaching})");
            team.ended();
        }
    }

    /// A chain of late ends cut short by something opened on the thread (here a barrier's
    /// begin after the wait's late end) goes back on the stacks and is closed as at once.
    #[test]
    fn a_partial_chain_goes_back_when_something_opens() {
        use crate::recorder::testing::Mock;
        let mut ring = late::teams::Ring::default();
        let (mut at_once, mut later) = (Mock::new(), Mock::new());
        at_once.detaching = false;
        let team = ring.take(late::key(PARALLEL, 0x7a_7000));
        for m in [&mut at_once, &mut later] {
            m.now = Some(100);
            implicit_task_begin(m, Some(team), true);
            m.now = Some(130);
            sync_begin(m, 2, 0);
            m.now = Some(140);
            wait_begin(m, 2, 0);
        }
        team.set_end(160);
        team.ended();
        for m in [&mut at_once, &mut later] {
            wait_end(m, 900);
            m.now = Some(950);
            sync_begin(m, 3, 0x7a_7100);
            assert!(m.late.detached.is_empty());
            m.data.late = Some(Box::new(std::mem::take(&mut m.late)));
            close_ended(&mut m.data, 2000);
        }
        for id in 1..=at_once.next_id.max(4) {
            let (a, b) = (&at_once.data.logs().get(id as usize), &later.data.logs().get(id as usize));
            assert_eq!(a.map(|l| (l.columns(), l.parent)), b.map(|l| (l.columns(), l.parent)), "region {id}'s calls");
            assert_eq!(format!("{:?}", at_once.data.stats().get(id)), format!("{:?}", later.data.stats().get(id)));
        }
        // The wait ended at the team's end in both.
        assert!(at_once.data.logs().iter().any(|l| l.columns() == (vec![140], vec![160])));
    }

    /// A worker's end of a worksharing construct's barrier (keyed by its own code pointer) is
    /// not late: recorded at once, nothing taken off; the barrier that ends its part is.
    #[test]
    fn only_the_barrier_ending_a_workers_part_is_taken_off() {
        use crate::recorder::testing::Mock;
        let mut ring = late::teams::Ring::default();
        let mut m = Mock::new();
        let team = ring.take(late::key(PARALLEL, 0x7a_8000));
        m.now = Some(100);
        implicit_task_begin(&mut m, Some(team), true);
        let barrier_ends = |m: &mut Mock, codeptr: u64, at: i64| {
            m.now = Some(at);
            sync_begin(m, 2, codeptr);
            wait_begin(m, 2, codeptr);
            wait_end(m, at + 5);
            sync_end(m, at + 6);
        };
        barrier_ends(&mut m, 0x7a_8100, 200);
        assert!(m.late.detached.is_empty(), "a loop's barrier taken off: {:?}", m.late.detached);
        assert_eq!(m.data.open.len(), 1, "only the part is open");
        barrier_ends(&mut m, 0, 300);
        assert_eq!(m.late.detached.len(), 2, "the barrier ending the part is taken off");
        // (Ended: the ring's block goes to the pool, where another test may take it.)
        team.ended();
    }
}
