//! Call sites: a return address of this process turned into the module that holds it, the
//! offset in that module, and (from the module's DWARF debug information, read in-process with
//! the `addr2line` crate) the function, file and line. Done at finalize, while the process's
//! mappings are the ones the addresses were taken in. Self-contained: a shared symbolizer can
//! replace `resolve`.

use crate::mpi_stats::ResolvedSite;
use std::collections::HashMap;
use std::ffi::{CStr, c_void};

/// Resolves addresses, loading each module's debug information once.
#[derive(Default)]
pub struct Symbolizer {
    modules: HashMap<String, Option<addr2line::Loader>>,
}

impl Symbolizer {
    /// `address` is a return address: the call instruction ends just before it.
    pub fn resolve(&mut self, address: u64) -> ResolvedSite {
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads the loader's tables for this address.
        if address == 0 || unsafe { libc::dladdr(address as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
            return (String::new(), address, String::new(), String::new(), 0);
        }
        // SAFETY: a NUL-terminated name owned by the loader.
        let mut module = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
        if module.is_empty() || !module.starts_with('/') {
            module = std::fs::read_link("/proc/self/exe").map(|p| p.to_string_lossy().into_owned()).unwrap_or(module);
        }
        let offset = address.wrapping_sub(info.dli_fbase as u64);
        let loader = self.modules.entry(module.clone()).or_insert_with(|| addr2line::Loader::new(&module).ok());
        let (mut function, mut file, mut line) = (String::new(), String::new(), 0);
        if let Some(l) = loader {
            let probe = offset.wrapping_sub(1);
            if let Ok(mut frames) = l.find_frames(probe) {
                if let Ok(Some(f)) = frames.next() {
                    if let Some(name) = f.function.as_ref().and_then(|n| n.demangle().ok()) {
                        function = name.into_owned();
                    }
                    if let Some(loc) = f.location {
                        file = loc.file.unwrap_or_default().to_string();
                        line = loc.line.unwrap_or(0);
                    }
                }
            }
            if function.is_empty() {
                function = l.find_symbol(probe).unwrap_or_default().to_string();
            }
        }
        if function.is_empty() && !info.dli_sname.is_null() {
            // SAFETY: a NUL-terminated name owned by the loader.
            function = unsafe { CStr::from_ptr(info.dli_sname) }.to_string_lossy().into_owned();
        }
        (module, offset, function, file, line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn here() -> u64 {
        // An address inside this function, plus one (as a return address would be).
        here as *const () as usize as u64 + 1
    }

    #[test]
    fn resolves_an_address_of_this_test_binary() {
        let mut s = Symbolizer::default();
        let (module, offset, function, file, _line) = s.resolve(here());
        assert!(module.contains("scope_profiler"), "{module}");
        assert!(offset > 0);
        assert!(function.contains("here"), "{function}");
        assert!(file.ends_with("sites.rs"), "{file}");
        assert_eq!(s.resolve(0).0, "");
    }
}
