//! Regions named at finalize: OpenMP constructs, by the return address of the runtime call
//! that announced them (OMPT's `codeptr_ra`), and instrumented functions, by their entry
//! address. The hot path knows only keys (an address and what it stands for); a thread looks a
//! key up in its own cache (`thread`), and only a key the process has never seen takes the
//! lock here, gets a region id with a provisional name (`<label> @ <module>+0x<offset>`, or
//! the function's name when a filter needed it already), and remembers which loaded module
//! holds the address. At finalize, `name_all` resolves every address through the shared
//! symbolizer (debug information and symbol tables read in-process) and gives the regions
//! their real names:
//!
//! - a construct: `<label> @ <file name>:<line>` (the file's last path component; the full
//!   path is the region's source location), or `<label> @ <function>+0x<offset>` without line
//!   information, or `<label> @ <module>+0x<offset>` without a symbol; the label of a Fortran
//!   source may differ (`omp do` for `omp for`);
//! - a function: its name as users write it (`symbols::pretty_function`: C++ demangled,
//!   `module::procedure` for gfortran), or `<module>+0x<offset>`.
//!
//! Names are a function of the binary alone, so every rank of a run names a region alike.
//! Two addresses that get the same name are one region (`registry::name_groups`): a construct
//! in an inlined function, a static function of the same name in two files, one function in
//! two modules, or a function named like one of the program's own regions.

pub mod teams;
pub mod thread;

pub use teams::{Hold, Team};
pub use thread::{Detached, FnState, OmpOpen, Packed, ThreadLate, id_of, local_of};

use crate::model::{OpenCall, SourceLocation};
use crate::registry::{MAX_NAME_LEN, Registry};
use crate::status::Result;
use crate::symbols::{Module, Symbolizer, fallback_name, loaded_modules, pretty_function};
use rustc_hash::FxHashMap;
use parking_lot::{Mutex, MutexGuard};

/// The id of a key that is not recorded (a function a filter excludes, or no id left).
pub const NOT_RECORDED: u32 = u32::MAX;

const ADDR_BITS: u64 = (1 << 56) - 1;

/// The key of `addr` standing for `kind` (0 for functions; the OpenMP tool numbers its kinds):
/// never 0 for a real address or a non-zero kind.
#[inline(always)]
pub fn key(kind: u8, addr: u64) -> u64 {
    (addr & ADDR_BITS) | (kind as u64) << 56
}

/// What the code that records regions by key needs of a thread's recorder (the profiler
/// implements it; a start or stop goes through the counter sources like any region's).
pub trait Recording {
    /// Open a call of region `id` now; false if refused (too deeply nested).
    fn start(&mut self, id: u32) -> bool;
    /// Close the innermost call of `id` at `end` (clock ticks); false if it was not the
    /// innermost open call (then the recorder's rules for a stop out of order apply).
    fn stop(&mut self, id: u32, end: i64) -> bool;
    /// When the innermost open call started, if it is a call of `id`.
    fn innermost_start(&self, id: u32) -> Option<i64>;
    /// The thread's state for these regions.
    fn late(&mut self) -> &mut ThreadLate;
    /// One call of `id` not recorded (refused too deep): counted in the file.
    fn dropped(&mut self, id: u32);
    /// This thread no longer records the instrumented function at `addr`: its hooks return
    /// at once from now on.
    fn skip_site(&mut self, addr: u64);
    /// A new region with a provisional name.
    fn register(&mut self, provisional: &str) -> Result<u32>;
    /// Take the innermost open call off the thread's stack unrecorded if it is a call of `id`
    /// (`outermost`: and the only one open), to be recorded later (`record_detached`). None
    /// where calls are recorded at their end only (counter sources read at each stop).
    fn detach(&mut self, _id: u32, _outermost: bool) -> Option<OpenCall> {
        None
    }
    /// Record a call `detach` took off, ending at `end`, inside `parent` (another detached
    /// call) or, with None, at the top of the thread's calls.
    fn record_detached(&mut self, _call: OpenCall, _end: i64, _parent: Option<&mut OpenCall>) {}
    /// Put a call `detach` took off back on top of the thread's stack.
    fn reattach(&mut self, _call: OpenCall) {}
}

