//! A `RankProfile` as bytes, to send it to rank 0: a JSON header (everything but the call
//! columns) followed by the columns as raw little-endian i64, region by region. Also without
//! the regions (`encode_groups`): a rank's counter and LIKWID results for its `rank<N>` group.

use crate::model::{Buffers, Calls, Columns, LikwidRun, PackedCalls, PageVec, RankCounters, RankInfo, RankProfile, RegionData, SLAB, SlabSource, SourceLocation, Stats};
use serde::{Deserialize, Serialize};

const MAGIC: &[u8; 8] = b"SPRANK01";

#[derive(Serialize, Deserialize)]
struct Header {
    info: RankInfo,
    regions: Vec<RegionHeader>,
    likwid: LikwidRun,
    #[serde(default)]
    counters: RankCounters,
    /// The rank's MPI calls (`rank<N>/mpi/`).
    #[serde(default)]
    mpi: Option<crate::model::MpiProfile>,
    /// The rank's samples (`rank<N>/sampling/`, `rank<N>/line_profile/`).
    #[serde(default)]
    samples: Option<crate::model::SampleProfile>,
    /// The rank's call paths (`rank<N>/call_paths/`).
    #[serde(default)]
    call_paths: Option<crate::model::CallPaths>,
}

#[derive(Serialize, Deserialize)]
struct RegionHeader {
    name: String,
    calls: u64,
    open_calls: u64,
    dropped_calls: u64,
    #[serde(default)]
    source: Option<SourceLocation>,
    stats: Vec<(i64, Stats)>,
    #[serde(default)]
    throttled: bool,
}

/// The bytes, in a mapping of their own (`PageVec`): a rank's calls take 24 bytes each, and
/// freeing a malloc'd block that size would move glibc's thresholds for the host.
pub fn encode(p: &RankProfile) -> PageVec<u8> {
    encode_with(p, true)
}

/// Everything of `p` but its regions and call paths (the collective write's file-wide
/// tables): what a collective write sends to rank 0 for the rank's `rank<N>` groups
/// (counters, LIKWID); decoded by `decode` into a profile without regions.
pub fn encode_groups(p: &RankProfile) -> PageVec<u8> {
    encode_with(p, false)
}

