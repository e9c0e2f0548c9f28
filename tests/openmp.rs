//! OpenMP constructs recorded through the OpenMP tools interface (OMPT) with no annotation:
//! C programs built with clang -fopenmp (LLVM's libomp), C and Fortran programs built with
//! gcc/gfortran -fopenmp and run on libomp (preloaded over GCC's libgomp), the library found
//! through OMP_TOOL_LIBRARIES alone or linked; exact counts per thread, nesting under the
//! program's own regions, every layout, the tool off, and a libgomp run.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::*;

/// The library the programs are given (this test run's).
fn lib() -> PathBuf {
    link_dir().join("libscope_profiler.so")
}

/// LLVM's libomp, as clang knows it.
fn libomp() -> PathBuf {
    let out = run(Command::new("clang").arg("-print-file-name=libomp.so.5"));
    let p = PathBuf::from(text(&out.stdout).trim());
    if p.is_absolute() && p.exists() { p } else { PathBuf::from("/usr/lib/llvm-14/lib/libomp.so.5") }
}

/// The one region named `<label> @ <file>:<line>` with the line at most one off the line of
/// `src` holding `marker` (compilers attribute a construct's runtime call to its line, or, with
/// optimization, to the statement next to it).
fn find(regions: &BTreeMap<String, ReadRegion>, label: &str, src: &str, marker: &str) -> String {
    let file = src.rsplit('/').next().unwrap();
    let at = line_of(src, marker);
    let found: Vec<&String> = regions
        .keys()
        .filter(|k| k.strip_prefix(&format!("{label} @ {file}:")).and_then(|l| l.parse::<usize>().ok()).is_some_and(|l| l + 1 >= at && l <= at + 1))
        .collect();
    assert_eq!(found.len(), 1, "'{label}' at {file}:{at} (the line of {marker}): {found:?} in {:?}", regions.keys().collect::<Vec<_>>());
    found[0].clone()
}

/// The line of `src` (repo-relative) holding `marker`.
fn line_of(src: &str, marker: &str) -> usize {
    let text = std::fs::read_to_string(repo_root().join(src)).unwrap();
    text.lines().position(|l| l.contains(marker)).unwrap_or_else(|| panic!("{marker} not in {src}")) + 1
}

/// Build `src` with `compiler` and -fopenmp; linked with the library only when `linked`.
fn build(compiler: &str, name: &str, src: &str, dir: &Path, linked: bool, extra: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    let mut cmd = Command::new(compiler);
    cmd.args(["-fopenmp", "-O2", "-g", "-Wall"]).arg(format!("-I{}", repo_root().join("include").display())).arg(repo_root().join(src)).arg("-o").arg(&exe).args(extra);
    if linked {
        let l = link_dir();
        cmd.arg(format!("-L{}", l.display())).arg("-Wl,--disable-new-dtags").arg(format!("-Wl,-rpath,{}", l.display())).arg("-lscope_profiler");
    }
    let out = run(&mut cmd);
    assert!(out.status.success(), "building {name} failed:\n{}", text(&out.stderr));
    exe
}

fn ok(out: &Output) {
    assert!(out.status.success(), "the program failed:\n{}{}", text(&out.stdout), text(&out.stderr));
}

/// Calls per thread id of a region (missing: empty).
fn per_thread(regions: &BTreeMap<String, ReadRegion>, name: &str) -> Vec<usize> {
    let Some(r) = regions.get(name) else { return Vec::new() };
    let n = r.thread_ids.iter().copied().max().map_or(0, |m| m as usize + 1);
    (0..n).map(|t| r.thread_ids.iter().filter(|&&x| x as usize == t).count()).collect()
}

fn names(regions: &BTreeMap<String, ReadRegion>) -> Vec<&String> {
    regions.keys().collect()
}

/// Every call of `inner` on a thread (`on`: that thread only) lies within a call of `outer`
/// on the same thread.
fn nested_on(regions: &BTreeMap<String, ReadRegion>, inner: &str, outer: &str, on: Option<i64>) {
    let (i, o) = (&regions[inner], &regions[outer]);
    for k in 0..i.starts.len() {
        let t = i.thread_ids[k];
        if on.is_some_and(|x| x != t) {
            continue;
        }
        let inside = (0..o.starts.len()).any(|j| o.thread_ids[j] == t && o.starts[j] <= i.starts[k] && i.ends[k] <= o.ends[j]);
        assert!(inside, "call {k} of '{inner}' (thread {t}) is not inside a call of '{outer}'");
    }
}

fn nested(regions: &BTreeMap<String, ReadRegion>, inner: &str, outer: &str) {
    nested_on(regions, inner, outer, None)
}

