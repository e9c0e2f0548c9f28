//! The helper side of the read-back (spec 3.3): a fresh perfmon module reads the marker
//! file and LIKWID's getters name every event and compute every metric. Runs only in
//! the helper process (`scope_profiler_likwid_helper`), never in the host: perfmon_init
//! can crash or exit on a bad machine, and `-nan` makes LIKWID's calculator abort.

use crate::model::likwid::{RegionResult, source};
use likwid_sys::{Likwid, owned_string};
use serde::{Deserialize, Serialize};
use std::ffi::{CString, c_int};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Version of the JSON document the helper writes.
pub const FORMAT: u32 = 1;

/// What the parent passes on the helper's command line.
#[derive(Debug, Clone, PartialEq)]
pub struct HelperArgs {
    pub mode: i32,
    pub threads: Vec<i32>,
    pub events: String,
    pub marker_file: PathBuf,
    pub out: PathBuf,
}

impl HelperArgs {
    pub fn to_argv(&self) -> Vec<String> {
        let threads: Vec<String> = self.threads.iter().map(i32::to_string).collect();
        vec![
            "--mode".into(),
            self.mode.to_string(),
            "--threads".into(),
            threads.join(","),
            "--events".into(),
            self.events.clone(),
            "--marker-file".into(),
            self.marker_file.to_string_lossy().into_owned(),
            "--out".into(),
            self.out.to_string_lossy().into_owned(),
        ]
    }

    pub fn parse(args: &[String]) -> Result<HelperArgs, String> {
        let get = |flag: &str| -> Result<String, String> {
            let i = args.iter().position(|a| a == flag).ok_or(format!("missing {flag}"))?;
            args.get(i + 1).cloned().ok_or(format!("{flag} needs a value"))
        };
        let mode = get("--mode")?.parse().map_err(|_| "bad --mode".to_string())?;
        let threads =
            get("--threads")?.split(',').map(|t| t.parse::<i32>().map_err(|_| format!("bad cpu {t:?}"))).collect::<Result<Vec<_>, _>>()?;
        Ok(HelperArgs { mode, threads, events: get("--events")?, marker_file: get("--marker-file")?.into(), out: get("--out")?.into() })
    }
}

/// The helper's JSON document. Tags are LIKWID's (the parent maps them to region names).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HelperOutput {
    pub format: u32,
    /// TSC Hz the helper's perfmon calibrated (always finite).
    pub clock_hz: f64,
    pub regions: Vec<RegionResult>,
}

fn text(p: *mut std::ffi::c_char) -> Option<String> {
    // SAFETY: LIKWID returns NULL or a string it owns; we copy it and never free it.
    unsafe { owned_string(p) }
}

/// Exit codes of the helper, explained to the user by the parent.
pub mod exit {
    pub const USAGE: i32 = 2;
    pub const NO_LIKWID: i32 = 3;
    pub const READBACK: i32 = 4;
    pub const WRITE: i32 = 5;
    pub const PANIC: i32 = 6;

    pub fn describe(code: i32) -> &'static str {
        match code {
            USAGE => "bad arguments",
            NO_LIKWID => "LIKWID could not be loaded",
            READBACK => "perfmon read-back failed",
            WRITE => "could not write its result",
            PANIC => "internal error",
            _ => "unexpected exit status",
        }
    }
}

/// Run perfmon over the marker file and collect every region (spec 3.3, up to the getters).
/// Call [`teardown`] afterwards, once the result is safely on disk.
pub fn read_back(lib: &Likwid, args: &HelperArgs) -> Result<HelperOutput, String> {
    let path = CString::new(args.marker_file.as_os_str().as_encoded_bytes()).map_err(|_| "marker path has NUL")?;
    // SAFETY: LIKWID's documented call order; all pointers are valid for the calls.
    unsafe {
        (lib.topology_init)();
        (lib.numa_init)();
        (lib.affinity_init)();
        // After topology_init: its init_configuration resets the mode to the build default.
        (lib.HPMmode)(args.mode);
        let rc = (lib.perfmon_init)(args.threads.len() as c_int, args.threads.as_ptr());
        if rc < 0 {
            return Err(format!("perfmon_init failed ({rc})"));
        }
        for (want, piece) in args.events.split('|').enumerate() {
            let c = CString::new(piece).map_err(|_| "event set has NUL")?;
            let gid = (lib.perfmon_addEventSet)(c.as_ptr());
            if gid != want as c_int {
                return Err(format!("perfmon_addEventSet({piece}) returned {gid}, expected {want}"));
            }
        }
        let n = (lib.perfmon_readMarkerFile)(path.as_ptr());
        if n < 0 {
            return Err(format!("perfmon_readMarkerFile failed ({n})"));
        }
        let clock = (lib.timer_getCycleClock)() as f64;
        let groups = args.events.split('|').count() as c_int;
        let mut regions = Vec::new();
        for r in 0..(lib.perfmon_getNumberOfRegions)() {
            if let Some(reg) = region(lib, r, groups) {
                regions.push(reg);
            }
        }
        Ok(HelperOutput { format: FORMAT, clock_hz: clock, regions })
    }
}

