//! `sptool export --format caliper-json`: Caliper's json-split, the file Hatchet's
//! `GraphFrame.from_caliper` and Thicket's `Thicket.from_caliper` read with their default
//! arguments. `nodes` is the call-path tree (the paths `sptool tree` shows; a file without
//! stored call paths gives its regions as roots), `data` one row per (node, rank) with the
//! exclusive time (`sum#time.duration`, seconds), the inclusive time
//! (`inclusive#sum#time.duration`), the calls, and the counters and derived metrics the file
//! has for the region (the columns of `sptool export --format json`); the MPI plugin's routines
//! are the children of a root `MPI` with their time, calls and bytes. The run's metadata
//! (ours, and the user's `sp_set_metadata` keys under their own name) are top-level keys, which
//! Hatchet keeps as the GraphFrame's metadata and Thicket as its metadata table.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Map, Value, json};

use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::model::{AttrValue, Profile};

/// The user's keys as the file stores them (`user.<key>`, see the library's `metadata.rs`).
pub const USER_PREFIX: &str = "user.";

/// A metadata value as a JSON scalar (lists joined by commas, so that a pandas table keeps one
/// cell per key); strings that are numbers (the user's values) become numbers.
pub fn scalar(v: &AttrValue) -> Value {
    match v.to_json() {
        Value::Array(items) => Value::from(items.iter().map(|i| match i {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }).collect::<Vec<_>>().join(",")),
        other => other,
    }
}

/// A user value as stored (int64 or string) as a number, if it is one.
pub fn number(v: &AttrValue) -> Option<f64> {
    match v {
        AttrValue::Int(i) => Some(*i as f64),
        AttrValue::UInt(u) => Some(*u as f64),
        AttrValue::Float(f) => Some(*f),
        other => other.as_str().and_then(|s| s.trim().parse::<f64>().ok()).filter(|f| f.is_finite()),
    }
}

fn user_json(v: &AttrValue) -> Value {
    match (v, number(v)) {
        (AttrValue::Str(s), Some(_)) if s.trim().parse::<i64>().is_ok() => Value::from(s.trim().parse::<i64>().unwrap_or_default()),
        (AttrValue::Str(_), Some(f)) => serde_json::Number::from_f64(f).map_or_else(|| scalar(v), Value::Number),
        _ => scalar(v),
    }
}

/// The run's metadata as top-level keys: ours as stored, the user's under their own name
/// (`user.<key>` where the library has a key of that name), numbers as numbers; user values
/// that differ between ranks also as `<key>.per_rank` (a JSON text, rank -> value).
pub fn run_metadata(profile: &Profile) -> Map<String, Value> {
    let mut out = Map::new();
    let ours: BTreeSet<&str> = profile.metadata.iter().map(|(k, _)| k.as_str()).filter(|k| !k.starts_with(USER_PREFIX)).collect();
    let user_name = |k: &str| -> String {
        let bare = &k[USER_PREFIX.len()..];
        if ours.contains(bare) { k.to_string() } else { bare.to_string() }
    };
    for (k, v) in &profile.metadata {
        if k.starts_with(USER_PREFIX) {
            out.insert(user_name(k), user_json(v));
        } else {
            out.insert(k.clone(), scalar(v));
        }
    }
    // Per-rank user values, where they differ (or exist only on some ranks).
    let mut per_rank: BTreeMap<String, BTreeMap<u32, Value>> = BTreeMap::new();
    for r in &profile.ranks {
        for (k, v) in r.attrs.iter().filter(|(k, _)| k.starts_with(USER_PREFIX)) {
            per_rank.entry(k.clone()).or_default().insert(r.rank, user_json(v));
        }
    }
    for (k, values) in per_rank {
        let first = values.values().next().cloned();
        // Keys only some ranks set are the run's when rank 0 (the lowest rank) set them.
        let lowest = profile.ranks.first().map(|r| r.rank);
        let same = values.keys().next().copied() == lowest && values.values().all(|v| Some(v) == first.as_ref());
        if !same {
            let text: Map<String, Value> = values.into_iter().map(|(r, v)| (r.to_string(), v)).collect();
            out.insert(format!("{}.per_rank", user_name(&k)), Value::from(Value::Object(text).to_string()));
        } else if !out.contains_key(&user_name(&k)) {
            if let Some(v) = first {
                out.insert(user_name(&k), v);
            }
        }
    }
    out
}

