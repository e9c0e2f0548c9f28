//! Linux `perf_event_open` counting per thread: one group per thread, opened at the thread's
//! first region start and left running; region start and stop read it (user-space `rdpmc`
//! from the mmap pages when the kernel allows it for every event, else one group `read()`).
//! Raw system calls through `libc`; no ioctl per region.

use super::events::EventSpec;
use crate::warn;
use std::os::fd::RawFd;

const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
const PERF_FORMAT_ID: u64 = 1 << 2;
const PERF_FORMAT_GROUP: u64 = 1 << 3;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;

/// `struct perf_event_attr` up to `config3` (PERF_ATTR_SIZE_VER8); older kernels accept the
/// larger size as long as the fields they do not know are zero.
#[repr(C)]
#[derive(Default)]
pub struct PerfEventAttr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved_2: u16,
    pub aux_sample_size: u32,
    pub reserved_3: u32,
    pub sig_data: u64,
    pub config3: u64,
}
const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 136);

/// The head of `struct perf_event_mmap_page` (the fields the rdpmc read needs).
#[repr(C)]
struct MmapPage {
    version: u32,
    compat_version: u32,
    lock: u32,
    index: u32,
    offset: i64,
    time_enabled: u64,
    time_running: u64,
    capabilities: u64,
    pmc_width: u16,
    time_shift: u16,
    time_mult: u32,
    time_offset: u64,
    time_zero: u64,
    size: u32,
    reserved_1: u32,
    time_cycles: u64,
    time_mask: u64,
}
const CAP_USER_RDPMC: u64 = 1 << 2;
const CAP_USER_TIME: u64 = 1 << 3;
const CAP_USER_TIME_SHORT: u64 = 1 << 5;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn paranoid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").map(|s| s.trim().to_string()).unwrap_or_else(|_| "?".into())
}

/// Why `perf_event_open` failed, in words.
pub fn describe_errno(e: i32, software: bool) -> String {
    let code = std::io::Error::from_raw_os_error(e);
    let why = match e {
        libc::ENOENT | libc::EOPNOTSUPP if !software => "this CPU or kernel does not provide the event here (no hardware PMU, e.g. in a VM, or an event unknown to this CPU)".to_string(),
        libc::ENOENT | libc::EOPNOTSUPP => "the kernel does not provide this event".to_string(),
        libc::EACCES | libc::EPERM => format!("permission denied (kernel.perf_event_paranoid = {})", paranoid()),
        libc::EINVAL => "the kernel rejected the encoding (invalid config or group)".to_string(),
        libc::ENOSPC => "too many events for the hardware counters".to_string(),
        libc::EMFILE => "too many open files".to_string(),
        libc::ENODEV => "no such PMU on this machine".to_string(),
        libc::ENOSYS => "perf_event_open is not available (kernel without perf events, or blocked by seccomp)".to_string(),
        _ => "perf_event_open failed".to_string(),
    };
    format!("{why} ({code})")
}

fn open_one(spec: &EventSpec, group_fd: RawFd, exclude_kernel: bool) -> Result<RawFd, i32> {
    let mut attr = PerfEventAttr {
        type_: spec.type_,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: spec.config,
        config1: spec.config1,
        config2: spec.config2,
        read_format: PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING | PERF_FORMAT_ID,
        flags: FLAG_EXCLUDE_HV | if exclude_kernel { FLAG_EXCLUDE_KERNEL } else { 0 },
        ..Default::default()
    };
    // SAFETY: a valid attr of the size it claims; pid 0 / cpu -1 = this thread on any CPU.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, &mut attr as *mut PerfEventAttr, 0, -1, group_fd, PERF_FLAG_FD_CLOEXEC) };
    if fd < 0 { Err(errno()) } else { Ok(fd as RawFd) }
}

