//! Collecting one process: its threads' logs and statistics become the per-region data of its
//! `RankProfile` (`merge`, in registry order). The calls stay packed as recorded
//! (`PackedRuns`) and are merged over the threads into slabs in start order, converted to
//! nanoseconds, only while they are written (`Merger`, the model's `SlabSource`).

use crate::calllog::{CallLog, Cursor};
use crate::clock::Timebase;
use crate::model::{Buffers, Call, Calls, PackedCalls, RegionData, SLAB, SlabSource, Stats};
use crate::recorder::ThreadData;
use std::mem::MaybeUninit;
use std::sync::Arc;

/// A region's calls as the threads recorded them: per recording thread (thread id, log), in
/// the clock's units, converted by the timebase while they are decoded.
#[derive(Debug)]
pub struct PackedRuns {
    pub runs: Vec<(i64, CallLog)>,
    pub timebase: Arc<Timebase>,
}

impl PackedCalls for PackedRuns {
    fn calls(&self) -> usize {
        self.runs.iter().map(|(_, log)| log.len()).sum()
    }

    fn bytes_reserved(&self) -> usize {
        self.runs.iter().map(|(_, log)| log.bytes_reserved()).sum()
    }

    fn heap_bytes(&self) -> usize {
        self.runs.iter().map(|(_, log)| log.heap_bytes()).sum()
    }

    fn merge(&self) -> Box<dyn SlabSource + Send + '_> {
        Box::new(Merger::new(&self.runs, &self.timebase))
    }
}

/// Calls a source decodes at a time: enough that the per-block work (a call into the cursor,
/// the conversion loop's setup) costs nothing per call, few enough to stay in L1.
const BLOCK: usize = 512;
// An empty slab has room for the merge of two blocks.
const _: () = assert!(SLAB >= 2 * BLOCK);

#[cfg(test)]
thread_local! {
    /// Tests: this thread merges on the paths every CPU and input takes (no AVX2 build, the
    /// clamped merge), to compare them with the fast ones.
    static BASELINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread merges on the baseline paths (tests only).
#[inline(always)]
fn baseline() -> bool {
    #[cfg(test)]
    return BASELINE.with(|b| b.get());
    #[cfg(not(test))]
    false
}

/// One thread's calls of a region during the merge, decoded a block at a time and converted to
/// nanoseconds (the one place where recorded call times are converted; the conversion keeps
/// the order, so merging converted starts is merging recorded ones).
struct Source<'a> {
    tid: i64,
    calls: Decoded<'a>,
    /// Starts and ends each move forward through the timebase's segments.
    to_ns: (crate::clock::Converter<'a>, crate::clock::Converter<'a>),
    /// The current block: calls `pos..len` are still to be merged.
    starts: Box<[i64]>,
    ends: Box<[i64]>,
    pos: usize,
    len: usize,
    /// The current block's starts are in order (checked as it is filled): `merge_exact` then
    /// needs no clamp of its reads.
    sorted: bool,
}

enum Decoded<'a> {
    Log(Cursor<'a>),
    /// The calls of a thread on which the region recursed, sorted by start; the next one.
    Sorted(Vec<Call>, usize),
}

