#!/bin/sh
# shellcheck disable=SC2016  # the ranks expand their own variables
# Checks oobx-run with shell ranks, and the root socket hand-off with real
# oobx ranks (BUILD_DIR/docs/hello).
#   sh tools/test-oobx-run.sh BUILD_DIR          make check-tools
#   sh tools/test-oobx-run.sh BUILD_DIR long     make test-long-run (10,240 ranks)
set -u
build=${1:-build}
mode=${2:-}
run=$build/bin/oobx-run
hello=$build/docs/hello
tmp=$(mktemp -d)
trap 'exec 3>&- 2>/dev/null; rm -rf "$tmp"' EXIT
pass=0
fail=0
skip=0

ok() { pass=$((pass + 1)); echo "ok   $1"; }
skipped() { skip=$((skip + 1)); echo "skip $1"; }
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

if [ "$mode" != long ]; then
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
# the ranks' host segments go in a directory of the run's own, removed with
# what a rank left there (a failing job included); a set OOBX_NODE_DIR is kept
check "OOBX_NODE_DIR: the run's own, mode 700" 0 '^\[1\] /dev/shm/oobx-run-[0-9]+-[0-9]+-[A-Za-z0-9]{6} 700$' out -- \
    -n 2 -- sh -c 'echo "$OOBX_NODE_DIR $(stat -c %a "$OOBX_NODE_DIR")"; touch "$OOBX_NODE_DIR/oobx-left-$OOBX_RANK"'
d=$(sed -n 's/^\[0\] \([^ ]*\) .*/\1/p' "$tmp/out")
if [ -n "$d" ] && [ ! -e "$d" ]; then ok "OOBX_NODE_DIR: removed with what was left in it"
else bad "OOBX_NODE_DIR: removed with what was left in it ($d)"; fi
check "OOBX_NODE_DIR: a failing job" 1 'failed ranks: 1 \(exit 5\)' err -- \
    -n 2 -- sh -c 'echo "$OOBX_NODE_DIR"; touch "$OOBX_NODE_DIR/x"; [ $OOBX_RANK = 1 ] && exit 5; sleep 30'
# rank 1's line: rank 0 may be ended before it prints (rank 1 fails at once)
d=$(sed -n 's/^\[1\] //p' "$tmp/out")
if [ -n "$d" ] && [ ! -e "$d" ]; then ok "OOBX_NODE_DIR: removed after a failure"
else bad "OOBX_NODE_DIR: removed after a failure ($d)"; fi
OOBX_NODE_DIR=/tmp check "OOBX_NODE_DIR kept when set" 0 '^\[0\] /tmp$' out -- -n 1 -- sh -c 'echo $OOBX_NODE_DIR'
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


# ---- several sub-launchers (small blocks stand in for big jobs) ----
check "blocks: every line" 0 '^\[9\] 9$' out -- -n 10 --ranks-per-launcher 3 -- sh -c 'echo $OOBX_RANK'
n=$(grep -Ec '^\[[0-9]\] [0-9]$' "$tmp/out")
if [ "$n" -eq 10 ]; then ok "blocks: 10 lines"; else bad "blocks: 10 lines ($n)"; fi
check "blocks: a failure in one ends the others" 1 '^oobx-run: ended by oobx-run: ranks 0-4,6-7$' err -- \
    -n 8 --ranks-per-launcher 2 -- sh -c '[ $OOBX_RANK = 5 ] && exit 3; sleep 30'
if grep -q '^oobx-run: failed ranks: 5 (exit 3)$' "$tmp/err" &&
    grep -q '^oobx-run: rank 5 exited with status 3; ending 7 other ranks$' "$tmp/err"; then
    ok "blocks: the failed rank named"
else bad "blocks: the failed rank named"; fi
check "blocks: deadline" 124 'deadline of 1 s passed; 3 ranks still running: 0,2-3' err -- \
    -n 4 --ranks-per-launcher 1 --timeout 1 -- sh -c '[ $OOBX_RANK = 1 ] && exit 0; sleep 30'
check "blocks: SIGKILL after the grace" 124 'sending SIGKILL: 0-1$' err -- \
    -n 2 --ranks-per-launcher 1 --timeout 0.5 -- sh -c 'trap "" TERM; sleep 30; sleep 30'

