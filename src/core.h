/*
 * The core's objects: the endpoint (one transport instance, tag matching and
 * the progress engine, shared by a communicator and its split children) and
 * the communicator.
 */
#ifndef OOBX_CORE_H
#define OOBX_CORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "comm_debug.h"
#include "log.h"
#include "oobx.h"
#include "settings.h"
#include "sock.h"
#include "transport.h"

/* A posted receive, or an arrived message nobody asked for yet. Both start
 * with `ux` so that a transport cookie can point at either. */
typedef struct oobx_rreq {
    int is_ux; /* 0 */
    struct oobx_rreq *next, *prev; /* match queue, or the in-flight list */
    int src;
    void *buf;
    size_t cap;
    size_t received;
    int done, status;
    char *discard; /* payload of a too-large message goes here */
    size_t msg_len;
} oobx_rreq_t;

typedef struct oobx_ux {
    int is_ux; /* 1 */
    struct oobx_ux *next, *prev;
    oobx_msg_hdr_t hdr;
    char *data;
    int complete;
    oobx_rreq_t *waiter; /* a receive posted while the message was still arriving */
    int detached;        /* out of its queue: freed when complete */
} oobx_ux_t;

typedef struct oobx_mq oobx_mq_t;

typedef struct oobx_sreq {
    oobx_tp_req_t tp;
    int peer;
} oobx_sreq_t;

typedef struct oobx_ep {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refs;
    oobx_tp_t *tp;
    int rank, nranks;
    int poller;     /* a thread sleeps in poll() for everyone */
    int wake_fd;    /* timerfd: wakes that thread (at once, or at the deadline) */
    uint64_t timer_at; /* the deadline wake_fd is armed for, 0: none */
    oobx_mq_t **buckets;
    size_t nbuckets, nqueues;
    oobx_mq_t *mq_spare; /* freed queues kept for reuse */
    int nmq_spare;
    /* messages being written by the transport: rreqs and uxs, for peer failures */
    void **inflight;
    size_t ninflight, capinflight;
    int *failed;        /* per rank: 0 or the status it failed with */
    char **failed_what; /* per rank: why */
    const oobx_log_t *log;
    int spin_us;
    /* some host runs more ranks than it has CPUs: the same on every rank, so
     * collectives may choose by it (fewer messages beat fewer rounds then) */
    int oversubscribed;
    void **graveyard; /* request memory a transport may still touch */
    size_t ngraveyard;
} oobx_ep_t;

struct oobx_comm {
    oobx_ep_t *ep;
    int rank, nranks;
    int *ep_rank; /* comm rank -> endpoint rank; NULL: the same */
    uint64_t ctx;
    uint32_t coll_seq;
    uint32_t split_seq;
    struct group_seq {
        uint64_t gid;
        uint32_t seq;
    } *gseq;
    int ngseq, capgseq;
    oobx_settings_t settings;
    oobx_log_t log;
    atomic_int aborted;
    volatile uint32_t *user_abort;
    oobx_init_timings_t timings;
    uint64_t root_magic; /* of a root this process hosts for this comm, to reap */
    char transport[16];
};

static inline int comm_ep_rank(const struct oobx_comm *c, int r)
{
    return c->ep_rank ? c->ep_rank[r] : r;
}

/* ---- endpoint (src/ep.c) ---- */
int oobx__ep_create(const oobx_settings_t *s, const oobx_log_t *log, oobx_ep_t **out);
void oobx__ep_release(oobx_ep_t *ep);
/* the transport sink that points at ep */
oobx_tp_sink_t oobx__ep_sink(oobx_ep_t *ep);

/* All of these are called with ep->lock held. */
int oobx__ep_isend(struct oobx_comm *c, int peer, uint32_t kind, uint64_t tag, const void *buf, size_t len,
             oobx_sreq_t *req);
/* Posts a receive from comm rank peer. Returns 0 or an error (peer failed). */
int oobx__ep_irecv(struct oobx_comm *c, int peer, uint32_t kind, uint64_t tag, void *buf, size_t cap, oobx_rreq_t *req);
/* Cancels an incomplete posted receive (on error paths). Returns 1 when the
 * transport may still write into it: then its memory (and its buffer) must
 * be handed to oobx__ep_adopt instead of freed. */
int oobx__ep_cancel_recv(struct oobx_comm *c, uint32_t kind, uint64_t tag, oobx_rreq_t *req);
/* Wakes the thread sleeping for the endpoint (lock held). */
void oobx__ep_wake(oobx_ep_t *ep);
/* The endpoint frees p when it goes away. */
void oobx__ep_adopt(oobx_ep_t *ep, void *p);
int oobx__ep_set_size(oobx_ep_t *ep, int rank, int nranks);

/* Sleeps until done(arg) is true, making progress. done may post more
 * requests. Returns 0, OOBX_ERR_TIMEOUT or OOBX_ERR_ABORTED; the caller writes
 * the error message. */
typedef int (*ep_done_fn)(void *arg);
int oobx__ep_wait(struct oobx_comm *c, ep_done_fn done, void *arg, uint64_t deadline_ns);

/* Drops the queued messages of a communicator that goes away (its endpoint lives on). */
void oobx__ep_purge_ctx(oobx_ep_t *ep, uint64_t ctx);

/* Text for why peer (endpoint rank) failed, or NULL. */
const char *oobx__ep_failed_what(oobx_ep_t *ep, int peer);

/* ---- collectives (src/coll.c) ---- */
typedef struct coll_group {
    int n, me;
    const int *members; /* comm ranks, NULL: all */
    uint64_t gid;       /* 0: the whole communicator */
    uint32_t seq;
} coll_group_t;

int oobx__coll_allgather(struct oobx_comm *c, const coll_group_t *g, void *buf, size_t bpr, const char *algo);
int oobx__coll_barrier(struct oobx_comm *c, const coll_group_t *g);
int oobx__coll_bcast(struct oobx_comm *c, const coll_group_t *g, int root, void *buf, size_t bytes);
/* Ring allgather of variable-length items of at most cap bytes: items[i]
 * (cap bytes each) holds rank i's item, lens[i] its length; used at init. */
int oobx__coll_ring_allgatherv(struct oobx_comm *c, char *items, size_t cap, size_t *lens);

/* Describes comm rank r for messages: "rank 3 (10.0.0.7:4100)". */
void comm_peer_name(struct oobx_comm *c, int r, char *buf, size_t len);
/* Status of an oobx__ep_wait that ended early, with the message written. */
int comm_wait_error(struct oobx_comm *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
