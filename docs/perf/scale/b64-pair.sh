#!/bin/sh
# 64-rank start-up (one host, one root, flat: below OOBX_NODE_AWARE_MIN),
# two builds in turn: prints one line per run, "A|B boot_s", then each
# side's min, median and max. oobx-boot's common start is 0.3 s after
# launch; the transport is OOBX_TRANSPORT's (default socket).
#   sh docs/perf/scale/b64-pair.sh OLD_BUILD_DIR build [PAIRS]
A=$1 B=$2 P=${3:-12}
one() {
    OOBX_TRANSPORT=${OOBX_TRANSPORT:-socket} \
    OOBX_BOOT_AT=$(python3 -c "import time;print('%.6f'%(time.time()+0.3))") \
        "$1"/bin/oobx-run -n 64 -- "$1"/bin/oobx-boot 2>&1 | grep -o '"boot_s": [0-9.]*' | cut -d' ' -f2
}
t=$(mktemp)
i=0
while [ $i -lt "$P" ]; do
    echo "A $(one "$A")"
    echo "B $(one "$B")"
    i=$((i + 1))
done > "$t"
cat "$t"
python3 - "$t" <<'PY'
import sys, statistics as st
v = {"A": [], "B": []}
for l in open(sys.argv[1]):
    k, x = l.split()
    v[k].append(float(x))
for k in "AB":
    s = sorted(v[k])
    print("%s: %d runs, boot_s min %.4f median %.4f max %.4f" % (k, len(s), s[0], st.median(s), s[-1]))
PY
rm -f "$t"
