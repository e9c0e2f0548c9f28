//! Counter sources behind one small interface that the recorder calls at region start and
//! stop: LIKWID markers, Linux perf events (per thread, per region), and the analytic
//! annotations (`sp_region_add_flops` / `sp_region_add_bytes`).
//!
//! - `Counters::begin` runs once at setup; `None` means no source needs the hot path (the
//!   plain fast path is then untouched).
//! - `on_start(t, id)` runs before the start timestamp, `on_stop(t, id)` after the stop
//!   timestamp, on the recording thread, with that thread's `ThreadCounters`.
//! - `finish` + `collect` run at finalize and give plain per-region results (`RankCounters`)
//!   that the layout writer stores (`writer::counters`).

pub mod events;
pub mod perf;
pub mod select;

use crate::likwid;
use crate::model::{AnnotatedRegion, FlopsFormula, LikwidRun, PerfRegion, RankCounters};
use events::{EventList, ThisMachine};
use perf::{PerfConfig, PerfThread};
use select::{Chosen, Globs};

/// The counter sources of a run, shared by every recording thread.
pub struct Counters {
    pub likwid: Option<likwid::Session>,
    pub perf: Option<PerfConfig>,
    /// The regions that count perf events (`SCOPE_PROFILER_PERF_REGIONS`); None: every region.
    pub chosen: Option<Chosen>,
    pub formulas: Vec<FlopsFormula>,
    /// The events in the order they were asked for (the group puts hardware events first).
    pub requested: Vec<String>,
}

/// What a run's counters need from setup.
pub struct CounterRequest<'a> {
    pub use_likwid: bool,
    /// The `SCOPE_PROFILER_PERF_EVENTS` list (empty: none).
    pub perf_events: &'a str,
    /// The `SCOPE_PROFILER_PERF_REGIONS` globs (empty: every region counts).
    pub perf_regions: &'a str,
}

impl Counters {
    /// Start the requested sources; warnings for what cannot be had. `None` if none is left.
    pub fn begin(req: &CounterRequest) -> Option<Counters> {
        let likwid = likwid::Session::begin(req.use_likwid);
        let (perf, formulas, requested) =
            if req.perf_events.trim().is_empty() { (None, Vec::new(), Vec::new()) } else { Self::begin_perf(req.perf_events) };
        if likwid.is_none() && perf.is_none() {
            return None;
        }
        let chosen = perf.as_ref().and_then(|_| Globs::parse(req.perf_regions)).map(Chosen::new);
        Some(Counters { likwid, perf, chosen, formulas, requested })
    }

    fn begin_perf(list: &str) -> (Option<PerfConfig>, Vec<FlopsFormula>, Vec<String>) {
        let EventList { events, formulas, errors } = events::parse_list(list, &ThisMachine);
        let requested: Vec<String> = events.iter().map(|e| e.name.clone()).collect();
        for e in &errors {
            crate::warn::once(&format!("perf-parse:{e}"), &format!("{e}; ignored, the other events are counted"));
        }
        let perf = std::panic::catch_unwind(|| PerfConfig::probe(events)).unwrap_or_else(|_| {
            crate::warn::once("perf-setup", "internal error while opening perf events; timings only");
            None
        });
        // A FLOP set whose events did not all open gives no counted FLOPs.
        let opened: Vec<&str> = perf.as_ref().map(|p| p.events.iter().map(|e| e.name.as_str()).collect()).unwrap_or_default();
        let formulas = formulas.into_iter().filter(|f| f.terms.iter().all(|(n, _)| opened.contains(&n.as_str()))).collect();
        (perf, formulas, requested)
    }

    /// A new region (dense ids, in creation order), under the registry lock.
    pub fn region_created(&self, id: u32, name: &str) {
        if let Some(l) = &self.likwid {
            l.region_created(id, name);
        }
        if let Some(c) = &self.chosen {
            c.region_created(id, name);
        }
    }

