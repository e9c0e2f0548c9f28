#!/usr/bin/env bash
# Two configurations of benches/mpi_collective.c alternating (A, B, A, B, ...), ROUNDS times,
# under mpirun --oversubscribe -np NP with CALLS calls per rank; then, for each, the medians and
# ranges of finalize (the slowest rank), the raw write of the same bytes, their ratio and the CPU
# time of finalize summed over the ranks. Each configuration is a list of VAR=value (passed to
# every rank), e.g. two builds of the library side by side:
#   benches/ab_mpi_collective.sh 8 32 190000 "LD_LIBRARY_PATH=/tmp/libA SCOPE_PROFILER_LAYOUT=columnar" \
#                                          "LD_LIBRARY_PATH=/tmp/libB SCOPE_PROFILER_LAYOUT=columnar"
# (copies of target/release/libscope_profiler*.so). KEEP=1 also prints every run's lines.
# Build target/bench/mpi_collective first (benches/run_mpi_collective.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."
R=$1 NP=$2 C=$3 EA=$4 EB=$5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 BENCH_CPU=1
dir=$(mktemp -d)
out="$dir/runs.txt"
trap 'rm -rf "$dir"' EXIT
for _ in $(seq "$R"); do
  for x in A B; do
    if [ $x = A ]; then E="$EA"; else E="$EB"; fi
    xs=(-x BENCH_CPU)
    for kv in $E; do xs+=(-x "${kv%%=*}"); done
    # shellcheck disable=SC2086
    env $E mpirun --oversubscribe -np "$NP" "${xs[@]}" target/bench/mpi_collective "$C" "$dir" "$x" 2>/dev/null \
      | grep "^$x \|^cpu" | tr '\n' ' ' >> "$out" || true
    echo >> "$out"
  done
done
if [ -n "${KEEP:-}" ]; then cat "$out"; fi
python3 - "$out" <<'PY'
import sys, statistics as st
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 8:
        continue
    cpu = float(f[f.index("ranks") + 1]) if "ranks" in f else float("nan")
    runs.setdefault(f[0], []).append((float(f[4]), float(f[5]), float(f[6]), cpu))
for k, v in sorted(runs.items()):
    col = lambda i: [r[i] for r in v]
    print(f"{k} n={len(v)} finalize med {st.median(col(0)):.4f} [{min(col(0)):.4f}-{max(col(0)):.4f}] "
          f"raw med {st.median(col(1)):.4f} ratio med {st.median(col(2)):.2f} [{min(col(2)):.2f}-{max(col(2)):.2f}] "
          f"cpu med {st.median(col(3)):.3f} [{min(col(3)):.3f}-{max(col(3)):.3f}]")
PY
