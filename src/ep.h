/*
 * The endpoint: one transport instance, tag matching and the progress
 * engine, shared by a communicator and its split children.
 *
 * The layers above (collectives, p2p, communicators) reach it through a view
 * (oobx__ep_view_t): which endpoint, the context id of the messages, the
 * mapping of the caller's ranks onto endpoint ranks, where to log, and what
 * cancels a wait. The endpoint never sees a communicator.
 */
#ifndef OOBX_EP_H
#define OOBX_EP_H

#define OOBX_EP_WAITS 16            /* waits remembered for the adaptive spin window */
#define OOBX_SPIN_AUTO_MAX_NS 50000 /* the adaptive window's bound */
#define OOBX_SPIN_AUTO_MIN_NS 2000  /* the window while most waits are long: a short look before sleeping */
#define OOBX_SPIN_AUTO_SHORT_NS 10000 /* the floor while most waits are short: a hiccup of the peer's is not a sleep */
#define OOBX_SPIN_ADAPT_EVERY 4     /* waits between two choices of the window */
#define OOBX_SPIN_CHECK_EVERY 16    /* polling passes between two clock reads (and lock hand-overs) */
#define OOBX_SPIN_FIRST_MAX 256     /* passes with no clock at the start of a wait (at most half the window) */

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cma.h"
#include "mem.h"
#include "log.h"
#include "oobx.h"
#include "settings.h"
#include "transport.h"

/* A posted receive, or an arrived message nobody asked for yet (or, in
 * ep.c, an endpoint control message). Each starts with `is_ux`, one of
 * OOBX_REC_*, so that a transport cookie can point at any of them. */
enum { OOBX_REC_RECV = 0, OOBX_REC_UX = 1, OOBX_REC_CTRL = 2 };

typedef struct oobx_rreq {
    int is_ux; /* OOBX_REC_RECV */
    struct oobx_rreq *next, *prev; /* match queue, or the in-flight list */
    int src;
    void *buf;
    size_t cap;
    size_t received;
    int done, status;
    int truncated; /* the message is larger than the buffer: its payload is dropped */
    size_t msg_len;
    int exact;     /* a collective's receive: a message of another size than cap is OOBX_ERR_MISMATCH */
    uint64_t tag;       /* as posted */
    uint64_t rival_tag; /* OOBX_ERR_MISMATCH by signature: the tag the sender used instead */
} oobx_rreq_t;

/* Collective tags: the slot, (group id, step), in the top 28 bits, and the
 * call's signature below: what call (COLL_OP_*), the call's number in its
 * group (mod 2^16), its root. Two checks use them:
 * - a collective message in the slot of a receive posted for the same
 *   sender but with another signature: the sender made another call than
 *   this rank waits in (each link keeps its order, so a sender's messages of
 *   one call all come before those of its next), and the receive ends with
 *   OOBX_ERR_MISMATCH and rival_tag;
 * - a collective message with the number of this rank's current (or last)
 *   call in its group but another signature, from anyone: the ranks
 *   disagree on that call, and the communicator fails with
 *   OOBX_ERR_MISMATCH. */
#define OOBX_COLL_SLOT_MASK 0xfffffff000000000ull
#define OOBX_COLL_GROUP_MASK 0xfffffc0000000000ull
#define OOBX_COLL_CALL_MASK 0xfffffc00ffff0000ull /* group id and number: one call */
static inline uint64_t oobx__coll_tag(uint64_t gid, unsigned step, unsigned op, uint32_t seq, int root)
{
    return ((gid & 0x3fffffull) << 42) | ((uint64_t)(step & 0x3fu) << 36) | ((uint64_t)(op & 0xfu) << 32) |
           ((uint64_t)(seq & 0xffffu) << 16) | ((uint64_t)root & 0xffffu);
}
#define OOBX_COLL_TAG_OP(t) ((unsigned)((t) >> 32) & 0xfu)
#define OOBX_COLL_TAG_SEQ(t) ((unsigned)((t) >> 16) & 0xffffu)
#define OOBX_COLL_TAG_ROOT(t) ((unsigned)(t) & 0xffffu)
#define OOBX_COLL_TAG_GID(t) ((t) >> 42)
#define OOBX_COLL_GID_LEADERS 0x3fffffull /* the hosts' leaders' ring (node-aware allgather); groups hash to others */

