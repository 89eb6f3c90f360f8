/* Communicators: init (root rendezvous, ring, address allgather), the
 * collective calls, split, abort and destroy. p2p calls are in p2p.c. */
#include <errno.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "coll.h"
#include "comm.h"
#include "node.h"
#include "root.h"
#include "tp_module.h"
#include "tp_table.h"
#include "topo.h"
#include "util.h"
#include "wire.h"

/* ---- helpers ---- */

/* The host's ranks may wait in shared memory, where no notice reaches them
 * (a leader waiting for its members to join an allgather): a rank that knows
 * of the communicator's failure writes it into the host's segment, so that
 * they fail with its text instead of taking a member's exit for a death. */
static void node_tell_failure(struct oobx_comm *c)
{
    const char *f = c->node.seg ? oobx__ep_view_failure(&c->v) : NULL;
    if (f) oobx__node_ag_done(c->node.seg, 0, oobx__ep_view_status(&c->v), f);
}

void oobx__comm_flush_notices(struct oobx_comm *c)
{
    if (!c->v.ep) return;
    pthread_mutex_lock(&c->v.ep->lock);
    if (c->v.ep->nnotice_out) {
        int ms = c->settings.timeout_ms < 0 ? OOBX_NOTICE_FLUSH_MS
                                            : OOBX_MIN(OOBX_NOTICE_FLUSH_MS, c->settings.timeout_ms / 10);
        char err[1024]; /* the call's error, which the transport's progress must not replace */
        snprintf(err, sizeof(err), "%s", oobx_last_error());
        oobx__ep_flush_notices(c->v.ep, ms);
        oobx__set_last_error("%s", err);
    }
    pthread_mutex_unlock(&c->v.ep->lock);
}

/* A link that failed because the communicator did: the first failure's code, else status. */
static int view_status_or(struct oobx_comm *c, int status)
{
    int st = oobx__ep_view_status(&c->v);
    return st ? st : status;
}

int oobx__comm_check(struct oobx_comm *c, const char *fn)
{
    if (!c) return oobx__fail(NULL, OOBX_ERR_INVALID, "%s: communicator is NULL", fn);
    if (atomic_load(&c->aborted))
        return oobx__fail(&c->log, OOBX_ERR_ABORTED, "%s: rank %d: the communicator was aborted", fn, c->v.rank);
    if (c->v.user_abort && *c->v.user_abort)
        return oobx__fail(&c->log, OOBX_ERR_ABORTED, "%s: rank %d: the abort flag is set", fn, c->v.rank);
    const char *f = c->v.ep ? oobx__ep_view_failure(&c->v) : NULL;
    if (f) {
        node_tell_failure(c);
        oobx__comm_flush_notices(c);
        return oobx__fail(&c->log, oobx__ep_view_status(&c->v), "%s: rank %d: %s", fn, c->v.rank, f);
    }
    return 0;
}

static struct oobx_comm *comm_alloc(const oobx_settings_t *s)
{
    struct oobx_comm *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->settings = *s;
    atomic_init(&c->aborted, 0);
    c->v.log = &c->log;
    c->v.settings = &c->settings;
    c->v.aborted = &c->aborted;
    return c;
}

/* The host's segment is the endpoint's (its addresses) and may outlive this
 * communicator, whose cancel it must forget first. */
static void comm_release_ep(struct oobx_comm *c)
{
    if (c->node.seg) oobx__node_set_cancel(c->node.seg, NULL);
    c->node.seg = NULL;
    oobx__ep_release(c->v.ep);
}

static void comm_free(struct oobx_comm *c)
{
    if (!c) return;
    free(c->tables);
    free(c->node.members);
    free(c->node.leaders);
    free(c->ep_rank);
    free(c->gseq);
    oobx__log_close(&c->log);
    free(c);
}

/* ---- transports ---- */

static int auto_cmp(const void *a, const void *b)
{
    const oobx__tp_entry_t *x = *(const oobx__tp_entry_t *const *)a, *y = *(const oobx__tp_entry_t *const *)b;
    return x->auto_order - y->auto_order;
}

/* The transport the settings ask for, or under auto the first of the table's
 * auto order that loads and creates an instance (the others said at info
 * level). A transport asked for by name that cannot run is an error. */
static int transport_open(struct oobx_comm *c, oobx_tp_params_t *p, const char **chosen)
{
    const char *want = c->settings.transport;
    char why[768];
    int ntab;
    const oobx__tp_entry_t *tab = oobx__tp_table(&ntab);
    const oobx__tp_entry_t *order[8];
    int n = 0;
    char note[440] = " (OOBX_TRANSPORT=auto)";
    if (!strcmp(want, "auto")) {
        for (int i = 0; i < ntab && n < (int)OOBX_ARRAY_SIZE(order); i++)
            if (tab[i].auto_order > 0) order[n++] = &tab[i];
        qsort(order, (size_t)n, sizeof(order[0]), auto_cmp);
        char rule[400];
        if (oobx__tp_auto_socket_rule(c->v.nranks, c->settings.local_size, c->settings.rdma_sysfs, rule,
                                      sizeof(rule))) {
            /* the socket first, the others after it in their order */
            for (int i = 0; i < n; i++)
                if (order[i]->builtin) {
                    const oobx__tp_entry_t *s = order[i];
                    memmove(order + 1, order, (size_t)i * sizeof(order[0]));
                    order[0] = s;
                    break;
                }
            snprintf(note, sizeof(note), " (OOBX_TRANSPORT=auto: %s)", rule);
        }
    } else {
        order[n] = oobx__tp_find(want);
        if (!order[n]) return oobx__fail(&c->log, OOBX_ERR_INVALID, "rank %d: no transport named \"%s\"", c->v.rank, want);
        n++;
    }
    if (n > 1) snprintf(c->auto_note, sizeof(c->auto_note), "%s", note);
    int rc = OOBX_ERR_UNAVAILABLE;
    for (int i = 0; i < n; i++) {
        const oobx_tp_ops_t *ops;
        rc = oobx__tp_lookup(order[i]->name, &c->settings, &ops, why, sizeof(why));
        if (rc == 0) {
            rc = ops->create(p, &c->v.ep->tp);
            if (rc != 0) snprintf(why, sizeof(why), "%s", oobx_last_error());
            else c->v.ep->ops = ops;
        }
        if (rc == 0) {
            *chosen = ops->name;
            OOBX_INFO(&c->log, "transport %s%s", ops->name, n > 1 ? note : "");
            return 0;
        }
        if (n > 1 && i + 1 < n) {
            OOBX_INFO(&c->log, "transport %s not used: %s; trying %s", order[i]->name, why, order[i + 1]->name);
            continue;
        }
        return oobx__fail(&c->log, rc, "rank %d: transport %s cannot run: %s", c->v.rank, order[i]->name, why);
    }
    return rc;
}

/* ---- init ---- */

static coll_group_t whole(struct oobx_comm *c)
{
    coll_group_t g = {.n = c->v.nranks, .me = c->v.rank, .members = NULL, .gid = 0, .seq = c->coll_seq++,
                      .direct_skip = c->direct_skip};
    return g;
}


/* The core's part of a rank's card, before the transport address:
 * u16 magic, u16 CPUs online, u16 the launcher's local rank + 1 and u16 its
 * local size (0 each when unknown, or when OOBX_HOST_ID names the host: an
 * explicit host id wins), u64 host hash. */
#define CARD_HDR 16
#define CARD_MAGIC 0x4f43u

/* The host id: OOBX_HOST_ID when set, else the host name. */
static uint64_t host_id(const oobx_settings_t *s)
{
    char host[256] = "";
    if (s->host_id[0]) snprintf(host, sizeof(host), "id:%s", s->host_id);
    else gethostname(host, sizeof(host) - 1);
    return oobx__hash64(host, strlen(host), 0x686f7374ull);
}

static void card_header(char *out, const oobx_settings_t *s, int ncpu)
{
    unsigned char *p = (unsigned char *)out;
    int launcher = !s->host_id[0] && s->local_size > 0 && s->local_size <= 0xffff && s->local_rank >= 0;
    oobx__put_u16(p, CARD_MAGIC);
    oobx__put_u16(p + 2, (uint16_t)ncpu);
    oobx__put_u16(p + 4, launcher ? (uint16_t)(s->local_rank + 1) : 0);
    oobx__put_u16(p + 6, launcher ? (uint16_t)s->local_size : 0);
    oobx__put_u64(p + 8, host_id(s));
}

typedef struct host_cpus {
    uint64_t host;
    int ncpu;
} host_cpus_t;

static int host_cmp(const void *a, const void *b)
{
    uint64_t x = ((const host_cpus_t *)a)->host, y = ((const host_cpus_t *)b)->host;
    return x < y ? -1 : x > y;
}

/* From the card headers of n ranks (cap bytes apart), sorted once: the number
 * of distinct hosts, and in *over 1 when some host holds more ranks than the
 * fewest CPUs its cards report (every rank sees the same cards, so all agree).
 * *mine_over: the same of host mine alone (may be NULL). 0 hosts when out of
 * memory (and *over 0). */
static int cards_hosts(const unsigned char *items, size_t cap, int n, int *over, uint64_t mine, int *mine_over)
{
    *over = 0;
    if (mine_over) *mine_over = 0;
    host_cpus_t *h = malloc((size_t)n * sizeof(*h));
    if (!h) return 0;
    for (int r = 0; r < n; r++) {
        h[r].host = oobx__get_u64(items + (size_t)r * cap + 8);
        h[r].ncpu = oobx__get_u16(items + (size_t)r * cap + 2);
    }
    qsort(h, (size_t)n, sizeof(*h), host_cmp);
    int hosts = 0;
    for (int i = 0; i < n;) {
        int j = i, ncpu = h[i].ncpu;
        for (; j < n && h[j].host == h[i].host; j++)
            if (h[j].ncpu < ncpu) ncpu = h[j].ncpu;
        if (j - i > ncpu) *over = 1;
        if (j - i > ncpu && mine_over && h[i].host == mine) *mine_over = 1;
        hosts++;
        i = j;
    }
    free(h);
    return hosts;
}

/* Checks the table of every rank's card (rank r's at card(r)): each is
 * well formed; *hosts: how many hosts they name, *over: some host is
 * oversubscribed, *host_over (may be NULL): this rank's host is. With record, every peer's address goes to the transport
 * too (the flat path). Called with the endpoint lock held. */
typedef const unsigned char *(*card_fn)(void *arg, int r, size_t *len);

static int check_cards(struct oobx_comm *c, card_fn card, void *arg, int record, int *hosts, int *over,
                       int *host_over)
{
    int rank = c->v.rank, nranks = c->v.nranks, rc = 0;
    unsigned char *heads = malloc((size_t)nranks * CARD_HDR);
    if (!heads) return oobx__fail(&c->log, OOBX_ERR_NOMEM, "rank %d: out of memory for %d cards", rank, nranks);
    for (int r = 0; rc == 0 && r < nranks; r++) {
        size_t len = 0;
        const unsigned char *k = card(arg, r, &len);
        if (!k || len <= CARD_HDR || oobx__get_u16(k) != CARD_MAGIC) {
            rc = oobx__fail(&c->log, OOBX_ERR_PROTOCOL, "rank %d: the card of rank %d is malformed (%zu bytes)", rank, r,
                            k ? len : 0);
            break;
        }
        memcpy(heads + (size_t)r * CARD_HDR, k, CARD_HDR);
        if (!record || r == rank) continue;
        rc = c->v.ep->ops->set_peer(c->v.ep->tp, r, k + CARD_HDR, len - CARD_HDR);
        if (rc != 0)
            rc = oobx__fail(&c->log, rc, "rank %d: the address of rank %d does not parse (%zu bytes): %s", rank, r,
                            len - CARD_HDR, oobx_last_error());
    }
    if (rc == 0) {
        *hosts = cards_hosts(heads, CARD_HDR, nranks, over, oobx__get_u64(heads + (size_t)rank * CARD_HDR + 8),
                             host_over);
        if (*hosts == 0) rc = oobx__fail(&c->log, OOBX_ERR_NOMEM, "rank %d: out of memory for %d cards", rank, nranks);
    }
    free(heads);
    return rc;
}

/* The oversubscribed flags and the ring links, once the cards are known:
 * over (some host of the job is) chooses the algorithms, the same on every
 * rank; host_over (this rank's host is) whether this rank polls before it
 * sleeps, since polling costs only its own host's CPUs. */
static int cards_taken(struct oobx_comm *c, int over, int host_over, int ring_next_done)
{
    int rank = c->v.rank, nranks = c->v.nranks, rc = 0;
    c->v.ep->oversubscribed = over;
    c->v.ep->spreads = 2;
    oobx__ep_set_spin(c->v.ep, host_over);
    if (over) OOBX_INFO(&c->log, "a host runs more ranks than it has CPUs: small collectives use the tree algorithms");
    int next = (rank + 1) % nranks, prev = (rank - 1 + nranks) % nranks;
    if (nranks > 1) rc = oobx__ep_know(c->v.ep, next);
    if (rc == 0 && nranks > 1) rc = oobx__ep_know(c->v.ep, prev);
    if (rc == 0 && nranks > 1 && !ring_next_done) rc = oobx__ep_ring(c->v.ep, -1, next);
    if (rc == 0 && nranks > 1) rc = oobx__ep_ring(c->v.ep, prev, next);
    return rc;
}

typedef struct strided {
    const unsigned char *items;
    size_t cap;
    const size_t *lens;
} strided_t;

static const unsigned char *strided_card(void *arg, int r, size_t *len)
{
    strided_t *t = arg;
    *len = t->lens[r];
    return t->items + (size_t)r * t->cap;
}

/* The ring predecessor's own card, the first item of the card allgather,
 * goes to the transport as soon as it is in, so that a failure notice can
 * go back along the ring where the transport cannot answer on the link the
 * predecessor opened (UCX, whose endpoints go one way). A card that does
 * not parse here fails init later, in check_cards. */
static int ring_prev(const struct oobx_comm *c)
{
    return (c->v.rank - 1 + c->v.nranks) % c->v.nranks;
}

static void take_prev_card(struct oobx_comm *c, const char *item, size_t len)
{
    int prev = ring_prev(c);
    if (len <= CARD_HDR || oobx__get_u16((const unsigned char *)item) != CARD_MAGIC) return;
    if (c->v.ep->ops->set_peer(c->v.ep->tp, prev, item + CARD_HDR, len - CARD_HDR) == 0) {
        c->v.ep->talked[prev] = 1;
        c->prev_card_taken = 1;
        /* a notice that went out before this address was known: again */
        if (atomic_load(&c->v.ep->fail_rank) >= 0) c->v.ep->fail_spread = 1;
    }
}

static void prev_card_landed(void *arg, int r, const char *item, size_t len)
{
    struct oobx_comm *c = arg;
    if (r == ring_prev(c)) take_prev_card(c, item, len);
}

/* A rank whose ring successor died before the card allgather began gives
 * up, but lingers: when its predecessor's card comes in meanwhile (it sends
 * it first, unexpected here), the notice of the death goes back to it. */
