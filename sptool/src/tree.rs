//! `sptool tree FILE`: the regions as a tree by their nesting (the call paths the library
//! stores as `rank<N>/call_paths/` in the regions layout and as the file-wide `call_paths/`
//! table in the columnar and aggregate layouts, docs/layouts.md): per path the calls, inclusive and
//! exclusive time and its share of the wall time, pooled over threads, over the ranks as the
//! mean per rank with the smallest and largest rank and the imbalance (or one rank with
//! `--rank`); `--min-share` hides the small paths.
//!
//! Every table is checked before use: columns of different lengths, a parent that is not an
//! earlier row, a region index outside the names, negative counts or times make the rank's
//! data an error naming the dataset, never a panic.

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::fmt::{self, Table};
use crate::h5util::{self, Group};

/// Rows accepted per rank: far more paths than a program has, few enough that a hostile file
/// cannot make us allocate without bound.
const MAX_ROWS: usize = 1 << 20;
/// Deepest path accepted (the library's nesting limit).
const MAX_DEPTH: usize = 4096;

/// One rank's call paths, pooled over its threads: path (region names from the top) ->
/// (calls, inclusive ns, exclusive ns).
#[derive(Debug, Clone, Default)]
pub struct RankPaths {
    pub rank: u32,
    pub wall_ns: i64,
    pub paths: Vec<(Vec<String>, [i64; 3])>,
    /// The same per thread (`--threads`): thread id -> its paths.
    pub threads: Vec<(i64, Vec<(Vec<String>, [i64; 3])>)>,
}

fn column(g: &Group, name: &str, rows: &mut Option<usize>) -> Result<Vec<i64>> {
    let v = g.read_i64(name)?;
    if v.len() > MAX_ROWS {
        return Err(Error::new(format!("{}/{name} has {} rows, more than {MAX_ROWS}", g.path(), v.len())));
    }
    match *rows {
        Some(n) if n != v.len() => {
            Err(Error::new(format!("{}/{name} has {} rows where the table's other columns have {n}", g.path(), v.len())))
        }
        _ => {
            *rows = Some(v.len());
            Ok(v)
        }
    }
}

fn read_rank(rank: u32, g: &Group) -> Result<RankPaths> {
    let names = g.read_strings("names")?;
    if names.len() > MAX_ROWS {
        return Err(Error::new(format!("{}/names has more than {MAX_ROWS} names", g.path())));
    }
    let mut rows = None;
    let parent = column(g, "parent", &mut rows)?;
    let region = column(g, "region", &mut rows)?;
    let calls = column(g, "calls", &mut rows)?;
    let incl = column(g, "inclusive_ns", &mut rows)?;
    let excl = column(g, "exclusive_ns", &mut rows)?;
    let thread = column(g, "thread", &mut rows)?;
    let wall_ns = g.attr_i64("wall_ns").unwrap_or(0).max(0);
    let rows: Vec<usize> = (0..rows.unwrap_or(0)).collect();
    pool(rank, wall_ns, &names, &Cols { parent, region, calls, incl, excl, thread }, &rows, &g.path())
}

/// The columns of a call path table.
struct Cols {
    parent: Vec<i64>,
    region: Vec<i64>,
    calls: Vec<i64>,
    incl: Vec<i64>,
    excl: Vec<i64>,
    thread: Vec<i64>,
}

