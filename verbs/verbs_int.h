/*
 * The verbs transport's objects, shared by verbs.c (messages, the ops) and
 * verbs_cm.c (connections). Private to verbs/.
 */
#ifndef OOBX_VERBS_INT_H
#define OOBX_VERBS_INT_H

#include <stdint.h>

#include "tp_common.h"
#include <sys/socket.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "auth.h"
#include "ringbuf.h"
#include "verbs.h"

#define VERBS_WR_RECV 1
#define VERBS_WR_SEND 2
#define VERBS_WR_READ 3
#define VERBS_PEER_MAX ((1 << 24) - 1)
#define VERBS_STASH 32
#define VERBS_CQ_EVENTS_ACK 16  /* completion events acknowledged in batches of */
#define VERBS_PER_QP_CQE (VERBS_SEND_SLOTS + VERBS_READ_MAX + VERBS_RECV_DEPTH)
#define VERBS_CROSSED_MS 2000  /* wait for the peer's connection after a crossing, then connect again */

enum { VERBS_SEND_EAGER = 1, VERBS_SEND_RNDV = 2, VERBS_SEND_RING = 3 };
enum { VERBS_CONN_ADDR = 1, VERBS_CONN_ROUTE, VERBS_CONN_CONNECTING, VERBS_CONN_ACCEPTING, VERBS_CONN_UP };

typedef struct verbs_tp verbs_tp_t;

/* A message to send. */
typedef struct verbs_send {
    struct verbs_send *next;
    int type;               /* VERBS_SEND_* */
    oobx_tp_req_t *req;
    oobx_msg_hdr_t hdr;
    const void *payload;
    struct ibv_mr *mr;      /* the payload, registered (rendezvous, large ring messages) */
    uint64_t id;            /* rendezvous id, echoed by FIN */
    int pending;            /* posted writes that read the payload through mr */
    int issued;             /* every chunk posted */
    void *own;              /* a copy of a small payload that had to wait (the request is done), or of one
                             * whose call gave the caller's buffer back (verbs_release) */
    struct ibv_mr *old_mr;  /* the caller's buffer, registered, until the reads or writes on it are over */
    int old_left;           /* posted writes that still read through old_mr (a ring message) */
} verbs_send_t;

/* A control message waiting for a credit. */
typedef struct verbs_ctrl {
    struct verbs_ctrl *next;
    int type;
    uint32_t len;
    unsigned char body[sizeof(verbs_setup_t)];
} verbs_ctrl_t;

/* An incoming message, in its sender's order. */
typedef struct verbs_rrec {
    struct verbs_rrec *next;
    void *cookie;
    int has_msg;            /* msg_end is owed */
    int complete;           /* payload in place */
    /* rendezvous */
    int rndv;
    uint64_t raddr, len, issued, done, id;
    uint32_t rkey;
    void *dst;
    struct ibv_mr *mr;
    int discard;            /* the caller took dst back: no more reads, done when those out are in */
    int moved;              /* MOVED came: read again from its start at maddr once the reads out are in */
    uint64_t maddr;
    uint32_t mrkey;
} verbs_rrec_t;

typedef struct verbs_conn {
    int peer;
    oobx_auth_t auth;       /* the nonces (rdma_cm private data) and the connector's hello */
    int proved;             /* the peer's AUTH checked: messages other than AUTH may flow */
    int sent_proof;         /* this side's AUTH is posted */
    uint16_t serial;
    int state;              /* VERBS_CONN_* */
    int passive;            /* accepted here */
    int counted;            /* holds a QP (counts against links_max) */
    struct rdma_cm_id *id;
    struct ibv_qp *qp;
    unsigned char *rbuf, *sbuf;
    struct ibv_mr *rmr, *smr;
    uint32_t free_slots[VERBS_SEND_SLOTS];
    uint32_t nfree;
    verbs_send_t *slot_owner[VERBS_SEND_SLOTS];
    uint32_t tx_credits;    /* receives the peer has posted for us */
    uint32_t rx_owed;       /* receives re-posted here, not yet reported */
    uint32_t reads_out;
    verbs_rrec_t *read_owner[VERBS_READ_MAX];
    uint64_t read_len[VERBS_READ_MAX];
} verbs_conn_t;

