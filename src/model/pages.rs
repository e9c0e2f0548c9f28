//! Large buffers in mappings of their own, so that the library leaves the host's allocator as
//! it found it.
//!
//! glibc's malloc serves a block of at least its mmap threshold (128 KiB to start with) from
//! a fresh mapping, and when such a block is freed it raises the threshold to the block's size
//! (and the heap's trim threshold to twice that), up to 32 MiB: a dynamic threshold that
//! follows the largest block the *process* has freed. A profiler that frees a 1 MiB buffer of
//! its own therefore changes where every later allocation of the host between the old and the
//! new threshold comes from, and how often the heap is trimmed (LULESH's per-element build ran
//! faster instrumented than not: its 2 MB arrays stopped being mapped and unmapped every step).
//!
//! `PageVec` is a vector of plain values whose storage, from `LARGE` bytes on, is an anonymous
//! mapping of its own (`mmap`, grown with `mremap`, released with `munmap`), never malloc:
//! allocating and freeing it moves none of glibc's thresholds. Below `LARGE` it is a malloc'd
//! block, which glibc never maps (its threshold is at least 128 KiB), so freeing it moves
//! nothing either. Every buffer of the library that can reach `LARGE` bytes is one (call-log
//! chunks, slab buffers, column encodings, the bytes a rank sends and rank 0 receives, the
//! collective write's staging). `tests/host_allocator.rs` watches a host's own mappings with and without
//! the library.

use std::mem::MaybeUninit;
use std::ptr::NonNull;

/// Blocks of at least this many bytes must not come from malloc (half glibc's smallest
/// mmap threshold, 128 KiB: a margin for its chunk headers).
pub const LARGE: usize = 64 * 1024;

/// A growable vector of `T` whose storage, once it reaches `LARGE` bytes, is an anonymous
/// mapping of its own (below that, a malloc'd block, which glibc never maps). Only plain
/// values (`Copy`: nothing to drop). Running out of memory ends the process as `Vec` does
/// (`handle_alloc_error`).
pub struct PageVec<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    /// Capacity in values; the storage is a mapping when `mapped`, else a malloc'd block of
    /// exactly `cap` values (none when 0).
    cap: usize,
    mapped: bool,
}

// SAFETY: owns its values like a Vec<T>.
unsafe impl<T: Copy + Send> Send for PageVec<T> {}
unsafe impl<T: Copy + Sync> Sync for PageVec<T> {}

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

fn round_to_pages(bytes: usize) -> usize {
    let p = page();
    bytes.div_ceil(p).saturating_mul(p)
}

fn out_of_memory(bytes: usize) -> ! {
    std::alloc::handle_alloc_error(std::alloc::Layout::from_size_align(bytes.clamp(1, isize::MAX as usize / 2), 8).unwrap_or(std::alloc::Layout::new::<u8>()))
}

impl<T: Copy> Default for PageVec<T> {
    fn default() -> Self {
        PageVec::new()
    }
}

/// Mappings of `i64`s given back after a region was written (`PageVec::recycle`), taken again
/// by the next region's slab and encoding buffers (`PageVec::pooled`): the regions of a
/// finalize take turns at a few sets of pages instead of each touching fresh ones (a first
/// touch costs 1.5-2.3 us a page in a VM guest; 200 regions of 50,000 calls took 60,000 page
/// faults in the regions layout, 99,000 in the columnar one). At most `POOLED` of at most
/// `POOLED_BYTES` each, until the profile is released (`take_pooled`).
static POOL: parking_lot::Mutex<Vec<PageVec<i64>>> = parking_lot::Mutex::new(Vec::new());
const POOLED: usize = 24;
const POOLED_BYTES: usize = 1 << 20;

/// The pooled mappings, taken out (freed with the profile once it is written).
pub fn take_pooled() -> Vec<PageVec<i64>> {
    POOL.try_lock().map(|mut pool| std::mem::take(&mut *pool)).unwrap_or_default()
}

impl PageVec<i64> {
    /// Empty, with the storage of one given back (`recycle`) when there is one, else none yet.
    /// The pool is never waited for (a busy one gives a new vector).
    pub fn pooled() -> Self {
        match POOL.try_lock().and_then(|mut pool| pool.pop()) {
            Some(mut v) => {
                v.clear();
                v
            }
            None => PageVec::new(),
        }
    }

    /// Give the storage back for `pooled` (a mapping of at most `POOLED_BYTES`, while the pool
    /// has room; anything else is freed as usual).
    pub fn recycle(self) {
        if self.mapped && self.bytes_reserved() <= POOLED_BYTES {
            if let Some(mut pool) = POOL.try_lock() {
                if pool.len() < POOLED {
                    pool.push(self);
                }
            }
        }
    }
}

