/*
 * The transport contract. The core (p2p matching, collectives, init) is
 * written once over this interface; src/socket.c, ucx/ and verbs/ implement it.
 *
 * Threading: the core calls every op with the endpoint lock held, from one
 * thread at a time (sleep excepted); sink callbacks are invoked from inside
 * progress() with the same lock held. Nothing here may block for long:
 * connect and send only start work, progress() finishes it, and the core
 * sleeps in sleep() on the fds that wait_prepare() hands out.
 *
 * Every entry of an ops table is set: a transport without a use for an
 * optional op plugs in the default below (oobx_tp_ring_unsupported,
 * oobx_tp_sleep_poll), as UCX's transports plug in its "unsupported" stubs.
 * The core checks a table when it loads it and never tests for NULL.
 *
 * A transport built as a module (ucx/, verbs/) reaches the core only
 * through the oobx_core_api_t it is handed at load (tp_module.h); the
 * built-in socket transport is linked with the core.
 *
 * Ranks are endpoint ranks: the ranks of the communicator that created the
 * endpoint (a split child maps its ranks onto them).
 */
#ifndef OOBX_TRANSPORT_H
#define OOBX_TRANSPORT_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "log.h"
#include "settings.h"

#define OOBX_TP_VERSION 7 /* 2: sleep() gets the pollfds, every op set; 3: sink.need_peer; 4: sink.peer_left; 5: params.secret; 6: settings.cma_min; 7: release */
#define OOBX_ADDR_MAX 2048 /* largest address blob a transport may publish */

enum { OOBX_MSG_P2P = 1, OOBX_MSG_COLL = 2, OOBX_MSG_CTRL = 3 };
/* In the tag of an OOBX_MSG_CTRL message: the receiver is in a call (a
 * probe, its answer), so the transport may open a link for it. Without it
 * (goodbyes, failure notices, sent while ranks leave) a transport may send
 * only on links that exist (UCX: opening one to a same-host peer that is
 * exiting aborts the sender). */
#define OOBX_CTRL_MAY_CONNECT (1ull << 32)

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
     * go and a cookie for msg_end. The pointer stays valid until msg_end.
     * Payload may be written in any number of pieces. NULL with len > 0: the
     * core does not want the payload (too large for the receive, or more
     * than the sender may have waiting): the transport consumes it without
     * storing it (or has the sender skip it) and still calls msg_end. */
    void *(*msg_begin)(void *core, const oobx_msg_hdr_t *hdr, void **cookie);
    /* All of the payload of the message of this cookie is in place. */
    void (*msg_end)(void *core, void *cookie);
    /* The link to peer is gone. Pending and later sends to it fail; receives
     * from it fail. what says why ("connection reset by 10.0.0.3:4100"). */
    void (*peer_failed)(void *core, int peer, int status, const char *what);
    /* The transport needs peer's address and set_peer was not called for it
     * (a message came from a peer it never sent to, a name for a message):
     * the core calls set_peer(peer) before it returns 0 when it knows the
     * address (the node-aware path hands out addresses on first use), or
     * returns an error and the transport goes on without it. */
    int (*need_peer)(void *core, int peer);
    /* The peer released its endpoint in order, as the transport learnt it
     * its own way (UCX: the same-host departure board): the link's going
     * down, reported with peer_failed, is its leaving, not a failure. */
    void (*peer_left)(void *core, int peer);
} oobx_tp_sink_t;

typedef struct oobx_tp_params {
    int rank;
    int nranks;
    uint64_t magic;                /* the communicator magic, checked in every hello */
    const unsigned char *secret;   /* the job secret (OOBX_SECRET_BYTES, auth.h) links prove; copy it */
    const oobx_settings_t *settings;
    const oobx_log_t *log;
    oobx_tp_sink_t sink;
    const void *root_hint;         /* struct sockaddr of root 0 or NULL: interface matching */
    unsigned root_hint_len;
    int wake_fd;                   /* the core's wake-up fd (a timerfd): readable when a sleeper must wake; read 8 bytes to clear */
    const struct oobx_core_api *core; /* what the core offers a transport (tp_module.h) */
} oobx_tp_params_t;

struct oobx_core_api;
typedef struct oobx_tp oobx_tp_t;
typedef struct oobx_tp_ops oobx_tp_ops_t;

struct oobx_tp_ops {
    int version;               /* OOBX_TP_VERSION */
    const char *name;          /* "socket", "ucx", "verbs" */
    /* The transport's own settings (NULL-terminated; parsed by the transport
     * with core->settings_parse in create, listed by oobx-info -c), or an
     * empty table. */
    const oobx_setting_desc_t *settings;

    /* Creates an instance that can be reached at address(). May block
     * briefly (bind, worker creation). Returns 0, OOBX_ERR_UNAVAILABLE when
     * the transport cannot run in this process (the message says why), or
     * another error. On failure *tp is untouched. */
    int (*create)(const oobx_tp_params_t *p, oobx_tp_t **tp);

