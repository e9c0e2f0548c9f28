#!/usr/bin/env bash
# The main job: set up (scripts/setup.sh), build the library and the n-body example with
# CMake, run it under mpirun with 2 ranks, and print its profile. Arguments go to the example
# (bodies, steps).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release --locked -p sptool
exec ./examples/run_nbody_mpi.sh "$@"
