//! Completed calls of one region on one thread, packed into 8 bytes per call.
//!
//! Times are clock ticks (`clock::now`): TSC cycles, or `CLOCK_MONOTONIC` ns in monotonic
//! mode; they become ns only at collect time. A call is stored as one word: the gap from the
//! previous call's start (i32 ticks, negative after a recursive inner call) and its duration
//! (u32 ticks). Calls that do not fit (the first call of a log, gaps over 2^31 ticks, durations
//! of 2^32 ticks or more, an end before the start) take three words: an escape word and the
//! absolute start and end. In ns that is 2.1 s and 4.29 s; with a TSC at 2-4 GHz about 0.5-1 s
//! and 1-2 s: longer calls than that are rare enough that 8 bytes per call stays the average. Halving the bytes written per call halves the page
//! faults of fresh memory, which dominate the recording cost. Words live in chunks that are
//! never moved once full, so a long run never copies its history.

/// One completed call, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    pub start: i64,
    pub end: i64,
}

const FIRST_CHUNK: usize = 64;
const MAX_CHUNK: usize = 1 << 17; // 1 MiB of words per chunk
/// Low half of an escape word; a packed duration is always below it.
const ESCAPE: u64 = 0xFFFF_FFFF;

#[derive(Debug, Default)]
pub struct CallLog {
    full: Vec<Vec<u64>>,
    current: Vec<u64>,
    prev_start: i64,
    /// Escaped calls (three words each), so the number of calls needs no pass over the words.
    escapes: usize,
    /// A call started before the one logged before it (recursion): not in start order.
    unsorted: bool,
    /// Calls that end before they start (a clock going backwards between the two reads; such
    /// a call is always escaped, so this costs nothing on the packed path).
    backwards: u64,
}

impl CallLog {
    #[inline(always)]
    pub fn push(&mut self, call: Call) {
        let gap = call.start.wrapping_sub(self.prev_start);
        let duration = call.end.wrapping_sub(call.start) as u64;
        self.prev_start = call.start;
        self.unsorted |= gap < 0;
        if gap as i32 as i64 == gap && duration < ESCAPE {
            if self.current.len() == self.current.capacity() {
                self.new_chunk(1);
            }
            self.current.push(((gap as u64) << 32) | duration);
        } else {
            self.push_escaped(call);
        }
    }

    #[cold]
    fn push_escaped(&mut self, call: Call) {
        self.escapes += 1;
        self.backwards += (call.end < call.start) as u64;
        if self.current.capacity() - self.current.len() < 3 {
            self.new_chunk(3);
        }
        self.current.extend_from_slice(&[ESCAPE, call.start as u64, call.end as u64]);
    }

    #[cold]
    fn new_chunk(&mut self, need: usize) {
        let next = (self.current.capacity() * 2).clamp(FIRST_CHUNK, MAX_CHUNK).max(need);
        let full = std::mem::replace(&mut self.current, Vec::with_capacity(next));
        if !full.is_empty() {
            self.full.push(full);
        }
    }

    /// Number of calls.
    pub fn len(&self) -> usize {
        let words = self.full.iter().map(Vec::len).sum::<usize>() + self.current.len();
        words - 2 * self.escapes
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
        self.current.is_empty() && self.full.is_empty()
    }

    /// Bytes held, for the memory-per-call benchmark.
    pub fn bytes_reserved(&self) -> usize {
        (self.full.iter().map(Vec::capacity).sum::<usize>() + self.current.capacity()) * 8
    }

    /// Decode the calls one by one, in recording order (the one decoder of the format).
    pub fn cursor(&self) -> Cursor<'_> {
        Cursor::new(self)
    }

    /// Start and end columns in recording order (tests and small logs; finalize streams
    /// with `cursor`).
    pub fn columns(&self) -> (Vec<i64>, Vec<i64>) {
        let mut cur = self.cursor();
        std::iter::from_fn(|| cur.next()).map(|c| (c.start, c.end)).unzip()
    }
}

/// Decodes a `CallLog` call by call (escapes never straddle chunks).
pub struct Cursor<'a> {
    log: &'a CallLog,
    /// Index of the next chunk (`log.full.len()` means `current`).
    next_chunk: usize,
    words: &'a [u64],
    pos: usize,
    prev: i64,
}

impl<'a> Cursor<'a> {
    fn new(log: &'a CallLog) -> Cursor<'a> {
        let mut c = Cursor { log, next_chunk: 0, words: &[], pos: 0, prev: 0 };
        c.advance_chunk();
        c
    }

    /// Move to the next chunk; false when there is none.
    #[cold]
    fn advance_chunk(&mut self) -> bool {
        let n = self.log.full.len();
        if self.next_chunk > n {
            return false;
        }
        self.words = if self.next_chunk < n { &self.log.full[self.next_chunk] } else { &self.log.current };
        self.next_chunk += 1;
        self.pos = 0;
        true
    }

    #[inline(always)]
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Call> {
        loop {
            if let Some(&w) = self.words.get(self.pos) {
                if w != ESCAPE {
                    self.pos += 1;
                    let start = self.prev.wrapping_add((w >> 32) as u32 as i32 as i64);
                    self.prev = start;
                    return Some(Call { start, end: start + (w & ESCAPE) as i64 });
                }
                let start = self.words.get(self.pos + 1).copied().unwrap_or_default() as i64;
                let end = self.words.get(self.pos + 2).copied().unwrap_or_default() as i64;
                self.pos += 3;
                self.prev = start;
                return Some(Call { start, end });
            }
            if !self.advance_chunk() {
                return None;
            }
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
        let mut cur = log.cursor();
        let decoded: Vec<Call> = std::iter::from_fn(|| cur.next()).collect();
        assert_eq!(decoded, calls);
        // Sorted means in start order; a false "unsorted" would only cost a sort.
        if !log.is_sorted() {
            assert!(!calls.is_sorted_by_key(|c| c.start) || calls.iter().any(|c| c.start < 0));
        } else {
            assert!(calls.is_sorted_by_key(|c| c.start));
        }
        log
    }

    #[test]
    fn keeps_order_and_count_across_chunks() {
        let n = 300_000i64;
        let calls: Vec<Call> = (0..n).map(|i| Call { start: 1_000_000_000_000 + i * 100, end: 1_000_000_000_000 + i * 100 + 50 }).collect();
        let log = round_trip(&calls);
        // 8 bytes per call, plus the slack of the last chunk.
        assert!(log.bytes_reserved() <= (n as usize + MAX_CHUNK) * 8, "{}", log.bytes_reserved());
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
            Call { start: t - 1_000_000, end: t + 4_294_967_294 },   // duration just below the escape
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
            Call { start: t + 10_000, end: t + 10_000 + 4_294_967_294 }, // 1.16 s: still packed
            Call { start: t + 20_000, end: t + 20_000 + 4_294_967_295 }, // 2^32 - 1 ticks: escaped
            Call { start: t + 8_000_000_000, end: t + 8_000_000_100 },   // 2.2 s gap: escaped
            Call { start: t + 8_000_001_000, end: t + 8_000_000_900 },   // end before start (unsynchronized TSC)
            Call { start: t + 8_000_002_000, end: t + 8_000_002_050 },
        ];
        round_trip(&calls);
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
}
