//! The library as an NVTX injection: a C program annotated with NVTX 3 only (the headers of the
//! PyPI wheel `nvidia-nvtx-cu12`, which scripts/setup.sh installs into .venv; no CUDA, no GPU)
//! run with `NVTX_INJECTION64_PATH`: push/pop on two threads, a domain with a registered
//! string, start/end ranges ended on another thread, marks, a thread name, misuse; linked
//! with regions of its own in between; and the adapter off.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::*;

fn lib() -> PathBuf {
    link_dir().join("libscope_profiler.so")
}

/// The NVTX headers of the wheel installed in the test Python's environment.
fn nvtx_include() -> PathBuf {
    let out = run(Command::new(python()).args(["-c", "import nvidia.nvtx, os; print(os.path.join(list(nvidia.nvtx.__path__)[0], 'include'))"]));
    assert!(out.status.success(), "the NVTX headers (PyPI nvidia-nvtx-cu12) are not installed: run scripts/setup.sh\n{}", text(&out.stderr));
    let dir = PathBuf::from(text(&out.stdout).trim());
    assert!(dir.join("nvtx3/nvToolsExt.h").exists(), "no nvtx3/nvToolsExt.h in {}", dir.display());
    dir
}

fn build(name: &str, dir: &Path, linked: bool) -> PathBuf {
    build_with(name, dir, linked, &[])
}

fn build_with(name: &str, dir: &Path, linked: bool, defines: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    let mut cmd = Command::new("cc");
    cmd.args(["-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{}", nvtx_include().display()))
        .arg(format!("-I{}", repo_root().join("include").display()))
        .args(defines)
        .arg(repo_root().join("tests/c/nvtx_app.c"))
        .arg("-o")
        .arg(&exe);
    if linked {
        let l = link_dir();
        cmd.arg("-DWITH_SP").arg(format!("-L{}", l.display())).arg("-Wl,--disable-new-dtags").arg(format!("-Wl,-rpath,{}", l.display())).arg("-lscope_profiler");
    }
    cmd.args(["-lpthread", "-ldl"]);
    let out = run(&mut cmd);
    assert!(out.status.success(), "building {name} failed:\n{}", text(&out.stderr));
    exe
}

fn ok(out: &Output) {
    assert!(out.status.success(), "the program failed:\n{}{}", text(&out.stdout), text(&out.stderr));
}

/// Calls of `name` per thread id.
fn per_thread(regions: &BTreeMap<String, ReadRegion>, name: &str) -> BTreeMap<i64, usize> {
    let mut out = BTreeMap::new();
    if let Some(r) = regions.get(name) {
        for &t in &r.thread_ids {
            *out.entry(t).or_insert(0) += 1;
        }
    }
    out
}

fn nested(regions: &BTreeMap<String, ReadRegion>, inner: &str, outer: &str) {
    let (i, o) = (&regions[inner], &regions[outer]);
    for k in 0..i.starts.len() {
        let t = i.thread_ids[k];
        let inside = (0..o.starts.len()).any(|j| o.thread_ids[j] == t && o.starts[j] <= i.starts[k] && i.ends[k] <= o.ends[j]);
        assert!(inside, "call {k} of '{inner}' (thread {t}) is not inside a call of '{outer}'");
    }
}

