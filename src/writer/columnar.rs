//! The columnar layout: the Python package's schema 3 (`storage_layout = "columnar"`).
//!
//! - `/events/start_deltas`, `/events/durations` (int64): every call, rank by rank and region
//!   by region; within a (rank, region) row the first start is absolute and the others are
//!   gaps from the previous start, so the reader's cumulative sum restores the starts.
//! - `/events/thread_ids`: the recording thread of each call, as narrow as the run allows
//!   (uint8 up to 256 threads per rank, then uint16, uint32), so a call costs 17 bytes.
//! - `/region_table/names` and `/rank_region_index/*`: one row per (rank, region) with the
//!   offset and count of its calls, the summary statistics and the exclusive time.
//! - Ours, beside it (the Python reader ignores them): `rank_region_index/open_calls`,
//!   `dropped_calls`, `histograms`, and the per-thread statistics in `/scope_profiler_threads`.

use super::aggregate::{IndexRows, Row};
use super::{Column, LayoutWriter, Plan, new_column};
use crate::model::{Call, HIST_BUCKETS, PageVec, RankProfile, Slab, SlabPlace, Stats, bucket};

#[derive(hdf5::H5Type, Clone, Copy, Default, Debug)]
#[repr(C)]
pub struct Summary {
    pub total: i64,
    pub minimum: i64,
    pub maximum: i64,
    pub first: i64,
    pub last: i64,
    pub start_minimum: i64,
    pub end_maximum: i64,
    pub gpu_count: u64,
    pub gpu_total: i64,
    pub mean: f64,
    pub m2: f64,
}

struct Events {
    deltas: Column<i64>,
    durations: Column<i64>,
    threads: ThreadColumn,
}

/// One slab encoded for the columns (mappings of their own: see `model/pages.rs`).
#[derive(Default)]
struct Encoded {
    d: PageVec<i64>,
    u: PageVec<i64>,
    t8: PageVec<u8>,
    t16: PageVec<u16>,
    t32: PageVec<u32>,
}

enum ThreadColumn {
    U8(Column<u8>),
    U16(Column<u16>),
    U32(Column<u32>),
}

pub struct Columnar {
    plan: Plan,
    events: Option<Events>,
    offset: usize,
    index: IndexRows,
    offsets: Vec<u64>,
    counts: Vec<u64>,
    summaries: Vec<Summary>,
}

impl Columnar {
    pub fn new(plan: Plan) -> Columnar {
        Columnar {
            plan,
            events: None,
            offset: 0,
            index: IndexRows::default(),
            offsets: Vec::new(),
            counts: Vec::new(),
            summaries: Vec::new(),
        }
    }

    fn events(&mut self, file: &hdf5::File) -> hdf5::Result<&Events> {
        if self.events.is_none() {
            let g = file.create_group("events")?;
            let n = self.plan.total_calls as usize;
            let threads = match self.plan.max_threads {
                0..=256 => ThreadColumn::U8(new_column::<u8>(&g, "thread_ids", n)?),
                257..=65536 => ThreadColumn::U16(new_column::<u16>(&g, "thread_ids", n)?),
                _ => ThreadColumn::U32(new_column::<u32>(&g, "thread_ids", n)?),
            };
            self.events = Some(Events { deltas: new_column::<i64>(&g, "start_deltas", n)?, durations: new_column::<i64>(&g, "durations", n)?, threads });
        }
        Ok(self.events.as_ref().unwrap())
    }
}

/// What the encoding of some of a region's slabs sums up (one per worker, added at the end).
#[derive(Default)]
struct Partial {
    count: u64,
    total: i64,
    minimum: i64,
    maximum: i64,
    start_minimum: i64,
    end_maximum: i64,
    /// Sums of (duration - the region's first duration) and of its square, in integers: the
    /// variance in one pass, exact whatever the order of the slabs (and no chain of
    /// floating-point additions, four cycles each, on every call).
    s1: i128,
    s2: i128,
    /// The duration of the last call seen and the index after it.
    last: (usize, i64),
    /// Histograms per thread, from the calls (the hot path keeps none when calls are kept).
    hists: Vec<Vec<u64>>,
    /// The region's first call (its duration is the first and the shift of the sums).
    first: Option<Call>,
}

