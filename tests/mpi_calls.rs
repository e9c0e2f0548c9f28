//! MPI calls recorded with no annotation: programs that never call sp_* (C, C++, Fortran
//! `use mpi` and `use mpi_f08`) run under mpirun with 4 ranks, with OpenMPI and with MPICH,
//! with the MPI plugin linked (`-lscope_profiler_mpi`) and preloaded (LD_PRELOAD, nothing
//! relinked). Each program writes what every rank did (calls, bytes, empty polls, completed
//! requests, bytes per peer) to `expect.<rank>`; the file's `rank<N>/mpi/` must say exactly that, and with
//! `SCOPE_PROFILER_MPI=calls` every call is also a region (read back with the hdf5 crate and
//! with the PyPI reader). Also: MPI_THREAD_MULTIPLE with two threads, the program's own
//! regions with perf events, MPI_Abort, and the program's own sp_setup after MPI_Init.

mod support;
use support::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Family {
    OpenMpi,
    Mpich,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Link {
    /// `-lscope_profiler_mpi_<family>` before the MPI libraries.
    Linked,
    /// A plain MPI build, the plugin preloaded at run time.
    Preloaded,
}

#[derive(Clone, Copy, Debug)]
enum Lang {
    C,
    Cxx,
    Fortran,
}

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::OpenMpi => "openmpi",
            Family::Mpich => "mpich",
        }
    }

    fn compiler(self, lang: Lang) -> &'static str {
        match (self, lang) {
            (Family::OpenMpi, Lang::C) => "mpicc.openmpi",
            (Family::OpenMpi, Lang::Cxx) => "mpicxx.openmpi",
            (Family::OpenMpi, Lang::Fortran) => "mpif90.openmpi",
            (Family::Mpich, Lang::C) => "mpicc.mpich",
            (Family::Mpich, Lang::Cxx) => "mpicxx.mpich",
            (Family::Mpich, Lang::Fortran) => "mpif90.mpich",
        }
    }

    /// This test run's plugin (next to the fresh libscope_profiler.so it loads).
    fn plugin(self) -> PathBuf {
        let p = link_dir().join(format!("libscope_profiler_mpi_{}.so", self.name()));
        assert!(p.exists(), "{} missing: the MPI plugin was not built for {}", p.display(), self.name());
        p
    }
}

/// Compile `source` (relative to the repo root) with the family's compiler wrapper.
fn build(family: Family, link: Link, lang: Lang, source: &str, name: &str, dir: &Path, extra: &[&str]) -> PathBuf {
    let exe = dir.join(format!("{name}_{}_{link:?}", family.name()));
    let root = repo_root();
    let lib = link_dir();
    let mut cmd = Command::new(family.compiler(lang));
    match lang {
        Lang::C => cmd.args(["-std=gnu99", "-Wall", "-Wextra", "-Werror"]),
        Lang::Cxx => cmd.args(["-std=c++11", "-Wall", "-Wextra", "-Werror"]),
        // Not -Werror: MPICH's `use mpi` checks buffer types, and one buffer is MPI_IN_PLACE.
        Lang::Fortran => cmd.args(["-std=f2008", "-Wall"]).arg(format!("-J{}", dir.display())),
    };
    cmd.args(["-O2", "-g"]).arg(format!("-I{}", root.join("include").display())).arg(root.join(source)).args(extra).arg("-o").arg(&exe);
    if link == Link::Linked {
        // DT_RPATH (not RUNPATH) wins over the LD_LIBRARY_PATH cargo test sets.
        cmd.arg(format!("-L{}", lib.display()))
            .arg("-Wl,--disable-new-dtags")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg(format!("-lscope_profiler_mpi_{}", family.name()));
    }
    cmd.arg("-lpthread");
    let out = run(&mut cmd);
    assert!(out.status.success(), "{cmd:?} failed:\n{}", text(&out.stderr));
    exe
}

/// What the ranks of the last run said they did (their `expect.<rank>` files in `dir`).
fn said(dir: &Path) -> String {
    let mut all = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("expect.") {
            all.push_str(&std::fs::read_to_string(e.path()).unwrap());
        }
    }
    all
}

/// Run `exe` on `np` ranks with the family's launcher, `env` for the ranks.
fn launch(family: Family, link: Link, np: usize, exe: &Path, args: &[&str], env: &[(&str, &str)], dir: &Path) -> Output {
    let mut cmd = match family {
        Family::OpenMpi => {
            let mut c = Command::new("mpirun.openmpi");
            c.args(["--oversubscribe", "-np", &np.to_string()])
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
                .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
                .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
            if link == Link::Preloaded {
                // -x: the ranks only, not mpirun itself.
                c.arg("-x").arg(format!("LD_PRELOAD={}", family.plugin().display()));
            }
            c
        }
        Family::Mpich => {
            let mut c = Command::new("mpiexec.mpich");
            c.args(["-n", &np.to_string()]);
            // cargo test puts the OpenMPI build's directories on LD_LIBRARY_PATH: drop them.
            c.env_remove("LD_LIBRARY_PATH");
            if link == Link::Preloaded {
                c.args(["-genv", "LD_PRELOAD"]).arg(family.plugin());
            }
            c
        }
    };
    cmd.arg(exe).args(args).current_dir(dir).env_remove("SCOPE_PROFILER_MPI");
    for (k, v) in env {
        cmd.env(k, v);
    }
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("expect.") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    run(&mut cmd)
}

