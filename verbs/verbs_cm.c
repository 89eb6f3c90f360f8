/*
 * The verbs transport's connections: rdma_cm set-up (resolve, route, QP,
 * connect; accept or reject), crossed connections, teardown of one QP.
 * docs/transports/verbs.md, "Connections".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oobx.h"
#include "util.h"
#include "verbs_int.h"

/* ---- connections ------------------------------------------------------------------------ */

void verbs_conn_free(verbs_tp_t *tp, verbs_conn_t *c, int disconnect)
{
    if (!c) return;
    if (c->qp) {
        if (disconnect && c->state == VERBS_CONN_UP) rdma_disconnect(c->id);
        /* completions of this QP already in the CQ are handled (or dropped) now, so
         * that the CQ never holds more than its live QPs can produce */
        if (!tp->destroying) {
            if (tp->peers[c->peer].conn == c) tp->peers[c->peer].conn = NULL;
            verbs_poll_cq(tp, 64);
        }
        rdma_destroy_qp(c->id);
        c->qp = NULL;
    }
    if (c->id) rdma_destroy_id(c->id);
    if (c->rmr) ibv_dereg_mr(c->rmr);
    if (c->smr) ibv_dereg_mr(c->smr);
    free(c->rbuf);
    free(c->sbuf);
    if (c->counted) tp->nconns--;
    if (tp->peers[c->peer].conn == c) tp->peers[c->peer].conn = NULL;
    free(c);
}

static verbs_conn_t *verbs_conn_new(verbs_tp_t *tp, int peer, int passive)
{
    verbs_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->peer = peer;
    c->passive = passive;
    c->serial = ++tp->next_serial;
    return c;
}

/* Buffers, QP and posted receives of c (its id is resolved or accepted). */
static int verbs_conn_qp(verbs_tp_t *tp, verbs_conn_t *c, char *why, size_t whylen)
{
    if (c->id->verbs != tp->ctx) {
        snprintf(why, whylen, "rdma_cm routes it through device %s, not %s",
                 c->id->verbs ? ibv_get_device_name(c->id->verbs->device) : "(none)", tp->dev);
        return -1;
    }
    if (tp->nconns >= tp->links_max) {
        snprintf(why, whylen, "this rank already has %d connections, the most its completion queue of %d "
                 "entries serves", tp->nconns, tp->cq_size);
        return -1;
    }
    size_t rbytes = (size_t)VERBS_RECV_DEPTH * VERBS_BUF_BYTES, sbytes = (size_t)VERBS_SEND_SLOTS * VERBS_BUF_BYTES;
    if (posix_memalign((void **)&c->rbuf, 4096, rbytes) || posix_memalign((void **)&c->sbuf, 4096, sbytes)) {
        snprintf(why, whylen, "out of memory for %zu bytes of buffers", rbytes + sbytes);
        return -1;
    }
    c->rmr = ibv_reg_mr(tp->pd, c->rbuf, rbytes, IBV_ACCESS_LOCAL_WRITE);
    c->smr = c->rmr ? ibv_reg_mr(tp->pd, c->sbuf, sbytes, IBV_ACCESS_LOCAL_WRITE) : NULL;
    if (!c->rmr || !c->smr) {
        snprintf(why, whylen, "cannot register %zu bytes of buffers: %s (locked memory limit? ulimit -l)",
                 rbytes + sbytes, strerror(errno));
        return -1;
    }
    struct ibv_qp_init_attr qa = {
        .send_cq = tp->cq,
        .recv_cq = tp->cq,
        .cap = {.max_send_wr = VERBS_SEND_SLOTS + VERBS_READ_MAX, .max_recv_wr = VERBS_RECV_DEPTH,
                .max_send_sge = 2, .max_recv_sge = 1, .max_inline_data = 0},
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 0,
    };
    if (rdma_create_qp(c->id, tp->pd, &qa)) {
        snprintf(why, whylen, "rdma_create_qp: %s", strerror(errno));
        return -1;
    }
    c->qp = c->id->qp;
    c->counted = 1;
    tp->nconns++;
    for (uint32_t i = 0; i < VERBS_SEND_SLOTS; i++) c->free_slots[i] = VERBS_SEND_SLOTS - 1 - i;
    c->nfree = VERBS_SEND_SLOTS;
    c->tx_credits = VERBS_RECV_DEPTH;
    for (uint32_t i = 0; i < VERBS_RECV_DEPTH; i++) {
        struct ibv_sge sge = {.addr = (uintptr_t)(c->rbuf + (size_t)i * VERBS_BUF_BYTES),
                              .length = VERBS_BUF_BYTES, .lkey = c->rmr->lkey};
        struct ibv_recv_wr wr = {.wr_id = verbs_wrid(c, VERBS_WR_RECV, i), .sg_list = &sge, .num_sge = 1};
        struct ibv_recv_wr *bad = NULL;
        int rc = ibv_post_recv(c->qp, &wr, &bad);
        if (rc) {
            snprintf(why, whylen, "ibv_post_recv on QP %u: %s", c->qp->qp_num, strerror(rc));
            return -1;
        }
    }
    return 0;
}

