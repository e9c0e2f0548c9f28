//! Which regions and ranks a command looks at: `--include`/`--exclude`
//! regular expressions and `--ranks 0,2-3`.

use std::collections::BTreeSet;

use regex::Regex;

use crate::error::{Error, Result};
use crate::fmt;
use crate::model::Profile;

/// Region-name and rank selection. Patterns match from the start of the
/// name (Python's `re.match`, as in the Python tool): `solve` selects
/// `solve` and `solver`, `.*io` selects anything containing `io`.
#[derive(Debug, Default)]
pub struct Filter {
    include: Vec<Regex>,
    exclude: Vec<Regex>,
    ranks: Option<BTreeSet<u32>>,
}

fn compile(pattern: &str, option: &str) -> Result<Regex> {
    // Compile the pattern as written first, so the error talks about it and
    // not about the anchored wrapper.
    if let Err(e) = Regex::new(pattern) {
        let detail = match &e {
            regex::Error::Syntax(text) => text
                .lines()
                .find_map(|l| l.trim().strip_prefix("error: "))
                .unwrap_or("invalid syntax")
                .to_string(),
            other => other.to_string(),
        };
        return Err(Error::new(format!("bad regular expression '{pattern}' for {option}: {detail}")));
    }
    Regex::new(&format!("^(?:{pattern})"))
        .map_err(|e| Error::new(format!("bad regular expression '{pattern}' for {option}: {e}")))
}

/// Parse `0,2-3,7` into a set of ranks.
pub fn parse_ranks(spec: &str) -> Result<BTreeSet<u32>> {
    let bad = |why: &str| Error::new(format!("bad --ranks '{spec}': {why} (expected e.g. 0,2-3)"));
    let mut out = BTreeSet::new();
    for part in spec.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(bad("empty item"));
        }
        let number = |s: &str| s.trim().parse::<u32>().map_err(|_| bad(&format!("'{s}' is not a rank number")));
        if let Some((a, b)) = part.split_once('-') {
            let (a, b) = (number(a)?, number(b)?);
            if a > b {
                return Err(bad(&format!("range {a}-{b} is backwards")));
            }
            if b - a > 1_000_000 {
                return Err(bad("range too large"));
            }
            out.extend(a..=b);
        } else {
            out.insert(number(part)?);
        }
    }
    Ok(out)
}

impl Filter {
    pub fn new(include: &[String], exclude: &[String], ranks: Option<&str>) -> Result<Self> {
        Ok(Self {
            include: include.iter().map(|p| compile(p, "--include")).collect::<Result<_>>()?,
            exclude: exclude.iter().map(|p| compile(p, "--exclude")).collect::<Result<_>>()?,
            ranks: ranks.map(parse_ranks).transpose()?,
        })
    }

    pub fn name(&self, name: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|r| r.is_match(name)))
            && !self.exclude.iter().any(|r| r.is_match(name))
    }

    pub fn rank(&self, rank: u32) -> bool {
        self.ranks.as_ref().is_none_or(|set| set.contains(&rank))
    }

    /// Fail if `--ranks` names a rank the file does not have.
    pub fn check_ranks(&self, profile: &Profile) -> Result<()> {
        let Some(wanted) = &self.ranks else { return Ok(()) };
        let present = profile.rank_numbers();
        let missing: Vec<i64> = wanted.iter().filter(|r| !present.contains(r)).map(|&r| r as i64).collect();
        if missing.is_empty() {
            return Ok(());
        }
        let have: Vec<i64> = present.iter().map(|&r| r as i64).collect();
        Err(Error::in_file(
            &profile.path,
            format!(
                "--ranks asks for rank(s) {} but the file has rank(s) {}",
                fmt::ranges(&missing),
                if have.is_empty() { "none".into() } else { fmt::ranges(&have) }
            ),
        ))
    }

    /// The selected ranks of `profile`, sorted.
    pub fn selected_ranks(&self, profile: &Profile) -> Vec<u32> {
        profile.rank_numbers().into_iter().filter(|&r| self.rank(r)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks() {
        assert_eq!(parse_ranks("0,2-3").unwrap().into_iter().collect::<Vec<_>>(), vec![0, 2, 3]);
        assert!(parse_ranks("0,x").is_err());
        assert!(parse_ranks("3-1").is_err());
        assert!(parse_ranks("").is_err());
    }

    #[test]
    fn names_match_from_start() {
        let f = Filter::new(&["solve".into()], &["solver_b".into()], None).unwrap();
        assert!(f.name("solve"));
        assert!(f.name("solver_a"));
        assert!(!f.name("solver_b"));
        assert!(!f.name("my_solve"));
        let e = Filter::new(&["(".into()], &[], None).unwrap_err().to_string();
        assert!(e.starts_with("bad regular expression '(' for --include: "), "{e}");
        assert!(!e.contains('\n'));
    }
}
