//! Region names and their dense ids, shared by all threads.
//!
//! Registration takes a lock; it happens once per name (per thread, for the name-based calls,
//! which keep a thread-local cache in front of this). The hot path only reads `count()`.

use crate::model::SourceLocation;
use crate::status::{Error, Result, Status};
use std::collections::HashMap;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// Longest accepted region name, in bytes of UTF-8.
pub const MAX_NAME_LEN: usize = 1024;
/// Most distinct regions per process.
pub const MAX_REGIONS: u32 = 1 << 20;

/// Check a raw name: non-empty, at most `MAX_NAME_LEN` bytes, UTF-8 without NUL bytes.
pub fn validate_name(bytes: &[u8]) -> Result<&str> {
    if bytes.is_empty() {
        return Err(Status::EmptyName.into());
    }
    if bytes.len() > MAX_NAME_LEN {
        return Err(Error::new(
            Status::NameTooLong,
            format!("region name of {} bytes is longer than the limit of {MAX_NAME_LEN}", bytes.len()),
        ));
    }
    let name = std::str::from_utf8(bytes).map_err(|e| {
        Error::new(Status::InvalidUtf8, format!("region name is not valid UTF-8 (invalid byte at offset {})", e.valid_up_to()))
    })?;
    if name.contains('\0') {
        return Err(Error::new(Status::InvalidUtf8, "region name contains a NUL byte"));
    }
    Ok(name)
}

/// Longest accepted source file name, in bytes.
pub const MAX_FILE_LEN: usize = 4096;

#[derive(Default)]
struct Names {
    ids: HashMap<Box<str>, u32>,
    names: Vec<Box<str>>,
    /// Indexed by id, like `names`.
    locations: Vec<Option<SourceLocation>>,
    /// Regions named at finalize (`register_provisional`), by id: their provisional name is
    /// in `names` (not in `ids`) until `set_final_names` gives the real one.
    provisional: Vec<u32>,
}

/// All region names of the process, indexed by id.
pub struct Registry {
    names: Mutex<Option<Names>>,
    count: AtomicU32,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry::new()
    }
}

impl Registry {
    pub const fn new() -> Registry {
        Registry { names: Mutex::new(None), count: AtomicU32::new(0) }
    }

    /// Number of registered regions; every id below it is valid.
    #[inline(always)]
    pub fn count(&self) -> u32 {
        self.count.load(Ordering::Acquire)
    }

    /// The id of `bytes`, registering it if new. `on_new(id, name)` runs under the lock for a
    /// new name, so observers (LIKWID) see ids in creation order.
    pub fn register(&self, bytes: &[u8], on_new: impl FnOnce(u32, &str)) -> Result<u32> {
        self.register_at(bytes, None, on_new)
    }

    /// `register` that also records where the region is defined. The first location given
    /// for a name is kept; a different one later warns once and changes nothing.
    pub fn register_at(&self, bytes: &[u8], location: Option<SourceLocation>, on_new: impl FnOnce(u32, &str)) -> Result<u32> {
        let name = validate_name(bytes)?;
        let mut guard = self.names.lock();
        let names = guard.get_or_insert_with(Names::default);
        if let Some(&id) = names.ids.get(name) {
            if let Some(new) = location {
                match &mut names.locations[id as usize] {
                    slot @ None => *slot = Some(new),
                    Some(first) if *first != new => crate::warn::once(
                        &format!("location:{name}"),
                        &format!("region '{name}' is registered at {new} and at {first}: keeping the first location, {first}"),
                    ),
                    Some(_) => {}
                }
            }
            return Ok(id);
        }
        let id = names.names.len() as u32;
        if id >= MAX_REGIONS {
            return Err(Error::new(Status::TooManyRegions, format!("more than {MAX_REGIONS} distinct region names")));
        }
        names.ids.insert(name.into(), id);
        names.names.push(name.into());
        names.locations.push(location);
        on_new(id, name);
        self.count.store(id + 1, Ordering::Release);
        Ok(id)
    }

