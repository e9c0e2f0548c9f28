//! `sptool export`: per-rank region statistics joined with the LIKWID
//! results in one tidy table, one row per (rank, region, hardware thread),
//! one column per event label and metric; written as JSON or CSV. Files with
//! perf events or FLOP/byte annotations add the columns `flops`, `bytes`,
//! `gflops_per_s`, `counted_flops` and one per perf event (totals per rank and region).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::model::{Attrs, LikwidRegion, Profile, RegionRank};
use crate::stats::Stats;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Json,
    Csv,
    /// Every call as a Chrome trace event (Perfetto, chrome://tracing)
    ChromeTrace,
    /// Caliper's json-split (Hatchet's and Thicket's from_caliper)
    CaliperJson,
    /// Extra-P's JSON Lines over a series of runs (several FILEs)
    Extrap,
    /// An OTF2 archive (directory) through libotf2 (Vampir, otf2-print)
    Otf2,
}

/// Columns every row has, in order. Event and metric columns follow.
pub const FIXED: &[&str] = &[
    "rank",
    "region",
    "cpu",
    "calls",
    "total_s",
    "mean_s",
    "min_s",
    "max_s",
    "std_s",
    "open_calls",
    "likwid_group",
    "likwid_group_id",
    "likwid_source",
    "likwid_call_count",
    "likwid_runtime_s",
];

pub struct TidyTable {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Value>>,
}

fn num(v: Option<f64>) -> Value {
    v.and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number)
}

fn stats_values(s: Option<&Stats>, open: Option<i64>) -> Vec<Value> {
    let Some(s) = s else { return vec![Value::Null; 7] };
    let has = s.count > 0;
    vec![
        Value::from(s.count),
        num(Some(s.total_s())),
        num(s.mean_s()),
        num(if has { s.min_s() } else { None }),
        num(s.max_s()),
        num(s.std_s()),
        open.map_or(Value::Null, Value::from),
    ]
}

