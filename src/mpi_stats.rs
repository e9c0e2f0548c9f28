//! What the program's MPI calls leave beside its regions, as plain data (no profiler state, no
//! MPI): the setting that chooses what is kept (`SCOPE_PROFILER_MPI`), one call as the
//! wrappers describe it (`Event`), a thread's aggregates of its calls (`ThreadMpi`), and a
//! rank's result (`MpiProfile`), which is gathered to rank 0 and written as `rank<N>/mpi/`
//! (docs/mpi.md). Times are clock ticks in `ThreadMpi`, nanoseconds in `MpiProfile`.

use crate::model::mpi::*;
use rustc_hash::FxHashMap;

/// What `SCOPE_PROFILER_MPI` keeps of the program's MPI calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Nothing: the wrappers call MPI and nothing else (not even the implicit setup).
    Off,
    /// Per routine and communicator: calls, time, bytes, message sizes, peers (the default).
    #[default]
    Summary,
    /// The summary, and every call as a region named after the routine.
    Calls,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Summary => "summary",
            Mode::Calls => "calls",
        }
    }
}

/// The parsed `SCOPE_PROFILER_MPI`: a mode and options, comma-separated (`calls,sites`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settings {
    pub mode: Mode,
    /// Keep the call sites (return addresses, resolved to file:line at finalize).
    pub sites: bool,
}

impl Settings {
    /// Parse a value; Err names what was not understood (the caller warns and keeps the rest).
    pub fn parse(value: &str) -> Result<Settings, String> {
        let mut s = Settings::default();
        let mut bad = Vec::new();
        for word in value.split([',', ' ', ':']).map(str::trim).filter(|w| !w.is_empty()) {
            match word.to_ascii_lowercase().as_str() {
                "off" | "0" | "no" | "none" => s.mode = Mode::Off,
                "summary" | "on" | "1" | "yes" => s.mode = Mode::Summary,
                "calls" | "trace" => s.mode = Mode::Calls,
                "sites" => s.sites = true,
                _ => bad.push(word.to_string()),
            }
        }
        if bad.is_empty() { Ok(s) } else { Err(format!("{bad:?} not understood (expected off, summary or calls, optionally with ,sites)")) }
    }
}

/// Event flags (the wrappers' `SP_EV_*`, mpi/c/sp_mpi_core.h).
pub mod flags {
    pub const POLL: u32 = 1 << 0;
    pub const EMPTY: u32 = 1 << 1;
    pub const P2P: u32 = 1 << 2;
    pub const COLL: u32 = 1 << 3;
    pub const PERSISTENT: u32 = 1 << 4;
    pub const COMPLETES: u32 = 1 << 5;
    pub const STARTS: u32 = 1 << 6;
    pub const FREES: u32 = 1 << 7;
    pub const FAILED: u32 = 1 << 8;
    pub const RMA: u32 = 1 << 9;
    pub const IO: u32 = 1 << 10;
    /// The call created a request (`request`, `request_slot` of the wrappers' event are set).
    pub const REQUEST: u32 = 1 << 11;
    /// Any of the above that the request tables must see.
    pub const REQUESTS: u32 = STARTS | COMPLETES | FREES | REQUEST;
}

/// Kinds of communicator (`comm_kind` in the file).
pub mod comm_kind {
    pub const NONE: i32 = 0;
    pub const WORLD: i32 = 1;
    pub const SELF: i32 = 2;
    pub const INTRA: i32 = 3;
    pub const INTER: i32 = 4;
    pub const WINDOW: i32 = 5;

    pub fn name(kind: i32) -> &'static str {
        match kind {
            WORLD => "MPI_COMM_WORLD",
            SELF => "MPI_COMM_SELF",
            INTRA => "communicator",
            INTER => "inter-communicator",
            WINDOW => "window",
            _ => "-",
        }
    }
}

/// No peer; a peer not known (MPI_ANY_SOURCE without a status).
pub const PEER_NONE: i32 = -1;
pub const PEER_UNKNOWN: i32 = -2;

