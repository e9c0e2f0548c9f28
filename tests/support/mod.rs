//! Shared by the integration tests: building C/C++ test programs against the freshly built
//! library and the committed header, running them, and finding the Python oracle.
#![allow(dead_code)]

pub mod adapters;
pub mod programs;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// target/<profile>, where cargo put libscope_profiler.so for this test run.
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().to_path_buf(); // .../deps/.. 
    assert!(dir.join("libscope_profiler.so").exists(), "libscope_profiler.so not found in {}", dir.display());
    dir
}

/// Where this test run's libscope_profiler.so is: `cargo test` builds it in target/<profile>/deps
/// (only `cargo build` copies it up to target/<profile>), so prefer that one: a test must never
/// run against a stale library.
pub fn link_dir() -> PathBuf {
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    if deps.join("libscope_profiler.so").exists() { deps } else { lib_dir() }
}

/// A fresh directory for one test's files.
pub fn scratch(name: &str) -> PathBuf {
    let dir = lib_dir().join("test-scratch").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[derive(Clone, Copy)]
pub enum Lang {
    C,
    Cxx,
}

/// Compile `sources` (relative to the repo root) into `out_dir/name` with strict warnings,
/// linked to libscope_profiler.so with an rpath. `extra` goes last (libraries, defines).
pub fn compile(lang: Lang, name: &str, sources: &[&str], out_dir: &Path, extra: &[&str]) -> PathBuf {
    let (compiler, std) = match lang {
        Lang::C => (std::env::var("CC").unwrap_or_else(|_| "cc".into()), "-std=c99"),
        Lang::Cxx => (std::env::var("CXX").unwrap_or_else(|_| "c++".into()), "-std=c++11"),
    };
    compile_with(&compiler, &[std, "-D_GNU_SOURCE"], name, sources, out_dir, extra)
}

pub fn compile_with(compiler: &str, flags: &[&str], name: &str, sources: &[&str], out_dir: &Path, extra: &[&str]) -> PathBuf {
    let out = out_dir.join(name);
    let lib = link_dir();
    let root = repo_root();
    let mut cmd = Command::new(compiler);
    cmd.args(flags)
        .args(["-O2", "-g", "-Wall", "-Wextra", "-Wpedantic", "-Werror"])
        .arg(format!("-I{}", root.join("include").display()))
        .args(sources.iter().map(|s| root.join(s)))
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}", lib.display()))
        // DT_RPATH (not RUNPATH) wins over the LD_LIBRARY_PATH cargo test sets, which may
        // point at an older copy of the library in target/<profile>.
        .arg("-Wl,--disable-new-dtags")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lscope_profiler")
        .args(extra);
    let output = run(&mut cmd);
    assert!(
        output.status.success(),
        "compiling {name} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

/// Compile the C program `source` (relative to the repo root) into `out_dir/name` with strict
/// warnings, not linked to the library: a host that loads it itself (`dlopen`).
pub fn compile_host(name: &str, source: &str, out_dir: &Path) -> PathBuf {
    let out = out_dir.join(name);
    let mut cmd = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cmd.args(["-std=c99", "-D_GNU_SOURCE", "-O2", "-g", "-Wall", "-Wextra", "-Werror"])
        .arg(repo_root().join(source))
        .arg("-o")
        .arg(&out)
        .args(["-ldl", "-lpthread"]);
    let output = run(&mut cmd);
    assert!(output.status.success(), "compiling {name} failed:\n{}", String::from_utf8_lossy(&output.stderr));
    out
}

/// Run a command to completion, failing the test on a timeout (300 s). The program's command
/// line, exit status and output tails are printed if the test fails (see [`programs`]).
pub fn run(cmd: &mut Command) -> Output {
    programs::run_with_timeout(cmd, std::time::Duration::from_secs(300))
}

/// How many CPUs this process may run on (its affinity mask, which taskset or a cgroup
/// cpuset may limit below the machine's count).
pub fn usable_cpus() -> usize {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return std::thread::available_parallelism().map_or(1, |n| n.get());
        }
        libc::CPU_COUNT(&set) as usize
    }
}

