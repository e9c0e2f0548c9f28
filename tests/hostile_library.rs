//! Hostile input against the library's own readers and lifecycles: damaged and crafted rank
//! files through `scope_profiler_merge` and `sp_merge_rank_files` (a crash of the HDF5
//! library, sizes declared far beyond the file, links out of the file to a FIFO, indexes out of
//! their tables, absurd thread ids, invalid UTF-8), damaged and planted spill directories
//! through `sptool recover`, non-finite FLOP counts, a host that unloads the library before
//! `sp_finalize`, and the writer's handling of bad data, over-long names and bad settings.
//!
//! Every tool runs under a memory limit (`RLIMIT_AS`) and a timeout: nothing may die by a
//! signal, panic, print a backtrace, hang or allocate past the limit.
//!
//! `HOSTILE_LIB_DIR=<target/debug of another build>` runs the same tests against that build's
//! tools and library (how these tests were shown to fail before the fixes).

mod support;

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use support::{python, repo_root, scratch, text};

/// Address space of every tool run here.
const MEMORY_LIMIT: u64 = 2 << 30;
const TIMEOUT: Duration = Duration::from_secs(60);

/// Where the tools and the library under test are.
fn build_dir() -> PathBuf {
    std::env::var_os("HOSTILE_LIB_DIR").map(PathBuf::from).unwrap_or_else(support::lib_dir)
}

fn merge_tool() -> PathBuf {
    build_dir().join("scope_profiler_merge")
}

fn sptool() -> PathBuf {
    build_dir().join("sptool")
}

fn library() -> PathBuf {
    if std::env::var_os("HOSTILE_LIB_DIR").is_some() { build_dir().join("libscope_profiler.so") } else { support::link_dir().join("libscope_profiler.so") }
}

/// Compile a test program of tests/c against the library under test.
fn compile(source: &str, dir: &Path, extra: &[&str]) -> PathBuf {
    let name = Path::new(source).file_stem().unwrap().to_str().unwrap();
    let out = dir.join(name);
    let lib = library();
    let libdir = lib.parent().unwrap();
    let o = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c99", "-D_GNU_SOURCE", "-O2", "-g", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{}", repo_root().join("include").display()))
        .arg(repo_root().join(source))
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", libdir.display()))
        .arg("-Wl,--disable-new-dtags")
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .args(["-lscope_profiler", "-lpthread", "-lm", "-ldl"])
        .args(extra)
        .output()
        .expect("run the C compiler");
    assert!(o.status.success(), "compiling {source} failed:\n{}", text(&o.stderr));
    out
}

/// What a limited run did.
struct Ran {
    shown: String,
    out: Output,
    elapsed: Duration,
}

impl Ran {
    fn stderr(&self) -> String {
        text(&self.out.stderr)
    }

    fn stdout(&self) -> String {
        text(&self.out.stdout)
    }

    fn code(&self) -> Option<i32> {
        self.out.status.code()
    }

    fn describe(&self) -> String {
        format!(
            "{}\n  -> {:?} (signal {:?}) after {:.2} s\n  stdout:\n{}\n  stderr:\n{}",
            self.shown,
            self.out.status.code(),
            self.out.status.signal(),
            self.elapsed.as_secs_f64(),
            self.stdout(),
            self.stderr()
        )
    }

    /// Ended by itself with a status, no panic, backtrace or abort text on its stderr.
    fn sane(&self) -> &Self {
        assert!(self.out.status.signal().is_none(), "died by a signal: {}", self.describe());
        for word in ["panicked", "stack backtrace", "RUST_BACKTRACE", "memory allocation of", "fatal runtime error", "HDF5-DIAG", "internal error"] {
            assert!(!self.stderr().contains(word), "'{word}' on stderr: {}", self.describe());
        }
        self
    }

    /// A clean failure: status 1, one line of stderr with every needle.
    fn refused(&self, needles: &[&str]) {
        self.sane();
        assert_eq!(self.code(), Some(1), "expected a clean failure: {}", self.describe());
        let lines: Vec<String> = self.stderr().lines().map(str::to_string).collect();
        assert_eq!(lines.len(), 1, "one line: {}", self.describe());
        for n in needles {
            assert!(lines[0].contains(n), "{n:?} not said: {}", self.describe());
        }
    }
}

/// Run `cmd` with `RLIMIT_AS` = `memory`, `RUST_BACKTRACE=1` (a backtrace would show), failing
/// the test after [`TIMEOUT`].
fn run_limited(cmd: &mut Command, memory: u64) -> Ran {
    cmd.env("RUST_BACKTRACE", "1");
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let m = libc::rlimit { rlim_cur: memory as libc::rlim_t, rlim_max: memory as libc::rlim_t };
            libc::setrlimit(libc::RLIMIT_AS, &m);
            let core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::setrlimit(libc::RLIMIT_CORE, &core);
            Ok(())
        });
    }
    let shown = format!("{cmd:?}");
    let t = Instant::now();
    let out = support::programs::run_with_timeout(cmd, TIMEOUT);
    Ran { shown, out, elapsed: t.elapsed() }
}

fn run(cmd: &mut Command) -> Ran {
    run_limited(cmd, MEMORY_LIMIT)
}

/// A program's environment without the caller's profiler settings.
fn clean(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SCOPE_PROFILER_") && k != "SCOPE_PROFILER_PYTHON" {
            cmd.env_remove(k);
        }
    }
    cmd
}

fn merge(dir: &Path, inputs: &[&str]) -> Ran {
    run(clean(Command::new(merge_tool()).current_dir(dir).arg("-o").arg("merged.h5").args(inputs)))
}

/// Per-rank files of `layout` as ranks without MPI leave them (`out.rank<N>.h5` in `dir`),
/// from the threads program (several threads, nesting, recursion).
fn rank_files(dir: &Path, layout: &str, ranks: u32) -> Vec<PathBuf> {
    let exe = compile("tests/c/layouts.c", dir, &[]);
    (0..ranks)
        .map(|rank| {
            let r = run(clean(&mut Command::new(&exe))
                .arg("out.h5")
                .current_dir(dir)
                .env("SCOPE_PROFILER_LAYOUT", layout)
                .env("OMPI_COMM_WORLD_RANK", rank.to_string())
                .env("OMPI_COMM_WORLD_SIZE", ranks.max(2).to_string()));
            assert_eq!(r.code(), Some(0), "{}", r.describe());
            let f = dir.join(format!("out.rank{rank}.h5"));
            assert!(f.is_file(), "{}", r.describe());
            f
        })
        .collect()
}

