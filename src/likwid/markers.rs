//! In-process LIKWID marker calls (spec 3.1 and 6).
//!
//! Rules this follows, and why:
//! * `likwid_markerInit` once, on the setup thread before workers exist, after flushing
//!   stdio (LIKWID forks rdpmc test children that would flush duplicated buffers).
//! * `likwid_markerThreadInit` once per recording thread, at most [`THREAD_INIT_CAP`]
//!   times in all: LIKWID stores each thread in a 300-slot array without a bounds check.
//! * LIKWID 5.2 keys results by CPU and numbers regions per CPU in creation order, so every
//!   region is registered on each CPU in id order before that CPU starts anything
//!   (otherwise regions of different threads merge or swap, spec 6 rule 4).
//! * LIKWID 5.5 keys results by thread (gettid): `likwid_markerStopRegion` and
//!   `likwid_markerGetRegion` dereference NULL for a region the calling thread does not
//!   have, and `likwid_markerClose` overflows its region array when threads hold different
//!   region sets. So every thread also registers every region, in id order, before its
//!   first start/stop (one rule that satisfies both versions).
//! * Calls on a CPU outside `LIKWID_THREADS` are skipped: LIKWID would refuse them and a
//!   register there would create a stray per-CPU table.
//! * At finish: snapshots (`likwid_markerGetRegion`) of the regions this CPU knows, then
//!   `likwid_markerClose`, which writes the marker file. We never touch that file again.

use super::tags::TagTable;
use likwid_sys::Likwid;
use std::cell::Cell;
use std::ffi::c_int;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::env::MAX_CPUS;

/// LIKWID's `threads2Pthread` has 300 slots; markerInit takes one.
pub const THREAD_INIT_CAP: u32 = 256;
/// LIKWID's `NUM_PMC`: the most events an event set can have.
pub const MAX_EVENTS: usize = 410;

thread_local! {
    static THREAD_INIT_DONE: Cell<bool> = const { Cell::new(false) };
    /// Regions `0..n` are registered by this thread, in id order.
    static THREAD_REGISTERED: Cell<u32> = const { Cell::new(0) };
    /// This thread's kernel id (0: not asked yet).
    static THREAD_TID: Cell<u64> = const { Cell::new(0) };
}

#[inline]
fn my_tid() -> u64 {
    THREAD_TID
        .try_with(|t| {
            if t.get() == 0 {
                // SAFETY: plain syscall wrapper.
                t.set(unsafe { libc::gettid() } as u64);
            }
            t.get()
        })
        .unwrap_or(0)
}

/// One `likwid_markerGetRegion` result (the calling thread's CPU).
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub id: u32,
    pub cpu: i64,
    pub count: u64,
    pub time: f64,
    pub values: Vec<f64>,
}

pub struct Markers {
    lib: &'static Likwid,
    pub tags: TagTable,
    measured: [bool; MAX_CPUS],
    /// Per CPU: regions `0..n` are registered there, in id order.
    registered: Box<[AtomicU32]>,
    register_lock: Mutex<()>,
    thread_inits: AtomicU32,
    /// Calls skipped because the thread ran on a CPU outside `LIKWID_THREADS`.
    pub foreign_cpu_calls: AtomicU64,
    /// LIKWID 5.5: one result slot per CPU, so only one thread per CPU may record there.
    per_thread: bool,
    /// Per CPU: the thread (tid) that records there (0: none yet). Used when `per_thread`.
    owner: Box<[AtomicU64]>,
    /// Calls skipped because another thread already records on that CPU (5.5 only).
    pub shared_cpu_calls: AtomicU64,
}

/// The CPU the calling thread runs on (LIKWID's `likwid_getProcessorId` agrees for a
/// thread pinned to one CPU, the only setup LIKWID supports).
#[inline]
fn current_cpu() -> Option<usize> {
    // SAFETY: plain libc call.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0 && (c as usize) < MAX_CPUS).then_some(c as usize)
}

