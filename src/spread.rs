//! The numbers of the finalize summary (`summary::Table`): each rank's per-region and per-path
//! totals (`Local`, from its own statistics and call paths), over MPI combined by region name
//! and path with reductions (`reduce`): rank 0 broadcasts its list of names and paths, the
//! names only other ranks have are gathered once, and then sums, minima and maxima over the
//! ranks are a handful of element-wise reductions. No call data moves; every rank takes the
//! same collective steps in the same order, whatever it recorded.

use crate::model::RankProfile;
use crate::mpi_comm::{self, Comm};
use crate::status::{Error, Result, Status};
use crate::summary::{Row, Table};
use std::collections::HashMap;

/// A row's key: `["f", region]` (flat) or `["p", region, region, ...]` (a call path).
type Key = Vec<String>;

#[derive(Debug, Clone, Copy, Default)]
struct Values {
    calls: u64,
    total: i64,
    excl: i64,
    open: u64,
    call_min: Option<i64>,
    call_max: Option<i64>,
}

/// What one rank contributes to the summary.
#[derive(Debug, Default)]
pub struct Local {
    /// The rank's wall time from setup to finalize (0: not known).
    wall_ns: i64,
    keys: Vec<Key>,
    values: Vec<Values>,
}

impl Local {
    /// From the profile's statistics (no pass over its calls) and call paths.
    pub fn of(p: &RankProfile) -> Local {
        let mut out = Local { wall_ns: p.call_paths.as_ref().map_or(0, |c| c.wall_ns), ..Default::default() };
        // A recursive region's calls overlap: its time is that of its outermost calls, which
        // the call paths hold (the statistics' total adds the inner calls again).
        let inclusive = p.call_paths.as_ref().map(|c| c.inclusive_by_region()).unwrap_or_default();
        for r in &p.regions {
            let mut s = r.pooled();
            if let Some(&t) = inclusive.get(&r.name) {
                s.total = t;
            }
            let mut key = vec!["f".to_string(), r.name.clone()];
            // One row per name (a name registered twice is pooled).
            if let Some(i) = out.keys.iter().position(|k| *k == key) {
                let v = &mut out.values[i];
                v.calls += s.count;
                v.total += s.total;
                v.excl += s.exclusive;
                v.open += r.open_calls;
                continue;
            }
            let has = s.count > 0;
            out.keys.push(std::mem::take(&mut key));
            out.values.push(Values {
                calls: s.count,
                total: s.total,
                excl: s.exclusive,
                open: r.open_calls,
                call_min: has.then_some(s.min),
                call_max: has.then_some(s.max),
            });
        }
        if let Some(paths) = &p.call_paths {
            for (path, t) in paths.pooled() {
                let mut key = Vec::with_capacity(path.len() + 1);
                key.push("p".to_string());
                key.extend(path);
                out.keys.push(key);
                out.values.push(Values { calls: t.calls, total: t.inclusive_ns, excl: t.exclusive_ns, ..Default::default() });
            }
        }
        out
    }

    fn share(&self, total: i64) -> Option<f64> {
        (self.wall_ns > 0).then(|| total as f64 / self.wall_ns as f64)
    }

    /// The table of this process alone.
    pub fn table(&self) -> Table {
        let mut t = Table { ranks: 1, ..Default::default() };
        for (k, v) in self.keys.iter().zip(&self.values) {
            let row = Row {
                path: k[1..].to_vec(),
                calls: v.calls,
                sum_ns: v.total,
                min_ns: v.total,
                max_ns: v.total,
                max_rank: 0,
                excl_sum_ns: v.excl,
                share: self.share(v.total),
                open_calls: v.open,
                call_min_ns: v.call_min,
                call_max_ns: v.call_max,
            };
            if k[0] == "f" { t.flat.push(row) } else { t.tree.push(row) }
        }
        t
    }
}

/// The minima and maxima over the ranks, from one element-wise minimum: each rank's totals,
/// its totals complemented (`!t` reverses the order exactly, so the minimum of `!t` is `!` the
/// maximum of `t`, for every i64), its shortest call (i64::MAX where it has none) and its
/// longest call complemented (i64::MAX where it has none: a rank without calls never wins).
#[derive(Debug, PartialEq)]
struct Extremes {
    mins: Vec<i64>,
    maxs: Vec<i64>,
    call_mins: Vec<Option<i64>>,
    call_maxs: Vec<Option<i64>>,
}

impl Extremes {
    fn encode(values: &[Values]) -> Vec<i64> {
        let mut v = Vec::with_capacity(4 * values.len());
        v.extend(values.iter().map(|x| x.total));
        v.extend(values.iter().map(|x| !x.total));
        v.extend(values.iter().map(|x| x.call_min.unwrap_or(i64::MAX)));
        v.extend(values.iter().map(|x| x.call_max.map_or(i64::MAX, |m| !m)));
        v
    }

