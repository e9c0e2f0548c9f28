//! A host that `dlclose`s the library without `sp_finalize` while every core is busy: the
//! library's own threads (the signal watcher and writer, woken to end at unload) must have
//! ended before `dlclose` unmaps its code, however late they are scheduled. Before they were
//! joined, the host crashed after "unloaded" in about 1 run of 3 on a loaded machine. A test
//! binary of its own: the load it makes slows no other test.

mod support;
use support::*;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[test]
fn dlclose_on_a_busy_machine_leaves_no_thread_in_the_unloaded_library() {
    let dir = scratch("unload_under_load");
    let exe = compile_host("dlclose_host", "tests/c/dlclose_host.c", &dir);
    let out = dir.join("out.h5");
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let busy = Arc::new(AtomicBool::new(true));
    let hogs: Vec<_> = (0..cpus + 1)
        .map(|_| {
            let busy = busy.clone();
            std::thread::spawn(move || {
                while busy.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let mut failed = None;
    for round in 0..10 {
        let _ = std::fs::remove_file(&out);
        let mut cmd = Command::new(&exe);
        cmd.env_remove("SCOPE_PROFILER_FILE").env_remove("SCOPE_PROFILER_DISABLE").arg(link_dir().join("libscope_profiler.so")).arg(&out).args(["-", "100000", "0"]).current_dir(&dir);
        let r = programs::run_with_timeout(&mut cmd, Duration::from_secs(120));
        let stdout = text(&r.stdout);
        let counted = stdout.lines().any(|l| l.split_whitespace().take(2).eq(["thread_work", "200000"]));
        if r.status.code() != Some(0) || !stdout.contains("unloaded") || !counted || hdf5::File::open(&out).is_err() {
            failed = Some(format!("round {round}: {:?}\n{stdout}\n{}", r.status, text(&r.stderr)));
            break;
        }
    }
    busy.store(false, Ordering::Relaxed);
    hogs.into_iter().for_each(|h| h.join().unwrap());
    if let Some(f) = failed {
        panic!("{f}");
    }
}
