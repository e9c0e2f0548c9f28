#!/usr/bin/env bash
# Time added by the OpenMP tool per parallel region and per barrier (benches/openmp_overhead.c,
# clang -fopenmp on libomp, 2 threads), and per call of an instrumented function
# (benches/functions_overhead.c, gcc -finstrument-functions), each against the same binary with
# the tool off, run in alternation in this one run; medians over the rounds.
# Usage: benches/run_openmp_functions.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-7}
cargo build --release --lib -p scope_profiler
mkdir -p target/bench
lib="$PWD/target/release/libscope_profiler.so"
clang -O2 -fopenmp -Ibenches benches/openmp_overhead.c -o target/bench/openmp_overhead
gcc -O2 -g -finstrument-functions -Ibenches benches/functions_overhead.c -o target/bench/functions_instrumented \
    -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lscope_profiler
gcc -O2 -g -Ibenches benches/functions_overhead.c -o target/bench/functions_plain
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf 'tiny\n' > "$out/filter"; printf 'SCOREP_REGION_NAMES_BEGIN\nEXCLUDE tiny\nSCOREP_REGION_NAMES_END\n' > "$out/filter"
export SCOPE_PROFILER_VERBOSE=0 SCOPE_PROFILER_FILE="$out/p.h5" OMP_NUM_THREADS=2
value() { awk -v k="$1" '$1 == "RESULT" && $2 == k { print $3 }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
declare -A R
for ((i = 0; i < rounds; i++)); do
    for mode in off on; do
        flag=$([ $mode = on ] && echo 1 || echo 0)
        res=$(OMP_TOOL_LIBRARIES="$lib" SCOPE_PROFILER_OPENMP=$flag target/bench/openmp_overhead 20000 9)
        R[omp_par_$mode]+="$(value parallel_ns <<<"$res") "
        R[omp_bar_$mode]+="$(value barrier_ns <<<"$res") "
    done
    R[fn_plain]+="$(target/bench/functions_plain 2000000 7 | value call_ns) "
    R[fn_off]+="$(SCOPE_PROFILER_FUNCTIONS=0 target/bench/functions_instrumented 2000000 7 | value call_ns) "
    R[fn_all]+="$(SCOPE_PROFILER_THROTTLE=off target/bench/functions_instrumented 2000000 7 | value call_ns) "
    R[fn_throttled]+="$(target/bench/functions_instrumented 2000000 7 | value call_ns) "
    R[fn_filtered]+="$(SCOPE_PROFILER_FILTER="$out/filter" target/bench/functions_instrumented 2000000 7 | value call_ns) "
done
m() { tr ' ' '\n' <<<"${R[$1]}" | grep . | median; }
echo "== OpenMP tool, 2 threads, clang -fopenmp (libomp), medians of $rounds rounds (ns)"
printf '%-34s %10s %10s %10s %8s\n' construct "tool off" "tool on" added ratio
for k in par bar; do
    off=$(m omp_${k}_off); on=$(m omp_${k}_on)
    name=$([ $k = par ] && echo "empty parallel region" || echo "barrier")
    awk -v n="$name" -v a="$off" -v b="$on" 'BEGIN { printf "%-34s %10.1f %10.1f %10.1f %8.2f\n", n, a, b, b - a, b / a }'
done
echo "== instrumented function call (gcc -finstrument-functions), medians of $rounds rounds (ns per call)"
base=$(m fn_off)
printf '%-48s %10s %10s %8s\n' case "per call" "added" ratio
for k in plain off all throttled filtered; do
    v=$(m fn_$k)
    case $k in
        plain) d="built without the flag";;
        off) d="instrumented, SCOPE_PROFILER_FUNCTIONS=0 (baseline)";;
        all) d="instrumented, every call recorded (throttle off)";;
        throttled) d="instrumented, default throttling (throttled)";;
        filtered) d="instrumented, excluded by the filter file";;
    esac
    awk -v n="$d" -v a="$base" -v b="$v" 'BEGIN { printf "%-48s %10.2f %10.2f %8.2f\n", n, b, b - a, b / a }'
done
