//! `sptool mpi FILE`: the program's MPI calls (`rank<N>/mpi/`, written when the MPI plugin
//! recorded them; see docs/mpi.md), reported in the spirit of mpiP: per rank the application
//! time, the MPI time and its share; the routines by time with calls, bytes and the imbalance
//! over ranks; message sizes; completed requests by origin; the busiest point-to-point pairs;
//! and, when the run kept them, the call sites.
//!
//! Every table is checked before use: columns of different lengths, a histogram of the wrong
//! shape or negative counts make the rank's data an error naming the dataset, never a panic.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::fmt::{self, Table};
use crate::h5util::{self, Group};

/// Rows accepted per table: more than any run writes (one per routine, communicator and
/// thread), few enough that a hostile file cannot make us allocate without bound.
const MAX_ROWS: usize = 1 << 20;
const BUCKETS: usize = 64;

#[derive(Debug, Clone, Default)]
pub struct RoutineRow {
    pub routine: String,
    pub thread: i64,
    pub comm_size: i64,
    pub comm_kind: i64,
    pub calls: i64,
    pub time_ns: i64,
    pub bytes_sent: i64,
    pub bytes_received: i64,
    pub polls_empty: i64,
    pub poll_time_ns: i64,
    pub sizes: Vec<i64>,
}

#[derive(Debug, Clone, Default)]
pub struct SiteRow {
    pub routine: String,
    pub function: String,
    pub file: String,
    pub line: i64,
    pub module: String,
    pub offset: i64,
    pub calls: i64,
    pub time_ns: i64,
    /// Bytes sent plus received.
    pub bytes: i64,
    /// (sent, received): None in a file written before the two were kept apart.
    pub split: Option<(i64, i64)>,
}

/// One rank's MPI data.
#[derive(Debug, Clone, Default)]
pub struct RankMpi {
    pub rank: u32,
    pub mode: String,
    pub family: String,
    pub app_time_ns: i64,
    pub mpi_time_ns: i64,
    pub routines: Vec<RoutineRow>,
    /// (world rank, messages sent, bytes sent, messages received, bytes received).
    pub peers: Vec<(i64, i64, i64, i64, i64)>,
    /// (routine, origin, count, bytes, time ns).
    pub completions: Vec<(String, String, i64, i64, i64)>,
    pub sites: Option<Vec<SiteRow>>,
}

/// Columns of one table, all of one length.
struct Columns<'a> {
    group: &'a Group,
    rows: Option<usize>,
}

impl<'a> Columns<'a> {
    fn new(group: &'a Group) -> Self {
        Self { group, rows: None }
    }

    fn check(&mut self, name: &str, n: usize) -> Result<()> {
        if n > MAX_ROWS {
            return Err(Error::new(format!("{}/{name} has {n} rows, more than {MAX_ROWS}", self.group.path())));
        }
        match self.rows {
            Some(m) if m != n => Err(Error::new(format!(
                "{}/{name} has {n} rows where the table's other columns have {m}",
                self.group.path()
            ))),
            _ => {
                self.rows = Some(n);
                Ok(())
            }
        }
    }

    fn ints(&mut self, name: &str) -> Result<Vec<i64>> {
        let v = self.group.read_i64(name)?;
        self.check(name, v.len())?;
        Ok(v)
    }

    /// Counts and byte totals: never negative.
    fn counts(&mut self, name: &str) -> Result<Vec<i64>> {
        let v = self.ints(name)?;
        if v.iter().any(|&x| x < 0) {
            return Err(Error::new(format!("{}/{name} holds a negative count", self.group.path())));
        }
        Ok(v)
    }

    fn strings(&mut self, name: &str) -> Result<Vec<String>> {
        let v = self.group.read_strings(name)?;
        self.check(name, v.len())?;
        Ok(v)
    }
}

