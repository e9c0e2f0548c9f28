//! `sptool export --format otf2 -o DIR FILE`: an OTF2 archive (`DIR/traces.otf2`, the
//! definitions and one event file per location) written by the OTF2 library itself, `libotf2`
//! of Debian's `libopen-trace-format2-10` package, loaded at run time: sptool works without
//! it, and only this export then says which package to install.
//!
//! One location group per rank (under its host in the system tree), one location per recording
//! thread of the rank, every recorded call as an Enter and a Leave event on rank 0's clock (each
//! rank's times moved by its `clock_offset_ns`), one region definition per region name with its
//! source file and line where the file knows them (names starting with `MPI_` as MPI regions),
//! and the run's metadata as archive properties (`SCOPE_PROFILER::<KEY>`). Streamed: the calls
//! of one rank are in memory at a time, never the whole file. The archive is written into a
//! private directory beside DIR and renamed into place when complete, so a failure leaves
//! nothing behind.

use std::collections::BTreeMap;
use std::ffi::{CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::trace::{TimedCall, Timeline};

/// The library's file names, tried in order.
const LIBRARIES: &[&str] = &["libopen-trace-format2.so.10", "libopen-trace-format2.so", "libotf2.so.10", "libotf2.so"];
/// A library of another prefix (Spack, a module): its path, tried alone.
pub const LIBRARY_ENV: &str = "SPTOOL_OTF2_LIBRARY";
/// Where it comes from.
pub const PACKAGE: &str = "libopen-trace-format2-10 (Debian/Ubuntu: apt-get install libopen-trace-format2-dev otf2-tools)";

/// Added to every time (ns) so that times before the file's clock origin stay unsigned.
const TIME_BASE: u64 = 1 << 62;

type Archive = c_void;
type Writer = c_void;
type Code = c_int;

#[repr(C)]
struct FlushCallbacks {
    pre_flush: extern "C" fn(*mut c_void, u8, u64, *mut c_void, bool) -> u8,
    post_flush: extern "C" fn(*mut c_void, u8, u64) -> u64,
}

extern "C" fn pre_flush(_: *mut c_void, _: u8, _: u64, _: *mut c_void, _: bool) -> u8 {
    1 // OTF2_FLUSH
}

extern "C" fn post_flush(_: *mut c_void, _: u8, _: u64) -> u64 {
    0
}

/// The functions of libotf2 this export calls (OTF2 3.0's API).
#[allow(clippy::type_complexity)]
struct Lib {
    _handle: *mut c_void,
    open: unsafe extern "C" fn(*const c_char, *const c_char, u8, u64, u64, u8, u8) -> *mut Archive,
    close: unsafe extern "C" fn(*mut Archive) -> Code,
    set_flush: unsafe extern "C" fn(*mut Archive, *const FlushCallbacks, *mut c_void) -> Code,
    set_serial: unsafe extern "C" fn(*mut Archive) -> Code,
    set_creator: unsafe extern "C" fn(*mut Archive, *const c_char) -> Code,
    set_description: unsafe extern "C" fn(*mut Archive, *const c_char) -> Code,
    set_property: unsafe extern "C" fn(*mut Archive, *const c_char, *const c_char, bool) -> Code,
    open_evt_files: unsafe extern "C" fn(*mut Archive) -> Code,
    close_evt_files: unsafe extern "C" fn(*mut Archive) -> Code,
    open_def_files: unsafe extern "C" fn(*mut Archive) -> Code,
    close_def_files: unsafe extern "C" fn(*mut Archive) -> Code,
    get_evt_writer: unsafe extern "C" fn(*mut Archive, u64) -> *mut Writer,
    close_evt_writer: unsafe extern "C" fn(*mut Archive, *mut Writer) -> Code,
    get_def_writer: unsafe extern "C" fn(*mut Archive, u64) -> *mut Writer,
    close_def_writer: unsafe extern "C" fn(*mut Archive, *mut Writer) -> Code,
    get_global_def_writer: unsafe extern "C" fn(*mut Archive) -> *mut Writer,
    enter: unsafe extern "C" fn(*mut Writer, *mut c_void, u64, u32) -> Code,
    leave: unsafe extern "C" fn(*mut Writer, *mut c_void, u64, u32) -> Code,
    clock_properties: unsafe extern "C" fn(*mut Writer, u64, u64, u64, u64) -> Code,
    string: unsafe extern "C" fn(*mut Writer, u32, *const c_char) -> Code,
    system_tree_node: unsafe extern "C" fn(*mut Writer, u32, u32, u32, u32) -> Code,
    location_group: unsafe extern "C" fn(*mut Writer, u32, u32, u8, u32, u32) -> Code,
    location: unsafe extern "C" fn(*mut Writer, u64, u32, u8, u64, u32) -> Code,
    region: unsafe extern "C" fn(*mut Writer, u32, u32, u32, u32, u8, u8, u32, u32, u32, u32) -> Code,
    error_name: unsafe extern "C" fn(Code) -> *const c_char,
}

fn missing() -> Error {
    Error::new(format!("the OTF2 export needs the OTF2 library (libotf2), which is not installed here; it is in the package {PACKAGE}, or name one with {LIBRARY_ENV}=/path/to/libotf2.so"))
}

impl Lib {
    fn load() -> Result<Lib> {
        // SAFETY: dlopen/dlsym with NUL-terminated names; each symbol is cast to the signature
        // OTF2 3.0's headers give it.
        unsafe {
            let mut handle = std::ptr::null_mut();
            let named = std::env::var(LIBRARY_ENV).ok().filter(|v| !v.is_empty());
            let candidates: Vec<String> = match &named {
                Some(path) => vec![path.clone()],
                None => LIBRARIES.iter().map(|s| s.to_string()).collect(),
            };
            for name in &candidates {
                let c = CString::new(name.as_str()).unwrap_or_default();
                handle = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
                if !handle.is_null() {
                    break;
                }
            }
            if handle.is_null() {
                return Err(match named {
                    Some(path) => Error::new(format!("{LIBRARY_ENV}={path}: cannot load the OTF2 library there; unset it to use {PACKAGE}")),
                    None => missing(),
                });
            }
            let sym = |name: &str| -> Result<*mut c_void> {
                let c = CString::new(name).unwrap_or_default();
                let p = libc::dlsym(handle, c.as_ptr());
                if p.is_null() {
                    Err(Error::new(format!("the OTF2 library found has no {name} (OTF2 3.0 or newer is needed: {PACKAGE})")))
                } else {
                    Ok(p)
                }
            };
            macro_rules! f {
                ($name:literal) => {
                    std::mem::transmute(sym($name)?)
                };
            }
            Ok(Lib {
                _handle: handle,
                open: f!("OTF2_Archive_Open"),
                close: f!("OTF2_Archive_Close"),
                set_flush: f!("OTF2_Archive_SetFlushCallbacks"),
                set_serial: f!("OTF2_Archive_SetSerialCollectiveCallbacks"),
                set_creator: f!("OTF2_Archive_SetCreator"),
                set_description: f!("OTF2_Archive_SetDescription"),
                set_property: f!("OTF2_Archive_SetProperty"),
                open_evt_files: f!("OTF2_Archive_OpenEvtFiles"),
                close_evt_files: f!("OTF2_Archive_CloseEvtFiles"),
                open_def_files: f!("OTF2_Archive_OpenDefFiles"),
                close_def_files: f!("OTF2_Archive_CloseDefFiles"),
                get_evt_writer: f!("OTF2_Archive_GetEvtWriter"),
                close_evt_writer: f!("OTF2_Archive_CloseEvtWriter"),
                get_def_writer: f!("OTF2_Archive_GetDefWriter"),
                close_def_writer: f!("OTF2_Archive_CloseDefWriter"),
                get_global_def_writer: f!("OTF2_Archive_GetGlobalDefWriter"),
                enter: f!("OTF2_EvtWriter_Enter"),
                leave: f!("OTF2_EvtWriter_Leave"),
                clock_properties: f!("OTF2_GlobalDefWriter_WriteClockProperties"),
                string: f!("OTF2_GlobalDefWriter_WriteString"),
                system_tree_node: f!("OTF2_GlobalDefWriter_WriteSystemTreeNode"),
                location_group: f!("OTF2_GlobalDefWriter_WriteLocationGroup"),
                location: f!("OTF2_GlobalDefWriter_WriteLocation"),
                region: f!("OTF2_GlobalDefWriter_WriteRegion"),
                error_name: f!("OTF2_Error_GetName"),
            })
        }
    }

    fn check(&self, what: &str, code: Code) -> Result<()> {
        if code == 0 {
            return Ok(());
        }
        // SAFETY: OTF2_Error_GetName returns a static string for any code.
        let name = unsafe {
            let p = (self.error_name)(code);
            if p.is_null() { format!("error {code}") } else { std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned() }
        };
        Err(Error::new(format!("the OTF2 library failed in {what}: {name}")))
    }
}

/// Strings of the global definitions, numbered as first asked for.
#[derive(Default)]
struct Strings {
    list: Vec<CString>,
    index: BTreeMap<String, u32>,
}

impl Strings {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let clean: String = s.chars().filter(|&c| c != '\0').collect();
        self.list.push(CString::new(clean).unwrap_or_default());
        let i = (self.list.len() - 1) as u32;
        self.index.insert(s.to_string(), i);
        i
    }
}

