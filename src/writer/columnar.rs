//! The columnar layout: the Python package's schema 3 (`storage_layout = "columnar"`).
//!
//! - `/events/start_deltas`, `/events/durations` (int64): every call, rank by rank and region
//!   by region; within a (rank, region) row the first start is absolute and the others are
//!   gaps from the previous start, so the reader's cumulative sum restores the starts.
//! - `/events/thread_ids`: the recording thread of each call, as narrow as the run allows
//!   (uint8 up to 256 threads per rank, then uint16, uint32), so a call costs 17 bytes.
//! - `/region_table/names` and `/rank_region_index/*`: one row per (rank, region) with the
//!   offset and count of its calls, the summary statistics and the exclusive time.
//! - Ours, beside it (the Python reader ignores them): `rank_region_index/open_calls`,
//!   `dropped_calls`, `histograms`, the per-thread statistics in `/scope_profiler_threads` and
//!   the rank table `/scope_profiler_ranks` (see `tables`).
//!
//! Here: encoding a region's calls for the event columns (`encode`, summing up its statistics
//! on the way in a `Partial`) and writing them (`EventColumns`); `tables` lays the file out and
//! writes the rows. The collective write over MPI encodes with `encode_region` too.

use super::tables::{DirectBytes, RawColumn, RowData, Tables};
use crate::model::{Call, HIST_BUCKETS, PageVec, RegionData, Slab, SlabPlace, Stats, bucket};

#[derive(hdf5::H5Type, Clone, Copy, Default, Debug)]
#[repr(C)]
pub struct Summary {
    pub total: i64,
    pub minimum: i64,
    pub maximum: i64,
    pub first: i64,
    pub last: i64,
    pub start_minimum: i64,
    pub end_maximum: i64,
    pub gpu_count: u64,
    pub gpu_total: i64,
    pub mean: f64,
    pub m2: f64,
}

/// One slab encoded for the columns (mappings of their own: see `model/pages.rs`). The two
/// large columns' storage is an earlier region's when there is some, and is given back for
/// the next one's when dropped (`PageVec::pooled`).
pub struct Encoded {
    pub d: PageVec<i64>,
    pub u: PageVec<i64>,
    pub t8: PageVec<u8>,
    pub t16: PageVec<u16>,
    pub t32: PageVec<u32>,
}

impl Default for Encoded {
    fn default() -> Self {
        Encoded { d: PageVec::pooled(), u: PageVec::pooled(), t8: PageVec::new(), t16: PageVec::new(), t32: PageVec::new() }
    }
}

impl Drop for Encoded {
    fn drop(&mut self) {
        std::mem::take(&mut self.d).recycle();
        std::mem::take(&mut self.u).recycle();
    }
}

impl Encoded {
    /// Empty, with no storage (a placeholder while the storage is lent out).
    pub const fn new() -> Encoded {
        Encoded { d: PageVec::new(), u: PageVec::new(), t8: PageVec::new(), t16: PageVec::new(), t32: PageVec::new() }
    }

    /// Room for `calls` calls with thread ids of `width` bytes (mappings of their own, given
    /// back to the pool when small enough).
    pub fn with_capacity(calls: usize, width: usize) -> Encoded {
        let mut e = Encoded { d: PageVec::with_capacity(calls), u: PageVec::with_capacity(calls), t8: PageVec::new(), t16: PageVec::new(), t32: PageVec::new() };
        match width {
            1 => e.t8.reserve(calls),
            2 => e.t16.reserve(calls),
            _ => e.t32.reserve(calls),
        }
        e
    }

    pub fn len(&self) -> usize {
        self.d.len()
    }

    pub fn clear(&mut self) {
        self.d.clear();
        self.u.clear();
        self.t8.clear();
        self.t16.clear();
        self.t32.clear();
    }

    /// Drop the first `n` calls (those written), keeping the rest in order.
    pub fn remove_front(&mut self, n: usize) {
        self.d.remove_front(n);
        self.u.remove_front(n);
        self.t8.remove_front(n);
        self.t16.remove_front(n);
        self.t32.remove_front(n);
    }

    pub fn is_empty(&self) -> bool {
        self.d.is_empty()
    }

    /// The thread ids' bytes (of whichever width is in use).
    pub fn thread_bytes(&self) -> &[u8] {
        if !self.t8.is_empty() {
            &self.t8
        } else if !self.t16.is_empty() {
            plain_bytes(&self.t16)
        } else {
            plain_bytes(&self.t32)
        }
    }
}

/// A slice of plain integers as its bytes in memory (the dataset's native type).
pub fn plain_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: only called with integer slices, whose bytes are initialized.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// What the encoding of some of a region's slabs sums up (one per worker, added at the end).
#[derive(Default)]
pub struct Partial {
    pub count: u64,
    total: i64,
    minimum: i64,
    maximum: i64,
    start_minimum: i64,
    end_maximum: i64,
    /// Sums of (duration - the region's first duration) and of its square, in integers: the
    /// variance in one pass, exact whatever the order of the slabs (and no chain of
    /// floating-point additions, four cycles each, on every call).
    s1: i128,
    s2: i128,
    /// The duration of the last call seen and the index after it.
    last: (usize, i64),
    /// Histograms per thread, from the calls (the hot path keeps none when calls are kept).
    hists: Vec<Vec<u64>>,
    /// The region's first call (its duration is the first and the shift of the sums).
    first: Option<Call>,
    /// Whether the last part this worker counted had many calls above the thresholds' window
    /// (`TAIL_SHARE`): a hint for how the next part's histograms are counted, not data.
    tail_heavy: bool,
}

