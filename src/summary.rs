//! The compact table rank 0 prints at finalize: region, calls, total, mean, min, max,
//! costliest first.

use crate::config::{Config, SummaryMode};
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

/// One row of the finalize table: a region (flat) or a call path (tree), over every rank.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Row {
    /// The region's name (flat), or the region names of the path from the top (tree).
    pub path: Vec<String>,
    /// Calls, summed over the ranks.
    pub calls: u64,
    /// Inclusive time summed over the ranks (and threads).
    pub sum_ns: i64,
    /// The smallest and largest of the ranks' totals, and the (first) rank with the largest.
    pub min_ns: i64,
    pub max_ns: i64,
    pub max_rank: i64,
    /// Exclusive time summed over the ranks.
    pub excl_sum_ns: i64,
    /// The region's share of a rank's wall time, averaged over the ranks (None: not known).
    pub share: Option<f64>,
    pub open_calls: u64,
    /// Shortest and longest call (one process, flat table only).
    pub call_min_ns: Option<i64>,
    pub call_max_ns: Option<i64>,
}

/// The finalize table's rows for both views, and the number of ranks they are over.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub ranks: usize,
    pub flat: Vec<Row>,
    pub tree: Vec<Row>,
}

/// Rows shown without a terminal (with one: its height, less the lines around the table).
pub const DEFAULT_ROWS: usize = 50;

/// The number of rows that fit on the screen: `$LINES` or the terminal's height, less the
/// heading and the lines after the table; `DEFAULT_ROWS` without a terminal.
pub fn screen_rows() -> usize {
    let lines = std::env::var("LINES").ok().and_then(|c| c.trim().parse::<usize>().ok()).filter(|&c| c > 0);
    let lines = lines.or_else(|| {
        // SAFETY: TIOCGWINSZ fills a winsize; it fails when stdout is not a terminal.
        let mut size: libc::winsize = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
        (rc == 0 && size.ws_row > 0).then_some(size.ws_row as usize)
    });
    lines.map_or(DEFAULT_ROWS, |l| l.saturating_sub(8).max(10))
}

/// A column after the name: heading, width, value.
struct Column {
    head: &'static str,
    width: usize,
    value: fn(&Row, usize) -> String,
}

fn dur(ns: f64) -> String {
    format_duration(ns)
}

fn columns(ranks: usize, tree: bool) -> Vec<Column> {
    let share = |r: &Row, _: usize| r.share.map_or("-".into(), |s| format!("{:.1}%", 100.0 * s));
    let calls = |r: &Row, _: usize| r.calls.to_string();
    if ranks <= 1 {
        let mut c = vec![
            Column { head: "calls", width: 10, value: calls },
            Column { head: "total", width: 12, value: |r, _| dur(r.sum_ns as f64) },
            Column { head: "mean", width: 12, value: |r, _| dur(if r.calls == 0 { 0.0 } else { r.sum_ns as f64 / r.calls as f64 }) },
        ];
        if !tree {
            c.push(Column { head: "min", width: 12, value: |r, _| r.call_min_ns.map_or("-".into(), |v| dur(v as f64)) });
            c.push(Column { head: "max", width: 12, value: |r, _| r.call_max_ns.map_or("-".into(), |v| dur(v as f64)) });
        }
        c.push(Column { head: "exclusive", width: 12, value: |r, _| dur(r.excl_sum_ns as f64) });
        c.push(Column { head: "%wall", width: 6, value: share });
        return c;
    }
    vec![
        Column { head: "calls", width: 10, value: calls },
        Column { head: "mean/rank", width: 12, value: |r, n| dur(r.sum_ns as f64 / n.max(1) as f64) },
        Column { head: "min", width: 12, value: |r, _| dur(r.min_ns as f64) },
        Column { head: "max", width: 12, value: |r, _| dur(r.max_ns as f64) },
        Column { head: "at", width: 6, value: |r, _| r.max_rank.to_string() },
        Column { head: "imbal", width: 6, value: |r, n| imbalance(r, n).map_or("-".into(), |v| format!("{v:.2}")) },
        Column { head: "excl/rank", width: 12, value: |r, n| dur(r.excl_sum_ns as f64 / n.max(1) as f64) },
        Column { head: "%wall", width: 6, value: share },
    ]
}

/// Largest rank's total over the mean of the ranks' totals (1 is perfect balance).
pub fn imbalance(r: &Row, ranks: usize) -> Option<f64> {
    let mean = r.sum_ns as f64 / ranks.max(1) as f64;
    (mean > 0.0).then(|| r.max_ns as f64 / mean)
}

