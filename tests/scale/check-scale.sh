#!/usr/bin/env bash
# The node-aware bootstrap end to end: real jobs under oobx-run, each rank
# running oobx-boot (init and one allgather of 128-byte cards, checked byte
# for byte), on one host and on emulated hosts (OOBX_HOST_ID per rank, so
# that ranks with different ids share no memory and trade through their
# leaders), uneven hosts, a host of one rank, roots on different hosts.
# Prints cmocka-style lines for run-tests.sh.
#
#   bash tests/scale/check-scale.sh BUILD_DIR [long]
set -u
cd "$(dirname "$0")/../.."
build=${1:-build}
mode=${2:-check}
run=$build/bin/oobx-run
boot=$build/bin/oobx-boot
tmp=$(mktemp -d /tmp/oobx-scale.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OOBX_SOCKET_IFNAME=lo UCX_NET_DEVICES=lo
# the node-aware path at every size here (by default it starts at 128 ranks)
export OOBX_NODE_AWARE_MIN=2
. tests/cmocka-lines.sh

# job NAME N ROOTS HOSTSPEC EXPECT_HOSTS [VAR=value...]
# HOSTSPEC: a shell arithmetic expression of $OOBX_RANK giving the host id, or "one"
job() {
    local name=$1 n=$2 roots=$3 spec=$4 want_hosts=$5
    shift 5
    echo "[ RUN      ] $name"
    local cmd=("$boot" "--label=$name")
    if [ "$spec" != one ]; then
        cmd=(sh -c "OOBX_HOST_ID=\$(( $spec )) exec $boot --label=$name")
    fi
    local t0 rc
    t0=$(date +%s.%N)
    env "$@" timeout -k 5 600 "$run" -n "$n" -r "$roots" --timeout 300 -- "${cmd[@]}" >"$tmp/out" 2>&1
    rc=$?
    local res
    res=$(grep -o 'OOBX_BOOT_RESULT .*' "$tmp/out" | head -1)
    local ok=1 why=""
    [ $rc -eq 0 ] || { ok=0; why="exit status $rc"; }
    [ -n "$res" ] || { ok=0; why="$why; no result line"; }
    local hosts ranks
    hosts=$(echo "$res" | sed -n 's/.*"hosts": \([0-9]*\).*/\1/p')
    ranks=$(echo "$res" | sed -n 's/.*"ranks": \([0-9]*\).*/\1/p')
    [ "$ranks" = "$n" ] || { ok=0; why="$why; ranks $ranks, expected $n"; }
    [ "$want_hosts" = - ] || [ "$hosts" = "$want_hosts" ] || { ok=0; why="$why; hosts $hosts, expected $want_hosts"; }
    echo "  $(echo "$res" | grep -o '"boot_s": [0-9.]*\|"fds_max": [0-9]*\|"rss_max_mib": [0-9.]*' | tr '\n' ' ') ($(echo "$(date +%s.%N) - $t0" | bc) s wall)"
    if [ $ok -eq 1 ]; then
        cm_result "$name" 0
    else
        cm_why "$name" "${why#; }"
        grep -v 'OOBX_BOOT_RESULT' "$tmp/out" | tail -15 | cm_excerpt "$name"
        cm_result "$name" 1
    fi
}

cases=18
[ "$mode" = long ] && cases=20
echo "[==========] Running $cases test(s)."
job one_rank 1 1 one 0 OOBX_TRANSPORT=socket
job two_ranks_one_host 2 1 one 1 OOBX_TRANSPORT=socket
job n64_one_host 64 1 one 1 OOBX_TRANSPORT=socket
job n64_flat 64 1 one 0 OOBX_TRANSPORT=socket OOBX_NODE_AWARE=0
# the default: below 128 ranks the flat bootstrap
job n64_default_flat 64 1 one 0 OOBX_TRANSPORT=socket OOBX_NODE_AWARE_MIN=128
# 4 hosts of 1, 9, 27 and 27 ranks: rank 0 alone; 3 roots, so hosts straddle blocks
job n64_4hosts_uneven_roots3 64 3 'OOBX_RANK == 0 ? 0 : OOBX_RANK < 10 ? 1 : OOBX_RANK < 37 ? 2 : 3' 4 OOBX_TRANSPORT=socket
# hosts interleaved by rank (round robin): every group of a block is one rank of each host
job n48_4hosts_round_robin_roots2 48 2 'OOBX_RANK % 4' 4 OOBX_TRANSPORT=socket
job n48_4hosts_round_robin_ring 48 2 'OOBX_RANK % 4' 4 OOBX_TRANSPORT=socket OOBX_NODE_EXCHANGE=ring
# the allgather's size over the shared buffer falls back to the other algorithms
job n32_4hosts_small_node_buf 32 1 'OOBX_RANK / 8' 4 OOBX_TRANSPORT=socket OOBX_NODE_BUF=1k
job n256_8hosts_roots4 256 4 'OOBX_RANK / 32' 8 OOBX_TRANSPORT=socket
# one host holds more than half the ranks (28 of 40): the leaders' ring
# (OOBX_NODE_EXCHANGE=ring) runs both ways by rank distance, and the leader
# after the big host gets nothing from it going forward; and by doubling
job n40_big_host 40 1 'OOBX_RANK < 3 ? 0 : OOBX_RANK < 31 ? 1 : OOBX_RANK < 36 ? 2 : 3' 4 OOBX_TRANSPORT=socket
job n40_big_host_ring 40 1 'OOBX_RANK < 3 ? 0 : OOBX_RANK < 31 ? 1 : OOBX_RANK < 36 ? 2 : 3' 4 OOBX_TRANSPORT=socket OOBX_NODE_EXCHANGE=ring
# 100 hosts of one rank over 3 roots: init's card trade by doubling, 7 steps,
# the last one bringing blocks the leaders hold already
job n100_100hosts_roots3 100 3 'OOBX_RANK' 100 OOBX_TRANSPORT=socket
job n64_16hosts_ucx 64 2 'OOBX_RANK / 4' 16 OOBX_TRANSPORT=ucx UCX_TLS=tcp
# 5 hosts: the leaders' Bruck exchange of the allgather with a last step
# that sends only what its receiver lacks; and the same over the ring
job n60_5hosts_bruck 60 1 'OOBX_RANK / 12' 5 OOBX_TRANSPORT=socket
job n60_5hosts_ring 60 1 'OOBX_RANK / 12' 5 OOBX_TRANSPORT=socket OOBX_NODE_EXCHANGE=ring
# On 2 cores 2048 ranks take about 90 s to start (launch included), near the
# default 120 s timeout of a call: the big jobs get the launcher's 300 s less a margin.
big=OOBX_TIMEOUT_MS=280000
job n2048_one_host_roots8 2048 8 one 1 OOBX_TRANSPORT=socket $big
# and over 4 hosts of 512 (the leaders' card trade; a few seconds on a
# fast 2-core VM, as the one-host case)
job n2048_4hosts_roots8 2048 8 'OOBX_RANK / 512' 4 OOBX_TRANSPORT=socket $big
if [ "$mode" = long ]; then
    job n10240_one_host_roots16 10240 16 one 1 OOBX_TRANSPORT=socket $big
    job n10240_16hosts_roots16 10240 16 'OOBX_RANK / 640' 16 OOBX_TRANSPORT=socket $big
fi
cm_summary
