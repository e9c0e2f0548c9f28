//! A small writer of profile files for the tests and the benchmark
//! generator: schema 1 as the scope_profiler library writes it (see
//! shared/specs/hdf5-layout.md), and the Python package's columnar
//! schemas 2 and 3 (see scope_profiler/h5writer.py).
#![allow(dead_code)]

use hdf5::types::VarLenUnicode;
use hdf5::{Group, Location};

/// An attribute value.
#[derive(Clone, Debug)]
pub enum Val {
    I(i64),
    F(f64),
    S(String),
    IA(Vec<i64>),
    SA(Vec<String>),
}

pub fn s(text: &str) -> Val {
    Val::S(text.to_string())
}

pub fn sa(items: &[&str]) -> Val {
    Val::SA(items.iter().map(|x| x.to_string()).collect())
}

fn vlu(text: &str) -> VarLenUnicode {
    text.parse().expect("no NUL in test strings")
}

pub fn write_attr(loc: &Location, name: &str, value: &Val) -> hdf5::Result<()> {
    match value {
        Val::I(v) => loc.new_attr::<i64>().create(name)?.write_scalar(v),
        Val::F(v) => loc.new_attr::<f64>().create(name)?.write_scalar(v),
        Val::S(v) => loc.new_attr::<VarLenUnicode>().create(name)?.write_scalar(&vlu(v)),
        Val::IA(v) => loc.new_attr::<i64>().shape(v.len()).create(name)?.write(v.as_slice()),
        Val::SA(v) => {
            let items: Vec<VarLenUnicode> = v.iter().map(|x| vlu(x)).collect();
            loc.new_attr::<VarLenUnicode>().shape(items.len()).create(name)?.write(items.as_slice())
        }
    }
}

fn write_i64(group: &Group, name: &str, data: &[i64]) -> hdf5::Result<()> {
    group.new_dataset::<i64>().shape(data.len()).create(name)?.write(data)
}

fn write_f64_2d(group: &Group, name: &str, rows: &[Vec<f64>], nthreads: usize) -> hdf5::Result<()> {
    let flat: Vec<f64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    assert_eq!(flat.len(), rows.len() * nthreads, "rows x nthreads");
    group.new_dataset::<f64>().shape((rows.len(), nthreads)).create(name)?.write_raw(flat.as_slice())
}

#[derive(Clone, Debug, Default)]
pub struct Region {
    pub name: String,
    pub starts: Vec<i64>,
    pub ends: Vec<i64>,
    pub threads: Vec<i64>,
    pub open_calls: i64,
}

impl Region {
    /// Calls of the given durations (ns), back to back from `t0`.
    pub fn from_durations(name: &str, t0: i64, durations: &[i64]) -> Self {
        let mut starts = Vec::with_capacity(durations.len());
        let mut ends = Vec::with_capacity(durations.len());
        let mut t = t0;
        for d in durations {
            starts.push(t);
            ends.push(t + d);
            t += d + 1000;
        }
        let threads = vec![0; durations.len()];
        Self { name: name.to_string(), starts, ends, threads, open_calls: 0 }
    }
}

#[derive(Clone, Debug, Default)]
pub struct LikwidRegion {
    pub tag: String,
    pub group_id: i64,
    pub group_name: String,
    pub source: String,
    pub cpus: Vec<i64>,
    pub times: Vec<f64>,
    pub call_counts: Vec<i64>,
    pub event_names: Vec<String>,
    pub counter_names: Vec<String>,
    pub metric_names: Vec<String>,
    /// nevents x nthreads
    pub events: Vec<Vec<f64>>,
    /// nmetrics x nthreads
    pub metrics: Vec<Vec<f64>>,
}

#[derive(Clone, Debug, Default)]
pub struct Likwid {
    pub env: Vec<(String, String)>,
    pub regions: Vec<LikwidRegion>,
}

#[derive(Clone, Debug, Default)]
pub struct Rank {
    pub rank: u32,
    pub attrs: Vec<(String, Val)>,
    pub regions: Vec<Region>,
    pub likwid: Option<Likwid>,
}

fn group_name(name: &str) -> String {
    name.replace('/', "|")
}

fn write_likwid(rank_group: &Group, likwid: &Likwid) -> hdf5::Result<()> {
    let g = rank_group.create_group("likwid")?;
    for (k, v) in &likwid.env {
        write_attr(&g, k, &s(v))?;
    }
    write_attr(&g, "num_regions", &Val::I(likwid.regions.len() as i64))?;
    let regions = g.create_group("regions")?;
    for r in &likwid.regions {
        let rg = regions.create_group(&group_name(&r.tag))?;
        write_attr(&rg, "tag", &s(&r.tag))?;
        write_attr(&rg, "group_id", &Val::I(r.group_id))?;
        write_attr(&rg, "group_name", &s(&r.group_name))?;
        write_attr(&rg, "source", &s(&r.source))?;
        write_attr(&rg, "event_names", &Val::SA(r.event_names.clone()))?;
        write_attr(&rg, "counter_names", &Val::SA(r.counter_names.clone()))?;
        write_attr(&rg, "metric_names", &Val::SA(r.metric_names.clone()))?;
        let n = r.times.len();
        write_i64(&rg, "cpus", &r.cpus)?;
        rg.new_dataset::<f64>().shape(n).create("times")?.write(r.times.as_slice())?;
        write_i64(&rg, "call_counts", &r.call_counts)?;
        write_f64_2d(&rg, "events", &r.events, n)?;
        write_f64_2d(&rg, "metrics", &r.metrics, n)?;
    }
    Ok(())
}

