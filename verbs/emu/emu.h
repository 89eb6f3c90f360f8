/*
 * The emulated RDMA device: internal declarations shared by emu_verbs.c (the
 * libibverbs entry points), emu_wire.c (queue pairs and the data path) and
 * emu_cm.c (the librdmacm entry points). docs/transports/verbs-emu.md
 * describes the device for users.
 *
 * One registry per process holds the devices, the memory-region table and
 * the device thread. Every object of the emulation is guarded by the one
 * registry mutex; the device thread takes it for each batch of socket events
 * and never blocks while holding it (sockets are non-blocking, work per event
 * is bounded), so an application call waits at most for one bounded step.
 */
#ifndef OOBX_VERBS_EMU_H
#define OOBX_VERBS_EMU_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#pragma GCC visibility push(hidden)

/* Limits the device reports and enforces. */
#define EMU_MAX_QP_WR     16384
#define EMU_MAX_SGE       16
#define EMU_MAX_CQE       65536
#define EMU_MAX_INLINE    256
#define EMU_MAX_RD_ATOM   16
#define EMU_MAX_MSG       (1ull << 31)
#define EMU_MAX_MR_SIZE   (1ull << 40)
#define EMU_PDATA_CONNECT 56  /* private data of a connect request (IB CM REQ less the CM header) */
#define EMU_PDATA_ACCEPT  196 /* of an accept (IB CM REP) */
#define EMU_PDATA_REJECT  148 /* of a reject (IB CM REJ) */
#define EMU_REJ_CONSUMER  28  /* reject status: the peer application rejected */
#define EMU_REJ_NO_LISTEN 8   /* reject status: nothing listens on that port (invalid service id) */

/* ---- wire format (native byte order: both ends are on this host) -------- */

enum emu_frame_type {
    EMU_F_CONNECT = 1, /* payload: emu_hello */
    EMU_F_ACCEPT,      /* payload: emu_hello */
    EMU_F_REJECT,      /* payload: emu_hello */
    EMU_F_RTU,         /* initiator: ready to use, after the accept */
    EMU_F_DISC,        /* either side: disconnect */
    EMU_F_SEND,        /* len payload bytes follow */
    EMU_F_SEND_IMM,
    EMU_F_WRITE,       /* raddr, rkey; len payload bytes follow */
    EMU_F_WRITE_IMM,
    EMU_F_READ_REQ,    /* raddr, rkey, len; no payload */
    EMU_F_READ_RESP,   /* seq of the read; len payload bytes follow */
    EMU_F_ACK,         /* seq executed */
    EMU_F_NAK,         /* seq failed at the responder; status: the initiator's ibv_wc_status */
    EMU_F_MAX
};

struct emu_frame {
    uint8_t type;
    uint8_t status;
    uint16_t flags;
    uint32_t len;
    uint64_t seq;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t imm; /* network order, as posted */
};

#define EMU_HELLO_MAGIC   0x4f58454du /* "OXEM" */
#define EMU_HELLO_VERSION 1

struct emu_hello {
    uint32_t magic;
    uint16_t version;
    uint16_t pdata_len;
    uint32_t qp_num;
    uint8_t responder_resources;
    uint8_t initiator_depth;
    uint8_t flow_control;
    uint8_t retry_count;
    uint8_t rnr_retry_count;
    uint8_t srq;
    uint8_t pad[2];
    uint8_t pdata[EMU_PDATA_ACCEPT];
};

/* ---- objects ------------------------------------------------------------- */

struct emu_dev {
    struct ibv_device dev; /* first: the public object */
    struct emu_dev *next;
    uint64_t guid;         /* host order */
    struct emu_ctx *cm_ctx; /* the context all rdma_cm ids on this device share */
};

struct emu_pd;

struct emu_ctx {
    struct verbs_context vctx; /* the public ibv_context is its last member */
    struct emu_dev *dev;
    int refs;                  /* the opener or the ids, and every child object */
    bool shared;               /* dev->cm_ctx */
    struct emu_pd *hidden_pd;  /* rdma_create_qp(id, NULL, ...) */
};

