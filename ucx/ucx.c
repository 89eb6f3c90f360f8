/*
 * The UCX transport: a loadable module (liboobx-ucx.so) exporting oobx_ucx_ops.
 * docs/transports/ucx.md describes it for users; this is the short form.
 *
 * One UCP context and one worker per instance. The address blob is a small
 * header (magic, version, host, pid) and the worker address, carried by the
 * core as a variable-length card. Endpoints are created lazily, on the first
 * send to a peer (and, for a peer on another host, on the first message from
 * it, so that UCX's error handling watches it).
 *
 * Messages travel as UCX tag messages. The 64-bit UCX tag holds
 *
 *     bit 63      DATA: the payload of a large message (received zero-copy)
 *     bits 62-59  type (EAGER, HDR, DOORBELL, CREDIT, SETUP)
 *     bits 58-32  sender rank
 *     bits 31-0   per-sender sequence number
 *
 * The core does the matching (context, user tag, source); the transport only
 * moves messages in order. Every message but DATA is taken with
 * ucp_tag_probe_nb(mask = DATA bit), in arrival order. A message of up to
 * UCX_EAGER_MAX payload bytes is one EAGER message (header + payload, copied
 * into one buffer when small, else an iov); a larger one is a HDR message and
 * then a DATA message that is received by ucp_tag_recv_nbx straight into the
 * buffer the core's msg_begin returned, matched exactly by (DATA, sender,
 * sequence).
 *
 * Ring links (OOBX_UCX_RING): the receiver of the link prev -> me maps a ring
 * buffer (ucp_mem_map) and sends its packed rkey to prev (SETUP). At its first
 * send to next the sender picks the path (ucx_ring_choose); on the ring it
 * writes the chunks of a message with ucp_put_nbx (or plain copies when the
 * ring is mapped here), fences, and rings one DOORBELL for them (puts do not
 * wake the receiver's event fd). The receiver copies each chunk out, frees the
 * slot and returns CREDITs in batches. The slot/credit bookkeeping is
 * src/ringbuf.c, shared with verbs/.
 *
 * Delivery order: records of every incoming message are kept per sender in
 * arrival order; msg_begin is called in that order as soon as the header is
 * in, and msg_end in that order once the payload is in place.
 *
 * Waiting: wait_prepare() arms the worker (ucp_worker_arm) and hands out
 * ucp_worker_get_efd(); it caps the sleep so that failure checks run while
 * the core sleeps: UCX's keepalive for peers on other hosts, a pid check for
 * peers on this host (UCX 1.13's shared-memory transports have no peer
 * failure handling).
 */
#include <errno.h>
#include <signal.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>

#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include "topo.h"

#include "log.h"
#include "ringbuf.h"
#include "transport.h"
#include "util.h"
#include "ucx_wire.h"

#define UCX_INLINE_MAX 256u        /* header + payload copied into the send record */
#define UCX_KEEPALIVE_MS 1000      /* wake-up period while sleeping, for keepalive */
#define UCX_KEEPALIVE_DEFAULT "500ms"
#define UCX_QUIESCE_MS 50          /* progress before closing, at destroy */
#define UCX_CLOSE_MS 500           /* bound on flushing endpoints at destroy */
#define UCX_WATCH_MS 300           /* period of the pid check of peers on this host */

extern const oobx_tp_ops_t oobx_ucx_ops;

typedef struct ucx_tp ucx_tp_t;

/* A send: one core message (or an internal control message). */
typedef struct ucx_sreq {
    struct ucx_sreq *next;      /* ring send queue */
    struct ucx_sreq *live_prev, *live_next; /* every unfinished send of the instance */
    ucx_tp_t *tp;
    oobx_tp_req_t *req;         /* the core's record, NULL for control messages */
    oobx_msg_hdr_t hdr;         /* wire copy of the header */
    const void *payload;
    ucp_dt_iov_t iov[2];
    int pending;                /* UCX operations not yet complete */
    int issued;                 /* every operation has been started */
    int poolable;               /* plain size: may go back to the pool */
    int status;
    unsigned char ctrl[UCX_INLINE_MAX]; /* control message, or header + small payload */
} ucx_sreq_t;

/* An incoming message, in its sender's arrival order. */
typedef struct ucx_rrec {
    struct ucx_rrec *next;
    ucx_tp_t *tp;
    int peer;
    int type;
    uint64_t tag;
    void *buf;              /* the received control/eager message */
    size_t len;
    void *ureq;             /* UCX request of that receive, or NULL */
    void *data_ureq;        /* UCX request of the DATA receive */
    int arrived;            /* buf holds the message */
    int begun;              /* handled: msg_begin called (if a message) */
    int complete;           /* payload in place */
    int has_msg;            /* msg_end is owed */
    int status;
    void *cookie;
    unsigned char small[UCX_INLINE_MAX]; /* buf of a small message */
} ucx_rrec_t;

typedef struct ucx_peer {
    ucx_tp_t *tp;
    int rank;
    ucp_address_t *addr;
    size_t addr_len;
    char host[48];
    uint32_t pid;
    ucp_ep_h ep;
    int watch_pid;          /* no UCX error handling on this endpoint: watch the peer's pid */
    int failed;             /* the link is gone */
    int fail_reported;      /* sink.peer_failed called */
    int fail_status;
    char why[192];
    uint32_t tx_seq;        /* tag sequence numbers, this rank -> peer */
    ucx_rrec_t *rx_head, *rx_tail;
    int dirty;              /* on the dirty list */
} ucx_peer_t;

/* Link prev -> me: my registered receive ring. */
typedef struct ucx_ring_rx {
    int peer;
    ucp_mem_h memh;
    void *base;
    size_t size;
    ringbuf_rx_t rb;
    ucx_rrec_t *cur;        /* record of the message being assembled */
    void *dest;
    int setup_sent;
} ucx_ring_rx_t;

/* Link me -> next: the peer's ring. */
typedef struct ucx_ring_tx {
    int peer;
    int active;             /* sends to peer go through the ring */
    ucp_rkey_h rkey;
    uint64_t raddr;
    void *rptr;             /* the ring mapped into this process, when shared memory allows */
    ringbuf_tx_t rb;
    unsigned char (*heads)[RINGBUF_HEAD_MAX];
    ucx_sreq_t *q_head, *q_tail;
    unsigned char *setup;   /* the peer's SETUP, until the first send to it */
    size_t setup_len;
} ucx_ring_tx_t;

