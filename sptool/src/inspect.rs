//! `sptool inspect`: the run's metadata, the ranks, the region table and
//! one LIKWID table per (rank, event group), as plain text.

use std::collections::BTreeMap;

use crate::filter::Filter;
use crate::fmt::{self, Table};
use crate::model::{AttrValue, Attrs, LikwidRegion, Profile};
use crate::stats::{self, Stats};

pub struct Options {
    pub per_rank: bool,
    pub full: bool,
}

const RULE: &str = "==============================================================================";
const VALUE_WIDTH: usize = 96;
/// A region name inside a sentence is shortened to this many characters.
const NAME_IN_TEXT: usize = 60;

/// The whole report.
pub fn render(profile: &Profile, filter: &Filter, options: &Options) -> String {
    let mut out = String::new();
    let rows = region_rows(profile, filter);
    header(profile, filter, &rows, &mut out);
    metadata(&profile.metadata, options.full, &mut out);
    ranks(profile, filter, &mut out);
    sources(profile, filter, &mut out);
    region_table(profile, filter, &rows, options.per_rank, &mut out);
    histograms(profile, filter, &rows, &mut out);
    for table in likwid_tables(profile, filter) {
        table.render(&mut out);
    }
    perf_tables(profile, filter, &mut out);
    work_table(profile, filter, &mut out);
    out
}

/// One perf-event table per rank: regions as columns (like the LIKWID tables) and events as
/// rows, or, when the regions outnumber the rows (a code with dozens of regions and a few
/// events), regions as rows and events as columns, so that the table stays as wide as its
/// events.
fn perf_tables(profile: &Profile, filter: &Filter, out: &mut String) {
    let mut ranks: BTreeMap<u32, Vec<&crate::model::PerfRegion>> = BTreeMap::new();
    for p in profile.perf.iter().filter(|p| filter.rank(p.rank) && filter.name(&p.name)) {
        ranks.entry(p.rank).or_default().push(p);
    }
    for (rank, mut regions) in ranks {
        regions.sort_by(|a, b| a.name.cmp(&b.name));
        out.push_str(&format!("perf events (rank {rank})\n"));
        let mut events: Vec<&str> = Vec::new();
        for r in &regions {
            for (e, _) in &r.events {
                if !events.contains(&e.as_str()) {
                    events.push(e);
                }
            }
        }
        // Quantities (rows when regions are columns), each a cell per region.
        let mut quantities: Vec<(String, Vec<String>)> = vec![("calls".into(), regions.iter().map(|r| r.calls.to_string()).collect())];
        for e in events {
            let cells = regions.iter().map(|r| r.events.iter().find(|(n, _)| n == e).map_or("-".into(), |(_, v)| fmt::counter(*v)));
            quantities.push((e.to_string(), cells.collect()));
        }
        if regions.iter().any(|r| r.running_fraction.is_some()) {
            let cells = regions.iter().map(|r| r.running_fraction.map_or("-".into(), |f| format!("{:.3}", f)));
            quantities.push(("running fraction".into(), cells.collect()));
        }
        if regions.iter().any(|r| r.counted().is_some()) {
            let cells = regions.iter().map(|r| r.counted().map_or("-".into(), fmt::counter));
            quantities.push(("counted FLOPs".into(), cells.collect()));
        }
        if regions.len() > quantities.len() {
            let mut table = Table::new(std::iter::once("region".to_string()).chain(quantities.iter().map(|(q, _)| q.clone())));
            for (i, r) in regions.iter().enumerate() {
                table.row(std::iter::once(r.name.clone()).chain(quantities.iter().map(|(_, cells)| cells[i].clone())).collect());
            }
            table.render(out);
        } else {
            let mut table = Table::new(std::iter::once("event".to_string()).chain(regions.iter().map(|r| r.name.clone())));
            for (q, cells) in quantities {
                table.row(std::iter::once(q).chain(cells).collect());
            }
            table.render(out);
        }
        out.push_str("  Totals over calls and threads; counts scaled by time enabled / time running when multiplexed.\n\n");
    }
}

