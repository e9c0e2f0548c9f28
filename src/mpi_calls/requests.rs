//! The requests of nonblocking and persistent MPI calls, by handle value, until a Wait/Test
//! completes them (persistent ones: until MPI_Request_free): where each came from, so that a
//! completion is attributed to its origin. Shared by every thread (under MPI_THREAD_MULTIPLE
//! one thread may complete another's request): sharded by handle, one short lock per access.

use crate::mpi_stats::Origin;
use rustc_hash::FxHashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

const SHARDS: usize = 64;
/// Requests kept per shard (4 Mi in all): a program that never completes its requests must
/// not grow the table without bound. Beyond, requests are counted as untracked.
const PER_SHARD: usize = 1 << 16;

static TABLE: [Mutex<Option<FxHashMap<u64, Origin>>>; SHARDS] = [const { Mutex::new(None) }; SHARDS];
static UNTRACKED: AtomicU64 = AtomicU64::new(0);

fn shard(handle: u64) -> &'static Mutex<Option<FxHashMap<u64, Origin>>> {
    let h = handle.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    &TABLE[(h >> 58) as usize % SHARDS]
}

fn with<R>(handle: u64, f: impl FnOnce(&mut FxHashMap<u64, Origin>) -> R) -> R {
    let mut g = shard(handle).lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(FxHashMap::default))
}

/// A request was created (a handle value seen again replaces what was kept: MPI reuses the
/// handles of completed requests).
pub fn insert(handle: u64, origin: Origin) {
    if handle == 0 {
        return;
    }
    with(handle, |t| {
        if t.len() >= PER_SHARD && !t.contains_key(&handle) {
            UNTRACKED.fetch_add(1, Ordering::Relaxed);
        } else {
            t.insert(handle, origin);
        }
    })
}

/// The origin of a live request.
pub fn get(handle: u64) -> Option<Origin> {
    if handle == 0 {
        return None;
    }
    with(handle, |t| t.get(&handle).copied())
}

/// A request completed: its origin, and it is forgotten unless persistent (a completed
/// persistent request stays, inactive, until it is freed).
pub fn complete(handle: u64) -> Option<Origin> {
    if handle == 0 {
        return None;
    }
    with(handle, |t| match t.get(&handle).copied() {
        Some(o) if o.persistent => Some(o),
        Some(_) => t.remove(&handle),
        None => None,
    })
}

/// A request was freed.
pub fn remove(handle: u64) {
    if handle != 0 {
        with(handle, |t| t.remove(&handle));
    }
}

/// Requests not kept since the last `clear`.
pub fn untracked() -> u64 {
    UNTRACKED.load(Ordering::Relaxed)
}

/// Forget every request (at finalize).
pub fn clear() {
    for s in &TABLE {
        *s.lock().unwrap_or_else(|e| e.into_inner()) = None;
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
        insert(base + 1, o(1, false));
        insert(base + 2, o(2, true));
        assert_eq!(complete(base + 1).unwrap().routine, 1);
        assert!(complete(base + 1).is_none(), "forgotten once completed");
        assert_eq!(complete(base + 2).unwrap().routine, 2);
        assert_eq!(get(base + 2).unwrap().routine, 2, "a persistent request stays");
        remove(base + 2);
        assert!(get(base + 2).is_none());
        assert!(get(0).is_none());
        // Under concurrency: one thread creates, another completes, no request is lost.
        std::thread::scope(|s| {
            for t in 0..4u64 {
                s.spawn(move || {
                    for i in 0..10_000u64 {
                        insert(base + 0x100_0000 * (t + 1) + i, o(t as u32, false));
                    }
                });
            }
        });
        let done: usize = std::thread::scope(|s| {
            (0..4u64)
                .map(|t| s.spawn(move || (0..10_000u64).filter(|i| complete(base + 0x100_0000 * (t + 1) + i).is_some_and(|o| o.routine == t as u32)).count()))
                .collect::<Vec<_>>()
                .into_iter()
                .map(|h| h.join().unwrap())
                .sum()
        });
        assert_eq!(done, 40_000);
    }
}