/// Copy `from` to `dir/name` and change it with h5py: `code` runs with `f` open for writing.
fn craft(dir: &Path, from: &Path, name: &str, code: &str) -> PathBuf {
    let out = dir.join(name);
    std::fs::copy(from, &out).unwrap();
    let body: String = code.lines().map(|l| format!("    {l}\n")).collect();
    let script = format!("import sys, os, h5py, numpy as np\nwith h5py.File(sys.argv[1], 'r+') as f:\n{body}");
    let o = Command::new(python()).arg("-c").arg(&script).arg(&out).current_dir(dir).output().expect("run python");
    assert!(o.status.success(), "crafting {name} failed:\n{script}\n{}", text(&o.stderr));
    out
}

/// Replace every occurrence of `from` by `to` (same length) in the file; returns how many.
fn patch(path: &Path, from: &[u8], to: &[u8]) -> usize {
    assert_eq!(from.len(), to.len());
    let mut b = std::fs::read(path).unwrap();
    let mut n = 0;
    let mut i = 0;
    while i + from.len() <= b.len() {
        if &b[i..i + from.len()] == from {
            b[i..i + from.len()].copy_from_slice(to);
            n += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    std::fs::write(path, b).unwrap();
    n
}

/// Unfinished outputs (hidden `.tmp`/`.tmpdir` names) left in `dir`.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && (n.ends_with(".tmp") || n.ends_with(".tmpdir")))
        .collect()
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: creating a FIFO at a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

// -------------------------------------------------------------------------------------------
// Merging damaged and crafted rank files.

/// A dataset declared with 2^40 elements (chunked, nothing stored), millions of tiny names,
/// indexes beyond their tables, thread ids of 2^32-1, rows that claim more events than exist,
/// an empty region name, rank-table lists cut by descending offsets, and invalid UTF-8 in names: each refused in one line (or merged,
/// with the bytes shown replaced), never an abort, a panic or an allocation sized by the file.
#[test]
fn crafted_rank_files_are_refused_or_merged_never_crash_the_merge() {
    let dir = scratch("hostile_lib_crafted");
    let files = rank_files(&dir, "columnar", 1);
    let good = &files[0];
    let cases: &[(&str, &str, Option<&[&str]>)] = &[
        (
            "sparse.h5",
            "e = f['events']\ndel e['durations']\ne.create_dataset('durations', shape=(1 << 40,), dtype='i8', chunks=(1 << 16,))",
            Some(&["sparse.h5", "events/durations", "declares 1099511627776 elements"]),
        ),
        ("region_id.h5", "i = f['rank_region_index/region_ids']\nv = i[()]\nv[0] = 1000000\ni[...] = v", Some(&["region_id.h5", "names region 1000000"])),
        ("thread_id.h5", "t = f['events/thread_ids']\nv = t[()].astype('u4')\nv[0] = 0xFFFFFFFF\ndel f['events/thread_ids']\nf['events'].create_dataset('thread_ids', data=v)", Some(&["thread id 4294967295"])),
        ("stats_thread.h5", "t = f['scope_profiler_threads/threads']\nv = t[()]\nv[0] = 1 << 40\nt[...] = v", Some(&["thread id 1099511627776"])),
        ("offsets.h5", "o = f['rank_region_index/event_offsets']\nv = o[()]\nv[0] = 1 << 62\no[...] = v", Some(&["claims events 4611686018427387904"])),
        ("overlap.h5", "i = f['rank_region_index']\nn = f['events/durations'].shape[0]\nrows = i['event_counts'].shape[0]\ni['event_offsets'][...] = np.zeros(rows, dtype='i8')\ni['event_counts'][...] = np.full(rows, n, dtype='i8')", Some(&["but the event columns hold"])),
        ("rank_lists.h5", "o = f['scope_profiler_ranks/cpus_offsets']\nv = o[()]\nv[0] = 1 << 63\no[...] = v", Some(&["rank_lists.h5", "cpus_offsets does not cut"])),
        ("durations.h5", "d = f['events/durations']\nv = d[()]\nv[:] = 1 << 62\nd[...] = v", Some(&["out of range"])),
        ("empty_name.h5", "n = f['region_table/names']\nv = n[()]\nv[0] = b''\nn[...] = v", Some(&["empty name"])),
        ("rows.h5", "r = f['scope_profiler_threads/rows']\nv = r[()]\nv[0] = 1 << 50\nr[...] = v", Some(&["belongs to row"])),
        ("path_parent.h5", "p = f['call_paths/parents']\nv = p[()]\nv[0] = 5\np[...] = v", Some(&["path_parent.h5", "row 0 of call_paths", "parent 5"])),
        ("path_region.h5", "p = f['call_paths/regions']\nv = p[()]\nv[-1] = 1000000\np[...] = v", Some(&["call_paths", "region 1000000"])),
        ("path_rank.h5", "p = f['call_paths/ranks']\nv = p[()]\nv[-1] = 7\np[...] = v", Some(&["call_paths", "rank 7 is not in"])),
        ("path_len.h5", "g = f['call_paths']\nv = g['calls'][()]\ndel g['calls']\ng.create_dataset('calls', data=v[1:])", Some(&["call_paths: calls has"])),
        ("path_time.h5", "p = f['call_paths/exclusive_ns']\nv = p[()]\nv[-1] = -1\np[...] = v", Some(&["call_paths", "negative"])),
        ("names.h5", "t = f['region_table']\nn = list(t['names'][()])\ndel t['names']\nt.create_dataset('names', data=np.array(n + [b'a'] * 2_000_000, dtype='S16'), compression='gzip', chunks=(1 << 16,))", None),
    ];
    for (name, code, refused) in cases {
        craft(&dir, good, name, code);
        let r = merge(&dir, &[name]);
        match refused {
            Some(needles) => r.refused(needles),
            None => {
                r.sane();
                assert_eq!(r.code(), Some(0), "{}", r.describe());
            }
        }
        assert!(leftovers(&dir).is_empty(), "{name}: left {:?}", leftovers(&dir));
        let _ = std::fs::remove_file(dir.join("merged.h5"));
    }
    // Invalid UTF-8 in a region name and a metadata value: merged, the bytes kept as they are.
    let utf8 = craft(&dir, good, "utf8.h5", "n = f['region_table/names']\nv = n[()]\nv[0] = b'SSSSSSSSSSSS'\nn[...] = v\nf['metadata'].attrs['hostname'] = 'PPPPPPPPPPPP'");
    assert!(patch(&utf8, b"SSSSSSSSSSSS", b"a\xe2\x82b\x80c\xff\xfed\xf0\x9f\x98") >= 1);
    assert!(patch(&utf8, b"PPPPPPPPPPPP", b"a\xe2\x82b\x80c\xff\xfed\xf0\x9f\x98") >= 1);
    let r = merge(&dir, &["utf8.h5"]);
    r.sane();
    assert_eq!(r.code(), Some(0), "{}", r.describe());
    let o = run(Command::new(sptool()).current_dir(&dir).args(["inspect", "merged.h5"]));
    assert_eq!(o.code(), Some(0), "{}", o.describe());
    assert!(o.stdout().contains('\u{FFFD}'), "{}", o.describe());
}

/// Merged schema-3 rank files keep every rank's call paths: the merged file's `call_paths`
/// table holds each input's rows (its rank's), the region names mapped through the merged
/// names, the wall times in the rank table; `sptool tree` reads it.
#[test]
fn merged_rank_files_keep_their_call_paths() {
    let dir = scratch("hostile_lib_merge_paths");
    for layout in ["columnar", "aggregate"] {
        let files = rank_files(&dir, layout, 2);
        let r = merge(&dir, &["out.rank0.h5", "out.rank1.h5"]);
        assert_eq!(r.code(), Some(0), "{}", r.describe());
        // (rank, parent, region name, thread, calls, inclusive, exclusive) of every row; walls.
        type Row = (i64, i64, String, i64, i64, i64, i64);
        let rows = |path: &Path| -> (Vec<Row>, Vec<(i64, i64)>) {
            let f = hdf5::File::open(path).unwrap();
            let names: Vec<String> = f.dataset("region_table/names").unwrap().read_raw::<hdf5::types::VarLenUnicode>().unwrap().iter().map(|s| s.to_string()).collect();
            let col = |n: &str| f.dataset(&format!("call_paths/{n}")).unwrap_or_else(|e| panic!("{}: call_paths/{n}: {e}", path.display())).read_raw::<i64>().unwrap();
            let (rk, p, reg, t, c, i, e) = (col("ranks"), col("parents"), col("regions"), col("threads"), col("calls"), col("inclusive_ns"), col("exclusive_ns"));
            let out = (0..rk.len()).map(|k| (rk[k], p[k], names[reg[k] as usize].clone(), t[k], c[k], i[k], e[k])).collect();
            let rt = |n: &str| f.dataset(&format!("scope_profiler_ranks/{n}")).unwrap().read_raw::<i64>().unwrap();
            (out, rt("ranks").into_iter().zip(rt("call_paths_wall_ns")).collect())
        };
        let (mut want, mut walls) = (Vec::new(), Vec::new());
        for f in &files {
            let (r, w) = rows(f);
            assert!(!r.is_empty(), "{layout} {}: call paths stored", f.display());
            want.extend(r);
            walls.extend(w);
        }
        let (got, got_walls) = rows(&dir.join("merged.h5"));
        assert_eq!(got, want, "{layout}: the merged call paths");
        assert_eq!(got_walls, walls, "{layout}: the wall times");
        assert!(walls.iter().all(|w| w.1 > 0), "{walls:?}");
        let o = run(Command::new(sptool()).current_dir(&dir).args(["tree", "merged.h5"]));
        assert_eq!(o.code(), Some(0), "{}", o.describe());
        assert!(o.stdout().contains("2 ranks"), "{}", o.describe());
        std::fs::remove_file(dir.join("merged.h5")).unwrap();
    }
}

/// The merge's memory limit: reached, it ends with one line (no backtrace, no abort).
#[test]
fn the_merge_memory_limit_ends_in_one_line() {
    let dir = scratch("hostile_lib_oom");
    let files = rank_files(&dir, "columnar", 1);
    craft(&dir, &files[0], "names.h5", "t = f['region_table']\nn = list(t['names'][()])\ndel t['names']\nt.create_dataset('names', data=np.array(n + [b'a'] * 2_000_000, dtype='S1'), compression='gzip', chunks=(1 << 16,))");
    let r = run(clean(Command::new(merge_tool()).current_dir(&dir).args(["-o", "merged.h5", "names.h5"])).env("SCOPE_PROFILER_MERGE_MAX_MEMORY", "48M"));
    assert_eq!(r.code(), Some(1), "{}", r.describe());
    assert!(!r.stderr().contains("backtrace") && !r.stderr().contains("panicked") && !r.stderr().contains("memory allocation of"), "{}", r.describe());
    let lines: Vec<String> = r.stderr().lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 1, "{}", r.describe());
    assert!(
        lines[0].starts_with("scope_profiler_merge: names.h5: out of memory: an allocation of") && lines[0].contains("SCOPE_PROFILER_MERGE_MAX_MEMORY"),
        "{}",
        r.describe()
    );
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}

/// Links out of the file (to a FIFO, which would block forever) are never followed.
#[test]
fn links_to_a_fifo_are_not_followed() {
    let dir = scratch("hostile_lib_links");
    let files = rank_files(&dir, "columnar", 1);
    let regions = rank_files(&scratch("hostile_lib_links_regions"), "regions", 1);
    mkfifo(&dir.join("fifo"));
    craft(&dir, &files[0], "elink_dataset.h5", "i = f['rank_region_index']\ndel i['ranks']\ni['ranks'] = h5py.ExternalLink('fifo', '/ranks')");
    craft(&dir, &regions[0], "elink_group.h5", "f['rank0/regions/evil'] = h5py.ExternalLink('fifo', '/')");
    craft(&dir, &regions[0], "elink_rank.h5", "f['rank7'] = h5py.ExternalLink('fifo', '/rank0')");
    craft(&dir, &files[0], "external.h5", "e = f['events']\nn = e['durations'].shape[0]\ndel e['durations']\ne.create_dataset('durations', shape=(n,), dtype='i8', external=[('fifo', 0, 8 * n)])");
    for (file, needle) in [
        ("elink_dataset.h5", "is an external link"),
        ("elink_group.h5", "is an external link"),
        ("elink_rank.h5", "is an external link"),
        ("external.h5", "keeps its data in external files"),
    ] {
        let r = merge(&dir, &[file]);
        r.refused(&[file, needle]);
        assert!(r.elapsed < Duration::from_secs(30), "{}", r.describe());
    }
    // A FIFO given as an input is refused without opening it.
    merge(&dir, &["fifo"]).refused(&["fifo", "not a regular file"]);
}

/// The size of the first object of the global heap made huge: HDF5 1.10 reads past its
/// buffers and crashes. The merge tool names the file as damaged; a host calling
/// `sp_merge_rank_files` on it gets an error and lives on (the file is read in a child).
#[test]
fn a_file_that_crashes_the_hdf5_library_does_not_take_the_caller_down() {
    let dir = scratch("hostile_lib_crash");
    let files = rank_files(&dir, "regions", 1);
    let mut b = std::fs::read(&files[0]).unwrap();
    let gcol = b.windows(4).position(|w| w == b"GCOL").expect("a global heap");
    b[gcol + 16 + 8 + 7] = 0x24;
    std::fs::write(dir.join("crash.h5"), &b).unwrap();
    let r = merge(&dir, &["crash.h5"]);
    // HDF5 1.10 crashes on it; a later version may say it is damaged.
    r.refused(&["crash.h5", "damaged"]);
    assert!(!dir.join("merged.h5").exists());
    assert!(leftovers(&dir).is_empty(), "left {:?}: {}", leftovers(&dir), r.describe());
    let host = compile("tests/c/hostile_api.c", &dir, &[]);
    let r = run(clean(&mut Command::new(&host)).current_dir(&dir).args(["merge", "merged.h5", "crash.h5"]));
    assert_eq!(r.code(), Some(0), "the host survives: {}", r.describe());
    let said = r.stdout();
    assert!(said.contains("merge -13 ") && said.contains("crash.h5") && said.contains("damaged"), "{}", r.describe());
    assert!(said.ends_with("host alive\n"), "{}", r.describe());
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
    // The same host merges good files.
    let r = run(clean(&mut Command::new(&host)).current_dir(&dir).args(["merge", "merged.h5"]).arg(&files[0]));
    assert!(r.stdout().starts_with("merge 0 "), "{}", r.describe());
    assert!(dir.join("merged.h5").is_file());
}

// -------------------------------------------------------------------------------------------
// Recovering damaged and planted spill directories.

/// A run of the flight recorder program that crashes itself, leaving its spill directory in
/// `dir`; returns that spill directory.
fn killed_run(dir: &Path) -> PathBuf {
    killed_run_in(dir, "regions")
}

fn killed_run_in(dir: &Path, layout: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let exe = compile("tests/c/flight_loop.c", dir, &[]);
    let r = run(clean(&mut Command::new(&exe))
        .arg(dir.join("out.h5"))
        .arg(dir.join("side"))
        .args(["2", "segv", "40000"])
        .current_dir(dir)
        .env("SCOPE_PROFILER_LAYOUT", layout)
        .env("SCOPE_PROFILER_SPILL", "1"));
    assert_eq!(r.out.status.signal(), Some(libc::SIGSEGV), "flight_loop crashes itself: {}", r.describe());
    spill_dir(dir)
}

fn spill_dir(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).find(|p| p.file_name().unwrap().to_string_lossy().starts_with(".out.spill.")).expect("a spill directory")
}

