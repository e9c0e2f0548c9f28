//! Settings of a run: defaults, overridden by the environment, overridden by explicit options.

use std::path::PathBuf;

pub const DEFAULT_FILE: &str = "profiling_data.h5";

/// What `sp_setup` was given explicitly; `None` means "not set, ask the environment".
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub file_path: Option<PathBuf>,
    pub use_likwid: Option<bool>,
    pub verbosity: Option<u32>,
    pub language: Option<String>,
    /// Fortran handle (`MPI_Fint`) of the communicator to profile over.
    pub mpi_comm: Option<i32>,
    /// Clock: "auto", "tsc" or "monotonic" (see clock.rs).
    pub clock: Option<String>,
    /// perf events to count per region (`SCOPE_PROFILER_PERF_EVENTS` syntax).
    pub perf_events: Option<String>,
    /// The regions that count them (`SCOPE_PROFILER_PERF_REGIONS` globs).
    pub perf_regions: Option<String>,
    /// How regions are stored (`regions`, `columnar`, `aggregate`), unparsed.
    pub layout: Option<String>,
}

/// Which metadata to record: `Full` adds host, user, paths, modules and SLURM_* variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataDetail {
    Minimal,
    Full,
}

/// The settings in force for this run.
#[derive(Debug, Clone)]
pub struct Config {
    pub file_path: PathBuf,
    pub use_likwid: bool,
    /// 0 silent, 1 summary table at finalize (default), 2 also notes about the write.
    pub verbosity: u32,
    pub disabled: bool,
    pub language: String,
    pub metadata_detail: MetadataDetail,
    pub mpi_comm: Option<i32>,
    pub clock: crate::clock::ClockMode,
    /// Time between clock anchors (TSC clock only).
    pub clock_anchor_ms: u64,
    /// Comma-separated perf events (empty: none).
    pub perf_events: String,
    /// Comma-separated globs of the regions that count them (empty: every region).
    pub perf_regions: String,
    /// The layout asked for, or the default for a single process (see `layout_for`).
    pub layout: Layout,
    /// Whether `layout` was asked for (option or environment), or is the default.
    pub layout_explicit: bool,
    /// Write the schema-3 layouts collectively over MPI (`SCOPE_PROFILER_COLLECTIVE`, default
    /// on); off: through rank 0, as the regions layout is (the reference the collective write is
    /// tested against).
    pub collective: bool,
    /// How the ranks of a collective write put their parts into the file
    /// (`SCOPE_PROFILER_COLLECTIVE_IO`, docs/collective_write.md).
    pub collective_io: CollectiveIo,
    /// What is kept of the program's MPI calls (`SCOPE_PROFILER_MPI`, docs/mpi.md).
    pub mpi: crate::mpi_stats::Settings,
    /// Sampling (`SCOPE_PROFILER_SAMPLE_*`, docs/sampling.md).
    pub sampling: crate::sampling::Settings,
    /// The table at finalize (`SCOPE_PROFILER_SUMMARY`).
    pub summary: SummaryMode,
    /// Most rows of that table (`SCOPE_PROFILER_SUMMARY_ROWS`; None: a screen's worth).
    pub summary_rows: Option<usize>,
}

/// The table rank 0 prints at finalize (with verbosity >= 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SummaryMode {
    /// No table.
    Off,
    /// One row per region.
    Flat,
    /// One row per call path, indented by nesting.
    #[default]
    Tree,
}

impl SummaryMode {
    pub fn parse(value: &str) -> Option<SummaryMode> {
        match value.trim().to_ascii_lowercase().as_str() {
            "off" | "0" | "no" | "none" | "false" => Some(SummaryMode::Off),
            "flat" => Some(SummaryMode::Flat),
            "tree" | "1" | "on" | "yes" | "true" => Some(SummaryMode::Tree),
            _ => None,
        }
    }
}

/// Up to this many ranks the default layout is `regions`; above, `columnar` (written by every
/// rank collectively; `regions` is written through rank 0). See docs/layouts.md.
pub const REGIONS_UP_TO_RANKS: i64 = 16;

