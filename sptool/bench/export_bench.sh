#!/usr/bin/env bash
# Time and peak memory of `sptool export --format otf2` against `--format chrome-trace` on the
# same file: 10 million calls over 16 ranks (schema 1), made once by the make_big_file example.
#
#   sptool/bench/export_bench.sh [FILE.h5] [CALLS] [RANKS]
#
# SPTOOL_RUNS: runs of each export (default 3); every run is printed (wall clock, CPU time,
# peak resident memory from GNU time), then the medians and their ratios. The outputs go next
# to FILE and are removed at the end.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
file=${1:-${TMPDIR:-/tmp}/sptool_bench_10M.h5}
calls=${2:-10000000}
ranks=${3:-16}
runs=${SPTOOL_RUNS:-3}

cd "$repo"
cargo build --release -q -p sptool --bin sptool --example make_big_file
sptool=$repo/target/release/sptool
if [[ ! -f $file ]]; then
    "$repo/target/release/examples/make_big_file" "$file" "$calls" "$ranks"
fi
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)" >&2; exit 1; }
out=$(dirname "$file")/export_bench_out
trap 'rm -rf "$out.json" "$out.otf2"' EXIT

# "wall_s cpu_s maxrss_MiB" of one run of "$@".
measure() {
    local t
    t=$( { /usr/bin/time -f '%e %U %S %M' "$@" >/dev/null 2>/dev/null; } 2>&1 | tail -1)
    awk '{ printf "%.2f %.2f %.0f\n", $1, $2 + $3, $4 / 1024 }' <<<"$t"
}
median() {
    sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo "file:    $file ($(du -h "$file" | cut -f1), $calls calls, $ranks ranks)"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
"$sptool" inspect "$file" >/dev/null # warm the page cache
declare -A wall cpu mem
for fmt in chrome-trace otf2; do
    target=$out.json
    [[ $fmt == otf2 ]] && target=$out.otf2
    w=(); c=(); m=()
    for i in $(seq "$runs"); do
        rm -rf "$target"
        read -r a b d < <(measure "$sptool" export "$file" --format "$fmt" -o "$target")
        printf '%-13s run %d: %6.2f s wall  %6.2f s CPU  %6d MiB peak RSS  (output %s)\n' "$fmt" "$i" "$a" "$b" "$d" "$(du -sh "$target" | cut -f1)"
        w+=("$a"); c+=("$b"); m+=("$d")
    done
    wall[$fmt]=$(printf '%s\n' "${w[@]}" | median)
    cpu[$fmt]=$(printf '%s\n' "${c[@]}" | median)
    mem[$fmt]=$(printf '%s\n' "${m[@]}" | median)
done
awk -v wo="${wall[otf2]}" -v wc="${wall[chrome-trace]}" -v co="${cpu[otf2]}" -v cc="${cpu[chrome-trace]}" \
    -v mo="${mem[otf2]}" -v mc="${mem[chrome-trace]}" 'BEGIN {
    printf "median: otf2 %.2f s wall, %.2f s CPU, %d MiB; chrome-trace %.2f s wall, %.2f s CPU, %d MiB\n", wo, co, mo, wc, cc, mc
    printf "ratio otf2 / chrome-trace: wall %.2f, CPU %.2f, peak memory %.2f\n", wo / wc, co / cc, mo / mc }'