/// The run succeeded; what its ranks said they did.
fn ok(out: &Output, what: &str, dir: &Path) -> String {
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{what} failed ({:?})\nstdout:\n{stdout}\nstderr:\n{}", out.status, text(&out.stderr));
    said(dir)
}

/// Per (rank, routine): the program's last EXPECT line (calls, sent, received, empty polls).
type Expected = BTreeMap<(usize, String), [i64; 4]>;

fn expected(stdout: &str) -> Expected {
    let mut m = BTreeMap::new();
    for l in stdout.lines().filter_map(|l| l.strip_prefix("EXPECT\t")) {
        let f: Vec<&str> = l.split('\t').collect();
        assert_eq!(f.len(), 6, "bad EXPECT line {l:?}");
        let n: Vec<i64> = f[2..].iter().map(|x| x.trim().parse().unwrap()).collect();
        m.insert((f[0].parse().unwrap(), f[1].to_string()), [n[0], n[1], n[2], n[3]]);
    }
    m
}

/// Lines `<tag> <rank> fields...` as (rank, fields).
fn tagged(stdout: &str, tag: &str) -> Vec<(usize, Vec<String>)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(tag).and_then(|l| l.strip_prefix('\t')))
        .map(|l| {
            let f: Vec<String> = l.split('\t').map(|s| s.trim().to_string()).collect();
            (f[0].parse().unwrap(), f[1..].to_vec())
        })
        .collect()
}

fn strings(g: &hdf5::Group, name: &str) -> Vec<String> {
    g.dataset(name).unwrap_or_else(|e| panic!("{name}: {e}")).read_raw::<hdf5::types::VarLenUnicode>().unwrap().iter().map(|s| s.as_str().to_string()).collect()
}

fn ints(g: &hdf5::Group, name: &str) -> Vec<i64> {
    g.dataset(name).unwrap_or_else(|e| panic!("{name}: {e}")).read_raw::<i64>().unwrap()
}

fn uints(g: &hdf5::Group, name: &str) -> Vec<i64> {
    g.dataset(name).unwrap_or_else(|e| panic!("{name}: {e}")).read_raw::<u64>().unwrap().into_iter().map(|v| v as i64).collect()
}

/// A rank's `mpi/routines` pooled over threads and communicators: routine -> [calls, sent,
/// received, empty polls].
fn routines(h5: &hdf5::File, rank: usize) -> BTreeMap<String, [i64; 4]> {
    let g = h5.group(&format!("rank{rank}/mpi/routines")).unwrap_or_else(|e| panic!("rank{rank}/mpi/routines: {e}"));
    let names = strings(&g, "routine");
    let cols = [uints(&g, "calls"), uints(&g, "bytes_sent"), uints(&g, "bytes_received"), uints(&g, "polls_empty")];
    let mut m: BTreeMap<String, [i64; 4]> = BTreeMap::new();
    for (i, n) in names.iter().enumerate() {
        let e = m.entry(n.clone()).or_default();
        for k in 0..4 {
            e[k] += cols[k][i];
        }
    }
    m
}