impl<'a> Source<'a> {
    fn new(tid: i64, calls: Decoded<'a>, timebase: &'a Timebase) -> Source<'a> {
        // One element more than a block: `merge_exact` reads one past the calls it merges.
        let block = || vec![0i64; BLOCK + 1].into_boxed_slice();
        Source { tid, calls, to_ns: (timebase.converter(), timebase.converter()), starts: block(), ends: block(), pos: 0, len: 0, sorted: false }
    }

    /// True while calls are left, with at least one in the current block.
    #[inline(always)]
    fn ready(&mut self) -> bool {
        self.pos < self.len || self.refill()
    }

    #[inline(never)]
    fn refill(&mut self) -> bool {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && !baseline() {
            // SAFETY: the CPU has AVX2.
            return unsafe { self.refill_avx2() };
        }
        self.refill_here()
    }

    /// `refill` compiled for AVX2: the decoding, and the conversion's bounds and products,
    /// four calls at a time (the same Rust, the same results).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn refill_avx2(&mut self) -> bool {
        self.refill_here()
    }

    #[inline(always)]
    fn refill_here(&mut self) -> bool {
        let n = match &mut self.calls {
            Decoded::Log(cursor) => cursor.next_block(&mut self.starts[..BLOCK], &mut self.ends[..BLOCK]),
            Decoded::Sorted(calls, next) => {
                let take = (calls.len() - *next).min(BLOCK);
                for (i, c) in calls[*next..*next + take].iter().enumerate() {
                    (self.starts[i], self.ends[i]) = (c.start, c.end);
                }
                *next += take;
                take
            }
        };
        // Whether the starts are in order is found on the ticks (one pass, which also spares
        // the conversion its search for the block's extremes), then kept or checked again by
        // the conversion (`convert_in_place_ordered`).
        let in_order = crate::clock::in_order_values(&self.starts[..n]);
        self.sorted = self.to_ns.0.convert_in_place_ordered(&mut self.starts[..n], in_order);
        self.to_ns.1.convert_in_place(&mut self.ends[..n]);
        // The bound after the block (see `merge_exact`).
        self.starts[n] = i64::MAX;
        (self.pos, self.len) = (0, n);
        n > 0
    }

    /// Start of the next call (only when `ready`).
    #[inline(always)]
    fn head(&self) -> i64 {
        self.starts[self.pos]
    }
}
/// The merge of a region's packed per-thread logs into slabs in start order, one slab at a
/// time (`next_slab`), so that the merge can move between threads between slabs.
struct Merger<'a> {
    sources: Vec<Source<'a>>,
    /// More than two sources: their heads (start, source), ties to the lower source.
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(i64, usize)>>,
}

impl<'a> Merger<'a> {
    fn new(runs: &'a [(i64, CallLog)], timebase: &'a Timebase) -> Merger<'a> {
        let mut sources: Vec<Source<'a>> = Vec::with_capacity(runs.len());
        for (tid, log) in runs {
            if log.is_empty() {
                continue;
            }
            let calls = if log.is_sorted() {
                Decoded::Log(log.cursor())
            } else {
                let mut cur = log.cursor();
                let mut calls: Vec<Call> = std::iter::from_fn(|| cur.next()).collect();
                calls.sort_by_key(|c| c.start);
                Decoded::Sorted(calls, 0)
            };
            sources.push(Source::new(*tid, calls, timebase));
        }
        let mut heap = std::collections::BinaryHeap::new();
        if sources.len() > 2 {
            heap = sources.iter_mut().enumerate().filter_map(|(i, s)| s.ready().then(|| std::cmp::Reverse((s.head(), i)))).collect();
        }
        Merger { sources, heap }
    }
}

impl SlabSource for Merger<'_> {
    /// Fill `out` (emptied first) with the next calls, at most `SLAB`; false when none are left.
    fn next_slab(&mut self, out: &mut Buffers) -> bool {
        out.0.clear();
        out.1.clear();
        out.2.clear();
        let mut out = Out(out);
        match self.sources.as_mut_slice() {
            [] => {}
            [one] => out.take_rest(one),
            [a, b] => {
                // Two threads: a two-way merge, block by block.
                while out.room() > 0 {
                    if !a.ready() {
                        out.take_rest(b);
                        break;
                    }
                    if !b.ready() {
                        out.take_rest(a);
                        break;
                    }
                    if !out.merge_two_blocks(a, b) {
                        break;
                    }
                }
            }
            many => {
                while out.room() > 0 {
                    let Some(std::cmp::Reverse((start, i))) = self.heap.pop() else { break };
                    let s = &mut many[i];
                    let (end, tid) = (s.ends[s.pos], s.tid);
                    s.pos += 1;
                    if s.ready() {
                        self.heap.push(std::cmp::Reverse((s.head(), i)));
                    }
                    out.push(start, end, tid);
                }
            }
        }
        !out.0.0.is_empty()
    }
}

/// The slab being filled.
struct Out<'b>(&'b mut Buffers);

