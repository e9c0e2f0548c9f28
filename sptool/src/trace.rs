//! `sptool export --format chrome-trace`: every recorded call as one complete event
//! (`"ph": "X"`) of the Chrome trace event format, which Perfetto and chrome://tracing open.
//! Process = rank, thread = recording thread, names as recorded. Times are microseconds
//! (with nanosecond decimals) from the earliest call, with every rank moved onto rank 0's
//! clock by subtracting its `clock_offset_ns`.
//!
//! The output is streamed: one region of one rank is in memory at a time. With
//! `--max-events N` only the N longest calls are written (N kept in memory), and what was
//! left out is summarized in `otherData.left_out` and on standard error.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::io::Write;
use std::path::Path;


use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::h5util::{self, Member};

/// Where one region's calls on one rank are stored.
enum Place {
    /// Schema 1: a region group (in `rank<N>/regions`) with start_times, end_times and thread_ids.
    Group(String, Member),
    /// Schemas 2 and 3: rows `offset..offset + count` of the shared event columns.
    Rows { offset: usize, count: usize },
}

struct Run {
    rank: u32,
    /// Index into [`Source::names`].
    name: usize,
    place: Place,
}

/// One call, aligned onto rank 0's clock.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Call {
    dur: i64,
    start: i64,
    rank: u32,
    tid: i64,
    name: usize,
}

/// The calls of a file, run by run.
struct Source {
    file: h5util::File,
    names: Vec<String>,
    runs: Vec<Run>,
    /// Schemas 2/3: the event columns are start gaps and durations (schema 3).
    deltas: bool,
    offsets: BTreeMap<u32, i64>,
    /// Per rank: the OS thread ids, indexed by thread id (rank groups or the rank table).
    os_tids: BTreeMap<u32, Vec<i64>>,
    hosts: BTreeMap<u32, String>,
}

impl Source {
    fn open(path: &Path, filter: &Filter) -> Result<Source> {
        let (file, _) = h5util::open(path)?;
        let schema = file.attr_i64(crate::read::SCHEMA_ATTR).unwrap_or(1);
        let ranks = crate::read::rank_groups(&file)?;
        let mut src = Source {
            names: Vec::new(),
            runs: Vec::new(),
            deltas: false,
            offsets: BTreeMap::new(),
            os_tids: BTreeMap::new(),
            hosts: BTreeMap::new(),
            file,
        };
        for (rank, name) in ranks {
            if !filter.rank(rank) {
                continue;
            }
            let g = src.file.group(&name)?;
            src.offsets.insert(rank, g.attr_i64("clock_offset_ns").unwrap_or(0));
            if let Some(crate::model::AttrValue::IntArray(ids)) = g.attr("thread_os_ids") {
                src.os_tids.insert(rank, ids);
            }
            if let Some(host) = g.attr_string("hostname") {
                src.hosts.insert(rank, host);
            }
            if schema == 1 && g.has("regions") {
                let regions = g.group("regions")?;
                for member in regions.subgroups()? {
                    let region = regions.member(&member)?;
                    let tag = region.attr_string("tag").unwrap_or_else(|| member.name.replace('|', "/"));
                    if filter.name(&tag) {
                        let index = src.name_index(tag);
                        src.runs.push(Run { rank, name: index, place: Place::Group(format!("{name}/regions"), member) });
                    }
                }
            }
        }
        if schema != 1 {
            // scope_profiler's schema-3 files keep the rank attributes in a table.
            for (rank, attrs) in crate::ranks::read_table(&src.file)?.unwrap_or_default() {
                if !filter.rank(rank) {
                    continue;
                }
                for (name, value) in attrs {
                    match (name.as_str(), value) {
                        ("clock_offset_ns", crate::model::AttrValue::Int(o)) => {
                            src.offsets.insert(rank, o);
                        }
                        ("thread_os_ids", crate::model::AttrValue::IntArray(ids)) => {
                            src.os_tids.insert(rank, ids);
                        }
                        ("hostname", crate::model::AttrValue::Str(h)) => {
                            src.hosts.insert(rank, h);
                        }
                        _ => {}
                    }
                }
            }
            src.columnar_runs(filter)?;
        }
        Ok(src)
    }

