/* The UCX transport on its own: instances in one process (and one forked
 * peer) joined by a fake core sink. Run under several UCX_TLS settings by
 * `make check-ucx`. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "tp_module.h"
#include "transport.h"
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
    for (int i = 0; i < 3; i++) node_fini(&nodes[i]);
    free(nodes);
}

static void test_bad_blob(void **state)
{
    (void)state;
    node_t *n = calloc(1, sizeof(node_t));
    node_init(n, 0, 2, "auto");
    unsigned char junk[64] = {1, 2, 3};
    assert_int_equal(oobx_ucx_ops.set_peer(n->tp, 1, junk, sizeof(junk)), OOBX_ERR_PROTOCOL);
    assert_int_equal(oobx_ucx_ops.set_peer(n->tp, 1, junk, 3), OOBX_ERR_PROTOCOL);
    unsigned char blob[OOBX_ADDR_MAX];
    size_t len = sizeof(blob);
    assert_int_equal(oobx_ucx_ops.address(n->tp, blob, &len), 0);
    assert_int_equal(oobx_ucx_ops.set_peer(n->tp, 1, blob, len - 1), OOBX_ERR_PROTOCOL);
    size_t small = 10;
    assert_int_equal(oobx_ucx_ops.address(n->tp, blob, &small), OOBX_ERR_INVALID);
    char name[128];
    oobx_ucx_ops.peer_name(n->tp, 1, name, sizeof(name));
    assert_non_null(strstr(name, "rank 1"));
    node_fini(n);
    free(n);
    oobx_ucx_ops.destroy(NULL);
}

static int saw_failure(node_t *nodes, int n, void *arg)
{
    (void)n;
    (void)arg;
    return nodes[0].failed[1] > 0;
}

static int got_one(node_t *nodes, int n, void *arg)
{
    (void)n;
    (void)arg;
    return nodes[0].nended > 0;
}

/* A forked peer that dies: its death is reported once, as OOBX_ERR_REMOTE. */
static void test_peer_killed(void **state)
{
    (void)state;
    int to_child[2], to_parent[2];
    assert_int_equal(pipe(to_child), 0);
    assert_int_equal(pipe(to_parent), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        node_t *c = calloc(1, sizeof(node_t));
        node_init(c, 1, 2, "auto");
        unsigned char blob[OOBX_ADDR_MAX];
        size_t len = sizeof(blob);
        oobx_ucx_ops.address(c->tp, blob, &len);
        if (write(to_parent[1], &len, sizeof(len)) != sizeof(len) || write(to_parent[1], blob, len) != (ssize_t)len)
            _exit(2);
        if (read(to_child[0], &len, sizeof(len)) != sizeof(len) || read(to_child[0], blob, len) != (ssize_t)len)
            _exit(2);
        oobx_ucx_ops.set_peer(c->tp, 0, blob, len);
        oobx_ucx_ops.ring(c->tp, 0, 0);
        unsigned char hello[100] = "hello";
        oobx_tp_req_t req = {0};
        oobx_msg_hdr_t h = {.ctx = 1, .tag = 5, .len = sizeof(hello), .src = 1, .kind = OOBX_MSG_P2P};
        oobx_ucx_ops.send(c->tp, 0, &h, hello, &req);
        for (;;) {
            oobx_ucx_ops.progress(c->tp);
            usleep(1000);
        }
    }
    node_t *nodes = calloc(1, sizeof(node_t));
    node_init(&nodes[0], 0, 2, "auto");
    unsigned char blob[OOBX_ADDR_MAX];
    size_t len = 0;
    assert_int_equal(read(to_parent[0], &len, sizeof(len)), (ssize_t)sizeof(len));
    assert_true(len <= sizeof(blob));
    assert_int_equal(read(to_parent[0], blob, len), (ssize_t)len);
    assert_int_equal(oobx_ucx_ops.set_peer(nodes[0].tp, 1, blob, len), 0);
    len = sizeof(blob);
    assert_int_equal(oobx_ucx_ops.address(nodes[0].tp, blob, &len), 0);
    assert_int_equal(write(to_child[1], &len, sizeof(len)), (ssize_t)sizeof(len));
    assert_int_equal(write(to_child[1], blob, len), (ssize_t)len);
    assert_int_equal(oobx_ucx_ops.ring(nodes[0].tp, 1, 1), 0);
    assert_int_equal(run_until(nodes, 1, got_one, NULL, 20000), 0);
    assert_string_equal((char *)nodes[0].msgs[0].buf, "hello");

    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    uint64_t t0 = oobx__now_ns();
    /* the death is seen without sending anything (the core may only be waiting) */
    assert_int_equal(run_until(nodes, 1, saw_failure, NULL, 20000), 0);
    fprintf(stderr, "  [failure seen after %.2f s]\n", (double)(oobx__now_ns() - t0) / 1e9);
    assert_int_equal(nodes[0].failed[1], 1);
    assert_int_equal(nodes[0].fail_status[1], OOBX_ERR_REMOTE);
    /* later sends fail at once, leaving the request alone */
    unsigned char data[1 << 16];
    memset(data, 1, sizeof(data));
    oobx_tp_req_t req = {.done = 7, .status = 7};
    oobx_msg_hdr_t h = {.ctx = 1, .tag = 6, .len = sizeof(data), .src = 0, .kind = OOBX_MSG_P2P};
    assert_int_equal(oobx_ucx_ops.send(nodes[0].tp, 1, &h, data, &req), OOBX_ERR_REMOTE);
    assert_int_equal(req.done, 7);
    for (int i = 0; i < 10; i++) assert_int_equal(oobx_ucx_ops.progress(nodes[0].tp), 0);
    assert_int_equal(nodes[0].failed[1], 1);
    node_fini(&nodes[0]);
    free(nodes);
    close(to_child[0]);
    close(to_child[1]);
    close(to_parent[0]);
    close(to_parent[1]);
}

int main(void)
{
    /* loopback only, unless the caller chose devices */
    setenv("UCX_NET_DEVICES", "lo", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_blob),
        cmocka_unit_test(test_pair_tag),
        cmocka_unit_test(test_pair_ring),
        cmocka_unit_test(test_pair_auto),
        cmocka_unit_test(test_three_ring),
        cmocka_unit_test(test_peer_killed),
    };
    return cmocka_run_group_tests_name("ucx transport", tests, NULL, NULL);
}
