//! The write after a termination signal (on the writer thread started at setup): the
//! statistics and metadata first, then the same with the call paths, then every call in a
//! raw dump, then the profile in its layout (see `route::write_after_signal` and docs/signals.md).

use super::*;

/// The raw dump of the write after a signal once complete.
static DUMPED: Mutex<Option<std::path::PathBuf>> = Mutex::new(None);
/// The raw dump being written (begun, not yet complete).
static DUMPING: Mutex<Option<std::path::PathBuf>> = Mutex::new(None);

fn dumped_dir() -> Option<std::path::PathBuf> {
    DUMPED.try_lock().and_then(|g| g.clone())
}

/// The raw dump begun and not complete, if it is still there (one whose write failed was
/// removed).
fn dumping_dir() -> Option<std::path::PathBuf> {
    DUMPING.try_lock().and_then(|g| g.clone()).filter(|d| d.is_dir())
}

/// The write after a signal did not finish in time (on the watcher, the writer still busy):
/// the files still being written are removed, and the line says what stays.
pub(super) fn signal_write_cut_short() -> (String, bool) {
    // From here on nothing is moved into place: what is, `route::in_place` names.
    let removed = crate::placement::abandon_unfinished();
    let placed = route::in_place();
    let target = SIGNAL_TARGET.try_lock().and_then(|g| g.clone());
    let recover = |p: &std::path::Path| format!("`sptool recover {}`", target.as_deref().unwrap_or(p).display());
    let mut out = match (&placed, dumped_dir()) {
        (Some((route::Stage::Complete, p)), _) => {
            format!("{} holds the whole profile (signal_write_stage \"complete\"), moved into place as the time ran out", p.display())
        }
        (Some((_, p)), Some(d)) => format!(
            "{} holds the statistics and metadata (signal_write_stage \"statistics\"), and every call is in the raw dump {}: {} writes the whole profile",
            p.display(),
            d.display(),
            recover(p)
        ),
        (Some((stage, p)), None) => format!(
            "{} holds the statistics, {}metadata but none of the calls (signal_write_stage \"statistics\")",
            p.display(),
            if matches!(stage, route::Stage::Statistics { call_paths: true }) { "call paths and " } else { "" }
        ),
        (None, _) => String::new(),
    };
    if let Some(d) = dumping_dir() {
        out.push_str(&format!("; the raw dump of the calls in {} was cut short: {} writes what it holds and says what it lacks", d.display(), recover(&d)));
    }
    if !removed.is_empty() {
        let dirs: Vec<String> = removed.iter().map(|d| d.display().to_string()).collect();
        let sep = if out.is_empty() { "" } else { "; " };
        out.push_str(&format!("{sep}the half-written file was removed ({})", dirs.join(", ")));
    }
    // Whether anything was kept: the first-stage file or a raw dump (begun or complete).
    let kept = placed.is_some() || dumped_dir().is_some() || dumping_dir().is_some();
    (out, kept)
}

/// The profile's target (for the message when the write after a signal is cut short).
static SIGNAL_TARGET: Mutex<Option<std::path::PathBuf>> = Mutex::new(None);

/// What the raw dump after a signal needs (`route::DumpPlan`): None with the flight recorder,
/// whose spill data holds the calls already.
fn dump_plan(session: &Session, info: &RankInfo, rank: Option<(i64, i64)>) -> Option<route::DumpPlan> {
    if crate::spill::run_dir().is_some() {
        return None;
    }
    let config = &session.config;
    // The names and threads are taken when the calls are dumped (see `write_after_signal`).
    let (names, threads) = (Vec::new(), Vec::new());
    let meta = crate::spill::SpillMeta {
        format_version: crate::spill::FORMAT_VERSION,
        pid: std::process::id() as i64,
        rank: rank.map(|r| r.0),
        size: rank.map(|r| r.1),
        target: config.file_path.clone(),
        verbosity: config.verbosity,
        layout: config.layout.name().to_string(),
        metadata: Vec::new(),
        full_metadata: config.metadata_detail == crate::config::MetadataDetail::Full,
        info: info.clone(),
        clock: session.clock.kind.as_str().into(),
        clock_note: session.clock.note.clone(),
        boot_id: crate::spill::boot_id(),
        started: session.facts.timestamp.clone(),
    };
    Some(route::DumpPlan { meta, names, threads })
}

