//! Evaluator for LIKWID METRICS formulas (spec 4.4), used when the numbers come from
//! the marker file instead of LIKWID's own calculator.
//!
//! Same grammar as LIKWID's infix calculator (`+ - * / % ^`, parentheses, `1.E-06`
//! numbers, its function names), IEEE division (`x/0` = inf, `0/0` = NaN). One deliberate
//! difference: an unknown identifier is an error for that metric, where LIKWID silently
//! drops it.

use std::collections::HashMap;
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum FormulaError {
    Unknown(String),
    Syntax(String),
}

impl fmt::Display for FormulaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormulaError::Unknown(n) => write!(f, "unknown identifier {n}"),
            FormulaError::Syntax(s) => write!(f, "syntax error: {s}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Ident(String),
    Op(char),
    LParen,
    RParen,
    Comma,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}
fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Identifier: `[A-Za-z_][A-Za-z0-9_]*(:[A-Za-z0-9_]+(=[0-9A-Za-z]+)?)*` (counter options).
fn lex(src: &str) -> Result<Vec<Tok>, FormulaError> {
    let b = src.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            let s = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
                let mut j = i + 1;
                if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
                    j += 1;
                }
                if j < b.len() && b[j].is_ascii_digit() {
                    while j < b.len() && b[j].is_ascii_digit() {
                        j += 1;
                    }
                    i = j;
                }
            }
            let text = &src[s..i];
            // "1." and "1.E-06" are valid LIKWID numbers; Rust parses "1." and "1.E-06" too.
            let v: f64 = text.parse().map_err(|_| FormulaError::Syntax(format!("bad number {text}")))?;
            out.push(Tok::Num(v));
        } else if is_ident_start(c) {
            let s = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            // Counter options: `:OPT` and `:OPT=VAL`.
            while i + 1 < b.len() && b[i] == b':' && is_ident(b[i + 1]) {
                i += 1;
                while i < b.len() && is_ident(b[i]) {
                    i += 1;
                }
                if i + 1 < b.len() && b[i] == b'=' && b[i + 1].is_ascii_alphanumeric() {
                    i += 1;
                    while i < b.len() && b[i].is_ascii_alphanumeric() {
                        i += 1;
                    }
                }
            }
            out.push(Tok::Ident(src[s..i].to_string()));
        } else {
            out.push(match c {
                b'+' | b'-' | b'*' | b'/' | b'%' | b'^' => Tok::Op(c as char),
                b'(' => Tok::LParen,
                b')' => Tok::RParen,
                b',' => Tok::Comma,
                _ => return Err(FormulaError::Syntax(format!("unexpected {:?}", c as char))),
            });
            i += 1;
        }
    }
    Ok(out)
}

const FUNCTIONS: &[&str] = &[
    "abs", "floor", "ceil", "sin", "cos", "tan", "asin", "acos", "atan", "sqrt", "cbrt", "log", "exp", "min", "max", "sum", "avg", "mean",
    "median", "var",
];

