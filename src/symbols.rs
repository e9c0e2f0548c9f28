//! Addresses of the running program to functions and source lines, with Rust DWARF and
//! symbol-table readers (the `addr2line` crate; no external `addr2line` process): used at
//! finalize and by `sptool` for sampled addresses, the OpenMP constructs' code pointers,
//! instrumented functions and MPI call sites.
//!
//! An address is resolved through the module (executable or shared library) it lies in: the
//! modules loaded in the process are listed with `dl_iterate_phdr` (path, load bias, and the
//! address ranges of their loadable segments); the bias is subtracted to probe the module's
//! own debug information, so PIE executables, non-PIE ones (bias 0) and shared libraries all
//! work. A module without debug information of its own is looked up in its split debug file
//! (Debian's `-dbg`/`-dbgsym` packages): by build id, `<dir>/.build-id/xx/yyyy.debug`, then by
//! its `.gnu_debuglink` name beside it, in its `.debug/` and under `<dir>`, where `<dir>` is
//! `/usr/lib/debug` (or the directories of `SCOPE_PROFILER_DEBUG_DIR`, colon-separated); a
//! debug file is used only if its build id is the module's. Without line information the
//! symbol tables (the debug file's full one, else the module's, else its dynamic one) give the
//! function, but only a symbol whose range contains the address (the nearest symbol below an
//! address is often another function: glibc's `memset` variants are local symbols, and the
//! dynamic symbol before them is `__nss_database_lookup`); otherwise `<module>+0x<offset>`.

use std::collections::HashMap;
use std::ffi::{CStr, c_int, c_void};

/// One loaded module: where it lies in the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// The file it was loaded from (the executable's own path for the main program).
    pub path: String,
    /// Load bias: runtime address minus the address in the file.
    pub base: u64,
    /// Runtime address ranges [start, end) of its loadable segments.
    pub ranges: Vec<(u64, u64)>,
}

/// What an address resolved to. `function` is demangled (C++, Rust) and gfortran's module
/// procedures read `module::procedure`; `file`/`line` are None/0 without line information.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Place {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: u32,
}

/// The modules loaded in this process now.
pub fn loaded_modules() -> Vec<Module> {
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid info for the duration of the call; data is ours.
        let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<Module>)) };
        let name = if info.dlpi_name.is_null() { String::new() } else { unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned() };
        let mut ranges = Vec::new();
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: dlpi_phdr holds dlpi_phnum program headers.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type == libc::PT_LOAD {
                let start = info.dlpi_addr.wrapping_add(ph.p_vaddr);
                ranges.push((start, start.wrapping_add(ph.p_memsz)));
            }
        }
        out.push(Module { path: name, base: info.dlpi_addr, ranges });
        0
    }
    let mut modules: Vec<Module> = Vec::new();
    // SAFETY: the callback only reads what the loader hands it and pushes onto our Vec.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut modules as *mut Vec<Module>).cast()) };
    // The first entry is the main program, with an empty name.
    let exe = std::fs::read_link("/proc/self/exe").map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    if let Some(m) = modules.iter_mut().find(|m| m.path.is_empty()) {
        m.path = exe;
    }
    // The vDSO and other modules without a file cannot be resolved; keep them listed (their
    // addresses are still attributed to a module) only when they have a path.
    modules.retain(|m| !m.path.is_empty() && !m.ranges.is_empty());
    modules
}