/// Build the tidy table for the selected ranks and regions, sorted by rank,
/// then region name, then hardware thread.
pub fn tidy(profile: &Profile, filter: &Filter) -> TidyTable {
    type Key<'a> = (u32, &'a str);
    let mut timing: BTreeMap<Key, (Stats, i64)> = BTreeMap::new();
    for r in profile.regions.iter().filter(|r| filter.rank(r.rank) && filter.name(&r.name)) {
        let RegionRank { rank, name, stats, open_calls } = r;
        let entry = timing.entry((*rank, name.as_str())).or_insert((Stats::default(), 0));
        entry.0.merge(stats);
        entry.1 = entry.1.saturating_add(*open_calls);
    }
    let mut likwid: BTreeMap<Key, &LikwidRegion> = BTreeMap::new();
    for l in profile.likwid.iter().filter(|l| filter.rank(l.rank) && filter.name(&l.tag)) {
        likwid.insert((l.rank, l.tag.as_str()), l);
    }

    // Event and metric columns, first seen first; a label that clashes with
    // an existing column gets an `event:` or `metric:` prefix.
    let mut columns: Vec<String> = FIXED.iter().map(|s| s.to_string()).collect();
    let mut event_col: BTreeMap<&str, usize> = BTreeMap::new();
    let mut metric_col: BTreeMap<&str, usize> = BTreeMap::new();
    let mut labels: BTreeMap<Key, Vec<String>> = BTreeMap::new();
    for (key, l) in &likwid {
        labels.insert(*key, l.event_labels());
    }
    let add = |columns: &mut Vec<String>, name: &str, prefix: &str| {
        let label = if columns.iter().any(|c| c == name) { format!("{prefix}:{name}") } else { name.to_string() };
        columns.push(label);
        columns.len() - 1
    };
    for (key, l) in &likwid {
        for label in &labels[key] {
            if !event_col.contains_key(label.as_str()) {
                let i = add(&mut columns, label, "event");
                event_col.insert(label, i);
            }
        }
        for name in &l.metric_names {
            if !metric_col.contains_key(name.as_str()) {
                let i = add(&mut columns, name, "metric");
                metric_col.insert(name, i);
            }
        }
    }

    // perf events and analytic work, per (rank, region).
    let work: BTreeMap<Key, crate::counters::WorkRow> = crate::counters::work_rows(profile, filter)
        .into_iter()
        .filter_map(|w| {
            let name = profile.annotations.iter().map(|a| a.name.as_str()).chain(profile.perf.iter().map(|p| p.name.as_str())).find(|n| *n == w.name)?;
            Some(((w.rank, name), w))
        })
        .collect();
    let mut perf: BTreeMap<Key, &crate::model::PerfRegion> = BTreeMap::new();
    for p in profile.perf.iter().filter(|p| filter.rank(p.rank) && filter.name(&p.name)) {
        perf.insert((p.rank, p.name.as_str()), p);
    }
    let work_cols = if work.is_empty() && perf.is_empty() {
        None
    } else {
        let first = columns.len();
        for name in ["flops", "bytes", "gflops_per_s", "counted_flops"] {
            add(&mut columns, name, "work");
        }
        Some(first)
    };
    let mut perf_col: BTreeMap<&str, usize> = BTreeMap::new();
    for p in perf.values() {
        for (e, _) in &p.events {
            if !perf_col.contains_key(e.as_str()) {
                let i = add(&mut columns, e, "perf");
                perf_col.insert(e, i);
            }
        }
    }
    let fill_counters = |key: &Key, row: &mut Vec<Value>| {
        if let (Some(first), Some(w)) = (work_cols, work.get(key)) {
            row[first] = num(w.flops);
            row[first + 1] = num(w.bytes);
            row[first + 2] = num(w.gflops_per_s());
            row[first + 3] = num(w.counted);
        }
        if let Some(p) = perf.get(key) {
            for (e, v) in &p.events {
                row[perf_col[e.as_str()]] = num(Some(*v));
            }
        }
    };

    let mut keys: Vec<Key> = timing.keys().chain(likwid.keys()).chain(work.keys()).chain(perf.keys()).copied().collect();
    keys.sort_unstable();
    keys.dedup();
    let mut rows = Vec::new();
    for key in keys {
        let t = timing.get(&key);
        let base = |cpu: Value| {
            let mut row = vec![Value::from(key.0), Value::from(key.1), cpu];
            row.extend(stats_values(t.map(|(s, _)| s), t.map(|(_, o)| *o)));
            row
        };
        match likwid.get(&key) {
            None => {
                let mut row = base(Value::Null);
                row.resize(columns.len(), Value::Null);
                fill_counters(&key, &mut row);
                rows.push(row);
            }
            Some(l) => {
                for th in 0..l.nthreads() {
                    let mut row = base(Value::from(l.cpus[th]));
                    row.extend([
                        Value::from(l.group_name.as_str()),
                        Value::from(l.group_id),
                        Value::from(l.source.as_str()),
                        Value::from(l.call_counts[th]),
                        num(Some(l.times[th])),
                    ]);
                    row.resize(columns.len(), Value::Null);
                    for (label, values) in labels[&key].iter().zip(&l.events) {
                        row[event_col[label.as_str()]] = num(values.get(th).copied());
                    }
                    for (name, values) in l.metric_names.iter().zip(&l.metrics) {
                        row[metric_col[name.as_str()]] = num(values.get(th).copied());
                    }
                    fill_counters(&key, &mut row);
                    rows.push(row);
                }
            }
        }
    }
    TidyTable { columns, rows }
}

