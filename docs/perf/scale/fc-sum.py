# Summary of fc-pair.sh / fdtable.sh output: per kind of line (FC64, FC16:
# first contact; B64: 64-rank start-up), the median over the runs and, for
# first contact, the median of pairwise ratios against old.
import json, statistics as st, sys
for f in sys.argv[1:]:
    d = {}
    for l in open(f):
        p = l.split(' ', 2)
        if len(p) < 3 or not (p[0].startswith('FC') or p[0].startswith('B')): continue
        try: j = json.loads(p[2])
        except ValueError: print("unparsed:", l.strip()); continue
        d.setdefault(p[0], {}).setdefault(p[1], []).append(j)
    for n, byv in sorted(d.items()):
        print(n, {k: len(v) for k, v in byv.items()})
        for k, v in byv.items():
            if n.startswith('B'):
                xs = sorted(x['boot_s'] * 1e3 for x in v)
                print('  %-4s start-up %.1f ms median (%.1f-%.1f)' % (k, st.median(xs), xs[0], xs[-1]))
                continue
            xs = sorted(x['first_rtt_us_median'] for x in v)
            print('  %-4s first contact %.1f us (q1 %.1f, q3 %.1f), warm %.1f us' % (k, st.median(xs), xs[len(xs) // 4],
                  xs[3 * len(xs) // 4], st.median(x['warm_rtt_us_median'] for x in v)))
        for a in ('prev', 'new'):
            if n.startswith('FC') and a in byv and 'old' in byv:
                r = [x['first_rtt_us_median'] / y['first_rtt_us_median'] for x, y in zip(byv[a], byv['old'])]
                print('  %s/old: median of pairwise ratios %.3f' % (a, st.median(r)))
