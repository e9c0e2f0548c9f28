//! Thin helpers over the `hdf5` crate: opening a file with a useful error,
//! decoding attributes of any common type, reading whole 1-D datasets.

use std::io::Read;
use std::path::Path;

use hdf5::types::{FixedAscii, FixedUnicode, TypeDescriptor, VarLenAscii, VarLenUnicode};
use hdf5::{Attribute, Dataset, Group, Location};

use crate::error::{self, Error, Result};
use crate::model::{AttrValue, Attrs};

const SIGNATURE: &[u8; 8] = b"\x89HDF\r\n\x1a\n";

/// Does the file carry the HDF5 signature at offset 0, 512, 1024, ...?
fn has_hdf5_signature(path: &Path, size: u64) -> std::io::Result<bool> {
    let mut file = std::fs::File::open(path)?;
    let mut offset = 0u64;
    let mut buf = [0u8; 8];
    while offset + 8 <= size {
        use std::io::Seek;
        file.seek(std::io::SeekFrom::Start(offset))?;
        file.read_exact(&mut buf)?;
        if &buf == SIGNATURE {
            return Ok(true);
        }
        offset = if offset == 0 { 512 } else { offset * 2 };
    }
    Ok(false)
}

/// Open `path` read-only, telling a missing file, a file that is not HDF5
/// and a damaged or truncated HDF5 file apart. Returns the file and its size.
pub fn open(path: &Path) -> Result<(hdf5::File, u64)> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::in_file(path, "no such file"),
        std::io::ErrorKind::PermissionDenied => Error::in_file(path, "permission denied"),
        _ => Error::in_file(path, format!("cannot access the file: {e}")),
    })?;
    if meta.is_dir() {
        return Err(Error::in_file(path, "is a directory, not an HDF5 file"));
    }
    let size = meta.len();
    if size == 0 {
        return Err(Error::in_file(path, "is empty (0 bytes), not an HDF5 file"));
    }
    let signed = has_hdf5_signature(path, size)
        .map_err(|e| Error::in_file(path, format!("cannot read the file: {e}")))?;
    if !signed {
        return Err(Error::in_file(
            path,
            "is not an HDF5 file (no HDF5 signature); sptool reads scope_profiler .h5 files",
        ));
    }
    let file = hdf5::File::open(path).map_err(|e| {
        let detail = error::h5(&e);
        let what = if detail.contains("truncated") {
            "is a truncated HDF5 file (was the run killed while writing?)"
        } else {
            "is a damaged HDF5 file that the HDF5 library cannot open"
        };
        Error::in_file(path, format!("{what}: {detail}"))
    })?;
    Ok((file, size))
}

/// Read one attribute, whatever its type.
pub fn read_attr(attr: &Attribute) -> hdf5::Result<AttrValue> {
    let desc = attr.dtype()?.to_descriptor()?;
    let scalar = attr.is_scalar();
    fn pick<T, A: Fn(T) -> AttrValue, B: Fn(Vec<T>) -> AttrValue>(
        mut v: Vec<T>,
        scalar: bool,
        one: A,
        many: B,
    ) -> AttrValue {
        if scalar && v.len() == 1 { one(v.remove(0)) } else { many(v) }
    }
    Ok(match desc {
        TypeDescriptor::Integer(_) => pick(attr.read_raw::<i64>()?, scalar, AttrValue::Int, AttrValue::IntArray),
        TypeDescriptor::Unsigned(_) => {
            pick(attr.read_raw::<u64>()?, scalar, AttrValue::UInt, AttrValue::UIntArray)
        }
        TypeDescriptor::Float(_) => {
            pick(attr.read_raw::<f64>()?, scalar, AttrValue::Float, AttrValue::FloatArray)
        }
        TypeDescriptor::Boolean => {
            pick(attr.read_raw::<bool>()?, scalar, AttrValue::Bool, AttrValue::BoolArray)
        }
        TypeDescriptor::VarLenUnicode => {
            let v = attr.read_raw::<VarLenUnicode>()?;
            let v = v.iter().map(|s| s.as_str().to_string()).collect();
            pick(v, scalar, AttrValue::Str, AttrValue::StrArray)
        }
        TypeDescriptor::VarLenAscii => {
            let v = attr.read_raw::<VarLenAscii>()?;
            let v = v.iter().map(|s| s.as_str().to_string()).collect();
            pick(v, scalar, AttrValue::Str, AttrValue::StrArray)
        }
        TypeDescriptor::FixedAscii(_) => {
            let v = attr.read_raw::<FixedAscii<4096>>()?;
            let v = v.iter().map(|s| s.as_str().to_string()).collect();
            pick(v, scalar, AttrValue::Str, AttrValue::StrArray)
        }
        TypeDescriptor::FixedUnicode(_) => {
            let v = attr.read_raw::<FixedUnicode<4096>>()?;
            let v = v.iter().map(|s| s.as_str().to_string()).collect();
            pick(v, scalar, AttrValue::Str, AttrValue::StrArray)
        }
        other => AttrValue::Other(other.to_string()),
    })
}

