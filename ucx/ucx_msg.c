/*
 * The UCX transport's messages: sends as tag messages (one EAGER message, or
 * HDR then a DATA message received zero-copy) and the internal control
 * messages; the send records and their completions; the probe of incoming
 * messages, their records per sender and their delivery to the core in
 * arrival order (msg_begin, msg_end), the ring's DOORBELL and CREDIT included.
 * ucx.c describes the tag and the protocol.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>

#include <ucp/api/ucp.h>

#include "log.h"
#include "ringbuf.h"
#include "transport.h"
#include "ucx_int.h"
#include "ucx_wire.h"

/* ---- sends ------------------------------------------------------------------------ */

static int ucx_status(ucs_status_t st)
{
    switch (st) {
    case UCS_OK: return 0;
    case UCS_ERR_NO_MEMORY: return OOBX_ERR_NOMEM;
    case UCS_ERR_CANCELED: return OOBX_ERR_ABORTED;
    case UCS_ERR_TIMED_OUT: return OOBX_ERR_TIMEOUT;
    case UCS_ERR_MESSAGE_TRUNCATED: return OOBX_ERR_TRUNCATED;
    default: return OOBX_ERR_REMOTE;
    }
}

#define UCX_POOL_MAX 64

static ucx_sreq_t *ucx_sreq_new(ucx_tp_t *tp, size_t extra)
{
    ucx_sreq_t *s;
    if (extra == 0 && tp->sreq_pool) {
        s = tp->sreq_pool;
        tp->sreq_pool = s->next;
        tp->nsreq_pool--;
        memset(s, 0, offsetof(ucx_sreq_t, ctrl));
    } else {
        s = calloc(1, sizeof(*s) + extra);
        if (!s) return NULL;
    }
    s->peer = -1;
    s->poolable = extra == 0;
    s->tp = tp;
    s->live_next = tp->live;
    if (tp->live) tp->live->live_prev = s;
    tp->live = s;
    return s;
}

static void ucx_sreq_finish(ucx_sreq_t *s)
{
    ucx_tp_t *tp = s->tp;
    if (s->live_prev)
        s->live_prev->live_next = s->live_next;
    else
        tp->live = s->live_next;
    if (s->live_next) s->live_next->live_prev = s->live_prev;
    if (s->req && !tp->destroying) {
        s->req->status = s->status;
        s->req->done = 1;
    }
    if (s->ticket.nonce) oobx__cma_ticket_void(&s->ticket); /* a late reader must not take the payload */
    s->ticket.nonce = 0;
    free(s->own);
    s->own = NULL;
    if (s->poolable && tp->nsreq_pool < UCX_POOL_MAX && !tp->destroying) {
        s->next = tp->sreq_pool;
        tp->sreq_pool = s;
        tp->nsreq_pool++;
        return;
    }
    free(s);
}

static void ucx_sreq_op_done(ucx_sreq_t *s, ucs_status_t st)
{
    if (st != UCS_OK && !s->status) s->status = ucx_status(st);
    if (--s->pending == 0 && s->issued) ucx_sreq_finish(s);
}

static void ucx_send_cb(void *request, ucs_status_t status, void *user_data)
{
    ucx_sreq_op_done(user_data, status);
    ucp_request_free(request);
}

/* Accounts for a started operation (ptr from a *_nbx call). */
void ucx_sreq_track(ucx_sreq_t *s, ucs_status_ptr_t ptr)
{
    if (ptr == NULL) return;
    if (UCS_PTR_IS_ERR(ptr)) {
        if (!s->status) s->status = ucx_status(UCS_PTR_STATUS(ptr));
        return;
    }
    s->pending++;
}

ucp_request_param_t ucx_send_param(ucx_sreq_t *s)
{
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = ucx_send_cb,
        .user_data = s,
    };
    return prm;
}

/* Closes the issue phase of s: finishes it when nothing is outstanding. */
void ucx_sreq_issued(ucx_sreq_t *s)
{
    s->issued = 1;
    if (s->pending == 0) ucx_sreq_finish(s);
}

/* A control message (no core request); failures show up as peer failures. */
void ucx_send_ctrl(ucx_tp_t *tp, int peer, int type, const void *data, size_t len)
{
    ucp_ep_h ep = ucx_peer_ep(tp, peer);
    if (!ep) return;
    ucx_peer_t *p = &tp->peers[peer];
    ucx_sreq_t *s = ucx_sreq_new(tp, len > sizeof(s->ctrl) ? len : 0);
    if (!s) {
        ucx_peer_fail(tp, peer, OOBX_ERR_NOMEM, "ucx: out of memory sending to rank %d", peer);
        return;
    }
    void *buf = len > sizeof(s->ctrl) ? (void *)(s + 1) : (void *)s->ctrl;
    tp->ctrl_sent++;
    if (len) memcpy(buf, data, len);
    ucp_request_param_t prm = ucx_send_param(s);
    ucx_sreq_track(s, ucp_tag_send_nbx(ep, buf, len, ucx_tag(type, tp->rank, p->tx_seq++), &prm));
    ucx_sreq_issued(s);
}