static int prev_card_hook(void *arg)
{
    struct oobx_comm *c = arg;
    size_t len = 0;
    const void *item = oobx__ep_ux_peek(c->v.ep, c->v.ctx, OOBX_MSG_COLL, ring_prev(c), c->prev_card_tag, &len);
    if (!item) return 0;
    c->v.ep->spreads = 1;
    take_prev_card(c, item, len);
    return 1;
}

/* The card allgather failed on a death (this rank's successor's, seen
 * here while setting up its link or sending it this rank's card; or
 * another's, of which a notice came): the job's failure, and the notice
 * goes back to the predecessor, now or, when its card is not in yet,
 * while this rank lingers (oobx__comm_init_common's failure path). Lock
 * held. */
static void init_flat_lost(struct oobx_comm *c, int next)
{
    oobx_ep_t *ep = c->v.ep;
    char what[600];
    snprintf(what, sizeof(what), "%s", oobx_last_error());
    ep->ops->progress(ep->tp); /* the transport's own report of it */
    /* a ring link no call has used fails no communicator by itself (its
     * peer may have finished and left); in init it is the job's */
    if (ep->failed[next]) oobx__ep_peer_lost(ep, next, what);
    if (!c->prev_card_taken && atomic_load(&ep->fail_rank) >= 0) {
        ep->linger_hook = prev_card_hook;
        ep->linger_arg = c;
    }
    oobx__set_last_error("%s", what);
}

/* The root gave up on rank r (it never checked in, or went before its
 * answer: the refusal's origin, docs/protocol.md). Ranks of other blocks, answered by
 * their own roots, may be on their ring already, with this rank as a
 * neighbour: this rank makes that the communicator's failure and lingers
 * (the failure path), so that its ring predecessor, which connects to it
 * and sends its card first, hears the origin instead of only seeing this
 * rank go. */
static void init_flat_unreported(struct oobx_comm *c, int r)
{
    int nranks = c->v.nranks;
    if (r < 0 || r >= nranks || r == c->v.rank || nranks < 3) return;
    char what[600];
    snprintf(what, sizeof(what), "%s", oobx_last_error());
    oobx_ep_t *ep = c->v.ep;
    pthread_mutex_lock(&ep->lock);
    coll_group_t g = whole(c);
    c->prev_card_tag = oobx__coll_ring_allgatherv_tag(&g);
    ep->spreads = 1;
    oobx__ep_peer_lost(ep, r, what);
    if (!c->prev_card_taken && atomic_load(&ep->fail_rank) >= 0) {
        ep->linger_hook = prev_card_hook;
        ep->linger_arg = c;
    }
    pthread_mutex_unlock(&ep->lock);
    oobx__set_last_error("%s", what);
}

/* Every rank reports to its root, learns its ring successor, and every card
 * travels the ring of all ranks (N cards through each rank). */
static int init_flat(struct oobx_comm *c, const root_client_t *rcl_in, const unsigned char *blob, size_t blob_len)
{
    int rank = c->v.rank, nranks = c->v.nranks;
    uint64_t t0 = oobx__now_ns();
    unsigned char next_blob[OOBX_ADDR_MAX];
    size_t next_len = 0;
    double delay = 0;
    root_client_t rcl = *rcl_in;
    int origin = -1;
    rcl.origin = &origin;
    int rc = oobx__root_exchange(&rcl, next_blob, &next_len, &delay);
    if (rc != 0) {
        init_flat_unreported(c, origin);
        return rc;
    }
    uint64_t t_root = oobx__now_ns();
    c->timings.delay = delay;
    c->timings.root = (t_root - t0) / 1e9 - delay;
    int next = (rank + 1) % nranks;
    pthread_mutex_lock(&c->v.ep->lock);
    if (nranks > 1) rc = c->v.ep->ops->set_peer(c->v.ep->tp, next, next_blob, next_len);
    /* the successor's link now, so that a dead or unreachable one shows up during init */
    if (rc == 0 && nranks > 1) rc = oobx__ep_ring(c->v.ep, -1, next);
    /* a death in the card allgather goes round the ring's links to every rank;
     * the predecessor's link counts before its first data comes (it connects
     * to this rank: a notice waits in the transport for that link), so that
     * a rank that gives up here tells its predecessor why before its own
     * exit reads there as its death */
    if (rc == 0) c->v.ep->spreads = 1;
    if (rc == 0 && nranks > 1) c->v.ep->talked[(rank - 1 + nranks) % nranks] = 1;
    uint64_t t_ring = oobx__now_ns();
    c->timings.ring = (t_ring - t_root) / 1e9;
    /* every rank's card (host and CPUs, then the transport address), over the ring */
    const size_t cap = CARD_HDR + OOBX_ADDR_MAX;
    char *items = malloc((size_t)nranks * cap);
    size_t *lens = calloc((size_t)nranks, sizeof(*lens));
    if (rc == 0 && (!items || !lens)) rc = oobx__fail(&c->log, OOBX_ERR_NOMEM, "out of memory for %d addresses", nranks);
    /* its call number also when the link to next failed: the predecessor's
     * card comes under it all the same (init_flat_lost) */
    coll_group_t g = whole(c);
    c->prev_card_tag = oobx__coll_ring_allgatherv_tag(&g);
    if (rc == 0) {
        card_header(items + (size_t)rank * cap, &c->settings, c->ncpu);
        memcpy(items + (size_t)rank * cap + CARD_HDR, blob, blob_len);
        lens[rank] = CARD_HDR + blob_len;
        rc = oobx__coll_ring_allgatherv(&c->v, &g, items, cap, lens, prev_card_landed, c);
    }
    if (rc == OOBX_ERR_REMOTE && nranks > 2) init_flat_lost(c, next);
    strided_t t = {(const unsigned char *)items, cap, lens};
    int hosts = 0, over = 0;
    int host_over = 0;
    if (rc == 0) rc = check_cards(c, strided_card, &t, 1, &hosts, &over, &host_over);
    if (rc == 0) rc = cards_taken(c, over, host_over, 1);
    pthread_mutex_unlock(&c->v.ep->lock);
    free(items);
    free(lens);
    c->timings.allgather = (oobx__now_ns() - t_ring) / 1e9;
    c->timings.hosts = 0; /* counted, but reported for the node-aware path only */
    (void)hosts;
    c->timings.local_ranks = 0;
    return rc;
}

/* ---- the node-aware bootstrap ---- */

static const unsigned char *node_card_of(void *arg, int r, size_t *len)
{
    return oobx__node_card(arg, r, len);
}

/* The endpoint's source of addresses on the node-aware path: the transport
 * part of a card in the host's table (the leader checked every card). */
static const void *node_addr_of(void *arg, int r, size_t *len)
{
    size_t n = 0;
    const unsigned char *k = oobx__node_card(arg, r, &n);
    if (!k || n <= CARD_HDR) return NULL;
    *len = n - CARD_HDR;
    return k + CARD_HDR;
}

static void node_release(void *arg)
{
    oobx__node_leave(arg);
}

static int pair_sent(void *arg)
{
    oobx_sreq_t **s = arg;
    for (int i = 0; s[i]; i++)
        if (!s[i]->tp.done) return 0;
    return 1;
}

/* What a leader ring carries: each leader's block goes half way round in
 * each direction (leader_covers_fwd). */
typedef struct leader_ring {
    int next, prev;        /* leaders */
    uint64_t tag;          /* blocks to the next leader; tag + LEADER_BACK to the previous one */
    unsigned char *own;    /* this host's block (malloc'ed; leader_ring_run frees it) */
    size_t own_len;
    size_t in_cap;         /* room for every other host's blocks (in each direction) */
    const char *what;      /* "cards", "allgather slices": for messages */
    /* checks and stores a block that came from leader `from`; sets its origin leader */
    int (*unpack)(void *arg, const unsigned char *m, size_t len, int from, int *origin);
    int (*complete)(void *arg); /* every other host's block is in */
    /* *ready 1 once the previous leader can be sent to (its card is in);
     * NULL: always. Returns an error code. */
    int (*reach_prev)(void *arg, int *ready);
    void *arg;
    /* init's trade: the tag of the first message a previous leader trading
     * the other way (by doubling) sends, 0 for none; seen in this leader's
     * unexpected queue, it fails the trade naming the setting */
    uint64_t other_tag;
} leader_ring_t;

/* The step field of a leaders' tag: the blocks going backward. */
#define LEADER_BACK (1ull << 36)

/* 1 when the block of leader o reaches leader x going forward (from the
 * previous leader): x lies at most half the ranks after o. The ring is in
 * rank order (roots place leaders so), and no leader knows how many leaders
 * there are, so rank distance stands in for the leaders between: with hosts
 * of one size each block crosses half the leaders each way, and the last
 * block is in after about H/2 hops instead of H - 1. Every other leader gets
 * each block exactly once (forward when this holds, backward otherwise). */
static int leader_covers_fwd(int o, int x, int n)
{
    int d = ((x - o) % n + n) % n;
    return d > 0 && d <= n / 2;
}

/* A leader's request to or from leader peer failed: "rank R, leader of its
 * host's ranks: <fmt...> <peer's name>: <why>". */
