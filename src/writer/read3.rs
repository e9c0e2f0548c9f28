//! Reading back our own schema-3 files (columnar and aggregate) into per-rank region data and
//! rank attributes, so `scope_profiler_merge` can combine per-rank files of those layouts
//! through the same layout writers.
//!
//! The files are read as hostile (`h5read`: names as bytes, sizes checked against the file
//! before anything is allocated), and everything the layout writers will compute from them is
//! checked first: every index lies inside its table, every table of a kind has the same
//! length, the rows' events lie inside the event columns and claim no event twice in total,
//! thread ids are below the number of per-thread rows, times stay within +-2^62 ns, and a row's
//! durations, their sums and the sums of their squares fit the writers' integers. A file that
//! fails a check is refused as damaged, naming what is wrong.

use super::tables::{ABSENT, PATHS, RANKS};
use crate::config::Layout;
use crate::h5read::{self, Group};
use crate::model::{AttrValue, CallPaths, Calls, Columns, HIST_BUCKETS, PathNode, RankInfo, RegionData, SourceLocation, Stats};
use std::collections::BTreeMap;

/// What is wrong with a file, as one line.
pub type Result<T> = std::result::Result<T, String>;

/// Times (ns) beyond this, either way, are damage: differences of two of them fit an i64.
pub const TIME_LIMIT: i64 = 1 << 62;
/// Counts summed over a row's threads stay below this.
const COUNT_LIMIT: u64 = 1 << 62;
/// Ranks are MPI ranks (an `int`).
pub const MAX_RANK: u64 = i32::MAX as u64;

/// The layout of a file: `None` for schema 1 (regions), else columnar or aggregate.
pub fn layout_of(file: &Group) -> Option<Layout> {
    Layout::parse(&file.attr_string("storage_layout")?).filter(|l| *l != Layout::Regions)
}

fn damaged(what: impl std::fmt::Display) -> String {
    format!("is damaged: {what}")
}

fn e(err: h5read::Error) -> String {
    err.to_string()
}

fn ints(g: &Group, name: &str) -> Result<Vec<i64>> {
    g.read_i64(name).map_err(e)
}

fn uints(g: &Group, name: &str) -> Result<Vec<u64>> {
    g.dataset(name).and_then(|d| d.read_u64()).map_err(e)
}

fn same_len(what: &str, lens: &[(&str, usize)]) -> Result<usize> {
    let n = lens[0].1;
    if let Some((name, len)) = lens.iter().find(|(_, l)| *l != n) {
        return Err(damaged(format_args!("{what}: {name} has {len} entries, {} has {n}", lens[0].0)));
    }
    Ok(n)
}

/// One row's calls from the event columns, checked (see the module documentation).
fn row_calls(row: usize, range: std::ops::Range<usize>, deltas: &[i64], durations: &[i64], tids: &[u64], threads: u64) -> Result<Columns> {
    let mut c = Columns::default();
    let n = range.len();
    c.starts.reserve(n);
    c.ends.reserve(n);
    c.thread_ids.reserve(n);
    let mut start = 0i64;
    // What the columnar writer sums per row (total, and the shifted first and second moments).
    let (mut total, mut s1, mut s2) = (0i64, 0i128, 0i128);
    let shift = range.clone().next().map_or(0, |i| durations[i]);
    let bad = |what: &str| damaged(format_args!("row {row} of rank_region_index: {what}"));
    for i in range {
        start = start.checked_add(deltas[i]).filter(|s| s.abs() < TIME_LIMIT).ok_or_else(|| bad("a start time out of range"))?;
        let d = durations[i];
        let end = start.checked_add(d).filter(|e| e.abs() < TIME_LIMIT).ok_or_else(|| bad("an end time out of range"))?;
        if tids[i] >= threads {
            return Err(bad(&format!("thread id {} of an event, but the file has {threads} per-thread row(s)", tids[i])));
        }
        let x = (d as i128) - (shift as i128);
        total = total.checked_add(d).ok_or_else(|| bad("durations that add up past 2^63"))?;
        s1 = s1.checked_add(x).ok_or_else(|| bad("durations too large"))?;
        s2 = x.checked_mul(x).and_then(|x2| s2.checked_add(x2)).ok_or_else(|| bad("durations too large"))?;
        c.starts.push(start);
        c.ends.push(end);
        c.thread_ids.push(tids[i] as i64);
    }
    Ok(c)
}

