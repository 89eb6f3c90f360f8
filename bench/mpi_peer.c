/*
 * oobx-mpi-peer: the same measurements as oobx-bench, made with MPI, so that
 * oobx and the MPI libraries users already have can be put side by side.
 * Built once per MPI found (mpicc.openmpi, mpicc.mpich).
 *
 *   mpirun -n 8 build/bin/oobx-mpi-peer.openmpi --json=out.json --variant=openmpi-shm
 *          [--sizes=8,1024] [--batches=5] [--batch-ms=30] [--max-buffer=BYTES]
 *          [--window=64] [--tests=init,allgather,bcast,barrier,pingpong,stream_bw]
 *
 * Method as in oobx-bench: a warm-up gives the batch size (maximum over ranks,
 * so the same on every rank), each batch starts after a barrier, and the time
 * of a batch is the maximum over ranks. MPI_Init is timed from main() entry to
 * its return, maximum of the ends minus minimum of the starts (one machine,
 * one clock). The CPU time of an operation is the process CPU time of the
 * batches, maximum over ranks, divided by the operations (these libraries
 * poll: it is close to the real time). The JSON file has Google Benchmark's
 * layout, as oobx-bench writes it: per-operation real_time and cpu_time,
 * numbers as numbers.
 */
#include <mpi.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TAG_PING 101
#define TAG_STREAM 102
#define TAG_ACK 103

typedef struct {
    size_t sizes[64];
    int nsizes;
    int batches;
    double batch_ms;
    long max_inner;
    size_t max_buffer;
    int window;
    char tests[256];
    const char *json;
    const char *variant;
} options_t;

typedef struct {
    int rank, nranks;
    options_t opt;
    FILE *json;
    int nresults; /* entries written to the JSON file */
    int nprinted; /* lines printed on the console */
    double best; /* best batch of the last run_batches, seconds per op */
    double cpu;  /* CPU seconds per op of the last run_batches, maximum over ranks */
} peer_t;

static double realtime_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double max_over_ranks(double v)
{
    double m = 0;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

static int parse_size(const char *s, size_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return 0;
    if (*end == 'k' || *end == 'K')
        v <<= 10, end++;
    else if (*end == 'm' || *end == 'M')
        v <<= 20, end++;
    if (*end != '\0' && *end != ',')
        return 0;
    *out = (size_t)v;
    return 1;
}

static int parse_options(int argc, char **argv, options_t *o)
{
    static const size_t defaults[] = {8,     16,    64,     256,    1024,    4096,
                                      16384, 65536, 262144, 1048576, 4194304};
    memset(o, 0, sizeof *o);
    o->nsizes = (int)(sizeof defaults / sizeof defaults[0]);
    memcpy(o->sizes, defaults, sizeof defaults);
    o->batches = 5;
    o->batch_ms = 30;
    o->max_inner = 100000;
    o->max_buffer = (size_t)256 << 20;
    o->window = 64;
    snprintf(o->tests, sizeof o->tests, "init,allgather,bcast,barrier,pingpong,stream_bw");
    o->variant = "mpi";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int ok = 1;
        if (strncmp(a, "--sizes=", 8) == 0) {
            const char *p = a + 8;
            o->nsizes = 0;
            while (ok && *p && o->nsizes < 64) {
                ok = parse_size(p, &o->sizes[o->nsizes++]);
                p = strchr(p, ',');
                p = p ? p + 1 : "";
            }
            ok = ok && o->nsizes > 0;
        } else if (strncmp(a, "--batches=", 10) == 0) {
            ok = (o->batches = atoi(a + 10)) > 0;
        } else if (strncmp(a, "--batch-ms=", 11) == 0) {
            ok = (o->batch_ms = atof(a + 11)) > 0;
        } else if (strncmp(a, "--max-inner=", 12) == 0) {
            ok = (o->max_inner = atol(a + 12)) > 0;
        } else if (strncmp(a, "--max-buffer=", 13) == 0) {
            ok = parse_size(a + 13, &o->max_buffer) && o->max_buffer > 0;
        } else if (strncmp(a, "--window=", 9) == 0) {
            ok = (o->window = atoi(a + 9)) > 0;
        } else if (strncmp(a, "--tests=", 8) == 0) {
            snprintf(o->tests, sizeof o->tests, "%s", a + 8);
        } else if (strncmp(a, "--json=", 7) == 0) {
            o->json = a + 7;
        } else if (strncmp(a, "--variant=", 10) == 0) {
            o->variant = a + 10;
        } else {
            ok = 0;
        }
        if (!ok) {
            fprintf(stderr, "oobx-mpi-peer: bad option '%s'\n", a);
            return 0;
        }
    }
    return 1;
}

