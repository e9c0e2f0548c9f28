//! Read `rank<N>/perf_events/` (perf_event counter totals per region: the Python package's
//! layout, attributes `calls`, `event_names` and dataset `values`, plus the library's
//! `tag`, `running_fraction` and `counted_<set>` FLOPs) and `rank<N>/annotations/` (the
//! analytic FLOPs and bytes of `sp_region_add_flops` / `sp_region_add_bytes`).

use crate::error::{Error, Result};
use crate::h5util::Group;
use crate::model::{Annotation, PerfRegion};

pub const PERF_GROUP: &str = "perf_events";
pub const ANNOTATIONS_GROUP: &str = "annotations";

/// A scalar number attribute. It may be infinite or NaN (an overflowed sum, a damaged file):
/// the tables show it as such, the roofline leaves it out.
fn f64_attr(g: &Group, name: &str) -> Option<f64> {
    g.attr_f64(name)
}

pub fn read_perf(rank_group: &Group, rank: u32) -> Result<Vec<PerfRegion>> {
    let group = rank_group.group(PERF_GROUP)?;
    let mut out = Vec::new();
    for member in group.subgroups()? {
        let g = group.member(&member)?;
        let names = g.attr_strings("event_names").unwrap_or_default();
        let values = g.read_f64("values")?;
        if values.len() != names.len() {
            return Err(Error::new(format!("{} is damaged: {} event_names but {} values", g.path(), names.len(), values.len())));
        }
        let running_fraction = if g.has("running_fraction") {
            g.read_f64("running_fraction")?.into_iter().fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))))
        } else {
            None
        };
        let counted_flops = ["counted_flops", "counted_flops_dp", "counted_flops_sp"]
            .iter()
            .filter_map(|k| f64_attr(&g, k).map(|v| (k.trim_start_matches("counted_").to_string(), v)))
            .collect();
        out.push(PerfRegion {
            rank,
            name: g.attr_string("tag").unwrap_or_else(|| member.name.replace('|', "/")),
            calls: g.attr_i64("calls").unwrap_or(0),
            events: names.into_iter().zip(values).collect(),
            running_fraction,
            counted_flops,
        });
    }
    Ok(out)
}

pub fn read_annotations(rank_group: &Group, rank: u32) -> Result<Vec<Annotation>> {
    let group = rank_group.group(ANNOTATIONS_GROUP)?;
    let mut out = Vec::new();
    for member in group.subgroups()? {
        let g = group.member(&member)?;
        out.push(Annotation {
            rank,
            name: g.attr_string("tag").unwrap_or_else(|| member.name.replace('|', "/")),
            flops: f64_attr(&g, "flops"),
            bytes: f64_attr(&g, "bytes"),
        });
    }
    Ok(out)
}

/// FLOPs and bytes of one region on one rank, with the rates over its time.
#[derive(Clone, Debug)]
pub struct WorkRow {
    pub rank: u32,
    pub name: String,
    /// Summed duration of the region's calls on this rank (all threads).
    pub time_s: f64,
    pub flops: Option<f64>,
    pub bytes: Option<f64>,
    /// FLOPs from the FLOP event sets.
    pub counted: Option<f64>,
}

impl WorkRow {
    pub fn rate(&self, v: Option<f64>) -> Option<f64> {
        v.filter(|_| self.time_s > 0.0).map(|v| v / self.time_s / 1e9)
    }
    pub fn gflops_per_s(&self) -> Option<f64> {
        self.rate(self.flops.or(self.counted))
    }
    pub fn gbytes_per_s(&self) -> Option<f64> {
        self.rate(self.bytes)
    }
    pub fn counted_gflops_per_s(&self) -> Option<f64> {
        self.rate(self.counted)
    }
    pub fn intensity(&self) -> Option<f64> {
        match (self.flops.or(self.counted), self.bytes) {
            (Some(f), Some(b)) if b > 0.0 => Some(f / b),
            _ => None,
        }
    }
    /// Analytic FLOPs / counted FLOPs (1 = the counters see what the code does).
    pub fn analytic_over_counted(&self) -> Option<f64> {
        match (self.flops, self.counted) {
            (Some(a), Some(c)) if c > 0.0 => Some(a / c),
            _ => None,
        }
    }
}

/// Every selected (rank, region) with analytic or counted FLOPs or bytes, by rank and name.
pub fn work_rows(profile: &crate::model::Profile, filter: &crate::filter::Filter) -> Vec<WorkRow> {
    use std::collections::BTreeMap;
    let mut rows: BTreeMap<(u32, &str), WorkRow> = BTreeMap::new();
    let new = |rank: u32, name: &str| WorkRow { rank, name: name.to_string(), time_s: 0.0, flops: None, bytes: None, counted: None };
    for a in profile.annotations.iter().filter(|a| filter.rank(a.rank) && filter.name(&a.name)) {
        let row = rows.entry((a.rank, a.name.as_str())).or_insert_with(|| new(a.rank, &a.name));
        row.flops = a.flops;
        row.bytes = a.bytes;
    }
    for p in profile.perf.iter().filter(|p| filter.rank(p.rank) && filter.name(&p.name)) {
        if let Some(c) = p.counted() {
            rows.entry((p.rank, p.name.as_str())).or_insert_with(|| new(p.rank, &p.name)).counted = Some(c);
        }
    }
    for r in &profile.regions {
        if let Some(row) = rows.get_mut(&(r.rank, r.name.as_str())) {
            row.time_s += r.stats.total_s();
        }
    }
    rows.into_values().collect()
}