struct ucx_tp {
    oobx_tp_t base;
    int rank, nranks;
    uint64_t magic;
    const oobx_settings_t *settings;
    const oobx_log_t *log;
    oobx_tp_sink_t sink;
    ucp_context_h ctx;
    ucp_worker_h worker;
    int efd;
    int sleep_fd;           /* epoll set of efd and the core's wake fd, for ucx_sleep */
    int wake_fd;            /* the core's wake fd, or -1 */
    int woken;              /* ucx_sleep saw the wake fd: progress() clears it */
    ucp_address_t *my_addr;
    size_t my_addr_len;
    char host[48];
    ucx_peer_t *peers;
    int *dirty;             /* peers with records to look at */
    int ndirty;
    int fail_pending;       /* a peer failed and is not reported yet */
    int fatal;              /* the endpoint is unusable */
    int ring_mode;          /* UCX_RING_* */
    ucx_ring_rx_t rrx;
    ucx_ring_tx_t rtx;
    oobx_ratelimit_t rl;
    ucx_sreq_t *live;       /* unfinished sends */
    ucx_rrec_t *orphans;    /* records of dropped peers with a UCX receive still out */
    int destroying;         /* completions no longer reach the core */
    ucx_sreq_t *sreq_pool;  /* free send records */
    ucx_rrec_t *rrec_pool;  /* free receive records */
    int nsreq_pool, nrrec_pool;
    int nwatch;             /* peers with watch_pid */
    uint64_t next_watch_ns; /* next look at their pids */
};

enum { UCX_LANE_NATIVE = 1, UCX_LANE_SINGLE_COPY = 2, UCX_LANE_EMULATED = 4 };

enum { UCX_RING_AUTO = 0, UCX_RING_PUT = 1, UCX_RING_TAG = 2 };

static const char *ucx_ring_mode_name(int m)
{
    return m == UCX_RING_PUT ? "put" : m == UCX_RING_TAG ? "tag" : "auto";
}

/* ---- peers and failures ------------------------------------------------------- */

static void ucx_mark_dirty(ucx_tp_t *tp, int peer)
{
    ucx_peer_t *p = &tp->peers[peer];
    if (!p->dirty) {
        p->dirty = 1;
        tp->dirty[tp->ndirty++] = peer;
    }
}

static void ucx_peer_fail(ucx_tp_t *tp, int peer, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void ucx_peer_fail(ucx_tp_t *tp, int peer, int status, const char *fmt, ...)
{
    ucx_peer_t *p = &tp->peers[peer];
    if (p->failed) return;
    p->failed = 1;
    p->fail_status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof(p->why), fmt, ap);
    va_end(ap);
    tp->fail_pending = 1;
}

static void ucx_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    ucx_peer_t *p = arg;
    ucx_peer_fail(p->tp, p->rank, OOBX_ERR_REMOTE, "ucx: link to rank %d (%s pid %u) failed: %s",
                  p->rank, p->host, p->pid, ucs_status_string(status));
}

/* 0 when the process is gone or a zombie (its memory and files are gone). */
static int ucx_pid_alive(uint32_t pid)
{
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : 1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *e = strrchr(buf, ')');
    if (e && e[1] == ' ' && (e[2] == 'Z' || e[2] == 'X')) return 0;
    return 1;
}

/* Starts watching the pid of a peer on this host (see ucx_peer_ep). */
static void ucx_peer_watch(ucx_tp_t *tp, int peer)
{
    ucx_peer_t *p = &tp->peers[peer];
    if (p->watch_pid || !p->addr || strcmp(p->host, tp->host) != 0) return;
    p->watch_pid = 1;
    tp->nwatch++;
}

static ucp_ep_h ucx_peer_ep(ucx_tp_t *tp, int peer)
{
    ucx_peer_t *p = &tp->peers[peer];
    if (p->ep || p->failed) return p->ep;
    if (!p->addr) return NULL;
    /* UCX 1.13's shared-memory transports have no peer failure handling, and
     * an endpoint that asks for it is built without them (tcp only, or nothing
     * under UCX_TLS=posix,self). So a peer on this host gets an endpoint
     * without error handling, and its death is seen from its pid; a peer on
     * another host gets UCX's error handling (keepalive, connection errors).
     * (Error handling for same-host peers over tcp alone was tried: UCX 1.13's
     * tcp transport then hits an internal assertion when a connect to a dead
     * peer is refused, and aborts the process.) */
    int same_host = strcmp(p->host, tp->host) == 0;
    ucp_ep_params_t ep_params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address = p->addr,
        .err_mode = same_host ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER,
    };
    if (!same_host) {
        ep_params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep_params.err_handler.cb = ucx_ep_err_cb;
        ep_params.err_handler.arg = p;
    }
    ucs_status_t st = ucp_ep_create(tp->worker, &ep_params, &p->ep);
    if (st != UCS_OK && !same_host) {
        OOBX_WARN(tp->log, "ucx: no transport with peer failure handling reaches rank %d (%s pid %u): %s; "
                  "a failure of rank %d is seen only by timeouts",
                  peer, p->host, p->pid, ucs_status_string(st), peer);
        ep_params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        ep_params.field_mask &= ~(uint64_t)UCP_EP_PARAM_FIELD_ERR_HANDLER;
        st = ucp_ep_create(tp->worker, &ep_params, &p->ep);
    }
    if (st != UCS_OK) {
        p->ep = NULL;
        ucx_peer_fail(tp, peer, OOBX_ERR_REMOTE, "ucx: cannot create an endpoint to rank %d (%s pid %u): %s "
                      "(check UCX_TLS and UCX_NET_DEVICES)",
                      peer, p->host, p->pid, ucs_status_string(st));
        return NULL;
    }
    if (same_host) ucx_peer_watch(tp, peer);
    if (tp->log && tp->log->level >= OOBX_LOG_TRACE) {
        char *text = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&text, &n);
        if (f) {
            ucp_ep_print_info(p->ep, f);
            fclose(f);
            OOBX_TRACE(tp->log, "ucx: endpoint to rank %d:\n%s", peer, text);
            free(text);
        }
    }
    return p->ep;
}

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
static void ucx_sreq_track(ucx_sreq_t *s, ucs_status_ptr_t ptr)
{
    if (ptr == NULL) return;
    if (UCS_PTR_IS_ERR(ptr)) {
        if (!s->status) s->status = ucx_status(UCS_PTR_STATUS(ptr));
        return;
    }
    s->pending++;
}

static ucp_request_param_t ucx_send_param(ucx_sreq_t *s)
{
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = ucx_send_cb,
        .user_data = s,
    };
    return prm;
}

/* Closes the issue phase of s: finishes it when nothing is outstanding. */
static void ucx_sreq_issued(ucx_sreq_t *s)
{
    s->issued = 1;
    if (s->pending == 0) ucx_sreq_finish(s);
}

/* A control message (no core request); failures show up as peer failures. */
static void ucx_send_ctrl(ucx_tp_t *tp, int peer, int type, const void *data, size_t len)
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

