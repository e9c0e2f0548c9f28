//! The file-wide datasets of the schema-3 layouts (columnar and aggregate), laid out once for
//! the whole run from its `Plan`, and what each rank puts into them.
//!
//! - `region_table/names` (variable-length UTF-8): the region names, written with the layout.
//! - `rank_region_index/*`: a row per (rank, region): region id, rank, source location, the
//!   statistics; the columnar layout's event offsets, counts and summary statistics, the
//!   aggregate layout's `aggregate_*` columns (see `columnar` and `aggregate`).
//! - `scope_profiler_threads/*`: a row per (rank, region, recording thread).
//! - `scope_profiler_ranks/*`: a row per rank, its attributes (what the regions layout keeps as
//!   the `rank<N>` group's attributes): a dataset per attribute named like it: integers
//!   (int64, `ABSENT` where a rank has none), strings (fixed-length UTF-8, "" where a rank has
//!   none), lists (the values of all ranks one after the other, and `<name>_offsets`, uint64,
//!   ranks + 1 entries: rank row r holds values `offsets[r]..offsets[r + 1]`). `ranks` (uint32)
//!   says which rank each row is; the group's `columns` attribute lists the attributes in order.
//! - `events/*` (columnar): the calls.
//! - `call_paths/*`: a row per (rank, thread, call path), each rank's rows together in the
//!   order of its `CallPaths` (parents before their children): `ranks` (uint32), `threads`
//!   (int64), `parents` (int64: the parent's row among the same rank's rows, counted from the
//!   rank's first row, -1 at the top), `regions` (uint32, into `region_table/names`), `calls`
//!   (uint64), `inclusive_ns`, `exclusive_ns` (int64). The rank's wall time is the rank table's
//!   `call_paths_wall_ns` (`writer::PATHS_WALL`).
//!
//! Strings that each rank writes for its own rows (`source_files`, the rank table's strings)
//! are fixed-length UTF-8 (NUL-padded, as wide as the longest in the run), so that a rank can
//! write its rows' bytes without knowing the others'. Every dataset a rank writes into is
//! contiguous, allocated when it is created, with no fill value written: `create` makes them
//! all, `rank_pieces` encodes one rank's rows as `Piece`s (column, first element, bytes in the
//! dataset's own type), and the same pieces are written by whoever writes that rank: this
//! process (`Tables::write`, with `pwrite` on HDF5's descriptor as `writer::Column` does, or
//! through HDF5), or the rank itself through MPI-IO at the dataset's offset in the file.

use super::columnar::Summary;
use super::{AttrKind, LayoutWriter, Plan, clean, direct_at, direct_fd, pwrite_all, replace_attr, table_attrs};
use crate::config::Layout;
use crate::model::{AttrValue, HIST_BUCKETS, RankProfile, Stats};
use hdf5::types::{TypeDescriptor, VarLenUnicode};
use std::collections::HashMap;

/// An integer attribute a rank does not have, in the rank table.
pub const ABSENT: i64 = i64::MIN;

/// The element type of a dataset: its bytes per element are the same in memory and in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    U8,
    U16,
    U32,
    U64,
    I64,
    /// `columnar::Summary` (compound).
    Summary,
    /// Fixed-length UTF-8 of this many bytes.
    Str(usize),
    /// A row of `HIST_BUCKETS` uint64 (two-dimensional datasets: rows x buckets).
    Hist,
}

impl Ty {
    /// Bytes per element (per row for `Hist`).
    pub fn size(self) -> usize {
        match self {
            Ty::U8 => 1,
            Ty::U16 => 2,
            Ty::U32 => 4,
            Ty::U64 | Ty::I64 => 8,
            Ty::Summary => std::mem::size_of::<Summary>(),
            Ty::Str(w) => w,
            Ty::Hist => 8 * HIST_BUCKETS,
        }
    }

    fn descriptor(self) -> TypeDescriptor {
        use hdf5::H5Type;
        match self {
            Ty::U8 => u8::type_descriptor(),
            Ty::U16 => u16::type_descriptor(),
            Ty::U32 => u32::type_descriptor(),
            Ty::U64 | Ty::Hist => u64::type_descriptor(),
            Ty::I64 => i64::type_descriptor(),
            Ty::Summary => Summary::type_descriptor(),
            Ty::Str(w) => TypeDescriptor::FixedUnicode(w),
        }
    }
}

/// A dataset of the layout: its path, element type and length (rows for `Hist`).
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnDef {
    pub path: String,
    pub ty: Ty,
    pub len: u64,
}

