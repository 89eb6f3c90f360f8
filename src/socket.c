/*
 * The socket transport: one listening socket per rank, persistent connections
 * opened lazily (the ring neighbour's eagerly), framed messages, everything
 * non-blocking behind one epoll set whose fd the core sleeps on.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "auth.h"
#include "cma.h"
#include "oobx.h"
#include "sock.h"
#include "topo.h"
#include "tp_common.h"
#include "tp_table.h"
#include "transport.h"
#include "util.h"
#include "wire.h"

#define SK_STAGE_BYTES (256 * 1024)
#define SK_DIRECT_MIN (64 * 1024) /* bodies at least this big are read straight into place */
#define SK_HELLO_MS 10000         /* an accepted connection must say hello within this, or the timeout if longer */
#define SK_HELLO_UNBOUNDED_MS 120000 /* the same when the timeout is unbounded */
#define SK_MAX_PENDING 1024       /* unidentified inbound connections kept at once */
#define SK_REFUSED_MAX 3          /* connects to a rank's listener refused in a row before it counts as gone */
#define SK_SOCKADDR_BYTES 24                                   /* family, port, address, scope */
#define SK_ADDR_BYTES (SK_SOCKADDR_BYTES + OOBX_NONCE_BYTES) /* and the listener's instance nonce */
#define SK_ADDR_CMA_BYTES (SK_ADDR_BYTES + OOBX_CMA_ID_BYTES) /* with this rank's single-copy identity */
#define SK_CTL_MAX (1u << 20) /* bytes of CTS frames one connection may owe */
#define SK_CMA_DESC_BYTES 32 /* after an RTS|CMA header: u64 payload address, u64 its length, u64 ticket address, u64 its nonce */
/* Payloads at least this big wait for the receiver's clear-to-send: a
 * receiver that does not want one (too large for its receive) skips it
 * unsent. One round trip is under 1% of such a transfer. */
#define SK_RNDV_MIN (8u << 20)

/* Connections: the connector sends its hello and counted proof as soon as
 * the connect completes (the acceptor's nonce is the instance nonce in the
 * acceptor's address) and waits for the acceptor's hello and proof
 * (SC_HELLO_OUT); the acceptor says nothing before it has checked that proof
 * (SC_HELLO_IN). auth.h describes the proofs. */
enum { SC_CONNECTING, SC_HELLO_OUT, SC_HELLO_IN, SC_READY, SC_DEAD, SC_RETRY };
#define SK_HELLO_IN_BYTES (OOBX_HELLO_BYTES + OOBX_PROOF_BYTES) /* connector -> acceptor */
#define SK_HELLO_ACK_BYTES (OOBX_HELLO_BYTES + OOBX_MAC_BYTES)  /* acceptor -> connector */
enum { RX_HDR, RX_BODY };

typedef struct sk_send {
    struct sk_send *next;
    unsigned char hdr[OOBX_MSGHDR_BYTES + SK_CMA_DESC_BYTES];
    size_t hdr_len; /* OOBX_MSGHDR_BYTES, + SK_CMA_DESC_BYTES when the receiver may pull the payload */
    const char *payload;
    size_t len; /* payload bytes */
    size_t off; /* of OOBX_MSGHDR_BYTES + len sent */
    int rndv;   /* the payload waits for the receiver's CTS (OOBX_FRAME_RTS) */
    int cts;    /* the CTS_GO came: a DATA frame header (dhdr) and the payload follow */
    int piped;  /* a pull whose answer is not waited for before the next message goes (sk_conn_t.pl_head) */
    unsigned char dhdr[OOBX_MSGHDR_BYTES];
    oobx_tp_req_t *req;
    oobx_msg_hdr_t wire; /* the header as queued (a pull not yet out becomes a plain message again) */
    char *own;           /* the payload's copy, once the call gave the caller's buffer back */
    oobx__cma_ticket_t ticket; /* a pull's: read by the receiver after the payload (cma.h) */
} sk_send_t;

typedef struct sk_conn {
    struct sk_conn *next_all, *prev_all;
    int fd;
    int state;
    int peer;    /* -1 until its hello */
    int outgoing;
    uint32_t ev; /* epoll events registered */
    unsigned char hello[SK_HELLO_IN_BYTES];
    size_t hello_n; /* bytes of the handshake message received so far */
    oobx_auth_t auth;
    uint64_t deadline;
    char name[96];
    /* receive */
    int rx;
    unsigned char *stage;
    size_t s_head, s_tail;
    oobx_msg_hdr_t cur;
    char *dst;
    size_t got;
    void *cookie;
    /* send */
    sk_send_t *sq_head, *sq_tail;
    int send_gone; /* the peer reset the link with bytes still to read: they go first (send_fail) */
    sk_send_t *pl_head, *pl_tail; /* piped pulls that are out, waiting for CTS_DONE (or _SKIP), in order */
    unsigned char *ctl; /* CTS frames owed, written between messages (one per rendezvous the peer has out) */
    size_t ctl_cap;
    size_t ctl_len, ctl_off;
    /* receive: a rendezvous told to go, whose DATA frame has not come yet */
    int rv_pending;
    oobx_msg_hdr_t rv_hdr;
    char *rv_dst;
    void *rv_cookie;
} sk_conn_t;

typedef struct sk_peer {
    oobx_sockaddr_t addr;
    int have_addr;
    sk_conn_t *conn; /* the connection this rank sends on, once chosen */
    int failed;
    int tries;
    uint64_t first_try, retry_at;
    int last_err;
    int refused; /* connects refused in a row */
    int cma_set;  /* cma holds what the peer's address said */
    int cma_seen; /* the peer pulled a payload of ours: later pulls go without waiting for the answers */
    oobx__cma_peer_t cma;
    unsigned char inst[OOBX_NONCE_BYTES]; /* its listener's instance nonce, from its address */
    uint64_t last_count;                  /* the count of the last proof taken from it */
} sk_peer_t;

typedef struct sk_tp {
    oobx_tp_t base;
    oobx_tp_params_t p;
    const oobx_log_t *log;
    int rank, nranks;
    uint64_t magic;
    unsigned char secret[OOBX_SECRET_BYTES];
    int epfd;
    int listen_fd;
    oobx_sockaddr_t addr;
    char name[96];
    sk_peer_t *peers;
    sk_conn_t *conns; /* every connection */
    int leaving;      /* in destroy: the last sends take whichever link comes up first */
    int npending;     /* inbound connections without hello yet */
    uint64_t rng;
    oobx_ratelimit_t stray_rl;
    int timeout_ms;
    int hello_ms;      /* an accepted connection's time to say hello (SK_HELLO_MS) */
    int retry_pending; /* some peer waits for a reconnect */
    int nstray_dead;   /* dropped strays waiting to be freed */
    int wake_fd;       /* the core's eventfd, in the epoll set */
    struct epoll_event slept[64]; /* what the last sleep() saw, for progress() */
    int nslept;
    /* The connection that last brought data: while a rank polls, progress()
     * reads it alone on three calls of four (one system call a pass, as in a
     * raw polling loop), and epoll serves all connections on the fourth. The
     * first call after a sleep asks epoll: a rank that sleeps between
     * messages (an oversubscribed host) would pay one more system call a
     * wake-up. */
    struct sk_conn *hot;
    unsigned hot_turn;
    /* Messages in a row that came on the hot connection (epoll's or the hot
     * read's): the hot read is worth its system calls only where traffic
     * stays on one connection (a ping-pong, a ring's stream), read alone
     * from the second message in a row. Where each message comes from
     * another peer (the steps of a Bruck allgather or a tree), reading the
     * last sender's connection finds nothing on three passes of four and
     * moves it out of epoll and back every step: there epoll serves every
     * pass. */
    unsigned hot_streak;
    int woke;          /* the last progress() took what a sleep found: the next asks epoll */
    /* The hot connection taken out of the epoll set while the rank polls it:
     * a socket in an epoll set runs epoll's wake-up callback, two locks
     * taken with interrupts off, for every packet that arrives, on the
     * sender's path (dear on a paravirtualized host), and a polling rank
     * does not need it. Parked only from the second progress() call after
     * wait_prepare() (a polling loop: one wait_prepare() comes before every
     * sleep), never with output waiting for EPOLLOUT; wait_prepare() puts
     * it back, so nothing sleeps on an epoll set without it. */
    struct sk_conn *parked;
    unsigned passes; /* progress() calls since the last wait_prepare() */
    oobx__cma_self_t cma; /* this rank's single-copy identity (cma.h) */
    size_t cma_min;       /* OOBX_CMA_MIN */
    unsigned char inst[OOBX_NONCE_BYTES]; /* this listener's instance nonce (fresh per transport) */
    uint64_t count;                       /* proofs made: each outgoing connection counts one up */
} sk_tp_t;