/* Writes queued ring messages into the peer's ring as far as credits allow. */
static void ucx_ring_push(ucx_tp_t *tp)
{
    ucx_ring_tx_t *r = &tp->rtx;
    ucx_peer_t *p = &tp->peers[r->peer];
    if (!r->active || p->failed) return;
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

static void ucx_ring_activate(ucx_tp_t *tp);
static int ucx_ep_rma_lanes(ucp_ep_h ep);

static int ucx_send(oobx_tp_t *base, int peer, const oobx_msg_hdr_t *hdr, const void *payload,
                    oobx_tp_req_t *req)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    if (peer < 0 || peer >= tp->nranks || peer == tp->rank)
        return oobx__fail(tp->log, OOBX_ERR_INVALID, "ucx: send to rank %d of %d", peer, tp->nranks);
    ucx_peer_t *p = &tp->peers[peer];
    if (p->failed)
        return oobx__fail(tp->log, p->fail_status ? p->fail_status : OOBX_ERR_REMOTE, "%s", p->why);
    if (!p->addr)
        return oobx__fail(tp->log, OOBX_ERR_INTERNAL, "ucx: send to rank %d before its address", peer);
    if (tp->rtx.setup && tp->rtx.peer == peer) ucx_ring_activate(tp);
    ucp_ep_h ep = p->failed ? NULL : ucx_peer_ep(tp, peer);
    if (!ep) return oobx__fail(tp->log, p->fail_status ? p->fail_status : OOBX_ERR_REMOTE, "%s", p->why);
    ucx_sreq_t *s = ucx_sreq_new(tp, 0);
    if (!s) return oobx__fail(tp->log, OOBX_ERR_NOMEM, "ucx: out of memory sending to rank %d", peer);
    s->req = req;
    s->hdr = *hdr;
    s->payload = payload;
    req->done = 0;
    req->status = 0;
    /* the ring is for bandwidth: a small message goes as one tag message
     * (a doorbell costs as much), unless ring messages wait before it */
    if (tp->rtx.active && tp->rtx.peer == peer && (hdr->len > UCX_EAGER_MAX || tp->rtx.q_head)) {
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
    if (status != UCS_OK && !r->status) r->status = ucx_status(status);
    r->complete = 1;
    if (r->peer >= 0) ucx_mark_dirty(r->tp, r->peer);
}

static void ucx_rrec_free(ucx_rrec_t *r)
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
static void ucx_protocol_error(ucx_tp_t *tp, int peer, const char *what)
{
    ucx_peer_fail(tp, peer, OOBX_ERR_PROTOCOL, "ucx: rank %d broke the protocol: %s", peer, what);
}

static void ucx_credit_send(ucx_tp_t *tp, uint64_t credit)
{
    ucx_send_ctrl(tp, tp->rrx.peer, UCX_T_CREDIT, &credit, sizeof(credit));
}

static int ucx_ring_choose(ucx_tp_t *tp, ucp_ep_h ep, ucp_rkey_h rkey, uint64_t raddr, void **rptr,
                           const char **why);

/* SETUP from next: its ring for the link me -> next. It is only checked and
 * kept here; the key is unpacked at the first send to next, when next is
 * surely still in the communicator (a short-lived communicator may be gone at
 * the peer before its SETUP is read, and UCX 1.13 crashes unpacking the key of
 * a shared-memory segment that no longer exists). */
static void ucx_handle_setup(ucx_tp_t *tp, int peer, const void *buf, size_t len)
{
    ucx_ring_tx_t *r = &tp->rtx;
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
static void ucx_ring_activate(ucx_tp_t *tp)
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
    /* where UCX's rendezvous copies once, the key is not even unpacked */
    if (tp->ring_mode == UCX_RING_AUTO && (ucx_ep_rma_lanes(ep) & UCX_LANE_SINGLE_COPY)) {
        OOBX_INFO(tp->log, "ucx: ring link to rank %d uses tag messages (OOBX_UCX_RING=auto: UCX's "
                  "rendezvous copies once (cma/knem/xpmem), the ring twice)", peer);
        goto out;
    }
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

/* Handles the head-of-line work of record r (its message has arrived). */
static void ucx_rrec_begin(ucx_tp_t *tp, ucx_rrec_t *r)
{
    r->begun = 1;
    r->complete = 1; /* unless a payload is still coming */
    if (r->status) {
        ucx_peer_fail(tp, r->peer, r->status, "ucx: receive from rank %d failed: %s", r->peer,
                      oobx_strerror(r->status));
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
            if (m.hdr.len) memcpy(dst, m.payload, m.hdr.len);
            return;
        }
        r->complete = 0;
        ucp_request_param_t prm = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb.recv = ucx_data_cb,
            .user_data = r,
        };
        ucs_status_ptr_t ptr = ucp_tag_recv_nbx(tp->worker, dst, m.hdr.len,
                                                UCX_TAG_DATA | ucx_tag(0, r->peer, ucx_tag_seq(r->tag)),
                                                ~0ull, &prm);
        if (ptr == NULL) {
            r->complete = 1;
        } else if (UCS_PTR_IS_ERR(ptr)) {
            r->complete = 1;
            r->status = ucx_status(UCS_PTR_STATUS(ptr));
        } else {
            r->data_ureq = ptr;
            if (ucp_request_check_status(ptr) != UCS_INPROGRESS) r->complete = 1;
        }
        return;
    }
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
            if (ev.len) memcpy((char *)rx->dest + ev.off, ev.data, ev.len);
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
static void ucx_peer_drain(ucx_tp_t *tp, int peer)
{
    ucx_peer_t *p = &tp->peers[peer];
    for (ucx_rrec_t *r = p->rx_head; r && !p->failed; r = r->next) {
        if (!r->arrived) break;
        if (!r->begun) ucx_rrec_begin(tp, r);
    }
    while (!p->failed && p->rx_head && p->rx_head->begun && p->rx_head->complete) {
        ucx_rrec_t *r = p->rx_head;
        if (r->status && r->has_msg) {
            ucx_peer_fail(tp, peer, r->status, "ucx: payload from rank %d lost: %s", peer,
                          oobx_strerror(r->status));
            break;
        }
        p->rx_head = r->next;
        if (!p->rx_head) p->rx_tail = NULL;
        if (r->has_msg) tp->sink.msg_end(tp->sink.core, r->cookie);
        ucx_rrec_free(r);
    }
}

static void ucx_wait_req(ucx_tp_t *tp, ucs_status_ptr_t req, int ms);

/* Takes every non-DATA message UCX holds, in arrival order. */
static void ucx_probe(ucx_tp_t *tp)
{
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    while ((msg = ucp_tag_probe_nb(tp->worker, 0, UCX_TAG_DATA, 1, &info)) != NULL) {
        int type = ucx_tag_type(info.sender_tag);
        int peer = ucx_tag_rank(info.sender_tag);
        ucx_tag_info_t ti;
        char why[160];
        int bad = ucx_tag_check(info.sender_tag, info.length, tp->rank, tp->nranks, &ti, why, sizeof(why)) != 0;
        ucx_rrec_t *r = ucx_rrec_new(tp);
        void *buf = !r ? NULL : info.length <= sizeof(r->small) ? r->small : malloc(info.length);
        if (!r || !buf) {
            free(r);
            tp->fatal = oobx__fail(tp->log, OOBX_ERR_NOMEM, "ucx: out of memory receiving %zu bytes",
                                  info.length);
            return;
        }
        r->peer = bad ? -1 : peer;
        r->type = type;
        r->tag = info.sender_tag;
        r->buf = buf;
        r->len = info.length;
        ucp_request_param_t prm = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb.recv = ucx_recv_cb,
            .user_data = r,
        };
        if (bad) {
            /* take it off the queue and drop it; a bogus sender rank cannot be blamed */
            if (oobx__ratelimit_ok(&tp->rl))
                OOBX_WARN(tp->log, "ucx: dropped a message with tag 0x%016" PRIx64 " and %zu bytes: %s",
                          info.sender_tag, info.length, why);
            prm.op_attr_mask = 0;
            ucs_status_ptr_t ptr = ucp_tag_msg_recv_nbx(tp->worker, buf, info.length, msg, &prm);
            ucx_wait_req(tp, ptr, 100);
            if (buf != r->small) free(buf);
            free(r);
            continue;
        }
        ucx_peer_t *p = &tp->peers[peer];
        if (p->rx_tail)
            p->rx_tail->next = r;
        else
            p->rx_head = r;
        p->rx_tail = r;
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
        ucx_mark_dirty(tp, peer);
        /* watch the sender for failures too: its pid on this host, else an
         * endpoint with UCX's error handling */
        if (!p->ep && !p->failed && !p->watch_pid) {
            if (p->addr && strcmp(p->host, tp->host) == 0)
                ucx_peer_watch(tp, peer);
            else
                ucx_peer_ep(tp, peer);
        }
    }
}