/// One region from the getters; threads with count 0 are dropped (their cpu is garbage).
unsafe fn region(lib: &Likwid, r: c_int, groups: c_int) -> Option<RegionResult> {
    unsafe {
        let gid = (lib.perfmon_getGroupOfRegion)(r);
        if gid < 0 || gid >= groups {
            return None;
        }
        let tag = text((lib.perfmon_getTagOfRegion)(r))?;
        let nev = (lib.perfmon_getEventsOfRegion)(r).max(0);
        let nmet = (lib.perfmon_getMetricsOfRegion)(r).max(0);
        let nthr = (lib.perfmon_getThreadsOfRegion)(r).max(0);
        let mut cpus = vec![0 as c_int; nthr as usize];
        let got = (lib.perfmon_getCpulistOfRegion)(r, nthr, cpus.as_mut_ptr()).clamp(0, nthr);
        cpus.truncate(got as usize);
        let keep: Vec<usize> = (0..cpus.len()).filter(|&t| (lib.perfmon_getCountOfRegion)(r, t as c_int) > 0).collect();
        let values: Vec<Vec<f64>> =
            (0..nev).map(|e| keep.iter().map(|&t| (lib.perfmon_getResultOfRegionThread)(r, e, t as c_int)).collect()).collect();
        let group_events = (lib.perfmon_getNumberOfEvents)(gid).max(0);
        let mut res = RegionResult {
            tag,
            group_id: gid as i64,
            group_name: text((lib.perfmon_getGroupName)(gid)).unwrap_or_default(),
            source: source::FULL_API.into(),
            cpus: keep.iter().map(|&t| cpus[t] as i64).collect(),
            times: keep.iter().map(|&t| (lib.perfmon_getTimeOfRegion)(r, t as c_int)).collect(),
            call_counts: keep.iter().map(|&t| (lib.perfmon_getCountOfRegion)(r, t as c_int) as i64).collect(),
            ..Default::default()
        };
        for e in 0..nev {
            let named = e < group_events;
            res.event_names.push(if named { text((lib.perfmon_getEventName)(gid, e)) } else { None }.unwrap_or(format!("EVENT{e}")));
            res.counter_names.push(if named { text((lib.perfmon_getCounterName)(gid, e)) } else { None }.unwrap_or_default());
        }
        res.events = values;
        for m in 0..nmet {
            res.metric_names.push(text((lib.perfmon_getMetricName)(gid, m)).unwrap_or(format!("METRIC{m}")));
            let row = keep
                .iter()
                .enumerate()
                .map(|(k, &t)| {
                    // A negative NaN makes LIKWID's calculator double-free (spec 5): skip it.
                    let neg_nan = res.events.iter().any(|ev| ev[k].is_nan() && ev[k].is_sign_negative());
                    if neg_nan { f64::NAN } else { (lib.perfmon_getMetricOfRegionThread)(r, m, t as c_int) }
                })
                .collect();
            res.metrics.push(row);
        }
        Some(res)
    }
}

/// perfmon_finalize (which also frees the marker results: never call
/// perfmon_destroyMarkerResults first, spec 5), then the other modules.
pub fn teardown(lib: &Likwid) {
    // SAFETY: after read_back; each finalize once.
    unsafe {
        (lib.perfmon_finalize)();
        (lib.affinity_finalize)();
        (lib.numa_finalize)();
        (lib.topology_finalize)();
    }
}

/// Write `doc` to `path` so that `path` only ever holds a complete document: a private
/// temporary file (exclusive, random name) in the same directory, fsync, rename.
pub fn write_json_atomically(path: &Path, doc: &HelperOutput) -> std::io::Result<()> {
    let data = serde_json::to_vec(doc).map_err(std::io::Error::other)?;
    let mut tmp = safe_file::TempFile::create(path)?;
    tmp.write_all(&data)?;
    tmp.persist(0o600)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_round_trip() {
        let a = HelperArgs {
            mode: 0,
            threads: vec![0, 1],
            events: "FLOPS_DP|EV:PMC0".into(),
            marker_file: "/tmp/likwid_12.txt".into(),
            out: "/tmp/x/result.json".into(),
        };
        assert_eq!(HelperArgs::parse(&a.to_argv()).unwrap(), a);
        assert!(HelperArgs::parse(&["--mode".into()]).is_err());
    }

    #[test]
    fn json_is_written_whole() {
        let dir = std::env::temp_dir().join(format!("sp_fullapi_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("result.json");
        let doc = HelperOutput { format: FORMAT, clock_hz: 2.4e9, regions: vec![RegionResult { tag: "a".into(), ..Default::default() }] };
        write_json_atomically(&out, &doc).unwrap();
        let back: HelperOutput = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        assert_eq!(back, doc);
        assert!(!out.with_extension("json.tmp").exists());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
