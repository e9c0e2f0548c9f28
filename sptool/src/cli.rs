//! Command-line interface: argument definitions and the command runners.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::error::{Error, Result};
use crate::export::{self, Format};
use crate::filter::Filter;
use crate::inspect::{self, region_rows};
use crate::plot;
use crate::read::read_profile;
use crate::roofline;
use crate::{compare, trace};

#[derive(Parser, Debug)]
#[command(
    name = "sptool",
    version,
    about = "Inspect, export and plot scope_profiler HDF5 profiles (no Python needed)",
    after_help = "Reads schema 1 (written by the scope_profiler library) and schemas 2 and 3 \
                  (written by the Python package scope-profiler). See docs/sptool.md."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug)]
pub struct RecoverArgs {
    /// The profile to write (default: $SCOPE_PROFILER_FILE or profiling_data.h5); its spill
    /// data is looked for next to it and in $SCOPE_PROFILER_SPILL_DIR
    pub target: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the run's metadata, the region table and the LIKWID counter tables
    Inspect(InspectArgs),
    /// Write per-rank region statistics and LIKWID results as tidy JSON or CSV
    Export(ExportArgs),
    /// Draw a chart (PNG or SVG, chosen by the output's extension)
    #[command(subcommand)]
    Plot(PlotCommand),
    /// Compare two runs region by region: calls, totals, means and their changes
    Diff(DiffArgs),
    /// Write the profile of a killed run from the spill data it left (flight recorder)
    Recover(RecoverArgs),
    /// Fail (exit status 3) when a region of CANDIDATE is slower per call than in BASE
    Check(CheckArgs),
    /// Report the program's MPI calls (recorded by the MPI plugin), in the spirit of mpiP
    Mpi(MpiArgs),
    /// The hottest source lines of each region, from the samples (SCOPE_PROFILER_SAMPLE_HZ)
    Lines(LinesArgs),
    /// Show the regions as a tree by their nesting: calls, inclusive and exclusive time per call path
    Tree(TreeArgs),
}

#[derive(Args, Debug)]
pub struct LinesArgs {
    /// Profile file (.h5)
    pub file: PathBuf,
    /// Only this region (its exact name; `(outside regions)` for the samples outside every region)
    #[arg(long, value_name = "NAME")]
    pub region: Option<String>,
    /// Show at most this many lines per region
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Only these ranks, e.g. 0,2-3
    #[arg(long, value_name = "LIST")]
    pub ranks: Option<String>,
    /// One table per rank instead of the ranks pooled
    #[arg(long)]
    pub per_rank: bool,
    /// Do not print the source text of the lines (by default the text of the local files named in the profile is printed)
    #[arg(long)]
    pub no_source: bool,
    /// Look for the recorded source files under DIR (where the sources are now), by the
    /// recorded path's tail; may be given more than once
    #[arg(long, value_name = "DIR")]
    pub source_root: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct TreeArgs {
    /// Profile file (.h5)
    pub file: PathBuf,
    /// Only this rank (default: every rank, as the mean per rank with min and max)
    #[arg(long, value_name = "R")]
    pub rank: Option<u32>,
    /// Hide call paths below this share of the wall time (with what is inside them), e.g. 1%
    #[arg(long, value_name = "PCT", default_value = "0%")]
    pub min_share: String,
    /// Threads apart: time per thread (mean, min, max) and the thread that took the longest
    #[arg(long)]
    pub threads: bool,
}

#[derive(Args, Debug)]
pub struct MpiArgs {
    /// Profile file (.h5)
    pub file: PathBuf,
    /// Show at most this many rows per table
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Also show the call sites (file:line), when the run kept them
    #[arg(long)]
    pub sites: bool,
    /// Only these ranks, e.g. 0,2-3
    #[arg(long, value_name = "LIST")]
    pub ranks: Option<String>,
    /// Threads apart: the MPI time of each thread that calls MPI, and per routine the thread that took the longest
    #[arg(long)]
    pub threads: bool,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The first run (A)
    pub a: PathBuf,
    /// The second run (B), compared against A
    pub b: PathBuf,
    /// Compare rank by rank instead of pooling the ranks
    #[arg(long)]
    pub ranks: bool,
    /// Only regions whose name matches this regular expression; repeatable
    #[arg(long = "include", value_name = "RE")]
    pub include: Vec<String>,
    /// Skip regions whose name matches this regular expression; repeatable
    #[arg(long = "exclude", value_name = "RE")]
    pub exclude: Vec<String>,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The reference run
    pub base: PathBuf,
    /// The run to judge
    pub candidate: PathBuf,
    /// Largest allowed slowdown of the mean time per call: `10%` for every region (the
    /// default), `REGION=5%` for one region; repeatable
    #[arg(long = "max-slowdown", value_name = "[REGION=]PCT")]
    pub max_slowdown: Vec<String>,
    /// Compare rank by rank instead of pooling the ranks
    #[arg(long)]
    pub ranks: bool,
    /// Do not judge regions whose total time in BASE is below this many seconds
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0)]
    pub min_time: f64,
    /// Also fail when a region of BASE was not recorded in CANDIDATE
    #[arg(long)]
    pub fail_missing: bool,
    /// Only regions whose name matches this regular expression; repeatable
    #[arg(long = "include", value_name = "RE")]
    pub include: Vec<String>,
    /// Skip regions whose name matches this regular expression; repeatable
    #[arg(long = "exclude", value_name = "RE")]
    pub exclude: Vec<String>,
}