/// The rows in the order shown: flat, costliest first; tree, depth first with the costliest
/// child first (a path whose parent is missing is shown at the top). With its depth each.
pub fn ordered(rows: &[Row], tree: bool) -> Vec<(usize, &Row)> {
    let cost = |a: &&Row, b: &&Row| b.sum_ns.cmp(&a.sum_ns).then_with(|| a.path.cmp(&b.path));
    if !tree {
        let mut v: Vec<&Row> = rows.iter().collect();
        v.sort_by(cost);
        return v.into_iter().map(|r| (0, r)).collect();
    }
    let index: std::collections::HashMap<&[String], usize> = rows.iter().enumerate().map(|(i, r)| (r.path.as_slice(), i)).collect();
    let mut children: Vec<Vec<&Row>> = vec![Vec::new(); rows.len()];
    let mut roots: Vec<&Row> = Vec::new();
    for r in rows {
        match r.path.len().checked_sub(1).filter(|&n| n > 0).and_then(|n| index.get(&r.path[..n])) {
            Some(&p) => children[p].push(r),
            None => roots.push(r),
        }
    }
    roots.sort_by(cost);
    children.iter_mut().for_each(|c| c.sort_by(cost));
    let mut out = Vec::with_capacity(rows.len());
    let mut stack: Vec<(usize, &Row)> = roots.into_iter().rev().map(|r| (0, r)).collect();
    while let Some((depth, r)) = stack.pop() {
        out.push((depth, r));
        if let Some(&i) = index.get(r.path.as_slice()) {
            stack.extend(std::mem::take(&mut children[i]).into_iter().rev().map(|c| (depth + 1, c)));
        }
    }
    out
}

/// The finalize table as `config` asks for it (None: no table), fitted to the terminal.
pub fn text(config: &Config, table: &Table) -> Option<String> {
    if config.verbosity == 0 || config.summary == SummaryMode::Off {
        return None;
    }
    let rows = config.summary_rows.unwrap_or_else(screen_rows);
    Some(render_table(table, config.summary == SummaryMode::Tree, line_budget(), rows))
}

/// The finalize table: `tree` or flat, lines of at most `max_line` characters (names are
/// shortened), at most `max_rows` rows (the rest counted in one line).
pub fn render_table(table: &Table, tree: bool, max_line: usize, max_rows: usize) -> String {
    let rows = if tree { &table.tree } else { &table.flat };
    let ranks = table.ranks;
    let shown = ordered(rows, tree);
    let cols = columns(ranks, tree);
    let numbers: usize = cols.iter().map(|c| c.width + 2).sum();
    let open_note = |r: &Row| if r.open_calls > 0 { format!("  ({} left open)", r.open_calls) } else { String::new() };
    let label = |depth: usize, r: &Row| (depth, r.path.last().cloned().unwrap_or_default());
    let suffix = shown.iter().map(|(_, r)| open_note(r).len()).max().unwrap_or(0);
    let room = max_line.saturating_sub(numbers + suffix).max(MIN_NAME);
    let width = shown
        .iter()
        .take(max_rows)
        .map(|&(d, r)| {
            let (d, l) = label(d, r);
            2 * d + l.chars().count()
        })
        .max()
        .unwrap_or(6)
        .clamp(6, room);
    let mut out = String::new();
    let view = if tree { "call paths" } else { "regions" };
    if ranks > 1 {
        out.push_str(&format!("scope_profiler summary ({view}; {ranks} ranks: time per rank, mean, min and max over the ranks, imbalance = max/mean)\n"));
    } else {
        out.push_str(&format!("scope_profiler summary ({view})\n"));
    }
    let mut line = format!("{:<width$}", "region");
    for c in &cols {
        line.push_str(&format!("  {:>w$}", c.head, w = c.width));
    }
    out.push_str(line.trim_end());
    out.push('\n');
    for &(depth, r) in shown.iter().take(max_rows) {
        let (d, l) = label(depth, r);
        let indent = (2 * d).min(width / 2);
        let name = format!("{}{}", " ".repeat(indent), shorten(&l, width - indent));
        let mut line = format!("{name:<width$}");
        for c in &cols {
            line.push_str(&format!("  {:>w$}", (c.value)(r, ranks), w = c.width));
        }
        line.push_str(&open_note(r));
        out.push_str(&line);
        out.push('\n');
    }
    if shown.len() > max_rows {
        out.push_str(&format!(
            "... {} more row(s) not shown (SCOPE_PROFILER_SUMMARY_ROWS=all shows them; `sptool {} FILE` too)\n",
            shown.len() - max_rows,
            if tree { "tree" } else { "inspect" }
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
