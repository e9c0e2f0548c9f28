//! Turning raw per-CPU records (from the marker file or a marker-API snapshot) into a
//! `RegionResult`: event and counter names from the event set, metrics evaluated from
//! the group file's formulas. This is what lets a crashed helper still yield named
//! events and derived metrics.

use super::env::EventSet;
use super::formula::{self, FormulaError};
use super::marker_file::Record;
use super::perfgroup::{self, PerfGroup};
use crate::model::RegionResult;
use std::path::PathBuf;

/// What one event set (group id) of `LIKWID_EVENTS` programs.
#[derive(Debug, Clone, PartialEq)]
pub struct SetInfo {
    /// Group name, or `Custom` like `perfmon_getGroupName`.
    pub group_name: String,
    /// `(counter, event)` in slot order.
    pub events: Vec<(String, String)>,
    /// `(name, formula)`; empty for custom sets.
    pub metrics: Vec<(String, String)>,
    pub custom: bool,
}

/// Fixed counters `perfgroup_customGroup` appends to custom sets on Intel (spec 4.3).
const INTEL_FIXED: [(&str, &str); 4] =
    [("FIXC0", "INSTR_RETIRED_ANY"), ("FIXC1", "CPU_CLK_UNHALTED_CORE"), ("FIXC2", "CPU_CLK_UNHALTED_REF"), ("FIXC3", "TOPDOWN_SLOTS")];

/// Describe every event set; a group whose file cannot be read gets no names (`None`).
/// A custom set that programs exactly a group's EVENTSET (likwid-mpirun passes `-g GROUP`
/// on as such a string) is described as that group, so its metrics can be evaluated.
pub fn describe_sets(sets: &[EventSet], group_dirs: &[PathBuf], arch: &str) -> Vec<Option<SetInfo>> {
    let mut all_groups: Option<Vec<PerfGroup>> = None;
    sets.iter()
        .map(|s| match s {
            EventSet::Group(name) => perfgroup::load(group_dirs, arch, name).map(|g: PerfGroup| SetInfo {
                group_name: name.clone(),
                events: g.events,
                metrics: g.metrics,
                custom: false,
            }),
            EventSet::Custom(entries) => {
                let groups = all_groups.get_or_insert_with(|| perfgroup::load_all(group_dirs, arch));
                Some(match groups.iter().find(|g| &g.events == entries) {
                    Some(g) => SetInfo { group_name: g.name.clone(), events: g.events.clone(), metrics: g.metrics.clone(), custom: false },
                    None => SetInfo { group_name: "Custom".into(), events: entries.clone(), metrics: Vec::new(), custom: true },
                })
            }
        })
        .collect()
}

/// Inputs of a metric formula other than the counters (spec 4.4).
#[derive(Debug, Clone, Copy)]
pub struct MetricInputs {
    /// TSC frequency in Hz (`timer_getCycleClock`); `inverseClock` = 1 / this.
    pub clock_hz: f64,
    pub num_sockets: Option<f64>,
    pub num_numadomains: Option<f64>,
    pub is_intel: bool,
}

/// `(counter, event)` names for `n` slots, or `None` when they cannot be matched.
fn slot_names(info: &SetInfo, n: usize, is_intel: bool) -> Option<Vec<(String, String)>> {
    if info.events.len() == n {
        return Some(info.events.clone());
    }
    if info.custom && is_intel && n > info.events.len() {
        let mut ev = info.events.clone();
        for (c, e) in INTEL_FIXED {
            if ev.len() < n && !ev.iter().any(|(have, _)| have.split(':').next() == Some(c)) {
                ev.push((c.to_string(), e.to_string()));
            }
        }
        if ev.len() == n {
            return Some(ev);
        }
    }
    None
}

