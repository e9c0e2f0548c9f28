#!/bin/bash
# TEST SUPPORT (stand-ins for hardware this VM lacks): run a command in a private mount
# namespace where
#   1. /dev/cpu/<N>/msr are sparse 64 GiB files full of zeros, so the real LIKWID
#      (perfmon_init, likwid-perfctr -m, the marker file writer and reader) runs from start
#      to end; every counter reads 0 (shared/specs/likwid.md, Appendix);
#   2. /etc/likwid_topo.cfg (overlaid on /etc) is this host's topology as LIKWID sees it,
#      with the CPU model replaced by a STAND-IN CLAIM (Appendix A.2). LIKWID reads this
#      file instead of probing the CPU, so LIKWID 5.2 runs on CPUs it does not know
#      (Zen4, Sapphire Rapids, ...), and the test fixtures (perfgroup arch, group files,
#      event names) are the same on every host. The claimed CPU is pinned HERE and only
#      here; the core and NUMA layout stay the host's. Nothing in the product reads it.
#   3. /usr/sbin/likwid-accessD, Debian's LIKWID access daemon, is a STAND-IN that refuses to
#      start (one line on stderr, exit status 1). The real daemon checks the real CPU with
#      CPUID (it never reads the topology file) and does exactly that on a CPU it does not
#      know, e.g. an AMD family 26 (Zen5): every client then waits 10 s and exits with
#      "The socket file at '/tmp/likwid-N' could not be opened". So every host runs the tests
#      the way such a host must: without the daemon. SP_FAKE_ACCESSD=host keeps the host's
#      daemon (for trying things by hand).
#   4. /usr/bin/likwid-perfctr, Debian's, which defaults to the access daemon, is a STAND-IN
#      that runs the real script with direct access first (`-M 0`; a later `-M` of the
#      caller wins), as a site configured for direct access would: likwid-mpirun starts
#      likwid-perfctr by that path without `-M`. Direct access reads the zero MSR files of 1.
#      SP_FAKE_PERFCTR=host keeps Debian's default (then likwid-mpirun of LIKWID 5.2 needs
#      the daemon, and fails as on a Zen5 host).
#   3 and 4 are overlays on /usr/sbin and /usr/bin in this namespace only; LIKWID 5.5 built by
#   scripts/likwid55.sh has no daemon and defaults to direct access, so it is left as it is.
#
#   tests/likwid/fake_msr.sh [--hide-likwid] [--claim zen3|zen4|zen5|none] [--] COMMAND [ARGS...]
#
# --claim zen3   (default) AMD Zen3, family 25 model 1: known to LIKWID 5.2 and 5.5.
# --claim zen4   AMD Zen4, family 25 model 17: LIKWID 5.2 rejects it ("Unsupported AMD Zen
#                Processor"); the stand-in for a user's CPU that is newer than their LIKWID.
# --claim zen5   AMD Zen5 (EPYC), family 26 model 2: LIKWID 5.2 does not know the family
#                ("Unsupported Processor"); LIKWID 5.5 does.
# --claim none   no topology file: LIKWID probes the real CPU.
# --hide-likwid  also bind-mount /dev/null over every installed liblikwid.so* file in the
#                namespace, so dlopen of LIKWID fails the way it does on a machine
#                without LIKWID ("file too short"), whatever the search path.
#
# The topology comes from `likwid-genTopoCfg` of the LIKWID first on PATH (the one under
# test). Where that fails (a CPU even its topology code rejects, or no LIKWID), a template
# with this host's CPU count (one socket, one thread per core) is used instead, and a line
# on stderr says so. SP_FAKE_TOPO=template forces the template (to test that path).
#
# Needs: root, or unprivileged user namespaces (then `unshare -r` maps us to root in a new
# user namespace); util-linux `unshare`; tmpfs and overlayfs mounts in that namespace.
set -euo pipefail

if [[ "${SP_FAKE_MSR_INNER:-}" != "1" ]]; then
    export SP_FAKE_MSR_INNER=1
    userns=()
    [[ $(id -u) -eq 0 ]] || userns=(--user --map-root-user)
    command -v unshare >/dev/null || { echo "[fake_msr] util-linux unshare not found (apt-get install util-linux)" >&2; exit 1; }
    if ! err=$(unshare "${userns[@]}" --mount --propagation private true 2>&1); then
        echo "[fake_msr] cannot create a private mount namespace ($err): the LIKWID stand-in needs root or unprivileged user namespaces" >&2
        exit 1
    fi
    exec unshare "${userns[@]}" --mount --propagation private "$0" "$@"
