//! Combining per-rank files (written when MPI was not usable at finalize, or when the
//! collective write failed) into the normal single file: in the regions layout every
//! `rank<N>` group is copied whole; in the schema-3 layouts each rank's regions and attributes
//! are read back (`writer::read3`) and written again through the layout writer, and its
//! `rank<N>` group (counters, LIKWID) copied. The metadata of the first file is kept with
//! `mpi_size`, `num_nodes`, `total_cores` and the run's clock (pooled over the ranks' clock
//! attributes) redone.
//!
//! The input files are whatever the caller names, so they are read as hostile, and never in
//! the calling process: [`merge_rank_files`] starts the merge helper (`scope_profiler_merge`,
//! installed with the library and found as its other helpers are) with `posix_spawn`, and the
//! helper merges ([`merge_here`]) under the limits of `guard` (memory, CPU time), reading
//! through `h5read` (names as bytes, sizes checked, no links out of a file) and checking every
//! group before it is copied whole. If the HDF5 library crashes or loops on a damaged input,
//! only the helper dies: its unfinished output is removed and the input is named as damaged.

use crate::guard::{self, Ended};
use crate::h5read;
use crate::model::AttrValue;
use crate::status::{Error, Result, Status};
use crate::writer::{Written, put_attr};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The helper program (the command-line tool itself).
pub const HELPER_NAME: &str = "scope_profiler_merge";
/// `SCOPE_PROFILER_MERGE_HELPER`: the helper's path (default: found as the other helpers are).
pub const HELPER_ENV: &str = "SCOPE_PROFILER_MERGE_HELPER";
/// The helper's first argument when it merges for a parent.
pub const CHILD_FLAG: &str = "--merge-for-parent";
/// Wall-clock time the helper may take beyond its CPU-time limit (it waits on the disk too).
const WALL_FACTOR: u64 = 4;

fn fail(msg: String) -> Error {
    Error::new(Status::WriteFailed, msg)
}

/// One input: a file named by the caller, or a per-rank file found in a directory it named
/// (then held open and read through that descriptor).
struct Input {
    shown: PathBuf,
    open: PathBuf,
    _held: Option<safe_file::Found>,
}

