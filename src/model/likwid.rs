//! LIKWID's results of one process (`LikwidRun`, `RegionResult`, produced by `likwid/`) and
//! their JSON form.
//!
//! JSON has no NaN/inf, and LIKWID produces both (a CPI of 0/0, an unusable counter), so
//! the float arrays go through [`json_float`]: non-finite values become the strings
//! `"nan"`, `"inf"`, `"-inf"`. The core sends `LikwidRun` over MPI as JSON; the helper
//! sends `RegionResult`s back to the parent the same way.

use serde::{Deserialize, Serialize};

/// Counter results of one process (one MPI rank).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LikwidRun {
    /// Every `LIKWID_*` variable of the run, written as string attributes.
    pub env: Vec<(String, String)>,
    pub regions: Vec<RegionResult>,
}

/// Which path produced a region's numbers (the `source` attribute).
pub mod source {
    /// perfmon read-back in the helper process: names, counters, LIKWID's metrics.
    pub const FULL_API: &str = "full_api";
    /// LIKWID's marker file parsed by us; names and metrics from the group file.
    pub const MARKER_FILE: &str = "marker_file";
    /// `likwid_markerGetRegion` snapshot of the setup thread's CPU, taken before close.
    pub const MARKER_API: &str = "marker_api";
}

/// One region of `rank<N>/likwid/regions/<tag>` (see shared/specs/hdf5-layout.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RegionResult {
    /// The real region name (LIKWID's tag mapped back, see `likwid/tags.rs`).
    pub tag: String,
    pub group_id: i64,
    pub group_name: String,
    pub source: String,
    pub event_names: Vec<String>,
    pub counter_names: Vec<String>,
    pub metric_names: Vec<String>,
    pub cpus: Vec<i64>,
    #[serde(with = "json_float::vec")]
    pub times: Vec<f64>,
    pub call_counts: Vec<i64>,
    /// events[e][t]
    #[serde(with = "json_float::matrix")]
    pub events: Vec<Vec<f64>>,
    /// metrics[m][t]
    #[serde(with = "json_float::matrix")]
    pub metrics: Vec<Vec<f64>>,
}

impl RegionResult {
    /// Shapes agree: every per-thread array has one entry per cpu, one row per name.
    pub fn is_consistent(&self) -> bool {
        let t = self.cpus.len();
        self.times.len() == t
            && self.call_counts.len() == t
            && self.events.len() == self.event_names.len()
            && (self.counter_names.is_empty() || self.counter_names.len() == self.event_names.len())
            && self.metrics.len() == self.metric_names.len()
            && self.events.iter().chain(&self.metrics).all(|row| row.len() == t)
    }
}

/// serde helpers that keep NaN and infinities through JSON.
pub mod json_float {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum F {
        Num(f64),
        Text(String),
    }

    fn to_f(x: f64) -> F {
        if x.is_nan() {
            F::Text("nan".into())
        } else if x.is_infinite() {
            F::Text(if x > 0.0 { "inf" } else { "-inf" }.into())
        } else {
            F::Num(x)
        }
    }

    fn from_f<E: serde::de::Error>(f: F) -> Result<f64, E> {
        match f {
            F::Num(x) => Ok(x),
            F::Text(s) => match s.as_str() {
                "nan" => Ok(f64::NAN),
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                other => Err(E::custom(format!("not a number: {other:?}"))),
            },
        }
    }

    pub mod vec {
        use super::*;
        pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
            v.iter().map(|&x| to_f(x)).collect::<Vec<_>>().serialize(s)
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
            Vec::<F>::deserialize(d)?.into_iter().map(from_f).collect()
        }
    }

    pub mod matrix {
        use super::*;
        pub fn serialize<S: Serializer>(m: &[Vec<f64>], s: S) -> Result<S::Ok, S::Error> {
            m.iter().map(|r| r.iter().map(|&x| to_f(x)).collect::<Vec<_>>()).collect::<Vec<_>>().serialize(s)
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<f64>>, D::Error> {
            Vec::<Vec<F>>::deserialize(d)?.into_iter().map(|r| r.into_iter().map(from_f).collect()).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_values_survive_json() {
        let r = RegionResult {
            tag: "a b/ü".into(),
            cpus: vec![0, 1],
            times: vec![f64::NAN, 1.5],
            call_counts: vec![1, 2],
            event_names: vec!["E".into()],
            counter_names: vec!["PMC0".into()],
            events: vec![vec![f64::INFINITY, f64::NEG_INFINITY]],
            metric_names: vec!["CPI".into()],
            metrics: vec![vec![2.0, f64::NAN]],
            ..Default::default()
        };
        let run = LikwidRun { env: vec![("LIKWID_EVENTS".into(), "FLOPS_DP".into())], regions: vec![r] };
        let text = serde_json::to_string(&run).unwrap();
        let back: LikwidRun = serde_json::from_str(&text).unwrap();
        let b = &back.regions[0];
        assert!(b.times[0].is_nan() && b.times[1] == 1.5);
        assert_eq!(b.events[0], vec![f64::INFINITY, f64::NEG_INFINITY]);
        assert!(b.metrics[0][1].is_nan() && b.metrics[0][0] == 2.0);
        assert_eq!(b.tag, "a b/ü");
        assert!(b.is_consistent());
    }

    #[test]
    fn garbage_text_is_rejected() {
        let bad = r#"{"tag":"x","group_id":0,"group_name":"","source":"","event_names":[],"counter_names":[],
            "metric_names":[],"cpus":[0],"times":["oops"],"call_counts":[1],"events":[],"metrics":[]}"#;
        assert!(serde_json::from_str::<RegionResult>(bad).is_err());
    }
}
