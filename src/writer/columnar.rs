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
use crate::profile::RankProfile;
use crate::stats::{HIST_BUCKETS, Stats, bucket};

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

/// One slab encoded for the columns.
#[derive(Default)]
struct Encoded {
    d: Vec<i64>,
    u: Vec<i64>,
    t8: Vec<u8>,
    t16: Vec<u16>,
    t32: Vec<u32>,
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

impl LayoutWriter for Columnar {
    fn write_rank(&mut self, file: &hdf5::File, _group: &hdf5::Group, rank: usize, profile: &RankProfile) -> hdf5::Result<()> {
        self.events(file)?;
        for region in &profile.regions {
            let n = region.calls();
            if self.offset + n > self.plan.total_calls as usize {
                return Err(hdf5::Error::from(format!("rank {rank} has more calls than announced ({} > {})", self.offset + n, self.plan.total_calls)));
            }
            let start_offset = self.offset;
            let mut s = Summary::default();
            // Shifted sums for the variance (shift: the first duration), exact in one pass.
            let (mut prev, mut count, mut shift, mut s1, mut s2) = (0i64, 0u64, 0i64, 0f64, 0f64);
            // The histograms, per thread, from the calls (the hot path keeps none when calls are kept).
            let mut hists: Vec<Vec<u64>> = Vec::new();
            let Columnar { events, offset, .. } = self;
            let ev = events.as_ref().unwrap();
            let width = match &ev.threads {
                ThreadColumn::U8(_) => 1,
                ThreadColumn::U16(_) => 2,
                ThreadColumn::U32(_) => 4,
            };
            // Encoding (and the statistics) on the decoding thread; the writes here.
            region.for_each_slab_mapped(
                |slab, e: &mut Encoded| {
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
                    for ((&a, &b), &t) in slab.starts.iter().zip(slab.ends).zip(slab.thread_ids) {
                        let dur = b - a;
                        let t = t.max(0) as usize;
                        if t >= hists.len() {
                            hists.resize(t + 1, Vec::new());
                        }
                        if hists[t].is_empty() {
                            hists[t] = vec![0; HIST_BUCKETS];
                        }
                        hists[t][bucket(dur)] += 1;
                        e.d.push(a - prev);
                        e.u.push(dur);
                        prev = a;
                        if count == 0 {
                            shift = dur;
                            s.first = dur;
                            s.minimum = dur;
                            s.maximum = dur;
                            s.start_minimum = a;
                            s.end_maximum = b;
                        }
                        count += 1;
                        s.total += dur;
                        s.minimum = s.minimum.min(dur);
                        s.maximum = s.maximum.max(dur);
                        s.start_minimum = s.start_minimum.min(a);
                        s.end_maximum = s.end_maximum.max(b);
                        s.last = dur;
                        let x = (dur - shift) as f64;
                        s1 += x;
                        s2 += x * x;
                    }
                },
                |e: &Encoded| {
                    ev.deltas.write_at(*offset, &e.d)?;
                    ev.durations.write_at(*offset, &e.u)?;
                    match &ev.threads {
                        ThreadColumn::U8(ds) => ds.write_at(*offset, &e.t8)?,
                        ThreadColumn::U16(ds) => ds.write_at(*offset, &e.t16)?,
                        ThreadColumn::U32(ds) => ds.write_at(*offset, &e.t32)?,
                    }
                    *offset += e.d.len();
                    Ok::<(), hdf5::Error>(())
                },
            )?;
            if count > 0 {
                let n = count as f64;
                s.mean = shift as f64 + s1 / n;
                s.m2 = (s2 - s1 * s1 / n).max(0.0);
            }
            self.offsets.push(start_offset as u64);
            self.counts.push((self.offset - start_offset) as u64);
            self.summaries.push(s);
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
        let empty = super::aggregate::strings(&vec![String::new(); rows]);
        let brackets = super::aggregate::strings(&vec!["[]".to_string(); rows]);
        index.new_dataset_builder().with_data(&empty).create("source_texts")?;
        index.new_dataset_builder().with_data(&brackets).create("tags")?;
        index.new_dataset_builder().with_data(&brackets).create("event_metadata")?;
        let excl: Vec<i64> = self.index.rows_exclusive();
        index.new_dataset_builder().with_data(&excl).create("exclusive_totals")?;
        // Close the event columns: the file closes only when its last object does.
        self.events = None;
        Ok(())
    }
}