/// FLOP/s and bytes/s of the regions with analytic (sp_region_add_flops/bytes) or counted FLOPs.
fn work_table(profile: &Profile, filter: &Filter, out: &mut String) {
    let rows = crate::counters::work_rows(profile, filter);
    if rows.is_empty() {
        return;
    }
    let opt = |v: Option<f64>| v.map_or("-".into(), |v| fmt::g(v, 4, false));
    out.push_str("FLOPs and bytes\n");
    let mut table = Table::new(["region", "rank", "time [s]", "GFLOP", "GFLOP/s", "GB", "GB/s", "FLOP/byte", "counted GFLOP/s", "analytic/counted"]);
    for r in &rows {
        table.row(vec![
            r.name.clone(),
            r.rank.to_string(),
            fmt::seconds(Some(r.time_s)),
            opt(r.flops.map(|f| f / 1e9)),
            opt(r.gflops_per_s()),
            opt(r.bytes.map(|b| b / 1e9)),
            opt(r.gbytes_per_s()),
            opt(r.intensity()),
            opt(r.counted_gflops_per_s()),
            opt(r.analytic_over_counted()),
        ]);
    }
    table.render(out);
    out.push_str("  GFLOP and GB from sp_region_add_flops/sp_region_add_bytes (else FLOPs counted by the flops event sets);\n");
    out.push_str("  rates over the summed call time of the region on that rank (per thread for regions run by several threads at once).\n\n");
}

/// One region pooled over the selected ranks, with its per-rank parts.
pub struct RegionRow {
    pub name: String,
    pub pooled: Stats,
    /// (rank, stats, open calls), ranks ascending.
    pub per_rank: Vec<(u32, Stats, i64)>,
}

impl RegionRow {
    pub fn imbalance(&self) -> Option<f64> {
        let totals: Vec<f64> =
            self.per_rank.iter().filter(|(_, s, _)| s.count > 0).map(|(_, s, _)| s.total_s()).collect();
        stats::imbalance(&totals)
    }

    pub fn ranks_with_calls(&self) -> usize {
        self.per_rank.iter().filter(|(_, s, _)| s.count > 0).count()
    }

    pub fn open_calls(&self) -> i64 {
        self.per_rank.iter().fold(0i64, |n, (_, _, o)| n.saturating_add(*o))
    }
}

/// Regions passing the filter, pooled over the selected ranks, costliest
/// (largest pooled total) first, ties by name.
pub fn region_rows(profile: &Profile, filter: &Filter) -> Vec<RegionRow> {
    let mut by_name: BTreeMap<&str, RegionRow> = BTreeMap::new();
    for r in &profile.regions {
        if !filter.rank(r.rank) || !filter.name(&r.name) {
            continue;
        }
        let row = by_name.entry(&r.name).or_insert_with(|| RegionRow {
            name: r.name.clone(),
            pooled: Stats::default(),
            per_rank: Vec::new(),
        });
        row.pooled.merge(&r.stats);
        match row.per_rank.iter_mut().find(|(rank, _, _)| *rank == r.rank) {
            Some((_, s, open)) => {
                s.merge(&r.stats);
                *open = open.saturating_add(r.open_calls);
            }
            None => row.per_rank.push((r.rank, r.stats, r.open_calls)),
        }
    }
    let mut rows: Vec<RegionRow> = by_name.into_values().collect();
    for row in &mut rows {
        row.per_rank.sort_by_key(|(rank, _, _)| *rank);
    }
    rows.sort_by(|a, b| b.pooled.total_ns.cmp(&a.pooled.total_ns).then_with(|| a.name.cmp(&b.name)));
    rows
}

