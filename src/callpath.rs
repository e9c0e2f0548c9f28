//! Call paths of one process at finalize (the model's `CallPaths`): each thread's tree from
//! its recorded calls (one pass over them in start order, merged over the thread's regions
//! while they are decoded, so nothing is copied but a recursing region's calls), or, where
//! calls are not kept (the aggregate layout), the tree the recorder kept.

use crate::calllog::{CallLog, Cursor};
use crate::clock::Timebase;
use crate::model::callpath::Sweeper;
use crate::model::{Call, CallPaths, PathTree};
use crate::profile::ThreadRecord;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// The call paths of `threads` (named by their thread index; see `CallPaths::renumber_threads`)
/// with `names` the registry's region names, times converted by `timebase`.
pub fn collect(names: &[String], threads: &[ThreadRecord], timebase: &Timebase, wall_ns: i64) -> CallPaths {
    let started = std::time::Instant::now();
    let paths = collect_inner(names, threads, timebase, wall_ns);
    LAST_BUILD_NS.store(started.elapsed().as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
    paths
}

/// How long the last `collect` took (ns), for the finalize note.
pub static LAST_BUILD_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Of the threads of the last `collect` whose calls were kept: how many trees came from
/// their regions' statistics (`from_parents`), and how many were swept from the calls.
pub static LAST_FROM_STATISTICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
pub static LAST_SWEPT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// How the last `collect` built the trees, for the finalize notes: "N thread(s) from their
/// regions' statistics, M swept from their calls on K thread(s)".
pub fn last_build_note() -> String {
    let load = |a: &std::sync::atomic::AtomicUsize| a.load(std::sync::atomic::Ordering::Relaxed);
    format!(
        "{} thread(s) from their regions' statistics, {} swept from their calls on {} thread(s)",
        load(&LAST_FROM_STATISTICS),
        load(&LAST_SWEPT),
        load(&LAST_BUILD_THREADS)
    )
}

/// On how many threads the last `collect` built the trees.
pub static LAST_BUILD_THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);

fn collect_inner(names: &[String], threads: &[ThreadRecord], timebase: &Timebase, wall_ns: i64) -> CallPaths {
    let mut out = CallPaths { wall_ns, ..Default::default() };
    let mut index: HashMap<u32, u32> = HashMap::new();
    let mut order: Vec<&ThreadRecord> = threads.iter().collect();
    order.sort_by_key(|t| t.index);
    // The threads that kept their calls: their trees are built side by side. A track's calls
    // nest in nothing (`ThreadData::track`): each is at the top.
    let swept = |t: &ThreadRecord| t.data.keep_calls && !t.data.track;
    // A thread whose calls each sit on their region's one path needs no pass over them (a clock
    // that misbehaved so far: the calls decide, as the sweep reads them).
    let clock_ok = timebase.problems().is_empty();
    let mut direct: Vec<Option<PathTree>> = order.iter().map(|t| if swept(t) && clock_ok { from_parents(&t.data) } else { None }).collect();
    let from_statistics = direct.iter().filter(|d| d.is_some()).count();
    LAST_FROM_STATISTICS.store(from_statistics, std::sync::atomic::Ordering::Relaxed);
    LAST_SWEPT.store(order.iter().filter(|t| swept(t)).count() - from_statistics, std::sync::atomic::Ordering::Relaxed);
    let logs: Vec<&[CallLog]> = order.iter().zip(&direct).map(|(t, d)| if swept(t) && d.is_none() { t.data.logs() } else { &[][..] }).collect();
    let mut built = build_all(&logs);
    for (b, d) in built.iter_mut().zip(direct.iter_mut()) {
        if let Some(tree) = d.take() {
            *b = tree;
        }
    }
    for (k, t) in order.iter().enumerate() {
        if t.data.track && t.data.keep_calls {
            built[k] = flat_from_logs(t.data.logs());
        }
        let tree = if t.data.keep_calls { &built[k] } else { &t.data.paths };
        if tree.is_empty() {
            continue;
        }
        // Names in order of first use.
        let mut used = std::mem::take(&mut out.names);
        let resolve = |r: u32| {
            *index.entry(r).or_insert_with(|| {
                used.push(names.get(r as usize).cloned().unwrap_or_else(|| format!("region{r}")));
                (used.len() - 1) as u32
            })
        };
        tree.append_to(&mut out, t.index as i64, resolve, |ticks| timebase.duration_ns(ticks));
        out.names = used;
    }
    built.clear();
    out
}

