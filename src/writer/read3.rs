//! Reading back our own schema-3 files (columnar and aggregate) into per-rank region data, so
//! `scope_profiler_merge` can combine per-rank files of those layouts through the same layout
//! writers.

use crate::config::Layout;
use crate::model::{Calls, Columns, HIST_BUCKETS, RegionData, SourceLocation, Stats};
use hdf5::types::VarLenUnicode;
use std::collections::BTreeMap;

/// The layout of a file: `None` for schema 1 (regions), else columnar or aggregate.
pub fn layout_of(file: &hdf5::File) -> Option<Layout> {
    let a = file.attr("storage_layout").ok()?.read_scalar::<VarLenUnicode>().ok()?;
    Layout::parse(a.as_str()).filter(|l| *l != Layout::Regions)
}

fn col<T: hdf5::H5Type>(g: &hdf5::Group, name: &str) -> hdf5::Result<Vec<T>> {
    g.dataset(name)?.read_raw::<T>()
}

/// Every rank's regions in `file`: rank -> regions, in row order.
pub fn read_regions(file: &hdf5::File) -> hdf5::Result<BTreeMap<usize, Vec<RegionData>>> {
    let names: Vec<String> = col::<VarLenUnicode>(&file.group("region_table")?, "names")?.iter().map(|s| s.to_string()).collect();
    let index = file.group("rank_region_index")?;
    let ids: Vec<u32> = col(&index, "region_ids")?;
    let ranks: Vec<u32> = col(&index, "ranks")?;
    let open: Vec<i64> = col(&index, "open_calls")?;
    let dropped: Vec<i64> = col(&index, "dropped_calls")?;
    // Files written before the column have none.
    let throttled: Vec<i8> = col(&index, "throttled").unwrap_or_default();
    let threads = file.group("scope_profiler_threads")?;
    let t_rows: Vec<u64> = col(&threads, "rows")?;
    let t_ids: Vec<i64> = col(&threads, "threads")?;
    let counts: Vec<u64> = col(&threads, "counts")?;
    let [totals, mins, maxs, excls]: [Vec<i64>; 4] =
        [col(&threads, "totals")?, col(&threads, "minimums")?, col(&threads, "maximums")?, col(&threads, "exclusives")?];
    let hist: Vec<u64> = col(&threads, "histograms")?;
    let mut per_row: Vec<Vec<(i64, Stats)>> = vec![Vec::new(); ids.len()];
    for i in 0..t_rows.len() {
        let h = hist.get(i * HIST_BUCKETS..(i + 1) * HIST_BUCKETS).map(<[u64]>::to_vec).unwrap_or_default();
        let s = Stats { count: counts[i], total: totals[i], min: mins[i], max: maxs[i], exclusive: excls[i], hist: h };
        if let Some(r) = per_row.get_mut(t_rows[i] as usize) {
            r.push((t_ids[i], s));
        }
    }
    let events = if layout_of(file) == Some(Layout::Columnar) {
        let ev = file.group("events")?;
        let offsets: Vec<u64> = col(&index, "event_offsets")?;
        let n: Vec<u64> = col(&index, "event_counts")?;
        let deltas: Vec<i64> = col(&ev, "start_deltas")?;
        let durations: Vec<i64> = col(&ev, "durations")?;
        let tids: Vec<u32> = col(&ev, "thread_ids")?;
        Some((offsets, n, deltas, durations, tids))
    } else {
        None
    };
    // Where each row's region is defined (files written before these columns have none).
    let files: Vec<String> = col::<VarLenUnicode>(&index, "source_files").map(|v| v.iter().map(|s| s.to_string()).collect()).unwrap_or_default();
    let lines: Vec<i64> = col(&index, "source_lines").unwrap_or_default();
    let source = |row: usize| {
        let file = files.get(row).filter(|f| !f.is_empty())?;
        Some(SourceLocation { file: file.clone(), line: lines.get(row).copied().filter(|&l| l > 0).unwrap_or(0) })
    };
    let mut out: BTreeMap<usize, Vec<RegionData>> = BTreeMap::new();
    for row in 0..ids.len() {
        let mut c = Columns::default();
        if let Some((offsets, n, deltas, durations, tids)) = &events {
            let range = offsets[row] as usize..(offsets[row] + n[row]) as usize;
            let mut start = 0i64;
            for i in range {
                start += deltas[i];
                c.starts.push(start);
                c.ends.push(start + durations[i]);
                c.thread_ids.push(tids[i] as i64);
            }
        }
        out.entry(ranks[row] as usize).or_default().push(RegionData {
            name: names.get(ids[row] as usize).cloned().unwrap_or_default(),
            calls: Calls::Columns(c),
            stats: std::mem::take(&mut per_row[row]),
            open_calls: open[row] as u64,
            dropped_calls: dropped[row] as u64,
            source: source(row),
            throttled: throttled.get(row).is_some_and(|&t| t != 0),
        });
    }
    Ok(out)
}
