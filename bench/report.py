#!/usr/bin/env python3
"""Writes OUT/results.md: oobx and its peers side by side, with ratios.

    python3 bench/report.py --out build/bench [--command "make bench"] [--print] [--targets]

Ratios are oobx time / peer time: below 1, oobx is faster. --print also
writes the summary tables (allgather, barrier, ping-pong, start-up, targets)
on the terminal; --targets prints the targets table alone first.
"""

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results as R  # noqa: E402

KIB, MIB = 1024, 1024 * 1024


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
            cpu = m.group(1) if m else ""
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            m = re.search(r"^MemTotal:\s*(\d+)", f.read(), re.M)
            mem = "%.1f GiB" % (int(m.group(1)) / 1048576) if m else ""
    except OSError:
        pass
    osname = sh(". /etc/os-release 2>/dev/null && echo $PRETTY_NAME")
    virt = sh("systemd-detect-virt 2>/dev/null") or sh("lscpu | sed -n 's/^Hypervisor vendor: *//p'")
    return [
        ("CPU", "%s, %d cores online%s" % (cpu, os.cpu_count() or 0,
                                           ", virtual machine (%s)" % virt if virt and virt != "none" else "")),
        ("Memory", mem),
        ("OS", "%s, Linux %s" % (osname, platform.release())),
        ("Compiler", sh("cc --version | head -1")),
        ("UCX", sh("ucx_info -v 2>/dev/null | sed -n 's/^# Library version: *//p'")),
        ("Open MPI", sh("mpirun.openmpi --version 2>/dev/null | head -1")),
        ("MPICH", sh("mpiexec.mpich --version 2>/dev/null | sed -n 's/^ *Version: *//p' | head -1")),
        ("Google Benchmark", sh("pkg-config --modversion benchmark 2>/dev/null")),
        ("oobx", sh("git rev-parse --short HEAD 2>/dev/null")
         + (" (with local changes)" if sh("git status --porcelain -- src ucx verbs topo include 2>/dev/null") else "")),
    ]


def us(x):
    if x is None:
        return "–"
    if x >= 100000:
        return "%.0f" % x
    if x >= 100:
        return "%.1f" % x
    if x >= 10:
        return "%.2f" % x
    return "%.3g" % x


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "–"
    return "%.2f" % (a / b)


def lat(recs, series, kind, ranks, nbytes=0, field="lat_us"):
    r = R.one(recs, series=series, kind=kind, ranks=ranks, bytes=nbytes)
    return r[field] if r else None


def table(head, rows, numeric=True):
    """A markdown table whose columns are padded, so that it reads on a
    terminal as well: the first column left-aligned, the others right
    (numeric) or left."""
    cells = [[str(c) for c in head]] + [[str(c) for c in row] for row in rows]
    ncol = max(len(r) for r in cells)
    cells = [r + [""] * (ncol - len(r)) for r in cells]
    width = [max(3, max(len(r[i]) for r in cells)) for i in range(ncol)]

    def line(r):
        return "| " + " | ".join(c.rjust(width[i]) if i and numeric else c.ljust(width[i])
                                 for i, c in enumerate(r)) + " |"
    rule = "|" + "|".join(("-" * (width[i] + 1) + ":") if i and numeric else ("-" * (width[i] + 2))
                          for i in range(ncol)) + "|"
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])


def headline(recs, field="lat_us"):
    cols = ["oobx socket", "oobx ucx-shm", "Open MPI shm", "Open MPI tcp", "MPICH", "MPICH tcp"]
    rows = []
    for n in (2, 8, 64):
        for b in (8, KIB, MIB):
            v = {c: lat(recs, c, "allgather", n, b, field) for c in cols}
            rows.append([n, R.fmt_bytes(b)] + [us(v[c]) for c in cols] +
                        [ratio(v["oobx socket"], v["Open MPI tcp"]),
                         ratio(v["oobx socket"], v["MPICH tcp"]),
                         ratio(v["oobx ucx-shm"], v["Open MPI shm"]),
                         ratio(v["oobx ucx-shm"], v["MPICH"])])
    return table(["ranks", "bytes/rank"] + cols +
                 ["socket ÷ OMPI tcp", "socket ÷ MPICH tcp", "ucx-shm ÷ OMPI shm", "ucx-shm ÷ MPICH"],
                 rows)


