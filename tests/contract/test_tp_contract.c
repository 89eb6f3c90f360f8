/*
 * The transport contract (src/transport.h), one suite for every transport.
 *
 *   OOBX_TEST_TP=socket|ucx|verbs   the transport (socket when unset)
 *   OOBX_TEST_SCALE=small|normal|long   sizes and counts (small: sanitizer runs)
 *   OOBX_TEST_FILTER=glob           cmocka test filter
 *
 * The ops come from oobx__tp_lookup, as the core gets them: for ucx and verbs
 * that loads the module file of the build tree (or of OOBX_MODULE_DIR), so
 * what is tested is the file that ships. Instances live in this process
 * (several at once, joined over loopback) and in forked children (a peer in
 * another process, one that is killed). A fake core sink records every
 * callback and notes the first contract violation it sees; the cases check
 * data byte for byte, headers, order per sender, requests and error texts.
 *
 * Transport-specific cases (device choice, emulated device, UCX ring modes)
 * are in tests/unit/test_verbs_tp.c and tests/unit/test_ucx_tp.c.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "oobx.h"
#include "oobx_debug.h"
#include "log.h"
#include "settings.h"
#include "tp_module.h"
#include "tp_table.h"
#include "transport.h"
#include "util.h"

#define NMAX 16             /* ranks of one case, at most */
#define RUN_MS 30000        /* bound on one wait for messages */
#define DESTROY_MAX_MS 2500 /* "within a short bound" */

static const char *tp_name;
static const oobx_tp_ops_t *ops;
static int scale = 1; /* 0 small, 1 normal, 2 long */
static int in_child;  /* in a forked peer: no cmocka calls */

#define PICK(small, normal, lng) (scale == 0 ? (small) : scale == 1 ? (normal) : (lng))

/* ---- the fake core ------------------------------------------------------------------ */

typedef struct rx_msg {
    oobx_msg_hdr_t hdr;
    unsigned char *buf;
    int ended;
    int echoed; /* child: sent back */
} rx_msg_t;

typedef struct node {
    int rank, nranks;
    oobx_tp_t *tp;
    oobx_settings_t set;
    oobx_log_t log;
    int wake_fd; /* a timerfd, as the core's */
    rx_msg_t *msgs;
    int nmsgs, capmsgs, nended;
    int cursor[NMAX]; /* per sender: where its oldest message not ended may be */
    int failed[NMAX];
    int fail_status[NMAX];
    char fail_what[NMAX][512];
    int destroyed; /* the sink must not be called from here on */
    char bad[512]; /* the first contract violation a callback saw */
} node_t;

static void violation(node_t *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void violation(node_t *n, const char *fmt, ...)
{
    if (n->bad[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->bad, sizeof(n->bad), fmt, ap);
    va_end(ap);
}

static void *sink_begin(void *core, const oobx_msg_hdr_t *hdr, void **cookie)
{
    node_t *n = core;
    *cookie = NULL;
    if (n->destroyed) violation(n, "msg_begin after destroy");
    if (hdr->src < 0 || hdr->src >= n->nranks || hdr->src == n->rank)
        violation(n, "msg_begin from rank %d (this is rank %d of %d)", hdr->src, n->rank, n->nranks);
    if (n->nmsgs == n->capmsgs) {
        int cap = n->capmsgs ? 2 * n->capmsgs : 256;
        rx_msg_t *m = realloc(n->msgs, (size_t)cap * sizeof(*m));
        if (!m) abort();
        n->msgs = m;
        n->capmsgs = cap;
    }
    rx_msg_t *m = &n->msgs[n->nmsgs++];
    memset(m, 0, sizeof(*m));
    m->hdr = *hdr;
    /* as the core: no buffer for an empty message */
    if (hdr->len) {
        m->buf = malloc(hdr->len);
        if (!m->buf) abort();
    }
    *cookie = (void *)(uintptr_t)n->nmsgs;
    return m->buf;
}

static void sink_end(void *core, void *cookie)
{
    node_t *n = core;
    uintptr_t k = (uintptr_t)cookie;
    if (n->destroyed) violation(n, "msg_end after destroy");
    if (k == 0 || k > (uintptr_t)n->nmsgs) {
        violation(n, "msg_end with a cookie msg_begin never gave (%p)", cookie);
        return;
    }
    rx_msg_t *m = &n->msgs[k - 1];
    if (m->ended) {
        violation(n, "msg_end twice for message %d (tag %" PRIu64 ")", (int)k - 1, m->hdr.tag);
        return;
    }
    int src = m->hdr.src;
    if (src >= 0 && src < NMAX) {
        /* ends come in the order of the begins, per sender */
        int *c = &n->cursor[src];
        while (*c < n->nmsgs && (n->msgs[*c].hdr.src != src || n->msgs[*c].ended)) (*c)++;
        if (*c != (int)k - 1)
            violation(n, "msg_end out of order from rank %d: message %d (tag %" PRIu64 ") ended before %d (tag %" PRIu64
                      ")", src, (int)k - 1, m->hdr.tag, *c, *c < n->nmsgs ? n->msgs[*c].hdr.tag : 0);
    }
    m->ended = 1;
    n->nended++;
}

static void sink_failed(void *core, int peer, int status, const char *what)
{
    node_t *n = core;
    if (n->destroyed) violation(n, "peer_failed(%d) after destroy", peer);
    if (peer < 0 || peer >= n->nranks || peer == n->rank || peer >= NMAX) {
        violation(n, "peer_failed for rank %d (this is rank %d of %d)", peer, n->rank, n->nranks);
        return;
    }
    if (status >= 0) violation(n, "peer_failed(%d) with status %d", peer, status);
    if (!what || !what[0]) violation(n, "peer_failed(%d) without a reason", peer);
    n->failed[peer]++;
    n->fail_status[peer] = status;
    snprintf(n->fail_what[peer], sizeof(n->fail_what[peer]), "%s", what ? what : "");
    if (!in_child) fprintf(stderr, "  [rank %d sees rank %d fail: %s]\n", n->rank, peer, what ? what : "(null)");
}

static const char *env_or(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v && *v ? v : def;
}

/* The core's settings (defaults, then the environment), on loopback. */
static int node_settings(oobx_settings_t *s)
{
    int rc = oobx__settings_load(s, NULL);
    if (rc) return rc;
    s->timeout_ms = 20000;
    if (!s->socket_ifname[0]) snprintf(s->socket_ifname, sizeof(s->socket_ifname), "lo");
    if (s->socket_family == AF_UNSPEC) s->socket_family = AF_INET;
    return 0;
}

/* Creates rank of nranks. wake: give it a wake fd (the core always does; the
 * probe does not). Returns create's code; no cmocka calls (children use it). */
static int node_try(node_t *n, int rank, int nranks, uint64_t magic, int wake)
{
    memset(n, 0, sizeof(*n));
    n->rank = rank;
    n->nranks = nranks;
    n->wake_fd = -1;
    int rc = node_settings(&n->set);
    if (rc) return rc;
    oobx__log_open(&n->log, &n->set, NULL);
    oobx__log_set_prefix(&n->log, "contract %s rank %d/%d", tp_name, rank, nranks);
    if (wake) {
        n->wake_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (n->wake_fd < 0) return OOBX_ERR_SYSTEM;
    }
    oobx_tp_params_t p = {
        .rank = rank,
        .nranks = nranks,
        .magic = magic,
        .settings = &n->set,
        .log = &n->log,
        .sink = {.core = n, .msg_begin = sink_begin, .msg_end = sink_end, .peer_failed = sink_failed},
        .root_hint = NULL,
        .root_hint_len = 0,
        .wake_fd = n->wake_fd,
        .core = &oobx__core_api,
    };
    rc = ops->create(&p, &n->tp);
    if (rc) {
        if (n->wake_fd >= 0) close(n->wake_fd);
        n->wake_fd = -1;
        n->tp = NULL;
    }
    return rc;
}

static void node_init(node_t *n, int rank, int nranks)
{
    int rc = node_try(n, rank, nranks, 0x5eed, 1);
    if (rc) fail_msg("%s: create rank %d of %d: %s (%s)", tp_name, rank, nranks, oobx_error_name(rc), oobx_last_error());
    /* the first member of every instance is its ops table */
    assert_ptr_equal(n->tp->ops, ops);
}

static void node_free_msgs(node_t *n)
{
    for (int i = 0; i < n->nmsgs; i++) free(n->msgs[i].buf);
    free(n->msgs);
    n->msgs = NULL;
    n->nmsgs = n->capmsgs = 0;
}

/* Destroys the instance; returns how long destroy took, in ms. */
static double node_destroy(node_t *n)
{
    if (!n->tp) return 0;
    n->destroyed = 1;
    uint64_t t0 = oobx__now_ns();
    ops->destroy(n->tp);
    double ms = (double)(oobx__now_ns() - t0) / 1e6;
    n->tp = NULL;
    if (n->wake_fd >= 0) close(n->wake_fd);
    n->wake_fd = -1;
    oobx__log_close(&n->log);
    return ms;
}

static void node_fini(node_t *n)
{
    double ms = node_destroy(n);
    if (n->bad[0]) fail_msg("rank %d: %s", n->rank, n->bad);
    if (ms > DESTROY_MAX_MS) fail_msg("rank %d: destroy took %.0f ms (more than %d)", n->rank, ms, DESTROY_MAX_MS);
    node_free_msgs(n);
}

static size_t blob_of(node_t *n, unsigned char *blob)
{
    size_t len = OOBX_ADDR_MAX;
    int rc = ops->address(n->tp, blob, &len);
    if (rc) fail_msg("rank %d: address: %s (%s)", n->rank, oobx_error_name(rc), oobx_last_error());
    assert_true(len > 0 && len <= OOBX_ADDR_MAX);
    return len;
}

/* a learns b's address */
static void introduce(node_t *a, node_t *b)
{
    unsigned char blob[OOBX_ADDR_MAX];
    size_t len = blob_of(b, blob);
    int rc = ops->set_peer(a->tp, b->rank, blob, len);
    if (rc) fail_msg("rank %d: set_peer(%d): %s (%s)", a->rank, b->rank, oobx_error_name(rc), oobx_last_error());
}

static void ring_call(node_t *n, int prev, int next)
{
    int rc = ops->ring(n->tp, prev, next);
    if (rc) fail_msg("rank %d: ring(%d, %d): %s (%s)", n->rank, prev, next, oobx_error_name(rc), oobx_last_error());
}

/* Every address everywhere, no ring links. nodes[i] is rank i. */
static void connect_plain(node_t *nodes, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i != j) introduce(&nodes[i], &nodes[j]);
}

/* ---- running ------------------------------------------------------------------------ */

typedef int (*cond_fn)(node_t *nodes, int n, void *arg);

typedef struct batch batch_t;
static batch_t *g_active[512]; /* batches whose finished sends get scribbled over */
static int g_nactive;
static void scribble_done(void);

static void check_bad(node_t *nodes, int n)
{
    for (int i = 0; i < n; i++)
        if (nodes[i].bad[0]) fail_msg("rank %d: %s", nodes[i].rank, nodes[i].bad);
}

static void progress_all(node_t *nodes, int n)
{
    for (int i = 0; i < n; i++) {
        if (!nodes[i].tp) continue;
        int rc = ops->progress(nodes[i].tp);
        if (rc) fail_msg("rank %d: progress: %s (%s)", nodes[i].rank, oobx_error_name(rc), oobx_last_error());
    }
}

static void check_timeout(node_t *n, int before, int after)
{
    /* wait_prepare may only lower the core's timeout (any value under "no bound") */
    if (after < -1 || (before >= 0 && (after < 0 || after > before)))
        violation(n, "wait_prepare turned the timeout %d into %d", before, after);
}

/* One round of the core's wait (ep.c): wait_prepare, then, unless the
 * transport is busy, sleep with fds[0] = the wake fd. Returns 1 when it slept. */
static int core_sleep(node_t *n, int ms)
{
    struct pollfd fds[16];
    int nfds = 0, t = ms;
    int busy = ops->wait_prepare(n->tp, fds + 1, 15, &nfds, &t);
    if (busy != 0 && busy != 1) violation(n, "wait_prepare returned %d", busy);
    if (nfds < 0 || nfds > 15) violation(n, "wait_prepare filled %d of 15 pollfds", nfds);
    check_timeout(n, ms, t);
    if (busy || n->bad[0]) return 0;
    fds[0].fd = n->wake_fd;
    fds[0].events = POLLIN;
    fds[0].revents = 0;
    ops->sleep(n->tp, fds, nfds + 1, t);
    return 1;
}

/* Progresses every live node until done() or ms pass. One node: the core's
 * own wait (wait_prepare + sleep); several: one poll over every node's fds. */
static int run_until(node_t *nodes, int n, cond_fn done, void *arg, int ms)
{
    uint64_t deadline = oobx__deadline(ms);
    for (;;) {
        progress_all(nodes, n);
        scribble_done();
        check_bad(nodes, n);
        if (done(nodes, n, arg)) return 0;
        if (oobx__now_ns() > deadline) return -1;
        int cap = oobx__ms_left(deadline, 100);
        int live = 0, one = -1;
        for (int i = 0; i < n; i++)
            if (nodes[i].tp) live++, one = i;
        if (live == 1) {
            core_sleep(&nodes[one], cap);
            continue;
        }
        struct pollfd fds[NMAX * 15];
        int total = 0, busy = 0, t = cap;
        for (int i = 0; i < n; i++) {
            if (!nodes[i].tp) continue;
            int k = 0, before = t;
            int b = ops->wait_prepare(nodes[i].tp, fds + total, 15, &k, &t);
            if (b != 0 && b != 1) violation(&nodes[i], "wait_prepare returned %d", b);
            if (k < 0 || k > 15) violation(&nodes[i], "wait_prepare filled %d of 15 pollfds", k);
            else total += k;
            check_timeout(&nodes[i], before, t);
            if (b) busy = 1;
        }
        check_bad(nodes, n);
        if (!busy) poll(fds, (nfds_t)total, t);
    }
}

static int never(node_t *nodes, int n, void *arg)
{
    (void)nodes;
    (void)n;
    (void)arg;
    return 0;
}

/* Progresses for ms (nothing expected). */
static void run_for(node_t *nodes, int n, int ms)
{
    run_until(nodes, n, never, NULL, ms);
}

/* ---- messages ----------------------------------------------------------------------- */

static inline unsigned char pat(uint64_t seed, size_t i)
{
    return (unsigned char)((seed >> ((i & 7) * 8)) ^ (i * 7u) ^ ((i >> 8) * 13u) ^ ((i >> 16) * 101u));
}

static void fill(unsigned char *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i++) p[i] = pat(seed, i);
}