/// Build a region from records (sorted by CPU). Errors of individual metrics are
/// returned as text (the metric keeps NaN values); they never fail the region.
pub fn region_from_records(
    tag: &str,
    gid: i64,
    records: &[Record],
    info: Option<&SetInfo>,
    inputs: &MetricInputs,
    source: &str,
) -> (RegionResult, Vec<String>) {
    let n = records.iter().map(|r| r.values.len()).max().unwrap_or(0);
    let value = |r: &Record, e: usize| r.values.get(e).copied().unwrap_or(f64::NAN);
    let events: Vec<Vec<f64>> = (0..n).map(|e| records.iter().map(|r| value(r, e)).collect()).collect();
    let mut res = RegionResult {
        tag: tag.to_string(),
        group_id: gid,
        group_name: info.map(|i| i.group_name.clone()).unwrap_or_default(),
        source: source.to_string(),
        cpus: records.iter().map(|r| r.cpu).collect(),
        times: records.iter().map(|r| r.time).collect(),
        call_counts: records.iter().map(|r| r.count.min(i64::MAX as u64) as i64).collect(),
        events,
        ..Default::default()
    };
    let mut errors = Vec::new();
    let names = info.and_then(|i| slot_names(i, n, inputs.is_intel));
    match (&names, info) {
        (Some(names), Some(info)) => {
            res.counter_names = names.iter().map(|(c, _)| c.clone()).collect();
            res.event_names = names.iter().map(|(_, e)| e.clone()).collect();
            errors = add_metrics(&mut res, info, inputs);
        }
        _ => {
            // Positional names: the event set is unknown or its size does not match.
            res.event_names = (0..n).map(|k| format!("EVENT{k}")).collect();
            if let Some(i) = info {
                errors.push(format!(
                    "group {}: {} events in the records, {} in the event set; events named by position",
                    i.group_name,
                    n,
                    i.events.len()
                ));
            }
        }
    }
    (res, errors)
}

