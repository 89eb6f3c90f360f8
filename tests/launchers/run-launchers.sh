#!/usr/bin/env bash
# make test-launchers: oobx jobs started by real launchers with no OOBX_*
# variable set. Starts a single-node Slurm (munged, slurmctld, slurmd; each
# stopped by its pid at the end, also on failure) and runs launch-check (a
# quick conformance subset, every rank's line checked) and oobx-demo under
# mpirun, mpiexec.hydra, srun, srun --mpi=pmix, sbatch + mpirun, sbatch +
# mpiexec, srun -n 1 + a torchrun-style loop, oobx-run and a plain-environment
# loop; then a second communicator under mpirun and mpiexec, and srun with
# its Slurm port taken; and mpiexec.hydra, mpirun and a two-node Slurm (a
# slurmd per node) on two emulated nodes (network namespaces). A job past its
# deadline fails naming the ranks that did not finish. Every command of
# docs/launchers.md is one of these.
#   bash tests/launchers/run-launchers.sh BUILD
set -uo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
check="$root/$build/tests/launchers/launch-check"
demo="$root/$build/bin/oobx-demo"
for v in $(compgen -e | grep '^OOBX_' || true); do unset "$v"; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
deadline=60
started=$(date +%s)
work=$(mktemp -d /tmp/oobx-launchers.XXXXXX)
chmod 755 "$work"
pids=()
n_pass=0
n_fail=0
n_skip=0

# the namespaces of the emulated nodes, and what a failed run left in them
# (a slurmstepd, a rank), each process by its pid
nodes_down() {
    local ns p
    for ns in "${netns[@]}"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    netns=()
}
netns=()

