/*
 * The emulated RDMA device, data path: RC queue pairs over one TCP connection
 * each, executed by the device thread of each side.
 *
 * Every work request is one frame (struct emu_frame, then its payload). The
 * responder executes requests in arrival order -- that is, in the posting
 * order of the initiator -- and answers each with an ACK, a NAK or, for a
 * read, a READ_RESP that carries the data; the initiator completes its send
 * queue in order on these answers. Payloads move between the socket and the
 * registered memory directly (readv/sendmsg on the user's buffers, after the
 * key and range checks), through a 64 KiB staging buffer only for small
 * frames, so a 64 MiB read or write needs no extra memory.
 *
 * A SEND or WRITE_WITH_IMM that finds no posted receive is held, with every
 * request behind it, until the application posts one (RNR retry without
 * limit): small ones (up to 32 KiB, at most 1 MiB per QP) are copied aside,
 * a larger one stops reading the socket at its header.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/uio.h>

#include "emu.h"

#define EMU_HOLD_FRAME_MAX (32u * 1024)   /* a held request up to this size is copied aside */
#define EMU_HOLD_CAP       (1u << 20)     /* bytes copied aside per QP */
#define EMU_IO_BUDGET      (8u << 20)     /* bytes moved per call before yielding the lock */
#define EMU_IOV_MAX        64

_Static_assert(sizeof(struct emu_frame) == 32, "wire frame is 32 bytes");
_Static_assert(sizeof(struct emu_hello) <= EMU_MAX_INLINE, "hello fits a tx header buffer");

static const uint8_t emu_zeros[65536];

void emu_addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s->sin_addr, ip, sizeof(ip));
        port = ntohs(s->sin_port);
        snprintf(buf, len, "%s:%u", ip, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof(ip));
        port = ntohs(s->sin6_port);
        snprintf(buf, len, "[%s]:%u", ip, port);
    } else {
        snprintf(buf, len, "(family %d)", sa->sa_family);
    }
}

/* ---- memory checks ------------------------------------------------------ */

/* the MR range [iova, iova+length) holds [addr, addr+len) */
static bool emu_mr_covers(const struct emu_mr *m, uint64_t addr, uint64_t len)
{
    if (addr < m->iova) return false;
    uint64_t off = addr - m->iova;
    return off <= m->mr.length && len <= m->mr.length - off;
}

/* a local SGE: known lkey on the QP's PD, inside the MR, with the access asked */
static bool emu_local_seg(struct emu_qp *qp, const struct ibv_sge *sge, unsigned need,
                          struct emu_seg *out)
{
    struct emu_mr *m = emu_mr_find(sge->lkey);
    if (!m || m->dead || m->mr.pd != qp->qp.pd || (m->access & need) != need ||
        !emu_mr_covers(m, sge->addr, sge->length))
        return false;
    emu_mr_ref(m);
    out->mr = m;
    out->ptr = (uint8_t *)m->mr.addr + (sge->addr - m->iova);
    out->len = sge->length;
    return true;
}

/* a remote access checked at the target: rkey on the QP's PD, range, access */
static bool emu_remote_seg(struct emu_qp *qp, uint64_t raddr, uint32_t rkey, uint64_t len,
                           unsigned need, struct emu_seg *out)
{
    struct emu_mr *m = emu_mr_find(rkey);
    if (!m || m->dead || m->mr.pd != qp->qp.pd || (m->access & need) != need ||
        !emu_mr_covers(m, raddr, len))
        return false;
    emu_mr_ref(m);
    out->mr = m;
    out->ptr = (uint8_t *)m->mr.addr + (raddr - m->iova);
    out->len = len;
    return true;
}

/* ---- sinks: where incoming payload bytes go ------------------------------- */

static void emu_sink_reset(struct emu_sink *s)
{
    emu_seg_release(s->seg, s->nseg);
    s->kind = EMU_SINK_DISCARD;
    s->nseg = s->cur = 0;
    s->off = 0;
}

static void emu_sink_add(struct emu_sink *s, struct emu_seg g)
{
    s->kind = EMU_SINK_SEGS;
    if (g.len == 0) {
        emu_mr_unref(g.mr);
        return;
    }
    s->seg[s->nseg++] = g;
}

static void emu_sink_put(struct emu_sink *s, const uint8_t *src, size_t n)
{
    if (s->kind == EMU_SINK_DISCARD) return;
    while (n > 0 && s->cur < s->nseg) {
        struct emu_seg *g = &s->seg[s->cur];
        size_t k = g->len - s->off;
        if (k > n) k = n;
        if (!g->mr || !g->mr->dead) memcpy(g->ptr + s->off, src, k);
        src += k;
        n -= k;
        s->off += k;
        if (s->off == g->len) {
            s->cur++;
            s->off = 0;
        }
    }
}

/* reads straight from the socket into the sink; -2: not possible, use the staging buffer */
static ssize_t emu_sink_readv(int fd, struct emu_sink *s, size_t max)
{
    if (s->kind != EMU_SINK_SEGS || s->cur >= s->nseg) return -2;
    struct iovec iov[EMU_MAX_SGE];
    int n = 0;
    size_t total = 0;
    for (int i = s->cur; i < s->nseg && total < max; i++) {
        struct emu_seg *g = &s->seg[i];
        if (g->mr && g->mr->dead) break;
        size_t off = i == s->cur ? s->off : 0;
        size_t len = g->len - off;
        if (len > max - total) len = max - total;
        iov[n].iov_base = g->ptr + off;
        iov[n].iov_len = len;
        total += len;
        n++;
    }
    if (n == 0) return -2;
    ssize_t r = readv(fd, iov, n);
    if (r > 0) {
        size_t left = (size_t)r;
        while (left > 0) {
            struct emu_seg *g = &s->seg[s->cur];
            size_t k = g->len - s->off;
            if (k > left) k = left;
            s->off += k;
            left -= k;
            if (s->off == g->len) {
                s->cur++;
                s->off = 0;
            }
        }
    }
    return r;
}

/* ---- transmit queue ------------------------------------------------------ */

static struct emu_tx *emu_tx_new(int nseg)
{
    struct emu_tx *t = calloc(1, sizeof(*t) + (size_t)nseg * sizeof(struct emu_seg));
    return t;
}