impl Out<'_> {
    /// Room left in the slab.
    #[inline(always)]
    fn room(&self) -> usize {
        SLAB.saturating_sub(self.0.0.len())
    }

    #[inline]
    fn push(&mut self, start: i64, end: i64, tid: i64) {
        self.0.0.push(start);
        self.0.1.push(end);
        self.0.2.push(tid);
    }

    /// Move calls of `src`'s block to the slab, as many as fit.
    fn take_block(&mut self, src: &mut Source<'_>) {
        let k = (src.len - src.pos).min(self.room());
        self.0.0.extend_from_slice(&src.starts[src.pos..src.pos + k]);
        self.0.1.extend_from_slice(&src.ends[src.pos..src.pos + k]);
        self.0.2.extend(std::iter::repeat_n(src.tid, k));
        src.pos += k;
    }

    /// What is left of `src`, as far as it fits.
    fn take_rest(&mut self, src: &mut Source<'_>) {
        while self.room() > 0 && src.ready() {
            self.take_block(src);
        }
    }

    /// Merge what can be merged of the current blocks of `a` and `b` into the slab (ties to
    /// `a`): all of the block whose last start is smaller (or of `a` on a tie), and of the other
    /// the calls that start before it ends (later blocks of that source cannot precede them).
    /// False, with nothing merged, when they do not fit in the slab's room.
    fn merge_two_blocks(&mut self, a: &mut Source<'_>, b: &mut Source<'_>) -> bool {
        let (a_s, b_s) = (&a.starts[a.pos..a.len], &b.starts[b.pos..b.len]);
        let (a_last, b_last) = (a_s[a_s.len() - 1], b_s[b_s.len() - 1]);
        let (ka, kb) = if a_last <= b_last {
            (a_s.len(), b_s.partition_point(|&y| y < a_last))
        } else {
            (a_s.partition_point(|&x| x <= b_last), b_s.len())
        };
        let n = ka + kb;
        // An empty slab has room for two blocks.
        if n > self.room() {
            return false;
        }
        let (out_s, out_e, out_t) = (&mut self.0.0, &mut self.0.1, &mut self.0.2);
        out_s.reserve(n);
        out_e.reserve(n);
        out_t.reserve(n);
        let merge = if a.sorted && b.sorted && !baseline() { merge_exact::<false> } else { merge_exact::<true> };
        merge(
            (&a.starts[a.pos..=a.pos + ka], &a.ends[a.pos..=a.pos + ka], a.tid),
            (&b.starts[b.pos..=b.pos + kb], &b.ends[b.pos..=b.pos + kb], b.tid),
            (&mut out_s.spare_capacity_mut()[..n], &mut out_e.spare_capacity_mut()[..n], &mut out_t.spare_capacity_mut()[..n]),
        );
        let len = out_s.len() + n;
        // SAFETY: `merge_exact` wrote the first `n` spare elements of each buffer.
        unsafe {
            out_s.set_len(len);
            out_e.set_len(len);
            out_t.set_len(len);
        }
        a.pos += ka;
        b.pos += kb;
        true
    }
}

/// Calls of one source for `merge_exact`: starts, ends, thread id.
type Run<'a> = (&'a [i64], &'a [i64], i64);
type OutCols<'a> = (&'a mut [MaybeUninit<i64>], &'a mut [MaybeUninit<i64>], &'a mut [MaybeUninit<i64>]);

