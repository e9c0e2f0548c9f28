//! Read `rank<N>/likwid/`: the LIKWID environment of the run (attributes)
//! and one group per region tag with per-hardware-thread values.

use crate::error::{Error, Result};
use crate::h5util::Group;
use crate::model::{Attrs, LikwidRegion};

pub const GROUP: &str = "likwid";

/// The attributes of `rank<N>/likwid` and its regions.
pub fn read_rank(rank_group: &Group, rank: u32) -> Result<(Attrs, Vec<LikwidRegion>)> {
    let group = rank_group.group(GROUP)?;
    let attrs = group.attrs()?;
    let mut regions = Vec::new();
    if group.has("regions") {
        let all = group.group("regions")?;
        for member in all.subgroups()? {
            let g = all.member(&member)?;
            regions.push(read_region(&g, rank, &member.name)?);
        }
    }
    Ok((attrs, regions))
}

/// Rows of a `rows x nthreads` dataset. An empty dataset is zero rows,
/// whatever its shape.
fn rows(data: Vec<f64>, shape: &[usize], expected_rows: usize, nthreads: usize, what: &str) -> Result<Vec<Vec<f64>>> {
    if data.is_empty() && (expected_rows == 0 || nthreads == 0) {
        return Ok(vec![Vec::new(); expected_rows]);
    }
    if Some(data.len()) != expected_rows.checked_mul(nthreads) || (shape.len() == 2 && shape[0] != expected_rows) {
        return Err(Error::new(format!(
            "{what} is damaged: shape {shape:?} does not match {expected_rows} names x {nthreads} threads"
        )));
    }
    Ok(data.chunks(nthreads.max(1)).map(<[f64]>::to_vec).collect())
}

fn read_region(g: &Group, rank: u32, member: &str) -> Result<LikwidRegion> {
    let where_ = g.path();
    let times = g.read_f64("times")?;
    let nthreads = times.len();
    let cpus = g.read_i64("cpus")?;
    let call_counts = g.read_i64("call_counts")?;
    if cpus.len() != nthreads || call_counts.len() != nthreads {
        return Err(Error::new(format!(
            "{where_} is damaged: {nthreads} times, {} cpus, {} call_counts",
            cpus.len(),
            call_counts.len()
        )));
    }
    let event_names = g.attr_strings("event_names").unwrap_or_default();
    let counter_names = g.attr_strings("counter_names").unwrap_or_default();
    let metric_names = g.attr_strings("metric_names").unwrap_or_default();
    let (events, shape) = g.read_f64_shaped("events")?;
    let events = rows(events, &shape, event_names.len(), nthreads, &format!("{where_}/events"))?;
    let (metrics, shape) = g.read_f64_shaped("metrics")?;
    let metrics = rows(metrics, &shape, metric_names.len(), nthreads, &format!("{where_}/metrics"))?;
    Ok(LikwidRegion {
        rank,
        tag: g.attr_string("tag").unwrap_or_else(|| member.replace('|', "/")),
        group_id: g.attr_i64("group_id").unwrap_or(-1),
        group_name: g.attr_string("group_name").unwrap_or_default(),
        source: g.attr_string("source").unwrap_or_default(),
        cpus,
        times,
        call_counts,
        event_names,
        counter_names,
        metric_names,
        events,
        metrics,
    })
}