struct emu_pd {
    struct ibv_pd pd;
    int refs; /* MRs and QPs on it */
    bool hidden;
};

struct emu_mr {
    struct ibv_mr mr;
    struct emu_mr *hnext; /* key hash chain */
    uint64_t iova;
    unsigned access;
    int refs;  /* the table, and every in-flight transfer segment */
    bool dead; /* deregistered: transfers in flight read zeros / drop bytes */
};

struct emu_cq;
struct emu_cqev {
    struct emu_cqev *next;
    struct emu_cq *cq;
};

struct emu_cch {
    struct ibv_comp_channel ch;
    struct emu_cqev *head, *tail; /* events not yet taken by ibv_get_cq_event */
    int ncq;
    bool signaled; /* the eventfd counter is non-zero */
};

struct emu_cq {
    struct ibv_cq cq;
    struct ibv_wc *ring;
    int cap, first, count;
    int nqp;     /* QPs that use it */
    int unacked; /* events taken, not yet acked */
    bool armed, broken;
};

/* segment of a transfer: user memory under an MR reference, or a private buffer (mr NULL) */
struct emu_seg {
    struct emu_mr *mr;
    uint8_t *ptr;
    size_t len;
};

/* a send-queue work request, from post to completion */
struct emu_swr {
    struct emu_swr *next;
    uint64_t wr_id;
    uint64_t seq;
    int opcode;          /* IBV_WR_* */
    bool signaled;
    int local_err;       /* IBV_WC_LOC_PROT_ERR when a local SGE was bad, else 0 */
    uint64_t len;
    int nseg;
    struct emu_seg seg[EMU_MAX_SGE]; /* READ: where the data lands */
};

struct emu_rwr {
    struct emu_rwr *next;
    uint64_t wr_id;
    int num_sge;
    struct ibv_sge sge[EMU_MAX_SGE];
};

/* a request held at the responder until a receive is posted (RNR) */
struct emu_held {
    struct emu_held *next;
    struct emu_frame hdr;
    uint8_t *data;
};

struct emu_conn;
struct emu_id;

struct emu_qp {
    struct ibv_qp qp;
    struct ibv_qp_cap cap;
    bool sig_all;
    struct emu_conn *conn;
    struct emu_id *id;
    uint32_t peer_qpn;
    struct emu_swr *sq_head, *sq_tail;
    int sq_count;   /* posted, not completed */
    int unsig_done; /* unsignaled WRs executed, waiting for a signaled completion to free their slots */
    bool sq_blocked; /* a WR with a local error is queued: nothing after it goes out */
    uint64_t next_seq;
    struct emu_rwr *rq_head, *rq_tail;
    int rq_count;
    struct emu_held *held_head, *held_tail;
    size_t held_bytes;
};

/* something registered in the device thread's epoll */
enum emu_poll_kind { EMU_POLL_STOP = 1, EMU_POLL_LISTENER, EMU_POLL_CONN };

struct emu_poll {
    int kind;
    int fd;
    uint32_t events;
    bool registered;
    bool dead;               /* closed; freed by the device thread later */
    struct emu_poll *grave_next;
    uint64_t grave_cycle, grave_epoch;
};

struct emu_listener {
    struct emu_poll p; /* first */
    struct emu_id *id;
};

/* one item of a connection's transmit queue: a header, then segments */
struct emu_tx {
    struct emu_tx *next;
    uint8_t hdr[sizeof(struct emu_frame) + EMU_MAX_INLINE]; /* frame, then hello or inline data */
    size_t hlen, hoff;
    int nseg, cur;
    size_t off;
    bool own_request;          /* one of our requests: dropped when the QP fails before it starts */
    bool started;
    struct emu_seg seg[];      /* nseg entries */
};

enum emu_conn_state {
    EMU_CONN_CONNECTING = 1, /* initiator: TCP connect in progress */
    EMU_CONN_WAIT_REPLY,     /* initiator: CONNECT sent */
    EMU_CONN_HELLO,          /* passive: accepted socket, waiting for CONNECT */
    EMU_CONN_REQ,            /* passive: CONNECT_REQUEST delivered, waiting for accept/reject */
    EMU_CONN_WAIT_RTU,       /* passive: accepted */
    EMU_CONN_UP,
    EMU_CONN_REJECTING,      /* passive: REJECT queued; closes when sent */
    EMU_CONN_CLOSING,        /* disconnected; the socket stays until EOF or id destroy */
    EMU_CONN_DEAD            /* socket closed */
};

