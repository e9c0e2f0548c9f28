//! The HDF5 file: written under a temporary name and renamed into place, or written to a
//! fallback location when the target is not writable. What a rank's regions look like in it
//! is up to the layout writer (`regions`, `columnar`, `aggregate`); the rank group's
//! attributes and its LIKWID results are the same in every layout.

pub mod aggregate;
pub mod columnar;
pub mod read3;
pub mod regions;

use crate::config::Layout;
use crate::metadata::AttrValue;
use crate::placement::Placement;
use crate::profile::RankProfile;
use crate::status::{Error, Result, Status};
use hdf5::types::VarLenUnicode;
use std::collections::HashSet;
use std::path::Path;

pub const SCHEMA_VERSION: i64 = 1;

/// What a layout writer needs to know before the first rank: the calls and threads of the
/// whole run (summed and maximized over the ranks), so columns can be sized once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Plan {
    pub total_calls: u64,
    pub max_threads: u64,
}

impl Plan {
    pub fn of(profile: &RankProfile) -> Plan {
        Plan { total_calls: profile.regions.iter().map(|r| r.calls() as u64).sum(), max_threads: profile.num_threads() as u64 }
    }

    pub fn and(self, other: Plan) -> Plan {
        Plan { total_calls: self.total_calls + other.total_calls, max_threads: self.max_threads.max(other.max_threads) }
    }
}

/// Writes the regions of each rank in one layout, then whatever the layout keeps for the
/// whole file (its index tables, the schema attributes).
pub trait LayoutWriter {
    /// The regions of `profile`, which is rank `rank`; `group` is its `rank<N>` group.
    fn write_rank(&mut self, file: &hdf5::File, group: &hdf5::Group, rank: usize, profile: &RankProfile) -> hdf5::Result<()>;
    /// After the last rank.
    fn finish(&mut self, file: &hdf5::File) -> hdf5::Result<()>;
}

/// The writer of `layout`, for a run described by `plan`.
pub fn layout_writer(layout: Layout, plan: Plan) -> Box<dyn LayoutWriter> {
    match layout {
        Layout::Regions => Box::new(regions::Regions),
        Layout::Columnar => Box::new(columnar::Columnar::new(plan)),
        Layout::Aggregate => Box::new(aggregate::Aggregate::default()),
    }
}

/// Set a file attribute, replacing it if present (the layouts of schema 3 overwrite the
/// schema number written with the metadata).
pub fn replace_attr(loc: &hdf5::Location, name: &str, value: &AttrValue) -> hdf5::Result<()> {
    if loc.attr(name).is_ok() {
        loc.delete_attr(name)?;
    }
    put_attr(loc, name, value)
}

/// A one-dimensional dataset of `n` values written slab by slab: contiguous, no fill values
/// written first (every element is written once).
pub fn new_column<T: hdf5::H5Type>(group: &hdf5::Group, name: &str, n: usize) -> hdf5::Result<hdf5::Dataset> {
    group.new_dataset::<T>().shape(n).fill_time(hdf5::plist::dataset_create::FillTime::Never).create(name)
}

/// Write `data` at `offset` of a column made by `new_column`.
pub fn write_at<T: hdf5::H5Type>(ds: &hdf5::Dataset, offset: usize, data: &[T]) -> hdf5::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    ds.write_slice(data, offset..offset + data.len())
}

/// Group name of a region: `/` separates HDF5 groups, so it becomes `|` (the `tag` attribute
/// keeps the real name); `.`/`..` are reserved link names; clashes get a ` #2` suffix.
pub fn group_name(name: &str, used: &mut HashSet<String>) -> String {
    let mut base = name.replace('/', "|");
    if base == "." || base == ".." {
        base = format!("|{base}");
    }
    let mut candidate = base.clone();
    let mut n = 2;
    while !used.insert(candidate.clone()) {
        candidate = format!("{base} #{n}");
        n += 1;
    }
    candidate
}

fn var_str(value: &str) -> VarLenUnicode {
    // VarLenUnicode rejects interior NULs; names were validated, other values are cleaned here.
    value.replace('\0', "").parse().unwrap_or_default()
}

pub fn put_attr(loc: &hdf5::Location, name: &str, value: &AttrValue) -> hdf5::Result<()> {
    match value {
        AttrValue::Str(s) => loc.new_attr::<VarLenUnicode>().create(name)?.write_scalar(&var_str(s)),
        AttrValue::Int(i) => loc.new_attr::<i64>().create(name)?.write_scalar(i),
        AttrValue::StrList(list) => {
            let v: Vec<VarLenUnicode> = list.iter().map(|s| var_str(s)).collect();
            loc.new_attr::<VarLenUnicode>().shape(v.len()).create(name)?.write(&v)
        }
        AttrValue::IntList(list) => loc.new_attr::<i64>().shape(list.len()).create(name)?.write(list),
    }
}

pub fn put_str(loc: &hdf5::Location, name: &str, value: &str) -> hdf5::Result<()> {
    put_attr(loc, name, &AttrValue::Str(value.to_string()))
}

pub fn put_int(loc: &hdf5::Location, name: &str, value: i64) -> hdf5::Result<()> {
    put_attr(loc, name, &AttrValue::Int(value))
}

pub fn put_i64_dataset(group: &hdf5::Group, name: &str, data: &[i64]) -> hdf5::Result<()> {
    let ds = group.new_dataset::<i64>().shape(data.len()).create(name)?;
    if !data.is_empty() {
        ds.write(data)?;
    }
    Ok(())
}

