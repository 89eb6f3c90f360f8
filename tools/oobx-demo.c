/*
 * oobx-demo: run under a launcher (oobx-run -n 8 -- oobx-demo). Every rank
 * joins from the environment; rank 0 prints how long each phase of init took,
 * allgather latency at a few sizes, the p2p round trip between ranks 0 and 1
 * next to a plain TCP round trip between the same two processes, and barrier
 * latency. Times are the slowest rank's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "oobx_debug.h"
#include "oobx.h"

#define DEMO_TAG_PORT 7001
#define DEMO_TAG_PING 7002
#define DEMO_PING_ITERS 500
#define DEMO_BARRIER_ITERS 200
#define DEMO_WARMUP 10
#define DEMO_AG_BUDGET (80u << 20)  /* bytes a rank gathers per size: caps the calls at large N */
#define DEMO_AG_MAX_BUF (32u << 20)  /* larger gathers are skipped (N local ranks hold N of them) */

typedef struct demo {
    oobx_comm_t comm;
    int rank;
    int nranks;
} demo_t;

static const struct {
    size_t bytes;
    int iters;
    const char *label;
} ag_sizes[] = {
    {8, 200, "8 B"}, {64, 200, "64 B"}, {1024, 200, "1 KiB"}, {65536, 50, "64 KiB"}, {1 << 20, 10, "1 MiB"},
};
#define NSIZES (sizeof ag_sizes / sizeof ag_sizes[0])

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const demo_t *d, const char *what, int rc)
{
    if (d && d->rank >= 0)
        fprintf(stderr, "oobx-demo rank %d: %s: %s (%s)\n", d->rank, what, oobx_strerror(rc), oobx_last_error());
    else
        fprintf(stderr, "oobx-demo: %s: %s (%s)\n", what, oobx_strerror(rc), oobx_last_error());
    exit(1);
}

static void die_errno(const demo_t *d, const char *what)
{
    fprintf(stderr, "oobx-demo rank %d: %s: %s\n", d->rank, what, strerror(errno));
    exit(1);
}

