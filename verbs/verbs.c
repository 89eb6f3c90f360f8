/*
 * The raw verbs transport: a loadable module (liboobx-verbs.so) exporting
 * oobx_verbs_ops. docs/transports/verbs.md describes it for users; this is
 * the short form.
 *
 * One rdma_cm event channel and listener, one PD, one completion channel and
 * one CQ shared by every QP of the instance. The address card carries the
 * listener's IP and port and the device name. One RC QP per pair of ranks,
 * made on the first send (and towards the ring successor in ring()); when
 * both ranks connect at once the connection initiated by the lower rank is
 * kept and the other is rejected as "crossed" (sends wait on the peer, not on
 * a connection, so nothing moves). Connections are verbs_cm.c; device and
 * address choice verbs_dev.c.
 *
 * Messages: every QP has VERBS_RECV_DEPTH receive buffers posted; a sender
 * holds one credit per receive the peer has posted for it, spends one per
 * SEND or WRITE WITH IMMEDIATE, and gets them back in the header of every
 * message the peer sends (or in a credit message once VERBS_CREDIT_BATCH are
 * owed). The last VERBS_CREDIT_RESERVE credits are kept for credit messages,
 * so two ranks that both run out can always return each other's.
 *   - up to VERBS_EAGER_MAX payload bytes: one SEND from a bounce buffer;
 *   - larger: the payload is registered for remote reads and an RTS carries
 *     its address and key; the receiver reads it into the buffer msg_begin
 *     returned and answers FIN, which completes the send (up to
 *     VERBS_COPY_MAX the payload is copied first and the send completes once
 *     the RTS is posted);
 *   - ring link me -> next: the receiver registered a ring buffer and sent
 *     SETUP; every later message to next is cut by ringbuf_tx_* and each chunk
 *     is an RDMA WRITE WITH IMMEDIATE (immediate: the chunk's sequence number,
 *     low 32 bits) into its slot; ring credits come back in RCREDIT messages.
 * Messages from one sender are begun and ended in arrival order (records per
 * peer, as in ucx/ucx.c).
 *
 * Work request ids: peer (24 bits) | connection serial (16) | kind (4) |
 * index (20). A completion whose connection is gone (serial or QP number
 * differ) is dropped.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "oobx.h"
#include "ringbuf.h"
#include "util.h"
#include "verbs_int.h"

/* ---- names and failures --------------------------------------------------------- */

int verbs_peer_known(verbs_tp_t *tp, int peer)
{
    if (!tp->peers[peer].have_addr && tp->sink.need_peer) (void)tp->sink.need_peer(tp->sink.core, peer);
    return tp->peers[peer].have_addr;
}

const char *verbs_who(verbs_tp_t *tp, int peer, char *buf, size_t len)
{
    const verbs_peer_t *p = &tp->peers[peer];
    if (!p->have_addr && !p->addr_text[0]) (void)verbs_peer_known(tp, peer);
    snprintf(buf, len, "rank %d (%s)", peer, p->addr_text[0] ? p->addr_text : "address unknown");
    return buf;
}

void verbs_mark_dirty(verbs_tp_t *tp, int peer)
{
    oobx__dirty_mark(&tp->peers[peer].dirty, tp->dirty, &tp->ndirty, peer);
}

void verbs_peer_fail(verbs_tp_t *tp, int peer, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    oobx__peer_fail_vrecord(&tp->peers[peer].fail, &tp->fail_pending, status, fmt, ap);
    va_end(ap);
}

static void verbs_protocol_error(verbs_tp_t *tp, int peer, const char *what)
{
    char who[128];
    verbs_peer_fail(tp, peer, OOBX_ERR_PROTOCOL, "verbs: %s broke the protocol: %s (device %s)",
                    verbs_who(tp, peer, who, sizeof(who)), what, tp->dev);
}


/* ---- sends and receives of one connection ---------------------------------------- */

static void verbs_send_done(verbs_tp_t *tp, verbs_send_t *s, int status)
{
    if (s->mr) ibv_dereg_mr(s->mr);
    if (s->old_mr) ibv_dereg_mr(s->old_mr);
    free(s->own);
    if (s->req && !tp->destroying) {
        s->req->status = status;
        s->req->done = 1;
    }
    free(s);
}

/* Everything of s is posted: a request whose payload was copied is done
 * (the copy and its registration live until the FIN or the completions). */
static void verbs_send_posted(verbs_tp_t *tp, verbs_send_t *s)
{
    if (s->own && s->req) {
        if (!tp->destroying) {
            s->req->status = 0;
            s->req->done = 1;
        }
        s->req = NULL;
    }
}

static void verbs_wait_remove(verbs_peer_t *p, verbs_send_t *s)
{
    for (verbs_send_t **pp = &p->wait; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            return;
        }
}

static int verbs_post_recv(verbs_tp_t *tp, verbs_conn_t *c, uint32_t idx)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)(c->rbuf + (size_t)idx * VERBS_BUF_BYTES),
        .length = VERBS_BUF_BYTES,
        .lkey = c->rmr->lkey,
    };
    struct ibv_recv_wr wr = {.wr_id = verbs_wrid(c, VERBS_WR_RECV, idx), .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr *bad = NULL;
    int rc = ibv_post_recv(c->qp, &wr, &bad);
    if (rc) {
        char who[128];
        verbs_peer_fail(tp, c->peer, OOBX_ERR_REMOTE, "verbs: posting a receive for %s on device %s QP %u failed: %s",
                        verbs_who(tp, c->peer, who, sizeof(who)), tp->dev, c->qp->qp_num, strerror(rc));
    }
    return rc;
}

static int verbs_can_post(const verbs_conn_t *c, uint32_t credits)
{
    return c->nfree > 0 && c->tx_credits >= credits;
}

/* Posts wr (signaled) on c; a failure fails the peer. */
static int verbs_post(verbs_tp_t *tp, verbs_conn_t *c, struct ibv_send_wr *wr, const char *what)
{
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(c->qp, wr, &bad);
    if (rc) {
        char who[128];
        verbs_peer_fail(tp, c->peer, OOBX_ERR_REMOTE, "verbs: posting %s to %s on device %s QP %u failed: %s", what,
                        verbs_who(tp, c->peer, who, sizeof(who)), tp->dev, c->qp->qp_num, strerror(rc));
    }
    return rc;
}

/* A SEND of header + a + b from a bounce buffer; takes one credit. */
static int verbs_post_msg(verbs_tp_t *tp, verbs_conn_t *c, int type, const void *a, size_t alen, const void *b, size_t blen)
{
    uint32_t idx = c->free_slots[--c->nfree];
    unsigned char *buf = c->sbuf + (size_t)idx * VERBS_BUF_BYTES;
    uint32_t give = c->rx_owed > 0xffff ? 0xffff : c->rx_owed;
    verbs_wire_t w = {.type = (uint8_t)type, .credits = (uint16_t)give};
    memcpy(buf, &w, sizeof(w));
    if (alen) memcpy(buf + sizeof(w), a, alen);
    if (blen) memcpy(buf + sizeof(w) + alen, b, blen);
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = (uint32_t)(sizeof(w) + alen + blen), .lkey = c->smr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = verbs_wrid(c, VERBS_WR_SEND, idx),
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,
    };
    c->slot_owner[idx] = NULL;
    if (verbs_post(tp, c, &wr, "a message")) {
        c->free_slots[c->nfree++] = idx;
        return -1;
    }
    c->rx_owed -= give;
    c->tx_credits--;
    return 0;
}

