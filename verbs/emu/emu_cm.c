/*
 * The emulated RDMA device, connection manager side: the librdmacm entry
 * points over TCP on the ids' own addresses.
 *
 * A listening id is a listening TCP socket on its IP:port. rdma_connect
 * opens a TCP connection to the peer's IP:port; that connection is the RC
 * connection for its whole life. The initiator sends CONNECT (its QP number,
 * private data, responder resources ...), the passive side answers ACCEPT or
 * REJECT, the initiator confirms with RTU. Events reach the id's event
 * channel through an eventfd (channel->fd), never synchronously from a call.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "emu.h"

static socklen_t emu_sa_len(const struct sockaddr *sa)
{
    return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static bool emu_sa_wildcard(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return false;
}

static uint16_t emu_sa_port(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) return ((const struct sockaddr_in *)sa)->sin_port;
    if (sa->sa_family == AF_INET6) return ((const struct sockaddr_in6 *)sa)->sin6_port;
    return 0;
}

static void emu_sa_set_port(struct sockaddr *sa, uint16_t port_be)
{
    if (sa->sa_family == AF_INET) ((struct sockaddr_in *)sa)->sin_port = port_be;
    else if (sa->sa_family == AF_INET6) ((struct sockaddr_in6 *)sa)->sin6_port = port_be;
}

static int emu_errno(int err)
{
    errno = err;
    return -1;
}

static void emu_sock_opts(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* attaches the id to the shared context of dev (id->verbs) */
static int emu_id_attach(struct emu_id *id, struct emu_dev *dev)
{
    if (id->ctx) return 0;
    struct emu_ctx *c = dev->cm_ctx;
    if (c) {
        c->refs++;
    } else {
        c = emu_ctx_new(dev);
        if (!c) return errno;
        c->shared = true;
        dev->cm_ctx = c;
    }
    id->ctx = c;
    id->id.verbs = &c->vctx.context;
    id->id.port_num = 1;
    return 0;
}

/* ---- events ----------------------------------------------------------------- */

void emu_cm_event(struct emu_id *id, int type, int status, struct emu_id *listen_id,
                  const struct emu_hello *h, size_t pdata_pad)
{
    struct emu_cmch *ch = id->ch;
    struct emu_cmev *e = calloc(1, sizeof(*e));
    if (!e) {
        emu_log("out of memory: %s event of a connection lost", rdma_event_str(type));
        return;
    }
    e->ch = ch;
    e->ev.id = &id->id;
    e->ev.listen_id = listen_id ? &listen_id->id : NULL;
    e->ev.event = type;
    e->ev.status = status;
    if (h) {
        size_t n = h->pdata_len < pdata_pad ? h->pdata_len : pdata_pad;
        memcpy(e->pdata, h->pdata, n);
        /* as on InfiniBand/RoCE, the whole private-data field arrives, zero padded */
        if (pdata_pad) {
            e->ev.param.conn.private_data = e->pdata;
            e->ev.param.conn.private_data_len = (uint8_t)pdata_pad;
        }
        e->ev.param.conn.responder_resources = h->responder_resources;
        e->ev.param.conn.initiator_depth = h->initiator_depth;
        e->ev.param.conn.flow_control = h->flow_control;
        e->ev.param.conn.retry_count = h->retry_count;
        e->ev.param.conn.rnr_retry_count = h->rnr_retry_count;
        e->ev.param.conn.srq = h->srq;
        e->ev.param.conn.qp_num = h->qp_num;
    }
    if (ch->tail) ch->tail->next = e;
    else ch->head = e;
    ch->tail = e;
    emu_fd_signal(ch->ch.fd, &ch->signaled, true);
}

struct rdma_event_channel *rdma_create_event_channel(void)
{
    struct emu_cmch *ch = calloc(1, sizeof(*ch));
    if (!ch) {
        errno = ENOMEM;
        return NULL;
    }
    ch->ch.fd = eventfd(0, EFD_CLOEXEC);
    if (ch->ch.fd < 0) {
        int err = errno;
        free(ch);
        errno = err;
        return NULL;
    }
    emu_lock();
    int err = emu_users_get();
    emu_unlock();
    if (err) {
        close(ch->ch.fd);
        free(ch);
        errno = err;
        return NULL;
    }
    return &ch->ch;
}