impl Partial {
    pub fn add(&mut self, o: Partial) {
        if o.count == 0 {
            return;
        }
        if self.count == 0 {
            (self.minimum, self.maximum, self.start_minimum, self.end_maximum) = (o.minimum, o.maximum, o.start_minimum, o.end_maximum);
        }
        self.count += o.count;
        self.total = self.total.wrapping_add(o.total);
        self.minimum = self.minimum.min(o.minimum);
        self.maximum = self.maximum.max(o.maximum);
        self.start_minimum = self.start_minimum.min(o.start_minimum);
        self.end_maximum = self.end_maximum.max(o.end_maximum);
        self.s1 = self.s1.wrapping_add(o.s1);
        self.s2 = self.s2.wrapping_add(o.s2);
        self.last = self.last.max(o.last);
        self.first = self.first.or(o.first);
        if self.hists.len() < o.hists.len() {
            self.hists.resize(o.hists.len(), Vec::new());
        }
        for (mine, theirs) in self.hists.iter_mut().zip(o.hists) {
            if mine.is_empty() {
                *mine = theirs;
            } else if !theirs.is_empty() {
                mine.iter_mut().zip(theirs).for_each(|(a, b)| *a += b);
            }
        }
    }

    /// The exact sums of the durations and of their squares (the variance merged over any
    /// number of parts without rounding).
    pub fn moments(&self) -> (i128, i128) {
        let f = self.first.map_or(0, |c| c.end.wrapping_sub(c.start)) as i128;
        let n = self.count as i128;
        (self.s1.wrapping_add(n.wrapping_mul(f)), self.s2.wrapping_add((2 * f).wrapping_mul(self.s1)).wrapping_add(n.wrapping_mul(f).wrapping_mul(f)))
    }

    pub fn summary(&self) -> Summary {
        let first = self.first.map_or(0, |c| c.end.wrapping_sub(c.start));
        let mut s = Summary {
            total: self.total,
            minimum: self.minimum,
            maximum: self.maximum,
            first,
            last: self.last.1,
            start_minimum: self.start_minimum,
            end_maximum: self.end_maximum,
            ..Default::default()
        };
        if self.count > 0 {
            let (n, s1, s2) = (self.count as f64, self.s1 as f64, self.s2 as f64);
            s.mean = first as f64 + s1 / n;
            s.m2 = (s2 - s1 * s1 / n).max(0.0);
        }
        s
    }
}

/// Encode one slab for the event columns (gaps, durations, narrow thread ids) and add it to
/// the worker's `Partial`. `place` says where the slab is in its region: the first gap is from
/// the call before, and the first call of the region starts absolute.
pub fn encode(slab: Slab<'_>, place: &SlabPlace, width: usize, p: &mut Partial, e: &mut Encoded) {
    e.clear();
    encode_onto(slab, place, width, p, e)
}

/// `encode`, appended to what `e` holds (a rank's staging of several slabs and regions).
pub fn encode_onto(slab: Slab<'_>, place: &SlabPlace, width: usize, p: &mut Partial, e: &mut Encoded) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("lzcnt") {
        // SAFETY: the CPU has AVX2 and LZCNT.
        return unsafe { encode_avx2(slab, place, width, p, e) };
    }
    encode_passes(slab, place, width, p, e)
}

/// `encode` compiled for AVX2 (the loops over a slab's columns four calls at a time, the
/// minimum and maximum without branches; the same results: the same Rust).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,lzcnt")]
fn encode_avx2(slab: Slab<'_>, place: &SlabPlace, width: usize, p: &mut Partial, e: &mut Encoded) {
    encode_passes(slab, place, width, p, e)
}

#[inline(always)]
fn encode_passes(slab: Slab<'_>, place: &SlabPlace, width: usize, p: &mut Partial, e: &mut Encoded) {
    let n = slab.starts.len().min(slab.ends.len()).min(slab.thread_ids.len());
    let (starts, ends, tids) = (&slab.starts[..n], &slab.ends[..n], &slab.thread_ids[..n]);
    // Appended after what `e` holds (its columns are equally long).
    let base = e.u.len();
    e.u.reserve(n);
    e.d.reserve(n);
    // The thread ids' column too, at once: grown part by part it doubles past the slab's size
    // (a region of 50,000 calls would end on a 64 KiB mapping of its own, mapped and unmapped
    // for each such region).
    match width {
        1 => e.t8.reserve(n),
        2 => e.t16.reserve(n),
        _ => e.t32.reserve(n),
    }
    p.first = p.first.or(place.first);
    let shift = place.first.map_or(0, |c| c.end.wrapping_sub(c.start));
    let mut prev = place.prev_start.unwrap_or(0);
    if p.count == 0 && n > 0 {
        let d = ends[0] - starts[0];
        (p.minimum, p.maximum, p.start_minimum, p.end_maximum) = (d, d, starts[0], ends[0]);
    }
    // A part at a time, so that its second pass finds it in the cache: the first pass reads
    // the calls once, writes the three columns and finds the part's bounds (one loop: it
    // vectorizes); the second counts the moments and histograms, which need those bounds.
    // Wrapping: the times of a recovered run come from a spill file that may be damaged (in
    // range, each, but not necessarily with differences and sums that fit); wrong statistics
    // for impossible calls, never a panic. Same instructions in a release build.
    for i in (0..n).step_by(PART) {
        let j = (i + PART).min(n);
        let (starts, ends, tids) = (&starts[i..j], &ends[i..j], &tids[i..j]);
        let bounds = match width {
            1 => columns_onto(starts, ends, tids, prev, &mut e.u, &mut e.d, &mut e.t8, |t| t as u8),
            2 => columns_onto(starts, ends, tids, prev, &mut e.u, &mut e.d, &mut e.t16, |t| t as u16),
            _ => columns_onto(starts, ends, tids, prev, &mut e.u, &mut e.d, &mut e.t32, |t| t as u32),
        };
        prev = starts[j - i - 1];
        summarize(&e.u[base + i..base + j], tids, bounds, shift, p);
    }
    p.count += n as u64;
    if let Some(&d) = e.u.last() {
        p.last = p.last.max((place.at + n, d));
    }
}