/* One ring chunk of s: RDMA WRITE WITH IMMEDIATE into the peer's slot. */
static int verbs_post_chunk(verbs_tp_t *tp, verbs_conn_t *c, verbs_send_t *s, const ringbuf_chunk_t *ch)
{
    uint32_t idx = c->free_slots[--c->nfree];
    unsigned char *buf = c->sbuf + (size_t)idx * VERBS_BUF_BYTES;
    memcpy(buf, ch->head, ch->head_len);
    struct ibv_sge sge[2] = {{.addr = (uintptr_t)buf, .length = ch->head_len, .lkey = c->smr->lkey}};
    int nsge = 1;
    if (!s->mr) {
        if (ch->pay_len) memcpy(buf + ch->head_len, (const char *)s->payload + ch->pay_off, ch->pay_len);
        sge[0].length += ch->pay_len;
    } else if (ch->pay_len) {
        sge[1].addr = (uintptr_t)((const char *)s->payload + ch->pay_off);
        sge[1].length = ch->pay_len;
        sge[1].lkey = s->mr->lkey;
        nsge = 2;
    }
    struct ibv_send_wr wr = {
        .wr_id = verbs_wrid(c, VERBS_WR_SEND, idx),
        .sg_list = sge,
        .num_sge = nsge,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .send_flags = IBV_SEND_SIGNALED,
        .imm_data = htonl((uint32_t)ch->seq),
    };
    wr.wr.rdma.remote_addr = tp->tx_raddr + ch->slot_off;
    wr.wr.rdma.rkey = tp->tx_rkey;
    c->slot_owner[idx] = s->mr ? s : NULL;
    if (verbs_post(tp, c, &wr, "a ring chunk")) {
        c->free_slots[c->nfree++] = idx;
        c->slot_owner[idx] = NULL;
        return -1;
    }
    if (s->mr) s->pending++;
    c->tx_credits--;
    tp->st.ring_chunks_tx++;
    return 0;
}

/* RDMA READs of rendezvous payloads, in message order, up to the read depth. */
static void verbs_issue_reads(verbs_tp_t *tp, verbs_peer_t *p, verbs_conn_t *c)
{
    for (verbs_rrec_t *r = p->rx_head; r && p->unread && c->reads_out < tp->read_depth && !p->fail.failed; r = r->next) {
        while (r->rndv && !r->discard && !r->moved && r->issued < r->len && c->reads_out < tp->read_depth) {
            uint32_t k = 0;
            while (c->read_owner[k]) k++;
            uint64_t piece = r->len - r->issued;
            if (piece > tp->read_piece) piece = tp->read_piece;
            struct ibv_sge sge = {.addr = (uintptr_t)((char *)r->dst + r->issued), .length = (uint32_t)piece,
                                  .lkey = r->mr->lkey};
            struct ibv_send_wr wr = {
                .wr_id = verbs_wrid(c, VERBS_WR_READ, k),
                .sg_list = &sge,
                .num_sge = 1,
                .opcode = IBV_WR_RDMA_READ,
                .send_flags = IBV_SEND_SIGNALED,
            };
            wr.wr.rdma.remote_addr = r->raddr + r->issued;
            wr.wr.rdma.rkey = r->rkey;
            if (verbs_post(tp, c, &wr, "an RDMA READ")) return;
            c->read_owner[k] = r;
            c->read_len[k] = piece;
            c->reads_out++;
            r->issued += piece;
            if (r->issued == r->len) p->unread--;
        }
    }
}

/* Writes what the credits allow of the peer's ring message at the head. 1
 * when s is fully issued. */
static int verbs_ring_push(verbs_tp_t *tp, verbs_peer_t *p, verbs_conn_t *c, verbs_send_t *s)
{
    if (!tp->trb.in_msg) oobx__ringbuf_tx_msg_begin(&tp->trb, &s->hdr);
    ringbuf_chunk_t ch;
    while (verbs_can_post(c, 1 + VERBS_CREDIT_RESERVE) && oobx__ringbuf_tx_next(&tp->trb, &ch)) {
        if (verbs_post_chunk(tp, c, s, &ch)) return 0;
        if (ch.last) {
            p->sq_head = s->next;
            if (!p->sq_head) p->sq_tail = NULL;
            s->issued = 1;
            if (s->pending == 0) {
                verbs_send_done(tp, s, 0);
            } else {
                verbs_send_posted(tp, s);
                s->next = p->wait;
                p->wait = s;
            }
            return 1;
        }
    }
    return 0;
}

/* Sends what can be sent to peer now: reads, control, data, credits. */
static void verbs_peer_push(verbs_tp_t *tp, int peer)
{
    verbs_peer_t *p = &tp->peers[peer];
    verbs_conn_t *c = p->conn;
    if (p->fail.failed || !c || c->state != VERBS_CONN_UP) return;
    if (!c->proved) {
        /* the handshake: the connector's proof goes first, and nothing else
         * goes either way until the other side has proved itself */
        if (!c->passive && !c->sent_proof && verbs_can_post(c, 1)) {
            unsigned char mac[OOBX_MAC_BYTES];
            oobx__auth_mac(tp->secret, 'C', &c->auth, mac);
            if (verbs_post_msg(tp, c, VERBS_T_AUTH, mac, sizeof(mac), NULL, 0)) return;
            c->sent_proof = 1;
        }
        return;
    }
    verbs_issue_reads(tp, p, c);
    while (p->ctl_head && !p->fail.failed && verbs_can_post(c, 1 + VERBS_CREDIT_RESERVE)) {
        verbs_ctrl_t *k = p->ctl_head;
        if (verbs_post_msg(tp, c, k->type, k->body, k->len, NULL, 0)) return;
        p->ctl_head = k->next;
        if (!p->ctl_head) p->ctl_tail = NULL;
        free(k);
    }
    if (p->ring_credit_due && !p->fail.failed && verbs_can_post(c, 1 + VERBS_CREDIT_RESERVE)) {
        if (verbs_post_msg(tp, c, VERBS_T_RCREDIT, &p->ring_credit, sizeof(p->ring_credit), NULL, 0)) return;
        p->ring_credit_due = 0;
    }
    while (p->sq_head && !p->fail.failed) {
        verbs_send_t *s = p->sq_head;
        if (s->type == VERBS_SEND_RING) {
            if (!verbs_ring_push(tp, p, c, s)) break;
            continue;
        }
        if (!verbs_can_post(c, 1 + VERBS_CREDIT_RESERVE)) break;
        if (s->type == VERBS_SEND_EAGER) {
            if (verbs_post_msg(tp, c, VERBS_T_EAGER, &s->hdr, sizeof(s->hdr), s->payload, s->hdr.len)) return;
            p->sq_head = s->next;
            if (!p->sq_head) p->sq_tail = NULL;
            verbs_send_done(tp, s, 0); /* the payload is copied */
        } else {
            verbs_rts_t rts = {.addr = (uintptr_t)s->payload, .rkey = s->mr->rkey, .id = s->id};
            if (verbs_post_msg(tp, c, VERBS_T_RTS, &s->hdr, sizeof(s->hdr), &rts, sizeof(rts))) return;
            p->sq_head = s->next;
            if (!p->sq_head) p->sq_tail = NULL;
            s->issued = 1;
            verbs_send_posted(tp, s);
            s->next = p->wait;
            p->wait = s;
        }
    }
    if (c->rx_owed >= VERBS_CREDIT_BATCH && !p->fail.failed && verbs_can_post(c, 1))
        verbs_post_msg(tp, c, VERBS_T_CREDIT, NULL, 0, NULL, 0);
}

static int verbs_ctrl_queue(verbs_tp_t *tp, int peer, int type, const void *body, uint32_t len)
{
    verbs_peer_t *p = &tp->peers[peer];
    verbs_ctrl_t *k = calloc(1, sizeof(*k));
    if (!k) {
        verbs_peer_fail(tp, peer, OOBX_ERR_NOMEM, "verbs: out of memory queueing a control message to rank %d", peer);
        return -1;
    }
    k->type = type;
    k->len = len;
    memcpy(k->body, body, len);
    if (p->ctl_tail)
        p->ctl_tail->next = k;
    else
        p->ctl_head = k;
    p->ctl_tail = k;
    verbs_mark_dirty(tp, peer);
    return 0;
}

/* ---- incoming messages ------------------------------------------------------------- */

static verbs_rrec_t *verbs_rrec_add(verbs_tp_t *tp, int peer)
{
    verbs_peer_t *p = &tp->peers[peer];
    verbs_rrec_t *r = calloc(1, sizeof(*r));
    if (!r) {
        verbs_peer_fail(tp, peer, OOBX_ERR_NOMEM, "verbs: out of memory receiving from rank %d", peer);
        return NULL;
    }
    if (p->rx_tail)
        p->rx_tail->next = r;
    else
        p->rx_head = r;
    p->rx_tail = r;
    return r;
}

/* Ends what can end, in the sender's order. */
static void verbs_peer_drain(verbs_tp_t *tp, int peer)
{
    verbs_peer_t *p = &tp->peers[peer];
    while (!p->fail.failed && p->rx_head && p->rx_head->complete) {
        verbs_rrec_t *r = p->rx_head;
        p->rx_head = r->next;
        if (!p->rx_head) p->rx_tail = NULL;
        if (r->has_msg && !tp->destroying) tp->sink.msg_end(tp->sink.core, r->cookie);
        free(r);
    }
}