/// One finished MPI call, as the wrapper saw it (times in clock ticks). Laid out as the head
/// of the wrappers' `sp_mpi_event` (mpi/c/sp_mpi_core.h), which the core reads in place: the
/// wrapper fills everything but `end`, which the core reads when the call is handed in.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Event {
    pub routine: u32,
    pub flags: u32,
    pub start: i64,
    pub end: i64,
    pub comm: u64,
    pub comm_size: i32,
    pub comm_kind: i32,
    pub dest: i32,
    pub source: i32,
    pub sent: u64,
    pub received: u64,
    pub site: u64,
}

impl Event {
    /// How long the call took (never negative).
    #[inline(always)]
    pub fn duration(&self) -> i64 {
        self.end.wrapping_sub(self.start).max(0)
    }
}

/// `CallStats` as a thread counts them: the histogram inline (no pointer to follow, no bounds
/// check: a bucket is < 64 by construction).
#[derive(Debug, Clone)]
pub struct HotStats {
    pub calls: u64,
    pub time: i64,
    pub min: i64,
    pub max: i64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub failed: u64,
    pub polls_empty: u64,
    pub poll_time: i64,
    pub sizes: [u64; SIZE_BUCKETS],
}

impl Default for HotStats {
    fn default() -> HotStats {
        HotStats { calls: 0, time: 0, min: i64::MAX, max: 0, bytes_sent: 0, bytes_received: 0, failed: 0, polls_empty: 0, poll_time: 0, sizes: [0; SIZE_BUCKETS] }
    }
}

impl HotStats {
    #[inline(always)]
    fn add(&mut self, e: &Event, duration: i64) {
        if e.flags & flags::EMPTY != 0 {
            self.polls_empty += 1;
            self.poll_time = self.poll_time.wrapping_add(duration);
            return;
        }
        self.min = self.min.min(duration);
        self.max = self.max.max(duration);
        self.calls += 1;
        self.time = self.time.wrapping_add(duration);
        self.bytes_sent += e.sent;
        self.bytes_received += e.received;
        self.failed += ((e.flags & flags::FAILED) != 0) as u64;
        self.sizes[size_bucket(e.sent.max(e.received)) & (SIZE_BUCKETS - 1)] += 1;
    }

    fn to_stats(&self) -> CallStats {
        CallStats {
            calls: self.calls,
            time: self.time,
            min: if self.calls == 0 { 0 } else { self.min },
            max: self.max,
            bytes_sent: self.bytes_sent,
            bytes_received: self.bytes_received,
            failed: self.failed,
            polls_empty: self.polls_empty,
            poll_time: self.poll_time,
            sizes: self.sizes.to_vec(),
        }
    }
}

/// A thread's calls of one routine on one communicator.
#[derive(Debug, Clone)]
pub struct Row {
    pub comm: u64,
    pub size: i32,
    pub kind: i32,
    pub stats: HotStats,
}

/// What a request table keeps of a request until it completes: its origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    pub routine: u32,
    pub sent: u64,
    pub received: u64,
    pub dest: i32,
    pub source: i32,
    pub persistent: bool,
}

impl Origin {
    /// An unused entry's.
    const NONE: Origin = Origin { routine: 0, sent: 0, received: 0, dest: PEER_NONE, source: PEER_NONE, persistent: false };
}

/// The live requests of a thread (or of a shard of the shared table), by handle value, each
/// with the address of the program's variable the handle was written to (its slot).
///
/// A handle value does not name one request: Open MPI (`ompi_request_empty`) and MPICH (a
/// built-in completed request) give one and the same handle to every nonblocking call whose
/// request completed at once (eager and inline sends, sends to self, MPI_PROC_NULL). So a
/// handle value already live starts a list, and a completion takes the entry of that handle
/// written to the same slot (the program completes the variable it passed), else the oldest:
/// every request created is completed once, with its own routine and bytes, whatever the
/// handle values (also when the program copies its handles from the variable it passed to
/// another before completing them: the oldest entries are taken first then).
///
/// While few requests are live (at most `FEW`, as in most programs: a halo exchange's handful)
/// they are all kept in a short list in creation order, searched from the oldest; more than
/// that, all of them go to maps by handle value until none is left. Either way a completion
/// takes the oldest live entry of its handle written to its slot, else the oldest of its handle.
#[derive(Debug, Default)]
pub struct RequestTable {
    /// All live requests while there are at most `FEW` and `many` is empty: (handle, slot,
    /// origin), oldest first.
    few: Few,
    /// All live requests otherwise (`few` is then empty).
    many: HandleMap,
}

