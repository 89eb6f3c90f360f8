#!/usr/bin/env python3
"""Runs the oobx benchmark matrix and its peers; writes raw results to OUT/raw.

    python3 bench/run.py --matrix quick|standard [--parts oobx,init,peers,perftest]
                         [--build build] [--out build/bench]

Parts:
  oobx      build/bin/oobx-bench under build/bin/oobx-run, per transport and rank count
  init      build/bin/oobx-init-time: start-up time against rank count
  peers     build/bin/oobx-mpi-peer.{openmpi,mpich} under mpirun.openmpi / mpiexec.mpich
  perftest  ucx_perftest on loopback: the raw UCX reference

Every launch is one process group with a deadline; a launch that fails or
times out is logged in OUT/failures.txt with its command, and the run goes
on. All traffic stays on loopback.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

KIB = 1024
MIB = 1024 * 1024
ALL_SIZES = [8, 16, 64, 256, KIB, 4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB]
SIZES_64 = [8, 64, KIB, 16 * KIB, MIB]

# Environment that keeps every transport on loopback.
LOOPBACK_ENV = {
    "OOBX_SOCKET_IFNAME": "lo",
    "UCX_NET_DEVICES": "lo",
}

# oobx transports: name -> (OOBX_TRANSPORT, extra environment)
VARIANTS = {
    "socket": ("socket", {}),
    "ucx-shm": ("ucx", {"UCX_TLS": "posix,sysv,cma,self"}),
    "ucx-tcp": ("ucx", {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"}),
}

COLLECTIVES = "^(allgather|group_allgather|bcast|barrier|comm_split|comm_init)"


def matrix(name):
    """The launches of one matrix, as plain data."""
    m = {"oobx": [], "init": [], "peers": [], "perftest": []}
    if name == "quick":
        sizes = [8, 64, KIB, 64 * KIB, MIB]
        common = {"batches": 3, "batch_ms": 10}
        for v in ("socket", "ucx-shm"):
            m["oobx"].append(dict(variant=v, ranks=2, sizes=sizes, **common))
            m["oobx"].append(dict(variant=v, ranks=8, sizes=sizes, filter=COLLECTIVES, **common))
            m["oobx"].append(dict(variant=v, ranks=64, sizes=[8, 64, KIB],
                                  filter="^(allgather|barrier)", **common))
        m["init"] = [dict(variant="socket", ranks=r, roots=1, reps=1) for r in (2, 8, 64, 256, 1024)]
        m["init"] += [dict(variant="ucx-shm", ranks=r, roots=1, reps=1) for r in (8, 64)]
        m["peers"] = [dict(peer=p, ranks=r, sizes=sizes, **common)
                      for p in ("openmpi-shm", "openmpi-tcp") for r in (2, 8)]
        m["peers"] += [dict(peer="mpich", ranks=2, sizes=sizes, **common)]
        m["perftest"] = [dict(test="tag_lat", tls="shm", sizes=[8, KIB]),
                         dict(test="tag_lat", tls="tcp", sizes=[8, KIB])]
        return m
    if name == "targets":
        # just what the figures other issues ask for need (report.py --targets)
        common = {"batches": 5, "batch_ms": 25}
        m["oobx"] = [
            dict(variant="socket", ranks=2, sizes=[8, 64], filter="^(tcp_(poll_)?)?pingpong/", **common),
            dict(variant="ucx-shm", ranks=2, sizes=[8, 64], filter="^pingpong/", **common),
            dict(variant="socket", ranks=64, sizes=[64], filter="^allgather/", **common),
            dict(variant="ucx-shm", ranks=64, sizes=[64], filter="^allgather/", **common),
            dict(variant="socket", ranks=4, sizes=[MIB], filter="^allgather/", **common),
            dict(variant="ucx-shm", ranks=4, sizes=[MIB], filter="^allgather/", **common),
            dict(variant="ucx-tcp", ranks=4, sizes=[MIB], filter="^allgather/", **common),
        ]
        m["init"] = [dict(variant="socket", ranks=64, roots=1, reps=3)]
        m["perftest"] = [dict(test="tag_lat", tls="shm", sizes=[8, 64]),
                         dict(test="ucp_put_bw", tls="shm", sizes=[MIB])]
        return m
    if name != "standard":
        raise SystemExit("run.py: unknown matrix '%s' (quick, standard or targets)" % name)

    common = {"batches": 5, "batch_ms": 25}
    big = {"batches": 3, "batch_ms": 25, "max_buffer": 64 * MIB}
    for v in ("socket", "ucx-shm"):
        m["oobx"].append(dict(variant=v, ranks=2, sizes=ALL_SIZES, **common))
        for r in (4, 8):
            m["oobx"].append(dict(variant=v, ranks=r, sizes=ALL_SIZES, filter=COLLECTIVES, **common))
        m["oobx"].append(dict(variant=v, ranks=64, sizes=SIZES_64, filter=COLLECTIVES, **big))
    m["oobx"].append(dict(variant="ucx-tcp", ranks=2, sizes=ALL_SIZES, **common))
    m["oobx"].append(dict(variant="ucx-tcp", ranks=4, sizes=ALL_SIZES,
                          filter="^(allgather|barrier)", **common))
    for algo in ("ring", "bruck"):
        m["oobx"].append(dict(variant="socket", ranks=8, algo=algo, sizes=SIZES_64,
                              filter="^allgather/", **common))
        m["oobx"].append(dict(variant="socket", ranks=64, algo=algo, sizes=SIZES_64[:-1],
                              filter="^allgather/", **big))

    for v, roots, ranks in (("socket", 1, (2, 8, 64, 256, 1024)),
                            ("socket", 4, (64, 256, 1024)),
                            ("ucx-shm", 1, (2, 8, 64, 256, 1024)),
                            ("ucx-shm", 4, (64, 256))):
        # UCX start-up and teardown of 1024 processes on 2 cores take over a minute
        m["init"] += [dict(variant=v, ranks=r, roots=roots,
                           reps=(3 if r <= 64 else 2) if v == "socket" or r <= 64 else (2 if r <= 256 else 1))
                      for r in ranks]

    for p in ("openmpi-shm", "openmpi-tcp", "mpich"):
        m["peers"].append(dict(peer=p, ranks=2, sizes=ALL_SIZES, **common))
        for r in (4, 8):
            m["peers"].append(dict(peer=p, ranks=r, sizes=ALL_SIZES,
                                   tests="init,allgather,bcast,barrier", **common))
        if p == "mpich":
            # polls without yielding: 64 ranks on few cores take seconds per operation
            m["peers"].append(dict(peer=p, ranks=64, sizes=[8, 64, KIB, MIB],
                                   tests="init,allgather,barrier", batches=1, batch_ms=1,
                                   max_buffer=64 * MIB))
        else:
            m["peers"].append(dict(peer=p, ranks=64, sizes=SIZES_64,
                                   tests="init,allgather,barrier", **big))

    lat = [8, 64, KIB, 16 * KIB, 256 * KIB, MIB]
    m["perftest"] = [dict(test="tag_lat", tls="shm", sizes=lat),
                     dict(test="tag_lat", tls="tcp", sizes=lat),
                     dict(test="ucp_put_bw", tls="shm", sizes=[64 * KIB, MIB, 4 * MIB]),
                     dict(test="tag_bw", tls="shm", sizes=[64 * KIB, MIB, 4 * MIB]),
                     dict(test="tag_bw", tls="tcp", sizes=[64 * KIB, MIB, 4 * MIB])]
    return m


class Runner:
    def __init__(self, args):
        self.args = args
        self.out = args.out
        self.bindir = os.path.join(args.build, "bin")
        for d in ("raw", "logs"):
            os.makedirs(os.path.join(self.out, d), exist_ok=True)
        self.failures = []
        self.loads = []  # (launch, 1-minute load average before it): others' work skews figures
        self.t0 = time.time()

    def log(self, msg):
        print("[bench %6.1fs] %s" % (time.time() - self.t0, msg), flush=True)

    def launch(self, name, cmd, env=None, timeout=300):
        """Runs cmd in its own process group; returns (ok, stdout text)."""
        full_env = dict(os.environ)
        full_env.update(LOOPBACK_ENV)
        if env:
            full_env.update(env)
        logpath = os.path.join(self.out, "logs", name + ".log")
        if self.args.settle > 0:
            settle(self.args.settle)
        self.loads.append((name, loadavg()))
        self.log("%s: %s" % (name, " ".join(cmd)))
        t = time.time()
        with open(logpath, "w") as logf:
            logf.write("$ %s %s\n" % (" ".join("%s=%s" % kv for kv in sorted((env or {}).items())),
                                       " ".join(cmd)))
            logf.flush()
            proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True, text=True,
                                    errors="replace")
            try:
                out, _ = proc.communicate(timeout=timeout)
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    out, _ = proc.communicate(timeout=5)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    out, _ = proc.communicate()
                rc = "timeout after %ds" % timeout
            logf.write(out)
        dt = time.time() - t
        if rc != 0:
            tail = "\n".join(out.strip().splitlines()[-6:])
            self.failures.append("%s (%s, %.1fs): %s\n    log: %s\n    %s" %
                                 (name, rc, dt, " ".join(cmd), logpath, tail.replace("\n", "\n    ")))
            self.log("%s FAILED (%s) after %.1fs; see %s" % (name, rc, dt, logpath))
            return False, out
        self.log("%s done in %.1fs" % (name, dt))
        return True, out

    # ---- oobx ------------------------------------------------------------------
    def run_oobx(self, spec):
        v = spec["variant"]
        transport, env = VARIANTS[v]
        env = dict(env)
        algo = spec.get("algo")
        if algo:
            env["OOBX_ALLGATHER_ALGO"] = algo
        name = "oobx-%s-n%d%s" % (v, spec["ranks"], "-" + algo if algo else "")
        jpath = os.path.join(self.out, "raw", name + ".json")
        cmd = [os.path.join(self.bindir, "oobx-run"), "-n", str(spec["ranks"]),
               "--transport", transport, "--timeout", str(spec.get("timeout", 400)), "--",
               os.path.join(self.bindir, "oobx-bench"),
               "--variant=" + v,
               "--sizes=" + ",".join(str(s) for s in spec["sizes"]),
               "--batches=%d" % spec["batches"], "--batch-ms=%g" % spec["batch_ms"],
               "--benchmark_out=" + jpath, "--benchmark_out_format=json"]
        if "max_buffer" in spec:
            cmd.append("--max-buffer=%d" % spec["max_buffer"])
        if "filter" in spec:
            cmd.append("--benchmark_filter=" + spec["filter"])
        self.launch(name, cmd, env, timeout=spec.get("timeout", 400) + 30)

    # ---- init scaling --------------------------------------------------------------
    def run_init(self, spec):
        v = spec["variant"]
        transport, env = VARIANTS[v]
        results = []
        for rep in range(spec.get("reps", 1)):
            name = "init-%s-r%d-n%d-%d" % (v, spec["roots"], spec["ranks"], rep)
            t = time.time()
            cmd = [os.path.join(self.bindir, "oobx-run"), "-n", str(spec["ranks"]),
                   "--roots", str(spec["roots"]), "--transport", transport, "--timeout", "240",
                   "--no-prefix", "--", os.path.join(self.bindir, "oobx-init-time"),
                   "--label=" + v]
            ok, out = self.launch(name, cmd, env, timeout=270)
            launcher_s = time.time() - t
            if not ok:
                continue
            for line in out.splitlines():
                i = line.find("OOBX_INIT_RESULT ")
                if i >= 0:
                    r = json.loads(line[i + len("OOBX_INIT_RESULT "):])
                    r.update(variant=v, rep=rep, launcher_s=launcher_s)
                    results.append(r)
        with open(os.path.join(self.out, "raw", "init-%s-r%d-n%d.json" %
                               (v, spec["roots"], spec["ranks"])), "w") as f:
            json.dump({"context": {"impl": "oobx", "kind": "init_scaling", "variant": v,
                                   "ranks": spec["ranks"], "roots": spec["roots"]},
                       "runs": results}, f, indent=1)

    # ---- MPI peers -------------------------------------------------------------------
    def peer_cmd(self, peer, ranks):
        if peer.startswith("openmpi"):
            exe = os.path.join(self.bindir, "oobx-mpi-peer.openmpi")
            cmd = ["mpirun.openmpi", "-n", str(ranks), "--oversubscribe", "--bind-to", "none",
                   "--mca", "oob_tcp_if_include", "lo", "--mca", "pml", "ob1",
                   "--mca", "btl_tcp_if_include", "lo"]
            if os.geteuid() == 0:
                cmd.append("--allow-run-as-root")
            if peer == "openmpi-shm":
                cmd += ["--mca", "btl", "self,vader"]
            else:
                cmd += ["--mca", "btl", "self,tcp"]
            return exe, cmd + [exe], {"OMPI_MCA_mpi_yield_when_idle": "1"}
        exe = os.path.join(self.bindir, "oobx-mpi-peer.mpich")
        # hydra on loopback; Debian's MPICH is ch4:ucx, kept on lo by UCX_NET_DEVICES
        cmd = ["mpiexec.mpich", "-launcher", "fork", "-iface", "lo", "-n", str(ranks), exe]
        env = {}
        if peer == "mpich-tcp":
            # every peer treated as remote, and UCX limited to tcp
            env = {"MPIR_CVAR_NOLOCAL": "1", "UCX_TLS": "tcp,self"}
        return exe, cmd, env

    def run_peer(self, spec):
        peer = spec["peer"]
        exe, cmd, env = self.peer_cmd(peer, spec["ranks"])
        if not os.access(exe, os.X_OK):
            self.log("peer %s: %s not built (make bench-peers); skipped" % (peer, exe))
            return
        name = "%s-n%d" % (peer, spec["ranks"])
        jpath = os.path.join(self.out, "raw", name + ".json")
        cmd += ["--json=" + jpath, "--variant=" + peer,
                "--sizes=" + ",".join(str(s) for s in spec["sizes"]),
                "--batches=%d" % spec["batches"], "--batch-ms=%g" % spec["batch_ms"]]
        if "max_buffer" in spec:
            cmd.append("--max-buffer=%d" % spec["max_buffer"])
        if "tests" in spec:
            cmd.append("--tests=" + spec["tests"])
        ok, _ = self.launch(name, cmd, env, timeout=spec.get("timeout", 400))
        if not ok and os.path.exists(jpath):
            os.rename(jpath, jpath + ".partial")

    # ---- ucx_perftest ------------------------------------------------------------------
    def run_perftest(self, spec):
        exe = shutil.which("ucx_perftest")
        if exe is None:
            self.log("ucx_perftest not found (Debian package ucx-utils); skipped")
            return
        tls = spec["tls"]
        # the same transports as the oobx variant it is the reference for
        env = {"UCX_TLS": VARIANTS["ucx-" + tls][1]["UCX_TLS"], "UCX_NET_DEVICES": "lo"}
        entries = []
        for size in spec["sizes"]:
            port = free_port()
            # both sides poll: keep the counts small, the machine may be shared
            iters = 10000 if size <= KIB else (2000 if size <= 64 * KIB else 200)
            name = "ucx_perftest-%s-%s-%d" % (spec["test"], tls, size)
            args = ["-t", spec["test"], "-s", str(size), "-n", str(iters), "-w", str(iters // 10),
                    "-p", str(port)]
            full_env = dict(os.environ)
            full_env.update(LOOPBACK_ENV)
            full_env.update(env)
            server = subprocess.Popen([exe] + args, env=full_env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True)
            time.sleep(0.5)
            ok, out = self.launch(name, [exe, "127.0.0.1"] + args, env, timeout=60)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
            if not ok:
                continue
            m = re.search(r"^Final:\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)",
                          out, re.M)
            if not m:
                self.failures.append("%s: no 'Final:' line in the output" % name)
                continue
            it, p50, avg, overall, bw_avg, bw_overall = m.groups()
            # ucx_perftest reports no CPU time; both of its sides poll, so
            # their CPU time is their real time
            entries.append({"name": "%s/%d" % (spec["test"], size), "run_type": "iteration",
                            "iterations": int(it), "real_time": float(overall),
                            "cpu_time": float(overall), "time_unit": "us", "bytes": size,
                            "lat_us": float(overall), "lat_p50_us": float(p50),
                            "bw_MBps": float(bw_overall),
                            "algbw_GBps": float(bw_overall) * 1.048576e6 / 1e9,
                            "busbw_GBps": float(bw_overall) * 1.048576e6 / 1e9})
        with open(os.path.join(self.out, "raw", "ucx_perftest-%s-%s.json" %
                               (spec["test"], tls)), "w") as f:
            json.dump({"context": {"impl": "ucx_perftest", "variant": "ucx_perftest-" + tls,
                                   "test": spec["test"], "ranks": 2, "ucx_tls": env["UCX_TLS"]},
                       "benchmarks": entries}, f, indent=1)


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return -1.0


def runnable():
    """Tasks running or ready to run right now (the 4th field of /proc/loadavg)."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return 0


