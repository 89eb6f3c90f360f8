#include "root.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "tp_table.h"
#include "util.h"
#include "wire.h"

/* ---- block formulas ---------------------------------------------------- */

int oobx__root_first_rank(int root, int nranks, int nroots)
{
    int per = nranks / nroots, extra = nranks % nroots;
    return root * per + (root < extra ? root : extra);
}

int oobx__root_of_rank(int rank, int nranks, int nroots)
{
    int per = nranks / nroots, extra = nranks % nroots;
    int big = extra * (per + 1); /* ranks held by the first `extra` roots, one more each */
    if (rank < big) return rank / (per + 1);
    return extra + (rank - big) / per;
}

int oobx__root_nranks(int root, int nranks, int nroots)
{
    int r = ((root % nroots) + nroots) % nroots;
    return nranks / nroots + (r < nranks % nroots ? 1 : 0);
}

int oobx__root_local_id(int rank, int root, int nranks, int nroots)
{
    int r = ((root % nroots) + nroots) % nroots;
    return rank - oobx__root_first_rank(r, nranks, nroots);
}

/* ---- unique id ------------------------------------------------------------ */

#define ROOT_ID_MARKER 0x4449584fu /* "OXID" */

void oobx__root_handle_encode(const root_handle_t *h, oobx_unique_id_t *id)
{
    unsigned char *p = (unsigned char *)id->internal;
    memset(id, 0, sizeof(*id));
    oobx__put_u32(p, ROOT_ID_MARKER);
    oobx__put_u32(p + 4, OOBX_WIRE_VERSION);
    oobx__put_u64(p + 8, h->magic);
    oobx__put_u16(p + 16, (uint16_t)h->addr.sa.sa_family);
    oobx__put_u16(p + 18, (uint16_t)oobx__sock_addr_port(&h->addr));
    if (h->addr.sa.sa_family == AF_INET6) {
        memcpy(p + 20, &h->addr.sin6.sin6_addr, 16);
        oobx__put_u32(p + 36, h->addr.sin6.sin6_scope_id);
    } else {
        memcpy(p + 20, &h->addr.sin.sin_addr, 4);
    }
    memcpy(p + 40, h->secret, OOBX_SECRET_BYTES);
}

int oobx__root_handle_decode(const oobx_unique_id_t *id, root_handle_t *h, char *why, size_t whylen)
{
    const unsigned char *p = (const unsigned char *)id->internal;
    int zero = 1;
    for (size_t i = 0; i < sizeof(id->internal); i++)
        if (p[i]) zero = 0;
    if (zero) {
        snprintf(why, whylen, "the unique id is all zeros: was it made by oobx_get_unique_id and given to every rank?");
        return OOBX_ERR_INVALID;
    }
    if (oobx__get_u32(p) != ROOT_ID_MARKER) {
        snprintf(why, whylen, "not an oobx unique id (marker 0x%08x)", oobx__get_u32(p));
        return OOBX_ERR_INVALID;
    }
    if (oobx__get_u32(p + 4) != OOBX_WIRE_VERSION) {
        snprintf(why, whylen, "unique id of protocol version %u; this library speaks %u", oobx__get_u32(p + 4),
                 OOBX_WIRE_VERSION);
        return OOBX_ERR_MISMATCH;
    }
    root_handle_t v;
    memset(&v, 0, sizeof(v));
    v.magic = oobx__get_u64(p + 8);
    int fam = oobx__get_u16(p + 16);
    int port = oobx__get_u16(p + 18);
    if (fam == AF_INET) {
        v.addr.sin.sin_family = AF_INET;
        memcpy(&v.addr.sin.sin_addr, p + 20, 4);
    } else if (fam == AF_INET6) {
        v.addr.sin6.sin6_family = AF_INET6;
        memcpy(&v.addr.sin6.sin6_addr, p + 20, 16);
        v.addr.sin6.sin6_scope_id = oobx__get_u32(p + 36);
    } else {
        snprintf(why, whylen, "unique id with address family %d", fam);
        return OOBX_ERR_INVALID;
    }
    if (port == 0) {
        snprintf(why, whylen, "unique id with port 0");
        return OOBX_ERR_INVALID;
    }
    oobx__sock_addr_set_port(&v.addr, port);
    memcpy(v.secret, p + 40, OOBX_SECRET_BYTES);
    *h = v;
    return OOBX_SUCCESS;
}

/* ---- the process-wide registry of root threads ------------------------------ */

typedef struct root_entry {
    struct root_entry *next;
    pthread_t thread;
    uint64_t magic;
    int finished; /* under registry_lock */
} root_entry_t;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t registry_cond = PTHREAD_COND_INITIALIZER;
static root_entry_t *registry_head;
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;

/* A forked child has none of its parent's threads: it must never join them. */
static void registry_forget_in_child(void)
{
    pthread_mutex_init(&registry_lock, NULL);
    pthread_cond_init(&registry_cond, NULL);
    registry_head = NULL;
}

static void registry_init(void)
{
    pthread_atfork(NULL, NULL, registry_forget_in_child);
}

static void registry_finish(root_entry_t *e)
{
    pthread_mutex_lock(&registry_lock);
    e->finished = 1;
    pthread_cond_broadcast(&registry_cond);
    pthread_mutex_unlock(&registry_lock);
}

void oobx__root_registry_reap(uint64_t magic, int wait_ms)
{
    pthread_once(&registry_once, registry_init);
    uint64_t deadline = oobx__deadline(wait_ms > 0 ? wait_ms : 0);
    pthread_mutex_lock(&registry_lock);
    for (;;) {
        int waiting = 0;
        for (root_entry_t **pp = &registry_head; *pp;) {
            root_entry_t *e = *pp;
            if (e->finished) {
                *pp = e->next;
                pthread_join(e->thread, NULL);
                free(e);
                continue;
            }
            if (wait_ms > 0 && (magic == 0 || e->magic == magic)) waiting = 1;
            pp = &e->next;
        }
        if (!waiting || oobx__now_ns() >= deadline) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&registry_cond, &registry_lock, &ts);
    }
    pthread_mutex_unlock(&registry_lock);
}

/* ---- the root thread ------------------------------------------------------------ */

enum { RC_HELLO, RC_REPORT, RC_BLOB, RC_WAIT, RC_SEND, RC_DONE };
/* what a rank sends first: its hello and its proof (auth.h) */
#define ROOT_HELLO_IN (OOBX_HELLO_BYTES + OOBX_PROOF_BYTES)

typedef struct root_conn {
    int fd;
    int state;
    unsigned char in[OOBX_HELLO_BYTES + OOBX_PROOF_BYTES + OOBX_REPORT_BYTES + OOBX_ADDR_MAX];
    size_t have, want;
    unsigned char *out;
    size_t out_len, out_off;
    uint64_t hello_deadline;
    int hello_type;
    int authed;        /* the rank proved the secret: answers carry the root's proof */
    int withdrawn;     /* it sent a withdraw notice (in[]) while waiting for its answer */
    oobx_auth_t auth;
    oobx_report_t rep;
    int src;           /* its source address's slot in src_tab while it has not proved the secret, else -1 */
    char peer[96];
} root_conn_t;

#define ROOT_FDS_RESERVED 65536 /* descriptors a root's process holds room for (capped by its limit) */
/* A rank waiting for its answer that gives up (another root refused it)
 * says why before it closes: u32 this marker, u32 the text's length (at
 * most OOBX_REPLY_TEXT_MAX), i32 the origin that refusal named (-1: none),
 * the text. */
#define ROOT_WITHDRAW_MAGIC 0x4457584fu /* "OXWD" */
#define ROOT_WITHDRAW_HDR 12

/* Connections that have not proved the secret are capped, per source
 * address and in all, so that a flood of them (each holds a descriptor and
 * a report's buffer) cannot exhaust the root: over the cap a new
 * connection is closed before its challenge, and a rank that sees that
 * connects again, later (report_to). The others keep their 10 s. */
#define ROOT_SRC_SLOTS 512
#define ROOT_UNPROVED_SRC_MIN 1024 /* per source, or twice the ranks this root serves if more */
#define ROOT_UNPROVED_MAX 8192     /* all sources together, or the per-source cap if more */
typedef struct root_src {
    uint64_t key; /* a hash of the address without its port; 0: free */
    int n;        /* its connections without proof */
} root_src_t;

typedef struct root_state {
    root_entry_t *entry;
    int listen_fd;
    uint64_t magic;
    unsigned char secret[OOBX_SECRET_BYTES];
    uint64_t deadline;
    int ranks_bound; /* deadline comes from the reports (the first one set it) */
    oobx_log_t log;
    oobx_ratelimit_t stray_rl;
    char name[96];
    /* learnt from the first valid report */
    int nranks, nroots, iroot, n2send, nrecv;
    uint32_t tpid;
    int first_reporter;
    unsigned char **info;  /* nrecv blobs (NULL: not in yet) */
    uint32_t *info_len;
    int *waiting;          /* nrecv: index of the conn awaiting its answer, -1 */
    char *replied;
    int nreplied, nin;
    root_conn_t *conns;
    int nconns, capconns;
    uint64_t t_start, t_first, t_all;
    int node;        /* -1: not known yet; 0: flat reports; 1: node-aware (both answer once the block is in) */
    char dead_text[OOBX_REPLY_TEXT_MAX]; /* what all are told: a rank died or gave up before its answer, or the job was refused (job_refused) */
    int dead_status;                       /* its status: OOBX_ERR_REMOTE, or OOBX_ERR_MISMATCH (job_refused) */
    int dead_origin;                       /* the rank that died or gave up; -1: the job was refused */
    uint64_t epoch;  /* node-aware: random, names this run's group segments */
    root_src_t src_tab[ROOT_SRC_SLOTS];
    int unproved;    /* connections without proof, all sources */
    uint64_t shed;   /* connections closed for the caps */
} root_state_t;