static sk_tp_t *tp_of(oobx_tp_t *t)
{
    return (sk_tp_t *)t;
}

/* A pull's receiver may still read the ticket: it says the payload is gone
 * before the record is. */
static void send_free(sk_send_t *s)
{
    if (s->hdr_len > OOBX_MSGHDR_BYTES) oobx__cma_ticket_void(&s->ticket);
    free(s->own);
    free(s);
}

/* The head send has its header out and waits for the receiver's CTS. */
static int send_waits_cts(const sk_send_t *s)
{
    return s && s->rndv && !s->cts && s->off >= s->hdr_len;
}

static int conn_wants_out(const sk_conn_t *c)
{
    return !c->send_gone && (c->ctl_off < c->ctl_len || (c->sq_head && !send_waits_cts(c->sq_head)));
}

/* Nothing of a frame is half written: a CTS frame may go now (a rendezvous
 * header is a whole frame; its payload comes later in a DATA frame). */
static int conn_at_boundary(const sk_conn_t *c)
{
    const sk_send_t *s = c->sq_head;
    return !s || s->off == 0 || (s->rndv && s->off == s->hdr_len);
}

/* The parked connection back into the epoll set (with its events: a level
 * triggered add reports what is ready already, so nothing is lost). */
static void conn_unpark(sk_tp_t *t)
{
    sk_conn_t *c = t->parked;
    if (!c) return;
    t->parked = NULL;
    if (c->fd < 0) return;
    struct epoll_event e = {.events = c->ev, .data.ptr = c};
    epoll_ctl(t->epfd, EPOLL_CTL_ADD, c->fd, &e);
}

static void conn_park(sk_tp_t *t, sk_conn_t *c)
{
    if (t->parked == c || t->passes < 2 || (c->ev & EPOLLOUT) || c->fd < 0) return;
    conn_unpark(t);
    if (epoll_ctl(t->epfd, EPOLL_CTL_DEL, c->fd, NULL) == 0) t->parked = c;
}

/* Closes c's fd, out of the epoll set first (a parked one is out already). */
static void conn_close_fd(sk_tp_t *t, sk_conn_t *c)
{
    if (c->fd < 0) return;
    if (t->parked == c) t->parked = NULL;
    else epoll_ctl(t->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
}

static void conn_set_events(sk_tp_t *t, sk_conn_t *c)
{
    if (c->fd < 0) return;
    uint32_t ev = EPOLLIN;
    /* a hello goes out in one send: HELLO_OUT only waits for the answer */
    if (c->state == SC_CONNECTING || (c->state == SC_READY && conn_wants_out(c))) ev |= EPOLLOUT;
    if (ev == c->ev) return;
    c->ev = ev;
    if (t->parked == c) {
        if (ev & EPOLLOUT) conn_unpark(t); /* output waits: epoll says when it can go */
        return;
    }
    struct epoll_event e = {.events = ev, .data.ptr = c};
    epoll_ctl(t->epfd, EPOLL_CTL_MOD, c->fd, &e);
}

static sk_conn_t *conn_new(sk_tp_t *t, int fd, int outgoing, int peer)
{
    sk_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->fd = fd;
    c->outgoing = outgoing;
    c->peer = peer;
    c->state = outgoing ? SC_CONNECTING : SC_HELLO_IN;
    c->ev = EPOLLIN | (outgoing ? EPOLLOUT : 0);
    struct epoll_event e = {.events = c->ev, .data.ptr = c};
    if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &e) != 0) {
        free(c);
        return NULL;
    }
    c->next_all = t->conns;
    if (t->conns) t->conns->prev_all = c;
    t->conns = c;
    return c;
}

static void conn_free(sk_tp_t *t, sk_conn_t *c)
{
    if (t->hot == c) t->hot = NULL;
    conn_close_fd(t, c);
    if (c->prev_all) c->prev_all->next_all = c->next_all;
    else t->conns = c->next_all;
    if (c->next_all) c->next_all->prev_all = c->prev_all;
    while (c->sq_head) {
        sk_send_t *s = c->sq_head;
        c->sq_head = s->next;
        send_free(s);
    }
    while (c->pl_head) {
        sk_send_t *s = c->pl_head;
        c->pl_head = s->next;
        send_free(s);
    }
    free(c->stage);
    free(c->ctl);
    free(c);
}

/* Closes c and leaves it to the sweep at the end of progress(), so that
 * events of the same batch never see freed memory. */
static void conn_retire(sk_tp_t *t, sk_conn_t *c)
{
    conn_close_fd(t, c);
    c->state = SC_DEAD;
    c->peer = -1;
    t->nstray_dead++;
}

/* 1 when peer's address is known, asking the core for it first if needed (a
 * peer that only ever connected to us, on the node-aware path). */
static int peer_known(sk_tp_t *t, int peer)
{
    if (!t->peers[peer].have_addr && t->p.sink.need_peer) (void)t->p.sink.need_peer(t->p.sink.core, peer);
    return t->peers[peer].have_addr;
}

static void peer_describe(sk_tp_t *t, int peer, char *buf, size_t len)
{
    char a[96] = "address unknown";
    if (peer >= 0 && peer < t->nranks && peer_known(t, peer)) oobx__sock_addr_format(&t->peers[peer].addr, a, sizeof(a));
    snprintf(buf, len, "rank %d (%s)", peer, a);
}

/* Fails every send queued on c with status, and tells the core the peer is gone. */
static void conn_fail(sk_tp_t *t, sk_conn_t *c, int status, const char *what)
{
    if (c->state == SC_DEAD) return;
    c->state = SC_DEAD;
    /* their callers may reuse the payloads now: a pull's reader must not take them */
    for (sk_send_t *s = c->sq_head; s; s = s->next) {
        if (s->hdr_len > OOBX_MSGHDR_BYTES) oobx__cma_ticket_void(&s->ticket);
        s->req->status = status;
        s->req->done = 1;
    }
    for (sk_send_t *s = c->pl_head; s; s = s->next) {
        oobx__cma_ticket_void(&s->ticket);
        s->req->status = status;
        s->req->done = 1;
    }
    int peer = c->peer;
    if (peer >= 0 && t->peers[peer].conn == c) {
        t->peers[peer].conn = NULL;
        t->peers[peer].failed = 1;
    }
    conn_close_fd(t, c);
    if (peer >= 0) {
        /* a message in flight from this peer is dropped by the core */
        c->cookie = NULL;
        c->rv_cookie = NULL;
        c->rv_pending = 0;
        t->p.sink.peer_failed(t->p.sink.core, peer, status, what);
    }
}

/* ---- connecting ------------------------------------------------------------- */

static int peer_connect(sk_tp_t *t, int peer)
{
    sk_peer_t *pp = &t->peers[peer];
    char who[160];
    if (!peer_known(t, peer)) {
        peer_describe(t, peer, who, sizeof(who));
        return oobx__fail(t->log, OOBX_ERR_INTERNAL, "socket: no address for %s", who);
    }
    if (!pp->first_try) pp->first_try = oobx__now_ns();
    pp->tries++;
    int fd;
    int err = oobx__sock_connect_start(&pp->addr, &fd);
    sk_conn_t *c = pp->conn;
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c) return OOBX_ERR_NOMEM;
        c->fd = -1;
        c->peer = peer;
        c->outgoing = 1;
        c->next_all = t->conns;
        if (t->conns) t->conns->prev_all = c;
        t->conns = c;
        pp->conn = c;
    }
    if (err == 0) {
        c->fd = fd;
        c->state = SC_CONNECTING;
        c->ev = EPOLLIN | EPOLLOUT;
        struct epoll_event e = {.events = c->ev, .data.ptr = c};
        if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &e) != 0) {
            close(fd);
            c->fd = -1;
            err = errno;
        } else {
            return 0;
        }
    }
    pp->last_err = err;
    c->state = SC_RETRY;
    pp->retry_at = oobx__now_ns() + (uint64_t)oobx__sock_backoff_ms(pp->tries, &t->rng) * 1000000ull;
    t->retry_pending = 1;
    return 0;
}

/* Queues sends to peer on a connection that first waits delay_ms (for the
 * peer to connect to us), then connects through the retry path. */
static int peer_connect_later(sk_tp_t *t, int peer, int delay_ms)
{
    sk_peer_t *pp = &t->peers[peer];
    sk_conn_t *c = calloc(1, sizeof(*c));
    if (!c) return OOBX_ERR_NOMEM;
    c->fd = -1;
    c->peer = peer;
    c->outgoing = 1;
    c->state = SC_RETRY;
    c->next_all = t->conns;
    if (t->conns) t->conns->prev_all = c;
    t->conns = c;
    pp->conn = c;
    pp->first_try = oobx__now_ns();
    pp->retry_at = pp->first_try + (uint64_t)delay_ms * 1000000ull;
    t->retry_pending = 1;
    return 0;
}

