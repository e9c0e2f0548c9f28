//! The plain data every stage passes on: a process's profile (`RankProfile`: its `RankInfo`,
//! its regions' calls and statistics, its counter and LIKWID results), the calls themselves,
//! attribute values and the facts of a run. The recorder and the collecting code produce it,
//! the encoder sends it between ranks, the layout writers store it.
//!
//! This module imports nothing of the crate: every stage depends on it, never on another
//! stage's internals. The things in it that are not plain data are how a region's calls are
//! handed out slab by slab (`slabs.rs`): calls still packed as the threads recorded them come
//! as a `PackedCalls`, which the collecting code (`profile.rs`) implements; and how the helper
//! threads that do so are started (`workers.rs`).

pub mod callpath;
pub mod counters;
pub mod likwid;
pub mod mpi;
pub mod pages;
pub mod samples;
mod slabs;
pub mod stats;
pub mod workers;

pub use callpath::{CallPaths, PathNode, PathTotals, PathTree};
pub use counters::{AnnotatedRegion, FlopsFormula, PerfRegion, RankCounters};
pub use likwid::{LikwidRun, RegionResult};
pub use mpi::MpiProfile;
pub use pages::PageVec;
pub use samples::SampleProfile;
pub use slabs::{Buffers, PackedCalls, SLAB, Slab, SlabPlace, SlabSource};
pub use workers::{forbid_helper_threads, helper_threads_allowed};
pub use stats::{HIST_BUCKETS, Stats, bucket, bucket_floor};

/// An HDF5 attribute value as we write it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum AttrValue {
    Str(String),
    Int(i64),
    StrList(Vec<String>),
    IntList(Vec<i64>),
}

/// Facts gathered at setup that stay fixed for the run.
#[derive(Debug, Clone)]
pub struct RunFacts {
    /// UTC ISO 8601 time of `sp_setup`.
    pub timestamp: String,
    pub omp_num_threads: i64,
}

/// Where a region is defined in the program's source: the first place that registered it
/// with a location. `line` 0 means the line is not known.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct SourceLocation {
    pub file: String,
    pub line: i64,
}

impl std::fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line > 0 { write!(f, "{}:{}", self.file, self.line) } else { f.write_str(&self.file) }
    }
}

/// A call open on a thread's stack (`recorder.rs`).
#[derive(Debug, Clone, Copy)]
pub struct OpenCall {
    pub id: u32,
    /// Clock ticks (`clock::now`), converted to ns at collect time.
    pub start: i64,
    /// Time spent in the recorded calls directly inside this one (for its exclusive time).
    pub child: i64,
    /// Its node in the thread's call-path tree (statistics-only layout): `UNRESOLVED` until
    /// needed, `FOLDED` set when recursion folded it into an ancestor's node.
    pub node: u32,
}

/// One completed call: clock ticks as recorded (`calllog.rs`), nanoseconds once collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    pub start: i64,
    pub end: i64,
}

/// The calls of one region in one process: still packed per thread as recorded (finalize
/// decodes and merges them region by region, slab by slab, while writing), or already as
/// columns sorted by start time (received from another rank).
#[derive(Debug)]
pub enum Calls {
    /// Per recording thread as recorded, in the clock's units: converted to nanoseconds
    /// while the calls are decoded (`PackedCalls`, the collecting code's logs and timebase).
    Packed(Box<dyn PackedCalls>),
    Columns(Columns),
}

impl Default for Calls {
    fn default() -> Calls {
        Calls::Columns(Columns::default())
    }
}

/// Calls as columns, sorted by start time. Times in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Columns {
    pub starts: Vec<i64>,
    pub ends: Vec<i64>,
    /// Index of the recording thread (0 = first thread that recorded).
    pub thread_ids: Vec<i64>,
}