static int leader_peer_fail(struct oobx_comm *c, int status, int peer, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int leader_peer_fail(struct oobx_comm *c, int status, int peer, const char *fmt, ...)
{
    char what[200], who[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    oobx__ep_peer_name(&c->v, peer, who, sizeof(who));
    const char *why = oobx__ep_failed_what(c->v.ep, peer);
    /* a leader that no message came from yet is no failure of the
     * communicator for the transport (ep.c: a link no call used); here it
     * is: the caller passes it on (leader_trade) */
    if (status == OOBX_ERR_REMOTE) oobx__ep_view_peer_lost(&c->v, peer, who);
    return oobx__fail(&c->log, view_status_or(c, status), "rank %d, leader of its host's ranks: %s %s: %s%s", c->v.rank,
                      what, who, why ? why : oobx_strerror(status),
                      status == OOBX_ERR_TRUNCATED ? " (more than the job's other hosts can send)" : "");
}

typedef struct ring_run {
    struct oobx_comm *c;
    const leader_ring_t *lr;
    oobx_sreq_t *sreqs;
    oobx_sreq_t **pending; /* NULL-terminated */
    int *sent_to;
    int ns, nsend_max;
    const unsigned char **back; /* blocks for the previous leader, until it can be reached */
    size_t *back_len;
    int nback, back_sent;
} ring_run_t;

static int ring_send(ring_run_t *st, int to, uint64_t tag, const unsigned char *m, size_t len)
{
    if (st->ns >= st->nsend_max)
        return oobx__fail(&st->c->log, OOBX_ERR_INTERNAL, "rank %d: more leader ring sends than blocks", st->c->v.rank);
    int rc = oobx__ep_isend(&st->c->v, to, OOBX_MSG_COLL, tag, m, len, &st->sreqs[st->ns]);
    if (rc == 0) {
        st->sent_to[st->ns] = to;
        st->pending[st->ns] = &st->sreqs[st->ns];
        st->ns++;
    }
    return rc;
}

/* Sends the blocks waiting for the previous leader, once it can be reached. */
static int ring_flush_back(ring_run_t *st)
{
    if (st->back_sent == st->nback) return 0;
    int ready = 1;
    if (st->lr->reach_prev) {
        int rc = st->lr->reach_prev(st->lr->arg, &ready);
        if (rc != 0) return rc;
    }
    for (; ready && st->back_sent < st->nback; st->back_sent++) {
        int rc = ring_send(st, st->lr->prev, st->lr->tag + LEADER_BACK, st->back[st->back_sent], st->back_len[st->back_sent]);
        if (rc != 0) return rc;
    }
    return 0;
}

static int ring_any_in(void *arg)
{
    oobx_rreq_t **r = arg;
    return (r[0] && r[0]->done) || (r[1] && r[1]->done);
}

/* A wait of init's card trade that also watches for the first message of
 * the other way of trading from the previous leader: a job whose ranks
 * disagree on OOBX_NODE_EXCHANGE would otherwise wait out its timeout. */
typedef struct trade_watch {
    struct oobx_comm *c;
    int (*done)(void *arg);
    void *arg;
    int peer;
    uint64_t other_tag; /* 0: none */
    int other;          /* set: that message is in */
} trade_watch_t;

static int trade_watch_done(void *arg)
{
    trade_watch_t *w = arg;
    if (w->done(w->arg)) return 1;
    size_t len = 0;
    if (w->other_tag && oobx__ep_ux_peek(w->c->v.ep, w->c->v.ctx, OOBX_MSG_COLL, w->peer, w->other_tag, &len)) {
        w->other = 1;
        return 1;
    }
    return 0;
}

static int trade_mismatch(struct oobx_comm *c, int prev, const char *theirs, const char *mine)
{
    char who[160];
    oobx__ep_peer_name(&c->v, prev, who, sizeof(who));
    return oobx__fail(&c->log, OOBX_ERR_MISMATCH,
                      "rank %d, leader of its host's ranks: the previous leader, %s, trades init's cards %s, this "
                      "leader %s: set OOBX_NODE_EXCHANGE the same on every rank",
                      c->v.rank, who, theirs, mine);
}

/* A leader's part of the ring among the hosts' leaders, both ways: its
 * host's block to the next leader and to the previous one (as far as
 * leader_covers_fwd says), every block that comes passed on in its
 * direction while it has farther to go, until complete. Endpoint lock held. */
static int leader_ring_run(struct oobx_comm *c, const leader_ring_t *lr)
{
    int rank = c->v.rank, n = c->v.nranks, rc = 0, adopted = 0;
    int nsend_max = n + 2;
    unsigned char *in[2] = {malloc(lr->in_cap), malloc(lr->in_cap)};
    oobx_rreq_t *r = calloc(2, sizeof(*r));
    ring_run_t st = {.c = c, .lr = lr, .nsend_max = nsend_max};
    st.sreqs = calloc((size_t)nsend_max, sizeof(*st.sreqs));
    st.pending = calloc((size_t)nsend_max + 1, sizeof(*st.pending));
    st.sent_to = calloc((size_t)nsend_max, sizeof(*st.sent_to));
    st.back = calloc((size_t)n + 1, sizeof(*st.back));
    st.back_len = calloc((size_t)n + 1, sizeof(*st.back_len));
    if (!in[0] || !in[1] || !r || !st.sreqs || !st.pending || !st.sent_to || !st.back || !st.back_len) {
        free(in[0]), free(in[1]), free(r), free(st.sreqs), free(st.pending), free(st.sent_to), free(st.back),
            free(st.back_len), free(lr->own);
        return oobx__fail(&c->log, OOBX_ERR_NOMEM, "rank %d: out of memory for the leaders' exchange", rank);
    }
    const int from[2] = {lr->prev, lr->next};
    const uint64_t tag[2] = {lr->tag, lr->tag + LEADER_BACK};
    const char *side[2] = {"previous", "next"};
    size_t used[2] = {0, 0};
    oobx_rreq_t *posted[2] = {NULL, NULL};
    uint64_t deadline = oobx__deadline(c->settings.timeout_ms);
    char who[160], who2[160];
    /* a direction brings anything at all when the neighbour's own block
     * comes that way: it is the nearest leader going forward (the previous
     * one) and the farthest going backward (the next one) */
    const int brings[2] = {leader_covers_fwd(lr->prev, rank, n), !leader_covers_fwd(lr->next, rank, n)};
    for (int d = 0; rc == 0 && d < 2; d++) {
        if (!brings[d]) continue;
        rc = oobx__ep_irecv(&c->v, from[d], OOBX_MSG_COLL, tag[d], in[d], lr->in_cap, &r[d]);
        if (rc == 0) posted[d] = &r[d];
    }
    if (rc == 0 && leader_covers_fwd(rank, lr->next, n)) rc = ring_send(&st, lr->next, tag[0], lr->own, lr->own_len);
    if (rc == 0 && !leader_covers_fwd(rank, lr->prev, n)) {
        st.back[st.nback] = lr->own;
        st.back_len[st.nback++] = lr->own_len;
    }
    while (rc == 0 && !lr->complete(lr->arg)) {
        rc = ring_flush_back(&st);
        if (rc != 0) break;
        trade_watch_t w = {c, ring_any_in, posted, lr->prev, lr->other_tag, 0};
        if (!ring_any_in(posted)) rc = oobx__ep_wait(&c->v, trade_watch_done, &w, deadline);
        if (rc == 0 && w.other && !ring_any_in(posted)) {
            rc = trade_mismatch(c, lr->prev, "by doubling (OOBX_NODE_EXCHANGE=bruck)", "by the ring (ring)");
            break;
        }
        if (rc != 0) {
            oobx__ep_peer_name(&c->v, lr->prev, who, sizeof(who));
            oobx__ep_peer_name(&c->v, lr->next, who2, sizeof(who2));
            rc = oobx__ep_wait_error(&c->v, rc, "rank %d, leader of its host's ranks: waiting for the other hosts' %s "
                                                "from the previous leader, %s, and the next leader, %s",
                                     rank, lr->what, who, who2);
            break;
        }
        for (int d = 0; rc == 0 && d < 2; d++) {
            oobx_rreq_t *q = posted[d];
            if (!q || !q->done) continue;
            posted[d] = NULL;
            /* a neighbour that left in order finished this call: it sent
             * what it had for this leader, and the other direction brings
             * the rest (a direction may have nothing more to bring) */
            if (q->status && c->v.ep->departed[oobx__ep_view_rank(&c->v, from[d])]) continue;
            if (q->status) {
                rc = leader_peer_fail(c, q->status, from[d], "the %s leader,", side[d]);
                break;
            }
            int origin = -1;
            const unsigned char *m = in[d] + used[d];
            rc = lr->unpack(lr->arg, m, q->received, from[d], &origin);
            if (rc != 0) break;
            if (origin == rank || (d == 0) != leader_covers_fwd(origin, rank, n)) {
                oobx__ep_peer_name(&c->v, from[d], who, sizeof(who));
                rc = oobx__fail(&c->log, OOBX_ERR_PROTOCOL,
                                "rank %d, leader of its host's ranks: the %s leader, %s, sent the %s of leader %d the "
                                "wrong way round the ring",
                                rank, side[d], who, lr->what, origin);
                break;
            }
            if (d == 0 && origin != lr->next && leader_covers_fwd(origin, lr->next, n))
                rc = ring_send(&st, lr->next, tag[0], m, q->received);
            if (d == 1 && origin != lr->prev && !leader_covers_fwd(origin, lr->prev, n)) {
                st.back[st.nback] = m;
                st.back_len[st.nback++] = q->received;
            }
            used[d] += q->received;
            if (rc == 0 && !lr->complete(lr->arg)) {
                rc = oobx__ep_irecv(&c->v, from[d], OOBX_MSG_COLL, tag[d], in[d] + used[d], lr->in_cap - used[d], &r[d]);
                if (rc == 0) posted[d] = &r[d];
            }
        }
        if (rc == 0 && !posted[0] && !posted[1] && !lr->complete(lr->arg)) {
            oobx__ep_peer_name(&c->v, lr->prev, who, sizeof(who));
            oobx__ep_peer_name(&c->v, lr->next, who2, sizeof(who2));
            rc = oobx__fail(&c->log, OOBX_ERR_REMOTE,
                            "rank %d, leader of its host's ranks: the previous leader, %s, and the next leader, %s, left "
                            "before every host's %s came",
                            rank, who, who2, lr->what);
        }
    }
    if (rc == 0) rc = ring_flush_back(&st);
    if (rc == 0 && st.back_sent < st.nback)
        rc = oobx__fail(&c->log, OOBX_ERR_INTERNAL, "rank %d: the previous leader's card never came", rank);
    for (int d = 0; d < 2; d++)
        if (posted[d] && !posted[d]->done && oobx__ep_cancel_recv(&c->v, OOBX_MSG_COLL, tag[d], posted[d])) adopted = 1;
    if (rc == 0 && !pair_sent(st.pending)) {
        rc = oobx__ep_wait(&c->v, pair_sent, st.pending, deadline);
        if (rc != 0) {
            oobx__ep_peer_name(&c->v, lr->next, who, sizeof(who));
            oobx__ep_peer_name(&c->v, lr->prev, who2, sizeof(who2));
            rc = oobx__ep_wait_error(&c->v, rc, "rank %d, leader of its host's ranks: sending %s to the next leader, %s, "
                                                "and the previous one, %s",
                                     rank, lr->what, who, who2);
        }
    }
    for (int i = 0; rc == 0 && i < st.ns; i++)
        if (st.sreqs[i].tp.status)
            rc = leader_peer_fail(c, st.sreqs[i].tp.status, st.sent_to[i], "the %s leader,",
                                  st.sent_to[i] == lr->next ? "next" : "previous");
    if (adopted || !pair_sent(st.pending)) {
        /* a transport may still touch them */
        oobx__ep_adopt(c->v.ep, in[0]);
        oobx__ep_adopt(c->v.ep, in[1]);
        oobx__ep_adopt(c->v.ep, st.sreqs);
        oobx__ep_adopt(c->v.ep, r);
        oobx__ep_adopt(c->v.ep, lr->own);
    } else {
        free(in[0]), free(in[1]), free(st.sreqs), free(r), free(lr->own);
    }
    free(st.pending), free(st.sent_to), free(st.back), free(st.back_len);
    return rc;
}

/* ---- the card trade at init ----
 * Block: u32 origin leader, u32 count, u64 OOBX_NODE_BUF of the origin, then
 * count x (u32 rank, u32 length, the card). */

typedef struct card_trade {
    struct oobx_comm *c;
    oobx__node_t *node;
    int prev;     /* the previous leader */
    int prev_set; /* its card is the transport's */
    int *leaders; /* the origins of the blocks in, then this leader: every leader */
    int nleaders;
} card_trade_t;

/* The length of the card block at m (at most avail bytes), 0 when it does not parse. */
static size_t card_block_len(const unsigned char *m, size_t avail)
{
    if (avail < 16) return 0;
    uint32_t count = oobx__get_u32(m + 4);
    size_t q = 16;
    for (uint32_t k = 0; k < count; k++) {
        if (q + 8 > avail) return 0;
        uint32_t len = oobx__get_u32(m + q + 4);
        if (len <= CARD_HDR || len > CARD_HDR + OOBX_ADDR_MAX || q + 8 + len > avail) return 0;
        q += 8 + (size_t)len;
    }
    return q;
}

static int card_unpack(void *arg, const unsigned char *m, size_t got, int from, int *origin)
{
    card_trade_t *t = arg;
    struct oobx_comm *c = t->c;
    int nranks = c->v.nranks;
    uint32_t o = got >= 16 ? oobx__get_u32(m) : 0, count = got >= 16 ? oobx__get_u32(m + 4) : 0;
    uint64_t buf = got >= 16 ? oobx__get_u64(m + 8) : 0;
    int bad = got < 16 || o >= (uint32_t)nranks || count == 0 || count > (uint32_t)nranks;
    size_t q = bad ? 0 : card_block_len(m, got);
    if (bad || q != got)
        return oobx__fail(&c->log, OOBX_ERR_PROTOCOL, "rank %d: a malformed card message of %zu bytes from leader %d",
                          c->v.rank, got, from);
    if (buf != c->settings.node_buf)
        return oobx__fail(&c->log, OOBX_ERR_MISMATCH,
                          "rank %d: the host of leader %u uses OOBX_NODE_BUF=%llu, this host %zu: set it the same on "
                          "every rank",
                          c->v.rank, o, (unsigned long long)buf, c->settings.node_buf);
    q = 16;
    for (uint32_t k = 0; k < count; k++) {
        uint32_t who = oobx__get_u32(m + q), len = oobx__get_u32(m + q + 4);
        int rc = oobx__node_put(t->node, (int)who, m + q + 8, len);
        if (rc != 0) return rc;
        q += 8 + (size_t)len;
    }
    *origin = (int)o;
    if (t->nleaders < nranks) t->leaders[t->nleaders++] = (int)o;
    return 0;
}

static int card_complete(void *arg)
{
    card_trade_t *t = arg;
    return oobx__node_count(t->node) >= t->c->v.nranks;
}

/* The previous leader's card came with its block (the root gave the next
 * leader's only): the transport learns it before the first backward send. */
static int card_reach_prev(void *arg, int *ready)
{
    card_trade_t *t = arg;
    *ready = t->prev_set;
    if (t->prev_set) return 0;
    size_t len = 0;
    const unsigned char *k = oobx__node_card(t->node, t->prev, &len);
    if (!k || len <= CARD_HDR) return 0;
    struct oobx_comm *c = t->c;
    int rc = c->v.ep->ops->set_peer(c->v.ep->tp, t->prev, k + CARD_HDR, len - CARD_HDR);
    if (rc != 0)
        return oobx__fail(&c->log, rc, "rank %d: the card of the previous leader, rank %d, does not parse: %s", c->v.rank,
                          t->prev, oobx_last_error());
    *ready = t->prev_set = 1;
    return 0;
}

/* Tags of the leaders' rings: group ids no group collective has. */
#define NODE_TRADE_TAG (0xfffffeull << 40)
/* The doubling trade's tags (below): the leaders' group, steps 34 (blocks)
 * and 35 (answers), the step number in the root field (the rings use steps
 * 32 and 33, Bruck 4-31). */
#define NODE_DOUBLING_TAG(k, answer) oobx__coll_tag(OOBX_COLL_GID_LEADERS, 34u + (answer), 0, 0, (int)(k))
/* Calls alternate between two steps (and LEADER_BACK adds one): a leader
 * whose direction brings nothing more in this call may still have a receive
 * posted there when its neighbour, one call ahead (no further: that call
 * needs this leader's block), sends the next call's first block, which must
 * not sit in the same slot (a rival there means a disagreeing call, ep.c). */
#define NODE_AG_TAG(op, seq) oobx__coll_tag(OOBX_COLL_GID_LEADERS, 2u * ((seq) & 1u), (op), (seq), 0)

static int doubling_trade(card_trade_t *t, const root_placement_t *pl, unsigned char *own, size_t own_len);

/* The ranks whose cards the table lacks, as "rank 5" or "rank 8 to rank 15"
 * runs (at most four, then how many more): what a failed trade names, since
 * a leader that waits cannot tell a stopped neighbour from one that waits
 * too. Returns how many ranks lack a card. */
static int missing_cards(const oobx__node_t *node, int nranks, char *buf, size_t len)
{
    int missing = 0, runs = 0;
    size_t o = 0;
    buf[0] = '\0';
    for (int r = 0; r < nranks;) {
        size_t l;
        if (oobx__node_card(node, r, &l)) {
            r++;
            continue;
        }
        int e = r;
        while (e + 1 < nranks && !oobx__node_card(node, e + 1, &l)) e++;
        missing += e - r + 1;
        if (runs < 4 && o < len) {
            int w = e > r ? snprintf(buf + o, len - o, "%srank %d to rank %d", runs ? ", " : "", r, e)
                          : snprintf(buf + o, len - o, "%srank %d", runs ? ", " : "", r);
            o += w > 0 ? (size_t)w : 0;
        }
        runs++;
        r = e + 1;
    }
    if (runs > 4 && o < len) snprintf(buf + o, len - o, " and %d more runs", runs - 4);
    return missing;
}

/* The card trade among the leaders; *leaders (malloc'ed, by rank, this
 * leader among them) and *nleaders: every host's leader, for the exchanges
 * of later allgathers. */
static int leader_trade(struct oobx_comm *c, oobx__node_t *node, const root_placement_t *pl, const int *members,
                        int **leaders, int *nleaders)
{
    int rank = c->v.rank, nranks = c->v.nranks, L = pl->place.local_size;
    int next = pl->place.next_leader, prev = pl->place.prev_leader;
    *leaders = malloc((size_t)nranks * sizeof(int));
    *nleaders = 0;
    if (!*leaders) return oobx__fail(&c->log, OOBX_ERR_NOMEM, "rank %d: out of memory", rank);
    if (next == rank) { /* the only group */
        (*leaders)[(*nleaders)++] = rank;
        return 0;
    }
    int rc = c->v.ep->ops->set_peer(c->v.ep->tp, next, pl->next_card + CARD_HDR, pl->place.next_len - CARD_HDR);
    if (rc != 0)
        return oobx__fail(&c->log, rc, "rank %d: the card of the next leader, rank %d, does not parse: %s", rank, next,
                          oobx_last_error());
    size_t own = 16;
    for (int k = 0; k < L; k++) {
        size_t len;
        oobx__node_card(node, members[k], &len);
        own += 8 + len;
    }
    unsigned char *out = malloc(own);
    if (!out) return oobx__fail(&c->log, OOBX_ERR_NOMEM, "rank %d: out of memory", rank);
    oobx__put_u32(out, (uint32_t)rank);
    oobx__put_u32(out + 4, (uint32_t)L);
    oobx__put_u64(out + 8, c->settings.node_buf);
    size_t o = 16;
    for (int k = 0; k < L; k++) {
        size_t len;
        const unsigned char *card = oobx__node_card(node, members[k], &len);
        oobx__put_u32(out + o, (uint32_t)members[k]);
        oobx__put_u32(out + o + 4, (uint32_t)len);
        memcpy(out + o + 8, card, len);
        o += 8 + len;
    }
    card_trade_t t = {c, node, prev, prev == next, *leaders, 0};
    if (strcmp(c->settings.node_exchange, "ring") != 0) {
        rc = doubling_trade(&t, pl, out, own);
    } else {
        leader_ring_t lr = {.next = next, .prev = prev, .tag = NODE_TRADE_TAG, .own = out, .own_len = own,
                            .in_cap = (size_t)(nranks - L) * (8 + CARD_HDR + OOBX_ADDR_MAX) + 16 * (size_t)nranks,
                            .what = "cards", .unpack = card_unpack, .complete = card_complete,
                            .reach_prev = card_reach_prev, .arg = &t, .other_tag = NODE_DOUBLING_TAG(0, 0)};
        rc = leader_ring_run(c, &lr);
    }
    if (rc == OOBX_ERR_MISMATCH || (rc != 0 && atomic_load(&c->v.ep->fail_rank) >= 0)) {
        /* the ranks disagree on a setting (this leader found it, or heard
         * of it), or a leader died: the leaders this one talked to hear it
         * now and pass it on, where a transport would not tell them of this
         * rank's exit before their timeout (UCX); init's failure path sends
         * the notices before it returns */
        char text[1024];
        snprintf(text, sizeof(text), "%s", oobx_last_error());
        if (!c->v.ep->spreads) c->v.ep->spreads = 1;
        oobx__ep_fail(c->v.ep, rank, rc, text); /* records only a first failure (a mismatch found here), then spreads */
        oobx__set_last_error("%s", text);
    }
    char miss[256];
    if (rc != 0 && missing_cards(node, nranks, miss, sizeof(miss)) > 0) {
        char text[1536];
        snprintf(text, sizeof(text), "%s; the cards of %s never came to this leader", oobx_last_error(), miss);
        oobx__set_last_error("%s", text);
        OOBX_WARN(&c->log, "rank %d, leader of its host's ranks: the cards of %s never came", rank, miss);
    }
    if (rc == 0 && t.nleaders < nranks) t.leaders[t.nleaders++] = rank;
    if (rc == 0) qsort(t.leaders, (size_t)t.nleaders, sizeof(int), oobx__int_cmp);
    *nleaders = t.nleaders;
    return rc;
}

/* ---- the leaders' Bruck exchange (node-aware allgathers after init) ----
 * Step k: leader i (in rank order among the H leaders) sends the blocks it
 * holds of leaders i, i+1, ..., i+d-1 (d = 2^k; the last step only the
 * H - d the receiver lacks) to leader i-d, in that order, in one message,
 * and gets those of leaders i+d, ... from leader i+d: ceil(log2 H) steps. */

/* Tags of the steps: step field 4 + 2k + the parity of the call (the ring's
 * use 0-3), so that a leader one call ahead never lands in a slot still
 * posted. */
#define NODE_BRUCK_TAG(op, seq, k) \
    oobx__coll_tag(OOBX_COLL_GID_LEADERS, 4u + 2u * (unsigned)(k) + ((unsigned)(seq) & 1u), (op), (seq), 0)

typedef struct leader_bruck {
    const int *leaders; /* by rank */
    int nleaders, index;
    unsigned op;
    uint32_t seq;
    unsigned char *own; /* this host's block (malloc'ed; leader_bruck_run frees it) */
    size_t own_len;
    size_t in_cap;      /* room for every other host's blocks */
    const char *what;
    /* the length of the block at m (at most avail bytes), 0 when it does not parse */
    size_t (*block_len)(void *arg, const unsigned char *m, size_t avail);
    int (*unpack)(void *arg, const unsigned char *m, size_t len, int from, int *origin);
    void *arg;
} leader_bruck_t;

static int recv_done(void *arg)
{
    return ((oobx_rreq_t *)arg)->done;
}

/* "rank 3 (10.0.0.7:4100)" into buf, once (buf[0] 0: not yet). */
static const char *who_is(struct oobx_comm *c, int r, char *buf, size_t len)
{
    if (!buf[0]) oobx__ep_peer_name(&c->v, r, buf, len);
    return buf;
}

static int leader_bruck_run(struct oobx_comm *c, const leader_bruck_t *lb)
{
    int rank = c->v.rank, H = lb->nleaders, me = lb->index, rc = 0, adopted = 0;
    int steps = 0;
    for (int d = 1; d < H; d <<= 1) steps++;
    size_t cap = lb->own_len + lb->in_cap;
    unsigned char *buf = malloc(cap);      /* this leader's block, then the others' in the order of the index */
    size_t *end = calloc((size_t)H, sizeof(*end)); /* where the block of leader index + j ends in buf */
    oobx_sreq_t *s = calloc((size_t)steps + 1, sizeof(*s));
    oobx_sreq_t **pending = calloc((size_t)steps + 2, sizeof(*pending));
    int *sent_to = calloc((size_t)steps + 1, sizeof(*sent_to));
    oobx_rreq_t *r = calloc(1, sizeof(*r));
    if (!buf || !end || !s || !pending || !sent_to || !r) {
        free(buf), free(end), free(s), free(pending), free(sent_to), free(r), free(lb->own);
        return oobx__fail(&c->log, OOBX_ERR_NOMEM, "rank %d: out of memory for the leaders' exchange", rank);
    }
    memcpy(buf, lb->own, lb->own_len);
    free(lb->own);
    end[0] = lb->own_len;
    size_t used = lb->own_len;
    uint64_t deadline = oobx__deadline(c->settings.timeout_ms);
    char who[160];
    int ns = 0;
    for (int k = 0, d = 1; rc == 0 && d < H; k++, d <<= 1) {
        int cnt = d < H - d ? d : H - d;
        int to = lb->leaders[(me - d + H) % H], from = lb->leaders[(me + d) % H];
        uint64_t tag = NODE_BRUCK_TAG(lb->op, lb->seq, k);
        rc = oobx__ep_irecv(&c->v, from, OOBX_MSG_COLL, tag, buf + used, cap - used, r);
        if (rc != 0) break;
        rc = oobx__ep_isend(&c->v, to, OOBX_MSG_COLL, tag, buf, end[cnt - 1], &s[ns]);
        if (rc == 0) {
            sent_to[ns] = to;
            pending[ns] = &s[ns];
            ns++;
        }
        if (rc == 0 && !r->done) rc = oobx__ep_wait(&c->v, recv_done, r, deadline);
        who[0] = '\0'; /* named by who_is() in the errors only */
        if (rc != 0) {
            rc = oobx__ep_wait_error(&c->v, rc, "rank %d, leader of its host's ranks: step %d of %d of the leaders' "
                                                "exchange: waiting for %d hosts' %s from %s",
                                     rank, k + 1, steps, cnt, lb->what, who_is(c, from, who, sizeof(who)));
            if (oobx__ep_cancel_recv(&c->v, OOBX_MSG_COLL, tag, r)) adopted = 1;
            break;
        }
        if (r->status) {
            rc = leader_peer_fail(c, r->status, from, "step %d of the leaders' exchange, from", k + 1);
            break;
        }
        const unsigned char *m = buf + used;
        size_t got = r->received, q = 0;
        for (int j = 0; rc == 0 && j < cnt; j++) {
            size_t bl = lb->block_len(lb->arg, m + q, got - q);
            int want = lb->leaders[(me + d + j) % H], origin = -1;
            if (!bl) {
                rc = oobx__fail(&c->log, OOBX_ERR_MISMATCH,
                                "rank %d, leader of its host's ranks: block %d of %d from %s (step %d of the leaders' "
                                "exchange, %zu bytes) does not parse: do all ranks pass the same size?",
                                rank, j + 1, cnt, who_is(c, from, who, sizeof(who)), k + 1, got);
                break;
            }
            rc = lb->unpack(lb->arg, m + q, bl, from, &origin);
            if (rc == 0 && origin != want)
                rc = oobx__fail(&c->log, OOBX_ERR_PROTOCOL,
                                "rank %d, leader of its host's ranks: %s sent the %s of leader %d where leader %d's "
                                "belonged (step %d of the leaders' exchange)",
                                rank, who_is(c, from, who, sizeof(who)), lb->what, origin, want, k + 1);
            q += bl;
            end[d + j] = used + q;
        }
        if (rc == 0 && q != got)
            rc = oobx__fail(&c->log, OOBX_ERR_PROTOCOL,
                            "rank %d, leader of its host's ranks: %zu bytes from %s after the %d blocks of step %d of the "
                            "leaders' exchange",
                            rank, got - q, who_is(c, from, who, sizeof(who)), cnt, k + 1);
        used += got;
    }
    if (rc == 0 && !pair_sent(pending)) {
        rc = oobx__ep_wait(&c->v, pair_sent, pending, deadline);
        if (rc != 0)
            rc = oobx__ep_wait_error(&c->v, rc, "rank %d, leader of its host's ranks: sending %s to the other leaders",
                                     rank, lb->what);
    }
    for (int i = 0; rc == 0 && i < ns; i++)
        if (s[i].tp.status)
            rc = leader_peer_fail(c, s[i].tp.status, sent_to[i], "step %d of the leaders' exchange, to", i + 1);
    if (adopted || !pair_sent(pending)) {
        oobx__ep_adopt(c->v.ep, buf);
        oobx__ep_adopt(c->v.ep, s);
        oobx__ep_adopt(c->v.ep, r);
    } else {
        free(buf), free(s), free(r);
    }
    free(end), free(pending), free(sent_to);
    return rc;
}

/* ---- the card trade at init by doubling (OOBX_NODE_EXCHANGE=bruck) ----
 * No leader knows the others' addresses or how many hosts there are: each
 * knows the next leader's card and the previous leader's rank (the root's
 * answer). Step k: leader i sends every block it holds (its own and those of
 * the 2^k - 1 leaders before it) to leader i + 2^k, and gets those of the
 * 2^k leaders before i - 2^k + 1 from leader i - 2^k; the step's message
 * also names i - 2^k (the receiver's sender at step k + 1), and the receiver
 * answers with the card of its own step-k partner, i + 2^(k+1) for the
 * sender. After ceil(log2 H) steps, the same on every leader, each holds
 * every block; the last step may bring blocks held already (no leader knows
 * H to trim it): they are checked and skipped.
 * Step message: u32 the sender's source of this step, u32 blocks, blocks.
 * Answer: u32 rank, u32 length, that rank's card.
 * One buffer holds it all: the blocks held, in order, with room for a step
 * message's two words before them, and free space after them. A step sends
 * straight from it (the two words, then every block held) and receives
 * into the free space after the blocks, which no send covers; the new
 * blocks then move down to follow the held ones. So the blocks are never
 * copied into a message of their own, and the pages a trade touches are
 * those of the blocks once (at 10,240 ranks of a 16-host job the copies
 * were about a third of a leader's page faults in the trade). The two words change from step to step: the send of the
 * step before has completed by then (the partner answered it after
 * receiving all of it), which the trade makes sure of before writing
 * them. */


/* A block whose origin leader is held already: its cards must be the ones
 * held. */
static int card_block_same(struct oobx_comm *c, oobx__node_t *node, const unsigned char *m, size_t len, int from)
{
    uint32_t count = oobx__get_u32(m + 4);
    size_t q = 16;
    for (uint32_t k = 0; k < count; k++) {
        uint32_t who = oobx__get_u32(m + q), l = oobx__get_u32(m + q + 4);
        size_t have_len = 0;
        const unsigned char *have = oobx__node_card(node, (int)who, &have_len);
        if (!have || have_len != l || memcmp(have, m + q + 8, l) != 0)
            return oobx__fail(&c->log, OOBX_ERR_PROTOCOL,
                              "rank %d, leader of its host's ranks: leader %d sent a card of rank %u unlike the one "
                              "held (block of leader %u)",
                              c->v.rank, from, who, oobx__get_u32(m));
        q += 8 + (size_t)l;
    }
    return q == len ? 0 : OOBX_ERR_PROTOCOL;
}

/* Tells the transport rank r's card from the host's table (once). */
static int doubling_reach(struct oobx_comm *c, oobx__node_t *node, unsigned char *known, int r)
{
    if (r == c->v.rank || known[r]) return 0;
    size_t len = 0;
    const unsigned char *k = oobx__node_card(node, r, &len);
    if (!k || len <= CARD_HDR)
        return oobx__fail(&c->log, OOBX_ERR_PROTOCOL,
                          "rank %d, leader of its host's ranks: the card of leader %d is not among those it sent",
                          c->v.rank, r);
    int rc = c->v.ep->ops->set_peer(c->v.ep->tp, r, k + CARD_HDR, len - CARD_HDR);
    if (rc != 0)
        return oobx__fail(&c->log, rc, "rank %d: the card of leader %d does not parse: %s", c->v.rank, r,
                          oobx_last_error());
    known[r] = 1;
    return 0;
}

/* Takes the blocks of a step message (msg, len >= 8 bytes; its blocks after
 * the two words): new ones into the table and onto held, ones held already
 * checked. msg may lie in held's free space, at or after held + *held_len:
 * each new block moves down over what was parsed before it. */
static int doubling_take(card_trade_t *t, const unsigned char *msg, size_t len, int from, unsigned char *seen,
                         unsigned char *held, size_t *held_len, uint32_t *nheld)
{
    struct oobx_comm *c = t->c;
    uint32_t nblocks = oobx__get_u32(msg + 4);
    const unsigned char *m = msg + 8;
    size_t got = len - 8, q = 0;
    for (uint32_t b = 0; b < nblocks; b++) {
        size_t bl = card_block_len(m + q, got - q);
        uint32_t o = bl ? oobx__get_u32(m + q) : 0;
        if (!bl || o >= (uint32_t)c->v.nranks)
            return oobx__fail(&c->log, OOBX_ERR_PROTOCOL,
                              "rank %d, leader of its host's ranks: block %u of %u from leader %d (%zu bytes) does not "
                              "parse",
                              c->v.rank, b + 1, nblocks, from, got);
        int rc, origin = -1;
        if (seen[o]) {
            rc = card_block_same(c, t->node, m + q, bl, from);
        } else {
            rc = card_unpack(t, m + q, bl, from, &origin);
            if (rc == 0) {
                seen[o] = 1;
                memmove(held + *held_len, m + q, bl);
                *held_len += bl;
                (*nheld)++;
            }
        }
        if (rc != 0) return rc;
        q += bl;
    }
    if (q != got)
        return oobx__fail(&c->log, OOBX_ERR_PROTOCOL,
                          "rank %d, leader of its host's ranks: %zu bytes from leader %d after its %u blocks", c->v.rank,
                          got - q, from, nblocks);
    return 0;
}

/* Waits for a receive of step k from leader peer ("cards from", "the answer of"). */
static int doubling_wait(struct oobx_comm *c, oobx_rreq_t *q, int peer, int k, const char *what, uint64_t deadline,
                         uint64_t other_tag)
{
    trade_watch_t w = {c, recv_done, q, peer, other_tag, 0};
    int rc = q->done ? 0 : oobx__ep_wait(&c->v, trade_watch_done, &w, deadline);
    if (rc == 0 && w.other && !q->done)
        return trade_mismatch(c, peer, "by the ring (OOBX_NODE_EXCHANGE=ring)", "by doubling (bruck)");
    char who[160] = "";
    if (rc != 0)
        return oobx__ep_wait_error(&c->v, rc, "rank %d, leader of its host's ranks: step %d of the leaders' card trade: "
                                              "waiting for %s %s",
                                   c->v.rank, k + 1, what, who_is(c, peer, who, sizeof(who)));
    if (q->status) return leader_peer_fail(c, q->status, peer, "step %d of the leaders' card trade, %s", k + 1, what);
    return 0;
}

static int doubling_trade(card_trade_t *t, const root_placement_t *pl, unsigned char *own, size_t own_len)
{
    struct oobx_comm *c = t->c;
    int rank = c->v.rank, nranks = c->v.nranks, rc = 0, adopted = 0;
    size_t cap = 8 + (size_t)nranks * (8 + CARD_HDR + OOBX_ADDR_MAX) + 16 * (size_t)nranks;
    size_t acap = 8 + CARD_HDR + OOBX_ADDR_MAX;
    enum { MAX_STEPS = 32 };
    /* the two words, the blocks held (at most cap), a step message after them (at most 8 + cap) */
    unsigned char *hbuf = malloc(8 + 2 * cap + 8), *ans_in = malloc(acap);
    unsigned char *held = hbuf ? hbuf + 8 : NULL;
    unsigned char *seen = calloc((size_t)nranks, 1), *known = calloc((size_t)nranks, 1);
    unsigned char *ans_out[MAX_STEPS] = {NULL};
    oobx_sreq_t *s = calloc(2 * MAX_STEPS, sizeof(*s));
    oobx_sreq_t **pending = calloc(2 * MAX_STEPS + 1, sizeof(*pending));
    int *sent_to = calloc(2 * MAX_STEPS, sizeof(*sent_to));
    oobx_rreq_t *r = calloc(2, sizeof(*r)); /* the step's blocks, the answer */
    unsigned char fwd_card[CARD_HDR + OOBX_ADDR_MAX];
    size_t fwd_len = pl->place.next_len;
    if (!hbuf || !ans_in || !seen || !known || !s || !pending || !sent_to || !r) {
        free(hbuf), free(ans_in), free(seen), free(known), free(s), free(pending), free(sent_to), free(r),
            free(own);
        return oobx__fail(&c->log, OOBX_ERR_NOMEM, "rank %d: out of memory for the leaders' exchange", rank);
    }
    memcpy(held, own, own_len);
    free(own);
    size_t held_len = own_len;
    uint32_t nheld = 1;
    seen[rank] = 1;
    memcpy(fwd_card, pl->next_card, fwd_len);
    int fwd = pl->place.next_leader, back = t->prev;
    known[fwd] = 1; /* leader_trade told the transport */
    uint64_t deadline = oobx__deadline(c->settings.timeout_ms);
    int ns = 0, k = 0, held_sent = -1; /* s[held_sent]: the last send from held */
    for (; rc == 0 && !card_complete(t); k++) {
        if (k == MAX_STEPS || fwd == rank || back == rank) {
            rc = oobx__fail(&c->log, OOBX_ERR_PROTOCOL,
                            "rank %d, leader of its host's ranks: step %d of the leaders' card trade points back to "
                            "itself with %d of %d cards in",
                            rank, k + 1, oobx__node_count(t->node), nranks);
            break;
        }
        uint64_t tag = NODE_DOUBLING_TAG(k, 0), atag = NODE_DOUBLING_TAG(k, 1);
        unsigned char *in = held + held_len; /* the free space: no send covers it */
        rc = oobx__ep_irecv(&c->v, back, OOBX_MSG_COLL, tag, in, 2 * cap + 8 - held_len, &r[0]);
        /* the step before's send read the two words: it is over (its
         * partner answered it), but the transport may not have said so */
        oobx_sreq_t *before[2] = {held_sent >= 0 ? &s[held_sent] : NULL, NULL};
        if (rc == 0 && before[0] && !pair_sent(before)) {
            rc = oobx__ep_wait(&c->v, pair_sent, before, deadline);
            if (rc != 0)
                rc = oobx__ep_wait_error(&c->v, rc, "rank %d, leader of its host's ranks: step %d of the leaders' "
                                                    "card trade: sending cards to leader %d", rank, k, sent_to[held_sent]);
            else if (s[held_sent].tp.status)
                rc = leader_peer_fail(c, s[held_sent].tp.status, sent_to[held_sent], "step %d of the leaders' card "
                                      "trade, to", k);
        }
        if (rc == 0) {
            oobx__put_u32(held - 8, (uint32_t)back);
            oobx__put_u32(held - 4, nheld);
            rc = oobx__ep_isend(&c->v, fwd, OOBX_MSG_COLL, tag, held - 8, 8 + held_len, &s[ns]);
            if (rc == 0) sent_to[ns] = fwd, pending[ns] = &s[ns], held_sent = ns++;
        }
        if (rc != 0) break;
        /* the step's blocks */
        /* at the first step, from the previous leader: a ring's first message there is the other setting */
        rc = doubling_wait(c, &r[0], back, k, "cards from", deadline, k == 0 ? NODE_TRADE_TAG : 0);
        if (rc != 0) break;
        if (r[0].received < 8) {
            rc = oobx__fail(&c->log, OOBX_ERR_PROTOCOL, "rank %d, leader of its host's ranks: a card message of %zu "
                            "bytes from leader %d", rank, r[0].received, back);
            break;
        }
        int next_back = (int)oobx__get_u32(in);
        if (next_back < 0 || next_back >= nranks) {
            rc = oobx__fail(&c->log, OOBX_ERR_PROTOCOL, "rank %d, leader of its host's ranks: leader %d names rank %d "
                            "(job of %d)", rank, back, next_back, nranks);
            break;
        }
        rc = doubling_take(t, in, r[0].received, back, seen, held, &held_len, &nheld);
        /* the answer: this step's partner, the sender's partner one step on.
         * Every leader holds the blocks of the 2^(k+1) leaders up to itself
         * after step k: all complete at the same step, and then neither
         * side needs an answer (one round trip less at the end). */
        int last = rc == 0 && card_complete(t);
        if (rc == 0 && !last) rc = doubling_reach(c, t->node, known, back);
        if (rc == 0 && !last) {
            ans_out[k] = malloc(8 + fwd_len);
            if (!ans_out[k]) rc = oobx__fail(&c->log, OOBX_ERR_NOMEM, "rank %d: out of memory", rank);
        }
        if (rc == 0 && !last) {
            oobx__put_u32(ans_out[k], (uint32_t)fwd);
            oobx__put_u32(ans_out[k] + 4, (uint32_t)fwd_len);
            memcpy(ans_out[k] + 8, fwd_card, fwd_len);
            rc = oobx__ep_isend(&c->v, back, OOBX_MSG_COLL, atag, ans_out[k], 8 + fwd_len, &s[ns]);
            if (rc == 0) sent_to[ns] = back, pending[ns] = &s[ns], ns++;
        }
        if (rc != 0 || last) break;
        back = next_back;
        /* the partner's answer */
        rc = oobx__ep_irecv(&c->v, fwd, OOBX_MSG_COLL, atag, ans_in, acap, &r[1]);
        if (rc == 0) rc = doubling_wait(c, &r[1], fwd, k, "the answer of", deadline, 0);
        if (rc != 0) break;
        uint32_t nf = r[1].received >= 8 ? oobx__get_u32(ans_in) : UINT32_MAX;
        uint32_t nl = r[1].received >= 8 ? oobx__get_u32(ans_in + 4) : 0;
        if (nf >= (uint32_t)nranks || nl <= CARD_HDR || nl > CARD_HDR + OOBX_ADDR_MAX || 8 + (size_t)nl != r[1].received) {
            rc = oobx__fail(&c->log, OOBX_ERR_PROTOCOL, "rank %d, leader of its host's ranks: a malformed answer of %zu "
                            "bytes from leader %d", rank, r[1].received, fwd);
            break;
        }
        fwd = (int)nf;
        fwd_len = nl;
        memcpy(fwd_card, ans_in + 8, nl);
        if (!known[fwd] && fwd != rank) {
            rc = c->v.ep->ops->set_peer(c->v.ep->tp, fwd, fwd_card + CARD_HDR, fwd_len - CARD_HDR);
            if (rc != 0)
                rc = oobx__fail(&c->log, rc, "rank %d: the card of leader %d does not parse: %s", rank, fwd,
                                oobx_last_error());
            else
                known[fwd] = 1;
        }
    }
    for (int d = 0; d < 2; d++)
        if (r[d].buf && !r[d].done && oobx__ep_cancel_recv(&c->v, OOBX_MSG_COLL, r[d].tag, &r[d])) adopted = 1;
    if (rc == 0 && !pair_sent(pending)) {
        rc = oobx__ep_wait(&c->v, pair_sent, pending, deadline);
        if (rc != 0)
            rc = oobx__ep_wait_error(&c->v, rc, "rank %d, leader of its host's ranks: sending cards to the other "
                                                "leaders", rank);
    }
    for (int i = 0; rc == 0 && i < ns; i++)
        if (s[i].tp.status) rc = leader_peer_fail(c, s[i].tp.status, sent_to[i], "the leaders' card trade, to");
    if (adopted || !pair_sent(pending)) {
        /* a transport may still touch them */
        oobx__ep_adopt(c->v.ep, hbuf);
        oobx__ep_adopt(c->v.ep, ans_in);
        oobx__ep_adopt(c->v.ep, s);
        oobx__ep_adopt(c->v.ep, r);
        for (int i = 0; i < MAX_STEPS; i++)
            if (ans_out[i]) oobx__ep_adopt(c->v.ep, ans_out[i]);
    } else {
        free(hbuf), free(ans_in), free(s), free(r);
        for (int i = 0; i < MAX_STEPS; i++) free(ans_out[i]);
    }
    free(seen), free(known), free(pending), free(sent_to);
    return rc;
}

/* ---- the node-aware allgather ----
 * Block: u32 origin leader, u32 count, count x u32 rank, count x bpr bytes. */

typedef struct slice_trade {
    struct oobx_comm *c;
    unsigned char *data;
    size_t bpr;
    char *have;    /* per rank: its slice is in */
    int nhave, want;
} slice_trade_t;

static int slice_unpack(void *arg, const unsigned char *m, size_t got, int from, int *origin)
{
    (void)from; /* the messages name the origin, which the block says */
    slice_trade_t *t = arg;
    struct oobx_comm *c = t->c;
    int nranks = c->v.nranks;
    uint32_t o = got >= 8 ? oobx__get_u32(m) : 0, count = got >= 8 ? oobx__get_u32(m + 4) : 0;
    if (got < 8 || o >= (uint32_t)nranks || count == 0 || count > (uint32_t)nranks ||
        got != 8 + (size_t)count * (4 + t->bpr))
        return oobx__fail(&c->log, OOBX_ERR_MISMATCH,
                          "rank %d: an allgather block of %zu bytes from leader %u for %u ranks of %zu bytes: do all "
                          "ranks pass the same size?",
                          c->v.rank, got, o, count, t->bpr);
    const unsigned char *ranks = m + 8, *data = m + 8 + 4 * (size_t)count;
    for (uint32_t k = 0; k < count; k++) {
        uint32_t r = oobx__get_u32(ranks + 4 * (size_t)k);
        if (r >= (uint32_t)nranks || t->have[r])
            return oobx__fail(&c->log, OOBX_ERR_PROTOCOL, "rank %d: leader %u sent the slice of rank %u %s", c->v.rank,
                              o, r, r >= (uint32_t)nranks ? "(no such rank)" : "twice");
        memcpy(t->data + (size_t)r * t->bpr, data + (size_t)k * t->bpr, t->bpr);
        t->have[r] = 1;
        t->nhave++;
    }
    *origin = (int)o;
    return 0;
}

static size_t slice_block_len(void *arg, const unsigned char *m, size_t avail)
{
    slice_trade_t *t = arg;
    if (avail < 8) return 0;
    uint64_t count = oobx__get_u32(m + 4);
    if (count == 0 || count > (uint64_t)t->c->v.nranks) return 0;
    uint64_t len = 8 + count * (4 + (uint64_t)t->bpr);
    return len <= avail ? (size_t)len : 0;
}

static int slice_complete(void *arg)
{
    slice_trade_t *t = arg;
    return t->nhave >= t->want;
}

/* 1 when this communicator's collectives may go through its host's
 * segment: a node-aware init kept it, and the view is the whole job, not a
 * split child's rank map. */
static int node_path(const struct oobx_comm *c)
{
    return c->node.seg && !c->v.ep_rank;
}

/* 1 when an allgather of bpr bytes per rank may take the node path: the
 * same answer on every rank (it depends on the job and the settings only). */
static int node_allgather_fits(const struct oobx_comm *c, size_t bpr)
{
    return node_path(c) && bpr > 0 && (size_t)c->v.nranks <= SIZE_MAX / bpr &&
           (size_t)c->v.nranks * bpr <= oobx__node_data_bytes(c->node.seg);
}

/* The cancel's poll while a rank waits in the host's shared memory: the
 * endpoint answers probes, takes in what arrives (a disagreeing call's
 * messages included) and passes notices on; a failure of the communicator
 * ends the wait. Without blocking: another thread may hold the endpoint. */
static int node_poll(void *arg, char *why, size_t len)
{
    struct oobx_comm *c = arg;
    oobx_ep_t *ep = c->v.ep;
    if (pthread_mutex_trylock(&ep->lock) != 0) return 0;
    if (!ep->poller) {
        ep->ops->progress(ep->tp);
        oobx__ep_spread(ep);
    }
    const char *f = oobx__ep_view_failure(&c->v);
    int st = f ? oobx__ep_view_status(&c->v) : 0;
    if (f) {
        snprintf(why, len, "%s", f);
        node_tell_failure(c);
    }
    pthread_mutex_unlock(&ep->lock);
    return st;
}

/* A failure that a node-aware allgather found (in the segment, or the
 * leader ring): the communicator's, told to the other ranks, unless one is
 * known already. who: the view rank it is about, -1: this rank reports it. */
static void node_fail(struct oobx_comm *c, int who, int status, const char *text)
{
    char copy[700]; /* text may be the thread's last error, which the next failure rewrites */
    snprintf(copy, sizeof(copy), "%s", text);
    pthread_mutex_lock(&c->v.ep->lock);
    if (!oobx__ep_view_failure(&c->v))
        oobx__ep_fail(c->v.ep, who >= 0 ? oobx__ep_view_rank(&c->v, who) : c->v.ep->rank, status, copy);
    pthread_mutex_unlock(&c->v.ep->lock);
}

/* What a member writes as its bytes per rank for a barrier: no allgather's
 * size, so that a barrier and an allgather of one call are told apart. */
#define NODE_BARRIER_SIG UINT64_MAX

/* "oobx_barrier", "oobx_allgather of 8 bytes per rank": a signature, for messages. */
static void node_sig_name(uint64_t sig, char *buf, size_t len)
{
    if (sig == NODE_BARRIER_SIG) snprintf(buf, len, "oobx_barrier");
    else snprintf(buf, len, "oobx_allgather of %llu bytes per rank", (unsigned long long)sig);
}

/* 1 when this rank holds a table of oobx_allgather_table in the host's
 * shared buffer b (under the endpoint's lock). */
static int table_holds(const struct oobx_comm *c, int b)
{
    for (int i = 0; i < c->ntables; i++)
        if (c->tables[i].b == b) return 1;
    return 0;
}

/* What oobx_allgather_table asks of node_collective: this rank's slice
 * comes from mine, and the result stays in the host's shared buffer, which
 * this rank does not leave (b and k say which use it holds). */
typedef struct node_hold {
    const void *mine;
    const unsigned char *data;
    int b;
    uint32_t k;
} node_hold_t;

/* Within a host through the shared buffer, across hosts among the leaders.
 * barrier: the same steps without slices (bpr 0, buf unused). hold: NULL,
 * or the result is left in the shared buffer (oobx_allgather_table). */
static int node_collective_run(struct oobx_comm *c, void *buf, size_t bpr, int barrier, node_hold_t *hold);

static int node_collective(struct oobx_comm *c, void *buf, size_t bpr, int barrier, node_hold_t *hold)
{
    int rc = node_collective_run(c, buf, bpr, barrier, hold);
    if (rc) oobx__comm_flush_notices(c);
    return rc;
}

static int node_collective_run(struct oobx_comm *c, void *buf, size_t bpr, int barrier, node_hold_t *hold)
{
    int rank = c->v.rank, nranks = c->v.nranks, L = c->node.local_size;
    unsigned op = barrier ? COLL_OP_NODE_BARRIER : COLL_OP_NODE_ALLGATHER;
    const char *fn = barrier ? "oobx_barrier" : "oobx_allgather", *opname = barrier ? "a barrier" : "an allgather";
    uint64_t sig = barrier ? NODE_BARRIER_SIG : bpr;
    if (barrier) bpr = 0;
    oobx__node_t *seg = c->node.seg;
    pthread_mutex_lock(&c->v.ep->lock);
    if (table_holds(c, (int)(c->node.uses & 1))) {
        /* its next use waits for every rank of the host to leave it, this one too */
        pthread_mutex_unlock(&c->v.ep->lock);
        return oobx__fail(&c->log, OOBX_ERR_INVALID,
                          "%s: rank %d still holds the table of an oobx_allgather_table two collective calls ago, "
                          "in the host's shared buffer this call needs: release it first "
                          "(oobx_allgather_table_release)",
                          fn, rank);
    }
    uint32_t u = c->node.uses++;
    uint32_t seq = c->coll_seq++;
    /* the call on the communicator's count: a rank that makes another call
     * under its number and sends is found out (ep.h) */
    oobx__ep_coll_begin(&c->v, oobx__coll_tag(0, 0, op, seq, 0));
    c->node.cancel.poll = node_poll;
    c->node.cancel.poll_arg = c;
    pthread_mutex_unlock(&c->v.ep->lock);
    int b = (int)(u & 1), fresh = 0;
    uint32_t k = u >> 1;
    c->node.cancel.deadline_ns = oobx__deadline(c->settings.timeout_ms);
    int rc = oobx__node_ag_enter(seg, b, k, sig);
    if (rc != 0) return rc;
    unsigned char *data = oobx__node_data(seg, b);
    if (bpr) memcpy(data + (size_t)rank * bpr, hold ? hold->mine : (char *)buf + (size_t)rank * bpr, bpr);
    oobx__node_ag_arrive(seg, b, k);
    size_t all = (size_t)nranks * bpr;
    /* a fresh result buffer: with a CPU to spare its pages are mapped while
     * this rank waits (a member), and the copy is a plain one; on a crowded
     * host, where CPU is what a start-up waits for, the kernel fills them
     * with the result as it maps them (oobx__copy_fresh): no zeroing pass */
    if (!c->node.leader && bpr && !hold && !c->node.crowded) oobx__prefault_write(buf, all);
    if (c->node.leader) {
        int mr = -1;
        uint64_t mb = 0;
        rc = oobx__node_ag_wait_arrivals(seg, b, k, sig, opname, &mr, &mb);
        if (rc == 0 && mr >= 0) {
            char theirs[80], mine[80];
            node_sig_name(mb, theirs, sizeof(theirs));
            node_sig_name(sig, mine, sizeof(mine));
            rc = oobx__fail(&c->log, OOBX_ERR_MISMATCH,
                            "%s: rank %d calls %s, rank %d (the leader of its host) %s: the ranks disagree on the call",
                            fn, mr, theirs, rank, mine);
            /* the other hosts' leaders wait for this host's slices: they hear it too */
            node_fail(c, mr, OOBX_ERR_MISMATCH, oobx_last_error());
        }
        if (rc == 0 && c->node.next != rank) {
            size_t own = 8 + (size_t)L * (4 + bpr);
            unsigned char *out = malloc(own);
            slice_trade_t t = {c, data, bpr, calloc((size_t)nranks, 1), 0, nranks - L};
            if (!out || !t.have) {
                rc = oobx__fail(&c->log, OOBX_ERR_NOMEM, "rank %d: out of memory", rank);
            } else {
                oobx__put_u32(out, (uint32_t)rank);
                oobx__put_u32(out + 4, (uint32_t)L);
                for (int q = 0; q < L; q++) {
                    oobx__put_u32(out + 8 + 4 * (size_t)q, (uint32_t)c->node.members[q]);
                    if (bpr)
                        memcpy(out + 8 + 4 * (size_t)L + (size_t)q * bpr, data + (size_t)c->node.members[q] * bpr, bpr);
                    t.have[c->node.members[q]] = 1;
                }
                size_t in_cap = (size_t)(nranks - L) * (4 + bpr) + 8 * (size_t)nranks;
                const char *what = barrier ? "barrier arrivals" : "allgather slices";
                pthread_mutex_lock(&c->v.ep->lock);
                if (strcmp(c->settings.node_exchange, "ring") != 0 && c->node.nleaders > 1) {
                    leader_bruck_t lb = {.leaders = c->node.leaders, .nleaders = c->node.nleaders,
                                         .index = c->node.lindex, .op = op, .seq = seq, .own = out, .own_len = own,
                                         .in_cap = in_cap, .what = what, .block_len = slice_block_len,
                                         .unpack = slice_unpack, .arg = &t};
                    rc = leader_bruck_run(c, &lb);
                } else {
                    leader_ring_t lr = {.next = c->node.next, .prev = c->node.prev, .tag = NODE_AG_TAG(op, seq),
                                        .own = out, .own_len = own, .in_cap = in_cap, .what = what,
                                        .unpack = slice_unpack, .complete = slice_complete, .arg = &t};
                    rc = leader_ring_run(c, &lr);
                }
                out = NULL; /* the exchange's now */
                pthread_mutex_unlock(&c->v.ep->lock);
            }
            free(out);
            free(t.have);
        }
        /* found here (a member's pid, the leader ring): the other hosts hear it too */
        if (rc == OOBX_ERR_REMOTE || rc == OOBX_ERR_MISMATCH) node_fail(c, -1, rc, oobx_last_error());
        const char *origin = rc ? oobx__ep_view_failure(&c->v) : NULL;
        oobx__node_ag_done(seg, b, rc, rc ? (origin ? origin : oobx_last_error()) : NULL);
    } else {
        rc = oobx__node_ag_wait_done(seg, b, k, opname);
        /* the leader's failure is this communicator's: later calls say so at once */
        if (rc == OOBX_ERR_MISMATCH || rc == OOBX_ERR_REMOTE) {
            const char *origin = oobx__node_ag_error(seg);
            node_fail(c, -1, rc, origin ? origin : oobx_last_error());
        }
    }
    if (rc == 0 && hold) {
        hold->data = data;
        hold->b = b;
        hold->k = k;
    } else {
        if (rc == 0 && bpr) {
            if (c->node.crowded) {
                fresh = oobx__copy_fresh(buf, data, all);
            } else {
                if (c->node.leader) oobx__prefault_write(buf, all); /* its wait was the leaders' exchange */
                memcpy(buf, data, all);
            }
        }
        oobx__node_ag_leave(seg, b, k);
    }
    if (rc == 0) {
        pthread_mutex_lock(&c->v.ep->lock);
        if (barrier) c->v.ep->direct.node_barrier++;
        else c->v.ep->direct.node++;
        c->v.ep->direct.node_fresh += (uint64_t)fresh;
        /* every rank took part, as in a call over the ring: a ring link
         * that goes down without a goodbye from now on is a death the
         * communicator hears of (ep.c, peer_failed), not a rank that left */
        if (nranks > 1) {
            c->v.ep->used[(rank + 1) % nranks] = 1;
            c->v.ep->used[(rank - 1 + nranks) % nranks] = 1;
        }
        pthread_mutex_unlock(&c->v.ep->lock);
    }
    return rc;
}

/* The host's table this rank was placed in, for node.c. */
static oobx__node_params_t node_params(struct oobx_comm *c, const oobx_place_t *pl, const oobx_cancel_t *cancel)
{
    return (oobx__node_params_t){.job = c->v.ctx, .epoch = pl->epoch, .host = pl->host, .rank = c->v.rank,
                                 .nranks = c->v.nranks, .local_index = pl->local_index, .local_size = pl->local_size,
                                 .leader = pl->leader, .card_cap = CARD_HDR + OOBX_ADDR_MAX,
                                 .data_bytes = c->settings.node_buf, .dir = c->settings.node_dir, .log = &c->log,
                                 .cancel = cancel};
}

/* Every rank reports its card to its root, which answers with the rank's
 * place among the ranks of its host; the ranks of a host share one table in
 * shared memory, and only their leader trades cards with the other hosts'. */
static int init_node(struct oobx_comm *c, const root_client_t *rcl_in, const unsigned char *blob, size_t blob_len,
                     const oobx_cancel_t *cancel)
{
    int rank = c->v.rank, nranks = c->v.nranks;
    uint64_t t0 = oobx__now_ns();
    unsigned char card[CARD_HDR + OOBX_ADDR_MAX];
    card_header((char *)card, &c->settings, c->ncpu);
    memcpy(card + CARD_HDR, blob, blob_len);
    size_t card_len = CARD_HDR + blob_len;
    root_client_t rcl = *rcl_in;
    rcl.blob = card;
    rcl.blob_len = card_len;
    root_placement_t pl;
    double delay = 0;
    int rc = oobx__root_exchange_node(&rcl, &pl, &delay);
    if (rc != 0) {
        if (pl.placed_then_failed) {
            /* placed by its own root, then refused by the other one: the
             * host's ranks will look for this rank in their table; it goes
             * there to say why, so that they do not wait out the timeout */
            char text[1024];
            snprintf(text, sizeof(text), "%s", oobx_last_error());
            oobx__node_params_t np = node_params(c, &pl.place, cancel);
            oobx__node_tell_failure(&np, rc, text);
            oobx__set_last_error("%s", text);
        }
        oobx__root_placement_free(&pl);
        return rc;
    }
    uint64_t t_root = oobx__now_ns();
    c->timings.delay = delay;
    c->timings.root = (t_root - t0) / 1e9 - delay;
    c->timings.ring = 0;
    c->timings.local_ranks = pl.place.local_size;
    c->timings.leader = pl.place.local_index == 0;
    if (c->settings.local_size > 0 && c->settings.local_size != pl.place.local_size)
        OOBX_INFO(&c->log, "the launcher (%s) says %d ranks on this host; %d share its table (a host split between "
                  "two roots' blocks has a table in each; ranks that share a host id but not a node are alone)",
                  c->settings.local_vars, c->settings.local_size, pl.place.local_size);
    int leader = pl.place.local_index == 0;
    int *members = NULL, *leaders = NULL, nleaders = 0;
    if (leader) {
        members = malloc((size_t)pl.place.local_size * sizeof(int));
        if (!members) {
            oobx__root_placement_free(&pl);
            return oobx__fail(&c->log, OOBX_ERR_NOMEM, "rank %d: out of memory", rank);
        }
        for (int k = 0; k < pl.place.local_size; k++) members[k] = (int)oobx__get_u32(pl.members + 4 * (size_t)k);
    }
    oobx__node_params_t np = node_params(c, &pl.place, cancel);
    oobx__node_t *node = NULL;
    rc = oobx__node_join(&np, card, card_len, &node);
    uint64_t t_local = 0, t_trade = 0;
    if (rc == 0 && leader) {
        rc = oobx__node_wait_members(node, members);
        t_local = oobx__now_ns();
        if (rc == 0) {
            pthread_mutex_lock(&c->v.ep->lock);
            rc = leader_trade(c, node, &pl, members, &leaders, &nleaders);
            /* the leader alone reads every card: the members learn what it found */
            int hosts = 0, over = 0;
            if (rc == 0 && oobx__node_count(node) != nranks)
                rc = oobx__fail(&c->log, OOBX_ERR_INTERNAL, "rank %d: the host's table holds %d cards of %d", rank,
                                oobx__node_count(node), nranks);
            if (rc == 0) rc = check_cards(c, node_card_of, node, 0, &hosts, &over, NULL);
            if (rc == 0) oobx__node_set_summary(node, hosts, over);
            pthread_mutex_unlock(&c->v.ep->lock);
        }
        t_trade = oobx__now_ns();
        oobx__node_finish(node, rc, rc ? oobx_last_error() : NULL);
    } else if (rc == 0) {
        rc = oobx__node_wait_finish(node);
        t_local = t_trade = oobx__now_ns();
    }
    int owned = 0; /* the endpoint reads addresses from the table from now on, and unmaps it */
    /* the host's ranks share its table: its size is this host's count (the
     * launcher's when larger: a host split between two roots' blocks has a
     * table per block) */
    int here = pl.place.local_size > c->settings.local_size ? pl.place.local_size : c->settings.local_size;
    int crowded = here > c->ncpu;
    if (rc == 0) {
        int over = 0;
        oobx__node_summary(node, &c->timings.hosts, &over);
        pthread_mutex_lock(&c->v.ep->lock);
        rc = oobx__ep_set_addr_source(c->v.ep, node_addr_of, node, node_release);
        owned = rc == 0;
        if (rc == 0) rc = cards_taken(c, over, crowded, 0);
        pthread_mutex_unlock(&c->v.ep->lock);
    }
    if (rc == 0 && c->settings.node_buf > 0) {
        /* kept for the node-aware allgather */
        c->node.seg = node;
        c->node.leader = leader;
        c->node.local_size = pl.place.local_size;
        c->node.crowded = crowded;
        c->node.next = pl.place.next_leader;
        c->node.prev = pl.place.prev_leader;
        c->node.members = members;
        members = NULL;
        c->node.leaders = leaders;
        c->node.nleaders = nleaders;
        for (int i = 0; i < nleaders; i++)
            if (leaders && leaders[i] == rank) c->node.lindex = i;
        leaders = NULL;
        c->node.cancel.user_abort = c->v.user_abort;
        c->node.cancel.aborted = &c->aborted;
        c->node.cancel.deadline_ns = UINT64_MAX;
        oobx__node_set_cancel(node, &c->node.cancel);
    } else if (!owned) {
        oobx__node_leave(node);
    }
    oobx__root_placement_free(&pl);
    free(members);
    free(leaders);
    uint64_t t_end = oobx__now_ns();
    c->timings.local = t_local ? (t_local - t_root) / 1e9 : 0;
    c->timings.allgather = (t_end - t_root) / 1e9;
    c->timings.trade = leader && t_local ? (t_trade - t_local) / 1e9 : 0;
    return rc;
}

/* How long a rank whose init failed on another rank's death stays reachable. */
#define INIT_LINGER_MS 200

int oobx__comm_init_common(oobx_comm_t *out, int nranks, int rank, int nids, const root_handle_t *roots,
                            const oobx_settings_t *s, const oobx_config_t *cfg, uint64_t hosted_magic)
{
    uint64_t t0 = oobx__now_ns();
    struct oobx_comm *c = comm_alloc(s);
    if (!c) return oobx__fail(NULL, OOBX_ERR_NOMEM, "out of memory");
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    char prefix[96];
    snprintf(prefix, sizeof(prefix), "rank %d/%d", rank, nranks);
    oobx__log_open(&c->log, s, prefix);
    c->v.rank = rank;
    c->v.nranks = nranks;
    c->ncpu = oobx__online_cpus();
    c->v.user_abort = cfg && cfg->struct_size >= offsetof(oobx_config_t, abort_flag) + sizeof(cfg->abort_flag)
                        ? cfg->abort_flag
                        : NULL;
    c->v.ctx = roots[0].magic;
    c->root_magic = hosted_magic;
    oobx_cancel_t cancel = {.deadline_ns = oobx__deadline(s->timeout_ms), .user_abort = c->v.user_abort,
                            .aborted = &c->aborted};
    int rc = oobx__ep_create(s, &c->log, &c->v.ep);
    if (rc == 0) rc = oobx__ep_set_size(c->v.ep, rank, nranks);
    /* the launcher's count of this host's ranks decides polling before the cards are in */
    if (rc == 0 && s->local_size > 0) oobx__ep_set_spin(c->v.ep, s->local_size > c->ncpu);
    if (rc != 0) {
        comm_release_ep(c);
        comm_free(c);
        return oobx__fail(NULL, rc, "rank %d: cannot create its endpoint: %s", rank, oobx_last_error());
    }
    oobx_tp_params_t p = {.rank = rank, .nranks = nranks, .magic = c->v.ctx, .secret = roots[0].secret,
                          .settings = &c->settings,
                          .log = &c->log, .sink = oobx__ep_sink(c->v.ep), .root_hint = &roots[0].addr.sa,
                          .root_hint_len = oobx__sock_addr_len(&roots[0].addr),
                          .wake_fd = c->v.ep->wake_fd, .core = &oobx__core_api};
    const char *tname = "socket";
    pthread_mutex_lock(&c->v.ep->lock);
    rc = transport_open(c, &p, &tname);
    pthread_mutex_unlock(&c->v.ep->lock);
    if (rc != 0) goto fail;
    snprintf(c->transport, sizeof(c->transport), "%s", tname);
    uint64_t t_create = oobx__now_ns();

    unsigned char blob[OOBX_ADDR_MAX];
    size_t blob_len = sizeof(blob) - CARD_HDR; /* the card (header + address) travels as one blob */
    rc = c->v.ep->ops->address(c->v.ep->tp, blob, &blob_len);
    if (rc != 0) {
        rc = oobx__fail(&c->log, rc, "rank %d: transport %s has no address: %s", rank, tname, oobx_last_error());
        goto fail;
    }
    root_client_t rcl = {.rank = rank, .nranks = nranks, .nroots = nids, .roots = roots, .tpid = oobx__tp_find(tname)->id,
                         .blob = blob, .blob_len = blob_len, .settings = &c->settings, .log = &c->log,
                         .cancel = &cancel};
    /* one budget for the whole of init: every wait of its phases ends by the same deadline */
    c->v.deadline_ns = cancel.deadline_ns;
    if (c->settings.node_aware && nranks > 1 && nranks >= c->settings.node_aware_min)
        rc = init_node(c, &rcl, blob, blob_len, &cancel);
    else rc = init_flat(c, &rcl, blob, blob_len);
    c->v.deadline_ns = 0;
    if (rc != 0) goto fail;
    c->v.ep->ready = 1;
    uint64_t t_end = oobx__now_ns();
    c->timings.create = (t_create - t0) / 1e9;
    c->timings.total = (t_end - t0) / 1e9;
    OOBX_INFO(&c->log, "init timings total %.6f s (create %.6f, delay %.6f, root %.6f, ring %.6f, allgather %.6f, of it "
                       "local %.6f; %d hosts, %d ranks here), transport %s, %d roots",
              c->timings.total, c->timings.create, c->timings.delay, c->timings.root, c->timings.ring,
              c->timings.allgather, c->timings.local, c->timings.hosts, c->timings.local_ranks, tname, nids);
    *out = c;
    return 0;
fail:
    {
        int saved = rc;
        char msg[1600];
        snprintf(msg, sizeof(msg), "%s", oobx_last_error());
        if (c->auto_note[0] && c->transport[0] && strstr(msg, "set OOBX_TRANSPORT the same on every rank")) {
            /* the ranks did set it the same, to auto, and their hosts chose
             * apart: say which way this one went, and what to set */
            size_t k = strlen(msg);
            snprintf(msg + k, sizeof(msg) - k,
                     " (this rank %d took %s%s; under auto a job over hosts with an active RDMA device and hosts "
                     "without one takes ucx on the first and socket on the others: set OOBX_TRANSPORT=socket, or "
                     "ucx, on every rank)",
                     rank, c->transport, c->auto_note);
        }
        oobx__comm_flush_notices(c); /* notices queued (a failed card trade's): out */
        /* the moment a failed init may stay up for others: at most a tenth of the budget */
        int linger_ms = s->timeout_ms < 0 ? INIT_LINGER_MS : OOBX_MIN(INIT_LINGER_MS, s->timeout_ms / 10);
        /* another rank died: stay reachable a moment for the ranks that have
         * not connected to this one yet */
        if (c->v.ep && c->v.ep->tp && atomic_load(&c->v.ep->fail_rank) >= 0 &&
            atomic_load(&c->v.ep->fail_rank) != rank)
            oobx__ep_linger(c->v.ep, oobx__ms_left(cancel.deadline_ns, linger_ms));
        uint64_t hosted = c->root_magic;
        comm_release_ep(c);
        comm_free(c);
        /* a root this process hosts may still owe answers (a refused job:
         * every rank is told why, the late ones too): a moment for it to
         * finish before the caller exits with it */
        if (hosted) oobx__root_registry_reap(hosted, linger_ms);
        oobx__set_last_error("%s", msg);
        return saved;
    }
}

int oobx_get_unique_id(oobx_unique_id_t *id)
{
    if (!id) return oobx__fail(NULL, OOBX_ERR_INVALID, "oobx_get_unique_id: id is NULL");
    oobx_settings_t s;
    int rc = oobx__settings_load(&s, NULL);
    if (rc != 0) return rc;
    oobx__root_registry_reap(0, 0);
    oobx_sockaddr_t bind_addr;
    char why[600];
    memset(&bind_addr, 0, sizeof(bind_addr));
    if (s.comm_id[0]) {
        /* a fixed address for the root */
        char first[sizeof(s.comm_id)];
        snprintf(first, sizeof(first), "%s", s.comm_id);
        char *comma = strchr(first, ',');
        if (comma) *comma = '\0';
        rc = oobx__sock_addr_parse(first, s.socket_family, &bind_addr, why, sizeof(why));
        if (rc != 0) return oobx__fail(NULL, rc, "OOBX_COMM_ID: %s", why);
    } else {
        topo_request_t req = {.ifname_spec = s.socket_ifname, .family = s.socket_family,
                              .allow_linklocal = s.socket_linklocal, .pci_target = s.topo_pci[0] ? s.topo_pci : NULL,
                              .module_dir = s.module_dir};
        topo_if_t ifc;
        rc = oobx__topo_pick_if(&req, &ifc, why, sizeof(why));
        if (rc != 0) return oobx__fail(NULL, rc, "oobx_get_unique_id: no interface for the root: %s", why);
        memcpy(&bind_addr, &ifc.addr, ifc.addrlen);
        oobx__sock_addr_set_port(&bind_addr, 0);
    }
    root_handle_t h;
    unsigned char secret[OOBX_SECRET_BYTES];
    if (oobx__auth_init() != 0) return oobx__fail(NULL, OOBX_ERR_SYSTEM, "oobx_get_unique_id: libsodium cannot start");
    oobx__auth_random(secret, sizeof(secret));
    rc = oobx__root_start(&bind_addr, oobx__random64(), secret, &s, &h, why, sizeof(why));
    if (rc != 0) return oobx__fail(NULL, rc, "oobx_get_unique_id: cannot start a root: %s", why);
    oobx__root_handle_encode(&h, id);
    return 0;
}

int oobx_comm_init(oobx_comm_t *comm, int nranks, int rank, int nids, const oobx_unique_id_t *ids,
                   const oobx_config_t *cfg)
{
    if (!comm) return oobx__fail(NULL, OOBX_ERR_INVALID, "oobx_comm_init: comm is NULL");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return oobx__fail(NULL, OOBX_ERR_INVALID, "oobx_comm_init: rank %d of %d is out of range", rank, nranks);
    if (nids < 1 || nids > nranks || !ids)
        return oobx__fail(NULL, OOBX_ERR_INVALID, "oobx_comm_init: rank %d: %d unique ids for %d ranks (1..nranks allowed, ids not NULL)",
                         rank, nids, nranks);
    oobx_settings_t s;
    int rc = oobx__settings_load(&s, cfg);
    if (rc != 0) return rc;
    root_handle_t *roots = calloc((size_t)nids, sizeof(*roots));
    if (!roots) return oobx__fail(NULL, OOBX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nids; i++) {
        char why[300];
        rc = oobx__root_handle_decode(&ids[i], &roots[i], why, sizeof(why));
        if (rc != 0) {
            free(roots);
            return oobx__fail(NULL, rc, "oobx_comm_init: rank %d: unique id %d: %s", rank, i, why);
        }
    }
    rc = oobx__comm_init_common(comm, nranks, rank, nids, roots, &s, cfg, 0);
    free(roots);
    return rc;
}

/* ---- queries ---- */

int oobx_comm_rank(oobx_comm_t c, int *rank)
{
    if (!c || !rank) return oobx__fail(NULL, OOBX_ERR_INVALID, "oobx_comm_rank: NULL argument");
    *rank = c->v.rank;
    return 0;
}

int oobx_comm_size(oobx_comm_t c, int *nranks)
{
    if (!c || !nranks) return oobx__fail(NULL, OOBX_ERR_INVALID, "oobx_comm_size: NULL argument");
    *nranks = c->v.nranks;
    return 0;
}

const char *oobx_comm_transport(oobx_comm_t c)
{
    return c ? c->transport : NULL;
}

/* Hands a structure that may grow at its end (its first member is
 * struct_size) to a caller built against any version of it: asked is the
 * caller's struct_size (0: this build's), least what the call always fills. */
static int sized_out(const char *call, void *out, size_t asked, void *all, size_t size, size_t least)
{
    size_t want = asked ? asked : size;
    if (want < least) return oobx__fail(NULL, OOBX_ERR_INVALID, "%s: struct_size %zu is too small", call, want);
    size_t n = want < size ? want : size;
    memcpy(all, &n, sizeof(n));
    memcpy(out, all, n);
    return 0;
}

int oobx_comm_get_init_timings(oobx_comm_t c, oobx_init_timings_t *t)
{
    if (!c || !t) return oobx__fail(NULL, OOBX_ERR_INVALID, "oobx_comm_get_init_timings: NULL argument");
    oobx_init_timings_t all = c->timings;
    return sized_out("oobx_comm_get_init_timings", t, t->struct_size, &all, sizeof(all),
                     offsetof(oobx_init_timings_t, total) + sizeof(double));
}

int oobx_debug_coll_counts(oobx_comm_t c, oobx_coll_counts_t *t)
{
    if (!c || !t) return oobx__fail(NULL, OOBX_ERR_INVALID, "oobx_debug_coll_counts: NULL argument");
    oobx_coll_counts_t all = {0};
    pthread_mutex_lock(&c->v.ep->lock);
    all.direct = c->v.ep->direct.calls;
    all.direct_fallbacks = c->v.ep->direct.fallbacks;
    all.node = c->v.ep->direct.node;
    all.node_barrier = c->v.ep->direct.node_barrier;
    all.direct_skipped = c->v.ep->direct.skipped;
    all.direct_bcast = c->v.ep->direct.bcasts;
    all.direct_bcast_fallbacks = c->v.ep->direct.bcast_fallbacks;
    all.direct_staged = c->v.ep->direct.staged;
    all.node_fresh = c->v.ep->direct.node_fresh;
    pthread_mutex_unlock(&c->v.ep->lock);
    pthread_mutex_lock(&c->v.ep->mem.lock);
    all.direct_mapped = c->v.ep->mem.mapped_reads;
    pthread_mutex_unlock(&c->v.ep->mem.lock);
    return sized_out("oobx_debug_coll_counts", t, t->struct_size, &all, sizeof(all),
                     offsetof(oobx_coll_counts_t, direct) + sizeof(all.direct));
}

/* ---- memory for large collectives within a host (mem.h) ---- */

int oobx_mem_alloc(oobx_comm_t c, size_t bytes, void **ptr)
{
    if (!c || !ptr) return oobx__fail(NULL, OOBX_ERR_INVALID, "oobx_mem_alloc: NULL argument");
    *ptr = NULL;
    char why[200];
    int rc = oobx__mem_alloc(&c->v.ep->mem, bytes, ptr, why, sizeof(why));
    if (rc == 0) return 0;
    return oobx__fail(&c->log, rc == -EINVAL ? OOBX_ERR_INVALID : rc == -ENOMEM ? OOBX_ERR_NOMEM : OOBX_ERR_SYSTEM,
                      "oobx_mem_alloc: %s", why);
}

int oobx_mem_free(oobx_comm_t c, void *ptr)
{
    if (!c) return oobx__fail(NULL, OOBX_ERR_INVALID, "oobx_mem_free: communicator is NULL");
    if (!ptr) return 0;
    if (oobx__mem_free(&c->v.ep->mem, ptr) != 0)
        return oobx__fail(&c->log, OOBX_ERR_INVALID,
                          "oobx_mem_free: %p is not memory that oobx_mem_alloc gave this communicator (or its "
                          "parent or children)", ptr);
    return 0;
}

int oobx_debug_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1; /* the directory's own fd */
}

/* ---- collectives ---- */

/* The group's next call number, and its direct-allgather skip count (NULL:
 * out of memory, no skipping). */
static uint32_t group_seq(struct oobx_comm *c, uint64_t gid, uint32_t **skip)
{
    *skip = NULL;
    for (int i = 0; i < c->ngseq; i++)
        if (c->gseq[i].gid == gid) {
            *skip = c->gseq[i].direct_skip;
            return c->gseq[i].seq++;
        }
    if (c->ngseq == c->capgseq) {
        int cap = c->capgseq ? c->capgseq * 2 : 8;
        void *n = realloc(c->gseq, (size_t)cap * sizeof(*c->gseq));
        if (!n) return 0;
        c->gseq = n;
        c->capgseq = cap;
    }
    c->gseq[c->ngseq].gid = gid;
    c->gseq[c->ngseq].seq = 1;
    c->gseq[c->ngseq].direct_skip[0] = c->gseq[c->ngseq].direct_skip[1] = 0;
    *skip = c->gseq[c->ngseq].direct_skip;
    c->ngseq++;
    return 0;
}

static int make_group(struct oobx_comm *c, const char *fn, const int *ranks, int n, coll_group_t *g)
{
    if (!ranks || n < 1 || n > c->v.nranks)
        return oobx__fail(&c->log, OOBX_ERR_INVALID, "%s: rank %d: %d ranks in the group (1..%d allowed, ranks not NULL)",
                         fn, c->v.rank, n, c->v.nranks);
    int me = -1;
    unsigned char *seen = calloc(((size_t)c->v.nranks + 7) / 8, 1);
    if (!seen) return oobx__fail(&c->log, OOBX_ERR_NOMEM, "%s: rank %d: out of memory", fn, c->v.rank);
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= c->v.nranks) {
            free(seen);
            return oobx__fail(&c->log, OOBX_ERR_INVALID, "%s: rank %d: group entry %d is rank %d, not in 0..%d", fn,
                             c->v.rank, i, ranks[i], c->v.nranks - 1);
        }
        unsigned char bit = (unsigned char)(1u << (ranks[i] & 7));
        if (seen[ranks[i] >> 3] & bit) {
            int first = 0;
            while (ranks[first] != ranks[i]) first++;
            free(seen);
            return oobx__fail(&c->log, OOBX_ERR_INVALID, "%s: rank %d: rank %d is in the group twice (entries %d and %d)",
                              fn, c->v.rank, ranks[i], first, i);
        }
        seen[ranks[i] >> 3] |= bit;
        if (ranks[i] == c->v.rank) me = i;
    }
    free(seen);
    if (me < 0)
        return oobx__fail(&c->log, OOBX_ERR_INVALID, "%s: rank %d is not in the group it was called with", fn, c->v.rank);
    /* as wide as a collective tag holds it (ep.h); 0 is the whole communicator */
    uint64_t gid = oobx__hash64(ranks, (size_t)n * sizeof(int), 0x67727570ull) & 0x3fffffull;
    if (gid == 0 || gid == OOBX_COLL_GID_LEADERS) gid = 1;
    uint32_t *skip;
    uint32_t seq = group_seq(c, gid, &skip);
    *g = (coll_group_t){.n = n, .me = me, .members = ranks, .gid = gid, .seq = seq, .direct_skip = skip};
    return 0;
}


