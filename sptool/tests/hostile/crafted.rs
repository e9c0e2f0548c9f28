//! Files crafted for each class of hostile input, made from the library's own profiles
//! ([`crate::corpus`]) with h5py (the Python package's HDF5 binding, in the test venv) and
//! byte patches: invalid UTF-8 in names and strings, datasets declaring far more elements
//! than the file holds, millions of tiny strings, links and storage leading out of the file
//! (to a FIFO), non-finite FLOP counts, a file that crashes the HDF5 library, and a memory
//! limit reached. Every sptool command runs on them under a memory limit and a timeout
//! (`common::run_limited`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{Outcome, leftovers, run_limited, scratch, sptool, sptool_fault};
use crate::corpus::corpus;

fn base(name: &str) -> PathBuf {
    corpus().profiles.iter().find(|p| p.file_name().unwrap() == name).unwrap_or_else(|| panic!("{name} not in the corpus")).clone()
}

fn python() -> PathBuf {
    std::env::var_os("SCOPE_PROFILER_PYTHON").map(PathBuf::from).unwrap_or_else(|| crate::common::repo_root().join(".venv/bin/python"))
}

/// Copy `from` to `dir/name` and change it with h5py: `code` runs with `f`, the file opened
/// for writing, and `np` (numpy).
fn craft(dir: &Path, from: &str, name: &str, code: &str) -> PathBuf {
    let out = dir.join(name);
    std::fs::copy(base(from), &out).unwrap();
    let script = format!("import sys, os, h5py, numpy as np\nwith h5py.File(sys.argv[1], 'r+') as f:\n{}\n", indent(code));
    let o = Command::new(python()).arg("-c").arg(&script).arg(&out).current_dir(dir).output().expect("run python");
    assert!(o.status.success(), "crafting {name} failed:\n{script}\n{}", String::from_utf8_lossy(&o.stderr));
    out
}

fn indent(code: &str) -> String {
    code.lines().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n")
}

/// Replace every occurrence of `from` by `to` (same length) in the file; returns how many.
fn patch(path: &Path, from: &[u8], to: &[u8]) -> usize {
    assert_eq!(from.len(), to.len());
    let mut b = std::fs::read(path).unwrap();
    let mut n = 0;
    let mut i = 0;
    while i + from.len() <= b.len() {
        if &b[i..i + from.len()] == from {
            b[i..i + from.len()].copy_from_slice(to);
            n += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    std::fs::write(path, b).unwrap();
    n
}

fn sptool_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let mut cmd = Command::new(sptool());
    cmd.current_dir(dir).args(args).env_remove("SPTOOL_MAX_MEMORY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_limited(&mut cmd)
}

/// No crash, hang, panic, backtrace or allocation past the limit; the outcome for more checks.
fn sane(dir: &Path, args: &[&str]) -> Outcome {
    sane_env(dir, args, &[])
}

fn sane_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let o = sptool_in(dir, args, env);
    if let Some(fault) = sptool_fault(&o) {
        panic!("{fault}: {}", o.describe());
    }
    assert!(leftovers(dir).is_empty(), "unfinished files left: {:?}", leftovers(dir));
    o
}

/// A clean failure: exit status 1 and one line, `sptool: FILE: ...` with every `needle`.
fn refused(dir: &Path, args: &[&str], file: &str, needles: &[&str]) {
    let o = sane(dir, args);
    assert_eq!(o.code, Some(1), "expected a clean failure: {}", o.describe());
    let lines: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {}", o.describe());
    assert!(lines[0].starts_with(&format!("sptool: {file}: ")), "{}", o.describe());
    for n in needles {
        assert!(lines[0].contains(n), "{n:?} not said: {}", o.describe());
    }
}

/// Every command that reads one profile, with the outputs it writes.
fn every_command(file: &str) -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        v(&["inspect", file, "--per-rank", "--full"]),
        v(&["export", file, "--format", "json", "-o", "out.json"]),
        v(&["export", file, "--format", "csv", "-o", "out.csv"]),
        v(&["export", file, "--format", "chrome-trace", "-o", "out.trace"]),
        v(&["plot", "regions", file, "-o", "regions.png"]),
        v(&["plot", "roofline", file, "-o", "roof.svg", "--data", "roof.json"]),
    ]
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

