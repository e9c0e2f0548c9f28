//! The helper threads of finalize (merging, writing, building call paths): whether they may be
//! started, how many a job gets, and how they are started and wait so that they run beside the
//! calling thread rather than behind it.
//!
//! A helper is worth its cost only on a CPU of its own. Two things keep it off one, most of all
//! in a virtual machine, where an idle CPU is halted and pulls work onto itself only at its
//! next balancing, milliseconds later (BENCHMARKS.md section 10):
//! - the kernel queues a new thread on its parent's CPU: a merge helper began 0.5-4.5 ms after
//!   it was started while the other CPU idled, so [`spawn_apart`] has the helper move itself
//!   off its parent's CPU as it starts (its allowed CPUs without that one for a moment, then
//!   all of them again: nothing stays pinned), and the parent yields once so that the helper
//!   does so at once rather than at the end of the parent's time slice;
//! - a thread woken from a sleep is pulled onto its waker's CPU: two workers taking turns at
//!   the merge, each sleeping while the other merged, ended up sharing one CPU for milliseconds
//!   at a time, so a worker waits for the other by spinning for a while ([`lock_busy`]).
//!
//! Helpers run only where the calling thread may use two CPUs or more ([`workers`]): a rank
//! bound to one core would only share it with its own helper.

use parking_lot::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Whether handing out slabs (and freeing a written profile) may start helper threads. Off for
/// good once the library is being unloaded or the process exits without `sp_finalize`: the
/// dynamic loader may hold its lock then (a write inside `dlclose`), and a thread started
/// while it does can never end (its exit waits for that lock), so the write is done on the
/// calling thread alone.
static HELPER_THREADS: AtomicBool = AtomicBool::new(true);

/// No helper threads from now on (see [`HELPER_THREADS`]).
pub fn forbid_helper_threads() {
    HELPER_THREADS.store(false, Ordering::SeqCst);
}

/// Whether helper threads may be started.
pub fn helper_threads_allowed() -> bool {
    HELPER_THREADS.load(Ordering::SeqCst)
}

/// CPUs the calling thread may run on: its affinity mask (what `taskset`, `mpirun --bind-to`
/// or Slurm's binding left it), else what the standard library finds, else 1.
pub fn cpus_to_share() -> usize {
    // SAFETY: a zeroed cpu_set_t is a valid (empty) set; sched_getaffinity fills it.
    let counted = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0).then(|| libc::CPU_COUNT(&set))
    };
    // A machine of more CPUs than a cpu_set_t holds fails the call: the standard library
    // asks with a larger set.
    match counted {
        Some(n) if n > 0 => n as usize,
        _ => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// Threads (the calling one among them) for a job that could use `wanted`: no more than the
/// calling thread has CPUs, and 1 when no helper may be started.
pub fn workers(wanted: usize) -> usize {
    if !helper_threads_allowed() {
        return 1;
    }
    wanted.min(cpus_to_share()).max(1)
}

/// The CPU the calling thread is on (None where unknown).
fn current_cpu() -> Option<usize> {
    // SAFETY: no arguments; returns a CPU number or -1.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}

/// Move the calling thread off `cpu` if it is on it and may run elsewhere: its allowed CPUs
/// without `cpu` for a moment (the kernel moves it as the mask is set), then all of them
/// again, so that the scheduler stays free to place it from then on.
fn move_off(cpu: Option<usize>) {
    let Some(cpu) = cpu.filter(|&c| c < libc::CPU_SETSIZE as usize) else { return };
    if current_cpu() != Some(cpu) {
        return;
    }
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: zeroed cpu_set_t values are valid sets, `cpu` is below CPU_SETSIZE, and the calls
    // read and set the calling thread's own mask only.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size, &mut allowed) != 0 || !libc::CPU_ISSET(cpu, &allowed) || libc::CPU_COUNT(&allowed) < 2 {
            return;
        }
        let mut elsewhere = allowed;
        libc::CPU_CLR(cpu, &mut elsewhere);
        if libc::sched_setaffinity(0, size, &elsewhere) == 0 {
            libc::sched_setaffinity(0, size, &allowed);
        }
    }
}

/// Start a helper thread named `name` in `scope` that runs `f` on another CPU than the calling
/// thread's, when it may (see the module's notes); None when no thread could be had.
pub fn spawn_apart<'scope, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    name: &str,
    f: impl FnOnce() -> T + Send + 'scope,
) -> Option<std::thread::ScopedJoinHandle<'scope, T>> {
    let parent = current_cpu();
    let helper = std::thread::Builder::new()
        .name(name.into())
        .spawn_scoped(scope, move || {
            move_off(parent);
            f()
        })
        .ok()?;
    // Let the helper run now if it was queued behind this thread (it then moves away at once);
    // a no-op when it already runs elsewhere.
    // SAFETY: no arguments.
    unsafe { libc::sched_yield() };
    Some(helper)
}

