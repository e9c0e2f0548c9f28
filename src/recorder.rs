//! Per-thread recording: the stack of open calls and the completed-call logs of one thread.
//!
//! Only the owning thread touches a `ThreadData`, always between `CallSeq::enter` and
//! `leave`; finalize reads it only after the quiescence protocol of `quiesce.rs`.

use crate::calllog::{CallLog, PARENT_TOP};
use crate::model::Call;
use crate::model::callpath::{NO_NODE, PathTree};
use crate::quiesce::CallSeq;
use crate::stats::{Cell, Table};
use rustc_hash::FxHashMap;
use std::cell::UnsafeCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering, compiler_fence};

/// Deepest nesting accepted per thread; a start beyond it is refused (a stop is missing
/// somewhere, and the stack must not grow without bound in a loop).
pub const MAX_DEPTH: usize = 4096;

pub use crate::model::OpenCall;

/// A call from `start` to `end` recorded inside `parent` (None: at the top of the thread's
/// calls): the parent's child time grows by its duration; the parent's id and start, for the
/// call's log and the one-path check.
#[inline(always)]
fn enclose(parent: Option<&mut OpenCall>, start: i64, end: i64) -> (u32, i64) {
    match parent {
        Some(p) => {
            p.child = p.child.wrapping_add(end.wrapping_sub(start));
            (p.id, p.start)
        }
        None => (PARENT_TOP, i64::MIN),
    }
}

/// `OpenCall::node` not looked up yet.
pub const UNRESOLVED: u32 = u32::MAX;
/// Bit of `OpenCall::node`: the call is folded into an ancestor's node (recursion).
const FOLDED: u32 = 1 << 31;

/// How a stop went when it did not match the innermost open call.
#[derive(Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// The region is not open on this thread: nothing changed.
    NotOpen,
    /// The region was open further out: it was recorded, and the calls opened inside it
    /// (region ids, innermost first) were closed without being recorded.
    ClosedInner(Vec<u32>),
}

/// A region an adapter pushed (`ThreadData::pushed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pushed {
    pub key: usize,
    pub id: u32,
    pub level: u32,
}

/// A push whose start recorded nothing: its pop pops it and stops nothing.
pub const NOT_PUSHED: u32 = u32::MAX;

/// Slots of the per-thread cache in front of `ThreadData::names`.
pub const NAME_SLOTS: usize = 64;

/// A cached name lookup: `token` says where the caller keeps its name string (its address),
/// `name` what the string held when cached. A hit needs the same token and the same bytes, so
/// no hashing is needed, and a buffer reused for another name is simply a miss. When the
/// caller's bytes can never change (`immutable`: a string literal in read-only memory), the
/// token alone is a hit.
#[derive(Default)]
pub struct NameSlot {
    pub token: usize,
    pub id: u32,
    pub immutable: bool,
    pub name: Box<[u8]>,
}

#[inline(always)]
pub fn slot_index(token: usize) -> usize {
    (token ^ (token >> 6)) % NAME_SLOTS
}

pub struct ThreadData {
    /// Completed calls, indexed by region id (grown on first use of an id). Private, like
    /// `stats`: `record` indexes `cells` and `logs` unchecked, which only holds while nothing
    /// else changes their length or replaces the table (others get `logs_mut`, a slice).
    logs: Vec<CallLog>,
    /// Keep every call in `logs` (false in the aggregate layout: statistics only).
    pub keep_calls: bool,
    /// Statistics of the completed calls, per region (shared with readers on other threads).
    stats: Arc<Table>,
    /// Each region's cell of `stats`, indexed like `logs` (always as long): one bounds check
    /// finds both. The cells live as long as `stats`, which this struct holds.
    cells: Vec<*const Cell>,
    /// Calls discarded by a stop of an outer region, indexed by region id.
    pub dropped: Vec<u64>,
    pub open: Vec<OpenCall>,
    /// True while `open` is being moved to a larger allocation (the sampler's handler then
    /// does not read it).
    open_moving: bool,
    /// Name -> id cache in front of the shared registry, for the name-based calls.
    pub names: FxHashMap<Box<[u8]>, u32>,
    /// Token-keyed cache in front of `names` (empty until the first name-based call).
    pub slots: Vec<NameSlot>,
    /// How many regions were registered when this thread last looked (see `knows_region`).
    pub known_regions: u32,
    /// Counter-source state of this thread (perf group, annotations).
    pub counters: crate::counters::ThreadCounters,
    /// The owning thread's index (written into the headers of its call-log chunks).
    pub thread: u32,
    /// Aggregates of the thread's MPI calls (none until its first recorded MPI call).
    pub mpi: Option<Box<crate::mpi_stats::ThreadMpi>>,
    /// The thread's side of the regions named at finalize (OpenMP constructs, instrumented
    /// functions): none until its first such region.
    pub late: Option<Box<crate::late::ThreadLate>>,
    /// Call paths of the completed calls, kept here when the calls are not (`keep_calls`
    /// false); otherwise built from the calls at finalize (`callpath.rs`).
    pub paths: PathTree,
    /// The regions adapters pushed on this thread whose pops name none (NVTX's push/pop
    /// ranges, a stack per domain): (the adapter's stack key, region id or `NOT_PUSHED`, the
    /// push's level on its stack), innermost last; pushes beyond `MAX_DEPTH` only counted.
    pub pushed: Vec<Pushed>,
    /// Pushes beyond `MAX_DEPTH`, counted per stack key (`push_beyond`).
    pub pushed_beyond: Vec<(usize, u32)>,
    /// A track of its own rather than a thread's calls (the asynchronous ranges, see
    /// `ThreadBuffer::new_track`): its calls may overlap without nesting, none encloses
    /// another, and `open` holds its ranges still open, in no order.
    pub track: bool,    /// Zero while `on_one_path` (zero only for a thread recording live, from its first call).
    off_path: u32,
}

