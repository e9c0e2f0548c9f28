#!/usr/bin/env bash
# Time added per call of an instrumented function (benches/functions_overhead.c, a tiny function
# built with gcc -finstrument-functions and linked with the library), against the same binary
# with the functions off (SCOPE_PROFILER_FUNCTIONS=0, the baseline), in alternation in each
# round: every call recorded (SCOPE_PROFILER_THROTTLE=off), throttled (the default throttling:
# the function is throttled after 100,000 calls), excluded by a filter file, and the program
# built without the flag. Medians over the rounds, with the range, the load average before and
# after, and two bare rdtsc timed the same way in the same processes.
#
# With --callgrind (valgrind): instructions per call instead, which the machine's load does not
# change: the difference of two runs of different lengths (100,000 and 300,000 calls) counted in
# `main` only, so that setup and finalize cancel out.
# Usage: benches/run_functions_overhead.sh [rounds] | --callgrind
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --lib -p scope_profiler
mkdir -p target/bench
lib="$PWD/target/release"
gcc -O2 -g -finstrument-functions -Ibenches benches/functions_overhead.c -o target/bench/functions_instrumented \
    -L"$lib" -Wl,-rpath,"$lib" -lscope_profiler
gcc -O2 -g -Ibenches benches/functions_overhead.c -o target/bench/functions_plain
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf 'SCOREP_REGION_NAMES_BEGIN\nEXCLUDE tiny\nSCOREP_REGION_NAMES_END\n' > "$out/filter"
export SCOPE_PROFILER_VERBOSE=0 SCOPE_PROFILER_FILE="$out/p.h5"
cases="plain off all throttled filtered"
describe() {
    case $1 in
        plain) echo "built without -finstrument-functions";;
        off) echo "instrumented, SCOPE_PROFILER_FUNCTIONS=0 (baseline)";;
        all) echo "instrumented, every call recorded (throttle off)";;
        throttled) echo "instrumented, throttled (default throttling)";;
        filtered) echo "instrumented, excluded by the filter file";;
    esac
}
run_case() { # case calls reps [runner...]
    local k=$1 n=$2 reps=$3
    shift 3
    case $k in
        plain) "$@" target/bench/functions_plain "$n" "$reps";;
        off) SCOPE_PROFILER_FUNCTIONS=0 "$@" target/bench/functions_instrumented "$n" "$reps";;
        all) SCOPE_PROFILER_THROTTLE=off "$@" target/bench/functions_instrumented "$n" "$reps";;
        throttled) "$@" target/bench/functions_instrumented "$n" "$reps";;
        filtered) SCOPE_PROFILER_FILTER="$out/filter" "$@" target/bench/functions_instrumented "$n" "$reps";;
    esac
}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "${1:-}" = "--callgrind" ]; then
    count() { # case calls -> instructions counted in main
        run_case "$1" "$2" 1 valgrind --tool=callgrind --toggle-collect=main --callgrind-out-file="$out/cg.out" >/dev/null 2>&1
        awk '/^(summary|totals):/ { print $2; exit }' "$out/cg.out"
    }
    echo "== instructions per call (callgrind, (300,000 calls - 100,000 calls) / 200,000)"
    printf '%-52s %12s %12s\n' case "instr/call" "added"
    declare -A I
    for k in $cases; do
        a=$(count "$k" 100000); b=$(count "$k" 300000)
        I[$k]=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.1f", (b - a) / 200000 }')
    done
    for k in $cases; do
        awk -v n="$(describe "$k")" -v v="${I[$k]}" -v base="${I[off]}" 'BEGIN { printf "%-52s %12.1f %+12.1f\n", n, v, v - base }'
    done
    exit 0
fi
rounds=${1:-7}
value() { awk -v k="$1" '$1 == "RESULT" && $2 == k { print $3 }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
range() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f-%.2f", lo, hi }'; }
declare -A R D
for ((i = 0; i < rounds; i++)); do
    for k in $cases; do
        res=$(run_case "$k" 2000000 7 2>/dev/null)
        R[$k]+="$(value call_ns <<<"$res") "
        R[tsc]+="$(value tsc_pair_ns <<<"$res") "
        eval "last_$k=$(value call_ns <<<"$res")"
    done
    # The round's own differences against its baseline (drifts of a shared machine cancel).
    for k in $cases; do
        D[$k]+="$(awk -v a="$last_off" -v b="$(eval echo \$last_$k)" 'BEGIN { print b - a }') "
    done
done
m() { tr ' ' '\n' <<<"$1" | grep . | median; }
r() { tr ' ' '\n' <<<"$1" | grep . | range; }
echo "== instrumented function call (gcc -finstrument-functions), $rounds rounds, ns per call"
printf '%-52s %10s %14s %12s %16s\n' case median "(range)" "added" "(round range)"
for k in $cases; do
    awk -v n="$(describe "$k")" -v v="$(m "${R[$k]}")" -v rg="$(r "${R[$k]}")" -v d="$(m "${D[$k]}")" -v dr="$(r "${D[$k]}")" \
        'BEGIN { printf "%-52s %10.2f %14s %+12.2f %16s\n", n, v, rg, d, dr }'
done
printf '%-52s %10.2f %14s\n' "two bare rdtsc (same processes)" "$(m "${R[tsc]}")" "$(r "${R[tsc]}")"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
