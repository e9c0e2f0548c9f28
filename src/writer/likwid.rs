//! `rank<N>/likwid` in the HDF5 file (shared/specs/hdf5-layout.md), from the LIKWID results
//! of the profile (`model::likwid`).

use crate::model::{LikwidRun, RegionResult};
use hdf5::types::VarLenUnicode;

/// HDF5 attributes are limited to 64 KiB; the layout truncates at 60,000 characters.
const ATTR_MAX: usize = 60_000;

fn unicode(s: &str) -> VarLenUnicode {
    let mut t: String = s.replace('\0', "");
    if t.len() > ATTR_MAX {
        let mut cut = ATTR_MAX;
        while !t.is_char_boundary(cut) {
            cut -= 1;
        }
        t.truncate(cut);
    }
    // Cannot fail: NULs were removed.
    t.parse().unwrap_or_default()
}

fn str_attr(g: &hdf5::Group, name: &str, value: &str) -> hdf5::Result<()> {
    g.new_attr::<VarLenUnicode>().create(name)?.write_scalar(&unicode(value))
}

fn str_list_attr(g: &hdf5::Group, name: &str, values: &[String]) -> hdf5::Result<()> {
    let v: Vec<VarLenUnicode> = values.iter().map(|s| unicode(s)).collect();
    g.new_attr::<VarLenUnicode>().shape(v.len()).create(name)?.write(&v)
}

fn i64_attr(g: &hdf5::Group, name: &str, value: i64) -> hdf5::Result<()> {
    g.new_attr::<i64>().create(name)?.write_scalar(&value)
}

/// rows x cols dataset from row vectors (rows may be 0).
fn matrix(g: &hdf5::Group, name: &str, rows: &[Vec<f64>], cols: usize) -> hdf5::Result<()> {
    let flat: Vec<f64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    if flat.len() != rows.len() * cols {
        return Err(hdf5::Error::from(format!("ragged {name}: {} values for {}x{cols}", flat.len(), rows.len())));
    }
    g.new_dataset::<f64>().shape((rows.len(), cols)).create(name)?.write_raw(&flat)
}

fn write_region(parent: &hdf5::Group, name: &str, r: &RegionResult) -> hdf5::Result<()> {
    let g = parent.create_group(name)?;
    str_attr(&g, "tag", &r.tag)?;
    i64_attr(&g, "group_id", r.group_id)?;
    str_attr(&g, "group_name", &r.group_name)?;
    str_attr(&g, "source", &r.source)?;
    str_list_attr(&g, "event_names", &r.event_names)?;
    str_list_attr(&g, "counter_names", &r.counter_names)?;
    str_list_attr(&g, "metric_names", &r.metric_names)?;
    let t = r.cpus.len();
    g.new_dataset::<i64>().shape(t).create("cpus")?.write_raw(&r.cpus)?;
    g.new_dataset::<f64>().shape(t).create("times")?.write_raw(&r.times)?;
    g.new_dataset::<i64>().shape(t).create("call_counts")?.write_raw(&r.call_counts)?;
    matrix(&g, "events", &r.events, t)?;
    matrix(&g, "metrics", &r.metrics, t)?;
    Ok(())
}