static int ucx_send_tag(ucx_tp_t *tp, int peer, ucp_ep_h ep, ucx_sreq_t *s)
{
    ucx_peer_t *p = &tp->peers[peer];
    uint32_t seq = p->tx_seq++;
    ucp_request_param_t prm = ucx_send_param(s);
    if (sizeof(s->hdr) + s->hdr.len <= sizeof(s->ctrl)) {
        /* small: one contiguous buffer, UCX's short-message path */
        memcpy(s->ctrl, &s->hdr, sizeof(s->hdr));
        if (s->hdr.len) memcpy(s->ctrl + sizeof(s->hdr), s->payload, s->hdr.len);
        ucx_sreq_track(s, ucp_tag_send_nbx(ep, s->ctrl, sizeof(s->hdr) + s->hdr.len,
                                           ucx_tag(UCX_T_EAGER, tp->rank, seq), &prm));
    } else if (s->hdr.len <= UCX_EAGER_MAX) {
        s->iov[0].buffer = &s->hdr;
        s->iov[0].length = sizeof(s->hdr);
        s->iov[1].buffer = (void *)s->payload;
        s->iov[1].length = s->hdr.len;
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        prm.datatype = ucp_dt_make_iov();
        ucx_sreq_track(s, ucp_tag_send_nbx(ep, s->iov, s->hdr.len ? 2 : 1,
                                           ucx_tag(UCX_T_EAGER, tp->rank, seq), &prm));
    } else {
        ucx_sreq_track(s, ucp_tag_send_nbx(ep, &s->hdr, sizeof(s->hdr),
                                           ucx_tag(UCX_T_HDR, tp->rank, seq), &prm));
        ucx_sreq_track(s, ucp_tag_send_nbx(ep, s->payload, s->hdr.len,
                                           UCX_TAG_DATA | ucx_tag(0, tp->rank, seq), &prm));
    }
    ucx_sreq_issued(s);
    return 0;
}

/* A large payload to a peer of this host that can read this process: a
 * PULL names where it lies, and s is done when the answer comes (ucx.c
 * describes the protocol). */
static int ucx_send_pull(ucx_tp_t *tp, int peer, ucp_ep_h ep, ucx_sreq_t *s)
{
    ucx_peer_t *p = &tp->peers[peer];
    s->pull_seq = p->tx_seq++;
    oobx__cma_ticket_init(&s->ticket, s->payload);
    ucx_msg_t m = {.type = UCX_T_PULL, .hdr = s->hdr, .pull_addr = (uint64_t)(uintptr_t)s->payload,
                   .pull_ticket = (uint64_t)(uintptr_t)&s->ticket, .pull_nonce = s->ticket.nonce};
    size_t n = ucx_msg_encode(&m, s->ctrl, sizeof(s->ctrl));
    ucp_request_param_t prm = ucx_send_param(s);
    s->pending++; /* the answer */
    s->pull_next = NULL;
    if (p->pull_tail) p->pull_tail->pull_next = s;
    else p->pull_head = s;
    p->pull_tail = s;
    ucx_sreq_track(s, ucp_tag_send_nbx(ep, s->ctrl, n, ucx_tag(UCX_T_PULL, tp->rank, s->pull_seq), &prm));
    ucx_sreq_issued(s);
    return 0;
}

/* The answer to the oldest PULL to peer. */
static void ucx_pull_answered(ucx_tp_t *tp, int peer, const ucx_pull_ack_t *ack)
{
    ucx_peer_t *p = &tp->peers[peer];
    ucx_sreq_t *s = p->pull_head;
    if (!s || s->pull_seq != ack->seq) {
        ucx_protocol_error(tp, peer, "an answer to no pull of this rank");
        return;
    }
    p->pull_head = s->pull_next;
    if (!p->pull_head) p->pull_tail = NULL;
    if (ack->push) {
        /* it cannot read this process: the payload goes as DATA, and later ones as HDR + DATA */
        if (p->cma.state != OOBX_CMA_NO) {
            p->cma.state = OOBX_CMA_NO;
            OOBX_INFO(tp->log, "ucx: rank %d cannot read this rank's memory; large payloads to it go through UCX",
                      peer);
        }
        ucp_request_param_t prm = ucx_send_param(s);
        ucx_sreq_track(s, ucp_tag_send_nbx(p->ep, s->payload, s->hdr.len,
                                           UCX_TAG_DATA | ucx_tag(0, tp->rank, s->pull_seq), &prm));
    }
    ucx_sreq_op_done(s, UCS_OK);
}

/* The PULLs to a failed peer get no answer: they fail. */
void ucx_pull_drop(ucx_tp_t *tp, int peer)
{
    ucx_peer_t *p = &tp->peers[peer];
    while (p->pull_head) {
        ucx_sreq_t *s = p->pull_head;
        p->pull_head = s->pull_next;
        if (!s->status) s->status = oobx__peer_fail_status(&p->fail);
        oobx__cma_ticket_void(&s->ticket); /* its caller may reuse the buffer now */
        ucx_sreq_op_done(s, UCS_OK);
    }
    p->pull_tail = NULL;
}