/// Open `spec` into the group led by `group_fd` (-1: a new group). Hardware events count user
/// space only (`exclude_kernel`); software events try to include the kernel side, where
/// context switches and migrations happen, and fall back to user-only if that is not allowed.
fn open_event(spec: &EventSpec, group_fd: RawFd) -> Result<RawFd, i32> {
    if spec.is_software() {
        match open_one(spec, group_fd, false) {
            Err(libc::EACCES | libc::EPERM) => open_one(spec, group_fd, true),
            r => r,
        }
    } else {
        open_one(spec, group_fd, true)
    }
}

/// The process-wide perf configuration: the events that opened at setup.
#[derive(Debug, Clone, Default)]
pub struct PerfConfig {
    pub events: Vec<EventSpec>,
}

impl PerfConfig {
    /// Open `wanted` as a group on the calling thread to find which events this machine and
    /// kernel give us: one warning per event that cannot be opened (naming the event and the
    /// reason). `None` when nothing is left.
    pub fn probe(wanted: Vec<EventSpec>) -> Option<PerfConfig> {
        // Events that need the PMU lead the group; software events may join a hardware group.
        let (mut order, soft): (Vec<EventSpec>, Vec<EventSpec>) = wanted.into_iter().partition(|e| !e.is_software());
        order.extend(soft);
        let mut kept = Vec::new();
        let mut fds = Vec::new();
        for spec in order {
            let leader = fds.first().copied().unwrap_or(-1);
            match open_event(&spec, leader) {
                Ok(fd) => {
                    fds.push(fd);
                    kept.push(spec);
                }
                Err(e) => warn::once(
                    &format!("perf-open:{}", spec.name),
                    &format!("perf event {:?} not counted: {}; timings and the other events are kept", spec.name, describe_errno(e, spec.is_software())),
                ),
            }
        }
        for fd in fds {
            // SAFETY: our own descriptors.
            unsafe { libc::close(fd) };
        }
        (!kept.is_empty()).then_some(PerfConfig { events: kept })
    }
}

/// A thread's counting group and its per-region totals.
pub struct PerfThread {
    fds: Vec<RawFd>,
    n: usize,
    /// mmap pages per event, when every event can be read with rdpmc.
    pages: Vec<*const MmapPage>,
    /// Read buffer: nr, enabled, running, then (value, id) per event.
    buf: Vec<u64>,
    /// Open calls: region id and the reading at its start (stride n + 2).
    stack_ids: Vec<u32>,
    stack_vals: Vec<u64>,
    /// Per region id (stride n + 3): scaled counts, enabled ns, running ns, calls.
    pub totals: Vec<f64>,
    /// The group could not be opened or read on this thread.
    pub failed: bool,
    scratch: Vec<u64>,
}

// SAFETY: the mmap pages are only read, by the owning thread (and unmapped at drop).
unsafe impl Send for PerfThread {}

impl Drop for PerfThread {
    fn drop(&mut self) {
        let page = page_size();
        for &p in &self.pages {
            // SAFETY: mapped by us with this size.
            unsafe { libc::munmap(p as *mut libc::c_void, page) };
        }
        for &fd in &self.fds {
            // SAFETY: our own descriptors.
            unsafe { libc::close(fd) };
        }
    }
}

/// Add one call to a region's totals `t` (n scaled counts, enabled, running, calls) from the
/// readings at its start and stop (n values, enabled, running): like perf stat, each
/// difference is scaled by time enabled / time running (0 if the group never ran).
#[inline]
fn accumulate(t: &mut [f64], start: &[u64], now: &[u64]) {
    let n = start.len() - 2;
    let enabled = now[n].wrapping_sub(start[n]);
    let running = now[n + 1].wrapping_sub(start[n + 1]);
    let scale = if running > 0 { enabled as f64 / running as f64 } else { 0.0 };
    for i in 0..n {
        t[i] += now[i].wrapping_sub(start[i]) as f64 * scale;
    }
    t[n] += enabled as f64;
    t[n + 1] += running as f64;
    t[n + 2] += 1.0;
}

/// The low `width` bits of a counter read with rdpmc, sign-extended (as the kernel documents).
#[inline(always)]
fn sign_extend(pmc: u64, width: u32) -> u64 {
    if (1..64).contains(&width) { (((pmc << (64 - width)) as i64) >> (64 - width)) as u64 } else { pmc }
}