/* A rendezvous record after a read came in, a MOVED or a release: once no
 * read of it is out, a moved payload is read again from its start at its
 * new place, and the record is done (FIN, then msg_end in order) when all
 * of it is in, or at once when the caller took the buffer back. */
static void verbs_rrec_step(verbs_tp_t *tp, int peer, verbs_rrec_t *r)
{
    verbs_peer_t *p = &tp->peers[peer];
    if (!r->rndv || r->complete || r->done != r->issued) return;
    if (r->moved && !r->discard) {
        r->moved = 0;
        r->raddr = r->maddr;
        r->rkey = r->mrkey;
        if (r->issued == r->len) p->unread++;
        r->issued = r->done = 0;
        verbs_mark_dirty(tp, peer);
        return;
    }
    if (r->done < r->len && !r->discard) return;
    if (r->mr) ibv_dereg_mr(r->mr);
    r->mr = NULL;
    r->complete = 1;
    verbs_ctrl_queue(tp, peer, VERBS_T_FIN, &r->id, sizeof(r->id));
    verbs_peer_drain(tp, peer);
}

static void verbs_on_ring_chunk(verbs_tp_t *tp, int peer, uint32_t imm)
{
    char why[200];
    if (peer != tp->rx_peer || !tp->rx_base) {
        verbs_protocol_error(tp, peer, "a ring write without a ring link");
        return;
    }
    uint64_t seq = tp->rrb.next_seq;
    if ((uint32_t)seq != imm) {
        snprintf(why, sizeof(why), "ring chunk %u announced, %" PRIu64 " expected", imm, seq);
        verbs_protocol_error(tp, peer, why);
        return;
    }
    ringbuf_rx_ev_t ev;
    tp->st.ring_chunks_rx++;
    uint32_t bytes = oobx__ringbuf_rx_peek_bytes(&tp->rrb, tp->rx_base, seq);
    if (oobx__ringbuf_rx_chunk(&tp->rrb, tp->rx_base, seq, bytes, &ev, why, sizeof(why))) {
        verbs_protocol_error(tp, peer, why);
        return;
    }
    if (ev.first) {
        if (ev.hdr.src != peer) {
            verbs_protocol_error(tp, peer, "ring message header names another sender");
            return;
        }
        verbs_rrec_t *r = verbs_rrec_add(tp, peer);
        if (!r) return;
        tp->rx_cur = r;
        if (!tp->destroying) {
            tp->rx_dest = tp->sink.msg_begin(tp->sink.core, &ev.hdr, &r->cookie);
            r->has_msg = 1;
        } else {
            tp->rx_dest = NULL;
        }
    }
    if (ev.len && tp->rx_dest) memcpy((char *)tp->rx_dest + ev.off, ev.data, ev.len);
    if (ev.last && tp->rx_cur) {
        tp->rx_cur->complete = 1;
        tp->rx_cur = NULL;
        verbs_peer_drain(tp, peer);
    }
    uint64_t credit;
    if (oobx__ringbuf_rx_release(&tp->rrb, &credit)) {
        tp->peers[peer].ring_credit = credit;
        tp->peers[peer].ring_credit_due = 1;
    }
}


/* The successor's ring buffer: sends to it write into it from now on. */
static void verbs_tx_setup(verbs_tp_t *tp, int peer, const verbs_setup_t *su)
{
    char who[128];
    tp->tx_raddr = su->addr;
    tp->tx_rkey = su->rkey;
    oobx__ringbuf_tx_init(&tp->trb, su->slots, su->slot_bytes);
    tp->tx_active = 1;
    OOBX_INFO(tp->log, "verbs: ring link to %s: RDMA WRITE WITH IMMEDIATE into its ring of %u slots of %u bytes",
              verbs_who(tp, peer, who, sizeof(who)), su->slots, su->slot_bytes);
}

static void verbs_on_message(verbs_tp_t *tp, verbs_conn_t *c, const unsigned char *buf, uint32_t len)
{
    int peer = c->peer;
    verbs_peer_t *p = &tp->peers[peer];
    verbs_msg_t m;
    char who[128], why[200];
    if (verbs_msg_decode(buf, len, peer, &m, why, sizeof(why))) {
        verbs_protocol_error(tp, peer, why);
        return;
    }
    c->tx_credits += m.w.credits;
    if (c->tx_credits > VERBS_RECV_DEPTH) {
        verbs_protocol_error(tp, peer, "more credits returned than receives exist");
        return;
    }
    if (c->proved < 0) return; /* refused: waits for its disconnect */
    if (!c->proved || m.w.type == VERBS_T_AUTH) {
        int bad = m.w.type != VERBS_T_AUTH || c->proved || (!c->passive && !c->sent_proof);
        if (!bad && !oobx__auth_check(tp->secret, c->passive ? 'C' : 'A', &c->auth, m.mac)) bad = 2;
        if (bad && c->passive) {
            /* whoever connected claiming this rank did not prove it: the
             * connection goes, the rank it claimed is not failed */
            if (oobx__ratelimit_ok(&tp->rl))
                OOBX_WARN(tp->log, "verbs: dropped a connection claiming rank %d on device %s: %s", peer, tp->dev,
                          bad == 2 ? "it does not prove this job's secret" : "a message before its proof");
            c->proved = -1;
            rdma_disconnect(c->id);
            return;
        }
        if (bad == 2) {
            verbs_peer_fail(tp, peer, OOBX_ERR_MISMATCH,
                            "verbs: %s does not prove this job's secret (another job, or a process that took its "
                            "address); connection dropped",
                            verbs_who(tp, peer, who, sizeof(who)));
            return;
        }
        if (bad) {
            verbs_protocol_error(tp, peer, c->proved ? "a second proof" : "a message before its proof");
            return;
        }
        c->proved = 1;
        if (c->passive) {
            unsigned char mac[OOBX_MAC_BYTES];
            oobx__auth_mac(tp->secret, 'A', &c->auth, mac);
            if (verbs_post_msg(tp, c, VERBS_T_AUTH, mac, sizeof(mac), NULL, 0)) return;
            c->sent_proof = 1;
        }
        verbs_mark_dirty(tp, peer);
        return;
    }
    switch (m.w.type) {
    case VERBS_T_EAGER: {
        verbs_rrec_t *r = verbs_rrec_add(tp, peer);
        if (!r) return;
        r->complete = 1;
        if (!tp->destroying) {
            void *dst = tp->sink.msg_begin(tp->sink.core, &m.hdr, &r->cookie);
            r->has_msg = 1;
            if (m.hdr.len && dst) memcpy(dst, m.payload, m.hdr.len);
        }
        verbs_peer_drain(tp, peer);
        return;
    }
    case VERBS_T_RTS: {
        if (tp->destroying) return; /* no FIN: the sender is going away too */
        verbs_rrec_t *r = verbs_rrec_add(tp, peer);
        if (!r) return;
        r->rndv = 1;
        p->unread++;
        r->raddr = m.rts.addr;
        r->rkey = m.rts.rkey;
        r->len = m.hdr.len;
        r->id = m.rts.id;
        r->dst = tp->sink.msg_begin(tp->sink.core, &m.hdr, &r->cookie);
        r->has_msg = 1;
        tp->st.rndv_rx++;
        if (!r->dst) {
            /* the core drops this payload: nothing is read, the FIN frees the sender */
            r->rndv = 0;
            p->unread--;
            r->complete = 1;
            verbs_ctrl_queue(tp, peer, VERBS_T_FIN, &r->id, sizeof(r->id));
            verbs_peer_drain(tp, peer);
            verbs_mark_dirty(tp, peer);
            return;
        }
        r->mr = ibv_reg_mr(tp->pd, r->dst, m.hdr.len, IBV_ACCESS_LOCAL_WRITE);
        if (!r->mr) {
            verbs_peer_fail(tp, peer, OOBX_ERR_NOMEM,
                            "verbs: cannot register the %" PRIu64 "-byte receive buffer of a message from %s on "
                            "device %s: %s (locked memory limit? ulimit -l)",
                            m.hdr.len, verbs_who(tp, peer, who, sizeof(who)), tp->dev, strerror(errno));
            return;
        }
        verbs_mark_dirty(tp, peer);
        return;
    }
    case VERBS_T_MOVED:
        for (verbs_rrec_t *r = p->rx_head; r; r = r->next)
            if (r->rndv && r->id == m.rts.id && !r->complete) {
                if (r->discard) return; /* nothing more is read anyway */
                r->moved = 1;
                r->maddr = m.rts.addr;
                r->mrkey = m.rts.rkey;
                verbs_rrec_step(tp, peer, r);
                return;
            }
        return; /* read in full before the move came: its FIN is on the way */
    case VERBS_T_FIN:
        for (verbs_send_t *s = p->wait; s; s = s->next)
            if (s->type == VERBS_SEND_RNDV && s->id == m.value) {
                verbs_wait_remove(p, s);
                verbs_send_done(tp, s, 0);
                return;
            }
        snprintf(why, sizeof(why), "FIN for unknown rendezvous %" PRIu64, m.value);
        verbs_protocol_error(tp, peer, why);
        return;
    case VERBS_T_CREDIT:
        return;
    case VERBS_T_SETUP:
        if (tp->tx_peer < 0 && tp->tx_early_peer < 0) {
            /* before this rank knows its successor: kept until verbs_ring names it */
            tp->tx_early_peer = peer;
            tp->tx_early = m.setup;
            return;
        }
        if (peer != tp->tx_peer || tp->tx_active) {
            verbs_protocol_error(tp, peer, "unexpected ring setup");
            return;
        }
        verbs_tx_setup(tp, peer, &m.setup);
        return;
    case VERBS_T_RCREDIT:
        if (peer != tp->tx_peer || !tp->tx_active) {
            verbs_protocol_error(tp, peer, "unexpected ring credit");
            return;
        }
        if (oobx__ringbuf_tx_credit(&tp->trb, m.value)) verbs_protocol_error(tp, peer, "ring credit for chunks never sent");
        return;
    default:
        return; /* verbs_msg_decode knows every type */
    }
}