fn apply(name: &str, a: &[f64]) -> Result<f64, FormulaError> {
    let one = |f: fn(f64) -> f64| if a.len() == 1 { Ok(f(a[0])) } else { Err(FormulaError::Syntax(format!("{name} takes 1 argument"))) };
    if a.is_empty() {
        return Err(FormulaError::Syntax(format!("{name}() without arguments")));
    }
    let mean = a.iter().sum::<f64>() / a.len() as f64;
    match name {
        "abs" => one(f64::abs),
        "floor" => one(f64::floor),
        "ceil" => one(f64::ceil),
        "sin" => one(f64::sin),
        "cos" => one(f64::cos),
        "tan" => one(f64::tan),
        "asin" => one(f64::asin),
        "acos" => one(f64::acos),
        "atan" => one(f64::atan),
        "sqrt" => one(f64::sqrt),
        "cbrt" => one(f64::cbrt),
        "log" => one(f64::ln),
        "exp" => one(f64::exp),
        "min" => Ok(a.iter().copied().fold(f64::INFINITY, f64::min)),
        "max" => Ok(a.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
        "sum" => Ok(a.iter().sum()),
        "avg" | "mean" => Ok(mean),
        "median" => {
            let mut s = a.to_vec();
            s.sort_by(f64::total_cmp);
            let m = s.len() / 2;
            Ok(if s.len() % 2 == 1 { s[m] } else { (s[m - 1] + s[m]) / 2.0 })
        }
        "var" => Ok(a.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / a.len() as f64),
        _ => Err(FormulaError::Unknown(name.to_string())),
    }
}

struct Parser<'a> {
    toks: Vec<Tok>,
    pos: usize,
    vars: &'a dyn Fn(&str) -> Option<f64>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }
    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }
    // expr := term (('+'|'-') term)*
    fn expr(&mut self) -> Result<f64, FormulaError> {
        let mut v = self.term()?;
        while let Some(Tok::Op(op @ ('+' | '-'))) = self.peek().cloned() {
            self.pos += 1;
            let r = self.term()?;
            v = if op == '+' { v + r } else { v - r };
        }
        Ok(v)
    }
    // term := unary (('*'|'/'|'%') unary)*
    fn term(&mut self) -> Result<f64, FormulaError> {
        let mut v = self.unary()?;
        while let Some(Tok::Op(op @ ('*' | '/' | '%'))) = self.peek().cloned() {
            self.pos += 1;
            let r = self.unary()?;
            v = match op {
                '*' => v * r,
                '/' => v / r,
                _ => v % r,
            };
        }
        Ok(v)
    }
    // unary := ('-'|'+') unary | power
    fn unary(&mut self) -> Result<f64, FormulaError> {
        match self.peek() {
            Some(Tok::Op('-')) => {
                self.pos += 1;
                Ok(-self.unary()?)
            }
            Some(Tok::Op('+')) => {
                self.pos += 1;
                self.unary()
            }
            _ => self.power(),
        }
    }
    // power := atom ('^' unary)?   (right associative)
    fn power(&mut self) -> Result<f64, FormulaError> {
        let base = self.atom()?;
        if let Some(Tok::Op('^')) = self.peek() {
            self.pos += 1;
            let e = self.unary()?;
            return Ok(base.powf(e));
        }
        Ok(base)
    }
    fn atom(&mut self) -> Result<f64, FormulaError> {
        match self.next() {
            Some(Tok::Num(v)) => Ok(v),
            Some(Tok::LParen) => {
                let v = self.expr()?;
                match self.next() {
                    Some(Tok::RParen) => Ok(v),
                    _ => Err(FormulaError::Syntax("missing )".into())),
                }
            }
            Some(Tok::Ident(name)) => {
                if self.peek() == Some(&Tok::LParen) && FUNCTIONS.contains(&name.as_str()) {
                    self.pos += 1;
                    let mut args = vec![self.expr()?];
                    loop {
                        match self.next() {
                            Some(Tok::Comma) => args.push(self.expr()?),
                            Some(Tok::RParen) => break,
                            _ => return Err(FormulaError::Syntax(format!("bad arguments to {name}"))),
                        }
                    }
                    return apply(&name, &args);
                }
                (self.vars)(&name).ok_or(FormulaError::Unknown(name))
            }
            other => Err(FormulaError::Syntax(format!("unexpected {other:?}"))),
        }
    }
}

/// Evaluate `formula` with `vars` (a lookup so callers need not build a map).
pub fn eval(formula: &str, vars: &dyn Fn(&str) -> Option<f64>) -> Result<f64, FormulaError> {
    let toks = lex(formula)?;
    let mut p = Parser { toks, pos: 0, vars };
    let v = p.expr()?;
    if p.pos != p.toks.len() {
        return Err(FormulaError::Syntax(format!("trailing input in {formula:?}")));
    }
    Ok(v)
}

