//! Read `rank<N>/likwid/`: the LIKWID environment of the run (attributes)
//! and one group per region tag with per-hardware-thread values.

use hdf5::Group;

use crate::error::{self, Error, Result};
use crate::h5util;
use crate::model::{Attrs, LikwidRegion};

pub const GROUP: &str = "likwid";

fn h5err(what: String) -> impl FnOnce(hdf5::Error) -> Error {
    move |e| Error::new(format!("cannot read {what}: {}", error::h5(&e)))
}

/// The attributes of `rank<N>/likwid` and its regions.
pub fn read_rank(rank_group: &Group, rank: u32) -> Result<(Attrs, Vec<LikwidRegion>)> {
    let where_ = format!("rank{rank}/likwid");
    let group = rank_group.group(GROUP).map_err(h5err(where_.clone()))?;
    let attrs = h5util::read_attrs(&group).map_err(h5err(where_.clone()))?;
    let mut regions = Vec::new();
    if h5util::has(&group, "regions") {
        let all = group.group("regions").map_err(h5err(format!("{where_}/regions")))?;
        for member in h5util::subgroups(&all).map_err(h5err(format!("{where_}/regions")))? {
            let g = all.group(&member).map_err(h5err(format!("{where_}/regions/{member}")))?;
            regions.push(read_region(&g, rank, &format!("{where_}/regions/{member}"), &member)?);
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
    if data.len() != expected_rows * nthreads || (shape.len() == 2 && shape[0] != expected_rows) {
        return Err(Error::new(format!(
            "{what} is damaged: shape {shape:?} does not match {expected_rows} names x {nthreads} threads"
        )));
    }
    Ok(data.chunks(nthreads.max(1)).map(<[f64]>::to_vec).collect())
}

fn read_region(g: &Group, rank: u32, where_: &str, member: &str) -> Result<LikwidRegion> {
    let times = h5util::read_f64(g, "times")?;
    let nthreads = times.len();
    let cpus = h5util::read_i64(g, "cpus")?;
    let call_counts = h5util::read_i64(g, "call_counts")?;
    if cpus.len() != nthreads || call_counts.len() != nthreads {
        return Err(Error::new(format!(
            "{where_} is damaged: {nthreads} times, {} cpus, {} call_counts",
            cpus.len(),
            call_counts.len()
        )));
    }
    let event_names = h5util::attr_strings(g, "event_names").unwrap_or_default();
    let counter_names = h5util::attr_strings(g, "counter_names").unwrap_or_default();
    let metric_names = h5util::attr_strings(g, "metric_names").unwrap_or_default();
    let (events, shape) = h5util::read_f64_shaped(g, "events")?;
    let events = rows(events, &shape, event_names.len(), nthreads, &format!("{where_}/events"))?;
    let (metrics, shape) = h5util::read_f64_shaped(g, "metrics")?;
    let metrics = rows(metrics, &shape, metric_names.len(), nthreads, &format!("{where_}/metrics"))?;
    Ok(LikwidRegion {
        rank,
        tag: h5util::attr_string(g, "tag").unwrap_or_else(|| member.replace('|', "/")),
        group_id: h5util::attr_i64(g, "group_id").unwrap_or(-1),
        group_name: h5util::attr_string(g, "group_name").unwrap_or_default(),
        source: h5util::attr_string(g, "source").unwrap_or_default(),
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
