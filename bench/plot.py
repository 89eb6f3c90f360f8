#!/usr/bin/env python3
"""Draws the results of bench/run.py as PNG files in OUT/plots (matplotlib).

    python3 bench/plot.py --out build/bench
"""

import argparse
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results as R  # noqa: E402

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
except ImportError:
    sys.exit("plot.py: matplotlib is missing (Debian: apt-get install python3-matplotlib; "
             "run with /usr/bin/python3)")

STYLE = {
    "oobx socket": dict(color="tab:blue", marker="o", lw=2),
    "oobx ucx-shm": dict(color="tab:orange", marker="s", lw=2),
    "oobx ucx-tcp": dict(color="tab:green", marker="^", lw=2),
    "raw TCP": dict(color="black", marker="x", ls="--"),
    "raw TCP busy-poll": dict(color="dimgray", marker="+", ls=":"),
    "Open MPI shm": dict(color="tab:red", marker="v", ls=":"),
    "Open MPI tcp": dict(color="tab:purple", marker="<", ls=":"),
    "MPICH": dict(color="tab:brown", marker=">", ls="-."),
    "MPICH tcp": dict(color="tab:pink", marker="D", ls="-."),
    "ucx_perftest shm": dict(color="tab:gray", marker="*", ls="--"),
    "ucx_perftest tcp": dict(color="tab:olive", marker="P", ls="--"),
    "ucx_perftest shm put_bw": dict(color="tab:cyan", marker="h", ls="--"),
    "ucx_perftest tcp put_bw": dict(color="tab:cyan", marker="H", ls=":"),
}

bytes_fmt = FuncFormatter(lambda x, _: R.fmt_bytes(int(x)) if x >= 1 else "")
int_fmt = FuncFormatter(lambda x, _: "%d" % x)


def ticks_at(axis, values, fmt):
    """Major ticks at the measured values only (sizes or rank counts), no minor ones."""
    values = sorted(set(values))
    if not values:
        return
    axis.set_major_locator(FixedLocator(values))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(fmt)


def style(series):
    base = series.split(" (")[0]
    st = dict(STYLE.get(base, {}))
    if " (" in series:  # a forced algorithm: same colour, thinner and dashed
        st.update(lw=1, ls="--" if "ring" in series else "-.")
        st["marker"] = "1" if "ring" in series else "2"
    return st


def series_order(names):
    known = [s for s in R.SERIES_ORDER if s in names]
    return known + sorted(set(names) - set(known))


def size_plot(ax, recs, value, title, ylabel, logy=True):
    names = series_order({r["series"] for r in recs})
    sizes = []
    for s in names:
        pts = sorted((r["bytes"], r[value]) for r in recs if r["series"] == s and r[value] > 0)
        if not pts:
            continue
        sizes += [p[0] for p in pts]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=s, markersize=4, **style(s))
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ticks_at(ax.xaxis, sizes, bytes_fmt)
    ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)


