//! Roofline points from LIKWID metrics: for every selected (rank, region)
//! with a FLOP-rate metric and a memory-bandwidth metric, the rates summed
//! over the region's hardware threads, and the intensity GFLOP/s / GB/s
//! (= FLOP/byte). Regions annotated with both sp_region_add_flops and
//! sp_region_add_bytes are placed too (group "annotations": their FLOPs and
//! bytes over the region's summed call time). Ceilings are the given peaks,
//! or else the largest observed values, flagged as empirical.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::model::{LikwidRegion, Profile};

#[derive(Clone, Debug)]
pub struct Point {
    pub rank: u32,
    pub region: String,
    pub group: String,
    pub gflops: f64,
    pub gbs: f64,
    pub intensity: f64,
    pub runtime_s: f64,
    pub flops_metric: String,
    pub bandwidth_metric: String,
}

#[derive(Clone, Debug)]
pub struct Roofline {
    pub points: Vec<Point>,
    pub peak_gflops: f64,
    pub peak_gbs: f64,
    pub empirical_flops: bool,
    pub empirical_bandwidth: bool,
}

impl Roofline {
    /// Attainable GFLOP/s at `intensity` FLOP/byte.
    pub fn roof(&self, intensity: f64) -> f64 {
        self.peak_gflops.min(self.peak_gbs * intensity)
    }

    /// The intensity where the bandwidth roof meets the compute roof.
    pub fn ridge(&self) -> f64 {
        self.peak_gflops / self.peak_gbs
    }

    /// Intensity range shown: the points and the ridge, with margins.
    pub fn x_range(&self) -> (f64, f64) {
        let xs = self.points.iter().map(|p| p.intensity).chain([self.ridge()]);
        let (lo, hi) = xs.fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
        (lo / 4.0, hi * 4.0)
    }
}

/// GFLOP/s per unit of a FLOP-rate metric, from the unit in its name.
pub fn flops_factor(metric: &str) -> Option<f64> {
    let m = metric.to_lowercase().replace(' ', "");
    [("gflop/s", 1.0), ("mflop/s", 1e-3), ("kflop/s", 1e-6), ("flop/s", 1e-9)]
        .into_iter()
        .find(|(unit, _)| m.contains(unit))
        .map(|(_, f)| f)
}

/// GB/s per unit of a bandwidth metric (`MBytes/s`, `GiB/s`, ...).
pub fn bandwidth_factor(metric: &str) -> Option<f64> {
    let m = metric.to_lowercase().replace(' ', "");
    let re = regex::Regex::new(r"([tgmk]?i?)b(ytes?)?/s").ok()?;
    let prefix = re.captures(&m)?.get(1)?.as_str().to_string();
    Some(match prefix.as_str() {
        "t" => 1e3,
        "g" => 1.0,
        "m" => 1e-3,
        "k" => 1e-6,
        "ti" => 1024.0,
        "gi" => 1073741824.0 / 1e9,
        "mi" => 1048576.0 / 1e9,
        "ki" => 1024.0 / 1e9,
        "" => 1e-9,
        _ => return None,
    })
}

fn is_flops(name: &str) -> bool {
    name.to_lowercase().replace(' ', "").contains("flop/s")
}

fn is_bandwidth(name: &str) -> bool {
    let m = name.to_lowercase();
    m.contains("bandwidth") && m.contains("/s")
}

/// Sum of a metric over the hardware threads, NaNs skipped.
fn metric_sum(r: &LikwidRegion, name: &str) -> Option<f64> {
    let i = r.metric_names.iter().position(|m| m == name)?;
    let sum: f64 = r.metrics.get(i)?.iter().filter(|v| v.is_finite()).sum();
    (sum.is_finite() && sum > 0.0).then_some(sum)
}

pub struct Request<'a> {
    pub flops_metric: Option<&'a str>,
    pub bandwidth_metric: Option<&'a str>,
    pub peak_gflops: Option<f64>,
    pub peak_gbs: Option<f64>,
}

/// Values a log-scale roofline can place: positive, finite, and far enough from 0 and from
/// the largest float that its margins (and the roof's products) stay finite. Files can hold
/// anything (an infinite FLOP count, a damaged metric); such points are left out, with a note.
pub const PLOTTABLE: std::ops::RangeInclusive<f64> = 1e-30..=1e30;

