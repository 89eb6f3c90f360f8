/* What is particular to the UCX transport: the ring link modes of
 * OOBX_UCX_RING (put, tag, auto) and that setting itself; the order of
 * messages by their sequence numbers, and a peer that breaks it (a number
 * out of its window or twice, a message longer than any). Instances in one
 * process joined by a fake core sink. Run under several UCX_TLS settings by
 * `make check-ucx-unit`, next to the transport contract
 * (tests/contract/test_tp_contract.c with OOBX_TEST_TP=ucx), which holds what
 * every transport must do (addresses, messages, failures, destroy, waiting). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tp_module.h"
#include "transport.h"
#include "ucx_int.h"
#include "ucx_wire.h"
#include "util.h"

extern const oobx_tp_ops_t oobx_ucx_ops;

#define NMAX 4

typedef struct rx_msg {
    oobx_msg_hdr_t hdr;
    unsigned char *buf;
    int ended;
} rx_msg_t;

typedef struct node {
    int rank;
    oobx_tp_t *tp;
    oobx_settings_t set;
    oobx_log_t log;
    rx_msg_t msgs[512];
    int nbegun, nended;
    int failed[NMAX];
    int fail_status[NMAX];
    char fail_what[NMAX][256];
} node_t;

static void *sink_begin(void *core, const oobx_msg_hdr_t *hdr, void **cookie)
{
    node_t *n = core;
    assert_true(n->nbegun < 512);
    rx_msg_t *m = &n->msgs[n->nbegun++];
    m->hdr = *hdr;
    m->buf = malloc(hdr->len ? hdr->len : 1);
    assert_non_null(m->buf);
    *cookie = m;
    return m->buf;
}

static void sink_end(void *core, void *cookie)
{
    node_t *n = core;
    rx_msg_t *m = cookie;
    /* ends come in the order of the begins */
    assert_ptr_equal(m, &n->msgs[n->nended]);
    m->ended = 1;
    n->nended++;
}

static void sink_failed(void *core, int peer, int status, const char *what)
{
    node_t *n = core;
    assert_true(peer >= 0 && peer < NMAX);
    n->failed[peer]++;
    n->fail_status[peer] = status;
    snprintf(n->fail_what[peer], sizeof(n->fail_what[peer]), "%s", what);
    fprintf(stderr, "  [rank %d sees rank %d fail: %s]\n", n->rank, peer, what);
}

static const char *env_or(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v && *v ? v : def;
}

static void node_init(node_t *n, int rank, int nranks, const char *ring_mode)
{
    memset(n, 0, sizeof(*n));
    n->rank = rank;
    setenv("OOBX_UCX_RING", ring_mode, 1); /* the transport reads its own setting at create */
    n->set.ring_slots = atoi(env_or("OOBX_RING_SLOTS", "8"));
    n->set.ring_slot_bytes = (size_t)atol(env_or("OOBX_RING_SLOT_BYTES", "65536"));
    n->set.timeout_ms = 20000;
    n->log.level = atoi(env_or("OOBX_LOG_LEVEL", "1"));
    n->log.fp = stderr;
    n->log.api = &oobx__core_api;
    snprintf(n->log.prefix, sizeof(n->log.prefix), "test rank %d", rank);
    oobx_tp_params_t p = {
        .rank = rank,
        .nranks = nranks,
        .magic = 0x1234,
        .settings = &n->set,
        .log = &n->log,
        .sink = {.core = n, .msg_begin = sink_begin, .msg_end = sink_end, .peer_failed = sink_failed},
        .wake_fd = -1,
        .core = &oobx__core_api,
    };
    int rc = oobx_ucx_ops.create(&p, &n->tp);
    if (rc) fail_msg("create: %d (%s)", rc, oobx_last_error());
}

static void node_fini(node_t *n)
{
    oobx_ucx_ops.destroy(n->tp);
    for (int i = 0; i < n->nbegun; i++) free(n->msgs[i].buf);
}