# ---- signals: forwarded as SIGTERM, status 128+n ----
"$run" -n 6 --ranks-per-launcher 2 -- sleep 30 >"$tmp/out" 2>"$tmp/err" &
top=$!
sleep 1
kill -INT $top
wait $top
got=$?
if [ "$got" -eq 130 ] && grep -q '^oobx-run: received SIGINT; ending 6 running ranks$' "$tmp/err" &&
    grep -q '^oobx-run: ended by oobx-run: ranks 0-5$' "$tmp/err"; then
    ok "SIGINT ends the ranks, exit 130"
else echo "     exit status $got"; bad "SIGINT ends the ranks, exit 130"; fi

# ---- the roots' sockets: listening in oobx-run, inherited by the host ranks only ----
# blocks of 7 ranks over 3 roots: 0-2, 3-4, 5-6
check "OOBX_ROOT_FD for the first rank of each block" 0 '' out -- -n 7 -r 3 -- sh -c \
    'n=0; for f in /proc/$$/fd/*; do case $(readlink $f) in socket:*) n=$((n + 1)) ;; esac; done
     echo "${OOBX_ROOT_FD:-none} $n"'
got=$(sort "$tmp/out" | sed 's/^\[\([0-9]\)\] [0-9][0-9]* 1$/\1 fd/; s/^\[\([0-9]\)\] none 0$/\1 none/' | tr '\n' ' ')
if [ "$got" = "0 fd 1 none 2 none 3 fd 4 none 5 fd 6 none " ]; then ok "one listening socket in ranks 0, 3, 5 and none elsewhere"
else echo "     got: $got"; bad "one listening socket in ranks 0, 3, 5 and none elsewhere"; fi
OOBX_ROOT_FD=99 check "a caller's OOBX_ROOT_FD does not reach other ranks" 0 '^\[1\] none$' out -- \
    -n 2 -- sh -c 'echo ${OOBX_ROOT_FD:-none}'

if [ -x "$hello" ]; then
    check "hello: 64 ranks, 4 roots handed over" 0 '^\[63\] rank 63 of 64 ' out -- \
        -n 64 -r 4 -t socket --timeout 120 -- "$hello"
    n=$(grep -Ec '^\[[0-9]+\] rank [0-9]+ of 64 over socket' "$tmp/out")
    if [ "$n" -eq 64 ]; then ok "hello: 64 ranks answered"; else bad "hello: 64 ranks answered ($n)"; fi
    check "hello: a root socket on another port is refused" 1 \
        'rank 0 cannot host root 0 at 127\.0\.0\.1:1: OOBX_ROOT_FD=[0-9]+ listens on 127\.0\.0\.1:[0-9]+, but OOBX_COMM_ID names 127\.0\.0\.1:1 for this root' \
        err -- -n 2 -t socket --timeout 60 -- sh -c "OOBX_COMM_ID=127.0.0.1:1 exec $hello"
    check "hello: OOBX_ROOT_FD that is no socket" 1 'OOBX_ROOT_FD=0 is not a socket .*expected a TCP socket listening on 127\.0\.0\.1:[0-9]+' \
        err -- -n 1 -t socket -- sh -c "OOBX_ROOT_FD=0 exec $hello"
    check "hello: OOBX_ROOT_FD on a rank that hosts no root" 1 'rank 1: OOBX_ROOT_FD=7 is set, but this rank hosts none' \
        err -- -n 2 -t socket -- sh -c "OOBX_ROOT_FD=\${OOBX_ROOT_FD:-7} exec $hello"
    check "hello: OOBX_ROOT_FD not a number" 1 'OOBX_ROOT_FD=x7 is not a file descriptor number' \
        err -- -n 1 -t socket -- sh -c "OOBX_ROOT_FD=x7 exec $hello"
else
    skipped "hello checks: $hello is not built (make $hello)"
fi