const FEW: usize = 8;

/// The short list: up to `FEW` entries in place (no allocation, no call to move them).
#[derive(Debug, Clone, Copy)]
struct Few {
    len: usize,
    entries: [(u64, u64, Origin); FEW],
}

impl Default for Few {
    fn default() -> Few {
        Few { len: 0, entries: [(0, 0, Origin::NONE); FEW] }
    }
}

impl Few {
    #[inline(always)]
    fn live(&self) -> &[(u64, u64, Origin)] {
        // (`len` never exceeds FEW; the min lets the compiler drop the bounds check.)
        &self.entries[..self.len.min(FEW)]
    }

    /// Remove entry `i` (< len), keeping the others in order: a short loop, inline.
    #[inline(always)]
    fn remove(&mut self, i: usize) {
        let n = self.len.min(FEW);
        for k in i..n.saturating_sub(1) {
            self.entries[k] = self.entries[k + 1];
        }
        self.len = n.saturating_sub(1);
    }
}

impl RequestTable {
    pub fn len(&self) -> usize {
        self.few.len + self.many.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keep a request created by `origin` under `handle` at `slot`; false when the table holds
    /// `cap` entries already (the request is then untracked).
    #[inline]
    pub fn insert(&mut self, handle: u64, slot: u64, origin: Origin, cap: usize) -> bool {
        if self.len() >= cap {
            return false;
        }
        if self.many.is_empty() && self.few.len < FEW {
            self.few.entries[self.few.len] = (handle, slot, origin);
            self.few.len += 1;
            return true;
        }
        self.insert_many(handle, slot, origin, cap)
    }

    #[cold]
    fn insert_many(&mut self, handle: u64, slot: u64, origin: Origin, cap: usize) -> bool {
        // The short list is full: everything moves to the maps, in creation order.
        for &(h, s, o) in self.few.live() {
            self.many.insert(h, s, o, usize::MAX);
        }
        self.few.len = 0;
        self.many.insert(handle, slot, origin, cap)
    }

    /// Where in the short list the request of `handle` at `slot` is (else the oldest of `handle`).
    #[inline(always)]
    fn find_few(&self, handle: u64, slot: u64) -> Option<usize> {
        let mut oldest = None;
        for (i, e) in self.few.live().iter().enumerate() {
            if e.0 == handle {
                if e.1 == slot {
                    return Some(i);
                }
                oldest = oldest.or(Some(i));
            }
        }
        oldest
    }

    /// The origin of a live request (the entry at `slot` if the handle is shared).
    pub fn get(&self, handle: u64, slot: u64) -> Option<Origin> {
        if !self.many.is_empty() {
            return self.many.get(handle, slot);
        }
        self.find_few(handle, slot).map(|i| self.few.live()[i].2)
    }

    /// A request completed: its origin; forgotten unless persistent (a completed persistent
    /// request stays, inactive, until it is freed).
    #[inline]
    pub fn complete(&mut self, handle: u64, slot: u64) -> Option<Origin> {
        if !self.many.is_empty() {
            return self.many.complete(handle, slot);
        }
        let i = self.find_few(handle, slot)?;
        let o = self.few.live()[i].2;
        if !o.persistent {
            self.few.remove(i);
        }
        Some(o)
    }

    /// A request was freed.
    pub fn remove(&mut self, handle: u64, slot: u64) {
        if !self.many.is_empty() {
            return self.many.remove(handle, slot);
        }
        if let Some(i) = self.find_few(handle, slot) {
            self.few.remove(i);
        }
    }
}

/// The maps behind a `RequestTable` with more than a few live requests.
#[derive(Debug, Default)]
struct HandleMap {
    first: FxHashMap<u64, (u64, Origin)>,
    /// The further live entries of handle values that `first` has (in creation order).
    more: FxHashMap<u64, std::collections::VecDeque<(u64, Origin)>>,
    /// Entries in `more`.
    more_len: usize,
}

impl HandleMap {
    fn len(&self) -> usize {
        self.first.len() + self.more_len
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keep a request created by `origin` under `handle` at `slot`; false when the table holds
    /// `cap` entries already (the request is then untracked).
    #[inline]
    fn insert(&mut self, handle: u64, slot: u64, origin: Origin, cap: usize) -> bool {
        let n = self.first.len() + self.more_len;
        match self.first.entry(handle) {
            std::collections::hash_map::Entry::Vacant(v) => {
                if n >= cap {
                    return false;
                }
                v.insert((slot, origin));
                true
            }
            std::collections::hash_map::Entry::Occupied(_) => self.insert_more(handle, slot, origin, cap),
        }
    }

    #[cold]
    fn insert_more(&mut self, handle: u64, slot: u64, origin: Origin, cap: usize) -> bool {
        if self.first.len() + self.more_len >= cap {
            return false;
        }
        self.more.entry(handle).or_default().push_back((slot, origin));
        self.more_len += 1;
        true
    }

    /// The origin of a live request (the entry at `slot` if the handle is shared).
    fn get(&self, handle: u64, slot: u64) -> Option<Origin> {
        let &(s, o) = self.first.get(&handle)?;
        if s != slot {
            if let Some(e) = self.more.get(&handle).and_then(|l| l.iter().find(|e| e.0 == slot)) {
                return Some(e.1);
            }
        }
        Some(o)
    }

    /// A request completed: its origin; forgotten unless persistent (a completed persistent
    /// request stays, inactive, until it is freed).
    #[inline]
    fn complete(&mut self, handle: u64, slot: u64) -> Option<Origin> {
        if self.more_len == 0 {
            let o = self.first.get(&handle)?.1;
            if !o.persistent {
                self.first.remove(&handle);
            }
            return Some(o);
        }
        self.take(handle, slot, false)
    }

    /// A request was freed.
    fn remove(&mut self, handle: u64, slot: u64) {
        let _ = self.take(handle, slot, true);
    }

    /// The entry of `handle` at `slot` (else the oldest), removed if `always` or not persistent.
    fn take(&mut self, handle: u64, slot: u64, always: bool) -> Option<Origin> {
        let &(s, o) = self.first.get(&handle)?;
        let Some(list) = self.more.get_mut(&handle) else {
            if always || !o.persistent {
                self.first.remove(&handle);
            }
            return Some(o);
        };
        if s != slot {
            if let Some(i) = list.iter().position(|e| e.0 == slot) {
                let o = list[i].1;
                if always || !o.persistent {
                    let _ = list.remove(i);
                    self.more_len -= 1;
                    if list.is_empty() {
                        self.more.remove(&handle);
                    }
                }
                return Some(o);
            }
        }
        if always || !o.persistent {
            // The next in creation order takes the first place.
            let next = list.pop_front().expect("a list in `more` is never empty");
            self.more_len -= 1;
            if list.is_empty() {
                self.more.remove(&handle);
            }
            self.first.insert(handle, next);
        }
        Some(o)
    }
}

/// The origin of a completed request that no table knew (created before recording began, by a
/// routine that is not wrapped, or dropped from a full table).
pub const UNKNOWN_ORIGIN: u32 = u32::MAX;

/// Highest world rank kept in the peer table (beyond: counted as unknown).
const MAX_PEER: i32 = 1 << 24;
/// Distinct (routine, site) pairs kept per thread.
const MAX_PAIRS: usize = 1 << 16;
/// Distinct (completing routine, origin routine) pairs kept per thread (a program has a few:
/// each Wait/Test routine with each routine that creates requests).
const MAX_COMPLETION_PAIRS: usize = 1024;

/// One thread's aggregates, in clock ticks. Only its thread touches it while recording.
#[derive(Debug, Default)]
pub struct ThreadMpi {
    /// Per routine id: one row per communicator.
    pub routines: Vec<Vec<Row>>,
    /// Per world rank.
    pub peers: Vec<PeerStats>,
    /// Messages whose peer was not known.
    pub unknown_peer: PeerStats,
    /// (completing routine, origin routine) pairs: a handful per program, searched in order.
    pub completions: Vec<((u32, u32), Completions)>,
    /// The requests this thread created and not yet completed, when requests are not shared
    /// between threads (below MPI_THREAD_SERIALIZED: see `mpi_calls::requests`).
    pub requests: RequestTable,
    /// Requests a full table could not keep.
    pub untracked_requests: u64,
    pub sites: FxHashMap<(u32, u64), SiteStats>,
    /// Pairs not kept because the tables were full.
    pub dropped_pairs: u64,
}

impl ThreadMpi {
    /// Account one finished call (its starts, completions and created request are handled by
    /// the caller, which owns the request table).
    // Inlined into the MPI wrappers' end (the compiler stops doing so on its own as the crate grows).
    #[inline(always)]
    pub fn record(&mut self, e: &Event, keep_site: bool) {
        self.row(e).stats.add(e, e.duration());
        if e.flags & (flags::P2P | flags::RMA) != 0 && e.flags & flags::EMPTY == 0 {
            self.traffic(e);
        }
        if keep_site {
            self.site(e);
        }
    }