/// After a termination signal (on an ordinary thread, see `signals`): stop the threads'
/// recording and write what they recorded, each MPI rank its own file (no collective). The
/// file says when the signal came and until when it is complete. Returns the line to print.
pub(super) fn write_after_signal(note: &crate::signals::SignalNote) -> String {
    let mut guard = session();
    match STATE.load(Ordering::Acquire) {
        RUNNING | RUNNING_COUNTERS => {}
        FINALIZED => return format!("{} arrived while the profile was being written (sp_finalize or at exit): that write is complete; ending as the signal asks", note.name),
        _ => return String::new(),
    }
    if !is_setup_process() {
        return String::new();
    }
    let mut session = guard.take().expect("a running profiler has a session");
    // No thread is started from here on: the signal may have interrupted the dynamic loader
    // (a dlopen on another thread), whose lock a new thread's exit waits for.
    crate::model::forbid_helper_threads();
    let mpi = session.mpi.take();
    let target = session.config.file_path.clone();
    let spill = crate::spill::run_dir();
    // One line per job, before writing (mpirun and Slurm kill a job soon after the signal).
    if let Some((0, size)) = route::rank_without_mpi(mpi.as_ref()) {
        let rank0 = output::rank_file_path(&target, 0);
        let pattern = rank0.with_file_name(rank0.file_name().unwrap_or_default().to_string_lossy().replace(".rank0.h5", ".rank*.h5"));
        let mut line = format!(
            "{}: MPI cannot gather after a signal, so each of the {size} ranks writes its own file ({}, ...); combine them with `scope_profiler_merge -o {} {}`",
            note.name,
            rank0.display(),
            target.display(),
            pattern.display()
        );
        line.push_str("; each file gets its statistics and metadata first (signal_write_stage \"statistics\"), then its call paths, then its calls");
        let data = if spill.is_some() { "its flight-recorder data" } else { "a raw dump of its calls (when that was done)" };
        line.push_str(&format!(
            "; a rank killed before its file is complete leaves {data} in {}/{}r<N>.*, and `sptool recover {}` writes the whole job",
            crate::spill::spill_parent(&target).display(),
            crate::spill::dir_prefix(&target),
            target.display()
        ));
        warn::always(&line);
    }
    // The threads go on calling until the process ends: their refused calls are counted, not
    // warned about, and the calls open at the stop are counted in the file (open_calls).
    warn::mark_seen(&format!("status:{}", Status::Finalized.code()));
    let rank = route::rank_without_mpi(mpi.as_ref());
    SIGNAL_TARGET.lock().replace(target.clone());
    let since = || (clock::monotonic_ns() - note.time_ns) as f64 / 1e6;
    let signal_attrs = || {
        vec![
            ("ended_by_signal".to_string(), crate::model::AttrValue::Str(note.name.clone())),
            ("signal_time_ns".to_string(), crate::model::AttrValue::Int(note.time_ns)),
            ("complete_until_ns".to_string(), crate::model::AttrValue::Int(STOPPED_NS.load(Ordering::Acquire))),
        ]
    };
    let (staged_ms, paths_ms, dumped_ms, dump_bytes) = (std::cell::Cell::new(None), std::cell::Cell::new(None), std::cell::Cell::new(None), std::cell::Cell::new(0u64));
    let dump_started = std::cell::Cell::new(None::<f64>);
    let mut staged = |stage: route::Stage, path: &std::path::Path| match stage {
        route::Stage::Statistics { call_paths } => {
            let again = staged_ms.get().is_some();
            if !again {
                staged_ms.set(Some(since()));
            }
            if call_paths {
                let t = since();
                paths_ms.set(Some(t));
                if session.config.verbosity >= 2 && again {
                    // Now: a launcher's SIGKILL may come before the line at the end.
                    warn::always(&format!(
                        "{}: statistics in place after {:.1} ms, with the call paths (built in {:.1} ms: {}) after {t:.1} ms",
                        note.name,
                        staged_ms.get().unwrap_or(t),
                        crate::callpath::LAST_BUILD_NS.load(Ordering::Relaxed) as f64 / 1e6,
                        crate::callpath::last_build_note()
                    ));
                }
            }
        }
        route::Stage::Dumping => {
            DUMPING.lock().replace(path.to_path_buf());
            dump_started.set(Some(since()));
        }
        route::Stage::Dumped { bytes } => {
            DUMPING.lock().take();
            DUMPED.lock().replace(path.to_path_buf());
            let t = since();
            dumped_ms.set(Some(t));
            dump_bytes.set(bytes);
            if session.config.verbosity >= 2 {
                // Now: a launcher's SIGKILL may come before the line at the end.
                let from = dump_started.get().unwrap_or(t);
                warn::always(&format!(
                    "{}: statistics in place after {}, with the call paths after {}, every call in the raw dump {} after {t:.1} ms ({:.1} MB in {:.1} ms, {:.2} GB/s)",
                    note.name,
                    staged_ms.get().map_or("-".to_string(), |s| format!("{s:.1} ms")),
                    paths_ms.get().map_or("-".to_string(), |s| format!("{s:.1} ms")),
                    path.display(),
                    bytes as f64 / 1e6,
                    t - from,
                    bytes as f64 / 1e9 / ((t - from) / 1e3).max(1e-6)
                ));
            }
        }
        route::Stage::Complete => {
            DUMPED.lock().take();
        }
    };
    let run = output::RunContext { config: &session.config, facts: &session.facts };
    let mut dumped = None;
    let mut collected_early = None;
    let mut profile = {
        let mut plan = dump_plan(&session, &session.info, rank);
        // Called before the call paths are built and again after (`take_local_profile_with`).
        let mut early = |p: &RankProfile, records: &[ThreadRecord], timebase: &clock::Timebase| {
            if collected_early.is_none() {
                collected_early = Some(since());
            }
            let mut p_info = p.info.clone();
            p_info.extra.extend(signal_attrs());
            // The first stage's profile: this one with the signal's attributes.
            let first = RankProfile { info: p_info.clone(), likwid: p.likwid.clone(), counters: p.counters.clone(), mpi: p.mpi.clone(), samples: p.samples.clone(), call_paths: p.call_paths.clone(), regions: Vec::new() };
            let first = RankProfile { regions: p.regions.iter().map(|r| crate::model::RegionData { name: r.name.clone(), stats: r.stats.clone(), open_calls: r.open_calls, dropped_calls: r.dropped_calls, source: r.source.clone(), throttled: r.throttled, ..Default::default() }).collect(), ..first };
            // The calls are dumped once the call paths are in place.
            let plan = if p.call_paths.is_some() { plan.take() } else { None };
            let plan = plan.map(|mut d| {
                d.meta.info = p_info;
                // The regions named at finalize (OpenMP constructs, instrumented functions)
                // have their names by now.
                d.names = REGISTRY.names().into_iter().enumerate().map(|(id, n)| (id as u32, n)).collect();
                d.threads = records.iter().map(|r| (r.index, r.os_tid)).collect();
                d
            });
            if let Some(d) = route::write_early_after_signal(run, rank, &first, records, timebase, signal_attrs(), plan, &mut staged) {
                dumped = Some(d);
            }
        };
        take_local_profile_with(session.info.clone(), &session.clock, false, Some(&mut early as Early<'_>))
    };
    write_sample_file(&session.config, &profile);
    let collected_ms = since();
    let stopped = STOPPED_NS.load(Ordering::Acquire);
    let refused_before = REFUSED.load(Ordering::Relaxed);
    let attrs = signal_attrs();
    profile.info.extra.extend(attrs.iter().cloned());
    let result = route::write_after_signal(run, mpi, profile, attrs, dumped, &mut staged);
    end_flight_recorder(result.is_ok());
    let after_ms = (stopped - note.time_ns) as f64 / 1e6;
    if session.config.verbosity >= 2 {
        let ms = |t: Option<f64>| t.map_or("-".to_string(), |t| format!("{t:.1} ms"));
        let dumped = match dumped_ms.get() {
            Some(t) => {
                let secs = ((t - dump_started.get().unwrap_or(t)) / 1e3).max(1e-6);
                format!("{} ({:.1} MB, {:.2} GB/s)", ms(Some(t)), dump_bytes.get() as f64 / 1e6, dump_bytes.get() as f64 / 1e9 / secs)
            }
            None => "-".to_string(),
        };
        warn::always(&format!(
            "{}: the write after the signal: threads stopped after {after_ms:.1} ms, collected (but the call paths) after {}, statistics in place after {}, calls dumped after {dumped}, call paths built in {:.1} ms, profile collected after {collected_ms:.1} ms, statistics with call paths in place after {}, profile in its layout after {:.1} ms",
            note.name,
            ms(collected_early),
            ms(staged_ms.get()),
            crate::callpath::LAST_BUILD_NS.load(Ordering::Relaxed) as f64 / 1e6,
            ms(paths_ms.get()),
            since()
        ));
    }
    let refused = REFUSED.load(Ordering::Relaxed).max(refused_before);
    match result {
        Ok(route::SignalWrite::Single(path)) => format!(
            "{}: profile written to {}; it holds every call completed up to {after_ms:.1} ms after the signal (complete_until_ns), {refused} start/stop call(s) after that were not recorded",
            note.name,
            path.display()
        ),
        // Rank 0 said it for the job; a rank whose write failed says so itself (below).
        Ok(route::SignalWrite::Rank { .. }) => String::new(),
        Err(e) => match dumped_dir() {
            Some(d) => format!("{}: the profile was NOT written: {e}; every call is in the raw dump {}: `sptool recover {}` writes the profile", note.name, d.display(), target.display()),
            None => format!("{}: the profile was NOT written: {e}", note.name),
        },
    }
}