/* What a collective message belongs to: part of its tag's signature. */
enum {
    COLL_OP_ALLGATHER_RING = 1,
    COLL_OP_ALLGATHER_BRUCK = 2,
    COLL_OP_ALLGATHER_TREE = 3,
    COLL_OP_BARRIER = 4,
    COLL_OP_BARRIER_TREE = 5,
    COLL_OP_BCAST = 6,
    COLL_OP_ALLGATHERV = 7,
    COLL_OP_NODE_ALLGATHER = 8,
    COLL_OP_ALLGATHER_DIRECT = 9, /* within one host: slices read from their owners' buffers */
    COLL_OP_NODE_BARRIER = 10,    /* the hosts' shared memory and their leaders' ring */
    COLL_OP_BCAST_DIRECT = 11,    /* within one host: the root's buffer read by every rank */
};
const char *oobx__coll_op_name(unsigned op);
/* "broadcast from group rank 3, call 17 on the communicator" */
void oobx__coll_describe(uint64_t tag, char *buf, size_t len);

typedef struct oobx_ux {
    int is_ux; /* OOBX_REC_UX */
    struct oobx_ux *next, *prev;
    oobx_msg_hdr_t hdr;
    char *data;
    int complete;
    oobx_rreq_t *waiter; /* a receive posted while the message was still arriving */
    int detached;        /* out of its queue: freed when complete */
    int charged;         /* counted in its sender's ux_bytes */
} oobx_ux_t;

typedef struct oobx_mq oobx_mq_t;

#define OOBX_PROBE_MAX 8 /* ranks one probe asks, and ranks one answer names */
#define OOBX_CTX_TEXT 600 /* why a context failed, as sent */
#define OOBX_EP_RECENT 8  /* entries of each of the endpoint's round-robin tables below */
#define OOBX_EP_PAST 64   /* slots of the endpoint's table of past collective calls */

/* A context and why it is of note (never joined, or failed). */
typedef struct oobx_ctx_note {
    uint64_t ctx;
    char text[OOBX_CTX_TEXT]; /* empty: an unused entry */
} oobx_ctx_note_t;

typedef struct oobx_sreq {
    oobx_tp_req_t tp;
    int peer;
    const void *buf; /* the payload lent to the transport (oobx__ep_release) */
    size_t len;
} oobx_sreq_t;

#define OOBX_NOTICE_OUT 64 /* failure notices tracked until they leave */
#define OOBX_NOTICE_FLUSH_MS 200 /* how long a failed call waits for them at most */