static void emu_tx_free(struct emu_tx *t)
{
    emu_seg_release(t->seg, t->nseg);
    free(t);
}

static void emu_tx_append(struct emu_conn *c, struct emu_tx *t)
{
    t->next = NULL;
    if (c->tx_tail) c->tx_tail->next = t;
    else c->tx_head = t;
    c->tx_tail = t;
}

static struct emu_tx *emu_tx_frame(const struct emu_frame *f, const void *extra, size_t extra_len,
                                   int nseg)
{
    struct emu_tx *t = emu_tx_new(nseg);
    if (!t) return NULL;
    memcpy(t->hdr, f, sizeof(*f));
    if (extra_len) memcpy(t->hdr + sizeof(*f), extra, extra_len);
    t->hlen = sizeof(*f) + extra_len;
    return t;
}

int emu_conn_send_ctrl(struct emu_conn *c, int type, const struct emu_hello *h)
{
    struct emu_frame f = { .type = (uint8_t)type, .len = h ? sizeof(*h) : 0 };
    struct emu_tx *t = emu_tx_frame(&f, h, h ? sizeof(*h) : 0, 0);
    if (!t) return ENOMEM;
    emu_tx_append(c, t);
    return 0;
}

static void emu_send_answer(struct emu_conn *c, int type, uint64_t seq, int status)
{
    struct emu_frame f = { .type = (uint8_t)type, .status = (uint8_t)status, .seq = seq };
    struct emu_tx *t = emu_tx_frame(&f, NULL, 0, 0);
    if (t) emu_tx_append(c, t);
    else emu_log("out of memory for an answer to %s", c->peer_name);
}

/* our own requests that have not started to go out: dropped when the QP fails */
void emu_conn_drop_requests(struct emu_conn *c)
{
    struct emu_tx **pp = &c->tx_head;
    c->tx_tail = NULL;
    while (*pp) {
        struct emu_tx *t = *pp;
        if (t->own_request && !t->started) {
            *pp = t->next;
            emu_tx_free(t);
        } else {
            c->tx_tail = t;
            pp = &t->next;
        }
    }
}

void emu_conn_events(struct emu_conn *c)
{
    if (c->p.fd < 0) return;
    uint32_t want = 0;
    if (c->state == EMU_CONN_CONNECTING) {
        want = EPOLLOUT;
    } else {
        /* paused: still told when the peer closes (it cannot send anything else we would read) */
        want |= c->rx_paused ? EPOLLRDHUP : EPOLLIN | EPOLLRDHUP;
        if (c->tx_head) want |= EPOLLOUT;
    }
    emu_poll_set(&c->p, want);
}

static void emu_conn_lost(struct emu_conn *c, int err)
{
    emu_cm_on_fail(c, err ? err : ECONNRESET);
}

void emu_conn_pump(struct emu_conn *c)
{
    if (c->p.fd < 0 || c->state == EMU_CONN_CONNECTING) return;
    size_t budget = EMU_IO_BUDGET;
    while (c->tx_head && budget > 0) {
        struct iovec iov[EMU_IOV_MAX];
        int n = 0;
        bool stop = false;
        for (struct emu_tx *t = c->tx_head; t && n < EMU_IOV_MAX - 1 && !stop; t = t->next) {
            if (t->hoff < t->hlen) {
                iov[n].iov_base = t->hdr + t->hoff;
                iov[n].iov_len = t->hlen - t->hoff;
                n++;
            }
            for (int i = t->cur; i < t->nseg && n < EMU_IOV_MAX; i++) {
                struct emu_seg *g = &t->seg[i];
                size_t off = i == t->cur ? t->off : 0;
                size_t len = g->len - off;
                if (g->mr && g->mr->dead) {
                    /* deregistered under a transfer: the rest goes out as zeros */
                    iov[n].iov_base = (void *)emu_zeros;
                    iov[n].iov_len = len < sizeof(emu_zeros) ? len : sizeof(emu_zeros);
                    n++;
                    stop = true;
                    break;
                }
                iov[n].iov_base = g->ptr + off;
                iov[n].iov_len = len;
                n++;
            }
            if (t->cur < t->nseg && n == EMU_IOV_MAX) stop = true;
        }
        struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)n };
        ssize_t r = sendmsg(c->p.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            emu_conn_lost(c, errno);
            return;
        }
        size_t left = (size_t)r;
        budget = left >= budget ? 0 : budget - left;
        while (left > 0 && c->tx_head) {
            struct emu_tx *t = c->tx_head;
            t->started = true;
            if (t->hoff < t->hlen) {
                size_t k = t->hlen - t->hoff;
                if (k > left) k = left;
                t->hoff += k;
                left -= k;
            }
            while (left > 0 && t->cur < t->nseg) {
                size_t k = t->seg[t->cur].len - t->off;
                if (k > left) k = left;
                t->off += k;
                left -= k;
                if (t->off == t->seg[t->cur].len) {
                    t->cur++;
                    t->off = 0;
                }
            }
            if (t->hoff == t->hlen && t->cur == t->nseg) {
                c->tx_head = t->next;
                if (!c->tx_head) c->tx_tail = NULL;
                emu_tx_free(t);
            }
        }
        /* items with nothing left (all bytes counted) */
        while (c->tx_head && c->tx_head->hoff == c->tx_head->hlen && c->tx_head->cur == c->tx_head->nseg) {
            struct emu_tx *t = c->tx_head;
            c->tx_head = t->next;
            if (!c->tx_head) c->tx_tail = NULL;
            emu_tx_free(t);
        }
    }
    if (!c->tx_head && c->state == EMU_CONN_REJECTING) {
        emu_conn_close(c);
        return;
    }
    if (!c->tx_head && c->state == EMU_CONN_CLOSING && !c->wr_shut) {
        /* DISC is out: the end of stream tells a peer that is not reading (RNR) */
        shutdown(c->p.fd, SHUT_WR);
        c->wr_shut = true;
    }
    emu_conn_events(c);
}

/* ---- connections ---------------------------------------------------------- */

