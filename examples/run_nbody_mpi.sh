#!/bin/sh
# Build the n-body example, run it on 2 MPI ranks and show the profile.
#
#   examples/run_nbody_mpi.sh [bodies] [steps]        (defaults: 2048 bodies, 20 steps)
#
# Builds with CMake into $BUILD_DIR (default <repo>/build; configured in Release on first
# use), runs `mpirun -np $NP nbody_mpi` (NP=2) in $OUT_DIR (default $BUILD_DIR/nbody-run),
# where the profile goes to nbody_mpi.h5. scope_profiler prints its summary table at the
# end of the run; then the file is shown with `scope-profiler inspect` (PyPI package
# scope-profiler, found on PATH, in <repo>/.venv or next to $SCOPE_PROFILER_PYTHON) or,
# failing that, sptool.
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
out=${OUT_DIR:-$build/nbody-run}
np=${NP:-2}
mpirun=${MPIEXEC:-mpirun}

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" --target nbody_mpi -j "${JOBS:-2}"
exe="$build/examples/nbody_mpi"
[ -x "$exe" ] || { echo "run_nbody_mpi.sh: $exe was not built (MPI not found by CMake?)" >&2; exit 1; }

mkdir -p "$out"
file="$out/nbody_mpi.h5"
rm -f "$file"

# Open MPI: allow root (containers, CI) and more ranks than cores.
if "$mpirun" --version 2>/dev/null | grep -q "Open MPI"; then
  if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  export OMPI_MCA_rmaps_base_oversubscribe=1
fi

echo "== mpirun -np $np $exe $*"
(cd "$out" && SCOPE_PROFILER_FILE="$file" "$mpirun" -np "$np" "$exe" "$@")

inspect=""
if command -v scope-profiler >/dev/null 2>&1; then
  inspect=scope-profiler
elif [ -x "$repo/.venv/bin/scope-profiler" ]; then
  inspect="$repo/.venv/bin/scope-profiler"
elif [ -n "${SCOPE_PROFILER_PYTHON:-}" ] && [ -x "$(dirname "$SCOPE_PROFILER_PYTHON")/scope-profiler" ]; then
  inspect="$(dirname "$SCOPE_PROFILER_PYTHON")/scope-profiler"
fi
if [ -n "$inspect" ]; then
  echo "== scope-profiler inspect $file"
  "$inspect" inspect "$file"
else
  for sptool in "$repo/target/release/sptool" "$repo/target/debug/sptool"; do
    if [ -x "$sptool" ]; then
      echo "== sptool inspect $file"
      "$sptool" inspect "$file"
      exit 0
    fi
  done
  echo "== profile: $file (pip install scope-profiler, then: scope-profiler inspect $file)"
fi
