#!/usr/bin/env bash
# Build the release library and the C benchmark, run it (10 million recorded calls) once per
# clock: SCOPE_PROFILER_CLOCK=auto (the TSC where safe) and monotonic (clock_gettime), then
# print the two side by side. Every ratio is against baselines measured in the same process.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --lib
mkdir -p target/bench
cc -std=c99 -O2 -D_GNU_SOURCE -Iinclude benches/core_overhead.c -o target/bench/core_overhead \
   -Ltarget/release -Wl,-rpath,"$PWD/target/release" -lscope_profiler
modes=(${SCOPE_PROFILER_BENCH_CLOCKS:-auto monotonic})
declare -A OUT
for mode in "${modes[@]}"; do
    echo "== SCOPE_PROFILER_CLOCK=$mode"
    OUT[$mode]=$(SCOPE_PROFILER_CLOCK=$mode target/bench/core_overhead "${1:-1000000}" "${2:-5}" "${3:-/tmp/sp_bench_core.h5}")
    grep -v '^RESULT ' <<<"${OUT[$mode]}"
done
# Side by side: ns per pair, and the ratios to the rdtsc pair and the clock_gettime pair
# measured in the same process.
value() { awk -v k="$2" '$1 == "RESULT" && $2 == k { print $3 }' <<<"$1"; }
echo
printf '%-30s' "SCOPE_PROFILER_CLOCK="; printf '%12s' "${modes[@]}"; echo
# Medians over rounds, then the least-disturbed round (min) of each kind.
for m in "" min_; do
    for key in rdtsc_pair clock_gettime_pair handle_pair name_pair; do
        printf '%-30s' "$m$key (ns)"
        for mode in "${modes[@]}"; do printf '%12s' "$(value "${OUT[$mode]}" $m$key)"; done
        echo
    done
    for key in handle_pair name_pair; do
        for base in rdtsc_pair clock_gettime_pair; do
            printf '%-30s' "$m$key / $base"
            for mode in "${modes[@]}"; do
                printf '%12s' "$(awk -v a="$(value "${OUT[$mode]}" $m$key)" -v b="$(value "${OUT[$mode]}" $m$base)" 'BEGIN { if (b > 0) printf "%.3f", a / b; else printf "-" }')"
            done
            echo
        done
    done
done
echo "(targets with the TSC clock: handle_pair / rdtsc_pair <= 1.5, name_pair / rdtsc_pair <= 1.8)"
