//! After `likwid_markerClose`: get the richest result that survives, in this order
//! 1. the helper's full perfmon read-back (`full_api`),
//! 2. the marker file parsed here, named and evaluated from the group files (`marker_file`),
//! 3. the snapshots taken before close (`marker_api`).
//!
//! The marker file itself is only read: likwid-perfctr reads and deletes it after we exit.

use super::env::MarkerEnv;
use super::helper_spawn;
use super::marker_file::{self, Record};
use super::markers::Snapshot;
use super::naming::{MetricInputs, SetInfo, add_metrics, region_from_records};
use crate::model::likwid::{RegionResult, source};
use super::tags::TagTable;
use crate::warn;

pub struct Inputs<'a> {
    pub env: &'a MarkerEnv,
    /// LIKWID wrote the marker file in this run (exists, and is not a leftover).
    pub marker_written: bool,
    pub sets: &'a [Option<SetInfo>],
    pub metric_inputs: MetricInputs,
    pub snapshots: Vec<Snapshot>,
    pub tags: &'a TagTable,
}

/// The real region name of a LIKWID tag (a tag we did not create is its own name).
fn real_name(tags: &TagTable, tag: &str) -> String {
    tags.name_of_tag(tag).unwrap_or_else(|| tag.to_string())
}

fn set_info(sets: &[Option<SetInfo>], gid: i64) -> Option<&SetInfo> {
    usize::try_from(gid).ok().and_then(|g| sets.get(g)).and_then(Option::as_ref)
}

fn warn_metric_errors(errors: &[String]) {
    for e in errors {
        warn::once(&format!("likwid-metric:{e}"), &format!("LIKWID {e}: values set to NaN"));
    }
}

/// Counters of the marker file, parsed by us.
pub fn from_marker_file(inp: &Inputs) -> Result<Vec<RegionResult>, String> {
    let text = std::fs::read_to_string(&inp.env.filepath).map_err(|e| format!("{}: {e}", inp.env.filepath.display()))?;
    let file = marker_file::parse(&text).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for r in file.regions.iter().filter(|r| !r.records.is_empty()) {
        let name = real_name(inp.tags, &r.tag);
        let (res, errs) = region_from_records(&name, r.gid, &r.records, set_info(inp.sets, r.gid), &inp.metric_inputs, source::MARKER_FILE);
        warn_metric_errors(&errs);
        out.push(res);
    }
    Ok(out)
}

/// The snapshots of the setup thread's CPU (active group: 0, since we never switch).
pub fn from_snapshots(inp: &Inputs) -> Vec<RegionResult> {
    inp.snapshots
        .iter()
        .map(|s| {
            let name = inp.tags.name(s.id).unwrap_or_default().to_string();
            let rec = Record { cpu: s.cpu, count: s.count, time: s.time, values: s.values.clone() };
            let (res, errs) = region_from_records(&name, 0, &[rec], set_info(inp.sets, 0), &inp.metric_inputs, source::MARKER_API);
            warn_metric_errors(&errs);
            res
        })
        .collect()
}

fn from_helper(inp: &Inputs, helper: &std::path::Path) -> Result<Vec<RegionResult>, String> {
    let e = inp.env;
    let (doc, _ended) = helper_spawn::run(helper, e.mode, &e.threads, &e.events, &e.filepath)?;
    Ok(doc
        .regions
        .into_iter()
        .filter(|r| !r.cpus.is_empty())
        .map(|mut r| {
            r.tag = real_name(inp.tags, &r.tag);
            enrich_custom(&mut r, inp);
            r
        })
        .collect())
}

/// LIKWID calls a custom event set "Custom" and computes no metrics for it, but
/// likwid-mpirun passes `-g GROUP` on as exactly such a string. When the set equals a
/// group's EVENTSET, name the group and add its metrics (evaluated by us).
fn enrich_custom(r: &mut RegionResult, inp: &Inputs) {
    if !r.metric_names.is_empty() {
        return;
    }
    let Some(info) = set_info(inp.sets, r.group_id).filter(|i| !i.custom && !i.metrics.is_empty()) else { return };
    if !r.counter_names.iter().map(String::as_str).eq(info.events.iter().map(|e| e.0.as_str())) {
        return;
    }
    r.group_name = info.group_name.clone();
    warn_metric_errors(&add_metrics(r, info, &inp.metric_inputs));
}

