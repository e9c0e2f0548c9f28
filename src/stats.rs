//! The statistics sink: per thread and region, the count, total, minimum, maximum and
//! exclusive time of the completed calls, and a log2 histogram of their durations.
//!
//! It is kept in every layout: it is the whole record in the aggregate layout (which keeps no
//! calls), and it answers `sp_region_get_stats` and the mid-run summary while the program runs.
//!
//! Only the owning thread writes its table, with relaxed atomic loads and stores (plain moves
//! on x86-64, no read-modify-write, no lock). Any thread may read every table at any time
//! with relaxed loads: a snapshot taken while the owner is inside a stop may be torn across
//! fields (a count that already includes a call whose total does not yet, for one call per
//! thread at most), which is fine for live statistics; finalize reads after quiescence, when
//! nothing is torn.
//!
//! Values are stored in the clock's units (`clock.rs`); `to_ns` converts them when read, so
//! a clock with other units converts in one place. What a table is read into (`Stats`, the
//! histogram buckets) is plain data in `model::stats`.

use crate::model::{HIST_BUCKETS, Stats, bucket};
use std::sync::atomic::{AtomicI64, AtomicPtr, AtomicU64, Ordering::Relaxed};

/// Regions per lazily allocated block of a thread's table.
const BLOCK: usize = 64;
const BLOCKS: usize = (crate::registry::MAX_REGIONS as usize).div_ceil(BLOCK);
const _: () = assert!(BLOCKS > 0);

/// One region's statistics on one thread.
pub struct Cell {
    count: AtomicU64,
    total: AtomicI64,
    min: AtomicI64,
    max: AtomicI64,
    exclusive: AtomicI64,
    hist: [AtomicU64; HIST_BUCKETS],
}