/// How many calls of `a` are among the first `k` of the merge of `a` and `b` (ties to `a`):
/// a binary search along the merge path.
fn merge_split(a: &[i64], b: &[i64], k: usize) -> usize {
    let (mut lo, mut hi) = (k.saturating_sub(b.len()), k.min(a.len()));
    while lo < hi {
        let mid = (lo + hi) / 2;
        // a[mid] comes before b[k - mid - 1]: more than `mid` calls of `a` are taken.
        if a[mid] <= b[k - mid - 1] {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Merge all calls of `a` and `b` (each in start order) into `out` (exactly as long as both
/// together), ties to `a`.
///
/// Each slice of `a` and `b` holds one element more than its calls, a bound that stops the
/// merge from taking past the end: every start of `b` is below `a`'s bound, and every start of
/// `a` is at most `b`'s bound (the next unmerged call of the other source, or `i64::MAX` after
/// a block; see `merge_two_blocks`). So a step needs no test for the end of either side.
///
/// The output is cut in two halves along the merge path and both are merged in one loop
/// without branches: which thread comes next is a coin toss when two threads record at once,
/// so a branch would be mispredicted half the time, and the two halves are two independent
/// chains of load, compare and index update, which the CPU runs side by side.
///
/// `CLAMP` keeps every read inside the slices whatever the input (a conditional move on each
/// index); without it the input must be in order, each side with its bound (the caller checked
/// the blocks' order: no clamps, two registers fewer in a loop short of them).
fn merge_exact<const CLAMP: bool>(a: Run<'_>, b: Run<'_>, out: OutCols<'_>) {
    let (na, nb) = (a.0.len() - 1, b.0.len() - 1);
    assert!(a.1.len() == na + 1 && b.1.len() == nb + 1);
    let n = na + nb;
    assert!(out.0.len() == n && out.1.len() == n && out.2.len() == n);
    debug_assert!(a.0[..na].iter().all(|&x| x <= b.0[nb]) && b.0[..nb].iter().all(|&y| y < a.0[na]));
    let half = n / 2;
    let p = merge_split(&a.0[..na], &b.0[..nb], half);
    let (ta, tb) = (a.2, b.2);
    let (a_s, a_e, b_s, b_e) = (a.0.as_ptr(), a.1.as_ptr(), b.0.as_ptr(), b.1.as_ptr());
    let (o_s, o_e, o_t) = (out.0.as_mut_ptr().cast::<i64>(), out.1.as_mut_ptr().cast::<i64>(), out.2.as_mut_ptr().cast::<i64>());
    // Half 1 is the first `half` steps of the merge from the start; half 2 the rest, from
    // where the merge path says half 1 ends.
    let (mut i1, mut j1, mut i2, mut j2) = (0, 0, p, half - p);
    // One merge step: the next call of `b` if it starts before the next of `a`. Both
    // candidates are loaded, so that choosing is a conditional move, not a branch.
    macro_rules! step {
        ($i:ident, $j:ident, $o:expr) => {{
            // SAFETY: the reads stay in the slices: the bounds keep i <= na and j <= nb for
            // input in order (which the caller checked when it asks for no clamp), and the
            // clamp, a conditional move, keeps any other input in bounds; every output index is
            // below n.
            unsafe {
                let (i, j) = if CLAMP { ($i.min(na), $j.min(nb)) } else { ($i, $j) };
                let (x, y, xe, ye) = (*a_s.add(i), *b_s.add(j), *a_e.add(i), *b_e.add(j));
                let take_b = y < x;
                *o_s.add($o) = if take_b { y } else { x };
                *o_e.add($o) = if take_b { ye } else { xe };
                *o_t.add($o) = if take_b { tb } else { ta };
                $j += take_b as usize;
                $i += !take_b as usize;
            }
        }};
    }
    for o in 0..half {
        step!(i1, j1, o);
        step!(i2, j2, half + o);
    }
    if n % 2 == 1 {
        step!(i2, j2, n - 1);
    }
    assert!(i1 == p && j1 == half - p && i2 == na && j2 == nb, "merge overran its bounds");
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
/// Also returns the threads that recorded anything, as (thread index, Linux thread id) in the
/// order of the file's thread ids (a thread's id is its position there).
pub fn merge(names: &[String], mut threads: Vec<ThreadRecord>, timebase: &Timebase) -> (Vec<RegionData>, Vec<(u32, i64)>) {
    let (mut regions, kept) = statistics(names, &mut threads, timebase);
    attach_calls(names, &mut regions, threads, timebase);
    (regions, kept)
}

/// The first half of `merge`: every region's statistics, open and dropped calls, with no calls
/// (the threads keep their logs, for `attach_calls`). Sorts `threads` by index.
pub fn statistics(names: &[String], threads: &mut [ThreadRecord], timebase: &Timebase) -> (Vec<RegionData>, Vec<(u32, i64)>) {
    threads.sort_by_key(|t| t.index);
    // Calls that end before they start (in clock units) are the one check of the conversion
    // that needs the calls; the packed logs count them as they are recorded.
    timebase.note_backwards(threads.iter().flat_map(|t| t.data.logs().iter()).map(|l| l.backwards()).sum());
    let tables: Vec<Vec<(u32, Stats)>> = threads.iter().map(|t| t.data.stats().all()).collect();
    let recorded: Vec<usize> = (0..threads.len())
        .filter(|&i| {
            let d = &threads[i].data;
            !tables[i].is_empty() || d.logs().iter().any(|l| !l.is_empty()) || !d.open.is_empty() || d.dropped.iter().any(|&x| x > 0)
        })
        .collect();
    // Thread ids in the file are positions among the threads that recorded anything.
    let kept: Vec<(u32, i64)> = recorded.iter().map(|&i| (threads[i].index, threads[i].os_tid)).collect();
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
    // Ids that share a name are one region (see `registry::name_groups`).
    for (name, ids) in crate::registry::name_groups(names) {
        let mut any_calls = false;
        let mut open_calls = 0u64;
        let mut dropped_calls = 0u64;
        for &id in &ids {
            let id = id as usize;
            for t in threads.iter() {
                any_calls |= t.data.logs().get(id).is_some_and(|log| !log.is_empty());
                open_calls += t.data.open.iter().filter(|c| c.id as usize == id).count() as u64;
                dropped_calls += t.data.dropped.get(id).copied().unwrap_or(0);
            }
        }
        let stats = if ids.len() == 1 {
            std::mem::take(&mut per_region[ids[0] as usize])
        } else {
            // One entry per thread, over the ids.
            let mut by_thread: std::collections::BTreeMap<i64, Stats> = Default::default();
            for &id in &ids {
                for (t, st) in std::mem::take(&mut per_region[id as usize]) {
                    by_thread.entry(t).or_default().merge(&st);
                }
            }
            by_thread.into_iter().collect()
        };
        if !any_calls && stats.is_empty() && open_calls == 0 && dropped_calls == 0 {
            continue;
        }
        regions.push(RegionData { name: name.to_string(), stats, open_calls, dropped_calls, ..Default::default() });
    }
    (regions, kept)
}

/// The second half of `merge`: the threads' logs (sorted by index, as `statistics` left them)
/// become the packed calls of `regions` (as `statistics` made them).
pub fn attach_calls(names: &[String], regions: &mut [RegionData], mut threads: Vec<ThreadRecord>, timebase: &Timebase) {
    let shared = Arc::new(timebase.clone());
    // The file's thread ids, as `statistics` numbered them.
    let mut position = vec![-1i64; threads.len()];
    let mut next = 0i64;
    for (i, t) in threads.iter().enumerate() {
        let d = &t.data;
        if !d.stats().all().is_empty() || d.logs().iter().any(|l| !l.is_empty()) || !d.open.is_empty() || d.dropped.iter().any(|&x| x > 0) {
            position[i] = next;
            next += 1;
        }
    }
    let at: std::collections::HashMap<String, usize> = regions.iter().enumerate().map(|(i, r)| (r.name.clone(), i)).collect();
    for (name, ids) in crate::registry::name_groups(names) {
        let Some(&k) = at.get(name) else { continue };
        let mut runs = Vec::new();
        for &id in &ids {
            for (i, t) in threads.iter_mut().enumerate() {
                if let Some(log) = t.data.logs_mut().get_mut(id as usize) {
                    if !log.is_empty() {
                        runs.push((position[i], std::mem::take(log)));
                    }
                }
            }
        }
        regions[k].calls = Calls::Packed(Box::new(PackedRuns { runs, timebase: shared.clone() }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Columns;

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
        let (regions, kept) = merge(&names, vec![t1, t0], &Timebase::monotonic());
        assert_eq!(kept, vec![(0, 100), (1, 200)]);
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
    fn ids_of_one_name_are_one_region() {
        let names = vec!["f".to_string(), "g".to_string(), "f".to_string()];
        let t0 = thread(0, 100, &[(0, 1, 2), (2, 3, 4), (1, 5, 6)]);
        let t1 = thread(1, 200, &[(2, 0, 9)]);
        let (regions, _) = merge(&names, vec![t0, t1], &Timebase::monotonic());
        assert_eq!(regions.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), vec!["f", "g"]);
        let f = regions[0].columns();
        assert_eq!((f.starts, f.ends, f.thread_ids), (vec![0, 1, 3], vec![9, 2, 4], vec![1, 0, 0]));
        assert_eq!(regions[0].stats.iter().map(|(t, s)| (*t, s.count, s.total)).collect::<Vec<_>>(), vec![(0, 2, 2), (1, 1, 9)]);
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

    /// Every way of handing out a region's calls (one slab buffer, the pipelined decoder, the
    /// parallel workers) gives a stable merge of the threads' calls by start (ties to the
    /// lower thread, then recording order): one to five threads, ties within and across
    /// threads, escaped calls (long gaps and durations), a thread on which the region
    /// recursed, a TSC timebase, and regions large enough for the threaded paths.
    #[test]
    fn every_path_gives_the_stable_merge() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let anchor = |tick, ns| crate::clock::Anchor { tick, ns, half_width: 0 };
        let tsc = Timebase::fit((0..40i64).map(|k| anchor(k * 50_000_000 + k * k, 7_000 + k * 19_230_000)).collect(), Vec::new());
        for (threads, per_thread, recursing) in [(1, 5_000, false), (2, 300_000, false), (2, 3_000, true), (3, 200_000, false), (5, 4_000, true), (2, 300_000, true)] {
            for timebase in [Timebase::monotonic(), tsc.clone()] {
                let mut runs = Vec::new();
                let mut all: Vec<(i64, i64, i64)> = Vec::new();
                for t in 0..threads {
                    let mut log = CallLog::new(t as u32, 0);
                    let mut s = 1_000 + (rnd() % 3) as i64;
                    let mut mine = Vec::new();
                    for i in 0..per_thread {
                        s += match rnd() % 1000 {
                            0 => 1 << 33, // a gap too long to pack
                            r => (r % 3) as i64,
                        };
                        let d = if rnd() % 997 == 0 { 1 << 33 } else { (rnd() % 40) as i64 };
                        // A recursive inner call starts after its caller but is logged first.
                        let start = if recursing && t == threads - 1 && i % 5 == 4 { s - 2 } else { s };
                        log.push(Call { start, end: start + d });
                        mine.push((start, start + d));
                    }
                    // A thread's calls in recorded start order (a recursing thread's are sorted
                    // by their ticks: two ticks can convert to the same ns).
                    mine.sort_by_key(|c| c.0);
                    all.extend(mine.iter().map(|&(s, e)| (timebase.to_ns(s), timebase.to_ns(e), t as i64)));
                    runs.push((t as i64, log));
                }
                // The concatenation in thread order, stably sorted by start.
                all.sort_by_key(|c| c.0);
                let region = RegionData { calls: Calls::Packed(Box::new(PackedRuns { runs, timebase: Arc::new(timebase.clone()) })), ..Default::default() };
                let case = format!("{threads} threads x {per_thread}, recursing {recursing}, {:?}", timebase.report().clock);
                // The large cases take the threaded paths (at 4 bytes a short call).
                assert_eq!(region.shares_its_merge(), per_thread * threads >= 600_000, "{case}");
                let want = Columns {
                    starts: all.iter().map(|c| c.0).collect(),
                    ends: all.iter().map(|c| c.1).collect(),
                    thread_ids: all.iter().map(|c| c.2).collect(),
                };
                assert!(region.columns() == want, "one buffer: {case}");
                // The baseline build of the refill and the clamped merge give the same.
                BASELINE.with(|b| b.set(true));
                let baseline = region.columns();
                BASELINE.with(|b| b.set(false));
                assert!(baseline == want, "one buffer, baseline paths: {case}");
                let mut piped = Columns::default();
                region
                    .for_each_slab_pipelined::<()>(|s| {
                        piped.starts.extend_from_slice(s.starts);
                        piped.ends.extend_from_slice(s.ends);
                        piped.thread_ids.extend_from_slice(s.thread_ids);
                        Ok(())
                    })
                    .unwrap();
                assert!(piped == want, "pipelined: {case}");
                for workers in [2, 3] {
                    let n = want.starts.len();
                    let got = parking_lot::Mutex::new(Columns { starts: vec![0; n], ends: vec![0; n], thread_ids: vec![-1; n] });
                    let slabs = std::sync::atomic::AtomicUsize::new(0);
                    region
                        .for_each_slab_parallel::<(), ()>(workers, || (), |_, place, s| {
                            let mut g = got.lock();
                            let (at, k) = (place.at, s.starts.len());
                            assert_eq!(place.prev_start, at.checked_sub(1).map(|i| want.starts[i]), "{case}");
                            assert_eq!(place.first, Some(Call { start: want.starts[0], end: want.ends[0] }), "{case}");
                            assert!(k > 0 && k <= SLAB);
                            g.starts[at..at + k].copy_from_slice(s.starts);
                            g.ends[at..at + k].copy_from_slice(s.ends);
                            g.thread_ids[at..at + k].copy_from_slice(s.thread_ids);
                            slabs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            Ok(())
                        })
                        .unwrap();
                    assert!(got.into_inner() == want, "{workers} workers: {case}");
                    assert!(slabs.into_inner() >= n / SLAB, "{case}");
                }
            }
        }
    }

    /// A worker whose write fails stops the others and the error comes back.
    #[test]
    fn a_failed_write_stops_the_parallel_workers() {
        let mut log = CallLog::new(0, 0);
        (0..400_000i64).for_each(|i| log.push(Call { start: i * 10, end: i * 10 + 3 }));
        let region = RegionData { calls: Calls::Packed(Box::new(PackedRuns { runs: vec![(0, log)], timebase: Arc::new(Timebase::monotonic()) })), ..Default::default() };
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let r = region.for_each_slab_parallel(2, || (), |_, place, _| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if place.at >= 2 * SLAB { Err(place.at) } else { Ok(()) }
        });
        assert!(r.is_err());
        // The slabs before the failure, the failing one, and at most one the other worker had
        // taken already.
        assert!(calls.into_inner() <= 5);
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
