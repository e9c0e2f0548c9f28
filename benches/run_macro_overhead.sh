#!/usr/bin/env bash
# Build the release library and the C benchmark of the SP_REGION_START/STOP macros, run it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --lib
mkdir -p target/bench
cc -std=c99 -O2 -D_GNU_SOURCE -Iinclude benches/macro_overhead.c -o target/bench/macro_overhead \
   -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lscope_profiler
target/bench/macro_overhead "${1:-1000000}" "${2:-5}" "${3:-/tmp/sp_bench_macro.h5}"
