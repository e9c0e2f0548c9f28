//! The collective write (real mpirun, real MPI-IO, and on this one node each rank's own
//! `pwrite`s, the default here): every rank writes its own part of the one file. The same
//! finalize also writes the same data through rank 0 (`SCOPE_PROFILER_TEST_REFERENCE`), and the
//! two files must be equal dataset by dataset and attribute by attribute
//! (`tests/python/compare_files.py`, h5py); the PyPI reader reads the collective file with the
//! numbers the program recorded. Ranks that differ in every way a run's ranks can
//! (`tests/c/mpi_collective.c`) on 1, 2, 3, 8, 32 and 64 ranks (oversubscribed), OpenMPI's two
//! MPI-IO implementations (`SCOPE_PROFILER_COLLECTIVE_IO=mpiio`), a failure on one rank at each
//! step either way, and the count of collective operations and of the bytes rank 0 receives
//! against the number of ranks.

mod support;
use support::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn build(dir: &Path) -> PathBuf {
    compile_with("mpicc", &["-std=c99", "-D_GNU_SOURCE"], "mpi_collective", &["tests/c/mpi_collective.c"], dir, &["-lpthread"])
}

/// mpirun -np `np` with `env`; fails the test on a non-zero exit when `ok`.
fn mpirun(np: usize, exe: &Path, args: &[&str], dir: &Path, env: &[(&str, &str)], mca: &[&str], ok: bool) -> Output {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "-np", &np.to_string()]).args(mca);
    for (k, v) in env {
        cmd.args(["-x", k]).env(k, v);
    }
    cmd.arg(exe)
        .args(args)
        .current_dir(dir)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    let out = run(&mut cmd);
    if ok {
        assert!(out.status.success(), "mpirun -np {np} {exe:?} {args:?} {env:?} failed\nstdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    }
    out
}

/// The two files are equal object by object (compare_files.py prints the differences).
fn assert_same_files(a: &Path, b: &Path) {
    let out = run(Command::new(python()).arg(repo_root().join("tests/python/compare_files.py")).arg(a).arg(b));
    assert!(out.status.success(), "{} and {} differ:\n{}{}", a.display(), b.display(), text(&out.stdout), text(&out.stderr));
}

/// Calls per rank and region by the rules of mpi_collective.c.
fn expected(np: usize, calls: i64) -> BTreeMap<String, BTreeMap<usize, i64>> {
    let mut e: BTreeMap<String, BTreeMap<usize, i64>> = BTreeMap::new();
    let mut put = |name: &str, r: usize, n: i64| {
        e.entry(name.to_string()).or_default().insert(r, n);
    };
    for r in 0..np {
        if r % 4 == 3 && np > 1 {
            continue;
        }
        put("solve", r, calls * (r as i64 % 5 + 1));
        put("io/write", r, r as i64 + 1);
        put(if r % 2 == 0 { "even/set é" } else { "odd set" }, r, 2);
        if r % 3 > 0 {
            put("worker", r, calls * (r % 3) as i64);
        }
        if r == 1 {
            put("left open", r, 0);
        }
        if r < 3 {
            put(&format!("rank {r} only"), r, 1);
        }
    }
    e
}

/// What the PyPI reader sees in `file` is what the ranks recorded; the rank table has a row per
/// rank; only the ranks with counters have a group.
fn check_collective_file(file: &Path, np: usize, calls: i64, layout: &str) {
    let py = python_view(file);
    assert_eq!(py["num_ranks"], np, "{}", file.display());
    assert_eq!(py["storage_layout"], layout);
    let want = expected(np, calls);
    let got: BTreeMap<String, BTreeMap<usize, i64>> = py["regions"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, ranks)| (name.clone(), ranks.as_object().unwrap().iter().map(|(r, v)| (r.parse().unwrap(), v["calls"].as_i64().unwrap())).collect()))
        .collect();
    assert_eq!(got, want, "{}", file.display());
    let h5 = hdf5::File::open(file).unwrap();
    assert_eq!(int_attr(&h5, "scope_profiler_schema"), 3);
    let ranks: Vec<u32> = h5.dataset("scope_profiler_ranks/ranks").unwrap().read_raw().unwrap();
    assert_eq!(ranks, (0..np as u32).collect::<Vec<_>>());
    let mut pids = std::collections::BTreeSet::new();
    for r in 0..np {
        assert_eq!(rank_int(&h5, r, "mpi_rank"), Some(r as i64));
        pids.insert(rank_int(&h5, r, "pid").unwrap());
        let threads = if r % 4 == 3 && np > 1 { 0 } else { 1 + r % 3 };
        assert_eq!(rank_int(&h5, r, "num_threads"), Some(threads as i64), "rank {r}");
        assert_eq!(rank_int_list(&h5, r, "thread_os_ids").map(|t| t.len()), Some(threads), "rank {r}");
        assert!(!rank_int_list(&h5, r, "cpus").unwrap().is_empty());
        assert_eq!(rank_str(&h5, r, "clock_status").as_deref(), Some("ok"), "rank {r}");
        // Counters go in rank<N> groups (the Python schema's), on the ranks that have them.
        let group = h5.group(&format!("rank{r}"));
        match r % 4 {
            1 if np > 1 => assert!(group.unwrap().group("annotations").is_ok(), "rank {r}"),
            2 => assert!(group.unwrap().group("perf_events").is_ok(), "rank {r}"),
            _ if np > 1 => assert!(group.is_err(), "rank {r} has a group"),
            _ => {}
        }
    }
    assert_eq!(pids.len(), np);
    if np > 2 {
        let perf = &py["perf_events"]["2"]["solve"];
        assert_eq!(perf["calls"], calls * 3, "{perf}");
    }
}