/// Every dataset a rank writes into, in a fixed order (the same on every rank for the same plan).
#[derive(Debug, Clone)]
pub struct Columns {
    defs: Vec<ColumnDef>,
    index: HashMap<String, usize>,
}

/// Fixed-length strings are at least one byte wide (HDF5 has no empty fixed-length string).
fn width(w: u64) -> usize {
    w.max(1) as usize
}

/// The width of `events/thread_ids`: as narrow as the run's threads allow.
pub fn thread_ty(max_threads: u64) -> Ty {
    match max_threads {
        0..=256 => Ty::U8,
        257..=65536 => Ty::U16,
        _ => Ty::U32,
    }
}

impl Columns {
    pub fn of(layout: Layout, plan: &Plan) -> Columns {
        let mut defs = Vec::new();
        let mut add = |path: &str, ty: Ty, len: u64| defs.push(ColumnDef { path: path.to_string(), ty, len });
        let rows = plan.rows;
        for (name, ty) in [("region_ids", Ty::U32), ("ranks", Ty::U32), ("open_calls", Ty::I64), ("dropped_calls", Ty::I64), ("throttled", Ty::U8), ("source_lines", Ty::I64)] {
            add(&format!("rank_region_index/{name}"), ty, rows);
        }
        add("rank_region_index/source_files", Ty::Str(width(plan.source_width)), rows);
        add("rank_region_index/histograms", Ty::Hist, rows);
        if layout == Layout::Columnar {
            for (name, ty) in [
                ("event_offsets", Ty::U64),
                ("event_counts", Ty::U64),
                ("summary_statistics", Ty::Summary),
                ("source_texts", Ty::Str(width(0))),
                ("tags", Ty::Str(2)),
                ("event_metadata", Ty::Str(2)),
                ("exclusive_totals", Ty::I64),
            ] {
                add(&format!("rank_region_index/{name}"), ty, rows);
            }
        } else {
            for (name, ty) in [
                ("aggregate_counts", Ty::U64),
                ("aggregate_totals", Ty::I64),
                ("aggregate_minimums", Ty::I64),
                ("aggregate_maximums", Ty::I64),
                ("aggregate_exclusives", Ty::I64),
            ] {
                add(&format!("rank_region_index/{name}"), ty, rows);
            }
        }
        let t = plan.thread_rows;
        for (name, ty) in [("rows", Ty::U64), ("threads", Ty::I64), ("counts", Ty::U64), ("totals", Ty::I64), ("minimums", Ty::I64), ("maximums", Ty::I64), ("exclusives", Ty::I64)] {
            add(&format!("scope_profiler_threads/{name}"), ty, t);
        }
        add("scope_profiler_threads/histograms", Ty::Hist, t);
        let n = plan.path_rows;
        for (name, ty) in PATH_COLUMNS {
            add(&format!("{PATHS}/{name}"), ty, n);
        }
        add(&format!("{RANKS}/ranks"), Ty::U32, plan.ranks);
        for a in &plan.attrs {
            let path = format!("{RANKS}/{}", a.name);
            match a.kind {
                AttrKind::Int => add(&path, Ty::I64, plan.ranks),
                AttrKind::Str => add(&path, Ty::Str(width(a.width)), plan.ranks),
                AttrKind::IntList | AttrKind::StrList => {
                    let ty = if a.kind == AttrKind::IntList { Ty::I64 } else { Ty::Str(width(a.width)) };
                    add(&path, ty, a.values);
                    add(&format!("{path}_offsets"), Ty::U64, plan.ranks + 1);
                }
            }
        }
        if layout == Layout::Columnar {
            add("events/start_deltas", Ty::I64, plan.total_calls);
            add("events/durations", Ty::I64, plan.total_calls);
            add("events/thread_ids", thread_ty(plan.max_threads), plan.total_calls);
        }
        let index = defs.iter().enumerate().map(|(i, d)| (d.path.clone(), i)).collect();
        Columns { defs, index }
    }

    pub fn defs(&self) -> &[ColumnDef] {
        &self.defs
    }

    /// The index of the dataset at `path` (one of the layout's).
    pub fn id(&self, path: &str) -> usize {
        self.index[path]
    }

    fn get(&self, path: &str) -> Option<usize> {
        self.index.get(path).copied()
    }
}

/// The rank table's group.
pub const RANKS: &str = "scope_profiler_ranks";

/// The call paths' group.
pub const PATHS: &str = "call_paths";

/// The call paths' datasets.
pub const PATH_COLUMNS: [(&str, Ty); 7] =
    [("ranks", Ty::U32), ("threads", Ty::I64), ("parents", Ty::I64), ("regions", Ty::U32), ("calls", Ty::U64), ("inclusive_ns", Ty::I64), ("exclusive_ns", Ty::I64)];

