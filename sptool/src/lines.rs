//! `sptool lines FILE`: the hottest source lines of each region, from the sampler's
//! `rank<N>/line_profile/<i>` records (one per region, function and source file, as the
//! Python package stores line-profiler records) and its `rank<N>/sampling` attributes. Per
//! region: its samples, then its lines by samples with their share of the region's samples,
//! the CPU time they stand for, the function, and the line's source text when the file is a
//! readable regular file. The ranks are pooled (lines of the same region, file, line and
//! function added up) or shown one by one (`--per-rank`).
//!
//! Every record is checked before use: the three datasets of one length, counts not negative,
//! a bounded number of records and lines; a bad record is an error naming it, never a panic.
//! Source files are opened only when they are regular files of at most `MAX_SOURCE_BYTES`,
//! each once, and a shown line is clipped.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::error::{Error, Result};
use crate::fmt::{self, Table};
use crate::h5util::{self, Group};

/// Records and lines per record accepted: far more than a run writes, few enough that a
/// hostile file cannot make us allocate without bound.
const MAX_RECORDS: usize = 1 << 20;
const MAX_LINES: usize = 1 << 20;
/// Source files larger than this are not read for their text.
const MAX_SOURCE_BYTES: u64 = 16 << 20;
/// Characters of source text shown per line.
const SOURCE_WIDTH: usize = 100;
/// The region of the samples outside every region (and the attribute that marks them).
const OUTSIDE_REGIONS: &str = "(outside regions)";

/// One line of one record.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub region: String,
    pub outside: bool,
    pub file: String,
    pub function: String,
    pub line: i64,
    pub samples: i64,
    /// Seconds of CPU time.
    pub seconds: f64,
}

/// What the sampler says about one rank.
#[derive(Debug, Clone, Default)]
pub struct RankSampling {
    pub rank: u32,
    pub hz: Option<i64>,
    pub mechanism: Option<String>,
    pub ticks: Option<i64>,
    pub outside: Option<i64>,
    pub lost: Option<i64>,
    pub threads: Option<i64>,
    pub lines: Vec<Line>,
}

fn read_record(g: &Group) -> Result<Vec<Line>> {
    let path = g.path().to_string();
    let region = g.attr_string("region").unwrap_or_default();
    let outside = g.attr_i64("outside_regions") == Some(1);
    let file = g.attr_string("filename").unwrap_or_else(|| "??".into());
    let function = g.attr_string("function").unwrap_or_else(|| "??".into());
    let unit = g.attr_f64("unit").filter(|u| u.is_finite() && *u > 0.0).unwrap_or(1.0);
    let lines = g.read_i64("line_numbers")?;
    if lines.len() > MAX_LINES {
        return Err(Error::new(format!("{path}/line_numbers has {} lines, more than {MAX_LINES}", lines.len())));
    }
    let hits = g.read_i64("hits")?;
    let times = g.read_f64("times")?;
    if hits.len() != lines.len() || times.len() != lines.len() {
        return Err(Error::new(format!(
            "{path}: line_numbers, hits and times differ in length ({}, {}, {})",
            lines.len(),
            hits.len(),
            times.len()
        )));
    }
    if hits.iter().any(|&h| h < 0) {
        return Err(Error::new(format!("{path}/hits holds a negative count")));
    }
    Ok(lines
        .into_iter()
        .zip(hits)
        .zip(times)
        .map(|((line, samples), t)| Line {
            region: region.clone(),
            outside,
            file: file.clone(),
            function: function.clone(),
            line,
            samples,
            seconds: if t.is_finite() && t >= 0.0 { t * unit } else { 0.0 },
        })
        .collect())
}

fn read_rank(rank: u32, g: &Group) -> Result<RankSampling> {
    let mut r = RankSampling { rank, ..Default::default() };
    if g.has("sampling") {
        let s = g.group("sampling")?;
        r.hz = s.attr_i64("hz");
        r.mechanism = s.attr_string("mechanism");
        r.ticks = s.attr_i64("ticks").filter(|&v| v >= 0);
        r.outside = s.attr_i64("outside_samples").filter(|&v| v >= 0);
        r.lost = s.attr_i64("lost_samples").filter(|&v| v >= 0);
        r.threads = s.attr_i64("threads").filter(|&v| v >= 0);
    }
    if g.has("line_profile") {
        let lp = g.group("line_profile")?;
        let members = lp.subgroups()?;
        if members.len() > MAX_RECORDS {
            return Err(Error::new(format!("{} has {} records, more than {MAX_RECORDS}", lp.path(), members.len())));
        }
        for m in &members {
            let rec = lp.member(m)?;
            r.lines.extend(read_record(&rec)?);
        }
    }
    Ok(r)
}