/// A thread's tree from its regions' statistics, when the recorder saw every call of each
/// region made inside calls of one same region (`ThreadData::on_one_path`): then each region
/// has one node, under its enclosing region's, with the region's calls and total time, and
/// exclusive time less its children's, in the order of the regions' first calls, which is
/// the sweep's tree node for node. None (the calls decide) when anything does not hold up: a
/// region's calls not all in its log (the statistics counted more), a region with no noted
/// enclosing region (logs read back from a file), calls still open that enclose recorded ones
/// (the sweep does not see them), recursion.
pub fn from_parents(d: &crate::recorder::ThreadData) -> Option<PathTree> {
    use crate::calllog::{PARENT_TOP, PARENT_UNSET};
    if !d.on_one_path() {
        return None;
    }
    let logs = d.logs();
    let mut totals = vec![(0u64, 0i64); logs.len()];
    for (id, st) in d.stats().all() {
        // A call of zero ticks or less may sort before its enclosing call in the sweep.
        if st.count > 0 && st.min <= 0 {
            return None;
        }
        if let Some(t) = totals.get_mut(id as usize) {
            *t = (st.count, st.total);
        }
    }
    // A call open at the end encloses calls recorded inside it that the sweep puts above it:
    // only a region with no call recorded may be open (its calls' children are at the top).
    let open_region = |r: u32| d.open.iter().any(|c| c.id == r);
    if d.open.iter().any(|c| logs.get(c.id as usize).is_some_and(|l| !l.is_empty())) {
        return None;
    }
    // (first call's start, longer first, region, enclosing region or PARENT_TOP)
    let mut firsts: Vec<(i64, Reverse<i64>, u32, u32)> = Vec::new();
    for (id, log) in logs.iter().enumerate().filter(|(_, l)| !l.is_empty()) {
        let first = log.cursor().next()?;
        let calls = log.len() as u64;
        if log.parent == PARENT_UNSET || !log.is_sorted() || totals[id].0 != calls {
            return None;
        }
        let parent = match log.parent {
            PARENT_TOP => PARENT_TOP,
            p if logs.get(p as usize).is_some_and(|l| !l.is_empty()) => p,
            p if open_region(p) => PARENT_TOP,
            _ => return None,
        };
        firsts.push((first.start, Reverse(first.end), id as u32, parent));
    }
    firsts.sort_unstable();
    let mut tree = PathTree::default();
    let mut node_of = vec![crate::model::callpath::NO_NODE; logs.len()];
    let mut exclusive: Vec<i64> = totals.iter().map(|t| t.1).collect();
    for &(_, _, id, parent) in &firsts {
        if parent != PARENT_TOP {
            let p = parent as usize;
            exclusive[p] = exclusive[p].wrapping_sub(totals[id as usize].1);
        }
    }
    for &(_, _, id, parent) in &firsts {
        // An enclosing region's first call comes before those inside it: a region whose
        // enclosing region has no node yet is recursion (or a clock out of order).
        let parent_node = if parent == PARENT_TOP { crate::model::callpath::NO_NODE } else { node_of[parent as usize] };
        if parent != PARENT_TOP && parent_node == crate::model::callpath::NO_NODE {
            return None;
        }
        let (calls, total) = totals[id as usize];
        node_of[id as usize] = tree.push_node(parent_node, id, calls, total, exclusive[id as usize])?;
    }
    Some(tree)
}

/// Calls below which a thread's tree is not worth a thread of its own.
const PARALLEL_CALLS: usize = 1 << 18;