/// The language of the main program, from the runtimes its executable itself needs
/// (`DT_NEEDED` of its dynamic section, read in memory): "Fortran" (libgfortran, libflang,
/// libifcore), "C++" (libstdc++, libc++), else "C"; None when the executable has no dynamic
/// section to read (static) or it cannot be read.
pub fn program_language() -> Option<&'static str> {
    #[repr(C)]
    struct Dyn {
        tag: i64,
        val: u64,
    }
    struct Found {
        needed: Vec<u64>,
        strtab: u64,
        strsz: u64,
        base: u64,
        seen: bool,
    }
    unsafe extern "C" fn first(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid info for the duration of the call; data is ours.
        let (info, f) = unsafe { (&*info, &mut *(data as *mut Found)) };
        f.seen = true;
        f.base = info.dlpi_addr;
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: dlpi_phdr holds dlpi_phnum program headers.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type != libc::PT_DYNAMIC {
                continue;
            }
            let mut d = info.dlpi_addr.wrapping_add(ph.p_vaddr) as *const Dyn;
            let end = info.dlpi_addr.wrapping_add(ph.p_vaddr).wrapping_add(ph.p_memsz);
            // SAFETY: the mapped dynamic section, read up to DT_NULL or its size.
            while (d as u64) + std::mem::size_of::<Dyn>() as u64 <= end {
                let e = unsafe { &*d };
                match e.tag {
                    0 => break,
                    1 if f.needed.len() < 4096 => f.needed.push(e.val),
                    5 => f.strtab = e.val,
                    10 => f.strsz = e.val,
                    _ => {}
                }
                d = d.wrapping_add(1);
            }
        }
        1 // the main program only
    }
    let mut f = Found { needed: Vec::new(), strtab: 0, strsz: 0, base: 0, seen: false };
    // SAFETY: the callback reads what the loader hands it and writes into our Found.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut f as *mut Found).cast()) };
    if !f.seen || f.strtab == 0 || f.strsz == 0 {
        return None;
    }
    // The loader relocates DT_STRTAB in memory on most targets; where it does not, the value
    // is the address in the file.
    let strtab = if f.strtab < f.base { f.strtab.wrapping_add(f.base) } else { f.strtab };
    let program = loaded_modules().into_iter().next()?;
    if !program.ranges.iter().any(|&(s, e)| (s..e).contains(&strtab) && strtab.saturating_add(f.strsz) <= e) {
        return None;
    }
    let mut language = "C";
    for off in f.needed {
        if off >= f.strsz {
            continue;
        }
        // SAFETY: within the string table, which lies inside a loaded segment (checked above).
        let name = unsafe { CStr::from_ptr((strtab + off) as *const std::ffi::c_char) }.to_bytes();
        let starts = |p: &[u8]| name.starts_with(p);
        if starts(b"libgfortran.") || starts(b"libflang") || starts(b"libifcore") {
            return Some("Fortran");
        }
        if starts(b"libstdc++.") || starts(b"libc++.") {
            language = "C++";
        }
    }
    Some(language)
}

/// The module holding `addr`, if any.
pub fn find_module(modules: &[Module], addr: u64) -> Option<usize> {
    modules.iter().position(|m| m.ranges.iter().any(|&(s, e)| (s..e).contains(&addr)))
}

/// Where split debug files are looked for (`SCOPE_PROFILER_DEBUG_DIR`, colon-separated
/// directories; default `/usr/lib/debug`).
pub const ENV_DEBUG_DIR: &str = "SCOPE_PROFILER_DEBUG_DIR";

fn debug_dirs() -> Vec<std::path::PathBuf> {
    match std::env::var_os(ENV_DEBUG_DIR).filter(|v| !v.is_empty()) {
        Some(v) => std::env::split_paths(&v).filter(|p| !p.as_os_str().is_empty()).collect(),
        None => vec![std::path::PathBuf::from("/usr/lib/debug")],
    }
}

/// A module file opened the safe way (a regular file, never blocking) and mapped.
struct Mapped {
    map: memmap2::Mmap,
    /// The name of exactly the file opened (`/proc/self/fd/N` while `_file` is open).
    _file: std::fs::File,
    by_fd: std::path::PathBuf,
}

fn map_file(path: &std::path::Path) -> Option<Mapped> {
    let file = safe_file::open_regular(path).ok()?;
    if file.metadata().ok()?.len() > MAX_MODULE_BYTES || safe_file::on_pseudo_fs(&file) {
        return None;
    }
    // SAFETY: a read-only private mapping of a regular file; a module file changed while it is
    // read gives wrong names at worst (the parsers check every offset against the map).
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    let p = std::path::PathBuf::from(format!("/proc/self/fd/{fd}"));
    let by_fd = if p.exists() { p } else { path.to_path_buf() };
    Some(Mapped { map, _file: file, by_fd })
}