/// Everything the program said it did is in the file, exactly.
fn check_file(file: &Path, stdout: &str, np: usize, mode: &str, family: Family) {
    let h5 = hdf5::File::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert_eq!(int_attr(&h5.group("metadata").unwrap(), "mpi_size"), np as i64);
    let want = expected(stdout);
    assert!(!want.is_empty(), "the program said nothing (no EXPECT lines in expect.<rank>):\n{stdout}");
    for rank in 0..np {
        let g = h5.group(&format!("rank{rank}/mpi")).unwrap_or_else(|e| panic!("rank{rank}/mpi: {e}"));
        assert_eq!(str_attr(&g, "mode"), mode, "rank {rank}");
        assert_eq!(str_attr(&g, "family"), family.name());
        let (app, mpi) = (int_attr(&g, "app_time_ns"), int_attr(&g, "mpi_time_ns"));
        let threads = ints(&h5.group(&format!("rank{rank}/mpi/routines")).unwrap(), "thread").into_iter().max().unwrap_or(0) + 1;
        assert!(mpi > 0 && mpi < app * threads, "rank {rank}: MPI time {mpi} ns of {app} ns on {threads} thread(s)");
        assert!(int_attr(&g, "init_time_ns") > 0, "rank {rank}: set up by MPI_Init");
        let got = routines(&h5, rank);
        for ((r, routine), w) in want.iter().filter(|((r, _), _)| *r == rank) {
            let g = got.get(routine).unwrap_or_else(|| panic!("rank {r}: {routine} not recorded; recorded: {got:?}"));
            assert_eq!(g[..3], w[..3], "rank {r} {routine}: [calls, sent, received] in the file vs. what the program did");
            if w[3] >= 0 {
                assert_eq!(g[3], w[3], "rank {r} {routine}: empty polls");
            }
        }
        // MPI_Init, MPI_Finalize and MPI_Pcontrol are not calls of the profile.
        for not in ["MPI_Init", "MPI_Init_thread", "MPI_Finalize", "MPI_Pcontrol", "MPI_Wtime"] {
            assert!(!got.contains_key(not), "rank {rank}: {not} recorded");
        }
        // Completed requests, by origin.
        let c = h5.group(&format!("rank{rank}/mpi/completions")).unwrap();
        let (routine, origin, count, bytes) = (strings(&c, "routine"), strings(&c, "origin"), uints(&c, "count"), uints(&c, "bytes"));
        for (_, f) in tagged(stdout, "COMPLETE").iter().filter(|(r, _)| *r == rank) {
            let i = (0..routine.len()).find(|&i| routine[i] == f[0] && origin[i] == f[1]).unwrap_or_else(|| panic!("rank {rank}: no completions {f:?} in {routine:?} {origin:?}"));
            assert_eq!([count[i], bytes[i]], [f[2].parse::<i64>().unwrap(), f[3].parse::<i64>().unwrap()], "rank {rank}: {f:?}");
        }
        // Bytes per peer (world ranks).
        let p = h5.group(&format!("rank{rank}/mpi/peers")).unwrap();
        let (peer, sent, recv) = (ints(&p, "world_rank"), uints(&p, "bytes_sent"), uints(&p, "bytes_received"));
        for (_, f) in tagged(stdout, "PEER").iter().filter(|(r, _)| *r == rank) {
            let w: i64 = f[0].parse().unwrap();
            let i = peer.iter().position(|&x| x == w).unwrap_or_else(|| panic!("rank {rank}: peer {w} missing from {peer:?}"));
            assert_eq!([sent[i], recv[i]], [f[1].parse::<i64>().unwrap(), f[2].parse::<i64>().unwrap()], "rank {rank} peer {w}");
        }
        // Each call as a region exactly when calls are kept.
        let regions = read_regions(&h5, rank);
        for (routine, g) in &got {
            match (mode.starts_with("calls"), regions.get(routine)) {
                (true, Some(r)) => assert_eq!(r.starts.len() as i64, g[0], "rank {rank} {routine}: regions vs. calls (empty polls are not kept)"),
                (true, None) => assert_eq!(g[0], 0, "rank {rank}: {routine} has no region"),
                (false, r) => assert!(r.is_none(), "rank {rank}: {routine} is a region in summary mode"),
            }
        }
    }
}

/// A C program in both link modes with one family: calls kept when linked, the default when
/// preloaded; then sptool's report of the file.
fn c_program(family: Family) {
    let dir = scratch(&format!("mpi_calls_c_{}", family.name()));
    for link in [Link::Linked, Link::Preloaded] {
        let exe = build(family, link, Lang::C, "tests/c/mpi_calls.c", "mpi_calls", &dir, &[]);
        let file = dir.join(format!("{link:?}.h5"));
        let f = file.to_str().unwrap();
        let mode = if link == Link::Linked { "calls" } else { "summary" };
        let mut env = vec![("SCOPE_PROFILER_FILE", f), ("SCOPE_PROFILER_VERBOSE", "0")];
        if link == Link::Linked {
            env.push(("SCOPE_PROFILER_MPI", "calls"));
        }
        let out = launch(family, link, 4, &exe, &["all"], &env, &dir);
        let stdout = ok(&out, &format!("{link:?} {family:?}"), &dir);
        check_file(&file, &stdout, 4, mode, family);
        if link == Link::Preloaded {
            sptool_report(&file, &stdout);
        }
        if link == Link::Linked {
            // The PyPI reader sees the MPI calls as regions, with the same counts.
            let py = python_view(&file);
            let want = expected(&stdout);
            for rank in 0..4 {
                for routine in ["MPI_Allreduce", "MPI_Send", "MPI_Waitall"] {
                    assert_eq!(py["regions"][routine][rank.to_string()]["calls"].as_i64().unwrap(), want[&(rank, routine.to_string())][0], "read_h5: rank {rank} {routine}");
                }
            }
        }
    }
}

/// The workspace's sptool (target/<profile>/sptool, built by `cargo build --workspace`).
fn sptool(args: &[&str]) -> Output {
    let exe = lib_dir().join("sptool");
    assert!(exe.exists(), "{} not found: run `cargo build --workspace` first", exe.display());
    run(Command::new(exe).args(args).env_remove("COLUMNS"))
}

