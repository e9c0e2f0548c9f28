//! The CMake project and the installed package, for real: configure, build (cargo is run
//! by CMake on this repository's target directory, with the profile and target selection
//! of `cargo test --workspace`, so it reuses what that just built), ctest (the examples),
//! install to a fresh prefix, then a separate consumer project (tests/cmake_consumer: C, C++ and Fortran, serial and
//! MPI, shared and static targets) that only knows the prefix is configured, built and
//! run, and its files read back. Also: every helper the library starts installed where it
//! finds them (the LIKWID read-back under likwid-perfctr, the merge helper), the flight
//! recorder's write at a SIGTERM from the prefix, a project with cmake_minimum_required(VERSION 3.0) and the plain
//! target_link_libraries signature (tests/cmake_consumer/old_cmake), the Fortran module
//! compiled from the installed source, the examples built on their own against the prefix,
//! pkg-config (its flags before and after the sources), and examples/run_nbody_mpi.sh.
//!
//! One test function: the steps depend on each other and share one build.

mod support;
use support::*;

#[path = "fortran/support.rs"]
mod fortran_support;
use fortran_support::mpirun;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Run a command, failing the test with its output on a non-zero exit; returns stdout.
fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{cmd:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    stdout
}

/// A command for programs built against the installed prefix: no LD_LIBRARY_PATH (cargo
/// test sets one pointing at target/), so they must find the installed library themselves.
fn installed(cmd: &mut Command) -> &mut Command {
    cmd.env_remove("LD_LIBRARY_PATH").env("SCOPE_PROFILER_VERBOSE", "0")
}

/// Shared libraries an executable needs (readelf -d).
fn needed(exe: &Path) -> Vec<String> {
    let out = ok(Command::new("readelf").arg("-d").arg(exe));
    out.lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1).map(|s| s.trim_end_matches(']').to_string()))
        .collect()
}

/// Region -> calls of every rank in `file`, after checking the language and rank count.
fn read_back(file: &Path, language: &str, ranks: usize) -> Vec<std::collections::BTreeMap<String, usize>> {
    let h5 = hdf5::File::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let meta = h5.group("metadata").unwrap();
    assert_eq!(str_attr(&meta, "language"), language, "{}", file.display());
    assert_eq!(int_attr(&meta, "mpi_size"), ranks as i64, "{}", file.display());
    (0..ranks).map(|r| read_regions(&h5, r).into_iter().map(|(k, v)| (k, v.starts.len())).collect()).collect()
}

fn calls(pairs: &[(&str, usize)]) -> std::collections::BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// `readelf -d` entries of one kind (NEEDED, RUNPATH, ...) of an ELF file.
fn dynamic(file: &Path, kind: &str) -> Vec<String> {
    let out = ok(Command::new("readelf").arg("-d").arg(file));
    out.lines()
        .filter(|l| l.contains(&format!("({kind})")))
        .filter_map(|l| l.split('[').nth(1).map(|s| s.trim_end_matches(']').to_string()))
        .collect()
}

/// The highest count of each thread in flight_loop's side file ("<thread> <calls>" lines).
fn side_counts(side: &Path) -> std::collections::BTreeMap<String, u64> {
    let mut m = std::collections::BTreeMap::new();
    for l in std::fs::read_to_string(side).unwrap_or_default().lines() {
        if let Some((k, v)) = l.split_once(' ') {
            if let Ok(n) = v.parse::<u64>() {
                let e = m.entry(k.to_string()).or_insert(0);
                *e = (*e).max(n);
            }
        }
    }
    m
}