/// Sized function symbols [start, end) (file addresses) and their raw names, sorted.
fn sized_symbols(obj: &object::File<'_>) -> Vec<(u64, u64, String)> {
    use object::{Object, ObjectSymbol, SymbolKind};
    let table = |syms: object::SymbolIterator<'_, '_>| -> Vec<(u64, u64, String)> {
        syms.filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
            .filter_map(|s| Some((s.address(), s.address().saturating_add(s.size()), s.name().ok()?.to_string())))
            .filter(|(a, _, n)| *a != 0 && !n.is_empty())
            .collect()
    };
    let mut v = table(obj.symbols());
    if v.is_empty() {
        v = table(obj.dynamic_symbols());
    }
    // Several names of one function (aliases): the global one sorts first by name length.
    v.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.2.len().cmp(&b.2.len())));
    v
}

/// The symbol whose range contains `probe` (a zero-sized symbol only at its own address).
fn containing(symbols: &[(u64, u64, String)], probe: u64) -> Option<(&str, u64)> {
    let i = symbols.partition_point(|s| s.0 <= probe);
    // The nearest symbols at or below the address, innermost (latest start) first.
    symbols[..i].iter().rev().take(64).find(|s| probe < s.1 || (s.0 == s.1 && s.0 == probe)).map(|s| (s.2.as_str(), s.0))
}

/// A module's split debug file, if one with its build id is installed.
fn find_debug_file(module: &std::path::Path, obj: &object::File<'_>) -> Option<Mapped> {
    use object::Object;
    let id = obj.build_id().ok().flatten().filter(|id| id.len() >= 2);
    let same_id = |m: &Mapped| -> bool {
        let Ok(d) = object::File::parse(&*m.map) else { return false };
        match (id, d.build_id().ok().flatten()) {
            (Some(a), Some(b)) => a == b,
            (None, _) => true,
            (Some(_), None) => false,
        }
    };
    let dirs = debug_dirs();
    if let Some(id) = id {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        for d in &dirs {
            let p = d.join(".build-id").join(&hex[..2]).join(format!("{}.debug", &hex[2..]));
            if let Some(m) = map_file(&p).filter(|m| same_id(m)) {
                return Some(m);
            }
        }
    }
    let (name, _crc) = obj.gnu_debuglink().ok().flatten()?;
    let name = std::path::Path::new(std::ffi::OsStr::from_bytes_safe(name)?);
    if name.components().count() != 1 {
        return None; // a bare file name only: never a path out of the debug directories
    }
    let real = std::fs::canonicalize(module).ok()?;
    let dir = real.parent()?;
    let mut candidates = vec![dir.join(name), dir.join(".debug").join(name)];
    for d in &dirs {
        candidates.push(d.join(dir.strip_prefix("/").unwrap_or(dir)).join(name));
    }
    candidates.into_iter().filter(|c| c.as_path() != real.as_path()).find_map(|c| map_file(&c).filter(|m| same_id(m)))
}

trait FromBytesSafe {
    fn from_bytes_safe(b: &[u8]) -> Option<&std::ffi::OsStr>;
}

impl FromBytesSafe for std::ffi::OsStr {
    fn from_bytes_safe(b: &[u8]) -> Option<&std::ffi::OsStr> {
        use std::os::unix::ffi::OsStrExt;
        (!b.is_empty() && !b.contains(&0) && !b.contains(&b'/')).then(|| std::ffi::OsStr::from_bytes(b))
    }
}

/// One module's means of resolving: its DWARF (its own, or its split debug file's) and its
/// sized function symbols.
struct ModuleInfo {
    dwarf: Option<addr2line::Loader>,
    symbols: Vec<(u64, u64, String)>,
}

impl ModuleInfo {
    fn open(path: &str) -> Option<ModuleInfo> {
        let module = map_file(std::path::Path::new(path))?;
        let obj = object::File::parse(&*module.map).ok()?;
        let own_dwarf = {
            use object::{Object, ObjectSection};
            obj.section_by_name(".debug_info").is_some_and(|s| s.size() > 0)
        };
        let debug = if own_dwarf { None } else { find_debug_file(std::path::Path::new(path), &obj) };
        let mut symbols = Vec::new();
        if let Some(d) = &debug {
            if let Ok(dobj) = object::File::parse(&*d.map) {
                symbols = sized_symbols(&dobj);
            }
        }
        if symbols.is_empty() {
            symbols = sized_symbols(&obj);
        }
        let dwarf = addr2line::Loader::new(&debug.as_ref().unwrap_or(&module).by_fd).ok();
        Some(ModuleInfo { dwarf, symbols })
    }
}