/* A connection attempt to c's peer failed with err: retry later, or give up. */
static void conn_retry_or_fail(sk_tp_t *t, sk_conn_t *c, int err)
{
    sk_peer_t *pp = &t->peers[c->peer];
    conn_close_fd(t, c);
    c->ev = 0;
    c->hello_n = 0;
    pp->last_err = err;
    uint64_t now = oobx__now_ns();
    int retry = oobx__sock_errno_retryable(err) &&
                (t->timeout_ms < 0 || now < pp->first_try + (uint64_t)t->timeout_ms * 1000000ull);
    /* the address came from the rank's card, taken when it was already
     * listening: refused again and again, nothing listens there any more */
    if (err == ECONNREFUSED && ++pp->refused >= SK_REFUSED_MAX) retry = 0;
    if (retry) {
        c->state = SC_RETRY;
        pp->retry_at = now + (uint64_t)oobx__sock_backoff_ms(pp->tries, &t->rng) * 1000000ull;
        t->retry_pending = 1;
        return;
    }
    char who[160], what[512];
    peer_describe(t, c->peer, who, sizeof(who));
    if (err == ECONNREFUSED && pp->refused >= SK_REFUSED_MAX)
        snprintf(what, sizeof(what),
                 "%s refused %d connections in a row: nothing listens at its address any more (did it exit or fail?)",
                 who, pp->refused);
    else
        snprintf(what, sizeof(what),
                 "connect to %s failed after %d tries over %.1f s: %s; is rank %d alive? is OOBX_SOCKET_IFNAME right?",
                 who, pp->tries, (now - pp->first_try) / 1e9, strerror(err), c->peer);
    oobx__fail(t->log, OOBX_ERR_REMOTE, "%s", what);
    conn_fail(t, c, OOBX_ERR_REMOTE, what);
}

static void hello_make(sk_tp_t *t, int type, unsigned char out[OOBX_HELLO_BYTES])
{
    oobx_hello_t h = {.proto_magic = OOBX_WIRE_MAGIC, .version = OOBX_WIRE_VERSION, .type = (uint16_t)type,
                      .comm_magic = t->magic, .rank = t->rank, .nranks = t->nranks};
    oobx__hello_encode(&h, out);
}

/* ---- sending ------------------------------------------------------------------ */

static void send_fail(sk_tp_t *t, sk_conn_t *c, int err)
{
    /* A peer that gave up because another rank failed says so before it
     * closes; its reset may reach a send of ours before we read that, and
     * what it sent stays readable. The read goes first (the next progress:
     * epoll reports it), so that the first failure is named rather than this
     * link, and the end of the stream fails the connection. */
    unsigned char b;
    if ((err == EPIPE || err == ECONNRESET) && c->state == SC_READY &&
        recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 1) {
        c->send_gone = 1;
        return;
    }
    char who[160], what[300];
    peer_describe(t, c->peer, who, sizeof(who));
    snprintf(what, sizeof(what), "send to %s failed: %s", who, strerror(err));
    conn_fail(t, c, OOBX_ERR_REMOTE, what);
}

/* Bytes of s that go before it must wait (a rendezvous header before its
 * CTS); after the CTS a rendezvous is its header, a DATA header, the payload. */
static size_t send_total(const sk_send_t *s)
{
    if (!s->rndv) return s->hdr_len + s->len;
    return s->hdr_len + (s->cts ? OOBX_MSGHDR_BYTES + s->len : 0);
}

/* The iovecs of what is left of s (at most 3). */
static int send_iov(const sk_send_t *s, struct iovec *iov)
{
    struct {
        const void *p;
        size_t n;
    } seg[3];
    int ns = 0;
    seg[ns].p = s->hdr;
    seg[ns++].n = s->hdr_len;
    if (s->rndv && s->cts) {
        seg[ns].p = s->dhdr;
        seg[ns++].n = OOBX_MSGHDR_BYTES;
    }
    if (!s->rndv || s->cts) {
        seg[ns].p = s->payload;
        seg[ns++].n = s->len;
    }
    size_t skip = s->off;
    int n = 0;
    for (int i = 0; i < ns; i++) {
        if (skip >= seg[i].n) {
            skip -= seg[i].n;
            continue;
        }
        iov[n].iov_base = (char *)seg[i].p + skip;
        iov[n++].iov_len = seg[i].n - skip;
        skip = 0;
    }
    return n;
}

/* Writes as much of c's queue (and the CTS frames owed) as the socket takes. */
static void conn_flush(sk_tp_t *t, sk_conn_t *c)
{
    if (c->send_gone) return;
    for (;;) {
        if (c->ctl_off < c->ctl_len && (c->ctl_off > 0 || conn_at_boundary(c))) {
            ssize_t w = send(c->fd, c->ctl + c->ctl_off, c->ctl_len - c->ctl_off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK) break;
                if (errno == EINTR) continue;
                send_fail(t, c, errno);
                return;
            }
            c->ctl_off += (size_t)w;
            if (c->ctl_off < c->ctl_len) break;
            c->ctl_off = c->ctl_len = 0;
            continue;
        }
        if (!c->sq_head || send_waits_cts(c->sq_head)) break;
        struct iovec iov[64];
        int n = 0;
        size_t want = 0;
        for (sk_send_t *s = c->sq_head; s && n < 61; s = s->next) {
            n += send_iov(s, iov + n);
            want += send_total(s) - s->off;
            /* a rendezvous header (not a piped pull), or a CTS owed, ends the batch */
            if (send_total(s) == s->hdr_len && s->rndv && !s->piped) break;
            if (c->ctl_len) break;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            if (errno == EINTR) continue;
            send_fail(t, c, errno);
            return;
        }
        size_t left = (size_t)w;
        while (c->sq_head && left) {
            sk_send_t *s = c->sq_head;
            size_t need = send_total(s) - s->off;
            if (left < need) {
                s->off += left;
                break;
            }
            left -= need;
            s->off = send_total(s);
            if (send_waits_cts(s) && !s->piped) break;
            c->sq_head = s->next;
            if (!c->sq_head) c->sq_tail = NULL;
            if (s->piped) {
                /* out: its answer comes in its turn */
                s->next = NULL;
                if (c->pl_tail) c->pl_tail->next = s;
                else c->pl_head = s;
                c->pl_tail = s;
                continue;
            }
            s->req->status = 0;
            s->req->done = 1;
            send_free(s);
        }
        if ((size_t)w < want) break; /* socket buffer full */
    }
    conn_set_events(t, c);
}

/* Owes the peer a CTS frame: kind OOBX_FRAME_CTS_GO (send the payload),
 * _SKIP (do not) or _DONE (pulled it). */
static int conn_owe_cts(sk_tp_t *t, sk_conn_t *c, uint32_t kind)
{
    if (c->ctl_len + OOBX_MSGHDR_BYTES > c->ctl_cap) {
        /* a peer has as many answers owed as it has pulls out: its own sends bound them */
        size_t cap = c->ctl_cap ? 2 * c->ctl_cap : 4 * OOBX_MSGHDR_BYTES;
        if (cap > SK_CTL_MAX) return -1;
        unsigned char *n = realloc(c->ctl, cap);
        if (!n) return -1;
        c->ctl = n;
        c->ctl_cap = cap;
    }
    oobx_msg_hdr_t h = {.src = t->rank, .kind = kind};
    oobx__msghdr_encode(&h, c->ctl + c->ctl_len);
    c->ctl_len += OOBX_MSGHDR_BYTES;
    return 0;
}