    fn name_index(&mut self, name: String) -> usize {
        match self.names.iter().position(|n| *n == name) {
            Some(i) => i,
            None => {
                self.names.push(name);
                self.names.len() - 1
            }
        }
    }

    fn columnar_runs(&mut self, filter: &Filter) -> Result<()> {
        let file = &self.file;
        if file.attr_string("storage_layout").as_deref() == Some("aggregate") {
            return Err(Error::new("holds aggregates only (counts and totals per region), not single calls: there is no timeline to export"));
        }
        let names = file.group("region_table")?.read_strings("names")?;
        let index = file.group("rank_region_index")?;
        let ids = index.read_i64("region_ids")?;
        let ranks = index.read_i64("ranks")?;
        let offsets = index.read_i64("event_offsets")?;
        let counts = index.read_i64("event_counts")?;
        let events = file.group("events")?;
        self.deltas = events.has("start_deltas");
        // The rows must fit the columns and not claim more events than they hold.
        let column = if self.deltas { "start_deltas" } else { "start_times" };
        let len = events.dataset(column)?.shape()?.first().copied().unwrap_or(0);
        let rows = ids.len().min(ranks.len()).min(offsets.len()).min(counts.len());
        crate::columnar::check_rows(&offsets[..rows], &counts[..rows], len)?;
        for row in 0..rows {
            let (Ok(rank), Some(name)) = (u32::try_from(ranks[row]), usize::try_from(ids[row]).ok().and_then(|i| names.get(i))) else {
                return Err(Error::new(format!("is damaged: rank_region_index row {row} is out of range")));
            };
            if !filter.rank(rank) || !filter.name(name) || offsets[row] < 0 || counts[row] <= 0 {
                continue;
            }
            self.offsets.entry(rank).or_insert(0);
            let index = self.name_index(name.clone());
            self.runs.push(Run { rank, name: index, place: Place::Rows { offset: offsets[row] as usize, count: counts[row] as usize } });
        }
        Ok(())
    }

    /// The calls of one run: (starts, durations, thread ids), starts not yet aligned.
    fn load(&self, run: &Run) -> Result<(Vec<i64>, Vec<i64>, Vec<i64>)> {
        match &run.place {
            Place::Group(regions, member) => {
                let g = self.file.group(regions)?.member(member)?;
                let starts = g.read_i64("start_times")?;
                let ends = g.read_i64("end_times")?;
                let tids = if g.has("thread_ids") { g.read_i64("thread_ids")? } else { Vec::new() };
                let durs = starts.iter().zip(&ends).map(|(s, e)| e.wrapping_sub(*s)).collect();
                Ok((starts, durs, tids))
            }
            Place::Rows { offset, count } => {
                let events = self.file.group("events")?;
                let range = *offset as u64..(offset + count) as u64;
                let slice = |name: &str| -> Result<Vec<i64>> { events.dataset(name)?.read_i64_range(range.clone()) };
                let tids = if events.has("thread_ids") { slice("thread_ids")? } else { Vec::new() };
                if self.deltas {
                    let gaps = slice("start_deltas")?;
                    let mut t = 0i64;
                    let starts = gaps.iter().map(|g| {
                        t = t.wrapping_add(*g);
                        t
                    });
                    Ok((starts.collect(), slice("durations")?, tids))
                } else {
                    let starts = slice("start_times")?;
                    let ends = slice("end_times")?;
                    let durs = starts.iter().zip(&ends).map(|(s, e)| e.wrapping_sub(*s)).collect();
                    Ok((starts, durs, tids))
                }
            }
        }
    }