#[derive(Args, Debug, Clone, Default)]
pub struct Selection {
    /// Only regions whose name matches this regular expression (from its
    /// start, like Python's re.match); repeatable
    #[arg(long = "include", value_name = "RE")]
    pub include: Vec<String>,
    /// Skip regions whose name matches this regular expression; repeatable
    #[arg(long = "exclude", value_name = "RE")]
    pub exclude: Vec<String>,
    /// Only these ranks, e.g. 0,2-3
    #[arg(long, value_name = "LIST")]
    pub ranks: Option<String>,
}

impl Selection {
    fn filter(&self) -> Result<Filter> {
        Filter::new(&self.include, &self.exclude, self.ranks.as_deref())
    }
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// Profile file (.h5)
    pub file: PathBuf,
    #[command(flatten)]
    pub selection: Selection,
    /// Also show every region's statistics on each rank
    #[arg(long)]
    pub per_rank: bool,
    /// Print long metadata values in full instead of clipping them
    #[arg(long)]
    pub full: bool,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Profile file (.h5); extrap: the files of the series of runs
    #[arg(required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// Output format
    #[arg(long, value_enum)]
    pub format: Format,
    /// Output file, or - for standard output
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
    /// chrome-trace: write only the N longest calls (a note says what was left out)
    #[arg(long, value_name = "N")]
    pub max_events: Option<usize>,
    /// extrap: a parameter of the runs, NAME (a numeric metadata key, p = ranks, t = threads)
    /// or NAME=KEY; repeatable (default: p and t, those that vary)
    #[arg(long = "param", value_name = "NAME[=KEY]")]
    pub params: Vec<String>,
    /// caliper-json: each thread's exclusive and inclusive time and calls as columns of its
    /// rank's rows (`thread.<id>#sum#time.duration`, ...)
    #[arg(long)]
    pub threads: bool,
    #[command(flatten)]
    pub selection: Selection,
}