typedef struct oobx_ep {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int refs;
    oobx_tp_t *tp;
    const oobx_tp_ops_t *ops; /* tp's ops: complete (no NULL entries), checked at load */
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
    int spin_us;        /* OOBX_SPIN_US: > 0 a fixed window, 0 never, < 0 adaptive (spin_ns) */
    uint32_t spin_ns;   /* the adaptive window: 0 until the cards say no host is oversubscribed */
    uint32_t waits_ns[OOBX_EP_WAITS]; /* the last waits' lengths, for the adaptive window */
    unsigned nwaits;
    uint32_t pass_ns;   /* what one polling pass took, measured while polling (0: not yet) */
    int nsleepers; /* threads in pthread_cond_timedwait on cond, for whom the poller broadcasts */
    /* one finished request of each kind kept for the next blocking call
     * (oobx_send, oobx_recv): no malloc on the small-message path */
    oobx_rreq_t *spare_rreq;
    oobx_sreq_t *spare_sreq;
    /* some host runs more ranks than it has CPUs: the same on every rank, so
     * collectives may choose by it (fewer messages beat fewer rounds then) */
    int oversubscribed;
    /* The direct allgather (coll.c): this process's cross-memory identity,
     * set when peers is first allocated, and what it learnt of each
     * endpoint rank's (NULL until the first call that offers it). */
    struct {
        oobx__cma_self_t self;
        oobx__cma_peer_t *peers;
        uint64_t calls, fallbacks; /* calls that pulled every slice; that tried and took the ring instead */
        uint64_t node;             /* allgathers through the host's shared buffer (comm.c) */
        uint64_t node_barrier;     /* barriers the same way */
        uint64_t node_fresh;       /* of node: results the kernel wrote into fresh pages (util.h, oobx__copy_fresh) */
        uint64_t skipped;          /* calls that took the ring at once after their group's fallback (coll.h) */
        uint64_t bcasts, bcast_fallbacks; /* broadcasts read from the root's buffer; that tried and took the tree */
        uint64_t staged;                  /* direct allgathers whose own slice went through the stage */
        char *stage;                      /* the staging region (mem's, freed with it), stage_len bytes */
        size_t stage_len;
        int stage_busy;   /* a call uses it now */
        int stage_failed; /* it could not be made: not tried again */
    } direct;
    /* oobx_mem_alloc's regions, and the peers' regions mapped here (mem.h) */
    oobx__mem_t mem;
    void **graveyard; /* request memory a transport may still touch */
    size_t ngraveyard;
    /* failure notices this rank sent that have not left yet (in the
     * graveyard: valid until the endpoint goes); oobx__ep_flush_notices */
    oobx_tp_req_t *notice_out[OOBX_NOTICE_OUT];
    int nnotice_out;
    /* where a peer's address is read the first time it is needed (the host's
     * card table): no rank records all N addresses at init */
    const void *(*addr_fn)(void *arg, int r, size_t *len);
    void *addr_arg;
    void (*addr_release)(void *arg);
    unsigned char *addr_known; /* bit per rank: set_peer done from the source */
    /* Communicator-wide failure (OOBX_FAILURE=job): the first failed rank this
     * endpoint heard of, from its transport or from another rank's notice;
     * fail_text is written before fail_rank is stored and never again. */
    int fail_job;           /* OOBX_FAILURE=job */
    atomic_int fail_rank;   /* endpoint rank, -1: none */
    int fail_status;
    char fail_text[640];    /* "rank 5 failed (seen by rank 4: ...)" */
    int fail_spread;        /* the notice still has to go out (sent outside progress) */
    int closing;            /* being released: our own links go down */
    unsigned char *departed; /* per rank: said goodbye (released its endpoint) */
    unsigned char *talked;   /* per rank: a link to it may exist (sent, heard, ring): goodbyes go there */
    unsigned char *used;     /* per rank: a message of a call went to it or came from it */
    uint64_t *ux_bytes;      /* per rank: bytes of its unexpected messages held */
    uint64_t ux_max;         /* OOBX_UNEXPECTED_MAX: the most one rank's may hold */
    int ready;               /* an init through this endpoint succeeded: goodbyes are worth sending */
    int spreads;             /* failure notices go out in init: 1 on the links it has (the ring's), 2 to all (cards in) */
    /* called on each pass of oobx__ep_linger (lock held) until it returns 1 */
    int (*linger_hook)(void *arg);
    void *linger_arg;
    /* Probes: a wait that timed out asks the ranks it still waits on whether
     * they answer (CTRL PING); their PONG lists the ranks they wait on. */
    uint32_t probe_seq;
    struct {
        uint32_t id;
        int from, n;
        int waits[OOBX_PROBE_MAX];
        char gone[OOBX_CTX_TEXT]; /* nonempty: the prober's communicator is one it never joined, and why */
    } pong[OOBX_EP_RECENT];  /* the last answers heard, round robin */
    int pong_next;
    struct {
        int to;
        uint32_t id;
        uint64_t ctx;
    } ping_due[OOBX_PROBE_MAX]; /* probes to answer (answered outside progress) */
    int nping_due;
    /* contexts this rank will never join (its oobx_comm_split failed), and
     * contexts that failed without a member failing (a member never joined) */
    oobx_ctx_note_t gone[OOBX_EP_RECENT], ctx_failed[OOBX_EP_RECENT];
    int gone_next, ctx_failed_next;
    char probe_text[800];    /* what the last timed-out wait found, for oobx__ep_wait_error */
    /* the collective each (context, group) is in or made last: its tag at step 0 */
    struct {
        uint64_t ctx, tag;
    } calls[OOBX_EP_RECENT];
    int calls_next;
    /* the calls made before the current ones, by (context, call number):
     * a message of a call this rank has left, signed otherwise, is a
     * disagreement too (found late, where the current call would not see it) */
    struct {
        uint64_t ctx, tag;
    } past[OOBX_EP_PAST];
    size_t ncoll_ux;         /* collective messages in the unexpected queues (0: no rival can exist) */
} oobx_ep_t;

