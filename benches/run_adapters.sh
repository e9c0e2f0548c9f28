#!/usr/bin/env bash
# Time added per Kokkos kernel launch (an empty parallel_for, Serial backend) by the library as
# Kokkos tool, and per NVTX push/pop pair, start/end range and mark by the library as NVTX
# injection, each against the same binary without the tool, and our own by-name region pair
# measured in the same binaries; run in alternation, medians over the rounds; the load average
# before and after. With CALLGRIND=1, also the instructions per pair (valgrind's callgrind: a
# run with N pairs minus a run with none, over N), which do not depend on the load.
# Usage: benches/run_adapters.sh [rounds]   (LIB=<path of another libscope_profiler.so> to
#        measure that build instead, e.g. an older one, with the same binaries)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-7}
cargo build --release --lib -p scope_profiler
mkdir -p target/bench
rel="$PWD/target/release"
lib="${LIB:-$rel/libscope_profiler.so}"
libdir="$(dirname "$lib")"
nvtx_inc=$(.venv/bin/python -c "import nvidia.nvtx, os; print(os.path.join(list(nvidia.nvtx.__path__)[0], 'include'))")
gcc -O2 -Ibenches -Iinclude -I"$nvtx_inc" benches/nvtx_overhead.c -o target/bench/nvtx_overhead \
    -L"$libdir" -Wl,--disable-new-dtags -Wl,-rpath,"$libdir" -lscope_profiler -ldl
g++ -std=c++17 -O2 -Ibenches -Iinclude -I/usr/include/trilinos benches/kokkos_overhead.cpp -o target/bench/kokkos_overhead \
    -L"$libdir" -Wl,--disable-new-dtags -Wl,-rpath,"$libdir" -lscope_profiler -ltrilinos_kokkoscore -ldl
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export SCOPE_PROFILER_VERBOSE=0 SCOPE_PROFILER_FILE="$out/p.h5" SCOPE_PROFILER_LAYOUT=aggregate
echo "library: $lib"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
value() { awk -v k="$1" '$1 == "RESULT" && $2 == k { print $3 }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
declare -A R
for ((i = 0; i < rounds; i++)); do
    res=$(target/bench/kokkos_overhead 200000 7)
    R[kk_off]+="$(value kernel_ns <<<"$res") "; R[kk_name_off]+="$(value name_pair_ns <<<"$res") "
    res=$(KOKKOS_PROFILE_LIBRARY="$lib" target/bench/kokkos_overhead 200000 7)
    R[kk_on]+="$(value kernel_ns <<<"$res") "; R[kk_name_on]+="$(value name_pair_ns <<<"$res") "
    for side in off on; do
        if [ $side = on ]; then res=$(NVTX_INJECTION64_PATH="$lib" target/bench/nvtx_overhead 1000000 7); else res=$(target/bench/nvtx_overhead 1000000 7); fi
        for k in nvtx_pair nvtx_ex_pair name_pair nvtx_range nvtx_mark; do R[${k}_$side]+="$(value ${k}_ns <<<"$res") "; done
        # Each round's ratio, within one process: the spread of the ratio over the rounds.
        if [ $side = on ]; then
            R[ratio_push]+="$(awk -v a="$(value nvtx_pair_ns <<<"$res")" -v p="$(value name_pair_ns <<<"$res")" 'BEGIN { print a / p }') "
            R[ratio_ex]+="$(awk -v a="$(value nvtx_ex_pair_ns <<<"$res")" -v p="$(value name_pair_ns <<<"$res")" 'BEGIN { print a / p }') "
        fi
    done
done
m() { tr ' ' '\n' <<<"${R[$1]}" | grep . | median; }
span() { tr ' ' '\n' <<<"${R[$1]}" | grep . | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f-%.2f", lo, hi }'; }
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== medians of $rounds rounds (ns); 'added' = with the tool - without, 'x name pair' = added / our by-name pair (same process)"
printf '%-44s %10s %10s %10s %10s %12s\n' case without with added "name pair" "x name pair"
row() { awk -v n="$1" -v a="$2" -v b="$3" -v p="$4" 'BEGIN { printf "%-44s %10.2f %10.2f %10.2f %10.2f %12.2f\n", n, a, b, b - a, p, (b - a) / p }'; }
row "Kokkos empty parallel_for (Serial)" "$(m kk_off)" "$(m kk_on)" "$(m kk_name_on)"
row "NVTX nvtxRangePushA/Pop pair" "$(m nvtx_pair_off)" "$(m nvtx_pair_on)" "$(m name_pair_on)"
row "NVTX domain PushEx(registered)/Pop pair" "$(m nvtx_ex_pair_off)" "$(m nvtx_ex_pair_on)" "$(m name_pair_on)"
row "NVTX nvtxRangeStartA/End range" "$(m nvtx_range_off)" "$(m nvtx_range_on)" "$(m name_pair_on)"
row "NVTX nvtxMarkA" "$(m nvtx_mark_off)" "$(m nvtx_mark_on)" "$(m name_pair_on)"
echo "(per-round ratio, same process, min-max: push/pop $(span ratio_push), domain Ex $(span ratio_ex); by-name pair without the tool: Kokkos run $(m kk_name_off), NVTX run $(m name_pair_off))"
if [ "${CALLGRIND:-0}" = 1 ]; then
    echo "== instructions (callgrind, I refs of N=200000 minus N=0, over N)"
    irefs() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 >/dev/null | awk '/Collected :/ { print $4 }'; }
    n=200000
    for c in name push ex range mark; do
        a=$(NVTX_INJECTION64_PATH="$lib" irefs target/bench/nvtx_overhead $n 1 $c)
        b=$(NVTX_INJECTION64_PATH="$lib" irefs target/bench/nvtx_overhead 0 1 $c)
        awk -v c="$c" -v a="$a" -v b="$b" -v n=$n 'BEGIN { printf "%-8s %8.1f instructions per pair\n", c, (a - b) / n }'
    done
    a=$(KOKKOS_PROFILE_LIBRARY="$lib" irefs target/bench/kokkos_overhead $n 1)
    b=$(KOKKOS_PROFILE_LIBRARY="$lib" irefs target/bench/kokkos_overhead 0 1)
    c=$(irefs target/bench/kokkos_overhead $n 1)
    d=$(irefs target/bench/kokkos_overhead 0 1)
    awk -v a="$a" -v b="$b" -v c="$c" -v d="$d" -v n=$n 'BEGIN { printf "kokkos   %8.1f instructions added per launch by the tool (%.1f per launch and by-name pair with it, %.1f without)\n", ((a - b) - (c - d)) / n, (a - b) / n, (c - d) / n }'
fi
