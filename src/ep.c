/* The endpoint: tag matching, the unexpected queue, and the progress engine. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "ep.h"
#include "wire.h"
#include "util.h"

struct oobx_mq {
    oobx_mq_t *next;
    uint64_t ctx, tag;
    int src;
    uint32_t kind;
    oobx_rreq_t *rq_head, *rq_tail; /* posted receives, FIFO */
    oobx_ux_t *ux_head, *ux_tail;   /* unexpected messages, FIFO */
};

static size_t mq_hash(const oobx_ep_t *ep, uint64_t ctx, uint32_t kind, int src, uint64_t tag)
{
    if (kind == OOBX_MSG_COLL) tag &= OOBX_COLL_SLOT_MASK; /* rivals share a bucket */
    uint64_t h = oobx__mix64(ctx ^ ((uint64_t)kind << 56), tag ^ ((uint64_t)(uint32_t)src << 20));
    return (size_t)h & (ep->nbuckets - 1);
}

static oobx_mq_t *mq_find(oobx_ep_t *ep, uint64_t ctx, uint32_t kind, int src, uint64_t tag, int create)
{
    size_t b = mq_hash(ep, ctx, kind, src, tag);
    for (oobx_mq_t *q = ep->buckets[b]; q; q = q->next)
        if (q->ctx == ctx && q->tag == tag && q->src == src && q->kind == kind) return q;
    if (!create) return NULL;
    oobx_mq_t *q = ep->mq_spare;
    if (q) {
        ep->mq_spare = q->next;
        ep->nmq_spare--;
        memset(q, 0, sizeof(*q));
    } else if (!(q = calloc(1, sizeof(*q)))) {
        return NULL;
    }
    q->ctx = ctx;
    q->tag = tag;
    q->src = src;
    q->kind = kind;
    q->next = ep->buckets[b];
    ep->buckets[b] = q;
    ep->nqueues++;
    return q;
}

static void mq_drop_if_empty(oobx_ep_t *ep, oobx_mq_t *q)
{
    if (q->rq_head || q->ux_head) return;
    size_t b = mq_hash(ep, q->ctx, q->kind, q->src, q->tag);
    for (oobx_mq_t **pp = &ep->buckets[b]; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            ep->nqueues--;
            if (ep->nmq_spare < 64) { /* keyed queues come and go with every message */
                q->next = ep->mq_spare;
                ep->mq_spare = q;
                ep->nmq_spare++;
            } else {
                free(q);
            }
            return;
        }
}

static void inflight_add(oobx_ep_t *ep, void *p)
{
    if (ep->ninflight == ep->capinflight) {
        size_t cap = ep->capinflight ? ep->capinflight * 2 : 64;
        void **n = realloc(ep->inflight, cap * sizeof(*n));
        if (!n) return; /* only peer-failure bookkeeping is lost */
        ep->inflight = n;
        ep->capinflight = cap;
    }
    ep->inflight[ep->ninflight++] = p;
}

static void inflight_del(oobx_ep_t *ep, void *p)
{
    for (size_t i = ep->ninflight; i-- > 0;)
        if (ep->inflight[i] == p) {
            ep->inflight[i] = ep->inflight[--ep->ninflight];
            return;
        }
}

/* An unexpected message of queue q leaves it (taken, or dropped). */
static void ux_left(oobx_ep_t *ep, const oobx_mq_t *q)
{
    if (q->kind == OOBX_MSG_COLL && ep->ncoll_ux) ep->ncoll_ux--;
}

/* Frees an unexpected message and gives its bytes back to its sender's allowance. */
static void ux_free(oobx_ep_t *ep, oobx_ux_t *u)
{
    if (u->charged && ep->ux_bytes) ep->ux_bytes[u->hdr.src] -= u->hdr.len;
    free(u->data);
    free(u);
}

/* Takes the oldest posted receive off q (q goes when it is empty). */
static oobx_rreq_t *rq_pop(oobx_ep_t *ep, oobx_mq_t *q)
{
    oobx_rreq_t *r = q->rq_head;
    q->rq_head = r->next;
    if (q->rq_head) q->rq_head->prev = NULL;
    else q->rq_tail = NULL;
    mq_drop_if_empty(ep, q);
    r->next = r->prev = NULL;
    return r;
}

/* A queue of collective messages (ux) or receives (!ux) from src in the
 * slot of tag but with another signature. */
static oobx_mq_t *coll_rival(oobx_ep_t *ep, uint64_t ctx, int src, uint64_t tag, int ux)
{
    size_t b = mq_hash(ep, ctx, OOBX_MSG_COLL, src, tag);
    for (oobx_mq_t *q = ep->buckets[b]; q; q = q->next)
        if (q->kind == OOBX_MSG_COLL && q->ctx == ctx && q->src == src && q->tag != tag &&
            (q->tag & OOBX_COLL_SLOT_MASK) == (tag & OOBX_COLL_SLOT_MASK) && (ux ? q->ux_head != NULL : q->rq_head != NULL))
            return q;
    return NULL;
}

static void rreq_complete(oobx_rreq_t *r, size_t len, int status)
{
    r->received = len;
    r->status = status;
    if (r->exact && (status == 0 || status == OOBX_ERR_TRUNCATED) && len != r->cap) {
        r->msg_len = len;
        r->status = OOBX_ERR_MISMATCH;
    }
    r->done = 1;
}

/* ---- the endpoint's own messages (OOBX_MSG_CTRL, context 0) ----
 *
 * BYE (no payload): the sender released its endpoint; its links going down
 * afterwards are its leaving, not a failure. FAIL: u32 failed rank, i32
 * status, then the text (at most CTRL_TEXT_MAX bytes): a rank failed; the
 * receiver fails the communicators that contain it and passes the notice
 * on. PING: u32 probe id, u64 context: a rank whose wait timed out (or
 * that saw another communicator fail) asks whether this rank still answers.
 * PONG: u32 probe id, u32 n, n u32 endpoint ranks (at most
 * OOBX_PROBE_MAX), u32 length, text: the answer, with the ranks this one
 * waits on, and (length > 0) why it will never join the prober's context.
 * CTXFAIL: u64 context, text: that context failed without a member failing
 * (a member never joined it). They travel on the job's own links, whose
 * hellos carry the communicator's magic. */
enum { CTRL_BYE = 1, CTRL_FAIL = 2, CTRL_PING = 3, CTRL_PONG = 4, CTRL_CTXFAIL = 5 };
#define CTRL_TEXT_MAX 600
#define CTRL_RX_MAX 4096 /* the largest control message taken in; larger ones are dropped */
#define CTRL_FAIL_HDR 8

typedef struct ctrl_rx {
    int is_ux; /* OOBX_REC_CTRL */
    int src;
    uint64_t tag;
    size_t len;
    unsigned char data[];
} ctrl_rx_t;

/* Records the communicator-wide failure of endpoint rank r (the first one
 * only); the notice goes out from oobx__ep_spread. */
static void fail_record(oobx_ep_t *ep, int r, int status, const char *text)
{
    if (!ep->fail_job || ep->closing || atomic_load(&ep->fail_rank) >= 0) return;
    snprintf(ep->fail_text, sizeof(ep->fail_text), "%s", text);
    ep->fail_status = status ? status : OOBX_ERR_REMOTE;
    atomic_store(&ep->fail_rank, r);
    ep->fail_spread = 1;
    OOBX_DEBUG(ep->log, "rank %d: communicator-wide failure: %s", ep->rank, ep->fail_text);
}

void oobx__ep_fail(oobx_ep_t *ep, int r, int status, const char *text)
{
    if (r >= 0 && r < ep->nranks) fail_record(ep, r, status, text);
    oobx__ep_spread(ep);
}

/* Records that endpoint rank peer failed, as this rank saw it (what). */
static void record_lost(oobx_ep_t *ep, int peer, int status, const char *what)
{
    char text[CTRL_TEXT_MAX];
    snprintf(text, sizeof(text), "rank %d failed (seen by rank %d: %s)", peer, ep->rank, what ? what : "its link failed");
    fail_record(ep, peer, status, text);
}

void oobx__ep_peer_lost(oobx_ep_t *ep, int peer, const char *what)
{
    if (peer < 0 || peer >= ep->nranks || ep->departed[peer] || atomic_load(&ep->fail_rank) >= 0) return;
    record_lost(ep, peer, OOBX_ERR_REMOTE, what);
    oobx__ep_spread(ep);
}

void oobx__ep_view_peer_lost(const oobx__ep_view_t *v, int peer, const char *who)
{
    if (oobx__ep_view_failure(v)) return;
    int r = oobx__ep_view_rank(v, peer);
    const char *w = oobx__ep_failed_what(v->ep, r);
    char how[900]; /* cut to CTRL_TEXT_MAX by the record */
    snprintf(how, sizeof(how), "%s: %s", who, w ? w : "its link failed");
    oobx__ep_peer_lost(v->ep, r, how);
}

/* A PONG: id, n <= OOBX_PROBE_MAX, n ranks, a text length that fits, the text. */
static int pong_well_formed(const unsigned char *d, size_t len)
{
    if (len < 12) return 0;
    uint32_t n = oobx__get_u32(d + 4);
    if (n > OOBX_PROBE_MAX || len < 12 + 4 * (size_t)n) return 0;
    uint32_t tl = oobx__get_u32(d + 8 + 4 * n);
    return tl < OOBX_CTX_TEXT && len == 12 + 4 * (size_t)n + tl;
}

/* Copies a peer's text of n bytes into out (n + 1 bytes), printable, terminated. */
static void ctrl_text(char *out, const unsigned char *in, size_t n)
{
    memcpy(out, in, n);
    out[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)out[i] < 0x20) out[i] = ' ';
}