fn no_open_or_dropped(regions: &BTreeMap<String, ReadRegion>) {
    for (name, r) in regions {
        assert_eq!((r.open_calls, r.dropped_calls), (0, 0), "region '{name}'");
    }
}

const C_SRC: &str = "tests/c/omp_constructs.c";

/// The constructs of tests/c/omp_constructs.c every runtime reports alike, `n` runs of the
/// parallel region on 2 threads.
fn check_common_c(regions: &BTreeMap<String, ReadRegion>, n: usize) {
    let both = vec![n, n];
    let par = find(regions, "omp parallel", C_SRC, "/* PARALLEL */");
    assert_eq!(per_thread(regions, &par), both, "{par}");
    for b in ["/* BARRIER_A */", "/* BARRIER_B */"] {
        let name = find(regions, "omp barrier", C_SRC, b);
        assert_eq!(per_thread(regions, &name), both, "{name}");
        // Its waiting time, inside it.
        let wait = name.replace("omp barrier @", "omp wait barrier @");
        assert_eq!(per_thread(regions, &wait), both, "{wait}");
        nested(regions, &wait, &name);
        nested(regions, &name, &par);
    }
    // The implicit barrier at the end of the parallel region is named after the region (the
    // workers' has no code pointer of its own).
    let end = par.replace("omp parallel @", "omp barrier (implicit) @");
    assert_eq!(per_thread(regions, &end), both, "{end}");
    nested(regions, &end, &par);
    let lp = find(regions, "omp for", C_SRC, "/* LOOP */");
    assert_eq!(per_thread(regions, &lp), both, "{lp}");
    nested(regions, &lp, &par);
    let loop_end = find(regions, "omp barrier (implicit)", C_SRC, "/* LOOP */");
    assert_eq!(per_thread(regions, &loop_end), both, "{loop_end}");
    let single = find(regions, "omp single", C_SRC, "/* SINGLE */");
    assert_eq!(regions[&single].starts.len(), n, "{single}");
    // Names begin with the construct; every region is an OpenMP one (the program has none).
    assert!(regions.keys().all(|k| k.starts_with("omp ")), "{:?}", names(regions));
    no_open_or_dropped(regions);
}

/// clang -fopenmp, the library only named by OMP_TOOL_LIBRARIES (not linked, no sp_* call):
/// the profile is written at the end of the run, in every layout.
#[test]
fn clang_program_through_omp_tool_libraries() {
    need_cpus(2, "2 OpenMP threads");
    let dir = scratch("openmp_clang_tool_libraries");
    let exe = build("clang", "omp_constructs_clang", C_SRC, &dir, false, &[]);
    let file = dir.join("omp.h5");
    let out = run(Command::new(&exe).arg("5").env("OMP_TOOL_LIBRARIES", lib()).env("OMP_TOOL_VERBOSE_INIT", "stderr").env("SCOPE_PROFILER_FILE", &file));
    ok(&out);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("Tool was started and is using the OMPT interface"), "{stderr}");
    assert!(!stderr.contains("sp_finalize was not called"), "an implicit run ends at exit without a warning: {stderr}");
    let h5 = hdf5::File::open(&file).unwrap();
    let regions = read_regions(&h5, 0);
    check_common_c(&regions, 5);
    assert!(!regions.keys().any(|k| k.starts_with("omp task")), "tasks only on request: {:?}", names(&regions));
    // clang's runtime calls report the implicit barrier of the single construct too.
    let single_end = find(&regions, "omp barrier (implicit)", C_SRC, "/* SINGLE */");
    assert_eq!(per_thread(&regions, &single_end), vec![5, 5]);
    // The source location of a construct is its file and line.
    let par = find(&regions, "omp parallel", C_SRC, "/* PARALLEL */");
    let g = h5.group(&format!("rank0/regions/{par}")).unwrap();
    assert!(str_attr(&g, "source_file").ends_with("tests/c/omp_constructs.c"));
    assert_eq!(format!("omp parallel @ omp_constructs.c:{}", int_attr(&g, "source_lineno")), par);
    let barrier_a = find(&regions, "omp barrier", C_SRC, "/* BARRIER_A */");
    let single = find(&regions, "omp single", C_SRC, "/* SINGLE */");
    // Both threads recorded; the metadata says the program is C.
    assert_eq!(int_list_attr(&h5.group("rank0").unwrap(), "thread_os_ids").len(), 2);

    // The other layouts, read back by the Python package.
    for layout in ["columnar", "aggregate"] {
        let f = dir.join(format!("omp_{layout}.h5"));
        let out = run(Command::new(&exe).arg("3").env("OMP_TOOL_LIBRARIES", lib()).env("SCOPE_PROFILER_FILE", &f).env("SCOPE_PROFILER_LAYOUT", layout).env("SCOPE_PROFILER_VERBOSE", "0"));
        ok(&out);
        let view = python_view(&f);
        assert_eq!(view["storage_layout"], layout);
        let calls = |name: &str| view["regions"][name]["0"]["calls"].as_u64().unwrap_or_else(|| panic!("{name} not in {layout}: {}", view["regions"]));
        assert_eq!(calls(&par), 6, "{layout}");
        assert_eq!(calls(&barrier_a), 6, "{layout}");
        assert_eq!(calls(&single), 3, "{layout}");
    }
}