// Same length as the placeholders they replace: a truncated 3-byte sequence, a lone
// continuation byte, bytes that never occur in UTF-8 and a truncated 4-byte sequence at the end.
const BAD: &[u8; 12] = b"a\xe2\x82b\x80c\xff\xfed\xf0\x9f\x98";
// A group name: sorts after every ASCII name, as its placeholder "zzz..." did.
const BAD_NAME: &[u8; 12] = b"\xffgroup\xfename!";

#[test]
fn invalid_utf8_in_names_tags_metadata_and_region_tables_is_shown_replaced() {
    let dir = scratch("crafted_utf8");
    // Schema 1: a metadata value, an attribute name, a region's tag and a region group's name.
    let regions = craft(
        &dir,
        "perf_regions.h5",
        "utf8_regions.h5",
        "f['metadata'].attrs['hostname'] = 'PPPPPPPPPPPP'\n\
         f['metadata'].attrs['QQQQQQQQQQQQ'] = 'x'\n\
         f['rank0/regions/busy'].attrs['tag'] = 'RRRRRRRRRRRR'\n\
         f['rank0/regions'].move('work', 'zzzzzzzzzzzz')\n\
         del f['rank0/regions/zzzzzzzzzzzz'].attrs['tag']",
    );
    for placeholder in [&b"PPPPPPPPPPPP"[..], b"QQQQQQQQQQQQ", b"RRRRRRRRRRRR"] {
        assert!(patch(&regions, placeholder, BAD) >= 1, "{} not in the file", String::from_utf8_lossy(placeholder));
    }
    assert!(patch(&regions, b"zzzzzzzzzzzz", BAD_NAME) >= 1);
    // Schemas 2/3: a name in the region table.
    let columnar = craft(&dir, "perf_columnar.h5", "utf8_columnar.h5", "n = f['region_table/names']\nv = n[()]\nv[0] = b'SSSSSSSSSSSS'\nn[...] = v");
    assert!(patch(&columnar, b"SSSSSSSSSSSS", BAD) >= 1);
    for file in ["utf8_regions.h5", "utf8_columnar.h5"] {
        for cmd in every_command(file) {
            let o = sane(&dir, &args(&cmd));
            if cmd[0] == "inspect" {
                assert_eq!(o.code, Some(0), "{}", o.describe());
                assert!(o.stdout.contains('\u{FFFD}'), "invalid bytes are shown as U+FFFD:\n{}", o.stdout);
            } else if cmd[1] != "roofline" {
                assert_eq!(o.code, Some(0), "{}", o.describe());
            }
        }
        let json = std::fs::read_to_string(dir.join("out.json")).unwrap();
        assert!(serde_json::from_str::<serde_json::Value>(&json).is_ok() && json.contains('\u{FFFD}'), "{json}");
        let good = base(if file.contains("columnar") { "perf_columnar.h5" } else { "perf_regions.h5" });
        let good = good.to_str().unwrap();
        assert_eq!(sane(&dir, &["diff", good, file]).code, Some(0));
        assert!(matches!(sane(&dir, &["check", file, good]).code, Some(0 | 3)));
    }
    // The region whose group name is not UTF-8 (and has no tag) was read under that name,
    // invalid bytes replaced: "work", 9 calls.
    let o = sane(&dir, &["inspect", "utf8_regions.h5"]);
    assert!(o.stdout.lines().any(|l| l.trim_start().starts_with("\u{FFFD}group\u{FFFD}name! ") && l.contains(" 9 ")), "{}", o.stdout);
}

#[test]
fn datasets_declaring_2_40_elements_are_refused_before_allocating() {
    let dir = scratch("crafted_sparse");
    craft(
        &dir,
        "perf_regions.h5",
        "sparse_regions.h5",
        "g = f['rank0/regions/busy']\ndel g['start_times']\ng.create_dataset('start_times', shape=(2**40,), dtype='i8', chunks=(4096,))",
    );
    craft(&dir, "perf_columnar.h5", "sparse_columnar.h5", "e = f['events']\ndel e['durations']\ne.create_dataset('durations', shape=(2**40,), dtype='i8', chunks=(4096,))");
    // A contiguous dataset whose storage was never written (a fill value only).
    craft(&dir, "perf_aggregate.h5", "unwritten.h5", "i = f['rank_region_index']\ndel i['aggregate_totals']\ni.create_dataset('aggregate_totals', shape=(2**40,), dtype='i8')");
    for (file, dataset) in
        [("sparse_regions.h5", "rank0/regions/busy/start_times"), ("sparse_columnar.h5", "events/durations"), ("unwritten.h5", "rank_region_index/aggregate_totals")]
    {
        for cmd in every_command(file) {
            if cmd[3] == "chrome-trace" && file == "unwritten.h5" {
                continue; // aggregates have no timeline: refused for that first
            }
            refused(&dir, &args(&cmd), file, &["is damaged", dataset, "1099511627776 elements"]);
        }
    }
}

