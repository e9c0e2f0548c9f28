//! Call paths of one process at finalize (the model's `CallPaths`): each thread's tree from
//! its recorded calls (one pass over them in start order, merged over the thread's regions
//! while they are decoded, so nothing is copied but a recursing region's calls), or, where
//! calls are not kept (the aggregate layout), the tree the recorder kept.

use crate::calllog::{CallLog, Cursor};
use crate::clock::Timebase;
use crate::model::callpath::sweep;
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

fn collect_inner(names: &[String], threads: &[ThreadRecord], timebase: &Timebase, wall_ns: i64) -> CallPaths {
    let mut out = CallPaths { wall_ns, ..Default::default() };
    let mut index: HashMap<u32, u32> = HashMap::new();
    let mut order: Vec<&ThreadRecord> = threads.iter().collect();
    order.sort_by_key(|t| t.index);
    // The threads that kept their calls: their trees are built side by side. A track's calls
    // nest in nothing (`ThreadData::track`): each is at the top.
    let swept = |t: &ThreadRecord| t.data.keep_calls && !t.data.track;
    let logs: Vec<&[CallLog]> = order.iter().map(|t| if swept(t) { t.data.logs() } else { &[][..] }).collect();
    let mut built = build_all(&logs);
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

/// Calls below which a thread's tree is not worth a thread of its own.
const PARALLEL_CALLS: usize = 1 << 18;

/// Each thread's tree from its logs, on up to as many threads as there are CPUs.
fn build_all(logs: &[&[CallLog]]) -> Vec<PathTree> {
    let calls = |l: &[CallLog]| l.iter().map(CallLog::len).sum::<usize>();
    let big = logs.iter().filter(|l| calls(l) >= PARALLEL_CALLS).count();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(big);
    // At unload, at exit and after a signal no thread may be started (see
    // `model::helper_threads_allowed`): the calling thread builds them all.
    if workers < 2 || !crate::model::helper_threads_allowed() {
        return logs.iter().map(|l| from_logs(l)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<PathTree> = (0..logs.len()).map(|_| PathTree::default()).collect();
    let results = parking_lot::Mutex::new(Vec::new());
    let work = || {
        loop {
            let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(l) = logs.get(k) else { break };
            let tree = from_logs(l);
            results.lock().push((k, tree));
        }
    };
    std::thread::scope(|s| {
        // Helpers where threads can be made (a failed spawn is no error: fewer helpers); the
        // calling thread works too.
        for _ in 1..workers {
            if std::thread::Builder::new().name("sp-callpaths".into()).spawn_scoped(s, work).is_err() {
                break;
            }
        }
        work();
    });
    for (k, tree) in results.into_inner() {
        out[k] = tree;
    }
    out
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
