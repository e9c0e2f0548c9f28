//! The counters in the HDF5 file, beside the timings of `rank<N>/`, from the counter sources'
//! results in the profile (`model::counters`):
//!
//! - `rank<N>/perf_events/<region>`: the Python package's layout (attributes `calls` and
//!   `event_names`, dataset `values` of uint64 totals, read by its `get_perf_events`), plus our
//!   additions: attribute `tag` (the real name), `running_fraction` (per event),
//!   `thread_ids`, `thread_values` (threads x events), `thread_running_fraction`,
//!   `thread_calls`, and `counted_<set>` attributes (FLOPs from a FLOP event set).
//! - `rank<N>/annotations/<region>`: attributes `tag`, `flops`, `bytes` (totals of
//!   `sp_region_add_flops` / `sp_region_add_bytes`, each only if it was called), datasets
//!   `thread_ids`, `thread_flops`, `thread_bytes`.

use crate::model::{AttrValue, RankCounters};
use super::{group_name, put_attr, put_i64_dataset, put_str};
use std::collections::HashSet;

fn f64_attr(g: &hdf5::Location, name: &str, v: f64) -> hdf5::Result<()> {
    g.new_attr::<f64>().create(name)?.write_scalar(&v)
}

fn f64_dataset(g: &hdf5::Group, name: &str, shape: &[usize], data: &[f64]) -> hdf5::Result<()> {
    let ds = g.new_dataset::<f64>().shape(shape).create(name)?;
    if !data.is_empty() {
        ds.write_raw(data)?;
    }
    Ok(())
}

/// Write `c` into `rank_group` (nothing when there is nothing).
pub fn write(rank_group: &hdf5::Group, c: &RankCounters) -> hdf5::Result<()> {
    if !c.perf.is_empty() {
        let g = rank_group.create_group("perf_events")?;
        put_attr(&g, "event_names", &AttrValue::StrList(c.event_names.clone()))?;
        let sets: Vec<String> = c.formulas.iter().map(|f| f.set.clone()).collect();
        if !sets.is_empty() {
            put_attr(&g, "flops_sets", &AttrValue::StrList(sets))?;
        }
        let mut used = HashSet::new();
        for r in &c.perf {
            let rg = g.create_group(&group_name(&r.name, &mut used))?;
            put_str(&rg, "tag", &r.name)?;
            put_attr(&rg, "calls", &AttrValue::Int(r.calls as i64))?;
            put_attr(&rg, "event_names", &AttrValue::StrList(c.event_names.clone()))?;
            let values: Vec<u64> = r.totals.iter().map(|v| v.round().max(0.0) as u64).collect();
            rg.new_dataset::<u64>().shape(values.len()).create("values")?.write_raw(&values)?;
            f64_dataset(&rg, "running_fraction", &[r.totals.len()], &vec![r.running_fraction; r.totals.len()])?;
            put_i64_dataset(&rg, "thread_ids", &r.thread_ids)?;
            let flat: Vec<f64> = r.thread_values.iter().flatten().copied().collect();
            f64_dataset(&rg, "thread_values", &[r.thread_values.len(), r.totals.len()], &flat)?;
            f64_dataset(&rg, "thread_running_fraction", &[r.thread_running_fraction.len()], &r.thread_running_fraction)?;
            let calls: Vec<i64> = r.thread_calls.iter().map(|&c| c as i64).collect();
            put_i64_dataset(&rg, "thread_calls", &calls)?;
            for (set, flops) in &r.counted_flops {
                f64_attr(&rg, &format!("counted_{set}"), *flops)?;
            }
        }
    }
    if !c.annotated.is_empty() {
        let g = rank_group.create_group("annotations")?;
        let mut used = HashSet::new();
        for a in &c.annotated {
            let rg = g.create_group(&group_name(&a.name, &mut used))?;
            put_str(&rg, "tag", &a.name)?;
            if let Some(f) = a.flops {
                f64_attr(&rg, "flops", f)?;
            }
            if let Some(b) = a.bytes {
                f64_attr(&rg, "bytes", b)?;
            }
            put_i64_dataset(&rg, "thread_ids", &a.thread_ids)?;
            f64_dataset(&rg, "thread_flops", &[a.thread_flops.len()], &a.thread_flops)?;
            f64_dataset(&rg, "thread_bytes", &[a.thread_bytes.len()], &a.thread_bytes)?;
        }
    }
    Ok(())
}
