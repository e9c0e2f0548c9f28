//! What the counter sources (perf events, analytic annotations) produced on one rank: plain
//! per-region results, written by the layout writer beside the timings.

use serde::{Deserialize, Serialize};

/// FLOPs from counted events: sum of weight x count over the named events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct FlopsFormula {
    /// `flops`, `flops_dp` or `flops_sp`.
    pub set: String,
    pub terms: Vec<(String, f64)>,
}

/// Perf-event totals of one region on one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PerfRegion {
    pub name: String,
    /// Calls whose counts were read (start and stop).
    pub calls: u64,
    /// Scaled counts (value x enabled / running), summed over calls and threads.
    pub totals: Vec<f64>,
    /// Time running / time enabled of the group, over all calls and threads (1 = never multiplexed).
    pub running_fraction: f64,
    pub thread_ids: Vec<i64>,
    /// Per thread (rows, as `thread_ids`): scaled counts per event.
    pub thread_values: Vec<Vec<f64>>,
    pub thread_running_fraction: Vec<f64>,
    pub thread_calls: Vec<u64>,
    /// FLOPs computed from the counts, per FLOP set asked for: (set, FLOPs).
    pub counted_flops: Vec<(String, f64)>,
}

/// Analytic FLOPs and bytes of one region on one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AnnotatedRegion {
    pub name: String,
    pub flops: Option<f64>,
    pub bytes: Option<f64>,
    pub thread_ids: Vec<i64>,
    pub thread_flops: Vec<f64>,
    pub thread_bytes: Vec<f64>,
}

/// Everything the counter sources (besides LIKWID) produced on one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankCounters {
    pub event_names: Vec<String>,
    pub formulas: Vec<FlopsFormula>,
    pub perf: Vec<PerfRegion>,
    pub annotated: Vec<AnnotatedRegion>,
}
