/*
 * oobx-first-contact: what a connection costs. Rank 0 sends 8 bytes to every
 * other rank in turn and waits for the echo; the first exchange with a rank
 * opens the link (socket: connect, challenge, proofs), the second one reuses
 * it. Rank 0 prints one JSON line: medians over the ranks of both round
 * trips, and the init time.
 *
 *   oobx-run -n 64 -- build/bin/oobx-first-contact
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "oobx.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "oobx-first-contact: %s: %s (%s)\n", what, oobx_strerror(rc), oobx_last_error());
    return 1;
}

int main(void)
{
    double t0 = now_s();
    oobx_comm_t c;
    int rc = oobx_comm_init_from_env(&c, NULL);
    if (rc) return fail("init", rc);
    double t_init = now_s() - t0;
    int me, n;
    oobx_comm_rank(c, &me);
    oobx_comm_size(c, &n);
    if ((rc = oobx_barrier(c))) return fail("barrier", rc);
    double *first = calloc((size_t)n, sizeof(double)), *again = calloc((size_t)n, sizeof(double));
    char b[8] = "contact";
    int m = 0;
    for (int k = 1; k < n; k++) {
        if (me == 0) {
            for (int round = 0; round < 2; round++) {
                double s = now_s();
                if ((rc = oobx_send(c, k, round, b, sizeof b))) return fail("send", rc);
                if ((rc = oobx_recv(c, k, round, b, sizeof b, NULL))) return fail("recv", rc);
                (round ? again : first)[m] = now_s() - s;
            }
            m++;
        } else if (me == k) {
            for (int round = 0; round < 2; round++) {
                if ((rc = oobx_recv(c, 0, round, b, sizeof b, NULL))) return fail("recv", rc);
                if ((rc = oobx_send(c, 0, round, b, sizeof b))) return fail("send", rc);
            }
        }
    }
    double tmax = t_init;
    if ((rc = oobx_barrier(c))) return fail("barrier", rc);
    if (me == 0 && m > 0) {
        qsort(first, (size_t)m, sizeof(double), cmp);
        qsort(again, (size_t)m, sizeof(double), cmp);
        printf("{\"ranks\": %d, \"transport\": \"%s\", \"init_s_rank0\": %.6f, \"first_rtt_us_median\": %.1f, "
               "\"warm_rtt_us_median\": %.1f}\n",
               n, oobx_comm_transport(c), tmax, first[m / 2] * 1e6, again[m / 2] * 1e6);
    }
    free(first);
    free(again);
    return oobx_comm_destroy(c) ? 1 : 0;
}