/// Every rank with samples (a `sampling` group or `line_profile` records) in the file.
pub fn read(path: &Path) -> Result<Vec<RankSampling>> {
    let (file, _) = h5util::open(path)?;
    let mut out = Vec::new();
    for member in file.subgroups().map_err(|e| e.or_file(path))? {
        let name = &member.name;
        let Some(rank) = name.strip_prefix("rank").and_then(|d| d.parse::<u32>().ok()).filter(|n| *name == format!("rank{n}")) else { continue };
        let g = file.member(&member).map_err(|e| e.or_file(path))?;
        if g.has("sampling") || g.has("line_profile") {
            out.push(read_rank(rank, &g).map_err(|e| e.or_file(path))?);
        }
    }
    out.sort_by_key(|r| r.rank);
    Ok(out)
}

pub struct Options {
    pub region: Option<String>,
    pub top: usize,
    pub per_rank: bool,
    pub source: bool,
}

/// Source text of files, each read once (regular files of bounded size only).
#[derive(Default)]
struct Sources {
    files: HashMap<String, Option<Vec<String>>>,
}

impl Sources {
    fn line(&mut self, file: &str, line: i64) -> Option<String> {
        if line <= 0 || file == "??" {
            return None;
        }
        let lines = self.files.entry(file.to_string()).or_insert_with(|| {
            let meta = std::fs::metadata(file).ok()?;
            if !meta.is_file() || meta.len() > MAX_SOURCE_BYTES {
                return None;
            }
            let bytes = std::fs::read(file).ok()?;
            if bytes.len() as u64 > MAX_SOURCE_BYTES {
                return None;
            }
            Some(String::from_utf8_lossy(&bytes).lines().map(str::to_string).collect())
        });
        let text = lines.as_ref()?.get(usize::try_from(line - 1).ok()?)?;
        let text: String = text.trim().chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        Some(fmt::clip(&text, SOURCE_WIDTH))
    }
}

fn pct(part: i64, whole: i64) -> String {
    if whole > 0 { format!("{:.1}%", 100.0 * part as f64 / whole as f64) } else { "-".into() }
}

fn short_file(file: &str) -> &str {
    file.rsplit('/').next().unwrap_or(file)
}

/// The tables of one set of lines (one rank, or the pooled ranks).
fn render_lines(out: &mut String, lines: &[Line], o: &Options, sources: &mut Sources) {
    // (region, outside) -> (file, line, function) -> (samples, seconds)
    let mut regions: BTreeMap<(bool, String), BTreeMap<(String, i64, String), (i64, f64)>> = BTreeMap::new();
    for l in lines {
        let e = regions.entry((l.outside, l.region.clone())).or_default().entry((l.file.clone(), l.line, l.function.clone())).or_insert((0, 0.0));
        e.0 = e.0.saturating_add(l.samples);
        e.1 += l.seconds;
    }
    let all: i64 = regions.values().flat_map(|r| r.values()).map(|v| v.0).fold(0, i64::saturating_add);
    let mut order: Vec<((bool, String), i64, f64)> = regions
        .iter()
        .map(|(k, v)| (k.clone(), v.values().map(|x| x.0).fold(0, i64::saturating_add), v.values().map(|x| x.1).sum()))
        .collect();
    // Hottest region first; the samples outside every region last.
    order.sort_by(|a, b| a.0.0.cmp(&b.0.0).then(b.1.cmp(&a.1)).then(a.0.1.cmp(&b.0.1)));
    for ((outside, name), total, seconds) in order {
        let label = if outside { OUTSIDE_REGIONS.to_string() } else { name.clone() };
        out.push_str(&format!("{label}: {total} samples ({} of all), {} s of CPU time\n", pct(total, all), fmt::g(seconds, 4, false)));
        let mut rows: Vec<(&(String, i64, String), &(i64, f64))> = regions[&(outside, name)].iter().collect();
        rows.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(b.0)));
        let mut header = vec!["share", "samples", "time [s]", "line", "function"];
        if o.source {
            header.push("source");
        }
        let mut t = Table::new(header).left_column(3).left_column(4).left_column(5).fit(fmt::line_budget(), &[5, 4, 3]);
        for ((file, line, function), (samples, secs)) in rows.iter().take(o.top) {
            let mut cells = vec![pct(*samples, total), samples.to_string(), fmt::g(*secs, 4, false), format!("{}:{line}", short_file(file)), function.clone()];
            if o.source {
                cells.push(sources.line(file, *line).unwrap_or_default());
            }
            t.row(cells);
        }
        t.render(out);
        if rows.len() > o.top {
            let rest: i64 = rows.iter().skip(o.top).map(|r| r.1.0).sum();
            out.push_str(&format!("  ... {} more line(s), {} of the region's samples (--top)\n", rows.len() - o.top, pct(rest, total)));
        }
        out.push('\n');
    }
}

