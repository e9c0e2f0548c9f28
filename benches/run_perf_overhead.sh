#!/usr/bin/env bash
# Build the release library and the perf-events benchmark; run it with 4 software events
# (counted with one group read() per start and stop) and, for comparison, without events.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --lib
mkdir -p target/bench
cc -std=c99 -O2 -D_GNU_SOURCE -Iinclude benches/perf_overhead.c -o target/bench/perf_overhead \
   -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lscope_profiler
events="${SCOPE_PROFILER_PERF_EVENTS:-task-clock,page-faults,context-switches,cpu-migrations}"
SCOPE_PROFILER_PERF_EVENTS="$events" target/bench/perf_overhead "${1:-200000}" "${2:-5}"
echo "--- same program, no events configured"
env -u SCOPE_PROFILER_PERF_EVENTS target/bench/perf_overhead "${1:-200000}" "${2:-5}"
