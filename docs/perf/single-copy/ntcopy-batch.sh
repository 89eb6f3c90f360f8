#!/bin/bash
# The copies of the direct allgather without oobx (ntcopy) beside oobx-bench's
# 1 MiB allgather on the same machine, for the GPU host:
#   bash ../shared/device/bundle.sh && cc -O2 -o .dev/bin/ntcopy docs/perf/single-copy/ntcopy.c
#   (device tool, carry .dev) bash docs/perf/single-copy/ntcopy-batch.sh
source .dev/env.sh
export OOBX_MODULE_DIR=$PWD/.dev/lib/oobx OOBX_TRANSPORT=ucx UCX_TLS=posix,cma,self
grep -m1 'model name' /proc/cpuinfo; lscpu | grep -i 'L2\|L3\|numa node(s)'
timeout 100 ntcopy 1048576 200
for n in 4 8; do
  for a in "" "--alloc=oobx" "--touch"; do
    timeout 60 oobx-run -n $n -- oobx-bench --benchmark_filter='^allgather/' --sizes=1M --batches=10 $a 2>&1 |
      grep -E '^\[0\] allgather/' | awk -v n=$n -v a="$a" '{ print "oobx n" n, a, $2, $5, $6, "busbw", $13 }'
  done
done
