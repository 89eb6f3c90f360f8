#!/bin/sh
# The demo of `make demo`: oobx-demo on 8 local ranks (oobx-run), once for every
# transport usable on this machine.
#   sh tools/demo.sh BUILD_DIR        (DEMO_NRANKS, DEMO_ROOTS, DEMO_TIMEOUT override)
set -u

build=${1:-build}
bin=$build/bin
nranks=${DEMO_NRANKS:-8}
nroots=${DEMO_ROOTS:-1}
timeout=${DEMO_TIMEOUT:-180}

for p in oobx-run oobx-info oobx-demo; do
    if [ ! -x "$bin/$p" ]; then
        echo "oobx demo: $bin/$p is missing; run make first" >&2
        exit 1
    fi
done

# Loopback only: sockets on lo; UCX over shared memory and tcp on lo, unless
# the caller chose otherwise.
: "${OOBX_SOCKET_IFNAME:=lo}"
: "${UCX_TLS:=posix,sysv,self,tcp}"
: "${UCX_NET_DEVICES:=lo}"
export OOBX_SOCKET_IFNAME UCX_TLS UCX_NET_DEVICES

if ! transports=$("$bin/oobx-info" -u); then
    echo "oobx demo: oobx-info could not list the transports" >&2
    exit 1
fi
if [ -z "$transports" ]; then
    echo "oobx demo: no usable transport (see $bin/oobx-info)" >&2
    exit 1
fi

# The verbs transport with no RDMA device here: run it on the emulated device.
emu=
if [ -e "$build/lib/oobx/liboobx-verbs.so" ] && [ -e "$build/tests/verbs-emu/liboobx-verbs-emu.so" ] &&
    ! echo "$transports" | grep -qx verbs; then
    emu=$(cd "$build/tests/verbs-emu" && pwd)/liboobx-verbs-emu.so
    transports="$transports
verbs-emu"
fi

echo "oobx demo: $nranks ranks on $(uname -n) ($(nproc) cores); transports: $(echo "$transports" | paste -sd' ')"
status=0
for t in $transports; do
    echo
    echo "==== transport $t"
    preload=
    case "$t" in
        ucx) echo "     (UCX_TLS=$UCX_TLS UCX_NET_DEVICES=$UCX_NET_DEVICES)" ;;
        socket) echo "     (OOBX_SOCKET_IFNAME=$OOBX_SOCKET_IFNAME)" ;;
        verbs-emu) echo "     (no RDMA device here: the emulated device of verbs/emu, LD_PRELOAD=$emu)"
                   t=verbs preload=$emu ;;
    esac
    if ! LD_PRELOAD=$preload "$bin/oobx-run" -n "$nranks" --roots "$nroots" --timeout "$timeout" \
        --transport "$t" --no-prefix -- "$bin/oobx-demo"; then
        echo "oobx demo: the $t run failed" >&2
        status=1
    fi
done
exit $status
