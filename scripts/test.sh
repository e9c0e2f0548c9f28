#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run every test: Rust unit tests, C/C++/Fortran programs
# against the built library, real mpirun runs, LIKWID under fake MSR files, the CMake
# package, sptool, and the PyPI reader as oracle. This is the README's test command.
# LIKWID runs twice: Debian's 5.2 and 5.5.1 built once from the vendored tarball into .likwid/
# (scripts/likwid55.sh; where the tarball is absent, the 5.5 tests are skipped by design).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# Build LIKWID 5.5.1 now (reused by later runs), so its one-line status shows before the tests.
lk=0; ./scripts/likwid55.sh >/dev/null || lk=$?
[ "$lk" -eq 0 ] || [ "$lk" -eq 3 ] || echo "[test] LIKWID 5.5.1 did not build (see above): the likwid55 tests will fail" >&2
# The suite needs 2 CPUs (LIKWID on CPUs 0 and 1, likwid-mpirun with 2 ranks); any count above works.
cpus=$(nproc)
[ "$cpus" -ge 2 ] || echo "[test] this process may use $cpus CPU: the tests that need 2 CPUs will fail, each saying so in one line" >&2
# Some tests run programs as the unprivileged user nobody (file safety, no threads): nobody
# must reach the build, so each directory above the checkout must be searchable by others
# (a checkout inside `mktemp -d` is not). Ours are made so (o+x: searchable, not listable).
d="$PWD"
while [ "$d" != / ]; do
    if [ "$(( $(stat -c '%a' "$d" | sed 's/.*\(.\)$/\1/') & 1 ))" -eq 0 ]; then
        if [ "$(stat -c '%u' "$d")" -eq "$(id -u)" ] && chmod o+x "$d"; then
            echo "[test] made $d searchable by others (o+x): tests run programs as nobody from the build below it" >&2
        else
            echo "[test] $d is not searchable by others: the tests run as nobody will fail" >&2
        fi
    fi
    d=$(dirname "$d")
done
export SCOPE_PROFILER_PYTHON="$PWD/.venv/bin/python"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cargo build --workspace --all-targets --locked
log=$(mktemp)
status=0
cargo test --workspace --locked --no-fail-fast -- --test-threads=2 2>&1 | tee "$log" || status=$?
# One closing line over every test binary (cargo prints one "test result" line per binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "total: %d passed, %d failed\n", p, f }' "$log"
rm -f "$log"
exit "$status"