impl Markers {
    /// Flush stdio and run `likwid_markerInit`. Returns `None` when LIKWID stayed
    /// inactive (no counter access: it printed its own errors and is a no-op).
    pub fn init(lib: &'static Likwid, threads: &[i32]) -> Option<Markers> {
        // SAFETY: fflush(NULL) flushes every C stream; markerInit is called once, here,
        // on the setup thread (the core guarantees no workers exist yet).
        unsafe {
            libc::fflush(std::ptr::null_mut());
            (lib.likwid_markerInit)();
        }
        // perfmon_getNumberOfGroups returns -EINVAL when perfmon_init failed inside markerInit.
        // SAFETY: safe in both states (checked against the installed 5.2.2).
        let groups = unsafe { (lib.perfmon_getNumberOfGroups)() };
        if groups <= 0 {
            return None;
        }
        let mut measured = [false; MAX_CPUS];
        for &c in threads {
            if let Some(m) = measured.get_mut(c as usize) {
                *m = true;
            }
        }
        Some(Markers {
            lib,
            tags: TagTable::default(),
            measured,
            registered: (0..MAX_CPUS).map(|_| AtomicU32::new(0)).collect(),
            register_lock: Mutex::new(()),
            thread_inits: AtomicU32::new(0),
            foreign_cpu_calls: AtomicU64::new(0),
            per_thread: lib.results_per_thread(),
            owner: (0..MAX_CPUS).map(|_| AtomicU64::new(0)).collect(),
            shared_cpu_calls: AtomicU64::new(0),
        })
    }

    /// TSC frequency LIKWID calibrated in markerInit (for `inverseClock`).
    pub fn cycle_clock(&self) -> f64 {
        // SAFETY: the timer is initialised by markerInit's perfmon_init.
        unsafe { (self.lib.timer_getCycleClock)() as f64 }
    }

    /// Once per thread: `likwid_markerThreadInit` (pins the thread when LIKWID_PIN is set).
    #[inline]
    fn enter_thread(&self) {
        // try_with: a call from a thread-local destructor must not panic (treated as done).
        if THREAD_INIT_DONE.try_with(|d| d.replace(true)).unwrap_or(true) {
            return;
        }
        if self.thread_inits.fetch_add(1, Ordering::AcqRel) < THREAD_INIT_CAP {
            // SAFETY: called once per thread, below LIKWID's slot limit.
            unsafe { (self.lib.likwid_markerThreadInit)() };
        }
    }