/// Each thread's tree from its logs, on up to as many threads as there are CPUs.
fn build_all(logs: &[&[CallLog]]) -> Vec<PathTree> {
    let calls = |l: &[CallLog]| l.iter().map(CallLog::len).sum::<usize>();
    let big = logs.iter().filter(|l| calls(l) >= PARALLEL_CALLS).count();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(big);
    let on = |n: usize| LAST_BUILD_THREADS.store(n, std::sync::atomic::Ordering::Relaxed);
    on(1);
    if workers < 2 {
        return logs.iter().map(|l| from_logs(l)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    // Each tree in a slot of its own (no lock: see below).
    let results: Vec<std::sync::OnceLock<PathTree>> = (0..logs.len()).map(|_| std::sync::OnceLock::new()).collect();
    let work = || {
        loop {
            let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(l) = logs.get(k) else { break };
            let _ = results[k].set(from_logs(l));
        }
    };
    let taken = |results: Vec<std::sync::OnceLock<PathTree>>| results.into_iter().map(|r| r.into_inner().unwrap_or_default()).collect();
    // At unload, at exit and after a signal no thread may be started (see
    // `model::helper_threads_allowed`): the calling thread builds them, after a signal with the
    // signal watcher (started at setup), which takes trees too while it waits for the write.
    // Nothing the work does may park on a lock: a parking thread's first park registers a
    // thread-local destructor, which takes the dynamic loader's lock.
    if !crate::model::helper_threads_allowed() {
        on(crate::signals::lend(&work));
        return taken(results);
    }
    std::thread::scope(|s| {
        // Helpers where threads can be made (a failed spawn is no error: fewer helpers); the
        // calling thread works too.
        let mut n = 1;
        for _ in 1..workers {
            if crate::model::workers::spawn_apart(s, "sp-callpaths", work).is_none() {
                break;
            }
            n += 1;
        }
        on(n);
        work();
    });
    taken(results)
}

/// A track's tree from its logs: every call at the top, inside nothing.
fn flat_from_logs(logs: &[CallLog]) -> PathTree {
    let mut tree = PathTree::default();
    for (id, log) in logs.iter().enumerate().filter(|(_, l)| !l.is_empty()) {
        let (node, _) = tree.enter(crate::model::callpath::NO_NODE, id as u32);
        let mut c = log.cursor();
        while let Some(call) = c.next() {
            let d = call.end.wrapping_sub(call.start);
            tree.add(node, false, d, d);
        }
    }
    tree
}

/// Calls decoded at a time per region (a power of two: indices are masked into the block).
const BLOCK: usize = 512;

/// One region's calls on one thread, in start order, a block at a time.
struct Source<'a> {
    calls: Decoded<'a>,
    region: u32,
    starts: Box<[i64; BLOCK]>,
    ends: Box<[i64; BLOCK]>,
    pos: usize,
    len: usize,
    /// Calls decoded so far and their durations in all (the sweep's `totals`).
    calls_seen: u64,
    duration_seen: i64,
}

enum Decoded<'a> {
    Log(Cursor<'a>),
    /// The calls of a region that recursed (not in start order as logged), sorted.
    Sorted(Vec<Call>, usize),
}

impl Source<'_> {
    /// True while calls are left, with at least one in the current block.
    #[inline(always)]
    fn ready(&mut self) -> bool {
        self.pos < self.len || self.refill()
    }

    /// The call at `pos` (only when `ready`).
    #[inline(always)]
    fn at(&self, i: usize) -> (i64, i64) {
        (self.starts[i % BLOCK], self.ends[i % BLOCK])
    }

    #[inline(never)]
    fn refill(&mut self) -> bool {
        self.pos = 0;
        self.len = match &mut self.calls {
            Decoded::Log(c) => c.next_block(&mut self.starts[..], &mut self.ends[..]),
            Decoded::Sorted(v, at) => {
                let n = (v.len() - *at).min(BLOCK);
                for (i, c) in v[*at..*at + n].iter().enumerate() {
                    (self.starts[i], self.ends[i]) = (c.start, c.end);
                }
                *at += n;
                n
            }
        };
        let n = self.len.min(BLOCK);
        self.calls_seen += n as u64;
        self.duration_seen = self.starts[..n].iter().zip(&self.ends[..n]).fold(self.duration_seen, |d, (s, e)| d.wrapping_add(e.wrapping_sub(*s)));
        self.len > 0
    }

    /// Sweep every call left (after what `out` holds).
    fn sweep_rest(&mut self, out: &mut Out, sw: &mut Sweeper<'_>) {
        out.flush(sw);
        let regions = [self.region; BLOCK];
        while self.ready() {
            let (p, n) = (self.pos, self.len);
            sw.block(&self.starts[p..n], &self.ends[p..n], &regions[p..n]);
            self.pos = n;
        }
    }
}

/// Merged calls waiting to be swept (a power of two, at least a block).
const OUT: usize = 1024;

/// Calls merged in the sweep's order, swept a buffer at a time: merging and sweeping each in a
/// loop of their own keep their variables in registers.
struct Out {
    starts: Box<[i64; OUT]>,
    ends: Box<[i64; OUT]>,
    regions: Box<[u32; OUT]>,
    len: usize,
}

impl Out {
    fn new() -> Out {
        Out { starts: Box::new([0; OUT]), ends: Box::new([0; OUT]), regions: Box::new([0; OUT]), len: 0 }
    }

    fn flush(&mut self, sw: &mut Sweeper<'_>) {
        let n = self.len;
        sw.block(&self.starts[..n], &self.ends[..n], &self.regions[..n]);
        self.len = 0;
    }

    /// Room for `n` more (flushing if need be; `n` at most `OUT`).
    #[inline(always)]
    fn make_room(&mut self, n: usize, sw: &mut Sweeper<'_>) {
        if OUT - self.len < n {
            self.flush(sw);
        }
    }

    #[inline(always)]
    fn put(&mut self, (start, end): (i64, i64), region: u32, sw: &mut Sweeper<'_>) {
        self.make_room(1, sw);
        let i = self.len % OUT;
        (self.starts[i], self.ends[i], self.regions[i]) = (start, end, region);
        self.len += 1;
    }
}