#[test]
fn two_million_one_byte_names_are_read_without_a_buffer_each() {
    let dir = scratch("crafted_names");
    craft(
        &dir,
        "perf_columnar.h5",
        "names.h5",
        "t = f['region_table']\ndel t['names']\nt.create_dataset('names', data=np.full(2_000_000, b'a', dtype='S1'), compression='gzip', chunks=(1 << 16,))",
    );
    assert!(std::fs::metadata(dir.join("names.h5")).unwrap().len() < 400_000);
    // Three that read the region table (each takes seconds in a debug build).
    for cmd in every_command("names.h5").iter().filter(|c| c[0] == "inspect" || c.iter().any(|a| a == "json") || c[1] == "regions") {
        let o = sane(&dir, &args(cmd));
        assert_eq!(o.code, Some(0), "{}", o.describe());
    }
}

#[test]
fn memory_limit_reached_ends_with_one_line() {
    let dir = scratch("crafted_oom");
    craft(
        &dir,
        "perf_columnar.h5",
        "names.h5",
        "t = f['region_table']\ndel t['names']\nt.create_dataset('names', data=np.full(2_000_000, b'a', dtype='S1'), compression='gzip', chunks=(1 << 16,))",
    );
    // Not `sane`: "out of memory" is what is asked for here.
    let o = sptool_in(&dir, &["inspect", "names.h5"], &[("SPTOOL_MAX_MEMORY", "48M")]);
    let lines: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(o.code, Some(1), "{}", o.describe());
    assert!(!o.stderr.contains("backtrace") && !o.stderr.contains("panicked"), "{}", o.describe());
    assert_eq!(lines.len(), 1, "{}", o.describe());
    // Our allocator's failure, or HDF5's own (its deflate buffer): which one comes first
    // depends on how much the process had mapped before; both end in the same one line.
    assert!(lines[0].starts_with("sptool: names.h5: out of memory: ") && lines[0].contains("SPTOOL_MAX_MEMORY"), "{}", o.describe());
}

#[test]
fn links_and_storage_out_of_the_file_are_never_followed() {
    let dir = scratch("crafted_links");
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: creating a FIFO at a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    craft(&dir, "perf_regions.h5", "elink_group.h5", "f['rank0/regions/evil'] = h5py.ExternalLink('fifo', '/')");
    craft(&dir, "perf_columnar.h5", "elink_dataset.h5", "i = f['rank_region_index']\ndel i['ranks']\ni['ranks'] = h5py.ExternalLink('fifo', '/ranks')");
    craft(&dir, "perf_regions.h5", "elink_rank.h5", "f['rank7'] = h5py.ExternalLink('fifo', '/rank0')");
    craft(
        &dir,
        "perf_columnar.h5",
        "virtual.h5",
        "e = f['events']\nn = e['durations'].shape[0]\ndel e['durations']\nl = h5py.VirtualLayout(shape=(n,), dtype='i8')\nl[:] = h5py.VirtualSource('fifo', 'x', shape=(n,))\ne.create_virtual_dataset('durations', l)",
    );
    craft(
        &dir,
        "perf_columnar.h5",
        "external.h5",
        "e = f['events']\nn = e['durations'].shape[0]\ndel e['durations']\ne.create_dataset('durations', shape=(n,), dtype='i8', external=[('fifo', 0, 8 * n)])",
    );
    craft(&dir, "perf_regions.h5", "soft_loop.h5", "f['rank0/regions/loop'] = h5py.SoftLink('/rank0/regions/loop')");
    for (file, needles) in [
        ("elink_group.h5", &["rank0/regions/evil is an external link"][..]),
        ("elink_dataset.h5", &["rank_region_index/ranks is an external link"]),
        ("elink_rank.h5", &["rank7 is an external link"]),
        ("virtual.h5", &["events/durations is a virtual dataset"]),
        ("external.h5", &["events/durations keeps its data in external files"]),
    ] {
        for cmd in every_command(file) {
            if cmd[1] == "roofline" && file.starts_with("elink_dataset") {
                continue;
            }
            refused(&dir, &args(&cmd), file, needles);
        }
    }
    // A soft link that points at itself is skipped, not followed forever.
    assert_eq!(sane(&dir, &["inspect", "soft_loop.h5"]).code, Some(0));
    // The input itself a FIFO: refused without opening it.
    refused(&dir, &["inspect", "fifo"], "fifo", &["is not a regular file"]);
}

