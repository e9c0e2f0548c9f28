//! The regions layout (schema 1, the default): `rank<N>/regions/<name>/{start_times,
//! end_times,thread_ids}`, every call kept, 24 bytes per call.
//!
//! Each region's columns are written slab by slab as the calls are decoded and merged, so
//! finalize holds no more than a few slabs of decoded calls. With direct column writes (see
//! `writer::Column`) two threads take turns merging and writing (`for_each_slab_parallel`);
//! otherwise one merges while the calling thread writes through HDF5.

use super::{LayoutWriter, WORKERS, group_name, new_column, put_int, put_str};
use crate::model::{RankProfile, RegionData};
use std::collections::HashSet;

pub struct Regions;

impl LayoutWriter for Regions {
    fn write_rank(&mut self, file: &hdf5::File, rank: usize, profile: &RankProfile) -> hdf5::Result<()> {
        let regions = file.group(&format!("rank{rank}"))?.create_group("regions")?;
        let mut used = HashSet::new();
        for region in &profile.regions {
            write_region(&regions, region, &mut used)?;
        }
        Ok(())
    }

    fn finish(&mut self, _file: &hdf5::File) -> hdf5::Result<()> {
        Ok(())
    }

    fn rank_attributes_in_groups(&self) -> bool {
        true
    }
}

fn write_region(parent: &hdf5::Group, region: &RegionData, used: &mut HashSet<String>) -> hdf5::Result<()> {
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
    let starts = new_column::<i64>(&g, "start_times", n)?;
    let ends = new_column::<i64>(&g, "end_times", n)?;
    let threads = new_column::<i64>(&g, "thread_ids", n)?;
    let mut at = 0;
    if let (Some(s), Some(e), Some(t)) = (starts.direct(), ends.direct(), threads.direct()) {
        // Written with pwrite from any thread: merging and writing share the cores.
        let written = region.for_each_slab_parallel::<usize, hdf5::Error>(WORKERS, || 0, |written, place, slab| {
            s.write_at(place.at, slab.starts)?;
            e.write_at(place.at, slab.ends)?;
            t.write_at(place.at, slab.thread_ids)?;
            *written += slab.starts.len();
            Ok(())
        })?;
        at = written.iter().sum();
    } else {
        region.for_each_slab_pipelined::<hdf5::Error>(|s| {
            // A write past a column's end fails (the count check below then never runs).
            starts.write_at(at, s.starts)?;
            ends.write_at(at, s.ends)?;
            threads.write_at(at, s.thread_ids)?;
            at += s.starts.len();
            Ok(())
        })?;
    }
    if at != n {
        // Never leave unwritten elements in a file that looks complete.
        return Err(hdf5::Error::from(format!("region '{}': {at} of {n} calls decoded", region.name)));
    }
    Ok(())
}