    /// The row of the call's routine and communicator: almost always the first of its routine.
    #[inline(always)]
    fn row(&mut self, e: &Event) -> &mut Row {
        let r = e.routine as usize;
        if let Some(first) = self.routines.get_mut(r).and_then(|rows| rows.first_mut()) {
            if first.comm == e.comm && first.size == e.comm_size && first.kind == e.comm_kind {
                // (Indexed again: returning `first` from inside the `if let` does not borrow-check.)
                return &mut self.routines[r][0];
            }
        }
        self.row_slow(e)
    }

    #[cold]
    fn row_slow(&mut self, e: &Event) -> &mut Row {
        let r = e.routine as usize;
        if r >= self.routines.len() {
            self.routines.resize_with(r + 1, Vec::new);
        }
        let rows = &mut self.routines[r];
        let i = match rows.iter().position(|x| x.comm == e.comm && x.size == e.comm_size && x.kind == e.comm_kind) {
            Some(i) => i,
            None => {
                rows.push(Row { comm: e.comm, size: e.comm_size, kind: e.comm_kind, stats: HotStats::default() });
                rows.len() - 1
            }
        };
        &mut rows[i]
    }

    #[inline(always)]
    fn traffic(&mut self, e: &Event) {
        if e.sent > 0 || e.dest >= 0 {
            let p = self.peer(e.dest);
            p.messages_sent += 1;
            p.bytes_sent += e.sent;
        }
        if e.received > 0 || e.source >= 0 {
            let p = self.peer(e.source);
            p.messages_received += 1;
            p.bytes_received += e.received;
        }
    }