/// One rank's call paths: path -> (calls, inclusive ns, exclusive ns).
pub struct RankTree {
    pub rank: u32,
    pub paths: Vec<(Vec<String>, [i64; 3])>,
    /// The same per thread (thread id -> its paths), where the file stores them.
    pub threads: Vec<(i64, Vec<(Vec<String>, [i64; 3])>)>,
}

/// Every selected rank's call paths: those the file stores (as `sptool tree` reads them), or,
/// for a file without them, each region as a root (exclusive time where the file has it, else
/// the inclusive time). The second value says which.
pub fn rank_trees(profile: &Profile, filter: &Filter) -> Result<(Vec<RankTree>, bool)> {
    let stored = crate::tree::read(&profile.path)?;
    if !stored.is_empty() {
        let keep = |p: &[String]| p.iter().all(|n| filter.name(n));
        let trees = stored
            .into_iter()
            .filter(|r| filter.rank(r.rank))
            .map(|r| RankTree {
                rank: r.rank,
                paths: r.paths.into_iter().filter(|(p, _)| keep(p)).collect(),
                threads: r.threads.into_iter().map(|(t, paths)| (t, paths.into_iter().filter(|(p, _)| keep(p)).collect())).collect(),
            })
            .collect();
        return Ok((trees, true));
    }
    let excl: HashMap<(u32, &str), i64> = profile.extras.iter().filter_map(|e| Some(((e.rank, e.name.as_str()), e.exclusive_ns?))).collect();
    let mut by_rank: BTreeMap<u32, Vec<(Vec<String>, [i64; 3])>> = BTreeMap::new();
    for ((name, rank), s) in crate::model::region_totals(profile, true, |n, r| filter.name(n) && filter.rank(r)) {
        let Some(rank) = rank else { continue };
        let incl = i64::try_from(s.total_ns).unwrap_or(i64::MAX);
        let e = excl.get(&(rank, name.as_str())).copied().unwrap_or(incl);
        let calls = i64::try_from(s.count).unwrap_or(i64::MAX);
        by_rank.entry(rank).or_default().push((vec![name], [calls, incl, e]));
    }
    Ok((by_rank.into_iter().map(|(rank, paths)| RankTree { rank, paths, threads: Vec::new() }).collect(), false))
}

/// The counter columns of `sptool export --format json` per (rank, region): LIKWID events
/// summed over the hardware threads, LIKWID metrics as their mean over the threads, perf events
/// and FLOP/byte annotations as the totals.
pub struct Counters {
    pub columns: Vec<String>,
    values: HashMap<(u32, String), Vec<Option<f64>>>,
}

impl Counters {
    pub fn get(&self, key: &(u32, String)) -> Option<&Vec<Option<f64>>> {
        self.values.get(key)
    }
}

pub fn counters_by_region(profile: &Profile, filter: &Filter) -> Counters {
    let table = crate::export::tidy(profile, filter);
    let first = crate::export::FIXED.len();
    let columns: Vec<String> = table.columns[first..].to_vec();
    let metric_names: BTreeSet<&str> = profile.likwid.iter().flat_map(|l| l.metric_names.iter().map(String::as_str)).collect();
    let is_metric: Vec<bool> = columns.iter().map(|c| metric_names.contains(c.strip_prefix("metric:").unwrap_or(c))).collect();
    let mut sums: HashMap<(u32, String), (Vec<Option<f64>>, Vec<u32>)> = HashMap::new();
    for row in &table.rows {
        let (Some(rank), Some(region)) = (row[0].as_u64(), row[1].as_str()) else { continue };
        let e = sums.entry((rank as u32, region.to_string())).or_insert_with(|| (vec![None; columns.len()], vec![0; columns.len()]));
        for (i, v) in row[first..].iter().enumerate() {
            if let Some(x) = v.as_f64() {
                e.0[i] = Some(e.0[i].unwrap_or(0.0) + x);
                e.1[i] += 1;
            }
        }
    }
    let values = sums
        .into_iter()
        .map(|(k, (mut v, n))| {
            for i in 0..v.len() {
                if is_metric[i] && n[i] > 0 {
                    v[i] = v[i].map(|x| x / n[i] as f64);
                }
            }
            (k, v)
        })
        .collect();
    Counters { columns, values }
}