/// Everything one process recorded of one region.
#[derive(Debug, Default)]
pub struct RegionData {
    pub name: String,
    pub calls: Calls,
    /// Statistics of the completed calls per recording thread (thread id, stats), in
    /// nanoseconds. In the aggregate layout they are the whole record.
    pub stats: Vec<(i64, Stats)>,
    /// Calls still open when the profile was finalized.
    pub open_calls: u64,
    /// Calls closed unrecorded because an enclosing region was stopped first.
    pub dropped_calls: u64,
    /// Where the region is defined, when it was registered with a location.
    pub source: Option<SourceLocation>,
    /// An instrumented function that stopped being recorded: called more often, at less time
    /// per call, than the throttling allows (its calls up to then are kept).
    pub throttled: bool,
}

impl RegionData {
    /// A region given as columns (tests, received ranks); statistics computed from them.
    pub fn from_columns(name: &str, starts: Vec<i64>, ends: Vec<i64>, thread_ids: Vec<i64>) -> RegionData {
        let mut by_thread: std::collections::BTreeMap<i64, Stats> = Default::default();
        for ((s, e), t) in starts.iter().zip(&ends).zip(&thread_ids) {
            let d = e - s;
            let one = Stats { count: 1, total: d, min: d, max: d, exclusive: d, hist: one_hot(d) };
            by_thread.entry(*t).or_default().merge(&one);
        }
        RegionData { name: name.into(), calls: Calls::Columns(Columns { starts, ends, thread_ids }), stats: by_thread.into_iter().collect(), ..Default::default() }
    }

    /// Number of completed calls kept (0 in the aggregate layout).
    pub fn calls(&self) -> usize {
        match &self.calls {
            Calls::Packed(packed) => packed.calls(),
            Calls::Columns(c) => c.starts.len(),
        }
    }

    /// Statistics pooled over threads (nanoseconds).
    pub fn pooled(&self) -> Stats {
        let mut all = Stats::default();
        self.stats.iter().for_each(|(_, s)| all.merge(s));
        all
    }
}

fn one_hot(d: i64) -> Vec<u64> {
    let mut h = vec![0; HIST_BUCKETS];
    h[bucket(d)] = 1;
    h
}

/// Attributes of `rank<N>/`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RankInfo {
    pub hostname: String,
    pub pid: i64,
    /// CPU affinity of the process at setup.
    pub cpus: Vec<i64>,
    /// Linux thread id of each recording thread, indexed by `thread_ids`.
    pub thread_os_ids: Vec<i64>,
    /// Anything else that differs between ranks (clock offset, ...).
    pub extra: Vec<(String, AttrValue)>,
}

#[derive(Debug, Default)]
pub struct RankProfile {
    pub info: RankInfo,
    pub regions: Vec<RegionData>,
    pub likwid: LikwidRun,
    pub counters: RankCounters,
    /// The program's MPI calls, when they were recorded (`rank<N>/mpi/`).
    pub mpi: Option<MpiProfile>,
    /// The sampler's samples, when sampling ran (`rank<N>/sampling/`, `rank<N>/line_profile/`).
    pub samples: Option<SampleProfile>,
    /// The regions' call paths (`rank<N>/call_paths/`), when they were built.
    pub call_paths: Option<CallPaths>,
}

impl RankProfile {
    pub fn num_threads(&self) -> usize {
        self.info.thread_os_ids.len()
    }

    /// Free what was recorded, once it is written. A large profile is freed on a short-lived
    /// thread of its own: giving tens of MiB of pages back to the kernel takes milliseconds
    /// (8 ms for the 80 MB of 10 M calls on the benchmark machine) that the caller of
    /// `sp_finalize` need not wait for. Nothing else is done there, and a failed spawn frees
    /// inline.
    pub fn release(self) {
        const IN_BACKGROUND: usize = 16 << 20;
        let heap: usize = self
            .regions
            .iter()
            .map(|r| match &r.calls {
                Calls::Packed(packed) => packed.heap_bytes(),
                Calls::Columns(c) => 8 * (c.starts.capacity() + c.ends.capacity() + c.thread_ids.capacity()),
            })
            .sum();
        // The buffers the writers kept for one another's regions go with it.
        let pooled = pages::take_pooled();
        if heap >= IN_BACKGROUND && helper_threads_allowed() {
            // On error the closure, and the profile in it, is dropped right here.
            let _ = std::thread::Builder::new().name("sp-release".into()).spawn(move || drop((self, pooled)));
        }
    }
}