/// gcc -fopenmp, run on libomp (preloaded) with the library named by OMP_TOOL_LIBRARIES.
/// GCC compiles the static-schedule parts without runtime calls; the rest is as with clang.
#[test]
fn gcc_program_on_libomp() {
    need_cpus(2, "2 OpenMP threads");
    let dir = scratch("openmp_gcc_libomp");
    let exe = build("gcc", "omp_constructs_gcc", C_SRC, &dir, false, &[]);
    let file = dir.join("omp.h5");
    let out = run(Command::new(&exe).arg("4").env("LD_PRELOAD", libomp()).env("OMP_TOOL_LIBRARIES", lib()).env("SCOPE_PROFILER_FILE", &file));
    ok(&out);
    let regions = read_regions(&hdf5::File::open(&file).unwrap(), 0);
    check_common_c(&regions, 4);
}

/// gfortran -fopenmp, run on libomp: `omp do`, the Fortran source's lines.
#[test]
fn gfortran_program_on_libomp() {
    need_cpus(2, "2 OpenMP threads");
    let src = "tests/fortran/omp_constructs.f90";
    let dir = scratch("openmp_gfortran_libomp");
    let exe = build("gfortran", "omp_constructs_f", src, &dir, false, &[]);
    let file = dir.join("omp.h5");
    let out = run(Command::new(&exe).arg("6").env("LD_PRELOAD", libomp()).env("OMP_TOOL_LIBRARIES", lib()).env("SCOPE_PROFILER_FILE", &file));
    ok(&out);
    let h5 = hdf5::File::open(&file).unwrap();
    let regions = read_regions(&h5, 0);
    let both = vec![6, 6];
    let par = find(&regions, "omp parallel", src, "! PARALLEL");
    assert_eq!(per_thread(&regions, &par), both, "{par}");
    let barrier = find(&regions, "omp barrier", src, "! BARRIER");
    assert_eq!(per_thread(&regions, &barrier), both, "{barrier}");
    nested(&regions, &barrier, &par);
    let end = par.replace("omp parallel @", "omp barrier (implicit) @");
    assert_eq!(per_thread(&regions, &end), both, "{end}");
    // The loop is `omp do` in Fortran.
    let lp = find(&regions, "omp do", src, "! LOOP");
    assert_eq!(per_thread(&regions, &lp), both, "{lp}");
    assert!(!regions.keys().any(|k| k.starts_with("omp for")), "{:?}", names(&regions));
    no_open_or_dropped(&regions);
    assert_eq!(str_attr(&h5.group("metadata").unwrap(), "language"), "Fortran");
}

/// A program linked with the library that sets profiling up itself: the OpenMP regions nest
/// in its own, on the same thread. OMP_TOOL_LIBRARIES naming another copy of the library
/// changes nothing (the tool is registered once).
#[test]
fn constructs_nest_in_the_programs_regions() {
    need_cpus(2, "2 OpenMP threads");
    let dir = scratch("openmp_nesting");
    let exe = build("clang", "omp_constructs_regions", C_SRC, &dir, true, &["-DWITH_REGIONS"]);
    let copy = dir.join("copy_of_libscope_profiler.so");
    std::fs::copy(lib(), &copy).unwrap();
    let file = dir.join("omp.h5");
    let out = run(Command::new(&exe).arg("5").env("OMP_TOOL_LIBRARIES", &copy).env("OMP_TOOL_VERBOSE_INIT", "stderr").env("SCOPE_PROFILER_FILE", &file));
    ok(&out);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("Tool was started") && !stderr.contains(&format!("Opening {}", copy.display())), "the copy was loaded:\n{stderr}");
    let regions = read_regions(&hdf5::File::open(&file).unwrap(), 0);
    assert_eq!(per_thread(&regions, "outer"), vec![1]);
    assert_eq!(per_thread(&regions, "inner"), vec![5, 5]);
    let par = find(&regions, "omp parallel", C_SRC, "/* PARALLEL */");
    assert_eq!(per_thread(&regions, &par), vec![5, 5]);
    // The program's region on the primary thread holds the parallel regions; its regions inside
    // the parallel region lie in each thread's part, and hold the barriers.
    nested_on(&regions, &par, "outer", Some(0));
    nested(&regions, "inner", &par);
    let barrier = find(&regions, "omp barrier", C_SRC, "/* BARRIER_A */");
    nested(&regions, &barrier, "inner");
    assert_eq!(per_thread(&regions, &barrier), vec![5, 5]);
    no_open_or_dropped(&regions);
}

