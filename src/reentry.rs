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

/// Marks the calling thread busy until dropped (restoring what it was: nesting is harmless).
pub struct Busy(std::ffi::c_int);

impl Busy {
    #[inline]
    pub fn enter() -> Busy {
        // SAFETY: this thread's own TLS slot.
        unsafe {
            let was = scope_profiler_busy_get();
            scope_profiler_busy_set(1);
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