/// Resolves addresses module by module, each module's debug information read once.
#[derive(Default)]
pub struct Symbolizer {
    modules: HashMap<String, Option<ModuleInfo>>,
}

/// The largest module file the symbolizer reads (a guard against a path in a damaged file
/// naming something huge).
pub const MAX_MODULE_BYTES: u64 = 16 << 30;

impl Symbolizer {
    pub fn new() -> Symbolizer {
        Symbolizer::default()
    }

    fn module(&mut self, path: &str) -> Option<&ModuleInfo> {
        // Only regular files, opened without blocking: a path read from a file may name a
        // FIFO or a device.
        self.modules.entry(path.to_string()).or_insert_with(|| ModuleInfo::open(path)).as_ref()
    }

    /// Resolve the runtime address `addr` of module `path` loaded with bias `base`.
    pub fn resolve(&mut self, path: &str, base: u64, addr: u64) -> Place {
        let probe = addr.wrapping_sub(base);
        let Some(module) = self.module(path) else { return Place::default() };
        let mut place = Place::default();
        if let Some(loader) = &module.dwarf {
            if let Ok(mut frames) = loader.find_frames(probe) {
                // The innermost frame (an inlined function, if the address is inside one) gives
                // the line, and the function whose code it is.
                if let Ok(Some(frame)) = frames.next() {
                    if let Some(f) = frame.function.as_ref() {
                        if let Ok(raw) = f.raw_name() {
                            place.function = Some(pretty_function(&raw, f.language));
                        }
                    }
                    if let Some(loc) = frame.location {
                        place.file = loc.file.map(str::to_string);
                        place.line = loc.line.unwrap_or(0);
                    }
                }
            }
        }
        if place.function.is_none() {
            place.function = containing(&module.symbols, probe).map(|(s, _)| pretty_function(s, None));
        }
        if place.file.is_none() {
            if let Some(Ok(Some(loc))) = module.dwarf.as_ref().map(|l| l.find_location(probe)) {
                place.file = loc.file.map(str::to_string);
                place.line = loc.line.unwrap_or(0);
            }
        }
        place
    }
}

impl Symbolizer {
    /// The symbol-table entry whose range contains the runtime address `addr` of module `path`
    /// loaded with bias `base`: its raw (mangled) name and its runtime start address.
    pub fn symbol(&mut self, path: &str, base: u64, addr: u64) -> Option<(String, u64)> {
        let (name, start) = containing(&self.module(path)?.symbols, addr.wrapping_sub(base))?;
        Some((name.to_string(), start.wrapping_add(base)))
    }

    /// Where the function holding `addr` (runtime address in module `path`, loaded with bias
    /// `base`) starts: the file and line of its symbol's first instruction (its opening line),
    /// when the symbol table and the line table know them.
    pub fn function_start(&mut self, path: &str, base: u64, addr: u64) -> Option<(String, u32)> {
        let module = self.module(path)?;
        let (_, start) = containing(&module.symbols, addr.wrapping_sub(base))?;
        let loc = module.dwarf.as_ref()?.find_location(start).ok()??;
        Some((loc.file?.to_string(), loc.line.filter(|&l| l > 0)?))
    }
}

/// The path of the module this library is in (`(scope_profiler)` in sampled code).
pub fn own_module_path() -> Option<String> {
    static OWN: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    OWN.get_or_init(|| {
        let modules = loaded_modules();
        find_module(&modules, own_module_path as *const () as usize as u64).map(|i| modules[i].path.clone())
    })
    .clone()
}

/// A function name as users write it: C++ and Rust demangled, gfortran's module procedures
/// (`__mod_MOD_proc`) as `mod::proc`, and a Fortran external procedure (`work_`, when the
/// debug information says the code is Fortran) as `work`.
pub fn pretty_function(raw: &str, language: Option<gimli_lang::DwLang>) -> String {
    if let Some(rest) = raw.strip_prefix("__") {
        if let Some((module, procedure)) = rest.split_once("_MOD_") {
            if !module.is_empty() && !procedure.is_empty() {
                return format!("{module}::{procedure}");
            }
        }
    }
    if language.is_some_and(is_fortran) {
        if let Some(name) = raw.strip_suffix('_').filter(|n| !n.is_empty() && !n.ends_with('_')) {
            return name.to_string();
        }
    }
    addr2line::demangle_auto(std::borrow::Cow::Borrowed(raw), language).into_owned()
}

