//! Schemas 2 and 3, written by the Python package: one table of region
//! names, a (rank, region) index into shared event columns, and the columns
//! themselves (absolute start/end times in schema 2, start gaps and
//! durations in schema 3). Also the aggregate-only layout, where the index
//! holds counts, totals, minima and maxima instead of events.

use crate::error::{Error, Result};
use crate::h5util::Group;
use crate::model::{Layout, RegionExtra, RegionRank};
use crate::stats::Stats;

fn need(file: &Group, name: &str, schema: i64) -> Result<Group> {
    if !file.has(name) {
        return Err(Error::new(format!(
            "has scope_profiler_schema {schema} but no {name} group; the file is damaged or not a \
             scope_profiler profile"
        )));
    }
    file.group(name)
}

/// Read every (rank, region) row of a schema-2/3 file.
/// scope_profiler's additions to a schema-3 index, if present: open calls per row, and the
/// exclusive times and duration histograms.
fn read_extras(index: &Group, rows: usize, aggregate: bool, out: &mut [RegionRank]) -> Vec<RegionExtra> {
    if let Ok(open) = index.read_i64("open_calls") {
        if open.len() == rows {
            out.iter_mut().zip(open).for_each(|(r, o)| r.open_calls = o);
        }
    }
    if !index.has("histograms") {
        return Vec::new();
    }
    let Ok(ds) = index.dataset("histograms") else { return Vec::new() };
    let Ok(shape) = ds.shape() else { return Vec::new() };
    // Bucket b holds durations below 2^b ns: 64 buckets cover every i64 duration.
    if shape.len() != 2 || shape[0] != rows || shape[1] > 64 {
        return Vec::new();
    }
    let Ok(flat) = ds.read_u64() else { return Vec::new() };
    if Some(flat.len()) != rows.checked_mul(shape[1]) {
        return Vec::new();
    }
    let excl = index.read_i64(if aggregate { "aggregate_exclusives" } else { "exclusive_totals" }).ok().filter(|v| v.len() == rows);
    (0..rows)
        .map(|i| RegionExtra {
            rank: out[i].rank,
            name: out[i].name.clone(),
            exclusive_ns: excl.as_ref().map(|e| e[i]).filter(|&e| e >= 0),
            histogram: flat[i * shape[1]..(i + 1) * shape[1]].to_vec(),
        })
        .collect()
}

pub fn read_regions(file: &Group, schema: i64) -> Result<(Layout, Vec<RegionRank>, Vec<RegionExtra>)> {
    let names = need(file, "region_table", schema)?.read_strings("names")?;
    let index = need(file, "rank_region_index", schema)?;
    let region_ids = index.read_i64("region_ids")?;
    let ranks = index.read_i64("ranks")?;
    if ranks.len() != region_ids.len() {
        return Err(damaged(format!(
            "rank_region_index has {} region_ids but {} ranks",
            region_ids.len(),
            ranks.len()
        )));
    }
    let aggregate = file.attr_string("storage_layout").as_deref() == Some("aggregate");
    let (layout, stats) = if aggregate {
        (Layout::Aggregate, aggregate_stats(&index, region_ids.len())?)
    } else {
        event_stats(file, &index, region_ids.len(), schema)?
    };

    let mut out = Vec::with_capacity(region_ids.len());
    for (row, stats) in stats.into_iter().enumerate() {
        let id = region_ids[row];
        let name = usize::try_from(id)
            .ok()
            .and_then(|i| names.get(i))
            .ok_or_else(|| damaged(format!("rank_region_index row {row} names region {id}, but there are {}", names.len())))?;
        let rank = u32::try_from(ranks[row])
            .map_err(|_| damaged(format!("rank_region_index row {row} has rank {}", ranks[row])))?;
        out.push(RegionRank { rank, name: name.clone(), stats, open_calls: 0 });
    }
    let extras = read_extras(&index, region_ids.len(), aggregate, &mut out);
    Ok((layout, out, extras))
}

/// Every row's events lie within the columns, and together the rows claim no more events
/// than the columns hold (rows that overlap would make the work grow with rows x events).
pub fn check_rows(offsets: &[i64], counts: &[i64], len: usize) -> Result<()> {
    let mut total: u64 = 0;
    for (row, (&offset, &count)) in offsets.iter().zip(counts).enumerate() {
        let end = offset.checked_add(count).filter(|_| offset >= 0 && count >= 0);
        if end.is_none_or(|end| end as u64 > len as u64) {
            return Err(damaged(format!(
                "rank_region_index row {row} claims events {offset}..{} but the event columns hold {len}",
                offset.saturating_add(count)
            )));
        }
        total += count as u64;
    }
    if total > len as u64 {
        return Err(damaged(format!("the rows of rank_region_index claim {total} events but the event columns hold {len}")));
    }
    Ok(())
}

fn damaged(message: String) -> Error {
    Error::new(format!("is damaged or truncated: {message}"))
}

fn aggregate_stats(index: &Group, rows: usize) -> Result<Vec<Stats>> {
    let counts = index.read_i64("aggregate_counts")?;
    let totals = index.read_i64("aggregate_totals")?;
    let minimums = index.read_i64("aggregate_minimums")?;
    let maximums = index.read_i64("aggregate_maximums")?;
    if [counts.len(), totals.len(), minimums.len(), maximums.len()].iter().any(|&n| n != rows) {
        return Err(damaged(format!("the aggregate columns do not all have {rows} rows")));
    }
    Ok((0..rows)
        .map(|i| Stats::from_aggregate(counts[i].max(0) as u64, totals[i], minimums[i], maximums[i]))
        .collect())
}

fn event_stats(file: &Group, index: &Group, rows: usize, schema: i64) -> Result<(Layout, Vec<Stats>)> {
    let offsets = index.read_i64("event_offsets")?;
    let counts = index.read_i64("event_counts")?;
    if offsets.len() != rows || counts.len() != rows {
        return Err(damaged(format!("rank_region_index event_offsets/event_counts do not have {rows} rows")));
    }
    let events = need(file, "events", schema)?;
    // Which encoding is visible from the column names, as in the Python reader.
    let deltas = events.has("start_deltas");
    let (first, second, layout) = if deltas {
        ("start_deltas", "durations", Layout::ColumnarDeltas)
    } else {
        ("start_times", "end_times", Layout::Columnar)
    };
    let a = events.read_i64(first)?;
    let b = events.read_i64(second)?;
    if a.len() != b.len() {
        return Err(damaged(format!("events/{first} has {} entries but events/{second} {}", a.len(), b.len())));
    }
    check_rows(&offsets, &counts, a.len())?;
    let mut out = Vec::with_capacity(rows);
    for row in 0..rows {
        let (offset, count) = (offsets[row], counts[row]);
        let end = offset.checked_add(count).filter(|_| offset >= 0 && count >= 0);
        let range = match end {
            Some(end) if end as u64 <= a.len() as u64 => offset as usize..end as usize,
            _ => {
                return Err(damaged(format!(
                    "rank_region_index row {row} claims events {offset}..{} but the event columns hold {}",
                    offset.saturating_add(count),
                    a.len()
                )));
            }
        };
        out.push(if deltas {
            Stats::from_deltas(&a[range.clone()], &b[range])
        } else {
            Stats::from_intervals(&a[range.clone()], &b[range])
        });
    }
    Ok((layout, out))
}