/* offset of the first byte that is not the pattern, or -1 */
static long check_fill(const unsigned char *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != pat(seed, i)) return (long)i;
    return -1;
}

static uint64_t seed_of(uint64_t ctx, uint64_t tag)
{
    return oobx__mix64(ctx, tag) | 1;
}

/* Messages from nodes[from] to nodes[to] (positions), sent at once. Each
 * batch has a context id of its own, so that the receiver tells them apart. */
struct batch {
    int from, to, count;
    uint64_t ctx, tag0;
    size_t *sizes;
    unsigned char **bufs;
    oobx_tp_req_t *reqs;
    char *scribbled;
};

static uint64_t g_ctx_seq;

static uint64_t next_ctx(void)
{
    return 0xc0de000000000000ull | ++g_ctx_seq;
}

static void batch_send(node_t *nodes, batch_t *b, int from, int to, const size_t *sizes, int count)
{
    memset(b, 0, sizeof(*b));
    b->from = from;
    b->to = to;
    b->count = count;
    b->ctx = next_ctx();
    /* tags near the top of the 64 bits every other batch */
    b->tag0 = (g_ctx_seq & 1) ? UINT64_MAX - (uint64_t)count - 5 : 1000;
    b->sizes = malloc((size_t)count * sizeof(*b->sizes));
    b->bufs = calloc((size_t)count, sizeof(*b->bufs));
    b->reqs = calloc((size_t)count, sizeof(*b->reqs));
    b->scribbled = calloc((size_t)count, 1);
    assert_true(b->sizes && b->bufs && b->reqs && b->scribbled);
    memcpy(b->sizes, sizes, (size_t)count * sizeof(*sizes));
    for (int i = 0; i < count; i++) {
        size_t len = sizes[i];
        uint64_t tag = b->tag0 + (uint64_t)i;
        /* an empty message's payload may be NULL */
        if (len || (i & 1)) {
            b->bufs[i] = malloc(len ? len : 1);
            assert_non_null(b->bufs[i]);
            fill(b->bufs[i], len, seed_of(b->ctx, tag));
        }
        oobx_msg_hdr_t h = {.ctx = b->ctx, .tag = tag, .len = len, .src = nodes[from].rank,
                            .kind = (uint32_t)(OOBX_MSG_P2P + i % 3)};
        b->reqs[i].done = 0;
        b->reqs[i].status = 12345;
        int rc = ops->send(nodes[from].tp, nodes[to].rank, &h, b->bufs[i], &b->reqs[i]);
        if (rc)
            fail_msg("rank %d: send %d of %d (%zu bytes) to rank %d: %s (%s)", nodes[from].rank, i, count, len,
                     nodes[to].rank, oobx_error_name(rc), oobx_last_error());
        memset(&h, 0xee, sizeof(h)); /* the transport keeps its own copy of the header */
    }
    assert_true(g_nactive < (int)OOBX_ARRAY_SIZE(g_active));
    g_active[g_nactive++] = b;
}

/* A payload belongs to the caller again once its request is done: write over
 * it, so that a transport that still reads it delivers wrong bytes. */
static void scribble_done(void)
{
    for (int k = 0; k < g_nactive; k++) {
        batch_t *b = g_active[k];
        for (int i = 0; i < b->count; i++)
            if (b->reqs[i].done && !b->scribbled[i]) {
                b->scribbled[i] = 1;
                if (b->sizes[i]) memset(b->bufs[i], 0xa5, b->sizes[i]);
            }
    }
}

static void batch_forget(batch_t *b)
{
    for (int k = 0; k < g_nactive; k++)
        if (g_active[k] == b) {
            g_active[k] = g_active[--g_nactive];
            break;
        }
    for (int i = 0; i < b->count; i++) free(b->bufs[i]);
    free(b->bufs);
    free(b->sizes);
    free(b->reqs);
    free(b->scribbled);
    memset(b, 0, sizeof(*b));
}

static int batch_done(const batch_t *b)
{
    for (int i = 0; i < b->count; i++)
        if (!b->reqs[i].done) return 0;
    return 1;
}

/* The receiver got the batch, complete and in order, with the right headers
 * and bytes; every request is done with status 0. */
static void batch_check(node_t *nodes, batch_t *b)
{
    node_t *t = &nodes[b->to];
    int src = nodes[b->from].rank, k = 0;
    for (int m = 0; m < t->nmsgs; m++) {
        rx_msg_t *r = &t->msgs[m];
        if (r->hdr.ctx != b->ctx) continue;
        if (k >= b->count) fail_msg("rank %d: more than the %d messages sent by rank %d", t->rank, b->count, src);
        uint64_t tag = b->tag0 + (uint64_t)k;
        if (r->hdr.tag != tag)
            fail_msg("rank %d: message %d from rank %d has tag %" PRIu64 ", want %" PRIu64 " (out of order or lost)",
                     t->rank, k, src, r->hdr.tag - b->tag0, (uint64_t)k);
        assert_int_equal(r->hdr.src, src);
        assert_int_equal(r->hdr.len, b->sizes[k]);
        assert_int_equal(r->hdr.kind, OOBX_MSG_P2P + k % 3);
        assert_true(r->ended);
        long off = check_fill(r->buf, b->sizes[k], seed_of(b->ctx, tag));
        if (off >= 0)
            fail_msg("rank %d: message %d from rank %d (%zu bytes): wrong byte at offset %ld", t->rank, k, src,
                     b->sizes[k], off);
        k++;
    }
    if (k != b->count) fail_msg("rank %d: %d of the %d messages from rank %d arrived", t->rank, k, b->count, src);
    for (int i = 0; i < b->count; i++) {
        if (!b->reqs[i].done) fail_msg("rank %d: send %d to rank %d not done", src, i, t->rank);
        if (b->reqs[i].status != 0)
            fail_msg("rank %d: send %d to rank %d: status %d", src, i, t->rank, b->reqs[i].status);
    }
    batch_forget(b);
}

typedef struct want {
    batch_t *b;
    int nb;
    int count[NMAX]; /* messages ended, per node position */
} want_t;

static int got_all(node_t *nodes, int n, void *arg)
{
    want_t *w = arg;
    for (int i = 0; i < w->nb; i++)
        if (!batch_done(&w->b[i])) return 0;
    for (int i = 0; i < n; i++)
        if (nodes[i].nended < w->count[i]) return 0;
    return 1;
}

static void snap(node_t *nodes, int n, int *base)
{
    for (int i = 0; i < n; i++) base[i] = nodes[i].nended;
}

/* Runs the batches (sent since base was taken) to completion and checks them. */
static void finish_from(node_t *nodes, int n, batch_t *b, int nb, const int *base)
{
    want_t w = {.b = b, .nb = nb};
    for (int i = 0; i < n; i++) w.count[i] = base[i];
    for (int i = 0; i < nb; i++) w.count[b[i].to] += b[i].count;
    if (run_until(nodes, n, got_all, &w, RUN_MS)) {
        for (int i = 0; i < n; i++)
            fprintf(stderr, "  rank %d: %d begun, %d ended, %d wanted\n", nodes[i].rank, nodes[i].nmsgs,
                    nodes[i].nended, w.count[i]);
        for (int i = 0; i < nb; i++) {
            int done = 0;
            for (int k = 0; k < b[i].count; k++) done += b[i].reqs[k].done;
            fprintf(stderr, "  batch %d (rank %d -> %d): %d of %d sends done\n", i, nodes[b[i].from].rank,
                    nodes[b[i].to].rank, done, b[i].count);
        }
        fail_msg("%s: messages not delivered within %d ms", tp_name, RUN_MS);
    }
    for (int i = 0; i < nb; i++) batch_check(nodes, &b[i]);
}

static void finish(node_t *nodes, int n, batch_t *b, int nb)
{
    int base[NMAX] = {0};
    for (int i = 0; i < n; i++) {
        base[i] = nodes[i].nended;
        /* what is already in was sent before */
        for (int k = 0; k < nb; k++)
            if (b[k].to == i)
                for (int m = 0; m < nodes[i].nmsgs; m++)
                    if (nodes[i].msgs[m].ended && nodes[i].msgs[m].hdr.ctx == b[k].ctx) base[i]--;
    }
    finish_from(nodes, n, b, nb, base);
}

static void exchange(node_t *nodes, int n, int from, int to, const size_t *sizes, int count)
{
    batch_t b;
    batch_send(nodes, &b, from, to, sizes, count);
    finish(nodes, n, &b, 1);
}

/* The core's order at init (comm.c): set_peer(next), ring(-1, next), then
 * traffic over the ring while the other addresses are unknown (the address
 * allgather), then every address (next's again) and ring(prev, next). The
 * messages of the allgather are sent here as one batch to next per rank. */
static void connect_core(node_t *nodes, int n)
{
    if (n < 2) return;
    for (int i = 0; i < n; i++) {
        introduce(&nodes[i], &nodes[(i + 1) % n]);
        ring_call(&nodes[i], -1, (i + 1) % n);
    }
    /* a message from prev comes in before prev's address is known */
    const size_t sizes[] = {0, 40, 3000, 70000};
    batch_t b[NMAX];
    int base[NMAX] = {0};
    snap(nodes, n, base);
    for (int i = 0; i < n; i++) batch_send(nodes, &b[i], i, (i + 1) % n, sizes, (int)OOBX_ARRAY_SIZE(sizes));
    finish_from(nodes, n, b, n, base);
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++)
            if (j != i) introduce(&nodes[i], &nodes[j]);
        ring_call(&nodes[i], (i + n - 1) % n, (i + 1) % n);
    }
}

static node_t *nodes_new(int n)
{
    node_t *nodes = calloc((size_t)n, sizeof(*nodes));
    assert_non_null(nodes);
    for (int i = 0; i < n; i++) node_init(&nodes[i], i, n);
    return nodes;
}

typedef struct destroy_job {
    node_t *n;
    double ms;
} destroy_job_t;

static void *destroy_thread(void *arg)
{
    destroy_job_t *j = arg;
    j->ms = node_destroy(j->n);
    return NULL;
}

/* Destroys every instance at once, each in a thread of its own, as the
 * ranks of a job leave together (a rank's destroy may wait for its peers to
 * take what it flushes); checks each and returns the slowest, in ms. */
static double nodes_destroy_all(node_t *nodes, int n)
{
    destroy_job_t jobs[NMAX];
    pthread_t th[NMAX];
    double worst = 0;
    assert_true(n <= NMAX);
    for (int i = 0; i < n; i++) {
        jobs[i].n = &nodes[i];
        jobs[i].ms = 0;
        assert_int_equal(pthread_create(&th[i], NULL, destroy_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < n; i++) {
        if (nodes[i].bad[0]) fail_msg("rank %d: %s", nodes[i].rank, nodes[i].bad);
        if (jobs[i].ms > DESTROY_MAX_MS)
            fail_msg("rank %d: destroy took %.0f ms (more than %d)", nodes[i].rank, jobs[i].ms, DESTROY_MAX_MS);
        if (jobs[i].ms > worst) worst = jobs[i].ms;
        node_free_msgs(&nodes[i]);
    }
    return worst;
}

static void nodes_free(node_t *nodes, int n)
{
    nodes_destroy_all(nodes, n);
    free(nodes);
}


static int fd_readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static void timer_arm_ms(int fd, int ms)
{
    struct itimerspec at = {.it_value = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L + (ms ? 0 : 1)}};
    assert_int_equal(timerfd_settime(fd, 0, &at, NULL), 0);
}

static void timer_disarm(int fd)
{
    struct itimerspec off = {{0, 0}, {0, 0}};
    timerfd_settime(fd, 0, &off, NULL);
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof(v));
    (void)r;
}

/* ---- a peer in another process ----------------------------------------------------- */

/* Commands to the child, one write each (smaller than PIPE_BUF: atomic). */
typedef struct cmd {
    char op;          /* 'p' set_peer, 'r' ring, 's' send, 'z' answer then stop for delay_ms, 'q' destroy and exit */
    int32_t peer;     /* p, s */
    int32_t prev, next;
    uint32_t delay_ms; /* s: after this long */
    uint64_t len, ctx, tag;
    uint32_t bloblen;
    unsigned char blob[OOBX_ADDR_MAX];
} cmd_t;

typedef struct proc {
    pid_t pid;
    int wfd, rfd;
    unsigned char blob[OOBX_ADDR_MAX];
    size_t bloblen;
} proc_t;

