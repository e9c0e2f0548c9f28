#!/bin/bash
# TEST SUPPORT (stand-in for hardware this VM lacks): run a command in a private mount
# namespace where /dev/cpu/<N>/msr are sparse 64 GiB files full of zeros, so the real
# LIKWID (perfmon_init, likwid-perfctr -m, the marker file writer and reader) runs from
# start to end; every counter reads 0. See shared/specs/likwid.md, Appendix.
#
#   tests/likwid/fake_msr.sh [--hide-likwid] [--] COMMAND [ARGS...]
#
# --hide-likwid  also bind-mount /dev/null over every installed liblikwid.so* file in the
#                namespace, so dlopen of LIKWID fails the way it does on a machine
#                without LIKWID ("file too short"), whatever the search path.
# Needs root (or unprivileged user namespaces) and util-linux `unshare`.
set -euo pipefail

if [[ "${SP_FAKE_MSR_INNER:-}" != "1" ]]; then
    export SP_FAKE_MSR_INNER=1
    exec unshare -m --propagation private "$0" "$@"
fi
unset SP_FAKE_MSR_INNER

hide=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --hide-likwid) hide=1; shift ;;
        --) shift; break ;;
        *) break ;;
    esac
done
[[ $# -gt 0 ]] || { echo "usage: $0 [--hide-likwid] [--] COMMAND [ARGS...]" >&2; exit 2; }

mount -t tmpfs tmpfs /dev/cpu
ncpu=$(getconf _NPROCESSORS_CONF)
for ((c = 0; c < ncpu; c++)); do
    mkdir -p "/dev/cpu/$c"
    truncate -s 64G "/dev/cpu/$c/msr"
done

if [[ $hide == 1 ]]; then
    # Every liblikwid the loader or our search could find, resolved to real files.
    {
        ldconfig -p 2>/dev/null | awk '/liblikwid\.so/ {print $NF}'
        ls /usr/lib/*/liblikwid.so* /usr/lib/liblikwid.so* /usr/local/lib/liblikwid.so* 2>/dev/null || true
        [[ -n "${LIKWID_HOME:-}" ]] && ls "$LIKWID_HOME"/lib/liblikwid.so* 2>/dev/null || true
    } | while read -r f; do readlink -f "$f"; done | sort -u | while read -r real; do
        mount --bind /dev/null "$real"
    done
fi

exec "$@"
