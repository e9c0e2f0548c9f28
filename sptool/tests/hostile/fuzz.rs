//! The damage harness. Copies of real profiles and spill directories ([`crate::corpus`]) are
//! damaged the ways disks, kills and people damage files (cut short, bytes flipped at random
//! and inside HDF5 structures, pages zeroed, sizes and counts in headers made huge), then
//! every sptool command, `sptool recover` and `scope_profiler_merge` run on them under a
//! memory limit and a timeout (`common::run_limited`).
//!
//! Seeded: the seed is printed; `SPTOOL_FUZZ_SEED=<seed>` damages the same way again,
//! `SPTOOL_FUZZ_CASE=<n>` runs case n alone, `SPTOOL_FUZZ_SECONDS` sets the time budget
//! (default 50, making the inputs included; no run starts after it). Every input that made
//! a tool fail is kept, with the command, under
//! `target/<profile>/test-scratch/hostile/fuzz/failures/`, and the report is written to
//! `.../hostile/fuzz/report.txt`.
//!
//! Neither sptool's own commands nor `scope_profiler_merge` and `sptool recover` (the
//! library's readers: merge, spill recovery) may ever fail this way; the library's are listed
//! apart in the report ([`LIBRARY_TOOLS_MUST_PASS`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::{Rng, leftovers, merge_fault, merge_tool, run_limited, scratch, sptool, sptool_fault};
use crate::corpus::{copy_dir, corpus, spill_dir_in};

/// Whether failures of the library's readers (`scope_profiler_merge`, `sptool recover`) fail
/// this test (they do since the library reads rank files and spills as hostile input).
const LIBRARY_TOOLS_MUST_PASS: bool = true;

const DEFAULT_SECONDS: u64 = 50;
const WORKERS: usize = 2;

/// Structures of the HDF5 format that start with a signature (superblock, B-trees, heaps,
/// version-2 object headers, fractal heaps, free space, shared messages).
const SIGNATURES: &[&[u8]] = &[
    b"\x89HDF", b"TREE", b"HEAP", b"SNOD", b"GCOL", b"OHDR", b"OCHK", b"BTHD", b"BTLF", b"BTIN", b"FRHP", b"FHDB", b"FHIB",
    b"FSHD", b"FSSE", b"SMTB", b"SMLI", b"EAHD", b"EAIB", b"EADB", b"FAHD", b"FADB",
];

/// Numbers that make sizes and counts absurd.
const HUGE: &[u64] = &[1 << 40, u32::MAX as u64, u64::MAX, 1 << 62, (1 << 31) - 1, 1 << 32, i64::MAX as u64];

fn signature_offsets(b: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    for i in 0..b.len().saturating_sub(4) {
        if SIGNATURES.iter().any(|s| b[i..].starts_with(s)) {
            out.push(i);
        }
    }
    out
}

/// Damage the bytes of an HDF5 file; returns what was done.
fn damage_h5(rng: &mut Rng, b: &mut Vec<u8>) -> String {
    let mut done = Vec::new();
    let ops = 1 + rng.below(3);
    for _ in 0..ops {
        if b.len() < 16 {
            break;
        }
        let len = b.len();
        match rng.below(100) {
            0..=9 => {
                let keep = if rng.chance(30) { rng.below(len.min(4096)) } else { rng.below(len) };
                b.truncate(keep);
                done.push(format!("truncated to {keep}"));
            }
            10..=39 => {
                let k = 1 + rng.below(8);
                for _ in 0..k {
                    let i = rng.below(len);
                    b[i] = if rng.chance(50) { b[i] ^ (1 << rng.below(8)) } else { rng.next() as u8 };
                }
                done.push(format!("{k} random byte(s) changed"));
            }
            40..=64 => {
                let sigs = signature_offsets(b);
                let base = if sigs.is_empty() { 0 } else { *rng.pick(&sigs) };
                let i = (base + rng.below(96)).min(len - 1);
                b[i] = if rng.chance(50) { b[i] ^ (1 << rng.below(8)) } else { rng.next() as u8 };
                done.push(format!("byte {i} in the structure at {base} changed"));
            }
            65..=74 => {
                let page = if rng.chance(50) { 512 } else { 4096 };
                let start = rng.below(len.div_ceil(page)) * page;
                let end = (start + page).min(len);
                b[start..end].fill(0);
                done.push(format!("bytes {start}..{end} zeroed"));
            }
            75..=89 => {
                // An 8-byte number that looks like a size, count or address in the file.
                let candidates: Vec<usize> = (0..len.saturating_sub(8))
                    .step_by(8)
                    .filter(|&i| {
                        let v = u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
                        v > 0 && v < len as u64
                    })
                    .collect();
                if candidates.is_empty() {
                    continue;
                }
                let i = *rng.pick(&candidates);
                let v = *rng.pick(HUGE);
                b[i..i + 8].copy_from_slice(&v.to_le_bytes());
                done.push(format!("8-byte number at {i} set to {v}"));
            }
            _ => {
                // A 4- or 2-byte field just after a structure's signature.
                let sigs = signature_offsets(b);
                let base = if sigs.is_empty() { 0 } else { *rng.pick(&sigs) };
                let i = (base + 4 + 2 * rng.below(30)).min(len.saturating_sub(4));
                let v: u32 = *rng.pick(&[u32::MAX, 0x7FFF_FFFF, 0xFFFF, 0x8000_0000]);
                if rng.chance(50) {
                    b[i..i + 4].copy_from_slice(&v.to_le_bytes());
                } else {
                    b[i..i + 2].copy_from_slice(&(v as u16).to_le_bytes());
                }
                done.push(format!("header field at {i} (structure at {base}) set to {v:#x}"));
            }
        }
    }
    done.join(", ")
}