/* The text noted for ctx in a table of OOBX_EP_RECENT notes, or NULL. */
static const char *note_of(const oobx_ctx_note_t *tab, uint64_t ctx)
{
    for (int k = 0; k < OOBX_EP_RECENT; k++)
        if (tab[k].text[0] && tab[k].ctx == ctx) return tab[k].text;
    return NULL;
}

/* Notes ctx with text in tab, over its oldest entry. */
static void note_put(oobx_ctx_note_t *tab, int *next, uint64_t ctx, const char *text)
{
    oobx_ctx_note_t *e = &tab[*next];
    *next = (*next + 1) % OOBX_EP_RECENT;
    e->ctx = ctx;
    snprintf(e->text, sizeof(e->text), "%s", text);
}

/* Context ctx failed without a member failing (the first reason only). */
static void ctx_fail_record(oobx_ep_t *ep, uint64_t ctx, const char *text)
{
    if (!ep->fail_job || ep->closing || note_of(ep->ctx_failed, ctx)) return;
    note_put(ep->ctx_failed, &ep->ctx_failed_next, ctx, text);
    OOBX_DEBUG(ep->log, "rank %d: a communicator failed: %s", ep->rank, text);
}

void oobx__ep_ctx_gone(oobx_ep_t *ep, uint64_t ctx, const char *why)
{
    note_put(ep->gone, &ep->gone_next, ctx, why && *why ? why : "its oobx_comm_split failed");
}

static void ctrl_take(oobx_ep_t *ep, ctrl_rx_t *m)
{
    if (m->src < 0 || m->src >= ep->nranks) return;
    m->tag &= ~OOBX_CTRL_MAY_CONNECT;
    if (m->tag == CTRL_BYE) {
        ep->departed[m->src] = 1;
    } else if (m->tag == CTRL_FAIL && m->len >= CTRL_FAIL_HDR && m->len <= CTRL_FAIL_HDR + CTRL_TEXT_MAX) {
        uint32_t r = oobx__get_u32(m->data);
        if (r >= (uint32_t)ep->nranks) {
            OOBX_WARN(ep->log, "rank %d: rank %d sent a failure notice for rank %u of %d; dropped", ep->rank,
                      m->src, r, ep->nranks);
            return;
        }
        char text[CTRL_TEXT_MAX + 1];
        ctrl_text(text, m->data + CTRL_FAIL_HDR, m->len - CTRL_FAIL_HDR);
        int32_t st = (int32_t)oobx__get_u32(m->data + 4);
        fail_record(ep, (int)r, st == OOBX_ERR_MISMATCH ? OOBX_ERR_MISMATCH : OOBX_ERR_REMOTE, text);
    } else if (m->tag == CTRL_PING && m->len == 12) {
        if (ep->nping_due < OOBX_PROBE_MAX) {
            ep->ping_due[ep->nping_due].to = m->src;
            ep->ping_due[ep->nping_due].id = oobx__get_u32(m->data);
            ep->ping_due[ep->nping_due].ctx = oobx__get_u64(m->data + 4);
            ep->nping_due++;
        }
    } else if (m->tag == CTRL_PONG && pong_well_formed(m->data, m->len)) {
        uint32_t n = oobx__get_u32(m->data + 4);
        int k = ep->pong_next;
        ep->pong_next = (k + 1) % OOBX_EP_RECENT;
        ep->pong[k].id = oobx__get_u32(m->data);
        ep->pong[k].from = m->src;
        ep->pong[k].n = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t w = oobx__get_u32(m->data + 8 + 4 * i);
            if (w < (uint32_t)ep->nranks) ep->pong[k].waits[ep->pong[k].n++] = (int)w;
        }
        ctrl_text(ep->pong[k].gone, m->data + 12 + 4 * n, oobx__get_u32(m->data + 8 + 4 * n));
    } else if (m->tag == CTRL_CTXFAIL && m->len > 8 && m->len <= 8 + OOBX_CTX_TEXT - 1) {
        char text[OOBX_CTX_TEXT];
        ctrl_text(text, m->data + 8, m->len - 8);
        ctx_fail_record(ep, oobx__get_u64(m->data), text);
    } else {
        OOBX_WARN(ep->log, "rank %d: rank %d sent a control message of kind %llu and %zu bytes; dropped", ep->rank,
                  m->src, (unsigned long long)m->tag, m->len);
    }
}

/* Sends a control message of len bytes to endpoint rank t. Not from inside
 * progress (the transports do not take sends from their own callbacks). */
static oobx_tp_req_t *ctrl_send(oobx_ep_t *ep, int t, uint64_t tag, const void *payload, size_t len, const char *what)
{
    typedef struct {
        oobx_sreq_t req;
        unsigned char msg[];
    } ctrl_tx_t;
    ctrl_tx_t *n = malloc(sizeof(*n) + len);
    if (!n) return NULL;
    memset(&n->req, 0, sizeof(n->req));
    n->req.peer = t;
    if (len) memcpy(n->msg, payload, len);
    oobx_msg_hdr_t h = {.ctx = 0, .tag = tag, .len = len, .src = ep->rank, .kind = OOBX_MSG_CTRL};
    int rc = oobx__ep_know(ep, t);
    if (rc == 0) rc = ep->ops->send(ep->tp, t, &h, n->msg, &n->req.tp);
    if (rc != 0) {
        OOBX_DEBUG(ep->log, "rank %d: the %s to rank %d did not go: %s", ep->rank, what, t, oobx_strerror(rc));
        free(n);
        return NULL;
    }
    ep->talked[t] = 1;
    oobx__ep_adopt(ep, n); /* the transport may hold it until the endpoint goes */
    return &n->req.tp;
}

/* Sends the recorded failure to endpoint rank t. */
static void send_notice(oobx_ep_t *ep, int t)
{
    unsigned char msg[CTRL_FAIL_HDR + CTRL_TEXT_MAX];
    size_t tl = strlen(ep->fail_text);
    if (tl > CTRL_TEXT_MAX) tl = CTRL_TEXT_MAX;
    oobx__put_u32(msg, (uint32_t)atomic_load(&ep->fail_rank));
    oobx__put_u32(msg + 4, (uint32_t)ep->fail_status);
    memcpy(msg + CTRL_FAIL_HDR, ep->fail_text, tl);
    /* in init a notice may open a link (UCX: the predecessor's, whose card
     * came first): the ranks that give up stay reachable a moment
     * (INIT_LINGER_MS); later only the links the ranks have carry it */
    oobx_tp_req_t *q =
        ctrl_send(ep, t, CTRL_FAIL | (ep->ready ? 0 : OOBX_CTRL_MAY_CONNECT), msg, CTRL_FAIL_HDR + tl, "failure notice");
    if (q && !q->done && ep->nnotice_out < OOBX_NOTICE_OUT) ep->notice_out[ep->nnotice_out++] = q;
}

/* The endpoint ranks whose messages posted receives wait for (of context
 * ctx, or of every context with any_ctx), at most max of them. */
static int posted_sources(const oobx_ep_t *ep, uint64_t ctx, int any_ctx, int *out, int max)
{
    int n = 0;
    for (size_t b = 0; b < ep->nbuckets && n < max; b++)
        for (const oobx_mq_t *q = ep->buckets[b]; q && n < max; q = q->next) {
            if (!q->rq_head || q->kind == OOBX_MSG_CTRL || (!any_ctx && q->ctx != ctx)) continue;
            int seen = 0;
            for (int i = 0; i < n; i++) seen |= out[i] == q->src;
            if (!seen) out[n++] = q->src;
        }
    return n;
}

/* Answers the probes heard since the last call (with the ranks this one waits on). */
static void answer_pings(oobx_ep_t *ep)
{
    int waits[OOBX_PROBE_MAX];
    int nw = posted_sources(ep, 0, 1, waits, OOBX_PROBE_MAX);
    unsigned char msg[12 + 4 * OOBX_PROBE_MAX + OOBX_CTX_TEXT];
    oobx__put_u32(msg + 4, (uint32_t)nw);
    for (int i = 0; i < nw; i++) oobx__put_u32(msg + 8 + 4 * i, (uint32_t)waits[i]);
    size_t at = 8 + 4 * (size_t)nw;
    for (int i = 0; i < ep->nping_due; i++) {
        oobx__put_u32(msg, ep->ping_due[i].id);
        const char *gone = note_of(ep->gone, ep->ping_due[i].ctx);
        size_t tl = gone ? strlen(gone) : 0;
        if (tl >= OOBX_CTX_TEXT) tl = OOBX_CTX_TEXT - 1;
        oobx__put_u32(msg + at, (uint32_t)tl);
        if (tl) memcpy(msg + at + 4, gone, tl);
        ctrl_send(ep, ep->ping_due[i].to, CTRL_PONG | OOBX_CTRL_MAY_CONNECT, msg, at + 4 + tl, "probe answer");
    }
    ep->nping_due = 0;
}