/// `sptool mpi` reports what the program did; `sptool inspect` points to it; a damaged table
/// is an error naming it.
fn sptool_report(file: &Path, stdout: &str) {
    let f = file.to_str().unwrap();
    let out = sptool(&["mpi", f, "--top", "50"]);
    let report = text(&out.stdout);
    assert!(out.status.success(), "sptool mpi: {}", text(&out.stderr));
    let want = expected(stdout);
    for routine in ["MPI_Allreduce", "MPI_Send", "MPI_Barrier"] {
        let calls: i64 = (0..4).map(|r| want[&(r, routine.to_string())][0]).sum();
        let line = report.lines().find(|l| l.trim_start().starts_with(&format!("{routine} "))).unwrap_or_else(|| panic!("no {routine} row:\n{report}"));
        assert_eq!(line.split_whitespace().nth(1), Some(calls.to_string().as_str()), "{line}");
    }
    assert!(report.contains("Time per rank") && report.contains("Message sizes") && report.contains("MPI_Waitall   MPI_Irecv"), "{report}");
    let out = sptool(&["mpi", f, "--sites"]);
    assert!(text(&out.stdout).contains("did not keep them"), "{}", text(&out.stdout));
    let out = sptool(&["inspect", f]);
    assert!(text(&out.stdout).contains("`sptool mpi FILE` reports them"), "{}", text(&out.stdout));
    // A table whose columns disagree: one line naming it, exit status 1, no panic.
    let bad = file.with_extension("damaged.h5");
    std::fs::copy(file, &bad).unwrap();
    {
        let h5 = hdf5::File::open_rw(&bad).unwrap();
        let g = h5.group("rank2/mpi/routines").unwrap();
        g.unlink("calls").unwrap();
        g.new_dataset::<u64>().shape(1).create("calls").unwrap().write(&[1u64]).unwrap();
    }
    let out = sptool(&["mpi", bad.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("rank2/mpi/routines/calls has 1 rows"), "{err}");
}

#[test]
fn c_program_openmpi_linked_and_preloaded() {
    c_program(Family::OpenMpi);
}

#[test]
fn c_program_mpich_linked_and_preloaded() {
    c_program(Family::Mpich);
}

/// `use mpi` and `use mpi_f08` programs and a C++ program, linked and preloaded.
fn other_languages(family: Family) {
    let dir = scratch(&format!("mpi_calls_langs_{}", family.name()));
    let programs = [
        (Lang::Fortran, "tests/fortran/mpi_calls.f90", "f_mpi"),
        (Lang::Fortran, "tests/fortran/mpi_calls_f08.f90", "f_mpi_f08"),
        (Lang::Cxx, "tests/c/mpi_calls.cpp", "cxx"),
    ];
    for (lang, source, name) in programs {
        for link in [Link::Linked, Link::Preloaded] {
            let exe = build(family, link, lang, source, name, &dir, &[]);
            let file = dir.join(format!("{name}_{link:?}.h5"));
            let out = launch(family, link, 4, &exe, &[], &[("SCOPE_PROFILER_FILE", file.to_str().unwrap()), ("SCOPE_PROFILER_VERBOSE", "0")], &dir);
            let stdout = ok(&out, &format!("{name} {link:?} {family:?}"), &dir);
            assert!(!stdout.contains("FAIL"), "{name}: {stdout}");
            check_file(&file, &stdout, 4, "summary", family);
            // The language is read from the program, also when it is set up at MPI_Init
            // through the C binding (a C++ program).
            let want = match lang {
                Lang::Fortran => "Fortran",
                Lang::Cxx => "C++",
                Lang::C => "C",
            };
            let h5 = hdf5::File::open(&file).unwrap();
            assert_eq!(str_attr(&h5.group("metadata").unwrap(), "language"), want, "{name} {link:?} {family:?}");
        }
    }
}

#[test]
fn fortran_and_cxx_openmpi_linked_and_preloaded() {
    other_languages(Family::OpenMpi);
}

#[test]
fn fortran_and_cxx_mpich_linked_and_preloaded() {
    other_languages(Family::Mpich);
}

/// MPI_THREAD_MULTIPLE: two threads calling MPI at once, each recorded on its own thread.
#[test]
fn thread_multiple_records_each_thread() {
    for (family, link) in [(Family::OpenMpi, Link::Preloaded), (Family::Mpich, Link::Linked)] {
        let dir = scratch(&format!("mpi_calls_threads_{}", family.name()));
        let exe = build(family, link, Lang::C, "tests/c/mpi_calls.c", "mpi_calls", &dir, &[]);
        let file = dir.join("threads.h5");
        let env = [("SCOPE_PROFILER_FILE", file.to_str().unwrap()), ("SCOPE_PROFILER_MPI", "calls")];
        let out = launch(family, link, 4, &exe, &["threads"], &env, &dir);
        let stdout = ok(&out, &format!("threads {family:?}"), &dir);
        // Rank 0's summary says how much of the time went to MPI.
        let summary = text(&out.stdout);
        assert!(summary.contains("MPI call(s) on 4 rank(s); `sptool mpi <file>` reports them"), "{summary}");
        check_file(&file, &stdout, 4, "calls", family);
        let h5 = hdf5::File::open(&file).unwrap();
        for rank in 0..4 {
            let g = h5.group(&format!("rank{rank}/mpi/routines")).unwrap();
            let (names, threads, calls) = (strings(&g, "routine"), ints(&g, "thread"), uints(&g, "calls"));
            let mut per_thread: Vec<(i64, i64)> = (0..names.len()).filter(|&i| names[i] == "MPI_Allreduce").map(|i| (threads[i], calls[i])).collect();
            per_thread.sort_by_key(|x| x.1);
            assert_eq!(per_thread.iter().map(|x| x.1).collect::<Vec<_>>(), [30, 50], "rank {rank}: allreduces per thread");
            assert_ne!(per_thread[0].0, per_thread[1].0, "rank {rank}: two threads");
            // As regions, on the same two threads.
            let r = &read_regions(&h5, rank)["MPI_Allreduce"];
            let mut ids = r.thread_ids.clone();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), 2, "rank {rank}");
        }
    }
}