enum emu_rx_state { EMU_RX_HDR, EMU_RX_PAYLOAD, EMU_RX_PENDING };

enum emu_sink_kind { EMU_SINK_DISCARD, EMU_SINK_SEGS };

struct emu_sink {
    int kind;
    int nseg, cur;
    size_t off;
    struct emu_seg seg[EMU_MAX_SGE];
};

/* what to do when the payload of the current frame is in */
enum emu_rx_done {
    EMU_DONE_NONE,
    EMU_DONE_HELLO,  /* conn->hello_in complete */
    EMU_DONE_RECV,   /* SEND / WRITE_IMM executed into conn->rx_rwr */
    EMU_DONE_WRITE,  /* plain write executed: ACK */
    EMU_DONE_HOLD,   /* held copy complete */
    EMU_DONE_READ,   /* our READ's data is in: complete it */
};

#define EMU_RBUF 65536

struct emu_conn {
    struct emu_poll p; /* first */
    int state;
    struct emu_id *id;       /* NULL while HELLO, or after the id is gone */
    struct emu_listener *listener; /* HELLO: the listener that accepted it */
    struct emu_qp *qp;
    bool peer_gone;          /* REQ: the initiator went away before accept */
    uint32_t peer_qpn;
    bool rx_paused;          /* an RNR hold does not fit in memory: stop reading */
    bool in_rx;              /* emu_conn_rx is running (no recursion) */
    bool drain;              /* the peer has closed its side: requests are read and dropped */
    bool wr_shut;            /* we sent DISC and shut our side down */
    char peer_name[64];      /* "127.0.0.1:41000" for messages */
    /* receive */
    int rx_state;
    struct emu_frame rhdr;
    size_t rx_left;
    int rx_done;
    bool rx_error;           /* the current frame's execution failed (payload discarded) */
    struct emu_sink sink;
    struct emu_rwr *rx_rwr;
    struct emu_held *rx_held;
    struct emu_hello hello_in;
    size_t rhead, rtail;
    uint8_t *rbuf;
    /* transmit */
    struct emu_tx *tx_head, *tx_tail;
    struct emu_hello hello_out; /* CONNECT, kept until the socket connects */
    struct emu_conn *all_next, *all_prev; /* registry list */
};

enum emu_id_state {
    EMU_ID_IDLE = 0,
    EMU_ID_BOUND,
    EMU_ID_LISTEN,
    EMU_ID_ADDR_RESOLVED,
    EMU_ID_ROUTE_RESOLVED,
    EMU_ID_CONNECTING, /* has a conn */
    EMU_ID_PASSIVE,    /* created by a connect request; has a conn */
};

struct emu_cmch;

struct emu_id {
    struct rdma_cm_id id; /* first */
    struct emu_cmch *ch;
    struct emu_ctx *ctx;  /* the device context (id.verbs), one reference */
    int state;
    int fd;               /* bound socket (before listen / connect), else -1 */
    struct emu_listener *listener;
    struct emu_conn *conn;
    struct emu_id *listen_id; /* PASSIVE: the listener (only while the request event is pending) */
};

struct emu_cmev {
    struct rdma_cm_event ev; /* first */
    struct emu_cmev *next;
    struct emu_cmch *ch;
    uint8_t pdata[EMU_PDATA_ACCEPT];
};

struct emu_cmch {
    struct rdma_event_channel ch;
    struct emu_cmev *head, *tail;
    int nids;
    bool closed;  /* rdma_destroy_event_channel with ids left: freed with the last id */
    bool signaled;
};

/* ---- the per-process registry -------------------------------------------- */

