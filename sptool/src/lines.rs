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
//! The source file names in a profile are untrusted input: a file is opened without blocking,
//! its text shown only if the open descriptor is a regular file outside /proc, /sys and /dev,
//! each file once, read only as far as the last line shown (at most `MAX_SOURCE_BYTES`), and a
//! shown line is clipped. `--source-root DIR` looks for the recorded paths under DIR instead.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fmt::{self, Table};
use crate::h5util::{self, Group};

/// Records and lines per record accepted: far more than a run writes, few enough that a
/// hostile file cannot make us allocate without bound.
const MAX_RECORDS: usize = 1 << 20;
const MAX_LINES: usize = 1 << 20;
/// At most this much of a source file is read for its text.
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
    /// `sampling/handler_replaced`: the program took the sampling signal over.
    pub replaced: Option<String>,
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
        r.replaced = s.attr_string("handler_replaced").filter(|w| !w.is_empty());
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
    /// Where the sources are now (`--source-root`): a recorded path is looked for under each
    /// of these instead of where it was recorded.
    pub source_roots: Vec<PathBuf>,
}

/// The paths under `root` where a recorded `file` may be now, most specific first: the whole
/// recorded path below the root, then with its leading directories taken off one by one
/// (`/build/app/src/k.c` under `/home/me/app`: `.../build/app/src/k.c`, `.../app/src/k.c`,
/// `.../src/k.c`, `.../k.c`). `..` components are never followed out of the root.
fn under_root(root: &Path, file: &str) -> Vec<PathBuf> {
    let parts: Vec<&str> = file.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    if parts.iter().any(|p| *p == "..") {
        return Vec::new();
    }
    (0..parts.len()).map(|skip| parts[skip..].iter().fold(root.to_path_buf(), |p, c| p.join(c))).collect()
}

/// Why a file's text is not shown.
fn refuse_source(file: &std::fs::File) -> Option<&'static str> {
    if safe_file::on_pseudo_fs(file) {
        return Some("a kernel file (/proc, /sys, ...)");
    }
    // The name the descriptor really has: a symlink into /dev or /proc is refused too.
    let real = std::fs::read_link(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(file))).ok()?;
    ["/proc", "/sys", "/dev"].iter().any(|d| real.starts_with(d)).then_some("under /proc, /sys or /dev")
}

/// One source file being read: its lines so far, read only as far as a shown line needs.
struct SourceText {
    lines: Vec<String>,
    reader: Option<std::io::BufReader<std::io::Take<std::fs::File>>>,
}

impl SourceText {
    /// The paths in a profile are untrusted: only a regular file (checked on the descriptor
    /// opened without blocking) outside /proc, /sys and /dev is read, at most
    /// `MAX_SOURCE_BYTES` of it.
    fn open(path: &Path) -> Option<SourceText> {
        let file = safe_file::open_regular(path).ok()?;
        if refuse_source(&file).is_some() {
            return None;
        }
        Some(SourceText { lines: Vec::new(), reader: Some(std::io::BufReader::new(std::io::Read::take(file, MAX_SOURCE_BYTES))) })
    }

    fn line(&mut self, n: usize) -> Option<&str> {
        use std::io::BufRead;
        while self.lines.len() < n {
            let reader = self.reader.as_mut()?;
            let mut buf = Vec::new();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => {
                    self.reader = None;
                    return None;
                }
                Ok(_) => {
                    // Only what is shown is kept of a line.
                    buf.truncate(4 * SOURCE_WIDTH + 4);
                    self.lines.push(String::from_utf8_lossy(&buf).into_owned());
                }
            }
        }
        self.lines.get(n - 1).map(String::as_str)
    }
}

/// Source text of files, each opened once (see [`SourceText::open`]).
#[derive(Default)]
struct Sources {
    roots: Vec<PathBuf>,
    files: HashMap<String, Option<SourceText>>,
}

impl Sources {
    fn new(roots: &[PathBuf]) -> Sources {
        Sources { roots: roots.to_vec(), files: HashMap::new() }
    }

    fn find(&self, file: &str) -> Option<SourceText> {
        if self.roots.is_empty() {
            return SourceText::open(Path::new(file));
        }
        self.roots.iter().flat_map(|r| under_root(r, file)).find_map(|p| SourceText::open(&p))
    }

    fn line(&mut self, file: &str, line: i64) -> Option<String> {
        if line <= 0 || file == "??" || file.is_empty() {
            return None;
        }
        if !self.files.contains_key(file) {
            let found = self.find(file);
            self.files.insert(file.to_string(), found);
        }
        let text = self.files.get_mut(file)?.as_mut()?.line(usize::try_from(line).ok()?)?;
        let text: String = text.trim().chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
        Some(fmt::clip(&text, SOURCE_WIDTH))
    }

