//! What one process recorded, merged over its threads: the unit that is written as `rank<N>/`.

use crate::calllog::{Call, CallLog, Cursor};
use crate::clock::Timebase;
use crate::metadata::AttrValue;
use crate::recorder::ThreadData;
pub use crate::registry::SourceLocation;
use crate::stats::Stats;
use std::sync::Arc;

/// The calls of one region in one process: still packed per thread as recorded (finalize
/// decodes and merges them region by region, slab by slab, while writing), or already as
/// columns sorted by start time (received from another rank).
#[derive(Debug)]
pub enum Calls {
    /// Per recording thread (thread id, log), in the clock's units: converted by the timebase
    /// while the calls are decoded.
    Packed(Vec<(i64, CallLog)>, Arc<Timebase>),
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

/// A piece of a region's calls in start order: what the layout writers consume.
#[derive(Clone, Copy)]
pub struct Slab<'a> {
    pub starts: &'a [i64],
    pub ends: &'a [i64],
    pub thread_ids: &'a [i64],
}

/// Calls per slab: big enough that a write call costs nothing per call, small enough to stay
/// in cache between decoding and writing.
pub const SLAB: usize = 1 << 16;

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
            Calls::Packed(runs, _) => runs.iter().map(|(_, log)| log.len()).sum(),
            Calls::Columns(c) => c.starts.len(),
        }
    }

    /// Statistics pooled over threads (nanoseconds).
    pub fn pooled(&self) -> Stats {
        let mut all = Stats::default();
        self.stats.iter().for_each(|(_, s)| all.merge(s));
        all
    }

    /// All calls as columns (tests and small data; writers stream with `for_each_slab`).
    pub fn columns(&self) -> Columns {
        let mut c = Columns::default();
        let _ = self.for_each_slab::<()>(|s| {
            c.starts.extend_from_slice(s.starts);
            c.ends.extend_from_slice(s.ends);
            c.thread_ids.extend_from_slice(s.thread_ids);
            Ok(())
        });
        c
    }

    /// Hand the calls to `f` in start order, at most `SLAB` at a time. Packed calls are decoded
    /// and merged over threads on the way, so at most one slab of decoded calls exists at a
    /// time (plus a sorted copy of a thread's calls when the region recursed on it).
    pub fn for_each_slab<E>(&self, mut f: impl FnMut(Slab<'_>) -> Result<(), E>) -> Result<(), E> {
        match &self.calls {
            Calls::Columns(c) => {
                let n = c.starts.len().min(c.ends.len()).min(c.thread_ids.len());
                for i in (0..n).step_by(SLAB) {
                    let j = (i + SLAB).min(n);
                    f(Slab { starts: &c.starts[i..j], ends: &c.ends[i..j], thread_ids: &c.thread_ids[i..j] })?;
                }
                Ok(())
            }
            Calls::Packed(runs, tb) => merge_packed(runs, tb, f),
        }
    }

    /// Like `for_each_slab_pipelined`, with a per-slab encoding step `map` (into a `T`) that runs
    /// on the decoding thread too, so the calling thread only writes (`f`). `map` sees the
    /// slabs in order and may keep state across them.
    pub fn for_each_slab_mapped<T: Send + Default, E: Send>(
        &self,
        mut map: impl FnMut(Slab<'_>, &mut T) + Send,
        mut f: impl FnMut(&T) -> Result<(), E>,
    ) -> Result<(), E> {
        let inline = match &self.calls {
            Calls::Packed(runs, _) => runs.iter().map(|(_, log)| log.bytes_reserved()).sum::<usize>() < 32 * SLAB,
            Calls::Columns(_) => true,
        };
        if inline {
            let mut t = T::default();
            return self.for_each_slab(|s| {
                map(s, &mut t);
                f(&t)
            });
        }
        let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<T>(2);
        let (empty_tx, empty_rx) = std::sync::mpsc::channel::<T>();
        for _ in 0..3 {
            let _ = empty_tx.send(T::default());
        }
        std::thread::scope(|scope| {
            let producer = scope.spawn(move || {
                let _ = self.for_each_slab::<()>(|s| {
                    let Ok(mut t) = empty_rx.recv() else { return Err(()) };
                    map(s, &mut t);
                    full_tx.send(t).map_err(|_| ())
                });
            });
            let mut result = Ok(());
            for t in full_rx.iter() {
                result = f(&t);
                if result.is_err() {
                    break;
                }
                let _ = empty_tx.send(t);
            }
            drop(full_rx);
            drop(empty_tx);
            let _ = producer.join();
            result
        })
    }

    /// `for_each_slab` with the decoding and merging of packed calls on a second thread, one
    /// slab ahead of `f` (which stays on the calling thread: HDF5 is not thread-safe). The
    /// write of one slab overlaps the decoding of the next, so a region is written at the
    /// speed of the slower of the two, not their sum. Small regions are done inline.
    pub fn for_each_slab_pipelined<E: Send>(&self, mut f: impl FnMut(Slab<'_>) -> Result<(), E>) -> Result<(), E> {
        let Calls::Packed(runs, tb) = &self.calls else { return self.for_each_slab(f) };
        if runs.iter().map(|(_, log)| log.bytes_reserved()).sum::<usize>() < 32 * SLAB {
            return self.for_each_slab(f);
        }
        type Buf = Buffers;
        let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<Buf>(2);
        let (empty_tx, empty_rx) = std::sync::mpsc::channel::<Buf>();
        for _ in 0..3 {
            let _ = empty_tx.send((Vec::with_capacity(SLAB), Vec::with_capacity(SLAB), Vec::with_capacity(SLAB)));
        }
        std::thread::scope(|scope| {
            let producer = scope.spawn(move || {
                // The full buffers go to the writer as they are; empty ones come back.
                let _ = merge_packed_into::<()>(runs, tb, |b| {
                    let Ok(mut empty) = empty_rx.recv() else { return Err(()) };
                    empty.0.clear();
                    empty.1.clear();
                    empty.2.clear();
                    std::mem::swap(b, &mut empty);
                    full_tx.send(empty).map_err(|_| ())
                });
            });
            let mut result = Ok(());
            for b in full_rx.iter() {
                if result.is_ok() {
                    result = f(Slab { starts: &b.0, ends: &b.1, thread_ids: &b.2 });
                }
                if result.is_err() {
                    break; // dropping the receiver stops the producer
                }
                let _ = empty_tx.send(b);
            }
            drop(full_rx);
            drop(empty_tx);
            let _ = producer.join();
            result
        })
    }
}

fn one_hot(d: i64) -> Vec<u64> {
    let mut h = vec![0; crate::stats::HIST_BUCKETS];
    h[crate::stats::bucket(d)] = 1;
    h
}

/// One thread's calls of a region during the merge, converted to nanoseconds as they are
/// decoded (the one place where recorded call times are converted; the conversion keeps the
/// order, so merging converted starts is merging recorded ones).
struct Source<'a> {
    calls: Decoded<'a>,
    /// Starts and ends each move forward through the timebase's segments.
    starts: crate::clock::Converter<'a>,
    ends: crate::clock::Converter<'a>,
}

enum Decoded<'a> {
    Log(Cursor<'a>),
    Sorted(std::vec::IntoIter<Call>),
}

impl<'a> Source<'a> {
    fn new(calls: Decoded<'a>, timebase: &'a Timebase) -> Source<'a> {
        Source { calls, starts: timebase.converter(), ends: timebase.converter() }
    }

    #[inline]
    fn next(&mut self) -> Option<Call> {
        let c = match &mut self.calls {
            Decoded::Log(c) => c.next(),
            Decoded::Sorted(it) => it.next(),
        }?;
        Some(Call { start: self.starts.to_ns(c.start), end: self.ends.to_ns(c.end) })
    }
}

