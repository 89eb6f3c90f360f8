#!/bin/bash
# Real torchrun on the GPU host (PyTorch in its python3; this project's CI
# machine has none): launch-check and oobx-demo under torchrun with no OOBX_*
# variable set, one agent of 16 workers and two agents of 8 (c10d rendezvous,
# two "nodes" under one host name), then the same with the node-aware
# bootstrap forced. Run from the checkout with .dev carried:
#   source .dev/env.sh; bash docs/perf/launchers/torchrun.sh
D=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.dev" && pwd)
unset OOBX_SOCKET_IFNAME # env.sh sets it; torchrun users set nothing
for v in $(compgen -e | grep '^OOBX_' || true); do unset "$v"; done
export OOBX_MODULE_DIR=$D/lib/oobx
check=$D/bin/launch-check demo=$D/bin/oobx-demo
python3 -c 'import torch; print("torch", torch.__version__)'
verdict() { # name n log rc
  local ok; ok=$(grep -c "^launch-check: rank [0-9]* of $2 ok" "$3")
  if [ "$ok" -eq "$2" ] && [ "$4" -eq 0 ]; then echo "PASS $1 ($ok of $2 ranks ok)"; else
    echo "FAIL $1: $ok of $2 ranks ok, exit $4"; grep -E 'FAILED|ERROR' "$3" | head -6 | cut -c1-600 | sed 's/^/    /'; fi
  grep -h 'WARN' "$3" | head -2 | sed 's/^/    /'
}
run1() { # name n command...
  local name=$1 n=$2 log; log=$(mktemp); shift 2
  if [ "$(type -t "$1")" = function ]; then timeout 120 bash -c '"$@"' _ "$@" >"$log" 2>&1
  else timeout 120 "$@" >"$log" 2>&1; fi
  local rc=$?; verdict "$name" "$n" "$log" $rc
  # every run's whole output is kept where the device tool brings files back
  [ -n "${OUT:-}" ] && cp "$log" "$OUT/$(echo "$name" | tr -c 'a-zA-Z0-9\n' _ | cut -c1-60).log"
  rm -f "$log"
}
two_agents() { # port extra-env... : two torchrun agents of 8 workers, c10d rendezvous on one host
  local port=$1; shift
  env "$@" python3 -m torch.distributed.run --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \
      --rdzv-endpoint 127.0.0.1:$port --rdzv-id oobx-two --no-python "$check" &
  local a=$!
  env "$@" python3 -m torch.distributed.run --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \
      --rdzv-endpoint 127.0.0.1:$port --rdzv-id oobx-two --no-python "$check"
  local b=$?; wait $a; local st=$?
  [ $st -eq 0 ] && [ $b -eq 0 ]
}
export -f two_agents; export check
export LOGLEVEL=WARNING TORCH_CPP_LOG_LEVEL=ERROR
run1 "torchrun --standalone --nproc-per-node 16 launch-check" 16 python3 -m torch.distributed.run --standalone --nproc-per-node 16 --no-python "$check"
log=$(mktemp); timeout 120 python3 -m torch.distributed.run --standalone --nproc-per-node 16 --no-python "$demo" >"$log" 2>&1
rc=$?; if [ $rc -eq 0 ] && grep -q 'barrier, [0-9]* calls' "$log"; then echo "PASS torchrun --standalone --nproc-per-node 16 oobx-demo"; grep -E 'init|allgather|barrier' "$log" | head -6 | sed 's/^/    /'; else echo "FAIL oobx-demo under torchrun: exit $rc"; tail -8 "$log" | sed 's/^/    /'; fi; rm -f "$log"
run1 "torchrun --standalone 16, node-aware forced: one table of 16" 16 env OOBX_NODE_AWARE_MIN=2 LAUNCH_CHECK_LOCAL=16 \
    python3 -m torch.distributed.run --standalone --nproc-per-node 16 --no-python "$check"
run1 "two torchrun agents x 8 (c10d rendezvous)" 16 two_agents 29611
run1 "two torchrun agents x 8, node-aware forced: LOCAL_RANK twice, no shared table" 16 two_agents 29621 \
    OOBX_NODE_AWARE_MIN=2 LAUNCH_CHECK_LOCAL=1