static int sk_send(oobx_tp_t *tpp, int peer, const oobx_msg_hdr_t *hdr, const void *payload, oobx_tp_req_t *req)
{
    sk_tp_t *t = tp_of(tpp);
    if (peer < 0 || peer >= t->nranks || peer == t->rank)
        return oobx__fail(t->log, OOBX_ERR_INVALID, "socket: send to rank %d of %d", peer, t->nranks);
    sk_peer_t *pp = &t->peers[peer];
    char who[160];
    if (pp->failed) {
        peer_describe(t, peer, who, sizeof(who));
        return oobx__fail(t->log, OOBX_ERR_REMOTE, "socket: %s failed earlier; cannot send to it", who);
    }
    sk_conn_t *rc_ = pp->conn;
    if (!rc_ && hdr->kind == OOBX_MSG_CTRL && !peer_known(t, peer)) return OOBX_ERR_REMOTE; /* transport.h */
    /* a peer of this host that can read our memory pulls the payload itself */
    int cma = t->cma_min && hdr->len >= t->cma_min && pp->cma_set && pp->cma.state != OOBX_CMA_NO;
    int rndv = hdr->len >= SK_RNDV_MIN || cma;
    if (rc_ && rc_->state == SC_READY && !rc_->sq_head && !rc_->ctl_len && !rndv && !rc_->send_gone) {
        /* the common case: an idle connection takes the whole message at once */
        unsigned char h[OOBX_MSGHDR_BYTES];
        oobx__msghdr_encode(hdr, h);
        struct iovec iov[2] = {{h, OOBX_MSGHDR_BYTES}, {(void *)payload, hdr->len}};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = hdr->len ? 2 : 1};
        ssize_t w = sendmsg(rc_->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w == (ssize_t)(OOBX_MSGHDR_BYTES + hdr->len)) {
            req->status = 0;
            req->done = 1;
            return 0;
        }
        if (w > 0 || (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) {
            sk_send_t *s = calloc(1, sizeof(*s)); /* every field zero: not a rendezvous, not piped */
            if (!s) {
                if (w > 0) conn_fail(t, rc_, OOBX_ERR_NOMEM, "out of memory in the middle of a message");
                return OOBX_ERR_NOMEM;
            }
            memcpy(s->hdr, h, OOBX_MSGHDR_BYTES);
            s->hdr_len = OOBX_MSGHDR_BYTES;
            s->rndv = s->cts = 0;
            s->payload = payload;
            s->len = hdr->len;
            s->off = w > 0 ? (size_t)w : 0;
            s->req = req;
            s->next = NULL;
            req->done = 0;
            req->status = 0;
            rc_->sq_head = rc_->sq_tail = s;
            conn_set_events(t, rc_);
            return 0;
        }
        /* a hard error: the queued path below reports it through conn_flush */
    }
    sk_send_t *s = calloc(1, sizeof(*s));
    if (!s) return OOBX_ERR_NOMEM;
    oobx_msg_hdr_t wire = *hdr;
    if (rndv) wire.kind |= OOBX_FRAME_RTS;
    if (cma) wire.kind |= OOBX_FRAME_CMA;
    oobx__msghdr_encode(&wire, s->hdr);
    s->wire = wire;
    s->hdr_len = OOBX_MSGHDR_BYTES;
    if (cma) {
        oobx__cma_ticket_init(&s->ticket, payload);
        oobx__put_u64(s->hdr + OOBX_MSGHDR_BYTES, (uint64_t)(uintptr_t)payload);
        oobx__put_u64(s->hdr + OOBX_MSGHDR_BYTES + 8, hdr->len);
        oobx__put_u64(s->hdr + OOBX_MSGHDR_BYTES + 16, (uint64_t)(uintptr_t)&s->ticket);
        oobx__put_u64(s->hdr + OOBX_MSGHDR_BYTES + 24, s->ticket.nonce);
        s->hdr_len += SK_CMA_DESC_BYTES;
        s->piped = pp->cma_seen;
    }
    s->rndv = rndv;
    s->payload = payload;
    s->len = hdr->len;
    s->off = 0;
    s->req = req;
    s->next = NULL;
    req->done = 0;
    req->status = 0;
    if (!pp->conn) {
        int rc = peer_connect(t, peer);
        if (rc != 0) {
            free(s);
            return rc;
        }
    }
    sk_conn_t *c = pp->conn;
    int was_empty = c->sq_head == NULL;
    if (c->sq_tail) c->sq_tail->next = s;
    else c->sq_head = s;
    c->sq_tail = s;
    if (c->state == SC_READY && was_empty) conn_flush(t, c);
    return 0;
}

/* The caller of s takes its buffer back: s goes on from a copy. A pull
 * whose offer is out points its ticket at the copy; one not yet out becomes
 * a plain message (a rendezvous when large). */
static int send_own(sk_tp_t *t, sk_conn_t *c, sk_send_t *s)
{
    char *own = malloc(s->len);
    if (!own) {
        conn_fail(t, c, OOBX_ERR_NOMEM, "socket: out of memory for a copy of a payload whose call ended");
        return -1;
    }
    memcpy(own, s->payload, s->len);
    s->own = own;
    s->payload = own;
    if (s->hdr_len == OOBX_MSGHDR_BYTES) return 0;
    if (s->off) {
        oobx__cma_ticket_move(&s->ticket, own);
        return 0;
    }
    oobx__cma_ticket_void(&s->ticket);
    s->wire.kind &= ~(uint32_t)OOBX_FRAME_CMA;
    s->rndv = s->len >= SK_RNDV_MIN;
    if (!s->rndv) s->wire.kind &= ~(uint32_t)OOBX_FRAME_RTS;
    s->piped = 0;
    oobx__msghdr_encode(&s->wire, s->hdr);
    s->hdr_len = OOBX_MSGHDR_BYTES;
    return 0;
}

static void sk_release(oobx_tp_t *tpp, const void *base, size_t len)
{
    sk_tp_t *t = tp_of(tpp);
    for (sk_conn_t *c = t->conns; c; c = c->next_all) {
        if (c->state == SC_DEAD) continue;
        /* a payload being read into it, or told to come, goes nowhere */
        if (c->rx == RX_BODY && oobx__in_range(c->dst, base, len)) c->dst = NULL;
        if (c->rv_pending && oobx__in_range(c->rv_dst, base, len)) c->rv_dst = NULL;
        for (int l = 0; l < 2 && c->state != SC_DEAD; l++)
            for (sk_send_t *s = l ? c->pl_head : c->sq_head; s; s = s->next)
                if (s->len && !s->own && oobx__in_range(s->payload, base, len) && send_own(t, c, s)) break;
    }
}

/* ---- receiving ----------------------------------------------------------------- */

static void conn_protocol_error(sk_tp_t *t, sk_conn_t *c, const char *why)
{
    char who[160], what[512];
    peer_describe(t, c->peer, who, sizeof(who));
    snprintf(what, sizeof(what), "socket: bad stream from %s: %s", who, why);
    oobx__fail(t->log, OOBX_ERR_PROTOCOL, "%s", what);
    conn_fail(t, c, OOBX_ERR_PROTOCOL, what);
}

/* Pulls the payload of the RTS|CMA message c->cur from the sender's memory
 * at addr into c->dst. 1 when it is in place; 0: the peer's memory cannot
 * be read (said once at info level), so the sender is told to send it; -1:
 * a pull failed after others had worked (the sender no longer waits for
 * the answers), and c failed. */
static int conn_pull(sk_tp_t *t, sk_conn_t *c, const unsigned char *desc)
{
    sk_peer_t *pp = &t->peers[c->peer];
    if (!pp->cma_set) (void)peer_known(t, c->peer);
    if (!pp->cma_set || pp->cma.state == OOBX_CMA_NO) return 0;
    int was_ok = pp->cma.state == OOBX_CMA_OK;
    int rc = oobx__cma_check(&pp->cma) ? oobx__cma_pull_ticket(&pp->cma, c->dst, oobx__get_u64(desc), c->cur.len,
                                                               oobx__get_u64(desc + 16), oobx__get_u64(desc + 24))
                                       : -1;
    if (rc == 0) {
        OOBX_TRACE(t->log, "socket: pulled %llu bytes from rank %d", (unsigned long long)c->cur.len, c->peer);
        return 1;
    }
    if (rc == 1) {
        char who[160], what[400];
        peer_describe(t, c->peer, who, sizeof(who));
        snprintf(what, sizeof(what),
                 "socket: %s withdrew a payload of %llu bytes before this rank read it (its link failed or it left)",
                 who, (unsigned long long)c->cur.len);
        conn_fail(t, c, OOBX_ERR_REMOTE, what);
        return -1;
    }
    if (was_ok) {
        /* the sender pipes its pulls once one worked: no way back for this link */
        char who[160], what[400];
        peer_describe(t, c->peer, who, sizeof(who));
        snprintf(what, sizeof(what), "socket: cannot read a payload of %llu bytes from %s: %s",
                 (unsigned long long)c->cur.len, who, pp->cma.why);
        conn_fail(t, c, OOBX_ERR_REMOTE, what);
        return -1;
    }
    OOBX_INFO(t->log, "socket: rank %d sends its large payloads to this rank over the socket: %s", c->peer,
              pp->cma.why);
    return 0;
}

