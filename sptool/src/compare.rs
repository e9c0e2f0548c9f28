//! `sptool diff A B` and `sptool check BASE CANDIDATE`: two runs side by side, region by
//! region (pooled over ranks, or rank by rank), from [`model::region_totals`] so that every
//! layout a reader understands compares the same way.
//!
//! `check` compares the mean time per call, not the total: a candidate run that does more or
//! fewer iterations than the base (a shorter CI job, another problem size) then still compares
//! the cost of the same unit of work. The totals are shown next to it.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{Error, Result};
use crate::fmt::{self, Table};
use crate::model::{self, Profile, RegionKey};
use crate::stats::Stats;

/// One region (or region on one rank) of both runs.
pub struct Row {
    pub key: RegionKey,
    pub a: Option<Stats>,
    pub b: Option<Stats>,
}

impl Row {
    fn cost(&self) -> i128 {
        self.a.map_or(0, |s| s.total_ns).max(self.b.map_or(0, |s| s.total_ns))
    }

    /// Relative change of the mean time per call, B against A (0.1 = 10% slower).
    pub fn mean_change(&self) -> Option<f64> {
        let (a, b) = (self.a?.mean_ns()?, self.b?.mean_ns()?);
        (a > 0.0).then(|| b / a - 1.0)
    }

    pub fn total_change(&self) -> Option<f64> {
        let (a, b) = (self.a?.total_ns as f64, self.b?.total_ns as f64);
        (a > 0.0).then(|| b / a - 1.0)
    }
}

/// Both runs' regions matched by name (and rank), costliest (largest total in either run)
/// first, then by name and rank.
pub fn rows(a: &Profile, b: &Profile, by_rank: bool, keep: &dyn Fn(&str) -> bool) -> Vec<Row> {
    let ta = model::region_totals(a, by_rank, |name, _| keep(name));
    let tb = model::region_totals(b, by_rank, |name, _| keep(name));
    let keys: BTreeSet<&RegionKey> = ta.keys().chain(tb.keys()).collect();
    let mut rows: Vec<Row> =
        keys.into_iter().map(|k| Row { key: k.clone(), a: ta.get(k).copied(), b: tb.get(k).copied() }).collect();
    rows.sort_by(|x, y| y.cost().cmp(&x.cost()).then_with(|| x.key.cmp(&y.key)));
    rows
}

fn percent(change: Option<f64>) -> String {
    match change {
        Some(c) if c.is_finite() => format!("{:+.1}%", c * 100.0),
        _ => "-".into(),
    }
}

fn seconds(s: Option<&Stats>, f: impl Fn(&Stats) -> Option<f64>) -> String {
    fmt::seconds(s.and_then(f))
}

fn calls(s: Option<&Stats>) -> String {
    s.map_or("-".into(), |s| s.count.to_string())
}

fn ranks_label(by_rank: bool) -> &'static str {
    if by_rank { "rank by rank" } else { "ranks pooled" }
}

/// The `diff` report.
pub fn render_diff(a: &Profile, b: &Profile, rows: &[Row], by_rank: bool) -> String {
    let mut out = format!("A: {}\nB: {}\nRegions ({}), {}, costliest first; delta and change are B - A\n", a.path.display(), b.path.display(), rows.len(), ranks_label(by_rank));
    if rows.is_empty() {
        out.push_str("  (no region with recorded calls in either file)\n");
        return out;
    }
    let mut header = vec!["region"];
    if by_rank {
        header.push("rank");
    }
    header.extend(["calls A", "calls B", "total A [s]", "total B [s]", "delta [s]", "change", "mean A [s]", "mean B [s]", "mean change"]);
    // A note column only when some region is in one run only.
    if rows.iter().any(|r| r.a.is_none() || r.b.is_none()) {
        header.push("note");
    }
    let note_col = header.len() - 1;
    let mut table = Table::new(header).fit(fmt::line_budget(), &[0]).left_column(note_col);
    for r in rows {
        let mut cells = vec![r.key.0.clone()];
        if by_rank {
            cells.push(r.key.1.map_or("-".into(), |k| k.to_string()));
        }
        let delta = match (r.a, r.b) {
            (Some(a), Some(b)) => fmt::seconds(Some((b.total_ns - a.total_ns) as f64 / 1e9)),
            _ => "-".into(),
        };
        let note = match (r.a, r.b) {
            (None, Some(_)) => "only in B",
            (Some(_), None) => "only in A",
            _ => "",
        };
        cells.extend([
            calls(r.a.as_ref()),
            calls(r.b.as_ref()),
            seconds(r.a.as_ref(), |s| Some(s.total_s())),
            seconds(r.b.as_ref(), |s| Some(s.total_s())),
            delta,
            percent(r.total_change()),
            seconds(r.a.as_ref(), Stats::mean_s),
            seconds(r.b.as_ref(), Stats::mean_s),
            percent(r.mean_change()),
            note.into(),
        ]);
        table.row(cells);
    }
    table.render(&mut out);
    let (ta, tb): (i128, i128) = (rows.iter().filter_map(|r| r.a).map(|s| s.total_ns).sum(), rows.iter().filter_map(|r| r.b).map(|s| s.total_ns).sum());
    out.push_str(&format!(
        "  Sum of region totals: A {} s, B {} s ({}); nested regions are counted in each.\n",
        fmt::g(ta as f64 / 1e9, 6, false),
        fmt::g(tb as f64 / 1e9, 6, false),
        percent((ta > 0).then(|| tb as f64 / ta as f64 - 1.0)),
    ));
    out
}