int ucx_send(oobx_tp_t *base, int peer, const oobx_msg_hdr_t *hdr, const void *payload,
                    oobx_tp_req_t *req)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    if (peer < 0 || peer >= tp->nranks || peer == tp->rank)
        return oobx__fail(tp->log, OOBX_ERR_INVALID, "ucx: send to rank %d of %d", peer, tp->nranks);
    ucx_peer_t *p = &tp->peers[peer];
    if (p->fail.failed)
        return oobx__fail(tp->log, oobx__peer_fail_status(&p->fail), "%s", p->fail.why);
    if (!ucx_peer_known(tp, peer)) {
        if (hdr->kind == OOBX_MSG_CTRL) return OOBX_ERR_REMOTE; /* a notice that goes no way (transport.h) */
        return oobx__fail(tp->log, OOBX_ERR_INTERNAL, "ucx: send to rank %d before its address", peer);
    }
    /* the endpoint's own small messages (a goodbye at destroy, when the peer
     * may be leaving too) never set the ring up: unpacking the key of a
     * leaving peer's shared memory crashes UCX 1.13 */
    if (tp->rtx.setup && tp->rtx.peer == peer && hdr->kind != OOBX_MSG_CTRL) ucx_ring_activate(tp);
    /* nor do they open endpoints to same-host peers: those have no UCX error
     * handling, and UCX 1.13's tcp transport aborts the process when such a
     * connect is refused by a peer that is leaving (a failure notice goes
     * out while the ranks that heard it exit) */
    if (hdr->kind == OOBX_MSG_CTRL && !p->ep && strcmp(p->host, tp->host) == 0 &&
        (!(hdr->tag & OOBX_CTRL_MAY_CONNECT) || !ucx_pid_alive(p->pid))) {
        /* not an error of any call: the core says at debug level what did not go */
        return OOBX_ERR_REMOTE;
    }
    ucp_ep_h ep = p->fail.failed ? NULL : ucx_peer_ep(tp, peer);
    if (!ep) return oobx__fail(tp->log, oobx__peer_fail_status(&p->fail), "%s", p->fail.why);
    ucx_sreq_t *s = ucx_sreq_new(tp, 0);
    if (!s) return oobx__fail(tp->log, OOBX_ERR_NOMEM, "ucx: out of memory sending to rank %d", peer);
    s->req = req;
    s->peer = peer;
    s->hdr = *hdr;
    s->payload = payload;
    req->done = 0;
    req->status = 0;
    /* the ring is for bandwidth: a small message goes as one tag message
     * (a doorbell costs as much), and so does a large one (received in place
     * by UCX's rendezvous, or not at all when the receiver does not want it),
     * unless ring messages wait before it */
    int tag_path = hdr->len <= UCX_EAGER_MAX || hdr->len >= UCX_RING_DIRECT_MIN;
    int ring_waits = tp->rtx.active && tp->rtx.peer == peer && tp->rtx.q_head;
    if (tp->cma_min && hdr->len >= tp->cma_min && hdr->len > UCX_EAGER_MAX && p->cma.state != OOBX_CMA_NO &&
        hdr->kind != OOBX_MSG_CTRL && !ring_waits)
        return ucx_send_pull(tp, peer, ep, s);
    if (tp->rtx.active && tp->rtx.peer == peer && (!tag_path || tp->rtx.q_head)) {
        if (tp->rtx.q_tail)
            tp->rtx.q_tail->next = s;
        else
            tp->rtx.q_head = s;
        tp->rtx.q_tail = s;
        ucx_ring_push(tp);
        return 0;
    }
    return ucx_send_tag(tp, peer, ep, s);
}

/* ---- receives ----------------------------------------------------------------------- */

static void ucx_recv_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                        void *user_data)
{
    (void)request;
    (void)info;
    ucx_rrec_t *r = user_data;
    if (status != UCS_OK) r->status = ucx_status(status);
    r->arrived = 1;
    if (r->peer >= 0) ucx_mark_dirty(r->tp, r->peer);
}

static void ucx_data_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                        void *user_data)
{
    (void)request;
    (void)info;
    ucx_rrec_t *r = user_data;
    if (r->released && status == UCS_ERR_CANCELED) {
        r->repost = 1; /* the DATA is still to come: ucx_release receives it into nowhere */
        return;
    }
    if (r->released) status = UCS_OK; /* what came into the given-back buffer was dropped */
    if (status != UCS_OK && !r->status && !(status == UCS_ERR_MESSAGE_TRUNCATED && r->dropped))
        r->status = ucx_status(status);
    r->complete = 1;
    if (r->peer >= 0) ucx_mark_dirty(r->tp, r->peer);
}

void ucx_rrec_free(ucx_rrec_t *r)
{
    ucx_tp_t *tp = r->tp;
    if (r->ureq) ucp_request_free(r->ureq);
    if (r->data_ureq) ucp_request_free(r->data_ureq);
    if (r->buf != r->small) free(r->buf);
    if (tp->nrrec_pool < UCX_POOL_MAX && !tp->destroying) {
        r->next = tp->rrec_pool;
        tp->rrec_pool = r;
        tp->nrrec_pool++;
        return;
    }
    free(r);
}

static ucx_rrec_t *ucx_rrec_new(ucx_tp_t *tp)
{
    ucx_rrec_t *r = tp->rrec_pool;
    if (r) {
        tp->rrec_pool = r->next;
        tp->nrrec_pool--;
        memset(r, 0, offsetof(ucx_rrec_t, small));
    } else {
        r = calloc(1, sizeof(*r));
        if (!r) return NULL;
    }
    r->tp = tp;
    return r;
}

/* A message that breaks the protocol: the peer is dropped. */
void ucx_protocol_error(ucx_tp_t *tp, int peer, const char *what)
{
    ucx_peer_fail(tp, peer, OOBX_ERR_PROTOCOL, "ucx: rank %d broke the protocol: %s", peer, what);
}

static void ucx_credit_send(ucx_tp_t *tp, uint64_t credit)
{
    ucx_send_ctrl(tp, tp->rrx.peer, UCX_T_CREDIT, &credit, sizeof(credit));
}

