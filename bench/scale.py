#!/usr/bin/env python3
"""make bench-scale: job start-up at 1k, 4k and 10k ranks.

Every configuration starts N ranks of oobx-boot under oobx-run with a common
start instant (OOBX_BOOT_AT) and records oobx-boot's JSON line: bootstrap
(common instant to the slowest rank through init and one checked allgather
of 128-byte cards), the phases (root, local, exchange, cards; cross-host: the
cross-host part on the critical path, from the last host ready to the end of
the last leader's trade, and to the end of its init), fds and
resident memory per rank. Hosts are emulated with OOBX_HOST_ID (ranks of one
id share memory; different ids trade through their leaders over loopback),
or with network namespaces (oobx-run --hosts) when SCALE_NETNS=1.
PyTorch's TCPStore is timed the same way where `import torch` works.

usage: scale.py BUILD OUT_DIR [--ranks 1024,4096,10240] [--roots 1,16] [--hosts 1,16]
                [--transport socket] [--tcpstore 1024,4096] [--table 4096,10240]
                [--margin-per-rank S]
--margin-per-rank: seconds a rank between the launch and the common instant,
beyond 2 s (default 0.0012, or SCALE_MARGIN); the table's "late starts" counts
ranks that started after the instant, whose runs time process creation too.
--table: rank counts to also run with oobx-boot --table (the cards through
oobx_allgather_table: one shared table a host, no copy a rank), 16 roots
(one a rank below 16 ranks) and the largest --hosts.
Writes OUT_DIR/scale.json, OUT_DIR/scale.md and OUT_DIR/scale.png (matplotlib).
"""
import argparse, json, os, re, subprocess, sys, time


def run_boot(build, n, roots, hosts, transport, netns, label, extra_env, boot_args=(), margin_per_rank=0.0012):
    env = dict(os.environ)
    env.update({"OOBX_TRANSPORT": transport, "OOBX_SOCKET_IFNAME": env.get("OOBX_SOCKET_IFNAME", "lo"),
                "UCX_NET_DEVICES": "lo"})
    env.update(extra_env)
    # ranks start over time: the common instant leaves room for the launcher
    # (a rank started after it is counted in late_starts: the run then times
    # process creation too; --margin-per-rank gives a slow machine more room)
    margin = 2.0 + n * margin_per_rank
    env["OOBX_BOOT_AT"] = "%.6f" % (time.time() + margin)
    boot = os.path.join(build, "bin", "oobx-boot")
    run = os.path.join(build, "bin", "oobx-run")
    cmd = [run, "-n", str(n), "-r", str(roots), "--timeout", "900"]
    args = ["--label=" + label] + list(boot_args)
    if hosts > 1 and netns:
        cmd += ["--hosts", str(hosts), "--", boot] + args
    elif hosts > 1:
        per = (n + hosts - 1) // hosts
        cmd += ["--", "sh", "-c", "OOBX_HOST_ID=$((OOBX_RANK / %d)) exec %s %s" % (per, boot, " ".join(args))]
    else:
        cmd += ["--", boot] + args
    t0 = time.time()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    wall = time.time() - t0
    m = re.search(r"OOBX_BOOT_RESULT (\{.*\})", p.stdout)
    if p.returncode != 0 or not m:
        tail = "\n".join(p.stdout.splitlines()[-8:])
        return {"label": label, "ranks": n, "roots": roots, "hosts_wanted": hosts, "error": "exit %d" % p.returncode,
                "tail": tail, "wall_s": wall}
    r = json.loads(m.group(1))
    r.update({"hosts_wanted": hosts, "launcher_wall_s": wall, "emulation": "netns" if netns and hosts > 1 else
              ("host_id" if hosts > 1 else "none"), "node_aware": extra_env.get("OOBX_NODE_AWARE", "1")})
    return r