/* What a caller above the endpoint shows of itself. Ranks in calls through a
 * view are view ranks; ep_rank maps them onto endpoint ranks. */
typedef struct oobx__ep_view {
    oobx_ep_t *ep;
    uint64_t ctx;                   /* context id: messages of other views never match */
    int rank, nranks;               /* the caller's rank and size */
    const int *ep_rank;             /* view rank -> endpoint rank; NULL: the same */
    const char *rank_note;          /* appended to peer names when mapped ("of the parent") */
    const oobx_log_t *log;
    const oobx_settings_t *settings; /* timeout, chunk and algorithm choices */
    const atomic_int *aborted;      /* oobx_comm_abort's flag */
    const volatile uint32_t *user_abort; /* oobx_config_t.abort_flag, or NULL */
    uint64_t deadline_ns;           /* nonzero: no wait through this view goes past it (init's one budget) */
} oobx__ep_view_t;

static inline int oobx__ep_view_rank(const oobx__ep_view_t *v, int r)
{
    return v->ep_rank ? v->ep_rank[r] : r;
}

int oobx__ep_create(const oobx_settings_t *s, const oobx_log_t *log, oobx_ep_t **out);
void oobx__ep_release(oobx_ep_t *ep);
/* A collective call begins (tag: its tag at step 0): messages already here
 * for the same call number with another signature fail the communicator. */
void oobx__ep_coll_begin(const oobx__ep_view_t *v, uint64_t tag);
/* This rank will never join context ctx (why: the failed split's error):
 * ranks that wait on it there are told so when they probe it. */
void oobx__ep_ctx_gone(oobx_ep_t *ep, uint64_t ctx, const char *why);
/* The code of the view's failure (OOBX_ERR_REMOTE or OOBX_ERR_MISMATCH), 0: none. */
int oobx__ep_view_status(const oobx__ep_view_t *v);
/* The failure that fails every call of view v (a rank of v failed, and
 * OOBX_FAILURE=job): its text, or NULL. Any thread, lock or not. */
const char *oobx__ep_view_failure(const oobx__ep_view_t *v);
/* Fails every communicator of the endpoint that contains endpoint rank r
 * (OOBX_FAILURE=job), with status (OOBX_ERR_REMOTE, OOBX_ERR_MISMATCH) and
 * text, and tells the other ranks; the first failure stays. Lock held. */
void oobx__ep_fail(oobx_ep_t *ep, int r, int status, const char *text);
/* A call found that endpoint rank peer failed (what: how) outside the
 * transport's peer_failed (a request's error): the communicator-wide
 * failure unless peer said goodbye or a failure is known already. Lock held. */
void oobx__ep_peer_lost(oobx_ep_t *ep, int peer, const char *what);
/* The same for view rank peer, named who, with the reason the endpoint has
 * for it (a call's request to or from it failed). Lock held. */
void oobx__ep_view_peer_lost(const oobx__ep_view_t *v, int peer, const char *who);
/* The transport's ring op (prev -1: the link to next only); the endpoint
 * remembers the links, so that it says goodbye on them when it goes. */
int oobx__ep_ring(oobx_ep_t *ep, int prev, int next);
/* Sends the failure notice where it still has to go (lock held; after progress). */
void oobx__ep_spread(oobx_ep_t *ep);
/* the transport sink that points at ep */
oobx_tp_sink_t oobx__ep_sink(oobx_ep_t *ep);
int oobx__ep_set_size(oobx_ep_t *ep, int rank, int nranks);

/* Gives the endpoint a source of addresses: fn(arg, r, &len) is rank r's
 * transport address (or NULL). The endpoint calls the transport's set_peer
 * for r from it the first time r is needed (a send, a name, the transport's
 * need_peer), and release(arg) when it goes away. Lock held. */
int oobx__ep_set_addr_source(oobx_ep_t *ep, const void *(*fn)(void *arg, int r, size_t *len), void *arg,
                             void (*release)(void *arg));

/* All of these are called with ep->lock held. */
/* Records endpoint rank r's address from the source unless done already
 * (0 without a source). */
int oobx__ep_know(oobx_ep_t *ep, int r);
int oobx__ep_isend(const oobx__ep_view_t *v, int peer, uint32_t kind, uint64_t tag, const void *buf, size_t len,
                   oobx_sreq_t *req);
