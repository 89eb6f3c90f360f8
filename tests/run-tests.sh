#!/usr/bin/env bash
# Runs every test suite of one build and prints the aggregate line
#   tests: N passed, N failed, N skipped
# last, alone on its line. Exit status 1 when anything failed.
#
#   bash tests/run-tests.sh BUILD_DIR check|check-san|long
#
# check      unit tests, fuzz regression over the corpus, the transport
#            contract (socket; ucx under UCX_TLS=tcp and posix,self when
#            liboobx-ucx.so is built, unless OOBX_TEST_UCX=0; verbs on the
#            emulated device when liboobx-verbs.so is built and the host has no
#            RDMA device, unless OOBX_TEST_VERBS=0), the conformance
#            suite once per transport variant (sockets also with every wait
#            polling first, OOBX_SPIN_US=20, up to 16 ranks; UCX over tcp and over shared
#            memory when liboobx-ucx.so is built, unless OOBX_TEST_UCX=0; UCX's
#            default transports in long), the fault suite (also over the
#            three UCX variants, unless OOBX_TEST_UCX=0); both suites over
#            verbs when liboobx-verbs.so is built (on the emulated device when
#            the host has no RDMA device; OOBX_TEST_VERBS=0 leaves them out)
#            and the quiet check (tests/quiet: clean runs print nothing on
#            stderr, and no UCX log line in the UCX conformance logs)
# check-san  the same at OOBX_TEST_SCALE=small (for SAN=address|undefined builds)
# long       the conformance and fault suites at OOBX_TEST_SCALE=long
#
# Every suite runs under a deadline (timeout); network traffic stays on
# loopback: OOBX_SOCKET_IFNAME=lo, UCX_NET_DEVICES=lo.
set -u
cd "$(dirname "$0")/.."

build=${1:-build}
mode=${2:-check}
# OOBX_TEST_LANES=2 (the default of check and check-san): the fault suites
# run in two lanes side by side after the others; 1: one suite at a time
# (long always)
lanes=${OOBX_TEST_LANES:-2}
[ "$mode" = long ] && lanes=1
case "$lanes" in 1|2) ;; *) echo "run-tests.sh: OOBX_TEST_LANES must be 1 or 2, not '$lanes'" >&2; exit 2 ;; esac
case "$mode" in
    check) scale=normal ;;
    check-san) scale=small ;;
    long) scale=long ;;
    *) echo "run-tests.sh: unknown mode '$mode' (check, check-san or long)" >&2; exit 2 ;;
esac

export OOBX_SOCKET_IFNAME=lo
export UCX_NET_DEVICES=lo
export OOBX_TEST_SCALE=$scale
# leak reports and UB stop the program: they count as failures
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
unset OOBX_COMM_ID OOBX_RANK OOBX_NRANKS OOBX_TRANSPORT UCX_TLS

logdir=$build/tests/logs
mkdir -p "$logdir"
# one run per build directory at a time: two runs would share the logs and
# the ports of the machine
exec 9>"$logdir/.lock"
if command -v flock >/dev/null 2>&1 && ! flock -n 9; then
    echo "run-tests.sh: another test run of $build is in progress; waiting for it" >&2
    flock 9
fi
total_pass=0 total_fail=0 total_skip=0
failed_suites=()
started=$(date +%s)