    /// A new region whose real name is known only at finalize (an OpenMP construct or an
    /// instrumented function, keyed by an address: `late`). `provisional` names it until then
    /// (the live summary, the flight recorder's spill, counter sources); it is not a name other
    /// calls can look up. `on_new` runs under the lock as for `register`.
    pub fn register_provisional(&self, provisional: &str, on_new: impl FnOnce(u32, &str)) -> Result<u32> {
        let name = validate_name(provisional.as_bytes())?;
        let mut guard = self.names.lock();
        let names = guard.get_or_insert_with(Names::default);
        let id = names.names.len() as u32;
        if id >= MAX_REGIONS {
            return Err(Error::new(Status::TooManyRegions, format!("more than {MAX_REGIONS} distinct region names")));
        }
        names.names.push(name.into());
        names.locations.push(None);
        names.provisional.push(id);
        on_new(id, name);
        self.count.store(id + 1, Ordering::Release);
        Ok(id)
    }

    /// The real names of regions registered with `register_provisional` (at finalize), with
    /// where they are defined. Two ids may get the same name: they are then one region
    /// (`name_groups`). Ids that are not provisional are left alone.
    pub fn set_final_names(&self, named: Vec<(u32, String, Option<SourceLocation>)>) {
        let mut guard = self.names.lock();
        let Some(names) = guard.as_mut() else { return };
        for (id, name, location) in named {
            let i = id as usize;
            if i < names.names.len() && names.provisional.binary_search(&id).is_ok() {
                names.names[i] = name.into();
                names.locations[i] = location;
            }
        }
    }

    /// The first location of each name, in id order (regions named at finalize included).
    pub fn locations_by_name(&self) -> HashMap<String, SourceLocation> {
        let guard = self.names.lock();
        let mut out = HashMap::new();
        if let Some(names) = guard.as_ref() {
            for (name, at) in names.names.iter().zip(&names.locations) {
                if let Some(at) = at {
                    out.entry(name.to_string()).or_insert_with(|| at.clone());
                }
            }
        }
        out
    }

    /// The id of an already registered name.
    pub fn lookup(&self, name: &str) -> Option<u32> {
        let guard = self.names.lock();
        guard.as_ref().and_then(|n| n.ids.get(name).copied())
    }

    /// All names, indexed by id.
    pub fn names(&self) -> Vec<String> {
        let guard = self.names.lock();
        guard.as_ref().map(|n| n.names.iter().map(|s| s.to_string()).collect()).unwrap_or_default()
    }

    /// Where the region `name` is defined, if it was registered with a location.
    pub fn location_of(&self, name: &str) -> Option<SourceLocation> {
        let guard = self.names.lock();
        let names = guard.as_ref()?;
        names.ids.get(name).and_then(|&id| names.locations[id as usize].clone())
    }

    pub fn name(&self, id: u32) -> Option<String> {
        let guard = self.names.lock();
        guard.as_ref().and_then(|n| n.names.get(id as usize)).map(|s| s.to_string())
    }
}

