//! The HDF5 file: written under a temporary name and renamed into place, or written to a
//! fallback location when the target is not writable. What a rank's regions look like in it
//! is up to the layout writer (`regions`, `columnar`, `aggregate`); the rank group's
//! attributes, its counter results (`counters`) and its LIKWID results (`likwid`) are the same
//! in every layout. `read3` reads the layouts back (merging rank files).

pub mod aggregate;
pub mod call_paths;
pub mod columnar;
pub mod counters;
pub mod likwid;
pub mod mpi;
pub mod read3;
pub mod regions;

use crate::config::Layout;
use crate::model::{AttrValue, RankProfile};
use crate::placement::Placement;
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

/// Threads that merge and write a region's calls at finalize (the calling one among them):
/// two, as many as the pipeline of the HDF5 path uses, so finalize takes no more cores.
pub const WORKERS: usize = 2;

/// Values a `Column` holds: plain integers, whose bytes in memory are their bytes in the file
/// (the dataset is created with the native type).
pub trait ColumnValue: hdf5::H5Type + Copy {}
impl ColumnValue for i64 {}
impl ColumnValue for u8 {}
impl ColumnValue for u16 {}
impl ColumnValue for u32 {}

/// A one-dimensional dataset of `n` values, written slab by slab, every element once.
///
/// Contiguous, its space allocated when it is created and no fill values written. When the
/// file is on HDF5's default driver (`sec2`, a plain file descriptor), the slabs are written
/// straight to the dataset's bytes in the file with `pwrite`, which is what HDF5 does for such
/// a write after building a selection for it: the same bytes, without HDF5's per-call work
/// (about 6 us per write, a third of what finalize spent over a plain write of the file). HDF5
/// never reads or caches these bytes (raw data of a contiguous dataset is not cached unless it
/// is read or written through HDF5, and these columns never are). Any other case writes
/// through HDF5.
pub struct Column<T> {
    ds: hdf5::Dataset,
    /// HDF5's descriptor, the dataset's first byte and its length in values.
    direct: Option<(std::os::fd::RawFd, u64, usize)>,
    _values: std::marker::PhantomData<fn(T)>,
}

/// Where a column's values go in the file when they are written directly: HDF5's file
/// descriptor, the dataset's first byte, its length in values. Any thread can write any part
/// of the column (`pwrite` at an offset); it borrows the column, whose open dataset keeps the
/// file, and so the descriptor, open.
pub struct Direct<'c, T> {
    fd: std::os::fd::RawFd,
    offset: u64,
    len: usize,
    _column: std::marker::PhantomData<&'c Column<T>>,
}

impl<T> Clone for Direct<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Direct<'_, T> {}

pub fn new_column<T: ColumnValue>(group: &hdf5::Group, name: &str, n: usize) -> hdf5::Result<Column<T>> {
    use hdf5::plist::dataset_create::{AllocTime, FillTime};
    let ds = group.new_dataset::<T>().shape(n).fill_time(FillTime::Never).alloc_time(Some(AllocTime::Early)).create(name)?;
    let direct = if n > 0 { direct_target(group, &ds).map(|(fd, offset)| (fd, offset, n)) } else { None };
    Ok(Column { ds, direct, _values: std::marker::PhantomData })
}

/// The descriptor and offset for writing `ds`'s values directly, if that writes exactly what
/// HDF5 would: the sec2 driver, a native little-endian type, space allocated.
fn direct_target(group: &hdf5::Group, ds: &hdf5::Dataset) -> Option<(std::os::fd::RawFd, u64)> {
    if cfg!(target_endian = "big") {
        return None;
    }
    let file = group.file().ok()?;
    if !matches!(file.access_plist().ok()?.get_driver().ok()?, hdf5::plist::file_access::FileDriver::Sec2) {
        return None;
    }
    let offset = ds.offset()?;
    let mut handle: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: for the sec2 driver the handle is a pointer to the driver's `int` descriptor,
    // valid while the file is open (the column is written before the file is closed).
    let got = hdf5::sync::sync(|| unsafe { hdf5_sys::h5f::H5Fget_vfd_handle(file.id(), hdf5_sys::h5p::H5P_DEFAULT, &mut handle) });
    if got < 0 || handle.is_null() {
        return None;
    }
    let fd = unsafe { *(handle as *const std::os::raw::c_int) };
    (fd >= 0).then_some((fd, offset))
}

