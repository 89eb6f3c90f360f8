/* What is particular to the verbs transport, on the emulated device (linked
 * in): device choice (OOBX_NET_DEVICE, the topology of a fabricated machine),
 * its address card, eager and RDMA READ paths, crossed rdma_cm connections,
 * credits, the ring link's counters, the hello's magic. Instances in one
 * process and forked peers, joined by a fake core sink.
 *
 * What every transport must do (messages, order, failures, destroy, waiting)
 * is tests/contract/test_tp_contract.c, run over liboobx-verbs.so with the
 * emulated device preloaded (OOBX_TEST_TP=verbs). */
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
#include <sys/wait.h>
#include <errno.h>
#include <unistd.h>

#include <cmocka.h>

#include "transport.h"
#include "ringbuf.h"
#include "util.h"
#include "verbs.h"

#define NMAX 4
#define MSGS_MAX 24000

static const oobx_tp_ops_t *ops = &oobx_verbs_ops;

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
    rx_msg_t *msgs;
    int nbegun, nended;
    int cursor[NMAX];       /* per sender: its oldest message not ended */
    int failed[NMAX];
    int fail_status[NMAX];
    char fail_what[NMAX][400];
} node_t;

static void *sink_begin(void *core, const oobx_msg_hdr_t *hdr, void **cookie)
{
    node_t *n = core;
    assert_true(n->nbegun < MSGS_MAX);
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
    /* ends come in the order of the begins, per sender */
    int src = m->hdr.src;
    assert_true(src >= 0 && src < NMAX);
    int *c = &n->cursor[src];
    while (*c < n->nbegun && (n->msgs[*c].hdr.src != src || n->msgs[*c].ended)) (*c)++;
    assert_ptr_equal(m, &n->msgs[*c]);
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

static void node_settings(node_t *n, int rank, const char *net_device)
{
    memset(n, 0, sizeof(*n));
    n->rank = rank;
    n->set.ring_slots = 4;
    n->set.ring_slot_bytes = 200; /* chunks that do not divide the messages */
    n->set.timeout_ms = 20000;
    n->set.socket_family = AF_INET;
    snprintf(n->set.socket_ifname, sizeof(n->set.socket_ifname), "lo");
    snprintf(n->set.net_device, sizeof(n->set.net_device), "%s", net_device ? net_device : "");
    n->log.level = atoi(env_or("OOBX_LOG_LEVEL", "1"));
    n->log.fp = stderr;
    n->log.api = &oobx__core_api;
    snprintf(n->log.prefix, sizeof(n->log.prefix), "test rank %d", rank);
}

static int node_try_secret(node_t *n, int rank, int nranks, uint64_t magic, const char *net_device,
                           const unsigned char *secret);
static int node_try(node_t *n, int rank, int nranks, uint64_t magic, const char *net_device)
{
    return node_try_secret(n, rank, nranks, magic, net_device, NULL);
}

static int node_try_secret(node_t *n, int rank, int nranks, uint64_t magic, const char *net_device,
                           const unsigned char *secret)
{
    node_settings(n, rank, net_device);
    n->msgs = calloc(MSGS_MAX, sizeof(*n->msgs));
    assert_non_null(n->msgs);
    oobx_tp_params_t p = {
        .rank = rank,
        .nranks = nranks,
        .magic = magic,
        .secret = secret,
        .settings = &n->set,
        .log = &n->log,
        .sink = {.core = n, .msg_begin = sink_begin, .msg_end = sink_end, .peer_failed = sink_failed},
        .wake_fd = -1,
        .core = &oobx__core_api,
    };
    return ops->create(&p, &n->tp);
}

static void node_init(node_t *n, int rank, int nranks, uint64_t magic)
{
    int rc = node_try(n, rank, nranks, magic, NULL);
    if (rc) fail_msg("create: %d (%s)", rc, oobx_last_error());
}

static void node_fini(node_t *n)
{
    ops->destroy(n->tp);
    n->tp = NULL;
    for (int i = 0; i < n->nbegun; i++) free(n->msgs[i].buf);
    free(n->msgs);
    n->msgs = NULL;
}

static void introduce(node_t *a, node_t *b)
{
    unsigned char blob[OOBX_ADDR_MAX];
    size_t len = sizeof(blob);
    assert_int_equal(ops->address(b->tp, blob, &len), 0);
    assert_int_equal(ops->set_peer(a->tp, b->rank, blob, len), 0);
}

static void connect_all(node_t *nodes, int n, int ring)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i != j) introduce(&nodes[i], &nodes[j]);
    for (int i = 0; i < n; i++)
        assert_int_equal(ops->ring(nodes[i].tp, ring ? (i + n - 1) % n : -1, ring ? (i + 1) % n : -1), 0);
}

