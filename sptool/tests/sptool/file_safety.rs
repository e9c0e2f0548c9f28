//! Output files are created privately and renamed into place: a symlink or file planted at
//! the output name is replaced, never written through; the open flags are checked with the
//! LD_PRELOAD shim of the core's tests (tests/c/open_log_shim.c) instead of strace.

use crate::common::{ok, output, tempdir};
use crate::fixtures::make;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn shim(dir: &Path) -> PathBuf {
    let out = dir.join("open_log_shim.so");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/c/open_log_shim.c");
    let o = output(
        Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&out)
            .arg(src)
            .arg("-ldl"),
    )
    .unwrap();
    assert!(o.status.success(), "compiling the shim: {}", String::from_utf8_lossy(&o.stderr));
    out
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let start = line.find(&format!(" {key}=")).unwrap() + key.len() + 2;
    line[start..].split(' ').next().unwrap()
}

#[test]
fn outputs_replace_planted_symlinks_by_rename_with_exclusive_private_temporaries() {
    let tmp = tempdir();
    let dir = tmp.path().canonicalize().unwrap();
    make(&dir, "likwid.h5");
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let outputs = ["out.csv", "out.json", "roof.png", "roof.json", "trace.json"];
    for o in outputs {
        std::os::unix::fs::symlink(&victim, dir.join(o)).unwrap();
    }
    let so = shim(&dir);
    let log = dir.join("opens.log");
    std::fs::write(&log, "").unwrap();
    let runs: [&[&str]; 4] = [
        &["export", "likwid.h5", "--format", "csv", "-o", "out.csv"],
        &["export", "likwid.h5", "--format", "chrome-trace", "-o", "trace.json"],
        &["export", "likwid.h5", "--format", "json", "-o", "out.json"],
        &["plot", "roofline", "likwid.h5", "-o", "roof.png", "--data", "roof.json"],
    ];
    for args in runs {
        let o = output(
            Command::new(env!("CARGO_BIN_EXE_sptool"))
                .current_dir(&dir)
                .args(args)
                .env("LD_PRELOAD", &so)
                .env("SP_SHIM_DIR", &dir)
                .env("SP_SHIM_LOG", &log),
        )
        .unwrap();
        assert!(o.status.success(), "sptool {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let want_mode = safe_file::new_file_mode();
    for o in outputs {
        let m = std::fs::symlink_metadata(dir.join(o)).unwrap();
        assert!(m.file_type().is_file(), "{o} is still a symlink");
        assert_eq!(m.mode() & 0o777, want_mode, "{o}: the mode the umask gives");
        assert!(m.len() > 0);
    }
    let mut names: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["likwid.h5", "open_log_shim.so", "opens.log", "out.csv", "out.json", "roof.json", "roof.png", "trace.json", "victim.txt"], "no temporaries left");

    let log = std::fs::read_to_string(&log).unwrap();
    let mut created = 0;
    for line in log.lines().filter(|l| l.starts_with("open ")) {
        let path = line.split(' ').nth(1).unwrap();
        assert_eq!(field(line, "trunc"), "0", "{line}");
        if field(line, "creat") == "1" {
            created += 1;
            assert_eq!((field(line, "excl"), field(line, "nofollow"), field(line, "mode")), ("1", "1", "600"), "{line}");
            assert!(Path::new(path).file_name().unwrap().to_string_lossy().starts_with('.'), "hidden temporary: {line}");
        }
        let name = Path::new(path).file_name().unwrap().to_string_lossy().into_owned();
        assert!(!(outputs.contains(&name.as_str()) && field(line, "write") == "1"), "output opened for writing: {line}");
    }
    assert_eq!(created, 5, "{log}");
    for o in outputs {
        assert!(log.lines().any(|l| l.starts_with("rename ") && l.ends_with(&format!(" -> {} rc=0", dir.join(o).display()))), "{o} not renamed into place:\n{log}");
    }
}

#[test]
fn devices_and_standard_output_are_written_directly() {
    let dir = tempdir();
    make(dir.path(), "timings.h5");
    ok(dir.path(), &["export", "timings.h5", "--format", "csv", "-o", "/dev/null"]);
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(&std::fs::metadata("/dev/null").unwrap().file_type()), "/dev/null is left a device");
    let out = ok(dir.path(), &["export", "timings.h5", "--format", "csv", "-o", "/dev/stdout"]);
    assert!(out.starts_with("rank,"), "{out}");
}