typedef struct csend {
    int to;
    oobx_msg_hdr_t h;
    unsigned char *buf; /* owned unless echo */
    int own;
    uint64_t at;
    int posted;
    oobx_tp_req_t req;
} csend_t;

static int read_full(int fd, void *p, size_t len, int ms)
{
    size_t got = 0;
    uint64_t deadline = oobx__deadline(ms);
    while (got < len) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int left = oobx__ms_left(deadline, -1);
        if (left <= 0 && got < len && ms >= 0 && oobx__now_ns() > deadline) return -1;
        if (poll(&pf, 1, left) <= 0) continue;
        ssize_t k = read(fd, (char *)p + got, len - got);
        if (k == 0) return -1;
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return -1;
        }
        got += (size_t)k;
    }
    return 0;
}

static int write_full(int fd, const void *p, size_t len)
{
    size_t put = 0;
    while (put < len) {
        ssize_t k = write(fd, (const char *)p + put, len - put);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        put += (size_t)k;
    }
    return 0;
}

/* The child (this program again, started by proc_start): rank of nranks,
 * driven by commands; echo: sends every message back to its sender. Exits 0
 * on 'q' (or when the parent is gone), else with a code that says what went
 * wrong (printed first). */
static void child_main(int rank, int nranks, int echo, int rfd, int wfd)
{
    static node_t node;
    node_t *n = &node;
    int rc = node_try(n, rank, nranks, 0x5eed, 1);
    if (rc) {
        fprintf(stderr, "  child rank %d: create: %s\n", rank, oobx_last_error());
        _exit(20);
    }
    unsigned char blob[OOBX_ADDR_MAX];
    size_t len = sizeof(blob);
    if (ops->address(n->tp, blob, &len) || write_full(wfd, &len, sizeof(len)) || write_full(wfd, blob, len)) _exit(21);
    csend_t *q = NULL;
    int nq = 0, capq = 0, echoed = 0;
    for (;;) {
        rc = ops->progress(n->tp);
        if (rc) {
            fprintf(stderr, "  child rank %d: progress: %s\n", rank, oobx_last_error());
            _exit(22);
        }
        if (n->bad[0]) {
            fprintf(stderr, "  child rank %d: %s\n", rank, n->bad);
            _exit(23);
        }
        for (; echo && echoed < n->nmsgs && n->msgs[echoed].ended; echoed++) {
            rx_msg_t *m = &n->msgs[echoed];
            if (nq == capq) {
                capq = capq ? 2 * capq : 64;
                q = realloc(q, (size_t)capq * sizeof(*q));
                if (!q) _exit(24);
            }
            csend_t *s = &q[nq++];
            memset(s, 0, sizeof(*s));
            s->to = m->hdr.src;
            s->h = m->hdr;
            s->h.src = rank;
            s->buf = m->buf;
            s->at = 0;
        }
        uint64_t now = oobx__now_ns(), next_at = UINT64_MAX;
        for (int i = 0; i < nq; i++) {
            csend_t *s = &q[i];
            if (s->posted) continue;
            if (s->at > now) {
                if (s->at < next_at) next_at = s->at;
                continue;
            }
            s->posted = 1;
            rc = ops->send(n->tp, s->to, &s->h, s->buf, &s->req);
            if (rc) {
                fprintf(stderr, "  child rank %d: send to %d: %s\n", rank, s->to, oobx_last_error());
                _exit(25);
            }
        }
        struct pollfd fds[16];
        int k = 0, t = 50;
        if (next_at != UINT64_MAX) t = OOBX_MIN(t, oobx__ms_left(next_at, 50));
        int busy = ops->wait_prepare(n->tp, fds + 1, 15, &k, &t);
        fds[0].fd = rfd;
        fds[0].events = POLLIN;
        fds[0].revents = 0;
        poll(fds, (nfds_t)(k + 1), busy ? 0 : t);
        if (!(fds[0].revents & (POLLIN | POLLHUP))) continue;
        cmd_t c;
        if (read_full(rfd, &c, sizeof(c), 5000)) _exit(0); /* the parent is gone */
        switch (c.op) {
        case 'p':
            if (ops->set_peer(n->tp, c.peer, c.blob, c.bloblen)) {
                fprintf(stderr, "  child rank %d: set_peer(%d): %s\n", rank, c.peer, oobx_last_error());
                _exit(26);
            }
            break;
        case 'r':
            if (ops->ring(n->tp, c.prev, c.next)) _exit(27);
            break;
        case 's': {
            if (nq == capq) {
                capq = capq ? 2 * capq : 64;
                q = realloc(q, (size_t)capq * sizeof(*q));
                if (!q) _exit(24);
            }
            csend_t *s = &q[nq++];
            memset(s, 0, sizeof(*s));
            s->to = c.peer;
            s->h = (oobx_msg_hdr_t){.ctx = c.ctx, .tag = c.tag, .len = c.len, .src = rank, .kind = OOBX_MSG_P2P};
            s->buf = malloc(c.len ? c.len : 1);
            if (!s->buf) _exit(24);
            s->own = 1;
            fill(s->buf, c.len, seed_of(c.ctx, c.tag));
            s->at = oobx__now_ns() + (uint64_t)c.delay_ms * 1000000ull;
            break;
        }
        case 'z': {
            /* the parent goes on at once; this rank neither progresses nor reads meanwhile */
            char ack = 'k';
            if (write_full(wfd, &ack, 1)) _exit(0);
            usleep(c.delay_ms * 1000u);
            continue;
        }
        case 'q':
            n->destroyed = 1;
            ops->destroy(n->tp);
            if (n->bad[0]) {
                fprintf(stderr, "  child rank %d: %s\n", rank, n->bad);
                _exit(23);
            }
            _exit(0);
        default: _exit(28);
        }
        /* done: the parent goes on only now, so that what it does next
         * (a ring set-up that sends to us, say) comes after this */
        char ack = 'k';
        if (write_full(wfd, &ack, 1)) _exit(0);
    }
}