/* Its connections without proof no longer count against their source. */
static void conn_proved(root_state_t *st, root_conn_t *c)
{
    if (c->src < 0) return;
    st->src_tab[c->src].n--;
    st->unproved--;
    c->src = -1;
}

static void conn_close(root_state_t *st, int i)
{
    root_conn_t *c = &st->conns[i];
    conn_proved(st, c); /* gone: it counts no more */
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    free(c->out);
    c->out = NULL;
    c->state = RC_DONE;
}

/* Queues a reply on connection i and tries to send it at once. */
static void conn_reply(root_state_t *st, int i, int status, int origin, const void *data, size_t len)
{
    root_conn_t *c = &st->conns[i];
    oobx_reply_t r = {.status = status, .len = (uint32_t)len, .origin = status ? origin : -1};
    /* an answer proves the root to the rank; an error is plain text (the rank may not have proved itself) */
    size_t mac = status == 0 && c->authed ? OOBX_MAC_BYTES : 0;
    c->out = malloc(OOBX_REPLY_BYTES + mac + len);
    if (!c->out) {
        conn_close(st, i);
        return;
    }
    oobx__reply_encode(&r, c->out);
    if (mac) oobx__auth_mac(st->secret, 'A', &c->auth, c->out + OOBX_REPLY_BYTES);
    if (len) memcpy(c->out + OOBX_REPLY_BYTES + mac, data, len);
    c->out_len = OOBX_REPLY_BYTES + mac + len;
    c->out_off = 0;
    c->state = RC_SEND;
    ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) c->out_off = (size_t)n;
    if (c->out_off == c->out_len) conn_close(st, i);
    else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        OOBX_WARN(&st->log, "root %s: reply to %s failed: %s", st->name, c->peer, strerror(errno));
        conn_close(st, i);
    }
}

