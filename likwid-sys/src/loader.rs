//! Where to look for liblikwid and how to open it (`dlopen`, never a link-time dependency).

use std::ffi::{CStr, CString, OsStr, c_void};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Library file names tried in each directory, in order.
pub fn library_names() -> &'static [&'static str] {
    &["liblikwid.so", "liblikwid.so.5", "liblikwid.so.5.5", "liblikwid.so.5.2"]
}

/// Debian multiarch directory name of this target (`lib/<triplet>`).
fn multiarch_triplet() -> Option<&'static str> {
    if cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        Some("x86_64-linux-gnu")
    } else if cfg!(all(target_arch = "aarch64", target_os = "linux")) {
        Some("aarch64-linux-gnu")
    } else if cfg!(all(target_arch = "powerpc64", target_endian = "little", target_os = "linux")) {
        Some("powerpc64le-linux-gnu")
    } else {
        None
    }
}

/// `<prefix>` of the first `likwid-perfctr` on `path` (`<prefix>/bin/likwid-perfctr`).
fn perfctr_prefix(path: Option<&OsStr>) -> Option<PathBuf> {
    for dir in std::env::split_paths(path?) {
        let exe = dir.join("likwid-perfctr");
        if exe.is_file() {
            // Resolve symlinks (e.g. /usr/local/bin -> /opt/likwid/bin) to find the real prefix.
            let real = std::fs::canonicalize(&exe).unwrap_or(exe);
            return real.parent()?.parent().map(Path::to_path_buf);
        }
    }
    None
}

/// Every path tried by [`crate::Likwid::load`], in order. Bare names (no `/`) go to the
/// loader's default search.
pub fn candidates() -> Vec<PathBuf> {
    candidates_from(std::env::var_os("LIKWID_HOME").as_deref(), std::env::var_os("PATH").as_deref())
}

/// [`candidates`] for given values of `LIKWID_HOME` and `PATH`.
pub fn candidates_from(likwid_home: Option<&OsStr>, path: Option<&OsStr>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(home) = likwid_home.filter(|h| !h.is_empty()) {
        dirs.push(PathBuf::from(home).join("lib"));
    }
    if let Some(prefix) = perfctr_prefix(path) {
        dirs.push(prefix.join("lib"));
        if let Some(t) = multiarch_triplet() {
            dirs.push(prefix.join("lib").join(t));
        }
    }
    let mut out = Vec::new();
    for d in dirs {
        for n in library_names() {
            let p = d.join(n);
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out.extend(library_names().iter().map(PathBuf::from));
    out
}

/// Why LIKWID could not be loaded.
#[derive(Debug, Clone)]
pub enum LoadError {
    /// No candidate could be opened; each with its `dlerror()` text.
    NotFound { tried: Vec<(PathBuf, String)> },
    /// A library was opened but lacks a symbol of the LIKWID 5.2/5.5 API (older/other version).
    MissingSymbol { path: PathBuf, symbol: &'static str },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NotFound { tried } => {
                write!(f, "liblikwid.so not found")?;
                // The last bare-name attempt carries the loader's own message.
                if let Some((p, e)) = tried.last() {
                    write!(f, " (tried {} paths; last {}: {})", tried.len(), p.display(), e)?;
                }
                Ok(())
            }
            LoadError::MissingSymbol { path, symbol } => {
                write!(f, "{} lacks symbol {} (LIKWID 5.2 or newer needed)", path.display(), symbol)
            }
        }
    }
}

impl std::error::Error for LoadError {}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns NULL or a thread-local NUL-terminated string.
    let e = unsafe { libc::dlerror() };
    if e.is_null() { "unknown dlopen error".to_string() } else { unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned() }
}

/// `dlopen(path, RTLD_NOW | RTLD_LOCAL)`: RTLD_NOW makes a missing dependency (liblua,
/// libhwloc) fail here instead of at the first call.
pub(crate) fn open(path: &Path) -> Result<*mut c_void, String> {
    if path.components().count() > 1 && !path.exists() {
        return Err("no such file".to_string());
    }
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| "path contains NUL".to_string())?;
    // SAFETY: valid C string; flags are standard.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() { Err(dlerror_text()) } else { Ok(h) }
}

/// `dlsym`; `None` when the symbol is not exported.
///
/// # Safety
/// `handle` must be a live `dlopen` handle.
pub(crate) unsafe fn symbol(handle: *mut c_void, name: &str) -> Option<*mut c_void> {
    let c = CString::new(name).ok()?;
    let s = unsafe { libc::dlsym(handle, c.as_ptr()) };
    if s.is_null() { None } else { Some(s) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_names_come_last() {
        let c = candidates();
        let n = library_names().len();
        assert!(c.len() >= n);
        for (p, name) in c[c.len() - n..].iter().zip(library_names()) {
            assert_eq!(p, Path::new(name));
        }
    }

    /// The real LIKWID 5.2 of this machine loads with every symbol (the project's test
    /// machines install the `likwid` package; without it this fails, by design).
    #[test]
    fn installed_likwid_loads_with_every_symbol() {
        let lib = crate::Likwid::load().unwrap_or_else(|e| panic!("{e}"));
        assert!(lib.path.to_string_lossy().contains("liblikwid.so"), "{}", lib.path.display());
    }

    #[test]
    fn search_order_home_then_perfctr_prefix_then_loader() {
        let root = std::env::temp_dir().join(format!("likwid_sys_order_{}", std::process::id()));
        std::fs::create_dir_all(root.join("inst/bin")).unwrap();
        std::fs::write(root.join("inst/bin/likwid-perfctr"), "").unwrap();
        let path = std::env::join_paths([root.join("nothing"), root.join("inst/bin")]).unwrap();
        let c = candidates_from(Some(OsStr::new("/opt/lk")), Some(&path));
        let inst = std::fs::canonicalize(root.join("inst")).unwrap();
        let mut want: Vec<PathBuf> = Vec::new();
        for d in [PathBuf::from("/opt/lk/lib"), inst.join("lib"), inst.join("lib").join(multiarch_triplet().unwrap())] {
            want.extend(library_names().iter().map(|n| d.join(n)));
        }
        want.extend(library_names().iter().map(PathBuf::from));
        assert_eq!(c, want);
        // Neither set: the loader's search only.
        assert_eq!(candidates_from(None, None), library_names().iter().map(PathBuf::from).collect::<Vec<_>>());
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn missing_library_is_an_error_value() {
        let r = crate::Likwid::load_from(&[PathBuf::from("/nonexistent/liblikwid.so")]);
        match r {
            Err(LoadError::NotFound { tried }) => assert_eq!(tried.len(), 1),
            _ => panic!("expected NotFound"),
        }
    }
}
