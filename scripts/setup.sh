#!/usr/bin/env bash
# Install what building and testing scope_profiler needs on Debian 12 (idempotent):
# system packages, and a Python virtual environment with the PyPI scope-profiler package
# (the compatibility oracle) in .venv. Rust (cargo >= 1.85) must already be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential pkg-config libhdf5-dev hdf5-tools libopenmpi-dev openmpi-bin gfortran
          cmake libclang-dev likwid python3-venv fonts-dejavu-core util-linux valgrind
          mpich libmpich-dev strace clang libomp-dev)
# The Kokkos tool adapter's tests: Debian's Kokkos (3.4, Serial backend).
PACKAGES+=(libtrilinos-kokkos-dev)
# glibc's split debug file (names and lines of sampled libc code, found by build id)
PACKAGES+=(libc6-dbg)
# The OTF2 library sptool's OTF2 export loads, otf2-print, and Debian's Python OTF2 reader (for
# /usr/bin/python3) that the export tests read archives with.
PACKAGES+=(libopen-trace-format2-dev otf2-tools python3-otf2)
# The stacks of a test program that hangs, in the test's failure report.
PACKAGES+=(gdb)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

command -v cargo >/dev/null || { echo "[setup] cargo not found: install Rust >= 1.85 (rustup)"; exit 1; }
# The MPI plugin's operations (rsmpi: bindgen over each family's mpi.h needs libclang-dev,
# above) are built offline against Cargo.lock by mpi/build.rs: fetch every locked package.
cargo fetch --locked -q

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import scope_profiler" 2>/dev/null; then
  echo "[setup] creating .venv with scope-profiler from PyPI"
  "$PY" -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check "scope-profiler==0.7.5"
fi
# The NVTX injection's tests: the NVTX 3 headers (header-only; no CUDA needed).
if ! .venv/bin/python -c "import nvidia.nvtx" 2>/dev/null; then
  echo "[setup] installing the NVTX headers (nvidia-nvtx-cu12) into .venv"
  .venv/bin/pip install -q --disable-pip-version-check "nvidia-nvtx-cu12==12.9.79"
fi
# The analysis tools the exports are tested with (Hatchet, Thicket, Extra-P): wheels for
# Python 3.11, about 50 s on a fresh venv; bounded so that a stalled index fails the setup.
if ! .venv/bin/python -c "import hatchet, thicket, extrap" >/dev/null 2>&1; then
  echo "[setup] installing llnl-hatchet, llnl-thicket and extrap into .venv"
  timeout 900 .venv/bin/pip install -q --disable-pip-version-check --timeout 60 \
    "llnl-hatchet==2026.2.0" "llnl-thicket==2026.1.1" "extrap==4.2.5"
fi
echo "[setup] ok"