/* The private data of a connect request or an accept: the hello and this
 * side's nonce of the handshake (the proofs follow as the first messages). */
typedef struct verbs_cm_pd {
    verbs_cm_hello_t h;
    unsigned char nonce[OOBX_NONCE_BYTES];
} verbs_cm_pd_t;

static void verbs_conn_param(verbs_tp_t *tp, verbs_conn_t *c, struct rdma_conn_param *cp, verbs_cm_pd_t *pd)
{
    verbs_cm_hello_encode(tp->magic, tp->rank, tp->nranks, &pd->h);
    if (c->passive) {
        oobx__auth_random(c->auth.nonce_a, OOBX_NONCE_BYTES);
        memcpy(pd->nonce, c->auth.nonce_a, OOBX_NONCE_BYTES);
    } else {
        oobx__auth_random(c->auth.nonce_c, OOBX_NONCE_BYTES);
        memcpy(pd->nonce, c->auth.nonce_c, OOBX_NONCE_BYTES);
        memset(c->auth.hello, 0, sizeof(c->auth.hello));
        memcpy(c->auth.hello, &pd->h, sizeof(pd->h));
    }
    memset(cp, 0, sizeof(*cp));
    cp->private_data = pd;
    cp->private_data_len = sizeof(*pd);
    cp->responder_resources = (uint8_t)tp->read_depth;
    cp->initiator_depth = (uint8_t)tp->read_depth;
    cp->retry_count = 7;
    cp->rnr_retry_count = 7; /* infinite: a receive is always re-posted */
}

/* Starts a connection to peer (its address is known). */
void verbs_conn_start(verbs_tp_t *tp, int peer)
{
    verbs_peer_t *p = &tp->peers[peer];
    char who[128];
    if (p->conn || p->fail.failed || p->crossed) return;
    if (!p->have_addr) return; /* it connects to us */
    verbs_conn_t *c = verbs_conn_new(tp, peer, 0);
    if (!c) {
        verbs_peer_fail(tp, peer, OOBX_ERR_NOMEM, "verbs: out of memory connecting to rank %d", peer);
        return;
    }
    if (rdma_create_id(tp->ec, &c->id, c, RDMA_PS_TCP)) {
        c->id = NULL;
        verbs_peer_fail(tp, peer, OOBX_ERR_SYSTEM, "verbs: rdma_create_id for %s: %s", verbs_who(tp, peer, who, sizeof(who)),
                        strerror(errno));
        verbs_conn_free(tp, c, 0);
        return;
    }
    struct sockaddr_storage src = tp->my_addr;
    if (src.ss_family == AF_INET)
        ((struct sockaddr_in *)&src)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&src)->sin6_port = 0;
    c->state = VERBS_CONN_ADDR;
    p->conn = c;
    if (rdma_resolve_addr(c->id, (struct sockaddr *)&src, (struct sockaddr *)&p->addr, VERBS_RESOLVE_MS)) {
        verbs_peer_fail(tp, peer, OOBX_ERR_REMOTE, "verbs: rdma_resolve_addr from %s to %s: %s", tp->my_text,
                        verbs_who(tp, peer, who, sizeof(who)), strerror(errno));
        return;
    }
    OOBX_DEBUG(tp->log, "verbs: connecting to %s", verbs_who(tp, peer, who, sizeof(who)));
}