/// Calls encoded at a time (32 KiB of each column: the passes over a part find it in the L2
/// cache, where a slab's columns would not fit).
const PART: usize = 4096;

/// What the first pass over some calls finds: their durations' sum, shortest and longest
/// (they bound the moments and histograms), earliest start, latest end, lowest and highest
/// thread.
#[derive(Clone, Copy)]
struct Bounds {
    total: i64,
    lo: i64,
    hi: i64,
    start_minimum: i64,
    end_maximum: i64,
    t_lo: i64,
    t_hi: i64,
}

/// Append the calls' durations to `u`, their gaps (the first from `prev`) to `d` and their
/// narrowed threads to `t`, in one pass that also finds their `Bounds`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn columns_onto<T: Copy>(starts: &[i64], ends: &[i64], tids: &[i64], prev: i64, u: &mut PageVec<i64>, d: &mut PageVec<i64>, t: &mut PageVec<T>, narrow: impl Fn(i64) -> T) -> Bounds {
    let n = starts.len().min(ends.len()).min(tids.len());
    let (starts, ends, tids) = (&starts[..n], &ends[..n], &tids[..n]);
    let (lu, ld, lt) = (u.len(), d.len(), t.len());
    u.reserve(n);
    d.reserve(n);
    t.reserve(n);
    let mut b = Bounds { total: 0, lo: i64::MAX, hi: i64::MIN, start_minimum: i64::MAX, end_maximum: i64::MIN, t_lo: i64::MAX, t_hi: i64::MIN };
    {
        let (uo, dout, to) = (&mut u.spare_capacity_mut()[..n], &mut d.spare_capacity_mut()[..n], &mut t.spare_capacity_mut()[..n]);
        let mut before = prev;
        for i in 0..n {
            let (a, e, k) = (starts[i], ends[i], tids[i]);
            dout[i].write(a.wrapping_sub(before));
            before = a;
            let dur = e.wrapping_sub(a);
            uo[i].write(dur);
            to[i].write(narrow(k));
            b.total = b.total.wrapping_add(dur);
            b.lo = b.lo.min(dur);
            b.hi = b.hi.max(dur);
            b.start_minimum = b.start_minimum.min(a);
            b.end_maximum = b.end_maximum.max(e);
            b.t_lo = b.t_lo.min(k);
            b.t_hi = b.t_hi.max(k);
        }
    }
    // SAFETY: the n spare values after each column's length were written (reserve made the room).
    unsafe {
        u.set_len(lu + n);
        d.set_len(ld + n);
        t.set_len(lt + n);
    }
    b
}

/// Add the statistics of some calls (their durations `u`, threads, and what the first pass
/// found of them) to `p`: total, extremes, moments and histograms (but not the count).
#[inline(always)]
fn summarize(u: &[i64], tids: &[i64], b: Bounds, shift: i64, p: &mut Partial) {
    if u.is_empty() {
        return;
    }
    let (lo, hi) = (b.lo, b.hi);
    p.total = p.total.wrapping_add(b.total);
    (p.start_minimum, p.end_maximum) = (p.start_minimum.min(b.start_minimum), p.end_maximum.max(b.end_maximum));
    (p.minimum, p.maximum) = (p.minimum.min(lo), p.maximum.max(hi));
    // The moments, exact: sums of the differences from the shift and of their squares.
    let (s1, s2) = match hi.checked_sub(shift).zip(shift.checked_sub(lo)) {
        // Every difference under 2^31 either way: its square fits 62 bits and is one 32-bit
        // multiply (four at a time), summed in 64 bits over as many calls as cannot overflow.
        Some((above, below)) if above.max(below) < 1 << 31 => {
            let bound = above.max(below).max(1) as u64;
            // Calls per run: their squares' sum fits 64 bits, their sum 62.
            let run = usize::try_from(u64::MAX / (bound * bound)).unwrap_or(usize::MAX).clamp(1, 1 << 31);
            let (mut s1, mut s2) = (0i128, 0i128);
            for part in u.chunks(run) {
                let (mut p1, mut p2) = (0i64, 0u64);
                for &d in part {
                    let x = d - shift;
                    let m = x.unsigned_abs() as u32 as u64;
                    p1 += x;
                    p2 += m * m;
                }
                s1 = s1.wrapping_add(p1 as i128);
                s2 = s2.wrapping_add(p2 as i128);
            }
            (s1, s2)
        }
        _ => {
            let (mut s1, mut s2) = (0i128, 0i128);
            for &d in u {
                let x = d as i128 - shift as i128;
                s1 = s1.wrapping_add(x);
                s2 = s2.wrapping_add(x.wrapping_mul(x));
            }
            (s1, s2)
        }
    };
    p.s1 = p.s1.wrapping_add(s1);
    p.s2 = p.s2.wrapping_add(s2);
    // A histogram for every thread up to these calls' highest (a thread without calls keeps
    // zeros, which is what it is written as).
    let (t_lo, t_hi) = (b.t_lo, b.t_hi);
    let threads = t_hi.max(0) as usize + 1;
    if p.hists.len() < threads {
        p.hists.resize(threads, Vec::new());
    }
    p.hists.iter_mut().filter(|h| h.is_empty()).for_each(|h| *h = vec![0; HIST_BUCKETS]);
    // By thresholds where the calls' buckets fit the window, or where few lie above it (as the
    // last part counted found); in lanes where many do (widely spread durations: every run of
    // 16 calls holds some of the tail, looked up one by one with a branch taken at random).
    let window = (t_lo >= 0 && threads <= FIELD_THREADS && lo >= 0).then(|| (bucket(lo), bucket(hi)));
    match window {
        Some((b_lo, b_hi)) if !p.tail_heavy || b_hi - b_lo <= THRESHOLDS => {
            let tail = count_by_thresholds(u, tids, b_lo, b_hi, &mut p.hists[..threads]);
            p.tail_heavy = tail * TAIL_SHARE > u.len();
        }
        Some((b_lo, _)) => {
            count_in_lanes(u, tids, &mut p.hists[..threads]);
            // Whether the next part is back to few calls above the window.
            let above = tail_bound(b_lo);
            p.tail_heavy = u.iter().fold(0, |n, &d| n + (d > above) as usize) * TAIL_SHARE > u.len();
        }
        None if threads <= LANE_THREADS => count_in_lanes(u, tids, &mut p.hists[..threads]),
        None => count_in_runs(u, tids, &mut p.hists),
    }
}

