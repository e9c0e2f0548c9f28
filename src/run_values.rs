//! Values that the sources of regions report during the run besides calls: counters (bytes
//! allocated in a memory space, its high-water mark) and notes (a thread's name). Kept per
//! process, off the hot path (a lock per update), bounded in number, and written as the
//! rank's attributes (`counter:<name>`, `counter_max:<name>`, `<note name>`); and which
//! threads started and ended the asynchronous ranges (`async_range_regions`,
//! `async_range_threads`).

use crate::model::AttrValue;
use std::collections::BTreeMap;
use parking_lot::Mutex;

/// More counters or notes than any run reports; later ones are dropped (said once).
const MAX_ENTRIES: usize = 1024;
/// Longer names or values are cut.
const MAX_TEXT: usize = 256;

#[derive(Default)]
struct Values {
    /// name -> (last, largest)
    counters: BTreeMap<String, (i64, i64)>,
    notes: BTreeMap<String, String>,
    /// (region id, starting thread's Linux id, ending thread's) -> ranges
    ranges: BTreeMap<(u32, i64, i64), i64>,
}

static VALUES: Mutex<Option<Values>> = Mutex::new(None);

fn cut(s: &str) -> String {
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The counter `name` has the value `value` now.
pub fn set_counter(name: &str, value: i64) {
    let mut g = VALUES.lock();
    let v = g.get_or_insert_with(Values::default);
    if let Some(c) = v.counters.get_mut(name) {
        *c = (value, c.1.max(value));
    } else if v.counters.len() < MAX_ENTRIES {
        v.counters.insert(cut(name), (value, value));
    } else {
        crate::warn::once("run-values:counters", &format!("more than {MAX_ENTRIES} counters reported: '{}' and later ones are not kept", cut(name)));
    }
}

/// The note `name` says `value` (the last one said is kept).
pub fn set_note(name: &str, value: &str) {
    let mut g = VALUES.lock();
    let v = g.get_or_insert_with(Values::default);
    if v.notes.len() < MAX_ENTRIES || v.notes.contains_key(name) {
        v.notes.insert(cut(name), cut(value));
    } else {
        crate::warn::once("run-values:notes", &format!("more than {MAX_ENTRIES} notes reported: '{}' and later ones are not kept", cut(name)));
    }
}

/// A range of region `region` that thread `started_on` started and `ended_on` ended (Linux
/// thread ids) was recorded.
pub fn count_range(region: u32, started_on: i64, ended_on: i64) {
    let mut g = VALUES.lock();
    let v = g.get_or_insert_with(Values::default);
    let key = (region, started_on, ended_on);
    if let Some(n) = v.ranges.get_mut(&key) {
        *n += 1;
    } else if v.ranges.len() < MAX_ENTRIES {
        v.ranges.insert(key, 1);
    } else {
        crate::warn::once("run-values:ranges", &format!("more than {MAX_ENTRIES} pairs of starting and ending threads of asynchronous ranges: the later pairs' ranges are recorded, but not which threads they ran between"));
    }
}

/// The rank's attributes of what was reported so far; `names` are the regions by id.
pub fn attributes(names: &[String]) -> Vec<(String, AttrValue)> {
    let g = VALUES.lock();
    let Some(v) = g.as_ref() else { return Vec::new() };
    let mut out = Vec::new();
    if !v.ranges.is_empty() {
        // One row per region and pair of threads: its name, and (started on, ended on, ranges).
        let mut regions = Vec::with_capacity(v.ranges.len());
        let mut threads = Vec::with_capacity(3 * v.ranges.len());
        for (&(id, from, to), &n) in &v.ranges {
            regions.push(names.get(id as usize).cloned().unwrap_or_else(|| format!("#{id}")));
            threads.extend([from, to, n]);
        }
        out.push(("async_range_regions".into(), AttrValue::StrList(regions)));
        out.push(("async_range_threads".into(), AttrValue::IntList(threads)));
    }
    for (name, (last, max)) in &v.counters {
        out.push((format!("counter:{name}"), AttrValue::Int(*last)));
        out.push((format!("counter_max:{name}"), AttrValue::Int(*max)));
    }
    for (name, value) in &v.notes {
        out.push((name.clone(), AttrValue::Str(value.clone())));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_keep_the_last_and_the_largest() {
        set_counter("test:HostSpace", 10);
        set_counter("test:HostSpace", 30);
        set_counter("test:HostSpace", 5);
        set_note("test_note", &"x".repeat(1000));
        let a = attributes(&[]);
        assert!(a.contains(&("counter:test:HostSpace".into(), AttrValue::Int(5))));
        assert!(a.contains(&("counter_max:test:HostSpace".into(), AttrValue::Int(30))));
        assert!(a.iter().any(|(k, v)| k == "test_note" && matches!(v, AttrValue::Str(s) if s.len() == MAX_TEXT)));
    }

    #[test]
    fn ranges_are_counted_per_region_and_pair_of_threads() {
        count_range(1, 100, 200);
        count_range(1, 100, 200);
        count_range(0, 100, 100);
        let a = attributes(&["first".into(), "second".into()]);
        assert!(a.contains(&("async_range_regions".into(), AttrValue::StrList(vec!["first".into(), "second".into()]))), "{a:?}");
        assert!(a.contains(&("async_range_threads".into(), AttrValue::IntList(vec![100, 100, 1, 100, 200, 2]))), "{a:?}");
    }
}