/// Fail in one line, before running anything, where fewer than `n` CPUs are usable: the
/// test runs `what` on `n` CPUs. The suite needs 2; any count above works.
#[track_caller]
pub fn need_cpus(n: usize, what: &str) {
    let have = usable_cpus();
    assert!(have >= n, "this test needs {n} CPUs ({what}) but this process may use {have} (taskset or a cgroup cpuset limits it)");
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The Python interpreter with scope-profiler from PyPI: $SCOPE_PROFILER_PYTHON, else
/// <repo>/.venv/bin/python. Missing is a failure, not a skip: the interop check is required.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SCOPE_PROFILER_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = repo_root().join(".venv/bin/python");
    assert!(
        venv.exists(),
        "no Python with scope-profiler: run scripts/setup-python.sh or set SCOPE_PROFILER_PYTHON"
    );
    venv
}

/// `EXPECT\t<calls>\t<name>` lines a test program prints about what it did.
pub fn expectations(stdout: &str) -> std::collections::BTreeMap<String, u64> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("EXPECT\t"))
        .map(|l| {
            let (calls, name) = l.split_once('\t').unwrap();
            (name.to_string(), calls.parse().unwrap())
        })
        .collect()
}

/// A region as read back with the hdf5 crate.
#[derive(Debug, Clone)]
pub struct ReadRegion {
    pub group: String,
    pub tag: String,
    pub starts: Vec<i64>,
    pub ends: Vec<i64>,
    pub thread_ids: Vec<i64>,
    pub open_calls: i64,
    pub dropped_calls: i64,
}

pub fn str_attr(loc: &hdf5::Location, name: &str) -> String {
    loc.attr(name)
        .unwrap_or_else(|e| panic!("attribute {name}: {e}"))
        .read_scalar::<hdf5::types::VarLenUnicode>()
        .unwrap()
        .as_str()
        .to_string()
}

pub fn int_attr(loc: &hdf5::Location, name: &str) -> i64 {
    loc.attr(name).unwrap_or_else(|e| panic!("attribute {name}: {e}")).read_scalar::<i64>().unwrap()
}

pub fn int_list_attr(loc: &hdf5::Location, name: &str) -> Vec<i64> {
    loc.attr(name).unwrap_or_else(|e| panic!("attribute {name}: {e}")).read_raw::<i64>().unwrap()
}

/// The row of `rank` in the rank table of a schema-3 file (`scope_profiler_ranks`).
fn rank_row(file: &hdf5::File, rank: usize) -> usize {
    let ranks: Vec<u32> = file.dataset("scope_profiler_ranks/ranks").unwrap_or_else(|e| panic!("rank table: {e}")).read_raw().unwrap();
    ranks.iter().position(|&r| r as usize == rank).unwrap_or_else(|| panic!("rank {rank} not in the rank table {ranks:?}"))
}

/// An integer attribute of rank `rank`: of its `rank<N>` group (schema 1), else its row of the
/// rank table (schema 3; None where the rank has no value).
pub fn rank_int(file: &hdf5::File, rank: usize, name: &str) -> Option<i64> {
    if let Ok(g) = file.group(&format!("rank{rank}")) {
        if g.attr(name).is_ok() {
            return Some(int_attr(&g, name));
        }
    }
    let v: Vec<i64> = file.dataset(&format!("scope_profiler_ranks/{name}")).ok()?.read_raw().unwrap();
    Some(v[rank_row(file, rank)]).filter(|&v| v != i64::MIN)
}

/// A string attribute of rank `rank` (see `rank_int`; fixed-length strings in the table).
pub fn rank_str(file: &hdf5::File, rank: usize, name: &str) -> Option<String> {
    if let Ok(g) = file.group(&format!("rank{rank}")) {
        if g.attr(name).is_ok() {
            return Some(str_attr(&g, name));
        }
    }
    let ds = file.dataset(&format!("scope_profiler_ranks/{name}")).ok()?;
    let w = ds.dtype().unwrap().size();
    let row = rank_row(file, rank);
    let bytes: Vec<u8> = fixed_bytes(&ds);
    let cell = &bytes[row * w..(row + 1) * w];
    let s = String::from_utf8(cell[..cell.iter().position(|&b| b == 0).unwrap_or(w)].to_vec()).unwrap();
    Some(s).filter(|s| !s.is_empty())
}

/// An integer list attribute of rank `rank` (see `rank_int`; values and offsets in the table).
pub fn rank_int_list(file: &hdf5::File, rank: usize, name: &str) -> Option<Vec<i64>> {
    if let Ok(g) = file.group(&format!("rank{rank}")) {
        if g.attr(name).is_ok() {
            return Some(int_list_attr(&g, name));
        }
    }
    let values: Vec<i64> = file.dataset(&format!("scope_profiler_ranks/{name}")).ok()?.read_raw().unwrap();
    let offsets: Vec<u64> = file.dataset(&format!("scope_profiler_ranks/{name}_offsets")).unwrap().read_raw().unwrap();
    let row = rank_row(file, rank);
    Some(values[offsets[row] as usize..offsets[row + 1] as usize].to_vec())
}