impl Default for ThreadData {
    fn default() -> ThreadData {
        ThreadData {
            logs: Vec::new(),
            keep_calls: true,
            stats: Arc::default(),
            cells: Vec::new(),
            dropped: Vec::new(),
            open: Vec::new(),
            open_moving: false,
            names: FxHashMap::default(),
            slots: Vec::new(),
            known_regions: 0,
            counters: Default::default(),
            thread: 0,
            mpi: None,
            late: None,
            paths: PathTree::default(),
            pushed: Vec::new(),
            pushed_beyond: Vec::new(),
            track: false,
            off_path: 1,
        }
    }
}

impl ThreadData {
    /// Room for one more open call? The stack grows when full, up to MAX_DEPTH, so the
    /// depth limit costs nothing until the stack's capacity is reached.
    #[inline(always)]
    pub fn has_room(&mut self) -> bool {
        self.open.len() < self.open.capacity() || self.grow_open()
    }

    #[cold]
    fn grow_open(&mut self) -> bool {
        let len = self.open.len();
        if len >= MAX_DEPTH {
            return false;
        }
        // The sampler's signal handler reads the open calls on this thread (`innermost_from_signal`):
        // while the stack moves to new memory it must not follow the old pointer.
        self.open_moving = true;
        compiler_fence(Ordering::SeqCst);
        self.open.reserve_exact(len.max(64).min(MAX_DEPTH - len));
        compiler_fence(Ordering::SeqCst);
        self.open_moving = false;
        true
    }

    /// Push an open call; `has_room` said yes.
    #[inline(always)]
    pub fn push_open(&mut self, id: u32, start: i64) {
        self.open.push(OpenCall { id, start, child: 0, node: UNRESOLVED });
    }

    /// Open a call of `id` that started at `start`. False if nesting is too deep.
    pub fn open(&mut self, id: u32, start: i64) -> bool {
        if !self.has_room() {
            return false;
        }
        self.push_open(id, start);
        true
    }

    /// Is `id` a registered region? Checked against this thread's copy of the registry size
    /// first, so the shared counter is read only when a new region appears.
    #[inline(always)]
    pub fn knows_region(&mut self, id: u32, registered: impl FnOnce() -> u32) -> bool {
        id < self.known_regions || {
            self.known_regions = registered();
            id < self.known_regions
        }
    }

    /// Close the innermost call of `id` at `end` and record it. False if `id` is not the
    /// innermost open call: then nothing changed, and `close_out_of_order` decides.
    #[inline(always)]
    pub fn close(&mut self, id: u32, end: i64) -> bool {
        match self.open.last() {
            Some(&top) if top.id == id => {
                self.open.pop();
                self.record(id, top, end);
                true
            }
            _ => false,
        }
    }

    /// Record a completed call: its statistics, the enclosing call's child time and, unless
    /// only statistics are kept, the call itself.
    #[inline(always)]
    fn record(&mut self, id: u32, call: OpenCall, end: i64) {
        let (parent, parent_start) = enclose(self.open.last_mut(), call.start, end);
        self.record_inside(id, call, end, parent, parent_start);
    }

    /// Take the innermost open call off the stack unrecorded, if it is a call of `id` (its
    /// call-path node looked up as its stop would), for `record_detached` to record later;
    /// `outermost`: only if it is the only open call.
    pub fn detach(&mut self, id: u32, outermost: bool) -> Option<OpenCall> {
        if self.open.last().is_none_or(|top| top.id != id) || (outermost && self.open.len() != 1) {
            return None;
        }
        let mut call = self.open.pop()?;
        if !self.keep_calls && call.node == UNRESOLVED {
            call.node = self.path_node(id);
        }
        Some(call)
    }

    /// Put a call `detach` took off back on top of the stack (room for it was there).
    pub fn reattach(&mut self, call: OpenCall) {
        self.open.push(call);
    }

    /// Record a call `detach` took off the stack, ending at `end`: inside `parent` (another
    /// detached call, whose child time grows by its duration), or with None at the top (it
    /// was the outermost open call).
    #[inline(always)]
    pub fn record_detached(&mut self, call: OpenCall, end: i64, parent: Option<&mut OpenCall>) {
        let (parent, parent_start) = enclose(parent, call.start, end);
        self.record_inside(call.id, call, end, parent, parent_start);
    }