/// `--max-slowdown` values: a default and per-region limits, as fractions (0.1 = 10%).
#[derive(Debug, Clone)]
pub struct Limits {
    pub default: f64,
    pub per_region: BTreeMap<String, f64>,
}

pub const DEFAULT_MAX_SLOWDOWN: f64 = 0.10;

fn parse_percent(text: &str) -> Option<f64> {
    let t = text.trim();
    let t = t.strip_suffix('%').unwrap_or(t).trim();
    t.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0).map(|v| v / 100.0)
}

impl Limits {
    /// Parse `10%` (the default for every region) and `NAME=5%` (one region), repeatable.
    pub fn parse(specs: &[String]) -> Result<Limits> {
        let mut limits = Limits { default: DEFAULT_MAX_SLOWDOWN, per_region: BTreeMap::new() };
        for spec in specs {
            let bad = || Error::new(format!("--max-slowdown {spec:?}: expected a percentage like 10% or REGION=5%"));
            match spec.rsplit_once('=') {
                Some((name, value)) if !name.is_empty() => {
                    limits.per_region.insert(name.to_string(), parse_percent(value).ok_or_else(bad)?);
                }
                Some(_) => return Err(bad()),
                None => limits.default = parse_percent(spec).ok_or_else(bad)?,
            }
        }
        Ok(limits)
    }

    pub fn of(&self, region: &str) -> f64 {
        self.per_region.get(region).copied().unwrap_or(self.default)
    }
}

/// What `check` decided about one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Faster,
    Slower,
    /// In the base run, not in the candidate.
    Missing,
    /// In the candidate only.
    New,
    /// The base total is below --min-time.
    Ignored,
}

impl Verdict {
    fn label(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Faster => "faster",
            Verdict::Slower => "SLOWER",
            Verdict::Missing => "MISSING",
            Verdict::New => "new",
            Verdict::Ignored => "ignored",
        }
    }
}

pub struct CheckOptions {
    pub limits: Limits,
    pub by_rank: bool,
    /// Regions whose base total is below this many seconds are not judged.
    pub min_time: f64,
    /// A region of the base run that the candidate did not record fails the check.
    pub fail_missing: bool,
}

pub fn verdict(row: &Row, options: &CheckOptions) -> Verdict {
    match (row.a, row.b) {
        (Some(_), None) => Verdict::Missing,
        (None, _) => Verdict::New,
        (Some(a), Some(_)) if a.total_s() < options.min_time => Verdict::Ignored,
        _ => {
            // A change of exactly the limit is allowed (with room for rounding: 1100/1000 - 1
            // is a hair above 0.1 in floating point).
            let limit = options.limits.of(&row.key.0) + 1e-9;
            match row.mean_change() {
                Some(c) if c > limit => Verdict::Slower,
                Some(c) if c < -limit => Verdict::Faster,
                _ => Verdict::Ok,
            }
        }
    }
}