static void connect_all(node_t *nodes, int n)
{
    for (int i = 0; i < n; i++) {
        unsigned char blob[OOBX_ADDR_MAX];
        size_t len = sizeof(blob);
        assert_int_equal(oobx_ucx_ops.address(nodes[i].tp, blob, &len), 0);
        for (int j = 0; j < n; j++)
            assert_int_equal(oobx_ucx_ops.set_peer(nodes[j].tp, i, blob, len), 0);
    }
    for (int i = 0; i < n; i++)
        assert_int_equal(oobx_ucx_ops.ring(nodes[i].tp, (i + n - 1) % n, (i + 1) % n), 0);
}

/* Progresses every node, sleeping on their fds, until done() or the deadline. */
static int run_until(node_t *nodes, int n, int (*done)(node_t *, int, void *), void *arg, int ms)
{
    uint64_t deadline = oobx__deadline(ms);
    while (!done(nodes, n, arg)) {
        if (oobx__now_ns() > deadline) return -1;
        struct pollfd fds[NMAX * 4];
        int nfds = 0, busy = 0, timeout = 100;
        for (int i = 0; i < n; i++) assert_int_equal(oobx_ucx_ops.progress(nodes[i].tp), 0);
        if (done(nodes, n, arg)) break;
        for (int i = 0; i < n; i++) {
            int k = 0;
            if (oobx_ucx_ops.wait_prepare(nodes[i].tp, fds + nfds, 4, &k, &timeout)) busy = 1;
            nfds += k;
        }
        if (!busy) poll(fds, (nfds_t)nfds, timeout);
    }
    return 0;
}

static void fill(unsigned char *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++) p[i] = (unsigned char)(seed * 31u + i * 7u + (i >> 10));
}

typedef struct want {
    int node;
    int count;
    oobx_tp_req_t *reqs;
    int nreqs;
} want_t;

static int got_all(node_t *nodes, int n, void *arg)
{
    (void)n;
    want_t *w = arg;
    for (int i = 0; i < w->nreqs; i++)
        if (!w->reqs[i].done) return 0;
    return nodes[w->node].nended >= w->count;
}

/* Sends sizes[] from `from` to `to` and checks content, order and headers. */
static void exchange(node_t *nodes, int n, int from, int to, const size_t *sizes, int count)
{
    unsigned char **bufs = calloc((size_t)count, sizeof(*bufs));
    oobx_tp_req_t *reqs = calloc((size_t)count, sizeof(*reqs));
    int base = nodes[to].nended;
    for (int i = 0; i < count; i++) {
        bufs[i] = malloc(sizes[i] ? sizes[i] : 1);
        fill(bufs[i], sizes[i], (unsigned)(i + 1));
        oobx_msg_hdr_t h = {.ctx = 77, .tag = (uint64_t)i, .len = sizes[i], .src = from, .kind = OOBX_MSG_P2P};
        assert_int_equal(oobx_ucx_ops.send(nodes[from].tp, to, &h, bufs[i], &reqs[i]), 0);
    }
    want_t w = {.node = to, .count = base + count, .reqs = reqs, .nreqs = count};
    assert_int_equal(run_until(nodes, n, got_all, &w, 30000), 0);
    for (int i = 0; i < count; i++) {
        rx_msg_t *m = &nodes[to].msgs[base + i];
        assert_int_equal(reqs[i].status, 0);
        assert_int_equal(m->hdr.tag, (uint64_t)i);
        assert_int_equal(m->hdr.len, sizes[i]);
        assert_int_equal(m->hdr.src, from);
        assert_int_equal(m->hdr.ctx, 77);
        if (sizes[i]) assert_memory_equal(m->buf, bufs[i], sizes[i]);
        free(bufs[i]);
    }
    free(bufs);
    free(reqs);
}

static const size_t mixed[] = {0, 1, 65536, 4u << 20, 7, 8192, 8193, 100000, 0, 3u << 20, 12345, 1};

/* 1 when rank's sends to its ring successor go through the successor's ring buffer */
static int ring_active(node_t *n)
{
    return ((ucx_tp_t *)n->tp)->rtx.active;
}

/* put: the ring link is used (ucp_put_nbx or a mapped ring); tag: never;
 * auto: as UCX's lanes suggest (printed). */