    /// From the reduction of `n` rows' `encode`s; None if it is not that long.
    fn decode(min: &[i64], n: usize) -> Option<Extremes> {
        if min.len() != 4 * n {
            return None;
        }
        let some = |x: i64| (x != i64::MAX).then_some(x);
        Some(Extremes {
            mins: min[..n].to_vec(),
            maxs: min[n..2 * n].iter().map(|m| !m).collect(),
            call_mins: min[2 * n..3 * n].iter().map(|&m| some(m)).collect(),
            call_maxs: min[3 * n..].iter().map(|&m| some(m).map(|m| !m)).collect(),
        })
    }
}

/// This rank's part of the agreement on the names (a maximum over the ranks): 0 if it failed,
/// else -1; its count of names; that count negated.
fn agreement(failed: bool, names: usize) -> [i64; 3] {
    let n = names.min(i64::MAX as usize) as i64;
    [if failed { 0 } else { -1 }, n, -n]
}

/// Whether the maximum of every rank's `agreement` says that no rank failed and every rank has
/// these `names`.
fn agreed(max: &[i64], names: usize) -> bool {
    max == agreement(false, names)
}

/// Bytes a list of keys may take on the wire (names and paths only).
const MAX_KEY_BYTES: u64 = 1 << 30;

/// Rank 0's `bytes` on every rank (one broadcast when they are a few kilobytes).
fn bcast_bytes(comm: &Comm, bytes: &mut Vec<u8>) -> Result<()> {
    let mine = (comm.rank() == 0).then(|| std::mem::take(bytes));
    *bytes = comm.bcast_bytes_at_most(mine, 0, MAX_KEY_BYTES).map_err(|e| Error::new(Status::Mpi, format!("summary: region names: {e}")))?;
    Ok(())
}

fn decode_keys(bytes: &[u8]) -> Result<Vec<Key>> {
    let keys: Vec<Key> = serde_json::from_slice(bytes).map_err(|e| Error::new(Status::Mpi, format!("summary: malformed region names: {e}")))?;
    if keys.iter().any(|k| k.len() < 2 || (k[0] != "f" && k[0] != "p")) {
        return Err(Error::new(Status::Mpi, "summary: malformed region names"));
    }
    Ok(keys)
}

