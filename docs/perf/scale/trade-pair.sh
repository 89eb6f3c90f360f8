# Init's card trade among the hosts' leaders: the ring both ways against
# doubling (OOBX_NODE_EXCHANGE=ring / bruck), the same build, alternating.
#   . docs/perf/scale/boot.sh; . docs/perf/scale/trade-pair.sh
#   trade_pair N HOSTS ROOTS ROUNDS [VAR=value...]   (BOOT_ARGS=--table: the table's call)
# Prints: N HOSTS ROOTS exchange boot_s cross_s exchange_max_s cpu_mean_ms fds_max
trade_pair() {
    local n=$1 h=$2 r=$3 rounds=$4 i x
    shift 4
    for i in $(seq "$rounds"); do
        for x in ring bruck; do
            printf '%s %s %s %s ' "$n" "$h" "$r" "$x"
            boot "$n" "$h" "$r" OOBX_NODE_EXCHANGE=$x "$@" | python3 -c '
import json, sys
t = sys.stdin.read().strip()
try:
    d = json.loads(t)
    print(d["boot_s"], d.get("cross_s", 0), d["exchange_max_s"], d["cpu_mean_ms"], d["fds_max"])
except Exception:
    print("failed:", t[:200])'
        done
    done
}
