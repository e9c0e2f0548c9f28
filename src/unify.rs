//! What the ranks must agree on before they write one file, unified without gathering every
//! rank's data on rank 0: the run's `Plan` (region names in the order of their first
//! appearance rank by rank, sizes of every dataset, string widths, the rank table's columns),
//! the hosts (`num_nodes`), the run's clock, which ranks have `rank<N>` groups (counters,
//! LIKWID), and rank 0's settings, which every rank follows. Each rank counts its own part
//! (`Census::of`); the parts are combined up a binary tree of rank ranges
//! (`Comm::reduce_tree`: "left, then what the right adds", associative, so the result is the
//! rank-order fold the rank-0 path computes) and the result is broadcast: each rank takes part
//! in O(log P) messages and two broadcasts, and rank 0 receives ceil(log2 P) messages, each as
//! large as the run's distinct names, hosts and columns (not the number of ranks).
//!
//! The end-of-run summary's statistics over the ranks are `spread`'s (reductions too).

use crate::config::{Config, Layout};
use crate::metadata::ClockSummary;
use crate::model::RankProfile;
use crate::mpi_comm::Comm;
use crate::status::{Error, Result, Status};
use crate::writer::Plan;
use serde::{Deserialize, Serialize};

/// The settings every rank follows: rank 0's (a rank whose environment differs must not take
/// another path through the collective operations).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    pub layout: String,
    pub collective: bool,
    /// MPI-IO asked for (`SCOPE_PROFILER_COLLECTIVE_IO=mpiio`), even on one node.
    pub mpiio: bool,
    pub verbosity: u32,
    /// Rank 0 prints the summary table (its `SCOPE_PROFILER_SUMMARY` is not `off`): every rank
    /// takes part in the summary's reductions, or none does.
    pub summary: bool,
    /// Tests only (`SCOPE_PROFILER_TEST_REFERENCE`): after a collective write, write the same
    /// data through rank 0 to this path too, the reference the collective file must equal.
    pub reference: Option<String>,
}

/// See `Settings::reference`.
pub const ENV_REFERENCE: &str = "SCOPE_PROFILER_TEST_REFERENCE";

impl Settings {
    /// This process's settings for a run of `ranks` ranks.
    pub fn of(config: &Config, ranks: i64) -> Settings {
        Settings {
            layout: config.layout_for(ranks).name().to_string(),
            collective: config.collective,
            mpiio: config.collective_io == crate::config::CollectiveIo::MpiIo,
            verbosity: config.verbosity,
            summary: config.summary != crate::config::SummaryMode::Off,
            reference: std::env::var(ENV_REFERENCE).ok().filter(|p| !p.is_empty()),
        }
    }

    pub fn layout(&self) -> Layout {
        Layout::parse(&self.layout).unwrap_or_default()
    }
}

/// What the ranks unify (see the module documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Census {
    pub plan: Plan,
    /// Host names, each once, in the order of first appearance.
    pub hosts: Vec<String>,
    pub clock: ClockSummary,
    /// Ranks whose results are kept in `rank<N>` groups (counters, LIKWID), in rank order: the
    /// one part of a collective write that goes through rank 0.
    pub grouped: Vec<i64>,
    /// The kernel every rank runs on (its boot id), when they all run on the same one: one
    /// node, whose ranks can write the file with plain `pwrite`s. None when they run on
    /// several, or one could not tell.
    pub kernel: Option<String>,
    pub settings: Settings,
}

/// This node's kernel: its boot id, different on every node and at every boot (None where
/// /proc does not tell).
pub fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = id.trim();
    // A UUID; anything else is not trusted to tell nodes apart.
    (id.len() == 36 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')).then(|| id.to_string())
}

impl Census {
    /// Rank `rank`'s part: `profile` as it will be written, `host` its host name (taken before
    /// `SCOPE_PROFILER_METADATA=minimal` clears it from the profile).
    pub fn of(rank: i64, profile: &RankProfile, host: &str, settings: Settings) -> Census {
        let mut clock = ClockSummary::default();
        clock.add(rank, &profile.info);
        Census {
            plan: Plan::of(profile),
            hosts: if host.is_empty() { Vec::new() } else { vec![host.to_string()] },
            clock,
            grouped: if crate::writer::has_rank_groups(profile) { vec![rank] } else { Vec::new() },
            kernel: boot_id(),
            settings,
        }
    }

    /// These ranks followed by `later`'s.
    pub fn then(mut self, later: Census) -> Census {
        self.plan = self.plan.and(later.plan);
        for h in later.hosts {
            if !self.hosts.contains(&h) {
                self.hosts.push(h);
            }
        }
        self.clock = self.clock.then(later.clock);
        self.grouped.extend(later.grouped);
        if self.kernel != later.kernel {
            self.kernel = None;
        }
        self
    }
}

fn json_error(e: serde_json::Error) -> Error {
    Error::new(Status::Mpi, format!("malformed census: {e}"))
}