/// The `check` report and whether it passed.
pub fn render_check(base: &Profile, candidate: &Profile, rows: &[Row], options: &CheckOptions) -> (String, bool) {
    let mut out = format!(
        "sptool check: mean time per call of each region, {}\n  base:      {}\n  candidate: {}\n",
        ranks_label(options.by_rank),
        base.path.display(),
        candidate.path.display()
    );
    let mut header = vec!["region"];
    if options.by_rank {
        header.push("rank");
    }
    header.extend(["calls base", "calls cand.", "mean base [s]", "mean cand. [s]", "change", "limit", "total base [s]", "total cand. [s]", "status"]);
    let status_col = header.len() - 1;
    let mut table = Table::new(header).fit(fmt::line_budget(), &[0]).left_column(status_col);
    let mut failed = Vec::new();
    let mut missing = Vec::new();
    for r in rows {
        let v = verdict(r, options);
        let limit = options.limits.of(&r.key.0);
        let mut cells = vec![r.key.0.clone()];
        if options.by_rank {
            cells.push(r.key.1.map_or("-".into(), |k| k.to_string()));
        }
        cells.extend([
            calls(r.a.as_ref()),
            calls(r.b.as_ref()),
            seconds(r.a.as_ref(), Stats::mean_s),
            seconds(r.b.as_ref(), Stats::mean_s),
            percent(r.mean_change()),
            format!("{}%", fmt::g(limit * 100.0, 6, false)),
            seconds(r.a.as_ref(), |s| Some(s.total_s())),
            seconds(r.b.as_ref(), |s| Some(s.total_s())),
            v.label().into(),
        ]);
        table.row(cells);
        let label = || {
            let name = fmt::shorten(&r.key.0, 60);
            match r.key.1 {
                Some(k) => format!("{name} on rank {k}"),
                None => name,
            }
        };
        match v {
            Verdict::Slower => failed.push(format!("{} ({} > {}%)", label(), percent(r.mean_change()), fmt::g(limit * 100.0, 6, false))),
            Verdict::Missing => missing.push(label()),
            _ => {}
        }
    }
    if rows.is_empty() {
        out.push_str("  (no region with recorded calls in either file)\n");
    } else {
        table.render(&mut out);
    }
    if options.min_time > 0.0 {
        out.push_str(&format!("  Regions below --min-time {} s in the base run are not judged.\n", fmt::g(options.min_time, 6, false)));
    }
    if !missing.is_empty() {
        let verb = if options.fail_missing { "fails the check (--fail-missing)" } else { "not judged" };
        out.push_str(&format!("  Not recorded in the candidate ({verb}): {}\n", missing.join(", ")));
    }
    let passed = failed.is_empty() && (missing.is_empty() || !options.fail_missing);
    let judged = rows.iter().filter(|r| r.a.is_some() && r.b.is_some()).count();
    if passed {
        out.push_str(&format!("PASSED: no region got slower than allowed ({judged} compared)\n"));
    } else {
        let mut why = Vec::new();
        if !failed.is_empty() {
            why.push(format!("{} of {judged} region(s) got slower than allowed: {}", failed.len(), failed.join(", ")));
        }
        if options.fail_missing && !missing.is_empty() {
            why.push(format!("{} region(s) missing in the candidate", missing.len()));
        }
        out.push_str(&format!("FAILED: {}\n", why.join("; ")));
    }
    (out, passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(calls: u64, total: i64) -> Stats {
        Stats::from_aggregate(calls, total, 1, total)
    }

    #[test]
    fn limits_parse() {
        let l = Limits::parse(&["5%".into(), "solve=20%".into(), "a=b=1".into()]).unwrap();
        assert_eq!(l.default, 0.05);
        assert_eq!(l.of("solve"), 0.2);
        assert_eq!(l.of("a=b"), 0.01);
        assert_eq!(Limits::parse(&[]).unwrap().default, DEFAULT_MAX_SLOWDOWN);
        assert!(Limits::parse(&["fast".into()]).is_err());
        assert!(Limits::parse(&["=5%".into()]).is_err());
        assert!(Limits::parse(&["-5%".into()]).is_err());
    }

    #[test]
    fn verdicts_use_the_mean_per_call() {
        let options = CheckOptions { limits: Limits::parse(&[]).unwrap(), by_rank: false, min_time: 0.0, fail_missing: false };
        let row = |a: Option<Stats>, b: Option<Stats>| Row { key: ("r".into(), None), a, b };
        // Twice the calls, twice the total: the same cost per call.
        assert_eq!(verdict(&row(Some(stats(10, 1000)), Some(stats(20, 2000))), &options), Verdict::Ok);
        assert_eq!(verdict(&row(Some(stats(10, 1000)), Some(stats(10, 1101))), &options), Verdict::Slower);
        assert_eq!(verdict(&row(Some(stats(10, 1000)), Some(stats(10, 1100))), &options), Verdict::Ok);
        assert_eq!(verdict(&row(Some(stats(10, 1000)), Some(stats(10, 800))), &options), Verdict::Faster);
        assert_eq!(verdict(&row(Some(stats(10, 1000)), None), &options), Verdict::Missing);
        assert_eq!(verdict(&row(None, Some(stats(1, 1))), &options), Verdict::New);
    }
}