/* Posts the receive of r's payload (DATA, with r's sequence number) into dst
 * (NULL: the core drops it, received into nothing). */
static void ucx_rrec_post_data(ucx_tp_t *tp, ucx_rrec_t *r, void *dst, size_t len)
{
    r->complete = 0;
    r->dropped = dst == NULL;
    r->dst = dst;
    r->data_len = len;
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.recv = ucx_data_cb,
        .user_data = r,
    };
    ucs_status_ptr_t ptr = ucp_tag_recv_nbx(tp->worker, dst ? dst : r->small, dst ? len : 0,
                                            UCX_TAG_DATA | ucx_tag(0, r->peer, ucx_tag_seq(r->tag)), ~0ull, &prm);
    if (ptr == NULL) {
        r->complete = 1;
    } else if (UCS_PTR_IS_ERR(ptr)) {
        r->complete = 1;
        if (!(r->dropped && UCS_PTR_STATUS(ptr) == UCS_ERR_MESSAGE_TRUNCATED))
            r->status = ucx_status(UCS_PTR_STATUS(ptr));
    } else {
        r->data_ureq = ptr;
        if (ucp_request_check_status(ptr) != UCS_INPROGRESS) r->complete = 1;
    }
}

/* Handles the head-of-line work of record r (its message has arrived). */
static void ucx_rrec_begin(ucx_tp_t *tp, ucx_rrec_t *r)
{
    r->begun = 1;
    r->complete = 1; /* unless a payload is still coming */
    if (r->status) {
        ucx_peer_fail(tp, r->peer, r->status, "ucx: receive from rank %d failed: %s", r->peer,
                      tp->log->api->strerror(r->status));
        return;
    }
    ucx_msg_t m;
    char why[200];
    if (ucx_msg_decode(r->type, r->buf, r->len, r->peer, &m, why, sizeof(why))) {
        ucx_protocol_error(tp, r->peer, why);
        return;
    }
    switch (r->type) {
    case UCX_T_EAGER:
    case UCX_T_HDR: {
        void *dst = tp->sink.msg_begin(tp->sink.core, &m.hdr, &r->cookie);
        r->has_msg = 1;
        if (r->type == UCX_T_EAGER) {
            if (m.hdr.len && dst) memcpy(dst, m.payload, m.hdr.len);
            return;
        }
        /* a payload the core drops: received into nothing, UCX discards it
         * (and a rendezvous sender is told so without sending it) */
        ucx_rrec_post_data(tp, r, dst, m.hdr.len);
        return;
    }
    case UCX_T_PULL: {
        void *dst = tp->sink.msg_begin(tp->sink.core, &m.hdr, &r->cookie);
        r->has_msg = 1;
        ucx_peer_t *p = &tp->peers[r->peer];
        if (!ucx_peer_known(tp, r->peer)) p->cma.state = OOBX_CMA_NO;
        ucx_pull_ack_t ack = {.seq = ucx_tag_seq(r->tag), .push = 0};
        int got = dst && oobx__cma_check(&p->cma)
                      ? oobx__cma_pull_ticket(&p->cma, dst, m.pull_addr, m.hdr.len, m.pull_ticket, m.pull_nonce)
                      : -1;
        if (dst && got == 1) {
            ucx_peer_fail(tp, r->peer, OOBX_ERR_REMOTE,
                          "ucx: rank %d withdrew a payload of %llu bytes before this rank read it (its link failed "
                          "or it left)",
                          r->peer, (unsigned long long)m.hdr.len);
            return;
        }
        if (dst && got != 0) {
            /* this process cannot read the sender's: it sends the payload */
            OOBX_INFO(tp->log, "ucx: rank %d sends its large payloads to this rank through UCX: %s", r->peer,
                      p->cma.why);
            ack.push = 1;
        } else if (dst) {
            OOBX_TRACE(tp->log, "ucx: pulled %llu bytes from rank %d", (unsigned long long)m.hdr.len, r->peer);
        }
        ucx_send_ctrl(tp, r->peer, UCX_T_PULL_ACK, &ack, sizeof(ack));
        if (ack.push) ucx_rrec_post_data(tp, r, dst, m.hdr.len);
        return;
    }
    case UCX_T_PULL_ACK:
        ucx_pull_answered(tp, r->peer, &m.ack);
        return;
    case UCX_T_DOORBELL: {
        ucx_ring_rx_t *rx = &tp->rrx;
        ringbuf_rx_ev_t ev;
        if (r->peer != rx->peer || !rx->base) {
            ucx_protocol_error(tp, r->peer, "unexpected ring doorbell");
            return;
        }
        if (m.db.count > rx->rb.slots) {
            ucx_protocol_error(tp, r->peer, "ring doorbell for no chunk or more than the ring holds");
            return;
        }
        for (uint32_t k = 0; k < m.db.count; k++) {
            uint64_t seq = m.db.seq + k;
            if (oobx__ringbuf_rx_chunk(&rx->rb, rx->base, seq, oobx__ringbuf_rx_peek_bytes(&rx->rb, rx->base, seq), &ev, why,
                                 sizeof(why))) {
                ucx_protocol_error(tp, r->peer, why);
                return;
            }
            if (ev.first && r->has_msg) {
                ucx_protocol_error(tp, r->peer, "ring doorbell spans two messages");
                return;
            }
            if (ev.first) {
                if (ev.hdr.src != r->peer) {
                    ucx_protocol_error(tp, r->peer, "ring message header names another sender");
                    return;
                }
                rx->dest = tp->sink.msg_begin(tp->sink.core, &ev.hdr, &r->cookie);
                r->has_msg = 1;
                r->complete = 0;
                rx->cur = r;
            }
            if (ev.len && rx->dest) memcpy((char *)rx->dest + ev.off, ev.data, ev.len);
            if (ev.last) {
                rx->cur->complete = 1;
                rx->cur = NULL;
            }
            uint64_t credit;
            if (oobx__ringbuf_rx_release(&rx->rb, &credit)) ucx_credit_send(tp, credit);
        }
        return;
    }
    case UCX_T_CREDIT:
        if (r->peer != tp->rtx.peer || !tp->rtx.active) {
            ucx_protocol_error(tp, r->peer, "unexpected ring credit");
            return;
        }
        if (oobx__ringbuf_tx_credit(&tp->rtx.rb, m.credit)) {
            ucx_protocol_error(tp, r->peer, "ring credit for chunks never sent");
            return;
        }
        ucx_ring_push(tp);
        return;
    case UCX_T_SETUP:
        ucx_handle_setup(tp, r->peer, r->buf, r->len);
        return;
    default:
        return; /* ucx_msg_decode knows every type */
    }
}

