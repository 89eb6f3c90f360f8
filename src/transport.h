/*
 * The transport contract. The core (p2p matching, collectives, init) is
 * written once over this interface; src/socket.c, ucx/ and verbs/ implement it.
 *
 * Threading: the core calls every op with the endpoint lock held, from one
 * thread at a time; sink callbacks are invoked from inside progress() with the
 * same lock held. Nothing here may block for long: connect and send only
 * start work, progress() finishes it, and the core sleeps in poll() on the fds
 * that wait_prepare() hands out.
 *
 * Ranks are endpoint ranks: the ranks of the communicator that created the
 * endpoint (a split child maps its ranks onto them).
 */
#ifndef OOBX_TRANSPORT_H
#define OOBX_TRANSPORT_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include "log.h"
#include "settings.h"

#define OOBX_TP_VERSION 1
#define OOBX_ADDR_MAX 2048 /* largest address blob a transport may publish */

enum { OOBX_MSG_P2P = 1, OOBX_MSG_COLL = 2, OOBX_MSG_CTRL = 3 };

/* A message as the core sees it; the wire form is in wire.h. */
typedef struct oobx_msg_hdr {
    uint64_t ctx;  /* communicator context id */
    uint64_t tag;  /* user tag (p2p) or collective tag */
    uint64_t len;  /* payload bytes */
    int32_t src;   /* sender's endpoint rank */
    uint32_t kind; /* OOBX_MSG_* */
} oobx_msg_hdr_t;

/* Completion record of a send, owned by the core. The transport sets status
 * (0 or a negative code) and then done = 1, from inside progress() or send(). */
typedef struct oobx_tp_req {
    int done;
    int status;
} oobx_tp_req_t;

typedef struct oobx_tp_sink {
    void *core;
    /* A message has begun to arrive. Returns where its hdr->len payload bytes
     * go (never NULL when len > 0: the core allocates or gives a discard
     * buffer) and a cookie for msg_end. The pointer stays valid until
     * msg_end. Payload may be written in any number of pieces. */
    void *(*msg_begin)(void *core, const oobx_msg_hdr_t *hdr, void **cookie);
    /* All of the payload of the message of this cookie is in place. */
    void (*msg_end)(void *core, void *cookie);
    /* The link to peer is gone. Pending and later sends to it fail; receives
     * from it fail. what says why ("connection reset by 10.0.0.3:4100"). */
    void (*peer_failed)(void *core, int peer, int status, const char *what);
} oobx_tp_sink_t;

typedef struct oobx_tp_params {
    int rank;
    int nranks;
    uint64_t magic;                /* the communicator magic, checked in every hello */
    const oobx_settings_t *settings;
    const oobx_log_t *log;
    oobx_tp_sink_t sink;
    const void *root_hint;         /* struct sockaddr of root 0 or NULL: interface matching */
    unsigned root_hint_len;
    int wake_fd;                   /* the core's wake-up fd (a timerfd): readable when a sleeper must wake; read 8 bytes to clear */
} oobx_tp_params_t;

typedef struct oobx_tp oobx_tp_t;
typedef struct oobx_tp_ops oobx_tp_ops_t;

struct oobx_tp_ops {
    int version;               /* OOBX_TP_VERSION */
    const char *name;          /* "socket", "ucx", "verbs" */

    /* Creates an instance that can be reached at address(). May block
     * briefly (bind, worker creation). Returns 0, OOBX_ERR_UNAVAILABLE when
     * the transport cannot run in this process (the message says why), or
     * another error. On failure *tp is untouched. */
    int (*create)(const oobx_tp_params_t *p, oobx_tp_t **tp);

    /* This rank's address blob. *len: capacity in, size out (<= OOBX_ADDR_MAX). */
    int (*address)(oobx_tp_t *tp, void *blob, size_t *len);

    /* Records peer's address blob. No I/O. Returns OOBX_ERR_PROTOCOL for a
     * blob this transport cannot parse. */
    int (*set_peer)(oobx_tp_t *tp, int peer, const void *blob, size_t len);

    /* Tells the transport its ring neighbours (may be the same rank, or -1 for
     * none), so it can set up ring links (registered ring buffers) eagerly.
     * The core calls it once, after set_peer for both. Does not block. */
    int (*ring)(oobx_tp_t *tp, int prev, int next);

    /* Queues a message to peer (set_peer was called; connects on first use).
     * Never blocks. payload (hdr->len bytes) must stay valid until req->done.
     * Returns 0 (req may already be done) or an error when peer is known to
     * have failed; then req is not touched. peer != own rank. */
    int (*send)(oobx_tp_t *tp, int peer, const oobx_msg_hdr_t *hdr, const void *payload,
                oobx_tp_req_t *req);

    /* Does every piece of work possible without blocking: accepts, connects,
     * reads, writes, completions; calls the sink. Returns 0, or an error
     * that makes the whole endpoint unusable. */
    int (*progress)(oobx_tp_t *tp);

    /* Before the core sleeps: fills up to max pollfds and caps *timeout_ms
     * (already set by the core; lower it for the transport's own timers).
     * Returns 0 when sleeping is safe, 1 when progress() has work to do now
     * (then the core calls progress() again instead of sleeping). */
    int (*wait_prepare)(oobx_tp_t *tp, struct pollfd *fds, int max, int *nfds, int *timeout_ms);

    /* Optional (NULL: the core polls the fds of wait_prepare and wake_fd).
     * Called WITHOUT the endpoint lock, by one thread at a time, right after
     * wait_prepare returned 0: sleeps up to timeout_ms (-1: no bound) on the
     * transport's fds and params.wake_fd in one system call, and only records
     * what woke it, for the next progress() to handle. Touches nothing else. */
    int (*sleep)(oobx_tp_t *tp, int timeout_ms);

    /* Names a peer for messages: "rank 3 (10.0.0.7:41233)". */
    void (*peer_name)(oobx_tp_t *tp, int peer, char *buf, size_t len);

    /* Flushes what can be flushed within a short bound and frees everything.
     * Accepts NULL. Does not call the sink. */
    void (*destroy)(oobx_tp_t *tp);
};

/* First member of every transport's instance. */
struct oobx_tp {
    const oobx_tp_ops_t *ops;
};

/* Built-in and module transports. */
extern const oobx_tp_ops_t oobx__socket_ops;

/* Finds a transport by name, loading its module (liboobx-<name>.so from the
 * library's own directory) when needed. Returns 0 and *ops, or
 * OOBX_ERR_UNAVAILABLE with the reason in why. */
int oobx__tp_lookup(const char *name, const oobx_tp_ops_t **ops, char *why, size_t whylen);

/* Checks that transport name can run here: loads it and creates and destroys
 * a one-rank instance. 0, or an error with the reason in why. */
int oobx__tp_probe(const char *name, const oobx_settings_t *s, char *why, size_t whylen);

/* Default for an optional op. */
int oobx__tp_ring_none(oobx_tp_t *tp, int prev, int next);

#endif
