//! Source locations end to end: C (SP_REGION_START/STOP, sp_region_register_at), C++ (SP_SCOPE)
//! and Fortran (sp_region_register with file=__FILE__, line=__LINE__) programs record where
//! their regions are defined; the files are read back with the hdf5 crate and with the PyPI
//! package (Region.source_file, .source_lineno) as the oracle.

mod support;
use support::*;

#[path = "fortran/support.rs"]
mod fortran_support;
use fortran_support::build_fortran;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// `AT\t<name>\t<line>` lines: where the program says each region is defined.
fn locations(stdout: &str) -> BTreeMap<String, i64> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("AT\t"))
        .map(|l| {
            let (name, line) = l.rsplit_once('\t').unwrap();
            (name.to_string(), line.parse().unwrap())
        })
        .collect()
}

/// Check every region of the file against the program's AT lines (regions without one must
/// have no location), through the hdf5 crate and through the PyPI reader.
fn check_file(file: &Path, source: &Path, stdout: &str) {
    let expected = expectations(stdout);
    let at = locations(stdout);
    assert!(!at.is_empty(), "{stdout}");
    let h5 = hdf5::File::open(file).unwrap();
    let regions = read_regions(&h5, 0);
    assert_eq!(regions.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>(), "{stdout}");
    let group = h5.group("rank0/regions").unwrap();
    let py = python_view(file);
    for (name, r) in &regions {
        assert_eq!(r.starts.len() as u64, expected[name], "calls of {name}");
        let g = group.group(&r.group).unwrap();
        let pyr = &py["regions"][&r.group]["0"];
        assert_eq!(pyr["calls"].as_u64().unwrap(), expected[name], "{name}: {pyr}");
        match (at.get(name), name.as_str()) {
            (Some(&line), "counted") => {
                assert_eq!(str_attr(&g, "source_file"), "counted.f90");
                assert_eq!(int_attr(&g, "source_lineno"), line);
                assert_eq!(pyr["source_file"], "counted.f90");
                assert_eq!(pyr["source_lineno"], line);
            }
            (Some(0), _) => {
                assert_eq!(str_attr(&g, "source_file"), source.display().to_string(), "{name}");
                assert!(g.attr("source_lineno").is_err(), "{name}: line 0 is not written");
                assert_eq!(pyr["source_file"].as_str().unwrap(), source.display().to_string(), "{name}: {pyr}");
                assert!(pyr["source_lineno"].is_null(), "{name}: {pyr}");
            }
            (Some(&line), _) => {
                assert_eq!(str_attr(&g, "source_file"), source.display().to_string(), "{name}");
                assert_eq!(int_attr(&g, "source_lineno"), line, "{name}");
                assert_eq!(pyr["source_file"].as_str().unwrap(), source.display().to_string(), "{name}: {pyr}");
                assert_eq!(pyr["source_lineno"].as_i64().unwrap(), line, "{name}: {pyr}");
            }
            (None, _) => {
                assert!(g.attr("source_file").is_err() && g.attr("source_lineno").is_err(), "{name} has a location");
                assert!(pyr["source_file"].is_null() && pyr["source_lineno"].is_null(), "{name}: {pyr}");
            }
        }
    }
}