/* Progresses every node, sleeping on their fds, until done() or the deadline. */
static int run_until(node_t *nodes, int n, int (*done)(node_t *, int, void *), void *arg, int ms)
{
    uint64_t deadline = oobx__deadline(ms);
    while (!done(nodes, n, arg)) {
        if (oobx__now_ns() > deadline) return -1;
        struct pollfd fds[NMAX * 4];
        int nfds = 0, busy = 0, timeout = 100;
        for (int i = 0; i < n; i++) assert_int_equal(ops->progress(nodes[i].tp), 0);
        if (done(nodes, n, arg)) break;
        for (int i = 0; i < n; i++) {
            int k = 0;
            if (ops->wait_prepare(nodes[i].tp, fds + nfds, 4, &k, &timeout)) busy = 1;
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

typedef struct batch {
    int from, to, count, base;
    unsigned char **bufs;
    const size_t *sizes;
    oobx_tp_req_t *reqs;
} batch_t;

static void batch_send(node_t *nodes, batch_t *b, int from, int to, const size_t *sizes, int count, int tag0)
{
    b->from = from;
    b->to = to;
    b->count = count;
    b->sizes = sizes;
    b->base = tag0;
    b->bufs = calloc((size_t)count, sizeof(*b->bufs));
    b->reqs = calloc((size_t)count, sizeof(*b->reqs));
    for (int i = 0; i < count; i++) {
        b->bufs[i] = malloc(sizes[i] ? sizes[i] : 1);
        fill(b->bufs[i], sizes[i], (unsigned)(tag0 + i + 1));
        oobx_msg_hdr_t h = {.ctx = 77, .tag = (uint64_t)(tag0 + i), .len = sizes[i], .src = nodes[from].rank,
                            .kind = OOBX_MSG_P2P};
        assert_int_equal(ops->send(nodes[from].tp, nodes[to].rank, &h, b->bufs[i], &b->reqs[i]), 0);
    }
}

static int batch_done(const batch_t *b)
{
    for (int i = 0; i < b->count; i++)
        if (!b->reqs[i].done) return 0;
    return 1;
}

/* Checks that node `to` got the batch in order (messages of other senders
 * and batches skipped). Indexes are positions in nodes[]. */
static void batch_check(node_t *nodes, batch_t *b)
{
    node_t *t = &nodes[b->to];
    int k = 0;
    for (int m = 0; m < t->nended && k < b->count; m++) {
        rx_msg_t *r = &t->msgs[m];
        if (r->hdr.src != nodes[b->from].rank || r->hdr.tag < (uint64_t)b->base || r->hdr.tag >= (uint64_t)(b->base + b->count))
            continue;
        assert_int_equal(r->hdr.tag, (uint64_t)(b->base + k));
        assert_int_equal(r->hdr.len, b->sizes[k]);
        assert_int_equal(r->hdr.ctx, 77);
        if (b->sizes[k]) assert_memory_equal(r->buf, b->bufs[k], b->sizes[k]);
        k++;
    }
    assert_int_equal(k, b->count);
    for (int i = 0; i < b->count; i++) {
        assert_int_equal(b->reqs[i].status, 0);
        free(b->bufs[i]);
    }
    free(b->bufs);
    free(b->reqs);
}

typedef struct want {
    batch_t *b;
    int nb;
    int node[NMAX];
    int count[NMAX];
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

/* Sends each batch (already queued) to completion and checks them. */
static void batches_finish_from(node_t *nodes, int n, batch_t *b, int nb, const int *base)
{
    want_t w = {.b = b, .nb = nb};
    for (int i = 0; i < n; i++) w.count[i] = base ? base[i] : nodes[i].nended;
    for (int i = 0; i < nb; i++) w.count[b[i].to] += b[i].count;
    int rc = run_until(nodes, n, got_all, &w, 25000);
    if (rc) {
        for (int i = 0; i < n; i++) {
            fprintf(stderr, "  node %d: %d begun, %d ended, %d wanted\n", i, nodes[i].nbegun, nodes[i].nended,
                    w.count[i]);
            verbs_tp_dump(nodes[i].tp, stderr);
            int per[NMAX] = {0};
            for (int m = 0; m < nodes[i].nended; m++) per[nodes[i].msgs[m].hdr.src]++;
            fprintf(stderr, "  node %d got from ranks: %d %d %d %d\n", i, per[0], per[1], per[2], per[3]);
        }
        for (int i = 0; i < nb; i++) {
            int done = 0;
            for (int k = 0; k < b[i].count; k++) done += b[i].reqs[k].done;
            fprintf(stderr, "  batch %d (%d -> %d): %d of %d sends done\n", i, b[i].from, b[i].to, done, b[i].count);
        }
    }
    assert_int_equal(rc, 0);
    for (int i = 0; i < nb; i++) batch_check(nodes, &b[i]);
}

static void batches_finish(node_t *nodes, int n, batch_t *b, int nb)
{
    batches_finish_from(nodes, n, b, nb, NULL);
}

static void exchange(node_t *nodes, int n, int from, int to, const size_t *sizes, int count)
{
    batch_t b;
    batch_send(nodes, &b, from, to, sizes, count, 1000);
    batches_finish(nodes, n, &b, 1);
}

/* ---- device choice ------------------------------------------------------------------- */

/* Runs fn in a child (the emulation reads its device list once per process). */
static int in_child(const char *devices, int (*fn)(void))
{
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20);
        if (devices) setenv("OOBX_VERBS_EMU_DEVICES", devices, 1);
        _exit(fn());
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static int child_no_device(void)
{
    node_t *n = calloc(1, sizeof(*n));
    int rc = node_try(n, 0, 2, 1, NULL);
    if (rc != OOBX_ERR_UNAVAILABLE) return 1;
    if (!strstr(oobx_last_error(), "no RDMA device")) {
        fprintf(stderr, "  message: %s\n", oobx_last_error());
        return 2;
    }
    fprintf(stderr, "  [no device: %s]\n", oobx_last_error());
    return 0;
}

static void test_no_device(void **state)
{
    (void)state;
    assert_int_equal(in_child("", child_no_device), 0);
}

static int child_two_devices(void)
{
    node_t *n = calloc(1, sizeof(*n));
    unsigned char blob[OOBX_ADDR_MAX];
    size_t len = sizeof(blob);
    /* every local address belongs to emu0: emu0 works, emu1 is refused naming both */
    int rc = node_try(n, 0, 2, 1, "emu0");
    if (rc) {
        fprintf(stderr, "  emu0: %s\n", oobx_last_error());
        return 1;
    }
    if (ops->address(n->tp, blob, &len) || len != sizeof(verbs_blob_t) + 4 ||
        memcmp(blob + sizeof(verbs_blob_t), "emu0", 4) != 0)
        return 2;
    ops->destroy(n->tp);
    free(n->msgs);
    rc = node_try(n, 0, 2, 1, "emu1");
    if (rc != OOBX_ERR_UNAVAILABLE || !strstr(oobx_last_error(), "emu1") || !strstr(oobx_last_error(), "emu0")) {
        fprintf(stderr, "  emu1: %d %s\n", rc, oobx_last_error());
        return 3;
    }
    fprintf(stderr, "  [emu1 while 127.0.0.1 is on emu0: %s]\n", oobx_last_error());
    free(n->msgs);
    /* with 127.0.0.1 on emu1, OOBX_NET_DEVICE=emu1 is used */
    setenv("OOBX_VERBS_EMU_MAP", "emu1=127.0.0.1", 1);
    rc = node_try(n, 0, 2, 1, "emu1");
    len = sizeof(blob);
    if (rc || ops->address(n->tp, blob, &len) || len != sizeof(verbs_blob_t) + 4 ||
        memcmp(blob + sizeof(verbs_blob_t), "emu1", 4) != 0) {
        fprintf(stderr, "  emu1 mapped: %d %s\n", rc, oobx_last_error());
        return 4;
    }
    ops->destroy(n->tp);
    free(n->msgs);
    /* describe lists both and says which one would be used */
    char *text = NULL;
    size_t tl = 0;
    FILE *f = open_memstream(&text, &tl);
    verbs_describe(f, &n->set, &oobx__core_api);
    fclose(f);
    int ok = strstr(text, "emu0") && strstr(text, "emu1") && strstr(text, "would use device emu1") &&
             strstr(text, "usable: yes");
    if (!ok || getenv("OOBX_TEST_VERBOSE")) fprintf(stderr, "%s", text);
    free(text);
    free(n);
    return ok ? 0 : 5;
}

static void test_two_devices(void **state)
{
    (void)state;
    assert_int_equal(in_child("emu0,emu1", child_two_devices), 0);
}

static void test_missing_device(void **state)
{
    (void)state;
    node_t *n = calloc(1, sizeof(*n));
    int rc = node_try(n, 0, 2, 1, "mlx5_7");
    assert_int_equal(rc, OOBX_ERR_UNAVAILABLE);
    assert_non_null(strstr(oobx_last_error(), "mlx5_7"));
    assert_non_null(strstr(oobx_last_error(), "emu0"));
    free(n->msgs);
    free(n);
}

/* ---- topology: the device closest to the target, on a fabricated machine ---------------- */

/* tests/data/topo/gpu_switch.xml has HCAs mlx5_0..3 under PCI switches shared
 * with GPUs; the emulated device takes their names, and 127.0.0.1 is put on
 * the expected one, so that a wrong choice also fails at rdma_bind_addr. */
#define TOPO_XML "tests/data/topo/gpu_switch.xml"

static int topo_pick_for(const char *pci, const char *expect)
{
    node_t *n = calloc(1, sizeof(*n));
    node_settings(n, 0, NULL);
    snprintf(n->set.topo_pci, sizeof(n->set.topo_pci), "%s", pci);
    n->msgs = calloc(MSGS_MAX, sizeof(*n->msgs));
    char map[64];
    snprintf(map, sizeof map, "%s=127.0.0.1", expect);
    setenv("OOBX_VERBS_EMU_MAP", map, 1);
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
    int rc = ops->create(&p, &n->tp);
    if (rc) {
        fprintf(stderr, "  target %s: %s\n", pci, oobx_last_error());
        free(n->msgs);
        free(n);
        return 1;
    }
    unsigned char blob[OOBX_ADDR_MAX];
    size_t len = sizeof(blob);
    size_t el = strlen(expect);
    int ok = ops->address(n->tp, blob, &len) == 0 && len == sizeof(verbs_blob_t) + el &&
             memcmp(blob + sizeof(verbs_blob_t), expect, el) == 0;
    if (!ok)
        fprintf(stderr, "  target %s: device %.*s, expected %s\n", pci,
                len > sizeof(verbs_blob_t) ? (int)(len - sizeof(verbs_blob_t)) : 0,
                (const char *)blob + sizeof(verbs_blob_t), expect);
    else
        fprintf(stderr, "  [target %s: %s]\n", pci, expect);
    ops->destroy(n->tp);
    free(n->msgs);
    free(n);
    return ok ? 0 : 2;
}

static int child_topology(void)
{
    if (access(TOPO_XML, R_OK) != 0) {
        fprintf(stderr, "  %s: %s (run from the top of the tree)\n", TOPO_XML, strerror(errno));
        return 9;
    }
    setenv("HWLOC_XMLFILE", TOPO_XML, 1);
    /* a GPU under the switch of mlx5_1, then one under the switch of mlx5_2 */
    int rc = topo_pick_for("0000:3d:00.0", "mlx5_1");
    if (rc == 0) rc = topo_pick_for("0000:9a:00.0", "mlx5_2") ? 3 : 0;
    /* OOBX_NET_DEVICE still wins over the topology */
    if (rc == 0) {
        node_t *n = calloc(1, sizeof(*n));
        setenv("OOBX_VERBS_EMU_MAP", "mlx5_3=127.0.0.1", 1);
        int r = node_try(n, 0, 2, 1, "mlx5_3");
        if (r) {
            fprintf(stderr, "  OOBX_NET_DEVICE=mlx5_3: %s\n", oobx_last_error());
            rc = 4;
        } else {
            ops->destroy(n->tp);
        }
        free(n->msgs);
        free(n);
    }
    return rc;
}

static void test_topology(void **state)
{
    (void)state;
    assert_int_equal(in_child("mlx5_0,mlx5_1,mlx5_2,mlx5_3", child_topology), 0);
}

/* ---- addresses -------------------------------------------------------------------------- */

/* The card: the device name after the fixed part; the peer's IP and rdma_cm
 * port in its name; a card of another address family is refused. (Junk,
 * short cards and too little room: the contract suite.) */
static void test_blob(void **state)
{
    (void)state;
    node_t *nodes = calloc(2, sizeof(node_t));
    node_init(&nodes[0], 0, 2, 1);
    node_init(&nodes[1], 1, 2, 1);
    unsigned char blob[OOBX_ADDR_MAX];
    size_t len = sizeof(blob);
    assert_int_equal(ops->address(nodes[1].tp, blob, &len), 0);
    assert_int_equal(len, sizeof(verbs_blob_t) + strlen("emu0"));
    assert_memory_equal(blob + sizeof(verbs_blob_t), "emu0", 4);
    assert_int_equal(ops->set_peer(nodes[0].tp, 1, blob, len), 0);
    char name[128];
    ops->peer_name(nodes[0].tp, 1, name, sizeof(name));
    fprintf(stderr, "  [peer name: %s]\n", name);
    assert_non_null(strstr(name, "rank 1 (127.0.0.1:"));
    verbs_blob_t b;
    memcpy(&b, blob, sizeof(b));
    char port[16];
    snprintf(port, sizeof(port), ":%u)", b.port);
    assert_non_null(strstr(name, port));
    unsigned char bad[OOBX_ADDR_MAX];
    memcpy(bad, blob, len);
    ((verbs_blob_t *)bad)->family = 77;
    assert_int_equal(ops->set_peer(nodes[0].tp, 1, bad, len), OOBX_ERR_PROTOCOL);
    /* the good one still works after the bad one */
    assert_int_equal(ops->set_peer(nodes[0].tp, 1, blob, len), 0);
    node_fini(&nodes[0]);
    node_fini(&nodes[1]);
    free(nodes);
}

/* ---- messages ------------------------------------------------------------------------------ */

/* Either side of the eager limit: one QP for the pair, the large ones read
 * with RDMA READ. */
static void test_p2p_sizes(void **state)
{
    (void)state;
    alarm(60);
    const size_t sizes[] = {0, 1, VERBS_EAGER_MAX, VERBS_EAGER_MAX + 1, 8u << 20, 7, 0, 100000, 3};
    node_t *nodes = calloc(2, sizeof(node_t));
    node_init(&nodes[0], 0, 2, 1);
    node_init(&nodes[1], 1, 2, 1);
    connect_all(nodes, 2, 0);
    exchange(nodes, 2, 0, 1, sizes, (int)OOBX_ARRAY_SIZE(sizes));
    exchange(nodes, 2, 1, 0, sizes, (int)OOBX_ARRAY_SIZE(sizes));
    verbs_stats_t st;
    verbs_tp_stats(nodes[1].tp, &st);
    assert_int_equal(st.qps, 1);
    assert_true(st.rndv_rx >= 3);
    node_fini(&nodes[0]);
    node_fini(&nodes[1]);
    free(nodes);
    alarm(0);
}

/* Both ranks send first, before either progresses: two attempts cross. */
static void test_crossed(void **state)
{
    (void)state;
    alarm(60);
    const size_t sizes[] = {5, 0, 20000, 9000, 1};
    for (int round = 0; round < 5; round++) {
        node_t *nodes = calloc(3, sizeof(node_t));
        for (int i = 0; i < 3; i++) node_init(&nodes[i], i, 3, 1);
        connect_all(nodes, 3, 0);
        batch_t b[6];
        int nb = 0;
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
                if (i != j) batch_send(nodes, &b[nb++], i, j, sizes, (int)OOBX_ARRAY_SIZE(sizes), 100 * i);
        batches_finish(nodes, 3, b, nb);
        uint64_t crossed = 0;
        for (int i = 0; i < 3; i++) {
            verbs_stats_t st;
            verbs_tp_stats(nodes[i].tp, &st);
            assert_int_equal(st.qps, 2); /* one QP per pair */
            crossed += st.crossed;
        }
        if (round == 0) fprintf(stderr, "  [%llu crossed attempts given up]\n", (unsigned long long)crossed);
        assert_true(crossed > 0);
        for (int i = 0; i < 3; i++) node_fini(&nodes[i]);
        free(nodes);
    }
    alarm(0);
}

static int first_saw_rank0_fail(node_t *nodes, int n, void *arg)
{
    (void)n;
    (void)arg;
    return nodes[0].failed[0] > 0;
}

static void pipe_blob_write(int fd, oobx_tp_t *tp);
static ssize_t pipe_blob_read(int fd, unsigned char *blob);

static int higher_crossed_twice(node_t *nodes, int n, void *arg)
{
    (void)n;
    (void)arg;
    verbs_stats_t st;
    verbs_tp_stats(nodes[1].tp, &st);
    return st.crossed >= 2;
}

static int higher_failed(node_t *nodes, int n, void *arg)
{
    (void)n;
    (void)arg;
    return nodes[1].failed[0] > 0;
}

/* The lower rank's own attempt hangs (its card for the higher rank points at
 * a TCP port that never answers): the higher rank, rejected as crossed, waits,
 * connects again and is crossed again; once the lower rank's attempt fails,
 * the higher rank's next attempt is refused naming why. No hang either way. */
static void test_crossed_retry(void **state)
{
    (void)state;
    alarm(40);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(lfd >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(listen(lfd, 4), 0);
    socklen_t sl = sizeof(sin);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&sin, &sl), 0);
    node_t *nodes = calloc(2, sizeof(node_t));
    node_init(&nodes[0], 0, 2, 1);
    node_init(&nodes[1], 1, 2, 1);
    introduce(&nodes[1], &nodes[0]);
    unsigned char blob[OOBX_ADDR_MAX];
    size_t len = sizeof(blob);
    assert_int_equal(ops->address(nodes[1].tp, blob, &len), 0);
    ((verbs_blob_t *)blob)->port = ntohs(sin.sin_port); /* nobody home */
    assert_int_equal(ops->set_peer(nodes[0].tp, 1, blob, len), 0);
    static unsigned char msg[8] = "x";
    oobx_tp_req_t req[2] = {{0}};
    oobx_msg_hdr_t h = {.ctx = 1, .tag = 1, .len = sizeof(msg), .src = 0, .kind = OOBX_MSG_P2P};
    assert_int_equal(ops->send(nodes[0].tp, 1, &h, msg, &req[0]), 0);
    h.src = 1;
    assert_int_equal(ops->send(nodes[1].tp, 0, &h, msg, &req[1]), 0);
    uint64_t t0 = oobx__now_ns();
    assert_int_equal(run_until(nodes, 2, higher_crossed_twice, NULL, 10000), 0);
    double t1 = (double)(oobx__now_ns() - t0) / 1e9;
    fprintf(stderr, "  [crossed again after %.2f s]\n", t1);
    assert_true(t1 > 1.5);
    assert_int_equal(nodes[1].failed[0], 0);
    close(lfd); /* the lower rank's attempt fails now */
    assert_int_equal(run_until(nodes, 2, higher_failed, NULL, 10000), 0);
    fprintf(stderr, "  [settled after %.2f s]\n", (double)(oobx__now_ns() - t0) / 1e9);
    assert_int_equal(nodes[0].failed[1], 1);
    assert_int_equal(nodes[1].fail_status[0], OOBX_ERR_REMOTE);
    assert_int_equal(req[1].done, 1);
    assert_int_not_equal(req[1].status, 0);
    node_fini(&nodes[0]);
    node_fini(&nodes[1]);
    free(nodes);
    alarm(0);
}

/* The lower rank wins a crossing and exits right after rejecting the higher
 * rank's attempt (or making its own QP), before or after its own connection
 * gets out: the higher rank hears of it either way (it never waits forever
 * for that connection). */
static void test_crossed_winner_gone(void **state)
{
    (void)state;
    alarm(40);
    for (int round = 0; round < 4; round++) {
        /* round 3: the winner's own attempt goes to a port nothing listens on,
         * so its connection never comes; it stays alive */
        int bogus = round == 3;
        int to_child[2], to_parent[2];
        assert_int_equal(pipe(to_child), 0);
        assert_int_equal(pipe(to_parent), 0);
        fflush(stderr);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            node_t *c = calloc(1, sizeof(node_t));
            if (node_try(c, 0, 2, 1, NULL)) _exit(2);
            pipe_blob_write(to_parent[1], c->tp);
            unsigned char blob[OOBX_ADDR_MAX];
            ssize_t len = pipe_blob_read(to_child[0], blob);
            if (bogus && len > 0) ((verbs_blob_t *)blob)->port = 1;
            if (len < 0 || ops->set_peer(c->tp, 1, blob, (size_t)len)) _exit(3);
            static unsigned char msg[8] = "x";
            oobx_tp_req_t req = {0};
            oobx_msg_hdr_t h = {.ctx = 1, .tag = 1, .len = sizeof(msg), .src = 0, .kind = OOBX_MSG_P2P};
            ops->send(c->tp, 1, &h, msg, &req);
            for (;;) {
                verbs_stats_t st;
                ops->progress(c->tp);
                verbs_tp_stats(c->tp, &st);
                /* gone, without a word, once it has rejected the higher rank's
                 * attempt or made its own QP (the higher rank's attempt may
                 * have been given up before it arrived) */
                if ((st.rejected || st.qps) && !bogus) _exit(0);
                struct pollfd fds[4];
                int nfds = 0, timeout = 100;
                if (ops->wait_prepare(c->tp, fds, 4, &nfds, &timeout) == 0) poll(fds, (nfds_t)nfds, timeout);
            }
        }
        node_t *nodes = calloc(1, sizeof(node_t));
        node_init(&nodes[0], 1, 2, 1);
        unsigned char blob[OOBX_ADDR_MAX];
        ssize_t len = pipe_blob_read(to_parent[0], blob);
        assert_true(len > 0);
        assert_int_equal(ops->set_peer(nodes[0].tp, 0, blob, (size_t)len), 0);
        static unsigned char msg[8] = "y";
        oobx_tp_req_t req = {0};
        oobx_msg_hdr_t h = {.ctx = 1, .tag = 1, .len = sizeof(msg), .src = 1, .kind = OOBX_MSG_P2P};
        assert_int_equal(ops->send(nodes[0].tp, 0, &h, msg, &req), 0); /* both connect now */
        pipe_blob_write(to_child[1], nodes[0].tp);
        uint64_t t0 = oobx__now_ns();
        assert_int_equal(run_until(nodes, 1, first_saw_rank0_fail, NULL, 15000), 0);
        fprintf(stderr, "  [failure seen after %.2f s]\n", (double)(oobx__now_ns() - t0) / 1e9);
        assert_int_equal(nodes[0].fail_status[0], OOBX_ERR_REMOTE);
        assert_int_equal(req.done, 1);
        if (bogus) kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        node_fini(&nodes[0]);
        free(nodes);
        close(to_child[0]);
        close(to_child[1]);
        close(to_parent[0]);
        close(to_parent[1]);
    }
    alarm(0);
}

/* Both sides queue 10 000 messages before receiving any: credits must flow
 * back although both run out at once. */
static void test_credits(void **state)
{
    (void)state;
    alarm(90);
    enum { N = 10000 };
    size_t *sizes = calloc(N, sizeof(*sizes));
    for (int i = 0; i < N; i++) sizes[i] = (size_t)(i * 37) % 700;
    sizes[5000] = 50000; /* a rendezvous in the middle */
    node_t *nodes = calloc(2, sizeof(node_t));
    node_init(&nodes[0], 0, 2, 1);
    node_init(&nodes[1], 1, 2, 1);
    connect_all(nodes, 2, 0);
    batch_t b[2];
    batch_send(nodes, &b[0], 0, 1, sizes, N, 0);
    batch_send(nodes, &b[1], 1, 0, sizes, N, 0);
    batches_finish(nodes, 2, b, 2);
    node_fini(&nodes[0]);
    node_fini(&nodes[1]);
    free(nodes);
    free(sizes);
    alarm(0);
}

static int ring_active(node_t *nodes, int n, void *arg)
{
    (void)arg;
    for (int i = 0; i < n; i++) {
        verbs_stats_t st;
        verbs_tp_stats(nodes[i].tp, &st);
        if (!st.ring_tx_active) return 0;
    }
    return 1;
}

/* Ring links: messages before the link is set up go the normal way, later
 * ones through the ring; order holds across the switch. */
static void test_ring(void **state)
{
    (void)state;
    alarm(60);
    const size_t before[] = {8u << 20, 3, 0, 9000};
    size_t after[300];
    for (int i = 0; i < 300; i++) after[i] = (size_t)(i * 53) % 1000;
    after[10] = 0;
    after[11] = 0;
    after[50] = 200;
    after[51] = 200 - RINGBUF_HEAD_MAX;
    after[52] = 200 - RINGBUF_CHUNK_HDR_BYTES;
    after[100] = 100000;            /* written from the caller's buffer */
    after[101] = VERBS_EAGER_MAX + 1;
    after[200] = 2u << 20;
    node_t *nodes = calloc(3, sizeof(node_t));
    for (int i = 0; i < 3; i++) node_init(&nodes[i], i, 3, 1);
    connect_all(nodes, 3, 1);
    /* queued at once: the ring is not set up yet */
    batch_t b[9];
    int nb = 0, base[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) batch_send(nodes, &b[nb++], i, (i + 1) % 3, before, 4, 0);
    assert_int_equal(run_until(nodes, 3, ring_active, NULL, 20000), 0);
    for (int i = 0; i < 3; i++) batch_send(nodes, &b[nb++], i, (i + 1) % 3, after, 300, 10);
    /* and to the other neighbour, the normal way */
    for (int i = 0; i < 3; i++) batch_send(nodes, &b[nb++], i, (i + 2) % 3, after, 30, 1000);
    batches_finish_from(nodes, 3, b, nb, base);
    for (int i = 0; i < 3; i++) {
        verbs_stats_t st;
        verbs_tp_stats(nodes[i].tp, &st);
        /* 300 messages in 200-byte slots of a 4-slot ring: many wrap-arounds */
        assert_true(st.ring_chunks_rx > 1000);
        assert_int_equal(st.ring_chunks_rx, st.ring_chunks_tx);
        if (i == 0)
            fprintf(stderr, "  [rank 0: %llu ring chunks in, %llu out]\n", (unsigned long long)st.ring_chunks_rx,
                    (unsigned long long)st.ring_chunks_tx);
    }
    for (int i = 0; i < 3; i++) node_fini(&nodes[i]);
    free(nodes);
    alarm(0);
}

/* ---- failures -------------------------------------------------------------------------------- */

static void pipe_blob_write(int fd, oobx_tp_t *tp)
{
    unsigned char blob[OOBX_ADDR_MAX];
    size_t len = sizeof(blob);
    assert_int_equal(ops->address(tp, blob, &len), 0);
    assert_int_equal(write(fd, &len, sizeof(len)), (ssize_t)sizeof(len));
    assert_int_equal(write(fd, blob, len), (ssize_t)len);
}

static ssize_t pipe_blob_read(int fd, unsigned char *blob)
{
    size_t len = 0;
    if (read(fd, &len, sizeof(len)) != (ssize_t)sizeof(len) || len > OOBX_ADDR_MAX) return -1;
    if (read(fd, blob, len) != (ssize_t)len) return -1;
    return (ssize_t)len;
}

static int bad_saw_reject(node_t *nodes, int n, void *arg)
{
    (void)n;
    (void)arg;
    return nodes[2].failed[0] > 0;
}

/* A connection with another communicator's magic is rejected; the listener
 * goes on serving a good peer. */
static void test_wrong_magic(void **state)
{
    (void)state;
    alarm(30);
    node_t *nodes = calloc(3, sizeof(node_t)); /* 0: listener, 1: good rank 1, 2: rank 1 with another magic */
    node_init(&nodes[0], 0, 2, 0x1234);
    node_init(&nodes[1], 1, 2, 0x1234);
    node_init(&nodes[2], 1, 2, 0x9999);
    introduce(&nodes[1], &nodes[0]);
    introduce(&nodes[2], &nodes[0]);
    introduce(&nodes[0], &nodes[1]);
    unsigned char msg[10] = "bad";
    oobx_tp_req_t req = {0};
    oobx_msg_hdr_t h = {.ctx = 1, .tag = 1, .len = sizeof(msg), .src = 1, .kind = OOBX_MSG_P2P};
    assert_int_equal(ops->send(nodes[2].tp, 0, &h, msg, &req), 0);
    assert_int_equal(run_until(nodes, 3, bad_saw_reject, NULL, 10000), 0);
    assert_non_null(strstr(nodes[2].fail_what[0], "rejected"));
    assert_non_null(strstr(nodes[2].fail_what[0], "magic"));
    assert_int_equal(req.done, 1); /* copied while connecting: done at once, as a socket send */
    oobx_tp_req_t req2 = {.done = 7};
    assert_int_equal(ops->send(nodes[2].tp, 0, &h, msg, &req2), OOBX_ERR_REMOTE);
    assert_int_equal(req2.done, 7);
    assert_int_equal(nodes[0].nbegun, 0);
    assert_int_equal(nodes[0].failed[1], 0);
    verbs_stats_t st;
    verbs_tp_stats(nodes[0].tp, &st);
    assert_true(st.rejected >= 1);
    assert_int_equal(st.qps, 0);
    /* the good rank 1 */
    const size_t sizes[] = {4, 20000};
    exchange(nodes, 2, 1, 0, sizes, 2);
    exchange(nodes, 2, 0, 1, sizes, 2);
    for (int i = 0; i < 3; i++) node_fini(&nodes[i]);
    free(nodes);
    alarm(0);
}

/* A rank 1 with the right magic but another secret: the listener accepts its
 * rdma_cm request, then drops the connection when its proof fails, takes
 * nothing from it, does not fail rank 1, and serves the real rank 1. */
static void test_wrong_secret(void **state)
{
    (void)state;
    alarm(30);
    static const unsigned char good[16] = "the job secret.", bad[16] = "not the secret.";
    node_t *nodes = calloc(3, sizeof(node_t)); /* 0: listener, 1: good rank 1, 2: rank 1 without the secret */
    if (node_try_secret(&nodes[0], 0, 2, 0x1234, NULL, good) || node_try_secret(&nodes[1], 1, 2, 0x1234, NULL, good) ||
        node_try_secret(&nodes[2], 1, 2, 0x1234, NULL, bad))
        fail_msg("create: %s", oobx_last_error());
    introduce(&nodes[1], &nodes[0]);
    introduce(&nodes[2], &nodes[0]);
    introduce(&nodes[0], &nodes[1]);
    unsigned char msg[10] = "forged";
    oobx_tp_req_t req = {0};
    oobx_msg_hdr_t h = {.ctx = 1, .tag = 1, .len = sizeof(msg), .src = 1, .kind = OOBX_MSG_P2P};
    assert_int_equal(ops->send(nodes[2].tp, 0, &h, msg, &req), 0);
    assert_int_equal(run_until(nodes, 3, bad_saw_reject, NULL, 10000), 0);
    assert_int_equal(nodes[0].nbegun, 0);      /* nothing of the impostor's was taken */
    assert_int_equal(nodes[0].failed[1], 0);   /* and rank 1 is not failed for it */
    const size_t sizes[] = {4, 20000};
    exchange(nodes, 2, 1, 0, sizes, 2);
    exchange(nodes, 2, 0, 1, sizes, 2);
    for (int i = 0; i < 3; i++) node_fini(&nodes[i]);
    free(nodes);
    alarm(0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (getenv("OOBX_TEST_FILTER")) cmocka_set_test_filter(getenv("OOBX_TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_device),
        cmocka_unit_test(test_two_devices),
        cmocka_unit_test(test_missing_device),
        cmocka_unit_test(test_topology),
        cmocka_unit_test(test_blob),
        cmocka_unit_test(test_p2p_sizes),
        cmocka_unit_test(test_crossed),
        cmocka_unit_test(test_crossed_winner_gone),
        cmocka_unit_test(test_crossed_retry),
        cmocka_unit_test(test_credits),
        cmocka_unit_test(test_ring),
        cmocka_unit_test(test_wrong_magic),
        cmocka_unit_test(test_wrong_secret),
    };
    return cmocka_run_group_tests_name("verbs transport (emulated device)", tests, NULL, NULL);
}
