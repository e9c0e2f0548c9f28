//! Builds the MPI plugin once per MPI ABI family with that family's own compiler wrapper, so
//! that one checkout serves programs built with OpenMPI and with MPICH (Intel MPI, Cray MPICH,
//! MVAPICH share MPICH's ABI). The compilers tried: `$MPICC` (default `mpicc`), then
//! `mpicc.openmpi` and `mpicc.mpich` (Debian's names); a family is built once, by the first
//! compiler found for it. The shared libraries go to `target/<profile>/`, beside the core
//! library; `libscope_profiler_mpi.so` links to the family of `$MPICC`/`mpicc`.
//! Without any MPI compiler nothing is built and the core library runs without MPI.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "codegen/mod.rs"]
mod codegen;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    println!("cargo:rerun-if-changed=c");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=codegen");
    println!("cargo:rerun-if-changed=plugin/src");
    println!("cargo:rerun-if-changed=plugin/Cargo.toml");
    println!("cargo:rerun-if-changed=../Cargo.lock");
    println!("cargo:rerun-if-env-changed=MPICC");
    // OUT_DIR is target/<profile>/build/<crate>-<hash>/out.
    let profile_dir = out.ancestors().nth(3).expect("OUT_DIR under target/<profile>").to_path_buf();
    let default_cc = std::env::var("MPICC").unwrap_or_else(|_| "mpicc".into());
    // The compiler of each family (the first found), then every family built at once.
    let mut families: Vec<(String, &str)> = Vec::new();
    let mut default_family = None;
    for (i, cc) in [default_cc.as_str(), "mpicc.openmpi", "mpicc.mpich"].into_iter().enumerate() {
        let Some(family) = family_of(cc, &out) else { continue };
        if i == 0 {
            default_family = Some(family.clone());
        }
        if !families.iter().any(|(f, _)| *f == family) {
            families.push((family, cc));
        }
    }
    let results: Vec<(String, &str, Result<PathBuf, String>)> = std::thread::scope(|s| {
        let jobs: Vec<_> = families
            .iter()
            .map(|(family, cc)| {
                let (manifest, dir) = (&manifest, out.join(family));
                (family.clone(), *cc, s.spawn(move || build(cc, family, manifest, &dir)))
            })
            .collect();
        jobs.into_iter().map(|(f, cc, j)| (f, cc, j.join().unwrap_or_else(|_| Err("the build thread panicked".into())))).collect()
    });
    let mut built: Vec<(String, PathBuf)> = Vec::new();
    for (family, cc, r) in results {
        match r {
            Ok(lib) => built.push((family, lib)),
            Err(e) => println!("cargo:warning=the MPI plugin for {family} ({cc}) was not built: {e}"),
        }
    }
    if built.is_empty() {
        println!("cargo:warning=no MPI compiler wrapper found ($MPICC, mpicc, mpicc.openmpi, mpicc.mpich): the MPI plugin is not built; the library runs without MPI");
    }
    let mut lines = Vec::new();
    // Also into deps/, where `cargo test` builds (and its tests load) libscope_profiler.so.
    let dirs = [profile_dir.clone(), profile_dir.join("deps")];
    for (family, lib) in &built {
        for dir in &dirs {
            let _ = std::fs::create_dir_all(dir);
            replace(lib, &dir.join(lib.file_name().unwrap()));
        }
        lines.push(format!("{family}={}", profile_dir.join(lib.file_name().unwrap()).display()));
    }
    if let Some(family) = default_family.filter(|f| built.iter().any(|(b, _)| b == f)) {
        for dir in &dirs {
            let link = dir.join("libscope_profiler_mpi.so");
            let _ = std::fs::remove_file(&link);
            let _ = std::os::unix::fs::symlink(format!("libscope_profiler_mpi_{family}.so"), &link);
        }
    }
    println!("cargo:rustc-env=SCOPE_PROFILER_MPI_BUILT={}", lines.join("\n"));
}

/// "openmpi" or "mpich" for a compiler wrapper that works, None for one that does not exist.
fn family_of(cc: &str, out: &Path) -> Option<String> {
    let probe = out.join("family.c");
    std::fs::write(&probe, "#include <mpi.h>\n#if defined(OPEN_MPI)\nSP_FAMILY_openmpi\n#elif defined(MPICH_VERSION) || defined(MPICH)\nSP_FAMILY_mpich\n#endif\n").ok()?;
    let o = Command::new(cc).arg("-E").arg(&probe).output().ok()?;
    if !o.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&o.stdout);
    ["openmpi", "mpich"].iter().find(|f| text.contains(&format!("SP_FAMILY_{f}"))).map(|f| f.to_string())
}

