/* The calling thread's recorder pointer, in initial-exec TLS.
 *
 * Rust's thread_local! in a shared library uses the general-dynamic TLS model: every access
 * calls __tls_get_addr. Initial-exec is one %fs-relative load, which matters on the start/stop
 * hot path. It takes 8 bytes of the static TLS block, which glibc reserves surplus space for
 * even when the library is dlopen'ed (Python ctypes, for example). */
/* Not static: on x86-64 Linux the core reads it inline (src/profiler/mod.rs, `current_thread`:
 * the same initial-exec load, without the call). Hidden: no other object sees it. */
__attribute__((visibility("hidden"))) __thread void *scope_profiler_current_thread_buffer __attribute__((tls_model("initial-exec")));

__attribute__((visibility("hidden"))) void *scope_profiler_tls_get(void) { return scope_profiler_current_thread_buffer; }

__attribute__((visibility("hidden"))) void scope_profiler_tls_set(void *p) { scope_profiler_current_thread_buffer = p; }

/* The calling thread's sampler state (src/sampling), read by the sampling signal handler:
 * an initial-exec load is async-signal-safe, where __tls_get_addr may allocate. */
static __thread void *current_thread_sampler __attribute__((tls_model("initial-exec")));

__attribute__((visibility("hidden"))) void *scope_profiler_sampler_tls_get(void) { return current_thread_sampler; }

__attribute__((visibility("hidden"))) void scope_profiler_sampler_tls_set(void *p) { current_thread_sampler = p; }

/* Whether the calling thread is inside a cold part of the library (a lock held, memory being
 * allocated): a signal handler that interrupted it and calls the library is refused instead
 * of deadlocking or corrupting the allocator. Initial-exec too, so that reading it in a
 * signal handler never allocates (__tls_get_addr may, in a dlopen'ed library). */
static __thread int thread_busy __attribute__((tls_model("initial-exec")));

__attribute__((visibility("hidden"))) int scope_profiler_busy_get(void) { return thread_busy; }

__attribute__((visibility("hidden"))) void scope_profiler_busy_set(int v) { thread_busy = v; }