static void conn_error(root_state_t *st, int i, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void conn_error(root_state_t *st, int i, int status, const char *fmt, ...)
{
    char text[OOBX_REPLY_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    OOBX_WARN(&st->log, "root %s: %s", st->name, text);
    conn_reply(st, i, status, -1, text, strlen(text));
}

/* Answers local (status 0 with data, or an error text) on its connection, if
 * it still waits, and counts it as answered. */
static void answer_with(root_state_t *st, int local, int status, int origin, const void *data, size_t len)
{
    int ci = st->waiting[local];
    st->waiting[local] = -1;
    if (!st->replied[local]) {
        st->replied[local] = 1;
        if (local < st->n2send) st->nreplied++; /* the extra reporter is not one of the block's */
    }
    if (ci >= 0 && st->conns[ci].fd >= 0) conn_reply(st, ci, status, origin, data, len);
}

static void answer(root_state_t *st, int local, int next)
{
    answer_with(st, local, 0, -1, st->info[next], st->info_len[next]);
}

static int next_of(const root_state_t *st, int local)
{
    return (local + 1) % st->nrecv;
}

/* The whole block is in (flat): each rank gets its successor's card, the
 * block's last rank the next block's first rank's (its extra report, which
 * gets an acknowledgement) when there are several roots. */
static void answer_ring(root_state_t *st)
{
    for (int k = 0; k < st->n2send; k++) answer(st, k, next_of(st, k));
    if (st->nrecv > st->n2send) answer_with(st, st->n2send, 0, -1, NULL, 0);
}

/* ---- node-aware answers ---- */

/* The core's card header (comm.c): u16 magic, u16 CPUs, u16 the launcher's
 * local rank + 1, u16 its local size (0 each: unknown), u64 host id. */
#define ROOT_CARD_HDR 16
#define ROOT_CARD_MAGIC 0x4f43u

typedef struct root_member {
    uint64_t host;
    int local;         /* index in the block */
    int lrank, lsize;  /* the launcher's local rank and size (-1, 0: unknown) */
} root_member_t;

static int member_cmp(const void *a, const void *b)
{
    const root_member_t *x = a, *y = b;
    if (x->host != y->host) return x->host < y->host ? -1 : 1;
    return x->local - y->local;
}

/* The members m[i..j) share a host id. They do not share a node when their
 * launcher says so: two of them have the same local rank, or one's local size
 * is smaller than the group (a group may be smaller than the launcher's
 * count: a host split between two roots' blocks). 1 then, with why. */
static int launcher_splits(const root_member_t *m, int i, int j, int *scratch, char *why, size_t whylen)
{
    int n = 0;
    for (int k = i; k < j; k++) {
        if (m[k].lsize > 0 && m[k].lsize < j - i) {
            snprintf(why, whylen, "one's launcher counts %d ranks on its host", m[k].lsize);
            return 1;
        }
        if (m[k].lrank >= 0) scratch[n++] = m[k].lrank;
    }
    qsort(scratch, (size_t)n, sizeof(int), oobx__int_cmp);
    for (int k = 1; k < n; k++)
        if (scratch[k] == scratch[k - 1]) {
            snprintf(why, whylen, "two have launcher local rank %d", scratch[k]);
            return 1;
        }
    return 0;
}

/* After a rank of the block died or gave up, or the job was refused: local k
 * gets dead_text (and counts as answered). */
static void answer_error(root_state_t *st, int k)
{
    answer_with(st, k, st->dead_status ? st->dead_status : OOBX_ERR_REMOTE, st->dead_origin, st->dead_text, strlen(st->dead_text));
}

/* Every rank that waits for its answer gets dead_text. */
static void answer_error_all(root_state_t *st)
{
    for (int k = 0; k < st->nrecv; k++)
        if (st->waiting[k] >= 0) answer_error(st, k);
}

/* An authenticated rank of this job disagrees with the first reporter on
 * what the whole job must share (its size, transport, node-aware mode):
 * the job cannot start, so the ranks that wait and every later reporter
 * hear the same reason at once, not only the rank refused. */
static void job_refused(root_state_t *st, int i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void job_refused(root_state_t *st, int i, const char *fmt, ...)
{
    char text[OOBX_REPLY_TEXT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    conn_error(st, i, OOBX_ERR_MISMATCH, "%s", text);
    if (st->dead_text[0] || !st->waiting) return;
    snprintf(st->dead_text, sizeof(st->dead_text), "%s", text);
    st->dead_status = OOBX_ERR_MISMATCH;
    st->dead_origin = -1;
    answer_error_all(st);
}

/* The whole block is in: groups by host id, each with its leader (lowest
 * rank); leaders form a ring in rank order, stitched to the next block's
 * first rank (a leader there) through the extra report. Every rank gets its
 * placement; the extra reporter learns this block's last leader. */
static void answer_groups(root_state_t *st)
{
    int n = st->n2send;
    int first = oobx__root_first_rank(st->iroot, st->nranks, st->nroots);
    root_member_t *m = malloc((size_t)n * sizeof(*m));
    int *group_of = malloc((size_t)n * sizeof(int));      /* local -> index of its group's first entry in m */
    int *leaders = malloc((size_t)n * sizeof(int));       /* locals of leaders, in rank order */
    unsigned char *buf = malloc(OOBX_PLACE_MAX(n));
    if (!m || !group_of || !leaders || !buf) {
        for (int k = 0; k < st->nrecv; k++)
            if (st->waiting[k] >= 0) conn_error(st, st->waiting[k], OOBX_ERR_NOMEM, "root %s: out of memory", st->name);
        free(m), free(group_of), free(leaders), free(buf);
        return;
    }
    for (int k = 0; k < n; k++) {
        m[k].host = oobx__get_u64(st->info[k] + 8);
        m[k].local = k;
        m[k].lrank = (int)oobx__get_u16(st->info[k] + 4) - 1;
        m[k].lsize = oobx__get_u16(st->info[k] + 6);
    }
    qsort(m, (size_t)n, sizeof(*m), member_cmp);
    /* ranks that share a host id (the host name) but, by their launcher, not a
     * node (containers with one host name) cannot share memory: each is a
     * host of its own */
    int nsplit = 0, split_first = -1, split_n = 0;
    char split_why[96] = "", why[96];
    for (int k = 0; k < n;) {
        int j = k;
        while (j < n && m[j].host == m[k].host) j++;
        if (j - k > 1 && launcher_splits(m, k, j, group_of, why, sizeof(why))) {
            if (!nsplit) {
                split_first = first + m[k].local;
                split_n = j - k;
                snprintf(split_why, sizeof(split_why), "%s", why);
            }
            nsplit++;
            for (int q = k; q < j; q++) m[q].host = oobx__hash64(&m[q].host, sizeof(m[q].host), 0x73706c74ull + (uint64_t)m[q].local);
        }
        k = j;
    }
    if (nsplit) {
        qsort(m, (size_t)n, sizeof(*m), member_cmp);
        OOBX_WARN(&st->log, "root %s: %d ranks with rank %d share a host id, but their launcher puts them on "
                  "different nodes (%s)%s: they will not share memory; set OOBX_HOST_ID to a name per node", st->name,
                  split_n, split_first, split_why, nsplit > 1 ? "; so do other ranks" : "");
    }
    int nleaders = 0;
    for (int k = 0; k < n;) {
        int j = k;
        while (j < n && m[j].host == m[k].host) group_of[m[j++].local] = k;
        k = j;
    }
    for (int k = 0; k < n; k++)
        if (m[group_of[k]].local == k) leaders[nleaders++] = k; /* in rank order: k goes up */
    for (int li = 0; li < nleaders; li++) {
        int lead = leaders[li], g = group_of[lead];
        int size = 0;
        while (g + size < n && m[g + size].host == m[g].host) size++;
        int next_local, prev_rank;
        if (li + 1 < nleaders) next_local = leaders[li + 1];
        else next_local = st->nroots > 1 ? st->n2send /* the next block's first rank */ : leaders[0];
        if (li > 0) prev_rank = first + leaders[li - 1];
        else prev_rank = st->nroots > 1 ? -1 : first + leaders[nleaders - 1];
        int next_rank = next_local == st->n2send ? oobx__root_first_rank((st->iroot + 1) % st->nroots, st->nranks,
                                                                         st->nroots)
                                                 : first + next_local;
        for (int k = 0; k < size; k++) {
            int loc = m[g + k].local;
            oobx_place_t pl = {.epoch = st->epoch, .host = m[g].host, .local_index = k, .local_size = size,
                               .leader = first + lead, .next_leader = -1, .prev_leader = -1};
            size_t len = OOBX_PLACE_BYTES;
            if (k == 0) {
                pl.next_leader = next_rank;
                pl.prev_leader = prev_rank;
                pl.nmembers = (uint32_t)size;
                pl.next_len = st->info_len[next_local];
                for (int q = 0; q < size; q++) oobx__put_u32(buf + len + 4 * (size_t)q, (uint32_t)(first + m[g + q].local));
                len += 4 * (size_t)size;
                memcpy(buf + len, st->info[next_local], pl.next_len);
                len += pl.next_len;
            }
            oobx__place_encode(&pl, buf);
            answer_with(st, loc, 0, -1, buf, len);
        }
    }
    if (st->nroots > 1) {
        /* the next block's first rank: its previous leader is this block's last */
        unsigned char last[4];
        oobx__put_u32(last, (uint32_t)(first + leaders[nleaders - 1]));
        answer_with(st, st->n2send, 0, -1, last, sizeof(last));
    }
    OOBX_DEBUG(&st->log, "root %s: %d ranks in %d groups answered", st->name, n, nleaders);
    free(m), free(group_of), free(leaders), free(buf);
}

static void take_report(root_state_t *st, int i)
{
    root_conn_t *c = &st->conns[i];
    const oobx_report_t *r = &c->rep;
    if (st->nranks == 0) {
        st->nranks = r->nranks;
        st->nroots = r->nroots;
        st->iroot = r->iroot;
        st->tpid = r->tpid;
        /* (an extra reporter counts itself one past the block's last rank,
         * rank 0 as nranks: named as the rank it is) */
        st->first_reporter = r->nranks > 0 ? r->rank % r->nranks : r->rank;
        st->n2send = oobx__root_nranks(r->iroot, r->nranks, r->nroots);
        st->nrecv = st->n2send + (r->nroots > 1 ? 1 : 0);
        st->info = calloc((size_t)st->nrecv, sizeof(*st->info));
        st->info_len = calloc((size_t)st->nrecv, sizeof(*st->info_len));
        st->waiting = malloc((size_t)st->nrecv * sizeof(*st->waiting));
        st->replied = calloc((size_t)st->nrecv, 1);
        if (!st->info || !st->info_len || !st->waiting || !st->replied) {
            conn_error(st, i, OOBX_ERR_NOMEM, "root %s: out of memory for %d ranks", st->name, st->nrecv);
            st->nranks = 0;
            return;
        }
        for (int k = 0; k < st->nrecv; k++) st->waiting[k] = -1;
        st->t_first = oobx__now_ns();
    }
    if (r->nranks != st->nranks || r->nroots != st->nroots || r->iroot != st->iroot) {
        job_refused(st, i,
                   "rank %d (%s) reports nranks %d, nroots %d, root %d, but rank %d reported nranks %d, nroots %d, "
                   "root %d: the ranks disagree on the job size or the unique ids",
                   r->rank, c->peer, r->nranks, r->nroots, r->iroot, st->first_reporter, st->nranks, st->nroots,
                   st->iroot);
        return;
    }
    if (r->tpid != st->tpid) {
        const oobx__tp_entry_t *theirs = oobx__tp_by_id(r->tpid), *ours = oobx__tp_by_id(st->tpid);
        job_refused(st, i,
                   "rank %d (%s) uses the %s transport, rank %d uses %s: set OOBX_TRANSPORT the same on every rank",
                   r->rank % st->nranks, c->peer, theirs ? theirs->name : "?", st->first_reporter, ours ? ours->name : "?");
        return;
    }
    int node = c->hello_type == OOBX_HELLO_ROOT_NODE || c->hello_type == OOBX_HELLO_ROOT_NODE_EXTRA;
    if (st->node < 0) st->node = node;
    if (st->node != node) {
        job_refused(st, i,
                   "rank %d (%s) %s node-aware, rank %d %s: set OOBX_NODE_AWARE and OOBX_NODE_AWARE_MIN the same on every rank", r->rank % st->nranks,
                   c->peer, node ? "is" : "is not", st->first_reporter, st->node ? "is" : "is not");
        return;
    }
    if (node && (r->blob_len < ROOT_CARD_HDR || oobx__get_u16(c->in + OOBX_REPORT_BYTES) != ROOT_CARD_MAGIC)) {
        conn_error(st, i, OOBX_ERR_PROTOCOL, "rank %d (%s) reports a node-aware card of %u bytes without its header",
                   r->rank, c->peer, r->blob_len);
        return;
    }
    int local = oobx__root_local_id(r->rank, st->iroot, st->nranks, st->nroots);
    int extra = c->hello_type == OOBX_HELLO_ROOT_EXTRA || c->hello_type == OOBX_HELLO_ROOT_NODE_EXTRA;
    if (local < 0 || local >= st->nrecv || (extra != (local == st->n2send))) {
        conn_error(st, i, OOBX_ERR_MISMATCH,
                   "rank %d (%s) reported to root %d, which serves ranks %d..%d: wrong root for this rank", r->rank,
                   c->peer, st->iroot, oobx__root_first_rank(st->iroot, st->nranks, st->nroots),
                   oobx__root_first_rank(st->iroot, st->nranks, st->nroots) + st->n2send - 1);
        return;
    }
    if (st->info[local]) {
        conn_error(st, i, OOBX_ERR_MISMATCH, "rank %d (%s) has already checked in with root %d: two processes use rank %d",
                   r->rank, c->peer, st->iroot, r->rank);
        return;
    }
    {
        /* give up a tenth (at most 2 s) before this rank would, so that the
         * list of ranks that never checked in reaches it. The ranks' budget
         * (oobx_config_t.timeout_ms or their OOBX_TIMEOUT_MS) rules, not the
         * one the root was started with: the first report replaces it, later
         * ones can only shorten it. */
        uint64_t by = UINT64_MAX;
        if (r->wait_ms != OOBX_WAIT_FOREVER) {
            uint32_t margin = OOBX_MIN(r->wait_ms / 10, 2000u);
            by = oobx__now_ns() + (uint64_t)(r->wait_ms - margin) * 1000000ull;
        }
        if (!st->ranks_bound) st->deadline = by;
        else if (by < st->deadline) st->deadline = by;
        st->ranks_bound = 1;
    }
    st->info[local] = malloc(r->blob_len);
    if (!st->info[local]) {
        conn_error(st, i, OOBX_ERR_NOMEM, "root %s: out of memory", st->name);
        return;
    }
    memcpy(st->info[local], c->in + OOBX_REPORT_BYTES, r->blob_len);
    st->info_len[local] = r->blob_len;
    st->nin++;
    OOBX_TRACE(&st->log, "root %s: rank %d checked in (%d/%d)", st->name, r->rank, st->nin, st->nrecv);

    st->waiting[local] = i;
    c->state = RC_WAIT;
    if (st->dead_text[0]) {
        /* a rank of the block gave up or died, or the job was refused
         * (job_refused): this rank hears why */
        answer_error(st, local);
        return;
    }
    /* every answer waits for the whole block: node-aware groups need it, and
     * so a refusal (job_refused) or a rank that gives up reaches every rank
     * of the block before any goes on to its ring, where a peer that is gone
     * may not be noticed before the timeout (UCX) */
    if (st->nin == st->nrecv) {
        st->t_all = oobx__now_ns();
        if (st->node) answer_groups(st);
        else answer_ring(st);
    }
}

/* Reads what is there; returns after the connection changes state or has no more data. */
static void conn_read(root_state_t *st, int i)
{
    root_conn_t *c = &st->conns[i];
    char why[256];
    for (;;) {
        if (c->state == RC_HELLO) c->want = ROOT_HELLO_IN;
        else if (c->state == RC_REPORT) c->want = ROOT_HELLO_IN + OOBX_REPORT_BYTES;
        else if (c->state == RC_BLOB) c->want = ROOT_HELLO_IN + OOBX_REPORT_BYTES + c->rep.blob_len;
        else {
            /* waiting for its answer: a client may only withdraw (saying why)
             * or close. c->in holds what came of the notice (the report was taken): its
             * header first, then as much text as it says; after it, a close */
            unsigned char scratch[1];
            size_t room = c->have < ROOT_WITHDRAW_HDR ? ROOT_WITHDRAW_HDR - c->have
                                                      : ROOT_WITHDRAW_HDR + oobx__get_u32(c->in + 4) - c->have;
            unsigned char *to = c->withdrawn ? scratch : c->in + c->have;
            ssize_t n = recv(c->fd, to, c->withdrawn ? sizeof(scratch) : room, MSG_DONTWAIT);
            if (n > 0) {
                if (!c->withdrawn) c->have += (size_t)n;
                uint32_t tl = c->have >= ROOT_WITHDRAW_HDR ? oobx__get_u32(c->in + 4) : 0;
                int32_t said_origin = c->have >= ROOT_WITHDRAW_HDR ? (int32_t)oobx__get_u32(c->in + 8) : -1;
                if (c->withdrawn || (c->have >= 4 && oobx__get_u32(c->in) != ROOT_WITHDRAW_MAGIC) ||
                    tl > OOBX_REPLY_TEXT_MAX || said_origin < -1 || said_origin >= st->nranks) {
                    if (oobx__ratelimit_ok(&st->stray_rl))
                        OOBX_WARN(&st->log, "root %s: %s sent bytes while waiting; dropped", st->name, c->peer);
                    for (int k = 0; k < st->nrecv; k++)
                        if (st->waiting[k] == i) st->waiting[k] = -1;
                    conn_close(st, i);
                    return;
                }
                if (c->have < ROOT_WITHDRAW_HDR || c->have < ROOT_WITHDRAW_HDR + tl) continue;
                c->withdrawn = 1;
                continue; /* the close follows */
            }
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                OOBX_DEBUG(&st->log, "root %s: %s closed before its answer", st->name, c->peer);
                for (int k = 0; k < st->nrecv; k++)
                    if (st->waiting[k] == i) st->waiting[k] = -1;
                int gone = c->rep.rank, said_origin = -1;
                char peer[sizeof(c->peer)], said[OOBX_REPLY_TEXT_MAX + 1] = "";
                snprintf(peer, sizeof(peer), "%s", c->peer);
                if (c->withdrawn) {
                    uint32_t tl = oobx__get_u32(c->in + 4);
                    said_origin = (int32_t)oobx__get_u32(c->in + 8);
                    memcpy(said, c->in + ROOT_WITHDRAW_HDR, tl);
                    said[tl] = '\0';
                    for (uint32_t k = 0; k < tl; k++)
                        if ((unsigned char)said[k] < 0x20 || (unsigned char)said[k] > 0x7e) said[k] = '?';
                }
                conn_close(st, i);
                if (!st->dead_text[0]) {
                    /* the others would wait for its card in vain; they
                     * and every later reporter hear why at once: the reason the
                     * rank gave when it withdrew (the origin of the failure), or
                     * that it went without a word */
                    /* (an extra reporter counts itself one past the block's
                     * last rank: rank 0 as nranks; named by its own number) */
                    int who = st->nranks > 0 ? gone % st->nranks : gone;
                    /* the origin: the one its refusal named, else itself */
                    st->dead_origin = said_origin >= 0 ? said_origin : who;
                    if (said[0])
                        snprintf(st->dead_text, sizeof(st->dead_text), "%.900s (passed on by rank %d, which gave up)",
                                 said, who);
                    else
                        snprintf(st->dead_text, sizeof(st->dead_text),
                                 "rank %d (%s) closed its connection to root %d (%s) before the answer: did it exit or "
                                 "fail?",
                                 who, peer, st->iroot, st->name);
                    OOBX_WARN(&st->log, "%s", st->dead_text);
                    int gl = oobx__root_local_id(gone, st->iroot, st->nranks, st->nroots);
                    if (gl >= 0 && gl < st->nrecv) answer_error(st, gl);
                    answer_error_all(st);
                }
            }
            return;
        }
        ssize_t n = recv(c->fd, c->in + c->have, c->want - c->have, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            if (c->have && oobx__ratelimit_ok(&st->stray_rl))
                OOBX_WARN(&st->log, "root %s: %s closed after %zu bytes of its report; dropped", st->name, c->peer,
                          c->have);
            conn_close(st, i);
            return;
        }
        if (n < 0) return;
        c->have += (size_t)n;
        if (c->have < c->want) return;
        if (c->state == RC_HELLO) {
            oobx_hello_t h;
            int rc = oobx__hello_decode(c->in, c->have, &h, why, sizeof(why));
            if (rc == 0 && h.type != OOBX_HELLO_ROOT && h.type != OOBX_HELLO_ROOT_EXTRA && h.type != OOBX_HELLO_ROOT_NODE &&
                h.type != OOBX_HELLO_ROOT_NODE_EXTRA) {
                rc = OOBX_ERR_PROTOCOL;
                snprintf(why, sizeof(why), "connection type %u is not for a root", h.type);
            }
            if (rc == 0) {
                memcpy(c->auth.hello, c->in, OOBX_HELLO_BYTES);
                memcpy(c->auth.nonce_c, c->in + OOBX_HELLO_BYTES, OOBX_NONCE_BYTES);
            }
            /* neither the root's magic nor anything of the secret goes to a peer that has not proved it */
            if (rc == 0 && (h.comm_magic != st->magic ||
                            !oobx__auth_check(st->secret, 'C', &c->auth, c->in + OOBX_HELLO_BYTES + OOBX_NONCE_BYTES))) {
                int other = h.comm_magic != st->magic;
                if (oobx__ratelimit_ok(&st->stray_rl))
                    OOBX_WARN(&st->log, "root %s: %s claims rank %d but %s; refused", st->name, c->peer, h.rank,
                              other ? "belongs to another job" : "does not prove this job's secret");
                snprintf(why, sizeof(why),
                         "not authenticated: %s (a wrong unique id or OOBX_JOB_KEY, or a second job on the same root "
                         "address)",
                         other ? "the connection is of another job" : "the connection does not prove this job's secret");
                conn_reply(st, i, OOBX_ERR_MISMATCH, -1, why, strlen(why));
                return;
            }
            if (rc != 0) {
                if (oobx__ratelimit_ok(&st->stray_rl))
                    OOBX_WARN(&st->log, "root %s: dropped %s: %s", st->name, c->peer, why);
                if (rc == OOBX_ERR_MISMATCH) conn_reply(st, i, rc, -1, why, strlen(why));
                else conn_close(st, i);
                return;
            }
            c->hello_type = h.type;
            c->authed = 1;
            conn_proved(st, c);
            c->state = RC_REPORT;
        } else if (c->state == RC_REPORT) {
            int rc = oobx__report_decode(c->in + ROOT_HELLO_IN, OOBX_REPORT_BYTES, &c->rep, why, sizeof(why));
            if (rc != 0) {
                conn_error(st, i, OOBX_ERR_PROTOCOL, "%s: %s", c->peer, why);
                return;
            }
            c->state = RC_BLOB;
        } else {
            memmove(c->in, c->in + ROOT_HELLO_IN, OOBX_REPORT_BYTES + c->rep.blob_len);
            take_report(st, i);
            c->have = 0; /* the report was copied: in[] may take a withdraw notice */
            return;
        }
    }
}

static void conn_write(root_state_t *st, int i)
{
    root_conn_t *c = &st->conns[i];
    ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) c->out_off += (size_t)n;
    if (c->out_off == c->out_len || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) conn_close(st, i);
}

/* The slot of a source address (its port left out); a full table shares
 * its last slot among the sources it has no room for. */
static int src_slot(root_state_t *st, const oobx_sockaddr_t *a)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const unsigned char *p = NULL;
    size_t len = 0;
    if (a->sa.sa_family == AF_INET) p = (const unsigned char *)&a->sin.sin_addr, len = 4;
    else if (a->sa.sa_family == AF_INET6) p = (const unsigned char *)&a->sin6.sin6_addr, len = 16;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    if (h == 0) h = 1;
    for (int k = 0; k < ROOT_SRC_SLOTS - 1; k++) {
        root_src_t *e = &st->src_tab[(h + (uint64_t)k) % (ROOT_SRC_SLOTS - 1)];
        if (e->key == h) return (int)(e - st->src_tab);
        if (e->key == 0 || e->n == 0) {
            e->key = h;
            return (int)(e - st->src_tab);
        }
    }
    return ROOT_SRC_SLOTS - 1;
}

static int unproved_cap(const root_state_t *st)
{
    int twice = st->nrecv > 0 ? 2 * st->nrecv : 0;
    return twice > ROOT_UNPROVED_SRC_MIN ? twice : ROOT_UNPROVED_SRC_MIN;
}

/* Over a cap: closes the oldest connection without a report that has been
 * silent past its 10 s (of source slot src, or of any source when src < 0),
 * to make room for a new one. Silent connections stay as long as there is
 * room: a rank of an oversubscribed host may take longer than 10 s from its
 * connect to its report (10,240 ranks on 2 cores: 641 of them at one root),
 * and only strays that keep a cap full must go. 1 when one was closed. */
static int evict_silent(root_state_t *st, int src, uint64_t now)
{
    int oldest = -1;
    for (int i = 0; i < st->nconns; i++) {
        const root_conn_t *c = &st->conns[i];
        if (c->fd < 0 || c->state > RC_BLOB || c->src < 0 || now < c->hello_deadline || (src >= 0 && c->src != src))
            continue;
        if (oldest < 0 || c->hello_deadline < st->conns[oldest].hello_deadline) oldest = i;
    }
    if (oldest < 0) return 0;
    if (oobx__ratelimit_ok(&st->stray_rl))
        OOBX_WARN(&st->log,
                  "root %s: %s sent no complete report within 10 s; dropped to make room (%d connections without "
                  "proof, %d of %d reports in)",
                  st->name, st->conns[oldest].peer, st->unproved, st->nin, st->nrecv);
    conn_close(st, oldest);
    return 1;
}

static void accept_all(root_state_t *st)
{
    for (;;) {
        oobx_sockaddr_t peer;
        socklen_t sl = sizeof(peer);
        int fd = accept4(st->listen_fd, &peer.sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                if (oobx__ratelimit_ok(&st->stray_rl))
                    OOBX_WARN(&st->log, "root %s: out of file descriptors; raise ulimit -n", st->name);
            }
            return;
        }
        if (st->nconns == st->capconns) {
            int cap = st->capconns ? st->capconns * 2 : 64;
            root_conn_t *nc = realloc(st->conns, (size_t)cap * sizeof(*nc));
            if (!nc) {
                close(fd);
                return;
            }
            st->conns = nc;
            st->capconns = cap;
        }
        int slot = src_slot(st, &peer), cap = unproved_cap(st);
        int all_cap = cap > ROOT_UNPROVED_MAX ? cap : ROOT_UNPROVED_MAX;
        int from_one = st->src_tab[slot].n >= cap;
        if ((from_one || st->unproved >= all_cap) && evict_silent(st, from_one ? slot : -1, oobx__now_ns()))
            from_one = st->src_tab[slot].n >= cap;
        if (from_one || st->unproved >= all_cap) {
            /* closed before its challenge: a rank connects again */
            close(fd);
            if (st->shed++ == 0 || oobx__ratelimit_ok(&st->stray_rl)) {
                char who[96];
                oobx__sock_addr_format(&peer, who, sizeof(who));
                OOBX_WARN(&st->log,
                          "root %s: %d connections without this job's proof %s; closing new ones (%s; %llu so far) "
                          "until they prove it or time out",
                          st->name, from_one ? st->src_tab[slot].n : st->unproved,
                          from_one ? "from one address" : "in all", who, (unsigned long long)st->shed);
            }
            continue;
        }
        root_conn_t *c = &st->conns[st->nconns++];
        memset(c, 0, offsetof(root_conn_t, in));
        c->have = 0;
        c->out = NULL;
        c->authed = 0;
        c->withdrawn = 0;
        c->hello_type = 0;
        c->fd = fd;
        c->src = slot;
        st->src_tab[slot].n++;
        st->unproved++;
        c->state = RC_HELLO;
        c->hello_deadline = oobx__now_ns() + 10ull * 1000000000ull;
        oobx__sock_addr_format(&peer, c->peer, sizeof(c->peer));
        /* the challenge: 32 bytes into an empty socket buffer go at once */
        unsigned char ch[OOBX_CHALLENGE_BYTES];
        oobx__auth_challenge(&c->auth, ch);
        if (send(fd, ch, sizeof(ch), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(ch)) conn_close(st, st->nconns - 1);
    }
}

/* Drops closed connections from the table, keeping indexes in waiting[] right. */
static void compact(root_state_t *st)
{
    int j = 0;
    for (int i = 0; i < st->nconns; i++) {
        if (st->conns[i].fd < 0) continue;
        if (i != j) {
            st->conns[j] = st->conns[i];
            for (int k = 0; k < st->nrecv; k++)
                if (st->waiting[k] == i) st->waiting[k] = j;
        }
        j++;
    }
    st->nconns = j;
}

static void fail_waiting(root_state_t *st)
{
    char text[OOBX_REPLY_TEXT_MAX];
    int off = 0, nmiss = 0, origin = -1; /* the first that never checked in */
    int first = st->nranks ? oobx__root_first_rank(st->iroot, st->nranks, st->nroots) : 0;
    if (st->nranks == 0) {
        off = snprintf(text, sizeof(text), "root %s timed out before any rank reported", st->name);
    } else {
        off = snprintf(text, sizeof(text), "root %d (%s) timed out with %d of %d reports; never checked in:",
                       st->iroot, st->name, st->nin, st->nrecv);
        for (int k = 0; k < st->nrecv && off < (int)sizeof(text) - 32; k++) {
            if (st->info[k]) continue;
            int r = (first + k) % st->nranks;
            off += snprintf(text + off, sizeof(text) - (size_t)off, "%s rank %d", nmiss ? "," : "", r);
            if (!nmiss++) origin = r;
        }
        if (nmiss == 0) snprintf(text + off, sizeof(text) - (size_t)off, " none");
    }
    OOBX_WARN(&st->log, "%s", text);
    for (int k = 0; k < st->nrecv; k++) {
        int ci = st->waiting[k];
        if (ci >= 0 && st->conns[ci].fd >= 0) conn_reply(st, ci, OOBX_ERR_TIMEOUT, origin, text, strlen(text));
        st->waiting[k] = -1;
    }
}

static void *root_main(void *arg)
{
    root_state_t *st = arg;
    struct pollfd *pfds = NULL;
    int cappfds = 0;
    int timed_out = 0;
    st->t_start = oobx__now_ns();
    for (;;) {
        /* after a rank died or the job was refused: the extra reporter (the next
         * block's first rank) is owed the news too, however late it comes,
         * until the deadline; else it would wait out its timeout on a root
         * that stopped serving */
        int extra_owed = st->nranks && st->dead_text[0] && st->nrecv > st->n2send &&
                         !st->replied[st->n2send];
        if (st->nranks && st->nreplied == st->n2send && !extra_owed) {
            /* everybody answered: flush what is still queued, then end */
            int pending = 0;
            for (int i = 0; i < st->nconns; i++)
                if (st->conns[i].fd >= 0 && st->conns[i].state == RC_SEND) pending = 1;
            if (!pending) break;
        }
        uint64_t now = oobx__now_ns();
        if (!timed_out && now >= st->deadline) {
            fail_waiting(st);
            timed_out = 1;
        }
        if (timed_out) {
            int pending = 0;
            for (int i = 0; i < st->nconns; i++)
                if (st->conns[i].fd >= 0 && st->conns[i].state == RC_SEND) pending = 1;
            if (!pending || now >= st->deadline + 2000000000ull) break;
        }
        compact(st);
        if (cappfds < st->nconns + 1) {
            cappfds = (st->nconns + 1) * 2;
            struct pollfd *np = realloc(pfds, (size_t)cappfds * sizeof(*np));
            if (!np) break;
            pfds = np;
        }
        pfds[0].fd = st->listen_fd;
        pfds[0].events = timed_out ? 0 : POLLIN;
        uint64_t wake = st->deadline;
        for (int i = 0; i < st->nconns; i++) {
            root_conn_t *c = &st->conns[i];
            pfds[i + 1].fd = c->fd;
            pfds[i + 1].events = c->state == RC_SEND ? POLLOUT : POLLIN;
        }
        int ms = oobx__ms_left(wake, 1000);
        int n = poll(pfds, (nfds_t)st->nconns + 1, ms);
        if (n < 0 && errno != EINTR) break;
        if (n <= 0) continue;
        int nc = st->nconns;
        for (int i = 0; i < nc; i++) {
            short re = pfds[i + 1].revents;
            if (!re || st->conns[i].fd < 0) continue;
            if (st->conns[i].state == RC_SEND) {
                if (re & (POLLOUT | POLLERR | POLLHUP)) conn_write(st, i);
            } else {
                conn_read(st, i);
            }
        }
        if (pfds[0].revents & POLLIN) accept_all(st);
    }
    OOBX_INFO(&st->log, "root %s: done, %d/%d reports, %d answered (wait %.3f s, all in %.3f s)", st->name, st->nin,
              st->nrecv, st->nreplied, st->t_first ? (st->t_first - st->t_start) / 1e9 : 0.0,
              st->t_all ? (st->t_all - st->t_start) / 1e9 : 0.0);
    for (int i = 0; i < st->nconns; i++) conn_close(st, i);
    close(st->listen_fd);
    free(pfds);
    free(st->conns);
    if (st->info)
        for (int k = 0; k < st->nrecv; k++) free(st->info[k]);
    free(st->info);
    free(st->info_len);
    free(st->waiting);
    free(st->replied);
    oobx__log_close(&st->log);
    root_entry_t *e = st->entry;
    free(st);
    registry_finish(e);
    return NULL;
}

/* Starts the root thread on a listening socket (non-blocking, close-on-exec)
 * bound to addr; on failure the socket is closed. */
static int root_launch(int listen_fd, const oobx_sockaddr_t *addr, uint64_t magic, const unsigned char *secret,
                       const oobx_settings_t *s, root_handle_t *out, char *why, size_t whylen)
{
    root_state_t *st = calloc(1, sizeof(*st));
    root_entry_t *e = calloc(1, sizeof(*e));
    if (!st || !e) {
        free(st);
        free(e);
        close(listen_fd);
        snprintf(why, whylen, "out of memory starting a root");
        return OOBX_ERR_NOMEM;
    }
    st->listen_fd = listen_fd;
    /* the open-file limit raised, and room for a burst of reports without
     * growing the descriptor table while the root thread accepts (sock.h) */
    oobx__sock_raise_nofile();
    oobx__sock_reserve_fds(listen_fd, ROOT_FDS_RESERVED);
    st->magic = magic;
    memcpy(st->secret, secret, OOBX_SECRET_BYTES);
    st->node = -1;
    st->dead_origin = -1;
    st->epoch = oobx__random64();
    /* a tenth (at most 2 s) before the ranks give up, so that its "never
     * checked in" reaches them while they still wait */
    st->deadline = oobx__deadline(s->timeout_ms < 0 ? -1 : s->timeout_ms - OOBX_MIN(s->timeout_ms / 10, 2000));
    st->entry = e;
    oobx__sock_addr_format(addr, st->name, sizeof(st->name));
    oobx__log_open(&st->log, s, "root");
    e->magic = magic;
    /* the thread owns st from here */
    pthread_once(&registry_once, registry_init);
    pthread_mutex_lock(&registry_lock);
    int rc = pthread_create(&e->thread, NULL, root_main, st);
    if (rc == 0) {
        e->next = registry_head;
        registry_head = e;
    }
    pthread_mutex_unlock(&registry_lock);
    if (rc != 0) {
        close(st->listen_fd);
        oobx__log_close(&st->log);
        free(st);
        free(e);
        snprintf(why, whylen, "cannot start the root thread: %s", strerror(rc));
        return OOBX_ERR_SYSTEM;
    }
    out->magic = magic;
    memcpy(out->secret, secret, OOBX_SECRET_BYTES);
    out->addr = *addr;
    return OOBX_SUCCESS;
}

int oobx__root_start(const oobx_sockaddr_t *bind_addr, uint64_t magic, const unsigned char *secret,
                     const oobx_settings_t *s, root_handle_t *out, char *why, size_t whylen)
{
    oobx_sockaddr_t addr = *bind_addr;
    int fd = -1;
    int rc = oobx__sock_listen(&addr, 16384, &fd, why, whylen);
    if (rc != 0) return rc;
    return root_launch(fd, &addr, magic, secret, s, out, why, whylen);
}

static int same_endpoint(const oobx_sockaddr_t *a, const oobx_sockaddr_t *b)
{
    if (a->sa.sa_family != b->sa.sa_family) return 0;
    if (oobx__sock_addr_port(a) != oobx__sock_addr_port(b)) return 0;
    if (a->sa.sa_family == AF_INET) return a->sin.sin_addr.s_addr == b->sin.sin_addr.s_addr;
    if (a->sa.sa_family == AF_INET6) {
        if (memcmp(&a->sin6.sin6_addr, &b->sin6.sin6_addr, sizeof(a->sin6.sin6_addr)) != 0) return 0;
        /* a scope id only matters when both sides name one */
        return !a->sin6.sin6_scope_id || !b->sin6.sin6_scope_id || a->sin6.sin6_scope_id == b->sin6.sin6_scope_id;
    }
    return 0;
}

/* The descriptor adopted by this process, so that a second communicator does
 * not serve a second root on a socket the first one owns (or has closed). */
static pthread_mutex_t adopted_lock = PTHREAD_MUTEX_INITIALIZER;
static int adopted_fd = -1;

int oobx__root_start_fd(int fd, const char *var, const oobx_sockaddr_t *want, uint64_t magic,
                        const unsigned char *secret, const oobx_settings_t *s, root_handle_t *out, char *why,
                        size_t whylen)
{
    char wname[96], gname[96];
    oobx__sock_addr_format(want, wname, sizeof(wname));
    pthread_mutex_lock(&adopted_lock);
    int taken = adopted_fd == fd;
    pthread_mutex_unlock(&adopted_lock);
    if (taken) {
        snprintf(why, whylen,
                 "%s=%d was already adopted by an earlier communicator of this process; a launcher hands each "
                 "root's socket (%s) to one communicator only",
                 var, fd, wname);
        return OOBX_ERR_INVALID;
    }
    int type = 0, proto = 0, listening = 0;
    socklen_t l = sizeof(type);
    if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) != 0) {
        snprintf(why, whylen, "%s=%d is not a socket (%s); expected a TCP socket listening on %s, the address "
                 "OOBX_COMM_ID names for this root", var, fd, fd < 0 ? "negative" : strerror(errno), wname);
        return OOBX_ERR_INVALID;
    }
    oobx_sockaddr_t got;
    memset(&got, 0, sizeof(got));
    socklen_t gl = sizeof(got);
    if (getsockname(fd, &got.sa, &gl) != 0) {
        snprintf(why, whylen, "%s=%d: getsockname: %s; expected a TCP socket listening on %s (OOBX_COMM_ID)", var, fd,
                 strerror(errno), wname);
        return OOBX_ERR_INVALID;
    }
    oobx__sock_addr_format(&got, gname, sizeof(gname));
    l = sizeof(proto);
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &l) != 0) proto = -1;
    if ((got.sa.sa_family != AF_INET && got.sa.sa_family != AF_INET6) || type != SOCK_STREAM || proto != IPPROTO_TCP) {
        snprintf(why, whylen, "%s=%d is a socket at %s, but not a TCP one (family %d, type %d); expected a TCP socket "
                 "listening on %s (OOBX_COMM_ID)", var, fd, gname, got.sa.sa_family, type, wname);
        return OOBX_ERR_INVALID;
    }
    l = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &l) != 0 || !listening) {
        snprintf(why, whylen, "%s=%d is a TCP socket bound to %s that is not listening; expected one listening on %s "
                 "(OOBX_COMM_ID)", var, fd, gname, wname);
        return OOBX_ERR_INVALID;
    }
    if (!same_endpoint(&got, want)) {
        snprintf(why, whylen, "%s=%d listens on %s, but OOBX_COMM_ID names %s for this root", var, fd, gname, wname);
        return OOBX_ERR_MISMATCH;
    }
    pthread_mutex_lock(&adopted_lock);
    taken = adopted_fd == fd;
    if (!taken) adopted_fd = fd;
    pthread_mutex_unlock(&adopted_lock);
    if (taken) {
        snprintf(why, whylen, "%s=%d was already adopted by another communicator of this process", var, fd);
        return OOBX_ERR_INVALID;
    }
    /* the root polls and accepts until EAGAIN; the launcher may have listened with a small backlog */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
        snprintf(why, whylen, "%s=%d: fcntl: %s", var, fd, strerror(errno));
        return OOBX_ERR_SYSTEM;
    }
    (void)listen(fd, 16384);
    return root_launch(fd, &got, magic, secret, s, out, why, whylen);
}

