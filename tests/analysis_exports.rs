//! Run metadata and the exports for the analysis tools, read by the real readers:
//! tests/c/analysis_series.c (nested regions, a second thread, MPI_Allreduce; compute is called
//! 2P times for 3 ms each on P ranks) under mpirun at 1 to 5 ranks, with metadata of its own
//! (sp_set_metadata and SCOPE_PROFILER_METADATA_SET). Checked: the metadata in the file, in
//! the PyPI reader and in `sptool inspect`, and the refusals; `sptool export --format
//! caliper-json` through Hatchet's dataframe and Thicket's metadata table (regions, columnar and
//! aggregate layouts, and files of the PyPI package), numbers against `sptool export --format
//! json`; `--format extrap` through Extra-P's model of the series; `--format otf2` through
//! otf2-print and Debian's Python OTF2 reader (events and nesting per location); damaged input.
//! Needs the .venv of scripts/setup.sh (scope-profiler, llnl-hatchet, llnl-thicket, extrap) and
//! Debian's otf2-tools and python3-otf2.

mod support;
use support::*;

#[path = "fortran/support.rs"]
mod fortran_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

const RANKS: [usize; 5] = [1, 2, 3, 4, 5];

struct Series {
    dir: PathBuf,
    /// Per rank count: the file and rank 0's standard output and the run's standard error.
    runs: BTreeMap<usize, (PathBuf, String, String)>,
    /// 2 ranks, columnar layout, MPI calls kept as regions.
    columnar: PathBuf,
    /// 2 ranks, aggregate layout.
    aggregate: PathBuf,
    compute_line: i64,
}

fn sptool_exe() -> PathBuf {
    let exe = lib_dir().join("sptool");
    assert!(exe.exists(), "{} not found: run `cargo build --workspace` first", exe.display());
    exe
}

fn sptool(args: &[&str]) -> Output {
    run(Command::new(sptool_exe()).args(args).env_remove("COLUMNS"))
}

fn sptool_ok(args: &[&str]) -> String {
    let out = sptool(args);
    assert!(out.status.success(), "sptool {args:?} failed:\n{}", text(&out.stderr));
    text(&out.stdout)
}

fn mpirun(np: usize, exe: &Path, file: &Path, env: &[(&str, &str)]) -> (String, String) {
    let plugin = link_dir().join("libscope_profiler_mpi_openmpi.so");
    assert!(plugin.exists(), "{} missing: build the workspace", plugin.display());
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "-np", &np.to_string()])
        .arg("-x")
        .arg(format!("LD_PRELOAD={}", plugin.display()))
        .arg("-x")
        .arg(format!("SCOPE_PROFILER_FILE={}", file.display()))
        .args(["-x", "OMPI_MCA_mpi_yield_when_idle=1"]);
    for (k, v) in env {
        cmd.arg("-x").arg(format!("{k}={v}"));
    }
    cmd.arg(exe)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    let out = run(&mut cmd);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{cmd:?} failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(file.exists(), "{cmd:?} wrote no {}\nstderr:\n{stderr}", file.display());
    (stdout, stderr)
}

fn series() -> &'static Series {
    static S: OnceLock<Series> = OnceLock::new();
    S.get_or_init(|| {
        let dir = scratch("analysis_exports");
        let exe = compile_with("mpicc", &["-std=c99", "-D_GNU_SOURCE"], "analysis_series", &["tests/c/analysis_series.c"], &dir, &["-pthread"]);
        let env = [("SCOPE_PROFILER_METADATA_SET", "deck=cube,bad/key=1"), ("SCOPE_PROFILER_VERBOSITY", "0")];
        let mut runs = BTreeMap::new();
        let mut compute_line = 0;
        for p in RANKS {
            let file = dir.join(format!("p{p}.h5"));
            let (stdout, stderr) = mpirun(p, &exe, &file, &env);
            compute_line = stdout.lines().find_map(|l| l.strip_prefix("COMPUTE_LINE ")).and_then(|v| v.trim().parse().ok()).expect("COMPUTE_LINE");
            runs.insert(p, (file, stdout, stderr));
        }
        let columnar = dir.join("columnar.h5");
        mpirun(2, &exe, &columnar, &[("SCOPE_PROFILER_LAYOUT", "columnar"), ("SCOPE_PROFILER_MPI", "calls"), ("SCOPE_PROFILER_VERBOSITY", "0")]);
        let aggregate = dir.join("aggregate.h5");
        mpirun(2, &exe, &aggregate, &[("SCOPE_PROFILER_LAYOUT", "aggregate"), ("SCOPE_PROFILER_VERBOSITY", "0")]);
        Series { dir, runs, columnar, aggregate, compute_line }
    })
}