/* Consumes staged bytes into messages. Returns 0, or -1 when c failed. */
static int conn_parse(sk_tp_t *t, sk_conn_t *c)
{
    for (;;) {
        size_t avail = c->s_tail - c->s_head;
        if (c->rx == RX_HDR) {
            if (avail < OOBX_MSGHDR_BYTES) break;
            char why[200];
            if (oobx__msghdr_decode(c->stage + c->s_head, avail, &c->cur, why, sizeof(why)) != 0) {
                conn_protocol_error(t, c, why);
                return -1;
            }
            if (c->cur.src != c->peer) {
                snprintf(why, sizeof(why), "message claims to be from rank %d", c->cur.src);
                conn_protocol_error(t, c, why);
                return -1;
            }
            unsigned char desc[SK_CMA_DESC_BYTES];
            if (c->cur.kind & OOBX_FRAME_CMA) {
                /* the descriptor of a payload to pull follows the header */
                if (avail < OOBX_MSGHDR_BYTES + SK_CMA_DESC_BYTES) break;
                memcpy(desc, c->stage + c->s_head + OOBX_MSGHDR_BYTES, SK_CMA_DESC_BYTES);
                if (oobx__get_u64(desc + 8) != c->cur.len || c->cur.len == 0) {
                    conn_protocol_error(t, c, "a pull descriptor whose length is not the message's");
                    return -1;
                }
                c->s_head += SK_CMA_DESC_BYTES;
            }
            c->s_head += OOBX_MSGHDR_BYTES;
            if (c->cur.kind == OOBX_FRAME_CTS_GO || c->cur.kind == OOBX_FRAME_CTS_SKIP ||
                c->cur.kind == OOBX_FRAME_CTS_DONE) {
                if (c->pl_head) {
                    /* the answers come in the order of the messages: the oldest piped pull's */
                    sk_send_t *s = c->pl_head;
                    if (c->cur.kind == OOBX_FRAME_CTS_GO) {
                        conn_protocol_error(t, c, "clear-to-send for a payload it had pulled before");
                        return -1;
                    }
                    c->pl_head = s->next;
                    if (!c->pl_head) c->pl_tail = NULL;
                    s->req->status = 0;
                    s->req->done = 1;
                    send_free(s);
                    continue;
                }
                sk_send_t *s = c->sq_head;
                if (!send_waits_cts(s) || (c->cur.kind == OOBX_FRAME_CTS_DONE && s->hdr_len == OOBX_MSGHDR_BYTES)) {
                    conn_protocol_error(t, c, "clear-to-send for no message that waits for one");
                    return -1;
                }
                if (c->cur.kind == OOBX_FRAME_CTS_DONE) t->peers[c->peer].cma_seen = 1;
                if (c->cur.kind == OOBX_FRAME_CTS_GO) {
                    oobx_msg_hdr_t d = {.len = s->len, .src = t->rank, .kind = OOBX_FRAME_DATA};
                    oobx__msghdr_encode(&d, s->dhdr);
                    s->cts = 1;
                } else {
                    /* the receiver dropped it, or pulled it itself: done without sending the payload */
                    c->sq_head = s->next;
                    if (!c->sq_head) c->sq_tail = NULL;
                    s->req->status = 0;
                    s->req->done = 1;
                    send_free(s);
                }
                conn_flush(t, c);
                if (c->state == SC_DEAD) return -1;
                continue;
            }
            if (c->cur.kind == OOBX_FRAME_DATA) {
                /* the payload of the rendezvous told to go */
                if (!c->rv_pending || c->cur.len != c->rv_hdr.len) {
                    conn_protocol_error(t, c, "a rendezvous payload that was not asked for");
                    return -1;
                }
                c->rv_pending = 0;
                c->cur = c->rv_hdr;
                c->dst = c->rv_dst;
                c->cookie = c->rv_cookie;
                c->rv_cookie = NULL;
                c->got = 0;
                c->rx = RX_BODY;
                avail = c->s_tail - c->s_head;
            } else {
                int rts = (c->cur.kind & OOBX_FRAME_RTS) != 0;
                int pull = (c->cur.kind & OOBX_FRAME_CMA) != 0;
                c->cur.kind &= ~(uint32_t)(OOBX_FRAME_RTS | OOBX_FRAME_CMA);
                if (rts && ((c->cur.len < SK_RNDV_MIN && !pull) || c->rv_pending)) {
                    conn_protocol_error(t, c, c->rv_pending ? "a rendezvous before the last one's payload"
                                                            : "rendezvous for a small message");
                    return -1;
                }
                c->cookie = NULL;
                c->dst = t->p.sink.msg_begin(t->p.sink.core, &c->cur, &c->cookie);
                c->got = 0;
                c->rx = RX_BODY;
                if (rts) {
                    /* the header is a whole frame: the payload comes in a DATA frame after our CTS,
                     * unless this rank pulls it from the sender's memory */
                    c->rx = RX_HDR;
                    uint32_t answer = c->dst ? OOBX_FRAME_CTS_GO : OOBX_FRAME_CTS_SKIP;
                    if (c->dst && pull) {
                        int got = conn_pull(t, c, desc);
                        if (got < 0) return -1;
                        if (got) answer = OOBX_FRAME_CTS_DONE;
                    }
                    if (conn_owe_cts(t, c, answer) != 0) {
                        conn_protocol_error(t, c, "more rendezvous answers owed than a connection holds");
                        return -1;
                    }
                    void *cookie = c->cookie;
                    c->cookie = NULL;
                    if (answer == OOBX_FRAME_CTS_GO) {
                        c->rv_pending = 1;
                        c->rv_hdr = c->cur;
                        c->rv_dst = c->dst;
                        c->rv_cookie = cookie;
                    } else {
                        t->p.sink.msg_end(t->p.sink.core, cookie); /* pulled, or skipped: the payload never comes */
                    }
                    conn_flush(t, c);
                    if (c->state == SC_DEAD) return -1;
                    continue;
                }
                avail = c->s_tail - c->s_head;
            }
        }
        size_t need = c->cur.len - c->got;
        size_t take = avail < need ? avail : need;
        if (take) {
            if (c->dst) memcpy(c->dst + c->got, c->stage + c->s_head, take); /* NULL: dropped */
            c->got += take;
            c->s_head += take;
        }
        if (c->got < c->cur.len) break;
        c->rx = RX_HDR;
        void *cookie = c->cookie;
        c->cookie = NULL;
        t->p.sink.msg_end(t->p.sink.core, cookie);
        if (c->state == SC_DEAD) return -1;
    }
    if (c->s_head == c->s_tail) c->s_head = c->s_tail = 0;
    return 0;
}

/* A peer that goes away closes every connection it has with us, and the
 * messages it sent on one may still wait in another. So the end of one
 * connection fails the peer only when it was the last one. Returns 1 when c
 * was dropped and others remain. */
static int conn_close_one_of_many(sk_tp_t *t, sk_conn_t *c)
{
    sk_conn_t *other = NULL;
    for (sk_conn_t *x = t->conns; x; x = x->next_all)
        if (x != c && x->peer == c->peer && x->fd >= 0 && (x->state == SC_READY || x->state == SC_HELLO_OUT))
            other = x;
    if (!other || c->rx == RX_BODY || c->rv_pending) return 0;
    sk_peer_t *pp = &t->peers[c->peer];
    if (pp->conn == c) {
        if (c->sq_head || c->pl_head) return 0; /* what was queued on it is lost: a real failure */
        pp->conn = other;
    }
    conn_retire(t, c);
    return 1;
}

static void conn_read(sk_tp_t *t, sk_conn_t *c)
{
    if (!c->stage) {
        c->stage = malloc(SK_STAGE_BYTES);
        if (!c->stage) return;
    }
    size_t budget = 16u << 20; /* then let other connections have a turn */
    while (budget > 0 && c->state == SC_READY) {
        ssize_t n;
        if (c->rx == RX_BODY && c->dst && c->cur.len - c->got >= SK_DIRECT_MIN && c->s_head == c->s_tail) {
            n = recv(c->fd, c->dst + c->got, c->cur.len - c->got, MSG_DONTWAIT);
            if (n > 0) {
                c->got += (size_t)n;
                budget -= (size_t)n < budget ? (size_t)n : budget;
                if (c->got == c->cur.len) {
                    c->rx = RX_HDR;
                    void *cookie = c->cookie;
                    c->cookie = NULL;
                    t->p.sink.msg_end(t->p.sink.core, cookie);
                }
                continue;
            }
        } else {
            if (c->s_head > 0 && c->s_tail == SK_STAGE_BYTES) {
                memmove(c->stage, c->stage + c->s_head, c->s_tail - c->s_head);
                c->s_tail -= c->s_head;
                c->s_head = 0;
            }
            size_t room = SK_STAGE_BYTES - c->s_tail;
            n = recv(c->fd, c->stage + c->s_tail, room, MSG_DONTWAIT);
            if (n > 0) {
                c->s_tail += (size_t)n;
                budget -= (size_t)n < budget ? (size_t)n : budget;
                if (conn_parse(t, c) != 0) return;
                /* a short read emptied the socket: epoll says when there is more */
                if ((size_t)n < room) return;
                continue;
            }
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n < 0 && errno == EINTR) continue;
        if (conn_close_one_of_many(t, c)) return;
        char who[160], what[400];
        peer_describe(t, c->peer, who, sizeof(who));
        if (n == 0)
            snprintf(what, sizeof(what), "%s closed its connection%s", who,
                     c->rx == RX_BODY || c->rv_pending ? " in the middle of a message" : "; did it exit or fail?");
        else
            snprintf(what, sizeof(what), "connection to %s failed: %s", who, strerror(errno));
        OOBX_DEBUG(t->log, "socket: %s", what);
        conn_fail(t, c, OOBX_ERR_REMOTE, what);
        return;
    }
}