impl<T: ColumnValue> Column<T> {
    /// Write `data` at value `at` (the caller writes each value exactly once).
    pub fn write_at(&self, at: usize, data: &[T]) -> hdf5::Result<()> {
        match self.direct() {
            Some(d) => d.write_at(at, data),
            None if data.is_empty() => Ok(()),
            None => self.ds.write_slice(data, at..at + data.len()),
        }
    }

    /// The column's direct writer, when it has one (see `Column`).
    pub fn direct(&self) -> Option<Direct<'_, T>> {
        self.direct.map(|(fd, offset, len)| Direct { fd, offset, len, _column: std::marker::PhantomData })
    }
}

impl<T: ColumnValue> Direct<'_, T> {
    /// Write `data` at value `at` with `pwrite`.
    pub fn write_at(&self, at: usize, data: &[T]) -> hdf5::Result<()> {
        if at + data.len() > self.len {
            return Err(hdf5::Error::from(format!("column write past its end ({at} + {} > {})", data.len(), self.len)));
        }
        // SAFETY: `T` is a plain integer (`ColumnValue`): its bytes are initialized.
        let mut bytes = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) };
        let mut offset = self.offset + (at * std::mem::size_of::<T>()) as u64;
        while !bytes.is_empty() {
            // SAFETY: writes `bytes` (valid for reads) to HDF5's open descriptor.
            let n = unsafe { libc::pwrite(self.fd, bytes.as_ptr().cast(), bytes.len(), offset as libc::off_t) };
            if n <= 0 {
                let e = std::io::Error::last_os_error();
                if n < 0 && e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(hdf5::Error::from(format!("writing a column at byte {offset}: {}", if n == 0 { "no progress".into() } else { e.to_string() })));
            }
            bytes = &bytes[n as usize..];
            offset += n as u64;
        }
        Ok(())
    }
}

/// Bytes of HDF5's type-conversion buffer for our writes that convert (variable-length
/// strings). HDF5's default is 1 MiB, malloc'd and freed at every such write: a block that big
/// is mapped by glibc, and freeing it raises glibc's mmap threshold for the host (see
/// `model/pages.rs`). A small buffer is converted through in pieces instead.
const CONVERSION_BUFFER: usize = 32 * 1024;