def per_ranks_figure(recs, kind, value, ylabel, fname, outdir, title, series_filter=None):
    sel = [r for r in R.pick(recs, kind=kind) if series_filter is None or series_filter(r["series"])]
    ranks = sorted({r["ranks"] for r in sel})
    if not ranks:
        return None
    fig, axes = plt.subplots(1, len(ranks), figsize=(4.2 * len(ranks), 4), squeeze=False)
    for ax, n in zip(axes[0], ranks):
        size_plot(ax, [r for r in sel if r["ranks"] == n], value, "%d ranks" % n, ylabel)
        ax.set_xlabel("bytes per rank" if kind in ("allgather", "group_allgather") else "bytes")
    handles, labels = [], []
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.1 + 0.04 * (len(labels) > 5), 1, 0.95))
    path = os.path.join(outdir, fname)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def p2p_figure(recs, outdir):
    pp = R.pick(recs, kind="pingpong", ranks=2) + R.pick(recs, kind="tag_lat")
    bw = R.pick(recs, kind="stream_bw", ranks=2) + R.pick(recs, kind="tag_bw") + \
        R.pick(recs, kind="ucp_put_bw")
    if not pp and not bw:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    size_plot(axes[0], pp, "lat_us", "ping-pong, one-way latency", "µs")
    axes[0].set_xlabel("message bytes")
    bw2 = []
    for r in bw:
        r = dict(r)
        if r["kind"] == "ucp_put_bw":
            r["series"] = r["series"] + " put_bw"
        bw2.append(r)
    size_plot(axes[1], bw2, "busbw", "streaming bandwidth (window of 64)", "GB/s")
    axes[1].set_xlabel("message bytes")
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8)
    fig.suptitle("point to point, 2 ranks")
    fig.tight_layout(rect=(0, 0.14, 1, 0.95))
    path = os.path.join(outdir, "p2p.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def barrier_figure(recs, outdir):
    sel = R.pick(recs, kind="barrier")
    if not sel:
        return None
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for s in series_order({r["series"] for r in sel}):
        pts = sorted((r["ranks"], r["lat_us"]) for r in sel if r["series"] == s)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=s, markersize=5, **style(s))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks_at(ax.xaxis, [r["ranks"] for r in sel], int_fmt)
    ax.set_xlabel("ranks")
    ax.set_ylabel("µs")
    ax.set_title("barrier, average latency")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(outdir, "barrier.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def init_figure(recs, init, outdir):
    mpi = R.pick(recs, kind="init")
    if not init and not mpi:
        return []
    paths = []
    fig, ax = plt.subplots(figsize=(7, 4.8))
    colors = {"socket": "tab:blue", "ucx-shm": "tab:orange", "ucx-tcp": "tab:green"}
    for v, roots in sorted({(i["variant"], i["roots"]) for i in init}):
        pts = sorted((i["ranks"], i["wall_s"]) for i in init
                     if i["variant"] == v and i["roots"] == roots)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if roots == 1 else "s",
                ls="-" if roots == 1 else "--", lw=2, color=colors.get(v),
                label="oobx %s, %d root%s" % (v, roots, "s" if roots > 1 else ""))
    for s in series_order({r["series"] for r in mpi}):
        pts = sorted((r["ranks"], r["lat_us"] / 1e6) for r in mpi if r["series"] == s)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label="MPI_Init, " + s, markersize=5,
                **style(s))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks_at(ax.xaxis, [i["ranks"] for i in init] + [r["ranks"] for r in mpi], int_fmt)
    ax.set_xlabel("ranks (processes on one machine)")
    ax.set_ylabel("seconds")
    ax.set_title("start-up: all processes started → all ranks through init")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(outdir, "init_scaling.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)

    configs = sorted({(i["variant"], i["roots"]) for i in init})
    if configs:
        fig, axes = plt.subplots(1, len(configs), figsize=(4.5 * len(configs), 4.2), squeeze=False)
        phases = ["create", "delay", "root", "ring", "allgather"]
        pcol = ["tab:gray", "tab:olive", "tab:blue", "tab:orange", "tab:green"]
        for ax, (v, roots) in zip(axes[0], configs):
            sel = sorted((i for i in init if i["variant"] == v and i["roots"] == roots),
                         key=lambda i: i["ranks"])
            x = list(range(len(sel)))
            bottom = [0.0] * len(sel)
            for ph, c in zip(phases, pcol):
                vals = [i.get(ph + "_max_s", 0) for i in sel]
                ax.bar(x, vals, bottom=bottom, color=c, label=ph + " (max)")
                bottom = [b + v2 for b, v2 in zip(bottom, vals)]
            ax.plot(x, [i["wall_s"] for i in sel], "k_", markersize=18, mew=2, label="wall")
            ax.set_xticks(x)
            ax.set_xticklabels([str(i["ranks"]) for i in sel])
            ax.set_xlabel("ranks")
            ax.set_ylabel("seconds")
            ax.set_title("oobx %s, %d root%s" % (v, roots, "s" if roots > 1 else ""), fontsize=10)
            ax.grid(True, axis="y", alpha=0.3)
        axes[0][0].legend(fontsize=7)
        fig.suptitle("init phases, each the maximum over ranks (from different ranks: the stack "
                     "can pass the wall time), and wall time", fontsize=10)
        fig.tight_layout()
        path = os.path.join(outdir, "init_phases.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="build/bench")
    args = ap.parse_args()
    recs = R.load(args.out)
    init = R.load_init(args.out)
    outdir = os.path.join(args.out, "plots")
    os.makedirs(outdir, exist_ok=True)
    auto_only = lambda s: " (" not in s  # noqa: E731
    made = [
        per_ranks_figure(recs, "allgather", "lat_us", "µs", "allgather_latency.png", outdir,
                         "allgather, average latency", auto_only),
        per_ranks_figure(recs, "allgather", "busbw", "busbw GB/s", "allgather_busbw.png", outdir,
                         "allgather, bus bandwidth", auto_only),
        per_ranks_figure(recs, "allgather", "lat_us", "µs", "allgather_algorithms.png", outdir,
                         "allgather algorithms (socket): auto, ring, Bruck",
                         lambda s: s.startswith("oobx socket")),
        per_ranks_figure(recs, "group_allgather", "lat_us", "µs", "group_allgather_latency.png",
                         outdir, "group allgather (first half of the ranks), average latency"),
        per_ranks_figure(recs, "bcast", "lat_us", "µs", "bcast_latency.png", outdir,
                         "broadcast from rank 0, average latency"),
        p2p_figure(recs, outdir),
        barrier_figure(recs, outdir),
    ] + init_figure(recs, init, outdir)
    for p in made:
        if p:
            print("plot: %s" % p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
