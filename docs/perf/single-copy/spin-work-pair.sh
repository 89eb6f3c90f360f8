#!/bin/bash
# The polling window after a direct call's own copy on the GPU host: ntcopy, then the mapped
# allgather (and broadcast) 1 MiB at 4 and 8 ranks, the build before (.dev/old: its liboobx.so.1 and
# modules) against this one, the default window and OOBX_SPIN_US=300. From the repository root on
# the device, after bundle.sh, ntcopy built into .dev/bin and the old build copied into .dev/old.
set -u
D=$(pwd); B=$D/.dev
export OOBX_SOCKET_IFNAME=lo UCX_NET_DEVICES=lo
echo "# $(date -u +%FT%TZ) $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "perf: $(which perf 2>&1); paranoid $(cat /proc/sys/kernel/perf_event_paranoid 2>&1); thp $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>&1)"
bench() { local v=$1 n=$2 f=$3 s=$4; shift 4
    if [ $v = old ]; then L=$B/old:$B/lib M=$B/old/oobx; else L=$B/lib M=$B/lib/oobx; fi
    env LD_LIBRARY_PATH=$L OOBX_MODULE_DIR=$M "$@" timeout 120 oobx-run -n "$n" -- oobx-bench --benchmark_filter="$f" --sizes="$s" --batches=10 ${BENCH_ARGS:-} 2>&1 |
        grep -E '^\[0\] [a-z_]+/' | awk -v n="$n" -v e="$v $* ${BENCH_ARGS:-}" '{ print "n" n, e, $2, $5, $6, "best", $7, "busbw", $13 }'; }
timeout 100 ntcopy 1048576 200 | grep -E "mapped"
for i in 1 2; do
 for n in 4 8; do
  for v in old new; do
   for sp in "" 300; do
    BENCH_ARGS=--alloc=oobx bench $v $n '^allgather/' 1M OOBX_TRANSPORT=ucx UCX_TLS=posix,cma,self ${sp:+OOBX_SPIN_US=$sp}
   done
  done
  bench old $n '^allgather/' 1M OOBX_TRANSPORT=ucx UCX_TLS=posix,cma,self
  bench new $n '^allgather/' 1M OOBX_TRANSPORT=ucx UCX_TLS=posix,cma,self
 done
done
for i in 1 2; do
 for n in 4 8; do
  for v in old new; do
   BENCH_ARGS=--alloc=oobx bench $v $n '^bcast/' 1M OOBX_TRANSPORT=ucx UCX_TLS=posix,cma,self
  done
 done
done
