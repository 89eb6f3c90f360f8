#!/bin/bash
# The staged direct allgather (OOBX_ALLGATHER_STAGE_MIN) against the plain
# one (process_vm_readv of every peer's buffer), 1 MiB per rank, plain memory,
# alternating in each round; oobx_mem_alloc's buffer and ucp_put_bw as
# references. On the GPU host (bundle, then):
#   source .dev/env.sh; bash docs/perf/single-copy/stage-pair.sh ROUNDS "RANKS..." "TRANSPORTS..."
# STAGE_BENCH_ARGS=--touch: every rank rewrites its slice before each call.
# Prints one line a run: ranks, transport, OOBX_ALLGATHER_STAGE_MIN (0: never;
# "mapped": --alloc=oobx), mean per call, best batch, bus bandwidth (GB/s).
set -u
rounds=${1:-2} counts=${2:-"2 4 8"} tps=${3:-"ucx socket"}
extra=${STAGE_BENCH_ARGS:-} # e.g. --touch
export OOBX_SOCKET_IFNAME=lo UCX_NET_DEVICES=lo UCX_TLS=posix,cma,self
run() { # n transport stage [bench args]
    local n=$1 t=$2 st=$3
    shift 3
    printf 'n%s %s stage=%s ' "$n" "$t" "$st"
    OOBX_TRANSPORT=$t OOBX_ALLGATHER_STAGE_MIN=$st timeout 120 oobx-run -n "$n" -- oobx-bench \
        --benchmark_filter='^allgather/' --sizes=1M --batches=10 $extra "$@" 2>&1 |
        awk '/^\[0\] allgather\// { print $5, $6, "best", $7, "busbw", $13; f = 1 } END { if (!f) print "failed" }'
}
for i in $(seq "$rounds"); do
    for n in $counts; do
        for t in $tps; do
            # staging at this count (the default from 4 ranks), then never
            run "$n" "$t" "$n"
            run "$n" "$t" 0
            printf 'n%s %s mapped ' "$n" "$t"
            OOBX_TRANSPORT=$t timeout 120 oobx-run -n "$n" -- oobx-bench --benchmark_filter='^allgather/' \
                --sizes=1M --batches=10 --alloc=oobx $extra 2>&1 |
                awk '/^\[0\] allgather\// { print $5, $6, "best", $7, "busbw", $13; f = 1 } END { if (!f) print "failed" }'
        done
    done
    if command -v ucx_perftest >/dev/null; then
        port=$((13000 + RANDOM % 2000))
        ucx_perftest -t ucp_put_bw -s 1048576 -n 2000 -w 1000 -p "$port" >/dev/null 2>&1 &
        sleep 0.5
        ucx_perftest 127.0.0.1 -t ucp_put_bw -s 1048576 -n 2000 -w 1000 -p "$port" 2>&1 | awk '/^Final:/ { print "ucp_put_bw", $0 }'
        wait
    fi
done