/// Entries of one rank's list in the rank table, at most (a rank's CPUs or thread ids).
const MAX_LIST: usize = 1 << 22;

/// The rank attributes of a schema-3 file, by rank: from its rank table, or (files written
/// before it) from the attributes of its `rank<N>` groups. Every index and offset checked.
pub fn read_ranks(file: &Group) -> Result<BTreeMap<usize, RankInfo>> {
    let mut out = BTreeMap::new();
    if !file.has(RANKS) {
        for m in file.subgroups().map_err(e)? {
            let Some(rank) = m.name.strip_prefix("rank").and_then(|r| r.parse::<u64>().ok()).filter(|r| format!("rank{r}") == m.name) else { continue };
            if rank > MAX_RANK {
                return Err(damaged(format_args!("group {} names a rank beyond {MAX_RANK}", m.name)));
            }
            let g = file.member(&m).map_err(e)?;
            out.insert(rank as usize, info_of(g.attrs().map_err(e)?.into_iter().filter_map(|(n, v)| model_value(v).map(|v| (n, v))).collect()));
        }
        return Ok(out);
    }
    let table = file.group(RANKS).map_err(e)?;
    let ranks = uints(&table, "ranks")?;
    if let Some(r) = ranks.iter().find(|&&r| r > MAX_RANK) {
        return Err(damaged(format_args!("{RANKS}/ranks names rank {r}")));
    }
    let columns = table.attr_strings("columns").unwrap_or_default();
    let mut attrs: Vec<Vec<(String, AttrValue)>> = vec![Vec::new(); ranks.len()];
    for name in columns {
        if name.is_empty() || name.contains('/') || !table.has(&name) {
            continue;
        }
        let offsets_name = format!("{name}_offsets");
        let offsets: Option<Vec<u64>> = if table.has(&offsets_name) { Some(uints(&table, &offsets_name)?) } else { None };
        let ds = table.dataset(&name).map_err(e)?;
        // Strings, else integers.
        let values: std::result::Result<Vec<String>, Vec<i64>> = match ds.read_strings() {
            Ok(v) => Ok(v),
            Err(_) => Err(ds.read_i64().map_err(e)?),
        };
        let n = match &values {
            Ok(v) => v.len(),
            Err(v) => v.len(),
        };
        if let Some(o) = &offsets {
            let sorted = o.windows(2).all(|w| w[0] <= w[1]);
            let long = o.windows(2).any(|w| w[1].saturating_sub(w[0]) > MAX_LIST as u64);
            if o.len() != ranks.len() + 1 || !sorted || long || o.last().is_some_and(|&l| l as usize > n) {
                return Err(damaged(format_args!("{RANKS}/{offsets_name} does not cut {RANKS}/{name} into one list per rank")));
            }
        } else if n != ranks.len() {
            return Err(damaged(format_args!("{RANKS}/{name} has {n} entries for {} ranks", ranks.len())));
        }
        for (r, a) in attrs.iter_mut().enumerate() {
            let range = offsets.as_ref().map(|o| o[r] as usize..o[r + 1] as usize);
            let value = match (&values, range) {
                (Ok(v), Some(range)) => AttrValue::StrList(v[range].to_vec()),
                (Err(v), Some(range)) => AttrValue::IntList(v[range].to_vec()),
                (Ok(v), None) if !v[r].is_empty() => AttrValue::Str(v[r].clone()),
                (Err(v), None) if v[r] != ABSENT => AttrValue::Int(v[r]),
                _ => continue,
            };
            a.push((name.clone(), value));
        }
    }
    for (rank, a) in ranks.into_iter().zip(attrs) {
        out.insert(rank as usize, info_of(a));
    }
    Ok(out)
}