def barrier_table(recs):
    cols = ["oobx socket", "oobx ucx-shm", "oobx ucx-tcp", "Open MPI shm", "Open MPI tcp", "MPICH",
            "MPICH tcp"]
    ranks = sorted({r["ranks"] for r in R.pick(recs, kind="barrier")})
    rows = []
    for n in ranks:
        v = {c: lat(recs, c, "barrier", n) for c in cols}
        rows.append([n] + [us(v[c]) for c in cols] +
                    [ratio(v["oobx socket"], v["Open MPI tcp"]), ratio(v["oobx ucx-shm"], v["Open MPI shm"])])
    return table(["ranks"] + cols + ["socket ÷ OMPI tcp", "ucx-shm ÷ OMPI shm"], rows)


def pingpong_table(recs):
    cols = ["oobx socket", "raw TCP", "raw TCP busy-poll", "oobx ucx-shm", "ucx_perftest shm",
            "oobx ucx-tcp", "ucx_perftest tcp", "Open MPI shm", "Open MPI tcp", "MPICH", "MPICH tcp"]
    sizes = sorted({r["bytes"] for r in R.pick(recs, kind="pingpong", ranks=2)} |
                   {r["bytes"] for r in R.pick(recs, kind="tag_lat")})
    rows = []
    for b in sizes:
        v = {}
        for c in cols:
            if c.startswith("ucx_perftest"):
                r = R.one(recs, series=c, kind="tag_lat", bytes=b)
                v[c] = r["lat_us"] if r else None
            else:
                v[c] = lat(recs, c, "pingpong", 2, b)
        best = {c: lat(recs, c, "pingpong", 2, b, "min_us")
                for c in ("oobx socket", "raw TCP", "raw TCP busy-poll")}
        rows.append([R.fmt_bytes(b)] + [us(v[c]) for c in cols] +
                    [ratio(v["oobx socket"], v["raw TCP"]),
                     ratio(best["oobx socket"], best["raw TCP"]),
                     ratio(v["oobx socket"], v["raw TCP busy-poll"]),
                     ratio(best["oobx socket"], best["raw TCP busy-poll"]),
                     ratio(v["oobx ucx-shm"], v["ucx_perftest shm"]),
                     ratio(v["oobx ucx-tcp"], v["ucx_perftest tcp"])])
    return table(["bytes"] + cols + ["socket ÷ raw TCP", "same, best batches", "socket ÷ busy-poll TCP",
                                     "same, best batches", "ucx-shm ÷ perftest", "ucx-tcp ÷ perftest"],
                 rows)


def init_table(recs, init):
    configs = sorted({(i["variant"], i["roots"]) for i in init})
    ranks = sorted({i["ranks"] for i in init} | {r["ranks"] for r in R.pick(recs, kind="init")})
    head = ["ranks"] + ["oobx %s, %d root%s" % (v, roots, "s" if roots > 1 else "")
                        for v, roots in configs]
    mpi_cols = [c for c in ("Open MPI shm", "Open MPI tcp", "MPICH", "MPICH tcp")
                if R.pick(recs, kind="init", series=c)]
    head += ["MPI_Init, %s" % c for c in mpi_cols]
    rows = []
    for n in ranks:
        row = [n]
        for v, roots in configs:
            m = [i for i in init if i["variant"] == v and i["roots"] == roots and i["ranks"] == n]
            row.append("%.3f s" % m[0]["wall_s"] if m else "–")
        for c in mpi_cols:
            x = lat(recs, c, "init", n)
            row.append("%.3f s" % (x / 1e6) if x is not None else "–")
        rows.append(row)
    return table(head, rows)


def phases_table(init):
    head = ["transport", "roots", "ranks", "wall", "start spread", "init max", "create", "delay",
            "root", "ring", "allgather", "reps"]
    rows = []
    for i in sorted(init, key=lambda i: (i["variant"], i["roots"], i["ranks"])):
        rows.append([i["variant"], i["roots"], i["ranks"]] +
                    ["%.3f" % i.get(k, 0) for k in ("wall_s", "start_spread_s", "init_max_s",
                                                     "create_max_s", "delay_max_s", "root_max_s",
                                                     "ring_max_s", "allgather_max_s")] + [i["reps"]])
    return table(head, rows)