/// One rank's rows (`rows`, in order, indices into `c`; parents count from the rank's first
/// row), pooled over threads.
fn pool(rank: u32, wall_ns: i64, names: &[String], c: &Cols, rows: &[usize], table: &str) -> Result<RankPaths> {
    let n = rows.len();
    if n > MAX_ROWS {
        return Err(Error::new(format!("{table} has {n} rows of rank {rank}, more than {MAX_ROWS}")));
    }
    let bad = |what: &str, i: usize| Error::new(format!("{table}: row {}: {what}", rows[i]));
    let (parent, region, calls, incl, excl) = (
        |i: usize| c.parent[rows[i]],
        |i: usize| c.region[rows[i]],
        |i: usize| c.calls[rows[i]],
        |i: usize| c.incl[rows[i]],
        |i: usize| c.excl[rows[i]],
    );
    // Each row's path as an index into `keys`, its depth bounded.
    let mut path_of: Vec<usize> = Vec::with_capacity(n);
    let mut depth: Vec<usize> = Vec::with_capacity(n);
    let mut keys: Vec<Vec<String>> = Vec::new();
    let mut index: HashMap<Vec<String>, usize> = HashMap::new();
    let mut totals: Vec<[i64; 3]> = Vec::new();
    // (thread, path index) -> totals.
    let mut per_thread: std::collections::BTreeMap<(i64, usize), [i64; 3]> = Default::default();
    for i in 0..n {
        if !(-1..i as i64).contains(&parent(i)) {
            return Err(bad("parent is not an earlier row", i));
        }
        let name = usize::try_from(region(i)).ok().and_then(|r| names.get(r)).ok_or_else(|| bad("region outside names", i))?;
        if calls(i) < 0 || incl(i) < 0 || excl(i) < 0 {
            return Err(bad("negative count or time", i));
        }
        let (mut key, d) = if parent(i) < 0 {
            (Vec::new(), 1)
        } else {
            let p = parent(i) as usize;
            (keys[path_of[p]].clone(), depth[p] + 1)
        };
        if d > MAX_DEPTH {
            return Err(bad("path deeper than any program nests", i));
        }
        key.push(name.clone());
        let k = *index.entry(key.clone()).or_insert_with(|| {
            keys.push(key);
            totals.push([0; 3]);
            keys.len() - 1
        });
        for (t, v) in totals[k].iter_mut().zip([calls(i), incl(i), excl(i)]) {
            *t = t.saturating_add(v);
        }
        for (t, v) in per_thread.entry((c.thread[rows[i]], k)).or_default().iter_mut().zip([calls(i), incl(i), excl(i)]) {
            *t = t.saturating_add(v);
        }
        path_of.push(k);
        depth.push(d);
    }
    let mut threads: Vec<(i64, Vec<(Vec<String>, [i64; 3])>)> = Vec::new();
    for ((t, k), v) in per_thread {
        if threads.last().is_none_or(|l| l.0 != t) {
            threads.push((t, Vec::new()));
        }
        threads.last_mut().expect("pushed above").1.push((keys[k].clone(), v));
    }
    Ok(RankPaths { rank, wall_ns, paths: keys.into_iter().zip(totals).collect(), threads })
}

/// The columnar and aggregate layouts' `call_paths/` table: a row per (rank, thread, path),
/// `regions` into `region_table/names`, `parents` among the same rank's rows; the ranks' wall
/// times in the rank table's `call_paths_wall_ns`.
fn read_table(file: &Group) -> Result<Vec<RankPaths>> {
    let g = file.group("call_paths")?;
    let names = file.group("region_table")?.read_strings("names")?;
    let ranks = g.read_i64("ranks")?;
    let mut rows = Some(ranks.len());
    let c = Cols {
        parent: column_any(&g, "parents", &mut rows)?,
        region: column_any(&g, "regions", &mut rows)?,
        calls: column_any(&g, "calls", &mut rows)?,
        incl: column_any(&g, "inclusive_ns", &mut rows)?,
        excl: column_any(&g, "exclusive_ns", &mut rows)?,
        thread: column_any(&g, "threads", &mut rows)?,
    };
    // The wall times, by rank.
    let mut wall: HashMap<i64, i64> = HashMap::new();
    if file.has("scope_profiler_ranks") {
        let t = file.group("scope_profiler_ranks")?;
        if t.has("call_paths_wall_ns") {
            let (r, w) = (t.read_i64("ranks")?, t.read_i64("call_paths_wall_ns")?);
            if r.len() != w.len() {
                return Err(Error::new(format!("{}/call_paths_wall_ns has {} rows for {} ranks", t.path(), w.len(), r.len())));
            }
            wall.extend(r.into_iter().zip(w.into_iter().map(|w| w.max(0))));
        }
    }
    let mut by_rank: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
    for (i, &r) in ranks.iter().enumerate() {
        let r = u32::try_from(r).ok().filter(|&r| r <= i32::MAX as u32).ok_or_else(|| Error::new(format!("{}/ranks: row {i}: rank {r} is no MPI rank", g.path())))?;
        by_rank.entry(r).or_default().push(i);
    }
    let table = g.path();
    by_rank.into_iter().map(|(r, rows)| pool(r, wall.get(&(r as i64)).copied().unwrap_or(0), &names, &c, &rows, &table)).collect()
}

/// A column of the table, its length the same as the others' (any number of rows).
fn column_any(g: &Group, name: &str, rows: &mut Option<usize>) -> Result<Vec<i64>> {
    let v = g.read_i64(name)?;
    match *rows {
        Some(n) if n != v.len() => Err(Error::new(format!("{}/{name} has {} rows where the table's other columns have {n}", g.path(), v.len()))),
        _ => {
            *rows = Some(v.len());
            Ok(v)
        }
    }
}

