//! What an MPI installation's libraries really export: the libraries its compiler wrappers
//! link (`<mpicc> -show`, `<mpifort> -show`), read with `nm -D --defined-only`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Exported function names of a set of libraries, each with (library, address) so that names
/// that are aliases of one function can be told apart from distinct functions.
#[derive(Debug, Default)]
pub struct Exports {
    pub by_name: BTreeMap<String, (usize, u64)>,
}

impl Exports {
    pub fn has(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    pub fn get(&self, name: &str) -> Option<(usize, u64)> {
        self.by_name.get(name).copied()
    }
}

/// `-L` directories and `-l` names of a compiler wrapper's link line.
fn link_line(wrapper: &str) -> Option<(String, Vec<PathBuf>, Vec<String>)> {
    // Open MPI knows -showme (and -show); MPICH -show.
    let o = ["-show", "-showme"].iter().find_map(|flag| Command::new(wrapper).arg(flag).output().ok().filter(|o| o.status.success()))?;
    let line = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut words = line.split_whitespace();
    let compiler = words.next()?.to_string();
    let (mut dirs, mut libs) = (Vec::new(), Vec::new());
    for w in line.split_whitespace() {
        if let Some(d) = w.strip_prefix("-L") {
            dirs.push(PathBuf::from(d));
        } else if let Some(l) = w.strip_prefix("-l") {
            libs.push(l.to_string());
        } else if let Some(rest) = w.strip_prefix("-Wl,") {
            for part in rest.split(',') {
                if let Some(d) = part.strip_prefix("-rpath=").or_else(|| part.strip_prefix("-L")) {
                    dirs.push(PathBuf::from(d));
                }
            }
        }
    }
    Some((compiler, dirs, libs))
}

fn find_library(compiler: &str, dirs: &[PathBuf], name: &str) -> Option<PathBuf> {
    let file = format!("lib{name}.so");
    if let Some(p) = dirs.iter().map(|d| d.join(&file)).find(|p| p.exists()) {
        return Some(p);
    }
    let o = Command::new(compiler).arg(format!("-print-file-name={file}")).output().ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    p.is_absolute().then_some(p).filter(|p| p.exists())
}

/// The MPI libraries (those whose name has `mpi` in it: libmpi, libmpi_mpifh, libmpi_usempif08,
/// libmpich, libmpichfort, ...) that `wrapper` links.
pub fn mpi_libraries(wrapper: &str) -> Result<Vec<PathBuf>, String> {
    let (compiler, dirs, libs) = link_line(wrapper).ok_or_else(|| format!("{wrapper} -show did not run"))?;
    let mut out = Vec::new();
    for l in libs.iter().filter(|l| l.contains("mpi")) {
        match find_library(&compiler, &dirs, l) {
            Some(p) => {
                let p = std::fs::canonicalize(&p).unwrap_or(p);
                if !out.contains(&p) {
                    out.push(p)
                }
            }
            None => return Err(format!("lib{l}.so of `{wrapper} -show` was not found")),
        }
    }
    if out.is_empty() {
        return Err(format!("`{wrapper} -show` names no MPI library"));
    }
    Ok(out)
}

/// The defined dynamic symbols of `libs` (text and weak: functions).
pub fn exports(libs: &[PathBuf]) -> Result<Exports, String> {
    let mut e = Exports::default();
    for (i, lib) in libs.iter().enumerate() {
        read_nm(lib, i, &mut e)?;
    }
    Ok(e)
}

fn read_nm(lib: &Path, index: usize, e: &mut Exports) -> Result<(), String> {
    let o = Command::new("nm").args(["-D", "--defined-only"]).arg(lib).output().map_err(|err| format!("nm: {err}"))?;
    if !o.status.success() {
        return Err(format!("nm -D {} failed: {}", lib.display(), String::from_utf8_lossy(&o.stderr)));
    }
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let mut f = line.split_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (f.next(), f.next(), f.next()) else { continue };
        if !matches!(kind, "T" | "W" | "i") {
            continue;
        }
        let name = name.split('@').next().unwrap_or(name);
        let Ok(addr) = u64::from_str_radix(addr, 16) else { continue };
        e.by_name.entry(name.to_string()).or_insert((index, addr));
    }
    Ok(())
}

/// The Fortran compiler wrapper of the family whose C wrapper is `cc` (`mpicc` -> `mpifort`,
/// `mpicc.openmpi` -> `mpifort.openmpi`, `/opt/x/bin/mpicc` -> `/opt/x/bin/mpifort`), the
/// first of mpifort / mpif90 that runs.
pub fn fortran_wrapper(cc: &str) -> Option<String> {
    let at = cc.rfind("mpicc")?;
    ["mpifort", "mpif90"]
        .iter()
        .map(|f| format!("{}{f}{}", &cc[..at], &cc[at + "mpicc".len()..]))
        .find(|w| Command::new(w).arg("-show").output().is_ok_and(|o| o.status.success()) || Command::new(w).arg("-showme").output().is_ok_and(|o| o.status.success()))
}

/// The name the dynamic loader knows a library by (its SONAME), else its path.
pub fn soname(lib: &Path) -> String {
    let o = Command::new("objdump").arg("-p").arg(lib).output().ok();
    if let Some(o) = o.filter(|o| o.status.success()) {
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let mut f = line.split_whitespace();
            if f.next() == Some("SONAME") {
                if let Some(name) = f.next() {
                    return name.to_string();
                }
            }
        }
    }
    lib.display().to_string()
}