/// Every rank's `mine`, combined over all ranks, on every rank. Collective.
pub fn census(comm: &Comm, mine: &Census) -> Result<Census> {
    let bytes = serde_json::to_vec(mine).map_err(json_error)?;
    let merged = comm.reduce_tree(bytes, |left, right| {
        let l: Census = serde_json::from_slice(&left).map_err(|e| e.to_string())?;
        let r: Census = serde_json::from_slice(right).map_err(|e| e.to_string())?;
        serde_json::to_vec(&l.then(r)).map_err(|e| e.to_string())
    })?;
    let all = comm.bcast_bytes(merged, 0)?;
    serde_json::from_slice(&all).map_err(json_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AttrValue, RegionData, SourceLocation};

    fn rank(r: i64, names: &[&str], host: &str) -> Census {
        let mut p = RankProfile::default();
        p.info.hostname = host.into();
        p.info.thread_os_ids = (0..=r).collect();
        p.info.extra.push(("clock".into(), AttrValue::Str(if r == 2 { "monotonic" } else { "tsc" }.into())));
        p.info.extra.push(("clock_status".into(), AttrValue::Str(if r == 3 { "bad".into() } else { "ok".into() })));
        if r == 1 {
            p.info.extra.push(("only_on_1".into(), AttrValue::StrList(vec!["x".into(), "long value".into()])));
        }
        for n in names {
            let mut region = RegionData::from_columns(n, vec![0; r as usize], vec![1; r as usize], vec![0; r as usize]);
            region.source = Some(SourceLocation { file: format!("{n}.c"), line: 1 });
            p.regions.push(region);
        }
        if r == 2 {
            p.counters.annotated.push(Default::default());
        }
        let settings = Settings { layout: if r == 0 { "columnar" } else { "regions" }.into(), collective: true, mpiio: false, verbosity: r as u32, summary: r == 0, reference: None };
        Census::of(r, &p, host, settings)
    }

    /// Combining up any tree gives the rank-order fold: names and hosts in the order of first
    /// appearance, sums, maxima, rank 0's settings.
    #[test]
    fn the_combination_is_associative_and_in_rank_order() {
        let parts = [rank(0, &["b", "a"], "n1"), rank(1, &["c", "a"], "n2"), rank(2, &["a", "dd"], "n1"), rank(3, &["e", "c"], "n3")];
        let fold = parts.iter().cloned().reduce(Census::then).unwrap();
        let tree = parts[0].clone().then(parts[1].clone()).then(parts[2].clone().then(parts[3].clone()));
        assert_eq!(fold, tree);
        assert_eq!(fold.plan.names, ["b", "a", "c", "dd", "e"]);
        assert_eq!(fold.hosts, ["n1", "n2", "n3"]);
        assert_eq!((fold.plan.ranks, fold.plan.rows, fold.plan.total_calls, fold.plan.max_rank_calls, fold.plan.max_threads), (4, 8, 12, 6, 4));
        assert_eq!(fold.plan.source_width, 4);
        let col = fold.plan.attrs.iter().find(|a| a.name == "only_on_1").unwrap();
        assert_eq!((col.width, col.values), (10, 2));
        assert_eq!(fold.grouped, [2]);
        assert_eq!(fold.settings.layout, "columnar");
        let clock: std::collections::BTreeMap<String, AttrValue> = fold.clock.attrs().into_iter().collect();
        assert_eq!(clock["clock"], AttrValue::Str("mixed".into()));
        assert!(matches!(&clock["clock_status"], AttrValue::Str(s) if s.contains("rank(s) 3")));
        // Through JSON, as between ranks.
        let back: Census = serde_json::from_slice(&serde_json::to_vec(&fold).unwrap()).unwrap();
        assert_eq!(back, fold);
    }

    /// The ranks are on one node only when every rank's kernel is the same one: a second
    /// kernel anywhere in the fold, or a rank that could not tell, makes it None.
    #[test]
    fn one_kernel_only_when_every_rank_has_the_same() {
        let on = |k: Option<&str>| Census { kernel: k.map(String::from), ..rank(0, &["a"], "n1") };
        let a = "0b0c5e6d-1f2a-4c3b-9d8e-7f6a5b4c3d2e";
        let b = "1b0c5e6d-1f2a-4c3b-9d8e-7f6a5b4c3d2e";
        let fold = |ks: &[Option<&str>]| ks.iter().map(|&k| on(k)).reduce(Census::then).unwrap().kernel;
        assert_eq!(fold(&[Some(a), Some(a), Some(a)]).as_deref(), Some(a));
        assert_eq!(fold(&[Some(a), Some(a), Some(b)]), None);
        assert_eq!(fold(&[Some(a), None, Some(a)]), None);
        assert_eq!(fold(&[None, None]), None);
        // This machine tells its own.
        let mine = boot_id().expect("this Linux has /proc/sys/kernel/random/boot_id");
        assert_eq!(Some(mine), rank(1, &["a"], "n1").kernel);
    }
}
