//! Values that the sources of regions report during the run besides calls: counters (bytes
//! allocated in a memory space, its high-water mark) and notes (a thread's name). Kept per
//! process, off the hot path (a lock per update), bounded in number, and written as the
//! rank's attributes (`counter:<name>`, `counter_max:<name>`, `<note name>`).

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

/// The rank's attributes of what was reported so far.
pub fn attributes() -> Vec<(String, AttrValue)> {
    let g = VALUES.lock();
    let Some(v) = g.as_ref() else { return Vec::new() };
    let mut out = Vec::new();
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
        let a = attributes();
        assert!(a.contains(&("counter:test:HostSpace".into(), AttrValue::Int(5))));
        assert!(a.contains(&("counter_max:test:HostSpace".into(), AttrValue::Int(30))));
        assert!(a.iter().any(|(k, v)| k == "test_note" && matches!(v, AttrValue::Str(s) if s.len() == MAX_TEXT)));
    }
}
