# Summary of fc-pair.sh output: per rank count, the median of the runs'
# first-contact medians and the median of pairwise ratios against old.
import json, statistics as st, sys
for f in sys.argv[1:]:
    d = {}
    for l in open(f):
        if l.startswith('#'): continue
        p = l.split(' ', 2)
        try: j = json.loads(p[2])
        except (IndexError, ValueError): print("unparsed:", l.strip()); continue
        d.setdefault(p[0], {}).setdefault(p[1], []).append(j)
    for n, byv in sorted(d.items()):
        print(n, {k: len(v) for k, v in byv.items()})
        for k, v in byv.items():
            xs = sorted(x['first_rtt_us_median'] for x in v)
            print('  %-4s first contact %.1f us (q1 %.1f, q3 %.1f), warm %.1f us' % (k, st.median(xs), xs[len(xs) // 4],
                  xs[3 * len(xs) // 4], st.median(x['warm_rtt_us_median'] for x in v)))
        for a in ('prev', 'new'):
            if a in byv and 'old' in byv:
                r = [x['first_rtt_us_median'] / y['first_rtt_us_median'] for x, y in zip(byv[a], byv['old'])]
                print('  %s/old: median of pairwise ratios %.3f' % (a, st.median(r)))