#[test]
fn non_finite_flops_and_bytes_never_hang_the_roofline() {
    let dir = scratch("crafted_nonfinite");
    craft(&dir, "perf_regions.h5", "inf.h5", "f['rank0/annotations/busy'].attrs['flops'] = np.inf");
    craft(
        &dir,
        "perf_columnar.h5",
        "nan.h5",
        "a = f['rank0/annotations']\na['busy'].attrs['flops'] = np.nan\na['busy'].attrs['bytes'] = 5e-324\na['work'].attrs['bytes'] = 1.0\na['work'].attrs['flops'] = 1e308",
    );
    craft(&dir, "perf_aggregate.h5", "huge.h5", "a = f['rank0/annotations']\na['busy'].attrs['flops'] = 1e308\na['busy'].attrs['bytes'] = 1e-308");
    for (file, left_out) in [("inf.h5", "busy"), ("nan.h5", "work"), ("huge.h5", "busy")] {
        for out in ["roof.png", "roof.svg"] {
            let o = sane(&dir, &["plot", "roofline", file, "-o", out, "--data", "roof.json"]);
            assert_eq!(o.code, Some(1), "{}", o.describe());
            assert!(o.stderr.contains("left out of the roofline") && o.stderr.contains(&format!("{left_out} on rank 0")), "{}", o.describe());
            assert!(o.stderr.lines().last().unwrap().contains("no selected region has a finite, positive FLOP rate"), "{}", o.describe());
        }
        let o = sane(&dir, &["inspect", file]);
        assert_eq!(o.code, Some(0), "{}", o.describe());
        let o = sane(&dir, &["export", file, "--format", "json", "-o", "out.json"]);
        assert_eq!(o.code, Some(0), "{}", o.describe());
        serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(dir.join("out.json")).unwrap()).expect("valid JSON");
    }
    assert!(sane(&dir, &["inspect", "inf.h5"]).stdout.lines().any(|l| l.trim_start().starts_with("busy ") && l.contains("inf")));
    // A region with finite numbers is still placed; the other is left out, with a warning.
    craft(&dir, "perf_regions.h5", "mixed.h5", "a = f['rank0/annotations']\na['work'].attrs['flops'] = np.inf\na['work'].attrs['bytes'] = 1e9");
    let o = sane(&dir, &["plot", "roofline", "mixed.h5", "-o", "roof.svg", "--data", "roof.json"]);
    assert_eq!(o.code, Some(0), "{}", o.describe());
    assert!(o.stderr.contains("1 point(s) left out of the roofline") && o.stderr.contains("work on rank 0"), "{}", o.describe());
    let data: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("roof.json")).unwrap()).unwrap();
    let regions: Vec<&str> = data["points"].as_array().unwrap().iter().map(|p| p["region"].as_str().unwrap()).collect();
    assert_eq!(regions, ["busy"]);
    // Ceilings beyond what a log axis can show are refused, not plotted.
    let o = sane(&dir, &["plot", "roofline", "mixed.h5", "-o", "roof.svg", "--peak-flops", "1e300"]);
    assert!(o.code == Some(1) && o.stderr.contains("--peak-flops 1e300 is out of range"), "{}", o.describe());
}

/// The size of the first object of the file's global heap (where variable-length strings
/// live) made huge: HDF5 1.10 reads past its buffers and crashes on it.
#[test]
fn a_file_that_crashes_the_hdf5_library_is_reported_as_damaged() {
    let dir = scratch("crafted_crash");
    let file = dir.join("crash.h5");
    let mut b = std::fs::read(base("threads_regions.h5")).unwrap();
    let gcol = b.windows(4).position(|w| w == b"GCOL").expect("a global heap");
    // Collection header: signature, version, 3 reserved, size (8); then objects: index (2),
    // references (2), reserved (4), size (8).
    let size_at = gcol + 16 + 8;
    b[size_at + 7] = 0x24;
    std::fs::write(&file, b).unwrap();
    // HDF5 1.10 crashes reading the run's metadata; a later version may say it is damaged.
    refused(&dir, &["inspect", "crash.h5"], "crash.h5", &["damaged"]);
    for cmd in every_command("crash.h5") {
        let o = sane(&dir, &args(&cmd));
        if o.code != Some(0) {
            refused(&dir, &args(&cmd), "crash.h5", &["damaged"]);
            let out = cmd.iter().skip_while(|a| *a != "-o").nth(1);
            assert!(out.is_none_or(|f| !dir.join(f).exists()), "{out:?} written by {cmd:?}");
        }
    }
}

