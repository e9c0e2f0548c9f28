//! A thread's samples from a software `task-clock` perf event: the kernel counts the thread's
//! CPU time, and every `period` nanoseconds of it writes a sample (the interrupted address)
//! to the event's ring buffer and signals the thread (`F_SETSIG` with `F_SETOWN_EX` to the
//! thread). The handler reads the ring buffer and counts each sample under the thread's
//! innermost region.
//!
//! The event runs on a budget of overflows (`PERF_EVENT_IOC_REFRESH`): the handler gives
//! back as many as it read, so the event never stops while the thread takes its signals
//! (giving back to a running event is one atomic add in the kernel), and stops itself after
//! `BUDGET` overflows nobody read: a thread that blocks the signal for a long time has at
//! most that many signals queued, never filling the kernel's signal queue (whose overflow
//! would send SIGIO, which ends the process). Refreshing by one after every sample instead
//! stops and restarts the event each time (two timer reprogrammings and a reschedule of the
//! thread's perf context), about 100 us per sample in a virtual machine.
//! Software events need no PMU: they work in virtual machines.

use crate::counters::perf::PerfEventAttr;
use std::os::fd::RawFd;

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_SAMPLE_IP: u64 = 1 << 0;
const PERF_SAMPLE_TID: u64 = 1 << 1;
const FLAG_DISABLED: u64 = 1 << 0;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_EVENT_IOC_REFRESH: libc::c_ulong = 0x2402;
const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_SAMPLE: u32 = 9;
/// `struct perf_event_mmap_page`: `data_head` and `data_tail` (the control page's layout is
/// ABI: version 0 fields end at 1024 bytes with padding).
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;
/// Overflows the event may take before the handler has read them.
const BUDGET: u64 = 4;

#[repr(C)]
struct FOwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}

/// One thread's perf event and its ring buffer (one control page and one data page).
pub struct PerfSource {
    pub fd: RawFd,
    ring: *mut u8,
    page: usize,
    pub period_ns: u64,
}

