#!/bin/bash
# ag-pair.sh OLD_BUILD NEW_BUILD RANKS HOSTS PAIRS: oobx-boot (oobx_allgather, no --table) of two builds in turn,
# RANKS over HOSTS emulated hosts (OOBX_HOST_ID), 16 roots, socket, a common start; per run the slowest
# rank's start-up and the mean CPU a rank (whole, init, allgather), system CPU and minor faults.
old=$1 new=$2 n=$3 h=$4 pairs=$5
export OOBX_SOCKET_IFNAME=lo
export PYTHONDONTWRITEBYTECODE=1
one() {
  local B=$1 per=$(( (n + h - 1) / h ))
  # each build's own library first (a bundle's LD_LIBRARY_PATH would give both the same)
  env LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OOBX_MODULE_DIR="$B/lib/oobx" OOBX_TRANSPORT=socket OOBX_BOOT_AT=$(python3 -c "import time;print('%.6f'%(time.time()+1.0+$n*0.0012))") \
    $B/bin/oobx-run -n $n -r 16 --timeout 300 -- sh -c "OOBX_HOST_ID=\$((OOBX_RANK / $per)) exec $B/bin/oobx-boot" 2>&1 |
    grep -o 'OOBX_BOOT_RESULT.*' | cut -d' ' -f2- | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print('boot %.3f cpu %.3f init %.3f ag %.3f sys %.3f minflt %.1f late %d' % (d['boot_s'], d['cpu_mean_ms'], d['cpu_init_mean_ms'], d['cpu_allgather_mean_ms'], d['cpu_sys_mean_ms'], d['minflt_mean'], d['late_starts']))"
}
for i in $(seq $pairs); do echo "old $(one $old)"; echo "new $(one $new)"; done
