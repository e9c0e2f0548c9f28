//! The regions layout (schema 1, the default): `rank<N>/regions/<name>/{start_times,
//! end_times,thread_ids}`, every call kept, 24 bytes per call.
//!
//! Each region's columns are written slab by slab as the calls are decoded and merged, so
//! finalize holds no more than a few slabs of decoded calls. With direct column writes (see
//! `writer::Column`) two threads take turns merging and writing a large region
//! (`for_each_slab_parallel`), and smaller regions are written side by side, one region per
//! thread, once all are created (`write_side_by_side`); otherwise one merges while the calling
//! thread writes through HDF5.

use super::{Column, LayoutWriter, direct_fd, group_name, new_column_in, put_int, put_str};
use crate::model::{RankProfile, RegionData, Slab};
use std::collections::HashSet;

pub struct Regions;

impl LayoutWriter for Regions {
    fn write_rank(&mut self, file: &hdf5::File, rank: usize, profile: &RankProfile) -> hdf5::Result<()> {
        let regions = file.group(&format!("rank{rank}"))?.create_group("regions")?;
        let mut used = HashSet::new();
        // A region too small to share its merge between the workers is only created here; its
        // calls are written after, side by side with the other small ones (`write_side_by_side`).
        let mut later = Vec::new();
        let fd = direct_fd(file);
        for region in &profile.regions {
            if let Some(columns) = write_region(&regions, region, &mut used, fd)? {
                later.push((region, columns));
            }
        }
        write_side_by_side(&later)
    }

    fn finish(&mut self, _file: &hdf5::File) -> hdf5::Result<()> {
        Ok(())
    }

    fn rank_attributes_in_groups(&self) -> bool {
        true
    }
}

/// A region's three columns.
type Columns = [Column<i64>; 3];

/// Create `region`'s group and columns and write its calls, or, for a region that one thread
/// merges and whose columns take direct writes, return the columns for `write_side_by_side`.
/// `fd` is the file's `direct_fd`.
fn write_region(parent: &hdf5::Group, region: &RegionData, used: &mut HashSet<String>, fd: Option<std::os::fd::RawFd>) -> hdf5::Result<Option<Columns>> {
    let g = parent.create_group(&group_name(&region.name, used))?;
    put_str(&g, "tag", &region.name)?;
    if let Some(at) = &region.source {
        put_str(&g, "source_file", &at.file)?;
        // Line 0 means the line is not known (a file without a line).
        if at.line > 0 {
            put_int(&g, "source_lineno", at.line)?;
        }
    }
    put_int(&g, "open_calls", region.open_calls as i64)?;
    put_int(&g, "dropped_calls", region.dropped_calls as i64)?;
    if region.throttled {
        // An instrumented function no longer recorded after the throttling's limit.
        put_int(&g, "throttled", 1)?;
    }
    let n = region.calls();
    let starts = new_column_in::<i64>(&g, "start_times", n, fd)?;
    let ends = new_column_in::<i64>(&g, "end_times", n, fd)?;
    let threads = new_column_in::<i64>(&g, "thread_ids", n, fd)?;
    let direct = starts.direct().is_some() && ends.direct().is_some() && threads.direct().is_some();
    let columns = [starts, ends, threads];
    if direct && !region.shares_its_merge() {
        return Ok(Some(columns));
    }
    let mut at = 0;
    if let [Some(s), Some(e), Some(t)] = columns.each_ref().map(|c| c.direct()) {
        // Written with pwrite from any thread: merging and writing share the cores.
        let written = region.for_each_slab_parallel::<usize, hdf5::Error>(super::workers(), || 0, |written, place, slab| {
            s.write_at(place.at, slab.starts)?;
            e.write_at(place.at, slab.ends)?;
            t.write_at(place.at, slab.thread_ids)?;
            *written += slab.starts.len();
            Ok(())
        })?;
        at = written.iter().sum();
    } else {
        region.for_each_slab_pipelined::<hdf5::Error>(|s| write_slab(&columns, &mut at, s))?;
    }
    written_all(region, at)?;
    Ok(None)
}

/// Write `slab` at value `at` of the region's columns and move `at` past it (a write past a
/// column's end fails, so the count check after never runs then).
fn write_slab(columns: &Columns, at: &mut usize, slab: Slab<'_>) -> hdf5::Result<()> {
    let [starts, ends, threads] = columns;
    starts.write_at(*at, slab.starts)?;
    ends.write_at(*at, slab.ends)?;
    threads.write_at(*at, slab.thread_ids)?;
    *at += slab.starts.len();
    Ok(())
}

/// Never leave unwritten elements in a file that looks complete.
fn written_all(region: &RegionData, at: usize) -> hdf5::Result<()> {
    let n = region.calls();
    if at != n {
        return Err(hdf5::Error::from(format!("region '{}': {at} of {n} calls decoded", region.name)));
    }
    Ok(())
}

/// Write the calls of regions that one thread merges each (`write_region` created their
/// columns, which take direct writes), side by side (`super::side_by_side`): a profile of many
/// regions of moderate size uses both cores, as one large region does.
fn write_side_by_side(later: &[(&RegionData, Columns)]) -> hdf5::Result<()> {
    super::side_by_side(later.len(), |i| {
        let (region, columns) = &later[i];
        let mut at = 0;
        region.for_each_slab::<hdf5::Error>(|slab| write_slab(columns, &mut at, slab))?;
        written_all(region, at)
    })
    .map(drop)
}