    /// `record` inside the call `parent` that started at `parent_start`.
    #[inline(always)]
    fn record_inside(&mut self, id: u32, call: OpenCall, end: i64, parent: u32, parent_start: i64) {
        let i = id as usize;
        if i >= self.logs.len() {
            self.grow(i);
        }
        let duration = end.wrapping_sub(call.start);
        let exclusive = duration.wrapping_sub(call.child);
        // SAFETY: `grow` keeps `cells` as long as `logs` (> i); the cell lives in `self.stats`.
        let cell = unsafe { &**self.cells.get_unchecked(i) };
        if self.keep_calls {
            cell.record(duration, exclusive);
            // SAFETY: as above.
            let log = unsafe { self.logs.get_unchecked_mut(i) };
            log.push_inside(Call { start: call.start, end }, parent);
            // The one-path check, without a branch (after the call's last clock read, so off
            // its time): inside the region its log's first call was inside, and started after
            // the enclosing call did.
            self.off_path |= (log.parent ^ parent) | (call.start <= parent_start) as u32;
        } else {
            cell.record_with_histogram(duration, exclusive);
            let node = if call.node != UNRESOLVED { call.node } else { self.path_node(id) };
            self.paths.add(node & !FOLDED, node & FOLDED != 0, duration, exclusive);
        }
    }

    /// Whether every call recorded on this thread is on its region's one path: made inside a
    /// call of the region its log names (`CallLog::parent`), and started after the enclosing
    /// call. Then (with no call of zero ticks or less: the statistics' minimum) the thread's
    /// call paths follow from its regions' statistics, without a pass over the calls
    /// (`callpath::from_parents`).
    pub fn on_one_path(&self) -> bool {
        self.off_path == 0
    }

    /// The call-path node of a call of `id` inside the open calls: one cached look-up when
    /// the enclosing call's node is known (or there is none).
    #[inline(always)]
    fn path_node(&mut self, id: u32) -> u32 {
        let parent = match self.open.last() {
            None => NO_NODE,
            Some(p) if p.node != UNRESOLVED => p.node & !FOLDED,
            Some(_) => return self.path_node_resolving(id),
        };
        let (n, folded) = self.paths.enter(parent, id);
        n | if folded { FOLDED } else { 0 }
    }

    /// `path_node`, resolving the open calls' nodes first (the resolved ones are always the
    /// outermost: a call is resolved once).
    #[inline(never)]
    fn path_node_resolving(&mut self, id: u32) -> u32 {
        let first = self.open.iter().rposition(|c| c.node != UNRESOLVED).map_or(0, |p| p + 1);
        let mut parent = if first == 0 { NO_NODE } else { self.open[first - 1].node & !FOLDED };
        let tag = |(n, folded): (u32, bool)| n | if folded { FOLDED } else { 0 };
        for k in first..self.open.len() {
            let (n, folded) = self.paths.enter(parent, self.open[k].id);
            self.open[k].node = tag((n, folded));
            parent = n;
        }
        tag(self.paths.enter(parent, id))
    }

    /// Record a call of `id` from `start` to `end` inside the innermost open call, with nothing
    /// recorded inside it on this thread (a call timed elsewhere and recorded when it ends: the
    /// program's MPI calls).
    #[inline]
    pub fn record_closed(&mut self, id: u32, start: i64, end: i64) {
        self.record(id, OpenCall { id, start, child: 0, node: UNRESOLVED }, end);
    }

    /// Push `id` (or `NOT_PUSHED`) on the stack `key` of an adapter's pushes: its level on that
    /// stack (0 for the outermost).
    #[inline(always)]
    pub fn push_pushed(&mut self, key: usize, id: u32) -> u32 {
        let level = match self.pushed.last() {
            Some(p) if p.key == key => p.level + 1,
            None => 0,
            Some(_) => self.pushed.iter().rev().find(|p| p.key == key).map_or(0, |p| p.level + 1),
        };
        if self.pushed.len() < MAX_DEPTH {
            self.pushed.push(Pushed { key, id, level });
        } else {
            self.push_beyond(key);
        }
        level
    }

    /// A push past `MAX_DEPTH`: not kept, counted per stack so that each stack's pops of them
    /// come first on that stack only (the stacks of keys past `BEYOND_KEYS` share one count).
    #[cold]
    fn push_beyond(&mut self, key: usize) {
        const BEYOND_KEYS: usize = 1024;
        let key = if self.pushed_beyond.len() < BEYOND_KEYS || self.pushed_beyond.iter().any(|b| b.0 == key) { key } else { usize::MAX };
        match self.pushed_beyond.iter_mut().find(|b| b.0 == key) {
            Some(b) => b.1 += 1,
            None => self.pushed_beyond.push((key, 1)),
        }
    }

    /// A pop of stack `key` taking one of its pushes past `MAX_DEPTH` (its innermost ones).
    #[cold]
    fn pop_beyond(&mut self, key: usize) -> bool {
        let at = |k: usize| self.pushed_beyond.iter().position(|b| b.0 == k);
        let Some(i) = at(key).or_else(|| at(usize::MAX)) else { return false };
        self.pushed_beyond[i].1 -= 1;
        if self.pushed_beyond[i].1 == 0 {
            self.pushed_beyond.swap_remove(i);
        }
        true
    }