/// Ids grouped by name, in order of each name's first id: regions that share a name are one
/// region (the ids of an OpenMP construct inlined in two places, of a function in two modules,
/// or a function named like a region of the program). Each group: (name, its ids in order).
pub fn name_groups(names: &[String]) -> Vec<(&str, Vec<u32>)> {
    let mut first: HashMap<&str, usize> = HashMap::with_capacity(names.len());
    let mut groups: Vec<(&str, Vec<u32>)> = Vec::with_capacity(names.len());
    for (id, name) in names.iter().enumerate() {
        match first.get(name.as_str()) {
            Some(&g) => groups[g].1.push(id as u32),
            None => {
                first.insert(name, groups.len());
                groups.push((name, vec![id as u32]));
            }
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        assert_eq!(validate_name(b"solve").unwrap(), "solve");
        assert_eq!(validate_name("a/b c é".as_bytes()).unwrap(), "a/b c é");
        assert_eq!(validate_name(b"").unwrap_err().status, Status::EmptyName);
        assert_eq!(validate_name(&[b'x'; MAX_NAME_LEN]).unwrap().len(), MAX_NAME_LEN);
        assert_eq!(validate_name(&[b'x'; MAX_NAME_LEN + 1]).unwrap_err().status, Status::NameTooLong);
        assert_eq!(validate_name(&[0xff, 0xfe]).unwrap_err().status, Status::InvalidUtf8);
        assert_eq!(validate_name(b"a\0b").unwrap_err().status, Status::InvalidUtf8);
    }

    #[test]
    fn ids_are_dense_and_stable() {
        let r = Registry::new();
        let mut created = Vec::new();
        assert_eq!(r.register(b"a", |id, n| created.push((id, n.to_string()))).unwrap(), 0);
        assert_eq!(r.register(b"b", |id, n| created.push((id, n.to_string()))).unwrap(), 1);
        assert_eq!(r.register(b"a", |id, n| created.push((id, n.to_string()))).unwrap(), 0);
        assert_eq!(r.count(), 2);
        assert_eq!(created, vec![(0, "a".to_string()), (1, "b".to_string())]);
        assert_eq!(r.names(), vec!["a", "b"]);
        assert_eq!((r.lookup("b"), r.lookup("zz")), (Some(1), None));
        assert!(r.register(b"", |_, _| {}).is_err());
        assert_eq!(r.count(), 2);
    }

    #[test]
    fn provisional_names_are_replaced_at_finalize() {
        let r = Registry::new();
        assert_eq!(r.register(b"solve", |_, _| {}).unwrap(), 0);
        let mut created = Vec::new();
        assert_eq!(r.register_provisional("omp parallel @ a.out+0x10", |id, n| created.push((id, n.to_string()))).unwrap(), 1);
        assert_eq!(r.register_provisional("omp parallel @ a.out+0x20", |_, _| {}).unwrap(), 2);
        assert_eq!(created, vec![(1, "omp parallel @ a.out+0x10".to_string())]);
        // Not a name to look up, and a program's region of the same text is another region.
        assert_eq!(r.lookup("omp parallel @ a.out+0x10"), None);
        assert_eq!(r.register(b"omp parallel @ a.out+0x10", |_, _| {}).unwrap(), 3);
        assert!(r.register_provisional("", |_, _| {}).is_err());
        let at = |line| Some(SourceLocation { file: "/src/a.c".into(), line });
        // Only provisional ids are renamed; two of them may take the same name.
        r.set_final_names(vec![(1, "omp parallel @ a.c:5".into(), at(5)), (2, "omp parallel @ a.c:5".into(), at(5)), (0, "x".into(), None)]);
        let names = r.names();
        assert_eq!(names, vec!["solve", "omp parallel @ a.c:5", "omp parallel @ a.c:5", "omp parallel @ a.out+0x10"]);
        assert_eq!(r.locations_by_name().get("omp parallel @ a.c:5"), at(5).as_ref());
        let groups = name_groups(&names);
        assert_eq!(groups, vec![("solve", vec![0]), ("omp parallel @ a.c:5", vec![1, 2]), ("omp parallel @ a.out+0x10", vec![3])]);
    }

    #[test]
    fn first_location_is_kept() {
        let r = Registry::new();
        let at = |file: &str, line| Some(SourceLocation { file: file.into(), line });
        assert_eq!(r.register(b"plain", |_, _| {}).unwrap(), 0);
        assert_eq!(r.location_of("plain"), None);
        // A name first registered without a location takes the first one given later.
        assert_eq!(r.register_at(b"plain", at("a.c", 3), |_, _| {}).unwrap(), 0);
        assert_eq!(r.register_at(b"solve", at("b.c", 10), |_, _| {}).unwrap(), 1);
        assert_eq!(r.register_at(b"solve", at("c.c", 20), |_, _| {}).unwrap(), 1);
        assert_eq!(r.register(b"solve", |_, _| {}).unwrap(), 1);
        assert_eq!(r.location_of("plain"), at("a.c", 3));
        assert_eq!(r.location_of("solve"), at("b.c", 10));
        assert_eq!(r.location_of("none"), None);
        assert_eq!(at("b.c", 10).unwrap().to_string(), "b.c:10");
    }
}