def settle(limit_s):
    """Waits, at most limit_s, until no more tasks want to run than there are
    cores (three samples in a row): on a shared machine, starts a launch in a
    quiet moment when there is one."""
    cores = os.cpu_count() or 1
    quiet = 0
    end = time.time() + limit_s
    while time.time() < end and quiet < 3:
        quiet = quiet + 1 if runnable() - 1 <= cores else 0
        time.sleep(0.05)


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--matrix", default="standard")
    ap.add_argument("--parts", default="oobx,init,peers,perftest")
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default="build/bench")
    ap.add_argument("--max-ranks", type=int, default=1 << 30,
                    help="skip launches with more ranks than this")
    ap.add_argument("--clean", action="store_true", help="remove OUT/raw and OUT/logs first")
    ap.add_argument("--settle", type=float, default=2.0,
                    help="wait up to this many seconds before each launch for the machine to "
                         "have no more runnable tasks than cores (0: do not wait)")
    args = ap.parse_args()
    if args.clean:
        for d in ("raw", "logs"):
            shutil.rmtree(os.path.join(args.out, d), ignore_errors=True)
        for f in ("load.txt", "duration.txt", "failures.txt"):
            if os.path.exists(os.path.join(args.out, f)):
                os.remove(os.path.join(args.out, f))

    m = matrix(args.matrix)
    parts = [p for p in args.parts.split(",") if p]
    for p in parts:
        if p not in m:
            raise SystemExit("run.py: unknown part '%s' (oobx, init, peers, perftest)" % p)
    run = Runner(args)
    needed = set()
    if "oobx" in parts:
        needed |= {"oobx-run", "oobx-bench"}
    if "init" in parts:
        needed |= {"oobx-run", "oobx-init-time"}
    for need in sorted(needed):
        if not os.access(os.path.join(run.bindir, need), os.X_OK):
            raise SystemExit("run.py: %s/%s is missing; build it with 'make bench-build'" %
                             (run.bindir, need))

    with open(os.path.join(args.out, "command.txt"), "w") as f:
        f.write(" ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]) + "\n")
    order = {"oobx": run.run_oobx, "init": run.run_init, "peers": run.run_peer,
             "perftest": run.run_perftest}
    for part in ("oobx", "init", "peers", "perftest"):
        if part not in parts:
            continue
        for spec in m[part]:
            if spec.get("ranks", 2) > args.max_ranks:
                continue
            order[part](spec)

    with open(os.path.join(args.out, "failures.txt"), "w") as f:
        f.write("\n".join(run.failures) + ("\n" if run.failures else ""))
    with open(os.path.join(args.out, "load.txt"), "a") as f:
        f.write("".join("%s %.2f\n" % nl for nl in run.loads))
    with open(os.path.join(args.out, "duration.txt"), "a") as f:
        f.write("%s %.0f\n" % (args.matrix + ":" + args.parts, time.time() - run.t0))
    run.log("finished in %.0fs, %d failed launch(es)%s" %
            (time.time() - run.t0, len(run.failures),
             "; see " + os.path.join(args.out, "failures.txt") if run.failures else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
