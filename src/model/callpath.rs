//! Call paths: the regions as a tree by their nesting on each thread, with calls, inclusive
//! and exclusive time per path (`CallPaths`, stored as `rank<N>/call_paths/`, docs/layouts.md),
//! and the builder that folds calls into it (`PathTree`), fed by the recorder (statistics-only
//! layout) or by the recorded calls at finalize (`Sweeper`: `sweep`, the rule, made fast).
//!
//! Recursion is folded: a call of a region that is already on the path of its enclosing call
//! (directly, `r > r`, or through others, `a > b > a`) is counted on that ancestor's node, so a
//! tree stays as deep as the program's distinct nesting. Such a folded call adds its calls and
//! exclusive time to the node but not its inclusive time, which the outer call's already
//! holds: inclusive time is the time spent with the node on the stack, exclusive the time in
//! the node's own code, and the exclusive times of a thread's nodes sum to the time spent in
//! its top-level calls.

use std::collections::HashMap;

/// No node: the parent of a top-level node.
pub const NO_NODE: u32 = u32::MAX;

/// One path of one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PathNode {
    /// The recording thread (the file's thread id).
    pub thread: i64,
    /// Index of the enclosing path's node in `CallPaths::nodes` (always earlier), -1 at the top.
    pub parent: i64,
    /// Index of the region's name in `CallPaths::names`.
    pub region: u32,
    pub calls: u64,
    /// Nanoseconds with this path on the stack (recursion counted once).
    pub inclusive_ns: i64,
    /// Nanoseconds in the region's own code on this path (calls inside it left out).
    pub exclusive_ns: i64,
}

/// A rank's call paths: every thread's tree, parents before children.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CallPaths {
    /// Region names the nodes refer to.
    pub names: Vec<String>,
    pub nodes: Vec<PathNode>,
    /// The rank's wall time from setup to finalize (0: not known).
    pub wall_ns: i64,
}

/// Totals of one path or region pooled over threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathTotals {
    pub calls: u64,
    pub inclusive_ns: i64,
    pub exclusive_ns: i64,
}

impl PathTotals {
    pub fn add(&mut self, o: &PathTotals) {
        self.calls += o.calls;
        self.inclusive_ns = self.inclusive_ns.saturating_add(o.inclusive_ns);
        self.exclusive_ns = self.exclusive_ns.saturating_add(o.exclusive_ns);
    }
}

impl CallPaths {
    /// The path of node `i`: region names from the top, or None if the parents are malformed
    /// (an index out of range or not earlier).
    pub fn path_of(&self, i: usize) -> Option<Vec<String>> {
        let mut out = Vec::new();
        let mut at = i;
        loop {
            let n = self.nodes.get(at)?;
            out.push(self.names.get(n.region as usize)?.clone());
            if n.parent < 0 {
                break;
            }
            let p = n.parent as usize;
            if p >= at {
                return None;
            }
            at = p;
        }
        out.reverse();
        Some(out)
    }