pub use crate::placement::Written;

/// An open profile file being written (created privately, see src/placement.rs).
pub struct ProfileFile {
    file: hdf5::File,
    place: Placement,
}

impl ProfileFile {
    /// Create the file privately for `target`, or in a fallback directory.
    pub fn create(target: &Path) -> Result<ProfileFile> {
        let (file, place) = Placement::create_h5(target)?;
        Ok(ProfileFile { file, place })
    }

    /// The open HDF5 file (for copying whole groups into it).
    pub fn file(&self) -> &hdf5::File {
        &self.file
    }

    pub fn write_metadata(&self, attrs: &[(String, AttrValue)]) -> hdf5::Result<()> {
        put_int(&self.file, "scope_profiler_schema", SCHEMA_VERSION)?;
        let meta = self.file.create_group("metadata")?;
        for (name, value) in attrs {
            put_attr(&meta, name, value)?;
        }
        Ok(())
    }

    /// Write one process's data as `rank<rank>/`, its regions as `layout` stores them.
    pub fn write_rank(&self, rank: usize, profile: &RankProfile, layout: &mut dyn LayoutWriter) -> hdf5::Result<()> {
        let g = self.file.create_group(&format!("rank{rank}"))?;
        let info = &profile.info;
        if !info.hostname.is_empty() {
            put_str(&g, "hostname", &info.hostname)?; // left out with SCOPE_PROFILER_METADATA=minimal
        }
        put_int(&g, "pid", info.pid)?;
        put_attr(&g, "cpus", &AttrValue::IntList(info.cpus.clone()))?;
        put_int(&g, "num_threads", profile.num_threads() as i64)?;
        put_attr(&g, "thread_os_ids", &AttrValue::IntList(info.thread_os_ids.clone()))?;
        for (name, value) in &info.extra {
            put_attr(&g, name, value)?;
        }
        layout.write_rank(&self.file, &g, rank, profile)?;
        crate::likwid::write_group(&g, &profile.likwid)?;
        crate::counters::h5::write(&g, &profile.counters)?;
        Ok(())
    }

    /// Close the file and move it into place.
    pub fn finish(self) -> Result<Written> {
        let ProfileFile { file, place } = self;
        file.close().map_err(|e| Error::new(Status::WriteFailed, format!("closing {}: {e}", place.temporary_path().display())))?;
        place.finish()
    }

    /// Give up on a half-written file: remove it.
    pub fn abandon(self) {
        drop(self.file);
        self.place.abandon();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::RegionData;

    #[test]
    fn group_names() {
        let mut used = HashSet::new();
        assert_eq!(group_name("a/b", &mut used), "a|b");
        assert_eq!(group_name("a|b", &mut used), "a|b #2");
        assert_eq!(group_name("a|b", &mut used), "a|b #3");
        assert_eq!(group_name(".", &mut used), "|.");
        assert_eq!(group_name("é x", &mut used), "é x");
    }

    #[test]
    fn writes_and_falls_back() {
        let dir = std::env::temp_dir().join(format!("sp_writer_test_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("out.h5");
        let f = ProfileFile::create(&target).unwrap();
        f.write_metadata(&[("mpi_size".into(), AttrValue::Int(1))]).unwrap();
        let mut p = RankProfile::default();
        p.info.thread_os_ids = vec![42];
        p.regions.push(RegionData { open_calls: 1, source: Some(crate::profile::SourceLocation { file: "src/x.c".into(), line: 12 }), ..RegionData::from_columns("x/y", vec![1, 2], vec![3, 4], vec![0, 0]) });
        p.regions.push(RegionData { name: "only open".into(), open_calls: 2, ..Default::default() });
        f.write_rank(0, &p, &mut regions::Regions).unwrap();
        let w = f.finish().unwrap();
        assert_eq!(w.path, target);
        assert!(w.fallback_reason.is_none());
        let file = hdf5::File::open(&target).unwrap();
        assert_eq!(file.attr("scope_profiler_schema").unwrap().read_scalar::<i64>().unwrap(), 1);
        let r = file.group("rank0/regions/x|y").unwrap();
        assert_eq!(r.attr("tag").unwrap().read_scalar::<VarLenUnicode>().unwrap().as_str(), "x/y");
        assert_eq!(r.dataset("end_times").unwrap().read_raw::<i64>().unwrap(), vec![3, 4]);
        assert_eq!(r.attr("source_file").unwrap().read_scalar::<VarLenUnicode>().unwrap().as_str(), "src/x.c");
        assert_eq!(r.attr("source_lineno").unwrap().read_scalar::<i64>().unwrap(), 12);
        assert!(file.group("rank0/regions/only open").unwrap().attr("source_file").is_err());
        assert_eq!(file.group("rank0/regions/only open").unwrap().dataset("start_times").unwrap().size(), 0);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "nothing but the profile is left");

        // A target in a directory that does not exist goes to the fallback location.
        let f = ProfileFile::create(&dir.join("missing/sub/out.h5")).unwrap();
        f.write_metadata(&[]).unwrap();
        let w = f.finish().unwrap();
        assert!(w.fallback_reason.as_deref().unwrap().contains("missing/sub/out.h5"), "{w:?}");
        assert!(w.path.exists());
        std::fs::remove_file(&w.path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