/// Damage a spill directory in place; returns what was done.
fn damage_spill(rng: &mut Rng, dir: &Path) -> String {
    let mut done = Vec::new();
    let ops = 1 + rng.below(2);
    for _ in 0..ops {
        let names = ["calls.spill", "names", "threads", "anchors", "meta.json"];
        let name = *rng.pick(&names);
        let path = dir.join(name);
        let Ok(mut b) = std::fs::read(&path) else { continue };
        let len = b.len();
        let what = match rng.below(100) {
            0..=4 => {
                let _ = std::fs::remove_file(&path);
                done.push(format!("{name} removed"));
                continue;
            }
            5..=19 => {
                let keep = if len == 0 { 0 } else { rng.below(len) };
                b.truncate(keep);
                format!("truncated to {keep}")
            }
            20..=39 if len > 0 => {
                let k = 1 + rng.below(8);
                for _ in 0..k {
                    let i = rng.below(len);
                    b[i] = rng.next() as u8;
                }
                format!("{k} random byte(s) changed")
            }
            40..=49 if len > 4096 => {
                let start = 4096 * rng.below(len / 4096);
                let end = (start + 4096).min(len);
                b[start..end].fill(0);
                format!("bytes {start}..{end} zeroed")
            }
            50..=84 if name == "calls.spill" && len >= 4096 + 32 => {
                // A chunk header (magic "SPCK" + region, fill, thread + capacity) or the file
                // header (magic, format version, pid).
                let chunks: Vec<usize> = (4096..len - 32).step_by(8).filter(|&i| b[i..i + 4] == 0x4B43_5053u32.to_le_bytes()).collect();
                let v = *rng.pick(HUGE);
                if chunks.is_empty() || rng.chance(15) {
                    let i = 8 * (1 + rng.below(2));
                    b[i..i + 8].copy_from_slice(&v.to_le_bytes());
                    format!("file header word at {i} set to {v}")
                } else {
                    let c = *rng.pick(&chunks);
                    let field = rng.below(5);
                    match field {
                        0 => b[c + 4..c + 8].copy_from_slice(&(v as u32).to_le_bytes()),
                        1 => b[c + 8..c + 16].copy_from_slice(&v.to_le_bytes()),
                        2 => b[c + 16..c + 20].copy_from_slice(&(v as u32).to_le_bytes()),
                        3 => b[c + 20..c + 24].copy_from_slice(&(v as u32).to_le_bytes()),
                        _ => b[c + 24..c + 32].copy_from_slice(&v.to_le_bytes()),
                    }
                    format!("chunk header at {c}, field {field}, set to {v}")
                }
            }
            50..=84 if (name == "names" || name == "threads" || name == "anchors") && len >= 8 => {
                // A record's id, length or index.
                let i = 4 * rng.below(len / 4);
                let v = *rng.pick(&[u32::MAX, 0x7FFF_FFFF, 0x10_0000, 0xFFFF_FF00]);
                b[i..i + 4].copy_from_slice(&v.to_le_bytes());
                format!("4-byte field at {i} set to {v}")
            }
            50..=84 if name == "meta.json" => {
                let text = String::from_utf8_lossy(&b).into_owned();
                let numbers: Vec<(usize, usize)> = {
                    let bytes = text.as_bytes();
                    let mut v = Vec::new();
                    let mut i = 0;
                    while i < bytes.len() {
                        if bytes[i].is_ascii_digit() {
                            let s = i;
                            while i < bytes.len() && bytes[i].is_ascii_digit() {
                                i += 1;
                            }
                            v.push((s, i));
                        } else {
                            i += 1;
                        }
                    }
                    v
                };
                if numbers.is_empty() {
                    continue;
                }
                let (s, e) = *rng.pick(&numbers);
                let new = *rng.pick(&["18446744073709551615", "99999999999999999999999", "1e308", "-1", "4294967295", "\"x\"", "\u{fffd}\u{0}"]);
                b = format!("{}{new}{}", &text[..s], &text[e..]).into_bytes();
                if rng.chance(20) {
                    b.extend_from_slice(b"\xff\xfe");
                }
                format!("number at {s} replaced by {new}")
            }
            _ if len > 0 => {
                let i = rng.below(len);
                b[i] ^= 1 << rng.below(8);
                format!("bit flipped at {i}")
            }
            _ => continue,
        };
        std::fs::write(&path, &b).unwrap();
        done.push(format!("{name}: {what}"));
    }
    if done.is_empty() { "nothing".into() } else { done.join(", ") }
}

