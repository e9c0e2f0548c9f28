//! Describing the run: the attributes of `metadata/` and this process's `rank<N>/` attributes.
//! Names follow the Python package (shared/specs/hdf5-layout.md).

use crate::config::{Config, MetadataDetail};
use crate::model::{AttrValue, RankInfo, RankProfile, RunFacts};

/// HDF5 attributes are limited to 64 KiB; longer values are cut (as the Python package does).
pub const MAX_VALUE_CHARS: usize = 60_000;
const TRUNCATION_MARKER: &str = "...[truncated]";

pub fn truncate(value: &str) -> String {
    if value.chars().count() <= MAX_VALUE_CHARS {
        return value.to_string();
    }
    let keep = MAX_VALUE_CHARS - TRUNCATION_MARKER.len();
    value.chars().take(keep).collect::<String>() + TRUNCATION_MARKER
}

impl RunFacts {
    pub fn now() -> RunFacts {
        RunFacts { timestamp: iso8601_utc(std::time::SystemTime::now()), omp_num_threads: omp_num_threads() }
    }
}

/// The `metadata/` attributes of the file.
pub fn run_metadata(config: &Config, facts: &RunFacts, mpi_size: i64, num_nodes: i64) -> Vec<(String, AttrValue)> {
    let uts = uname();
    let mut out: Vec<(String, AttrValue)> = vec![
        ("timestamp".into(), AttrValue::Str(facts.timestamp.clone())),
        ("platform".into(), AttrValue::Str(format!("{}-{}-{}", uts.sysname, uts.release, uts.machine))),
        ("chip_information".into(), AttrValue::Str(chip_information())),
        ("scope_profiler_version".into(), AttrValue::Str(env!("CARGO_PKG_VERSION").to_string())),
        ("writer".into(), AttrValue::Str(format!("scope_profiler C ABI library {}", env!("CARGO_PKG_VERSION")))),
        ("omp_num_threads".into(), AttrValue::Int(facts.omp_num_threads)),
        ("mpi_size".into(), AttrValue::Int(mpi_size)),
        ("total_cores".into(), AttrValue::Int(mpi_size * facts.omp_num_threads)),
        ("num_nodes".into(), AttrValue::Int(num_nodes)),
        ("language".into(), AttrValue::Str(config.language.clone())),
        ("clock_mode".into(), AttrValue::Str(config.clock.as_str().into())),
    ];
    if let Some(pages) = crate::calllog::huge::report() {
        out.push(("call_log_pages".into(), AttrValue::Str(pages)));
    }
    if config.metadata_detail == MetadataDetail::Full {
        out.push(("hostname".into(), AttrValue::Str(uts.nodename.clone())));
        out.push((
            "uname".into(),
            AttrValue::Str(format!("{} {} {} {} {}", uts.sysname, uts.nodename, uts.release, uts.version, uts.machine)),
        ));
        if let Ok(dir) = std::env::current_dir() {
            out.push(("working_directory".into(), AttrValue::Str(truncate(&dir.to_string_lossy()))));
        }
        out.push(("user".into(), AttrValue::Str(user_name())));
        let modules = std::env::var("LOADEDMODULES").unwrap_or_default();
        let modules: Vec<String> = modules.split(':').filter(|m| !m.is_empty()).map(truncate).collect();
        out.push(("modules".into(), AttrValue::StrList(modules)));
        let mut vars: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
            .filter(|(k, v)| {
                !v.is_empty()
                    && (matches!(k.as_str(), "PATH" | "LD_LIBRARY_PATH" | "LOADEDMODULES" | "MODULEPATH")
                        || k.starts_with("SLURM_")
                        || k.starts_with("SLURMD_"))
            })
            .collect();
        vars.sort();
        out.extend(vars.into_iter().map(|(k, v)| (k, AttrValue::Str(truncate(&v)))));
    }
    if !config.perf_events.trim().is_empty() {
        // As requested; rank<N>/perf_events/event_names lists the events that could be counted.
        out.push(("perf_events".into(), AttrValue::Str(truncate(config.perf_events.trim()))));
        if !config.perf_regions.trim().is_empty() {
            out.push(("perf_regions".into(), AttrValue::Str(truncate(config.perf_regions.trim()))));
        }
    }
    // The user's own keys (this process's values: rank 0's in a run's file).
    out.extend(user_attrs());
    out
}