struct emu_registry {
    pthread_mutex_t lock;
    bool atfork_done;
    struct emu_dev *devs;   /* never freed: device pointers stay valid */
    int users;              /* contexts and CM event channels alive: the device thread runs while > 0 */
    bool running;
    pthread_t thread;
    int epfd, stopfd;
    struct emu_poll stop_poll; /* the stop eventfd's epoll entry */
    uint64_t epoch;         /* counts device threads */
    uint64_t cycle;         /* epoll rounds of the current thread */
    struct emu_poll *grave;  /* closed pollables waiting until no epoll result can name them */
    bool join_pending;      /* a stopped thread to join once the lock is released */
    pthread_t join_thread;
    int join_epfd, join_stopfd;
    uint32_t next_key, next_qpn;
    struct emu_mr *mr_hash[1024];
    struct emu_conn *conns;  /* every live connection */
};

extern struct emu_registry emu_reg;

void emu_lock(void);
void emu_unlock(void);          /* also joins a device thread that was stopped */
bool emu_debug(void);
void emu_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void emu_dlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int emu_users_get(void);        /* starts the device thread; 0 or an errno */
void emu_users_put(void);       /* stops it after the last user (joined by emu_unlock) */

void emu_poll_set(struct emu_poll *p, uint32_t events);  /* add or modify in the epoll */
void emu_poll_kill(struct emu_poll *p);                  /* close and free once safe */

struct emu_dev *emu_dev_list(int *n);                    /* the devices of OOBX_VERBS_EMU_DEVICES */
struct emu_dev *emu_dev_for_addr(const struct sockaddr *sa); /* NULL: no device */
struct emu_ctx *emu_ctx_new(struct emu_dev *dev);        /* one ref; NULL + errno */
void emu_ctx_put(struct emu_ctx *c);
struct emu_pd *emu_pd_new(struct emu_ctx *c, bool hidden);

struct emu_mr *emu_mr_find(uint32_t key);
void emu_mr_ref(struct emu_mr *m);
void emu_mr_unref(struct emu_mr *m);
void emu_seg_release(struct emu_seg *s, int n);

void emu_cq_push(struct emu_cq *cq, const struct ibv_wc *wc);
int emu_cq_poll_op(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int emu_cq_notify_op(struct ibv_cq *cq, int solicited_only);

void emu_fd_signal(int fd, bool *signaled, bool on);
int emu_fd_wait(int fd);        /* blocks until readable; -1 with EAGAIN when O_NONBLOCK */

/* emu_wire.c */
int emu_post_send_op(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int emu_post_recv_op(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
struct emu_qp *emu_qp_new(struct emu_pd *pd, struct ibv_qp_init_attr *attr); /* NULL + errno */
void emu_qp_free(struct emu_qp *qp);
void emu_qp_error(struct emu_qp *qp, int first_status);
struct emu_conn *emu_conn_new(int fd, int state);
void emu_conn_events(struct emu_conn *c);
void emu_conn_close(struct emu_conn *c);  /* socket closed; the struct stays with its id */
void emu_conn_free(struct emu_conn *c);   /* id gone: detach, close, free */
int emu_conn_send_ctrl(struct emu_conn *c, int type, const struct emu_hello *h);
void emu_conn_pump(struct emu_conn *c);
void emu_conn_on_events(struct emu_conn *c, uint32_t ev);
void emu_conn_drop_requests(struct emu_conn *c);
void emu_conn_resume(struct emu_conn *c); /* run held requests, restart a paused receive */
void emu_addr_str(const struct sockaddr *sa, char *buf, size_t len);

/* emu_cm.c */
void emu_cm_event(struct emu_id *id, int type, int status, struct emu_id *listen_id,
                  const struct emu_hello *h, size_t pdata_pad);
void emu_cm_on_hello(struct emu_conn *c);  /* a CONNECT / ACCEPT / REJECT frame arrived */
void emu_cm_on_rtu(struct emu_conn *c);
void emu_cm_on_fail(struct emu_conn *c, int err);  /* EOF, reset, malformed frame */
void emu_cm_on_connected(struct emu_conn *c);      /* initiator: TCP connect finished */
void emu_listener_on_events(struct emu_listener *l);

#pragma GCC visibility pop

#endif