# ---- oobx-info and oobx-bench ----
info=$build/bin/oobx-info
bench=$build/bin/oobx-bench
if [ -x "$info" ]; then
    # fake sysfs trees of RDMA devices: one with an active port, one without
    mkdir -p "$tmp/rdma/fake0/ports/1" "$tmp/rdma/down0/ports/1" "$tmp/nordma/down0/ports/1"
    echo "4: ACTIVE" >"$tmp/rdma/fake0/ports/1/state"
    echo "1: DOWN" >"$tmp/rdma/down0/ports/1/state"
    echo "1: DOWN" >"$tmp/nordma/down0/ports/1/state"
    # no modules: auto passes over ucx and verbs, each with its reason, and takes socket
    env -u OOBX_TRANSPORT OOBX_RDMA_SYSFS="$tmp/rdma" OOBX_MODULE_DIR="$tmp/no-modules" "$info" >"$tmp/out" 2>"$tmp/err"
    if grep -q '^  OOBX_TRANSPORT=auto would use: socket$' "$tmp/out" &&
        grep -q '^    why: auto tries ucx, verbs, socket in turn' "$tmp/out" &&
        grep -Eq '^      ucx +not used: module .*liboobx-ucx\.so does not load' "$tmp/out" &&
        grep -Eq '^      socket +starts' "$tmp/out"; then ok "oobx-info: what auto would take, and why"
    else bad "oobx-info: what auto would take, and why"; fi
    env -u OOBX_TRANSPORT OOBX_RDMA_SYSFS="$tmp/rdma" "$info" >"$tmp/out" 2>"$tmp/err"
    if grep -Eq '^  OOBX_TRANSPORT=auto would use: (ucx|verbs|socket)$' "$tmp/out" &&
        grep -q "^    (RDMA devices with an active port in $tmp/rdma: fake0):" "$tmp/out" &&
        grep -Eq '^      (ucx|verbs|socket) +starts' "$tmp/out"; then ok "oobx-info: auto's choice with the built modules"
    else bad "oobx-info: auto's choice with the built modules"; fi
    # no active RDMA device: socket, whatever loads
    env -u OOBX_TRANSPORT OOBX_RDMA_SYSFS="$tmp/nordma" "$info" >"$tmp/out" 2>"$tmp/err"
    if grep -q '^  OOBX_TRANSPORT=auto would use: socket$' "$tmp/out" &&
        grep -q "^    why: no RDMA device with an active port in $tmp/nordma, so socket first" "$tmp/out"
    then ok "oobx-info: auto without an RDMA device takes socket"
    else bad "oobx-info: auto without an RDMA device takes socket"; fi
    # under a launcher: the whole job on this host takes socket first, with
    # more ranks than CPUs or as many; a job over two hosts keeps the order
    # where an RDMA device has an active port (the tree above), and takes
    # socket first where none has
    ncpu=$(getconf _NPROCESSORS_ONLN)
    one="auto takes socket first: the launcher puts all"
    env -u OOBX_TRANSPORT "$run" -n $((ncpu + 1)) -- "$info" >"$tmp/out" 2>"$tmp/err"
    if [ "$(grep -c "^\[[0-9]*\]     this job (oobx-run: $((ncpu + 1)) ranks, $((ncpu + 1)) on this host of $ncpu CPUs): $one $((ncpu + 1)) ranks on this host$" "$tmp/out")" -eq $((ncpu + 1)) ] &&
        env -u OOBX_TRANSPORT "$run" -n "$ncpu" -- "$info" >"$tmp/out" 2>"$tmp/err" &&
        [ "$(grep -c "^\[[0-9]*\]     this job (oobx-run: $ncpu ranks, $ncpu on this host of $ncpu CPUs): $one $ncpu ranks on this host$" "$tmp/out")" -eq "$ncpu" ] &&
        env -u OOBX_TRANSPORT OOBX_RDMA_SYSFS="$tmp/rdma" RANK=0 WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 \
            MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 "$info" >"$tmp/out" 2>"$tmp/err" &&
        grep -q "^    (RDMA devices with an active port in $tmp/rdma: fake0):$" "$tmp/out" &&
        grep -q "^    this job (torchrun: 4 ranks, 2 on this host of $ncpu CPUs): auto takes [a-z]*$" "$tmp/out" &&
        ! grep -q "auto takes socket first" "$tmp/out" &&
        env -u OOBX_TRANSPORT OOBX_RDMA_SYSFS="$tmp/nordma" RANK=0 WORLD_SIZE=4 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 \
            MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 "$info" >"$tmp/out" 2>"$tmp/err" &&
        grep -q "^    this job (torchrun: 4 ranks, 2 on this host of $ncpu CPUs): auto takes socket first: no RDMA device with an active port in $tmp/nordma: between hosts UCX would run over TCP$" "$tmp/out"
    then ok "oobx-info under a launcher: auto's choice for the job's shape"
    else bad "oobx-info under a launcher: auto's choice for the job's shape"; fi
    # init itself: ranks that the launcher places two a host (as srun would)
    # take socket first without an active RDMA device and say so; with one
    # they keep the order (ucx when its module loads)
    two_hosts='OOBX_LOCAL_SIZE=2 OOBX_LOCAL_RANK=$((OOBX_RANK % 2)) OOBX_HOST_ID=h$((OOBX_RANK / 2)) exec '"$hello"
    if [ -x "$hello" ]; then
        env -u OOBX_TRANSPORT OOBX_LOG_LEVEL=info OOBX_RDMA_SYSFS="$tmp/nordma" "$run" -n 4 -- sh -c "$two_hosts" >"$tmp/out" 2>"$tmp/err"
        st=$?
        if [ "$st" -eq 0 ] && [ "$(grep -c "transport socket (OOBX_TRANSPORT=auto: no RDMA device with an active port in $tmp/nordma: between hosts UCX would run over TCP)" "$tmp/err")" -eq 4 ]; then
            ok "auto over two hosts without RDMA: socket, and why"
        else echo "     exit status $st"; bad "auto over two hosts without RDMA: socket, and why"; fi
        if [ -e "$build/lib/oobx/liboobx-ucx.so" ] && [ "${OOBX_TEST_UCX:-}" != 0 ]; then
            env -u OOBX_TRANSPORT OOBX_LOG_LEVEL=info OOBX_RDMA_SYSFS="$tmp/rdma" UCX_TLS=tcp "$run" -n 4 -- sh -c "$two_hosts" >"$tmp/out" 2>"$tmp/err"
            st=$?
            if [ "$st" -eq 0 ] && [ "$(grep -c "transport ucx (OOBX_TRANSPORT=auto)$" "$tmp/err")" -eq 4 ] && ! grep -q "transport socket" "$tmp/err"; then
                ok "auto over two hosts with an active RDMA device: ucx"
            else echo "     exit status $st"; bad "auto over two hosts with an active RDMA device: ucx"; fi
        else skipped "auto over two hosts with an active RDMA device: the UCX module is not built"; fi
        # hosts that differ (an active RDMA device on the first only): auto
        # takes ucx there and socket on the second, the root refuses the
        # job, and every rank says so at once, with the way it went and
        # what to set (SIGTERM ignored: oobx-run must not end a rank first)
        mixed='trap "" TERM; OOBX_NODE_AWARE_MIN=2 OOBX_TIMEOUT_MS=30000 OOBX_LOCAL_SIZE=2 OOBX_LOCAL_RANK=$((OOBX_RANK % 2)) OOBX_HOST_ID=h$((OOBX_RANK / 2)) OOBX_RDMA_SYSFS='"$tmp"'/$([ $((OOBX_RANK / 2)) = 0 ] && echo rdma || echo nordma) exec '"$hello"
        if [ -e "$build/lib/oobx/liboobx-ucx.so" ] && [ "${OOBX_TEST_UCX:-}" != 0 ]; then
            t0=$(date +%s)
            env -u OOBX_TRANSPORT UCX_TLS=tcp "$run" -n 4 -- sh -c "$mixed" >"$tmp/out" 2>"$tmp/err"
            st=$? took=$(($(date +%s) - t0))
            cat "$tmp/out" "$tmp/err" >"$tmp/both"
            all=$(grep -c "init: .*set OOBX_TRANSPORT the same on every rank (this rank [0-3] took .*: set OOBX_TRANSPORT=socket, or ucx, on every rank)" "$tmp/both")
            ucx=$(grep -c "^\[[01]\] init: .*(this rank [01] took ucx (OOBX_TRANSPORT=auto);" "$tmp/both")
            sock=$(grep -c "^\[[23]\] init: .*(this rank [23] took socket (OOBX_TRANSPORT=auto: no RDMA device with an active port in $tmp/nordma" "$tmp/both")
            if [ "$st" -eq 1 ] && [ "$all" -eq 4 ] && [ "$ucx" -eq 2 ] && [ "$sock" -eq 2 ] && [ "$took" -le 10 ]; then
                ok "auto over hosts that differ in RDMA: every rank refused at once, saying which way it went"
            else
                echo "     exit status $st after $took s; $all of 4 ranks said why ($ucx ucx, $sock socket)"
                bad "auto over hosts that differ in RDMA: every rank refused at once, saying which way it went"
            fi
        else skipped "auto over hosts that differ in RDMA: the UCX module is not built"; fi
    else skipped "auto over two hosts: $hello is not built"; fi
    # -c lists the launcher settings with the others, values from the environment
    OOBX_LAUNCHER=slurm OOBX_RUN_KEY=k "$info" -c >"$tmp/out" 2>"$tmp/err"
    if grep -q '^OOBX_LAUNCHER=slurm    # set in the environment$' "$tmp/out" &&
        grep -q '^OOBX_SLURM_PORT_RANGE=' "$tmp/out" && grep -q '^OOBX_LAUNCH_RANKS_PER_ROOT=' "$tmp/out" &&
        ! grep -q 'misspelt' "$tmp/out"; then ok "oobx-info -c: the launcher settings"
    else bad "oobx-info -c: the launcher settings"; fi