/// What `minimal` also leaves out of a rank's own data before it is written: the host name
/// (rank 0 counts nodes from the names it gathered before this) and the LIKWID marker file
/// path (it may name a user's directory).
pub fn apply_detail(config: &Config, profile: &mut RankProfile) {
    if config.metadata_detail == MetadataDetail::Minimal {
        profile.info.hostname.clear();
        profile.likwid.env.retain(|(k, _)| k != "LIKWID_FILEPATH");
    }
}

/// This process's `rank<N>/` attributes (threads are filled in at finalize).
pub fn local_rank_info() -> RankInfo {
    RankInfo {
        hostname: uname().nodename,
        pid: std::process::id() as i64,
        cpus: affinity(),
        thread_os_ids: Vec::new(),
        extra: Vec::new(),
    }
}

/// The `rank<N>/` attributes about this rank's clock: which one the hot path read, the TSC
/// frequency found, the anchors, the largest conversion error, and whether the checks passed
/// (`clock_status` "ok", or "unreliable: why"). `note` says why `auto` did not use the TSC, or
/// why a forced TSC was unsafe.
pub fn clock_attrs(r: &crate::clock::ClockReport, note: Option<&str>) -> Vec<(String, AttrValue)> {
    let mut out = vec![
        ("clock".into(), AttrValue::Str(r.clock.into())),
        ("clock_error_bound_ns".into(), AttrValue::Int(r.error_bound_ns)),
        ("clock_status".into(), AttrValue::Str(truncate(&r.status))),
    ];
    if let Some(hz) = r.tsc_hz {
        out.push(("clock_tsc_hz".into(), AttrValue::Int(hz)));
        out.push(("clock_anchors".into(), AttrValue::Int(r.anchors as i64)));
    }
    if let Some(hz) = r.histogram_hz {
        out.push(("clock_histogram_tsc_hz".into(), AttrValue::Int(hz)));
    }
    if let Some(note) = note {
        out.push(("clock_note".into(), AttrValue::Str(truncate(note))));
    }
    out
}

/// The run's clock for `metadata/`, pooled over the ranks' clock attributes (each rank converts
/// its own ticks, see `clock_attrs`): the clock used (`tsc`, `monotonic`, or `mixed` when ranks
/// differ), the first rank's TSC frequency, the largest conversion error bound of any rank, and
/// `ok` or which ranks' conversions were flagged.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClockSummary {
    clocks: std::collections::BTreeSet<String>,
    tsc_hz: Option<i64>,
    error_bound_ns: i64,
    flagged: Vec<i64>,
}

impl ClockSummary {
    pub fn add(&mut self, rank: i64, info: &RankInfo) {
        for (k, v) in &info.extra {
            match (k.as_str(), v) {
                ("clock", AttrValue::Str(c)) => {
                    self.clocks.insert(c.clone());
                }
                ("clock_tsc_hz", AttrValue::Int(hz)) => {
                    self.tsc_hz.get_or_insert(*hz);
                }
                ("clock_error_bound_ns", AttrValue::Int(b)) => self.error_bound_ns = self.error_bound_ns.max(*b),
                ("clock_status", AttrValue::Str(s)) if s != "ok" => self.flagged.push(rank),
                _ => {}
            }
        }
    }

    /// This summary (of some ranks) followed by `later` (of the ranks after them).
    pub fn then(mut self, later: ClockSummary) -> ClockSummary {
        self.clocks.extend(later.clocks);
        self.tsc_hz = self.tsc_hz.or(later.tsc_hz);
        self.error_bound_ns = self.error_bound_ns.max(later.error_bound_ns);
        self.flagged.extend(later.flagged);
        self
    }