impl Partial {
    fn add(&mut self, o: Partial) {
        if o.count == 0 {
            return;
        }
        if self.count == 0 {
            (self.minimum, self.maximum, self.start_minimum, self.end_maximum) = (o.minimum, o.maximum, o.start_minimum, o.end_maximum);
        }
        self.count += o.count;
        self.total = self.total.wrapping_add(o.total);
        self.minimum = self.minimum.min(o.minimum);
        self.maximum = self.maximum.max(o.maximum);
        self.start_minimum = self.start_minimum.min(o.start_minimum);
        self.end_maximum = self.end_maximum.max(o.end_maximum);
        self.s1 = self.s1.wrapping_add(o.s1);
        self.s2 = self.s2.wrapping_add(o.s2);
        self.last = self.last.max(o.last);
        self.first = self.first.or(o.first);
        if self.hists.len() < o.hists.len() {
            self.hists.resize(o.hists.len(), Vec::new());
        }
        for (mine, theirs) in self.hists.iter_mut().zip(o.hists) {
            if mine.is_empty() {
                *mine = theirs;
            } else if !theirs.is_empty() {
                mine.iter_mut().zip(theirs).for_each(|(a, b)| *a += b);
            }
        }
    }

    fn summary(&self) -> Summary {
        let first = self.first.map_or(0, |c| c.end.wrapping_sub(c.start));
        let mut s = Summary {
            total: self.total,
            minimum: self.minimum,
            maximum: self.maximum,
            first,
            last: self.last.1,
            start_minimum: self.start_minimum,
            end_maximum: self.end_maximum,
            ..Default::default()
        };
        if self.count > 0 {
            let (n, s1, s2) = (self.count as f64, self.s1 as f64, self.s2 as f64);
            s.mean = first as f64 + s1 / n;
            s.m2 = (s2 - s1 * s1 / n).max(0.0);
        }
        s
    }
}

/// Encode one slab for the event columns (gaps, durations, narrow thread ids) and add it to
/// the worker's `Partial`. `place` says where the slab is in its region: the first gap is from
/// the call before, and the first call of the region starts absolute.
fn encode(slab: Slab<'_>, place: &SlabPlace, width: usize, p: &mut Partial, e: &mut Encoded) {
    e.d.clear();
    e.u.clear();
    e.t8.clear();
    e.t16.clear();
    e.t32.clear();
    match width {
        1 => e.t8.extend(slab.thread_ids.iter().map(|&t| t as u8)),
        2 => e.t16.extend(slab.thread_ids.iter().map(|&t| t as u16)),
        _ => e.t32.extend(slab.thread_ids.iter().map(|&t| t as u32)),
    }
    p.first = p.first.or(place.first);
    let shift = place.first.map_or(0, |c| c.end.wrapping_sub(c.start));
    let mut prev = place.prev_start.unwrap_or(0);
    if p.count == 0 && !slab.starts.is_empty() {
        let d = slab.ends[0] - slab.starts[0];
        (p.minimum, p.maximum, p.start_minimum, p.end_maximum) = (d, d, slab.starts[0], slab.ends[0]);
    }
    // A histogram for every thread up to the slab's highest (a thread without calls keeps
    // zeros, which is what it is written as).
    let threads = slab.thread_ids.iter().copied().max().map_or(0, |t| t.max(0) as usize + 1);
    if p.hists.len() < threads {
        p.hists.resize(threads, Vec::new());
    }
    p.hists.iter_mut().filter(|h| h.is_empty()).for_each(|h| *h = vec![0; HIST_BUCKETS]);
    for ((&a, &b), &t) in slab.starts.iter().zip(slab.ends).zip(slab.thread_ids) {
        // Wrapping: the times of a recovered run come from a spill file that may be damaged (in
        // range, each, but not necessarily with differences and sums that fit); wrong
        // statistics for impossible calls, never a panic. Same instructions in a release build.
        let dur = b.wrapping_sub(a);
        p.hists[t.max(0) as usize][bucket(dur)] += 1;
        e.d.push(a.wrapping_sub(prev));
        e.u.push(dur);
        prev = a;
        p.total = p.total.wrapping_add(dur);
        p.minimum = p.minimum.min(dur);
        p.maximum = p.maximum.max(dur);
        p.start_minimum = p.start_minimum.min(a);
        p.end_maximum = p.end_maximum.max(b);
        let x = dur as i128 - shift as i128;
        p.s1 = p.s1.wrapping_add(x);
        p.s2 = p.s2.wrapping_add(x.wrapping_mul(x));
    }
    p.count += slab.starts.len() as u64;
    if let Some(&d) = e.u.last() {
        p.last = p.last.max((place.at + slab.starts.len(), d));
    }
}

impl Events {
    /// Write an encoded slab at event `at` (of the whole file).
    fn write(&self, at: usize, e: &Encoded) -> hdf5::Result<()> {
        self.deltas.write_at(at, &e.d)?;
        self.durations.write_at(at, &e.u)?;
        match &self.threads {
            ThreadColumn::U8(c) => c.write_at(at, &e.t8),
            ThreadColumn::U16(c) => c.write_at(at, &e.t16),
            ThreadColumn::U32(c) => c.write_at(at, &e.t32),
        }
    }