/// The program's own regions (no sp_setup: set up at MPI_Init), with perf events: MPI calls
/// nest in them as regions and take their exclusive time; the perf events count the program's
/// regions, not the MPI calls; call sites resolve to the program's source lines.
#[test]
fn together_with_user_regions_perf_events_and_call_sites() {
    let family = Family::OpenMpi;
    let dir = scratch("mpi_calls_regions");
    let lib = link_dir();
    let extra = ["-DWITH_REGIONS".to_string(), format!("-L{}", lib.display()), "-lscope_profiler".to_string()];
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let exe = build(family, Link::Linked, Lang::C, "tests/c/mpi_calls.c", "mpi_regions", &dir, &extra);
    let file = dir.join("regions.h5");
    let env = [
        ("SCOPE_PROFILER_FILE", file.to_str().unwrap()),
        ("SCOPE_PROFILER_VERBOSE", "0"),
        ("SCOPE_PROFILER_MPI", "calls,sites"),
        ("SCOPE_PROFILER_PERF_EVENTS", "task-clock"),
    ];
    let out = launch(family, Link::Linked, 4, &exe, &["all"], &env, &dir);
    let stdout = ok(&out, "regions", &dir);
    check_file(&file, &stdout, 4, "calls,sites", family);
    let h5 = hdf5::File::open(&file).unwrap();
    for rank in 0..4 {
        let regions = read_regions(&h5, rank);
        let (ex, red) = (&regions["exchange"], &regions["reduce"]);
        for (outer, inner) in [(ex, "MPI_Sendrecv"), (ex, "MPI_Waitall"), (ex, "MPI_Isend"), (red, "MPI_Alltoall"), (red, "MPI_Gather"), (red, "MPI_Comm_split")] {
            for (s, e) in regions[inner].starts.iter().zip(&regions[inner].ends) {
                assert!(outer.starts.iter().zip(&outer.ends).any(|(os, oe)| os <= s && e <= oe), "rank {rank}: {inner} outside {}", outer.tag);
            }
        }
        let perf: Vec<String> = h5.group(&format!("rank{rank}/perf_events")).unwrap().member_names().unwrap();
        assert!(perf.contains(&"exchange".to_string()) && perf.contains(&"reduce".to_string()), "rank {rank}: {perf:?}");
        assert!(perf.iter().all(|p| !p.starts_with("MPI_")), "rank {rank}: MPI calls are not counted: {perf:?}");
        let g = h5.group(&format!("rank{rank}/mpi/sites")).unwrap();
        let (routine, file, line) = (strings(&g, "routine"), strings(&g, "file"), ints(&g, "line"));
        let i = routine.iter().position(|r| r == "MPI_Sendrecv").expect("a site of MPI_Sendrecv");
        assert!(file[i].ends_with("mpi_calls.c"), "{}", file[i]);
        let src = std::fs::read_to_string(repo_root().join("tests/c/mpi_calls.c")).unwrap();
        let at = src.lines().nth(line[i] as usize - 1).unwrap_or("");
        assert!(at.contains("MPI_Sendrecv("), "line {} is {at:?}", line[i]);
    }
}

/// MPI_Abort: the aborting rank writes its own file before the job is killed.
#[test]
fn abort_writes_the_aborting_ranks_file() {
    let family = Family::OpenMpi;
    let dir = scratch("mpi_calls_abort");
    let exe = build(family, Link::Linked, Lang::C, "tests/c/mpi_calls.c", "mpi_calls", &dir, &[]);
    let file = dir.join("abort.h5");
    let out = launch(family, Link::Linked, 4, &exe, &["abort"], &[("SCOPE_PROFILER_FILE", file.to_str().unwrap()), ("SCOPE_PROFILER_VERBOSE", "0")], &dir);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "the job must fail: {stderr}");
    assert!(stderr.contains("MPI_Abort: writing this rank's profile"), "{stderr}");
    let rank_file = dir.join("abort.rank1.h5");
    assert!(rank_file.exists(), "no {}\nstderr:\n{stderr}", rank_file.display());
    let h5 = hdf5::File::open(&rank_file).unwrap();
    let got = routines(&h5, 1);
    let want = expected(&said(&dir));
    for routine in ["MPI_Send", "MPI_Allreduce", "MPI_Alltoall"] {
        assert_eq!(got[routine][..3], want[&(1, routine.to_string())][..3], "{routine}");
    }
    assert_eq!(got["MPI_Barrier"][0], 4, "3 + the one before the abort");
}