fn header(profile: &Profile, filter: &Filter, rows: &[RegionRow], out: &mut String) {
    let calls: u64 = rows.iter().fold(0u64, |n, r| n.saturating_add(r.pooled.count));
    let nregions = profile.regions.iter().map(|r| r.name.as_str()).collect::<std::collections::BTreeSet<_>>().len();
    let mut line = format!(
        "schema {} ({}), {} rank(s), {} region(s), {} MiB",
        profile.schema,
        profile.layout.describe(),
        profile.ranks.len(),
        nregions,
        format_args!("{:.2}", profile.file_size as f64 / (1024.0 * 1024.0)),
    );
    // The longest rank's span: ranks on different nodes have unrelated
    // CLOCK_MONOTONIC origins, so spans are only compared, never subtracted.
    let mut spans: BTreeMap<u32, Stats> = BTreeMap::new();
    for r in profile.regions.iter().filter(|r| filter.rank(r.rank)) {
        spans.entry(r.rank).or_default().merge(&r.stats);
    }
    let span = spans.values().filter_map(Stats::span_s).fold(None, |acc: Option<f64>, s| Some(acc.map_or(s, |a| a.max(s))));
    if let Some(span) = span {
        line.push_str(&format!(", {} s wall clock (longest rank)", fmt::g(span, 6, false)));
    }
    out.push_str(RULE);
    out.push('\n');
    out.push_str(&profile.path.display().to_string());
    out.push('\n');
    out.push_str(&line);
    out.push('\n');
    out.push_str(&format!("{calls} call(s) in the selected regions and ranks\n"));
    out.push_str(RULE);
    out.push_str("\n\n");
}

const RUN: &[&str] = &[
    "timestamp",
    "start_time_ns",
    "finalize_time_ns",
    "user",
    "hostname",
    "working_directory",
    "scope_profiler_version",
    "python_version",
    "language",
];
const SYSTEM: &[&str] = &["platform", "uname", "chip_information"];
const PARALLELISM: &[&str] = &["mpi_size", "num_nodes", "omp_num_threads", "total_cores"];

fn metadata(meta: &Attrs, full: bool, out: &mut String) {
    if meta.is_empty() {
        out.push_str("Metadata\n  (none recorded)\n\n");
        return;
    }
    let width = meta.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    let mut left: Vec<&(String, AttrValue)> = meta.iter().collect();
    let mut take = |pred: &dyn Fn(&str) -> bool, ordered: Option<&[&str]>| {
        let mut taken: Vec<&(String, AttrValue)> = Vec::new();
        if let Some(order) = ordered {
            for key in order {
                if let Some(pos) = left.iter().position(|(k, _)| k == key) {
                    taken.push(left.remove(pos));
                }
            }
        } else {
            let (yes, no): (Vec<_>, Vec<_>) = left.iter().partition(|(k, _)| pred(k));
            left = no;
            taken = yes;
            taken.sort_by(|a, b| a.0.cmp(&b.0));
        }
        taken
    };
    let run = take(&|_| false, Some(RUN));
    let system = take(&|_| false, Some(SYSTEM));
    let parallel = take(&|_| false, Some(PARALLELISM));
    let modules = take(&|k| k == "modules", None);
    let slurm = take(&|k| k.starts_with("SLURM_") || k.starts_with("SLURMD_"), None);
    // The user's own (sp_set_metadata, SCOPE_PROFILER_METADATA_SET), before the environment.
    let user = take(&|k| k.starts_with(crate::caliper::USER_PREFIX), None);
    let env = take(&|k| !k.is_empty() && k == k.to_uppercase(), None);
    let other = take(&|_| true, None);

    out.push_str("Metadata\n");
    for (title, entries) in
        [("Run", run), ("System", system), ("Parallelism", parallel), ("User (sp_set_metadata)", user), ("Slurm", slurm), ("Environment", env), ("Other", other)]
    {
        if entries.is_empty() {
            continue;
        }
        out.push_str(&format!("  {title}\n"));
        for (key, value) in entries {
            let text = value.to_string();
            let text = if full { text } else { fmt::clip(&text.replace(['\n', '\t', '\r'], " "), VALUE_WIDTH) };
            out.push_str(&format!("    {key:<width$} : {text}\n"));
        }
    }
    for (_, value) in modules {
        let list: Vec<String> = match value {
            AttrValue::StrArray(v) => v.clone(),
            AttrValue::Str(s) => s.split(':').filter(|s| !s.is_empty()).map(str::to_string).collect(),
            other => vec![other.to_string()],
        };
        out.push_str(&format!("  Modules ({})\n", list.len()));
        if list.is_empty() {
            out.push_str("    (none loaded)\n");
        }
        for m in list {
            out.push_str(&format!("    {m}\n"));
        }
    }
    out.push('\n');
}

