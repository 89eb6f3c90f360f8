#!/usr/bin/env bash
# make test-launchers: oobx jobs started by real launchers with no OOBX_*
# variable set. Starts a single-node Slurm (munged, slurmctld, slurmd; each
# stopped by its pid at the end, also on failure) and runs launch-check (a
# quick conformance subset, every rank's line checked) and oobx-demo under
# mpirun, mpiexec.hydra, srun, srun --mpi=pmix, sbatch + mpirun, sbatch +
# mpiexec, srun -n 1 + a torchrun-style loop, oobx-run and a plain-environment
# loop; then a second communicator under mpirun and mpiexec, and srun with
# its Slurm port taken; and mpiexec.hydra and mpirun on two emulated nodes
# (network namespaces). A job past its deadline fails naming the ranks that
# did not finish. Every command of docs/launchers.md is one of these.
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

nodes_down() {
    local ns
    for ns in "${netns[@]}"; do ip netns del "$ns" 2>/dev/null; done
    netns=()
}
netns=()

stop_daemons() {
    local i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill "${pids[$i]}" 2>/dev/null && wait "${pids[$i]}" 2>/dev/null
    done
    pids=()
}
trap 'stop_daemons; nodes_down; rm -rf "$work"' EXIT

# ---- a single-node Slurm -------------------------------------------------------
host=$(hostname -s)
export SLURM_CONF="$work/slurm.conf"
mkdir -p "$work/state" "$work/spool" /run/munge /var/lib/munge /var/log/munge
cat > "$SLURM_CONF" <<CONF
ClusterName=oobxtest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldPort=16817
SlurmdPort=16818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/linear
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=16 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
munged -F --force --socket="$work/munge.socket" --pid-file="$work/munged.pid" --log-file="$work/munged.log" \
    --seed-file="$work/munge.seed" 2>"$work/munged.err" &
pids+=($!)
sed -i "s|^AuthType=auth/munge|AuthType=auth/munge\nAuthInfo=socket=$work/munge.socket|" "$SLURM_CONF"
for _ in $(seq 50); do [ -S "$work/munge.socket" ] && break; sleep 0.1; done
slurmctld -D -f "$SLURM_CONF" >"$work/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" >"$work/slurmd.out" 2>&1 &
pids+=($!)
up=0
for _ in $(seq 100); do
    if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then up=1; break; fi
    sleep 0.3
done
if [ $up -eq 0 ]; then
    echo "==== Slurm did not come up within 30 s:"
    tail -n 5 "$work/slurmctld.log" "$work/slurmd.log" "$work/munged.err" 2>/dev/null
    echo "tests: 0 passed, 1 failed, 0 skipped"
    exit 1
fi
echo "==== single-node Slurm up on $host in $(($(date +%s) - started)) s (munged, slurmctld, slurmd: pids ${pids[*]})"

# ---- the jobs ---------------------------------------------------------------------
# verdict NAME N LOG RC: every rank's "ok" line present, else the ranks that are not
verdict() {
    local name=$1 n=$2 log=$3 rc=$4 missing="" r
    for ((r = 0; r < n; r++)); do
        grep -q "^launch-check: rank $r of $n ok" "$log" || missing="$missing $r"
    done
    if [ -z "$missing" ] && [ "$rc" -eq 0 ]; then
        echo "PASS $name ($n ranks ok)"
        n_pass=$((n_pass + 1))
        return
    fi
    n_fail=$((n_fail + 1))
    if [ "$rc" -eq 124 ]; then echo "FAIL $name: deadline of $deadline s passed; ranks not done:$missing"
    else echo "FAIL $name: exit status $rc; ranks without their ok line:${missing:- none}"; fi
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
if srun --mpi=list 2>&1 | grep -q pmix; then
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
# second NAME N WANT COMMAND...: every rank's ok line and N lines matching WANT
second() {
    local name=$1 n=$2 want=$3 log="$work/second-$((n_pass + n_fail)).log" rc got
    shift 3
    LAUNCH_CHECK_SECOND=1 timeout -k 5 "$deadline" "$@" >"$log" 2>&1
    rc=$?
    got=$(grep -cE "^launch-check: rank [0-9]+ second communicator $want" "$log")
    if [ "$got" -eq "$n" ]; then verdict "$name" "$n" "$log" "$rc"; return; fi
    n_fail=$((n_fail + 1))
    echo "FAIL $name: $got of $n ranks say \"second communicator $want\""
    tail -15 "$log" | sed 's/^/    /'
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
if ! command -v ip >/dev/null || ! nodes_up 2>"$work/netns.err"; then
    echo "SKIP two emulated nodes: cannot make network namespaces ($(head -1 "$work/netns.err" 2>/dev/null))"
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