    /// How many of the files asked for could not be shown.
    fn missing(&self) -> usize {
        self.files.values().filter(|f| f.is_none()).count()
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
            let rest: i64 = rows.iter().skip(o.top).map(|r| r.1.0).fold(0, i64::saturating_add);
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
    let mut text = format!(
        "sampled at {} Hz of CPU time ({}) on {} thread(s): {ticks} samples, {} outside regions, {} lost\n",
        hz.iter().map(|h| h.to_string()).collect::<Vec<_>>().join("/"),
        mech.join(", "),
        sum(|r| r.threads),
        pct(sum(|r| r.outside), ticks),
        sum(|r| r.lost)
    );
    for r in ranks {
        if let Some(what) = &r.replaced {
            text.push_str(&format!("NOT ALL SAMPLES COUNTED on rank {}: {}\n", r.rank, fmt::clip(&what.replace(|c: char| c.is_control(), " "), 300)));
        }
    }
    text
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
    let mut sources = Sources::new(&o.source_roots);
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
    let missing = sources.missing();
    if o.source && missing > 0 {
        let hint = if o.source_roots.is_empty() { "; --source-root DIR says where the sources are now" } else { " under --source-root" };
        out.push_str(&format!(
            "source text of {missing} file(s) not shown: not found, or not a regular file (only local regular files outside /proc, /sys and /dev are read){hint}\n"
        ));
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
            RankSampling { rank: 0, hz: Some(1000), mechanism: Some("perf task-clock".into()), ticks: Some(10), outside: Some(0), lost: Some(0), threads: Some(1), replaced: None, lines: vec![line("solve", &s, 2, 6), line("solve", &s, 3, 2)] },
            RankSampling { rank: 1, hz: Some(1000), mechanism: Some("perf task-clock".into()), ticks: Some(2), outside: Some(0), lost: Some(0), threads: Some(1), replaced: None, lines: vec![line("solve", &s, 2, 2), line("io", "/nonexistent.c", 9, 2)] },
        ];
        let o = Options { region: None, top: 10, per_rank: false, source: true, source_roots: vec![] };
        let text = render(Path::new("x.h5"), &ranks, &o).unwrap();
        assert!(text.contains("2 ranks pooled, sampled at 1000 Hz of CPU time (perf task-clock) on 2 thread(s): 12 samples"), "{text}");
        assert!(text.contains("solve: 10 samples (83.3% of all)"), "{text}");
        let row = text.lines().find(|l| l.contains("k.c:2")).unwrap();
        assert!(row.contains("80.0%") && row.contains(" 8 ") && row.trim_end().ends_with("x = y * 2;"), "{row}");
        assert!(!text.contains('\u{1b}'), "control characters of the source are not printed");
        let o = Options { region: Some("io".into()), top: 1, per_rank: true, source: false, source_roots: vec![] };
        let text = render(Path::new("x.h5"), &ranks, &o).unwrap();
        assert!(text.contains("Rank 1") && text.contains("io: 2 samples") && !text.contains("solve:"), "{text}");
        let o = Options { region: Some("nope".into()), top: 1, per_rank: false, source: false, source_roots: vec![] };
        assert!(render(Path::new("x.h5"), &ranks, &o).unwrap_err().to_string().contains("regions with samples: io, solve"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn source_text_only_from_regular_local_files() {
        let dir = std::env::temp_dir().join(format!("sptool_lines_src_{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("now/src")).unwrap();
        std::fs::write(dir.join("now/src/k.c"), "one\ntwo\n").unwrap();
        let fifo = std::ffi::CString::new(dir.join("fifo").to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/proc/self/pagemap", dir.join("pagemap.c")).unwrap();
        let mut s = Sources::new(&[]);
        for f in ["/proc/self/pagemap", "/proc/kmsg", "/dev/zero", "/sys/kernel/mm/transparent_hugepage/enabled"] {
            assert_eq!(s.line(f, 1), None, "{f}");
        }
        assert_eq!(s.line(dir.join("fifo").to_str().unwrap(), 1), None);
        assert_eq!(s.line(dir.join("pagemap.c").to_str().unwrap(), 1), None);
        assert_eq!(s.line(dir.to_str().unwrap(), 1), None);
        assert_eq!(s.line(dir.join("now/src/k.c").to_str().unwrap(), 2).as_deref(), Some("two"));
        assert_eq!(s.missing(), 7);
        // Moved sources: the recorded path is found under the root by its tail.
        let mut s = Sources::new(&[dir.join("now")]);
        assert_eq!(s.line("/build/old/src/k.c", 1).as_deref(), Some("one"));
        assert_eq!(s.line("../../etc/passwd", 1), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