void oobx__ep_spread(oobx_ep_t *ep)
{
    if (ep->nping_due) answer_pings(ep);
    /* before the cards are in, the roots and the deadline report; after
     * that a death in the rest of init reaches every rank too */
    if (!ep->fail_spread || !(ep->ready || ep->spreads)) return;
    ep->fail_spread = 0;
    int r = atomic_load(&ep->fail_rank);
    /* a rank that disagreed on a call is alive and in it: it is told too */
    if (ep->fail_status == OOBX_ERR_MISMATCH) r = -1;
    int all = ep->ready || ep->spreads > 1; /* else only some addresses are known: the links it has */
    /* to me+1, me+2, me+4, ...: every rank that hears it does the same, so
     * the news reaches all N in about log2(N) steps, along log2(N) paths
     * into each rank (a dead forwarder does not stop it) */
    for (long d = 1; all && d < ep->nranks; d <<= 1) {
        int t = (int)((ep->rank + d) % ep->nranks);
        if (t == r || t == ep->rank || ep->failed[t] || ep->departed[t]) continue;
        send_notice(ep, t);
    }
    /* and on every link this rank has (a transport may refuse new links for
     * it: then the notice travels on the links the ranks have) */
    for (int t = 0; t < ep->nranks; t++) {
        if (!ep->talked[t] || t == r || t == ep->rank || ep->failed[t] || ep->departed[t]) continue;
        long d = ((long)t - ep->rank + ep->nranks) % ep->nranks;
        if (all && (d & (d - 1)) == 0) continue; /* a power of two: sent above */
        send_notice(ep, t);
    }
}

int oobx__ep_ring(oobx_ep_t *ep, int prev, int next)
{
    int rc = ep->ops->ring(ep->tp, prev, next);
    if (rc == 0) {
        if (prev >= 0 && prev < ep->nranks) ep->talked[prev] = 1;
        if (next >= 0 && next < ep->nranks) ep->talked[next] = 1;
    }
    return rc;
}

/* The endpoint's failure, where it concerns the view. */
static const char *view_member_failure(const oobx__ep_view_t *v)
{
    oobx_ep_t *ep = v->ep;
    int r = atomic_load(&ep->fail_rank);
    if (r < 0) return NULL;
    if (!v->ep_rank) return ep->fail_text;
    for (int i = 0; i < v->nranks; i++)
        if (v->ep_rank[i] == r) return ep->fail_text;
    return NULL;
}

const char *oobx__ep_view_failure(const oobx__ep_view_t *v)
{
    if (!v->ep) return NULL;
    const char *f = view_member_failure(v);
    return f ? f : note_of(v->ep->ctx_failed, v->ctx);
}

int oobx__ep_view_status(const oobx__ep_view_t *v)
{
    if (!v->ep) return 0;
    if (view_member_failure(v)) return v->ep->fail_status;
    return note_of(v->ep->ctx_failed, v->ctx) ? OOBX_ERR_REMOTE : 0;
}

/* ---- collective signatures (ep.h) ---- */

#define COLL_SIG_BITS 0x0000000f0000ffffull /* op and root: what must agree within one call */

/* A rank made another call under the number of one this rank makes: the
 * communicator fails with OOBX_ERR_MISMATCH (the notice names both calls). */
static void coll_disagree(oobx_ep_t *ep, int src, uint64_t theirs, uint64_t mine)
{
    char a[120], b[120], text[CTRL_TEXT_MAX];
    oobx__coll_describe(theirs, a, sizeof(a));
    oobx__coll_describe(mine, b, sizeof(b));
    snprintf(text, sizeof(text), "the ranks disagree on a call: rank %d sent for %s, rank %d is in %s", src, a,
             ep->rank, b);
    OOBX_DEBUG(ep->log, "rank %d: %s", ep->rank, text);
    fail_record(ep, src, OOBX_ERR_MISMATCH, text);
}

static int same_call_other_sig(uint64_t a, uint64_t b)
{
    return (a & OOBX_COLL_CALL_MASK) == (b & OOBX_COLL_CALL_MASK) && ((a ^ b) & COLL_SIG_BITS);
}

/* The slot of a call (context, group, number) in the table of past calls. */
static unsigned past_slot(uint64_t ctx, uint64_t tag)
{
    return (unsigned)(oobx__mix64(ctx, tag & OOBX_COLL_CALL_MASK) % OOBX_EP_PAST);
}

/* A collective message came: is it for this rank's current call in its
 * group, or for one it made before, signed otherwise? */
static void coll_check_arrival(oobx_ep_t *ep, uint64_t ctx, int src, uint64_t tag)
{
    for (int k = 0; k < OOBX_EP_RECENT; k++)
        if (ep->calls[k].tag && ep->calls[k].ctx == ctx && same_call_other_sig(ep->calls[k].tag, tag)) {
            coll_disagree(ep, src, tag, ep->calls[k].tag);
            return;
        }
    unsigned s = past_slot(ctx, tag);
    if (ep->past[s].tag && ep->past[s].ctx == ctx && same_call_other_sig(ep->past[s].tag, tag))
        coll_disagree(ep, src, tag, ep->past[s].tag);
}

void oobx__ep_coll_begin(const oobx__ep_view_t *v, uint64_t tag)
{
    oobx_ep_t *ep = v->ep;
    int k = -1;
    for (int i = 0; i < OOBX_EP_RECENT && k < 0; i++)
        if (ep->calls[i].ctx == v->ctx && ep->calls[i].tag &&
            (ep->calls[i].tag & OOBX_COLL_GROUP_MASK) == (tag & OOBX_COLL_GROUP_MASK))
            k = i;
    if (k < 0) {
        k = ep->calls_next;
        ep->calls_next = (k + 1) % OOBX_EP_RECENT;
    }
    ep->calls[k].ctx = v->ctx;
    ep->calls[k].tag = tag;
    unsigned s = past_slot(v->ctx, tag);
    ep->past[s].ctx = v->ctx;
    ep->past[s].tag = tag;
    if (!ep->ncoll_ux) return;
    /* messages of this call number that came early */
    for (size_t b = 0; b < ep->nbuckets; b++)
        for (const oobx_mq_t *q = ep->buckets[b]; q; q = q->next)
            if (q->kind == OOBX_MSG_COLL && q->ctx == v->ctx && q->ux_head && same_call_other_sig(q->tag, tag)) {
                coll_disagree(ep, q->src, q->tag, tag);
                return;
            }
}

/* ---- the sink: called by the transport with the lock held ---- */

static void sink_peer_failed(void *core, int peer, int status, const char *what);

/* A sender's message the endpoint cannot take (too much unexpected data, no
 * memory): the sender is failed with why, the payload dropped. */
static void *sink_refuse(oobx_ep_t *ep, const oobx_msg_hdr_t *hdr, int status, const char *why)
{
    if (!ep->failed[hdr->src]) OOBX_DEBUG(ep->log, "rank %d: %s", ep->rank, why);
    sink_peer_failed(ep, hdr->src, status, why);
    return NULL;
}

static void *sink_msg_begin(void *core, const oobx_msg_hdr_t *hdr, void **cookie)
{
    oobx_ep_t *ep = core;
    char why[400];
    *cookie = NULL;
    if (hdr->src < 0 || hdr->src >= ep->nranks) return NULL; /* transports check; never trusted blindly */
    if (ep->talked) {
        ep->talked[hdr->src] = 1;
        if (hdr->kind != OOBX_MSG_CTRL) ep->used[hdr->src] = 1;
    }
    if (hdr->kind == OOBX_MSG_CTRL) {
        /* control messages are small; anything larger is dropped unread */
        if (hdr->len > CTRL_RX_MAX) {
            OOBX_DEBUG(ep->log, "rank %d: dropped a %" PRIu64 "-byte control message from rank %d", ep->rank,
                       hdr->len, hdr->src);
            return NULL;
        }
        ctrl_rx_t *m = malloc(sizeof(*m) + (size_t)hdr->len);
        if (!m) return NULL;
        m->is_ux = OOBX_REC_CTRL;
        m->src = hdr->src;
        m->tag = hdr->tag;
        m->len = (size_t)hdr->len;
        *cookie = m;
        inflight_add(ep, m);
        return m->len ? m->data : NULL;
    }
    oobx_mq_t *q = mq_find(ep, hdr->ctx, hdr->kind, hdr->src, hdr->tag, 0);
    if (q && q->rq_head) {
        oobx_rreq_t *r = rq_pop(ep, q);
        r->msg_len = hdr->len;
        *cookie = r;
        inflight_add(ep, r);
        if (hdr->len <= r->cap) return hdr->len ? r->buf : NULL;
        /* too large: the transport drops the payload as it comes, and the receive fails */
        r->truncated = 1;
        return NULL;
    }
    if (hdr->kind == OOBX_MSG_COLL) {
        ep->ncoll_ux++;
        coll_check_arrival(ep, hdr->ctx, hdr->src, hdr->tag);
        oobx_mq_t *rq = coll_rival(ep, hdr->ctx, hdr->src, hdr->tag, 0);
        if (rq) {
            /* the sender made another call than the one this rank waits in */
            oobx_rreq_t *r = rq_pop(ep, rq);
            r->rival_tag = hdr->tag;
            r->msg_len = hdr->len;
            rreq_complete(r, 0, OOBX_ERR_MISMATCH);
        }
    }
    if (ep->ux_bytes[hdr->src] + hdr->len > ep->ux_max || hdr->len > ep->ux_max) {
        if (hdr->kind == OOBX_MSG_COLL && ep->ncoll_ux) ep->ncoll_ux--;
        snprintf(why, sizeof(why),
                 "rank %d sent a %" PRIu64 "-byte message that no receive was posted for, with %" PRIu64
                 " bytes of its messages waiting already: more than OOBX_UNEXPECTED_MAX=%" PRIu64
                 " from one rank (post the receive first, or raise OOBX_UNEXPECTED_MAX)",
                 hdr->src, hdr->len, ep->ux_bytes[hdr->src], ep->ux_max);
        return sink_refuse(ep, hdr, OOBX_ERR_NOMEM, why);
    }
    oobx_ux_t *u = calloc(1, sizeof(*u));
    if (u && hdr->len && !(u->data = malloc(hdr->len))) {
        free(u);
        u = NULL;
    }
    q = u ? mq_find(ep, hdr->ctx, hdr->kind, hdr->src, hdr->tag, 1) : NULL;
    if (!q) {
        if (u) ux_free(ep, u);
        if (hdr->kind == OOBX_MSG_COLL && ep->ncoll_ux) ep->ncoll_ux--;
        snprintf(why, sizeof(why), "out of memory for a %" PRIu64 "-byte message from rank %d", hdr->len, hdr->src);
        return sink_refuse(ep, hdr, OOBX_ERR_NOMEM, why);
    }
    u->is_ux = OOBX_REC_UX;
    u->hdr = *hdr;
    u->charged = 1;
    ep->ux_bytes[hdr->src] += hdr->len;
    if (q->ux_tail) q->ux_tail->next = u;
    else q->ux_head = u;
    u->prev = q->ux_tail;
    q->ux_tail = u;
    *cookie = u;
    inflight_add(ep, u);
    return u->data;
}