/// Every rank's call paths in the file at `path` (empty when it holds none).
pub fn read(path: &Path) -> Result<Vec<RankPaths>> {
    let (file, _) = h5util::open(path)?;
    let mut out = if file.has("call_paths") { read_table(&file).map_err(|e| e.or_file(path))? } else { Vec::new() };
    for member in file.subgroups().map_err(|e| e.or_file(path))? {
        let name = &member.name;
        let Some(rank) = name.strip_prefix("rank").and_then(|d| d.parse::<u32>().ok()).filter(|n| *name == format!("rank{n}")) else { continue };
        let g = file.member(&member).map_err(|e| e.or_file(path))?;
        if g.has("call_paths") && !out.iter().any(|r| r.rank == rank) {
            let c = g.group("call_paths").map_err(|e| e.or_file(path))?;
            out.push(read_rank(rank, &c).map_err(|e| e.or_file(path))?);
        }
    }
    out.sort_by_key(|m| m.rank);
    Ok(out)
}

pub struct Options {
    /// Only this rank (None: every rank, as the mean per rank with min and max).
    pub rank: Option<u32>,
    /// Hide paths below this share (0..1) of the reference time, with their subtrees.
    pub min_share: f64,
    /// Threads apart (`--threads`): min, mean and max over the threads, and the thread of the max.
    pub threads: bool,
}

/// `--min-share`: "1%", "0.5 %" or "1" (percent).
pub fn parse_share(text: &str) -> Result<f64> {
    let t = text.trim();
    let number = t.strip_suffix('%').unwrap_or(t).trim();
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=100.0).contains(&v) => Ok(v / 100.0),
        _ => Err(Error::new(format!("--min-share {text:?}: expected a percentage between 0 and 100, e.g. 1%"))),
    }
}

/// One path over the selected ranks.
struct Row {
    path: Vec<String>,
    calls: i64,
    incl_sum: i64,
    incl_min: i64,
    incl_max: i64,
    /// The unit (rank, or thread) of the max.
    max_at: usize,
    /// Units (ranks, or threads) in which the path occurs.
    units: usize,
    excl_sum: i64,
    /// The path's share of each rank's wall time, summed over the ranks.
    share_sum: f64,
}

/// A duration with a unit that keeps it readable, as the library's summary prints it.
fn s(ns: f64) -> String {
    scope_profiler::summary::format_duration(ns)
}

/// What the statistics are taken over: a rank, or with `--threads` a thread of a rank.
struct Unit<'a> {
    rank: u32,
    thread: Option<i64>,
    wall_ns: i64,
    paths: &'a [(Vec<String>, [i64; 3])],
}

impl Unit<'_> {
    fn label(&self, ranks: usize) -> String {
        match self.thread {
            Some(t) if ranks > 1 => format!("{}.{t}", self.rank),
            Some(t) => t.to_string(),
            None => self.rank.to_string(),
        }
    }
}