impl Cell {
    fn new() -> Cell {
        Cell {
            count: AtomicU64::new(0),
            total: AtomicI64::new(0),
            min: AtomicI64::new(i64::MAX),
            max: AtomicI64::new(0),
            exclusive: AtomicI64::new(0),
            hist: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Record one completed call (owner thread only): count, total, min, max, exclusive.
    #[inline(always)]
    pub fn record(&self, duration: i64, exclusive: i64) {
        // Owner-only read-modify-write split into a load and a store: no lock prefix.
        self.count.store(self.count.load(Relaxed) + 1, Relaxed);
        self.total.store(self.total.load(Relaxed).wrapping_add(duration), Relaxed);
        self.min.store(self.min.load(Relaxed).min(duration), Relaxed);
        self.max.store(self.max.load(Relaxed).max(duration), Relaxed);
        self.exclusive.store(self.exclusive.load(Relaxed).wrapping_add(exclusive), Relaxed);
    }

    /// `record` plus the histogram (the aggregate layout, where the histogram is the only
    /// record of the distribution; the layouts that keep calls build it from them at finalize,
    /// since it costs ~2 ns per call on the hot path). The bucket is that of the duration in
    /// nanoseconds (`clock::histogram_ns`: one multiply by the run's histogram rate), so a call
    /// lands where its converted duration belongs, not where its tick count does.
    #[inline(always)]
    pub fn record_with_histogram(&self, duration: i64, exclusive: i64) {
        self.record(duration, exclusive);
        let h = &self.hist[bucket(crate::clock::histogram_ns(duration))];
        h.store(h.load(Relaxed) + 1, Relaxed);
    }

    fn snapshot(&self) -> Stats {
        let count = self.count.load(Relaxed);
        let min = self.min.load(Relaxed);
        Stats {
            count,
            total: self.total.load(Relaxed),
            min: if count == 0 || min == i64::MAX { 0 } else { min },
            max: self.max.load(Relaxed),
            exclusive: self.exclusive.load(Relaxed),
            hist: self.hist.iter().map(|h| h.load(Relaxed)).collect(),
        }
    }
}

type Block = [Cell; BLOCK];

/// One thread's statistics, indexed by region id, in blocks that never move once allocated
/// (so readers on other threads can hold on to them).
pub struct Table {
    blocks: Box<[AtomicPtr<Block>]>,
}

impl Default for Table {
    fn default() -> Table {
        // Zeroed memory straight from the allocator (a null AtomicPtr is all zero bits): the
        // directory's pages are touched only where a block is used, not all 128 KiB per thread.
        // (`alloc_zeroed` rather than `Box::new_zeroed_slice`, which needs Rust 1.92.)
        let layout = std::alloc::Layout::array::<AtomicPtr<Block>>(BLOCKS).expect("the directory's size fits");
        // SAFETY: a layout of non-zero size (BLOCKS > 0).
        let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut AtomicPtr<Block>;
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: BLOCKS zeroed AtomicPtrs (an all-zero AtomicPtr is a valid null pointer), from
        // the global allocator with the layout a boxed slice of them has.
        Table { blocks: unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, BLOCKS)) } }
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        for b in self.blocks.iter() {
            let p = b.load(Relaxed);
            if !p.is_null() {
                // SAFETY: allocated by Box::into_raw in `grow`, freed once here.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

impl Table {
    /// The cell of region `id` (owner thread only: it may allocate).
    #[inline(always)]
    pub fn cell(&self, id: u32) -> &Cell {
        let i = id as usize;
        let p = self.blocks.get(i / BLOCK).map_or(std::ptr::null_mut(), |b| b.load(Relaxed));
        let block = if p.is_null() { self.grow(i / BLOCK) } else { p };
        // SAFETY: blocks are freed only when the table is dropped, which needs `&mut self`.
        unsafe { &(*block)[i % BLOCK] }
    }

    #[cold]
    fn grow(&self, b: usize) -> *mut Block {
        let Some(slot) = self.blocks.get(b) else {
            // Ids beyond MAX_REGIONS are refused by the registry; never reached.
            return Box::into_raw(Box::new(std::array::from_fn(|_| Cell::new())));
        };
        let block: Box<Block> = Box::new(std::array::from_fn(|_| Cell::new()));
        let p = Box::into_raw(block);
        // Release: a reader that sees the pointer sees the initialized cells.
        slot.store(p, std::sync::atomic::Ordering::Release);
        p
    }

    /// A snapshot of region `id` (any thread).
    pub fn get(&self, id: u32) -> Option<Stats> {
        let p = self.blocks.get(id as usize / BLOCK)?.load(std::sync::atomic::Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: see `cell`.
        let s = unsafe { &(*p)[id as usize % BLOCK] }.snapshot();
        (s.count > 0).then_some(s)
    }

    /// Every region with at least one completed call: (id, stats).
    pub fn all(&self) -> Vec<(u32, Stats)> {
        let mut out = Vec::new();
        for (b, slot) in self.blocks.iter().enumerate() {
            if !slot.load(std::sync::atomic::Ordering::Acquire).is_null() {
                out.extend((0..BLOCK).filter_map(|i| {
                    let id = (b * BLOCK + i) as u32;
                    self.get(id).map(|s| (id, s))
                }));
            }
        }
        out
    }
}

impl Stats {
    /// The same statistics in nanoseconds, through the run's clock conversion: the one place
    /// where stored clock values become nanoseconds for statistics. Times scale at the run's
    /// mean rate; the histogram is in nanosecond buckets already (`Cell::record_with_histogram`
    /// buckets each call by its converted duration). The identity in monotonic mode.
    pub fn to_ns(self, timebase: &crate::clock::Timebase) -> Stats {
        if timebase.is_identity() {
            return self;
        }
        let d = |t: i64| timebase.duration_ns(t);
        Stats { count: self.count, total: d(self.total), min: d(self.min), max: d(self.max), exclusive: d(self.exclusive), hist: self.hist }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_reads() {
        let t = Table::default();
        assert!(t.get(5).is_none());
        t.cell(5).record_with_histogram(10, 4);
        t.cell(5).record_with_histogram(30, 30);
        t.cell(200).record_with_histogram(7, 7);
        let s = t.get(5).unwrap();
        assert_eq!((s.count, s.total, s.min, s.max, s.exclusive), (2, 40, 10, 30, 34));
        assert_eq!(s.hist[bucket(10)], 1);
        assert_eq!(s.hist[bucket(30)], 1);
        assert_eq!(t.all().iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![5, 200]);
        let mut p = Stats::default();
        p.merge(&s);
        p.merge(&t.get(200).unwrap());
        assert_eq!((p.count, p.total, p.min, p.max, p.exclusive), (3, 47, 7, 30, 41));
        assert!(t.get(u32::MAX).is_none());
    }
}
