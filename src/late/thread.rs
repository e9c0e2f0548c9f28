//! One thread's side of the regions named at finalize: a cache from keys (an address and what
//! it stands for) to region ids, and the plain state the OpenMP tool and the instrumented
//! functions keep per thread. Only the owning thread touches it, inside its recorder's window
//! (it lives in the thread's `ThreadData`).

use super::teams::{Hold, Holds, Ring};
use crate::model::OpenCall;
use rustc_hash::FxHashMap;

/// Slots of the direct-mapped cache in front of `seen` (16 bytes each).
const SLOTS: usize = 512;

/// What a key maps to on this thread: the region id (or `NOT_RECORDED`) in the low 32 bits,
/// the index of the thread's `FnState` for an instrumented function in the high 32 bits.
pub type Packed = u64;

pub fn pack(id: u32, local: u32) -> Packed {
    id as u64 | (local as u64) << 32
}

pub fn id_of(p: Packed) -> u32 {
    p as u32
}

pub fn local_of(p: Packed) -> usize {
    (p >> 32) as usize
}

/// One instrumented function on one thread.
#[derive(Debug, Clone, Default)]
pub struct FnState {
    pub id: u32,
    /// Recorded calls of it open on this thread (recursion: more than one).
    pub depth: u32,
    /// `calls` beyond which throttling is checked next.
    pub next_check: u64,
    /// No longer recorded on this thread (throttled once no call of it was open).
    pub skip: bool,
    /// Throttled (by any thread): stop recording it once no call of it is open here.
    pub pending: bool,
    /// Completed recorded calls on this thread, and their clock ticks in all.
    pub calls: u64,
    pub ticks: i64,
}

/// An OpenMP region taken off the thread's stacks when the runtime reported its end late
/// (`ThreadLate::detached`): its entry, its call (None: not recorded), when the end was reported.
#[derive(Debug)]
pub struct Detached {
    pub open: OmpOpen,
    pub call: Option<OpenCall>,
    pub end: i64,
}

/// An OpenMP region open on this thread (see `openmp`).
#[derive(Debug)]
pub struct OmpOpen {
    /// Which callback opened it (the tool's own code, see `openmp`).
    pub what: u8,
    /// The region recorded, or `NOT_RECORDED`.
    pub id: u32,
    /// The parallel construct's code pointer (implicit tasks), the key of a sync region, the
    /// task's data (explicit tasks).
    pub extra: u64,
    /// The team of an implicit task (this thread's hold on it).
    pub team: Option<Hold>,
    /// An implicit task of a worker thread (not the team's primary).
    pub worker: bool,
}

pub struct ThreadLate {
    keys: Box<[u64; SLOTS]>,
    values: Box<[Packed; SLOTS]>,
    /// Every key this thread has seen (the cache's backing store).
    seen: FxHashMap<u64, Packed>,
    /// The instrumented functions this thread has seen (indexed by `local_of`).
    pub fns: Vec<FnState>,
    /// Enters not recorded because the thread's stack of open calls was full: their exits are
    /// skipped too, so that every exit pairs with its enter.
    pub fn_overflow: u32,
    /// How many throttled functions this thread has taken note of (see `functions`).
    pub throttled_seen: u32,
    /// OpenMP regions open on this thread, innermost last.
    pub omp: Vec<OmpOpen>,
    /// The code pointer of the last worksharing construct this thread began (names a barrier
    /// the runtime reports without one: the one at the end of a GCC loop).
    pub omp_last_work: u64,
    /// A worker's part of a parallel region and the barrier that ended it, whose ends the
    /// runtime reported late (`openmp`): taken off the stack unrecorded, innermost first, each
    /// with the time its end was reported; recorded once the team's end is in this core's
    /// cache, at the thread's next end of an OpenMP region (or at finalize).
    pub detached: Vec<Detached>,
    /// The teams this thread is in (declared after `omp`, whose holds are dropped first).
    pub holds: Holds,
    /// The slots of the teams this thread makes as a primary thread.
    pub teams: Ring,
}

impl Default for ThreadLate {
    fn default() -> ThreadLate {
        ThreadLate {
            keys: Box::new([0; SLOTS]),
            values: Box::new([0; SLOTS]),
            seen: FxHashMap::default(),
            fns: Vec::new(),
            fn_overflow: 0,
            throttled_seen: 0,
            omp: Vec::new(),
            omp_last_work: 0,
            detached: Vec::new(),
            holds: Holds::default(),
            teams: Ring::default(),
        }
    }
}

#[inline(always)]
fn slot(key: u64) -> usize {
    ((key >> 4) ^ (key >> 13) ^ (key >> 56)) as usize % SLOTS
}

impl ThreadLate {
    /// The value of `key` if it is in the cache (keys are never 0).
    #[inline(always)]
    pub fn cached(&self, key: u64) -> Option<Packed> {
        let i = slot(key);
        if self.keys[i] == key { Some(self.values[i]) } else { None }
    }

    /// The value of `key` if this thread has seen it: the cache, else the backing store (the
    /// slot is then refilled).
    #[inline]
    pub fn lookup(&mut self, key: u64) -> Option<Packed> {
        match self.cached(key) {
            Some(v) => Some(v),
            None => self.lookup_seen(key),
        }
    }

    #[cold]
    fn lookup_seen(&mut self, key: u64) -> Option<Packed> {
        let v = self.seen.get(&key).copied()?;
        self.refill(key, v);
        Some(v)
    }

    fn refill(&mut self, key: u64, value: Packed) {
        let i = slot(key);
        self.keys[i] = key;
        self.values[i] = value;
    }

    /// Remember what `key` maps to on this thread (after the global first sight); a function's
    /// region gets a `FnState` of this thread.
    pub fn insert(&mut self, key: u64, id: u32, function: bool) -> Packed {
        let local = if function && id != super::NOT_RECORDED {
            self.fns.push(FnState { id, ..FnState::default() });
            (self.fns.len() - 1) as u32
        } else {
            0
        };
        let v = pack(id, local);
        self.seen.insert(key, v);
        self.refill(key, v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_and_backing_store_agree() {
        let mut t = ThreadLate::default();
        assert_eq!(t.lookup(0x1234), None);
        let a = t.insert(0x1234, 7, true);
        assert_eq!((id_of(a), local_of(a)), (7, 0));
        let b = t.insert(0x5678, 9, true);
        assert_eq!((id_of(b), local_of(b)), (9, 1));
        let c = t.insert(0x9abc | 3 << 56, 11, false);
        assert_eq!((id_of(c), local_of(c)), (11, 0));
        let d = t.insert(0xdef0, crate::late::NOT_RECORDED, true);
        assert_eq!(id_of(d), crate::late::NOT_RECORDED);
        assert_eq!(t.fns.len(), 2);
        // Many keys on one slot: the cache holds the last, `seen` all of them.
        for k in 1..5000u64 {
            t.insert(k << 20, k as u32, false);
        }
        for k in 1..5000u64 {
            assert_eq!(t.lookup(k << 20).map(id_of), Some(k as u32));
        }
        assert_eq!(t.lookup(0x1234), Some(a));
        assert_eq!(t.lookup(0x42), None);
    }
}
