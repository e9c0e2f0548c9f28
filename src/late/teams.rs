//! The teams of OpenMP parallel regions, shared by their threads without a reference count.
//!
//! A run of a parallel region (a team) is one slot of its primary thread's ring: the
//! construct's key, which the team's threads read when they begin their parts, and the team's
//! end, which a worker needs when the runtime reports its part's end late (when the worker is
//! next given work, or at shutdown): it prefetches the end then and reads it at its next end of
//! an OpenMP region (`openmp`, the detached ends). Two things keep the slot's cache lines from going back
//! and forth between the cores of a team on every region:
//!
//! - no thread writes a line another thread writes: a thread notes the teams it is in (its
//!   *holds*) in a cell of its own, and the primary thread finds out which of its slots are
//!   held by reading the cells, once per ring's worth of regions (a slot is taken again only
//!   when no cell holds it and its region has ended);
//! - the key has a line of its own, written only when a run of another construct takes the
//!   slot: in a loop over one parallel region it stays in every core's cache.
//!
//! Slots and cells live as long as the process (a ring's blocks and a thread's cell go back to
//! a pool when the thread's state is dropped, and are used again from there), so a slot a
//! runtime's data word still points to is never freed memory.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// Slots of a ring's block (one bit each in a mask).
const BLOCK: usize = 64;
/// Teams a thread's cell holds without a lock (deeper nesting goes to its overflow list).
const HOLDS: usize = 7;

/// One cache line pair (an adjacent-line prefetch never brings the other field along).
#[repr(align(128))]
#[derive(Debug, Default)]
struct Line<T>(T);

/// One run of a parallel region (a team): see the module's note.
#[derive(Debug, Default)]
pub struct Team {
    key: Line<AtomicU64>,
    end: Line<Ends>,
}

#[derive(Debug, Default)]
struct Ends {
    /// Clock ticks; 0 while the region runs.
    end: AtomicI64,
    /// Taken for a region that has not ended (the runtime's `parallel_end` not seen yet).
    live: AtomicBool,
}

impl Team {
    /// The parallel construct's key.
    #[inline(always)]
    pub fn key(&self) -> u64 {
        self.key.0.load(Ordering::Relaxed)
    }

    /// When the team's primary thread ended its part (0: the region runs).
    #[inline(always)]
    pub fn end(&self) -> i64 {
        self.end.0.end.load(Ordering::Acquire)
    }

    /// Start bringing the team's end into this core's cache (a hint: nothing waits for it).
    #[inline(always)]
    pub fn prefetch_end(&self) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a hint on a valid address; it reads nothing into the program.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(&self.end as *const Line<Ends> as *const i8);
        }
    }

    /// The team's end, if none was set before (the first end is the team's).
    #[inline(always)]
    pub fn set_end(&self, end: i64) {
        if self.end.0.end.load(Ordering::Relaxed) == 0 {
            self.end.0.end.store(end, Ordering::Release);
        }
    }

    /// The runtime ended the region (`parallel_end`): the slot may be taken again once no
    /// thread holds it.
    #[inline(always)]
    pub fn ended(&self) {
        self.end.0.live.store(false, Ordering::Release);
    }

    fn reuse(&self, key: u64) {
        if self.key.0.load(Ordering::Relaxed) != key {
            self.key.0.store(key, Ordering::Relaxed);
        }
        self.end.0.end.store(0, Ordering::Relaxed);
        self.end.0.live.store(true, Ordering::Relaxed);
    }
}

struct Block {
    teams: [Team; BLOCK],
}

impl Block {
    /// The slot's index in this block, if `p` is one of its slots.
    fn index(&self, p: *const Team) -> Option<usize> {
        let base = self.teams.as_ptr() as usize;
        let off = (p as usize).checked_sub(base)?;
        (off < BLOCK * size_of::<Team>() && off % size_of::<Team>() == 0).then(|| off / size_of::<Team>())
    }
}

/// Blocks of rings whose threads' state was dropped, for other rings to use.
static BLOCKS: Mutex<Vec<&'static Block>> = Mutex::new(Vec::new());

/// A block for a ring: from the pool, else new. Apart from `take` (which runs at every
/// parallel region): a new block is built on the stack (16 KiB), and inside `take` that frame,
/// with its stack probes writing a line of each of its pages, was paid at every call.
#[cold]
#[inline(never)]
fn new_block() -> &'static Block {
    BLOCKS.try_lock().and_then(|mut p| p.pop()).unwrap_or_else(|| Box::leak(Box::new(Block { teams: std::array::from_fn(|_| Team::default()) })))
}

