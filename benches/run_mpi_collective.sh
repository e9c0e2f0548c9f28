#!/usr/bin/env bash
# Finalize over MPI against a raw MPI_File_write_at_all of the same bytes by the same ranks in
# the same run (benches/mpi_collective.c), for NPS ranks x CALLS calls per rank, four ways:
# "rank0" (columnar through rank 0: SCOPE_PROFILER_COLLECTIVE=0), "collective" (columnar,
# written by every rank), "aggregate" (the other schema-3 layout, written by every rank),
# "default" (no layout asked for: regions up to 16 ranks, columnar above). WAYS picks some.
# REPEAT rounds, the ways alternating. One line per run:
#   way ranks calls/rank file-bytes finalize-s raw-s ratio status
# then benches/fit_mpi_collective.py fits finalize = a + b log2 P + c bytes to the collective runs.
# BENCH_MPIIO_WARM=1: every rank opens a scratch file with MPI-IO first, so that neither
# sp_finalize nor the raw write pays the MPI library's loading of its MPI-IO components
# (benches/mpi_collective.c); its time is printed ("mpiio-first-open S").
# Usage: NPS="2 4 8 16 32 64" CALLS="20000 200000" REPEAT=3 benches/run_mpi_collective.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cargo build --release --lib >&2
mkdir -p target/bench
mpicc -std=c99 -O2 -Iinclude benches/mpi_collective.c -o target/bench/mpi_collective \
   -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lscope_profiler
dir="${1:-$PWD/target/bench}"
for rep in $(seq "${REPEAT:-3}"); do
  for calls in ${CALLS:-20000 200000}; do
    for np in ${NPS:-2 4 8 16 32 64}; do
      for way in ${WAYS:-rank0 collective aggregate default}; do
        case $way in
          rank0) layout=columnar collective=0 ;;
          collective) layout=columnar collective=1 ;;
          aggregate) layout=aggregate collective=1 ;;
          default) layout= collective=1 ;;
          *) echo "unknown way $way" >&2; exit 2 ;;
        esac
        SCOPE_PROFILER_LAYOUT=$layout SCOPE_PROFILER_COLLECTIVE=$collective \
          BENCH_MPIIO_WARM=${BENCH_MPIIO_WARM:-0} \
          mpirun --oversubscribe -np "$np" -x SCOPE_PROFILER_LAYOUT -x SCOPE_PROFILER_COLLECTIVE -x BENCH_MPIIO_WARM \
          target/bench/mpi_collective "$calls" "$dir" "$way"
      done
    done
  done
done