static void sink_msg_end(void *core, void *cookie)
{
    oobx_ep_t *ep = core;
    if (!cookie) return;
    inflight_del(ep, cookie);
    if (((oobx_rreq_t *)cookie)->is_ux == OOBX_REC_CTRL) {
        ctrl_take(ep, cookie);
        free(cookie);
        return;
    }
    if (((oobx_rreq_t *)cookie)->is_ux == OOBX_REC_RECV) {
        oobx_rreq_t *r = cookie;
        if (r->truncated) {
            r->truncated = 0;
            rreq_complete(r, r->msg_len, OOBX_ERR_TRUNCATED);
        } else {
            rreq_complete(r, r->msg_len, 0);
        }
        return;
    }
    oobx_ux_t *u = cookie;
    u->complete = 1;
    if (u->waiter) {
        oobx_rreq_t *r = u->waiter;
        if (u->hdr.len <= r->cap) {
            if (u->hdr.len) memcpy(r->buf, u->data, u->hdr.len);
            rreq_complete(r, u->hdr.len, 0);
        } else {
            r->msg_len = u->hdr.len;
            rreq_complete(r, u->hdr.len, OOBX_ERR_TRUNCATED);
        }
        ux_free(ep, u);
    } else if (u->detached) {
        ux_free(ep, u);
    }
}

static void sink_peer_failed(void *core, int peer, int status, const char *what)
{
    oobx_ep_t *ep = core;
    if (peer < 0 || peer >= ep->nranks) return;
    if (!ep->failed[peer]) {
        ep->failed[peer] = status ? status : OOBX_ERR_REMOTE;
        if (ep->departed[peer]) {
            char text[700];
            snprintf(text, sizeof(text), "rank %d left: it destroyed its communicator (%s)", peer,
                     what ? what : "link closed");
            ep->failed_what[peer] = strdup(text);
        } else {
            ep->failed_what[peer] = strdup(what ? what : "failed");
            /* a link no call ever used (a ring link set up in advance, to a
             * rank that finished and left before its goodbye came) fails the
             * calls that need it, not the communicator */
            if (ep->used[peer]) record_lost(ep, peer, status, what);
        }
    }
    /* posted receives from it */
    for (size_t b = 0; b < ep->nbuckets; b++) {
        for (oobx_mq_t *q = ep->buckets[b], *nq; q; q = nq) {
            nq = q->next;
            if (q->src != peer) continue;
            for (oobx_rreq_t *r = q->rq_head; r; r = r->next) rreq_complete(r, 0, ep->failed[peer]);
            q->rq_head = q->rq_tail = NULL;
            /* an unexpected message cut short can never complete */
            for (oobx_ux_t *u = q->ux_head, *nu; u; u = nu) {
                nu = u->next;
                if (u->complete) continue;
                if (u->prev) u->prev->next = u->next;
                else q->ux_head = u->next;
                if (u->next) u->next->prev = u->prev;
                else q->ux_tail = u->prev;
                ux_left(ep, q);
                inflight_del(ep, u);
                ux_free(ep, u);
            }
            mq_drop_if_empty(ep, q);
        }
    }
    /* receives being written into, and messages that lost their queue */
    for (size_t i = 0; i < ep->ninflight;) {
        void *p = ep->inflight[i];
        if (((oobx_rreq_t *)p)->is_ux == OOBX_REC_CTRL) {
            /* a control message cut short: msg_end never comes */
            if (((ctrl_rx_t *)p)->src == peer) {
                free(p);
                ep->inflight[i] = ep->inflight[--ep->ninflight];
                continue;
            }
        } else if (((oobx_rreq_t *)p)->is_ux == OOBX_REC_RECV) {
            oobx_rreq_t *r = p;
            if (r->src == peer) {
                r->truncated = 0;
                rreq_complete(r, 0, ep->failed[peer]);
                ep->inflight[i] = ep->inflight[--ep->ninflight];
                continue;
            }
        } else {
            oobx_ux_t *u = p;
            if (u->hdr.src == peer && u->detached) {
                if (u->waiter) rreq_complete(u->waiter, 0, ep->failed[peer]);
                ux_free(ep, u);
                ep->inflight[i] = ep->inflight[--ep->ninflight];
                continue;
            }
        }
        i++;
    }
    OOBX_DEBUG(ep->log, "peer %d failed: %s", peer, what);
}

static int sink_need_peer(void *core, int peer)
{
    oobx_ep_t *ep = core;
    if (!ep->addr_fn) return OOBX_ERR_INVALID;
    return oobx__ep_know(ep, peer);
}

static void sink_peer_left(void *core, int peer)
{
    oobx_ep_t *ep = core;
    if (peer >= 0 && peer < ep->nranks) ep->departed[peer] = 1;
}

oobx_tp_sink_t oobx__ep_sink(oobx_ep_t *ep)
{
    oobx_tp_sink_t s = {.core = ep, .msg_begin = sink_msg_begin, .msg_end = sink_msg_end,
                        .peer_failed = sink_peer_failed, .need_peer = sink_need_peer, .peer_left = sink_peer_left};
    return s;
}

/* ---- addresses on first use ---- */

int oobx__ep_set_addr_source(oobx_ep_t *ep, const void *(*fn)(void *arg, int r, size_t *len), void *arg,
                             void (*release)(void *arg))
{
    unsigned char *known = calloc(((size_t)ep->nranks + 7) / 8, 1);
    if (!known) return oobx__fail(ep->log, OOBX_ERR_NOMEM, "out of memory");
    if (ep->addr_release) ep->addr_release(ep->addr_arg);
    free(ep->addr_known);
    ep->addr_fn = fn;
    ep->addr_arg = arg;
    ep->addr_release = release;
    ep->addr_known = known;
    return 0;
}

int oobx__ep_know(oobx_ep_t *ep, int r)
{
    if (!ep->addr_fn || r < 0 || r >= ep->nranks || r == ep->rank) return 0;
    unsigned char bit = (unsigned char)(1u << (r & 7));
    if (ep->addr_known[r >> 3] & bit) return 0;
    size_t len = 0;
    const void *blob = ep->addr_fn(ep->addr_arg, r, &len);
    if (!blob) return oobx__fail(ep->log, OOBX_ERR_INTERNAL, "no address of rank %d in this host's card table", r);
    int rc = ep->ops->set_peer(ep->tp, r, blob, len);
    if (rc != 0)
        return oobx__fail(ep->log, rc, "the address of rank %d does not parse (%zu bytes): %s", r, len,
                          oobx_last_error());
    ep->addr_known[r >> 3] |= bit;
    return 0;
}

/* ---- life cycle ---- */

int oobx__ep_create(const oobx_settings_t *s, const oobx_log_t *log, oobx_ep_t **out)
{
    oobx_ep_t *ep = calloc(1, sizeof(*ep));
    if (!ep) return OOBX_ERR_NOMEM;
    pthread_mutex_init(&ep->lock, NULL);
    oobx__mem_init(&ep->mem);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&ep->cond, &ca);
    pthread_condattr_destroy(&ca);
    ep->refs = 1;
    ep->log = log;
    ep->spin_us = s->spin_us;
    ep->ux_max = s->unexpected_max;
    ep->fail_job = strcmp(s->failure, "local") != 0;
    atomic_init(&ep->fail_rank, -1);
    ep->nbuckets = 1024;
    ep->buckets = calloc(ep->nbuckets, sizeof(*ep->buckets));
    /* One timerfd is both the wake-up (armed to expire at once) and the
     * deadline timer (armed at the earliest deadline), so a sleeper needs no
     * timeout of its own and the kernel arms no timer per sleep. */
    ep->wake_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (!ep->buckets || ep->wake_fd < 0) {
        int rc = ep->wake_fd < 0 ? oobx__fail(log, OOBX_ERR_SYSTEM, "timerfd_create: %s", strerror(errno)) : OOBX_ERR_NOMEM;
        oobx__ep_release(ep);
        return rc;
    }
    *out = ep;
    return 0;
}

/* Call with nranks known, before the transport starts. */
int oobx__ep_set_size(oobx_ep_t *ep, int rank, int nranks);
int oobx__ep_set_size(oobx_ep_t *ep, int rank, int nranks)
{
    ep->rank = rank;
    ep->nranks = nranks;
    ep->failed = calloc((size_t)nranks, sizeof(*ep->failed));
    ep->failed_what = calloc((size_t)nranks, sizeof(*ep->failed_what));
    ep->departed = calloc((size_t)nranks, 1);
    ep->talked = calloc((size_t)nranks, 1);
    ep->used = calloc((size_t)nranks, 1);
    ep->ux_bytes = calloc((size_t)nranks, sizeof(*ep->ux_bytes));
    return ep->failed && ep->failed_what && ep->departed && ep->talked && ep->used && ep->ux_bytes ? 0 : OOBX_ERR_NOMEM;
}