/// Fallback after the helper could not deliver: marker file, else snapshots.
/// Returns the regions and a phrase naming what was used.
fn fallback(inp: &Inputs) -> (Vec<RegionResult>, String) {
    match from_marker_file(inp) {
        Ok(r) => (r, format!("counters taken from the marker file (source={})", source::MARKER_FILE)),
        Err(e) => {
            (from_snapshots(inp), format!("marker file unusable ({e}); using this thread's snapshots (source={})", source::MARKER_API))
        }
    }
}

pub fn collect(inp: &Inputs) -> Vec<RegionResult> {
    let mut regions = collect_any(inp);
    let lost = drop_error_values(&mut regions);
    if !lost.is_empty() {
        warn::once(
            "likwid-einval",
            &format!(
                "LIKWID wrote -22 (-EINVAL) instead of the counter values of {}; stored as NaN (LIKWID 5.5 does this for a region that not every measured CPU's thread has run)",
                lost.join(", ")
            ),
        );
    }
    regions
}

/// LIKWID's getters answer -EINVAL (-22.0) for a thread slot they consider out of range,
/// and 5.5's marker writer prints that as the counter values. A record whose every value
/// is exactly -22 is such an error, not a measurement (counter deltas are never negative):
/// its events and metrics become NaN. Returns `region on CPU n` for each.
pub fn drop_error_values(regions: &mut [RegionResult]) -> Vec<String> {
    const EINVAL: f64 = -22.0;
    let mut lost = Vec::new();
    for r in regions.iter_mut() {
        for t in 0..r.cpus.len() {
            let column_is_einval = !r.events.is_empty() && r.events.iter().all(|row| row.get(t) == Some(&EINVAL));
            if column_is_einval {
                for row in r.events.iter_mut().chain(r.metrics.iter_mut()) {
                    row[t] = f64::NAN;
                }
                lost.push(format!("{} on CPU {}", r.tag, r.cpus[t]));
            }
        }
    }
    lost
}

fn collect_any(inp: &Inputs) -> Vec<RegionResult> {
    if !inp.marker_written {
        let regions = from_snapshots(inp);
        warn::once(
            "likwid-no-marker-file",
            &format!(
                "LIKWID wrote no marker file ({}); using this thread's snapshots (source={})",
                inp.env.filepath.display(),
                source::MARKER_API
            ),
        );
        return regions;
    }
    match helper_spawn::locate() {
        Ok(None) => fallback(inp).0,
        Ok(Some(helper)) => match from_helper(inp, &helper) {
            Ok(r) => r,
            Err(e) => {
                let (regions, used) = fallback(inp);
                warn::once("likwid-helper", &format!("LIKWID read-back helper failed: {e}; {used}"));
                regions
            }
        },
        Err(e) => {
            let (regions, used) = fallback(inp);
            warn::once("likwid-helper", &format!("LIKWID read-back helper unavailable: {e}; {used}"));
            regions
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn einval_columns_become_nan() {
        let mut r = vec![RegionResult {
            tag: "a".into(),
            event_names: vec!["E0".into(), "E1".into()],
            metric_names: vec!["M".into()],
            cpus: vec![0, 1],
            times: vec![1.0, 1.0],
            call_counts: vec![1, 1],
            events: vec![vec![-22.0, -22.0], vec![5.0, -22.0]],
            metrics: vec![vec![2.0, 3.0]],
            ..Default::default()
        }];
        assert_eq!(drop_error_values(&mut r), vec!["a on CPU 1".to_string()]);
        assert_eq!(r[0].events[0][0], -22.0);
        assert_eq!(r[0].events[1][0], 5.0);
        assert!(r[0].events[0][1].is_nan() && r[0].events[1][1].is_nan() && r[0].metrics[0][1].is_nan());
        assert_eq!(r[0].metrics[0][0], 2.0);
    }
}