    #[cold]
    fn site(&mut self, e: &Event) {
        let key = (e.routine, e.site);
        if self.sites.len() < MAX_PAIRS || self.sites.contains_key(&key) {
            let s = self.sites.entry(key).or_default();
            s.calls += 1;
            s.time = s.time.wrapping_add(e.duration());
            s.bytes_sent += e.sent;
            s.bytes_received += e.received;
        } else {
            self.dropped_pairs += 1;
        }
    }

    #[inline(always)]
    fn peer(&mut self, rank: i32) -> &mut PeerStats {
        let r = rank as usize;
        if r < self.peers.len() {
            return &mut self.peers[r];
        }
        self.peer_slow(rank)
    }

    #[cold]
    fn peer_slow(&mut self, rank: i32) -> &mut PeerStats {
        if !(0..MAX_PEER).contains(&rank) {
            return &mut self.unknown_peer;
        }
        let r = rank as usize;
        if r >= self.peers.len() {
            self.peers.resize(r + 1, PeerStats::default());
        }
        &mut self.peers[r]
    }

    /// Traffic of a persistent request, counted when it is started.
    pub fn started(&mut self, o: &Origin) {
        if o.sent > 0 || o.dest >= 0 {
            let p = self.peer(o.dest);
            p.messages_sent += 1;
            p.bytes_sent += o.sent;
        }
        if o.received > 0 || o.source >= 0 {
            let p = self.peer(o.source);
            p.messages_received += 1;
            p.bytes_received += o.received;
        }
    }

