#!/usr/bin/env python3
"""How fast, and how truthfully, a job learns that one of its ranks died.

For each transport and rank count: start a job of oobx-failure under
oobx-run, wait until every rank is ready, kill one rank (SIGKILL) at a random
moment, and read what each survivor saw: the time from the kill to the last
survivor's error, and the share of survivors whose error names the dead rank.
Two cases: `loop` (the ranks loop over allgathers and barriers) and `live`
(every rank waits in oobx_recv on a live peer).

  python3 bench/failure.py BUILD [--ranks 8,32,256] [--transports socket,ucx-tcp,ucx-shm,verbs-emu]
                                 [--cases loop,live] [--trials 3] [--json OUT.json]
"""
import argparse, json, os, random, re, shutil, signal, subprocess, sys, tempfile, time

VARIANTS = {
    "socket": {"OOBX_TRANSPORT": "socket"},
    "ucx-tcp": {"OOBX_TRANSPORT": "ucx", "UCX_TLS": "tcp"},
    "ucx-shm": {"OOBX_TRANSPORT": "ucx", "UCX_TLS": "posix,self"},
    "verbs-emu": {"OOBX_TRANSPORT": "verbs"},
}


def trial(build, variant, n, case, seed):
    rng = random.Random(seed)
    victim = rng.randrange(n)
    d = tempfile.mkdtemp(prefix="oobx-failure.")
    env = dict(os.environ, FAIL_DIR=d, FAIL_MODE=case, FAIL_VICTIM=str(victim), OOBX_SOCKET_IFNAME="lo",
               UCX_NET_DEVICES="lo", OOBX_TIMEOUT_MS="60000")
    env.pop("UCX_TLS", None)
    env.update(VARIANTS[variant])
    if variant == "verbs-emu":
        env["LD_PRELOAD"] = os.path.abspath(os.path.join(build, "tests/verbs-emu/liboobx-verbs-emu.so"))
    roots = 1 if n < 64 else 4
    p = subprocess.Popen([os.path.join(build, "bin/oobx-run"), "-n", str(n), "-r", str(roots), "--timeout", "120",
                          "--", os.path.join(build, "bin/oobx-failure")], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        end = time.time() + 90
        while time.time() < end and len([f for f in os.listdir(d) if f.startswith("ready.")]) < n:
            time.sleep(0.05)
        if len([f for f in os.listdir(d) if f.startswith("ready.")]) < n:
            return {"error": "the ranks never got ready"}
        time.sleep(rng.uniform(0.05, 0.3))
        pid = int(open(os.path.join(d, "ready.%d" % victim)).read())
        t_kill = time.time()
        os.kill(pid, signal.SIGKILL)
        end = time.time() + 10
        while time.time() < end and len([f for f in os.listdir(d) if f.startswith("err.")]) < n - 1:
            time.sleep(0.02)
        p.wait(timeout=30)
        seen, named, last = 0, 0, 0.0
        pat = re.compile(r"\brank %d\b" % victim)
        texts = []
        for r in range(n):
            if r == victim:
                continue
            f = os.path.join(d, "err.%d" % r)
            if not os.path.exists(f):
                continue
            t, code, text = open(f).read().split(" ", 2)
            seen += 1
            last = max(last, float(t) - t_kill)
            if pat.search(text):
                named += 1
            else:
                texts.append(text.strip()[:200])
        return {"victim": victim, "survivors": n - 1, "reported": seen, "named": named,
                "last_error_s": round(last, 4), "not_naming": texts[:3]}
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--ranks", default="8,32")
    ap.add_argument("--transports", default="socket")
    ap.add_argument("--cases", default="loop,live")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    print("| transport | ranks | case | trials | last survivor's error after kill (s), worst | survivors naming the dead rank |")
    print("|---|---:|---|---:|---:|---:|")
    for v in a.transports.split(","):
        for n in [int(x) for x in a.ranks.split(",")]:
            for case in a.cases.split(","):
                res = [trial(a.build, v, n, case, 1000 * n + k) for k in range(a.trials)]
                ok = [r for r in res if "error" not in r]
                worst = max((r["last_error_s"] for r in ok), default=float("nan"))
                named = sum(r["named"] for r in ok)
                total = sum(r["survivors"] for r in ok)
                print("| %s | %d | %s | %d | %.3f | %d/%d (%.0f%%) |" % (v, n, case, len(ok), worst, named, total,
                                                                       100.0 * named / total if total else 0))
                sys.stdout.flush()
                rows.append({"transport": v, "ranks": n, "case": case, "trials": res})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