/// Every attribute of `loc`, in the order HDF5 lists them (by name).
/// An attribute that cannot be decoded is kept, described as `Other`.
pub fn read_attrs(loc: &Location) -> hdf5::Result<Attrs> {
    let mut out = Vec::new();
    for name in loc.attr_names()? {
        let value = match loc.attr(&name).and_then(|a| read_attr(&a)) {
            Ok(v) => v,
            Err(e) => AttrValue::Other(format!("unreadable: {}", error::h5(&e))),
        };
        out.push((name, value));
    }
    Ok(out)
}

/// The attribute `name` of `loc`, if present and readable.
pub fn attr(loc: &Location, name: &str) -> Option<AttrValue> {
    if !loc.attr_names().ok()?.iter().any(|n| n == name) {
        return None;
    }
    loc.attr(name).ok().and_then(|a| read_attr(&a).ok())
}

pub fn attr_i64(loc: &Location, name: &str) -> Option<i64> {
    attr(loc, name)?.as_i64()
}

pub fn attr_string(loc: &Location, name: &str) -> Option<String> {
    attr(loc, name).and_then(|v| v.as_str().map(str::to_string))
}

/// A list-of-strings attribute; a scalar string counts as a one-item list.
pub fn attr_strings(loc: &Location, name: &str) -> Option<Vec<String>> {
    match attr(loc, name)? {
        AttrValue::StrArray(v) => Some(v),
        AttrValue::Str(s) => Some(vec![s]),
        _ => None,
    }
}

/// Names of the subgroups of `group` (datasets and other links skipped).
pub fn subgroups(group: &Group) -> hdf5::Result<Vec<String>> {
    let mut out = Vec::new();
    for name in group.member_names()? {
        if group.group(&name).is_ok() {
            out.push(name);
        }
    }
    Ok(out)
}

/// Does `group` have a member (group or dataset) called `name`?
pub fn has(group: &Group, name: &str) -> bool {
    group.link_exists(name)
}

/// Open dataset `name` in `group`, with an error naming it.
pub fn dataset(group: &Group, name: &str) -> Result<Dataset> {
    if !has(group, name) {
        return Err(Error::new(format!("{}/{name} is missing", clean(&group.name()))));
    }
    group
        .dataset(name)
        .map_err(|e| Error::new(format!("cannot open {}/{name}: {}", clean(&group.name()), error::h5(&e))))
}

fn read_whole<T: hdf5::H5Type>(ds: &Dataset) -> Result<Vec<T>> {
    ds.read_raw::<T>()
        .map_err(|e| Error::new(format!("cannot read {}: {}", clean(&ds.name()), error::h5(&e))))
}

/// A whole integer dataset, converted to `i64` by HDF5.
pub fn read_i64(group: &Group, name: &str) -> Result<Vec<i64>> {
    read_whole(&dataset(group, name)?)
}

/// A whole floating-point dataset, converted to `f64` by HDF5.
pub fn read_f64(group: &Group, name: &str) -> Result<Vec<f64>> {
    read_whole(&dataset(group, name)?)
}

/// A whole dataset with its shape.
pub fn read_f64_shaped(group: &Group, name: &str) -> Result<(Vec<f64>, Vec<usize>)> {
    let ds = dataset(group, name)?;
    let shape = ds.shape();
    Ok((read_whole(&ds)?, shape))
}

/// A whole string dataset (variable-length UTF-8 or ASCII).
pub fn read_strings(group: &Group, name: &str) -> Result<Vec<String>> {
    let ds = dataset(group, name)?;
    let desc = ds
        .dtype()
        .and_then(|t| t.to_descriptor())
        .map_err(|e| Error::new(format!("cannot read {}: {}", clean(&ds.name()), error::h5(&e))))?;
    Ok(match desc {
        TypeDescriptor::VarLenAscii => {
            read_whole::<VarLenAscii>(&ds)?.iter().map(|s| s.as_str().to_string()).collect()
        }
        TypeDescriptor::FixedAscii(_) => {
            read_whole::<FixedAscii<4096>>(&ds)?.iter().map(|s| s.as_str().to_string()).collect()
        }
        TypeDescriptor::FixedUnicode(_) => {
            read_whole::<FixedUnicode<4096>>(&ds)?.iter().map(|s| s.as_str().to_string()).collect()
        }
        _ => read_whole::<VarLenUnicode>(&ds)?.iter().map(|s| s.as_str().to_string()).collect(),
    })
}

/// An HDF5 path without the leading `/`, as users see it in h5ls.
pub fn clean(name: &str) -> &str {
    name.trim_start_matches('/')
}
