//! `sptool export --format extrap -o OUT.jsonl FILE...`: Extra-P's JSON Lines input over a
//! series of runs, one line per measurement:
//! `{"params": {"p": 4, "t": 2}, "callpath": "main->solve", "metric": "time", "value": 1.2}`.
//! Parameters: `p` (the run's ranks) and `t` (threads per rank) by default, those of the two
//! that are the same in every run left out; with `--param NAME` (a metadata key, the user's
//! `sp_set_metadata` keys by their own name) or `--param NAME=KEY`, exactly the ones asked for.
//! Per call path (the paths of `sptool tree`, `->` between the names) the inclusive time in
//! seconds, the calls, and the counters the file has for the region, with one measurement per
//! rank (Extra-P's repetitions). Runs that differ in no parameter, and runs that lack one, are
//! refused in one line naming the files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::caliper::{self, USER_PREFIX};
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::model::Profile;

/// One parameter: its name in the output and where its value comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    pub key: String,
}

/// `NAME` or `NAME=KEY`.
pub fn parse_param(text: &str) -> Result<Param> {
    let (name, key) = match text.split_once('=') {
        Some((n, k)) => (n.trim(), k.trim()),
        None => (text.trim(), text.trim()),
    };
    if name.is_empty() || key.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return Err(Error::new(format!("--param {text:?}: expected NAME or NAME=KEY, NAME of letters, digits and _ (a metadata key, or p for ranks and t for threads)")));
    }
    Ok(Param { name: name.into(), key: key.into() })
}

fn label(p: &Path) -> String {
    p.display().to_string()
}

/// A parameter's value in one run: `p` the ranks, `t` the threads per rank, else a metadata key
/// (the user's by their own name, or as `user.<key>`, or ours) whose value is a number.
fn value_of(profile: &Profile, key: &str) -> Option<f64> {
    let meta = |k: &str| profile.metadata.iter().find(|(n, _)| n == k).and_then(|(_, v)| caliper::number(v));
    match key {
        "p" => meta("mpi_size").or(Some(profile.ranks.len().max(1) as f64)),
        "t" => meta("omp_num_threads").or(Some(1.0)),
        k => meta(&format!("{USER_PREFIX}{k}")).or_else(|| meta(k)),
    }
}

fn json_number(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9e15 {
        Value::from(v as i64)
    } else {
        serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
    }
}

/// The JSON Lines text for the runs `profiles` (in the order given).
pub fn render(profiles: &[Profile], filter: &Filter, asked: &[Param]) -> Result<String> {
    let defaults = asked.is_empty();
    let mut params: Vec<Param> = if defaults {
        vec![Param { name: "p".into(), key: "p".into() }, Param { name: "t".into(), key: "t".into() }]
    } else {
        asked.to_vec()
    };
    // Every run has every parameter.
    let mut values: Vec<Vec<f64>> = Vec::new();
    for prof in profiles {
        let mut row = Vec::new();
        for p in &params {
            match value_of(prof, &p.key) {
                Some(v) => row.push(v),
                None => {
                    let missing: Vec<String> = profiles.iter().filter(|f| value_of(f, &p.key).is_none()).map(|f| label(&f.path)).collect();
                    return Err(Error::new(format!(
                        "parameter {} (metadata key {:?}, a number) is missing in {}",
                        p.name,
                        p.key,
                        missing.join(", ")
                    )));
                }
            }
        }
        values.push(row);
    }
    // The defaults that never change are no parameters of this series.
    if defaults {
        let keep: Vec<bool> = (0..params.len()).map(|i| values.iter().any(|r| r[i] != values[0][i])).collect();
        params = params.into_iter().zip(&keep).filter(|(_, k)| **k).map(|(p, _)| p).collect();
        for row in &mut values {
            *row = row.iter().zip(&keep).filter(|(_, k)| **k).map(|(v, _)| *v).collect();
        }
    }
    // Runs that differ in nothing.
    let mut seen: BTreeMap<Vec<u64>, &Path> = BTreeMap::new();
    for (prof, row) in profiles.iter().zip(&values) {
        let key: Vec<u64> = row.iter().map(|v| v.to_bits()).collect();
        if let Some(first) = seen.insert(key, &prof.path) {
            let what = if params.is_empty() {
                format!(
                    "{} and {} differ in no parameter (ranks and threads are the same in all the runs given; name another with --param NAME)",
                    label(first),
                    label(&prof.path)
                )
            } else {
                let names: Vec<String> = params.iter().zip(row).map(|(p, v)| format!("{}={v}", p.name)).collect();
                format!("{} and {} differ in no parameter (both {})", label(first), label(&prof.path), names.join(", "))
            };
            return Err(Error::new(format!("{what}; Extra-P needs one run per parameter value")));
        }
    }
    if profiles.len() < 2 {
        return Err(Error::new("Extra-P models a series of runs: give at least two files that differ in a parameter"));
    }

    let mut out = String::new();
    for (prof, row) in profiles.iter().zip(&values) {
        let mut pj = Map::new();
        for (p, v) in params.iter().zip(row) {
            pj.insert(p.name.clone(), json_number(*v));
        }
        let pj = Value::Object(pj);
        let (trees, _) = caliper::rank_trees(prof, filter).map_err(|e| e.or_file(&prof.path))?;
        let counters = caliper::counters_by_region(prof, filter);
        for t in &trees {
            let mut paths_of: BTreeMap<&str, usize> = BTreeMap::new();
            for (p, _) in &t.paths {
                if let Some(last) = p.last() {
                    *paths_of.entry(last.as_str()).or_default() += 1;
                }
            }
            for (path, [calls, incl, _]) in &t.paths {
                let callpath = path.join("->");
                let mut line = |metric: &str, value: f64| {
                    if value.is_finite() {
                        let v = serde_json::json!({"params": pj, "callpath": callpath, "metric": metric, "value": value});
                        out.push_str(&v.to_string());
                        out.push('\n');
                    }
                };
                line("time", *incl as f64 / 1e9);
                line("calls", *calls as f64);
                let name = path.last().map(String::as_str).unwrap_or_default();
                if paths_of.get(name) == Some(&1) {
                    if let Some((cols, vals)) = counters.get(&(t.rank, name.to_string())).map(|v| (&counters.columns, v)) {
                        for (c, v) in cols.iter().zip(vals) {
                            if let Some(v) = v {
                                line(c, *v);
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The files of the series, read; every error names its file.
pub fn read_all(files: &[PathBuf]) -> Result<Vec<Profile>> {
    files.iter().map(|f| crate::read::read_profile(f)).collect()
}