/// Run mpi_collective on `np` ranks in `layout` ("" for the default), writing the collective
/// file and, from the same data, the reference through rank 0; both equal, and right. `io` is
/// `SCOPE_PROFILER_COLLECTIVE_IO` ("" for the default).
fn collective_equals_rank0(dir: &Path, exe: &Path, np: usize, calls: i64, layout: &str, io: &str, mca: &[&str]) -> (PathBuf, Output) {
    let tag = format!("np{np}_{}_{io}{}", if layout.is_empty() { "default" } else { layout }, mca.last().map(|m| format!("_{m}")).unwrap_or_default());
    let (file, reference) = (dir.join(format!("{tag}.h5")), dir.join(format!("{tag}.rank0.h5")));
    let mut env = vec![("SCOPE_PROFILER_TEST_REFERENCE", reference.to_str().unwrap()), ("SCOPE_PROFILER_VERBOSE", "2")];
    if !layout.is_empty() {
        env.push(("SCOPE_PROFILER_LAYOUT", layout));
    }
    if !io.is_empty() {
        env.push(("SCOPE_PROFILER_COLLECTIVE_IO", io));
    }
    let out = mpirun(np, exe, &[file.to_str().unwrap(), &calls.to_string()], dir, &env, mca, true);
    // Which way the ranks wrote it (rank 0 says at verbosity 2): by themselves on this one
    // node, unless MPI-IO was asked for.
    let stderr = text(&out.stderr);
    let way = if io == "mpiio" { "(MPI-IO)" } else { "(one node: pwrite by every rank)" };
    if np > 1 {
        assert_eq!(stderr.matches("collective write on rank 0 (").count(), 1, "{stderr}");
        assert!(stderr.contains(&format!("collective write on rank 0 {way}")), "expected {way}:\n{stderr}");
    }
    let stdout = text(&out.stdout);
    assert_eq!(stdout.matches("scope_profiler summary").count(), 1, "{stdout}");
    assert_same_files(&file, &reference);
    let layout = if layout.is_empty() { "columnar" } else { layout };
    check_collective_file(&file, np, calls, layout);
    (file, out)
}

