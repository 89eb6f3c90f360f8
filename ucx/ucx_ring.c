/*
 * The UCX transport's ring link (OOBX_UCX_RING): the receiver's ring buffer
 * (ucp_mem_map, its packed key sent to prev in SETUP), the choice of path at
 * the first send to next (ucp_put_nbx, plain copies into a ring mapped here,
 * or tag messages), and the writing of queued messages into next's ring as
 * far as ring credits allow, with one DOORBELL for the chunks written. The
 * slot and credit bookkeeping is src/ringbuf.c. Of the ring's messages that
 * come in, a SETUP is kept here (ucx_handle_setup); DOORBELL and CREDIT are
 * handled with the other messages (ucx_msg.c, ucx_rrec_begin).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ucp/api/ucp.h>

#include "log.h"
#include "ringbuf.h"
#include "transport.h"
#include "ucx_int.h"
#include "ucx_wire.h"

enum { UCX_LANE_NATIVE = 1, UCX_LANE_SINGLE_COPY = 2, UCX_LANE_EMULATED = 4 };

/* ---- the ring ------------------------------------------------------------------------ */

const char *ucx_ring_mode_name(int m)
{
    return m == UCX_RING_PUT ? "put" : m == UCX_RING_TAG ? "tag" : "auto";
}

/* Whether the ring to a peer is written with RMA. Native RMA here means the
 * ring is mapped into this process (shared memory: posix, sysv, xpmem) or
 * UCX's RMA lane for the endpoint is a real one-sided transport; over tcp UCX
 * 1.13 emulates put in software, slower than its tag messages. */
/* The kinds of the endpoint's RMA lanes, from UCX's own description of it
 * (UCX 1.13 has no query for them). */
static int ucx_ep_rma_lanes(ucp_ep_h ep)
{
    int kinds = 0;
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    if (!f) return 0;
    ucp_ep_print_info(ep, f);
    fclose(f);
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strstr(line, "lane[") || !strstr(line, "rma_bw")) continue;
        if (strstr(line, "tcp") || strstr(line, "sw"))
            kinds |= UCX_LANE_EMULATED;
        else if (strstr(line, "cma") || strstr(line, "knem") || strstr(line, "xpmem"))
            kinds |= UCX_LANE_SINGLE_COPY;
        else
            kinds |= UCX_LANE_NATIVE;
    }
    free(text);
    return kinds;
}

static int ucx_ring_choose(ucx_tp_t *tp, ucp_ep_h ep, ucp_rkey_h rkey, uint64_t raddr, void **rptr,
                           const char **why)
{
    *rptr = NULL;
    void *ptr = NULL;
    int mapped = ucp_rkey_ptr(rkey, raddr, &ptr) == UCS_OK;
    if (tp->ring_mode == UCX_RING_TAG) {
        *why = "tag messages requested";
        return 0;
    }
    int lanes = ucx_ep_rma_lanes(ep);
    if (mapped) *rptr = ptr;
    if (tp->ring_mode == UCX_RING_PUT) {
        *why = mapped ? "put requested, the ring is in shared memory"
             : lanes & (UCX_LANE_NATIVE | UCX_LANE_SINGLE_COPY) ? "put requested, native RMA"
                                                                : "put requested, RMA emulated by UCX";
        return 1;
    }
    if (mapped) {
        /* two plain copies through the mapped ring beat UCX's single-copy
         * rendezvous (cma) for the allgather: 105 against 411-481 us for
         * 1 MiB at 2 ranks (docs/transports/ucx.md) */
        *why = lanes & UCX_LANE_SINGLE_COPY ? "the ring is in shared memory (faster than UCX's single-copy rendezvous)"
                                            : "the ring is in shared memory";
        return 1;
    }
    if (lanes & UCX_LANE_SINGLE_COPY) {
        *why = "UCX's rendezvous copies once (cma/knem/xpmem), the ring twice";
        *rptr = NULL;
        return 0;
    }
    if (lanes & UCX_LANE_NATIVE) {
        *why = "native RMA";
        return 1;
    }
    *why = lanes & UCX_LANE_EMULATED ? "RMA is emulated by UCX on this transport, tag messages are faster"
                                     : "no RMA lane";
    return 0;
}