#define COLL_ENTER(fn)                        \
    int rc = oobx__comm_check(c, fn);               \
    if (rc) return rc;                        \
    pthread_mutex_lock(&c->v.ep->lock)
#define COLL_LEAVE()                      \
    pthread_mutex_unlock(&c->v.ep->lock);   \
    if (rc) oobx__comm_flush_notices(c);    \
    return rc

int oobx_allgather(oobx_comm_t c, void *buf, size_t bpr)
{
    if (c && buf && node_allgather_fits(c, bpr)) {
        int rc = oobx__comm_check(c, "oobx_allgather");
        return rc ? rc : node_collective(c, buf, bpr, 0, NULL);
    }
    COLL_ENTER("oobx_allgather");
    if (!buf && bpr) rc = oobx__fail(&c->log, OOBX_ERR_INVALID, "oobx_allgather: rank %d: buf is NULL", c->v.rank);
    coll_group_t g = whole(c);
    if (rc == 0) rc = oobx__coll_allgather(&c->v, &g, buf, bpr, c->settings.allgather_algo);
    COLL_LEAVE();
}

int oobx_allgather_table(oobx_comm_t c, const void *mine, size_t bpr, const void **table)
{
    if (!c || !table || (!mine && bpr))
        return oobx__fail(c ? &c->log : NULL, OOBX_ERR_INVALID, "oobx_allgather_table: NULL argument");
    *table = NULL;
    int rc = oobx__comm_check(c, "oobx_allgather_table");
    if (rc) return rc;
    pthread_mutex_lock(&c->v.ep->lock);
    if (c->ntables == c->captables) {
        int cap = c->captables ? 2 * c->captables : 4;
        struct held_table *t = realloc(c->tables, (size_t)cap * sizeof(*t));
        if (t) {
            c->tables = t;
            c->captables = cap;
        }
    }
    int room = c->ntables < c->captables;
    pthread_mutex_unlock(&c->v.ep->lock);
    if (!room) return oobx__fail(&c->log, OOBX_ERR_NOMEM, "oobx_allgather_table: out of memory");
    struct held_table h = {.b = -1};
    if (node_allgather_fits(c, bpr)) {
        /* one table per host: the host's shared buffer, which this rank
         * leaves at its release */
        node_hold_t hold = {.mine = mine};
        rc = node_collective(c, NULL, bpr, 0, &hold);
        if (rc) return rc;
        h.table = hold.data;
        h.b = hold.b;
        h.k = hold.k;
    } else {
        size_t all = (size_t)c->v.nranks * (bpr ? bpr : 1);
        if (bpr && all / bpr != (size_t)c->v.nranks)
            return oobx__fail(&c->log, OOBX_ERR_INVALID, "oobx_allgather_table: %zu bytes per rank of %d ranks: too many",
                              bpr, c->v.nranks);
        h.own = malloc(all);
        if (!h.own) return oobx__fail(&c->log, OOBX_ERR_NOMEM, "oobx_allgather_table: out of memory for %zu bytes", all);
        if (bpr) memcpy((char *)h.own + (size_t)c->v.rank * bpr, mine, bpr);
        rc = oobx_allgather(c, h.own, bpr);
        if (rc) {
            free(h.own);
            return rc;
        }
        h.table = h.own;
    }
    pthread_mutex_lock(&c->v.ep->lock);
    c->tables[c->ntables++] = h;
    pthread_mutex_unlock(&c->v.ep->lock);
    *table = h.table;
    return 0;
}

