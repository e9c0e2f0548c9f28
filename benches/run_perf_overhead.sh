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
echo "--- every region counts"
SCOPE_PROFILER_PERF_EVENTS="$events" env -u SCOPE_PROFILER_PERF_REGIONS target/bench/perf_overhead "${1:-200000}" "${2:-5}" | grep -v '^RESULT'
echo "--- SCOPE_PROFILER_PERF_REGIONS=bench: bench_other is not chosen"
SCOPE_PROFILER_PERF_EVENTS="$events" SCOPE_PROFILER_PERF_REGIONS=bench target/bench/perf_overhead "${1:-200000}" "${2:-5}" | grep -v '^RESULT'
echo "--- same program, no events configured"
env -u SCOPE_PROFILER_PERF_EVENTS -u SCOPE_PROFILER_PERF_REGIONS target/bench/perf_overhead "${1:-200000}" "${2:-5}" | grep -v '^RESULT'