/* ---- the rank's side ---------------------------------------------------------- */

/* The cancel of one try at a candidate port: the call's, ending by ms at the latest. */
static oobx_cancel_t candidate_cancel(const oobx_cancel_t *c, int ms)
{
    oobx_cancel_t t = {.deadline_ns = UINT64_MAX};
    if (c) t = *c;
    uint64_t by = oobx__deadline(ms);
    if (by < t.deadline_ns) t.deadline_ns = by;
    return t;
}

/* One connect to a candidate, completed within the cancel's window: 0, or
 * OOBX_ERR_REMOTE (refused, unreachable, no answer in time) with why. */
static int connect_once(const oobx_sockaddr_t *a, const oobx_cancel_t *c, int *fd_out, char *why, size_t whylen)
{
    int stopped, err = oobx__sock_connect_wait(a, c, fd_out, &stopped);
    if (err == 0) return 0;
    snprintf(why, whylen, "connect: %s", strerror(err));
    return OOBX_ERR_REMOTE;
}

/* The next candidate port; after the last, a new round, after a backoff. */
static void next_candidate(const oobx_cancel_t *c, int *cand, int ncand, int *round, uint64_t *rng)
{
    if (++*cand < ncand) return;
    *cand = 0;
    ++*round;
    oobx__sock_backoff_sleep(c, *round, rng);
}