    /// Pop the innermost push of stack `key`: (its id or `NOT_PUSHED`, its level); None when
    /// the stack is empty.
    #[inline(always)]
    pub fn pop_pushed(&mut self, key: usize) -> Option<(u32, u32)> {
        if !self.pushed_beyond.is_empty() && self.pop_beyond(key) {
            return Some((NOT_PUSHED, MAX_DEPTH as u32));
        }
        match self.pushed.last() {
            Some(p) if p.key == key => self.pushed.pop().map(|p| (p.id, p.level)),
            _ => {
                let at = self.pushed.iter().rposition(|p| p.key == key)?;
                let p = self.pushed.remove(at);
                Some((p.id, p.level))
            }
        }
    }

    /// A track's range of `id` opens at `start` (kept among its open calls, so that one never
    /// ended is counted as open at finalize). False, and counted as dropped, when `MAX_DEPTH`
    /// ranges are open already.
    pub fn open_on_track(&mut self, id: u32, start: i64) -> bool {
        if self.open.len() >= MAX_DEPTH {
            self.count_dropped(id);
            return false;
        }
        self.open.push(OpenCall { id, start, child: 0, node: UNRESOLVED });
        true
    }

    /// A track's range of `id` opened at `start` ends at `end`: recorded inside nothing and
    /// charged to nothing, whatever else is open on the track. False if no such range is open.
    pub fn close_on_track(&mut self, id: u32, start: i64, end: i64) -> bool {
        let Some(pos) = self.open.iter().rposition(|c| c.id == id && c.start == start) else { return false };
        let mut open = std::mem::take(&mut self.open);
        open.swap_remove(pos);
        self.record(id, OpenCall { id, start, child: 0, node: UNRESOLVED }, end);
        self.open = open;
        true
    }

    /// Time spent in something not recorded as a call (an MPI poll that found nothing), counted
    /// in the innermost open call's child time as a recorded call would be.
    #[inline]
    pub fn add_child_time(&mut self, duration: i64) {
        if let Some(parent) = self.open.last_mut() {
            parent.child = parent.child.wrapping_add(duration);
        }
    }

    /// A thread's data before its first call.
    pub fn for_thread(thread: u32, keep_calls: bool) -> ThreadData {
        ThreadData { open: Vec::with_capacity(64), keep_calls, thread, off_path: 0, ..ThreadData::default() }
    }

    /// The completed-call logs, indexed by region id.
    pub fn logs(&self) -> &[CallLog] {
        &self.logs
    }

    /// The logs to take or seal (their number cannot change).
    pub fn logs_mut(&mut self) -> &mut [CallLog] {
        &mut self.logs
    }

    /// The statistics table (shared with readers on other threads).
    pub fn stats(&self) -> &Arc<Table> {
        &self.stats
    }

    /// The log of region `id` (grown on first use; recovery fills logs this way).
    pub fn log_mut(&mut self, id: u32) -> &mut CallLog {
        self.log(id)
    }

    fn log(&mut self, id: u32) -> &mut CallLog {
        let i = id as usize;
        if i >= self.logs.len() {
            self.grow(i);
        }
        // SAFETY: `grow` made `logs.len() > i`.
        unsafe { self.logs.get_unchecked_mut(i) }
    }

    #[cold]
    fn grow(&mut self, i: usize) {
        let t = self.thread;
        self.logs.extend((self.logs.len()..=i).map(|r| CallLog::new(t, r as u32)));
        for j in self.cells.len()..=i {
            let cell: *const Cell = self.stats.cell(j as u32);
            self.cells.push(cell);
        }
    }

    /// One call of `id` not recorded (closed unrecorded, or refused too deep): in the
    /// file's `dropped_calls`.
    #[cold]
    pub fn count_dropped(&mut self, id: u32) {
        if self.dropped.len() <= id as usize {
            self.dropped.resize(id as usize + 1, 0);
        }
        self.dropped[id as usize] += 1;
    }

    /// A stop that is not of the innermost call: record `id` if it is open further out,
    /// closing the calls inside it unrecorded.
    #[cold]
    pub fn close_out_of_order(&mut self, id: u32, end: i64) -> Mismatch {
        let Some(pos) = self.open.iter().rposition(|c| c.id == id) else {
            return Mismatch::NotOpen;
        };
        let inner: Vec<u32> = self.open.drain(pos + 1..).rev().map(|c| c.id).collect();
        for &d in &inner {
            self.count_dropped(d);
        }
        // The calls recorded inside a dropped one were made inside its region, which is not
        // among the calls: their paths are found from the calls.
        self.off_path |= !inner.is_empty() as u32;
        let call = self.open.pop().unwrap_or(OpenCall { id, start: end, child: 0, node: UNRESOLVED });
        self.record(id, call, end);
        Mismatch::ClosedInner(inner)
    }
}

