/*
 * boot-min: the start-up figure of issue 10 with the public API of version 1
 * alone, so that builds from before oobx-boot (and its oobx_debug.h timings)
 * can be measured the same way: every rank sleeps to the common instant
 * OOBX_BOOT_AT (seconds since the epoch, one machine, one clock), then
 * oobx_comm_init_from_env and one oobx_allgather of a 128-byte card per rank,
 * every card checked; the ranks then allgather their end times and rank 0
 * prints the slowest rank's end minus the instant.
 *
 *   cc -O2 -I BUILD/../include -o boot-min docs/perf/scale/boot-min.c -L BUILD/lib -loobx
 *   OOBX_BOOT_AT=<now + 2 s> oobx-run -n 64 -- ./boot-min
 *
 * Prints "BOOT_MIN ranks N boot_s S late L" (L: ranks that reached the
 * instant after it had passed; their start-up is counted from the instant).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "oobx.h"

enum { CARD = 128 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void card_of(int rank, unsigned char *out)
{
    for (int i = 0; i < CARD; i++)
        out[i] = (unsigned char)(rank * 131 + i * 7 + (rank >> 8));
}

int main(void)
{
    const char *at_s = getenv("OOBX_BOOT_AT");
    double at = at_s ? strtod(at_s, NULL) : 0.0;
    int late = 0;
    if (at > 0.0) {
        if (now_s() < at) {
            struct timespec ts = {(time_t)at, (long)((at - (double)(time_t)at) * 1e9)};
            while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) != 0) /* a signal: sleep on */
                ;
        } else {
            late = 1;
        }
    } else {
        at = now_s();
    }

    oobx_comm_t comm = NULL;
    int rc = oobx_comm_init_from_env(&comm, NULL);
    if (rc != OOBX_SUCCESS) {
        fprintf(stderr, "boot-min: init failed: %s\n", oobx_strerror(rc));
        return 1;
    }
    int rank = 0, n = 0;
    oobx_comm_rank(comm, &rank);
    oobx_comm_size(comm, &n);
    unsigned char *cards = malloc((size_t)n * CARD), want[CARD];
    if (cards == NULL)
        return 1;
    card_of(rank, cards + (size_t)rank * CARD);
    rc = oobx_allgather(comm, cards, CARD);
    if (rc != OOBX_SUCCESS) {
        fprintf(stderr, "boot-min: rank %d: allgather failed: %s\n", rank, oobx_strerror(rc));
        return 1;
    }
    for (int r = 0; r < n; r++) {
        card_of(r, want);
        if (memcmp(cards + (size_t)r * CARD, want, CARD) != 0) {
            fprintf(stderr, "boot-min: rank %d: card of rank %d is wrong\n", rank, r);
            return 1;
        }
    }
    double end = now_s() - at;
    free(cards);

    /* untimed: the slowest rank and the late count to rank 0 */
    double *all = malloc((size_t)n * 2 * sizeof(double));
    if (all == NULL)
        return 1;
    all[rank * 2] = end;
    all[rank * 2 + 1] = late;
    rc = oobx_allgather(comm, all, 2 * sizeof(double));
    if (rc == OOBX_SUCCESS && rank == 0) {
        double worst = 0.0;
        int lates = 0;
        for (int r = 0; r < n; r++) {
            if (all[r * 2] > worst)
                worst = all[r * 2];
            lates += all[r * 2 + 1] != 0.0;
        }
        printf("BOOT_MIN ranks %d boot_s %.6f late %d\n", n, worst, lates);
    }
    free(all);
    oobx_comm_destroy(comm);
    return rc == OOBX_SUCCESS ? 0 : 1;
}
