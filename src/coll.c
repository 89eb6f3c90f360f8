/*
 * Collectives over the endpoint's tagged messages: the pipelined ring and
 * Bruck allgathers, the dissemination barrier, the pipelined binomial
 * broadcast. Every algorithm runs over a group view (a subset of the
 * communicator, or all of it), so the group calls share the code.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "log.h"
#include "util.h"
#include "wire.h"

static int member(const coll_group_t *g, int i)
{
    return g->members ? g->members[i] : i;
}

static uint64_t coll_tag(const coll_group_t *g, unsigned step)
{
    return oobx__coll_tag(g->gid, step, g->op, g->seq, g->root);
}

/* g as the call op sees it (a call made inside another keeps the outer
 * signature); the endpoint learns of the call */
static coll_group_t with_op(const oobx__ep_view_t *c, const coll_group_t *g, unsigned op, int root)
{
    coll_group_t s = *g;
    if (!s.op) {
        s.op = op;
        s.root = root;
        oobx__ep_coll_begin(c, coll_tag(&s, 0));
    }
    return s;
}

/* Requests of one collective, freed or handed to the endpoint at the end. */
typedef struct coll_reqs {
    oobx_rreq_t *r;
    int nr;
    oobx_sreq_t *s;
    int ns, caps;
    uint64_t tag;
} coll_reqs_t;

static int reqs_alloc(coll_reqs_t *q, int nr, int ns)
{
    memset(q, 0, sizeof(*q));
    q->r = calloc((size_t)(nr ? nr : 1), sizeof(*q->r));
    q->s = calloc((size_t)(ns ? ns : 1), sizeof(*q->s));
    q->caps = ns;
    return q->r && q->s ? 0 : OOBX_ERR_NOMEM;
}

/* Frees the requests; on an early end, those a transport may still touch
 * (and extra, a buffer they point into) go to the endpoint instead. */
static void reqs_release(const oobx__ep_view_t *c, coll_reqs_t *q, int posted_r, void *extra)
{
    int keep = 0;
    for (int i = 0; i < posted_r; i++)
        if (!q->r[i].done && oobx__ep_cancel_recv(c, OOBX_MSG_COLL, q->tag, &q->r[i])) keep = 1;
    for (int i = 0; i < q->ns; i++)
        if (!q->s[i].tp.done) {
            oobx__ep_release_send(c->ep, &q->s[i]);
            keep = 1;
        }
    if (keep) {
        oobx__ep_adopt(c->ep, q->r);
        oobx__ep_adopt(c->ep, q->s);
        oobx__ep_adopt(c->ep, extra);
    } else {
        free(q->r);
        free(q->s);
        free(extra);
    }
}

static int send_status(const coll_reqs_t *q)
{
    for (int i = 0; i < q->ns; i++)
        if (q->s[i].tp.done && q->s[i].tp.status) return i;
    return -1;
}

static int all_sent(const coll_reqs_t *q)
{
    for (int i = 0; i < q->ns; i++)
        if (!q->s[i].tp.done) return 0;
    return 1;
}

