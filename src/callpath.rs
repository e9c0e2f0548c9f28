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
    let mut out = CallPaths { wall_ns, ..Default::default() };
    let mut index: HashMap<u32, u32> = HashMap::new();
    let mut order: Vec<&ThreadRecord> = threads.iter().collect();
    order.sort_by_key(|t| t.index);
    for t in order {
        let built;
        let tree = if t.data.keep_calls {
            built = from_logs(t.data.logs());
            &built
        } else {
            &t.data.paths
        };
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
    out
}

/// A thread's tree from its logs (indexed by region id), in the logs' units.
fn from_logs(logs: &[CallLog]) -> PathTree {
    let mut tree = PathTree::default();
    let mut sources: Vec<Source<'_>> = Vec::new();
    for (id, log) in logs.iter().enumerate() {
        if log.is_empty() {
            continue;
        }
        if log.is_sorted() {
            sources.push(Source::Log(log.cursor(), id as u32));
        } else {
            let mut calls: Vec<Call> = Vec::with_capacity(log.len());
            let mut c = log.cursor();
            while let Some(call) = c.next() {
                calls.push(call);
            }
            calls.sort_by_key(|c| (c.start, Reverse(c.end)));
            sources.push(Source::Sorted(calls.into_iter(), id as u32));
        }
    }
    let mut heap: BinaryHeap<Reverse<(i64, Reverse<i64>, usize)>> = BinaryHeap::with_capacity(sources.len());
    for (k, s) in sources.iter_mut().enumerate() {
        if let Some(c) = s.next() {
            heap.push(Reverse((c.start, Reverse(c.end), k)));
        }
    }
    let calls = std::iter::from_fn(|| {
        let Reverse((start, Reverse(end), k)) = heap.pop()?;
        if let Some(c) = sources[k].next() {
            heap.push(Reverse((c.start, Reverse(c.end), k)));
        }
        Some((start, end, sources[k].region()))
    });
    sweep(calls, &mut tree);
    tree
}

enum Source<'a> {
    Log(Cursor<'a>, u32),
    Sorted(std::vec::IntoIter<Call>, u32),
}

impl Source<'_> {
    fn next(&mut self) -> Option<Call> {
        match self {
            Source::Log(c, _) => c.next(),
            Source::Sorted(c, _) => c.next(),
        }
    }

    fn region(&self) -> u32 {
        match self {
            Source::Log(_, r) | Source::Sorted(_, r) => *r,
        }
    }
}
