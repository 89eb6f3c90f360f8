#!/bin/bash
# Single-copy payloads (the direct allgather, OOBX_CMA_MIN, OOBX_UCX_PULL, the UCX ring choice):
# one run of each path side by side, ranks <= cores. Usage: run.sh [OUT]
# (prints a table; the raw outputs go to OUT). Needs oobx-run, oobx-bench,
# ucx_perftest and cma-raw (a process_vm_readv/memcpy loop) on PATH.
out=${1:-${OUT:-/tmp/single-copy}}
mkdir -p "$out"
export OOBX_SOCKET_IFNAME=lo UCX_NET_DEVICES=lo
shm="posix,sysv,cma,self"
echo "host: $(nproc) CPUs, $(uname -r)"
if command -v cma-raw >/dev/null; then
    cma-raw 1048576 | tail -1
    cma-raw 4194304 | tail -1
fi
run() { # name n env...
    local name=$1 n=$2
    shift 2
    env "$@" timeout 60 oobx-run -n "$n" -- oobx-bench --benchmark_filter='^allgather/|^pingpong/' \
        --sizes=64K,1M,4M --batches=3 > "$out/$name-n$n.txt" 2>&1
    grep -E '^\[0\] (allgather|pingpong)/' "$out/$name-n$n.txt" |
        awk -v v="$name" -v n="$n" '{printf "%-13s n%-2s %-18s %9s %-3s  busbw %s GB/s\n", v, n, $2, $5, $6, $13}'
}
for n in 2 4 8; do
    run socket "$n" OOBX_TRANSPORT=socket
    run socket-ring "$n" OOBX_TRANSPORT=socket OOBX_ALLGATHER_ALGO=ring
    run socket-nocma "$n" OOBX_TRANSPORT=socket OOBX_CMA_MIN=0
    run ucx "$n" OOBX_TRANSPORT=ucx UCX_TLS=$shm
    run ucx-ring "$n" OOBX_TRANSPORT=ucx UCX_TLS=$shm OOBX_ALLGATHER_ALGO=ring
    run ucx-pull "$n" OOBX_TRANSPORT=ucx UCX_TLS=$shm OOBX_UCX_PULL=1
    run ucx-rndv "$n" OOBX_TRANSPORT=ucx UCX_TLS=$shm OOBX_UCX_RING=tag
done
port=$((20000 + RANDOM % 20000))
UCX_TLS=$shm ucx_perftest -t ucp_put_bw -s 1048576 -n 2000 -w 200 -p $port > /dev/null 2>&1 &
sleep 0.5
UCX_TLS=$shm timeout 60 ucx_perftest 127.0.0.1 -t ucp_put_bw -s 1048576 -n 2000 -w 200 -p $port 2>&1 |
    grep Final | awk '{printf "ucx_perftest ucp_put_bw 1 MiB: %.2f GB/s\n", $7 * 1.048576e6 / 1e9}'
wait
