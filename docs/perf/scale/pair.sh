#!/bin/bash
# Paired runs on the GPU host: first contact and 64-rank start-up, pre-auth
# build (2931913, .dev/old) against this one; start-up at scale, the lazy
# build (859cc3f, .dev/lazy) against this one. One JSON line per run.
# PAIR_PARTS (default "fc scale") picks the parts (also "b64": 64-rank
# start-up alone); PAIR_BASE (default lazy) names the baseline build of the
# scale and b64 parts.
D=$(cd "$(dirname "$0")" && pwd)
export OOBX_TRANSPORT=socket OOBX_SOCKET_IFNAME=lo
libs() { # dir: its own liboobx first
  export LD_LIBRARY_PATH=$1/lib:$D/lib
}
boot() { # dir n roots hosts
  local d=$1 n=$2 r=$3 h=$4
  libs $d
  export OOBX_BOOT_AT=$(python3 -c "import time;print('%.6f'%(time.time()+1.0+$n*0.0012))")
  if [ "$h" -gt 1 ]; then
    per=$(( (n + h - 1) / h ))
    $d/bin/oobx-run -n $n -r $r --timeout 300 -- sh -c "OOBX_HOST_ID=\$((OOBX_RANK / $per)) exec $d/bin/oobx-boot --label=x" 2>&1 | grep -o 'OOBX_BOOT_RESULT.*' | cut -d' ' -f2-
  else
    $d/bin/oobx-run -n $n -r $r --timeout 300 -- $d/bin/oobx-boot --label=x 2>&1 | grep -o 'OOBX_BOOT_RESULT.*' | cut -d' ' -f2-
  fi
}
fc() { # dir n
  libs $1
  $1/bin/oobx-run -n $2 -- $1/bin/oobx-first-contact 2>&1 | grep -o '{.*}' | tail -1
}
parts=${PAIR_PARTS:-fc scale} base=${PAIR_BASE:-lazy}
[[ " $parts " == *" fc "* ]] && for i in 1 2 3 4 5 6 7 8; do
  for v in old new; do d=$D/$v; [ $v = new ] && d=$D
    echo "FC64 $v $(fc $d 64)"; echo "FC16 $v $(fc $d 16)"; echo "B64 $v $(boot $d 64 1 1)"
  done
done
[[ " $parts " == *" b64 "* ]] && for i in 1 2 3 4 5 6 7 8; do
  for v in $base new; do d=$D/$v; [ $v = new ] && d=$D
    echo "B64 $v $(boot $d 64 1 1)"
  done
done
[[ " $parts " == *" scale "* ]] && for i in 1 2 3; do
  for v in $base new; do d=$D/$v; [ $v = new ] && d=$D
    echo "S4096 $v $(boot $d 4096 16 1)"
    echo "S10240 $v $(boot $d 10240 16 16)"
  done
done
