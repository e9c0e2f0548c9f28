//! What sptool knows about a profile once it has been read: plain data,
//! independent of the schema the file was written in.

use std::fmt;
use std::path::PathBuf;

use crate::stats::Stats;

/// An HDF5 attribute value, decoded.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    Str(String),
    IntArray(Vec<i64>),
    UIntArray(Vec<u64>),
    FloatArray(Vec<f64>),
    BoolArray(Vec<bool>),
    StrArray(Vec<String>),
    /// A type sptool does not decode; the text names the type.
    Other(String),
}

impl AttrValue {
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Self::Int(v) => Some(*v),
            Self::UInt(v) => i64::try_from(*v).ok(),
            Self::IntArray(v) if v.len() == 1 => Some(v[0]),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            Self::StrArray(v) if v.len() == 1 => Some(&v[0]),
            _ => None,
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        let float = |v: f64| serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number);
        match self {
            Self::Int(v) => Value::from(*v),
            Self::UInt(v) => Value::from(*v),
            Self::Float(v) => float(*v),
            Self::Bool(v) => Value::from(*v),
            Self::Str(v) | Self::Other(v) => Value::from(v.as_str()),
            Self::IntArray(v) => Value::from(v.clone()),
            Self::UIntArray(v) => Value::from(v.clone()),
            Self::FloatArray(v) => Value::Array(v.iter().map(|x| float(*x)).collect()),
            Self::BoolArray(v) => Value::from(v.clone()),
            Self::StrArray(v) => Value::from(v.clone()),
        }
    }
}

fn join<T: fmt::Display>(f: &mut fmt::Formatter<'_>, values: &[T]) -> fmt::Result {
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{v}")?;
    }
    Ok(())
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Int(v) => write!(f, "{v}"),
            Self::UInt(v) => write!(f, "{v}"),
            Self::Float(v) => write!(f, "{v}"),
            Self::Bool(v) => write!(f, "{v}"),
            Self::Str(v) => f.write_str(v),
            Self::Other(v) => write!(f, "<{v}>"),
            Self::IntArray(v) => join(f, v),
            Self::UIntArray(v) => join(f, v),
            Self::FloatArray(v) => join(f, v),
            Self::BoolArray(v) => join(f, v),
            Self::StrArray(v) => join(f, v),
        }
    }
}

pub type Attrs = Vec<(String, AttrValue)>;

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
    /// Exclusive times and duration histograms, where the file has them (empty otherwise).
    pub extras: Vec<RegionExtra>,
}

impl Profile {
    pub fn rank_numbers(&self) -> Vec<u32> {
        self.ranks.iter().map(|r| r.rank).collect()
    }
}
