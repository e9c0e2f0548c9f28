//! Reading back our own schema-3 files (columnar and aggregate) into per-rank region data and
//! rank attributes, so `scope_profiler_merge` can combine per-rank files of those layouts
//! through the same layout writers.

use super::tables::{ABSENT, RANKS};
use crate::config::Layout;
use crate::model::{AttrValue, Calls, Columns, HIST_BUCKETS, RankInfo, RegionData, SourceLocation, Stats};
use hdf5::types::{TypeDescriptor, VarLenUnicode};
use std::collections::BTreeMap;

/// The layout of a file: `None` for schema 1 (regions), else columnar or aggregate.
pub fn layout_of(file: &hdf5::File) -> Option<Layout> {
    let a = file.attr("storage_layout").ok()?.read_scalar::<VarLenUnicode>().ok()?;
    Layout::parse(a.as_str()).filter(|l| *l != Layout::Regions)
}

fn col<T: hdf5::H5Type>(g: &hdf5::Group, name: &str) -> hdf5::Result<Vec<T>> {
    g.dataset(name)?.read_raw::<T>()
}

/// A string dataset, variable-length (ours before the rank table, and the region names) or
/// fixed-length (NUL-padded: the columns each rank writes for itself).
pub fn read_strings(ds: &hdf5::Dataset) -> hdf5::Result<Vec<String>> {
    match ds.dtype()?.to_descriptor()? {
        TypeDescriptor::FixedUnicode(w) | TypeDescriptor::FixedAscii(w) => {
            let n = ds.size();
            let mut buf = vec![0u8; n * w];
            if n > 0 {
                use hdf5_sys::{h5d, h5p, h5s, h5t};
                let rc = hdf5::sync::sync(|| unsafe {
                    let ty = h5d::H5Dget_type(ds.id());
                    let rc = h5d::H5Dread(ds.id(), ty, h5s::H5S_ALL, h5s::H5S_ALL, h5p::H5P_DEFAULT, buf.as_mut_ptr().cast());
                    h5t::H5Tclose(ty);
                    rc
                });
                if rc < 0 {
                    return Err(hdf5::Error::from(format!("reading {}", ds.name())));
                }
            }
            Ok(buf
                .chunks(w.max(1))
                .take(n)
                .map(|c| String::from_utf8_lossy(&c[..c.iter().position(|&b| b == 0).unwrap_or(c.len())]).into_owned())
                .collect())
        }
        _ => Ok(ds.read_raw::<VarLenUnicode>()?.iter().map(|s| s.to_string()).collect()),
    }
}

/// The rank attributes of a schema-3 file, by rank: from its rank table, or (files written
/// before it) from the attributes of its `rank<N>` groups.
pub fn read_ranks(file: &hdf5::File) -> hdf5::Result<BTreeMap<usize, RankInfo>> {
    let mut out = BTreeMap::new();
    let Ok(table) = file.group(RANKS) else {
        for name in file.member_names()? {
            let Some(rank) = name.strip_prefix("rank").and_then(|r| r.parse::<usize>().ok()).filter(|r| format!("rank{r}") == name) else { continue };
            out.insert(rank, info_of(group_attrs(&file.group(&name)?)));
        }
        return Ok(out);
    };
    let ranks: Vec<u32> = col(&table, "ranks")?;
    let columns: Vec<String> = table.attr("columns")?.read_raw::<VarLenUnicode>()?.iter().map(|s| s.to_string()).collect();
    let mut attrs: Vec<Vec<(String, AttrValue)>> = vec![Vec::new(); ranks.len()];
    for name in columns {
        let Ok(ds) = table.dataset(&name) else { continue };
        let offsets: Option<Vec<u64>> = table.dataset(&format!("{name}_offsets")).ok().and_then(|d| d.read_raw().ok());
        let is_str = matches!(ds.dtype()?.to_descriptor()?, TypeDescriptor::FixedUnicode(_) | TypeDescriptor::FixedAscii(_) | TypeDescriptor::VarLenUnicode | TypeDescriptor::VarLenAscii);
        let list = |r: usize| offsets.as_ref().and_then(|o| Some(o.get(r).copied()? as usize..o.get(r + 1).copied()? as usize));
        if is_str {
            let values = read_strings(&ds)?;
            for (r, a) in attrs.iter_mut().enumerate() {
                match (&offsets, list(r)) {
                    (Some(_), Some(range)) => a.push((name.clone(), AttrValue::StrList(values.get(range).unwrap_or_default().to_vec()))),
                    (Some(_), None) => {}
                    (None, _) => {
                        if let Some(v) = values.get(r).filter(|v| !v.is_empty()) {
                            a.push((name.clone(), AttrValue::Str(v.clone())));
                        }
                    }
                }
            }
        } else {
            let values: Vec<i64> = ds.read_raw()?;
            for (r, a) in attrs.iter_mut().enumerate() {
                match (&offsets, list(r)) {
                    (Some(_), Some(range)) => a.push((name.clone(), AttrValue::IntList(values.get(range).unwrap_or_default().to_vec()))),
                    (Some(_), None) => {}
                    (None, _) => {
                        if let Some(&v) = values.get(r).filter(|&&v| v != ABSENT) {
                            a.push((name.clone(), AttrValue::Int(v)));
                        }
                    }
                }
            }
        }
    }
    for (rank, a) in ranks.into_iter().zip(attrs) {
        out.insert(rank as usize, info_of(a));
    }
    Ok(out)
}

