#!/bin/bash
# 64-rank start-ups with the instrumented root build in $D/diag (DIAG), then paired start-ups (prev/new) and
# first contact (old/prev/new): the bundle of .dev with old/, prev/, diag/ beside the current build (see the .txt).
D=$(cd "$(dirname "$0")" && pwd)
export OOBX_TRANSPORT=socket OOBX_SOCKET_IFNAME=lo
at() { python3 -c "import time;print('%.6f'%(time.time()+1.0+64*0.0012))"; }
for i in $(seq 1 14); do
  export LD_LIBRARY_PATH=$D/diag/lib:$D/lib OOBX_BOOT_AT=$(at)
  OOBX_LOG_LEVEL=trace $D/diag/bin/oobx-run -n 64 --timeout 60 -- $D/diag/bin/oobx-boot --label=x > $OUT/d.log 2>&1
  echo "DIAG $i $(grep -o '"boot_s": [0-9.]*' $OUT/d.log)"
  grep -o 'accept_all [0-9]* -> [0-9]* conns in [0-9.]* ms' $OUT/d.log | awk '$7 > 2 {print "   "$0}'
  grep -o 'DIAG2.*' $OUT/d.log | awk '{ if ($3+$7+$11 > 2) print "   "$0}'
done
rm -f $OUT/d.log
export OOBX_TRANSPORT=socket OOBX_SOCKET_IFNAME=lo
at() { python3 -c "import time;print('%.6f'%(time.time()+1.0+64*0.0012))"; }
boot() { export LD_LIBRARY_PATH=$1/lib:$D/lib OOBX_BOOT_AT=$(at); $1/bin/oobx-run -n 64 --timeout 60 -- $1/bin/oobx-boot --label=x 2>&1 | grep -o 'OOBX_BOOT_RESULT.*' | cut -d' ' -f2-; }
for i in $(seq 1 10); do for v in prev new; do d=$D/$v; [ $v = new ] && d=$D; echo "B64 $v $(boot $d)"; done; done
fc() { export LD_LIBRARY_PATH=$1/lib:$D/lib; $1/bin/oobx-run -n $2 -- $1/bin/oobx-first-contact 2>&1 | grep -o '{.*}' | tail -1; }
for i in $(seq 1 12); do for v in old prev new; do d=$D/$v; [ $v = new ] && d=$D; echo "FC64 $v $(fc $d 64)"; echo "FC16 $v $(fc $d 16)"; done; done