/// Combine every rank's `local` into the table, on rank 0 (None elsewhere, and everywhere when
/// the table is not `wanted`). Collective: every rank of `comm` calls it, in the same place,
/// with the same `wanted` (rank 0's setting, which the census carries to every rank).
pub fn reduce(comm: &Comm, local: &Local, wanted: bool) -> Result<Option<Table>> {
    let size = comm.size().max(1) as usize;
    let root = comm.rank() == 0;
    if !wanted {
        return Ok(None);
    }
    // A step that fails on one rank must not leave the others waiting in the next collective:
    // every rank takes every step, a failure is only noted, and the ranks agree (step 3)
    // before the reductions whose lengths depend on the names.
    let mut failed: Option<Error> = None;
    // 1. Rank 0's names and paths, to every rank.
    let mut bytes = if root { serde_json::to_vec(&local.keys).unwrap_or_default() } else { Vec::new() };
    bcast_bytes(comm, &mut bytes)?;
    let mut keys = if root {
        local.keys.clone()
    } else {
        decode_keys(&bytes).unwrap_or_else(|e| {
            failed = Some(e);
            Vec::new()
        })
    };
    // 2. The ones only other ranks have, gathered once on rank 0 and broadcast with the rest.
    let known: std::collections::HashSet<&Key> = keys.iter().collect();
    let extra: Vec<&Key> = local.keys.iter().filter(|k| !known.contains(k)).collect();
    let mine = if extra.is_empty() { Vec::new() } else { serde_json::to_vec(&extra).unwrap_or_default() };
    drop(known);
    // One reduction (a maximum) gives the longest list of names only some ranks have, and, when
    // there is none (the common case: every rank's names are among rank 0's), whether every rank
    // has the same names: each says whether it failed, and its count and its count negated.
    let [a, b, c] = agreement(failed.is_some(), keys.len());
    let first = comm.allreduce(&[mine.len().min(i64::MAX as usize) as i64, a, b, c], mpi_comm::MAX)?;
    let longest = first[0].max(0) as u64;
    if longest > MAX_KEY_BYTES {
        // The same on every rank: all stop here.
        return Err(Error::new(Status::Mpi, "summary: too many region names"));
    }
    let mut same = longest == 0 && agreed(&first[1..], keys.len());
    if longest > 0 {
        let slot = 8 + longest as usize;
        let mut buf = vec![0u8; slot];
        buf[..8].copy_from_slice(&(mine.len() as u64).to_le_bytes());
        buf[8..8 + mine.len()].copy_from_slice(&mine);
        let gathered = comm.gather(&buf, 0)?;
        let mut union = Vec::new();
        if let Some(all) = gathered {
            let mut seen: std::collections::HashSet<Key> = keys.iter().cloned().collect();
            for chunk in all.chunks_exact(slot) {
                let n = u64::from_le_bytes(chunk[..8].try_into().unwrap_or_default()) as usize;
                let Some(body) = chunk.get(8..8 + n).filter(|_| n > 0) else { continue };
                match decode_keys(body) {
                    Ok(list) => {
                        for k in list {
                            if seen.insert(k.clone()) {
                                keys.push(k);
                            }
                        }
                    }
                    Err(e) => failed = Some(e),
                }
            }
            union = serde_json::to_vec(&keys).unwrap_or_default();
        }
        bcast_bytes(comm, &mut union)?;
        if !root {
            keys = decode_keys(&union).unwrap_or_else(|e| {
                failed = Some(e);
                Vec::new()
            });
        }
    }
    // 3. Every rank has the same names, or all stop here together (after the names gathered in
    // step 2, a reduction of its own; without them, the one above decided).
    if longest > 0 {
        same = agreed(&comm.allreduce(&agreement(failed.is_some(), keys.len()), mpi_comm::MAX)?, keys.len());
    }
    if !same {
        return Err(failed.unwrap_or_else(|| Error::new(Status::Mpi, "summary: the ranks disagree on the region names")));
    }
    // 4. This rank's values in the common order; sums, minima, maxima over the ranks.
    let n = keys.len();
    let at: HashMap<&Key, usize> = local.keys.iter().enumerate().map(|(i, k)| (k, i)).collect();
    let mine: Vec<Values> = keys.iter().map(|k| at.get(k).map_or(Values::default(), |&i| local.values[i])).collect();
    let mut sums = Vec::with_capacity(4 * n);
    sums.extend(mine.iter().map(|v| v.total));
    sums.extend(mine.iter().map(|v| v.excl));
    sums.extend(mine.iter().map(|v| v.calls.min(i64::MAX as u64) as i64));
    sums.extend(mine.iter().map(|v| v.open.min(i64::MAX as u64) as i64));
    let sums = comm.allreduce(&sums, mpi_comm::SUM)?;
    // Minima and maxima in one reduction (a minimum, `Extremes`).
    let totals: Vec<i64> = mine.iter().map(|v| v.total).collect();
    let ext = comm.allreduce(&Extremes::encode(&mine), mpi_comm::MIN)?;
    let Some(Extremes { mins, maxs, call_mins, call_maxs }) = Extremes::decode(&ext, n) else {
        return Err(Error::new(Status::Mpi, "summary: a reduction returned the wrong length"));
    };
    let rank = comm.rank() as i64;
    let at_max: Vec<i64> = totals.iter().zip(&maxs).map(|(t, m)| if t == m { rank } else { i64::MAX }).collect();
    let max_rank = comm.allreduce(&at_max, mpi_comm::MIN)?;
    let mut shares: Vec<f64> = mine.iter().map(|v| local.share(v.total).unwrap_or(0.0)).collect();
    shares.push(if local.wall_ns > 0 { 1.0 } else { 0.0 });
    let shares = comm.allreduce(&shares, mpi_comm::SUM)?;
    if !root {
        return Ok(None);
    }
    let with_wall = shares[n];
    let mut t = Table { ranks: size, ..Default::default() };
    for (i, k) in keys.into_iter().enumerate() {
        let row = Row {
            path: k[1..].to_vec(),
            sum_ns: sums[i],
            excl_sum_ns: sums[n + i],
            calls: sums[2 * n + i].max(0) as u64,
            open_calls: sums[3 * n + i].max(0) as u64,
            min_ns: mins[i],
            max_ns: maxs[i],
            max_rank: max_rank[i],
            share: (with_wall > 0.0).then(|| shares[i] / with_wall),
            call_min_ns: call_mins[i],
            call_max_ns: call_maxs[i],
        };
        if k[0] == "f" { t.flat.push(row) } else { t.tree.push(row) }
    }
    Ok(Some(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CallPaths, PathNode, RegionData};

    /// The maximum of the ranks' `agreement`s says yes only when no rank failed and every
    /// rank counts the same names.
    #[test]
    fn agreement_on_the_names() {
        let max = |parts: &[[i64; 3]]| -> Vec<i64> { (0..3).map(|i| parts.iter().map(|p| p[i]).max().unwrap()).collect() };
        assert!(agreed(&max(&[agreement(false, 5), agreement(false, 5)]), 5));
        assert!(!agreed(&max(&[agreement(false, 5), agreement(true, 5)]), 5));
        assert!(!agreed(&max(&[agreement(false, 5), agreement(false, 4)]), 5));
        assert!(!agreed(&max(&[agreement(false, 5), agreement(false, 6)]), 5));
        assert!(!agreed(&[-1, 5], 5));
    }

    /// One element-wise minimum of every rank's `encode` gives each row's minimum and maximum
    /// total and shortest and longest call, over the ranks that have calls; for any i64.
    #[test]
    fn extremes_from_one_minimum() {
        let v = |total: i64, calls: Option<(i64, i64)>| Values { total, call_min: calls.map(|c| c.0), call_max: calls.map(|c| c.1), ..Default::default() };
        // Three ranks, four rows: ordinary values, the i64 extremes, a row one rank has no call
        // of, and a row no rank has a call of.
        let ranks = [
            vec![v(5, Some((1, 4))), v(i64::MIN, Some((i64::MIN + 1, 0))), v(7, None), v(0, None)],
            vec![v(9, Some((2, 9))), v(i64::MAX, Some((-3, i64::MAX - 1))), v(3, Some((2, 3))), v(-4, None)],
            vec![v(-2, Some((0, 1))), v(0, Some((5, 5))), v(8, Some((1, 6))), v(2, None)],
        ];
        let encoded: Vec<Vec<i64>> = ranks.iter().map(|r| Extremes::encode(r)).collect();
        let min: Vec<i64> = (0..encoded[0].len()).map(|i| encoded.iter().map(|e| e[i]).min().unwrap()).collect();
        let got = Extremes::decode(&min, 4).unwrap();
        let over = |row: usize, f: &dyn Fn(&Values) -> Option<i64>, pick: fn(i64, i64) -> i64| ranks.iter().filter_map(|r| f(&r[row])).reduce(pick);
        for row in 0..4 {
            assert_eq!(got.mins[row], over(row, &|x| Some(x.total), i64::min).unwrap(), "row {row}");
            assert_eq!(got.maxs[row], over(row, &|x| Some(x.total), i64::max).unwrap(), "row {row}");
            assert_eq!(got.call_mins[row], over(row, &|x| x.call_min, i64::min), "row {row}");
            assert_eq!(got.call_maxs[row], over(row, &|x| x.call_max, i64::max), "row {row}");
        }
        assert_eq!((got.maxs[1], got.mins[1]), (i64::MAX, i64::MIN));
        assert_eq!((got.call_mins[2], got.call_maxs[2]), (Some(1), Some(6)));
        assert_eq!((got.call_mins[3], got.call_maxs[3]), (None, None));
        assert!(Extremes::decode(&min[1..], 4).is_none());
    }

    #[test]
    fn local_rows_of_a_profile() {
        let mut p = RankProfile::default();
        p.regions.push(RegionData::from_columns("outer", vec![0], vec![100], vec![0]));
        p.regions.push(RegionData::from_columns("inner", vec![10, 40], vec![30, 50], vec![0, 0]));
        p.call_paths = Some(CallPaths {
            names: vec!["outer".into(), "inner".into()],
            nodes: vec![
                PathNode { thread: 0, parent: -1, region: 0, calls: 1, inclusive_ns: 100, exclusive_ns: 70 },
                PathNode { thread: 0, parent: 0, region: 1, calls: 2, inclusive_ns: 30, exclusive_ns: 30 },
            ],
            wall_ns: 200,
        });
        let t = Local::of(&p).table();
        assert_eq!(t.flat.len(), 2);
        assert_eq!(t.tree.len(), 2);
        let inner = t.flat.iter().find(|r| r.path == ["inner"]).unwrap();
        assert_eq!((inner.calls, inner.sum_ns, inner.call_min_ns, inner.call_max_ns), (2, 30, Some(10), Some(20)));
        assert_eq!(inner.share, Some(0.15));
        let path = t.tree.iter().find(|r| r.path == ["outer", "inner"]).unwrap();
        assert_eq!((path.calls, path.sum_ns, path.excl_sum_ns), (2, 30, 30));
        let text = crate::summary::render_table(&t, true, 120, 50);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[2].starts_with("outer ") && lines[3].starts_with("  inner "), "{text}");
        assert!(lines[2].contains("50.0%"), "{text}");
        let flat = crate::summary::render_table(&t, false, 120, 1);
        assert!(flat.contains("... 1 more row(s) not shown"), "{flat}");
    }
}