/// A part with more than one call in this many above the thresholds' window has its next
/// part counted in lanes. Measured for the whole encoding of a slab of 2 threads: by
/// thresholds 2.0 ns a call with no call above the window, 2.4-2.6 ns with 0.1-1 % above it,
/// 3.2 ns with 5 %, 3.8-4.4 ns with a fifth or more; in lanes 2.5-2.8 ns whatever the spread.
const TAIL_SHARE: usize = 64;

/// The longest duration inside the thresholds' window of a part whose shortest call is in
/// bucket `b_lo` and whose calls span more buckets than the window: the tail is above it (the
/// top boundary of `count_by_boundaries` with `THRESHOLDS + 1` boundaries).
fn tail_bound(b_lo: usize) -> i64 {
    let b = b_lo + THRESHOLDS + 1;
    if b <= 63 { below_bucket(b) } else { i64::MAX }
}

/// The longest duration below bucket `b` (1..=63): a duration is in bucket b or above when it
/// is above this.
#[inline(always)]
fn below_bucket(b: usize) -> i64 {
    (1i64 << (b - 1)) - 1
}

/// Threads, and buckets above the shortest call's, up to which a slab's histograms are counted
/// by thresholds.
const FIELD_THREADS: usize = 4;
const THRESHOLDS: usize = 4;

/// Count the durations `u` (all >= 0, in buckets `b_lo..=b_hi`) of the threads `tids`
/// (0..`FIELD_THREADS`) into `hists`, with no look-up per call for the calls of the shortest
/// call's bucket and the `THRESHOLDS` above it (where a region's calls mostly are): for each
/// boundary between those buckets, and the one above them, the calls at or above it are
/// counted (a bucket's count is the difference of its two boundaries'), each thread in a 16-bit
/// field of one 64-bit count (the call adds `1 << 16 * thread`, masked by its comparison), four
/// calls at a time. A field of one of the four lanes counts at most a quarter of a part's
/// calls, so parts of `4 * 65535` calls never carry from one thread's field into the next. The
/// longer calls (the tail: interrupted calls, outliers) are then looked up one by one. Returns
/// how many calls were in the tail.
#[inline(always)]
fn count_by_thresholds(u: &[i64], tids: &[i64], b_lo: usize, b_hi: usize, hists: &mut [Vec<u64>]) -> usize {
    // As many boundaries as the calls' buckets have above the shortest's, up to the
    // thresholds and the tail's: each costs a compare and an add per call.
    match (b_hi - b_lo).min(THRESHOLDS) {
        0 => count_by_boundaries::<1>(u, tids, b_lo, b_hi, hists),
        1 => count_by_boundaries::<2>(u, tids, b_lo, b_hi, hists),
        2 => count_by_boundaries::<3>(u, tids, b_lo, b_hi, hists),
        3 => count_by_boundaries::<4>(u, tids, b_lo, b_hi, hists),
        _ => count_by_boundaries::<{ THRESHOLDS + 1 }>(u, tids, b_lo, b_hi, hists),
    }
}