static const char *verbs_opcode_str(int kind, int opcode)
{
    if (kind == VERBS_WR_RECV) return "a receive";
    if (kind == VERBS_WR_READ) return "an RDMA READ";
    return opcode == IBV_WC_RDMA_WRITE ? "a ring write" : "a send";
}

static void verbs_on_wc(verbs_tp_t *tp, const struct ibv_wc *wc)
{
    uint64_t wid = wc->wr_id;
    int peer = (int)(wid >> 40);
    uint16_t serial = (uint16_t)(wid >> 24);
    int kind = (int)((wid >> 20) & 0xf);
    uint32_t idx = (uint32_t)(wid & 0xfffff);
    if (peer >= tp->nranks) return;
    verbs_peer_t *p = &tp->peers[peer];
    verbs_conn_t *c = p->conn;
    if (!c || c->serial != serial || !c->qp || c->qp->qp_num != wc->qp_num) return; /* a connection gone */
    /* a connection refused for its proof: its receives are flushed as it
     * goes, which says nothing of the rank it claimed */
    if (c->proved < 0) return;
    if (wc->status != IBV_WC_SUCCESS) {
        if (!p->fail.failed && !tp->destroying) {
            char who[128];
            verbs_peer_fail(tp, peer, OOBX_ERR_REMOTE, "verbs: %s %s %s failed on device %s QP %u: %s (vendor error 0x%x)",
                            verbs_opcode_str(kind, wc->opcode), kind == VERBS_WR_RECV ? "from" : "to",
                            verbs_who(tp, peer, who, sizeof(who)), tp->dev, wc->qp_num, ibv_wc_status_str(wc->status),
                            wc->vendor_err);
        }
        return;
    }
    if (p->fail.failed) return;
    switch (kind) {
    case VERBS_WR_RECV: {
        if (idx >= VERBS_RECV_DEPTH) return;
        if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
            verbs_on_ring_chunk(tp, peer, ntohl(wc->imm_data));
        else
            verbs_on_message(tp, c, c->rbuf + (size_t)idx * VERBS_BUF_BYTES, wc->byte_len);
        if (p->fail.failed) return;
        if (verbs_post_recv(tp, c, idx)) return;
        c->rx_owed++;
        break;
    }
    case VERBS_WR_SEND: {
        if (idx >= VERBS_SEND_SLOTS) return;
        verbs_send_t *s = c->slot_owner[idx];
        c->slot_owner[idx] = NULL;
        c->free_slots[c->nfree++] = idx;
        if (s && s->old_left && --s->old_left == 0) {
            /* the last write that read the caller's buffer (chunks complete in order) */
            ibv_dereg_mr(s->old_mr);
            s->old_mr = NULL;
        }
        if (s && --s->pending == 0 && s->issued) {
            verbs_wait_remove(p, s);
            verbs_send_done(tp, s, 0);
        }
        break;
    }
    case VERBS_WR_READ: {
        if (idx >= VERBS_READ_MAX || !c->read_owner[idx]) return;
        verbs_rrec_t *r = c->read_owner[idx];
        c->read_owner[idx] = NULL;
        c->reads_out--;
        r->done += c->read_len[idx];
        verbs_rrec_step(tp, peer, r);
        break;
    }
    default:
        return;
    }
    verbs_mark_dirty(tp, peer);
}

/* Handles what wait_prepare polled, then polls the CQ until it is empty (bounded). */
void verbs_poll_cq(verbs_tp_t *tp, int rounds)
{
    if (tp->nstash) {
        int n = tp->nstash;
        tp->nstash = 0;
        for (int i = 0; i < n; i++) verbs_on_wc(tp, &tp->stash[i]);
    }
    struct ibv_wc wc[VERBS_STASH];
    for (int r = 0; r < rounds; r++) {
        int n = ibv_poll_cq(tp->cq, VERBS_STASH, wc);
        if (n < 0) {
            tp->fatal = oobx__fail(tp->log, OOBX_ERR_SYSTEM, "verbs: ibv_poll_cq failed on device %s", tp->dev);
            return;
        }
        for (int i = 0; i < n; i++) verbs_on_wc(tp, &wc[i]);
        if (n < VERBS_STASH) return;
    }
}

/* ---- failures ------------------------------------------------------------------------------ */

/* Frees everything of a failed peer; its sends end with its status. */
static void verbs_peer_drop(verbs_tp_t *tp, int peer)
{
    verbs_peer_t *p = &tp->peers[peer];
    int st = oobx__peer_fail_status(&p->fail);
    verbs_conn_free(tp, p->conn, 1);
    p->conn = NULL;
    while (p->sq_head) {
        verbs_send_t *s = p->sq_head;
        p->sq_head = s->next;
        verbs_send_done(tp, s, st);
    }
    p->sq_tail = NULL;
    while (p->wait) {
        verbs_send_t *s = p->wait;
        p->wait = s->next;
        verbs_send_done(tp, s, st);
    }
    while (p->ctl_head) {
        verbs_ctrl_t *k = p->ctl_head;
        p->ctl_head = k->next;
        free(k);
    }
    p->ctl_tail = NULL;
    while (p->rx_head) {
        verbs_rrec_t *r = p->rx_head;
        p->rx_head = r->next;
        if (r->mr) ibv_dereg_mr(r->mr);
        free(r);
    }
    p->rx_tail = NULL;
    p->unread = 0;
    p->ring_credit_due = 0;
    if (p->crossed) tp->ncrossed--;
    p->crossed = 0;
    if (tp->rx_peer == peer) tp->rx_cur = NULL;
    if (tp->tx_peer == peer) {
        tp->tx_active = 0;
        tp->trb.in_msg = 0;
    }
    if (tp->tx_early_peer == peer) tp->tx_early_peer = -1;
}

static oobx__peer_fail_t *verbs_fail_of(void *base, int peer)
{
    return &((verbs_tp_t *)base)->peers[peer].fail;
}

static void verbs_fail_drop(void *base, int peer)
{
    verbs_peer_drop(base, peer);
}

static void verbs_report_failures(verbs_tp_t *tp)
{
    static const oobx__peer_fail_ops_t ops = {.get = verbs_fail_of, .drop = verbs_fail_drop};
    oobx__peer_fail_report(tp, tp->nranks, &ops, &tp->sink, tp->log, &tp->fail_pending);
}

/* ---- the ops ------------------------------------------------------------------------------- */

static void verbs_destroy(oobx_tp_t *base);

