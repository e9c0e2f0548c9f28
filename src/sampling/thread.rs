//! One sampled thread: its sample source (a perf event or a timer), the table its samples are
//! counted in, and the lock word that lets the signal handler (on the thread) and the
//! controller (any thread starting, stopping or collecting) take turns.
//!
//! The handler never waits: it takes the lock word from FREE to HANDLER or drops the sample.
//! The controller takes it from FREE to CONTROL, waiting a bounded time for a handler to
//! finish; CLOSED is final (finalize has taken the table). Everything the handler touches is
//! plain memory, atomics and raw system calls: no lock, no allocation (the table grows with
//! `mmap`), no formatting.

use super::{perf, timer};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const FREE: u32 = 0;
const HANDLER: u32 = 1;
const CONTROL: u32 = 2;
const CLOSED: u32 = 3;

/// Region id of a sample outside every region.
pub const OUTSIDE: u32 = u32::MAX;

/// What delivers this thread's samples.
pub enum Source {
    None,
    Perf(perf::PerfSource),
    Timer(timer::TimerSource),
}

/// One (region, address) of the table.
#[repr(C)]
#[derive(Clone, Copy)]
struct Entry {
    ip: u64,
    region: u32,
    used: u32,
    count: u64,
    ns: u64,
}

/// Open-addressing hash table of (region, address) -> samples, in memory mapped with `mmap`
/// (so the handler can grow it).
struct Table {
    entries: *mut Entry,
    cap: usize,
    len: usize,
}

const FIRST_CAP: usize = 256;
/// 2^20 distinct (region, address) pairs per thread (32 MiB); later new pairs are counted lost.
const MAX_CAP: usize = 1 << 21;

fn map_entries(cap: usize) -> *mut Entry {
    // SAFETY: an anonymous private mapping; no file, no fixed address.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), cap * std::mem::size_of::<Entry>(), libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    if p == libc::MAP_FAILED { std::ptr::null_mut() } else { p.cast() }
}

fn slot(ip: u64, region: u32, cap: usize) -> usize {
    let h = (ip ^ (region as u64).rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 20) as usize & (cap - 1)
}

impl Table {
    const fn empty() -> Table {
        Table { entries: std::ptr::null_mut(), cap: 0, len: 0 }
    }

    /// Count one sample. False if it could not be kept (no memory, table full).
    /// Async-signal-safe.
    fn add(&mut self, ip: u64, region: u32, ns: u64) -> bool {
        if self.entries.is_null() {
            self.entries = map_entries(FIRST_CAP);
            if self.entries.is_null() {
                return false;
            }
            self.cap = FIRST_CAP;
        }
        let mut i = slot(ip, region, self.cap);
        loop {
            // SAFETY: i < cap, the mapping holds cap entries (zeroed by mmap).
            let e = unsafe { &mut *self.entries.add(i) };
            if e.used == 0 {
                break;
            }
            if e.ip == ip && e.region == region {
                e.count += 1;
                e.ns = e.ns.saturating_add(ns);
                return true;
            }
            i = (i + 1) & (self.cap - 1);
        }
        if 2 * (self.len + 1) > self.cap && !self.grow() {
            return false;
        }
        self.insert_new(ip, region, ns)
    }

    fn insert_new(&mut self, ip: u64, region: u32, ns: u64) -> bool {
        let mut i = slot(ip, region, self.cap);
        loop {
            // SAFETY: as in `add`.
            let e = unsafe { &mut *self.entries.add(i) };
            if e.used == 0 {
                *e = Entry { ip, region, used: 1, count: 1, ns };
                self.len += 1;
                return true;
            }
            i = (i + 1) & (self.cap - 1);
        }
    }