/// Part of one dataset: `bytes` (whole elements of its type) from element `at` on.
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    pub column: usize,
    pub at: u64,
    pub bytes: Vec<u8>,
}

/// Where a rank's part of each dataset starts: its first event, index row, thread row, rank
/// row, call path row, and first value of each list column of the rank table (in `plan.attrs` order; 0 for
/// the others). A rank's own counts (`counts`) added up over the ranks before it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Positions {
    pub calls: u64,
    pub rows: u64,
    pub thread_rows: u64,
    pub rank_rows: u64,
    pub path_rows: u64,
    pub values: Vec<u64>,
}

impl Positions {
    /// What `profile` adds to each position, as one vector (for an exclusive prefix sum over
    /// the ranks): calls, rows, thread rows, one rank row, call path rows, then its list
    /// lengths per column.
    pub fn counts(plan: &Plan, profile: &RankProfile) -> Vec<u64> {
        let mut v = vec![
            profile.regions.iter().map(|r| r.calls() as u64).sum(),
            profile.regions.len() as u64,
            profile.regions.iter().map(|r| r.stats.len() as u64).sum(),
            1,
            profile.call_paths.as_ref().map_or(0, |p| p.nodes.len() as u64),
        ];
        let attrs = table_attrs(profile);
        for a in &plan.attrs {
            let n = match attrs.iter().find(|(n, _)| *n == a.name).map(|(_, v)| v) {
                Some(AttrValue::IntList(l)) if a.kind == AttrKind::IntList => l.len() as u64,
                Some(AttrValue::StrList(l)) if a.kind == AttrKind::StrList => l.len() as u64,
                _ => 0,
            };
            v.push(n);
        }
        v
    }

    pub fn from_counts(v: &[u64]) -> Positions {
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        Positions { calls: at(0), rows: at(1), thread_rows: at(2), rank_rows: at(3), path_rows: at(4), values: v.get(5..).unwrap_or(&[]).to_vec() }
    }

    pub fn to_counts(&self) -> Vec<u64> {
        let mut v = vec![self.calls, self.rows, self.thread_rows, self.rank_rows, self.path_rows];
        v.extend(&self.values);
        v
    }

    /// Past a rank that added `counts`.
    pub fn advance(&mut self, counts: &[u64]) {
        let mut v = self.to_counts();
        v.resize(v.len().max(counts.len()), 0);
        v.iter_mut().zip(counts).for_each(|(a, b)| *a += b);
        *self = Positions::from_counts(&v);
    }
}

/// What a rank's region puts into its rows: the statistics pooled over its threads and per
/// thread (histograms included), and in the columnar layout the number of calls and their
/// summary statistics.
#[derive(Debug, Clone, Default)]
pub struct RowData {
    pub pooled: Stats,
    pub threads: Vec<(i64, Stats)>,
    pub events: Option<(u64, Summary)>,
}

/// Plain values as the bytes of the dataset's (native) type.
pub trait Plain: Copy {
    fn put(self, out: &mut Vec<u8>);
}
macro_rules! plain {
    ($($t:ty),*) => {$(impl Plain for $t {
        fn put(self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.to_ne_bytes());
        }
    })*};
}
plain!(u8, u16, u32, u64, i64);

fn bytes_of<T: Plain>(values: impl IntoIterator<Item = T>) -> Vec<u8> {
    let mut out = Vec::new();
    values.into_iter().for_each(|v| v.put(&mut out));
    out
}

/// `s` as a fixed-length string of `w` bytes: NUL-padded (cut at a character boundary if it
/// were longer, which the plan's widths rule out).
pub fn fixed(s: &str, w: usize, out: &mut Vec<u8>) {
    let s = clean(s);
    let mut n = s.len().min(w);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    out.extend_from_slice(&s.as_bytes()[..n]);
    out.resize(out.len() + (w - n), 0);
}

fn hist_bytes<'a>(stats: impl Iterator<Item = &'a Stats>) -> Vec<u8> {
    let mut out = Vec::new();
    for s in stats {
        (0..HIST_BUCKETS).for_each(|b| s.hist.get(b).copied().unwrap_or(0).put(&mut out));
    }
    out
}

/// The summary statistics as the bytes of the compound type (`#[repr(C)]`, every field eight
/// bytes: no padding, the layout HDF5 gives the dataset).
fn summary_bytes(s: &[Summary]) -> Vec<u8> {
    // SAFETY: `Summary` is `#[repr(C)]` plain data of eight-byte fields.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)) }.to_vec()
}