    /// Every path pooled over the threads, in the order first seen (parents first).
    pub fn pooled(&self) -> Vec<(Vec<String>, PathTotals)> {
        let mut index: HashMap<Vec<String>, usize> = HashMap::new();
        let mut out: Vec<(Vec<String>, PathTotals)> = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let Some(path) = self.path_of(i) else { continue };
            let t = PathTotals { calls: n.calls, inclusive_ns: n.inclusive_ns, exclusive_ns: n.exclusive_ns };
            match index.get(&path) {
                Some(&k) => out[k].1.add(&t),
                None => {
                    index.insert(path.clone(), out.len());
                    out.push((path, t));
                }
            }
        }
        out
    }

    /// Exclusive time per region over all its paths and threads (name, ns).
    pub fn exclusive_by_region(&self) -> HashMap<String, i64> {
        let mut out: HashMap<String, i64> = HashMap::new();
        for n in &self.nodes {
            if let Some(name) = self.names.get(n.region as usize) {
                let t = out.entry(name.clone()).or_default();
                *t = t.saturating_add(n.exclusive_ns);
            }
        }
        out
    }

    /// Inclusive time per region over all its paths and threads (name, ns): recursion is
    /// counted once (no node lies under a node of its own region).
    pub fn inclusive_by_region(&self) -> HashMap<String, i64> {
        let mut out: HashMap<String, i64> = HashMap::new();
        for n in &self.nodes {
            if let Some(name) = self.names.get(n.region as usize) {
                let t = out.entry(name.clone()).or_default();
                *t = t.saturating_add(n.inclusive_ns);
            }
        }
        out
    }

    /// Renumber the threads: `map(old)` is the new id, None drops the thread's nodes (the
    /// parents of the rest are remapped).
    pub fn renumber_threads(&mut self, map: impl Fn(i64) -> Option<i64>) {
        let mut new_index = vec![-1i64; self.nodes.len()];
        let mut kept = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            let Some(t) = map(n.thread) else { continue };
            let parent = if n.parent >= 0 { new_index.get(n.parent as usize).copied().unwrap_or(-1) } else { -1 };
            new_index[i] = kept.len() as i64;
            kept.push(PathNode { thread: t, parent, ..*n });
        }
        self.nodes = kept;
    }
}

#[derive(Debug, Clone, Copy)]
struct TreeNode {
    parent: u32,
    region: u32,
    calls: u64,
    inclusive: i64,
    exclusive: i64,
    /// The last call entered inside this node: (region, where it went) (`NO_HIT`: none).
    last: (u32, (u32, bool)),
}

const NO_HIT: (u32, (u32, bool)) = (u32::MAX, (NO_NODE, false));

/// One thread's tree while calls are added, in the recorder's units (ticks or ns).
#[derive(Debug, Default)]
pub struct PathTree {
    nodes: Vec<TreeNode>,
    /// `TreeNode::last` of the top level.
    top_last: Option<(u32, (u32, bool))>,
    /// (parent node, region) -> the node its calls go to, and whether that is a fold (an
    /// ancestor of the same region).
    edges: rustc_hash::FxHashMap<(u32, u32), (u32, bool)>,
}

/// Deepest node chain followed when looking for an ancestor of the same region (the
/// recorder's nesting limit).
const MAX_WALK: usize = 4096;

