#!/bin/bash
# init-pair.sh OLD_BUILD NEW_BUILD RANKS PAIRS [TRANSPORT]: oobx-init-time of two builds in turn (the order
# turns each pair), RANKS ranks on one host, one root, TRANSPORT (default socket). oobx-init-time exists in
# builds from before the node-aware bootstrap, so this compares against them; per run: all processes started
# to all through init (wall), the slowest init, the slowest communicator create, the root phase (slowest, mean)
# and the slowest phase after the ring ("allgather" in oobx-init-time's record), in seconds.
old=$1 new=$2 n=$3 pairs=$4 tp=${5:-socket}
one() {
  local B=$1
  env LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OOBX_MODULE_DIR="$B/lib/oobx" OOBX_TRANSPORT=$tp \
    timeout 120 "$B/bin/oobx-run" -n "$n" -- "$B/bin/oobx-init-time" --label=x 2>&1 | grep -m1 OOBX_INIT_RESULT |
    python3 -c 'import json,sys; l=sys.stdin.read(); d=json.loads(l[l.index("{"):]); print("wall %.4f init_max %.4f create_max %.4f root_max %.4f root_mean %.4f after_max %.4f" % (d["wall_s"], d["init_max_s"], d["create_max_s"], d["root_max_s"], d["root_mean_s"], d["allgather_max_s"]))'
}
for i in $(seq "$pairs"); do
  if [ $((i % 2)) = 1 ]; then echo "old $(one "$old")"; echo "new $(one "$new")"
  else echo "new $(one "$new")"; echo "old $(one "$old")"; fi
done