/* ---- hello ---------------------------------------------------------------------- */

/* An inbound connection from a peer replaces our own attempt to reach it
 * while that attempt has carried no data yet (it waits to retry, or, when the
 * peer has the lower rank, is still connecting): one connection per pair, so
 * each side's ACKs ride on the other's data, and nothing is reordered because
 * nothing was sent on the attempt. */
static void conn_take_over(sk_tp_t *t, sk_conn_t *in, sk_peer_t *pp)
{
    sk_conn_t *out = pp->conn;
    /* the lower rank's connection wins, so that two attempts never replace
     * each other; a rank that is leaving takes the peer's link, which it has
     * answered itself, over its own that waits for an answer: the peer may
     * be busy longer than destroy's bound, and reads what came on its link
     * when it comes back */
    int idle = out->state == SC_RETRY || ((in->peer < t->rank || t->leaving) &&
                                          (out->state == SC_CONNECTING || out->state == SC_HELLO_OUT));
    if (!idle) return;
    in->sq_head = out->sq_head;
    in->sq_tail = out->sq_tail;
    out->sq_head = out->sq_tail = NULL;
    conn_retire(t, out);
    pp->conn = in;
}

static void conn_ready(sk_tp_t *t, sk_conn_t *c)
{
    c->state = SC_READY;
    sk_peer_t *pp = &t->peers[c->peer];
    if (!pp->conn) pp->conn = c;
    else if (pp->conn != c && !c->outgoing) conn_take_over(t, c, pp);
    pp->tries = 0;
    pp->refused = 0;
    if (c->sq_head) conn_flush(t, c);
    conn_set_events(t, c);
}

/* Closes an unidentified inbound connection; warn is 0 for a clean close. */
static void conn_drop_stray(sk_tp_t *t, sk_conn_t *c, const char *why, int warn)
{
    if (warn && oobx__ratelimit_ok(&t->stray_rl)) OOBX_WARN(t->log, "socket %s: dropped %s: %s", t->name, c->name, why);
    else OOBX_DEBUG(t->log, "socket %s: dropped %s: %s", t->name, c->name, why);
    t->npending--;
    conn_retire(t, c);
}

enum { HELLO_PARTIAL, HELLO_DONE, HELLO_CLOSED, HELLO_BROKEN };

/* Reads what there is of the other side's want-byte handshake message into c->hello. */
static int conn_hello_read(sk_conn_t *c, size_t want)
{
    ssize_t n = recv(c->fd, c->hello + c->hello_n, want - c->hello_n, MSG_DONTWAIT);
    if (n == 0) return HELLO_CLOSED;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? HELLO_PARTIAL : HELLO_BROKEN;
    c->hello_n += (size_t)n;
    return c->hello_n == want ? HELLO_DONE : HELLO_PARTIAL;
}

/* Inbound: read the connector's hello and proof, check them, answer with ours. */
static void conn_hello_in(sk_tp_t *t, sk_conn_t *c)
{
    int got = conn_hello_read(c, SK_HELLO_IN_BYTES);
    if (got == HELLO_PARTIAL) return;
    if (got != HELLO_DONE) {
        /* a clean close before any byte is a peer that gave up a duplicate connection, or a port probe */
        conn_drop_stray(t, c, c->hello_n ? "closed in the middle of its hello" : "closed without a hello",
                        c->hello_n != 0 || got != HELLO_CLOSED);
        return;
    }
    oobx_hello_t h;
    char why[200];
    int rc = oobx__hello_decode(c->hello, OOBX_HELLO_BYTES, &h, why, sizeof(why));
    if (rc == 0 && h.type != OOBX_HELLO_PEER) {
        rc = OOBX_ERR_PROTOCOL;
        snprintf(why, sizeof(why), "connection type %u is not a peer connection", h.type);
    }
    if (rc == 0 && h.comm_magic != t->magic) {
        rc = OOBX_ERR_MISMATCH;
        snprintf(why, sizeof(why), "claims rank %d of another job", h.rank);
    }
    if (rc == 0) {
        memcpy(c->auth.hello, c->hello, OOBX_HELLO_BYTES);
        memcpy(c->auth.nonce_c, c->hello + OOBX_HELLO_BYTES, OOBX_NONCE_BYTES);
        if (!oobx__auth_check(t->secret, 'C', &c->auth, c->hello + OOBX_HELLO_BYTES + OOBX_NONCE_BYTES)) {
            rc = OOBX_ERR_MISMATCH;
            snprintf(why, sizeof(why), "claims rank %d but does not prove this job's secret", h.rank);
        }
    }
    if (rc == 0 && (h.nranks != t->nranks || h.rank >= t->nranks || h.rank == t->rank)) {
        rc = OOBX_ERR_MISMATCH;
        snprintf(why, sizeof(why), "says rank %d of %d; this communicator has %d ranks", h.rank, h.nranks, t->nranks);
    }
    if (rc != 0) {
        conn_drop_stray(t, c, why, 1);
        return;
    }
    uint64_t count = oobx__auth_count(&c->auth);
    if (count <= t->peers[h.rank].last_count) {
        /* a proof seen before: a replay, or (in a clean run, rarely) a
         * connection the rank gave up and replaced, read after its successor */
        snprintf(why, sizeof(why), "a proof of rank %d used before (count %llu, last taken %llu)", h.rank,
                 (unsigned long long)count, (unsigned long long)t->peers[h.rank].last_count);
        conn_drop_stray(t, c, why, 0);
        return;
    }
    t->peers[h.rank].last_count = count;
    c->peer = h.rank;
    t->npending--;
    unsigned char ack[SK_HELLO_ACK_BYTES];
    hello_make(t, OOBX_HELLO_PEER_ACK, ack);
    oobx__auth_mac(t->secret, 'A', &c->auth, ack + OOBX_HELLO_BYTES);
    /* 64 bytes into an empty socket buffer: done in one call in practice */
    ssize_t w = send(c->fd, ack, sizeof(ack), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w != (ssize_t)sizeof(ack)) {
        char what[300];
        snprintf(what, sizeof(what), "answering the hello of rank %d (%s) failed", c->peer, c->name);
        conn_fail(t, c, OOBX_ERR_REMOTE, what);
        return;
    }
    OOBX_TRACE(t->log, "socket: rank %d connected from %s", c->peer, c->name);
    conn_ready(t, c);
}

/* Outbound: finish connect, send our hello, read the answer. */
static void conn_hello_out(sk_tp_t *t, sk_conn_t *c, uint32_t ev)
{
    if (c->state == SC_CONNECTING) {
        if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
        int err = oobx__sock_connect_result(c->fd);
        if (err) {
            conn_retry_or_fail(t, c, err);
            return;
        }
        unsigned char out[SK_HELLO_IN_BYTES];
        hello_make(t, OOBX_HELLO_PEER, out);
        memcpy(c->auth.nonce_a, t->peers[c->peer].inst, OOBX_NONCE_BYTES);
        oobx__auth_prove_counted(t->secret, &c->auth, out, ++t->count, out + OOBX_HELLO_BYTES);
        /* 80 bytes into a fresh connection's empty buffer */
        ssize_t w = send(c->fd, out, sizeof(out), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w != (ssize_t)sizeof(out)) {
            conn_retry_or_fail(t, c, w < 0 ? errno : EAGAIN);
            return;
        }
        c->state = SC_HELLO_OUT;
        c->hello_n = 0;
        conn_set_events(t, c);
        return;
    }
    int got = conn_hello_read(c, SK_HELLO_ACK_BYTES);
    if (got == HELLO_PARTIAL) return;
    if (got != HELLO_DONE) {
        /* refused by the other side: wrong job behind that port, or it is going away */
        char who[160], what[400];
        peer_describe(t, c->peer, who, sizeof(who));
        snprintf(what, sizeof(what), "%s closed the connection during the hello: it is not this communicator's rank %d (another job on that port?) or it exited",
                 who, c->peer);
        /* a call that needs this peer reports it (the text goes with the
         * failure); a rank that finished and left is no error of a clean run */
        OOBX_DEBUG(t->log, "%s", what);
        conn_fail(t, c, OOBX_ERR_REMOTE, what);
        return;
    }
    oobx_hello_t h;
    char why[200];
    int rc = oobx__hello_decode(c->hello, OOBX_HELLO_BYTES, &h, why, sizeof(why));
    if (rc == 0 && (h.type != OOBX_HELLO_PEER_ACK || h.comm_magic != t->magic || h.rank != c->peer)) {
        rc = OOBX_ERR_MISMATCH;
        snprintf(why, sizeof(why), "answered as rank %d of %s", h.rank,
                 h.comm_magic != t->magic ? "another job" : "this job");
    }
    if (rc == 0 && !oobx__auth_check(t->secret, 'A', &c->auth, c->hello + OOBX_HELLO_BYTES)) {
        rc = OOBX_ERR_MISMATCH;
        snprintf(why, sizeof(why), "its answer does not prove this job's secret (a process that took rank %d's address?)",
                 c->peer);
    }
    if (rc != 0) {
        char who[160], what[400];
        peer_describe(t, c->peer, who, sizeof(who));
        snprintf(what, sizeof(what), "%s is not the expected peer: %s", who, why);
        oobx__fail(t->log, OOBX_ERR_MISMATCH, "%s", what);
        conn_fail(t, c, OOBX_ERR_MISMATCH, what);
        return;
    }
    conn_ready(t, c);
}

