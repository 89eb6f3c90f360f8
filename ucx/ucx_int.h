/*
 * The UCX transport's objects, shared by ucx.c (the ops, create and destroy,
 * progress, endpoints and peer failures), ucx_dev.c (devices, address
 * cards), ucx_ring.c (the ring link) and ucx_msg.c (messages). Private to
 * ucx/.
 */
#ifndef OOBX_UCX_INT_H
#define OOBX_UCX_INT_H

#include <stddef.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include "cma.h"
#include "log.h"
#include "ringbuf.h"
#include "tp_common.h"
#include "tp_module.h"
#include "transport.h"
#include "util.h"

#define UCX_INLINE_MAX 256u        /* header + payload copied into the send record */
#define UCX_PREPOST 4              /* receives kept posted for the next small messages */
#define UCX_SEQ_WINDOW 65536u      /* how far ahead of the next expected a sequence number may be */
#define UCX_KEEPALIVE_MS 1000      /* wake-up period while sleeping, for keepalive */
#define UCX_KEEPALIVE_DEFAULT "500ms"
#define UCX_MM_RX_GROW_DEFAULT "64" /* shared-memory receive buffers made at a time (UCX: 512) */
#define UCX_QUIESCE_MS 50          /* progress before closing, at destroy */
#define UCX_CLOSE_MS 500           /* bound on flushing endpoints at destroy */
#define UCX_WATCH_MS 300           /* period of the pid check of peers on this host */
#define UCX_WATCH_EVERY 32         /* progress calls of a polling rank between two looks at the clock for it */

typedef struct ucx_tp ucx_tp_t;

/* A send: one core message (or an internal control message). */
typedef struct ucx_sreq {
    struct ucx_sreq *next;      /* ring send queue */
    struct ucx_sreq *live_prev, *live_next; /* every unfinished send of the instance */
    ucx_tp_t *tp;
    oobx_tp_req_t *req;         /* the core's record, NULL for control messages (or once failed early) */
    int peer;                   /* where it goes (-1: not a core send) */
    oobx_msg_hdr_t hdr;         /* wire copy of the header */
    const void *payload;
    ucp_dt_iov_t iov[2];
    int pending;                /* UCX operations not yet complete */
    int issued;                 /* every operation has been started */
    int poolable;               /* plain size: may go back to the pool */
    int status;
    void *own;                  /* the payload's copy once its call gave the buffer back (ucx_release) */
    oobx__cma_ticket_t ticket;  /* a PULL's (cma.h) */
    int wait_old;               /* operations started from the caller's buffer may still be out */
    struct ucx_sreq *pull_next; /* the peer's PULLs waiting for their answer */
    uint32_t pull_seq;          /* the sequence number of its PULL */
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
    int dropped;            /* the core wants no payload: DATA is received into nothing */
    int status;
    void *cookie;
    void *dst;              /* where the DATA receive writes (NULL: nowhere) */
    size_t data_len;
    int released;           /* the caller took dst back: received into nowhere from here on */
    int repost;             /* a released DATA receive was cancelled before it matched: post it again, into nowhere */
    unsigned char small[UCX_INLINE_MAX]; /* buf of a small message */
} ucx_rrec_t;

/* A receive kept posted for any message but a payload (tag type bits
 * free, DATA bit clear): a small message lands in its buffer as UCX takes
 * it in, where one that waits in UCX's unexpected queue costs a probe, a
 * second receive and a copy more. UCX_PREPOST of them per transport. */
typedef struct ucx_prepost {
    ucx_tp_t *tp;
    void *ureq;              /* the posted receive, NULL when none */
    int done;                /* on the done list */
    ucs_status_t status;
    ucp_tag_recv_info_t info; /* the sender's tag and the length */
    struct ucx_prepost *next_done;
    unsigned char *buf;      /* tp->pp_bytes */
} ucx_prepost_t;

typedef struct ucx_peer {
    ucx_tp_t *tp;
    int rank;
    ucp_address_t *addr;
    size_t addr_len;
    char host[48];
    uint32_t pid;
    ucp_ep_h ep;
    int watch_pid;          /* no UCX error handling on this endpoint: watch the peer's pid */
    oobx__peer_fail_t fail; /* the link is gone, and why */
    uint32_t tx_seq;        /* tag sequence numbers, this rank -> peer */
    uint32_t rx_seq;        /* the next one this rank begins from the peer: records begin in this order */
    ucx_rrec_t *rx_head, *rx_tail;
    int dirty;              /* on the dirty list */
    oobx__cma_peer_t cma;   /* its single-copy identity: large payloads are pulled from it */
    ucx_sreq_t *pull_head, *pull_tail; /* sends whose PULL waits for the answer, in order */
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
    int early_peer;         /* a SETUP that came before ring() named its sender next (-1: none) */
    unsigned char *early;
    size_t early_len;
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
    int creating;           /* inside create: UCX's words on its configuration are the user's business */
    int ucx_log_user;       /* UCX_LOG_LEVEL is set: UCX prints as the user asked */
    int tcp_put_off;        /* UCX_TCP_PUT_ENABLE=n set by this transport (see ucx_create) */
    int mm_grow_set;        /* MM_RX_BUFS_GROW set by this transport (see ucx_create) */
    /* The same-host departure board: a byte per rank, set by a rank as it
     * releases its transport. A peer on this host is told of a death by its
     * pid, and a goodbye cannot always reach it (no endpoint to it); the
     * board tells a rank that left in order from one that died. */
    unsigned char *board;
    size_t board_len;
    char board_path[96];
    ucx_sreq_t *sreq_pool;  /* free send records */
    ucx_rrec_t *rrec_pool;  /* free receive records */
    int nsreq_pool, nrrec_pool;
    oobx__cma_self_t cma;   /* this rank's single-copy identity */
    size_t cma_min;         /* OOBX_CMA_MIN */
    unsigned ctrl_sent;     /* control messages sent so far (ucx_send_ctrl) */
    int nwatch;             /* peers with watch_pid */
    ucx_prepost_t pp[UCX_PREPOST]; /* receives kept posted (pp_on) */
    size_t pp_bytes;               /* each one's buffer: ucx_msg_max() */
    int pp_on;
    /* a message may wait in UCX's unexpected queue: a kept receive is not
     * posted (a post failed, or they are stopped), or wait_prepare saw one */
    int probe_due;
    ucx_prepost_t *pp_done_head, *pp_done_tail; /* completed, in completion order */
    /* one taken-in receive posted again at the next progress, not at once:
     * the post (a look into UCX's unexpected queue among it) then falls in
     * the wait for the next message, not between a message and its answer */
    ucx_prepost_t *pp_later;
    uint64_t next_watch_ns; /* next look at their pids */
    unsigned watch_turn;    /* progress calls since the last look at the clock for it */
    int watch_now;          /* the next progress looks (a sleep came before it) */
};