/// A thread's tree from its logs (indexed by region id), in the logs' units: the logs merged
/// by start (ties: the longer call first, then the lower region) and swept (the model's
/// `sweep`, as `Sweeper`). One region is swept as it is decoded; two are merged without
/// branches, block by block; a few by a scan of their next calls, more through a heap.
fn from_logs(logs: &[CallLog]) -> PathTree {
    let mut tree = PathTree::default();
    let mut sources: Vec<Source<'_>> = Vec::new();
    for (id, log) in logs.iter().enumerate() {
        if log.is_empty() {
            continue;
        }
        let calls = if log.is_sorted() {
            Decoded::Log(log.cursor())
        } else {
            let mut calls: Vec<Call> = Vec::with_capacity(log.len());
            let mut c = log.cursor();
            while let Some(call) = c.next() {
                calls.push(call);
            }
            calls.sort_by_key(|c| (c.start, Reverse(c.end)));
            Decoded::Sorted(calls, 0)
        };
        sources.push(Source { calls, region: id as u32, starts: Box::new([0; BLOCK]), ends: Box::new([0; BLOCK]), pos: 0, len: 0, calls_seen: 0, duration_seen: 0 });
    }
    let mut sw = Sweeper::new(&mut tree, logs.len());
    let mut out = Out::new();
    match sources.as_mut_slice() {
        [] => {}
        [one] => one.sweep_rest(&mut out, &mut sw),
        [a, b] => merge_two(a, b, &mut out, &mut sw),
        few if few.len() <= FEW => merge_few(few, &mut out, &mut sw),
        many => merge_many(many, &mut out, &mut sw),
    }
    out.flush(&mut sw);
    // Every call decoded was swept.
    for s in &sources {
        sw.totals(s.region, s.calls_seen, s.duration_seen);
    }
    sw.finish();
    tree
}

/// Does call `b` come before call `a` in the sweep's order? (`a` is of the lower region.)
#[inline(always)]
fn before(b: (i64, i64), a: (i64, i64)) -> bool {
    b.0 < a.0 || (b.0 == a.0 && b.1 > a.1)
}

/// Steps merged without any test of the blocks' ends: as many as the shorter rest of a block.
/// Below this many, one step at a time until a block is used up and refilled.
const RUN: usize = 16;

/// Sweep the calls of two regions (`a` the lower), merged.
fn merge_two(a: &mut Source<'_>, b: &mut Source<'_>, out: &mut Out, sw: &mut Sweeper<'_>) {
    loop {
        if !a.ready() {
            return b.sweep_rest(out, sw);
        }
        if !b.ready() {
            return a.sweep_rest(out, sw);
        }
        let n = (a.len - a.pos).min(b.len - b.pos);
        if n >= RUN {
            // Each step takes one call of either: n steps never pass the end of either block
            // (n <= BLOCK <= OUT). Which one comes next is a coin toss when the regions
            // interleave irregularly, so it is chosen with conditional moves.
            out.make_room(n, sw);
            let (mut i, mut j, at) = (a.pos, b.pos, out.len);
            for k in at..at + n {
                let (x, y) = (a.at(i), b.at(j));
                let take_b = before(y, x);
                let o = k % OUT;
                out.starts[o] = if take_b { y.0 } else { x.0 };
                out.ends[o] = if take_b { y.1 } else { x.1 };
                out.regions[o] = if take_b { b.region } else { a.region };
                i += !take_b as usize;
                j += take_b as usize;
            }
            (a.pos, b.pos, out.len) = (i, j, at + n);
        } else {
            let (x, y) = (a.at(a.pos), b.at(b.pos));
            if before(y, x) {
                out.put(y, b.region, sw);
                b.pos += 1;
            } else {
                out.put(x, a.region, sw);
                a.pos += 1;
            }
        }
    }
}

/// Regions merged by a scan over their next calls (more: a heap).
const FEW: usize = 8;