#[test]
fn the_collective_file_equals_the_file_written_through_rank_0_for_1_2_3_and_8_ranks() {
    let dir = scratch("collective_small");
    let exe = build(&dir);
    for np in [1usize, 2, 3, 8] {
        for layout in ["columnar", "aggregate"] {
            let (file, out) = collective_equals_rank0(&dir, &exe, np, 300, layout, "", &[]);
            // The summary comes from the cross-rank reductions: the reference run printed
            // nothing else, and its numbers are the file's.
            let stdout = text(&out.stdout);
            let py = python_view(&file);
            let solve: i64 = py["regions"]["solve"].as_object().unwrap().values().map(|v| v["calls"].as_i64().unwrap()).sum();
            // The tree's row of solve (calls come first after the name).
            let line = stdout.lines().find(|l| l.trim_start().starts_with("solve ")).unwrap_or_else(|| panic!("{stdout}"));
            assert_eq!(line.split_whitespace().nth(1).unwrap().parse::<i64>().unwrap(), solve, "{stdout}");
            if np > 1 {
                assert!(stdout.contains(&format!("{np} ranks")), "{stdout}");
            }
        }
    }
}

/// 32 ranks without a layout asked for: the default above 16 ranks is columnar, written
/// collectively; 64 ranks in the aggregate layout. The heaviest cases, once each.
#[test]
fn thirty_two_and_sixty_four_ranks_oversubscribed() {
    let dir = scratch("collective_large");
    let exe = build(&dir);
    let (_, out) = collective_equals_rank0(&dir, &exe, 32, 20, "", "", &[]);
    assert!(!text(&out.stderr).contains("written through rank 0"), "{}", text(&out.stderr));
    collective_equals_rank0(&dir, &exe, 64, 20, "aggregate", "", &[]);
}

/// OpenMPI 4.1's two MPI-IO implementations write what the rank-0 path writes (MPI-IO asked
/// for: on one node the ranks write with pwrite by default), in both schema-3 layouts and in
/// several rounds.
#[test]
fn romio_and_ompio_write_the_same_file() {
    let dir = scratch("collective_io");
    let exe = build(&dir);
    for io in ["romio321", "ompio"] {
        collective_equals_rank0(&dir, &exe, 5, 3000, "columnar", "mpiio", &["--mca", "io", io]);
    }
    collective_equals_rank0(&dir, &exe, 3, 2000, "aggregate", "mpiio", &[]);
    collective_equals_rank0(&dir, &exe, 3, 450_000, "columnar", "mpiio", &[]);
}

/// On one node, a rank that cannot open the file by its path (another file system there in
/// its mount namespace, say; a test fault here) makes every rank write through MPI-IO instead:
/// the write succeeds, the file is the one written through rank 0, that rank says why once,
/// and rank 0 names MPI-IO as the way taken.
#[test]
fn a_rank_that_cannot_open_the_file_by_its_path_makes_every_rank_use_mpi_io() {
    let dir = scratch("collective_path");
    let exe = build(&dir);
    let (file, reference) = (dir.join("path.h5"), dir.join("path.rank0.h5"));
    let env = [
        ("SCOPE_PROFILER_LAYOUT", "columnar"),
        ("SCOPE_PROFILER_TEST_REFERENCE", reference.to_str().unwrap()),
        ("SCOPE_PROFILER_TEST_FAULT", "path@2"),
        ("SCOPE_PROFILER_VERBOSE", "2"),
    ];
    let out = mpirun(4, &exe, &[file.to_str().unwrap(), "700"], &dir, &env, &[], true);
    let stderr = text(&out.stderr);
    assert_eq!(stderr.matches("every rank writes through MPI-IO instead").count(), 1, "{stderr}");
    assert!(stderr.contains("rank 2: test fault injected"), "{stderr}");
    assert!(stderr.contains("collective write on rank 0 (MPI-IO)"), "{stderr}");
    assert_same_files(&file, &reference);
    check_collective_file(&file, 4, 700, "columnar");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name()).filter(|n| n.to_string_lossy().starts_with('.')).collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A failure on one rank at any step: every rank learns it in the same collective step, nobody