impl<T: Copy> PageVec<T> {
    const SIZE: usize = std::mem::size_of::<T>();

    /// Empty, no storage yet.
    pub const fn new() -> Self {
        const { assert!(std::mem::size_of::<T>() > 0 && std::mem::align_of::<T>() <= 4096) };
        PageVec { ptr: NonNull::dangling(), len: 0, cap: 0, mapped: false }
    }

    /// Room for `cap` values (a mapping's pages are touched only when written).
    pub fn with_capacity(cap: usize) -> Self {
        let mut v = PageVec::new();
        v.grow_to(cap);
        v
    }

    /// `len` zeros (a fresh mapping reads as zeros: nothing is written then).
    pub fn zeroed(len: usize) -> Self {
        PageVec::try_zeroed(len).unwrap_or_else(|| out_of_memory(len.saturating_mul(Self::SIZE)))
    }

    /// `zeroed`, or None when the memory cannot be had (for sizes that come from elsewhere).
    pub fn try_zeroed(len: usize) -> Option<Self> {
        let mut v = PageVec::new();
        v.try_grow_to(len).ok()?;
        if !v.mapped && len > 0 {
            // SAFETY: cap >= len values of the malloc'd block; all-zero bits are what callers ask for.
            unsafe { std::ptr::write_bytes(v.ptr.as_ptr(), 0, len) };
        }
        v.len = len;
        Some(v)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Whether the storage is a mapping of its own.
    pub fn is_mapped(&self) -> bool {
        self.mapped
    }

    /// Bytes of the storage (what it holds on to, whatever the length).
    pub fn bytes_reserved(&self) -> usize {
        if self.mapped { round_to_pages(self.cap * Self::SIZE) } else { self.cap * Self::SIZE }
    }

    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr.as_ptr()
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Room for `more` values beyond the length.
    pub fn reserve(&mut self, more: usize) {
        let need = self.len.checked_add(more).unwrap_or_else(|| out_of_memory(usize::MAX));
        if need > self.cap {
            self.grow_to(need.max(self.cap.saturating_mul(2)));
        }
    }

    #[inline]
    pub fn push(&mut self, v: T) {
        if self.len == self.cap {
            self.reserve(1);
        }
        // SAFETY: len < cap after reserve.
        unsafe { self.ptr.as_ptr().add(self.len).write(v) };
        self.len += 1;
    }

    pub fn extend_from_slice(&mut self, values: &[T]) {
        self.reserve(values.len());
        // SAFETY: room for values.len() more after reserve; a slice never overlaps our spare room.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), self.ptr.as_ptr().add(self.len), values.len()) };
        self.len += values.len();
    }

    /// Drop the first `n` values (all of them when fewer), moving the rest to the front.
    pub fn remove_front(&mut self, n: usize) {
        let n = n.min(self.len);
        // SAFETY: both ranges inside the first `len` values; `copy` allows the overlap.
        unsafe { std::ptr::copy(self.ptr.as_ptr().add(n), self.ptr.as_ptr(), self.len - n) };
        self.len -= n;
    }

    /// Grow to `len` values, the new ones `value` (or shrink to `len`).
    pub fn resize(&mut self, len: usize, value: T) {
        if len > self.len {
            let more = len - self.len;
            self.reserve(more);
            for slot in &mut self.spare_capacity_mut()[..more] {
                slot.write(value);
            }
        }
        self.len = len;
    }

    /// The room beyond the length, to be written and then published with `set_len`.
    pub fn spare_capacity_mut(&mut self) -> &mut [MaybeUninit<T>] {
        // SAFETY: cap - len values of our storage past len.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(self.len).cast(), self.cap - self.len) }
    }

    /// # Safety
    /// `len <= capacity()` and the values up to `len` are written.
    pub unsafe fn set_len(&mut self, len: usize) {
        debug_assert!(len <= self.cap);
        self.len = len;
    }

    fn heap_layout(cap: usize) -> std::alloc::Layout {
        std::alloc::Layout::array::<T>(cap).unwrap_or_else(|_| out_of_memory(usize::MAX))
    }

    fn grow_to(&mut self, cap: usize) {
        if let Err(bytes) = self.try_grow_to(cap) {
            out_of_memory(bytes);
        }
    }

    /// `grow_to`, the bytes that could not be had as the error (the vector unchanged then).
    fn try_grow_to(&mut self, cap: usize) -> Result<(), usize> {
        if cap <= self.cap {
            return Ok(());
        }
        let bytes = cap.checked_mul(Self::SIZE).ok_or(usize::MAX)?;
        if bytes < LARGE {
            // Small: malloc (never mapped by glibc at this size).
            let p = if self.cap == 0 {
                // SAFETY: a non-zero layout (cap > 0, T not zero-sized).
                unsafe { std::alloc::alloc(Self::heap_layout(cap)) }
            } else {
                // SAFETY: our malloc'd block of `self.cap` values (not mapped: bytes < LARGE).
                unsafe { std::alloc::realloc(self.ptr.as_ptr().cast(), Self::heap_layout(self.cap), bytes) }
            };
            let Some(p) = NonNull::new(p.cast::<T>()) else { return Err(bytes) };
            (self.ptr, self.cap) = (p, cap);
            return Ok(());
        }
        let bytes = round_to_pages(bytes);
        let p = if self.mapped {
            // SAFETY: our own mapping of bytes_reserved() bytes; it may move (nothing else points into it).
            unsafe { libc::mremap(self.ptr.as_ptr().cast(), self.bytes_reserved(), bytes, libc::MREMAP_MAYMOVE) }
        } else {
            // SAFETY: a fresh private anonymous mapping.
            unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) }
        };
        if p == libc::MAP_FAILED {
            return Err(bytes);
        }
        if !self.mapped && self.cap > 0 {
            // From the heap into the mapping: the values move over, the block goes back.
            // SAFETY: len values of the old block; the new mapping holds at least as many.
            unsafe {
                std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), p.cast::<T>(), self.len);
                std::alloc::dealloc(self.ptr.as_ptr().cast(), Self::heap_layout(self.cap));
            }
        }
        // SAFETY: not MAP_FAILED, so a valid mapping (page aligned: aligned for T).
        self.ptr = unsafe { NonNull::new_unchecked(p.cast()) };
        self.cap = bytes / Self::SIZE;
        self.mapped = true;
        Ok(())
    }
}