fn plottable(v: f64) -> bool {
    PLOTTABLE.contains(&v)
}

/// Compute the roofline of the selected regions of `profile`.
pub fn compute(profile: &Profile, filter: &Filter, req: &Request) -> Result<Roofline> {
    let path = &profile.path;
    for (value, option) in [(req.peak_gflops, "--peak-flops"), (req.peak_gbs, "--peak-bandwidth")] {
        if let Some(v) = value {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::new(format!("{option} must be a positive number, got {v}")));
            }
            if !plottable(v) {
                return Err(Error::new(format!("{option} {v:e} is out of range ({:e} to {:e})", PLOTTABLE.start(), PLOTTABLE.end())));
            }
        }
    }
    let selected: Vec<&LikwidRegion> =
        profile.likwid.iter().filter(|r| filter.rank(r.rank) && filter.name(&r.tag)).collect();
    let annotated = annotated_points(profile, filter);
    if selected.is_empty() && !annotated.is_empty() {
        return finish(profile, annotated, req);
    }
    if selected.is_empty() {
        let why = if profile.likwid.is_empty() {
            "has no LIKWID counters; a roofline needs a LIKWID group with FLOP-rate and bandwidth metrics (e.g. MEM_DP), or regions annotated with sp_region_add_flops and sp_region_add_bytes"
        } else {
            "has no LIKWID region matching the selection"
        };
        return Err(Error::in_file(path, why));
    }
    let all_metrics: BTreeSet<&str> =
        selected.iter().flat_map(|r| r.metric_names.iter().map(String::as_str)).collect();
    let listing = || {
        if all_metrics.is_empty() {
            "the selected regions have no metrics".to_string()
        } else {
            format!("available metrics: {}", all_metrics.iter().copied().collect::<Vec<_>>().join(", "))
        }
    };
    for (name, option) in [(req.flops_metric, "--flops-metric"), (req.bandwidth_metric, "--bandwidth-metric")] {
        if let Some(name) = name {
            if !all_metrics.contains(name) {
                return Err(Error::in_file(path, format!("unknown metric '{name}' for {option}; {}", listing())));
            }
        }
    }
    if let Some(name) = req.flops_metric {
        flops_factor(name).ok_or_else(|| {
            Error::in_file(path, format!("metric '{name}' for --flops-metric has no FLOP/s unit in its name"))
        })?;
    }
    if let Some(name) = req.bandwidth_metric {
        bandwidth_factor(name).ok_or_else(|| {
            Error::in_file(path, format!("metric '{name}' for --bandwidth-metric has no bytes/s unit in its name"))
        })?;
    }

    let mut points = Vec::new();
    for r in &selected {
        let flops = req.flops_metric.map(str::to_string).or_else(|| {
            r.metric_names.iter().find(|m| is_flops(m) && flops_factor(m).is_some()).cloned()
        });
        let bw = req.bandwidth_metric.map(str::to_string).or_else(|| {
            r.metric_names.iter().find(|m| is_bandwidth(m) && bandwidth_factor(m).is_some()).cloned()
        });
        let (Some(flops), Some(bw)) = (flops, bw) else { continue };
        let (Some(f), Some(b)) = (metric_sum(r, &flops), metric_sum(r, &bw)) else { continue };
        let (Some(ff), Some(bf)) = (flops_factor(&flops), bandwidth_factor(&bw)) else { continue };
        let (gflops, gbs) = (f * ff, b * bf);
        points.push(Point {
            rank: r.rank,
            region: r.tag.clone(),
            group: r.group_name.clone(),
            gflops,
            gbs,
            intensity: gflops / gbs,
            runtime_s: r.runtime(),
            flops_metric: flops,
            bandwidth_metric: bw,
        });
    }
    points.extend(annotated);
    if points.is_empty() {
        return Err(Error::in_file(
            path,
            format!(
                "no selected LIKWID region has both a positive FLOP-rate metric and a bandwidth metric; \
                 pick them with --flops-metric/--bandwidth-metric ({})",
                listing()
            ),
        ));
    }
    finish(profile, points, req)
}