else
    skipped "oobx-info checks: $info is not built"
fi
if [ -x "$bench" ]; then
    env -i PATH="$PATH" "$bench" --help >"$tmp/out" 2>"$tmp/err"
    got=$?
    if [ "$got" -eq 0 ] && grep -q '^usage: oobx-run -n N' "$tmp/out" && grep -q -- '--benchmark_filter' "$tmp/out"
    then ok "oobx-bench --help outside a launcher"
    else echo "     exit status $got"; bad "oobx-bench --help outside a launcher"; fi
    check "oobx-bench: 2 ranks, table and JSON" 0 '^\[0\] tcp_poll_pingpong/8 ' out -- -n 2 -t socket --timeout 120 -- \
        "$bench" --sizes=8 --batches=2 --batch-ms=1 --max-inner=1000 \
        --benchmark_filter='^(allgather|pingpong|tcp_pingpong|tcp_poll_pingpong)/' \
        --benchmark_out="$tmp/bench.json" --benchmark_out_format=json
    # plain units: µs or ms and GB/s, never Google Benchmark's suffixes (479.012u, 1.2k)
    if grep -Eq '^\[0\] allgather/8 .* (µs|ms) .* GB/s' "$tmp/out" &&
        ! grep -Eq '[0-9][munkMG]( |$)' "$tmp/out"; then ok "oobx-bench: the table has plain units"
    else bad "oobx-bench: the table has plain units"; fi
    if python3 - "$tmp/bench.json" >"$tmp/err" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert isinstance(d["context"]["ranks"], int) and isinstance(d["context"]["batches"], int), d["context"]
