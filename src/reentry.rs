//! Calls from a signal handler that interrupted the library on the same thread.
//!
//! A thread is "busy" while it is inside a cold part of the library: a lock held, memory being
//! allocated (setup, finalize, registration, the error path that records `sp_last_error`).
//! While it is inside a start/stop call its `CallSeq` is odd (`quiesce.rs`). A signal handler
//! that interrupts either and calls the library again on the same thread would deadlock on the
//! lock or corrupt the allocator; instead such a call is refused with `Status::Reentrant`,
//! without allocating, locking or printing. The flag lives in initial-exec TLS (`tls.c`), so
//! reading it never allocates either.

unsafe extern "C" {
    fn scope_profiler_busy_get() -> std::ffi::c_int;
    fn scope_profiler_busy_set(v: std::ffi::c_int);
}

/// Is the calling thread inside a cold part of the library?
#[inline]
pub fn busy() -> bool {
    // SAFETY: reads this thread's own TLS slot.
    unsafe { scope_profiler_busy_get() != 0 }
}

/// The value of the flag inside an exported cold entry point (`ffi::guard_cold`), which refuses
/// to start when the thread is busy: the errors of that call itself may record their messages.
const COLD_ENTRY: std::ffi::c_int = 2;

/// Is the calling thread inside an exported cold entry point and not inside one of the
/// library's locked or allocating sections (where the flag is 1)? Its own errors then record
/// their messages. (A handler that interrupted such an entry point and calls a start/stop
/// function that fails sees this too: its message is recorded; every other call from such a
/// handler is refused.)
#[inline]
pub fn in_cold_entry() -> bool {
    // SAFETY: reads this thread's own TLS slot.
    unsafe { scope_profiler_busy_get() == COLD_ENTRY }
}

/// Marks the calling thread busy until dropped (restoring what it was: nesting is harmless).
pub struct Busy(std::ffi::c_int);

impl Busy {
    #[inline]
    pub fn enter() -> Busy {
        Busy::set(1)
    }

    /// For an exported cold entry point (see [`in_cold_entry`]).
    #[inline]
    pub fn enter_cold_entry() -> Busy {
        Busy::set(COLD_ENTRY)
    }

    #[inline]
    fn set(v: std::ffi::c_int) -> Busy {
        // SAFETY: this thread's own TLS slot.
        unsafe {
            let was = scope_profiler_busy_get();
            scope_profiler_busy_set(v);
            Busy(was)
        }
    }
}

impl Drop for Busy {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: this thread's own TLS slot.
        unsafe { scope_profiler_busy_set(self.0) };
    }
}
