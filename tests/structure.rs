//! The crate's modules import one way. Read from the text of `src/` the way the project's
//! checker (`import_circles.py`) reads it: every `crate::X` (and each name of a
//! `use crate::{X, Y}`) is an import of the top-level module `X` (`src/X.rs` or `src/X/`),
//! so is `super::super::X` inside a folder; unit tests (from the first `#[cfg(test)]` of a
//! file on) may reach anywhere. There must be no import circle among the top-level modules,
//! and the plain data at the bottom (`model`) imports nothing of the crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Imports between top-level modules: (from, to) -> the first place (file:line) that makes one.
type Imports = BTreeMap<(String, String), String>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'
}

fn ident_at(s: &str) -> &str {
    &s[..s.find(|c: char| !is_ident(c)).unwrap_or(s.len())]
}

/// The module names `text` imports, each with the line of its first mention.
fn names_in(text: &str, in_folder: bool) -> Vec<(String, usize)> {
    let line_of = |at: usize| text[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        let name = ident_at(rest);
        if !name.is_empty() {
            out.push((name.to_string(), line_of(at)));
        } else if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a, b::c}`: up to the first `}`, the first name and each after a comma.
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for piece in group.split(',') {
                let name = ident_at(piece.trim_start());
                if !name.is_empty() {
                    out.push((name.to_string(), line_of(at)));
                }
            }
        }
    }
    if in_folder {
        for (at, _) in text.match_indices("super::super::") {
            let name = ident_at(&text[at + "super::super::".len()..]);
            if !name.is_empty() {
                out.push((name.to_string(), line_of(at)));
            }
        }
    }
    out
}

/// Every top-level module of `src` and the imports between them.
fn read_imports(src: &Path) -> (BTreeSet<String>, Imports) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut modules = BTreeSet::new();
    let mut found: Vec<(String, String, String)> = Vec::new();
    for path in files {
        let rel = path.strip_prefix(src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
        let top = first.strip_suffix(".rs").unwrap_or(&first).to_string();
        if matches!(top.as_str(), "lib" | "main" | "bin") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let text = &text[..text.find("#[cfg(test)]").unwrap_or(text.len())];
        for (name, line) in names_in(text, rel.components().count() > 1) {
            if name != top {
                found.push((top.clone(), name, format!("{}:{line}", path.display())));
            }
        }
        modules.insert(top);
    }
    let mut imports = Imports::new();
    for (from, to, place) in found {
        if modules.contains(&to) {
            imports.entry((from, to)).or_insert(place);
        }
    }
    (modules, imports)
}

/// The import circles: strongly connected components of more than one module (Tarjan).
fn circles(modules: &BTreeSet<String>, imports: &Imports) -> Vec<Vec<String>> {
    struct Walk<'a> {
        next: BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.next.get(v).cloned().unwrap_or_default() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let l = self.low[v].min(self.low[w]);
                    self.low.insert(v, l);
                } else if self.on_stack.contains(w) {
                    let l = self.low[v].min(self.index[w]);
                    self.low.insert(v, l);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk { next: BTreeMap::new(), index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on_stack: BTreeSet::new(), found: Vec::new() };
    for (from, to) in imports.keys() {
        walk.next.entry(from.as_str()).or_default().push(to.as_str());
    }
    for m in modules {
        if !walk.index.contains_key(m.as_str()) {
            walk.visit(m);
        }
    }
    walk.found
}

/// The circles named, each with the imports that close it and where they are.
fn describe(circles: &[Vec<String>], imports: &Imports) -> String {
    let mut out = String::new();
    for c in circles {
        out.push_str(&format!("circle: {}\n", c.join(" <-> ")));
        for ((from, to), place) in imports {
            if c.contains(from) && c.contains(to) {
                out.push_str(&format!("  {from} -> {to}  ({place})\n"));
            }
        }
    }
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_import_circle_among_the_modules() {
    let (modules, imports) = read_imports(&src());
    assert!(modules.len() > 20 && imports.len() > 50, "read too little of src/: {} modules, {} imports", modules.len(), imports.len());
    let found = circles(&modules, &imports);
    assert!(found.is_empty(), "{} import circle(s) among the modules of src/ (lower layers must not import higher ones):\n{}", found.len(), describe(&found, &imports));
}

#[test]
fn the_model_imports_nothing_of_the_crate() {
    let (modules, imports) = read_imports(&src());
    assert!(modules.contains("model"), "src/model is gone");
    let from_model: Vec<String> = imports.iter().filter(|((from, _), _)| from == "model").map(|((_, to), place)| format!("model -> {to} ({place})")).collect();
    assert!(from_model.is_empty(), "the plain data at the bottom imports the crate:\n{}", from_model.join("\n"));
}

/// The reading finds a circle where there is one (so the tests above can fail): a made-up
/// `src/` whose folder module closes a circle through `super::super`, one through a grouped
/// `use`, and imports that must not count (unit tests, names that are no module).
#[test]
fn the_reading_finds_circles() {
    let dir = std::env::temp_dir().join(format!("sp_structure_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("b")).unwrap();
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let files = [
        ("lib.rs", "pub mod a; pub mod b; pub mod c; pub mod d; pub mod e;"),
        ("a.rs", "use crate::b::thing;\nuse std::fmt;"),
        ("b/mod.rs", "pub mod inner;"),
        ("b/inner.rs", "use super::super::c;"),
        ("c.rs", "use crate::{a, std_like};\n#[cfg(test)]\nmod tests { use crate::e; }"),
        ("d.rs", "use crate::e;\n"),
        ("e.rs", "//! no imports\n#[cfg(test)]\nmod tests { use crate::d; }"),
        ("bin/tool.rs", "use crate::d;"),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let (modules, imports) = read_imports(&dir);
    assert_eq!(modules.iter().map(String::as_str).collect::<Vec<_>>(), ["a", "b", "c", "d", "e"]);
    let edges: Vec<(&str, &str)> = imports.keys().map(|(f, t)| (f.as_str(), t.as_str())).collect();
    assert_eq!(edges, [("a", "b"), ("b", "c"), ("c", "a"), ("d", "e")]);
    let found = circles(&modules, &imports);
    assert_eq!(found, vec![vec!["a".to_string(), "b".into(), "c".into()]]);
    let text = describe(&found, &imports);
    assert!(text.contains("circle: a <-> b <-> c") && text.contains("b -> c  (") && text.contains("inner.rs:1)"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The sources of regions other than our own API are one family: one folder, one file per
/// adapter, each entering the recording through the folder's interface (`adapters/mod.rs`),
/// never through the profiler, the recorder or the registry directly; and nothing of the
/// library's own pipeline imports an adapter.
/// The profiler's own file keeps to setup, finalize and the session: what the adapters'
/// interface and the C API record through lives in `profiler/recording.rs`, the write after
/// a signal in `profiler/signal_write.rs`, so that a new adapter or a new signal stage does not
/// make the file that holds the session grow (it had grown to 1,700 lines).
#[test]
fn the_profilers_session_file_stays_small() {
    let main = src().join("profiler").join("mod.rs");
    let lines = std::fs::read_to_string(&main).unwrap().lines().count();
    assert!(lines <= 1_150, "{} has {lines} lines: put recording entry points in profiler/recording.rs, signal stages in profiler/signal_write.rs", main.display());
    assert!(!src().join("profiler.rs").exists(), "src/profiler.rs is back: the profiler lives in src/profiler/");
}

#[test]
fn the_adapters_enter_the_recording_through_one_interface() {
    let dir = src().join("adapters");
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let names: BTreeSet<String> = files.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    for want in ["mod.rs", "ompt.rs", "functions.rs", "mpi_calls.rs", "kokkos.rs", "nvtx.rs"] {
        assert!(names.contains(want), "src/adapters/{want} is missing (found {names:?})");
    }
    for old in ["ffi_ompt.rs", "ffi_functions.rs", "ffi_mpi.rs"] {
        assert!(!src().join(old).exists(), "src/{old} is back: the adapters live in src/adapters/");
    }
    let mut bypass = Vec::new();
    for path in files.iter().filter(|p| !p.ends_with("mod.rs")) {
        let text = std::fs::read_to_string(path).unwrap();
        let text = &text[..text.find("#[cfg(test)]").unwrap_or(text.len())];
        for (name, line) in names_in(text, true) {
            if matches!(name.as_str(), "profiler" | "recorder" | "registry") {
                bypass.push(format!("{}:{line} imports {name}", path.display()));
            }
        }
    }
    assert!(bypass.is_empty(), "an adapter enters the recording around the interface of src/adapters/mod.rs:\n{}", bypass.join("\n"));
    let (_, imports) = read_imports(&src());
    let into: Vec<String> = imports.iter().filter(|((_, to), _)| to == "adapters").map(|((from, _), place)| format!("{from} -> adapters ({place})")).collect();
    assert!(into.is_empty(), "the pipeline imports an adapter (adapters sit on top of it):\n{}", into.join("\n"));
}