static void emu_cmch_free(struct emu_cmch *ch)
{
    while (ch->head) {
        struct emu_cmev *e = ch->head;
        ch->head = e->next;
        free(e);
    }
    close(ch->ch.fd);
    free(ch);
    emu_users_put();
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
    if (!channel) return;
    struct emu_cmch *ch = (struct emu_cmch *)channel;
    emu_lock();
    if (ch->nids > 0) {
        emu_log("rdma_destroy_event_channel: %d rdma_cm id(s) still use the channel (fd %d); "
                "it is freed when the last of them is destroyed", ch->nids, channel->fd);
        ch->closed = true;
    } else {
        emu_cmch_free(ch);
    }
    emu_unlock();
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
    if (!channel || !event) return emu_errno(EINVAL);
    struct emu_cmch *ch = (struct emu_cmch *)channel;
    for (;;) {
        emu_lock();
        struct emu_cmev *e = ch->head;
        if (e) {
            ch->head = e->next;
            if (!ch->head) {
                ch->tail = NULL;
                emu_fd_signal(ch->ch.fd, &ch->signaled, false);
            }
            e->next = NULL;
            e->ev.id->event = &e->ev;
            emu_unlock();
            *event = &e->ev;
            return 0;
        }
        emu_unlock();
        if (emu_fd_wait(channel->fd) < 0) return -1;
    }
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
    if (!event) return emu_errno(EINVAL);
    emu_lock();
    /* the id may be gone (destroyed before the ack); only clear its pointer when it is not */
    free(event);
    emu_unlock();
    return 0;
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
    static const char *const names[] = {
        [RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
        [RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
        [RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
        [RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
        [RDMA_CM_EVENT_CONNECT_REQUEST] = "RDMA_CM_EVENT_CONNECT_REQUEST",
        [RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
        [RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
        [RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
        [RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
        [RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
        [RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
        [RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
        [RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
        [RDMA_CM_EVENT_MULTICAST_ERROR] = "RDMA_CM_EVENT_MULTICAST_ERROR",
        [RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
        [RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
    };
    if ((unsigned)event < sizeof(names) / sizeof(names[0]) && names[event]) return names[event];
    return "UNKNOWN EVENT";
}

/* ---- ids ------------------------------------------------------------------------ */

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
                   enum rdma_port_space ps)
{
    if (!channel || !id) return emu_errno(EINVAL); /* synchronous ids are not emulated */
    if (ps != RDMA_PS_TCP && ps != RDMA_PS_IB) return emu_errno(EOPNOTSUPP);
    struct emu_id *e = calloc(1, sizeof(*e));
    if (!e) return emu_errno(ENOMEM);
    e->id.channel = channel;
    e->id.context = context;
    e->id.ps = ps;
    e->id.qp_type = IBV_QPT_RC;
    e->fd = -1;
    e->ch = (struct emu_cmch *)channel;
    emu_lock();
    e->ch->nids++;
    emu_unlock();
    *id = &e->id;
    return 0;
}

static void emu_id_free(struct emu_id *id);

/* drops the events of id not yet taken; connect requests it listened for go with their ids */
static void emu_id_drop_events(struct emu_id *id)
{
    struct emu_cmch *ch = id->ch;
    struct emu_cmev **pp = &ch->head;
    struct emu_cmev *orphans = NULL;
    ch->tail = NULL;
    while (*pp) {
        struct emu_cmev *e = *pp;
        bool mine = e->ev.id == &id->id;
        bool request = e->ev.listen_id == &id->id && e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST;
        if (mine || request) {
            *pp = e->next;
            if (request && !mine) {
                e->next = orphans;
                orphans = e;
            } else {
                free(e);
            }
        } else {
            ch->tail = e;
            pp = &e->next;
        }
    }
    if (!ch->head) emu_fd_signal(ch->ch.fd, &ch->signaled, false);
    while (orphans) {
        struct emu_cmev *e = orphans;
        orphans = e->next;
        emu_id_free((struct emu_id *)e->ev.id);
        free(e);
    }
}

static void emu_id_free(struct emu_id *id)
{
    emu_id_drop_events(id);
    if (id->listener) {
        for (struct emu_conn *c = emu_reg.conns, *next; c; c = next) {
            next = c->all_next;
            if (c->listener == id->listener) emu_conn_free(c);
        }
        id->listener->id = NULL;
        emu_poll_kill(&id->listener->p);
        id->listener = NULL;
    }
    if (id->conn) emu_conn_free(id->conn);
    if (id->fd >= 0) close(id->fd);
    struct emu_cmch *ch = id->ch;
    struct emu_ctx *ctx = id->ctx;
    free(id);
    emu_ctx_put(ctx);
    if (--ch->nids == 0 && ch->closed) emu_cmch_free(ch);
}

int rdma_destroy_id(struct rdma_cm_id *cmid)
{
    if (!cmid) return emu_errno(EINVAL);
    struct emu_id *id = (struct emu_id *)cmid;
    emu_lock();
    if (cmid->qp) {
        emu_log("rdma_destroy_id: the id still has QP %u; call rdma_destroy_qp first", cmid->qp->qp_num);
        emu_unlock();
        return emu_errno(EBUSY);
    }
    emu_id_free(id);
    emu_unlock();
    return 0;
}

static int emu_bind_locked(struct emu_id *id, const struct sockaddr *addr)
{
    if (id->state != EMU_ID_IDLE) return EINVAL;
    if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) return EAFNOSUPPORT;
    struct emu_dev *dev = emu_dev_for_addr(addr);
    if (!dev) return ENODEV;
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (addr->sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, addr, emu_sa_len(addr)) < 0) {
        int err = errno;
        close(fd);
        return err;
    }
    socklen_t len = sizeof(id->id.route.addr.src_storage);
    getsockname(fd, &id->id.route.addr.src_addr, &len);
    if (!emu_sa_wildcard(addr)) {
        int err = emu_id_attach(id, dev);
        if (err) {
            close(fd);
            return err;
        }
    }
    id->fd = fd;
    id->state = EMU_ID_BOUND;
    return 0;
}

int rdma_bind_addr(struct rdma_cm_id *cmid, struct sockaddr *addr)
{
    if (!cmid || !addr) return emu_errno(EINVAL);
    emu_lock();
    int err = emu_bind_locked((struct emu_id *)cmid, addr);
    emu_unlock();
    return err ? emu_errno(err) : 0;
}

int rdma_listen(struct rdma_cm_id *cmid, int backlog)
{
    struct emu_id *id = (struct emu_id *)cmid;
    if (!cmid) return emu_errno(EINVAL);
    emu_lock();
    if (id->state != EMU_ID_BOUND) {
        emu_unlock();
        return emu_errno(EINVAL);
    }
    struct emu_listener *l = calloc(1, sizeof(*l));
    if (!l || listen(id->fd, backlog > 0 ? backlog : 128) < 0) {
        int err = l ? errno : ENOMEM;
        free(l);
        emu_unlock();
        return emu_errno(err);
    }
    l->p.kind = EMU_POLL_LISTENER;
    l->p.fd = id->fd;
    l->id = id;
    id->fd = -1;
    id->listener = l;
    id->state = EMU_ID_LISTEN;
    emu_poll_set(&l->p, EPOLLIN);
    emu_unlock();
    return 0;
}

void emu_listener_on_events(struct emu_listener *l)
{
    for (int i = 0; i < 16; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd = accept4(l->p.fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
                char name[80];
                emu_addr_str(&l->id->id.route.addr.src_addr, name, sizeof(name));
                emu_log("accept on %s: %s", name, strerror(errno));
            }
            return;
        }
        emu_sock_opts(fd);
        struct emu_conn *c = emu_conn_new(fd, EMU_CONN_HELLO);
        if (!c) {
            close(fd);
            continue;
        }
        c->listener = l;
        emu_addr_str((struct sockaddr *)&ss, c->peer_name, sizeof(c->peer_name));
        emu_conn_events(c);
    }
}

int rdma_resolve_addr(struct rdma_cm_id *cmid, struct sockaddr *src_addr, struct sockaddr *dst_addr,
                      int timeout_ms)
{
    (void)timeout_ms;
    struct emu_id *id = (struct emu_id *)cmid;
    if (!cmid || !dst_addr || (dst_addr->sa_family != AF_INET && dst_addr->sa_family != AF_INET6))
        return emu_errno(EINVAL);
    emu_lock();
    int err = 0;
    if (src_addr && id->state == EMU_ID_IDLE) err = emu_bind_locked(id, src_addr);
    if (!err && id->state != EMU_ID_IDLE && id->state != EMU_ID_BOUND) err = EINVAL;
    if (err) {
        emu_unlock();
        return emu_errno(err);
    }
    memcpy(&id->id.route.addr.dst_addr, dst_addr, emu_sa_len(dst_addr));
    /* the source the kernel would route from */
    struct sockaddr_storage local;
    memset(&local, 0, sizeof(local));
    int status = 0;
    if (id->state == EMU_ID_BOUND && !emu_sa_wildcard(&id->id.route.addr.src_addr)) {
        memcpy(&local, &id->id.route.addr.src_storage, sizeof(local));
    } else {
        int fd = socket(dst_addr->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        socklen_t len = sizeof(local);
        if (fd < 0 || connect(fd, dst_addr, emu_sa_len(dst_addr)) < 0 ||
            getsockname(fd, (struct sockaddr *)&local, &len) < 0)
            status = -errno;
        if (fd >= 0) close(fd);
    }
    struct emu_dev *dev = status ? NULL : emu_dev_for_addr((struct sockaddr *)&local);
    if (!status && !dev) status = -ENODEV;
    if (!status) {
        int e = emu_id_attach(id, dev);
        if (e) status = -e;
    }
    if (status) {
        emu_cm_event(id, RDMA_CM_EVENT_ADDR_ERROR, status, NULL, NULL, 0);
        emu_unlock();
        return 0;
    }
    if (id->state == EMU_ID_BOUND) {
        uint16_t port = emu_sa_port(&id->id.route.addr.src_addr);
        memcpy(&id->id.route.addr.src_storage, &local, sizeof(local));
        emu_sa_set_port(&id->id.route.addr.src_addr, port);
    } else {
        memcpy(&id->id.route.addr.src_storage, &local, sizeof(local));
        emu_sa_set_port(&id->id.route.addr.src_addr, 0);
    }
    id->state = EMU_ID_ADDR_RESOLVED;
    emu_cm_event(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, NULL, 0);
    emu_unlock();
    return 0;
}

int rdma_resolve_route(struct rdma_cm_id *cmid, int timeout_ms)
{
    (void)timeout_ms;
    struct emu_id *id = (struct emu_id *)cmid;
    if (!cmid) return emu_errno(EINVAL);
    emu_lock();
    if (id->state != EMU_ID_ADDR_RESOLVED) {
        emu_unlock();
        return emu_errno(EINVAL);
    }
    id->state = EMU_ID_ROUTE_RESOLVED;
    emu_cm_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, NULL, 0);
    emu_unlock();
    return 0;
}

__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
    return emu_sa_port(&id->route.addr.src_addr);
}

__be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
    return emu_sa_port(&id->route.addr.dst_addr);
}

int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
    (void)level;
    (void)optname;
    (void)optval;
    (void)optlen;
    return id ? 0 : emu_errno(EINVAL); /* TOS, reuse-address, ack timeout: nothing to do here */
}

/* ---- QPs ------------------------------------------------------------------------ */

int rdma_create_qp(struct rdma_cm_id *cmid, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    struct emu_id *id = (struct emu_id *)cmid;
    if (!cmid || !attr) return emu_errno(EINVAL);
    emu_lock();
    int err = 0;
    if (!id->ctx || cmid->qp) err = EINVAL;
    if (!err && !pd) {
        if (!id->ctx->hidden_pd) id->ctx->hidden_pd = emu_pd_new(id->ctx, true);
        if (!id->ctx->hidden_pd) err = ENOMEM;
        else pd = &id->ctx->hidden_pd->pd;
    }
    if (!err && pd->context != cmid->verbs) err = EINVAL;
    struct emu_qp *qp = NULL;
    if (!err) {
        qp = emu_qp_new((struct emu_pd *)pd, attr);
        if (!qp) err = errno;
    }
    if (err) {
        emu_unlock();
        return emu_errno(err);
    }
    qp->id = id;
    cmid->qp = &qp->qp;
    if (id->conn) {
        qp->conn = id->conn;
        id->conn->qp = qp;
        qp->peer_qpn = id->conn->peer_qpn;
    }
    emu_unlock();
    return 0;
}

void rdma_destroy_qp(struct rdma_cm_id *cmid)
{
    if (!cmid || !cmid->qp) return;
    emu_lock();
    emu_qp_free((struct emu_qp *)cmid->qp);
    cmid->qp = NULL;
    emu_unlock();
}

/* ---- connecting ----------------------------------------------------------------- */

static void emu_hello_fill(struct emu_hello *h, const struct rdma_conn_param *p, uint32_t qpn,
                           const void *pdata, size_t pdata_len)
{
    memset(h, 0, sizeof(*h));
    h->magic = EMU_HELLO_MAGIC;
    h->version = EMU_HELLO_VERSION;
    h->qp_num = qpn;
    if (p) {
        h->responder_resources = p->responder_resources;
        h->initiator_depth = p->initiator_depth;
        h->flow_control = p->flow_control;
        h->retry_count = p->retry_count;
        h->rnr_retry_count = p->rnr_retry_count;
        h->srq = p->srq;
    }
    if (pdata && pdata_len) memcpy(h->pdata, pdata, pdata_len);
    h->pdata_len = (uint16_t)pdata_len;
}

int rdma_connect(struct rdma_cm_id *cmid, struct rdma_conn_param *param)
{
    struct emu_id *id = (struct emu_id *)cmid;
    if (!cmid) return emu_errno(EINVAL);
    size_t pdlen = param && param->private_data ? param->private_data_len : 0;
    if (pdlen > EMU_PDATA_CONNECT) return emu_errno(EINVAL);
    emu_lock();
    if (id->state != EMU_ID_ROUTE_RESOLVED || !cmid->qp || id->conn) {
        emu_unlock();
        return emu_errno(EINVAL);
    }
    const struct sockaddr *dst = &cmid->route.addr.dst_addr;
    int fd = id->fd;
    if (fd < 0) fd = socket(dst->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int err = errno;
        emu_unlock();
        return emu_errno(err);
    }
    id->fd = -1;
    emu_sock_opts(fd);
    struct emu_conn *c = emu_conn_new(fd, EMU_CONN_CONNECTING);
    if (!c) {
        close(fd);
        emu_unlock();
        return emu_errno(ENOMEM);
    }
    struct emu_qp *qp = (struct emu_qp *)cmid->qp;
    c->id = id;
    c->qp = qp;
    qp->conn = c;
    id->conn = c;
    id->state = EMU_ID_CONNECTING;
    emu_addr_str(dst, c->peer_name, sizeof(c->peer_name));
    emu_hello_fill(&c->hello_out, param, qp->qp.qp_num, param ? param->private_data : NULL, pdlen);
    int r = connect(fd, dst, emu_sa_len(dst));
    if (r < 0 && errno != EINPROGRESS && errno != EINTR) emu_cm_on_fail(c, errno);
    else emu_conn_events(c);
    emu_unlock();
    return 0;
}

void emu_cm_on_connected(struct emu_conn *c)
{
    struct emu_id *id = c->id;
    if (!id) {
        emu_conn_free(c);
        return;
    }
    socklen_t len = sizeof(id->id.route.addr.src_storage);
    getsockname(c->p.fd, &id->id.route.addr.src_addr, &len);
    c->state = EMU_CONN_WAIT_REPLY;
    if (emu_conn_send_ctrl(c, EMU_F_CONNECT, &c->hello_out)) {
        emu_cm_on_fail(c, ENOMEM);
        return;
    }
    emu_conn_pump(c);
}

/* a CONNECT (passive side) or an ACCEPT / REJECT (initiator) is in c->hello_in */
void emu_cm_on_hello(struct emu_conn *c)
{
    struct emu_hello *h = &c->hello_in;
    int type = c->rhdr.type;
    size_t max = type == EMU_F_CONNECT ? EMU_PDATA_CONNECT
                 : type == EMU_F_ACCEPT ? EMU_PDATA_ACCEPT : EMU_PDATA_REJECT;
    if (h->magic != EMU_HELLO_MAGIC || h->version != EMU_HELLO_VERSION || h->pdata_len > max) {
        char why[96];
        snprintf(why, sizeof(why), "bad connection frame (magic 0x%x, version %u, %u bytes of private data)",
                 h->magic, h->version, h->pdata_len);
        if (c->state == EMU_CONN_HELLO) {
            emu_dlog("dropping connection from %s: %s", c->peer_name, why);
            emu_conn_free(c);
        } else {
            emu_log("connection to %s: %s", c->peer_name, why);
            emu_cm_on_fail(c, EPROTO);
        }
        return;
    }
    if (type == EMU_F_CONNECT) {
        struct emu_listener *l = c->listener;
        struct emu_id *lid = l ? l->id : NULL;
        if (!lid) {
            emu_conn_free(c);
            return;
        }
        struct emu_id *id = calloc(1, sizeof(*id));
        if (!id) {
            emu_conn_free(c);
            return;
        }
        id->id.channel = lid->id.channel;
        id->id.context = lid->id.context;
        id->id.ps = lid->id.ps;
        id->id.qp_type = IBV_QPT_RC;
        id->ch = lid->ch;
        id->fd = -1;
        id->state = EMU_ID_PASSIVE;
        socklen_t len = sizeof(id->id.route.addr.src_storage);
        getsockname(c->p.fd, &id->id.route.addr.src_addr, &len);
        len = sizeof(id->id.route.addr.dst_storage);
        getpeername(c->p.fd, &id->id.route.addr.dst_addr, &len);
        struct emu_dev *dev = lid->ctx ? lid->ctx->dev : emu_dev_for_addr(&id->id.route.addr.src_addr);
        if (!dev || emu_id_attach(id, dev)) {
            emu_log("connect request from %s: no device for the local address", c->peer_name);
            free(id);
            emu_conn_free(c);
            return;
        }
        id->ch->nids++;
        id->conn = c;
        c->id = id;
        c->listener = NULL;
        c->state = EMU_CONN_REQ;
        c->peer_qpn = h->qp_num;
        emu_cm_event(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0, lid, h, EMU_PDATA_CONNECT);
        return;
    }
    struct emu_id *id = c->id;
    if (!id) {
        emu_conn_close(c);
        return;
    }
    if (type == EMU_F_REJECT) {
        emu_conn_close(c);
        emu_cm_event(id, RDMA_CM_EVENT_REJECTED, EMU_REJ_CONSUMER, NULL, h, EMU_PDATA_REJECT);
        return;
    }
    /* ACCEPT */
    c->peer_qpn = h->qp_num;
    if (c->qp) {
        c->qp->peer_qpn = h->qp_num;
        if (c->qp->qp.state != IBV_QPS_ERR) c->qp->qp.state = IBV_QPS_RTS;
    }
    c->state = EMU_CONN_UP;
    emu_conn_send_ctrl(c, EMU_F_RTU, NULL);
    emu_cm_event(id, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, h, EMU_PDATA_ACCEPT);
}

void emu_cm_on_rtu(struct emu_conn *c)
{
    c->state = EMU_CONN_UP;
    if (c->id) emu_cm_event(c->id, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, NULL, 0);
}

void emu_cm_on_fail(struct emu_conn *c, int err)
{
    struct emu_id *id = c->id;
    struct emu_qp *qp = c->qp;
    int state = c->state;
    if (state == EMU_CONN_HELLO || !id) {
        emu_dlog("connection from %s closed before its connect request: %s", c->peer_name,
                 err ? strerror(err) : "disconnect");
        emu_conn_free(c);
        return;
    }
    emu_conn_close(c);
    switch (state) {
    case EMU_CONN_CONNECTING:
        if (err == ECONNREFUSED)
            emu_cm_event(id, RDMA_CM_EVENT_REJECTED, EMU_REJ_NO_LISTEN, NULL, NULL, 0);
        else
            emu_cm_event(id, RDMA_CM_EVENT_UNREACHABLE, -err, NULL, NULL, 0);
        break;
    case EMU_CONN_WAIT_REPLY:
    case EMU_CONN_WAIT_RTU:
        if (qp) emu_qp_error(qp, 0);
        emu_cm_event(id, RDMA_CM_EVENT_CONNECT_ERROR, err ? -err : -ECONNRESET, NULL, NULL, 0);
        break;
    case EMU_CONN_REQ:
        c->peer_gone = true;
        break;
    case EMU_CONN_UP:
        /* the peer disconnected (err 0): flush; the peer is gone: what the retries would end with */
        if (qp) emu_qp_error(qp, err ? IBV_WC_RETRY_EXC_ERR : 0);
        emu_cm_event(id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, NULL, 0);
        break;
    default: /* REJECTING, CLOSING, DEAD: nothing more to say */
        break;
    }
}

int rdma_accept(struct rdma_cm_id *cmid, struct rdma_conn_param *param)
{
    struct emu_id *id = (struct emu_id *)cmid;
    if (!cmid) return emu_errno(EINVAL);
    size_t pdlen = param && param->private_data ? param->private_data_len : 0;
    if (pdlen > EMU_PDATA_ACCEPT) return emu_errno(EINVAL);
    emu_lock();
    struct emu_conn *c = id->conn;
    if (!c || !cmid->qp || (c->state != EMU_CONN_REQ && !c->peer_gone)) {
        emu_unlock();
        return emu_errno(EINVAL);
    }
    struct emu_qp *qp = (struct emu_qp *)cmid->qp;
    if (c->peer_gone) {
        c->peer_gone = false;
        emu_qp_error(qp, 0);
        emu_cm_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET, NULL, NULL, 0);
        emu_unlock();
        return 0;
    }
    struct emu_hello h;
    emu_hello_fill(&h, param, qp->qp.qp_num, param ? param->private_data : NULL, pdlen);
    if (emu_conn_send_ctrl(c, EMU_F_ACCEPT, &h)) {
        emu_unlock();
        return emu_errno(ENOMEM);
    }
    /* as librdmacm does, the passive side's QP is ready to send once it accepts */
    if (qp->qp.state != IBV_QPS_ERR) qp->qp.state = IBV_QPS_RTS;
    c->state = EMU_CONN_WAIT_RTU;
    emu_conn_pump(c);
    emu_unlock();
    return 0;
}

int rdma_reject(struct rdma_cm_id *cmid, const void *private_data, uint8_t private_data_len)
{
    struct emu_id *id = (struct emu_id *)cmid;
    if (!cmid) return emu_errno(EINVAL);
    size_t pdlen = private_data ? private_data_len : 0;
    if (pdlen > EMU_PDATA_REJECT) return emu_errno(EINVAL);
    emu_lock();
    struct emu_conn *c = id->conn;
    if (!c || (c->state != EMU_CONN_REQ && !c->peer_gone)) {
        emu_unlock();
        return emu_errno(EINVAL);
    }
    if (c->peer_gone) {
        c->peer_gone = false;
        emu_unlock();
        return 0;
    }
    struct emu_hello h;
    emu_hello_fill(&h, NULL, 0, private_data, pdlen);
    if (emu_conn_send_ctrl(c, EMU_F_REJECT, &h)) {
        emu_unlock();
        return emu_errno(ENOMEM);
    }
    c->state = EMU_CONN_REJECTING;
    emu_conn_pump(c);
    emu_unlock();
    return 0;
}

int rdma_disconnect(struct rdma_cm_id *cmid)
{
    struct emu_id *id = (struct emu_id *)cmid;
    if (!cmid) return emu_errno(EINVAL);
    emu_lock();
    struct emu_conn *c = id->conn;
    struct emu_qp *qp = (struct emu_qp *)cmid->qp;
    if (!c) {
        emu_unlock();
        return emu_errno(EINVAL);
    }
    switch (c->state) {
    case EMU_CONN_UP:
    case EMU_CONN_WAIT_RTU:
        c->state = EMU_CONN_CLOSING;
        emu_conn_drop_requests(c);
        emu_conn_send_ctrl(c, EMU_F_DISC, NULL);
        if (qp) emu_qp_error(qp, 0);
        emu_cm_event(id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, NULL, 0);
        emu_conn_pump(c);
        break;
    case EMU_CONN_CONNECTING:
    case EMU_CONN_WAIT_REPLY:
        emu_conn_close(c);
        if (qp) emu_qp_error(qp, 0);
        break;
    case EMU_CONN_REQ:
    case EMU_CONN_HELLO:
        emu_unlock();
        return emu_errno(EINVAL);
    default:
        break; /* already disconnected */
    }
    emu_unlock();
    return 0;
}