    pub fn attrs(&self) -> Vec<(String, AttrValue)> {
        if self.clocks.is_empty() {
            return Vec::new();
        }
        let clock = if self.clocks.len() == 1 { self.clocks.iter().next().cloned().unwrap_or_default() } else { "mixed".into() };
        let mut out = vec![("clock".into(), AttrValue::Str(clock)), ("clock_error_bound_ns".into(), AttrValue::Int(self.error_bound_ns))];
        if let Some(hz) = self.tsc_hz {
            out.push(("clock_tsc_hz".into(), AttrValue::Int(hz)));
        }
        let status = if self.flagged.is_empty() {
            "ok".to_string()
        } else {
            let ranks: Vec<String> = self.flagged.iter().map(|r| r.to_string()).collect();
            format!("unreliable on rank(s) {} (see their clock_status)", ranks.join(", "))
        };
        out.push(("clock_status".into(), AttrValue::Str(status)));
        out
    }
}

pub struct Uname {
    pub sysname: String,
    pub nodename: String,
    pub release: String,
    pub version: String,
    pub machine: String,
}

pub fn uname() -> Uname {
    // SAFETY: zeroed utsname is a valid out-buffer; fields are NUL-terminated on success.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::uname(&mut u) } == 0;
    let field = |f: &[libc::c_char]| -> String {
        if !ok {
            return "unknown".into();
        }
        let bytes: Vec<u8> = f.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Uname {
        sysname: field(&u.sysname),
        nodename: field(&u.nodename),
        release: field(&u.release),
        version: field(&u.version),
        machine: field(&u.machine),
    }
}

pub fn hostname() -> String {
    uname().nodename
}

fn chip_information() -> String {
    if let Ok(text) = std::fs::read_to_string("/proc/cpuinfo") {
        for line in text.lines() {
            if let Some((key, value)) = line.split_once(':') {
                let key = key.trim().to_ascii_lowercase();
                if key == "model name" || key == "cpu model" {
                    return value.trim().to_string();
                }
            }
        }
    }
    uname().machine
}

fn user_name() -> String {
    // SAFETY: getpwuid returns NULL or a pointer to static storage valid until the next call.
    unsafe {
        let pw = libc::getpwuid(libc::getuid());
        if !pw.is_null() && !(*pw).pw_name.is_null() {
            return std::ffi::CStr::from_ptr((*pw).pw_name).to_string_lossy().into_owned();
        }
    }
    std::env::var("USER").unwrap_or_else(|_| "unknown".into())
}

/// The CPUs this process may run on.
pub fn affinity() -> Vec<i64> {
    // SAFETY: zeroed cpu_set_t is valid; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).map(|c| c as i64).collect()
    }
}

/// OpenMP threads: ask the OpenMP runtime if the host has one loaded, else `OMP_NUM_THREADS`.
fn omp_num_threads() -> i64 {
    // SAFETY: dlsym on RTLD_DEFAULT only looks the symbol up; it is called only if present,
    // with the signature the OpenMP standard gives it.
    unsafe {
        let sym = libc::dlsym(libc::RTLD_DEFAULT, c"omp_get_max_threads".as_ptr());
        if !sym.is_null() {
            let f: extern "C" fn() -> libc::c_int = std::mem::transmute(sym);
            return f().max(1) as i64;
        }
    }
    std::env::var("OMP_NUM_THREADS")
        .ok()
        .and_then(|v| v.split(',').next().and_then(|s| s.trim().parse::<i64>().ok()))
        .filter(|&n| n > 0)
        .unwrap_or(1)
}

/// `YYYY-MM-DDTHH:MM:SS.ffffff+00:00`, like Python's `datetime.now(timezone.utc).isoformat()`.
pub fn iso8601_utc(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (H. Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + if month <= 2 { 1 } else { 0 };
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}+00:00",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_micros()
    )
}