fn check(file: &Path, n: usize, own: bool, err: &str) {
    let f = hdf5::File::open(file).unwrap_or_else(|e| panic!("{}: {e}\n{err}", file.display()));
    let regions = read_regions(&f, 0);
    let names: Vec<&String> = regions.keys().collect();
    let main = regions["nv_outer"].thread_ids[0];
    let worker = regions["nv_worker"].thread_ids[0];
    assert_ne!(main, worker, "the worker's ranges are on the main thread");
    for (name, thread) in [
        ("nv_outer", main),
        ("nv_registered [nv_domain]", main),
        ("nv_ex", main),
        ("nv_mark [mark]", main),
        ("nv_ex [nv_domain, mark]", main),
        ("nv_worker", worker),
        ("nv_w\u{e9}de", worker),
        // Started on the main thread, ended on the worker: recorded where they end.
        ("nv_handed [range]", worker),
    ] {
        assert_eq!(per_thread(&regions, name), BTreeMap::from([(thread, n)]), "calls of '{name}' per thread: {names:?}\n{err}");
    }
    assert_eq!(per_thread(&regions, "sp_mine").values().sum::<usize>(), if own { n } else { 0 }, "{names:?}");
    nested(&regions, "nv_ex", "nv_registered [nv_domain]");
    nested(&regions, "nv_registered [nv_domain]", "nv_outer");
    nested(&regions, "nv_w\u{e9}de", "nv_worker");
    nested(&regions, "nv_mark [mark]", "nv_outer");
    if own {
        nested(&regions, "sp_mine", "nv_outer");
        nested(&regions, "nv_registered [nv_domain]", "sp_mine");
    }
    for m in ["nv_mark [mark]", "nv_ex [nv_domain, mark]"] {
        assert_eq!(regions[m].starts, regions[m].ends, "a mark has no duration");
    }
    // The misuse: the malformed message's range is not recorded, the non-UTF-8 one is.
    assert_eq!(per_thread(&regions, "\u{fffd}\u{fffd} not utf8").values().sum::<usize>(), 1, "{names:?}");
    for (name, r) in &regions {
        assert_eq!((r.open_calls, r.dropped_calls), (0, 0), "region '{name}'");
    }
    for said in ["a range pop without a push", "not open", "a NULL message", "an event attribute structure of version", "not UTF-8"] {
        assert_eq!(err.matches(said).count(), 1, "'{said}' said once:\n{err}");
    }
    let named = rank_str(&f, 0, &format!("thread_name:{}", worker_tid(&f, worker)));
    assert_eq!(named.as_deref(), Some("nvtx worker"), "the worker's name");
}

/// The Linux thread id of the file's thread `t`.
fn worker_tid(f: &hdf5::File, t: i64) -> i64 {
    let tids = rank_int_list(f, 0, "thread_os_ids").expect("thread_os_ids");
    tids[t as usize]
}

#[test]
fn nvtx_program_through_nvtx_injection64_path() {
    let dir = scratch("nvtx_plain");
    let exe = build("nvtx_app", &dir, false);
    let file = dir.join("nv.h5");
    let out = run(Command::new(&exe).arg("4").env("NVTX_INJECTION64_PATH", lib()).env("SCOPE_PROFILER_FILE", &file).env("SCOPE_PROFILER_LAYOUT", "regions"));
    ok(&out);
    check(&file, 4, false, &text(&out.stderr));
    let exe = lib_dir().join("sptool");
    let inspect = run(Command::new(&exe).arg("inspect").arg(&file));
    assert!(inspect.status.success(), "sptool inspect failed:\n{}", text(&inspect.stderr));
    let inspect = text(&inspect.stdout);
    assert!(inspect.contains("Sources of regions") && inspect.contains("NVTX injection"), "sptool inspect lacks the NVTX source:\n{inspect}");
}

#[test]
fn linked_nvtx_program_with_regions_of_its_own() {
    let dir = scratch("nvtx_linked");
    let exe = build("nvtx_app_sp", &dir, true);
    let file = dir.join("nv.h5");
    let out = run(Command::new(&exe).arg("3").env("NVTX_INJECTION64_PATH", lib()).env("SCOPE_PROFILER_FILE", &file));
    ok(&out);
    check(&file, 3, true, &text(&out.stderr));
    // Built to look for an injection in the process, the linked program needs no variable.
    let exe = build_with("nvtx_app_preinject", &dir, true, &["-DNVTX_SUPPORT_ALREADY_INJECTED_LIBRARY=1"]);
    let file = dir.join("nv_pre.h5");
    let out = run(Command::new(&exe).arg("2").env_remove("NVTX_INJECTION64_PATH").env("SCOPE_PROFILER_FILE", &file));
    ok(&out);
    check(&file, 2, true, &text(&out.stderr));
}

#[test]
fn nvtx_adapter_off() {
    let dir = scratch("nvtx_off");
    let exe = build("nvtx_app", &dir, false);
    let plain = run(Command::new(&exe).arg("2"));
    ok(&plain);
    for (var, value) in [("SCOPE_PROFILER_NVTX", "0"), ("SCOPE_PROFILER_DISABLE", "1")] {
        let file = dir.join("off.h5");
        let out = run(Command::new(&exe).arg("2").env("NVTX_INJECTION64_PATH", lib()).env("SCOPE_PROFILER_FILE", &file).env(var, value));
        ok(&out);
        assert!(!file.exists(), "{var}={value}: a profile was written");
        assert_eq!(text(&out.stdout), text(&plain.stdout), "{var}={value}: the program's output changed");
        assert!(!text(&out.stderr).contains("[scope_profiler]"), "{var}={value}: the library spoke:\n{}", text(&out.stderr));
    }
}