static int verbs_progress_inner(verbs_tp_t *tp)
{
    if (tp->fatal) return tp->fatal;
    if (tp->ncrossed) verbs_crossed_check(tp);
    verbs_poll_cq(tp, 16);
    verbs_cm_poll(tp);
    /* a pass can mark more peers: repeat while there is something to do */
    for (int round = 0; round < 4 && tp->ndirty > 0 && !tp->fatal; round++) {
        int n = tp->ndirty;
        int list[64];
        int take = n < 64 ? n : 64;
        memcpy(list, tp->dirty + (n - take), (size_t)take * sizeof(int));
        tp->ndirty = n - take;
        for (int k = 0; k < take; k++) {
            tp->peers[list[k]].dirty = 0;
            verbs_peer_push(tp, list[k]);
        }
    }
    if (tp->fail_pending && !tp->destroying) verbs_report_failures(tp);
    return tp->fatal;
}

static int verbs_progress(oobx_tp_t *base)
{
    return verbs_progress_inner((verbs_tp_t *)base);
}

static int verbs_wait_prepare(oobx_tp_t *base, struct pollfd *fds, int max, int *nfds, int *timeout_ms)
{
    verbs_tp_t *tp = (verbs_tp_t *)base;
    *nfds = 0;
    if (tp->fatal || tp->fail_pending || tp->ndirty || tp->nstash) return 1;
    if (max < 2) return 1;
    struct ibv_cq *ecq;
    void *ectx;
    while (ibv_get_cq_event(tp->ch, &ecq, &ectx) == 0) {
        if (++tp->unacked >= VERBS_CQ_EVENTS_ACK) {
            ibv_ack_cq_events(tp->cq, tp->unacked);
            tp->unacked = 0;
        }
    }
    if (ibv_req_notify_cq(tp->cq, 0)) {
        tp->fatal = oobx__fail(tp->log, OOBX_ERR_SYSTEM, "verbs: ibv_req_notify_cq on device %s failed", tp->dev);
        return 1;
    }
    /* a completion that came between the last poll and the arming raises no event */
    int n = ibv_poll_cq(tp->cq, VERBS_STASH, tp->stash);
    if (n > 0) {
        tp->nstash = n;
        return 1;
    }
    /* the one timer: a crossing that the peer's connection has not settled yet */
    if (tp->ncrossed) {
        uint64_t first = UINT64_MAX;
        for (int i = 0; i < tp->nranks; i++)
            if (tp->peers[i].crossed && tp->peers[i].crossed_deadline < first) first = tp->peers[i].crossed_deadline;
        int left = oobx__ms_left(first, VERBS_CROSSED_MS) + 1;
        if (*timeout_ms < 0 || *timeout_ms > left) *timeout_ms = left;
    }
    fds[0].fd = tp->ch->fd;
    fds[0].events = POLLIN;
    fds[0].revents = 0;
    fds[1].fd = tp->ec->fd;
    fds[1].events = POLLIN;
    fds[1].revents = 0;
    *nfds = 2;
    return 0;
}

static int verbs_send(oobx_tp_t *base, int peer, const oobx_msg_hdr_t *hdr, const void *payload, oobx_tp_req_t *req)
{
    verbs_tp_t *tp = (verbs_tp_t *)base;
    char who[128];
    if (peer < 0 || peer >= tp->nranks || peer == tp->rank)
        return oobx__fail(tp->log, OOBX_ERR_INVALID, "verbs: send to rank %d of %d", peer, tp->nranks);
    verbs_peer_t *p = &tp->peers[peer];
    if (p->fail.failed) return oobx__fail(tp->log, oobx__peer_fail_status(&p->fail), "%s", p->fail.why);
    if (!p->conn && !verbs_peer_known(tp, peer)) {
        if (hdr->kind == OOBX_MSG_CTRL) return OOBX_ERR_REMOTE; /* a notice that goes no way (transport.h) */
        return oobx__fail(tp->log, OOBX_ERR_INTERNAL, "verbs: send to rank %d before its address", peer);
    }
    verbs_send_t *s = calloc(1, sizeof(*s));
    if (!s) return oobx__fail(tp->log, OOBX_ERR_NOMEM, "verbs: out of memory sending to rank %d", peer);
    s->req = req;
    s->hdr = *hdr;
    s->payload = payload;
    size_t len = hdr->len;
    int access = -1;
    /* the ring is for small and medium messages; a large one is read by the
     * receiver straight into place (and not at all when it does not want
     * it), after what the ring carries before it: one queue per peer */
    if (tp->tx_active && tp->tx_peer == peer && len < VERBS_RING_DIRECT_MIN) {
        s->type = VERBS_SEND_RING;
        if (len > VERBS_BUF_BYTES - RINGBUF_HEAD_MAX) access = 0;
    } else if (len <= VERBS_EAGER_MAX) {
        s->type = VERBS_SEND_EAGER;
    } else {
        s->type = VERBS_SEND_RNDV;
        s->id = ++tp->next_rndv;
        access = IBV_ACCESS_REMOTE_READ;
    }
    if (access >= 0 && len <= VERBS_COPY_MAX) {
        /* a medium message is copied, so that its request is done once it is
         * posted (as a socket send is once the kernel has the bytes), not when
         * the peer has read it: the core moves on (to a barrier, say) even
         * when the peer is slow to read */
        s->own = malloc(len);
        if (s->own) {
            memcpy(s->own, payload, len);
            s->payload = s->own;
        }
    }
    if (access >= 0) {
        s->mr = ibv_reg_mr(tp->pd, (void *)(uintptr_t)s->payload, len, access);
        if (!s->mr) {
            int e = errno;
            free(s->own);
            free(s);
            return oobx__fail(tp->log, OOBX_ERR_NOMEM,
                             "verbs: cannot register the %zu-byte payload of a message to %s on device %s: %s "
                             "(locked memory limit? ulimit -l)",
                             len, verbs_who(tp, peer, who, sizeof(who)), tp->dev, strerror(e));
        }
    }
    req->done = 0;
    req->status = 0;
    if (p->sq_tail)
        p->sq_tail->next = s;
    else
        p->sq_head = s;
    p->sq_tail = s;
    if (!p->conn)
        verbs_conn_start(tp, peer);
    else
        verbs_peer_push(tp, peer);
    /* Still queued (no link, credits or ring slots yet): the call may end
     * before it goes (a collective that fails returns with it queued, and
     * the caller's buffer goes away), so a payload small enough is the
     * transport's own from here. Only compared while in the queue: a send
     * that went is freed. */
    for (verbs_send_t *q = p->sq_head; q; q = q->next) {
        if (q != s) continue;
        if (!s->own && !s->mr && len && len <= VERBS_COPY_MAX) {
            s->own = malloc(len);
            if (s->own) {
                memcpy(s->own, payload, len);
                s->payload = s->own;
            }
        }
        break;
    }
    return 0;
}

/* s goes on from a copy of its payload: its caller takes the buffer back.
 * A rendezvous whose RTS is out tells the reader where the copy is (MOVED)
 * and keeps the old registration until the FIN; a ring message keeps it
 * until the writes posted from it are complete. */
static int verbs_send_own(verbs_tp_t *tp, int peer, verbs_send_t *s, int posted)
{
    size_t len = s->hdr.len;
    void *own = malloc(len);
    struct ibv_mr *mr = NULL;
    if (own) memcpy(own, s->payload, len);
    if (own && s->mr) mr = ibv_reg_mr(tp->pd, own, len, s->type == VERBS_SEND_RNDV ? IBV_ACCESS_REMOTE_READ : 0);
    if (!own || (s->mr && !mr)) {
        char who[128];
        free(own);
        verbs_peer_fail(tp, peer, OOBX_ERR_NOMEM,
                        "verbs: cannot copy and register the %zu-byte payload of a message to %s whose call ended "
                        "(device %s); the link is closed",
                        len, verbs_who(tp, peer, who, sizeof(who)), tp->dev);
        return -1;
    }
    s->own = own;
    s->payload = own;
    if (!s->mr) return 0;
    if (s->type == VERBS_SEND_RNDV && posted) {
        verbs_rts_t mv = {.addr = (uintptr_t)own, .rkey = mr->rkey, .id = s->id};
        s->old_mr = s->mr;
        s->mr = mr;
        return verbs_ctrl_queue(tp, peer, VERBS_T_MOVED, &mv, sizeof(mv));
    }
    if (s->type == VERBS_SEND_RING && s->pending) {
        s->old_mr = s->mr;
        s->old_left = s->pending;
    } else {
        ibv_dereg_mr(s->mr);
    }
    s->mr = mr;
    return 0;
}

