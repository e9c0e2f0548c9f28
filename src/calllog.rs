//! Completed calls of one region on one thread, packed into 4 bytes per call where they are
//! short, 8 where they are not.
//!
//! Times are clock ticks (`clock::now`): TSC cycles, or `CLOCK_MONOTONIC` ns in monotonic
//! mode; they become ns only at collect time. A chunk's data is a stream of 4-byte units, and
//! a call is stored as the gap from the previous call's start and its duration, in one of
//! three forms told apart by the first unit:
//! - **short** (one unit, bit 0 set): gap (0 to 2^15 - 1 ticks) in bits 17-31, duration (0 to
//!   2^16 - 1 ticks) in bits 1-16; at 2-4 GHz a call of up to 16-32 us that starts within 8-16
//!   us of the one before: the fine-grained calls, whose recording cost matters;
//! - **long** (two units): the duration plus one, shifted left by one (bit 0 clear; up to 2^31
//!   - 3 ticks), then the gap (i32 ticks; negative after a recursive inner call);
//! - **escaped** (five units): the escape unit `ESCAPE`, then the absolute start and end (i64
//!   each): the first call of every chunk, gaps over 2^31 ticks, durations of 2^31 - 2 ticks
//!   or more (in ns 2.1 s, with a TSC at 2-4 GHz 0.5-1 s), an end before the start.
//!
//! Halving the bytes written per short call halves the page faults of fresh memory, which
//! dominate the recording cost in a VM guest (BENCHMARKS.md section 1). A form's units are
//! written by one store (the short unit, the long form's eight bytes) or, escaped, with the
//! escape unit last; no stored first unit is zero.
//!
//! Units live in chunks that are never moved once full, so a long run never copies its
//! history. A chunk is a header of `HDR` 8-byte words (magic and region, fill count in units,
//! thread and capacity in words) followed by its data units. Because the first call of every
//! chunk is escaped, each chunk decodes on its own; because no call's first unit is zero and
//! the escape unit of an escaped call is written after its time units, a chunk's calls end at
//! its first zero unit (chunks start zeroed). So the owner publishes nothing per call: the fill
//! count is written when the chunk is left (cold path), and a reader of a chunk that was still
//! being filled stops at the first zero unit. The same chunk format lives on the heap (memory
//! sink) or in a `MAP_SHARED` mapping of the spill file (flight recorder, `spill.rs`), where the
//! kernel keeps every stored call in the page cache even if the process is killed. One decoder
//! reads both: `decode_one` (with `short_call` and `long_call`, which the cursor's block loop
//! `Cursor::next_block` also uses), for finalize and for recovery.

use crate::model::pages::{LARGE, PageVec};
use crate::model::Call;
use std::sync::atomic::{Ordering, compiler_fence};

// The long form's eight bytes are one store whose low half is the unit read first.
const _: () = assert!(cfg!(target_endian = "little"));

/// Words of a chunk header: magic | region << 32, fill (data units used, written when the
/// chunk is left), thread | capacity << 32 (capacity in 8-byte words, header included),
/// reserved.
pub const HDR: usize = 4;
const _: () = assert!(HDR == crate::spill::CHUNK_HDR);
/// "SPCK" in the low half of a chunk's first word.
pub const CHUNK_MAGIC: u32 = 0x4B43_5053;
/// Smallest chunk (in words, header included) of the memory sink.
const FIRST_CHUNK: usize = 64;
/// Largest chunk: 1 MiB.
pub const MAX_CHUNK: usize = 1 << 17;
/// The first unit of an escaped call (bit 0 clear, so not short; above every long form's).
const ESCAPE: u32 = 0xFFFF_FFFE;
/// Bits of a short call's gap and duration.
const SHORT_GAP_BITS: u32 = 15;
const SHORT_DURATION_BITS: u32 = 16;
/// A long call's duration is below this ((duration + 1) << 1 stays below `ESCAPE`).
const LONG_DURATION_LIMIT: u64 = (ESCAPE as u64 >> 1) - 1;

/// A chunk's data words as the units they hold.
#[inline(always)]
pub fn units(words: &[u64]) -> &[u32] {
    // SAFETY: the same memory, viewed as twice as many u32 (alignment 4 <= 8).
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast(), words.len() * 2) }
}

/// Where a chunk's words are.
#[derive(Debug)]
enum Store {
    /// On the heap: the whole chunk (header and data). Chunks of `model::pages::LARGE` bytes
    /// and more are mappings of their own instead (`PageVec`): freeing them must not move
    /// glibc's thresholds for the host (see `model/pages.rs`).
    Heap(Box<[u64]>),
    Mapped(PageVec<u64>),
    /// In a block of the huge-page arena (`huge`), which lives while a chunk of it does.
    Huge { _block: std::sync::Arc<huge::Block>, base: *mut u64 },
    /// In the spill file at this byte offset (mapped while current, unmapped when full; read
    /// back through the spill module's read-only mapping).
    Spilled(u64),
}

#[derive(Debug)]
struct Chunk {
    store: Store,
    /// Capacity in words, header included.
    words: usize,
    /// Data units used (of the current chunk: `CallLog::len` is authoritative).
    used: usize,
}

/// `CallLog::parent` before the log's first call (and in logs read back from a file).
pub const PARENT_UNSET: u32 = u32::MAX;
/// `CallLog::parent` of calls made inside no other call.
pub const PARENT_TOP: u32 = u32::MAX - 1;

#[derive(Debug)]
pub struct CallLog {
    /// First data unit of the current chunk (null before the first call).
    data: *mut u32,
    /// The region of the call enclosing each of this log's calls on its thread, kept by the
    /// recorder (`ThreadData::on_one_path`): `PARENT_UNSET` before the first call, `PARENT_TOP`
    /// for calls inside none.
    pub parent: u32,
    /// Units used and available in the current chunk.
    len: usize,
    cap: usize,
    prev_start: i64,
    /// Long calls (two units each) and escaped calls (five units each), so the number of
    /// calls needs no pass over the units.
    longs: usize,
    escapes: usize,
    /// A call started before the one logged before it (recursion): not in start order.
    unsorted: bool,
    /// Calls that end before they start (a clock going backwards between the two reads; such
    /// a call is always escaped, so this costs nothing on the packed paths).
    backwards: u64,
    region: u32,
    thread: u32,
    chunks: Vec<Chunk>,
}

// SAFETY: the pointer points into a chunk owned by this log (a heap box or its own mapping).
unsafe impl Send for CallLog {}
unsafe impl Sync for CallLog {}

impl Default for CallLog {
    fn default() -> CallLog {
        CallLog::new(0, 0)
    }
}

impl Drop for CallLog {
    fn drop(&mut self) {
        self.leave_current();
    }
}

/// What one pass over a chunk's data units found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ChunkScan {
    /// Data units holding complete calls.
    pub used: usize,
    pub calls: usize,
    pub longs: usize,
    pub escapes: usize,
    /// A call started before the one before it.
    pub unsorted: bool,
    pub backwards: u64,
    /// Units after the last complete call that are not zero (a torn call).
    pub torn: usize,
}

/// Decode the call at `*pos` of a chunk's data units and move past it; `*prev` is the start
/// of the call before. None at the end of what was stored: the end of `units`, a zero unit,
/// or a call cut off by the end of `units`. The one decoder of the format: the cursor
/// (finalize) and `decode_chunk` (recovery) both use it.
#[inline(always)]
pub fn decode_one(units: &[u32], pos: &mut usize, prev: &mut i64) -> Option<Call> {
    let u = *units.get(*pos)?;
    let c = if u & 1 != 0 {
        *pos += 1;
        short_call(u, *prev)
    } else if is_long(u) {
        let c = long_call(u, *units.get(*pos + 1)?, *prev);
        *pos += 2;
        c
    } else if u == ESCAPE {
        let t = units.get(*pos + 1..*pos + 5)?;
        *pos += 5;
        let wide = |lo: u32, hi: u32| (lo as u64 | (hi as u64) << 32) as i64;
        Call { start: wide(t[0], t[1]), end: wide(t[2], t[3]) }
    } else {
        // A zero unit: the end of what was stored.
        return None;
    };
    *prev = c.start;
    Some(c)
}

