//! The marker environment likwid-perfctr sets (spec 2.1/2.2) and the validation of
//! `LIKWID_EVENTS`, which must happen before `likwid_markerInit`: an invalid string makes
//! LIKWID use a negative errno as an array index (SIGSEGV inside the host).

use std::path::PathBuf;

/// `likwid_markerInit` activates only if all four are set.
pub const MARKER_VARS: [&str; 4] = ["LIKWID_MODE", "LIKWID_FILEPATH", "LIKWID_EVENTS", "LIKWID_THREADS"];
/// LIKWID's `MAX_NUM_THREADS` (Debian build): CPU ids must be below it.
pub const MAX_CPUS: usize = 300;

/// One `|`-separated piece of `LIKWID_EVENTS`; its position is the group id.
#[derive(Debug, Clone, PartialEq)]
pub enum EventSet {
    /// A performance group name (`FLOPS_DP`), read from `<arch>/<NAME>.txt`.
    Group(String),
    /// `EVENT:COUNTER[:OPT[=VAL]]...` entries as `(counter with options, event)`.
    Custom(Vec<(String, String)>),
}

#[derive(Debug, Clone)]
pub struct MarkerEnv {
    pub mode: i32,
    pub filepath: PathBuf,
    pub events: String,
    pub sets: Vec<EventSet>,
    pub threads: Vec<i32>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EnvError {
    /// Some of [`MARKER_VARS`] are unset: the process was not started under `likwid-perfctr -m`.
    Missing(Vec<&'static str>),
    /// Set but unusable (bad `LIKWID_EVENTS`, `LIKWID_THREADS`, `LIKWID_MODE`).
    Invalid(String),
}

/// Every `LIKWID_*` variable of this process (lossy UTF-8), sorted by name.
pub fn likwid_vars() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, val)| {
            let k = k.to_string_lossy().into_owned();
            k.starts_with("LIKWID_").then(|| (k, val.to_string_lossy().into_owned()))
        })
        .collect();
    v.sort();
    v
}

fn lookup<'a>(vars: &'a [(String, String)], name: &str) -> Option<&'a str> {
    vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Read the marker environment from `vars` (see [`likwid_vars`]) and check its syntax.
/// Group names are checked against the group files separately ([`check_groups`]).
pub fn detect(vars: &[(String, String)]) -> Result<MarkerEnv, EnvError> {
    let missing: Vec<&'static str> = MARKER_VARS.iter().copied().filter(|n| lookup(vars, n).is_none()).collect();
    if !missing.is_empty() {
        return Err(EnvError::Missing(missing));
    }
    let get = |n| lookup(vars, n).unwrap_or_default();
    let mode: i32 = get("LIKWID_MODE")
        .trim()
        .parse()
        .ok()
        .filter(|m| (-1..=1).contains(m))
        .ok_or_else(|| EnvError::Invalid(format!("LIKWID_MODE={:?} is not 0, 1 or -1", get("LIKWID_MODE"))))?;
    let filepath = get("LIKWID_FILEPATH");
    if filepath.is_empty() {
        return Err(EnvError::Invalid("LIKWID_FILEPATH is empty".into()));
    }
    let threads = parse_threads(get("LIKWID_THREADS"))?;
    let events = get("LIKWID_EVENTS").to_string();
    let sets = parse_events(&events).map_err(|e| EnvError::Invalid(format!("LIKWID_EVENTS={events:?}: {e}")))?;
    Ok(MarkerEnv { mode, filepath: PathBuf::from(filepath), events, sets, threads })
}

fn parse_threads(s: &str) -> Result<Vec<i32>, EnvError> {
    let bad = || EnvError::Invalid(format!("LIKWID_THREADS={s:?} is not a comma list of CPU ids below {MAX_CPUS}"));
    let mut out = Vec::new();
    for piece in s.split(',') {
        let c: i32 = piece.trim().parse().map_err(|_| bad())?;
        if c < 0 || c as usize >= MAX_CPUS || out.contains(&c) {
            return Err(bad());
        }
        out.push(c);
    }
    Ok(out)
}