/// How the ranks of a collective write put their parts into the file rank 0 laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CollectiveIo {
    /// Each rank with `pwrite` when every rank runs on one node (one kernel), else MPI-IO.
    #[default]
    Auto,
    /// MPI-IO's collective write always.
    MpiIo,
}

impl CollectiveIo {
    pub fn parse(value: &str) -> Option<CollectiveIo> {
        match value.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(CollectiveIo::Auto),
            "mpiio" | "mpi-io" => Some(CollectiveIo::MpiIo),
            _ => None,
        }
    }
}

/// How the file stores the regions (see docs/layouts.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// Schema 1: `rank<N>/regions/<name>/{start_times,end_times,thread_ids}`.
    #[default]
    Regions,
    /// Schema 3 columnar: shared `/events/{start_deltas,durations}` columns.
    Columnar,
    /// Schema 3 aggregate: per rank and region statistics only; no calls are kept.
    Aggregate,
}

impl Layout {
    pub fn parse(value: &str) -> Option<Layout> {
        match value.trim().to_ascii_lowercase().as_str() {
            "regions" => Some(Layout::Regions),
            "columnar" => Some(Layout::Columnar),
            "aggregate" => Some(Layout::Aggregate),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Layout::Regions => "regions",
            Layout::Columnar => "columnar",
            Layout::Aggregate => "aggregate",
        }
    }
}

/// Environment variables read at setup (documented in the README).
pub mod env {
    pub const FILE: &str = "SCOPE_PROFILER_FILE";
    pub const VERBOSE: &str = "SCOPE_PROFILER_VERBOSE";
    pub const DISABLE: &str = "SCOPE_PROFILER_DISABLE";
    pub const LIKWID: &str = "SCOPE_PROFILER_LIKWID";
    pub const METADATA: &str = "SCOPE_PROFILER_METADATA";
    pub const CLOCK: &str = "SCOPE_PROFILER_CLOCK";
    pub const CLOCK_ANCHOR_MS: &str = "SCOPE_PROFILER_CLOCK_ANCHOR_MS";
    pub const PERF_EVENTS: &str = "SCOPE_PROFILER_PERF_EVENTS";
    pub const PERF_REGIONS: &str = "SCOPE_PROFILER_PERF_REGIONS";
    pub const LAYOUT: &str = "SCOPE_PROFILER_LAYOUT";
    pub const MPI: &str = "SCOPE_PROFILER_MPI";
    /// OpenMP constructs through the OpenMP tools interface (docs/openmp.md).
    pub const OPENMP: &str = "SCOPE_PROFILER_OPENMP";
    /// Functions compiled with -finstrument-functions (docs/functions.md).
    pub const FUNCTIONS: &str = "SCOPE_PROFILER_FUNCTIONS";
    pub const FILTER: &str = "SCOPE_PROFILER_FILTER";
    pub const THROTTLE: &str = "SCOPE_PROFILER_THROTTLE";
    pub const COLLECTIVE: &str = "SCOPE_PROFILER_COLLECTIVE";
    pub const COLLECTIVE_IO: &str = "SCOPE_PROFILER_COLLECTIVE_IO";
    pub const SUMMARY: &str = "SCOPE_PROFILER_SUMMARY";
    pub const SUMMARY_ROWS: &str = "SCOPE_PROFILER_SUMMARY_ROWS";
}

/// Parse a boolean environment value (`parse_bool`'s words), for the modules that read their
/// own variables.
pub fn env_bool(value: &str) -> Option<bool> {
    parse_bool(value)
}

/// Parse a boolean environment value: 1/true/yes/on and 0/false/no/off, any case.
fn parse_bool(value: &str) -> Option<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

