//! Which regions count perf events (`SCOPE_PROFILER_PERF_REGIONS`): a list of glob patterns,
//! decided once per region when it is registered, so that a region not chosen never reads the
//! counters (and a thread that runs none opens no group).
//!
//! Syntax: patterns separated by commas, blanks around each ignored; `*` matches any run of
//! characters (none included), `?` one character, `\` makes the next character literal
//! (`\,` `\*` `\?` `\\`); everything else matches itself, case-sensitively. A pattern must
//! match the whole name: `solve*,io` chooses `solve`, `solve/inner` and `io`, not `my_io`.

use crate::model::PageVec;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One pattern: literal characters and wildcards.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Char(char),
    Any,
    One,
}

/// The parsed list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Globs {
    patterns: Vec<Vec<Token>>,
}

impl Globs {
    /// Parse `list`; `None` when it holds no pattern (empty or only blanks and commas).
    pub fn parse(list: &str) -> Option<Globs> {
        let mut patterns = Vec::new();
        let mut current: Vec<Token> = Vec::new();
        // Blanks at the end of a pattern are dropped unless escaped: count trailing plain blanks.
        let mut trailing_blanks = 0;
        let mut chars = list.chars();
        let finish = |current: &mut Vec<Token>, trailing: &mut usize, patterns: &mut Vec<Vec<Token>>| {
            current.truncate(current.len() - *trailing);
            *trailing = 0;
            if !current.is_empty() {
                patterns.push(std::mem::take(current));
            }
            current.clear();
        };
        while let Some(c) = chars.next() {
            match c {
                ',' => finish(&mut current, &mut trailing_blanks, &mut patterns),
                '\\' => {
                    // A trailing backslash stands for itself.
                    current.push(Token::Char(chars.next().unwrap_or('\\')));
                    trailing_blanks = 0;
                }
                '*' => {
                    // Runs of * are one.
                    if current.last() != Some(&Token::Any) {
                        current.push(Token::Any);
                    }
                    trailing_blanks = 0;
                }
                '?' => {
                    current.push(Token::One);
                    trailing_blanks = 0;
                }
                c if c.is_whitespace() && current.is_empty() => {}
                c => {
                    current.push(Token::Char(c));
                    trailing_blanks = if c.is_whitespace() { trailing_blanks + 1 } else { 0 };
                }
            }
        }
        finish(&mut current, &mut trailing_blanks, &mut patterns);
        (!patterns.is_empty()).then_some(Globs { patterns })
    }

    /// Does any pattern match all of `name`?
    pub fn matches(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        self.patterns.iter().any(|p| matches(p, &name))
    }
}

/// Glob matching with one backtrack point per `*` (linear in practice, never exponential).
fn matches(pattern: &[Token], name: &[char]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(Token::Any) => {
                star = Some((p, n));
                p += 1;
            }
            Some(Token::One) => {
                p += 1;
                n += 1;
            }
            Some(Token::Char(c)) if *c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                // Let the last `*` take one more character.
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|t| *t == Token::Any)
}

/// The chosen regions of a run: the patterns and, per region id, whether it counts (a bit
/// set at registration, read on the hot path).
pub struct Chosen {
    globs: Globs,
    /// One bit per possible region id (`registry::MAX_REGIONS`), in a mapping of its own
    /// (128 KiB), only ever accessed atomically through `base`.
    bits: PageVec<u64>,
    base: *mut u64,
    any: AtomicBool,
}

// SAFETY: `base` points into `bits`, which `Chosen` owns; its words are only accessed atomically.
unsafe impl Send for Chosen {}
unsafe impl Sync for Chosen {}

impl Chosen {
    pub fn new(globs: Globs) -> Chosen {
        let mut bits = PageVec::zeroed((crate::registry::MAX_REGIONS as usize).div_ceil(64));
        let base = bits.as_mut_ptr();
        Chosen { globs, bits, base, any: AtomicBool::new(false) }
    }

    #[inline(always)]
    fn word(&self, id: u32) -> Option<&AtomicU64> {
        let i = id as usize / 64;
        // SAFETY: i is inside the bitmap, which lives as long as `self`; AtomicU64 has u64's
        // size and alignment, and no reference to the words is ever made otherwise.
        (i < self.bits.len()).then(|| unsafe { AtomicU64::from_ptr(self.base.add(i)) })
    }

    /// A new region: decide once whether it counts (under the registry lock).
    pub fn region_created(&self, id: u32, name: &str) {
        if self.globs.matches(name) {
            if let Some(w) = self.word(id) {
                w.fetch_or(1 << (id % 64), Ordering::Release);
                self.any.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Does region `id` count perf events? (One load and a bit test.)
    #[inline(always)]
    pub fn counts(&self, id: u32) -> bool {
        self.word(id).is_some_and(|w| w.load(Ordering::Acquire) & (1 << (id % 64)) != 0)
    }

    /// Whether any region matched so far.
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(list: &str, name: &str) -> bool {
        Globs::parse(list).is_some_and(|g| g.matches(name))
    }

    #[test]
    fn glob_syntax() {
        assert!(m("solve*,io", "solve"));
        assert!(m("solve*,io", "solve/inner"));
        assert!(m("solve*,io", "io"));
        assert!(!m("solve*,io", "my_io"));
        assert!(!m("solve*,io", "io2"));
        assert!(m(" solve* , io ", "io"), "blanks around patterns are ignored");
        assert!(m("*", ""), "* matches the empty name");
        assert!(m("a?c", "abc") && !m("a?c", "ac") && !m("a?c", "abbc"));
        assert!(m("*b*d", "abxbcd") && m("a*a*a", "aaaa") && !m("a*a*a", "aa"));
        assert!(m(r"x\,y", "x,y") && !m(r"x\,y", "x"), "an escaped comma is part of the name");
        assert!(m(r"a\*", "a*") && !m(r"a\*", "ab"));
        assert!(m(r"a\?", "a?") && !m(r"a\?", "ab"));
        assert!(m(r"a\\", r"a\"));
        assert!(m(r"a\ ", "a "), "an escaped blank at the end is kept");
        assert!(m("a b", "a b"), "blanks inside a pattern are kept");
        assert!(m("élan*", "élan vital") && m("?lan", "élan"), "characters, not bytes");
        assert!(m("CalcFBHourglassForceForElems,Calc*Elems", "CalcKinematicsForElems"));
        assert!(!m("Solve", "solve"), "case-sensitive");
        assert_eq!(Globs::parse(""), None);
        assert_eq!(Globs::parse(" , ,"), None);
    }

    #[test]
    fn many_stars_stay_fast() {
        let name = "a".repeat(2000);
        let pattern = format!("{}b", "*a".repeat(200));
        let t = std::time::Instant::now();
        assert!(!m(&pattern, &name));
        assert!(t.elapsed().as_secs() < 5, "backtracking blew up");
    }

    #[test]
    fn regions_are_chosen_at_registration() {
        let c = Chosen::new(Globs::parse("k*").unwrap());
        assert!(!c.any());
        c.region_created(0, "init");
        c.region_created(1, "kernel");
        c.region_created(70, "k2");
        c.region_created(crate::registry::MAX_REGIONS - 1, "kx");
        assert!(!c.counts(0) && c.counts(1) && c.counts(70) && !c.counts(71) && c.counts(crate::registry::MAX_REGIONS - 1));
        assert!(!c.counts(crate::registry::MAX_REGIONS) && !c.counts(u32::MAX), "ids beyond the registry never count");
        assert!(c.any());
    }
}