/// Region name -> region id (its place in `plan.names`).
pub fn region_ids(plan: &Plan) -> HashMap<&str, u32> {
    plan.names.iter().enumerate().map(|(i, n)| (n.as_str(), i as u32)).collect()
}

/// The pieces of rank `rank` (rank-table row `pos.rank_rows`): its index rows (one per region
/// of `profile`, `rows` in the same order), thread rows and rank-table row. The event columns
/// are not among them (see `columnar`). Fails only on a plan that does not fit the profile.
pub fn rank_pieces(cols: &Columns, plan: &Plan, ids: &HashMap<&str, u32>, rank: u32, profile: &RankProfile, rows: &[RowData], pos: &Positions) -> Result<Vec<Piece>, String> {
    if rows.len() != profile.regions.len() {
        return Err(format!("{} rows for {} regions", rows.len(), profile.regions.len()));
    }
    let mut out = Vec::new();
    let mut put = |path: &str, at: u64, bytes: Vec<u8>| {
        if !bytes.is_empty() {
            out.push(Piece { column: cols.id(path), at, bytes });
        }
    };
    let regions = &profile.regions;
    let mut region_ids = Vec::with_capacity(regions.len());
    for r in regions {
        region_ids.push(*ids.get(r.name.as_str()).ok_or_else(|| format!("region '{}' is not in the run's names", r.name))?);
    }
    let at = pos.rows;
    let idx = |name: &str| format!("rank_region_index/{name}");
    put(&idx("region_ids"), at, bytes_of(region_ids.iter().copied()));
    put(&idx("ranks"), at, bytes_of(regions.iter().map(|_| rank)));
    put(&idx("open_calls"), at, bytes_of(regions.iter().map(|r| r.open_calls as i64)));
    put(&idx("dropped_calls"), at, bytes_of(regions.iter().map(|r| r.dropped_calls as i64)));
    // 1 for an instrumented function no longer recorded after the throttling's limit.
    put(&idx("throttled"), at, bytes_of(regions.iter().map(|r| r.throttled as u8)));
    put(&idx("source_lines"), at, bytes_of(regions.iter().map(|r| r.source.as_ref().map(|s| s.line).filter(|&l| l > 0).unwrap_or(-1))));
    let w = width(plan.source_width);
    let mut files = Vec::with_capacity(regions.len() * w);
    regions.iter().for_each(|r| fixed(r.source.as_ref().map_or("", |s| s.file.as_str()), w, &mut files));
    put(&idx("source_files"), at, files);
    put(&idx("histograms"), at, hist_bytes(rows.iter().map(|r| &r.pooled)));
    if cols.get(&idx("event_offsets")).is_some() {
        let mut offsets = Vec::with_capacity(rows.len());
        let mut next = pos.calls;
        let mut summaries = Vec::with_capacity(rows.len());
        for r in rows {
            let (n, s) = r.events.ok_or("a columnar row without its events")?;
            offsets.push(next);
            next += n;
            summaries.push(s);
        }
        put(&idx("event_offsets"), at, bytes_of(offsets));
        put(&idx("event_counts"), at, bytes_of(rows.iter().map(|r| r.events.map_or(0, |e| e.0))));
        put(&idx("summary_statistics"), at, summary_bytes(&summaries));
        let fill = |s: &str, w: usize| {
            let mut v = Vec::with_capacity(rows.len() * w);
            rows.iter().for_each(|_| fixed(s, w, &mut v));
            v
        };
        put(&idx("source_texts"), at, fill("", 1));
        put(&idx("tags"), at, fill("[]", 2));
        put(&idx("event_metadata"), at, fill("[]", 2));
        put(&idx("exclusive_totals"), at, bytes_of(rows.iter().map(|r| r.pooled.exclusive)));
    } else {
        put(&idx("aggregate_counts"), at, bytes_of(rows.iter().map(|r| r.pooled.count)));
        put(&idx("aggregate_totals"), at, bytes_of(rows.iter().map(|r| r.pooled.total)));
        put(&idx("aggregate_minimums"), at, bytes_of(rows.iter().map(|r| r.pooled.min)));
        put(&idx("aggregate_maximums"), at, bytes_of(rows.iter().map(|r| r.pooled.max)));
        put(&idx("aggregate_exclusives"), at, bytes_of(rows.iter().map(|r| r.pooled.exclusive)));
    }

    let threads: Vec<(u64, i64, &Stats)> = rows.iter().enumerate().flat_map(|(i, r)| r.threads.iter().map(move |(t, s)| (pos.rows + i as u64, *t, s))).collect();
    let at = pos.thread_rows;
    let th = |name: &str| format!("scope_profiler_threads/{name}");
    put(&th("rows"), at, bytes_of(threads.iter().map(|x| x.0)));
    put(&th("threads"), at, bytes_of(threads.iter().map(|x| x.1)));
    put(&th("counts"), at, bytes_of(threads.iter().map(|x| x.2.count)));
    put(&th("totals"), at, bytes_of(threads.iter().map(|x| x.2.total)));
    put(&th("minimums"), at, bytes_of(threads.iter().map(|x| x.2.min)));
    put(&th("maximums"), at, bytes_of(threads.iter().map(|x| x.2.max)));
    put(&th("exclusives"), at, bytes_of(threads.iter().map(|x| x.2.exclusive)));
    put(&th("histograms"), at, hist_bytes(threads.iter().map(|x| x.2)));

    if let Some(p) = &profile.call_paths {
        let mut regions = Vec::with_capacity(p.names.len());
        for n in &p.names {
            regions.push(*ids.get(n.as_str()).ok_or_else(|| format!("call path region '{n}' is not in the run's names"))?);
        }
        let nodes = &p.nodes;
        let mut region_of = Vec::with_capacity(nodes.len());
        for (i, node) in nodes.iter().enumerate() {
            region_of.push(*regions.get(node.region as usize).ok_or_else(|| format!("call path {i} names region {} of {}", node.region, regions.len()))?);
        }
        let at = pos.path_rows;
        let col = |name: &str| format!("{PATHS}/{name}");
        put(&col("ranks"), at, bytes_of(nodes.iter().map(|_| rank)));
        put(&col("threads"), at, bytes_of(nodes.iter().map(|n| n.thread)));
        put(&col("parents"), at, bytes_of(nodes.iter().map(|n| n.parent)));
        put(&col("regions"), at, bytes_of(region_of));
        put(&col("calls"), at, bytes_of(nodes.iter().map(|n| n.calls)));
        put(&col("inclusive_ns"), at, bytes_of(nodes.iter().map(|n| n.inclusive_ns)));
        put(&col("exclusive_ns"), at, bytes_of(nodes.iter().map(|n| n.exclusive_ns)));
    }

    let row = pos.rank_rows;
    put(&format!("{RANKS}/ranks"), row, bytes_of([rank]));
    let attrs = table_attrs(profile);
    for (i, a) in plan.attrs.iter().enumerate() {
        let path = format!("{RANKS}/{}", a.name);
        let value = attrs.iter().find(|(n, _)| *n == a.name).map(|(_, v)| v).filter(|v| AttrKind::of(v) == a.kind);
        let w = width(a.width);
        match a.kind {
            AttrKind::Int => put(&path, row, bytes_of([match value {
                Some(AttrValue::Int(v)) => *v,
                _ => ABSENT,
            }])),
            AttrKind::Str => {
                let mut b = Vec::with_capacity(w);
                fixed(if let Some(AttrValue::Str(s)) = value { s } else { "" }, w, &mut b);
                put(&path, row, b);
            }
            AttrKind::IntList | AttrKind::StrList => {
                let base = pos.values.get(i).copied().unwrap_or(0);
                let (bytes, n) = match value {
                    Some(AttrValue::IntList(l)) => (bytes_of(l.iter().copied()), l.len() as u64),
                    Some(AttrValue::StrList(l)) => {
                        let mut b = Vec::with_capacity(l.len() * w);
                        l.iter().for_each(|s| fixed(s, w, &mut b));
                        (b, l.len() as u64)
                    }
                    _ => (Vec::new(), 0),
                };
                put(&path, base, bytes);
                // offsets[row + 1] = the end of this row's values; the first row also writes
                // offsets[0] = 0.
                if row == 0 {
                    put(&format!("{path}_offsets"), 0, bytes_of([0u64, base + n]));
                } else {
                    put(&format!("{path}_offsets"), row + 1, bytes_of([base + n]));
                }
            }
        }
    }
    Ok(out)
}

