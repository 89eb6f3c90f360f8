#!/bin/bash
# Start-up at 4096 (one host) and 10,240 ranks (16 emulated hosts), socket,
# with 16 roots as usual, 16 roots without the stagger, and 64 roots (160
# ranks a root: under the stagger's threshold), alternating, ROUNDS rounds.
#   source .dev/env.sh; bash docs/perf/scale/roots-stagger.sh [ROUNDS]
# One line a run: the variant, then oobx-boot's JSON.
rounds=${1:-2}
boot() { # n hosts roots env...
    local n=$1 h=$2 r=$3 per=$(( ($1 + $2 - 1) / $2 ))
    shift 3
    env "$@" OOBX_TRANSPORT=socket OOBX_BOOT_AT=$(python3 -c "import time;print('%.6f'%(time.time()+1.0+$n*0.0012))") \
        oobx-run -n "$n" -r "$r" --timeout 300 -- sh -c "OOBX_HOST_ID=\$((OOBX_RANK / $per)) exec oobx-boot --label=h$h" 2>&1 |
        grep -o 'OOBX_BOOT_RESULT.*' | cut -d' ' -f2-
}
for i in $(seq "$rounds"); do
    echo "S10240 r16 $(boot 10240 16 16 X=1)"
    echo "S10240 r16-nostagger $(boot 10240 16 16 OOBX_UID_STAGGER_THRESHOLD=10240)"
    echo "S10240 r64 $(boot 10240 16 64 X=1)"
    echo "S4096 r16 $(boot 4096 1 16 X=1)"
    echo "S4096 r16-nostagger $(boot 4096 1 16 OOBX_UID_STAGGER_THRESHOLD=10240)"
done