fn is_fortran(language: gimli_lang::DwLang) -> bool {
    use addr2line::gimli::*;
    [DW_LANG_Fortran77, DW_LANG_Fortran90, DW_LANG_Fortran95, DW_LANG_Fortran03, DW_LANG_Fortran08].contains(&language)
}

/// `gimli`'s language constant, through `addr2line`'s re-export.
pub mod gimli_lang {
    pub use addr2line::gimli::DwLang;
}

/// `<file name>+0x<offset>` for an address no symbol covers.
pub fn fallback_name(path: &str, base: u64, addr: u64) -> String {
    let name = std::path::Path::new(path).file_name().map_or_else(|| path.to_string(), |n| n.to_string_lossy().into_owned());
    format!("{name}+0x{:x}", addr.wrapping_sub(base))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    #[unsafe(no_mangle)]
    pub extern "C" fn sp_symbols_test_marker() -> u64 {
        std::hint::black_box(42)
    }

    #[test]
    fn resolves_a_function_of_this_test_binary() {
        let modules = loaded_modules();
        let addr = sp_symbols_test_marker as *const () as usize as u64;
        let i = find_module(&modules, addr).expect("the test's own function lies in a loaded module");
        let m = &modules[i];
        let place = Symbolizer::new().resolve(&m.path, m.base, addr);
        assert_eq!(place.function.as_deref(), Some("sp_symbols_test_marker"), "{place:?} in {m:?}");
        assert!(place.file.as_deref().is_some_and(|f| f.ends_with("symbols.rs")), "{place:?}");
        assert!(place.line > 0);
        // A module that does not exist resolves to nothing, without error.
        assert_eq!(Symbolizer::new().resolve("/nonexistent/lib.so", 0, 0x1000), Place::default());
        // A FIFO is never opened.
        let fifo = std::env::temp_dir().join(format!("sp_symbols_fifo_{}", std::process::id()));
        let c = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(Symbolizer::new().resolve(&fifo.to_string_lossy(), 0, 0x1000), Place::default());
        std::fs::remove_file(&fifo).unwrap();
    }

    /// A shared library without debug information: the symbol table gives the function.
    #[test]
    fn resolves_a_libc_function_by_its_symbol() {
        let modules = loaded_modules();
        let addr = libc::getpid as *const () as usize as u64;
        let m = &modules[find_module(&modules, addr).expect("getpid lies in a loaded module")];
        assert!(m.path.contains("libc"), "{m:?}");
        assert_ne!(m.base, 0, "a shared library is loaded with a bias");
        let place = Symbolizer::new().resolve(&m.path, m.base, addr);
        assert!(place.function.as_deref().is_some_and(|f| f.contains("getpid")), "{place:?}");
        let (raw, start) = Symbolizer::new().symbol(&m.path, m.base, addr + 1).expect("getpid has a symbol");
        assert!(raw.contains("getpid") && start == addr, "{raw} at {start:#x}, getpid at {addr:#x}");
    }

    #[test]
    fn names_as_users_write_them() {
        assert_eq!(pretty_function("__physics_MOD_flux", None), "physics::flux");
        assert_eq!(pretty_function("_ZN6solver4stepEv", None), "solver::step()");
        assert_eq!(pretty_function("plain_c", None), "plain_c");
        assert_eq!(pretty_function("__", None), "__");
        let fortran = Some(addr2line::gimli::DW_LANG_Fortran95);
        assert_eq!(pretty_function("work_", fortran), "work");
        assert_eq!(pretty_function("work_", None), "work_");
        assert_eq!(pretty_function("MAIN__", fortran), "MAIN__");
        assert_eq!(pretty_function("__physics_MOD_flux", fortran), "physics::flux");
        assert_eq!(fallback_name("/usr/lib/libfoo.so.1", 0x1000, 0x1234), "libfoo.so.1+0x234");
    }
}
