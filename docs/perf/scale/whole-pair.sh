#!/bin/bash
# A whole job, launch to exit, of two builds in turn: CPU (user + system of the
# launcher and every rank) and wall time per run, and the ratios NEW/OLD pair by
# pair. What the start-up figure (common start to the checked allgather) leaves
# out: the programs' loading before the common start, and the exit.
#   bash docs/perf/scale/whole-pair.sh OLD_BUILD NEW_BUILD [RANKS] [PAIRS]
# e.g. OLD_BUILD a worktree of the commit before, built: git worktree add /tmp/old REV; make -C /tmp/old
# The job: oobx-run -n RANKS -r 16, oobx-boot --table over 16 emulated hosts
# (OOBX_HOST_ID), socket, starting at once (no OOBX_BOOT_AT).
set -u
old=$1 new=$2 n=${3:-1024} pairs=${4:-8}
export OOBX_SOCKET_IFNAME=lo
one() { # one BUILD: prints "cpu_s wall_s"
    /usr/bin/time -f '%U %S %e' -o /tmp/whole-pair.$$ "$1/bin/oobx-run" -n "$n" -r 16 -- \
        sh -c "OOBX_HOST_ID=\$((OOBX_RANK / ($n / 16))) exec $1/bin/oobx-boot --table" >/dev/null 2>&1 ||
        echo "run of $1 failed" >&2
    awk '{ printf "%.3f %.3f\n", $1 + $2, $3 }' /tmp/whole-pair.$$
}
one "$old" >/dev/null; one "$new" >/dev/null # warm-up
echo "# $(date -u +%FT%TZ) $(nproc) cores; $n ranks, 16 roots, 16 emulated hosts; pairs: old cpu wall, new cpu wall, ratios"
for i in $(seq "$pairs"); do
    read -r oc ow < <(one "$old")
    read -r nc nw < <(one "$new")
    awk -v oc="$oc" -v ow="$ow" -v nc="$nc" -v nw="$nw" \
        'BEGIN { printf "old %s %s new %s %s cpu %.3f wall %.3f\n", oc, ow, nc, nw, nc / oc, nw / ow }'
done
rm -f /tmp/whole-pair.$$