void verbs_reject(verbs_tp_t *tp, struct rdma_cm_id *id, uint32_t code)
{
    verbs_cm_reject_t rj = {.cm_magic = VERBS_CM_MAGIC, .code = code};
    tp->st.rejected++;
    rdma_reject(id, &rj, sizeof(rj));
    rdma_destroy_id(id);
}

static void verbs_on_connect_request(verbs_tp_t *tp, struct rdma_cm_id *id, const unsigned char *pd, int plen)
{
    verbs_cm_hello_t h;
    char from[96], who[128], why[256];
    verbs_addr_format(rdma_get_peer_addr(id), from, sizeof(from));
    verbs_cm_want_t want = {.comm_magic = tp->magic, .self = tp->rank, .nranks = tp->nranks, .peer = -1};
    uint32_t code = verbs_cm_hello_check(pd, plen > 0 ? (size_t)plen : 0, &want, &h, why, sizeof(why));
    /* a rank that is leaving takes only the link its last sends wait for
     * (the peer's connect crossed the one those sends opened) */
    int leaving = code == 0 && tp->destroying && !tp->peers[h.rank].sq_head && !tp->peers[h.rank].ctl_head;
    if (leaving) {
        code = VERBS_REJ_FAILED;
        snprintf(why, sizeof(why), "this rank is leaving");
    }
    if (code) {
        if (leaving)
            OOBX_DEBUG(tp->log, "verbs: rejected a connection from %s on device %s: %s", from, tp->dev, why);
        else if (oobx__ratelimit_ok(&tp->rl))
            OOBX_WARN(tp->log, "verbs: rejected a connection from %s on device %s: %s (%s)", from, tp->dev,
                      verbs_reject_str(code), why);
        verbs_reject(tp, id, code);
        return;
    }
    int peer = (int)h.rank;
    verbs_peer_t *p = &tp->peers[peer];
    if ((size_t)plen < sizeof(verbs_cm_pd_t)) {
        if (oobx__ratelimit_ok(&tp->rl))
            OOBX_WARN(tp->log, "verbs: rejected a connection from %s on device %s: no handshake nonce", from, tp->dev);
        verbs_reject(tp, id, VERBS_REJ_VERSION);
        return;
    }
    if (p->conn && p->conn->passive && p->conn->proved <= 0) {
        /* an accepted connection that has not proved its rank never blocks
         * the one that comes to prove it */
        OOBX_DEBUG(tp->log, "verbs: %s connects again; dropping its unproved connection", verbs_who(tp, peer, who, sizeof(who)));
        verbs_conn_free(tp, p->conn, 1);
    }
    if (p->fail.failed)
        code = VERBS_REJ_FAILED;
    else if (p->conn && (p->conn->passive || p->conn->state == VERBS_CONN_UP))
        code = VERBS_REJ_DUPLICATE;
    else if (p->conn && tp->rank < peer)
        code = VERBS_REJ_CROSSED; /* my own attempt is the one kept */
    if (code) {
        OOBX_DEBUG(tp->log, "verbs: rejected a connection from %s (%s): %s", verbs_who(tp, peer, who, sizeof(who)), from,
                   verbs_reject_str(code));
        verbs_reject(tp, id, code);
        return;
    }
    if (p->conn) {
        /* both connected at once and the lower rank's connection is kept:
         * give up mine (it has carried nothing; sends wait on the peer) */
        OOBX_DEBUG(tp->log, "verbs: crossed connections with %s: keeping its own", verbs_who(tp, peer, who, sizeof(who)));
        verbs_conn_free(tp, p->conn, 0);
        tp->st.crossed++;
    }
    verbs_conn_t *c = verbs_conn_new(tp, peer, 1);
    if (!c) {
        verbs_reject(tp, id, VERBS_REJ_RESOURCES);
        return;
    }
    c->id = id;
    id->context = c;
    /* the connector's hello and nonce, bound into both proofs */
    memset(c->auth.hello, 0, sizeof(c->auth.hello));
    memcpy(c->auth.hello, pd, sizeof(verbs_cm_hello_t));
    memcpy(c->auth.nonce_c, pd + sizeof(verbs_cm_hello_t), OOBX_NONCE_BYTES);
    if (verbs_conn_qp(tp, c, why, sizeof(why))) {
        OOBX_WARN(tp->log, "verbs: cannot accept %s (%s) on device %s: %s", verbs_who(tp, peer, who, sizeof(who)), from,
                  tp->dev, why);
        verbs_cm_reject_t rj = {.cm_magic = VERBS_CM_MAGIC, .code = VERBS_REJ_RESOURCES};
        rdma_reject(id, &rj, sizeof(rj));
        verbs_conn_free(tp, c, 0);
        return;
    }
    struct rdma_conn_param cp;
    verbs_cm_pd_t mine;
    verbs_conn_param(tp, c, &cp, &mine);
    p->conn = c;
    if (p->crossed) tp->ncrossed--;
    p->crossed = 0;
    c->state = VERBS_CONN_ACCEPTING;
    if (rdma_accept(id, &cp)) {
        verbs_peer_fail(tp, peer, OOBX_ERR_REMOTE, "verbs: rdma_accept of %s on device %s: %s",
                        verbs_who(tp, peer, who, sizeof(who)), tp->dev, strerror(errno));
        return;
    }
    if (!p->have_addr) snprintf(p->addr_text, sizeof(p->addr_text), "%s", from);
}