/// A program built against the prefix runs with the flight recorder on, is killed with SIGTERM
/// while its threads record, and the installed library writes its profile at the signal (in
/// the process, from the spill file): every call the program reported before the signal is in
/// it, as the installed sptool and the PyPI reader see it.
fn flight_recorder_from_the_prefix(exe: &Path, dir: &Path, sptool: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let (out_file, side) = (dir.join("killed.h5"), dir.join("side"));
    let mut cmd = Command::new(exe);
    installed(&mut cmd)
        .arg(&out_file)
        .arg(&side)
        .args(["2", "plain", "0"])
        .current_dir(dir)
        .env("SCOPE_PROFILER_SPILL", "1")
        .env("SCOPE_PROFILER_SIGNAL_TIMEOUT", "120")
        .env_remove("SCOPE_PROFILER_SPILL_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = side_counts(&side);
        if m.contains_key("work0") && m.contains_key("work1") && m.contains_key("slow") {
            break;
        }
        if Instant::now() > deadline {
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            let out = child.wait_with_output().unwrap();
            panic!("{cmd:?}: no recording after 60 s\nstderr:\n{}", text(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let before = side_counts(&side);
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{cmd:?}: {:?}\nstderr:\n{stderr}", out.status);
    assert!(stderr.contains("SIGTERM: profile written to"), "{cmd:?}: no profile written at the signal:\n{stderr}");
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".spill."))
        .map(|e| e.path())
        .collect();
    assert!(leftovers.is_empty(), "spill data left after the profile was written: {leftovers:?}");
    let work_before: u64 = before.iter().filter(|(k, _)| k.starts_with("work")).map(|(_, v)| v).sum();
    // The installed sptool reads it...
    let shown = ok(Command::new(sptool).arg("inspect").arg(&out_file));
    assert!(shown.contains("work") && shown.contains("slow"), "{shown}");
    // ... and so does the PyPI reader, with every call completed before the signal.
    let v = python_view(&out_file);
    let n = |region: &str| -> u64 {
        v["regions"][region].as_object().unwrap_or_else(|| panic!("no {region} in {v}")).values().map(|r| r["calls"].as_u64().unwrap()).sum()
    };
    assert!(n("work") >= work_before, "work: {} calls in the file, {work_before} completed before the signal", n("work"));
    assert!(n("slow") >= before["slow"], "slow: {} calls in the file, {} completed before the signal", n("slow"), before["slow"]);
    assert_eq!(v["metadata"]["ended_by_signal"], "SIGTERM", "the file says how the run ended: {}", v["metadata"]);
}

/// The sizes of the regular files under `dir`: (installed, debug files), the static libraries
/// (`*.a`) left out of both.
fn sizes(dir: &Path, in_debug: bool, out: &mut (u64, u64)) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let (path, meta) = (e.path(), std::fs::symlink_metadata(e.path()).unwrap());
        if meta.is_dir() {
            sizes(&path, in_debug || e.file_name() == ".debug", out);
        } else if meta.is_file() && path.extension().is_none_or(|x| x != "a") {
            if in_debug { out.1 += meta.len() } else { out.0 += meta.len() }
        }
    }
}

