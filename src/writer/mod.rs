//! The HDF5 file: written under a temporary name and renamed into place, or written to a
//! fallback location when the target is not writable. What a rank's regions look like in it
//! is up to the layout writer (`regions`, `columnar`, `aggregate`). A rank's attributes are the
//! `rank<N>` group's attributes in the regions layout (schema 1) and a row of the rank table
//! (`tables`) in the schema-3 layouts; its counter results (`counters`) and LIKWID results
//! (`likwid`) are `rank<N>` groups in every layout. `read3` reads the schema-3 layouts back
//! (merging rank files). The schema-3 files are laid out once, from the run's `Plan`, so that
//! each rank's part can be written into them by this process or by the rank itself (`tables`).

pub mod aggregate;
pub mod call_paths;
pub mod columnar;
pub mod counters;
pub mod likwid;
pub mod mpi;
pub mod read3;
pub mod regions;
pub mod samples;
pub mod sps;
pub mod tables;

use crate::config::Layout;
use crate::model::{AttrValue, RankProfile};
use crate::placement::Placement;
use crate::status::{Error, Result, Status};
use hdf5::types::VarLenUnicode;
use std::collections::HashSet;
use std::path::Path;

pub const SCHEMA_VERSION: i64 = 1;

/// What the layout writers need to know before the first rank is written, for the whole run:
/// counted per rank (`of`) and combined over the ranks in rank order (`and`, associative), so
/// that every dataset is created once at its final size and each rank knows where its part
/// goes. Plain data: sent between ranks (`unify`) as JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    /// Calls of all ranks.
    pub total_calls: u64,
    /// Threads of the rank with the most (the width of `events/thread_ids`).
    pub max_threads: u64,
    /// Calls of the rank with the most (the rounds of a collective write).
    pub max_rank_calls: u64,
    /// Ranks (rows of the rank table).
    pub ranks: u64,
    /// (rank, region) rows of `rank_region_index`.
    pub rows: u64,
    /// (rank, region, thread) rows of `scope_profiler_threads`.
    pub thread_rows: u64,
    /// (rank, thread, call path) rows of `call_paths`.
    pub path_rows: u64,
    /// Region names in the order of their first appearance, rank by rank (`region_table/names`).
    pub names: Vec<String>,
    /// Bytes of the longest source file name (`rank_region_index/source_files`).
    pub source_width: u64,
    /// The rank table's columns: every rank attribute of any rank, in the order of first
    /// appearance.
    pub attrs: Vec<AttrColumn>,
}

/// The kind of a rank attribute (`AttrValue`'s variants).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AttrKind {
    Int,
    Str,
    IntList,
    StrList,
}

impl AttrKind {
    pub fn of(value: &AttrValue) -> AttrKind {
        match value {
            AttrValue::Int(_) => AttrKind::Int,
            AttrValue::Str(_) => AttrKind::Str,
            AttrValue::IntList(_) => AttrKind::IntList,
            AttrValue::StrList(_) => AttrKind::StrList,
        }
    }
}

/// One column of the rank table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AttrColumn {
    pub name: String,
    pub kind: AttrKind,
    /// Bytes of the longest string (string kinds).
    pub width: u64,
    /// Values of all ranks (list kinds).
    pub values: u64,
}

/// Whether a rank attribute can be a dataset of the rank table: a plain name that is not one
/// of the table's own (`ranks`, `<list>_offsets`); anything else stays out of the table.
pub fn is_table_column(name: &str) -> bool {
    !name.is_empty() && name != "ranks" && !name.ends_with("_offsets") && !name.contains(['/', '\0']) && name != "." && name != ".."
}

/// A string as it is stored: HDF5 strings hold no NUL.
pub fn clean(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains('\0') { std::borrow::Cow::Owned(s.replace('\0', "")) } else { std::borrow::Cow::Borrowed(s) }
}