static void verbs_cm_event(verbs_tp_t *tp, int type, int status, struct rdma_cm_id *id, const unsigned char *pd, int plen)
{
    verbs_conn_t *c = id ? id->context : NULL;
    char who[128], why[256];
    if (type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
        tp->fatal = oobx__fail(tp->log, OOBX_ERR_SYSTEM, "verbs: device %s was removed", tp->dev);
        return;
    }
    if (!c) return; /* listener events other than requests */
    int peer = c->peer;
    verbs_peer_t *p = &tp->peers[peer];
    if (p->conn != c) return;
    verbs_who(tp, peer, who, sizeof(who));
    switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        c->state = VERBS_CONN_ROUTE;
        if (rdma_resolve_route(c->id, VERBS_RESOLVE_MS))
            verbs_peer_fail(tp, peer, OOBX_ERR_REMOTE, "verbs: rdma_resolve_route to %s: %s", who, strerror(errno));
        return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        if (verbs_conn_qp(tp, c, why, sizeof(why))) {
            verbs_peer_fail(tp, peer, OOBX_ERR_REMOTE, "verbs: cannot connect to %s on device %s: %s", who, tp->dev, why);
            return;
        }
        struct rdma_conn_param cp;
        verbs_cm_pd_t mine;
        verbs_conn_param(tp, c, &cp, &mine);
        c->state = VERBS_CONN_CONNECTING;
        if (rdma_connect(c->id, &cp))
            verbs_peer_fail(tp, peer, OOBX_ERR_REMOTE, "verbs: rdma_connect to %s on device %s: %s", who, tp->dev,
                            strerror(errno));
        return;
    }
    case RDMA_CM_EVENT_ESTABLISHED:
        if (!c->passive) {
            verbs_cm_hello_t h;
            verbs_cm_want_t want = {.comm_magic = tp->magic, .self = tp->rank, .nranks = tp->nranks, .peer = peer};
            if (verbs_cm_hello_check(pd, plen > 0 ? (size_t)plen : 0, &want, &h, why, sizeof(why))) {
                verbs_peer_fail(tp, peer, OOBX_ERR_PROTOCOL,
                                "verbs: the listener at %s (expected rank %d) accepted with a bad hello: %s",
                                p->addr_text, peer, why);
                return;
            }
            if ((size_t)plen < sizeof(verbs_cm_pd_t)) {
                verbs_peer_fail(tp, peer, OOBX_ERR_PROTOCOL,
                                "verbs: the listener at %s (expected rank %d) accepted without a handshake nonce",
                                p->addr_text, peer);
                return;
            }
            memcpy(c->auth.nonce_a, pd + sizeof(verbs_cm_hello_t), OOBX_NONCE_BYTES);
        }
        c->state = VERBS_CONN_UP;
        OOBX_DEBUG(tp->log, "verbs: connected with %s (QP %u, %s)", who, c->qp ? c->qp->qp_num : 0,
                   c->passive ? "accepted" : "initiated");
        verbs_mark_dirty(tp, peer);
        return;
    case RDMA_CM_EVENT_REJECTED: {
        verbs_cm_reject_t rj;
        if (verbs_cm_reject_decode(pd, plen > 0 ? (size_t)plen : 0, &rj, why, sizeof(why)) == 0) {
            if (rj.code == VERBS_REJ_CROSSED) {
                /* the peer's own connection is on its way */
                OOBX_DEBUG(tp->log, "verbs: crossed connections with %s: waiting for its own", who);
                verbs_conn_free(tp, c, 0);
                if (!p->crossed) tp->ncrossed++;
                p->crossed = 1;
                p->crossed_deadline = oobx__deadline(VERBS_CROSSED_MS);
                tp->st.crossed++;
                return;
            }
            verbs_peer_fail(tp, peer, OOBX_ERR_REMOTE, "verbs: connection to %s rejected by it: %s (device %s)", who,
                            verbs_reject_str(rj.code), tp->dev);
            return;
        }
        verbs_peer_fail(tp, peer, OOBX_ERR_REMOTE,
                        "verbs: connection to %s refused (rdma_cm status %d; is rank %d alive and listening?) on device %s",
                        who, status, peer, tp->dev);
        return;
    }
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
        verbs_peer_fail(tp, peer, OOBX_ERR_REMOTE, "verbs: %s for %s on device %s (status %d: %s)", rdma_event_str(type),
                        who, tp->dev, status, strerror(status < 0 ? -status : status));
        return;
    case RDMA_CM_EVENT_DISCONNECTED:
        if (c->proved < 0) {
            /* a connection refused for its proof: gone, and its claimed rank is not failed */
            verbs_conn_free(tp, c, 0);
            return;
        }
        /* what the peer sent before it left is in the CQ, ahead of the flushed receives */
        verbs_poll_cq(tp, 64);
        verbs_peer_fail(tp, peer, OOBX_ERR_REMOTE, "verbs: %s disconnected (device %s QP %u)", who, tp->dev,
                        c->qp ? c->qp->qp_num : 0);
        return;
    default:
        return;
    }
}