/// Sweep the calls of a few regions, merged: the next call is the earliest of their next calls,
/// found by a scan without branches (which region comes next follows the program's loops, not
/// a pattern a branch predictor sees through over several regions).
fn merge_few(sources: &mut [Source<'_>], out: &mut Out, sw: &mut Sweeper<'_>) {
    let k = sources.len();
    debug_assert!(k <= FEW);
    // The next call of each: start, end, and whether the region has none left.
    let (mut starts, mut ends, mut done) = ([0i64; FEW], [0i64; FEW], [true; FEW]);
    let mut live = 0;
    for (i, s) in sources.iter_mut().enumerate() {
        if s.ready() {
            (starts[i], ends[i]) = s.at(s.pos);
            done[i] = false;
            live += 1;
        }
    }
    while live > 0 {
        // The first region not done, then any not done that comes earlier (ties: the lower).
        let mut best = 0;
        for i in 1..k {
            let earlier = starts[i] < starts[best] || (starts[i] == starts[best] && ends[i] > ends[best]);
            let take = !done[i] & (done[best] | earlier);
            best = if take { i } else { best };
        }
        let s = &mut sources[best];
        out.put((starts[best], ends[best]), s.region, sw);
        s.pos += 1;
        if s.ready() {
            (starts[best], ends[best]) = s.at(s.pos);
        } else {
            done[best] = true;
            live -= 1;
        }
    }
}

/// Sweep the calls of many regions, merged through a heap of their next calls.
fn merge_many(sources: &mut [Source<'_>], out: &mut Out, sw: &mut Sweeper<'_>) {
    let mut heap: BinaryHeap<Reverse<(i64, Reverse<i64>, usize)>> = BinaryHeap::with_capacity(sources.len());
    for (k, s) in sources.iter_mut().enumerate() {
        if s.ready() {
            let (start, end) = s.at(s.pos);
            heap.push(Reverse((start, Reverse(end), k)));
        }
    }
    while let Some(mut top) = heap.peek_mut() {
        let Reverse((start, Reverse(end), k)) = *top;
        let s = &mut sources[k];
        out.put((start, end), s.region, sw);
        s.pos += 1;
        if s.ready() {
            let (a, b) = s.at(s.pos);
            *top = Reverse((a, Reverse(b), k));
        } else {
            std::collections::binary_heap::PeekMut::pop(top);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::callpath::sweep;

    /// xorshift64*: reproducible without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// A thread's calls as the recorder logs them (each region's in stop order), from a random
    /// program: nesting up to `depth`, `regions` regions (recursion direct and through others
    /// included), clock steps that are often zero (equal starts and ends, empty calls).
    fn random_logs(rng: &mut Rng, regions: u32, calls: usize, depth: usize) -> Vec<CallLog> {
        let mut logs: Vec<CallLog> = (0..regions).map(|r| CallLog::new(0, r)).collect();
        let mut open: Vec<(u32, i64)> = Vec::new();
        let (mut t, mut done) = (1_000i64, 0usize);
        // Few regions often in a loop (the same child again), sometimes anything.
        let pattern: Vec<u32> = (0..4).map(|_| rng.below(regions as u64) as u32).collect();
        while done < calls || !open.is_empty() {
            t += [0, 0, 1, 1, 2, 3, 7, 100, 5_000][rng.below(9) as usize];
            let enter = done < calls && open.len() < depth && (open.is_empty() || rng.below(100) < 48);
            if enter {
                let r = if rng.below(4) == 0 { rng.below(regions as u64) as u32 } else { pattern[open.len() % pattern.len()] };
                open.push((r, t));
            } else if let Some((r, start)) = open.pop() {
                logs[r as usize].push(Call { start, end: t });
                done += 1;
            }
        }
        logs
    }

    /// The same calls in the sweep's order, by the plain rule: each region's calls in start
    /// order (as logged when in order, else sorted), the earliest head next (ties: the longer,
    /// then the lower region).
    fn reference(logs: &[CallLog]) -> PathTree {
        let mut lists: Vec<(u32, Vec<Call>, usize)> = Vec::new();
        for (r, log) in logs.iter().enumerate() {
            let mut cur = log.cursor();
            let mut calls: Vec<Call> = std::iter::from_fn(|| cur.next()).collect();
            if !log.is_sorted() {
                calls.sort_by_key(|c| (c.start, Reverse(c.end)));
            }
            lists.push((r as u32, calls, 0));
        }
        let merged = std::iter::from_fn(|| {
            let mut best: Option<usize> = None;
            for (k, (_, calls, at)) in lists.iter().enumerate() {
                let Some(c) = calls.get(*at) else { continue };
                if best.is_none_or(|b| {
                    let d = lists[b].1[lists[b].2];
                    (c.start, Reverse(c.end)) < (d.start, Reverse(d.end))
                }) {
                    best = Some(k);
                }
            }
            let k = best?;
            let (r, calls, at) = &mut lists[k];
            *at += 1;
            Some((calls[*at - 1].start, calls[*at - 1].end, *r))
        });
        let mut tree = PathTree::default();
        sweep(merged, &mut tree);
        tree
    }

    fn paths(tree: &PathTree, regions: u32) -> CallPaths {
        let mut out = CallPaths { names: (0..regions).map(|r| format!("r{r}")).collect(), ..Default::default() };
        tree.append_to(&mut out, 0, |r| r, |t| t);
        out
    }

    /// The fast build (merging one, two or many regions, blocks refilled, the dense child table
    /// and the tree's map) gives the model's tree node for node, on random nesting and recursion.
    #[test]
    fn same_tree_as_the_models_sweep() {
        let mut rng = Rng(0x5EED_CA11_9A75);
        let mut folded = 0;
        for round in 0..60 {
            let regions = [1, 2, 2, 3, 5, 12][round % 6];
            let calls = [10, 700, 3_000, 20_000][rng.below(4) as usize];
            let depth = [1, 2, 3, 8, 40][rng.below(5) as usize];
            let logs = random_logs(&mut rng, regions, calls, depth);
            let want = paths(&reference(&logs), regions);
            let got = paths(&from_logs(&logs), regions);
            assert_eq!(got, want, "round {round}: {regions} regions, {calls} calls, depth {depth}");
            let total: u64 = got.nodes.iter().map(|n| n.calls).sum();
            assert_eq!(total as usize, logs.iter().map(CallLog::len).sum::<usize>(), "every call is on a path");
            folded += logs.iter().filter(|l| !l.is_sorted()).count();
        }
        assert!(folded > 10, "the rounds recursed ({folded} logs out of start order)");
    }

    /// A thread recorded through the recorder (`ThreadData`), from a random program: each
    /// region called from one region only (a random tree of regions, `one_path`), or from
    /// anywhere (recursion included); calls timed elsewhere (`record_closed`); an outer stop
    /// dropping inner calls; calls left open at the end; clock reads that repeat (`ties`).
    fn recorded(rng: &mut Rng, regions: u32, one_path: bool, ties: bool, steps: usize) -> crate::recorder::ThreadData {
        let mut d = crate::recorder::ThreadData::for_thread(0, true);
        // A random tree of the regions: the k-th of a shuffled order is called only inside one
        // of those before it (the first at the top), so a child's id may be below its parent's.
        let mut order: Vec<u32> = (0..regions).collect();
        for k in (1..order.len()).rev() {
            order.swap(k, rng.below(k as u64 + 1) as usize);
        }
        let mut parent = vec![u32::MAX; regions as usize];
        for k in 1..order.len() {
            parent[order[k] as usize] = order[rng.below(k as u64) as usize];
        }
        let root = order[0];
        let mut t = 1_000i64;
        let mut tick = |rng: &mut Rng| {
            t += if ties && rng.below(3) == 0 { 0 } else { 1 + rng.below(50) as i64 };
            t
        };
        for _ in 0..steps {
            let top = d.open.last().map(|c| c.id);
            let children: Vec<u32> = (0..regions).filter(|&r| if one_path { Some(parent[r as usize]) == top || (top.is_none() && r == root) } else { true }).collect();
            match rng.below(10) {
                0..=4 if !children.is_empty() && d.open.len() < 12 => {
                    let r = children[rng.below(children.len() as u64) as usize];
                    let s = tick(rng);
                    assert!(d.open(r, s));
                }
                5 if !children.is_empty() && d.open.len() < 12 => {
                    let r = children[rng.below(children.len() as u64) as usize];
                    let s = tick(rng);
                    let e = tick(rng);
                    d.record_closed(r, s, e);
                }
                6 if rng.below(40) == 0 && d.open.len() > 2 => {
                    let outer = d.open[d.open.len() - 3].id;
                    let e = tick(rng);
                    let _ = d.close_out_of_order(outer, e);
                }
                _ => {
                    if let Some(top) = top {
                        let e = tick(rng);
                        assert!(d.close(top, e));
                    }
                }
            }
        }
        // Sometimes everything is closed, sometimes the outermost call stays open.
        let keep = rng.below(2) as usize;
        while d.open.len() > keep {
            let top = d.open.last().map(|c| c.id).unwrap_or(0);
            let e = tick(rng);
            assert!(d.close(top, e));
        }
        d
    }

    /// The tree built from the regions' statistics is the sweep's over the same calls, node
    /// for node, whenever it is built; and it is built for every thread whose regions each sit
    /// on one path.
    #[test]
    fn tree_from_parents_is_the_sweeps() {
        let mut rng = Rng(0x0BE_9A7B);
        let (mut direct, mut one_path_runs) = (0, 0);
        for round in 0..400 {
            let regions = [1, 2, 3, 6, 20][round % 5];
            let one_path = round % 3 != 0;
            let ties = round % 7 == 3;
            let steps = [30, 500, 5_000][rng.below(3) as usize];
            let d = recorded(&mut rng, regions, one_path, ties, steps);
            let want = paths(&from_logs(d.logs()), regions);
            if let Some(tree) = from_parents(&d) {
                direct += 1;
                assert_eq!(paths(&tree, regions), want, "round {round}: {regions} regions, one path {one_path}, ties {ties}");
            }
            let dropped = d.dropped.iter().any(|&n| n > 0);
            let open_with_calls = d.open.iter().any(|c| d.logs().get(c.id as usize).is_some_and(|l| !l.is_empty()));
            if one_path && !ties && !dropped && !open_with_calls {
                one_path_runs += 1;
                assert!(from_parents(&d).is_some(), "round {round}: every region on one path, yet swept");
            }
            if !one_path && regions > 1 && want.nodes.len() > regions as usize {
                assert!(from_parents(&d).is_none(), "round {round}: more paths than regions, yet built from the statistics");
            }
        }
        assert!(direct > 100 && one_path_runs > 100, "{direct} trees from the statistics, {one_path_runs} one-path runs");
        // A call that starts and ends on the ticks of its enclosing call: the sweep puts the
        // lower region outside, whichever was inside.
        let mut d = crate::recorder::ThreadData::for_thread(0, true);
        assert!(d.open(1, 10) && d.open(0, 10) && d.close(0, 20) && d.close(1, 20));
        let want = paths(&from_logs(d.logs()), 2);
        assert_eq!(want.nodes.iter().map(|n| n.region).collect::<Vec<_>>(), [0, 1], "the sweep's order");
        assert!(from_parents(&d).is_none_or(|t| paths(&t, 2) == want));
        // A clock read going back between a call's start and its enclosing call's.
        let mut d = crate::recorder::ThreadData::for_thread(0, true);
        assert!(d.open(1, 1) && d.open(0, 2) && d.close(0, 3) && d.close(1, 4));
        assert!(d.open(1, 10) && d.open(0, 5) && d.close(0, 15) && d.close(1, 20));
        let want = paths(&from_logs(d.logs()), 2);
        assert!(from_parents(&d).is_none_or(|t| paths(&t, 2) == want));
    }

    /// Many regions under many parents: more (parent, region) pairs than the dense child table
    /// holds, so that some are found in the tree's map.
    #[test]
    fn beyond_the_dense_table() {
        let mut rng = Rng(77);
        let regions = 1_500u32;
        let mut logs: Vec<CallLog> = (0..regions).map(|r| CallLog::new(0, r)).collect();
        let mut t = 0i64;
        for _ in 0..10_000 {
            let (a, b, c) = (rng.below(40) as u32, rng.below(regions as u64) as u32, rng.below(regions as u64) as u32);
            let s = t;
            t += 1;
            let inner = t;
            t += 1 + rng.below(3) as i64;
            if b != a && c != a && c != b {
                logs[c as usize].push(Call { start: inner + 1, end: t });
                t += 1;
                logs[b as usize].push(Call { start: inner, end: t });
            }
            t += 1;
            logs[a as usize].push(Call { start: s, end: t });
            t += 1;
        }
        let want = paths(&reference(&logs), regions);
        let got = paths(&from_logs(&logs), regions);
        assert!(got.nodes.len() > 1_000, "{} nodes", got.nodes.len());
        assert_eq!(got, want);
    }
}

#[cfg(test)]
mod speed {
    use super::*;

    /// The build before `Sweeper` (a scan or heap over the regions' next calls, one at a time,
    /// into the model's `sweep`): the baseline of `build_speed`.
    mod before {
        use crate::calllog::{CallLog, Cursor};
        use crate::model::callpath::sweep;
        use crate::model::{Call, PathTree};
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;

        /// Calls decoded at a time per region.
        const BLOCK: usize = 256;

        /// One region's calls on one thread, in start order, a block at a time.
        struct Source<'a> {
            calls: Decoded<'a>,
            region: u32,
            starts: Box<[i64; BLOCK]>,
            ends: Box<[i64; BLOCK]>,
            pos: usize,
            len: usize,
        }

        enum Decoded<'a> {
            Log(Cursor<'a>),
            /// The calls of a region that recursed (not in start order as logged), sorted.
            Sorted(Vec<Call>, usize),
        }

        impl Source<'_> {
            /// The next call's (start, end), refilling the block when it is used up.
            #[inline]
            fn head(&mut self) -> Option<(i64, i64)> {
                if self.pos == self.len && !self.refill() {
                    return None;
                }
                Some((self.starts[self.pos], self.ends[self.pos]))
            }

            fn refill(&mut self) -> bool {
                self.pos = 0;
                self.len = match &mut self.calls {
                    Decoded::Log(c) => c.next_block(&mut self.starts[..], &mut self.ends[..]),
                    Decoded::Sorted(v, at) => {
                        let n = (v.len() - *at).min(BLOCK);
                        for (i, c) in v[*at..*at + n].iter().enumerate() {
                            (self.starts[i], self.ends[i]) = (c.start, c.end);
                        }
                        *at += n;
                        n
                    }
                };
                self.len > 0
            }
        }

        /// A thread's tree from its logs (indexed by region id), in the logs' units: the logs merged
        /// by start (ties: the longer call first) and swept.
        pub fn from_logs(logs: &[CallLog]) -> PathTree {
            let mut tree = PathTree::default();
            let mut sources: Vec<Source<'_>> = Vec::new();
            for (id, log) in logs.iter().enumerate() {
                if log.is_empty() {
                    continue;
                }
                let calls = if log.is_sorted() {
                    Decoded::Log(log.cursor())
                } else {
                    let mut calls: Vec<Call> = Vec::with_capacity(log.len());
                    let mut c = log.cursor();
                    while let Some(call) = c.next() {
                        calls.push(call);
                    }
                    calls.sort_by_key(|c| (c.start, Reverse(c.end)));
                    Decoded::Sorted(calls, 0)
                };
                sources.push(Source { calls, region: id as u32, starts: Box::new([0; BLOCK]), ends: Box::new([0; BLOCK]), pos: 0, len: 0 });
            }
            // Few regions: the earliest head by a scan; many: a heap of heads.
            if sources.len() <= 8 {
                let calls = std::iter::from_fn(|| {
                    let mut best: Option<(usize, (i64, i64))> = None;
                    for (k, s) in sources.iter_mut().enumerate() {
                        if let Some(h) = s.head() {
                            if best.is_none_or(|(_, b)| (h.0, Reverse(h.1)) < (b.0, Reverse(b.1))) {
                                best = Some((k, h));
                            }
                        }
                    }
                    let (k, (start, end)) = best?;
                    sources[k].pos += 1;
                    Some((start, end, sources[k].region))
                });
                sweep(calls, &mut tree);
            } else {
                let mut heap: BinaryHeap<Reverse<(i64, Reverse<i64>, usize)>> = BinaryHeap::with_capacity(sources.len());
                for (k, s) in sources.iter_mut().enumerate() {
                    if let Some((start, end)) = s.head() {
                        heap.push(Reverse((start, Reverse(end), k)));
                    }
                }
                let calls = std::iter::from_fn(|| {
                    let Reverse((start, Reverse(end), k)) = heap.pop()?;
                    let s = &mut sources[k];
                    s.pos += 1;
                    if let Some((a, b)) = s.head() {
                        heap.push(Reverse((a, Reverse(b), k)));
                    }
                    Some((start, end, s.region))
                });
                sweep(calls, &mut tree);
            }
            tree
        }
    }

    /// Not a test: `cargo test --release --lib callpath::speed -- --ignored --nocapture`
    /// prints the build's time per call beside decoding the same calls alone (the baseline,
    /// measured in the same run).
    #[test]
    #[ignore]
    fn build_speed() {
        let n: usize = std::env::var("CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(5_000_000);
        let regions: u32 = std::env::var("REGIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
        // outer { inner { ... } } nested `regions` deep, TSC-like gaps.
        let mut logs: Vec<CallLog> = (0..regions).map(|r| CallLog::new(0, r)).collect();
        let mut t = 1_000_000_000i64;
        let mut made = 0;
        let flat = std::env::var("FLAT").is_ok();
        while flat && made < n {
            // a, b, c, d, a, ... one after the other at the top (`benches/mpi_finalize.c`).
            for k in 0..regions as usize {
                logs[k].push(Call { start: t, end: t + 30 });
                t += 50;
                made += 1;
            }
        }
        while made < n {
            let starts: Vec<i64> = (0..regions).map(|k| t + 40 * k as i64).collect();
            t += 40 * regions as i64 + 30;
            for k in (0..regions as usize).rev() {
                logs[k].push(Call { start: starts[k], end: t });
                t += 20;
                made += 1;
            }
            t += 25;
        }
        let decode = || {
            let (mut s, mut e) = (vec![0i64; 512], vec![0i64; 512]);
            let mut sum = 0i64;
            for l in &logs {
                let mut c = l.cursor();
                loop {
                    let k = c.next_block(&mut s, &mut e);
                    if k == 0 {
                        break;
                    }
                    sum = sum.wrapping_add(s[k - 1]);
                }
            }
            std::hint::black_box(sum);
        };
        // CPU time of this thread: on a loaded machine the wall time includes waiting for a CPU.
        let cpu = || {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: a valid timespec to fill.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
        };
        let time = |f: &dyn Fn() -> PathTree| {
            let t0 = cpu();
            let tree = f();
            let t = cpu() - t0;
            std::hint::black_box(&tree);
            (t, tree)
        };
        let per_call = |t: f64| t * 1e9 / made as f64;
        for _ in 0..3 {
            let t0 = cpu();
            decode();
            let d = cpu() - t0;
            let (old, a) = time(&|| before::from_logs(&logs));
            let (new, b) = time(&|| from_logs(&logs));
            let same = {
                let (mut p, mut q) = (CallPaths::default(), CallPaths::default());
                a.append_to(&mut p, 0, |r| r, |t| t);
                b.append_to(&mut q, 0, |r| r, |t| t);
                p == q
            };
            println!(
                "{made} calls, {regions} regions{}: build before {:.2} ns/call, now {:.2} ns/call ({:.2}x faster), decoding alone {:.2} ns/call; same tree: {same}",
                if flat { " flat" } else { " nested" },
                per_call(old),
                per_call(new),
                old / new,
                per_call(d)
            );
        }
    }
}
