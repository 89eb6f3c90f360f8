#!/bin/bash
# Paired start-up runs, a baseline build against a new one in turn: first
# contact and 64-rank start-up (part fc), 64-rank start-up alone (b64), and
# start-up at 4096 ranks on one host and 10,240 on 16 (scale). One line per
# run, "PART build {OOBX_BOOT_RESULT json}", then each part and build's
# min / median / max boot seconds.
#
# In the GPU host's bundle (.dev, the script copied there): the new build is
# the bundle, the baselines its subfolders (.dev/old, .dev/lazy):
#   PAIR_PARTS=scale PAIR_BASE=old bash .dev/pair.sh
# Here, two build folders (a worktree of the old revision built with make):
#   PAIR_PARTS=b64 PAIR_BASE=/tmp/oldwt/build PAIR_NEW=build bash docs/perf/scale/pair.sh
# PAIR_PARTS: default "fc scale". PAIR_BASE: a folder, or a name under the
# script's folder (default lazy; fc always compares against "old" there).
# PAIR_NEW: default the script's folder. PAIR_ROUNDS: rounds of fc and b64
# (8); scale runs 3. OOBX_TRANSPORT: default socket.
D=$(cd "$(dirname "$0")" && pwd)
export OOBX_TRANSPORT=${OOBX_TRANSPORT:-socket} OOBX_SOCKET_IFNAME=${OOBX_SOCKET_IFNAME:-lo}
dir() { # a build's folder: a path, or a name under $D ("new": PAIR_NEW)
  case $1 in
    new) echo "${PAIR_NEW:-$D}" ;;
    */*) echo "$1" ;;
    *) echo "$D/$1" ;;
  esac
}
libs() { # dir: its own liboobx first
  export LD_LIBRARY_PATH=$1/lib:$D/lib
}
boot() { # dir n roots hosts
  local d=$1 n=$2 r=$3 h=$4
  libs $d
  export OOBX_BOOT_AT=$(python3 -c "import time;print('%.6f'%(time.time()+1.0+$n*0.0012))")
  if [ "$h" -gt 1 ]; then
    per=$(( (n + h - 1) / h ))
    $d/bin/oobx-run -n $n -r $r --timeout 300 -- sh -c "OOBX_HOST_ID=\$((OOBX_RANK / $per)) exec $d/bin/oobx-boot --label=x" 2>&1 | grep -o 'OOBX_BOOT_RESULT.*' | cut -d' ' -f2-
  else
    $d/bin/oobx-run -n $n -r $r --timeout 300 -- $d/bin/oobx-boot --label=x 2>&1 | grep -o 'OOBX_BOOT_RESULT.*' | cut -d' ' -f2-
  fi
}
fc() { # dir n
  libs $1
  $1/bin/oobx-run -n $2 -- $1/bin/oobx-first-contact 2>&1 | grep -o '{.*}' | tail -1
}
parts=${PAIR_PARTS:-fc scale} base=${PAIR_BASE:-lazy} rounds=${PAIR_ROUNDS:-8}
out=$(mktemp)
{
[[ " $parts " == *" fc "* ]] && for i in $(seq $rounds); do
  for v in old new; do d=$(dir $v)
    echo "FC64 $v $(fc $d 64)"; echo "FC16 $v $(fc $d 16)"; echo "B64 $v $(boot $d 64 1 1)"
  done
done
[[ " $parts " == *" b64 "* ]] && for i in $(seq $rounds); do
  for v in $base new; do d=$(dir $v)
    echo "B64 $v $(boot $d 64 1 1)"
  done
done
[[ " $parts " == *" scale "* ]] && for i in 1 2 3; do
  for v in $base new; do d=$(dir $v)
    echo "S4096 $v $(boot $d 4096 16 1)"
    echo "S10240 $v $(boot $d 10240 16 16)"
  done
done
} | tee "$out"
python3 - "$out" <<'PY'
import json, sys, statistics as st
runs = {}
for line in open(sys.argv[1]):
    part, build, rest = (line.rstrip("\n").split(" ", 2) + ["", ""])[:3]
    try:
        v = json.loads(rest).get("boot_s")
    except ValueError:
        v = None
    if isinstance(v, (int, float)):
        runs.setdefault((part, build), []).append(float(v))
for (part, build), s in sorted(runs.items()):
    s.sort()
    print("# %s %s: %d runs, boot_s min %.4f median %.4f max %.4f" % (part, build, len(s), s[0], st.median(s), s[-1]))
PY
rm -f "$out"