    /// Double the table (async-signal-safe: mmap and munmap only).
    fn grow(&mut self) -> bool {
        let cap = self.cap * 2;
        if cap > MAX_CAP {
            return false;
        }
        let new = map_entries(cap);
        if new.is_null() {
            return false;
        }
        let (old, old_cap) = (self.entries, self.cap);
        self.entries = new;
        self.cap = cap;
        self.len = 0;
        for j in 0..old_cap {
            // SAFETY: j < old_cap.
            let e = unsafe { *old.add(j) };
            if e.used != 0 {
                let mut i = slot(e.ip, e.region, cap);
                // SAFETY: i < cap.
                while unsafe { (*new.add(i)).used } != 0 {
                    i = (i + 1) & (cap - 1);
                }
                unsafe { *new.add(i) = e };
                self.len += 1;
            }
        }
        // SAFETY: mapped by `map_entries` with old_cap entries; nothing points into it now.
        unsafe { libc::munmap(old.cast(), old_cap * std::mem::size_of::<Entry>()) };
        true
    }

    /// Every (region, address, samples, ns), and the memory given back.
    fn take(&mut self) -> Vec<(u32, u64, u64, u64)> {
        let mut out = Vec::with_capacity(self.len);
        for j in 0..self.cap {
            // SAFETY: j < cap.
            let e = unsafe { *self.entries.add(j) };
            if e.used != 0 {
                out.push((e.region, e.ip, e.count, e.ns));
            }
        }
        if !self.entries.is_null() {
            // SAFETY: our mapping.
            unsafe { libc::munmap(self.entries.cast(), self.cap * std::mem::size_of::<Entry>()) };
        }
        *self = Table::empty();
        out
    }
}

/// A sampled thread. Never freed: a signal already queued for the thread may still find it
/// through the thread's TLS slot after sampling stopped.
pub struct ThreadSampler {
    lock: AtomicU32,
    pub tid: i32,
    /// The thread ended (its exit hook ran): never armed again.
    pub exited: AtomicBool,
    /// A source was armed for it at some point (it counts among the sampled threads).
    pub armed_once: AtomicBool,
    /// The thread had the sampling signal blocked when it ended (or at finalize): its samples
    /// could not arrive.
    pub blocked: AtomicBool,
    source: UnsafeCell<Source>,
    table: UnsafeCell<Table>,
    /// Perf signals that arrived while the controller held the lock word: their samples wait
    /// in the ring buffer, and their overflows are given back to the event's budget when the
    /// controller lets go.
    held_signals: AtomicU64,
    /// Samples taken, of them outside every region, and samples lost.
    pub taken: AtomicU64,
    pub outside: AtomicU64,
    pub lost: AtomicU64,
}

// SAFETY: `source` and `table` are only touched by whoever holds the lock word.
unsafe impl Sync for ThreadSampler {}
unsafe impl Send for ThreadSampler {}

/// The controller's hold on a thread's sampler (released when dropped, unless closed).
pub struct Held<'a> {
    t: &'a ThreadSampler,
    close: bool,
}

impl Held<'_> {
    pub fn source(&mut self) -> &mut Source {
        // SAFETY: we hold the lock word.
        unsafe { &mut *self.t.source.get() }
    }

    /// The thread's counted samples as (region, address, samples, ns); the table is emptied.
    pub fn take_table(&mut self) -> Vec<(u32, u64, u64, u64)> {
        // SAFETY: we hold the lock word.
        unsafe { &mut *self.t.table.get() }.take()
    }

    /// Keep the handler out for good (finalize).
    pub fn close(mut self) {
        self.close = true;
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if !self.close {
            let missed = self.t.held_signals.swap(0, Ordering::AcqRel);
            if let (true, Source::Perf(p)) = (missed > 0, self.source()) {
                p.give_back(missed);
            }
        }
        self.t.lock.store(if self.close { CLOSED } else { FREE }, Ordering::Release);
    }
}

impl ThreadSampler {
    pub fn new(tid: i32) -> ThreadSampler {
        ThreadSampler {
            lock: AtomicU32::new(FREE),
            tid,
            exited: AtomicBool::new(false),
            armed_once: AtomicBool::new(false),
            blocked: AtomicBool::new(false),
            source: UnsafeCell::new(Source::None),
            table: UnsafeCell::new(Table::empty()),
            held_signals: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            outside: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        }
    }