/// `count_by_thresholds` with `K` boundaries above the shortest call's bucket: those of the
/// `K - 1` buckets above it, and the one above those, past which calls are the tail (none when
/// `K - 1` reaches `b_hi`).
#[inline(always)]
fn count_by_boundaries<const K: usize>(u: &[i64], tids: &[i64], b_lo: usize, b_hi: usize, hists: &mut [Vec<u64>]) -> usize {
    // A duration is in bucket b >= 2 or above when it is above 2^(b - 1) - 1; boundaries past
    // bucket 63 are never passed (no duration is above i64::MAX).
    let mut over = [i64::MAX; K];
    for (k, b) in (b_lo + 1..=(b_lo + K).min(63)).enumerate() {
        over[k] = below_bucket(b);
    }
    let threads = hists.len();
    let mut all = [0u64; FIELD_THREADS];
    let mut above = [[0u64; K]; FIELD_THREADS];
    for (pu, pt) in u.chunks(4 * 0xFFFF).zip(tids.chunks(4 * 0xFFFF)) {
        let (mut n4, mut c4) = ([0u64; 4], [[0u64; 4]; K]);
        let (qu, qt) = (pu.chunks_exact(4), pt.chunks_exact(4));
        let (ru, rt) = (qu.remainder(), qt.remainder());
        for (q, t) in qu.zip(qt) {
            for lane in 0..4 {
                let field = 1u64 << ((t[lane] as u64 & 3) * 16);
                n4[lane] += field;
                for k in 0..K {
                    c4[k][lane] += field & ((q[lane] > over[k]) as u64).wrapping_neg();
                }
            }
        }
        for (lane, (&d, &t)) in ru.iter().zip(rt).enumerate() {
            let field = 1u64 << ((t as u64 & 3) * 16);
            n4[lane] += field;
            for k in 0..K {
                c4[k][lane] += field & ((d > over[k]) as u64).wrapping_neg();
            }
        }
        // The fields out of each lane, summed over the lanes.
        for t in 0..threads {
            let field = |v: u64| (v >> (16 * t)) & 0xFFFF;
            all[t] += n4.iter().map(|&v| field(v)).sum::<u64>();
            for k in 0..K {
                above[t][k] += c4[k].iter().map(|&v| field(v)).sum::<u64>();
            }
        }
    }
    // The window's buckets: b_lo and the THRESHOLDS above it (those that hold calls); the count
    // above the window is the tail's.
    let last = (b_hi - b_lo).min(K - 1);
    for (t, hist) in hists.iter_mut().enumerate() {
        // Calls at or above each boundary from b_lo on: all of them, then the thresholds'.
        let at = |k: usize| if k == 0 { all[t] } else { above[t][k - 1] };
        for k in 0..=last {
            hist[b_lo + k] += at(k) - at(k + 1);
        }
    }
    // The tail, above the window, looked up call by call in the runs of 16 calls that hold
    // some of it, until all of it is found (it is rare: the runs' maxima are found four calls
    // at a time, and a run's branch is predicted).
    let tail_calls: u64 = above.iter().map(|a| a[K - 1]).sum();
    let mut left = tail_calls;
    let tail = over[K - 1];
    for (ru, rt) in u.chunks(16).zip(tids.chunks(16)) {
        if left == 0 {
            break;
        }
        if ru.iter().fold(i64::MIN, |m, &d| m.max(d)) > tail {
            for (&d, &t) in ru.iter().zip(rt) {
                if d > tail {
                    hists[t as usize & 3][bucket(d)] += 1;
                    left -= 1;
                }
            }
        }
    }
    tail_calls as usize
}

/// Threads up to which a slab's histograms are counted in lanes (`count_in_lanes`: 2 KiB of
/// counts per thread, all of them in the L1 cache).
const LANE_THREADS: usize = 8;
const LANES: usize = 4;

/// Count the durations `u` of the threads `tids` into `hists` (one per thread, as many as the
/// highest thread + 1), in four lanes of counts: call i counts in lane i % 4, so the increments
/// of consecutive calls in one bucket (the common case) do not wait for each other, and no
/// branch follows the thread (a coin toss where two threads' calls interleave).
#[inline(always)]
fn count_in_lanes(u: &[i64], tids: &[i64], hists: &mut [Vec<u64>]) {
    let threads = hists.len();
    let stride = threads * HIST_BUCKETS;
    let mut lanes = vec![0u64; LANES * stride];
    let top = threads.saturating_sub(1);
    let at = |t: i64, d: i64| (t.max(0) as usize).min(top) * HIST_BUCKETS + bucket(d);
    let (mut du, mut dt) = (u.chunks_exact(LANES), tids.chunks_exact(LANES));
    for (qu, qt) in (&mut du).zip(&mut dt) {
        for lane in 0..LANES {
            lanes[lane * stride + at(qt[lane], qu[lane])] += 1;
        }
    }
    for (&d, &t) in du.remainder().iter().zip(dt.remainder()) {
        lanes[at(t, d)] += 1;
    }
    for (t, hist) in hists.iter_mut().enumerate() {
        for (b, c) in hist.iter_mut().enumerate().take(HIST_BUCKETS) {
            *c += (0..LANES).map(|lane| lanes[lane * stride + t * HIST_BUCKETS + b]).sum::<u64>();
        }
    }
}

/// `count_in_lanes` for slabs of many threads: a run of one thread's calls (a slab of one
/// thread, or long runs) keeps its histogram at hand.
#[inline(always)]
fn count_in_runs(u: &[i64], tids: &[i64], hists: &mut [Vec<u64>]) {
    let mut t_at = usize::MAX;
    let mut hist: &mut [u64] = &mut [];
    for (&d, &t) in u.iter().zip(tids) {
        let t = t.max(0) as usize;
        if t != t_at {
            t_at = t;
            hist = hists.get_mut(t).map_or(&mut [], |h| h.as_mut_slice());
        }
        if let Some(c) = hist.get_mut(bucket(d)) {
            *c += 1;
        }
    }
}

/// Bytes per thread id in `events/thread_ids` for a run of `max_threads` threads.
pub fn thread_width(max_threads: u64) -> usize {
    super::tables::thread_ty(max_threads).size()
}

