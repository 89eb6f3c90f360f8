# Init's card trade over UCX (not the socket transport), ring both ways
# against doubling, one rank per emulated host, alternating:
#   bash docs/perf/scale/trade-ucx.sh ROUNDS "16 64" "tcp posix,self"
# Prints: UCX_TLS N exchange boot_s cross_s
rounds=${1:-3}
for tls in ${3:-tcp posix,self}; do
    for n in ${2:-16 64}; do
        for i in $(seq "$rounds"); do
            for x in ring bruck; do
                r=$(env OOBX_NODE_EXCHANGE=$x OOBX_NODE_AWARE_MIN=2 OOBX_TRANSPORT=ucx UCX_TLS=$tls \
                    OOBX_BOOT_AT=$(python3 -c "import time;print('%.6f'%(time.time()+1.5))") \
                    oobx-run -n "$n" -r 1 --timeout 120 -- sh -c "OOBX_HOST_ID=\$OOBX_RANK exec oobx-boot --table" 2>&1 |
                    grep -o 'OOBX_BOOT_RESULT.*' | grep -o '"boot_s": [0-9.]*\|"cross_s": [0-9.]*' | cut -d' ' -f2 | tr '\n' ' ')
                echo "$tls $n $x $r"
            done
        done
    done
done