/* Begins what can begin and ends what can end, in the sender's order. */
void ucx_peer_drain(ucx_tp_t *tp, int peer)
{
    ucx_peer_t *p = &tp->peers[peer];
    for (ucx_rrec_t *r = p->rx_head; r && !p->fail.failed; r = r->next) {
        if (!r->arrived) break;
        if (r->begun) continue;
        /* a kept receive completes when its message is whole: an earlier
         * one of this sender may still be coming (UCX's rendezvous) */
        if (ucx_tag_seq(r->tag) != p->rx_seq) break;
        p->rx_seq++;
        ucx_rrec_begin(tp, r);
    }
    while (!p->fail.failed && p->rx_head && p->rx_head->begun && p->rx_head->complete) {
        ucx_rrec_t *r = p->rx_head;
        if (r->status && r->has_msg) {
            ucx_peer_fail(tp, peer, r->status, "ucx: payload from rank %d lost: %s", peer,
                          tp->log->api->strerror(r->status));
            break;
        }
        p->rx_head = r->next;
        if (!p->rx_head) p->rx_tail = NULL;
        if (r->has_msg) tp->sink.msg_end(tp->sink.core, r->cookie);
        ucx_rrec_free(r);
    }
}

/* A message of peer's is in: the peer is watched for failures (its pid on
 * this host, else an endpoint with UCX's error handling). */
static void ucx_peer_watched(ucx_tp_t *tp, int peer)
{
    ucx_peer_t *p = &tp->peers[peer];
    if (!p->ep && !p->fail.failed && !p->watch_pid) {
        if (ucx_peer_known(tp, peer) && strcmp(p->host, tp->host) == 0)
            ucx_peer_watch(tp, peer);
        else
            ucx_peer_ep(tp, peer);
    }
}

/* A record of peer's is in: the peer is marked for the drain, and watched. */
static void ucx_rrec_watch(ucx_tp_t *tp, int peer)
{
    ucx_mark_dirty(tp, peer);
    ucx_peer_watched(tp, peer);
}

/* A whole small message that is its sender's next, with none of its
 * records waiting: it goes to the core from the kept receive's buffer, no
 * record made (1), else 0 and it takes the record's way. */
static int ucx_deliver_now(ucx_tp_t *tp, const ucx_tag_info_t *ti, const void *buf, size_t len, uint64_t tag)
{
    ucx_peer_t *p = &tp->peers[ti->peer];
    if (ti->type != UCX_T_EAGER || p->rx_head || p->fail.failed || ucx_tag_seq(tag) != p->rx_seq) return 0;
    ucx_msg_t m;
    char why[200];
    p->rx_seq++;
    ucx_peer_watched(tp, ti->peer);
    if (ucx_msg_decode(UCX_T_EAGER, buf, len, ti->peer, &m, why, sizeof(why))) {
        ucx_protocol_error(tp, ti->peer, why);
        return 1;
    }
    void *cookie = NULL;
    void *dst = tp->sink.msg_begin(tp->sink.core, &m.hdr, &cookie);
    if (m.hdr.len && dst) memcpy(dst, m.payload, m.hdr.len);
    tp->sink.msg_end(tp->sink.core, cookie);
    return 1;
}

/* Where a record falls in its sender's order: records begun lie just below
 * 2^31, those to come from 2^31 on. */
static uint32_t ucx_seq_key(const ucx_peer_t *p, uint64_t tag)
{
    return ucx_tag_seq(tag) - p->rx_seq + 0x80000000u;
}

/* A sequence number a sender may use next: from the next expected on,
 * within UCX_SEQ_WINDOW (key: ucx_seq_key). */
static int ucx_key_ok(uint32_t key)
{
    return key >= 0x80000000u && key - 0x80000000u < UCX_SEQ_WINDOW;
}

static int ucx_seq_ok(const ucx_peer_t *p, uint64_t tag)
{
    return ucx_key_ok(ucx_seq_key(p, tag));
}

/* Puts record r in its sender's list in sequence order (nearly always at
 * the end); a number outside the window, or one already there, breaks the
 * protocol (1, r freed). */
