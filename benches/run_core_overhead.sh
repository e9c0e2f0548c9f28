#!/usr/bin/env bash
# Build the release library and the C benchmark, run it (10 million recorded calls).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --lib
mkdir -p target/bench
cc -std=c99 -O2 -D_GNU_SOURCE -Iinclude benches/core_overhead.c -o target/bench/core_overhead \
   -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lscope_profiler
target/bench/core_overhead "${1:-1000000}" "${2:-5}" "${3:-/tmp/sp_bench_core.h5}"