names = set()
for b in d["benchmarks"]:
    for k in ("real_time", "cpu_time", "iterations", "ops", "lat_us", "cpu_us"):
        assert isinstance(b[k], (int, float)) and not isinstance(b[k], bool), (b["name"], k, b[k])
    assert b["time_unit"] == "us" and b["real_time"] > 0 and b["cpu_time"] > 0, b
    assert abs(b["cpu_time"] - b["cpu_us"]) < 1e-6 * max(1, b["cpu_us"]), b
    # per operation: a batch of operations costs far more CPU than one does
    assert b["cpu_time"] < 50 * b["real_time"], b
    names.add(b["name"].split("/")[0])
assert names == {"allgather", "pingpong", "tcp_pingpong", "tcp_poll_pingpong"}, names
PY
    then ok "oobx-bench: JSON numbers, per-operation cpu_time, both raw TCP ping-pongs"
    else sed 's/^/     | /' "$tmp/err" | head -5; bad "oobx-bench: JSON numbers, per-operation cpu_time, both raw TCP ping-pongs"; fi
else
    skipped "oobx-bench checks: $bench is not built (Google Benchmark missing: sh tools/install-deps.sh bench)"
fi

# ---- emulated hosts ----
check "usage: --hosts with --ipv6" 2 'do not go together' err -- -n 2 --hosts 2 --ipv6 true
check "usage: more hosts than ranks" 2 'more than the 2 ranks' err -- -n 2 --hosts 3 true
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null 2>&1 || ! ip netns list >/dev/null 2>&1; then
    skipped "--hosts checks: they need root and a working 'ip netns' (iproute2)"