static int ucx_rrec_enqueue(ucx_tp_t *tp, ucx_rrec_t *r)
{
    ucx_peer_t *p = &tp->peers[r->peer];
    uint32_t key = ucx_seq_key(p, r->tag);
    char why[160];
    if (!ucx_key_ok(key)) {
        snprintf(why, sizeof(why), "message number %u where %u was next", ucx_tag_seq(r->tag), p->rx_seq);
        goto broken;
    }
    r->next = NULL;
    if (!p->rx_tail || ucx_seq_key(p, p->rx_tail->tag) < key) {
        if (p->rx_tail)
            p->rx_tail->next = r;
        else
            p->rx_head = r;
        p->rx_tail = r;
        return 0;
    }
    ucx_rrec_t **at = &p->rx_head;
    while (*at && ucx_seq_key(p, (*at)->tag) < key) at = &(*at)->next;
    if (*at && ucx_seq_key(p, (*at)->tag) == key) {
        snprintf(why, sizeof(why), "message number %u twice", ucx_tag_seq(r->tag));
        goto broken;
    }
    r->next = *at;
    *at = r;
    return 0;
broken:
    ucx_rrec_free(r);
    ucx_protocol_error(tp, (int)(p - tp->peers), why);
    return 1;
}

/* A record with a buffer for a message of len bytes (its small one, or
 * the heap); NULL, the transport failed, when memory is out. */
static ucx_rrec_t *ucx_rrec_for(ucx_tp_t *tp, size_t len)
{
    ucx_rrec_t *r = ucx_rrec_new(tp);
    void *buf = !r ? NULL : len <= sizeof(r->small) ? r->small : malloc(len ? len : 1);
    if (!r || !buf) {
        free(r);
        tp->fatal = oobx__fail(tp->log, OOBX_ERR_NOMEM, "ucx: out of memory receiving %zu bytes", len);
        return NULL;
    }
    r->buf = buf;
    r->len = len;
    return r;
}

static void ucx_prepost_collect(ucx_tp_t *tp);

/* Takes every non-DATA message UCX holds, in arrival order. While every
 * kept receive is posted, none can wait there (an arriving message takes a
 * posted receive, and a post takes a waiting message first): no probe. */
void ucx_probe(ucx_tp_t *tp)
{
    ucx_prepost_refill(tp); /* a message waiting in the queue takes it first, and is collected next */
    ucx_prepost_collect(tp); /* first: they came before what waits in the queue */
    if (tp->fatal) return;
    if (tp->pp_on && !tp->probe_due) return;
    tp->probe_due = 0;
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    while ((msg = ucp_tag_probe_nb(tp->worker, 0, UCX_TAG_DATA, 1, &info)) != NULL) {
        int type = ucx_tag_type(info.sender_tag);
        int peer = ucx_tag_rank(info.sender_tag);
        ucx_tag_info_t ti;
        char why[160];
        int bad = ucx_tag_check(info.sender_tag, info.length, tp->rank, tp->nranks, &ti, why, sizeof(why)) != 0;
        int out_of_order = !bad && !ucx_seq_ok(&tp->peers[peer], info.sender_tag);
        bad |= out_of_order;
        ucx_rrec_t *r = ucx_rrec_for(tp, info.length);
        if (!r) return;
        void *buf = r->buf;
        r->peer = bad ? -1 : peer;
        r->type = type;
        r->tag = info.sender_tag;
        ucp_request_param_t prm = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb.recv = ucx_recv_cb,
            .user_data = r,
        };
        if (bad) {
            /* take it off the queue and drop it; a bogus sender rank cannot be blamed */
            if (!out_of_order && oobx__ratelimit_ok(&tp->rl))
                OOBX_WARN(tp->log, "ucx: dropped a message with tag 0x%016" PRIx64 " and %zu bytes: %s",
                          info.sender_tag, info.length, why);
            prm.op_attr_mask = 0;
            ucs_status_ptr_t ptr = ucp_tag_msg_recv_nbx(tp->worker, buf, info.length, msg, &prm);
            ucx_wait_req(tp, ptr, 100);
            if (buf != r->small) free(buf);
            free(r);
            if (out_of_order) ucx_protocol_error(tp, peer, "a message number outside its window");
            continue;
        }
        ucx_rrec_enqueue(tp, r);
        ucs_status_ptr_t ptr = ucp_tag_msg_recv_nbx(tp->worker, buf, info.length, msg, &prm);
        if (ptr == NULL) {
            r->arrived = 1;
        } else if (UCS_PTR_IS_ERR(ptr)) {
            r->arrived = 1;
            r->status = ucx_status(UCS_PTR_STATUS(ptr));
        } else {
            r->ureq = ptr;
            if (ucp_request_check_status(ptr) != UCS_INPROGRESS) r->arrived = 1;
        }
        ucx_rrec_watch(tp, peer);
    }
}

/* ---- kept receives ---------------------------------------------------------------- */

static void ucx_prepost_done(ucx_tp_t *tp, ucx_prepost_t *pp)
{
    pp->done = 1;
    pp->next_done = NULL;
    if (tp->pp_done_tail)
        tp->pp_done_tail->next_done = pp;
    else
        tp->pp_done_head = pp;
    tp->pp_done_tail = pp;
}