/// A dataset laid out for raw writes: contiguous, allocated at creation, no fill values.
pub struct RawColumn {
    ds: hdf5::Dataset,
    ty: Ty,
    len: u64,
    /// HDF5's file descriptor and the dataset's first byte (the sec2 driver; see
    /// `writer::Column`).
    direct: Option<(std::os::fd::RawFd, u64)>,
}

/// Makes the layout's datasets: contiguous, allocated at creation, no fill values, with one
/// creation property list and one datatype per element type for all of them (a dataset
/// builder makes and closes its own for each: a quarter of what creating one costs).
struct Maker {
    dcpl: hdf5::plist::DatasetCreate,
    types: Vec<(Ty, hdf5::Datatype)>,
}

impl Maker {
    fn new() -> hdf5::Result<Maker> {
        use hdf5::plist::dataset_create::{AllocTime, DatasetCreate, FillTime};
        let dcpl = DatasetCreate::build().no_chunk().fill_time(FillTime::Never).alloc_time(Some(AllocTime::Early)).finish()?;
        Ok(Maker { dcpl, types: Vec::new() })
    }

    fn dataset(&mut self, group: &hdf5::Group, name: &str, ty: Ty, len: u64) -> hdf5::Result<hdf5::Dataset> {
        let at = match self.types.iter().position(|(t, _)| *t == ty) {
            Some(at) => at,
            None => {
                self.types.push((ty, hdf5::Datatype::from_descriptor(&ty.descriptor().to_c_repr())?));
                self.types.len() - 1
            }
        };
        let dims: [u64; 2] = [len, HIST_BUCKETS as u64];
        let rank = if ty == Ty::Hist { 2 } else { 1 };
        let name = std::ffi::CString::new(name).map_err(|_| hdf5::Error::from(format!("{name:?}: a NUL in a dataset's name")))?;
        let (group_id, type_id, dcpl_id) = (group.id(), self.types[at].1.id(), self.dcpl.id());
        let id = hdf5::sync::sync(|| {
            use hdf5_sys::{h5d, h5p, h5s};
            // SAFETY: valid identifiers, a NUL-terminated name, `rank` dimensions. HDF5's error
            // stack is read (`h5check`) before the next call clears it, as a builder's would be.
            unsafe {
                let space = hdf5::h5check(h5s::H5Screate_simple(rank, dims.as_ptr(), std::ptr::null()))?;
                let id = hdf5::h5check(h5d::H5Dcreate2(group_id, name.as_ptr(), type_id, space, h5p::H5P_DEFAULT, dcpl_id, h5p::H5P_DEFAULT));
                h5s::H5Sclose(space);
                id
            }
        })?;
        // SAFETY: a dataset just created: its one reference goes to the handle.
        unsafe { hdf5::from_id::<hdf5::Dataset>(id) }
    }
}