/* Posts a receive from view rank peer. Returns 0 or an error (peer failed). */
int oobx__ep_irecv(const oobx__ep_view_t *v, int peer, uint32_t kind, uint64_t tag, void *buf, size_t cap,
                   oobx_rreq_t *req);
/* The same for a receive whose message must be exactly cap bytes (a
 * collective's, whose sizes all ranks compute alike): another size completes
 * it with OOBX_ERR_MISMATCH, msg_len the size that came. */
int oobx__ep_irecv_exact(const oobx__ep_view_t *v, int peer, uint32_t kind, uint64_t tag, void *buf, size_t cap,
                         oobx_rreq_t *req);
/* Cancels an incomplete posted receive (on error paths). Returns 1 when the
 * transport was writing into it: the rest of that message goes nowhere (the
 * buffer is the caller's again, ops->release), but the request's memory must
 * be handed to oobx__ep_adopt instead of freed. */
int oobx__ep_cancel_recv(const oobx__ep_view_t *v, uint32_t kind, uint64_t tag, oobx_rreq_t *req);
/* A send that a failing call leaves behind: the transport lets go of its
 * payload (ops->release: sends it from a copy, or fails the link). */
void oobx__ep_release_send(oobx_ep_t *ep, const oobx_sreq_t *s);
/* Wakes the thread sleeping for the endpoint (lock held). */
void oobx__ep_wake(oobx_ep_t *ep);
/* The endpoint frees p when it goes away. */
void oobx__ep_adopt(oobx_ep_t *ep, void *p);

/* Once the cards are in: adaptive polling (OOBX_SPIN_US < 0) is on when no
 * host runs more ranks than it has CPUs, off when one does. */
/* After an init that failed on another rank's death: keeps the endpoint
 * serving (accepting links, passing on the notice, flushing) for ms, so that
 * a rank that connects to this one only now hears who died instead of
 * finding this rank gone and blaming it. Takes the endpoint lock. */
void oobx__ep_linger(oobx_ep_t *ep, int ms);

/* A rank whose call fails with the communicator stays until the failure
 * notices it sent have left, at most ms (under the endpoint's lock): a
 * notice on a link still in its hello needs this rank's progress, which it
 * would not have while its caller handles the error (the other ranks would
 * then wait for it, and hear of its exit instead of its reason). */
void oobx__ep_flush_notices(oobx_ep_t *ep, int ms);
/* The first complete unexpected message of (ctx, kind, src, tag), left in
 * its queue; NULL when none is in. Lock held. */
const void *oobx__ep_ux_peek(oobx_ep_t *ep, uint64_t ctx, uint32_t kind, int src, uint64_t tag, size_t *len);
void oobx__ep_set_spin(oobx_ep_t *ep, int oversubscribed);

/* Sleeps until done(arg) is true, making progress. done may post more
 * requests. Returns 0, OOBX_ERR_TIMEOUT or OOBX_ERR_ABORTED; the caller writes
 * the error message (oobx__ep_wait_error). */
typedef int (*oobx__ep_done_fn)(void *arg);
int oobx__ep_wait(const oobx__ep_view_t *v, oobx__ep_done_fn done, void *arg, uint64_t deadline_ns);
/* The same with a timeout in ms (< 0: none) from the wait's start. A rank
 * that polls reads no clock for its first few passes: the form for a wait
 * that is often short (p2p, collectives). */
int oobx__ep_wait_ms(const oobx__ep_view_t *v, oobx__ep_done_fn done, void *arg, int timeout_ms);

/* Drops the queued messages of a context that goes away (its endpoint lives on). */
void oobx__ep_purge_ctx(oobx_ep_t *ep, uint64_t ctx);

/* Text for why peer (endpoint rank) failed, or NULL. */
const char *oobx__ep_failed_what(oobx_ep_t *ep, int peer);

/* Names view rank r for messages: "rank 3 (10.0.0.7:4100)". */
void oobx__ep_peer_name(const oobx__ep_view_t *v, int r, char *buf, size_t len);
/* Records and logs the error of a wait that ended early (rc from
 * oobx__ep_wait): "<what>: timed out (OOBX_TIMEOUT_MS=...)". Returns rc. */
int oobx__ep_wait_error(const oobx__ep_view_t *v, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