int ucx_ring(oobx_tp_t *base, int prev, int next)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    tp->rrx.peer = prev;
    tp->rtx.peer = next;
    if (tp->rtx.early && tp->rtx.early_peer == next) {
        /* next set its ring up before this rank named it: take its SETUP now */
        unsigned char *e = tp->rtx.early;
        size_t el = tp->rtx.early_len;
        tp->rtx.early = NULL;
        tp->rtx.early_peer = -1;
        ucx_handle_setup(tp, next, e, el);
        free(e);
    }
    if (prev < 0 || prev == tp->rank || tp->ring_mode == UCX_RING_TAG) return 0;
    if (prev >= tp->nranks || !ucx_peer_known(tp, prev))
        return oobx__fail(tp->log, OOBX_ERR_INTERNAL, "ucx: ring neighbour %d has no address", prev);

    char why[200];
    uint32_t slots = (uint32_t)tp->settings->ring_slots;
    uint32_t slot_bytes = (uint32_t)tp->settings->ring_slot_bytes;
    if (tp->settings->ring_slots <= 0 || tp->settings->ring_slot_bytes > UINT32_MAX ||
        oobx__ringbuf_geom_check(slots, slot_bytes, why, sizeof(why)))
        return oobx__fail(tp->log, OOBX_ERR_INVALID, "ucx: %s", why);

    ucx_ring_rx_t *rx = &tp->rrx;
    rx->size = (size_t)slots * slot_bytes;
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        .length = rx->size,
        .flags = UCP_MEM_MAP_ALLOCATE,
    };
    ucs_status_t st = ucp_mem_map(tp->ctx, &mp, &rx->memh);
    if (st != UCS_OK) {
        OOBX_WARN(tp->log, "ucx: cannot map a %zu-byte ring buffer (%s); the ring uses tag messages",
                  rx->size, ucs_status_string(st));
        rx->memh = NULL;
        return 0;
    }
    ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
    if (ucp_mem_query(rx->memh, &ma) != UCS_OK) {
        ucp_mem_unmap(tp->ctx, rx->memh);
        rx->memh = NULL;
        return 0;
    }
    rx->base = ma.address;
    oobx__ringbuf_clear_headers(rx->base, slots, slot_bytes);
    oobx__ringbuf_rx_init(&rx->rb, slots, slot_bytes, 0);

    void *rkey = NULL;
    size_t rkey_len = 0;
    st = ucp_rkey_pack(tp->ctx, rx->memh, &rkey, &rkey_len);
    if (st != UCS_OK || sizeof(ucx_setup_t) + rkey_len > UCX_CTRL_MAX) {
        if (st == UCS_OK) ucp_rkey_buffer_release(rkey);
        OOBX_WARN(tp->log, "ucx: cannot pack the ring key (%s); the ring uses tag messages",
                  st == UCS_OK ? "too large" : ucs_status_string(st));
        return 0;
    }
    size_t len = sizeof(ucx_setup_t) + rkey_len;
    unsigned char *msg = malloc(len);
    if (!msg) {
        ucp_rkey_buffer_release(rkey);
        return oobx__fail(tp->log, OOBX_ERR_NOMEM, "ucx: out of memory");
    }
    ucx_msg_t m = {.type = UCX_T_SETUP, .rkey = rkey,
                   .setup = {.slots = slots, .slot_bytes = slot_bytes, .raddr = (uint64_t)(uintptr_t)rx->base,
                             .rkey_len = (uint32_t)rkey_len}};
    len = ucx_msg_encode(&m, msg, len);
    ucp_rkey_buffer_release(rkey);
    ucx_send_ctrl(tp, prev, UCX_T_SETUP, msg, len);
    free(msg);
    rx->setup_sent = 1;
    OOBX_DEBUG(tp->log, "ucx: ring buffer for rank %d -> %d: %u slots of %u bytes, key of %zu bytes", prev,
               tp->rank, slots, slot_bytes, rkey_len);
    if (next >= 0 && next != tp->rank) ucx_peer_ep(tp, next);
    return 0;
}

/* SETUP from next: its ring for the link me -> next. It is only checked and
 * kept here; the key is unpacked at the first send to next, when next is
 * surely still in the communicator (a short-lived communicator may be gone at
 * the peer before its SETUP is read, and UCX 1.13 crashes unpacking the key of
 * a shared-memory segment that no longer exists). */
void ucx_handle_setup(ucx_tp_t *tp, int peer, const void *buf, size_t len)
{
    ucx_ring_tx_t *r = &tp->rtx;
    if (r->peer < 0 && !r->early) {
        /* ring() has not named next yet (ranks call it at different times): keep it */
        r->early = malloc(len);
        if (!r->early) return;
        memcpy(r->early, buf, len);
        r->early_len = len;
        r->early_peer = peer;
        return;
    }
    if (peer != r->peer || r->setup || r->active) {
        ucx_protocol_error(tp, peer, "unexpected ring setup");
        return;
    }
    /* checked by ucx_msg_decode: geometry, and a key of exactly the rest */
    r->setup = malloc(len);
    if (!r->setup) return; /* the ring is an optimisation: tag messages go on */
    memcpy(r->setup, buf, len);
    r->setup_len = len;
}