#[cold]
fn grow(totals: &mut Vec<f64>, len: usize) {
    totals.resize(len, 0.0);
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdpmc(counter: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: only called when the kernel set cap_user_rdpmc for this counter's page.
    unsafe { std::arch::asm!("rdpmc", in("ecx") counter, out("eax") lo, out("edx") hi, options(nostack, nomem)) };
    ((hi as u64) << 32) | lo as u64
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Read one event's count and its enabled/running times from its mmap page (the seqlock
/// protocol of perf_event_mmap_page in linux/perf_event.h, every field read volatile).
#[cfg(target_arch = "x86_64")]
#[inline]
fn read_page(pc: *const MmapPage) -> (u64, u64, u64) {
    use std::ptr::{addr_of, read_volatile};
    use std::sync::atomic::{Ordering, compiler_fence};
    loop {
        // SAFETY: a live read-only mapping of the event's page.
        unsafe {
            let seq = read_volatile(addr_of!((*pc).lock));
            compiler_fence(Ordering::SeqCst);
            let mut enabled = read_volatile(addr_of!((*pc).time_enabled));
            let mut running = read_volatile(addr_of!((*pc).time_running));
            let caps = read_volatile(addr_of!((*pc).capabilities));
            let idx = read_volatile(addr_of!((*pc).index));
            let mut count = read_volatile(addr_of!((*pc).offset)) as u64;
            if caps & CAP_USER_RDPMC != 0 && idx != 0 {
                let width = read_volatile(addr_of!((*pc).pmc_width)) as u32;
                count = count.wrapping_add(sign_extend(rdpmc(idx - 1), width));
            }
            if caps & CAP_USER_TIME != 0 {
                let shift = read_volatile(addr_of!((*pc).time_shift)) as u32;
                let mult = read_volatile(addr_of!((*pc).time_mult)) as u64;
                let offset = read_volatile(addr_of!((*pc).time_offset));
                let mut cyc = rdtsc();
                if caps & CAP_USER_TIME_SHORT != 0 {
                    let tc = read_volatile(addr_of!((*pc).time_cycles));
                    let tm = read_volatile(addr_of!((*pc).time_mask));
                    cyc = tc.wrapping_add(cyc.wrapping_sub(tc) & tm);
                }
                let quot = cyc >> shift;
                let rem = cyc & ((1u64 << shift) - 1);
                let delta = offset.wrapping_add(quot.wrapping_mul(mult)).wrapping_add(rem.wrapping_mul(mult) >> shift);
                enabled = enabled.wrapping_add(delta);
                if idx != 0 {
                    running = running.wrapping_add(delta);
                }
            }
            compiler_fence(Ordering::SeqCst);
            if read_volatile(addr_of!((*pc).lock)) == seq {
                return (count, enabled, running);
            }
        }
    }
}

impl PerfThread {
    /// Open the group on the calling thread. On failure, one warning and a thread that counts
    /// nothing (its regions keep their timings).
    pub fn open(config: &PerfConfig) -> PerfThread {
        let n = config.events.len();
        let mut t = PerfThread {
            fds: Vec::with_capacity(n),
            n,
            pages: Vec::new(),
            buf: vec![0; 3 + 2 * n],
            stack_ids: Vec::with_capacity(64),
            stack_vals: Vec::with_capacity(64 * (n + 2)),
            totals: Vec::new(),
            failed: false,
            scratch: vec![0; n + 2],
        };
        for spec in &config.events {
            let leader = t.fds.first().copied().unwrap_or(-1);
            match open_event(spec, leader) {
                Ok(fd) => t.fds.push(fd),
                Err(e) => {
                    warn::once(
                        &format!("perf-thread:{}", spec.name),
                        &format!(
                            "perf event {:?} could not be opened on a thread (tid {}): {}; that thread's regions have timings but no counters",
                            spec.name,
                            // SAFETY: gettid has no preconditions.
                            unsafe { libc::syscall(libc::SYS_gettid) },
                            describe_errno(e, spec.is_software())
                        ),
                    );
                    t.failed = true;
                    return t;
                }
            }
        }
        t.map_rdpmc_pages();
        t
    }

    /// rdpmc only when the kernel offers it for every event of the group (hardware events
    /// with /sys/bus/event_source/devices/cpu/rdpmc allowing it); software events have none.
    fn map_rdpmc_pages(&mut self) {
        if !cfg!(target_arch = "x86_64") || std::env::var_os("SCOPE_PROFILER_PERF_NO_RDPMC").is_some() {
            return;
        }
        let page = page_size();
        let mut pages = Vec::new();
        let mut ok = true;
        for &fd in &self.fds {
            // SAFETY: mapping the event's first (metadata) page read-only.
            let p = unsafe { libc::mmap(std::ptr::null_mut(), page, libc::PROT_READ, libc::MAP_SHARED, fd, 0) };
            if p == libc::MAP_FAILED {
                ok = false;
                break;
            }
            pages.push(p as *const MmapPage);
            // SAFETY: just mapped.
            let caps = unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*(p as *const MmapPage)).capabilities)) };
            if caps & CAP_USER_RDPMC == 0 || caps & CAP_USER_TIME == 0 {
                ok = false;
                break;
            }
        }
        if ok && !pages.is_empty() {
            self.pages = pages;
        } else {
            for p in pages {
                // SAFETY: mapped above.
                unsafe { libc::munmap(p as *mut libc::c_void, page) };
            }
        }
    }

    /// Read the group into `out` (n values, enabled, running). False if the read failed.
    #[inline]
    fn read_into(fds_leader: RawFd, pages: &[*const MmapPage], buf: &mut [u64], out: &mut [u64]) -> bool {
        let n = out.len() - 2;
        #[cfg(target_arch = "x86_64")]
        if !pages.is_empty() {
            let mut en = 0;
            let mut run = 0;
            for (i, &p) in pages.iter().enumerate() {
                let (c, e, r) = read_page(p);
                out[i] = c;
                if i == 0 {
                    en = e;
                    run = r;
                }
            }
            out[n] = en;
            out[n + 1] = run;
            return true;
        }
        let _ = pages;
        let bytes = buf.len() * 8;
        // SAFETY: reading into our own buffer of `bytes` bytes.
        let got = unsafe { libc::read(fds_leader, buf.as_mut_ptr().cast(), bytes) };
        if got != bytes as isize || buf[0] as usize != n {
            return false;
        }
        for i in 0..n {
            out[i] = buf[3 + 2 * i];
        }
        out[n] = buf[1];
        out[n + 1] = buf[2];
        true
    }

    /// A region starts: remember the reading.
    #[inline]
    pub fn start(&mut self, id: u32) {
        if self.failed {
            return;
        }
        let stride = self.n + 2;
        let at = self.stack_vals.len();
        self.stack_vals.resize(at + stride, 0);
        self.stack_ids.push(id);
        if !Self::read_into(self.fds[0], &self.pages, &mut self.buf, &mut self.stack_vals[at..]) {
            self.read_failed();
        }
    }

    /// A region stops: add the scaled difference to its totals. Calls opened inside it and
    /// still open (closed unrecorded by the timing side) are dropped first.
    #[inline]
    pub fn stop(&mut self, id: u32) {
        if self.failed {
            return;
        }
        let Some(pos) = self.stack_ids.iter().rposition(|&i| i == id) else {
            return;
        };
        let n = self.n;
        let stride = n + 2;
        let mut now = std::mem::take(&mut self.scratch);
        let ok = Self::read_into(self.fds[0], &self.pages, &mut self.buf, &mut now);
        if ok {
            let start = &self.stack_vals[pos * stride..(pos + 1) * stride];
            let tstride = n + 3;
            let base = id as usize * tstride;
            if self.totals.len() < base + tstride {
                grow(&mut self.totals, base + tstride);
            }
            accumulate(&mut self.totals[base..base + tstride], start, &now);
        }
        self.scratch = now;
        self.stack_ids.truncate(pos);
        self.stack_vals.truncate(pos * stride);
        if !ok {
            self.read_failed();
        }
    }

    #[cold]
    fn read_failed(&mut self) {
        warn::once("perf-read", "reading the perf event group failed on a thread; its counts stop there (timings are kept)");
        self.failed = true;
    }

    pub fn num_events(&self) -> usize {
        self.n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiplexed_counts_are_scaled_like_perf_stat() {
        // Two events; the group ran half of the time it was enabled during this call.
        let mut t = vec![0.0; 5];
        accumulate(&mut t, &[10, 20, 100, 50], &[30, 60, 300, 150]);
        assert_eq!(t, vec![40.0, 80.0, 200.0, 100.0, 1.0]);
        // A call during which the group never ran counts nothing, but its time is kept.
        accumulate(&mut t, &[30, 60, 300, 150], &[30, 60, 400, 150]);
        assert_eq!(t, vec![40.0, 80.0, 300.0, 100.0, 2.0]);
        // Software events: never multiplexed, the counts are the differences.
        let mut t = vec![0.0; 4];
        accumulate(&mut t, &[5, 7, 7], &[9, 19, 19]);
        assert_eq!(t, vec![4.0, 12.0, 12.0, 1.0]);
    }

    #[test]
    fn rdpmc_values_are_sign_extended_from_the_counter_width() {
        assert_eq!(sign_extend(0x0000_7fff_ffff_ffff, 48), 0x0000_7fff_ffff_ffff);
        assert_eq!(sign_extend(0x0000_ffff_ffff_fffe, 48), (-2i64) as u64);
        assert_eq!(sign_extend(5, 0), 5);
        // offset + sign-extended counter = count (a counter the kernel started at -50).
        assert_eq!(150u64.wrapping_add(sign_extend(0x0000_ffff_ffff_ffce, 48)), 100);
    }

    /// A stand-in for the kernel's mmap page (this VM has no PMU, so no event offers rdpmc):
    /// with index 0 the count is `offset`, and times are extended by the cap_user_time formula.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn mmap_page_read_without_an_active_counter() {
        let mut page: MmapPage = unsafe { std::mem::zeroed() };
        page.offset = 1234;
        page.time_enabled = 100;
        page.time_running = 50;
        assert_eq!(read_page(&page), (1234, 100, 50));
        page.capabilities = CAP_USER_TIME;
        page.time_offset = 7; // time_mult 0: delta = time_offset
        assert_eq!(read_page(&page), (1234, 107, 50), "running grows only while the counter is on the PMU");
    }

    /// A stop of a region opened further out (the timing side closes the inner calls
    /// unrecorded): the outer call is counted, the inner ones are dropped and leave the stack.
    /// With a real `task-clock` event (a software event: every machine has it).
    #[test]
    fn a_stop_further_out_drops_the_inner_calls() {
        let spec = crate::counters::events::parse_token("task-clock", &crate::counters::events::ThisMachine).unwrap();
        let config = PerfConfig::probe(vec![spec]).expect("task-clock opens");
        let mut t = PerfThread::open(&config);
        let stride = t.num_events() + 3;
        let calls = |t: &PerfThread, id: usize| t.totals.get(id * stride + stride - 1).copied().unwrap_or(0.0);
        t.start(1);
        t.start(2);
        t.start(3);
        t.stop(1);
        assert_eq!((calls(&t, 1), calls(&t, 2), calls(&t, 3)), (1.0, 0.0, 0.0));
        assert!(t.stack_ids.is_empty() && t.stack_vals.is_empty());
        // A stop of a region that is not open counts nothing; the stack works on as before.
        t.stop(2);
        t.start(2);
        t.stop(2);
        assert_eq!((calls(&t, 1), calls(&t, 2)), (1.0, 1.0));
    }

    #[test]
    fn errors_are_described() {
        assert!(describe_errno(libc::ENOENT, false).contains("no hardware PMU"));
        assert!(describe_errno(libc::EACCES, true).contains("perf_event_paranoid"));
    }
}