/// One recording thread: identity, call sequence number and its data.
pub struct ThreadBuffer {
    /// 0, 1, 2, ... in the order threads first recorded (the `thread_ids` of the file).
    pub index: u32,
    /// Linux thread id, for matching with other tools.
    pub os_tid: i64,
    pub seq: CallSeq,
    /// The thread's statistics, readable from any thread at any time.
    pub stats: Arc<Table>,
    /// Instrumented functions this thread no longer records (see `SiteSkip`).
    pub skip: SiteSkip,
    data: UnsafeCell<ThreadData>,
}

/// Slots of a thread's `SiteSkip` (8 bytes each).
pub const SKIP_SLOTS: usize = 1024;

/// The instrumented functions (by entry address) that one thread no longer records: excluded
/// by the filter, or throttled once no call of it was open here. The hooks look an address up
/// here before anything else, so such a call costs a few loads: no clock read, no recorder
/// window. Direct-mapped on the address (a slot holds the complemented address, so that an
/// empty slot, 0, matches no address); a function that lost its slot to another takes the
/// slow path again, which decides as before and takes the slot back. Only the owning thread
/// reads and writes it (a signal handler on the owner may read it: single-word stores);
/// allocated at the thread's first skipped function, freed with the thread's buffer.
#[derive(Default)]
pub struct SiteSkip(AtomicPtr<[AtomicU64; SKIP_SLOTS]>);

#[inline(always)]
fn skip_slot(addr: u64) -> usize {
    ((addr >> 4) ^ (addr >> 14)) as usize % SKIP_SLOTS
}

impl SiteSkip {
    /// Whether the function at `addr` is skipped on this thread (owner only).
    #[inline(always)]
    pub fn contains(&self, addr: u64) -> bool {
        let t = self.0.load(Ordering::Relaxed);
        // SAFETY: a non-null pointer is a table leaked by `insert`, freed only on drop.
        !t.is_null() && unsafe { &*t }[skip_slot(addr)].load(Ordering::Relaxed) == !addr
    }

    /// Skip the function at `addr` on this thread from now on (owner only).
    #[cold]
    pub fn insert(&self, addr: u64) {
        let mut t = self.0.load(Ordering::Relaxed);
        if t.is_null() {
            let table: Box<[AtomicU64; SKIP_SLOTS]> = Box::new(std::array::from_fn(|_| AtomicU64::new(0)));
            t = Box::into_raw(table);
            self.0.store(t, Ordering::Relaxed);
        }
        // SAFETY: as in `contains`.
        let table = unsafe { &*t };
        table[skip_slot(addr)].store(!addr, Ordering::Relaxed);
    }
}

impl Drop for SiteSkip {
    fn drop(&mut self) {
        let t = *self.0.get_mut();
        if !t.is_null() {
            // SAFETY: made by Box::into_raw in `insert`, and nobody else holds it any more.
            drop(unsafe { Box::from_raw(t) });
        }
    }
}

// SAFETY: `data` is only touched by the owning thread inside enter/leave, or by finalize after
// the quiescence protocol established that the owner is outside any call.
unsafe impl Sync for ThreadBuffer {}
unsafe impl Send for ThreadBuffer {}

/// The Linux thread id in the file (`thread_os_ids`) of a track that is no thread's.
pub const TRACK_OS_TID: i64 = -1;

impl ThreadBuffer {
    pub fn new(index: u32, keep_calls: bool) -> ThreadBuffer {
        // SAFETY: gettid has no preconditions.
        let os_tid = unsafe { libc::syscall(libc::SYS_gettid) } as i64;
        ThreadBuffer::with(index, os_tid, ThreadData::for_thread(index, keep_calls))
    }

    /// The buffer of a track that is no thread's (the rank's asynchronous ranges, which may
    /// end on another thread than the one that started them): recorded, quiesced, taken and
    /// written like a thread's, under the Linux thread id `TRACK_OS_TID`; its writers take
    /// turns under a lock of their own and it is never in any thread's TLS (nor sampled).
    pub fn new_track(index: u32, keep_calls: bool) -> ThreadBuffer {
        ThreadBuffer::with(index, TRACK_OS_TID, ThreadData { track: true, ..ThreadData::for_thread(index, keep_calls) })
    }

    fn with(index: u32, os_tid: i64, data: ThreadData) -> ThreadBuffer {
        crate::spill::thread_started(index, os_tid);
        let stats = data.stats().clone();
        ThreadBuffer { index, os_tid, seq: CallSeq::default(), stats, skip: SiteSkip::default(), data: UnsafeCell::new(data) }
    }