struct emu_conn *emu_conn_new(int fd, int state)
{
    struct emu_conn *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->rbuf = malloc(EMU_RBUF);
    if (!c->rbuf) {
        free(c);
        return NULL;
    }
    c->p.kind = EMU_POLL_CONN;
    c->p.fd = fd;
    c->state = state;
    c->rx_state = EMU_RX_HDR;
    snprintf(c->peer_name, sizeof(c->peer_name), "?");
    c->all_next = emu_reg.conns;
    if (emu_reg.conns) emu_reg.conns->all_prev = c;
    emu_reg.conns = c;
    return c;
}

/* the frame being received no longer has a use: its bytes are read and dropped */
static void emu_conn_abort_rx(struct emu_conn *c, struct emu_qp *qp)
{
    if (c->rx_rwr) {
        if (qp && qp->qp.recv_cq) {
            struct ibv_wc wc = { .wr_id = c->rx_rwr->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
                                 .opcode = IBV_WC_RECV, .qp_num = qp->qp.qp_num };
            emu_cq_push((struct emu_cq *)qp->qp.recv_cq, &wc);
        }
        free(c->rx_rwr);
        c->rx_rwr = NULL;
    }
    if (c->rx_held) {
        free(c->rx_held->data);
        free(c->rx_held);
        c->rx_held = NULL;
    }
    if (c->rx_state == EMU_RX_PAYLOAD && c->rx_done != EMU_DONE_HELLO) {
        emu_sink_reset(&c->sink);
        c->rx_done = EMU_DONE_NONE;
    }
}

void emu_conn_close(struct emu_conn *c)
{
    if (c->p.fd >= 0) {
        if (c->p.registered && emu_reg.epfd >= 0) epoll_ctl(emu_reg.epfd, EPOLL_CTL_DEL, c->p.fd, NULL);
        c->p.registered = false;
        close(c->p.fd);
        c->p.fd = -1;
    }
    c->state = EMU_CONN_DEAD;
    while (c->tx_head) {
        struct emu_tx *t = c->tx_head;
        c->tx_head = t->next;
        emu_tx_free(t);
    }
    c->tx_tail = NULL;
    emu_conn_abort_rx(c, c->qp);
    emu_sink_reset(&c->sink);
    c->rx_paused = false;
}

void emu_conn_free(struct emu_conn *c)
{
    if (c->qp) c->qp->conn = NULL;
    emu_conn_close(c);
    c->qp = NULL;
    if (c->id) c->id->conn = NULL;
    c->id = NULL;
    if (c->all_prev) c->all_prev->all_next = c->all_next;
    else emu_reg.conns = c->all_next;
    if (c->all_next) c->all_next->all_prev = c->all_prev;
    emu_poll_kill(&c->p);
}

static void emu_conn_bad(struct emu_conn *c, const char *why)
{
    if (c->state == EMU_CONN_HELLO) {
        emu_dlog("dropping connection from %s: %s", c->peer_name, why);
        emu_conn_free(c);
        return;
    }
    emu_log("malformed frame from %s (QP %u): %s; the QP goes to the error state", c->peer_name,
            c->qp ? c->qp->qp.qp_num : 0, why);
    emu_cm_on_fail(c, EPROTO);
}

/* ---- QPs --------------------------------------------------------------------- */

static void emu_wc_send(struct emu_qp *qp, const struct emu_swr *w, int status)
{
    struct ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    wc.wr_id = w->wr_id;
    wc.status = status;
    switch (w->opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM: wc.opcode = IBV_WC_RDMA_WRITE; break;
    case IBV_WR_RDMA_READ: wc.opcode = IBV_WC_RDMA_READ; break;
    default: wc.opcode = IBV_WC_SEND; break;
    }
    wc.byte_len = (uint32_t)w->len;
    wc.qp_num = qp->qp.qp_num;
    wc.src_qp = qp->peer_qpn;
    emu_cq_push((struct emu_cq *)qp->qp.send_cq, &wc);
}

static void emu_wc_recv_flush(struct emu_qp *qp, uint64_t wr_id)
{
    struct ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    wc.wr_id = wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qp->qp.qp_num;
    emu_cq_push((struct emu_cq *)qp->qp.recv_cq, &wc);
}

static void emu_swr_free(struct emu_swr *w)
{
    emu_seg_release(w->seg, w->nseg);
    free(w);
}

static struct emu_swr *emu_sq_pop(struct emu_qp *qp)
{
    struct emu_swr *w = qp->sq_head;
    qp->sq_head = w->next;
    if (!qp->sq_head) qp->sq_tail = NULL;
    qp->sq_count--;
    return w;
}

static void emu_sq_complete(struct emu_qp *qp, int status)
{
    struct emu_swr *w = emu_sq_pop(qp);
    if (status == IBV_WC_SUCCESS) {
        if (w->signaled) {
            emu_wc_send(qp, w, status);
            qp->unsig_done = 0; /* a signaled completion frees the slots of the unsignaled before it */
        } else {
            qp->unsig_done++;
        }
        emu_swr_free(w);
        return;
    }
    emu_wc_send(qp, w, status);
    emu_swr_free(w);
    emu_qp_error(qp, 0);
}

/* a WR whose local check failed completes, in order, when it is the oldest */
static void emu_sq_progress(struct emu_qp *qp)
{
    while (qp->sq_head && qp->sq_head->local_err && qp->qp.state != IBV_QPS_ERR)
        emu_sq_complete(qp, qp->sq_head->local_err);
}

void emu_qp_error(struct emu_qp *qp, int first_status)
{
    if (qp->qp.state == IBV_QPS_ERR) return;
    qp->qp.state = IBV_QPS_ERR;
    bool first = true;
    while (qp->sq_head) {
        struct emu_swr *w = emu_sq_pop(qp);
        emu_wc_send(qp, w, first && first_status ? first_status : IBV_WC_WR_FLUSH_ERR);
        first = false;
        emu_swr_free(w);
    }
    qp->sq_count = 0;
    qp->unsig_done = 0;
    qp->sq_blocked = false;
    struct emu_conn *c = qp->conn;
    if (c) emu_conn_abort_rx(c, qp); /* a receive being filled is older than the posted ones */
    while (qp->rq_head) {
        struct emu_rwr *r = qp->rq_head;
        qp->rq_head = r->next;
        emu_wc_recv_flush(qp, r->wr_id);
        free(r);
    }
    qp->rq_tail = NULL;
    qp->rq_count = 0;
    while (qp->held_head) {
        struct emu_held *h = qp->held_head;
        qp->held_head = h->next;
        free(h->data);
        free(h);
    }
    qp->held_tail = NULL;
    qp->held_bytes = 0;
    if (c) {
        emu_conn_drop_requests(c);
        if (c->rx_paused) emu_conn_resume(c);
    }
}

