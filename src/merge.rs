//! Combining per-rank files (written when MPI was not usable at finalize, or when the
//! collective write failed) into the normal single file: in the regions layout every
//! `rank<N>` group is copied whole; in the schema-3 layouts each rank's regions and attributes
//! are read back (`writer::read3`) and written again through the layout writer, and its
//! `rank<N>` group (counters, LIKWID) copied. The metadata of the first file is kept with
//! `mpi_size`, `num_nodes`, `total_cores` and the run's clock (pooled over the ranks' clock
//! attributes) redone.

use crate::model::AttrValue;
use crate::status::{Error, Result, Status};
use crate::writer::{Written, put_attr};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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

/// A rank group's clock attributes (see `metadata::clock_attrs`), as far as it has them.
fn clock_attrs_of(g: &hdf5::Group) -> Vec<(String, AttrValue)> {
    let text = |k: &str| g.attr(k).and_then(|a| a.read_scalar::<hdf5::types::VarLenUnicode>()).ok().map(|v| AttrValue::Str(v.as_str().to_string()));
    let int = |k: &str| g.attr(k).and_then(|a| a.read_scalar::<i64>()).ok().map(AttrValue::Int);
    [("clock", text("clock")), ("clock_status", text("clock_status")), ("clock_tsc_hz", int("clock_tsc_hz")), ("clock_error_bound_ns", int("clock_error_bound_ns"))]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
        .collect()
}

/// The `rank<N>` groups of a file: (rank, group name).
fn rank_groups(f: &hdf5::File) -> hdf5::Result<Vec<(i64, String)>> {
    Ok(f.member_names()?
        .into_iter()
        .filter_map(|n| {
            let r: i64 = n.strip_prefix("rank").filter(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))?.parse().ok()?;
            Some((r, n))
        })
        .collect())
}

