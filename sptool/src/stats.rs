//! Per-region call statistics, computed in one pass and merged across ranks.
//!
//! Durations are integer nanoseconds. The total is summed exactly (`i128`);
//! the variance uses the shifted-data algorithm (sums of `d - K` with `K` the
//! first duration), which is one pass and numerically safe because `K` is a
//! typical value. Ranks are pooled with Chan's parallel formula, so the
//! pooled standard deviation equals that of all calls taken together.

/// Statistics of a set of calls. `m2` (sum of squared deviations from the
/// mean, ns²) is `None` when the file holds aggregates only.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    pub count: u64,
    pub total_ns: i128,
    pub min_ns: i64,
    pub max_ns: i64,
    pub m2: Option<f64>,
    /// Earliest start and latest end, when timestamps were recorded.
    pub first_start: Option<i64>,
    pub last_end: Option<i64>,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            count: 0,
            total_ns: 0,
            min_ns: i64::MAX,
            max_ns: i64::MIN,
            m2: Some(0.0),
            first_start: None,
            last_end: None,
        }
    }
}

/// Running sums of one pass.
struct Pass {
    count: u64,
    total: i128,
    min: i64,
    max: i64,
    shift: i64,
    s1: i128,
    s2: f64,
}

impl Pass {
    fn new(first: Option<i64>) -> Self {
        Self {
            count: 0,
            total: 0,
            min: i64::MAX,
            max: i64::MIN,
            shift: first.unwrap_or(0),
            s1: 0,
            s2: 0.0,
        }
    }

    #[inline(always)]
    fn add(&mut self, d: i64) {
        self.count += 1;
        self.total += d as i128;
        self.min = self.min.min(d);
        self.max = self.max.max(d);
        let k = d as i128 - self.shift as i128;
        self.s1 += k;
        let kf = k as f64;
        self.s2 += kf * kf;
    }

    fn finish(self, first_start: Option<i64>, last_end: Option<i64>) -> Stats {
        if self.count == 0 {
            return Stats::default();
        }
        let n = self.count as f64;
        let s1 = self.s1 as f64;
        let m2 = (self.s2 - s1 * s1 / n).max(0.0);
        Stats {
            count: self.count,
            total_ns: self.total,
            min_ns: self.min,
            max_ns: self.max,
            m2: Some(m2),
            first_start,
            last_end,
        }
    }
}

impl Stats {
    /// Calls given as absolute start and end timestamps (schemas 1 and 2).
    /// The slices must have the same length (checked by the reader).
    pub fn from_intervals(starts: &[i64], ends: &[i64]) -> Self {
        let n = starts.len().min(ends.len());
        let (starts, ends) = (&starts[..n], &ends[..n]);
        let mut pass = Pass::new(starts.first().zip(ends.first()).map(|(s, e)| e.wrapping_sub(*s)));
        let mut first = i64::MAX;
        let mut last = i64::MIN;
        for (&s, &e) in starts.iter().zip(ends) {
            pass.add(e.wrapping_sub(s));
            first = first.min(s);
            last = last.max(e);
        }
        let (first, last) = if n == 0 { (None, None) } else { (Some(first), Some(last)) };
        pass.finish(first, last)
    }

    /// Calls given as start gaps and durations (schema 3): the start of call
    /// `i` is the sum of the gaps up to `i`.
    pub fn from_deltas(start_deltas: &[i64], durations: &[i64]) -> Self {
        let n = start_deltas.len().min(durations.len());
        let mut pass = Pass::new(durations.first().copied());
        let mut start: i64 = 0;
        let mut first = i64::MAX;
        let mut last = i64::MIN;
        for (&gap, &d) in start_deltas[..n].iter().zip(&durations[..n]) {
            start = start.wrapping_add(gap);
            pass.add(d);
            first = first.min(start);
            last = last.max(start.wrapping_add(d));
        }
        let (first, last) = if n == 0 { (None, None) } else { (Some(first), Some(last)) };
        pass.finish(first, last)
    }

    /// Aggregates only (the Python package's `aggregate` storage layout).
    pub fn from_aggregate(count: u64, total_ns: i64, min_ns: i64, max_ns: i64) -> Self {
        if count == 0 {
            return Self::default();
        }
        Self {
            count,
            total_ns: total_ns as i128,
            min_ns,
            max_ns,
            m2: None,
            first_start: None,
            last_end: None,
        }
    }

    pub fn total_s(&self) -> f64 {
        self.total_ns as f64 / 1e9
    }

    pub fn mean_ns(&self) -> Option<f64> {
        (self.count > 0).then(|| self.total_ns as f64 / self.count as f64)
    }

