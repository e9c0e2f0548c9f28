//! A thread's samples from a POSIX timer on the thread's own CPU-time clock, delivered to
//! that thread (`SIGEV_THREAD_ID`): the fallback where `perf_event_open` is refused
//! (`perf_event_paranoid` 3 on Debian and Ubuntu kernels, a seccomp filter, a kernel without
//! perf events). The interrupted address comes from the signal's context. A timer's signal
//! is never queued twice: expirations while it is pending are counted as overruns, which
//! the sample's weight takes in.

/// The sigval of our timers' signals: a tag that tells them from anybody else's.
pub const TIMER_TAG: u64 = 0x5350_534d_0000_0000; // "SPSM"
const TAG_MASK: u64 = 0xffff_ffff_0000_0000;

/// Whether a timer signal's value is one of ours.
pub fn is_our_value(value: u64) -> bool {
    value & TAG_MASK == TIMER_TAG
}

/// One thread's timer.
pub struct TimerSource {
    id: libc::timer_t,
    pub period_ns: u64,
}

// SAFETY: a timer id is a plain handle, used by the holder of the thread's lock word.
unsafe impl Send for TimerSource {}

/// The CPU-time clock of thread `tid` of this process (what `pthread_getcpuclockid` gives:
/// `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`).
fn thread_cpu_clock(tid: i32) -> libc::clockid_t {
    ((!tid) << 3) | 6
}

impl TimerSource {
    /// Create and start the timer of thread `tid`: every `period_ns` of its CPU time, `signo`
    /// to that thread.
    pub fn create(tid: i32, period_ns: u64, signo: libc::c_int) -> Result<TimerSource, (i32, &'static str)> {
        // SAFETY: a zeroed sigevent is valid; we set the fields SIGEV_THREAD_ID uses.
        let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = signo;
        sev.sigev_value = libc::sigval { sival_ptr: TIMER_TAG as usize as *mut libc::c_void };
        sev.sigev_notify_thread_id = tid;
        let mut id: libc::timer_t = std::ptr::null_mut();
        // SAFETY: valid pointers to a sigevent and a timer id.
        if unsafe { libc::timer_create(thread_cpu_clock(tid), &mut sev, &mut id) } != 0 {
            return Err((std::io::Error::last_os_error().raw_os_error().unwrap_or(0), "timer_create"));
        }
        let period = libc::timespec { tv_sec: (period_ns / 1_000_000_000) as libc::time_t, tv_nsec: (period_ns % 1_000_000_000) as libc::c_long };
        let spec = libc::itimerspec { it_interval: period, it_value: period };
        // SAFETY: our timer, a valid itimerspec.
        if unsafe { libc::timer_settime(id, 0, &spec, std::ptr::null_mut()) } != 0 {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            // SAFETY: our timer.
            unsafe { libc::timer_delete(id) };
            return Err((e, "timer_settime"));
        }
        Ok(TimerSource { id, period_ns })
    }

    pub fn delete(self) {
        // SAFETY: our timer, deleted once.
        unsafe { libc::timer_delete(self.id) };
    }
}
