#!/bin/sh
# Allgather of 8 B and 1 MiB per rank at 2 ranks: oobx over UCX and over
# sockets (default settings) against Open MPI's shared memory (ob1 + vader),
# alternating in one run; oobx over UCX again with its buffer from
# oobx_mem_alloc (--alloc=oobx, "oobx-ucx-mem").
#   sh docs/perf/single-copy/vs-openmpi.sh BUILD_DIR PAIRS
# Needs make bench-build bench-peers-build (Open MPI from Debian).
set -u
b=${1:-build} pairs=${2:-5}
export OOBX_SOCKET_IFNAME=lo UCX_NET_DEVICES=lo
echo "# $(date -u +%FT%TZ) $(nproc) cores, $b"
for i in $(seq "$pairs"); do
    echo "## pair $i"
    for t in ucx socket; do
        OOBX_TRANSPORT=$t "$b/bin/oobx-run" -n 2 -- "$b/bin/oobx-bench" --benchmark_filter='^allgather/' \
            --sizes=8,1048576 2>&1 | grep -E '^\[0\] allgather/' | sed "s/^\[0\]/oobx-$t/"
    done
    OOBX_TRANSPORT=ucx "$b/bin/oobx-run" -n 2 -- "$b/bin/oobx-bench" --benchmark_filter='^allgather/' \
        --sizes=8,1048576 --alloc=oobx 2>&1 | grep -E '^\[0\] allgather/' | sed "s/^\[0\]/oobx-ucx-mem/"
    mpirun.openmpi --allow-run-as-root -n 2 --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader \
        --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo "$b/bin/oobx-mpi-peer.openmpi" \
        --tests=allgather --sizes=8,1048576 2>&1 | grep '^allgather/' | sed 's/^/openmpi /'
done