/// Evaluate `info`'s METRICS for every thread of `res` (whose `counter_names` must be
/// set) and append them. Returns one error text per metric that could not be evaluated
/// (its values are NaN).
pub fn add_metrics(res: &mut RegionResult, info: &SetInfo, inputs: &MetricInputs) -> Vec<String> {
    let mut errors = Vec::new();
    for (mname, f) in &info.metrics {
        let mut row = Vec::with_capacity(res.cpus.len());
        let mut err: Option<FormulaError> = None;
        for t in 0..res.cpus.len() {
            let time = res.times[t];
            let lookup = |id: &str| -> Option<f64> {
                if let Some(k) = res.counter_names.iter().position(|c| c == id) {
                    return res.events.get(k).and_then(|row| row.get(t)).map(|&v| formula::likwid_input(v));
                }
                match id {
                    "time" => Some(time),
                    "inverseClock" => (inputs.clock_hz > 0.0).then(|| 1.0 / inputs.clock_hz),
                    "true" => Some(1.0),
                    "false" => Some(0.0),
                    "num_sockets" => inputs.num_sockets,
                    "num_numadomains" => inputs.num_numadomains,
                    _ => None,
                }
            };
            match formula::eval(f, &lookup) {
                Ok(v) => row.push(v),
                Err(e) => {
                    err.get_or_insert(e);
                    row.push(f64::NAN);
                }
            }
        }
        match err {
            // One text for every such metric (warnings are deduplicated by text).
            Some(FormulaError::Unknown(id)) if id == "inverseClock" && (inputs.clock_hz.is_nan() || inputs.clock_hz <= 0.0) => errors.push(format!(
                "reports a TSC frequency of {} Hz, so metrics using inverseClock cannot be computed (LIKWID 5.5 on a VM whose CPUID leaf 0x16 is empty)",
                inputs.clock_hz
            )),
            Some(e) => errors.push(format!("metric {mname:?} of group {}: {e}", info.group_name)),
            None => {}
        }
        res.metric_names.push(mname.clone());
        res.metrics.push(row);
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_tsc_clock_gives_one_error_for_all_inverse_clock_metrics() {
        let g = parse("G", "SHORT x\n\nEVENTSET\nFIXC1 A\nFIXC2 B\n\nMETRICS\nRuntime unhalted [s] FIXC1*inverseClock\nClock [MHz] 1.E-06*(FIXC1/FIXC2)/inverseClock\nRatio FIXC1/FIXC2\n");
        let info = SetInfo {
            group_name: "G".into(),
            custom: false,
            events: g.events.clone(),
            metrics: g.metrics.clone(),
        };
        let mut r = RegionResult {
            counter_names: vec!["FIXC1".into(), "FIXC2".into()],
            event_names: vec!["A".into(), "B".into()],
            cpus: vec![0],
            times: vec![1.0],
            call_counts: vec![1],
            events: vec![vec![4.0], vec![2.0]],
            ..Default::default()
        };
        let errs = add_metrics(&mut r, &info, &inputs(0.0));
        assert_eq!(errs.len(), 2);
        assert_eq!(errs[0], errs[1]);
        assert!(errs[0].contains("TSC frequency of 0 Hz"), "{}", errs[0]);
        assert!(r.metrics[0][0].is_nan() && r.metrics[1][0].is_nan());
        assert_eq!(r.metrics[2][0], 2.0);
    }
    use crate::likwid::perfgroup::parse;

    use crate::likwid::perfgroup::tests::ZEN3_FLOPS_DP as ZEN3_FLOPS_DP_EVENTS_METRICS;

    fn flops_dp() -> SetInfo {
        let g = parse("FLOPS_DP", ZEN3_FLOPS_DP_EVENTS_METRICS);
        SetInfo { group_name: "FLOPS_DP".into(), events: g.events, metrics: g.metrics, custom: false }
    }

    fn inputs(clock_hz: f64) -> MetricInputs {
        MetricInputs { clock_hz, num_sockets: Some(1.0), num_numadomains: Some(1.0), is_intel: false }
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        ((a - b) / b).abs() <= rel
    }

    /// Spec 4.4 [verified]: zen3 FLOPS_DP with FIXC1=2e7, FIXC2=1.8e7, PMC0=1e7, PMC1=2e7,
    /// PMC2=4e6, time=0.01 gives Runtime unhalted 0.00817876 s, Clock 2717.06 MHz, CPI 2,
    /// DP 400 MFLOP/s. The spec rounds the TSC to "2.4455 GHz"; the printed digits
    /// correspond to 2.445357 GHz (2e7/0.00817876), which is what we use here.
    #[test]
    fn zen3_flops_dp_verified_numbers() {
        let rec = Record { cpu: 0, count: 1, time: 0.01, values: vec![2e7, 1.8e7, 1e7, 2e7, 4e6, 0.0] };
        let (r, errs) = region_from_records("r", 0, &[rec], Some(&flops_dp()), &inputs(2.445357e9), "marker_file");
        assert!(errs.is_empty(), "{errs:?}");
        assert!(r.is_consistent());
        assert_eq!(r.counter_names, ["FIXC1", "FIXC2", "PMC0", "PMC1", "PMC2", "PMC3"]);
        assert_eq!(r.event_names[4], "RETIRED_SSE_AVX_FLOPS_ALL");
        let m = |name: &str| r.metrics[r.metric_names.iter().position(|n| n == name).unwrap()][0];
        assert_eq!(m("Runtime (RDTSC) [s]"), 0.01);
        // Compared at the digits the spec prints.
        assert_eq!(format!("{:.5e}", m("Runtime unhalted [s]")), "8.17876e-3");
        assert_eq!(format!("{:.2}", m("Clock [MHz]")), "2717.06");
        assert_eq!(m("CPI"), 2.0);
        assert!(close(m("DP [MFLOP/s]"), 400.0, 1e-12));
        // With the rounded 2.4455 GHz the first two figures move in the 5th digit only.
        let (r2, _) = region_from_records(
            "r",
            0,
            &[Record { cpu: 0, count: 1, time: 0.01, values: vec![2e7, 1.8e7, 1e7, 2e7, 4e6, 0.0] }],
            Some(&flops_dp()),
            &inputs(2.4455e9),
            "marker_file",
        );
        assert!(close(r2.metrics[1][0], 0.00817876, 1e-4));
    }

    #[test]
    fn zero_counters_give_inf_and_nan_like_likwid() {
        let rec = Record { cpu: 1, count: 3, time: 0.5, values: vec![0.0, 0.0, 0.0, 0.0, 0.0, f64::NAN] };
        let (r, errs) = region_from_records("r", 0, &[rec], Some(&flops_dp()), &inputs(2.4e9), "marker_file");
        assert!(errs.is_empty());
        let cpi = r.metrics[3][0];
        assert!(cpi.is_nan(), "0/0 -> NaN, printed '-' by likwid-perfctr");
        assert_eq!(r.metrics[4][0], 0.0);
        assert_eq!(r.call_counts, vec![3]);
        assert!(r.events[5][0].is_nan(), "raw values are kept as they are");
    }

    #[test]
    fn unknown_identifier_is_reported_not_zeroed() {
        let mut info = flops_dp();
        info.metrics.push(("Broken".into(), "PMC9*2".into()));
        let rec = Record { cpu: 0, count: 1, time: 1.0, values: vec![1.0; 6] };
        let (r, errs) = region_from_records("r", 0, &[rec], Some(&info), &inputs(2e9), "marker_file");
        assert_eq!(errs.len(), 1);
        assert!(errs[0].contains("PMC9"), "{errs:?}");
        assert!(r.metrics.last().unwrap()[0].is_nan());
        assert_eq!(r.metric_names.last().unwrap(), "Broken");
    }

    #[test]
    fn mismatched_event_count_gives_positional_names() {
        let rec = Record { cpu: 0, count: 1, time: 1.0, values: vec![1.0; 3] };
        let (r, errs) = region_from_records("r", 0, std::slice::from_ref(&rec), Some(&flops_dp()), &inputs(2e9), "marker_file");
        assert_eq!(r.event_names, ["EVENT0", "EVENT1", "EVENT2"]);
        assert!(r.metric_names.is_empty() && r.counter_names.is_empty());
        assert_eq!(errs.len(), 1);
        assert!(r.is_consistent());
        let (r, errs) = region_from_records("r", 0, &[rec], None, &inputs(2e9), "marker_api");
        assert_eq!(r.event_names.len(), 3);
        assert!(errs.is_empty());
    }

    #[test]
    fn custom_sets_and_intel_fixed_counters() {
        let custom = SetInfo { group_name: "Custom".into(), events: vec![("PMC0".into(), "EV_A".into())], metrics: vec![], custom: true };
        let rec = Record { cpu: 0, count: 1, time: 1.0, values: vec![1.0, 2.0, 3.0, 4.0] };
        let mut inp = inputs(2e9);
        inp.is_intel = true;
        let (r, _) = region_from_records("r", 1, std::slice::from_ref(&rec), Some(&custom), &inp, "marker_file");
        assert_eq!(r.counter_names, ["PMC0", "FIXC0", "FIXC1", "FIXC2"]);
        assert_eq!(r.event_names[3], "CPU_CLK_UNHALTED_REF");
        assert_eq!(r.group_name, "Custom");
        assert!(r.metrics.is_empty());
        // AMD: nothing is appended, so 4 values for 1 event cannot be named.
        let (r, _) = region_from_records("r", 1, &[rec], Some(&custom), &inputs(2e9), "marker_file");
        assert_eq!(r.event_names[0], "EVENT0");
    }

    #[test]
    fn custom_set_equal_to_a_group_is_described_as_that_group() {
        let root = std::env::temp_dir().join(format!("sp_naming_{}", std::process::id()));
        std::fs::create_dir_all(root.join("zen3")).unwrap();
        std::fs::write(root.join("zen3/FLOPS_DP.txt"), ZEN3_FLOPS_DP_EVENTS_METRICS).unwrap();
        let dirs = vec![root.clone()];
        // What likwid-mpirun puts into LIKWID_EVENTS for `-g FLOPS_DP`.
        let mpirun = "ACTUAL_CPU_CLOCK:FIXC1,MAX_CPU_CLOCK:FIXC2,RETIRED_INSTRUCTIONS:PMC0,CPU_CLOCKS_UNHALTED:PMC1,RETIRED_SSE_AVX_FLOPS_ALL:PMC2,MERGE:PMC3";
        let sets = crate::likwid::env::parse_events(&format!("{mpirun}|RETIRED_INSTRUCTIONS:PMC0")).unwrap();
        let d = describe_sets(&sets, &dirs, "zen3");
        let g = d[0].as_ref().unwrap();
        assert_eq!(g.group_name, "FLOPS_DP");
        assert_eq!(g.metrics.len(), 5);
        assert!(!g.custom);
        let c = d[1].as_ref().unwrap();
        assert_eq!(c.group_name, "Custom");
        assert!(c.custom && c.metrics.is_empty());
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn threads_share_the_axis() {
        let a = Record { cpu: 0, count: 2, time: 1.0, values: vec![1.0; 6] };
        let b = Record { cpu: 1, count: 2, time: 2.0, values: vec![2.0; 6] };
        let (r, _) = region_from_records("r", 0, &[a, b], Some(&flops_dp()), &inputs(2e9), "marker_file");
        assert_eq!(r.cpus, vec![0, 1]);
        assert_eq!(r.events[2], vec![1.0, 2.0]);
        assert_eq!(r.metrics[0], vec![1.0, 2.0]);
        assert!(r.is_consistent());
    }
}