enum { UCX_RING_AUTO = 0, UCX_RING_PUT = 1, UCX_RING_TAG = 2 };

/* ---- shared inside ucx/ (not exported from the module) ---- */

#pragma GCC visibility push(hidden)

/* ucx.c: endpoints, peers and failures */
/* 1 when the user sized UCX's shared-memory receive pools (UCX_{MM,POSIX,SYSV}_RX_BUFS_GROW):
 * ucx_create then leaves them as UCX makes them. */
int ucx_mm_pools_sized_by_user(void);
void ucx_mark_dirty(ucx_tp_t *tp, int peer);
/* Records that peer failed (reported, once, at the end of progress). */
void ucx_peer_fail(ucx_tp_t *tp, int peer, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int ucx_pid_alive(uint32_t pid);
void ucx_peer_watch(ucx_tp_t *tp, int peer);
/* 1 when peer's address is known, asking the core for it first if needed
 * (the node-aware path hands addresses out on first use). */
int ucx_peer_known(ucx_tp_t *tp, int peer);
ucp_ep_h ucx_peer_ep(ucx_tp_t *tp, int peer);
/* Progresses the worker until req completes or ms pass. */
void ucx_wait_req(ucx_tp_t *tp, ucs_status_ptr_t req, int ms);

/* ucx_dev.c: devices and address cards */
void ucx_pick_device(const oobx_settings_t *set, const oobx_log_t *log, char *dev, size_t len);
int ucx_address(oobx_tp_t *base, void *blob, size_t *len);
int ucx_set_peer(oobx_tp_t *base, int peer, const void *blob, size_t len);

/* ucx_ring.c: the ring link */
const char *ucx_ring_mode_name(int m);

/* The settings the transport owns (ucx.c). */
typedef struct ucx_settings {
    char ring[16]; /* OOBX_UCX_RING: auto, put, tag */
    int pull;      /* OOBX_UCX_PULL */
} ucx_settings_t;
extern const oobx_setting_desc_t ucx_settings_table[];
void ucx_describe(FILE *out, const oobx_settings_t *set, const oobx_core_api_t *core);
int ucx_ring(oobx_tp_t *base, int prev, int next);
void ucx_handle_setup(ucx_tp_t *tp, int peer, const void *buf, size_t len);
void ucx_ring_activate(ucx_tp_t *tp);
void ucx_ring_push(ucx_tp_t *tp);

/* ucx_msg.c: messages */
void ucx_sreq_track(ucx_sreq_t *s, ucs_status_ptr_t ptr);
ucp_request_param_t ucx_send_param(ucx_sreq_t *s);
void ucx_sreq_issued(ucx_sreq_t *s);
void ucx_send_ctrl(ucx_tp_t *tp, int peer, int type, const void *data, size_t len);
void ucx_release(oobx_tp_t *base, const void *buf, size_t len);
/* Reports the failures recorded so far to the core and drops those peers (their endpoints closed). */
void ucx_report_failures(ucx_tp_t *tp);
int ucx_send(oobx_tp_t *base, int peer, const oobx_msg_hdr_t *hdr, const void *payload,
             oobx_tp_req_t *req);
void ucx_rrec_free(ucx_rrec_t *r);
void ucx_protocol_error(ucx_tp_t *tp, int peer, const char *what);
void ucx_peer_drain(ucx_tp_t *tp, int peer);
/* Takes in every non-DATA message that came: the kept receives' (in the
 * order UCX completed them, each posted again), then what waits in UCX's
 * queue. */
void ucx_probe(ucx_tp_t *tp);
/* The kept receives: posted at create (0, or why not), cancelled at
 * destroy. */
int ucx_prepost_start(ucx_tp_t *tp);
int ucx_prepost_refill(ucx_tp_t *tp);
void ucx_prepost_stop(ucx_tp_t *tp);
void ucx_pull_drop(ucx_tp_t *tp, int peer);

#pragma GCC visibility pop

#endif