static void proc_start(proc_t *pr, int rank, int nranks, int echo)
{
    int to[2], from[2];
    assert_int_equal(pipe(to), 0);
    assert_int_equal(pipe(from), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* a new program, not a copy of this one: a forked copy of a process
         * with transport threads (UCX's, the emulated device's) may inherit
         * a lock one of them held */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(to[1]);
        close(from[0]);
        char spec[64];
        snprintf(spec, sizeof(spec), "%d,%d,%d,%d,%d", rank, nranks, echo, to[0], from[1]);
        setenv("OOBX_TEST_CHILD", spec, 1);
        char *argv[] = {"test_tp_contract (peer)", NULL};
        execv("/proc/self/exe", argv);
        _exit(30);
    }
    close(to[0]);
    close(from[1]);
    pr->pid = pid;
    pr->wfd = to[1];
    pr->rfd = from[0];
    size_t len = 0;
    if (read_full(pr->rfd, &len, sizeof(len), 20000) || len == 0 || len > OOBX_ADDR_MAX ||
        read_full(pr->rfd, pr->blob, len, 5000)) {
        kill(pid, SIGKILL);
        int st = 0;
        waitpid(pid, &st, 0);
        fail_msg("child rank %d did not start (exit %d)", rank, WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
    }
    pr->bloblen = len;
}

/* Sends a command and waits until the child has carried it out ('q' excepted). */
static void proc_cmd(proc_t *pr, const cmd_t *c)
{
    assert_int_equal(write_full(pr->wfd, c, sizeof(*c)), 0);
    if (c->op == 'q') return;
    char ack = 0;
    if (read_full(pr->rfd, &ack, 1, 20000) || ack != 'k')
        fail_msg("the child (pid %d) did not carry out command '%c'", (int)pr->pid, c->op);
}

static void proc_set_peer(proc_t *pr, node_t *n)
{
    cmd_t c = {.op = 'p', .peer = n->rank};
    c.bloblen = (uint32_t)blob_of(n, c.blob);
    proc_cmd(pr, &c);
}

static void proc_ring(proc_t *pr, int prev, int next)
{
    cmd_t c = {.op = 'r', .prev = prev, .next = next};
    proc_cmd(pr, &c);
}

static void proc_send(proc_t *pr, int to, uint64_t ctx, uint64_t tag, uint64_t len, unsigned delay_ms)
{
    cmd_t c = {.op = 's', .peer = to, .ctx = ctx, .tag = tag, .len = len, .delay_ms = delay_ms};
    proc_cmd(pr, &c);
}

static void proc_close_fds(proc_t *pr)
{
    close(pr->wfd);
    close(pr->rfd);
}

/* Asks the child to destroy its instance and exit; returns its exit code. */
static int proc_quit(proc_t *pr)
{
    cmd_t c = {.op = 'q'};
    proc_cmd(pr, &c);
    int st = 0;
    for (int i = 0; i < 1000; i++) {
        if (waitpid(pr->pid, &st, WNOHANG) == pr->pid) {
            proc_close_fds(pr);
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        usleep(10000);
    }
    kill(pr->pid, SIGKILL);
    waitpid(pr->pid, &st, 0);
    proc_close_fds(pr);
    return 124;
}

static void proc_kill(proc_t *pr)
{
    kill(pr->pid, SIGKILL);
    waitpid(pr->pid, NULL, 0);
    proc_close_fds(pr);
}

/* Joins nodes[0] (rank 0 here) and a child (rank 1 of 2) as the core does. */
static void pair_with_child(node_t *n, proc_t *pr, int echo)
{
    proc_start(pr, 1, 2, echo);
    node_init(n, 0, 2);
    assert_int_equal(ops->set_peer(n->tp, 1, pr->blob, pr->bloblen), 0);
    ring_call(n, -1, 1);
    proc_set_peer(pr, n);
    proc_ring(pr, -1, 0);
    proc_ring(pr, 0, 0);
    ring_call(n, 1, 1);
}

/* Messages with this context that ended at n */
typedef struct ctxwant {
    uint64_t ctx;
    int count;
} ctxwant_t;

static int count_ctx(const node_t *n, uint64_t ctx)
{
    int k = 0;
    for (int m = 0; m < n->nmsgs; m++)
        if (n->msgs[m].ended && n->msgs[m].hdr.ctx == ctx) k++;
    return k;
}

static int got_ctx(node_t *nodes, int n, void *arg)
{
    (void)n;
    ctxwant_t *w = arg;
    return count_ctx(&nodes[0], w->ctx) >= w->count;
}

/* got_ctx at the last of the nodes */
static int got_ctx_at_last(node_t *nodes, int n, void *arg)
{
    return got_ctx(&nodes[n - 1], 1, arg);
}

/* The message of ctx and tag at n, checked against the pattern. */
static void check_child_msg(const node_t *n, uint64_t ctx, uint64_t tag, size_t len, int src)
{
    for (int m = 0; m < n->nmsgs; m++) {
        const rx_msg_t *r = &n->msgs[m];
        if (r->hdr.ctx != ctx || r->hdr.tag != tag) continue;
        assert_true(r->ended);
        assert_int_equal(r->hdr.src, src);
        assert_int_equal(r->hdr.len, len);
        long off = check_fill(r->buf, len, seed_of(ctx, tag));
        if (off >= 0) fail_msg("message %" PRIu64 " from rank %d: wrong byte at offset %ld", tag, src, off);
        return;
    }
    fail_msg("rank %d: no message %" PRIu64 " from rank %d", n->rank, tag, src);
}

static int req_done(node_t *nodes, int n, void *arg)
{
    (void)nodes;
    (void)n;
    return ((oobx_tp_req_t *)arg)->done;
}

/* ==== the cases ========================================================================= */

/* The table the core loads: version, name, every op, a terminated settings
 * table whose names are the transport's own. */
static void test_ops_table(void **state)
{
    (void)state;
    assert_int_equal(ops->version, OOBX_TP_VERSION);
    assert_non_null(ops->name);
    assert_string_equal(ops->name, tp_name);
    assert_true(ops->create && ops->address && ops->set_peer && ops->ring && ops->send && ops->release && ops->progress &&
                ops->wait_prepare && ops->sleep && ops->describe && ops->peer_name && ops->destroy);
    const oobx__tp_entry_t *e = oobx__tp_find(tp_name);
    assert_non_null(e);
    oobx_settings_t s;
    assert_int_equal(node_settings(&s), 0);
    if (e->builtin) {
        assert_ptr_equal(e->builtin, ops);
        print_message("built in\n");
    } else {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", oobx__tp_module_dir(&s), e->module);
        print_message("module %s\n", path);
        assert_int_equal(access(path, R_OK), 0);
    }
    /* the same table again: the module stays loaded */
    const oobx_tp_ops_t *again = NULL;
    char why[512] = "";
    assert_int_equal(oobx__tp_lookup(tp_name, &s, &again, why, sizeof(why)), 0);
    assert_ptr_equal(again, ops);
    /* settings: terminated, named OOBX_*, documented, no name twice or of the core */
    assert_non_null(ops->settings);
    int n = 0;
    for (const oobx_setting_desc_t *d = ops->settings; d->name; d++, n++) {
        if (n >= 64) fail_msg("settings table of %s: no terminating entry within 64", tp_name);
        assert_memory_equal(d->name, "OOBX_", 5);
        assert_non_null(d->def);
        assert_true(d->doc && d->doc[0]);
        assert_true(d->type >= OOBX_SET_STR && d->type <= OOBX_SET_BOOL);
        if (d->type == OOBX_SET_STR) assert_true(d->size > 0);
        for (const oobx_setting_desc_t *o = ops->settings; o < d; o++)
            if (!strcmp(o->name, d->name)) fail_msg("%s twice in the settings of %s", d->name, tp_name);
        for (const oobx_setting_desc_t *c = oobx__settings_table; c->name; c++)
            if (!strcmp(c->name, d->name)) fail_msg("%s of %s is also a core setting", d->name, tp_name);
        print_message("setting %s (default \"%s\")\n", d->name, d->def);
    }
    /* the probe oobx-info and auto use: one rank, no wake fd */
    assert_int_equal(oobx__tp_probe(tp_name, &s, why, sizeof(why)), 0);
}

/* describe: before any instance exists, with the test's and with default
 * settings; text only. */
static void test_describe(void **state)
{
    (void)state;
    oobx_settings_t s[2];
    assert_int_equal(node_settings(&s[0]), 0);
    assert_int_equal(oobx__settings_load(&s[1], NULL), 0);
    for (int i = 0; i < 2; i++) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        assert_non_null(f);
        ops->describe(f, &s[i], &oobx__core_api);
        assert_int_equal(fclose(f), 0);
        assert_non_null(text);
        assert_int_equal(strlen(text), len); /* no NUL inside */
        if (i == 0) print_message("%zu bytes:\n%s", len, text);
        free(text);
    }
}

/* One rank (as the probe and a 1-rank communicator): no ring call, nothing
 * to connect; waiting works with and without a wake fd. */
static void test_one_rank(void **state)
{
    (void)state;
    for (int wake = 0; wake < 2; wake++) {
        node_t *n = calloc(1, sizeof(*n));
        int rc = node_try(n, 0, 1, 7, wake);
        if (rc) fail_msg("create 1 rank: %s (%s)", oobx_error_name(rc), oobx_last_error());
        unsigned char blob[OOBX_ADDR_MAX];
        blob_of(n, blob);
        for (int i = 0; i < 3; i++) assert_int_equal(ops->progress(n->tp), 0);
        uint64_t t0 = oobx__now_ns();
        int slept = 0;
        for (int i = 0; i < 5; i++) {
            slept += core_sleep(n, 20);
            assert_int_equal(ops->progress(n->tp), 0);
        }
        double ms = (double)(oobx__now_ns() - t0) / 1e6;
        print_message("wake fd %s: slept %d of 5 times, %.1f ms\n", wake ? "yes" : "no", slept, ms);
        assert_true(ms < 2000);
        assert_string_equal(n->bad, "");
        assert_int_equal(n->nmsgs, 0);
        node_fini(n);
        free(n);
    }
}

/* Addresses and their parsing; peer names. */
static void test_address_set_peer(void **state)
{
    (void)state;
    node_t *nodes = nodes_new(3);
    unsigned char blob[OOBX_ADDR_MAX], again[OOBX_ADDR_MAX];
    size_t len = blob_of(&nodes[1], blob);
    print_message("address of %zu bytes\n", len);
    /* the same address every time */
    assert_int_equal(blob_of(&nodes[1], again), len);
    assert_memory_equal(blob, again, len);
    /* too little room: an error; exactly enough: fine */
    size_t small = len - 1;
    assert_int_not_equal(ops->address(nodes[1].tp, again, &small), 0);
    size_t exact = len;
    assert_int_equal(ops->address(nodes[1].tp, again, &exact), 0);
    assert_int_equal(exact, len);
    /* what does not parse is OOBX_ERR_PROTOCOL, naming the rank */
    unsigned char junk[OOBX_ADDR_MAX];
    memset(junk, 0, sizeof(junk));
    junk[0] = 1, junk[1] = 2, junk[2] = 3;
    struct {
        const void *p;
        size_t len;
        const char *what;
    } bad[] = {
        {junk, 64, "64 bytes of junk"}, {junk, 3, "3 bytes"}, {junk, 0, "0 bytes"}, {blob, len - 1, "one byte short"},
        {NULL, len, "zeros"},       {NULL, 0, NULL},
    };
    static unsigned char ones[OOBX_ADDR_MAX], zeros[OOBX_ADDR_MAX];
    memset(ones, 0xff, sizeof(ones));
    bad[4].p = zeros;
    bad[5].p = ones, bad[5].len = len, bad[5].what = "0xff bytes";
    for (size_t i = 0; i < OOBX_ARRAY_SIZE(bad); i++) {
        oobx__set_last_error("none");
        int rc = ops->set_peer(nodes[0].tp, 1, bad[i].p, bad[i].len);
        if (rc != OOBX_ERR_PROTOCOL)
            fail_msg("set_peer with %s: %s, want OOBX_ERR_PROTOCOL", bad[i].what, oobx_error_name(rc));
        if (!strstr(oobx_last_error(), "rank 1"))
            fail_msg("set_peer with %s: the error does not name rank 1: %s", bad[i].what, oobx_last_error());
    }
    print_message("junk: %s\n", oobx_last_error());
    /* no ring neighbours */
    ring_call(&nodes[0], -1, -1);
    /* the good address after the junk, then messages both ways */
    connect_plain(nodes, 3);
    const size_t sizes[] = {5, 0, 70000};
    exchange(nodes, 3, 0, 1, sizes, 3);
    exchange(nodes, 3, 1, 0, sizes, 3);
    /* peer names: with and without an address, never past the buffer */
    node_t *lone = calloc(1, sizeof(*lone));
    node_init(lone, 0, 3);
    char name[256];
    ops->peer_name(nodes[0].tp, 1, name, sizeof(name));
    print_message("peer name: %s\n", name);
    assert_non_null(strstr(name, "rank 1"));
    ops->peer_name(lone->tp, 2, name, sizeof(name));
    print_message("peer name without an address: %s\n", name);
    assert_non_null(strstr(name, "rank 2"));
    char tiny[8];
    memset(tiny, 'X', sizeof(tiny));
    ops->peer_name(nodes[0].tp, 2, tiny, 6);
    assert_non_null(memchr(tiny, '\0', 6));
    assert_int_equal(tiny[6], 'X');
    assert_int_equal(tiny[7], 'X');
    node_fini(lone);
    free(lone);
    nodes_free(nodes, 3);
    ops->destroy(NULL);
}

/* A node never sends to itself (the core delivers those); a send to its own
 * rank or to no rank is refused, leaving the request alone, and nothing is
 * delivered. */
static void test_self_rules(void **state)
{
    (void)state;
    node_t *nodes = nodes_new(2);
    connect_core(nodes, 2);
    int nmsgs0 = nodes[0].nmsgs, nmsgs1 = nodes[1].nmsgs;
    unsigned char data[16] = "self";
    const int bad[] = {0, -1, 2, 100};
    for (size_t i = 0; i < OOBX_ARRAY_SIZE(bad); i++) {
        oobx_tp_req_t req = {.done = 7, .status = 7};
        oobx_msg_hdr_t h = {.ctx = 1, .tag = 2, .len = sizeof(data), .src = 0, .kind = OOBX_MSG_P2P};
        int rc = ops->send(nodes[0].tp, bad[i], &h, data, &req);
        if (rc == 0) fail_msg("send from rank 0 to rank %d was taken", bad[i]);
        assert_int_equal(req.done, 7);
        assert_int_equal(req.status, 7);
    }
    assert_int_not_equal(ops->set_peer(nodes[0].tp, -1, data, sizeof(data)), 0);
    assert_int_not_equal(ops->set_peer(nodes[0].tp, 2, data, sizeof(data)), 0);
    run_for(nodes, 2, 200);
    assert_int_equal(nodes[0].nmsgs, nmsgs0);
    assert_int_equal(nodes[1].nmsgs, nmsgs1);
    for (int i = 0; i < 2; i++)
        for (int r = 0; r < 2; r++) assert_int_equal(nodes[i].failed[r], 0);
    /* the pair still works */
    const size_t sizes[] = {1, 0, 9000};
    exchange(nodes, 2, 0, 1, sizes, 3);
    nodes_free(nodes, 2);
}

/* Exact headers: contexts and tags of all 64 bits, every kind. */
static void test_headers(void **state)
{
    (void)state;
    node_t *nodes = nodes_new(2);
    connect_core(nodes, 2);
    const oobx_msg_hdr_t hs[] = {
        {.ctx = 0, .tag = 0, .len = 0, .kind = OOBX_MSG_P2P},
        {.ctx = UINT64_MAX, .tag = UINT64_MAX, .len = 1, .kind = OOBX_MSG_COLL},
        {.ctx = 1ull << 63, .tag = 1ull << 63, .len = 17, .kind = OOBX_MSG_CTRL},
        {.ctx = 0x0123456789abcdefull, .tag = 0xfedcba9876543210ull, .len = 100000, .kind = OOBX_MSG_P2P},
        {.ctx = 42, .tag = 0xffffffff, .len = 0, .kind = OOBX_MSG_COLL},
        {.ctx = 42, .tag = 0x100000000ull, .len = 3, .kind = OOBX_MSG_CTRL},
    };
    enum { N = OOBX_ARRAY_SIZE(hs) };
    unsigned char *bufs[N];
    oobx_tp_req_t reqs[N];
    for (int i = 0; i < N; i++) {
        oobx_msg_hdr_t h = hs[i];
        h.src = 1;
        bufs[i] = malloc(h.len + 1);
        fill(bufs[i], h.len, seed_of(h.ctx, h.tag));
        assert_int_equal(ops->send(nodes[1].tp, 0, &h, bufs[i], &reqs[i]), 0);
    }
    want_t w = {.nb = 0};
    w.count[0] = nodes[0].nended + N;
    w.count[1] = nodes[1].nended;
    assert_int_equal(run_until(nodes, 2, got_all, &w, RUN_MS), 0);
    int first = nodes[0].nended - N;
    for (int i = 0; i < N; i++) {
        rx_msg_t *m = &nodes[0].msgs[first + i];
        assert_true(m->hdr.ctx == hs[i].ctx);
        assert_true(m->hdr.tag == hs[i].tag);
        assert_int_equal(m->hdr.len, hs[i].len);
        assert_int_equal(m->hdr.kind, hs[i].kind);
        assert_int_equal(m->hdr.src, 1);
        assert_int_equal(check_fill(m->buf, hs[i].len, seed_of(hs[i].ctx, hs[i].tag)), -1);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(run_until(nodes, 2, req_done, &reqs[i], RUN_MS), 0);
        assert_int_equal(reqs[i].status, 0);
        free(bufs[i]);
    }
    nodes_free(nodes, 2);
}

/* Sizes from 0 to large, both ways at once and each way alone. */
static void test_sizes(void **state)
{
    (void)state;
    const size_t large = PICK(4u << 20, 16u << 20, 64u << 20);
    const size_t sizes[] = {0,      1,      2,      3,      7,      8,      63,      64,      65,          255,
                            256,    257,    1000,   4095,   4096,   4097,   8191,    8192,    8193,        65535,
                            65536,  65537,  100000, 262143, 262144, 262145, 1u << 20, (1u << 20) + 1, 0, 0,
                            1,      (4u << 20) + 3, large, 5, 0};
    const int n = (int)OOBX_ARRAY_SIZE(sizes);
    node_t *nodes = nodes_new(2);
    connect_core(nodes, 2);
    batch_t b[2];
    batch_send(nodes, &b[0], 0, 1, sizes, n);
    batch_send(nodes, &b[1], 1, 0, sizes, n);
    finish(nodes, 2, b, 2);
    exchange(nodes, 2, 0, 1, sizes, n);
    exchange(nodes, 2, 1, 0, sizes, n);
    nodes_free(nodes, 2);
}

/* Order per pair: three senders to one receiver and back, all at once. */
static void test_order_per_pair(void **state)
{
    (void)state;
    const int count = PICK(100, 300, 1000);
    size_t *sizes = calloc((size_t)count, sizeof(*sizes));
    for (int i = 0; i < count; i++) sizes[i] = (size_t)(i * 37) % 1500;
    for (int i = 7; i < count; i += 50) sizes[i] = 70000 + (size_t)i;
    sizes[count / 2] = 1u << 20;
    sizes[count - 1] = 0;
    node_t *nodes = nodes_new(4);
    connect_core(nodes, 4);
    batch_t b[6];
    int nb = 0;
    for (int i = 1; i < 4; i++) batch_send(nodes, &b[nb++], i, 0, sizes, count);
    for (int i = 1; i < 4; i++) batch_send(nodes, &b[nb++], 0, i, sizes, count / 3);
    finish(nodes, 4, b, nb);
    free(sizes);
    nodes_free(nodes, 4);
}

/* Both sides queue many messages before either progresses (flow control
 * must not deadlock when both run out at once). */
static void test_queued_both_ways(void **state)
{
    (void)state;
    const int count = PICK(1000, 3000, 10000);
    size_t *sizes = calloc((size_t)count, sizeof(*sizes));
    for (int i = 0; i < count; i++) sizes[i] = (size_t)(i * 37) % 700;
    sizes[count / 2] = 50000;
    sizes[count / 3] = 1u << 20;
    node_t *nodes = nodes_new(2);
    connect_plain(nodes, 2);
    batch_t b[2];
    batch_send(nodes, &b[0], 0, 1, sizes, count);
    batch_send(nodes, &b[1], 1, 0, sizes, count);
    finish(nodes, 2, b, 2);
    free(sizes);
    nodes_free(nodes, 2);
}

/* Every rank sends first, before anyone progresses: connection attempts cross. */
static void test_crossed_first_sends(void **state)
{
    (void)state;
    const size_t sizes[] = {5, 0, 20000, 9000, 1};
    for (int round = 0; round < PICK(2, 4, 10); round++) {
        node_t *nodes = nodes_new(3);
        connect_plain(nodes, 3);
        batch_t b[6];
        int nb = 0;
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
                if (i != j) batch_send(nodes, &b[nb++], i, j, sizes, (int)OOBX_ARRAY_SIZE(sizes));
        finish(nodes, 3, b, nb);
        /* and again on the links now made */
        nb = 0;
        for (int i = 0; i < 3; i++) batch_send(nodes, &b[nb++], i, (i + 2) % 3, sizes, 2);
        finish(nodes, 3, b, nb);
        nodes_free(nodes, 3);
    }
}

/* Ring links as the core sets them up: ring(-1, next), messages over the
 * ring before the other addresses are known, then ring(prev, next); order
 * holds across the switch, to the ring neighbour and to the others. Small
 * ring slots, so that a ring buffer wraps many times. Two ranks (prev ==
 * next), three and five. */
static void test_ring_links(void **state)
{
    (void)state;
    const int counts[] = {2, 3, 5};
    size_t after[300];
    for (int i = 0; i < 300; i++) after[i] = (size_t)(i * 53) % 1000;
    after[10] = after[11] = 0;
    after[100] = 100000;
    after[200] = PICK(256u << 10, 2u << 20, 2u << 20);
    for (size_t c = 0; c < OOBX_ARRAY_SIZE(counts); c++) {
        int n = counts[c];
        node_t *nodes = calloc((size_t)n, sizeof(*nodes));
        setenv("OOBX_RING_SLOTS", "4", 1);
        setenv("OOBX_RING_SLOT_BYTES", "1024", 1);
        for (int i = 0; i < n; i++) node_init(&nodes[i], i, n);
        unsetenv("OOBX_RING_SLOTS");
        unsetenv("OOBX_RING_SLOT_BYTES");
        assert_int_equal(nodes[0].set.ring_slots, 4);
        connect_core(nodes, n);
        batch_t b[2 * NMAX];
        int nb = 0;
        for (int i = 0; i < n; i++) batch_send(nodes, &b[nb++], i, (i + 1) % n, after, 300);
        if (n > 2)
            for (int i = 0; i < n; i++) batch_send(nodes, &b[nb++], i, (i + n - 1) % n, after, 40);
        finish(nodes, n, b, nb);
        nodes_free(nodes, n);
    }
}

/* Many peers: every pair, both ways, after the core's set-up. */
static void test_many_peers(void **state)
{
    (void)state;
    const int n = PICK(4, 8, 16);
    const size_t sizes[] = {0, 1, 300, 70000, 5, PICK(100000, 1u << 20, 1u << 20)};
    node_t *nodes = nodes_new(n);
    connect_core(nodes, n);
    batch_t *b = calloc((size_t)(n * n), sizeof(*b));
    int nb = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i != j) batch_send(nodes, &b[nb++], i, j, sizes, (int)OOBX_ARRAY_SIZE(sizes));
    assert_true(nb <= (int)OOBX_ARRAY_SIZE(g_active));
    finish(nodes, n, b, nb);
    free(b);
    nodes_free(nodes, n);
}