static int wants(const options_t *o, const char *test)
{
    size_t n = strlen(test);
    for (const char *p = o->tests; (p = strstr(p, test)) != NULL; p += n)
        if ((p == o->tests || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

typedef void (*op_fn)(peer_t *, void *);

/* Returns the mean seconds per op; *ops_out the number of timed ops. */
static double run_batches(peer_t *p, op_fn op, void *arg, long *ops_out)
{
    MPI_Barrier(MPI_COMM_WORLD);
    op(p, arg);
    /* probe with 1, 10, 100... ops until a probe lasts 2 ms: the decision is
     * taken on the maximum over ranks, so every rank takes the same */
    long probe = 1;
    double t0, warm;
    for (;;) {
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (long i = 0; i < probe; i++)
            op(p, arg);
        warm = max_over_ranks(MPI_Wtime() - t0) / (double)probe;
        if (warm * (double)probe >= 2e-3 || probe >= p->opt.max_inner)
            break;
        probe *= 10;
    }
    /* the last probe once more, the faster counting (as oobx-bench does) */
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (long i = 0; i < probe; i++)
        op(p, arg);
    double again = max_over_ranks(MPI_Wtime() - t0) / (double)probe;
    if (again < warm)
        warm = again;
    long inner = warm > 0 ? (long)(p->opt.batch_ms * 1e-3 / warm) : 1;
    if (inner < 1)
        inner = 1;
    if (inner > p->opt.max_inner)
        inner = p->opt.max_inner;
    double total = 0, cpu = 0;
    long ops = 0;
    for (int b = 0; b < p->opt.batches; b++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double c0 = cpu_s();
        t0 = MPI_Wtime();
        for (long i = 0; i < inner; i++)
            op(p, arg);
        double mine[2] = {MPI_Wtime() - t0, cpu_s() - c0}, most[2];
        MPI_Allreduce(mine, most, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double dt = most[0];
        if (b == 0 || dt / (double)inner < p->best)
            p->best = dt / (double)inner;
        total += dt;
        cpu += most[1];
        ops += inner;
    }
    *ops_out = ops;
    p->cpu = cpu / (double)ops;
    return total / (double)ops;
}

/* A time in plain units: 15.50 µs, 1.234 ms, 2.000 s */
static const char *plain_time(char *buf, size_t len, double us)
{
    const char *unit = "µs";
    if (us >= 1e6) {
        us /= 1e6;
        unit = "s";
    } else if (us >= 1000) {
        us /= 1000;
        unit = "ms";
    }
    snprintf(buf, len, us < 10 ? "%.3f %s" : us < 100 ? "%.2f %s" : "%.1f %s", us, unit);
    return buf;
}

/* s right-aligned in width columns of the terminal ("µ" is two bytes, one column) */
static void print_col(const char *s, int width)
{
    int cols = 0;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        cols += (*c & 0xc0) != 0x80;
    printf(" %*s%s", width > cols ? width - cols : 0, "", s);
}

/* One Google-Benchmark-shaped entry, printed and written to the JSON file;
 * the arguments are seconds per operation, the JSON's times microseconds. */
static void report(peer_t *p, const char *name, double time_s, double best_s, double cpu_s_op, long ops,
                   size_t bytes, int has_bytes, double algbw, double busbw, const char *extra)
{
    if (p->rank != 0)
        return;
    double us = time_s * 1e6, cpu_us = cpu_s_op * 1e6;
    char t[32], b[32], c[32];
    if (p->nprinted++ == 0)
        printf("%-24s %12s %12s %12s %12s %15s %15s\n", "benchmark", "time", "best", "cpu", "ops",
               "algbw", "busbw");
    printf("%-24s", name);
    print_col(plain_time(t, sizeof t, us), 12);
    print_col(plain_time(b, sizeof b, best_s * 1e6), 12);
    print_col(plain_time(c, sizeof c, cpu_us), 12);
    printf(" %12ld", ops);
    for (int i = 0; has_bytes && i < 2; i++) {
        double bw = i ? busbw : algbw;
        printf(bw < 0.01 ? " %10.6f GB/s" : " %10.3f GB/s", bw);
    }
    printf("\n");
    fflush(stdout);
    if (p->json == NULL)
        return;
    fprintf(p->json,
            "%s    {\n      \"name\": \"%s\",\n      \"run_name\": \"%s\",\n"
            "      \"run_type\": \"iteration\",\n      \"iterations\": %d,\n"
            "      \"real_time\": %.6f,\n      \"cpu_time\": %.6f,\n      \"time_unit\": \"us\",\n"
            "      \"ops\": %ld,\n      \"ranks\": %d,\n      \"lat_us\": %.6f,\n"
            "      \"min_us\": %.6f,\n      \"cpu_us\": %.6f",
            p->nresults ? ",\n" : "", name, name, p->opt.batches, us, cpu_us, ops, p->nranks, us,
            best_s * 1e6, cpu_us);
    if (has_bytes)
        fprintf(p->json,
                ",\n      \"bytes\": %zu,\n      \"algbw_GBps\": %.6f,\n      \"busbw_GBps\": %.6f",
                bytes, algbw, busbw);
    if (extra)
        fprintf(p->json, ",\n%s", extra);
    fprintf(p->json, "\n    }");
    fflush(p->json);
    p->nresults++;
}

static int fits(const peer_t *p, size_t size, int parts)
{
    return (double)size * parts <= (double)p->opt.max_buffer;
}

typedef struct {
    char *buf;
    size_t size;
} sized_t;

static void op_allgather(peer_t *p, void *arg)
{
    sized_t *s = arg;
    (void)p;
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, s->buf, (int)s->size, MPI_BYTE,
                  MPI_COMM_WORLD);
}

static void op_bcast(peer_t *p, void *arg)
{
    sized_t *s = arg;
    (void)p;
    MPI_Bcast(s->buf, (int)s->size, MPI_BYTE, 0, MPI_COMM_WORLD);
}

static void op_barrier(peer_t *p, void *arg)
{
    (void)p;
    (void)arg;
    MPI_Barrier(MPI_COMM_WORLD);
}

static void op_pingpong(peer_t *p, void *arg)
{
    sized_t *s = arg;
    if (p->rank == 0) {
        MPI_Send(s->buf, (int)s->size, MPI_BYTE, 1, TAG_PING, MPI_COMM_WORLD);
        MPI_Recv(s->buf, (int)s->size, MPI_BYTE, 1, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (p->rank == 1) {
        MPI_Recv(s->buf, (int)s->size, MPI_BYTE, 0, TAG_PING, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(s->buf, (int)s->size, MPI_BYTE, 0, TAG_PING, MPI_COMM_WORLD);
    }
}

/* Blocking sends, as oobx_send is: a window of messages, then one ack. */
static void op_stream(peer_t *p, void *arg)
{
    sized_t *s = arg;
    char ack[4] = {0, 0, 0, 0};
    if (p->rank == 0) {
        for (int i = 0; i < p->opt.window; i++)
            MPI_Send(s->buf, (int)s->size, MPI_BYTE, 1, TAG_STREAM, MPI_COMM_WORLD);
        MPI_Recv(ack, 4, MPI_BYTE, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (p->rank == 1) {
        for (int i = 0; i < p->opt.window; i++)
            MPI_Recv(s->buf, (int)s->size, MPI_BYTE, 0, TAG_STREAM, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        MPI_Send(ack, 4, MPI_BYTE, 0, TAG_ACK, MPI_COMM_WORLD);
    }
}

int main(int argc, char **argv)
{
    double start = realtime_s(), start_cpu = cpu_s();
    MPI_Init(&argc, &argv);
    double end = realtime_s(), init_cpu = cpu_s() - start_cpu;

    peer_t p;
    memset(&p, 0, sizeof p);
    MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p.nranks);
    if (!parse_options(argc, argv, &p.opt)) {
        MPI_Finalize();
        return 1;
    }

    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int liblen = 0;
    MPI_Get_library_version(lib, &liblen);
    char *cut = strstr(lib, "MPICH configure:");
    if (cut)
        *cut = '\0';
    for (char *c = lib; *c; c++)
        if (*c == '\n' || *c == '"' || *c == '\\' || *c == '\t')
            *c = ' ';

    if (p.rank == 0 && p.opt.json) {
        p.json = fopen(p.opt.json, "w");
        if (p.json == NULL) {
            fprintf(stderr, "oobx-mpi-peer: cannot write %s: %s\n", p.opt.json, strerror(errno));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        fprintf(p.json,
                "{\n  \"context\": {\n    \"impl\": \"mpi\",\n    \"variant\": \"%s\",\n"
                "    \"ranks\": %d,\n    \"library\": \"%s\",\n    \"batches\": %d,\n"
                "    \"batch_ms\": %g\n  },\n  \"benchmarks\": [\n",
                p.opt.variant, p.nranks, lib, p.opt.batches, p.opt.batch_ms);
    }
    if (p.rank == 0)
        printf("oobx-mpi-peer: %s, %d ranks, %s\n", p.opt.variant, p.nranks, lib);

    /* MPI_Init: maximum of the ends minus minimum of the starts */
    double min_start = 0, max_end = 0;
    MPI_Reduce(&start, &min_start, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(&end, &max_end, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    init_cpu = max_over_ranks(init_cpu);
    if (wants(&p.opt, "init"))
        report(&p, "mpi_init", max_end - min_start, max_end - min_start, init_cpu, 1, 0, 0, 0, 0, NULL);

    const int n = p.nranks;
    char name[64];
    for (int i = 0; i < p.opt.nsizes && wants(&p.opt, "allgather"); i++) {
        size_t size = p.opt.sizes[i];
        if (!fits(&p, size, n))
            continue;
        sized_t s = {calloc((size_t)n, size ? size : 1), size};
        long ops;
        double t = run_batches(&p, op_allgather, &s, &ops);
        double algbw = (double)n * (double)size / t / 1e9;
        snprintf(name, sizeof name, "allgather/%zu", size);
        report(&p, name, t, p.best, p.cpu, ops, size, 1, algbw, algbw * (n - 1) / n, NULL);
        free(s.buf);
    }
    for (int i = 0; i < p.opt.nsizes && wants(&p.opt, "bcast"); i++) {
        size_t size = p.opt.sizes[i];
        if (!fits(&p, size, 1))
            continue;
        sized_t s = {calloc(1, size ? size : 1), size};
        long ops;
        double t = run_batches(&p, op_bcast, &s, &ops);
        double algbw = (double)size / t / 1e9;
        snprintf(name, sizeof name, "bcast/%zu", size);
        report(&p, name, t, p.best, p.cpu, ops, size, 1, algbw, algbw, NULL);
        free(s.buf);
    }
    if (wants(&p.opt, "barrier")) {
        long ops;
        double t = run_batches(&p, op_barrier, NULL, &ops);
        report(&p, "barrier", t, p.best, p.cpu, ops, 0, 0, 0, 0, NULL);
    }
    for (int i = 0; i < p.opt.nsizes && n >= 2 && wants(&p.opt, "pingpong"); i++) {
        size_t size = p.opt.sizes[i];
        if (!fits(&p, size, 1))
            continue;
        sized_t s = {calloc(1, size ? size : 1), size};
        long ops;
        double rtt = run_batches(&p, op_pingpong, &s, &ops);
        double bw = (double)size / (rtt / 2) / 1e9;
        char extra[64];
        snprintf(extra, sizeof extra, "      \"rtt_us\": %.6f", rtt * 1e6);
        snprintf(name, sizeof name, "pingpong/%zu", size);
        report(&p, name, rtt / 2, p.best / 2, p.cpu / 2, ops, size, 1, bw, bw, extra);
        free(s.buf);
    }
    for (int i = 0; i < p.opt.nsizes && n >= 2 && wants(&p.opt, "stream_bw"); i++) {
        size_t size = p.opt.sizes[i];
        if (!fits(&p, size, p.opt.window))
            continue;
        sized_t s = {calloc(1, size ? size : 1), size};
        long ops;
        double t = run_batches(&p, op_stream, &s, &ops) / p.opt.window;
        double bw = (double)size / t / 1e9;
        char extra[64];
        snprintf(extra, sizeof extra, "      \"window\": %d", p.opt.window);
        snprintf(name, sizeof name, "stream_bw/%zu", size);
        report(&p, name, t, p.best / p.opt.window, p.cpu / p.opt.window, ops, size, 1, bw, bw, extra);
        free(s.buf);
    }

    if (p.json) {
        fprintf(p.json, "\n  ]\n}\n");
        fclose(p.json);
    }
    MPI_Finalize();
    return 0;
}
