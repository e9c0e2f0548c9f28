#!/usr/bin/env bash
# The time the MPI plugin adds inside MPI_Init and MPI_Finalize, measured from outside
# (benches/mpi_setup_cost.c: the program's own clock around its MPI_Init and MPI_Finalize), on
# 2 ranks, release build: alternately without the plugin and with it preloaded (summary mode,
# the default), ROUNDS times each; prints each run's rank-0 times, then the medians and the
# median of the paired differences. With VERBOSE=2 the profiled runs also print the plugin's
# own account of its time inside both calls.
# Usage: benches/run_mpi_setup_cost.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cargo build --release --lib -p scope_profiler -p scope_profiler_mpi
mkdir -p target/bench
lib="$PWD/target/release"
mpicc -std=gnu99 -O2 benches/mpi_setup_cost.c -o target/bench/mpi_setup_cost
out=/tmp/sp_bench_setup_cost.h5
rounds=${1:-7}
plain=(); wrapped=()
for i in $(seq "$rounds"); do
  p=$(mpirun --oversubscribe -np 2 target/bench/mpi_setup_cost)
  w=$(SCOPE_PROFILER_FILE=$out SCOPE_PROFILER_VERBOSE=${VERBOSE:-0} mpirun --oversubscribe -np 2 \
        -x LD_PRELOAD="$lib/libscope_profiler_mpi.so" -x SCOPE_PROFILER_FILE -x SCOPE_PROFILER_VERBOSE \
        target/bench/mpi_setup_cost | grep '^init_s')
  echo "round $i: without: $p | with the plugin: $w"
  plain+=("$p"); wrapped+=("$w")
done
python3 - "$rounds" "${plain[@]}" "${wrapped[@]}" <<'PY'
import statistics, sys
n = int(sys.argv[1]); rows = sys.argv[2:]
def parse(r): f = r.split(); return float(f[1]), float(f[3])
p = [parse(r) for r in rows[:n]]; w = [parse(r) for r in rows[n:]]
for k, name in ((0, "MPI_Init"), (1, "MPI_Finalize")):
    a = [x[k] for x in p]; b = [x[k] for x in w]; d = [y - x for x, y in zip(a, b)]
    print(f"{name:13s} without {statistics.median(a):.3f} s  with {statistics.median(b):.3f} s  "
          f"added (median of paired differences) {statistics.median(d):+.3f} s  [{min(d):+.3f} .. {max(d):+.3f}]")
PY
rm -f "$out"
