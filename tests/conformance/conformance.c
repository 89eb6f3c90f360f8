/*
 * The conformance suite: every public call at several job sizes and root
 * counts, over the transport named by OOBX_TRANSPORT (socket by default).
 * Each case runs as one job of forked ranks (tests/harness.h).
 *
 *   OOBX_TEST_SCALE=small|normal|long   sizes (small: sanitizer runs)
 *   OOBX_TEST_MAX_RANKS=N               cases with more ranks are skipped
 *   OOBX_TEST_FILTER=glob               only the cases whose name matches
 */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/userfaultfd.h>
#endif

#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "oobx_debug.h"

#define OOBX_MAX(a, b) ((a) > (b) ? (a) : (b))

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)
#define GiB (MiB * 1024)
#define MAX_SIZES 8
#define MAX_CASES 256
#define OOBX_ARRAY_SIZE_(a) (sizeof(a) / sizeof((a)[0]))

typedef struct conf_params {
    size_t sizes[MAX_SIZES];
    int nsizes;
    int threads;     /* threads per rank (p2p threads, comms per process) */
    int count;       /* messages, cycles */
    int ncomms;      /* comms per process */
    oobx_unique_id_t ids[8]; /* ids made by the parent for several comms */
} conf_params_t;

typedef struct conf_suite conf_suite_t;

typedef struct conf_case {
    char name[96];
    harness_job_opts_t job;
    const char *env[4];
    char envbuf[2][96];
    conf_params_t p;
    const conf_suite_t *suite;
    int (*prepare)(struct conf_case *c, char *why, size_t len); /* in the parent, before the job */
} conf_case_t;

struct conf_suite {
    int scale;
    int max_ranks;
    const char *transport;
    int unavailable;         /* the probe found the transport unusable */
    int available;           /* the probe ran a communicator on it */
    char why[4096];
    conf_case_t *cases; /* MAX_CASES, never moved: jobs point into them */
    int ncases;
};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void *xmalloc(harness_rank_t *r, size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) H_FAIL(r, "out of memory for %zu bytes", n);
    return p;
}

/* ---- shared pieces of rank functions ------------------------------------------------ */

static void check_allgather(harness_rank_t *r, oobx_comm_t c, size_t b, unsigned salt, const char *what)
{
    int n = r->nranks, me;
    H_OK(r, oobx_comm_rank(c, &me));
    H_OK(r, oobx_comm_size(c, &n));
    unsigned char *buf = xmalloc(r, (size_t)n * b);
    memset(buf, 0xee, (size_t)n * b);
    harness_fill(buf + (size_t)me * b, b, me, salt);
    int rc = oobx_allgather(c, buf, b);
    if (rc != OOBX_SUCCESS)
        H_FAIL(r, "%s: oobx_allgather(%zu B per rank, %d ranks): %s: %s", what, b, n, oobx_error_name(rc),
               oobx_last_error());
    for (int s = 0; s < n; s++)
        harness_verify(r, buf + (size_t)s * b, b, s, salt, "%s: allgather of %zu B, slice %d", what, b, s);
    free(buf);
}

static void check_bcast(harness_rank_t *r, oobx_comm_t c, int root, size_t b, unsigned salt, const char *what)
{
    int me;
    H_OK(r, oobx_comm_rank(c, &me));
    unsigned char *buf = xmalloc(r, b);
    if (me == root)
        harness_fill(buf, b, root, salt);
    else
        memset(buf, 0xee, b);
    int rc = oobx_bcast(c, root, buf, b);
    if (rc != OOBX_SUCCESS)
        H_FAIL(r, "%s: oobx_bcast(root %d, %zu B): %s: %s", what, root, b, oobx_error_name(rc),
               oobx_last_error());
    harness_verify(r, buf, b, root, salt, "%s: bcast of %zu B from root %d", what, b, root);
    free(buf);
}

/* Each rank sends to the next and receives from the previous one. */
static void check_ring_p2p(harness_rank_t *r, oobx_comm_t c, size_t b, int tag, const char *what)
{
    int n, me;
    H_OK(r, oobx_comm_rank(c, &me));
    H_OK(r, oobx_comm_size(c, &n));
    if (n < 2) return;
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    unsigned char *out = xmalloc(r, b), *in = xmalloc(r, b + 8);
    harness_fill(out, b, me, (unsigned)tag);
    int rc = oobx_send(c, next, tag, out, b);
    if (rc != OOBX_SUCCESS)
        H_FAIL(r, "%s: oobx_send(to %d, tag %d, %zu B): %s: %s", what, next, tag, b, oobx_error_name(rc),
               oobx_last_error());
    size_t got = (size_t)-1;
    rc = oobx_recv(c, prev, tag, in, b + 8, &got);
    if (rc != OOBX_SUCCESS)
        H_FAIL(r, "%s: oobx_recv(from %d, tag %d): %s: %s", what, prev, tag, oobx_error_name(rc),
               oobx_last_error());
    if (got != b) H_FAIL(r, "%s: oobx_recv from %d: received %zu B, want %zu", what, prev, got, b);
    harness_verify(r, in, b, prev, (unsigned)tag, "%s: message from rank %d tag %d", what, prev, tag);
    free(out);
    free(in);
}

static void check_group(harness_rank_t *r, oobx_comm_t c, const int *g, int n, const char *what)
{
    int me, idx = -1;
    H_OK(r, oobx_comm_rank(c, &me));
    for (int i = 0; i < n; i++)
        if (g[i] == me) idx = i;
    if (idx < 0) return;
    size_t b = 100, bb = 1000;
    unsigned char *buf = xmalloc(r, OOBX_MAX((size_t)n * b, bb));
    memset(buf, 0xee, (size_t)n * b);
    harness_fill(buf + (size_t)idx * b, b, g[idx], 17);
    int rc = oobx_group_allgather(c, g, n, buf, b);
    if (rc != OOBX_SUCCESS)
        H_FAIL(r, "%s: oobx_group_allgather(%d members): %s: %s", what, n, oobx_error_name(rc),
               oobx_last_error());
    for (int i = 0; i < n; i++)
        harness_verify(r, buf + (size_t)i * b, b, g[i], 17, "%s: group allgather slice %d (rank %d)", what, i,
                       g[i]);
    rc = oobx_group_barrier(c, g, n);
    if (rc != OOBX_SUCCESS)
        H_FAIL(r, "%s: oobx_group_barrier(%d members): %s: %s", what, n, oobx_error_name(rc),
               oobx_last_error());
    for (int root = 0; root < n; root += (n > 4 ? n / 3 : 1)) {
        if (idx == root)
            harness_fill(buf, bb, g[root], 23);
        else
            memset(buf, 0xee, bb);
        rc = oobx_group_bcast(c, g, n, root, buf, bb);
        if (rc != OOBX_SUCCESS)
            H_FAIL(r, "%s: oobx_group_bcast(%d members, root index %d): %s: %s", what, n, root,
                   oobx_error_name(rc), oobx_last_error());
        harness_verify(r, buf, bb, g[root], 23, "%s: group bcast from index %d (rank %d)", what, root, g[root]);
    }
    free(buf);
}

/* ---- rank functions ------------------------------------------------------------------ */

