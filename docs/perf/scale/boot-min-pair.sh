#!/bin/bash
# boot-min-pair.sh RANKS ROUNDS BUILD...: boot-min (docs/perf/scale/boot-min.c, built into each BUILD/bin)
# and oobx-init-time of each build in turn, the order turning every round; RANKS ranks on one host, one
# root, socket (OOBX_TRANSPORT overrides); BOOT_ONLY=1 leaves oobx-init-time out, INIT_ONLY=1 boot-min (for
# builds without it). Per run: "boot BUILD seconds" (common instant to the slowest rank through init and the
# checked allgather) and "init BUILD wall init_max root_max root_mean after_max start_spread" (oobx-init-time,
# from each process's start: all started to all through init, the slowest init, the root phase's slowest and
# mean, the slowest phase after the ring, the spread of the starts; seconds).
n=$1 rounds=$2
shift 2
builds=("$@")
tp=${OOBX_TRANSPORT:-socket}
run() { # build program...
  local B=$1
  shift
  env LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OOBX_MODULE_DIR="$B/lib/oobx" OOBX_TRANSPORT=$tp \
    timeout 120 "$B/bin/oobx-run" -n "$n" -- "$@" 2>&1
}
for i in $(seq "$rounds"); do
  k=${#builds[@]}
  for j in $(seq 0 $((k - 1))); do
    B=${builds[$(( (i + j) % k ))]}
    if [ -z "${INIT_ONLY:-}" ]; then
      at=$(python3 -c "import time; print('%.6f' % (time.time() + 0.5 + $n * 0.002))")
      echo "boot $B $(OOBX_BOOT_AT=$at run "$B" "$B/bin/boot-min" | grep -a -m1 -o 'boot_s [0-9.]*' | cut -d' ' -f2)"
    fi
    [ -n "${BOOT_ONLY:-}" ] && continue
    echo "init $B $(run "$B" "$B/bin/oobx-init-time" --label=x | grep -a -m1 OOBX_INIT_RESULT |
      python3 -c 'import json,sys; l=sys.stdin.read(); d=json.loads(l[l.index("{"):]); print("%.4f %.4f %.4f %.4f %.4f %.4f" % (d["wall_s"], d["init_max_s"], d["root_max_s"], d["root_mean_s"], d["allgather_max_s"], d["start_spread_s"]))')"
  done
done
