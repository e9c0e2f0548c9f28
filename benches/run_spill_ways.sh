#!/usr/bin/env bash
# Flight recorder: each way of keeping the call words (benches/spill_ways.c), run alternately
# ROUNDS times with CALLS calls; per way the range of the recording thread's CPU time per call,
# the process's (helpers included) and the difference to `heap` (the memory sink) measured in
# the same round. DIR: the spill directory (default: this checkout's target/, i.e. the output's
# file system); run it again with DIR=/dev/shm for tmpfs.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p target/bench
cc -std=c11 -O2 -march=native -pthread benches/spill_ways.c -o target/bench/spill_ways
calls="${CALLS:-20000000}"; rounds="${ROUNDS:-5}"; dir="${DIR:-$PWD/target/bench}"
ways=(${WAYS:-none heap map map_populate memfd prefault pwrite copybehind})
out=$(for r in $(seq "$rounds"); do for w in "${ways[@]}"; do echo "ROUND $r $(target/bench/spill_ways "$w" "$calls" "$dir")"; done; done)
echo "$out" | awk -v ways="${ways[*]}" '
  $1 == "ROUND" { r = $2; w = $4; th[w, r] = $6; pr[w, r] = $8; lag[w] = $14 > lag[w] ? $14 : lag[w]; R = r > R ? r : R }
  function med(v, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t } return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2 }
  function stat(a, w, base,   i, v, lo, hi) { lo = 1e9; hi = -1e9; for (i = 1; i <= R; i++) { v[i] = a[w, i] - (base ? a["heap", i] : 0); if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i] } return sprintf(base ? "%+.2f (%+.1f..%+.1f)" : "%.2f (%.1f-%.1f)", med(v, R), lo, hi) }
  END {
    printf "%-13s %24s %24s %24s %24s %7s\n", "way", "thread ns/call", "thread - heap", "process ns/call", "process - heap", "lag ms"
    split(ways, W, " ")
    for (k = 1; k in W; k++) { w = W[k]; printf "%-13s %24s %24s %24s %24s %7s\n", w, stat(th, w, 0), stat(th, w, 1), stat(pr, w, 0), stat(pr, w, 1), lag[w] }
    print "(median over " R " alternating rounds, range in brackets; \"- heap\" is per round)"
  }'
