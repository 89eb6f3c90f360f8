/*
 * oobx-failure: one rank of the failure benchmark (bench/failure.py). Every
 * rank inits from the environment, does a barrier, writes its pid and
 * "ready" under FAIL_DIR, then either loops over allgathers of 64 B and
 * barriers (FAIL_MODE=loop) or waits in oobx_recv for a message its live
 * successor never sends (FAIL_MODE=live). The driver kills one rank; each
 * survivor writes FAIL_DIR/err.<rank>: the CLOCK_REALTIME of its error, the
 * code's name and oobx_last_error(). SIGTERM (oobx-run ends the job when a
 * rank dies) is ignored so that the survivors can say what they saw.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "oobx.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void put(const char *dir, const char *name, int rank, const char *text)
{
    char path[1024], tmp[1100];
    snprintf(path, sizeof(path), "%s/%s.%d", dir, name, rank);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
    rename(tmp, path);
}

int main(void)
{
    const char *dir = getenv("FAIL_DIR"), *mode = getenv("FAIL_MODE");
    if (!dir || !mode) {
        fprintf(stderr, "oobx-failure: set FAIL_DIR and FAIL_MODE (loop or live); run it through bench/failure.py\n");
        return 2;
    }
    signal(SIGTERM, SIG_IGN);
    oobx_comm_t c;
    int rc = oobx_comm_init_from_env(&c, NULL);
    if (rc) {
        fprintf(stderr, "oobx-failure: init: %s\n", oobx_last_error());
        return 2;
    }
    int rank, n;
    oobx_comm_rank(c, &rank);
    oobx_comm_size(c, &n);
    if (oobx_barrier(c) != 0) {
        fprintf(stderr, "oobx-failure: rank %d: first barrier: %s\n", rank, oobx_last_error());
        return 2;
    }
    char text[2048];
    snprintf(text, sizeof(text), "%d\n", (int)getpid());
    put(dir, "ready", rank, text);
    double t = 0;
    if (strcmp(mode, "live") == 0) {
        char b[8];
        int victim = atoi(getenv("FAIL_VICTIM") ? getenv("FAIL_VICTIM") : "-1");
        int from = (rank + 1) % n;
        if (from == victim && n > 2) from = (from + 1) % n;
        rc = oobx_recv(c, from, 77, b, sizeof(b), NULL);
        t = now_s();
    } else {
        char *buf = calloc((size_t)n, 64);
        for (;;) {
            rc = oobx_allgather(c, buf, 64);
            if (rc == 0) rc = oobx_barrier(c);
            if (rc != 0) break;
        }
        t = now_s();
        free(buf);
    }
    snprintf(text, sizeof(text), "%.6f %s %s\n", t, oobx_error_name(rc), oobx_last_error());
    put(dir, "err", rank, text);
    oobx_comm_destroy(c);
    return 0;
}