    /// The earliest start on rank 0's clock and the number of calls, reading only the starts.
    fn origin_and_count(&self) -> Result<(Option<i64>, u64)> {
        let mut origin: Option<i64> = None;
        let mut count = 0u64;
        for run in &self.runs {
            let offset = self.offsets.get(&run.rank).copied().unwrap_or(0);
            let starts = match &run.place {
                Place::Group(regions, member) => self.file.group(regions)?.member(member)?.read_i64("start_times")?,
                Place::Rows { offset, count } => {
                    let events = self.file.group("events")?;
                    let name = if self.deltas { "start_deltas" } else { "start_times" };
                    let mut v = events.dataset(name)?.read_i64_range(*offset as u64..(offset + count) as u64)?;
                    if self.deltas {
                        let mut t = 0i64;
                        for x in v.iter_mut() {
                            t = t.wrapping_add(*x);
                            *x = t;
                        }
                    }
                    v
                }
            };
            count += starts.len() as u64;
            if let Some(min) = starts.iter().min() {
                let aligned = min.wrapping_sub(offset);
                origin = Some(origin.map_or(aligned, |o| o.min(aligned)));
            }
        }
        Ok((origin, count))
    }

    /// Every call of every run, in file order.
    fn for_each_call(&self, mut f: impl FnMut(Call) -> Result<()>) -> Result<()> {
        for run in &self.runs {
            let (starts, durs, tids) = self.load(run)?;
            let offset = self.offsets.get(&run.rank).copied().unwrap_or(0);
            for (i, (&s, &d)) in starts.iter().zip(&durs).enumerate() {
                f(Call { dur: d, start: s.wrapping_sub(offset), rank: run.rank, tid: tids.get(i).copied().unwrap_or(0), name: run.name })?;
            }
        }
        Ok(())
    }
}

/// Microseconds with three decimals, from integer nanoseconds (exact, no float rounding).
fn micros(ns: i128) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    format!("{sign}{}.{:03}", a / 1000, a % 1000)
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// What `--max-events` left out.
struct LeftOut {
    calls: u64,
    total_ns: i128,
    longest_ns: i64,
    per_region: BTreeMap<usize, u64>,
}

struct Output<'a> {
    w: Box<dyn Write + 'a>,
    first: bool,
    path: &'a Path,
    broken_pipe: bool,
}

impl Output<'_> {
    fn raw(&mut self, text: &str) -> Result<()> {
        self.w.write_all(text.as_bytes()).map_err(|e| self.fail(e))
    }

    fn fail(&mut self, e: std::io::Error) -> Error {
        self.broken_pipe |= e.kind() == std::io::ErrorKind::BrokenPipe;
        write_error(self.path, e)
    }

    fn event(&mut self, text: &str) -> Result<()> {
        let sep = if self.first { "\n" } else { ",\n" };
        self.first = false;
        self.raw(sep)?;
        self.raw(text)
    }
}

fn write_error(path: &Path, e: std::io::Error) -> Error {
    if path.as_os_str() == "-" {
        Error::new(format!("cannot write to standard output: {e}"))
    } else {
        Error::in_file(path, format!("cannot write the output: {e}"))
    }
}

/// Export `input` as a Chrome trace to `out` (`-` for standard output).
pub fn export(input: &Path, filter: &Filter, max_events: Option<usize>, out: &Path) -> Result<()> {
    let src = Source::open(input, filter).map_err(|e| e.or_file(input))?;
    // The time origin: the earliest aligned start, so the trace begins at 0.
    let (origin, total_calls) = src.origin_and_count().map_err(|e| e.or_file(input))?;
    let origin = origin.unwrap_or(0);

    // A file is written as every output of sptool is (`safe_file`): privately, then renamed
    // into place, never through an existing file or symlink.
    let mut file = if out.as_os_str() == "-" {
        None
    } else {
        Some(crate::export::create_output(out, "cannot create the output")?)
    };
    let w: Box<dyn Write> = match file.as_mut() {
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
        Some(f) => Box::new(std::io::BufWriter::new(f)),
    };
    let mut o = Output { w, first: true, path: out, broken_pipe: false };
    let result = write_trace(&src, input, origin, total_calls, max_events, &mut o);
    let result = result.and_then(|()| o.w.flush().map_err(|e| o.fail(e)));
    let broken_pipe = o.broken_pipe;
    drop(o);
    match (result, file) {
        // A reader that stopped early (`| head`) is not an error.
        (Err(_), None) if broken_pipe => Ok(()),
        (Err(e), _) => Err(e),
        (Ok(()), Some(f)) => crate::export::finish_output(f, out).map_err(|e| Error::in_file(out, format!("cannot write the output: {e}"))),
        (Ok(()), None) => Ok(()),
    }
}