/// Merge `inputs` (files, or directories holding per-rank files) into `output`. Each rank may
/// appear only once.
pub fn merge_rank_files(output: &Path, inputs: &[PathBuf]) -> Result<Written> {
    if inputs.is_empty() {
        return Err(Error::new(Status::InvalidArgument, "no input files to merge"));
    }
    let inputs = expand(inputs)?;
    let mut files = BTreeMap::new(); // rank -> (path to open, its rank<N> group if any)
    // None: schema 1 (regions); else the schema-3 layout of every input.
    let mut layout: Option<Option<crate::config::Layout>> = None;
    for input in &inputs {
        let path = &input.shown;
        let f = hdf5::File::open(&input.open).map_err(|e| fail(format!("{}: not a readable HDF5 file ({e})", path.display())))?;
        let this_layout = crate::writer::read3::layout_of(&f);
        match layout {
            None => layout = Some(this_layout),
            Some(l) if l != this_layout => {
                return Err(Error::new(Status::InvalidArgument, format!("{}: written in another layout than the first input", path.display())));
            }
            _ => {}
        }
        let groups: BTreeMap<i64, String> = rank_groups(&f).map_err(|e| fail(format!("{}: {e}", path.display())))?.into_iter().collect();
        // Schema 3: the ranks of the rank table (files written before it: the rank groups).
        let ranks: Vec<i64> = if this_layout.is_some() {
            let info = crate::writer::read3::read_ranks(&f).map_err(|e| fail(format!("{}: {e}", path.display())))?;
            info.keys().map(|&r| r as i64).chain(groups.keys().copied()).collect::<BTreeSet<_>>().into_iter().collect()
        } else {
            groups.keys().copied().collect()
        };
        if ranks.is_empty() {
            return Err(fail(format!("{}: holds no rank", path.display())));
        }
        for rank in ranks {
            if files.insert(rank, (input.open.clone(), groups.get(&rank).cloned())).is_some() {
                return Err(Error::new(Status::InvalidArgument, format!("rank {rank} appears in more than one input file")));
            }
        }
    }
    let schema3 = layout.flatten();
    // Schema-3 inputs: every rank's regions and attributes, read once (their plan sizes the
    // merged file's datasets before the first rank is written).
    let mut profiles: BTreeMap<i64, crate::model::RankProfile> = BTreeMap::new();
    let mut plan: Option<crate::writer::Plan> = None;
    if schema3.is_some() {
        for path in files.values().map(|(p, _)| p.clone()).collect::<BTreeSet<_>>() {
            let read = || -> hdf5::Result<_> {
                let f = hdf5::File::open(&path)?;
                Ok((crate::writer::read3::read_regions(&f)?, crate::writer::read3::read_ranks(&f)?))
            };
            let (mut regions, mut infos) = read().map_err(|e| fail(format!("{}: {e}", path.display())))?;
            for (rank, (p, _)) in &files {
                if *p != path {
                    continue;
                }
                let r = *rank as usize;
                let profile = crate::model::RankProfile { info: infos.remove(&r).unwrap_or_default(), regions: regions.remove(&r).unwrap_or_default(), ..Default::default() };
                profiles.insert(*rank, profile);
            }
        }
        // In rank order (the files were read file by file).
        plan = profiles.values().map(crate::writer::Plan::of).reduce(crate::writer::Plan::and);
    }
    let mut hosts = BTreeSet::new();
    // The run's clock, pooled over the ranks as a collective write pools it.
    let mut clock = crate::metadata::ClockSummary::default();
    let written = crate::output::write_file(output, |out| {
        // Each attempt (see `write_file`) starts over.
        (hosts, clock) = Default::default();
        let out = out.file();
        let first = hdf5::File::open(&files.values().next().unwrap().0)?;
        first.group("metadata")?.copy_to(out, "metadata")?;
        crate::writer::replace_attr(out, "scope_profiler_schema", &AttrValue::Int(crate::writer::SCHEMA_VERSION))?;
        let mut writer = schema3.map(|l| crate::writer::layout_writer(l, plan.clone().unwrap_or_default()));
        for (rank, (path, group)) in &files {
            let f = hdf5::File::open(path)?;
            match profiles.get(rank) {
                Some(profile) => {
                    if !profile.info.hostname.is_empty() {
                        hosts.insert(profile.info.hostname.clone());
                    }
                    clock.add(*rank, &profile.info);
                    // Counters and LIKWID results; the attributes are in the rank table.
                    if let Some(group) = group {
                        let g = f.group(group)?;
                        if !g.is_empty() {
                            g.copy_to(out, group)?;
                            let copied = out.group(group)?;
                            for name in copied.attr_names()? {
                                copied.delete_attr(&name)?;
                            }
                        }
                    }
                    if let Some(w) = writer.as_mut() {
                        w.write_rank(out, *rank as usize, profile)?;
                    }
                }
                None => {
                    let Some(group) = group else { continue };
                    let g = f.group(group)?;
                    if let Ok(a) = g.attr("hostname") {
                        hosts.insert(a.read_scalar::<hdf5::types::VarLenUnicode>()?.as_str().to_string());
                    }
                    clock.add(*rank, &crate::model::RankInfo { extra: clock_attrs_of(&g), ..Default::default() });
                    g.copy_to(out, group)?;
                }
            }
        }
        if let Some(w) = writer.as_mut() {
            w.finish(out)?;
        }
        let meta = out.group("metadata")?;
        let omp = meta.attr("omp_num_threads").and_then(|a| a.read_scalar::<i64>()).unwrap_or(1);
        let size = files.keys().max().map(|m| m + 1).unwrap_or(0).max(files.len() as i64);
        for name in ["mpi_size", "num_nodes", "total_cores", "partial_rank_file"] {
            if meta.attr(name).is_ok() {
                meta.delete_attr(name)?;
            }
        }
        put_attr(&meta, "mpi_size", &AttrValue::Int(size))?;
        put_attr(&meta, "num_nodes", &AttrValue::Int(hosts.len().max(1) as i64))?;
        put_attr(&meta, "total_cores", &AttrValue::Int(size * omp))?;
        put_attr(&meta, "merged_from_rank_files", &AttrValue::Int(inputs.len() as i64))?;
        for (name, value) in clock.attrs() {
            crate::writer::replace_attr(&meta, &name, &value)?;
        }
        Ok(())
    })?;
    Ok(written)
}
