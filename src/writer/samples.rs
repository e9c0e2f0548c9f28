//! A rank's samples in the HDF5 file, the same in every layout:
//!
//! - `line_profile/<i>`: the samples mapped to source lines, one group per region, function
//!   and file, exactly as the Python package's `h5writer` stores line-profiler records (read
//!   by `read_h5(...).line_profile` and `scope-profiler line-profile`): attributes `region`,
//!   `filename`, `function` (strings), `first_lineno` (int64), `unit` (float64, seconds per
//!   unit of `times`: 1e-9), datasets `line_numbers` (int64), `hits` (int64: samples) and
//!   `times` (float64: CPU time). Samples outside every region are records of region
//!   `(outside regions)` with the attribute `outside_regions` = 1.
//! - `sampling/`: attributes `hz`, `mechanism`, `signal`, `ticks` (samples taken),
//!   `outside_samples`, `lost_samples`, `threads`, and `handler_replaced` (a sentence) and `blocked_threads` when the
//!   program took the sampling signal's handler over while sampling ran, or blocked it in
//!   sampled threads; `regions` (names, indexed by the rows'
//!   `region`); `modules/{path,base}`; `samples/{thread,region,module,address,count,time_ns}`
//!   (one row per thread, region and instruction address: with the modules' load biases, what
//!   a later symbolization needs).

use super::{put_attr, put_i64_dataset};
use crate::model::AttrValue;
use crate::model::samples::{LINE_UNIT, SampleProfile};
use hdf5::types::VarLenUnicode;

fn strings(g: &hdf5::Group, name: &str, values: impl Iterator<Item = String>) -> hdf5::Result<()> {
    let v: Vec<VarLenUnicode> = values.map(|s| s.replace('\0', "").parse().unwrap_or_default()).collect();
    let ds = g.new_dataset::<VarLenUnicode>().shape(v.len()).create(name)?;
    if !v.is_empty() {
        ds.write(&v)?;
    }
    Ok(())
}

fn u64s(g: &hdf5::Group, name: &str, v: Vec<u64>) -> hdf5::Result<()> {
    let ds = g.new_dataset::<u64>().shape(v.len()).create(name)?;
    if !v.is_empty() {
        ds.write(&v)?;
    }
    Ok(())
}

fn f64s(g: &hdf5::Group, name: &str, v: &[f64]) -> hdf5::Result<()> {
    let ds = g.new_dataset::<f64>().shape(v.len()).create(name)?;
    if !v.is_empty() {
        ds.write(v)?;
    }
    Ok(())
}

/// Write `p` into `rank_group`.
pub fn write(rank_group: &hdf5::Group, p: &SampleProfile) -> hdf5::Result<()> {
    let s = rank_group.create_group("sampling")?;
    put_attr(&s, "hz", &AttrValue::Int(p.hz))?;
    put_attr(&s, "mechanism", &AttrValue::Str(p.mechanism.clone()))?;
    put_attr(&s, "signal", &AttrValue::Int(p.signal))?;
    for (name, v) in [("ticks", p.ticks), ("outside_samples", p.outside), ("lost_samples", p.lost), ("threads", p.threads)] {
        put_attr(&s, name, &AttrValue::Int(v.min(i64::MAX as u64) as i64))?;
    }
    if let Some(what) = &p.handler_replaced {
        put_attr(&s, "handler_replaced", &AttrValue::Str(what.clone()))?;
        put_attr(&s, "blocked_threads", &AttrValue::Int(p.blocked_threads.min(i64::MAX as u64) as i64))?;
    }
    strings(&s, "regions", p.regions.iter().cloned())?;
    let m = s.create_group("modules")?;
    strings(&m, "path", p.modules.iter().map(|x| x.path.clone()))?;
    u64s(&m, "base", p.modules.iter().map(|x| x.base).collect())?;
    let r = s.create_group("samples")?;
    put_i64_dataset(&r, "thread", &p.rows.iter().map(|x| x.thread).collect::<Vec<_>>())?;
    put_i64_dataset(&r, "region", &p.rows.iter().map(|x| x.region).collect::<Vec<_>>())?;
    put_i64_dataset(&r, "module", &p.rows.iter().map(|x| x.module).collect::<Vec<_>>())?;
    u64s(&r, "address", p.rows.iter().map(|x| x.address).collect())?;
    u64s(&r, "count", p.rows.iter().map(|x| x.count).collect())?;
    u64s(&r, "time_ns", p.rows.iter().map(|x| x.time_ns).collect())?;

    if p.lines.is_empty() {
        return Ok(());
    }
    let lp = rank_group.create_group("line_profile")?;
    for (i, rec) in p.lines.iter().enumerate() {
        let g = lp.create_group(&i.to_string())?;
        put_attr(&g, "region", &AttrValue::Str(rec.region.clone()))?;
        put_attr(&g, "filename", &AttrValue::Str(rec.filename.clone()))?;
        put_attr(&g, "function", &AttrValue::Str(rec.function.clone()))?;
        put_attr(&g, "first_lineno", &AttrValue::Int(rec.first_lineno))?;
        g.new_attr::<f64>().create("unit")?.write_scalar(&LINE_UNIT)?;
        if rec.outside {
            put_attr(&g, "outside_regions", &AttrValue::Int(1))?;
        }
        put_i64_dataset(&g, "line_numbers", &rec.line_numbers)?;
        put_i64_dataset(&g, "hits", &rec.hits)?;
        f64s(&g, "times", &rec.times)?;
    }
    Ok(())
}