# count LOG STATUS: sets p f s from a cmocka log (or from the exit status)
count() {
    local log=$1 st=$2
    read -r p f s run < <(awk '
        # stdout and stderr of cmocka may interleave: match anywhere in a line
        function num(re,   m) { if (match($0, re)) { m = substr($0, RSTART, RLENGTH); gsub(/[^0-9]/, "", m); return m + 0 } return -1 }
        { n = num("\\[==========\\] Running [0-9]+ test"); if (n >= 0) running += n }
        /\[==========\] [0-9]+ test\(s\) run\./ { summaries++ }
        { n = num("\\[  PASSED  \\] [0-9]+ test\\(s\\)\\."); if (n >= 0) sp += n }
        { n = num("\\[  FAILED  \\] [0-9]+ test\\(s\\), listed below:"); if (n >= 0) sf += n }
        { n = num("\\[  SKIPPED \\] [0-9]+ test\\(s\\), listed below:"); if (n >= 0) ss += n }
        /\[       OK \] / { ok++ }
        /\[  SKIPPED \] / && !/test\(s\), listed below:/ { sk++ }
        END {
            if (running == 0) { print -1, -1, -1, 0; exit }
            if (summaries > 0) { print sp + 0, sf + 0, ss + 0, running; exit }
            # no summary: the program died or ran out of time
            f = running - ok - sk; if (f < 1) f = 1
            print ok + 0, f, sk + 0, running
        }' "$log")
    if [ "$p" = -1 ]; then
        # not a cmocka program: one test, judged by its exit status
        if [ "$st" -eq 0 ]; then p=1 f=0 s=0; else p=0 f=1 s=0; fi
    elif [ "$st" -ne 0 ] && [ "$f" -eq 0 ]; then
        # everything passed but the program failed afterwards (sanitizer report at exit)
        f=1
    fi
}

# suite NAME DEADLINE_S [VAR=value...] -- PROGRAM ARGS...
suite() {
    local name=$1 deadline=$2
    shift 2
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local log=$logdir/$name.log
    local t0
    t0=$(date +%s)
    echo
    echo "==== $name ${envs[*]}"
    env "${envs[@]}" timeout -k 10 "$deadline" "$@" 2>&1 | tee "$log"
    local st=${PIPESTATUS[0]}
    if [ "$st" -eq 124 ] || [ "$st" -eq 137 ]; then
        echo "==== $name: still running after $deadline s: stopped" | tee -a "$log"
    fi
    count "$log" "$st"
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    total_skip=$((total_skip + s))
    [ "$f" -gt 0 ] && failed_suites+=("$name")
    echo "==== $name: $p passed, $f failed, $s skipped in $(( $(date +%s) - t0 )) s (exit $st, log $log)"
}

# the fault suite over every transport; LANE a (sockets, UCX over shared
# memory), b (UCX over TCP, verbs) or all
fault_suites() {
    local lane=$1
    if [ ! -x "$fault" ]; then
        [ "$lane" = b ] && return
        echo "==== fault: $fault not built"
        total_fail=$((total_fail + 1))
        failed_suites+=(fault-missing)
        return
    fi
    local ucx=0
    [ -e "$build/lib/oobx/liboobx-ucx.so" ] && [ "${OOBX_TEST_UCX:-}" != 0 ] && ucx=1
    if [ "$lane" != b ]; then
        suite fault-socket "$fault_deadline" OOBX_TRANSPORT=socket -- "$fault"
        suite fault-socket-node "$fault_deadline" OOBX_TRANSPORT=socket OOBX_NODE_AWARE_MIN=2 \
            "OOBX_TEST_FILTER=test_kill_*" -- "$fault"
        [ $ucx = 1 ] && suite fault-ucx-shm "$fault_deadline" OOBX_TRANSPORT=ucx UCX_TLS=posix,self -- "$fault"
        # UCX's own choice (shared memory and tcp together, each run above
        # alone): in long, with the conformance suite under it
        [ $ucx = 1 ] && [ "$mode" = long ] && suite fault-ucx-default "$fault_deadline" OOBX_TRANSPORT=ucx -- "$fault"
    fi
    if [ "$lane" != a ]; then
        [ $ucx = 1 ] && suite fault-ucx-tcp "$fault_deadline" OOBX_TRANSPORT=ucx UCX_TLS=tcp -- "$fault"
        [ -n "$verbs_name" ] && suite "fault-$verbs_name" "$fault_deadline" "${verbs_env[@]}" -- "$fault"
    fi
    return 0
}

main() {
# the verbs transport: on a real RDMA device when the host has one, else on
# the emulated device (verbs/emu/, preloaded in front of libibverbs/librdmacm)
verbs_name= verbs_env=() verbs_preload=
if [ -e "$build/lib/oobx/liboobx-verbs.so" ] && [ "${OOBX_TEST_VERBS:-}" != 0 ]; then
    if compgen -G "/sys/class/infiniband/*" >/dev/null; then
        verbs_name=verbs verbs_env=(OOBX_TRANSPORT=verbs)
    elif [ -e "$build/tests/verbs-emu/liboobx-verbs-emu.so" ]; then
        verbs_name=verbs-emu
        preload=$(cd "$build/tests/verbs-emu" && pwd)/liboobx-verbs-emu.so
        # a sanitizer runtime must come first in the list of preloaded objects
        san_rt=$(ldd "$build/lib/liboobx.so" 2>/dev/null | awk '/lib(a|ub|t)san\.so/ { print $3; exit }')
        [ -n "$san_rt" ] && preload="$san_rt:$preload"
        verbs_preload=$preload
        verbs_env=(OOBX_TRANSPORT=verbs "LD_PRELOAD=$preload")
    fi
fi

conf=$build/tests/conformance/conformance
fault=$build/tests/fault/fault
case "$mode" in
    long) conf_deadline=3000; fault_deadline=3000 ;;
    *) conf_deadline=900; fault_deadline=600 ;;