/// Evaluate with a map of variables.
pub fn eval_map(formula: &str, vars: &HashMap<String, f64>) -> Result<f64, FormulaError> {
    eval(formula, &|n| vars.get(n).copied())
}

/// The variable names a formula uses (functions excluded); errors on a syntax error.
pub fn identifiers(formula: &str) -> Result<Vec<String>, FormulaError> {
    let toks = lex(formula)?;
    let mut out = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        if let Tok::Ident(n) = t {
            let is_call = toks.get(i + 1) == Some(&Tok::LParen) && FUNCTIONS.contains(&n.as_str());
            if !is_call && !out.contains(n) {
                out.push(n.clone());
            }
        }
    }
    Ok(out)
}

/// LIKWID replaces a counter value that prints as `nan`/`inf` by 0 before evaluating
/// (`-nan` crashes LIKWID; we treat it the same as `nan`).
pub fn likwid_input(v: f64) -> f64 {
    if v.is_finite() { v } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(f: &str, vars: &[(&str, f64)]) -> Result<f64, FormulaError> {
        let m: HashMap<String, f64> = vars.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        eval_map(f, &m)
    }

    #[test]
    fn precedence_and_numbers() {
        assert_eq!(ev("1+2*3", &[]).unwrap(), 7.0);
        assert_eq!(ev("(1+2)*3", &[]).unwrap(), 9.0);
        assert_eq!(ev("2^3^2", &[]).unwrap(), 512.0);
        assert_eq!(ev("-2^2", &[]).unwrap(), -4.0);
        assert_eq!(ev("7%4", &[]).unwrap(), 3.0);
        assert_eq!(ev("1.E-06*2", &[]).unwrap(), 2e-6);
        assert_eq!(ev("1.0E-06*(PMC0*2.0+PMC1)", &[("PMC0", 1e6), ("PMC1", 1e6)]).unwrap(), 3.0);
        assert_eq!(ev("max(1,5,3)+min(4,2)", &[]).unwrap(), 7.0);
        assert_eq!(ev("100*(PMC3:EDGEDETECT)/CBOX0C1:STATE=0x1", &[("PMC3:EDGEDETECT", 2.0), ("CBOX0C1:STATE=0x1", 4.0)]).unwrap(), 50.0);
    }

    #[test]
    fn division_by_zero_is_ieee() {
        assert_eq!(ev("PMC1/PMC0", &[("PMC0", 0.0), ("PMC1", 5.0)]).unwrap(), f64::INFINITY);
        assert!(ev("PMC1/PMC0", &[("PMC0", 0.0), ("PMC1", 0.0)]).unwrap().is_nan());
    }

    #[test]
    fn unknown_identifier_is_an_error() {
        assert_eq!(ev("PMC0+PMC7", &[("PMC0", 1.0)]), Err(FormulaError::Unknown("PMC7".into())));
        assert!(matches!(ev("PMC0+", &[("PMC0", 1.0)]), Err(FormulaError::Syntax(_))));
        assert!(matches!(ev("(PMC0", &[("PMC0", 1.0)]), Err(FormulaError::Syntax(_))));
        assert!(matches!(ev("PMC0 $", &[("PMC0", 1.0)]), Err(FormulaError::Syntax(_))));
    }

    #[test]
    fn identifiers_listed() {
        assert_eq!(identifiers("1.E-06*(FIXC1/FIXC2)/inverseClock").unwrap(), vec!["FIXC1", "FIXC2", "inverseClock"]);
        assert_eq!(identifiers("sqrt(PMC0)").unwrap(), vec!["PMC0"]);
    }

    #[test]
    fn nan_and_inf_inputs_become_zero() {
        assert_eq!(likwid_input(f64::NAN), 0.0);
        assert_eq!(likwid_input(-f64::NAN), 0.0);
        assert_eq!(likwid_input(f64::INFINITY), 0.0);
        assert_eq!(likwid_input(3.5), 3.5);
    }
}
