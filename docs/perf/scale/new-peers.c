/* First contact to new peers: every rank sends 8 B to rank r + d and receives
 * from r - d, d = 2, 4, 8, ... (a new peer each step, as init's doubling trade).
 * cc -O2 -Iinclude docs/perf/scale/new-peers.c -Lbuild/lib -loobx -o new-peers
 * OOBX_TRANSPORT=ucx UCX_TLS=tcp oobx-run -n 16 -- ./new-peers */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "oobx.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc, char **argv){
    oobx_comm_t c; int rc = oobx_comm_init_from_env(&c, NULL);
    if (rc) { fprintf(stderr, "init: %s\n", oobx_last_error()); return 1; }
    int r, n; oobx_comm_rank(c,&r); oobx_comm_size(c,&n);
    char b[8] = {0};
    oobx_barrier(c);
    /* every rank: send to r+d, receive from r-d, d = 2, 4, ... (new peers each step) */
    double t0 = now();
    for (int d = 2; d < n; d <<= 1) {
        double t1 = now();
        oobx_send(c, (r + d) % n, d, b, 8);
        oobx_recv(c, (r - d + n) % n, d, b, 8, NULL);
        if (r == 0) printf("d=%d %.3f ms\n", d, (now()-t1)*1e3);
    }
    if (r == 0) printf("all %.3f ms\n", (now()-t0)*1e3);
    oobx_barrier(c);
    oobx_comm_destroy(c);
    return 0;
}