/// One thread's calls as Enter/Leave in time order (outer calls first at equal starts); calls
/// that overlap the enclosing call without nesting are cut at its end (counted).
fn write_location(lib: &Lib, w: *mut Writer, calls: &mut [TimedCall], region_of: &[u32], clipped: &mut u64, span: &mut (u64, u64)) -> Result<u64> {
    calls.sort_unstable_by(|a, b| a.start.cmp(&b.start).then(b.dur.cmp(&a.dur)));
    let ts = |t: i64| (t as i128 + TIME_BASE as i128).clamp(0, u64::MAX as i128) as u64;
    let mut stack: Vec<(u64, u32)> = Vec::new();
    let mut events = 0u64;
    let mut leave = |stack: &mut Vec<(u64, u32)>, events: &mut u64| -> Result<()> {
        if let Some((end, region)) = stack.pop() {
            // SAFETY: w is a live event writer of the archive.
            lib.check("OTF2_EvtWriter_Leave", unsafe { (lib.leave)(w, std::ptr::null_mut(), end, region) })?;
            *events += 1;
            span.1 = span.1.max(end);
        }
        Ok(())
    };
    for c in calls.iter() {
        let start = ts(c.start);
        let mut end = ts(c.start.saturating_add(c.dur.max(0)));
        while stack.last().is_some_and(|&(e, _)| e <= start) {
            leave(&mut stack, &mut events)?;
        }
        if let Some(&(outer_end, _)) = stack.last() {
            if end > outer_end {
                end = outer_end;
                *clipped += 1;
            }
        }
        let region = region_of[c.name as usize];
        // SAFETY: as above.
        lib.check("OTF2_EvtWriter_Enter", unsafe { (lib.enter)(w, std::ptr::null_mut(), start, region) })?;
        events += 1;
        span.0 = span.0.min(start);
        stack.push((end, region));
    }
    while !stack.is_empty() {
        leave(&mut stack, &mut events)?;
    }
    Ok(events)
}

