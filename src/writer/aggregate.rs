//! The aggregate layout: the Python package's schema 3 with `storage_layout = "aggregate"`.
//! No calls: per rank and region the count, total, minimum, maximum and exclusive time
//! (`/rank_region_index/aggregate_*`, with `/region_table/names`).
//!
//! Ours, beside it (the Python reader ignores them), also written by the columnar layout:
//! `rank_region_index/{open_calls,dropped_calls,histograms}` (histograms: one row of
//! `HIST_BUCKETS` log2 buckets per (rank, region), see `stats::bucket`),
//! `/scope_profiler_threads/*`, the same statistics per recording thread (`rows` points into
//! rank_region_index), and the rank table `/scope_profiler_ranks` (see `tables`, which lays
//! out and writes both schema-3 layouts).

use super::tables::RowData;
use crate::model::RegionData;

/// A region's rows: the statistics the recording threads kept.
pub fn row(region: &RegionData) -> RowData {
    RowData { pooled: region.pooled(), threads: region.stats.clone(), events: None }
}