esac
if [ "$mode" != long ]; then
    for t in "$build"/tests/unit/test_*; do
        [ -x "$t" ] || continue
        suite "unit-$(basename "$t")" 300 -- "$t"
    done
    for t in "$build"/tests/fuzz/regress_*; do
        [ -x "$t" ] || continue
        target=${t##*/regress_}
        suite "fuzz-regress-$target" 120 -- "$t" "tests/fuzz/corpus/$target"
    done

    # the transport contract (tests/contract): every transport through the ops
    # the core loads (ucx and verbs: the module files of this build)
    contract=$build/tests/contract/test_tp_contract
    case "$mode" in
        check-san) contract_deadline=600 ;;
        *) contract_deadline=300 ;;
    esac
    if [ -x "$contract" ]; then
        suite contract-socket "$contract_deadline" OOBX_TEST_TP=socket -- "$contract"
        if [ -e "$build/lib/oobx/liboobx-ucx.so" ] && [ "${OOBX_TEST_UCX:-}" != 0 ]; then
            suite contract-ucx-tcp "$contract_deadline" OOBX_TEST_TP=ucx UCX_TLS=tcp -- "$contract"
            suite contract-ucx-shm "$contract_deadline" OOBX_TEST_TP=ucx UCX_TLS=posix,self -- "$contract"
            # the receiver's pulls (off by default): their tickets after a failed call
            suite contract-ucx-pull "$contract_deadline" OOBX_TEST_TP=ucx OOBX_UCX_PULL=1 "OOBX_TEST_FILTER=test_release*" -- "$contract"
            # small messages by rendezvous: the posted receives complete out of
            # order, the records begin in the senders' order all the same
            suite contract-ucx-rndv "$contract_deadline" OOBX_TEST_TP=ucx UCX_TLS=posix,self UCX_RNDV_THRESH=256 -- "$contract"
        fi
        # on the emulated device only: the cases run every rank on this host
        if [ "$verbs_name" = verbs-emu ]; then
            suite contract-verbs-emu "$contract_deadline" OOBX_TEST_TP=verbs "LD_PRELOAD=$verbs_preload" -- "$contract"
        fi
    else
        echo "==== contract: $contract not built"
        total_fail=$((total_fail + 1))
        failed_suites+=(contract-missing)
    fi
fi

# the library as shipped: symbols, soname, modules, install (not for sanitizer builds)
if [ "$mode" = check ]; then
    suite abi-install 600 -- bash tests/abi/check-abi.sh "$build"
fi
# the node-aware bootstrap at 1..2048 ranks, on one host and on emulated hosts (10,240 in long)
case "$mode" in
    check) suite scale 900 -- bash tests/scale/check-scale.sh "$build" ;;
    long) suite scale-long 2400 -- bash tests/scale/check-scale.sh "$build" long ;;
esac