// SAFETY: the mapping is used only by the holder of the thread's lock word.
unsafe impl Send for PerfSource {}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Close without being a cancellation point (a raw system call), so a cancelled host thread
/// can never leave the sampler's lock held.
pub fn close_fd(fd: RawFd) {
    // SAFETY: our own descriptor.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

impl PerfSource {
    /// Open the event for thread `tid` of this process, route its signal `signo` to that
    /// thread and let it count. The error is the errno of the step that failed, and what it was.
    pub fn open(tid: i32, period_ns: u64, signo: libc::c_int) -> Result<PerfSource, (i32, &'static str)> {
        let mut attr = PerfEventAttr {
            type_: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_SW_TASK_CLOCK,
            sample_period: period_ns.max(1),
            sample_type: PERF_SAMPLE_IP | PERF_SAMPLE_TID,
            flags: FLAG_DISABLED | FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV,
            wakeup_events: 1,
            ..Default::default()
        };
        // SAFETY: a valid attr of the size it claims; pid = the thread, cpu -1 = any CPU.
        let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, &mut attr as *mut PerfEventAttr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC) };
        if fd < 0 {
            return Err((errno(), "perf_event_open"));
        }
        let fd = fd as RawFd;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // SAFETY: mapping our event's ring buffer (1 + 2^0 pages), shared with the kernel.
        let ring = unsafe { libc::mmap(std::ptr::null_mut(), 2 * page, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
        if ring == libc::MAP_FAILED {
            let e = errno();
            close_fd(fd);
            return Err((e, "mmap of the ring buffer"));
        }
        let source = PerfSource { fd, ring: ring.cast(), page, period_ns };
        let owner = FOwnerEx { kind: F_OWNER_TID, pid: tid };
        // SAFETY: fcntl on our descriptor with the argument types the commands take.
        let steps: [(&'static str, libc::c_int); 3] = unsafe {
            [
                ("F_SETOWN_EX", libc::fcntl(fd, F_SETOWN_EX, &owner as *const FOwnerEx)),
                ("F_SETSIG", libc::fcntl(fd, F_SETSIG, signo)),
                ("F_SETFL O_ASYNC", libc::fcntl(fd, libc::F_SETFL, libc::O_ASYNC | libc::O_NONBLOCK)),
            ]
        };
        if let Some((what, _)) = steps.iter().find(|(_, rc)| *rc < 0) {
            let e = errno();
            source.close();
            return Err((e, what));
        }
        // SAFETY: ioctl on our event.
        if unsafe { libc::ioctl(fd, PERF_EVENT_IOC_REFRESH, BUDGET as libc::c_int) } < 0 {
            let e = errno();
            source.close();
            return Err((e, "PERF_EVENT_IOC_REFRESH"));
        }
        Ok(source)
    }

    /// Give back `n` overflows of the budget (those just read). Async-signal-safe.
    pub fn give_back(&self, n: u64) {
        if n > 0 {
            // SAFETY: ioctl on our event.
            unsafe { libc::ioctl(self.fd, PERF_EVENT_IOC_REFRESH, n.min(BUDGET) as libc::c_int) };
        }
    }

    /// Read every record of the ring buffer: `on_sample` gets each sample's address. Returns
    /// the samples read and the samples the kernel reports lost. Async-signal-safe.
    ///
    /// # Safety
    /// The ring must be mapped (the source not closed), and read by one holder at a time.
    pub unsafe fn drain(&mut self, mut on_sample: impl FnMut(u64)) -> (u64, u64) {
        let base = self.ring;
        let data = unsafe { base.add(self.page) };
        let size = self.page as u64;
        // SAFETY: the control page's head and tail words, 8-byte aligned.
        let head_ptr = unsafe { base.add(DATA_HEAD) } as *const u64;
        let tail_ptr = unsafe { base.add(DATA_TAIL) } as *mut u64;
        let head = unsafe { std::ptr::read_volatile(head_ptr) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        let mut tail = unsafe { std::ptr::read_volatile(tail_ptr) };
        let (mut samples, mut lost) = (0u64, 0u64);
        // Bounded: a head that runs away (never with a sane kernel) is skipped to.
        let mut guard = 0;
        while tail < head && guard < 4096 {
            guard += 1;
            let mut rec = [0u8; 64];
            // The record may wrap around the end of the data page: copy it out byte by byte.
            let read = |at: u64, out: &mut [u8]| {
                for (k, b) in out.iter_mut().enumerate() {
                    // SAFETY: the offset is reduced modulo the data page's size.
                    *b = unsafe { std::ptr::read_volatile(data.add(((at + k as u64) % size) as usize)) };
                }
            };
            read(tail, &mut rec[..8]);
            let kind = u32::from_ne_bytes([rec[0], rec[1], rec[2], rec[3]]);
            let len = u16::from_ne_bytes([rec[6], rec[7]]) as u64;
            if len < 8 || len > size {
                tail = head;
                break;
            }
            let body = (len as usize).min(rec.len());
            read(tail, &mut rec[..body]);
            let word = |i: usize| u64::from_ne_bytes(rec[i..i + 8].try_into().unwrap_or([0; 8]));
            match kind {
                PERF_RECORD_SAMPLE if body >= 16 => {
                    samples += 1;
                    on_sample(word(8));
                }
                PERF_RECORD_LOST if body >= 24 => lost += word(16),
                _ => {}
            }
            tail += len;
        }
        if tail < head {
            tail = head;
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(tail_ptr, tail) };
        (samples, lost)
    }

    /// Records left in the ring buffer (samples that can no longer be attributed).
    pub fn pending(&mut self) -> u64 {
        // SAFETY: the ring is mapped until `close`.
        unsafe { self.drain(|_| {}) }.0
    }

    /// Stop the event, unmap the ring, close the descriptor.
    pub fn close(self) {
        // SAFETY: our event and mapping.
        unsafe {
            libc::ioctl(self.fd, PERF_EVENT_IOC_DISABLE, 0);
            libc::munmap(self.ring.cast(), 2 * self.page);
        }
        close_fd(self.fd);
    }
}
