#!/bin/bash
# LIKWID overhead benchmark. Runs benches/likwid_overhead.c under
# `likwid-perfctr -M 0 -C 0 -g FLOPS_DP -m` with fake MSRs (tests/likwid/fake_msr.sh):
#  * per start/stop pair: scope_profiler (timing + LIKWID layer + LIKWID) vs bare
#    likwid_markerStartRegion/StopRegion in the same process, interleaved blocks;
#  * sp_finalize wall time with the read-back helper, without it
#    (SCOPE_PROFILER_LIKWID_HELPER=off: marker file parsed in-process), and with LIKWID off.
# Usage: benches/likwid_overhead.sh [PAIRS] [BLOCKS] [RUNS]   (release build)
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${1:-2000}
BLOCKS=${2:-21}
RUNS=${3:-5}

cargo build --release --quiet
LIB=$PWD/target/release
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cc -O2 -std=c99 -D_GNU_SOURCE -Iinclude -o "$WORK/bench" benches/likwid_overhead.c \
   -L"$LIB" -Wl,-rpath,"$LIB" -lscope_profiler -llikwid

run() { # label, env...
    local label=$1; shift
    for ((r = 0; r < RUNS; r++)); do
        (cd "$WORK" && env "$@" SCOPE_PROFILER_FILE="$WORK/out.h5" SCOPE_PROFILER_VERBOSE=0 \
            "$OLDPWD/tests/likwid/fake_msr.sh" likwid-perfctr -M 0 -C 0 -g FLOPS_DP -m \
            "$WORK/bench" "$PAIRS" "$BLOCKS") 2>"$WORK/err" | grep '^RESULT' | sed "s/^/$label /"
        if grep -q '^\[scope_profiler\]' "$WORK/err"; then grep '^\[scope_profiler\]' "$WORK/err" >&2; fi
    done
}

{
    run helper SCOPE_PROFILER_LIKWID=1
    run nohelper SCOPE_PROFILER_LIKWID=1 SCOPE_PROFILER_LIKWID_HELPER=off
    run likwidoff SCOPE_PROFILER_LIKWID=0
} > "$WORK/results"

python3 - "$WORK/results" "$PAIRS" "$BLOCKS" "$RUNS" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def vals(label, key):
    return [float(r[3]) for r in rows if r[0] == label and r[2] == key]
def med(label, key):
    v = vals(label, key)
    return statistics.median(v) if v else float("nan")
print(f"pairs/block={sys.argv[2]} blocks={sys.argv[3]} runs={sys.argv[4]} (medians over runs)")
print()
print("| per start/stop pair (LIKWID on, helper run) | value |")
print("|---|---|")
print(f"| bare likwid_markerStartRegion+StopRegion | {med('helper','bare_pair_ns'):.0f} ns |")
print(f"| sp_region_start_id+stop_id (timing + our layer + LIKWID) | {med('helper','ours_pair_ns'):.0f} ns |")
print(f"| extra over bare (median of per-block ratios) | {med('helper','extra_percent'):.2f} % (runs: {', '.join(f'{x:.2f}' for x in vals('helper','extra_percent'))}) |")
print(f"| same, without LIKWID at all (core timing only) | {med('likwidoff','ours_pair_ns'):.0f} ns |")
print()
print("| sp_finalize wall time | median | runs |")
print("|---|---|---|")
for label, text in [("helper", "LIKWID on, helper (full_api)"), ("nohelper", "LIKWID on, helper off (marker_file)"), ("likwidoff", "LIKWID off")]:
    v = vals(label, "finalize_s")
    print(f"| {text} | {statistics.median(v)*1e3:.1f} ms | {', '.join(f'{x*1e3:.1f}' for x in v)} |")
v = vals("helper", "setup_s")
print()
print(f"sp_setup with LIKWID (markerInit incl. TSC calibration): median {statistics.median(v)*1e3:.0f} ms")
PY
