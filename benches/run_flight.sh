#!/usr/bin/env bash
# Flight recorder: peak RSS growth (VmHWM incl. sp_finalize) at N calls, memory sink vs spill.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --lib
mkdir -p target/bench
cc -std=c99 -O2 -D_GNU_SOURCE -Iinclude benches/flight_rss.c -o target/bench/flight_rss \
   -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lscope_profiler
n="${1:-20000000}"
echo "== memory sink"; SCOPE_PROFILER_SPILL=0 target/bench/flight_rss "$n" /tmp/sp_flight_mem.h5
echo "== spill (flight recorder)"; SCOPE_PROFILER_SPILL=1 target/bench/flight_rss "$n" /tmp/sp_flight_spill.h5
