#!/bin/bash
# A job over several hosts on an Ethernet-only network: what auto would give
# UCX there (its tcp transport) against the socket transport, every rank its
# own emulated host (OOBX_HOST_ID: no host table) and OOBX_CMA_MIN=0 (no
# process_vm_readv, no direct allgather), so that no same-host path applies;
# UCX_TLS=tcp is what UCX takes between hosts without an RDMA device.
# Alternating, ROUNDS rounds:
#   bash docs/perf/auto/hosts.sh ROUNDS "RANKS..."
# Prints: ranks, transport, then init (wall, s) or oobx-bench's rows (name,
# mean per call, best batch, bus bandwidth GB/s).
set -u
rounds=${1:-3}
counts=${2:-"2 8 16"}
own_host='OOBX_HOST_ID=h$OOBX_RANK OOBX_CMA_MIN=0 exec'
for n in $counts; do
    for i in $(seq "$rounds"); do
        for t in "socket X=1" "ucx UCX_TLS=tcp"; do
            set -- $t
            w=$(env OOBX_TRANSPORT=$1 $2 timeout 120 oobx-run -n "$n" -- sh -c "$own_host oobx-init-time --label=$1" 2>&1 |
                grep -o '"wall_s": [0-9.e-]*' | cut -d' ' -f2)
            echo "n$n $1 init_wall_s $w"
            env OOBX_TRANSPORT=$1 $2 timeout 300 oobx-run -n "$n" -- sh -c "$own_host oobx-bench \
                --benchmark_filter='^pingpong/|^allgather/|^barrier' --sizes=8,65536,1048576 --batches=5" 2>&1 |
                grep -E '^\[0\] [a-z_]+/' | awk -v n="$n" -v t="$1" '{ print "n" n, t, $2, $5, $6, "best", $7, "busbw", $13 }'
        done
    done
done