/* Drops every record of a failed peer (cancelling payload receives). */
static void ucx_peer_drop(ucx_tp_t *tp, int peer)
{
    ucx_peer_t *p = &tp->peers[peer];
    for (ucx_rrec_t *r = p->rx_head; r;) {
        ucx_rrec_t *next = r->next;
        if (r->data_ureq && !r->complete) ucp_request_cancel(tp->worker, r->data_ureq);
        if (r->ureq && !r->arrived) ucp_request_cancel(tp->worker, r->ureq);
        if ((r->data_ureq && !r->complete) || (r->ureq && !r->arrived)) {
            /* its callback is still to come: keep the record until then */
            r->next = tp->orphans;
            tp->orphans = r;
        } else {
            ucx_rrec_free(r);
        }
        r = next;
    }
    p->rx_head = p->rx_tail = NULL;
    if (tp->rrx.cur && tp->rrx.peer == peer) tp->rrx.cur = NULL;
    if (tp->rtx.peer == peer) {
        for (ucx_sreq_t *s = tp->rtx.q_head; s;) {
            ucx_sreq_t *next = s->next;
            if (!s->status) s->status = p->fail_status ? p->fail_status : OOBX_ERR_REMOTE;
            s->next = NULL;
            ucx_sreq_issued(s);
            s = next;
        }
        tp->rtx.q_head = tp->rtx.q_tail = NULL;
        tp->rtx.active = 0;
    }
}

/* Peers on this host: a pid that is gone is a dead peer. */
static void ucx_watch_pids(ucx_tp_t *tp)
{
    uint64_t now = oobx__now_ns();
    if (now < tp->next_watch_ns) return;
    tp->next_watch_ns = now + (uint64_t)UCX_WATCH_MS * 1000000u;
    for (int i = 0; i < tp->nranks; i++) {
        ucx_peer_t *p = &tp->peers[i];
        if (!p->watch_pid || p->failed) continue;
        /* kill(pid, 0) only: one cheap call per peer (a zombie is caught by
         * the next check, once its parent has reaped it) */
        if (kill((pid_t)p->pid, 0) != 0 && errno == ESRCH)
            ucx_peer_fail(tp, i, OOBX_ERR_REMOTE, "ucx: rank %d (%s pid %u) has exited", i, p->host, p->pid);
    }
}

static void ucx_report_failures(ucx_tp_t *tp)
{
    tp->fail_pending = 0;
    for (int i = 0; i < tp->nranks; i++) {
        ucx_peer_t *p = &tp->peers[i];
        if (!p->failed || p->fail_reported) continue;
        p->fail_reported = 1;
        OOBX_INFO(tp->log, "%s", p->why);
        ucx_peer_drop(tp, i);
        if (p->ep) {
            ucp_request_param_t prm = {
                .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                .flags = UCP_EP_CLOSE_FLAG_FORCE,
            };
            ucs_status_ptr_t ptr = ucp_ep_close_nbx(p->ep, &prm);
            if (ptr && !UCS_PTR_IS_ERR(ptr)) {
                for (int k = 0; k < 1000 && ucp_request_check_status(ptr) == UCS_INPROGRESS; k++)
                    ucp_worker_progress(tp->worker);
                ucp_request_free(ptr);
            }
            p->ep = NULL;
        }
        tp->sink.peer_failed(tp->sink.core, i, p->fail_status ? p->fail_status : OOBX_ERR_REMOTE, p->why);
    }
}

static void ucx_orphans_sweep(ucx_tp_t *tp)
{
    for (ucx_rrec_t **pp = &tp->orphans; *pp;) {
        ucx_rrec_t *r = *pp;
        if ((r->data_ureq && !r->complete) || (r->ureq && !r->arrived)) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        ucx_rrec_free(r);
    }
}

/* Sleeps on the worker's event fd and the core's wake fd in one call (no
 * endpoint lock held: touches only what it records). */
static int ucx_sleep(oobx_tp_t *base, int timeout_ms)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    struct epoll_event evs[2];
    int n = epoll_wait(tp->sleep_fd, evs, 2, timeout_ms);
    for (int i = 0; i < n; i++)
        if (evs[i].data.u32 == 1) tp->woken = 1;
    return 0;
}