impl RawColumn {
    /// A column of `len` elements, made by `maker`; written directly through `fd` when there
    /// is one (see `direct_fd`).
    fn create(maker: &mut Maker, group: &hdf5::Group, name: &str, ty: Ty, len: u64, fd: Option<std::os::fd::RawFd>) -> hdf5::Result<RawColumn> {
        let ds = maker.dataset(group, name, ty, len)?;
        let stored = ds.dtype()?.size() * if ty == Ty::Hist { HIST_BUCKETS } else { 1 };
        if stored != ty.size() {
            return Err(hdf5::Error::from(format!("{name}: {stored} bytes per element in the file, {} expected", ty.size())));
        }
        let direct = fd.filter(|_| len > 0).and_then(|fd| direct_at(fd, &ds, len.saturating_mul(ty.size() as u64)));
        Ok(RawColumn { ds, ty, len, direct })
    }

    /// The dataset's first byte in the file (None while it has no storage: empty).
    pub fn offset(&self) -> Option<u64> {
        if self.len == 0 { None } else { self.ds.offset() }
    }

    /// The direct writer, when there is one (any thread may use it).
    pub fn direct(&self) -> Option<DirectBytes<'_>> {
        self.direct.map(|(fd, offset)| DirectBytes { fd, offset, elem: self.ty.size(), len: self.len, _column: std::marker::PhantomData })
    }

    /// Write `bytes` (whole elements) from element `at` on: directly, else through HDF5 (from
    /// the thread that owns the file).
    pub fn write(&self, at: u64, bytes: &[u8]) -> hdf5::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let elem = self.ty.size();
        let n = (bytes.len() / elem) as u64;
        if bytes.len() % elem != 0 || at.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(hdf5::Error::from(format!("{} bytes at element {at} do not fit {} (elements of {elem} bytes, {} of them)", bytes.len(), self.ds.name(), self.len)));
        }
        if let Some(d) = self.direct() {
            return d.write(at, bytes);
        }
        use hdf5_sys::{h5d, h5p, h5s};
        let two_d = self.ty == Ty::Hist;
        let start: [u64; 2] = [at, 0];
        let count: [u64; 2] = [n, HIST_BUCKETS as u64];
        let rank = if two_d { 2 } else { 1 };
        let rc = hdf5::sync::sync(|| unsafe {
            let space = h5d::H5Dget_space(self.ds.id());
            if space < 0 {
                return -1;
            }
            let mem = h5s::H5Screate_simple(rank, count.as_ptr(), std::ptr::null());
            let ty = h5d::H5Dget_type(self.ds.id());
            let mut rc = h5s::H5Sselect_hyperslab(space, h5s::H5S_seloper_t::H5S_SELECT_SET, start.as_ptr(), std::ptr::null(), count.as_ptr(), std::ptr::null());
            if rc >= 0 && mem >= 0 && ty >= 0 {
                rc = h5d::H5Dwrite(self.ds.id(), ty, mem, space, h5p::H5P_DEFAULT, bytes.as_ptr().cast());
            } else {
                rc = -1;
            }
            if ty >= 0 {
                hdf5_sys::h5t::H5Tclose(ty);
            }
            if mem >= 0 {
                h5s::H5Sclose(mem);
            }
            h5s::H5Sclose(space);
            rc
        });
        if rc < 0 { Err(hdf5::Error::from(format!("writing {}", self.ds.name()))) } else { Ok(()) }
    }
}

