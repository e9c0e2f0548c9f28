//! Warnings to stderr, each at most once, prefixed `[scope_profiler]`.

use std::collections::HashSet;
use parking_lot::Mutex;

static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Print `message` once per distinct `key` (for example "unmatched-stop:solve").
pub fn once(key: &str, message: &str) {
    let mut seen = SEEN.lock();
    if seen.get_or_insert_with(HashSet::new).insert(key.to_string()) {
        always(message);
    }
}

/// Count `key` as said: a later `once` with it prints nothing.
pub fn mark_seen(key: &str) {
    let mut seen = SEEN.lock();
    seen.get_or_insert_with(HashSet::new).insert(key.to_string());
}

/// Print `message` now (for messages that are by nature one-off, like where the file went).
/// One write of the whole line, so that lines of ranks sharing a terminal or a launcher's
/// output stream do not break up.
pub fn always(message: &str) {
    use std::io::Write;
    let line = format!("[scope_profiler] {message}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}