/// Every installed binary is stripped, its debug information in `.debug/<name>.debug` beside
/// it, named by its `.gnu_debuglink` (addr2line resolves a function of the stripped library to
/// its source line through it); one copy of the merge helper (bin/ links to it); the installed
/// tree, the static libraries and the debug files apart, under 25 MB in a release build.
fn split_debug_and_size(prefix: &Path, profile_dir: &str) {
    for b in [
        "lib/libscope_profiler.so",
        "lib/libscope_profiler_mpi_openmpi.so",
        "lib/libscope_profiler_mpi_mpich.so",
        "lib/scope_profiler/scope_profiler_merge",
        "lib/scope_profiler/scope_profiler_likwid_helper",
        "bin/sptool",
    ] {
        let path = prefix.join(b);
        let sections = ok(Command::new("readelf").arg("-S").arg("-W").arg(&path));
        assert!(!sections.contains(".debug_info") && !sections.contains(".debug_line"), "{b} keeps its debug information:\n{sections}");
        assert!(sections.contains(".gnu_debuglink"), "{b} names no debug file:\n{sections}");
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let debug = path.parent().unwrap().join(".debug").join(format!("{name}.debug"));
        let debug_sections = ok(Command::new("readelf").arg("-S").arg("-W").arg(&debug));
        assert!(debug_sections.contains(".debug_line"), "{} has no line tables:\n{debug_sections}", debug.display());
    }
    // Through the link: sp_setup of the stripped library to its source line.
    let lib = prefix.join("lib/libscope_profiler.so");
    let symbols = ok(Command::new("nm").arg("-D").arg("--defined-only").arg(&lib));
    let addr = symbols.lines().find(|l| l.ends_with(" sp_setup")).and_then(|l| l.split_whitespace().next()).expect("sp_setup is exported");
    let place = ok(Command::new("addr2line").arg("-f").arg("-e").arg(&lib).arg(format!("0x{addr}")));
    assert!(place.contains("src/ffi.rs:"), "addr2line through the split debug file gave:\n{place}");
    // One copy of each helper: bin/scope_profiler_merge is a link to the one the library starts.
    let link = std::fs::read_link(prefix.join("bin/scope_profiler_merge")).expect("bin/scope_profiler_merge is a link");
    assert_eq!(link, Path::new("../lib/scope_profiler/scope_profiler_merge"));
    let mut total = (0, 0);
    sizes(prefix, false, &mut total);
    let (installed, debug) = total;
    eprintln!("installed: {:.1} MB, debug files {:.1} MB (static libraries apart), {profile_dir} build", installed as f64 / 1e6, debug as f64 / 1e6);
    if profile_dir == "release" {
        assert!(installed < 25_000_000, "the installed package is {installed} bytes (the static libraries and debug files apart)");
    } else {
        // Unoptimized code is larger; what stripping leaves is still a small part.
        assert!(installed * 3 < debug, "installed {installed} bytes, debug files {debug} bytes");
    }
}

