//! A region's calls handed out in start order, a slab at a time: from columns as they are, or
//! merged from the threads' packed logs (`PackedCalls`, implemented by the collecting code) on
//! one, two or more threads, so that merging and writing overlap.

use super::workers::{helper_threads_allowed, lock_busy, spawn_apart, workers};
use super::{Call, Calls, Columns, PageVec, RegionData};

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

/// Calls still packed as the threads recorded them (the collecting code's per-thread logs and
/// the clock conversion that turns them into nanoseconds): what handing them out needs.
pub trait PackedCalls: std::fmt::Debug + Send + Sync {
    /// Number of calls.
    fn calls(&self) -> usize;
    /// Bytes reserved for the calls (is a second thread worth it?).
    fn bytes_reserved(&self) -> usize;
    /// Bytes of them held on the heap.
    fn heap_bytes(&self) -> usize;
    /// A merge of the calls in start order, from the first, in nanoseconds.
    fn merge(&self) -> Box<dyn SlabSource + Send + '_>;
}

/// The merge of a region's packed calls, one slab at a time, so that the merge can move
/// between threads between slabs.
pub trait SlabSource {
    /// Fill `out` (emptied first) with the next calls, at most `SLAB`; false when none are left.
    fn next_slab(&mut self, out: &mut Buffers) -> bool;
}