impl PathTree {
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node a call of `region` goes to when its enclosing call is on `parent` (`NO_NODE`
    /// at the top), and whether it is folded into an ancestor (recursion).
    #[inline]
    pub fn enter(&mut self, parent: u32, region: u32) -> (u32, bool) {
        // A loop enters the same region inside the same node again and again.
        let last = if parent == NO_NODE { self.top_last.unwrap_or(NO_HIT) } else { self.nodes.get(parent as usize).map_or(NO_HIT, |n| n.last) };
        if last.0 == region {
            return last.1;
        }
        let hit = self.enter_slow(parent, region);
        match self.nodes.get_mut(parent as usize) {
            Some(n) => n.last = (region, hit),
            None => self.top_last = Some((region, hit)),
        }
        hit
    }

    fn enter_slow(&mut self, parent: u32, region: u32) -> (u32, bool) {
        if let Some(&hit) = self.edges.get(&(parent, region)) {
            return hit;
        }
        let mut at = parent;
        let mut steps = 0;
        let mut target = None;
        while at != NO_NODE && steps < MAX_WALK {
            let n = self.nodes[at as usize];
            if n.region == region {
                target = Some(at);
                break;
            }
            at = n.parent;
            steps += 1;
        }
        let hit = match target {
            Some(t) => (t, true),
            None => {
                self.nodes.push(TreeNode { parent, region, calls: 0, inclusive: 0, exclusive: 0, last: NO_HIT });
                ((self.nodes.len() - 1) as u32, false)
            }
        };
        self.edges.insert((parent, region), hit);
        hit
    }

    /// A new node of `region` under `parent` (`NO_NODE`: at the top, else an earlier node)
    /// with its totals: built whole where they are known (`callpath::from_parents`). None if
    /// `parent` is not a node.
    pub fn push_node(&mut self, parent: u32, region: u32, calls: u64, inclusive: i64, exclusive: i64) -> Option<u32> {
        if parent != NO_NODE && parent as usize >= self.nodes.len() {
            return None;
        }
        self.nodes.push(TreeNode { parent, region, calls, inclusive, exclusive, last: NO_HIT });
        let node = (self.nodes.len() - 1) as u32;
        self.edges.insert((parent, region), (node, false));
        Some(node)
    }

    /// A completed call on `node`: its duration and exclusive time.
    #[inline]
    pub fn add(&mut self, node: u32, folded: bool, duration: i64, exclusive: i64) {
        if let Some(n) = self.nodes.get_mut(node as usize) {
            n.calls += 1;
            if !folded {
                n.inclusive = n.inclusive.wrapping_add(duration);
            }
            n.exclusive = n.exclusive.wrapping_add(exclusive);
        }
    }

    /// Append this thread's nodes with a call to `out` (as `thread`), times through `to_ns`;
    /// `names` maps a region id to its index in `out.names`. Nodes no call reached are left
    /// out with their subtrees (they have no calls either).
    pub fn append_to(&self, out: &mut CallPaths, thread: i64, mut name_index: impl FnMut(u32) -> u32, to_ns: impl Fn(i64) -> i64) {
        let mut new_index = vec![-1i64; self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            let parent = if n.parent == NO_NODE { -1 } else { new_index[n.parent as usize] };
            if n.calls == 0 || (n.parent != NO_NODE && parent < 0) {
                continue;
            }
            new_index[i] = out.nodes.len() as i64;
            out.nodes.push(PathNode {
                thread,
                parent,
                region: name_index(n.region),
                calls: n.calls,
                inclusive_ns: to_ns(n.inclusive),
                exclusive_ns: to_ns(n.exclusive),
            });
        }
    }
}

/// A call being swept (`sweep`): its node and the time of the calls directly inside it.
struct Open {
    end: i64,
    duration: i64,
    node: u32,
    folded: bool,
    child: i64,
}

/// Build a thread's tree from its calls, given in start order (ties: the longer first) as
/// (start, end, region). A call is inside the innermost earlier call that has not ended
/// before it ends.
pub fn sweep(calls: impl Iterator<Item = (i64, i64, u32)>, tree: &mut PathTree) {
    let mut stack: Vec<Open> = Vec::new();
    let close = |stack: &mut Vec<Open>, tree: &mut PathTree| {
        if let Some(o) = stack.pop() {
            tree.add(o.node, o.folded, o.duration, o.duration.wrapping_sub(o.child));
            if let Some(p) = stack.last_mut() {
                p.child = p.child.wrapping_add(o.duration);
            }
        }
    };
    for (start, end, region) in calls {
        while stack.last().is_some_and(|top| end > top.end || (start >= top.end && start > top.end.wrapping_sub(top.duration))) {
            close(&mut stack, tree);
        }
        let parent = stack.last().map_or(NO_NODE, |o| o.node);
        let (node, folded) = tree.enter(parent, region);
        stack.push(Open { end, duration: end.wrapping_sub(start), node, folded, child: 0 });
    }
    while !stack.is_empty() {
        close(&mut stack, tree);
    }
}

/// Per node slot of a `Sweeper` (slot 0: the top level).
#[derive(Debug, Clone, Copy, Default)]
struct Acc {
    calls: u64,
    inclusive: i64,
    exclusive: i64,
}

/// An open call of a `Sweeper`.
#[derive(Debug, Clone, Copy)]
struct Frame {
    end: i64,
    start: i64,
    slot: u32,
}

/// A slot that is a fold (a call counted on an ancestor of its region).
const FOLD: u32 = 1 << 31;
/// No slot known yet (a `Sweeper`'s child table).
const UNKNOWN: u32 = u32::MAX;
/// A slot's last child before any: no region has this id (the registry's ids are below it; a
/// call that had it would land on the top-level slot, which is not part of the tree).
const NOTHING_YET: (u32, u32) = (u32::MAX, FOLD);
/// Entries of a `Sweeper`'s dense child table at most (1 MiB per tree being built); the nodes
/// beyond find their children through the tree's map.
const DENSE_MAX: usize = 1 << 18;

/// `sweep` fed a block of calls at a time, built for speed (finalize builds the call paths of
/// every recorded call with it), giving the same tree node for node (`same_tree_as_sweep`).
///
/// The tree's nodes are slots here (slot = node + 1, slot 0 the top level), so that the top
/// level needs no test. A call adds its duration to its node's inclusive time (unless folded)
/// and exclusive time, and subtracts it from the exclusive time of its parent's node (which is
/// `sweep`'s duration minus the direct children's durations, summed the other way round): so
/// each call needs only its node and its parent's, nothing when it closes but a pop.
///
/// Most regions sit on one path of a thread: a region's *home* is the node of its first call
/// (with the parent slot that leads there). A call whose parent is its region's home parent
/// adds nothing per call: the region's totals (`totals`, summed by the caller as it decodes)
/// less the calls that went elsewhere are added to the home at the end. So the common call is a
/// comparison that the CPU predicts, with no chain of loads or of additions to the same node
/// from one call to the next, and calls overlap in the CPU. A call elsewhere finds its node by
/// the last child entered under its parent, else a dense table per (parent, region), else the
/// tree's map (`PathTree::enter_slow`), and adds to it. The innermost open call stays in
/// registers while a block is swept, and no open call is stored twice.
pub struct Sweeper<'t> {
    tree: &'t mut PathTree,
    /// The open calls, outermost first, after the top level's frame.
    stack: Vec<Frame>,
    acc: Vec<Acc>,
    /// Per region: its home (parent slot, slot), `NO_HOME` until its first call.
    home: Vec<(u32, u32)>,
    /// Per region: its calls elsewhere than at home, and their durations; its totals.
    away: Vec<(u64, i64)>,
    totals: Vec<(u64, i64)>,
    /// Per slot: the last child entered under it (region, slot | `FOLD`).
    last: Vec<(u32, u32)>,
    /// Per slot and region (`slot * regions + region`): slot | `FOLD`, or `UNKNOWN`.
    dense: Vec<u32>,
    dense_regions: usize,
}