static int report_to(const root_client_t *c, int iroot, int as_rank, int type, int *fd_out, oobx_auth_t *auth,
                     char *why, size_t whylen)
{
    const root_handle_t *h = &c->roots[iroot];
    char name[96];
    oobx__sock_addr_format(&h->addr, name, sizeof(name));
    int fd = -1;
    char sub[512];
    unsigned char ch[OOBX_CHALLENGE_BYTES];
    uint64_t rng = oobx__random64();
    int rc, shed;
    size_t got = 0;
    uint64_t t0 = oobx__now_ns(), t_conn = 0;
    /* With a window of ports (h->nalt), the root is at the first that
     * answers with a challenge: a port before it refuses, or holds another
     * listener that says nothing or something else. Each round tries each
     * candidate once (the connect within 100 ms, the challenge within 1 s,
     * both doubling each round), with a backoff after a round that found
     * nothing, until one sends a challenge; that one is used from then on. */
    int ncand = h->nalt > 0 ? h->nalt + 1 : 1, cand = 0, round = 0, found = ncand == 1;
    oobx_sockaddr_t addr = h->addr;
    for (shed = 0;; shed++) {
        oobx_cancel_t cc = c->cancel ? *c->cancel : (oobx_cancel_t){.deadline_ns = UINT64_MAX};
        if (!found) {
            addr = h->addr;
            oobx__sock_addr_set_port(&addr, oobx__sock_addr_port(&h->addr) + cand);
            oobx__sock_addr_format(&addr, name, sizeof(name));
            cc = candidate_cancel(c->cancel, 100 << (round < 4 ? round : 4));
        }
        rc = found ? oobx__sock_connect_retry(&addr, &cc, &fd, sub, sizeof(sub))
                   : connect_once(&addr, &cc, &fd, sub, sizeof(sub));
        t_conn = oobx__now_ns();
        if (rc != 0 && !found && !oobx__sock_cancel_status(c->cancel)) {
            /* refused or silent through its window: the next candidate */
            next_candidate(c->cancel, &cand, ncand, &round, &rng);
            shed--;
            continue;
        }
        if (rc != 0) {
            snprintf(why, whylen,
                     "rank %d cannot reach root %d at %s%s: %s%s; is the root's process alive, and is OOBX_COMM_ID / "
                     "the unique id right?",
                     c->rank, iroot, name, ncand > 1 ? " (or the ports after it: OOBX_MASTER_PORT_TRIES)" : "", sub,
                     shed ? " (the root shed this rank's earlier connections)" : "");
            return rc;
        }
        /* the root's challenge comes first; a root that holds its cap of
         * connections without proof closes new ones before their challenge
         * (docs/security.md): try again, later */
        got = 0;
        if (!found) cc = candidate_cancel(c->cancel, 1000 << (round < 4 ? round : 4));
        rc = oobx__sock_recv_all_got(fd, ch, sizeof(ch), &cc, sub, sizeof(sub), &got);
        if (!found) {
            /* a root's challenge: this job's kind of root, stay with it; else
             * (silence, something else, even a close before it: a root
             * shedding it is tried again next round, another listener that
             * closes at once must not hold the ranks) the next candidate */
            char sub2[256];
            oobx_auth_t probe;
            found = rc == 0 && oobx__auth_challenge_decode(ch, sizeof(ch), &probe, sub2, sizeof(sub2)) == 0;
            if (!found && !oobx__sock_cancel_status(c->cancel)) {
                close(fd);
                fd = -1;
                next_candidate(c->cancel, &cand, ncand, &round, &rng);
                shed--;
                continue;
            }
        }
        if (rc != OOBX_ERR_REMOTE || got != 0) break;
        close(fd);
        fd = -1;
        oobx__sock_backoff_sleep(c->cancel, shed + 1, &rng);
    }
    OOBX_DEBUG(c->log, "rank %d: root %d at %s: connected in %.3f ms, challenge after %.3f ms more%s", c->rank, iroot,
               name, (t_conn - t0) / 1e6, (oobx__now_ns() - t_conn) / 1e6, shed ? " (shed before)" : "");
    if (rc == 0) rc = oobx__auth_challenge_decode(ch, sizeof(ch), auth, sub, sizeof(sub));
    if (rc != 0) {
        close(fd);
        /* silence until the deadline: not a root, or a root whose process is
         * stopped or starved of CPU (thousands of ranks on a few cores) */
        const char *hint = rc == OOBX_ERR_TIMEOUT && got == 0
                               ? "it accepted and said nothing: is that address this job's root, and is the process "
                                 "that hosts it running and given CPU? OOBX_TIMEOUT_MS waits longer"
                               : "is that address this job's root?";
        snprintf(why, whylen, "rank %d: root %d at %s: %s (%s)", c->rank, iroot, name, sub, hint);
        return rc;
    }
    unsigned char buf[ROOT_HELLO_IN + OOBX_REPORT_BYTES + OOBX_ADDR_MAX];
    oobx_hello_t hello = {.proto_magic = OOBX_WIRE_MAGIC, .version = OOBX_WIRE_VERSION, .type = (uint16_t)type,
                          .comm_magic = h->magic, .rank = as_rank, .nranks = c->nranks};
    int left = oobx__ms_left(c->cancel ? c->cancel->deadline_ns : UINT64_MAX, -1);
    oobx_report_t rep = {.rank = as_rank, .nranks = c->nranks, .iroot = iroot, .nroots = c->nroots,
                         .tpid = c->tpid, .blob_len = (uint32_t)c->blob_len,
                         .wait_ms = left < 0 ? OOBX_WAIT_FOREVER : (uint32_t)left};
    oobx__hello_encode(&hello, buf);
    oobx__auth_prove(h->secret, auth, buf, buf + OOBX_HELLO_BYTES);
    oobx__report_encode(&rep, buf + ROOT_HELLO_IN);
    memcpy(buf + ROOT_HELLO_IN + OOBX_REPORT_BYTES, c->blob, c->blob_len);
    rc = oobx__sock_send_all(fd, buf, ROOT_HELLO_IN + OOBX_REPORT_BYTES + c->blob_len, c->cancel, sub, sizeof(sub));
    if (rc != 0) {
        close(fd);
        snprintf(why, whylen, "rank %d reporting to root %d at %s: %s", c->rank, iroot, name, sub);
        return rc;
    }
    *fd_out = fd;
    return OOBX_SUCCESS;
}