/// The call of a short unit, given the start of the call before.
#[inline(always)]
fn short_call(u: u32, prev: i64) -> Call {
    let start = prev.wrapping_add((u >> (SHORT_DURATION_BITS + 1)) as i64);
    Call { start, end: start.wrapping_add(((u >> 1) & ((1 << SHORT_DURATION_BITS) - 1)) as i64) }
}

/// Whether `u` is the first unit of a long call: bit 0 clear, neither zero nor `ESCAPE`
/// (rotated, that is one range: 1 to 2^31 - 2).
#[inline(always)]
fn is_long(u: u32) -> bool {
    u.rotate_right(1).wrapping_sub(1) < (ESCAPE >> 1) - 1
}

/// The call of a long form's two units, given the start of the call before.
#[inline(always)]
fn long_call(first: u32, gap: u32, prev: i64) -> Call {
    let start = prev.wrapping_add(gap as i32 as i64);
    Call { start, end: start.wrapping_add((first >> 1) as i64 - 1) }
}

/// Decode the data units of one chunk from `*pos`, calling `f` per complete call, until the
/// end of what was stored (see `decode_one`).
pub fn decode_chunk(units: &[u32], pos: &mut usize, prev: &mut i64, mut f: impl FnMut(Call)) {
    while let Some(c) = decode_one(units, pos, prev) {
        f(c);
    }
}

/// One pass over a chunk's data units (recovery): the counts `CallLog` keeps while recording,
/// and `f` per call.
pub fn scan_chunk(units: &[u32], mut f: impl FnMut(Call)) -> ChunkScan {
    let mut s = ChunkScan::default();
    let (mut pos, mut prev, mut last) = (0, 0i64, None::<i64>);
    loop {
        let at = pos;
        let Some(c) = decode_one(units, &mut pos, &mut prev) else { break };
        match pos - at {
            2 => s.longs += 1,
            5 => s.escapes += 1,
            _ => {}
        }
        s.unsorted |= last.is_some_and(|l| c.start < l);
        last = Some(c.start);
        s.calls += 1;
        s.backwards += (c.end < c.start) as u64;
        f(c);
    }
    s.used = pos;
    s.torn = units[pos..].iter().filter(|&&u| u != 0).count();
    s
}

/// A chunk header's fields: (region, fill in units, thread, capacity in words including the
/// header).
pub fn parse_header(h: &[u64]) -> Option<(u32, usize, u32, usize)> {
    if h.len() < HDR || h[0] as u32 != CHUNK_MAGIC {
        return None;
    }
    Some(((h[0] >> 32) as u32, h[1] as usize, h[2] as u32, (h[2] >> 32) as usize))
}

impl CallLog {
    pub fn new(thread: u32, region: u32) -> CallLog {
        CallLog {
            data: std::ptr::null_mut(),
            parent: PARENT_UNSET,
            len: 0,
            cap: 0,
            prev_start: 0,
            longs: 0,
            escapes: 0,
            unsorted: false,
            backwards: 0,
            region,
            thread,
            chunks: Vec::new(),
        }
    }

    #[inline(always)]
    pub fn push(&mut self, call: Call) {
        self.push_inside(call, PARENT_UNSET);
    }

    /// `push` of a call made inside a call of region `parent` (`PARENT_TOP`: inside none): a
    /// log's first call notes it as the log's `parent` (the first call always takes the slow
    /// way: a new log has no chunk), the others leave it to the recorder to compare.
    #[inline(always)]
    pub fn push_inside(&mut self, call: Call, parent: u32) {
        let gap = call.start.wrapping_sub(self.prev_start);
        let duration = call.end.wrapping_sub(call.start) as u64;
        self.prev_start = call.start;
        self.unsorted |= gap < 0;
        if ((gap as u64) >> SHORT_GAP_BITS | duration >> SHORT_DURATION_BITS) == 0 && self.len < self.cap {
            // SAFETY: len < cap, and data points at cap writable units.
            unsafe { *self.data.add(self.len) = ((gap as u32) << (SHORT_DURATION_BITS + 1)) | ((duration as u32) << 1) | 1 };
            self.len += 1;
        } else {
            self.push_long(call, gap, duration, parent);
        }
    }

    /// A call that is not short: long if it fits, else escaped (`push_slow`).
    #[inline(always)]
    fn push_long(&mut self, call: Call, gap: i64, duration: u64, parent: u32) {
        if gap as i32 as i64 == gap && duration < LONG_DURATION_LIMIT && self.len + 1 < self.cap {
            let both = ((gap as u32 as u64) << 32) | ((duration + 1) << 1);
            // SAFETY: len + 2 <= cap units, written by one (unaligned) 8-byte store.
            unsafe { self.data.add(self.len).cast::<u64>().write_unaligned(both) };
            self.len += 2;
            self.longs += 1;
        } else {
            self.push_slow(call, parent);
        }
    }

    #[cold]
    fn push_slow(&mut self, call: Call, parent: u32) {
        if self.parent == PARENT_UNSET {
            self.parent = parent;
        }
        self.push_escaped(call);
    }

    #[cold]
    fn push_escaped(&mut self, call: Call) {
        if self.cap - self.len < 5 {
            self.new_chunk();
        }
        self.escapes += 1;
        self.backwards += (call.end < call.start) as u64;
        // SAFETY: at least 5 units free after new_chunk (every chunk holds more than 5). The
        // escape unit goes last: a reader (also of a killed process's file) sees either the
        // whole call or a zero unit.
        unsafe {
            self.data.add(self.len + 1).cast::<u64>().write_unaligned(call.start as u64);
            self.data.add(self.len + 3).cast::<u64>().write_unaligned(call.end as u64);
            compiler_fence(Ordering::Release);
            *self.data.add(self.len) = ESCAPE;
        }
        self.len += 5;
    }

    /// Start a new chunk: in the spill file when the flight recorder is on (and has room),
    /// else on the heap.
    #[cold]
    fn new_chunk(&mut self) {
        let last = self.chunks.last().map(|c| c.words);
        self.leave_current();
        let spill = crate::spill::active();
        let first = if spill { crate::spill::PAGE_WORDS } else { FIRST_CHUNK };
        let words = last.map_or(first, |w| w * 2).clamp(first, MAX_CHUNK);
        let header = [CHUNK_MAGIC as u64 | (self.region as u64) << 32, 0, self.thread as u64 | (words as u64) << 32, 0];
        let spilled = if spill { crate::spill::map_chunk(words) } else { None };
        let huge = if spilled.is_none() { huge::chunk(words) } else { None };
        let base = match (spilled, huge) {
            (Some((offset, base)), _) => {
                self.chunks.push(Chunk { store: Store::Spilled(offset), words, used: 0 });
                base
            }
            (None, Some((block, base))) => {
                self.chunks.push(Chunk { store: Store::Huge { _block: block, base }, words, used: 0 });
                base
            }
            (None, None) if words * 8 >= LARGE => {
                let mut b = PageVec::zeroed(words);
                let base = b.as_mut_ptr();
                self.chunks.push(Chunk { store: Store::Mapped(b), words, used: 0 });
                base
            }
            (None, None) => {
                let mut b = vec![0u64; words].into_boxed_slice();
                let base = b.as_mut_ptr();
                self.chunks.push(Chunk { store: Store::Heap(b), words, used: 0 });
                base
            }
        };
        // SAFETY: base points at `words` writable, zeroed words (a fresh heap box or mapping).
        unsafe {
            std::ptr::copy_nonoverlapping(header.as_ptr(), base, HDR);
            self.data = base.add(HDR).cast();
        }
        self.len = 0;
        self.cap = (words - HDR) * 2;
    }