pub fn render(file: &Path, ranks: &[RankPaths], options: &Options) -> Result<String> {
    let selected: Vec<&RankPaths> = ranks.iter().filter(|r| options.rank.is_none_or(|k| r.rank == k)).collect();
    if selected.is_empty() {
        return Err(match options.rank {
            Some(k) => Error::in_file(file, format!("rank {k} has no call paths (rank{k}/call_paths)")),
            None => Error::in_file(file, "holds no call paths (call_paths/ or rank<N>/call_paths/): it was written by another writer or an older scope_profiler"),
        });
    }
    let units: Vec<Unit> = if options.threads {
        selected
            .iter()
            .flat_map(|r| r.threads.iter().map(|(t, paths)| Unit { rank: r.rank, thread: Some(*t), wall_ns: r.wall_ns, paths }))
            .collect()
    } else {
        selected.iter().map(|r| Unit { rank: r.rank, thread: None, wall_ns: r.wall_ns, paths: &r.paths }).collect()
    };
    let n_ranks = selected.len();
    let n = units.len().max(1);
    let mut index: HashMap<&[String], usize> = HashMap::new();
    let mut rows: Vec<Row> = Vec::new();
    for (u, r) in units.iter().enumerate() {
        for (path, [calls, incl, excl]) in r.paths {
            let i = *index.entry(path.as_slice()).or_insert_with(|| {
                rows.push(Row { path: path.clone(), calls: 0, incl_sum: 0, incl_min: i64::MAX, incl_max: -1, max_at: u, excl_sum: 0, share_sum: 0.0, units: 0 });
                rows.len() - 1
            });
            let row = &mut rows[i];
            row.calls = row.calls.saturating_add(*calls);
            row.incl_sum = row.incl_sum.saturating_add(*incl);
            row.excl_sum = row.excl_sum.saturating_add(*excl);
            row.incl_min = row.incl_min.min(*incl);
            row.units += 1;
            if r.wall_ns > 0 {
                row.share_sum += *incl as f64 / r.wall_ns as f64;
            }
            if *incl > row.incl_max {
                row.incl_max = *incl;
                row.max_at = u;
            }
        }
    }
    // A rank (thread) without a path took 0 time in it.
    for row in &mut rows {
        if row.units < n {
            row.incl_min = 0;
        }
    }
    // The shares: of each rank's wall time, averaged over the ranks; without the wall times
    // (another writer, a recovered run), of the time of the top-level paths.
    let all_walls = units.iter().all(|r| r.wall_ns > 0);
    let top: i64 = rows.iter().filter(|r| r.path.len() == 1).map(|r| r.incl_sum).fold(0, i64::saturating_add);
    let of = if all_walls { "wall time" } else { "top-level time" };
    let known = all_walls || top > 0;
    let share = |r: &Row| match (all_walls, top > 0) {
        (true, _) => r.share_sum / n as f64,
        (false, true) => r.incl_sum as f64 / top as f64,
        _ => 0.0,
    };

    // Depth first, the costliest child first.
    let mut children: HashMap<&[String], Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let parent = &r.path[..r.path.len() - 1];
        if r.path.len() > 1 && index.contains_key(parent) {
            children.entry(parent).or_default().push(i);
        } else {
            roots.push(i);
        }
    }
    let cost = |a: &usize, b: &usize| rows[*b].incl_sum.cmp(&rows[*a].incl_sum).then_with(|| rows[*a].path.cmp(&rows[*b].path));
    roots.sort_by(cost);
    children.values_mut().for_each(|c| c.sort_by(cost));
    let mut order: Vec<(usize, usize)> = Vec::new();
    let mut hidden = 0usize;
    let mut stack: Vec<(usize, usize)> = roots.iter().rev().map(|&i| (0, i)).collect();
    while let Some((d, i)) = stack.pop() {
        if share(&rows[i]) < options.min_share {
            hidden += 1 + count_below(&children, &rows, i);
            continue;
        }
        order.push((d, i));
        if let Some(c) = children.get(rows[i].path.as_slice()) {
            stack.extend(c.iter().rev().map(|&k| (d + 1, k)));
        }
    }

    let budget = fmt::line_budget();
    let multi = n > 1;
    let per = if options.threads { "incl/thread" } else { "incl/rank" };
    let per_excl = if options.threads { "excl/thread" } else { "excl/rank" };
    let at = match (options.threads, n_ranks > 1) {
        (true, true) => "rank.thread",
        (true, false) => "thread",
        _ => "rank",
    };
    let mut t = if multi {
        Table::new(["path", "calls", per, "min", "max", at, "imbalance", per_excl, "%"])
    } else {
        Table::new(["path", "calls", "inclusive", "exclusive", "%"])
    }
    .fit(budget, &[0]);
    for &(d, i) in &order {
        let r = &rows[i];
        let leaf = r.path.last().map(String::as_str).unwrap_or("");
        let name = format!("{}{}", "  ".repeat(d.min(40)), fmt::shorten(leaf, 60));
        let pct = if known { format!("{:.1}", 100.0 * share(r)) } else { "-".into() };
        if multi {
            let mean = r.incl_sum as f64 / n as f64;
            let imbalance = if mean > 0.0 { format!("{:.2}", r.incl_max as f64 / mean) } else { "-".into() };
            t.row(vec![
                name,
                r.calls.to_string(),
                s(mean),
                s(r.incl_min as f64),
                s(r.incl_max as f64),
                units[r.max_at].label(n_ranks),
                imbalance,
                s(r.excl_sum as f64 / n as f64),
                pct,
            ]);
        } else {
            t.row(vec![name, r.calls.to_string(), s(r.incl_sum as f64), s(r.excl_sum as f64), pct]);
        }
    }
    let mut out = String::new();
    let label = file.file_name().map_or_else(|| file.display().to_string(), |f| f.to_string_lossy().into_owned());
    if options.threads {
        let of_ranks = match options.rank {
            Some(k) => format!("rank {k}"),
            None if n_ranks > 1 => format!("{n_ranks} ranks"),
            None => "the run".into(),
        };
        out.push_str(&format!(
            "Call paths of {label}, {of_ranks}, {n} thread(s) apart (time per thread: mean, min, max and the {at} with the max; imbalance = max/mean; % of the rank's {of}, averaged over the threads)\n"
        ));
    } else {
        match options.rank {
            Some(k) => out.push_str(&format!("Call paths of {label}, rank {k} (threads pooled; % of its {of})\n")),
            None if multi => out.push_str(&format!(
                "Call paths of {label}, {n} ranks (threads pooled; time per rank: mean, min, max and the rank with the max; imbalance = max/mean; % of a rank's {of}, averaged)\n"
            )),
            None => out.push_str(&format!("Call paths of {label} (threads pooled; % of the {of})\n")),
        }
    }
    t.render(&mut out);
    if hidden > 0 {
        out.push_str(&format!("  ({hidden} path(s) below --min-share {:.3}% not shown)\n", 100.0 * options.min_share));
    }
    Ok(out)
}