    /// Take the lock word for the controller, waiting up to `patience` for a running handler
    /// (it blocks every other signal, so it always finishes). None if closed or still busy.
    pub fn hold(&self, patience: Duration) -> Option<Held<'_>> {
        let deadline = Instant::now() + patience;
        loop {
            match self.lock.compare_exchange(FREE, CONTROL, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(Held { t: self, close: false }),
                Err(CLOSED) => return None,
                Err(_) if Instant::now() >= deadline => return None,
                Err(_) => std::thread::sleep(Duration::from_micros(50)),
            }
        }
    }

    pub fn is_closed(&self) -> bool {
        self.lock.load(Ordering::Acquire) == CLOSED
    }

    /// A sample signal arrived on this thread (called by the handler, on the thread).
    /// `region` is the thread's innermost open region (or `OUTSIDE`); `perf_fd` the descriptor
    /// the signal names (perf: the samples are read from its ring buffer), `overrun` the
    /// periods a timer missed, `context_ip` the interrupted address from the signal context
    /// (timer).
    ///
    /// # Safety
    /// Only from the signal handler, on the thread this sampler belongs to.
    pub unsafe fn on_signal(&self, region: impl Fn() -> u32, perf_fd: Option<i32>, overrun: u64, context_ip: u64) {
        if self.lock.compare_exchange(FREE, HANDLER, Ordering::Acquire, Ordering::Relaxed).is_err() {
            // The controller is changing this thread's source, or finalize has closed it. A
            // perf sample stays in the ring buffer for the next signal; a timer's is lost.
            if self.lock.load(Ordering::Relaxed) == CONTROL {
                let counter = if perf_fd.is_some() { &self.held_signals } else { &self.lost };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        // SAFETY: we hold the lock word.
        let (source, table) = unsafe { (&mut *self.source.get(), &mut *self.table.get()) };
        let region = region();
        let mut keep = |ip: u64, ns: u64| {
            if ip == 0 {
                return;
            }
            self.taken.fetch_add(1, Ordering::Relaxed);
            if region == OUTSIDE {
                self.outside.fetch_add(1, Ordering::Relaxed);
            }
            if !table.add(ip, region, ns) {
                self.lost.fetch_add(1, Ordering::Relaxed);
            }
        };
        match source {
            Source::Perf(p) if perf_fd == Some(p.fd) => {
                let period = p.period_ns;
                // SAFETY: the ring is mapped while the source lives, and we hold the lock.
                // (No record: an earlier signal's handler read this overflow's sample.)
                let (samples, lost) = unsafe { p.drain(|ip| keep(ip, period)) };
                self.lost.fetch_add(lost, Ordering::Relaxed);
                p.give_back(samples + lost);
            }
            Source::Timer(t) if perf_fd.is_none() => {
                let weight = 1 + overrun.min(1_000_000);
                keep(context_ip, t.period_ns.saturating_mul(weight));
            }
            // A signal of a source already replaced or removed.
            _ => {}
        }
        self.lock.store(FREE, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_counts_and_grows() {
        let mut t = Table::empty();
        for i in 0..5000u64 {
            assert!(t.add(0x1000 + i % 1500, (i % 3) as u32, 10));
        }
        assert!(t.add(7, OUTSIDE, 1));
        let mut rows = t.take();
        rows.sort();
        // 1500 addresses, each with the regions i % 3 it met.
        let total: u64 = rows.iter().map(|r| r.2).sum();
        assert_eq!(total, 5001);
        assert_eq!(rows.iter().map(|r| r.3).sum::<u64>(), 50_001);
        assert!(rows.iter().all(|r| r.0 == OUTSIDE || r.0 < 3));
        assert!(rows.contains(&(OUTSIDE, 7, 1, 1)));
        assert_eq!(rows.len(), 1501);
        assert!(t.entries.is_null(), "the memory is given back");
    }

    #[test]
    fn the_controller_waits_and_closed_is_final() {
        let s = ThreadSampler::new(1);
        let held = s.hold(Duration::from_millis(10)).unwrap();
        assert!(s.hold(Duration::from_millis(10)).is_none(), "held by the controller");
        drop(held);
        let held = s.hold(Duration::from_millis(10)).unwrap();
        held.close();
        assert!(s.is_closed() && s.hold(Duration::from_millis(10)).is_none());
        // A signal arriving now is ignored (and not counted: the sampler is closed).
        unsafe { s.on_signal(|| 0, None, 0, 0x1234) };
        assert_eq!(s.taken.load(Ordering::Relaxed), 0);
    }
}
