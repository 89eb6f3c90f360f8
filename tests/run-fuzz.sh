#!/usr/bin/env bash
# Runs each libFuzzer target for a bounded time, starting from the committed
# corpus (new inputs go to FUZZ_DIR/corpus-<target>, not into the tree).
#   bash tests/run-fuzz.sh FUZZ_DIR SECONDS TARGET...
set -u
cd "$(dirname "$0")/.."
dir=$1 secs=$2
shift 2
fail=0
for t in "$@"; do
    work=$dir/corpus-$t
    mkdir -p "$work" "$dir/artifacts"
    echo "==== fuzz $t for $secs s"
    "$dir/fuzz_$t" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t-" \
        "$work" "tests/fuzz/corpus/$t" 2>&1 | tail -n 25
    if [ "${PIPESTATUS[0]}" -ne 0 ]; then
        echo "==== fuzz $t: FAILED (reproducer in $dir/artifacts/)"
        fail=1
    fi
done
exit $fail