/* A peer in another process: what the parent sends comes back from it (the
 * child echoes); the parent waits as the core does (wait_prepare + sleep). */
static void test_other_process(void **state)
{
    (void)state;
    proc_t pr;
    node_t *n = calloc(1, sizeof(*n));
    pair_with_child(n, &pr, 1);
    const size_t sizes[] = {0, 1, 100, 4096, 65537, 262145, PICK(1u << 20, 4u << 20, 16u << 20), 3, 0};
    const int count = (int)OOBX_ARRAY_SIZE(sizes);
    uint64_t ctx = next_ctx();
    unsigned char *bufs[OOBX_ARRAY_SIZE(sizes)];
    oobx_tp_req_t reqs[OOBX_ARRAY_SIZE(sizes)];
    for (int i = 0; i < count; i++) {
        bufs[i] = malloc(sizes[i] + 1);
        fill(bufs[i], sizes[i], seed_of(ctx, (uint64_t)i));
        oobx_msg_hdr_t h = {.ctx = ctx, .tag = (uint64_t)i, .len = sizes[i], .src = 0, .kind = OOBX_MSG_P2P};
        assert_int_equal(ops->send(n->tp, 1, &h, bufs[i], &reqs[i]), 0);
    }
    ctxwant_t w = {.ctx = ctx, .count = count};
    if (run_until(n, 1, got_ctx, &w, RUN_MS))
        fail_msg("%d of %d echoes back from the other process", count_ctx(n, ctx), count);
    int k = 0;
    for (int m = 0; m < n->nmsgs; m++) {
        rx_msg_t *r = &n->msgs[m];
        if (r->hdr.ctx != ctx) continue;
        assert_int_equal(r->hdr.tag, (uint64_t)k);
        assert_int_equal(r->hdr.src, 1);
        assert_int_equal(r->hdr.len, sizes[k]);
        assert_int_equal(check_fill(r->buf, sizes[k], seed_of(ctx, (uint64_t)k)), -1);
        k++;
    }
    for (int i = 0; i < count; i++) {
        assert_true(reqs[i].done);
        assert_int_equal(reqs[i].status, 0);
        free(bufs[i]);
    }
    /* the child destroys its instance and exits cleanly: it saw no violation */
    assert_int_equal(proc_quit(&pr), 0);
    run_for(n, 1, 300);
    node_fini(n);
    free(n);
}

static int failed_at_both(node_t *nodes, int n, void *arg)
{
    int peer = *(int *)arg;
    for (int i = 0; i < n; i++)
        if (!nodes[i].failed[peer]) return 0;
    return 1;
}

static int got_one_each(node_t *nodes, int n, void *arg)
{
    (void)arg;
    for (int i = 0; i < n; i++)
        if (nodes[i].nended < 1) return 0;
    return 1;
}

/* Rank 1 of 3 is a child that is killed while rank 0's large send to it is
 * in flight: ranks 0 and 2 (here) hear of it once, through peer_failed
 * naming rank 1, without sending anything more; the pending send fails, a
 * later one is refused; 0 and 2 go on. */
static void test_peer_killed(void **state)
{
    (void)state;
    proc_t pr;
    proc_start(&pr, 1, 3, 0);
    node_t *nodes = calloc(2, sizeof(*nodes)); /* positions 0 and 1 hold ranks 0 and 2 */
    node_init(&nodes[0], 0, 3);
    node_init(&nodes[1], 2, 3);
    for (int i = 0; i < 2; i++) assert_int_equal(ops->set_peer(nodes[i].tp, 1, pr.blob, pr.bloblen), 0);
    introduce(&nodes[0], &nodes[1]);
    introduce(&nodes[1], &nodes[0]);
    proc_set_peer(&pr, &nodes[0]);
    proc_set_peer(&pr, &nodes[1]);
    /* the core's order: every ring(-1, next) before any ring(prev, next) */
    proc_ring(&pr, -1, 2);
    ring_call(&nodes[0], -1, 1);
    ring_call(&nodes[1], -1, 0);
    ring_call(&nodes[0], 2, 1);
    ring_call(&nodes[1], 1, 0);
    proc_ring(&pr, 0, 2);
    uint64_t ctx = 0xdead;
    proc_send(&pr, 0, ctx, 1, 20000, 0);
    proc_send(&pr, 2, ctx, 1, 6, 0);
    assert_int_equal(run_until(nodes, 2, got_one_each, NULL, RUN_MS), 0);
    check_child_msg(&nodes[0], ctx, 1, 20000, 1);
    check_child_msg(&nodes[1], ctx, 1, 6, 1);
    /* a send that completes, then one that cannot while the child is stopped */
    static unsigned char hello[100];
    oobx_tp_req_t r0 = {0};
    oobx_msg_hdr_t h = {.ctx = 2, .tag = 2, .len = sizeof(hello), .src = 0, .kind = OOBX_MSG_P2P};
    assert_int_equal(ops->send(nodes[0].tp, 1, &h, hello, &r0), 0);
    assert_int_equal(run_until(nodes, 2, req_done, &r0, RUN_MS), 0);
    assert_int_equal(r0.status, 0);
    kill(pr.pid, SIGSTOP);
    size_t big_len = 32u << 20;
    unsigned char *big = malloc(big_len);
    memset(big, 3, big_len);
    oobx_tp_req_t big_req = {0};
    h.len = big_len;
    h.tag = 3;
    assert_int_equal(ops->send(nodes[0].tp, 1, &h, big, &big_req), 0);
    run_for(nodes, 2, 200);
    print_message("32 MiB to the stopped rank: %s\n", big_req.done ? "done (?)" : "in flight");
    proc_kill(&pr);
    uint64_t t0 = oobx__now_ns();
    int peer = 1;
    if (run_until(nodes, 2, failed_at_both, &peer, 5000))
        fail_msg("the death of rank 1 not reported within 5 s (rank 0: %d, rank 2: %d)", nodes[0].failed[1],
                 nodes[1].failed[1]);
    print_message("failure seen after %.3f s\n", (double)(oobx__now_ns() - t0) / 1e9);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(nodes[i].failed[1], 1);
        if (nodes[i].fail_status[1] != OOBX_ERR_REMOTE)
            fail_msg("rank %d: peer_failed(1) with %s, want OOBX_ERR_REMOTE", nodes[i].rank,
                     oobx_error_name(nodes[i].fail_status[1]));
        if (!strstr(nodes[i].fail_what[1], "rank 1"))
            fail_msg("rank %d: the reason does not name rank 1: %s", nodes[i].rank, nodes[i].fail_what[1]);
    }
    /* the pending send fails */
    if (run_until(nodes, 2, req_done, &big_req, 10000)) fail_msg("the send pending to the dead rank never ended");
    if (big_req.status == 0) fail_msg("the 32 MiB send to the dead rank reports success");
    print_message("pending send: %s\n", oobx_error_name(big_req.status));
    /* a later one is refused at once, leaving the request alone */
    oobx_tp_req_t later = {.done = 7, .status = 7};
    h.len = 64;
    int rc = ops->send(nodes[0].tp, 1, &h, big, &later);
    if (rc != OOBX_ERR_REMOTE) fail_msg("send to the dead rank: %s, want OOBX_ERR_REMOTE", oobx_error_name(rc));
    assert_int_equal(later.done, 7);
    assert_int_equal(later.status, 7);
    rc = ops->send(nodes[1].tp, 1, &h, big, &later);
    assert_int_equal(rc, OOBX_ERR_REMOTE);
    assert_int_equal(later.done, 7);
    /* told once */
    run_for(nodes, 2, 300);
    assert_int_equal(nodes[0].failed[1], 1);
    assert_int_equal(nodes[1].failed[1], 1);
    /* ranks 0 and 2 are unaffected */
    const size_t sizes[] = {1, 100000, 0};
    batch_t bb[2];
    batch_send(nodes, &bb[0], 0, 1, sizes, 3);
    batch_send(nodes, &bb[1], 1, 0, sizes, 3);
    finish(nodes, 2, bb, 2);
    assert_int_equal(nodes[0].failed[2], 0);
    assert_int_equal(nodes[1].failed[0], 0);
    nodes_free(nodes, 2);
    free(big);
}

/* Rank 1 of 4 (a child) sends to rank 3, which is not its ring neighbour
 * and never sends to it, and is killed: rank 3 (here, with 0 and 2) hears of
 * it too, through peer_failed naming rank 1. */
static void test_peer_killed_sender_only(void **state)
{
    (void)state;
    proc_t pr;
    proc_start(&pr, 1, 4, 0);
    node_t *nodes = calloc(3, sizeof(*nodes)); /* positions 0, 1, 2 hold ranks 0, 2, 3 */
    const int ranks[] = {0, 2, 3};
    for (int i = 0; i < 3; i++) node_init(&nodes[i], ranks[i], 4);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ops->set_peer(nodes[i].tp, 1, pr.blob, pr.bloblen), 0);
        for (int j = 0; j < 3; j++)
            if (i != j) introduce(&nodes[i], &nodes[j]);
        proc_set_peer(&pr, &nodes[i]);
    }
    /* the core's order: every ring(-1, next) first */
    proc_ring(&pr, -1, 2);
    for (int i = 0; i < 3; i++) ring_call(&nodes[i], -1, (ranks[i] + 1) % 4);
    proc_ring(&pr, 0, 2);
    for (int i = 0; i < 3; i++) ring_call(&nodes[i], (ranks[i] + 3) % 4, (ranks[i] + 1) % 4);
    uint64_t ctx = next_ctx();
    proc_send(&pr, 3, ctx, 1, 300, 0);
    proc_send(&pr, 3, ctx, 2, 100000, 0);
    ctxwant_t w = {.ctx = ctx, .count = 2};
    node_t *r3 = &nodes[2];
    /* every rank progresses, as cores do: rank 2 knows rank 1 only through
     * the ring connection rank 1 opened to it, which is proved (challenge,
     * hello, acknowledgement) only while rank 2 takes part; a peer that dies
     * before its connection is proved cannot be named through it */
    assert_int_equal(run_until(nodes, 3, got_ctx_at_last, &w, RUN_MS), 0);
    check_child_msg(r3, ctx, 1, 300, 1);
    check_child_msg(r3, ctx, 2, 100000, 1);
    (void)run_until(nodes, 3, never, NULL, 300); /* the proofs' round trips */
    proc_kill(&pr);
    uint64_t t0 = oobx__now_ns();
    int peer = 1;
    if (run_until(nodes, 3, failed_at_both, &peer, 5000))
        fail_msg("the death of rank 1 not reported within 5 s (ranks 0, 2, 3: %d, %d, %d)", nodes[0].failed[1],
                 nodes[1].failed[1], nodes[2].failed[1]);
    print_message("failure seen after %.3f s\n", (double)(oobx__now_ns() - t0) / 1e9);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(nodes[i].failed[1], 1);
        assert_int_equal(nodes[i].fail_status[1], OOBX_ERR_REMOTE);
        assert_non_null(strstr(nodes[i].fail_what[1], "rank 1"));
    }
    nodes_free(nodes, 3);
}