fn read_rank(rank: u32, g: &Group) -> Result<RankMpi> {
    let mut m = RankMpi {
        rank,
        mode: g.attr_string("mode").unwrap_or_default(),
        family: g.attr_string("family").unwrap_or_default(),
        app_time_ns: g.attr_i64("app_time_ns").unwrap_or(0).max(0),
        mpi_time_ns: g.attr_i64("mpi_time_ns").unwrap_or(0).max(0),
        ..Default::default()
    };
    if g.has("routines") {
        let r = g.group("routines")?;
        let mut c = Columns::new(&r);
        let (names, thread, size, kind) = (c.strings("routine")?, c.ints("thread")?, c.ints("comm_size")?, c.ints("comm_kind")?);
        let (calls, time, sent, recv) = (c.counts("calls")?, c.counts("time_ns")?, c.counts("bytes_sent")?, c.counts("bytes_received")?);
        let (polls, poll_time) = (c.counts("polls_empty")?, c.counts("poll_time_ns")?);
        let n = names.len();
        let (hist, shape) = r.read_f64_shaped("size_histogram")?;
        if shape != [n, BUCKETS] || hist.iter().any(|v| v.is_nan() || *v < 0.0) {
            return Err(Error::new(format!("rank{rank}/mpi/routines/size_histogram is not a {n} x {BUCKETS} table of counts ({shape:?})")));
        }
        for i in 0..n {
            m.routines.push(RoutineRow {
                routine: names[i].clone(),
                thread: thread[i],
                comm_size: size[i],
                comm_kind: kind[i],
                calls: calls[i],
                time_ns: time[i],
                bytes_sent: sent[i],
                bytes_received: recv[i],
                polls_empty: polls[i],
                poll_time_ns: poll_time[i],
                sizes: hist[i * BUCKETS..(i + 1) * BUCKETS].iter().map(|&v| v as i64).collect(),
            });
        }
    }
    if g.has("peers") {
        let p = g.group("peers")?;
        let mut c = Columns::new(&p);
        let (w, ms, bs, mr, br) = (c.ints("world_rank")?, c.counts("messages_sent")?, c.counts("bytes_sent")?, c.counts("messages_received")?, c.counts("bytes_received")?);
        m.peers = (0..w.len()).map(|i| (w[i], ms[i], bs[i], mr[i], br[i])).collect();
    }
    if g.has("completions") {
        let p = g.group("completions")?;
        let mut c = Columns::new(&p);
        let (r, o, n, b, t) = (c.strings("routine")?, c.strings("origin")?, c.counts("count")?, c.counts("bytes")?, c.counts("time_ns")?);
        m.completions = (0..r.len()).map(|i| (r[i].clone(), o[i].clone(), n[i], b[i], t[i])).collect();
    }
    if g.has("sites") {
        let p = g.group("sites")?;
        let mut c = Columns::new(&p);
        let (r, f, file, line, module, off) = (c.strings("routine")?, c.strings("function")?, c.strings("file")?, c.ints("line")?, c.strings("module")?, c.counts("offset")?);
        let (calls, time, bytes) = (c.counts("calls")?, c.counts("time_ns")?, c.counts("bytes")?);
        let split = if p.has("bytes_sent") { Some((c.counts("bytes_sent")?, c.counts("bytes_received")?)) } else { None };
        m.sites = Some(
            (0..r.len())
                .map(|i| SiteRow {
                    routine: r[i].clone(),
                    function: f[i].clone(),
                    file: file[i].clone(),
                    line: line[i],
                    module: module[i].clone(),
                    offset: off[i],
                    calls: calls[i],
                    time_ns: time[i],
                    bytes: bytes[i],
                    split: split.as_ref().map(|(s, r)| (s[i], r[i])),
                })
                .collect(),
        );
    }
    Ok(m)
}