static void accept_all(sk_tp_t *t)
{
    for (;;) {
        oobx_sockaddr_t a;
        socklen_t sl = sizeof(a);
        int fd = accept4(t->listen_fd, &a.sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if ((errno == EMFILE || errno == ENFILE) && oobx__ratelimit_ok(&t->stray_rl))
                OOBX_WARN(t->log, "socket %s: out of file descriptors; raise ulimit -n", t->name);
            return;
        }
        if (t->npending >= SK_MAX_PENDING) {
            /* a flood of silent clients: make room by dropping the oldest */
            sk_conn_t *oldest = NULL;
            for (sk_conn_t *c = t->conns; c; c = c->next_all)
                if (c->state == SC_HELLO_IN && c->peer < 0) oldest = c;
            if (oldest) conn_drop_stray(t, oldest, "too many connections without a hello", 1);
        }
        oobx__sock_set_nodelay(fd);
        sk_conn_t *c = conn_new(t, fd, 0, -1);
        if (!c) {
            close(fd);
            continue;
        }
        oobx__sock_addr_format(&a, c->name, sizeof(c->name));
        c->deadline = oobx__now_ns() + (uint64_t)t->hello_ms * 1000000ull;
        t->npending++;
        memcpy(c->auth.nonce_a, t->inst, OOBX_NONCE_BYTES);
        /* a connector sends its hello as its connect completes: it is often
         * here already, and read now saves a trip through epoll */
        conn_hello_in(t, c);
    }
}

/* ---- ops ---------------------------------------------------------------------- */

static void handle_events(sk_tp_t *t, struct epoll_event *evs, int n)
{
    for (int i = 0; i < n; i++) {
        if (evs[i].data.ptr == NULL) {
            accept_all(t);
            continue;
        }
        if (evs[i].data.ptr == t) {
            uint64_t v;
            ssize_t r = read(t->wake_fd, &v, sizeof(v));
            (void)r;
            continue;
        }
        /* connections are freed only by the sweep at the end of progress(),
         * so every pointer of this batch is live */
        sk_conn_t *c = evs[i].data.ptr;
        uint32_t ev = evs[i].events;
        switch (c->state) {
        case SC_HELLO_IN: conn_hello_in(t, c); break;
        case SC_CONNECTING:
        case SC_HELLO_OUT: conn_hello_out(t, c, ev); break;
        case SC_READY:
            if (ev & EPOLLOUT) conn_flush(t, c);
            if (c->state == SC_READY && (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))) {
                conn_read(t, c);
                if (t->hot != c && t->parked) conn_unpark(t); /* only the hot one is read without epoll */
                t->hot_streak = t->hot == c ? t->hot_streak + (t->hot_streak < 2) : 1;
                t->hot = c;
            }
            break;
        default: break;
        }
    }
}

/* The wake fd is in the epoll set: one epoll_wait covers fds. */
static int sk_sleep(oobx_tp_t *tpp, struct pollfd *fds, int nfds, int timeout_ms)
{
    (void)fds;
    (void)nfds;
    sk_tp_t *t = tp_of(tpp);
    int n = epoll_wait(t->epfd, t->slept, 64, timeout_ms);
    t->nslept = n > 0 ? n : 0;
    return 0;
}

static int sk_progress(oobx_tp_t *tpp)
{
    sk_tp_t *t = tp_of(tpp);
    t->passes++;
    if (t->nslept > 0) {
        /* what sleep() found; anything else ready shows up at the next call */
        int n = t->nslept;
        t->nslept = 0;
        handle_events(t, t->slept, n);
        t->woke = 1;
    } else if (!t->woke && t->hot && t->hot_streak >= 2 && t->hot->state == SC_READY && (++t->hot_turn & 3)) {
        /* three polling passes of four read the connection that last brought
         * data, and nothing else: one system call a pass, as in a raw
         * polling loop. Epoll's turn comes at the fourth; what it would have
         * found stays in its ready list until then. */
        conn_park(t, t->hot);
        conn_read(t, t->hot);
    } else {
        struct epoll_event evs[64];
        t->woke = 0;
        for (;;) {
            int n = epoll_wait(t->epfd, evs, 64, 0);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            handle_events(t, evs, n);
            if (n < 64) break;
        }
    }
    if (!t->retry_pending && t->npending == 0 && t->nstray_dead == 0) return 0; /* no clock read a pass */
    uint64_t now = oobx__now_ns();
    if (t->retry_pending) {
        t->retry_pending = 0;
        for (int r = 0; r < t->nranks; r++) {
            sk_peer_t *pp = &t->peers[r];
            if (!pp->conn || pp->conn->state != SC_RETRY) continue;
            if (now >= pp->retry_at) {
                int rc = peer_connect(t, r);
                if (rc != 0) conn_fail(t, pp->conn, rc, oobx_last_error());
            } else {
                t->retry_pending = 1;
            }
        }
    }
    if (t->npending > 0) {
        for (sk_conn_t *c = t->conns, *nx; c; c = nx) {
            nx = c->next_all;
            if (c->state == SC_HELLO_IN && c->peer < 0 && now >= c->deadline)
                conn_drop_stray(t, c, "no hello in time", 1);
        }
    }
    if (t->nstray_dead > 0) {
        for (sk_conn_t *c = t->conns, *nx; c; c = nx) {
            nx = c->next_all;
            if (c->state == SC_DEAD && c->peer < 0) conn_free(t, c);
        }
        t->nstray_dead = 0;
    }
    return 0;
}

static int sk_wait_prepare(oobx_tp_t *tpp, struct pollfd *fds, int max, int *nfds, int *timeout_ms)
{
    sk_tp_t *t = tp_of(tpp);
    /* a sleep follows: every connection in the epoll set */
    conn_unpark(t);
    t->passes = 0;
    if (max < 1) return 1;
    fds[0].fd = t->epfd;
    fds[0].events = POLLIN;
    *nfds = 1;
    uint64_t wake = UINT64_MAX;
    if (t->retry_pending)
        for (int r = 0; r < t->nranks; r++)
            if (t->peers[r].conn && t->peers[r].conn->state == SC_RETRY && t->peers[r].retry_at < wake)
                wake = t->peers[r].retry_at;
    if (t->npending > 0)
        for (sk_conn_t *c = t->conns; c; c = c->next_all)
            if (c->state == SC_HELLO_IN && c->peer < 0 && c->deadline < wake) wake = c->deadline;
    if (wake != UINT64_MAX) {
        int ms = oobx__ms_left(wake, -1);
        if (ms < 1) ms = 1;
        if (*timeout_ms < 0 || ms < *timeout_ms) *timeout_ms = ms;
    }
    return 0;
}

static void addr_encode(const oobx_sockaddr_t *a, const unsigned char inst[OOBX_NONCE_BYTES],
                        unsigned char out[SK_ADDR_BYTES])
{
    memset(out, 0, SK_ADDR_BYTES);
    memcpy(out + SK_SOCKADDR_BYTES, inst, OOBX_NONCE_BYTES);
    oobx__put_u16(out, (uint16_t)a->sa.sa_family);
    oobx__put_u16(out + 2, (uint16_t)oobx__sock_addr_port(a));
    if (a->sa.sa_family == AF_INET6) {
        memcpy(out + 4, &a->sin6.sin6_addr, 16);
        oobx__put_u32(out + 20, a->sin6.sin6_scope_id);
    } else {
        memcpy(out + 4, &a->sin.sin_addr, 4);
    }
}