static int began_unfinished(node_t *nodes, int n, void *arg)
{
    (void)n;
    int at = *(int *)arg;
    return nodes[at].nmsgs > nodes[at].nended;
}

/* The messages from src that ended at n are the first ones sent, intact. */
static void check_prefix(node_t *n, batch_t *b, int src)
{
    int k = 0;
    for (int m = 0; m < n->nmsgs; m++) {
        rx_msg_t *r = &n->msgs[m];
        if (r->hdr.ctx != b->ctx || r->hdr.src != src) continue;
        if (!r->ended) break;
        assert_int_equal(r->hdr.tag, b->tag0 + (uint64_t)k);
        assert_int_equal(r->hdr.len, b->sizes[k]);
        assert_int_equal(check_fill(r->buf, b->sizes[k], seed_of(b->ctx, b->tag0 + (uint64_t)k)), -1);
        k++;
    }
    print_message("%d of %d messages arrived whole\n", k, b->count);
}

/* destroy with messages in flight: of the sender, of the receiver (in the
 * middle of a message), and while connecting. Bounded, without sink calls;
 * the survivor goes on; nothing arrives broken. */
static void test_destroy_in_flight(void **state)
{
    (void)state;
    const size_t large = PICK(4u << 20, 16u << 20, 64u << 20);
    size_t sizes[202];
    for (int i = 0; i < 202; i++) sizes[i] = (size_t)(i * 91) % 3000;
    sizes[0] = large;
    sizes[100] = large / 4;
    const int count = (int)OOBX_ARRAY_SIZE(sizes);
    /* the sender goes */
    {
        node_t *nodes = nodes_new(2);
        connect_core(nodes, 2);
        batch_t b;
        batch_send(nodes, &b, 0, 1, sizes, count);
        int at = 1;
        run_until(nodes, 2, began_unfinished, &at, 3000);
        double ms = node_destroy(&nodes[0]);
        print_message("sender destroyed in %.1f ms\n", ms);
        assert_true(ms < DESTROY_MAX_MS);
        assert_string_equal(nodes[0].bad, "");
        run_for(nodes, 2, 500);
        assert_string_equal(nodes[1].bad, "");
        check_prefix(&nodes[1], &b, 0);
        node_fini(&nodes[1]);
        batch_forget(&b);
        node_free_msgs(&nodes[0]);
        free(nodes);
    }
    /* the receiver goes, in the middle of a message */
    {
        node_t *nodes = nodes_new(2);
        connect_core(nodes, 2);
        batch_t b;
        batch_send(nodes, &b, 0, 1, sizes, count);
        int at = 1;
        int mid = run_until(nodes, 2, began_unfinished, &at, 3000) == 0;
        print_message("receiver destroyed %s\n", mid ? "in the middle of a message" : "(no partial message seen)");
        double ms = node_destroy(&nodes[1]);
        assert_true(ms < DESTROY_MAX_MS);
        assert_string_equal(nodes[1].bad, "");
        run_for(nodes, 2, 500); /* the sender goes on progressing */
        assert_string_equal(nodes[0].bad, "");
        int done = 0;
        for (int i = 0; i < count; i++) done += b.reqs[i].done;
        print_message("%d of %d sends done when the sender is destroyed\n", done, count);
        node_fini(&nodes[0]);
        batch_forget(&b);
        node_free_msgs(&nodes[1]);
        free(nodes);
    }
    /* destroy while connecting: right after the first send, and right after ring(-1, next) */
    {
        node_t *nodes = nodes_new(2);
        connect_plain(nodes, 2);
        static unsigned char msg[64];
        oobx_tp_req_t req = {0};
        oobx_msg_hdr_t h = {.ctx = 1, .tag = 1, .len = sizeof(msg), .src = 0, .kind = OOBX_MSG_P2P};
        assert_int_equal(ops->send(nodes[0].tp, 1, &h, msg, &req), 0);
        double ms = node_destroy(&nodes[0]);
        assert_true(ms < DESTROY_MAX_MS);
        run_for(nodes, 2, 200);
        node_fini(&nodes[1]);
        node_free_msgs(&nodes[0]);
        assert_string_equal(nodes[0].bad, "");
        node_init(&nodes[0], 0, 2);
        node_init(&nodes[1], 1, 2);
        introduce(&nodes[0], &nodes[1]);
        ring_call(&nodes[0], -1, 1);
        nodes_free(nodes, 2);
    }
}

/* Rank from's last words to rank to: 64 bytes of the pattern, tag 7, in a
 * context of their own (returned); words and wq must outlive the send. */
#define WORDS_BYTES 64
static uint64_t send_words(node_t *nodes, int from, int to, unsigned char *words, oobx_tp_req_t *wq)
{
    uint64_t ctx = next_ctx();
    fill(words, WORDS_BYTES, seed_of(ctx, 7));
    *wq = (oobx_tp_req_t){0};
    oobx_msg_hdr_t wh = {.ctx = ctx, .tag = 7, .len = WORDS_BYTES, .src = from, .kind = OOBX_MSG_P2P};
    assert_int_equal(ops->send(nodes[from].tp, to, &wh, words, wq), 0);
    return ctx;
}

/* The words' context ended at the first node, or their sender failed there */
typedef struct words_wait {
    ctxwant_t w;
    int from;
} words_wait_t;

static int got_words_or_end(node_t *nodes, int n, void *arg)
{
    words_wait_t *ww = arg;
    return got_ctx(nodes, n, &ww->w) || nodes[0].failed[ww->from];
}

/* A rank's last words on a link that is not through on its own side yet:
 * it sends and leaves without having progressed since the link began (the
 * core's node-aware path, where the ranks of a host meet in shared memory
 * and a ring link waits unattended). The words reach the peer, which has
 * the link up on its side and would read its end alone as the rank's death:
 * when the leaver's own connect waits for the hello's answer it never read,
 * and when the peer's connect waits unaccepted in the leaver's listener
 * while the words opened a second link. */
static void last_words_case(int leaver_connected)
{
    node_t *nodes = nodes_new(2);
    connect_plain(nodes, 2);
    int leaver = leaver_connected ? 0 : 1, stayer = 1 - leaver;
    ring_call(&nodes[0], -1, 1); /* rank 0 connects to rank 1 */
    run_for(&nodes[0], 1, 50);   /* rank 0 alone: its hello goes out */
    if (leaver_connected) run_for(&nodes[1], 1, 100); /* rank 1 alone: taken and answered */
    unsigned char words[WORDS_BYTES];
    oobx_tp_req_t wq;
    uint64_t ctx = send_words(nodes, leaver, stayer, words, &wq);
    /* it leaves while the peer goes on (in a call that waits on others) */
    destroy_job_t job = {.n = &nodes[leaver]};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, destroy_thread, &job), 0);
    words_wait_t ww = {{ctx, 1}, leaver};
    int seen = run_until(&nodes[stayer], 1, got_words_or_end, &ww, 5000) == 0;
    pthread_join(th, NULL);
    print_message("rank %d (%s) destroyed in %.1f ms\n", leaver,
                  leaver_connected ? "its hello unanswered" : "its peer's hello unaccepted", job.ms);
    assert_true(job.ms < DESTROY_MAX_MS);
    assert_string_equal(nodes[leaver].bad, "");
    if (!seen) fail_msg("rank %d: neither rank %d's words nor its end within 5 s", stayer, leaver);
    check_child_msg(&nodes[stayer], ctx, 7, sizeof(words), leaver);
    node_fini(&nodes[stayer]);
    node_free_msgs(&nodes[leaver]);
    free(nodes);
}

static void test_last_words_on_a_fresh_link(void **state)
{
    (void)state;
    last_words_case(1);
    last_words_case(0);
}

/* Instances come and go without leaving file descriptors; destroy is quick. */
static void test_create_destroy_cycles(void **state)
{
    (void)state;
    const int cycles = PICK(10, 30, 100);
    const size_t sizes[] = {16, 0};
    int fds0 = -1;
    double worst = 0;
    uint64_t t0 = oobx__now_ns();
    for (int cycle = 0; cycle < cycles; cycle++) {
        node_t *nodes = nodes_new(2);
        if (cycle % 2)
            connect_core(nodes, 2);
        else
            connect_plain(nodes, 2);
        exchange(nodes, 2, cycle % 2, 1 - cycle % 2, sizes, 2);
        double ms = nodes_destroy_all(nodes, 2);
        if (ms > worst) worst = ms;
        free(nodes);
        if (cycle == 1) fds0 = oobx_debug_count_fds(); /* after the transport's own start-up */
    }
    int fds1 = oobx_debug_count_fds();
    print_message("%d cycles in %.2f s, slowest destroy %.1f ms, fds %d -> %d\n", cycles,
                  (double)(oobx__now_ns() - t0) / 1e9, worst, fds0, fds1);
    assert_int_equal(fds1, fds0);
}

/* The wake fd, readable before the sleep: the sleep returns at once, and
 * once sleep and the progress after it have run, the wake fd is read. */
static void test_wake_before_sleep(void **state)
{
    (void)state;
    proc_t pr;
    node_t *n = calloc(1, sizeof(*n));
    pair_with_child(n, &pr, 0);
    proc_send(&pr, 0, 77, 1, 10, 0);
    ctxwant_t w = {.ctx = 77, .count = 1};
    assert_int_equal(run_until(n, 1, got_ctx, &w, RUN_MS), 0);
    for (int round = 0; round < 3; round++) {
        timer_arm_ms(n->wake_fd, 0); /* as oobx__ep_wake */
        usleep(1000);
        assert_true(fd_readable(n->wake_fd));
        uint64_t t0 = oobx__now_ns();
        int slept = 0;
        for (int i = 0; i < 100 && !slept; i++) {
            slept = core_sleep(n, 5000);
            assert_int_equal(ops->progress(n->tp), 0);
        }
        double ms = (double)(oobx__now_ns() - t0) / 1e6;
        assert_string_equal(n->bad, "");
        assert_true(slept);
        if (ms > 4000) fail_msg("sleep(5000) with the wake fd readable took %.0f ms", ms);
        if (fd_readable(n->wake_fd)) fail_msg("the wake fd is still readable after sleep and progress");
    }
    assert_int_equal(proc_quit(&pr), 0);
    node_fini(n);
    free(n);
}

/* The wake fd fires during a long sleep: the sleep ends then, and the fd is read. */
static void test_wake_during_sleep(void **state)
{
    (void)state;
    proc_t pr;
    node_t *n = calloc(1, sizeof(*n));
    pair_with_child(n, &pr, 0);
    proc_send(&pr, 0, 77, 1, 10, 0);
    ctxwant_t w = {.ctx = 77, .count = 1};
    assert_int_equal(run_until(n, 1, got_ctx, &w, RUN_MS), 0);
    for (int round = 0; round < 3; round++) {
        timer_arm_ms(n->wake_fd, 150);
        uint64_t t0 = oobx__now_ns();
        /* until the wake fd fires: a transport may wake earlier for its own timers */
        int sleeps = 0;
        while (oobx__now_ns() - t0 < 3000000000ull) {
            sleeps += core_sleep(n, 5000);
            assert_int_equal(ops->progress(n->tp), 0);
            if (oobx__now_ns() - t0 >= 150000000ull && !fd_readable(n->wake_fd)) break;
        }
        double ms = (double)(oobx__now_ns() - t0) / 1e6;
        assert_string_equal(n->bad, "");
        print_message("woken after %.1f ms, %d sleeps\n", ms, sleeps);
        if (ms > 4000) fail_msg("the wake fd fired after 150 ms; sleep(5000) ended after %.0f ms", ms);
        if (fd_readable(n->wake_fd)) fail_msg("the wake fd is still readable after sleep and progress");
    }
    assert_int_equal(proc_quit(&pr), 0);
    node_fini(n);
    free(n);
}

/* An idle transport really sleeps (no spinning), a connected one too. */
static void test_idle_sleep(void **state)
{
    (void)state;
    proc_t pr;
    node_t *n = calloc(1, sizeof(*n));
    pair_with_child(n, &pr, 0);
    proc_send(&pr, 0, 77, 1, 10, 0);
    ctxwant_t w = {.ctx = 77, .count = 1};
    assert_int_equal(run_until(n, 1, got_ctx, &w, RUN_MS), 0);
    run_for(n, 1, 300); /* let set-up traffic settle */
    uint64_t t0 = oobx__now_ns();
    int rounds = 0, slept = 0;
    while (oobx__now_ns() - t0 < 600000000ull) {
        slept += core_sleep(n, 100);
        assert_int_equal(ops->progress(n->tp), 0);
        rounds++;
    }
    print_message("600 ms idle: %d rounds, %d sleeps\n", rounds, slept);
    assert_string_equal(n->bad, "");
    if (rounds > 200) fail_msg("an idle transport went round %d times in 600 ms (sleeps of 100 ms)", rounds);
    assert_int_equal(proc_quit(&pr), 0);
    node_fini(n);
    free(n);
}

/* Sleeps as the core does (wait_prepare + sleep, no bound but the core's
 * 10 s deadline timer on the wake fd) until a message of ctx is in, or 10 s.
 * Returns 1 when the deadline timer fired (the arrival did not end a
 * sleep); *ms: how long it took, *sleeps: the sleeps. */