// ---------------------------------------------------------------------------------------
// Run metadata of the user's own: `sp_set_metadata(key, value)` and
// `SCOPE_PROFILER_METADATA_SET="key=value,key=value"`.
//
// The key rule: the user's key `K` is stored as the attribute `user.K` (in `metadata/`, with
// rank 0's value, and on every rank's own attributes, with that rank's value), and the library
// never writes a name that starts with `user.`, so no user key can clash with ours. Values that
// are integers written the canonical way (`-12`, `4096`) are stored as int64; every other value
// as the string given (`1.50` stays `1.50`); the exports read a string that parses as a number
// as that number.

/// The prefix of every user key in the file.
pub const USER_PREFIX: &str = "user.";
/// Longest key, in bytes.
pub const MAX_USER_KEY_BYTES: usize = 64;
/// Longest value, in bytes.
pub const MAX_USER_VALUE_BYTES: usize = 4096;
/// Most distinct keys per process.
pub const MAX_USER_KEYS: usize = 64;
/// The environment variable for job scripts.
pub const METADATA_ENV: &str = "SCOPE_PROFILER_METADATA_SET";

static USER: parking_lot::Mutex<Option<Vec<(String, String)>>> = parking_lot::Mutex::new(None);

/// Why a key or value was refused: (status, message).
pub type Refusal = (crate::status::Status, String);

/// Check a key: 1 to 64 bytes of UTF-8 letters, digits and `_ . - :`, not starting with `.`.
pub fn check_user_key(key: &str) -> Result<(), Refusal> {
    use crate::status::Status;
    if key.is_empty() {
        return Err((Status::EmptyName, "sp_set_metadata: the key is empty".into()));
    }
    if key.len() > MAX_USER_KEY_BYTES {
        return Err((Status::NameTooLong, format!("sp_set_metadata: the key {:?}... is longer than {MAX_USER_KEY_BYTES} bytes", key.chars().take(20).collect::<String>())));
    }
    if key.starts_with('.') || !key.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '-' | ':')) {
        return Err((Status::InvalidArgument, format!("sp_set_metadata: the key {key:?} may hold only letters, digits and _ . - : (not starting with .)")));
    }
    Ok(())
}

/// Check a value: at most 4096 bytes, no control characters but tab.
pub fn check_user_value(key: &str, value: &str) -> Result<(), Refusal> {
    use crate::status::Status;
    if value.len() > MAX_USER_VALUE_BYTES {
        return Err((Status::InvalidArgument, format!("sp_set_metadata: the value of {key:?} is {} bytes, more than {MAX_USER_VALUE_BYTES}", value.len())));
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err((Status::InvalidArgument, format!("sp_set_metadata: the value of {key:?} holds a control character")));
    }
    Ok(())
}

fn with_user<R>(f: impl FnOnce(&mut Vec<(String, String)>) -> R) -> R {
    let mut guard = USER.lock();
    let list = guard.get_or_insert_with(|| {
        let mut list = Vec::new();
        if let Ok(text) = std::env::var(METADATA_ENV) {
            for item in parse_env_list(&text) {
                match item {
                    Ok((k, v)) => {
                        let _ = insert(&mut list, k, v);
                    }
                    Err(message) => crate::warn::once(&format!("metadata-env:{message}"), &format!("{METADATA_ENV}: {message}; that entry was ignored")),
                }
            }
        }
        list
    });
    f(list)
}

/// `key=value,key=value` (a value may hold `=`; `\,` is a comma inside a value).
fn parse_env_list(text: &str) -> Vec<Result<(String, String), String>> {
    let mut items = Vec::new();
    let mut cur = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&',') => cur.push(chars.next().unwrap_or(',')),
            ',' => items.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    items.push(cur);
    items
        .into_iter()
        .filter(|i| !i.trim().is_empty())
        .map(|i| match i.split_once('=') {
            Some((k, v)) => {
                let k = k.trim();
                check_user_key(k).and_then(|()| check_user_value(k, v)).map_err(|(_, m)| m.replacen("sp_set_metadata: ", "", 1))?;
                Ok((k.to_string(), v.to_string()))
            }
            None => Err(format!("{:?} is not key=value", i.chars().take(40).collect::<String>())),
        })
        .collect()
}