def targets(recs, init):
    lines = []

    def add(what, value, target, ok, note=""):
        state = "–" if ok is None else ("met" if ok else "**not met**")
        state += note
        lines.append([what, value, target, state])

    s64 = [i for i in init if i["variant"] == "socket" and i["roots"] == 1 and i["ranks"] == 64]
    w = s64[0]["wall_s"] if s64 else None
    add("socket, 64 ranks: all started → all through init", "%.3f s" % w if w else "–", "< 0.5 s",
        None if w is None else w < 0.5)
    a = lat(recs, "oobx socket", "allgather", 64, 64)
    ab = lat(recs, "oobx socket", "allgather", 64, 64, "min_us")
    add("socket allgather 64 B/rank, 64 ranks", "%s µs (best batch %s µs)" % (us(a), us(ab)),
        "< 2000 µs", None if a is None else a < 2000)
    p = lat(recs, "oobx socket", "pingpong", 2, 8)
    t = lat(recs, "raw TCP", "pingpong", 2, 8)
    pb = lat(recs, "oobx socket", "pingpong", 2, 8, "min_us")
    tb = lat(recs, "raw TCP", "pingpong", 2, 8, "min_us")
    add("socket p2p 8 B round trip ÷ raw TCP ping-pong (same run)",
        "%s µs vs %s µs = %s× (best batches: %s vs %s µs = %s×)" %
        (us(p and 2 * p), us(t and 2 * t), ratio(p, t), us(pb and 2 * pb), us(tb and 2 * tb),
         ratio(pb, tb)), "≤ 1.3×",
        None if p is None or t is None else p / t <= 1.3,
        # loopback TCP's round trip is ~5 µs on an idle core; far above it, both
        # figures are mostly waiting for a CPU and their ratio says little
        " (machine busy: raw TCP round trip %s µs; repeat when idle)" % us(2 * tb)
        if tb is not None and 2 * tb > 20 else "")
    q = lat(recs, "raw TCP busy-poll", "pingpong", 2, 8)
    qb = lat(recs, "raw TCP busy-poll", "pingpong", 2, 8, "min_us")
    add("socket p2p 8 B one-way ÷ busy-polling raw TCP ping-pong (same run)",
        "%s µs vs %s µs = %s× (best batches: %s vs %s µs = %s×)" %
        (us(p), us(q), ratio(p, q), us(pb), us(qb), ratio(pb, qb)), "≤ 1.2× (ranks ≤ cores)",
        None if p is None or q is None else p / q <= 1.2)
    for b in (8, 64):
        u = lat(recs, "oobx ucx-shm", "pingpong", 2, b)
        ub = lat(recs, "oobx ucx-shm", "pingpong", 2, b, "min_us")
        pt = R.one(recs, series="ucx_perftest shm", kind="tag_lat", bytes=b)
        ptv = pt["lat_us"] if pt else None
        add("UCX shm p2p %d B one-way ÷ ucx_perftest -t tag_lat (same UCX_TLS)" % b,
            "%s µs (best batch %s) vs %s µs = %s×" % (us(u), us(ub), us(ptv), ratio(u, ptv)),
            "reference", None)
    ag = R.one(recs, series="oobx ucx-shm", kind="allgather", ranks=4, bytes=MIB)
    put = R.one(recs, series="ucx_perftest shm", kind="ucp_put_bw", bytes=MIB)
    add("UCX shm allgather 1 MiB/rank, 4 ranks: busbw vs ucx_perftest -t ucp_put_bw 1 MiB",
        "%s GB/s vs %s GB/s" % ("%.2f" % ag["busbw"] if ag else "–", "%.2f" % put["busbw"] if put else "–"),
        "reference", None)
    u = lat(recs, "oobx ucx-shm", "allgather", 64, 64)
    s = lat(recs, "oobx socket", "allgather", 64, 64)
    add("allgather 64 B/rank, 64 ranks: UCX shm ÷ socket", "%s µs vs %s µs = %s×" % (us(u), us(s), ratio(u, s)),
        "reference", None)
    u = R.one(recs, series="oobx ucx-tcp", kind="allgather", ranks=4, bytes=MIB)
    s = R.one(recs, series="oobx socket", kind="allgather", ranks=4, bytes=MIB)
    add("allgather 1 MiB/rank, 4 ranks: UCX tcp vs socket (busbw)",
        "%s GB/s vs %s GB/s" % ("%.2f" % u["busbw"] if u else "–", "%.2f" % s["busbw"] if s else "–"),
        "reference", None)
    return table(["measure", "value", "target", ""], lines, numeric=False)


