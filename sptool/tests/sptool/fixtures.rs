//! The profile files the tests run on, all made here with [`crate::writer`].

use std::path::{Path, PathBuf};

use crate::writer::{self, Likwid, LikwidRegion, Rank, Region, Val, s, sa};

pub fn metadata(mpi_size: i64) -> Vec<(String, Val)> {
    let long_path = (0..12).map(|i| format!("/opt/software/pkg{i}/bin")).collect::<Vec<_>>().join(":");
    vec![
        ("timestamp".into(), s("2025-01-02T03:04:05+00:00")),
        ("platform".into(), s("Linux-6.1.0-x86_64-with-glibc2.36")),
        ("chip_information".into(), s("Intel(R) Xeon(R) Platinum 8360Y CPU @ 2.40GHz")),
        ("scope_profiler_version".into(), s("0.1.0")),
        ("omp_num_threads".into(), Val::I(2)),
        ("mpi_size".into(), Val::I(mpi_size)),
        ("total_cores".into(), Val::I(mpi_size * 2)),
        ("num_nodes".into(), Val::I(2)),
        ("language".into(), s("C")),
        ("hostname".into(), s("node01")),
        ("user".into(), s("alice")),
        ("working_directory".into(), s("/home/alice/run")),
        ("PATH".into(), Val::S(long_path)),
        ("SLURM_JOB_ID".into(), s("123456")),
        ("SLURM_NTASKS".into(), Val::S(mpi_size.to_string())),
        ("modules".into(), sa(&["gcc/12.2.0", "openmpi/4.1.4", "likwid/5.2.2"])),
    ]
}

fn rank_attrs(r: u32) -> Vec<(String, Val)> {
    let r64 = r as i64;
    let mut attrs = vec![
        ("hostname".into(), s(if r < 2 { "node01" } else { "node02" })),
        ("pid".into(), Val::I(4242 + r64)),
        ("cpus".into(), Val::IA(vec![2 * r64, 2 * r64 + 1])),
        ("num_threads".into(), Val::I(2)),
        ("thread_os_ids".into(), Val::IA(vec![4242 + r64, 5000 + r64])),
    ];
    if r > 0 {
        attrs.push(("clock_offset_ns".into(), Val::I(r64 * 1000)));
    }
    attrs
}

const T0: i64 = 1_000_000_000_000;

/// Four ranks of timings, no LIKWID: `main`, `solve` (10 calls per rank),
/// `init` (microseconds), `io/write` (a '/' in the name; ranks 0 and 2,
/// one call left open on rank 2) and `idle` (registered, never called).
pub fn timing_ranks(nranks: u32) -> Vec<Rank> {
    (0..nranks)
        .map(|r| {
            let r64 = r as i64;
            let t0 = T0 + r64 * 10_000;
            let mut regions = vec![
                Region::from_durations("main", t0, &[1_000_000_000 + r64 * 100_000_000]),
                Region::from_durations(
                    "solve",
                    t0 + 1_000,
                    &(0..10).map(|i| 50_000_000 + ((i * 7 + r64 * 3) % 10) * 1_000_000).collect::<Vec<_>>(),
                ),
                Region::from_durations("init", t0 + 500, &[5_000 + r64 * 250]),
            ];
            if r % 2 == 0 {
                let mut io = Region::from_durations(
                    "io/write",
                    t0 + 900_000_000,
                    &(0..3).map(|i| 2_000_000 + i * 500_000).collect::<Vec<_>>(),
                );
                io.open_calls = if r == 2 { 1 } else { 0 };
                regions.push(io);
            }
            if r == 1 {
                regions.push(Region::from_durations("idle", t0, &[]));
            }
            Rank { rank: r, attrs: rank_attrs(r), regions, likwid: None }
        })
        .collect()
}

fn names(items: &[&str]) -> Vec<String> {
    items.iter().map(|x| x.to_string()).collect()
}