    pub fn mean_s(&self) -> Option<f64> {
        (self.count > 0).then(|| self.total_ns as f64 / 1e9 / self.count as f64)
    }

    pub fn min_s(&self) -> Option<f64> {
        (self.count > 0).then(|| self.min_ns as f64 / 1e9)
    }

    pub fn max_s(&self) -> Option<f64> {
        (self.count > 0).then(|| self.max_ns as f64 / 1e9)
    }

    /// Population standard deviation (as numpy's `std`), seconds.
    pub fn std_s(&self) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        self.m2.map(|m2| (m2 / self.count as f64).sqrt() / 1e9)
    }

    /// Wall-clock span from the first start to the last end, seconds.
    pub fn span_s(&self) -> Option<f64> {
        Some(self.last_end?.wrapping_sub(self.first_start?) as f64 / 1e9)
    }

    /// Pool `other` into `self` (Chan et al.'s parallel variance update).
    pub fn merge(&mut self, other: &Stats) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = *other;
            return;
        }
        let (na, nb) = (self.count as f64, other.count as f64);
        let delta = other.mean_ns().unwrap_or(0.0) - self.mean_ns().unwrap_or(0.0);
        self.m2 = match (self.m2, other.m2) {
            (Some(a), Some(b)) => Some(a + b + delta * delta * na * nb / (na + nb)),
            _ => None,
        };
        self.count = self.count.saturating_add(other.count);
        self.total_ns += other.total_ns;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
        self.first_start = min_opt(self.first_start, other.first_start);
        self.last_end = max_opt(self.last_end, other.last_end);
    }
}

fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Imbalance across ranks: max/mean of the per-rank totals. `None` with
/// fewer than two totals (nothing to compare).
pub fn imbalance(totals: &[f64]) -> Option<f64> {
    if totals.len() < 2 {
        return None;
    }
    let mean = totals.iter().sum::<f64>() / totals.len() as f64;
    let max = totals.iter().copied().fold(f64::MIN, f64::max);
    (mean > 0.0).then(|| max / mean)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_std(d: &[f64]) -> f64 {
        let mean = d.iter().sum::<f64>() / d.len() as f64;
        (d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / d.len() as f64).sqrt()
    }

    #[test]
    fn one_pass_matches_naive() {
        let starts: Vec<i64> = (0..1000).map(|i| 1_000_000_000_000 + i * 10_000).collect();
        let ends: Vec<i64> = starts.iter().enumerate().map(|(i, s)| s + 1000 + (i as i64 * 37) % 500).collect();
        let s = Stats::from_intervals(&starts, &ends);
        let d: Vec<f64> = starts.iter().zip(&ends).map(|(s, e)| (e - s) as f64 * 1e-9).collect();
        assert_eq!(s.count, 1000);
        assert!((s.std_s().unwrap() - naive_std(&d)).abs() < 1e-15);
        assert!((s.mean_s().unwrap() - d.iter().sum::<f64>() / 1000.0).abs() < 1e-15);
        assert_eq!(s.min_ns, 1000);
        assert_eq!(s.first_start, Some(starts[0]));
        assert_eq!(s.last_end, Some(*ends.iter().max().unwrap()));
    }

    #[test]
    fn merge_equals_pooled() {
        let a = Stats::from_intervals(&[0, 10, 20], &[1, 13, 25]);
        let b = Stats::from_intervals(&[100, 200], &[200, 210]);
        let all = Stats::from_intervals(&[0, 10, 20, 100, 200], &[1, 13, 25, 200, 210]);
        let mut m = a;
        m.merge(&b);
        assert_eq!(m.count, all.count);
        assert_eq!(m.total_ns, all.total_ns);
        assert!((m.m2.unwrap() - all.m2.unwrap()).abs() < 1e-6);
        let mut e = Stats::default();
        e.merge(&a);
        assert_eq!(e, a);
    }

    #[test]
    fn deltas_decode() {
        // starts 100, 150, 400; durations 10, 20, 5
        let s = Stats::from_deltas(&[100, 50, 250], &[10, 20, 5]);
        assert_eq!(s.total_ns, 35);
        assert_eq!(s.first_start, Some(100));
        assert_eq!(s.last_end, Some(405));
        assert_eq!(Stats::from_deltas(&[], &[]).count, 0);
    }

    #[test]
    fn imbalance_ratio() {
        assert_eq!(imbalance(&[1.0]), None);
        assert_eq!(imbalance(&[1.0, 3.0]), Some(1.5));
    }
}
