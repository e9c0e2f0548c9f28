//! LIKWID performance group files (`perfgroups/<arch>/<GROUP>.txt`, spec section 4):
//! where to find them, how to read them, and how to name a marker-file record with them.

use std::path::{Path, PathBuf};

/// A parsed group file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PerfGroup {
    pub name: String,
    pub short: String,
    /// `(counter, event)` in EVENTSET order; the counter keeps its options (`PMC3:EDGEDETECT`).
    pub events: Vec<(String, String)>,
    /// `(metric name, formula)` in METRICS order.
    pub metrics: Vec<(String, String)>,
    pub require_noht: bool,
}

#[derive(PartialEq)]
enum Section {
    None,
    EventSet,
    Metrics,
    Long,
}

/// Parse like `perfgroup_readGroup`: `#` lines skipped, sections by line prefix,
/// EVENTSET/METRICS end at a blank line, the last METRICS token is the formula.
pub fn parse(name: &str, text: &str) -> PerfGroup {
    let mut g = PerfGroup { name: name.to_string(), ..Default::default() };
    let mut sec = Section::None;
    for raw in text.lines() {
        let line = raw.trim_end();
        if sec == Section::Long {
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.strip_prefix("SHORT") {
            g.short = rest.trim().to_string();
            sec = Section::None;
            continue;
        }
        if line.starts_with("EVENTSET") {
            sec = Section::EventSet;
            continue;
        }
        if line.starts_with("METRICS") {
            sec = Section::Metrics;
            continue;
        }
        if line.starts_with("LONG") || line.starts_with("LUA") {
            sec = Section::Long;
            continue;
        }
        if line.starts_with("REQUIRE_NOHT") {
            g.require_noht = true;
            continue;
        }
        if line.trim().is_empty() {
            sec = Section::None;
            continue;
        }
        let toks: Vec<&str> = line.split_whitespace().collect();
        match sec {
            Section::EventSet if toks.len() >= 2 => g.events.push((toks[0].to_string(), toks[1].to_string())),
            Section::Metrics if toks.len() >= 2 => {
                let formula = toks[toks.len() - 1].to_string();
                g.metrics.push((toks[..toks.len() - 1].join(" "), formula));
            }
            _ => {}
        }
    }
    g
}

/// Group directories in LIKWID's order: the configured group path (`<prefix>/share/likwid/perfgroups`),
/// then `~/.likwid/groups`.
pub fn group_dirs(configured: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(c) = configured {
        dirs.push(c.to_path_buf());
    }
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        dirs.push(PathBuf::from(home).join(".likwid/groups"));
    }
    dirs
}

/// Group files longer than this are not read (they are a few KiB; the directories come from
/// the environment and `$HOME`, and are read like any path named by the user: regular files
/// only, never blocking).
pub const MAX_GROUP_BYTES: u64 = 1 << 20;

/// `<dir>/<arch>/<name>.txt` of the first directory that has it.
pub fn find_file(dirs: &[PathBuf], arch: &str, name: &str) -> Option<PathBuf> {
    dirs.iter().map(|d| d.join(arch).join(format!("{name}.txt"))).find(|p| p.is_file())
}

/// Every group of `arch` (first directory wins for a name), parsed, sorted by name.
pub fn load_all(dirs: &[PathBuf], arch: &str) -> Vec<PerfGroup> {
    let mut out: Vec<PerfGroup> = Vec::new();
    for d in dirs {
        let Ok(entries) = std::fs::read_dir(d.join(arch)) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(str::to_string) else { continue };
            if path.extension().is_none_or(|x| x != "txt") || out.iter().any(|g| g.name == name) {
                continue;
            }
            if let Ok(text) = safe_file::read_regular_text(&path, MAX_GROUP_BYTES) {
                out.push(parse(&name, &text));
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

pub fn load(dirs: &[PathBuf], arch: &str, name: &str) -> Option<PerfGroup> {
    let path = find_file(dirs, arch, name)?;
    let text = safe_file::read_regular_text(&path, MAX_GROUP_BYTES).ok()?;
    Some(parse(name, &text))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub const ZEN3_FLOPS_DP: &str = "SHORT Double Precision MFLOP/s

EVENTSET
FIXC1 ACTUAL_CPU_CLOCK
FIXC2 MAX_CPU_CLOCK
PMC0  RETIRED_INSTRUCTIONS
PMC1  CPU_CLOCKS_UNHALTED
PMC2  RETIRED_SSE_AVX_FLOPS_ALL
PMC3  MERGE

METRICS
Runtime (RDTSC) [s] time
Runtime unhalted [s]   FIXC1*inverseClock
Clock [MHz]  1.E-06*(FIXC1/FIXC2)/inverseClock
CPI   PMC1/PMC0
DP [MFLOP/s]   1.0E-06*(PMC2)/time

LONG
Formulas:
CPI = CPU_CLOCKS_UNHALTED/RETIRED_INSTRUCTIONS
DP [MFLOP/s] = 1.0E-06*(RETIRED_SSE_AVX_FLOPS_ALL)/time
-
Profiling group to measure (double-precisision) FLOP rate.
";

    #[test]
    fn zen3_flops_dp() {
        let g = parse("FLOPS_DP", ZEN3_FLOPS_DP);
        assert_eq!(g.short, "Double Precision MFLOP/s");
        let counters: Vec<&str> = g.events.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(counters, ["FIXC1", "FIXC2", "PMC0", "PMC1", "PMC2", "PMC3"]);
        assert_eq!(g.events[4].1, "RETIRED_SSE_AVX_FLOPS_ALL");
        let names: Vec<&str> = g.metrics.iter().map(|m| m.0.as_str()).collect();
        assert_eq!(names, ["Runtime (RDTSC) [s]", "Runtime unhalted [s]", "Clock [MHz]", "CPI", "DP [MFLOP/s]"]);
        assert_eq!(g.metrics[2].1, "1.E-06*(FIXC1/FIXC2)/inverseClock");
        assert!(!g.require_noht);
    }

    #[test]
    fn comments_options_and_noht() {
        let text = "# comment\nREQUIRE_NOHT\nSHORT x\n\nEVENTSET\nPMC3:EDGEDETECT  EV_A\n# skipped\nCBOX0C1:STATE=0x1 EV_B\n\nMETRICS\nm  PMC3:EDGEDETECT+CBOX0C1:STATE=0x1\n";
        let g = parse("X", text);
        assert!(g.require_noht);
        assert_eq!(g.events, vec![("PMC3:EDGEDETECT".into(), "EV_A".into()), ("CBOX0C1:STATE=0x1".into(), "EV_B".into())]);
        assert_eq!(g.metrics, vec![("m".into(), "PMC3:EDGEDETECT+CBOX0C1:STATE=0x1".into())]);
    }

    #[test]
    fn installed_groups_parse_when_present() {
        // Every installed group file parses into events and metrics whose formulas
        // tokenize; this runs over whatever LIKWID put on this machine.
        let root = Path::new("/usr/share/likwid/perfgroups/zen3");
        let Ok(dir) = std::fs::read_dir(root) else { return };
        let mut n = 0;
        for e in dir.flatten() {
            let text = std::fs::read_to_string(e.path()).unwrap();
            let g = parse("g", &text);
            assert!(!g.events.is_empty(), "{:?}", e.path());
            for (_, f) in &g.metrics {
                crate::likwid::formula::identifiers(f).unwrap_or_else(|err| panic!("{:?}: {f}: {err}", e.path()));
            }
            n += 1;
        }
        assert!(n > 5);
    }
}