static int ucx_progress(oobx_tp_t *base)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    if (tp->woken) {
        uint64_t v;
        ssize_t r = read(tp->wake_fd, &v, sizeof(v));
        (void)r;
        tp->woken = 0;
    }
    if (tp->fatal) return tp->fatal;
    if (tp->orphans) ucx_orphans_sweep(tp);
    /* one pass: wait_prepare() finds anything that came in meanwhile (arm
     * says busy) and the core calls progress() again */
    for (int n = 0; n < 256 && ucp_worker_progress(tp->worker); n++) {
    }
    ucx_probe(tp);
    if (tp->fatal) return tp->fatal;
    while (tp->ndirty > 0) {
        int peer = tp->dirty[--tp->ndirty];
        tp->peers[peer].dirty = 0;
        ucx_peer_drain(tp, peer);
    }
    if (tp->nwatch) ucx_watch_pids(tp);
    if (tp->fail_pending) ucx_report_failures(tp);
    return 0;
}

static int ucx_wait_prepare(oobx_tp_t *base, struct pollfd *fds, int max, int *nfds, int *timeout_ms)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    *nfds = 0;
    if (tp->fatal || tp->ndirty || tp->fail_pending) return 1;
    if (max < 1) return 1;
    ucs_status_t st = ucp_worker_arm(tp->worker);
    if (st == UCS_ERR_BUSY) return 1;
    if (st != UCS_OK) {
        tp->fatal = oobx__fail(tp->log, OOBX_ERR_INTERNAL, "ucx: ucp_worker_arm: %s", ucs_status_string(st));
        return 1;
    }
    /* a message UCX took in outside progress() (endpoint creation and sends
     * may progress internally) waits in its unexpected queue and raises no
     * event: look once more */
    ucp_tag_recv_info_t info;
    if (tp->ndirty || ucp_tag_probe_nb(tp->worker, 0, UCX_TAG_DATA, 0, &info) != NULL) return 1;
    fds[0].fd = tp->efd;
    fds[0].events = POLLIN;
    fds[0].revents = 0;
    *nfds = 1;
    int cap = tp->nwatch ? UCX_WATCH_MS : UCX_KEEPALIVE_MS;
    if (*timeout_ms < 0 || *timeout_ms > cap) *timeout_ms = cap;
    return 0;
}

/* ---- the ring ------------------------------------------------------------------------ */

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
    if (lanes & UCX_LANE_SINGLE_COPY) {
        *why = "UCX's rendezvous copies once (cma/knem/xpmem), the ring twice";
        *rptr = NULL;
        return 0;
    }
    if (mapped) {
        *why = "the ring is in shared memory and UCX has no single-copy rendezvous here";
        return 1;
    }
    if (lanes & UCX_LANE_NATIVE) {
        *why = "native RMA";
        return 1;
    }
    *why = lanes & UCX_LANE_EMULATED ? "RMA is emulated by UCX on this transport, tag messages are faster"
                                     : "no RMA lane";
    return 0;
}

static int ucx_ring(oobx_tp_t *base, int prev, int next)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    tp->rrx.peer = prev;
    tp->rtx.peer = next;
    if (prev < 0 || prev == tp->rank || tp->ring_mode == UCX_RING_TAG) return 0;
    if (prev >= tp->nranks || !tp->peers[prev].addr)
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
    memset(rx->base, 0, rx->size);
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

/* ---- devices ------------------------------------------------------------------------- */

typedef struct ucx_dev {
    char tl[UCT_TL_NAME_MAX];
    char dev[UCT_DEVICE_NAME_MAX];
    int type; /* uct_device_type_t */
} ucx_dev_t;

/* Every (transport, device) pair UCX offers in this process, whatever
 * UCX_TLS says. Returns the count (at most max), or -1. */
static int ucx_list_devices(ucx_dev_t *out, int max)
{
    uct_component_h *comps = NULL;
    unsigned ncomps = 0;
    int n = 0;
    if (uct_query_components(&comps, &ncomps) != UCS_OK) return -1;
    for (unsigned c = 0; c < ncomps; c++) {
        uct_component_attr_t ca = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                                 UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
        if (uct_component_query(comps[c], &ca) != UCS_OK || ca.md_resource_count == 0) continue;
        uct_md_resource_desc_t *mds = calloc(ca.md_resource_count, sizeof(*mds));
        if (!mds) continue;
        ca.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        ca.md_resources = mds;
        if (uct_component_query(comps[c], &ca) == UCS_OK) {
            for (unsigned m = 0; m < ca.md_resource_count; m++) {
                uct_md_config_t *mdc = NULL;
                uct_md_h md = NULL;
                if (uct_md_config_read(comps[c], NULL, NULL, &mdc) != UCS_OK) continue;
                ucs_status_t st = uct_md_open(comps[c], mds[m].md_name, mdc, &md);
                uct_config_release(mdc);
                if (st != UCS_OK) continue;
                uct_tl_resource_desc_t *tls = NULL;
                unsigned ntls = 0;
                if (uct_md_query_tl_resources(md, &tls, &ntls) == UCS_OK) {
                    for (unsigned t = 0; t < ntls && n < max; t++) {
                        snprintf(out[n].tl, sizeof(out[n].tl), "%s", tls[t].tl_name);
                        snprintf(out[n].dev, sizeof(out[n].dev), "%s", tls[t].dev_name);
                        out[n].type = (int)tls[t].dev_type;
                        n++;
                    }
                    uct_release_tl_resource_list(tls);
                }
                uct_md_close(md);
            }
        }
        free(mds);
    }
    uct_release_component_list(comps);
    return n;
}

/* RDMA network devices (not tcp), each name once. */
static int ucx_rdma_devices(const ucx_dev_t *devs, int n, const char **names, int max)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (devs[i].type != UCT_DEVICE_TYPE_NET || !strcmp(devs[i].tl, "tcp")) continue;
        int seen = 0;
        for (int j = 0; j < k; j++) seen |= !strcmp(names[j], devs[i].dev);
        if (!seen && k < max) names[k++] = devs[i].dev;
    }
    return k;
}

/* With several RDMA devices and no choice made by the user, the one closest
 * to this rank (oobx__topo_pick_device). Fills dev (or leaves it empty). */
static void ucx_pick_device(const oobx_settings_t *set, const oobx_log_t *log, char *dev, size_t len)
{
    dev[0] = '\0';
    ucx_dev_t devs[128];
    int n = ucx_list_devices(devs, (int)OOBX_ARRAY_SIZE(devs));
    const char *names[64];
    int k = n > 0 ? ucx_rdma_devices(devs, n, names, (int)OOBX_ARRAY_SIZE(names)) : 0;
    if (k < 2) return;
    topo_request_t req = {.pci_target = set->topo_pci[0] ? set->topo_pci : NULL};
    char why[256] = "";
    int i = oobx__topo_pick_device(&req, names, k, why, sizeof(why));
    if (i < 0 || i >= k) {
        OOBX_INFO(log, "ucx: %d RDMA devices, none picked (%s); UCX chooses", k, why);
        return;
    }
    snprintf(dev, len, "%s", names[i]);
    OOBX_INFO(log, "ucx: network device %s of %d RDMA devices: %s", dev, k, why);
}

