#!/usr/bin/env bash
# Runs each libFuzzer target for a bounded time, starting from the committed
# corpus (new inputs go to FUZZ_DIR/corpus-<target>, not into the tree).
#   bash tests/run-fuzz.sh FUZZ_DIR SECONDS TARGET...
set -u
cd "$(dirname "$0")/.."
dir=$1 secs=$2
shift 2
fail=0
reasons=""
for t in "$@"; do
    work=$dir/corpus-$t
    mkdir -p "$work" "$dir/artifacts"
    echo "==== fuzz $t for $secs s"
    log=$dir/fuzz-$t.log
    "$dir/fuzz_$t" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t-" \
        "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1
    rc=$?
    tail -n 25 "$log"
    if [ "$rc" -ne 0 ]; then
        echo "==== fuzz $t: FAILED (reproducer in $dir/artifacts/)"
        fail=1
        # what the target said, for the summary at the end
        reasons+="==== why fuzz $t failed (from $log)"$'\n'
        reasons+=$(grep -E 'fuzz check failed|ERROR: |SUMMARY: |Test unit written|^    #[0-9] ' "$log" | head -20)$'\n\n'
    fi
done
[ -n "$reasons" ] && printf '\n%s' "$reasons"
exit $fail