static void check_ring_mode(node_t *nodes, int n, const char *ring_mode)
{
    for (int i = 0; i < n; i++) {
        int active = ring_active(&nodes[i]);
        if (i == 0) print_message("OOBX_UCX_RING=%s: ring link %s\n", ring_mode, active ? "used" : "not used");
        if (!strcmp(ring_mode, "put")) assert_int_equal(active, 1);
        if (!strcmp(ring_mode, "tag")) assert_int_equal(active, 0);
        assert_int_equal(((ucx_tp_t *)nodes[i].tp)->ring_mode,
                         !strcmp(ring_mode, "put")   ? UCX_RING_PUT
                         : !strcmp(ring_mode, "tag") ? UCX_RING_TAG
                                                     : UCX_RING_AUTO);
    }
}

static void test_pair(const char *ring_mode)
{
    node_t *nodes = calloc(2, sizeof(node_t));
    for (int i = 0; i < 2; i++) node_init(&nodes[i], i, 2, ring_mode);
    connect_all(nodes, 2);
    exchange(nodes, 2, 0, 1, mixed, (int)OOBX_ARRAY_SIZE(mixed));
    exchange(nodes, 2, 1, 0, mixed, (int)OOBX_ARRAY_SIZE(mixed));
    /* many small ones back to back: more than the ring has slots */
    size_t small[100];
    for (int i = 0; i < 100; i++) small[i] = (size_t)(i * 13) % 300;
    exchange(nodes, 2, 0, 1, small, 100);
    check_ring_mode(nodes, 2, ring_mode);
    for (int i = 0; i < 2; i++) node_fini(&nodes[i]);
    free(nodes);
}

static void test_pair_tag(void **state)
{
    (void)state;
    test_pair("tag");
}

static void test_pair_ring(void **state)
{
    (void)state;
    test_pair("put");
}

static void test_pair_auto(void **state)
{
    (void)state;
    test_pair("auto");
}

static void test_three_ring(void **state)
{
    (void)state;
    node_t *nodes = calloc(3, sizeof(node_t));
    for (int i = 0; i < 3; i++) node_init(&nodes[i], i, 3, "put");
    connect_all(nodes, 3);
    for (int i = 0; i < 3; i++) {
        exchange(nodes, 3, i, (i + 1) % 3, mixed, (int)OOBX_ARRAY_SIZE(mixed));
        exchange(nodes, 3, i, (i + 2) % 3, mixed, 4);
    }
    /* the path is chosen at the first send after the successor's ring set-up
     * came in: rank 0's first sends went before it */
    for (int i = 0; i < 3; i++) exchange(nodes, 3, i, (i + 1) % 3, mixed, 4);
    check_ring_mode(nodes, 3, "put");
    for (int i = 0; i < 3; i++) node_fini(&nodes[i]);
    free(nodes);
}

/* OOBX_UCX_RING is the transport's own setting: in its table, read at
 * create, and a value it does not know is refused naming it. */
/* ---- a peer that breaks the order of its messages ---- */

/* Sends a message from node `from` to node `to` straight through UCX, with
 * the sequence number seq (what a broken or hostile peer could send). The
 * request is returned: it may need the receiver's progress. */
static void *raw_send(node_t *nodes, int from, int to, int type, uint32_t seq, const void *buf, size_t len)
{
    ucx_tp_t *tp = (ucx_tp_t *)nodes[from].tp;
    ucp_ep_h ep = ucx_peer_ep(tp, to);
    assert_non_null(ep);
    ucp_request_param_t prm = {.op_attr_mask = 0};
    ucs_status_ptr_t req = ucp_tag_send_nbx(ep, buf, len, ucx_tag(type, from, seq), &prm);
    assert_false(UCS_PTR_IS_ERR(req));
    return req;
}