static int sleep_until_ctx(node_t *n, uint64_t ctx, double *ms, int *sleeps)
{
    timer_arm_ms(n->wake_fd, 10000);
    uint64_t t0 = oobx__now_ns();
    *sleeps = 0;
    while (count_ctx(n, ctx) < 1 && oobx__now_ns() - t0 < 10000000000ull) {
        *sleeps += core_sleep(n, -1);
        assert_int_equal(ops->progress(n->tp), 0);
        assert_string_equal(n->bad, "");
    }
    *ms = (double)(oobx__now_ns() - t0) / 1e6;
    struct itimerspec left;
    assert_int_equal(timerfd_gettime(n->wake_fd, &left), 0);
    int fired = (left.it_value.tv_sec == 0 && left.it_value.tv_nsec == 0) || fd_readable(n->wake_fd);
    timer_disarm(n->wake_fd);
    return fired;
}

/* A message from another process ends a sleep without a bound. */
static void test_arrival_wakes_sleep(void **state)
{
    (void)state;
    proc_t pr;
    node_t *n = calloc(1, sizeof(*n));
    pair_with_child(n, &pr, 0);
    proc_send(&pr, 0, 77, 1, 10, 0);
    ctxwant_t w = {.ctx = 77, .count = 1};
    assert_int_equal(run_until(n, 1, got_ctx, &w, RUN_MS), 0);
    run_for(n, 1, 200);
    const size_t sizes[] = {1000, PICK(1u << 20, 4u << 20, 4u << 20)};
    for (int round = 0; round < 2; round++) {
        uint64_t ctx = 100 + (uint64_t)round;
        proc_send(&pr, 0, ctx, 1, sizes[round], 300);
        double ms;
        int sleeps, fired = sleep_until_ctx(n, ctx, &ms, &sleeps);
        print_message("%zu bytes sent after 300 ms, in after %.1f ms, %d sleeps\n", sizes[round], ms, sleeps);
        if (count_ctx(n, ctx) < 1) fail_msg("the message never arrived");
        check_child_msg(n, ctx, 1, sizes[round], 1);
        /* a sleep that the arrival did not end lasts until the deadline timer */
        if (fired) fail_msg("the message was seen only after the 10 s deadline timer fired (%.0f ms)", ms);
    }
    assert_int_equal(proc_quit(&pr), 0);
    node_fini(n);
    free(n);
}

/* Progress() again and again, as the core's polling window calls it (no
 * wait_prepare), until count messages of ctx are in; -1 after ms. */
static int poll_until_ctx(node_t *n, uint64_t ctx, int count, int ms)
{
    uint64_t deadline = oobx__deadline(ms);
    while (count_ctx(n, ctx) < count) {
        if (oobx__now_ns() > deadline) return -1;
        assert_int_equal(ops->progress(n->tp), 0);
        scribble_done();
        assert_string_equal(n->bad, "");
    }
    return 0;
}

/* Polls as the core does while a rank has a core (progress() again and
 * again, no wait_prepare), with messages coming from another process and a
 * large message going out and echoed back, then sleeps: a transport that
 * changes what it watches while polled (the socket transport takes the
 * polled connection out of its epoll set) must watch it again by the sleep,
 * so the next arrival ends the sleep, not the deadline timer. */
static void test_polled_then_sleep(void **state)
{
    (void)state;
    proc_t pr;
    node_t *n = calloc(1, sizeof(*n));
    pair_with_child(n, &pr, 1);
    uint64_t ctx = next_ctx();
    for (int i = 0; i < 40; i++) proc_send(&pr, 0, ctx, (uint64_t)i + 1, 10, 0);
    if (poll_until_ctx(n, ctx, 40, RUN_MS)) fail_msg("%d of 40 messages in while polling", count_ctx(n, ctx));
    /* output that waits for room while polled: 4 MiB out, the echo back */
    size_t big = PICK(1u << 20, 4u << 20, 4u << 20);
    uint64_t bctx = next_ctx();
    unsigned char *buf = malloc(big);
    assert_non_null(buf);
    fill(buf, big, seed_of(bctx, 9));
    oobx_tp_req_t req = {.status = 12345};
    oobx_msg_hdr_t h = {.ctx = bctx, .tag = 9, .len = big, .src = 0, .kind = OOBX_MSG_P2P};
    assert_int_equal(ops->send(n->tp, 1, &h, buf, &req), 0);
    if (poll_until_ctx(n, bctx, 1, RUN_MS)) fail_msg("no echo of %zu bytes while polling", big);
    assert_int_equal(req.done, 1);
    assert_int_equal(req.status, 0);
    check_child_msg(n, bctx, 9, big, 1);
    free(buf);
    for (int round = 0; round < 2; round++) {
        uint64_t lctx = next_ctx();
        for (int i = 0; i < 20; i++) proc_send(&pr, 0, lctx, (uint64_t)i + 1, 10, 0);
        if (poll_until_ctx(n, lctx, 20, RUN_MS)) fail_msg("round %d: messages not in while polling", round);
        for (int i = 0; i < 50; i++) assert_int_equal(ops->progress(n->tp), 0);
        uint64_t sctx = next_ctx();
        proc_send(&pr, 0, sctx, 1, 10, 300);
        double ms;
        int sleeps, fired = sleep_until_ctx(n, sctx, &ms, &sleeps);
        print_message("round %d: polled, then a message 300 ms later: in after %.1f ms, %d sleeps\n", round, ms,
                      sleeps);
        if (count_ctx(n, sctx) < 1) fail_msg("the message sent while rank 0 slept never arrived");
        if (fired) fail_msg("the message was seen only after the 10 s deadline timer fired (%.0f ms)", ms);
    }
    assert_int_equal(proc_quit(&pr), 0);
    node_fini(n);
    free(n);
}

/* Before each case: batches a failed case left behind are forgotten (their
 * memory went with it). */
static uint64_t g_case_t0;

static int case_setup(void **state)
{
    (void)state;
    g_nactive = 0;
    g_case_t0 = oobx__now_ns();
    return 0;
}

/* after each case that passed: how long it took (for the time budget of make test) */
static int case_teardown(void **state)
{
    (void)state;
    fprintf(stderr, "  [%.2f s]\n", (double)(oobx__now_ns() - g_case_t0) / 1e9);
    return 0;
}

/* ---- socket only: a recorded hello is no use twice ---------------------------------- */

/* A relay between one connector and the real listener that keeps a copy of
 * the connector's first 80 bytes (its hello and counted proof). */
typedef struct relay {
    int lfd, stop_fd;
    struct sockaddr_in to;
    unsigned char first[80];
    size_t nfirst;
    pthread_t th;
} relay_t;

static void *relay_main(void *arg)
{
    relay_t *r = arg;
    struct pollfd a = {.fd = r->lfd, .events = POLLIN}, stop = {.fd = r->stop_fd, .events = POLLIN};
    struct pollfd w[2] = {a, stop};
    if (poll(w, 2, RUN_MS) <= 0 || !(w[0].revents & POLLIN)) return NULL;
    int cfd = accept(r->lfd, NULL, NULL);
    if (cfd < 0) return NULL;
    int sfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sfd < 0 || connect(sfd, (struct sockaddr *)&r->to, sizeof r->to) != 0) {
        close(cfd);
        if (sfd >= 0) close(sfd);
        return NULL;
    }
    for (;;) {
        struct pollfd f[3] = {{.fd = cfd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}, stop};
        if (poll(f, 3, RUN_MS) <= 0 || f[2].revents) break;
        unsigned char buf[65536];
        int done = 0;
        for (int k = 0; k < 2; k++) {
            if (!f[k].revents) continue;
            ssize_t n = recv(f[k].fd, buf, sizeof buf, 0);
            if (n <= 0) {
                done = 1;
                break;
            }
            if (k == 0 && r->nfirst < sizeof r->first) {
                size_t m = (size_t)n < sizeof r->first - r->nfirst ? (size_t)n : sizeof r->first - r->nfirst;
                memcpy(r->first + r->nfirst, buf, m);
                r->nfirst += m;
            }
            if (write_full(f[1 - k].fd, buf, (size_t)n)) done = 1;
        }
        if (done) break;
    }
    close(cfd);
    close(sfd);
    return NULL;
}

/* Sends bytes to a new connection to port and progresses the nodes until
 * the listener closes it; returns the bytes it answered (-1: not closed within 3 s). */
static long replay_to(node_t *nodes, int n, unsigned port, const unsigned char *b, size_t len)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(write_full(fd, b, len), 0);
    long got = 0;
    uint64_t until = oobx__deadline(3000);
    for (;;) {
        progress_all(nodes, n);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10) == 1) {
            unsigned char in[512];
            ssize_t k = recv(fd, in, sizeof in, MSG_DONTWAIT);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) break;
            if (k > 0) got += k;
        }
        if (oobx__now_ns() > until) {
            got = -1;
            break;
        }
    }
    close(fd);
    return got;
}

static int rank1_failed_at_first(node_t *nodes, int n, void *arg)
{
    (void)n;
    (void)arg;
    return nodes[0].failed[1];
}

/* A peer that sends its last words and leaves with our bytes unread resets
 * the link (a rank that gives up says why before it exits). A send of ours
 * that meets the reset before we read must not lose those words: they are
 * delivered, then the peer fails, and the send completes with the failure. */
static void test_socket_last_words_before_reset(void **state)
{
    (void)state;
    node_t *nodes = nodes_new(2);
    connect_plain(nodes, 2);
    static const size_t one[1] = {16};
    exchange(nodes, 2, 0, 1, one, 1); /* the link, both ways */
    exchange(nodes, 2, 1, 0, one, 1);
    /* bytes rank 1 never reads */
    unsigned char unread[4096];
    memset(unread, 0x5a, sizeof(unread));
    oobx_tp_req_t uq = {0};
    oobx_msg_hdr_t uh = {.ctx = next_ctx(), .tag = 1, .len = sizeof(unread), .src = 0, .kind = OOBX_MSG_P2P};
    assert_int_equal(ops->send(nodes[0].tp, 1, &uh, unread, &uq), 0);
    assert_int_equal(run_until(nodes, 1, req_done, &uq, RUN_MS), 0); /* rank 0 alone: written, not read */
    /* rank 1's last words, written at once, then it leaves: a reset */
    unsigned char words[WORDS_BYTES];
    oobx_tp_req_t wq;
    uint64_t ctx = send_words(nodes, 1, 0, words, &wq);
    assert_int_equal(wq.done, 1);
    node_destroy(&nodes[1]);
    /* rank 0 sends before it reads again: the reset answers that send */
    unsigned char eight[8] = {0};
    oobx_tp_req_t sq = {.status = 12345};
    oobx_msg_hdr_t sh = {.ctx = next_ctx(), .tag = 2, .len = sizeof(eight), .src = 0, .kind = OOBX_MSG_P2P};
    int rc = ops->send(nodes[0].tp, 1, &sh, eight, &sq);
    if (rc != 0 && rc != OOBX_ERR_REMOTE) fail_msg("send after the reset: %s", oobx_error_name(rc));
    if (run_until(nodes, 1, rank1_failed_at_first, NULL, 5000)) fail_msg("rank 1's reset not seen within 5 s");
    check_child_msg(&nodes[0], ctx, 7, sizeof(words), 1);
    assert_int_equal(nodes[0].fail_status[1], OOBX_ERR_REMOTE);
    assert_non_null(strstr(nodes[0].fail_what[1], "rank 1"));
    if (rc == 0) {
        assert_int_equal(sq.done, 1);
        assert_int_equal(sq.status, OOBX_ERR_REMOTE);
    }
    nodes_free(nodes, 2);
}

/* The same over sockets with the peer busy through the whole destroy (the
 * other transports' handshakes need both sides): the leaving rank has the
 * lower rank, so that its own link, opened by its last words, would win by
 * the usual rule and wait for an answer that does not come in time; it
 * answers the peer's link itself instead and leaves the words there. */
static void test_socket_last_words_to_a_busy_peer(void **state)
{
    (void)state;
    /* three ranks: rank 2 connects to its successor, rank 0, at once (of two, rank 1 waits for rank 0) */
    node_t *nodes = nodes_new(3);
    connect_plain(nodes, 3);
    ring_call(&nodes[2], -1, 0);
    run_for(&nodes[2], 1, 50); /* its hello goes out; rank 0 never progressed */
    unsigned char words[WORDS_BYTES];
    oobx_tp_req_t wq;
    uint64_t ctx = send_words(nodes, 0, 2, words, &wq);
    double ms = node_destroy(&nodes[0]); /* rank 2 does nothing meanwhile */
    print_message("rank 0 destroyed in %.1f ms\n", ms);
    assert_true(ms < DESTROY_MAX_MS);
    assert_string_equal(nodes[0].bad, "");
    words_wait_t ww = {{ctx, 1}, 0};
    if (run_until(&nodes[2], 1, got_words_or_end, &ww, 5000) != 0)
        fail_msg("rank 2: neither rank 0's words nor its end within 5 s");
    check_child_msg(&nodes[2], ctx, 7, sizeof(words), 0);
    run_for(&nodes[2], 1, 100); /* and then its end, told once */
    assert_int_equal(nodes[2].failed[0], 1);
    node_fini(&nodes[1]);
    node_fini(&nodes[2]);
    node_free_msgs(&nodes[0]);
    free(nodes);
}

/* Socket peer connections prove the secret without a challenge (the
 * acceptor's nonce is in its address): rank 0 reaches rank 1 through a relay
 * that records its hello and proof; sent again to rank 1's listener, the
 * recording is refused without a word, and so is the recording with its
 * count raised (the mac covers it); the job's connections keep working. */
