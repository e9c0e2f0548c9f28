//! What sptool knows about a profile once it has been read: plain data,
//! independent of the schema the file was written in.

use std::fmt;
use std::path::PathBuf;

use crate::stats::Stats;

pub use scope_profiler::h5read::{AttrValue, Attrs};


/// How the regions are stored in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Schema 1: `rank<N>/regions/<name>/{start_times,end_times}`.
    PerRank,
    /// Schema 2: shared `events/{start_times,end_times}` columns.
    Columnar,
    /// Schema 3: shared `events/{start_deltas,durations}` columns.
    ColumnarDeltas,
    /// Python's aggregation mode: counts, totals, minima and maxima only.
    Aggregate,
}

impl Layout {
    pub fn describe(self) -> &'static str {
        match self {
            Self::PerRank => "per-rank region groups",
            Self::Columnar => "columnar events",
            Self::ColumnarDeltas => "columnar delta-encoded events",
            Self::Aggregate => "aggregates only",
        }
    }
}

/// One rank's attributes (`rank<N>/` group attributes; empty in files that
/// have no rank group).
#[derive(Clone, Debug)]
pub struct RankInfo {
    pub rank: u32,
    pub attrs: Attrs,
    /// The `rank<N>/likwid` group's attributes (LIKWID_* variables, ...).
    pub likwid_attrs: Attrs,
}

/// One region's calls on one rank.
#[derive(Clone, Debug)]
pub struct RegionRank {
    pub rank: u32,
    pub name: String,
    pub stats: Stats,
    /// Calls still open at finalize (not counted in `stats`).
    pub open_calls: i64,
}

/// One LIKWID region of one rank: values per hardware thread.
#[derive(Clone, Debug)]
pub struct LikwidRegion {
    pub rank: u32,
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
    /// `events[e][t]`, `nevents x nthreads`.
    pub events: Vec<Vec<f64>>,
    /// `metrics[m][t]`, `nmetrics x nthreads`.
    pub metrics: Vec<Vec<f64>>,
}

impl LikwidRegion {
    pub fn nthreads(&self) -> usize {
        self.times.len()
    }

    /// Largest runtime over the hardware threads (the region's cost).
    pub fn runtime(&self) -> f64 {
        self.times.iter().copied().filter(|t| t.is_finite()).fold(0.0, f64::max)
    }

    /// Unique event labels: a name that occurs more than once (MEM_DP
    /// programs CAS_COUNT_RD once per memory channel) gets its counter
    /// appended, `CAS_COUNT_RD:MBOX0C0`, or `#index` if no counter is known.
    pub fn event_labels(&self) -> Vec<String> {
        self.event_names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let repeated = self.event_names.iter().filter(|n| *n == name).count() > 1;
                match (repeated, self.counter_names.get(i)) {
                    (false, _) => name.clone(),
                    (true, Some(counter)) if !counter.is_empty() => format!("{name}:{counter}"),
                    (true, _) => format!("{name}#{i}"),
                }
            })
            .collect()
    }
}

/// Where a region is defined in the program's source.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceLocation {
    pub file: String,
    pub line: Option<i64>,
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}", self.file),
            None => f.write_str(&self.file),
        }
    }
}

/// perf_event totals of one region on one rank (`rank<N>/perf_events/<region>`).
#[derive(Clone, Debug)]
pub struct PerfRegion {
    pub rank: u32,
    pub name: String,
    pub calls: i64,
    /// (event, total over calls and threads).
    pub events: Vec<(String, f64)>,
    /// Smallest time-running / time-enabled fraction (1 = never multiplexed), if recorded.
    pub running_fraction: Option<f64>,
    /// FLOPs computed from FLOP events: (set, FLOPs).
    pub counted_flops: Vec<(String, f64)>,
}

impl PerfRegion {
    /// FLOPs from the counters: the `flops` set, else DP + SP.
    pub fn counted(&self) -> Option<f64> {
        let get = |k: &str| self.counted_flops.iter().find(|(s, _)| s == k).map(|(_, v)| *v);
        get("flops").or_else(|| match (get("flops_dp"), get("flops_sp")) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        })
    }
}

/// Analytic work of one region on one rank (`rank<N>/annotations/<region>`).
#[derive(Clone, Debug)]
pub struct Annotation {
    pub rank: u32,
    pub name: String,
    pub flops: Option<f64>,
    pub bytes: Option<f64>,
}

/// What scope_profiler's schema-3 layouts store beside the Python package's columns for one
/// (rank, region): the exclusive time and a log2 histogram of the call durations (bucket 0:
/// nothing; bucket 1: durations below 2 ns; bucket b >= 2: durations in [2^(b-1), 2^b) ns).
#[derive(Clone, Debug, PartialEq)]
pub struct RegionExtra {
    pub rank: u32,
    pub name: String,
    pub exclusive_ns: Option<i64>,
    pub histogram: Vec<u64>,
}

/// A whole profile file.
#[derive(Clone, Debug)]
pub struct Profile {
    pub path: PathBuf,
    pub file_size: u64,
    pub schema: i64,
    pub layout: Layout,
    pub metadata: Attrs,
    /// Every rank seen in the file, sorted.
    pub ranks: Vec<RankInfo>,
    /// Per (rank, region), in file order.
    pub regions: Vec<RegionRank>,
    pub likwid: Vec<LikwidRegion>,
    /// Where regions are defined, by region name (only those the file gives a location).
    pub sources: std::collections::BTreeMap<String, SourceLocation>,
    pub perf: Vec<PerfRegion>,
    pub annotations: Vec<Annotation>,
    /// Exclusive times and duration histograms, where the file has them (empty otherwise).
    pub extras: Vec<RegionExtra>,
}

impl Profile {
    pub fn rank_numbers(&self) -> Vec<u32> {
        self.ranks.iter().map(|r| r.rank).collect()
    }
}

/// A region, pooled over ranks (`None`) or on one rank.
pub type RegionKey = (String, Option<u32>);

/// Calls and times of every region that `keep` accepts, pooled over the ranks or one entry per
/// (region, rank): the one place that turns a profile's (rank, region) records into per-region
/// totals, so whatever a reader stores in [`RegionRank::stats`] (single calls or only counts
/// and totals) is compared the same way. Regions without a completed call are left out.
pub fn region_totals(profile: &Profile, by_rank: bool, keep: impl Fn(&str, u32) -> bool) -> std::collections::BTreeMap<RegionKey, Stats> {
    let mut out: std::collections::BTreeMap<RegionKey, Stats> = std::collections::BTreeMap::new();
    for r in profile.regions.iter().filter(|r| r.stats.count > 0 && keep(&r.name, r.rank)) {
        out.entry((r.name.clone(), by_rank.then_some(r.rank))).or_default().merge(&r.stats);
    }
    out
}
