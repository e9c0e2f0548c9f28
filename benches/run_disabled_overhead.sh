#!/usr/bin/env bash
# What annotations cost with profiling off, against an empty loop measured in the same process:
# off at run time (SCOPE_PROFILER_DISABLE=1, the library linked and called) and off at compile
# time (-DSP_DISABLE for C/C++, fortran/scope_profiler_disabled.f90 for Fortran), for the
# handle, name, counted-name (Fortran's), macro and SP_SCOPE forms.
# Usage: benches/run_disabled_overhead.sh [pairs_per_round=2000000] [rounds=15]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --lib
out=target/bench
mkdir -p "$out/mod_on" "$out/mod_off"
lib=(-Ltarget/release -Wl,-rpath,"$PWD/target/release" -lscope_profiler)
c++ -std=c++11 -O2 -Iinclude -Ibenches benches/disabled_overhead.cpp -o "$out/disabled_overhead" "${lib[@]}"
c++ -std=c++11 -O2 -DSP_DISABLE -Iinclude -Ibenches benches/disabled_overhead.cpp -o "$out/disabled_overhead_compiled_out"
gfortran -O2 -J "$out/mod_on" -c fortran/scope_profiler.f90 -o "$out/mod_on/scope_profiler.o"
gfortran -O2 -I "$out/mod_on" benches/disabled_overhead.f90 "$out/mod_on/scope_profiler.o" -o "$out/disabled_overhead_f" "${lib[@]}"
gfortran -O2 -J "$out/mod_off" -c fortran/scope_profiler_disabled.f90 -o "$out/mod_off/scope_profiler.o"
gfortran -O2 -I "$out/mod_off" benches/disabled_overhead.f90 "$out/mod_off/scope_profiler.o" -o "$out/disabled_overhead_f_compiled_out"
n=${1:-2000000}
r=${2:-15}
echo "== C and C++, off at run time (SCOPE_PROFILER_DISABLE=1)"
SCOPE_PROFILER_DISABLE=1 "$out/disabled_overhead" "$n" "$r" | grep -v '^RESULT'
echo "== C and C++, compiled out (-DSP_DISABLE)"
env -u SCOPE_PROFILER_DISABLE "$out/disabled_overhead_compiled_out" "$n" "$r" | grep -v '^RESULT'
echo "== Fortran module, off at run time (SCOPE_PROFILER_DISABLE=1)"
SCOPE_PROFILER_DISABLE=1 "$out/disabled_overhead_f" "$n" "$r" | grep -v '^RESULT'
echo "== Fortran, compiled out (scope_profiler_disabled.f90)"
env -u SCOPE_PROFILER_DISABLE "$out/disabled_overhead_f_compiled_out" "$n" "$r" | grep -v '^RESULT'