/// One run with everything together: every rank under its own `likwid-perfctr -m` (real
/// LIKWID, fake MSRs: see tests/likwid/fake_msr.sh), a program linked with the MPI plugin
/// whose own sp_setup, after MPI_Init, asks for LIKWID. The implicit setup at MPI_Init came first; the program's
/// sp_setup adopts the run (returns SP_OK, LIKWID starts), so the file has the LIKWID results
/// of the program's regions and its MPI calls.
#[test]
fn likwid_perfctr_per_rank_with_the_programs_own_setup_after_mpi_init() {
    let dir = scratch("mpi_calls_likwid");
    // An installed tree: the library, its LIKWID helper and the MPI plugin side by side.
    let prefix = dir.join("prefix/lib");
    std::fs::create_dir_all(&prefix).unwrap();
    let helper = PathBuf::from(env!("CARGO_BIN_EXE_scope_profiler_likwid_helper"));
    for (from, to) in [
        (link_dir().join("libscope_profiler.so"), "libscope_profiler.so"),
        (helper, "scope_profiler_likwid_helper"),
        (Family::OpenMpi.plugin(), "libscope_profiler_mpi_openmpi.so"),
    ] {
        std::fs::copy(&from, prefix.join(to)).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    }
    let exe = dir.join("likwid_mpi");
    let out = run(Command::new("mpicc.openmpi")
        .args(["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{}", repo_root().join("include").display()))
        .arg(repo_root().join("tests/c/likwid_mpi.c"))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", prefix.display()))
        .arg(format!("-Wl,-rpath,{}", prefix.display()))
        .args(["-lscope_profiler_mpi_openmpi", "-lscope_profiler"]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let h5 = dir.join("out.h5");
    let mut c = Command::new(repo_root().join("tests/likwid/fake_msr.sh"));
    c.args(["mpirun.openmpi", "-np", "2", "likwid-perfctr", "-M", "0", "-C", "0", "-g", "FLOPS_DP", "-m"])
        .arg(&exe)
        .current_dir(&dir)
        .env("SCOPE_PROFILER_FILE", &h5)
        .env("SCOPE_PROFILER_VERBOSE", "0")
        .env_remove("SCOPE_PROFILER_MPI")
        .env_remove("SCOPE_PROFILER_LIKWID_HELPER")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    let out = run(&mut c);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{c:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    for rank in 0..2 {
        assert!(stdout.contains(&format!("likwid_mpi rank {rank} done rc=0")), "{stdout}\n{stderr}");
    }
    assert!(!stderr.contains("cannot change") && !stderr.contains("were taken, but not"), "{stderr}");
    let f = hdf5::File::with_options().with_fapl(|p| p.file_locking(false)).open(&h5).unwrap();
    for rank in 0..2 {
        let names = f.group(&format!("rank{rank}/likwid/regions")).unwrap_or_else(|e| panic!("rank{rank}/likwid: {e}\n{stderr}")).member_names().unwrap();
        assert_eq!(names.len(), 2, "rank {rank}: the program's two regions have LIKWID results: {names:?}");
        let calls = routines(&f, rank);
        assert_eq!(calls["MPI_Allreduce"], [2, 16, 16, 0], "rank {rank}");
        let regions = read_regions(&f, rank);
        assert_eq!(regions["halo exchange"].starts.len(), 2);
        assert!(!regions.contains_key("MPI_Allreduce"), "summary mode by default");
    }
}

/// The schema-3 layouts carry `rank<N>/mpi/` too, and with `calls` the MPI calls are rows of
/// their tables, as the PyPI reader sees them; `scope_profiler_merge` keeps the group.
#[test]
fn columnar_and_aggregate_layouts_and_the_merge_keep_the_mpi_calls() {
    let family = Family::OpenMpi;
    let dir = scratch("mpi_calls_layouts");
    let exe = build(family, Link::Preloaded, Lang::C, "tests/c/mpi_calls.c", "mpi_calls", &dir, &[]);
    for layout in ["columnar", "aggregate"] {
        let file = dir.join(format!("{layout}.h5"));
        let env = [("SCOPE_PROFILER_FILE", file.to_str().unwrap()), ("SCOPE_PROFILER_VERBOSE", "0"), ("SCOPE_PROFILER_MPI", "calls"), ("SCOPE_PROFILER_LAYOUT", layout)];
        let out = launch(family, Link::Preloaded, 4, &exe, &["all"], &env, &dir);
        let said = ok(&out, layout, &dir);
        let want = expected(&said);
        let h5 = hdf5::File::open(&file).unwrap();
        let py = python_view(&file);
        assert_eq!(py["storage_layout"], layout);
        for rank in 0..4 {
            let got = routines(&h5, rank);
            for ((r, routine), w) in want.iter().filter(|((r, _), _)| *r == rank) {
                assert_eq!(got[routine][..3], w[..3], "{layout}: rank {r} {routine}");
                // Every kept call (empty polls are not) is a call of the region in the tables.
                assert_eq!(py["regions"][routine.as_str()][rank.to_string()]["calls"].as_i64(), Some(w[0]), "{layout}: read_h5, rank {r} {routine}");
            }
        }
    }
    // The aborting rank's own file, merged into a profile, keeps its MPI calls.
    let exe = build(family, Link::Linked, Lang::C, "tests/c/mpi_calls.c", "mpi_calls", &dir, &[]);
    let file = dir.join("abort.h5");
    let out = launch(family, Link::Linked, 4, &exe, &["abort"], &[("SCOPE_PROFILER_FILE", file.to_str().unwrap()), ("SCOPE_PROFILER_VERBOSE", "0")], &dir);
    assert!(!out.status.success());
    let merged = dir.join("merged.h5");
    let m = run(Command::new(lib_dir().join("scope_profiler_merge")).arg("-o").arg(&merged).arg(dir.join("abort.rank1.h5")));
    assert!(m.status.success(), "{}", text(&m.stderr));
    let before = routines(&hdf5::File::open(dir.join("abort.rank1.h5")).unwrap(), 1);
    assert_eq!(routines(&hdf5::File::open(&merged).unwrap(), 1), before);
    assert!(before["MPI_Allreduce"][0] > 0);
}

/// What real programs do that is easy to get wrong, on 2 ranks (tests/c/mpi_hostile.c,
/// tests/fortran/mpi_shared_requests.f90): requests that share one handle value (MPI gives one
/// to every request that completed at once) completed by every completion routine, copied
/// through a temporary, freed; persistent and freed active requests; MPI_IN_PLACE, MPI_BOTTOM,
/// MPI_STATUS(ES)_IGNORE, MPI_PROC_NULL; an inter-communicator; 2,000 communicators alive at
/// once and handles reused; MPI_THREAD_MULTIPLE threads completing each other's requests.
/// Every count, byte, completion origin and peer exact, no request untracked or "unknown".
fn hostile(family: Family) {
    let dir = scratch(&format!("mpi_calls_hostile_{}", family.name()));
    let runs: [(Lang, &str, &str, Link, &[&str]); 3] = [
        (Lang::C, "tests/c/mpi_hostile.c", "hostile", Link::Preloaded, &["all"]),
        (Lang::C, "tests/c/mpi_hostile.c", "hostile", Link::Linked, &["threads"]),
        (Lang::Fortran, "tests/fortran/mpi_shared_requests.f90", "f_shared", Link::Preloaded, &[]),
    ];
    for (i, (lang, source, name, link, args)) in runs.into_iter().enumerate() {
        let exe = build(family, link, lang, source, name, &dir, &[]);
        let file = dir.join(format!("{name}_{link:?}.h5"));
        let f = file.to_str().unwrap();
        // The first run with its call sites, and the summary at finalize.
        let mode = if i == 0 { "summary,sites" } else { "summary" };
        // The last run at verbosity 2: each rank says the profiler's time inside MPI_Init and MPI_Finalize.
        let verbose = ["1", "0", "2"][i];
        let env = [("SCOPE_PROFILER_FILE", f), ("SCOPE_PROFILER_VERBOSE", verbose), ("SCOPE_PROFILER_MPI", mode)];
        let out = launch(family, link, 2, &exe, args, &env, &dir);
        let what = format!("{name} {args:?} {link:?} {family:?}");
        let stdout = ok(&out, &what, &dir);
        assert!(!text(&out.stderr).contains("FAIL"), "{what}: {}", text(&out.stderr));
        check_file(&file, &stdout, 2, mode, family);
        if verbose == "2" {
            let err = text(&out.stderr);
            for rank in 0..2 {
                let line = err.lines().find(|l| l.contains(&format!("rank {rank}: the profiler's time inside MPI_Init "))).unwrap_or_else(|| panic!("{what}: rank {rank}:\n{err}"));
                assert!(line.contains("inside MPI_Finalize ") && line.contains(" s in all"), "{line}");
            }
        }
        if i == 0 {
            // Only MPI calls recorded: the summary and `sptool tree` say so, no empty table.
            let summary = text(&out.stdout);
            assert!(summary.contains(&format!("no regions recorded; the file holds the program's MPI calls: ")) && summary.contains(&format!("`sptool mpi {f}` shows them")), "{what}: {summary}");
            assert!(!summary.contains("region ") && !summary.contains("calls     mean"), "{what}: an empty table:\n{summary}");
            let tree = sptool(&["tree", f]);
            let t = text(&tree.stdout);
            assert!(tree.status.success() && t.contains("no regions recorded; the file holds the program's MPI calls") && t.contains(&format!("`sptool mpi {f}` shows them")), "sptool tree: {t}{}", text(&tree.stderr));
            // The call sites' bytes, sent and received apart.
            let sites = text(&sptool(&["mpi", f, "--sites", "--top", "100"]).stdout);
            let header = sites.lines().find(|l| l.contains("function") && l.contains("calls")).unwrap_or_else(|| panic!("{sites}"));
            assert!(header.contains("bytes sent") && header.contains("bytes received"), "{header}");
            let irecv = sites.lines().find(|l| l.contains("MPI_Irecv") && l.contains("shared_waitall")).unwrap_or_else(|| panic!("{sites}"));
            let tail: Vec<&str> = irecv.split_whitespace().rev().take(4).collect();
            assert_eq!(tail, ["KiB", "7.812", "B", "0"], "one Irecv site, both ranks: 0 B sent, 2 x 1000 x 4 B received: {irecv}");
        }
        let h5 = hdf5::File::open(&file).unwrap();
        for rank in 0..2 {
            let g = h5.group(&format!("rank{rank}/mpi")).unwrap();
            assert_eq!(int_attr(&g, "untracked_requests"), 0, "{what}: rank {rank}");
            let origins = strings(&h5.group(&format!("rank{rank}/mpi/completions")).unwrap(), "origin");
            assert!(!origins.iter().any(|o| o == "unknown"), "{what}: rank {rank}: completions of unknown origin: {origins:?}");
        }
    }
}

#[test]
fn hostile_usage_openmpi_every_count_exact() {
    hostile(Family::OpenMpi);
}

#[test]
fn hostile_usage_mpich_every_count_exact() {
    hostile(Family::Mpich);
}

/// The profiler's own MPI traffic (the plugin's communicator duplicates, the summary's
/// reductions and prefix sums, the clock offsets, the metadata gather, the collective MPI-IO
/// write) is never counted as the program's: with every call recorded, the collective write
/// and the summary at finalize, each rank's file has exactly the routines the program called,
/// with exactly its counts and bytes, in both families and both link modes.
#[test]
fn the_profilers_own_mpi_traffic_is_never_the_programs() {
    for (family, link) in [(Family::OpenMpi, Link::Preloaded), (Family::Mpich, Link::Linked)] {
        let dir = scratch(&format!("mpi_calls_own_traffic_{}", family.name()));
        let exe = build(family, link, Lang::C, "tests/c/mpi_calls.c", "mpi_calls", &dir, &[]);
        let file = dir.join("own.h5");
        let env = [
            ("SCOPE_PROFILER_FILE", file.to_str().unwrap()),
            ("SCOPE_PROFILER_VERBOSE", "2"),
            ("SCOPE_PROFILER_MPI", "calls"),
            ("SCOPE_PROFILER_LAYOUT", "columnar"),
            ("SCOPE_PROFILER_SUMMARY", "tree"),
            // MPI-IO, as on several nodes (one node's ranks write with pwrite).
            ("SCOPE_PROFILER_COLLECTIVE_IO", "mpiio"),
        ];
        let out = launch(family, link, 4, &exe, &["all"], &env, &dir);
        let said = ok(&out, &format!("{family:?} {link:?}"), &dir);
        let stderr = text(&out.stderr);
        // Each rank says what its finalize moved over MPI: the profiler's traffic happened.
        let traffic = stderr.lines().filter(|l| l.contains("finalize over MPI") && l.contains(" collective")).count();
        assert_eq!(traffic, 4, "{family:?}: one line per rank on the profiler's own MPI traffic:\n{stderr}");
        let want = expected(&said);
        assert!(!want.is_empty(), "the program said nothing:\n{said}");
        let h5 = hdf5::File::open(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for rank in 0..4 {
            assert_eq!(str_attr(&h5.group(&format!("rank{rank}/mpi")).unwrap(), "family"), family.name());
            let all = routines(&h5, rank);
            for ((_, routine), w) in want.iter().filter(|((r, _), _)| *r == rank) {
                let g = all.get(routine).unwrap_or_else(|| panic!("{family:?} rank {rank}: {routine} not recorded; recorded: {all:?}"));
                assert_eq!(g[..3], w[..3], "{family:?} {link:?} rank {rank} {routine}: [calls, sent, received] in the file vs. what the program did");
            }
            let got: Vec<String> = all.into_iter().filter(|(_, c)| c[0] > 0).map(|(r, _)| r).collect();
            let did: Vec<String> = want.keys().filter(|(r, _)| *r == rank).map(|(_, routine)| routine.clone()).collect();
            assert_eq!(got, did, "{family:?} {link:?} rank {rank}: routines in the file vs. what the program called");
        }
    }
}