fn statuses(stdout: &str) -> BTreeMap<String, Vec<i64>> {
    let mut out: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for l in stdout.lines() {
        let mut w = l.split_whitespace();
        if w.next() == Some("STATUS") {
            let (Some(what), Some(code)) = (w.next(), w.next()) else { continue };
            out.entry(what.into()).or_default().push(code.parse().unwrap());
        }
    }
    out
}

#[test]
fn metadata_of_the_users_own_is_stored_shown_and_checked() {
    let s = series();
    let (file, stdout, stderr) = &s.runs[&3];
    let st = statuses(stdout);
    let expect = [("before_setup", -1), ("empty", -5), ("slash", -4), ("utf8", -7), ("long_key", -6), ("long_value", -4), ("null", -3), ("ok", 0), ("too_many", -4)];
    for (what, code) in expect {
        assert_eq!(st.get(what).map(|v| v[0]), Some(code), "sp_set_metadata {what}: {st:?}\nstdout:\n{stdout}");
    }
    // Every rank calls it after MPI_Finalize: SP_ERR_FINALIZED.
    assert_eq!(st["after_finalize"], vec![-2; 3], "{stdout}");
    // One warning per kind of refusal, and one for the environment's bad entry.
    let warn = |needle: &str| stderr.lines().filter(|l| l.starts_with("[scope_profiler]") && l.contains(needle)).count();
    assert_eq!(warn("SCOPE_PROFILER_METADATA_SET: the key \"bad/key\""), 3, "one per rank:\n{stderr}");
    assert_eq!(warn("the key \"a/b\""), 1, "{stderr}");
    assert_eq!(warn("is longer than 64 bytes"), 1, "{stderr}");
    assert!(!stderr.contains("panic"), "{stderr}");

    // In the file: metadata/ holds rank 0's values, each rank its own.
    let h5 = hdf5::File::open(file).unwrap();
    let meta = h5.group("metadata").unwrap();
    assert_eq!(int_attr(&meta, "user.problem_size"), 3000);
    assert_eq!(str_attr(&meta, "user.deck"), "cube");
    assert_eq!(str_attr(&meta, "user.code_version"), "v1.10", "a value that is no canonical number stays the string given");
    assert_eq!(int_attr(&meta, "user.seed"), 0);
    assert!(meta.attr("user.a/b").is_err() && meta.attr("user.bad/key").is_err() && meta.attr("user.late").is_err());
    let extras = meta.attr_names().unwrap().iter().filter(|n| n.starts_with("user.extra_")).count();
    assert_eq!(extras, 64 - 3 - 1, "64 keys at most (problem_size, seed, deck, code_version and the extras)");
    for r in 0..3 {
        assert_eq!(rank_int(&h5, r, "user.seed"), Some(r as i64), "rank {r} keeps its own value");
    }
    drop(h5);

    // The PyPI package's reader and sptool inspect show them.
    let view = python_view(file);
    assert_eq!(view["metadata"]["user.problem_size"], 3000, "{}", view["metadata"]);
    assert_eq!(view["metadata"]["user.deck"], "cube");
    let inspect = sptool_ok(&["inspect", file.to_str().unwrap()]);
    assert!(inspect.contains("User (sp_set_metadata)") && inspect.contains("user.problem_size") && inspect.contains("3000"), "{inspect}");
}