const MEM_DP_EVENTS: &[&str] = &[
    "INSTR_RETIRED_ANY",
    "CPU_CLK_UNHALTED_CORE",
    "FP_ARITH_INST_RETIRED_SCALAR_DOUBLE",
    "CAS_COUNT_RD",
    "CAS_COUNT_WR",
    "CAS_COUNT_RD",
    "CAS_COUNT_WR",
];
const MEM_DP_COUNTERS: &[&str] = &["FIXC0", "FIXC1", "PMC0", "MBOX0C0", "MBOX0C1", "MBOX1C0", "MBOX1C1"];
const MEM_DP_METRICS: &[&str] = &["Runtime (RDTSC) [s]", "CPI", "DP [MFLOP/s]", "Memory bandwidth [MBytes/s]"];

/// One hardware thread of a MEM_DP region: (cpu, calls, runtime, CPI,
/// instructions, flops, cas_rd0, cas_wr0, cas_rd1, cas_wr1).
type MemDpThread = (i64, i64, f64, f64, f64, f64, f64, f64, f64, f64);

fn mem_dp(tag: &str, source: &str, per_thread: &[MemDpThread]) -> LikwidRegion {
    let col = |f: &dyn Fn(&MemDpThread) -> f64| per_thread.iter().map(f).collect::<Vec<f64>>();
    let cycles = col(&|t| (t.4 * t.3).round());
    let events = vec![
        col(&|t| t.4),
        cycles,
        col(&|t| t.5),
        col(&|t| t.6),
        col(&|t| t.7),
        col(&|t| t.8),
        col(&|t| t.9),
    ];
    let metrics = vec![
        col(&|t| t.2),
        col(&|t| t.3),
        col(&|t| t.5 / t.2 * 1e-6),
        col(&|t| (t.6 + t.7 + t.8 + t.9) * 64.0 / t.2 * 1e-6),
    ];
    LikwidRegion {
        tag: tag.into(),
        group_id: 0,
        group_name: "MEM_DP".into(),
        source: source.into(),
        cpus: per_thread.iter().map(|t| t.0).collect(),
        times: col(&|t| t.2),
        call_counts: per_thread.iter().map(|t| t.1).collect(),
        event_names: names(MEM_DP_EVENTS),
        counter_names: names(MEM_DP_COUNTERS),
        metric_names: names(MEM_DP_METRICS),
        events,
        metrics,
    }
}

fn likwid_env(group: &str, threads: &str) -> Vec<(String, String)> {
    vec![
        ("LIKWID_EVENTS".into(), group.into()),
        ("LIKWID_THREADS".into(), threads.into()),
        ("LIKWID_FILEPATH".into(), "/tmp/likwid_1234.txt".into()),
        ("LIKWID_MODE".into(), "1".into()),
    ]
}