static void test_socket_replayed_proof(void **state)
{
    (void)state;
    node_t *nodes = nodes_new(3);
    unsigned char blob[OOBX_ADDR_MAX];
    size_t len = blob_of(&nodes[1], blob);
    assert_true(len >= 40);
    assert_int_equal(blob[0] | blob[1] << 8, AF_INET);
    unsigned port1 = (unsigned)(blob[2] | blob[3] << 8);
    relay_t r;
    memset(&r, 0, sizeof r);
    r.to.sin_family = AF_INET;
    r.to.sin_port = htons((uint16_t)port1);
    memcpy(&r.to.sin_addr, blob + 4, 4);
    r.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in la = {.sin_family = AF_INET};
    la.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof la;
    assert_int_equal(bind(r.lfd, (struct sockaddr *)&la, sizeof la), 0);
    assert_int_equal(listen(r.lfd, 4), 0);
    assert_int_equal(getsockname(r.lfd, (struct sockaddr *)&la, &sl), 0);
    int sp[2];
    assert_int_equal(pipe(sp), 0);
    r.stop_fd = sp[0];
    assert_int_equal(pthread_create(&r.th, NULL, relay_main, &r), 0);
    /* rank 0 knows rank 1 at the relay (same instance nonce, another port) */
    unsigned char via[OOBX_ADDR_MAX];
    memcpy(via, blob, len);
    uint16_t rp = ntohs(la.sin_port);
    via[2] = (unsigned char)rp, via[3] = (unsigned char)(rp >> 8);
    assert_int_equal(ops->set_peer(nodes[0].tp, 1, via, len), 0);
    introduce(&nodes[1], &nodes[0]);
    introduce(&nodes[2], &nodes[1]);
    introduce(&nodes[1], &nodes[2]);
    const size_t sizes[] = {8, 70000};
    exchange(nodes, 3, 0, 1, sizes, 2);
    exchange(nodes, 3, 1, 0, sizes, 2);
    assert_int_equal(r.nfirst, 80);
    /* the recording: hello type 3 from rank 0 */
    assert_int_equal(r.first[6], 3);
    assert_int_equal(r.first[16], 0);
    long got = replay_to(nodes, 3, port1, r.first, 80);
    print_message("replayed hello and proof: listener answered %ld bytes before closing\n", got);
    if (got != 0) fail_msg("a replayed proof got %ld bytes back (want a close without a word)", got);
    unsigned char bumped[80];
    memcpy(bumped, r.first, 80);
    bumped[32] ^= 0x40; /* the count, raised */
    got = replay_to(nodes, 3, port1, bumped, 80);
    if (got != 0) fail_msg("a replayed proof with its count raised got %ld bytes back", got);
    /* nothing failed: both links carry on */
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            if (nodes[i].failed[j]) fail_msg("rank %d saw rank %d fail: %s", i, j, nodes[i].fail_what[j]);
    exchange(nodes, 3, 0, 1, sizes, 2);
    exchange(nodes, 3, 2, 1, sizes, 2);
    exchange(nodes, 3, 1, 2, sizes, 2);
    nodes_free(nodes, 3);
    assert_int_equal(write_full(sp[1], "x", 1), 0);
    pthread_join(r.th, NULL);
    close(r.lfd);
    close(sp[0]);
    close(sp[1]);
}


/* ---- buffers given back (release) -------------------------------------------------- */

/* Sends to a child that is asleep, so that each is out or queued (a pull
 * offered, a rendezvous announced, a message behind them); their buffers are
 * given back and written over; the child wakes and echoes every message:
 * each comes back with the bytes it had when it was given back. A transport
 * that still reads a buffer after release (or pulls it from the sender's
 * memory) echoes the scribble. */
static void test_release_send(void **state)
{
    (void)state;
    proc_t pr;
    node_t *n = calloc(1, sizeof(*n));
    pair_with_child(n, &pr, 1);
    /* a rendezvous first (verbs: its RTS goes at once), ring-sized ones, small ones */
    const size_t sizes[] = {PICK(9u << 20, 9u << 20, 24u << 20), (1u << 20) + 5, 2u << 20, 4096, 300000, 100};
    const int count = (int)OOBX_ARRAY_SIZE(sizes);
    uint64_t ctx = next_ctx();
    unsigned char *bufs[OOBX_ARRAY_SIZE(sizes)];
    oobx_tp_req_t reqs[OOBX_ARRAY_SIZE(sizes)];
    /* the link up and a first pull done (later pulls go without waiting for their answers) */
    {
        uint64_t c0 = next_ctx();
        const size_t warm = 1u << 20;
        unsigned char *wb = malloc(warm);
        fill(wb, warm, seed_of(c0, 0));
        oobx_msg_hdr_t h = {.ctx = c0, .tag = 0, .len = warm, .src = 0, .kind = OOBX_MSG_P2P};
        oobx_tp_req_t wr;
        assert_int_equal(ops->send(n->tp, 1, &h, wb, &wr), 0);
        ctxwant_t w0 = {.ctx = c0, .count = 1};
        if (run_until(n, 1, got_ctx, &w0, RUN_MS) || !wr.done) fail_msg("no echo of the first message");
        check_child_msg(n, c0, 0, warm, 1);
        free(wb);
    }
    cmd_t z = {.op = 'z', .delay_ms = 400};
    proc_cmd(&pr, &z);
    for (int i = 0; i < count; i++) {
        bufs[i] = malloc(sizes[i]);
        fill(bufs[i], sizes[i], seed_of(ctx, (uint64_t)i));
        oobx_msg_hdr_t h = {.ctx = ctx, .tag = (uint64_t)i, .len = sizes[i], .src = 0, .kind = OOBX_MSG_P2P};
        assert_int_equal(ops->send(n->tp, 1, &h, bufs[i], &reqs[i]), 0);
    }
    run_for(n, 1, 50); /* offers and announcements go out; the child reads none */
    int released = 0;
    for (int i = 0; i < count; i++)
        if (!reqs[i].done) {
            ops->release(n->tp, bufs[i], sizes[i]);
            released++;
        }
    for (int i = 0; i < count; i++) memset(bufs[i], 0xa5, sizes[i]);
    if (released == 0) fail_msg("none of %d sends was still out after 50 ms to a rank asleep", count);
    ctxwant_t w = {.ctx = ctx, .count = count};
    if (run_until(n, 1, got_ctx, &w, RUN_MS))
        fail_msg("%d of %d echoes back from the other process", count_ctx(n, ctx), count);
    for (int i = 0; i < count; i++) {
        check_child_msg(n, ctx, (uint64_t)i, sizes[i], 1);
        assert_true(reqs[i].done);
        assert_int_equal(reqs[i].status, 0);
        free(bufs[i]);
    }
    check_bad(n, 1);
    assert_int_equal(proc_quit(&pr), 0);
    run_for(n, 1, 300);
    node_fini(n);
    free(n);
}

/* The message of ctx at n: 0 not begun, 1 begun, 2 ended. */
static int msg_state(const node_t *n, uint64_t ctx)
{
    for (int m = 0; m < n->nmsgs; m++)
        if (n->msgs[m].hdr.ctx == ctx) return n->msgs[m].ended ? 2 : 1;
    return 0;
}

static int ended_or_failed(node_t *nodes, int n, void *arg)
{
    (void)n;
    return nodes[0].failed[1] || msg_state(&nodes[0], *(const uint64_t *)arg) == 2;
}

/* A large message from another process given back at the receiver while it
 * comes in: nothing is written into the buffer after release, the message
 * still ends (msg_end), and the link carries the next message. (The pull of
 * the socket transport happens inside one progress call, so it is off here:
 * the payload comes over the socket.) */
static void test_release_recv(void **state)
{
    (void)state;
    const size_t big = PICK(32u << 20, 64u << 20, 256u << 20);
    char *cma = getenv("OOBX_CMA_MIN") ? strdup(getenv("OOBX_CMA_MIN")) : NULL;
    setenv("OOBX_CMA_MIN", "0", 1);
    proc_t pr;
    node_t *n = calloc(1, sizeof(*n));
    pair_with_child(n, &pr, 0);
    if (cma) setenv("OOBX_CMA_MIN", cma, 1);
    else unsetenv("OOBX_CMA_MIN");
    free(cma);
    int caught = 0;
    for (int attempt = 0; attempt < 5 && !caught; attempt++) {
        uint64_t ctx = next_ctx();
        proc_send(&pr, 0, ctx, 1, big, 0);
        uint64_t deadline = oobx__deadline(RUN_MS);
        int st;
        while ((st = msg_state(n, ctx)) == 0 && oobx__now_ns() < deadline) {
            assert_int_equal(ops->progress(n->tp), 0);
            check_bad(n, 1);
        }
        if (st == 0) fail_msg("the %zu-byte message from the other process was never begun", big);
        if (st == 1) {
            caught = 1;
            rx_msg_t *m = NULL;
            for (int k = 0; k < n->nmsgs; k++)
                if (n->msgs[k].hdr.ctx == ctx) m = &n->msgs[k];
            unsigned char *buf = m->buf;
            ops->release(n->tp, buf, big);
            memset(buf, 0x5a, big);
            if (run_until(n, 1, ended_or_failed, &ctx, RUN_MS)) fail_msg("the given-back message never ended");
            if (n->failed[1]) fail_msg("the link failed: %s", n->fail_what[1]);
            for (size_t i = 0; i < big; i++)
                if (buf[i] != 0x5a) fail_msg("byte %zu of the given-back buffer was written after release", i);
        } else if (run_until(n, 1, ended_or_failed, &ctx, RUN_MS)) {
            fail_msg("the message never ended");
        }
        /* the link goes on */
        uint64_t c2 = next_ctx();
        proc_send(&pr, 0, c2, 2, 70001, 0);
        ctxwant_t w = {.ctx = c2, .count = 1};
        if (run_until(n, 1, got_ctx, &w, RUN_MS)) fail_msg("no message after the given-back one");
        check_child_msg(n, c2, 2, 70001, 1);
    }
    if (!caught) fail_msg("a %zu-byte message was never seen in flight in 5 tries", big);
    check_bad(n, 1);
    assert_int_equal(proc_quit(&pr), 0);
    run_for(n, 1, 300);
    node_fini(n);
    free(n);
}

#define CASE(f) cmocka_unit_test_setup_teardown(f, case_setup, case_teardown)

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    /* a peer started by proc_start: rank,nranks,echo,command fd,reply fd */
    const char *child = getenv("OOBX_TEST_CHILD");
    int crank = -1, cnranks = 0, cecho = 0, crfd = -1, cwfd = -1;
    if (child && sscanf(child, "%d,%d,%d,%d,%d", &crank, &cnranks, &cecho, &crfd, &cwfd) == 5) {
        in_child = 1;
        unsetenv("OOBX_TEST_CHILD");
    }
    tp_name = env_or("OOBX_TEST_TP", "socket");
    scale = !strcmp(env_or("OOBX_TEST_SCALE", "normal"), "small") ? 0
            : !strcmp(env_or("OOBX_TEST_SCALE", "normal"), "long") ? 2
                                                                    : 1;
    /* loopback only, unless the caller chose devices */
    setenv("UCX_NET_DEVICES", "lo", 0);
    oobx_settings_t s;
    if (node_settings(&s)) {
        fprintf(stderr, "test_tp_contract: settings: %s\n", oobx_last_error());
        return 1;
    }
    char why[1024] = "";
    int rc = oobx__tp_lookup(tp_name, &s, &ops, why, sizeof(why));
    if (rc) {
        fprintf(stderr, "test_tp_contract: OOBX_TEST_TP=%s: %s\n", tp_name, why);
        return 1;
    }
    if (in_child) {
        child_main(crank, cnranks, cecho, crfd, cwfd);
        return 31;
    }
    if (getenv("OOBX_TEST_FILTER")) cmocka_set_test_filter(getenv("OOBX_TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        CASE(test_ops_table),
        CASE(test_describe),
        CASE(test_one_rank),
        CASE(test_address_set_peer),
        CASE(test_self_rules),
        CASE(test_headers),
        CASE(test_sizes),
        CASE(test_order_per_pair),
        CASE(test_queued_both_ways),
        CASE(test_crossed_first_sends),
        CASE(test_ring_links),
        CASE(test_many_peers),
        CASE(test_other_process),
        CASE(test_peer_killed),
        CASE(test_peer_killed_sender_only),
        CASE(test_destroy_in_flight),
        CASE(test_last_words_on_a_fresh_link),
        CASE(test_create_destroy_cycles),
        CASE(test_wake_before_sleep),
        CASE(test_wake_during_sleep),
        CASE(test_idle_sleep),
        CASE(test_arrival_wakes_sleep),
        CASE(test_polled_then_sleep),
        CASE(test_release_send),
        CASE(test_release_recv),
    };
    char group[64];
    snprintf(group, sizeof(group), "transport contract: %s", tp_name);
    if (strcmp(tp_name, "socket") != 0) return cmocka_run_group_tests_name(group, tests, NULL, NULL);
    /* the socket transport's own handshake, its reads before a reset, its last words to a busy peer */
    struct CMUnitTest all[OOBX_ARRAY_SIZE(tests) + 3];
    memcpy(all, tests, sizeof(tests));
    all[OOBX_ARRAY_SIZE(tests)] = (struct CMUnitTest)CASE(test_socket_replayed_proof);
    all[OOBX_ARRAY_SIZE(tests) + 1] = (struct CMUnitTest)CASE(test_socket_last_words_before_reset);
    all[OOBX_ARRAY_SIZE(tests) + 2] = (struct CMUnitTest)CASE(test_socket_last_words_to_a_busy_peer);
    return _cmocka_run_group_tests(group, all, OOBX_ARRAY_SIZE(all), NULL, NULL);
}