const RANK_KEYS: &[&str] = &["hostname", "pid", "num_threads", "cpus", "thread_os_ids", "clock_offset_ns"];

fn rank_cell(key: &str, value: &AttrValue) -> String {
    let text = match (key, value) {
        ("cpus", AttrValue::IntArray(v)) => fmt::ranges(v),
        (_, AttrValue::IntArray(v)) => v.iter().map(i64::to_string).collect::<Vec<_>>().join(","),
        (_, v) => v.to_string(),
    };
    fmt::clip(&text, 40)
}

fn ranks(profile: &Profile, filter: &Filter, out: &mut String) {
    let selected: Vec<_> = profile.ranks.iter().filter(|r| filter.rank(r.rank)).collect();
    if selected.iter().all(|r| r.attrs.is_empty()) {
        return;
    }
    let mut keys: Vec<&str> =
        RANK_KEYS.iter().copied().filter(|k| selected.iter().any(|r| r.attrs.iter().any(|(n, _)| n == k))).collect();
    let mut extra: Vec<&str> = selected
        .iter()
        .flat_map(|r| r.attrs.iter().map(|(n, _)| n.as_str()))
        // The sources' own attributes are in their section (below); Kokkos's declared
        // metadata (dozens of build options) is in the file for whoever wants it.
        .filter(|k| !RANK_KEYS.contains(k) && ![SOURCE_PREFIX, ASYNC_PREFIX, "kokkos:", "counter:", "counter_max:"].iter().any(|p| k.starts_with(p)))
        .collect();
    extra.sort_unstable();
    extra.dedup();
    keys.extend(extra);
    let mut table = Table::new(std::iter::once("rank").chain(keys.iter().copied())).left_aligned();
    for r in &selected {
        let mut cells = vec![r.rank.to_string()];
        for key in &keys {
            cells.push(r.attrs.iter().find(|(n, _)| n == key).map_or("-".into(), |(_, v)| rank_cell(key, v)));
        }
        table.row(cells);
    }
    out.push_str(&format!("Ranks ({})\n", selected.len()));
    table.render(out);
    out.push('\n');
}

/// The rank attributes naming the sources of regions other than the program's own API that
/// were in use (`source:<name>`: the OpenMP tool, instrumented functions, the MPI plugin's MPI
/// calls, the Kokkos tool, the NVTX injection).
const SOURCE_PREFIX: &str = "source:";

/// The rank attributes of the asynchronous ranges (NVTX start/end ranges, which may end on
/// another thread than the one that started them): `async_range_regions`, one region per row,
/// and `async_range_threads`, (starting thread's Linux id, ending thread's, ranges) per row.
const ASYNC_PREFIX: &str = "async_range_";

/// Which threads started and ended the asynchronous ranges (recorded on each rank's track of
/// their own, Linux thread id -1 in `thread_os_ids`): a line per region and pair of threads.
fn async_ranges(selected: &[&crate::model::RankInfo], out: &mut String) {
    let mut lines = Vec::new();
    for r in selected {
        let find = |k: &str| r.attrs.iter().find(|(n, _)| n == k).map(|(_, v)| v);
        let (Some(AttrValue::StrArray(regions)), Some(AttrValue::IntArray(threads))) = (find("async_range_regions"), find("async_range_threads")) else { continue };
        for (region, t) in regions.iter().zip(threads.chunks_exact(3)) {
            let how = if t[0] == t[1] { format!("started and ended on thread {}", t[0]) } else { format!("started on thread {}, ended on thread {}", t[0], t[1]) };
            lines.push(format!("    rank {}: {region}: {} range(s) {how}", r.rank, t[2]));
        }
    }
    if !lines.is_empty() {
        out.push_str("  Asynchronous ranges (start/end; on a track of their own, thread os id -1; Linux thread ids):\n");
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
    }
}