else
    # a namespace left by an oobx-run that was killed (a pid that cannot exist)
    ip netns add oobx-run-99999999.1-h0 2>/dev/null
    check "--hosts: ranks in their hosts' namespaces" 0 '' out -- -n 8 --hosts 4 -- sh -c \
        'echo "$OOBX_COMM_ID $OOBX_SOCKET_IFNAME $(ip -4 -o addr show dev oobx0 | sed "s/.* inet \([^ ]*\) .*/\1/") $(readlink /proc/self/ns/net)"'
    got=$(sed -n 's/^\[\([0-9]\)\] 10\.77\.0\.1:[0-9]* oobx0 \(10\.77\.0\.[0-9]\/16\) .*/\1 \2/p' "$tmp/out" | sort | tr '\n' ' ')
    nets=$(sed 's/.* //' "$tmp/out" | sort -u | wc -l)
    if [ "$got" = "0 10.77.0.1/16 1 10.77.0.1/16 2 10.77.0.2/16 3 10.77.0.2/16 4 10.77.0.3/16 5 10.77.0.3/16 6 10.77.0.4/16 7 10.77.0.4/16 " ] &&
        [ "$nets" -eq 4 ]; then
        ok "--hosts: two ranks a host, four namespaces, root on 10.77.0.1"
    else echo "     got: $got; $nets namespaces"; bad "--hosts: two ranks a host, four namespaces, root on 10.77.0.1"; fi
    if grep -q 'removed 1 network namespace left by an oobx-run that is gone' "$tmp/err" &&
        ! ip netns list | grep -q '^oobx-run-99999999\.'; then ok "--hosts: a stale namespace removed"
    else bad "--hosts: a stale namespace removed"; fi
    if [ -x "$hello" ]; then
        check "--hosts 4: hello, 64 ranks, 4 roots" 0 '^\[63\] rank 63 of 64 ' out -- \
            -n 64 -r 4 --hosts 4 -t socket --timeout 120 -- "$hello"
        n=$(grep -Ec '^\[[0-9]+\] rank [0-9]+ of 64 over socket' "$tmp/out")
        if [ "$n" -eq 64 ]; then ok "--hosts 4: 64 ranks answered"; else bad "--hosts 4: 64 ranks answered ($n)"; fi
    fi
    check "--hosts: a failing rank" 1 '^oobx-run: failed ranks: 3 \(exit 4\)$' err -- \
        -n 4 --hosts 2 -- sh -c '[ $OOBX_RANK = 3 ] && exit 4; sleep 30'
    left=$(ip netns list | sed -n 's/^\(oobx-run-\([0-9]*\)\.[^ ]*\).*/\2 \1/p' |
        while read -r pid name; do kill -0 "$pid" 2>/dev/null || echo "$name"; done)
    if [ -n "$left" ]; then
        echo "$left" | sed 's/^/     | /'
        bad "--hosts: no namespace left behind"
    else ok "--hosts: no namespace left behind"; fi
fi
fi

# ---- big jobs ----

# children PID: the sub-launchers of oobx-run PID
children() {
    if [ -r "/proc/$1/task/$1/children" ]; then cat "/proc/$1/task/$1/children"
    else ps -o pid= --ppid "$1"; fi
}
nfds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }

# big_lines N: N shell ranks that stay up until every one has printed its
# line (each then reads one line of a fifo the test fills), while the open
# descriptors of oobx-run and of its sub-launchers are sampled. Sets
# big_rc, top_fds, sub_fds, big_s.
big_lines() {
    N=$1
    rm -f "$tmp/go"
    mkfifo "$tmp/go"
    exec 3<>"$tmp/go" # a writer from the start: the ranks' opens never block
    t0=$(date +%s)
    "$run" -n "$N" --timeout 1200 -- sh -c "echo \$OOBX_RANK; read x <$tmp/go" >"$tmp/out" 2>"$tmp/err" &
    top=$!
    top_fds=0 sub_fds=0 fed=0
    while kill -0 $top 2>/dev/null; do
        v=$(nfds $top)
        [ "$v" -gt "$top_fds" ] && top_fds=$v
        for s in $(children $top); do
            v=$(nfds "$s")
            [ "$v" -gt "$sub_fds" ] && sub_fds=$v
        done
        if [ "$fed" -eq 0 ] && [ "$(wc -l <"$tmp/out")" -ge "$N" ]; then
            # every rank is up (the descriptors were just sampled): release them
            seq "$N" >&3
            fed=1
        fi
        sleep 0.5
    done
    wait $top
    big_rc=$?
    exec 3>&-
    big_s=$(($(date +%s) - t0))
}

check_big_lines() {
    N=$1
    big_lines "$N"
    n=$(grep -Ec '^\[[0-9]+\] [0-9]+$' "$tmp/out")
    u=$(sed 's/ .*//' "$tmp/out" | sort -u | wc -l)
    if [ "$big_rc" -eq 0 ] && [ "$n" -eq "$N" ] && [ "$u" -eq "$N" ]; then ok "$N shell ranks, every line (${big_s} s)"
    else echo "     exit status $big_rc, $n lines, $u ranks"; bad "$N shell ranks, every line"; fi
    # the top holds two pipes a sub-launcher, a sub-launcher two a rank (at most 1000)
    if [ "$top_fds" -gt 0 ] && [ "$top_fds" -le 64 ] && [ "$sub_fds" -le 2064 ]; then
        ok "$N ranks: open files at most $top_fds in oobx-run, $sub_fds in a sub-launcher"
    else bad "$N ranks: open files at most $top_fds in oobx-run (<= 64), $sub_fds in a sub-launcher (<= 2064)"; fi
}

if [ "$mode" != long ]; then
    check_big_lines 4096
    # rank 2460 is among the first of the fourth of five sub-launchers: the
    # job ends while most ranks are not started yet, and at once
    t0=$(date +%s)
    check "a failure among 4096 ranks" 1 '^oobx-run: failed ranks: 2460 \(exit 3\)$' err -- \
        -n 4096 -- sh -c '[ $OOBX_RANK = 2460 ] && exit 3; exec sleep 120'
    if grep -q '^oobx-run: rank 2460 exited with status 3; ending 4095 other ranks$' "$tmp/err" &&
        grep -Eq '^oobx-run: ended by oobx-run: ranks 0-' "$tmp/err" &&
        grep -Eq '^oobx-run: not started: ranks [0-9]' "$tmp/err" &&
        [ $(($(date +%s) - t0)) -lt 60 ]; then ok "4096 ranks: the others ended ($(($(date +%s) - t0)) s)"
    else bad "4096 ranks: the others ended"; fi
else
    check_big_lines 10240
    if [ -x "$hello" ]; then
        t0=$(date +%s)
        OOBX_TIMEOUT_MS=${OOBX_TIMEOUT_MS:-1700000} check "hello: 10240 ranks, 16 roots" 0 '^\[10239\] rank 10239 of 10240 ' out -- \
            -n 10240 -r 16 -t socket --timeout 1800 -- "$hello"
        n=$(grep -Ec '^\[[0-9]+\] rank [0-9]+ of 10240 over socket' "$tmp/out")
        if [ "$n" -eq 10240 ]; then ok "hello: 10240 ranks answered ($(($(date +%s) - t0)) s)"
        else bad "hello: 10240 ranks answered ($n)"; fi
    else
        skipped "hello: $hello is not built"
    fi
fi
echo "oobx-run: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
