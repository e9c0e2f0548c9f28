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

use crate::config::env;
use crate::late::{self, Label, OmpOpen, Recording, Team, What, id_of};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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

fn label(kind: u8) -> Label {
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
#[inline]
fn open<R: Recording>(rec: &mut R, what: u8, key: u64, extra: u64, team: Option<Arc<Team>>) {
    let id = id_of(late::lookup(rec, key, || What::Construct(label(kind_of(key)))));
    let id = if id != late::NOT_RECORDED && rec.start(id) { id } else { late::NOT_RECORDED };
    rec.late().omp.push(OmpOpen { what, id, extra, team });
}

/// When the team of the innermost implicit task on this thread ended (0: it runs).
fn team_end(omp: &[OmpOpen]) -> i64 {
    omp.iter().rev().find(|o| o.what == OPEN_IMPLICIT).and_then(|o| o.team.as_ref()).map_or(0, |t| t.end.load(Ordering::Acquire))
}

/// Close the innermost open entry of `what` (that `matches`) at `end`. Entries above it, whose
/// end never came, are dropped (the recorder counts their calls as dropped). The end of a
/// worker's part of a parallel region, reported after the team ended, is the team's end.
#[inline]
fn close<R: Recording>(rec: &mut R, what: u8, mut end: i64, matches: impl Fn(&OmpOpen) -> bool) {
    let omp = &mut rec.late().omp;
    let found = match omp.last() {
        Some(top) if top.what == what && matches(top) => Some(omp.len() - 1),
        _ => omp.iter().rposition(|o| o.what == what && matches(o)),
    };
    let Some(pos) = found else { return };
    if what != OPEN_TASK && what != OPEN_WORK {
        let ended = team_end(&omp[..=pos]);
        if ended > 0 && ended < end {
            end = ended;
        }
    }
    let id = omp[pos].id;
    omp.truncate(pos);
    if id != late::NOT_RECORDED {
        rec.stop(id, end);
    }
}

/// At finalize, on a quiesced thread: the parts of parallel regions whose team ended but
/// whose end the runtime has not reported on this (worker) thread yet are closed at the
/// team's end, with what is open inside them.
pub fn close_ended(data: &mut crate::recorder::ThreadData) {
    let Some(l) = data.late.as_mut() else { return };
    let omp = std::mem::take(&mut l.omp);
    let mut keep = omp.len();
    for i in (0..omp.len()).rev() {
        if omp[i].what != OPEN_IMPLICIT {
            continue;
        }
        let end = omp[i].team.as_ref().map_or(0, |t| t.end.load(Ordering::Acquire));
        if end == 0 {
            break;
        }
        for o in omp[i..keep].iter().rev() {
            if o.id != late::NOT_RECORDED {
                data.close(o.id, end);
            }
        }
        keep = i;
    }
    if let Some(l) = data.late.as_mut() {
        l.omp = omp[..keep].to_vec();
    }
}

/// A parallel region begins (on its primary thread): its team, which the region's data word
/// holds for its threads.
pub fn team(codeptr: u64, league: bool) -> Team {
    Team { key: late::key(if league { TEAMS } else { PARALLEL }, codeptr), end: Default::default() }
}

/// The parallel construct of the innermost implicit task open on this thread (0: none).
fn current_parallel(omp: &[OmpOpen]) -> u64 {
    omp.iter().rev().find(|o| o.what == OPEN_IMPLICIT).map_or(0, |o| o.extra)
}

/// A thread begins its part of a parallel region (`team`: None if the region began unseen).
pub fn implicit_task_begin<R: Recording>(rec: &mut R, team: Option<Arc<Team>>) {
    let key = team.as_ref().map_or(late::key(PARALLEL, 0), |t| t.key);
    rec.late().omp_last_work = 0;
    open(rec, OPEN_IMPLICIT, key, addr_of(key), team);
}

pub fn implicit_task_end<R: Recording>(rec: &mut R, end: i64) {
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
    open(rec, OPEN_SYNC, key, key, None);
}

/// A `single` whose end the runtime does not report (GCC's GOMP_single_start has no end)
/// ends at the thread's next barrier, worksharing construct or the end of its implicit task
/// (none of which a single construct's body may hold).
#[inline]
fn end_single<R: Recording>(rec: &mut R, end: Option<i64>) {
    let open_single = matches!(rec.late().omp.last(), Some(top) if top.what == OPEN_WORK && top.extra == SINGLE as u64);
    if open_single {
        let end = end.unwrap_or_else(crate::clock::now);
        close(rec, OPEN_WORK, end, |_| true);
    }
}

fn sync_key(l: &mut late::ThreadLate, kind: i32, codeptr: u64) -> u64 {
    let parallel = || current_parallel(&l.omp);
    let (k, addr) = match kind {
        // ompt_sync_region_barrier_implicit, _implicit_workshare, _implicit_parallel
        2 | 8 | 9 => (BARRIER_IMPLICIT, if codeptr != 0 { codeptr } else { parallel() }),
        // ompt_sync_region_barrier (deprecated), _barrier_implementation: GCC's GOMP_barrier,
        // called from the program (explicit, or the compiler's after a static loop), or from
        // inside the runtime (the end of a loop: no code pointer) with the loop just before.
        1 | 4 if codeptr == 0 => (BARRIER_IMPLICIT, if l.omp_last_work != 0 { std::mem::take(&mut l.omp_last_work) } else { parallel() }),
        1 | 4 => (BARRIER, codeptr),
        // ompt_sync_region_barrier_explicit
        3 => (BARRIER, if codeptr != 0 { codeptr } else { parallel() }),
        5 => (TASKWAIT, codeptr),
        6 => (TASKGROUP, codeptr),
        7 => (REDUCTION, codeptr),
        10 => (BARRIER_TEAMS, codeptr),
        _ => (BARRIER, codeptr),
    };
    late::key(k, addr)
}

pub fn sync_end<R: Recording>(rec: &mut R, end: i64) {
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
    open(rec, OPEN_WAIT, key, 0, None);
}

pub fn wait_end<R: Recording>(rec: &mut R, end: i64) {
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
            rec.late().omp.push(OmpOpen { what: OPEN_WORK, id: late::NOT_RECORDED, extra: 0, team: None });
            return;
        }
    };
    end_single(rec, None);
    rec.late().omp_last_work = codeptr;
    open(rec, OPEN_WORK, late::key(kind, codeptr), kind as u64, None);
}

pub fn work_end<R: Recording>(rec: &mut R, end: i64) {
    close(rec, OPEN_WORK, end, |_| true);
}

/// The value an explicit task keeps in its `task_data` (never 0).
pub fn task_key(codeptr: u64) -> u64 {
    late::key(TASK, codeptr)
}

fn is_task(value: u64) -> bool {
    value != 0 && kind_of(value) == TASK
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
        open(rec, OPEN_TASK, next.1, next.0, None);
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
        assert_eq!(kind_of(team(0x1234, false).key), PARALLEL);
        assert_eq!(kind_of(team(0x1234, true).key), TEAMS);
        assert!(is_task(task_key(0)) && !is_task(team(5, false).key) && !is_task(0));
        let mut l = late::ThreadLate::default();
        // A worker's implicit barrier without a code pointer: the parallel construct's.
        l.omp.push(OmpOpen { what: OPEN_IMPLICIT, id: 0, extra: 0x500, team: None });
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
}