/// Every rank's MPI data in the file at `path` (empty when the run recorded none).
pub fn read(path: &Path) -> Result<Vec<RankMpi>> {
    let (file, _) = h5util::open(path)?;
    let mut out = Vec::new();
    for member in file.subgroups().map_err(|e| e.or_file(path))? {
        let name = &member.name;
        let Some(rank) = name.strip_prefix("rank").and_then(|d| d.parse::<u32>().ok()).filter(|n| *name == format!("rank{n}")) else { continue };
        let g = file.member(&member).map_err(|e| e.or_file(path))?;
        if g.has("mpi") {
            let m = g.group("mpi").map_err(|e| e.or_file(path))?;
            out.push(read_rank(rank, &m).map_err(|e| e.or_file(path))?);
        }
    }
    out.sort_by_key(|m| m.rank);
    Ok(out)
}

pub struct Options {
    pub top: usize,
    pub sites: bool,
    /// Only these ranks (None: all).
    pub ranks: Option<Vec<u32>>,
    /// Threads apart (`--threads`).
    pub threads: bool,
}

fn s(ns: i64) -> String {
    fmt::g(ns as f64 * 1e-9, 6, false)
}

fn pct(part: i64, whole: i64) -> String {
    if whole > 0 { format!("{:.2}", 100.0 * part as f64 / whole as f64) } else { "-".into() }
}

/// Bytes with a binary unit.
fn bytes(b: i64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{b} B") } else { format!("{} {}", fmt::g(v, 4, false), UNITS[u]) }
}

/// The message sizes bucket `b` holds: 0 bytes, then [2^(b-1), 2^b).
fn bucket_label(b: usize) -> String {
    match b {
        0 => "0 B".into(),
        1 => "1 B".into(),
        63 => format!("[{}, ...)", bytes(1i64 << 62)),
        _ => format!("[{}, {})", bytes(1i64 << (b - 1)), bytes(1i64 << b)),
    }
}

const RULE: &str = "==============================================================================";