static void ucx_prepost_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info, void *user_data)
{
    ucx_prepost_t *pp = user_data;
    pp->status = status;
    if (info) pp->info = *info;
    ucp_request_free(request);
    pp->ureq = NULL;
    ucx_prepost_done(pp->tp, pp);
}

/* Posts pp. A message already waiting completes it inside the call: UCX
 * runs the callback there (no immediate completion: UCX 1.13 leaves the
 * tag information of one unfilled). */
static int ucx_prepost_post(ucx_tp_t *tp, ucx_prepost_t *pp)
{
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
        .cb.recv = ucx_prepost_cb,
        .user_data = pp,
    };
    pp->ureq = NULL;
    pp->done = 0;
    pp->info.sender_tag = UCX_TAG_DATA; /* no sender, unless UCX says which */
    pp->info.length = 0;
    ucs_status_ptr_t ptr = ucp_tag_recv_nbx(tp->worker, pp->buf, tp->pp_bytes, 0, UCX_TAG_DATA, &prm);
    if (UCS_PTR_IS_ERR(ptr))
        return oobx__fail(tp->log, OOBX_ERR_INTERNAL, "ucx: cannot post a receive: %s",
                          ucs_status_string(UCS_PTR_STATUS(ptr)));
    if (ptr == NULL) return oobx__fail(tp->log, OOBX_ERR_INTERNAL, "ucx: a receive completed without its callback");
    if (!pp->done) pp->ureq = ptr; /* else the callback ran (and released the request) */
    return 0;
}

int ucx_prepost_start(ucx_tp_t *tp)
{
    tp->probe_due = 1; /* until they are all posted */
    tp->pp_bytes = ucx_msg_max();
    for (int i = 0; i < UCX_PREPOST; i++) {
        ucx_prepost_t *pp = &tp->pp[i];
        pp->tp = tp;
        pp->buf = malloc(tp->pp_bytes);
        if (!pp->buf) return oobx__fail(tp->log, OOBX_ERR_NOMEM, "ucx: out of memory for its receives");
    }
    tp->pp_on = 1;
    for (int i = 0; i < UCX_PREPOST; i++) {
        int rc = ucx_prepost_post(tp, &tp->pp[i]);
        if (rc) return rc;
    }
    tp->probe_due = 0;
    return 0;
}

/* Takes in what the kept receives received, in the order they completed,
 * and posts them again (a repost that finds a message waiting completes at
 * once and is taken in by the same loop). */
static void ucx_prepost_collect(ucx_tp_t *tp)
{
    ucx_prepost_t *pp;
    while ((pp = tp->pp_done_head) != NULL) {
        tp->pp_done_head = pp->next_done;
        if (!tp->pp_done_head) tp->pp_done_tail = NULL;
        pp->done = 0;
        if (pp->status == UCS_ERR_CANCELED) continue; /* stopped */
        if (pp->status != UCS_OK) {
            /* a message longer than any of the protocol's: it is gone, and
             * so is its sender's order */
            int peer = ucx_tag_rank(pp->info.sender_tag);
            if (pp->status == UCS_ERR_MESSAGE_TRUNCATED && peer >= 0 && peer < tp->nranks && peer != tp->rank &&
                !(pp->info.sender_tag & UCX_TAG_DATA))
                ucx_protocol_error(tp, peer, "a message longer than the protocol allows");
            else if (oobx__ratelimit_ok(&tp->rl))
                OOBX_WARN(tp->log, "ucx: a receive failed: %s", ucs_status_string(pp->status));
        } else {
            ucx_tag_info_t ti;
            char why[160];
            size_t len = pp->info.length;
            if (ucx_tag_check(pp->info.sender_tag, len, tp->rank, tp->nranks, &ti, why, sizeof(why)) != 0) {
                if (oobx__ratelimit_ok(&tp->rl))
                    OOBX_WARN(tp->log, "ucx: dropped a message with tag 0x%016" PRIx64 " and %zu bytes: %s",
                              pp->info.sender_tag, len, why);
            } else if (!ucx_deliver_now(tp, &ti, pp->buf, len, pp->info.sender_tag)) {
                ucx_rrec_t *r = ucx_rrec_for(tp, len);
                if (!r) return;
                memcpy(r->buf, pp->buf, len);
                r->peer = ti.peer;
                r->type = ti.type;
                r->tag = pp->info.sender_tag;
                r->arrived = 1;
                if (ucx_rrec_enqueue(tp, r) == 0) ucx_rrec_watch(tp, ti.peer);
            }
        }
        if (tp->destroying) {
            tp->probe_due = 1;
        } else if (!tp->pp_later && !tp->pp_done_head) {
            tp->pp_later = pp; /* the last of this round: posted at the next progress */
        } else if (ucx_prepost_post(tp, pp) != 0) {
            tp->probe_due = 1;
            tp->fatal = OOBX_ERR_INTERNAL;
            return;
        }
    }
}

/* Posts the receive left for later (ucx_prepost_collect); 1 when one was. */
int ucx_prepost_refill(ucx_tp_t *tp)
{
    ucx_prepost_t *pp = tp->pp_later;
    if (!pp) return 0;
    tp->pp_later = NULL;
    if (tp->destroying) {
        tp->probe_due = 1;
    } else if (ucx_prepost_post(tp, pp) != 0) {
        tp->probe_due = 1;
        tp->fatal = OOBX_ERR_INTERNAL;
    }
    return 1;
}