fn write_trace(src: &Source, input: &Path, origin: i64, total_calls: u64, max_events: Option<usize>, o: &mut Output) -> Result<()> {
    o.raw("{\"traceEvents\":[")?;
    let mut seen: BTreeSet<(u32, i64)> = BTreeSet::new();
    let mut write_call = |o: &mut Output, c: &Call| -> Result<()> {
        seen.insert((c.rank, c.tid));
        o.event(&format!(
            "{{\"name\":{},\"cat\":\"region\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{},\"tid\":{}}}",
            json_str(&src.names[c.name]),
            micros(c.start as i128 - origin as i128),
            micros(c.dur as i128),
            c.rank,
            c.tid
        ))
    };
    let mut left = None;
    match max_events {
        None => src.for_each_call(|c| write_call(o, &c)).map_err(|e| e.or_file(input))?,
        Some(n) => {
            // The n longest calls: a min-heap on (duration, ...) of at most n entries.
            let mut heap: BinaryHeap<std::cmp::Reverse<Call>> = BinaryHeap::with_capacity(n.min(1 << 20) + 1);
            let mut out = LeftOut { calls: 0, total_ns: 0, longest_ns: 0, per_region: BTreeMap::new() };
            let drop_call = |c: Call, out: &mut LeftOut| {
                out.calls += 1;
                out.total_ns += c.dur as i128;
                out.longest_ns = out.longest_ns.max(c.dur);
                *out.per_region.entry(c.name).or_default() += 1;
            };
            src.for_each_call(|c| {
                if n == 0 {
                    drop_call(c, &mut out);
                } else if heap.len() < n {
                    heap.push(std::cmp::Reverse(c));
                } else if heap.peek().is_some_and(|m| c > m.0) {
                    let std::cmp::Reverse(dropped) = heap.pop().unwrap();
                    heap.push(std::cmp::Reverse(c));
                    drop_call(dropped, &mut out);
                } else {
                    drop_call(c, &mut out);
                }
                Ok(())
            })
            .map_err(|e| e.or_file(input))?;
            let mut kept: Vec<Call> = heap.into_iter().map(|r| r.0).collect();
            kept.sort_by_key(|c| (c.rank, c.tid, c.start));
            for c in &kept {
                write_call(o, c)?;
            }
            left = Some(out);
        }
    }
    // Names of processes (ranks) and threads, after the events (order does not matter).
    let ranks: BTreeSet<u32> = seen.iter().map(|(r, _)| *r).collect();
    for rank in &ranks {
        let host = src.hosts.get(rank).map(|h| format!(" ({h})")).unwrap_or_default();
        o.event(&format!("{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{rank},\"tid\":0,\"args\":{{\"name\":{}}}}}", json_str(&format!("rank {rank}{host}"))))?;
        o.event(&format!("{{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":{rank},\"tid\":0,\"args\":{{\"sort_index\":{rank}}}}}"))?;
    }
    for (rank, tid) in &seen {
        let os = usize::try_from(*tid).ok().and_then(|t| src.os_tids.get(rank).and_then(|ids| ids.get(t)));
        let label = match os {
            Some(os) => format!("thread {tid} (tid {os})"),
            None => format!("thread {tid}"),
        };
        o.event(&format!("{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{rank},\"tid\":{tid},\"args\":{{\"name\":{}}}}}", json_str(&label)))?;
    }
    o.raw("\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{")?;
    let offsets: Vec<String> = src.offsets.iter().map(|(r, off)| format!("\"{r}\":{off}")).collect();
    o.raw(&format!(
        "\"source\":{},\"time_origin_ns\":{origin},\"clock_offsets_ns\":{{{}}},\"calls\":{total_calls},\"events_written\":{}",
        json_str(&input.display().to_string()),
        offsets.join(","),
        total_calls - left.as_ref().map_or(0, |l| l.calls)
    ))?;
    if let Some(l) = &left {
        let per_region: Vec<String> =
            l.per_region.iter().map(|(name, n)| format!("{}:{n}", json_str(&src.names[*name]))).collect();
        let note = format!(
            "--max-events {}: the {} longest of {total_calls} calls were written; {} shorter call(s) left out (each at most {} us, {} us in all)",
            max_events.unwrap_or(0),
            total_calls - l.calls,
            l.calls,
            micros(l.longest_ns as i128),
            micros(l.total_ns)
        );
        o.raw(&format!(
            ",\"left_out\":{{\"calls\":{},\"total_us\":{},\"longest_us\":{},\"per_region\":{{{}}},\"note\":{}}}",
            l.calls,
            micros(l.total_ns),
            micros(l.longest_ns as i128),
            per_region.join(","),
            json_str(&note)
        ))?;
        if l.calls > 0 {
            eprintln!("sptool: {}: {note}", input.display());
        }
    }
    o.raw("}}\n")
}

