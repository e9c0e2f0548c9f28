//! The aggregate layout: the Python package's schema 3 with `storage_layout = "aggregate"`.
//! No calls: per rank and region the count, total, minimum, maximum and exclusive time
//! (`/rank_region_index/aggregate_*`, with `/region_table/names`).
//!
//! Ours, beside it (the Python reader ignores them), also written by the columnar layout:
//! `rank_region_index/{open_calls,dropped_calls,throttled,histograms}` (histograms: one row of
//! `HIST_BUCKETS` log2 buckets per (rank, region), see `stats::bucket`) and `/scope_profiler_threads/*`, the same
//! statistics per recording thread (`rows` points into rank_region_index).

use super::{LayoutWriter, replace_attr};
use crate::model::{AttrValue, HIST_BUCKETS, RankProfile, RegionData, Stats};
use hdf5::types::VarLenUnicode;
use std::collections::HashMap;

/// Variable-length UTF-8 strings (h5py's `string_dtype("utf-8")`).
pub fn strings(values: &[String]) -> Vec<VarLenUnicode> {
    values.iter().map(|v| v.replace('\0', "").parse().unwrap_or_default()).collect()
}

pub struct Row<'a> {
    pub rank: u32,
    pub region: &'a RegionData,
    /// Pooled over the threads.
    pub stats: Stats,
    /// Per recording thread.
    pub threads: Vec<(i64, Stats)>,
}

/// The per (rank, region) rows both schema-3 layouts share, kept in memory (a row per rank
/// and region, not per call) and written at the end.
#[derive(Default)]
pub struct IndexRows {
    names: Vec<String>,
    ids: HashMap<String, u32>,
    region_ids: Vec<u32>,
    ranks: Vec<u32>,
    pooled: Vec<Stats>,
    open: Vec<i64>,
    dropped: Vec<i64>,
    /// 1 for an instrumented function no longer recorded after the throttling's limit.
    throttled: Vec<i8>,
    // Per thread: row, thread, stats.
    threads: Vec<(u64, i64, Stats)>,
    /// Where each row's region is defined: file ("" unknown) and line (-1 unknown).
    source_files: Vec<String>,
    source_lines: Vec<i64>,
}

impl IndexRows {
    pub fn push(&mut self, row: Row<'_>) {
        let next = self.names.len() as u32;
        let id = *self.ids.entry(row.region.name.clone()).or_insert(next);
        if id == next {
            self.names.push(row.region.name.clone());
        }
        let r = self.region_ids.len() as u64;
        self.region_ids.push(id);
        self.ranks.push(row.rank);
        self.pooled.push(row.stats);
        self.open.push(row.region.open_calls as i64);
        self.dropped.push(row.region.dropped_calls as i64);
        self.throttled.push(row.region.throttled as i8);
        let at = row.region.source.as_ref();
        self.source_files.push(at.map(|a| a.file.clone()).unwrap_or_default());
        self.source_lines.push(at.map(|a| a.line).filter(|&l| l > 0).unwrap_or(-1));
        for (t, s) in row.threads {
            self.threads.push((r, t, s));
        }
    }

    pub fn rows_exclusive(&self) -> Vec<i64> {
        self.pooled.iter().map(|s| s.exclusive).collect()
    }

    /// Write the names, the shared index columns and our statistics; set the schema
    /// attributes. Returns the index group for the layout's own columns.
    pub fn write(&self, file: &hdf5::File, layout: &str) -> hdf5::Result<hdf5::Group> {
        replace_attr(file, "scope_profiler_schema", &AttrValue::Int(3))?;
        replace_attr(file, "storage_layout", &AttrValue::Str(layout.into()))?;
        super::put_strings_dataset(&file.create_group("region_table")?, "names", &self.names)?;
        let index = file.create_group("rank_region_index")?;
        index.new_dataset_builder().with_data(&self.region_ids).create("region_ids")?;
        index.new_dataset_builder().with_data(&self.ranks).create("ranks")?;
        index.new_dataset_builder().with_data(&self.open).create("open_calls")?;
        index.new_dataset_builder().with_data(&self.dropped).create("dropped_calls")?;
        index.new_dataset_builder().with_data(&self.throttled).create("throttled")?;
        // Source locations as the Python package's schema 3 stores them (its columnar reader
        // shows them; in the aggregate layout they are our addition).
        index.new_dataset_builder().with_data(&self.source_lines).create("source_lines")?;
        super::put_strings_dataset(&index, "source_files", &self.source_files)?;
        write_histograms(&index, self.pooled.iter())?;
        let t = file.create_group("scope_profiler_threads")?;
        t.new_dataset_builder().with_data(&self.threads.iter().map(|x| x.0).collect::<Vec<u64>>()).create("rows")?;
        t.new_dataset_builder().with_data(&self.threads.iter().map(|x| x.1).collect::<Vec<i64>>()).create("threads")?;
        write_stats(&t, self.threads.iter().map(|x| &x.2), "")?;
        Ok(index)
    }
}

fn write_histograms<'a>(g: &hdf5::Group, stats: impl Iterator<Item = &'a Stats>) -> hdf5::Result<()> {
    let mut flat = Vec::new();
    let mut rows = 0;
    for s in stats {
        flat.extend((0..HIST_BUCKETS).map(|b| s.hist.get(b).copied().unwrap_or(0)));
        rows += 1;
    }
    g.new_dataset::<u64>().shape((rows, HIST_BUCKETS)).create("histograms")?.write_raw(&flat)?;
    Ok(())
}

/// count, total, minimum, maximum, exclusive and histograms of `stats`, with `prefix`.
fn write_stats<'a>(g: &hdf5::Group, stats: impl Iterator<Item = &'a Stats> + Clone, prefix: &str) -> hdf5::Result<()> {
    let col = |f: fn(&Stats) -> i64| stats.clone().map(f).collect::<Vec<i64>>();
    g.new_dataset_builder().with_data(&stats.clone().map(|s| s.count).collect::<Vec<u64>>()).create(format!("{prefix}counts").as_str())?;
    g.new_dataset_builder().with_data(&col(|s| s.total)).create(format!("{prefix}totals").as_str())?;
    g.new_dataset_builder().with_data(&col(|s| s.min)).create(format!("{prefix}minimums").as_str())?;
    g.new_dataset_builder().with_data(&col(|s| s.max)).create(format!("{prefix}maximums").as_str())?;
    g.new_dataset_builder().with_data(&col(|s| s.exclusive)).create(format!("{prefix}exclusives").as_str())?;
    if prefix.is_empty() {
        write_histograms(g, stats)?;
    }
    Ok(())
}

#[derive(Default)]
pub struct Aggregate {
    index: IndexRows,
}

impl LayoutWriter for Aggregate {
    fn write_rank(&mut self, _file: &hdf5::File, _group: &hdf5::Group, rank: usize, profile: &RankProfile) -> hdf5::Result<()> {
        for region in &profile.regions {
            self.index.push(Row { rank: rank as u32, region, stats: region.pooled(), threads: region.stats.clone() });
        }
        Ok(())
    }

    fn finish(&mut self, file: &hdf5::File) -> hdf5::Result<()> {
        let index = self.index.write(file, "aggregate")?;
        write_stats(&index, self.index.pooled.iter(), "aggregate_")?;
        Ok(())
    }
}
