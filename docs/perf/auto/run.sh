#!/bin/sh
# Init time of one job under each transport choice, alternating, so that the
# host's drift falls on all three alike (docs/perf/auto/README.md); the order
# turns each trial (auto socket ucx, socket ucx auto, ucx auto socket), so
# that none always runs right after UCX's job has torn down.
#   sh docs/perf/auto/run.sh BUILD_DIR "RANKS..." TRIALS
# Prints one line per run: ranks, asked transport, chosen transport, wall
# (all processes started to all through init), init max, create max (s).
set -u
build=${1:-build}
ranks=${2:-"64"}
trials=${3:-5}
for n in $ranks; do
    for i in $(seq "$trials"); do
        case $((i % 3)) in 1) order="auto socket ucx" ;; 2) order="socket ucx auto" ;; *) order="ucx auto socket" ;; esac
        for t in $order; do
            OOBX_TRANSPORT=$t timeout 300 "$build/bin/oobx-run" -n "$n" -- "$build/bin/oobx-init-time" --label="$t" 2>&1 |
                grep OOBX_INIT_RESULT | python3 -c '
import json, sys
for l in sys.stdin:
    d = json.loads(l[l.index("{"):])
    print(d["ranks"], d["label"], d["transport"], "%.4f" % d["wall_s"], "%.4f" % d["init_max_s"], "%.4f" % d["create_max_s"])'
        done
    done
done