fn is_word(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Counter register names: `PMC0`, `FIXC1`, `MBOX0C0`, `PWR0`, `UBOXFIX`, ...
fn is_counter(s: &str) -> bool {
    is_word(s) && s.as_bytes()[0].is_ascii_uppercase()
}

/// Split `LIKWID_EVENTS` into event sets, rejecting what `perfmon_addEventSet` rejects
/// (`-`, `.`) and anything that is not a well-formed group name or custom list.
pub fn parse_events(events: &str) -> Result<Vec<EventSet>, String> {
    if events.contains('-') || events.contains('.') {
        return Err("contains '-' or '.', which LIKWID rejects".into());
    }
    let mut sets = Vec::new();
    for (gid, piece) in events.split('|').enumerate() {
        if piece.is_empty() {
            return Err(format!("event set {gid} is empty"));
        }
        if !piece.contains(':') {
            if !is_word(piece) {
                return Err(format!("{piece:?} is not a group name"));
            }
            sets.push(EventSet::Group(piece.to_string()));
            continue;
        }
        let mut entries = Vec::new();
        for entry in piece.split(',') {
            let mut parts = entry.split(':');
            let event = parts.next().unwrap_or_default();
            let counter = parts.next().unwrap_or_default();
            if !is_word(event) || !is_counter(counter) {
                return Err(format!("{entry:?} is not EVENT:COUNTER"));
            }
            let mut full_counter = counter.to_string();
            for opt in parts {
                let (name, val) = opt.split_once('=').map_or((opt, None), |(n, v)| (n, Some(v)));
                if !is_word(name) || val.is_some_and(|v| !is_word(v)) {
                    return Err(format!("bad option {opt:?} in {entry:?}"));
                }
                full_counter.push(':');
                full_counter.push_str(opt);
            }
            entries.push((full_counter, event.to_string()));
        }
        sets.push(EventSet::Custom(entries));
    }
    Ok(sets)
}

/// Every group name must exist as `<dir>/<arch>/<NAME>.txt` (else `perfmon_addEventSet`
/// fails and `likwid_markerInit` crashes). Returns the file of each group set.
pub fn check_groups(sets: &[EventSet], dirs: &[PathBuf], arch: &str) -> Result<Vec<Option<PathBuf>>, String> {
    sets.iter()
        .map(|s| match s {
            EventSet::Group(name) => super::perfgroup::find_file(dirs, arch, name).map(Some).ok_or_else(|| {
                let looked: Vec<String> = dirs.iter().map(|d| d.join(arch).display().to_string()).collect();
                format!("no performance group {name} for CPU arch {arch} (looked in {})", looked.join(", "))
            }),
            EventSet::Custom(_) => Ok(None),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn full(events: &str) -> Vec<(String, String)> {
        vars(&[("LIKWID_MODE", "0"), ("LIKWID_FILEPATH", "/tmp/likwid_1.txt"), ("LIKWID_EVENTS", events), ("LIKWID_THREADS", "0,1")])
    }

    #[test]
    fn all_four_required() {
        let mut v = full("FLOPS_DP");
        v.retain(|(k, _)| k != "LIKWID_THREADS" && k != "LIKWID_MODE");
        assert_eq!(detect(&v).unwrap_err(), EnvError::Missing(vec!["LIKWID_MODE", "LIKWID_THREADS"]));
        assert_eq!(detect(&[]).unwrap_err(), EnvError::Missing(MARKER_VARS.to_vec()));
    }

    #[test]
    fn good_environment() {
        let e = detect(&full("FLOPS_DP|RETIRED_INSTRUCTIONS:PMC0,CPU_CLOCKS_UNHALTED:PMC1:EDGEDETECT")).unwrap();
        assert_eq!(e.mode, 0);
        assert_eq!(e.threads, vec![0, 1]);
        assert_eq!(e.sets[0], EventSet::Group("FLOPS_DP".into()));
        assert_eq!(
            e.sets[1],
            EventSet::Custom(vec![
                ("PMC0".into(), "RETIRED_INSTRUCTIONS".into()),
                ("PMC1:EDGEDETECT".into(), "CPU_CLOCKS_UNHALTED".into())
            ])
        );
    }

    #[test]
    fn bad_event_strings() {
        for bad in [
            "",
            "FLOPS-DP",
            "FLOPS.DP",
            "FLOPS_DP|",
            "|X",
            "A B",
            "EV:",
            ":PMC0",
            "EV:pmc0",
            "EV:PMC0,",
            "EV:PMC0:OPT=",
            "EV:PMC0:=3",
            "FLOPS_DP;rm",
        ] {
            assert!(matches!(detect(&full(bad)), Err(EnvError::Invalid(_))), "{bad:?} accepted");
        }
        assert!(parse_events("CBOX0C1:STATE=0x1").is_err(), "a group name cannot contain '='");
        assert!(parse_events("EV_A:CBOX0C1:STATE=0x1").is_ok());
    }

    #[test]
    fn bad_threads_and_mode() {
        let mut v = full("FLOPS_DP");
        v[3].1 = "0-3".into();
        assert!(matches!(detect(&v), Err(EnvError::Invalid(_))));
        v[3].1 = "300".into();
        assert!(matches!(detect(&v), Err(EnvError::Invalid(_))));
        v[3].1 = "1,1".into();
        assert!(matches!(detect(&v), Err(EnvError::Invalid(_))));
        let mut v = full("FLOPS_DP");
        v[0].1 = "daemon".into();
        assert!(matches!(detect(&v), Err(EnvError::Invalid(_))));
    }

    #[test]
    fn groups_must_exist_for_the_arch() {
        let root = std::env::temp_dir().join(format!("sp_groups_{}", std::process::id()));
        std::fs::create_dir_all(root.join("zen3")).unwrap();
        std::fs::write(root.join("zen3/FLOPS_DP.txt"), "SHORT x\n").unwrap();
        let dirs = vec![root.clone()];
        let sets = parse_events("FLOPS_DP|EV:PMC0").unwrap();
        let files = check_groups(&sets, &dirs, "zen3").unwrap();
        assert!(files[0].is_some() && files[1].is_none());
        let err = check_groups(&parse_events("NO_SUCH_GROUP").unwrap(), &dirs, "zen3").unwrap_err();
        assert!(err.contains("NO_SUCH_GROUP") && err.contains("zen3"), "{err}");
        assert!(check_groups(&sets, &dirs, "skylakeX").is_err());
        std::fs::remove_dir_all(root).unwrap();
    }
}