impl<T: Copy> Extend<T> for PageVec<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, iter: I) {
        let iter = iter.into_iter();
        self.reserve(iter.size_hint().0);
        for v in iter {
            self.push(v);
        }
    }
}

impl<T: Copy> std::ops::Deref for PageVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: len values written (or zero pages) at ptr; dangling is fine for len 0.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> std::ops::DerefMut for PageVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in deref, and we own them.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for PageVec<T> {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: our own mapping, unmapped once.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.bytes_reserved()) };
        } else if self.cap > 0 {
            // SAFETY: our malloc'd block of `cap` values, freed once.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), Self::heap_layout(self.cap)) };
        }
    }
}

impl<T: Copy + std::fmt::Debug> std::fmt::Debug for PageVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_keeps_values_and_reads_zero_when_fresh() {
        let mut v: PageVec<i64> = PageVec::new();
        assert!(v.is_empty() && v.capacity() == 0);
        v.push(-5);
        assert!(!v.is_mapped(), "small vectors stay on the heap");
        v.clear();
        for i in 0..100_000 {
            v.push(i);
        }
        assert_eq!(v.len(), 100_000);
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as i64));
        v.extend_from_slice(&[7; 300_000]);
        v.extend((0..5).map(|x| x * 2));
        assert_eq!(v.len(), 400_005);
        assert_eq!(&v[399_999..], &[7, 0, 2, 4, 6, 8]);
        v.resize(400_007, -1);
        assert_eq!(&v[400_004..], &[8, -1, -1]);
        v.remove_front(399_999);
        assert_eq!(&v[..], &[7, 0, 2, 4, 6, 8, -1, -1]);
        v.remove_front(100);
        assert!(v.is_empty());
        v.extend_from_slice(&[0, 1, 2, 3]);
        v.resize(3, 0);
        assert_eq!(&v[..], &[0, 1, 2]);
        v.clear();
        assert!(v.is_empty() && v.capacity() >= 400_005);
        assert!(v.is_mapped());
        // A length no memory can hold (one another rank announced): None, not an abort.
        assert!(PageVec::<u8>::try_zeroed(1 << 62).is_none());
        assert!(PageVec::<u64>::try_zeroed(usize::MAX / 4).is_none(), "bytes overflow");
        assert_eq!(PageVec::<u8>::try_zeroed(3).map(|v| v.to_vec()), Some(vec![0, 0, 0]));
        let z: PageVec<u64> = PageVec::zeroed(1 << 17);
        assert!(z.iter().all(|&x| x == 0) && z.len() == 1 << 17 && z.is_mapped());
        let small: PageVec<u64> = PageVec::zeroed(100);
        assert!(small.iter().all(|&x| x == 0) && !small.is_mapped());
        let mut s: PageVec<i64> = PageVec::with_capacity(10);
        let n = s.capacity();
        for (i, slot) in s.spare_capacity_mut().iter_mut().enumerate() {
            slot.write(i as i64);
        }
        // SAFETY: every spare value was written.
        unsafe { s.set_len(n) };
        assert_eq!(s[n - 1], n as i64 - 1);
    }
}