/// How long a worker spins for a lock the other workers hold before it sleeps: a worker holds
/// it for one slab's merge, a fraction of a millisecond.
const SPIN: Duration = Duration::from_millis(2);

/// Lock `m`, spinning while another worker holds it (up to [`SPIN`], then waiting asleep as
/// usual): a worker that sleeps is woken onto its waker's CPU.
pub fn lock_busy<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    lock_spinning_for(m, SPIN).0
}

/// `lock_busy` spinning up to `spin`; whether it went to sleep for the lock.
fn lock_spinning_for<T>(m: &Mutex<T>, spin: Duration) -> (MutexGuard<'_, T>, bool) {
    let mut since: Option<Instant> = None;
    loop {
        if let Some(g) = m.try_lock() {
            return (g, false);
        }
        // Read the lock until it looks free (no write to its cache line while it is held).
        for _ in 0..64 {
            if !m.is_locked() {
                break;
            }
            std::hint::spin_loop();
        }
        if since.get_or_insert_with(Instant::now).elapsed() > spin {
            return (m.lock(), true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn this_threads_cpus() -> Vec<usize> {
        // SAFETY: as in `cpus_to_share`.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
            (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
        }
    }

    /// A helper started apart runs on another CPU than its parent's where there is one, and
    /// keeps every CPU its parent may use (nothing stays pinned).
    #[test]
    fn a_helper_starts_on_another_cpu_and_stays_unpinned() {
        let cpus = this_threads_cpus();
        assert_eq!(cpus_to_share(), cpus.len());
        for _ in 0..50 {
            // Busy first, as a finalize is when it starts its helpers.
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(3) {
                std::hint::spin_loop();
            }
            let parent = current_cpu();
            let (theirs, mask) = std::thread::scope(|s| spawn_apart(s, "sp-test", || (current_cpu(), this_threads_cpus())).expect("a thread").join().unwrap());
            assert_eq!(mask, cpus, "the helper's mask is its parent's");
            if cpus.len() >= 2 && parent == current_cpu() {
                // The parent stayed where it was while the helper started: the helper began
                // elsewhere.
                assert_ne!(theirs, parent, "helper on its parent's CPU {parent:?}");
            }
        }
    }

    /// The number of workers follows the CPUs the calling thread may use.
    #[test]
    fn workers_are_bounded_by_the_threads_cpus() {
        let n = cpus_to_share();
        assert!(n >= 1);
        assert_eq!(workers(1), 1);
        assert_eq!(workers(64), if helper_threads_allowed() { 64.min(n) } else { 1 });
        // Bound to one CPU: no helper.
        std::thread::scope(|s| {
            s.spawn(|| {
                let first = this_threads_cpus()[0];
                // SAFETY: a zeroed set, one CPU added; sets this test thread's own mask.
                unsafe {
                    let mut one: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(first, &mut one);
                    assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one), 0);
                }
                assert_eq!(cpus_to_share(), 1);
                assert_eq!(workers(2), 1);
                // A helper of a thread bound to one CPU stays on it (there is nowhere else).
                let (theirs, mask) = std::thread::scope(|s| spawn_apart(s, "sp-test", || (current_cpu(), this_threads_cpus())).unwrap().join().unwrap());
                assert_eq!((theirs, mask), (Some(first), vec![first]));
            });
        });
    }

    /// `lock_busy` takes a free lock at once, and a held one once it is let go, spinning for a
    /// while and then asleep.
    #[test]
    fn a_busy_lock_is_taken_when_it_is_let_go() {
        let m = Mutex::new(0);
        let (mut g, slept) = lock_spinning_for(&m, SPIN);
        assert!(!slept);
        *g += 1;
        drop(g);
        let started = AtomicBool::new(false);
        std::thread::scope(|s| {
            let held = m.lock();
            let waiter = s.spawn(|| {
                started.store(true, Ordering::SeqCst);
                let (mut g, slept) = lock_spinning_for(&m, SPIN);
                *g += 1;
                (Instant::now(), slept)
            });
            while !started.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            std::thread::sleep(SPIN * 4);
            let released = Instant::now();
            drop(held);
            let (taken, slept) = waiter.join().unwrap();
            assert!(taken >= released, "took the lock while it was held");
            // Held for longer than it spins: it stopped spinning and slept.
            assert!(slept, "spun all the {:?} the lock was held", SPIN * 4);
        });
        assert_eq!(*m.lock(), 2);
    }
}
