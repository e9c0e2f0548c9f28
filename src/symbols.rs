//! Addresses of the running program to functions and source lines, with Rust DWARF and
//! symbol-table readers (the `addr2line` crate; no external `addr2line` process): used at
//! finalize and by `sptool` for sampled addresses, the OpenMP constructs' code pointers,
//! instrumented functions and MPI call sites.
//!
//! An address is resolved through the module (executable or shared library) it lies in: the
//! modules loaded in the process are listed with `dl_iterate_phdr` (path, load bias, and the
//! address ranges of their loadable segments); the bias is subtracted to probe the module's
//! own debug information, so PIE executables, non-PIE ones (bias 0) and shared libraries all
//! work. Without debug information the symbol table still gives the function (`??` file,
//! line 0); without either, `<module>+0x<offset>`.

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
    for m in modules.iter_mut().filter(|m| m.path.is_empty()) {
        m.path = exe.clone();
        break;
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

/// Resolves addresses module by module, each module's debug information read once.
#[derive(Default)]
pub struct Symbolizer {
    loaders: HashMap<String, Option<addr2line::Loader>>,
}

/// The largest module file the symbolizer reads (a guard against a path in a damaged file
/// naming something huge).
pub const MAX_MODULE_BYTES: u64 = 16 << 30;

impl Symbolizer {
    pub fn new() -> Symbolizer {
        Symbolizer::default()
    }

    fn loader(&mut self, path: &str) -> Option<&addr2line::Loader> {
        self.loaders
            .entry(path.to_string())
            .or_insert_with(|| {
                // Only regular files: a path read from a file may name a FIFO or a device.
                let meta = std::fs::metadata(path).ok()?;
                if !meta.is_file() || meta.len() > MAX_MODULE_BYTES {
                    return None;
                }
                addr2line::Loader::new(path).ok()
            })
            .as_ref()
    }

    /// Resolve the runtime address `addr` of module `path` loaded with bias `base`.
    pub fn resolve(&mut self, path: &str, base: u64, addr: u64) -> Place {
        let probe = addr.wrapping_sub(base);
        let Some(loader) = self.loader(path) else { return Place::default() };
        let mut place = Place::default();
        if let Ok(mut frames) = loader.find_frames(probe) {
            // The innermost frame (an inlined function, if the address is inside one) gives
            // the line, and the function whose code it is.
            while let Ok(Some(frame)) = frames.next() {
                if place.function.is_none() && place.file.is_none() {
                    if let Some(f) = frame.function.as_ref() {
                        if let Ok(raw) = f.raw_name() {
                            place.function = Some(pretty_function(&raw, f.language));
                        }
                    }
                    if let Some(loc) = frame.location {
                        place.file = loc.file.map(str::to_string);
                        place.line = loc.line.unwrap_or(0);
                    }
                    break;
                }
            }
        }
        if place.function.is_none() {
            place.function = loader.find_symbol(probe).map(|s| pretty_function(s, None));
        }
        if place.file.is_none() {
            if let Ok(Some(loc)) = loader.find_location(probe) {
                place.file = loc.file.map(str::to_string);
                place.line = loc.line.unwrap_or(0);
            }
        }
        place
    }
}

impl Symbolizer {
    /// The symbol-table entry covering the runtime address `addr` of module `path` loaded with
    /// bias `base`: its raw (mangled) name and its runtime start address.
    pub fn symbol(&mut self, path: &str, base: u64, addr: u64) -> Option<(String, u64)> {
        let s = self.loader(path)?.find_symbol_info(addr.wrapping_sub(base))?;
        Some((s.name().to_string(), s.address().wrapping_add(base)))
    }

    /// Where the function holding `addr` (runtime address in module `path`, loaded with bias
    /// `base`) starts: the file and line of its symbol's first instruction (its opening line),
    /// when the symbol table and the line table know them.
    pub fn function_start(&mut self, path: &str, base: u64, addr: u64) -> Option<(String, u32)> {
        let loader = self.loader(path)?;
        let start = loader.find_symbol_info(addr.wrapping_sub(base))?.address();
        let loc = loader.find_location(start).ok()??;
        Some((loc.file?.to_string(), loc.line.filter(|&l| l > 0)?))
    }
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
