//! Read a profile file into a [`Profile`]: detect the schema, then read the
//! metadata, the ranks, the regions (schema 1 here, 2 and 3 in
//! [`crate::columnar`]) and the LIKWID groups ([`crate::likwid`]).

use std::path::Path;

use crate::error::{Error, Result};
use crate::h5util::{self, Group, Member};
use crate::model::{Layout, Profile, RankInfo, RegionRank};
use crate::stats::Stats;
use crate::{columnar, counters, likwid};

pub const SCHEMA_ATTR: &str = "scope_profiler_schema";
pub const SUPPORTED: &str = "sptool reads schema 1 (per-rank groups, written by the scope_profiler \
library) and schemas 2 and 3 (columnar, written by the Python package scope-profiler)";

/// Read the whole profile at `path`. Every error names the file.
pub fn read_profile(path: &Path) -> Result<Profile> {
    let (file, size) = h5util::open(path)?;
    read_open(&file, path, size).map_err(|e| e.or_file(path))
}

/// `rank<N>` groups of the root, sorted by N.
pub fn rank_groups(file: &Group) -> Result<Vec<(u32, String)>> {
    let mut out = Vec::new();
    for Member { name, .. } in file.subgroups()? {
        if let Some(n) = name.strip_prefix("rank").and_then(|d| d.parse::<u32>().ok()) {
            if name == format!("rank{n}") {
                out.push((n, name));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn read_open(file: &h5util::File, path: &Path, size: u64) -> Result<Profile> {
    let ranks_in_file = rank_groups(file)?;
    let schema = match file.attr(SCHEMA_ATTR) {
        Some(value) => value.as_i64().ok_or_else(|| {
            Error::new(format!("the {SCHEMA_ATTR} attribute is not an integer ({value}); {SUPPORTED}"))
        })?,
        None => {
            // Files written before the attribute existed are schema 1.
            let has_regions = ranks_in_file
                .iter()
                .any(|(_, name)| file.group(name).is_ok_and(|g| g.has("regions")));
            if !has_regions {
                return Err(Error::new(format!(
                    "is not a scope_profiler profile: no {SCHEMA_ATTR} attribute and no \
                     rank<N>/regions groups; {SUPPORTED}"
                )));
            }
            1
        }
    };
    if !(1..=3).contains(&schema) {
        return Err(Error::new(format!("has {SCHEMA_ATTR} = {schema}, which is not supported; {SUPPORTED}")));
    }

    let metadata = if file.has("metadata") {
        file.group("metadata")?.attrs()?
    } else {
        Vec::new()
    };

    let mut ranks = Vec::new();
    let mut regions = Vec::new();
    let mut likwid_regions = Vec::new();
    let mut perf = Vec::new();
    let mut annotations = Vec::new();
    for (rank, name) in &ranks_in_file {
        let group = file.group(name)?;
        let attrs = group.attrs()?;
        let mut likwid_attrs = Vec::new();
        if group.has(likwid::GROUP) {
            let (attrs, found) = likwid::read_rank(&group, *rank)?;
            likwid_attrs = attrs;
            likwid_regions.extend(found);
        }
        if group.has(counters::PERF_GROUP) {
            perf.extend(counters::read_perf(&group, *rank)?);
        }
        if group.has(counters::ANNOTATIONS_GROUP) {
            annotations.extend(counters::read_annotations(&group, *rank)?);
        }
        if schema == 1 {
            regions.extend(read_rank_regions(&group, *rank)?);
        }
        ranks.push(RankInfo { rank: *rank, attrs, likwid_attrs });
    }

    let mut extras = Vec::new();
    let layout = if schema == 1 {
        Layout::PerRank
    } else {
        let (layout, found, found_extras) = columnar::read_regions(file, schema)?;
        regions = found;
        extras = found_extras;
        // The rank attributes of scope_profiler's schema-3 files are rows of a table.
        for (rank, mut attrs) in crate::ranks::read_table(file)?.unwrap_or_default() {
            match ranks.iter_mut().find(|k| k.rank == rank) {
                Some(k) => {
                    attrs.append(&mut k.attrs);
                    k.attrs = attrs;
                }
                None => ranks.push(RankInfo { rank, attrs, likwid_attrs: Vec::new() }),
            }
        }
        for r in &regions {
            if !ranks.iter().any(|k| k.rank == r.rank) {
                ranks.push(RankInfo { rank: r.rank, attrs: Vec::new(), likwid_attrs: Vec::new() });
            }
        }
        ranks.sort_by_key(|r| r.rank);
        layout
    };

    let sources = crate::source::read(file, schema, &ranks_in_file);
    Ok(Profile {
        sources,
        path: path.to_path_buf(),
        file_size: size,
        schema,
        layout,
        metadata,
        ranks,
        regions,
        likwid: likwid_regions,
        perf,
        annotations,
        extras,
    })
}

/// Schema 1: `rank<N>/regions/<name>/{start_times,end_times}` plus attributes.
fn read_rank_regions(rank_group: &Group, rank: u32) -> Result<Vec<RegionRank>> {
    if !rank_group.has("regions") {
        return Ok(Vec::new());
    }
    let group = rank_group.group("regions")?;
    let mut out = Vec::new();
    for member in group.subgroups()? {
        let region = group.member(&member)?;
        // '/' cannot appear in a group name; it is stored as '|' and the
        // `tag` attribute holds the real name.
        let name = region.attr_string("tag").unwrap_or_else(|| member.name.replace('|', "/"));
        let starts = region.read_i64("start_times")?;
        let ends = region.read_i64("end_times")?;
        if starts.len() != ends.len() {
            return Err(Error::new(format!(
                "{} is damaged: {} start_times but {} end_times",
                region.path(),
                starts.len(),
                ends.len()
            )));
        }
        out.push(RegionRank {
            rank,
            name,
            stats: Stats::from_intervals(&starts, &ends),
            open_calls: region.attr_i64("open_calls").unwrap_or(0),
        });
    }
    Ok(out)
}