    /* This rank's address blob. *len: capacity in, size out (<= OOBX_ADDR_MAX). */
    int (*address)(oobx_tp_t *tp, void *blob, size_t *len);

    /* Records peer's address blob. No I/O. Returns OOBX_ERR_PROTOCOL for a
     * blob this transport cannot parse. Not every peer gets one at init: on
     * the node-aware path only the ring neighbours do, and the others when
     * first needed (a send, or sink.need_peer). May be called again for the
     * same peer with the same blob. */
    int (*set_peer)(oobx_tp_t *tp, int peer, const void *blob, size_t len);

    /* Tells the transport its ring neighbours (-1 for none), so it can set up
     * ring links (registered ring buffers) eagerly. The core calls it twice
     * at init: with (-1, next) as soon as set_peer(next) is done, before the
     * address allgather, then with (prev, next) once every address is set.
     * Not called for a 1-rank communicator. Does not block. */
    int (*ring)(oobx_tp_t *tp, int prev, int next);

    /* Queues a message to peer (set_peer was called; connects on first use).
     * Never blocks. payload (hdr->len bytes) must stay valid until req->done.
     * Returns 0 (req may already be done) or an error when peer is known to
     * have failed; then req is not touched. peer != own rank. A control
     * message (OOBX_MSG_CTRL: the core's failure notices go to every rank it
     * talked with, some of which only connected to it) to a peer with no
     * address and no link returns OOBX_ERR_REMOTE and sets no error: the
     * core says at debug level that it did not go. */
    int (*send)(oobx_tp_t *tp, int peer, const oobx_msg_hdr_t *hdr, const void *payload,
                oobx_tp_req_t *req);

    /* Gives memory back to the caller before a call that lent it returns
     * with an error (a send's payload, a receive's buffer): from the return
     * on, the transport neither reads nor writes [base, base + len). A send
     * whose payload lies there still goes, from the transport's own copy
     * (its request is done as usual), or fails its link; a message being
     * written there is taken to its end into nowhere (msg_end still comes).
     * May wait a short bound for work already handed to the hardware or to
     * the peer on that memory; a peer that does not answer within it has its
     * link failed. Only memory of live requests is ever named. */
    void (*release)(oobx_tp_t *tp, const void *base, size_t len);

    /* Does every piece of work possible without blocking: accepts, connects,
     * reads, writes, completions; calls the sink. Returns 0, or an error
     * that makes the whole endpoint unusable. */
    int (*progress)(oobx_tp_t *tp);

    /* Before the core sleeps: fills up to max pollfds and caps *timeout_ms
     * (already set by the core; lower it for the transport's own timers).
     * Returns 0 when sleeping is safe, 1 when progress() has work to do now
     * (then the core calls progress() again instead of sleeping). */
    int (*wait_prepare)(oobx_tp_t *tp, struct pollfd *fds, int max, int *nfds, int *timeout_ms);

    /* Called WITHOUT the endpoint lock, by one thread at a time, right after
     * wait_prepare returned 0: sleeps up to timeout_ms (-1: no bound) until
     * one of fds is ready or the transport has work, in one system call.
     * fds[0] is the core's wake fd (params.wake_fd); fds[1..nfds-1] are what
     * wait_prepare filled. The wake fd is cleared (its 8 bytes read) either
     * here or by the next progress(); otherwise sleep only records what
     * woke it, for the next progress().
     * Touches nothing else. The default is oobx_tp_sleep_poll. */
    int (*sleep)(oobx_tp_t *tp, struct pollfd *fds, int nfds, int timeout_ms);

    /* Prints what the transport sees on this host (devices, ports, its
     * choice) for oobx-info -u; core is the core's services. The default,
     * oobx_tp_describe_none, prints nothing. */
    void (*describe)(FILE *out, const oobx_settings_t *s, const struct oobx_core_api *core);

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

/* ---- defaults for optional ops ---- */

/* ring: the transport sets up nothing for the ring. */
static inline int oobx_tp_ring_unsupported(oobx_tp_t *tp, int prev, int next)
{
    (void)tp;
    (void)prev;
    (void)next;
    return 0;
}

/* describe: nothing to say. */
static inline void oobx_tp_describe_none(FILE *out, const oobx_settings_t *s, const struct oobx_core_api *core)
{
    (void)out;
    (void)s;
    (void)core;
}

/* sleep: poll() on the fds, clearing the wake fd when it fired. */
static inline int oobx_tp_sleep_poll(oobx_tp_t *tp, struct pollfd *fds, int nfds, int timeout_ms)
{
    (void)tp;
    int n = poll(fds, (nfds_t)nfds, timeout_ms);
    if (n > 0 && fds[0].fd >= 0 && (fds[0].revents & POLLIN)) {
        uint64_t v;
        ssize_t r = read(fds[0].fd, &v, sizeof(v));
        (void)r;
    }
    return 0;
}

#endif