/// How a construct is labelled: `c` in C and C++ sources, `fortran` in Fortran ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label {
    pub c: &'static str,
    pub fortran: &'static str,
}

/// A function's names, for a filter deciding at first sight whether it is recorded.
#[derive(Debug)]
pub struct Named<'a> {
    /// The region name it gets.
    pub name: &'a str,
    /// Its symbol as the linker sees it (mangled), if the symbol table has it.
    pub symbol: Option<&'a str>,
    /// The source file that defines it, if the debug information says.
    pub file: Option<&'a str>,
    /// The executable or shared library that holds it.
    pub module: &'a str,
}

/// Whether a function is recorded (a filter).
pub type Include = fn(&Named<'_>) -> bool;

/// What an address stands for.
#[derive(Debug, Clone, Copy)]
pub enum What {
    /// An instrumented function by its entry address; with `include`, its names are resolved
    /// at first sight and `include` decides whether it is recorded.
    Function { include: Option<Include> },
    /// A construct by a return address (0: unknown, named by its label alone).
    Construct(Label),
}

/// A name given at first sight or at finalize.
#[derive(Debug, Clone, Default, PartialEq)]
struct Resolved {
    name: String,
    location: Option<SourceLocation>,
}

struct Entry {
    id: u32,
    addr: u64,
    what: What,
    /// Index into `Table::modules`.
    module: Option<usize>,
    named: Option<Resolved>,
}

#[derive(Default)]
struct Table {
    map: FxHashMap<u64, u32>,
    entries: Vec<Entry>,
    /// Every module seen loaded (a library unloaded later keeps its entry, so its addresses
    /// are still named).
    modules: Vec<Module>,
    symbolizer: Symbolizer,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn table() -> MutexGuard<'static, Option<Table>> {
    TABLE.lock()
}

/// The value of `key` on the calling thread: its region id (`id_of`; `NOT_RECORDED` for an
/// excluded function) and, for a function, the thread's `FnState` index (`local_of`).
#[inline(always)]
pub fn lookup<R: Recording>(rec: &mut R, key: u64, what: impl FnOnce() -> What) -> Packed {
    match rec.late().cached(key) {
        Some(v) => v,
        None => first_sight(rec, key, what()),
    }
}

/// The value of `key` if this thread has seen it (an exit, a region's end: never a first sight).
#[inline(always)]
pub fn known<R: Recording>(rec: &mut R, key: u64) -> Option<Packed> {
    rec.late().lookup(key)
}

/// A key this thread has not cached: the thread's backing store, or the process's first sight.
#[cold]
#[inline(never)]
fn first_sight<R: Recording>(rec: &mut R, key: u64, what: What) -> Packed {
    if let Some(v) = rec.late().lookup(key) {
        return v;
    }
    let function = matches!(what, What::Function { .. });
    let id = global_id(key, what, |p| rec.register(p));
    rec.late().insert(key, id, function)
}

/// The region id of `key` in this process, registering it when new.
fn global_id(key: u64, what: What, register: impl FnOnce(&str) -> Result<u32>) -> u32 {
    let mut guard = table();
    let t = guard.get_or_insert_with(Table::default);
    if let Some(&id) = t.map.get(&key) {
        return id;
    }
    let addr = key & ADDR_BITS;
    let module = t.module_of(addr);
    let mut named = None;
    if let What::Function { include: Some(include) } = what {
        let (r, symbol) = resolve(&mut t.symbolizer, &t.modules, addr, &what, module);
        let m = module.map_or("", |i| t.modules[i].path.as_str());
        let file = r.location.as_ref().map(|l| l.file.as_str());
        if !include(&Named { name: &r.name, symbol: symbol.as_deref(), file, module: m }) {
            t.map.insert(key, NOT_RECORDED);
            return NOT_RECORDED;
        }
        named = Some(r);
    }
    let provisional = match (&named, what) {
        (Some(r), _) => r.name.clone(),
        (None, What::Function { .. }) => unresolved(&t.modules, module, addr, None),
        (None, What::Construct(label)) => unresolved(&t.modules, module, addr, Some(label.c)),
    };
    let id = match register(&provisional) {
        Ok(id) => id,
        Err(e) => {
            crate::warn::once("late-register", &format!("'{provisional}' is not recorded: {e}"));
            NOT_RECORDED
        }
    };
    t.map.insert(key, id);
    if id != NOT_RECORDED {
        t.entries.push(Entry { id, addr, what, module, named });
    }
    id
}

impl Table {
    /// The module holding `addr`: the most recently loaded one that covers it (the list is
    /// refreshed when no known module does).
    fn module_of(&mut self, addr: u64) -> Option<usize> {
        if addr == 0 {
            return None;
        }
        let find = |modules: &[Module]| modules.iter().rposition(|m| m.ranges.iter().any(|&(s, e)| (s..e).contains(&addr)));
        if let Some(i) = find(&self.modules) {
            return Some(i);
        }
        for m in loaded_modules() {
            if !self.modules.contains(&m) {
                self.modules.push(m);
            }
        }
        find(&self.modules)
    }
}

/// `<module>+0x<offset>`, with `label @ ` before it for a construct.
fn unresolved(modules: &[Module], module: Option<usize>, addr: u64, label: Option<&str>) -> String {
    let place = match module.and_then(|i| modules.get(i)) {
        Some(m) => fallback_name(&m.path, m.base, addr),
        None => format!("0x{addr:x}"),
    };
    clamp(match label {
        Some(l) if addr == 0 => l.to_string(),
        Some(l) => format!("{l} @ {place}"),
        None => place,
    })
}

/// A source file in Fortran (by its extension, as compilers choose the language).
pub fn is_fortran_source(file: &str) -> bool {
    let ext = file.rsplit_once('.').map_or("", |(_, e)| e).to_ascii_lowercase();
    matches!(ext.as_str(), "f" | "for" | "ftn" | "fpp" | "f77" | "f90" | "f95" | "f03" | "f08" | "f18")
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A region name within the registry's limit: a longer one (a C++ template's) is cut at a
/// character boundary and keeps a hash of the whole, so that two long names stay apart.
fn clamp(name: String) -> String {
    if name.len() <= MAX_NAME_LEN && !name.is_empty() {
        return name;
    }
    if name.is_empty() {
        return "?".into();
    }
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3));
    let mut cut = MAX_NAME_LEN - 24;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...#{hash:016x}", &name[..cut])
}