fn attrs_json(attrs: &Attrs) -> Value {
    Value::Object(attrs.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
}

/// The JSON document: the file, its metadata, the ranks and the tidy rows.
pub fn to_json(profile: &Profile, filter: &Filter) -> Value {
    let table = tidy(profile, filter);
    let ranks: Vec<Value> = profile
        .ranks
        .iter()
        .filter(|r| filter.rank(r.rank))
        .map(|r| {
            let mut m = Map::new();
            m.insert("rank".into(), Value::from(r.rank));
            m.insert("attributes".into(), attrs_json(&r.attrs));
            m.insert("likwid_attributes".into(), attrs_json(&r.likwid_attrs));
            Value::Object(m)
        })
        .collect();
    let rows: Vec<Value> = table
        .rows
        .into_iter()
        .map(|row| Value::Object(table.columns.iter().cloned().zip(row).collect()))
        .collect();
    let mut doc = Map::new();
    doc.insert("file".into(), Value::from(profile.path.display().to_string()));
    doc.insert("schema".into(), Value::from(profile.schema));
    doc.insert("layout".into(), Value::from(profile.layout.describe()));
    doc.insert("metadata".into(), attrs_json(&profile.metadata));
    doc.insert("ranks".into(), Value::Array(ranks));
    doc.insert("columns".into(), Value::from(table.columns));
    doc.insert("rows".into(), Value::Array(rows));
    // scope_profiler's schema-3 files: exclusive time and duration histogram per rank and region.
    let extras: Vec<Value> = profile
        .extras
        .iter()
        .filter(|e| filter.rank(e.rank) && filter.name(&e.name))
        .map(|e| {
            let mut m = Map::new();
            m.insert("rank".into(), Value::from(e.rank));
            m.insert("region".into(), Value::from(e.name.clone()));
            m.insert("exclusive_s".into(), e.exclusive_ns.map_or(Value::Null, |x| Value::from(x as f64 / 1e9)));
            m.insert("histogram_bucket_floor_ns".into(), Value::from((0..e.histogram.len()).map(|b| if b <= 1 { 0u64 } else { 1u64 << (b - 1) }).collect::<Vec<u64>>()));
            m.insert("histogram_counts".into(), Value::from(e.histogram.clone()));
            Value::Object(m)
        })
        .collect();
    if !extras.is_empty() {
        doc.insert("histograms".into(), Value::Array(extras));
    }
    Value::Object(doc)
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Write the export to `out` (`-` for standard output).
pub fn write(profile: &Profile, filter: &Filter, format: Format, threads: bool, out: &Path) -> Result<()> {
    let mut bytes = Vec::new();
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut bytes, &to_json(profile, filter))
                .map_err(|e| Error::in_file(out, format!("cannot encode JSON: {e}")))?;
            bytes.push(b'\n');
        }
        Format::ChromeTrace => return crate::trace::export(&profile.path, filter, None, out),
        Format::CaliperJson => {
            serde_json::to_writer(&mut bytes, &crate::caliper::document(profile, filter, threads)?)
                .map_err(|e| Error::in_file(out, format!("cannot encode JSON: {e}")))?;
            bytes.push(b'\n');
        }
        Format::Extrap | Format::Otf2 => return Err(Error::new("internal: extrap and otf2 are written by their own modules")),
        Format::Csv => {
            let table = tidy(profile, filter);
            let mut w = csv::Writer::from_writer(&mut bytes);
            let fail = |e: csv::Error| Error::in_file(out, format!("cannot encode CSV: {e}"));
            w.write_record(&table.columns).map_err(fail)?;
            for row in &table.rows {
                w.write_record(row.iter().map(cell)).map_err(fail)?;
            }
            w.flush().map_err(|e| Error::in_file(out, format!("cannot encode CSV: {e}")))?;
        }
    }
    write_output(out, &bytes)
}

/// Write `bytes` to the file `out`, or to standard output for `-`.
pub fn write_output(out: &Path, bytes: &[u8]) -> Result<()> {
    if out.as_os_str() == "-" {
        let mut stdout = std::io::stdout().lock();
        return match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(Error::new(format!("cannot write to standard output: {e}")))
            }
            _ => Ok(()),
        };
    }
    // A private temporary file renamed into place: an existing file or symlink at `out` is
    // replaced, never written through.
    let fail = |e: std::io::Error| Error::in_file(out, format!("cannot write the output: {e}"));
    let mut file = create_output(out, "cannot write the output")?;
    file.write_all(bytes).map_err(fail)?;
    finish_output(file, out).map_err(fail)
}

/// Move a finished output into place, and tell the guard (if sptool then dies by a signal
/// while still reading, the parent removes it: its line says sptool wrote nothing).
pub fn finish_output(file: safe_file::Replacement, out: &Path) -> std::io::Result<()> {
    let renamed = matches!(file, safe_file::Replacement::Temp(_));
    file.finish()?;
    if renamed {
        crate::guard::note_written(out);
    }
    Ok(())
}

/// Create the output `out` as `safe_file` does (a private temporary file renamed into place
/// by `finish`, or a FIFO or terminal the user named), telling [`crate::guard`] about the
/// temporary file so that it is removed if sptool is stopped.
pub fn create_output(out: &Path, failed: &str) -> Result<safe_file::Replacement> {
    let file = safe_file::Replacement::create(out).map_err(|e| Error::in_file(out, format!("{failed}: {e}")))?;
    if let safe_file::Replacement::Temp(t) = &file {
        crate::guard::note_temp(t.path());
    }
    Ok(file)
}