def full_tables(recs):
    out = []
    kinds = [("allgather", "average latency µs / busbw GB/s"), ("group_allgather", "µs / busbw GB/s"),
             ("bcast", "µs / busbw GB/s"), ("pingpong", "one-way µs / GB/s"),
             ("stream_bw", "µs per message / GB/s")]
    for kind, what in kinds:
        sel = R.pick(recs, kind=kind)
        if not sel:
            continue
        out.append("### %s (%s)\n" % (kind, what))
        for n in sorted({r["ranks"] for r in sel}):
            sn = [r for r in sel if r["ranks"] == n]
            series = [s for s in R.SERIES_ORDER if any(r["series"] == s for r in sn)]
            series += sorted({r["series"] for r in sn} - set(series))
            sizes = sorted({r["bytes"] for r in sn})
            rows = []
            for b in sizes:
                row = [R.fmt_bytes(b)]
                for s in series:
                    r = R.one(sn, series=s, bytes=b)
                    row.append("%s / %.3g" % (us(r["lat_us"]), r["busbw"]) if r else "–")
                rows.append(row)
            out.append("%d ranks:\n\n%s\n" % (n, table(["bytes"] + series, rows)))
    sel = R.pick(recs, kind=lambda k: k in ("comm_init", "comm_split"))
    if sel:
        rows = [[r["series"], r["kind"], r["ranks"], us(r["lat_us"])]
                for r in sorted(sel, key=lambda r: (r["kind"], r["series"], r["ranks"]))]
        out.append("### communicator life cycle (in a running job)\n\n" +
                   table(["series", "op", "ranks", "µs"], rows) + "\n")
    return "\n".join(out)


def drop_empty_rows(text, label_cols):
    """The table without the rows that have no figure past their label columns."""
    lines = text.split("\n")
    keep = lines[:2]
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if any(c not in ("–", "") for c in cells[label_cols:]):
            keep.append(line)
    return "\n".join(keep)