void ucx_prepost_stop(ucx_tp_t *tp)
{
    if (!tp->pp_on) return;
    for (int i = 0; i < UCX_PREPOST; i++)
        if (tp->pp[i].ureq) ucp_request_cancel(tp->worker, tp->pp[i].ureq);
    /* the callbacks of the cancelled receives (UCX calls them at once, or
     * at its next progress) */
    for (int n = 0; n < 1000; n++) {
        int out = 0;
        for (int i = 0; i < UCX_PREPOST; i++) out += tp->pp[i].ureq != NULL;
        if (!out) break;
        ucp_worker_progress(tp->worker);
    }
    tp->pp_done_head = tp->pp_done_tail = NULL;
    tp->pp_later = NULL;
    tp->pp_on = 0;
    tp->probe_due = 1;
}

/* ---- buffers given back by failed calls ---------------------------------------- */

/* The released DATA receives that were cancelled before they matched are
 * posted again, into nowhere (the DATA is still to come). */
static void ucx_release_repost(ucx_tp_t *tp)
{
    for (int i = 0; i < tp->nranks; i++)
        for (ucx_rrec_t *r = tp->peers[i].rx_head; r; r = r->next)
            if (r->released && r->repost && !r->complete) {
                r->repost = 0;
                ucp_request_free(r->data_ureq);
                r->data_ureq = NULL;
                ucx_rrec_post_data(tp, r, NULL, r->data_len);
                if (r->complete) ucx_mark_dirty(tp, i);
            }
}

/* Work UCX still has on a given-back buffer: sends from it (or with
 * operations from it out), DATA receives into it. Marks the peers. */
static int ucx_release_busy(ucx_tp_t *tp, const char *base, size_t len, int *peers)
{
    int busy = 0;
    for (ucx_sreq_t *s = tp->live; s; s = s->live_next)
        if (s->peer >= 0 && s->pending > 0 && !tp->peers[s->peer].fail.failed &&
            (s->wait_old || (!s->own && oobx__in_range(s->payload, base, len)))) {
            busy = 1;
            if (peers) peers[s->peer] = 1;
        }
    for (int i = 0; i < tp->nranks; i++)
        for (ucx_rrec_t *r = tp->peers[i].rx_head; r; r = r->next)
            if (r->released && !r->complete) {
                busy = 1;
                if (peers) peers[i] = 1;
            }
    return busy;
}

/* s goes on from a copy of its payload; 0 when made (else it is waited for). */
static int ucx_sreq_own(ucx_sreq_t *s)
{
    void *own = malloc(s->hdr.len);
    if (!own) return -1;
    memcpy(own, s->payload, s->hdr.len);
    s->own = own;
    s->payload = own;
    return 0;
}

void ucx_release(oobx_tp_t *base, const void *buf, size_t len)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    const char *lo = buf;
    /* failed peers not yet dropped: dropping closes their endpoints, which ends UCX's sends to them */
    if (tp->fail_pending && !tp->destroying) ucx_report_failures(tp);
    /* ring messages not yet written in full go on from a copy */
    for (ucx_sreq_t *s = tp->rtx.q_head; s; s = s->next)
        if (!s->own && s->hdr.len && oobx__in_range(s->payload, lo, len) && ucx_sreq_own(s) == 0)
            s->wait_old = s->pending > 0;
    /* a PULL offered: its reader finds the copy through the ticket */
    for (int i = 0; i < tp->nranks; i++)
        for (ucx_sreq_t *s = tp->peers[i].pull_head; s; s = s->pull_next)
            if (!s->own && oobx__in_range(s->payload, lo, len) && ucx_sreq_own(s) == 0)
                oobx__cma_ticket_move(&s->ticket, s->own);
    /* a DATA receive into it that has not matched is cancelled (and taken again into nowhere) */
    for (int i = 0; i < tp->nranks; i++)
        for (ucx_rrec_t *r = tp->peers[i].rx_head; r; r = r->next)
            if (r->data_ureq && !r->complete && !r->released && oobx__in_range(r->dst, lo, len)) {
                r->released = 1;
                ucp_request_cancel(tp->worker, r->data_ureq);
            }
    if (tp->rrx.cur && oobx__in_range(tp->rrx.dest, lo, len)) tp->rrx.dest = NULL; /* chunks are copied in progress */
    /* what UCX has started on it: progress a short bound, then close the links */
    uint64_t deadline = oobx__deadline(UCX_CLOSE_MS);
    for (;;) {
        ucx_release_repost(tp);
        if (!ucx_release_busy(tp, lo, len, NULL)) break;
        if (!ucp_worker_progress(tp->worker) && ucp_worker_arm(tp->worker) == UCS_OK) {
            struct pollfd pf = {.fd = tp->efd, .events = POLLIN};
            (void)poll(&pf, 1, 5); /* sleep on the worker's event fd, not spin */
        }
        if (oobx__now_ns() < deadline) continue;
        int *peers = calloc((size_t)tp->nranks, sizeof(*peers));
        if (!peers) break;
        (void)ucx_release_busy(tp, lo, len, peers);
        for (int i = 0; i < tp->nranks; i++)
            if (peers[i])
                ucx_peer_fail(tp, i, OOBX_ERR_TIMEOUT,
                              "ucx: UCX did not end its work with rank %d on a buffer given back by a failed call "
                              "within %d ms; the link is closed",
                              i, UCX_CLOSE_MS);
        free(peers);
        ucx_report_failures(tp); /* closes those endpoints: UCX lets go of the buffer */
        break;
    }
}
