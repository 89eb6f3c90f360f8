#!/bin/sh
# Paired socket ping-pong / allgather (8 B, 2 ranks): the build in OLD
# against the build in NEW, ROUNDS rounds, old and new taking turns.
# usage: sh docs/perf/waiting/socket-hot-pair.sh OLD_TREE NEW_TREE [ROUNDS]
old=${1:?old tree}; new=${2:?new tree}; rounds=${3:-5}
export OOBX_SOCKET_IFNAME=lo OOBX_TRANSPORT=socket
echo "# $(date -u +%FT%TZ) $(nproc) cores; old = $(git -C "$old" rev-parse --short HEAD) in $old, new = $(git -C "$new" rev-parse --short HEAD) in $new"
for i in $(seq 1 "$rounds"); do
  for side in old new; do
    d=$old; [ $side = new ] && d=$new
    "$d/build/bin/oobx-run" -n 2 -- "$d/build/bin/oobx-bench" \
      --benchmark_filter='^pingpong/|^allgather/|^tcp_poll' --sizes=8 --batches=10 2>&1 |
      grep -E '^\[0\] (pingpong|allgather|tcp_poll_pingpong)/' |
      awk -v i="$i" -v s=$side '{print i, s, $2, $5, "best", $7}'
  done
done