/* Tells every peer this endpoint talked with that it is leaving, so that its
 * links going down are not taken for a failure. The messages are queued;
 * the transport's destroy, next, sends what is queued within its bound. */
static void say_goodbye(oobx_ep_t *ep)
{
    if (!ep->talked) return;
    int failure = atomic_load(&ep->fail_rank) >= 0;
    for (int r = 0; r < ep->nranks; r++) {
        if (!ep->talked[r] || ep->failed[r] || ep->departed[r] || r == ep->rank) continue;
        /* a peer that sees this link close hears the reason first, in order on the same link */
        if (failure) send_notice(ep, r);
        ctrl_send(ep, r, CTRL_BYE, NULL, 0, "goodbye");
    }
    /* no progress here: the transport's destroy gives queued sends their
     * bound (progressing now would also take in ring set-ups of peers that
     * are leaving too, whose shared memory UCX 1.13 crashes on) */
}

void oobx__ep_release(oobx_ep_t *ep)
{
    if (!ep) return;
    pthread_mutex_lock(&ep->lock);
    int last = --ep->refs == 0;
    pthread_mutex_unlock(&ep->lock);
    if (!last) return;
    /* after a failed init nobody has a communicator to be told about (and
     * UCX 1.13 may abort on a send queued to a peer whose connect fails) */
    if (ep->tp && ep->ready) oobx__ep_spread(ep); /* a failure heard last, not passed on yet */
    ep->closing = 1;
    if (ep->tp && ep->ready) say_goodbye(ep);
    if (ep->tp) ep->ops->destroy(ep->tp);
    if (ep->addr_release) ep->addr_release(ep->addr_arg);
    free(ep->addr_known);
    /* Messages being written when the transport went away: first, while
     * every record is still allocated. A ux in the array is either detached
     * (out of every queue: freed here) or still in its queue (freed with the
     * queue below). */
    for (size_t i = 0; i < ep->ninflight; i++) {
        oobx_ux_t *u = ep->inflight[i];
        if (u->is_ux == OOBX_REC_CTRL) {
            free(u); /* a control message cut short: only the endpoint has it */
        } else if (u->is_ux == OOBX_REC_UX && u->detached) {
            ux_free(ep, u);
        }
    }
    for (size_t b = 0; ep->buckets && b < ep->nbuckets; b++) {
        for (oobx_mq_t *q = ep->buckets[b], *nq; q; q = nq) {
            nq = q->next;
            for (oobx_ux_t *u = q->ux_head, *nu; u; u = nu) {
                nu = u->next;
                ux_free(ep, u);
            }
            free(q);
        }
    }
    while (ep->mq_spare) {
        oobx_mq_t *q = ep->mq_spare;
        ep->mq_spare = q->next;
        free(q);
    }
    free(ep->inflight);
    free(ep->buckets);
    for (size_t i = 0; i < ep->ngraveyard; i++) free(ep->graveyard[i]);
    free(ep->graveyard);
    for (int r = 0; ep->failed_what && r < ep->nranks; r++) free(ep->failed_what[r]);
    free(ep->failed_what);
    free(ep->failed);
    free(ep->departed);
    free(ep->talked);
    free(ep->used);
    free(ep->ux_bytes);
    free(ep->direct.peers);
    oobx__mem_fini(&ep->mem);
    free(ep->spare_rreq);
    free(ep->spare_sreq);
    if (ep->wake_fd >= 0) close(ep->wake_fd);
    pthread_cond_destroy(&ep->cond);
    pthread_mutex_destroy(&ep->lock);
    free(ep);
}

void oobx__ep_purge_ctx(oobx_ep_t *ep, uint64_t ctx)
{
    for (size_t b = 0; b < ep->nbuckets; b++) {
        for (oobx_mq_t *q = ep->buckets[b], *nq; q; q = nq) {
            nq = q->next;
            if (q->ctx != ctx) continue;
            for (oobx_ux_t *u = q->ux_head, *nu; u; u = nu) {
                nu = u->next;
                ux_left(ep, q);
                if (!u->complete) {
                    u->detached = 1; /* still arriving: freed by msg_end */
                    continue;
                }
                ux_free(ep, u);
            }
            q->ux_head = q->ux_tail = NULL;
            q->rq_head = q->rq_tail = NULL;
            mq_drop_if_empty(ep, q);
        }
    }
}

const char *oobx__ep_failed_what(oobx_ep_t *ep, int peer)
{
    /* a neighbour that failed or left because another rank failed only
     * passed the news on: the first failure is the reason */
    if (atomic_load(&ep->fail_rank) >= 0) return ep->fail_text;
    return peer >= 0 && peer < ep->nranks ? ep->failed_what[peer] : NULL;
}

/* ---- posting ---- */

void oobx__ep_wake(oobx_ep_t *ep)
{
    struct itimerspec now = {.it_value = {.tv_sec = 0, .tv_nsec = 1}};
    timerfd_settime(ep->wake_fd, 0, &now, NULL);
    ep->timer_at = 0; /* the deadline timer was replaced */
}

/* Makes sure the timerfd expires no later than deadline_ns. Arming resets a
 * pending wake-up, which is safe because wakers hold the lock too and the
 * caller looks at its conditions after this, before it sleeps. */
static void ep_arm(oobx_ep_t *ep, uint64_t deadline_ns)
{
    uint64_t now = oobx__now_ns();
    if (ep->timer_at != 0 && ep->timer_at > now && ep->timer_at <= deadline_ns) return;
    struct itimerspec at = {.it_value = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
                                         .tv_nsec = (long)(deadline_ns % 1000000000ull)}};
    timerfd_settime(ep->wake_fd, TFD_TIMER_ABSTIME, &at, NULL);
    ep->timer_at = deadline_ns;
}

static void wake_poller(oobx_ep_t *ep)
{
    if (ep->poller) oobx__ep_wake(ep);
}

int oobx__ep_isend(const oobx__ep_view_t *v, int peer, uint32_t kind, uint64_t tag, const void *buf, size_t len,
             oobx_sreq_t *req)
{
    oobx_ep_t *ep = v->ep;
    int dst = oobx__ep_view_rank(v, peer);
    oobx_msg_hdr_t h = {.ctx = v->ctx, .tag = tag, .len = len, .src = ep->rank, .kind = kind};
    req->peer = peer;
    req->buf = buf;
    req->len = len;
    req->tp.done = 0;
    req->tp.status = 0;
    if (dst == ep->rank) {
        void *cookie = NULL;
        void *d = sink_msg_begin(ep, &h, &cookie);
        if (!cookie) return oobx__fail(v->log, OOBX_ERR_NOMEM, "out of memory for a message of %zu bytes to self", len);
        if (len && d) memcpy(d, buf, len);
        sink_msg_end(ep, cookie);
        req->tp.done = 1;
        return 0;
    }
    if (ep->failed[dst]) {
        char who[160];
        oobx__ep_peer_name(v, peer, who, sizeof(who));
        /* a peer gone because the communicator failed: the text is that
         * failure's (oobx__ep_failed_what), and so is the code */
        int st = oobx__ep_view_status(v);
        return oobx__fail(v->log, st ? st : ep->failed[dst], "cannot send to %s: %s", who, oobx__ep_failed_what(ep, dst));
    }
    int rc = oobx__ep_know(ep, dst);
    if (rc == 0) rc = ep->ops->send(ep->tp, dst, &h, buf, &req->tp);
    if (rc == OOBX_ERR_REMOTE && !ep->failed[dst]) {
        /* the transport found the peer gone just now (UCX: its shared
         * memory went with it): its report comes with progress, and a rank
         * that gives up on this error must know it, to tell the others
         * (whose links may not tell them of the peer's exit) */
        char err[1024];
        snprintf(err, sizeof(err), "%s", oobx_last_error());
        ep->ops->progress(ep->tp);
        oobx__set_last_error("%s", err);
    }
    if (rc != 0) return rc;
    ep->talked[dst] = 1;
    ep->used[dst] = 1;
    wake_poller(ep);
    return 0;
}

static int irecv(const oobx__ep_view_t *v, int peer, uint32_t kind, uint64_t tag, void *buf, size_t cap,
                 oobx_rreq_t *r, int exact);

int oobx__ep_irecv(const oobx__ep_view_t *v, int peer, uint32_t kind, uint64_t tag, void *buf, size_t cap, oobx_rreq_t *r)
{
    return irecv(v, peer, kind, tag, buf, cap, r, 0);
}

int oobx__ep_irecv_exact(const oobx__ep_view_t *v, int peer, uint32_t kind, uint64_t tag, void *buf, size_t cap,
                         oobx_rreq_t *r)
{
    return irecv(v, peer, kind, tag, buf, cap, r, 1);
}

