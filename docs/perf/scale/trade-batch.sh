#!/bin/bash
# One device call: init's card trade, ring both ways against doubling,
# alternating in the same window (trade-pair.sh). On the 16-core GPU host:
#   source .dev/env.sh; ulimit -n 20000; bash docs/perf/scale/trade-batch.sh
set -u
D=$(cd "$(dirname "$0")/../../.." && pwd)
export OOBX_SOCKET_IFNAME=lo UCX_NET_DEVICES=lo OOBX_MODULE_DIR=${BUNDLE:-$D/.dev}/lib/oobx
. "$D/docs/perf/scale/boot.sh"
. "$D/docs/perf/scale/trade-pair.sh"
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GiB; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "# N HOSTS ROOTS exchange boot_s cross_s exchange_max_s cpu_mean_ms fds_max"
echo "== one rank a host: the trade alone (table)"
BOOT_ARGS=--table trade_pair 16 16 1 3 OOBX_NODE_AWARE_MIN=2
BOOT_ARGS=--table trade_pair 64 64 1 3 OOBX_NODE_AWARE_MIN=2
BOOT_ARGS=--table trade_pair 256 256 4 3
BOOT_ARGS=--table trade_pair 1024 1024 16 2
echo "== 4096 and 10,240 ranks over 16 hosts, 16 roots (table)"
BOOT_ARGS=--table trade_pair 4096 16 16 2
BOOT_ARGS=--table trade_pair 10240 16 16 2
echo "== 10,240 ranks over 1280 hosts of 8, 16 roots (table)"
BOOT_ARGS=--table trade_pair 10240 1280 16 2
echo "== 10,240 ranks over 16 hosts, oobx_allgather"
trade_pair 10240 16 16 1
