#!/usr/bin/env bash
# Finalize at disk speed: for each layout, record CALLS calls (2 threads, nested regions),
# time sp_finalize and a plain write() of the same bytes to the same directory (ratio printed).
# Usage: benches/run_finalize_speed.sh [CALLS=10000000] [DIR=target/bench] [REGIONS]
# With REGIONS, the calls go to that many flat regions (a profile of many moderate regions).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --lib
mkdir -p target/bench
cc -std=c99 -O2 -D_GNU_SOURCE -Iinclude benches/finalize_speed.c -o target/bench/finalize_speed \
   -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lscope_profiler -lpthread
calls="${1:-10000000}"
dir="${2:-target/bench}"
regions="${3:-}"
for layout in regions columnar aggregate; do
    SCOPE_PROFILER_LAYOUT=$layout target/bench/finalize_speed "$calls" "$dir" $regions
done
# Aggregate mode keeps no calls: resident memory does not grow with them.
SCOPE_PROFILER_LAYOUT=aggregate target/bench/finalize_speed 20000000 "$dir"