/// A rank's attributes, in the order they are written: host name (left out when empty, as
/// `SCOPE_PROFILER_METADATA=minimal` leaves it), process id, CPUs, threads, then the others
/// (clock, MPI rank and clock offset, ...); a name given twice keeps its first value.
pub fn rank_attrs(profile: &RankProfile) -> Vec<(String, AttrValue)> {
    let info = &profile.info;
    let mut out: Vec<(String, AttrValue)> = Vec::with_capacity(5 + info.extra.len());
    if !info.hostname.is_empty() {
        out.push(("hostname".into(), AttrValue::Str(info.hostname.clone())));
    }
    out.push(("pid".into(), AttrValue::Int(info.pid)));
    out.push(("cpus".into(), AttrValue::IntList(info.cpus.clone())));
    out.push(("num_threads".into(), AttrValue::Int(profile.num_threads() as i64)));
    out.push(("thread_os_ids".into(), AttrValue::IntList(info.thread_os_ids.clone())));
    for (name, value) in &info.extra {
        if !out.iter().any(|(n, _)| n == name) {
            out.push((name.clone(), value.clone()));
        }
    }
    out
}

/// The rank table's attribute holding a rank's wall time of its call paths (`CallPaths::wall_ns`).
pub const PATHS_WALL: &str = "call_paths_wall_ns";

/// A rank's attributes as the schema-3 rank table holds them: `rank_attrs`, and the wall time
/// of its call paths (when it has them; the regions layout keeps it in `rank<N>/call_paths/`).
pub fn table_attrs(profile: &RankProfile) -> Vec<(String, AttrValue)> {
    let mut out = rank_attrs(profile);
    out.retain(|(n, _)| n != PATHS_WALL);
    if let Some(p) = &profile.call_paths {
        out.push((PATHS_WALL.into(), AttrValue::Int(p.wall_ns)));
    }
    out
}

impl Plan {
    /// One rank's plan.
    pub fn of(profile: &RankProfile) -> Plan {
        let calls: u64 = profile.regions.iter().map(|r| r.calls() as u64).sum();
        let stats_threads = profile.regions.iter().flat_map(|r| r.stats.iter().map(|(t, _)| (*t).max(0) as u64 + 1)).max().unwrap_or(0);
        let mut names = Vec::with_capacity(profile.regions.len());
        let mut seen = std::collections::HashSet::with_capacity(profile.regions.len());
        for r in &profile.regions {
            if seen.insert(r.name.as_str()) {
                names.push(r.name.clone());
            }
        }
        // Regions named only by the call paths (none recorded a call) are names of the run too.
        for n in profile.call_paths.iter().flat_map(|p| p.names.iter()) {
            if seen.insert(n.as_str()) {
                names.push(n.clone());
            }
        }
        let source_width = profile.regions.iter().filter_map(|r| r.source.as_ref()).map(|s| clean(&s.file).len() as u64).max().unwrap_or(0);
        let attrs = table_attrs(profile)
            .into_iter()
            .filter(|(name, _)| is_table_column(name))
            .map(|(name, value)| {
                let (width, values) = match &value {
                    AttrValue::Int(_) => (0, 0),
                    AttrValue::Str(s) => (clean(s).len() as u64, 0),
                    AttrValue::IntList(l) => (0, l.len() as u64),
                    AttrValue::StrList(l) => (l.iter().map(|s| clean(s).len() as u64).max().unwrap_or(0), l.len() as u64),
                };
                AttrColumn { name, kind: AttrKind::of(&value), width, values }
            })
            .collect();
        Plan {
            total_calls: calls,
            max_threads: (profile.num_threads() as u64).max(stats_threads),
            max_rank_calls: calls,
            ranks: 1,
            rows: profile.regions.len() as u64,
            thread_rows: profile.regions.iter().map(|r| r.stats.len() as u64).sum(),
            path_rows: profile.call_paths.as_ref().map_or(0, |p| p.nodes.len() as u64),
            names,
            source_width,
            attrs,
        }
    }

    /// This plan followed by `later` (the ranks after these): sums, maxima, and names and
    /// columns in the order of first appearance.
    pub fn and(mut self, later: Plan) -> Plan {
        self.total_calls += later.total_calls;
        self.max_threads = self.max_threads.max(later.max_threads);
        self.max_rank_calls = self.max_rank_calls.max(later.max_rank_calls);
        self.ranks += later.ranks;
        self.rows += later.rows;
        self.thread_rows += later.thread_rows;
        self.path_rows += later.path_rows;
        self.source_width = self.source_width.max(later.source_width);
        let seen: std::collections::HashSet<String> = self.names.iter().cloned().collect();
        self.names.extend(later.names.into_iter().filter(|n| !seen.contains(n)));
        for c in later.attrs {
            match self.attrs.iter_mut().find(|a| a.name == c.name) {
                // A rank whose value has another kind than the column's leaves its cell empty.
                Some(a) if a.kind == c.kind => {
                    a.width = a.width.max(c.width);
                    a.values += c.values;
                }
                Some(_) => {}
                None => self.attrs.push(c),
            }
        }
        self
    }
}