/// The top level as a frame: never closed (nothing ends after `i64::MAX`; see `Sweeper::block`).
const TOP: Frame = Frame { end: i64::MAX, start: i64::MIN, slot: 0 };
/// A region without a home (before its first call, or its first call was folded): no parent
/// slot is `u32::MAX`.
const NO_HOME: (u32, u32) = (u32::MAX, 0);

impl<'t> Sweeper<'t> {
    /// A sweep adding to `tree`, for calls of regions below `regions` (a call of a larger id
    /// takes the slow way, always).
    pub fn new(tree: &'t mut PathTree, regions: usize) -> Sweeper<'t> {
        let slots = tree.nodes.len() + 1;
        let dense_regions = if slots.saturating_mul(regions) <= DENSE_MAX { regions } else { 0 };
        Sweeper {
            tree,
            stack: {
                let mut v = Vec::with_capacity(64);
                v.push(TOP);
                v
            },
            acc: vec![Acc::default(); slots],
            home: vec![NO_HOME; regions],
            away: vec![(0, 0); regions],
            totals: vec![(0, 0); regions],
            last: vec![NOTHING_YET; slots],
            dense: vec![UNKNOWN; slots * dense_regions],
            dense_regions,
        }
    }

    /// The next call in start order (ties: the longer first), its totals included.
    pub fn push(&mut self, start: i64, end: i64, region: u32) {
        self.block(&[start], &[end], &[region]);
        self.totals(region, 1, end.wrapping_sub(start));
    }

    /// The calls of `region` given to `block` (or to come) number `calls` more, with `duration`
    /// more in all: every call swept must be counted here once.
    pub fn totals(&mut self, region: u32, calls: u64, duration: i64) {
        if let Some(t) = self.totals.get_mut(region as usize) {
            t.0 += calls;
            t.1 = t.1.wrapping_add(duration);
        }
    }

    /// The next calls in start order (ties: the longer first): `starts[i]`, `ends[i]`,
    /// `regions[i]` (as many as the shortest of the three), counted in `totals` too.
    #[inline(never)]
    pub fn block(&mut self, starts: &[i64], ends: &[i64], regions: &[u32]) {
        let n = starts.len().min(ends.len()).min(regions.len());
        // The open calls, the top level first (never closed), the innermost also in `top`:
        // a frame is stored once when it opens and only read after, so that no frame goes
        // from memory to memory from one call to the next (a chain of store forwarding).
        let mut stack = std::mem::take(&mut self.stack);
        let mut top = *stack.last().unwrap_or(&TOP);
        for ((&start, &end), &region) in starts[..n].iter().zip(&ends[..n]).zip(&regions[..n]) {
            // Close the calls this one is not inside (`sweep`'s test).
            while stack.len() > 1 && (end > top.end || (start >= top.end && start > top.start)) {
                stack.pop();
                top = *stack.last().unwrap_or(&TOP);
            }
            let (home_parent, home) = self.home.get(region as usize).copied().unwrap_or(NO_HOME);
            let slot = if home_parent == top.slot { home } else { self.away(top.slot, region, end.wrapping_sub(start)) };
            top = Frame { end, start, slot };
            stack.push(top);
        }
        self.stack = stack;
    }

    /// A call of `region` under `parent` that is not at its region's home (or the region's
    /// first): its node, with its time added there; its slot.
    #[inline(never)]
    fn away(&mut self, parent: u32, region: u32, duration: i64) -> u32 {
        let r = region as usize;
        let at = parent as usize;
        let last = self.last.get(at).copied().unwrap_or(NOTHING_YET);
        let hit = if last.0 == region { last.1 } else { self.miss(at, region) };
        if let Some(l) = self.last.get_mut(at) {
            *l = (region, hit);
        }
        // A region beyond `new`'s count has neither a home nor totals: each call adds itself.
        let counted = r < self.home.len();
        if counted && self.home[r] == NO_HOME && hit & FOLD == 0 {
            // The region's first call not folded: its home, counted at the end with the others
            // there (the calls before it were counted where they went).
            self.home[r] = (parent, hit);
            return hit;
        }
        let slot = hit & !FOLD;
        let inclusive = if hit & FOLD != 0 { 0 } else { duration };
        if let Some(a) = self.acc.get_mut(slot as usize) {
            a.calls += 1;
            a.inclusive = a.inclusive.wrapping_add(inclusive);
            a.exclusive = a.exclusive.wrapping_add(duration);
        }
        if let Some(p) = self.acc.get_mut(at) {
            p.exclusive = p.exclusive.wrapping_sub(duration);
        }
        if let Some(away) = self.away.get_mut(r) {
            away.0 += 1;
            away.1 = away.1.wrapping_add(duration);
        }
        slot
    }

    /// A child not entered last under `parent`: the dense table, else the tree.
    fn miss(&mut self, parent: usize, region: u32) -> u32 {
        let cell = parent.checked_mul(self.dense_regions).map(|b| b + region as usize).filter(|_| (region as usize) < self.dense_regions);
        let known = cell.and_then(|c| self.dense.get(c)).copied().unwrap_or(UNKNOWN);
        if known != UNKNOWN {
            return known;
        }
        let from = if parent == 0 { NO_NODE } else { parent as u32 - 1 };
        let before = self.tree.nodes.len();
        let (node, folded) = self.tree.enter_slow(from, region);
        for _ in before..self.tree.nodes.len() {
            self.acc.push(Acc::default());
            self.last.push(NOTHING_YET);
            if self.acc.len().saturating_mul(self.dense_regions) <= DENSE_MAX {
                self.dense.resize(self.acc.len() * self.dense_regions, UNKNOWN);
            }
        }
        let hit = (node + 1) | if folded { FOLD } else { 0 };
        if let Some(d) = cell.and_then(|c| self.dense.get_mut(c)) {
            *d = hit;
        }
        hit
    }

    /// Add what was swept to the tree's nodes (the calls still open need nothing more): each
    /// region's calls at home are its totals less those elsewhere.
    pub fn finish(mut self) {
        for r in 0..self.home.len() {
            let (parent, home) = self.home[r];
            if (parent, home) == NO_HOME {
                continue;
            }
            let (calls, duration) = (self.totals[r].0.wrapping_sub(self.away[r].0), self.totals[r].1.wrapping_sub(self.away[r].1));
            if let Some(a) = self.acc.get_mut(home as usize) {
                a.calls = a.calls.wrapping_add(calls);
                a.inclusive = a.inclusive.wrapping_add(duration);
                a.exclusive = a.exclusive.wrapping_add(duration);
            }
            if let Some(p) = self.acc.get_mut(parent as usize) {
                p.exclusive = p.exclusive.wrapping_sub(duration);
            }
        }
        for (n, a) in self.tree.nodes.iter_mut().zip(&self.acc[1..]) {
            n.calls += a.calls;
            n.inclusive = n.inclusive.wrapping_add(a.inclusive);
            n.exclusive = n.exclusive.wrapping_add(a.exclusive);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(calls: &[(i64, i64, u32)]) -> CallPaths {
        let mut tree = PathTree::default();
        sweep(calls.iter().copied(), &mut tree);
        let mut out = CallPaths { names: vec!["a".into(), "b".into(), "c".into()], ..Default::default() };
        tree.append_to(&mut out, 0, |r| r, |t| t);
        out
    }

    fn row(p: &CallPaths, path: &[&str]) -> PathTotals {
        let want: Vec<String> = path.iter().map(|s| s.to_string()).collect();
        p.pooled().into_iter().find(|(k, _)| *k == want).map(|x| x.1).unwrap_or_else(|| panic!("no path {path:?} in {:?}", p.pooled()))
    }

    #[test]
    fn nesting_two_parents_and_exclusive_time() {
        // a [0,100] { b [10,30] { c [12,20] }, c [40,50] }, b [200,210]
        let p = build(&[(0, 100, 0), (10, 30, 1), (12, 20, 2), (40, 50, 2), (200, 210, 1)]);
        assert_eq!(row(&p, &["a"]), PathTotals { calls: 1, inclusive_ns: 100, exclusive_ns: 70 });
        assert_eq!(row(&p, &["a", "b"]), PathTotals { calls: 1, inclusive_ns: 20, exclusive_ns: 12 });
        assert_eq!(row(&p, &["a", "b", "c"]), PathTotals { calls: 1, inclusive_ns: 8, exclusive_ns: 8 });
        assert_eq!(row(&p, &["a", "c"]), PathTotals { calls: 1, inclusive_ns: 10, exclusive_ns: 10 });
        assert_eq!(row(&p, &["b"]), PathTotals { calls: 1, inclusive_ns: 10, exclusive_ns: 10 });
        assert_eq!(p.nodes.len(), 5);
        assert_eq!(p.exclusive_by_region()["c"], 18);
    }

    #[test]
    fn recursion_is_folded() {
        // a [0,100] { a [10,60] { b [20,50] { a [30,40] } } }
        let p = build(&[(0, 100, 0), (10, 60, 0), (20, 50, 1), (30, 40, 0)]);
        assert_eq!(p.pooled().len(), 2, "{:?}", p.pooled());
        // a: 3 calls, inclusive the outer call only, exclusive 50 + 20 + 10.
        assert_eq!(row(&p, &["a"]), PathTotals { calls: 3, inclusive_ns: 100, exclusive_ns: 80 });
        assert_eq!(row(&p, &["a", "b"]), PathTotals { calls: 1, inclusive_ns: 30, exclusive_ns: 20 });
        let total_excl: i64 = p.nodes.iter().map(|n| n.exclusive_ns).sum();
        assert_eq!(total_excl, 100);
        assert_eq!(p.inclusive_by_region()["a"], 100);
    }

    /// `Sweeper` gives `sweep`'s tree for any calls in the sweep's order, also ones that
    /// overlap without nesting, end before they start, or sit at the clock's extremes (what a
    /// damaged log may hold), and adds to a tree that has nodes already.
    #[test]
    fn same_tree_as_sweep() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..300 {
            let (regions, len) = (1 + next(6) as u32, 1 + next(400) as usize);
            let mut calls: Vec<(i64, i64, u32)> = (0..len)
                .map(|_| {
                    let s = next(200) as i64;
                    let e = match next(20) {
                        0 => s - 1 - next(5) as i64,
                        1 => i64::MAX,
                        _ => s + next(60) as i64,
                    };
                    (if next(50) == 0 { i64::MIN } else { s }, e, next(regions as u64) as u32)
                })
                .collect();
            calls.sort_by_key(|&(s, e, r)| (s, std::cmp::Reverse(e), r));
            let (half, rest) = calls.split_at(len / 2);
            let (mut want, mut got) = (PathTree::default(), PathTree::default());
            sweep(half.iter().copied(), &mut want);
            sweep(half.iter().copied(), &mut got);
            sweep(rest.iter().copied(), &mut want);
            let mut sw = Sweeper::new(&mut got, if round % 2 == 0 { regions as usize } else { 0 });
            rest.iter().for_each(|&(s, e, r)| sw.push(s, e, r));
            sw.finish();
            let paths = |t: &PathTree| {
                let mut p = CallPaths::default();
                t.append_to(&mut p, 0, |r| r, |t| t);
                p
            };
            assert_eq!(paths(&got), paths(&want), "round {round}: {calls:?}");
        }
    }

    #[test]
    fn siblings_touching_and_renumbering() {
        let mut p = build(&[(0, 10, 0), (10, 20, 1), (20, 20, 2)]);
        assert_eq!(p.pooled().iter().map(|(k, _)| k.len()).collect::<Vec<_>>(), vec![1, 1, 1]);
        let mut tree = PathTree::default();
        sweep([(0i64, 5i64, 1u32), (1, 2, 2)].into_iter(), &mut tree);
        tree.append_to(&mut p, 3, |r| r, |t| t * 2);
        p.renumber_threads(|t| (t == 3).then_some(1));
        assert_eq!(p.nodes.len(), 2);
        assert_eq!(p.nodes[1].parent, 0);
        assert_eq!(p.nodes[1].inclusive_ns, 2);
        assert_eq!(p.path_of(1).unwrap(), vec!["b".to_string(), "c".to_string()]);
    }

    /// The nodes of one region on several threads (or paths) whose times add up past 2^63 ns
    /// (a recovered run's calls come from a spill file that may be damaged): the per-region
    /// totals saturate, never overflow.
    #[test]
    fn per_region_totals_saturate() {
        let node = |thread: i64| PathNode { thread, parent: -1, region: 0, calls: 1, inclusive_ns: (1 << 62) + 1, exclusive_ns: (1 << 62) + 1 };
        let p = CallPaths { names: vec!["a".into()], nodes: vec![node(0), node(1), node(2)], wall_ns: 0 };
        assert_eq!(p.inclusive_by_region()["a"], i64::MAX);
        assert_eq!(p.exclusive_by_region()["a"], i64::MAX);
    }
}
