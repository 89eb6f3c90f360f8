/* Tests of the emulated RDMA device (verbs/emu/): the libibverbs and
 * librdmacm calls the verbs transport makes, in one process and between a
 * forked child ("one host") and the parent ("another host"). Linked with the
 * emulation's objects, not with libibverbs/librdmacm; the last test runs a
 * program linked with the real libraries under LD_PRELOAD. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "emu.h" /* the wire format, for the malformed-frame test */

/* ---- checks that work in the parent (cmocka) and in a forked child (exit) ---- */

static int in_child;

static void check_fail(int line, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (in_child) {
        fprintf(stderr, "test_emu.c:%d (child %d): %s\n", line, (int)getpid(), buf);
        _exit(3);
    }
    fail_msg("test_emu.c:%d: %s", line, buf);
}

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) check_fail(__LINE__, __VA_ARGS__); \
    } while (0)

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* CPU time of the process (all threads), ms */
static long cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000L +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000L;
}

/* ---- CM and CQ helpers ------------------------------------------------------ */

typedef struct {
    int event, status;
    struct rdma_cm_id *id, *listen_id;
    uint8_t pdata[256];
    int pdata_len;
    uint32_t qp_num;
    uint8_t responder_resources, initiator_depth;
} cm_ev_t;

static cm_ev_t cm_wait(struct rdma_event_channel *ch, int want, int timeout_ms)
{
    cm_ev_t r;
    memset(&r, 0, sizeof(r));
    struct pollfd p = { .fd = ch->fd, .events = POLLIN };
    int n = poll(&p, 1, timeout_ms);
    CHECK(n == 1, "no CM event within %d ms (waiting for %s)", timeout_ms, rdma_event_str(want));
    struct rdma_cm_event *ev;
    CHECK(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event: %s", strerror(errno));
    r.event = ev->event;
    r.status = ev->status;
    r.id = ev->id;
    r.listen_id = ev->listen_id;
    r.pdata_len = ev->param.conn.private_data_len;
    if (ev->param.conn.private_data && r.pdata_len)
        memcpy(r.pdata, ev->param.conn.private_data, (size_t)r.pdata_len);
    r.qp_num = ev->param.conn.qp_num;
    r.responder_resources = ev->param.conn.responder_resources;
    r.initiator_depth = ev->param.conn.initiator_depth;
    rdma_ack_cm_event(ev);
    CHECK(want < 0 || r.event == want, "CM event %s (status %d), expected %s", rdma_event_str(r.event),
          r.status, rdma_event_str(want));
    return r;
}

static struct ibv_wc wc_wait(struct ibv_cq *cq, int timeout_ms)
{
    struct ibv_wc wc;
    long end = now_ms() + timeout_ms;
    for (;;) {
        int n = ibv_poll_cq(cq, 1, &wc);
        CHECK(n >= 0, "ibv_poll_cq returned %d", n);
        if (n == 1) return wc;
        CHECK(now_ms() < end, "no completion within %d ms", timeout_ms);
        sleep_ms(1);
    }
}

static int wc_count(struct ibv_cq *cq, int wait_ms)
{
    if (wait_ms) sleep_ms(wait_ms);
    struct ibv_wc wc[64];
    int n = ibv_poll_cq(cq, 64, wc);
    CHECK(n >= 0, "ibv_poll_cq returned %d", n);
    return n;
}

#define WC_EXPECT(cq, st, op, ms) \
    do { \
        struct ibv_wc w_ = wc_wait((cq), (ms)); \
        CHECK(w_.status == (st), "completion status %s (%d), expected %s (wr_id %llu)", \
              ibv_wc_status_str(w_.status), w_.status, ibv_wc_status_str(st), (unsigned long long)w_.wr_id); \
        CHECK((int)(op) < 0 || w_.opcode == (unsigned)(op), "opcode %d, expected %d", w_.opcode, (int)(op)); \
    } while (0)

/* ---- endpoints --------------------------------------------------------------- */

typedef struct {
    size_t len;          /* registered buffer */
    int access;
    uint32_t send_wr, recv_wr, sge, inline_data;
    int cqe;
    int sig_all;
} opts_t;

static const opts_t OPTS_DEFAULT = {
    .len = 1 << 16,
    .access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
    .send_wr = 64, .recv_wr = 64, .sge = 4, .inline_data = 64, .cqe = 512,
};

typedef struct {
    struct rdma_event_channel *ch;
    struct rdma_cm_id *listen, *id;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    uint8_t *buf;
    size_t len;
} ep_t;

/* what the passive side hands to the initiator in its accept */
typedef struct {
    uint64_t addr;
    uint32_t rkey;
    uint32_t len;
} remote_t;

static struct sockaddr_in loopback(uint16_t port)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static uint16_t ep_listen(ep_t *e)
{
    e->ch = rdma_create_event_channel();
    CHECK(e->ch, "rdma_create_event_channel: %s", strerror(errno));
    CHECK(rdma_create_id(e->ch, &e->listen, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
    struct sockaddr_in a = loopback(0);
    CHECK(rdma_bind_addr(e->listen, (struct sockaddr *)&a) == 0, "rdma_bind_addr: %s", strerror(errno));
    CHECK(rdma_listen(e->listen, 16) == 0, "rdma_listen: %s", strerror(errno));
    uint16_t port = ntohs(rdma_get_src_port(e->listen));
    CHECK(port != 0, "listener has no port");
    struct sockaddr_in *src = (struct sockaddr_in *)rdma_get_local_addr(e->listen);
    CHECK(src->sin_port == htons(port), "src_addr port %u, rdma_get_src_port %u", ntohs(src->sin_port), port);
    return port;
}

static void ep_resources(ep_t *e, struct ibv_context *verbs, struct rdma_cm_id *id, const opts_t *o)
{
    CHECK(verbs, "id has no device context");
    e->pd = ibv_alloc_pd(verbs);
    CHECK(e->pd, "ibv_alloc_pd");
    e->cq = ibv_create_cq(verbs, o->cqe, NULL, NULL, 0);
    CHECK(e->cq, "ibv_create_cq: %s", strerror(errno));
    e->len = o->len;
    e->buf = calloc(1, o->len ? o->len : 1);
    CHECK(e->buf, "calloc %zu", o->len);
    e->mr = ibv_reg_mr(e->pd, e->buf, e->len, o->access);
    CHECK(e->mr, "ibv_reg_mr: %s", strerror(errno));
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = e->cq;
    qa.recv_cq = e->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.sq_sig_all = o->sig_all;
    qa.cap.max_send_wr = o->send_wr;
    qa.cap.max_recv_wr = o->recv_wr;
    qa.cap.max_send_sge = o->sge;
    qa.cap.max_recv_sge = o->sge;
    qa.cap.max_inline_data = o->inline_data;
    CHECK(rdma_create_qp(id, e->pd, &qa) == 0, "rdma_create_qp: %s", strerror(errno));
    CHECK(id->qp, "id->qp not set");
}

/* initiator up to rdma_connect */
static void ep_connect_start(ep_t *e, uint16_t port, const void *pdata, int pdlen, const opts_t *o)
{
    e->ch = rdma_create_event_channel();
    CHECK(e->ch, "rdma_create_event_channel");
    CHECK(rdma_create_id(e->ch, &e->id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
    struct sockaddr_in dst = loopback(port);
    CHECK(rdma_resolve_addr(e->id, NULL, (struct sockaddr *)&dst, 1000) == 0, "rdma_resolve_addr");
    cm_wait(e->ch, RDMA_CM_EVENT_ADDR_RESOLVED, 2000);
    CHECK(rdma_resolve_route(e->id, 1000) == 0, "rdma_resolve_route");
    cm_wait(e->ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 2000);
    ep_resources(e, e->id->verbs, e->id, o);
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof(cp));
    cp.private_data = pdata;
    cp.private_data_len = (uint8_t)pdlen;
    cp.responder_resources = 4;
    cp.initiator_depth = 4;
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;
    CHECK(rdma_connect(e->id, &cp) == 0, "rdma_connect: %s", strerror(errno));
}

/* passive side: takes the request and accepts it */
static cm_ev_t ep_accept(ep_t *e, const void *pdata, int pdlen, const opts_t *o)
{
    cm_ev_t req = cm_wait(e->ch, RDMA_CM_EVENT_CONNECT_REQUEST, 3000);
    CHECK(req.listen_id == e->listen, "listen_id is not the listener");
    CHECK(req.id != e->listen && req.id->verbs, "request id is new and has a device");
    e->id = req.id;
    ep_resources(e, e->id->verbs, e->id, o);
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof(cp));
    cp.private_data = pdata;
    cp.private_data_len = (uint8_t)pdlen;
    cp.responder_resources = 4;
    cp.initiator_depth = 4;
    CHECK(rdma_accept(e->id, &cp) == 0, "rdma_accept: %s", strerror(errno));
    return req;
}

static void ep_destroy(ep_t *e)
{
    if (e->id && e->id->qp) rdma_destroy_qp(e->id);
    if (e->mr) CHECK(ibv_dereg_mr(e->mr) == 0, "ibv_dereg_mr");
    if (e->cq) CHECK(ibv_destroy_cq(e->cq) == 0, "ibv_destroy_cq");
    if (e->pd) CHECK(ibv_dealloc_pd(e->pd) == 0, "ibv_dealloc_pd");
    if (e->id) CHECK(rdma_destroy_id(e->id) == 0, "rdma_destroy_id: %s", strerror(errno));
    if (e->listen) CHECK(rdma_destroy_id(e->listen) == 0, "rdma_destroy_id (listener)");
    if (e->ch) rdma_destroy_event_channel(e->ch);
    free(e->buf);
    memset(e, 0, sizeof(*e));
}

typedef struct {
    ep_t s, c; /* passive, initiator */
} pair_t;

static void pair_setup(pair_t *p, const opts_t *os, const opts_t *oc)
{
    memset(p, 0, sizeof(*p));
    uint16_t port = ep_listen(&p->s);
    ep_connect_start(&p->c, port, NULL, 0, oc);
    ep_accept(&p->s, NULL, 0, os);
    cm_wait(p->c.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
    cm_wait(p->s.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
    CHECK(p->c.id->qp->state == IBV_QPS_RTS && p->s.id->qp->state == IBV_QPS_RTS, "QPs not RTS");
}

static void pair_teardown(pair_t *p)
{
    ep_destroy(&p->c);
    ep_destroy(&p->s);
}

static int post_send(struct ibv_qp *qp, int opcode, uint64_t wr_id, struct ibv_sge *sge, int nsge,
                     int flags, uint64_t raddr, uint32_t rkey, uint32_t imm)
{
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    wr.opcode = opcode;
    wr.sg_list = sge;
    wr.num_sge = nsge;
    wr.send_flags = flags;
    wr.imm_data = imm;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    int r = ibv_post_send(qp, &wr, &bad);
    if (r) CHECK(bad == &wr, "bad_wr not set on error %d", r);
    return r;
}

static int post_recv(struct ibv_qp *qp, uint64_t wr_id, struct ibv_sge *sge, int nsge)
{
    struct ibv_recv_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    wr.sg_list = sge;
    wr.num_sge = nsge;
    int r = ibv_post_recv(qp, &wr, &bad);
    if (r) CHECK(bad == &wr, "bad_wr not set on error %d", r);
    return r;
}

static struct ibv_sge sge_of(ep_t *e, size_t off, uint32_t len)
{
    struct ibv_sge s = { .addr = (uintptr_t)(e->buf + off), .length = len, .lkey = e->mr->lkey };
    return s;
}

/* runs fn in a forked child; returns its pid */
static pid_t spawn(void (*fn)(int wfd), int *rfd)
{
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        in_child = 1;
        close(fds[0]);
        alarm(30);
        fn(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    *rfd = fds[0];
    return pid;
}

static void child_wait_ok(pid_t pid, int timeout_ms)
{
    long end = now_ms() + timeout_ms;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) break;
        if (now_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            CHECK(0, "child %d still running after %d ms", (int)pid, timeout_ms);
        }
        sleep_ms(5);
    }
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed (status 0x%x)", st);
}

static uint16_t read_port(int rfd)
{
    uint16_t port = 0;
    struct pollfd p = { .fd = rfd, .events = POLLIN };
    CHECK(poll(&p, 1, 5000) == 1 && read(rfd, &port, sizeof(port)) == sizeof(port), "child gave no port");
    return port;
}

/* ---- devices, queries, registration ------------------------------------------ */

static void test_devices(void **state)
{
    (void)state;
    unsetenv("OOBX_VERBS_EMU_DEVICES");
    int n = -1;
    struct ibv_device **list = ibv_get_device_list(&n);
    assert_non_null(list);
    assert_int_equal(n, 1);
    assert_string_equal(ibv_get_device_name(list[0]), "emu0");
    assert_null(list[1]);
    __be64 guid = ibv_get_device_guid(list[0]);
    assert_true(guid != 0);

    struct ibv_context *ctx = ibv_open_device(list[0]);
    assert_non_null(ctx);
    struct ibv_device_attr da;
    assert_int_equal(ibv_query_device(ctx, &da), 0);
    assert_int_equal(da.max_qp_wr, 16384);
    assert_int_equal(da.max_sge, 16);
    assert_int_equal(da.max_cqe, 65536);
    assert_int_equal(da.max_qp_rd_atom, 16);
    assert_int_equal(da.phys_port_cnt, 1);
    assert_true(da.node_guid == guid);
    /* through the header's inline (verbs_context) path */
    struct ibv_port_attr pa;
    memset(&pa, 0xff, sizeof(pa));
    assert_int_equal(ibv_query_port(ctx, 1, &pa), 0);
    assert_int_equal(pa.state, IBV_PORT_ACTIVE);
    assert_int_equal(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
    assert_int_equal(pa.active_mtu, IBV_MTU_4096);
    assert_int_equal(pa.port_cap_flags2, 0);
    assert_int_not_equal(ibv_query_port(ctx, 2, &pa), 0);
    /* the exported function itself (what the inline falls back to without the extended op) */
    memset(&pa, 0, sizeof(pa));
    assert_int_equal((ibv_query_port)(ctx, 1, (struct _compat_ibv_port_attr *)&pa), 0);
    assert_int_equal(pa.state, IBV_PORT_ACTIVE);
    assert_int_equal(pa.link_layer, IBV_LINK_LAYER_ETHERNET);

    /* the macro form of ibv_reg_mr, constant and variable access flags */
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    assert_non_null(pd);
    static uint8_t buf[4096];
    struct ibv_mr *m1 = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
    volatile int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
    struct ibv_mr *m2 = ibv_reg_mr(pd, buf, sizeof(buf), acc);
    assert_non_null(m1);
    assert_non_null(m2);
    assert_true(m1->lkey != 0 && m2->lkey != 0 && m1->lkey != m2->lkey && m1->rkey != m2->rkey);
    /* remote write needs local write, as on hardware */
    assert_null(ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE));
    /* a 1 GiB registration (not touched) */
    size_t big = 1ul << 30;
    void *mem = malloc(big);
    assert_non_null(mem);
    struct ibv_mr *m3 = ibv_reg_mr(pd, mem, big, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    assert_non_null(m3);
    assert_int_equal(ibv_dealloc_pd(pd), EBUSY);
    assert_int_equal(ibv_dereg_mr(m3), 0);
    free(mem);
    assert_int_equal(ibv_dereg_mr(m1), 0);
    assert_int_equal(ibv_dereg_mr(m2), 0);
    assert_int_equal(ibv_dealloc_pd(pd), 0);
    assert_int_equal(ibv_close_device(ctx), 0);
    ibv_free_device_list(list);

    setenv("OOBX_VERBS_EMU_DEVICES", "", 1);
    list = ibv_get_device_list(&n);
    assert_non_null(list);
    assert_int_equal(n, 0);
    assert_null(list[0]);
    ibv_free_device_list(list);

    setenv("OOBX_VERBS_EMU_DEVICES", "emu0,emu1", 1);
    list = ibv_get_device_list(&n);
    assert_int_equal(n, 2);
    assert_string_equal(list[1]->name, "emu1");
    assert_true(ibv_get_device_guid(list[1]) != guid);
    assert_true(ibv_get_device_guid(list[0]) == guid);
    ibv_free_device_list(list);
    unsetenv("OOBX_VERBS_EMU_DEVICES");
    assert_string_equal(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR), "remote access error");
    assert_string_equal(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED");
}

/* ---- connection management -------------------------------------------------- */

static void child_accept_pdata(int wfd)
{
    ep_t s;
    memset(&s, 0, sizeof(s));
    uint16_t port = ep_listen(&s);
    CHECK(write(wfd, &port, sizeof(port)) == sizeof(port), "write port");
    uint8_t rep[196];
    for (int i = 0; i < 196; i++) rep[i] = (uint8_t)(200 - i);
    cm_ev_t req = ep_accept(&s, rep, sizeof(rep), &OPTS_DEFAULT);
    /* zero padded to the IB CM field, as on hardware */
    CHECK(req.pdata_len == 56, "connect private data length %d", req.pdata_len);
    for (int i = 0; i < 40; i++) CHECK(req.pdata[i] == (uint8_t)(i + 1), "connect pdata byte %d", i);
    for (int i = 40; i < 56; i++) CHECK(req.pdata[i] == 0, "connect pdata padding byte %d", i);
    CHECK(req.responder_resources == 4 && req.initiator_depth == 4, "conn params");
    CHECK(req.qp_num != 0, "request carries the initiator's QP number");
    cm_wait(s.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
    struct sockaddr_in *peer = (struct sockaddr_in *)rdma_get_peer_addr(s.id);
    CHECK(peer->sin_family == AF_INET && peer->sin_port != 0, "peer address of the passive id");
    CHECK(rdma_get_src_port(s.id) == htons(port), "passive id's source port");
    cm_wait(s.ch, RDMA_CM_EVENT_DISCONNECTED, 5000);
    ep_destroy(&s);
}

static void test_connect_private_data(void **state)
{
    (void)state;
    int rfd;
    pid_t pid = spawn(child_accept_pdata, &rfd);
    uint16_t port = read_port(rfd);
    ep_t c;
    memset(&c, 0, sizeof(c));
    uint8_t req[40];
    for (int i = 0; i < 40; i++) req[i] = (uint8_t)(i + 1);
    uint8_t toolong[57] = { 0 };
    {
        /* more than 56 bytes on connect: EINVAL */
        ep_t x;
        memset(&x, 0, sizeof(x));
        x.ch = rdma_create_event_channel();
        CHECK(rdma_create_id(x.ch, &x.id, NULL, RDMA_PS_TCP) == 0, "id");
        struct rdma_conn_param cp = { .private_data = toolong, .private_data_len = 57 };
        errno = 0;
        assert_int_equal(rdma_connect(x.id, &cp), -1);
        assert_int_equal(errno, EINVAL);
        ep_destroy(&x);
    }
    ep_connect_start(&c, port, req, sizeof(req), &OPTS_DEFAULT);
    cm_ev_t est = cm_wait(c.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
    assert_int_equal(est.pdata_len, 196);
    for (int i = 0; i < 196; i++) assert_int_equal(est.pdata[i], (uint8_t)(200 - i));
    assert_int_equal(c.id->qp->state, IBV_QPS_RTS);
    struct sockaddr_in *src = (struct sockaddr_in *)rdma_get_local_addr(c.id);
    struct sockaddr_in *dst = (struct sockaddr_in *)rdma_get_peer_addr(c.id);
    assert_int_equal(ntohs(dst->sin_port), port);
    assert_true(src->sin_port != 0);
    assert_int_equal(src->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
    assert_int_equal(rdma_disconnect(c.id), 0);
    cm_wait(c.ch, RDMA_CM_EVENT_DISCONNECTED, 3000);
    ep_destroy(&c);
    child_wait_ok(pid, 10000);
    close(rfd);
}

static void test_reject(void **state)
{
    (void)state;
    ep_t s, c;
    memset(&s, 0, sizeof(s));
    memset(&c, 0, sizeof(c));
    uint16_t port = ep_listen(&s);
    ep_connect_start(&c, port, "hello", 5, &OPTS_DEFAULT);
    /* not connected: receives may be posted, sends not */
    assert_int_equal(c.id->qp->state, IBV_QPS_INIT);
    struct ibv_sge x = sge_of(&c, 0, 8);
    assert_int_equal(post_recv(c.id->qp, 1, &x, 1), 0);
    assert_int_equal(post_send(c.id->qp, IBV_WR_SEND, 2, &x, 1, IBV_SEND_SIGNALED, 0, 0, 0), EINVAL);
    cm_ev_t req = cm_wait(s.ch, RDMA_CM_EVENT_CONNECT_REQUEST, 3000);
    assert_memory_equal(req.pdata, "hello", 5);
    uint8_t big[149] = { 0 };
    errno = 0;
    assert_int_equal(rdma_reject(req.id, big, sizeof(big)), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(rdma_reject(req.id, "go away", 7), 0);
    cm_ev_t rej = cm_wait(c.ch, RDMA_CM_EVENT_REJECTED, 3000);
    assert_int_equal(rej.status, 28);
    assert_int_equal(rej.pdata_len, 148);
    assert_memory_equal(rej.pdata, "go away", 7);
    assert_int_equal(rdma_destroy_id(req.id), 0);
    ep_destroy(&c);
    ep_destroy(&s);
}

static void test_connect_closed_port(void **state)
{
    (void)state;
    /* a port nobody listens on: take one and close it */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = loopback(0);
    socklen_t len = sizeof(a);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    ep_t c;
    memset(&c, 0, sizeof(c));
    ep_connect_start(&c, ntohs(a.sin_port), NULL, 0, &OPTS_DEFAULT);
    cm_ev_t ev = cm_wait(c.ch, RDMA_CM_EVENT_REJECTED, 3000);
    assert_int_equal(ev.status, 8);
    ep_destroy(&c);
}

static void test_cm_nonblocking(void **state)
{
    (void)state;
    struct rdma_event_channel *ch = rdma_create_event_channel();
    assert_non_null(ch);
    int fl = fcntl(ch->fd, F_GETFL);
    assert_int_equal(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
    struct rdma_cm_event *ev;
    errno = 0;
    assert_int_equal(rdma_get_cm_event(ch, &ev), -1);
    assert_int_equal(errno, EAGAIN);
    struct rdma_cm_id *id;
    assert_int_equal(rdma_create_id(ch, &id, (void *)0x1234, RDMA_PS_TCP), 0);
    struct sockaddr_in dst = loopback(9);
    assert_int_equal(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 1000), 0);
    /* the event comes through the channel, which is now readable */
    struct pollfd p = { .fd = ch->fd, .events = POLLIN };
    assert_int_equal(poll(&p, 1, 2000), 1);
    assert_int_equal(rdma_get_cm_event(ch, &ev), 0);
    assert_int_equal(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
    assert_ptr_equal(ev->id, id);
    assert_ptr_equal(ev->id->context, (void *)0x1234);
    assert_non_null(id->verbs);
    assert_string_equal(id->verbs->device->name, "emu0");
    assert_int_equal(rdma_ack_cm_event(ev), 0);
    assert_int_equal(poll(&p, 1, 0), 0);
    errno = 0;
    assert_int_equal(rdma_get_cm_event(ch, &ev), -1);
    assert_int_equal(errno, EAGAIN);
    assert_int_equal(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
}

/* ---- two-sided -------------------------------------------------------------------- */

static void test_send_sizes(void **state)
{
    (void)state;
    pair_t p;
    pair_setup(&p, &OPTS_DEFAULT, &OPTS_DEFAULT);
    struct ibv_qp *cq = p.c.id->qp, *sq = p.s.id->qp;
    for (int i = 0; i < 8192; i++) p.c.buf[i] = (uint8_t)(i * 7 + 3);
    uint32_t sizes[] = { 0, 1, 4096 };
    for (int k = 0; k < 3; k++) {
        memset(p.s.buf + 32768, 0xee, 8192);
        struct ibv_sge rs = sge_of(&p.s, 32768, 8192);
        assert_int_equal(post_recv(sq, 100 + k, &rs, 1), 0);
        struct ibv_sge ss = sge_of(&p.c, 0, sizes[k]);
        assert_int_equal(post_send(cq, IBV_WR_SEND, 10 + k, &ss, sizes[k] ? 1 : 0, IBV_SEND_SIGNALED, 0, 0, 0), 0);
        struct ibv_wc w = wc_wait(p.s.cq, 2000);
        assert_int_equal(w.status, IBV_WC_SUCCESS);
        assert_int_equal(w.opcode, IBV_WC_RECV);
        assert_int_equal(w.byte_len, sizes[k]);
        assert_int_equal(w.wr_id, 100 + k);
        assert_int_equal(w.qp_num, sq->qp_num);
        assert_int_equal(w.src_qp, cq->qp_num);
        assert_int_equal(w.wc_flags & IBV_WC_WITH_IMM, 0);
        assert_memory_equal(p.s.buf + 32768, p.c.buf, sizes[k]);
        if (sizes[k] < 8192) assert_int_equal(p.s.buf[32768 + sizes[k]], 0xee);
        w = wc_wait(p.c.cq, 2000);
        assert_int_equal(w.status, IBV_WC_SUCCESS);
        assert_int_equal(w.opcode, IBV_WC_SEND);
        assert_int_equal(w.wr_id, 10 + k);
    }
    /* three SGEs gathered, scattered into two; with an immediate; then inline */
    struct ibv_sge ss3[3] = { sge_of(&p.c, 0, 100), sge_of(&p.c, 1000, 200), sge_of(&p.c, 5000, 300) };
    struct ibv_sge rs2[2] = { sge_of(&p.s, 0, 250), sge_of(&p.s, 40000, 1000) };
    memset(p.s.buf, 0, 65536);
    assert_int_equal(post_recv(sq, 7, rs2, 2), 0);
    assert_int_equal(post_send(cq, IBV_WR_SEND_WITH_IMM, 8, ss3, 3, IBV_SEND_SIGNALED, 0, 0, htonl(0xabcd)), 0);
    struct ibv_wc w = wc_wait(p.s.cq, 2000);
    assert_int_equal(w.status, IBV_WC_SUCCESS);
    assert_int_equal(w.byte_len, 600);
    assert_true(w.wc_flags & IBV_WC_WITH_IMM);
    assert_int_equal(w.imm_data, htonl(0xabcd));
    uint8_t want[600];
    memcpy(want, p.c.buf, 100);
    memcpy(want + 100, p.c.buf + 1000, 200);
    memcpy(want + 300, p.c.buf + 5000, 300);
    assert_memory_equal(p.s.buf, want, 250);
    assert_memory_equal(p.s.buf + 40000, want + 250, 350);
    WC_EXPECT(p.c.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 2000);
    /* inline: the buffer is free when post returns, and lkey is not checked */
    char msg[32] = "inline message";
    struct ibv_sge is = { .addr = (uintptr_t)msg, .length = 15, .lkey = 0 };
    assert_int_equal(post_recv(sq, 9, rs2, 1), 0);
    assert_int_equal(post_send(cq, IBV_WR_SEND, 9, &is, 1, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 0, 0, 0), 0);
    memset(msg, 'x', sizeof(msg));
    w = wc_wait(p.s.cq, 2000);
    assert_int_equal(w.byte_len, 15);
    assert_string_equal((char *)p.s.buf, "inline message");
    WC_EXPECT(p.c.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 2000);
    /* inline longer than max_inline_data: EINVAL */
    struct ibv_sge ls = sge_of(&p.c, 0, 65);
    assert_int_equal(post_send(cq, IBV_WR_SEND, 1, &ls, 1, IBV_SEND_INLINE, 0, 0, 0), EINVAL);
    pair_teardown(&p);
}

static void test_rnr_hold(void **state)
{
    (void)state;
    pair_t p;
    pair_setup(&p, &OPTS_DEFAULT, &OPTS_DEFAULT);
    for (int i = 0; i < 3; i++) p.c.buf[i * 100] = (uint8_t)(i + 1);
    /* three sends, a small one, a large one (not copied aside), and another */
    struct ibv_sge a = sge_of(&p.c, 0, 10), b = sge_of(&p.c, 0, 65536), c = sge_of(&p.c, 200, 10);
    assert_int_equal(post_send(p.c.id->qp, IBV_WR_SEND, 1, &a, 1, IBV_SEND_SIGNALED, 0, 0, 0), 0);
    assert_int_equal(post_send(p.c.id->qp, IBV_WR_SEND, 2, &b, 1, IBV_SEND_SIGNALED, 0, 0, 0), 0);
    assert_int_equal(post_send(p.c.id->qp, IBV_WR_SEND, 3, &c, 1, IBV_SEND_SIGNALED, 0, 0, 0), 0);
    /* waiting costs no CPU: the device threads sleep in epoll (the large send is paused) */
    long cpu0 = cpu_ms();
    assert_int_equal(wc_count(p.c.cq, 300), 0);
    assert_int_equal(wc_count(p.s.cq, 0), 0);
    long cpu = cpu_ms() - cpu0;
    print_message("CPU while held: %ld ms in 300 ms\n", cpu);
    assert_true(cpu < 60);
    ep_t *s = &p.s;
    for (int i = 0; i < 3; i++) {
        struct ibv_sge r = sge_of(s, 0, 65536);
        assert_int_equal(post_recv(s->id->qp, 10 + i, &r, 1), 0);
        struct ibv_wc w = wc_wait(s->cq, 2000);
        assert_int_equal(w.status, IBV_WC_SUCCESS);
        assert_int_equal(w.wr_id, 10 + i);
        assert_int_equal(w.byte_len, i == 1 ? 65536 : 10);
        assert_int_equal(s->buf[0], i == 2 ? 3 : 1);
        w = wc_wait(p.c.cq, 2000);
        assert_int_equal(w.status, IBV_WC_SUCCESS);
        assert_int_equal(w.wr_id, 1 + i);
    }
    pair_teardown(&p);
}

/* a large send waits for a receive (the socket is not read); then the peer goes away */
static void test_paused_peer_close(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
    pair_t p;
    pair_setup(&p, &OPTS_DEFAULT, &OPTS_DEFAULT);
    struct ibv_sge b = sge_of(&p.c, 0, 65536);
    assert_int_equal(post_send(p.c.id->qp, IBV_WR_SEND, 1, &b, 1, IBV_SEND_SIGNALED, 0, 0, 0), 0);
    long cpu0 = cpu_ms();
    assert_int_equal(wc_count(p.s.cq, 100), 0);
    if (k == 0) {
        /* the initiator disconnects: the target still hears of it */
        assert_int_equal(rdma_disconnect(p.c.id), 0);
        WC_EXPECT(p.c.cq, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 1000);
    } else {
        /* the initiator vanishes without a disconnect: its socket closes */
        rdma_destroy_qp(p.c.id);
        assert_int_equal(rdma_destroy_id(p.c.id), 0);
        p.c.id = NULL;
    }
    cm_wait(p.s.ch, RDMA_CM_EVENT_DISCONNECTED, 2000);
    sleep_ms(100);
    long cpu = cpu_ms() - cpu0;
    assert_true(cpu < 60);
    assert_int_equal(p.s.id->qp->state, IBV_QPS_ERR);
    struct ibv_sge r = sge_of(&p.s, 0, 64);
    assert_int_equal(post_recv(p.s.id->qp, 5, &r, 1), 0);
    WC_EXPECT(p.s.cq, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 1000);
    pair_teardown(&p);
    }
}

/* many small messages both ways at once, in order, with writes in between */
static void test_many_small(void **state)
{
    (void)state;
    pair_t p;
    opts_t o = OPTS_DEFAULT;
    o.send_wr = 1024;
    o.recv_wr = 1024;
    o.cqe = 4096;
    o.len = 1 << 20;
    pair_setup(&p, &o, &o);
    ep_t *e[2] = { &p.c, &p.s };
    const int N = 1000;
    long t0 = now_ms();
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++) {
            struct ibv_sge r = sge_of(e[k], 65536 + (size_t)i * 64, 64);
            assert_int_equal(post_recv(e[k]->id->qp, (uint64_t)i, &r, 1), 0);
        }
    for (int i = 0; i < N; i++)
        for (int k = 0; k < 2; k++) {
            uint32_t *w = (uint32_t *)(e[k]->buf + (size_t)i * 32);
            w[0] = (uint32_t)i;
            w[1] = (uint32_t)k;
            struct ibv_sge x = sge_of(e[k], (size_t)i * 32, 32);
            int op = i % 3 == 1 ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_SEND;
            assert_int_equal(post_send(e[k]->id->qp, op, (uint64_t)i, &x, 1, i % 16 == 15 ? IBV_SEND_SIGNALED : 0,
                                       (uintptr_t)e[1 - k]->buf + 524288 + (size_t)i * 32, e[1 - k]->mr->rkey,
                                       htonl((uint32_t)i)), 0);
        }
    /* each side: N receive CQEs in order and N/16 send CQEs, on one CQ */
    for (int k = 0; k < 2; k++) {
        int nrecv = 0, nsend = 0;
        long end = now_ms() + 5000;
        while ((nrecv < N || nsend < N / 16) && now_ms() < end) {
            struct ibv_wc w[64];
            int n = ibv_poll_cq(e[k]->cq, 64, w);
            assert_true(n >= 0);
            for (int j = 0; j < n; j++) {
                assert_int_equal(w[j].status, IBV_WC_SUCCESS);
                if (w[j].opcode & IBV_WC_RECV) {
                    assert_int_equal(w[j].wr_id, (uint64_t)nrecv);
                    const uint32_t *d = w[j].opcode == IBV_WC_RECV_RDMA_WITH_IMM
                        ? (const uint32_t *)(e[k]->buf + 524288 + (size_t)nrecv * 32)
                        : (const uint32_t *)(e[k]->buf + 65536 + (size_t)nrecv * 64);
                    assert_int_equal(d[0], (uint32_t)nrecv);
                    assert_int_equal(d[1], (uint32_t)(1 - k));
                    if (w[j].opcode == IBV_WC_RECV_RDMA_WITH_IMM) assert_int_equal(ntohl(w[j].imm_data), nrecv);
                    nrecv++;
                } else {
                    assert_int_equal(w[j].wr_id, (uint64_t)(nsend * 16 + 15));
                    nsend++;
                }
            }
            if (n == 0) sleep_ms(1);
        }
        assert_int_equal(nrecv, N);
        assert_int_equal(nsend, N / 16);
    }
    print_message("%d small messages each way in %ld ms\n", N, now_ms() - t0);
    pair_teardown(&p);
}

/* ---- one-sided ---------------------------------------------------------------------- */

#define BIG (64u << 20)

static void child_target(int wfd)
{
    /* the "remote" host: registers, posts one receive, then only polls its CQ */
    ep_t s;
    memset(&s, 0, sizeof(s));
    opts_t o = OPTS_DEFAULT;
    o.len = BIG;
    uint16_t port = ep_listen(&s);
    CHECK(write(wfd, &port, sizeof(port)) == sizeof(port), "write port");
    cm_ev_t req = cm_wait(s.ch, RDMA_CM_EVENT_CONNECT_REQUEST, 5000);
    s.id = req.id;
    ep_resources(&s, s.id->verbs, s.id, &o);
    uint32_t *words = (uint32_t *)s.buf;
    for (uint32_t i = 0; i < BIG / 4; i++) words[i] = i * 2654435761u;
    struct ibv_sge r = sge_of(&s, 0, 16);
    CHECK(post_recv(s.id->qp, 77, &r, 1) == 0, "post_recv");
    remote_t rem = { (uintptr_t)s.buf, s.mr->rkey, BIG };
    struct rdma_conn_param cp = { .private_data = &rem, .private_data_len = sizeof(rem) };
    CHECK(rdma_accept(s.id, &cp) == 0, "accept");
    cm_wait(s.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
    /* the initiator reads everything, then overwrites it with WRITE_WITH_IMM */
    struct ibv_wc w = wc_wait(s.cq, 20000);
    CHECK(w.status == IBV_WC_SUCCESS, "receive status %s", ibv_wc_status_str(w.status));
    CHECK(w.opcode == IBV_WC_RECV_RDMA_WITH_IMM, "opcode %d", w.opcode);
    CHECK(w.wr_id == 77 && w.byte_len == BIG && (w.wc_flags & IBV_WC_WITH_IMM) &&
              w.imm_data == htonl(0x12345678), "receive wc: wr_id %llu byte_len %u imm 0x%x",
          (unsigned long long)w.wr_id, w.byte_len, ntohl(w.imm_data));
    for (uint32_t i = 0; i < BIG / 4; i++)
        CHECK(words[i] == ~(i * 2654435761u), "written word %u", i);
    /* a plain write produced no completion */
    CHECK(wc_count(s.cq, 0) == 0, "completion for a plain write");
    cm_wait(s.ch, RDMA_CM_EVENT_DISCONNECTED, 10000);
    ep_destroy(&s);
}

static void test_read_write_64m(void **state)
{
    (void)state;
    int rfd;
    pid_t pid = spawn(child_target, &rfd);
    uint16_t port = read_port(rfd);
    ep_t c;
    memset(&c, 0, sizeof(c));
    opts_t o = OPTS_DEFAULT;
    o.len = BIG;
    ep_connect_start(&c, port, NULL, 0, &o);
    cm_ev_t est = cm_wait(c.ch, RDMA_CM_EVENT_ESTABLISHED, 5000);
    remote_t rem;
    memcpy(&rem, est.pdata, sizeof(rem));
    assert_int_equal(rem.len, BIG);
    long t0 = now_ms();
    struct ibv_sge s = sge_of(&c, 0, BIG);
    assert_int_equal(post_send(c.id->qp, IBV_WR_RDMA_READ, 5, &s, 1, IBV_SEND_SIGNALED, rem.addr, rem.rkey, 0), 0);
    struct ibv_wc w = wc_wait(c.cq, 20000);
    assert_int_equal(w.status, IBV_WC_SUCCESS);
    assert_int_equal(w.opcode, IBV_WC_RDMA_READ);
    assert_int_equal(w.byte_len, BIG);
    long t1 = now_ms();
    uint32_t *words = (uint32_t *)c.buf;
    for (uint32_t i = 0; i < BIG / 4; i++)
        if (words[i] != i * 2654435761u) fail_msg("read word %u: 0x%x", i, words[i]);
    print_message("64 MiB RDMA READ in %ld ms\n", t1 - t0);
    /* a small plain write first: no completion at the target */
    for (uint32_t i = 0; i < BIG / 4; i++) words[i] = ~(i * 2654435761u);
    struct ibv_sge s1 = sge_of(&c, 0, 64);
    assert_int_equal(post_send(c.id->qp, IBV_WR_RDMA_WRITE, 6, &s1, 1, IBV_SEND_SIGNALED, rem.addr, rem.rkey, 0), 0);
    WC_EXPECT(c.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 5000);
    assert_int_equal(post_send(c.id->qp, IBV_WR_RDMA_WRITE_WITH_IMM, 7, &s, 1, IBV_SEND_SIGNALED, rem.addr,
                               rem.rkey, htonl(0x12345678)), 0);
    w = wc_wait(c.cq, 20000);
    assert_int_equal(w.status, IBV_WC_SUCCESS);
    assert_int_equal(w.opcode, IBV_WC_RDMA_WRITE);
    print_message("64 MiB RDMA WRITE_WITH_IMM in %ld ms\n", now_ms() - t1);
    assert_int_equal(rdma_disconnect(c.id), 0);
    cm_wait(c.ch, RDMA_CM_EVENT_DISCONNECTED, 3000);
    child_wait_ok(pid, 20000);
    ep_destroy(&c);
    close(rfd);
}

static void test_write_no_target_cqe(void **state)
{
    (void)state;
    pair_t p;
    pair_setup(&p, &OPTS_DEFAULT, &OPTS_DEFAULT);
    memcpy(p.c.buf, "one-sided", 10);
    struct ibv_sge s = sge_of(&p.c, 0, 10);
    assert_int_equal(post_send(p.c.id->qp, IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED,
                               (uintptr_t)p.s.buf + 100, p.s.mr->rkey, 0), 0);
    WC_EXPECT(p.c.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 2000);
    assert_string_equal((char *)p.s.buf + 100, "one-sided");
    assert_int_equal(wc_count(p.s.cq, 50), 0);
    /* a read back of it into another place */
    struct ibv_sge r = sge_of(&p.c, 1000, 10);
    assert_int_equal(post_send(p.c.id->qp, IBV_WR_RDMA_READ, 2, &r, 1, IBV_SEND_SIGNALED,
                               (uintptr_t)p.s.buf + 100, p.s.mr->rkey, 0), 0);
    WC_EXPECT(p.c.cq, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 2000);
    assert_string_equal((char *)p.c.buf + 1000, "one-sided");
    pair_teardown(&p);
}

/* ---- errors --------------------------------------------------------------------------- */

static void test_remote_access_errors(void **state)
{
    (void)state;
    for (int k = 0; k < 5; k++) {
        pair_t p;
        opts_t os = OPTS_DEFAULT;
        if (k == 2) os.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ; /* no remote write */
        if (k == 4) os.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE; /* no remote read */
        pair_setup(&p, &os, &OPTS_DEFAULT);
        struct ibv_sge rr = sge_of(&p.s, 0, 16);
        assert_int_equal(post_recv(p.s.id->qp, 50, &rr, 1), 0);
        struct ibv_sge s = sge_of(&p.c, 0, 64);
        uint64_t raddr = (uintptr_t)p.s.buf;
        uint32_t rkey = p.s.mr->rkey;
        int op = IBV_WR_RDMA_WRITE;
        if (k == 0) rkey ^= 0x5a5a; /* unknown rkey */
        if (k == 1) raddr += p.s.len - 32; /* runs past the end */
        if (k == 3) { rkey ^= 0x5a5a; op = IBV_WR_RDMA_READ; }
        if (k == 4) op = IBV_WR_RDMA_READ;
        assert_int_equal(post_send(p.c.id->qp, op, 1, &s, 1, 0 /* unsignaled: errors always complete */,
                                   raddr, rkey, 0), 0);
        struct ibv_wc w = wc_wait(p.c.cq, 2000);
        assert_int_equal(w.status, IBV_WC_REM_ACCESS_ERR);
        assert_int_equal(w.wr_id, 1);
        /* both QPs are in error: the target's receive flushes */
        w = wc_wait(p.s.cq, 2000);
        assert_int_equal(w.status, IBV_WC_WR_FLUSH_ERR);
        assert_int_equal(w.wr_id, 50);
        assert_int_equal(p.c.id->qp->state, IBV_QPS_ERR);
        assert_int_equal(p.s.id->qp->state, IBV_QPS_ERR);
        /* posts after the error flush */
        assert_int_equal(post_send(p.c.id->qp, IBV_WR_SEND, 2, &s, 1, 0, 0, 0, 0), 0);
        WC_EXPECT(p.c.cq, IBV_WC_WR_FLUSH_ERR, -1, 2000);
        pair_teardown(&p);
    }
    /* deregistered memory stops being valid at once */
    pair_t p;
    pair_setup(&p, &OPTS_DEFAULT, &OPTS_DEFAULT);
    uint32_t rkey = p.s.mr->rkey;
    assert_int_equal(ibv_dereg_mr(p.s.mr), 0);
    p.s.mr = NULL;
    struct ibv_sge s = sge_of(&p.c, 0, 64);
    assert_int_equal(post_send(p.c.id->qp, IBV_WR_RDMA_WRITE, 1, &s, 1, IBV_SEND_SIGNALED,
                               (uintptr_t)p.s.buf, rkey, 0), 0);
    WC_EXPECT(p.c.cq, IBV_WC_REM_ACCESS_ERR, -1, 2000);
    pair_teardown(&p);
}

static void test_local_errors(void **state)
{
    (void)state;
    pair_t p;
    pair_setup(&p, &OPTS_DEFAULT, &OPTS_DEFAULT);
    struct ibv_sge good = sge_of(&p.c, 0, 8);
    struct ibv_sge bad = sge_of(&p.c, 0, 8);
    bad.lkey ^= 0x777;
    struct ibv_sge past = sge_of(&p.c, p.c.len - 4, 8);
    struct ibv_sge rr = sge_of(&p.s, 0, 64);
    assert_int_equal(post_recv(p.s.id->qp, 1, &rr, 1), 0);
    /* a good one, then a bad lkey: the good one completes first, in order */
    assert_int_equal(post_send(p.c.id->qp, IBV_WR_SEND, 1, &good, 1, IBV_SEND_SIGNALED, 0, 0, 0), 0);
    assert_int_equal(post_send(p.c.id->qp, IBV_WR_SEND, 2, &bad, 1, IBV_SEND_SIGNALED, 0, 0, 0), 0);
    assert_int_equal(post_send(p.c.id->qp, IBV_WR_SEND, 3, &past, 1, IBV_SEND_SIGNALED, 0, 0, 0), 0);
    struct ibv_wc w = wc_wait(p.c.cq, 2000);
    assert_int_equal(w.wr_id, 1);
    assert_int_equal(w.status, IBV_WC_SUCCESS);
    w = wc_wait(p.c.cq, 2000);
    assert_int_equal(w.wr_id, 2);
    assert_int_equal(w.status, IBV_WC_LOC_PROT_ERR);
    w = wc_wait(p.c.cq, 2000);
    assert_int_equal(w.wr_id, 3);
    assert_int_equal(w.status, IBV_WC_WR_FLUSH_ERR);
    pair_teardown(&p);

    /* a range past the end of the MR; a read into memory without local write */
    for (int k = 0; k < 2; k++) {
        opts_t oc = OPTS_DEFAULT;
        if (k == 1) oc.access = 0;
        pair_setup(&p, &OPTS_DEFAULT, &oc);
        struct ibv_sge s = k == 0 ? sge_of(&p.c, p.c.len - 4, 8) : sge_of(&p.c, 0, 8);
        assert_int_equal(post_send(p.c.id->qp, k == 0 ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ, 9, &s, 1, 0,
                                   (uintptr_t)p.s.buf, p.s.mr->rkey, 0), 0);
        WC_EXPECT(p.c.cq, IBV_WC_LOC_PROT_ERR, -1, 2000);
        pair_teardown(&p);
    }

    /* a receive too short: LOC_LEN_ERR there, REM_INV_REQ_ERR here */
    pair_setup(&p, &OPTS_DEFAULT, &OPTS_DEFAULT);
    struct ibv_sge shortr = sge_of(&p.s, 0, 10);
    assert_int_equal(post_recv(p.s.id->qp, 5, &shortr, 1), 0);
    assert_int_equal(post_recv(p.s.id->qp, 6, &shortr, 1), 0);
    struct ibv_sge s = sge_of(&p.c, 0, 11);
    assert_int_equal(post_send(p.c.id->qp, IBV_WR_SEND, 7, &s, 1, IBV_SEND_SIGNALED, 0, 0, 0), 0);
    w = wc_wait(p.s.cq, 2000);
    assert_int_equal(w.wr_id, 5);
    assert_int_equal(w.status, IBV_WC_LOC_LEN_ERR);
    w = wc_wait(p.s.cq, 2000);
    assert_int_equal(w.wr_id, 6);
    assert_int_equal(w.status, IBV_WC_WR_FLUSH_ERR);
    w = wc_wait(p.c.cq, 2000);
    assert_int_equal(w.wr_id, 7);
    assert_int_equal(w.status, IBV_WC_REM_INV_REQ_ERR);
    pair_teardown(&p);
}

static void test_unsignaled_and_limits(void **state)
{
    (void)state;
    pair_t p;
    opts_t oc = OPTS_DEFAULT;
    oc.send_wr = 8;
    oc.recv_wr = 4;
    pair_setup(&p, &OPTS_DEFAULT, &oc);
    struct ibv_qp *qp = p.c.id->qp;
    struct ibv_sge s = sge_of(&p.c, 0, 8);
    uint64_t raddr = (uintptr_t)p.s.buf;
    uint32_t rkey = p.s.mr->rkey;
    /* 7 unsignaled sends and a signaled one, held at the target (no receive yet) */
    for (int i = 0; i < 7; i++)
        assert_int_equal(post_send(qp, IBV_WR_SEND, (uint64_t)i, &s, 1, 0, 0, 0, 0), 0);
    assert_int_equal(post_send(qp, IBV_WR_SEND, 7, &s, 1, IBV_SEND_SIGNALED, 0, 0, 0), 0);
    /* the queue is full now */
    assert_int_equal(post_send(qp, IBV_WR_RDMA_WRITE, 8, &s, 1, IBV_SEND_SIGNALED, raddr, rkey, 0), ENOMEM);
    struct ibv_sge rr = sge_of(&p.s, 0, 64);
    for (int i = 0; i < 8; i++) assert_int_equal(post_recv(p.s.id->qp, (uint64_t)i, &rr, 1), 0);
    /* one completion for the eight */
    struct ibv_wc w = wc_wait(p.c.cq, 2000);
    assert_int_equal(w.wr_id, 7);
    assert_int_equal(wc_count(p.c.cq, 30), 0);
    /* unsignaled ones keep their slots until a signaled one completes */
    for (int i = 0; i < 8; i++)
        assert_int_equal(post_send(qp, IBV_WR_RDMA_WRITE, 100, &s, 1, 0, raddr, rkey, 0), 0);
    sleep_ms(50);
    assert_int_equal(post_send(qp, IBV_WR_RDMA_WRITE, 101, &s, 1, IBV_SEND_SIGNALED, raddr, rkey, 0), ENOMEM);
    assert_int_equal(wc_count(p.c.cq, 0), 0);
    /* a chain: the failing WR is reported in bad_wr */
    struct ibv_recv_wr rw[6], *bad = NULL;
    memset(rw, 0, sizeof(rw));
    struct ibv_sge r = sge_of(&p.c, 0, 8);
    for (int i = 0; i < 6; i++) {
        rw[i].wr_id = (uint64_t)i;
        rw[i].sg_list = &r;
        rw[i].num_sge = 1;
        rw[i].next = i < 5 ? &rw[i + 1] : NULL;
    }
    assert_int_equal(ibv_post_recv(qp, rw, &bad), ENOMEM);
    assert_ptr_equal(bad, &rw[4]);
    /* too many SGEs */
    struct ibv_sge many[5] = { s, s, s, s, s };
    assert_int_equal(post_send(p.s.id->qp, IBV_WR_SEND, 1, many, 5, 0, 0, 0, 0), EINVAL);
    pair_teardown(&p);
}

static void test_cq_overrun(void **state)
{
    (void)state;
    pair_t p;
    opts_t oc = OPTS_DEFAULT;
    oc.cqe = 2;
    pair_setup(&p, &OPTS_DEFAULT, &oc);
    struct ibv_sge s = sge_of(&p.c, 0, 8);
    for (int i = 0; i < 3; i++)
        assert_int_equal(post_send(p.c.id->qp, IBV_WR_RDMA_WRITE, (uint64_t)i, &s, 1, IBV_SEND_SIGNALED,
                                   (uintptr_t)p.s.buf, p.s.mr->rkey, 0), 0);
    sleep_ms(100);
    struct ibv_wc w[4];
    assert_int_equal(ibv_poll_cq(p.c.cq, 4, w), -1);
    pair_teardown(&p);
}

static void test_comp_channel(void **state)
{
    (void)state;
    pair_t p;
    pair_setup(&p, &OPTS_DEFAULT, &OPTS_DEFAULT);
    /* a second CQ pair with a channel, on the server's context */
    struct ibv_context *ctx = p.s.id->verbs;
    struct ibv_comp_channel *cc = ibv_create_comp_channel(ctx);
    assert_non_null(cc);
    int fl = fcntl(cc->fd, F_GETFL);
    assert_int_equal(fcntl(cc->fd, F_SETFL, fl | O_NONBLOCK), 0);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, (void *)0xbeef, cc, 0);
    assert_non_null(cq);
    struct ibv_cq *evcq;
    void *evctx;
    errno = 0;
    assert_int_equal(ibv_get_cq_event(cc, &evcq, &evctx), -1);
    assert_int_equal(errno, EAGAIN);
    /* move the server's QP over: recreate the pair with the new CQ as recv CQ */
    pair_teardown(&p);
    ep_t s, c;
    memset(&s, 0, sizeof(s));
    memset(&c, 0, sizeof(c));
    /* (uses the channel on a context that stays: the listener's, after accept) */
    uint16_t port = ep_listen(&s);
    ep_connect_start(&c, port, NULL, 0, &OPTS_DEFAULT);
    cm_ev_t req = cm_wait(s.ch, RDMA_CM_EVENT_CONNECT_REQUEST, 3000);
    s.id = req.id;
    assert_ptr_equal(s.id->verbs, ctx); /* ids on one device share one context */
    s.pd = ibv_alloc_pd(ctx);
    s.len = 4096;
    s.buf = calloc(1, s.len);
    s.mr = ibv_reg_mr(s.pd, s.buf, s.len, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                   .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 } };
    assert_int_equal(rdma_create_qp(s.id, s.pd, &qa), 0);
    assert_int_equal(rdma_accept(s.id, NULL), 0);
    cm_wait(c.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
    cm_wait(s.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
    struct ibv_sge r = sge_of(&s, 0, 64), x = sge_of(&c, 0, 8);
    for (int i = 0; i < 4; i++) assert_int_equal(post_recv(s.id->qp, (uint64_t)i, &r, 1), 0);
    /* not armed: a completion makes no event */
    assert_int_equal(post_send(c.id->qp, IBV_WR_SEND, 0, &x, 1, 0, 0, 0, 0), 0);
    struct ibv_wc w = wc_wait(cq, 2000);
    assert_int_equal(w.wr_id, 0);
    struct pollfd pf = { .fd = cc->fd, .events = POLLIN };
    assert_int_equal(poll(&pf, 1, 50), 0);
    /* armed: one event for two completions */
    assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
    assert_int_equal(post_send(c.id->qp, IBV_WR_SEND, 1, &x, 1, 0, 0, 0, 0), 0);
    assert_int_equal(post_send(c.id->qp, IBV_WR_SEND, 2, &x, 1, 0, 0, 0, 0), 0);
    assert_int_equal(poll(&pf, 1, 2000), 1);
    assert_int_equal(ibv_get_cq_event(cc, &evcq, &evctx), 0);
    assert_ptr_equal(evcq, cq);
    assert_ptr_equal(evctx, (void *)0xbeef);
    sleep_ms(50);
    errno = 0;
    assert_int_equal(ibv_get_cq_event(cc, &evcq, &evctx), -1);
    assert_int_equal(errno, EAGAIN);
    assert_int_equal(poll(&pf, 1, 0), 0);
    /* unacked event: the CQ cannot go */
    assert_int_equal(wc_count(cq, 0), 2);
    /* re-arm: the next completion is an event again */
    assert_int_equal(ibv_req_notify_cq(cq, 0), 0);
    assert_int_equal(post_send(c.id->qp, IBV_WR_SEND, 3, &x, 1, 0, 0, 0, 0), 0);
    assert_int_equal(poll(&pf, 1, 2000), 1);
    assert_int_equal(ibv_get_cq_event(cc, &evcq, &evctx), 0);
    wc_wait(cq, 2000);
    assert_int_equal(rdma_disconnect(c.id), 0);
    cm_wait(s.ch, RDMA_CM_EVENT_DISCONNECTED, 3000);
    rdma_destroy_qp(s.id);
    assert_int_equal(ibv_destroy_cq(cq), EBUSY);
    assert_int_equal(ibv_destroy_comp_channel(cc), EBUSY);
    ibv_ack_cq_events(cq, 2);
    assert_int_equal(ibv_destroy_cq(cq), 0);
    assert_int_equal(ibv_destroy_comp_channel(cc), 0);
    ep_destroy(&c);
    ep_destroy(&s);
}

static void test_disconnect_flushes(void **state)
{
    (void)state;
    pair_t p;
    pair_setup(&p, &OPTS_DEFAULT, &OPTS_DEFAULT);
    struct ibv_sge r = sge_of(&p.s, 0, 64), x = sge_of(&p.c, 0, 8);
    for (int i = 0; i < 3; i++) assert_int_equal(post_recv(p.s.id->qp, (uint64_t)i, &r, 1), 0);
    for (int i = 0; i < 2; i++) assert_int_equal(post_recv(p.c.id->qp, 10 + (uint64_t)i, &x, 1), 0);
    assert_int_equal(rdma_disconnect(p.s.id), 0);
    cm_wait(p.s.ch, RDMA_CM_EVENT_DISCONNECTED, 3000);
    cm_wait(p.c.ch, RDMA_CM_EVENT_DISCONNECTED, 3000);
    for (int i = 0; i < 3; i++) {
        struct ibv_wc w = wc_wait(p.s.cq, 1000);
        assert_int_equal(w.status, IBV_WC_WR_FLUSH_ERR);
        assert_int_equal(w.wr_id, (uint64_t)i);
    }
    for (int i = 0; i < 2; i++) {
        struct ibv_wc w = wc_wait(p.c.cq, 1000);
        assert_int_equal(w.status, IBV_WC_WR_FLUSH_ERR);
        assert_int_equal(w.wr_id, 10 + (uint64_t)i);
    }
    /* later posts flush too */
    assert_int_equal(post_recv(p.s.id->qp, 99, &r, 1), 0);
    WC_EXPECT(p.s.cq, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 1000);
    assert_int_equal(post_send(p.c.id->qp, IBV_WR_SEND, 98, &x, 1, 0, 0, 0, 0), 0);
    WC_EXPECT(p.c.cq, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 1000);
    /* a QP still attached: destroying the id is refused */
    errno = 0;
    assert_int_equal(rdma_destroy_id(p.c.id), -1);
    assert_int_equal(errno, EBUSY);
    pair_teardown(&p);
}

static void test_peer_killed(void **state)
{
    (void)state;
    /* the child listens first: it reports its port through a second pipe */
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        in_child = 1;
        alarm(30);
        close(fds[0]);
        ep_t s;
        memset(&s, 0, sizeof(s));
        uint16_t port = ep_listen(&s);
        CHECK(write(fds[1], &port, sizeof(port)) == sizeof(port), "write port");
        ep_accept(&s, NULL, 0, &OPTS_DEFAULT);
        cm_wait(s.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
        for (;;) pause();
    }
    close(fds[1]);
    uint16_t port = read_port(fds[0]);
    ep_t c;
    memset(&c, 0, sizeof(c));
    ep_connect_start(&c, port, NULL, 0, &OPTS_DEFAULT);
    cm_wait(c.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
    struct ibv_sge r = sge_of(&c, 0, 64), x = sge_of(&c, 100, 8);
    assert_int_equal(post_recv(c.id->qp, 1, &r, 1), 0);
    assert_int_equal(post_recv(c.id->qp, 2, &r, 1), 0);
    /* the child posts no receive: this send stays outstanding (RNR) */
    assert_int_equal(post_send(c.id->qp, IBV_WR_SEND, 3, &x, 1, IBV_SEND_SIGNALED, 0, 0, 0), 0);
    assert_int_equal(post_send(c.id->qp, IBV_WR_SEND, 4, &x, 1, 0, 0, 0, 0), 0);
    assert_int_equal(wc_count(c.cq, 100), 0);
    long t0 = now_ms();
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    cm_wait(c.ch, RDMA_CM_EVENT_DISCONNECTED, 2000);
    struct ibv_wc w[8];
    int n = 0;
    while (n < 4 && now_ms() - t0 < 2000) {
        int k = ibv_poll_cq(c.cq, 8 - n, w + n);
        assert_true(k >= 0);
        n += k;
        if (n < 4) sleep_ms(1);
    }
    assert_int_equal(n, 4);
    assert_true(now_ms() - t0 < 2000);
    int seen = 0;
    for (int i = 0; i < n; i++) {
        if (w[i].wr_id == 3) assert_int_equal(w[i].status, IBV_WC_RETRY_EXC_ERR), seen |= 1;
        else if (w[i].wr_id == 4) assert_int_equal(w[i].status, IBV_WC_WR_FLUSH_ERR), seen |= 2;
        else assert_int_equal(w[i].status, IBV_WC_WR_FLUSH_ERR), seen |= 4 << w[i].wr_id;
    }
    assert_int_equal(seen, 1 | 2 | 8 | 16);
    close(fds[0]);
    ep_destroy(&c);
}

static void test_stray_clients(void **state)
{
    (void)state;
    ep_t s, c;
    memset(&s, 0, sizeof(s));
    memset(&c, 0, sizeof(c));
    uint16_t port = ep_listen(&s);
    struct sockaddr_in a = loopback(port);
    /* garbage, a half frame, a connect and close, and a frame with a bad magic */
    int g[4];
    for (int i = 0; i < 4; i++) {
        g[i] = socket(AF_INET, SOCK_STREAM, 0);
        assert_int_equal(connect(g[i], (struct sockaddr *)&a, sizeof(a)), 0);
    }
    const char junk[] = "GET / HTTP/1.0\r\nHost: x\r\n\r\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    assert_true(write(g[0], junk, sizeof(junk)) > 0);
    assert_true(write(g[1], junk, 10) > 0);
    close(g[2]);
    struct { struct emu_frame f; struct emu_hello h; } hello;
    memset(&hello, 0, sizeof(hello));
    hello.f.type = EMU_F_CONNECT;
    hello.f.len = sizeof(hello.h);
    hello.h.magic = 0x12345678;
    assert_true(write(g[3], &hello, sizeof(hello)) > 0);
    /* the emulator drops the garbage and the bad hello: EOF on those sockets */
    for (int i = 0; i < 4; i += 3) {
        struct pollfd p = { .fd = g[i], .events = POLLIN };
        assert_int_equal(poll(&p, 1, 2000), 1);
        char b[16];
        assert_true(read(g[i], b, sizeof(b)) <= 0);
        close(g[i]);
    }
    /* a good connection still works */
    ep_connect_start(&c, port, "ok", 2, &OPTS_DEFAULT);
    ep_accept(&s, NULL, 0, &OPTS_DEFAULT);
    cm_wait(c.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
    cm_wait(s.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
    struct ibv_sge r = sge_of(&s, 0, 64), x = sge_of(&c, 0, 8);
    assert_int_equal(post_recv(s.id->qp, 1, &r, 1), 0);
    assert_int_equal(post_send(c.id->qp, IBV_WR_SEND, 2, &x, 1, IBV_SEND_SIGNALED, 0, 0, 0), 0);
    WC_EXPECT(s.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 2000);
    WC_EXPECT(c.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 2000);
    close(g[1]);
    ep_destroy(&c);
    ep_destroy(&s);
}

/* a peer that speaks the wire protocol, then sends a malformed frame */
static void test_malformed_frame(void **state)
{
    (void)state;
    ep_t s;
    memset(&s, 0, sizeof(s));
    uint16_t port = ep_listen(&s);
    struct sockaddr_in a = loopback(port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct { struct emu_frame f; struct emu_hello h; } m;
    memset(&m, 0, sizeof(m));
    m.f.type = EMU_F_CONNECT;
    m.f.len = sizeof(m.h);
    m.h.magic = EMU_HELLO_MAGIC;
    m.h.version = EMU_HELLO_VERSION;
    m.h.qp_num = 4242;
    assert_int_equal(write(fd, &m, sizeof(m)), (ssize_t)sizeof(m));
    cm_ev_t req = ep_accept(&s, NULL, 0, &OPTS_DEFAULT);
    assert_int_equal(req.qp_num, 4242);
    struct ibv_sge r = sge_of(&s, 0, 64);
    assert_int_equal(post_recv(s.id->qp, 1, &r, 1), 0);
    /* read the ACCEPT, send RTU */
    size_t got = 0;
    while (got < sizeof(m)) {
        ssize_t k = read(fd, (char *)&m + got, sizeof(m) - got);
        assert_true(k > 0);
        got += (size_t)k;
    }
    assert_int_equal(m.f.type, EMU_F_ACCEPT);
    struct emu_frame f = { .type = EMU_F_RTU };
    assert_int_equal(write(fd, &f, sizeof(f)), (ssize_t)sizeof(f));
    cm_wait(s.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
    f.type = 99;
    assert_int_equal(write(fd, &f, sizeof(f)), (ssize_t)sizeof(f));
    cm_wait(s.ch, RDMA_CM_EVENT_DISCONNECTED, 3000);
    WC_EXPECT(s.cq, IBV_WC_WR_FLUSH_ERR, -1, 2000);
    assert_int_equal(s.id->qp->state, IBV_QPS_ERR);
    close(fd);
    ep_destroy(&s);
}

/* the parent has the device open (thread running) when it forks; the child uses its own */
static void test_fork_with_open_device(void **state)
{
    (void)state;
#if defined(__SANITIZE_THREAD__)
    print_message("ThreadSanitizer cannot start threads in the child of a threaded process\n");
    skip();
#endif
    ep_t s;
    memset(&s, 0, sizeof(s));
    uint16_t port = ep_listen(&s);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        in_child = 1;
        alarm(20);
        ep_t c;
        memset(&c, 0, sizeof(c));
        ep_connect_start(&c, port, "child", 5, &OPTS_DEFAULT);
        cm_wait(c.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
        struct ibv_sge x = sge_of(&c, 0, 8);
        memcpy(c.buf, "forked", 7);
        CHECK(post_send(c.id->qp, IBV_WR_SEND, 1, &x, 1, IBV_SEND_SIGNALED, 0, 0, 0) == 0, "post_send");
        struct ibv_wc w = wc_wait(c.cq, 3000);
        CHECK(w.status == IBV_WC_SUCCESS, "send: %s", ibv_wc_status_str(w.status));
        cm_wait(c.ch, RDMA_CM_EVENT_DISCONNECTED, 3000);
        ep_destroy(&c);
        _exit(0);
    }
    cm_ev_t req = ep_accept(&s, NULL, 0, &OPTS_DEFAULT);
    assert_memory_equal(req.pdata, "child", 5);
    struct ibv_sge r = sge_of(&s, 0, 64);
    assert_int_equal(post_recv(s.id->qp, 1, &r, 1), 0);
    cm_wait(s.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
    WC_EXPECT(s.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 3000);
    assert_string_equal((char *)s.buf, "forked");
    assert_int_equal(rdma_disconnect(s.id), 0);
    cm_wait(s.ch, RDMA_CM_EVENT_DISCONNECTED, 3000);
    child_wait_ok(pid, 10000);
    ep_destroy(&s);
}

/* IPv6 loopback, and OOBX_VERBS_EMU_MAP putting an address on a second device */
static void test_ipv6_and_map(void **state)
{
    (void)state;
    ep_t s, c;
    memset(&s, 0, sizeof(s));
    memset(&c, 0, sizeof(c));
    s.ch = rdma_create_event_channel();
    c.ch = rdma_create_event_channel();
    assert_int_equal(rdma_create_id(s.ch, &s.listen, NULL, RDMA_PS_TCP), 0);
    struct sockaddr_in6 a6;
    memset(&a6, 0, sizeof(a6));
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_loopback;
    if (rdma_bind_addr(s.listen, (struct sockaddr *)&a6) != 0) {
        print_message("no IPv6 loopback here (%s): the IPv6 half is skipped\n", strerror(errno));
    } else {
        assert_int_equal(rdma_listen(s.listen, 4), 0);
        a6.sin6_port = rdma_get_src_port(s.listen);
        assert_int_equal(rdma_create_id(c.ch, &c.id, NULL, RDMA_PS_TCP), 0);
        assert_int_equal(rdma_resolve_addr(c.id, NULL, (struct sockaddr *)&a6, 1000), 0);
        cm_wait(c.ch, RDMA_CM_EVENT_ADDR_RESOLVED, 2000);
        assert_int_equal(rdma_resolve_route(c.id, 1000), 0);
        cm_wait(c.ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 2000);
        ep_resources(&c, c.id->verbs, c.id, &OPTS_DEFAULT);
        assert_int_equal(rdma_connect(c.id, NULL), 0);
        ep_accept(&s, NULL, 0, &OPTS_DEFAULT);
        cm_wait(c.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
        cm_wait(s.ch, RDMA_CM_EVENT_ESTABLISHED, 3000);
        assert_int_equal(rdma_get_local_addr(c.id)->sa_family, AF_INET6);
        assert_true(rdma_get_src_port(c.id) != 0);
        assert_int_equal(rdma_get_dst_port(c.id), a6.sin6_port);
        struct ibv_sge r = sge_of(&s, 0, 64), x = sge_of(&c, 0, 8);
        assert_int_equal(post_recv(s.id->qp, 1, &r, 1), 0);
        assert_int_equal(post_send(c.id->qp, IBV_WR_SEND, 2, &x, 1, IBV_SEND_SIGNALED, 0, 0, 0), 0);
        WC_EXPECT(s.cq, IBV_WC_SUCCESS, IBV_WC_RECV, 2000);
        WC_EXPECT(c.cq, IBV_WC_SUCCESS, IBV_WC_SEND, 2000);
    }
    ep_destroy(&c);
    ep_destroy(&s);

    setenv("OOBX_VERBS_EMU_DEVICES", "emu0,emu1", 1);
    setenv("OOBX_VERBS_EMU_MAP", "emu1=127.0.0.2", 1);
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *id1, *id2;
    assert_int_equal(rdma_create_id(ch, &id1, NULL, RDMA_PS_TCP), 0);
    assert_int_equal(rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP), 0);
    struct sockaddr_in a = loopback(0);
    assert_int_equal(rdma_bind_addr(id1, (struct sockaddr *)&a), 0);
    a.sin_addr.s_addr = htonl(0x7f000002);
    assert_int_equal(rdma_bind_addr(id2, (struct sockaddr *)&a), 0);
    assert_string_equal(id1->verbs->device->name, "emu0");
    assert_string_equal(id2->verbs->device->name, "emu1");
    assert_ptr_not_equal(id1->verbs, id2->verbs);
    assert_int_equal(rdma_destroy_id(id1), 0);
    assert_int_equal(rdma_destroy_id(id2), 0);
    rdma_destroy_event_channel(ch);
    unsetenv("OOBX_VERBS_EMU_MAP");
    setenv("OOBX_VERBS_EMU_DEVICES", "", 1);
    /* no device: binding fails */
    ch = rdma_create_event_channel();
    assert_int_equal(rdma_create_id(ch, &id1, NULL, RDMA_PS_TCP), 0);
    a = loopback(0);
    errno = 0;
    assert_int_equal(rdma_bind_addr(id1, (struct sockaddr *)&a), -1);
    assert_int_equal(errno, ENODEV);
    assert_int_equal(rdma_destroy_id(id1), 0);
    rdma_destroy_event_channel(ch);
    unsetenv("OOBX_VERBS_EMU_DEVICES");
}

/* ---- life cycle -------------------------------------------------------------------- */

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int count_threads(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    fclose(f);
    return n;
}

static void test_open_close_cycles(void **state)
{
    (void)state;
    int fds0 = count_fds(), thr0 = count_threads();
    for (int i = 0; i < 200; i++) {
        int n;
        struct ibv_device **list = ibv_get_device_list(&n);
        assert_int_equal(n, 1);
        struct ibv_context *ctx = ibv_open_device(list[0]);
        ibv_free_device_list(list);
        assert_non_null(ctx);
        struct ibv_pd *pd = ibv_alloc_pd(ctx);
        struct ibv_comp_channel *cc = ibv_create_comp_channel(ctx);
        struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, cc, 0);
        assert_non_null(cq);
        assert_int_equal(ibv_destroy_cq(cq), 0);
        assert_int_equal(ibv_destroy_comp_channel(cc), 0);
        assert_int_equal(ibv_dealloc_pd(pd), 0);
        assert_int_equal(ibv_close_device(ctx), 0);
        ep_t s;
        memset(&s, 0, sizeof(s));
        ep_listen(&s);
        ep_destroy(&s);
    }
    assert_int_equal(count_fds(), fds0);
    assert_int_equal(count_threads(), thr0);
    /* and whole connections */
    for (int i = 0; i < 30; i++) {
        pair_t p;
        pair_setup(&p, &OPTS_DEFAULT, &OPTS_DEFAULT);
        if (i % 2) {
            assert_int_equal(rdma_disconnect(p.c.id), 0);
            cm_wait(p.s.ch, RDMA_CM_EVENT_DISCONNECTED, 2000);
        }
        pair_teardown(&p);
    }
    assert_int_equal(count_fds(), fds0);
    assert_int_equal(count_threads(), thr0);
}

/* ---- the LD_PRELOAD check ------------------------------------------------------------- */

static int run_capture(char *const argv[], const char *preload, char *out, size_t cap)
{
    int fds[2];
    if (pipe(fds)) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        if (preload) setenv("LD_PRELOAD", preload, 1);
        else unsetenv("LD_PRELOAD");
        alarm(20);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < cap && (k = read(fds[0], out + got, cap - 1 - got)) > 0) got += (size_t)k;
    out[got] = 0;
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The sanitizer runtime this program runs with ("" for none): in a sanitizer
 * build it must come first in LD_PRELOAD, ahead of the emulated device. */
static void sanitizer_runtime(char *out, size_t len)
{
    out[0] = 0;
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return;
    char line[PATH_MAX + 128];
    while (fgets(line, sizeof(line), f)) {
        char *path = strchr(line, '/');
        if (!path || !(strstr(path, "/libasan.so") || strstr(path, "/libtsan.so"))) continue;
        path[strcspn(path, "\n")] = 0;
        snprintf(out, len, "%s", path);
        break;
    }
    fclose(f);
}

static void test_ld_preload(void **state)
{
    (void)state;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    assert_true(n > 0);
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    *slash = 0; /* .../tests/unit */
    char prog[PATH_MAX + 64], so[PATH_MAX + 64], dl[PATH_MAX + 64], mod[PATH_MAX + 64];
    snprintf(prog, sizeof(prog), "%s/../verbs-emu/preload_check", exe);
    snprintf(dl, sizeof(dl), "%s/../verbs-emu/preload_dlopen", exe);
    snprintf(mod, sizeof(mod), "%s/../verbs-emu/preload_check_mod.so", exe);
    snprintf(so, sizeof(so), "%s/../verbs-emu/liboobx-verbs-emu.so", exe);
    if (access(prog, X_OK) != 0 || access(so, R_OK) != 0 || access(dl, X_OK) != 0 || access(mod, R_OK) != 0) {
        print_message("%s, %s, %s or %s not built\n", prog, dl, mod, so);
        fail();
    }
    char rt[PATH_MAX], preload[2 * PATH_MAX + 128];
    sanitizer_runtime(rt, sizeof(rt));
    snprintf(preload, sizeof(preload), "%s%s%s", rt, rt[0] ? ":" : "", so);
    if (rt[0]) print_message("sanitizer build: preloading %s first\n", rt);
    char out[4096];
    char *argv_full[] = { prog, "full", NULL };
    int st = run_capture(argv_full, preload, out, sizeof(out));
    print_message("under LD_PRELOAD: %s", out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "devices: 1 emu0"));
    assert_non_null(strstr(out, "ok"));
    /* a module linked with the real libraries, loaded with dlopen (as liboobx-verbs.so is) */
    char *argv_dl[] = { dl, mod, "full", NULL };
    st = run_capture(argv_dl, preload, out, sizeof(out));
    print_message("dlopen under LD_PRELOAD: %s", out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "devices: 1 emu0"));
    assert_non_null(strstr(out, "ok"));
    char *argv_list[] = { prog, NULL };
    st = run_capture(argv_list, NULL, out, sizeof(out));
    print_message("without: %s", out);
    assert_int_equal(st, 0);
    if (!strstr(out, "devices: 0")) {
        print_message("the real libibverbs finds a device here: the 'no device' half is skipped\n");
        skip();
    }
}

int main(void)
{
    alarm(240);
    unsetenv("OOBX_VERBS_EMU_DEVICES");
    unsetenv("OOBX_VERBS_EMU_MAP");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_cm_nonblocking),
        cmocka_unit_test(test_connect_private_data),
        cmocka_unit_test(test_reject),
        cmocka_unit_test(test_connect_closed_port),
        cmocka_unit_test(test_send_sizes),
        cmocka_unit_test(test_rnr_hold),
        cmocka_unit_test(test_paused_peer_close),
        cmocka_unit_test(test_many_small),
        cmocka_unit_test(test_write_no_target_cqe),
        cmocka_unit_test(test_read_write_64m),
        cmocka_unit_test(test_remote_access_errors),
        cmocka_unit_test(test_local_errors),
        cmocka_unit_test(test_unsignaled_and_limits),
        cmocka_unit_test(test_cq_overrun),
        cmocka_unit_test(test_comp_channel),
        cmocka_unit_test(test_disconnect_flushes),
        cmocka_unit_test(test_peer_killed),
        cmocka_unit_test(test_stray_clients),
        cmocka_unit_test(test_malformed_frame),
        cmocka_unit_test(test_fork_with_open_device),
        cmocka_unit_test(test_ipv6_and_map),
        cmocka_unit_test(test_open_close_cycles),
        cmocka_unit_test(test_ld_preload),
    };
    return cmocka_run_group_tests_name("verbs_emu", tests, NULL, NULL);
}