/// `<stem>.rank<N>.h5`, not hidden (unfinished files are).
fn is_rank_file_name(name: &std::ffi::OsStr) -> bool {
    let Some(s) = name.to_str().filter(|s| !s.starts_with('.')) else { return false };
    s.strip_suffix(".h5")
        .and_then(|s| s.rsplit_once(".rank"))
        .is_some_and(|(stem, r)| !stem.is_empty() && !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
}

/// Files are taken as given; a directory stands for the per-rank files directly in it, found
/// without following any symlink (a symlink there could lead anywhere: it is skipped, and said).
fn expand(inputs: &[PathBuf]) -> Result<Vec<Input>> {
    let mut out = Vec::new();
    for path in inputs {
        if !path.is_dir() {
            out.push(Input { shown: path.clone(), open: path.clone(), _held: None });
            continue;
        }
        let (found, skipped) = safe_file::files_in(path, is_rank_file_name).map_err(|e| fail(format!("{}: {e}", path.display())))?;
        for s in skipped {
            crate::warn::always(&format!("merge: skipped {} (not a regular file; symlinks in a searched directory are not followed)", s.display()));
        }
        if found.is_empty() {
            return Err(Error::new(Status::InvalidArgument, format!("{}: no per-rank files (<stem>.rank<N>.h5) in this directory", path.display())));
        }
        out.extend(found.into_iter().map(|f| Input { shown: f.path.clone(), open: f.open_path(), _held: Some(f) }));
    }
    Ok(out)
}

fn open(input: &Input) -> Result<h5read::File> {
    h5read::open_as(&input.open, &input.shown).map(|(f, _)| f).map_err(|e| fail(e.to_string()))
}

fn in_file(input: &Input, what: impl std::fmt::Display) -> Error {
    fail(format!("{}: {what}", input.shown.display()))
}

/// A rank group's clock attributes (see `metadata::clock_attrs`), as far as it has them.
fn clock_attrs_of(g: &h5read::Group) -> Vec<(String, AttrValue)> {
    let mut out = Vec::new();
    for k in ["clock", "clock_status"] {
        if let Some(v) = g.attr_string(k) {
            out.push((k.to_string(), AttrValue::Str(v)));
        }
    }
    for k in ["clock_tsc_hz", "clock_error_bound_ns"] {
        if let Some(v) = g.attr_i64(k) {
            out.push((k.to_string(), AttrValue::Int(v)));
        }
    }
    out
}

/// Merge `inputs` (files, or directories holding per-rank files) into `output`, in the merge
/// helper (see the module documentation). Each rank may appear only once.
pub fn merge_rank_files(output: &Path, inputs: &[PathBuf]) -> Result<Written> {
    if inputs.is_empty() {
        return Err(Error::new(Status::InvalidArgument, "no input files to merge"));
    }
    let helper = helper_path().map_err(|e| fail(format!("cannot merge: {e}; set {HELPER_ENV} to the program's path")))?;
    // Relative paths are the caller's: the helper starts in the same directory.
    let mut args: Vec<OsString> = vec![CHILD_FLAG.into(), output.as_os_str().to_owned(), "--".into()];
    args.extend(inputs.iter().map(|p| p.as_os_str().to_owned()));
    let tool = guard::MERGE_TOOL;
    let cpu = guard::cpu_limit(&tool, inputs);
    let wall = cpu.map(|s| std::time::Duration::from_secs(s.saturating_mul(WALL_FACTOR).saturating_add(60)));
    // The environment of the other helpers (no launcher variables: the helper never joins an
    // MPI job), but with LD_PRELOAD: a tool the user preloads (a tracer, an I/O shim) sees the
    // helper's reads as it would have seen ours.
    let mut env = crate::likwid::helper_spawn::child_env();
    if let Some(p) = std::env::var_os("LD_PRELOAD") {
        use std::os::unix::ffi::OsStrExt;
        env.extend(std::ffi::CString::new([b"LD_PRELOAD=", p.as_bytes()].concat()).ok());
    }
    let f = guard::spawn_and_wait(&helper, &args, &env, &["[scope_profiler]", tool.prefix], wall).map_err(|e| fail(format!("cannot merge: {e}")))?;
    // The helper's result, whatever its exit status: it is sent before anything can go wrong.
    if let Some(r) = f.notes.results.last() {
        if let Ok(result) = serde_json::from_str::<ChildResult>(r) {
            if matches!(f.ended, Ended::Exited(_) | Ended::Unknown) {
                guard::write_all(2, &f.held);
            }
            return result.into_result();
        }
    }
    guard::remove_temps(&f.notes.temps);
    if let Some(e) = f.notes.errors.last() {
        return Err(fail(e.clone()));
    }
    let input = f.notes.inputs.last().map(PathBuf::as_path);
    let what = "nothing was merged";
    let msg = match f.ended {
        Ended::Signaled(sig) => guard::crash_message(input, sig, cpu, cpu.is_some_and(|c| f.cpu_seconds >= c), what),
        Ended::TimedOut => format!(
            "{}took longer than {} s; stopped, {what}",
            input.map(|p| format!("{}: reading it ", p.display())).unwrap_or_default(),
            wall.map_or(0, |w| w.as_secs())
        ),
        Ended::Exited(code) => {
            guard::write_all(2, &f.held);
            format!("the merge helper {} ended with status {code} without a result; {what}", helper.display())
        }
        Ended::Unknown => format!("the merge helper {} ended without a result; {what}", helper.display()),
    };
    Err(fail(msg))
}

/// The merge helper: `$SCOPE_PROFILER_MERGE_HELPER`; this program itself if it is the helper;
/// else `scope_profiler_merge` where the library's helpers are (next to the library or the
/// program holding it, or in `<libdir>/scope_profiler/`; from a test binary in
/// `target/<profile>/deps`, one level up).
fn helper_path() -> std::result::Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(HELPER_ENV).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(format!("{HELPER_ENV}={} is not a file", p.display())) };
    }
    if SELF_IS_HELPER.load(std::sync::atomic::Ordering::Relaxed) {
        if let Ok(p) = std::fs::read_link("/proc/self/exe") {
            return Ok(p);
        }
    }
    crate::likwid::helper_spawn::find_helper(HELPER_NAME).or_else(|e| {
        let obj = crate::likwid::helper_spawn::our_object_path();
        let up = obj.as_deref().and_then(|o| o.parent()?.parent()).map(|d| d.join(HELPER_NAME));
        up.filter(|p| p.is_file()).ok_or(e)
    })
}

