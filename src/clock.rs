//! The one clock every timestamp comes from: `CLOCK_MONOTONIC` in nanoseconds, the clock
//! CPython's `time.perf_counter_ns()` reads on Linux, so C, Fortran and Python regions of one
//! process tree share a timeline.

#[inline(always)]
pub fn now_ns() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer; CLOCK_MONOTONIC always exists on Linux (vDSO, no syscall).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic_and_in_nanoseconds() {
        let a = super::now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = super::now_ns();
        assert!(b - a >= 2_000_000, "{a} {b}");
        assert!(b - a < 2_000_000_000);
    }
}