#[test]
fn c_macros_and_register_at_record_locations() {
    let dir = scratch("source_locations_c");
    let exe = compile(Lang::C, "source_locations", &["tests/c/source_locations.c"], &dir, &[]);
    let file = dir.join("c.h5");
    let out = run(Command::new(&exe).arg(&file));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success() && stdout.contains("DONE failures=0"), "{stdout}\n{stderr}");
    // Registered from three places: one warning naming the kept (first) location.
    let warned: Vec<&str> = stderr.lines().filter(|l| l.contains("region 'solve' is registered at")).collect();
    assert_eq!(warned.len(), 1, "{stderr}");
    let source = repo_root().join("tests/c/source_locations.c");
    let solve_line = locations(&stdout)["solve"];
    assert!(warned[0].contains(&format!("keeping the first location, {}:{solve_line}", source.display())), "{stderr}");
    check_file(&file, &source, &stdout);

    // sptool inspect shows where each region is defined ("-" when unknown).
    let sptool = lib_dir().join("sptool");
    assert!(sptool.exists(), "{} not found: run `cargo build --workspace` first", sptool.display());
    let out = run(Command::new(&sptool).arg("inspect").arg(&file).env("COLUMNS", "400"));
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(shown.contains("defined at"), "{shown}");
    let row = |name: &str| shown.lines().find(|l| l.starts_with(&format!("  {name} "))).unwrap_or_else(|| panic!("{name}:\n{shown}")).to_string();
    assert!(row("solve").trim_end().ends_with(&format!("{}:{solve_line}", source.display())), "{shown}");
    assert!(row("counted").trim_end().ends_with("counted.f90:42"), "{shown}");
    assert!(row("no location").trim_end().ends_with(" -"), "{shown}");
    assert!(row("file only").trim_end().ends_with(&format!(" {}", source.display())), "{shown}");
}

#[test]
fn cxx_scope_records_its_call_site() {
    let dir = scratch("source_locations_cxx");
    let exe = compile(Lang::Cxx, "cxx_source_locations", &["tests/c/cxx_source_locations.cpp"], &dir, &[]);
    let file = dir.join("cxx.h5");
    let out = run(Command::new(&exe).arg(&file));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success() && stdout.contains("DONE failures=0"), "{stdout}\n{stderr}");
    assert!(!stderr.contains("registered at"), "one place per region: no warning\n{stderr}");
    check_file(&file, &repo_root().join("tests/c/cxx_source_locations.cpp"), &stdout);
}

#[test]
fn fortran_register_takes_file_and_line() {
    let dir = scratch("source_locations_fortran");
    let exe = build_fortran("gfortran", "tests/fortran/source_locations.F90", &dir, "source_locations", &["-cpp", "-ffree-line-length-none"]);
    let file = dir.join("fortran.h5");
    let out = run(Command::new(&exe).arg(&file));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success() && stdout.contains("DONE failures=0"), "{stdout}\n{stderr}");
    assert_eq!(stderr.matches("region 'fortran kernel' is registered at other.F90:3").count(), 1, "{stderr}");
    check_file(&file, &repo_root().join("tests/fortran/source_locations.F90"), &stdout);
}

/// The columnar layout keeps the locations in the Python package's schema-3 columns
/// (`rank_region_index/source_files`, `source_lines`): its reader shows the same locations as
/// the regions layout's attributes, and so does sptool.
#[test]
fn columnar_layout_keeps_locations() {
    let dir = scratch("source_locations_columnar");
    let exe = compile(Lang::C, "source_locations", &["tests/c/source_locations.c"], &dir, &[]);
    let (regions_file, columnar_file) = (dir.join("regions.h5"), dir.join("columnar.h5"));
    for (file, layout) in [(&regions_file, "regions"), (&columnar_file, "columnar")] {
        let out = run(Command::new(&exe).arg(file).env("SCOPE_PROFILER_LAYOUT", layout));
        assert!(out.status.success() && text(&out.stdout).contains("DONE failures=0"), "{layout}: {}", text(&out.stderr));
    }
    let (a, b) = (python_view(&regions_file), python_view(&columnar_file));
    assert_eq!(b["storage_layout"], "columnar");
    let names: Vec<&String> = a["regions"].as_object().unwrap().keys().collect();
    assert!(names.len() >= 4, "{a}");
    let mut located = 0;
    for name in names {
        let (ra, rb) = (&a["regions"][name]["0"], &b["regions"][name]["0"]);
        assert_eq!((&ra["source_file"], &ra["source_lineno"]), (&rb["source_file"], &rb["source_lineno"]), "{name}");
        located += ra["source_file"].is_string() as usize;
    }
    assert!(located >= 3, "{a}");
    let out = run(Command::new(lib_dir().join("sptool")).arg("inspect").arg(&columnar_file).env("COLUMNS", "400"));
    assert!(text(&out.stdout).contains("counted.f90:42"), "{}", text(&out.stdout));
}
