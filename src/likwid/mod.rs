//! LIKWID hardware counters (issue 4). STUB: the seam the core calls; replaced by the real module.
//!
//! Contract with the core (keep these signatures):
//! - `Session::begin(use_likwid)` runs once in `sp_setup`, on the setup thread, before workers exist.
//! - `region_created` runs under the region-registry lock for every new dense region id.
//! - `start`/`stop` run on the recording thread around the timing (start after, stop before).
//! - `finish` runs once at finalize after recording has stopped; its result is written by
//!   `write_group` into `rank<N>/likwid`.

use serde::{Deserialize, Serialize};

/// Counter results of one process (one MPI rank).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LikwidRun {
    /// Every `LIKWID_*` variable of the run, written as string attributes.
    pub env: Vec<(String, String)>,
    pub regions: Vec<RegionResult>,
}

/// One region of `rank<N>/likwid/regions/<tag>` (see shared/specs/hdf5-layout.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RegionResult {
    pub tag: String,
    pub group_id: i64,
    pub group_name: String,
    pub source: String,
    pub event_names: Vec<String>,
    pub counter_names: Vec<String>,
    pub metric_names: Vec<String>,
    pub cpus: Vec<i64>,
    pub times: Vec<f64>,
    pub call_counts: Vec<i64>,
    /// events[e][t]
    pub events: Vec<Vec<f64>>,
    /// metrics[m][t]
    pub metrics: Vec<Vec<f64>>,
}

pub struct Session {
    _private: (),
}

impl Session {
    pub fn begin(use_likwid: bool) -> Option<Session> {
        let _ = use_likwid;
        None
    }
    pub fn region_created(&self, _id: u32, _name: &str) {}
    #[inline]
    pub fn start(&self, _id: u32) {}
    #[inline]
    pub fn stop(&self, _id: u32) {}
    pub fn finish(self) -> LikwidRun {
        LikwidRun::default()
    }
}

/// Write `run` into `rank_group/likwid` (nothing when it has no regions).
pub fn write_group(_rank_group: &hdf5::Group, _run: &LikwidRun) -> hdf5::Result<()> {
    Ok(())
}