struct emu_qp *emu_qp_new(struct emu_pd *pd, struct ibv_qp_init_attr *attr)
{
    if (!attr || !attr->send_cq || !attr->recv_cq) {
        errno = EINVAL;
        return NULL;
    }
    if (attr->qp_type != IBV_QPT_RC || attr->srq) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    struct ibv_qp_cap *cap = &attr->cap;
    if (cap->max_send_wr > EMU_MAX_QP_WR || cap->max_recv_wr > EMU_MAX_QP_WR ||
        cap->max_send_sge > EMU_MAX_SGE || cap->max_recv_sge > EMU_MAX_SGE ||
        cap->max_inline_data > EMU_MAX_INLINE) {
        errno = EINVAL;
        return NULL;
    }
    if (attr->send_cq->context != pd->pd.context || attr->recv_cq->context != pd->pd.context) {
        errno = EINVAL;
        return NULL;
    }
    struct emu_qp *qp = calloc(1, sizeof(*qp));
    if (!qp) {
        errno = ENOMEM;
        return NULL;
    }
    qp->qp.context = pd->pd.context;
    qp->qp.qp_context = attr->qp_context;
    qp->qp.pd = &pd->pd;
    qp->qp.send_cq = attr->send_cq;
    qp->qp.recv_cq = attr->recv_cq;
    do {
        emu_reg.next_qpn = (emu_reg.next_qpn + 1) & 0xffffff;
    } while (emu_reg.next_qpn < 2);
    qp->qp.qp_num = emu_reg.next_qpn;
    qp->qp.handle = qp->qp.qp_num;
    qp->qp.state = IBV_QPS_INIT;
    qp->qp.qp_type = IBV_QPT_RC;
    pthread_mutex_init(&qp->qp.mutex, NULL);
    pthread_cond_init(&qp->qp.cond, NULL);
    qp->cap = *cap;
    qp->sig_all = attr->sq_sig_all != 0;
    ((struct emu_cq *)attr->send_cq)->nqp++;
    ((struct emu_cq *)attr->recv_cq)->nqp++;
    pd->refs++;
    struct emu_ctx *c = (struct emu_ctx *)((uint8_t *)pd->pd.context - offsetof(struct verbs_context, context));
    c->refs++;
    return qp;
}

void emu_qp_free(struct emu_qp *qp)
{
    struct emu_conn *c = qp->conn;
    if (c) {
        emu_conn_abort_rx(c, NULL);
        emu_conn_drop_requests(c);
        c->qp = NULL;
        if (c->rx_paused) emu_conn_resume(c);
    }
    while (qp->sq_head) emu_swr_free(emu_sq_pop(qp));
    while (qp->rq_head) {
        struct emu_rwr *r = qp->rq_head;
        qp->rq_head = r->next;
        free(r);
    }
    while (qp->held_head) {
        struct emu_held *h = qp->held_head;
        qp->held_head = h->next;
        free(h->data);
        free(h);
    }
    ((struct emu_cq *)qp->qp.send_cq)->nqp--;
    ((struct emu_cq *)qp->qp.recv_cq)->nqp--;
    ((struct emu_pd *)qp->qp.pd)->refs--;
    struct emu_ctx *ctx = (struct emu_ctx *)((uint8_t *)qp->qp.context - offsetof(struct verbs_context, context));
    pthread_mutex_destroy(&qp->qp.mutex);
    pthread_cond_destroy(&qp->qp.cond);
    free(qp);
    emu_ctx_put(ctx);
}

/* ---- posting ----------------------------------------------------------------- */

static int emu_wr_frame_type(int opcode)
{
    switch (opcode) {
    case IBV_WR_SEND: return EMU_F_SEND;
    case IBV_WR_SEND_WITH_IMM: return EMU_F_SEND_IMM;
    case IBV_WR_RDMA_WRITE: return EMU_F_WRITE;
    case IBV_WR_RDMA_WRITE_WITH_IMM: return EMU_F_WRITE_IMM;
    case IBV_WR_RDMA_READ: return EMU_F_READ_REQ;
    default: return 0;
    }
}

static void emu_flush_posted_send(struct emu_qp *qp, struct ibv_send_wr *wr)
{
    struct emu_swr w;
    memset(&w, 0, sizeof(w));
    w.wr_id = wr->wr_id;
    w.opcode = wr->opcode;
    emu_wc_send(qp, &w, IBV_WC_WR_FLUSH_ERR);
}

