#!/usr/bin/env bash
# Cost of sampling (docs/sampling.md): the n-body and matmul examples with sampling off, at
# 200 Hz and at 1000 Hz, alternating round by round, serial and as 2 MPI ranks; ratios of CPU
# and wall time to the same round without sampling, samples taken and their bytes.
#   benches/run_sampling_overhead.sh [ROUNDS]      (default 7)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --lib
mkdir -p target/bench
for ex in nbody matmul; do
  cc -std=c99 -O2 -g -D_GNU_SOURCE -Iinclude examples/$ex/$ex.c -o target/bench/$ex \
     -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lscope_profiler -lm
  mpicc -std=c99 -O2 -g -D_GNU_SOURCE -DUSE_MPI -Iinclude examples/$ex/$ex.c -o target/bench/${ex}_mpi \
     -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lscope_profiler -lm
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
MPIRUN=(mpirun --oversubscribe -np 2)
PY=${SCOPE_PROFILER_PYTHON:-.venv/bin/python}
"$PY" benches/sampling_overhead.py "${1:-7}" \
  nbody -- "$PWD/target/bench/nbody" 4096 20 ";;" \
  matmul -- "$PWD/target/bench/matmul" 1200 8388608 10 ";;" \
  nbody_mpi_2_ranks -- "${MPIRUN[@]}" "$PWD/target/bench/nbody_mpi" 4096 20 ";;" \
  matmul_mpi_2_ranks -- "${MPIRUN[@]}" "$PWD/target/bench/matmul_mpi" 1200 8388608 10