    /// The innermost open region on this thread, read by the sampler's signal handler while
    /// it interrupts the owning thread (async-signal-safe: plain loads, no lock, no
    /// allocation). `None` outside any region, and while the open-call stack is being moved
    /// to a larger allocation (a sample then counts as outside). The owner's last store may
    /// not have reached memory when the signal lands: a sample taken inside a start or stop
    /// call can go to the region on either side of it.
    ///
    /// # Safety
    /// Call only from a signal handler running on the owning thread (or from the owner), and
    /// never while finalize takes the thread's data (the sampler is stopped first).
    #[inline]
    pub unsafe fn innermost_from_signal(&self) -> Option<u32> {
        let d = self.data.get();
        compiler_fence(Ordering::SeqCst);
        // SAFETY: the owner is suspended in this handler; `open` and `open_moving` are only
        // written by it (see above).
        unsafe {
            if std::ptr::read_volatile(std::ptr::addr_of!((*d).open_moving)) {
                return None;
            }
            let open: &Vec<OpenCall> = &*std::ptr::addr_of!((*d).open);
            let len = open.len();
            if len == 0 || len > open.capacity() {
                return None;
            }
            Some(std::ptr::read_volatile(std::ptr::addr_of!((*open.as_ptr().add(len - 1)).id)))
        }
    }

    /// The owner's data.
    ///
    /// # Safety
    /// Call only from the owning thread between `seq.enter()` and `seq.leave()`, or after the
    /// owner has been quiesced (see `quiesce.rs`), and never hold two of these at once.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn data(&self) -> &mut ThreadData {
        unsafe { &mut *self.data.get() }
    }
}

/// A thread's recorder for unit tests: what the profiler's `Recorder` does, without the
/// process's profiler (no counter sources). Calls start at `now`, or at the clock's time.
#[cfg(test)]
pub mod testing {
    use super::ThreadData;
    use crate::late::{Recording, ThreadLate};
    use crate::model::OpenCall;

    pub struct Mock {
        pub data: ThreadData,
        pub late: ThreadLate,
        pub skip: super::SiteSkip,
        pub next_id: u32,
        /// The start time of the next calls (None: the clock's).
        pub now: Option<i64>,
        /// Whether it takes calls off the stack when asked (`Recording::detach`).
        pub detaching: bool,
    }

    impl Mock {
        pub fn new() -> Mock {
            Mock::with(true)
        }

        /// `keep_calls`: every call kept (false: statistics and call paths only).
        pub fn with(keep_calls: bool) -> Mock {
            Mock { data: ThreadData::for_thread(0, keep_calls), late: ThreadLate::default(), skip: Default::default(), next_id: 0, now: None, detaching: true }
        }
    }