/* For oobx-info: whether UCX can run here, its transports and devices, and
 * what this transport would use. Returns 0 when a UCX worker can be made. */
int oobx_ucx_describe(FILE *out, const oobx_settings_t *set)
{
    unsigned major = 0, minor = 0, release = 0;
    ucp_get_version(&major, &minor, &release);
    fprintf(out, "UCX %u.%u.%u (built against %d.%d)\n", major, minor, release, UCP_API_MAJOR, UCP_API_MINOR);
    ucx_dev_t devs[128];
    int n = ucx_list_devices(devs, (int)OOBX_ARRAY_SIZE(devs));
    if (n < 0) {
        fprintf(out, "  no UCX components\n");
        return OOBX_ERR_UNAVAILABLE;
    }
    fprintf(out, "  transports and devices UCX offers here:\n");
    for (int i = 0; i < n; i++)
        fprintf(out, "    %-10s %-16s %s\n", devs[i].tl, devs[i].dev,
                devs[i].type == UCT_DEVICE_TYPE_NET ? "network" :
                devs[i].type == UCT_DEVICE_TYPE_SHM ? "shared memory" :
                devs[i].type == UCT_DEVICE_TYPE_SELF ? "loopback in process" : "other");
    const char *tls = getenv("UCX_TLS"), *nd = getenv("UCX_NET_DEVICES");
    fprintf(out, "  UCX_TLS=%s UCX_NET_DEVICES=%s OOBX_NET_DEVICE=%s OOBX_UCX_RING=%s\n", tls ? tls : "(all)",
            nd ? nd : "(all)", set && set->net_device[0] ? set->net_device : "(unset)",
            set && set->ucx_ring[0] ? set->ucx_ring : "auto");
    if (set && !set->net_device[0] && !nd) {
        char dev[64];
        oobx_log_t quiet = {.level = OOBX_LOG_NONE, .fp = NULL};
        ucx_pick_device(set, &quiet, dev, sizeof(dev));
        if (dev[0]) fprintf(out, "  device picked by locality: %s\n", dev);
    }
    ucp_config_t *cfg = NULL;
    ucp_context_h ctx = NULL;
    ucp_worker_h worker = NULL;
    int rc = OOBX_ERR_UNAVAILABLE;
    if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK) return rc;
    if (set && set->net_device[0]) ucp_config_modify(cfg, "NET_DEVICES", set->net_device);
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP};
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    ucs_status_t st = ucp_init(&params, cfg, &ctx);
    ucp_config_release(cfg);
    if (st == UCS_OK) st = ucp_worker_create(ctx, &wp, &worker);
    if (st == UCS_OK) {
        ucp_address_t *a = NULL;
        size_t alen = 0;
        if (ucp_worker_get_address(worker, &a, &alen) == UCS_OK) {
            fprintf(out, "  usable: yes (worker address %zu bytes, card %zu of at most %d)\n", alen,
                    alen + sizeof(ucx_blob_hdr_t), OOBX_ADDR_MAX);
            ucp_worker_release_address(worker, a);
            rc = 0;
        }
    } else {
        fprintf(out, "  usable: no (%s)\n", ucs_status_string(st));
    }
    if (worker) ucp_worker_destroy(worker);
    if (ctx) ucp_cleanup(ctx);
    return rc;
}

/* ---- life cycle ---------------------------------------------------------------------- */

static void ucx_destroy(oobx_tp_t *base);

static int ucx_parse_ring_mode(const char *s)
{
    if (!s || !*s || !strcmp(s, "auto")) return UCX_RING_AUTO;
    if (!strcmp(s, "put")) return UCX_RING_PUT;
    if (!strcmp(s, "tag")) return UCX_RING_TAG;
    return -1;
}

/* "Cannot run here" is not an error under OOBX_TRANSPORT=auto (the core
 * falls back to sockets and says why): recorded, logged at info level. */