/// The report.
pub fn render(path: &Path, ranks: &[RankMpi], o: &Options) -> String {
    let selected: Vec<&RankMpi> = ranks.iter().filter(|m| o.ranks.as_ref().is_none_or(|r| r.contains(&m.rank))).collect();
    let mut out = String::new();
    out.push_str(RULE);
    out.push('\n');
    out.push_str(&format!("MPI report: {}\n", path.display()));
    let mode = selected.first().map(|m| format!("{} ({})", m.mode, m.family)).unwrap_or_default();
    out.push_str(&format!("{} rank(s) with MPI data, mode {mode}\n", selected.len()));
    out.push_str(RULE);
    out.push_str("\n\n");

    // Per rank.
    out.push_str("Time per rank (application: from MPI_Init, or sp_setup, to the profile's finalize)\n");
    out.push_str("(MPI time: all threads of the rank; more than one calling thread can make it exceed 100 %)\n");
    let mut t = Table::new(["rank", "app time [s]", "MPI time [s]", "MPI %", "calls", "threads"]);
    let (mut app, mut mpi) = (0i64, 0i64);
    for m in &selected {
        let calls = m.routines.iter().map(|r| r.calls).fold(0, i64::saturating_add);
        let mut threads: Vec<i64> = m.routines.iter().map(|r| r.thread).collect();
        threads.sort();
        threads.dedup();
        t.row(vec![m.rank.to_string(), s(m.app_time_ns), s(m.mpi_time_ns), pct(m.mpi_time_ns, m.app_time_ns), calls.to_string(), threads.len().to_string()]);
        app = app.saturating_add(m.app_time_ns);
        mpi = mpi.saturating_add(m.mpi_time_ns);
    }
    if selected.len() > 1 {
        let calls = selected.iter().flat_map(|m| &m.routines).map(|r| r.calls).fold(0, i64::saturating_add);
        t.row(vec!["*".into(), s(app), s(mpi), pct(mpi, app), calls.to_string(), String::new()]);
    }
    t.render(&mut out);
    out.push('\n');

    // Threads apart: which thread of a rank spends the MPI time.
    let units: Vec<(u32, i64)> = {
        let mut u: Vec<(u32, i64)> = selected.iter().flat_map(|m| m.routines.iter().map(|r| (m.rank, r.thread))).collect();
        u.sort();
        u.dedup();
        u
    };
    let unit_label = |(rank, thread): (u32, i64)| if selected.len() > 1 { format!("{rank}.{thread}") } else { thread.to_string() };
    if o.threads {
        out.push_str("Time per thread that calls MPI (the thread ids of the profile; % of the rank's application time)\n");
        let mut t = Table::new(["rank", "thread", "calls", "MPI time [s]", "MPI %", "busiest routine", "its time [s]"]).left_column(5);
        for m in &selected {
            let mut threads: BTreeMap<i64, (i64, i64, BTreeMap<&str, i64>)> = BTreeMap::new();
            for r in &m.routines {
                let e = threads.entry(r.thread).or_default();
                let time = r.time_ns.saturating_add(r.poll_time_ns);
                e.0 = e.0.saturating_add(r.calls);
                e.1 = e.1.saturating_add(time);
                let per = e.2.entry(r.routine.as_str()).or_default();
                *per = per.saturating_add(time);
            }
            for (thread, (calls, time, per)) in threads {
                let (busiest, its) = per.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0))).map(|(k, v)| (k.to_string(), *v)).unwrap_or_default();
                t.row(vec![m.rank.to_string(), thread.to_string(), calls.to_string(), s(time), pct(time, m.app_time_ns), busiest, s(its)]);
            }
        }
        t.render(&mut out);
        out.push('\n');
    }

    // Routines: pooled over threads and communicators per rank, then over ranks.
    #[derive(Default)]
    struct Agg {
        calls: i64,
        time: i64,
        sent: i64,
        recv: i64,
        polls: i64,
        per_rank: BTreeMap<u32, i64>,
        per_thread: BTreeMap<(u32, i64), i64>,
        sizes: Vec<i64>,
    }
    let mut routines: BTreeMap<&str, Agg> = BTreeMap::new();
    for m in &selected {
        for r in &m.routines {
            let a = routines.entry(r.routine.as_str()).or_default();
            a.calls = a.calls.saturating_add(r.calls);
            let time = r.time_ns.saturating_add(r.poll_time_ns);
            a.time = a.time.saturating_add(time);
            a.sent = a.sent.saturating_add(r.bytes_sent);
            a.recv = a.recv.saturating_add(r.bytes_received);
            a.polls = a.polls.saturating_add(r.polls_empty);
            let e = a.per_rank.entry(m.rank).or_default();
            *e = e.saturating_add(time);
            let e = a.per_thread.entry((m.rank, r.thread)).or_default();
            *e = e.saturating_add(time);
            a.sizes.resize(BUCKETS, 0);
            for (x, y) in a.sizes.iter_mut().zip(&r.sizes) {
                *x = x.saturating_add(*y);
            }
        }
    }
    let mut order: Vec<(&str, &Agg)> = routines.iter().map(|(k, v)| (*k, v)).collect();
    order.sort_by(|a, b| b.1.time.cmp(&a.1.time).then(a.0.cmp(b.0)));
    let n = if o.threads { units.len() } else { selected.len() }.max(1) as f64;
    let over = if o.threads { "per-thread time over the threads that call MPI: min / mean / max and the thread of the max" } else { "per-rank time over the ranks: min / mean / max" };
    out.push_str(&format!("Top {} routines by time ({over}; imbalance = max / mean)\n", o.top.min(order.len())));
    let mut header = vec!["routine", "calls", "time [s]", "% MPI", "min [s]", "mean [s]", "max [s]"];
    if o.threads {
        header.push(if selected.len() > 1 { "rank.thread" } else { "thread" });
    }
    header.extend(["imbalance", "sent", "received", "empty polls"]);
    let mut t = Table::new(header).left_column(0);
    for (name, a) in order.iter().take(o.top) {
        let times: Vec<i64> = if o.threads {
            units.iter().map(|u| a.per_thread.get(u).copied().unwrap_or(0)).collect()
        } else {
            selected.iter().map(|m| a.per_rank.get(&m.rank).copied().unwrap_or(0)).collect()
        };
        let (min, max) = (times.iter().copied().min().unwrap_or(0), times.iter().copied().max().unwrap_or(0));
        let mean = times.iter().map(|&x| x as f64).sum::<f64>() / n;
        let imbalance = if mean > 0.0 { format!("{:.2}", max as f64 / mean) } else { "-".into() };
        let mut cells = vec![name.to_string(), a.calls.to_string(), s(a.time), pct(a.time, mpi), s(min), fmt::g(mean * 1e-9, 6, false), s(max)];
        if o.threads {
            let at = times.iter().enumerate().max_by(|x, y| x.1.cmp(y.1).then(y.0.cmp(&x.0))).map(|(i, _)| unit_label(units[i])).unwrap_or_default();
            cells.push(at);
        }
        cells.extend([imbalance, bytes(a.sent), bytes(a.recv), a.polls.to_string()]);
        t.row(cells);
    }
    t.render(&mut out);
    out.push('\n');

    // By communicator (only when some routine used communicators of different sizes).
    let mut by_comm: BTreeMap<(&str, i64, i64), (i64, i64, i64)> = BTreeMap::new();
    for m in &selected {
        for r in &m.routines {
            let e = by_comm.entry((r.routine.as_str(), r.comm_kind, r.comm_size)).or_default();
            e.0 = e.0.saturating_add(r.calls);
            e.1 = e.1.saturating_add(r.time_ns.saturating_add(r.poll_time_ns));
            e.2 = e.2.saturating_add(r.bytes_sent.saturating_add(r.bytes_received));
        }
    }
    let multi: Vec<&str> = routines.keys().copied().filter(|k| by_comm.keys().filter(|c| c.0 == *k).count() > 1).collect();
    if !multi.is_empty() {
        out.push_str("Routines on more than one kind or size of communicator\n");
        let mut t = Table::new(["routine", "communicator", "size", "calls", "time [s]", "bytes"]).left_column(0).left_column(1);
        for ((name, kind, size), (calls, time, b)) in by_comm.iter().filter(|(k, _)| multi.contains(&k.0)) {
            t.row(vec![name.to_string(), kind_name(*kind).into(), size.to_string(), calls.to_string(), s(*time), bytes(*b)]);
        }
        t.render(&mut out);
        out.push('\n');
    }

    // Message sizes.
    let movers: Vec<(&str, &Agg)> = order.iter().filter(|(_, a)| a.sent > 0 || a.recv > 0).take(o.top.min(8)).copied().collect();
    if !movers.is_empty() {
        out.push_str("Message sizes: calls by the larger of bytes sent and received per call (all selected ranks)\n");
        let mut t = Table::new(std::iter::once("size".to_string()).chain(movers.iter().map(|(n, _)| n.to_string())));
        for b in 0..BUCKETS {
            if movers.iter().any(|(_, a)| a.sizes.get(b).copied().unwrap_or(0) > 0) {
                t.row(std::iter::once(bucket_label(b)).chain(movers.iter().map(|(_, a)| a.sizes.get(b).copied().unwrap_or(0).to_string())).collect());
            }
        }
        t.render(&mut out);
        out.push('\n');
    }

    // Completed requests by origin.
    let mut comp: BTreeMap<(&str, &str), (i64, i64, i64)> = BTreeMap::new();
    for m in &selected {
        for (r, origin, c, b, time) in &m.completions {
            let e = comp.entry((r.as_str(), origin.as_str())).or_default();
            e.0 = e.0.saturating_add(*c);
            e.1 = e.1.saturating_add(*b);
            e.2 = e.2.saturating_add(*time);
        }
    }
    if !comp.is_empty() {
        out.push_str("Requests completed, by the call that started them (time: the completing calls', shared among their requests)\n");
        let mut t = Table::new(["completed by", "started by", "requests", "bytes", "time [s]"]).left_column(0).left_column(1);
        let mut rows: Vec<_> = comp.into_iter().collect();
        rows.sort_by(|a, b| b.1.2.cmp(&a.1.2).then(a.0.cmp(&b.0)));
        for ((r, origin), (c, b, time)) in rows.into_iter().take(o.top) {
            t.row(vec![r.into(), origin.into(), c.to_string(), bytes(b), s(time)]);
        }
        t.render(&mut out);
        out.push('\n');
    }

    // Point-to-point pairs.
    let mut pairs: Vec<(u32, i64, i64, i64, i64, i64)> = Vec::new();
    for m in &selected {
        for &(w, ms, bs, mr, br) in &m.peers {
            pairs.push((m.rank, w, ms, bs, mr, br));
        }
    }
    if !pairs.is_empty() {
        pairs.sort_by(|a, b| b.3.saturating_add(b.5).cmp(&a.3.saturating_add(a.5)).then((a.0, a.1).cmp(&(b.0, b.1))));
        out.push_str("Point-to-point and one-sided traffic: the busiest pairs (peers as ranks of MPI_COMM_WORLD)\n");
        let mut t = Table::new(["rank", "peer", "messages sent", "bytes sent", "messages received", "bytes received"]);
        for (r, w, ms, bs, mr, br) in pairs.into_iter().take(o.top) {
            let peer = if w < 0 { "unknown".to_string() } else { w.to_string() };
            t.row(vec![r.to_string(), peer, ms.to_string(), bytes(bs), mr.to_string(), bytes(br)]);
        }
        t.render(&mut out);
        out.push('\n');
    }

    if o.sites {
        if selected.iter().all(|m| m.sites.is_none()) {
            out.push_str("Call sites: this run did not keep them (run with SCOPE_PROFILER_MPI=summary,sites or calls,sites)\n");
        } else {
            // (routine, place, function, line) -> (calls, time, bytes sent, bytes received, both)
            type Key = (String, String, String, i64);
            let mut sites: BTreeMap<Key, (i64, i64, i64, i64, i64)> = BTreeMap::new();
            // Files written before sent and received bytes were kept apart have their sum only.
            let split = selected.iter().flat_map(|m| m.sites.iter().flatten()).all(|x| x.split.is_some());
            for m in &selected {
                for x in m.sites.iter().flatten() {
                    let place = if x.file.is_empty() { format!("{}+{:#x}", x.module, x.offset) } else { x.file.clone() };
                    let e = sites.entry((x.routine.clone(), place, x.function.clone(), x.line)).or_default();
                    let (sent, recv) = x.split.unwrap_or_default();
                    e.0 = e.0.saturating_add(x.calls);
                    e.1 = e.1.saturating_add(x.time_ns);
                    e.2 = e.2.saturating_add(sent);
                    e.3 = e.3.saturating_add(recv);
                    e.4 = e.4.saturating_add(x.bytes);
                }
            }
            let mut rows: Vec<_> = sites.into_iter().collect();
            rows.sort_by(|a, b| b.1.1.cmp(&a.1.1).then(a.0.cmp(&b.0)));
            out.push_str("Call sites by time (all selected ranks)\n");
            let header: Vec<&str> = if split {
                vec!["routine", "site", "function", "calls", "time [s]", "bytes sent", "bytes received"]
            } else {
                vec!["routine", "site", "function", "calls", "time [s]", "bytes sent+received"]
            };
            let mut t = Table::new(header).left_column(0).left_column(1).left_column(2).fit(fmt::line_budget(), &[1, 2]);
            for ((r, place, function, line), (c, time, sent, recv, both)) in rows.into_iter().take(o.top) {
                let at = if line > 0 { format!("{place}:{line}") } else { place };
                let mut row = vec![r, at, function, c.to_string(), s(time)];
                if split {
                    row.extend([bytes(sent), bytes(recv)]);
                } else {
                    row.push(bytes(both));
                }
                t.row(row);
            }
            t.render(&mut out);
            out.push('\n');
        }
    }
    out
}