/// A private directory beside `out` for the archive, removed unless [`Partial::keep`] moved it.
struct Partial {
    dir: PathBuf,
    done: bool,
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn check_target(out: &Path) -> Result<()> {
    if out.as_os_str() == "-" {
        return Err(Error::new("--format otf2 writes an archive directory: give -o DIR, not -"));
    }
    match std::fs::symlink_metadata(out) {
        Err(_) => Ok(()),
        Ok(m) if m.is_dir() && (out.join("traces.otf2").exists() || std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_none())) => Ok(()),
        Ok(_) => Err(Error::in_file(out, "exists and is not an OTF2 archive sptool wrote (nor an empty directory): not replaced; remove it or name another -o DIR")),
    }
}

/// Export `input` as an OTF2 archive in the directory `out`.
pub fn export(input: &Path, filter: &Filter, out: &Path) -> Result<()> {
    check_target(out)?;
    {
        let (file, _) = crate::h5util::open(input)?;
        if file.attr_string("storage_layout").as_deref() == Some("aggregate") {
            return Err(Error::in_file(
                input,
                "holds aggregates only (the aggregate layout keeps counts and totals per region, not single calls): there are no events to trace; record the run with SCOPE_PROFILER_LAYOUT=regions or columnar for an OTF2 trace",
            ));
        }
    }
    let lib = Lib::load()?;
    let timeline = Timeline::open(input, filter)?;
    let sources = light_metadata(input);

    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let leaf = out.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "otf2".into());
    let tmp = parent.join(format!(".{leaf}.partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir(&tmp).map_err(|e| Error::in_file(out, format!("cannot create the archive directory: {e}")))?;
    let mut partial = Partial { dir: tmp.clone(), done: false };
    crate::guard::note_temp(&tmp);

    let c_path = CString::new(tmp.as_os_str().as_encoded_bytes()).map_err(|_| Error::in_file(out, "the path holds a NUL byte"))?;
    // SAFETY: the path and name are NUL-terminated; FILEMODE_WRITE = 0, SUBSTRATE_POSIX = 1,
    // COMPRESSION_NONE = 1; default chunk sizes.
    let archive = unsafe { (lib.open)(c_path.as_ptr(), c"traces".as_ptr(), 0, 1024 * 1024, 4 * 1024 * 1024, 1, 1) };
    if archive.is_null() {
        return Err(Error::in_file(out, "the OTF2 library could not create the archive"));
    }
    let result = write_archive(&lib, archive, &timeline, input, sources).map_err(|e| e.or_file(input));
    // SAFETY: the archive is open; closing writes the anchor file.
    let closed = lib.check("OTF2_Archive_Close", unsafe { (lib.close)(archive) });
    result?;
    closed.map_err(|e| e.or_file(out))?;

    if out.exists() {
        std::fs::remove_dir_all(out).map_err(|e| Error::in_file(out, format!("cannot replace the old archive: {e}")))?;
    }
    std::fs::rename(&tmp, out).map_err(|e| Error::in_file(out, format!("cannot move the archive into place: {e}")))?;
    partial.done = true;
    crate::guard::note_written(out);
    Ok(())
}

/// The region sources and the run's metadata, without reading the calls.
fn light_metadata(input: &Path) -> Extras {
    let (file, _) = crate::h5util::open(input).ok()?;
    let schema = file.attr_i64(crate::read::SCHEMA_ATTR).unwrap_or(1);
    let ranks = crate::read::rank_groups(&file).ok()?;
    let metadata = if file.has("metadata") { file.group("metadata").ok()?.attrs().ok()? } else { Vec::new() };
    Some((crate::source::read(&file, schema, &ranks), metadata))
}

type Extras = Option<(BTreeMap<String, crate::model::SourceLocation>, crate::model::Attrs)>;

fn write_archive(lib: &Lib, archive: *mut Archive, timeline: &Timeline, input: &Path, extras: Extras) -> Result<()> {
    static CALLBACKS: FlushCallbacks = FlushCallbacks { pre_flush, post_flush };
    // SAFETY: the archive is open; the callbacks are static (OTF2 may keep the pointer).
    unsafe {
        lib.check("OTF2_Archive_SetFlushCallbacks", (lib.set_flush)(archive, &CALLBACKS, std::ptr::null_mut()))?;
        lib.check("OTF2_Archive_SetSerialCollectiveCallbacks", (lib.set_serial)(archive))?;
        let creator = CString::new(format!("sptool {} (scope_profiler)", env!("CARGO_PKG_VERSION"))).unwrap_or_default();
        lib.check("OTF2_Archive_SetCreator", (lib.set_creator)(archive, creator.as_ptr()))?;
        let desc = CString::new(format!("exported from {}", input.display()).replace('\0', "")).unwrap_or_default();
        lib.check("OTF2_Archive_SetDescription", (lib.set_description)(archive, desc.as_ptr()))?;
    }
    let (sources, metadata) = extras.unwrap_or_default();
    for (k, v) in &metadata {
        let key: String = k.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
        let value = crate::caliper::scalar(v);
        let text = match value {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        };
        // An empty value would remove the property (OTF2's rule): left out.
        if text.is_empty() {
            continue;
        }
        let (Ok(name), Ok(val)) = (CString::new(format!("SCOPE_PROFILER::{key}")), CString::new(text.replace('\0', ""))) else { continue };
        // SAFETY: NUL-terminated strings.
        let code = unsafe { (lib.set_property)(archive, name.as_ptr(), val.as_ptr(), true) };
        lib.check(&format!("OTF2_Archive_SetProperty({key})"), code)?;
    }

    let mut strings = Strings::default();
    let names = timeline.names().to_vec();
    let region_of: Vec<u32> = (0..names.len() as u32).collect();
    // SAFETY: the archive is open.
    lib.check("OTF2_Archive_OpenEvtFiles", unsafe { (lib.open_evt_files)(archive) })?;
    // (rank, thread, location id, events)
    let mut locations: Vec<(u32, u32, u64, u64)> = Vec::new();
    let mut clipped = 0u64;
    let mut span = (u64::MAX, 0u64);
    for rank in timeline.ranks() {
        let mut calls = timeline.rank_calls(rank).map_err(|e| e.or_file(input))?;
        calls.sort_unstable_by_key(|c| c.tid);
        let mut i = 0;
        while i < calls.len() {
            let tid = calls[i].tid;
            let j = i + calls[i..].iter().take_while(|c| c.tid == tid).count();
            let id = locations.len() as u64;
            // SAFETY: the event files are open; the writer is closed below.
            let w = unsafe { (lib.get_evt_writer)(archive, id) };
            if w.is_null() {
                return Err(Error::new("the OTF2 library gave no event writer"));
            }
            let events = write_location(lib, w, &mut calls[i..j], &region_of, &mut clipped, &mut span);
            // SAFETY: w came from get_evt_writer.
            let closed = lib.check("OTF2_Archive_CloseEvtWriter", unsafe { (lib.close_evt_writer)(archive, w) });
            let events = events?;
            closed?;
            locations.push((rank, tid, id, events));
            i = j;
        }
    }
    // SAFETY: the archive is open.
    unsafe {
        lib.check("OTF2_Archive_CloseEvtFiles", (lib.close_evt_files)(archive))?;
        lib.check("OTF2_Archive_OpenDefFiles", (lib.open_def_files)(archive))?;
        for &(_, _, id, _) in &locations {
            let w = (lib.get_def_writer)(archive, id);
            if !w.is_null() {
                lib.check("OTF2_Archive_CloseDefWriter", (lib.close_def_writer)(archive, w))?;
            }
        }
        lib.check("OTF2_Archive_CloseDefFiles", (lib.close_def_files)(archive))?;
    }
    if clipped > 0 {
        eprintln!("sptool: {}: {clipped} call(s) overlapped the call around them without nesting in it; their Leave was put at its end", input.display());
    }

    // Global definitions: clock, strings, system tree, groups, locations, regions.
    let gw = unsafe { (lib.get_global_def_writer)(archive) };
    if gw.is_null() {
        return Err(Error::new("the OTF2 library gave no global definition writer"));
    }
    const UNDEF32: u32 = u32::MAX;
    let empty = strings.id("");
    let machine = strings.id("machine");
    let node_class = strings.id("node");
    let mut hosts: BTreeMap<String, u32> = BTreeMap::new();
    let ranks: Vec<u32> = {
        let mut r: Vec<u32> = locations.iter().map(|l| l.0).collect();
        r.dedup();
        r
    };
    let mut tree: Vec<(u32, u32, u32, u32)> = vec![(0, machine, machine, UNDEF32)];
    let mut groups: Vec<(u32, u32, u32)> = Vec::new();
    for &rank in &ranks {
        let host = timeline.host(rank).unwrap_or("unknown host").to_string();
        let next = hosts.len() as u32 + 1;
        let node = *hosts.entry(host.clone()).or_insert_with(|| {
            let name = strings.id(&host);
            tree.push((next, name, node_class, 0));
            next
        });
        groups.push((rank, strings.id(&format!("MPI Rank {rank}")), node));
    }
    let mut locs: Vec<(u64, u32, u64, u32)> = Vec::new();
    for &(rank, tid, id, events) in &locations {
        let label = match timeline.os_tid(rank, tid as i64) {
            Some(os) => format!("Thread {tid} (tid {os})"),
            None => format!("Thread {tid}"),
        };
        locs.push((id, strings.id(&label), events, rank));
    }
    let mut regions: Vec<(u32, u32, bool, u32, u32)> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let (file, line) = match sources.get(name) {
            Some(s) => (strings.id(&s.file), s.line.and_then(|l| u32::try_from(l).ok()).unwrap_or(0)),
            None => (UNDEF32, 0),
        };
        regions.push((i as u32, strings.id(name), name.starts_with("MPI_"), file, line));
    }
    let (start, end) = if span.0 == u64::MAX { (TIME_BASE, TIME_BASE) } else { span };
    // SAFETY: gw is the archive's global definition writer; every string id is written first.
    unsafe {
        lib.check("WriteClockProperties", (lib.clock_properties)(gw, 1_000_000_000, start, end - start, u64::MAX))?;
        for (i, s) in strings.list.iter().enumerate() {
            lib.check("WriteString", (lib.string)(gw, i as u32, s.as_ptr()))?;
        }
        for (id, name, class, parent) in &tree {
            lib.check("WriteSystemTreeNode", (lib.system_tree_node)(gw, *id, *name, *class, *parent))?;
        }
        for (rank, name, node) in &groups {
            // LOCATION_GROUP_TYPE_PROCESS = 1.
            lib.check("WriteLocationGroup", (lib.location_group)(gw, *rank, *name, 1, *node, UNDEF32))?;
        }
        for (id, name, events, group) in &locs {
            // LOCATION_TYPE_CPU_THREAD = 1.
            lib.check("WriteLocation", (lib.location)(gw, *id, *name, 1, *events, *group))?;
        }
        for (id, name, mpi, file, line) in &regions {
            // ROLE_FUNCTION = 1; PARADIGM_USER = 1, PARADIGM_MPI = 4; FLAG_NONE = 0.
            let paradigm = if *mpi { 4 } else { 1 };
            lib.check("WriteRegion", (lib.region)(gw, *id, *name, *name, empty, 1, paradigm, 0, *file, *line, *line))?;
        }
    }
    Ok(())
}