# stop_daemons [FROM]: the daemons of pids from index FROM (0) on, newest first
stop_daemons() {
    local i from=${1:-0}
    for ((i = ${#pids[@]} - 1; i >= from; i--)); do
        kill "${pids[$i]}" 2>/dev/null && wait "${pids[$i]}" 2>/dev/null
    done
    pids=("${pids[@]:0:from}")
}
trap 'stop_daemons; nodes_down; rm -rf "$work"' EXIT

# ---- Slurm -----------------------------------------------------------------------
# slurm_conf DIR CONTROLLER NODE...: DIR/slurm.conf of a cluster whose
# slurmctld is SlurmctldHost=CONTROLLER and whose nodes are the NodeName
# lines NODE ("name [NodeAddr=...]"), one partition of them all. Each
# daemon's files are under DIR, a slurmd's by its node name (%n: spool,
# pid, log, and TmpFS, where the PMIx plugin makes its step directories)
slurm_conf() {
    local dir=$1 ctl=$2 node names=""
    shift 2
    mkdir -p "$dir/state"
    {
        cat <<CONF
ClusterName=oobxtest
SlurmctldHost=$ctl
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
TmpFS=$dir/tmp-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldPort=16817
SlurmdPort=16818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/linear
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
CONF
        for node in "$@"; do
            echo "NodeName=$node CPUs=16 State=UNKNOWN"
            names="$names${names:+,}${node%% *}"
        done
        echo "PartitionName=debug Nodes=$names Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
    } >"$dir/slurm.conf"
}

# slurm_start DIR CTL_NETNS NODE[:NETNS]...: slurmctld of DIR/slurm.conf (in
# network namespace CTL_NETNS; "": here) and a slurmd per NODE (with NETNS:
# as Slurm node NODE inside it, through slurm-node; else here), each by its
# pid in pids
slurm_start() {
    local dir=$1 ctl=() spec node
    [ -n "$2" ] && ctl=(ip netns exec "$2")
    shift 2
    "${ctl[@]}" slurmctld -D -f "$dir/slurm.conf" >"$dir/slurmctld.out" 2>&1 &
    pids+=($!)
    for spec in "$@"; do
        node=${spec%%:*}
        mkdir -p "$dir/spool-$node" "$dir/tmp-$node"
        if [ "$node" = "$spec" ]; then
            slurmd -D -f "$dir/slurm.conf" >"$dir/slurmd-$node.out" 2>&1 &
        else
            "$work/slurm-node" "$dir/hosts" "${spec#*:}" "$node" slurmd -D -N "$node" -f "$dir/slurm.conf" \
                >"$dir/slurmd-$node.out" 2>&1 &
        fi
        pids+=($!)
    done
}

# slurm_up DIR N [PREFIX...]: DIR's cluster has its N nodes up within 30 s
# (sinfo run under PREFIX); else says so, with the daemons' last lines
slurm_up() {
    local dir=$1 n=$2 _
    shift 2
    for _ in $(seq 100); do
        [ "$(SLURM_CONF="$dir/slurm.conf" "$@" sinfo -h -N -o %T 2>/dev/null | grep -cE '^(idle|mixed|allocated)$')" \
            -eq "$n" ] && return 0
        sleep 0.3
    done
    echo "==== Slurm ($dir/slurm.conf) did not have its $n node(s) up within 30 s:"
    tail -n 5 "$dir/slurmctld.log" "$dir"/slurmd-*.log "$work/munged.err" 2>/dev/null | sed 's/^/    /'
    return 1
}

# ---- a single-node Slurm -------------------------------------------------------
host=$(hostname -s)
export SLURM_CONF="$work/slurm.conf"
mkdir -p /run/munge /var/lib/munge /var/log/munge
munged -F --force --socket="$work/munge.socket" --pid-file="$work/munged.pid" --log-file="$work/munged.log" \
    --seed-file="$work/munge.seed" 2>"$work/munged.err" &
pids+=($!)
for _ in $(seq 50); do [ -S "$work/munge.socket" ] && break; sleep 0.1; done
slurm_conf "$work" "$host" "$host"
slurm_start "$work" "" "$host"
if ! slurm_up "$work" 1; then
    echo "tests: 0 passed, 1 failed, 0 skipped"
    exit 1
fi
echo "==== single-node Slurm up on $host in $(($(date +%s) - started)) s (munged, slurmctld, slurmd: pids ${pids[*]})"

# ---- the jobs ---------------------------------------------------------------------
# verdict NAME N LOG RC: every rank's "ok" line present, else the ranks that
# are not; with JOB_WANT set, also exactly JOB_WANT_N (default 1) lines that
# match the extended regular expression JOB_WANT
verdict() {
    local name=$1 n=$2 log=$3 rc=$4 missing="" r got=0 want_n=${JOB_WANT_N:-1}
    for ((r = 0; r < n; r++)); do
        grep -q "^launch-check: rank $r of $n ok" "$log" || missing="$missing $r"
    done
    [ -n "${JOB_WANT:-}" ] && got=$(grep -cE -- "$JOB_WANT" "$log")
    if [ -z "$missing" ] && [ "$rc" -eq 0 ] && { [ -z "${JOB_WANT:-}" ] || [ "$got" -eq "$want_n" ]; }; then
        echo "PASS $name ($n ranks ok)"
        n_pass=$((n_pass + 1))
        return
    fi
    n_fail=$((n_fail + 1))
    if [ "$rc" -eq 124 ]; then echo "FAIL $name: deadline of $deadline s passed; ranks not done:$missing"
    elif [ -n "$missing" ] || [ "$rc" -ne 0 ]; then
        echo "FAIL $name: exit status $rc; ranks without their ok line:${missing:- none}"
    else echo "FAIL $name: $got lines match \"$JOB_WANT\", want $want_n"; fi
    grep -v '^launch-check: rank .* ok' "$log" | tail -15 | sed 's/^/    /'
}

# job NAME N COMMAND...: launch-check under COMMAND
job() {
    local name=$1 n=$2 log="$work/job-$((n_pass + n_fail)).log" rc
    shift 2
    if [ "$(type -t "$1")" = function ]; then
        ( export -f "$1"; export work; timeout -k 5 "$deadline" bash -c '"$@"' _ "$@" ) >"$log" 2>&1
    else
        timeout -k 5 "$deadline" "$@" >"$log" 2>&1
    fi
    rc=$?
    verdict "$name" "$n" "$log" "$rc"
}

# demo NAME COMMAND...: oobx-demo under COMMAND, every rank's exit status through the launcher
demo_job() {
    local name=$1 log="$work/demo-$((n_pass + n_fail)).log" rc
    shift
    timeout -k 5 "$deadline" "$@" >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q 'barrier, 200 calls' "$log"; then
        echo "PASS $name (oobx-demo)"
        n_pass=$((n_pass + 1))
    else
        n_fail=$((n_fail + 1))
        echo "FAIL $name (oobx-demo): exit status $rc$([ $rc -eq 124 ] && echo ", deadline of $deadline s passed")"
        tail -15 "$log" | sed 's/^/    /'
    fi
}

job "mpirun -np 8" 8 mpirun.openmpi --oversubscribe -np 8 "$check"
demo_job "mpirun -np 8" mpirun.openmpi --oversubscribe -np 8 "$demo"
job "mpiexec.hydra -n 8" 8 mpiexec.hydra -n 8 "$check"
demo_job "mpiexec.hydra -n 8" mpiexec.hydra -n 8 "$demo"
# hydra's PMI_PORT model: no PMI_FD, PMI_RANK or PMI_SIZE; the ranks connect
# to the proxy's port and learn rank and size from it
job "mpiexec.hydra -pmi-port -n 8" 8 mpiexec.hydra -pmi-port -n 8 "$check"
job "srun -n 8" 8 srun -n 8 "$check"
demo_job "srun -n 8" srun -n 8 "$demo"
have_pmix=0
srun --mpi=list 2>&1 | grep -q pmix && have_pmix=1
if [ $have_pmix -eq 1 ]; then
    job "srun --mpi=pmix -n 8" 8 srun --mpi=pmix -n 8 "$check"
    demo_job "srun --mpi=pmix -n 8" srun --mpi=pmix -n 8 "$demo"
else
    echo "SKIP srun --mpi=pmix -n 8: Slurm's PMIx plugin is not installed (srun --mpi=list)"
    n_skip=$((n_skip + 1))
fi
cat > "$work/batch-mpirun.sh" <<B
#!/bin/sh
exec mpirun.openmpi --oversubscribe -np 8 "$check"
B
cat > "$work/batch-mpiexec.sh" <<B
#!/bin/sh
exec mpiexec.hydra -n 8 "$check"
B
# sbatch writes the job's output to a file: the job's lines are read from there
batch() { sbatch --wait -n 8 -o "$work/$1.out" "$work/$1.sh" && cat "$work/$1.out"; }
job "sbatch -n 8 + mpirun -np 8" 8 batch batch-mpirun
job "sbatch -n 8 + mpiexec.hydra -n 8" 8 batch batch-mpiexec
# torchrun's variables for 4 ranks, started by one srun task
cat > "$work/torchrun-loop.sh" <<'B'
#!/bin/bash
port=$((29500 + SLURM_JOB_ID % 1000))
for r in 0 1 2 3; do
    RANK=$r WORLD_SIZE=4 LOCAL_RANK=$r LOCAL_WORLD_SIZE=4 GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        TORCHELASTIC_RUN_ID="slurm-$SLURM_JOB_ID" "$@" &
    pids="$pids $!"
done
# each rank by its pid: wait -n can reap two ranks that end together and
# then find none (status 127)
st=0
for p in $pids; do wait "$p" || st=1; done
exit $st
B
chmod +x "$work"/*.sh
job "srun -n 1 + torchrun-style loop of 4" 4 srun -n 1 "$work/torchrun-loop.sh" "$check"
demo_job "srun -n 1 + torchrun-style loop of 4" srun -n 1 "$work/torchrun-loop.sh" "$demo"

# torchrun's MASTER_PORT+1 taken by another process's listener, which
# accepts and says nothing: the root takes the next free port of the window
# (OOBX_MASTER_PORT_TRIES) and the ranks find it there
# below the ephemeral ports (32768-60999), which other processes hold at random
mport=$((12000 + $$ % 4000))
"$check" hold $((mport + 1)) >"$work/hold-master.out" 2>&1 &
mholder=$!
pids+=($mholder)
for _ in $(seq 50); do grep -q holding "$work/hold-master.out" && break; sleep 0.1; done
cat > "$work/torchrun-taken.sh" <<B
#!/bin/bash
for r in 0 1 2 3; do
    RANK=\$r WORLD_SIZE=4 LOCAL_RANK=\$r LOCAL_WORLD_SIZE=4 MASTER_ADDR=localhost MASTER_PORT=$mport \\
        TORCHELASTIC_RUN_ID=taken-$$ "\$@" &
    pids="\$pids \$!"
done
st=0
for p in \$pids; do wait "\$p" || st=1; done
exit \$st
B
chmod +x "$work/torchrun-taken.sh"
job "torchrun-style loop of 4, MASTER_PORT+1 held by a silent listener" 4 "$work/torchrun-taken.sh" "$check"
kill "$mholder" 2>/dev/null
wait "$mholder" 2>/dev/null

# oobx-run, and the plain environment (what any launcher, or a shell loop, can set)
job "oobx-run -n 8 --no-prefix" 8 "$root/$build/bin/oobx-run" -n 8 --no-prefix -- "$check"
demo_job "oobx-run -n 8" "$root/$build/bin/oobx-run" -n 8 -- "$demo"
cat > "$work/plain-env.sh" <<'B'
#!/bin/bash
# 4 ranks with OOBX_RANK/OOBX_NRANKS/OOBX_COMM_ID and a job key
port=$((16000 + $$ % 4000)) # below the ephemeral ports
key=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
for r in 0 1 2 3; do
    OOBX_RANK=$r OOBX_NRANKS=4 OOBX_COMM_ID=127.0.0.1:$port OOBX_JOB_KEY=$key "$@" &
    pids="$pids $!"
done
st=0
for p in $pids; do wait "$p" || st=1; done
exit $st
B
chmod +x "$work/plain-env.sh"
job "plain environment, 4 ranks" 4 "$work/plain-env.sh" "$check"
demo_job "plain environment, 4 ranks" "$work/plain-env.sh" "$demo"

# a second oobx_comm_init_from_env in every rank: PMIx serves it; hydra closes
# PMI_FD at the first PMI finalize, and the second call says so (the first
# communicator goes on)
# second NAME N WANT COMMAND...: every rank's ok line and N ranks saying
# "second communicator WANT"
second() {
    local name=$1 n=$2 want=$3
    shift 3
    LAUNCH_CHECK_SECOND=1 JOB_WANT="^launch-check: rank [0-9]+ second communicator $want" JOB_WANT_N=$n \
        job "$name" "$n" "$@"
}
second "mpirun -np 4, a second communicator" 4 "ok" mpirun.openmpi --oversubscribe -np 4 "$check"
second "mpiexec.hydra -n 4, a second communicator" 4 \
    "refused: MPICH hydra \(rank [0-9]+\): PMI-1: the PMI server has closed PMI_FD=[0-9]+: hydra ends" \
    mpiexec.hydra -n 4 "$check"

second "mpiexec.hydra -pmi-port -n 4, a second communicator" 4 \
    "refused: MPICH hydra \(PMI_ID=[0-9]+\): PMI-1: hydra serves one PMI connection per process" \
    mpiexec.hydra -pmi-port -n 4 "$check"

# ---- two emulated nodes ---------------------------------------------------------
# Network namespaces on a bridge (a namespace of its own): mpiexec runs in
# one, and reaches each "node" through a stand-in for ssh that enters its
# namespace. The nodes share this machine's host name and /dev/shm, like
# containers cloned from one image; every rank checks that the job spans two
# network namespaces.
nodes_up() {
    local i=1 ns br="oobxl-br$$"
    ip netns add "$br" && netns+=("$br") || return 1
    ip -n "$br" link add br0 type bridge && ip -n "$br" link set br0 up || return 1
    for ns in "oobxl-launch$$" "oobxl-a$$" "oobxl-b$$"; do
        ip netns add "$ns" && netns+=("$ns") || return 1
        ip -n "$br" link add "v$i" type veth peer name eth0 netns "$ns" &&
            ip -n "$br" link set "v$i" master br0 up &&
            ip -n "$ns" addr add "10.79.0.$i/24" dev eth0 &&
            ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || return 1
        i=$((i + 1))
    done
}
cat > "$work/netns-ssh" <<'B'
#!/bin/bash
# ssh for hydra and Open MPI: [options] HOST COMMAND... runs COMMAND in
# network namespace HOST, with a temporary directory of the node's own (as a
# real node has: Open MPI keeps its session directory, hwloc's shared
# topology and PMIx's store there, by host name, which the nodes share); with
# NETNS_SSH_HOST_ID set, the node's ranks get OOBX_HOST_ID=HOST
while [ $# -gt 0 ]; do
    case $1 in
        -[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
        -*) shift ;;
        *) break ;;
    esac
done
host=$1
shift
[ -n "${NETNS_SSH_HOST_ID:-}" ] && export OOBX_HOST_ID=$host
export TMPDIR="$(dirname "$0")/tmp-$host"
mkdir -p "$TMPDIR"
exec ip netns exec "$host" /bin/sh -c "$*"
B
chmod +x "$work/netns-ssh"
cat > "$work/slurm-node" <<'B'
#!/bin/sh
# slurm-node HOSTS NETNS NODE COMMAND...: COMMAND as Slurm node NODE: in
# network namespace NETNS, with host name NODE (a UTS namespace of its own,
# as a real node has) and HOSTS as /etc/hosts (a mount namespace of its own,
# so that NODE and the other nodes' names resolve to their addresses). Not
# ip netns exec: it mounts a sysfs of the namespace on /sys, which hides
# /sys/fs/cgroup, and slurmd loads its cgroup plugin whatever ProctrackType says.
hosts=$1 ns=$2 node=$3
shift 3
exec unshare --mount --uts nsenter --net="/run/netns/$ns" \
    /bin/sh -c 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"' slurm-node "$hosts" "$node" "$@"
B
chmod +x "$work/slurm-node"

# Slurm on the two nodes: slurmctld in the launch namespace at 10.79.0.1,
# slurmd -N node1 and -N node2 at 10.79.0.2 and .3 (NodeAddr), each a node of
# its own host name; srun runs in the launch namespace. Without PMI the ranks
# derive their roots from SLURM_STEP_NODELIST=node[1-2] and
# SLURM_STEP_TASKS_PER_NODE.
two="$work/two"
launch=(ip netns exec "oobxl-launch$$")
srun2=("${launch[@]}" env SLURM_CONF="$two/slurm.conf" srun -N 2)

# two_roots NAME N PER ROOTS SRUN_ARGS...: launch-check under srun -N 2
# SRUN_ARGS with OOBX_LAUNCH_RANKS_PER_ROOT=PER, and rank 0's info line must
# put the step's 2 roots on ROOTS ("node1,node2")
two_roots() {
    local name=$1 n=$2 per=$3 at="${4//,/:[0-9]+,}:[0-9]+"
    shift 4
    OOBX_LAUNCH_RANKS_PER_ROOT=$per OOBX_LOG_LEVEL=info LAUNCH_CHECK_NETNS=2 \
        JOB_WANT="Slurm job [0-9]+ step [0-9]+: 2 roots at $at " job "$name" "$n" "${srun2[@]}" "$@" "$check"
}

slurm_two_nodes() {
    local first=${#pids[@]}
    if ! unshare --mount --uts true 2>"$work/unshare.err"; then
        echo "SKIP Slurm on two emulated nodes: cannot make mount and UTS namespaces ($(head -1 "$work/unshare.err"))"
        n_skip=$((n_skip + 1))
        return
    fi
    mkdir -p "$two"
    printf '127.0.0.1 localhost\n10.79.0.1 %s\n10.79.0.2 node1\n10.79.0.3 node2\n' "$host" >"$two/hosts"
    slurm_conf "$two" "$host(10.79.0.1)" "node1 NodeAddr=10.79.0.2" "node2 NodeAddr=10.79.0.3"
    slurm_start "$two" "oobxl-launch$$" "node1:oobxl-a$$" "node2:oobxl-b$$"
    if ! slurm_up "$two" 2 "${launch[@]}"; then
        n_fail=$((n_fail + 1))
        echo "FAIL Slurm on two emulated nodes: slurmd on node1 and node2 not up"
        stop_daemons "$first"
        return
    fi
    echo "==== Slurm on two emulated nodes up (slurmctld, slurmd node1, slurmd node2: pids ${pids[*]:first})"
    LAUNCH_CHECK_NETNS=2 job "srun -N 2 -n 8 (two Slurm nodes)" 8 "${srun2[@]}" -n 8 "$check"
    two_roots "srun -N 2 -n 8 (two Slurm nodes), a root on each" 8 4 node1,node2 -n 8
    # 4 and 3 tasks: root 1's first rank (4) is node2's first
    two_roots "srun -N 2 -n 7 (two Slurm nodes, 4 and 3 tasks), a root on each" 7 4 node1,node2 -n 7
    # cyclic: ranks 0,2,4,6 on node1 and 1,3,5 on node2, so root 1 (rank 4)
    # is on node1 too (block would say node2, and rank 4 would refuse to host
    # it there); with 6 ranks root 1 is rank 3, on node2
    two_roots "srun -N 2 -n 7 --distribution=cyclic (two Slurm nodes), both roots on node1" 7 4 node1,node1 \
        -n 7 --distribution=cyclic
    two_roots "srun -N 2 -n 6 --distribution=cyclic (two Slurm nodes), a root on each" 6 3 node1,node2 \
        -n 6 --distribution=cyclic
    # the node-aware bootstrap: every rank takes its local rank and size from
    # SLURM_LOCALID and its node's (SLURMD_NODENAME) count in
    # SLURM_STEP_TASKS_PER_NODE, and 4 ranks share each node's table
    OOBX_NODE_AWARE_MIN=2 OOBX_LOG_LEVEL=info LAUNCH_CHECK_NETNS=2 LAUNCH_CHECK_LOCAL=4 JOB_WANT_N=8 \
        JOB_WANT="launcher Slurm .*local rank from SLURM_LOCALID and SLURM_STEP_TASKS_PER_NODE" \
        job "srun -N 2 -n 8 (two Slurm nodes), node-aware: 4 ranks per table" 8 "${srun2[@]}" -n 8 "$check"
    if [ $have_pmix -eq 1 ]; then
        LAUNCH_CHECK_NETNS=2 job "srun -N 2 -n 8 --mpi=pmix (two Slurm nodes)" 8 "${srun2[@]}" -n 8 --mpi=pmix "$check"
    else
        echo "SKIP srun -N 2 -n 8 --mpi=pmix: Slurm's PMIx plugin is not installed (srun --mpi=list)"
        n_skip=$((n_skip + 1))
    fi
    OOBX_TRANSPORT=socket demo_job "srun -N 2 -n 8 (two Slurm nodes)" "${srun2[@]}" -n 8 "$demo"
    stop_daemons "$first"
}

if ! command -v ip >/dev/null || ! nodes_up 2>"$work/netns.err"; then
    echo "SKIP two emulated nodes (hydra, Open MPI, Slurm): cannot make network namespaces ($(head -1 "$work/netns.err" 2>/dev/null))"
    n_skip=$((n_skip + 1))
    nodes_down
else
    two_nodes=(ip netns exec "oobxl-launch$$" mpiexec.hydra -iface eth0 -launcher ssh -launcher-exec "$work/netns-ssh"
        -hosts "oobxl-a$$:4,oobxl-b$$:4" -n 8)
    LAUNCH_CHECK_NETNS=2 job "mpiexec.hydra -hosts a:4,b:4 -n 8 (two emulated nodes)" 8 "${two_nodes[@]}" "$check"
    LAUNCH_CHECK_NETNS=2 job "mpiexec.hydra -pmi-port -hosts a:4,b:4 -n 8 (two emulated nodes)" 8 \
        "${two_nodes[@]}" -pmi-port "$check"
    # the node-aware bootstrap (forced below its usual 128 ranks): one host
    # name, but MPI_LOCALRANKID says two nodes, so no rank shares a table
    # (and the root warns); with OOBX_HOST_ID per node, 4 ranks share each
    OOBX_NODE_AWARE_MIN=2 LAUNCH_CHECK_NETNS=2 LAUNCH_CHECK_LOCAL=1 \
        job "two emulated nodes, one host name, node-aware: no shared table" 8 "${two_nodes[@]}" "$check"
    OOBX_NODE_AWARE_MIN=2 NETNS_SSH_HOST_ID=1 LAUNCH_CHECK_NETNS=2 LAUNCH_CHECK_LOCAL=4 \
        job "two emulated nodes, OOBX_HOST_ID per node, node-aware: 4 ranks per table" 8 "${two_nodes[@]}" "$check"
    # Open MPI's mpirun on the same two nodes: orted started through the
    # stand-in for ssh (plm_rsh_agent), its out-of-band traffic on eth0;
    # the ranks find their roots through the orteds' PMIx servers
    ompi_two=(ip netns exec "oobxl-launch$$" mpirun.openmpi --oversubscribe --mca plm_rsh_agent "$work/netns-ssh"
        --mca oob_tcp_if_include eth0 --host "oobxl-a$$:4,oobxl-b$$:4" -np 8)
    LAUNCH_CHECK_NETNS=2 job "mpirun --host a:4,b:4 -np 8 (two emulated nodes, PMIx)" 8 "${ompi_two[@]}" "$check"
    OOBX_NODE_AWARE_MIN=2 NETNS_SSH_HOST_ID=1 LAUNCH_CHECK_NETNS=2 LAUNCH_CHECK_LOCAL=4 \
        job "mpirun on two emulated nodes, OOBX_HOST_ID per node, node-aware: 4 ranks per table" 8 \
        "${ompi_two[@]}" "$check"
    # the demo's hundreds of collectives over sockets: to UCX the two nodes
    # are one host (one host name and kernel), and its shared-memory wake-ups
    # do not cross network namespaces (docs/launchers.md)
    OOBX_TRANSPORT=socket demo_job "mpirun --host a:4,b:4 -np 8 (two emulated nodes)" "${ompi_two[@]}" "$demo"
    slurm_two_nodes
    nodes_down
fi

# the Slurm port taken: OOBX_SLURM_PORT_RANGE of one port, which another process holds
"$check" hold 0 >"$work/hold.out" 2>&1 &
holder=$!
pids+=($holder)
for _ in $(seq 50); do grep -q holding "$work/hold.out" && break; sleep 0.1; done
hold=$(sed -n 's/^launch-check: holding port \([0-9]*\)$/\1/p' "$work/hold.out")
hold=${hold:-0}
OOBX_SLURM_PORT_RANGE=$hold-$hold timeout -k 5 "$deadline" srun -n 1 "$check" >"$work/taken.log" 2>&1
rc=$?
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q holding "$work/hold.out" &&
    grep -qE "cannot host root 0 of Slurm job [0-9]+ step [0-9]+ at [^ ]+:$hold: port $hold is taken" "$work/taken.log" &&
    grep -q "OOBX_SLURM_PORT_RANGE=$hold-$hold: set OOBX_SLURM_PORT_RANGE" "$work/taken.log"; then
    echo "PASS srun -n 1 with its port taken: the error names the port, job, step and OOBX_SLURM_PORT_RANGE"
    n_pass=$((n_pass + 1))
else
    echo "FAIL srun -n 1 with its port taken (exit status $rc):"
    n_fail=$((n_fail + 1))
    tail -n 5 "$work/hold.out" "$work/taken.log" | sed 's/^/    /'
fi

echo "==== test-launchers: $(($(date +%s) - started)) s"
echo "tests: $n_pass passed, $n_fail failed, $n_skip skipped"
[ $n_fail -eq 0 ]