fn num(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

/// The json-split document.
pub fn document(profile: &Profile, filter: &Filter, per_thread: bool) -> Result<Value> {
    let (trees, stored) = rank_trees(profile, filter)?;
    // `--threads`: per thread id, its exclusive and inclusive time and calls as columns of the
    // (node, rank) rows (Hatchet's Caliper reader indexes rows by node and rank only).
    let thread_ids: Vec<i64> = if per_thread {
        if !trees.iter().any(|t| !t.threads.is_empty()) {
            return Err(Error::in_file(&profile.path, "--threads: the file stores no per-thread call paths (a file of the Python package, or one without call paths): export without --threads"));
        }
        trees.iter().flat_map(|t| t.threads.iter().map(|(id, _)| *id)).collect::<BTreeSet<i64>>().into_iter().collect()
    } else {
        Vec::new()
    };
    let mut by_thread: HashMap<(u32, &[String]), Vec<Option<[i64; 3]>>> = HashMap::new();
    for t in &trees {
        for (tid, paths) in &t.threads {
            let Ok(k) = thread_ids.binary_search(tid) else { continue };
            for (p, v) in paths {
                by_thread.entry((t.rank, p.as_slice())).or_insert_with(|| vec![None; thread_ids.len()])[k] = Some(*v);
            }
        }
    }
    let mpi = crate::mpi::read(&profile.path)?;
    let counters = counters_by_region(profile, filter);
    let counter_cols = counters.columns.clone();

    // Nodes: every path of every rank, parents before children, in first-seen order.
    let mut nodes: Vec<(String, Option<usize>)> = Vec::new();
    let mut node_of: HashMap<Vec<String>, usize> = HashMap::new();
    let mut add_path = |path: &[String], nodes: &mut Vec<(String, Option<usize>)>| -> usize {
        let mut parent = None;
        for depth in 1..=path.len() {
            let key = path[..depth].to_vec();
            let id = *node_of.entry(key).or_insert_with(|| {
                nodes.push((path[depth - 1].clone(), parent));
                nodes.len() - 1
            });
            parent = Some(id);
        }
        parent.unwrap_or(0)
    };
    // A region's counters go to its path when it has one path on the rank (a region under two
    // parents has no per-path counters to give).
    let mut rows: Vec<(usize, u32, [i64; 3], Option<&Vec<Option<f64>>>, [i64; 2])> = Vec::new();
    // Per row (tree rows only), the per-thread values in `thread_ids` order.
    let mut row_threads: Vec<Option<&Vec<Option<[i64; 3]>>>> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut split_counters = BTreeSet::new();
    for t in &trees {
        let mut paths_of: HashMap<&str, usize> = HashMap::new();
        for (p, _) in &t.paths {
            if let Some(last) = p.last() {
                *paths_of.entry(last.as_str()).or_default() += 1;
            }
        }
        for (p, v) in &t.paths {
            if p.is_empty() {
                continue;
            }
            let id = add_path(p, &mut nodes);
            let name = p.last().map(String::as_str).unwrap_or_default();
            let c = counters.get(&(t.rank, name.to_string()));
            let c = if paths_of.get(name) == Some(&1) {
                c
            } else {
                if c.is_some() {
                    split_counters.insert(name.to_string());
                }
                None
            };
            rows.push((id, t.rank, *v, c, [-1, -1]));
            row_threads.push(by_thread.get(&(t.rank, p.as_slice())));
        }
    }
    if !split_counters.is_empty() {
        notes.push(format!(
            "counters of regions reached by several call paths are not split between the paths: {}",
            split_counters.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if !stored {
        notes.push("the file stores no call paths: every region is a root, its exclusive time the inclusive time where the file has no exclusive time".into());
    }
    // The MPI plugin's routines under a root `MPI` (time in MPI is also inside the regions
    // that called it).
    let mpi: Vec<_> = mpi.into_iter().filter(|m| filter.rank(m.rank) && !m.routines.is_empty()).collect();
    if !mpi.is_empty() {
        let root = add_path(&["MPI".to_string()], &mut nodes);
        for m in &mpi {
            let mut by_routine: BTreeMap<&str, [i64; 4]> = BTreeMap::new();
            for r in &m.routines {
                let e = by_routine.entry(r.routine.as_str()).or_default();
                for (t, v) in e.iter_mut().zip([r.calls, r.time_ns, r.bytes_sent, r.bytes_received]) {
                    *t = t.saturating_add(v.max(0));
                }
            }
            let total: i64 = by_routine.values().map(|v| v[1]).fold(0i64, |a, b| a.saturating_add(b));
            let calls: i64 = by_routine.values().map(|v| v[0]).fold(0i64, |a, b| a.saturating_add(b));
            let sent: i64 = by_routine.values().map(|v| v[2]).fold(0i64, |a, b| a.saturating_add(b));
            let recv: i64 = by_routine.values().map(|v| v[3]).fold(0i64, |a, b| a.saturating_add(b));
            rows.push((root, m.rank, [calls, total, 0], None, [sent, recv]));
            for (routine, [calls, time, sent, recv]) in by_routine {
                let id = add_path(&["MPI".to_string(), routine.to_string()], &mut nodes);
                rows.push((id, m.rank, [calls, time, time], None, [sent, recv]));
            }
        }
        notes.push("MPI: the MPI plugin's routines per rank; their time is also inside the regions that called them".into());
    }

    // Hatchet reads the node order from data row i for node i: the first rows are one per node
    // in node order (the lowest rank's), then the others.
    let mut first_row: Vec<Option<usize>> = vec![None; nodes.len()];
    for (i, r) in rows.iter().enumerate() {
        let slot = &mut first_row[r.0];
        if slot.is_none_or(|j| rows[j].1 > r.1) {
            *slot = Some(i);
        }
    }
    let mut order: Vec<usize> = first_row.iter().flatten().copied().collect();
    let firsts: BTreeSet<usize> = order.iter().copied().collect();
    let mut rest: Vec<usize> = (0..rows.len()).filter(|i| !firsts.contains(i)).collect();
    rest.sort_by_key(|&i| (rows[i].1, rows[i].0));
    order.extend(rest);

    let mut columns = vec!["Node order".to_string(), "path".into(), "mpi.rank".into(), "sum#time.duration".into(), "inclusive#sum#time.duration".into(), "calls".into()];
    let mpi_cols = !mpi.is_empty();
    if mpi_cols {
        columns.extend(["mpi.bytes_sent".to_string(), "mpi.bytes_received".into()]);
    }
    let thread_first = columns.len();
    for t in &thread_ids {
        columns.extend([format!("thread.{t}#sum#time.duration"), format!("thread.{t}#inclusive#sum#time.duration"), format!("thread.{t}#calls")]);
    }
    let counter_first = columns.len();
    columns.extend(counter_cols.iter().cloned());
    let column_metadata: Vec<Value> = columns.iter().map(|c| json!({"is_value": c != "path"})).collect();
    let data: Vec<Value> = order
        .iter()
        .map(|&i| {
            let (node, rank, [calls, incl, excl], c, [sent, recv]) = &rows[i];
            let mut row = vec![Value::from(*node), Value::from(*node), Value::from(*rank), num(*excl as f64 / 1e9), num(*incl as f64 / 1e9), Value::from(*calls)];
            if mpi_cols {
                row.push(if *sent >= 0 { Value::from(*sent) } else { Value::from(0) });
                row.push(if *recv >= 0 { Value::from(*recv) } else { Value::from(0) });
            }
            row.resize(columns.len(), Value::Null);
            if let Some(Some(per)) = row_threads.get(i) {
                for (k, v) in per.iter().enumerate() {
                    // A thread that never reached the path: no time, no calls.
                    let [calls, incl, excl] = v.unwrap_or([0, 0, 0]);
                    row[thread_first + 3 * k] = num(excl as f64 / 1e9);
                    row[thread_first + 3 * k + 1] = num(incl as f64 / 1e9);
                    row[thread_first + 3 * k + 2] = Value::from(calls);
                }
            }
            if let Some(c) = c {
                for (j, v) in c.iter().enumerate() {
                    row[counter_first + j] = v.map_or(Value::Null, num);
                }
            }
            Value::Array(row)
        })
        .collect();
    let nodes_json: Vec<Value> = nodes
        .iter()
        .map(|(label, parent)| {
            let mut m = Map::new();
            m.insert("label".into(), Value::from(label.as_str()));
            m.insert("column".into(), Value::from("path"));
            if let Some(p) = parent {
                m.insert("parent".into(), Value::from(*p));
            }
            Value::Object(m)
        })
        .collect();

    let mut doc = run_metadata(profile);
    doc.insert("scope_profiler.file".into(), Value::from(profile.path.display().to_string()));
    doc.insert("scope_profiler.layout".into(), Value::from(profile.layout.describe()));
    doc.insert("scope_profiler.ranks".into(), Value::from(profile.ranks.len()));
    if !notes.is_empty() {
        doc.insert("scope_profiler.notes".into(), Value::from(notes.join("; ")));
    }
    doc.insert("data".into(), Value::Array(data));
    doc.insert("columns".into(), Value::from(columns));
    doc.insert("column_metadata".into(), Value::Array(column_metadata));
    doc.insert("nodes".into(), Value::Array(nodes_json));
    Ok(Value::Object(doc))
}