/// SCOPE_PROFILER_OPENMP=0: the tool tells the runtime it is not there (nothing is called
/// at all); the program's regions are as always. SCOPE_PROFILER_DISABLE=1 likewise, and no file.
#[test]
fn the_tool_off() {
    need_cpus(2, "2 OpenMP threads");
    let dir = scratch("openmp_off");
    let exe = build("clang", "omp_constructs_regions", C_SRC, &dir, true, &["-DWITH_REGIONS"]);
    let file = dir.join("omp.h5");
    let out = run(Command::new(&exe).arg("3").env("SCOPE_PROFILER_OPENMP", "0").env("OMP_TOOL_VERBOSE_INIT", "stderr").env("SCOPE_PROFILER_FILE", &file));
    ok(&out);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("Found but not using the OMPT interface") && !stderr.contains("Tool was started"), "{stderr}");
    let regions = read_regions(&hdf5::File::open(&file).unwrap(), 0);
    assert_eq!(names(&regions), vec!["inner", "outer"]);
    assert_eq!(per_thread(&regions, "inner"), vec![3, 3]);

    let plain = build("clang", "omp_constructs_clang", C_SRC, &dir, false, &[]);
    let none = dir.join("none.h5");
    let out = run(Command::new(&plain).arg("2").env("OMP_TOOL_LIBRARIES", lib()).env("SCOPE_PROFILER_DISABLE", "1").env("OMP_TOOL_VERBOSE_INIT", "stderr").env("SCOPE_PROFILER_FILE", &none));
    ok(&out);
    assert!(text(&out.stderr).contains("Found but not using the OMPT interface"), "{}", text(&out.stderr));
    assert!(!none.exists());
}

/// GCC's libgomp has no tools interface: asked for explicitly, OpenMP regions are reported
/// missing once, with the way to run on libomp; the program's own regions are unchanged.
/// Not asked for, nothing is said.
#[test]
fn libgomp_run_warns_when_asked() {
    need_cpus(2, "2 OpenMP threads");
    let dir = scratch("openmp_libgomp");
    let exe = build("gcc", "omp_constructs_gomp", C_SRC, &dir, true, &["-DWITH_REGIONS"]);
    for (setting, warned) in [(Some("1"), true), (None, false)] {
        let file = dir.join("gomp.h5");
        let mut cmd = Command::new(&exe);
        cmd.arg("3").env("SCOPE_PROFILER_FILE", &file).env("SCOPE_PROFILER_VERBOSE", "0").env_remove("SCOPE_PROFILER_OPENMP");
        if let Some(s) = setting {
            cmd.env("SCOPE_PROFILER_OPENMP", s);
        }
        let out = run(&mut cmd);
        ok(&out);
        let stderr = text(&out.stderr);
        let said = stderr.matches("runs on GCC's libgomp, which has no OpenMP tools interface").count();
        assert_eq!(said, warned as usize, "{stderr}");
        if warned {
            assert!(stderr.contains("LD_PRELOAD=") && stderr.contains("libomp"), "{stderr}");
        }
        let regions = read_regions(&hdf5::File::open(&file).unwrap(), 0);
        assert_eq!(names(&regions), vec!["inner", "outer"]);
        assert_eq!(per_thread(&regions, "inner"), vec![3, 3]);
        assert_eq!(per_thread(&regions, "outer"), vec![1]);
    }
}

/// Explicit tasks only on request (SCOPE_PROFILER_OPENMP=tasks): a call per task.
#[test]
fn tasks_on_request() {
    need_cpus(2, "2 OpenMP threads");
    let dir = scratch("openmp_tasks");
    let exe = build("clang", "omp_constructs_clang", C_SRC, &dir, false, &[]);
    for (setting, tasks) in [("tasks", 12), ("1", 0)] {
        let file = dir.join(format!("tasks_{setting}.h5"));
        let out = run(Command::new(&exe).args(["3", "4"]).env("OMP_TOOL_LIBRARIES", lib()).env("SCOPE_PROFILER_OPENMP", setting).env("SCOPE_PROFILER_FILE", &file));
        ok(&out);
        let regions = read_regions(&hdf5::File::open(&file).unwrap(), 0);
        let task_calls: usize = regions.iter().filter(|(k, _)| k.starts_with("omp task @")).map(|(_, r)| r.starts.len()).sum();
        assert_eq!(task_calls, tasks, "{setting}: {:?}", names(&regions));
        if tasks > 0 {
            let task = find(&regions, "omp task", C_SRC, "/* TASK */");
            assert_eq!(regions[&task].starts.len(), tasks);
        }
        check_common_c(&regions, 3);
    }
}