/// Writes the regions of each rank in one layout, then whatever the layout keeps for the
/// whole file (its index tables, the schema attributes).
pub trait LayoutWriter {
    /// The regions of `profile`, which is rank `rank` (in the regions layout, under its
    /// `rank<rank>` group, which the caller made).
    fn write_rank(&mut self, file: &hdf5::File, rank: usize, profile: &RankProfile) -> hdf5::Result<()>;
    /// After the last rank.
    fn finish(&mut self, file: &hdf5::File) -> hdf5::Result<()>;
    /// Whether the rank's attributes are attributes of its `rank<N>` group (schema 1); else
    /// they are a row of the rank table, and the group exists only for counters and LIKWID.
    fn rank_attributes_in_groups(&self) -> bool {
        false
    }
}

/// The writer of `layout`, for a run described by `plan`.
pub fn layout_writer(layout: Layout, plan: Plan) -> Box<dyn LayoutWriter> {
    match layout {
        Layout::Regions => Box::new(regions::Regions),
        Layout::Columnar | Layout::Aggregate => Box::new(tables::Schema3::new(layout, plan)),
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

/// `WORKERS`, or fewer where the calling thread may use fewer CPUs (`model::workers`).
pub fn workers() -> usize {
    crate::model::workers::workers(WORKERS)
}

/// `each(i)` for every i below `count`, on `workers()` threads side by side (the calling one
/// among them), each taking the next i as it is done with one; what each gave, with its i, in
/// no particular order. For work whose writes go straight to the file (`pwrite` at places
/// known beforehand, from any thread: no HDF5 call). With fewer than two items, or no helper
/// thread to be had, the calling thread does it all.
pub(crate) fn side_by_side<T: Send>(count: usize, each: impl Fn(usize) -> hdf5::Result<T> + Sync) -> hdf5::Result<Vec<(usize, T)>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || -> hdf5::Result<Vec<(usize, T)>> {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if i >= count {
                return Ok(done);
            }
            done.push((i, each(i)?));
        }
    };
    let threads = workers();
    if count < 2 || threads < 2 {
        return work();
    }
    std::thread::scope(|scope| {
        // Fewer helpers if threads cannot be had: the calling thread can do it all.
        let helpers: Vec<_> = (1..threads).filter_map(|_| crate::model::workers::spawn_apart(scope, "sp-write", work)).collect();
        let mut all = work();
        for h in helpers {
            let theirs = h.join().unwrap_or_else(|_| Err(hdf5::Error::from("internal error while writing the calls (a panic was caught)")));
            all = all.and_then(|mut a| {
                a.extend(theirs?);
                Ok(a)
            });
        }
        all
    })
}

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
    new_column_in(group, name, n, group.file().ok().as_ref().and_then(direct_fd))
}

/// `new_column` in a file whose `direct_fd` is `fd` (asked once for all of a file's columns).
pub fn new_column_in<T: ColumnValue>(group: &hdf5::Group, name: &str, n: usize, fd: Option<std::os::fd::RawFd>) -> hdf5::Result<Column<T>> {
    use hdf5::plist::dataset_create::{AllocTime, FillTime};
    let ds = group.new_dataset::<T>().shape(n).fill_time(FillTime::Never).alloc_time(Some(AllocTime::Early)).create(name)?;
    let bytes = (n as u64).saturating_mul(std::mem::size_of::<T>() as u64);
    let direct = fd.filter(|_| n > 0).and_then(|fd| direct_at(fd, &ds, bytes)).map(|(fd, offset)| (fd, offset, n));
    Ok(Column { ds, direct, _values: std::marker::PhantomData })
}