static int addr_decode(const void *blob, size_t len, oobx_sockaddr_t *a, unsigned char inst[OOBX_NONCE_BYTES])
{
    const unsigned char *p = blob;
    if (len != SK_ADDR_BYTES && len != SK_ADDR_CMA_BYTES) return -1;
    memset(a, 0, sizeof(*a));
    int fam = oobx__get_u16(p);
    int port = oobx__get_u16(p + 2);
    if (port == 0) return -1;
    if (fam == AF_INET) {
        a->sin.sin_family = AF_INET;
        memcpy(&a->sin.sin_addr, p + 4, 4);
    } else if (fam == AF_INET6) {
        a->sin6.sin6_family = AF_INET6;
        memcpy(&a->sin6.sin6_addr, p + 4, 16);
        a->sin6.sin6_scope_id = oobx__get_u32(p + 20);
    } else {
        return -1;
    }
    oobx__sock_addr_set_port(a, port);
    memcpy(inst, p + SK_SOCKADDR_BYTES, OOBX_NONCE_BYTES);
    return 0;
}

static int sk_address(oobx_tp_t *tpp, void *blob, size_t *len)
{
    sk_tp_t *t = tp_of(tpp);
    if (*len < SK_ADDR_CMA_BYTES) return OOBX_ERR_INVALID;
    addr_encode(&t->addr, t->inst, blob);
    oobx__cma_encode(&t->cma, (unsigned char *)blob + SK_ADDR_BYTES);
    *len = SK_ADDR_CMA_BYTES;
    return 0;
}

static int sk_set_peer(oobx_tp_t *tpp, int peer, const void *blob, size_t len)
{
    sk_tp_t *t = tp_of(tpp);
    if (peer < 0 || peer >= t->nranks) return OOBX_ERR_INVALID;
    if (addr_decode(blob, len, &t->peers[peer].addr, t->peers[peer].inst) != 0)
        return oobx__fail(t->log, OOBX_ERR_PROTOCOL, "socket: the address of rank %d (%zu bytes) does not parse", peer,
                         len);
    t->peers[peer].have_addr = 1;
    if (len == SK_ADDR_CMA_BYTES) oobx__cma_decode(&t->cma, (const unsigned char *)blob + SK_ADDR_BYTES, &t->peers[peer].cma);
    else t->peers[peer].cma.state = OOBX_CMA_NO;
    t->peers[peer].cma_set = 1;
    return 0;
}

static int sk_ring(oobx_tp_t *tpp, int prev, int next)
{
    sk_tp_t *t = tp_of(tpp);
    (void)prev;
    if (next < 0 || next == t->rank || t->peers[next].conn) return 0;
    if (t->nranks == 2 && t->rank == 1) {
        /* rank 0 connects to us as its successor: wait a moment for that
         * connection instead of opening a second one */
        int rc = peer_connect_later(t, next, 1000);
        return rc;
    }
    /* connect the successor now, so that a dead or unreachable one shows up during init */
    return peer_connect(t, next);
}

static void sk_peer_name(oobx_tp_t *tpp, int peer, char *buf, size_t len)
{
    peer_describe(tp_of(tpp), peer, buf, len);
}

/* A send still queued on a link that is up or coming up: the goodbye, most
 * often, which the peer must read before this link's end (ep.c, BYE). */
static int conn_holds_sends(const sk_conn_t *c)
{
    return c->sq_head && (c->state == SC_READY || c->state == SC_CONNECTING || c->state == SC_HELLO_OUT);
}

static void sk_destroy(oobx_tp_t *tpp)
{
    sk_tp_t *t = tp_of(tpp);
    if (!t) return;
    t->leaving = 1;
    /* the core hears nothing more: what still comes in is taken and dropped */
    t->p.sink = oobx__tp_sink_drop();
    /* Give queued sends a short chance to leave, with every event taken as in
     * progress(): a link that never carried a call may still wait for its
     * hello's answer (a rank that spent the job in shared memory), or the
     * goodbye may have opened one to a peer whose own link to this rank sits
     * unaccepted in the listener; that peer has the link up on its side and
     * reads its end as this rank's death unless the goodbye comes first. */
    uint64_t until = oobx__now_ns() + 200000000ull;
    conn_unpark(t);
    for (;;) {
        int queued = 0;
        for (sk_conn_t *c = t->conns; c && !queued; c = c->next_all) queued = conn_holds_sends(c);
        uint64_t now = oobx__now_ns();
        if (!queued || now >= until) break;
        int ms = (int)((until - now) / 1000000ull);
        struct epoll_event evs[64];
        int n = epoll_wait(t->epfd, evs, 64, ms < 10 ? ms : 10);
        /* a link up with sends it can write reports EPOLLOUT (conn_set_events): flushed there */
        if (n > 0) handle_events(t, evs, n);
    }
    while (t->conns) {
        sk_conn_t *c = t->conns;
        if (c->fd >= 0) shutdown(c->fd, SHUT_WR);
        conn_free(t, c);
    }
    if (t->listen_fd >= 0) close(t->listen_fd);
    if (t->epfd >= 0) close(t->epfd);
    free(t->peers);
    free(t);
}

static int pick_listen_addr(const oobx_tp_params_t *p, oobx_sockaddr_t *out, char *why, size_t whylen)
{
    const oobx_settings_t *s = p->settings;
    topo_request_t req = {
        .ifname_spec = s->socket_ifname,
        .family = s->socket_family,
        .allow_linklocal = s->socket_linklocal,
        .match = p->root_hint,
        .matchlen = p->root_hint_len,
        .pci_target = s->topo_pci[0] ? s->topo_pci : NULL,
        .module_dir = s->module_dir,
    };
    topo_if_t ifc;
    int rc = oobx__topo_pick_if(&req, &ifc, why, whylen);
    if (rc != 0) return rc;
    memset(out, 0, sizeof(*out));
    memcpy(out, &ifc.addr, ifc.addrlen);
    oobx__sock_addr_set_port(out, 0);
    OOBX_INFO(p->log, "socket: using %s", why);
    return 0;
}

static int sk_create(const oobx_tp_params_t *p, oobx_tp_t **out)
{
    sk_tp_t *t = calloc(1, sizeof(*t));
    if (!t) return OOBX_ERR_NOMEM;
    t->base.ops = &oobx__socket_ops;
    t->p = *p;
    t->log = p->log;
    t->rank = p->rank;
    t->nranks = p->nranks;
    t->magic = p->magic;
    if (p->secret) memcpy(t->secret, p->secret, OOBX_SECRET_BYTES);
    oobx__auth_random(t->inst, sizeof(t->inst));
    t->timeout_ms = p->settings->timeout_ms;
    /* a connector of an oversubscribed host may be slow to say hello: the
     * timeout, when longer (a flood makes room by the cap, in accept_all) */
    t->hello_ms = t->timeout_ms < 0 ? SK_HELLO_UNBOUNDED_MS : OOBX_MAX(t->timeout_ms, SK_HELLO_MS);
    t->cma_min = p->settings->cma_min;
    oobx__cma_self_init(&t->cma, t->cma_min > 0);
    t->listen_fd = -1;
    t->rng = oobx__random64();
    t->peers = calloc((size_t)p->nranks, sizeof(*t->peers));
    t->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!t->peers || t->epfd < 0) {
        int rc = t->epfd < 0 ? oobx__fail(p->log, OOBX_ERR_SYSTEM, "socket: epoll_create1: %s", strerror(errno))
                             : OOBX_ERR_NOMEM;
        sk_destroy(&t->base);
        return rc;
    }
    oobx__sock_raise_nofile();
    char why[512];
    int rc = pick_listen_addr(p, &t->addr, why, sizeof(why));
    if (rc == 0) rc = oobx__sock_listen(&t->addr, 4096, &t->listen_fd, why, sizeof(why));
    if (rc != 0) {
        rc = oobx__fail(p->log, rc, "socket: rank %d cannot listen: %s", p->rank, why);
        sk_destroy(&t->base);
        return rc;
    }
    oobx__sock_addr_format(&t->addr, t->name, sizeof(t->name));
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->listen_fd, &e);
    t->wake_fd = p->wake_fd;
    if (t->wake_fd >= 0) {
        struct epoll_event w = {.events = EPOLLIN, .data.ptr = t};
        epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->wake_fd, &w);
    }
    *out = &t->base;
    return 0;
}

/* The socket settings are the core's (the root rendezvous uses them too). */
static const oobx_setting_desc_t sk_settings[] = {{NULL, NULL, NULL, 0, 0, 0, 0, 0}};

const oobx_tp_ops_t oobx__socket_ops = {
    .version = OOBX_TP_VERSION,
    .name = "socket",
    .settings = sk_settings,
    .create = sk_create,
    .address = sk_address,
    .set_peer = sk_set_peer,
    .ring = sk_ring,
    .send = sk_send,
    .release = sk_release,
    .progress = sk_progress,
    .wait_prepare = sk_wait_prepare,
    .sleep = sk_sleep,
    .describe = oobx_tp_describe_none,
    .peer_name = sk_peer_name,
    .destroy = sk_destroy,
};
