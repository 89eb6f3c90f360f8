# Sourced by the GPU-host scale scripts (gpu-host-batch.sh, roots-stagger.sh).
# boot N HOSTS ROOTS [VAR=value...]: one oobx-boot start-up of N ranks over
# HOSTS emulated hosts (OOBX_HOST_ID by rank block) and ROOTS roots, socket
# transport, all ranks released at a common instant; prints oobx-boot's JSON.
# BOOT_ARGS: more oobx-boot options (--table).
boot() {
    local n=$1 h=$2 r=$3 per=$(( ($1 + $2 - 1) / $2 ))
    shift 3
    env "$@" OOBX_TRANSPORT=socket OOBX_BOOT_AT=$(python3 -c "import time;print('%.6f'%(time.time()+1.0+$n*0.0012))") \
        oobx-run -n "$n" -r "$r" --timeout 300 -- sh -c "OOBX_HOST_ID=\$((OOBX_RANK / $per)) exec oobx-boot --label=h$h ${BOOT_ARGS:-}" 2>&1 |
        grep -o 'OOBX_BOOT_RESULT.*' | cut -d' ' -f2-
}
