/* Tagged point-to-point: oobx_send and oobx_recv over the endpoint view of
 * the communicator. */
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"
#include "util.h"

typedef struct one_req {
    oobx_rreq_t *r;
    oobx_sreq_t *s;
} one_req_t;

static int one_done(void *arg)
{
    one_req_t *o = arg;
    return o->r ? o->r->done : o->s->tp.done;
}

static uint64_t p2p_tag(int tag)
{
    return (uint64_t)(uint32_t)tag;
}

int oobx_send(oobx_comm_t c, int peer, int tag, const void *buf, size_t bytes)
{
    int rc = oobx__comm_check(c, "oobx_send");
    if (rc) return rc;
    if (peer < 0 || peer >= c->v.nranks)
        return oobx__fail(&c->log, OOBX_ERR_INVALID, "oobx_send: rank %d: peer %d is not in 0..%d", c->v.rank, peer,
                         c->v.nranks - 1);
    if (!buf && bytes) return oobx__fail(&c->log, OOBX_ERR_INVALID, "oobx_send: rank %d: buf is NULL", c->v.rank);
    pthread_mutex_lock(&c->v.ep->lock);
    oobx_sreq_t *s = c->v.ep->spare_sreq;
    c->v.ep->spare_sreq = NULL;
    if (!s && !(s = malloc(sizeof(*s)))) {
        pthread_mutex_unlock(&c->v.ep->lock);
        return oobx__fail(&c->log, OOBX_ERR_NOMEM, "out of memory");
    }
    rc = oobx__ep_isend(&c->v, peer, OOBX_MSG_P2P, p2p_tag(tag), buf, bytes, s);
    if (rc == 0 && !s->tp.done) {
        one_req_t o = {NULL, s};
        uint64_t t0 = oobx__now_coarse_ns(); /* for the error's "after N ms" only: the cheap clock */
        rc = oobx__ep_wait_ms(&c->v, one_done, &o, c->settings.timeout_ms);
        if (rc != 0) {
            char who[160];
            oobx__ep_peer_name(&c->v, peer, who, sizeof(who));
            rc = oobx__ep_wait_error(&c->v, rc, "oobx_send of %zu bytes (tag %d) from rank %d to %s after %.0f ms", bytes, tag,
                                 c->v.rank, who, (oobx__now_coarse_ns() - t0) / 1e6);
            oobx__ep_release_send(c->v.ep, s);
            oobx__ep_adopt(c->v.ep, s);
            s = NULL;
        }
    }
    if (rc == 0 && s->tp.status) {
        char who[160];
        oobx__ep_peer_name(&c->v, peer, who, sizeof(who));
        if (s->tp.status == OOBX_ERR_REMOTE) oobx__ep_view_peer_lost(&c->v, peer, who);
        const char *why = oobx__ep_failed_what(c->v.ep, oobx__ep_view_rank(&c->v, peer));
        rc = oobx__fail(&c->log, s->tp.status, "oobx_send from rank %d to %s: %s", c->v.rank, who,
                       why ? why : oobx_strerror(s->tp.status));
    }
    if (s && !c->v.ep->spare_sreq) {
        c->v.ep->spare_sreq = s;
        s = NULL;
    }
    pthread_mutex_unlock(&c->v.ep->lock);
    if (rc) oobx__comm_flush_notices(c);
    free(s);
    return rc;
}

int oobx_recv(oobx_comm_t c, int peer, int tag, void *buf, size_t capacity, size_t *received)
{
    int rc = oobx__comm_check(c, "oobx_recv");
    if (rc) return rc;
    if (peer < 0 || peer >= c->v.nranks)
        return oobx__fail(&c->log, OOBX_ERR_INVALID, "oobx_recv: rank %d: peer %d is not in 0..%d", c->v.rank, peer,
                         c->v.nranks - 1);
    if (!buf && capacity) return oobx__fail(&c->log, OOBX_ERR_INVALID, "oobx_recv: rank %d: buf is NULL", c->v.rank);
    char who[160];
    pthread_mutex_lock(&c->v.ep->lock);
    oobx_rreq_t *r = c->v.ep->spare_rreq;
    c->v.ep->spare_rreq = NULL;
    if (!r && !(r = malloc(sizeof(*r)))) {
        pthread_mutex_unlock(&c->v.ep->lock);
        return oobx__fail(&c->log, OOBX_ERR_NOMEM, "out of memory");
    }
    rc = oobx__ep_irecv(&c->v, peer, OOBX_MSG_P2P, p2p_tag(tag), buf, capacity, r);
    if (rc == 0) {
        uint64_t t0 = 0;
        if (!r->done) {
            one_req_t o = {r, NULL};
            t0 = oobx__now_coarse_ns(); /* for the error's "after N ms" only */
            rc = oobx__ep_wait_ms(&c->v, one_done, &o, c->settings.timeout_ms);
        }
        if (rc != 0 || r->status || (!received && r->received != capacity))
            oobx__ep_peer_name(&c->v, peer, who, sizeof(who)); /* only errors need the name */
        if (rc != 0) {
            rc = oobx__ep_wait_error(&c->v, rc, "oobx_recv at rank %d from %s (tag %d, capacity %zu) after %.0f ms", c->v.rank,
                                 who, tag, capacity, (oobx__now_coarse_ns() - t0) / 1e6);
            if (oobx__ep_cancel_recv(&c->v, OOBX_MSG_P2P, p2p_tag(tag), r)) {
                oobx__ep_adopt(c->v.ep, r);
                r = NULL;
            }
        } else if (r->status == OOBX_ERR_TRUNCATED) {
            rc = oobx__fail(&c->log, OOBX_ERR_TRUNCATED,
                           "oobx_recv at rank %d: the message from %s (tag %d) has %zu bytes, more than the capacity %zu",
                           c->v.rank, who, tag, r->msg_len, capacity);
        } else if (r->status) {
            if (r->status == OOBX_ERR_REMOTE) oobx__ep_view_peer_lost(&c->v, peer, who);
            const char *why = oobx__ep_failed_what(c->v.ep, oobx__ep_view_rank(&c->v, peer));
            rc = oobx__fail(&c->log, r->status, "oobx_recv at rank %d from %s (tag %d): %s", c->v.rank, who, tag,
                           why ? why : oobx_strerror(r->status));
        } else if (!received && r->received != capacity) {
            rc = oobx__fail(&c->log, OOBX_ERR_TRUNCATED,
                           "oobx_recv at rank %d: the message from %s (tag %d) has %zu bytes but %zu were expected (pass "
                           "`received` to accept shorter messages)",
                           c->v.rank, who, tag, r->received, capacity);
        } else if (received) {
            *received = r->received;
        }
    }
    if (r && !c->v.ep->spare_rreq) {
        c->v.ep->spare_rreq = r;
        r = NULL;
    }
    pthread_mutex_unlock(&c->v.ep->lock);
    if (rc) oobx__comm_flush_notices(c);
    free(r);
    return rc;
}