/// The rows of a region whose calls were encoded into `p`: its count and summary statistics,
/// and its per-thread statistics with histograms counted from the calls (the hot path keeps
/// none when calls are kept).
pub fn row(region: &RegionData, mut p: Partial) -> RowData {
    let hists = std::mem::take(&mut p.hists);
    let threads: Vec<(i64, Stats)> = region
        .stats
        .iter()
        .map(|(t, st)| {
            let hist = hists.get(*t as usize).filter(|h| !h.is_empty()).cloned().unwrap_or_else(|| vec![0; HIST_BUCKETS]);
            (*t, Stats { hist, ..st.clone() })
        })
        .collect();
    let mut pooled = Stats::default();
    threads.iter().for_each(|(_, st)| pooled.merge(st));
    RowData { pooled, threads, events: Some((p.count, p.summary())) }
}

/// Encode `region`'s calls slab by slab, merging (and encoding) on a helper thread while
/// `sink` takes each encoded slab on this one; the region's sums at the end.
pub fn encode_region<E>(region: &RegionData, max_threads: u64, mut sink: impl FnMut(&Encoded) -> Result<(), E>) -> Result<Partial, E> {
    let width = thread_width(max_threads);
    let mut sum = Partial::default();
    let (mut place, p) = (SlabPlace::default(), &mut sum);
    region.for_each_slab_mapped(
        |slab, e: &mut Encoded| {
            place.first.get_or_insert(Call { start: slab.starts[0], end: slab.ends[0] });
            encode(slab, &place, width, p, e);
            place.at += slab.starts.len();
            place.prev_start = slab.starts.last().copied();
        },
        |e: &Encoded| sink(e),
    )?;
    Ok(sum)
}

/// `encode_region`, with every slab encoded onto `e` (appended to what it holds), and
/// `after(e)` once each slab is: for a writer that gathers several regions' calls before it
/// writes them (a rank's round of the collective write), with no slab encoded apart and
/// copied. The merge runs one slab ahead on a helper thread, as for `encode_region`.
pub fn encode_region_onto<E>(region: &RegionData, max_threads: u64, e: &mut Encoded, mut after: impl FnMut(&mut Encoded) -> Result<(), E>) -> Result<Partial, E> {
    let width = thread_width(max_threads);
    let (mut sum, mut place) = (Partial::default(), SlabPlace::default());
    region.for_each_slab_pipelined(|slab| {
        place.first.get_or_insert(Call { start: slab.starts[0], end: slab.ends[0] });
        encode_onto(slab, &place, width, &mut sum, e);
        place.at += slab.starts.len();
        place.prev_start = slab.starts.last().copied();
        after(e)
    })?;
    Ok(sum)
}

/// The event columns of a file being written by this process.
pub struct EventColumns<'t> {
    deltas: &'t RawColumn,
    durations: &'t RawColumn,
    threads: &'t RawColumn,
}