impl ExportArgs {
    /// The one input file of every format but extrap.
    fn one_file(&self) -> Result<&PathBuf> {
        match self.files.as_slice() {
            [f] => Ok(f),
            _ => Err(Error::new(format!("--format {:?} reads one file ({} given); only --format extrap reads a series", self.format, self.files.len()).to_lowercase())),
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum PlotCommand {
    /// Place every (rank, region) with a FLOP-rate and a bandwidth metric on a roofline
    Roofline(RooflineArgs),
    /// Total time per region and rank, as horizontal bars
    Regions(RegionsArgs),
}

#[derive(Args, Debug)]
pub struct Size {
    /// Image width in pixels
    #[arg(long, default_value_t = 1200)]
    pub width: u32,
    /// Image height in pixels
    #[arg(long, default_value_t = 800)]
    pub height: u32,
}

#[derive(Args, Debug)]
pub struct RooflineArgs {
    /// Profile file (.h5)
    pub file: PathBuf,
    /// Compute ceiling in GFLOP/s (default: the highest observed, labelled empirical)
    #[arg(long, value_name = "GFLOPS")]
    pub peak_flops: Option<f64>,
    /// Memory bandwidth ceiling in GB/s (default: the highest observed, labelled empirical)
    #[arg(long, value_name = "GBS")]
    pub peak_bandwidth: Option<f64>,
    /// LIKWID metric giving the FLOP rate (default: the first with FLOP/s in its name)
    #[arg(long, value_name = "NAME")]
    pub flops_metric: Option<String>,
    /// LIKWID metric giving the bandwidth (default: the first named "... bandwidth [.../s]")
    #[arg(long, value_name = "NAME")]
    pub bandwidth_metric: Option<String>,
    /// Output image: roofline.png or roofline.svg
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
    /// Also write the points and the roof as JSON
    #[arg(long, value_name = "JSON")]
    pub data: Option<PathBuf>,
    #[command(flatten)]
    pub selection: Selection,
    #[command(flatten)]
    pub size: Size,
}

#[derive(Args, Debug)]
pub struct RegionsArgs {
    /// Profile file (.h5)
    pub file: PathBuf,
    /// Output image: regions.png or regions.svg
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
    /// Show at most this many regions (the costliest)
    #[arg(long, default_value_t = 25)]
    pub top: usize,
    #[command(flatten)]
    pub selection: Selection,
    #[command(flatten)]
    pub size: Size,
}

/// Write text to standard output; a closed pipe (`| head`) is not an error.
fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::new(format!("cannot write to standard output: {e}")))
        }
        _ => Ok(()),
    }
}

fn file_label(path: &std::path::Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

impl Cli {
    /// The files the command reads, for [`crate::guard`].
    pub fn plan(&self) -> crate::guard::Plan {
        let (inputs, limited) = match &self.command {
            Command::Inspect(a) => (vec![a.file.clone()], true),
            Command::Export(a) => (a.files.clone(), true),
            Command::Plot(PlotCommand::Roofline(a)) => (vec![a.file.clone()], true),
            Command::Plot(PlotCommand::Regions(a)) => (vec![a.file.clone()], true),
            Command::Diff(a) => (vec![a.a.clone(), a.b.clone()], true),
            Command::Check(a) => (vec![a.base.clone(), a.candidate.clone()], true),
            Command::Mpi(a) => (vec![a.file.clone()], true),
            Command::Lines(a) => (vec![a.file.clone()], true),
            Command::Tree(a) => (vec![a.file.clone()], true),
            Command::Recover(a) => (a.target.clone().into_iter().collect(), false),
        };
        crate::guard::Plan { inputs, limited }
    }
}

/// Run a command and give the process's exit status (`check` decides its own).
pub fn run_status(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Check(args) => Ok(if check(&args)? { 0 } else { CHECK_FAILED }),
        command => run(command).map(|()| 0),
    }
}

/// Exit status of `sptool check` when a region got slower.
pub const CHECK_FAILED: u8 = 3;

/// True when no region got slower than allowed.
fn check(args: &CheckArgs) -> Result<bool> {
    let limits = compare::Limits::parse(&args.max_slowdown)?;
    if !(args.min_time >= 0.0 && args.min_time.is_finite()) {
        return Err(Error::new("--min-time must be a number of seconds >= 0"));
    }
    let filter = Filter::new(&args.include, &args.exclude, None)?;
    let base = read_profile(&args.base)?;
    let candidate = read_profile(&args.candidate)?;
    let rows = compare::rows(&base, &candidate, args.ranks, &|name| filter.name(name));
    for name in limits.per_region.keys() {
        if !rows.iter().any(|r| &r.key.0 == name) {
            eprintln!("sptool: warning: --max-slowdown names region {name:?}, which neither file recorded");
        }
    }
    let options = compare::CheckOptions { limits, by_rank: args.ranks, min_time: args.min_time, fail_missing: args.fail_missing };
    let (text, passed) = compare::render_check(&base, &candidate, &rows, &options);
    print(&text)?;
    Ok(passed)
}