#define CHECK(d, call)                                  \
    do {                                                \
        int rc_ = (call);                               \
        if (rc_ != OOBX_SUCCESS) die((d), #call, rc_);  \
    } while (0)

/* The largest of each of n values over all ranks (all ranks get it). */
static void max_over_ranks(demo_t *d, double *v, int n)
{
    size_t slice = (size_t)n * sizeof(double);
    double *all = calloc((size_t)d->nranks, slice);
    if (!all) die(d, "calloc", OOBX_ERR_NOMEM);
    memcpy((char *)all + (size_t)d->rank * slice, v, slice);
    CHECK(d, oobx_allgather(d->comm, all, slice));
    for (int r = 0; r < d->nranks; r++)
        for (int i = 0; i < n; i++)
            if (all[(size_t)r * (size_t)n + (size_t)i] > v[i]) v[i] = all[(size_t)r * (size_t)n + (size_t)i];
    free(all);
}

/* The counts are for 8 ranks; with more, collectives get fewer calls (at least min). */
static int scaled_iters(const demo_t *d, int iters, int min)
{
    if (d->nranks <= 8) return iters;
    long n = (long)iters * 8 / d->nranks;
    return n < min ? min : (int)n;
}

/* Calls at this size: the fixed count, fewer with many ranks or a large gathered total. */
static int allgather_iters(const demo_t *d, size_t i)
{
    size_t total = ag_sizes[i].bytes * (size_t)d->nranks;
    if (total > DEMO_AG_MAX_BUF) return 0;
    size_t cap = DEMO_AG_BUDGET / total;
    if (cap < 2) cap = 2;
    int iters = scaled_iters(d, ag_sizes[i].iters, 5);
    return (size_t)iters < cap ? iters : (int)cap;
}

/* Average seconds of one allgather of bytes per rank; checks the data once. */
static double time_allgather(demo_t *d, size_t bytes, int iters)
{
    unsigned char *buf = malloc(bytes * (size_t)d->nranks);
    if (!buf) die(d, "malloc", OOBX_ERR_NOMEM);
    memset(buf, 0, bytes * (size_t)d->nranks);
    memset(buf + bytes * (size_t)d->rank, 'A' + d->rank % 26, bytes);
    CHECK(d, oobx_allgather(d->comm, buf, bytes));
    for (int r = 0; r < d->nranks; r++) {
        const unsigned char *p = buf + bytes * (size_t)r;
        if (p[0] != 'A' + r % 26 || p[bytes - 1] != 'A' + r % 26) {
            fprintf(stderr, "oobx-demo rank %d: allgather of %zu B: slice of rank %d is wrong\n", d->rank,
                    bytes, r);
            exit(1);
        }
    }
    int warmup = iters / 2 < DEMO_WARMUP / 2 ? iters / 2 : DEMO_WARMUP / 2;
    for (int i = 0; i < warmup; i++) CHECK(d, oobx_allgather(d->comm, buf, bytes));
    CHECK(d, oobx_barrier(d->comm));
    double t0 = now_s();
    for (int i = 0; i < iters; i++) CHECK(d, oobx_allgather(d->comm, buf, bytes));
    double t = (now_s() - t0) / iters;
    free(buf);
    return t;
}

static double time_barrier(demo_t *d, int iters)
{
    for (int i = 0; i < DEMO_WARMUP; i++) CHECK(d, oobx_barrier(d->comm));
    double t0 = now_s();
    for (int i = 0; i < iters; i++) CHECK(d, oobx_barrier(d->comm));
    return (now_s() - t0) / iters;
}

/* Round trip of 8 bytes between ranks 0 and 1 over oobx p2p; 0 elsewhere. */
static double time_p2p(demo_t *d)
{
    uint64_t v = 0;
    double t = 0;
    if (d->rank > 1) return 0;
    int peer = 1 - d->rank;
    for (int i = 0; i < DEMO_WARMUP + DEMO_PING_ITERS; i++) {
        if (i == DEMO_WARMUP) t = now_s();
        if (d->rank == 0) {
            v = (uint64_t)i;
            CHECK(d, oobx_send(d->comm, peer, DEMO_TAG_PING, &v, sizeof v));
            CHECK(d, oobx_recv(d->comm, peer, DEMO_TAG_PING, &v, sizeof v, NULL));
            if (v != (uint64_t)i + 1) {
                fprintf(stderr, "oobx-demo rank 0: ping %d came back as %llu\n", i, (unsigned long long)v);
                exit(1);
            }
        } else {
            CHECK(d, oobx_recv(d->comm, peer, DEMO_TAG_PING, &v, sizeof v, NULL));
            v++;
            CHECK(d, oobx_send(d->comm, peer, DEMO_TAG_PING, &v, sizeof v));
        }
    }
    return (now_s() - t) / DEMO_PING_ITERS;
}

static void full_io(demo_t *d, int fd, void *buf, size_t n, int writing)
{
    char *p = buf;
    while (n > 0) {
        ssize_t k = writing ? write(fd, p, n) : read(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = ECONNRESET;
            die_errno(d, writing ? "tcp reference: write" : "tcp reference: read");
        }
        p += k;
        n -= (size_t)k;
    }
}

/* The same ping-pong over a TCP connection of its own on 127.0.0.1, blocking
 * reads and TCP_NODELAY: what the p2p figure compares with. */
static double time_tcp(demo_t *d)
{
    int fd = -1, one = 1;
    uint32_t port = 0;
    double t = 0;
    if (d->rank > 1) return 0;
    if (d->rank == 0) {
        int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t sl = sizeof sa;
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 1) ||
            getsockname(lfd, (struct sockaddr *)&sa, &sl))
            die_errno(d, "tcp reference: listen on 127.0.0.1");
        port = ntohs(sa.sin_port);
        CHECK(d, oobx_send(d->comm, 1, DEMO_TAG_PORT, &port, sizeof port));
        fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) die_errno(d, "tcp reference: accept");
        close(lfd);
    } else {
        CHECK(d, oobx_recv(d->comm, 0, DEMO_TAG_PORT, &port, sizeof port, NULL));
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa))
            die_errno(d, "tcp reference: connect to 127.0.0.1");
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    uint64_t v = 0;
    for (int i = 0; i < DEMO_WARMUP + DEMO_PING_ITERS; i++) {
        if (i == DEMO_WARMUP) t = now_s();
        if (d->rank == 0) {
            full_io(d, fd, &v, sizeof v, 1);
            full_io(d, fd, &v, sizeof v, 0);
        } else {
            full_io(d, fd, &v, sizeof v, 0);
            v++;
            full_io(d, fd, &v, sizeof v, 1);
        }
    }
    t = (now_s() - t) / DEMO_PING_ITERS;
    close(fd);
    return t;
}