impl<'t> EventColumns<'t> {
    pub fn of(tables: &'t Tables) -> EventColumns<'t> {
        EventColumns { deltas: tables.column("events/start_deltas"), durations: tables.column("events/durations"), threads: tables.column("events/thread_ids") }
    }

    fn direct(&self) -> Option<[DirectBytes<'_>; 3]> {
        Some([self.deltas.direct()?, self.durations.direct()?, self.threads.direct()?])
    }

    /// Encode and write `regions`' calls, one after another from event `at` on; their sums,
    /// in order. With direct writes, the regions too small to share their merge between two
    /// threads are encoded and written side by side once the large ones are done, one region
    /// per thread (their places in the columns are known beforehand): a profile of many
    /// moderate regions uses both cores as one large region does.
    pub fn write_regions(&self, at: u64, regions: &[RegionData], max_threads: u64) -> hdf5::Result<Vec<Partial>> {
        let side_by_side = self.direct().is_some();
        let (mut places, mut sums, mut later) = (Vec::with_capacity(regions.len()), Vec::with_capacity(regions.len()), Vec::new());
        let mut next = at;
        for (i, region) in regions.iter().enumerate() {
            places.push(next);
            if side_by_side && !region.shares_its_merge() {
                later.push(i);
                sums.push(None);
            } else {
                sums.push(Some(self.write_region(next, region, max_threads, super::workers())?));
            }
            next += region.calls() as u64;
        }
        for (k, p) in super::side_by_side(later.len(), |k| self.write_region(places[later[k]], &regions[later[k]], max_threads, 1))? {
            sums[later[k]] = Some(p);
        }
        // Every region written (`side_by_side` fails otherwise); never a row for calls not written.
        sums.into_iter().zip(regions).map(|(s, r)| s.ok_or_else(|| hdf5::Error::from(format!("region '{}': its calls were not written", r.name)))).collect()
    }

    /// Encode and write `region`'s calls from event `at` on, on up to `workers` threads; its
    /// sums.
    fn write_region(&self, at: u64, region: &RegionData, max_threads: u64, workers: usize) -> hdf5::Result<Partial> {
        let n = region.calls();
        let mut sum = Partial::default();
        if let Some([d, u, t]) = self.direct() {
            // Two threads take turns merging; each encodes and writes the slabs it merged.
            let width = thread_width(max_threads);
            let parts = region.for_each_slab_parallel(
                workers,
                || (Partial::default(), Encoded::default()),
                |(p, e), place, slab| {
                    encode(slab, &place, width, p, e);
                    let at = at + place.at as u64;
                    d.write(at, plain_bytes(&e.d))?;
                    u.write(at, plain_bytes(&e.u))?;
                    t.write(at, e.thread_bytes())
                },
            )?;
            parts.into_iter().for_each(|(p, _)| sum.add(p));
        } else {
            // Merging and encoding on a helper thread, the writes through HDF5 here.
            let mut next = at;
            sum = encode_region(region, max_threads, |e| {
                self.deltas.write(next, plain_bytes(&e.d))?;
                self.durations.write(next, plain_bytes(&e.u))?;
                self.threads.write(next, e.thread_bytes())?;
                next += e.len() as u64;
                Ok::<(), hdf5::Error>(())
            })?;
        }
        if sum.count as usize != n {
            // Never leave unwritten elements in a file that looks complete.
            return Err(hdf5::Error::from(format!("region '{}': {} of {n} calls encoded", region.name, sum.count)));
        }
        Ok(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gaps, durations, total, minimum, maximum, the two moments, histograms per thread.
    type Reference = (Vec<i64>, Vec<i64>, i64, i64, i64, i128, i128, Vec<Vec<u64>>);

    /// The plain one-loop encoding (every sum at 128 bits, a histogram look-up per call).
    fn reference(starts: &[i64], ends: &[i64], tids: &[i64], shift: i64, prev: i64) -> Reference {
        let (mut d, mut u, mut hists) = (Vec::new(), Vec::new(), vec![vec![0u64; HIST_BUCKETS]; 20]);
        let (mut total, mut min, mut max, mut s1, mut s2, mut p) = (0i64, i64::MAX, i64::MIN, 0i128, 0i128, prev);
        for i in 0..starts.len() {
            let dur = ends[i].wrapping_sub(starts[i]);
            d.push(starts[i].wrapping_sub(p));
            u.push(dur);
            p = starts[i];
            hists[tids[i] as usize][bucket(dur)] += 1;
            total = total.wrapping_add(dur);
            min = min.min(dur);
            max = max.max(dur);
            let x = dur as i128 - shift as i128;
            s1 = s1.wrapping_add(x);
            s2 = s2.wrapping_add(x.wrapping_mul(x));
        }
        (d, u, total, min, max, s1, s2, hists)
    }

    /// A stream of pseudo-random numbers from `seed` (xorshift64).
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// Counting by thresholds gives the look-up's histograms: every number of threads and of
    /// buckets it takes, durations on the buckets' boundaries, and one thread's calls more than
    /// a 16-bit field holds in a lane.
    #[test]
    fn thresholds_count_as_the_lookup() {
        let mut next = xorshift(0x2545_F491_4F6C_DD1D);
        for case in 0..56 {
            let threads = 1 + case % FIELD_THREADS;
            // Up to the last buckets (durations up to i64::MAX).
            let b_lo = if case % 9 == 0 { 59 + (next() % 5) as usize } else { 1 + (next() % 50) as usize };
            // Within the window, and past it (a tail looked up call by call).
            let b_hi = (b_lo + [0, 1, 2, 3, 4, 5, 9][(case / 4) % 7]).min(63);
            let n = [1usize, 3, 4, 5, 1000, 65_536, 4 * 65_535 + 3, 4 * 65_536 + 1][case % 8];
            let floor = |b: usize| if b <= 1 { 0 } else { 1i64 << (b - 1) };
            let top = |b: usize| if b >= 63 { i64::MAX } else { floor(b + 1) - 1 };
            let (mut u, mut tids) = (Vec::with_capacity(n), Vec::with_capacity(n));
            for i in 0..n {
                let b = b_lo + (next() as usize) % (b_hi - b_lo + 1);
                // The bucket's floor, its top, or anywhere between.
                u.push(match next() % 3 {
                    0 => floor(b),
                    1 => top(b),
                    _ => floor(b) + (next() as i64 & i64::MAX) % (top(b) - floor(b) + 1),
                });
                // The largest parts all on one thread (fields filled to the top).
                tids.push(if n > 200_000 { (threads - 1) as i64 } else { (i as i64 + (next() % 2) as i64) % threads as i64 });
            }
            assert!(u.iter().all(|&d| (b_lo..=b_hi).contains(&bucket(d))));
            let (lo, hi) = (*u.iter().min().unwrap(), *u.iter().max().unwrap());
            let (mut got, mut want) = (vec![vec![0u64; HIST_BUCKETS]; threads], vec![vec![0u64; HIST_BUCKETS]; threads]);
            count_by_thresholds(&u, &tids, bucket(lo), bucket(hi), &mut got);
            count_in_lanes(&u, &tids, &mut want);
            assert_eq!(got, want, "case {case}: {threads} threads, buckets {b_lo}..={b_hi}, {n} calls");
        }
    }

    /// The encoding in passes gives the one-loop encoding's columns and sums exactly, also
    /// when durations are far from the region's first (the moments at 128 bits) or wrap.
    #[test]
    fn passes_agree_with_one_loop() {
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
        for round in 0..60 {
            let n = [1usize, 2, 7, 1000, 70_000][round % 5];
            let huge = round % 4 == 3;
            let (mut starts, mut ends, mut tids) = (Vec::new(), Vec::new(), Vec::new());
            let mut t = 1_000i64;
            for _ in 0..n {
                t = t.wrapping_add((next() % 50) as i64);
                let dur = if huge && next() % 3 == 0 {
                    next() as i64
                } else if round % 4 == 2 {
                    // Differences near 2^30: the squares summed in several runs.
                    (next() % (1 << 30)) as i64
                } else if round % 7 == 1 {
                    // Durations within a few buckets (counted by thresholds).
                    100 + (next() % 900) as i64
                } else {
                    (next() % 100_000) as i64
                };
                starts.push(t);
                ends.push(t.wrapping_add(dur));
                // One thread; threads counted in lanes; more threads than that.
                tids.push(match round % 3 {
                    0 => 2,
                    1 => (next() % 4) as i64,
                    _ => (next() % 20) as i64,
                });
            }
            let first = Call { start: starts[0], end: ends[0] };
            let place = SlabPlace { at: 0, prev_start: Some(17), first: Some(first) };
            let shift = ends[0].wrapping_sub(starts[0]);
            let (d, u, total, min, max, s1, s2, hists) = reference(&starts, &ends, &tids, shift, 17);
            // The dispatch (AVX2 where the CPU has it) and the baseline build.
            for (name, encoder) in [("dispatched", encode as fn(Slab<'_>, &SlabPlace, usize, &mut Partial, &mut Encoded)), ("baseline", encode_passes)] {
                let (mut p, mut e) = (Partial::default(), Encoded::default());
                // Thread ids in each width the files use.
                let width = [1, 2, 4][round / 3 % 3];
                encoder(Slab { starts: &starts, ends: &ends, thread_ids: &tids }, &place, width, &mut p, &mut e);
                assert_eq!((&e.d[..], &e.u[..]), (&d[..], &u[..]), "round {round} {name}");
                let narrow: Vec<i64> = match width {
                    1 => e.t8.iter().map(|&t| t as i64).collect(),
                    2 => e.t16.iter().map(|&t| t as i64).collect(),
                    _ => e.t32.iter().map(|&t| t as i64).collect(),
                };
                assert_eq!(narrow, tids, "round {round} {name} width {width}");
                assert_eq!((p.total, p.minimum, p.maximum, p.s1, p.s2, p.count), (total, min, max, s1, s2, n as u64), "round {round} {name}");
                let (start_minimum, end_maximum) = (*starts.iter().min().unwrap(), *ends.iter().max().unwrap());
                assert_eq!((p.start_minimum, p.end_maximum), (start_minimum, end_maximum), "round {round} {name}");
                for (t, h) in hists.iter().enumerate() {
                    let got = p.hists.get(t).filter(|h| !h.is_empty()).cloned().unwrap_or_else(|| vec![0; HIST_BUCKETS]);
                    assert_eq!(&got, h, "round {round} {name} thread {t}");
                }
            }
        }
    }

    /// Slabs encoded onto one staging that already holds calls give the columns and sums of
    /// each slab encoded apart (the collective write's rounds read them from there); the
    /// staging's front written and removed, what follows stays in order.
    #[test]
    fn slabs_encoded_onto_a_staging_are_the_slabs_encoded_apart() {
        let mut next = xorshift(0xD1B5_4A32_D192_ED03);
        for (width, threads) in [(1usize, 3u64), (2, 300), (4, 70_000)] {
            let mut staged = Encoded::with_capacity(16, width);
            // Calls from an earlier region, already staged.
            let mut expected: (Vec<i64>, Vec<i64>, Vec<u8>) = (vec![5, 6], vec![7, 8], vec![9; 2 * width]);
            staged.d.extend_from_slice(&expected.0);
            staged.u.extend_from_slice(&expected.1);
            match width {
                1 => staged.t8.extend_from_slice(&[9, 9]),
                2 => staged.t16.extend_from_slice(&[0x0909, 0x0909]),
                _ => staged.t32.extend_from_slice(&[0x0909_0909, 0x0909_0909]),
            }
            let (mut onto, mut apart) = (Partial::default(), Partial::default());
            let mut place = SlabPlace::default();
            let mut t = 10_000i64;
            for n in [1usize, 4095, 4097, 9000] {
                let (mut starts, mut ends, mut tids) = (Vec::new(), Vec::new(), Vec::new());
                for _ in 0..n {
                    t += (next() % 40) as i64;
                    starts.push(t);
                    ends.push(t + (next() % 5000) as i64);
                    tids.push((next() % threads) as i64);
                }
                let slab = Slab { starts: &starts, ends: &ends, thread_ids: &tids };
                place.first.get_or_insert(Call { start: starts[0], end: ends[0] });
                let mut e = Encoded::default();
                encode(slab, &place, width, &mut apart, &mut e);
                encode_onto(slab, &place, width, &mut onto, &mut staged);
                expected.0.extend_from_slice(&e.d);
                expected.1.extend_from_slice(&e.u);
                expected.2.extend_from_slice(e.thread_bytes());
                place.at += n;
                place.prev_start = starts.last().copied();
            }
            assert_eq!((&staged.d[..], &staged.u[..], staged.thread_bytes()), (&expected.0[..], &expected.1[..], &expected.2[..]), "width {width}");
            assert_eq!((onto.count, onto.total, onto.minimum, onto.maximum, onto.s1, onto.s2, onto.last), (apart.count, apart.total, apart.minimum, apart.maximum, apart.s1, apart.s2, apart.last), "width {width}");
            assert_eq!(onto.hists, apart.hists, "width {width}");
            staged.remove_front(3);
            assert_eq!((&staged.d[..], &staged.u[..], staged.thread_bytes()), (&expected.0[3..], &expected.1[3..], &expected.2[3 * width..]), "width {width}");
        }
    }
}