/* Lets go of table i of c (under the endpoint's lock). */
static void table_drop(struct oobx_comm *c, int i)
{
    struct held_table h = c->tables[i];
    c->tables[i] = c->tables[--c->ntables];
    if (h.b >= 0) oobx__node_ag_leave(c->node.seg, h.b, h.k);
    free(h.own);
}

int oobx_allgather_table_release(oobx_comm_t c, const void *table)
{
    if (!c) return oobx__fail(NULL, OOBX_ERR_INVALID, "oobx_allgather_table_release: communicator is NULL");
    if (!table) return 0;
    pthread_mutex_lock(&c->v.ep->lock);
    for (int i = 0; i < c->ntables; i++) {
        if (c->tables[i].table != table) continue;
        table_drop(c, i);
        pthread_mutex_unlock(&c->v.ep->lock);
        return 0;
    }
    pthread_mutex_unlock(&c->v.ep->lock);
    return oobx__fail(&c->log, OOBX_ERR_INVALID,
                      "oobx_allgather_table_release: %p is no table that oobx_allgather_table gave this communicator "
                      "(or it was released already)",
                      table);
}

/* Above this many hosts the leaders' ring (one step a host) is slower than
 * the tree over all ranks: the node-aware barrier stops there. */
#define NODE_BARRIER_MAX_HOSTS 64