int main(void)
{
    demo_t d = {.comm = NULL, .rank = -1, .nranks = 0};
    double t_start = now_s();
    int rc = oobx_comm_init_from_env(&d.comm, NULL);
    double t_init = now_s() - t_start;
    if (rc != OOBX_SUCCESS) die(&d, "oobx_comm_init_from_env", rc);
    CHECK(&d, oobx_comm_rank(d.comm, &d.rank));
    CHECK(&d, oobx_comm_size(d.comm, &d.nranks));

    oobx_init_timings_t it = OOBX_INIT_TIMINGS_INIT;
    CHECK(&d, oobx_comm_get_init_timings(d.comm, &it));
    double phases[7] = {it.total, it.create, it.delay, it.root, it.ring, it.allgather, t_init};
    max_over_ranks(&d, phases, 7);

    double ag[NSIZES];
    int ag_iters[NSIZES];
    for (size_t i = 0; i < NSIZES; i++) {
        ag_iters[i] = allgather_iters(&d, i);
        ag[i] = ag_iters[i] ? time_allgather(&d, ag_sizes[i].bytes, ag_iters[i]) : 0;
    }
    max_over_ranks(&d, ag, (int)NSIZES);

    CHECK(&d, oobx_barrier(d.comm));
    double p2p = d.nranks > 1 ? time_p2p(&d) : 0;
    CHECK(&d, oobx_barrier(d.comm));
    double tcp = d.nranks > 1 ? time_tcp(&d) : 0;
    CHECK(&d, oobx_barrier(d.comm));
    int bar_iters = scaled_iters(&d, DEMO_BARRIER_ITERS, 10);
    double bar = time_barrier(&d, bar_iters);
    double rest[3] = {p2p, tcp, bar};
    max_over_ranks(&d, rest, 3);

    if (d.rank == 0) {
        const char *cid = getenv("OOBX_COMM_ID");
        int nroots = 1;
        for (const char *p = cid; p && *p; p++) nroots += *p == ',';
        printf("oobx %s demo: %d ranks, %d root%s, transport %s\n", oobx_version(), d.nranks, nroots,
               nroots == 1 ? "" : "s", oobx_comm_transport(d.comm));
        printf("  init phases (ms, slowest rank of each phase)\n");
        static const char *const names[7] = {"total",     "create", "delay", "root",
                                             "ring",      "address allgather",
                                             "total as seen by the caller"};
        for (int i = 0; i < 7; i++) printf("    %-30s %10.2f\n", names[i], phases[i] * 1e3);
        printf("  allgather (us per call, slowest rank)\n");
        printf("    %-10s %8s %12s %18s\n", "per rank", "calls", "latency", "MB/s into a rank");
        for (size_t i = 0; i < NSIZES; i++) {
            if (!ag_iters[i]) {
                printf("    %-10s   skipped: %zu MiB per rank\n", ag_sizes[i].label,
                       ag_sizes[i].bytes * (size_t)d.nranks >> 20);
                continue;
            }
            printf("    %-10s %8d %12.1f %18.1f\n", ag_sizes[i].label, ag_iters[i], ag[i] * 1e6,
                   (double)ag_sizes[i].bytes * (d.nranks - 1) / ag[i] / 1e6);
        }
        if (d.nranks > 1) {
            printf("  p2p round trip, 8 B, rank 0 <-> rank 1 (us)\n");
            printf("    %-30s %10.1f\n", "oobx_send/oobx_recv", p2p * 1e6);
            printf("    %-30s %10.1f\n", "plain TCP on 127.0.0.1", tcp * 1e6);
        }
        char label[64];
        snprintf(label, sizeof label, "barrier, %d calls (us, slowest)", bar_iters);
        printf("  %-32s %10.1f\n", label, bar * 1e6);
        fflush(stdout);
    }
    CHECK(&d, oobx_comm_destroy(d.comm));
    return 0;
}
