#!/usr/bin/env bash
# The summary's cost at finalize over MPI: NP ranks (default 4), REGIONS regions (default
# 1000, 2000 call paths), finalize timed with the summary off, flat and as a tree, alternately
# (ROUNDS rounds, default 3), and the library's own measure of the reductions (verbosity 2).
# Usage: benches/run_summary_cost.sh [REGIONS] [CALLS]
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cargo build --release --lib
mkdir -p target/bench
mpicc -std=c99 -O2 -Iinclude benches/summary_cost.c -o target/bench/summary_cost \
   -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lscope_profiler
for round in $(seq "${ROUNDS:-3}"); do
  for mode in off flat tree; do
    echo "round $round  SCOPE_PROFILER_SUMMARY=$mode"
    SCOPE_PROFILER_SUMMARY=$mode SCOPE_PROFILER_VERBOSE=2 mpirun --oversubscribe -x SCOPE_PROFILER_SUMMARY -x SCOPE_PROFILER_VERBOSE \
      -np "${NP:-4}" target/bench/summary_cost "${1:-1000}" "${2:-10}" /tmp/sp_summary_cost.h5 2>&1 >/dev/null \
      | grep -E "^ranks|the summary's statistics" || true
  done
done
