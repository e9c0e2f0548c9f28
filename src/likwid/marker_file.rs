//! Parser for the marker file `likwid_markerClose` writes (spec section 1).
//!
//! Unlike LIKWID's own reader it accepts `n == 0` lines, `nan`/`-nan`/`inf`, long lines,
//! and a `,` decimal separator (a host that set `LC_NUMERIC`); it drops `cpu < 0` and
//! `count == 0` records (whose cpu field is uninitialised memory) and never trusts `T`.

use std::collections::BTreeMap;
use std::fmt;

/// One per-CPU record of a region: a result line with `cpu >= 0` and `count > 0`.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub cpu: i64,
    pub count: u64,
    /// Seconds, summed over calls.
    pub time: f64,
    /// Accumulated counter deltas, in event-set order.
    pub values: Vec<f64>,
}

/// A region line (`rid:tag-gid`) with its records, ordered by CPU id.
#[derive(Debug, Clone, PartialEq)]
pub struct Region {
    pub rid: i64,
    pub tag: String,
    pub gid: i64,
    pub records: Vec<Record>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MarkerFile {
    /// Header `T R G` as written (not trusted).
    pub threads: i64,
    pub regions_declared: i64,
    pub groups: i64,
    /// Region lines in file order.
    pub regions: Vec<Region>,
    /// Lines that could not be parsed (ignored).
    pub bad_lines: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn int(tok: &str) -> Option<i64> {
    tok.parse().ok()
}

/// `%e` numbers, `nan`, `-nan`, `inf`, and `1,5e-02` from a non-C locale.
fn float(tok: &str) -> Option<f64> {
    let t = tok.replace(',', ".");
    match t.to_ascii_lowercase().as_str() {
        "nan" | "-nan" | "+nan" => return Some(f64::NAN),
        _ => {}
    }
    t.parse().ok()
}

/// `rid:tag-gid`, split at the first `:` and the last `-`.
fn region_line(line: &str) -> Option<(i64, String, i64)> {
    let (rid, rest) = line.split_once(':')?;
    let rid = int(rid.trim())?;
    let (tag, gid) = rest.rsplit_once('-')?;
    Some((rid, tag.to_string(), int(gid.trim())?))
}

/// `rid gid cpu count time n v1 .. vn`.
fn result_line(line: &str) -> Option<(i64, i64, Record)> {
    let toks: Vec<&str> = line.split_whitespace().collect();
    if toks.len() < 6 {
        return None;
    }
    let (rid, gid, cpu) = (int(toks[0])?, int(toks[1])?, int(toks[2])?);
    let count: u64 = toks[3].parse().ok()?;
    let time = float(toks[4])?;
    let n: usize = toks[5].parse().ok()?;
    if toks.len() != 6 + n {
        return None;
    }
    let values = toks[6..].iter().map(|t| float(t)).collect::<Option<Vec<f64>>>()?;
    Some((rid, gid, Record { cpu, count, time, values }))
}

pub fn parse(text: &str) -> Result<MarkerFile, ParseError> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = lines.next().ok_or_else(|| ParseError("empty marker file".into()))?;
    let h: Vec<i64> = header.split_whitespace().map(int).collect::<Option<_>>().unwrap_or_default();
    if h.len() != 3 {
        return Err(ParseError(format!("bad marker file header {header:?}")));
    }
    let mut regions: Vec<Region> = Vec::new();
    let mut index: BTreeMap<i64, usize> = BTreeMap::new();
    let mut seen: BTreeMap<(i64, i64), ()> = BTreeMap::new();
    let mut bad_lines = 0;
    for line in lines {
        if line.contains(':') {
            match region_line(line) {
                Some((rid, tag, gid)) if !index.contains_key(&rid) => {
                    index.insert(rid, regions.len());
                    regions.push(Region { rid, tag, gid, records: Vec::new() });
                }
                _ => bad_lines += 1,
            }
            continue;
        }
        let Some((rid, gid, rec)) = result_line(line) else {
            bad_lines += 1;
            continue;
        };
        let Some(&i) = index.get(&rid) else {
            bad_lines += 1;
            continue;
        };
        if regions[i].gid != gid {
            bad_lines += 1;
            continue;
        }
        // Dropped on purpose: cpu -1 (CPU never saw the region), count 0 (registered
        // but never started; its cpu field is uninitialised memory).
        if rec.cpu < 0 || rec.count == 0 {
            continue;
        }
        if seen.insert((rid, rec.cpu), ()).is_some() {
            bad_lines += 1;
            continue;
        }
        regions[i].records.push(rec);
    }
    for r in &mut regions {
        r.records.sort_by_key(|rec| rec.cpu);
    }
    Ok(MarkerFile { threads: h[0], regions_declared: h[1], groups: h[2], regions, bad_lines })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Spec 1.5, example A (real liblikwid 5.2.2 under fake MSRs).
    const EXAMPLE_A: &str = "2 2 1
0:init-0
1:compute-dot-0
0 0 0 1 2.895813e-06 3 0.000000e+00 0.000000e+00 0.000000e+00 
0 0 1 1 1.021980e-06 3 0.000000e+00 0.000000e+00 0.000000e+00 
1 0 0 10 4.252191e-02 3 0.000000e+00 0.000000e+00 0.000000e+00 
1 0 1 10 4.286833e-02 3 0.000000e+00 0.000000e+00 0.000000e+00 
";

    // Spec 1.5, example B (realistic values).
    const EXAMPLE_B: &str = "2 2 1
0:init-0
1:compute-dot-0
0 0 0 1 1.234568e-02 3 2.400000e+07 3.100000e+07 0.000000e+00 
0 0 1 1 1.190000e-02 3 2.380000e+07 3.050000e+07 0.000000e+00 
1 0 0 10 5.432100e-01 3 1.200000e+09 1.320000e+09 8.000000e+08 
1 0 1 10 5.400070e-01 3 1.190000e+09 1.310000e+09 8.000000e+08 
";

    // Spec 1.5, example C (two groups, likwid_markerNextGroup).
    const EXAMPLE_C: &str = "1 3 2
0:loop-a-0
1:only-g0-0
2:loop-a-1
0 0 0 2 6.011337e-07 6 0.000000e+00 0.000000e+00 0.000000e+00 0.000000e+00 0.000000e+00 0.000000e+00 
1 0 0 1 8.015116e-08 6 0.000000e+00 0.000000e+00 0.000000e+00 0.000000e+00 0.000000e+00 0.000000e+00 
2 1 0 1 4.007558e-08 1 0.000000e+00 
";

    #[test]
    fn example_a() {
        let f = parse(EXAMPLE_A).unwrap();
        assert_eq!((f.threads, f.regions_declared, f.groups), (2, 2, 1));
        assert_eq!(f.regions.len(), 2);
        assert_eq!(f.regions[0].tag, "init");
        assert_eq!(f.regions[1].tag, "compute-dot");
        assert_eq!(f.regions[1].gid, 0);
        let r = &f.regions[1].records;
        assert_eq!(r.iter().map(|x| x.cpu).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(r[0].count, 10);
        assert_eq!(r[1].time, 4.286833e-02);
        assert_eq!(r[0].values, vec![0.0; 3]);
        assert_eq!(f.bad_lines, 0);
    }

    #[test]
    fn example_b_values() {
        let f = parse(EXAMPLE_B).unwrap();
        let init = &f.regions[0].records;
        assert_eq!(init[0].values, vec![2.4e7, 3.1e7, 0.0]);
        assert_eq!(init[1].time, 1.19e-2);
        let dot = &f.regions[1].records;
        assert_eq!(dot[1].values[2], 8.0e8);
        assert_eq!(dot[0].count + dot[1].count, 20);
    }

    #[test]
    fn example_c_groups_and_dashes() {
        let f = parse(EXAMPLE_C).unwrap();
        let tags: Vec<(&str, i64)> = f.regions.iter().map(|r| (r.tag.as_str(), r.gid)).collect();
        assert_eq!(tags, vec![("loop-a", 0), ("only-g0", 0), ("loop-a", 1)]);
        assert_eq!(f.regions[2].records[0].values.len(), 1);
        assert_eq!(f.regions[0].records[0].count, 2);
    }

    #[test]
    fn nan_inf_and_locale_commas() {
        let text = "1 1 1\n0:r-0\n0 0 3 4 1,5e-02 4 nan -nan inf -inf \n";
        let f = parse(text).unwrap();
        let rec = &f.regions[0].records[0];
        assert_eq!(rec.cpu, 3);
        assert_eq!(rec.time, 1.5e-2);
        assert!(rec.values[0].is_nan() && rec.values[1].is_nan());
        assert_eq!(rec.values[2], f64::INFINITY);
        assert_eq!(rec.values[3], f64::NEG_INFINITY);
    }

    #[test]
    fn zero_event_lines_are_accepted() {
        // LIKWID's reader rejects this line (issue #454); we keep it.
        let f = parse("1 1 1\n0:r-0\n0 0 2 3 1.0e-02 0 \n").unwrap();
        let rec = &f.regions[0].records[0];
        assert_eq!((rec.cpu, rec.count, rec.values.len()), (2, 3, 0));
    }

    #[test]
    fn cpu_minus_one_and_count_zero_are_dropped() {
        let text = "3 1 1\n0:serial-0\n0 0 0 5 1.0e-01 1 1.0e+00 \n0 0 -1 0 0.000000e+00 1 0.0 \n0 0 0 0 0.000000e+00 1 0.0 \n";
        let f = parse(text).unwrap();
        let recs = &f.regions[0].records;
        assert_eq!(recs.len(), 1);
        assert_eq!((recs[0].cpu, recs[0].count), (0, 5));
        // The count-0 line with the duplicated cpu 0 is not a "bad line": it is dropped first.
        assert_eq!(f.bad_lines, 0);
    }

    #[test]
    fn records_sorted_by_cpu_and_keyed() {
        let text = "2 1 1\n0:r-0\n0 0 5 1 1.0 0 \n0 0 2 1 2.0 0 \n0 0 5 1 3.0 0 \n";
        let f = parse(text).unwrap();
        let cpus: Vec<i64> = f.regions[0].records.iter().map(|r| r.cpu).collect();
        assert_eq!(cpus, vec![2, 5]);
        assert_eq!(f.regions[0].records[1].time, 1.0, "first (rid,cpu) record wins");
        assert_eq!(f.bad_lines, 1);
    }

    #[test]
    fn malformed_lines_are_skipped_not_fatal() {
        let text = "1 1 1\n0:r-0\n0 0 0 1 1.0 3 1.0 2.0 \n0 0 1 1 x 0 \n7 0 0 1 1.0 0 \n0 1 2 1 1.0 0 \n";
        let f = parse(text).unwrap();
        assert!(f.regions[0].records.is_empty());
        assert_eq!(f.bad_lines, 4);
    }

    #[test]
    fn bad_header_is_an_error() {
        assert!(parse("").is_err());
        assert!(parse("2 2\n").is_err());
        assert!(parse("a b c\n").is_err());
        // Header only: every region was skipped by LIKWID.
        assert!(parse("2 0 1\n").unwrap().regions.is_empty());
    }
}