    /// A request created by `origin` (None: not known) completed by `completer`, with its share
    /// of the completing call's time.
    pub fn completed(&mut self, completer: u32, origin: Option<&Origin>, time: i64) {
        let key = (completer, origin.map_or(UNKNOWN_ORIGIN, |o| o.routine));
        let c = match self.completions.iter().position(|(k, _)| *k == key) {
            Some(i) => &mut self.completions[i].1,
            None if self.completions.len() >= MAX_COMPLETION_PAIRS => {
                self.dropped_pairs += 1;
                return;
            }
            None => {
                self.completions.push((key, Completions::default()));
                &mut self.completions.last_mut().unwrap().1
            }
        };
        c.count += 1;
        c.bytes += origin.map_or(0, |o| o.sent + o.received);
        c.time = c.time.wrapping_add(time);
    }
}

/// One thread's aggregates with the thread's id in the file.
pub struct ThreadTake {
    pub thread: i64,
    pub data: ThreadMpi,
}

/// A call site as `resolve` gives it: (module, offset, function, file, line).
pub type ResolvedSite = (String, u64, String, String, u32);

impl MpiProfile {
    /// Pool the threads' aggregates into a rank's result: `names` are the routine names,
    /// `to_ns` converts tick durations, `resolve` turns a return address into a site.
    pub fn from_threads(names: &[String], threads: Vec<ThreadTake>, to_ns: impl Fn(i64) -> i64, mut resolve: impl FnMut(u64) -> ResolvedSite) -> MpiProfile {
        let name = |r: u32| names.get(r as usize).cloned().unwrap_or_else(|| if r == UNKNOWN_ORIGIN { "unknown".into() } else { format!("#{r}") });
        let mut p = MpiProfile::default();
        let mut comm_ids: FxHashMap<(u64, i32, i32), i64> = FxHashMap::default();
        let mut peers: Vec<PeerStats> = Vec::new();
        let mut unknown = PeerStats::default();
        let mut completions: std::collections::BTreeMap<(u32, u32), Completions> = Default::default();
        let mut sites: std::collections::BTreeMap<(u32, u64), SiteStats> = Default::default();
        for t in threads {
            for (r, rows) in t.data.routines.iter().enumerate() {
                for row in rows {
                    let next = comm_ids.len() as i64 + 1;
                    let id = if row.kind == comm_kind::NONE { 0 } else { *comm_ids.entry((row.comm, row.size, row.kind)).or_insert(next) };
                    let stats = row.stats.to_stats().to_ns(&to_ns);
                    p.mpi_time_ns = p.mpi_time_ns.wrapping_add(stats.time).wrapping_add(stats.poll_time);
                    p.routines.push(RoutineRow { routine: name(r as u32), thread: t.thread, comm: id, comm_size: row.size as i64, comm_kind: row.kind, stats });
                }
            }
            if t.data.peers.len() > peers.len() {
                peers.resize(t.data.peers.len(), PeerStats::default());
            }
            for (a, b) in peers.iter_mut().zip(&t.data.peers) {
                a.merge(b);
            }
            unknown.merge(&t.data.unknown_peer);
            for (k, c) in &t.data.completions {
                let e = completions.entry(*k).or_default();
                e.count += c.count;
                e.bytes += c.bytes;
                e.time = e.time.wrapping_add(c.time);
            }
            for (k, s) in &t.data.sites {
                let e = sites.entry(*k).or_default();
                e.calls += s.calls;
                e.time = e.time.wrapping_add(s.time);
                e.bytes_sent += s.bytes_sent;
                e.bytes_received += s.bytes_received;
            }
            p.dropped_pairs += t.data.dropped_pairs;
            p.untracked_requests += t.data.untracked_requests;
        }
        p.peers = peers.into_iter().enumerate().filter(|(_, s)| *s != PeerStats::default()).map(|(r, stats)| PeerRow { world_rank: r as i64, stats }).collect();
        if unknown != PeerStats::default() {
            p.peers.push(PeerRow { world_rank: PEER_UNKNOWN as i64, stats: unknown });
        }
        p.completions = completions
            .into_iter()
            .map(|((c, o), s)| CompletionRow { routine: name(c), origin: name(o), stats: Completions { time: to_ns(s.time), ..s } })
            .collect();
        p.sites = sites
            .into_iter()
            .map(|((r, addr), s)| {
                let (module, offset, function, file, line) = resolve(addr);
                SiteRow { routine: name(r), module, offset, function, file, line, stats: SiteStats { time: to_ns(s.time), ..s } }
            })
            .collect();
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(routine: u32, flags: u32, duration: i64, sent: u64, received: u64, dest: i32, source: i32) -> Event {
        Event { routine, flags, start: 1000, end: 1000 + duration, comm: 7, comm_size: 4, comm_kind: comm_kind::WORLD, dest, source, sent, received, site: 0x1000 }
    }

    #[test]
    fn one_handle_value_for_many_requests_completes_each_once() {
        let o = |routine, sent| Origin { routine, sent, received: 0, dest: 1, source: PEER_NONE, persistent: false };
        let mut t = RequestTable::default();
        // Three requests under one handle (slots 0x10, 0x18, 0x20) and one of its own.
        assert!(t.insert(7, 0x10, o(1, 4), 100));
        assert!(t.insert(7, 0x18, o(2, 8), 100));
        assert!(t.insert(7, 0x20, o(3, 16), 100));
        assert!(t.insert(9, 0x28, o(4, 32), 100));
        assert_eq!(t.len(), 4);
        // The slot chooses; an unknown slot takes the oldest; each entry is taken once.
        assert_eq!(t.complete(7, 0x18).unwrap().routine, 2);
        assert_eq!(t.complete(7, 0x99).unwrap().routine, 1);
        assert_eq!(t.complete(7, 0x99).unwrap().routine, 3);
        assert!(t.complete(7, 0x10).is_none());
        assert_eq!(t.complete(9, 0).unwrap().sent, 32);
        assert!(t.is_empty());
        // Freed: the entry at that slot goes; a full table refuses.
        assert!(t.insert(7, 0x10, o(1, 4), 2));
        assert!(t.insert(7, 0x18, o(2, 8), 2));
        assert!(!t.insert(7, 0x20, o(3, 16), 2));
        t.remove(7, 0x10);
        assert_eq!(t.get(7, 0).unwrap().routine, 2);
        // A persistent request stays through completions.
        let mut p = o(5, 1);
        p.persistent = true;
        assert!(t.insert(11, 0x30, p, 100));
        assert_eq!(t.complete(11, 0x30).unwrap().routine, 5);
        assert_eq!(t.complete(11, 0x30).unwrap().routine, 5);
        t.remove(11, 0x30);
        assert!(t.get(11, 0x30).is_none());
    }

    /// The short list and the maps agree on every operation, across the moves between them:
    /// a pseudo-random run of creations, completions, frees and lookups over few handle values
    /// (shared ones), some persistent, against the maps alone.
    #[test]
    fn the_short_list_and_the_maps_agree() {
        let mut table = RequestTable::default();
        let mut maps = HandleMap::default();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut in_many, mut back) = (false, false);
        for step in 0..200_000u32 {
            let r = next();
            let (handle, slot) = (r % 5 + 1, (r >> 8) % 6 * 8);
            let live = table.len();
            // Phases of growth (to the maps) and of draining (back to the short list).
            let growing = step / 1000 % 2 == 0;
            match (r >> 16) % 8 {
                0..=5 if growing && live < 24 => {
                    let o = Origin { routine: step, sent: r >> 40, received: 0, dest: 1, source: PEER_NONE, persistent: (r >> 20) % 9 == 0 };
                    let cap = if (r >> 24) % 50 == 0 { live } else { 100 };
                    assert_eq!(table.insert(handle, slot, o, cap), maps.insert(handle, slot, o, cap), "step {step}");
                }
                0 if !growing => {
                    let o = Origin { routine: step, sent: r >> 40, received: 0, dest: 1, source: PEER_NONE, persistent: (r >> 20) % 9 == 0 };
                    let cap = if (r >> 24) % 50 == 0 { live } else { 100 };
                    assert_eq!(table.insert(handle, slot, o, cap), maps.insert(handle, slot, o, cap), "step {step}");
                }
                0..=5 => assert_eq!(table.complete(handle, slot), maps.complete(handle, slot), "step {step}"),
                6 => {
                    table.remove(handle, slot);
                    maps.remove(handle, slot);
                }
                _ => assert_eq!(table.get(handle, slot), maps.get(handle, slot), "step {step}"),
            }
            assert_eq!(table.len(), maps.len(), "step {step}");
            in_many |= !table.many.is_empty();
            back |= in_many && table.many.is_empty() && table.few.len > 0;
        }
        assert!(in_many && back, "the run never moved to the maps and back");
    }