/// hangs, every rank writes its own file, and the merge tool makes the normal file of them.
#[test]
fn a_failure_on_one_rank_makes_every_rank_write_its_own_file() {
    let dir = scratch("collective_fault");
    let exe = build(&dir);
    let np = 4;
    for (step, rank, io) in [("layout", 0, "auto"), ("open", 2, "auto"), ("write", 1, "auto"), ("close", 3, "auto"), ("open", 1, "mpiio"), ("write", 2, "mpiio"), ("close", 0, "mpiio")] {
        let name = format!("{step}_{io}");
        let file = dir.join(format!("{name}.h5"));
        let fault = format!("{step}@{rank}");
        let fault_io = format!("{fault} ({io})");
        let started = std::time::Instant::now();
        let out = mpirun(np, &exe, &[file.to_str().unwrap(), "500"], &dir, &[("SCOPE_PROFILER_LAYOUT", "columnar"), ("SCOPE_PROFILER_TEST_FAULT", &fault), ("SCOPE_PROFILER_COLLECTIVE_IO", io)], &[], false);
        assert!(started.elapsed() < std::time::Duration::from_secs(120), "{fault_io}: took {:?}", started.elapsed());
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{fault_io}: sp_finalize reports the failure\n{stderr}");
        assert!(!file.exists(), "{fault_io}: no collective file");
        assert!(stderr.contains(&format!("the collective write failed on rank {rank}")), "{fault_io}:\n{stderr}");
        let files: Vec<PathBuf> = (0..np).map(|r| dir.join(format!("{name}.rank{r}.h5"))).collect();
        for f in &files {
            assert!(f.exists(), "{fault_io}: {} missing\n{stderr}", f.display());
        }
        assert!(stderr.contains("scope_profiler_merge"), "{fault_io}: the message names the merge tool\n{stderr}");
        let merged = dir.join(format!("{name}.merged.h5"));
        let m = run(Command::new(env!("CARGO_BIN_EXE_scope_profiler_merge")).arg("-o").arg(&merged).args(&files));
        assert!(m.status.success(), "{fault_io}: {}", text(&m.stderr));
        check_collective_file(&merged, np, 500, "columnar");
        // No file of the private directory is left behind.
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name()).filter(|n| n.to_string_lossy().starts_with('.')).collect();
        assert!(left.is_empty(), "{fault_io}: {left:?}");
    }
}

/// Each rank's traffic during finalize, from its SCOPE_PROFILER_VERBOSE=2 line:
/// rank -> (collective operations, messages received, bytes received).
fn traffic(stderr: &str) -> BTreeMap<usize, (u64, u64, u64)> {
    let mut out = BTreeMap::new();
    for line in stderr.lines() {
        let Some(rest) = line.strip_prefix("[scope_profiler] rank ") else { continue };
        if !rest.contains("finalize over MPI") {
            continue;
        }
        let num = |after: &str| -> u64 {
            let at = rest.find(after).unwrap_or_else(|| panic!("{line}")) + after.len();
            rest[at..].trim_start().split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
        };
        let rank: usize = rest.split_whitespace().next().unwrap().parse().unwrap();
        let words: Vec<&str> = rest.split_whitespace().collect();
        let at = |w: &str| words.iter().position(|x| *x == w).unwrap_or_else(|| panic!("{line}"));
        let collectives: u64 = words[at("collective") - 1].parse().unwrap();
        let received: u64 = words[at("messages") - 1].parse().unwrap();
        out.insert(rank, (collectives, received, num("received (")));
    }
    out
}

