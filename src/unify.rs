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
//! And the cross-rank statistics of the unified regions (`cross_rank_stats`), by MPI
//! reductions: the end-of-run summary comes from them, whichever way the file was written.

use crate::config::{Config, Layout};
use crate::metadata::ClockSummary;
use crate::model::{HIST_BUCKETS, RankProfile};
use crate::mpi_comm::{self, Comm};
use crate::status::{Error, Result, Status};
use crate::summary::RegionStats;
use crate::writer::Plan;
use serde::{Deserialize, Serialize};

/// The settings every rank follows: rank 0's (a rank whose environment differs must not take
/// another path through the collective operations).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    pub layout: String,
    pub collective: bool,
    pub verbosity: u32,
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
            verbosity: config.verbosity,
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
    pub settings: Settings,
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
        let r: Census = serde_json::from_slice(&right).map_err(|e| e.to_string())?;
        serde_json::to_vec(&l.then(r)).map_err(|e| e.to_string())
    })?;
    let all = comm.bcast_bytes(merged, 0)?;
    serde_json::from_slice(&all).map_err(json_error)
}

/// One unified region over all ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct CrossRankStats {
    pub name: String,
    pub calls: u64,
    pub total_ns: i64,
    /// Over the ranks with calls (0 without calls).
    pub min_ns: i64,
    pub max_ns: i64,
    pub open_calls: u64,
    pub exclusive_ns: i64,
    /// Durations in log2 buckets (`model::bucket`), summed over the ranks.
    pub hist: Vec<u64>,
    /// Ranks that have the region.
    pub ranks: u64,
    /// The ranks' totals of the region: the exact sum of their squares, the smallest and the
    /// largest (over the ranks that have it): the spread of the region over the ranks.
    pub rank_total_squares: i128,
    pub rank_total_min: i64,
    pub rank_total_max: i64,
}

impl CrossRankStats {
    pub fn mean_ns(&self) -> f64 {
        if self.calls == 0 { 0.0 } else { self.total_ns as f64 / self.calls as f64 }
    }

    /// Mean of the per-rank totals over the ranks that have the region.
    pub fn rank_total_mean(&self) -> f64 {
        if self.ranks == 0 { 0.0 } else { self.total_ns as f64 / self.ranks as f64 }
    }

    /// Variance of the per-rank totals (population), from exact integer sums.
    pub fn rank_total_variance(&self) -> f64 {
        if self.ranks == 0 {
            return 0.0;
        }
        let (n, s) = (self.ranks as i128, self.total_ns as i128);
        // n * sum(x^2) - sum(x)^2 is exact in integers; only the last division rounds.
        ((n * self.rank_total_squares - s * s) as f64 / (n * n) as f64).max(0.0)
    }

    /// The summary table's row.
    pub fn table_row(&self) -> RegionStats {
        RegionStats { name: self.name.clone(), calls: self.calls, total_ns: self.total_ns, min_ns: self.min_ns, max_ns: self.max_ns, open_calls: self.open_calls }
    }
}

/// Regions per reduction (every rank reduces the same blocks: the names are unified).
const BLOCK: usize = 4096;

/// The cross-rank statistics of the unified regions `names` (the same list on every rank):
/// each rank's own statistics of each region (pooled over its threads) reduced with MPI, in
/// blocks of regions, two reductions per block: the sums (calls, totals, open calls, exclusive
/// times, histograms, ranks, and the squared per-rank totals), exact in 128-bit integers, and
/// the minima and (negated) maxima. Collective; every rank gets the result. The one place for
/// "statistics over ranks" of a run.
pub fn cross_rank_stats(comm: &Comm, names: &[String], profile: &RankProfile) -> Result<Vec<CrossRankStats>> {
    let by_name: std::collections::HashMap<&str, usize> = profile.regions.iter().enumerate().map(|(i, r)| (r.name.as_str(), i)).collect();
    let mut out = Vec::with_capacity(names.len());
    for block in names.chunks(BLOCK) {
        // Per region: the sums (exactly, in 128 bits: one reduction for all of them), and the
        // minima with the maxima negated (one reduction).
        const SUMS: usize = 6 + HIST_BUCKETS;
        let n = block.len();
        let mut sums = vec![0i128; n * SUMS];
        let mut mins = vec![i64::MAX; n * 4];
        for (i, name) in block.iter().enumerate() {
            let Some(&at) = by_name.get(name.as_str()) else { continue };
            let r = &profile.regions[at];
            let p = r.pooled();
            let s = &mut sums[i * SUMS..(i + 1) * SUMS];
            s[0] = p.count as i128;
            s[1] = p.total as i128;
            s[2] = r.open_calls as i128;
            s[3] = p.exclusive as i128;
            s[4] = 1;
            s[5] = p.total as i128 * p.total as i128;
            for (b, h) in p.hist.iter().take(HIST_BUCKETS).enumerate() {
                s[6 + b] = *h as i128;
            }
            let m = &mut mins[i * 4..(i + 1) * 4];
            if p.count > 0 {
                m[0] = p.min;
                m[1] = -p.max;
            }
            m[2] = p.total;
            m[3] = -p.total;
        }
        let sums = comm.allreduce(&sums, mpi_comm::SUM)?;
        let mins = comm.allreduce(&mins, mpi_comm::MIN)?;
        for (i, name) in block.iter().enumerate() {
            let s = &sums[i * SUMS..(i + 1) * SUMS];
            let m = &mins[i * 4..(i + 1) * 4];
            let (calls, ranks) = (s[0] as u64, s[4] as u64);
            out.push(CrossRankStats {
                name: name.clone(),
                calls,
                total_ns: s[1] as i64,
                min_ns: if calls > 0 { m[0] } else { 0 },
                max_ns: if calls > 0 { -m[1] } else { 0 },
                open_calls: s[2] as u64,
                exclusive_ns: s[3] as i64,
                hist: s[6..].iter().map(|&h| h as u64).collect(),
                ranks,
                rank_total_squares: s[5],
                rank_total_min: if ranks > 0 { m[2] } else { 0 },
                rank_total_max: if ranks > 0 { -m[3] } else { 0 },
            });
        }
    }
    Ok(out)
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
        let settings = Settings { layout: if r == 0 { "columnar" } else { "regions" }.into(), collective: true, verbosity: r as u32, reference: None };
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

    #[test]
    fn spread_over_ranks_is_exact() {
        let s = CrossRankStats {
            name: "x".into(),
            calls: 3,
            total_ns: 3 * 4_000_000_000_000,
            min_ns: 0,
            max_ns: 0,
            open_calls: 0,
            exclusive_ns: 0,
            hist: vec![],
            ranks: 3,
            rank_total_squares: 3 * 4_000_000_000_000i128 * 4_000_000_000_000 + 2,
            rank_total_min: 0,
            rank_total_max: 0,
        };
        // Totals of 4e12 +- 1 ns: a variance of 2/3 that floating-point sums would lose.
        assert!((s.rank_total_variance() - 2.0 / 3.0).abs() < 1e-12, "{}", s.rank_total_variance());
        assert_eq!(s.rank_total_mean(), 4e12);
    }
}
