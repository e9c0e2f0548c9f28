//! Statistics of completed calls (count, total, minimum, maximum, exclusive time and a log2
//! histogram of durations), as read from a thread's table (`stats.rs`) or pooled over threads
//! and ranks.

/// Histogram buckets: bucket b >= 2 holds the durations d with 2^(b-1) <= d < 2^b (in clock
/// units), bucket 1 durations of 0 and 1, bucket 0 none (a negative duration, which a
/// monotonic clock cannot give).
pub const HIST_BUCKETS: usize = 64;

/// Histogram bucket of a duration: its bit length, at least 1. `| 1` makes the operand
/// non-zero, so this is one `bsr` with no zero check (the histogram is on the hot path).
#[inline(always)]
pub fn bucket(duration: i64) -> usize {
    (64 - (duration as u64 | 1).leading_zeros()) as usize & (HIST_BUCKETS - 1)
}

/// Lower bound of a bucket's durations (clock units).
pub fn bucket_floor(b: usize) -> i64 {
    if b <= 1 { 0 } else { 1i64 << (b - 1) }
}

/// Statistics of completed calls, as read from a table or pooled over threads and ranks.
/// Times are in the clock's units until `to_ns`, nanoseconds after.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    pub count: u64,
    pub total: i64,
    pub min: i64,
    pub max: i64,
    pub exclusive: i64,
    /// `HIST_BUCKETS` counts (empty means all zero).
    pub hist: Vec<u64>,
}

impl Default for Stats {
    fn default() -> Stats {
        Stats { count: 0, total: 0, min: 0, max: 0, exclusive: 0, hist: vec![0; HIST_BUCKETS] }
    }
}

impl Stats {
    /// Pool another set of calls into these.
    pub fn merge(&mut self, o: &Stats) {
        if o.count == 0 {
            return;
        }
        self.min = if self.count == 0 { o.min } else { self.min.min(o.min) };
        self.max = if self.count == 0 { o.max } else { self.max.max(o.max) };
        self.count += o.count;
        self.total = self.total.wrapping_add(o.total);
        self.exclusive = self.exclusive.wrapping_add(o.exclusive);
        self.hist.resize(HIST_BUCKETS, 0);
        for (a, b) in self.hist.iter_mut().zip(&o.hist) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets() {
        assert_eq!(bucket(0), 1);
        assert_eq!(bucket(-5), 0);
        assert_eq!(bucket(1), 1);
        assert_eq!(bucket(2), 2);
        assert_eq!(bucket(3), 2);
        assert_eq!(bucket(4), 3);
        assert_eq!(bucket(1023), 10);
        assert_eq!(bucket(1024), 11);
        assert_eq!(bucket(i64::MAX), 63);
        assert_eq!(bucket_floor(11), 1024);
        assert_eq!(bucket_floor(1), 0);
    }
}