impl Config {
    /// Resolve the settings from `options` and an environment lookup (`std::env::var` in
    /// production; a map in tests). Unparseable values warn once and fall back to the default.
    pub fn resolve(options: &Options, env: impl Fn(&str) -> Option<String>) -> Config {
        let bool_env = |name: &str| {
            env(name).and_then(|v| {
                let parsed = parse_bool(&v);
                if parsed.is_none() {
                    crate::warn::once(
                        &format!("env:{name}"),
                        &format!("ignoring {name}={v:?}: expected 0 or 1"),
                    );
                }
                parsed
            })
        };
        let verbosity_env = env(env::VERBOSE).and_then(|v| match v.trim().parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) => {
                crate::warn::once("env:verbose", &format!("ignoring {}={v:?}: expected 0, 1 or 2", env::VERBOSE));
                None
            }
        });
        let metadata_detail = match env(env::METADATA).as_deref().map(str::trim) {
            Some("minimal") => MetadataDetail::Minimal,
            None | Some("full") | Some("") => MetadataDetail::Full,
            Some(other) => {
                crate::warn::once(
                    "env:metadata",
                    &format!("ignoring {}={other:?}: expected minimal or full", env::METADATA),
                );
                MetadataDetail::Full
            }
        };
        let clock = options.clock.clone().map(|v| ("sp_options.clock", v)).or_else(|| env(env::CLOCK).map(|v| (env::CLOCK, v)));
        let clock = match clock {
            None => crate::clock::ClockMode::Auto,
            Some((source, v)) => crate::clock::ClockMode::parse(&v).unwrap_or_else(|| {
                crate::warn::once("env:clock", &format!("ignoring {source}={v:?}: expected auto, tsc or monotonic; using auto"));
                crate::clock::ClockMode::Auto
            }),
        };
        let clock_anchor_ms = env(env::CLOCK_ANCHOR_MS).and_then(|v| match v.trim().parse::<u64>() {
            Ok(n) if (1..=3_600_000).contains(&n) => Some(n),
            _ => {
                crate::warn::once(
                    "env:clock_anchor_ms",
                    &format!("ignoring {}={v:?}: expected milliseconds between 1 and 3600000", env::CLOCK_ANCHOR_MS),
                );
                None
            }
        });
        // An explicit option wins; a bad value (option or variable) warns once and falls back.
        let asked = match (options.layout.as_deref(), env(env::LAYOUT)) {
            (Some(v), _) => Some((v.to_string(), "sp_options.layout")),
            (None, Some(v)) if !v.trim().is_empty() => Some((v, env::LAYOUT)),
            _ => None,
        }
        .and_then(|(v, source)| {
            let parsed = Layout::parse(&v);
            if parsed.is_none() {
                crate::warn::once(
                    "env:layout",
                    &format!("ignoring {source}={v:?}: expected regions, columnar or aggregate; using the default layout, regions (columnar above {REGIONS_UP_TO_RANKS} ranks)"),
                );
            }
            parsed
        });
        let mpi = env(env::MPI).map_or(crate::mpi_stats::Settings::default(), |v| {
            crate::mpi_stats::Settings::parse(&v).unwrap_or_else(|e| {
                crate::warn::once("env:mpi", &format!("ignoring {}={v:?}: {e}; using the default, summary", env::MPI));
                crate::mpi_stats::Settings::default()
            })
        });
        let (layout, layout_explicit) = (asked.unwrap_or_default(), asked.is_some());
        let summary = env(env::SUMMARY).filter(|v| !v.trim().is_empty()).map_or(SummaryMode::default(), |v| {
            SummaryMode::parse(&v).unwrap_or_else(|| {
                crate::warn::once("env:summary", &format!("ignoring {}={v:?}: expected tree, flat or off; using tree", env::SUMMARY));
                SummaryMode::default()
            })
        });
        let summary_rows = env(env::SUMMARY_ROWS).filter(|v| !v.trim().is_empty()).and_then(|v| match v.trim() {
            "all" | "0" => Some(usize::MAX),
            n => n.parse::<usize>().ok().or_else(|| {
                crate::warn::once("env:summary_rows", &format!("ignoring {}={v:?}: expected a number of rows or all", env::SUMMARY_ROWS));
                None
            }),
        });
        let file_path = options
            .file_path
            .clone()
            .or_else(|| env(env::FILE).filter(|s| !s.is_empty()).map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_FILE));
        Config {
            file_path,
            use_likwid: options.use_likwid.or_else(|| bool_env(env::LIKWID)).unwrap_or(false),
            verbosity: options.verbosity.or(verbosity_env).unwrap_or(1),
            disabled: bool_env(env::DISABLE).unwrap_or(false),
            language: options.language.clone().unwrap_or_else(|| "C".to_string()),
            metadata_detail,
            summary,
            summary_rows,
            mpi_comm: options.mpi_comm,
            clock,
            clock_anchor_ms: clock_anchor_ms.unwrap_or(crate::clock::DEFAULT_ANCHOR_MS),
            perf_events: options.perf_events.clone().or_else(|| env(env::PERF_EVENTS)).unwrap_or_default(),
            perf_regions: options.perf_regions.clone().or_else(|| env(env::PERF_REGIONS)).unwrap_or_default(),
            layout,
            mpi,
            sampling: crate::sampling::Settings::from_env(&env),
            layout_explicit,
            collective: bool_env(env::COLLECTIVE).unwrap_or(true),
            collective_io: env(env::COLLECTIVE_IO)
                .and_then(|v| {
                    let parsed = CollectiveIo::parse(&v);
                    if parsed.is_none() {
                        crate::warn::once("env:collective_io", &format!("ignoring {}={v:?}: expected auto or mpiio", env::COLLECTIVE_IO));
                    }
                    parsed
                })
                .unwrap_or_default(),
        }
    }

    /// The layout of a run of `ranks` ranks: the one asked for, else `regions` up to
    /// `REGIONS_UP_TO_RANKS` ranks and `columnar` above (which every rank writes collectively).
    pub fn layout_for(&self, ranks: i64) -> Layout {
        match self.layout_explicit {
            true => self.layout,
            false if ranks > REGIONS_UP_TO_RANKS => Layout::Columnar,
            false => Layout::Regions,
        }
    }

    pub fn from_process_env(options: &Options) -> Config {
        Config::resolve(options, |name| std::env::var(name).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(options: &Options, pairs: &[(&str, &str)]) -> Config {
        let map: HashMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::resolve(options, |k| map.get(k).cloned())
    }

    #[test]
    fn defaults() {
        let c = resolve(&Options::default(), &[]);
        assert_eq!(c.file_path, PathBuf::from("profiling_data.h5"));
        assert!(!c.use_likwid && !c.disabled);
        assert_eq!(c.verbosity, 1);
        assert_eq!(c.language, "C");
        assert_eq!(c.metadata_detail, MetadataDetail::Full);
        assert_eq!(c.clock, crate::clock::ClockMode::Auto);
        assert_eq!(c.clock_anchor_ms, crate::clock::DEFAULT_ANCHOR_MS);
    }

    #[test]
    fn clock_settings() {
        use crate::clock::ClockMode;
        let c = resolve(&Options::default(), &[("SCOPE_PROFILER_CLOCK", "monotonic"), ("SCOPE_PROFILER_CLOCK_ANCHOR_MS", "5")]);
        assert_eq!((c.clock, c.clock_anchor_ms), (ClockMode::Monotonic, 5));
        let o = Options { clock: Some("tsc".into()), ..Options::default() };
        assert_eq!(resolve(&o, &[("SCOPE_PROFILER_CLOCK", "monotonic")]).clock, ClockMode::Tsc);
        let c = resolve(&Options::default(), &[("SCOPE_PROFILER_CLOCK", "fast"), ("SCOPE_PROFILER_CLOCK_ANCHOR_MS", "0")]);
        assert_eq!((c.clock, c.clock_anchor_ms), (ClockMode::Auto, crate::clock::DEFAULT_ANCHOR_MS));
    }

    #[test]
    fn environment_overrides_defaults() {
        let c = resolve(
            &Options::default(),
            &[
                ("SCOPE_PROFILER_FILE", "/tmp/x.h5"),
                ("SCOPE_PROFILER_VERBOSE", "0"),
                ("SCOPE_PROFILER_LIKWID", "yes"),
                ("SCOPE_PROFILER_DISABLE", "1"),
                ("SCOPE_PROFILER_METADATA", "minimal"),
            ],
        );
        assert_eq!(c.file_path, PathBuf::from("/tmp/x.h5"));
        assert_eq!(c.verbosity, 0);
        assert!(c.use_likwid && c.disabled);
        assert_eq!(c.metadata_detail, MetadataDetail::Minimal);
    }

    #[test]
    fn options_override_environment() {
        let o = Options {
            file_path: Some("mine.h5".into()),
            use_likwid: Some(false),
            verbosity: Some(2),
            language: Some("Fortran".into()),
            mpi_comm: None,
            clock: None,
            perf_events: None,
            perf_regions: None,
            layout: Some("aggregate".into()),
        };
        let c = resolve(&o, &[("SCOPE_PROFILER_FILE", "/tmp/x.h5"), ("SCOPE_PROFILER_LIKWID", "1"), ("SCOPE_PROFILER_VERBOSE", "0")]);
        assert_eq!(c.file_path, PathBuf::from("mine.h5"));
        assert!(!c.use_likwid);
        assert_eq!(c.verbosity, 2);
        assert_eq!(c.language, "Fortran");
        assert_eq!(c.layout, Layout::Aggregate);
    }

    #[test]
    fn layouts() {
        assert_eq!(resolve(&Options::default(), &[]).layout, Layout::Regions);
        assert_eq!(resolve(&Options::default(), &[("SCOPE_PROFILER_LAYOUT", "columnar")]).layout, Layout::Columnar);
        assert_eq!(resolve(&Options::default(), &[("SCOPE_PROFILER_LAYOUT", " Aggregate ")]).layout, Layout::Aggregate);
        assert_eq!(resolve(&Options::default(), &[("SCOPE_PROFILER_LAYOUT", "tree")]).layout, Layout::Regions);
        let o = Options { layout: Some("regions".into()), ..Options::default() };
        assert_eq!(resolve(&o, &[("SCOPE_PROFILER_LAYOUT", "aggregate")]).layout, Layout::Regions);
        // The default depends on the number of ranks; an explicit choice does not.
        let d = resolve(&Options::default(), &[]);
        assert_eq!((d.layout_for(1), d.layout_for(REGIONS_UP_TO_RANKS), d.layout_for(REGIONS_UP_TO_RANKS + 1)), (Layout::Regions, Layout::Regions, Layout::Columnar));
        assert_eq!(resolve(&o, &[]).layout_for(10_000), Layout::Regions);
        assert_eq!(resolve(&Options::default(), &[("SCOPE_PROFILER_LAYOUT", "tree")]).layout_for(1000), Layout::Columnar, "a bad value is no choice");
        assert!(d.collective);
        assert!(!resolve(&Options::default(), &[("SCOPE_PROFILER_COLLECTIVE", "0")]).collective);
    }

    #[test]
    fn bad_values_fall_back() {
        let c = resolve(&Options::default(), &[("SCOPE_PROFILER_VERBOSE", "loud"), ("SCOPE_PROFILER_DISABLE", "maybe"), ("SCOPE_PROFILER_FILE", "")]);
        assert_eq!(c.verbosity, 1);
        assert!(!c.disabled);
        assert_eq!(c.file_path, PathBuf::from("profiling_data.h5"));
    }

    #[test]
    fn summary_mode_and_rows() {
        let c = resolve(&Options::default(), &[]);
        assert_eq!((c.summary, c.summary_rows), (SummaryMode::Tree, None));
        for (v, want) in [("flat", SummaryMode::Flat), (" TREE ", SummaryMode::Tree), ("off", SummaryMode::Off), ("0", SummaryMode::Off), ("bogus", SummaryMode::Tree)] {
            assert_eq!(resolve(&Options::default(), &[(env::SUMMARY, v)]).summary, want, "{v}");
        }
        assert_eq!(resolve(&Options::default(), &[(env::SUMMARY_ROWS, "all")]).summary_rows, Some(usize::MAX));
        assert_eq!(resolve(&Options::default(), &[(env::SUMMARY_ROWS, "12")]).summary_rows, Some(12));
        assert_eq!(resolve(&Options::default(), &[(env::SUMMARY_ROWS, "x")]).summary_rows, None);
    }
}
