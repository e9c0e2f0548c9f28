//! Shared by the tests of the adapters for other tools' annotations (tests/kokkos.rs,
//! tests/nvtx.rs): the library as the tool, the programs' outcome, the nesting of calls and
//! the call paths read back from the file, and sptool's views.

use super::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The library, as the other tool loads it (`KOKKOS_PROFILE_LIBRARY`, `NVTX_INJECTION64_PATH`).
pub fn lib() -> PathBuf {
    link_dir().join("libscope_profiler.so")
}

/// Link the program `cmd` builds with the library (DT_RPATH, which wins over the
/// LD_LIBRARY_PATH cargo test sets).
pub fn link_library(cmd: &mut Command) {
    let l = link_dir();
    cmd.arg(format!("-L{}", l.display())).arg("-Wl,--disable-new-dtags").arg(format!("-Wl,-rpath,{}", l.display())).arg("-lscope_profiler");
}

/// The program ran and succeeded (else its output in the failure).
pub fn ok(out: &Output) {
    assert!(out.status.success(), "the program failed:\n{}{}", text(&out.stdout), text(&out.stderr));
}

/// Calls of region `name` (0 when it is not in the file).
pub fn calls(regions: &BTreeMap<String, ReadRegion>, name: &str) -> usize {
    regions.get(name).map_or(0, |r| r.starts.len())
}

/// Calls of region `name` per thread id.
pub fn per_thread(regions: &BTreeMap<String, ReadRegion>, name: &str) -> BTreeMap<i64, usize> {
    let mut out = BTreeMap::new();
    if let Some(r) = regions.get(name) {
        for &t in &r.thread_ids {
            *out.entry(t).or_insert(0) += 1;
        }
    }
    out
}

/// Every call of `inner` lies within a call of `outer` on the same thread.
pub fn nested(regions: &BTreeMap<String, ReadRegion>, inner: &str, outer: &str) {
    let (i, o) = (&regions[inner], &regions[outer]);
    for k in 0..i.starts.len() {
        let t = i.thread_ids[k];
        let inside = (0..o.starts.len()).any(|j| o.thread_ids[j] == t && o.starts[j] <= i.starts[k] && i.ends[k] <= o.ends[j]);
        assert!(inside, "call {k} of '{inner}' (thread {t}) is not inside a call of '{outer}'");
    }
}

/// sptool (built by `cargo build --workspace`) with `args`: its standard output.
pub fn sptool(args: &[&str]) -> String {
    let exe = lib_dir().join("sptool");
    assert!(exe.exists(), "{} not found: run `cargo build --workspace` first", exe.display());
    let out = run(Command::new(&exe).args(args).env_remove("COLUMNS"));
    assert!(out.status.success(), "sptool {args:?} failed:\n{}", text(&out.stderr));
    text(&out.stdout)
}

/// A string-list attribute of rank `rank` (see `rank_int_list`).
pub fn rank_str_list(file: &hdf5::File, rank: usize, name: &str) -> Option<Vec<String>> {
    if let Ok(g) = file.group(&format!("rank{rank}")) {
        if let Ok(a) = g.attr(name) {
            return Some(a.read_raw::<hdf5::types::VarLenUnicode>().unwrap().iter().map(|s| s.to_string()).collect());
        }
    }
    let values = strings(&file.dataset(&format!("scope_profiler_ranks/{name}")).ok()?);
    let offsets: Vec<u64> = file.dataset(&format!("scope_profiler_ranks/{name}_offsets")).unwrap().read_raw().unwrap();
    let ranks: Vec<u32> = file.dataset("scope_profiler_ranks/ranks").unwrap().read_raw().unwrap();
    let row = ranks.iter().position(|&r| r as usize == rank).unwrap();
    Some(values[offsets[row] as usize..offsets[row + 1] as usize].to_vec())
}

/// One node of a rank's call paths: its thread, its path from the top, calls, inclusive and
/// exclusive ns.
#[derive(Debug, Clone)]
pub struct PathRow {
    pub thread: i64,
    pub path: Vec<String>,
    pub calls: i64,
    pub inclusive_ns: i64,
    pub exclusive_ns: i64,
}

/// Rank `rank`'s call paths, from the file-wide `call_paths/` table (columnar, aggregate) or
/// its `rank<N>/call_paths` group (regions).
pub fn call_paths(file: &Path, rank: usize) -> Vec<PathRow> {
    let h5 = hdf5::File::open(file).unwrap();
    let names_of = |ds: hdf5::Dataset| -> Vec<String> { ds.read_raw::<hdf5::types::VarLenUnicode>().unwrap().iter().map(|s| s.to_string()).collect() };
    let (names, cols) = if let Ok(g) = h5.group("call_paths") {
        let col = |n: &str| g.dataset(n).unwrap_or_else(|e| panic!("call_paths/{n}: {e}")).read_raw::<i64>().unwrap();
        let ranks = col("ranks");
        let keep = |v: Vec<i64>| -> Vec<i64> { v.into_iter().zip(&ranks).filter(|(_, r)| **r == rank as i64).map(|(x, _)| x).collect() };
        let cols = [col("threads"), col("parents"), col("regions"), col("calls"), col("inclusive_ns"), col("exclusive_ns")].map(keep);
        (names_of(h5.dataset("region_table/names").unwrap()), cols)
    } else {
        let g = h5.group(&format!("rank{rank}/call_paths")).unwrap_or_else(|e| panic!("rank{rank}/call_paths: {e}"));
        let col = |n: &str| g.dataset(n).unwrap().read_raw::<i64>().unwrap();
        (names_of(g.dataset("names").unwrap()), [col("thread"), col("parent"), col("region"), col("calls"), col("inclusive_ns"), col("exclusive_ns")])
    };
    let [thread, parent, region, calls, incl, excl] = cols;
    let mut rows: Vec<PathRow> = Vec::with_capacity(thread.len());
    for k in 0..thread.len() {
        // Parents count from the rank's first row and come before their children.
        assert!(parent[k] >= -1 && parent[k] < k as i64, "parent of call-path row {k}");
        let mut path = if parent[k] < 0 { Vec::new() } else { rows[parent[k] as usize].path.clone() };
        path.push(names[region[k] as usize].clone());
        rows.push(PathRow { thread: thread[k], path, calls: calls[k], inclusive_ns: incl[k], exclusive_ns: excl[k] });
    }
    rows
}