/// Which sources of regions were in use, on which ranks, and the Kokkos memory spaces'
/// high-water marks.
fn sources(profile: &Profile, filter: &Filter, out: &mut String) {
    let selected: Vec<_> = profile.ranks.iter().filter(|r| filter.rank(r.rank)).collect();
    // source -> (what, ranks)
    let mut found: BTreeMap<&str, (String, Vec<i64>)> = BTreeMap::new();
    // space -> (largest high-water mark, ranks)
    let mut spaces: BTreeMap<&str, (i64, Vec<i64>)> = BTreeMap::new();
    for r in &selected {
        for (k, v) in &r.attrs {
            if let Some(name) = k.strip_prefix(SOURCE_PREFIX) {
                found.entry(name).or_insert_with(|| (v.to_string(), Vec::new())).1.push(r.rank as i64);
            } else if let (Some(space), AttrValue::Int(b)) = (k.strip_prefix("counter_max:kokkos_bytes:"), v) {
                let e = spaces.entry(space).or_insert((0, Vec::new()));
                e.0 = e.0.max(*b);
                e.1.push(r.rank as i64);
            }
        }
    }
    if found.is_empty() {
        return;
    }
    out.push_str("Sources of regions besides the program's own (sp_*)
");
    let mut table = Table::new(["source", "what", "ranks"]).left_aligned();
    for (name, (what, ranks)) in &found {
        table.row(vec![name.to_string(), what.clone(), fmt::ranges(ranks)]);
    }
    table.render(out);
    if !spaces.is_empty() {
        out.push_str("  Kokkos memory: high-water mark per space (largest over the ranks):");
        for (space, (b, ranks)) in &spaces {
            out.push_str(&format!(" {space} {:.3} MiB (ranks {})", *b as f64 / (1024.0 * 1024.0), fmt::ranges(ranks)));
        }
        out.push('\n');
    }
    async_ranges(&selected, out);
    out.push('\n');
}

fn stat_cells(s: &Stats) -> Vec<String> {
    vec![
        s.count.to_string(),
        if s.count > 0 { fmt::seconds(Some(s.total_s())) } else { "-".into() },
        fmt::seconds(s.mean_s()),
        fmt::seconds(s.min_s()),
        fmt::seconds(s.max_s()),
        fmt::seconds(s.std_s()),
    ]
}

fn region_table(profile: &Profile, filter: &Filter, rows: &[RegionRow], per_rank: bool, out: &mut String) {
    let selected: Vec<i64> = filter.selected_ranks(profile).into_iter().map(i64::from).collect();
    out.push_str(&format!(
        "Regions ({}), pooled over rank(s) {}, costliest first\n",
        rows.len(),
        if selected.is_empty() { "-".into() } else { fmt::ranges(&selected) }
    ));
    if rows.is_empty() {
        let why = if profile.regions.is_empty() { "no regions recorded" } else { "no region matches the selection" };
        out.push_str(&format!("  ({why})\n\n"));
        return;
    }
    let mut header = vec!["region", "ranks", "calls", "total [s]", "mean [s]", "min [s]", "max [s]", "std [s]", "imbalance"];
    // A "defined at" column when the file knows where some region is defined.
    let located = rows.iter().any(|r| profile.sources.contains_key(&r.name));
    if located {
        header.push("defined at");
    }
    let last = header.len() - 1;
    let mut table = Table::new(header).fit(fmt::line_budget(), &[last, 0]);
    if located {
        table = table.left_column(last);
    }
    for row in rows {
        let mut cells = vec![row.name.clone(), row.ranks_with_calls().to_string()];
        cells.extend(stat_cells(&row.pooled));
        cells.push(row.imbalance().map_or("-".into(), |v| format!("{v:.2}")));
        if located {
            cells.push(profile.sources.get(&row.name).map_or("-".into(), |s| s.to_string()));
        }
        table.row(cells);
        if per_rank {
            for (rank, s, _) in &row.per_rank {
                let mut cells = vec![format!("  rank {rank}"), String::new()];
                cells.extend(stat_cells(s));
                cells.push(String::new());
                table.row(cells);
            }
        }
    }
    table.render(out);
    out.push_str("  Durations in seconds; std is the population standard deviation of all calls.\n");
    out.push_str("  imbalance = max/mean of the per-rank totals, over the ranks that recorded the region.\n");
    if rows.iter().any(|r| r.pooled.count > 0 && r.pooled.m2.is_none()) {
        out.push_str("  std is not available: the file stores aggregates only, not single calls.\n");
    }
    for row in rows.iter().filter(|r| r.open_calls() > 0) {
        let where_: Vec<String> = row
            .per_rank
            .iter()
            .filter(|(_, _, o)| *o > 0)
            .map(|(rank, _, o)| format!("{o} on rank {rank}"))
            .collect();
        out.push_str(&format!(
            "  warning: {} call(s) of {} were still open at finalize and are not counted ({}).\n",
            row.open_calls(),
            fmt::shorten(&row.name, NAME_IN_TEXT),
            where_.join(", ")
        ));
    }
    out.push('\n');
}

/// A duration in ns as a short label (bucket bounds are powers of two).
fn short_ns(ns: u128) -> String {
    match ns {
        n if n >= 1_000_000_000 => format!("{:.3}s", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.3}ms", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.3}us", n as f64 / 1e3),
        n => format!("{n}ns"),
    }
}