fi
unset SP_FAKE_MSR_INNER

hide=0
claim=zen3
while [[ $# -gt 0 ]]; do
    case "$1" in
        --hide-likwid) hide=1; shift ;;
        --claim) claim="${2:-}"; shift 2 ;;
        --) shift; break ;;
        *) break ;;
    esac
done
[[ $# -gt 0 ]] || { echo "usage: $0 [--hide-likwid] [--claim zen3|zen4|zen5|none] [--] COMMAND [ARGS...]" >&2; exit 2; }

# The claimed CPU (family, model): the one place where it is pinned. Besides family and
# model, the claim sets what an AMD host reports: isIntel 0, vendor 0, 0 for Intel's
# architectural-perfmon fields (perf_version, perf_num_ctr, ...) and for Intel's uncore and
# client-memory support (supportUncore, supportClientmem: an Intel client CPU such as
# Rocket Lake has the latter, and LIKWID then maps the memory controller's BAR, which a VM
# does not have: "Cannot get start address: imcbar is zero", perfmon_init fails), so an
# Intel host makes the same claim as an AMD one.
case "$claim" in
    zen3) family=25 model=1 ;;
    zen4) family=25 model=17 ;;
    zen5) family=26 model=2 ;;
    none) ;;
    *) echo "$0: unknown --claim $claim (zen3, zen4, zen5, none)" >&2; exit 2 ;;
esac
case "${SP_FAKE_ACCESSD:-refuse}" in refuse | host) ;; *) echo "$0: SP_FAKE_ACCESSD must be refuse or host" >&2; exit 2 ;; esac
case "${SP_FAKE_PERFCTR:-direct}" in direct | host) ;; *) echo "$0: SP_FAKE_PERFCTR must be direct or host" >&2; exit 2 ;; esac

ncpu=$(getconf _NPROCESSORS_CONF)

# A LIKWID topology file for this host's CPU count, for when likwid-genTopoCfg cannot make one.
template_topology() {
    local n=$1 c
    cat <<EOF
cpuid_info family = 0
cpuid_info model = 0
cpuid_info stepping = 0
cpuid_info vendor = 0
cpuid_info part = 0
cpuid_info clock = 0.0
cpuid_info turbo = 0
cpuid_info isIntel = 0
cpuid_info osname = scope_profiler test stand-in
cpuid_info architecture = x86_64
cpuid_info supportUncore = 0
cpuid_info supportClientmem = 0
cpuid_info featureFlags = 0
cpuid_info features = FP MMX SSE SSE2 SSE3 SSSE SSE4.1 SSE4.2 AVX AVX2 FMA
cpuid_info perf_version = 0
cpuid_info perf_num_ctr = 0
cpuid_info perf_width_ctr = 0
cpuid_info perf_num_fixed_ctr = 0
cpuid_topology numHWThreads = $n
cpuid_topology numSockets = 1
cpuid_topology numDies = 1
cpuid_topology numCoresPerSocket = $n
cpuid_topology numThreadsPerCore = 1
cpuid_topology numCacheLevels = 3
EOF
    for ((c = 0; c < n; c++)); do
        printf 'cpuid_topology threadPool %d threadId = 0\n' "$c"
        printf 'cpuid_topology threadPool %d coreId = %d\n' "$c" "$c"
        printf 'cpuid_topology threadPool %d packageId = 0\n' "$c"
        printf 'cpuid_topology threadPool %d apicId = %d\n' "$c" "$c"
        printf 'cpuid_topology threadPool %d dieId = 0\n' "$c"
    done
    local level type size sets assoc threads
    for level in 1 2 3; do
        case $level in
            1) type=DATACACHE size=32768 assoc=8 threads=1 ;;
            2) type=UNIFIEDCACHE size=524288 assoc=8 threads=1 ;;
            3) type=UNIFIEDCACHE size=33554432 assoc=16 threads=$n ;;
        esac
        sets=$((size / 64 / assoc))
        printf 'cpuid_topology cacheLevels %d %s = %s\n' "$level" type "$type" "$level" associativity "$assoc" \
            "$level" sets "$sets" "$level" lineSize 64 "$level" size "$size" "$level" threads "$threads" "$level" inclusive 0
    done
    printf 'numa_info numberOfNodes = 1\nnuma_info nodes 1 id = 0\nnuma_info nodes 1 totalMemory = 1048576\n'
    printf 'numa_info nodes 1 freeMemory = 524288\nnuma_info nodes 1 numberOfProcessors = %d\n' "$n"
    for ((c = 0; c < n; c++)); do printf 'numa_info nodes 1 processors %d = %d\n' $((c + 1)) "$c"; done
    printf 'numa_info nodes 1 numberOfDistances = 1\nnuma_info nodes 1 distances 0 = 10\n'
}