/// The wrappers of every MPI call (generated from this family's header and libraries), their
/// run-time support, compiled and linked by the family's own mpicc with the MPI operations
/// (plugin/, Rust on rsmpi, built for this family by `build_ops`).
fn build(cc: &str, family: &str, manifest: &Path, out: &Path) -> Result<PathBuf, String> {
    let name = format!("libscope_profiler_mpi_{family}.so");
    let lib = out.join(&name);
    let wrappers = match codegen::generate(cc, out) {
        Ok(g) => {
            let mut summary = format!(
                "{family} ({cc}): {} C routines, {} Fortran functions under {} names\n",
                g.c_routines, g.fortran_functions, g.fortran_names
            );
            for n in &g.notes {
                summary.push_str(n);
                summary.push('\n');
                if n.contains("not wrapped") {
                    println!("cargo:warning=MPI plugin for {family}: {n}");
                }
            }
            let _ = std::fs::write(out.join("generated.txt"), summary);
            g.source
        }
        Err(e) => {
            println!("cargo:warning=the MPI-call wrappers for {family} ({cc}) were not generated: {e}; the plugin records no MPI calls");
            codegen::stub(out)?
        }
    };
    let ops = build_ops(cc, family, manifest, out)?;
    let exports = out.join("exports.map");
    // The MPI routines' wrappers (C and Fortran names) and the table; nothing of the Rust
    // runtime linked in with the operations.
    std::fs::write(&exports, "{\n  global: MPI_*; mpi_*; PMPI_*; pmpi_*; sp_mpi_plugin_ops;\n  local: *;\n};\n").map_err(|e| e.to_string())?;
    let mut sources: Vec<PathBuf> = std::fs::read_dir(manifest.join("c"))
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    sources.sort();
    sources.push(wrappers);
    let o = Command::new(cc)
        .args(["-shared", "-fPIC", "-O2", "-g", "-std=gnu11", "-Wall", "-Wextra", "-fvisibility=hidden"])
        .arg(format!("-I{}", manifest.join("c").display()))
        .args(&sources)
        .arg("-Wl,--undefined=sp_mpi_plugin_ops")
        .arg(&ops)
        .arg(format!("-Wl,--version-script={}", exports.display()))
        .arg(format!("-Wl,-soname,{name}"))
        .arg("-Wl,--no-undefined")
        // What the Rust standard library of the operations needs (rustc's native-static-libs).
        .args(["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"])
        .arg("-o")
        .arg(&lib)
        .output()
        .map_err(|e| format!("{cc}: {e}"))?;
    if !o.status.success() {
        return Err(format!("{cc} failed:\n{}", String::from_utf8_lossy(&o.stderr)));
    }
    Ok(lib)
}

/// The MPI operations (the crate in plugin/, on rsmpi) as a static library for this family: a
/// build of its own, with the family's compiler wrapper as `MPICC` (rsmpi's mpi-sys probes it
/// and runs bindgen over its mpi.h), in a target directory of its own under OUT_DIR, offline
/// and locked to the workspace's Cargo.lock (`cargo fetch` has every package of it).
fn build_ops(cc: &str, family: &str, manifest: &Path, out: &Path) -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let target = out.join("ops-target");
    let mut cmd = Command::new(&cargo);
    cmd.arg("build")
        .arg("--manifest-path")
        .arg(manifest.join("plugin").join("Cargo.toml"))
        .args(["--features", "mpi", "--locked", "--offline", "--quiet", "--lib"])
        .arg("--target-dir")
        .arg(&target)
        .env("MPICC", cc)
        .env("SP_MPI_FAMILY", family)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR");
    if release {
        cmd.arg("--release");
    }
    let o = cmd.output().map_err(|e| format!("{cargo}: {e}"))?;
    if !o.status.success() {
        return Err(format!("the build of the MPI operations (mpi/plugin, rsmpi) with MPICC={cc} failed:\n{}", String::from_utf8_lossy(&o.stderr)));
    }
    let lib = target.join(if release { "release" } else { "debug" }).join("libscope_profiler_mpi_ops.a");
    if !lib.exists() {
        return Err(format!("{} was not made", lib.display()));
    }
    Ok(lib)
}

/// Put a fresh copy in place (a running test may hold the old file open: never write into it).
fn replace(from: &Path, to: &Path) {
    let tmp = to.with_extension("so.tmp");
    let _ = std::fs::remove_file(&tmp);
    std::fs::copy(from, &tmp).expect("copy the MPI plugin into the target directory");
    std::fs::rename(&tmp, to).expect("move the MPI plugin into place");
}
