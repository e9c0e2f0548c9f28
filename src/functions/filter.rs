//! The filter file of instrumented functions (`SCOPE_PROFILER_FILTER`), in the syntax of
//! Score-P's filter files, so an existing one works as it is:
//!
//! ```text
//! SCOREP_REGION_NAMES_BEGIN
//!   EXCLUDE *
//!   INCLUDE solve* physics::*
//!           main
//!   EXCLUDE MANGLED _ZN6solver4tinyEv
//! SCOREP_REGION_NAMES_END
//! SCOREP_FILE_NAMES_BEGIN   # comments start with '#'
//!   EXCLUDE */third_party/* */libblas.so*
//! SCOREP_FILE_NAMES_END
//! ```
//!
//! A rule is `EXCLUDE` or `INCLUDE`, optionally `MANGLED` (region rules: match the symbol as
//! the linker sees it rather than the demangled name), then patterns up to the next rule or the
//! block's end, over as many lines as needed. Patterns are shell globs: `*` any characters
//! (`/` included), `?` one character, `[abc]`, `[a-z]`, `[!a-z]` one of (or none of) a set; a
//! backslash makes the next character plain (`\*`, `\ `, `\#`). Within a block the last rule
//! that matches decides; a function is recorded unless its file or its name is excluded.
//! Region rules match the function's region name (demangled C++ with its parameter list,
//! `module::procedure` for gfortran); file rules match the source file that defines it (as the
//! debug information records it, usually an absolute path) or the executable or shared
//! library that holds it.

/// One parsed filter file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    files: Vec<Rule>,
    names: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq)]
struct Rule {
    include: bool,
    mangled: bool,
    pattern: Glob,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Char(char),
    Any,
    Star,
    /// Ranges (inclusive), negated.
    Set(Vec<(char, char)>, bool),
}

/// A shell glob.
#[derive(Debug, Clone, PartialEq)]
pub struct Glob(Vec<Tok>);

/// The longest filter file read.
pub const MAX_BYTES: u64 = 1 << 20;

impl Glob {
    /// Compile a pattern whose characters come with whether they were escaped.
    fn compile(chars: &[(char, bool)]) -> Result<Glob, String> {
        let mut toks = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            let (c, escaped) = chars[i];
            i += 1;
            toks.push(match (c, escaped) {
                ('*', false) => Tok::Star,
                ('?', false) => Tok::Any,
                ('[', false) => {
                    let mut negated = false;
                    if let Some(&(c, false)) = chars.get(i) {
                        if c == '!' || c == '^' {
                            negated = true;
                            i += 1;
                        }
                    }
                    let mut ranges = Vec::new();
                    let mut first = true;
                    loop {
                        let Some(&(c, esc)) = chars.get(i) else {
                            return Err("a '[' without its ']'".into());
                        };
                        i += 1;
                        if c == ']' && !esc && !first {
                            break;
                        }
                        first = false;
                        match (chars.get(i), chars.get(i + 1)) {
                            (Some(&('-', false)), Some(&(hi, _))) if hi != ']' => {
                                ranges.push((c, hi));
                                i += 2;
                            }
                            _ => ranges.push((c, c)),
                        }
                    }
                    Tok::Set(ranges, negated)
                }
                (c, _) => Tok::Char(c),
            });
        }
        Ok(Glob(toks))
    }

    /// A pattern without escapes (tests, and `*`).
    pub fn new(pattern: &str) -> Result<Glob, String> {
        Glob::compile(&pattern.chars().map(|c| (c, false)).collect::<Vec<_>>())
    }

    fn one(tok: &Tok, c: char) -> bool {
        match tok {
            Tok::Char(x) => *x == c,
            Tok::Any => true,
            Tok::Set(ranges, negated) => ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&c)) != *negated,
            Tok::Star => false,
        }
    }

    /// Whether `text` matches the whole pattern.
    pub fn matches(&self, text: &str) -> bool {
        let t: Vec<char> = text.chars().collect();
        let p = &self.0;
        let (mut pi, mut ti) = (0, 0);
        // The last star seen and where its match now ends, to backtrack to.
        let mut star: Option<(usize, usize)> = None;
        while ti < t.len() {
            if pi < p.len() && p[pi] == Tok::Star {
                star = Some((pi, ti));
                pi += 1;
            } else if pi < p.len() && Glob::one(&p[pi], t[ti]) {
                pi += 1;
                ti += 1;
            } else if let Some((sp, st)) = star {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|x| *x == Tok::Star)
    }
}