/// The name of `addr` (and, for a function, its raw symbol).
fn resolve(sym: &mut Symbolizer, modules: &[Module], addr: u64, what: &What, module: Option<usize>) -> (Resolved, Option<String>) {
    let Some(m) = module.and_then(|i| modules.get(i)) else {
        let label = match what {
            What::Function { .. } => None,
            What::Construct(l) => Some(l.c),
        };
        return (Resolved { name: unresolved(modules, None, addr, label), location: None }, None);
    };
    match what {
        What::Function { .. } => {
            let place = sym.resolve(&m.path, m.base, addr);
            let symbol = sym.symbol(&m.path, m.base, addr).map(|s| s.0);
            let name = place
                .function
                .clone()
                .or_else(|| symbol.as_deref().map(|s| pretty_function(s, None)))
                .unwrap_or_else(|| fallback_name(&m.path, m.base, addr));
            let location = place.file.map(|file| SourceLocation { file, line: place.line as i64 });
            (Resolved { name: clamp(name), location }, symbol)
        }
        What::Construct(label) => {
            // A return address: the call that announced the construct ends just before it.
            let probe = addr.wrapping_sub(1);
            let place = sym.resolve(&m.path, m.base, probe);
            let fortran = place.file.as_deref().is_some_and(is_fortran_source);
            let l = if fortran { label.fortran } else { label.c };
            let (name, location) = match place.file {
                Some(file) if place.line > 0 => (format!("{l} @ {}:{}", base_name(&file), place.line), Some(SourceLocation { file, line: place.line as i64 })),
                file => {
                    let at = match sym.symbol(&m.path, m.base, probe) {
                        Some((raw, start)) => format!("{}+0x{:x}", pretty_function(&raw, None), addr.wrapping_sub(start)),
                        None => fallback_name(&m.path, m.base, addr),
                    };
                    (format!("{l} @ {at}"), file.map(|file| SourceLocation { file, line: 0 }))
                }
            };
            (Resolved { name: clamp(name), location }, None)
        }
    }
}