/// Exclusive times and duration histograms (scope_profiler's schema-3 files), pooled over the
/// selected ranks, in the order of the region table.
fn histograms(profile: &Profile, filter: &Filter, rows: &[RegionRow], out: &mut String) {
    if profile.extras.is_empty() {
        return;
    }
    out.push_str("Exclusive time and call durations (log2 buckets: [from, to) count)\n");
    for row in rows {
        let parts: Vec<_> = profile.extras.iter().filter(|e| e.name == row.name && filter.rank(e.rank)).collect();
        if parts.is_empty() {
            continue;
        }
        let buckets = parts.iter().map(|e| e.histogram.len()).max().unwrap_or(0);
        let hist: Vec<u64> =
            (0..buckets).map(|b| parts.iter().fold(0u64, |n, e| n.saturating_add(e.histogram.get(b).copied().unwrap_or(0)))).collect();
        let excl: Option<i64> = parts.iter().try_fold(0i64, |n, e| e.exclusive_ns.map(|x| n.saturating_add(x)));
        let cells: Vec<String> = hist
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(b, c)| {
                let lo: u128 = if b <= 1 { 0 } else { 1u128 << (b - 1) };
                let hi: u128 = if b == 0 { 1 } else { 1u128 << b };
                format!("[{}, {}) {c}", short_ns(lo), short_ns(hi))
            })
            .collect();
        let name = crate::fmt::clip(&row.name, 40);
        let excl = fmt::seconds(excl.map(|e| e as f64 / 1e9));
        out.push_str(&format!("  {name}  exclusive {excl} s\n"));
        if !cells.is_empty() {
            out.push_str(&format!("    {}\n", cells.join("  ")));
        }
    }
    out.push('\n');
}