/// One call for the other timeline exports: start on rank 0's clock (ns), duration, thread id,
/// and the region as an index into [`Timeline::names`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TimedCall {
    pub start: i64,
    pub dur: i64,
    /// The thread id (the file's are small indices; larger ones are clamped).
    pub tid: u32,
    pub name: u32,
}

/// The calls of a file rank by rank (one rank's calls in memory at a time), for the OTF2 export.
pub struct Timeline {
    src: Source,
}

impl Timeline {
    pub fn open(path: &Path, filter: &Filter) -> Result<Timeline> {
        Ok(Timeline { src: Source::open(path, filter).map_err(|e| e.or_file(path))? })
    }

    pub fn names(&self) -> &[String] {
        &self.src.names
    }

    pub fn host(&self, rank: u32) -> Option<&str> {
        self.src.hosts.get(&rank).map(String::as_str)
    }

    /// The OS thread id of a rank's thread, where the file has it.
    pub fn os_tid(&self, rank: u32, tid: i64) -> Option<i64> {
        usize::try_from(tid).ok().and_then(|t| self.src.os_tids.get(&rank).and_then(|ids| ids.get(t)).copied())
    }

    /// The ranks that have calls, sorted.
    pub fn ranks(&self) -> Vec<u32> {
        self.src.runs.iter().map(|r| r.rank).collect::<BTreeSet<u32>>().into_iter().collect()
    }

    /// Every call of `rank`, aligned onto rank 0's clock, in file order.
    pub fn rank_calls(&self, rank: u32) -> Result<Vec<TimedCall>> {
        let offset = self.src.offsets.get(&rank).copied().unwrap_or(0);
        let mut out = Vec::new();
        for run in self.src.runs.iter().filter(|r| r.rank == rank) {
            let (starts, durs, tids) = self.src.load(run)?;
            out.reserve(starts.len());
            for (i, (&s, &d)) in starts.iter().zip(&durs).enumerate() {
                let tid = u32::try_from(tids.get(i).copied().unwrap_or(0).max(0)).unwrap_or(u32::MAX);
                out.push(TimedCall { start: s.wrapping_sub(offset), dur: d, tid, name: run.name as u32 });
            }
        }
        Ok(out)
    }
}