/// A hybrid MPI + OpenMP program, clang -fopenmp, 2 ranks of 2 threads, nothing linked: with
/// the MPI plugin preloaded the ranks write one file, each rank's OpenMP regions under the
/// same names; without it each rank writes its own file at exit.
#[test]
fn hybrid_mpi_openmp() {
    need_cpus(2, "2 ranks of 2 OpenMP threads");
    let src = "tests/c/omp_hybrid.c";
    let dir = scratch("openmp_hybrid");
    let exe = dir.join("omp_hybrid");
    let out = run(Command::new("mpicc.openmpi")
        .env("OMPI_CC", "clang")
        .args(["-fopenmp", "-O2", "-g"])
        .arg(repo_root().join(src))
        .arg("-o")
        .arg(&exe));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let plugin = link_dir().join("libscope_profiler_mpi_openmpi.so");
    let mpirun = |file: &Path, preload: bool| {
        let mut c = Command::new("mpirun.openmpi");
        c.args(["--oversubscribe", "--bind-to", "none", "-np", "2"])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
            .env("OMP_TOOL_LIBRARIES", lib())
            .env("SCOPE_PROFILER_FILE", file)
            .env("SCOPE_PROFILER_VERBOSE", "0")
            .env_remove("SCOPE_PROFILER_MPI")
            .current_dir(&dir);
        if preload {
            c.arg("-x").arg(format!("LD_PRELOAD={}", plugin.display()));
        }
        c.arg(&exe).arg("4");
        run(&mut c)
    };
    let file = dir.join("hybrid.h5");
    ok(&mpirun(&file, true));
    let h5 = hdf5::File::open(&file).unwrap();
    for rank in 0..2 {
        let regions = read_regions(&h5, rank);
        let par = find(&regions, "omp parallel", src, "/* PARALLEL */");
        assert_eq!(per_thread(&regions, &par), vec![4, 4], "rank {rank}");
        let barrier = find(&regions, "omp barrier", src, "/* BARRIER */");
        assert_eq!(per_thread(&regions, &barrier), vec![4, 4], "rank {rank}");
        assert!(h5.group(&format!("rank{rank}/mpi")).is_ok(), "rank {rank}: the MPI calls");
    }

    // No plugin: nothing talks to the other ranks; each writes its own file at exit.
    let file = dir.join("alone.h5");
    ok(&mpirun(&file, false));
    for rank in 0..2 {
        let f = dir.join(format!("alone.rank{rank}.h5"));
        let regions = read_regions(&hdf5::File::open(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display())), rank);
        let par = find(&regions, "omp parallel", src, "/* PARALLEL */");
        assert_eq!(per_thread(&regions, &par), vec![4, 4], "rank {rank}");
    }
}

/// Calls per thread, sorted (the threads' order of first recording is not the team's).
fn sorted_per_thread(regions: &BTreeMap<String, ReadRegion>, name: &str) -> Vec<usize> {
    let mut v = per_thread(regions, name);
    v.retain(|&c| c > 0);
    v.sort_unstable();
    v
}

fn sorted(mut v: Vec<usize>) -> Vec<usize> {
    v.retain(|&c| c > 0);
    v.sort_unstable();
    v
}