/// Two ranks with LIKWID groups: rank 0 measured MEM_DP on one thread (the
/// issue's excerpt values, repeated CAS_COUNT_RD/WR on two memory channels,
/// and a marker_api region without metrics); rank 1 measured MEM_DP and
/// FLOPS_DP on two hardware threads plus a marker_file region with
/// positional event names.
pub fn likwid_ranks() -> Vec<Rank> {
    let r0 = Rank {
        rank: 0,
        attrs: rank_attrs(0),
        regions: vec![
            Region::from_durations("main", T0, &[161_376_000]),
            Region::from_durations("matmul", T0 + 100, &[36_872_000, 36_873_000, 36_873_000]),
            Region::from_durations("memory_bound", T0 + 200, &[30_104_600]),
            Region::from_durations("setup", T0 + 300, &[1_200_000]),
        ],
        likwid: Some(Likwid {
            env: likwid_env("MEM_DP", "0"),
            regions: vec![
                mem_dp("main", "full_api", &[(0, 1, 0.161376, 0.7962, 70478340.0, 20000000.0, 1220547.0, 400000.0, 1210000.0, 395000.0)]),
                mem_dp("matmul", "full_api", &[(0, 3, 0.110618, 0.7177, 65807930.0, 48000000.0, 1002233.0, 300000.0, 990000.0, 310000.0)]),
                mem_dp("memory_bound", "full_api", &[(0, 1, 0.0301046, 1.7821, 4541968.0, 1000000.0, 198776.0, 90000.0, 201000.0, 91000.0)]),
                LikwidRegion {
                    tag: "setup".into(),
                    group_id: 0,
                    group_name: "MEM_DP".into(),
                    source: "marker_api".into(),
                    cpus: vec![0],
                    times: vec![0.0012],
                    call_counts: vec![1],
                    event_names: names(&MEM_DP_EVENTS[..2]),
                    counter_names: names(&MEM_DP_COUNTERS[..2]),
                    metric_names: vec![],
                    events: vec![vec![1000000.0], vec![900000.0]],
                    metrics: vec![],
                },
            ],
        }),
    };
    let r1 = Rank {
        rank: 1,
        attrs: rank_attrs(1),
        regions: vec![
            Region::from_durations("matmul", T0 + 100, &[40_000_000, 41_000_000, 42_000_000]),
            Region::from_durations("memory_bound", T0 + 200, &[33_000_000]),
            Region::from_durations("io/read", T0 + 300, &[5_000_000, 6_000_000]),
        ],
        likwid: Some(Likwid {
            env: likwid_env("MEM_DP|FLOPS_DP", "2,3"),
            regions: vec![
                mem_dp(
                    "memory_bound",
                    "full_api",
                    &[
                        (2, 1, 0.033, 0.85, 5000000.0, 1100000.0, 210000.0, 95000.0, 205000.0, 94000.0),
                        (3, 1, 0.032, 0.86, 4900000.0, 1050000.0, 0.0, 0.0, 0.0, 0.0),
                    ],
                ),
                LikwidRegion {
                    tag: "matmul".into(),
                    group_id: 1,
                    group_name: "FLOPS_DP".into(),
                    source: "full_api".into(),
                    cpus: vec![2, 3],
                    times: vec![0.123, 0.121],
                    call_counts: vec![3, 3],
                    event_names: names(&["INSTR_RETIRED_ANY", "FP_ARITH_INST_RETIRED_128B_PACKED_DOUBLE"]),
                    counter_names: names(&["FIXC0", "PMC0"]),
                    metric_names: names(&["DP [MFLOP/s]", "CPI"]),
                    events: vec![vec![66000000.0, 65000000.0], vec![24000000.0, 23500000.0]],
                    metrics: vec![vec![390.2439, 388.4298], vec![0.81, 0.8125]],
                },
                LikwidRegion {
                    tag: "io/read".into(),
                    group_id: 0,
                    group_name: "MEM_DP".into(),
                    source: "marker_file".into(),
                    cpus: vec![2],
                    times: vec![0.011],
                    call_counts: vec![2],
                    event_names: names(&["event0", "event1"]),
                    counter_names: names(&["PMC0", "PMC1"]),
                    metric_names: vec![],
                    events: vec![vec![123456.0], vec![f64::NAN]],
                    metrics: vec![],
                },
            ],
        }),
    };
    vec![r0, r1]
}

/// Write the named fixture into `dir` and return its path.
pub fn make(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let _guard = crate::common::hdf5_open_guard();
    match name {
        "timings.h5" => writer::write_schema1(&path, &metadata(4), &timing_ranks(4)),
        "likwid.h5" => writer::write_schema1(&path, &metadata(2), &likwid_ranks()),
        "columnar2.h5" => writer::write_columnar(&path, 2, &metadata(4), &timing_ranks(4)),
        "columnar3.h5" => writer::write_columnar(&path, 3, &metadata(2), &likwid_ranks()),
        other => panic!("no fixture {other}"),
    }
    .unwrap_or_else(|e| panic!("writing fixture {name}: {e}"));
    path
}

/// `SPTOOL_FIXTURE_DIR=/tmp/fx cargo test -p sptool -- --ignored write_fixtures`
/// leaves the fixture files there, to try sptool (or h5dump) on them by hand.
#[test]
#[ignore]
fn write_fixtures() {
    let dir = std::env::var_os("SPTOOL_FIXTURE_DIR").expect("set SPTOOL_FIXTURE_DIR");
    for name in ["timings.h5", "likwid.h5", "columnar2.h5", "columnar3.h5"] {
        make(Path::new(&dir), name);
    }
}
