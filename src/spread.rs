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

/// Bytes a list of keys may take on the wire (names and paths only).
const MAX_KEY_BYTES: u64 = 1 << 30;

fn bcast_bytes(comm: &Comm, bytes: &mut Vec<u8>) -> Result<()> {
    let mut len = bytes.len() as u64;
    comm.bcast_value(&mut len, 0)?;
    if len > MAX_KEY_BYTES {
        return Err(Error::new(Status::Mpi, format!("summary: {len} bytes of region names announced")));
    }
    bytes.resize(len as usize, 0);
    comm.bcast(bytes, 0)
}

fn decode_keys(bytes: &[u8]) -> Result<Vec<Key>> {
    let keys: Vec<Key> = serde_json::from_slice(bytes).map_err(|e| Error::new(Status::Mpi, format!("summary: malformed region names: {e}")))?;
    if keys.iter().any(|k| k.len() < 2 || (k[0] != "f" && k[0] != "p")) {
        return Err(Error::new(Status::Mpi, "summary: malformed region names"));
    }
    Ok(keys)
}

/// Combine every rank's `local` into the table, on rank 0 (None elsewhere, and everywhere when
/// no rank `wants` it). Collective: every rank of `comm` calls it, in the same place.
pub fn reduce(comm: &Comm, local: &Local, wants: bool) -> Result<Option<Table>> {
    let size = comm.size().max(1) as usize;
    let root = comm.rank() == 0;
    // Any rank that prints makes everyone take part (a rank's settings may differ).
    if comm.allreduce(&[wants as i64], mpi_comm::MAX)?[0] == 0 {
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
    let longest = comm.allreduce(&[mine.len() as u64], mpi_comm::MAX)?[0];
    if longest > MAX_KEY_BYTES {
        // The same on every rank: all stop here.
        return Err(Error::new(Status::Mpi, "summary: too many region names"));
    }
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
    // 3. Every rank has the same names, or all stop here together.
    let n = keys.len() as i64;
    let ok = if failed.is_some() { 0 } else { 1 };
    let agree = comm.allreduce(&[ok, n, -n], mpi_comm::MIN)?;
    if agree[0] == 0 || agree[1] != n || agree[2] != -n {
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
    let totals: Vec<i64> = mine.iter().map(|v| v.total).collect();
    let mins = comm.allreduce(&totals, mpi_comm::MIN)?;
    let maxs = comm.allreduce(&totals, mpi_comm::MAX)?;
    let rank = comm.rank() as i64;
    let at_max: Vec<i64> = totals.iter().zip(&maxs).map(|(t, m)| if t == m { rank } else { i64::MAX }).collect();
    let max_rank = comm.allreduce(&at_max, mpi_comm::MIN)?;
    let mut shares: Vec<f64> = mine.iter().map(|v| local.share(v.total).unwrap_or(0.0)).collect();
    shares.push(if local.wall_ns > 0 { 1.0 } else { 0.0 });
    let shares = comm.allreduce(&shares, mpi_comm::SUM)?;
    let mut call_ext: Vec<i64> = mine.iter().map(|v| v.call_min.unwrap_or(i64::MAX)).collect();
    call_ext.extend(mine.iter().map(|v| v.call_max.map_or(i64::MIN, |m| -m)));
    // Shortest call: the minimum; longest: the minimum of the negated maxima (one reduction).
    let call_ext = comm.allreduce(&call_ext, mpi_comm::MIN)?;
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
            call_min_ns: (call_ext[i] != i64::MAX).then_some(call_ext[i]),
            call_max_ns: (call_ext[n + i] != i64::MIN && call_ext[n + i] <= 0).then(|| -call_ext[n + i]),
        };
        if k[0] == "f" { t.flat.push(row) } else { t.tree.push(row) }
    }
    Ok(Some(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CallPaths, PathNode, RegionData};

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