fn recover(dir: &Path) -> Ran {
    let r = run(clean(Command::new(sptool()).current_dir(dir).args(["recover", "out.h5"])));
    r.sane();
    r
}

/// Calls per region in a recovered (regions-layout) file, and its `recovered_calls`.
fn recovered_calls(file: &Path) -> (std::collections::BTreeMap<String, u64>, i64) {
    let h5 = hdf5::File::open(file).unwrap();
    let per = support::read_regions(&h5, 0).into_iter().map(|(k, v)| (k, v.starts.len() as u64)).collect();
    let said = support::int_attr(&h5.group("metadata").unwrap(), "recovered_calls");
    (per, said)
}

/// Chunk headers of a spill file: byte offsets of their first word ("SPCK" in the low half).
fn chunk_headers(calls: &[u8]) -> Vec<usize> {
    (4096..calls.len().saturating_sub(32)).step_by(8).filter(|&i| calls[i..i + 4] == 0x4B43_5053u32.to_le_bytes()).collect()
}

fn set_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn set_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Every number of a spill is checked before it sizes anything, and the message and
/// `recovered_calls` say exactly what the file holds: a name record with id 10^8, 15 chunk
/// headers with distinct thread and region ids near the limits, a job size of 10^9 in
/// meta.json, a FIFO in place of `threads`, missing names, a region without a name, a flipped
/// fill count, absurd anchors.
#[test]
fn damaged_spills_are_recovered_within_bounds_and_counted_exactly() {
    let base = scratch("hostile_lib_spills");
    let original = killed_run(&base.join("original"));
    let names_of = |run: &Path| std::fs::read(run.join("names")).unwrap();
    type Damage = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Damage)> = vec![
        ("names_id", Box::new(|run: &Path| {
            let mut b = std::fs::read(run.join("names")).unwrap();
            set_u32(&mut b, 0, 100_000_000);
            std::fs::write(run.join("names"), b).unwrap();
        })),
        ("threads_and_regions", Box::new(|run: &Path| {
            let mut b = std::fs::read(run.join("calls.spill")).unwrap();
            for (k, &c) in chunk_headers(&b).iter().step_by(2).take(15).enumerate() {
                set_u32(&mut b, c + 4, (1 << 20) - 1 - k as u32); // region
                set_u32(&mut b, c + 16, 4_000_000_000 + k as u32); // thread
            }
            std::fs::write(run.join("calls.spill"), b).unwrap();
        })),
        ("meta_size", Box::new(|run: &Path| {
            let m = std::fs::read_to_string(run.join("meta.json")).unwrap();
            let m = m.replacen("\"size\": null", "\"size\": 1000000000", 1).replacen("\"rank\": null", "\"rank\": 0", 1);
            std::fs::write(run.join("meta.json"), m).unwrap();
        })),
        ("threads_fifo", Box::new(|run: &Path| {
            std::fs::remove_file(run.join("threads")).unwrap();
            mkfifo(&run.join("threads"));
        })),
        ("names_missing", Box::new(|run: &Path| std::fs::remove_file(run.join("names")).unwrap())),
        ("names_empty", Box::new(|run: &Path| std::fs::write(run.join("names"), b"").unwrap())),
        ("region_unnamed", Box::new(|run: &Path| {
            let mut b = std::fs::read(run.join("calls.spill")).unwrap();
            let c = chunk_headers(&b)[0];
            set_u32(&mut b, c + 4, 77);
            std::fs::write(run.join("calls.spill"), b).unwrap();
        })),
        ("fill", Box::new(|run: &Path| {
            let mut b = std::fs::read(run.join("calls.spill")).unwrap();
            let c = chunk_headers(&b)[1];
            set_u64(&mut b, c + 8, 809_316_106_244);
            std::fs::write(run.join("calls.spill"), b).unwrap();
        })),
        ("anchors", Box::new(|run: &Path| {
            let mut b = std::fs::read(run.join("anchors")).unwrap();
            if b.len() >= 48 {
                set_u64(&mut b, 0, u64::MAX);
                set_u64(&mut b, 24 + 8, i64::MAX as u64);
            } else {
                b = [u64::MAX, i64::MAX as u64, 5, 0, 1, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
            }
            std::fs::write(run.join("anchors"), b).unwrap();
        })),
        ("meta_key", Box::new(|run: &Path| {
            let m = std::fs::read_to_string(run.join("meta.json")).unwrap();
            let m = m.replacen("\"metadata\": [", "\"metadata\": [[\"\", {\"Int\": 1}], [\".\", {\"Int\": 2}],", 1);
            std::fs::write(run.join("meta.json"), m).unwrap();
        })),
    ];
    assert!(!names_of(&original).is_empty());
    for (name, damage) in cases {
        let dir = base.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let run_dir = dir.join(original.file_name().unwrap());
        copy_dir(&original, &run_dir);
        damage(&run_dir);
        let r = recover(&dir);
        assert_eq!(r.code(), Some(0), "{name}: {}", r.describe());
        assert!(r.elapsed < Duration::from_secs(30), "{name}: {}", r.describe());
        let said = r.stdout();
        let (per, counted) = recovered_calls(&dir.join("out.h5"));
        let written: u64 = per.values().sum();
        assert_eq!(counted as u64, written, "{name}: recovered_calls must be what the file holds ({per:?}): {}", r.describe());
        assert!(said.contains(&format!("recovered {written} calls")), "{name}: {}", r.describe());
        assert!(written > 0, "{name}: {}", r.describe());
        match name {
            "names_missing" | "names_empty" => {
                assert!(per.keys().all(|k| k.starts_with('#')), "{name}: {per:?}");
                assert!(said.contains("whose names were not saved are kept as #<id>"), "{name}: {}", r.describe());
            }
            "names_id" | "region_unnamed" => assert!(per.keys().any(|k| k.starts_with('#')) && said.contains("kept as #<id>"), "{name}: {per:?} {}", r.describe()),
            "fill" => {
                assert!(!said.contains("809316106244") && said.contains("impossible fill count"), "{name}: {}", r.describe());
                assert!(said.contains("nothing dropped"), "{name}: {}", r.describe());
            }
            "threads_and_regions" => assert!(said.contains("claim more threads and regions"), "{name}: {}", r.describe()),
            "threads_fifo" => assert!(said.contains("not a regular file"), "{name}: {}", r.describe()),
            "meta_size" => assert!(said.contains("job size 1000000000 is out of range"), "{name}: {}", r.describe()),
            "meta_key" => assert!(said.contains("metadata attribute(s)") && said.contains("left out"), "{name}: {}", r.describe()),
            _ => {}
        }
        assert!(std::fs::read_dir(&dir).unwrap().flatten().all(|e| !e.file_name().to_string_lossy().contains(".spill.")), "{name}: the spill data is removed once written");
    }
}

