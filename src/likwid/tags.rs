//! Region names → LIKWID marker tags, and the table the hot path reads them from.
//!
//! Why a mapping: LIKWID tags must be short (its reader cuts `rid:tag-gid` at 99 bytes,
//! so ≤ 90 characters), must not contain a newline, and a space (or a comma, or Lua
//! pattern characters) breaks likwid-mpirun's merge. Region names are any UTF-8 of 1 to
//! 1024 bytes. The mapping is a pure function of the name, so every rank and thread
//! derives the same tag:
//!
//! * a name of 1..=72 characters from `[A-Za-z0-9_]` that does not contain `__` is
//!   its own tag (what users see in likwid-perfctr's tables);
//! * any other name becomes `<prefix>__<hash>`: the first 60 characters with every
//!   character outside `[A-Za-z0-9_]` replaced by `_`, then `__` and 16 hex digits of the
//!   64-bit FNV-1a hash of the full name. Plain tags never contain `__`, mangled ones
//!   always do, so the two kinds cannot collide.
//! * a collision between two mangled tags (same prefix and hash) is resolved by
//!   appending `_<id>` to the later one (at most 89 characters in total).
//!
//! Our file's `tag` attribute always holds the real name; results come back keyed by
//! tag and are mapped back with [`TagTable::name_of_tag`].

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicU32, Ordering};
use parking_lot::Mutex;
use std::sync::OnceLock;

const PLAIN_MAX: usize = 72;
const PREFIX_MAX: usize = 60;
/// The longest tag we ever produce (LIKWID needs ≤ 90).
pub const TAG_MAX: usize = 90;

fn safe_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The LIKWID tag of a region name (before collision handling).
pub fn tag_for(name: &str) -> String {
    if !name.is_empty() && name.len() <= PLAIN_MAX && name.chars().all(safe_char) && !name.contains("__") {
        return name.to_string();
    }
    let prefix: String = name.chars().take(PREFIX_MAX).map(|c| if safe_char(c) { c } else { '_' }).collect();
    format!("{prefix}__{:016x}", fnv1a64(name.as_bytes()))
}

struct Entry {
    name: String,
    tag: CString,
}

const BUCKETS: usize = 27;
const FIRST: usize = 32;

/// Append-only id → (name, tag) table: written under the core's registry lock, read
/// lock-free on the hot path (one atomic load per level).
pub struct TagTable {
    buckets: [OnceLock<Box<[OnceLock<Entry>]>>; BUCKETS],
    len: AtomicU32,
    by_tag: Mutex<HashMap<String, u32>>,
}

fn locate(id: u32) -> (usize, usize) {
    // bucket b holds ids [FIRST*(2^b - 1), FIRST*(2^(b+1) - 1))
    let x = id as usize / FIRST + 1;
    let b = (usize::BITS - 1 - x.leading_zeros()) as usize;
    let start = FIRST * ((1usize << b) - 1);
    (b, id as usize - start)
}

impl Default for TagTable {
    fn default() -> Self {
        TagTable { buckets: std::array::from_fn(|_| OnceLock::new()), len: AtomicU32::new(0), by_tag: Mutex::new(HashMap::new()) }
    }
}

impl TagTable {
    /// Record region `id` (dense, in creation order). Returns its tag.
    /// Ids out of order or repeated are ignored (returns `None`).
    pub fn push(&self, id: u32, name: &str) -> Option<&CStr> {
        let mut by_tag = self.by_tag.lock();
        if id != self.len.load(Ordering::Acquire) {
            return None;
        }
        let (b, i) = locate(id);
        if b >= BUCKETS {
            return None;
        }
        let mut tag = tag_for(name);
        if by_tag.contains_key(&tag) {
            tag = format!("{tag}_{id}");
        }
        // Tags are ASCII by construction: no interior NUL possible.
        let ctag = CString::new(tag.clone()).ok()?;
        let bucket = self.buckets[b].get_or_init(|| (0..FIRST << b).map(|_| OnceLock::new()).collect());
        bucket[i].set(Entry { name: name.to_string(), tag: ctag }).ok()?;
        by_tag.insert(tag, id);
        self.len.store(id + 1, Ordering::Release);
        bucket[i].get().map(|e| e.tag.as_c_str())
    }