int oobx_barrier(oobx_comm_t c)
{
    if (c && node_path(c) && c->timings.hosts <= NODE_BARRIER_MAX_HOSTS) {
        /* no connection beyond those init made: the host's shared memory,
         * then the leaders' ring (the same answer on every rank) */
        int rc = oobx__comm_check(c, "oobx_barrier");
        return rc ? rc : node_collective(c, NULL, 0, 1, NULL);
    }
    COLL_ENTER("oobx_barrier");
    coll_group_t g = whole(c);
    rc = oobx__coll_barrier(&c->v, &g);
    COLL_LEAVE();
}

int oobx_bcast(oobx_comm_t c, int root, void *buf, size_t bytes)
{
    COLL_ENTER("oobx_bcast");
    if (root < 0 || root >= c->v.nranks)
        rc = oobx__fail(&c->log, OOBX_ERR_INVALID, "oobx_bcast: rank %d: root %d is not in 0..%d", c->v.rank, root,
                       c->v.nranks - 1);
    else if (!buf && bytes)
        rc = oobx__fail(&c->log, OOBX_ERR_INVALID, "oobx_bcast: rank %d: buf is NULL", c->v.rank);
    coll_group_t g = whole(c);
    if (rc == 0) rc = oobx__coll_bcast(&c->v, &g, root, buf, bytes);
    COLL_LEAVE();
}

