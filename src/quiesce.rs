//! Making sure no thread is inside a start/stop call while finalize reads its buffers.
//!
//! Each thread bumps its own sequence number to odd on entering a call and back to even on
//! leaving (plain stores, no atomic read-modify-write, so the hot path stays cheap). Finalize
//! first publishes the "finalized" state, then issues `membarrier(2)`, which runs a full memory
//! barrier on every thread of the process (the asymmetric-fence technique of liburcu). After it,
//! a thread seen at an even number is outside any call and will see the new state on its next
//! entry; a thread seen at odd is waited for.

use std::sync::atomic::{AtomicU64, Ordering, compiler_fence};
use std::time::{Duration, Instant};

const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 8;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 16;

fn membarrier(cmd: libc::c_long) -> bool {
    // SAFETY: plain syscall with integer arguments.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_long, 0 as libc::c_long) == 0 }
}

/// Register for the cheap expedited barrier (once, at setup). Failure is fine: `barrier` falls back.
pub fn prepare() {
    membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
}

/// A full memory barrier on every running thread of this process.
pub fn barrier() {
    if membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) || membarrier(MEMBARRIER_CMD_GLOBAL) {
        return;
    }
    // No membarrier (very old kernel or a seccomp filter): a pause far longer than any
    // store-buffer drain does the same job in practice.
    std::thread::sleep(Duration::from_millis(20));
}

/// Per-thread call sequence number: odd while the owning thread is inside a call.
#[derive(Default)]
pub struct CallSeq(AtomicU64);

impl CallSeq {
    /// Owner thread, on entering a call; returns the value to pass to `leave`.
    #[inline(always)]
    pub fn enter(&self) -> u64 {
        let v = self.0.load(Ordering::Relaxed) + 1;
        self.0.store(v, Ordering::Relaxed);
        // Only the compiler must keep the state check after this store; the CPU-level
        // ordering is supplied by `barrier()` on the finalizing thread.
        compiler_fence(Ordering::SeqCst);
        v
    }

    /// Owner thread, on entering a call, unless it is inside one already (a signal handler
    /// interrupted it): then None, and nothing changed.
    #[inline(always)]
    pub fn try_enter(&self) -> Option<u64> {
        let v = self.0.load(Ordering::Relaxed);
        if v & 1 != 0 {
            return None;
        }
        self.0.store(v + 1, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        Some(v + 1)
    }

    /// Owner thread: is it inside a call? (A signal handler asks on the thread it interrupted.)
    #[inline]
    pub fn in_call(&self) -> bool {
        self.0.load(Ordering::Relaxed) & 1 != 0
    }

    /// Owner thread, on leaving a call: publishes everything the call wrote.
    #[inline(always)]
    pub fn leave(&self, entered: u64) {
        self.0.store(entered + 1, Ordering::Release);
    }

    /// Owner thread: whether it is inside a call now (a signal handler, or code the profiler
    /// itself runs, that calls back in).
    #[inline(always)]
    pub fn is_inside(&self) -> bool {
        self.0.load(Ordering::Relaxed) % 2 == 1
    }

    /// Finalizing thread, after `barrier()`: wait until the owner is outside any call.
    /// Returns false if it is still inside one at `deadline`.
    pub fn wait_idle(&self, deadline: Instant) -> bool {
        loop {
            if self.0.load(Ordering::Acquire) % 2 == 0 {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::yield_now();
        }
    }
}