    fn entry(&self, id: u32) -> Option<&Entry> {
        let (b, i) = locate(id);
        self.buckets.get(b)?.get()?.get(i)?.get()
    }

    /// The tag of region `id` (hot path).
    #[inline]
    pub fn tag(&self, id: u32) -> Option<&CStr> {
        self.entry(id).map(|e| e.tag.as_c_str())
    }

    pub fn name(&self, id: u32) -> Option<&str> {
        self.entry(id).map(|e| e.name.as_str())
    }

    /// Number of regions recorded so far (ids `0..len`).
    #[inline]
    pub fn len(&self) -> u32 {
        self.len.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Real region name of a LIKWID tag; `None` for tags we did not create.
    pub fn name_of_tag(&self, tag: &str) -> Option<String> {
        let id = *self.by_tag.lock().get(tag)?;
        self.name(id).map(str::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok_for_likwid(t: &str) -> bool {
        !t.is_empty() && t.len() <= TAG_MAX && t.chars().all(safe_char)
    }

    #[test]
    fn simple_names_are_their_own_tag() {
        assert_eq!(tag_for("solve"), "solve");
        assert_eq!(tag_for("compute_dot2"), "compute_dot2");
    }

    #[test]
    fn unsafe_names_are_mangled_but_readable() {
        for name in ["compute dot", "a/b", "über", "x-y", "a,b", "new\nline", "__init__", "a__b", "日本語"] {
            let t = tag_for(name);
            assert!(ok_for_likwid(&t), "{name:?} -> {t:?}");
            assert!(t.contains("__"), "{t}");
            assert_ne!(t, name);
        }
        assert!(tag_for("compute dot").starts_with("compute_dot__"));
        // Same prefix, different names: different tags.
        assert_ne!(tag_for("a b"), tag_for("a/b"));
    }

    #[test]
    fn long_names_fit_likwid_limits() {
        let long = "x".repeat(1024);
        let t = tag_for(&long);
        assert!(ok_for_likwid(&t) && t.len() == PREFIX_MAX + 2 + 16);
        let plain72 = "y".repeat(72);
        assert_eq!(tag_for(&plain72), plain72);
        let mangled73 = "y".repeat(73);
        assert_ne!(tag_for(&mangled73), mangled73);
        let multibyte = "é".repeat(512);
        assert!(ok_for_likwid(&tag_for(&multibyte)));
    }

    #[test]
    fn mapping_is_deterministic() {
        assert_eq!(tag_for("rank loop/inner ü"), tag_for("rank loop/inner ü"));
    }

    #[test]
    fn table_maps_back_and_resolves_collisions() {
        let t = TagTable::default();
        for i in 0..200u32 {
            assert!(t.push(i, &format!("region {i}")).is_some());
        }
        assert_eq!(t.len(), 200);
        // Out-of-order id refused.
        assert!(t.push(500, "late").is_none());
        let tag150 = t.tag(150).unwrap().to_str().unwrap().to_string();
        assert_eq!(t.name_of_tag(&tag150).as_deref(), Some("region 150"));
        assert_eq!(t.name(0), Some("region 0"));
        assert!(t.tag(200).is_none());
        let t2 = TagTable::default();
        t2.push(0, "solve").unwrap();
        assert_eq!(tag_for("solve"), "solve");
        // The core never registers a name twice; doing it here stands in for a hash collision.
        t2.push(1, "solve").unwrap();
        assert_eq!(t2.tag(1).unwrap().to_str().unwrap(), "solve_1");
        assert_eq!(t2.name_of_tag("solve_1").as_deref(), Some("solve"));
        assert!(t2.name_of_tag("unknown").is_none());
    }

    #[test]
    fn locate_covers_buckets() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(31), (0, 31));
        assert_eq!(locate(32), (1, 0));
        assert_eq!(locate(95), (1, 63));
        assert_eq!(locate(96), (2, 0));
    }
}