static SELF_IS_HELPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The running program is the merge helper (its `main` says so first): it starts itself.
pub fn this_program_is_the_helper() {
    SELF_IS_HELPER.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// What the helper sends back.
#[derive(serde::Serialize, serde::Deserialize)]
enum ChildResult {
    Written { path: Vec<u8>, fallback_reason: Option<String>, note: Option<String> },
    Failed { code: i32, message: String },
}

impl ChildResult {
    fn into_result(self) -> Result<Written> {
        use std::os::unix::ffi::OsStringExt;
        match self {
            ChildResult::Written { path, fallback_reason, note } => Ok(Written { path: PathBuf::from(OsString::from_vec(path)), fallback_reason, note }),
            ChildResult::Failed { code, message } => Err(Error::new(Status::from_code(code).unwrap_or(Status::WriteFailed), message)),
        }
    }
}

/// The helper's side (`scope_profiler_merge --merge-for-parent OUTPUT -- INPUT...`): limit
/// itself, merge, send the result. Returns the exit status.
pub fn helper_main(args: &[OsString]) -> i32 {
    let (output, inputs) = match args {
        [output, dashes, inputs @ ..] if dashes == "--" => (PathBuf::from(output), inputs.iter().map(PathBuf::from).collect::<Vec<_>>()),
        _ => {
            eprintln!("{}usage: {HELPER_NAME} {CHILD_FLAG} OUTPUT -- INPUT... (started by the library)", guard::MERGE_TOOL.prefix);
            return 2;
        }
    };
    let tool = guard::MERGE_TOOL;
    guard::enter_spawned_child(guard::memory_limit(&tool, &inputs), guard::cpu_limit(&tool, &inputs));
    let result = match merge_here(&output, &inputs) {
        Ok(w) => {
            use std::os::unix::ffi::OsStrExt;
            ChildResult::Written { path: w.path.as_os_str().as_bytes().to_vec(), fallback_reason: w.fallback_reason, note: w.note }
        }
        Err(e) => ChildResult::Failed { code: e.status.code(), message: e.message.clone() },
    };
    let ok = matches!(result, ChildResult::Written { .. });
    guard::note_result(&serde_json::to_string(&result).unwrap_or_default());
    if ok { 0 } else { 1 }
}

/// What one input holds.
struct Scanned {
    input: Input,
    /// Its ranks: (rank, its `rank<N>` group if it has one; a schema-3 rank may have only
    /// its row of the rank table).
    ranks: Vec<(i64, Option<String>)>,
}

/// Merge in this process (the helper; never a host: see [`merge_rank_files`]).
pub fn merge_here(output: &Path, inputs: &[PathBuf]) -> Result<Written> {
    if inputs.is_empty() {
        return Err(Error::new(Status::InvalidArgument, "no input files to merge"));
    }
    let inputs = expand(inputs)?;
    let mut scanned: Vec<Scanned> = Vec::new();
    let mut owner: BTreeMap<i64, usize> = BTreeMap::new(); // rank -> input
    // None: schema 1 (regions); else the schema-3 layout of every input.
    let mut layout: Option<Option<crate::config::Layout>> = None;
    for input in inputs {
        let f = open(&input)?;
        let this_layout = crate::writer::read3::layout_of(&f);
        match layout {
            None => layout = Some(this_layout),
            Some(l) if l != this_layout => {
                return Err(Error::new(Status::InvalidArgument, format!("{}: written in another layout than the first input", input.shown.display())));
            }
            _ => {}
        }
        let mut groups: BTreeMap<i64, String> = BTreeMap::new();
        for m in f.subgroups().map_err(|e| in_file(&input, e))? {
            let Some(digits) = m.name.strip_prefix("rank").filter(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit())) else { continue };
            let rank = digits.parse::<u64>().ok().filter(|&r| r <= crate::writer::read3::MAX_RANK);
            let Some(rank) = rank else {
                return Err(in_file(&input, format_args!("is damaged: group {} names a rank beyond {}", m.name, crate::writer::read3::MAX_RANK)));
            };
            let g = f.member(&m).map_err(|e| in_file(&input, e))?;
            g.check_tree().map_err(|e| in_file(&input, e))?;
            if groups.insert(rank as i64, m.name.clone()).is_some() {
                return Err(in_file(&input, format_args!("is damaged: two groups name rank {rank}")));
            }
        }
        // Schema 3: the ranks of the rank table too (files written before it: the groups).
        let mut all: BTreeSet<i64> = groups.keys().copied().collect();
        if this_layout.is_some() {
            let infos = crate::writer::read3::read_ranks(&f).map_err(|e| in_file(&input, e))?;
            all.extend(infos.keys().map(|&r| r as i64));
        }
        let mut ranks = Vec::new();
        for rank in all {
            if owner.insert(rank, scanned.len()).is_some() {
                return Err(Error::new(Status::InvalidArgument, format!("rank {rank} appears in more than one input file")));
            }
            ranks.push((rank, groups.remove(&rank)));
        }
        if ranks.is_empty() {
            return Err(in_file(&input, "holds no rank"));
        }
        if scanned.is_empty() {
            let meta = f.group("metadata").map_err(|e| in_file(&input, e))?;
            meta.check_tree().map_err(|e| in_file(&input, e))?;
        }
        scanned.push(Scanned { input, ranks });
    }
    let schema3 = layout.flatten();
    // Schema-3 inputs: their regions and rank attributes live in file-wide tables, read back
    // (and checked) here and written again through the layout writer, rank by rank; the rank
    // groups (counters, LIKWID) are copied. Their plan sizes the merged file's datasets before
    // the first rank is written.
    let mut profiles: BTreeMap<i64, crate::model::RankProfile> = BTreeMap::new();
    let mut plan = crate::writer::Plan::default();
    if schema3.is_some() {
        for (i, s) in scanned.iter().enumerate() {
            let f = open(&s.input)?;
            let mut infos = crate::writer::read3::read_ranks(&f).map_err(|e| in_file(&s.input, e))?;
            let mut regions = crate::writer::read3::read_regions(&f).map_err(|e| in_file(&s.input, e))?;
            let mut paths = crate::writer::read3::read_call_paths(&f, &mut infos).map_err(|e| in_file(&s.input, e))?;
            if let Some(rank) = regions.keys().find(|&&r| owner.get(&(r as i64)) != Some(&i)) {
                return Err(in_file(&s.input, format_args!("is damaged: its tables hold regions of rank {rank}, which it does not list")));
            }
            for (rank, _) in &s.ranks {
                let r = *rank as usize;
                let profile = crate::model::RankProfile { info: infos.remove(&r).unwrap_or_default(), regions: regions.remove(&r).unwrap_or_default(), call_paths: paths.remove(&r), ..Default::default() };
                profiles.insert(*rank, profile);
            }
        }
        // In rank order (the files were read file by file).
        plan = profiles.values().map(crate::writer::Plan::of).reduce(crate::writer::Plan::and).unwrap_or_default();
    }
    // The metadata of the lowest rank's file is the run's.
    let first = &scanned[*owner.values().next().expect("every input has a rank")];
    let omp = open(&first.input)?.group("metadata").ok().and_then(|m| m.attr_i64("omp_num_threads")).filter(|n| (1..=1 << 20).contains(n)).unwrap_or(1);
    let size = owner.keys().max().map_or(0, |m| m + 1).max(owner.len() as i64);
    let mut hosts = BTreeSet::new();
    // The run's clock, pooled over the ranks as a collective write pools it.
    let mut clock = crate::metadata::ClockSummary::default();
    let written = crate::output::write_file(output, |out| {
        // Each attempt (see `write_file`) starts over.
        (hosts, clock) = Default::default();
        let out = out.file();
        let source_err = |s: &Scanned, e: h5read::Error| hdf5::Error::from(format!("{}: {e}", s.input.shown.display()));
        {
            let f = open(&first.input).map_err(|e| hdf5::Error::from(e.message.as_str()))?;
            f.group("metadata").map_err(|e| source_err(first, e))?.location().copy_to(out, "metadata")?;
        }
        crate::writer::replace_attr(out, "scope_profiler_schema", &AttrValue::Int(crate::writer::SCHEMA_VERSION))?;
        let mut writer = schema3.map(|l| crate::writer::layout_writer(l, plan.clone()));
        for (rank, &i) in &owner {
            let s = &scanned[i];
            let f = open(&s.input).map_err(|e| hdf5::Error::from(e.message.as_str()))?;
            let name = &s.ranks.iter().find(|(r, _)| r == rank).expect("listed when scanned").1;
            let group = match name {
                Some(name) => Some((name, f.group(name).map_err(|e| source_err(s, e))?)),
                None => None,
            };
            match profiles.get(rank) {
                Some(profile) => {
                    if !profile.info.hostname.is_empty() {
                        hosts.insert(profile.info.hostname.clone());
                    }
                    clock.add(*rank, &profile.info);
                    // Counters and LIKWID results; the attributes are in the rank table.
                    if let Some((name, g)) = group {
                        if !g.is_empty().map_err(|e| source_err(s, e))? {
                            g.location().copy_to(out, name)?;
                            let copied = out.group(name)?;
                            for attr in copied.attr_names()? {
                                copied.delete_attr(&attr)?;
                            }
                        }
                    }
                    if let Some(w) = writer.as_mut() {
                        w.write_rank(out, *rank as usize, profile)?;
                    }
                }
                None => {
                    let Some((name, g)) = group else { continue };
                    if let Some(h) = g.attr_string("hostname") {
                        hosts.insert(h);
                    }
                    clock.add(*rank, &crate::model::RankInfo { extra: clock_attrs_of(&g), ..Default::default() });
                    g.location().copy_to(out, name)?;
                }
            }
        }
        if let Some(w) = writer.as_mut() {
            w.finish(out)?;
        }
        let meta = out.group("metadata")?;
        for name in ["mpi_size", "num_nodes", "total_cores", "partial_rank_file", "merged_from_rank_files"] {
            if meta.attr(name).is_ok() {
                meta.delete_attr(name)?;
            }
        }
        put_attr(&meta, "mpi_size", &AttrValue::Int(size))?;
        put_attr(&meta, "num_nodes", &AttrValue::Int(hosts.len().max(1) as i64))?;
        put_attr(&meta, "total_cores", &AttrValue::Int(size.saturating_mul(omp)))?;
        put_attr(&meta, "merged_from_rank_files", &AttrValue::Int(scanned.len() as i64))?;
        for (name, value) in clock.attrs() {
            crate::writer::replace_attr(&meta, &name, &value)?;
        }
        Ok(())
    })?;
    Ok(written)
}
