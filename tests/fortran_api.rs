//! The Fortran module (fortran/scope_profiler.f90) end to end: compiled warning-free with
//! `-std=f2008 -Wall -Wextra -Werror` by gfortran and mpif90, test programs built against it
//! and the library, and the files they leave read back: region names, exact call counts,
//! `language` = Fortran, misuse reported through `ierr`, and MPI runs over 2 ranks.

mod support;
use support::*;

#[path = "fortran/support.rs"]
mod fortran_support;
use fortran_support::{build_fortran, mpirun};

use std::process::Command;

#[test]
fn fortran_module_records_exact_calls_and_reports_misuse_through_ierr() {
    let dir = scratch("fortran_api");
    let exe = build_fortran("gfortran", "tests/fortran/api_usage.f90", &dir, "api_usage", &[]);
    let file = dir.join("fortran.h5");
    let out = run(Command::new(&exe).arg(&file).current_dir(&dir));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "program failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("DONE failures=0"), "{stdout}\n{stderr}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
    // verbosity=0 through the options: no summary table.
    assert!(!stdout.contains("scope_profiler summary"), "{stdout}");
    // The version the module reports is the library's.
    assert!(stdout.contains(&format!("VERSION {}\n", env!("CARGO_PKG_VERSION"))), "{stdout}");
    // Calls without ierr fail quietly for the program, loudly on stderr.
    assert!(stderr.contains("'also never started'"), "{stderr}");
    // file_path with trailing blanks: the trimmed path, and no stray file in the cwd.
    assert!(file.exists(), "no file at {}", file.display());
    assert!(!dir.join("profiling_data.h5").exists());

    let h5 = hdf5::File::open(&file).unwrap();
    let meta = h5.group("metadata").unwrap();
    assert_eq!(str_attr(&meta, "language"), "Fortran");
    assert_eq!(int_attr(&meta, "mpi_size"), 1);
    // clock=" monotonic " (blanks trimmed) reached the library.
    assert_eq!(str_attr(&meta, "clock_mode"), "monotonic");
    assert_eq!(str_attr(&h5.group("rank0").unwrap(), "clock"), "monotonic");
    let expected = expectations(&stdout);
    assert_eq!(expected.len(), 7, "{stdout}");
    let regions = read_regions(&h5, 0);
    let names: Vec<&String> = regions.keys().collect();
    assert_eq!(names, expected.keys().collect::<Vec<_>>(), "no other regions: misuse records nothing");
    for (name, &calls) in &expected {
        let r = &regions[name];
        assert_eq!(r.starts.len() as u64, calls, "calls of {name:?}");
        assert_eq!((r.open_calls, r.dropped_calls), (0, 0), "{name:?}");
    }
    // Trailing blanks are not part of a name; '/' is '|' in the group name.
    assert!(regions.contains_key("padded name"));
    assert_eq!(regions["io/write"].group, "io|write");
    // Nesting: every inner call lies in its outer call.
    let (outer, inner) = (&regions["outer"], &regions["inner"]);
    for i in 0..5 {
        assert!(outer.starts[i] <= inner.starts[i] && inner.ends[i] <= outer.ends[i]);
    }
    // Recursion: properly nested calls (sorted by start, so the ends decrease).
    assert!(regions["recurse"].ends.windows(2).all(|w| w[0] > w[1]));
}

/// The layout option and the live statistics from Fortran, read back through the PyPI reader.
#[test]
fn fortran_layout_option_and_live_statistics() {
    let dir = scratch("fortran_live_stats");
    let exe = build_fortran("gfortran", "tests/fortran/live_stats.f90", &dir, "live_stats", &[]);
    for layout in ["aggregate", "columnar"] {
        let file = dir.join(format!("{layout}.h5"));
        // The monotonic clock: live statistics and the file then agree exactly (see tests/layouts.rs
        // for the TSC clock, where they agree to its error bound).
        let out = run(Command::new(&exe).arg(&file).arg(layout).current_dir(&dir).env("SCOPE_PROFILER_CLOCK", "monotonic"));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success() && stdout.contains("DONE failures=0"), "{stdout}\n{stderr}");
        assert!(stdout.contains("scope_profiler summary") && stdout.contains("fortran loop"), "{stdout}");
        let stats: Vec<i64> = stdout.lines().find_map(|l| l.strip_prefix("STATS ")).unwrap().split(' ').map(|v| v.parse().unwrap()).collect();
        let py = python_view(&file);
        assert_eq!(py["storage_layout"], layout);
        let r = &py["regions"]["fortran loop"]["0"];
        assert_eq!(r["calls"], 250);
        assert_eq!((r["total_ns"].as_i64(), r["min_ns"].as_i64(), r["max_ns"].as_i64()), (Some(stats[1]), Some(stats[2]), Some(stats[3])));
    }
}

