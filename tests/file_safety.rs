//! Files we create cannot be redirected or read by others: real C programs (also as the
//! unprivileged user `nobody`, via setpriv) against planted symlinks and files, group-writable
//! and world-writable sticky directories; modes and owners checked with stat; the open flags
//! checked with an LD_PRELOAD shim (tests/c/open_log_shim.c) instead of strace.

mod support;
use support::*;

use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const NOBODY: u32 = 65534;

fn shim(dir: &Path) -> PathBuf {
    let out = dir.join("open_log_shim.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = run(Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&out)
        .arg(repo_root().join("tests/c/open_log_shim.c"))
        .arg("-ldl"));
    assert!(o.status.success(), "compiling the shim failed:\n{}", text(&o.stderr));
    out
}

/// A scratch directory (canonical: the shim logs paths as the kernel sees them), readable by
/// `nobody`, with the test program and the shim built in it.
fn setup(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = scratch(name).canonicalize().unwrap();
    let exe = compile(Lang::C, "simple", &["tests/c/simple.c"], &dir, &[]);
    let so = shim(&dir);
    (dir, exe, so)
}

/// An empty log file anyone can append to (the shim never creates it).
fn new_log(dir: &Path) -> PathBuf {
    let log = dir.join("opens.log");
    std::fs::write(&log, "").unwrap();
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666)).unwrap();
    log
}

/// Run `script` with sh in `cwd`; `env` is passed to it.
fn sh(cwd: &Path, script: &str, env: &[(&str, &OsStr)]) -> Output {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).current_dir(cwd).env_remove("SCOPE_PROFILER_METADATA");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(&mut cmd)
}


fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let start = line.find(&format!(" {key}=")).unwrap_or_else(|| panic!("no {key} in {line}")) + key.len() + 2;
    line[start..].split(' ').next().unwrap()
}

/// Check the shim's log: every file created under the watched directory was created
/// exclusively, never truncated, and reachable by nobody else (0600, or inside a 0700
/// directory of the creating user); `finals` were never opened for writing and got their
/// content by rename. Returns the log for further checks.
fn assert_safe_opens(log: &Path, finals: &[&Path], owner: u32) -> String {
    let text = std::fs::read_to_string(log).unwrap();
    let mut created = 0;
    for line in text.lines().filter(|l| l.starts_with("open ")) {
        let path = line.split(' ').nth(1).unwrap();
        if field(line, "creat") == "1" {
            assert_eq!(field(line, "excl"), "1", "created without O_EXCL: {line}");
            if field(line, "rc") != "-1" {
                created += 1;
                let m = u32::from_str_radix(field(line, "mode"), 8).unwrap();
                let dm = u32::from_str_radix(field(line, "dirmode"), 8).unwrap();
                let downer: u32 = field(line, "dirowner").parse().unwrap();
                assert!(m & 0o077 == 0 || (dm == 0o700 && downer == owner), "reachable by others while unfinished: {line}");
            }
        }
        assert_eq!(field(line, "trunc"), "0", "opened with O_TRUNC: {line}");
        for f in finals {
            assert!(!(Path::new(path) == *f && field(line, "write") == "1"), "the final file was opened for writing: {line}\n{text}");
        }
    }
    assert!(created > 0, "the shim saw no file created (is it loaded?):\n{text}");
    for f in finals {
        let into = format!(" -> {} rc=0", f.display());
        let line = text.lines().find(|l| l.starts_with("rename ") && l.ends_with(&into)).unwrap_or_else(|| panic!("{} not renamed into place:\n{text}", f.display()));
        let from = Path::new(line.split(' ').nth(1).unwrap());
        let private = from.parent().unwrap().file_name().unwrap().to_string_lossy().into_owned();
        assert!(private.starts_with('.'), "renamed from an unexpected place: {line}");
    }
    text
}

/// Entries of `dir` other than those named: nothing may be left behind.
fn leftovers(dir: &Path, expected: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.retain(|n| !expected.contains(&n.as_str()));
    v.sort();
    v
}