/* Takes every rdma_cm event there is (the channel is non-blocking). */
void verbs_cm_poll(verbs_tp_t *tp)
{
    for (int n = 0; n < 256; n++) {
        struct rdma_cm_event *ev = NULL;
        if (rdma_get_cm_event(tp->ec, &ev)) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                tp->fatal = oobx__fail(tp->log, OOBX_ERR_SYSTEM, "verbs: rdma_get_cm_event on device %s: %s", tp->dev,
                                      strerror(errno));
            return;
        }
        int type = ev->event, status = ev->status;
        struct rdma_cm_id *id = ev->id;
        unsigned char pd[256];
        int plen = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;
        if (plen > (int)sizeof(pd)) plen = sizeof(pd);
        if (plen) memcpy(pd, ev->param.conn.private_data, (size_t)plen);
        /* acknowledged first: destroying an id waits for its events to be acknowledged */
        rdma_ack_cm_event(ev);
        OOBX_TRACE(tp->log, "verbs: rdma_cm event %s (status %d)", rdma_event_str(type), status);
        if (type == RDMA_CM_EVENT_CONNECT_REQUEST)
            verbs_on_connect_request(tp, id, pd, plen);
        else
            verbs_cm_event(tp, type, status, id, pd, plen);
    }
}


/* A peer whose connection never came after a crossing (it may have failed
 * before connecting): connect again; its answer settles it. */
void verbs_crossed_check(verbs_tp_t *tp)
{
    uint64_t now = oobx__now_ns();
    for (int i = 0; i < tp->nranks && tp->ncrossed > 0; i++) {
        verbs_peer_t *p = &tp->peers[i];
        if (!p->crossed || now < p->crossed_deadline) continue;
        p->crossed = 0;
        tp->ncrossed--;
        if (p->fail.failed || p->conn) continue;
        char who[128];
        OOBX_INFO(tp->log, "verbs: %s did not connect within %d ms after crossed connections; connecting again",
                  verbs_who(tp, i, who, sizeof(who)), VERBS_CROSSED_MS);
        if (p->sq_head || p->ctl_head) verbs_conn_start(tp, i);
    }
}