/// One failed run, kept for the report.
struct Finding {
    case: usize,
    tool: String,
    fault: String,
    damage: String,
    kept: PathBuf,
    details: String,
}

#[derive(Default)]
struct Tally {
    runs: usize,
    failed_cleanly: usize,
    crashes_reported: usize,
}

struct Shared {
    /// No run starts after this.
    deadline: Instant,
    sptool: Mutex<Vec<Finding>>,
    library: Mutex<Vec<Finding>>,
    tally: Mutex<Tally>,
    failures: PathBuf,
}

impl Shared {
    fn count(&self, o: &crate::common::Outcome) {
        let mut t = self.tally.lock();
        t.runs += 1;
        if o.code == Some(1) {
            t.failed_cleanly += 1;
        }
        if o.stderr.contains("crashed the HDF5 library") || o.stderr.contains("of CPU time") || o.stderr.contains("recovery died by") {
            t.crashes_reported += 1;
        }
    }

    /// Keep the case's input and record the finding.
    fn record(&self, library: bool, c: &Case, tool: &str, fault: String, o: &crate::common::Outcome) {
        let (case, damage, input) = (c.index, c.damage.as_str(), c.input.as_path());
        let kept = self.failures.join(format!("case{case}-{}", tool.replace(' ', "_")));
        let _ = std::fs::remove_dir_all(&kept);
        if input.is_dir() {
            copy_dir(input, &kept);
        } else {
            std::fs::create_dir_all(&kept).unwrap();
            let _ = std::fs::copy(input, kept.join(input.file_name().unwrap()));
        }
        let _ = std::fs::write(kept.join("what-happened.txt"), format!("damage: {damage}\nfault: {fault}\n{}\n", o.describe()));
        let f = Finding { case, tool: tool.into(), fault, damage: damage.into(), kept, details: o.describe() };
        if library { self.library.lock() } else { self.sptool.lock() }.push(f);
    }
}

fn sptool_cmd(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(sptool());
    c.current_dir(dir)
        .args(args)
        .env_remove("SCOPE_PROFILER_SPILL_DIR")
        .env_remove("SCOPE_PROFILER_FILE")
        .env_remove("SPTOOL_MAX_MEMORY")
        .env("SPTOOL_MAX_CPU_SECONDS", crate::common::CPU_LIMIT);
    c
}

/// One damaged input: the case number, what was done to it, and where it is.
struct Case {
    index: usize,
    damage: String,
    input: PathBuf,
}