    /// Does region `id` count perf events? (Every region, unless some were chosen.)
    #[inline(always)]
    fn perf_counts(&self, id: u32) -> bool {
        self.chosen.as_ref().is_none_or(|c| c.counts(id))
    }

    #[inline]
    pub fn on_start(&self, t: &mut ThreadCounters, id: u32) {
        if let Some(l) = &self.likwid {
            l.start(id);
        }
        if let Some(p) = &self.perf {
            // A region not chosen reads nothing; a thread opens its group at its first chosen one.
            if self.perf_counts(id) {
                t.perf.get_or_insert_with(|| Box::new(PerfThread::open(p))).start(id);
            }
        }
    }

    #[inline]
    pub fn on_stop(&self, t: &mut ThreadCounters, id: u32) {
        if let Some(p) = &mut t.perf {
            if self.perf_counts(id) {
                p.stop(id);
            }
        }
        if let Some(l) = &self.likwid {
            l.stop(id);
        }
    }

    /// A stop of `id` while `inner` (innermost first) were still open inside it: the inner
    /// calls are closed unrecorded, `id` is recorded.
    pub fn on_stop_out_of_order(&self, t: &mut ThreadCounters, inner: &[u32], id: u32) {
        if let Some(l) = &self.likwid {
            inner.iter().for_each(|&i| l.stop(i));
        }
        self.on_stop(t, id);
    }

    /// End of recording (all threads quiesced): LIKWID's read-back, and what `collect` needs.
    pub fn finish(self) -> (LikwidRun, Finished) {
        if self.chosen.as_ref().is_some_and(|c| !c.any()) {
            crate::warn::once(
                "perf-regions-none",
                "SCOPE_PROFILER_PERF_REGIONS matched no region: no perf events were counted (the patterns must match whole names; see docs/perf_events.md)",
            );
        }
        let lk = self.likwid.map(|l| l.finish()).unwrap_or_default();
        let group: Vec<String> = self.perf.map(|p| p.events.iter().map(|e| e.name.clone()).collect()).unwrap_or_default();
        // Report the events in the order asked for.
        let mut order: Vec<usize> = (0..group.len()).collect();
        order.sort_by_key(|&i| self.requested.iter().position(|r| *r == group[i]).unwrap_or(usize::MAX));
        let event_names = order.iter().map(|&i| group[i].clone()).collect();
        (lk, Finished { event_names, group_index: order, formulas: self.formulas })
    }
}

/// What `collect` needs from the run's counter sources.
#[derive(Default)]
pub struct Finished {
    /// The counted events, in the order asked for.
    pub event_names: Vec<String>,
    /// Position in the thread's group of each of `event_names` (empty: the same order).
    pub group_index: Vec<usize>,
    pub formulas: Vec<FlopsFormula>,
}

/// One thread's counter state (in its `ThreadData`).
#[derive(Default)]
pub struct ThreadCounters {
    pub perf: Option<Box<PerfThread>>,
    /// Analytic annotations per region id: [flops, bytes, flops set?, bytes set?].
    pub annotations: Vec<[f64; 4]>,
}

impl ThreadCounters {
    /// Add `value` to the region's FLOPs (`which` 0) or bytes (1) on this thread.
    #[inline]
    pub fn annotate(&mut self, id: u32, which: usize, value: f64) {
        let i = id as usize;
        if i >= self.annotations.len() {
            self.grow_annotations(i + 1);
        }
        let a = &mut self.annotations[i];
        a[which] += value;
        a[which + 2] = 1.0;
    }

    #[cold]
    fn grow_annotations(&mut self, len: usize) {
        self.annotations.resize(len.max(16), [0.0; 4]);
    }
}

/// One thread's counters as taken at finalize: its position in the file's thread ids (-1 if it
/// recorded no call) and its state.
pub struct ThreadTake {
    pub thread_id: i64,
    pub counters: ThreadCounters,
}

