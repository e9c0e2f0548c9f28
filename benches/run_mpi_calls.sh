#!/usr/bin/env bash
# Time added per MPI call by the MPI plugin (benches/mpi_calls.c), 2 ranks, release build.
# Runs with the plugin linked and SCOPE_PROFILER_MPI=summary, =calls and =off, and once without
# the plugin (the program built plainly: its MPI_ and PMPI_ rounds must then agree). Each run
# compares, in one process, the PMPI_ entry points with the wrapped MPI_ ones.
# Usage: benches/run_mpi_calls.sh [iterations per block] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cargo build --release --lib -p scope_profiler -p scope_profiler_mpi
mkdir -p target/bench
lib="$PWD/target/release"
mpicc -std=gnu99 -O2 -Ibenches benches/mpi_calls.c -o target/bench/mpi_calls_plain
mpicc -std=gnu99 -O2 -Ibenches benches/mpi_calls.c -o target/bench/mpi_calls_plugin \
   -L"$lib" -Wl,-rpath,"$lib" -lscope_profiler_mpi
out=/tmp/sp_bench_mpi_calls.h5
for mode in summary calls off; do
  echo "== plugin linked, SCOPE_PROFILER_MPI=$mode"
  SCOPE_PROFILER_MPI=$mode SCOPE_PROFILER_FILE=$out SCOPE_PROFILER_VERBOSE=0 \
    mpirun --oversubscribe -np 2 -x SCOPE_PROFILER_MPI -x SCOPE_PROFILER_FILE -x SCOPE_PROFILER_VERBOSE \
    target/bench/mpi_calls_plugin "${1:-20000}" "${2:-41}"
done
echo "== without the plugin"
mpirun --oversubscribe -np 2 target/bench/mpi_calls_plain "${1:-20000}" "${2:-41}"
rm -f "$out"
