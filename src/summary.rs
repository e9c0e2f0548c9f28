//! The compact table rank 0 prints at finalize: region, calls, total, mean, min, max,
//! costliest first.

use crate::model::RegionData;

#[derive(Debug, Clone, PartialEq)]
pub struct RegionStats {
    pub name: String,
    pub calls: u64,
    pub total_ns: i64,
    pub min_ns: i64,
    pub max_ns: i64,
    pub open_calls: u64,
}

impl RegionStats {
    pub fn mean_ns(&self) -> f64 {
        if self.calls == 0 { 0.0 } else { self.total_ns as f64 / self.calls as f64 }
    }

    /// From the region's statistics (no pass over its calls).
    pub fn of(region: &RegionData) -> RegionStats {
        let p = region.pooled();
        RegionStats { name: region.name.clone(), calls: p.count, total_ns: p.total, min_ns: p.min, max_ns: p.max, open_calls: region.open_calls }
    }

    /// Pool the same region over several ranks.
    pub fn merge(&mut self, other: &RegionStats) {
        if other.calls > 0 {
            self.min_ns = if self.calls == 0 { other.min_ns } else { self.min_ns.min(other.min_ns) };
            self.max_ns = self.max_ns.max(other.max_ns);
        }
        self.calls += other.calls;
        self.total_ns += other.total_ns;
        self.open_calls += other.open_calls;
    }
}

/// Seconds with a unit that keeps three significant digits readable.
pub fn format_duration(ns: f64) -> String {
    let abs = ns.abs();
    if abs >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if abs >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if abs >= 1e3 {
        format!("{:.3} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// No line of the table is longer than this, terminal or not.
pub const MAX_LINE: usize = 199;
/// Width of the columns after the name: calls and four durations.
const NUMBERS: usize = 2 + 10 + 4 * (2 + 12);
/// A shortened name keeps at least this many characters.
const MIN_NAME: usize = 16;

/// The width the table fits in: the terminal's (`$COLUMNS` when set, else the size of the
/// terminal on standard output), at most [`MAX_LINE`]; [`MAX_LINE`] without a terminal.
pub fn line_budget() -> usize {
    let columns = std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse::<usize>().ok()).filter(|&c| c > 0);
    let columns = columns.or_else(|| {
        // SAFETY: TIOCGWINSZ fills a winsize; it fails when stdout is not a terminal.
        let mut size: libc::winsize = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
        (rc == 0 && size.ws_col > 0).then_some(size.ws_col as usize)
    });
    columns.map_or(MAX_LINE, |c| c.clamp(40, MAX_LINE))
}

/// Shorten `name` to `width` characters by replacing its middle with `…` (both ends of a
/// long name stay readable).
pub fn shorten(name: &str, width: usize) -> String {
    let n = name.chars().count();
    if n <= width {
        return name.to_string();
    }
    let keep = width.saturating_sub(1);
    let head = keep.div_ceil(2);
    let mut out: String = name.chars().take(head).collect();
    out.push('…');
    out.extend(name.chars().skip(n - (keep - head)));
    out
}

/// Render the table to fit the terminal (see [`line_budget`]); `stats` in any order, `ranks`
/// pooled into them.
pub fn render(stats: Vec<RegionStats>, ranks: usize) -> String {
    render_width(stats, ranks, line_budget())
}

/// Render the table with lines of at most `max_line` characters (names are shortened).
pub fn render_width(mut stats: Vec<RegionStats>, ranks: usize, max_line: usize) -> String {
    stats.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.name.cmp(&b.name)));
    let open_note = |s: &RegionStats| if s.open_calls > 0 { format!("  ({} left open)", s.open_calls) } else { String::new() };
    let suffix = stats.iter().map(|s| open_note(s).len()).max().unwrap_or(0);
    let room = max_line.saturating_sub(NUMBERS + suffix).max(MIN_NAME);
    let width = stats.iter().map(|s| s.name.chars().count()).max().unwrap_or(6).clamp(6, room);
    let mut out = String::new();
    let scope = if ranks > 1 { format!(" (pooled over {ranks} ranks)") } else { String::new() };
    out.push_str(&format!("scope_profiler summary{scope}\n"));
    out.push_str(&format!(
        "{:<width$}  {:>10}  {:>12}  {:>12}  {:>12}  {:>12}\n",
        "region", "calls", "total", "mean", "min", "max"
    ));
    for s in &stats {
        let open = open_note(s);
        out.push_str(&format!(
            "{:<width$}  {:>10}  {:>12}  {:>12}  {:>12}  {:>12}{open}\n",
            shorten(&s.name, width),
            s.calls,
            format_duration(s.total_ns as f64),
            format_duration(s.mean_ns()),
            format_duration(s.min_ns as f64),
            format_duration(s.max_ns as f64),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_and_order() {
        let a = RegionData::from_columns("a", vec![0, 10], vec![5, 30], vec![0, 0]);
        let b = RegionData { open_calls: 2, ..RegionData::from_columns("b", vec![0], vec![100], vec![0]) };
        let sa = RegionStats::of(&a);
        assert_eq!((sa.calls, sa.total_ns, sa.min_ns, sa.max_ns), (2, 25, 5, 20));
        assert_eq!(sa.mean_ns(), 12.5);
        let text = render(vec![sa, RegionStats::of(&b)], 1);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[2].starts_with("b ") && lines[2].contains("(2 left open)"), "{text}");
        assert!(lines[3].starts_with("a "), "{text}");
        assert_eq!(format_duration(1.5e9), "1.500 s");
        assert_eq!(format_duration(2500.0), "2.500 us");
    }

    #[test]
    fn long_names_are_shortened_to_fit() {
        let long = format!("{}END", "n".repeat(300));
        let stats = |name: &str| RegionStats { name: name.into(), calls: 1, total_ns: 5, min_ns: 5, max_ns: 5, open_calls: 3 };
        for max in [101, 120, MAX_LINE] {
            let text = render_width(vec![stats(&long), stats("short")], 1, max);
            assert!(text.lines().all(|l| l.chars().count() <= max), "{max}:\n{text}");
            assert!(text.contains("…") && text.contains("nEND "), "{text}");
            assert!(text.lines().any(|l| l.starts_with("short ")), "{text}");
        }
        assert_eq!(shorten("abcdefghij", 7), "abc…hij");
        assert_eq!(shorten("abc", 7), "abc");
    }

    #[test]
    fn merge_pools_ranks() {
        let mut a = RegionStats { name: "x".into(), calls: 0, total_ns: 0, min_ns: 0, max_ns: 0, open_calls: 0 };
        a.merge(&RegionStats { name: "x".into(), calls: 2, total_ns: 10, min_ns: 3, max_ns: 7, open_calls: 1 });
        a.merge(&RegionStats { name: "x".into(), calls: 1, total_ns: 2, min_ns: 2, max_ns: 2, open_calls: 0 });
        assert_eq!((a.calls, a.total_ns, a.min_ns, a.max_ns, a.open_calls), (3, 12, 2, 7, 1));
    }
}