int oobx_group_allgather(oobx_comm_t c, const int *ranks, int n, void *buf, size_t bpr)
{
    COLL_ENTER("oobx_group_allgather");
    coll_group_t g;
    rc = make_group(c, "oobx_group_allgather", ranks, n, &g);
    if (rc == 0 && !buf && bpr)
        rc = oobx__fail(&c->log, OOBX_ERR_INVALID, "oobx_group_allgather: rank %d: buf is NULL", c->v.rank);
    if (rc == 0) rc = oobx__coll_allgather(&c->v, &g, buf, bpr, c->settings.allgather_algo);
    COLL_LEAVE();
}

int oobx_group_barrier(oobx_comm_t c, const int *ranks, int n)
{
    COLL_ENTER("oobx_group_barrier");
    coll_group_t g;
    rc = make_group(c, "oobx_group_barrier", ranks, n, &g);
    if (rc == 0) rc = oobx__coll_barrier(&c->v, &g);
    COLL_LEAVE();
}

int oobx_group_bcast(oobx_comm_t c, const int *ranks, int n, int root_index, void *buf, size_t bytes)
{
    COLL_ENTER("oobx_group_bcast");
    coll_group_t g;
    rc = make_group(c, "oobx_group_bcast", ranks, n, &g);
    if (rc == 0 && (root_index < 0 || root_index >= n))
        rc = oobx__fail(&c->log, OOBX_ERR_INVALID, "oobx_group_bcast: rank %d: root index %d is not in 0..%d", c->v.rank,
                       root_index, n - 1);
    if (rc == 0 && !buf && bytes)
        rc = oobx__fail(&c->log, OOBX_ERR_INVALID, "oobx_group_bcast: rank %d: buf is NULL", c->v.rank);
    if (rc == 0) rc = oobx__coll_bcast(&c->v, &g, root_index, buf, bytes);
    COLL_LEAVE();
}