    /// Leave the current chunk: write its fill count, unmap it if it is in the spill file.
    fn leave_current(&mut self) {
        if self.data.is_null() {
            return;
        }
        if let Some(c) = self.chunks.last_mut() {
            c.used = self.len;
            let header = self.data.cast::<u64>().wrapping_sub(HDR);
            // SAFETY: data is HDR words into the live current chunk; word 1 is the fill.
            unsafe { *header.add(1) = self.len as u64 };
            if matches!(c.store, Store::Spilled(_)) {
                // SAFETY: data - HDR words is the start of the mapping of `c.words` words made
                // in new_chunk.
                unsafe { crate::spill::unmap_chunk(header, c.words) };
            }
        }
        self.data = std::ptr::null_mut();
        self.len = 0;
        self.cap = 0;
    }

    /// Write the current chunk's fill count and let go of its mapping (finalize: the calls are
    /// read back through the spill's read-only mapping from here on).
    pub fn seal(&mut self) {
        self.leave_current();
    }

    /// Append a chunk that stays in a spill file being recovered, with what one scan of its
    /// words found.
    pub fn adopt_spilled(&mut self, offset: u64, words: usize, scan: &ChunkScan, first_start: Option<i64>, last_start: i64) {
        self.leave_current();
        if let Some(f) = first_start {
            self.unsorted |= scan.unsorted || (!self.chunks.is_empty() && f < self.prev_start);
            self.prev_start = last_start;
        }
        self.longs += scan.longs;
        self.escapes += scan.escapes;
        self.backwards += scan.backwards;
        self.chunks.push(Chunk { store: Store::Spilled(offset), words, used: scan.used });
    }

    /// Data units used by chunk `c` (the current one: `len`).
    fn used(&self, i: usize) -> usize {
        if i + 1 == self.chunks.len() && !self.data.is_null() { self.len } else { self.chunks[i].used }
    }

    /// Number of calls.
    pub fn len(&self) -> usize {
        let units = (0..self.chunks.len()).map(|i| self.used(i)).sum::<usize>();
        units - self.longs - 4 * self.escapes
    }

    /// Calls that end before they start.
    pub fn backwards(&self) -> u64 {
        self.backwards
    }

    /// Are the calls in start order? (They are in stop order, which differs after recursion.)
    pub fn is_sorted(&self) -> bool {
        !self.unsorted
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Bytes held, for the memory-per-call benchmark (and the choice of finalize's pipelining):
    /// spilled chunks count too.
    pub fn bytes_reserved(&self) -> usize {
        self.chunks.iter().map(|c| c.words * 8).sum()
    }

    /// Bytes held in memory (heap chunks only).
    pub fn heap_bytes(&self) -> usize {
        self.chunks
            .iter()
            .map(|c| match &c.store {
                Store::Heap(b) => b.len() * 8,
                Store::Mapped(b) => b.len() * 8,
                Store::Huge { .. } => c.words * 8,
                Store::Spilled(_) => 0,
            })
            .sum()
    }

    /// The data units of chunk `i` that hold calls.
    fn chunk_units(&self, i: usize) -> &[u32] {
        let c = &self.chunks[i];
        let data: &[u64] = match &c.store {
            Store::Heap(b) => &b[HDR..],
            Store::Mapped(b) => &b[HDR..],
            // SAFETY: `base` points at the chunk's `c.words` words in a block that `Huge` keeps
            // mapped.
            Store::Huge { base, .. } => unsafe { std::slice::from_raw_parts(base.add(HDR), c.words - HDR) },
            Store::Spilled(offset) => crate::spill::spilled_words(*offset, HDR, c.words).unwrap_or(&[]),
        };
        let units = units(data);
        &units[..self.used(i).min(units.len())]
    }

    /// Decode the calls one by one, in recording order.
    pub fn cursor(&self) -> Cursor<'_> {
        Cursor::new(self)
    }

    /// Start and end columns in recording order (tests and small logs; finalize streams
    /// with `cursor`).
    pub fn columns(&self) -> (Vec<i64>, Vec<i64>) {
        let mut cur = self.cursor();
        std::iter::from_fn(|| cur.next()).map(|c| (c.start, c.end)).unzip()
    }

    /// Number of chunks.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// Each chunk as stored, in order: its header as it reads once the chunk is left (fill
    /// count = data units used; capacity in words, header included) and its data units that
    /// hold calls. For a raw dump of the log in this format (`spill::Dump`).
    pub fn for_each_chunk(&self, mut f: impl FnMut([u64; HDR], &[u32])) {
        for (i, c) in self.chunks.iter().enumerate() {
            let data = self.chunk_units(i);
            let header = [CHUNK_MAGIC as u64 | (self.region as u64) << 32, data.len() as u64, self.thread as u64 | (c.words as u64) << 32, 0];
            f(header, data);
        }
    }
}

/// Decodes a `CallLog` call by call with `decode_one` (escapes never straddle chunks).
pub struct Cursor<'a> {
    log: &'a CallLog,
    /// Index of the next chunk.
    next_chunk: usize,
    units: &'a [u32],
    /// Byte offset of the current chunk if it is spilled (released once read).
    spilled: Option<(u64, usize)>,
    pos: usize,
    prev: i64,
}

impl<'a> Cursor<'a> {
    fn new(log: &'a CallLog) -> Cursor<'a> {
        Cursor { log, next_chunk: 0, units: &[], spilled: None, pos: 0, prev: 0 }
    }

    /// Move to the next chunk; false when there is none. A spilled chunk that was read is
    /// released from memory (its pages stay in the file), so reading stays bounded.
    #[cold]
    fn advance_chunk(&mut self) -> bool {
        if let Some((offset, words)) = self.spilled.take() {
            crate::spill::release_words(offset, words);
        }
        let log = self.log;
        if self.next_chunk >= log.chunks.len() {
            return false;
        }
        let i = self.next_chunk;
        self.units = log.chunk_units(i);
        if let Store::Spilled(offset) = log.chunks[i].store {
            self.spilled = Some((offset, log.chunks[i].words));
        }
        self.next_chunk += 1;
        self.pos = 0;
        true
    }

    #[inline(always)]
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Call> {
        loop {
            if let Some(c) = decode_one(self.units, &mut self.pos, &mut self.prev) {
                return Some(c);
            }
            if !self.advance_chunk() {
                return None;
            }
        }
    }
}

impl Cursor<'_> {
    /// Decode up to `starts.len()` calls into `starts` and `ends` (as many as both hold);
    /// returns how many (0 at the end of the log). The short and long calls of a chunk are
    /// decoded in one tight loop; escaped calls and chunk ends go through `decode_one`/`next`.
    #[inline(always)]
    pub fn next_block(&mut self, starts: &mut [i64], ends: &mut [i64]) -> usize {
        let cap = starts.len().min(ends.len());
        let (starts, ends) = (&mut starts[..cap], &mut ends[..cap]);
        self.prefetch_after(cap);
        let mut n = 0;
        while n < cap {
            let units = self.units;
            let (mut pos, mut prev) = (self.pos, self.prev);
            // A run of short calls, one unit each.
            let run = (cap - n).min(units.len().saturating_sub(pos));
            for ((&u, s), e) in units[pos..pos + run].iter().zip(&mut starts[n..n + run]).zip(&mut ends[n..n + run]) {
                if u & 1 == 0 {
                    break;
                }
                let c = short_call(u, prev);
                prev = c.start;
                (*s, *e) = (c.start, c.end);
                pos += 1;
            }
            n += pos - self.pos;
            // Then a run of long calls, two units each.
            let mut longs = 0;
            for ((pair, s), e) in units[pos..].chunks_exact(2).zip(&mut starts[n..]).zip(&mut ends[n..]) {
                if !is_long(pair[0]) {
                    break;
                }
                let c = long_call(pair[0], pair[1], prev);
                prev = c.start;
                (*s, *e) = (c.start, c.end);
                longs += 1;
            }
            pos += 2 * longs;
            n += longs;
            let moved = pos != self.pos;
            (self.pos, self.prev) = (pos, prev);
            if n == cap {
                break;
            }
            if moved {
                // Short calls again, or what stopped both runs.
                continue;
            }
            // An escaped call, the end of the chunk, or the end of the log.
            let Some(c) = self.next() else { break };
            (starts[n], ends[n]) = (c.start, c.end);
            n += 1;
        }
        n
    }
}

