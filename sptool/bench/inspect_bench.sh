#!/usr/bin/env bash
# Time `sptool inspect` against the Python package's `scope-profiler inspect`
# on the same file: 10 million calls over 16 ranks (schema 1).
#
#   sptool/bench/inspect_bench.sh [FILE.h5] [CALLS] [RANKS]
#
# Environment:
#   SCOPE_PROFILER  the `scope-profiler` executable of the Python package
#                   (default: <repo>/.venv/bin/scope-profiler)
#   SPTOOL_RUNS     timed runs of sptool; the median is reported (default 5)
#   PYTHON_RUNS     timed runs of scope-profiler inspect (default 1; one takes minutes)
# The file is made once with the make_big_file example and reused.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
file=${1:-${TMPDIR:-/tmp}/sptool_bench_10M.h5}
calls=${2:-10000000}
ranks=${3:-16}
scope_profiler=${SCOPE_PROFILER:-$repo/.venv/bin/scope-profiler}
sptool_runs=${SPTOOL_RUNS:-5}
python_runs=${PYTHON_RUNS:-1}

cd "$repo"
cargo build --release -q -p sptool --bin sptool --example make_big_file
sptool=$repo/target/release/sptool
if [[ ! -f $file ]]; then
    "$repo/target/release/examples/make_big_file" "$file" "$calls" "$ranks"
fi

# Seconds (wall clock) of one run of "$@", output discarded.
seconds() {
    local start end
    start=$(date +%s.%N)
    "$@" >/dev/null
    end=$(date +%s.%N)
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f\n", b - a }'
}

median() {
    sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo "file:    $file ($(du -h "$file" | cut -f1))"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
"$sptool" inspect "$file" >/dev/null # warm the page cache
sp_times=$(for _ in $(seq "$sptool_runs"); do seconds "$sptool" inspect "$file"; done)
sp=$(echo "$sp_times" | median)
printf 'sptool inspect:          %8.3f s (median of %d: %s)\n' "$sp" "$sptool_runs" "$(echo $sp_times | tr '\n' ' ')"

if [[ ! -x $scope_profiler ]]; then
    echo "no $scope_profiler: install the Python package (python3 -m venv .venv &&" \
         ".venv/bin/pip install scope-profiler==0.7.5) or set SCOPE_PROFILER" >&2
    exit 1
fi
py_times=$(for _ in $(seq "$python_runs"); do seconds "$scope_profiler" inspect "$file"; done)
py=$(echo "$py_times" | median)
printf 'scope-profiler inspect:  %8.3f s (median of %d: %s; %s)\n' "$py" "$python_runs" \
    "$(echo $py_times | tr '\n' ' ')" "$("$scope_profiler" --version 2>/dev/null || echo 'scope-profiler')"
awk -v p="$py" -v s="$sp" 'BEGIN { printf "ratio:                   %8.0fx faster\n", p / s }'