/// The first object of the global heap made a zero-sized free-space entry: HDF5 1.10 loops
/// forever decoding the heap. sptool's CPU-time limit (here 3 s) stops it.
#[test]
fn a_file_on_which_the_hdf5_library_loops_is_stopped_and_reported() {
    let dir = scratch("crafted_loop");
    let mut b = std::fs::read(base("perf_columnar.h5")).unwrap();
    let gcol = b.windows(4).position(|w| w == b"GCOL").expect("a global heap");
    let object = gcol + 16;
    b[object..object + 2].fill(0); // index 0: free space
    b[object + 8..object + 16].fill(0); // of size 0
    std::fs::write(dir.join("loop.h5"), b).unwrap();
    let o = sane_env(&dir, &["inspect", "loop.h5"], &[("SPTOOL_MAX_CPU_SECONDS", "3")]);
    assert_eq!(o.code, Some(1), "{}", o.describe());
    let lines: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", o.describe());
    assert!(lines[0].starts_with("sptool: loop.h5: is a damaged file") && lines[0].contains("more than 3 s of CPU time"), "{}", o.describe());
}

/// One dataset linked as many regions' data (the same numbers read again and again), and
/// columnar rows that all claim the same events: refused as damage, not multiplied.
#[test]
fn data_linked_many_times_is_refused() {
    let dir = scratch("crafted_amplify");
    craft(
        &dir,
        "threads_regions.h5",
        "hardlinks.h5",
        "r = f['rank0/regions']\nnames = list(r.keys())\nfor n in names[1:]:\n    del r[n]['start_times']\n    r[n]['start_times'] = r[names[0]]['start_times']",
    );
    refused(&dir, &["inspect", "hardlinks.h5"], "hardlinks.h5", &["is the same dataset as", "start_times"]);
    craft(
        &dir,
        "threads_columnar.h5",
        "overlap.h5",
        "i = f['rank_region_index']\nn = f['events/durations'].shape[0]\nrows = i['event_counts'].shape[0]\ni['event_offsets'][...] = np.zeros(rows, dtype='i8')\ni['event_counts'][...] = np.full(rows, n, dtype='i8')",
    );
    for cmd in [vec!["inspect", "overlap.h5"], vec!["export", "overlap.h5", "--format", "chrome-trace", "-o", "out.trace"]] {
        refused(&dir, &cmd, "overlap.h5", &["claim", "events but the event columns hold"]);
    }
}

/// `sptool tree` checks every row of `call_paths/`: a parent that is not an earlier row, a
/// region outside the names, negative calls or times and columns of different lengths are
/// each one line naming the table; a file without call paths (the Python package's) says so.
#[test]
fn damaged_call_paths_are_refused_in_one_line() {
    let dir = scratch("hostile_call_paths");
    let ok = sane(&dir, &["tree", base("threads_regions.h5").to_str().unwrap()]);
    assert_eq!(ok.code, Some(0), "{}", ok.describe());
    assert!(ok.stdout.contains("Call paths of"), "{}", ok.describe());
    let cases: [(&str, &str, &str); 5] = [
        ("parent.h5", "d = f['rank0/call_paths/parent']; v = d[...]; v[0] = len(v) + 5; d[...] = v", "parent is not an earlier row"),
        ("cycle.h5", "d = f['rank0/call_paths/parent']; v = d[...]; v[0] = 0; d[...] = v", "parent is not an earlier row"),
        ("region.h5", "d = f['rank0/call_paths/region']; v = d[...]; v[-1] = -3; d[...] = v", "region outside names"),
        ("calls.h5", "d = f['rank0/call_paths/exclusive_ns']; v = d[...]; v[0] = -1; d[...] = v", "negative count or time"),
        ("short.h5", "g = f['rank0/call_paths']; v = g['calls'][...]; del g['calls']; g['calls'] = v[:-1]", "rows where the table's other columns have"),
    ];
    for (name, code, needle) in cases {
        let file = craft(&dir, "threads_regions.h5", name, code);
        refused(&dir, &["tree", file.to_str().unwrap()], file.to_str().unwrap(), &["call_paths", needle]);
    }
    // The file-wide table of the columnar and aggregate layouts, the same checks.
    let ok = sane(&dir, &["tree", base("threads_columnar.h5").to_str().unwrap()]);
    assert_eq!(ok.code, Some(0), "{}", ok.describe());
    let table: [(&str, &str, &str); 3] = [
        ("t_parent.h5", "d = f['call_paths/parents']; v = d[...]; v[0] = len(v) + 5; d[...] = v", "parent is not an earlier row"),
        ("t_region.h5", "d = f['call_paths/regions']; v = d[...]; v[-1] = 10**6; d[...] = v", "region outside names"),
        ("t_short.h5", "g = f['call_paths']; v = g['calls'][...]; del g['calls']; g['calls'] = v[:-1]", "rows where the table's other columns have"),
    ];
    for (name, code, needle) in table {
        let file = craft(&dir, "threads_columnar.h5", name, code);
        refused(&dir, &["tree", file.to_str().unwrap()], file.to_str().unwrap(), &["call_paths", needle]);
    }
    let py = base("python.h5");
    refused(&dir, &["tree", py.to_str().unwrap()], py.to_str().unwrap(), &["holds no call paths"]);
}

