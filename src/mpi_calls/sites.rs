//! Call sites: a return address of this process turned into the module that holds it, the
//! offset in that module (its address in the module's file), and the function, file and line,
//! through the shared symbolizer (`symbols`). Done at finalize, while the process's mappings
//! are the ones the addresses were taken in.

use crate::mpi_stats::ResolvedSite;
use crate::symbols::{Module, Symbolizer as Shared, find_module, loaded_modules};

/// Resolves return addresses against the modules loaded at finalize.
pub struct Symbolizer {
    modules: Vec<Module>,
    shared: Shared,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Symbolizer { modules: loaded_modules(), shared: Shared::new() }
    }
}

impl Symbolizer {
    /// `address` is a return address: the call instruction ends just before it.
    pub fn resolve(&mut self, address: u64) -> ResolvedSite {
        let Some(m) = (address != 0).then(|| find_module(&self.modules, address)).flatten().map(|i| &self.modules[i]) else {
            return (String::new(), address, String::new(), String::new(), 0);
        };
        let place = self.shared.resolve(&m.path, m.base, address.wrapping_sub(1));
        (m.path.clone(), address.wrapping_sub(m.base), place.function.unwrap_or_default(), place.file.unwrap_or_default(), place.line)
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