/* Before the first send to next: unpacks its ring key and picks the path. */
void ucx_ring_activate(ucx_tp_t *tp)
{
    ucx_ring_tx_t *r = &tp->rtx;
    int peer = r->peer;
    ucx_setup_t su;
    unsigned char *buf = r->setup;
    r->setup = NULL;
    memcpy(&su, buf, sizeof(su));
    ucx_peer_t *p = &tp->peers[peer];
    /* a dead peer's shared-memory key cannot be unpacked (UCX 1.13 crashes) */
    if (strcmp(p->host, tp->host) == 0 && !ucx_pid_alive(p->pid)) {
        ucx_peer_fail(tp, peer, OOBX_ERR_REMOTE, "ucx: rank %d (%s pid %u) has exited", peer, p->host, p->pid);
        goto out;
    }
    ucp_ep_h ep = ucx_peer_ep(tp, peer);
    if (!ep) goto out;
    ucs_status_t st = ucp_ep_rkey_unpack(ep, buf + sizeof(su), &r->rkey);
    if (st != UCS_OK) {
        r->rkey = NULL;
        OOBX_WARN(tp->log, "ucx: cannot unpack the ring key of rank %d (%s); ring sends use tag messages",
                  peer, ucs_status_string(st));
        goto out;
    }
    r->raddr = su.raddr;
    const char *reason = "";
    if (!ucx_ring_choose(tp, ep, r->rkey, r->raddr, &r->rptr, &reason)) {
        OOBX_INFO(tp->log, "ucx: ring link to rank %d uses tag messages (OOBX_UCX_RING=%s: %s)", peer,
                  ucx_ring_mode_name(tp->ring_mode), reason);
        goto out;
    }
    r->heads = calloc(su.slots, sizeof(*r->heads));
    if (!r->heads) goto out;
    oobx__ringbuf_tx_init(&r->rb, su.slots, su.slot_bytes);
    r->active = 1;
    OOBX_INFO(tp->log, "ucx: ring link to rank %d writes into its registered ring (%u slots of %u bytes, %s: %s)",
              peer, su.slots, su.slot_bytes, r->rptr ? "mapped" : "ucp_put_nbx", reason);
out:
    free(buf);
}

/* Writes queued ring messages into the peer's ring as far as credits allow. */
void ucx_ring_push(ucx_tp_t *tp)
{
    ucx_ring_tx_t *r = &tp->rtx;
    ucx_peer_t *p = &tp->peers[r->peer];
    if (!r->active || p->fail.failed) return;
    ucp_ep_h ep = p->ep;
    while (r->q_head) {
        ucx_sreq_t *s = r->q_head;
        if (!r->rb.in_msg) oobx__ringbuf_tx_msg_begin(&r->rb, &s->hdr);
        ringbuf_chunk_t c;
        ucx_doorbell_t db = {.seq = r->rb.next_seq, .count = 0, .pad = 0};
        while (oobx__ringbuf_tx_next(&r->rb, &c)) {
            memcpy(r->heads[c.slot], c.head, c.head_len);
            uint64_t dst = r->raddr + c.slot_off;
            if (r->rptr) {
                /* the peer's ring is mapped here (shared memory): write it directly */
                memcpy((char *)r->rptr + c.slot_off, c.head, c.head_len);
                if (c.pay_len)
                    memcpy((char *)r->rptr + c.slot_off + c.head_len,
                           (const char *)s->payload + c.pay_off, c.pay_len);
            } else {
                ucp_request_param_t prm = ucx_send_param(s);
                ucx_sreq_track(s, ucp_put_nbx(ep, r->heads[c.slot], c.head_len, dst, r->rkey, &prm));
                if (c.pay_len)
                    ucx_sreq_track(s, ucp_put_nbx(ep, (const char *)s->payload + c.pay_off, c.pay_len,
                                                  dst + c.head_len, r->rkey, &prm));
            }
            db.count++;
            if (c.last) break;
        }
        if (db.count) {
            /* one doorbell for the chunks of s written now, after their writes */
            if (!r->rptr) ucp_worker_fence(tp->worker);
            ucx_send_ctrl(tp, r->peer, UCX_T_DOORBELL, &db, sizeof(db));
        }
        if (r->rb.in_msg) return; /* out of credits in the middle of s */
        r->q_head = s->next;
        if (!r->q_head) r->q_tail = NULL;
        ucx_sreq_issued(s);
    }
}