#[test]
fn cmake_project_installs_a_package_that_a_consumer_project_can_use() {
    let root = repo_root();
    let lib = lib_dir();
    let profile_dir = lib.file_name().unwrap().to_str().unwrap().to_string();
    let cargo_profile = if profile_dir == "debug" { "dev".to_string() } else { profile_dir.clone() };
    let target_dir = lib.parent().unwrap().to_path_buf();
    let work = lib.join("cmake-package");
    let build = work.join("build"); // kept between runs: an incremental build is quicker
    let prefix = work.join("prefix");
    let consumer = work.join("consumer");
    let consumer_src = work.join("consumer-fortran-from-source");
    let runs = work.join("runs");
    for d in [&prefix, &consumer, &consumer_src, &runs] {
        let _ = std::fs::remove_dir_all(d);
    }
    // A build directory configured for another checkout (target/ copied or moved with the
    // tree) is refused by CMake: start that one afresh.
    let cache = std::fs::read_to_string(build.join("CMakeCache.txt")).unwrap_or_default();
    if !cache.is_empty() && !cache.lines().any(|l| l == format!("CMAKE_HOME_DIRECTORY:INTERNAL={}", root.display())) {
        let _ = std::fs::remove_dir_all(&build);
    }
    std::fs::create_dir_all(&runs).unwrap();

    // --- configure, build, ctest, install ----------------------------------------------------
    ok(Command::new("cmake")
        .arg("-S")
        .arg(&root)
        .arg("-B")
        .arg(&build)
        .arg(format!("-DCMAKE_INSTALL_PREFIX={}", prefix.display()))
        .arg(format!("-DSCOPE_PROFILER_CARGO_PROFILE={cargo_profile}"))
        .arg(format!("-DSCOPE_PROFILER_CARGO_TARGET_DIR={}", target_dir.display()))
        // What `cargo test --workspace` (scripts/test.sh) has just built: a no-op for cargo,
        // where the default selection would rebuild the library with other feature sets.
        .arg("-DSCOPE_PROFILER_CARGO_BUILD_ARGS=--workspace --all-targets")
        .arg("-DSCOPE_PROFILER_WERROR=ON")
        .arg("-DCMAKE_BUILD_TYPE=Release"));
    ok(Command::new("cmake").arg("--build").arg(&build).arg("-j2"));
    let ctest = ok(Command::new("ctest").arg("--test-dir").arg(&build).arg("--output-on-failure"));
    assert!(ctest.contains("100% tests passed, 0 tests failed out of 6"), "{ctest}");
    ok(Command::new("cmake").arg("--install").arg(&build));

    // --- the installed layout -----------------------------------------------------------------
    // The compiled module sits in a directory named after the compiler that built it.
    let gfortran_version = ok(Command::new("gfortran").arg("-dumpfullversion")).trim().to_string();
    let fortran_id = format!("GNU-{gfortran_version}");
    let module_dirs: Vec<String> = std::fs::read_dir(prefix.join("lib/scope_profiler/fortran"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(module_dirs, std::slice::from_ref(&fortran_id));
    let expected_files = [
        "lib/libscope_profiler.so".to_string(),
        "lib/libscope_profiler.a".to_string(),
        "lib/libscope_profiler_fortran.so".to_string(),
        "include/scope_profiler.h".to_string(),
        "include/scope_profiler.hpp".to_string(),
        "include/scope_profiler_mpi.h".to_string(),
        "share/scope_profiler/fortran/scope_profiler.f90".to_string(),
        "share/scope_profiler/fortran/scope_profiler_disabled.f90".to_string(),
        format!("lib/scope_profiler/fortran/{fortran_id}/scope_profiler.mod"),
        format!("lib/scope_profiler/fortran/{fortran_id}/libscope_profiler_fortran.a"),
        "lib/cmake/ScopeProfiler/ScopeProfilerConfig.cmake".to_string(),
        "lib/cmake/ScopeProfiler/ScopeProfilerConfigVersion.cmake".to_string(),
        "lib/cmake/ScopeProfiler/ScopeProfilerNativeLibs.cmake".to_string(),
        "lib/pkgconfig/scope_profiler.pc".to_string(),
        "lib/pkgconfig/scope_profiler-fortran.pc".to_string(),
        // The MPI plugins (both families are installed here) and the link to mpicc's.
        "lib/libscope_profiler_mpi_openmpi.so".to_string(),
        "lib/libscope_profiler_mpi_mpich.so".to_string(),
        "lib/libscope_profiler_mpi.so".to_string(),
    ];
    for f in &expected_files {
        assert!(prefix.join(f).is_file(), "{f} not installed");
    }
    // The program the library starts goes to <libdir>/scope_profiler/, where it looks for it;
    // the commands go to bin/. Each one runs from there (its libraries are found): without
    // arguments the helper refuses with a message and exit status 2.
    use std::os::unix::fs::PermissionsExt;
    assert!(!prefix.join("lib/scope_profiler/scope_profiler_recover").exists(), "no recovery helper: signals are written in-process");
    for (helper, usage) in [
        ("scope_profiler_likwid_helper", "scope_profiler_likwid_helper: missing --mode"),
        ("scope_profiler_merge", "scope_profiler_merge: missing -o OUTPUT.h5"),
    ] {
        let path = prefix.join("lib/scope_profiler").join(helper);
        assert!(path.is_file(), "{helper} is not installed in lib/scope_profiler/");
        assert!(path.metadata().unwrap().permissions().mode() & 0o111 != 0, "{helper} not executable");
        let out = run(installed(&mut Command::new(&path)));
        assert_eq!(out.status.code(), Some(2), "{helper}: {:?}\nstderr:\n{}", out.status, text(&out.stderr));
        assert!(text(&out.stderr).contains(usage), "{helper}:\n{}", text(&out.stderr));
    }
    // The Fortran module's shared library sits next to libscope_profiler.so and finds it there.
    let fortran_so = prefix.join("lib/libscope_profiler_fortran.so");
    assert!(dynamic(&fortran_so, "NEEDED").iter().any(|l| l == "libscope_profiler.so"), "{:?}", dynamic(&fortran_so, "NEEDED"));
    assert_eq!(dynamic(&fortran_so, "RUNPATH"), ["$ORIGIN"], "libscope_profiler_fortran.so must find libscope_profiler.so beside it");
    let merge = ok(Command::new(prefix.join("bin/scope_profiler_merge")).arg("--help"));
    assert!(merge.contains("usage: scope_profiler_merge"), "{merge}");
    let sptool_help = ok(Command::new(prefix.join("bin/sptool")).arg("--help"));
    assert!(sptool_help.contains("inspect"), "{sptool_help}");
    // The installed files are the ones just built.
    assert_eq!(
        std::fs::read(prefix.join("include/scope_profiler.h")).unwrap(),
        std::fs::read(root.join("include/scope_profiler.h")).unwrap()
    );
    // Nothing installed points back into the source tree or the build.
    for f in [
        "lib/cmake/ScopeProfiler/ScopeProfilerConfig.cmake",
        "lib/cmake/ScopeProfiler/ScopeProfilerNativeLibs.cmake",
        "lib/pkgconfig/scope_profiler.pc",
        "lib/pkgconfig/scope_profiler-fortran.pc",
    ] {
        let content = std::fs::read_to_string(prefix.join(f)).unwrap();
        assert!(!content.contains(root.to_str().unwrap()), "{f} refers to the source tree:\n{content}");
    }
    // The static link list: HDF5 and the Rust runtime's system libraries; no MPI (the core
    // reaches MPI through its plugin at run time).
    let native = std::fs::read_to_string(prefix.join("lib/cmake/ScopeProfiler/ScopeProfilerNativeLibs.cmake")).unwrap();
    for l in ["-lhdf5", "-lpthread", "-ldl", "-lgcc_s"] {
        assert!(native.contains(l), "{l} missing from the native libraries:\n{native}");
    }
    assert!(!native.contains("-lmpi"), "the static library needs no MPI:\n{native}");
    split_debug_and_size(&prefix, &profile_dir);

    // --- the consumer project, knowing only the prefix ------------------------------------------
    let configure_consumer_dir = |source: &Path, dir: &Path, extra: &[&str]| {
        ok(Command::new("cmake")
            .arg("-S")
            .arg(source)
            .arg("-B")
            .arg(dir)
            .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
            .args(extra)
            .env_remove("CMAKE_PREFIX_PATH"))
    };
    let configure_consumer = |dir: &PathBuf, extra: &[&str]| configure_consumer_dir(&root.join("tests/cmake_consumer"), dir, extra);
    configure_consumer(&consumer, &[]);
    ok(Command::new("cmake").arg("--build").arg(&consumer).arg("-j2"));
    let package = std::fs::read_to_string(consumer.join("package.txt")).unwrap();
    assert!(package.contains(&format!("version={}", env!("CARGO_PKG_VERSION"))), "{package}");
    assert!(package.contains("fortran_found=TRUE"), "{package}");

    let serial = [
        ("c_shared", "C", "c region", 3, false),
        ("c_static", "C", "c region", 3, true),
        ("cxx_shared", "C++", "cxx region", 4, false),
        ("cxx_static", "C++", "cxx region", 4, true),
        ("fortran_shared", "Fortran", "fortran region", 5, false),
        ("fortran_static", "Fortran", "fortran region", 5, true),
    ];
    for (exe, language, region, n, is_static) in serial {
        let path = consumer.join(exe);
        let links_shared = needed(&path).iter().any(|l| l.starts_with("libscope_profiler"));
        assert_eq!(links_shared, !is_static, "{exe}: needs {:?}", needed(&path));
        let file = runs.join(format!("{exe}.h5"));
        ok(installed(&mut Command::new(&path)).arg(&file).current_dir(&runs));
        assert_eq!(read_back(&file, language, 1), vec![calls(&[(region, n)])], "{exe}");
    }
    // Profiling compiled out: no library linked, no file written, the program runs as usual.
    for exe in ["c_disabled", "cxx_disabled", "fortran_disabled"] {
        let path = consumer.join(exe);
        assert!(!needed(&path).iter().any(|l| l.contains("scope_profiler")), "{exe}: needs {:?}", needed(&path));
        let file = runs.join(format!("{exe}.h5"));
        ok(installed(&mut Command::new(&path)).arg(&file).current_dir(&runs));
        assert!(!file.exists(), "{exe} wrote {}", file.display());
    }
    for (exe, language, region) in [
        ("c_mpi", "C", "mpi c region"),
        ("c_mpi_static", "C", "mpi c region"),
        ("fortran_mpi", "Fortran", "mpi fortran region"),
    ] {
        let file = runs.join(format!("{exe}.h5"));
        ok(installed(&mut mpirun(2)).arg(consumer.join(exe)).arg(&file).current_dir(&runs));
        assert_eq!(read_back(&file, language, 2), vec![calls(&[(region, 1)]), calls(&[(region, 2)])], "{exe}");
        // The installed viewer reads what the installed library wrote.
        let shown = ok(Command::new(prefix.join("bin/sptool")).arg("inspect").arg(&file));
        assert!(shown.contains(region) && shown.contains("mpi_size               : 2"), "{shown}");
    }

    // The installed LIKWID helper is found next to the installed library: a consumer run
    // under likwid-perfctr -m (fake MSRs, see tests/likwid/fake_msr.sh) gets LIKWID's full
    // read-back (source=full_api), which only the helper produces.
    let file = runs.join("c_shared_likwid.h5");
    let mut likwid = Command::new(root.join("tests/likwid/fake_msr.sh"));
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("LIKWID_") || k.starts_with("SCOPE_PROFILER_LIKWID") {
            likwid.env_remove(k);
        }
    }
    let out = ok(installed(&mut likwid)
        .args(["likwid-perfctr", "-M", "0", "-C", "0", "-g", "FLOPS_DP", "-m"])
        .arg(consumer.join("c_shared"))
        .arg(&file)
        .env("SCOPE_PROFILER_LIKWID", "1")
        .current_dir(&runs));
    assert!(out.contains("Region c"), "likwid-perfctr shows no region:\n{out}");
    let h5 = hdf5::File::open(&file).unwrap();
    let regions = h5.group("rank0/likwid/regions").expect("no LIKWID data from the installed library");
    let names = regions.member_names().unwrap();
    assert_eq!(names.len(), 1, "{names:?}");
    let region = regions.group(&names[0]).unwrap();
    assert_eq!(str_attr(&region, "tag"), "c region");
    assert_eq!(str_attr(&region, "source"), "full_api", "the installed helper was not used");

    // --- the flight recorder from the installed prefix: SIGTERM, the installed helper writes ---------
    flight_recorder_from_the_prefix(&consumer.join("flight_loop"), &runs.join("flight"), &prefix.join("bin/sptool"));

    // --- an old project: cmake_minimum_required(VERSION 3.0), the plain signature ----------------
    // LULESH's shape first: a C++ project with MPI and OpenMP; then C, C++ and Fortran.
    for (languages, dir) in [("CXX", "consumer-old-cxx"), ("C;CXX;Fortran", "consumer-old")] {
        let old = work.join(dir);
        let _ = std::fs::remove_dir_all(&old);
        configure_consumer_dir(&root.join("tests/cmake_consumer/old_cmake"), &old, &[&format!("-DCONSUMER_LANGUAGES={languages}")]);
        ok(Command::new("cmake").arg("--build").arg(&old).arg("-j2"));
        let file = runs.join(format!("{dir}-mpi-omp.h5"));
        ok(installed(&mut mpirun(2)).env("OMP_NUM_THREADS", "2").arg(old.join("cxx_mpi_omp")).arg(&file).current_dir(&runs));
        // Each of the 2 threads of rank r records r+1 calls.
        assert_eq!(read_back(&file, "C++", 2), vec![calls(&[("omp cxx region", 2)]), calls(&[("omp cxx region", 4)])], "{dir}");
        let mut serial = vec![("cxx_plain", "C++", "cxx region", 4)];
        if languages.contains("Fortran") {
            serial.extend([("c_plain", "C", "c region", 3), ("c_plain_static", "C", "c region", 3), ("fortran_plain", "Fortran", "fortran region", 5)]);
        } else {
            assert!(!old.join("c_plain").exists() && !old.join("fortran_plain").exists());
        }
        for (exe, language, region, n) in serial {
            let file = runs.join(format!("{dir}-{exe}.h5"));
            ok(installed(&mut Command::new(old.join(exe))).arg(&file).current_dir(&runs));
            assert_eq!(read_back(&file, language, 1), vec![calls(&[(region, n)])], "{dir}/{exe}");
        }
    }

    // --- the Fortran module compiled in the consumer from the installed source -------------------
    let configured = configure_consumer(&consumer_src, &["-DScopeProfiler_FORTRAN_FROM_SOURCE=ON"]);
    assert!(configured.contains("ScopeProfiler: compiling the Fortran module"), "{configured}");
    ok(Command::new("cmake").arg("--build").arg(&consumer_src).arg("--target").arg("fortran_shared"));
    assert!(consumer_src.join("scope_profiler_fortran/scope_profiler.mod").exists());
    let file = runs.join("fortran_from_source.h5");
    ok(installed(&mut Command::new(consumer_src.join("fortran_shared"))).arg(&file).current_dir(&runs));
    assert_eq!(read_back(&file, "Fortran", 1), vec![calls(&[("fortran region", 5)])]);

    // --- the examples on their own, against the installed package ---------------------------------
    let examples = work.join("examples-standalone");
    let _ = std::fs::remove_dir_all(&examples);
    ok(Command::new("cmake")
        .arg("-S")
        .arg(root.join("examples"))
        .arg("-B")
        .arg(&examples)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
        .arg("-DSCOPE_PROFILER_WERROR=ON")
        .env_remove("CMAKE_PREFIX_PATH"));
    ok(Command::new("cmake").arg("--build").arg(&examples).arg("--target").arg("nbody"));
    let file = runs.join("nbody_standalone.h5");
    ok(installed(&mut Command::new(examples.join("nbody"))).args(["64", "2"]).env("SCOPE_PROFILER_FILE", &file));
    assert_eq!(read_back(&file, "C", 1)[0]["force_rcp"], 2);

    // --- pkg-config -------------------------------------------------------------------------------
    let pkg = |args: &[&str]| -> Vec<String> {
        let out = ok(Command::new("pkg-config").args(args).env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")));
        out.split_whitespace().map(String::from).collect()
    };
    let flags = pkg(&["--cflags", "--libs", "scope_profiler"]);
    assert!(flags.iter().any(|f| f == "-lscope_profiler"), "{flags:?}");
    let rpath = format!("-Wl,-rpath,{}", prefix.join("lib").display());
    let exe = runs.join("pkgconfig_c");
    ok(Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror"])
        .arg(root.join("tests/c/simple.c"))
        .arg("-o")
        .arg(&exe)
        .args(&flags)
        .arg(&rpath));
    ok(installed(&mut Command::new(&exe)).current_dir(&runs).env("SCOPE_PROFILER_FILE", runs.join("pkgconfig_c.h5")));
    assert_eq!(read_back(&runs.join("pkgconfig_c.h5"), "C", 1), vec![calls(&[("step", 3)])]);
    // The static list is what --static adds.
    let static_flags = pkg(&["--static", "--libs", "scope_profiler"]);
    assert!(
        static_flags.iter().any(|f| f == "-lhdf5") && static_flags.iter().any(|f| f == "-lpthread"),
        "{static_flags:?}"
    );
    // Fortran through scope_profiler-fortran.pc (same compiler as the install), with the flags
    // after the sources and before them (a Makefile's OPTIONS, as CloverLeaf's). Debian's GCC
    // links with --as-needed, which drops a shared library that nothing before it used: the .pc
    // files switch it off for their own libraries only, so a library after them that the
    // program does not use (libz) is still dropped. One rpath to <prefix>/lib serves both
    // libraries.
    let fflags = pkg(&["--cflags", "--libs", "scope_profiler-fortran"]);
    let source = root.join("tests/cmake_consumer/consumer.f90");
    let placements: [(&str, Vec<String>, Vec<String>); 3] = [
        ("after", vec![], fflags.clone()),
        ("before", fflags.clone(), vec![]),
        ("before_then_unused", fflags.clone(), vec!["-lz".into()]),
    ];
    for (name, first, last) in placements {
        let exe = runs.join(format!("pkgconfig_f_{name}"));
        ok(Command::new("gfortran")
            .args(["-std=f2008", "-Wall", "-Werror"])
            .args(&first)
            .arg(&source)
            .args(&last)
            .arg("-o")
            .arg(&exe)
            .arg(&rpath)
            .current_dir(&runs));
        let needs = needed(&exe);
        assert!(needs.iter().any(|l| l == "libscope_profiler_fortran.so"), "{name}: {needs:?}");
        assert!(!needs.iter().any(|l| l.starts_with("libz.")), "{name}: --as-needed was not restored after the .pc's libraries: {needs:?}");
        let file = runs.join(format!("pkgconfig_f_{name}.h5"));
        ok(installed(&mut Command::new(&exe)).arg(&file).current_dir(&runs));
        assert_eq!(read_back(&file, "Fortran", 1), vec![calls(&[("fortran region", 5)])], "{name}");
    }
    // Static, by hand as docs/fortran.md shows: both archives after the source, then the
    // native libraries from the .pc's native_libs.
    let var = |v: &str, pc: &str| pkg(&[&format!("--variable={v}"), pc]).join(" ");
    let moddir = PathBuf::from(var("moddir", "scope_profiler-fortran"));
    let libdir = PathBuf::from(var("libdir", "scope_profiler"));
    let exe = runs.join("pkgconfig_f_static");
    ok(Command::new("gfortran")
        .arg(format!("-I{}", moddir.display()))
        .arg(&source)
        .arg(moddir.join("libscope_profiler_fortran.a"))
        .arg(libdir.join("libscope_profiler.a"))
        .args(pkg(&["--variable=native_libs", "scope_profiler"]))
        .arg("-o")
        .arg(&exe)
        .current_dir(&runs));
    assert!(!needed(&exe).iter().any(|l| l.starts_with("libscope_profiler")), "{:?}", needed(&exe));
    let file = runs.join("pkgconfig_f_static.h5");
    ok(installed(&mut Command::new(&exe)).arg(&file).current_dir(&runs));
    assert_eq!(read_back(&file, "Fortran", 1), vec![calls(&[("fortran region", 5)])]);
    // C with the flags before the source, too.
    let exe = runs.join("pkgconfig_c_before");
    ok(Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(&flags)
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror"])
        .arg(root.join("tests/c/simple.c"))
        .arg("-o")
        .arg(&exe)
        .arg(&rpath));
    ok(installed(&mut Command::new(&exe)).current_dir(&runs).env("SCOPE_PROFILER_FILE", runs.join("pkgconfig_c_before.h5")));
    assert_eq!(read_back(&runs.join("pkgconfig_c_before.h5"), "C", 1), vec![calls(&[("step", 3)])]);

    // --- the README's main command: build and run n-body on 2 ranks, show the profile -------------
    let out_dir = runs.join("nbody-script");
    let out = ok(Command::new(root.join("examples/run_nbody_mpi.sh"))
        .args(["300", "3"])
        .env("BUILD_DIR", &build)
        .env("OUT_DIR", &out_dir)
        .env("SCOPE_PROFILER_PYTHON", python()));
    assert!(out.contains("nbody: 300 bodies, 3 steps, 2 rank(s)"), "{out}");
    assert!(out.contains("scope_profiler summary (call paths; 2 ranks: time per rank"), "{out}");
    // The inspector's view of the same file: both ranks, the kernels.
    assert!(out.contains("== scope-profiler inspect") && out.contains("2 rank(s), 5 region(s)"), "{out}");
    let file = out_dir.join("nbody_mpi.h5");
    let ranks = read_back(&file, "C", 2);
    for r in &ranks {
        assert_eq!(r["force_div"], 3);
        assert_eq!(r["exchange"], 3);
    }
}
