#!/bin/sh
# Small collectives at 8 and 16 ranks (a core each) with the adaptive
# polling window (OOBX_SPIN_US=-1, the default) against a fixed long one
# (OOBX_SPIN_US=200: a rank polls 200 µs before it sleeps), alternating:
#   sh docs/perf/waiting/spin-steps.sh ROUNDS "RANKS..." "TRANSPORTS..."
# Prints: round, ranks, transport, OOBX_SPIN_US, each benchmark's mean per
# call and best batch (µs), and the CPU time per call.
set -u
rounds=${1:-3} counts=${2:-"8 16"} tps=${3:-"socket ucx"}
export OOBX_SOCKET_IFNAME=lo UCX_NET_DEVICES=lo UCX_TLS=posix,self
for i in $(seq "$rounds"); do
    for n in $counts; do
        for t in $tps; do
            for spin in -1 200; do
                printf '%s n%s %s spin=%s ' "$i" "$n" "$t" "$spin"
                OOBX_TRANSPORT=$t OOBX_SPIN_US=$spin timeout 120 oobx-run -n "$n" -- oobx-bench \
                    --benchmark_filter='^allgather|^barrier|^bcast' --sizes=8 --batches=10 2>&1 |
                    awk '/^\[0\] (allgather|bcast)\/8 / { printf "%s %s (best %s, cpu %s)  ", $2, $5, $7, $9 }
                         /^\[0\] barrier / { printf "barrier %s (best %s, cpu %s)  ", $3, $5, $7 }'
                echo
            done
        done
    done
done