/* Reads a reply; status 0 fills out (cap bytes) and out_len, an error reply
 * becomes why (and its text alone, raw, and its origin rank, when not NULL). */
static int read_reply(const root_client_t *c, int iroot, int fd, const oobx_auth_t *auth, void *out, size_t cap,
                      size_t *out_len, char *why, size_t whylen, char *raw, size_t rawlen, int *origin)
{
    char name[96], sub[512];
    oobx__sock_addr_format(&c->roots[iroot].addr, name, sizeof(name));
    unsigned char hdr[OOBX_REPLY_BYTES];
    int rc = oobx__sock_recv_all(fd, hdr, sizeof(hdr), c->cancel, sub, sizeof(sub));
    if (rc != 0) {
        snprintf(why, whylen, "rank %d waiting for root %d at %s: %s%s", c->rank, iroot, name, sub,
                 rc == OOBX_ERR_TIMEOUT ? "; some ranks may not have started, or reported to another root" : "");
        return rc;
    }
    oobx_reply_t r;
    rc = oobx__reply_decode(hdr, sizeof(hdr), &r, sub, sizeof(sub));
    if (rc != 0) {
        snprintf(why, whylen, "rank %d: bad answer from root %d at %s: %s", c->rank, iroot, name, sub);
        return rc;
    }
    char text[OOBX_REPLY_TEXT_MAX + 1];
    if (r.status == 0 && r.len > cap) {
        snprintf(why, whylen, "rank %d: root %d at %s answered with %u bytes, more than the %zu expected", c->rank,
                 iroot, name, r.len, cap);
        return OOBX_ERR_PROTOCOL;
    }
    if (r.status == 0) {
        /* an answer must prove that the root knows the secret */
        unsigned char mac[OOBX_MAC_BYTES];
        rc = oobx__sock_recv_all(fd, mac, sizeof(mac), c->cancel, sub, sizeof(sub));
        if (rc != 0) {
            snprintf(why, whylen, "rank %d reading the answer of root %d at %s: %s", c->rank, iroot, name, sub);
            return rc;
        }
        if (!oobx__auth_check(c->roots[iroot].secret, 'A', auth, mac)) {
            snprintf(why, whylen,
                     "rank %d: the answer from %s does not prove this job's secret: that is not root %d of this job "
                     "(another job, or a process that took its address)",
                     c->rank, name, iroot);
            return OOBX_ERR_MISMATCH;
        }
    }
    void *dst = r.status == 0 ? out : text;
    if (r.len) {
        rc = oobx__sock_recv_all(fd, dst, r.len, c->cancel, sub, sizeof(sub));
        if (rc != 0) {
            snprintf(why, whylen, "rank %d reading the answer of root %d at %s: %s", c->rank, iroot, name, sub);
            return rc;
        }
    }
    if (r.status != 0) {
        text[r.len] = '\0';
        snprintf(why, whylen, "root %d at %s refused rank %d: %s", iroot, name, c->rank, text);
        if (raw) snprintf(raw, rawlen, "%s", text);
        if (origin) *origin = r.origin;
        return r.status;
    }
    if (out_len) *out_len = r.len;
    return OOBX_SUCCESS;
}