/// Turn the threads' counter states into per-region results (regions in id order; ids that
/// share a name are one region, see `registry::name_groups`).
pub fn collect(names: &[String], fin: &Finished, mut threads: Vec<ThreadTake>) -> RankCounters {
    // Rows by thread id, as the timings list their threads (threads are handed over in the
    // order they ended, which differs from run to run).
    threads.sort_by_key(|t| t.thread_id);
    let n = fin.event_names.len();
    let mut out = RankCounters { event_names: fin.event_names.clone(), formulas: fin.formulas.clone(), ..Default::default() };
    for (name, ids) in crate::registry::name_groups(names) {
        if n > 0 {
            let mut r = PerfRegion { name: name.to_string(), totals: vec![0.0; n], ..Default::default() };
            let (mut en, mut run) = (0.0, 0.0);
            for t in &threads {
                let Some(p) = &t.counters.perf else { continue };
                if p.num_events() != n {
                    continue;
                }
                let stride = n + 3;
                // The thread's values of the region, over its ids.
                let mut v = vec![0.0; stride];
                for &id in &ids {
                    let id = id as usize;
                    if let Some(x) = p.totals.get(id * stride..(id + 1) * stride) {
                        v.iter_mut().zip(x).for_each(|(a, b)| *a += b);
                    }
                }
                let calls = v[n + 2] as u64;
                if calls == 0 {
                    continue;
                }
                r.calls += calls;
                let values: Vec<f64> = (0..n).map(|k| v[fin.group_index.get(k).copied().unwrap_or(k)]).collect();
                for (t, x) in r.totals.iter_mut().zip(&values) {
                    *t += x;
                }
                en += v[n];
                run += v[n + 1];
                r.thread_ids.push(t.thread_id);
                r.thread_values.push(values);
                r.thread_running_fraction.push(if v[n] > 0.0 { v[n + 1] / v[n] } else { 0.0 });
                r.thread_calls.push(calls);
            }
            if r.calls > 0 {
                r.running_fraction = if en > 0.0 { run / en } else { 0.0 };
                if run == 0.0 && en > 0.0 {
                    crate::warn::once(
                        "perf-never-scheduled",
                        "the perf event group was never scheduled on the PMU (more hardware events than counters?): its counts are 0, with running fraction 0",
                    );
                }
                for f in &fin.formulas {
                    let flops = f
                        .terms
                        .iter()
                        .map(|(ev, w)| fin.event_names.iter().position(|e| e == ev).map(|i| r.totals[i] * w).unwrap_or(0.0))
                        .sum();
                    r.counted_flops.push((f.set.clone(), flops));
                }
                out.perf.push(r);
            }
        }
        let mut a = AnnotatedRegion { name: name.to_string(), ..Default::default() };
        for t in &threads {
            let mut v = [0.0; 4];
            for &id in &ids {
                if let Some(x) = t.counters.annotations.get(id as usize) {
                    v.iter_mut().zip(x.iter()).for_each(|(a, b)| *a += b);
                }
            }
            if v[2] == 0.0 && v[3] == 0.0 {
                continue;
            }
            if v[2] != 0.0 {
                *a.flops.get_or_insert(0.0) += v[0];
            }
            if v[3] != 0.0 {
                *a.bytes.get_or_insert(0.0) += v[1];
            }
            a.thread_ids.push(t.thread_id);
            a.thread_flops.push(v[0]);
            a.thread_bytes.push(v[1]);
        }
        // Each thread's total is finite (`sp_region_add_*` refuses what would not be); their sum
        // may still not be: then the rank's total is left out, with a warning, and the
        // threads' totals are kept.
        for (total, what) in [(&mut a.flops, "FLOP"), (&mut a.bytes, "byte")] {
            if total.is_some_and(|t| !t.is_finite()) {
                crate::warn::once(&format!("annotation-overflow:{name}"), &format!("region '{name}': the {what} counts of its threads add up to more than a double holds; the rank's total is left out (each thread's is kept)"));
                *total = None;
            }
        }
        if a.flops.is_some() || a.bytes.is_some() || !a.thread_ids.is_empty() {
            out.annotated.push(a);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FLOPs from a FLOP set's formula, applied to a region's scaled totals. The events are
    /// real software events (this VM has no FLOP events); the totals are set by hand.
    #[test]
    fn counted_flops_apply_the_formula_to_the_totals() {
        let config = PerfConfig {
            events: events::parse_list("task-clock,page-faults", &ThisMachine).events,
        };
        let mut p = PerfThread::open(&config);
        assert!(!p.failed, "software events open here");
        // Region 1: totals (task-clock 100, page-faults 10), enabled 50, running 25, 3 calls.
        p.totals = vec![0.0; 5];
        p.totals.extend([100.0, 10.0, 50.0, 25.0, 3.0]);
        let fin = Finished {
            event_names: vec!["task-clock".into(), "page-faults".into()],
            group_index: vec![],
            formulas: vec![FlopsFormula { set: "flops".into(), terms: vec![("task-clock".into(), 2.0), ("page-faults".into(), 8.0)] }],
        };
        let t = ThreadCounters { perf: Some(Box::new(p)), annotations: Vec::new() };
        let r = collect(&["a".into(), "b".into()], &fin, vec![ThreadTake { thread_id: 0, counters: t }]);
        assert_eq!(r.perf.len(), 1, "region a has no calls counted");
        let b = &r.perf[0];
        assert_eq!((b.name.as_str(), b.calls), ("b", 3));
        assert_eq!(b.totals, vec![100.0, 10.0]);
        assert_eq!(b.running_fraction, 0.5);
        assert_eq!(b.counted_flops, vec![("flops".to_string(), 2.0 * 100.0 + 8.0 * 10.0)]);
        assert_eq!(b.thread_values, vec![vec![100.0, 10.0]]);
        // Reported in another order than the group's (hardware events lead the group, the file
        // keeps the order asked for): values follow their names.
        let mut p = PerfThread::open(&config);
        p.totals = vec![100.0, 10.0, 50.0, 50.0, 1.0];
        let fin = Finished { event_names: vec!["page-faults".into(), "task-clock".into()], group_index: vec![1, 0], formulas: vec![] };
        let t = ThreadCounters { perf: Some(Box::new(p)), annotations: Vec::new() };
        let r = collect(&["a".into()], &fin, vec![ThreadTake { thread_id: 0, counters: t }]);
        assert_eq!(r.perf[0].totals, vec![10.0, 100.0]);
        assert_eq!(r.perf[0].thread_values, vec![vec![10.0, 100.0]]);
    }

    #[test]
    fn annotations_sum_over_threads() {
        let mut t0 = ThreadCounters::default();
        t0.annotate(1, 0, 10.0);
        t0.annotate(1, 0, 5.0);
        t0.annotate(1, 1, 8.0);
        let mut t1 = ThreadCounters::default();
        t1.annotate(1, 0, 1.0);
        t1.annotate(0, 1, 3.0);
        let names = vec!["a".to_string(), "b".to_string()];
        let r = collect(
            &names,
            &Finished::default(),
            vec![ThreadTake { thread_id: 0, counters: t0 }, ThreadTake { thread_id: 1, counters: t1 }],
        );
        assert!(r.perf.is_empty());
        assert_eq!(r.annotated.len(), 2);
        assert_eq!((r.annotated[0].name.as_str(), r.annotated[0].flops, r.annotated[0].bytes), ("a", None, Some(3.0)));
        assert_eq!((r.annotated[1].flops, r.annotated[1].bytes), (Some(16.0), Some(8.0)));
        assert_eq!(r.annotated[1].thread_ids, vec![0, 1]);
        assert_eq!(r.annotated[1].thread_flops, vec![15.0, 1.0]);
    }
}
