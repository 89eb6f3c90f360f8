# On the GPU host (one device call): UCX over tcp and shared memory, ring against doubling, and
# first contact to new peers. Before: bash ../shared/device/bundle.sh build; cc -O2 -Iinclude
# docs/perf/scale/new-peers.c -Lbuild/lib -loobx -o .dev/new-peers; then: bash .dev/ucx-batch.sh (a copy)
source .dev/env.sh; ulimit -n 20000; export OOBX_MODULE_DIR=$PWD/.dev/lib/oobx
echo "# $(date -u +%FT%TZ) $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== init's trade over UCX, one rank a host (UCX_TLS N exchange boot_s cross_s)"
bash docs/perf/scale/trade-ucx.sh 3 "16 64" "tcp posix,self"
echo "== first contact to new peers, 16 ranks: every rank sends to r+d and receives from r-d, d = 2, 4, 8"
for t in "ucx UCX_TLS=tcp" "ucx UCX_TLS=posix,self" "socket X=1"; do set -- $t; for i in 1 2 3; do echo "$t $(env OOBX_TRANSPORT=$1 $2 oobx-run -n 16 -- .dev/new-peers | tail -1)"; done; done