/* Every call once. */
static int rank_api(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    int n = r->nranks, me = r->rank;
    check_allgather(r, c, 100, 1, "api");
    check_ring_p2p(r, c, 33, 7, "api");
    H_OK(r, oobx_barrier(c));
    check_bcast(r, c, 0, 1000, 2, "api");
    check_bcast(r, c, n - 1, 1000, 3, "api");
    int *g = xmalloc(r, sizeof(int) * (size_t)n);
    int ng = 0;
    for (int i = 0; i < n; i += 2) g[ng++] = i;
    check_group(r, c, g, ng, "api even ranks");
    free(g);
    oobx_comm_t child = NULL;
    H_OK(r, oobx_comm_split(c, me % 2, me, &child));
    if (!child) H_FAIL(r, "oobx_comm_split(color %d): child is NULL", me % 2);
    int cn = -1, cr = -1;
    H_OK(r, oobx_comm_size(child, &cn));
    H_OK(r, oobx_comm_rank(child, &cr));
    H_EQ(r, cn, (n + 1 - me % 2) / 2, "split child size");
    H_EQ(r, cr, me / 2, "split child rank");
    check_allgather(r, child, 64, 4, "api child");
    H_OK(r, oobx_comm_destroy(child));
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* Allgather at every size of the case, twice each with different data. */
static int rank_allgather(harness_rank_t *r)
{
    conf_params_t *p = r->arg;
    oobx_comm_t c = harness_comm_init_or_die(r);
    const char *algo = getenv("OOBX_ALLGATHER_ALGO");
    char what[64];
    snprintf(what, sizeof what, "algo %s", algo ? algo : "default");
    /* the ranks of this test share one host: with direct (forced, or auto
     * at its size), every slice comes straight from its owner's buffer,
     * unless the node-aware path (when init found hosts) takes the call
     * through its shared buffer; no other call is direct */
    oobx_init_timings_t it = OOBX_INIT_TIMINGS_INIT;
    H_OK(r, oobx_comm_get_init_timings(c, &it));
    oobx_coll_counts_t was = OOBX_COLL_COUNTS_INIT, now = OOBX_COLL_COUNTS_INIT;
    H_OK(r, oobx_debug_coll_counts(c, &was));
    for (int k = 0; k < p->nsizes; k++) {
        size_t b = p->sizes[k];
        int direct = b && r->nranks > 1 && algo &&
                     (!strcmp(algo, "direct") || (!strcmp(algo, "auto") && b >= 65536));
        for (unsigned t = 0; t < 2; t++) {
            check_allgather(r, c, b, (unsigned)k * 2 + 100 + t, what);
            H_OK(r, oobx_debug_coll_counts(c, &now));
            unsigned long long dd = now.direct - was.direct, dn = now.node - was.node;
            if (now.direct_fallbacks != 0 || dd > (unsigned long long)direct || dn > 1 || (dn && it.hosts == 0) ||
                (direct && dd + dn != 1))
                H_FAIL(r, "%s, %zu bytes per rank: the call counted %llu direct, %llu node-aware, %llu fallbacks "
                          "(init found %d hosts); want %s",
                       what, b, dd, dn, now.direct_fallbacks, it.hosts,
                       direct ? "one of direct or node-aware" : "no direct");
            was = now;
        }
    }
    /* NULL buffer with 0 bytes is legal */
    H_OK(r, oobx_allgather(c, NULL, 0));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* One rank cannot read the others' memory (as root it runs on as nobody,
 * as another user it makes itself undumpable, so that they cannot read
 * it): the direct allgather finds out in its reads and every rank takes the
 * ring for that call, with the right slices; a group allgather of the
 * ranks that can read each other stays direct. */
static int rank_direct_fallback(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    H_OK(r, oobx_barrier(c));
    if (r->rank == 1) {
        if (geteuid() == 0) {
            if (setresuid(65534, 65534, 65534) != 0) H_FAIL(r, "setresuid(nobody): %s", strerror(errno));
        } else if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
            H_FAIL(r, "prctl(PR_SET_DUMPABLE, 0): %s", strerror(errno));
        }
    }
    H_OK(r, oobx_barrier(c));
    const size_t b = 300000;
    for (int k = 0; k < 3; k++) check_allgather(r, c, b, 40u + (unsigned)k, "direct, rank 1 unreadable");
    oobx_coll_counts_t cc = OOBX_COLL_COUNTS_INIT;
    H_OK(r, oobx_debug_coll_counts(c, &cc));
    /* the first call tries and falls back; the next 63 take the ring at once */
    if (cc.direct != 0 || cc.direct_fallbacks != 1 || cc.direct_skipped != 2)
        H_FAIL(r, "%llu direct allgathers, %llu fallbacks, %llu skipped; want 0, 1 and 2", cc.direct,
               cc.direct_fallbacks, cc.direct_skipped);
    /* the 65th tries again, and falls back again */
    for (int k = 3; k < 65; k++) check_allgather(r, c, b, 40u + (unsigned)k, "direct, rank 1 unreadable");
    H_OK(r, oobx_debug_coll_counts(c, &cc));
    if (cc.direct != 0 || cc.direct_fallbacks != 2 || cc.direct_skipped != 63)
        H_FAIL(r, "after 65 calls: %llu direct allgathers, %llu fallbacks, %llu skipped; want 0, 2 and 63", cc.direct,
               cc.direct_fallbacks, cc.direct_skipped);
    /* without rank 1 */
    int g[8], n = 0;
    for (int i = 0; i < r->nranks; i++)
        if (i != 1) g[n++] = i;
    if (r->rank != 1) {
        unsigned char *buf = xmalloc(r, (size_t)n * b);
        int me = r->rank == 0 ? 0 : r->rank - 1;
        harness_fill(buf + (size_t)me * b, b, r->rank, 17);
        int rc = oobx_group_allgather(c, g, n, buf, b);
        if (rc != OOBX_SUCCESS)
            H_FAIL(r, "oobx_group_allgather without rank 1: %s: %s", oobx_error_name(rc), oobx_last_error());
        for (int i = 0; i < n; i++)
            harness_verify(r, buf + (size_t)i * b, b, g[i], 17, "group allgather slice %d (rank %d)", i, g[i]);
        free(buf);
        H_OK(r, oobx_debug_coll_counts(c, &cc));
        if (cc.direct != 1 || cc.direct_fallbacks != 2)
            H_FAIL(r, "after the group allgather: %llu direct and %llu fallbacks, want 1 and 2", cc.direct,
                   cc.direct_fallbacks);
    }
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* One allgather into buf (n slices of b) with salt; the counts it added. */
static oobx_coll_counts_t mem_allgather(harness_rank_t *r, oobx_comm_t c, unsigned char *buf, size_t b,
                                        unsigned salt, const char *what)
{
    int n, me;
    H_OK(r, oobx_comm_size(c, &n));
    H_OK(r, oobx_comm_rank(c, &me));
    oobx_coll_counts_t was = OOBX_COLL_COUNTS_INIT, now = OOBX_COLL_COUNTS_INIT;
    H_OK(r, oobx_debug_coll_counts(c, &was));
    memset(buf, 0xee, (size_t)n * b);
    harness_fill(buf + (size_t)me * b, b, me, salt);
    int rc = oobx_allgather(c, buf, b);
    if (rc != OOBX_SUCCESS)
        H_FAIL(r, "%s: oobx_allgather: %s: %s", what, oobx_error_name(rc), oobx_last_error());
    for (int q = 0; q < n; q++)
        harness_verify(r, buf + (size_t)q * b, b, q, salt, "%s: slice %d", what, q);
    H_OK(r, oobx_debug_coll_counts(c, &now));
    now.direct -= was.direct;
    now.direct_fallbacks -= was.direct_fallbacks;
    now.direct_mapped -= was.direct_mapped;
    now.direct_staged -= was.direct_staged;
    return now;
}

/* Result buffers the program has not written but for its own slice (fresh
 * pages of a new mapping, as malloc gives for large blocks): every slice
 * right, each call through the node-aware path (OOBX_NODE_AWARE_MIN=2), and
 * on a host with more ranks than CPUs the kernel fills the missing pages
 * with the result (counted as node_fresh) where userfaultfd works;
 * elsewhere none is counted. */
static int rank_fresh_result(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    int n = r->nranks, me = r->rank;
    size_t b = 64 * KiB, len = (size_t)n * b;
    oobx_coll_counts_t was = OOBX_COLL_COUNTS_INIT, now = OOBX_COLL_COUNTS_INIT;
    H_OK(r, oobx_debug_coll_counts(c, &was));
    for (unsigned t = 0; t < 3; t++) {
        unsigned char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED) H_FAIL(r, "mmap of %zu B: %s", len, strerror(errno));
        harness_fill(buf + (size_t)me * b, b, me, 600 + t);
        int rc = oobx_allgather(c, buf, b);
        if (rc != OOBX_SUCCESS) H_FAIL(r, "call %u: oobx_allgather: %s: %s", t, oobx_error_name(rc), oobx_last_error());
        for (int q = 0; q < n; q++)
            harness_verify(r, buf + (size_t)q * b, b, q, 600 + t, "fresh result %u, slice %d", t, q);
        munmap(buf, len);
    }
    H_OK(r, oobx_debug_coll_counts(c, &now));
    unsigned long long dn = now.node - was.node, df = now.node_fresh - was.node_fresh;
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
    int uffd = fd >= 0;
    if (fd >= 0) close(fd);
    int crowded = n > sysconf(_SC_NPROCESSORS_ONLN);
    unsigned long long want = crowded && uffd ? dn : 0;
    if (dn != 3 || df != want)
        H_FAIL(r, "3 calls into fresh memory, %llu node-aware: %llu results filled by the kernel, want %llu (%d ranks, "
                  "%ld CPUs, userfaultfd %s)",
               dn, df, want, n, sysconf(_SC_NPROCESSORS_ONLN), uffd ? "usable" : "not usable");
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* Buffers of oobx_mem_alloc: the direct allgather copies the peers' slices
 * through mappings of their memory (n - 1 a call), with the right data
 * after a buffer is freed and another allocated, from inside a region, in
 * a split child, and beside a rank whose buffer is plain memory (read with
 * process_vm_readv); the descriptor count stays bounded over many calls;
 * misuse is a clear error. */
static int rank_mem_alloc(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    const int n = r->nranks, me = r->rank;
    const size_t b = 300000;
    unsigned char *buf = NULL;
    H_OK(r, oobx_mem_alloc(c, (size_t)n * b, (void **)&buf));
    if (!buf || (uintptr_t)buf % 4096) H_FAIL(r, "oobx_mem_alloc gave %p: not page-aligned", (void *)buf);
    for (size_t i = 0; i < (size_t)n * b; i += 4093)
        if (buf[i]) H_FAIL(r, "oobx_mem_alloc: byte %zu is %u, not zero", i, buf[i]);
    oobx_coll_counts_t d = mem_allgather(r, c, buf, b, 1, "oobx_mem_alloc buffer");
    if (d.direct != 1 || d.direct_mapped != (unsigned long long)(n - 1) || d.direct_fallbacks)
        H_FAIL(r, "first call: %llu direct, %llu slices mapped, %llu fallbacks; want 1, %d, 0", d.direct,
               d.direct_mapped, d.direct_fallbacks, n - 1);
    int fds = oobx_debug_count_fds();
    for (unsigned k = 0; k < 20; k++) {
        d = mem_allgather(r, c, buf, b, 10 + k, "oobx_mem_alloc buffer, again");
        if (d.direct_mapped != (unsigned long long)(n - 1))
            H_FAIL(r, "call %u: %llu slices mapped, want %d", k + 2, d.direct_mapped, n - 1);
    }
    if (oobx_debug_count_fds() != fds)
        H_FAIL(r, "open descriptors went from %d to %d over 20 calls", fds, oobx_debug_count_fds());
    /* another buffer where the first was: the peers must not read the old one */
    H_OK(r, oobx_mem_free(c, buf));
    unsigned char *big = NULL;
    H_OK(r, oobx_mem_alloc(c, (size_t)n * b + 3 * 4096, (void **)&big));
    d = mem_allgather(r, c, big + 8192, b, 50, "inside a larger region");
    if (d.direct_mapped != (unsigned long long)(n - 1))
        H_FAIL(r, "inside a larger region: %llu slices mapped, want %d", d.direct_mapped, n - 1);
    /* a split child shares the memory */
    oobx_comm_t child = NULL;
    H_OK(r, oobx_comm_split(c, 0, n - 1 - me, &child));
    d = mem_allgather(r, child, big, b, 60, "split child");
    if (d.direct_mapped != (unsigned long long)(n - 1))
        H_FAIL(r, "split child: %llu slices mapped, want %d", d.direct_mapped, n - 1);
    H_OK(r, oobx_comm_destroy(child));
    /* rank 0 passes plain memory: its slice goes by process_vm_readv
     * (OOBX_ALLGATHER_STAGE_MIN=0 here; allgather_staged_n4 stages it) */
    unsigned char *plain = me == 0 ? xmalloc(r, (size_t)n * b) : big;
    d = mem_allgather(r, c, plain, b, 70, "rank 0 with plain memory");
    /* rank 0 maps every peer; the others every peer but rank 0 */
    unsigned long long want = (unsigned long long)(me == 0 ? n - 1 : n - 2);
    if (d.direct != 1 || d.direct_mapped != want || d.direct_staged)
        H_FAIL(r, "rank 0 with plain memory: %llu direct, %llu slices mapped, %llu staged; want 1, %llu, 0", d.direct,
               d.direct_mapped, d.direct_staged, want);
    if (me == 0) free(plain);
    /* misuse */
    int x = 0;
    void *p = &x;
    int rc = oobx_mem_free(c, &x);
    if (rc != OOBX_ERR_INVALID || !strstr(oobx_last_error(), "not memory that oobx_mem_alloc gave"))
        H_FAIL(r, "oobx_mem_free of a stack address: %s (%s)", oobx_error_name(rc), oobx_last_error());
    rc = oobx_mem_alloc(c, 0, &p);
    if (rc != OOBX_ERR_INVALID || p != NULL) H_FAIL(r, "oobx_mem_alloc of 0 bytes: %s", oobx_error_name(rc));
    H_OK(r, oobx_mem_free(c, NULL));
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_mem_free(c, big));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

typedef struct stage_thread {
    harness_rank_t *r;
    oobx_comm_t c;
    unsigned salt;
    const char *what;
} stage_thread_t;

/* Ten staged-size allgathers on one communicator, checked. */
static void *stage_thread_main(void *arg)
{
    stage_thread_t *a = arg;
    for (unsigned k = 0; k < 10; k++) check_allgather(a->r, a->c, 200000, a->salt + k, a->what);
    return NULL;
}

/* Plain memory at OOBX_ALLGATHER_STAGE_MIN ranks and more (4 here): every
 * rank copies its slice into a region of its own and the peers read it
 * through their mappings (n - 1 mapped slices a call, one staged), with
 * the right data over calls of different sizes (the region grows: the
 * peers must map the new one, never read the old), and a bounded count of
 * descriptors; a rank that turned staging off (rank 1) has its slice read
 * with process_vm_readv; a split child of 3 ranks, below the setting,
 * stages nothing. */
static int rank_stage(harness_rank_t *r)
{
    const int n = r->nranks, me = r->rank;
    if (me == 1) setenv("OOBX_ALLGATHER_STAGE_MIN", "0", 1);
    oobx_comm_t c = harness_comm_init_or_die(r);
    static const size_t sizes[] = {300000, 1u << 20, 70000, 3u << 20, 65536};
    unsigned long long want_mapped = (unsigned long long)(me == 1 ? n - 1 : n - 2);
    unsigned long long want_staged = me == 1 ? 0 : 1;
    int fds = -1;
    for (unsigned k = 0; k < 25; k++) {
        size_t b = sizes[k % 5];
        unsigned char *buf = xmalloc(r, (size_t)n * b);
        oobx_coll_counts_t d = mem_allgather(r, c, buf, b, 200 + k, "plain memory, staged");
        free(buf);
        if (d.direct != 1 || d.direct_fallbacks || d.direct_mapped != want_mapped || d.direct_staged != want_staged)
            H_FAIL(r, "call %u (%zu B per rank): %llu direct, %llu fallbacks, %llu slices mapped, %llu staged; "
                      "want 1, 0, %llu, %llu",
                   k, b, d.direct, d.direct_fallbacks, d.direct_mapped, d.direct_staged, want_mapped, want_staged);
        if (k == 4) fds = oobx_debug_count_fds(); /* every size once: the largest region is made */
    }
    if (oobx_debug_count_fds() != fds)
        H_FAIL(r, "open descriptors went from %d to %d over 20 staged calls", fds, oobx_debug_count_fds());
    oobx_comm_t child = NULL;
    H_OK(r, oobx_comm_split(c, me == 3 ? -1 : 0, me, &child));
    if (child) {
        const size_t b = 200000;
        unsigned char *buf = xmalloc(r, 3 * b);
        oobx_coll_counts_t d = mem_allgather(r, child, buf, b, 300, "split child of 3 ranks");
        free(buf);
        if (d.direct != 1 || d.direct_staged || d.direct_mapped)
            H_FAIL(r, "split child of 3: %llu direct, %llu staged, %llu mapped; want 1, 0, 0", d.direct,
                   d.direct_staged, d.direct_mapped);
        H_OK(r, oobx_comm_destroy(child));
    }
    /* two threads, the communicator and a child of all 4 ranks (the same
     * endpoint, so one staging region): their calls interleave; one that
     * finds the region in use reads plain memory; every slice right */
    oobx_comm_t twin = NULL;
    H_OK(r, oobx_comm_split(c, 0, me, &twin));
    stage_thread_t ta = {r, c, 400, "parent, beside its child"}, tb = {r, twin, 500, "child, beside its parent"};
    pthread_t th;
    if (pthread_create(&th, NULL, stage_thread_main, &tb) != 0) H_FAIL(r, "pthread_create");
    stage_thread_main(&ta);
    pthread_join(th, NULL);
    H_OK(r, oobx_comm_destroy(twin));
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* One broadcast of b bytes from root into m, salt s, checked. */
static void bcast_into(harness_rank_t *r, oobx_comm_t c, unsigned char *m, size_t b, int root, unsigned salt,
                       const char *what)
{
    if (r->rank == root) harness_fill(m, b, root, salt);
    else memset(m, 0xee, b);
    int rc = oobx_bcast(c, root, m, b);
    if (rc != OOBX_SUCCESS) H_FAIL(r, "%s: oobx_bcast: %s: %s", what, oobx_error_name(rc), oobx_last_error());
    harness_verify(r, m, b, root, salt, "%s from root %d", what, root);
}

/* Broadcasts of 64 KiB and more among ranks of one host: from
 * oobx_mem_alloc memory every rank reads the root's buffer through a
 * mapping (counted, from every root); from plain memory the kernel's copy
 * only between two ranks (a group of two), the tree for more; a rank that
 * passes another size fails the call on every rank with OOBX_ERR_MISMATCH
 * naming it. p.count 1: rank 1 cannot read the others nor be read (as in
 * rank_direct_fallback): every rank takes the tree, with the right bytes,
 * and the group's next calls skip the try. */
static int rank_bcast_direct(harness_rank_t *r)
{
    conf_params_t *p = r->arg;
    oobx_comm_t c = harness_comm_init_or_die(r);
    const int n = r->nranks, me = r->rank;
    if (p->count == 1) {
        H_OK(r, oobx_barrier(c));
        if (me == 1) {
            if (geteuid() == 0) {
                if (setresuid(65534, 65534, 65534) != 0) H_FAIL(r, "setresuid(nobody): %s", strerror(errno));
            } else if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
                H_FAIL(r, "prctl(PR_SET_DUMPABLE, 0): %s", strerror(errno));
            }
        }
        H_OK(r, oobx_barrier(c));
    }
    const size_t b = (size_t)1 << 20;
    unsigned char *m = NULL;
    H_OK(r, oobx_mem_alloc(c, 2 * b, (void **)&m));
    oobx_coll_counts_t was = OOBX_COLL_COUNTS_INIT, now = OOBX_COLL_COUNTS_INIT;
    H_OK(r, oobx_debug_coll_counts(c, &was));
    const size_t sizes[] = {65536, 300001, b};
    int calls = 0;
    for (int k = 0; k < 3; k++)
        for (int root = 0; root < n; root++, calls++) {
            unsigned long long mapped = now.direct_mapped;
            bcast_into(r, c, m, sizes[k], root, 20u + (unsigned)calls, "mapped bcast");
            H_OK(r, oobx_debug_coll_counts(c, &now));
            /* (with rank 1 unreadable, the first call's reads of the
             * others may go through, before all take the tree) */
            unsigned long long want = me != root ? 1 : 0;
            if (p->count == 0 && now.direct_mapped - mapped != want)
                H_FAIL(r, "mapped bcast of %zu B from root %d: %llu copies through a mapping, want %llu", sizes[k], root,
                       now.direct_mapped - mapped, want);
        }
    unsigned long long db = now.direct_bcast - was.direct_bcast, df = now.direct_bcast_fallbacks - was.direct_bcast_fallbacks;
    if (p->count == 1) {
        /* the first tries and falls back; the group's next calls take the tree at once */
        if (db != 0 || df != 1 || now.direct_skipped - was.direct_skipped != (unsigned long long)calls - 1)
            H_FAIL(r, "rank 1 unreadable: %llu direct broadcasts, %llu fallbacks, %llu skipped of %d", db, df,
                   now.direct_skipped - was.direct_skipped, calls);
        H_OK(r, oobx_barrier(c));
        H_OK(r, oobx_comm_destroy(c));
        return 0;
    }
    if (db != (unsigned long long)calls || df != 0)
        H_FAIL(r, "%llu direct broadcasts and %llu fallbacks of %d calls; want all direct", db, df, calls);
    /* plain memory, in a child (its own counts of calls to skip): the tree
     * among 4 ranks, the record once, then the next calls skip it; the
     * kernel's copy between 2 */
    oobx_comm_t child = NULL;
    H_OK(r, oobx_comm_split(c, 0, me, &child));
    unsigned char *plain = xmalloc(r, b);
    was = now;
    for (int root = 0; root < n; root++) bcast_into(r, child, plain, b, root, 60u + (unsigned)root, "plain bcast");
    H_OK(r, oobx_debug_coll_counts(c, &now));
    if (now.direct_bcast != was.direct_bcast || now.direct_bcast_fallbacks != was.direct_bcast_fallbacks ||
        now.direct_skipped - was.direct_skipped != (unsigned long long)n - 1)
        H_FAIL(r, "plain bcasts of 4 ranks: %llu direct, %llu fallbacks, %llu skipped; want the tree, %d skipped",
               now.direct_bcast - was.direct_bcast, now.direct_bcast_fallbacks - was.direct_bcast_fallbacks,
               now.direct_skipped - was.direct_skipped, n - 1);
    H_OK(r, oobx_comm_destroy(child));
    int g[2] = {0, 2};
    if (me % 2 == 0) {
        if (me == 2) harness_fill(plain, b, me, 91);
        int rc = oobx_group_bcast(c, g, 2, 1, plain, b);
        if (rc != OOBX_SUCCESS) H_FAIL(r, "oobx_group_bcast: %s: %s", oobx_error_name(rc), oobx_last_error());
        harness_verify(r, plain, b, 2, 91, "group bcast of two ranks");
        was = now;
        H_OK(r, oobx_debug_coll_counts(c, &now));
        if (now.direct_bcast - was.direct_bcast != 1)
            H_FAIL(r, "a plain bcast of two ranks counted %llu direct, want 1", now.direct_bcast - was.direct_bcast);
    }
    free(plain);
    H_OK(r, oobx_barrier(c));
    /* rank n-1 passes twice the root's size: every rank fails naming it */
    size_t mine = me == n - 1 ? 2 * b : b;
    int rc = oobx_bcast(c, 0, m, mine);
    char want[64];
    snprintf(want, sizeof want, "group rank %d (rank %d) %zu", n - 1, n - 1, 2 * b);
    if (rc != OOBX_ERR_MISMATCH || !strstr(oobx_last_error(), want))
        H_FAIL(r, "bcast with rank %d's size differing: %s (%s); want OOBX_ERR_MISMATCH naming \"%s\"", n - 1,
               oobx_error_name(rc), oobx_last_error(), want);
    oobx_comm_destroy(c);
    return 0;
}

/* oobx_allgather_table: the right slices without a copy into the rank
 * (node-aware: the host's shared buffer, counted as a node-aware call; a
 * table too large for it, or a flat communicator: the library's memory);
 * a table held over two more collective calls makes the second fail on
 * every rank with a clear error, and works again after its release;
 * release of what is no table is an error; destroy releases the rest. */
static int rank_allgather_table(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    const int n = r->nranks, me = r->rank;
    oobx_init_timings_t it = OOBX_INIT_TIMINGS_INIT;
    H_OK(r, oobx_comm_get_init_timings(c, &it));
    const int node = it.hosts > 0;
    unsigned char mine[128];
    harness_fill(mine, sizeof mine, me, 5);
    oobx_coll_counts_t was = OOBX_COLL_COUNTS_INIT, now = OOBX_COLL_COUNTS_INIT;
    H_OK(r, oobx_debug_coll_counts(c, &was));
    const void *t1 = NULL;
    H_OK(r, oobx_allgather_table(c, mine, sizeof mine, &t1));
    for (int q = 0; q < n; q++)
        harness_verify(r, (const unsigned char *)t1 + (size_t)q * sizeof mine, sizeof mine, q, 5, "table slice %d", q);
    H_OK(r, oobx_debug_coll_counts(c, &now));
    if (now.node - was.node != (unsigned long long)node)
        H_FAIL(r, "the table counted %llu node-aware calls; init found %d hosts", now.node - was.node, it.hosts);
    /* one call later the other buffer is free; the next needs t1's */
    H_OK(r, oobx_barrier(c));
    unsigned char *buf = xmalloc(r, (size_t)n * 64);
    harness_fill(buf + (size_t)me * 64, 64, me, 6);
    int rc = oobx_allgather(c, buf, 64);
    if (node && (rc != OOBX_ERR_INVALID || !strstr(oobx_last_error(), "still holds the table")))
        H_FAIL(r, "an allgather while the table is held: %s (%s); want OOBX_ERR_INVALID", oobx_error_name(rc),
               oobx_last_error());
    if (!node && rc != OOBX_SUCCESS) H_FAIL(r, "allgather with a table held: %s", oobx_last_error());
    /* the table is still right, and after its release the call works */
    harness_verify(r, (const unsigned char *)t1 + (size_t)me * sizeof mine, sizeof mine, me, 5, "table after");
    H_OK(r, oobx_allgather_table_release(c, t1));
    rc = oobx_allgather_table_release(c, t1);
    if (rc != OOBX_ERR_INVALID) H_FAIL(r, "a second release: %s, want OOBX_ERR_INVALID", oobx_error_name(rc));
    H_OK(r, oobx_allgather_table_release(c, NULL));
    memset(buf, 0, (size_t)n * 64);
    harness_fill(buf + (size_t)me * 64, 64, me, 7);
    H_OK(r, oobx_allgather(c, buf, 64));
    for (int q = 0; q < n; q++) harness_verify(r, buf + (size_t)q * 64, 64, q, 7, "allgather after release, slice %d", q);
    free(buf);
    /* larger than the host's shared buffer: the library's memory */
    const size_t big = (size_t)2 << 20;
    unsigned char *bm = xmalloc(r, big);
    harness_fill(bm, big, me, 8);
    const void *t2 = NULL;
    H_OK(r, oobx_allgather_table(c, bm, big, &t2));
    for (int q = 0; q < n; q++)
        harness_verify(r, (const unsigned char *)t2 + (size_t)q * big, big, q, 8, "large table slice %d", q);
    free(bm);
    H_OK(r, oobx_allgather_table_release(c, t2));
    /* held at destroy: destroy lets go of it */
    const void *t3 = NULL;
    harness_fill(mine, sizeof mine, me, 9);
    H_OK(r, oobx_allgather_table(c, mine, sizeof mine, &t3));
    harness_verify(r, (const unsigned char *)t3 + (size_t)(n - 1) * sizeof mine, sizeof mine, n - 1, 9, "table 3");
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* The launcher's local pair feeds the node-aware bootstrap (env path,
 * OOBX_NODE_AWARE_MIN=2). p.count: 0 the launcher puts all ranks on this
 * host, they share one table; 1 it says two nodes of n/2 ranks under this one
 * host name (local rank = rank % (n/2)): the root makes each rank a host of
 * its own, and the job still works; 2 the same, but OOBX_HOST_ID names the
 * host: the explicit id wins and all share one table; 3 as 0 with three
 * roots: each root's block of the host has a table of its own, and a block
 * smaller than the launcher's count is no reason to split it. */
/* OOBX_TRANSPORT=auto under a launcher that puts the whole job on this
 * host: with more ranks than CPUs the socket transport comes first (no rank
 * polls there, and UCX's set-up only costs init time). */
static int rank_auto_oversubscribed(harness_rank_t *r)
{
    char v[32];
    snprintf(v, sizeof v, "%d", r->rank);
    setenv("OOBX_LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", r->nranks);
    setenv("OOBX_LOCAL_SIZE", v, 1);
    r->cfg.transport = "auto"; /* whatever transport the suite runs */
    oobx_comm_t c;
    H_OK(r, harness_comm_init(r, &c));
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const char *tp = oobx_comm_transport(c);
    if (r->nranks > ncpu && strcmp(tp, "socket") != 0)
        H_FAIL(r, "auto took %s for %d ranks on a host of %ld CPUs (launcher: all here); want socket", tp, r->nranks,
               ncpu);
    if (r->rank == 0) printf("rank 0: auto took %s for %d ranks on %ld CPUs\n", tp, r->nranks, ncpu);
    check_allgather(r, c, 100, 9, "auto, oversubscribed");
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

static int rank_launcher_local(harness_rank_t *r)
{
    conf_params_t *p = r->arg;
    int n = r->nranks, half = n / 2;
    char v[32];
    int one = p->count == 0 || p->count == 3;
    snprintf(v, sizeof v, "%d", one ? r->rank : r->rank % half);
    setenv("OOBX_LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", one ? n : half);
    setenv("OOBX_LOCAL_SIZE", v, 1);
    if (p->count == 2) setenv("OOBX_HOST_ID", "one-host", 1);
    oobx_comm_t c = harness_comm_init_or_die(r);
    oobx_init_timings_t t = OOBX_INIT_TIMINGS_INIT;
    H_OK(r, oobx_comm_get_init_timings(c, &t));
    H_CHECK(r, t.local > 0, "init was not node-aware (local part %.6f s)", t.local);
    int want = p->count == 1 ? 1 : n;
    if (p->count == 3) {
        int b = 0;
        while (b + 1 < r->nroots && harness_block_first(b + 1, n, r->nroots) <= r->rank) b++;
        want = harness_block_first(b + 1, n, r->nroots) - harness_block_first(b, n, r->nroots);
    }
    H_EQ(r, t.local_ranks, want, "ranks sharing this rank's host table");
    /* the cards still name one host id (and count it as one host) */
    H_EQ(r, t.hosts, 1, "hosts of the communicator");
    /* one leader a table: the leaders' count is the sum of 1 / local_ranks */
    int mine[2] = {t.leader, t.local_ranks}, *all = xmalloc(r, sizeof(mine) * (size_t)n);
    memcpy(all + 2 * r->rank, mine, sizeof(mine));
    H_OK(r, oobx_allgather(c, all, sizeof(mine)));
    int leaders = 0;
    double tables = 0;
    for (int k = 0; k < n; k++) {
        H_CHECK(r, all[2 * k] == 0 || all[2 * k] == 1, "rank %d says leader=%d", k, all[2 * k]);
        leaders += all[2 * k];
        tables += 1.0 / all[2 * k + 1];
    }
    H_EQ(r, leaders, (int)(tables + 0.5), "leaders, one a host table");
    free(all);
    check_allgather(r, c, 100, 9, "launcher local");
    check_allgather(r, c, 70000, 10, "launcher local");
    check_ring_p2p(r, c, 33, 7, "launcher local");
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* Ping-pong between ranks 0 and 1 at every size; others (if any) idle. */
static int rank_p2p_sizes(harness_rank_t *r)
{
    conf_params_t *p = r->arg;
    oobx_comm_t c = harness_comm_init_or_die(r);
    int me = r->rank, peer = 1 - me;
    if (me < 2) {
        for (int k = 0; k < p->nsizes; k++) {
            size_t b = p->sizes[k];
            unsigned char *buf = xmalloc(r, b + 16);
            size_t got = (size_t)-1;
            double t0 = harness_now();
            if (me == 0) {
                harness_fill(buf, b, 0, (unsigned)k);
                H_OK(r, oobx_send(c, peer, k, buf, b));
                memset(buf, 0, b);
                int rc = oobx_recv(c, peer, 1000 + k, buf, b, NULL);
                if (rc != OOBX_SUCCESS)
                    H_FAIL(r, "oobx_recv(%zu B, received NULL): %s: %s", b, oobx_error_name(rc), oobx_last_error());
                harness_verify(r, buf, b, 1, (unsigned)k, "p2p reply of %zu B", b);
                if (b >= MiB)
                    printf("rank 0: p2p round trip of %zu MiB: %.3f s (%.0f MB/s each way)\n", b / MiB,
                           harness_now() - t0, 2.0 * (double)b / (harness_now() - t0) / 1e6);
            } else {
                memset(buf, 0xee, b + 16);
                int rc = oobx_recv(c, peer, k, buf, b + 16, &got);
                if (rc != OOBX_SUCCESS)
                    H_FAIL(r, "oobx_recv(%zu B into %zu): %s: %s", b, b + 16, oobx_error_name(rc), oobx_last_error());
                H_EQ(r, got, b, "received bytes");
                harness_verify(r, buf, b, 0, (unsigned)k, "p2p message of %zu B", b);
                harness_fill(buf, b, 1, (unsigned)k);
                H_OK(r, oobx_send(c, peer, 1000 + k, buf, b));
            }
            free(buf);
        }
    }
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* Messages sent before their receive is posted, received out of tag order,
 * from two senders; same-tag messages keep their order. */
static int rank_p2p_unexpected(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    int me = r->rank, n = r->nranks;
    const int ntags = 11;
    if (me != 1) {
        for (int t = ntags - 1; t >= 0; t--) {
            size_t b = t == ntags - 1 ? MiB : (size_t)t * 100;
            unsigned char *buf = xmalloc(r, b);
            harness_fill(buf, b, me, (unsigned)t);
            H_OK(r, oobx_send(c, 1, t, buf, b));
            free(buf);
        }
        for (int k = 0; k < 3; k++) {
            unsigned char buf[64];
            harness_fill(buf, sizeof buf, me, 500u + (unsigned)k);
            H_OK(r, oobx_send(c, 1, 20, buf, sizeof buf));
        }
    }
    H_OK(r, oobx_barrier(c));
    if (me == 1) {
        sleep_ms(100);
        for (int src = n - 1; src >= 0; src--) {
            if (src == 1) continue;
            for (int t = 0; t < ntags; t++) {
                size_t b = t == ntags - 1 ? MiB : (size_t)t * 100, got = 0;
                unsigned char *buf = xmalloc(r, b + 1);
                int rc = oobx_recv(c, src, t, buf, b + 1, &got);
                if (rc != OOBX_SUCCESS)
                    H_FAIL(r, "oobx_recv(from %d, tag %d): %s: %s", src, t, oobx_error_name(rc), oobx_last_error());
                H_EQ(r, got, b, "unexpected message bytes");
                harness_verify(r, buf, b, src, (unsigned)t, "unexpected message from %d tag %d", src, t);
                free(buf);
            }
            for (int k = 0; k < 3; k++) {
                unsigned char buf[64];
                H_OK(r, oobx_recv(c, src, 20, buf, sizeof buf, NULL));
                harness_verify(r, buf, sizeof buf, src, 500u + (unsigned)k,
                               "same-tag message %d from rank %d (order kept?)", k, src);
            }
        }
    }
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* Every rank sends to every other, then receives in reverse order. */
static int rank_p2p_alltoall(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    int me = r->rank, n = r->nranks;
    unsigned char buf[256];
    for (int d = 0; d < n; d++) {
        if (d == me) continue;
        size_t b = 64 + (size_t)((me * n + d) % 100);
        harness_fill(buf, b, me, (unsigned)d);
        H_OK(r, oobx_send(c, d, 1000 + me, buf, b));
    }
    for (int s = n - 1; s >= 0; s--) {
        if (s == me) continue;
        size_t b = 64 + (size_t)((s * n + me) % 100), got = 0;
        int rc = oobx_recv(c, s, 1000 + s, buf, sizeof buf, &got);
        if (rc != OOBX_SUCCESS)
            H_FAIL(r, "oobx_recv(from %d): %s: %s", s, oobx_error_name(rc), oobx_last_error());
        H_EQ(r, got, b, "bytes from peer");
        harness_verify(r, buf, b, s, (unsigned)me, "message from rank %d", s);
    }
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

typedef struct p2p_thread {
    harness_rank_t *r;
    oobx_comm_t c;
    int t, count;
} p2p_thread_t;

static void *p2p_thread_main(void *arg)
{
    p2p_thread_t *a = arg;
    harness_rank_t *r = a->r;
    int me = r->rank, peer = 1 - me;
    size_t cap = 64 * KiB + 16;
    unsigned char *buf = xmalloc(r, cap);
    for (int m = 0; m < a->count; m++) {
        size_t b = (m % 7 == 3) ? 64 * KiB : (size_t)(1 + (m * 37 + a->t) % 300), got = 0;
        unsigned salt = (unsigned)(a->t * 100000 + m);
        if (me == 0) {
            harness_fill(buf, b, me, salt);
            H_OK(r, oobx_send(a->c, peer, a->t, buf, b));
            H_OK(r, oobx_recv(a->c, peer, 100 + a->t, buf, cap, &got));
            H_EQ(r, got, b, "threaded reply bytes");
            harness_verify(r, buf, b, peer, salt, "thread %d reply %d", a->t, m);
        } else {
            H_OK(r, oobx_recv(a->c, peer, a->t, buf, cap, &got));
            H_EQ(r, got, b, "threaded message bytes");
            harness_verify(r, buf, b, peer, salt, "thread %d message %d", a->t, m);
            harness_fill(buf, b, me, salt);
            H_OK(r, oobx_send(a->c, peer, 100 + a->t, buf, b));
        }
    }
    free(buf);
    return NULL;
}

/* Several threads of a rank send and receive on one communicator at once. */
static int rank_p2p_threads(harness_rank_t *r)
{
    conf_params_t *p = r->arg;
    oobx_comm_t c = harness_comm_init_or_die(r);
    pthread_t th[16];
    p2p_thread_t a[16];
    int nt = p->threads > 16 ? 16 : p->threads;
    for (int t = 0; t < nt; t++) {
        a[t] = (p2p_thread_t){.r = r, .c = c, .t = t, .count = p->count};
        if (pthread_create(&th[t], NULL, p2p_thread_main, &a[t]) != 0) H_FAIL(r, "pthread_create");
    }
    for (int t = 0; t < nt; t++) pthread_join(th[t], NULL);
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* Broadcast from every root at every size. */
static int rank_bcast(harness_rank_t *r)
{
    conf_params_t *p = r->arg;
    oobx_comm_t c = harness_comm_init_or_die(r);
    for (int root = 0; root < r->nranks; root++)
        for (int k = 0; k < p->nsizes; k++)
            check_bcast(r, c, root, p->sizes[k], (unsigned)(root * 10 + k), "bcast");
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* Group calls over several subsets, non-members running ahead. */
static int rank_group(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    int n = r->nranks, me = r->rank;
    int *g = xmalloc(r, sizeof(int) * (size_t)n);
    int ng = 0;
    for (int i = 1; i < n; i += 2) g[ng++] = i;
    if (ng) check_group(r, c, g, ng, "odd ranks");
    ng = 0;
    for (int i = n - 1; i >= 0; i--) g[ng++] = i;
    check_group(r, c, g, ng, "all ranks reversed");
    g[0] = me;
    check_group(r, c, g, 1, "self only");
    if (n > 1) {
        g[0] = n - 1;
        g[1] = 0;
        check_group(r, c, g, 2, "last and first");
    }
    H_OK(r, oobx_barrier(c));
    free(g);
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

static void split_expect(int n, const int *color, const int *key, int me, int *crank, int *csize)
{
    *crank = 0;
    *csize = 0;
    for (int i = 0; i < n; i++) {
        if (color[i] != color[me]) continue;
        (*csize)++;
        if (key[i] < key[me] || (key[i] == key[me] && i < me)) (*crank)++;
    }
}

static void use_child(harness_rank_t *r, oobx_comm_t child, int cn, const char *what)
{
    int cr;
    H_OK(r, oobx_comm_rank(child, &cr));
    check_allgather(r, child, 100, 31, what);
    check_ring_p2p(r, child, 200, 5, what);
    H_OK(r, oobx_barrier(child));
    for (int root = 0; root < cn; root++) check_bcast(r, child, root, 300, 40u + (unsigned)root, what);
    int *g = xmalloc(r, sizeof(int) * (size_t)cn);
    for (int i = 0; i < cn; i++) g[i] = cn - 1 - i;
    check_group(r, child, g, cn, what);
    free(g);
}

/* Split into several colors with reversed keys, some ranks out; use the children. */
static int rank_split(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    int n = r->nranks, me = r->rank;
    int *color = xmalloc(r, sizeof(int) * (size_t)n), *key = xmalloc(r, sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) {
        color[i] = (i % 5 == 4) ? -1 : i % 3;
        key[i] = -i;
    }
    oobx_comm_t child = (oobx_comm_t)(uintptr_t)1;
    H_OK(r, oobx_comm_split(c, color[me], key[me], &child));
    if (color[me] < 0) {
        if (child != NULL) H_FAIL(r, "oobx_comm_split(color %d): child is not NULL", color[me]);
    } else {
        int want_r, want_n, got;
        split_expect(n, color, key, me, &want_r, &want_n);
        if (!child) H_FAIL(r, "oobx_comm_split(color %d): child is NULL", color[me]);
        H_OK(r, oobx_comm_rank(child, &got));
        H_EQ(r, got, want_r, "child rank (reversed keys)");
        H_OK(r, oobx_comm_size(child, &got));
        H_EQ(r, got, want_n, "child size");
        use_child(r, child, want_n, "child");
        /* the parent still works while the child lives */
    }
    H_OK(r, oobx_barrier(c));
    check_allgather(r, c, 10, 77, "parent after split");
    if (child) {
        /* split the child again: two colors, equal keys: order of child ranks */
        int cr, cn;
        H_OK(r, oobx_comm_rank(child, &cr));
        H_OK(r, oobx_comm_size(child, &cn));
        oobx_comm_t gc = NULL;
        H_OK(r, oobx_comm_split(child, cr % 2, 0, &gc));
        if (!gc) H_FAIL(r, "grandchild is NULL");
        int got;
        H_OK(r, oobx_comm_rank(gc, &got));
        H_EQ(r, got, cr / 2, "grandchild rank");
        H_OK(r, oobx_comm_size(gc, &got));
        H_EQ(r, got, (cn + 1 - cr % 2) / 2, "grandchild size");
        use_child(r, gc, got, "grandchild");
        H_OK(r, oobx_comm_destroy(gc));
        H_OK(r, oobx_comm_destroy(child));
    }
    /* everyone in one color, key 0: same order as the parent */
    oobx_comm_t same = NULL;
    H_OK(r, oobx_comm_split(c, 7, 0, &same));
    int got;
    H_OK(r, oobx_comm_rank(same, &got));
    H_EQ(r, got, me, "rank in a one-color split");
    check_allgather(r, same, 50, 78, "one-color split");
    H_OK(r, oobx_comm_destroy(same));
    free(color);
    free(key);
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

typedef struct comm_thread {
    harness_rank_t *r;
    const oobx_unique_id_t *id;
    int nranks, rank, comm_index;
} comm_thread_t;

static void *comm_thread_main(void *arg)
{
    comm_thread_t *a = arg;
    harness_rank_t *r = a->r;
    oobx_comm_t c = NULL;
    int rc = oobx_comm_init(&c, a->nranks, a->rank, 1, a->id, &r->cfg);
    if (rc == OOBX_ERR_UNAVAILABLE) harness_skip(r, "transport %s: %s", r->transport, oobx_last_error());
    if (rc != OOBX_SUCCESS)
        H_FAIL(r, "comm %d, rank %d of %d: oobx_comm_init: %s: %s", a->comm_index, a->rank, a->nranks,
               oobx_error_name(rc), oobx_last_error());
    char what[64];
    snprintf(what, sizeof what, "comm %d rank %d", a->comm_index, a->rank);
    for (int k = 0; k < 3; k++) {
        check_allgather(r, c, 100, (unsigned)(a->comm_index * 10 + k), what);
        check_ring_p2p(r, c, 500, 9 + a->comm_index, what);
        H_OK(r, oobx_barrier(c));
    }
    H_OK(r, oobx_comm_destroy(c));
    return NULL;
}

/* One process, p->threads threads, each one rank of one communicator. */
static int rank_threads_one_comm(harness_rank_t *r)
{
    conf_params_t *p = r->arg;
    oobx_unique_id_t id;
    H_OK(r, oobx_get_unique_id(&id));
    pthread_t th[64];
    comm_thread_t a[64];
    int nt = p->threads > 64 ? 64 : p->threads;
    for (int t = 0; t < nt; t++) {
        a[t] = (comm_thread_t){.r = r, .id = &id, .nranks = nt, .rank = t, .comm_index = 0};
        if (pthread_create(&th[t], NULL, comm_thread_main, &a[t]) != 0) H_FAIL(r, "pthread_create");
    }
    for (int t = 0; t < nt; t++) pthread_join(th[t], NULL);
    return 0;
}

/* Each process runs p->ncomms threads; thread k is this rank of communicator k. */
static int rank_threads_many_comms(harness_rank_t *r)
{
    conf_params_t *p = r->arg;
    pthread_t th[8];
    comm_thread_t a[8];
    int nc = p->ncomms > 8 ? 8 : p->ncomms;
    for (int k = 0; k < nc; k++) {
        a[k] = (comm_thread_t){.r = r, .id = &p->ids[k], .nranks = r->nranks, .rank = r->rank, .comm_index = k};
        if (pthread_create(&th[k], NULL, comm_thread_main, &a[k]) != 0) H_FAIL(r, "pthread_create");
    }
    for (int k = 0; k < nc; k++) pthread_join(th[k], NULL);
    return 0;
}

static int prepare_ids(conf_case_t *c, char *why, size_t len)
{
    for (int k = 0; k < c->p.ncomms; k++) {
        int rc = oobx_get_unique_id(&c->p.ids[k]);
        if (rc != OOBX_SUCCESS) {
            snprintf(why, len, "oobx_get_unique_id: %s: %s", oobx_error_name(rc), oobx_last_error());
            return -1;
        }
    }
    return 0;
}

static int text_has(const char *s, const char *what) { return s && strstr(s, what); }

/* Argument checks: every one must be OOBX_ERR_INVALID, at once. */
static int rank_bad_args(harness_rank_t *r)
{
    int me = r->rank, n = r->nranks;
    oobx_comm_t c = NULL;
    oobx_unique_id_t zero;
    memset(&zero, 0, sizeof zero);
    oobx_config_t cfg = r->cfg;
    cfg.timeout_ms = 3000;
    oobx_unique_id_t ids[8]; /* room for nids > nranks */
    memset(ids, 0, sizeof ids);
    memcpy(ids, r->ids, sizeof(oobx_unique_id_t) * (size_t)r->nroots);
    double t0 = harness_now();
    H_RC(r, oobx_comm_init(NULL, n, me, r->nroots, ids, &cfg), OOBX_ERR_INVALID);
    H_RC(r, oobx_comm_init(&c, 0, 0, r->nroots, ids, &cfg), OOBX_ERR_INVALID);
    H_RC(r, oobx_comm_init(&c, n, n, r->nroots, ids, &cfg), OOBX_ERR_INVALID);
    H_RC(r, oobx_comm_init(&c, n, -1, r->nroots, ids, &cfg), OOBX_ERR_INVALID);
    H_RC(r, oobx_comm_init(&c, n, me, 0, ids, &cfg), OOBX_ERR_INVALID);
    H_RC(r, oobx_comm_init(&c, n, me, n + 1, ids, &cfg), OOBX_ERR_INVALID);
    H_RC(r, oobx_comm_init(&c, n, me, 1, NULL, &cfg), OOBX_ERR_INVALID);
    H_RC(r, oobx_comm_init(&c, n, me, 1, &zero, &cfg), OOBX_ERR_INVALID);
    if (!text_has(oobx_last_error(), "id") && !text_has(oobx_last_error(), "ID"))
        H_FAIL(r, "error text for a unique id of zeros does not mention the id: \"%s\"", oobx_last_error());
    if (c != NULL) H_FAIL(r, "a failed oobx_comm_init set *comm");
    double dt = harness_now() - t0;
    if (dt > 1.0) H_FAIL(r, "bad-argument inits took %.2f s; they should fail at once", dt);

    c = harness_comm_init_or_die(r);
    unsigned char buf[128];
    memset(buf, 0, sizeof buf);
    int x;
    H_RC(r, oobx_comm_rank(NULL, &x), OOBX_ERR_INVALID);
    H_RC(r, oobx_comm_rank(c, NULL), OOBX_ERR_INVALID);
    H_RC(r, oobx_comm_size(NULL, &x), OOBX_ERR_INVALID);
    H_RC(r, oobx_send(c, -1, 0, buf, 1), OOBX_ERR_INVALID);
    H_RC(r, oobx_send(c, n, 0, buf, 1), OOBX_ERR_INVALID);
    H_RC(r, oobx_send(c, (me + 1) % n, 0, NULL, 10), OOBX_ERR_INVALID);
    H_RC(r, oobx_send(NULL, 0, 0, buf, 1), OOBX_ERR_INVALID);
    H_RC(r, oobx_recv(c, -1, 0, buf, 1, NULL), OOBX_ERR_INVALID);
    H_RC(r, oobx_recv(c, n, 0, buf, 1, NULL), OOBX_ERR_INVALID);
    H_RC(r, oobx_recv(c, (me + 1) % n, 0, NULL, 10, NULL), OOBX_ERR_INVALID);
    H_RC(r, oobx_allgather(c, NULL, 10), OOBX_ERR_INVALID);
    H_RC(r, oobx_allgather(NULL, buf, 1), OOBX_ERR_INVALID);
    H_RC(r, oobx_bcast(c, -1, buf, 1), OOBX_ERR_INVALID);
    H_RC(r, oobx_bcast(c, n, buf, 1), OOBX_ERR_INVALID);
    H_RC(r, oobx_bcast(c, 0, NULL, 10), OOBX_ERR_INVALID);
    H_RC(r, oobx_barrier(NULL), OOBX_ERR_INVALID);
    int g[4] = {me, me, me, me};
    int other[1] = {(me + 1) % n};
    H_RC(r, oobx_group_barrier(c, NULL, 1), OOBX_ERR_INVALID);
    H_RC(r, oobx_group_barrier(c, g, 0), OOBX_ERR_INVALID);
    H_RC(r, oobx_group_barrier(c, g, n + 1), OOBX_ERR_INVALID);
    if (n > 1) H_RC(r, oobx_group_barrier(c, other, 1), OOBX_ERR_INVALID); /* caller not in the group */
    int outside[2] = {me, n};
    H_RC(r, oobx_group_barrier(c, outside, 2), OOBX_ERR_INVALID);
    H_RC(r, oobx_group_bcast(c, g, 1, 1, buf, 1), OOBX_ERR_INVALID);
    H_RC(r, oobx_group_bcast(c, g, 1, -1, buf, 1), OOBX_ERR_INVALID);
    H_RC(r, oobx_group_allgather(c, g, 1, NULL, 10), OOBX_ERR_INVALID);
    H_RC(r, oobx_comm_split(c, 0, 0, NULL), OOBX_ERR_INVALID);
    H_RC(r, oobx_comm_abort(NULL), OOBX_ERR_INVALID);
    H_RC(r, oobx_comm_destroy(NULL), OOBX_SUCCESS);
    (void)oobx_comm_transport(NULL); /* must not crash */

    /* the communicator still works after all that */
    H_OK(r, oobx_barrier(c));

    /* receive size checks */
    if (n >= 2 && me < 2) {
        int peer = 1 - me;
        if (me == 0) {
            harness_fill(buf, 100, 0, 1);
            H_OK(r, oobx_send(c, peer, 1, buf, 100));
            H_OK(r, oobx_send(c, peer, 2, buf, 10));
            H_OK(r, oobx_send(c, peer, 3, buf, 10));
            H_OK(r, oobx_send(c, peer, 4, buf, 50));
        } else {
            size_t got = 0;
            H_RC(r, oobx_recv(c, peer, 1, buf, 10, &got), OOBX_ERR_TRUNCATED);
            if (!strstr(oobx_last_error(), "100") || !strstr(oobx_last_error(), "10"))
                H_FAIL(r, "truncation error text should give both sizes (100 and 10): \"%s\"", oobx_last_error());
            int rc = oobx_recv(c, peer, 2, buf, 20, NULL);
            if (rc != OOBX_ERR_TRUNCATED && rc != OOBX_ERR_INVALID && rc != OOBX_ERR_MISMATCH)
                H_FAIL(r, "oobx_recv(10 B message, capacity 20, received NULL): got %s, want a size error "
                          "(OOBX_ERR_TRUNCATED, _INVALID or _MISMATCH); last error: %s",
                       oobx_error_name(rc), oobx_last_error());
            /* exact size with received NULL is fine */
            H_OK(r, oobx_recv(c, peer, 3, buf, 10, NULL));
            H_OK(r, oobx_recv(c, peer, 4, buf, sizeof buf, &got));
            H_EQ(r, got, 50, "bytes after a truncated receive");
            harness_verify(r, buf, 50, 0, 1, "message after a truncated receive");
        }
    }
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_comm_destroy(c));

    /* names of the codes */
#define CHECK_NAME_(name, value, desc)                                                       \
    if (strcmp(oobx_error_name(value), "OOBX_" #name) != 0)                                  \
        H_FAIL(r, "oobx_error_name(%d) = %s, want OOBX_%s", value, oobx_error_name(value), #name); \
    if (strcmp(oobx_strerror(value), desc) != 0)                                             \
        H_FAIL(r, "oobx_strerror(%d) = %s, want %s", value, oobx_strerror(value), desc);
    OOBX_ERROR_MAP(CHECK_NAME_)
#undef CHECK_NAME_
    if (!oobx_strerror(-999) || !oobx_error_name(-999) || !oobx_strerror(5))
        H_FAIL(r, "oobx_strerror/oobx_error_name of an unknown code returned NULL");
    if (!oobx_version() || strcmp(oobx_version(), OOBX_VERSION_STRING) != 0)
        H_FAIL(r, "oobx_version() = %s, want %s", oobx_version() ? oobx_version() : "(null)", OOBX_VERSION_STRING);
    return 0;
}

/* Peak resident memory of this process, in bytes (VmHWM). */
static size_t peak_rss(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %zu kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024;
}

/* A huge message into a small receive: OOBX_ERR_TRUNCATED with both sizes,
 * memory bounded on both sides (the sender's buffer is an untouched
 * MAP_NORESERVE mapping; the receiver never holds the message), and the
 * link still works. p.sizes[0]: the message. */
static int rank_huge_truncated(harness_rank_t *r)
{
    oobx_comm_t c;
    H_OK(r, harness_comm_init(r, &c));
    size_t big = ((const conf_params_t *)r->arg)->sizes[0];
    const size_t bound = 256u << 20;
    char small[16];
    H_OK(r, oobx_barrier(c));
    size_t before = peak_rss();
    if (r->rank == 0) {
        char *huge = mmap(NULL, big, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (huge == MAP_FAILED) H_FAIL(r, "mmap of %zu bytes: %s", big, strerror(errno));
        /* the receive is posted by then: unexpected, the message would fail this rank */
        usleep(300000);
        H_OK(r, oobx_send(c, 1, 9, huge, big));
        munmap(huge, big);
        memset(small, 7, sizeof small);
        H_OK(r, oobx_send(c, 1, 10, small, sizeof small));
    } else if (r->rank == 1) {
        size_t got = 0;
        H_RC(r, oobx_recv(c, 0, 9, small, sizeof small, &got), OOBX_ERR_TRUNCATED);
        char want[32];
        snprintf(want, sizeof want, "%zu", big);
        if (!strstr(oobx_last_error(), want))
            H_FAIL(r, "the truncation error should give the message size %s: \"%s\"", want, oobx_last_error());
        H_OK(r, oobx_recv(c, 0, 10, small, sizeof small, &got));
        H_EQ(r, got, sizeof small, "bytes of the message after the truncated one");
        for (size_t i = 0; i < sizeof small; i++)
            if (small[i] != 7) H_FAIL(r, "byte %zu of the message after the truncated one is %d, want 7", i, small[i]);
    }
    size_t after = peak_rss();
    if (after > before + bound)
        H_FAIL(r, "rank %d: peak memory grew by %zu MiB over a %zu GiB message (bound %zu MiB)", r->rank,
               (after - before) >> 20, big >> 30, bound >> 20);
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* Lines of a file that contain what. */
static int count_lines(const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, what)) n++;
    if (f) fclose(f);
    return n;
}

/* Single-copy payloads between ranks of one host (OOBX_CMA_MIN): sizes
 * around the threshold and the socket rendezvous, messages that wait
 * unexpected and are taken out of order, a payload truncated into a small
 * receive, every byte checked. p.sizes[0] = 1: the receiver (rank 1) turns
 * single copies off, so the sender's offers are refused and every payload
 * takes the ordinary path. The receiver's trace log says which payloads it
 * pulled (the verbs transport pulls none: its rendezvous is an RDMA read). */
static int rank_single_copy(harness_rank_t *r)
{
    int refuse = ((const conf_params_t *)r->arg)->sizes[0] == 1;
    setenv("OOBX_CMA_MIN", r->rank == 1 && refuse ? "0" : "65536", 1);
    setenv("OOBX_UCX_PULL", "1", 1); /* the UCX transport's pulls too */
    char logpath[64];
    snprintf(logpath, sizeof logpath, "/tmp/oobx-single-copy-%d.log", (int)getpid());
    if (r->rank == 1) {
        setenv("OOBX_LOG_LEVEL", "trace", 1);
        setenv("OOBX_LOG_FILE", logpath, 1);
    }
    oobx_comm_t c;
    H_OK(r, harness_comm_init(r, &c));
    const char *tp = getenv("OOBX_TRANSPORT");
    int pulls = tp && (strcmp(tp, "socket") == 0 || strcmp(tp, "ucx") == 0);
    static const size_t sizes[] = {65535, 65536, 65537, 1048579, (8u << 20) + 5};
    const int nsz = (int)OOBX_ARRAY_SIZE_(sizes), nux = 12;
    const size_t uxb = 200000, big = 8u << 20;
    unsigned char *buf = xmalloc(r, big + 64);
    H_OK(r, oobx_barrier(c));
    if (r->rank == 0) {
        for (int k = 0; k < nsz; k++) {
            harness_fill(buf, sizes[k], 0, (unsigned)k);
            H_OK(r, oobx_send(c, 1, k, buf, sizes[k]));
        }
        /* sent before rank 1 posts their receives: they wait as unexpected messages */
        for (int k = 0; k < nux; k++) {
            unsigned char *m = xmalloc(r, uxb);
            harness_fill(m, uxb, 0, 100u + (unsigned)k);
            H_OK(r, oobx_send(c, 1, 100 + k, m, uxb));
            free(m);
        }
        harness_fill(buf, big, 0, 200u);
        H_OK(r, oobx_send(c, 1, 200, buf, big));
        harness_fill(buf, 1000, 0, 201u);
        H_OK(r, oobx_send(c, 1, 201, buf, 1000));
    } else if (r->rank == 1) {
        for (int k = 0; k < nsz; k++) {
            size_t got = 0;
            memset(buf, 0xee, sizes[k] + 16);
            H_OK(r, oobx_recv(c, 0, k, buf, sizes[k] + 16, &got));
            H_EQ(r, got, sizes[k], "bytes received");
            harness_verify(r, buf, sizes[k], 0, (unsigned)k, "single-copy message of %zu B", sizes[k]);
            if (buf[sizes[k]] != 0xee) H_FAIL(r, "the receive of %zu B wrote past the message", sizes[k]);
        }
        usleep(200000);
        for (int k = nux - 1; k >= 0; k--) {
            size_t got = 0;
            H_OK(r, oobx_recv(c, 0, 100 + k, buf, uxb, &got));
            H_EQ(r, got, uxb, "bytes of an unexpected message");
            harness_verify(r, buf, uxb, 0, 100u + (unsigned)k, "unexpected message %d", k);
        }
        size_t got = 0;
        H_RC(r, oobx_recv(c, 0, 200, buf, 100000, &got), OOBX_ERR_TRUNCATED);
        H_OK(r, oobx_recv(c, 0, 201, buf, 1000, &got));
        harness_verify(r, buf, 1000, 0, 201u, "the message after the truncated one");
    }
    free(buf);
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_comm_destroy(c));
    if (r->rank == 1) {
        /* every payload of 64 KiB or more but the truncated one: 4 sizes and the unexpected ones */
        int want = pulls && !refuse ? (nsz - 1) + nux : 0, got = count_lines(logpath, "pulled");
        unlink(logpath);
        if (got != want)
            H_FAIL(r, "rank 1 pulled %d payloads from rank 0's memory, want %d (%s)", got, want,
                   refuse ? "single copies are off here" : "OOBX_CMA_MIN=64K");
    }
    return 0;
}

/* Adaptive waiting: after quick round trips have taught the endpoint to
 * poll (2 ranks on a host of 2 or more CPUs), a receive that waits 1.5 s
 * must fall back to sleeping: it may cost the CPU of a polling window, not
 * of the wait. */
static double cpu_now_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec * 1e-6;
}

static int rank_idle_wait(harness_rank_t *r)
{
    oobx_comm_t c;
    H_OK(r, harness_comm_init(r, &c));
    char m[8] = {0};
    H_OK(r, oobx_barrier(c));
    for (int i = 0; i < 300; i++) {
        if (r->rank == 0) {
            H_OK(r, oobx_send(c, 1, 1, m, sizeof m));
            H_OK(r, oobx_recv(c, 1, 2, m, sizeof m, NULL));
        } else {
            H_OK(r, oobx_recv(c, 0, 1, m, sizeof m, NULL));
            H_OK(r, oobx_send(c, 0, 2, m, sizeof m));
        }
    }
    if (r->rank == 0) {
        usleep(1500000);
        H_OK(r, oobx_send(c, 1, 3, m, sizeof m));
    } else {
        double t0 = harness_now(), c0 = cpu_now_s();
        H_OK(r, oobx_recv(c, 0, 3, m, sizeof m, NULL));
        double wall = harness_now() - t0, cpu = cpu_now_s() - c0;
        if (wall < 1.0) H_FAIL(r, "the long receive ended after %.3f s, before the sender sent", wall);
        if (cpu > 0.1)
            H_FAIL(r, "a receive that waited %.2f s used %.0f ms of CPU (bound 100 ms): polling did not fall back to "
                      "sleeping (OOBX_SPIN_US=%s)",
                   wall, cpu * 1e3, getenv("OOBX_SPIN_US") ? getenv("OOBX_SPIN_US") : "unset");
        harness_note(r, "a 1.5 s receive after 300 round trips used %.2f ms of CPU", cpu * 1e3);
    }
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* Malformed or out-of-range settings: each one alone makes init fail. */
static const char *const bad_settings[] = {
    "OOBX_ALLGATHER_ALGO=bogus", "OOBX_CHUNK_BYTES=12",       "OOBX_TIMEOUT_MS=abc",   "OOBX_UNEXPECTED_MAX=-5",
    "OOBX_RING_SLOTS=99999",     "OOBX_SPIN_US=1000000000",   "OOBX_TIMEOUT_MS=-7",    "OOBX_NODE_BUF=1x",
    "OOBX_UID_STAGGER_RATE=0",   "OOBX_TIMEOUT_MS=99999999999",
};

/* A malformed setting is OOBX_ERR_INVALID naming the variable and the value (p.count: which). */
static int rank_bad_setting(harness_rank_t *r)
{
    const char *set = bad_settings[((conf_params_t *)r->arg)->count];
    char name[64];
    const char *eq = strchr(set, '=');
    snprintf(name, sizeof name, "%.*s", (int)(eq - set), set);
    oobx_comm_t c = NULL;
    int rc = harness_comm_init(r, &c);
    if (rc == OOBX_SUCCESS) H_FAIL(r, "init with %s succeeded", set);
    if (rc != OOBX_ERR_INVALID) H_FAIL(r, "init with %s: got %s, want OOBX_ERR_INVALID", set, oobx_error_name(rc));
    if (!strstr(oobx_last_error(), name) || !strstr(oobx_last_error(), eq + 1))
        H_FAIL(r, "error text does not name %s and its value %s: \"%s\"", name, eq + 1, oobx_last_error());
    return 0;
}

typedef struct aborter {
    oobx_comm_t c;
    volatile uint32_t *flag;
    int delay_ms;
    double t_abort;
} aborter_t;

static void *aborter_main(void *arg)
{
    aborter_t *a = arg;
    sleep_ms(a->delay_ms);
    a->t_abort = harness_now();
    if (a->flag)
        *a->flag = 1;
    else
        oobx_comm_abort(a->c);
    return NULL;
}

/* A blocked oobx_recv ends with OOBX_ERR_ABORTED soon after the abort flag is
 * set (p->count 0) or oobx_comm_abort is called (p->count 1). */
static int rank_abort(harness_rank_t *r)
{
    conf_params_t *p = r->arg;
    volatile uint32_t flag = 0;
    int use_flag = p->count == 0;
    if (use_flag) r->cfg.abort_flag = &flag;
    oobx_comm_t c = harness_comm_init_or_die(r);
    aborter_t a = {.c = c, .flag = use_flag ? &flag : NULL, .delay_ms = 300};
    pthread_t th;
    if (pthread_create(&th, NULL, aborter_main, &a) != 0) H_FAIL(r, "pthread_create");
    unsigned char buf[16];
    int peer = (r->rank + 1) % r->nranks;
    double t0 = harness_now();
    int rc = oobx_recv(c, peer, 99, buf, sizeof buf, NULL);
    double t1 = harness_now();
    pthread_join(th, NULL);
    const char *how = use_flag ? "abort flag" : "oobx_comm_abort";
    if (rc != OOBX_ERR_ABORTED)
        H_FAIL(r, "blocked oobx_recv after %s: got %s after %.3f s, want OOBX_ERR_ABORTED (%s)", how,
               oobx_error_name(rc), t1 - t0, oobx_last_error());
    double lat = t1 - a.t_abort;
    printf("rank %d: oobx_recv returned OOBX_ERR_ABORTED %.1f ms after the %s\n", r->rank, lat * 1e3, how);
    if (lat > 1.0) H_FAIL(r, "oobx_recv took %.3f s to notice the %s (want < 1 s, target 100 ms)", lat, how);
    if (lat < 0) H_FAIL(r, "oobx_recv returned OOBX_ERR_ABORTED %.3f s before the %s", -lat, how);
    /* later calls are aborted too */
    H_RC(r, oobx_barrier(c), OOBX_ERR_ABORTED);
    H_RC(r, oobx_send(c, peer, 1, buf, 1), OOBX_ERR_ABORTED);
    sleep_ms(700); /* every rank has aborted before anyone closes its links */
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* A receive nobody answers ends with OOBX_ERR_TIMEOUT naming the peer. */
static int rank_timeout(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    int peer = (r->rank + 1) % r->nranks;
    if (r->rank != 0) {
        /* stays silent and connected until rank 0 has timed out */
        sleep_ms(r->cfg.timeout_ms + 1500);
        H_OK(r, oobx_comm_destroy(c));
        return 0;
    }
    unsigned char buf[16];
    double t0 = harness_now();
    int rc = oobx_recv(c, peer, 1234, buf, sizeof buf, NULL);
    double dt = harness_now() - t0;
    if (rc != OOBX_ERR_TIMEOUT)
        H_FAIL(r, "oobx_recv with nobody sending: got %s after %.2f s, want OOBX_ERR_TIMEOUT", oobx_error_name(rc), dt);
    double want = r->cfg.timeout_ms / 1000.0;
    if (dt < want * 0.8 || dt > want + 1.5)
        H_FAIL(r, "oobx_recv timed out after %.2f s with timeout_ms %d", dt, r->cfg.timeout_ms);
    char who[32];
    snprintf(who, sizeof who, "rank %d", peer);
    if (!strstr(oobx_last_error(), who))
        H_FAIL(r, "timeout error text does not name %s: \"%s\"", who, oobx_last_error());
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* Rank 0 passes 16 bytes per rank to an allgather, the others 8. No rank
 * may return OOBX_SUCCESS; every rank returns
 * OOBX_ERR_MISMATCH well before the call's timeout, naming the sizes (the
 * ones that saw it, and the others that heard it from them). */
static int rank_size_mismatch(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    size_t bpr = r->rank == 0 ? 16 : 8;
    unsigned char *buf = xmalloc(r, (size_t)r->nranks * 16);
    memset(buf, 0, (size_t)r->nranks * 16);
    double t0 = harness_now();
    /* a rank still in the barrier when the first ones see the mismatch
     * hears of it there: that counts as its answer */
    int rc = oobx_barrier(c);
    if (rc == OOBX_SUCCESS) {
        t0 = harness_now();
        rc = oobx_allgather(c, buf, bpr);
    }
    double dt = harness_now() - t0;
    if (rc == OOBX_SUCCESS) H_FAIL(r, "oobx_allgather succeeded although rank 0 passed 16 bytes per rank and the rest 8");
    if (rc != OOBX_ERR_MISMATCH)
        H_FAIL(r, "oobx_allgather: got %s after %.2f s, want OOBX_ERR_MISMATCH: %s", oobx_error_name(rc), dt,
               oobx_last_error());
    if (dt > r->cfg.timeout_ms / 2000.0)
        H_FAIL(r, "oobx_allgather took %.2f s to see the mismatch (timeout %d ms)", dt, r->cfg.timeout_ms);
    if (!strstr(oobx_last_error(), "disagree") || !strstr(oobx_last_error(), "16"))
        H_FAIL(r, "the error does not say that the ranks disagree, with the sizes: %s", oobx_last_error());
    /* the communicator is failed for good: the next call says so at once */
    rc = oobx_barrier(c);
    if (rc != OOBX_ERR_MISMATCH) H_FAIL(r, "a barrier after the mismatch returned %s", oobx_error_name(rc));
    free(buf);
    /* linger before leaving: a rank whose send meets the closed link of one
     * that left at once may see that before the notice queued on the same
     * link (a known race of the socket transport) */
    sleep_ms(500);
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* Ranks that disagree on the call itself. p.count 0: the even ranks
 * broadcast from rank 0, the odd ones from rank 1; 1: rank 0 broadcasts
 * where the others allgather (through the host's shared memory on the
 * node-aware path); 2: rank 0 waits in a barrier where the others allgather
 * 8 bytes (both through the host's shared memory on the node-aware path).
 * No rank returns OOBX_SUCCESS with data its own call does not promise (a
 * root may succeed: it only sends), and on every rank the
 * call or one of the barriers after it returns OOBX_ERR_MISMATCH saying
 * that the ranks disagree, well before the timeout. */
static int rank_call_mismatch(harness_rank_t *r)
{
    conf_params_t *p = r->arg;
    oobx_comm_t c = harness_comm_init_or_die(r);
    double t0 = harness_now();
    /* a rank still in this barrier when the first ones see the disagreement
     * hears of it there: that counts as its answer */
    int rc = oobx_barrier(c);
    /* count 3: as 0, but the odd ranks come 300 ms late, so that the even
     * ones have left the broadcast (rank 0's children got its bytes) when
     * rank 1's message reaches rank 2: a disagreement found after the call */
    if (rc == OOBX_SUCCESS && p->count == 3 && r->rank % 2) sleep_ms(300);
    if (rc == OOBX_SUCCESS && (p->count == 0 || p->count == 3)) {
        int root = r->rank % 2;
        uint64_t v = r->rank == root ? 1000u + (unsigned)root : 0;
        rc = oobx_bcast(c, root, &v, sizeof v);
        if (rc == OOBX_SUCCESS && v != 1000u + (unsigned)root)
            H_FAIL(r, "oobx_bcast from rank %d succeeded with %llu, not rank %d's value", root,
                   (unsigned long long)v, root);
    } else if (rc == OOBX_SUCCESS && r->rank == 0 && p->count == 2) {
        rc = oobx_barrier(c);
        if (rc == OOBX_SUCCESS) H_FAIL(r, "oobx_barrier succeeded although the other ranks called oobx_allgather");
    } else if (rc == OOBX_SUCCESS && r->rank == 0) {
        uint64_t v = 7;
        rc = oobx_bcast(c, 0, &v, sizeof v);
    } else if (rc == OOBX_SUCCESS) {
        unsigned char *buf = xmalloc(r, (size_t)r->nranks * 8);
        memset(buf, 0, (size_t)r->nranks * 8);
        rc = oobx_allgather(c, buf, 8);
        free(buf);
        if (rc == OOBX_SUCCESS)
            H_FAIL(r, "oobx_allgather succeeded although rank 0 called %s", p->count == 2 ? "oobx_barrier" : "oobx_bcast");
    }
    /* a rank that saw nothing amiss hears of it from those that did */
    for (int k = 0; rc == OOBX_SUCCESS && k < 50; k++) rc = oobx_barrier(c);
    double dt = harness_now() - t0;
    if (rc != OOBX_ERR_MISMATCH)
        H_FAIL(r, "got %s after %.2f s, want OOBX_ERR_MISMATCH: %s", oobx_error_name(rc), dt, oobx_last_error());
    if (dt > r->cfg.timeout_ms / 2000.0)
        H_FAIL(r, "the mismatch took %.2f s to be seen (timeout %d ms): %s", dt, r->cfg.timeout_ms, oobx_last_error());
    if (!strstr(oobx_last_error(), "disagree"))
        H_FAIL(r, "the error does not say that the ranks disagree: %s", oobx_last_error());
    rc = oobx_barrier(c);
    if (rc != OOBX_ERR_MISMATCH) H_FAIL(r, "a barrier after the mismatch returned %s", oobx_error_name(rc));
    sleep_ms(500); /* as in rank_size_mismatch */
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* Barriers keep their promise: no rank leaves one before the last has
 * entered it. The ranks enter in a shuffled order, up to 60 ms apart; the
 * entry and exit times (one host: one monotonic clock) are compared after.
 * Node-aware (init found hosts): every barrier goes through the host's
 * shared memory and the leaders (oobx_debug_coll_counts); otherwise none
 * does. */
static int rank_barrier_order(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    int n = r->nranks, me = r->rank;
    oobx_init_timings_t it = OOBX_INIT_TIMINGS_INIT;
    H_OK(r, oobx_comm_get_init_timings(c, &it));
    H_OK(r, oobx_barrier(c)); /* init's own links settle */
    oobx_coll_counts_t was = OOBX_COLL_COUNTS_INIT, now = OOBX_COLL_COUNTS_INIT;
    H_OK(r, oobx_debug_coll_counts(c, &was));
    const int rounds = 4;
    double *t = xmalloc(r, (size_t)n * 2 * sizeof(double));
    for (int k = 0; k < rounds; k++) {
        sleep_ms((unsigned)(((unsigned)me * 7919u + (unsigned)k * 104729u) % 4u) * 20u);
        double mine[2];
        mine[0] = harness_now();
        H_OK(r, oobx_barrier(c));
        mine[1] = harness_now();
        memcpy(t + (size_t)me * 2, mine, sizeof mine);
        H_OK(r, oobx_allgather(c, t, 2 * sizeof(double)));
        double last_in = 0;
        int who = -1;
        for (int i = 0; i < n; i++)
            if (t[2 * i] > last_in) last_in = t[2 * i], who = i;
        for (int i = 0; i < n; i++)
            if (t[2 * i + 1] < last_in)
                H_FAIL(r, "barrier %d: rank %d left it %.6f s before rank %d entered", k, i, last_in - t[2 * i + 1], who);
    }
    free(t);
    H_OK(r, oobx_debug_coll_counts(c, &now));
    unsigned long long nb = now.node_barrier - was.node_barrier;
    unsigned long long want = it.hosts > 0 && n > 1 ? (unsigned long long)rounds : 0;
    if (nb != want)
        H_FAIL(r, "%llu of %d barriers went through the host's shared memory (init found %d hosts); want %llu", nb,
               rounds, it.hosts, want);
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* Invalid groups fail at once, on the calling rank alone, and leave the
 * communicator usable. */
static int rank_bad_groups(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    int me = r->rank, other = (r->rank + 1) % r->nranks;
    int dup[3] = {me, me, me}, out[2] = {me, r->nranks}, absent[1] = {other};
    struct {
        const int *g;
        int n;
        const char *what, *want;
    } cases[] = {{dup, 3, "the caller three times", "twice"},
                 {out, 2, "a rank out of range", "not in 0.."},
                 {absent, 1, "without the caller", "not in the group"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        double t0 = harness_now();
        int rc = oobx_group_barrier(c, cases[k].g, cases[k].n);
        double dt = harness_now() - t0;
        if (rc != OOBX_ERR_INVALID || dt > 0.5)
            H_FAIL(r, "oobx_group_barrier with %s: %s after %.2f s, want OOBX_ERR_INVALID at once", cases[k].what,
                   oobx_error_name(rc), dt);
        if (!strstr(oobx_last_error(), cases[k].want))
            H_FAIL(r, "oobx_group_barrier with %s: \"%s\" does not say \"%s\"", cases[k].what, oobx_last_error(),
                   cases[k].want);
        unsigned char b[8];
        rc = oobx_group_allgather(c, cases[k].g, cases[k].n, b, 1);
        if (rc != OOBX_ERR_INVALID)
            H_FAIL(r, "oobx_group_allgather with %s: %s, want OOBX_ERR_INVALID", cases[k].what, oobx_error_name(rc));
    }
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* Repeated init/destroy; rank 0 makes each id and broadcasts it on a base comm. */
static int rank_cycles(harness_rank_t *r)
{
    conf_params_t *p = r->arg;
    oobx_comm_t base = harness_comm_init_or_die(r);
    for (int k = 0; k < p->count; k++) {
        oobx_unique_id_t id;
        if (r->rank == 0) H_OK(r, oobx_get_unique_id(&id));
        H_OK(r, oobx_bcast(base, 0, &id, sizeof id));
        oobx_comm_t c = NULL;
        int rc = oobx_comm_init(&c, r->nranks, r->rank, 1, &id, &r->cfg);
        if (rc != OOBX_SUCCESS) H_FAIL(r, "cycle %d: oobx_comm_init: %s: %s", k, oobx_error_name(rc), oobx_last_error());
        check_allgather(r, c, 16, (unsigned)k, "cycle");
        H_OK(r, oobx_comm_destroy(c));
    }
    H_OK(r, oobx_comm_destroy(base));
    return 0;
}

/* ---- the case table ------------------------------------------------------------------ */

static conf_case_t *add_case(conf_suite_t *s, const char *name, harness_fn fn, int n, int roots)
{
    if (s->ncases == MAX_CASES) {
        fprintf(stderr, "conformance: more than %d cases\n", MAX_CASES);
        abort();
    }
    conf_case_t *c = &s->cases[s->ncases++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->job.name = c->name;
    c->job.fn = fn;
    c->job.nranks = n;
    c->job.nroots = roots;
    c->job.arg = &c->p;
    c->job.env = c->env;
    c->suite = s;
    return c;
}

static void run_case(void **state)
{
    conf_case_t *c = *state;
    const conf_suite_t *s = c->suite;
    if (s->unavailable) {
        print_message("  skipped: %s\n", s->why);
        skip();
        return;
    }
    if (c->job.nranks > s->max_ranks) {
        print_message("  skipped: %d ranks > OOBX_TEST_MAX_RANKS=%d\n", c->job.nranks, s->max_ranks);
        skip();
        return;
    }
    if (c->prepare) {
        char why[512];
        if (c->prepare(c, why, sizeof why) != 0) fail_msg("%s: %s", c->name, why);
    }
    c->job.arg = &c->p;
    c->job.env = c->env;
    c->job.skip_is_failure = s->available;
    harness_run_test(&c->job);
}

static int probe_rank(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

static void build_cases(conf_suite_t *s)
{
    char name[96];
    int sc = s->scale;
    static const int sizes_n[] = {1, 2, 3, 7, 16, 64, 128, 256};
    int max_n = sc == 0 ? 16 : sc == 1 ? 64 : 256;
    conf_case_t *c;

    /* every call at every size and root count */
    for (size_t i = 0; i < OOBX_ARRAY_SIZE_(sizes_n); i++) {
        int n = sizes_n[i];
        if (n > max_n) continue;
        for (int roots = 1; roots <= 3 && roots <= n; roots++) {
            snprintf(name, sizeof name, "api_n%d_roots%d", n, roots);
            add_case(s, name, rank_api, n, roots);
        }
    }
    /* the environment path */
    static const int env_n[] = {1, 2, 7, 16, 64};
    for (size_t i = 0; i < OOBX_ARRAY_SIZE_(env_n); i++) {
        int n = env_n[i];
        if (n > max_n) continue;
        for (int roots = 1; roots <= 3 && roots <= n; roots += 2) {
            snprintf(name, sizeof name, "env_n%d_roots%d", n, roots);
            c = add_case(s, name, rank_api, n, roots);
            c->job.from_env = 1;
        }
    }
    /* the launcher's host pair in the node-aware bootstrap */
    static const char *const local_names[] = {"launcher_local_one_host_n8", "launcher_local_two_nodes_one_name_n8",
                                              "launcher_local_host_id_wins_n8",
                                              "launcher_local_one_host_roots3_n8"};
    for (int k = 0; k < 4; k++) {
        c = add_case(s, local_names[k], rank_launcher_local, 8, k == 3 ? 3 : 1);
        c->job.from_env = 1;
        c->p.count = k;
        c->env[0] = "OOBX_NODE_AWARE_MIN=2";
    }
    /* ranks that start up to a second apart */
    c = add_case(s, "staggered_start_n16_roots3", rank_api, sc ? 16 : 8, 3);
    c->job.start_spread_ms = 1000;
    c = add_case(s, "staggered_start_env_n7_roots2", rank_api, 7, 2);
    c->job.start_spread_ms = 1000;
    c->job.from_env = 1;

    /* allgather: every algorithm, sizes 0, 1, 100, 1 MiB per rank */
    static const char *algos[] = {"auto", "ring", "bruck", "direct"};
    static const int ag_n[] = {2, 3, 7, 16, 64};
    for (size_t a = 0; a < 4; a++) {
        for (size_t i = 0; i < OOBX_ARRAY_SIZE_(ag_n); i++) {
            int n = ag_n[i];
            if (n > max_n) continue;
            snprintf(name, sizeof name, "allgather_%s_n%d", algos[a], n);
            c = add_case(s, name, rank_allgather, n, n % 3 == 0 ? 3 : n > 1 ? 2 : 1);
            snprintf(c->envbuf[0], sizeof c->envbuf[0], "OOBX_ALLGATHER_ALGO=%s", algos[a]);
            c->env[0] = c->envbuf[0];
            /* slices of many chunks at every rank count; 1 MiB slices at 16
             * ranks and more only in long (they add a minute to make test) */
            size_t big = sc == 2 ? (n > 16 ? 64 * KiB : MiB) : sc == 0 || n > 16 ? 16 * KiB : n == 16 ? 256 * KiB : MiB;
            size_t sz[] = {0, 1, 100, 4097, big};
            for (size_t k = 0; k < 5; k++) c->p.sizes[c->p.nsizes++] = sz[k];
            /* a ring of 1 MiB slices on an oversubscribed machine is slow, not stuck */
            c->job.deadline_s = 120;
            c->job.call_timeout_ms = 60000;
        }
    }

    /* p2p */
    c = add_case(s, "p2p_sizes_n2", rank_p2p_sizes, 2, 1);
    {
        size_t sz[] = {0, 1, 4 * KiB, MiB, sc == 0 ? 4 * MiB : 64 * MiB, GiB};
        int k = sc == 2 ? 6 : 5;
        for (int j = 0; j < k; j++) c->p.sizes[c->p.nsizes++] = sz[j];
        c->job.deadline_s = sc == 2 ? 300 : 120;
        c->job.call_timeout_ms = sc == 2 ? 240000 : 60000;
    }
    c = add_case(s, "p2p_sizes_n3_roots2", rank_p2p_sizes, 3, 2);
    {
        size_t sz[] = {0, 1, 4 * KiB, MiB};
        for (int j = 0; j < 4; j++) c->p.sizes[c->p.nsizes++] = sz[j];
    }
    add_case(s, "p2p_unexpected_out_of_order_n3", rank_p2p_unexpected, 3, 1);
    add_case(s, "p2p_unexpected_out_of_order_n7_roots2", rank_p2p_unexpected, 7, 2);
    add_case(s, "p2p_alltoall_n16", rank_p2p_alltoall, 16, 2);
    if (max_n >= 64) add_case(s, "p2p_alltoall_n64", rank_p2p_alltoall, 64, 3);
    c = add_case(s, "p2p_threads_4x_n2", rank_p2p_threads, 2, 1);
    c->p.threads = 4;
    c->p.count = sc == 0 ? 50 : sc == 1 ? 300 : 3000;

    /* bcast */
    static const int bc_n[] = {1, 3, 7, 16};
    for (size_t i = 0; i < OOBX_ARRAY_SIZE_(bc_n); i++) {
        int n = bc_n[i];
        snprintf(name, sizeof name, "bcast_every_root_n%d", n);
        c = add_case(s, name, rank_bcast, n, n >= 3 ? 2 : 1);
        size_t sz[] = {0, 1, 100, 64 * KiB, MiB};
        int k = (sc == 0 || n > 7) ? 4 : 5;
        for (int j = 0; j < k; j++) c->p.sizes[c->p.nsizes++] = sz[j];
    }

    /* groups, split */
    add_case(s, "group_n7", rank_group, 7, 2);
    add_case(s, "group_n16", rank_group, 16, 3);
    add_case(s, "split_n3", rank_split, 3, 1);
    add_case(s, "split_n7", rank_split, 7, 2);
    add_case(s, "split_n16", rank_split, 16, 3);

    /* many communicators in one process */
    c = add_case(s, "threads_one_comm_8_in_one_process", rank_threads_one_comm, 1, 1);
    c->p.threads = 8;
    c = add_case(s, "threads_3_comms_x_4_processes", rank_threads_many_comms, 4, 1);
    c->p.ncomms = 3;
    c->prepare = prepare_ids;

    /* errors */
    add_case(s, "bad_args_n1", rank_bad_args, 1, 1);
    add_case(s, "bad_args_n2", rank_bad_args, 2, 1);
    add_case(s, "bad_args_n3_roots2", rank_bad_args, 3, 2);
    add_case(s, "idle_wait_sleeps_n2", rank_idle_wait, 2, 1);
    c = add_case(s, "auto_whole_job_on_host_n16", rank_auto_oversubscribed, 16, 1);
    c->job.from_env = 1;
    c = add_case(s, "single_copy_n2", rank_single_copy, 2, 1);
    c->p.sizes[c->p.nsizes++] = 0;
    c = add_case(s, "single_copy_refused_n2", rank_single_copy, 2, 1);
    c->p.sizes[c->p.nsizes++] = 1;
    c = add_case(s, "huge_send_small_recv_n2", rank_huge_truncated, 2, 1);
    c->p.sizes[c->p.nsizes++] = (size_t)40 << 30;
    c->job.call_timeout_ms = 120000;
    for (size_t k = 0; k < OOBX_ARRAY_SIZE_(bad_settings); k++) {
        snprintf(name, sizeof name, "bad_setting_%zu_n1", k);
        c = add_case(s, name, rank_bad_setting, 1, 1);
        c->env[0] = bad_settings[k];
        c->p.count = (int)k;
    }
    c = add_case(s, "abort_flag_blocked_recv_n2", rank_abort, 2, 1);
    c->p.count = 0;
    c = add_case(s, "comm_abort_blocked_recv_n2", rank_abort, 2, 1);
    c->p.count = 1;
    c = add_case(s, "comm_abort_blocked_recv_n3", rank_abort, 3, 1);
    c->p.count = 1;
    c = add_case(s, "timeout_names_peer_n2", rank_timeout, 2, 1);
    c->job.call_timeout_ms = 1500;
    /* ranks that disagree on a collective: Bruck (small), the ring (large) */
    c = add_case(s, "allgather_size_mismatch_bruck_n4", rank_size_mismatch, 4, 1);
    c->job.call_timeout_ms = 10000;
    c->env[0] = "OOBX_ALLGATHER_ALGO=bruck";
    c = add_case(s, "allgather_size_mismatch_ring_n5", rank_size_mismatch, 5, 2);
    c->job.call_timeout_ms = 10000;
    c->env[0] = "OOBX_ALLGATHER_ALGO=ring";
    c = add_case(s, "allgather_size_mismatch_direct_n4", rank_size_mismatch, 4, 1);
    c->job.call_timeout_ms = 10000;
    c->env[0] = "OOBX_ALLGATHER_ALGO=direct";
    /* a rank that cannot read the others' memory, or be read: the ring */
    if (!strcmp(s->transport, "socket")) {
        c = add_case(s, "allgather_direct_fallback_n4", rank_direct_fallback, 4, 1);
        c->job.call_timeout_ms = 10000;
        c->env[0] = "OOBX_NODE_BUF=0"; /* never the node-aware path's shared buffer */
    }
    c = add_case(s, "bcast_direct_n4", rank_bcast_direct, 4, 1);
    c->job.call_timeout_ms = 10000;
    c->p.count = 0;
    if (!strcmp(s->transport, "socket")) {
        c = add_case(s, "bcast_direct_fallback_n4", rank_bcast_direct, 4, 1);
        c->job.call_timeout_ms = 10000;
        c->p.count = 1;
    }
    c = add_case(s, "allgather_table_n5", rank_allgather_table, 5, 1);
    c->job.call_timeout_ms = 10000;
    /* a fresh result buffer: the kernel's fill on a crowded host */
    c = add_case(s, "allgather_fresh_result_n8", rank_fresh_result, 8, 1);
    c->env[0] = "OOBX_NODE_AWARE_MIN=2"; /* the node-aware path at 8 ranks */
    /* oobx_mem_alloc's memory: the mapped path of the direct allgather */
    c = add_case(s, "allgather_mem_alloc_n4", rank_mem_alloc, 4, 1);
    c->job.call_timeout_ms = 10000;
    c->env[0] = "OOBX_NODE_BUF=0"; /* never the node-aware path's shared buffer */
    c->env[1] = "OOBX_ALLGATHER_STAGE_MIN=0";
    c = add_case(s, "allgather_staged_n4", rank_stage, 4, 1);
    c->job.call_timeout_ms = 10000;
    c->env[0] = "OOBX_NODE_BUF=0";
    c = add_case(s, "bcast_root_mismatch_n4", rank_call_mismatch, 4, 1);
    c->job.call_timeout_ms = 10000;
    c->p.count = 0;
    c = add_case(s, "bcast_root_mismatch_n7", rank_call_mismatch, 7, 2);
    c->job.call_timeout_ms = 10000;
    c->p.count = 0;
    c = add_case(s, "bcast_root_mismatch_late_n4", rank_call_mismatch, 4, 1);
    c->job.call_timeout_ms = 10000;
    c->p.count = 3;
    c = add_case(s, "bcast_vs_allgather_n5", rank_call_mismatch, 5, 1);
    c->job.call_timeout_ms = 10000;
    c->p.count = 1;
    c = add_case(s, "barrier_vs_allgather_n5", rank_call_mismatch, 5, 2);
    c->job.call_timeout_ms = 10000;
    c->p.count = 2;
    c = add_case(s, "barrier_order_n7", rank_barrier_order, 7, 2);
    c = add_case(s, "barrier_order_n16", rank_barrier_order, 16, 3);
    c = add_case(s, "bad_groups_n3", rank_bad_groups, 3, 1);
    c = add_case(s, "init_destroy_cycles_n4", rank_cycles, 4, 1);
    c->p.count = sc == 0 ? 10 : sc == 1 ? 30 : 300;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* in order with cmocka's stderr */
    conf_suite_t s;
    memset(&s, 0, sizeof s);
    s.scale = harness_scale();
    s.transport = harness_transport();
    const char *m = getenv("OOBX_TEST_MAX_RANKS");
    s.max_ranks = (m && atoi(m) > 0) ? atoi(m) : 1 << 20;

    printf("conformance: transport %s, scale %s%s%s%s%s\n", s.transport,
           s.scale == 0 ? "small" : s.scale == 1 ? "normal" : "long",
           getenv("UCX_TLS") ? ", UCX_TLS=" : "", getenv("UCX_TLS") ? getenv("UCX_TLS") : "",
           m ? ", max ranks " : "", m ? m : "");

    /* can the transport run here at all? */
    harness_job_opts_t probe = {.name = "probe", .nranks = 1, .fn = probe_rank, .deadline_s = 60};
    char msg[4096];
    int v = harness_run(&probe, msg, sizeof msg);
    if (v == HARNESS_SKIPPED) {
        s.unavailable = 1;
        snprintf(s.why, sizeof s.why, "%s", msg);
        printf("conformance: every case is skipped: %s\n", msg);
    } else if (v == HARNESS_PASS) {
        s.available = 1;
    } else if (v == HARNESS_FAIL) {
        printf("conformance: the one-rank probe failed (the cases will show why): %s\n", msg);
    }

    s.cases = calloc(MAX_CASES, sizeof *s.cases);
    if (!s.cases) return 1;
    build_cases(&s);
    const char *filter = getenv("OOBX_TEST_FILTER");
    struct CMUnitTest *t = calloc((size_t)s.ncases, sizeof *t);
    if (!t) return 1;
    int nt = 0;
    for (int i = 0; i < s.ncases; i++) {
        if (filter && *filter && fnmatch(filter, s.cases[i].name, 0) != 0) continue;
        t[nt].name = s.cases[i].name;
        t[nt].test_func = run_case;
        t[nt].initial_state = &s.cases[i];
        nt++;
    }
    int rc = _cmocka_run_group_tests("conformance", t, (size_t)nt, NULL, NULL);
    free(t);
    free(s.cases);
    return rc;
}