fn describe(ranks: &[&RankSampling]) -> String {
    let sum = |f: fn(&RankSampling) -> Option<i64>| ranks.iter().filter_map(|r| f(r)).fold(0i64, i64::saturating_add);
    let mut hz: Vec<i64> = ranks.iter().filter_map(|r| r.hz).collect();
    hz.dedup();
    let mut mech: Vec<String> = ranks.iter().filter_map(|r| r.mechanism.clone()).collect();
    mech.sort();
    mech.dedup();
    if hz.is_empty() {
        return String::new();
    }
    let ticks = sum(|r| r.ticks);
    format!(
        "sampled at {} Hz of CPU time ({}) on {} thread(s): {ticks} samples, {} outside regions, {} lost\n",
        hz.iter().map(|h| h.to_string()).collect::<Vec<_>>().join("/"),
        mech.join(", "),
        sum(|r| r.threads),
        pct(sum(|r| r.outside), ticks),
        sum(|r| r.lost)
    )
}

/// The report.
pub fn render(path: &Path, ranks: &[RankSampling], o: &Options) -> Result<String> {
    let keep = |l: &Line| o.region.as_ref().is_none_or(|r| &l.region == r);
    if let Some(name) = &o.region {
        if !ranks.iter().flat_map(|r| &r.lines).any(|l| &l.region == name) {
            let mut names: Vec<&str> = ranks.iter().flat_map(|r| &r.lines).map(|l| l.region.as_str()).collect();
            names.sort();
            names.dedup();
            return Err(Error::in_file(path, format!("no samples in region {name:?}; regions with samples: {}", names.join(", "))));
        }
    }
    let mut sources = Sources::default();
    let mut out = format!("Lines: {}\n", path.display());
    if o.per_rank {
        for r in ranks {
            out.push_str(&format!("\nRank {}: {}", r.rank, describe(&[r])));
            out.push('\n');
            let lines: Vec<Line> = r.lines.iter().filter(|l| keep(l)).cloned().collect();
            render_lines(&mut out, &lines, o, &mut sources);
        }
    } else {
        let all: Vec<&RankSampling> = ranks.iter().collect();
        let which = if ranks.len() == 1 { format!("rank {}", ranks[0].rank) } else { format!("{} ranks pooled", ranks.len()) };
        out.push_str(&format!("{which}, {}\n", describe(&all).trim_end()));
        out.push('\n');
        let lines: Vec<Line> = ranks.iter().flat_map(|r| &r.lines).filter(|l| keep(l)).cloned().collect();
        render_lines(&mut out, &lines, o, &mut sources);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(region: &str, file: &str, l: i64, n: i64) -> Line {
        Line { region: region.into(), outside: false, file: file.into(), function: "f".into(), line: l, samples: n, seconds: n as f64 * 1e-3 }
    }

    #[test]
    fn pooled_and_per_rank() {
        let dir = std::env::temp_dir().join(format!("sptool_lines_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("k.c");
        std::fs::write(&src, "int a;\n  x = y * 2;   \n\u{1b}[31mred\n").unwrap();
        let s = src.to_string_lossy().into_owned();
        let ranks = vec![
            RankSampling { rank: 0, hz: Some(1000), mechanism: Some("perf task-clock".into()), ticks: Some(10), outside: Some(0), lost: Some(0), threads: Some(1), lines: vec![line("solve", &s, 2, 6), line("solve", &s, 3, 2)] },
            RankSampling { rank: 1, hz: Some(1000), mechanism: Some("perf task-clock".into()), ticks: Some(2), outside: Some(0), lost: Some(0), threads: Some(1), lines: vec![line("solve", &s, 2, 2), line("io", "/nonexistent.c", 9, 2)] },
        ];
        let o = Options { region: None, top: 10, per_rank: false, source: true };
        let text = render(Path::new("x.h5"), &ranks, &o).unwrap();
        assert!(text.contains("2 ranks pooled, sampled at 1000 Hz of CPU time (perf task-clock) on 2 thread(s): 12 samples"), "{text}");
        assert!(text.contains("solve: 10 samples (83.3% of all)"), "{text}");
        let row = text.lines().find(|l| l.contains("k.c:2")).unwrap();
        assert!(row.contains("80.0%") && row.contains(" 8 ") && row.trim_end().ends_with("x = y * 2;"), "{row}");
        assert!(!text.contains('\u{1b}'), "control characters of the source are not printed");
        let o = Options { region: Some("io".into()), top: 1, per_rank: true, source: false };
        let text = render(Path::new("x.h5"), &ranks, &o).unwrap();
        assert!(text.contains("Rank 1") && text.contains("io: 2 samples") && !text.contains("solve:"), "{text}");
        let o = Options { region: Some("nope".into()), top: 1, per_rank: false, source: false };
        assert!(render(Path::new("x.h5"), &ranks, &o).unwrap_err().to_string().contains("regions with samples: io, solve"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