fn write_metadata(file: &hdf5::File, metadata: &[(String, Val)]) -> hdf5::Result<()> {
    let meta = file.create_group("metadata")?;
    for (k, v) in metadata {
        write_attr(&meta, k, v)?;
    }
    Ok(())
}

/// Writes a schema-1 file rank by rank (so big files need not fit in memory).
pub struct Schema1Writer {
    file: hdf5::File,
}

impl Schema1Writer {
    pub fn create(path: &std::path::Path, metadata: &[(String, Val)]) -> hdf5::Result<Self> {
        let file = hdf5::File::create(path)?;
        write_attr(&file, "scope_profiler_schema", &Val::I(1))?;
        write_metadata(&file, metadata)?;
        Ok(Self { file })
    }

    pub fn rank(&self, rank: &Rank) -> hdf5::Result<()> {
        let g = self.file.create_group(&format!("rank{}", rank.rank))?;
        for (k, v) in &rank.attrs {
            write_attr(&g, k, v)?;
        }
        let regions = g.create_group("regions")?;
        for r in &rank.regions {
            let rg = regions.create_group(&group_name(&r.name))?;
            write_attr(&rg, "tag", &s(&r.name))?;
            write_attr(&rg, "open_calls", &Val::I(r.open_calls))?;
            write_i64(&rg, "start_times", &r.starts)?;
            write_i64(&rg, "end_times", &r.ends)?;
            write_i64(&rg, "thread_ids", &r.threads)?;
        }
        if let Some(l) = &rank.likwid {
            write_likwid(&g, l)?;
        }
        Ok(())
    }
}

pub fn write_schema1(path: &std::path::Path, metadata: &[(String, Val)], ranks: &[Rank]) -> hdf5::Result<()> {
    let w = Schema1Writer::create(path, metadata)?;
    for r in ranks {
        w.rank(r)?;
    }
    Ok(())
}

/// The Python package's columnar layout: schema 2 (absolute start/end
/// times) or schema 3 (start gaps and durations, per (rank, region) run).
pub fn write_columnar(
    path: &std::path::Path,
    schema: i64,
    metadata: &[(String, Val)],
    ranks: &[Rank],
) -> hdf5::Result<()> {
    let file = hdf5::File::create(path)?;
    write_attr(&file, "scope_profiler_schema", &Val::I(schema))?;
    write_attr(&file, "storage_layout", &s("columnar"))?;
    write_metadata(&file, metadata)?;
    let mut names: Vec<String> = Vec::new();
    let (mut ids, mut rank_col, mut offsets, mut counts) = (Vec::<u32>::new(), Vec::<u32>::new(), Vec::<u64>::new(), Vec::<u64>::new());
    let (mut a, mut b) = (Vec::<i64>::new(), Vec::<i64>::new());
    for rank in ranks {
        for r in &rank.regions {
            let id = match names.iter().position(|n| *n == r.name) {
                Some(i) => i,
                None => {
                    names.push(r.name.clone());
                    names.len() - 1
                }
            };
            ids.push(id as u32);
            rank_col.push(rank.rank);
            offsets.push(a.len() as u64);
            counts.push(r.starts.len() as u64);
            let mut prev = 0;
            for (s, e) in r.starts.iter().zip(&r.ends) {
                if schema == 2 {
                    a.push(*s);
                    b.push(*e);
                } else {
                    a.push(s - prev);
                    b.push(e - s);
                    prev = *s;
                }
            }
        }
        if let Some(l) = &rank.likwid {
            let g = file.create_group(&format!("rank{}", rank.rank))?;
            write_likwid(&g, l)?;
        }
    }
    let table = file.create_group("region_table")?;
    let vl: Vec<VarLenUnicode> = names.iter().map(|n| vlu(n)).collect();
    table.new_dataset::<VarLenUnicode>().shape(vl.len()).create("names")?.write(vl.as_slice())?;
    let index = file.create_group("rank_region_index")?;
    index.new_dataset::<u32>().shape(ids.len()).create("region_ids")?.write(ids.as_slice())?;
    index.new_dataset::<u32>().shape(rank_col.len()).create("ranks")?.write(rank_col.as_slice())?;
    index.new_dataset::<u64>().shape(offsets.len()).create("event_offsets")?.write(offsets.as_slice())?;
    index.new_dataset::<u64>().shape(counts.len()).create("event_counts")?.write(counts.as_slice())?;
    let events = file.create_group("events")?;
    let (na, nb) = if schema == 2 { ("start_times", "end_times") } else { ("start_deltas", "durations") };
    write_i64(&events, na, &a)?;
    write_i64(&events, nb, &b)?;
    Ok(())
}
