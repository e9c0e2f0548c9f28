//! The rank table of the schema-3 files scope_profiler writes (`scope_profiler_ranks`): one
//! row per rank with the attributes the per-rank layout keeps on each `rank<N>` group (host
//! name, process id, CPUs, threads, clock, MPI rank, clock offset, ...). `ranks` says which
//! rank each row is; the `columns` attribute lists the attributes; each is a dataset of the
//! same name: integers (the minimum of int64 where a rank has none), strings ("" where it has
//! none) or, with a `<name>_offsets` dataset of rows + 1 entries, lists (row r holds values
//! `offsets[r]..offsets[r + 1]`). Everything read is checked against the row count.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::h5util::Group;
use crate::model::{AttrValue, Attrs};

pub const GROUP: &str = "scope_profiler_ranks";

/// An integer the rank does not have.
const ABSENT: i64 = i64::MIN;

fn damaged(message: String) -> Error {
    Error::new(format!("is damaged: {GROUP}: {message}"))
}

/// Each rank's attributes from the rank table, in the table's column order; None when the
/// file has no rank table.
pub fn read_table(file: &Group) -> Result<Option<BTreeMap<u32, Attrs>>> {
    if !file.has(GROUP) {
        return Ok(None);
    }
    let table = file.group(GROUP)?;
    let ranks = table.read_i64("ranks")?;
    let rows = ranks.len();
    let mut out: Vec<Attrs> = vec![Vec::new(); rows];
    for name in table.attr_strings("columns").unwrap_or_default() {
        if name.is_empty() || name.contains('/') || !table.has(&name) {
            continue;
        }
        let ds = table.dataset(&name)?;
        let offsets_name = format!("{name}_offsets");
        let offsets = if table.has(&offsets_name) {
            let o = table.read_i64(&offsets_name)?;
            if o.len() != rows + 1 || o.first().is_some_and(|&f| f != 0) || o.windows(2).any(|w| w[1] < w[0]) {
                return Err(damaged(format!("{offsets_name} has {} entries, not {} offsets in ascending order from 0", o.len(), rows + 1)));
            }
            Some(o)
        } else {
            None
        };
        let strings = ds.read_strings();
        let values: Vec<AttrValue> = match (strings, &offsets) {
            (Ok(s), None) => s.into_iter().map(AttrValue::Str).collect(),
            (Ok(s), Some(o)) => lists(&name, o, s, AttrValue::StrArray)?,
            (Err(_), None) => ds.read_i64()?.into_iter().map(AttrValue::Int).collect(),
            (Err(_), Some(o)) => lists(&name, o, ds.read_i64()?, AttrValue::IntArray)?,
        };
        if values.len() != rows {
            return Err(damaged(format!("{name} has {} values for {rows} ranks", values.len())));
        }
        for (attrs, v) in out.iter_mut().zip(values) {
            let absent = matches!(&v, AttrValue::Int(ABSENT)) || matches!(&v, AttrValue::Str(s) if s.is_empty());
            if !absent {
                attrs.push((name.clone(), v));
            }
        }
    }
    let mut table = BTreeMap::new();
    for (rank, attrs) in ranks.into_iter().zip(out) {
        let rank = u32::try_from(rank).map_err(|_| damaged(format!("a row has rank {rank}")))?;
        if table.insert(rank, attrs).is_some() {
            return Err(damaged(format!("rank {rank} has two rows")));
        }
    }
    Ok(Some(table))
}

/// Split `values` into one list per row at `offsets` (checked: ascending, from 0).
fn lists<T: Clone>(name: &str, offsets: &[i64], values: Vec<T>, wrap: fn(Vec<T>) -> AttrValue) -> Result<Vec<AttrValue>> {
    if offsets.last().is_some_and(|&end| end as u64 != values.len() as u64) {
        return Err(damaged(format!("{name} has {} values but its offsets end at {}", values.len(), offsets.last().unwrap_or(&0))));
    }
    Ok(offsets.windows(2).map(|w| wrap(values[w[0] as usize..w[1] as usize].to_vec())).collect())
}