/// Regions with analytic FLOPs and bytes and a positive time.
fn annotated_points(profile: &Profile, filter: &Filter) -> Vec<Point> {
    crate::counters::work_rows(profile, filter)
        .into_iter()
        .filter_map(|w| {
            // Zero FLOPs or bytes is no point; anything else (NaN, infinite, absurd) is one
            // that `finish` leaves out with a note.
            let (gflops, gbs) = (w.rate(w.flops)?, w.gbytes_per_s()?);
            (gflops != 0.0 && gbs != 0.0).then(|| Point {
                rank: w.rank,
                region: w.name.clone(),
                group: "annotations".into(),
                gflops,
                gbs,
                intensity: gflops / gbs,
                runtime_s: w.time_s,
                flops_metric: "sp_region_add_flops".into(),
                bandwidth_metric: "sp_region_add_bytes".into(),
            })
        })
        .collect()
}

fn finish(profile: &Profile, points: Vec<Point>, req: &Request) -> Result<Roofline> {
    let (mut points, left): (Vec<Point>, Vec<Point>) =
        points.into_iter().partition(|p| plottable(p.gflops) && plottable(p.gbs) && plottable(p.intensity));
    if !left.is_empty() {
        let which: Vec<String> = left.iter().take(5).map(|p| format!("{} on rank {}", crate::fmt::shorten(&p.region, 60), p.rank)).collect();
        let more = if left.len() > which.len() { format!(" and {} more", left.len() - which.len()) } else { String::new() };
        eprintln!(
            "sptool: warning: {}: {} point(s) left out of the roofline, their FLOP rate, bandwidth or intensity is not a finite number between {:e} and {:e}: {}{more}",
            profile.path.display(),
            left.len(),
            PLOTTABLE.start(),
            PLOTTABLE.end(),
            which.join(", ")
        );
    }
    if points.is_empty() {
        return Err(Error::in_file(&profile.path, "no selected region has a finite, positive FLOP rate and bandwidth to place on a roofline"));
    }
    points.sort_by(|a, b| a.rank.cmp(&b.rank).then_with(|| a.region.cmp(&b.region)));
    let max_f = points.iter().map(|p| p.gflops).fold(0.0, f64::max);
    let max_b = points.iter().map(|p| p.gbs).fold(0.0, f64::max);
    Ok(Roofline {
        peak_gflops: req.peak_gflops.unwrap_or(max_f),
        peak_gbs: req.peak_gbs.unwrap_or(max_b),
        empirical_flops: req.peak_gflops.is_none(),
        empirical_bandwidth: req.peak_gbs.is_none(),
        points,
    })
}

/// Points and roof for other plotting tools.
pub fn to_json(profile: &Profile, roof: &Roofline) -> Value {
    let (lo, hi) = roof.x_range();
    let n = 160;
    let curve: Vec<Value> = (0..n)
        .map(|i| {
            let x = lo * (hi / lo).powf(i as f64 / (n - 1) as f64);
            json!({"arithmetic_intensity_flops_per_byte": x, "performance_gflops": roof.roof(x)})
        })
        .collect();
    let points: Vec<Value> = roof
        .points
        .iter()
        .map(|p| {
            json!({
                "rank": p.rank,
                "region": p.region,
                "group": p.group,
                "performance_gflops": p.gflops,
                "bandwidth_gbs": p.gbs,
                "arithmetic_intensity_flops_per_byte": p.intensity,
                "runtime_s": p.runtime_s,
                "flops_metric": p.flops_metric,
                "bandwidth_metric": p.bandwidth_metric,
            })
        })
        .collect();
    json!({
        "file": profile.path.display().to_string(),
        "peak_flops_gflops": roof.peak_gflops,
        "peak_bandwidth_gbs": roof.peak_gbs,
        "empirical_flops_ceiling": roof.empirical_flops,
        "empirical_bandwidth_ceiling": roof.empirical_bandwidth,
        "ridge_point_flops_per_byte": roof.ridge(),
        "points": points,
        "roofline": curve,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(flops_factor("DP [MFLOP/s]"), Some(1e-3));
        assert_eq!(flops_factor("AVX DP [GFLOP/s]"), Some(1.0));
        assert_eq!(flops_factor("CPI"), None);
        assert_eq!(bandwidth_factor("Memory bandwidth [MBytes/s]"), Some(1e-3));
        assert_eq!(bandwidth_factor("L3 bandwidth [GBytes/s]"), Some(1.0));
        assert_eq!(bandwidth_factor("Memory bandwidth [MiB/s]"), Some(1048576.0 / 1e9));
        assert_eq!(bandwidth_factor("Memory data volume [GBytes]"), None);
    }
}