# A private tmpfs for the overlays' layers; once an overlay is mounted it keeps its own
# reference, so the directory is detached and removed again at the end of the setup.
layers=$(mktemp -d "${TMPDIR:-/tmp}/sp_fake_likwid.XXXXXX")
mount -t tmpfs tmpfs "$layers"

# Overlay directory $1 with the files in $layers/$2/upper (which shadow or add to it).
overlay() {
    mount -t overlay overlay -o "lowerdir=$1,upperdir=$layers/$2/upper,workdir=$layers/$2/work" "$1" \
        || { echo "[fake_msr] cannot overlay $1 with the test stand-ins (overlayfs needed)" >&2; exit 1; }
}

if [[ $claim != none ]]; then
    mkdir -p "$layers/etc/upper" "$layers/etc/work"
    host_cfg="$layers/host.cfg"
    if [[ "${SP_FAKE_TOPO:-}" == template ]] \
        || ! likwid-genTopoCfg -o "$host_cfg" >/dev/null 2>"$layers/gen.err" || [[ ! -s "$host_cfg" ]]; then
        [[ "${SP_FAKE_TOPO:-}" == template ]] \
            || echo "[fake_msr] likwid-genTopoCfg failed ($(tr '\n' ' ' <"$layers/gen.err" 2>/dev/null)); using a $ncpu-CPU template topology" >&2
        template_topology "$ncpu" >"$host_cfg"
    fi
    sed -e "s/^cpuid_info family = .*/cpuid_info family = $family/" \
        -e "s/^cpuid_info model = .*/cpuid_info model = $model/" \
        -e 's/^cpuid_info isIntel = .*/cpuid_info isIntel = 0/' \
        -e 's/^cpuid_info vendor = .*/cpuid_info vendor = 0/' \
        -e 's/^cpuid_info \(perf_version\|perf_num_ctr\|perf_width_ctr\|perf_num_fixed_ctr\) = .*/cpuid_info \1 = 0/' \
        -e 's/^cpuid_info \(supportUncore\|supportClientmem\) = .*/cpuid_info \1 = 0/' \
        "$host_cfg" >"$layers/etc/upper/likwid_topo.cfg"
    overlay /etc etc
fi

daemon=/usr/sbin/likwid-accessD
if [[ ${SP_FAKE_ACCESSD:-refuse} == refuse && -e $daemon ]]; then
    mkdir -p "$layers/sbin/upper" "$layers/sbin/work"
    cat >"$layers/sbin/upper/likwid-accessD" <<'EOF'
#!/bin/sh
# TEST STAND-IN written by tests/likwid/fake_msr.sh, in its private namespace only: LIKWID's
# access daemon refusing to start, as Debian's likwid-accessD 5.2.2 does on a CPU it does
# not know (it checks the real CPU with CPUID, e.g. AMD family 26, and exits with status 1).
echo "[fake_msr] likwid-accessD is a test stand-in that refuses to start, as the real one does on a CPU it does not know (AMD family 26, Zen5): use direct access (likwid-perfctr -M 0)" >&2
exit 1
EOF
    chmod 755 "$layers/sbin/upper/likwid-accessD"
    overlay "$(dirname "$daemon")" sbin
fi

perfctr=/usr/bin/likwid-perfctr
if [[ ${SP_FAKE_PERFCTR:-direct} == direct && -f $perfctr ]]; then
    mkdir -p "$layers/bin/upper" "$layers/bin/work"
    cp "$perfctr" "$layers/bin/upper/.likwid-perfctr.real"
    chmod 755 "$layers/bin/upper/.likwid-perfctr.real"
    cat >"$layers/bin/upper/likwid-perfctr" <<EOF
#!/bin/sh
# TEST STAND-IN written by tests/likwid/fake_msr.sh, in its private namespace only: Debian's
# likwid-perfctr (copied beside this file) with direct MSR access unless the caller chooses
# (a later -M wins). likwid-mpirun starts $perfctr without -M, and the access daemon
# refuses CPUs it does not know.
exec $(dirname "$perfctr")/.likwid-perfctr.real -M 0 "\$@"
EOF
    chmod 755 "$layers/bin/upper/likwid-perfctr"
    overlay "$(dirname "$perfctr")" bin
fi

umount -l "$layers"
rmdir "$layers"

mount -t tmpfs tmpfs /dev/cpu
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