/// Calls whose times are each possible but whose durations add up past 2^63 ns (a chunk of a
/// columnar run rewritten to hold eight calls of 2^62 ticks): recovered, counted, never a
/// panic in the writer's sums.
#[test]
fn calls_whose_durations_overflow_the_sums_are_recovered_without_a_panic() {
    let base = scratch("hostile_lib_long_calls");
    let run_dir = killed_run_in(&base, "columnar");
    let mut b = std::fs::read(run_dir.join("calls.spill")).unwrap();
    let fill = |b: &[u8], c: usize| u64::from_le_bytes(b[c + 8..c + 16].try_into().unwrap()) as usize;
    let c = *chunk_headers(&b).iter().find(|&&c| fill(&b, c) >= 24).expect("a sealed chunk with room for eight escaped calls");
    for k in 0..8 {
        let at = c + 32 + k * 24;
        set_u64(&mut b, at, 0xFFFF_FFFF);
        set_u64(&mut b, at + 8, 1 + k as u64);
        set_u64(&mut b, at + 16, (1 << 62) - 1);
    }
    std::fs::write(run_dir.join("calls.spill"), b).unwrap();
    let r = recover(&base);
    assert_eq!(r.code(), Some(0), "{}", r.describe());
    assert!(r.stdout().starts_with("recovered"), "{}", r.describe());
    let v = support::python_view(&base.join("out.h5"));
    let said: i64 = r.stdout().split("recovered ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    let written: u64 = v["regions"].as_object().unwrap().values().flat_map(|ranks| ranks.as_object().unwrap().values()).map(|x| x["calls"].as_u64().unwrap()).sum();
    assert_eq!(said as u64, written, "{}", r.describe());
}

/// Calls on the call paths of a recovered columnar file, in all.
fn calls_on_paths(file: &Path) -> u64 {
    let h5 = hdf5::File::open(file).unwrap();
    if !h5.link_exists("call_paths/calls") {
        return 0;
    }
    h5.dataset("call_paths/calls").unwrap().read_raw::<u64>().unwrap().iter().sum()
}

/// A recovered run keeps the call paths of its calls: every recovered call is on a path
/// (they were built before the spill file was mapped for reading: recovered files had none,
/// while saying `call_paths_kept` 1).
#[test]
fn a_recovered_run_keeps_the_call_paths_of_its_calls() {
    let base = scratch("hostile_lib_recovered_paths");
    killed_run_in(&base, "columnar");
    let r = recover(&base);
    assert_eq!(r.code(), Some(0), "{}", r.describe());
    let counted = recovered_count(&base.join("out.h5"));
    assert!(counted > 0, "{}", r.describe());
    assert_eq!(calls_on_paths(&base.join("out.h5")), counted as u64, "{}", r.describe());
}

/// `recovered_calls` of a recovered file.
fn recovered_count(file: &Path) -> i64 {
    let h5 = hdf5::File::open(file).unwrap();
    support::int_attr(&h5.group("metadata").unwrap(), "recovered_calls")
}

/// The id of region `name` in a run directory's `names` (records: id u32, length u32, name).
fn region_id(run_dir: &Path, name: &str) -> u32 {
    let names = std::fs::read(run_dir.join("names")).unwrap();
    let (mut at, mut found) = (0, None);
    while at + 8 <= names.len() {
        let id = u32::from_le_bytes(names[at..at + 4].try_into().unwrap());
        let len = u32::from_le_bytes(names[at + 4..at + 8].try_into().unwrap()) as usize;
        if &names[at + 8..at + 8 + len] == name.as_bytes() {
            found = Some(id);
        }
        at += 8 + len;
    }
    found.unwrap_or_else(|| panic!("region {name} in the names of {}", run_dir.display()))
}

/// Make one chunk of region "work" of each of `threads` threads hold exactly `calls`
/// (escaped, ticks), on the monotonic clock (ticks are ns).
fn plant_calls(run_dir: &Path, threads: usize, calls: &[(u64, u64)]) {
    let meta = std::fs::read_to_string(run_dir.join("meta.json")).unwrap();
    std::fs::write(run_dir.join("meta.json"), meta.replacen("\"clock\": \"tsc\"", "\"clock\": \"monotonic\"", 1)).unwrap();
    let work = region_id(run_dir, "work");
    let mut b = std::fs::read(run_dir.join("calls.spill")).unwrap();
    let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let mut done: Vec<u32> = Vec::new();
    for c in chunk_headers(&b) {
        let (region, fill, thread) = ((word(&b, c) >> 32) as u32, word(&b, c + 8), word(&b, c + 16) as u32);
        if region != work || fill < 3 * calls.len() as u64 || done.contains(&thread) {
            continue;
        }
        set_u64(&mut b, c + 8, 3 * calls.len() as u64);
        for (k, &(start, end)) in calls.iter().enumerate() {
            set_u64(&mut b, c + 32 + k * 24, 0xFFFF_FFFF);
            set_u64(&mut b, c + 32 + k * 24 + 8, start);
            set_u64(&mut b, c + 32 + k * 24 + 16, end);
        }
        done.push(thread);
        if done.len() == threads {
            break;
        }
    }
    assert_eq!(done.len(), threads, "chunks of region work with room for {} calls on {threads} thread(s)", calls.len());
    std::fs::write(run_dir.join("calls.spill"), b).unwrap();
}

/// Two threads' call paths of one region whose inclusive times each come near 2^63 ns (two
/// calls of 2^62 ticks overlapping without nesting): recovered, the per-region totals of the
/// summary saturating (adding them up over the threads made recovery panic with an overflow).
#[test]
fn call_paths_whose_times_add_up_past_2_63_are_recovered_without_a_panic() {
    let base = scratch("hostile_lib_long_paths");
    let run_dir = killed_run_in(&base, "columnar");
    plant_calls(&run_dir, 2, &[(1, (1 << 62) - 3), (2, (1 << 62) - 1)]);
    let r = recover(&base);
    assert_eq!(r.code(), Some(0), "{}", r.describe());
    assert!(r.stdout().starts_with("recovered"), "{}", r.describe());
    let counted = recovered_count(&base.join("out.h5"));
    assert_eq!(calls_on_paths(&base.join("out.h5")), counted as u64, "{}", r.describe());
}

/// A job of two ranks, one of whose spills holds 256 calls of 2^54 ticks that overlap without
/// nesting (each in range, their statistics too, but their call path's time 2^62 ns): the
/// ranks' files merge, the path's time kept below what the merge refuses as damage.
#[test]
fn a_recovered_job_whose_path_times_pass_2_62_is_merged() {
    let base = scratch("hostile_lib_long_job");
    let run_dir = killed_run_in(&base.join("run"), "columnar");
    let job = base.join("job");
    std::fs::create_dir_all(&job).unwrap();
    for rank in 0..2 {
        let to = job.join(format!(".out.spill.r{rank}.planted"));
        copy_dir(&run_dir, &to);
        let meta = std::fs::read_to_string(to.join("meta.json")).unwrap();
        let meta = meta.replacen("\"rank\": null", &format!("\"rank\": {rank}"), 1).replacen("\"size\": null", "\"size\": 2", 1);
        std::fs::write(to.join("meta.json"), meta).unwrap();
    }
    let calls: Vec<(u64, u64)> = (1..=256).map(|k| (k, (1 << 54) + k)).collect();
    plant_calls(&job.join(".out.spill.r1.planted"), 1, &calls);
    let r = recover(&job);
    assert_eq!(r.code(), Some(0), "{}", r.describe());
    assert!(r.stdout().starts_with("recovered") && r.stdout().contains("of 2 rank(s)"), "{}", r.describe());
    assert_eq!(calls_on_paths(&job.join("out.h5")), recovered_count(&job.join("out.h5")) as u64, "{}", r.describe());
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// In a shared sticky directory (as SCOPE_PROFILER_SPILL_DIR=/tmp makes it), a run directory
/// planted by another user with a later start time is neither recovered nor deleted, nor is a
/// run directory others may write: only the user's own run is recovered. (Needs root, which
/// the test machines have, to plant a directory as another user.)
#[test]
fn recovery_touches_only_the_users_own_run_directories() {
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test plants directories of another user: run it as root");
    let base = scratch("hostile_lib_planted");
    let mine = killed_run(&base.join("mine"));
    let shared = base.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let own = shared.join(mine.file_name().unwrap());
    copy_dir(&mine, &own);
    std::fs::set_permissions(&own, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    // Another user's run, started later (it would win as the newest), and a writable one.
    let planted = shared.join(".out.spill.planted");
    copy_dir(&mine, &planted);
    let meta = std::fs::read_to_string(planted.join("meta.json")).unwrap();
    let started = meta.split("\"started\": \"").nth(1).unwrap().split('"').next().unwrap().to_string();
    std::fs::write(planted.join("meta.json"), meta.replace(&started, "2999-01-01T00:00:00Z")).unwrap();
    let nobody = 65534;
    for e in std::fs::read_dir(&planted).unwrap().flatten() {
        std::os::unix::fs::chown(e.path(), Some(nobody), Some(nobody)).unwrap();
    }
    std::os::unix::fs::chown(&planted, Some(nobody), Some(nobody)).unwrap();
    let open = shared.join(".out.spill.writable");
    copy_dir(&mine, &open);
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let target = base.join("out.h5");
    let r = run(clean(Command::new(sptool()).current_dir(&base).args(["recover", "out.h5"])).env("SCOPE_PROFILER_SPILL_DIR", &shared));
    r.sane();
    assert_eq!(r.code(), Some(0), "{}", r.describe());
    let said = r.stdout();
    assert!(said.starts_with("recovered") && said.contains("recovered 80003 calls") || said.contains(" calls of 1 rank(s) from 1 spill"), "{}", r.describe());
    assert!(said.contains("planted: owned by user id 65534, not by you"), "{}", r.describe());
    assert!(said.contains("writable: writable by others"), "{}", r.describe());
    assert!(planted.join("meta.json").is_file() && open.join("meta.json").is_file(), "the others' directories are left alone");
    assert!(!own.exists(), "the user's own run directory is removed once recovered");
    let h5 = hdf5::File::open(&target).unwrap();
    let from = h5.group("metadata").unwrap().attr("recovered_from").unwrap().read_raw::<hdf5::types::VarLenUnicode>().unwrap();
    assert_eq!(from.iter().map(|s| s.as_str().to_string()).collect::<Vec<_>>(), [own.file_name().unwrap().to_string_lossy().to_string()]);
}

// -------------------------------------------------------------------------------------------
// The producing side and the library's lifecycle.

/// `sp_region_add_flops(h, 1e308)` twice: the second is refused (the total would be infinite),
/// as are infinity, NaN and negative counts; two threads whose totals are each finite but
/// whose sum is not leave their own totals in the file and no infinite rank total.
#[test]
fn flop_and_byte_counts_never_become_infinite() {
    let dir = scratch("hostile_lib_flops");
    let exe = compile("tests/c/hostile_api.c", &dir, &[]);
    let r = run(clean(&mut Command::new(&exe)).current_dir(&dir).args(["flops", "out.h5"]));
    assert_eq!(r.code(), Some(0), "{}", r.describe());
    let said: std::collections::BTreeMap<String, String> =
        r.stdout().lines().filter_map(|l| l.split_once(' ')).map(|(a, b)| (a.to_string(), b.to_string())).collect();
    let invalid = "-4";
    for (call, want) in [
        ("add_flops_1e308", "0"),
        ("add_flops_1e308_again", invalid),
        ("add_flops_inf", invalid),
        ("add_flops_nan", invalid),
        ("add_flops_negative", invalid),
        ("add_bytes_1e308", "0"),
        ("add_bytes_1e308_again", invalid),
        ("add_bytes_max_plus_max", invalid),
        ("finalize", "0"),
    ] {
        assert_eq!(said.get(call).map(String::as_str), Some(want), "{call}: {}", r.describe());
    }
    let h5 = hdf5::File::open(dir.join("out.h5")).unwrap();
    let busy = h5.group("rank0/annotations/busy").unwrap();
    assert_eq!(busy.attr("flops").unwrap().read_scalar::<f64>().unwrap(), 1e308);
    assert_eq!(busy.attr("bytes").unwrap().read_scalar::<f64>().unwrap(), 1e308);
    let split = h5.group("rank0/annotations/split").unwrap();
    assert!(split.attr("flops").is_err(), "an infinite rank total is left out");
    let per_thread = split.dataset("thread_flops").unwrap().read_raw::<f64>().unwrap();
    assert_eq!(per_thread, [1e308, 1e308]);
    assert!(r.stderr().contains("region 'split': the FLOP counts of its threads add up to more than a double holds"), "{}", r.describe());
}

/// A host that `dlopen`s the library, records on three threads and `dlclose`s it without
/// `sp_finalize`: the profile is written inside dlclose on the calling thread (no hang), the
/// host goes on, and with the flight recorder on, a SIGTERM after the unload ends the host by
/// SIGTERM (the library's handlers went with it), leaving no spill data.
#[test]
fn dlclose_before_finalize_writes_the_profile_without_hanging() {
    let dir = scratch("hostile_lib_dlclose");
    let exe = support::compile_host("dlclose_host", "tests/c/dlclose_host.c", &dir);
    for (name, env, term) in [("plain", None, false), ("spill", Some(("SCOPE_PROFILER_SPILL", "1")), true), ("columnar", Some(("SCOPE_PROFILER_LAYOUT", "columnar")), false)] {
        let out = dir.join(format!("{name}.h5"));
        let mut cmd = Command::new(&exe);
        clean(&mut cmd).arg(library()).arg(&out).current_dir(&dir);
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        if term {
            cmd.arg("term");
        }
        let r = run(&mut cmd);
        assert!(r.elapsed < Duration::from_secs(30), "{name}: {}", r.describe());
        assert!(r.stdout().contains("unloaded"), "{name}: {}", r.describe());
        if term {
            assert_eq!(r.out.status.signal(), Some(libc::SIGTERM), "{name}: ends by the SIGTERM, as without the library: {}", r.describe());
        } else {
            assert_eq!(r.code(), Some(0), "{name}: {}", r.describe());
        }
        let v = support::python_view(&out);
        assert_eq!(v["regions"]["main_work"]["0"]["calls"].as_u64(), Some(300_000), "{name}: {v}");
        assert_eq!(v["regions"]["thread_work"]["0"]["calls"].as_u64(), Some(40_000), "{name}: {v}");
        assert!(leftovers(&dir).is_empty(), "{name}: {:?}", leftovers(&dir));
        assert!(std::fs::read_dir(&dir).unwrap().flatten().all(|e| !e.file_name().to_string_lossy().contains(".spill.")), "{name}: no spill data left");
    }
}

// -------------------------------------------------------------------------------------------
// Errors of the data against errors of the place, and settings.

/// A target name longer than a file name can be: written to the fallback directory under a
/// shortened name, said so; one that is long but valid is written in place.
#[test]
fn long_target_names_are_written() {
    let dir = scratch("hostile_lib_long_names");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let exe = compile("tests/c/simple.c", &dir, &[]);
    let valid = format!("{}.h5", "v".repeat(240));
    let r = run(clean(&mut Command::new(&exe)).current_dir(&dir).env("SCOPE_PROFILER_FILE", &valid).env("TMPDIR", &tmp));
    assert_eq!(r.code(), Some(0), "{}", r.describe());
    assert!(dir.join(&valid).is_file(), "{}", r.describe());
    let too_long = format!("{}.h5", "x".repeat(300));
    let r = run(clean(&mut Command::new(&exe)).current_dir(&dir).env("SCOPE_PROFILER_FILE", &too_long).env("TMPDIR", &tmp));
    assert_eq!(r.code(), Some(0), "{}", r.describe());
    let written: Vec<PathBuf> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(written.len(), 1, "{written:?}: {}", r.describe());
    assert!(r.stderr().contains(&format!("profile written to {} instead", written[0].display())), "{}", r.describe());
    assert!(written[0].file_name().unwrap().len() <= 255);
    assert!(leftovers(&dir).is_empty() && leftovers(&tmp).is_empty());
}

/// A garbage SCOPE_PROFILER_SIGNAL_TIMEOUT is said once at setup, with what is used instead;
/// the run goes on.
#[test]
fn bad_flight_recorder_settings_are_said_at_setup() {
    let dir = scratch("hostile_lib_settings");
    let exe = compile("tests/c/simple.c", &dir, &[]);
    let r = run(clean(&mut Command::new(&exe))
        .current_dir(&dir)
        .env("SCOPE_PROFILER_SPILL", "1")
        .env("SCOPE_PROFILER_SIGNAL_TIMEOUT", "soon"));
    assert_eq!(r.code(), Some(0), "{}", r.describe());
    let e = r.stderr();
    assert_eq!(e.matches("SCOPE_PROFILER_SIGNAL_TIMEOUT").count(), 1, "{}", r.describe());
    assert!(e.contains("SCOPE_PROFILER_SIGNAL_TIMEOUT=\"soon\"") && e.contains("default of 20 s"), "{}", r.describe());
}

/// Paths named by the environment that are not regular files (a FIFO, a socket, a directory,
/// a device, a symlink to a FIFO): `SCOPE_PROFILER_FILTER` naming one is said once and the
/// run goes on (a FIFO opened for reading would hang the host for ever); `sptool recover`
/// and the merge refuse such a target or input in one line.
#[test]
fn paths_that_are_not_regular_files_never_block() {
    let dir = scratch("hostile_lib_kinds");
    let exe = compile("tests/c/simple.c", &dir, &[]);
    mkfifo(&dir.join("fifo"));
    std::os::unix::fs::symlink(dir.join("fifo"), dir.join("to_fifo")).unwrap();
    drop(std::os::unix::net::UnixListener::bind(dir.join("sock")).unwrap());
    std::fs::create_dir(dir.join("adir")).unwrap();
    let kinds = [("fifo", "a FIFO"), ("to_fifo", "a FIFO"), ("sock", "a socket"), ("/dev/zero", "a character device"), ("adir", "a directory")];
    for (path, said) in kinds {
        let out = dir.join("out.h5");
        let _ = std::fs::remove_file(&out);
        let r = run(clean(&mut Command::new(&exe)).current_dir(&dir).env("SCOPE_PROFILER_FILE", &out).env("SCOPE_PROFILER_FILTER", path));
        r.sane();
        assert_eq!(r.code(), Some(0), "{}", r.describe());
        let e = r.stderr();
        assert_eq!(e.matches("SCOPE_PROFILER_FILTER").count(), 1, "said once: {}", r.describe());
        assert!(e.contains(said) && e.contains("every instrumented function is recorded"), "{}", r.describe());
        assert!(out.is_file(), "the profile is written: {}", r.describe());
        let r = run(clean(Command::new(sptool()).current_dir(&dir).args(["recover", path])));
        r.refused(&[path.trim_start_matches('/'), said]);
        let r = merge(&dir, &[path]);
        r.sane();
        assert_eq!(r.code(), Some(1), "{}", r.describe());
        assert!(r.stderr().contains("not a regular file") || r.stderr().contains("directory"), "{}", r.describe());
    }
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}
