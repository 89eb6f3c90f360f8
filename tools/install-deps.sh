#!/bin/sh
# Installs the Debian packages that `make MODE` needs and are missing.
#   sh tools/install-deps.sh test|demo|bench|fuzz|launchers
# Nothing missing: silent. Missing and root: apt-get installs them. Missing and
# not root: prints the apt-get line and exits 1.
set -u

mode=${1:-test}
base="gcc make pkg-config libc6-dev libucx-dev ucx-utils libhwloc-dev hwloc libcmocka-dev libibverbs-dev librdmacm-dev iproute2 procps libudev-dev libsodium-dev"
case "$mode" in
    test|demo) want="$base" ;;
    bench) want="$base g++ libbenchmark-dev python3-matplotlib openmpi-bin libopenmpi-dev mpich libmpich-dev" ;;
    fuzz) want="$base clang" ;;
    launchers) want="$base openmpi-bin libopenmpi-dev mpich libmpich-dev slurm-wlm slurmctld slurmd munge libpmix-dev" ;;
    *)
        echo "oobx: install-deps.sh: unknown mode '$mode' (test, demo, bench, fuzz or launchers)" >&2
        exit 2
        ;;
esac

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "oobx: not a Debian system (no dpkg-query); make sure these are installed: $want" >&2
    exit 0
fi

missing=""
for p in $want; do
    st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) || st=""
    case "$st" in
        *" installed") ;;
        *) missing="$missing $p" ;;
    esac
done
[ -z "$missing" ] && exit 0
missing=${missing# }

if [ "$(id -u)" -ne 0 ]; then
    echo "oobx: missing packages; run: sudo apt-get install -y $missing" >&2
    exit 1
fi

echo "oobx: installing missing packages: $missing" >&2
if ! apt-get update -q >&2; then
    echo "oobx: apt-get update failed; install by hand: apt-get install -y $missing" >&2
    exit 1
fi
# shellcheck disable=SC2086
if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >&2; then
    echo "oobx: apt-get install failed for: $missing" >&2
    exit 1
fi
exit 0