def run_tcpstore(n, anchors):
    script = os.path.join(anchors, "tcpstore_boot.py")
    if not os.path.exists(script):
        return None
    try:
        import torch  # noqa: F401
    except Exception:
        return None
    t0 = time.time()
    p = subprocess.run([sys.executable, script, str(n)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=1800)
    m = re.search(r"total_from_t0_max=([0-9.]+).*ok=(\w+)", p.stdout)
    if not m:
        return {"label": "tcpstore", "ranks": n, "error": p.stdout[-400:]}
    return {"label": "tcpstore", "ranks": n, "boot_s": float(m.group(1)), "ok": m.group(2) == "True",
            "launcher_wall_s": time.time() - t0}


def table(results):
    rows = ["| label | ranks | roots | hosts | bootstrap s | root max s | local max s | exchange max s | "
            "cross-host s (share) | to leaders' init end s (share) | cards max s | fds max | RSS max MiB | late starts |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        if "error" in r:
            rows.append("| %s | %d | %s | %s | failed: %s | | | | | | | | | |" % (r["label"], r["ranks"], r.get("roots", ""),
                                                                     r.get("hosts_wanted", ""), r["error"]))
            continue
        if r["label"] == "tcpstore":
            rows.append("| TCPStore | %d | 1 | 1 | %.3f | | | | | | | | | |" % (r["ranks"], r["boot_s"]))
            continue
        def share(x):
            return "%.3f (%.1f %%)" % (x, 100 * x / r["boot_s"]) if x > 0 and r["boot_s"] > 0 else ""
        rows.append("| %s | %d | %d | %d | %.3f | %.3f | %.3f | %.3f | %s | %s | %.3f | %d | %.1f | %d |" % (
            r["label"], r["ranks"], r["roots"], r["hosts"], r["boot_s"], r["root_max_s"], r["local_max_s"],
            r["exchange_max_s"], share(r.get("cross_s", 0)), share(r.get("cross_init_s", 0)), r["cards_max_s"],
            r["fds_max"], r["rss_max_mib"], r.get("late_starts", 0)))
    return "\n".join(rows)


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return False
    series = {}
    for r in results:
        if "error" in r or "boot_s" not in r:
            continue
        key = "TCPStore" if r["label"] == "tcpstore" else "oobx %d root%s, %d host%s%s%s" % (
            r["roots"], "" if r["roots"] == 1 else "s", r["hosts"], "" if r["hosts"] == 1 else "s",
            "" if r.get("node_aware", "1") == "1" else " (flat)",
            " (table)" if r.get("table") else "")
        series.setdefault(key, []).append((r["ranks"], r["boot_s"]))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ticks = sorted({n for s in series.values() for n, _ in s})
    for k, pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=k)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.set_xlabel("ranks")
    ax.set_ylabel("bootstrap (s)\ncommon start to every rank through init\nand a checked 128 B allgather", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("out")
    ap.add_argument("--ranks", default="1024,4096,10240")
    ap.add_argument("--roots", default="1,16")
    ap.add_argument("--hosts", default="1,16")
    ap.add_argument("--transport", default="socket")
    ap.add_argument("--tcpstore", default="1024,4096")
    ap.add_argument("--flat", default="", help="rank counts to also run with OOBX_NODE_AWARE=0")
    ap.add_argument("--table", default="", help="rank counts to also run with oobx-boot --table")
    ap.add_argument("--anchors", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "anchors"))
    ap.add_argument("--machine", default=os.uname().nodename)
    ap.add_argument("--margin-per-rank", type=float, default=float(os.environ.get("SCALE_MARGIN", "0.0012")),
                    help="seconds a rank between the launch and the common instant, beyond 2 s (SCALE_MARGIN); "
                         "a machine that creates processes slowly needs more, or ranks start late")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    netns = os.environ.get("SCALE_NETNS") == "1"
    results = []
    for n in [int(x) for x in a.ranks.split(",") if x]:
        for roots in [int(x) for x in a.roots.split(",") if x]:
            for hosts in [int(x) for x in a.hosts.split(",") if x]:
                label = "n%d_r%d_h%d" % (n, roots, hosts)
                r = run_boot(a.build, n, roots, hosts, a.transport, netns, label, {}, margin_per_rank=a.margin_per_rank)
                print(json.dumps(r), flush=True)
                results.append(r)
        if str(n) in a.table.split(","):
            hosts = max(int(x) for x in a.hosts.split(",") if x)
            roots = min(16, n)  # a root leads at least one rank
            r = run_boot(a.build, n, roots, hosts, a.transport, netns, "n%d_r%d_h%d_table" % (n, roots, hosts), {}, ["--table"],
                         margin_per_rank=a.margin_per_rank)
            print(json.dumps(r), flush=True)
            results.append(r)
        if str(n) in a.flat.split(","):
            r = run_boot(a.build, n, 1, 1, a.transport, False, "n%d_flat" % n, {"OOBX_NODE_AWARE": "0"},
                         margin_per_rank=a.margin_per_rank)
            print(json.dumps(r), flush=True)
            results.append(r)
    for n in [int(x) for x in a.tcpstore.split(",") if x]:
        r = run_tcpstore(n, a.anchors)
        if r:
            print(json.dumps(r), flush=True)
            results.append(r)
    rec = {"machine": a.machine, "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
           "transport": a.transport, "results": results}
    with open(os.path.join(a.out, "scale.json"), "w") as f:
        json.dump(rec, f, indent=1)
    md = "# Start-up at scale on %s (%d cores), %s\n\n%s\n" % (a.machine, os.cpu_count(), rec["date"], table(results))
    with open(os.path.join(a.out, "scale.md"), "w") as f:
        f.write(md)
    print(md)
    if plot(results, os.path.join(a.out, "scale.png")):
        print("plot: %s" % os.path.join(a.out, "scale.png"))
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