static int irecv(const oobx__ep_view_t *v, int peer, uint32_t kind, uint64_t tag, void *buf, size_t cap,
                 oobx_rreq_t *r, int exact)
{
    oobx_ep_t *ep = v->ep;
    int src = oobx__ep_view_rank(v, peer);
    memset(r, 0, sizeof(*r));
    r->exact = exact;
    r->src = src;
    r->buf = buf;
    r->cap = cap;
    r->tag = tag;
    oobx_mq_t *q = mq_find(ep, v->ctx, kind, src, tag, 1);
    if (!q) return oobx__fail(v->log, OOBX_ERR_NOMEM, "out of memory posting a receive");
    oobx_mq_t *rival = !q->ux_head && kind == OOBX_MSG_COLL && ep->ncoll_ux ? coll_rival(ep, v->ctx, src, tag, 1) : NULL;
    if (rival) {
        /* the sender's next message is of another call: it makes no more of this one */
        mq_drop_if_empty(ep, q);
        r->rival_tag = rival->tag;
        r->msg_len = rival->ux_head->hdr.len;
        rreq_complete(r, 0, OOBX_ERR_MISMATCH);
        return 0;
    }
    if (q->ux_head) {
        oobx_ux_t *u = q->ux_head;
        ux_left(ep, q);
        q->ux_head = u->next;
        if (q->ux_head) q->ux_head->prev = NULL;
        else q->ux_tail = NULL;
        mq_drop_if_empty(ep, q);
        if (!u->complete) {
            u->waiter = r; /* finished by msg_end */
            u->detached = 1;
            u->next = u->prev = NULL;
            return 0;
        }
        if (u->hdr.len <= cap) {
            if (u->hdr.len) memcpy(buf, u->data, u->hdr.len);
            rreq_complete(r, u->hdr.len, 0);
        } else {
            r->msg_len = u->hdr.len;
            rreq_complete(r, u->hdr.len, OOBX_ERR_TRUNCATED);
        }
        ux_free(ep, u);
        return 0;
    }
    if (ep->failed[src]) {
        mq_drop_if_empty(ep, q);
        rreq_complete(r, 0, ep->failed[src]);
        return 0;
    }
    if (q->rq_tail) q->rq_tail->next = r;
    else q->rq_head = r;
    r->prev = q->rq_tail;
    q->rq_tail = r;
    return 0;
}

static void oobx__ep_release_recv(oobx_ep_t *ep, const oobx_rreq_t *r)
{
    if (r->buf && r->cap) ep->ops->release(ep->tp, r->buf, r->cap);
}

int oobx__ep_cancel_recv(const oobx__ep_view_t *v, uint32_t kind, uint64_t tag, oobx_rreq_t *r)
{
    oobx_ep_t *ep = v->ep;
    if (r->done) return 0;
    oobx_mq_t *q = mq_find(ep, v->ctx, kind, r->src, tag, 0);
    if (q) {
        for (oobx_rreq_t *x = q->rq_head; x; x = x->next) {
            if (x != r) continue;
            if (x->prev) x->prev->next = x->next;
            else q->rq_head = x->next;
            if (x->next) x->next->prev = x->prev;
            else q->rq_tail = x->prev;
            mq_drop_if_empty(ep, q);
            r->done = 1;
            r->status = OOBX_ERR_ABORTED;
            return 0;
        }
    }
    /* being written by the transport, or waiting on an unexpected message */
    for (size_t i = 0; i < ep->ninflight; i++) {
        void *p = ep->inflight[i];
        if (p == r) {
            /* the transport was writing into it: r must outlive the message,
             * whose rest goes nowhere (the buffer is the caller's again) */
            r->done = 1;
            r->status = OOBX_ERR_ABORTED;
            oobx__ep_release_recv(ep, r);
            return 1;
        }
        oobx_ux_t *u = p;
        if (u->is_ux == OOBX_REC_UX && u->waiter == r) {
            u->waiter = NULL;
            /* nobody wants it now: it is freed when it completes */
            u->next = u->prev = NULL;
            r->done = 1;
            r->status = OOBX_ERR_ABORTED;
            return 0;
        }
    }
    return 0;
}

void oobx__ep_release_send(oobx_ep_t *ep, const oobx_sreq_t *s)
{
    if (!s->tp.done && s->len) ep->ops->release(ep->tp, s->buf, s->len);
}

void oobx__ep_adopt(oobx_ep_t *ep, void *p)
{
    if (!p) return;
    void **n = realloc(ep->graveyard, (ep->ngraveyard + 1) * sizeof(*n));
    if (!n) return; /* leaking is the safe side here */
    ep->graveyard = n;
    ep->graveyard[ep->ngraveyard++] = p;
}

/* ---- names and errors ---- */

const char *oobx__coll_op_name(unsigned op)
{
    switch (op) {
    case COLL_OP_ALLGATHER_RING: return "allgather (ring)";
    case COLL_OP_ALLGATHER_BRUCK: return "allgather (Bruck)";
    case COLL_OP_ALLGATHER_TREE: return "allgather (tree)";
    case COLL_OP_BARRIER: return "barrier";
    case COLL_OP_BARRIER_TREE: return "barrier (tree)";
    case COLL_OP_BCAST: return "broadcast";
    case COLL_OP_ALLGATHERV: return "allgather of the cards";
    case COLL_OP_NODE_ALLGATHER: return "allgather (hosts' leaders)";
    case COLL_OP_ALLGATHER_DIRECT: return "allgather (direct)";
    case COLL_OP_NODE_BARRIER: return "barrier (hosts' leaders)";
    default: return "an unknown call";
    }
}

void oobx__coll_describe(uint64_t tag, char *buf, size_t len)
{
    unsigned op = OOBX_COLL_TAG_OP(tag);
    const char *of = OOBX_COLL_TAG_GID(tag) ? "of its group" : "on the communicator"; /* group id 0: the whole view */
    if (op == COLL_OP_BCAST)
        snprintf(buf, len, "broadcast from group rank %u, call %u %s", OOBX_COLL_TAG_ROOT(tag),
                 OOBX_COLL_TAG_SEQ(tag), of);
    else
        snprintf(buf, len, "%s, call %u %s", oobx__coll_op_name(op), OOBX_COLL_TAG_SEQ(tag), of);
}


void oobx__ep_peer_name(const oobx__ep_view_t *v, int r, char *buf, size_t len)
{
    if (r < 0 || r >= v->nranks) {
        snprintf(buf, len, "rank %d", r);
        return;
    }
    char tmp[160];
    (void)oobx__ep_know(v->ep, oobx__ep_view_rank(v, r)); /* for its address; without it, the name alone */
    v->ep->ops->peer_name(v->ep->tp, oobx__ep_view_rank(v, r), tmp, sizeof(tmp));
    if (v->ep_rank) snprintf(buf, len, "rank %d (%s%s)", r, tmp, v->rank_note ? v->rank_note : "");
    else snprintf(buf, len, "%s", tmp);
}