static int ucx_unavailable(const oobx_log_t *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int ucx_unavailable(const oobx_log_t *log, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    oobx__set_last_error("%s", msg);
    OOBX_INFO(log, "%s", msg);
    return OOBX_ERR_UNAVAILABLE;
}

static int ucx_create(const oobx_tp_params_t *p, oobx_tp_t **out)
{
    const oobx_settings_t *set = p->settings;
    if (p->nranks < 1 || p->nranks > UCX_RANKS_MAX || p->rank < 0 || p->rank >= p->nranks)
        return oobx__fail(p->log, OOBX_ERR_INVALID, "ucx: rank %d of %d (at most %d ranks)", p->rank,
                         p->nranks, UCX_RANKS_MAX);
    int mode = ucx_parse_ring_mode(set->ucx_ring);
    if (mode < 0)
        return oobx__fail(p->log, OOBX_ERR_INVALID, "ucx: OOBX_UCX_RING=%s; use auto, put or tag",
                         set->ucx_ring);
    ucx_tp_t *tp = calloc(1, sizeof(*tp));
    if (!tp) return oobx__fail(p->log, OOBX_ERR_NOMEM, "ucx: out of memory");
    tp->base.ops = &oobx_ucx_ops;
    tp->rank = p->rank;
    tp->nranks = p->nranks;
    tp->magic = p->magic;
    tp->settings = set;
    tp->log = p->log;
    tp->sink = p->sink;
    tp->efd = -1;
    tp->sleep_fd = -1;
    tp->wake_fd = p->wake_fd;
    tp->ring_mode = mode;
    tp->rrx.peer = -1;
    tp->rtx.peer = -1;
    if (gethostname(tp->host, sizeof(tp->host)) != 0) snprintf(tp->host, sizeof(tp->host), "?");
    tp->host[sizeof(tp->host) - 1] = '\0';
    tp->peers = calloc((size_t)p->nranks, sizeof(*tp->peers));
    tp->dirty = calloc((size_t)p->nranks, sizeof(*tp->dirty));
    if (!tp->peers || !tp->dirty) {
        ucx_destroy(&tp->base);
        return oobx__fail(p->log, OOBX_ERR_NOMEM, "ucx: out of memory for %d peers", p->nranks);
    }
    for (int i = 0; i < p->nranks; i++) {
        tp->peers[i].tp = tp;
        tp->peers[i].rank = i;
    }

    int rc = OOBX_ERR_UNAVAILABLE;
    ucp_config_t *cfg = NULL;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) {
        rc = ucx_unavailable(p->log, "ucx: cannot read the UCX configuration: %s",
                       ucs_status_string(st));
        goto out_destroy;
    }
    /* OOBX_NET_DEVICE narrows this communicator only; UCX_NET_DEVICES and
     * UCX_TLS of the user are kept otherwise (ucp_config_read read them). */
    if (set->net_device[0]) {
        st = ucp_config_modify(cfg, "NET_DEVICES", set->net_device);
        if (st != UCS_OK) {
            ucp_config_release(cfg);
            rc = oobx__fail(p->log, OOBX_ERR_INVALID, "ucx: OOBX_NET_DEVICE=%s refused by UCX: %s",
                           set->net_device, ucs_status_string(st));
            goto out_destroy;
        }
        OOBX_INFO(p->log, "ucx: network device %s (OOBX_NET_DEVICE)", set->net_device);
    } else if (!getenv("UCX_NET_DEVICES")) {
        char dev[64];
        ucx_pick_device(set, p->log, dev, sizeof(dev));
        if (dev[0] && ucp_config_modify(cfg, "NET_DEVICES", dev) != UCS_OK)
            OOBX_WARN(p->log, "ucx: UCX refused device %s; UCX chooses", dev);
    }
    /* UCX finds dead peers by keepalive; its default period (20 s) is longer
     * than a bootstrap should wait to hear of one. */
    if (!getenv("UCX_KEEPALIVE_INTERVAL")) ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", UCX_KEEPALIVE_DEFAULT);
    /* UCX 1.13's cma transport (rendezvous by process_vm_readv) treats a
     * peer that died during a transfer as a fatal error and aborts this
     * process: a surviving rank must get OOBX_ERR_REMOTE instead. So cma is
     * left out unless the user chose the transports. */
    const char *user_tls = getenv("UCX_TLS");
    if (!user_tls) {
        if (ucp_config_modify(cfg, "TLS", "^cma") != UCS_OK)
            OOBX_WARN(p->log, "ucx: UCX refused TLS=^cma; a peer dying during a shared-memory rendezvous may abort "
                      "this process");
    } else if (strstr(user_tls, "cma") && user_tls[0] != '^') {
        OOBX_INFO(p->log, "ucx: UCX_TLS=%s includes cma: with UCX 1.13 a peer dying during a rendezvous over cma "
                  "aborts this process", user_tls);
    }

    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
        .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP,
        .mt_workers_shared = 0,
        .estimated_num_eps = (size_t)p->nranks,
    };
    st = ucp_init(&params, cfg, &tp->ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        tp->ctx = NULL;
        const char *tls = getenv("UCX_TLS"), *nd = getenv("UCX_NET_DEVICES");
        rc = ucx_unavailable(p->log, "ucx: ucp_init failed: %s (UCX_TLS=%s, UCX_NET_DEVICES=%s, OOBX_NET_DEVICE=%s; "
                             "`ucx_info -d` lists the transports and devices)",
                             ucs_status_string(st), tls ? tls : "(all)", nd ? nd : "(all)",
                             set->net_device[0] ? set->net_device : "(unset)");
        goto out_destroy;
    }
    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SERIALIZED,
    };
    st = ucp_worker_create(tp->ctx, &wp, &tp->worker);
    if (st != UCS_OK) {
        tp->worker = NULL;
        rc = ucx_unavailable(p->log, "ucx: cannot create a worker: %s", ucs_status_string(st));
        goto out_destroy;
    }
    st = ucp_worker_get_efd(tp->worker, &tp->efd);
    if (st != UCS_OK) {
        rc = ucx_unavailable(p->log, "ucx: worker has no event fd: %s", ucs_status_string(st));
        goto out_destroy;
    }
    /* one epoll set for both fds: a sleep is one epoll_wait, with no wait
     * queues to register and remove per call as poll() has */
    tp->sleep_fd = epoll_create1(EPOLL_CLOEXEC);
    if (tp->sleep_fd < 0) {
        rc = ucx_unavailable(p->log, "ucx: epoll_create1: %s", strerror(errno));
        goto out_destroy;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 0};
    int erc = epoll_ctl(tp->sleep_fd, EPOLL_CTL_ADD, tp->efd, &ev);
    if (erc == 0 && tp->wake_fd >= 0) {
        ev.data.u32 = 1;
        erc = epoll_ctl(tp->sleep_fd, EPOLL_CTL_ADD, tp->wake_fd, &ev);
    }
    if (erc != 0) {
        rc = ucx_unavailable(p->log, "ucx: epoll_ctl: %s", strerror(errno));
        goto out_destroy;
    }
    st = ucp_worker_get_address(tp->worker, &tp->my_addr, &tp->my_addr_len);
    if (st != UCS_OK) {
        tp->my_addr = NULL;
        rc = ucx_unavailable(p->log, "ucx: no worker address: %s", ucs_status_string(st));
        goto out_destroy;
    }
    if (sizeof(ucx_blob_hdr_t) + tp->my_addr_len > OOBX_ADDR_MAX) {
        rc = ucx_unavailable(p->log,
                       "ucx: the worker address is %zu bytes, more than the %d an address card holds; "
                       "narrow UCX_TLS or OOBX_NET_DEVICE",
                       tp->my_addr_len, OOBX_ADDR_MAX - (int)sizeof(ucx_blob_hdr_t));
        goto out_destroy;
    }
    OOBX_DEBUG(p->log, "ucx: worker ready, address of %zu bytes, ring %s", tp->my_addr_len,
               ucx_ring_mode_name(mode));
    *out = &tp->base;
    return 0;

out_destroy:
    ucx_destroy(&tp->base);
    return rc;
}

static int ucx_address(oobx_tp_t *base, void *blob, size_t *len)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    size_t need = sizeof(ucx_blob_hdr_t) + tp->my_addr_len;
    if (*len < need)
        return oobx__fail(tp->log, OOBX_ERR_INVALID, "ucx: address needs %zu bytes, %zu given", need, *len);
    *len = ucx_card_encode((uint32_t)getpid(), tp->host, tp->my_addr, tp->my_addr_len, blob, *len);
    return 0;
}

static int ucx_set_peer(oobx_tp_t *base, int peer, const void *blob, size_t len)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    ucx_card_t card;
    char why[200];
    if (peer < 0 || peer >= tp->nranks)
        return oobx__fail(tp->log, OOBX_ERR_INVALID, "ucx: address for rank %d of %d", peer, tp->nranks);
    int rc = ucx_card_decode(blob, len, &card, why, sizeof(why));
    if (rc) return oobx__fail(tp->log, rc, "ucx: address of rank %d: %s", peer, why);
    ucx_peer_t *p = &tp->peers[peer];
    void *copy = malloc(card.addr_len);
    if (!copy) return oobx__fail(tp->log, OOBX_ERR_NOMEM, "ucx: out of memory");
    memcpy(copy, card.addr, card.addr_len);
    free(p->addr);
    p->addr = copy;
    p->addr_len = card.addr_len;
    snprintf(p->host, sizeof(p->host), "%s", card.host);
    p->pid = card.hdr.pid;
    return 0;
}