/// A 1-D dataset `name` of variable-length UTF-8 strings holding `values`, written with a
/// small type-conversion buffer (`CONVERSION_BUFFER`).
pub fn put_strings_dataset(group: &hdf5::Group, name: &str, values: &[String]) -> hdf5::Result<hdf5::Dataset> {
    let data: Vec<VarLenUnicode> = values.iter().map(|v| v.replace('\0', "").parse().unwrap_or_default()).collect();
    let ds = group.new_dataset::<VarLenUnicode>().shape(data.len()).create(name)?;
    if data.is_empty() {
        return Ok(ds);
    }
    let mem_type = hdf5::Datatype::from_type::<VarLenUnicode>()?;
    let status = hdf5::sync::sync(|| {
        use hdf5_sys::{h5d, h5p, h5s};
        // SAFETY: a property list of our own, closed below; `data` holds `ds`'s length of
        // values of the memory type given.
        unsafe {
            let dxpl = h5p::H5Pcreate(*h5p::H5P_CLS_DATASET_XFER);
            if dxpl < 0 {
                return -1;
            }
            let mut status = h5p::H5Pset_buffer(dxpl, CONVERSION_BUFFER, std::ptr::null_mut(), std::ptr::null_mut());
            if status >= 0 {
                status = h5d::H5Dwrite(ds.id(), mem_type.id(), h5s::H5S_ALL, h5s::H5S_ALL, dxpl, data.as_ptr().cast());
            }
            h5p::H5Pclose(dxpl);
            status
        }
    });
    if status < 0 {
        return Err(hdf5::Error::from(format!("writing the strings of dataset {name} failed")));
    }
    Ok(ds)
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

    /// Create the file in a fallback directory not in `tried`, because of `reason`.
    pub fn create_fallback(target: &Path, reason: String, tried: &[std::path::PathBuf]) -> Result<ProfileFile> {
        let (file, place) = Placement::create_h5_fallback(target, reason, tried)?;
        Ok(ProfileFile { file, place })
    }

    /// Where the file is meant to go, and its directory.
    pub fn destination(&self) -> (&Path, std::path::PathBuf) {
        (self.place.destination(), self.place.directory())
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
        likwid::write_group(&g, &profile.likwid)?;
        counters::write(&g, &profile.counters)?;
        if let Some(m) = &profile.mpi {
            mpi::write(&g, m)?;
        }
        if let Some(p) = &profile.call_paths {
            call_paths::write(&g, p)?;
        }
        Ok(())
    }

    /// Close the file and move it into place.
    pub fn finish(self) -> Result<Written> {
        let ProfileFile { file, place } = self;
        if let Err(e) = file.close() {
            let e = Error::new(Status::WriteFailed, format!("closing {}: {e}", place.temporary_path().display()));
            place.abandon();
            return Err(e);
        }
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
    use crate::model::{RegionData, SourceLocation};

    #[test]
    fn group_names() {
        let mut used = HashSet::new();
        assert_eq!(group_name("a/b", &mut used), "a|b");
        assert_eq!(group_name("a|b", &mut used), "a|b #2");
        assert_eq!(group_name("a|b", &mut used), "a|b #3");
        assert_eq!(group_name(".", &mut used), "|.");
        assert_eq!(group_name("é x", &mut used), "é x");
    }

    /// Columns written directly (pwrite at the dataset's offset) read back through HDF5 as
    /// written, in any order of slabs and from several threads; on a driver without a file
    /// descriptor (the in-memory `core` driver, saved at close) the same writes go through HDF5.
    #[test]
    fn direct_column_writes_read_back_through_hdf5() {
        let dir = std::env::temp_dir().join(format!("sp_direct_test_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let n = 300_000usize;
        let values: Vec<i64> = (0..n as i64).map(|i| i * 7 - 3_000_000_000_000).collect();
        let bytes: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        for core in [false, true] {
            let path = dir.join(format!("direct_{core}.h5"));
            let file = if core {
                hdf5::File::with_options().with_fapl(|p| p.core_filebacked(true)).create(&path).unwrap()
            } else {
                hdf5::File::create(&path).unwrap()
            };
            let g = file.create_group("g").unwrap();
            // Something written through HDF5 before and between the columns.
            put_int(&g, "before", 1).unwrap();
            let a = new_column::<i64>(&g, "a", n).unwrap();
            put_i64_dataset(&g, "between", &[5, 6, 7]).unwrap();
            let b = new_column::<u8>(&g, "b", n).unwrap();
            let empty = new_column::<i64>(&g, "empty", 0).unwrap();
            assert_eq!(a.direct().is_some(), !core, "direct writes on the sec2 driver only");
            assert_eq!(b.direct().is_some(), !core);
            empty.write_at(0, &[]).unwrap();
            // Slabs out of order; the direct ones from two threads at once.
            let pieces = [(200_000, n), (0, 70_000), (70_000, 200_000)];
            if let (Some(da), Some(db)) = (a.direct(), b.direct()) {
                std::thread::scope(|s| {
                    for &(i, j) in &pieces {
                        let (values, bytes) = (&values, &bytes);
                        s.spawn(move || {
                            da.write_at(i, &values[i..j]).unwrap();
                            db.write_at(i, &bytes[i..j]).unwrap();
                        });
                    }
                });
                assert!(da.write_at(n - 1, &values[..2]).is_err(), "a write past the column's end is refused");
            } else {
                for &(i, j) in &pieces {
                    a.write_at(i, &values[i..j]).unwrap();
                    b.write_at(i, &bytes[i..j]).unwrap();
                }
            }
            put_int(&g, "after", 2).unwrap();
            drop((a, b, empty, g));
            file.close().unwrap();
            let f = hdf5::File::open(&path).unwrap();
            assert_eq!(f.dataset("g/a").unwrap().read_raw::<i64>().unwrap(), values);
            assert_eq!(f.dataset("g/b").unwrap().read_raw::<u8>().unwrap(), bytes);
            assert_eq!(f.dataset("g/between").unwrap().read_raw::<i64>().unwrap(), vec![5, 6, 7]);
            assert_eq!(f.dataset("g/empty").unwrap().size(), 0);
            assert_eq!(f.group("g").unwrap().attr("after").unwrap().read_scalar::<i64>().unwrap(), 2);
        }
        std::fs::remove_dir_all(&dir).unwrap();
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
        p.regions.push(RegionData { open_calls: 1, source: Some(SourceLocation { file: "src/x.c".into(), line: 12 }), ..RegionData::from_columns("x/y", vec![1, 2], vec![3, 4], vec![0, 0]) });
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