#[test]
fn fortran_setup_without_arguments_uses_the_environment() {
    let dir = scratch("fortran_defaults");
    let exe = build_fortran("gfortran", "tests/fortran/defaults.f90", &dir, "defaults", &[]);
    // No arguments, and a blank file_path (which counts as not given).
    for arg in ["", "blank"] {
        let file = dir.join(format!("from_env_{arg}.h5"));
        let out = run(Command::new(&exe)
            .arg(arg)
            .current_dir(&dir)
            .env("SCOPE_PROFILER_FILE", &file)
            .env_remove("SCOPE_PROFILER_VERBOSE"));
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
        assert!(stdout.contains("DONE failures=0"), "{arg}: {stdout}");
        // Default verbosity prints the summary table, naming the file from the environment.
        assert!(stdout.contains("scope_profiler summary"), "{stdout}");
        assert!(stdout.contains(&format!("profile written to {}", file.display())), "{stdout}");
        let h5 = hdf5::File::open(&file).unwrap();
        assert_eq!(str_attr(&h5.group("metadata").unwrap(), "language"), "Fortran");
        let regions = read_regions(&h5, 0);
        assert_eq!(regions.keys().collect::<Vec<_>>(), ["step"]);
        assert_eq!(regions["step"].starts.len(), 4);
    }
}

#[test]
fn fortran_disabled_profiling_accepts_every_call() {
    let dir = scratch("fortran_disabled");
    let exe = build_fortran("gfortran", "tests/fortran/defaults.f90", &dir, "defaults", &[]);
    let out = run(Command::new(&exe).current_dir(&dir).env("SCOPE_PROFILER_DISABLE", "1"));
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("DONE failures=0"), "{}", text(&out.stdout));
    assert!(!dir.join("profiling_data.h5").exists());
}

#[test]
fn fortran_mpi_program_profiles_every_rank_into_one_file() {
    let dir = scratch("fortran_mpi");
    let exe = build_fortran("mpif90", "tests/fortran/mpi_usage.f90", &dir, "mpi_usage", &[]);
    let file = dir.join("fortran_mpi.h5");
    let out = run(mpirun(2).arg(&exe).arg(&file).current_dir(&dir));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stdout.matches("DONE failures=0").count(), 2, "{stdout}\n{stderr}");
    let h5 = hdf5::File::open(&file).unwrap();
    let meta = h5.group("metadata").unwrap();
    assert_eq!(str_attr(&meta, "language"), "Fortran");
    assert_eq!(int_attr(&meta, "mpi_size"), 2);
    for rank in 0..2usize {
        let regions = read_regions(&h5, rank);
        assert_eq!(regions.keys().collect::<Vec<_>>(), ["common", "halo/exchange", "rank work"], "rank {rank}");
        assert_eq!(regions["rank work"].starts.len(), rank + 1, "rank {rank}");
        assert_eq!(regions["common"].starts.len(), 3, "rank {rank}");
        assert_eq!(regions["halo/exchange"].starts.len(), 10, "rank {rank}");
    }
    assert!(h5.group("rank2").is_err());
}

/// The module's SP_* constants and its bind(C) copy of sp_options must follow the header.
#[test]
fn fortran_constants_and_options_layout_match_the_c_header() {
    let root = repo_root();
    let header = std::fs::read_to_string(root.join("include/scope_profiler.h")).unwrap();
    let module = std::fs::read_to_string(root.join("fortran/scope_profiler.f90")).unwrap();

    let c_consts: std::collections::BTreeMap<String, i64> = header
        .lines()
        .filter_map(|l| l.strip_prefix("#define SP_"))
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (name, value) = (it.next()?, it.next()?);
            Some((format!("SP_{name}"), value.parse().ok()?))
        })
        .collect();
    let f_consts: std::collections::BTreeMap<String, i64> = module
        .lines()
        .filter_map(|l| l.trim().strip_prefix("integer, parameter, public :: "))
        .filter_map(|l| {
            let (name, value) = l.split_once('=')?;
            Some((name.trim().to_string(), value.trim().parse().ok()?))
        })
        .collect();
    assert!(c_consts.len() >= 20, "{c_consts:?}");
    assert_eq!(f_consts, c_consts, "fortran/scope_profiler.f90 constants differ from include/scope_profiler.h");

    // Field types of struct sp_options, in order, against the Fortran derived type.
    let body = header.split("typedef struct sp_options {").nth(1).unwrap().split("} sp_options;").next().unwrap();
    let c_fields: Vec<&str> = body
        .lines()
        .map(str::trim)
        .filter(|l| l.ends_with(';'))
        .map(|l| match l {
            l if l.starts_with("size_t ") => "integer(c_size_t)",
            l if l.starts_with("const char *") => "type(c_ptr)",
            l if l.starts_with("int32_t ") => "integer(c_int32_t)",
            other => panic!("sp_options field of unmapped type: {other}"),
        })
        .collect();
    let f_body = module.split("type, bind(C) :: sp_options_t").nth(1).unwrap().split("end type").next().unwrap();
    let f_fields: Vec<&str> = f_body
        .lines()
        .map(str::trim)
        .filter(|l| l.contains("::"))
        .map(|l| l.split("::").next().unwrap().trim())
        .collect();
    assert_eq!(f_fields, c_fields, "sp_options_t no longer matches struct sp_options");
}