/// A string dataset, variable-length or fixed-length (NUL-padded).
pub fn strings(ds: &hdf5::Dataset) -> Vec<String> {
    if ds.dtype().unwrap().is::<hdf5::types::VarLenUnicode>() {
        return ds.read_raw::<hdf5::types::VarLenUnicode>().unwrap().iter().map(|s| s.to_string()).collect();
    }
    let w = ds.dtype().unwrap().size();
    fixed_bytes(ds).chunks(w.max(1)).map(|c| String::from_utf8(c[..c.iter().position(|&b| b == 0).unwrap_or(c.len())].to_vec()).unwrap()).collect()
}

/// The raw bytes of a fixed-length string dataset (h5py reads them as numpy `S` arrays).
pub fn fixed_bytes(ds: &hdf5::Dataset) -> Vec<u8> {
    let n = ds.size() * ds.dtype().unwrap().size();
    let mut buf = vec![0u8; n];
    if n > 0 {
        let rc = unsafe {
            let ty = hdf5_sys::h5d::H5Dget_type(ds.id());
            let rc = hdf5_sys::h5d::H5Dread(ds.id(), ty, hdf5_sys::h5s::H5S_ALL, hdf5_sys::h5s::H5S_ALL, hdf5_sys::h5p::H5P_DEFAULT, buf.as_mut_ptr().cast());
            hdf5_sys::h5t::H5Tclose(ty);
            rc
        };
        assert!(rc >= 0, "reading {}", ds.name());
    }
    buf
}

/// All regions of `rank<rank>/`, keyed by their real name (the `tag` attribute).
pub fn read_regions(file: &hdf5::File, rank: usize) -> std::collections::BTreeMap<String, ReadRegion> {
    let regions = file.group(&format!("rank{rank}/regions")).unwrap();
    let mut out = std::collections::BTreeMap::new();
    for group in regions.member_names().unwrap() {
        let g = regions.group(&group).unwrap();
        let r = ReadRegion {
            tag: str_attr(&g, "tag"),
            starts: g.dataset("start_times").unwrap().read_raw().unwrap(),
            ends: g.dataset("end_times").unwrap().read_raw().unwrap(),
            thread_ids: g.dataset("thread_ids").unwrap().read_raw().unwrap(),
            open_calls: int_attr(&g, "open_calls"),
            dropped_calls: int_attr(&g, "dropped_calls"),
            group,
        };
        assert_eq!(r.starts.len(), r.ends.len());
        assert_eq!(r.starts.len(), r.thread_ids.len());
        assert!(r.starts.iter().zip(&r.ends).all(|(s, e)| e >= s), "end before start in {}", r.tag);
        assert!(r.starts.is_sorted(), "starts not sorted in {}", r.tag);
        out.insert(r.tag.clone(), r);
    }
    out
}

/// What scope_profiler.read_h5 (the PyPI package) sees: rank -> region -> (calls, total ns).
pub fn python_view(file: &Path) -> serde_json::Value {
    let out = run(Command::new(python()).arg(repo_root().join("tests/python/read_profile.py")).arg(file));
    assert!(out.status.success(), "read_profile.py failed:\n{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("bad JSON from read_profile.py: {e}\n{}", text(&out.stdout)))
}

/// The prefix of LIKWID 5.5.1, the second supported LIKWID version, built from the vendored
/// tarball by scripts/likwid55.sh into the ignored `.likwid/` (the first call builds it, about
/// 30 s; later calls and later runs reuse it). `None` where the tarball is absent (outside this
/// project's machines): the 5.5 tests are then skipped by design, and say so in one line.
/// A failed build is a test failure.
pub fn likwid55() -> Option<PathBuf> {
    static PREFIX: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    PREFIX
        .get_or_init(|| {
            let out = run(&mut Command::new(repo_root().join("scripts/likwid55.sh")));
            match out.status.code() {
                Some(0) => Some(PathBuf::from(text(&out.stdout).trim())),
                Some(3) => {
                    eprintln!("LIKWID 5.5 tests skipped by design: {}", text(&out.stderr).trim());
                    None
                }
                _ => panic!("building LIKWID 5.5.1 failed:\n{}", text(&out.stderr)),
            }
        })
        .clone()
}