/// One LIKWID table: regions (or region@cpu) as columns.
pub struct LikwidTable {
    pub rank: u32,
    pub group: String,
    pub columns: Vec<String>,
    /// (row label, cells); `None` label starts a section heading.
    rows: Vec<(String, Vec<Option<String>>)>,
    sections: Vec<(usize, &'static str)>,
}

impl LikwidTable {
    fn render(&self, out: &mut String) {
        let title = if self.group.is_empty() {
            format!("LIKWID counters (rank {})", self.rank)
        } else {
            format!("LIKWID counters (rank {}, group {})", self.rank, self.group)
        };
        out.push_str(&title);
        out.push('\n');
        let mut table = Table::new(std::iter::once("counter".to_string()).chain(self.columns.iter().cloned()))
            .fit(fmt::line_budget(), &[0]);
        for (i, (label, cells)) in self.rows.iter().enumerate() {
            for (_, heading) in self.sections.iter().filter(|(at, _)| *at == i) {
                table.heading(*heading);
            }
            let mut line = vec![label.clone()];
            line.extend(cells.iter().map(|c| c.clone().unwrap_or_else(|| "-".into())));
            table.row(line);
        }
        table.render(out);
        out.push('\n');
    }
}

/// Group the selected LIKWID regions per (rank, event group); columns
/// costliest first (largest runtime over the threads), ties by name.
pub fn likwid_tables(profile: &Profile, filter: &Filter) -> Vec<LikwidTable> {
    let mut grouped: BTreeMap<(u32, &str), Vec<&LikwidRegion>> = BTreeMap::new();
    for r in &profile.likwid {
        if filter.rank(r.rank) && filter.name(&r.tag) {
            grouped.entry((r.rank, r.group_name.as_str())).or_default().push(r);
        }
    }
    let mut tables = Vec::new();
    for ((rank, group), mut regions) in grouped {
        regions.sort_by(|a, b| b.runtime().total_cmp(&a.runtime()).then_with(|| a.tag.cmp(&b.tag)));
        let mut columns = Vec::new();
        // label -> cells, in first-seen order
        let mut info: Vec<(String, Vec<Option<String>>)> = Vec::new();
        let mut events: Vec<(String, Vec<Option<String>>)> = Vec::new();
        let mut metrics: Vec<(String, Vec<Option<String>>)> = Vec::new();
        fn set(rows: &mut Vec<(String, Vec<Option<String>>)>, label: &str, column: usize, value: String) {
            let pos = match rows.iter().position(|(l, _)| l == label) {
                Some(p) => p,
                None => {
                    rows.push((label.to_string(), Vec::new()));
                    rows.len() - 1
                }
            };
            let cells = &mut rows[pos].1;
            if cells.len() <= column {
                cells.resize(column + 1, None);
            }
            cells[column] = Some(value);
        }
        for r in regions {
            let labels = r.event_labels();
            for t in 0..r.nthreads() {
                // One column per region, or per hardware thread when the
                // region ran on several: LIKWID reports no aggregate.
                let tag = fmt::shorten(&r.tag, NAME_IN_TEXT);
                columns.push(if r.nthreads() == 1 { tag } else { format!("{tag}@cpu{}", r.cpus[t]) });
                let c = columns.len() - 1;
                set(&mut info, "call count", c, r.call_counts[t].to_string());
                set(&mut info, "runtime [s]", c, fmt::counter(r.times[t]));
                set(&mut info, "source", c, if r.source.is_empty() { "-".into() } else { r.source.clone() });
                for (label, values) in labels.iter().zip(&r.events) {
                    set(&mut events, label, c, values.get(t).map_or("-".into(), |v| fmt::counter(*v)));
                }
                for (name, values) in r.metric_names.iter().zip(&r.metrics) {
                    set(&mut metrics, name, c, values.get(t).map_or("-".into(), |v| fmt::counter(*v)));
                }
            }
        }
        let width = columns.len();
        let mut sections = Vec::new();
        let mut rows = info;
        if !events.is_empty() {
            sections.push((rows.len(), "Events"));
            rows.extend(events);
        }
        if !metrics.is_empty() {
            sections.push((rows.len(), "Metrics"));
            rows.extend(metrics);
        }
        for (_, cells) in &mut rows {
            cells.resize(width, None);
        }
        tables.push(LikwidTable { rank, group: group.to_string(), columns, rows, sections });
    }
    tables
}