/// Run the program in `run_dir` (target `out.h5`) after `plant`, a shell command run by the
/// shell whose pid the program keeps (exec): `$$` is the program's pid. Returns the pid.
fn run_after_planting(dir: &Path, run_dir: &Path, exe: &Path, so: &Path, log: &Path, plant: &str, env: &[(&str, &OsStr)]) -> String {
    let script = format!(r#"{plant} && echo "$$" > "$RUN/../pid" && exec env LD_PRELOAD="$SHIM" SP_SHIM_DIR="$DIR" SP_SHIM_LOG="$LOG" "$EXE""#);
    let mut all: Vec<(&str, &OsStr)> = vec![
        ("RUN", run_dir.as_os_str()),
        ("SHIM", so.as_os_str()),
        ("DIR", dir.as_os_str()),
        ("LOG", log.as_os_str()),
        ("EXE", exe.as_os_str()),
        ("SCOPE_PROFILER_FILE", OsStr::new("out.h5")),
    ];
    all.extend_from_slice(env);
    let out = sh(run_dir, &script, &all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::read_to_string(run_dir.join("../pid")).unwrap().trim().to_string()
}

fn assert_profile(target: &Path) {
    let m = std::fs::symlink_metadata(target).unwrap();
    assert!(m.file_type().is_file(), "{m:?}");
    assert_eq!(m.mode() & 0o777, 0o644, "the mode the umask (022) gives");
    let regions = read_regions(&hdf5::File::open(target).unwrap(), 0);
    assert_eq!(regions["step"].starts.len(), 3);
}

#[test]
fn planted_symlink_and_file_at_the_old_temporary_name_and_the_target_change_nothing() {
    let (dir, exe, so) = setup("file_safety_planted");
    let victim = dir.join("victim.txt");
    let victim2 = dir.join("victim2.txt");
    std::fs::write(&victim, "precious").unwrap();
    std::fs::write(&victim2, "precious too").unwrap();
    let log = new_log(&dir);
    let vars = [("VICTIM", victim.as_os_str()), ("VICTIM2", victim2.as_os_str())];

    // A symlink at the old `<target>.tmp.<pid>` to one victim, and one at the target itself
    // to another.
    let run_dir = dir.join("symlink");
    std::fs::create_dir(&run_dir).unwrap();
    let pid = run_after_planting(&dir, &run_dir, &exe, &so, &log, r#"ln -s "$VICTIM" out.h5.tmp.$$ && ln -s "$VICTIM2" out.h5"#, &vars);
    let target = run_dir.join("out.h5");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert_eq!(std::fs::read_to_string(&victim2).unwrap(), "precious too");
    let planted = format!("out.h5.tmp.{pid}");
    assert_eq!(std::fs::read_link(run_dir.join(&planted)).unwrap(), victim, "the planted symlink is left as it was");
    // The symlink at the target was replaced by the finished profile (rename), not written through.
    assert_profile(&target);
    assert_eq!(python_view(&target)["regions"]["step"]["0"]["calls"], 3);
    assert_eq!(leftovers(&run_dir, &["out.h5", &planted]), Vec::<String>::new());
    assert_safe_opens(&log, &[&target], 0);

    // A regular file somebody left at the old temporary name is neither truncated nor moved.
    std::fs::write(&log, "").unwrap();
    let run_dir = dir.join("file");
    std::fs::create_dir(&run_dir).unwrap();
    let pid = run_after_planting(&dir, &run_dir, &exe, &so, &log, "printf 'not yours' > out.h5.tmp.$$", &vars);
    let planted = format!("out.h5.tmp.{pid}");
    assert_eq!(std::fs::read_to_string(run_dir.join(&planted)).unwrap(), "not yours");
    let target = run_dir.join("out.h5");
    assert_profile(&target);
    assert_eq!(leftovers(&run_dir, &["out.h5", &planted]), Vec::<String>::new());
    assert_safe_opens(&log, &[&target], 0);
}

#[test]
fn group_writable_directory_as_an_unprivileged_user() {
    let (dir, exe, so) = setup("file_safety_group");
    let proj = dir.join("project");
    std::fs::create_dir(&proj).unwrap();
    std::os::unix::fs::chown(&proj, Some(0), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&proj, std::fs::Permissions::from_mode(0o2775)).unwrap();
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let log = new_log(&dir);
    // A neighbour (root here) plants a symlink at the old temporary name; the run is by
    // `nobody`, a member of the directory's group, with umask 002 (usual for shared projects).
    let script = r#"ln -s "$VICTIM" out.h5.tmp.$$ && umask 002 &&
        exec setpriv --reuid=nobody --regid=nogroup --clear-groups env LD_PRELOAD="$SHIM" SP_SHIM_DIR="$DIR" SP_SHIM_LOG="$LOG" HOME=/nonexistent "$EXE""#;
    let out = sh(
        &proj,
        script,
        &[
            ("VICTIM", victim.as_os_str()),
            ("SHIM", so.as_os_str()),
            ("DIR", dir.as_os_str()),
            ("LOG", log.as_os_str()),
            ("EXE", exe.as_os_str()),
            ("SCOPE_PROFILER_FILE", OsStr::new("out.h5")),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
    let target = proj.join("out.h5");
    let m = std::fs::symlink_metadata(&target).unwrap();
    assert!(m.file_type().is_file());
    assert_eq!((m.uid(), m.mode() & 0o777), (NOBODY, 0o664), "owned by the user, mode from umask 002");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let left = leftovers(&proj, &["out.h5"]);
    assert_eq!(left.len(), 1, "only the planted link besides the profile: {left:?}");
    assert!(left[0].starts_with("out.h5.tmp."));
    assert_eq!(read_regions(&hdf5::File::open(&target).unwrap(), 0)["step"].starts.len(), 3);

    let log = assert_safe_opens(&log, &[&target], NOBODY);
    // The HDF5 file was created inside a private directory of nobody's in the project directory.
    let hdf5_create = log.lines().find(|l| l.starts_with("open ") && l.contains("/out.h5 ") && field(l, "creat") == "1").unwrap();
    assert_eq!((field(hdf5_create, "dirmode"), field(hdf5_create, "dirowner")), ("700", "65534"), "{hdf5_create}");
}

#[test]
fn fallback_into_a_world_writable_sticky_directory_is_private_and_never_replaces() {
    let (dir, exe, so) = setup("file_safety_fallback");
    let locked = dir.join("locked"); // root's, 0755: nobody cannot write the target there
    std::fs::create_dir(&locked).unwrap();
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let log = new_log(&dir);
    let target = locked.join("run.h5");
    // Root plants a symlink at the predictable fallback name <stem>.<host>.<pid>.h5.
    let script = r#"ln -s "$VICTIM" "$SHARED/run.$(uname -n).$$.h5" && echo "$$" > "$SHARED/../pid" && umask 022 &&
        exec setpriv --reuid=nobody --regid=nogroup --clear-groups env LD_PRELOAD="$SHIM" SP_SHIM_DIR="$DIR" SP_SHIM_LOG="$LOG" TMPDIR="$SHARED" HOME=/nonexistent "$EXE""#;
    let out = sh(
        &dir,
        script,
        &[
            ("VICTIM", victim.as_os_str()),
            ("SHARED", shared.as_os_str()),
            ("SHIM", so.as_os_str()),
            ("DIR", dir.as_os_str()),
            ("LOG", log.as_os_str()),
            ("EXE", exe.as_os_str()),
            ("SCOPE_PROFILER_FILE", target.as_os_str()),
        ],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let pid = std::fs::read_to_string(dir.join("pid")).unwrap().trim().to_string();
    let host = text(&run(Command::new("uname").arg("-n")).stdout).trim().to_string();
    let planted = shared.join(format!("run.{host}.{pid}.h5"));
    assert_eq!(std::fs::read_link(&planted).unwrap(), victim, "root's link in the sticky directory stays");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");

    let written: Vec<PathBuf> = std::fs::read_dir(&shared).unwrap().map(|e| e.unwrap().path()).filter(|p| *p != planted).collect();
    assert_eq!(written.len(), 1, "one profile, no leftovers: {written:?}");
    let file = &written[0];
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with(&format!("run.{host}.{pid}.")) && name.ends_with(".h5"), "a fresh name beside the taken one: {name}");
    let m = std::fs::symlink_metadata(file).unwrap();
    assert!(m.file_type().is_file());
    assert_eq!((m.uid(), m.mode() & 0o777), (NOBODY, 0o600), "private in a world-writable directory");
    assert!(stderr.contains(&format!("cannot write {}", target.display())), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "profile written to {} instead (mode 0600, readable only by you: {} is writable by everyone)",
            file.display(),
            shared.display()
        )),
        "{stderr}"
    );
    assert_eq!(read_regions(&hdf5::File::open(file).unwrap(), 0)["step"].starts.len(), 3);
    assert_eq!(leftovers(&locked, &[]), Vec::<String>::new());
    assert_safe_opens(&log, &[file], NOBODY);
}

#[test]
fn someone_elses_file_at_the_target_in_a_sticky_directory_is_kept_and_ours_goes_beside_it() {
    let (dir, exe, so) = setup("file_safety_sticky_target");
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let target = shared.join("run.h5");
    std::os::unix::fs::symlink(&victim, &target).unwrap(); // root's link
    let log = new_log(&dir);
    let out = sh(
        &dir,
        r#"umask 022 && exec setpriv --reuid=nobody --regid=nogroup --clear-groups env LD_PRELOAD="$SHIM" SP_SHIM_DIR="$DIR" SP_SHIM_LOG="$LOG" HOME=/nonexistent "$EXE""#,
        &[("SHIM", so.as_os_str()), ("DIR", dir.as_os_str()), ("LOG", log.as_os_str()), ("EXE", exe.as_os_str()), ("SCOPE_PROFILER_FILE", target.as_os_str())],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(std::fs::read_link(&target).unwrap(), victim);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let written: Vec<PathBuf> = std::fs::read_dir(&shared).unwrap().map(|e| e.unwrap().path()).filter(|p| *p != target).collect();
    assert_eq!(written.len(), 1, "{written:?}");
    let file = &written[0];
    assert!(file.file_name().unwrap().to_string_lossy().starts_with("run."), "{file:?}");
    let m = std::fs::symlink_metadata(file).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o777), (NOBODY, 0o644));
    assert!(stderr.contains(&format!("cannot replace {}", target.display())), "{stderr}");
    assert!(stderr.contains(&format!("profile written to {} instead", file.display())), "{stderr}");
    assert_eq!(read_regions(&hdf5::File::open(file).unwrap(), 0)["step"].starts.len(), 3);
    assert_safe_opens(&log, &[file], NOBODY);
}

/// Per-rank files as a launcher without MPI leaves them (simple.c never initializes MPI).
fn rank_file(exe: &Path, dir: &Path, rank: u32, size: u32) -> PathBuf {
    let out = run(Command::new(exe)
        .current_dir(dir)
        .env("SCOPE_PROFILER_FILE", "out.h5")
        .env("OMPI_COMM_WORLD_RANK", rank.to_string())
        .env("OMPI_COMM_WORLD_SIZE", size.to_string()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let f = dir.join(format!("out.rank{rank}.h5"));
    assert!(f.is_file());
    f
}

#[test]
fn merge_searches_a_directory_without_following_symlinks_and_replaces_only_by_rename() {
    let (dir, exe, so) = setup("file_safety_merge");
    let runs = dir.join("runs");
    let elsewhere = dir.join("elsewhere");
    let outdir = dir.join("out");
    for d in [&runs, &elsewhere, &outdir] {
        std::fs::create_dir(d).unwrap();
    }
    rank_file(&exe, &runs, 0, 3);
    rank_file(&exe, &runs, 1, 3);
    let outside = rank_file(&exe, &elsewhere, 2, 3);
    std::os::unix::fs::symlink(&outside, runs.join("out.rank2.h5")).unwrap();
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let merged = outdir.join("merged.h5");
    std::os::unix::fs::symlink(&victim, &merged).unwrap();
    let log = new_log(&dir);

    let merge = env!("CARGO_BIN_EXE_scope_profiler_merge");
    let out = sh(
        &dir,
        r#"umask 027 && exec env LD_PRELOAD="$SHIM" SP_SHIM_DIR="$DIR" SP_SHIM_LOG="$LOG" "$MERGE" -o "$OUT" "$RUNS""#,
        &[
            ("SHIM", so.as_os_str()),
            ("DIR", dir.as_os_str()),
            ("LOG", log.as_os_str()),
            ("MERGE", OsStr::new(merge)),
            ("OUT", merged.as_os_str()),
            ("RUNS", runs.as_os_str()),
        ],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("skipped {}", runs.join("out.rank2.h5").display())), "{stderr}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let m = std::fs::symlink_metadata(&merged).unwrap();
    assert!(m.file_type().is_file());
    assert_eq!(m.mode() & 0o777, 0o640, "the mode umask 027 gives");
    let h5 = hdf5::File::open(&merged).unwrap();
    let mut groups = h5.member_names().unwrap();
    groups.sort();
    assert_eq!(groups, ["metadata", "rank0", "rank1"], "the symlinked rank 2 from elsewhere was not read");
    assert_eq!(int_attr(&h5.group("metadata").unwrap(), "merged_from_rank_files"), 2);
    drop(h5);
    assert_eq!(python_view(&merged)["regions"]["step"]["1"]["calls"], 3);
    assert_eq!(leftovers(&outdir, &["merged.h5"]), Vec::<String>::new());
    let log = assert_safe_opens(&log, &[&merged], 0);
    // The rank files were opened without following symlinks.
    assert!(log.lines().any(|l| l.contains("/runs/out.rank2.h5 ") && field(l, "nofollow") == "1" && field(l, "rc") == "-1"), "{log}");
}

/// Every string stored anywhere in the file (attribute values included) is in its bytes:
/// HDF5 does not compress attributes or the global heap.
fn file_contains(path: &Path, needle: &str) -> bool {
    let bytes = std::fs::read(path).unwrap();
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Every string attribute value in the file, with its place: `group@attr = value`.
fn string_attrs(file: &Path) -> Vec<(String, String)> {
    fn walk(g: &hdf5::Group, at: &str, out: &mut Vec<(String, String)>) {
        for name in g.attr_names().unwrap() {
            let a = g.attr(&name).unwrap();
            let values: Vec<String> = if let Ok(v) = a.read_scalar::<hdf5::types::VarLenUnicode>() {
                vec![v.as_str().to_string()]
            } else if let Ok(v) = a.read_raw::<hdf5::types::VarLenUnicode>() {
                v.iter().map(|s| s.as_str().to_string()).collect()
            } else {
                Vec::new()
            };
            out.extend(values.into_iter().map(|v| (format!("{at}@{name}"), v)));
        }
        for child in g.groups().unwrap() {
            walk(&child, &child.name(), out);
        }
    }
    let mut out = Vec::new();
    walk(&hdf5::File::open(file).unwrap(), "/", &mut out);
    out
}

#[test]
fn minimal_metadata_leaves_out_host_user_directory_path_modules_and_slurm() {
    let (dir, exe, _) = setup("file_safety_metadata");
    let host = text(&run(Command::new("uname").arg("-n")).stdout).trim().to_string();
    let path_var = format!("/opt/sp-privacy-marker/bin:{}", std::env::var("PATH").unwrap());
    let run_with = |detail: &str| {
        let wd = dir.join(format!("workdir-marker-{detail}"));
        std::fs::create_dir(&wd).unwrap();
        let out = run(Command::new(&exe)
            .current_dir(&wd)
            .env("SCOPE_PROFILER_METADATA", detail)
            .env("SCOPE_PROFILER_FILE", "p.h5")
            .env("PATH", &path_var)
            .env("LD_LIBRARY_PATH", "/opt/sp-privacy-marker/lib")
            .env("LOADEDMODULES", "sp-privacy-module/1.0")
            .env("MODULEPATH", "/opt/sp-privacy-marker/modules")
            .env("SLURM_JOB_ID", "sp-privacy-job")
            .env("SLURM_JOB_NAME", "sp-privacy-jobname")
            .env("USER", "sp-privacy-user")
            .env("LOGNAME", "sp-privacy-user"));
        assert!(out.status.success(), "{}", text(&out.stderr));
        (wd.join("p.h5"), wd)
    };
    let (full, full_wd) = run_with("full");
    let (minimal, minimal_wd) = run_with("minimal");
    let markers = |wd: &Path| vec![wd.display().to_string(), "sp-privacy-marker".into(), "sp-privacy-module".into(), "sp-privacy-job".into()];
    // The host name may be as short as "vm": look for it as a whole value (or within uname).
    let names_host = |file: &Path| string_attrs(file).into_iter().find(|(_, v)| v == &host || v.split(' ').any(|w| w == host));
    assert!(names_host(&full).is_some(), "full metadata lacks the host name {host:?}");
    assert_eq!(names_host(&minimal), None, "minimal metadata names the host");
    // Full detail records all of it (so that this test can see them missing) ...
    for m in markers(&full_wd) {
        assert!(file_contains(&full, &m), "full metadata lacks {m:?}");
    }
    // ... minimal none of it, in any attribute or dataset of any group.
    for m in markers(&minimal_wd) {
        assert!(!file_contains(&minimal, &m), "minimal metadata contains {m:?}");
    }
    let h5 = hdf5::File::open(&minimal).unwrap();
    let meta = h5.group("metadata").unwrap();
    let names = meta.attr_names().unwrap();
    for n in ["hostname", "uname", "working_directory", "user", "modules", "PATH", "LD_LIBRARY_PATH", "LOADEDMODULES", "MODULEPATH"] {
        assert!(!names.iter().any(|a| a == n), "minimal has {n}: {names:?}");
    }
    assert!(!names.iter().any(|a| a.starts_with("SLURM")), "{names:?}");
    let rank = h5.group("rank0").unwrap();
    assert!(rank.attr("hostname").is_err(), "the rank's host name is left out too");
    assert!(!rank.attr_names().unwrap().is_empty());
    assert_eq!(int_attr(&meta, "num_nodes"), 1);
    drop(h5);
    // The PyPI reader takes the minimal file as it is.
    assert_eq!(python_view(&minimal)["regions"]["step"]["0"]["calls"], 3);
}