/// The collective operations each rank takes part in do not grow with the number of ranks, and
/// rank 0 receives O(log P) messages whose bytes do not grow with it; through rank 0 they do
/// (the check can fail).
#[test]
fn collective_operations_and_bytes_at_rank_0_do_not_grow_with_the_ranks() {
    let dir = scratch("collective_counts");
    let exe = build(&dir);
    let mut seen = BTreeMap::new();
    for np in [2usize, 4, 8, 16, 32] {
        let file = dir.join(format!("np{np}.h5"));
        // "uniform": the same regions on every rank, no counters (their groups go to rank 0).
        let out = mpirun(np, &exe, &[file.to_str().unwrap(), "100", "uniform"], &dir, &[("SCOPE_PROFILER_LAYOUT", "columnar"), ("SCOPE_PROFILER_VERBOSE", "2")], &[], true);
        let t = traffic(&text(&out.stderr));
        assert_eq!(t.len(), np, "one line per rank:\n{}", text(&out.stderr));
        let most = t.values().map(|x| x.0).max().unwrap();
        let least = t.values().map(|x| x.0).min().unwrap();
        assert_eq!(most, least, "every rank takes part in the same collective operations: {t:?}");
        let (_, messages, bytes) = t[&0];
        let log = (np as f64).log2().ceil() as u64;
        assert_eq!(messages, 2 * log, "rank 0 receives a length and the data from each of its log2 P children: {t:?}");
        seen.insert(np, (most, bytes));
    }
    let ops: Vec<u64> = seen.values().map(|x| x.0).collect();
    assert!(ops.iter().all(|&o| o == ops[0]), "collective operations per rank by ranks: {seen:?}");
    // Bytes at rank 0: a census per tree level (about the same size whatever the ranks) and
    // the broadcasts' lengths: at most log2 P times what 2 ranks need, far below P times.
    let per_level = seen[&2].1;
    for (&np, &(_, bytes)) in &seen {
        let log = (np as f64).log2().ceil() as u64;
        assert!(bytes <= per_level * log + 4096, "{np} ranks: rank 0 received {bytes} bytes (2 ranks: {per_level}): {seen:?}");
    }
    // Through rank 0, rank 0 receives every rank's calls: linear in the ranks.
    let mut through = BTreeMap::new();
    for np in [2usize, 16] {
        let file = dir.join(format!("rank0_np{np}.h5"));
        let out = mpirun(np, &exe, &[file.to_str().unwrap(), "100", "uniform"], &dir, &[("SCOPE_PROFILER_LAYOUT", "columnar"), ("SCOPE_PROFILER_VERBOSE", "2"), ("SCOPE_PROFILER_COLLECTIVE", "0")], &[], true);
        through.insert(np, traffic(&text(&out.stderr))[&0].2);
    }
    assert!(through[&16] > 10 * through[&2], "through rank 0: {through:?}");
}

/// Above 16 ranks the regions layout (asked for) is still written, through rank 0, and rank 0
/// says once why that is slow; without a layout asked for, the file is columnar.
#[test]
fn regions_above_16_ranks_warns_once_that_it_goes_through_rank_0() {
    let dir = scratch("collective_regions");
    let exe = build(&dir);
    let file = dir.join("regions17.h5");
    let out = mpirun(17, &exe, &[file.to_str().unwrap(), "10", "uniform"], &dir, &[("SCOPE_PROFILER_LAYOUT", "regions")], &[], true);
    let stderr = text(&out.stderr);
    assert_eq!(stderr.matches("the regions layout is written through rank 0").count(), 1, "{stderr}");
    let h5 = hdf5::File::open(&file).unwrap();
    for r in 0..17 {
        assert_eq!(read_regions(&h5, r)["solve"].starts.len(), 10, "rank {r}");
        assert_eq!(int_attr(&h5.group(&format!("rank{r}")).unwrap(), "mpi_rank"), r as i64);
    }
    let file = dir.join("default17.h5");
    let out = mpirun(17, &exe, &[file.to_str().unwrap(), "10", "uniform"], &dir, &[], &[], true);
    assert!(!text(&out.stderr).contains("through rank 0"), "{}", text(&out.stderr));
    let h5 = hdf5::File::open(&file).unwrap();
    assert_eq!(str_attr(&h5, "storage_layout"), "columnar");
    assert_eq!(python_view(&file)["regions"]["solve"]["16"]["calls"], 10);
}