/// A gcc -fopenmp MPI program with LULESH's loop patterns on libomp, 8 oversubscribed ranks of
/// 2 threads: GCC ends a parallel region's body with a tail call of GOMP_barrier on the path of
/// a thread whose share of a static loop is empty, and libomp hands the tool a return address
/// inside its own GOMP layer. No construct is named after the runtime: that barrier is `omp
/// barrier (in parallel) @ <the parallel region>`, every other one keeps its line, and the
/// counts of each on each rank and thread are exactly what the loop sizes give.
#[test]
fn gcc_tail_called_barriers_under_oversubscribed_mpi() {
    need_cpus(2, "8 ranks of 2 OpenMP threads");
    let src = "tests/c/omp_tail_barrier.c";
    let dir = scratch("openmp_tail_barrier");
    let exe = dir.join("omp_tail_barrier");
    let out = run(Command::new("mpicc.openmpi").env("OMPI_CC", "gcc").args(["-fopenmp", "-O2", "-g"]).arg(repo_root().join(src)).arg("-o").arg(&exe));
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The case under test exists in this binary: a jump (not a call) to GOMP_barrier.
    let dis = run(Command::new("objdump").arg("-d").arg(&exe));
    // (Outside the PLT, whose stub jumps to GOMP_barrier too; `-fno-plt` code jumps through the GOT.)
    let mut in_plt = false;
    let tail_calls = text(&dis.stdout)
        .lines()
        .filter(|l| {
            if l.ends_with(">:") {
                in_plt = l.contains("@plt>") || l.contains(".plt");
            }
            !in_plt && l.contains("\tjmp ") && l.contains("<GOMP_barrier@")
        })
        .count();
    assert!(tail_calls > 0, "gcc made no tail call of GOMP_barrier: the test does not test its case");
    let plugin = link_dir().join("libscope_profiler_mpi_openmpi.so");
    let file = dir.join("tail.h5");
    let steps = 12;
    let out = run(Command::new("mpirun.openmpi")
        .args(["--oversubscribe", "--bind-to", "none", "-np", "8"])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("OMP_NUM_THREADS", "2")
        .env("OMP_TOOL_LIBRARIES", lib())
        .env("SCOPE_PROFILER_FILE", &file)
        .env("SCOPE_PROFILER_VERBOSE", "0")
        .env_remove("SCOPE_PROFILER_MPI")
        .arg("-x")
        .arg(format!("LD_PRELOAD={}:{}", libomp().display(), plugin.display()))
        .arg(&exe)
        .arg(steps.to_string())
        .current_dir(&dir));
    ok(&out);
    let h5 = hdf5::File::open(&file).unwrap();
    let sizes = [0usize, 1, 2, 7, 1, 64, 0, 3];
    for rank in 0..8 {
        let regions = read_regions(&h5, rank);
        let par = find(&regions, "omp parallel", src, "/* PARALLEL */");
        let line = par.rsplit(':').next().unwrap();
        let loop_barrier = find(&regions, "omp barrier", src, "/* LOOP_BARRIER */");
        let par_for = find(&regions, "omp parallel", src, "/* PARALLEL_FOR */");
        let tail = format!("omp barrier (in parallel) @ omp_tail_barrier.c:{line}");
        // GCC's static schedule: thread t of 2 has no iteration of n when n / 2 == 0 and t >= n % 2.
        let (mut empty, mut busy) = (vec![0usize; 2], vec![0usize; 2]);
        for s in 0..steps {
            let n = sizes[(s + rank) % 8];
            for t in 0..2 {
                if n / 2 == 0 && t >= n % 2 { empty[t] += 1 } else { busy[t] += 1 }
            }
        }
        let all = vec![steps, steps];
        let mut expected: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (name, calls) in [
            (par.clone(), all.clone()),
            (par.replace("omp parallel @", "omp barrier (implicit) @"), all.clone()),
            (loop_barrier.clone(), busy.clone()),
            (tail.clone(), empty.clone()),
            (par_for.clone(), all.clone()),
            (par_for.replace("omp parallel @", "omp barrier (implicit) @"), all.clone()),
        ] {
            let wait = name.replacen("omp barrier", "omp wait barrier", 1);
            if name.contains("barrier") {
                expected.insert(wait, sorted(calls.clone()));
            }
            expected.insert(name, sorted(calls));
        }
        expected.retain(|_, v| !v.is_empty());
        let got: BTreeMap<String, Vec<usize>> = regions.keys().map(|k| (k.clone(), sorted_per_thread(&regions, k))).collect();
        assert_eq!(got, expected, "rank {rank}: regions and their calls per thread");
        for k in regions.keys() {
            assert!(!["GOMP", "kmp", "libomp", "+0x"].iter().any(|bad| k.contains(bad)), "rank {rank}: '{k}' is named after the runtime");
        }
        nested(&regions, &tail, &par);
        nested(&regions, &loop_barrier, &par);
        no_open_or_dropped(&regions);
    }
}

const ODD_SRC: &str = "tests/c/omp_odd_constructs.c";

/// Regions and calls per thread (sorted) of one run of tests/c/omp_odd_constructs.c.
fn odd_run(exe: &Path, dir: &Path, mode: &str, sampling: bool) -> (BTreeMap<String, ReadRegion>, Output) {
    let file = dir.join(format!("{mode}_{sampling}.h5"));
    let mut cmd = Command::new(exe);
    cmd.args([mode, "3"]).env("OMP_TOOL_LIBRARIES", lib()).env("SCOPE_PROFILER_OPENMP", "tasks").env("SCOPE_PROFILER_FILE", &file).env("SCOPE_PROFILER_VERBOSE", "1");
    if sampling {
        cmd.env("SCOPE_PROFILER_SAMPLE_HZ", "1000");
    } else {
        cmd.env_remove("SCOPE_PROFILER_SAMPLE_HZ");
    }
    let out = run(&mut cmd);
    ok(&out);
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("still open"), "{mode} (sampling {sampling}): a false open call:\n{stderr}");
    let regions = read_regions(&hdf5::File::open(&file).unwrap_or_else(|e| panic!("{mode}: {e}\n{stderr}")), 0);
    no_open_or_dropped(&regions);
    for k in regions.keys() {
        assert!(k.starts_with("omp ") && !["kmp", "libomp", "+0x"].iter().any(|bad| k.contains(bad)), "{mode}: '{k}'");
    }
    (regions, out)
}