/* Tells a root that waits to answer this rank that it gives up, and why
 * (the withdraw notice, above), and ends its side of the connection; the
 * caller reads what the root still sends, or closes. */
static void withdraw_notice(int fd, const char *text, int origin)
{
    if (fd < 0) return;
    unsigned char b[ROOT_WITHDRAW_HDR + OOBX_REPLY_TEXT_MAX];
    size_t tl = strlen(text);
    if (tl > OOBX_REPLY_TEXT_MAX) tl = OOBX_REPLY_TEXT_MAX;
    oobx__put_u32(b, ROOT_WITHDRAW_MAGIC);
    oobx__put_u32(b + 4, (uint32_t)tl);
    oobx__put_u32(b + 8, (uint32_t)origin);
    memcpy(b + ROOT_WITHDRAW_HDR, text, tl);
    /* a few hundred bytes into a socket buffer that holds only the report: one call */
    (void)!send(fd, b, ROOT_WITHDRAW_HDR + tl, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_WR);
}

static void withdraw(int fd, const char *text, int origin)
{
    if (fd < 0) return;
    withdraw_notice(fd, text, origin);
    close(fd);
}

/* Both kinds of rendezvous: stagger, report to the rank's root (and, for the
 * first rank of a block with several roots, to the previous root), read the
 * answers. out/eout: the answers of the own and the previous root. */