    /// Every column writes directly (see `writer::Column`), so any thread may write.
    fn direct(&self) -> bool {
        self.deltas.direct().is_some()
            && self.durations.direct().is_some()
            && match &self.threads {
                ThreadColumn::U8(c) => c.direct().is_some(),
                ThreadColumn::U16(c) => c.direct().is_some(),
                ThreadColumn::U32(c) => c.direct().is_some(),
            }
    }
}

impl LayoutWriter for Columnar {
    fn write_rank(&mut self, file: &hdf5::File, _group: &hdf5::Group, rank: usize, profile: &RankProfile) -> hdf5::Result<()> {
        self.events(file)?;
        for region in &profile.regions {
            let n = region.calls();
            if self.offset + n > self.plan.total_calls as usize {
                return Err(hdf5::Error::from(format!("rank {rank} has more calls than announced ({} > {})", self.offset + n, self.plan.total_calls)));
            }
            let start_offset = self.offset;
            let ev = self.events.as_ref().unwrap();
            let width = match &ev.threads {
                ThreadColumn::U8(_) => 1,
                ThreadColumn::U16(_) => 2,
                ThreadColumn::U32(_) => 4,
            };
            let mut sum = Partial::default();
            if ev.direct() {
                // Two threads take turns merging; each encodes and writes the slabs it merged.
                let parts = region.for_each_slab_parallel(
                    super::WORKERS,
                    || (Partial::default(), Encoded::default()),
                    |(p, e), place, slab| {
                        encode(slab, &place, width, p, e);
                        ev.write(start_offset + place.at, e)
                    },
                )?;
                parts.into_iter().for_each(|(p, _)| sum.add(p));
            } else {
                // Merging and encoding on a helper thread, the writes through HDF5 here.
                let (mut place, mut at, p) = (SlabPlace::default(), start_offset, &mut sum);
                region.for_each_slab_mapped(
                    |slab, e: &mut Encoded| {
                        place.first.get_or_insert(Call { start: slab.starts[0], end: slab.ends[0] });
                        encode(slab, &place, width, p, e);
                        place.at += slab.starts.len();
                        place.prev_start = slab.starts.last().copied();
                    },
                    |e: &Encoded| {
                        ev.write(at, e)?;
                        at += e.d.len();
                        Ok::<(), hdf5::Error>(())
                    },
                )?;
            }
            if sum.count as usize != n {
                // Never leave unwritten elements in a file that looks complete.
                return Err(hdf5::Error::from(format!("region '{}': {} of {n} calls encoded", region.name, sum.count)));
            }
            self.offset += sum.count as usize;
            self.offsets.push(start_offset as u64);
            self.counts.push(sum.count);
            self.summaries.push(sum.summary());
            let hists = std::mem::take(&mut sum.hists);
            let threads: Vec<(i64, Stats)> = region
                .stats
                .iter()
                .map(|(t, st)| {
                    let hist = hists.get(*t as usize).filter(|h| !h.is_empty()).cloned().unwrap_or_else(|| vec![0; HIST_BUCKETS]);
                    (*t, Stats { hist, ..st.clone() })
                })
                .collect();
            let mut pooled = Stats::default();
            threads.iter().for_each(|(_, st)| pooled.merge(st));
            self.index.push(Row { rank: rank as u32, region, stats: pooled, threads });
        }
        Ok(())
    }

    fn finish(&mut self, file: &hdf5::File) -> hdf5::Result<()> {
        let n = self.plan.total_calls as usize;
        self.events(file)?;
        if self.offset != n {
            return Err(hdf5::Error::from(format!("{} calls written of {} announced", self.offset, n)));
        }
        let index = self.index.write(file, "columnar")?;
        index.new_dataset_builder().with_data(&self.offsets).create("event_offsets")?;
        index.new_dataset_builder().with_data(&self.counts).create("event_counts")?;
        index.new_dataset_builder().with_data(&self.summaries).create("summary_statistics")?;
        let rows = self.counts.len();
        let (empty, brackets) = (vec![String::new(); rows], vec!["[]".to_string(); rows]);
        super::put_strings_dataset(&index, "source_texts", &empty)?;
        super::put_strings_dataset(&index, "tags", &brackets)?;
        super::put_strings_dataset(&index, "event_metadata", &brackets)?;
        let excl: Vec<i64> = self.index.rows_exclusive();
        index.new_dataset_builder().with_data(&excl).create("exclusive_totals")?;
        // Close the event columns: the file closes only when its last object does.
        self.events = None;
        Ok(())
    }
}
