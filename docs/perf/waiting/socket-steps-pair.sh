#!/bin/sh
# Small collectives over sockets, where each step hears from another peer
# (Bruck allgather, barrier, broadcast tree), and the 8-byte ping-pong, of
# two builds alternating in one run:
#   sh docs/perf/waiting/socket-steps-pair.sh BASE_DIR NEW_DIR ROUNDS "RANKS..."
# BASE_DIR and NEW_DIR each hold bin/ and lib/ (a build, or the device
# bundle). Prints per round, build and rank count: each benchmark's mean
# per call and best batch (µs).
set -u
base=$1 new=$2 rounds=${3:-3} counts=${4:-"2 8 16"}
export OOBX_SOCKET_IFNAME=lo OOBX_TRANSPORT=socket
for i in $(seq "$rounds"); do
    for n in $counts; do
        for b in "$base" "$new"; do
            printf '%s n%s %s ' "$i" "$n" "$b"
            LD_LIBRARY_PATH="$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OOBX_MODULE_DIR="$b/lib/oobx" \
                timeout 120 "$b/bin/oobx-run" -n "$n" -- "$b/bin/oobx-bench" \
                --benchmark_filter='^pingpong|^allgather|^barrier|^bcast' --sizes=8 --batches=10 2>&1 |
                awk '/^\[0\] (pingpong|allgather|barrier|bcast)\/8 / { printf "%s %s (best %s)  ", $2, $5, $7 }'
            echo
        done
    done
done