fn count_below(children: &HashMap<&[String], Vec<usize>>, rows: &[Row], i: usize) -> usize {
    let mut n = 0;
    let mut stack = vec![i];
    while let Some(k) = stack.pop() {
        if let Some(c) = children.get(rows[k].path.as_slice()) {
            n += c.len();
            stack.extend(c);
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_parse() {
        assert_eq!(parse_share("1%").unwrap(), 0.01);
        assert_eq!(parse_share(" 2.5 % ").unwrap(), 0.025);
        assert_eq!(parse_share("0").unwrap(), 0.0);
        assert!(parse_share("x").is_err() && parse_share("101%").is_err() && parse_share("-1").is_err() && parse_share("nan").is_err());
    }

    #[test]
    fn pooled_tree_and_pruning() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let r0 = RankPaths { rank: 0, wall_ns: 1000, paths: vec![(p(&["a"]), [1, 900, 100]), (p(&["a", "b"]), [2, 800, 800]), (p(&["c"]), [1, 5, 5])], threads: vec![] };
        let r1 = RankPaths { rank: 1, wall_ns: 1000, paths: vec![(p(&["a"]), [1, 500, 100]), (p(&["a", "b"]), [2, 400, 400])], threads: vec![] };
        let text = render(Path::new("x.h5"), &[r0.clone(), r1], &Options { rank: None, min_share: 0.01, threads: false }).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[2].trim_start().starts_with("a ") && lines[3].trim_start().starts_with("b "), "{text}");
        assert!(lines[3].starts_with("    b") || lines[3].starts_with("  b") || lines[3].contains("  b "), "{text}");
        assert!(text.contains("1 path(s) below"), "{text}");
        // a: mean 700 ns, min 500, max 900 on rank 0, imbalance 900/700.
        assert!(lines[2].contains(" 1.29 ") && lines[2].contains("700 ns") && lines[2].contains("70.0"), "{text}");
        let one = render(Path::new("x.h5"), &[r0], &Options { rank: Some(0), min_share: 0.0, threads: false }).unwrap();
        assert!(one.contains("rank 0") && one.contains("90.0") && one.contains("0.5"), "{one}");
        assert!(render(Path::new("x.h5"), &[], &Options { rank: None, min_share: 0.0, threads: false }).is_err());
    }

    #[test]
    fn threads_apart_name_the_thread_that_waits() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let t0 = vec![(p(&["par"]), [1, 3000, 100]), (p(&["par", "barrier"]), [1, 2240, 2240])];
        let t1 = vec![(p(&["par"]), [1, 3000, 1880]), (p(&["par", "barrier"]), [1, 1120, 1120])];
        let r = RankPaths { rank: 0, wall_ns: 4000, paths: vec![], threads: vec![(0, t0), (1, t1)] };
        let text = render(Path::new("x.h5"), &[r.clone()], &Options { rank: None, min_share: 0.0, threads: true }).unwrap();
        assert!(text.contains("2 thread(s) apart") && text.contains(" thread "), "{text}");
        let barrier = text.lines().find(|l| l.trim_start().starts_with("barrier")).unwrap();
        // mean 1.68 us, min 1.12 us, max 2.24 us on thread 0, imbalance 2240/1680.
        assert!(barrier.contains("1.680 us") && barrier.contains("1.120 us") && barrier.contains("2.240 us") && barrier.contains(" 1.33 "), "{text}");
        let cols: Vec<&str> = barrier.split_whitespace().collect();
        assert_eq!(cols[cols.len() - 5], "0", "the thread of the max: {text}");
        // Two ranks: the thread of the max is named rank.thread.
        let mut r1 = r.clone();
        r1.rank = 3;
        r1.threads[1].1[1].1[1] = 9000;
        let text = render(Path::new("x.h5"), &[r, r1], &Options { rank: None, min_share: 0.0, threads: true }).unwrap();
        let barrier = text.lines().find(|l| l.trim_start().starts_with("barrier")).unwrap();
        assert!(barrier.split_whitespace().any(|c| c == "3.1"), "{text}");
    }
}