impl Cursor<'_> {
    /// Ask for the units of the block two after the next `calls` of this chunk (the next one was
    /// asked for by the call before): a block is read long after it is asked for (the merge
    /// takes turns between the threads' logs), and a log of millions of calls is read from
    /// memory, not from the cache, whose prefetchers stop at each 4 KiB page.
    #[inline(always)]
    fn prefetch_after(&self, calls: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            // Short calls take a unit each (16 to a cache line); longer ones are rarer.
            let ahead = self.units.get(self.pos.saturating_add(2 * calls)..).unwrap_or(&[]);
            let ahead = &ahead[..ahead.len().min(calls)];
            for line in ahead.chunks(16) {
                // SAFETY: a prefetch of memory of the chunk, which reads nothing and never faults.
                unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.as_ptr().cast()) };
            }
        }
    }
}

impl Drop for Cursor<'_> {
    fn drop(&mut self) {
        if let Some((offset, words)) = self.spilled.take() {
            crate::spill::release_words(offset, words);
        }
    }
}

/// The memory sink's call-log chunks on transparent huge pages: chunks are carved from
/// 2 MiB-aligned blocks of their own anonymous mapping advised `MADV_HUGEPAGE`, so that the
/// recording thread takes one page fault per 2 MiB (512 Ki short calls) instead of one per
/// 4 KiB (1,024 short calls): a first touch costs microseconds in a VM guest (where, unless
/// told otherwise, the blocks are on small pages faulted in ahead: `in_guest`). Used when the kernel's
/// `transparent_hugepage/enabled` is `always` or `madvise` (with `never`, or without THP, the
/// chunks are as before: heap boxes and mappings of their own). No helper thread, and nothing
/// of the host's allocator is touched (the blocks are mmap'ed, never malloc'ed).
///
/// A huge page is not always the cheaper page: in a VM guest the kernel takes huge pages from
/// memory the guest has not used yet, which the host then backs page by page (milliseconds for
/// 2 MiB, against well under one for 512 small pages of recycled memory). So the arena prices
/// both: at its first block it times the first touches of a few small pages, and it times the
/// first touch of each huge block (the fault that zeroes the whole page). The first block
/// whose touch cost more than the 512 small pages it replaces turns huge pages off for the rest
/// of the run: later blocks are advised `MADV_NOHUGEPAGE`. `SCOPE_PROFILER_HUGE_PAGES=1` keeps
/// asking for huge pages whatever they cost, `=0` keeps the chunks off the arena. The kernel may
/// also give small pages on its own (fragmented memory, `defrag` settings, a cgroup limit): the
/// file's `metadata/call_log_pages` says what it gave and why (`report`).
pub mod huge {
    use parking_lot::Mutex;
    use std::ptr::NonNull;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU8, Ordering};
    use std::time::{Duration, Instant};

    /// `SCOPE_PROFILER_HUGE_PAGES=0` keeps the chunks off the arena (the benchmarks' baseline),
    /// `=1` asks for huge pages whatever they cost, `=priced` prices them (also in a VM guest);
    /// unset (or `auto`), they are priced, except in a VM guest, where the arena's blocks are
    /// on small pages faulted in ahead (`in_guest`).
    pub const ENV: &str = "SCOPE_PROFILER_HUGE_PAGES";
    /// One huge page.
    pub const BLOCK: usize = 2 << 20;
    /// Small pages in one huge page.
    const SMALL_PER_BLOCK: u32 = (BLOCK / 4096) as u32;
    /// Small pages whose first touches price a small page (once per run, about 50 us in a VM).
    const PROBE_PAGES: usize = 32;
    /// Chunks start at multiples of a cache line (no two threads' chunks share one).
    const ALIGN: usize = 64;

    /// A 2 MiB-aligned mapping of `BLOCK` bytes, unmapped when the last chunk of it goes.
    #[derive(Debug)]
    pub struct Block(NonNull<u8>);

    // SAFETY: the block owns its mapping; the chunks carved from it are each written by one
    // thread (their `CallLog`'s owner) and read after quiescence.
    unsafe impl Send for Block {}
    unsafe impl Sync for Block {}

    impl Drop for Block {
        fn drop(&mut self) {
            // SAFETY: a mapping of BLOCK bytes made by `Arena::map_block`, no chunk of it left.
            unsafe { libc::munmap(self.0.as_ptr().cast(), BLOCK) };
            let mut live = BLOCKS.lock();
            live.retain(|&b| b != self.0.as_ptr() as usize);
        }
    }

    struct Current {
        block: Arc<Block>,
        used: usize,
        /// Bytes from the block's start whose pages are faulted in (`populate`); the whole
        /// block for one that asked for a huge page (its first touch gave all of it).
        ready: usize,
    }

    /// A block on small pages has its pages faulted in ahead of the chunks handed out, this
    /// many bytes at a time at least: one `MADV_POPULATE_WRITE` call instead of a fault per
    /// page on the recording thread (in a VM guest a fault costs 1.5-2.3 us here, a page of a
    /// batch 1.35-1.5 us; BENCHMARKS.md section 1), and at most this much more resident than
    /// handed out.
    const POPULATE_AHEAD: usize = 128 << 10;
    /// Cleared when the kernel has no `MADV_POPULATE_WRITE` (before Linux 5.14): the pages are
    /// then faulted in as they are written, as before.
    static POPULATE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

    /// Fault in the pages of `len` bytes at `at` (page-aligned, inside a block) for writing.
    fn populate(at: *mut u8, len: usize) {
        if !POPULATE.load(Ordering::Relaxed) {
            return;
        }
        // SAFETY: whole pages of a block of our own mapping, which stays mapped while its
        // arena's current block; populating changes no content (fresh pages are zero).
        if unsafe { libc::madvise(at.cast(), len, libc::MADV_POPULATE_WRITE) } != 0 {
            // EINVAL: an older kernel; ENOMEM, EFAULT, EHWPOISON: left to the faults.
            POPULATE.store(false, Ordering::Relaxed);
        }
    }

    /// What huge pages cost here, as measured by the arena.
    #[derive(Debug, Default, Clone, Copy, PartialEq)]
    pub struct Pricing {
        /// `SCOPE_PROFILER_HUGE_PAGES=1`: never turned off.
        pub forced: bool,
        /// A VM guest and `auto`: huge pages never asked for (`in_guest`).
        pub guest: bool,
        /// First touch of one small page (the probe's mean), once measured.
        pub small_page: Option<Duration>,
        /// Blocks mapped with huge pages asked for.
        pub huge_blocks: u32,
        /// The block that turned huge pages off: its first touch and the small-page price then.
        pub dear: Option<(Duration, Duration)>,
    }

    impl Pricing {
        /// Whether the next block asks for huge pages.
        pub fn wants_huge(&self) -> bool {
            !self.guest && self.dear.is_none()
        }

        /// Account the first touch of a block that asked for huge pages; turns them off when it
        /// cost more than the small pages it replaces (unless forced).
        pub fn account(&mut self, touch: Duration) {
            self.huge_blocks += 1;
            let Some(small) = self.small_page else { return };
            if !self.forced && touch > small * SMALL_PER_BLOCK {
                self.dear = Some((touch, small));
            }
        }
    }

    /// The blocks being carved and what their pages cost.
    struct Arena {
        current: Option<Current>,
        pricing: Pricing,
    }

    static ARENA: Mutex<Arena> = Mutex::new(Arena { current: None, pricing: Pricing { forced: false, guest: false, small_page: None, huge_blocks: 0, dear: None } });
    /// 0: not decided, 1: on, 2: off.
    static MODE: AtomicU8 = AtomicU8::new(0);
    /// The blocks mapped now (their addresses).
    static BLOCKS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

    /// Whether the kernel offers transparent huge pages to a mapping that asks
    /// (`always` or `madvise` in `/sys/kernel/mm/transparent_hugepage/enabled`).
    pub fn offered() -> bool {
        match MODE.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => {
                let setting = std::env::var(ENV).map(|v| v.trim().to_ascii_lowercase());
                let off = setting.as_deref().is_ok_and(|v| matches!(v, "0" | "false" | "no" | "off"));
                let forced = setting.as_deref().is_ok_and(|v| matches!(v, "1" | "true" | "yes" | "on"));
                let priced = forced || setting.as_deref().is_ok_and(|v| v == "priced");
                let on = !off && std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").is_ok_and(|s| s.contains("[always]") || s.contains("[madvise]"));
                let mut arena = ARENA.lock();
                arena.pricing.forced = forced;
                arena.pricing.guest = !priced && in_guest();
                MODE.store(if on { 1 } else { 2 }, Ordering::Relaxed);
                on
            }
        }
    }

    /// Whether this process runs in a VM guest (x86-64: the CPUID hypervisor bit). There the
    /// kernel takes huge pages from memory the guest has not used yet, whose first touch the
    /// host backs page by page: one huge page can stall the recording thread for milliseconds
    /// (5-15 ms measured, BENCHMARKS.md section 1), where small pages faulted in ahead cost a
    /// predictable 64-80 us per 128 KiB. So in a guest the arena asks for small pages unless
    /// told otherwise (`=priced`, `=1`).
    pub fn in_guest() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: CPUID leaf 1 exists on every x86-64 CPU.
            #[allow(unused_unsafe)]
            unsafe {
                std::arch::x86_64::__cpuid(1).ecx & (1 << 31) != 0
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// Turn the arena off (tests of the other chunk stores).
    pub fn set_offered(on: bool) {
        MODE.store(if on { 1 } else { 2 }, Ordering::Relaxed);
    }

    /// The mean first touch of `PROBE_PAGES` small pages of a fresh mapping advised
    /// `MADV_NOHUGEPAGE`, unmapped again; None if nothing could be mapped.
    fn probe_small_page() -> Option<Duration> {
        let len = PROBE_PAGES * 4096;
        // SAFETY: an anonymous private mapping of its own, touched one word per page inside
        // it, then unmapped.
        unsafe {
            let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0);
            if p == libc::MAP_FAILED {
                return None;
            }
            libc::madvise(p, len, libc::MADV_NOHUGEPAGE);
            let t = Instant::now();
            for page in 0..PROBE_PAGES {
                std::ptr::write_volatile(p.cast::<u8>().add(page * 4096).cast::<u64>(), 0);
            }
            let spent = t.elapsed();
            libc::munmap(p, len);
            Some(spent / PROBE_PAGES as u32)
        }
    }

    /// A fresh mapping of `BLOCK` bytes at a multiple of `BLOCK`, advised for huge pages or
    /// against them; None when no memory could be mapped.
    fn aligned_block(huge: bool) -> Option<NonNull<u8>> {
        // SAFETY: an anonymous private mapping; the parts outside the aligned block are unmapped
        // at once, and the block is advised, nothing else.
        unsafe {
            let len = 2 * BLOCK;
            let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0);
            if p == libc::MAP_FAILED {
                return None;
            }
            let start = p as usize;
            let aligned = start.next_multiple_of(BLOCK);
            if aligned > start {
                libc::munmap(p, aligned - start);
            }
            let tail = aligned + BLOCK;
            if start + len > tail {
                libc::munmap(tail as *mut libc::c_void, start + len - tail);
            }
            libc::madvise(aligned as *mut libc::c_void, BLOCK, if huge { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE });
            NonNull::new(aligned as *mut u8)
        }
    }

    impl Arena {
        /// A new block, advised as the pricing says; the first touch of a block that asked for
        /// huge pages is timed (it is the fault that gives the whole huge page) and priced.
        fn map_block(&mut self) -> Option<NonNull<u8>> {
            if self.pricing.small_page.is_none() && self.pricing.wants_huge() {
                self.pricing.small_page = probe_small_page();
            }
            let huge = self.pricing.wants_huge();
            let aligned = aligned_block(huge)?;
            if huge {
                let t = Instant::now();
                // SAFETY: the first word of the block just mapped, written with the zero it holds.
                unsafe { std::ptr::write_volatile(aligned.as_ptr().cast::<u64>(), 0) };
                self.pricing.account(t.elapsed());
            }
            BLOCKS.lock().push(aligned.as_ptr() as usize);
            Some(aligned)
        }

        fn chunk(&mut self, bytes: usize) -> Option<(Arc<Block>, *mut u64)> {
            if self.current.as_ref().is_none_or(|c| BLOCK - c.used < bytes) {
                let huge = self.pricing.wants_huge();
                self.current = Some(Current { block: Arc::new(Block(self.map_block()?)), used: 0, ready: if huge { BLOCK } else { 0 } });
            }
            let c = self.current.as_mut()?;
            // SAFETY: used + bytes <= BLOCK: inside the block, never handed out before (zeroed).
            let p = unsafe { c.block.0.as_ptr().add(c.used) }.cast::<u64>();
            c.used += bytes;
            if c.used > c.ready {
                let to = c.used.max(c.ready + POPULATE_AHEAD).next_multiple_of(4096).min(BLOCK);
                // SAFETY: ready and to are page multiples inside the block.
                populate(unsafe { c.block.0.as_ptr().add(c.ready) }, to - c.ready);
                c.ready = to;
            }
            Some((c.block.clone(), p))
        }
    }

    /// A zeroed chunk of `words` words (at most a block), or None when the arena is not used
    /// or no memory could be mapped (the caller falls back to its other stores).
    pub fn chunk(words: usize) -> Option<(Arc<Block>, *mut u64)> {
        let bytes = words.checked_mul(8)?.next_multiple_of(ALIGN);
        if bytes > BLOCK || !offered() {
            return None;
        }
        ARENA.lock().chunk(bytes)
    }

    /// What huge pages cost this run so far.
    pub fn pricing() -> Pricing {
        ARENA.lock().pricing
    }

    /// What the kernel gave the arena's blocks mapped now, for the file: `None` when the
    /// arena is not used (no block), else "2 MiB" when all of its resident memory is on huge
    /// pages, "4 KiB (...)" when the kernel gave small pages, and "2 MiB, then 4 KiB (...)"
    /// when huge pages were turned off for costing more than small ones.
    pub fn report() -> Option<String> {
        let blocks = BLOCKS.lock().clone();
        if blocks.is_empty() {
            return None;
        }
        Some(describe(resident(&blocks), &pricing()))
    }

    /// `report` from the resident and huge-page bytes of the blocks (None: not read) and the
    /// pricing.
    pub fn describe(pages: Option<(u64, u64)>, pricing: &Pricing) -> String {
        // In a guest no huge page was asked for, whatever the kernel's pages can be read.
        if pricing.guest {
            return format!(
                "4 KiB (a VM guest: huge pages not asked for, whose first touch can stall a thread for milliseconds there; small pages faulted in {} KiB ahead; SCOPE_PROFILER_HUGE_PAGES=priced tries them)",
                POPULATE_AHEAD >> 10
            );
        }
        let Some((rss, huge)) = pages else {
            let unread = format!(
                "what the kernel gave was not read: PAGEMAP_SCAN (Linux 6.7 and later) is missing or was refused, and /proc/self/smaps is read only in a process of at most {} MiB",
                SMAPS_RSS_LIMIT >> 20
            );
            return match pricing.dear {
                Some(_) => format!("2 MiB, then 4 KiB (huge pages turned off after block {}; {unread})", pricing.huge_blocks),
                None => format!("2 MiB asked for ({unread})"),
            };
        };
        let resident = format!("{} of {} KiB resident on 2 MiB pages", huge >> 10, rss >> 10);
        match pricing.dear {
            Some((touch, small)) => format!(
                "2 MiB, then 4 KiB (the first touch of huge block {} took {} us, {} us the {SMALL_PER_BLOCK} small pages it replaces: later blocks on small pages; {resident})",
                pricing.huge_blocks,
                touch.as_micros(),
                (small * SMALL_PER_BLOCK).as_micros()
            ),
            None if rss > 0 && huge >= rss => "2 MiB (transparent huge pages)".to_string(),
            None => format!("4 KiB (the kernel gave small pages: {resident})"),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// The `VmFlags` line of the mapping that holds `addr`, from `/proc/self/smaps`.
        fn vm_flags(addr: usize) -> String {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let mut inside = false;
            for line in smaps.lines() {
                let first = line.split_whitespace().next().unwrap_or("");
                if let Some((a, b)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
                    let (a, b) = (usize::from_str_radix(a, 16).unwrap(), usize::from_str_radix(b, 16).unwrap());
                    inside = (a..b).contains(&addr);
                } else if inside && first == "VmFlags:" {
                    return line.to_string();
                }
            }
            panic!("no mapping holds {addr:#x}");
        }

        /// Whether this kernel has transparent huge pages (else `madvise` refuses the advice and
        /// the mappings' flags cannot show it).
        fn thp() -> bool {
            let there = std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists();
            if !there {
                eprintln!("this kernel has no transparent huge pages: the advice is not checked");
            }
            there
        }

        fn arena(pricing: Pricing) -> Arena {
            Arena { current: None, pricing }
        }

        /// A `BLOCK`-aligned block of our own (not the arena's), advised as asked; unmapped by
        /// the caller.
        fn own_block(huge: bool) -> *mut u8 {
            aligned_block(huge).expect("a block of memory").as_ptr()
        }

        /// Whether this kernel has `PAGEMAP_SCAN` (6.7 and later).
        fn kernel_scans() -> bool {
            let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
            let mut v = release.trim().split(|c: char| !c.is_ascii_digit()).map(|x| x.parse::<u32>().unwrap_or(0));
            (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 7)
        }

        #[test]
        fn the_blocks_pages_are_read_from_their_page_tables_alone() {
            let (small, huge, untouched) = (own_block(false), own_block(true), own_block(false));
            // SAFETY: whole pages inside our own blocks, written once each.
            unsafe {
                for page in [0, 5, 511] {
                    small.add(page * 4096).write_volatile(1);
                }
                huge.write_volatile(1);
            }
            let Some(got) = scan::resident(&[small as usize]) else {
                assert!(!kernel_scans(), "this kernel has PAGEMAP_SCAN, but the scan failed");
                eprintln!("no PAGEMAP_SCAN on this kernel: the scan is not checked");
                return;
            };
            assert_eq!(got, (3 * 4096, 0), "three small pages touched");
            assert_eq!(scan::resident(&[untouched as usize]), Some((0, 0)));
            let (rss, on_huge) = scan::resident(&[huge as usize]).unwrap();
            // The kernel may give a small page where a huge one was asked for (fragmented
            // memory, THP off): either way all or nothing of it is on huge pages.
            assert!((rss, on_huge) == (BLOCK as u64, BLOCK as u64) || (rss, on_huge) == (4096, 0), "{rss} {on_huge}");
            if on_huge > 0 {
                assert!(vm_flags(huge as usize).contains(" hg"));
            }
            // The older kernels' way: the whole mapping that holds the block (which the kernel
            // may have merged with a neighbour of the same advice), never on huge pages.
            let (mapping, mapping_huge) = smaps_resident(&[small as usize]).unwrap();
            assert!(mapping >= 3 * 4096 && mapping_huge == 0, "{mapping} {mapping_huge}");
            // Which it reads only in a process small enough, as /proc/self/statm says.
            assert!(process_rss().is_some_and(|rss| rss >= mapping), "{:?}", process_rss());
            let both = scan::resident(&[small as usize, huge as usize, untouched as usize]).unwrap();
            assert_eq!(both, (3 * 4096 + rss, on_huge), "the blocks summed");
            // SAFETY: our own blocks, no reference into them left.
            unsafe {
                for b in [small, huge, untouched] {
                    libc::munmap(b.cast(), BLOCK);
                }
            }
        }

        #[test]
        fn a_dear_huge_page_turns_them_off_for_later_blocks() {
            // Stand-in for a VM whose host backs fresh memory slowly: small pages priced at
            // nothing, so that any real first touch of a huge block costs more than 512 of them.
            if !thp() {
                return;
            }
            let mut a = arena(Pricing { small_page: Some(Duration::ZERO), ..Pricing::default() });
            let first = a.chunk(BLOCK).unwrap();
            assert!(vm_flags(first.1 as usize).contains(" hg"), "{}", vm_flags(first.1 as usize));
            assert_eq!(a.pricing.huge_blocks, 1);
            let (touch, small) = a.pricing.dear.expect("the first block's touch was dearer than 512 ns");
            assert!(touch > Duration::ZERO && small == Duration::ZERO);
            let second = a.chunk(BLOCK).unwrap();
            assert_ne!(first.1, second.1);
            let flags = vm_flags(second.1 as usize);
            assert!(flags.contains(" nh") && !flags.contains(" hg"), "{flags}");
            assert_eq!(a.pricing.huge_blocks, 1, "the second block asked for small pages");
            // SAFETY: inside the second block, which is zeroed and ours.
            assert_eq!(unsafe { second.1.add(BLOCK / 8 - 1).read() }, 0);
            let text = describe(Some((4 << 20, 2 << 20)), &a.pricing);
            assert!(text.starts_with("2 MiB, then 4 KiB (the first touch of huge block 1 took ") && text.ends_with("2048 of 4096 KiB resident on 2 MiB pages)"), "{text}");
        }

        #[test]
        fn in_a_vm_guest_the_blocks_are_on_small_pages_faulted_in_ahead() {
            if !thp() {
                return;
            }
            let mut a = arena(Pricing { guest: true, ..Pricing::default() });
            let (_block, p) = a.chunk(64 << 10).unwrap();
            let flags = vm_flags(p as usize);
            assert!(flags.contains(" nh") && !flags.contains(" hg"), "{flags}");
            assert_eq!((a.pricing.huge_blocks, a.pricing.small_page), (0, None), "nothing priced");
            // Whether or not the kernel's pages could be read.
            for pages in [Some((128 << 10, 0)), None] {
                let text = describe(pages, &a.pricing);
                assert!(text.starts_with("4 KiB (a VM guest: huge pages not asked for"), "{text}");
            }
        }

        #[test]
        fn cheap_or_forced_huge_pages_stay_on() {
            // Small pages priced at a second each: no huge page is dearer.
            if !thp() {
                return;
            }
            let mut a = arena(Pricing { small_page: Some(Duration::from_secs(1)), ..Pricing::default() });
            // Forced: even a small page priced at 1 ns does not turn them off.
            let mut f = arena(Pricing { forced: true, small_page: Some(Duration::from_nanos(1)), ..Pricing::default() });
            for arena in [&mut a, &mut f] {
                for _ in 0..3 {
                    let (_block, p) = arena.chunk(BLOCK).unwrap();
                    assert!(vm_flags(p as usize).contains(" hg"), "{}", vm_flags(p as usize));
                }
                assert_eq!((arena.pricing.huge_blocks, arena.pricing.dear), (3, None));
            }
            assert_eq!(describe(Some((4 << 20, 4 << 20)), &a.pricing), "2 MiB (transparent huge pages)");
            assert_eq!(describe(Some((4 << 20, 0)), &a.pricing), "4 KiB (the kernel gave small pages: 0 of 4096 KiB resident on 2 MiB pages)");
            assert!(describe(None, &a.pricing).starts_with("2 MiB asked for (what the kernel gave was not read: "));
        }

        #[test]
        fn the_probe_prices_a_small_page_and_chunks_share_a_block() {
            let mut a = arena(Pricing::default());
            let (b1, p1) = a.chunk(BLOCK / 2).unwrap();
            let (b2, p2) = a.chunk(BLOCK / 2).unwrap();
            assert!(Arc::ptr_eq(&b1, &b2) && p2 as usize - p1 as usize == BLOCK / 2);
            let small = a.pricing.small_page.expect("probed at the first block");
            assert!(small > Duration::ZERO && small < Duration::from_millis(100), "{small:?}");
        }

        /// Which of the `pages` pages from `at` are resident (`mincore`).
        fn resident_pages(at: *mut u64, pages: usize) -> Vec<bool> {
            let mut v = vec![0u8; pages];
            // SAFETY: page-aligned start inside one of our blocks, `pages` bytes out.
            assert_eq!(unsafe { libc::mincore(at.cast(), pages * 4096, v.as_mut_ptr()) }, 0);
            v.iter().map(|b| b & 1 == 1).collect()
        }

        #[test]
        fn small_page_chunks_are_faulted_in_before_they_are_written() {
            // Huge pages priced out from the start (a dear block already): every block on
            // small pages.
            let mut a = arena(Pricing { small_page: Some(Duration::ZERO), dear: Some((Duration::from_secs(1), Duration::ZERO)), ..Pricing::default() });
            let (_b, first) = a.chunk(4096).unwrap();
            assert_eq!(first as usize % BLOCK, 0);
            let ahead = POPULATE_AHEAD / 4096;
            // Faulted in ahead of the first chunk, and not the whole block.
            let pages = resident_pages(first, BLOCK / 4096);
            assert!(pages[..ahead].iter().all(|&r| r), "the first {ahead} pages");
            assert!(pages[ahead..].iter().all(|&r| !r), "nothing beyond them: {} resident", pages.iter().filter(|&&r| r).count());
            // A chunk reaching past them: faulted in to its end and ahead again, in one go,
            // nothing written.
            let (_b, second) = a.chunk(POPULATE_AHEAD + 8192).unwrap();
            assert_eq!(second as usize - first as usize, 4096);
            let pages = resident_pages(first, BLOCK / 4096);
            let end = (4096 + POPULATE_AHEAD + 8192).max(2 * POPULATE_AHEAD) / 4096;
            assert!(pages[..end].iter().all(|&r| r) && pages[end..].iter().all(|&r| !r), "{} resident, {end} expected", pages.iter().filter(|&&r| r).count());
            // SAFETY: inside the block, which is ours and zeroed.
            assert_eq!(unsafe { second.add((POPULATE_AHEAD + 8192) / 8 - 1).read() }, 0);
        }

        #[test]
        fn pricing_without_a_probe_never_turns_off() {
            let mut p = Pricing::default();
            p.account(Duration::from_secs(10));
            assert!(p.wants_huge() && p.huge_blocks == 1);
            let mut p = Pricing { small_page: Some(Duration::from_micros(1)), ..Pricing::default() };
            p.account(Duration::from_micros(512));
            assert!(p.wants_huge(), "as dear as the small pages: kept");
            p.account(Duration::from_micros(513));
            assert!(!p.wants_huge() && p.dear == Some((Duration::from_micros(513), Duration::from_micros(1))));
        }
    }

    /// Resident and huge-page bytes of these blocks: from the kernel's page tables of the blocks
    /// alone (`PAGEMAP_SCAN`, Linux 6.7 and later); on older kernels from `/proc/self/smaps`,
    /// whose reading walks the page tables of the whole process (about 12 ms per GiB of the
    /// host's memory on small pages, BENCHMARKS.md section 10), so only for a process of at most
    /// `SMAPS_RSS_LIMIT` resident. None when neither could be had.
    fn resident(blocks: &[usize]) -> Option<(u64, u64)> {
        scan::resident(blocks).or_else(|| (process_rss()? <= SMAPS_RSS_LIMIT).then(|| smaps_resident(blocks)).flatten())
    }

    /// The largest process whose `/proc/self/smaps` is read for the report (about 12 ms).
    const SMAPS_RSS_LIMIT: u64 = 1 << 30;

    /// The process's resident bytes (`/proc/self/statm`, no page-table walk).
    fn process_rss() -> Option<u64> {
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        pages.checked_mul(u64::try_from(page).ok().filter(|&p| p > 0)?)
    }

    /// Resident and huge-page bytes of the mappings that hold these blocks, from
    /// `/proc/self/smaps` (the kernel merges adjacent blocks into one mapping).
    fn smaps_resident(blocks: &[usize]) -> Option<(u64, u64)> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let (mut rss, mut huge, mut take) = (0u64, 0u64, false);
        for line in smaps.lines() {
            let mut f = line.split_whitespace();
            let first = f.next().unwrap_or("");
            if let Some((a, b)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
                let (a, b) = (usize::from_str_radix(a, 16).unwrap_or(0), usize::from_str_radix(b, 16).unwrap_or(0));
                take = blocks.iter().any(|&p| (a..b).contains(&p));
                continue;
            }
            let kb = || f.clone().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) << 10;
            match first {
                "Rss:" if take => rss += kb(),
                "AnonHugePages:" if take => huge += kb(),
                _ => {}
            }
        }
        Some((rss, huge))
    }

    /// The blocks' pages through the `PAGEMAP_SCAN` ioctl of `/proc/self/pagemap`
    /// (linux/fs.h): the kernel walks the page tables of the ranges asked for only.
    mod scan {
        use super::BLOCK;

        #[repr(C)]
        #[derive(Default)]
        struct PmScanArg {
            size: u64,
            flags: u64,
            start: u64,
            end: u64,
            walk_end: u64,
            vec: u64,
            vec_len: u64,
            max_pages: u64,
            category_inverted: u64,
            category_mask: u64,
            category_anyof_mask: u64,
            return_mask: u64,
        }

        #[repr(C)]
        #[derive(Default, Clone, Copy)]
        struct PageRegion {
            start: u64,
            end: u64,
            categories: u64,
        }

        const PAGE_IS_PRESENT: u64 = 1 << 3;
        const PAGE_IS_HUGE: u64 = 1 << 6;
        /// `_IOWR('f', 16, struct pm_scan_arg)`.
        const PAGEMAP_SCAN: u64 = (3 << 30) | ((std::mem::size_of::<PmScanArg>() as u64) << 16) | ((b'f' as u64) << 8) | 16;

        /// Resident and huge-page bytes of `blocks` (each `BLOCK` bytes from its address);
        /// None when the kernel has no `PAGEMAP_SCAN` (before 6.7) or refuses it.
        pub fn resident(blocks: &[usize]) -> Option<(u64, u64)> {
            let pagemap = std::fs::File::open("/proc/self/pagemap").ok()?;
            let fd = std::os::fd::AsRawFd::as_raw_fd(&pagemap);
            let mut regions = [PageRegion::default(); 64];
            let (mut rss, mut huge) = (0u64, 0u64);
            for &b in blocks {
                let end = b.checked_add(BLOCK)? as u64;
                let mut at = b as u64;
                while at < end {
                    let mut arg = PmScanArg {
                        size: std::mem::size_of::<PmScanArg>() as u64,
                        start: at,
                        end,
                        vec: regions.as_mut_ptr() as u64,
                        vec_len: regions.len() as u64,
                        category_anyof_mask: PAGE_IS_PRESENT,
                        return_mask: PAGE_IS_PRESENT | PAGE_IS_HUGE,
                        ..Default::default()
                    };
                    // SAFETY: `arg` is the kernel's `pm_scan_arg` (its size given), `vec` points
                    // to `vec_len` writable `page_region`s that outlive the call; the ranges are
                    // ours (the kernel only reads their page tables).
                    let n = unsafe { libc::ioctl(fd, PAGEMAP_SCAN as _, &mut arg as *mut PmScanArg) };
                    let n = usize::try_from(n).ok()?.min(regions.len());
                    for r in &regions[..n] {
                        let bytes = r.end.saturating_sub(r.start).min(BLOCK as u64);
                        rss += bytes;
                        if r.categories & PAGE_IS_HUGE != 0 {
                            huge += bytes;
                        }
                    }
                    // The kernel stops early when the vector is full: go on from where it did.
                    if arg.walk_end <= at || arg.walk_end > end {
                        break;
                    }
                    at = arg.walk_end;
                }
            }
            Some((rss, huge))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(calls: &[Call]) -> CallLog {
        let mut log = CallLog::default();
        for &c in calls {
            log.push(c);
        }
        assert_eq!(log.len(), calls.len());
        let (starts, ends) = log.columns();
        assert_eq!(starts, calls.iter().map(|c| c.start).collect::<Vec<_>>());
        assert_eq!(ends, calls.iter().map(|c| c.end).collect::<Vec<_>>());
        let decoded: Vec<Call> = {
            let mut cur = log.cursor();
            std::iter::from_fn(|| cur.next()).collect()
        };
        assert_eq!(decoded, calls);
        // The block decoder (finalize's) gives the same calls, whatever the block size.
        for block in [1, 3, 512] {
            let (mut s, mut e) = (vec![0i64; block], vec![0i64; block]);
            let mut cur = log.cursor();
            let mut got = Vec::new();
            loop {
                let n = cur.next_block(&mut s, &mut e);
                if n == 0 {
                    break;
                }
                got.extend((0..n).map(|i| Call { start: s[i], end: e[i] }));
            }
            assert_eq!(got, calls, "blocks of {block}");
        }
        // Sorted means in start order; a false "unsorted" would only cost a sort.
        if !log.is_sorted() {
            assert!(!calls.is_sorted_by_key(|c| c.start) || calls.iter().any(|c| c.start < 0));
        } else {
            assert!(calls.is_sorted_by_key(|c| c.start));
        }
        log
    }

    /// The units the calls of a log take, in all.
    fn units_used(log: &CallLog) -> usize {
        let mut n = 0;
        log.for_each_chunk(|h, data| {
            assert_eq!(h[1] as usize, data.len());
            n += data.len();
        });
        n
    }

    #[test]
    fn keeps_order_and_count_across_chunks() {
        let n = 300_000i64;
        let calls: Vec<Call> = (0..n).map(|i| Call { start: 1_000_000_000_000 + i * 100, end: 1_000_000_000_000 + i * 100 + 50 }).collect();
        let log = round_trip(&calls);
        // 4 bytes per (short) call, plus the slack of the last chunk.
        assert!(log.bytes_reserved() <= n as usize * 4 + 2 * MAX_CHUNK * 8, "{}", log.bytes_reserved());
    }

    #[test]
    fn short_calls_take_one_unit_long_ones_two_and_escaped_ones_five() {
        let t = 1_000_000_000_000i64;
        // (gap, duration) of the calls after the first (escaped) one, and the units each takes.
        let cases: [(i64, i64, usize); 10] = [
            (0, 0, 1),
            (32_767, 65_535, 1),  // the largest short call
            (32_768, 10, 2),      // gap too wide for a short call
            (10, 65_536, 2),      // duration too long for a short call
            (-1, 10, 2),          // negative gap (recursion)
            (i32::MAX as i64, 1, 2),
            (i32::MAX as i64 + 1, 1, 5),
            (10, LONG_DURATION_LIMIT as i64 - 1, 2), // the longest long call
            (10, LONG_DURATION_LIMIT as i64, 5),
            (10, -1, 5),          // an end before the start
        ];
        for (gap, duration, want) in cases {
            let mut log = CallLog::default();
            let calls = [Call { start: t, end: t + 1 }, Call { start: t + gap, end: t + gap + duration }];
            for c in calls {
                log.push(c);
            }
            assert_eq!(units_used(&log), 5 + want, "gap {gap}, duration {duration}");
            assert_eq!(log.len(), 2);
            assert_eq!(log.columns(), (vec![calls[0].start, calls[1].start], vec![calls[0].end, calls[1].end]), "gap {gap}, duration {duration}");
        }
    }

    #[test]
    fn escapes_what_does_not_fit() {
        let t = 5_000_000_000_000i64;
        let calls = [
            Call { start: t, end: t + 10 },                          // first: escaped
            Call { start: t + 20, end: t + 5_000_000_000 },          // 5 s duration: escaped
            Call { start: t + 3_000_000_000, end: t + 3_000_000_001 }, // 2.99 s gap: escaped
            Call { start: t + 2_999_999_990, end: t + 2_999_999_995 }, // small negative gap (recursion)
            Call { start: t + 2_999_999_990, end: t + 2_999_999_990 }, // zero gap, zero duration
            Call { start: t - 1_000_000, end: t + 2_147_483_000 },   // a long call
            Call { start: t - 1_000_000, end: t + 4_294_967_294 },   // 4.3 s: escaped
            Call { start: -7, end: -3 },                              // negative clock values
            Call { start: i64::MAX - 5, end: i64::MAX },
        ];
        round_trip(&calls);
    }

    #[test]
    fn tsc_ticks_round_trip() {
        // Raw TSC values of a machine up for days at 3.7 GHz.
        let t = 3_700_000_000i64 * 86_400 * 9;
        let calls = [
            Call { start: t, end: t + 4_000 },
            Call { start: t + 10_000, end: t + 10_000 + 2_147_483_644 }, // 2^31 - 4 ticks (0.58 s): long
            Call { start: t + 15_000, end: t + 15_000 + 2_147_483_645 }, // 2^31 - 3 ticks: escaped
            Call { start: t + 20_000, end: t + 20_000 + 4_294_967_295 }, // 2^32 - 1 ticks: escaped
            Call { start: t + 20_100, end: t + 20_150 },                 // short
            Call { start: t + 8_000_000_000, end: t + 8_000_000_100 },   // 2.2 s gap: escaped
            Call { start: t + 8_000_001_000, end: t + 8_000_000_900 },   // end before start (unsynchronized TSC)
            Call { start: t + 8_000_002_000, end: t + 8_000_002_050 },
        ];
        round_trip(&calls);
    }

    #[test]
    fn every_mix_of_forms_round_trips() {
        // Short, long and escaped calls in a pseudo-random mix, across many chunks.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut t = 1_000_000_000_000i64;
        let calls: Vec<Call> = (0..200_000)
            .map(|_| {
                let r = next();
                t += match r % 8 {
                    0..=4 => (r >> 8) as i64 % 32_768,
                    5 | 6 => (r >> 8) as i64 % 1_000_000_000,
                    _ => 3_000_000_000 + (r >> 8) as i64 % 1_000,
                };
                let d = match (r >> 4) % 8 {
                    0..=4 => (r >> 16) as i64 % 65_536,
                    5 | 6 => (r >> 16) as i64 % 2_000_000_000,
                    _ => 3_000_000_000,
                };
                Call { start: t, end: t + d }
            })
            .collect();
        let log = round_trip(&calls);
        assert!(log.longs > 10_000 && log.escapes > 10_000, "{} long, {} escaped", log.longs, log.escapes);
    }

    #[test]
    fn escape_never_splits_across_chunks() {
        let mut calls = Vec::new();
        for i in 0..10_000i64 {
            // Every 7th call has a long gap, so escapes land at every chunk offset.
            let start = i * 10 + if i % 7 == 0 { i * 3_000_000_000 } else { 0 };
            calls.push(Call { start, end: start + 1 });
        }
        let mut sorted = calls.clone();
        sorted.sort_by_key(|c| c.start);
        round_trip(&sorted);
    }

    #[test]
    fn calls_end_at_the_first_zero_unit() {
        // A chunk as a killed writer leaves it: two calls, then an escaped call whose time
        // units were stored but whose escape unit was not (the escape unit goes last), then
        // zeroed units never written.
        let t = 1_000_000u32;
        let units = [ESCAPE, t, 0, t + 5, 0, 7 << 17 | 3 << 1 | 1, 0, t + 50, 0, t + 60, 0, 0, 0];
        let (mut pos, mut prev, mut got) = (0, 0, Vec::new());
        decode_chunk(&units, &mut pos, &mut prev, |c| got.push(c));
        let t = t as i64;
        assert_eq!(got, vec![Call { start: t, end: t + 5 }, Call { start: t + 7, end: t + 10 }]);
        assert_eq!(pos, 6);
        // A long call cut after its first unit (a truncated file) is not decoded.
        let cut = [ESCAPE, 1_000, 0, 1_005, 0, (100 + 1) << 1];
        let (mut pos, mut prev) = (0, 0);
        let scan = scan_chunk(&cut, |_| {});
        decode_chunk(&cut, &mut pos, &mut prev, |_| {});
        assert_eq!((pos, scan.calls, scan.torn), (5, 1, 1));
        // A zero-length call right after its predecessor (gap 0, duration 0) is not a zero word.
        let mut log = CallLog::default();
        for c in [Call { start: t, end: t }, Call { start: t, end: t }, Call { start: t, end: t + 1 }] {
            log.push(c);
        }
        assert_eq!(log.len(), 3);
        assert_eq!(log.columns(), (vec![t, t, t], vec![t, t, t + 1]));
    }
}