    #[test]
    fn settings() {
        assert_eq!(Settings::parse("").unwrap(), Settings::default());
        assert_eq!(Settings::default().mode, Mode::Summary);
        assert_eq!(Settings::parse("calls,sites").unwrap(), Settings { mode: Mode::Calls, sites: true });
        assert_eq!(Settings::parse(" OFF ").unwrap().mode, Mode::Off);
        assert!(Settings::parse("everything").is_err());
    }

    #[test]
    fn aggregates_calls_peers_polls_and_sites() {
        let mut t = ThreadMpi::default();
        t.record(&ev(3, flags::P2P, 100, 64, 0, 2, PEER_NONE), true);
        t.record(&ev(3, flags::P2P, 50, 8, 0, 2, PEER_NONE), true);
        t.record(&ev(4, flags::P2P, 30, 0, 1000, PEER_NONE, PEER_UNKNOWN), false);
        t.record(&ev(5, flags::POLL | flags::EMPTY, 5, 0, 0, PEER_NONE, PEER_NONE), false);
        t.record(&ev(5, flags::POLL | flags::EMPTY, 7, 0, 0, PEER_NONE, PEER_NONE), false);
        let mut other = ev(3, flags::P2P, 10, 0, 0, 1, PEER_NONE);
        other.comm = 9;
        other.comm_kind = comm_kind::INTRA;
        t.record(&other, true);
        let send = &t.routines[3];
        assert_eq!(send.len(), 2, "one row per communicator");
        let s0 = &send[0].stats;
        assert_eq!((s0.calls, s0.time, s0.min, s0.max, s0.bytes_sent), (2, 150, 50, 100, 72));
        assert_eq!(s0.sizes[size_bucket(64)], 1);
        assert_eq!(s0.sizes[size_bucket(8)], 1);
        assert_eq!(size_bucket(0), 0);
        assert_eq!(size_bucket(u64::MAX), SIZE_BUCKETS - 1);
        assert_eq!(t.peers[2], PeerStats { messages_sent: 2, bytes_sent: 72, ..Default::default() });
        assert_eq!(t.unknown_peer.bytes_received, 1000);
        let poll = &t.routines[5][0].stats;
        assert_eq!((poll.calls, poll.polls_empty, poll.poll_time), (0, 2, 12));
        assert_eq!(t.sites[&(3, 0x1000)].calls, 3);
        let o = Origin { routine: 9, sent: 16, received: 0, dest: 1, source: PEER_NONE, persistent: false };
        t.completed(6, Some(&o), 40);
        t.completed(6, None, 2);
        let names: Vec<String> = (0..10).map(|i| format!("MPI_R{i}")).collect();
        let p = MpiProfile::from_threads(&names, vec![ThreadTake { thread: 0, data: t }], |t| t * 2, |a| ("m".into(), a, "f".into(), "x.c".into(), 3));
        assert_eq!(p.mpi_time_ns, 2 * (150 + 10 + 30 + 12));
        let comms: Vec<(String, i64)> = p.routines.iter().map(|r| (r.routine.clone(), r.comm)).collect();
        assert_eq!(comms, [("MPI_R3".to_string(), 1), ("MPI_R3".to_string(), 2), ("MPI_R4".to_string(), 1), ("MPI_R5".to_string(), 1)]);
        assert_eq!(p.peers.iter().map(|p| p.world_rank).collect::<Vec<_>>(), [1, 2, PEER_UNKNOWN as i64]);
        assert_eq!(p.completions.len(), 2);
        assert_eq!(p.completions[1].origin, "unknown");
        assert_eq!(p.completions[0].stats, Completions { count: 1, bytes: 16, time: 80 });
        assert_eq!(p.sites[0].line, 3);
        assert_eq!(p.sites[0].stats.time, 2 * 160);
    }
}
