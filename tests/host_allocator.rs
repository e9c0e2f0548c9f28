//! Profiling leaves the host's allocator alone: a malloc-heavy host (tests/c/host_allocator.c,
//! an array allocated, written and freed every step, growing from 600 KiB) gets its arrays from
//! glibc the same way with and without the library, before setup, while recording, and after
//! sp_finalize: counted by the host itself (glibc's count of mapped blocks) and by `strace`
//! (its mmap and munmap calls of exactly its arrays' sizes), in every layout. The library
//! keeps its large buffers in mappings of its own; freeing a malloc'd one of 1 MiB (a full
//! call-log chunk, HDF5's 1 MiB conversion buffer) raised glibc's threshold, and the host's
//! arrays after finalize then came from the heap.

mod support;
use support::*;

use std::path::Path;
use std::process::Command;

/// The page size, for the lengths glibc maps (the host's arrays are page multiples: a mapping
/// is the array plus one page for glibc's header, rounded up).
fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// The mapping lengths of the host's 120 arrays (see host_allocator.c).
fn array_mappings() -> Vec<usize> {
    (0..120usize).map(|i| (600 * 1024 + i * 8192 + 16 + 8).div_ceil(page()) * page()).collect()
}

/// Run the host under strace: its PHASE lines, and how many mmap / munmap calls had the
/// length of one of its arrays.
fn run_host(exe: &Path, dir: &Path, mode: &str, layout: &str) -> (Vec<String>, usize, usize) {
    let trace = dir.join(format!("{mode}-{layout}.strace"));
    let file = dir.join(format!("{mode}-{layout}.h5"));
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-e", "trace=mmap,munmap", "-o"])
        .arg(&trace)
        .arg(exe)
        .arg(&file)
        .arg(mode)
        .current_dir(dir)
        .env("SCOPE_PROFILER_LAYOUT", layout)
        .env_remove("SCOPE_PROFILER_SPILL")
        .env_remove("SCOPE_PROFILER_DISABLE");
    let out = run(&mut cmd);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{cmd:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    let phases: Vec<String> = stdout.lines().filter(|l| l.starts_with("PHASE ")).map(String::from).collect();
    assert_eq!(phases.len(), 3, "{stdout}");
    assert_eq!(file.exists(), mode == "profile", "{}", file.display());
    let lengths = array_mappings();
    let (mut mmaps, mut munmaps) = (0, 0);
    for line in std::fs::read_to_string(&trace).unwrap().lines() {
        // "<pid> mmap(NULL, 618496, PROT_READ|PROT_WRITE, ...) = 0x..." / "<pid> munmap(0x..., 618496) = 0"
        // (or "... 618496 <unfinished ...>" while another thread's call is traced).
        let arg = |call: &str, n: usize| {
            let field = line.split_once(call)?.1.split([',', ')']).nth(n)?.trim_start();
            field[..field.find(|c: char| !c.is_ascii_digit()).unwrap_or(field.len())].parse::<usize>().ok()
        };
        if let Some(len) = arg("mmap(", 1) {
            mmaps += lengths.contains(&len) as usize;
        } else if let Some(len) = arg("munmap(", 1) {
            munmaps += lengths.contains(&len) as usize;
        }
    }
    (phases, mmaps, munmaps)
}

#[test]
fn the_hosts_arrays_are_mapped_alike_with_and_without_profiling() {
    let dir = scratch("host_allocator");
    let exe = compile(Lang::C, "host_allocator", &["tests/c/host_allocator.c"], &dir, &[]);
    let (plain, plain_mmaps, plain_munmaps) = run_host(&exe, &dir, "plain", "regions");
    // Without the library glibc maps every array (each is larger than the last one freed).
    assert_eq!(plain, ["PHASE before 40/40", "PHASE recording 40/40", "PHASE after 40/40"], "the host alone");
    assert!(plain_mmaps >= 120 && plain_munmaps >= 120, "strace saw {plain_mmaps} mmap and {plain_munmaps} munmap of the arrays");
    for layout in ["regions", "columnar", "aggregate"] {
        let (phases, mmaps, munmaps) = run_host(&exe, &dir, "profile", layout);
        assert_eq!(phases, plain, "{layout}: the host's arrays are mapped differently with the library");
        assert_eq!((mmaps, munmaps), (plain_mmaps, plain_munmaps), "{layout}: mmap/munmap of the host's arrays (strace)");
    }
    // Its files are large: gone once checked.
    let _ = std::fs::remove_dir_all(&dir);
}
