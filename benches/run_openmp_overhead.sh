#!/usr/bin/env bash
# Time added by the OpenMP tool per empty parallel region and per barrier
# (benches/openmp_overhead.c, clang -fopenmp on libomp), against the same binary in the same
# run with: the tool off (SCOPE_PROFILER_OPENMP=0: the runtime runs without a tool, the
# baseline), and the floor (benches/ompt_floor_tool.c: a tool registering the same callbacks
# and doing nothing in them, i.e. what the OMPT interface itself costs on this runtime). The
# three run in alternation, each round; medians over the rounds, and the range. On 2 threads
# (the target) and on 1 thread (the callbacks' own work, without waiting for another thread).
# Also printed: the cost of one TSC read on this machine (the tool reads the clock once per
# callback that begins or ends a region).
# Usage: benches/run_openmp_overhead.sh [rounds] [threads...]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-7}
shift || true
threads=${*:-2 1}
cargo build --release --lib -p scope_profiler
mkdir -p target/bench
# SCOPE_PROFILER_LIB: another build of the library to time (the same binary and floor).
lib="${SCOPE_PROFILER_LIB:-$PWD/target/release/libscope_profiler.so}"
floor="$PWD/target/bench/libompt_floor_tool.so"
clang -O2 -fopenmp -Ibenches benches/openmp_overhead.c -o target/bench/openmp_overhead
clang -O2 -shared -fPIC benches/ompt_floor_tool.c -o "$floor"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export SCOPE_PROFILER_VERBOSE=0 SCOPE_PROFILER_FILE="$out/p.h5"
value() { awk -v k="$1" '$1 == "RESULT" && $2 == k { print $3 }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
range() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.0f-%.0f", lo, hi }'; }
declare -A R
for t in $threads; do
    for ((i = 0; i < rounds; i++)); do
        for mode in off floor on; do
            case $mode in
                off) res=$(OMP_NUM_THREADS=$t OMP_TOOL_LIBRARIES="$lib" SCOPE_PROFILER_OPENMP=0 target/bench/openmp_overhead 20000 9) ;;
                floor) res=$(OMP_NUM_THREADS=$t OMP_TOOL_LIBRARIES="$floor" target/bench/openmp_overhead 20000 9) ;;
                on) res=$(OMP_NUM_THREADS=$t OMP_TOOL_LIBRARIES="$lib" SCOPE_PROFILER_OPENMP=1 target/bench/openmp_overhead 20000 9) ;;
            esac
            R[par_${t}_$mode]+="$(value parallel_ns <<<"$res") "
            R[bar_${t}_$mode]+="$(value barrier_ns <<<"$res") "
            R[tsc]+="$(value rdtsc_ns <<<"$res") "
        done
    done
done
m() { tr ' ' '\n' <<<"${R[$1]}" | grep . | median; }
rg() { tr ' ' '\n' <<<"${R[$1]}" | grep . | range; }
echo "== OpenMP tool, clang -fopenmp (libomp), medians of $rounds rounds (ns per construct; range over the rounds)"
printf '%-8s %-22s %16s %16s %16s %9s %9s %9s\n' threads construct "tool off" "floor tool" "tool on" "on-off" "on/off" "on-off/floor-off"
for t in $threads; do
    for k in par bar; do
        off=$(m ${k}_${t}_off); fl=$(m ${k}_${t}_floor); on=$(m ${k}_${t}_on)
        name=$([ $k = par ] && echo "empty parallel region" || echo "barrier")
        awk -v t="$t" -v n="$name" -v a="$off" -v f="$fl" -v b="$on" -v ra="$(rg ${k}_${t}_off)" -v rf="$(rg ${k}_${t}_floor)" -v rb="$(rg ${k}_${t}_on)" \
            'BEGIN { d = f - a; printf "%-8s %-22s %7.0f %-8s %7.0f %-8s %7.0f %-8s %+9.0f %9.2f %9s\n", t, n, a, "(" ra ")", f, "(" rf ")", b, "(" rb ")", b - a, b / a, (d > 0 ? sprintf("%.2f", (b - a) / d) : "-") }'
    done
done
echo "one TSC read: $(m tsc) ns (median of the runs; range $(rg tsc))"
# This VM's speed is bimodal from run to run; the three ways of a round run back to back, so
# the round's own ratios are the steadier figure.
echo "== paired by round: median (range) over the rounds of each round's tool on / floor and on - off"
paired() { paste -d' ' <(tr ' ' '\n' <<<"${R[$1]}" | grep .) <(tr ' ' '\n' <<<"${R[$2]}" | grep .) | awk -v op="$3" '{ print (op == "/") ? $1 / $2 : $1 - $2 }' | sort -g | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f (%.2f..%.2f)", m, v[1], v[NR] }'; }
for t in $threads; do
    for k in par bar; do
        name=$([ $k = par ] && echo "empty parallel region" || echo "barrier")
        printf '%-8s %-22s on/floor %-22s on-off %s ns\n' "$t" "$name" "$(paired ${k}_${t}_on ${k}_${t}_floor /)" "$(paired ${k}_${t}_on ${k}_${t}_off -)"
    done
done
