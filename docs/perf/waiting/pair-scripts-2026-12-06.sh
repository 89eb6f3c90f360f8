# The scripts of docs/perf/gpu-host-16core-h100-d-2026-12-06.txt, as run from .dev/ (old build in .dev/old).
# ---- .dev/pair.sh
#!/bin/bash
# pair.sh ROUNDS: old (c180fd1) and new alternating: UCX shm 8 B ping-pong and allgather at 2 ranks,
# then start-up at 10,240 ranks over 16 emulated hosts with the table and oobx_allgather (16 roots).
D=$(cd "$(dirname "$0")" && pwd)
R=${1:-5}
run() { # which
  if [ $1 = old ]; then env LD_LIBRARY_PATH=$D/old/lib:$D/lib OOBX_MODULE_DIR=$D/old/lib/oobx PATH=$D/old/bin:$PATH "${@:2}"; else env OOBX_MODULE_DIR=$D/lib/oobx "${@:2}"; fi
}
for i in $(seq $R); do
  for w in old new; do
    echo "$i $w $(run $w env OOBX_TRANSPORT=ucx UCX_TLS=posix,self timeout 60 oobx-run -n 2 -- oobx-bench --sizes=8 --benchmark_filter='^pingpong/|^allgather/' --batches=10 2>&1 | grep -E '^\[0\] (pingpong|allgather)/' | awk '{printf "%s %s (best %s)  ", $2, $5, $7}')"
  done
done
# ---- .dev/scale_pair.sh
#!/bin/bash
# scale_pair.sh ROUNDS: start-up at 10,240 ranks over 16 emulated hosts, 16 roots, socket:
# old (c180fd1, one-way leader ring) and new (both ways) alternating, table (T) then oobx_allgather (S).
D=$(cd "$(dirname "$0")" && pwd)
P=$(cd "$D/.." && pwd)
. "$P/docs/perf/scale/boot.sh"
R=${1:-3}
pick() { echo "$1" | python3 -c 'import json,sys; d=json.loads(sys.stdin.read() or "{}"); print("boot_s %s cross_s %s exchange_max_s %s cpu_mean_ms %s" % tuple(d.get(k) for k in ("boot_s","cross_s","exchange_max_s","cpu_mean_ms")))'; }
for i in $(seq $R); do
  for w in old new; do
    for m in T S; do
      a=""; [ $m = T ] && a=--table
      if [ $w = old ]; then
        out=$(export LD_LIBRARY_PATH=$D/old/lib:$D/lib OOBX_MODULE_DIR=$D/old/lib/oobx PATH=$D/old/bin:$PATH; BOOT_ARGS=$a boot ${N:-10240} 16 16 X=1)
      else
        out=$(export OOBX_MODULE_DIR=$D/lib/oobx; BOOT_ARGS=$a boot ${N:-10240} 16 16 X=1)
      fi
      echo "$i $w $m${N:-10240} $(pick "$out")"
    done
  done
done
# ---- .dev/ring_pair.sh
#!/bin/bash
# ring_pair.sh ROUNDS: the leaders' ring alone: N ranks, one per emulated host (OOBX_HOST_ID = rank),
# node-aware path, socket; old (c180fd1, one-way ring) and new (both ways) alternating.
D=$(cd "$(dirname "$0")" && pwd)
R=${1:-3}
run() { if [ $1 = old ]; then env LD_LIBRARY_PATH=$D/old/lib:$D/lib OOBX_MODULE_DIR=$D/old/lib/oobx PATH=$D/old/bin:$PATH "${@:2}"; else env OOBX_MODULE_DIR=$D/lib/oobx "${@:2}"; fi; }
for n in 16 8; do
for i in $(seq $R); do
  for w in old new; do
    echo "n$n $i $w $(run $w env OOBX_NODE_AWARE_MIN=2 OOBX_TRANSPORT=socket timeout 60 oobx-run -n $n -- sh -c 'OOBX_HOST_ID=$OOBX_RANK exec oobx-bench --sizes=8,4K --benchmark_filter="^allgather/|^barrier" --batches=5 --batch-ms=100' 2>&1 | grep -E '^\[0\] (allgather|barrier)' | awk '{printf "%s %s %s (best %s)  ", $2, $5, $6, $7}')"
  done
done
done