/// Writes a `RawColumn`'s bytes with `pwrite` from any thread; borrows the column, whose open
/// dataset keeps the file (and so the descriptor) open.
#[derive(Clone, Copy)]
pub struct DirectBytes<'c> {
    fd: std::os::fd::RawFd,
    offset: u64,
    elem: usize,
    len: u64,
    _column: std::marker::PhantomData<&'c RawColumn>,
}

impl DirectBytes<'_> {
    pub fn write(&self, at: u64, bytes: &[u8]) -> hdf5::Result<()> {
        let n = (bytes.len() / self.elem) as u64;
        if bytes.len() % self.elem != 0 || at + n > self.len {
            return Err(hdf5::Error::from(format!("column write past its end ({at} + {n} > {})", self.len)));
        }
        pwrite_all(self.fd, self.offset + at * self.elem as u64, bytes)
    }
}

/// The schema-3 datasets of a file, created.
pub struct Tables {
    pub columns: Columns,
    raw: Vec<RawColumn>,
}

/// Variable-length UTF-8 strings (h5py's `string_dtype("utf-8")`).
pub fn strings(values: &[String]) -> Vec<VarLenUnicode> {
    values.iter().map(|v| clean(v).parse().unwrap_or_default()).collect()
}

impl Tables {
    /// Create every dataset of `layout` for `plan` in `file`, the region names, the schema
    /// attributes and the rank table's list of columns.
    pub fn create(file: &hdf5::File, layout: Layout, plan: &Plan) -> hdf5::Result<Tables> {
        replace_attr(file, "scope_profiler_schema", &AttrValue::Int(3))?;
        replace_attr(file, "storage_layout", &AttrValue::Str(layout.name().into()))?;
        super::put_strings_dataset(&file.create_group("region_table")?, "names", &plan.names)?;
        let columns = Columns::of(layout, plan);
        let mut groups: HashMap<String, hdf5::Group> = HashMap::new();
        let mut raw = Vec::with_capacity(columns.defs().len());
        let fd = direct_fd(file);
        let mut maker = Maker::new()?;
        for d in columns.defs() {
            let (group, name) = d.path.split_once('/').expect("datasets are in groups");
            if !groups.contains_key(group) {
                groups.insert(group.to_string(), file.create_group(group)?);
            }
            raw.push(RawColumn::create(&mut maker, &groups[group], name, d.ty, d.len, fd)?);
        }
        let names: Vec<String> = plan.attrs.iter().map(|a| a.name.clone()).collect();
        let ranks = match groups.get(RANKS) {
            Some(g) => g.clone(),
            None => file.create_group(RANKS)?,
        };
        super::put_attr(&ranks, "columns", &AttrValue::StrList(names))?;
        super::put_attr(&ranks, "absent_integer", &AttrValue::Int(ABSENT))?;
        Ok(Tables { columns, raw })
    }

    pub fn column(&self, path: &str) -> &RawColumn {
        &self.raw[self.columns.id(path)]
    }

    /// Each dataset's first byte in the file (u64::MAX for one without storage), in the order
    /// of `columns`.
    pub fn offsets(&self) -> Vec<u64> {
        self.raw.iter().map(|c| c.offset().unwrap_or(u64::MAX)).collect()
    }

    pub fn write(&self, piece: &Piece) -> hdf5::Result<()> {
        self.raw[piece.column].write(piece.at, &piece.bytes)
    }
}

/// The layout writer of the schema-3 layouts for a file written by this process (one process's
/// data, every rank's through rank 0, or merged rank files): everything is created at the
/// first rank, each rank's events and rows are written at the running positions.
pub struct Schema3 {
    layout: Layout,
    plan: Plan,
    tables: Option<Tables>,
    pos: Positions,
}