/// Split a line into words: whitespace separates, `#` starts a comment, `\` makes the next
/// character plain. Each word: its characters with whether they were escaped.
fn words(line: &str) -> Vec<Vec<(char, bool)>> {
    let mut out = Vec::new();
    let mut word: Vec<(char, bool)> = Vec::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => word.push((chars.next().unwrap_or('\\'), true)),
            '#' => break,
            c if c.is_whitespace() => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
            }
            c => word.push((c, false)),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

fn plain(word: &[(char, bool)]) -> Option<String> {
    word.iter().all(|&(_, e)| !e).then(|| word.iter().map(|&(c, _)| c).collect())
}

#[derive(Clone, Copy, PartialEq)]
enum Block {
    None,
    Files,
    Names,
}

impl Filter {
    /// Parse a filter file's text. An error names the line.
    pub fn parse(text: &str) -> Result<Filter, String> {
        let mut f = Filter::default();
        let mut block = Block::None;
        // The rule patterns are being added to: (include, mangled).
        let mut rule: Option<(bool, bool)> = None;
        for (n, line) in text.lines().enumerate() {
            let at = |msg: String| format!("line {}: {msg}", n + 1);
            let ws = words(line);
            let mut i = 0;
            while i < ws.len() {
                let w = plain(&ws[i]);
                i += 1;
                match (block, w.as_deref()) {
                    (Block::None, Some("SCOREP_REGION_NAMES_BEGIN")) => block = Block::Names,
                    (Block::None, Some("SCOREP_FILE_NAMES_BEGIN")) => block = Block::Files,
                    (Block::None, _) => {
                        return Err(at(format!("expected SCOREP_REGION_NAMES_BEGIN or SCOREP_FILE_NAMES_BEGIN, found '{}'", text_of(&ws[i - 1]))));
                    }
                    (Block::Names, Some("SCOREP_REGION_NAMES_END")) | (Block::Files, Some("SCOREP_FILE_NAMES_END")) => {
                        block = Block::None;
                        rule = None;
                    }
                    (_, Some(k @ ("SCOREP_REGION_NAMES_END" | "SCOREP_FILE_NAMES_END" | "SCOREP_REGION_NAMES_BEGIN" | "SCOREP_FILE_NAMES_BEGIN"))) => {
                        return Err(at(format!("{k} inside another block")));
                    }
                    (_, Some(k @ ("EXCLUDE" | "INCLUDE"))) => {
                        let include = k == "INCLUDE";
                        let mangled = ws.get(i).and_then(|w| plain(w)).is_some_and(|w| w == "MANGLED");
                        if mangled {
                            if block == Block::Files {
                                return Err(at("MANGLED applies to region names, not files".into()));
                            }
                            i += 1;
                        }
                        rule = Some((include, mangled));
                    }
                    (_, _) => {
                        let Some((include, mangled)) = rule else {
                            return Err(at(format!("'{}' before any EXCLUDE or INCLUDE", text_of(&ws[i - 1]))));
                        };
                        let pattern = Glob::compile(&ws[i - 1]).map_err(|e| at(format!("pattern '{}': {e}", text_of(&ws[i - 1]))))?;
                        let r = Rule { include, mangled, pattern };
                        if block == Block::Files { f.files.push(r) } else { f.names.push(r) }
                    }
                }
            }
        }
        match block {
            Block::None => Ok(f),
            Block::Names => Err("SCOREP_REGION_NAMES_BEGIN without its SCOREP_REGION_NAMES_END".into()),
            Block::Files => Err("SCOREP_FILE_NAMES_BEGIN without its SCOREP_FILE_NAMES_END".into()),
        }
    }

    /// Read and parse a filter file (at most `MAX_BYTES`).
    pub fn read(path: &std::path::Path) -> Result<Filter, String> {
        // Never blocks: a FIFO, device, socket or directory is refused before it is opened.
        let text = safe_file::read_regular_text(path, MAX_BYTES).map_err(|e| match (safe_file::not_kind(&e), e.kind()) {
            (Some(_), _) => format!("{e}: not read"),
            (None, std::io::ErrorKind::InvalidData) => e.to_string(),
            (None, _) => format!("cannot read it: {e}"),
        })?;
        Filter::parse(&text)
    }

    /// Whether a function is recorded: not when a file rule excludes its source file or its
    /// module, nor when a region rule excludes its name (or, for MANGLED rules, its symbol).
    pub fn includes(&self, name: &str, symbol: Option<&str>, file: Option<&str>, module: &str) -> bool {
        let mut file_in = true;
        for r in &self.files {
            if file.is_some_and(|f| r.pattern.matches(f)) || r.pattern.matches(module) {
                file_in = r.include;
            }
        }
        if !file_in {
            return false;
        }
        let mut name_in = true;
        for r in &self.names {
            let target = if r.mangled { symbol.unwrap_or(name) } else { name };
            if r.pattern.matches(target) {
                name_in = r.include;
            }
        }
        name_in
    }

