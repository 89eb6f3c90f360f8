#!/bin/sh
# shellcheck disable=SC2016  # the ranks expand their own variables
# Checks oobx-run with shell ranks (no library needed).
#   sh tools/test-oobx-run.sh BUILD_DIR
set -u
run=${1:-build}/bin/oobx-run
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; sed 's/^/     | /' "$tmp/out" "$tmp/err" | head -20; }
# check NAME EXPECTED_STATUS GREP_PATTERN FILE -- oobx-run args...
check() {
    name=$1 want=$2 pat=$3 file=$4
    shift 5
    "$run" "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    if [ "$got" -ne "$want" ]; then
        echo "     exit status $got, expected $want"
        bad "$name"
    elif [ -n "$pat" ] && ! grep -Eq -e "$pat" "$tmp/$file"; then
        echo "     no line matches /$pat/ in std$file"
        bad "$name"
    else
        ok "$name"
    fi
}

check "environment of each rank" 0 '^\[3\] 3 4 127\.0\.0\.1:[0-9]+ lo$' out -- \
    -n 4 -- sh -c 'echo "$OOBX_RANK $OOBX_NRANKS $OOBX_COMM_ID $OOBX_SOCKET_IFNAME"'
check "one port per root, distinct" 0 '^\[0\] 127\.0\.0\.1:([0-9]+),127\.0\.0\.1:([0-9]+),127\.0\.0\.1:([0-9]+)$' out -- \
    -n 7 --roots 3 -- sh -c 'echo "$OOBX_COMM_ID"'
ports=$(sed -n 's/^\[0\] //p' "$tmp/out" | tr ',' '\n' | sort -u | wc -l)
if [ "$ports" -eq 3 ]; then ok "three distinct ports"; else bad "three distinct ports ($ports)"; fi
check "--ipv6 roots on [::1]" 0 '^\[0\] \[::1\]:[0-9]+,\[::1\]:[0-9]+$' out -- -n 2 -r 2 --ipv6 -- sh -c 'echo "$OOBX_COMM_ID"'
check "--transport sets OOBX_TRANSPORT" 0 '^\[1\] ucx$' out -- -n 2 --transport ucx -- sh -c 'echo $OOBX_TRANSPORT'
OOBX_SOCKET_IFNAME=eth check "OOBX_SOCKET_IFNAME kept when set" 0 '^\[0\] eth$' out -- -n 1 -- sh -c 'echo $OOBX_SOCKET_IFNAME'
check "stderr prefixed on stderr" 0 '^\[1\] to stderr$' err -- -n 2 -- sh -c 'echo to stderr >&2'
check "last line without newline" 0 '^\[0\] partial$' out -- -n 1 -- sh -c 'printf partial'
check "--no-prefix" 0 '^plain$' out -- -n 1 --no-prefix -- sh -c 'echo plain'
check "failing rank named" 1 '^oobx-run: failed ranks: 2 \(exit 3\)$' err -- \
    -n 4 -- sh -c '[ $OOBX_RANK = 2 ] && exit 3; sleep 30'
check "others ended" 1 '^oobx-run: ended by oobx-run: ranks 0-1,3$' err -- \
    -n 4 -- sh -c '[ $OOBX_RANK = 2 ] && exit 3; sleep 30'
check "rank killed by a signal" 1 'failed ranks: 1 \(SIGSEGV' err -- \
    -n 2 -- sh -c '[ $OOBX_RANK = 1 ] && kill -SEGV $$; sleep 30'
check "deadline names the ranks still running" 124 'deadline of 1 s passed; 2 ranks still running: 0,2' err -- \
    -n 3 --timeout 1 -- sh -c '[ $OOBX_RANK = 1 ] && exit 0; sleep 30'
check "SIGKILL for a rank ignoring SIGTERM" 124 'sending SIGKILL: 0' err -- \
    -n 1 --timeout 0.5 -- sh -c 'trap "" TERM; sleep 30; sleep 30'
check "program not found" 1 'cannot run /nonexistent/prog' err -- -n 2 -- /nonexistent/prog
check "usage: no -n" 2 '-n N is required' err -- true
check "usage: roots > ranks" 2 'more than the 2 ranks' err -- -n 2 --roots 3 true
check "usage: bad number" 2 'must be an integer' err -- -n x true
check "stagger" 0 '^\[2\] ' out -- -n 3 --stagger-ms 50 -- sh -c 'echo up'
check "1024 ranks" 0 '^\[1023\] 1023$' out -- -n 1024 -- sh -c 'echo $OOBX_RANK'
n=$(wc -l <"$tmp/out")
if [ "$n" -eq 1024 ]; then ok "1024 lines"; else bad "1024 lines ($n)"; fi
check "lines never mixed" 0 '' out -- -n 16 -- sh -c 'seq 1 5000'
n=$(grep -Ec '^\[[0-9]+\] [0-9]+$' "$tmp/out")
if [ "$n" -eq 80000 ]; then ok "80000 whole lines"; else bad "80000 whole lines ($n)"; fi

echo "oobx-run: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
