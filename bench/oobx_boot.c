/*
 * oobx-boot: the start-up benchmark. Every rank waits for a common instant
 * (OOBX_BOOT_AT, seconds of CLOCK_REALTIME; unset: no wait), then runs
 * oobx_comm_init_from_env and one allgather of a 128-byte card per rank,
 * checked byte for byte. Bootstrap = the slowest rank's end minus the common
 * instant. After a barrier (so that no rank's untimed work takes CPU from a
 * rank still timed, where ranks outnumber cores), the ranks gather their phase timings, open
 * fds and resident memory, and rank 0 prints one JSON line:
 *
 *   OOBX_BOOT_RESULT {"ranks": N, "roots": R, "hosts": H, "boot_s": ..., "late_starts": ...,
 *                     "<phase>_max_s": ..., "<phase>_mean_s": ..., "fds_max": ..., "rss_max_mib": ...,
 *                     "cpu_mean_ms": ..., with its parts: "cpu_init_mean_ms", "cpu_allgather_mean_ms",
 *                     "cpu_check_mean_ms" (this program's check), user and system time, context
 *                     switches (voluntary, involuntary) and minor page faults per rank,
 *                     "cross_s": the cross-host part on the critical path (below)}
 *
 *   OOBX_BOOT_AT=$(date +%s.%N -d '+5 sec') oobx-run -n 4096 -r 16 -- oobx-boot [--label=NAME] [--table]
 *
 * --table takes the cards with oobx_allgather_table instead: the host's
 * shared table, checked where it lies, no copy into each rank.
 *
 * cross_s (hosts > 1, node-aware): the end of the last leader's trade
 * (oobx_init_timings_t.trade: the trade and its check of the cards, up to
 * waking its host's ranks) minus the moment the last host was ready (its
 * leader held every card of its ranks). A rank's "exchange" phase also
 * holds its wait for the slowest host; cross_s is the cross-host work left
 * once every host is ready. The host's ranks taking the result after it is
 * local work (in "cards" and "total"). All instants count from the start
 * of the rank's timed init (oobx_init_timings_t.total), which on a host with
 * fewer cores than ranks can be well after the common instant. Until
 * 2026-12-07's fifteenth session they counted from the call of
 * oobx_comm_init_from_env, whose own work before the timed init
 * (environment, settings, libsodium) and any wait for a core there are in
 * no phase: a leader's instants came early by that much ("pre", per rank).
 * cross_init_s (what cross_s was before
 * 2026-12-06's fifth session): to the last leader's end of init instead,
 * after it woke its host's ranks, which on such a host waits for the CPU
 * those ranks take.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/resource.h>

#include "oobx.h"
#include "oobx_debug.h"

#define CARD 128

enum {
    F_START, F_END, F_TOTAL, F_CREATE, F_DELAY, F_ROOT, F_LOCAL, F_EXCHANGE, F_CARDS, F_FDS, F_RSS, F_CPU,
    F_CPU_INIT, F_CPU_AG, F_CPU_CHECK, F_USER, F_SYS, F_VCSW, F_IVCSW, F_MINFLT, F_READY, F_LEAD_END, F_TRADE_END, F_PRE, F_COUNT
};
static const char *const names[F_COUNT] = {"start", "end",  "total", "create",   "delay", "root",
                                           "local", "exchange", "cards", "fds", "rss", "cpu",
                                           "cpu_init", "cpu_ag", "cpu_check", "user", "sys", "vcsw", "ivcsw", "minflt",
                                           "host_ready", "leader_end", "trade_end", "pre"};

/* what getrusage says of this process, as doubles: user s, system s, voluntary
 * and involuntary context switches, minor faults */
static void usage_now(double u[5])
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    u[0] = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6;
    u[1] = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
    u[2] = (double)ru.ru_nvcsw;
    u[3] = (double)ru.ru_nivcsw;
    u[4] = (double)ru.ru_minflt;
}