quiet_logs=()
if [ -x "$conf" ]; then
    suite conformance-socket "$conf_deadline" OOBX_TRANSPORT=socket -- "$conf"
    # the node-aware bootstrap and allgather at every size (by default from 128 ranks)
    suite conformance-socket-node "$conf_deadline" OOBX_TRANSPORT=socket OOBX_NODE_AWARE_MIN=2 -- "$conf"
    # every wait polls first (on 2 cores the adaptive window is on for 2 ranks
    # only): the paths of a polling rank with several peers, such as the
    # socket transport's polled connection out of its epoll set
    if [ "$mode" = check ]; then
        suite conformance-socket-polling "$conf_deadline" OOBX_TRANSPORT=socket OOBX_SPIN_US=20 OOBX_TEST_MAX_RANKS=16 -- "$conf"
    fi
    if [ -e "$build/lib/oobx/liboobx-ucx.so" ] && [ "${OOBX_TEST_UCX:-}" = 0 ]; then
        echo
        echo "==== conformance-ucx: OOBX_TEST_UCX=0: skipped"
        total_skip=$((total_skip + 1))
    elif [ -e "$build/lib/oobx/liboobx-ucx.so" ]; then
        ucx_max=${OOBX_TEST_UCX_MAX_RANKS:-64}
        # UCX's tcp at 64 ranks on a small host is slow (4,032 connections
        # for p2p_alltoall_n64 alone) and adds no path that 16 ranks and the
        # quiet suite's 64 do not take: 64 in long
        tcp_max=$ucx_max
        [ "$mode" = long ] || tcp_max=${OOBX_TEST_UCX_TCP_MAX_RANKS:-16}
        suite conformance-ucx-tcp "$conf_deadline" OOBX_TRANSPORT=ucx UCX_TLS=tcp OOBX_TEST_MAX_RANKS="$tcp_max" -- "$conf"
        suite conformance-ucx-shm "$conf_deadline" OOBX_TRANSPORT=ucx UCX_TLS=posix,self OOBX_TEST_MAX_RANKS="$ucx_max" -- "$conf"
        quiet_logs+=("$logdir/conformance-ucx-tcp.log" "$logdir/conformance-ucx-shm.log")
        # UCX's own choice of transports (shared memory and tcp here): the
        # conformance and fault suites in long
        if [ "$mode" = long ]; then
            suite conformance-ucx-default "$conf_deadline" OOBX_TRANSPORT=ucx OOBX_TEST_MAX_RANKS="$ucx_max" -- "$conf"
            quiet_logs+=("$logdir/conformance-ucx-default.log")
        fi
    else
        echo
        echo "==== conformance-ucx: $build/lib/oobx/liboobx-ucx.so not built (UCX not found): skipped"
        total_skip=$((total_skip + 1))
    fi
    if [ -n "$verbs_name" ]; then
        # the emulated device carries every verb over loopback TCP: 16 ranks
        # outside long, as UCX's tcp (a real device: 64)
        verbs_max=64
        [ "$verbs_name" = verbs-emu ] && [ "$mode" != long ] && verbs_max=16
        suite "conformance-$verbs_name" "$conf_deadline" "${verbs_env[@]}" \
            OOBX_TEST_MAX_RANKS="${OOBX_TEST_VERBS_MAX_RANKS:-$verbs_max}" -- "$conf"
    fi
else
    echo "==== conformance: $conf not built"
    total_fail=$((total_fail + 1))
    failed_suites+=(conformance-missing)
fi
if [ "$lanes" -ge 2 ]; then
    # the fault suites wait on timeouts and deaths more than they compute:
    # two lanes of them side by side, each lane's output shown when both end
    for lane in a b; do
        rm -f "$logdir/.fault-$lane.out" "$logdir/.fault-$lane.counts" # a lane that dies counts as failed
        (
            total_pass=0 total_fail=0 total_skip=0 failed_suites=()
            fault_suites "$lane" > "$logdir/.fault-$lane.out" 2>&1
            echo "$total_pass $total_fail $total_skip ${failed_suites[*]}" > "$logdir/.fault-$lane.counts"
        ) &
    done
    wait
    for lane in a b; do
        cat "$logdir/.fault-$lane.out"
        lp=0 lf=1 ls=0 lfailed="fault-lane-$lane"
        [ -s "$logdir/.fault-$lane.counts" ] && read -r lp lf ls lfailed < "$logdir/.fault-$lane.counts"
        total_pass=$((total_pass + lp)) total_fail=$((total_fail + lf)) total_skip=$((total_skip + ls))
        [ -n "${lfailed:-}" ] && failed_suites+=($lfailed)
    done
else
    fault_suites all
fi

# clean runs print nothing: oobx-demo over every transport, and no line from
# UCX's log in this run's UCX conformance logs
if [ "$mode" != long ]; then
    suite quiet 600 -- bash tests/quiet/check-quiet.sh "$build" "${quiet_logs[@]}"
fi

# what each failed suite said, so that the end of the output shows why
for name in "${failed_suites[@]}"; do
    [ -f "$logdir/$name.log" ] || continue
    echo
    echo "==== why $name failed (from $logdir/$name.log)"
    grep -E '^ERROR: |\[  (ERROR|FAILED) +\]|\[   LINE   \]|runtime error:|ERROR: (Address|Leak)Sanitizer|still running after' \
        "$logdir/$name.log" | grep -v 'listed below' | cut -c1-600 | head -40
done

echo
echo "==== $mode of $build in $(( $(date +%s) - started )) s${failed_suites[*]:+; failed: ${failed_suites[*]}}"
echo "tests: $total_pass passed, $total_fail failed, $total_skip skipped"
[ "$total_fail" -eq 0 ]
}

# the whole file is read before anything runs
main "$@"
exit $?