/// An attribute as we write them (strings, integers and lists of either); others are left out.
fn model_value(v: h5read::AttrValue) -> Option<AttrValue> {
    use h5read::AttrValue as H;
    Some(match v {
        H::Int(i) => AttrValue::Int(i),
        H::UInt(u) => AttrValue::Int(i64::try_from(u).ok()?),
        H::Str(s) => AttrValue::Str(s),
        H::IntArray(v) => AttrValue::IntList(v),
        H::UIntArray(v) => AttrValue::IntList(v.into_iter().map(|u| i64::try_from(u).unwrap_or(i64::MAX)).collect()),
        H::StrArray(v) => AttrValue::StrList(v),
        _ => return None,
    })
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

/// Every rank's regions in `file`: rank -> regions, in row order. `Err` says what is wrong.
pub fn read_regions(file: &Group) -> Result<BTreeMap<usize, Vec<RegionData>>> {
    let names: Vec<String> = file.group("region_table").and_then(|g| g.read_strings("names")).map_err(e)?;
    let index = file.group("rank_region_index").map_err(e)?;
    let ids = uints(&index, "region_ids")?;
    let ranks = uints(&index, "ranks")?;
    let open = uints(&index, "open_calls")?;
    let dropped = uints(&index, "dropped_calls")?;
    // Files written before the column have none; a damaged one marks nothing.
    let throttled: Vec<i64> = if index.has("throttled") { ints(&index, "throttled")? } else { Vec::new() };
    let rows = same_len("rank_region_index", &[("region_ids", ids.len()), ("ranks", ranks.len()), ("open_calls", open.len()), ("dropped_calls", dropped.len())])?;
    if let Some(i) = ids.iter().position(|&id| id >= names.len() as u64) {
        return Err(damaged(format_args!("row {i} of rank_region_index names region {} of {}", ids[i], names.len())));
    }
    if let Some(i) = ranks.iter().position(|&r| r > MAX_RANK) {
        return Err(damaged(format_args!("row {i} of rank_region_index is of rank {}", ranks[i])));
    }
    if let Some(i) = ids.iter().position(|&id| names[id as usize].is_empty()) {
        return Err(damaged(format_args!("row {i} of rank_region_index names a region with an empty name")));
    }
    let threads = file.group("scope_profiler_threads").map_err(e)?;
    let t_rows = uints(&threads, "rows")?;
    let t_ids = ints(&threads, "threads")?;
    let counts = uints(&threads, "counts")?;
    let [totals, mins, maxs, excls] = [ints(&threads, "totals")?, ints(&threads, "minimums")?, ints(&threads, "maximums")?, ints(&threads, "exclusives")?];
    let hist = uints(&threads, "histograms")?;
    let n_threads = same_len(
        "scope_profiler_threads",
        &[("rows", t_rows.len()), ("threads", t_ids.len()), ("counts", counts.len()), ("totals", totals.len()), ("minimums", mins.len()), ("maximums", maxs.len()), ("exclusives", excls.len())],
    )?;
    let hist_ok = hist.len() as u64 == n_threads as u64 * HIST_BUCKETS as u64;
    let mut per_row: Vec<Vec<(i64, Stats)>> = vec![Vec::new(); rows];
    // Per row: counts and histogram buckets summed over its threads (what pooling adds up).
    let mut sums: Vec<(u64, [u64; HIST_BUCKETS])> = vec![(0, [0; HIST_BUCKETS]); rows];
    for i in 0..n_threads {
        let bad = |what: String| damaged(format_args!("row {i} of scope_profiler_threads: {what}"));
        let row = t_rows[i];
        if row >= rows as u64 {
            return Err(bad(format!("it belongs to row {row} of {rows}")));
        }
        if !(0..n_threads as i64).contains(&t_ids[i]) {
            return Err(bad(format!("thread id {} (the file has {n_threads} per-thread row(s))", t_ids[i])));
        }
        let h = if hist_ok { hist[i * HIST_BUCKETS..(i + 1) * HIST_BUCKETS].to_vec() } else { vec![0; HIST_BUCKETS] };
        let sum = &mut sums[row as usize];
        sum.0 = sum.0.checked_add(counts[i]).filter(|&c| c < COUNT_LIMIT).ok_or_else(|| bad("call counts too large".into()))?;
        for (b, v) in sum.1.iter_mut().zip(&h) {
            *b = b.checked_add(*v).filter(|&c| c < COUNT_LIMIT).ok_or_else(|| bad("histogram counts too large".into()))?;
        }
        let s = Stats { count: counts[i], total: totals[i], min: mins[i], max: maxs[i], exclusive: excls[i], hist: h };
        per_row[row as usize].push((t_ids[i], s));
    }
    let columnar = layout_of(file) == Some(Layout::Columnar);
    let events = if columnar {
        let ev = file.group("events").map_err(e)?;
        let offsets = uints(&index, "event_offsets")?;
        let n = uints(&index, "event_counts")?;
        same_len("rank_region_index", &[("region_ids", rows), ("event_offsets", offsets.len()), ("event_counts", n.len())])?;
        let deltas = ints(&ev, "start_deltas")?;
        let durations = ints(&ev, "durations")?;
        let tids = uints(&ev, "thread_ids")?;
        let n_events = same_len("events", &[("start_deltas", deltas.len()), ("durations", durations.len()), ("thread_ids", tids.len())])?;
        // Each row's events inside the columns, and no more events claimed than there are
        // (rows that all claim the same events would multiply them).
        let mut claimed = 0u64;
        for row in 0..rows {
            let end = offsets[row].checked_add(n[row]).filter(|&end| end <= n_events as u64);
            claimed = claimed.saturating_add(n[row]);
            if end.is_none() || claimed > n_events as u64 {
                return Err(damaged(format_args!(
                    "row {row} of rank_region_index claims events {}..+{} but the event columns hold {n_events}",
                    offsets[row], n[row]
                )));
            }
        }
        Some((offsets, n, deltas, durations, tids))
    } else {
        None
    };
    // Where each row's region is defined (files written before these columns have none).
    let files: Vec<String> = index.read_strings("source_files").unwrap_or_default();
    let lines: Vec<i64> = index.read_i64("source_lines").unwrap_or_default();
    let source = |row: usize| {
        let file = files.get(row).filter(|f| !f.is_empty())?;
        Some(SourceLocation { file: file.clone(), line: lines.get(row).copied().filter(|&l| l > 0).unwrap_or(0) })
    };
    let mut out: BTreeMap<usize, Vec<RegionData>> = BTreeMap::new();
    for row in 0..rows {
        let calls = match &events {
            Some((offsets, n, deltas, durations, tids)) => {
                let range = offsets[row] as usize..(offsets[row] + n[row]) as usize;
                row_calls(row, range, deltas, durations, tids, n_threads as u64)?
            }
            None => Columns::default(),
        };
        out.entry(ranks[row] as usize).or_default().push(RegionData {
            name: names[ids[row] as usize].clone(),
            calls: Calls::Columns(calls),
            stats: std::mem::take(&mut per_row[row]),
            open_calls: open[row].min(COUNT_LIMIT),
            dropped_calls: dropped[row].min(COUNT_LIMIT),
            source: source(row),
            throttled: throttled.get(row).is_some_and(|&t| t != 0),
        });
    }
    Ok(out)
}

/// Every rank's call paths in `file` (its `call_paths/` table; none in files written before
/// it), with their wall times taken out of the ranks' attributes (`infos`, from `read_ranks`,
/// where the rank table holds them). Every row checked: the columns in step, the rank a rank's,
/// the region in `region_table/names`, the parent an earlier row of the same rank or -1, no
/// negative time.
pub fn read_call_paths(file: &Group, infos: &mut BTreeMap<usize, RankInfo>) -> Result<BTreeMap<usize, CallPaths>> {
    let mut out: BTreeMap<usize, CallPaths> = BTreeMap::new();
    fn wall(infos: &mut BTreeMap<usize, RankInfo>, rank: usize) -> Option<i64> {
        let info = infos.get_mut(&rank)?;
        let i = info.extra.iter().position(|(n, _)| n == super::PATHS_WALL)?;
        match info.extra.remove(i).1 {
            AttrValue::Int(w) => Some(w.max(0)),
            _ => None,
        }
    }
    if !file.has(PATHS) {
        return Ok(out);
    }
    let names: Vec<String> = file.group("region_table").and_then(|g| g.read_strings("names")).map_err(e)?;
    let g = file.group(PATHS).map_err(e)?;
    let ranks = uints(&g, "ranks")?;
    let threads = ints(&g, "threads")?;
    let parents = ints(&g, "parents")?;
    let regions = uints(&g, "regions")?;
    let calls = uints(&g, "calls")?;
    let incl = ints(&g, "inclusive_ns")?;
    let excl = ints(&g, "exclusive_ns")?;
    let n = same_len(
        PATHS,
        &[("ranks", ranks.len()), ("threads", threads.len()), ("parents", parents.len()), ("regions", regions.len()), ("calls", calls.len()), ("inclusive_ns", incl.len()), ("exclusive_ns", excl.len())],
    )?;
    // Per rank: the file's region id -> the place in the rank's names.
    let mut local: BTreeMap<usize, std::collections::HashMap<u64, u32>> = BTreeMap::new();
    for i in 0..n {
        let bad = |what: String| damaged(format_args!("row {i} of {PATHS}: {what}"));
        if ranks[i] > MAX_RANK || !infos.contains_key(&(ranks[i] as usize)) {
            return Err(bad(format!("rank {} is not in {RANKS}", ranks[i])));
        }
        let rank = ranks[i] as usize;
        if regions[i] >= names.len() as u64 {
            return Err(bad(format!("region {} of {}", regions[i], names.len())));
        }
        let paths = out.entry(rank).or_default();
        let row = paths.nodes.len() as i64;
        if !(-1..row).contains(&parents[i]) {
            return Err(bad(format!("parent {} is not an earlier row of rank {rank} (it has {row} before)", parents[i])));
        }
        if incl[i] < 0 || excl[i] < 0 || incl[i] >= TIME_LIMIT || excl[i] >= TIME_LIMIT || threads[i] < 0 || calls[i] >= COUNT_LIMIT {
            return Err(bad("a negative or out-of-range thread, count or time".into()));
        }
        let ids = local.entry(rank).or_default();
        let region = *ids.entry(regions[i]).or_insert_with(|| {
            paths.names.push(names[regions[i] as usize].clone());
            (paths.names.len() - 1) as u32
        });
        paths.nodes.push(PathNode { thread: threads[i], parent: parents[i], region, calls: calls[i], inclusive_ns: incl[i], exclusive_ns: excl[i] });
    }
    for (rank, p) in out.iter_mut() {
        p.wall_ns = wall(infos, *rank).unwrap_or(0);
    }
    // Ranks with call paths but no rows (a rank that recorded nothing) keep their wall time.
    for rank in infos.keys().copied().collect::<Vec<_>>() {
        if !out.contains_key(&rank) {
            if let Some(w) = wall(infos, rank) {
                out.insert(rank, CallPaths { wall_ns: w, ..Default::default() });
            }
        }
    }
    Ok(out)
}