fn total(regions: &BTreeMap<String, ReadRegion>, name: &str) -> usize {
    regions.get(name).map_or(0, |r| r.starts.len())
}

/// A host `omp teams` league, nested parallelism, tasks with dependences, taskloop,
/// cancellation and a program that exits inside a parallel region (clang, libomp): the regions
/// the docs list, with their lines, exact counts, no call left "open", and the same counts
/// with sampling on.
#[test]
fn teams_nested_tasks_cancellation_and_exit() {
    need_cpus(2, "2 OpenMP threads");
    let dir = scratch("openmp_odd_constructs");
    let exe = build("clang", "omp_odd_constructs", ODD_SRC, &dir, false, &[]);
    let s = ODD_SRC;
    for sampling in [false, true] {
        // A league of 2 teams, 3 times: one `omp teams` call per team, its implicit barrier;
        // nothing else (the one-thread parallel region libomp runs each team in is not one).
        let (r, _) = odd_run(&exe, &dir, "teams", sampling);
        let teams = find(&r, "omp teams", s, "/* TEAMS */");
        let bar = teams.replace("omp teams @", "omp barrier (implicit) @");
        let wait = teams.replace("omp teams @", "omp wait barrier (implicit) @");
        assert_eq!(names(&r), vec![&bar, &teams, &wait]);
        for n in [&teams, &bar, &wait] {
            assert_eq!(sorted_per_thread(&r, n), vec![3, 3], "{n}");
        }
        nested(&r, &bar, &teams);

        // Nested: the outer region on 2 threads, the inner one on 2 threads in each.
        let (r, _) = odd_run(&exe, &dir, "nested", sampling);
        let outer = find(&r, "omp parallel", s, "/* OUTER */");
        let inner = find(&r, "omp parallel", s, "/* INNER */");
        assert_eq!(sorted_per_thread(&r, &outer), vec![3, 3]);
        assert_eq!(total(&r, &inner), 12);
        assert_eq!(total(&r, &inner.replace("omp parallel @", "omp barrier (implicit) @")), 12);
        assert_eq!(sorted_per_thread(&r, &outer.replace("omp parallel @", "omp barrier (implicit) @")), vec![3, 3]);
        nested_on(&r, &inner, &outer, Some(0));
        assert_eq!(r.len(), 6, "{:?}", names(&r));

        // Tasks with dependences: each task once per round, inside the single's taskwait or
        // the barriers where the other thread ran them.
        let (r, _) = odd_run(&exe, &dir, "depend", sampling);
        for m in ["/* TASK_A */", "/* TASK_B */"] {
            assert_eq!(total(&r, &find(&r, "omp task", s, m)), 3, "{m}");
        }
        assert_eq!(total(&r, &find(&r, "omp single", s, "/* DEPEND_SINGLE */")), 3);
        assert_eq!(total(&r, &find(&r, "omp taskwait", s, "/* TASKWAIT */")), 3);
        assert_eq!(sorted_per_thread(&r, &find(&r, "omp parallel", s, "/* DEPEND_PARALLEL */")), vec![3, 3]);

        // Taskloop: named at its line (libomp 14 gives its own address: the taskgroup's is
        // taken), its 4 tasks a round too.
        let (r, _) = odd_run(&exe, &dir, "taskloop", sampling);
        let tl = find(&r, "omp taskloop", s, "/* TASKLOOP */");
        assert_eq!(total(&r, &tl), 3);
        assert_eq!(total(&r, &find(&r, "omp task", s, "/* TASKLOOP */")), 12);
        assert_eq!(total(&r, &find(&r, "omp taskgroup", s, "/* TASKLOOP */")), 3);

        // Cancellation of a loop: every thread's part of the loop, its end, the barrier after.
        let (r, _) = odd_run(&exe, &dir, "cancel", sampling);
        let lp = find(&r, "omp for", s, "/* CANCEL_LOOP */");
        assert_eq!(sorted_per_thread(&r, &lp), vec![3, 3]);
        assert_eq!(sorted_per_thread(&r, &find(&r, "omp barrier", s, "/* CANCEL_BARRIER */")), vec![3, 3]);
        assert_eq!(sorted_per_thread(&r, &find(&r, "omp barrier (implicit)", s, "/* CANCEL_LOOP */")), vec![3, 3]);

        // exit() on one thread inside the parallel region: the run ends there; each thread's
        // part of the region and the barrier both passed are recorded, up to the end of the run.
        let (r, out) = odd_run(&exe, &dir, "exit", sampling);
        assert!(text(&out.stdout).contains("exit inside the parallel region"));
        let par = find(&r, "omp parallel", s, "/* EXIT_PARALLEL */");
        assert_eq!(sorted_per_thread(&r, &par), vec![1, 1]);
        let first = find(&r, "omp barrier", s, "/* EXIT_BARRIER */");
        assert_eq!(sorted_per_thread(&r, &first), vec![1, 1]);
        nested(&r, &first, &par);
        // The other thread may or may not have reached the second barrier when the run ended.
        let second: usize = r.iter().filter(|(k, _)| k.starts_with("omp barrier @") && **k != first).map(|(_, v)| v.starts.len()).sum();
        assert!(second <= 1, "{:?}", names(&r));
    }
}