/// What finalize learns from naming the regions.
#[derive(Debug, Default)]
pub struct Renamed {
    /// Provisional name -> real name, for results keyed by name before finalize (LIKWID's).
    pub renamed: FxHashMap<String, String>,
    /// The regions that are instrumented functions (their calls open at finalize are the
    /// callers of the finalize, not a missing stop).
    pub functions: Vec<u32>,
}

/// Give every region registered here its real name (at finalize, after the threads stopped
/// recording, while the process's modules are still loaded).
pub fn name_all(registry: &Registry) -> Renamed {
    let mut guard = table();
    let Some(t) = guard.as_mut() else { return Renamed::default() };
    let provisional = registry.names();
    let mut out = Renamed::default();
    let mut named = Vec::with_capacity(t.entries.len());
    let entries = std::mem::take(&mut t.entries);
    for e in &entries {
        let r = match &e.named {
            Some(r) => r.clone(),
            None => resolve(&mut t.symbolizer, &t.modules, e.addr, &e.what, e.module).0,
        };
        if let Some(p) = provisional.get(e.id as usize) {
            out.renamed.insert(p.clone(), r.name.clone());
        }
        if matches!(e.what, What::Function { .. }) {
            out.functions.push(e.id);
        }
        named.push((e.id, r.name, r.location));
    }
    t.entries = entries;
    // The modules' debug information is not needed any more.
    t.symbolizer = Symbolizer::new();
    registry.set_final_names(named);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    #[unsafe(no_mangle)]
    pub extern "C" fn sp_late_test_function() -> u64 {
        std::hint::black_box(7)
    }

    #[test]
    fn names() {
        assert!(is_fortran_source("/a/b/solver.F90") && is_fortran_source("x.f") && !is_fortran_source("x.c") && !is_fortran_source("Makefile"));
        assert_eq!(base_name("/a/b/c.c"), "c.c");
        assert_eq!(clamp("x".into()), "x");
        let long = "é".repeat(MAX_NAME_LEN);
        let c = clamp(long.clone());
        assert!(c.len() <= MAX_NAME_LEN && c.contains("...#"), "{}", c.len());
        assert_ne!(c, clamp(format!("{long}x")));
        assert_eq!(key(0, 0x1234), 0x1234);
        assert_eq!(key(3, 0x1234) >> 56, 3);
        assert_ne!(key(1, 0), 0);
    }

    #[test]
    fn a_function_and_a_construct_of_this_binary() {
        let mut sym = Symbolizer::new();
        let modules = loaded_modules();
        let addr = sp_late_test_function as *const () as usize as u64;
        let i = crate::symbols::find_module(&modules, addr);
        let (f, symbol) = resolve(&mut sym, &modules, addr, &What::Function { include: None }, i);
        assert_eq!(f.name, "sp_late_test_function");
        assert_eq!(symbol.as_deref(), Some("sp_late_test_function"));
        assert!(f.location.as_ref().is_some_and(|l| l.file.ends_with("late/mod.rs") && l.line > 0), "{f:?}");
        // A return address inside it: the label, this file's name and a line.
        let label = Label { c: "omp for", fortran: "omp do" };
        let (c, _) = resolve(&mut sym, &modules, addr + 4, &What::Construct(label), i);
        assert!(c.name.starts_with("omp for @ mod.rs:"), "{c:?}");
        // No module: the address; a construct with no address: its label.
        assert_eq!(resolve(&mut sym, &modules, 0x10, &What::Function { include: None }, None).0.name, "0x10");
        assert_eq!(resolve(&mut sym, &modules, 0, &What::Construct(label), None).0.name, "omp for");
        assert_eq!(unresolved(&modules, None, 0x20, Some("omp for")), "omp for @ 0x20");
    }
}