static void ucx_peer_name(oobx_tp_t *base, int peer, char *buf, size_t len)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    if (peer >= 0 && peer < tp->nranks && tp->peers[peer].addr)
        snprintf(buf, len, "rank %d (ucx %s pid %u)", peer, tp->peers[peer].host, tp->peers[peer].pid);
    else
        snprintf(buf, len, "rank %d (ucx)", peer);
}

/* Progresses the worker until req completes or ms pass. */
static void ucx_wait_req(ucx_tp_t *tp, ucs_status_ptr_t req, int ms)
{
    if (req == NULL || UCS_PTR_IS_ERR(req)) return;
    uint64_t deadline = oobx__deadline(ms);
    while (ucp_request_check_status(req) == UCS_INPROGRESS && oobx__now_ns() < deadline)
        ucp_worker_progress(tp->worker);
    if (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_request_cancel(tp->worker, req);
    ucp_request_free(req);
}

/* Takes and drops every message still queued in UCX (so none is left unmatched). */
static void ucx_discard_unexpected(ucx_tp_t *tp)
{
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    for (int k = 0; k < 100000 && (msg = ucp_tag_probe_nb(tp->worker, 0, 0, 1, &info)) != NULL; k++) {
        void *buf = malloc(info.length ? info.length : 1);
        ucp_request_param_t prm = {.op_attr_mask = 0};
        ucs_status_ptr_t ptr = buf ? ucp_tag_msg_recv_nbx(tp->worker, buf, info.length, msg, &prm)
                                   : ucp_tag_msg_recv_nbx(tp->worker, NULL, 0, msg, &prm);
        ucx_wait_req(tp, ptr, 100);
        free(buf);
    }
}

static void ucx_destroy(oobx_tp_t *base)
{
    if (!base) return;
    ucx_tp_t *tp = (ucx_tp_t *)base;
    tp->destroying = 1;
    if (tp->worker && tp->peers) {
        /* give sends in flight a short bound to finish */
        uint64_t deadline = oobx__deadline(200);
        while (tp->rtx.q_head && oobx__now_ns() < deadline) {
            ucp_worker_progress(tp->worker);
            ucx_probe(tp);
            while (tp->ndirty > 0) {
                int peer = tp->dirty[--tp->ndirty];
                tp->peers[peer].dirty = 0;
                ucx_peer_drain(tp, peer);
            }
        }
        for (int i = 0; i < tp->nranks; i++) {
            ucx_peer_t *p = &tp->peers[i];
            if (!p->failed) p->fail_status = OOBX_ERR_ABORTED;
            p->failed = 1;
            ucx_peer_drop(tp, i);
        }
        /* let connection set-up messages that peers are waiting for go out
         * (UCX 1.13 cannot drop a pending wireup reply at worker destroy) */
        uint64_t quiet_deadline = oobx__deadline(UCX_QUIESCE_MS);
        int idle = 0;
        while (idle < 20 && oobx__now_ns() < quiet_deadline) {
            if (ucp_worker_progress(tp->worker))
                idle = 0;
            else
                idle++;
        }
        /* close every endpoint at once (flushing what is queued), then give
         * them a common bound */
        void **closing = calloc((size_t)tp->nranks, sizeof(*closing));
        int nclosing = 0;
        for (int i = 0; i < tp->nranks; i++) {
            ucx_peer_t *p = &tp->peers[i];
            if (!p->ep) continue;
            ucp_request_param_t prm = {
                .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                .flags = p->fail_reported || !closing ? UCP_EP_CLOSE_FLAG_FORCE : 0,
            };
            ucs_status_ptr_t req = ucp_ep_close_nbx(p->ep, &prm);
            p->ep = NULL;
            if (req && !UCS_PTR_IS_ERR(req)) {
                if (closing)
                    closing[nclosing++] = req;
                else
                    ucx_wait_req(tp, req, 100);
            }
        }
        uint64_t close_deadline = oobx__deadline(UCX_CLOSE_MS);
        for (int i = 0; i < nclosing; i++) {
            while (ucp_request_check_status(closing[i]) == UCS_INPROGRESS && oobx__now_ns() < close_deadline)
                ucp_worker_progress(tp->worker);
            if (ucp_request_check_status(closing[i]) == UCS_INPROGRESS) ucp_request_cancel(tp->worker, closing[i]);
            ucp_request_free(closing[i]);
        }
        free(closing);
        for (int n = 0; n < 64 && ucp_worker_progress(tp->worker); n++) {
        }
        /* receives cancelled above whose callbacks came: their requests go
         * back to UCX before the worker does */
        ucx_orphans_sweep(tp);
        ucx_discard_unexpected(tp);
    }
    if (tp->rtx.rkey) ucp_rkey_destroy(tp->rtx.rkey);
    free(tp->rtx.setup);
    free(tp->rtx.heads);
    if (tp->rrx.memh) ucp_mem_unmap(tp->ctx, tp->rrx.memh);
    if (tp->my_addr) ucp_worker_release_address(tp->worker, tp->my_addr);
    if (tp->sleep_fd >= 0) close(tp->sleep_fd);
    if (tp->worker) ucp_worker_destroy(tp->worker);
    if (tp->ctx) ucp_cleanup(tp->ctx);
    /* what UCX never completed: the worker is gone, so are its requests */
    while (tp->live) {
        ucx_sreq_t *s = tp->live;
        tp->live = s->live_next;
        free(s);
    }
    while (tp->orphans) {
        ucx_rrec_t *r = tp->orphans;
        tp->orphans = r->next;
        if (r->buf != r->small) free(r->buf);
        free(r);
    }
    while (tp->sreq_pool) {
        ucx_sreq_t *s = tp->sreq_pool;
        tp->sreq_pool = s->next;
        free(s);
    }
    while (tp->rrec_pool) {
        ucx_rrec_t *r = tp->rrec_pool;
        tp->rrec_pool = r->next;
        free(r);
    }
    if (tp->peers)
        for (int i = 0; i < tp->nranks; i++) free(tp->peers[i].addr);
    free(tp->peers);
    free(tp->dirty);
    free(tp);
}

const oobx_tp_ops_t oobx_ucx_ops = {
    .version = OOBX_TP_VERSION,
    .name = "ucx",
    .create = ucx_create,
    .address = ucx_address,
    .set_peer = ucx_set_peer,
    .ring = ucx_ring,
    .send = ucx_send,
    .progress = ucx_progress,
    .wait_prepare = ucx_wait_prepare,
    .sleep = ucx_sleep,
    .peer_name = ucx_peer_name,
    .destroy = ucx_destroy,
};
