//! Write a large schema-1 profile for benchmarks:
//!
//! ```text
//! cargo run --release -p sptool --example make_big_file -- OUT.h5 [CALLS] [RANKS]
//! ```
//!
//! Defaults: 10,000,000 calls over 16 ranks. Every rank runs `main` around
//! time steps; each step is `step` > (`compute` > 3 x `compute/kernel`),
//! `halo_exchange`, `reduce`: properly nested calls with pseudo-random
//! durations, as a real run would record them.

#[path = "../tests/sptool/writer.rs"]
mod writer;

use writer::{Rank, Region, Schema1Writer, Val, s};

/// A small deterministic pseudo-random generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A duration around `base` ns, +- 25 %.
    fn around(&mut self, base: i64) -> i64 {
        base * 3 / 4 + (self.next() % (base as u64 / 2 + 1)) as i64
    }
}

const NAMES: [&str; 6] = ["main", "step", "compute", "compute/kernel", "halo_exchange", "reduce"];
const CALLS_PER_STEP: u64 = 7;

fn rank(rank: u32, steps: u64) -> Rank {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (rank as u64 + 1));
    let mut regions: Vec<Region> = NAMES.iter().map(|n| Region { name: n.to_string(), ..Region::default() }).collect();
    let mut push = |i: usize, start: i64, end: i64| {
        regions[i].starts.push(start);
        regions[i].ends.push(end);
        regions[i].threads.push(0);
    };
    let t0 = 1_000_000_000_000 + rank as i64 * 1_000;
    let mut t = t0 + 1_000;
    for _ in 0..steps {
        let step_start = t;
        t += 200;
        let compute_start = t;
        for _ in 0..3 {
            let d = rng.around(20_000 + rank as i64 * 200);
            push(3, t, t + d);
            t += d + 100;
        }
        push(2, compute_start, t);
        t += 100;
        let d = rng.around(8_000);
        push(4, t, t + d);
        t += d + 100;
        let d = rng.around(3_000);
        push(5, t, t + d);
        t += d + 200;
        push(1, step_start, t);
        t += 100;
    }
    push(0, t0, t + 1_000);
    let r = rank as i64;
    Rank {
        rank,
        attrs: vec![
            ("hostname".into(), Val::S(format!("node{:02}", rank / 4))),
            ("pid".into(), Val::I(10_000 + r)),
            ("cpus".into(), Val::IA(vec![r % 4])),
            ("num_threads".into(), Val::I(1)),
            ("thread_os_ids".into(), Val::IA(vec![10_000 + r])),
        ],
        regions,
        likwid: None,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.first() else {
        eprintln!("usage: make_big_file OUT.h5 [CALLS=10000000] [RANKS=16]");
        std::process::exit(2);
    };
    let calls: u64 = args.get(1).map_or(10_000_000, |a| a.parse().expect("CALLS is a number"));
    let ranks: u32 = args.get(2).map_or(16, |a| a.parse().expect("RANKS is a number"));
    let steps = (calls / ranks as u64).saturating_sub(1) / CALLS_PER_STEP;
    let metadata = vec![
        ("timestamp".to_string(), s("2025-01-01T00:00:00+00:00")),
        ("platform".to_string(), s("Linux-x86_64")),
        ("chip_information".to_string(), s("benchmark")),
        ("scope_profiler_version".to_string(), s("0.1.0")),
        ("omp_num_threads".to_string(), Val::I(1)),
        ("mpi_size".to_string(), Val::I(ranks as i64)),
        ("total_cores".to_string(), Val::I(ranks as i64)),
        ("num_nodes".to_string(), Val::I(ranks.div_ceil(4) as i64)),
        ("language".to_string(), s("C")),
    ];
    let writer = Schema1Writer::create(std::path::Path::new(out), &metadata).expect("create the file");
    for r in 0..ranks {
        writer.rank(&rank(r, steps)).expect("write a rank");
    }
    let total = ranks as u64 * (1 + steps * CALLS_PER_STEP);
    println!("{out}: {total} calls over {ranks} ranks ({steps} steps per rank)");
}
