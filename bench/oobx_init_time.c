/*
 * oobx-init-time: start-up time of one job, from all processes started to all
 * ranks through oobx_comm_init_from_env.
 *
 *   oobx-run -n 1024 --roots 4 -- build/bin/oobx-init-time [--label=NAME]
 *
 * Each rank reads CLOCK_REALTIME at main() entry and after init (one machine,
 * one clock), then the ranks allgather their times and phase timings and
 * rank 0 prints one JSON line: wall = max(after init) - min(start), the spread
 * of the starts, and each init phase as maximum and mean over ranks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "oobx.h"
#include "oobx_debug.h"

enum { F_START, F_END, F_TOTAL, F_CREATE, F_DELAY, F_ROOT, F_RING, F_ALLGATHER, F_COUNT };

static const char *const field_names[F_COUNT] = {"start", "end",  "total", "create",
                                                 "delay", "root", "ring",  "allgather"};

static double realtime_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int count_roots(void)
{
    const char *id = getenv("OOBX_COMM_ID");
    int n = 1;
    if (id == NULL || *id == '\0')
        return 1;
    for (const char *p = id; *p; p++)
        n += *p == ',';
    return n;
}

int main(int argc, char **argv)
{
    double start = realtime_s();
    const char *label = "";
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--label=", 8) == 0) {
            label = argv[i] + 8;
        } else {
            fprintf(stderr, "oobx-init-time: unknown option '%s' (known: --label=NAME)\n", argv[i]);
            return 1;
        }
    }

    oobx_comm_t comm = NULL;
    int rc = oobx_comm_init_from_env(&comm, NULL);
    double end = realtime_s();
    if (rc != OOBX_SUCCESS) {
        fprintf(stderr, "oobx-init-time: rank %s: init failed: %s: %s\n",
                getenv("OOBX_RANK") ? getenv("OOBX_RANK") : "?", oobx_error_name(rc),
                oobx_last_error());
        return 2;
    }
    int rank = 0, n = 1;
    oobx_comm_rank(comm, &rank);
    oobx_comm_size(comm, &n);

    oobx_init_timings_t t = OOBX_INIT_TIMINGS_INIT;
    rc = oobx_comm_get_init_timings(comm, &t);
    if (rc != OOBX_SUCCESS)
        fprintf(stderr, "oobx-init-time: rank %d: no init timings: %s\n", rank, oobx_error_name(rc));

    double *all = calloc((size_t)n * F_COUNT, sizeof(double));
    if (all == NULL) {
        fprintf(stderr, "oobx-init-time: rank %d: out of memory\n", rank);
        return 2;
    }
    double *mine = all + (size_t)rank * F_COUNT;
    mine[F_START] = start;
    mine[F_END] = end;
    mine[F_TOTAL] = t.total;
    mine[F_CREATE] = t.create;
    mine[F_DELAY] = t.delay;
    mine[F_ROOT] = t.root;
    mine[F_RING] = t.ring;
    mine[F_ALLGATHER] = t.allgather;
    rc = oobx_allgather(comm, all, F_COUNT * sizeof(double));
    if (rc != OOBX_SUCCESS) {
        fprintf(stderr, "oobx-init-time: rank %d: allgather of the timings failed: %s: %s\n", rank,
                oobx_error_name(rc), oobx_last_error());
        return 2;
    }

    if (rank == 0) {
        double mx[F_COUNT], mn[F_COUNT], sum[F_COUNT];
        for (int f = 0; f < F_COUNT; f++) {
            mx[f] = -1e300;
            mn[f] = 1e300;
            sum[f] = 0;
        }
        double init_max = 0, init_sum = 0;
        for (int r = 0; r < n; r++) {
            const double *v = all + (size_t)r * F_COUNT;
            for (int f = 0; f < F_COUNT; f++) {
                mx[f] = v[f] > mx[f] ? v[f] : mx[f];
                mn[f] = v[f] < mn[f] ? v[f] : mn[f];
                sum[f] += v[f];
            }
            double d = v[F_END] - v[F_START];
            init_max = d > init_max ? d : init_max;
            init_sum += d;
        }
        const char *tr = oobx_comm_transport(comm);
        printf("OOBX_INIT_RESULT {\"label\": \"%s\", \"transport\": \"%s\", \"ranks\": %d, "
               "\"roots\": %d, \"wall_s\": %.6f, \"start_spread_s\": %.6f, "
               "\"init_max_s\": %.6f, \"init_mean_s\": %.6f",
               label, tr ? tr : "?", n, count_roots(), mx[F_END] - mn[F_START],
               mx[F_START] - mn[F_START], init_max, init_sum / n);
        for (int f = F_TOTAL; f < F_COUNT; f++)
            printf(", \"%s_max_s\": %.6f, \"%s_mean_s\": %.6f", field_names[f], mx[f],
                   field_names[f], sum[f] / n);
        printf("}\n");
        fflush(stdout);
    }
    free(all);
    rc = oobx_comm_destroy(comm);
    return rc == OOBX_SUCCESS ? 0 : 2;
}
