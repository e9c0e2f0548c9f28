#!/usr/bin/env bash
# Time added per MPI call by the MPI plugin (benches/mpi_calls.c), 2 ranks, release build.
# Runs with the plugin linked and SCOPE_PROFILER_MPI=summary, =calls and =off, and once without
# the plugin (the program built plainly: its MPI_ and PMPI_ rounds must then agree). Each run
# compares, in one process, the PMPI_ entry points with the wrapped MPI_ ones. The load
# average is printed before and after; a table at the end gathers the added time per call.
#
# With --callgrind (valgrind): instructions per call instead, which the machine's load does not
# change, on 1 rank (the exchange goes to the rank itself): for each operation, the PMPI_ and the
# MPI_ entry points, each the difference of two runs of different lengths counted inside the
# bench's loop only; the wrapped minus the plain count is what the plugin and the core add.
# Usage: benches/run_mpi_calls.sh [iterations per block] [rounds] | --callgrind
# MODES (default "summary calls off") narrows either way, OPS (default "rank allreduce exchange") the count.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cargo build --release --lib -p scope_profiler -p scope_profiler_mpi
mkdir -p target/bench
lib="$PWD/target/release"
mpicc -std=gnu99 -O2 -g -Ibenches benches/mpi_calls.c -o target/bench/mpi_calls_plain
mpicc -std=gnu99 -O2 -g -Ibenches benches/mpi_calls.c -o target/bench/mpi_calls_plugin \
   -L"$lib" -Wl,-rpath,"$lib" -lscope_profiler_mpi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export SCOPE_PROFILER_FILE=$out/p.h5 SCOPE_PROFILER_VERBOSE=0
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "${1:-}" = "--callgrind" ]; then
    count() { # mode op variant iterations -> instructions inside the op's loop
        local fn=$2
        [ "$fn" = rank ] && fn=comm_rank
        SCOPE_PROFILER_MPI=$1 mpirun --oversubscribe -np 1 -x SCOPE_PROFILER_MPI -x SCOPE_PROFILER_FILE -x SCOPE_PROFILER_VERBOSE \
            valgrind --tool=callgrind --toggle-collect="$fn" --callgrind-out-file="$out/cg.out" \
            target/bench/mpi_calls_plugin "$4" 1 "$2" "$3" >/dev/null 2>&1
        awk '/^(summary|totals):/ { print $2; exit }' "$out/cg.out"
    }
    echo "== instructions per MPI call (callgrind, 1 rank, (3000 - 1000 iterations) / 2000)"
    printf '%-10s %-22s %12s %12s %12s\n' mode operation "PMPI_" "MPI_" added
    for mode in ${MODES:-summary calls off}; do
        for op in ${OPS:-rank allreduce exchange}; do
            calls=1
            [ $op = exchange ] && calls=4
            per() { awk -v a="$(count $mode $op "$1" 1000)" -v b="$(count $mode $op "$1" 3000)" -v c=$calls 'BEGIN { printf "%.1f", (b - a) / 2000 / c }'; }
            p=$(per plain); w=$(per wrapped)
            awk -v m=$mode -v o=$op -v p="$p" -v w="$w" 'BEGIN { printf "%-10s %-22s %12.1f %12.1f %+12.1f\n", m, o, p, w, w - p }'
        done
    done
    exit 0
fi
n=${1:-20000}
rounds=${2:-41}
for mode in ${MODES:-summary calls off}; do
  echo "== plugin linked, SCOPE_PROFILER_MPI=$mode"
  SCOPE_PROFILER_MPI=$mode mpirun --oversubscribe -np 2 -x SCOPE_PROFILER_MPI -x SCOPE_PROFILER_FILE -x SCOPE_PROFILER_VERBOSE \
    target/bench/mpi_calls_plugin "$n" "$rounds" | tee "$out/$mode.txt"
done
echo "== without the plugin"
mpirun --oversubscribe -np 2 target/bench/mpi_calls_plain "$n" "$rounds" | tee "$out/none.txt"
echo "== added per MPI call, ns: median of the paired differences (25th..75th percentile)"
printf '%-10s %-24s %-24s %-24s\n' mode "MPI_Comm_rank" "MPI_Allreduce 8 B" "Irecv+Isend+2 Wait"
for mode in summary calls off none; do
    awk -v m=$mode '/^MPI_Comm_rank|^MPI_Allreduce|^Irecv/ { v[++k] = sprintf("%.1f (%s)", $(NF - 1), $NF) }
        END { printf "%-10s %-24s %-24s %-24s\n", m, v[1], v[2], v[3] }' "$out/$mode.txt"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