/// Write `run` into `rank_group/likwid` (nothing when it has no regions).
/// Regions whose arrays disagree in shape are skipped rather than written wrong.
pub fn write_group(rank_group: &hdf5::Group, run: &LikwidRun) -> hdf5::Result<()> {
    if run.regions.is_empty() {
        return Ok(());
    }
    let g = rank_group.create_group("likwid")?;
    for (k, v) in &run.env {
        if !k.is_empty() && !k.contains('/') && !k.contains('\0') {
            str_attr(&g, k, v)?;
        }
    }
    let good: Vec<&RegionResult> = run.regions.iter().filter(|r| r.is_consistent()).collect();
    i64_attr(&g, "num_regions", good.len() as i64)?;
    let regions = g.create_group("regions")?;
    // Same naming as the timings (`/` stored as `|`, clashes get " #2"): a region
    // measured with two event sets appears twice.
    let mut used = std::collections::HashSet::new();
    for r in good {
        let name = super::group_name(&r.tag, &mut used);
        write_region(&regions, &name, r)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(tag: &str, gid: i64) -> RegionResult {
        RegionResult {
            tag: tag.into(),
            group_id: gid,
            group_name: "FLOPS_DP".into(),
            source: "full_api".into(),
            event_names: vec!["A".into(), "B".into()],
            counter_names: vec!["PMC0".into(), "PMC1".into()],
            metric_names: vec!["CPI".into()],
            cpus: vec![0, 1, 2],
            times: vec![0.1, 0.2, 0.3],
            call_counts: vec![1, 2, 3],
            events: vec![vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]],
            metrics: vec![vec![f64::NAN, 1.0, f64::INFINITY]],
        }
    }

    #[test]
    fn layout_round_trip() {
        let path = std::env::temp_dir().join(format!("sp_likwid_h5_{}.h5", std::process::id()));
        let run = LikwidRun {
            env: vec![("LIKWID_EVENTS".into(), "FLOPS_DP".into()), ("LIKWID_THREADS".into(), "0,1,2".into())],
            regions: vec![region("a/b c", 0), region("a/b c", 1), {
                let mut r = region("custom", 1);
                r.metric_names.clear();
                r.metrics.clear();
                r
            }],
        };
        {
            // No file locks: other unit tests start processes that inherit descriptors.
            let f = hdf5::File::with_options().with_fapl(|p| p.file_locking(false)).create(&path).unwrap();
            let rank = f.create_group("rank0").unwrap();
            write_group(&rank, &run).unwrap();
            let empty = f.create_group("rank1").unwrap();
            write_group(&empty, &LikwidRun::default()).unwrap();
        }
        let f = hdf5::File::with_options().with_fapl(|p| p.file_locking(false)).open(&path).unwrap();
        assert!(!f.group("rank1").unwrap().link_exists("likwid"));
        let g = f.group("rank0/likwid").unwrap();
        let ev: VarLenUnicode = g.attr("LIKWID_EVENTS").unwrap().read_scalar().unwrap();
        assert_eq!(ev.as_str(), "FLOPS_DP");
        assert_eq!(g.attr("num_regions").unwrap().read_scalar::<i64>().unwrap(), 3);
        let r = g.group("regions/a|b c").unwrap();
        let tag: VarLenUnicode = r.attr("tag").unwrap().read_scalar().unwrap();
        assert_eq!(tag.as_str(), "a/b c");
        let names: Vec<VarLenUnicode> = r.attr("counter_names").unwrap().read_raw().unwrap();
        assert_eq!(names.iter().map(|s| s.as_str()).collect::<Vec<_>>(), ["PMC0", "PMC1"]);
        let events = r.dataset("events").unwrap();
        assert_eq!(events.shape(), vec![2, 3]);
        assert_eq!(events.read_raw::<f64>().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let m = r.dataset("metrics").unwrap().read_raw::<f64>().unwrap();
        assert!(m[0].is_nan() && m[2].is_infinite());
        assert_eq!(r.dataset("call_counts").unwrap().read_raw::<i64>().unwrap(), vec![1, 2, 3]);
        let dup = g.group("regions/a|b c #2").unwrap();
        assert_eq!(dup.attr("group_id").unwrap().read_scalar::<i64>().unwrap(), 1);
        let custom = g.group("regions/custom").unwrap();
        assert_eq!(custom.dataset("metrics").unwrap().shape(), vec![0, 3]);
        let mn: Vec<VarLenUnicode> = custom.attr("metric_names").unwrap().read_raw().unwrap();
        assert!(mn.is_empty());
        drop(f);
        std::fs::remove_file(path).unwrap();
    }
}
