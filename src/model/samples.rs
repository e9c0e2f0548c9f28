//! What the sampler found in one process: the samples themselves (counted per thread, region
//! and instruction address, with the modules the addresses lie in), and the same samples
//! mapped to source lines, per region, function and file (the Python package's
//! `line_profile` records). Plain data: the sampler builds it at finalize, the encoder sends
//! it to rank 0, the writers store it (`rank<N>/sampling/`, `rank<N>/line_profile/<i>`, and
//! the `.sps` file).

/// A loaded module (executable or shared library) that samples fell in.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct SampleModule {
    pub path: String,
    /// Load bias: runtime address minus the address in the file (0 for a non-PIE
    /// executable). An address minus this is what `addr2line -e path` takes.
    pub base: u64,
}

/// Samples of one thread in one region at one instruction address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct SampleRow {
    /// The file's thread id (`thread_ids`), or -1 for a sampled thread that recorded no call.
    pub thread: i64,
    /// Index into `SampleProfile::regions`, or -1: outside every region.
    pub region: i64,
    /// Index into `SampleProfile::modules`, or -1: no module known for the address.
    pub module: i64,
    /// The interrupted instruction's runtime address.
    pub address: u64,
    /// Samples taken there.
    pub count: u64,
    /// CPU time they stand for, in nanoseconds (samples times the sampling period, and for a
    /// timer the periods it overran).
    pub time_ns: u64,
}

/// Samples of one region (or of the time outside every region) in one function of one
/// source file, line by line: the Python package's `rank<N>/line_profile/<i>` record.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct LineRecord {
    /// The region's name; for samples outside every region, `OUTSIDE_REGIONS`.
    pub region: String,
    /// True for the samples outside every region.
    pub outside: bool,
    /// The source file, or `??` without line information.
    pub filename: String,
    /// The function (demangled), or `??` without a symbol.
    pub function: String,
    /// Where the function starts in `filename` (its first line with code), or the first
    /// sampled line when that is not known; 0 without line information.
    pub first_lineno: i64,
    /// Sampled lines, ascending (0: no line information).
    pub line_numbers: Vec<i64>,
    /// Samples per line.
    pub hits: Vec<i64>,
    /// CPU time per line in units of `unit` seconds.
    pub times: Vec<f64>,
}

/// The `region` of the records of samples taken outside every region.
pub const OUTSIDE_REGIONS: &str = "(outside regions)";
/// `unit` of every record: `times` are nanoseconds.
pub const LINE_UNIT: f64 = 1e-9;

/// One process's samples.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct SampleProfile {
    /// The rate asked for when sampling last started, per second of each thread's CPU time.
    pub hz: i64,
    /// How the threads were sampled: `perf task-clock`, `timer` (a POSIX timer on the
    /// thread's CPU-time clock), or both (`perf task-clock+timer`).
    pub mechanism: String,
    /// The signal the samples arrived with.
    pub signal: i64,
    /// Samples taken, inside and outside regions.
    pub ticks: u64,
    /// Of those, outside every region.
    pub outside: u64,
    /// Samples known to be lost: the kernel's ring buffer overflowed, a thread's table was
    /// full, or a sample arrived while its thread's sampler was being changed.
    pub lost: u64,
    /// Threads that were sampled.
    pub threads: u64,
    /// Set when the program replaced the sampling signal's handler while sampling ran: what
    /// was seen (the samples after that reached the program's handler and are not counted).
    #[serde(default)]
    pub handler_replaced: Option<String>,
    /// Sampled threads that had the sampling signal blocked (their samples could not arrive).
    #[serde(default)]
    pub blocked_threads: u64,
    /// Every region's name, indexed like the region ids of `rows`.
    pub regions: Vec<String>,
    pub modules: Vec<SampleModule>,
    pub rows: Vec<SampleRow>,
    /// The rows mapped to source lines.
    pub lines: Vec<LineRecord>,
}

impl SampleProfile {
    /// Samples per region index (-1 outside), over every thread.
    pub fn per_region(&self) -> std::collections::BTreeMap<i64, u64> {
        let mut out = std::collections::BTreeMap::new();
        for r in &self.rows {
            *out.entry(r.region).or_insert(0) += r.count;
        }
        out
    }
}