    /// The measured CPU of this thread, after thread init and per-CPU registration.
    #[inline]
    fn prepare(&self) -> Option<usize> {
        self.enter_thread();
        let cpu = current_cpu().filter(|&c| self.measured[c]);
        let Some(cpu) = cpu else {
            self.foreign_cpu_calls.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        if self.per_thread && !self.owns(cpu) {
            self.shared_cpu_calls.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let n = self.tags.len();
        // No thread-local state left (a call from a TLS destructor): skip rather than risk
        // a stop of a region this thread never registered.
        let mine = THREAD_REGISTERED.try_with(Cell::get).ok()?;
        if mine < n || self.registered[cpu].load(Ordering::Acquire) < n {
            self.register_on(cpu, mine);
        }
        Some(cpu)
    }

    /// LIKWID 5.5 writes one result per region and CPU (its thread slot is the CPU's index
    /// in `LIKWID_THREADS`): a second thread recording on a CPU would overwrite the first
    /// one's results at close, so the first thread to record on a CPU keeps it.
    #[inline]
    fn owns(&self, cpu: usize) -> bool {
        let me = my_tid();
        if me == 0 {
            return false;
        }
        // A plain load once the CPU has its owner: the locked compare-and-swap (a write to a
        // cache line the other CPUs' slots share) only while it has none.
        match self.owner[cpu].load(Ordering::Acquire) {
            0 => match self.owner[cpu].compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => true,
                Err(owner) => owner == me,
            },
            owner => owner == me,
        }
    }

    /// Register regions `from..n` on this thread and this CPU (registering one again is a
    /// no-op in LIKWID), so both keep the id order.
    #[cold]
    fn register_on(&self, cpu: usize, mine: u32) {
        let _g = self.register_lock.lock();
        let from = self.registered[cpu].load(Ordering::Acquire).min(mine);
        let n = self.tags.len();
        for id in from..n {
            if let Some(tag) = self.tags.tag(id) {
                // SAFETY: NUL-terminated tag that lives as long as the table.
                unsafe { (self.lib.likwid_markerRegisterRegion)(tag.as_ptr()) };
            }
        }
        self.registered[cpu].fetch_max(n, Ordering::AcqRel);
        let _ = THREAD_REGISTERED.try_with(|c| c.set(c.get().max(n)));
    }

    #[inline]
    pub fn start(&self, id: u32) -> c_int {
        let Some(tag) = self.tags.tag(id) else { return 0 };
        if self.prepare().is_none() {
            return 0;
        }
        // SAFETY: valid tag; LIKWID initialised; thread on a measured CPU.
        unsafe { (self.lib.likwid_markerStartRegion)(tag.as_ptr()) }
    }

    #[inline]
    pub fn stop(&self, id: u32) -> c_int {
        let Some(tag) = self.tags.tag(id) else { return 0 };
        if self.prepare().is_none() {
            return 0;
        }
        // SAFETY: as in start.
        unsafe { (self.lib.likwid_markerStopRegion)(tag.as_ptr()) }
    }

    /// LIKWID 5.5 only, before close: the finishing thread registers every region on its
    /// CPU, if that CPU is its own. 5.5 counts a region's threads by the threads that have
    /// it but stores them by CPU slot, and writes -22 (-EINVAL) for the counters of slots
    /// past that count; the main thread on the first CPU is the common such slot.
    pub fn register_all_here(&self) {
        if !self.per_thread {
            return;
        }
        let Some(cpu) = current_cpu().filter(|&c| self.measured[c]) else { return };
        if !self.owns(cpu) {
            return;
        }
        self.enter_thread();
        let Ok(mine) = THREAD_REGISTERED.try_with(Cell::get) else { return };
        if mine < self.tags.len() || self.registered[cpu].load(Ordering::Acquire) < self.tags.len() {
            self.register_on(cpu, mine);
        }
    }

    /// `likwid_markerGetRegion` of every region already registered by this thread on this
    /// CPU (asking about others would create entries in 5.2 and crash 5.5). Must run
    /// before [`Markers::close`].
    pub fn snapshots(&self) -> Vec<Snapshot> {
        let Some(cpu) = current_cpu().filter(|&c| self.measured[c]) else { return Vec::new() };
        let mine = THREAD_REGISTERED.try_with(Cell::get).unwrap_or(0);
        let known = self.registered[cpu].load(Ordering::Acquire).min(mine);
        let mut out = Vec::new();
        let mut buf = vec![0f64; MAX_EVENTS];
        for id in 0..known {
            let Some(tag) = self.tags.tag(id) else { continue };
            let (mut n, mut time, mut count): (c_int, f64, c_int) = (MAX_EVENTS as c_int, 0.0, 0);
            // SAFETY: all pointers valid; buf holds MAX_EVENTS doubles and n says so.
            unsafe { (self.lib.likwid_markerGetRegion)(tag.as_ptr(), &mut n, buf.as_mut_ptr(), &mut time, &mut count) };
            if count > 0 {
                let n = (n.max(0) as usize).min(MAX_EVENTS);
                out.push(Snapshot { id, cpu: cpu as i64, count: count as u64, time, values: buf[..n].to_vec() });
            }
        }
        out
    }

    /// `likwid_markerClose`: writes the marker file, then perfmon_finalize. Serial, once.
    pub fn close(&self) {
        // SAFETY: called once, after every recording thread has stopped.
        unsafe { (self.lib.likwid_markerClose)() };
    }

    /// `(num_sockets, num_numadomains)` from LIKWID's topology, for metric formulas.
    pub fn topology_counts(&self) -> (Option<f64>, Option<f64>) {
        // SAFETY: topology and NUMA were initialised by markerInit; we read two u32 fields.
        unsafe {
            let topo = (self.lib.get_cpuTopology)();
            let numa = (self.lib.get_numaTopology)();
            let sockets = (!topo.is_null()).then(|| (*topo).num_sockets as f64);
            let nodes = (!numa.is_null()).then(|| (*numa).number_of_nodes as f64);
            (sockets.filter(|&s| s > 0.0), nodes.filter(|&n| n > 0.0))
        }
    }
}