/// A primary thread's slots (or the shared ring of primary threads without a recorder).
#[derive(Default)]
pub struct Ring {
    /// Each block, with its slots free at the last scan and not taken since (one bit each).
    blocks: Vec<(&'static Block, u64)>,
}

impl Ring {
    /// A slot for a new run of the construct `key`.
    pub fn take(&mut self, key: u64) -> &'static Team {
        let mut scanned = false;
        loop {
            if let Some((block, free)) = self.blocks.iter_mut().find(|(_, f)| *f != 0) {
                let i = free.trailing_zeros() as usize;
                *free &= !(1 << i);
                let t = &block.teams[i];
                t.reuse(key);
                return t;
            }
            if scanned || self.blocks.is_empty() {
                self.blocks.push((new_block(), 0));
            }
            self.scan();
            scanned = true;
        }
    }

    /// Which slots are free: not live (read first: a region's holds are all set before its
    /// end), and held by no thread's cell.
    fn scan(&mut self) {
        for (block, free) in &mut self.blocks {
            *free = block.teams.iter().enumerate().filter(|(_, t)| !t.end.0.live.load(Ordering::Acquire)).fold(0, |m, (i, _)| m | 1 << i);
        }
        let cells = CELLS.lock();
        for c in cells.iter() {
            for h in &c.holds {
                let p = h.load(Ordering::Acquire);
                if !p.is_null() {
                    self.unfree(p);
                }
            }
            if c.more.load(Ordering::Acquire) > 0 {
                for &p in c.overflow.lock().iter() {
                    self.unfree(p as *const Team);
                }
            }
        }
    }

    fn unfree(&mut self, p: *const Team) {
        for (block, free) in &mut self.blocks {
            if let Some(i) = block.index(p) {
                *free &= !(1 << i);
            }
        }
    }

    #[cfg(test)]
    fn slots(&self) -> usize {
        self.blocks.len() * BLOCK
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Not under a lock some interrupted code may hold (a signal's finalize): the blocks
        // are then left unused.
        if let Some(mut pool) = BLOCKS.try_lock() {
            pool.extend(self.blocks.drain(..).map(|(block, _)| block));
        }
    }
}

/// The teams one thread is in.
#[repr(align(128))]
#[derive(Default)]
struct Cell {
    holds: [AtomicPtr<Team>; HOLDS],
    /// How many teams the overflow list holds.
    more: AtomicUsize,
    overflow: Mutex<Vec<usize>>,
}

/// Every cell made (a cell in the pool holds nothing).
static CELLS: Mutex<Vec<&'static Cell>> = Mutex::new(Vec::new());
static FREE_CELLS: Mutex<Vec<&'static Cell>> = Mutex::new(Vec::new());

/// A thread's cell (see the module's note); back to the pool when dropped.
#[derive(Default)]
pub struct Holds {
    cell: Option<&'static Cell>,
}

impl Holds {
    /// Note that this thread is in `team` until the returned hold is dropped.
    #[inline]
    pub fn hold(&mut self, team: &'static Team) -> Hold {
        let cell = match self.cell {
            Some(c) => c,
            None => self.new_cell(),
        };
        let p = team as *const Team as *mut Team;
        for h in &cell.holds {
            if h.load(Ordering::Relaxed).is_null() {
                h.store(p, Ordering::Relaxed);
                return Hold { team, at: h as *const AtomicPtr<Team> as usize };
            }
        }
        let mut v = cell.overflow.lock();
        v.push(p as usize);
        cell.more.store(v.len(), Ordering::Release);
        Hold { team, at: cell as *const Cell as usize | OVERFLOW }
    }

    #[cold]
    fn new_cell(&mut self) -> &'static Cell {
        let c = FREE_CELLS.lock().pop().unwrap_or_else(|| {
            let c: &'static Cell = Box::leak(Box::default());
            CELLS.lock().push(c);
            c
        });
        self.cell = Some(c);
        c
    }
}

impl Drop for Holds {
    fn drop(&mut self) {
        // The thread's holds were dropped before (`ThreadLate`'s drop); a cell whose pool is
        // locked by interrupted code stays out of use.
        if let Some(c) = self.cell.take() {
            if c.holds.iter().all(|h| h.load(Ordering::Relaxed).is_null()) && c.more.load(Ordering::Relaxed) == 0 {
                if let Some(mut pool) = FREE_CELLS.try_lock() {
                    pool.push(c);
                }
            }
        }
    }
}

/// A hold's `at` is a cell's overflow list (the cell's address, tagged), not one of its entries.
const OVERFLOW: usize = 1;

/// A thread's note that it is in a team (its part of the region is open on it): the slot is
/// not taken again while the note is there. Dropped after the thread's last read of the team.
pub struct Hold {
    team: &'static Team,
    /// The cell's entry holding it (a `&'static AtomicPtr<Team>`), or the cell itself tagged
    /// `OVERFLOW` (cells and entries are aligned: the low bit is free).
    at: usize,
}

impl Hold {
    #[inline(always)]
    pub fn team(&self) -> &'static Team {
        self.team
    }
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold").field("key", &self.team.key()).field("end", &self.team.end()).finish()
    }
}