/* Work the device still does on a given-back buffer, of peer p. */
static int verbs_release_busy(const verbs_peer_t *p)
{
    if (p->fail.failed) return 0;
    for (int l = 0; l < 2; l++)
        for (const verbs_send_t *s = l ? p->wait : p->sq_head; s; s = s->next)
            if (s->old_left) return 1;
    for (const verbs_rrec_t *r = p->rx_head; r; r = r->next)
        if (r->discard && !r->complete) return 1;
    return 0;
}

static void verbs_release(oobx_tp_t *base, const void *b, size_t len)
{
    verbs_tp_t *tp = (verbs_tp_t *)base;
    int busy = 0;
    /* failed peers not yet dropped still have their QPs: drop them now */
    if (tp->fail_pending && !tp->destroying) verbs_report_failures(tp);
    for (int i = 0; i < tp->nranks; i++) {
        verbs_peer_t *p = &tp->peers[i];
        if (p->fail.failed) continue;
        for (int l = 0; l < 2 && !p->fail.failed; l++)
            for (verbs_send_t *s = l ? p->wait : p->sq_head; s; s = s->next)
                if (!s->own && s->hdr.len && oobx__in_range(s->payload, b, len) && verbs_send_own(tp, i, s, l)) break;
        for (verbs_rrec_t *r = p->rx_head; r && !p->fail.failed; r = r->next)
            if (r->rndv && !r->complete && !r->discard && oobx__in_range(r->dst, b, len)) {
                if (r->issued < r->len) p->unread--;
                r->discard = 1;
            }
        /* those with no read out are done now (the drain may free records: start over) */
        for (verbs_rrec_t *r = p->rx_head; r && !p->fail.failed;) {
            if (r->discard && !r->complete && r->done == r->issued) {
                verbs_rrec_step(tp, i, r);
                r = p->rx_head;
                continue;
            }
            r = r->next;
        }
        busy |= verbs_release_busy(p);
    }
    if (tp->rx_cur && oobx__in_range(tp->rx_dest, b, len)) tp->rx_dest = NULL; /* ring chunks are copied in progress */
    /* reads into it and writes from it that the device has: a short bound */
    uint64_t deadline = oobx__deadline(VERBS_RELEASE_MS);
    while (busy && !tp->fatal) {
        verbs_progress_inner(tp);
        busy = 0;
        for (int i = 0; i < tp->nranks; i++) busy |= verbs_release_busy(&tp->peers[i]);
        if (!busy) break;
        if (oobx__now_ns() >= deadline) {
            for (int i = 0; i < tp->nranks; i++)
                if (verbs_release_busy(&tp->peers[i])) {
                    char who[128];
                    verbs_peer_fail(tp, i, OOBX_ERR_TIMEOUT,
                                    "verbs: the device did not end its work on a buffer given back by a failed call "
                                    "within %d ms (link to %s, device %s); the link is closed",
                                    VERBS_RELEASE_MS, verbs_who(tp, i, who, sizeof(who)), tp->dev);
                }
            verbs_report_failures(tp); /* closes those QPs now: nothing touches the buffer after this */
            break;
        }
        usleep(50);
    }
}

