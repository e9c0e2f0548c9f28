//! `rank<N>/mpi/`: the program's MPI calls (docs/mpi.md), the same in every layout. One table
//! per group, a dataset per column (rows in step):
//!
//! - attributes: `mode` ("summary" or "calls", ",sites" added when call sites were kept),
//!   `family`, `app_time_ns`, `mpi_time_ns`, `init_time_ns`, `untracked_requests`,
//!   `dropped_pairs`;
//! - `routines/`: per routine, communicator and thread: `routine` (name), `thread`, `comm`
//!   (numbered per rank, 0 = none), `comm_size`, `comm_kind`, `calls`, `time_ns`, `min_ns`,
//!   `max_ns`, `bytes_sent`, `bytes_received`, `failed`, `polls_empty`, `poll_time_ns`, and
//!   `size_histogram` (rows x 64);
//! - `peers/`: per world rank: `world_rank` (-2: not known), `messages_sent`, `bytes_sent`,
//!   `messages_received`, `bytes_received`;
//! - `completions/`: `routine`, `origin`, `count`, `bytes`, `time_ns`;
//! - `sites/` (with `,sites`): `routine`, `module`, `offset`, `function`, `file`, `line`,
//!   `calls`, `time_ns`, `bytes_sent`, `bytes_received` (and `bytes`, their sum, which files
//!   written before the split have alone).

use super::{put_attr, put_i64_dataset};
use crate::model::AttrValue;
use crate::model::mpi::{MpiProfile, SIZE_BUCKETS};

fn strings(g: &hdf5::Group, name: &str, values: impl Iterator<Item = String>) -> hdf5::Result<()> {
    super::put_strings_dataset(g, name, &values.collect::<Vec<String>>()).map(|_| ())
}

fn u64s(g: &hdf5::Group, name: &str, values: impl Iterator<Item = u64>) -> hdf5::Result<()> {
    let v: Vec<u64> = values.collect();
    let ds = g.new_dataset::<u64>().shape(v.len()).create(name)?;
    if !v.is_empty() {
        ds.write(&v)?;
    }
    Ok(())
}

fn i64s(g: &hdf5::Group, name: &str, values: impl Iterator<Item = i64>) -> hdf5::Result<()> {
    put_i64_dataset(g, name, &values.collect::<Vec<_>>())
}

/// Write `p` as `mpi/` in `rank_group`.
pub fn write(rank_group: &hdf5::Group, p: &MpiProfile) -> hdf5::Result<()> {
    let g = rank_group.create_group("mpi")?;
    put_attr(&g, "mode", &AttrValue::Str(p.mode.clone()))?;
    put_attr(&g, "family", &AttrValue::Str(p.family.clone()))?;
    for (name, v) in [
        ("app_time_ns", p.app_time_ns),
        ("mpi_time_ns", p.mpi_time_ns),
        ("init_time_ns", p.init_time_ns),
        ("untracked_requests", p.untracked_requests as i64),
        ("dropped_pairs", p.dropped_pairs as i64),
    ] {
        put_attr(&g, name, &AttrValue::Int(v))?;
    }

    let r = g.create_group("routines")?;
    let rows = &p.routines;
    strings(&r, "routine", rows.iter().map(|x| x.routine.clone()))?;
    i64s(&r, "thread", rows.iter().map(|x| x.thread))?;
    i64s(&r, "comm", rows.iter().map(|x| x.comm))?;
    i64s(&r, "comm_size", rows.iter().map(|x| x.comm_size))?;
    i64s(&r, "comm_kind", rows.iter().map(|x| x.comm_kind as i64))?;
    u64s(&r, "calls", rows.iter().map(|x| x.stats.calls))?;
    i64s(&r, "time_ns", rows.iter().map(|x| x.stats.time))?;
    i64s(&r, "min_ns", rows.iter().map(|x| x.stats.min))?;
    i64s(&r, "max_ns", rows.iter().map(|x| x.stats.max))?;
    u64s(&r, "bytes_sent", rows.iter().map(|x| x.stats.bytes_sent))?;
    u64s(&r, "bytes_received", rows.iter().map(|x| x.stats.bytes_received))?;
    u64s(&r, "failed", rows.iter().map(|x| x.stats.failed))?;
    u64s(&r, "polls_empty", rows.iter().map(|x| x.stats.polls_empty))?;
    i64s(&r, "poll_time_ns", rows.iter().map(|x| x.stats.poll_time))?;
    let mut hist = Vec::with_capacity(rows.len() * SIZE_BUCKETS);
    for x in rows {
        let mut h = x.stats.sizes.clone();
        h.resize(SIZE_BUCKETS, 0);
        hist.extend(h);
    }
    let ds = r.new_dataset::<u64>().shape([rows.len(), SIZE_BUCKETS]).create("size_histogram")?;
    if !hist.is_empty() {
        ds.write_raw(&hist)?;
    }

    let pe = g.create_group("peers")?;
    i64s(&pe, "world_rank", p.peers.iter().map(|x| x.world_rank))?;
    u64s(&pe, "messages_sent", p.peers.iter().map(|x| x.stats.messages_sent))?;
    u64s(&pe, "bytes_sent", p.peers.iter().map(|x| x.stats.bytes_sent))?;
    u64s(&pe, "messages_received", p.peers.iter().map(|x| x.stats.messages_received))?;
    u64s(&pe, "bytes_received", p.peers.iter().map(|x| x.stats.bytes_received))?;

    let c = g.create_group("completions")?;
    strings(&c, "routine", p.completions.iter().map(|x| x.routine.clone()))?;
    strings(&c, "origin", p.completions.iter().map(|x| x.origin.clone()))?;
    u64s(&c, "count", p.completions.iter().map(|x| x.stats.count))?;
    u64s(&c, "bytes", p.completions.iter().map(|x| x.stats.bytes))?;
    i64s(&c, "time_ns", p.completions.iter().map(|x| x.stats.time))?;

    if p.mode.contains("sites") {
        let s = g.create_group("sites")?;
        strings(&s, "routine", p.sites.iter().map(|x| x.routine.clone()))?;
        strings(&s, "module", p.sites.iter().map(|x| x.module.clone()))?;
        u64s(&s, "offset", p.sites.iter().map(|x| x.offset))?;
        strings(&s, "function", p.sites.iter().map(|x| x.function.clone()))?;
        strings(&s, "file", p.sites.iter().map(|x| x.file.clone()))?;
        i64s(&s, "line", p.sites.iter().map(|x| x.line as i64))?;
        u64s(&s, "calls", p.sites.iter().map(|x| x.stats.calls))?;
        i64s(&s, "time_ns", p.sites.iter().map(|x| x.stats.time))?;
        u64s(&s, "bytes_sent", p.sites.iter().map(|x| x.stats.bytes_sent))?;
        u64s(&s, "bytes_received", p.sites.iter().map(|x| x.stats.bytes_received))?;
        // Their sum, as files before the split had it.
        u64s(&s, "bytes", p.sites.iter().map(|x| x.stats.bytes_sent.saturating_add(x.stats.bytes_received)))?;
    }
    Ok(())
}
