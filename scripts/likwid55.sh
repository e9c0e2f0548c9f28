#!/usr/bin/env bash
# Build LIKWID 5.5.1 from its unmodified release tarball into .likwid/5.5.1 (ignored by git),
# once: the second supported LIKWID version, used only by the tests (shared/specs/likwid.md,
# Appendix A.3). Direct MSR access, no access daemon, no frequency tool; about 30 s on 2 cores.
#
#   scripts/likwid55.sh          build if needed; print the install prefix on stdout
#
# Exit status 0: the prefix is ready (reused when its stamp file matches).
# Exit status 3: the tarball is absent (outside this project's machines); one line on stderr.
# Anything else: the build failed (log in .likwid/build-5.5.1.log).
# The tarball: $SP_LIKWID55_TARBALL, else ../shared/vendor/likwid-5.5.1.tar.gz beside this
# checkout, beside its main checkout (for a git worktree) or beside the local repository it
# was cloned from. Concurrent callers wait for one
# build (flock).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=5.5.1
tarball=${SP_LIKWID55_TARBALL:-}
if [[ -z $tarball ]]; then
    main=$(cd "$root" && git rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
    origin=$(cd "$root" && git remote get-url origin 2>/dev/null || true)    # a clone of a local checkout
    [[ -d $origin ]] || origin=""
    for dir in "$root/.." ${main:+"$(dirname "$main")/.."} ${origin:+"$origin/.."}; do
        tarball=$dir/shared/vendor/likwid-$version.tar.gz
        [[ -f $tarball ]] && break
    done
    tarball=$(realpath -m "$tarball")
fi
base=$root/.likwid
prefix=$base/$version
stamp=$prefix/.complete
log=$base/build-$version.log

if [[ ! -f $tarball ]]; then
    echo "[likwid55] $tarball not found: the LIKWID 5.5 tests are skipped by design" >&2
    exit 3
fi
mkdir -p "$base"
exec 9>"$base/.lock"
flock 9

# The stamp names the tarball and the prefix (LIKWID hard-codes its prefix into its scripts).
want="likwid-$version $(stat -c %s "$tarball") $prefix"
if [[ -f $stamp && "$(cat "$stamp")" == "$want" && -x $prefix/bin/likwid-perfctr && -e $prefix/lib/liblikwid.so.5.5 ]]; then
    echo "[likwid55] LIKWID $version in $prefix (built earlier)" >&2
    echo "$prefix"
    exit 0
fi

echo "[likwid55] building LIKWID $version into $prefix (log: $log)" >&2
rm -rf "$prefix" "$base/src"
mkdir -p "$base/src"
{
    tar xzf "$tarball" -C "$base/src"
    cd "$base/src/likwid-$version"
    sed -i -e "s|^PREFIX ?= .*|PREFIX ?= $prefix#NO SPACE|" \
           -e 's|^ACCESSMODE = .*|ACCESSMODE = direct#NO SPACE|' \
           -e 's|^BUILDDAEMON = .*|BUILDDAEMON = false#NO SPACE|' \
           -e 's|^BUILDFREQ = .*|BUILDFREQ = false#NO SPACE|' \
           -e 's|^INSTALL_CHOWN = .*|INSTALL_CHOWN = #NO SPACE|' config.mk
    make -j"$(nproc)"
    make install
} >"$log" 2>&1 || { echo "[likwid55] build failed, see $log" >&2; exit 1; }
rm -rf "$base/src"
echo "$want" >"$stamp"
echo "[likwid55] LIKWID $version ready" >&2
echo "$prefix"