/// A FIFO, a socket, a directory, a device and a symlink to a FIFO named on the command line:
/// every command refuses each at once in one line (a FIFO opened for reading would block for
/// ever), and an output that is a FIFO nobody reads is refused, never waited for.
#[test]
fn inputs_that_are_not_regular_files_are_refused_at_once_by_every_command() {
    let dir = scratch("crafted_kinds");
    std::fs::copy(base("threads_regions.h5"), dir.join("good.h5")).unwrap();
    let c = |p: &Path| std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c(&dir.join("fifo")).as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink(dir.join("fifo"), dir.join("to_fifo.h5")).unwrap();
    drop(std::os::unix::net::UnixListener::bind(dir.join("sock")).unwrap());
    std::fs::create_dir(dir.join("adir.h5")).unwrap();
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    for (file, said) in [
        ("fifo", "a FIFO"),
        ("to_fifo.h5", "a FIFO"),
        ("sock", "a socket"),
        ("/dev/zero", "a character device"),
        ("adir.h5", "is a directory"),
    ] {
        let mut cmds = every_command(file);
        cmds.extend([
            v(&["tree", file]),
            v(&["tree", file, "--threads"]),
            v(&["lines", file]),
            v(&["mpi", file]),
            v(&["diff", file, "good.h5"]),
            v(&["check", "good.h5", file]),
        ]);
        for cmd in cmds {
            refused(&dir, &args(&cmd), file, &[said]);
        }
        // recover: the target is named as given, made absolute.
        let o = sane(&dir, &["recover", file]);
        assert_eq!(o.code, Some(1), "{}", o.describe());
        assert_eq!(o.stderr.lines().count(), 1, "{}", o.describe());
        assert!(o.stderr.contains(said) || (said == "is a directory" && o.stderr.contains("a directory")), "{}", o.describe());
    }
    // An output FIFO with no reader: refused, not waited for; the same FIFO with a reader is written.
    let o = sane(&dir, &["export", "good.h5", "--format", "json", "-o", "fifo"]);
    assert_eq!(o.code, Some(1), "{}", o.describe());
    assert!(o.stderr.contains("nobody reads it"), "{}", o.describe());
}