/* Text for a failed request to or from comm rank peer. */
static int peer_error(const oobx__ep_view_t *c, int status, int peer, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int peer_error(const oobx__ep_view_t *c, int status, int peer, const char *fmt, ...)
{
    char what[600], who[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    oobx__ep_peer_name(c, peer, who, sizeof(who));
    /* a request that failed without the transport's peer_failed: the communicator's failure too */
    if (status == OOBX_ERR_REMOTE) oobx__ep_view_peer_lost(c, peer, who);
    const char *why = oobx__ep_failed_what(c->ep, oobx__ep_view_rank(c, peer));
    /* a link that failed because the communicator did: the first failure's code */
    int failed = oobx__ep_view_status(c);
    if (failed && status != OOBX_ERR_TRUNCATED) status = failed;
    if (status == OOBX_ERR_TRUNCATED)
        return oobx__fail(c->log, status, "rank %d: %s: %s sent more than expected (mismatched sizes between ranks?)",
                         c->rank, what, who);
    return oobx__fail(c->log, status, "rank %d: %s: %s: %s", c->rank, what, who, why ? why : oobx_strerror(status));
}

/* Text for a failed receive from comm rank peer: a message of another size
 * is the ranks disagreeing on the call. */
static int recv_error(const oobx__ep_view_t *c, const oobx_rreq_t *r, int peer, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int recv_error(const oobx__ep_view_t *c, const oobx_rreq_t *r, int peer, const char *fmt, ...)
{
    char what[600], who[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (r->status != OOBX_ERR_MISMATCH) return peer_error(c, r->status, peer, "%s", what);
    oobx__ep_peer_name(c, peer, who, sizeof(who));
    char text[1600];
    if (r->rival_tag) {
        char mine[120], theirs[120];
        oobx__coll_describe(r->tag, mine, sizeof(mine));
        oobx__coll_describe(r->rival_tag, theirs, sizeof(theirs));
        snprintf(text, sizeof(text),
                 "rank %d: %s: %s is in another call: it sent for %s (%zu bytes), this rank is in %s: the ranks "
                 "disagree on the call",
                 c->rank, what, who, theirs, r->msg_len, mine);
    } else {
        snprintf(text, sizeof(text),
                 "rank %d: %s: %s sent %zu bytes where this rank expects %zu: the ranks disagree on the call (bytes "
                 "per rank)",
                 c->rank, what, who, r->msg_len, r->cap);
    }
    /* the other ranks may wait on ranks that will never send: they hear it too */
    oobx__ep_fail(c->ep, oobx__ep_view_rank(c, peer), OOBX_ERR_MISMATCH, text);
    return oobx__fail(c->log, OOBX_ERR_MISMATCH, "%s", text);
}

/* ---- pipelined ring -------------------------------------------------------------- */

typedef struct ring_run {
    const oobx__ep_view_t *c;
    const coll_group_t *g;
    coll_reqs_t q;
    char *base;
    size_t stride;  /* bytes between slices */
    size_t bpr;     /* bytes per slice (fixed mode) */
    size_t chunk;
    int nch;
    size_t *lens;   /* variable mode: lengths (cap = stride) */
    int next_fwd;
    int fwd_limit;  /* receives that are forwarded */
    int next;       /* comm rank */
    int err_index;  /* first failed receive, -1 */
    int send_rc;    /* a forward that failed: its text is the thread's last error */
    coll_landed_fn landed; /* variable mode: told of each item as it lands */
    void *landed_arg;
} ring_run_t;

static int ring_progress(void *arg)
{
    ring_run_t *rr = arg;
    while (rr->next_fwd < rr->q.nr && rr->q.r[rr->next_fwd].done) {
        oobx_rreq_t *r = &rr->q.r[rr->next_fwd];
        if (r->status) {
            rr->err_index = rr->next_fwd;
            return 1;
        }
        if (rr->next_fwd < rr->fwd_limit) {
            oobx_sreq_t *s = &rr->q.s[rr->q.ns];
            int rc = oobx__ep_isend(rr->c, rr->next, OOBX_MSG_COLL, rr->q.tag, r->buf, r->received, s);
            if (rc != 0) {
                rr->send_rc = rc;
                return 1;
            }
            rr->q.ns++;
        }
        if (rr->landed) {
            /* variable mode has one chunk per item: item i came from i + 1 ranks back */
            int slice = (rr->g->me - 1 - rr->next_fwd + rr->g->n) % rr->g->n;
            rr->landed(rr->landed_arg, member(rr->g, slice), r->buf, r->received);
        }
        rr->next_fwd++;
    }
    if (send_status(&rr->q) >= 0) return 1;
    return rr->next_fwd == rr->q.nr && all_sent(&rr->q);
}

static int ring_allgather(const oobx__ep_view_t *c, const coll_group_t *g, char *base, size_t stride, size_t bpr,
                          size_t *lens, coll_landed_fn landed, void *landed_arg)
{
    int n = g->n, me = g->me;
    ring_run_t rr;
    memset(&rr, 0, sizeof(rr));
    rr.c = c;
    rr.g = g;
    rr.base = base;
    rr.stride = stride;
    rr.bpr = bpr;
    rr.lens = lens;
    rr.landed = lens ? landed : NULL;
    rr.landed_arg = landed_arg;
    rr.chunk = lens ? stride : c->settings->chunk_bytes;
    rr.nch = lens ? 1 : (int)((bpr + rr.chunk - 1) / rr.chunk);
    if (rr.nch < 1) rr.nch = 1;
    rr.next = member(g, (me + 1) % n);
    int prev = member(g, (me - 1 + n) % n);
    rr.err_index = -1;
    int nr = (n - 1) * rr.nch;
    int rc = reqs_alloc(&rr.q, nr, n * rr.nch);
    if (rc != 0) {
        reqs_release(c, &rr.q, 0, NULL);
        return oobx__fail(c->log, rc, "rank %d: out of memory for an allgather of %d ranks", c->rank, n);
    }
    rr.q.tag = coll_tag(g, 0);
    rr.fwd_limit = (n - 2) * rr.nch;
    int posted = 0;
    for (int s = 1; s < n && rc == 0; s++) {
        int slice = (me - s + n) % n;
        for (int k = 0; k < rr.nch && rc == 0; k++) {
            size_t off = (size_t)k * rr.chunk;
            size_t len = lens ? stride : (bpr - off < rr.chunk ? bpr - off : rr.chunk);
            rc = lens ? oobx__ep_irecv(c, prev, OOBX_MSG_COLL, rr.q.tag, base + (size_t)slice * stride + off, len,
                                       &rr.q.r[posted])
                      : oobx__ep_irecv_exact(c, prev, OOBX_MSG_COLL, rr.q.tag, base + (size_t)slice * stride + off,
                                             len, &rr.q.r[posted]);
            if (rc == 0) posted++;
        }
    }
    for (int k = 0; k < rr.nch && rc == 0; k++) {
        size_t off = (size_t)k * rr.chunk;
        size_t len = lens ? lens[me] : (bpr - off < rr.chunk ? bpr - off : rr.chunk);
        rc = oobx__ep_isend(c, rr.next, OOBX_MSG_COLL, rr.q.tag, base + (size_t)me * stride + off, len, &rr.q.s[rr.q.ns]);
        if (rc == 0) rr.q.ns++;
    }
    rr.q.nr = posted;
    if (rc != 0) {
        reqs_release(c, &rr.q, posted, NULL);
        return rc;
    }
    uint64_t t0 = oobx__now_coarse_ns();
    rc = oobx__ep_wait_ms(c, ring_progress, &rr, c->settings->timeout_ms);
    int bad = send_status(&rr.q);
    if (rc == 0 && rr.err_index >= 0) {
        int slice = (me - 1 - rr.err_index / rr.nch + n) % n;
        rc = recv_error(c, &rr.q.r[rr.err_index], prev, "allgather (ring): receiving the slice of group rank %d",
                        slice);
    } else if (rc == 0 && rr.send_rc) {
        rc = rr.send_rc; /* oobx__ep_isend said why, and logged it */
    } else if (rc == 0 && bad >= 0) {
        rc = peer_error(c, rr.q.s[bad].tp.status, rr.next, "allgather (ring): sending");
    } else if (rc != 0) {
        int first = rr.next_fwd;
        int slice = (me - 1 - first / rr.nch + n) % n;
        rc = oobx__ep_wait_error(c, rc,
                             "allgather (ring) at rank %d: after %.0f ms, %d of %d pieces in; waiting for the data of "
                             "rank %d (the first whose data never came) from predecessor rank %d",
                             c->rank, (oobx__now_coarse_ns() - t0) / 1e6, first, nr, member(g, slice), prev);
    }
    if (rc == 0 && lens) {
        for (int s = 1; s < n; s++) lens[(me - s + n) % n] = rr.q.r[s - 1].received;
    }
    reqs_release(c, &rr.q, posted, NULL);
    return rc;
}

/* ---- Bruck --------------------------------------------------------------------------- */

typedef struct pair_run {
    oobx_rreq_t *r;
    oobx_sreq_t *s;
} pair_run_t;

static int pair_done(void *arg)
{
    pair_run_t *p = arg;
    if (p->r->done && p->r->status) return 1;
    if (p->s->tp.done && p->s->tp.status) return 1;
    return p->r->done && p->s->tp.done;
}

/* One exchange: send to `to`, receive from `from`; both comm ranks. */
static int exchange(const oobx__ep_view_t *c, coll_reqs_t *q, int to, const void *sbuf, size_t slen, int from, void *rbuf,
                    size_t rlen, const char *what)
{
    q->ns = 0;
    int rc = oobx__ep_irecv_exact(c, from, OOBX_MSG_COLL, q->tag, rbuf, rlen, &q->r[0]);
    if (rc != 0) return rc;
    rc = oobx__ep_isend(c, to, OOBX_MSG_COLL, q->tag, sbuf, slen, &q->s[0]);
    if (rc != 0) return -1000 + rc; /* the receive is posted: the caller cancels it */
    q->ns = 1;
    pair_run_t p = {&q->r[0], &q->s[0]};
    uint64_t t0 = oobx__now_coarse_ns();
    rc = oobx__ep_wait_ms(c, pair_done, &p, c->settings->timeout_ms);
    if (rc != 0) {
        char who[160];
        oobx__ep_peer_name(c, q->r[0].done ? to : from, who, sizeof(who));
        return -1000 + oobx__ep_wait_error(c, rc, "rank %d: %s: after %.0f ms still waiting for %s %s", c->rank, what,
                                       (oobx__now_coarse_ns() - t0) / 1e6, q->r[0].done ? "the send to" : "the message of",
                                       who);
    }
    if (q->r[0].status) return recv_error(c, &q->r[0], from, "%s: receiving", what);
    if (q->s[0].tp.status) return peer_error(c, q->s[0].tp.status, to, "%s: sending", what);
    return 0;
}

static int finish_exchange(const oobx__ep_view_t *c, coll_reqs_t *q, int rc, void *extra)
{
    int posted = rc <= -1000 ? 1 : 0; /* the receive may still be queued */
    if (rc <= -1000) rc += 1000;
    reqs_release(c, q, posted, extra);
    return rc;
}

static int bruck_allgather(const oobx__ep_view_t *c, const coll_group_t *g, char *buf, size_t bpr)
{
    int n = g->n, me = g->me;
    char *tmp = malloc((size_t)n * bpr);
    coll_reqs_t q;
    if (!tmp || reqs_alloc(&q, 1, 1) != 0) {
        free(tmp);
        return oobx__fail(c->log, OOBX_ERR_NOMEM, "rank %d: out of memory for a Bruck allgather", c->rank);
    }
    memcpy(tmp, buf + (size_t)me * bpr, bpr);
    int rc = 0;
    unsigned step = 0;
    for (int dist = 1; dist < n && rc == 0; dist <<= 1, step++) {
        int cnt = dist < n - dist ? dist : n - dist;
        q.tag = coll_tag(g, step);
        char what[64];
        snprintf(what, sizeof(what), "allgather (Bruck) step %u", step);
        rc = exchange(c, &q, member(g, (me - dist + n) % n), tmp, (size_t)cnt * bpr, member(g, (me + dist) % n),
                      tmp + (size_t)dist * bpr, (size_t)cnt * bpr, what);
        if (rc != 0) return finish_exchange(c, &q, rc, tmp);
    }
    for (int i = 0; i < n; i++) memcpy(buf + (size_t)((me + i) % n) * bpr, tmp + (size_t)i * bpr, bpr);
    return finish_exchange(c, &q, 0, tmp);
}

/* ---- tree: binomial gather to group rank 0, then the broadcast ------------------ */

typedef struct gather_run {
    coll_reqs_t *q;
    int nr;
} gather_run_t;

static int gather_done(void *arg)
{
    gather_run_t *gr = arg;
    for (int i = 0; i < gr->nr; i++) {
        if (!gr->q->r[i].done) return 0;
        if (gr->q->r[i].status) return 1;
    }
    return send_status(gr->q) >= 0 || all_sent(gr->q);
}

/* Gathers every member's slice (bpr bytes, 0 for a barrier) into group rank
 * 0's buf. A subtree's slices are contiguous, so each child sends its whole
 * range in one message: n-1 messages in all. */
static int tree_gather(const oobx__ep_view_t *c, const coll_group_t *g, char *buf, size_t bpr, const char *what)
{
    int n = g->n, vr = g->me;
    int low = 1;
    while (low < n && !(vr & low)) low <<= 1; /* vr's lowest set bit; >= n for rank 0 */
    coll_reqs_t q;
    if (reqs_alloc(&q, 32, 1) != 0) {
        reqs_release(c, &q, 0, NULL);
        return oobx__fail(c->log, OOBX_ERR_NOMEM, "out of memory");
    }
    q.tag = coll_tag(g, 1);
    int rc = 0, posted = 0;
    int children[32];
    for (int m = 1; m < low && vr + m < n && rc == 0; m <<= 1) {
        int child = vr + m, end = child + m < n ? child + m : n;
        children[posted] = child;
        rc = oobx__ep_irecv_exact(c, member(g, child), OOBX_MSG_COLL, q.tag, buf + (size_t)child * bpr, (size_t)(end - child) * bpr,
                      &q.r[posted]);
        if (rc == 0) posted++;
    }
    gather_run_t gr = {&q, posted};
    uint64_t t0 = oobx__now_coarse_ns();
    int waited = 0; /* the wait's own status: its message is written below */
    if (rc == 0) rc = waited = oobx__ep_wait_ms(c, gather_done, &gr, c->settings->timeout_ms);
    for (int i = 0; rc == 0 && i < posted; i++)
        if (q.r[i].status) {
            rc = recv_error(c, &q.r[i], member(g, children[i]), "%s (gather): receiving", what);
            break;
        }
    if (rc != 0 && !waited) {
        reqs_release(c, &q, posted, NULL);
        return rc;
    }
    if (rc != 0) {
        int k = 0;
        while (k < posted && q.r[k].done) k++;
        rc = oobx__ep_wait_error(c, rc, "rank %d: %s (gather): after %.0f ms still waiting for group rank %d (rank %d)",
                             c->rank, what, (oobx__now_coarse_ns() - t0) / 1e6, children[k < posted ? k : 0],
                             member(g, children[k < posted ? k : 0]));
        reqs_release(c, &q, posted, NULL);
        return rc;
    }
    if (vr != 0) {
        int parent = vr - low, end = vr + low < n ? vr + low : n;
        rc = oobx__ep_isend(c, member(g, parent), OOBX_MSG_COLL, q.tag, buf + (size_t)vr * bpr, (size_t)(end - vr) * bpr,
                      &q.s[0]);
        if (rc == 0) {
            q.ns = 1;
            gr.nr = 0;
            rc = oobx__ep_wait_ms(c, gather_done, &gr, c->settings->timeout_ms);
            if (rc != 0)
                rc = oobx__ep_wait_error(c, rc, "rank %d: %s (gather): sending to rank %d", c->rank, what,
                                     member(g, parent));
            else if (q.s[0].tp.status)
                rc = peer_error(c, q.s[0].tp.status, member(g, parent), "%s (gather): sending", what);
        }
    }
    reqs_release(c, &q, 0, NULL);
    return rc;
}

/* The allgather through the transport, by algo (auto, ring, bruck, tree). */
static int algo_allgather(const oobx__ep_view_t *c, const coll_group_t *g, void *buf, size_t bpr, const char *algo)
{
    int small = g->n > 2 && (size_t)g->n * bpr <= c->settings->bruck_max_bytes;
    unsigned op = !strcmp(algo, "bruck")  ? COLL_OP_ALLGATHER_BRUCK
                  : !strcmp(algo, "ring") ? COLL_OP_ALLGATHER_RING
                  : !strcmp(algo, "tree") || (small && c->ep->oversubscribed) ? COLL_OP_ALLGATHER_TREE
                  : small                 ? COLL_OP_ALLGATHER_BRUCK
                                          : COLL_OP_ALLGATHER_RING;
    coll_group_t s = with_op(c, g, op, 0);
    if (op == COLL_OP_ALLGATHER_TREE) {
        int rc = tree_gather(c, &s, buf, bpr, "allgather (tree)");
        return rc ? rc : oobx__coll_bcast(c, &s, 0, buf, (size_t)g->n * bpr);
    }
    if (op == COLL_OP_ALLGATHER_BRUCK) return bruck_allgather(c, &s, buf, bpr);
    return ring_allgather(c, &s, buf, bpr, bpr, NULL, NULL, NULL);
}

/* ---- direct: within one host, each rank reads its peers' slices from their buffers ---- */

enum { SKIP_AG = 0, SKIP_BCAST = 1 }; /* coll_group_t.direct_skip */

/* What every rank tells the others first: its cross-memory identity
 * (cma.h), then the address of its buffer and its bytes per rank (wire
 * order), then what memory lies under the buffer (mem.h: id 0 unless it is
 * oobx_mem_alloc's). */
#define DIRECT_REC (OOBX_CMA_ID_BYTES + 16 + OOBX_MEM_DESC_BYTES)

/* What this endpoint knows of endpoint rank er, from the identity it sent
 * now: a check already made stands while the identity is the same. */
static oobx__cma_peer_t *direct_peer(oobx_ep_t *ep, int er, const unsigned char *id)
{
    oobx__cma_peer_t fresh, *p = &ep->direct.peers[er];
    oobx__cma_decode(&ep->direct.self, id, &fresh);
    if (p->state == OOBX_CMA_UNKNOWN || p->pid != fresh.pid || p->word_addr != fresh.word_addr ||
        p->word != fresh.word)
        *p = fresh;
    return p;
}

/* This endpoint's cross-memory identity and its table of peers, made at
 * its first direct call: 0 when the table could not be made (the rank
 * then offers nothing and reads nothing). */
static int direct_self(oobx_ep_t *ep)
{
    if (!ep->direct.peers) {
        ep->direct.peers = calloc((size_t)ep->nranks, sizeof(*ep->direct.peers));
        if (ep->direct.peers) oobx__cma_self_init(&ep->direct.self, 1);
    }
    return ep->direct.peers != NULL;
}

/* Writes this rank's record into rec: its identity (scope 0: it offers
 * nothing), the buffer's address addr and bytes, and what memory lies under
 * [at, at + span) (at: where the readers' slices lie). */
static void direct_rec_encode(oobx_ep_t *ep, unsigned char *rec, uint64_t addr, uint64_t bytes, const void *at,
                              size_t span)
{
    int offered = direct_self(ep);
    oobx__cma_encode(&ep->direct.self, rec);
    if (!offered) memset(rec, 0, 8);
    oobx__put_u64(rec + OOBX_CMA_ID_BYTES, addr);
    oobx__put_u64(rec + OOBX_CMA_ID_BYTES + 8, bytes);
    oobx__mem_desc_t md;
    oobx__mem_describe(&ep->mem, at, span, &md);
    oobx__mem_desc_encode(&md, rec + OOBX_CMA_ID_BYTES + 16);
}

/* The staged direct allgather: where the buffer is plain memory, a call of
 * OOBX_ALLGATHER_STAGE_MIN ranks or more first copies this rank's slice
 * into a region of its own (mem.h: mapped by the peers, cached), so that
 * the n - 1 readers copy it at memcpy speed instead of through the kernel's
 * copy (process_vm_readv), whose page pinning and page-table lock several
 * readers of one process share. The region is the endpoint's, kept for the
 * next call and grown to a power of two; one call at a time uses it (a
 * second thread's call reads plain memory). The stage, or NULL: no staging
 * (the setting, a buffer mapped already, a slice above DIRECT_STAGE_MAX,
 * the region in use, or a region that could not be made: not tried again). */
#define DIRECT_STAGE_MAX (64u << 20)
#define DIRECT_STAGE_MIN_LEN (64u << 10)

static char *direct_stage(const oobx__ep_view_t *c, const char *buf, size_t bpr, int n, int me)
{
    oobx_ep_t *ep = c->ep;
    int min = c->settings->stage_min;
    if (!min || n < min || bpr > DIRECT_STAGE_MAX || ep->direct.stage_busy || ep->direct.stage_failed) return NULL;
    oobx__mem_desc_t md;
    oobx__mem_describe(&ep->mem, buf, (size_t)n * bpr, &md);
    if (md.id) return NULL; /* oobx_mem_alloc memory: read where it lies */
    if (ep->direct.stage_len < bpr) {
        if (ep->direct.stage) oobx__mem_free(&ep->mem, ep->direct.stage);
        ep->direct.stage = NULL;
        ep->direct.stage_len = 0;
        size_t len = DIRECT_STAGE_MIN_LEN;
        while (len < bpr) len <<= 1;
        void *p = NULL;
        char why[200];
        if (oobx__mem_alloc(&ep->mem, len, &p, why, sizeof(why)) != 0) {
            ep->direct.stage_failed = 1;
            OOBX_DEBUG(c->log, "rank %d: allgather (direct): no staging region (%s): peers read its plain memory",
                       c->rank, why);
            return NULL;
        }
        ep->direct.stage = p;
        ep->direct.stage_len = len;
    }
    ep->direct.stage_busy = 1;
    memcpy(ep->direct.stage, buf + (size_t)me * bpr, bpr);
    return ep->direct.stage;
}

/* Copies len bytes at src of endpoint rank er, whose record is rec, into
 * dst: through a mapping of its oobx_mem_alloc region when the record names
 * one (and mapping it has not failed before), else with process_vm_readv.
 * 0, or -1 with the reason in the peer's why. what and q name the call and
 * the peer's group rank in the debug line of a mapping that failed. */
static int direct_read(const oobx__ep_view_t *c, int er, const unsigned char *rec, void *dst, uint64_t src, size_t len,
                       const char *what, int q)
{
    oobx_ep_t *ep = c->ep;
    if (!direct_self(ep)) return -1;
    oobx__cma_peer_t *p = direct_peer(ep, er, rec);
    if (!oobx__cma_check(p)) return -1;
    oobx__mem_desc_t md;
    oobx__mem_desc_decode(rec + OOBX_CMA_ID_BYTES + 16, &md);
    if (md.id && !p->nomap) {
        if (oobx__mem_read(&ep->mem, p, er, &md, dst, src, len) == 0) return 0; /* one copy at memcpy speed */
        OOBX_DEBUG(c->log, "rank %d: %s: cannot map the region of group rank %d (%s); process_vm_readv instead",
                   c->rank, what, q, p->why);
    }
    return oobx__cma_pull(p, dst, src, len) == 0 ? 0 : -1;
}

/* The direct allgather, or nothing: *done 1 when every slice is in place.
 * 1. every rank allgathers its record (small, through the transport);
 * 2. when every record names the same kernel and pid namespace, each rank
 *    reads its peers' slices straight from their buffers into its own
 *    (process_vm_readv: one copy, no message per chunk);
 * 3. every rank allgathers whether its reads worked. That is the barrier
 *    too: no rank returns (and lets its caller write the buffer) while
 *    another may still read it.
 * Every rank decides from the same records and the same answers, so all
 * take the same path: *done 0 (after step 1 or 3) sends them all through
 * the ring together. */
static int direct_allgather(const oobx__ep_view_t *c, const coll_group_t *g, char *buf, size_t bpr, int *done)
{
    oobx_ep_t *ep = c->ep;
    int n = g->n, me = g->me;
    *done = 0;
    unsigned char *recs = malloc((size_t)n * (DIRECT_REC + 4));
    if (!recs) return oobx__fail(c->log, OOBX_ERR_NOMEM, "rank %d: out of memory for an allgather of %d ranks", c->rank, n);
    unsigned char *st = recs + (size_t)n * DIRECT_REC;
    char *stage = direct_stage(c, buf, bpr, n, me);
    if (stage)
        /* the readers add q * bpr to the address: they land on the stage */
        direct_rec_encode(ep, recs + (size_t)me * DIRECT_REC, (uint64_t)(uintptr_t)stage - (uint64_t)me * bpr, bpr,
                          stage, bpr);
    else
        direct_rec_encode(ep, recs + (size_t)me * DIRECT_REC, (uint64_t)(uintptr_t)buf, bpr, buf, (size_t)n * bpr);
    int rc = algo_allgather(c, g, recs, DIRECT_REC, "auto");
    if (rc != 0) goto out;
    uint64_t scope0, bpr0 = oobx__get_u64(recs + OOBX_CMA_ID_BYTES + 8);
    memcpy(&scope0, recs, 8);
    int same = scope0 != 0;
    for (int q = 0; q < n; q++) {
        const unsigned char *rq = recs + (size_t)q * DIRECT_REC;
        uint64_t scope, b = oobx__get_u64(rq + OOBX_CMA_ID_BYTES + 8);
        memcpy(&scope, rq, 8);
        if (b != bpr0) {
            char text[400];
            snprintf(text, sizeof(text),
                     "allgather (direct): group rank 0 (rank %d) passes %llu bytes per rank, group rank %d (rank %d) "
                     "%llu: the ranks disagree on the call",
                     member(g, 0), (unsigned long long)bpr0, q, member(g, q), (unsigned long long)b);
            /* every rank of the group sees the same records, and says the same */
            oobx__ep_fail(ep, oobx__ep_view_rank(c, member(g, q)), OOBX_ERR_MISMATCH, text);
            rc = oobx__fail(c->log, OOBX_ERR_MISMATCH, "rank %d: %s", c->rank, text);
            goto out;
        }
        if (scope != scope0) same = 0;
    }
    if (!same) {
        /* another host, pid namespace, or a rank that offers nothing: the
         * ring, and for the group's next calls at once (the same records
         * on every member) */
        if (g->direct_skip) g->direct_skip[SKIP_AG] = OOBX_DIRECT_RETRY_AFTER;
        goto out;
    }
    uint32_t status = 0;
    for (int s = 1; s < n && !status; s++) {
        int q = (me + s) % n; /* each rank starts at another peer */
        const unsigned char *rq = recs + (size_t)q * DIRECT_REC;
        int er = oobx__ep_view_rank(c, member(g, q));
        uint64_t src = oobx__get_u64(rq + OOBX_CMA_ID_BYTES) + (uint64_t)q * bpr;
        if (direct_read(c, er, rq, buf + (size_t)q * bpr, src, bpr, "allgather (direct)", q) != 0) {
            status = 1u + (uint32_t)q;
            OOBX_DEBUG(c->log, "rank %d: allgather (direct): cannot read the slice of group rank %d: %s", c->rank, q,
                       ep->direct.peers[er].why);
        }
    }
    oobx__put_u32(st + 4 * (size_t)me, status);
    rc = algo_allgather(c, g, st, 4, "auto");
    if (rc != 0) goto out;
    int bad = -1;
    for (int q = 0; q < n && bad < 0; q++)
        if (oobx__get_u32(st + 4 * (size_t)q)) bad = q;
    if (bad < 0) {
        *done = 1;
        ep->direct.calls++;
    } else {
        ep->direct.fallbacks++;
        /* every member saw the same answers: all skip the same calls */
        if (g->direct_skip) g->direct_skip[SKIP_AG] = OOBX_DIRECT_RETRY_AFTER;
        OOBX_DEBUG(c->log, "rank %d: allgather (direct): group rank %d could not read the slice of group rank %u; the ring instead",
                   c->rank, bad, oobx__get_u32(st + 4 * (size_t)bad) - 1);
    }
out:
    if (stage) {
        ep->direct.staged += *done;
        ep->direct.stage_busy = 0;
    }
    free(recs);
    return rc;
}

int oobx__coll_allgather(const oobx__ep_view_t *c, const coll_group_t *g, void *buf, size_t bpr, const char *algo)
{
    if (g->n == 1 || bpr == 0) return 0;
    /* OOBX_CMA_MIN=0 turns every cross-memory read off */
    int direct = c->settings->cma_min &&
                 (!strcmp(algo, "direct") || (!strcmp(algo, "auto") && c->settings->direct_min &&
                                              bpr >= c->settings->direct_min));
    if (!direct) return algo_allgather(c, g, buf, bpr, algo);
    if (g->direct_skip && g->direct_skip[SKIP_AG] > 0) {
        /* the group's last try fell back: the ring at once, without the
         * two small exchanges of a try that would fall back again */
        g->direct_skip[SKIP_AG]--;
        c->ep->direct.skipped++;
        return algo_allgather(c, g, buf, bpr, "auto");
    }
    coll_group_t s = with_op(c, g, COLL_OP_ALLGATHER_DIRECT, 0);
    int done = 0;
    int rc = direct_allgather(c, &s, buf, bpr, &done);
    return rc || done ? rc : algo_allgather(c, &s, buf, bpr, "auto");
}

int oobx__coll_ring_allgatherv(const oobx__ep_view_t *c, const coll_group_t *g, char *items, size_t cap, size_t *lens,
                               coll_landed_fn landed, void *landed_arg)
{
    if (g->n == 1) return 0;
    coll_group_t s = with_op(c, g, COLL_OP_ALLGATHERV, 0);
    return ring_allgather(c, &s, items, cap, cap, lens, landed, landed_arg);
}

uint64_t oobx__coll_ring_allgatherv_tag(const coll_group_t *g)
{
    coll_group_t s = *g;
    s.op = COLL_OP_ALLGATHERV;
    s.root = 0;
    return coll_tag(&s, 0);
}

/* ---- barrier ---------------------------------------------------------------------------- */

int oobx__coll_barrier(const oobx__ep_view_t *c, const coll_group_t *gin)
{
    int n = gin->n, me = gin->me;
    if (n == 1) return 0;
    int tree = c->ep->oversubscribed && n > 2;
    coll_group_t s = with_op(c, gin, tree ? COLL_OP_BARRIER_TREE : COLL_OP_BARRIER, 0);
    const coll_group_t *g = &s;
    if (tree) {
        /* 2(n-1) messages instead of n*log2(n): what counts when ranks share cores */
        int rc = tree_gather(c, g, NULL, 0, "barrier");
        return rc ? rc : oobx__coll_bcast(c, g, 0, NULL, 0);
    }
    coll_reqs_t q;
    if (reqs_alloc(&q, 1, 1) != 0) return oobx__fail(c->log, OOBX_ERR_NOMEM, "out of memory");
    int rc = 0;
    unsigned step = 0;
    for (int dist = 1; dist < n && rc == 0; dist <<= 1, step++) {
        q.tag = coll_tag(g, step);
        char what[64];
        snprintf(what, sizeof(what), "barrier round %u", step);
        rc = exchange(c, &q, member(g, (me + dist) % n), NULL, 0, member(g, (me - dist + n) % n), NULL, 0, what);
        if (rc != 0) return finish_exchange(c, &q, rc, NULL);
    }
    return finish_exchange(c, &q, 0, NULL);
}

/* ---- broadcast: binomial tree, chunks forwarded as they land ------------------------------ */

typedef struct bcast_run {
    const oobx__ep_view_t *c;
    coll_reqs_t q;
    int children[32];
    int nchildren;
    int next_fwd;
    int err;     /* first failed receive, -1 */
    int send_rc; /* a forward that failed: its text is the thread's last error */
} bcast_run_t;

static int bcast_progress(void *arg)
{
    bcast_run_t *b = arg;
    while (b->next_fwd < b->q.nr && b->q.r[b->next_fwd].done) {
        oobx_rreq_t *r = &b->q.r[b->next_fwd];
        if (r->status) {
            b->err = b->next_fwd;
            return 1;
        }
        for (int k = 0; k < b->nchildren; k++) {
            int rc = oobx__ep_isend(b->c, b->children[k], OOBX_MSG_COLL, b->q.tag, r->buf, r->received, &b->q.s[b->q.ns]);
            if (rc != 0) {
                b->send_rc = rc;
                return 1;
            }
            b->q.ns++;
        }
        b->next_fwd++;
    }
    if (send_status(&b->q) >= 0) return 1;
    return b->next_fwd == b->q.nr && all_sent(&b->q);
}

static int tree_bcast(const oobx__ep_view_t *c, const coll_group_t *gin, int root, void *buf, size_t bytes)
{
    coll_group_t s = with_op(c, gin, COLL_OP_BCAST, root);
    const coll_group_t *g = &s;
    int n = g->n;
    if (n == 1) return 0;
    int vr = (g->me - root + n) % n;
    int parent = -1, mask = 1;
    while (mask < n) {
        if (vr & mask) {
            parent = member(g, (vr - mask + root) % n);
            break;
        }
        mask <<= 1;
    }
    bcast_run_t b;
    memset(&b, 0, sizeof(b));
    b.c = c;
    b.err = -1;
    for (int m = mask >> 1; m > 0; m >>= 1)
        if (vr + m < n) b.children[b.nchildren++] = member(g, (vr + m + root) % n);
    size_t chunk = c->settings->chunk_bytes;
    int nch = bytes ? (int)((bytes + chunk - 1) / chunk) : 1;
    int rc = reqs_alloc(&b.q, parent >= 0 ? nch : 0, nch * (b.nchildren ? b.nchildren : 1));
    if (rc != 0) {
        reqs_release(c, &b.q, 0, NULL);
        return oobx__fail(c->log, rc, "out of memory for a broadcast");
    }
    b.q.tag = coll_tag(g, 0);
    int posted = 0;
    if (parent >= 0) {
        b.q.nr = nch;
        for (int k = 0; k < nch && rc == 0; k++) {
            size_t off = (size_t)k * chunk;
            size_t len = bytes - off < chunk ? bytes - off : chunk;
            rc = oobx__ep_irecv_exact(c, parent, OOBX_MSG_COLL, b.q.tag, (char *)buf + off, len, &b.q.r[k]);
            if (rc == 0) posted++;
        }
    } else {
        for (int k = 0; k < nch && rc == 0; k++) {
            size_t off = (size_t)k * chunk;
            size_t len = bytes - off < chunk ? bytes - off : chunk;
            for (int j = 0; j < b.nchildren && rc == 0; j++) {
                rc = oobx__ep_isend(c, b.children[j], OOBX_MSG_COLL, b.q.tag, (char *)buf + off, len, &b.q.s[b.q.ns]);
                if (rc == 0) b.q.ns++;
            }
        }
    }
    if (rc != 0) {
        reqs_release(c, &b.q, posted, NULL);
        return rc;
    }
    uint64_t t0 = oobx__now_coarse_ns();
    rc = oobx__ep_wait_ms(c, bcast_progress, &b, c->settings->timeout_ms);
    int bad = send_status(&b.q);
    if (rc == 0 && b.err >= 0) {
        rc = recv_error(c, &b.q.r[b.err], parent, "broadcast from group rank %d: receiving", root);
    } else if (rc == 0 && b.send_rc) {
        rc = b.send_rc; /* oobx__ep_isend said why, and logged it */
    } else if (rc == 0 && bad >= 0) {
        rc = peer_error(c, b.q.s[bad].tp.status, b.children[bad % (b.nchildren ? b.nchildren : 1)],
                        "broadcast: sending");
    } else if (rc != 0) {
        rc = oobx__ep_wait_error(c, rc, "broadcast from group rank %d at rank %d: after %.0f ms, %d of %d chunks in from parent rank %d",
                             root, c->rank, (oobx__now_coarse_ns() - t0) / 1e6, b.next_fwd, b.q.nr, parent);
    }
    reqs_release(c, &b.q, posted, NULL);
    return rc;
}

/* ---- direct broadcast: within one host, every rank reads the root's buffer ---- */

/* What a rank says after its read: 0, or 1 + why not, with its bytes. */
enum { BCAST_READ_OK = 0, BCAST_READ_FAILED = 1, BCAST_SIZE_DIFFERS = 2 };
#define DIRECT_BCAST_ST 12 /* u32 status, u64 bytes */

/* The direct broadcast, or nothing: *done 1 when every rank has the root's
 * bytes. 1. the root's record (as the direct allgather's, one rank's)
 * goes down the tree; 2. every other rank reads the root's buffer into its
 * own, through a mapping of oobx_mem_alloc memory or with
 * process_vm_readv; 3. every rank allgathers how that went, with its size,
 * which is also the barrier that keeps the root's buffer still until all
 * have read. All decide from the same answers: a size that differs is
 * OOBX_ERR_MISMATCH naming the rank on every rank; a read that failed (the
 * root on another host, a refused read) sends every rank through the tree
 * together. */
static int direct_bcast(const oobx__ep_view_t *c, const coll_group_t *g, int root, char *buf, size_t bytes, int *done)
{
    oobx_ep_t *ep = c->ep;
    int n = g->n, me = g->me;
    *done = 0;
    unsigned char rec[DIRECT_REC];
    unsigned char *st = malloc((size_t)n * DIRECT_BCAST_ST);
    if (!st) return oobx__fail(c->log, OOBX_ERR_NOMEM, "rank %d: out of memory for a broadcast of %d ranks", c->rank, n);
    if (me == root) direct_rec_encode(ep, rec, (uint64_t)(uintptr_t)buf, bytes, buf, bytes);
    int rc = tree_bcast(c, g, root, rec, sizeof(rec));
    if (rc != 0) goto out;
    /* Reads of the root's process by several ranks at once contend in the
     * kernel (its page-table lock, the pages' counts): measured slower than
     * the tree from 4 ranks (docs/design.md). So the kernel's copy only
     * between two ranks; from mapped memory at any count. Every rank has
     * the same record, so all choose alike, without a word more. */
    uint64_t scope0, rid = oobx__get_u64(rec + OOBX_CMA_ID_BYTES + 16);
    memcpy(&scope0, rec, 8);
    if (!scope0 || (!rid && n > 2)) {
        /* plain memory (or nothing offered): the tree, for this call and
         * the group's next ones at once, so that a job that broadcasts
         * plain memory pays the record once in OOBX_DIRECT_RETRY_AFTER + 1
         * calls (a root of oobx_mem_alloc memory among them takes the tree
         * until the count runs out) */
        if (g->direct_skip) g->direct_skip[SKIP_BCAST] = OOBX_DIRECT_RETRY_AFTER;
        goto out;
    }
    uint32_t status = BCAST_READ_OK;
    if (me != root) {
        uint64_t rbytes = oobx__get_u64(rec + OOBX_CMA_ID_BYTES + 8);
        uint64_t src = oobx__get_u64(rec + OOBX_CMA_ID_BYTES);
        int er = oobx__ep_view_rank(c, member(g, root));
        if (rbytes != bytes) {
            status = BCAST_SIZE_DIFFERS;
        } else if (direct_read(c, er, rec, buf, src, bytes, "broadcast (direct)", root) != 0) {
            status = BCAST_READ_FAILED;
            OOBX_DEBUG(c->log, "rank %d: broadcast (direct): cannot read the buffer of group rank %d: %s", c->rank, root,
                       ep->direct.peers ? ep->direct.peers[er].why : "this rank offers no reads");
        }
    }
    oobx__put_u32(st + (size_t)me * DIRECT_BCAST_ST, status);
    oobx__put_u64(st + (size_t)me * DIRECT_BCAST_ST + 4, bytes);
    rc = algo_allgather(c, g, st, DIRECT_BCAST_ST, "auto");
    if (rc != 0) goto out;
    int failed = 0;
    for (int q = 0; q < n; q++) {
        const unsigned char *sq = st + (size_t)q * DIRECT_BCAST_ST;
        uint32_t why = oobx__get_u32(sq);
        if (why == BCAST_SIZE_DIFFERS) {
            char text[400];
            snprintf(text, sizeof(text),
                     "broadcast (direct): the root, group rank %d (rank %d), passes %llu bytes, group rank %d (rank %d) "
                     "%llu: the ranks disagree on the call",
                     root, member(g, root), (unsigned long long)oobx__get_u64(st + (size_t)root * DIRECT_BCAST_ST + 4),
                     q, member(g, q), (unsigned long long)oobx__get_u64(sq + 4));
            /* every rank of the group sees the same answers, and says the same */
            oobx__ep_fail(ep, oobx__ep_view_rank(c, member(g, q)), OOBX_ERR_MISMATCH, text);
            rc = oobx__fail(c->log, OOBX_ERR_MISMATCH, "rank %d: %s", c->rank, text);
            goto out;
        }
        if (why != BCAST_READ_OK) failed = 1;
    }
    if (!failed) {
        *done = 1;
        ep->direct.bcasts++;
    } else {
        ep->direct.bcast_fallbacks++;
        if (g->direct_skip) g->direct_skip[SKIP_BCAST] = OOBX_DIRECT_RETRY_AFTER;
    }
out:
    free(st);
    return rc;
}

int oobx__coll_bcast(const oobx__ep_view_t *c, const coll_group_t *g, int root, void *buf, size_t bytes)
{
    if (g->n == 1) return 0;
    /* OOBX_CMA_MIN=0 turns every cross-memory read off; the direct
     * broadcast from the direct allgather's size */
    if (!c->settings->cma_min || !c->settings->direct_min || bytes < c->settings->direct_min || g->op)
        return tree_bcast(c, g, root, buf, bytes);
    if (g->direct_skip && g->direct_skip[SKIP_BCAST] > 0) {
        g->direct_skip[SKIP_BCAST]--;
        c->ep->direct.skipped++;
        return tree_bcast(c, g, root, buf, bytes);
    }
    coll_group_t s = with_op(c, g, COLL_OP_BCAST_DIRECT, root);
    int done = 0;
    int rc = direct_bcast(c, &s, root, buf, bytes, &done);
    return rc || done ? rc : tree_bcast(c, &s, root, buf, bytes);
}