/// HDF5's descriptor of `file`, when its values can be written directly: the sec2 driver on a
/// little-endian machine. Asked once per file (a copy of the file's access properties each
/// time it is asked).
pub(crate) fn direct_fd(file: &hdf5::File) -> Option<std::os::fd::RawFd> {
    if cfg!(target_endian = "big") {
        return None;
    }
    if !matches!(file.access_plist().ok()?.get_driver().ok()?, hdf5::plist::file_access::FileDriver::Sec2) {
        return None;
    }
    let mut handle: *mut std::ffi::c_void = std::ptr::null_mut();
    // SAFETY: for the sec2 driver the handle is a pointer to the driver's `int` descriptor,
    // valid while the file is open (the columns are written before the file is closed).
    let got = hdf5::sync::sync(|| unsafe { hdf5_sys::h5f::H5Fget_vfd_handle(file.id(), hdf5_sys::h5p::H5P_DEFAULT, &mut handle) });
    if got < 0 || handle.is_null() {
        return None;
    }
    // SAFETY: as above.
    let fd = unsafe { *(handle as *const std::os::raw::c_int) };
    (fd >= 0).then_some(fd)
}

/// The descriptor and offset for writing `ds`'s values (`bytes` of them) directly, in a file
/// whose `direct_fd` is `fd`: native little-endian values (the caller's type), space allocated.
pub(crate) fn direct_at(fd: std::os::fd::RawFd, ds: &hdf5::Dataset, bytes: u64) -> Option<(std::os::fd::RawFd, u64)> {
    let offset = ds.offset()?;
    preallocate(fd, offset, bytes);
    Some((fd, offset))
}

/// Reserve the file's blocks for `bytes` at `offset` before a column is written there
/// (`fallocate`, the file's size unchanged): the writes then fill blocks the file system
/// already has, instead of reserving space page by page as they copy (ext4's delayed
/// allocation), which halves what a large column's writes cost (BENCHMARKS.md section 10).
/// Nothing is written; a file system without it (or one that is full) leaves the writes to do
/// as before, and they report what fails.
fn preallocate(fd: std::os::fd::RawFd, offset: u64, bytes: u64) {
    let (Ok(at), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(bytes)) else { return };
    // Below 64 KiB the call costs about what it saves.
    if len >= 64 << 10 {
        // SAFETY: a descriptor of the open file; fallocate only reserves blocks.
        unsafe { libc::fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, at, len) };
    }
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
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) };
        pwrite_all(self.fd, self.offset + (at * std::mem::size_of::<T>()) as u64, bytes)
    }
}

/// Write all of `bytes` at `offset` of the open descriptor `fd`.
pub(crate) fn pwrite_all(fd: std::os::fd::RawFd, mut offset: u64, mut bytes: &[u8]) -> hdf5::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: writes `bytes` (valid for reads) to an open descriptor.
        let n = unsafe { libc::pwrite(fd, bytes.as_ptr().cast(), bytes.len(), offset as libc::off_t) };
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

/// Whether a rank has results kept in a `rank<N>` group in the schema-3 layouts (LIKWID,
/// counters, MPI calls, samples; their call paths are a file-wide table, `tables`).
pub fn has_rank_groups(profile: &RankProfile) -> bool {
    !profile.likwid.regions.is_empty()
        || !profile.counters.perf.is_empty()
        || !profile.counters.annotated.is_empty()
        || profile.mpi.is_some()
        || profile.samples.is_some()
}