static void raw_done(node_t *nodes, int from, void *req)
{
    if (!req) return;
    ucx_tp_t *tp = (ucx_tp_t *)nodes[from].tp;
    if (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_request_cancel(tp->worker, req);
    ucp_request_free(req);
}

/* An EAGER message of 8 payload bytes, user tag utag. */
static size_t eager_msg(unsigned char *out, int src, uint64_t utag)
{
    oobx_msg_hdr_t h = {.ctx = 7, .tag = utag, .len = 8, .src = src, .kind = 1};
    memcpy(out, &h, sizeof(h));
    memcpy(out + sizeof(h), "12345678", 8);
    return sizeof(h) + 8;
}

static int begun_two(node_t *nodes, int n, void *arg)
{
    (void)n;
    (void)arg;
    return nodes[0].nended >= 2 || nodes[0].failed[1];
}

static int saw_fail(node_t *nodes, int n, void *arg)
{
    (void)n;
    (void)arg;
    return nodes[0].failed[1] > 0;
}

/* Messages whose numbers come out of order (as a rendezvous message does
 * behind a later small one) begin in the sender's order. */
static void test_sequence_order(void **state)
{
    (void)state;
    node_t *nodes = calloc(2, sizeof(node_t));
    for (int i = 0; i < 2; i++) node_init(&nodes[i], i, 2, "tag");
    connect_all(nodes, 2);
    ucx_peer_t *p = &((ucx_tp_t *)nodes[1].tp)->peers[0];
    uint32_t seq = p->tx_seq;
    p->tx_seq += 2;
    unsigned char a[64], b[64];
    size_t la = eager_msg(a, 1, 101), lb = eager_msg(b, 1, 102);
    void *r2 = raw_send(nodes, 1, 0, UCX_T_EAGER, seq + 1, b, lb);
    void *r1 = raw_send(nodes, 1, 0, UCX_T_EAGER, seq, a, la);
    assert_int_equal(run_until(nodes, 2, begun_two, NULL, 10000), 0);
    assert_int_equal(nodes[0].failed[1], 0);
    assert_int_equal(nodes[0].nended, 2);
    assert_int_equal(nodes[0].msgs[0].hdr.tag, 101);
    assert_int_equal(nodes[0].msgs[1].hdr.tag, 102);
    /* and the link goes on */
    size_t sizes[] = {8, 100, 20000};
    exchange(nodes, 2, 1, 0, sizes, 3);
    raw_done(nodes, 1, r1);
    raw_done(nodes, 1, r2);
    for (int i = 0; i < 2; i++) node_fini(&nodes[i]);
    free(nodes);
}

/* One bad message of a sender; rank 0 must fail rank 1 naming why. */
static void bad_message(int type, uint32_t ahead, size_t len, int dup, const char *expect)
{
    node_t *nodes = calloc(2, sizeof(node_t));
    for (int i = 0; i < 2; i++) node_init(&nodes[i], i, 2, "tag");
    connect_all(nodes, 2);
    ucx_peer_t *p = &((ucx_tp_t *)nodes[1].tp)->peers[0];
    unsigned char *buf = calloc(1, len > 64 ? len : 64);
    size_t l = type == UCX_T_EAGER && len == 0 ? eager_msg(buf, 1, 5) : len;
    void *reqs[3] = {NULL, NULL, NULL};
    if (dup) {
        /* numbers 1 and 1 again before 0 */
        reqs[0] = raw_send(nodes, 1, 0, type, p->tx_seq + 1, buf, l);
        reqs[1] = raw_send(nodes, 1, 0, type, p->tx_seq + 1, buf, l);
    } else {
        reqs[0] = raw_send(nodes, 1, 0, type, p->tx_seq + ahead, buf, l);
    }
    assert_int_equal(run_until(nodes, 2, saw_fail, NULL, 10000), 0);
    assert_int_equal(nodes[0].fail_status[1], OOBX_ERR_PROTOCOL);
    print_message("%s\n", nodes[0].fail_what[1]);
    assert_non_null(strstr(nodes[0].fail_what[1], "rank 1"));
    assert_non_null(strstr(nodes[0].fail_what[1], expect));
    assert_int_equal(nodes[0].nbegun, 0);
    for (int i = 0; i < 3; i++) raw_done(nodes, 1, reqs[i]);
    free(buf);
    for (int i = 0; i < 2; i++) node_fini(&nodes[i]);
    free(nodes);
}

static void test_sequence_out_of_window(void **state)
{
    (void)state;
    bad_message(UCX_T_EAGER, 100000, 0, 0, "message number");
}

static void test_sequence_twice(void **state)
{
    (void)state;
    bad_message(UCX_T_EAGER, 0, 0, 1, "twice");
}

static void test_message_too_long(void **state)
{
    (void)state;
    /* longer than any message of the protocol: more than a posted receive holds */
    bad_message(UCX_T_CREDIT, 0, ucx_msg_max() + 100, 0, "longer than the protocol allows");
}

static void test_ring_setting(void **state)
{
    (void)state;
    const oobx_setting_desc_t *d = oobx_ucx_ops.settings;
    while (d->name && strcmp(d->name, "OOBX_UCX_RING")) d++;
    assert_non_null(d->name);
    assert_string_equal(d->def, "auto");
    node_t *n = calloc(1, sizeof(node_t));
    setenv("OOBX_UCX_RING", "sideways", 1);
    n->set.timeout_ms = 20000;
    n->log.level = OOBX_LOG_NONE;
    n->log.fp = stderr;
    n->log.api = &oobx__core_api;
    oobx_tp_params_t p = {
        .rank = 0,
        .nranks = 2,
        .magic = 1,
        .settings = &n->set,
        .log = &n->log,
        .sink = {.core = n, .msg_begin = sink_begin, .msg_end = sink_end, .peer_failed = sink_failed},
        .wake_fd = -1,
        .core = &oobx__core_api,
    };
    oobx_tp_t *tp = NULL;
    assert_int_equal(oobx_ucx_ops.create(&p, &tp), OOBX_ERR_INVALID);
    assert_null(tp);
    print_message("%s\n", oobx_last_error());
    assert_non_null(strstr(oobx_last_error(), "OOBX_UCX_RING"));
    assert_non_null(strstr(oobx_last_error(), "sideways"));
    unsetenv("OOBX_UCX_RING");
    free(n);
}

/* The shared memory of UCX's own transports that this process maps now:
 * the largest posix segment, and the bytes of sysv segments. */
static void ucx_shm_maps(size_t *posix_max, size_t *sysv_total)
{
    *posix_max = *sysv_total = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        unsigned long a, b;
        char path[300] = "";
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %299[^\n]", &a, &b, path) < 2) continue;
        size_t len = (size_t)(b - a);
        if (strstr(path, "/ucx_shm_posix_") && len > *posix_max) *posix_max = len;
        if (!strncmp(path, "/SYSV", 5)) *sysv_total += len;
    }
    fclose(f);
}