impl Schema3 {
    pub fn new(layout: Layout, plan: Plan) -> Schema3 {
        Schema3 { layout, plan, tables: None, pos: Positions::default() }
    }

    fn tables(&mut self, file: &hdf5::File) -> hdf5::Result<&Tables> {
        if self.tables.is_none() {
            self.tables = Some(Tables::create(file, self.layout, &self.plan)?);
        }
        Ok(self.tables.as_ref().unwrap())
    }
}

impl LayoutWriter for Schema3 {
    fn write_rank(&mut self, file: &hdf5::File, rank: usize, profile: &RankProfile) -> hdf5::Result<()> {
        self.tables(file)?;
        let counts = Positions::counts(&self.plan, profile);
        let fits = |have: u64, add: u64, all: u64| have + add <= all;
        let p = &self.plan;
        if !(fits(self.pos.calls, counts[0], p.total_calls) && fits(self.pos.rows, counts[1], p.rows) && fits(self.pos.thread_rows, counts[2], p.thread_rows) && fits(self.pos.rank_rows, 1, p.ranks) && fits(self.pos.path_rows, counts[4], p.path_rows)) {
            return Err(hdf5::Error::from(format!("rank {rank} has more calls or rows than announced")));
        }
        let tables = self.tables.as_ref().unwrap();
        let rows: Vec<RowData> = if self.layout == Layout::Columnar {
            let events = super::columnar::EventColumns::of(tables);
            let sums = events.write_regions(self.pos.calls, &profile.regions, self.plan.max_threads)?;
            profile.regions.iter().zip(sums).map(|(region, p)| super::columnar::row(region, p)).collect()
        } else {
            profile.regions.iter().map(super::aggregate::row).collect()
        };
        let ids = region_ids(&self.plan);
        let pieces = rank_pieces(&tables.columns, &self.plan, &ids, rank as u32, profile, &rows, &self.pos).map_err(hdf5::Error::from)?;
        for p in &pieces {
            tables.write(p)?;
        }
        self.pos.advance(&counts);
        Ok(())
    }

    fn finish(&mut self, file: &hdf5::File) -> hdf5::Result<()> {
        self.tables(file)?;
        let p = &self.plan;
        let want = Positions { calls: p.total_calls, rows: p.rows, thread_rows: p.thread_rows, rank_rows: p.ranks, path_rows: p.path_rows, values: p.attrs.iter().map(|a| a.values).collect() };
        let mut have = self.pos.clone();
        have.values.resize(want.values.len(), 0);
        if have != want {
            // Never leave unwritten elements in a file that looks complete.
            return Err(hdf5::Error::from(format!("written {:?} of the announced {:?} (calls, rows, thread rows, ranks, call path rows, list values)", have.to_counts(), want.to_counts())));
        }
        // Close the datasets: the file closes only when its last object does.
        self.tables = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The datasets made with the shared property list are those a builder makes (contiguous,
    /// allocated, the element type, two dimensions for histograms), and a dataset HDF5 refuses
    /// comes back with HDF5's own error stack, as a builder's error does (the write's fallback
    /// decisions read it).
    #[test]
    fn made_datasets_are_a_builders_and_refusals_keep_hdf5s_stack() {
        let dir = std::env::temp_dir().join(format!("sp_maker_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = hdf5::File::create(dir.join("m.h5")).unwrap();
        let g = file.create_group("g").unwrap();
        let mut maker = Maker::new().unwrap();
        let a = maker.dataset(&g, "a", Ty::I64, 10).unwrap();
        let h = maker.dataset(&g, "h", Ty::Hist, 3).unwrap();
        let s = maker.dataset(&g, "s", Ty::Summary, 2).unwrap();
        let e = maker.dataset(&g, "e", Ty::U8, 0).unwrap();
        assert_eq!((a.shape(), h.shape(), s.shape(), e.shape()), (vec![10], vec![3, HIST_BUCKETS], vec![2], vec![0]));
        assert_eq!((a.dtype().unwrap().size(), s.dtype().unwrap().size()), (8, std::mem::size_of::<Summary>()));
        assert!(a.offset().is_some() && h.offset().is_some(), "allocated at creation");
        assert!(matches!(a.layout(), hdf5::plist::dataset_create::Layout::Contiguous));
        let refused = maker.dataset(&g, "a", Ty::I64, 10).unwrap_err();
        assert!(refused.stack().is_some(), "{refused}");
        drop((a, h, s, e, g, file));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