typedef struct verbs_peer {
    int have_addr;
    struct sockaddr_storage addr;
    char addr_text[96];     /* "127.0.0.1:41233" */
    char dev[VERBS_DEV_NAME_MAX];
    uint32_t pid;
    verbs_conn_t *conn;
    verbs_send_t *sq_head, *sq_tail; /* in order */
    verbs_ctrl_t *ctl_head, *ctl_tail;
    verbs_send_t *wait;        /* issued, waiting for FIN or write completions */
    verbs_rrec_t *rx_head, *rx_tail;
    int unread;             /* rendezvous records with READs still to post */
    int ring_credit_due;
    uint64_t ring_credit;
    int crossed;            /* our attempt lost a crossing: the peer's connection is coming */
    uint64_t crossed_deadline; /* ... or we connect again then */
    oobx__peer_fail_t fail; /* the link is gone, and why */
    int dirty;
} verbs_peer_t;

struct verbs_tp {
    oobx_tp_t base;
    int rank, nranks;
    uint64_t magic;
    unsigned char secret[OOBX_SECRET_BYTES];
    const oobx_settings_t *settings;
    const oobx_core_api_t *core; /* the core's services */
    const oobx_log_t *log;
    oobx_tp_sink_t sink;
    char dev[VERBS_DEV_NAME_MAX];
    int port_num;
    struct sockaddr_storage my_addr;
    char my_text[96];
    uint64_t host_id;
    struct rdma_event_channel *ec;
    struct rdma_cm_id *listen_id;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    int cq_size;
    unsigned unacked;       /* completion events not yet acknowledged */
    uint32_t read_depth;
    uint64_t read_piece;
    int links_max, nconns;
    uint16_t next_serial;
    uint64_t next_rndv;
    verbs_peer_t *peers;
    int *dirty;
    int ndirty;
    int fail_pending;
    int fatal;
    int destroying;
    int ncrossed;           /* peers waiting for their own connection after a crossing */
    verbs_stats_t st;
    struct ibv_wc stash[VERBS_STASH]; /* completions polled by wait_prepare */
    int nstash;
    oobx_ratelimit_t rl;
    /* ring link prev -> me */
    int rx_peer;
    void *rx_base;
    size_t rx_size;
    struct ibv_mr *rx_mr;
    ringbuf_rx_t rrb;
    verbs_rrec_t *rx_cur;
    void *rx_dest;
    /* ring link me -> next */
    int tx_peer;
    int tx_active;
    uint64_t tx_raddr;
    uint32_t tx_rkey;
    ringbuf_tx_t trb;
    /* a successor's ring buffer that came before this rank knew its
     * successor (node-aware init: a leader's successor may finish first) */
    int tx_early_peer; /* -1: none */
    verbs_setup_t tx_early;
};

static inline uint64_t verbs_wrid(const verbs_conn_t *c, int kind, uint32_t idx)
{
    return ((uint64_t)(uint32_t)c->peer << 40) | ((uint64_t)c->serial << 24) | ((uint64_t)kind << 20) | idx;
}

/* ---- shared between verbs.c and verbs_cm.c (not exported from the module) ---- */

#pragma GCC visibility push(hidden)

/* "rank 3 (127.0.0.1:41233)" */
const char *verbs_who(verbs_tp_t *tp, int peer, char *buf, size_t len);
/* 1 when peer's address is known, asking the core for it first if needed. */
int verbs_peer_known(verbs_tp_t *tp, int peer);
void verbs_mark_dirty(verbs_tp_t *tp, int peer);
/* Records that peer failed (reported, once, at the end of progress). */
void verbs_peer_fail(verbs_tp_t *tp, int peer, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Handles what wait_prepare polled, then polls the CQ until it is empty (at most rounds batches). */
void verbs_poll_cq(verbs_tp_t *tp, int rounds);

/* verbs_cm.c: connections */
void verbs_conn_free(verbs_tp_t *tp, verbs_conn_t *c, int disconnect);
void verbs_conn_start(verbs_tp_t *tp, int peer);
void verbs_reject(verbs_tp_t *tp, struct rdma_cm_id *id, uint32_t code);
void verbs_cm_poll(verbs_tp_t *tp);
void verbs_crossed_check(verbs_tp_t *tp);

#pragma GCC visibility pop

#endif