fn encode_with(p: &RankProfile, regions: bool) -> PageVec<u8> {
    let mut header = Header {
        info: p.info.clone(),
        regions: p
            .regions
            .iter()
            .filter(|_| regions)
            .map(|r| RegionHeader {
                name: r.name.clone(),
                calls: r.calls() as u64,
                open_calls: r.open_calls,
                dropped_calls: r.dropped_calls,
                stats: r.stats.clone(),
                source: r.source.clone(),
                throttled: r.throttled,
            })
            .collect(),
        likwid: p.likwid.clone(),
        counters: p.counters.clone(),
        mpi: p.mpi.clone(),
        samples: p.samples.clone(),
        call_paths: if regions { p.call_paths.clone() } else { None },
    };
    // Never fail here: a rank that cannot send would leave rank 0 waiting. Without the counters,
    // or at worst empty (rank 0 then reports this rank as malformed), the message still goes.
    let json = serde_json::to_vec(&header)
        .or_else(|_| {
            header.likwid = LikwidRun::default();
            header.counters = Default::default();
            header.mpi = None;
            header.samples = None;
            header.call_paths = None;
            serde_json::to_vec(&header)
        })
        .unwrap_or_default();
    let calls: usize = header.regions.iter().map(|r| r.calls as usize).sum();
    let mut out = PageVec::with_capacity(16 + json.len() + calls * 24);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    // Per region: its starts, then ends, then thread ids (each column whole).
    for (r, h) in p.regions.iter().zip(&header.regions) {
        let n = h.calls as usize;
        let base = out.len();
        out.resize(base + n * 24, 0);
        let mut i = 0;
        let _ = r.for_each_slab::<()>(|s| {
            for (k, col) in [s.starts, s.ends, s.thread_ids].into_iter().enumerate() {
                let at = base + (k * n + i) * 8;
                for (j, v) in col.iter().enumerate().take(n.saturating_sub(i)) {
                    out[at + j * 8..at + j * 8 + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
            i += s.starts.len();
            Ok(())
        });
    }
    out
}

/// A rank's profile from its bytes (as `encode` made them, received from the rank). The calls
/// stay in the bytes, which the regions share (`Received`): they are read a slab at a time
/// when written, never copied into columns of their own.
pub fn decode(bytes: PageVec<u8>) -> Result<RankProfile, String> {
    let err = |what: &str| format!("malformed rank data: {what}");
    if bytes.len() < 16 || &bytes[..8] != MAGIC {
        return Err(err("bad magic"));
    }
    let hlen = usize::try_from(u64::from_le_bytes(bytes[8..16].try_into().unwrap())).map_err(|_| err("short header"))?;
    let json = bytes.get(16..16usize.saturating_add(hlen)).ok_or_else(|| err("short header"))?;
    let header: Header = serde_json::from_slice(json).map_err(|e| err(&e.to_string()))?;
    let bytes = std::sync::Arc::new(bytes);
    let mut at = 16 + hlen;
    let mut regions = Vec::with_capacity(header.regions.len());
    for r in header.regions {
        // Three columns of `calls` values, within the bytes.
        let n = usize::try_from(r.calls).map_err(|_| err("short columns"))?;
        let end = n.checked_mul(24).and_then(|b| b.checked_add(at)).filter(|&e| e <= bytes.len()).ok_or_else(|| err("short columns"))?;
        let calls = if n == 0 { Calls::Columns(Columns::default()) } else { Calls::Packed(Box::new(Received { bytes: bytes.clone(), at, n })) };
        at = end;
        regions.push(RegionData {
            name: r.name,
            calls,
            stats: r.stats,
            open_calls: r.open_calls,
            dropped_calls: r.dropped_calls,
            source: r.source,
            throttled: r.throttled,
        });
    }
    Ok(RankProfile { info: header.info, regions, likwid: header.likwid, counters: header.counters, mpi: header.mpi, samples: header.samples, call_paths: header.call_paths })
}

/// One region's calls in a received rank's bytes: starts, ends and thread ids, `n` little-endian
/// i64 each, from byte `at` on (checked to be within the bytes by `decode`), in start order.
#[derive(Debug)]
struct Received {
    bytes: std::sync::Arc<PageVec<u8>>,
    at: usize,
    n: usize,
}

impl PackedCalls for Received {
    fn calls(&self) -> usize {
        self.n
    }

    fn bytes_reserved(&self) -> usize {
        24 * self.n
    }

    fn heap_bytes(&self) -> usize {
        // The bytes are a mapping of their own, freed with the profile.
        0
    }

    fn merge(&self) -> Box<dyn SlabSource + Send + '_> {
        Box::new(ReceivedSlabs { calls: self, next: 0 })
    }
}

/// `Received`'s calls a slab at a time (already in start order: nothing to merge).
struct ReceivedSlabs<'a> {
    calls: &'a Received,
    next: usize,
}

impl SlabSource for ReceivedSlabs<'_> {
    fn next_slab(&mut self, out: &mut Buffers) -> bool {
        let Received { bytes, at, n } = self.calls;
        let (from, to) = (self.next, (self.next + SLAB).min(*n));
        self.next = to;
        for (k, col) in [&mut out.0, &mut out.1, &mut out.2].into_iter().enumerate() {
            col.clear();
            let column = &bytes[at + k * n * 8..at + (k + 1) * n * 8];
            col.extend(column[from * 8..to * 8].chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())));
        }
        to > from
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut p = RankProfile::default();
        p.info.hostname = "node7".into();
        p.info.thread_os_ids = vec![11, 12];
        p.info.extra.push(("clock_offset_ns".into(), crate::model::AttrValue::Int(-5)));
        p.regions.push(RegionData { open_calls: 1, dropped_calls: 2, source: Some(SourceLocation { file: "a.c".into(), line: 7 }), throttled: true, ..RegionData::from_columns("a/β", vec![1, 2], vec![3, 4], vec![0, 1]) });
        p.regions.push(RegionData { name: "empty".into(), open_calls: 3, ..Default::default() });
        p.counters.event_names = vec!["task-clock".into()];
        p.counters.perf.push(crate::model::PerfRegion {
            name: "a/β".into(),
            calls: 2,
            totals: vec![1.5e9],
            running_fraction: 1.0,
            thread_ids: vec![0, 1],
            thread_values: vec![vec![1e9], vec![0.5e9]],
            thread_running_fraction: vec![1.0, 1.0],
            thread_calls: vec![1, 1],
            counted_flops: vec![],
        });
        p.counters.annotated.push(crate::model::AnnotatedRegion { name: "a/β".into(), flops: Some(2e9), ..Default::default() });
        let mut mpi = crate::model::MpiProfile { mode: "calls".into(), family: "openmpi".into(), app_time_ns: 100, mpi_time_ns: 40, ..Default::default() };
        mpi.routines.push(crate::model::mpi::RoutineRow { routine: "MPI_Send".into(), thread: 1, comm: 1, comm_size: 4, comm_kind: 1, stats: Default::default() });
        mpi.peers.push(crate::model::mpi::PeerRow { world_rank: 3, stats: crate::model::mpi::PeerStats { messages_sent: 2, bytes_sent: 16, ..Default::default() } });
        p.mpi = Some(mpi);
        p.samples = Some(crate::model::SampleProfile {
            hz: 1000,
            mechanism: "perf task-clock".into(),
            ticks: 3,
            regions: vec!["a/β".into()],
            modules: vec![crate::model::samples::SampleModule { path: "/bin/x".into(), base: 0x5000 }],
            rows: vec![crate::model::samples::SampleRow { thread: 1, region: 0, module: 0, address: 0x5123, count: 3, time_ns: 3_000_000 }],
            lines: vec![crate::model::samples::LineRecord { region: "a/β".into(), filename: "x.c".into(), function: "f".into(), first_lineno: 3, line_numbers: vec![4], hits: vec![3], times: vec![3e6], ..Default::default() }],
            ..Default::default()
        });
        p.call_paths = Some(crate::model::CallPaths {
            names: vec!["a/β".into()],
            nodes: vec![crate::model::PathNode { thread: 1, parent: -1, region: 0, calls: 2, inclusive_ns: 4, exclusive_ns: 3 }],
            wall_ns: 99,
        });
        let q = decode(encode(&p)).unwrap();
        assert_eq!(q.call_paths, p.call_paths, "the call paths travel to rank 0");
        assert_eq!(q.info, p.info);
        assert_eq!(q.regions.len(), 2);
        for (a, b) in q.regions.iter().zip(&p.regions) {
            assert_eq!((&a.name, a.open_calls, a.dropped_calls, &a.stats), (&b.name, b.open_calls, b.dropped_calls, &b.stats));
            assert_eq!(a.columns(), b.columns());
            assert_eq!(a.source, b.source);
            assert_eq!(a.throttled, b.throttled);
        }
        assert_eq!(q.counters, p.counters, "perf events and annotations travel to rank 0");
        assert_eq!(q.mpi, p.mpi, "the MPI calls travel to rank 0");
        assert_eq!(q.samples, p.samples, "the samples travel to rank 0");
        let bytes = |b: &[u8]| {
            let mut v = PageVec::new();
            v.extend_from_slice(b);
            v
        };
        assert!(decode(bytes(&encode(&p)[..20])).is_err());
        assert!(decode(bytes(b"garbage")).is_err());
        // Columns cut short by one byte: said, never read past the end.
        let whole = encode(&p);
        assert_eq!(decode(bytes(&whole[..whole.len() - 1])).err().unwrap(), "malformed rank data: short columns");
    }

    /// A region of more calls than a slab is read from the received bytes slab by slab, in
    /// order, the same calls.
    #[test]
    fn received_calls_read_slab_by_slab() {
        let n = 2 * SLAB as i64 + 123;
        let starts: Vec<i64> = (0..n).map(|i| 10 * i).collect();
        let ends: Vec<i64> = (0..n).map(|i| 10 * i + 3 + i % 7).collect();
        let tids: Vec<i64> = (0..n).map(|i| i % 3).collect();
        let mut p = RankProfile::default();
        p.regions.push(RegionData::from_columns("big", starts.clone(), ends.clone(), tids.clone()));
        let q = decode(encode(&p)).unwrap();
        assert_eq!(q.regions[0].calls(), n as usize);
        let c = q.regions[0].columns();
        assert!(c.starts == starts && c.ends == ends && c.thread_ids == tids);
        let mut slabs = Vec::new();
        q.regions[0]
            .for_each_slab::<()>(|s| {
                slabs.push(s.starts.len());
                Ok(())
            })
            .unwrap();
        assert_eq!(slabs, [SLAB, SLAB, 123]);
    }
}