    impl Recording for Mock {
        fn start(&mut self, id: u32) -> bool {
            if !self.data.has_room() {
                return false;
            }
            self.data.push_open(id, self.now.unwrap_or_else(crate::clock::now));
            true
        }
        fn stop(&mut self, id: u32, end: i64) -> bool {
            self.data.close(id, end) || {
                let _ = self.data.close_out_of_order(id, end);
                false
            }
        }
        fn innermost_start(&self, id: u32) -> Option<i64> {
            self.data.open.last().filter(|c| c.id == id).map(|c| c.start)
        }
        fn late(&mut self) -> &mut ThreadLate {
            &mut self.late
        }
        fn dropped(&mut self, id: u32) {
            self.data.count_dropped(id);
        }
        fn skip_site(&mut self, addr: u64) {
            self.skip.insert(addr);
        }
        fn register(&mut self, _provisional: &str) -> crate::status::Result<u32> {
            self.next_id += 1;
            Ok(self.next_id)
        }
        fn detach(&mut self, id: u32, outermost: bool) -> Option<OpenCall> {
            if self.detaching { self.data.detach(id, outermost) } else { None }
        }
        fn record_detached(&mut self, call: OpenCall, end: i64, parent: Option<&mut OpenCall>) {
            self.data.record_detached(call, end, parent);
        }
        fn reattach(&mut self, call: OpenCall) {
            self.data.reattach(call);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_table() {
        let s = SiteSkip::default();
        // Empty: nothing skipped, not even address 0 or all ones.
        assert!(!s.contains(0x401000) && !s.contains(0) && !s.contains(u64::MAX));
        s.insert(0x401000);
        assert!(s.contains(0x401000) && !s.contains(0x401010) && !s.contains(0));
        // Another address on the same slot takes it: the first is no longer skipped (its next
        // call takes the slow path, which decides again).
        let other = (0..1u64 << 24).map(|k| 0x401000 + (k << 4)).find(|&a| a != 0x401000 && skip_slot(a) == skip_slot(0x401000)).unwrap();
        s.insert(other);
        assert!(s.contains(other) && !s.contains(0x401000));
        s.insert(0);
        assert!(s.contains(0));
    }

    fn calls(d: &mut ThreadData, id: u32) -> Vec<Call> {
        let (starts, ends) = std::mem::take(d.log(id)).columns();
        starts.into_iter().zip(ends).map(|(start, end)| Call { start, end }).collect()
    }

    #[test]
    fn nesting_and_recursion() {
        let mut d = ThreadData::default();
        assert!(d.open(0, 1));
        assert!(d.open(1, 2));
        assert!(d.open(1, 3));
        assert!(d.close(1, 4));
        assert!(d.close(1, 5));
        assert!(d.close(0, 6));
        assert_eq!(calls(&mut d, 1), vec![Call { start: 3, end: 4 }, Call { start: 2, end: 5 }]);
        assert_eq!(calls(&mut d, 0), vec![Call { start: 1, end: 6 }]);
        assert!(d.open.is_empty());
    }

    #[test]
    fn statistics_and_exclusive_time() {
        let mut d = ThreadData::default();
        assert!(d.open(0, 0));
        assert!(d.open(1, 10));
        assert!(d.close(1, 30)); // 20
        assert!(d.open(1, 40));
        assert!(d.open(1, 45)); // recursion
        assert!(d.close(1, 50)); // 5
        assert!(d.close(1, 60)); // 20, 15 exclusive
        assert!(d.close(0, 100)); // 100, 60 exclusive
        let a = d.stats.get(0).unwrap();
        assert_eq!((a.count, a.total, a.min, a.max, a.exclusive), (1, 100, 100, 100, 60));
        let b = d.stats.get(1).unwrap();
        assert_eq!((b.count, b.total, b.min, b.max, b.exclusive), (3, 45, 5, 20, 40));
        // Statistics only: the same numbers, no calls kept.
        let mut d = ThreadData { keep_calls: false, ..ThreadData::default() };
        assert!(d.open(0, 0));
        assert!(d.close(0, 7));
        assert_eq!(d.stats.get(0).unwrap().total, 7);
        assert!(d.logs.iter().all(|l| l.is_empty()));
    }

    /// Statistics only: the recorder keeps the call paths (recursion folded), with the same
    /// inclusive and exclusive times a sweep over the calls gives.
    #[test]
    fn call_paths_without_calls() {
        let script: &[(bool, u32, i64)] = &[
            (true, 0, 0),
            (true, 1, 10),
            (false, 1, 30),
            (true, 1, 40),
            (true, 1, 45),
            (true, 2, 46),
            (false, 2, 48),
            (false, 1, 50),
            (false, 1, 60),
            (true, 2, 70),
            (false, 2, 75),
            (false, 0, 100),
            (true, 2, 200),
            (false, 2, 207),
        ];
        let mut d = ThreadData { keep_calls: false, ..ThreadData::default() };
        let mut kept = ThreadData::default();
        for &(start, id, t) in script {
            for x in [&mut d, &mut kept] {
                if start { assert!(x.open(id, t)) } else { assert!(x.close(id, t)) }
            }
        }
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let mut p = crate::model::CallPaths { names: names.clone(), ..Default::default() };
        d.paths.append_to(&mut p, 0, |r| r, |t| t);
        let row = |p: &crate::model::CallPaths, path: &[&str]| {
            let want: Vec<String> = path.iter().map(|s| s.to_string()).collect();
            p.pooled().into_iter().find(|(k, _)| *k == want).map(|x| (x.1.calls, x.1.inclusive_ns, x.1.exclusive_ns))
        };
        assert_eq!(row(&p, &["a"]), Some((1, 100, 100 - 20 - 20 - 5)));
        assert_eq!(row(&p, &["a", "b"]), Some((3, 40, 20 + 13 + 5)));
        assert_eq!(row(&p, &["a", "b", "c"]), Some((1, 2, 2)));
        assert_eq!(row(&p, &["a", "c"]), Some((1, 5, 5)));
        assert_eq!(row(&p, &["c"]), Some((1, 7, 7)));
        assert_eq!(p.pooled().len(), 5);
        // The same from the calls (keep_calls): the sweep at finalize.
        let records = vec![crate::profile::ThreadRecord { index: 0, os_tid: 1, data: kept }];
        let q = crate::callpath::collect(&names, &records, &crate::clock::Timebase::monotonic(), 0);
        let mut a = p.pooled();
        let mut b = q.pooled();
        a.sort_by(|x, y| x.0.cmp(&y.0));
        b.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(a, b);
    }

    #[test]
    fn unmatched_stop_changes_nothing() {
        let mut d = ThreadData::default();
        assert!(d.open(0, 1));
        assert!(!d.close(7, 2));
        assert_eq!(d.close_out_of_order(7, 2), Mismatch::NotOpen);
        assert_eq!(d.open.len(), 1);
        assert!(d.close(0, 3));
        assert_eq!(calls(&mut d, 0), vec![Call { start: 1, end: 3 }]);
    }

    #[test]
    fn stop_of_outer_region_closes_inner_unrecorded() {
        let mut d = ThreadData::default();
        assert!(d.open(0, 1));
        assert!(d.open(1, 2));
        assert!(d.open(2, 3));
        assert!(!d.close(0, 9));
        assert_eq!(d.close_out_of_order(0, 9), Mismatch::ClosedInner(vec![2, 1]));
        assert!(d.open.is_empty());
        assert_eq!(calls(&mut d, 0), vec![Call { start: 1, end: 9 }]);
        assert!(calls(&mut d, 1).is_empty());
        assert_eq!(d.dropped, vec![0, 1, 1]);
    }

    #[test]
    fn calls_recorded_when_they_end_nest_in_the_open_call() {
        let mut d = ThreadData::default();
        assert!(d.open(0, 0));
        d.record_closed(1, 10, 30);
        d.add_child_time(5);
        assert!(d.close(0, 100));
        assert_eq!(calls(&mut d, 1), vec![Call { start: 10, end: 30 }]);
        assert_eq!(d.stats.get(0).unwrap().exclusive, 75);
        assert_eq!(d.stats.get(1).unwrap().total, 20);
        // Outside any call: recorded, no parent to charge.
        d.record_closed(1, 200, 201);
        d.add_child_time(7);
        assert_eq!(d.stats.get(1).unwrap().count, 2);
    }

    #[test]
    fn ranges_on_a_track_overlap_without_nesting() {
        let mut d = ThreadData { track: true, ..ThreadData::default() };
        assert!(d.open_on_track(0, 10));
        assert!(d.open_on_track(1, 20));
        assert!(d.open_on_track(0, 30)); // the same region again, overlapping
        assert!(d.close_on_track(0, 10, 40)); // the first ends first, inside nothing
        assert!(!d.close_on_track(0, 10, 41)); // twice: not open
        assert!(d.close_on_track(1, 20, 50));
        assert_eq!(calls(&mut d, 0), vec![Call { start: 10, end: 40 }]);
        assert_eq!(calls(&mut d, 1), vec![Call { start: 20, end: 50 }]);
        // Nothing is charged to what stays open: every call's exclusive time is its own.
        let a = d.stats.get(0).unwrap();
        assert_eq!((a.count, a.total, a.exclusive), (1, 30, 30));
        let b = d.stats.get(1).unwrap();
        assert_eq!((b.count, b.total, b.exclusive), (1, 30, 30));
        assert_eq!(d.open.len(), 1);
        assert_eq!((d.open[0].id, d.open[0].start, d.open[0].child), (0, 30, 0));
        // Statistics only: the call paths are flat too.
        let mut d = ThreadData { track: true, keep_calls: false, ..ThreadData::default() };
        assert!(d.open_on_track(0, 0));
        assert!(d.open_on_track(1, 5));
        assert!(d.close_on_track(1, 5, 7));
        assert!(d.close_on_track(0, 0, 9));
        let names: Vec<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
        let mut p = crate::model::CallPaths { names, ..Default::default() };
        d.paths.append_to(&mut p, 0, |r| r, |t| t);
        let mut rows: Vec<(Vec<String>, u64)> = p.pooled().into_iter().map(|(k, v)| (k, v.calls)).collect();
        rows.sort();
        assert_eq!(rows, vec![(vec!["a".to_string()], 1), (vec!["b".to_string()], 1)]);
    }

    #[test]
    fn pushes_pop_per_stack() {
        let mut d = ThreadData::default();
        assert_eq!(d.pop_pushed(1), None);
        assert_eq!((d.push_pushed(1, 10), d.push_pushed(1, 11), d.push_pushed(2, 20), d.push_pushed(1, NOT_PUSHED)), (0, 1, 0, 2));
        assert_eq!(d.pop_pushed(2), Some((20, 0)));
        assert_eq!(d.pop_pushed(1), Some((NOT_PUSHED, 2)));
        assert_eq!(d.push_pushed(2, 21), 0);
        assert_eq!(d.pop_pushed(1), Some((11, 1)));
        assert_eq!((d.pop_pushed(1), d.pop_pushed(1)), (Some((10, 0)), None));
        assert_eq!((d.pop_pushed(2), d.pop_pushed(2)), (Some((21, 0)), None));
        for i in 0..MAX_DEPTH as u32 + 2 {
            d.push_pushed(3, i);
        }
        assert_eq!((d.pop_pushed(3), d.pop_pushed(3)), (Some((NOT_PUSHED, MAX_DEPTH as u32)), Some((NOT_PUSHED, MAX_DEPTH as u32))));
        assert_eq!(d.pop_pushed(3), Some((MAX_DEPTH as u32 - 1, MAX_DEPTH as u32 - 1)));
    }

    /// Pushes past the depth bound are counted per stack: a pop of another stack takes its own
    /// push, not one of those (two NVTX domains, one pushed past the bound).
    #[test]
    fn pushes_past_the_bound_pop_on_their_own_stack() {
        let mut d = ThreadData::default();
        d.push_pushed(7, 70);
        for i in 0..MAX_DEPTH as u32 + 3 {
            d.push_pushed(8, i);
        }
        // Stack 7's pop: its own push, though stack 8 has 4 pushes past the bound.
        assert_eq!(d.pop_pushed(7), Some((70, 0)));
        assert_eq!(d.pop_pushed(7), None);
        for _ in 0..4 {
            assert_eq!(d.pop_pushed(8), Some((NOT_PUSHED, MAX_DEPTH as u32)));
        }
        assert_eq!(d.pop_pushed(8), Some((MAX_DEPTH as u32 - 2, MAX_DEPTH as u32 - 2)));
        assert!(d.pushed_beyond.is_empty());
    }

    #[test]
    fn depth_is_bounded() {
        let mut d = ThreadData::default();
        for i in 0..MAX_DEPTH {
            assert!(d.open(0, i as i64));
        }
        assert!(!d.open(0, 0));
        assert_eq!(d.open.len(), MAX_DEPTH);
    }
}