static int verbs_ring(oobx_tp_t *base, int prev, int next)
{
    verbs_tp_t *tp = (verbs_tp_t *)base;
    char why[256], who[128];
    tp->rx_peer = prev >= 0 && prev < tp->nranks && prev != tp->rank ? prev : -1;
    tp->tx_peer = next >= 0 && next < tp->nranks && next != tp->rank ? next : -1;
    if (tp->tx_early_peer >= 0 && tp->tx_peer >= 0) {
        int early = tp->tx_early_peer;
        tp->tx_early_peer = -1;
        if (early != tp->tx_peer) {
            verbs_protocol_error(tp, early, "ring setup from a rank that is not this rank's successor");
        } else if (!tp->tx_active) {
            verbs_tx_setup(tp, early, &tp->tx_early);
        }
    }
    if (tp->rx_peer >= 0 && !tp->rx_base) {
        const oobx_settings_t *s = tp->settings;
        uint32_t slots = (uint32_t)s->ring_slots, slot_bytes = (uint32_t)s->ring_slot_bytes;
        if (s->ring_slots <= 0 || s->ring_slot_bytes > UINT32_MAX || oobx__ringbuf_geom_check(slots, slot_bytes, why, sizeof(why)))
            return oobx__fail(tp->log, OOBX_ERR_INVALID, "verbs: %s", why);
        tp->rx_size = (size_t)slots * slot_bytes;
        if (posix_memalign(&tp->rx_base, 4096, tp->rx_size)) {
            tp->rx_base = NULL;
            return oobx__fail(tp->log, OOBX_ERR_NOMEM, "verbs: out of memory for a %zu-byte ring buffer", tp->rx_size);
        }
        oobx__ringbuf_clear_headers(tp->rx_base, slots, slot_bytes);
        tp->rx_mr = ibv_reg_mr(tp->pd, tp->rx_base, tp->rx_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        if (!tp->rx_mr) {
            OOBX_WARN(tp->log, "verbs: cannot register a %zu-byte ring buffer on device %s (%s); %s sends as usual",
                      tp->rx_size, tp->dev, strerror(errno), verbs_who(tp, tp->rx_peer, who, sizeof(who)));
            free(tp->rx_base);
            tp->rx_base = NULL;
        } else {
            oobx__ringbuf_rx_init(&tp->rrb, slots, slot_bytes, 0);
            verbs_setup_t su = {.addr = (uintptr_t)tp->rx_base, .rkey = tp->rx_mr->rkey, .slots = slots,
                                .slot_bytes = slot_bytes};
            verbs_ctrl_queue(tp, tp->rx_peer, VERBS_T_SETUP, &su, sizeof(su));
            OOBX_DEBUG(tp->log, "verbs: ring buffer for %s -> rank %d: %u slots of %u bytes",
                       verbs_who(tp, tp->rx_peer, who, sizeof(who)), tp->rank, slots, slot_bytes);
        }
    }
    /* the successor is connected now; the predecessor connects to us */
    if (tp->tx_peer >= 0) verbs_conn_start(tp, tp->tx_peer);
    if (tp->rx_peer >= 0 && tp->rx_base && tp->peers[tp->rx_peer].conn) verbs_peer_push(tp, tp->rx_peer);
    return 0;
}

static int verbs_address(oobx_tp_t *base, void *blob, size_t *len)
{
    verbs_tp_t *tp = (verbs_tp_t *)base;
    size_t need = sizeof(verbs_blob_t) + strlen(tp->dev);
    if (*len < need)
        return oobx__fail(tp->log, OOBX_ERR_INVALID, "verbs: address needs %zu bytes, %zu given", need, *len);
    *len = verbs_card_encode(tp->host_id, (uint32_t)getpid(), &tp->my_addr, tp->dev, blob, *len);
    return 0;
}

static int verbs_set_peer(oobx_tp_t *base, int peer, const void *blob, size_t len)
{
    verbs_tp_t *tp = (verbs_tp_t *)base;
    verbs_card_t card;
    char why[256];
    if (peer < 0 || peer >= tp->nranks)
        return oobx__fail(tp->log, OOBX_ERR_INVALID, "verbs: address for rank %d of %d", peer, tp->nranks);
    int rc = verbs_card_decode(blob, len, &card, why, sizeof(why));
    if (rc) return oobx__fail(tp->log, rc, "verbs: address of rank %d: %s", peer, why);
    verbs_peer_t *p = &tp->peers[peer];
    memcpy(&p->addr, &card.addr, sizeof(p->addr));
    snprintf(p->dev, sizeof(p->dev), "%s", card.dev);
    p->pid = card.hdr.pid;
    verbs_addr_format((struct sockaddr *)&p->addr, p->addr_text, sizeof(p->addr_text));
    p->have_addr = 1;
    return 0;
}

static void verbs_peer_name(oobx_tp_t *base, int peer, char *buf, size_t len)
{
    verbs_tp_t *tp = (verbs_tp_t *)base;
    if (peer >= 0 && peer < tp->nranks)
        verbs_who(tp, peer, buf, len);
    else
        snprintf(buf, len, "rank %d (verbs)", peer);
}

/* "Cannot run here" is recorded and logged at info level: under
 * OOBX_TRANSPORT=auto the core falls back and says why. */
static int verbs_unavailable(const oobx_log_t *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int verbs_unavailable(const oobx_log_t *log, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log->api->set_last_error("%s", msg);
    OOBX_INFO(log, "%s", msg);
    return OOBX_ERR_UNAVAILABLE;
}

static int verbs_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int verbs_create(const oobx_tp_params_t *p, oobx_tp_t **out)
{
    if (p->nranks < 1 || p->nranks > VERBS_PEER_MAX || p->rank < 0 || p->rank >= p->nranks)
        return oobx__fail(p->log, OOBX_ERR_INVALID, "verbs: rank %d of %d (at most %d ranks)", p->rank, p->nranks,
                         VERBS_PEER_MAX);
    verbs_tp_t *tp = calloc(1, sizeof(*tp));
    if (!tp) return oobx__fail(p->log, OOBX_ERR_NOMEM, "verbs: out of memory");
    tp->base.ops = &oobx_verbs_ops;
    tp->rank = p->rank;
    tp->nranks = p->nranks;
    tp->magic = p->magic;
    if (p->secret) memcpy(tp->secret, p->secret, OOBX_SECRET_BYTES);
    tp->settings = p->settings;
    tp->core = p->core;
    tp->log = p->log;
    tp->sink = p->sink;
    tp->rx_peer = tp->tx_peer = -1;
    tp->tx_early_peer = -1;
    tp->peers = calloc((size_t)p->nranks, sizeof(*tp->peers));
    tp->dirty = calloc((size_t)p->nranks, sizeof(*tp->dirty));
    if (!tp->peers || !tp->dirty) {
        verbs_destroy(&tp->base);
        return oobx__fail(p->log, OOBX_ERR_NOMEM, "verbs: out of memory for %d peers", p->nranks);
    }
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    tp->host_id = oobx__hash64(host, strlen(host), 0);

    int rc;
    char why[768];
    verbs_choice_t ch;
    rc = verbs_choose(p->core, p->settings, p->root_hint, p->root_hint_len, &ch, why, sizeof(why));
    if (rc != 0) {
        rc = rc == OOBX_ERR_UNAVAILABLE ? verbs_unavailable(p->log, "verbs: %s", why)
                                        : oobx__fail(p->log, rc, "verbs: %s", why);
        goto out_destroy;
    }
    snprintf(tp->dev, sizeof(tp->dev), "%s", ch.dev);
    char ip[96];
    verbs_addr_format((struct sockaddr *)&ch.addr, ip, sizeof(ip));
    char *colon = strrchr(ip, ':');
    if (colon) *colon = '\0';

    tp->ec = rdma_create_event_channel();
    if (!tp->ec) {
        rc = verbs_unavailable(p->log, "verbs: rdma_create_event_channel: %s (is /dev/infiniband/rdma_cm there?)",
                               strerror(errno));
        goto out_destroy;
    }
    if (verbs_nonblock(tp->ec->fd)) {
        rc = verbs_unavailable(p->log, "verbs: cannot make the rdma_cm event channel non-blocking: %s", strerror(errno));
        goto out_destroy;
    }
    if (rdma_create_id(tp->ec, &tp->listen_id, NULL, RDMA_PS_TCP)) {
        tp->listen_id = NULL;
        rc = verbs_unavailable(p->log, "verbs: rdma_create_id: %s", strerror(errno));
        goto out_destroy;
    }
    if (rdma_bind_addr(tp->listen_id, (struct sockaddr *)&ch.addr)) {
        rc = verbs_unavailable(p->log, "verbs: rdma_bind_addr(%s) for device %s: %s (%s)", ip, ch.dev, strerror(errno),
                               ch.why_ip);
        goto out_destroy;
    }
    if (!tp->listen_id->verbs) {
        rc = verbs_unavailable(p->log, "verbs: address %s belongs to no RDMA device (device %s was chosen: %s)", ip,
                               ch.dev, ch.why_ip);
        goto out_destroy;
    }
    const char *bound = ibv_get_device_name(tp->listen_id->verbs->device);
    if (!bound || strcmp(bound, ch.dev) != 0) {
        rc = verbs_unavailable(p->log, "verbs: rdma_cm maps address %s to device %s, not to the chosen device %s (%s); "
                               "set OOBX_NET_DEVICE or OOBX_SOCKET_IFNAME so that they agree",
                               ip, bound ? bound : "?", ch.dev, ch.why_dev);
        goto out_destroy;
    }
    if (ch.port && tp->listen_id->port_num && tp->listen_id->port_num != ch.port)
        OOBX_WARN(p->log, "verbs: OOBX_NET_DEVICE=%s asks for port %d, but address %s is on port %u of %s",
                  p->settings->net_device, ch.port, ip, tp->listen_id->port_num, ch.dev);
    if (rdma_listen(tp->listen_id, 1024)) {
        rc = verbs_unavailable(p->log, "verbs: rdma_listen on %s (device %s): %s", ip, ch.dev, strerror(errno));
        goto out_destroy;
    }
    tp->ctx = tp->listen_id->verbs;
    tp->port_num = tp->listen_id->port_num ? tp->listen_id->port_num : 1;
    struct ibv_device_attr da;
    if (ibv_query_device(tp->ctx, &da)) {
        rc = verbs_unavailable(p->log, "verbs: ibv_query_device(%s): %s", tp->dev, strerror(errno));
        goto out_destroy;
    }
    struct ibv_port_attr pa;
    memset(&pa, 0, sizeof(pa));
    tp->read_piece = VERBS_READ_PIECE;
    if (ibv_query_port(tp->ctx, (uint8_t)tp->port_num, &pa) == 0 && pa.max_msg_sz && pa.max_msg_sz < tp->read_piece)
        tp->read_piece = pa.max_msg_sz;
    uint32_t depth = VERBS_READ_MAX;
    if (da.max_qp_rd_atom > 0 && (uint32_t)da.max_qp_rd_atom < depth) depth = (uint32_t)da.max_qp_rd_atom;
    if (da.max_qp_init_rd_atom > 0 && (uint32_t)da.max_qp_init_rd_atom < depth) depth = (uint32_t)da.max_qp_init_rd_atom;
    tp->read_depth = depth;
    if (da.max_qp_wr > 0 && (uint32_t)da.max_qp_wr < VERBS_SEND_SLOTS + VERBS_READ_MAX) {
        rc = verbs_unavailable(p->log, "verbs: device %s allows %d work requests per QP, fewer than the %u needed",
                               tp->dev, da.max_qp_wr, VERBS_SEND_SLOTS + VERBS_READ_MAX);
        goto out_destroy;
    }
    /* one CQ for every QP: each QP has at most VERBS_PER_QP_CQE work requests
     * outstanding, so links_max QPs (plus slack for completions of a QP
     * being destroyed) never overrun it */
    int want = p->nranks - 1 < VERBS_LINKS_MAX ? p->nranks - 1 : VERBS_LINKS_MAX;
    if (want < 1) want = 1;
    int max_cqe = da.max_cqe > 0 ? da.max_cqe : 65536;
    int fit = max_cqe / (int)VERBS_PER_QP_CQE - 2;
    if (fit < 1) {
        rc = verbs_unavailable(p->log, "verbs: device %s allows CQs of %d entries, fewer than one QP needs (%u)",
                               tp->dev, da.max_cqe, 3 * VERBS_PER_QP_CQE);
        goto out_destroy;
    }
    tp->links_max = want < fit ? want : fit;
    tp->cq_size = (tp->links_max + 2) * (int)VERBS_PER_QP_CQE;
    tp->pd = ibv_alloc_pd(tp->ctx);
    if (!tp->pd) {
        rc = verbs_unavailable(p->log, "verbs: ibv_alloc_pd on %s: %s", tp->dev, strerror(errno));
        goto out_destroy;
    }
    tp->ch = ibv_create_comp_channel(tp->ctx);
    if (!tp->ch) {
        rc = verbs_unavailable(p->log, "verbs: ibv_create_comp_channel on %s: %s", tp->dev, strerror(errno));
        goto out_destroy;
    }
    tp->cq = ibv_create_cq(tp->ctx, tp->cq_size, tp, tp->ch, 0);
    if (!tp->cq) {
        rc = verbs_unavailable(p->log, "verbs: ibv_create_cq(%d entries) on %s: %s", tp->cq_size, tp->dev, strerror(errno));
        goto out_destroy;
    }
    if (ibv_req_notify_cq(tp->cq, 0) || verbs_nonblock(tp->ch->fd)) {
        rc = verbs_unavailable(p->log, "verbs: cannot arm the completion queue or the event channels on %s", tp->dev);
        goto out_destroy;
    }
    struct sockaddr *la = rdma_get_local_addr(tp->listen_id);
    memcpy(&tp->my_addr, la, la->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    verbs_addr_format((struct sockaddr *)&tp->my_addr, tp->my_text, sizeof(tp->my_text));
    OOBX_INFO(p->log, "verbs: rank %d uses device %s port %d, listening on %s; device: %s; address: %s", p->rank,
              tp->dev, tp->port_num, tp->my_text, ch.why_dev, ch.why_ip);
    *out = &tp->base;
    return 0;

out_destroy:
    verbs_destroy(&tp->base);
    return rc;
}

static int verbs_busy(verbs_tp_t *tp)
{
    for (int i = 0; i < tp->nranks; i++) {
        verbs_peer_t *p = &tp->peers[i];
        if (p->fail.failed || !p->conn) continue;
        if (p->sq_head || p->ctl_head || p->wait || p->ring_credit_due) return 1;
        /* posted and not yet completed: a disconnect now would lose it */
        if (p->conn->qp && (p->conn->nfree < VERBS_SEND_SLOTS || p->conn->reads_out)) return 1;
    }
    return 0;
}

static void verbs_destroy(oobx_tp_t *base)
{
    if (!base) return;
    verbs_tp_t *tp = (verbs_tp_t *)base;
    tp->destroying = 1;
    if (tp->cq && tp->peers) {
        /* queued sends get a short bound to go out (nothing reaches the core now) */
        uint64_t deadline = oobx__deadline(VERBS_FLUSH_MS);
        while (!tp->fatal && verbs_busy(tp) && oobx__now_ns() < deadline) {
            verbs_progress_inner(tp);
            struct pollfd fds[2];
            int nfds = 0, timeout = 10;
            if (verbs_wait_prepare(base, fds, 2, &nfds, &timeout) == 0) poll(fds, (nfds_t)nfds, 10);
        }
    }
    if (tp->peers) {
        for (int i = 0; i < tp->nranks; i++)
            if (tp->peers[i].conn && tp->peers[i].conn->state == VERBS_CONN_UP && tp->peers[i].conn->qp)
                rdma_disconnect(tp->peers[i].conn->id);
        for (int i = 0; i < tp->nranks; i++) {
            verbs_peer_t *p = &tp->peers[i];
            verbs_conn_free(tp, p->conn, 0);
            p->conn = NULL;
            while (p->sq_head) {
                verbs_send_t *s = p->sq_head;
                p->sq_head = s->next;
                verbs_send_done(tp, s, OOBX_ERR_ABORTED);
            }
            while (p->wait) {
                verbs_send_t *s = p->wait;
                p->wait = s->next;
                verbs_send_done(tp, s, OOBX_ERR_ABORTED);
            }
            while (p->ctl_head) {
                verbs_ctrl_t *k = p->ctl_head;
                p->ctl_head = k->next;
                free(k);
            }
            while (p->rx_head) {
                verbs_rrec_t *r = p->rx_head;
                p->rx_head = r->next;
                if (r->mr) ibv_dereg_mr(r->mr);
                free(r);
            }
        }
    }
    /* requests that arrived meanwhile are refused; other events dropped */
    if (tp->ec) {
        struct rdma_cm_event *ev = NULL;
        for (int n = 0; n < 1024 && rdma_get_cm_event(tp->ec, &ev) == 0; n++) {
            struct rdma_cm_id *id = ev->id;
            int req = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST;
            rdma_ack_cm_event(ev);
            if (req) verbs_reject(tp, id, VERBS_REJ_FAILED);
        }
    }
    if (tp->rx_mr) ibv_dereg_mr(tp->rx_mr);
    free(tp->rx_base);
    if (tp->cq) {
        struct ibv_cq *ecq;
        void *ectx;
        while (tp->ch && (fcntl(tp->ch->fd, F_GETFL) & O_NONBLOCK) && ibv_get_cq_event(tp->ch, &ecq, &ectx) == 0)
            tp->unacked++;
        if (tp->unacked) ibv_ack_cq_events(tp->cq, tp->unacked);
        ibv_destroy_cq(tp->cq);
    }
    if (tp->ch) ibv_destroy_comp_channel(tp->ch);
    if (tp->pd) ibv_dealloc_pd(tp->pd);
    if (tp->listen_id) rdma_destroy_id(tp->listen_id);
    if (tp->ec) rdma_destroy_event_channel(tp->ec);
    free(tp->peers);
    free(tp->dirty);
    free(tp);
}

void verbs_tp_stats(oobx_tp_t *base, verbs_stats_t *st)
{
    verbs_tp_t *tp = (verbs_tp_t *)base;
    *st = tp->st;
    st->qps = tp->nconns;
    st->ring_tx_active = tp->tx_active;
}

static int verbs_count_sends(const verbs_send_t *s)
{
    int n = 0;
    for (; s; s = s->next) n++;
    return n;
}

void verbs_tp_dump(oobx_tp_t *base, FILE *out)
{
    verbs_tp_t *tp = (verbs_tp_t *)base;
    fprintf(out, "verbs rank %d on %s %s: %d QPs, dirty %d, stash %d, fail_pending %d, fatal %d\n", tp->rank, tp->dev,
            tp->my_text, tp->nconns, tp->ndirty, tp->nstash, tp->fail_pending, tp->fatal);
    if (tp->tx_peer >= 0)
        fprintf(out, "  ring to rank %d: active %d, next chunk %" PRIu64 ", credited %" PRIu64 ", in_msg %d\n",
                tp->tx_peer, tp->tx_active, tp->trb.next_seq, tp->trb.credit_seq, tp->trb.in_msg);
    if (tp->rx_peer >= 0)
        fprintf(out, "  ring from rank %d: next chunk %" PRIu64 ", freed %" PRIu64 ", credited %" PRIu64 "\n",
                tp->rx_peer, tp->rrb.next_seq, tp->rrb.freed_seq, tp->rrb.credited_seq);
    for (int i = 0; i < tp->nranks; i++) {
        verbs_peer_t *p = &tp->peers[i];
        verbs_conn_t *c = p->conn;
        int nctl = 0, nrx = 0;
        for (verbs_ctrl_t *k = p->ctl_head; k; k = k->next) nctl++;
        for (verbs_rrec_t *r = p->rx_head; r; r = r->next) nrx++;
        if (!c && !p->sq_head && !p->fail.failed && !nctl) continue;
        fprintf(out, "  rank %d: failed %d crossed %d, queued %d, control %d, waiting %d, records %d, ring credit "
                "due %d", i, p->fail.failed, p->crossed, verbs_count_sends(p->sq_head), nctl, verbs_count_sends(p->wait), nrx,
                p->ring_credit_due);
        if (c)
            fprintf(out, "; QP %u state %d %s, credits %u, owed %u, free slots %u, reads %u", c->qp ? c->qp->qp_num : 0,
                    c->state, c->passive ? "accepted" : "initiated", c->tx_credits, c->rx_owed, c->nfree,
                    c->reads_out);
        fprintf(out, "\n");
    }
}

static const oobx_setting_desc_t verbs_settings[] = {{NULL, NULL, NULL, 0, 0, 0, 0, 0}};

static void verbs_describe_op(FILE *out, const oobx_settings_t *s, const oobx_core_api_t *core)
{
    verbs_describe(out, s, core);
}

const oobx_tp_ops_t oobx_verbs_ops = {
    .version = OOBX_TP_VERSION,
    .name = "verbs",
    .settings = verbs_settings,
    .create = verbs_create,
    .address = verbs_address,
    .set_peer = verbs_set_peer,
    .ring = verbs_ring,
    .send = verbs_send,
    .release = verbs_release,
    .progress = verbs_progress,
    .wait_prepare = verbs_wait_prepare,
    .sleep = oobx_tp_sleep_poll,
    .peer_name = verbs_peer_name,
    .describe = verbs_describe_op,
    .destroy = verbs_destroy,
};

oobx__module_export int oobx_tp_module_init(const oobx_core_api_t *api, const oobx_tp_ops_t **ops, char *why,
                                            size_t whylen)
{
    int rc = oobx__module_accepts(api, "verbs", why, whylen);
    if (rc == 0) *ops = &oobx_verbs_ops;
    return rc;
}
