#!/usr/bin/env bash
# Finalize time and rank-0 peak memory for 2, 4, 8, 16 ranks (oversubscribed on small machines).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cargo build --release --lib
mkdir -p target/bench
mpicc -std=c99 -O2 -Iinclude benches/mpi_finalize.c -o target/bench/mpi_finalize \
   -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lscope_profiler
# Every layout ($LAYOUTS, default all three), each at every rank count.
for layout in ${LAYOUTS:-regions columnar aggregate}; do
  echo "layout $layout"
  for np in ${NPS:-2 4 8 16}; do
    SCOPE_PROFILER_LAYOUT=$layout mpirun --oversubscribe -x SCOPE_PROFILER_LAYOUT -np "$np" target/bench/mpi_finalize "${1:-100000}" /tmp/sp_bench_mpi.h5
  done
done
ls -l /tmp/sp_bench_mpi.h5
