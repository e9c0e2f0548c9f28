//! Under MPI with SCOPE_PROFILER_VERBOSE=2, rank 0's summary table comes out whole: no other
//! rank's line lands inside it, with stdout and stderr of every rank going to one file (as
//! `mpirun ... > log 2>&1` does). Every rank prints its finalize notes before a barrier that
//! rank 0 waits for before the table; without it, other ranks' notes were forwarded while the
//! table was (in 2 of 5 runs of 6 ranks here).

mod support;
use support::*;

use std::process::{Command, Stdio};

#[test]
fn no_rank_prints_inside_rank_0s_summary_table() {
    let dir = scratch("mpi_output_order");
    let exe = compile_with("mpicc", &["-std=c99", "-D_GNU_SOURCE"], "mpi_summary_order", &["tests/c/mpi_summary_order.c"], &dir, &[]);
    let ranks = 4;
    for attempt in 0..4 {
        let log_path = dir.join(format!("run{attempt}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let mut cmd = Command::new("mpirun");
        cmd.args(["--oversubscribe", "-np", &ranks.to_string()])
            .arg(&exe)
            .arg(dir.join("order.h5"))
            .current_dir(&dir)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("SCOPE_PROFILER_VERBOSE", "2")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let status = cmd.status().unwrap();
        let output = std::fs::read_to_string(&log_path).unwrap();
        assert!(status.success(), "{cmd:?} failed: {status}\n{output}");
        let lines: Vec<&str> = output.lines().collect();
        let first = lines.iter().position(|l| l.starts_with("scope_profiler summary")).unwrap_or_else(|| panic!("no summary table:\n{output}"));
        let last = lines.iter().position(|l| l.starts_with("profile written to")).unwrap_or_else(|| panic!("no 'profile written':\n{output}"));
        let table = &lines[first..=last];
        // The header, 40 regions and the closing line, and nothing else between them.
        let foreign: Vec<&&str> = table.iter().filter(|l| l.starts_with("[scope_profiler]") || l.contains("finalize:")).collect();
        assert!(foreign.is_empty(), "run {attempt}: lines of other ranks inside rank 0's table: {foreign:?}\n{output}");
        assert_eq!(table.iter().filter(|l| l.contains(" of the summary table")).count(), 40, "run {attempt}:\n{output}");
        // Every rank's notes are there, whole lines, before the table.
        let notes: Vec<usize> = lines.iter().enumerate().filter(|(_, l)| l.starts_with("[scope_profiler] finalize: collecting")).map(|(i, _)| i).collect();
        assert_eq!(notes.len(), ranks, "run {attempt}: one finalize note per rank:\n{output}");
        assert!(notes.iter().all(|&i| i < first), "run {attempt}: notes after the table:\n{output}");
    }
}

/// A summary whose region names take more than one broadcast block (4 KB; 150 names of 31
/// characters, twice: flat and as paths), as do the census's: every region is in rank 0's
/// table, each with every rank's calls.
#[test]
fn a_summary_of_many_regions_over_mpi() {
    let dir = scratch("mpi_summary_many");
    let exe = compile_with("mpicc", &["-std=c99", "-D_GNU_SOURCE"], "mpi_summary_order", &["tests/c/mpi_summary_order.c"], &dir, &[]);
    let (ranks, regions) = (3, 150);
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "-np", &ranks.to_string()])
        .arg(&exe)
        .arg(dir.join("many.h5"))
        .arg(regions.to_string())
        .current_dir(&dir)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("SCOPE_PROFILER_VERBOSE", "1")
        .env("SCOPE_PROFILER_SUMMARY", "flat")
        .env("SCOPE_PROFILER_SUMMARY_ROWS", "all")
        .env("COLUMNS", "199")
        .stdin(Stdio::null());
    let out = run(&mut cmd);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{cmd:?} failed\n{stdout}\n{stderr}");
    assert!(stdout.contains(&format!("scope_profiler summary (regions; {ranks} ranks")), "{stdout}\n{stderr}");
    // Rank r made 200 (r + 1) calls of each region.
    let calls: usize = (0..ranks).map(|r| 200 * (r + 1)).sum();
    for r in 0..regions {
        let name = format!("region {r:02} of the summary table");
        let row = stdout.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("no row for {name}:\n{stdout}"));
        let first = row[name.len()..].split_whitespace().next().unwrap_or("");
        assert_eq!(first, calls.to_string(), "{row}");
    }
}