impl Drop for Hold {
    #[inline]
    fn drop(&mut self) {
        if self.at & OVERFLOW == 0 {
            // SAFETY: an entry of a cell, which lives as long as the process.
            let h = unsafe { &*(self.at as *const AtomicPtr<Team>) };
            h.store(std::ptr::null_mut(), Ordering::Release);
        } else {
            // SAFETY: a cell (the tag cleared), which lives as long as the process.
            let c = unsafe { &*((self.at & !OVERFLOW) as *const Cell) };
            // Not waiting for a lock interrupted code may hold (a scan a signal's finalize
            // broke into): the slot then stays held, never taken again.
            let Some(mut v) = c.overflow.try_lock() else { return };
            let p = self.team as *const Team as usize;
            if let Some(i) = v.iter().position(|&q| q == p) {
                v.swap_remove(i);
            }
            c.more.store(v.len(), Ordering::Release);
        }
    }
}

/// The ring of primary threads that have no recorder (their regions' threads may have one).
static ORPHANS: Mutex<Option<Ring>> = Mutex::new(None);

/// A slot for a region whose primary thread has no recorder (no ring of its own).
pub fn take_orphan(key: u64) -> &'static Team {
    ORPHANS.lock().get_or_insert_with(Ring::default).take(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot is taken again only once its region ended and no thread holds it; a held slot
    /// keeps its key and end whatever the ring does meanwhile.
    #[test]
    fn slots_are_taken_again_only_when_ended_and_let_go_of() {
        let mut ring = Ring::default();
        let mut worker = Holds::default();
        let a = ring.take(1);
        assert_eq!((a.key(), a.end()), (1, 0));
        let held = worker.hold(a);
        a.set_end(100);
        a.set_end(200);
        assert_eq!(a.end(), 100, "the first end is the team's");
        a.ended();
        // Many regions after it, each ended and let go of at once: never `a`.
        for k in 0..10 * BLOCK as u64 {
            let t = ring.take(10 + k);
            assert!(!std::ptr::eq(t, a), "a held slot is not taken");
            t.ended();
        }
        assert_eq!((held.team().key(), held.team().end()), (1, 100));
        assert_eq!(ring.slots(), BLOCK, "free slots are used again: no growth");
        drop(held);
        let mut seen = false;
        for k in 0..2 * BLOCK as u64 {
            let t = ring.take(k + 1000);
            if std::ptr::eq(t, a) {
                seen = true;
                assert_eq!((t.key(), t.end()), (k + 1000, 0), "a slot taken again is a new team");
            }
            t.ended();
        }
        assert!(seen, "a slot let go of is used again");
        // A live slot (no `parallel_end` yet) is never taken, held or not.
        let live = ring.take(7);
        for k in 0..2 * BLOCK as u64 {
            let t = ring.take(k + 2000);
            assert!(!std::ptr::eq(t, live));
            t.ended();
        }
        assert_eq!(live.key(), 7);
        // Ended, so that the block, pooled when the ring goes, has no slot live for ever (a test
        // running beside this one may take it: `many_holds_and_deep_nesting` counts its slots).
        live.ended();
    }

    #[test]
    fn an_open_regions_entry_stays_small() {
        assert_eq!(size_of::<Option<Hold>>(), 16);
        assert_eq!(size_of::<crate::late::OmpOpen>(), 32);
    }

    /// More teams held than a block has slots, and deeper than a cell holds without its list:
    /// the ring grows, and every held slot keeps its key.
    #[test]
    fn many_holds_and_deep_nesting() {
        let mut ring = Ring::default();
        let mut cells: Vec<Holds> = (0..3).map(|_| Holds::default()).collect();
        let mut holds = Vec::new();
        for k in 0..3 * BLOCK as u64 {
            let t = ring.take(k + 1);
            holds.push(cells[k as usize % 3].hold(t));
            t.ended();
        }
        assert!(ring.slots() >= 3 * BLOCK);
        let taken: Vec<&'static Team> = (0..BLOCK as u64).map(|k| ring.take(5000 + k)).collect();
        for (k, h) in holds.iter().enumerate() {
            assert_eq!(h.team().key(), k as u64 + 1);
            assert!(taken.iter().all(|t| !std::ptr::eq(*t, h.team())));
        }
        // Let go of in any order (the overflow list's entries too).
        holds.reverse();
        drop(holds);
        for t in taken {
            t.ended();
        }
        // Every slot free again: as many regions at once (none ended) as there are slots fit.
        let before = ring.slots();
        let open: Vec<&'static Team> = (0..before as u64).map(|k| ring.take(k + 9000)).collect();
        assert_eq!(ring.slots(), before, "every slot let go of is free again");
        for t in open {
            t.ended();
        }
    }
}