def print_summary(recs, init, out):
    """The report's side-by-side tables, on the terminal (rows without a
    figure left out)."""
    sections = []
    if R.pick(recs, kind="allgather"):
        sections.append(("allgather, average latency (µs; ratios oobx ÷ peer)",
                         drop_empty_rows(headline(recs), 2)))
        sections.append(("allgather, best batch (µs)", drop_empty_rows(headline(recs, "min_us"), 2)))
    if R.pick(recs, kind="barrier"):
        sections.append(("barrier (µs)", barrier_table(recs)))
    if R.pick(recs, kind="pingpong", ranks=2) or R.pick(recs, kind="tag_lat"):
        sections.append(("ping-pong, 2 ranks: one-way latency (µs)", pingpong_table(recs)))
    if init or R.pick(recs, kind="init"):
        sections.append(("start-up: all processes started → all ranks through init",
                         init_table(recs, init)))
    sections.append(("targets", drop_empty_rows(targets(recs, init), 1)))
    for title, text in sections:
        print("\n## %s\n\n%s" % (title, text))
    print("\nevery figure, the plots and the failed launches: %s" % os.path.join(out, "results.md"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="build/bench")
    ap.add_argument("--command", default="")
    ap.add_argument("--targets", action="store_true", help="also print the targets table")
    ap.add_argument("--print", action="store_true",
                    help="also print the summary tables on the terminal")
    args = ap.parse_args()
    recs = R.load(args.out)
    init = R.load_init(args.out)
    if args.targets:
        print(targets(recs, init))
    if args.print:
        print_summary(recs, init, args.out)
    runcmd = ""
    try:
        with open(os.path.join(args.out, "command.txt")) as f:
            runcmd = f.read().strip()
    except OSError:
        pass
    failures = ""
    try:
        with open(os.path.join(args.out, "failures.txt")) as f:
            failures = f.read().strip()
    except OSError:
        pass

    md = ["# oobx benchmark results", ""]
    md.append("Made by `%s`%s on %s." % (args.command or "bench/report.py",
                                        " (runner: `%s`)" % runcmd if runcmd else "",
                                        datetime.datetime.now().strftime("%Y-%m-%d %H:%M")))
    md.append("")
    md.append("Machine:\n")
    md += ["- %s: %s" % kv for kv in machine() if kv[1]]
    loads = []
    try:
        with open(os.path.join(args.out, "load.txt")) as f:
            loads = [float(l.split()[-1]) for l in f if l.strip()]
    except (OSError, ValueError):
        pass
    if loads:
        med = sorted(loads)[len(loads) // 2]
        md.append("- Load average (1 min) before the launches: %.1f to %.1f, median %.1f%s" %
                  (min(loads), max(loads), med,
                   " (the benchmark's own ranks count in it; a median well above the core "
                   "count means other work shared the machine)" if med > (os.cpu_count() or 1) else ""))
    try:
        with open(os.path.join(args.out, "duration.txt")) as f:
            md.append("- Run time: " + ", ".join("%s s (%s)" % tuple(reversed(l.split()))
                                                 for l in f if l.strip()))
    except OSError:
        pass
    md.append("")
    md.append("Method: every operation is timed in batches; a batch starts after a barrier and its "
              "time is the maximum over ranks; the batch size comes from a warm-up whose maximum "
              "over ranks is the same on every rank. Times are averages per operation in µs "
              "(ping-pong: one-way, half the round trip). Allgather size is bytes per rank (OSU); "
              "algbw = ranks × size / t, busbw = algbw × (n−1)/n (nccl-tests). All ranks are "
              "processes on this one machine, all traffic on loopback or shared memory. "
              "Ratios are oobx ÷ peer: below 1, oobx is faster. oobx and the raw TCP reference "
              "block while they wait; Open MPI, MPICH and ucx_perftest poll. On a virtual machine "
              "a blocked process whose CPU went idle takes tens of µs to wake, so small-message "
              "latencies of blocking code vary from run to run (docs/benchmarks.md); compare oobx "
              "with the raw TCP reference of the same run.")
    md.append("")
    md.append("## Allgather: average latency (µs)\n")
    md.append(headline(recs))
    md.append("")
    md.append("The same, best batch (µs): on a shared machine, less moved by other work:\n")
    md.append(headline(recs, "min_us"))
    md.append("")
    md.append("## Barrier (µs)\n")
    md.append(barrier_table(recs))
    md.append("")
    md.append("## Ping-pong, 2 ranks: one-way latency (µs)\n")
    md.append(pingpong_table(recs))
    md.append("")
    md.append("## Start-up: all processes started → all ranks through init\n")
    md.append(init_table(recs, init))
    md.append("")
    md.append("Phases (seconds, maximum over ranks; median of the repetitions):\n")
    md.append(phases_table(init))
    md.append("")
    md.append("## Targets\n")
    md.append(targets(recs, init))
    md.append("")
    plots = [("allgather_latency.png", "allgather, average latency"),
             ("allgather_busbw.png", "allgather, bus bandwidth"),
             ("allgather_algorithms.png", "allgather algorithms (socket)"),
             ("group_allgather_latency.png", "group allgather"),
             ("bcast_latency.png", "broadcast"),
             ("p2p.png", "point to point"),
             ("barrier.png", "barrier"),
             ("init_scaling.png", "start-up time against ranks"),
             ("init_phases.png", "start-up phases")]
    md.append("## Plots\n")
    md.append("Made from the same results by `bench/plot.py`.\n")
    md += ["![%s](plots/%s)\n" % (t, f) for f, t in plots
           if os.path.exists(os.path.join(args.out, "plots", f))]
    md.append("## All results\n")
    md.append(full_tables(recs))
    if failures:
        md.append("## Failed launches\n")
        md.append("```\n%s\n```" % failures)
    md.append("")
    path = os.path.join(args.out, "results.md")
    with open(path, "w") as f:
        f.write("\n".join(md))
    print("report: %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