static int exchange(const root_client_t *c, int type, int extra_type, void *out, size_t cap, size_t *len, void *eout,
                    size_t ecap, size_t *elen, double *delay_s)
{
    char why[1400];
    if (c->origin) *c->origin = -1;
    int myroot = oobx__root_of_rank(c->rank, c->nranks, c->nroots);
    int local = oobx__root_local_id(c->rank, myroot, c->nranks, c->nroots);
    int block = oobx__root_nranks(myroot, c->nranks, c->nroots);
    uint64_t t0 = oobx__now_ns();
    if (block > c->settings->stagger_threshold && local > 0) {
        /* spread the first contacts of a big block over time */
        uint64_t wait_ns = (uint64_t)local * 1000000000ull / (uint64_t)c->settings->stagger_rate;
        uint64_t until = t0 + wait_ns;
        while (oobx__now_ns() < until) {
            int rc = oobx__sock_cancelled(c->cancel);
            if (rc) return oobx__fail(c->log, rc, "rank %d: aborted while staggering its first contact", c->rank);
            uint64_t left = until - oobx__now_ns();
            if (left > 50000000ull) left = 50000000ull;
            struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)left};
            nanosleep(&ts, NULL);
        }
    }
    *delay_s = (oobx__now_ns() - t0) / 1e9;

    /* [0]: the own root; [1]: the previous root, for the first rank of a block
     * (the successor of the previous block's last rank) when there are several */
    int fds[2] = {-1, -1}, iroots[2] = {myroot, -1};
    oobx_auth_t auths[2];
    int rc = report_to(c, myroot, c->rank, type, &fds[0], &auths[0], why, sizeof(why));
    if (rc != 0) return oobx__fail(c->log, rc, "%s", why);
    if (elen) *elen = 0;
    if (c->nroots > 1 && local == 0) {
        int prev_rank = (c->rank - 1 + c->nranks) % c->nranks;
        iroots[1] = oobx__root_of_rank(prev_rank, c->nranks, c->nroots);
        rc = report_to(c, iroots[1], prev_rank + 1, extra_type, &fds[1], &auths[1], why, sizeof(why));
        if (rc != 0) {
            withdraw(fds[0], why, -1);
            return oobx__fail(c->log, rc, "%s", why);
        }
    }
    /* both answers as they come: a refusal from either is this rank's
     * failure at once, and the other root hears why (a withdraw notice), so
     * that it tells its ranks the origin, not that this rank went away */
    while (fds[0] >= 0 || fds[1] >= 0) {
        struct pollfd p[2];
        int np = 0, idx[2];
        for (int k = 0; k < 2; k++)
            if (fds[k] >= 0) p[np] = (struct pollfd){.fd = fds[k], .events = POLLIN}, idx[np++] = k;
        int cs = oobx__sock_cancel_status(c->cancel), ready = 0;
        if (!cs) {
            ready = poll(p, (nfds_t)np, oobx__sock_wait_ms(c->cancel));
            if (ready < 0 && errno != EINTR) cs = OOBX_ERR_SYSTEM;
            if (ready <= 0 && !cs) continue;
        }
        for (int j = 0; j < np; j++) {
            int k = idx[j];
            /* cancelled or past the deadline: read_reply says so, naming the root */
            if (!cs && !p[j].revents) continue;
            char raw[OOBX_REPLY_TEXT_MAX + 1] = "";
            int org = -1;
            rc = k == 0 ? read_reply(c, iroots[0], fds[0], &auths[0], out, cap, len, why, sizeof(why), raw, sizeof(raw),
                                     &org)
                        : read_reply(c, iroots[1], fds[1], &auths[1], eout, ecap, elen, why, sizeof(why), raw,
                                     sizeof(raw), &org);
            if (rc != 0 && c->origin) *c->origin = org;
            close(fds[k]);
            fds[k] = -1;
            if (rc != 0 && k == 1 && fds[0] >= 0) {
                /* the previous root refused: the own root hears why; if it
                 * had answered already (the block placed), that answer comes
                 * before its close, and *len says so to the caller (the
                 * host's ranks wait for this rank and must be told) */
                withdraw_notice(fds[0], raw[0] ? raw : why, org);
                oobx_cancel_t brief = c->cancel ? *c->cancel : (oobx_cancel_t){.deadline_ns = UINT64_MAX};
                uint64_t soon = oobx__deadline(1000);
                if (soon < brief.deadline_ns) brief.deadline_ns = soon;
                root_client_t cb = *c;
                cb.cancel = &brief;
                char why2[600];
                if (read_reply(&cb, iroots[0], fds[0], &auths[0], out, cap, len, why2, sizeof(why2), NULL, 0, NULL) != 0)
                    *len = 0;
                close(fds[0]);
                return oobx__fail(c->log, rc, "%s", why);
            }
            if (rc != 0) {
                if (k == 0 && len) *len = 0; /* (an answer of the own root read before stays: see above) */
                if (fds[1 - k] >= 0) withdraw(fds[1 - k], raw[0] ? raw : why, org);
                return oobx__fail(c->log, rc, "%s", why);
            }
            break; /* poll again for the other */
        }
    }
    if (*len == 0)
        return oobx__fail(c->log, OOBX_ERR_PROTOCOL, "rank %d: root %d answered with nothing", c->rank, myroot);
    return OOBX_SUCCESS;
}

int oobx__root_exchange(const root_client_t *c, void *next, size_t *next_len, double *delay_s)
{
    return exchange(c, OOBX_HELLO_ROOT, OOBX_HELLO_ROOT_EXTRA, next, OOBX_ADDR_MAX, next_len, NULL, 0, NULL, delay_s);
}

int oobx__root_exchange_node(const root_client_t *c, root_placement_t *out, double *delay_s)
{
    memset(out, 0, sizeof(*out));
    size_t cap = OOBX_PLACE_MAX(c->nranks), len = 0, elen = 0;
    out->raw = malloc(cap);
    if (!out->raw) return oobx__fail(c->log, OOBX_ERR_NOMEM, "rank %d: out of memory for its placement", c->rank);
    unsigned char prev[4];
    int rc = exchange(c, OOBX_HELLO_ROOT_NODE, OOBX_HELLO_ROOT_NODE_EXTRA, out->raw, cap, &len, prev, sizeof(prev),
                      &elen, delay_s);
    char why[300];
    if (rc != 0) {
        /* the other root refused this rank after its own had placed it */
        char lasterr[sizeof(why)];
        snprintf(lasterr, sizeof(lasterr), "%s", oobx_last_error());
        if (len > 0 && oobx__place_decode(out->raw, len, c->nranks, &out->place, why, sizeof(why)) == 0)
            out->placed_then_failed = 1;
        oobx__set_last_error("%s", lasterr);
        return rc;
    }
    rc = oobx__place_decode(out->raw, len, c->nranks, &out->place, why, sizeof(why));
    if (rc != 0) return oobx__fail(c->log, rc, "rank %d: its root's answer: %s", c->rank, why);
    if (out->place.local_index == 0) {
        out->members = out->raw + OOBX_PLACE_BYTES;
        out->next_card = out->members + 4 * (size_t)out->place.nmembers;
        if (elen == 4) out->place.prev_leader = (int32_t)oobx__get_u32(prev);
        if (out->place.prev_leader < 0 || out->place.prev_leader >= c->nranks)
            return oobx__fail(c->log, OOBX_ERR_PROTOCOL, "rank %d leads its host's ranks but learnt no previous leader",
                              c->rank);
    }
    return OOBX_SUCCESS;
}

void oobx__root_placement_free(root_placement_t *p)
{
    free(p->raw);
    p->raw = NULL;
}