/// Every command but `check` (see `run_status`).
fn run(command: Command) -> Result<()> {
    match command {
        Command::Recover(args) => {
            let target = args.target.unwrap_or_else(crate::recover::default_target);
            let msg = crate::recover::run(&target)?;
            println!("{msg}");
            Ok(())
        }
        Command::Check(_) => Err(Error::new("internal: check goes through run_status")),
        Command::Diff(args) => {
            let filter = Filter::new(&args.include, &args.exclude, None)?;
            let a = read_profile(&args.a)?;
            let b = read_profile(&args.b)?;
            let rows = compare::rows(&a, &b, args.ranks, &|name| filter.name(name));
            print(&compare::render_diff(&a, &b, &rows, args.ranks))
        }
        Command::Inspect(args) => {
            let filter = args.selection.filter().map_err(|e| e.or_file(&args.file))?;
            let profile = read_profile(&args.file)?;
            filter.check_ranks(&profile)?;
            let options = inspect::Options { per_rank: args.per_rank, full: args.full };
            let mut text = inspect::render(&profile, &filter, &options);
            // The MPI calls have their own report; inspect only points to it.
            if let Some(line) = crate::mpi::read(&args.file).ok().and_then(|m| crate::mpi::inspect_line(&m)) {
                text.push_str(&line);
            }
            print(&text)
        }
        Command::Mpi(args) => {
            if args.top == 0 {
                return Err(Error::new("--top must be at least 1"));
            }
            let filter = Filter::new(&[], &[], args.ranks.as_deref()).map_err(|e| e.or_file(&args.file))?;
            let ranks = crate::mpi::read(&args.file)?;
            if ranks.is_empty() {
                return Err(Error::in_file(
                    &args.file,
                    "holds no MPI calls (rank<N>/mpi): run the program with the MPI plugin (docs/mpi.md), and not with SCOPE_PROFILER_MPI=off",
                ));
            }
            let selected: Vec<u32> = ranks.iter().map(|m| m.rank).filter(|&r| filter.rank(r)).collect();
            if selected.is_empty() {
                return Err(Error::in_file(&args.file, "no rank with MPI data matches --ranks"));
            }
            let options = crate::mpi::Options { top: args.top, sites: args.sites, ranks: Some(selected), threads: args.threads };
            print(&crate::mpi::render(&args.file, &ranks, &options))
        }
        Command::Lines(args) => {
            if args.top == 0 {
                return Err(Error::new("--top must be at least 1"));
            }
            let filter = Filter::new(&[], &[], args.ranks.as_deref()).map_err(|e| e.or_file(&args.file))?;
            let mut ranks = crate::lines::read(&args.file)?;
            if ranks.is_empty() {
                return Err(Error::in_file(
                    &args.file,
                    "holds no samples (rank<N>/line_profile): run the program with SCOPE_PROFILER_SAMPLE_HZ=<rate> or sp_start_sampling (docs/sampling.md)",
                ));
            }
            ranks.retain(|r| filter.rank(r.rank));
            if ranks.is_empty() {
                return Err(Error::in_file(&args.file, "no rank with samples matches --ranks"));
            }
            let options = crate::lines::Options { region: args.region, top: args.top, per_rank: args.per_rank, source: !args.no_source, source_roots: args.source_root };
            print(&crate::lines::render(&args.file, &ranks, &options)?)
        }
        Command::Tree(args) => {
            let min_share = crate::tree::parse_share(&args.min_share)?;
            let ranks = crate::tree::read(&args.file)?;
            if ranks.iter().all(|r| r.paths.is_empty()) {
                if let Some(note) = crate::mpi::only_mpi_note(&args.file)? {
                    return print(&note);
                }
            }
            print(&crate::tree::render(&args.file, &ranks, &crate::tree::Options { rank: args.rank, min_share, threads: args.threads })?)
        }
        Command::Export(args) => {
            if args.format == Format::Extrap {
                let first = args.files.first().cloned().unwrap_or_default();
                let filter = args.selection.filter().map_err(|e| e.or_file(&first))?;
                let params = args.params.iter().map(|p| crate::extrap::parse_param(p)).collect::<Result<Vec<_>>>()?;
                let profiles = crate::extrap::read_all(&args.files)?;
                for p in &profiles {
                    filter.check_ranks(p)?;
                }
                let text = crate::extrap::render(&profiles, &filter, &params)?;
                return export::write_output(&args.output, text.as_bytes());
            }
            if !args.params.is_empty() {
                return Err(Error::new("--param applies to --format extrap only"));
            }
            let file = args.one_file()?.clone();
            let filter = args.selection.filter().map_err(|e| e.or_file(&file))?;
            if args.format == Format::ChromeTrace {
                if args.selection.ranks.is_some() {
                    filter.check_ranks(&read_profile(&file)?)?;
                }
                return trace::export(&file, &filter, args.max_events, &args.output);
            }
            if args.max_events.is_some() {
                return Err(Error::new("--max-events applies to --format chrome-trace only"));
            }
            if args.format == Format::Otf2 {
                if args.selection.ranks.is_some() {
                    filter.check_ranks(&read_profile(&file)?)?;
                }
                return crate::otf2::export(&file, &filter, &args.output);
            }
            let profile = read_profile(&file)?;
            filter.check_ranks(&profile)?;
            if args.threads && args.format != Format::CaliperJson {
                return Err(Error::new("--threads applies to --format caliper-json only"));
            }
            export::write(&profile, &filter, args.format, args.threads, &args.output)
        }
        Command::Plot(PlotCommand::Roofline(args)) => {
            let size = (args.size.width, args.size.height);
            plot::check_output(&args.output, size)?;
            let filter = args.selection.filter().map_err(|e| e.or_file(&args.file))?;
            let profile = read_profile(&args.file)?;
            filter.check_ranks(&profile)?;
            let request = roofline::Request {
                flops_metric: args.flops_metric.as_deref(),
                bandwidth_metric: args.bandwidth_metric.as_deref(),
                peak_gflops: args.peak_flops,
                peak_gbs: args.peak_bandwidth,
            };
            let roof = roofline::compute(&profile, &filter, &request)?;
            if let Some(data) = &args.data {
                let mut bytes = serde_json::to_vec_pretty(&roofline::to_json(&profile, &roof))
                    .map_err(|e| Error::in_file(data, format!("cannot encode JSON: {e}")))?;
                bytes.push(b'\n');
                export::write_output(data, &bytes)?;
            }
            let options = plot::RooflineOptions { out: &args.output, size, file_label: file_label(&args.file) };
            plot::roofline(&roof, &options)
        }
        Command::Plot(PlotCommand::Regions(args)) => {
            let size = (args.size.width, args.size.height);
            plot::check_output(&args.output, size)?;
            let filter = args.selection.filter().map_err(|e| e.or_file(&args.file))?;
            let profile = read_profile(&args.file)?;
            filter.check_ranks(&profile)?;
            let mut rows = region_rows(&profile, &filter);
            rows.retain(|r| r.pooled.count > 0);
            if rows.is_empty() {
                return Err(Error::in_file(&args.file, "no region with recorded calls matches the selection"));
            }
            if args.top == 0 {
                return Err(Error::new("--top must be at least 1"));
            }
            rows.truncate(args.top);
            let ranks = filter.selected_ranks(&profile);
            let ranks: Vec<u32> =
                ranks.into_iter().filter(|k| rows.iter().any(|r| r.per_rank.iter().any(|(x, _, _)| x == k))).collect();
            let options = plot::RegionsOptions { out: &args.output, size, file_label: file_label(&args.file) };
            plot::regions(&rows, &ranks, &options)
        }
    }
}