fn kind_name(kind: i64) -> &'static str {
    match kind {
        1 => "MPI_COMM_WORLD",
        2 => "MPI_COMM_SELF",
        3 => "communicator",
        4 => "inter-communicator",
        5 => "window",
        _ => "-",
    }
}

/// One line for `sptool inspect` when the file has MPI data, else None.
pub fn inspect_line(ranks: &[RankMpi]) -> Option<String> {
    if ranks.is_empty() {
        return None;
    }
    let app: i64 = ranks.iter().map(|m| m.app_time_ns).fold(0, i64::saturating_add);
    let mpi: i64 = ranks.iter().map(|m| m.mpi_time_ns).fold(0, i64::saturating_add);
    let calls: i64 = ranks.iter().flat_map(|m| &m.routines).map(|r| r.calls).fold(0, i64::saturating_add);
    Some(format!(
        "MPI calls: {calls} on {} rank(s), {}% of the application time (mode {}); `sptool mpi FILE` reports them\n",
        ranks.len(),
        pct(mpi, app),
        ranks[0].mode
    ))
}

/// What `sptool tree` says of a file with no region but MPI calls (None: the file has no MPI
/// data either).
pub fn only_mpi_note(path: &Path) -> Result<Option<String>> {
    let ranks = read(path)?;
    Ok(inspect_line(&ranks).map(|line| {
        let f = path.display().to_string();
        let what = line.trim_end().trim_start_matches("MPI calls: ").replace("; `sptool mpi FILE` reports them", "");
        format!("{f}: no regions recorded; the file holds the program's MPI calls (rank<N>/mpi/): {what}; `sptool mpi {f}` shows them\n")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_units() {
        assert_eq!(bucket_label(0), "0 B");
        assert_eq!(bucket_label(4), "[8 B, 16 B)");
        assert_eq!(bucket_label(11), "[1 KiB, 2 KiB)");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(pct(1, 4), "25.00");
        assert_eq!(pct(1, 0), "-");
        let _ = bucket_label(63);
    }

    #[test]
    fn threads_apart_name_the_thread_that_waits() {
        let row = |routine: &str, thread: i64, calls: i64, time_ns: i64| RoutineRow { routine: routine.into(), thread, calls, time_ns, ..Default::default() };
        let m = RankMpi {
            rank: 0,
            mode: "summary".into(),
            family: "Open MPI".into(),
            app_time_ns: 10_000_000_000,
            mpi_time_ns: 3_360_000_000,
            routines: vec![row("MPI_Barrier", 0, 10, 2_240_000_000), row("MPI_Barrier", 1, 10, 1_120_000_000), row("MPI_Send", 1, 5, 1000)],
            ..Default::default()
        };
        let o = Options { top: 10, sites: false, ranks: None, threads: true };
        let text = render(Path::new("x.h5"), &[m.clone()], &o);
        assert!(text.contains("Time per thread that calls MPI"), "{text}");
        let t0 = text.lines().find(|l| l.split_whitespace().take(2).collect::<Vec<_>>() == ["0", "0"]).unwrap_or_else(|| panic!("{text}"));
        assert!(t0.contains("2.24") && t0.contains("MPI_Barrier") && t0.contains("22.40"), "{text}");
        let barrier = text.lines().find(|l| l.trim_start().starts_with("MPI_Barrier")).unwrap_or_else(|| panic!("{text}"));
        let cols: Vec<&str> = barrier.split_whitespace().collect();
        // min 1.12, mean 1.68, max 2.24 on thread 0, imbalance 1.33.
        assert_eq!(&cols[4..9], &["1.12", "1.68", "2.24", "0", "1.33"], "{text}");
        let plain = render(Path::new("x.h5"), &[m], &Options { threads: false, ..o });
        assert!(!plain.contains("Time per thread") && !plain.contains("thread of the max"), "{plain}");
    }
}