/* UCX's shared-memory receive pools: 64 buffers at a time, not UCX's 512
 * (4 MiB of /dev/shm each), unless the user sized them; and no sysv beside
 * posix unless the user chose UCX_TLS. */
static void test_shm_pools_small(void **state)
{
    (void)state;
    int sized = ucx_mm_pools_sized_by_user();
    size_t posix0, sysv0, posix1, sysv1;
    ucx_shm_maps(&posix0, &sysv0);
    node_t *n = malloc(sizeof(node_t));
    assert_non_null(n);
    node_init(n, 0, 1, "auto");
    ucx_shm_maps(&posix1, &sysv1);
    print_message("UCX_TLS=%s: largest posix segment %zu KiB, sysv %zu KiB (before: %zu, %zu)\n",
                  env_or("UCX_TLS", "(unset)"), posix1 / 1024, sysv1 / 1024, posix0 / 1024, sysv0 / 1024);
    if (!getenv("UCX_TLS")) {
        assert_int_equal(sysv1, sysv0);
        assert_true(posix1 > 0); /* posix serves shared memory */
    }
    if (!sized) {
        /* 64 buffers of 8,256 bytes: 528 KiB; UCX's 512: 4,196 KiB */
        assert_true(posix1 < 2u << 20);
        assert_true(sysv1 - sysv0 < 2u << 20);
    }
    node_fini(n);
    free(n);
}

int main(void)
{
    /* loopback only, unless the caller chose devices */
    setenv("UCX_NET_DEVICES", "lo", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_setting),
        cmocka_unit_test(test_pair_tag),
        cmocka_unit_test(test_pair_ring),
        cmocka_unit_test(test_pair_auto),
        cmocka_unit_test(test_three_ring),
        cmocka_unit_test(test_sequence_order),
        cmocka_unit_test(test_sequence_out_of_window),
        cmocka_unit_test(test_sequence_twice),
        cmocka_unit_test(test_message_too_long),
        cmocka_unit_test(test_shm_pools_small),
    };
    return cmocka_run_group_tests_name("ucx transport", tests, NULL, NULL);
}
