#!/usr/bin/env bash
# Time added per Kokkos kernel launch (an empty parallel_for, Serial backend) by the library as
# Kokkos tool, and per NVTX push/pop pair by the library as NVTX injection, each against the
# same binary without the tool, and our own by-name region pair measured in the same binaries;
# run in alternation, medians over the rounds.
# Usage: benches/run_adapters.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-7}
cargo build --release --lib -p scope_profiler
mkdir -p target/bench
rel="$PWD/target/release"
lib="$rel/libscope_profiler.so"
nvtx_inc=$(.venv/bin/python -c "import nvidia.nvtx, os; print(os.path.join(list(nvidia.nvtx.__path__)[0], 'include'))")
gcc -O2 -Ibenches -Iinclude -I"$nvtx_inc" benches/nvtx_overhead.c -o target/bench/nvtx_overhead \
    -L"$rel" -Wl,-rpath,"$rel" -lscope_profiler -ldl
g++ -std=c++17 -O2 -Ibenches -Iinclude -I/usr/include/trilinos benches/kokkos_overhead.cpp -o target/bench/kokkos_overhead \
    -L"$rel" -Wl,-rpath,"$rel" -lscope_profiler -ltrilinos_kokkoscore -ldl
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export SCOPE_PROFILER_VERBOSE=0 SCOPE_PROFILER_FILE="$out/p.h5" SCOPE_PROFILER_LAYOUT=aggregate
value() { awk -v k="$1" '$1 == "RESULT" && $2 == k { print $3 }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
declare -A R
for ((i = 0; i < rounds; i++)); do
    res=$(target/bench/kokkos_overhead 200000 7)
    R[kk_off]+="$(value kernel_ns <<<"$res") "; R[kk_name_off]+="$(value name_pair_ns <<<"$res") "
    res=$(KOKKOS_PROFILE_LIBRARY="$lib" target/bench/kokkos_overhead 200000 7)
    R[kk_on]+="$(value kernel_ns <<<"$res") "; R[kk_name_on]+="$(value name_pair_ns <<<"$res") "
    res=$(target/bench/nvtx_overhead 1000000 7)
    R[nv_off]+="$(value nvtx_pair_ns <<<"$res") "; R[nvex_off]+="$(value nvtx_ex_pair_ns <<<"$res") "; R[nv_name_off]+="$(value name_pair_ns <<<"$res") "
    res=$(NVTX_INJECTION64_PATH="$lib" target/bench/nvtx_overhead 1000000 7)
    R[nv_on]+="$(value nvtx_pair_ns <<<"$res") "; R[nvex_on]+="$(value nvtx_ex_pair_ns <<<"$res") "; R[nv_name_on]+="$(value name_pair_ns <<<"$res") "
done
m() { tr ' ' '\n' <<<"${R[$1]}" | grep . | median; }
echo "== medians of $rounds rounds (ns); 'added' = with the tool - without, 'x name pair' = added / our by-name pair"
printf '%-44s %10s %10s %10s %10s %12s\n' case without with added "name pair" "x name pair"
row() { awk -v n="$1" -v a="$2" -v b="$3" -v p="$4" 'BEGIN { printf "%-44s %10.2f %10.2f %10.2f %10.2f %12.2f\n", n, a, b, b - a, p, (b - a) / p }'; }
row "Kokkos empty parallel_for (Serial)" "$(m kk_off)" "$(m kk_on)" "$(m kk_name_off)"
row "NVTX nvtxRangePushA/Pop pair" "$(m nv_off)" "$(m nv_on)" "$(m nv_name_off)"
row "NVTX domain PushEx(registered)/Pop pair" "$(m nvex_off)" "$(m nvex_on)" "$(m nv_name_off)"
echo "(by-name pair with the tool loaded: Kokkos run $(m kk_name_on), NVTX run $(m nv_name_on))"
