#!/usr/bin/env python3
"""boot-min-sum.py FILE: medians and ranges per build of boot-min-pair.sh's output."""
import statistics as st
import sys

rows = {}
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) < 3 or p[0] not in ("boot", "init"):
        continue
    try:
        rows.setdefault((p[0], p[1]), []).append([float(x) for x in p[2:]])
    except ValueError:
        continue
for (kind, build), vals in sorted(rows.items()):
    cols = list(zip(*vals))
    names = ["boot_s"] if kind == "boot" else ["wall", "init_max", "root_max", "root_mean", "after_max", "start_spread"]
    print("%-4s %-28s n=%-2d " % (kind, build, len(vals)) +
          "  ".join("%s %.4f (%.4f-%.4f)" % (nm, st.median(c), min(c), max(c)) for nm, c in zip(names, cols)))
