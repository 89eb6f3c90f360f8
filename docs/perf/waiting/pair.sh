#!/bin/sh
# Small-message latency of two builds, alternating in one run, with
# ucx_perftest -t tag_lat over the same UCX transports as the reference.
#   sh docs/perf/waiting/pair.sh BASE_DIR NEW_DIR ROUNDS
# BASE_DIR and NEW_DIR each hold bin/oobx-run and bin/oobx-bench (a build,
# or the device bundle). Prints, per round and build, the 8-byte one-way
# ping-pong and allgather (time, best batch) over UCX shared memory and
# sockets, then ucx_perftest's one-way latency.
set -u
base=$1 new=$2 rounds=${3:-5}
export UCX_TLS=posix,self UCX_NET_DEVICES=lo OOBX_SOCKET_IFNAME=lo
for i in $(seq "$rounds"); do
    for b in "$base" "$new"; do
        for t in ucx socket; do
            printf '%s %s %s ' "$i" "$b" "$t"
            LD_LIBRARY_PATH="$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OOBX_MODULE_DIR="$b/lib/oobx" \
                OOBX_TRANSPORT=$t timeout 120 "$b/bin/oobx-run" -n 2 -- "$b/bin/oobx-bench" \
                --benchmark_filter='^pingpong|^allgather' --sizes=8 --batches=10 2>&1 |
                awk '/^\[0\] (pingpong|allgather)\/8 / { printf "%s %s us (best %s)  ", $2, $5, $7 }'
            echo
        done
    done
done
pt=$(command -v ucx_perftest || echo "$base/bin/ucx_perftest")
for i in 1 2 3; do
    port=$((13000 + i))
    "$pt" -t tag_lat -s 8 -n 100000 -w 10000 -p "$port" >/dev/null 2>&1 &
    sleep 0.5
    "$pt" 127.0.0.1 -t tag_lat -s 8 -n 100000 -w 10000 -p "$port" 2>&1 | awk '/^Final:/ { print "ucx_perftest tag_lat 8 B one-way typical/avg (us):", $3, $4 }'
    wait
done