/// A rank with more calls than one round takes (2^20) writes them in several rounds, and the
/// ranks with fewer take part in as many: rank 2 has 2.25 M calls (3 rounds), rank 1 1.35 M
/// (2), rank 0 0.45 M (1).
#[test]
fn ranks_with_more_calls_than_a_round_write_in_several_rounds() {
    let dir = scratch("collective_rounds");
    let exe = build(&dir);
    let (file, _) = collective_equals_rank0(&dir, &exe, 3, 450_000, "columnar", "", &[]);
    let h5 = hdf5::File::open(&file).unwrap();
    assert_eq!(h5.dataset("events/durations").unwrap().size(), 450_000 * (1 + 3 + 3 + 2) + 1 + 2 + 3 + 2 * 3 + 3);
    drop(h5);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each way of writing over MPI leaves every rank's allocator as the host had it: a
/// malloc-heavy host (tests/c/host_allocator.c under mpirun, 2 ranks) gets its arrays from
/// glibc the same way after sp_finalize as before it. The collective write stages a round's
/// encoded calls (several MiB) and rank 0 receives each other rank's calls (24 bytes a call)
/// when it writes them: both in mappings of their own. Freed through malloc, the staging raised
/// glibc's mmap threshold on every rank, the received calls on rank 0, and the host's arrays
/// after finalize came from the heap (0 of 40 mapped).
#[test]
fn every_way_of_writing_over_mpi_leaves_each_ranks_allocator_alone() {
    let dir = scratch("mpi_host_allocator");
    let exe = compile_with("mpicc", &["-std=c99", "-DWITH_MPI"], "host_allocator_mpi", &["tests/c/host_allocator.c"], &dir, &[]);
    let file = dir.join("out.h5");
    for (layout, collective) in [("columnar", "1"), ("columnar", "0"), ("regions", "1")] {
        let _ = std::fs::remove_file(&file);
        let out = mpirun(2, &exe, &[file.to_str().unwrap(), "profile"], &dir, &[("SCOPE_PROFILER_LAYOUT", layout), ("SCOPE_PROFILER_COLLECTIVE", collective)], &[], true);
        let stdout = text(&out.stdout);
        let mut phases: Vec<&str> = stdout.lines().filter(|l| l.starts_with("PHASE ")).collect();
        phases.sort();
        let expected = ["PHASE after 40/40", "PHASE after 40/40", "PHASE before 40/40", "PHASE before 40/40", "PHASE recording 40/40", "PHASE recording 40/40"];
        assert_eq!(phases, expected, "{layout}, collective {collective}: the ranks' arrays (mapped by glibc / steps)\nstderr:\n{}", text(&out.stderr));
        // Both ranks' 8 million calls each are in the file.
        let h5 = hdf5::File::open(&file).unwrap();
        let calls: u64 = if layout == "columnar" {
            h5.dataset("rank_region_index/event_counts").unwrap().read_raw::<u64>().unwrap().iter().sum()
        } else {
            (0..2).flat_map(|r| {
                let g = h5.group(&format!("rank{r}/regions")).unwrap();
                g.member_names().unwrap().into_iter().map(move |n| g.dataset(&format!("{n}/start_times")).unwrap().size() as u64)
            }).sum()
        };
        assert_eq!(calls, 2 * 40 * 200_000, "{layout}, collective {collective}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