/// Run an sptool command on a damaged input and judge it, outputs included: a command that
/// succeeded wrote its outputs, one that failed left none, and no unfinished file remains.
fn check_sptool(shared: &Shared, c: &Case, dir: &Path, args: &[&str], outputs: &[&str], font: bool) {
    for o in outputs {
        let _ = std::fs::remove_file(dir.join(o));
    }
    let mut cmd = sptool_cmd(dir, args);
    if !font {
        cmd.env("SPTOOL_FONT", "none");
    }
    let o = run_limited(&mut cmd);
    shared.count(&o);
    let tool = format!("sptool {}", args.iter().take_while(|a| !a.ends_with(".h5")).copied().collect::<Vec<_>>().join(" "));
    let mut fault = sptool_fault(&o);
    if fault.is_none() {
        let present: Vec<&&str> = outputs.iter().filter(|n| dir.join(n).exists()).collect();
        if o.code == Some(0) && present.len() != outputs.len() {
            fault = Some(format!("succeeded but wrote only {present:?} of {outputs:?}"));
        } else if o.code != Some(0) && !present.is_empty() && !args.contains(&"--data") {
            fault = Some(format!("failed but left {present:?}"));
        }
        let left = leftovers(dir);
        if !left.is_empty() {
            fault = Some(format!("left unfinished files {left:?}"));
        }
    }
    if let Some(fault) = fault {
        shared.record(false, c, &tool, fault, &o);
    }
}

fn profile_case(shared: &Shared, case: usize, rng: &mut Rng, dir: &Path) {
    let corpus = corpus();
    let base = rng.pick(&corpus.profiles).clone();
    let mut bytes = std::fs::read(&base).unwrap();
    let damage = format!("{}: {}", base.file_name().unwrap().to_string_lossy(), damage_h5(rng, &mut bytes));
    let input = dir.join("in.h5");
    std::fs::write(&input, &bytes).unwrap();
    let c = Case { index: case, damage, input };
    let good = base.to_str().unwrap();
    let font = rng.chance(30);
    let (plot_a, plot_b) = if rng.chance(50) { ("roof.svg", "regions.png") } else { ("roof.png", "regions.svg") };
    let max_events = (rng.below(20) + 1).to_string();
    let trace: Vec<&str> =
        if rng.chance(50) { vec!["export", "in.h5", "--format", "chrome-trace", "-o", "out.trace"] } else { vec!["export", "in.h5", "--format", "chrome-trace", "-o", "out.trace", "--max-events", &max_events] };
    let runs: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["inspect", "in.h5", "--per-rank", "--full"], vec![]),
        (vec!["export", "in.h5", "--format", "json", "-o", "out.json"], vec!["out.json"]),
        (vec!["export", "in.h5", "--format", "csv", "-o", "out.csv"], vec!["out.csv"]),
        (trace, vec!["out.trace"]),
        (vec!["plot", "roofline", "in.h5", "-o", plot_a, "--data", "roof.json"], vec![plot_a, "roof.json"]),
        (vec!["plot", "regions", "in.h5", "-o", plot_b], vec![plot_b]),
        (vec!["diff", good, "in.h5"], vec![]),
        (vec!["check", "in.h5", good], vec![]),
        (vec!["lines", "in.h5", "--per-rank"], vec![]),
        (vec!["tree", "in.h5"], vec![]),
    ];
    for (args, outputs) in &runs {
        if Instant::now() >= shared.deadline {
            return;
        }
        check_sptool(shared, &c, dir, args, outputs, font);
    }
    // The library's merge tool; what it writes must read back through sptool too.
    let merged = dir.join("merged.h5");
    let o = run_limited(
        Command::new(merge_tool())
            .current_dir(dir)
            .args(["-o", "merged.h5", "in.h5"])
            .env_remove("SCOPE_PROFILER_MERGE_MAX_MEMORY")
            .env("SCOPE_PROFILER_MERGE_MAX_CPU_SECONDS", crate::common::CPU_LIMIT),
    );
    shared.count(&o);
    if let Some(fault) = merge_fault(&o) {
        shared.record(true, &c, "scope_profiler_merge", fault, &o);
    }
    if o.code == Some(0) && merged.exists() {
        let merged = Case { index: case, damage: format!("{}; merged", c.damage), input: merged };
        check_sptool(shared, &merged, dir, &["inspect", "merged.h5"], &[], false);
    }
}