/// Slab buffers: starts, ends, thread ids.
type Buffers = (Vec<i64>, Vec<i64>, Vec<i64>);

fn merge_packed<E>(runs: &[(i64, CallLog)], timebase: &Timebase, mut f: impl FnMut(Slab<'_>) -> Result<(), E>) -> Result<(), E> {
    merge_packed_into(runs, timebase, |b: &mut Buffers| {
        let r = f(Slab { starts: &b.0, ends: &b.1, thread_ids: &b.2 });
        b.0.clear();
        b.1.clear();
        b.2.clear();
        r
    })
}

/// Merge the runs into slab buffers; `flush` takes each full (or the last) slab and leaves
/// empty buffers behind (cleared, or swapped for others).
fn merge_packed_into<E>(runs: &[(i64, CallLog)], timebase: &Timebase, mut flush: impl FnMut(&mut Buffers) -> Result<(), E>) -> Result<(), E> {
    let mut sources: Vec<(i64, Source<'_>)> = Vec::with_capacity(runs.len());
    for (tid, log) in runs {
        if log.is_empty() {
            continue;
        }
        if log.is_sorted() {
            sources.push((*tid, Source::new(Decoded::Log(log.cursor()), timebase)));
        } else {
            let mut cur = log.cursor();
            let mut calls: Vec<Call> = std::iter::from_fn(|| cur.next()).collect();
            calls.sort_by_key(|c| c.start);
            sources.push((*tid, Source::new(Decoded::Sorted(calls.into_iter()), timebase)));
        }
    }
    let mut buf: Buffers = (Vec::with_capacity(SLAB), Vec::with_capacity(SLAB), Vec::with_capacity(SLAB));
    let (starts, ends, tids) = (&mut buf.0, &mut buf.1, &mut buf.2);
    let mut spare: Buffers = Default::default();
    // Hand over the full buffers; continue in the ones `flush` left behind.
    macro_rules! flush {
        () => {{
            std::mem::swap(&mut spare.0, starts);
            std::mem::swap(&mut spare.1, ends);
            std::mem::swap(&mut spare.2, tids);
            let r = flush(&mut spare);
            std::mem::swap(&mut spare.0, starts);
            std::mem::swap(&mut spare.1, ends);
            std::mem::swap(&mut spare.2, tids);
            r
        }};
    }
    // Heads of every source; ties go to the lower thread, as a stable merge would.
    let mut heads: Vec<Option<Call>> = sources.iter_mut().map(|(_, s)| s.next()).collect();
    if sources.len() == 1 {
        let (tid, src) = &mut sources[0];
        let mut next = heads[0];
        while let Some(c) = next {
            starts.push(c.start);
            ends.push(c.end);
            tids.push(*tid);
            if starts.len() == SLAB {
                flush!()?;
            }
            next = src.next();
        }
    } else if sources.len() == 2 {
        // Two threads: a plain two-way merge (ties to the first).
        let (mut a, mut b) = (heads[0], heads[1]);
        let (ta, tb) = (sources[0].0, sources[1].0);
        let (sa, sb) = sources.split_at_mut(1);
        let (sa, sb) = (&mut sa[0].1, &mut sb[0].1);
        loop {
            let (c, t) = match (a, b) {
                (Some(x), Some(y)) if y.start < x.start => {
                    b = sb.next();
                    (y, tb)
                }
                (Some(x), _) => {
                    a = sa.next();
                    (x, ta)
                }
                (None, Some(y)) => {
                    b = sb.next();
                    (y, tb)
                }
                (None, None) => break,
            };
            starts.push(c.start);
            ends.push(c.end);
            tids.push(t);
            if starts.len() == SLAB {
                flush!()?;
            }
        }
    } else if sources.len() <= 8 {
        loop {
            let mut best: Option<(usize, Call)> = None;
            for (i, h) in heads.iter().enumerate() {
                if let Some(c) = h {
                    if best.is_none_or(|(_, b)| c.start < b.start) {
                        best = Some((i, *c));
                    }
                }
            }
            let Some((i, c)) = best else { break };
            starts.push(c.start);
            ends.push(c.end);
            tids.push(sources[i].0);
            heads[i] = sources[i].1.next();
            if starts.len() == SLAB {
                flush!()?;
            }
        }
    } else {
        use std::cmp::Reverse;
        let mut heap: std::collections::BinaryHeap<Reverse<(i64, usize, i64)>> =
            heads.iter().enumerate().filter_map(|(i, h)| h.map(|c| Reverse((c.start, i, c.end)))).collect();
        while let Some(Reverse((start, i, end))) = heap.pop() {
            starts.push(start);
            ends.push(end);
            tids.push(sources[i].0);
            if let Some(c) = sources[i].1.next() {
                heap.push(Reverse((c.start, i, c.end)));
            }
            if starts.len() == SLAB {
                flush!()?;
            }
        }
    }
    if !starts.is_empty() {
        flush!()?;
    }
    Ok(())
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

/// Collect the threads' logs and statistics into per-region data, in registry order. The
/// calls stay packed (see `Calls`) with `timebase`, which converts recorded clock values to
/// `CLOCK_MONOTONIC` ns as they are decoded; the statistics are converted here. Regions with
/// neither completed nor open nor dropped calls are left out.
pub fn merge(names: &[String], mut threads: Vec<ThreadRecord>, timebase: &Timebase) -> (Vec<RegionData>, Vec<i64>) {
    threads.sort_by_key(|t| t.index);
    // Calls that end before they start (in clock units) are the one check of the conversion
    // that needs the calls; the packed logs count them as they are recorded.
    timebase.note_backwards(threads.iter().flat_map(|t| t.data.logs.iter()).map(|l| l.backwards()).sum());
    let shared = Arc::new(timebase.clone());
    let tables: Vec<Vec<(u32, Stats)>> = threads.iter().map(|t| t.data.stats.all()).collect();
    let recorded: Vec<usize> = (0..threads.len())
        .filter(|&i| {
            let d = &threads[i].data;
            !tables[i].is_empty() || d.logs.iter().any(|l| !l.is_empty()) || !d.open.is_empty() || d.dropped.iter().any(|&x| x > 0)
        })
        .collect();
    // Thread ids in the file are positions among the threads that recorded anything.
    let os_ids: Vec<i64> = recorded.iter().map(|&i| threads[i].os_tid).collect();
    let mut position = vec![-1i64; threads.len()];
    for (p, &i) in recorded.iter().enumerate() {
        position[i] = p as i64;
    }
    let mut per_region: Vec<Vec<(i64, Stats)>> = vec![Vec::new(); names.len()];
    for (i, table) in tables.into_iter().enumerate() {
        for (id, st) in table {
            if let Some(r) = per_region.get_mut(id as usize) {
                r.push((position[i], st.to_ns(timebase)));
            }
        }
    }

    let mut regions = Vec::new();
    for (id, name) in names.iter().enumerate() {
        let mut runs = Vec::new();
        let mut open_calls = 0u64;
        let mut dropped_calls = 0u64;
        for (i, t) in threads.iter_mut().enumerate() {
            if let Some(log) = t.data.logs.get_mut(id) {
                if !log.is_empty() {
                    runs.push((position[i], std::mem::take(log)));
                }
            }
            open_calls += t.data.open.iter().filter(|c| c.id as usize == id).count() as u64;
            dropped_calls += t.data.dropped.get(id).copied().unwrap_or(0);
        }
        let stats = std::mem::take(&mut per_region[id]);
        if runs.is_empty() && stats.is_empty() && open_calls == 0 && dropped_calls == 0 {
            continue;
        }
        regions.push(RegionData { name: name.clone(), calls: Calls::Packed(runs, shared.clone()), stats, open_calls, dropped_calls, source: None });
    }
    (regions, os_ids)
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
        let a = regions[0].columns();
        assert_eq!(a.starts, vec![1, 3, 5, 9]);
        assert_eq!(a.ends, vec![2, 4, 6, 10]);
        assert_eq!(a.thread_ids, vec![0, 1, 0, 1]);
        assert_eq!(regions[0].stats.iter().map(|(t, s)| (*t, s.count, s.total)).collect::<Vec<_>>(), vec![(0, 2, 2), (1, 2, 2)]);
        assert_eq!(regions[1].name, "b");
        assert_eq!(regions[1].columns().thread_ids, vec![0]);
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
        let c = regions[0].columns();
        assert_eq!(c.starts, vec![1, 2]);
        assert_eq!(c.ends, vec![4, 3]);
        assert_eq!(regions[0].open_calls, 1);
    }

    #[test]
    fn ticks_are_converted_at_merge() {
        // A 2 GHz TSC anchored at tick 1000 = 5000 ns and tick 21000 = 15000 ns.
        let anchor = |tick, ns| crate::clock::Anchor { tick, ns, half_width: 0 };
        let tb = Timebase::fit(vec![anchor(1000, 5000), anchor(21_000, 15_000)], Vec::new());
        let t0 = thread(0, 100, &[(0, 3000, 5000), (0, 2000, 2200)]);
        let (regions, _) = merge(&["a".to_string()], vec![t0], &tb);
        let c = regions[0].columns();
        assert_eq!(c.starts, vec![5500, 6000]);
        assert_eq!(c.ends, vec![5600, 7000]);
        // The statistics are converted too: 200 + 2000 ticks are 100 + 1000 ns.
        let st = regions[0].pooled();
        assert_eq!((st.count, st.total, st.min, st.max), (2, 1100, 100, 1000));
        assert_eq!(tb.report().status, "ok");
    }

    #[test]
    fn many_threads_merge_in_slabs() {
        let names = vec!["x".to_string()];
        let n = SLAB as i64 + 100;
        let threads: Vec<ThreadRecord> = (0..10u32)
            .map(|t| {
                let calls: Vec<(u32, i64, i64)> = (0..n / 10).map(|i| (0, i * 10 + t as i64, i * 10 + t as i64 + 1)).collect();
                thread(t, t as i64, &calls)
            })
            .collect();
        let (regions, _) = merge(&names, threads, &Timebase::monotonic());
        let c = regions[0].columns();
        assert_eq!(c.starts.len() as i64, n / 10 * 10);
        assert!(c.starts.is_sorted());
        assert_eq!(&c.thread_ids[..12], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]);
        assert_eq!(regions[0].pooled().count as usize, c.starts.len());
    }
}
