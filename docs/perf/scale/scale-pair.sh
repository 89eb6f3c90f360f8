#!/bin/bash
# Start-up at scale on the GPU host: the build of 93a9469 (.dev/old) against this one, alternating.
D=$(cd "$(dirname "$0")" && pwd)
export OOBX_TRANSPORT=socket OOBX_SOCKET_IFNAME=lo
boot() { # dir n roots hosts
  local d=$1 n=$2 r=$3 h=$4
  export LD_LIBRARY_PATH=$d/lib:$D/lib
  export OOBX_BOOT_AT=$(python3 -c "import time;print('%.6f'%(time.time()+1.0+$n*0.0012))")
  per=$(( (n + h - 1) / h ))
  $d/bin/oobx-run -n $n -r $r --timeout 300 -- sh -c "OOBX_HOST_ID=\$((OOBX_RANK / $per)) exec $d/bin/oobx-boot --label=x" 2>&1 | grep -o 'OOBX_BOOT_RESULT.*' | cut -d' ' -f2- | python3 -c "import json,sys
for l in sys.stdin:
  j=json.loads(l); print('boot_s %.3f root_max %.3f' % (j['boot_s'], j.get('root_max_s',0)))"
}
for i in 1 2 3; do
  for v in old new; do d=$D/$v; [ $v = new ] && d=$D
    echo "S4096 $v $(boot $d 4096 16 1)"
    echo "S10240 $v $(boot $d 10240 16 16)"
  done
done