int oobx__ep_wait_error(const oobx__ep_view_t *v, int rc, const char *fmt, ...)
{
    char what[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (rc == OOBX_ERR_ABORTED) return oobx__fail(v->log, rc, "%s: aborted", what);
    const char *f = oobx__ep_view_failure(v);
    if ((rc == OOBX_ERR_REMOTE || rc == OOBX_ERR_MISMATCH) && f) return oobx__fail(v->log, rc, "%s: %s", what, f);
    return oobx__fail(v->log, rc, "%s: timed out (OOBX_TIMEOUT_MS=%d)%s", what, v->settings->timeout_ms,
                      rc == OOBX_ERR_TIMEOUT ? v->ep->probe_text : "");
}

/* ---- waiting ---- */

/* A wait that reaches its deadline while receives are posted asks their
 * senders whether they answer (PING). One that does not within the probe
 * window is named as stopped, and the communicator is told; one that does
 * is named as alive, with the ranks it waits on, and the wait lingers a
 * little longer for the notice of whoever finds the real culprit. */
typedef struct probe {
    int phase; /* PROBE_* */
    int n;
    int to[OOBX_PROBE_MAX]; /* endpoint ranks */
    uint32_t id;
    uint64_t deadline_ns;   /* the wait's own, while an early probe runs */
} probe_t;
enum {
    PROBE_NONE,
    PROBE_ASKED,     /* at the deadline: the window runs */
    PROBE_LINGER,    /* all answered: a little longer for the culprit's notice */
    PROBE_EARLY,     /* another communicator failed: asked whether ours still holds */
    PROBE_EARLY_DONE /* it does, for now: asked again every two windows until the wait's own deadline */
};
enum { PROBE_ALL_ANSWERED, PROBE_SILENT, PROBE_NEVER_JOINED };

static int probe_window_ms(const oobx__ep_view_t *v)
{
    int g = v->settings->timeout_ms / 10;
    return g < 100 ? 100 : g > 1000 ? 1000 : g;
}

static int view_rank_of(const oobx__ep_view_t *v, int r)
{
    if (!v->ep_rank) return r;
    for (int i = 0; i < v->nranks; i++)
        if (v->ep_rank[i] == r) return i;
    return -1;
}

static int pong_of(const oobx_ep_t *ep, uint32_t id, int from)
{
    for (int k = 0; k < OOBX_EP_RECENT; k++)
        if (ep->pong[k].id == id && ep->pong[k].from == from) return k;
    return -1;
}

static int probe_start(const oobx__ep_view_t *v, probe_t *p)
{
    oobx_ep_t *ep = v->ep;
    if (!ep->ready) return 0; /* init has its own reports */
    int srcs[OOBX_PROBE_MAX];
    int n = posted_sources(ep, v->ctx, 0, srcs, OOBX_PROBE_MAX);
    p->n = 0;
    for (int i = 0; i < n; i++)
        if (!ep->failed[srcs[i]] && !ep->departed[srcs[i]] && srcs[i] != ep->rank &&
            srcs[i] != atomic_load(&ep->fail_rank))
            p->to[p->n++] = srcs[i];
    if (!p->n) return 0;
    p->id = ++ep->probe_seq;
    unsigned char msg[12];
    oobx__put_u32(msg, p->id);
    oobx__put_u64(msg + 4, v->ctx);
    for (int i = 0; i < p->n; i++) ctrl_send(ep, p->to[i], CTRL_PING | OOBX_CTRL_MAY_CONNECT, msg, sizeof(msg), "probe");
    return 1;
}

/* A rank waited on answered that it never joined this communicator: the
 * communicator fails, and every member hears it (CTXFAIL). */
static void never_joined(const oobx__ep_view_t *v, int r, const char *why)
{
    oobx_ep_t *ep = v->ep;
    if (!ep->fail_job || note_of(ep->ctx_failed, v->ctx)) return;
    char who[160], text[OOBX_CTX_TEXT];
    oobx__ep_peer_name(v, view_rank_of(v, r), who, sizeof(who));
    snprintf(text, sizeof(text), "%s is not in this communicator (seen by rank %d): %s", who, v->rank, why);
    ctx_fail_record(ep, v->ctx, text);
    unsigned char msg[8 + OOBX_CTX_TEXT];
    size_t tl = strlen(text);
    oobx__put_u64(msg, v->ctx);
    memcpy(msg + 8, text, tl);
    for (int i = 0; i < v->nranks; i++) {
        int t = oobx__ep_view_rank(v, i);
        if (t != ep->rank && t != r && !ep->failed[t] && !ep->departed[t])
            ctrl_send(ep, t, CTRL_CTXFAIL | OOBX_CTRL_MAY_CONNECT, msg, 8 + tl, "communicator failure notice");
    }
}

/* The probe's answers so far: one that never joined fails the communicator
 * (and 1 is returned). */
static int probe_never_joined(const oobx__ep_view_t *v, const probe_t *p)
{
    for (int i = 0; i < p->n; i++) {
        int k = pong_of(v->ep, p->id, p->to[i]);
        if (k >= 0 && v->ep->pong[k].gone[0]) {
            never_joined(v, p->to[i], v->ep->pong[k].gone);
            return 1;
        }
    }
    return 0;
}

static int probe_all_answered(const oobx_ep_t *ep, const probe_t *p)
{
    for (int i = 0; i < p->n; i++)
        if (pong_of(ep, p->id, p->to[i]) < 0) return 0;
    return 1;
}

/* Appends "rank X" for endpoint rank r as the view names it. */
static size_t put_rank(const oobx__ep_view_t *v, char *buf, size_t len, size_t at, int r)
{
    if (at >= len) return at;
    int vr = view_rank_of(v, r);
    int k = vr >= 0 ? snprintf(buf + at, len - at, "rank %d", vr)
                    : snprintf(buf + at, len - at, "rank %d of the parent", r);
    return k > 0 ? at + (size_t)k : at;
}

/* Ends the probe window: PROBE_NEVER_JOINED as probe_never_joined; else
 * what each rank waited on said goes to probe_text, and the first one
 * silent is told to the communicator (PROBE_SILENT). */
static int probe_finish(const oobx__ep_view_t *v, probe_t *p, uint64_t waited_ns)
{
    if (probe_never_joined(v, p)) return PROBE_NEVER_JOINED;
    oobx_ep_t *ep = v->ep;
    char *t = ep->probe_text;
    size_t len = sizeof(ep->probe_text), at = strlen(t);
    int silent = -1, g = probe_window_ms(v);
    for (int i = 0; i < p->n && at < len; i++) {
        char who[160];
        oobx__ep_peer_name(v, view_rank_of(v, p->to[i]), who, sizeof(who));
        int k = pong_of(ep, p->id, p->to[i]);
        if (k < 0) {
            if (silent < 0) silent = i;
            at += (size_t)snprintf(t + at, len - at, "; still waiting on %s, which did not answer a probe within %d ms "
                                   "(stopped, hung or not in an oobx call)", who, g);
            continue;
        }
        at += (size_t)snprintf(t + at, len - at, "; still waiting on %s, which answered a probe (alive", who);
        for (int w = 0; w < ep->pong[k].n && at < len; w++) {
            at += (size_t)snprintf(t + at, len - at, w ? ", " : "; it waits on ");
            at = put_rank(v, t, len, at, ep->pong[k].waits[w]);
        }
        if (at < len) at += (size_t)snprintf(t + at, len - at, ")");
    }
    if (silent < 0) return PROBE_ALL_ANSWERED;
    char who[160], text[CTRL_TEXT_MAX];
    int vr = view_rank_of(v, p->to[silent]);
    oobx__ep_peer_name(v, vr, who, sizeof(who));
    snprintf(text, sizeof(text),
             "%s stopped answering (seen by rank %d: no data for %.0f ms, then no answer to a probe within %d ms: "
             "stopped, hung or not in an oobx call)",
             who, ep->rank, waited_ns / 1e6, g);
    oobx__ep_fail(ep, p->to[silent], OOBX_ERR_REMOTE, text);
    return PROBE_SILENT;
}

static int cancel_check(const oobx__ep_view_t *v)
{
    if (atomic_load(v->aborted)) return OOBX_ERR_ABORTED;
    if (v->user_abort && *v->user_abort) return OOBX_ERR_ABORTED;
    return oobx__ep_view_status(v);
}

/* One round of serving the endpoint until `until` (lock held): sleep on
 * the transport's descriptors unless it is busy, then progress it. */
static void serve_once(oobx_ep_t *ep, uint64_t until)
{
    struct pollfd fds[16];
    int nfds = 0, wms = oobx__ms_left(until, 10);
    int busy = ep->ops->wait_prepare(ep->tp, fds + 1, 15, &nfds, &wms);
    if (!busy) {
        fds[0].fd = ep->wake_fd;
        fds[0].events = POLLIN;
        fds[0].revents = 0;
        pthread_mutex_unlock(&ep->lock);
        ep->ops->sleep(ep->tp, fds, nfds + 1, wms);
        pthread_mutex_lock(&ep->lock);
    }
    ep->ops->progress(ep->tp);
}

void oobx__ep_linger(oobx_ep_t *ep, int ms)
{
    if (!ep || !ep->tp || ms <= 0) return;
    pthread_mutex_lock(&ep->lock);
    uint64_t until = oobx__deadline(ms);
    while (oobx__now_ns() < until) {
        serve_once(ep, until);
        if (ep->linger_hook && ep->linger_hook(ep->linger_arg)) ep->linger_hook = NULL;
        oobx__ep_spread(ep);
    }
    pthread_mutex_unlock(&ep->lock);
}

void oobx__ep_flush_notices(oobx_ep_t *ep, int ms)
{
    if (!ep || !ep->tp) return;
    uint64_t until = 0;
    for (;;) {
        int k = 0;
        for (int i = 0; i < ep->nnotice_out; i++)
            if (!ep->notice_out[i]->done) ep->notice_out[k++] = ep->notice_out[i];
        ep->nnotice_out = k;
        if (!k) return;
        if (!until) until = oobx__deadline(ms);
        else if (oobx__now_ns() >= until) {
            OOBX_DEBUG(ep->log, "rank %d: %d failure notices had not left after %d ms", ep->rank, k, ms);
            return;
        }
        serve_once(ep, until);
        oobx__ep_spread(ep);
    }
}

const void *oobx__ep_ux_peek(oobx_ep_t *ep, uint64_t ctx, uint32_t kind, int src, uint64_t tag, size_t *len)
{
    oobx_mq_t *q = mq_find(ep, ctx, kind, src, tag, 0);
    if (!q || !q->ux_head || !q->ux_head->complete) return NULL;
    *len = q->ux_head->hdr.len;
    return q->ux_head->data;
}

void oobx__ep_set_spin(oobx_ep_t *ep, int oversubscribed)
{
    if (ep->spin_us >= 0) return; /* fixed by OOBX_SPIN_US */
    ep->spin_ns = oversubscribed ? 0 : OOBX_SPIN_AUTO_MAX_NS / 2;
    ep->nwaits = 0;
}

/* The adaptive window after a wait of ns. A wait that polling for
 * OOBX_SPIN_AUTO_MAX_NS would have caught is short. While at least a quarter
 * of the recent waits are short, the window is half again the 75th
 * percentile of the short ones (between OOBX_SPIN_AUTO_MIN_NS and the
 * bound); a wait that slept is short too when the data came soon, so a
 * window that was too small grows back. When most waits are long, the rank
 * polls only OOBX_SPIN_AUTO_MIN_NS before it sleeps: a rank that waits long
 * costs no CPU. */
static void spin_adapt(oobx_ep_t *ep, uint64_t ns)
{
    if (ep->spin_us >= 0 || !ep->spin_ns) return;
    ep->waits_ns[ep->nwaits++ % OOBX_EP_WAITS] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
    unsigned n = ep->nwaits < OOBX_EP_WAITS ? ep->nwaits : OOBX_EP_WAITS;
    /* the window is chosen again every OOBX_SPIN_ADAPT_EVERY waits: the
     * sort would otherwise be the dearest step of a short wait */
    if (n < 4 || ep->nwaits % OOBX_SPIN_ADAPT_EVERY) return;
    /* a polling ping-pong's case first, with no sort: every wait so short
     * that the window is its floor */
    uint32_t most = 0;
    for (unsigned i = 0; i < n; i++)
        if (ep->waits_ns[i] > most) most = ep->waits_ns[i];
    if ((uint64_t)most * 3 / 2 <= OOBX_SPIN_AUTO_SHORT_NS) {
        ep->spin_ns = OOBX_SPIN_AUTO_SHORT_NS;
        return;
    }
    uint32_t sorted[OOBX_EP_WAITS];
    unsigned m = 0; /* the short waits, sorted */
    for (unsigned i = 0; i < n; i++) {
        uint32_t w = ep->waits_ns[i];
        if (w > OOBX_SPIN_AUTO_MAX_NS) continue;
        unsigned j = m++;
        for (; j > 0 && sorted[j - 1] > w; j--) sorted[j] = sorted[j - 1];
        sorted[j] = w;
    }
    if (4 * m < n) {
        ep->spin_ns = OOBX_SPIN_AUTO_MIN_NS;
        return;
    }
    uint64_t w = (uint64_t)sorted[(3 * m) / 4 < m ? (3 * m) / 4 : m - 1] * 3 / 2;
    ep->spin_ns = w > OOBX_SPIN_AUTO_MAX_NS   ? OOBX_SPIN_AUTO_MAX_NS
                  : w < OOBX_SPIN_AUTO_SHORT_NS ? OOBX_SPIN_AUTO_SHORT_NS
                                                : (uint32_t)w;
}

/* The polling window of the next wait, in ns (0: sleep at once). */
static uint64_t spin_window(const oobx_ep_t *ep)
{
    return ep->spin_us > 0 ? (uint64_t)ep->spin_us * 1000ull : ep->spin_us < 0 ? ep->spin_ns : 0;
}

/* The passes a polling wait makes before its first clock read: half its
 * window at the pass time measured (OOBX_SPIN_CHECK_EVERY before any). */
static unsigned first_passes(const oobx_ep_t *ep, uint64_t window)
{
    if (!ep->pass_ns) return OOBX_SPIN_CHECK_EVERY;
    uint64_t n = window / 2 / ep->pass_ns;
    return n < 1 ? 1 : n > OOBX_SPIN_FIRST_MAX ? OOBX_SPIN_FIRST_MAX : (unsigned)n;
}

/* deadline_ns 0: the deadline is timeout_ms from the wait's start. A rank
 * that polls then reads no clock for its first passes (first_passes): a
 * clock read costs about as much as an idle pass, and a ping-pong's waits
 * are over within a few dozen passes. */
static int ep_wait(const oobx__ep_view_t *v, oobx__ep_done_fn done, void *arg, uint64_t deadline_ns, int timeout_ms)
{
    oobx_ep_t *ep = v->ep;
    oobx_tp_t *tp = ep->tp;
    if (done(arg)) return 0; /* no clock for a wait that is over */
    uint64_t early_ns = 0; /* the time the passes with no clock took, estimated */
    if (!deadline_ns) {
        /* the same checks as the first pass below, then the passes; a wait
         * that ends here counts as shorter than any window */
        uint64_t window = spin_window(ep);
        if (window && !ep->poller && atomic_load(&ep->fail_rank) < 0 && !cancel_check(v)) {
            unsigned n = first_passes(ep, window);
            for (unsigned pass = 0; pass < n; pass++) {
                ep->ops->progress(tp);
                if (done(arg)) {
                    spin_adapt(ep, 0);
                    return 0;
                }
            }
            early_ns = (uint64_t)n * ep->pass_ns;
        }
    }
    uint64_t start = oobx__now_ns();
    if (!deadline_ns) deadline_ns = timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms * 1000000ull;
    if (v->deadline_ns && v->deadline_ns < deadline_ns) deadline_ns = v->deadline_ns;
    uint64_t t0 = start - (early_ns < start ? early_ns : 0); /* the wait's start, for spin_adapt and the window */
    /* the last clock reading: a wait that ends while polling takes it for
     * its end (at most OOBX_SPIN_CHECK_EVERY passes early), so that no
     * clock is read between the message and the caller */
    uint64_t seen = t0;
    int slept = 0;
    probe_t probe = {.phase = PROBE_NONE};
    ep->probe_text[0] = '\0';
    int waited = 0;
    for (;;) {
        if (done(arg)) {
            if (waited) spin_adapt(ep, (slept ? oobx__now_ns() : seen) - t0);
            return 0;
        }
        /* the first pass reads no clock again */
        uint64_t now = waited ? oobx__now_ns() : start;
        seen = now;
        waited = 1;
        int rc = cancel_check(v);
        if (rc) return rc;
        /* another communicator on this endpoint failed (a parent, a
         * sibling): ask the ranks this wait needs whether ours still holds
         * (a split that failed on some of its members made it) */
        if (probe.phase == PROBE_NONE && atomic_load(&ep->fail_rank) >= 0 && !v->deadline_ns &&
            probe_start(v, &probe)) {
            probe.phase = PROBE_EARLY;
            probe.deadline_ns = deadline_ns;
            deadline_ns = oobx__deadline(probe_window_ms(v));
            if (deadline_ns > probe.deadline_ns) deadline_ns = probe.deadline_ns;
        }
        int passed = deadline_ns != UINT64_MAX && now >= deadline_ns;
        /* a window ends when all have answered, or at its deadline */
        int asking = probe.phase == PROBE_EARLY || probe.phase == PROBE_ASKED;
        int window_over = asking && (passed || probe_all_answered(ep, &probe));
        if (probe.phase == PROBE_EARLY && window_over) {
            if (probe_never_joined(v, &probe)) continue; /* cancel_check says it */
            /* all still hold it, for now: a member whose split is still
             * running may fail it later, so ask again every two windows
             * until the wait's own deadline */
            probe.phase = PROBE_EARLY_DONE;
            deadline_ns = oobx__deadline(2 * probe_window_ms(v));
            if (deadline_ns > probe.deadline_ns) deadline_ns = probe.deadline_ns;
            continue;
        }
        if (probe.phase == PROBE_EARLY_DONE && passed && oobx__now_ns() < probe.deadline_ns) {
            if (probe_start(v, &probe)) {
                probe.phase = PROBE_EARLY;
                deadline_ns = oobx__deadline(probe_window_ms(v));
            } else {
                deadline_ns = probe.deadline_ns;
            }
            if (deadline_ns > probe.deadline_ns) deadline_ns = probe.deadline_ns;
            continue;
        }
        if (probe.phase == PROBE_ASKED && window_over) {
            int found = probe_finish(v, &probe, oobx__now_ns() - t0);
            if (found == PROBE_NEVER_JOINED) continue;
            if (found == PROBE_SILENT) return OOBX_ERR_TIMEOUT;
            probe.phase = PROBE_LINGER;
            deadline_ns = oobx__deadline(2 * probe_window_ms(v));
            continue;
        }
        if (passed) {
            /* an init's budget is its own: no probes past it */
            if ((probe.phase == PROBE_NONE || probe.phase == PROBE_EARLY_DONE) && !v->deadline_ns &&
                probe_start(v, &probe)) {
                probe.phase = PROBE_ASKED;
                deadline_ns = oobx__deadline(probe_window_ms(v));
                continue;
            }
            return OOBX_ERR_TIMEOUT;
        }
        if (ep->poller) {
            /* another thread polls for us; it broadcasts after each round */
            int ms = oobx__ms_left(deadline_ns, v->user_abort ? 50 : 1000);
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)ms * 1000000ull;
            ts.tv_sec += (time_t)(ns / 1000000000ull);
            ts.tv_nsec = (long)(ns % 1000000000ull);
            ep->nsleepers++;
            pthread_cond_timedwait(&ep->cond, &ep->lock, &ts);
            ep->nsleepers--;
            continue;
        }
        ep->poller = 1;
        uint64_t spin = spin_window(ep);
        if (spin > 0) {
            /* the clock, and the lock for other threads, every
             * OOBX_SPIN_CHECK_EVERY passes: a pass of an idle transport
             * costs less than a clock read */
            uint64_t until = t0 + spin;
            for (unsigned pass = 1;; pass++) {
                ep->ops->progress(tp);
                if (done(arg)) break;
                if (pass % OOBX_SPIN_CHECK_EVERY) continue;
                pthread_mutex_unlock(&ep->lock);
                pthread_mutex_lock(&ep->lock);
                seen = oobx__now_ns();
                uint64_t per = (seen - now) / pass;
                ep->pass_ns = per > UINT32_MAX ? UINT32_MAX : per ? (uint32_t)per : 1;
                if (seen >= until) break;
            }
        }
        if (!done(arg) && !cancel_check(v)) {
            /* No progress() first: the sleep returns at once when something is
             * ready, so one system call both waits and finds the work. */
            struct pollfd fds[16];
            int nfds = 0;
            int ms = -1;
            if (v->user_abort) ms = oobx__ms_left(deadline_ns, 50); /* nobody tells us when it changes */
            else if (deadline_ns != UINT64_MAX) ep_arm(ep, deadline_ns);
            int busy = ep->ops->wait_prepare(tp, fds + 1, 15, &nfds, &ms);
            if (!busy && (done(arg) || cancel_check(v))) busy = 1; /* arming may have eaten a wake-up */
            if (!busy) {
                fds[0].fd = ep->wake_fd;
                fds[0].events = POLLIN;
                fds[0].revents = 0;
                pthread_mutex_unlock(&ep->lock);
                ep->ops->sleep(tp, fds, nfds + 1, ms);
                pthread_mutex_lock(&ep->lock);
                slept = 1;
            }
            ep->ops->progress(tp);
        }
        oobx__ep_spread(ep);
        ep->poller = 0;
        if (ep->nsleepers) pthread_cond_broadcast(&ep->cond);
    }
}

int oobx__ep_wait(const oobx__ep_view_t *v, oobx__ep_done_fn done, void *arg, uint64_t deadline_ns)
{
    return ep_wait(v, done, arg, deadline_ns ? deadline_ns : 1, 0);
}

int oobx__ep_wait_ms(const oobx__ep_view_t *v, oobx__ep_done_fn done, void *arg, int timeout_ms)
{
    return ep_wait(v, done, arg, 0, timeout_ms);
}
