//! `rank<N>/call_paths/`: the rank's call paths (the model's `CallPaths`; docs/layouts.md)
//! in the regions layout (the columnar and aggregate layouts keep them in the file-wide
//! `call_paths/` table: `tables`). One table, a dataset per column, rows in step, parents before
//! their children:
//!
//! - attributes: `version` (1), `recursion` ("folded"), `wall_ns` (the rank's wall time from
//!   setup to finalize, 0 when not known);
//! - `names`: the region names the rows refer to;
//! - `thread` (the file's thread id), `parent` (row of the enclosing path, -1 at the top),
//!   `region` (index into `names`), `calls`, `inclusive_ns`, `exclusive_ns`.

use super::{put_attr, put_i64_dataset, put_strings_dataset};
use crate::model::{AttrValue, CallPaths, PathNode};

pub const GROUP: &str = "call_paths";
pub const VERSION: i64 = 1;

/// Write `p` as `call_paths/` in `rank_group`.
pub fn write(rank_group: &hdf5::Group, p: &CallPaths) -> hdf5::Result<()> {
    let g = rank_group.create_group(GROUP)?;
    put_attr(&g, "version", &AttrValue::Int(VERSION))?;
    put_attr(&g, "recursion", &AttrValue::Str("folded".into()))?;
    put_attr(&g, "wall_ns", &AttrValue::Int(p.wall_ns))?;
    put_strings_dataset(&g, "names", &p.names)?;
    let col = |f: fn(&PathNode) -> i64| p.nodes.iter().map(f).collect::<Vec<i64>>();
    put_i64_dataset(&g, "thread", &col(|n| n.thread))?;
    put_i64_dataset(&g, "parent", &col(|n| n.parent))?;
    put_i64_dataset(&g, "region", &col(|n| n.region as i64))?;
    put_i64_dataset(&g, "calls", &col(|n| n.calls.min(i64::MAX as u64) as i64))?;
    put_i64_dataset(&g, "inclusive_ns", &col(|n| n.inclusive_ns))?;
    put_i64_dataset(&g, "exclusive_ns", &col(|n| n.exclusive_ns))?;
    Ok(())
}

/// Read `call_paths/` of `rank_group` back (tests and tools of this crate), every row checked:
/// the columns in step, `region` within `names`, `parent` an earlier row or -1, no negative
/// count or time.
pub fn read(rank_group: &hdf5::Group) -> hdf5::Result<CallPaths> {
    let g = rank_group.group(GROUP)?;
    let names: Vec<String> = g.dataset("names")?.read_raw::<hdf5::types::VarLenUnicode>()?.iter().map(|s| s.to_string()).collect();
    let col = |n: &str| g.dataset(n).and_then(|d| d.read_raw::<i64>());
    let (thread, parent, region, calls, incl, excl) = (col("thread")?, col("parent")?, col("region")?, col("calls")?, col("inclusive_ns")?, col("exclusive_ns")?);
    let n = thread.len();
    if [parent.len(), region.len(), calls.len(), incl.len(), excl.len()].iter().any(|&l| l != n) {
        return Err("call_paths: columns of different lengths".into());
    }
    let wall_ns = g.attr("wall_ns").and_then(|a| a.read_scalar::<i64>()).unwrap_or(0);
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        if !(-1..i as i64).contains(&parent[i]) || !(0..names.len() as i64).contains(&region[i]) || calls[i] < 0 || incl[i] < 0 || excl[i] < 0 {
            return Err(format!("call_paths: row {i} is malformed").into());
        }
        nodes.push(PathNode { thread: thread[i], parent: parent[i], region: region[i] as u32, calls: calls[i] as u64, inclusive_ns: incl[i], exclusive_ns: excl[i] });
    }
    Ok(CallPaths { names, nodes, wall_ns })
}