/// The newer tables damaged (the call paths' thread column, the sampler's line records and
/// sample table, the MPI tables): every command stays sane on each file (its output, or one
/// line), and the command that reads the table refuses it in one line naming it, with and
/// without `--threads`.
#[test]
fn damaged_newer_tables_are_refused_in_one_line_by_every_command() {
    let dir = scratch("crafted_newer");
    // An MPI group as the library writes it (rank0/mpi/routines, peers, completions, sites),
    // two threads calling MPI, added to a real profile.
    let mpi = "m = f.create_group('rank0/mpi')\n\
               m.attrs['mode'] = 'summary'; m.attrs['family'] = 'openmpi'; m.attrs['app_time_ns'] = 10**10; m.attrs['mpi_time_ns'] = 3 * 10**9\n\
               r = m.create_group('routines')\n\
               r['routine'] = np.array([b'MPI_Barrier', b'MPI_Barrier', b'MPI_Send'], dtype=h5py.string_dtype())\n\
               r['thread'] = np.array([0, 1, 1]); r['comm_size'] = np.array([4, 4, 4]); r['comm_kind'] = np.array([1, 1, 1])\n\
               r['calls'] = np.array([10, 10, 5]); r['time_ns'] = np.array([2 * 10**9, 10**9, 1000])\n\
               r['bytes_sent'] = np.array([0, 0, 40]); r['bytes_received'] = np.array([0, 0, 0])\n\
               r['polls_empty'] = np.array([0, 0, 0]); r['poll_time_ns'] = np.array([0, 0, 0])\n\
               r['size_histogram'] = np.zeros((3, 64))\n\
               p = m.create_group('peers')\n\
               for k in ['world_rank', 'messages_sent', 'bytes_sent', 'messages_received', 'bytes_received']: p[k] = np.array([1])\n\
               c = m.create_group('completions')\n\
               c['routine'] = np.array([b'MPI_Wait'], dtype=h5py.string_dtype()); c['origin'] = np.array([b'MPI_Isend'], dtype=h5py.string_dtype())\n\
               for k in ['count', 'bytes', 'time_ns']: c[k] = np.array([1])";
    let good = craft(&dir, "threads_regions.h5", "mpi_ok.h5", mpi);
    for args in [vec!["mpi", "mpi_ok.h5"], vec!["mpi", "mpi_ok.h5", "--threads"], vec!["tree", "mpi_ok.h5", "--threads"]] {
        let o = sane(&dir, &args);
        assert_eq!(o.code, Some(0), "{}", o.describe());
    }
    let o = sane(&dir, &["mpi", "mpi_ok.h5", "--threads"]);
    assert!(o.stdout.contains("Time per thread that calls MPI"), "{}", o.describe());
    drop(good);
    let with_mpi = |extra: &str| format!("{mpi}\n{extra}");
    let cases: Vec<(&str, &str, String, &str, &str)> = vec![
        // (file, base, damage, command that reads it, what it says)
        ("cp_threads.h5", "threads_regions.h5", "g = f['rank0/call_paths']; v = g['thread'][...]; del g['thread']; g['thread'] = v[:-1]".into(), "tree", "rows where the table's other columns have"),
        ("cp_table_threads.h5", "threads_columnar.h5", "g = f['call_paths']; v = g['threads'][...]; del g['threads']; g['threads'] = v[:1]".into(), "tree", "rows where the table's other columns have"),
        ("lp_short.h5", "sampled.h5", "g = f['rank0/line_profile/0']; v = g['hits'][...]; del g['hits']; g['hits'] = np.append(v, 1)".into(), "lines", "differ in length"),
        ("lp_negative.h5", "sampled.h5", "d = f['rank0/line_profile/0/hits']; v = d[...]; v[0] = -5; d[...] = v".into(), "lines", "negative count"),
        ("lp_huge.h5", "sampled.h5", "g = f['rank0/line_profile/0']; del g['line_numbers']; g.create_dataset('line_numbers', shape=(10**12,), dtype='i8', chunks=(4096,))".into(), "lines", "line_numbers"),
        ("lp_text.h5", "sampled.h5", "g = f['rank0/line_profile/0']; del g['times']; g['times'] = np.array([b'x'], dtype=h5py.string_dtype())".into(), "lines", "times"),
        ("sm_attrs.h5", "sampled.h5", "s = f['rank0/sampling']; s.attrs['ticks'] = 'many'; s.attrs['handler_replaced'] = np.int64(3); del s['samples/count']".into(), "", ""),
        ("mpi_short.h5", "threads_regions.h5", with_mpi("del r['calls']; r['calls'] = np.array([1, 2])"), "mpi", "routines/calls has 2 rows"),
        ("mpi_negative.h5", "threads_regions.h5", with_mpi("r['time_ns'][1] = -4"), "mpi", "negative count"),
        ("mpi_hist.h5", "threads_regions.h5", with_mpi("del r['size_histogram']; r['size_histogram'] = np.zeros((3, 7))"), "mpi", "size_histogram"),
        ("mpi_huge.h5", "threads_regions.h5", with_mpi("del r['thread']; r.create_dataset('thread', shape=(10**12,), dtype='i8', chunks=(4096,))"), "mpi", "thread"),
        ("mpi_peers.h5", "threads_regions.h5", with_mpi("del p['bytes_sent']; p['bytes_sent'] = np.array([1, 2, 3])"), "mpi", "peers"),
    ];
    for (name, from, code, reader, needle) in &cases {
        craft(&dir, from, name, code);
        let mut cmds = every_command(name);
        cmds.extend([vec!["tree", name], vec!["tree", name, "--threads"], vec!["lines", name, "--per-rank"], vec!["mpi", name], vec!["mpi", name, "--threads", "--sites"]].into_iter().map(|v| v.iter().map(|s| s.to_string()).collect()));
        for cmd in &cmds {
            let o = sane(&dir, &args(cmd));
            assert!(matches!(o.code, Some(0) | Some(1)), "{}", o.describe());
            if o.code == Some(1) {
                assert_eq!(o.stderr.lines().count(), 1, "one line: {}", o.describe());
            }
            if !reader.is_empty() && cmd[0] == *reader {
                assert_eq!(o.code, Some(1), "{name}: {reader} reads the damaged table: {}", o.describe());
                assert!(o.stderr.starts_with(&format!("sptool: {name}: ")) && o.stderr.contains(needle), "{needle:?}: {}", o.describe());
            }
        }
    }
}

