#!/bin/bash
# One device call, every figure issues 10 and 14 ask for on the 16-core GPU
# host, in one window so that each ratio compares runs of the same machine:
#   bash ../shared/device/bundle.sh && (device tool, carry .dev)
#   source .dev/env.sh; bash docs/perf/gpu-host-batch.sh [PARTS]
# PARTS (default "p2p bw bcast auto scale table"): p2p = 8 B ping-pong and allgather at 2
# ranks over UCX shared memory and sockets, the busy-polling raw TCP
# ping-pong of the same launch, ucx_perftest tag_lat after each round; bw =
# allgather 1 MiB/rank at 2, 4, 8 ranks over UCX shared memory against
# ucx_perftest ucp_put_bw; auto = init at 16 and 64 ranks, auto against
# socket and ucx; scale = start-up at 4096 ranks (one host) and 10,240 (16
# emulated hosts), 16 roots, socket; table = the same, alternating
# oobx_allgather and oobx_allgather_table (oobx-boot --table); bcast =
# broadcast of 64 KiB and 1 MiB at 2, 4, 8 ranks over UCX: the tree
# (OOBX_ALLGATHER_DIRECT_MIN=0), the direct broadcast from plain memory and
# from oobx_mem_alloc's. Not in the default: ntcopy = the direct
# allgather's copies without oobx (docs/perf/single-copy/ntcopy.c, built into
# the bundle first: cc -O2 -o .dev/bin/ntcopy docs/perf/single-copy/ntcopy.c),
# then oobx's 1 MiB allgather at 4 and 8 ranks over UCX shared memory from
# plain memory, oobx_mem_alloc's and plain memory rewritten every call.
set -u
parts=${1:-p2p bw bcast auto scale table}
D=$(cd "$(dirname "$0")/../.." && pwd)
B=${BUNDLE:-$D/.dev}
export OOBX_SOCKET_IFNAME=lo UCX_NET_DEVICES=lo OOBX_MODULE_DIR=$B/lib/oobx
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GiB; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
perftest() { # test size
    local port=$((13000 + RANDOM % 2000))
    ucx_perftest -t "$1" -s "$2" -n "$3" -w 1000 -p "$port" >/dev/null 2>&1 &
    sleep 0.5
    ucx_perftest 127.0.0.1 -t "$1" -s "$2" -n "$3" -w 1000 -p "$port" 2>&1 | awk -v t="$1" '/^Final:/ { print "ucx_perftest", t, "final:", $0 }'
    wait
}
bench() { # n filter sizes env... (BENCH_ARGS: more oobx-bench options)
    local n=$1 f=$2 s=$3
    shift 3
    env "$@" timeout 120 oobx-run -n "$n" -- oobx-bench --benchmark_filter="$f" --sizes="$s" --batches=10 ${BENCH_ARGS:-} 2>&1 |
        grep -E '^\[0\] [a-z_]+/' | awk -v n="$n" -v e="$* ${BENCH_ARGS:-}" '{ print "n" n, e, $2, $5, $6, "best", $7, "busbw", $13 }'
}
if [[ " $parts " == *" p2p "* ]]; then
    echo "== p2p: 2 ranks, 8 B, one way (time, best batch)"
    for i in 1 2 3 4 5; do
        bench 2 '^pingpong/|^allgather/' 8 OOBX_TRANSPORT=ucx UCX_TLS=posix,self
        bench 2 '^pingpong/|^allgather/|^tcp' 8 OOBX_TRANSPORT=socket
        perftest tag_lat 8 100000
    done
fi
if [[ " $parts " == *" bw "* ]]; then
    echo "== bw: allgather 1 MiB/rank, UCX shared memory"
    for i in 1 2; do
        for n in 2 4 8; do
            bench "$n" '^allgather/' 1M OOBX_TRANSPORT=ucx UCX_TLS=posix,cma,self
            BENCH_ARGS=--alloc=oobx bench "$n" '^allgather/' 1M OOBX_TRANSPORT=ucx UCX_TLS=posix,cma,self
            BENCH_ARGS=--alloc=oobx bench "$n" '^allgather/' 1M OOBX_TRANSPORT=socket
        done
        perftest ucp_put_bw 1048576 2000
    done
fi
if [[ " $parts " == *" auto "* ]]; then
    echo "== auto: init (ranks, asked, chosen, wall, init max, create max)"
    sh "$D/docs/perf/auto/run.sh" "$B" "16 64" 3
fi
if [[ " $parts " == *" scale "* || " $parts " == *" table "* ]]; then
    # with table: each oobx_allgather run (S) followed by an
    # oobx_allgather_table run (T) of the same size
    table=0
    [[ " $parts " == *" table "* ]] && table=1
    echo "== scale: start-up, socket, 16 roots$([ $table = 1 ] && echo ", oobx_allgather against oobx_allgather_table")"
    . "$D/docs/perf/scale/boot.sh"
    for i in 1 2 3; do
        for n in 4096 10240; do
            h=$([ $n = 4096 ] && echo 1 || echo 16)
            echo "S$n $(boot $n $h 16 X=1)"
            [ $table = 1 ] && echo "T$n $(BOOT_ARGS=--table boot $n $h 16 X=1)"
        done
    done
fi
if [[ " $parts " == *" ntcopy "* ]]; then
    echo "== ntcopy: the copies alone, then oobx (plain, --alloc=oobx, --touch)"
    timeout 100 ntcopy 1048576 200
    for n in 4 8; do
        for a in "" --alloc=oobx --touch; do
            BENCH_ARGS=$a bench "$n" '^allgather/' 1M OOBX_TRANSPORT=ucx UCX_TLS=posix,cma,self
        done
    done
fi
if [[ " $parts " == *" bcast "* ]]; then
    echo "== bcast: UCX shared memory, tree / direct / direct from oobx_mem_alloc"
    for i in 1 2; do
        for n in 2 4 8; do
            bench "$n" '^bcast/' 64K,1M OOBX_TRANSPORT=ucx UCX_TLS=posix,cma,self OOBX_ALLGATHER_DIRECT_MIN=0
            bench "$n" '^bcast/' 64K,1M OOBX_TRANSPORT=ucx UCX_TLS=posix,cma,self
            BENCH_ARGS=--alloc=oobx bench "$n" '^bcast/' 64K,1M OOBX_TRANSPORT=ucx UCX_TLS=posix,cma,self
        done
    done
fi