    /// Number of rules (region, file).
    pub fn rules(&self) -> (usize, usize) {
        (self.names.len(), self.files.len())
    }
}

fn text_of(word: &[(char, bool)]) -> String {
    word.iter().map(|&(c, _)| c).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let g = |p: &str, t: &str| Glob::new(p).unwrap().matches(t);
        assert!(g("*", "") && g("*", "anything/at all"));
        assert!(g("solve*", "solve") && g("solve*", "solver::step()") && !g("solve*", "xsolve"));
        assert!(g("*::step(*)", "solver::step(int)") && !g("*::step(*)", "solver::stepper"));
        assert!(g("a?c", "abc") && !g("a?c", "ac"));
        assert!(g("[a-c]x", "bx") && !g("[a-c]x", "dx") && g("[!a-c]x", "dx") && g("[]]", "]"));
        assert!(g("*/third_party/*", "/src/third_party/x.c") && !g("*/third_party/*", "/src/party/x.c"));
        assert!(g("*a*b*c", "xxaxxbxxcc") && !g("*a*b*c", "xxaxxbxx"));
        assert!(g("é*", "été"));
        assert!(Glob::new("[ab").is_err());
    }

    #[test]
    fn score_p_syntax() {
        let f = Filter::parse(
            "# a comment\n\
             SCOREP_REGION_NAMES_BEGIN\n\
               EXCLUDE *\n\
               INCLUDE solve* main # trailing comment\n\
                       physics::*\n\
               EXCLUDE MANGLED _ZN6solver4tinyEv\n\
               EXCLUDE with\\ space\n\
             SCOREP_REGION_NAMES_END\n\
             SCOREP_FILE_NAMES_BEGIN\n\
               EXCLUDE */third_party/* */libblas.so*\n\
               INCLUDE */third_party/keep.c\n\
             SCOREP_FILE_NAMES_END\n",
        )
        .unwrap();
        assert_eq!(f.rules(), (6, 3));
        let inc = |name: &str, symbol: Option<&str>, file: Option<&str>, module: &str| f.includes(name, symbol, file, module);
        assert!(!inc("helper", None, Some("/src/a.c"), "/bin/app"));
        assert!(inc("main", None, Some("/src/a.c"), "/bin/app"));
        assert!(inc("solver::step()", Some("_ZN6solver4stepEv"), None, "/bin/app"));
        assert!(!inc("solver::tiny()", Some("_ZN6solver4tinyEv"), None, "/bin/app"), "MANGLED excludes by symbol");
        assert!(inc("physics::flux", Some("__physics_MOD_flux"), Some("/src/physics.f90"), "/bin/app"));
        assert!(!inc("with space", None, None, "/bin/app"));
        // File rules: the source file or the module; the last matching rule decides.
        assert!(!inc("main", None, Some("/src/third_party/lib.c"), "/bin/app"));
        assert!(inc("main", None, Some("/src/third_party/keep.c"), "/bin/app"));
        assert!(!inc("solve", None, None, "/usr/lib/libblas.so.3"));
        // No rules: everything.
        assert!(Filter::parse("").unwrap().includes("x", None, None, ""));
    }

    #[test]
    fn errors_name_the_line() {
        let e = |t: &str| Filter::parse(t).unwrap_err();
        assert!(e("EXCLUDE foo").starts_with("line 1: expected SCOREP_REGION_NAMES_BEGIN"), "{}", e("EXCLUDE foo"));
        assert!(e("SCOREP_REGION_NAMES_BEGIN\nfoo\nSCOREP_REGION_NAMES_END").starts_with("line 2: 'foo' before any"));
        assert!(e("SCOREP_REGION_NAMES_BEGIN\nEXCLUDE foo").contains("without its SCOREP_REGION_NAMES_END"));
        assert!(e("SCOREP_FILE_NAMES_BEGIN\nEXCLUDE MANGLED x\nSCOREP_FILE_NAMES_END").contains("MANGLED applies"));
        assert!(e("SCOREP_REGION_NAMES_BEGIN\nSCOREP_FILE_NAMES_BEGIN").contains("inside another block"));
        assert!(e("SCOREP_REGION_NAMES_BEGIN\nEXCLUDE [x\nSCOREP_REGION_NAMES_END").contains("line 2: pattern '[x'"));
    }
}