/// The groups of a rank kept under `rank<N>`: those of every layout, and with `paths` (the
/// regions layout) its call paths.
fn write_groups(g: &hdf5::Group, profile: &RankProfile, paths: bool) -> hdf5::Result<()> {
    likwid::write_group(g, &profile.likwid)?;
    counters::write(g, &profile.counters)?;
    if let Some(m) = &profile.mpi {
        mpi::write(g, m)?;
    }
    if let Some(s) = &profile.samples {
        samples::write(g, s)?;
    }
    if let Some(p) = profile.call_paths.as_ref().filter(|_| paths) {
        call_paths::write(g, p)?;
    }
    Ok(())
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

/// A profile file laid out and closed by HDF5, still at its private place, whose datasets'
/// bytes are written by other means (see `ProfileFile::close_for_raw_writes`).
pub struct RawFile {
    place: Placement,
}

impl RawFile {
    /// Where the file is while it is written.
    pub fn path(&self) -> std::path::PathBuf {
        self.place.temporary_path()
    }

    /// Move the finished file into place.
    pub fn finish(self) -> Result<Written> {
        self.place.finish()
    }

    /// Give up: remove it.
    pub fn abandon(self) {
        self.place.abandon();
    }
}

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

    /// Write one process's data as rank `rank`, its regions as `layout` stores them: in the
    /// regions layout a `rank<rank>` group with the rank's attributes; in the schema-3 layouts
    /// a row of the rank table, and a `rank<rank>` group only for counters and LIKWID.
    pub fn write_rank(&self, rank: usize, profile: &RankProfile, layout: &mut dyn LayoutWriter) -> hdf5::Result<()> {
        if layout.rank_attributes_in_groups() {
            let g = self.file.create_group(&format!("rank{rank}"))?;
            for (name, value) in rank_attrs(profile) {
                put_attr(&g, &name, &value)?;
            }
            layout.write_rank(&self.file, rank, profile)?;
            return write_groups(&g, profile, true);
        }
        layout.write_rank(&self.file, rank, profile)?;
        self.write_rank_groups(rank, profile)
    }

    /// The `rank<rank>` group of a schema-3 file: the rank's counter and LIKWID results (no
    /// group when it has none).
    pub fn write_rank_groups(&self, rank: usize, profile: &RankProfile) -> hdf5::Result<()> {
        if !has_rank_groups(profile) {
            return Ok(());
        }
        write_groups(&self.file.create_group(&format!("rank{rank}"))?, profile, false)
    }

    /// Close the HDF5 file, keeping it where it was created privately, for its datasets' bytes
    /// to be written by other means (MPI-IO from every rank); then `finish` or `abandon` it.
    pub fn close_for_raw_writes(self) -> Result<RawFile> {
        let ProfileFile { file, place } = self;
        if let Err(e) = file.close() {
            let e = Error::new(Status::WriteFailed, format!("closing {}: {e}", place.temporary_path().display()));
            place.abandon();
            return Err(e);
        }
        Ok(RawFile { place })
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

    /// The rank table takes every attribute it can name, and leaves out the ones whose names
    /// would clash with its own datasets or make a path.
    #[test]
    fn rank_table_columns() {
        let mut p = RankProfile::default();
        p.info.hostname = "h".into();
        p.info.thread_os_ids = vec![7, 8];
        for name in ["clock", "ranks", "x_offsets", "a/b", "clock"] {
            p.info.extra.push((name.into(), AttrValue::Str("v".into())));
        }
        let plan = Plan::of(&p);
        let names: Vec<&str> = plan.attrs.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["hostname", "pid", "cpus", "num_threads", "thread_os_ids", "clock"]);
        assert_eq!(plan.attrs[4].values, 2);
        assert_eq!(plan.attrs[0].width, 1);
    }

    /// Call paths add rows to the plan and the positions (summed over ranks, before the list
    /// values), their names to the run's names, and their wall time to the rank table.
    #[test]
    fn call_paths_in_the_plan_and_positions() {
        use crate::model::{CallPaths, PathNode};
        let node = |parent: i64, region: u32| PathNode { thread: 0, parent, region, calls: 1, inclusive_ns: 5, exclusive_ns: 5 };
        let mut p = RankProfile::default();
        p.info.thread_os_ids = vec![7];
        p.call_paths = Some(CallPaths { names: vec!["only here".into()], nodes: vec![node(-1, 0), node(0, 0)], wall_ns: 42 });
        let plan = Plan::of(&p).and(Plan::of(&p));
        assert_eq!(plan.path_rows, 4);
        assert_eq!(plan.names, ["only here"]);
        assert!(plan.attrs.iter().any(|a| a.name == PATHS_WALL && a.kind == AttrKind::Int));
        let counts = tables::Positions::counts(&plan, &p);
        let mut pos = tables::Positions::from_counts(&counts);
        assert_eq!((pos.path_rows, pos.rank_rows), (2, 1));
        assert_eq!(pos.to_counts(), counts);
        pos.advance(&counts);
        assert_eq!((pos.path_rows, pos.rank_rows, pos.values.len()), (4, 2, plan.attrs.len()));
        assert!(!has_rank_groups(&p), "call paths alone make no rank group in schema 3");
        assert!(!rank_attrs(&p).iter().any(|(n, _)| n == PATHS_WALL), "not an attribute of a regions-layout group");
    }

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