impl RegionData {
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
            Calls::Packed(packed) => {
                let (mut merger, mut buf) = (packed.merge(), new_buffers(packed.calls()));
                while merger.next_slab(&mut buf) {
                    f(slab_of(&buf))?;
                }
                Ok(())
            }
        }
    }

    /// Like `for_each_slab_pipelined`, with a per-slab encoding step `map` (into a `T`) that runs
    /// on the merging thread too, so the calling thread only writes (`f`). `map` sees the
    /// slabs in order and may keep state across them.
    pub fn for_each_slab_mapped<T: Send + Default, E>(
        &self,
        mut map: impl FnMut(Slab<'_>, &mut T) + Send,
        mut f: impl FnMut(&T) -> Result<(), E>,
    ) -> Result<(), E> {
        if let Some(packed) = self.packed_and_large() {
            let (mut merger, mut buf) = (packed.merge(), new_buffers(packed.calls()));
            let produce = |t: &mut T| {
                let more = merger.next_slab(&mut buf);
                if more {
                    map(slab_of(&buf), t);
                }
                more
            };
            if let Some(result) = pipeline(T::default, produce, &mut f) {
                return result;
            }
        }
        let mut t = T::default();
        self.for_each_slab(|s| {
            map(s, &mut t);
            f(&t)
        })
    }

    /// `for_each_slab` with the merging of packed calls on a second thread, one slab ahead of
    /// `f` (which stays on the calling thread: HDF5 is not thread-safe). The write of one slab
    /// overlaps the merging of the next, so a region is written at the speed of the slower of
    /// the two, not their sum. Small regions are done inline.
    pub fn for_each_slab_pipelined<E>(&self, mut f: impl FnMut(Slab<'_>) -> Result<(), E>) -> Result<(), E> {
        if let Some(packed) = self.packed_and_large() {
            let mut merger = packed.merge();
            if let Some(result) = pipeline(|| new_buffers(SLAB), |b| merger.next_slab(b), |b| f(slab_of(b))) {
                return result;
            }
        }
        self.for_each_slab(f)
    }

    /// Whether `for_each_slab_parallel` shares this region's merge between workers (its
    /// packed calls are many enough to be worth a second thread); a region that is not is done
    /// by one thread, so a writer may write several such regions side by side.
    pub fn shares_its_merge(&self) -> bool {
        self.packed_and_large().is_some()
    }

    /// The packed calls, if there are enough of them to be worth a second thread.
    fn packed_and_large(&self) -> Option<&dyn PackedCalls> {
        match &self.calls {
            Calls::Packed(packed) if packed.bytes_reserved() >= 32 * SLAB => Some(packed.as_ref()),
            _ => None,
        }
    }

    /// Hand the calls to `f` in start order, slab by slab, each with its place in the region
    /// (`SlabPlace`), on `workers` threads (the calling one among them): a worker takes the
    /// merge, fills its own slab buffers with the next calls, passes the merge on and hands its
    /// slab to `f` while another worker merges the next. So merging and writing overlap as in
    /// `for_each_slab_pipelined`, but each slab is written by the thread that filled it (from
    /// its own cache, not the other core's) and every thread both merges and writes, so the
    /// cores share the work whichever of the two is slower. For writers that can write any
    /// part of a column from any thread (`writer::Column` with direct writes). Each worker
    /// keeps its own state (`init`), returned at the end (the calling thread's first), for
    /// what a writer sums over the slabs. Small regions and a single worker are done inline.
    /// (Writers ask for no more workers than the calling thread has CPUs: `workers::workers`.)
    pub fn for_each_slab_parallel<W: Send, E: Send>(
        &self,
        workers: usize,
        init: impl Fn() -> W + Sync,
        f: impl Fn(&mut W, SlabPlace, Slab<'_>) -> Result<(), E> + Sync,
    ) -> Result<Vec<W>, E> {
        let Some(packed) = self.packed_and_large().filter(|_| workers >= 2 && helper_threads_allowed()) else {
            let (mut w, mut place) = (init(), SlabPlace::default());
            self.for_each_slab(|s| {
                place.first.get_or_insert(Call { start: s.starts[0], end: s.ends[0] });
                f(&mut w, place, s)?;
                place.advance(&s);
                Ok(())
            })?;
            return Ok(vec![w]);
        };
        // The merge and the place of the next slab it gives; None once a worker failed.
        let shared = parking_lot::Mutex::new(Some((packed.merge(), SlabPlace::default())));
        let work = || -> Result<W, E> {
            let (mut buf, mut w) = (new_buffers(SLAB), init());
            loop {
                let place = {
                    // Taken out while merging: a worker that panics there (the merge half
                    // done) leaves None, and the others stop.
                    // Waiting busy, not asleep: see `workers`.
                    let mut guard = lock_busy(&shared);
                    let Some((mut merger, mut next)) = guard.take() else { return Ok(w) };
                    if !merger.next_slab(&mut buf) {
                        *guard = Some((merger, next));
                        return Ok(w);
                    }
                    let (starts, ends, _) = &*buf;
                    next.first.get_or_insert(Call { start: starts[0], end: ends[0] });
                    let place = next;
                    next.advance(&slab_of(&buf));
                    *guard = Some((merger, next));
                    place
                };
                if let Err(e) = f(&mut w, place, slab_of(&buf)) {
                    // Stop the others: the region cannot be completed.
                    *shared.lock() = None;
                    return Err(e);
                }
            }
        };
        std::thread::scope(|scope| {
            // Fewer helpers if threads cannot be had: the calling thread can do it all.
            let helpers: Vec<_> = (1..workers).filter_map(|_| spawn_apart(scope, "sp-merge", work)).collect();
            let mut result = work().map(|w| vec![w]);
            for h in helpers {
                // A helper that panicked stops nothing but itself; its slabs are missing, which
                // the caller's count of written calls reports.
                match (h.join(), &mut result) {
                    (Ok(Ok(w)), Ok(all)) => all.push(w),
                    (Ok(Err(e)), Ok(_)) => result = Err(e),
                    _ => {}
                }
            }
            result
        })
    }
}

/// Where a slab sits in its region.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SlabPlace {
    /// Index of the slab's first call in the region.
    pub at: usize,
    /// Start of the call before the slab's first (None for the first slab).
    pub prev_start: Option<i64>,
    /// The region's first call.
    pub first: Option<Call>,
}

impl SlabPlace {
    fn advance(&mut self, s: &Slab<'_>) {
        self.at += s.starts.len();
        self.prev_start = s.starts.last().copied().or(self.prev_start);
    }
}

/// Run `produce` (fill the next item; false at the end) on a helper thread, up to two items
/// ahead of `consume` on this thread; items go back and forth, three in all (made by `make`).
/// None when no thread could be had: then nothing was produced or consumed.
fn pipeline<T: Send, E>(
    make: impl Fn() -> T,
    mut produce: impl FnMut(&mut T) -> bool + Send,
    mut consume: impl FnMut(&T) -> Result<(), E>,
) -> Option<Result<(), E>> {
    if workers(2) < 2 {
        return None;
    }
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<T>(2);
    let (empty_tx, empty_rx) = std::sync::mpsc::channel::<T>();
    for _ in 0..3 {
        let _ = empty_tx.send(make());
    }
    let produce = &mut produce;
    std::thread::scope(|scope| {
        let producer = spawn_apart(scope, "sp-merge", move || {
            while let Ok(mut t) = empty_rx.recv() {
                if !produce(&mut t) || full_tx.send(t).is_err() {
                    break;
                }
            }
        })?;
        let mut result = Ok(());
        for t in full_rx.iter() {
            result = consume(&t);
            if result.is_err() {
                break; // dropping the receiver stops the producer
            }
            let _ = empty_tx.send(t);
        }
        drop(full_rx);
        drop(empty_tx);
        let _ = producer.join();
        Some(result)
    })
}

/// Slab buffers: starts, ends, thread ids.
pub type Buffers = (PageVec<i64>, PageVec<i64>, PageVec<i64>);

/// A slab's buffers for a region of `calls` calls: room for a slab, or for all of them when
/// fewer (a full slab's buffers, 512 KiB each, are mappings of their own: see `pages.rs`),
/// on the storage of an earlier region's when there is some (`PageVec::pooled`).
fn new_buffers(calls: usize) -> SlabBuffers {
    let n = calls.clamp(1, SLAB);
    let mut b: Buffers = (PageVec::pooled(), PageVec::pooled(), PageVec::pooled());
    b.0.reserve(n);
    b.1.reserve(n);
    b.2.reserve(n);
    SlabBuffers(b)
}

/// A slab's buffers, whose storage is given back for the next region's when dropped
/// (`PageVec::recycle`).
pub struct SlabBuffers(Buffers);

impl std::ops::Deref for SlabBuffers {
    type Target = Buffers;
    fn deref(&self) -> &Buffers {
        &self.0
    }
}

impl std::ops::DerefMut for SlabBuffers {
    fn deref_mut(&mut self) -> &mut Buffers {
        &mut self.0
    }
}

impl Drop for SlabBuffers {
    fn drop(&mut self) {
        let (a, b, c) = std::mem::take(&mut self.0);
        a.recycle();
        b.recycle();
        c.recycle();
    }
}

fn slab_of(b: &Buffers) -> Slab<'_> {
    Slab { starts: &b.0, ends: &b.1, thread_ids: &b.2 }
}