fn spill_case(shared: &Shared, case: usize, rng: &mut Rng, dir: &Path) {
    let corpus = corpus();
    let base = rng.pick(&corpus.spills).clone();
    let run = dir.join("run");
    copy_dir(&base, &run);
    let spill = spill_dir_in(&run);
    let damage = format!("{}: {}", base.file_name().unwrap().to_string_lossy(), damage_spill(rng, &spill));
    let o = run_limited(&mut sptool_cmd(dir, &["recover", "run/out.h5"]));
    shared.count(&o);
    let c = Case { index: case, damage, input: run.clone() };
    if let Some(fault) = sptool_fault(&o) {
        shared.record(true, &c, "sptool recover", fault, &o);
    }
    if run.join("out.h5").exists() {
        let recovered = Case { index: case, damage: format!("{}; recovered", c.damage), input: run.join("out.h5") };
        check_sptool(shared, &recovered, dir, &["inspect", "run/out.h5", "--per-rank"], &[], false);
    }
}

fn run_case(shared: &Shared, seed: u64, case: usize, root: &Path) {
    let mut rng = Rng::new(seed ^ (case as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let dir = root.join(format!("case{case}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    if rng.chance(25) {
        spill_case(shared, case, &mut rng, &dir);
    } else {
        profile_case(shared, case, &mut rng, &dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn list(findings: &[Finding]) -> String {
    let mut out = String::new();
    for f in findings {
        out.push_str(&format!(
            "- case {} {} ({}): {}\n  damage: {}\n  input kept in {}\n  {}\n",
            f.case,
            f.tool,
            f.fault,
            f.kept.file_name().unwrap().to_string_lossy(),
            f.damage,
            f.kept.display(),
            f.details.replace('\n', "\n  ")
        ));
    }
    out
}

#[test]
fn damaged_profiles_and_spills_never_crash_hang_or_exhaust_the_tools() {
    let seed = env_u64("SPTOOL_FUZZ_SEED").unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        t.as_nanos() as u64 ^ (std::process::id() as u64) << 32
    });
    let only = env_u64("SPTOOL_FUZZ_CASE").map(|c| c as usize);
    let budget = Duration::from_secs(env_u64("SPTOOL_FUZZ_SECONDS").unwrap_or(DEFAULT_SECONDS));
    eprintln!("hostile fuzz: seed {seed} (replay with SPTOOL_FUZZ_SEED={seed}; one case with SPTOOL_FUZZ_CASE=<n>)");
    let start = Instant::now();
    let deadline = start + budget;
    corpus();
    let root = scratch("fuzz");
    let shared = Shared {
        deadline: if only.is_some() { start + Duration::from_secs(3600) } else { deadline },
        sptool: Mutex::new(Vec::new()),
        library: Mutex::new(Vec::new()),
        tally: Mutex::new(Tally::default()),
        failures: root.join("failures"),
    };
    let cases_done = AtomicUsize::new(0);
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..if only.is_some() { 1 } else { WORKERS } {
            s.spawn(|| {
                loop {
                    let case = match only {
                        Some(c) => {
                            if next.fetch_add(1, Ordering::SeqCst) > 0 {
                                break;
                            }
                            c
                        }
                        None => {
                            if Instant::now() >= deadline {
                                break;
                            }
                            next.fetch_add(1, Ordering::SeqCst)
                        }
                    };
                    run_case(&shared, seed, case, &root);
                    cases_done.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    let sptool_findings = shared.sptool.into_inner();
    let library_findings = shared.library.into_inner();
    let t = shared.tally.into_inner();
    let report = format!(
        "hostile fuzz: seed {seed}, {} case(s), {} tool run(s) in {:.1} s ({} ended with a clean one-line error, {} reported a crash or endless loop of the HDF5 library as a damaged file)\n\
         sptool commands: {} failure(s)\n{}\
         library tools (scope_profiler_merge, sptool recover; must pass: {LIBRARY_TOOLS_MUST_PASS}): {} failure(s)\n{}",
        cases_done.load(Ordering::SeqCst),
        t.runs,
        start.elapsed().as_secs_f64(),
        t.failed_cleanly,
        t.crashes_reported,
        sptool_findings.len(),
        list(&sptool_findings),
        library_findings.len(),
        list(&library_findings),
    );
    let _ = std::fs::write(root.join("report.txt"), &report);
    eprintln!("{report}(report in {})", root.join("report.txt").display());
    assert!(sptool_findings.is_empty(), "sptool failed on damaged input:\n{report}");
    if LIBRARY_TOOLS_MUST_PASS {
        assert!(library_findings.is_empty(), "the library's tools failed on damaged input:\n{report}");
    }
    assert!(t.runs > 0, "no case ran");
}