/* ---- split ---- */

typedef struct split_entry {
    int color, key, rank;
} split_entry_t;

static int split_cmp(const void *a, const void *b)
{
    const split_entry_t *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* The context of split number split_no's child of colour color. */
static uint64_t split_ctx(uint64_t parent, uint32_t split_no, int color)
{
    return oobx__mix64(oobx__mix64(parent, split_no + 1ull), (uint64_t)(uint32_t)color);
}

int oobx_comm_split(oobx_comm_t parent, int color, int key, oobx_comm_t *child)
{
    struct oobx_comm *c = parent;
    if (!child) return oobx__fail(NULL, OOBX_ERR_INVALID, "oobx_comm_split: child is NULL");
    COLL_ENTER("oobx_comm_split");
    int32_t *all = malloc((size_t)c->v.nranks * 2 * sizeof(int32_t));
    split_entry_t *mine = malloc((size_t)c->v.nranks * sizeof(*mine));
    struct oobx_comm *k = NULL;
    uint32_t split_no = c->split_seq++;
    if (!all || !mine) rc = oobx__fail(&c->log, OOBX_ERR_NOMEM, "out of memory");
    if (rc == 0) {
        all[2 * c->v.rank] = color < 0 ? -1 : color;
        all[2 * c->v.rank + 1] = key;
        coll_group_t g = whole(c);
        rc = oobx__coll_allgather(&c->v, &g, all, 2 * sizeof(int32_t), "auto");
    }
    int n = 0;
    if (rc == 0 && color >= 0) {
        for (int r = 0; r < c->v.nranks; r++)
            if (all[2 * r] == color) mine[n++] = (split_entry_t){color, all[2 * r + 1], r};
        qsort(mine, (size_t)n, sizeof(*mine), split_cmp);
        k = comm_alloc(&c->settings);
        if (k) k->ep_rank = malloc((size_t)n * sizeof(int));
        if (!k || !k->ep_rank) {
            rc = oobx__fail(&c->log, OOBX_ERR_NOMEM, "out of memory");
        } else {
            for (int i = 0; i < n; i++) {
                k->ep_rank[i] = oobx__ep_view_rank(&c->v, mine[i].rank);
                if (mine[i].rank == c->v.rank) k->v.rank = i;
            }
            k->v.nranks = n;
            k->v.ep = c->v.ep;
            c->v.ep->refs++;
            k->v.user_abort = c->v.user_abort;
            k->v.ep_rank = k->ep_rank;
            k->v.rank_note = " of the parent";
            k->v.ctx = split_ctx(c->v.ctx, split_no, color);
            snprintf(k->transport, sizeof(k->transport), "%s", c->transport);
            k->ncpu = c->ncpu;
            char prefix[96];
            snprintf(prefix, sizeof(prefix), "rank %d/%d (split %u color %d of rank %d)", k->v.rank, n, split_no, color,
                     c->v.rank);
            oobx__log_open(&k->log, &c->settings, prefix);
        }
    }
    /* members whose split succeeded may wait on this rank in the child:
     * their probe hears that it never joined, and why */
    if (rc != 0 && color >= 0)
        oobx__ep_ctx_gone(c->v.ep, split_ctx(c->v.ctx, split_no, color), oobx_last_error());
    pthread_mutex_unlock(&c->v.ep->lock);
    free(all);
    free(mine);
    if (rc != 0) {
        comm_free(k);
        return rc;
    }
    *child = k;
    return 0;
}

/* ---- abort and destroy ---- */

int oobx_comm_abort(oobx_comm_t c)
{
    if (!c) return oobx__fail(NULL, OOBX_ERR_INVALID, "oobx_comm_abort: communicator is NULL");
    /* under the lock, so that the sleeper either sees the flag or gets the wake-up */
    pthread_mutex_lock(&c->v.ep->lock);
    atomic_store(&c->aborted, 1);
    oobx__ep_wake(c->v.ep);
    oobx__node_wake(c->node.seg);
    pthread_cond_broadcast(&c->v.ep->cond);
    pthread_mutex_unlock(&c->v.ep->lock);
    return 0;
}

int oobx_comm_destroy(oobx_comm_t c)
{
    if (!c) return 0;
    uint64_t hosted = c->root_magic;
    pthread_mutex_lock(&c->v.ep->lock);
    node_tell_failure(c);
    int shared = c->v.ep->refs > 1;
    if (shared) oobx__ep_purge_ctx(c->v.ep, c->v.ctx);
    while (c->ntables) table_drop(c, c->ntables - 1);
    pthread_mutex_unlock(&c->v.ep->lock);
    comm_release_ep(c);
    comm_free(c);
    oobx__root_registry_reap(hosted, hosted ? 200 : 0);
    return 0;
}