/// A worker's part of a parallel region ends with its team however late the runtime reports
/// it: between two runs of a two-thread region, the primary thread naps and runs 300
/// one-thread regions (more than its ring of teams has slots, so the ring is scanned and
/// used again while the worker still holds the first run's team). Each of the worker's parts
/// ends exactly when the primary thread's part of the same run ended (the team's end), well
/// before the nap after it; the one-thread regions are the primary thread's alone.
#[test]
fn a_late_workers_part_ends_with_its_team() {
    need_cpus(2, "2 OpenMP threads");
    let dir = scratch("openmp_team_ends");
    let exe = build("clang", "omp_team_ends", TEAM_ENDS, &dir, false, &[]);
    // Without counter sources a worker's late ends are taken off its stacks and recorded a
    // region later; with one (a software perf event, which this machine has), where each end
    // reads the counters, each is closed as it comes. Both end the worker's parts at its team's.
    for counters in [None, Some("task-clock")] {
        let file = dir.join(format!("omp_{}.h5", counters.unwrap_or("plain")));
        let mut cmd = Command::new(&exe);
        cmd.arg("4").env("OMP_TOOL_LIBRARIES", lib()).env("SCOPE_PROFILER_FILE", &file).env("SCOPE_PROFILER_VERBOSE", "0");
        if let Some(events) = counters {
            cmd.env("SCOPE_PROFILER_PERF_EVENTS", events);
        }
        let out = run(&mut cmd);
        ok(&out);
        let h5 = hdf5::File::open(&file).unwrap();
        let regions = read_regions(&h5, 0);
        let wide = find(&regions, "omp parallel", TEAM_ENDS, "/* WIDE */");
        let narrow = find(&regions, "omp parallel", TEAM_ENDS, "/* NARROW */");
        assert_eq!(per_thread(&regions, &wide), vec![4, 4], "{cmd:?}\n{}", text(&out.stderr));
        assert_eq!(per_thread(&regions, &narrow), vec![1200], "{cmd:?}");
        let w = &regions[&wide];
        let ends_of = |t: i64| -> Vec<(i64, i64)> { (0..w.starts.len()).filter(|&k| w.thread_ids[k] == t).map(|k| (w.starts[k], w.ends[k])).collect() };
        let (primary, worker) = (ends_of(0), ends_of(1));
        for (r, (p, q)) in primary.iter().zip(&worker).enumerate() {
            assert_eq!(q.1, p.1, "{cmd:?}, run {r}: the worker's part ends at {} ns, its team at {} ns (worker {q:?}, primary {p:?})", q.1, p.1);
            // A part ended by anything after its region would last at least the two naps of
            // 20 ms; 35 ms leaves a loaded machine room to deschedule the primary thread.
            assert!(q.1 - q.0 < 35_000_000, "{cmd:?}, run {r}: the worker's part lasted {} ns, into the naps after the region", q.1 - q.0);
        }
        no_open_or_dropped(&regions);
        if counters.is_some() {
            // The counters were on: the region's counts are there, on both threads.
            let g = h5.group("rank0/perf_events").unwrap_or_else(|e| panic!("{cmd:?}: no perf_events group ({e})\n{}", text(&out.stderr)));
            let tagged: Vec<hdf5::Group> = g.member_names().unwrap().iter().map(|n| g.group(n).unwrap()).filter(|r| str_attr(r, "tag") == wide).collect();
            assert_eq!(tagged.len(), 1, "{cmd:?}: the counters of '{wide}'");
            let calls: Vec<i64> = tagged[0].dataset("thread_calls").unwrap().read_raw().unwrap();
            // The worker's last part ends when libomp reports it at exit, after finalize closed
            // it at its team's end: its time is there, its counts are not (docs/perf_events.md).
            assert!(calls == [4, 4] || calls == [4, 3], "{cmd:?}: counted calls of '{wide}' per thread: {calls:?}");
            assert_eq!(int_attr(&tagged[0], "calls"), calls.iter().sum::<i64>(), "{cmd:?}: '{wide}' calls counted");
        }
    }
}

const TEAM_ENDS: &str = "tests/c/omp_team_ends.c";