/// Counts and times each in range but whose sums pass 2^63 (two top-level call paths of
/// 2^63 - 1 ns, the traffic of two peers, the samples of lines beyond `--top`): every report
/// is written (sums saturate), never an overflow panic.
#[test]
fn sums_of_numbers_near_the_integer_limits_never_overflow() {
    let dir = scratch("crafted_limits");
    const MAX: &str = "2**63 - 1";
    craft(
        &dir,
        "threads_regions.h5",
        "tree_top.h5",
        &format!("g = f['rank0/call_paths']\nfor k in ['parent', 'region', 'inclusive_ns']: del g[k]\ng['parent'] = np.full(2, -1, dtype='i8')\ng['region'] = np.arange(2, dtype='i8')\ng['inclusive_ns'] = np.full(2, {MAX}, dtype='i8')\nfor k in ['calls', 'exclusive_ns', 'thread']:\n    v = g[k][:2]; del g[k]; g[k] = v"),
    );
    let mpi = format!(
        "m = f.create_group('rank0/mpi')\n\
         m.attrs['mode'] = 'summary'; m.attrs['family'] = 'openmpi'; m.attrs['app_time_ns'] = 10**10; m.attrs['mpi_time_ns'] = 10**9\n\
         p = m.create_group('peers')\n\
         p['world_rank'] = np.array([1, 2]); p['messages_sent'] = np.array([1, 1]); p['messages_received'] = np.array([1, 1])\n\
         p['bytes_sent'] = np.array([{MAX}, 5], dtype='i8'); p['bytes_received'] = np.array([1, {MAX}], dtype='i8')"
    );
    craft(&dir, "threads_regions.h5", "mpi_pairs.h5", &mpi);
    craft(
        &dir,
        "sampled.h5",
        "lines_rest.h5",
        &format!("g = f['rank0/line_profile/0']\nfor k in ['line_numbers', 'hits', 'times']: del g[k]\ng['line_numbers'] = np.array([1, 2, 3], dtype='i8')\ng['hits'] = np.full(3, {MAX}, dtype='i8')\ng['times'] = np.ones(3)"),
    );
    for args in [vec!["tree", "tree_top.h5"], vec!["mpi", "mpi_pairs.h5"], vec!["lines", "lines_rest.h5", "--top", "1", "--no-source"]] {
        let o = sane(&dir, &args);
        assert_eq!(o.code, Some(0), "{}", o.describe());
    }
    // Rows of one region and rank whose call counts add up past 2^63 (pooled, they saturate
    // at 2^64 - 1): the Caliper export's calls column says the most it can, never a negative
    // count.
    craft(
        &dir,
        "perf_aggregate.h5",
        "agg_calls.h5",
        &format!("del f['call_paths']\ni = f['rank_region_index']\nn = i['ranks'].shape[0]\ni['aggregate_counts'][...] = np.full(n, {MAX})\ni['region_ids'][...] = np.zeros(n)\ni['ranks'][...] = np.zeros(n)"),
    );
    let o = sane(&dir, &["export", "agg_calls.h5", "--format", "caliper-json", "-o", "out.json"]);
    assert_eq!(o.code, Some(0), "{}", o.describe());
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("out.json")).unwrap()).unwrap();
    let calls = doc["columns"].as_array().unwrap().iter().position(|c| c == "calls").unwrap();
    let rows = doc["data"].as_array().unwrap();
    assert!(!rows.is_empty() && rows.iter().all(|r| r[calls].as_i64() == Some(i64::MAX)), "{doc}");
}
