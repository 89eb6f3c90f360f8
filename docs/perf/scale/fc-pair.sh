#!/bin/bash
# paired first contact: old (pre-auth 2931913), prev (149d9e4, challenge), new (working tree)
# The old build has no oobx-first-contact: copy this build's into its bin/ (public API only).
export OOBX_TRANSPORT=socket OOBX_SOCKET_IFNAME=lo
N=${N:-64}; R=${R:-7}
for i in $(seq 1 $R); do
  for v in old prev new; do
    case $v in old) d=${OLD:-/tmp/wt-2931913/build};; prev) d=${PREV:-/tmp/wt-149d9e4/build};; new) d=${NEW:-build};; esac
    echo "FC$N $v $($d/bin/oobx-run -n $N -- $d/bin/oobx-first-contact 2>&1 | grep -o '{.*}' | tail -1)"
  done
done
