"""Loads the raw results of bench/run.py (OUT/raw/*.json) into flat records.

A record is a dict:
  series   what ran: "oobx socket", "oobx ucx-shm", "Open MPI shm", "raw TCP" (blocking),
           "raw TCP busy-poll", ...
  impl     oobx, mpi, ucx_perftest, tcp
  variant  socket, ucx-shm, ucx-tcp, openmpi-shm, openmpi-tcp, mpich, mpich-tcp, ...
  algo     allgather algorithm for oobx (auto unless forced)
  ranks    int
  kind     allgather, group_allgather, bcast, barrier, pingpong, stream_bw,
           comm_init, comm_split, init (MPI_Init), tag_lat, ucp_put_bw, tag_bw
  bytes    int (0 when the benchmark has no size)
  lat_us   average time of one operation in microseconds (one-way for ping-pong,
           per message for a stream)
  min_us   the same in the best batch (less sensitive to other work on the machine)
  cpu_us   CPU time of one operation in microseconds (process CPU, maximum over ranks;
           ucx_perftest polls and reports none: its real time)
  algbw, busbw   GB/s (1e9 bytes/s) where meaningful
Init-scaling runs are returned separately by load_init().
"""

import glob
import json
import os
import statistics

SERIES_NAMES = {
    "socket": "oobx socket",
    "ucx-shm": "oobx ucx-shm",
    "ucx-tcp": "oobx ucx-tcp",
    "openmpi-shm": "Open MPI shm",
    "openmpi-tcp": "Open MPI tcp",
    "mpich": "MPICH",
    "mpich-tcp": "MPICH tcp",
    "ucx_perftest-shm": "ucx_perftest shm",
    "ucx_perftest-tcp": "ucx_perftest tcp",
}

# plotting order and colours shared by every figure
SERIES_ORDER = ["oobx socket", "oobx ucx-shm", "oobx ucx-tcp", "raw TCP", "raw TCP busy-poll",
                "Open MPI shm",
                "Open MPI tcp", "MPICH", "MPICH tcp", "ucx_perftest shm", "ucx_perftest tcp"]


def _num(x, default=0):
    try:
        return int(x)
    except (TypeError, ValueError):
        try:
            return float(x)
        except (TypeError, ValueError):
            return default


def _to_us(value, unit):
    return value * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}.get(unit, 1.0)


def _read_json(path):
    """A JSON file, or one that a failed run cut short after some results."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    try:
        return json.loads(text)
    except ValueError:
        pass
    cut = text.rfind("}")
    if cut < 0:
        return None
    try:
        data = json.loads(text[:cut + 1] + "\n  ]\n}\n")
        data.setdefault("context", {})["partial"] = True
        return data
    except ValueError:
        return None


def load(out):
    recs = []
    for path in sorted(glob.glob(os.path.join(out, "raw", "*.json"))):
        data = _read_json(path)
        if data is None or "benchmarks" not in data:
            continue
        ctx = data.get("context", {})
        impl = ctx.get("impl", "?")
        variant = ctx.get("variant", "?")
        algo = ctx.get("algo", "auto") or "auto"
        ranks = _num(ctx.get("ranks"), 0)
        for b in data["benchmarks"]:
            if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
                continue
            name = b["name"]
            kind = name.split("/")[0]
            if kind == "mpi_init":
                kind = "init"
            series = SERIES_NAMES.get(variant, variant)
            rimpl = impl
            if kind in ("tcp_pingpong", "tcp_poll_pingpong"):
                if variant != "socket":
                    continue  # the same reference again; the socket run's is the one compared
                series = "raw TCP busy-poll" if kind == "tcp_poll_pingpong" else "raw TCP"
                kind, rimpl = "pingpong", "tcp"
            if impl == "ucx_perftest":
                series = SERIES_NAMES.get(variant, variant)
            lat = b.get("lat_us")
            if lat is None:
                lat = _to_us(b.get("real_time", 0), b.get("time_unit", "us"))
            cpu = b.get("cpu_us")
            if cpu is None:
                cpu = _to_us(b.get("cpu_time", 0), b.get("time_unit", "us"))
            recs.append({
                "series": series if algo == "auto" else "%s (%s)" % (series, algo),
                "base_series": series,
                "impl": rimpl, "variant": variant, "algo": algo,
                "ranks": _num(b.get("ranks"), ranks) or ranks,
                "kind": kind, "bytes": _num(b.get("bytes"), 0),
                "lat_us": float(lat),
                "min_us": float(b.get("min_us", lat) or lat),
                "cpu_us": float(cpu or 0),
                "algbw": float(b.get("algbw_GBps", 0) or 0),
                "busbw": float(b.get("busbw_GBps", 0) or 0),
                "file": os.path.basename(path),
            })
    return recs


def load_init(out):
    """One record per (variant, roots, ranks): medians over repetitions."""
    res = []
    for path in sorted(glob.glob(os.path.join(out, "raw", "init-*.json"))):
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        runs = data.get("runs", [])
        if not runs:
            continue
        ctx = data["context"]
        rec = {"variant": ctx["variant"], "roots": int(ctx["roots"]), "ranks": int(ctx["ranks"]),
               "reps": len(runs)}
        for key in runs[0]:
            if key.endswith("_s"):
                rec[key] = statistics.median(r.get(key, 0) for r in runs)
        res.append(rec)
    return res


def pick(recs, **kw):
    """Records matching every keyword (value or callable)."""
    out = []
    for r in recs:
        ok = True
        for k, v in kw.items():
            if callable(v):
                ok = v(r.get(k))
            else:
                ok = r.get(k) == v
            if not ok:
                break
        if ok:
            out.append(r)
    return out


def one(recs, **kw):
    m = pick(recs, **kw)
    return m[0] if m else None


def fmt_bytes(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return "%d MiB" % (n >> 20)
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return "%d KiB" % (n >> 10)
    return "%d B" % n
