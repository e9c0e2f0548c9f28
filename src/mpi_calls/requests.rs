//! The requests of nonblocking and persistent MPI calls, by handle value and the address the
//! handle was written to, until a Wait/Test completes them (persistent ones: until
//! MPI_Request_free): where each came from, so that a completion is attributed to its origin,
//! also when MPI gives one handle value to many requests (`RequestTable`).
//!
//! Where MPI lets only one thread call it (MPI_THREAD_SINGLE, MPI_THREAD_FUNNELED: most
//! programs, hybrid MPI+OpenMP ones included) each thread keeps its requests in its own table
//! (`ThreadMpi::requests`, no lock at all). Where several threads may (MPI_THREAD_SERIALIZED,
//! MPI_THREAD_MULTIPLE, or a level not known), one thread may complete another's request: the
//! table here is shared, sharded by handle, each shard behind a small spin lock held for one
//! hash-map operation (one atomic exchange to take it, a plain store to give it back: half the
//! atomic operations of a mutex, on the path of every nonblocking call).

use crate::mpi_stats::{Origin, RequestTable};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const SHARDS: usize = 64;
/// Requests kept per thread in the unshared mode.
pub const PER_THREAD: usize = 1 << 20;
/// Whether the shared table is in use (until MPI said otherwise: the safe choice).
static SHARED: AtomicBool = AtomicBool::new(true);

pub fn shared() -> bool {
    SHARED.load(Ordering::Relaxed)
}

pub fn set_shared(shared: bool) {
    SHARED.store(shared, Ordering::Relaxed);
}

/// Requests kept per shard (4 Mi in all): a program that never completes its requests must
/// not grow the table without bound. Beyond, requests are counted as untracked.
const PER_SHARD: usize = 1 << 16;

struct Shard {
    locked: AtomicBool,
    table: UnsafeCell<Option<RequestTable>>,
}

// SAFETY: `table` is only touched while `locked` is held (see `with`).
unsafe impl Sync for Shard {}

static TABLE: [Shard; SHARDS] = [const { Shard { locked: AtomicBool::new(false), table: UnsafeCell::new(None) } }; SHARDS];
static UNTRACKED: AtomicU64 = AtomicU64::new(0);

fn shard(handle: u64) -> &'static Shard {
    let h = handle.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    &TABLE[(h >> 58) as usize % SHARDS]
}

/// Run `f` on the shard's table with the shard locked. `f` is one hash-map operation: it
/// never blocks and never panics short of allocation failure (which aborts), so the lock is
/// always given back.
fn with_shard<R>(s: &Shard, f: impl FnOnce(&mut Option<RequestTable>) -> R) -> R {
    let mut spins = 0u32;
    while s.locked.swap(true, Ordering::Acquire) {
        while s.locked.load(Ordering::Relaxed) {
            spins += 1;
            if spins % 64 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
    // SAFETY: the lock is held.
    let r = f(unsafe { &mut *s.table.get() });
    s.locked.store(false, Ordering::Release);
    r
}

fn with<R>(handle: u64, f: impl FnOnce(&mut RequestTable) -> R) -> R {
    with_shard(shard(handle), |t| f(t.get_or_insert_with(RequestTable::default)))
}

/// A request was created under `handle`, written to `slot`.
pub fn insert(handle: u64, slot: u64, origin: Origin) {
    if handle == 0 {
        return;
    }
    if !with(handle, |t| t.insert(handle, slot, origin, PER_SHARD)) {
        UNTRACKED.fetch_add(1, Ordering::Relaxed);
    }
}

/// The origin of a live request.
pub fn get(handle: u64, slot: u64) -> Option<Origin> {
    if handle == 0 {
        return None;
    }
    with(handle, |t| t.get(handle, slot))
}

/// A request completed: its origin, and it is forgotten unless persistent (a completed
/// persistent request stays, inactive, until it is freed).
pub fn complete(handle: u64, slot: u64) -> Option<Origin> {
    if handle == 0 {
        return None;
    }
    with(handle, |t| t.complete(handle, slot))
}

/// A request was freed.
pub fn remove(handle: u64, slot: u64) {
    if handle != 0 {
        with(handle, |t| t.remove(handle, slot));
    }
}

/// Requests not kept since the last `clear`.
pub fn untracked() -> u64 {
    UNTRACKED.load(Ordering::Relaxed)
}

/// Forget every request (at finalize).
pub fn clear() {
    for s in &TABLE {
        with_shard(s, |t| *t = None);
    }
    UNTRACKED.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_forgets_all_but_persistent_requests_and_threads_share_the_table() {
        let o = |routine, persistent| Origin { routine, sent: 8, received: 0, dest: 1, source: -1, persistent };
        // Handles far from those of other tests in this process.
        let base = 0xABCD_0000_0000u64;
        insert(base + 1, 0, o(1, false));
        insert(base + 2, 0, o(2, true));
        assert_eq!(complete(base + 1, 0).unwrap().routine, 1);
        assert!(complete(base + 1, 0).is_none(), "forgotten once completed");
        assert_eq!(complete(base + 2, 0).unwrap().routine, 2);
        assert_eq!(get(base + 2, 0).unwrap().routine, 2, "a persistent request stays");
        remove(base + 2, 0);
        assert!(get(base + 2, 0).is_none());
        assert!(get(0, 0).is_none());
        // Under concurrency: one thread creates, another completes, no request is lost.
        std::thread::scope(|s| {
            for t in 0..4u64 {
                s.spawn(move || {
                    for i in 0..10_000u64 {
                        insert(base + 0x100_0000 * (t + 1) + i, 0, o(t as u32, false));
                    }
                });
            }
        });
        let done: usize = std::thread::scope(|s| {
            (0..4u64)
                .map(|t| s.spawn(move || (0..10_000u64).filter(|i| complete(base + 0x100_0000 * (t + 1) + i, 0).is_some_and(|o| o.routine == t as u32)).count()))
                .collect::<Vec<_>>()
                .into_iter()
                .map(|h| h.join().unwrap())
                .sum()
        });
        assert_eq!(done, 40_000);
    }
}
