//! What one process recorded, merged over its threads: the unit that is written as `rank<N>/`.

use crate::clock::Timebase;
use crate::metadata::AttrValue;
use crate::recorder::ThreadData;
pub use crate::registry::SourceLocation;

/// All completed calls of one region in one process, sorted by start time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RegionData {
    pub name: String,
    pub starts: Vec<i64>,
    pub ends: Vec<i64>,
    /// Index of the recording thread (0 = first thread that recorded).
    pub thread_ids: Vec<i64>,
    /// Calls still open when the profile was finalized.
    pub open_calls: u64,
    /// Calls closed unrecorded because an enclosing region was stopped first.
    pub dropped_calls: u64,
    /// Where the region is defined, when it was registered with a location.
    pub source: Option<SourceLocation>,
}

impl RegionData {
    pub fn calls(&self) -> usize {
        self.starts.len()
    }
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

#[derive(Debug, Clone, Default)]
pub struct RankProfile {
    pub info: RankInfo,
    pub regions: Vec<RegionData>,
    pub likwid: crate::likwid::LikwidRun,
    pub counters: crate::counters::RankCounters,
}

impl RankProfile {
    pub fn num_threads(&self) -> usize {
        self.info.thread_os_ids.len()
    }
}

/// One thread's data as taken at finalize.
pub struct ThreadRecord {
    pub index: u32,
    pub os_tid: i64,
    pub data: ThreadData,
}

/// Merge the threads' logs into per-region data, in registry order. Regions with neither
/// completed nor open nor dropped calls are left out. Recorded ticks become `CLOCK_MONOTONIC`
/// ns here, through `timebase` (the one place where they are converted).
pub fn merge(names: &[String], mut threads: Vec<ThreadRecord>, timebase: &Timebase) -> (Vec<RegionData>, Vec<i64>) {
    threads.sort_by_key(|t| t.index);
    let recorded: Vec<&ThreadRecord> = threads
        .iter()
        .filter(|t| t.data.logs.iter().any(|l| !l.is_empty()) || !t.data.open.is_empty() || t.data.dropped.iter().any(|&d| d > 0))
        .collect();
    // Thread ids in the file are positions among the threads that recorded anything.
    let os_ids: Vec<i64> = recorded.iter().map(|t| t.os_tid).collect();
    let position: std::collections::HashMap<u32, i64> =
        recorded.iter().enumerate().map(|(i, t)| (t.index, i as i64)).collect();

    let mut regions = Vec::new();
    for (id, name) in names.iter().enumerate() {
        let mut runs: Vec<Run> = Vec::new();
        let mut open_calls = 0u64;
        let mut dropped_calls = 0u64;
        for t in threads.iter_mut() {
            let tid = position.get(&t.index).copied().unwrap_or(-1);
            if let Some(log) = t.data.logs.get_mut(id) {
                let log = std::mem::take(log);
                if !log.is_empty() {
                    let (mut starts, mut ends) = log.columns();
                    drop(log);
                    timebase.convert_calls(&mut starts, &mut ends);
                    runs.push((tid, starts, ends));
                }
            }
            open_calls += t.data.open.iter().filter(|c| c.id as usize == id).count() as u64;
            dropped_calls += t.data.dropped.get(id).copied().unwrap_or(0);
        }
        if runs.is_empty() && open_calls == 0 && dropped_calls == 0 {
            continue;
        }
        let (starts, ends, thread_ids) = merge_by_start(runs);
        regions.push(RegionData { name: name.clone(), starts, ends, thread_ids, open_calls, dropped_calls, source: None });
    }
    (regions, os_ids)
}

/// One thread's calls of one region: (thread id, starts, ends).
type Run = (i64, Vec<i64>, Vec<i64>);

/// Merge per-thread runs of calls into columns sorted by start time. A thread's log is in
/// stop order, which is start order unless the region recursed; only then is it sorted.
fn merge_by_start(mut runs: Vec<Run>) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
    for (_, starts, ends) in runs.iter_mut() {
        if !starts.is_sorted() {
            let mut order: Vec<usize> = (0..starts.len()).collect();
            order.sort_by_key(|&i| starts[i]);
            *starts = order.iter().map(|&i| starts[i]).collect();
            *ends = order.iter().map(|&i| ends[i]).collect();
        }
    }
    if runs.len() == 1 {
        let (tid, starts, ends) = runs.pop().unwrap();
        let tids = vec![tid; starts.len()];
        return (starts, ends, tids);
    }
    let total: usize = runs.iter().map(|r| r.1.len()).sum();
    let (mut starts, mut ends, mut tids) = (Vec::with_capacity(total), Vec::with_capacity(total), Vec::with_capacity(total));
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut heap: BinaryHeap<Reverse<(i64, usize)>> = BinaryHeap::new();
    let mut pos = vec![0usize; runs.len()];
    for (r, run) in runs.iter().enumerate() {
        heap.push(Reverse((run.1[0], r)));
    }
    while let Some(Reverse((_, r))) = heap.pop() {
        let (tid, run_starts, run_ends) = &runs[r];
        let i = pos[r];
        starts.push(run_starts[i]);
        ends.push(run_ends[i]);
        tids.push(*tid);
        pos[r] += 1;
        if let Some(&next) = run_starts.get(i + 1) {
            heap.push(Reverse((next, r)));
        }
    }
    (starts, ends, tids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(index: u32, os_tid: i64, calls: &[(u32, i64, i64)]) -> ThreadRecord {
        let mut data = ThreadData::default();
        for &(id, s, e) in calls {
            assert!(data.open(id, s));
            assert!(data.close(id, e));
        }
        ThreadRecord { index, os_tid, data }
    }

    #[test]
    fn merges_threads_sorted_by_start() {
        let names = vec!["a".to_string(), "b".to_string(), "unused".to_string()];
        let t0 = thread(0, 100, &[(0, 1, 2), (0, 5, 6), (1, 7, 8)]);
        let t1 = thread(1, 200, &[(0, 3, 4), (0, 9, 10)]);
        let (regions, os) = merge(&names, vec![t1, t0], &Timebase::monotonic());
        assert_eq!(os, vec![100, 200]);
        assert_eq!(regions.len(), 2);
        assert_eq!(regions[0].starts, vec![1, 3, 5, 9]);
        assert_eq!(regions[0].ends, vec![2, 4, 6, 10]);
        assert_eq!(regions[0].thread_ids, vec![0, 1, 0, 1]);
        assert_eq!(regions[1].name, "b");
        assert_eq!(regions[1].thread_ids, vec![0]);
    }

    #[test]
    fn recursion_is_sorted_and_open_calls_counted() {
        let names = vec!["r".to_string()];
        let mut data = ThreadData::default();
        data.open(0, 1);
        data.open(0, 2);
        assert!(data.close(0, 3));
        assert!(data.close(0, 4));
        data.open(0, 5);
        let (regions, _) = merge(&names, vec![ThreadRecord { index: 0, os_tid: 1, data }], &Timebase::monotonic());
        assert_eq!(regions[0].starts, vec![1, 2]);
        assert_eq!(regions[0].ends, vec![4, 3]);
        assert_eq!(regions[0].open_calls, 1);
    }

    #[test]
    fn ticks_are_converted_at_merge() {
        // A 2 GHz TSC anchored at tick 1000 = 5000 ns and tick 21000 = 15000 ns.
        let anchor = |tick, ns| crate::clock::Anchor { tick, ns, half_width: 0 };
        let tb = Timebase::fit(vec![anchor(1000, 5000), anchor(21_000, 15_000)], Vec::new());
        let t0 = thread(0, 100, &[(0, 3000, 5000), (0, 2000, 2200)]);
        let (regions, _) = merge(&["a".to_string()], vec![t0], &tb);
        assert_eq!(regions[0].starts, vec![5500, 6000]);
        assert_eq!(regions[0].ends, vec![5600, 7000]);
        assert_eq!(tb.report().status, "ok");
    }
}