/// A group's attributes as we write them (strings, integers and lists of either).
fn group_attrs(g: &hdf5::Group) -> Vec<(String, AttrValue)> {
    let mut out = Vec::new();
    for name in g.attr_names().unwrap_or_default() {
        let Ok(a) = g.attr(&name) else { continue };
        let scalar = a.is_scalar();
        let value = match a.dtype().and_then(|t| t.to_descriptor()) {
            Ok(TypeDescriptor::VarLenUnicode | TypeDescriptor::VarLenAscii) if scalar => a.read_scalar::<VarLenUnicode>().ok().map(|v| AttrValue::Str(v.to_string())),
            Ok(TypeDescriptor::VarLenUnicode | TypeDescriptor::VarLenAscii) => a.read_raw::<VarLenUnicode>().ok().map(|v| AttrValue::StrList(v.iter().map(|s| s.to_string()).collect())),
            Ok(TypeDescriptor::Integer(_) | TypeDescriptor::Unsigned(_)) if scalar => a.read_scalar::<i64>().ok().map(AttrValue::Int),
            Ok(TypeDescriptor::Integer(_) | TypeDescriptor::Unsigned(_)) => a.read_raw::<i64>().ok().map(AttrValue::IntList),
            _ => None,
        };
        if let Some(v) = value {
            out.push((name, v));
        }
    }
    out
}

/// A rank's `RankInfo` from its attributes (`writer::rank_attrs` backwards; `num_threads`
/// follows from the thread ids).
fn info_of(attrs: Vec<(String, AttrValue)>) -> RankInfo {
    let mut info = RankInfo::default();
    for (name, value) in attrs {
        match (name.as_str(), value) {
            ("hostname", AttrValue::Str(h)) => info.hostname = h,
            ("pid", AttrValue::Int(p)) => info.pid = p,
            ("cpus", AttrValue::IntList(c)) => info.cpus = c,
            ("thread_os_ids", AttrValue::IntList(t)) => info.thread_os_ids = t,
            ("num_threads", _) => {}
            (_, v) => info.extra.push((name, v)),
        }
    }
    info
}

/// Every rank's regions in `file`: rank -> regions, in row order.
pub fn read_regions(file: &hdf5::File) -> hdf5::Result<BTreeMap<usize, Vec<RegionData>>> {
    let names: Vec<String> = read_strings(&file.group("region_table")?.dataset("names")?)?;
    let index = file.group("rank_region_index")?;
    let ids: Vec<u32> = col(&index, "region_ids")?;
    let ranks: Vec<u32> = col(&index, "ranks")?;
    let open: Vec<i64> = col(&index, "open_calls")?;
    let dropped: Vec<i64> = col(&index, "dropped_calls")?;
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
    let files: Vec<String> = index.dataset("source_files").and_then(|d| read_strings(&d)).unwrap_or_default();
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
        });
    }
    Ok(out)
}