/* CPU seconds (user + system) this process used so far */
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double rss_mib(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

/* A rank's card: byte i is (r * 131 + i * 7 + (r >> 8)) mod 256, that is a
 * per-rank base added to a fixed step pattern. */
static unsigned char card_base(int r)
{
    return (unsigned char)(r * 131 + (r >> 8));
}

static void card_of(int r, unsigned char *c)
{
    for (int i = 0; i < CARD; i++) c[i] = (unsigned char)(card_base(r) + i * 7);
}

/* The first rank whose card is wrong, or -1. Eight bytes at a time: the
 * step pattern plus the base in every byte, added without carries between
 * bytes, against the word received. */
static int first_bad_card(const unsigned char *cards, int n)
{
    const uint64_t lo7 = 0x7f7f7f7f7f7f7f7full, hi = 0x8080808080808080ull;
    uint64_t step[CARD / 8];
    unsigned char s[CARD];
    for (int i = 0; i < CARD; i++) s[i] = (unsigned char)(i * 7);
    memcpy(step, s, sizeof(step));
    for (int r = 0; r < n; r++) {
        uint64_t b = 0x0101010101010101ull * card_base(r), diff = 0;
        const unsigned char *c = cards + (size_t)r * CARD;
        for (int w = 0; w < CARD / 8; w++) {
            uint64_t got, want = ((step[w] & lo7) + (b & lo7)) ^ ((step[w] ^ b) & hi);
            memcpy(&got, c + 8 * w, 8);
            diff |= got ^ want;
        }
        if (diff) return r;
    }
    return -1;
}

int main(int argc, char **argv)
{
    const char *label = "", *dump = NULL;
    int table = 0;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--label=", 8)) label = argv[i] + 8;
        else if (!strncmp(argv[i], "--dump=", 7)) dump = argv[i] + 7;
        else if (!strcmp(argv[i], "--table")) table = 1;
        else if (!strcmp(argv[i], "--help")) {
            printf("usage: OOBX_BOOT_AT=<epoch s> oobx-run -n N [-r R] -- oobx-boot [--label=NAME] [--dump=FILE] [--table]\n"
                   "  --table      the cards through oobx_allgather_table (one table a host, no copy a rank)\n"
                   "  --dump=FILE  rank 0 also writes every rank's figures to FILE (CSV, one row per rank)\n");
            return 0;
        } else {
            fprintf(stderr, "oobx-boot: unknown option '%s'\n", argv[i]);
            return 1;
        }
    }
    const char *at = getenv("OOBX_BOOT_AT");
    double t0 = at ? atof(at) : now_s(), start = now_s();
    int late = start > t0;
    while (!late && now_s() < t0) {
        double left = t0 - now_s();
        struct timespec ts = {.tv_sec = (time_t)left, .tv_nsec = (long)((left - (double)(time_t)left) * 1e9)};
        nanosleep(&ts, NULL);
    }
    double begin = late ? start : t0, cpu0 = cpu_s();
    double use0[5], use1[5];
    usage_now(use0);

    oobx_comm_t comm;
    double init_at = now_s(); /* later than begin where ranks outnumber cores: the wake-up waits for a core */
    int rc = oobx_comm_init_from_env(&comm, NULL);
    double init_ret = now_s();
    if (rc) {
        fprintf(stderr, "oobx-boot: init: %s: %s\n", oobx_error_name(rc), oobx_last_error());
        return 2;
    }
    double cpu_init = cpu_s() - cpu0;
    int rank, n;
    oobx_comm_rank(comm, &rank);
    oobx_comm_size(comm, &n);
    unsigned char *cards = NULL;
    const void *shared = NULL;
    if (table) {
        unsigned char card[CARD];
        card_of(rank, card);
        rc = oobx_allgather_table(comm, card, CARD, &shared);
    } else {
        cards = malloc((size_t)n * CARD);
        if (!cards) return 2;
        card_of(rank, cards + (size_t)rank * CARD);
        rc = oobx_allgather(comm, cards, CARD);
    }
    double end = now_s();
    double cpu_ag = cpu_s() - cpu0 - cpu_init;
    if (rc) {
        fprintf(stderr, "oobx-boot: rank %d: allgather: %s\n", rank, oobx_last_error());
        return 2;
    }
    int bad = first_bad_card(table ? shared : cards, n);
    if (bad >= 0) {
        fprintf(stderr, "oobx-boot: rank %d: the card of rank %d is wrong\n", rank, bad);
        return 3;
    }
    double cpu_verify = cpu_s() - cpu0 - cpu_init - cpu_ag;
    /* nothing untimed (the result's gather below, freeing the cards) runs
     * while another rank is still in its timed part: on a host with fewer
     * cores than ranks it would take their CPU */
    rc = oobx_barrier(comm);
    if (rc) {
        fprintf(stderr, "oobx-boot: rank %d: barrier: %s\n", rank, oobx_last_error());
        return 2;
    }
    free(cards);
    oobx_allgather_table_release(comm, shared);

    oobx_init_timings_t t = OOBX_INIT_TIMINGS_INIT;
    oobx_comm_get_init_timings(comm, &t);
    double mine[F_COUNT] = {0};
    mine[F_START] = begin - t0; /* > 0: started late */
    mine[F_END] = end - t0;
    mine[F_TOTAL] = t.total;
    mine[F_CREATE] = t.create;
    mine[F_DELAY] = t.delay;
    mine[F_ROOT] = t.root;
    mine[F_LOCAL] = t.local;
    mine[F_EXCHANGE] = t.allgather - t.local;
    mine[F_CARDS] = end - begin - t.total;
    mine[F_FDS] = oobx_debug_count_fds();
    mine[F_RSS] = rss_mib();
    mine[F_CPU] = cpu_s() - cpu0; /* init and the checked allgather */
    usage_now(use1);
    mine[F_CPU_INIT] = cpu_init;
    mine[F_CPU_AG] = cpu_ag;
    mine[F_CPU_CHECK] = cpu_verify; /* this program's own check of the cards */
    for (int k = 0; k < 5; k++) mine[F_USER + k] = use1[k] - use0[k];
    /* the timed init (t.total) is not the whole call: reading the launcher's
     * environment and the settings, starting libsodium come before it, and
     * where ranks outnumber cores the rank can wait for a core in between;
     * the instants below count from the timed init's own start, and "pre"
     * is the rest of the call */
    double init_begin = init_ret - t.total - t0;
    mine[F_PRE] = init_ret - init_at - t.total;
    /* leaders only (-1 elsewhere), from the common instant: when this
     * rank's host was ready for the leaders' exchange, and its init's end */
    mine[F_READY] = t.leader ? init_begin + t.create + t.delay + t.root + t.local : -1;
    mine[F_LEAD_END] = t.leader ? init_begin + t.total : -1;
    mine[F_TRADE_END] = t.leader ? mine[F_READY] + t.trade : -1;
    /* rank 0 alone reads them: one table a host, not a copy a rank (at
     * 10,240 ranks a copy a rank would be 1.8 MB each) */
    const void *tbl = NULL;
    rc = oobx_allgather_table(comm, mine, sizeof(mine), &tbl);
    const double *all = tbl;
    if (rc == 0 && rank == 0) {
        double mx[F_COUNT], sum[F_COUNT];
        int lates = 0;
        for (int f = 0; f < F_COUNT; f++) mx[f] = -1e300, sum[f] = 0;
        for (int r = 0; r < n; r++)
            for (int f = 0; f < F_COUNT; f++) {
                double v = all[(size_t)r * F_COUNT + f];
                if (v > mx[f]) mx[f] = v;
                sum[f] += v;
                if (f == F_START && v > 0) lates++;
            }
        /* the cross-host part on the critical path: from the moment the last
         * host was ready (its leader had every card of its ranks) to the end
         * of the last leader's trade (its check of the cards included); what
         * waiting for the slowest host costs the others is not in it, nor
         * each host's ranks taking the result. cross_init_s (cross_s before
         * 2026-12-06's fifth session) runs to the end of the last leader's
         * init instead, after it woke its host's ranks: on a machine with
         * fewer cores than ranks that holds the wait for CPU those ranks
         * take */
        double cross = mx[F_READY] >= 0 && t.hosts > 1 ? mx[F_TRADE_END] - mx[F_READY] : 0;
        double cross_init = mx[F_READY] >= 0 && t.hosts > 1 ? mx[F_LEAD_END] - mx[F_READY] : 0;
        const char *roots = getenv("OOBX_COMM_ID");
        int nroots = 1;
        for (const char *p = roots ? roots : ""; *p; p++) nroots += *p == ',';
        printf("OOBX_BOOT_RESULT {\"label\": \"%s\", \"transport\": \"%s\", \"table\": %d, \"ranks\": %d, \"roots\": %d, "
               "\"hosts\": %d, \"ranks_per_host_rank0\": %d, \"boot_s\": %.6f, \"late_starts\": %d, "
               "\"late_max_s\": %.6f",
               label, oobx_comm_transport(comm), table, n, nroots, t.hosts, t.local_ranks, mx[F_END], lates,
               mx[F_START] > 0 ? mx[F_START] : 0.0);
        for (int f = F_TOTAL; f < F_FDS; f++)
            printf(", \"%s_max_s\": %.6f, \"%s_mean_s\": %.6f", names[f], mx[f], names[f], sum[f] / n);
        printf(", \"fds_max\": %d, \"fds_mean\": %.1f, \"rss_max_mib\": %.2f, \"rss_mean_mib\": %.2f, "
               "\"cpu_max_ms\": %.3f, \"cpu_mean_ms\": %.3f, \"cpu_init_mean_ms\": %.3f, \"cpu_allgather_mean_ms\": %.3f, \"cpu_check_mean_ms\": %.3f, \"cpu_user_mean_ms\": %.3f, "
               "\"cpu_sys_mean_ms\": %.3f, \"vcsw_mean\": %.1f, \"ivcsw_mean\": %.1f, \"minflt_mean\": %.1f, "
               "\"cross_s\": %.6f, \"cross_init_s\": %.6f, \"pre_max_s\": %.6f, \"pre_mean_s\": %.6f}\n",
               (int)mx[F_FDS], sum[F_FDS] / n, mx[F_RSS], sum[F_RSS] / n, mx[F_CPU] * 1e3, sum[F_CPU] / n * 1e3,
               sum[F_CPU_INIT] / n * 1e3, sum[F_CPU_AG] / n * 1e3, sum[F_CPU_CHECK] / n * 1e3, sum[F_USER] / n * 1e3, sum[F_SYS] / n * 1e3, sum[F_VCSW] / n,
               sum[F_IVCSW] / n, sum[F_MINFLT] / n, cross, cross_init, mx[F_PRE], sum[F_PRE] / n);
        fflush(stdout);
        FILE *f = dump ? fopen(dump, "w") : NULL;
        if (dump && !f) fprintf(stderr, "oobx-boot: cannot write %s\n", dump);
        if (f) {
            fprintf(f, "rank");
            for (int k = 0; k < F_COUNT; k++) fprintf(f, ",%s", names[k]);
            fprintf(f, "\n");
            for (int r = 0; r < n; r++) {
                fprintf(f, "%d", r);
                for (int k = 0; k < F_COUNT; k++) fprintf(f, ",%.6g", all[(size_t)r * F_COUNT + k]);
                fprintf(f, "\n");
            }
            fclose(f);
        }
    }
    if (rc != 0) fprintf(stderr, "oobx-boot: rank %d: gather of the figures: %s\n", rank, oobx_last_error());
    oobx_allgather_table_release(comm, tbl);
    oobx_comm_destroy(comm);
    return rc ? 2 : 0;
}
