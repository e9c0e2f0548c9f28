//! A rank's MPI calls as plain data (`rank<N>/mpi/`, docs/mpi.md): per routine and
//! communicator the calls, time, bytes and message sizes; the peers; the completions of
//! requests by their origin; the call sites. Built at finalize from the threads' aggregates
//! (`mpi_stats`), sent between ranks by the encoder, stored by `writer::mpi`.

use serde::{Deserialize, Serialize};

/// Buckets of the message-size histograms: bucket 0 counts calls that moved no bytes, bucket
/// b >= 1 calls whose larger of bytes sent and received lies in [2^(b-1), 2^b).
pub const SIZE_BUCKETS: usize = 64;

pub fn size_bucket(bytes: u64) -> usize {
    // 2^63 bytes and more share the last bucket.
    ((64 - bytes.leading_zeros()) as usize).min(SIZE_BUCKETS - 1)
}

/// Calls of one routine on one communicator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallStats {
    pub calls: u64,
    pub time: i64,
    pub min: i64,
    pub max: i64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Calls that returned an MPI error.
    pub failed: u64,
    /// Polls that found nothing (not in `calls`), and their time.
    pub polls_empty: u64,
    pub poll_time: i64,
    /// `SIZE_BUCKETS` counts of the calls by message size (empty: none).
    pub sizes: Vec<u64>,
}

impl Default for CallStats {
    fn default() -> CallStats {
        CallStats { calls: 0, time: 0, min: 0, max: 0, bytes_sent: 0, bytes_received: 0, failed: 0, polls_empty: 0, poll_time: 0, sizes: vec![0; SIZE_BUCKETS] }
    }
}

impl CallStats {
    pub fn merge(&mut self, o: &CallStats) {
        if o.calls > 0 {
            self.min = if self.calls == 0 { o.min } else { self.min.min(o.min) };
            self.max = if self.calls == 0 { o.max } else { self.max.max(o.max) };
        }
        self.calls += o.calls;
        self.time = self.time.wrapping_add(o.time);
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.failed += o.failed;
        self.polls_empty += o.polls_empty;
        self.poll_time = self.poll_time.wrapping_add(o.poll_time);
        self.sizes.resize(SIZE_BUCKETS, 0);
        for (a, b) in self.sizes.iter_mut().zip(&o.sizes) {
            *a += b;
        }
    }

    /// The times converted by `d` (ticks to nanoseconds).
    pub fn to_ns(&self, d: &impl Fn(i64) -> i64) -> CallStats {
        CallStats { time: d(self.time), min: d(self.min), max: d(self.max), poll_time: d(self.poll_time), ..self.clone() }
    }
}

/// Messages and bytes exchanged with one peer (point-to-point and one-sided).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerStats {
    pub messages_sent: u64,
    pub bytes_sent: u64,
    pub messages_received: u64,
    pub bytes_received: u64,
}

impl PeerStats {
    pub fn merge(&mut self, o: &PeerStats) {
        self.messages_sent += o.messages_sent;
        self.bytes_sent += o.bytes_sent;
        self.messages_received += o.messages_received;
        self.bytes_received += o.bytes_received;
    }
}

/// Requests completed by one routine that were created by another.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completions {
    pub count: u64,
    pub bytes: u64,
    /// The completing calls' time, shared evenly among the requests each completed.
    pub time: i64,
}

/// Calls of one routine from one call site.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteStats {
    pub calls: u64,
    pub time: i64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

// ---------------------------------------------------------------------------------------
// A rank's result.

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutineRow {
    pub routine: String,
    /// The recording thread (as in the regions' `thread_ids`).
    pub thread: i64,
    /// The communicator, numbered in the order this rank first used it (0 = none).
    pub comm: i64,
    pub comm_size: i64,
    pub comm_kind: i32,
    pub stats: CallStats,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerRow {
    /// The peer's rank in MPI_COMM_WORLD; -2 for peers not known.
    pub world_rank: i64,
    pub stats: PeerStats,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionRow {
    pub routine: String,
    /// The routine that created the requests ("unknown" when no table knew them).
    pub origin: String,
    pub stats: Completions,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteRow {
    pub routine: String,
    /// The module (executable or library) holding the call, and the call's offset in it.
    pub module: String,
    pub offset: u64,
    /// Resolved from the module's debug information ("" and 0 when it has none).
    pub function: String,
    pub file: String,
    pub line: u32,
    pub stats: SiteStats,
}

/// A rank's MPI calls: written as `rank<N>/mpi/`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpiProfile {
    /// "summary" or "calls" (with ",sites" when call sites were kept).
    pub mode: String,
    /// The MPI ABI family of the wrappers ("openmpi", "mpich").
    pub family: String,
    /// From the profiler's setup to its finalize, and the time of MPI calls in it (all threads).
    pub app_time_ns: i64,
    pub mpi_time_ns: i64,
    /// How long MPI_Init took (0 when profiling was set up otherwise).
    pub init_time_ns: i64,
    pub routines: Vec<RoutineRow>,
    pub peers: Vec<PeerRow>,
    pub completions: Vec<CompletionRow>,
    pub sites: Vec<SiteRow>,
    /// Requests that a full request table could not keep, and pairs the tables dropped.
    pub untracked_requests: u64,
    pub dropped_pairs: u64,
}

/// The MPI share of a run, pooled over its ranks, for the line under the finalize summary.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    pub ranks: u64,
    pub app_ns: i64,
    pub mpi_ns: i64,
    pub calls: u64,
}

impl Totals {
    pub fn add(&mut self, p: Option<&MpiProfile>) {
        if let Some(p) = p {
            self.ranks += 1;
            self.app_ns = self.app_ns.saturating_add(p.app_time_ns.max(0));
            self.mpi_ns = self.mpi_ns.saturating_add(p.mpi_time_ns.max(0));
            self.calls += p.routines.iter().map(|r| r.stats.calls).sum::<u64>();
        }
    }

    /// What the summary says of a run that recorded MPI calls and no region (in `file`).
    pub fn only_mpi_line(&self, file: &str) -> String {
        format!(
            "no regions recorded; the file holds the program's MPI calls: {:.1} % of the application time in {} MPI call(s) on {} rank(s); `sptool mpi {file}` shows them",
            100.0 * self.mpi_ns as f64 / self.app_ns.max(1) as f64,
            self.calls,
            self.ranks
        )
    }

    /// "MPI: 12.3 % of the time ..." when MPI calls were recorded.
    pub fn line(&self) -> Option<String> {
        (self.ranks > 0 && self.app_ns > 0).then(|| {
            format!(
                "MPI: {:.1} % of the application time in {} MPI call(s) on {} rank(s); `sptool mpi <file>` reports them",
                100.0 * self.mpi_ns as f64 / self.app_ns as f64,
                self.calls,
                self.ranks
            )
        })
    }
}

