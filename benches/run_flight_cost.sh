#!/usr/bin/env bash
# The flight recorder's cost per handle pair in the release library, configurations run
# alternately RUNS times (benches/flight_cost.c): the memory sink, the spill on the output's file
# system (DIR, default target/bench: ext4 here), the spill on /dev/shm (tmpfs). Prints per
# configuration the median and range of the recording thread's CPU time per pair, and its
# difference to the memory sink of the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${NO_BUILD:-}" ] || cargo build --release --lib
mkdir -p target/bench
cc -std=c99 -O2 -D_GNU_SOURCE -Iinclude benches/flight_cost.c -o target/bench/flight_cost \
   -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lscope_profiler
calls="${CALLS:-10000000}"; runs="${RUNS:-7}"; dir="${DIR:-$PWD/target/bench}"
declare -A ENVS=(
  [memory]="SCOPE_PROFILER_SPILL=0"
  [spill_fs]="SCOPE_PROFILER_SPILL=1 SCOPE_PROFILER_SPILL_DIR=$dir"
  [spill_shm]="SCOPE_PROFILER_SPILL=1 SCOPE_PROFILER_SPILL_DIR=/dev/shm"
)
configs=(memory spill_fs spill_shm)
out=$(for r in $(seq "$runs"); do for c in "${configs[@]}"; do
  echo "RUN $r $c $(env ${ENVS[$c]} target/bench/flight_cost "$calls" 3 "$dir/flight_cost_$c.h5")"; done; done)
echo "$out" | awk -v cs="${configs[*]}" '
  $1 == "RUN" { r = $2; c = $3; th[c, r] = $6; pr[c, r] = $8; R = r > R ? r : R }
  function med(v, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t } return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2 }
  function stat(a, c, base,   i, v, lo, hi) { lo = 1e9; hi = -1e9; for (i = 1; i <= R; i++) { v[i] = a[c, i] - (base ? a["memory", i] : 0); if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i] } return sprintf(base ? "%+.2f (%+.1f..%+.1f)" : "%.2f (%.1f-%.1f)", med(v, R), lo, hi) }
  END {
    printf "%-10s %24s %24s %24s %24s\n", "sink", "thread ns/pair", "thread - memory", "process ns/pair", "process - memory"
    split(cs, C, " ")
    for (k = 1; k in C; k++) { c = C[k]; printf "%-10s %24s %24s %24s %24s\n", c, stat(th, c, 0), stat(th, c, 1), stat(pr, c, 0), stat(pr, c, 1) }
    print "(median over " R " alternating runs of 3 rounds each, range in brackets)"
  }'
rm -f "$dir"/flight_cost_*.h5