fn insert(list: &mut Vec<(String, String)>, key: String, value: String) -> Result<(), Refusal> {
    if let Some(e) = list.iter_mut().find(|(k, _)| *k == key) {
        e.1 = value;
        return Ok(());
    }
    if list.len() >= MAX_USER_KEYS {
        return Err((crate::status::Status::InvalidArgument, format!("sp_set_metadata: more than {MAX_USER_KEYS} keys; {key:?} was not stored")));
    }
    list.push((key, value));
    Ok(())
}

/// Set (or replace) the user's key on this process; refusals leave everything as it was.
pub fn set_user(key: &str, value: &str) -> Result<(), Refusal> {
    check_user_key(key)?;
    check_user_value(key, value)?;
    with_user(|list| insert(list, key.to_string(), value.to_string()))
}

/// A value as stored: int64 when it is an integer written the canonical way, else the string.
pub fn user_value(value: &str) -> AttrValue {
    match value.parse::<i64>() {
        Ok(n) if n.to_string() == value => AttrValue::Int(n),
        _ => AttrValue::Str(value.to_string()),
    }
}

/// This process's user metadata as attributes (`user.<key>`), in the order first set.
pub fn user_attrs() -> Vec<(String, AttrValue)> {
    with_user(|list| list.iter().map(|(k, v)| (format!("{USER_PREFIX}{k}"), user_value(v))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn iso8601() {
        assert_eq!(iso8601_utc(UNIX_EPOCH), "1970-01-01T00:00:00.000000+00:00");
        let t = UNIX_EPOCH + Duration::from_micros(1_709_210_096_123_456); // 2024-02-29 (leap day)
        assert_eq!(iso8601_utc(t), "2024-02-29T12:34:56.123456+00:00");
    }

    #[test]
    fn truncation_keeps_values_storable() {
        assert_eq!(truncate("short"), "short");
        let long = "x".repeat(70_000);
        let t = truncate(&long);
        assert_eq!(t.chars().count(), MAX_VALUE_CHARS);
        assert!(t.ends_with("...[truncated]"));
    }

    #[test]
    fn local_facts() {
        let info = local_rank_info();
        assert_eq!(info.pid, std::process::id() as i64);
        assert!(!info.cpus.is_empty());
        assert!(!info.hostname.is_empty());
    }

    #[test]
    fn user_keys_and_values_are_checked() {
        assert!(check_user_key("problem_size").is_ok());
        assert!(check_user_key("git.commit-id:short").is_ok());
        for bad in ["", "a/b", ".hidden", "with space", "x\u{1}"] {
            assert!(check_user_key(bad).is_err(), "{bad:?}");
        }
        assert!(check_user_key(&"k".repeat(65)).is_err());
        assert!(check_user_value("k", &"v".repeat(4097)).is_err());
        assert!(check_user_value("k", "line\nbreak").is_err());
        assert!(matches!(user_value("4096"), AttrValue::Int(4096)));
        assert!(matches!(user_value("-3"), AttrValue::Int(-3)));
        assert!(matches!(user_value("007"), AttrValue::Str(_)));
        assert!(matches!(user_value("1.50"), AttrValue::Str(_)));
    }

    #[test]
    fn environment_list() {
        let items = parse_env_list("size=128, deck=a\\,b ,bad,x/y=1,,eq=a=b");
        assert_eq!(items[0], Ok(("size".into(), "128".into())));
        assert_eq!(items[1], Ok(("deck".into(), "a,b ".into())));
        assert!(items[2].is_err() && items[3].is_err());
        assert_eq!(items[4], Ok(("eq".into(), "a=b".into())));
    }
}