#[test]
fn fortran_sets_metadata_through_the_module() {
    let dir = scratch("analysis_exports_fortran");
    let exe = fortran_support::build_fortran("gfortran", "tests/fortran/metadata.f90", &dir, "metadata", &[]);
    let file = dir.join("f.h5");
    let out = run(Command::new(&exe).arg(&file).env("SCOPE_PROFILER_VERBOSITY", "0"));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let st = statuses(&stdout);
    assert_eq!((st["size"][0], st["deck"][0], st["slash"][0], st["late"][0]), (0, 0, -4, -2), "{stdout}");
    let h5 = hdf5::File::open(&file).unwrap();
    let meta = h5.group("metadata").unwrap();
    assert_eq!(int_attr(&meta, "user.problem_size"), 4096);
    assert_eq!(str_attr(&meta, "user.input_deck"), "cube.inp", "trailing blanks are no part of key or value");
}

/// Hatchet's and Thicket's view of caliper-json files (tests/python/hatchet_view.py).
fn hatchet(files: &[&Path]) -> Value {
    let mut cmd = Command::new(python());
    cmd.arg(repo_root().join("tests/python/hatchet_view.py")).args(files);
    let out = run(&mut cmd);
    assert!(out.status.success(), "{cmd:?} failed:\n{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn export(file: &Path, format: &str, out: &Path) {
    sptool_ok(&["export", "--format", format, "-o", out.to_str().unwrap(), file.to_str().unwrap()]);
}

/// `sptool export --format json`'s totals: (rank, region) -> (calls, total s).
fn json_totals(file: &Path, dir: &Path) -> BTreeMap<(u64, String), (u64, f64)> {
    let out = dir.join(format!("{}.tidy.json", file.file_stem().unwrap().to_string_lossy()));
    export(file, "json", &out);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    doc["rows"].as_array().unwrap().iter().map(|r| ((r["rank"].as_u64().unwrap(), r["region"].as_str().unwrap().to_string()), (r["calls"].as_u64().unwrap(), r["total_s"].as_f64().unwrap()))).collect()
}

fn row<'a>(rows: &'a [Value], path: &str, rank: u64) -> &'a Value {
    rows.iter().find(|r| r["path"] == path && r["rank"].as_u64() == Some(rank)).unwrap_or_else(|| panic!("no row {path} rank {rank} in {rows:?}"))
}