/* builds the frame of a checked WR and queues it */
static int emu_queue_request(struct emu_qp *qp, struct emu_swr *w, struct ibv_send_wr *wr,
                             bool is_inline)
{
    struct emu_frame f = { .type = (uint8_t)emu_wr_frame_type(wr->opcode), .seq = w->seq,
                           .len = (uint32_t)w->len };
    if (wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
        f.imm = wr->imm_data;
    if (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
        wr->opcode == IBV_WR_RDMA_READ) {
        f.raddr = wr->wr.rdma.remote_addr;
        f.rkey = wr->wr.rdma.rkey;
    }
    struct emu_tx *t;
    if (wr->opcode == IBV_WR_RDMA_READ) {
        t = emu_tx_frame(&f, NULL, 0, 0);
    } else if (is_inline) {
        /* the data is copied now: the caller may reuse its buffer when post returns */
        uint8_t buf[EMU_MAX_INLINE];
        size_t n = 0;
        for (int i = 0; i < wr->num_sge; i++) {
            memcpy(buf + n, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
            n += wr->sg_list[i].length;
        }
        t = emu_tx_frame(&f, buf, n, 0);
    } else {
        t = emu_tx_frame(&f, NULL, 0, w->nseg);
        if (t) {
            t->nseg = w->nseg;
            for (int i = 0; i < w->nseg; i++) {
                t->seg[i] = w->seg[i];
                emu_mr_ref(t->seg[i].mr);
            }
        }
    }
    if (!t) return ENOMEM;
    t->own_request = true;
    emu_tx_append(qp->conn, t);
    return 0;
}

int emu_post_send_op(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct emu_qp *qp = (struct emu_qp *)ibqp;
    int err = 0;
    emu_lock();
    for (; wr; wr = wr->next) {
        if (ibqp->state == IBV_QPS_ERR) {
            emu_flush_posted_send(qp, wr);
            continue;
        }
        if (ibqp->state != IBV_QPS_RTS || !qp->conn) {
            err = EINVAL;
            break;
        }
        if (!emu_wr_frame_type(wr->opcode) || wr->num_sge < 0 ||
            (uint32_t)wr->num_sge > qp->cap.max_send_sge) {
            err = EINVAL;
            break;
        }
        if ((uint32_t)(qp->sq_count + qp->unsig_done) >= qp->cap.max_send_wr) {
            err = ENOMEM;
            break;
        }
        uint64_t total = 0;
        for (int i = 0; i < wr->num_sge; i++) total += wr->sg_list[i].length;
        bool is_inline = (wr->send_flags & IBV_SEND_INLINE) != 0;
        if (total > EMU_MAX_MSG || (is_inline && wr->opcode == IBV_WR_RDMA_READ) ||
            (is_inline && total > qp->cap.max_inline_data)) {
            err = EINVAL;
            break;
        }
        struct emu_swr *w = calloc(1, sizeof(*w));
        if (!w) {
            err = ENOMEM;
            break;
        }
        w->wr_id = wr->wr_id;
        w->opcode = wr->opcode;
        w->signaled = qp->sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
        w->len = total;
        if (!is_inline) {
            unsigned need = wr->opcode == IBV_WR_RDMA_READ ? IBV_ACCESS_LOCAL_WRITE : 0;
            for (int i = 0; i < wr->num_sge; i++) {
                if (wr->sg_list[i].length == 0) continue;
                if (!emu_local_seg(qp, &wr->sg_list[i], need, &w->seg[w->nseg])) {
                    emu_dlog("QP %u: wr_id %llu: SGE %d (lkey 0x%x, addr 0x%llx, %u bytes) is not "
                             "in a registered region of this PD%s", ibqp->qp_num,
                             (unsigned long long)wr->wr_id, i, wr->sg_list[i].lkey,
                             (unsigned long long)wr->sg_list[i].addr, wr->sg_list[i].length,
                             need ? " with local write access" : "");
                    w->local_err = IBV_WC_LOC_PROT_ERR;
                    emu_seg_release(w->seg, w->nseg);
                    w->nseg = 0;
                    break;
                }
                w->nseg++;
            }
        }
        w->seq = qp->next_seq++;
        if (qp->sq_tail) qp->sq_tail->next = w;
        else qp->sq_head = w;
        qp->sq_tail = w;
        qp->sq_count++;
        if (w->local_err) {
            qp->sq_blocked = true;
        } else if (!qp->sq_blocked && emu_queue_request(qp, w, wr, is_inline)) {
            /* cannot queue it: fail it in order like a local error */
            w->local_err = IBV_WC_LOC_QP_OP_ERR;
            qp->sq_blocked = true;
        }
    }
    if (err && bad) *bad = wr;
    emu_sq_progress(qp);
    if (qp->conn) emu_conn_pump(qp->conn);
    emu_unlock();
    return err;
}

int emu_post_recv_op(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct emu_qp *qp = (struct emu_qp *)ibqp;
    int err = 0;
    emu_lock();
    for (; wr; wr = wr->next) {
        if (ibqp->state == IBV_QPS_ERR) {
            emu_wc_recv_flush(qp, wr->wr_id);
            continue;
        }
        if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->cap.max_recv_sge) {
            err = EINVAL;
            break;
        }
        if ((uint32_t)qp->rq_count >= qp->cap.max_recv_wr) {
            err = ENOMEM;
            break;
        }
        struct emu_rwr *r = calloc(1, sizeof(*r));
        if (!r) {
            err = ENOMEM;
            break;
        }
        r->wr_id = wr->wr_id;
        r->num_sge = wr->num_sge;
        if (wr->num_sge) memcpy(r->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(r->sge[0]));
        if (qp->rq_tail) qp->rq_tail->next = r;
        else qp->rq_head = r;
        qp->rq_tail = r;
        qp->rq_count++;
    }
    if (err && bad) *bad = wr;
    struct emu_conn *c = qp->conn;
    if (c && (qp->held_head || c->rx_paused)) {
        emu_conn_resume(c);
        if (qp->conn) emu_conn_pump(qp->conn);
    }
    emu_unlock();
    return err;
}

/* ---- executing requests at the responder ---------------------------------- */

static bool emu_needs_recv(int type)
{
    return type == EMU_F_SEND || type == EMU_F_SEND_IMM || type == EMU_F_WRITE_IMM;
}

static struct emu_rwr *emu_rq_pop(struct emu_qp *qp)
{
    struct emu_rwr *r = qp->rq_head;
    qp->rq_head = r->next;
    if (!qp->rq_head) qp->rq_tail = NULL;
    qp->rq_count--;
    r->next = NULL;
    return r;
}

/* the receive's SGEs as a sink for len bytes: 0, IBV_WC_LOC_PROT_ERR or IBV_WC_LOC_LEN_ERR */
static int emu_recv_sink(struct emu_qp *qp, struct emu_rwr *r, uint64_t len, struct emu_sink *s)
{
    uint64_t cap = 0;
    for (int i = 0; i < r->num_sge; i++) cap += r->sge[i].length;
    if (len > cap) return IBV_WC_LOC_LEN_ERR;
    s->kind = EMU_SINK_SEGS;
    uint64_t left = len;
    for (int i = 0; i < r->num_sge && left > 0; i++) {
        struct ibv_sge sge = r->sge[i];
        if (sge.length == 0) continue;
        if (sge.length > left) sge.length = (uint32_t)left;
        struct emu_seg g;
        if (!emu_local_seg(qp, &sge, IBV_ACCESS_LOCAL_WRITE, &g)) {
            emu_sink_reset(s);
            return IBV_WC_LOC_PROT_ERR;
        }
        emu_sink_add(s, g);
        left -= sge.length;
    }
    return 0;
}

static void emu_recv_fail(struct emu_qp *qp, struct emu_rwr *r, int status)
{
    struct ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    wc.wr_id = r->wr_id;
    wc.status = status;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qp->qp.qp_num;
    wc.src_qp = qp->peer_qpn;
    emu_cq_push((struct emu_cq *)qp->qp.recv_cq, &wc);
    free(r);
}

/* starts executing a request; returns what to do when its payload is in */
static int emu_exec_begin(struct emu_conn *c, struct emu_qp *qp, const struct emu_frame *h,
                          struct emu_sink *s, struct emu_rwr **rwr)
{
    memset(s, 0, sizeof(*s));
    s->kind = EMU_SINK_DISCARD;
    *rwr = NULL;
    struct emu_seg g = { 0 };
    switch (h->type) {
    case EMU_F_SEND:
    case EMU_F_SEND_IMM: {
        struct emu_rwr *r = emu_rq_pop(qp);
        int st = emu_recv_sink(qp, r, h->len, s);
        if (st) {
            emu_dlog("QP %u: incoming SEND of %u bytes from %s: %s", qp->qp.qp_num, h->len,
                     c->peer_name, st == IBV_WC_LOC_LEN_ERR ? "receive buffer too short"
                                                           : "receive SGE not registered for local write");
            emu_recv_fail(qp, r, st);
            emu_send_answer(c, EMU_F_NAK, h->seq,
                            st == IBV_WC_LOC_LEN_ERR ? IBV_WC_REM_INV_REQ_ERR : IBV_WC_REM_OP_ERR);
            emu_qp_error(qp, 0);
            return EMU_DONE_NONE;
        }
        *rwr = r;
        return EMU_DONE_RECV;
    }
    case EMU_F_WRITE:
    case EMU_F_WRITE_IMM:
        if (h->len > 0 &&
            !emu_remote_seg(qp, h->raddr, h->rkey, h->len, IBV_ACCESS_REMOTE_WRITE, &g)) {
            emu_dlog("QP %u: RDMA WRITE from %s to 0x%llx (%u bytes, rkey 0x%x) denied", qp->qp.qp_num,
                     c->peer_name, (unsigned long long)h->raddr, h->len, h->rkey);
            emu_send_answer(c, EMU_F_NAK, h->seq, IBV_WC_REM_ACCESS_ERR);
            emu_qp_error(qp, 0);
            return EMU_DONE_NONE;
        }
        s->kind = EMU_SINK_SEGS;
        emu_sink_add(s, g);
        if (h->type == EMU_F_WRITE_IMM) {
            *rwr = emu_rq_pop(qp);
            return EMU_DONE_RECV;
        }
        return EMU_DONE_WRITE;
    case EMU_F_READ_REQ: {
        if (h->len > 0 &&
            !emu_remote_seg(qp, h->raddr, h->rkey, h->len, IBV_ACCESS_REMOTE_READ, &g)) {
            emu_dlog("QP %u: RDMA READ from %s of 0x%llx (%u bytes, rkey 0x%x) denied", qp->qp.qp_num,
                     c->peer_name, (unsigned long long)h->raddr, h->len, h->rkey);
            emu_send_answer(c, EMU_F_NAK, h->seq, IBV_WC_REM_ACCESS_ERR);
            emu_qp_error(qp, 0);
            return EMU_DONE_NONE;
        }
        struct emu_frame f = { .type = EMU_F_READ_RESP, .seq = h->seq, .len = h->len };
        struct emu_tx *t = emu_tx_frame(&f, NULL, 0, 1);
        if (!t) {
            emu_mr_unref(g.mr);
            emu_send_answer(c, EMU_F_NAK, h->seq, IBV_WC_REM_OP_ERR);
            emu_qp_error(qp, 0);
            return EMU_DONE_NONE;
        }
        if (g.len) {
            t->seg[0] = g;
            t->nseg = 1;
        }
        emu_tx_append(c, t);
        return EMU_DONE_NONE;
    }
    }
    return EMU_DONE_NONE;
}

static void emu_exec_end(struct emu_conn *c, struct emu_qp *qp, const struct emu_frame *h, int done,
                         struct emu_rwr *r)
{
    if (done == EMU_DONE_RECV && r) {
        struct ibv_wc wc;
        memset(&wc, 0, sizeof(wc));
        wc.wr_id = r->wr_id;
        wc.status = IBV_WC_SUCCESS;
        wc.opcode = h->type == EMU_F_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
        wc.byte_len = h->len;
        if (h->type != EMU_F_SEND) {
            wc.wc_flags = IBV_WC_WITH_IMM;
            wc.imm_data = h->imm;
        }
        wc.qp_num = qp->qp.qp_num;
        wc.src_qp = qp->peer_qpn;
        emu_cq_push((struct emu_cq *)qp->qp.recv_cq, &wc);
        free(r);
        emu_send_answer(c, EMU_F_ACK, h->seq, 0);
    } else if (done == EMU_DONE_WRITE) {
        emu_send_answer(c, EMU_F_ACK, h->seq, 0);
    }
}

/* runs the held requests that can run now */
static void emu_qp_replay(struct emu_conn *c, struct emu_qp *qp)
{
    struct emu_held *h;
    while ((h = qp->held_head) && qp->qp.state != IBV_QPS_ERR) {
        if (emu_needs_recv(h->hdr.type) && !qp->rq_head) break;
        qp->held_head = h->next;
        if (!qp->held_head) qp->held_tail = NULL;
        qp->held_bytes -= h->hdr.len;
        struct emu_sink s;
        struct emu_rwr *r;
        int done = emu_exec_begin(c, qp, &h->hdr, &s, &r);
        emu_sink_put(&s, h->data, h->hdr.type == EMU_F_READ_REQ ? 0 : h->hdr.len);
        emu_sink_reset(&s);
        emu_exec_end(c, qp, &h->hdr, done, r);
        free(h->data);
        free(h);
    }
}

/* ---- receiving ------------------------------------------------------------------ */

static void emu_rx_dispatch(struct emu_conn *c);
static void emu_conn_rx(struct emu_conn *c);

/* a receive was posted or the QP changed: run held requests, then the paused header */
void emu_conn_resume(struct emu_conn *c)
{
    struct emu_qp *qp = c->qp;
    if (qp && qp->qp.state != IBV_QPS_ERR) emu_qp_replay(c, qp);
    if (c->rx_paused && c->rx_state == EMU_RX_PENDING) {
        c->rx_paused = false;
        emu_rx_dispatch(c); /* may pause again */
    }
    if (c->p.fd < 0) return;
    emu_conn_events(c);
    if (!c->rx_paused && !c->in_rx) emu_conn_rx(c);
}

static uint32_t emu_payload_len(const struct emu_frame *h)
{
    switch (h->type) {
    case EMU_F_CONNECT:
    case EMU_F_ACCEPT:
    case EMU_F_REJECT:
    case EMU_F_SEND:
    case EMU_F_SEND_IMM:
    case EMU_F_WRITE:
    case EMU_F_WRITE_IMM:
    case EMU_F_READ_RESP: return h->len;
    default: return 0;
    }
}

static void emu_rx_request(struct emu_conn *c)
{
    struct emu_frame *h = &c->rhdr;
    struct emu_qp *qp = c->qp;
    if (c->state == EMU_CONN_CLOSING || c->drain) return;
    if (!qp || qp->qp.state == IBV_QPS_ERR) {
        /* nothing executes here any more: the initiator sees what retries would give it */
        emu_send_answer(c, EMU_F_NAK, h->seq, IBV_WC_RETRY_EXC_ERR);
        return;
    }
    if (qp->held_head || (emu_needs_recv(h->type) && !qp->rq_head)) {
        if (h->len <= EMU_HOLD_FRAME_MAX && qp->held_bytes + h->len <= EMU_HOLD_CAP) {
            struct emu_held *held = calloc(1, sizeof(*held));
            uint8_t *data = malloc(h->len ? h->len : 1);
            if (held && data) {
                held->hdr = *h;
                held->data = data;
                qp->held_bytes += h->len;
                c->rx_held = held;
                c->sink.kind = EMU_SINK_SEGS;
                struct emu_seg g = { .mr = NULL, .ptr = data, .len = h->len };
                if (h->type != EMU_F_READ_REQ) emu_sink_add(&c->sink, g);
                c->rx_done = EMU_DONE_HOLD;
                return;
            }
            free(held);
            free(data);
        }
        /* too big to copy aside: stop reading until a receive is posted */
        c->rx_state = EMU_RX_PENDING;
        c->rx_paused = true;
        return;
    }
    c->rx_done = emu_exec_begin(c, qp, h, &c->sink, &c->rx_rwr);
}

static void emu_rx_response(struct emu_conn *c)
{
    struct emu_frame *h = &c->rhdr;
    struct emu_qp *qp = c->qp;
    if (!qp || qp->qp.state == IBV_QPS_ERR || c->state == EMU_CONN_CLOSING) return; /* dropped */
    struct emu_swr *w = qp->sq_head;
    if (!w || w->seq != h->seq || w->local_err) {
        char why[128];
        snprintf(why, sizeof(why), "answer (type %d) for request %llu, but the oldest outstanding is %lld",
                 h->type, (unsigned long long)h->seq, w ? (long long)w->seq : -1ll);
        emu_conn_bad(c, why);
        return;
    }
    switch (h->type) {
    case EMU_F_ACK:
        if (w->opcode == IBV_WR_RDMA_READ) {
            emu_conn_bad(c, "ACK for an RDMA READ");
            return;
        }
        emu_sq_complete(qp, IBV_WC_SUCCESS);
        emu_sq_progress(qp);
        return;
    case EMU_F_NAK:
        if (h->status != IBV_WC_REM_ACCESS_ERR && h->status != IBV_WC_REM_INV_REQ_ERR &&
            h->status != IBV_WC_REM_OP_ERR && h->status != IBV_WC_RETRY_EXC_ERR) {
            emu_conn_bad(c, "NAK with an unknown status");
            return;
        }
        emu_sq_complete(qp, h->status);
        return;
    case EMU_F_READ_RESP:
        if (w->opcode != IBV_WR_RDMA_READ || h->len != w->len) {
            emu_conn_bad(c, "READ_RESP that does not match the outstanding RDMA READ");
            return;
        }
        c->sink.kind = EMU_SINK_SEGS;
        for (int i = 0; i < w->nseg; i++) {
            struct emu_seg g = w->seg[i];
            emu_mr_ref(g.mr);
            emu_sink_add(&c->sink, g);
        }
        c->rx_done = EMU_DONE_READ;
        return;
    }
}

static void emu_rx_dispatch(struct emu_conn *c)
{
    struct emu_frame *h = &c->rhdr;
    emu_sink_reset(&c->sink);
    c->rx_done = EMU_DONE_NONE;
    c->rx_state = EMU_RX_PAYLOAD;
    c->rx_left = 0;
    bool data_ok = c->state == EMU_CONN_UP || c->state == EMU_CONN_WAIT_RTU ||
                   c->state == EMU_CONN_CLOSING;
    switch (h->type) {
    case EMU_F_CONNECT:
    case EMU_F_ACCEPT:
    case EMU_F_REJECT:
        if (h->len != sizeof(struct emu_hello) ||
            (h->type == EMU_F_CONNECT && c->state != EMU_CONN_HELLO) ||
            (h->type != EMU_F_CONNECT && c->state != EMU_CONN_WAIT_REPLY)) {
            emu_conn_bad(c, "unexpected connection frame");
            return;
        }
        c->sink.kind = EMU_SINK_SEGS;
        emu_sink_add(&c->sink, (struct emu_seg){ .ptr = (uint8_t *)&c->hello_in, .len = sizeof(c->hello_in) });
        c->rx_done = EMU_DONE_HELLO;
        break;
    case EMU_F_RTU:
        if (h->len != 0 || c->state != EMU_CONN_WAIT_RTU) {
            emu_conn_bad(c, "unexpected RTU");
            return;
        }
        emu_cm_on_rtu(c);
        break;
    case EMU_F_DISC:
        if (h->len != 0 || c->state == EMU_CONN_HELLO) {
            emu_conn_bad(c, "unexpected DISC");
            return;
        }
        emu_cm_on_fail(c, 0);
        return;
    case EMU_F_SEND:
    case EMU_F_SEND_IMM:
    case EMU_F_WRITE:
    case EMU_F_WRITE_IMM:
    case EMU_F_READ_REQ:
        if (!data_ok || h->len > EMU_MAX_MSG) {
            emu_conn_bad(c, c->state == EMU_CONN_HELLO ? "data before the connect request" : "bad request");
            return;
        }
        emu_rx_request(c);
        if (c->rx_state == EMU_RX_PENDING) return;
        break;
    case EMU_F_READ_RESP:
    case EMU_F_ACK:
    case EMU_F_NAK:
        if (!data_ok || (h->type != EMU_F_READ_RESP && h->len != 0)) {
            emu_conn_bad(c, "bad answer frame");
            return;
        }
        emu_rx_response(c);
        break;
    default: {
        char why[64];
        snprintf(why, sizeof(why), "unknown frame type %d", h->type);
        emu_conn_bad(c, why);
        return;
    }
    }
    if (c->p.fd < 0 || c->rx_state != EMU_RX_PAYLOAD) return;
    c->rx_left = emu_payload_len(h);
}

static void emu_rx_finish(struct emu_conn *c)
{
    int done = c->rx_done;
    c->rx_done = EMU_DONE_NONE;
    c->rx_state = EMU_RX_HDR;
    emu_sink_reset(&c->sink);
    struct emu_qp *qp = c->qp;
    switch (done) {
    case EMU_DONE_HELLO:
        emu_cm_on_hello(c);
        break;
    case EMU_DONE_RECV:
    case EMU_DONE_WRITE: {
        struct emu_rwr *r = c->rx_rwr;
        c->rx_rwr = NULL;
        if (qp) emu_exec_end(c, qp, &c->rhdr, done, r);
        else free(r);
        break;
    }
    case EMU_DONE_READ:
        if (qp && qp->sq_head && qp->sq_head->seq == c->rhdr.seq) {
            emu_sq_complete(qp, IBV_WC_SUCCESS);
            emu_sq_progress(qp);
        }
        break;
    case EMU_DONE_HOLD:
        if (qp && c->rx_held) {
            struct emu_held *h = c->rx_held;
            c->rx_held = NULL;
            if (qp->held_tail) qp->held_tail->next = h;
            else qp->held_head = h;
            qp->held_tail = h;
            emu_qp_replay(c, qp);
        }
        break;
    }
}

static void emu_conn_rx(struct emu_conn *c)
{
    if (c->in_rx) return;
    c->in_rx = true;
    size_t budget = EMU_IO_BUDGET;
    while (c->p.fd >= 0 && !c->rx_paused) {
        size_t avail = c->rtail - c->rhead;
        if (c->rx_state == EMU_RX_HDR) {
            if (avail >= sizeof(struct emu_frame)) {
                memcpy(&c->rhdr, c->rbuf + c->rhead, sizeof(struct emu_frame));
                c->rhead += sizeof(struct emu_frame);
                emu_rx_dispatch(c);
                continue;
            }
        } else if (c->rx_state == EMU_RX_PAYLOAD) {
            if (c->rx_left == 0) {
                emu_rx_finish(c);
                continue;
            }
            if (avail > 0) {
                size_t n = avail < c->rx_left ? avail : c->rx_left;
                emu_sink_put(&c->sink, c->rbuf + c->rhead, n);
                c->rhead += n;
                c->rx_left -= n;
                continue;
            }
            if (budget == 0) break;
            if (c->rx_left >= EMU_RBUF / 4) {
                size_t max = c->rx_left < budget ? c->rx_left : budget;
                ssize_t r = emu_sink_readv(c->p.fd, &c->sink, max);
                if (r > 0) {
                    c->rx_left -= (size_t)r;
                    budget = (size_t)r >= budget ? 0 : budget - (size_t)r;
                    continue;
                }
                if (r == 0) {
                    emu_conn_lost(c, 0);
                    break;
                }
                if (r == -1) {
                    if (errno == EINTR) continue;
                    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
                    emu_conn_lost(c, errno);
                    break;
                }
                /* -2: through the staging buffer */
            }
        } else {
            break; /* PENDING */
        }
        if (budget == 0) break;
        if (c->rhead == c->rtail) {
            c->rhead = c->rtail = 0;
        } else if (c->rhead > 0) {
            memmove(c->rbuf, c->rbuf + c->rhead, c->rtail - c->rhead);
            c->rtail -= c->rhead;
            c->rhead = 0;
        }
        ssize_t r = read(c->p.fd, c->rbuf + c->rtail, EMU_RBUF - c->rtail);
        if (r > 0) {
            c->rtail += (size_t)r;
            budget = (size_t)r >= budget ? 0 : budget - (size_t)r;
            continue;
        }
        if (r == 0) {
            emu_conn_lost(c, 0);
            break;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        emu_conn_lost(c, errno);
        break;
    }
    c->in_rx = false;
}

void emu_conn_on_events(struct emu_conn *c, uint32_t ev)
{
    if (c->p.fd < 0) return;
    if (c->state == EMU_CONN_CONNECTING) {
        if (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)) {
            int err = 0;
            socklen_t len = sizeof(err);
            if (getsockopt(c->p.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
            if (err) emu_cm_on_fail(c, err);
            else emu_cm_on_connected(c);
        }
        return;
    }
    if (ev & EPOLLOUT) emu_conn_pump(c);
    if (c->p.fd >= 0 && (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
        if (c->rx_paused && (ev & (EPOLLHUP | EPOLLERR))) {
            emu_conn_lost(c, ECONNRESET);
            return;
        }
        if (c->rx_paused && (ev & EPOLLRDHUP)) {
            /* the peer closed its side while a request waits for a receive: read on,
             * dropping requests, to find its DISC (a disconnect) or the end (a death) */
            c->drain = true;
            c->rx_paused = false;
            if (c->rx_state == EMU_RX_PENDING) emu_rx_dispatch(c);
            emu_conn_events(c);
        }
        emu_conn_rx(c);
    }
    if (c->p.fd >= 0) emu_conn_pump(c);
}
