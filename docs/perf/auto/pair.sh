#!/bin/bash
# Init time of two builds, alternating, under auto, socket and ucx:
#   bash docs/perf/auto/pair.sh OLD_DIR NEW_DIR "RANKS..." ROUNDS
# OLD_DIR and NEW_DIR each hold bin/ and lib/ (a build, or the device
# bundle); each run uses its own library and transport modules. One line a
# run: ranks, build, asked transport, chosen, wall (all processes started to
# all through init), init max, create max (s).
set -u
old=$1 new=$2 ranks=${3:-16} rounds=${4:-5}
for n in $ranks; do
    for i in $(seq "$rounds"); do
        for b in old new; do
            d=$old; [ $b = new ] && d=$new
            for t in auto socket ucx; do
                LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OOBX_MODULE_DIR="$d/lib/oobx" OOBX_TRANSPORT=$t \
                    timeout 300 "$d/bin/oobx-run" -n "$n" -- "$d/bin/oobx-init-time" --label="$b" 2>&1 |
                    grep OOBX_INIT_RESULT | python3 -c '
import json, sys
for l in sys.stdin:
    d = json.loads(l[l.index("{"):])
    print(d["ranks"], d["label"], "'$t'", d["transport"], "%.4f" % d["wall_s"], "%.4f" % d["init_max_s"], "%.4f" % d["create_max_s"])'
            done
        done
    done
done