#[test]
fn hatchet_and_thicket_read_the_caliper_json_of_every_rank_count() {
    let s = series();
    let mut jsons = Vec::new();
    for (p, (file, _, _)) in &s.runs {
        let out = s.dir.join(format!("p{p}.json"));
        export(file, "caliper-json", &out);
        jsons.push(out);
    }
    let refs: Vec<&Path> = jsons.iter().map(|p| p.as_path()).collect();
    let v = hatchet(&refs);
    for (i, (p, (file, _, _))) in s.runs.iter().enumerate() {
        let p = *p as u64;
        let gf = &v["graphframes"][i];
        let rows = gf["rows"].as_array().unwrap();
        // The call-path tree is sptool tree's (every path it prints is a node).
        let paths: BTreeSet<&str> = rows.iter().map(|r| r["path"].as_str().unwrap()).collect();
        for want in ["main", "main/solve", "main/solve/compute", "main/solve/exchange", "background", "MPI", "MPI/MPI_Allreduce"] {
            assert!(paths.contains(want), "P={p}: no node {want}: {paths:?}");
        }
        let tree = sptool_ok(&["tree", file.to_str().unwrap()]);
        for name in ["main", "solve", "compute", "exchange", "background"] {
            assert!(tree.contains(name), "{tree}");
        }
        let totals = json_totals(file, &s.dir);
        for rank in 0..p {
            let c = row(rows, "main/solve/compute", rank);
            assert_eq!(c["calls"], 2 * p, "P={p} rank {rank}: {c}");
            let incl = c["time (inc)"].as_f64().unwrap();
            let known = 2.0 * p as f64 * 0.003;
            // Sleeps: never shorter, and longer only by what a loaded machine adds.
            assert!(incl >= known && incl < 4.0 * known + 0.2, "P={p} rank {rank}: compute {incl} s, known cost {known} s");
            // Exclusive = inclusive for a leaf; the numbers are those of export --format json.
            assert!((c["time"].as_f64().unwrap() - incl).abs() < 1e-12);
            let (calls, total) = totals[&(rank, "compute".to_string())];
            assert_eq!(calls, 2 * p);
            // The call paths and the single calls are each converted from clock ticks: they
            // agree within the conversion's error (the file's clock_error_bound_ns, tens of ns).
            assert!((total - incl).abs() <= 50e-9 * calls as f64, "P={p} rank {rank}: caliper {incl} vs json {total}");
            let solve = row(rows, "main/solve", rank);
            let excl = solve["time"].as_f64().unwrap();
            let inc = solve["time (inc)"].as_f64().unwrap();
            let children = incl + row(rows, "main/solve/exchange", rank)["time (inc)"].as_f64().unwrap();
            assert!((inc - excl - children).abs() < 1e-6, "P={p}: solve's exclusive time is its inclusive less its children");
            assert_eq!(row(rows, "background", rank)["calls"], 3);
            let mpi = row(rows, "MPI/MPI_Allreduce", rank);
            assert_eq!(mpi["calls"], 2 * p, "{mpi}");
            assert!(mpi["mpi.bytes_sent"].as_f64().unwrap() > 0.0, "{mpi}");
        }
        assert_eq!(gf["metadata"]["problem_size"], 1000 * p, "{}", gf["metadata"]);
        assert_eq!(gf["metadata"]["mpi_size"], p);
    }
    // Per thread on request (`--threads`): each thread's time and calls as columns of its
    // rank's rows, as Hatchet loads them; the threads' values add up to the rank's.
    let (p, (file, _, _)) = s.runs.iter().next_back().unwrap();
    let p = *p as u64;
    let out = s.dir.join("threads.json");
    sptool_ok(&["export", "--format", "caliper-json", "--threads", "-o", out.to_str().unwrap(), file.to_str().unwrap()]);
    let tv = hatchet(&[out.as_path()]);
    let rows = tv["graphframes"][0]["rows"].as_array().unwrap();
    let thread_cols = |r: &Value, what: &str| -> Vec<f64> {
        let mut cols: Vec<(&String, f64)> = r.as_object().unwrap().iter().filter(|(k, _)| k.starts_with("thread.") && k.ends_with(what)).map(|(k, v)| (k, v.as_f64().unwrap_or(0.0))).collect();
        cols.sort_by(|a, b| a.0.cmp(b.0));
        cols.into_iter().map(|(_, v)| v).collect()
    };
    for rank in 0..p {
        for (path, calls) in [("main/solve/compute", 2 * p), ("background", 3)] {
            let r = row(rows, path, rank);
            assert_eq!(r["calls"], calls, "{r}");
            let per_calls = thread_cols(r, "#calls");
            assert_eq!(per_calls.len(), 2, "two threads per rank: {r}");
            // One thread made every call of the path, the other none.
            let mut sorted = per_calls.clone();
            sorted.sort_by(f64::total_cmp);
            assert_eq!(sorted, vec![0.0, calls as f64], "{path} rank {rank}: {r}");
            let incl: f64 = thread_cols(r, "#inclusive#sum#time.duration").iter().sum();
            assert!((incl - r["time (inc)"].as_f64().unwrap()).abs() < 1e-6, "{path} rank {rank}: threads {incl} vs rank {r}");
        }
    }
    let no = sptool(&["export", "--format", "json", "--threads", "-o", s.dir.join("t.json").to_str().unwrap(), file.to_str().unwrap()]);
    assert!(!no.status.success() && text(&no.stderr).contains("--threads applies to --format caliper-json only"), "{}", text(&no.stderr));
    // Thicket: one profile per run, the metadata as columns.
    let t = &v["thicket"];
    assert_eq!(t["profiles"], 5, "{t}");
    let mut sizes: Vec<i64> = t["metadata"]["problem_size"].as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect();
    sizes.sort();
    assert_eq!(sizes, vec![1000, 2000, 3000, 4000, 5000]);
    let decks: BTreeSet<&str> = t["metadata"]["deck"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
    assert_eq!(decks, BTreeSet::from(["cube"]));
    assert!(t["metadata"]["seed.per_rank"].is_array(), "values that differ per rank are kept: {}", t["metadata"]);
}

#[test]
fn caliper_json_of_the_other_layouts_and_of_the_pypi_package() {
    let s = series();
    let dir = scratch("analysis_exports_layouts");
    // Files of the PyPI package: events (schema 3) and aggregates.
    let script = dir.join("write.py");
    std::fs::write(
        &script,
        "import sys, time\nimport scope_profiler as sp\nopts = {'aggregation_mode': True} if sys.argv[2] == 'aggregate' else {}\nwith sp.session(file_path=sys.argv[1], **opts):\n    for i in range(3):\n        with sp.region('solve'):\n            time.sleep(0.002)\n",
    )
    .unwrap();
    let mut files = vec![(s.columnar.clone(), true), (s.aggregate.clone(), true)];
    for mode in ["events", "aggregate"] {
        let f = dir.join(format!("py_{mode}.h5"));
        let out = run(Command::new(python()).arg(&script).arg(&f).arg(mode).current_dir(&dir));
        assert!(out.status.success(), "{}", text(&out.stderr));
        files.push((f, false));
    }
    let mut jsons = Vec::new();
    for (f, _) in &files {
        let out = dir.join(format!("{}.json", f.file_stem().unwrap().to_string_lossy()));
        export(f, "caliper-json", &out);
        jsons.push(out);
    }
    let refs: Vec<&Path> = jsons.iter().map(|p| p.as_path()).collect();
    let v = hatchet(&refs);
    for (i, (f, ours)) in files.iter().enumerate() {
        let rows = v["graphframes"][i]["rows"].as_array().unwrap();
        let totals = json_totals(f, &dir);
        if *ours {
            let c = row(rows, "main/solve/compute", 1);
            assert_eq!(c["calls"], 4, "{}: {c}", f.display());
            let (_, total) = totals[&(1, "compute".to_string())];
            assert!((c["time (inc)"].as_f64().unwrap() - total).abs() <= 4.0 * 50e-9, "{}: {c} vs {total}", f.display());
        } else {
            let c = row(rows, "solve", 0);
            assert_eq!(c["calls"], 3, "{}: {c}", f.display());
            let (_, total) = totals[&(0, "solve".to_string())];
            assert!((c["time (inc)"].as_f64().unwrap() - total).abs() < 1e-9 && total >= 0.006, "{}", f.display());
        }
    }
    // MPI calls kept as regions (columnar run) are nodes under the region that made them.
    let rows = v["graphframes"][0]["rows"].as_array().unwrap();
    assert_eq!(row(rows, "main/solve/exchange/MPI_Allreduce", 0)["calls"], 4);
    assert_eq!(v["thicket"]["profiles"], 4);
}

/// Extra-P's models (`extrap --json FILE --print all`): (callpath, metric) -> model text, and
/// its measurement points: (callpath, metric) -> [(p, mean)].
type Points = BTreeMap<(String, String), Vec<(f64, f64)>>;
fn extrap_models(jsonl: &Path) -> (BTreeMap<(String, String), String>, Points) {
    let exe = python().parent().unwrap().join("extrap");
    let mut cmd = Command::new(&exe);
    cmd.arg("--json").arg(jsonl).args(["--print", "all"]);
    let out = run(&mut cmd);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{cmd:?} failed:\n{}\n{stdout}", text(&out.stderr));
    let (mut callpath, mut metric) = (String::new(), String::new());
    let mut models = BTreeMap::new();
    let mut points: Points = BTreeMap::new();
    for l in stdout.lines() {
        let t = l.trim();
        if let Some(m) = t.strip_prefix("Measurement point: (") {
            let (p, rest) = m.split_once(')').unwrap();
            let mean = rest.trim().strip_prefix("Mean: ").unwrap().split_whitespace().next().unwrap();
            points.entry((callpath.clone(), metric.clone())).or_default().push((p.parse().unwrap(), mean.parse().unwrap()));
        } else if let Some(c) = t.strip_prefix("Callpath: ") {
            callpath = c.to_string();
        } else if let Some(m) = t.strip_prefix("Metric: ") {
            metric = m.to_string();
        } else if let Some(m) = t.strip_prefix("Model: ") {
            models.insert((callpath.clone(), metric.clone()), m.to_string());
        }
    }
    assert!(!models.is_empty(), "no models in:\n{stdout}");
    (models, points)
}

#[test]
fn extrap_models_the_rank_series() {
    let s = series();
    let files: Vec<&str> = s.runs.values().map(|(f, _, _)| f.to_str().unwrap()).collect();
    let out = s.dir.join("series.jsonl");
    let mut args = vec!["export", "--format", "extrap", "-o", out.to_str().unwrap()];
    args.extend(&files);
    sptool_ok(&args);
    let lines: Vec<Value> = std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // One measurement per rank: P lines for compute's time at P ranks.
    for p in RANKS {
        let n = lines.iter().filter(|l| l["params"]["p"] == p && l["callpath"] == "main->solve->compute" && l["metric"] == "time").count();
        assert_eq!(n, p, "repetitions at p={p}");
        assert!(lines.iter().all(|l| l["params"].get("t").is_none()), "t is the same in every run: no parameter");
    }
    let (models, points) = extrap_models(&out);
    // The model's form: compute is called 2P times, exactly linear in p.
    let calls = &models[&("main->solve->compute".to_string(), "calls".to_string())];
    assert!(calls.contains("p^(1)") && !calls.contains("log"), "2P calls: a linear model, got {calls}");
    // Extra-P's measurement points are the means over the ranks of what the export wrote (the
    // times themselves, sleeps on a shared machine, are too noisy for a model's form).
    let key = ("main->solve->compute".to_string(), "time".to_string());
    assert!(models.contains_key(&key), "{models:?}");
    let got = &points[&key];
    assert_eq!(got.len(), RANKS.len(), "{got:?}");
    for &(p, mean) in got {
        let ours: Vec<f64> = lines.iter().filter(|l| l["params"]["p"].as_f64() == Some(p) && l["callpath"] == "main->solve->compute" && l["metric"] == "time").map(|l| l["value"].as_f64().unwrap()).collect();
        let m = ours.iter().sum::<f64>() / ours.len() as f64;
        assert!((m - mean).abs() <= 0.006 * m, "p={p}: Extra-P's mean {mean} vs the export's {m}");
        assert!(m >= 2.0 * p * 0.003, "p={p}: compute takes at least 6P ms, got {m}");
    }

    // --param from the user's metadata.
    let out2 = s.dir.join("size.jsonl");
    let mut args = vec!["export", "--format", "extrap", "--param", "size=problem_size", "-o", out2.to_str().unwrap()];
    args.extend(&files);
    sptool_ok(&args);
    let first: Value = serde_json::from_str(std::fs::read_to_string(&out2).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(first["params"], serde_json::json!({"size": 1000}));

    // Refusals in one line naming the files; nothing written.
    let refused = s.dir.join("refused.jsonl");
    let r = refused.to_str().unwrap();
    for (args, needle) in [
        (vec!["export", "--format", "extrap", "-o", r, files[2], files[2]], "differ in no parameter"),
        (vec!["export", "--format", "extrap", "--param", "nope", "-o", r, files[0], files[1]], "missing in"),
        (vec!["export", "--format", "extrap", "--param", "deck", "-o", r, files[0], files[1]], "missing in"),
    ] {
        let o = sptool(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(needle) && (err.contains(files[0]) || err.contains(files[2])), "{args:?}: {err}");
        assert!(!refused.exists());
    }
}

fn otf2_view(archive: &Path) -> Value {
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.arg(repo_root().join("tests/python/otf2_view.py")).arg(archive.join("traces.otf2"));
    let out = run(&mut cmd);
    assert!(out.status.success(), "{cmd:?} failed (Debian's python3-otf2 installed?):\n{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn otf2_archive_is_read_by_otf2_print_and_the_python_reader() {
    let s = series();
    let (file, _, _) = &s.runs[&3];
    let archive = s.dir.join("p3.otf2");
    export(file, "otf2", &archive);
    let out = run(Command::new("otf2-print").arg(archive.join("traces.otf2")));
    assert!(out.status.success(), "otf2-print: {}", text(&out.stderr));
    let printed = text(&out.stdout);
    assert_eq!(printed.lines().filter(|l| l.starts_with("ENTER")).count(), 3 * (1 + 3 * 6 + 3), "{printed}");

    let v = otf2_view(&archive);
    let locs = v["locations"].as_object().unwrap();
    assert_eq!(locs.len(), 6, "a location per rank and thread: {locs:?}");
    for r in 0..3 {
        let mine: Vec<&Value> = locs.iter().filter(|(k, _)| k.starts_with(&format!("MPI Rank {r}/"))).map(|(_, v)| v).collect();
        assert_eq!(mine.len(), 2, "rank {r}: {locs:?}");
        for l in &mine {
            assert_eq!(l["ok"], true, "properly nested: {l}");
            assert_eq!(l["open"], 0);
            assert_eq!(l["enter"], l["leave"]);
        }
        let main = mine.iter().find(|l| l["paths"].get("main").is_some()).expect("the main thread");
        assert_eq!(main["paths"]["main/solve/compute"], 6);
        assert_eq!(main["paths"]["main/solve/exchange"], 6);
        assert_eq!(main["max_depth"], 3);
        let bg = mine.iter().find(|l| l["paths"].get("background").is_some()).expect("the second thread");
        assert_eq!(bg["enter"], 3);
    }
    let compute = &v["regions"]["compute"];
    assert!(compute[0].as_str().unwrap_or_default().ends_with("analysis_series.c") && compute[1] == s.compute_line, "source location: {compute}");
    assert_eq!(v["properties"]["SCOPE_PROFILER::USER_PROBLEM_SIZE"], "3000", "{}", v["properties"]);

    // MPI calls kept as regions are MPI regions inside the regions that made them.
    let archive = s.dir.join("columnar.otf2");
    export(&s.columnar, "otf2", &archive);
    let v = otf2_view(&archive);
    assert!(v["regions"]["MPI_Allreduce"][2].as_str().unwrap().contains("MPI"), "{}", v["regions"]);
    let nested = v["locations"].as_object().unwrap().values().filter(|l| l["paths"]["main/solve/exchange/MPI_Allreduce"] == 4).count();
    assert_eq!(nested, 2, "{}", v["locations"]);

    // Aggregates have no events: refused in one line naming the layout to use.
    let refused = s.dir.join("agg.otf2");
    let o = sptool(&["export", "--format", "otf2", "-o", refused.to_str().unwrap(), s.aggregate.to_str().unwrap()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("aggregate") && err.contains("SCOPE_PROFILER_LAYOUT=regions"), "{err}");
    assert!(!refused.exists());

    // Where libotf2 cannot be loaded, the export says which package has it.
    let o = run(Command::new(sptool_exe()).args(["export", "--format", "otf2", "-o", refused.to_str().unwrap(), file.to_str().unwrap()]).env("SPTOOL_OTF2_LIBRARY", "/nonexistent/libotf2.so"));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("libopen-trace-format2"), "{err}");
    assert!(!refused.exists());
}

#[test]
fn damaged_input_is_refused_in_one_line_without_output() {
    let s = series();
    let dir = scratch("analysis_exports_damaged");
    let (file, _, _) = &s.runs[&2];
    let bytes = std::fs::read(file).unwrap();
    let cut = dir.join("cut.h5");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    for (format, out) in [("caliper-json", "o.json"), ("otf2", "o.otf2"), ("extrap", "o.jsonl")] {
        let out = dir.join(out);
        let mut args = vec!["export", "--format", format, "-o", out.to_str().unwrap(), cut.to_str().unwrap()];
        if format == "extrap" {
            args.push(s.runs[&1].0.to_str().unwrap());
        }
        let o = sptool(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{format}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{format}: {err}");
        assert!(err.contains("cut.h5"), "{format}: {err}");
        assert!(!out.exists(), "{format}: {} left behind", out.display());
    }
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 1, "only the input is left: {left:?}");
}
