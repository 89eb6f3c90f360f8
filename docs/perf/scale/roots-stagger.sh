#!/bin/bash
# Start-up at 4096 (one host) and 10,240 ranks (16 emulated hosts), socket,
# with 16 roots as usual, 16 roots without the stagger, and 64 roots (160
# ranks a root: under the stagger's threshold), alternating, ROUNDS rounds.
#   source .dev/env.sh; bash docs/perf/scale/roots-stagger.sh [ROUNDS]
# One line a run: the variant, then oobx-boot's JSON.
rounds=${1:-2}
. "$(dirname "$0")/boot.sh"
for i in $(seq "$rounds"); do
    echo "S10240 r16 $(boot 10240 16 16 X=1)"
    echo "S10240 r16-nostagger $(boot 10240 16 16 OOBX_UID_STAGGER_THRESHOLD=10240)"
    echo "S10240 r64 $(boot 10240 16 64 X=1)"
    echo "S4096 r16 $(boot 4096 1 16 X=1)"
    echo "S4096 r16-nostagger $(boot 4096 1 16 OOBX_UID_STAGGER_THRESHOLD=10240)"
done
