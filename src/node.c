/* The shared card table of the ranks of one host (node.h). */
#include "node.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "oobx.h"
#include "util.h"

#define NODE_MAGIC 0x45444f4e58424f4full /* "OOBXNODE" */
#define NODE_VERSION 2
#define NODE_HDR_BYTES 4096
/* Waits wake at least once a slice to look at pids, aborts and the deadline:
 * 100 ms for a host of up to 50 ranks, 2 ms a rank above that, at most 1 s
 * (on an oversubscribed host thousands of waiters waking ten times a second
 * cost more CPU than the bootstrap itself); 50 ms while a user abort flag,
 * which nobody signals, is watched. */
#define NODE_SLICE_MIN_MS 100
#define NODE_SLICE_MAX_MS 1000
#define NODE_SLICE_ABORT_MS 50
#define NODE_ERROR_MAX 1024

/* At offset 0 of the segment. The words that change are accessed with
 * atomics; the rest is written once by the creator before anyone sees it. */
typedef struct node_hdr {
    uint64_t magic, job, epoch, host;
    uint32_t version, nranks, local_size, card_cap;
    int32_t leader;
    uint32_t opened; /* members that mapped it */
    uint32_t ready;  /* futex: members whose cards are in */
    int32_t state;   /* futex: 0 running, 1 complete, < 0 the leader's failure */
    uint32_t ncards; /* cards in the table */
    uint32_t hosts;  /* the leader's count of the hosts the cards name (before state = 1) */
    uint32_t over;   /* 1: some host runs more ranks than it has CPUs (idem) */
    uint32_t pad;
    uint64_t data_bytes; /* each of the allgather's two buffers */
    uint64_t heap_used;  /* bytes of the card heap handed out */
    char error[NODE_ERROR_MAX];
} node_hdr_t;

typedef struct node_member {
    int32_t rank;
    uint32_t pid; /* 0 until the member mapped the segment */
    uint64_t ag_bpr[2]; /* the bytes per rank of its last allgather in each buffer */
    uint32_t ag_seen[2]; /* uses of each buffer it joined */
    uint32_t pad;
} node_member_t;

/* The allgather's words: per buffer, counters that only go up (use k of a
 * buffer expects (k+1) * local_size arrivals and departures). */
typedef struct node_ag {
    uint32_t arrive[2]; /* futex: members whose slices are in */
    uint32_t done[2];   /* futex: uses the leader completed */
    uint32_t left[2];   /* futex: members that copied the result out */
    int32_t fail;       /* < 0: an allgather failed; the node path is over for this communicator */
    uint32_t claimed;   /* the first rank to fail it writes error; the others keep it */
    char error[NODE_ERROR_MAX];
} node_ag_t;

/* The table is an index of N slots and a heap the cards are packed into, so
 * that a rank reading every card touches few pages (a card is tens of bytes;
 * its slot's room, OOBX_ADDR_MAX, is reserved but never touched). */
typedef struct node_slot {
    uint32_t len; /* 0: not in yet; NODE_SLOT_BUSY: being written */
    uint32_t off; /* in the heap, in 8-byte units */
} node_slot_t;
#define NODE_SLOT_BUSY 0xffffffffu

struct oobx__node {
    oobx__node_params_t p;
    unsigned char *base;
    size_t size;
    size_t heap_off, heap_bytes; /* the card heap */
    size_t ag_off;     /* offset of the node_ag_t */
    size_t data_off;   /* offset of the two data buffers, p.data_bytes each */
    int named;         /* a file in p.dir (else private memory: a group of one) */
    char path[512];
};

static node_hdr_t *hdr(const oobx__node_t *n)
{
    return (node_hdr_t *)n->base;
}

static node_member_t *member(const oobx__node_t *n, int k)
{
    return (node_member_t *)(n->base + NODE_HDR_BYTES) + k;
}

static size_t members_bytes(int local_size)
{
    return ((size_t)local_size * sizeof(node_member_t) + 63) & ~(size_t)63;
}

static node_ag_t *ag(const oobx__node_t *n)
{
    return (node_ag_t *)(n->base + n->ag_off);
}

static node_slot_t *slot(const oobx__node_t *n, int rank)
{
    return (node_slot_t *)(n->base + NODE_HDR_BYTES + members_bytes(n->p.local_size)) + rank;
}

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

static void wake_all(uint32_t *word)
{
    futex(word, FUTEX_WAKE, INT32_MAX, NULL);
}

/* Sleeps while *word == seen, for one slice at most (less near the deadline). */
static void wait_slice(const oobx__node_t *n, uint32_t *word, uint32_t seen)
{
    int slice = n->p.local_size * 2;
    if (slice < NODE_SLICE_MIN_MS) slice = NODE_SLICE_MIN_MS;
    if (slice > NODE_SLICE_MAX_MS) slice = NODE_SLICE_MAX_MS;
    if (n->p.cancel && n->p.cancel->user_abort) slice = NODE_SLICE_ABORT_MS;
    int ms = oobx__ms_left(n->p.cancel ? n->p.cancel->deadline_ns : UINT64_MAX, slice);
    if (ms < 0 || ms > slice) ms = slice;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    futex(word, FUTEX_WAIT, seen, &ts);
}

#define NODE_CHECK_NS 100000000ull /* how often a waiter looks at the pids of the ranks it waits for */

/* 1 once per NODE_CHECK_NS: the first time when that much has passed. */
static int time_to_check(uint64_t *at)
{
    uint64_t now = oobx__now_ns();
    if (now < *at) return 0;
    *at = now + NODE_CHECK_NS;
    return 1;
}

static int pid_dead(uint32_t pid)
{
    return pid && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* 1 when the process is stopped (SIGSTOP, a debugger): state T or t. */
static int pid_stopped(uint32_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *e = strrchr(buf, ')');
    return e && e[1] == ' ' && (e[2] == 'T' || e[2] == 't');
}

static void fill_header(oobx__node_t *n)
{
    node_hdr_t *h = hdr(n);
    h->magic = NODE_MAGIC;
    h->job = n->p.job;
    h->epoch = n->p.epoch;
    h->host = n->p.host;
    h->version = NODE_VERSION;
    h->nranks = (uint32_t)n->p.nranks;
    h->local_size = (uint32_t)n->p.local_size;
    h->card_cap = (uint32_t)n->p.card_cap;
    h->leader = n->p.leader;
    h->data_bytes = n->p.data_bytes;
}

/* Checks that the mapped header is this group's: an error naming what differs. */
static int check_header(const oobx__node_t *n)
{
    const node_hdr_t *h = hdr(n);
    const char *what = NULL;
    if (h->magic != NODE_MAGIC || h->version != NODE_VERSION) what = "it is not an oobx host segment of this version";
    else if (h->job != n->p.job || h->epoch != n->p.epoch) what = "it belongs to another job or an earlier run";
    else if (h->host != n->p.host || h->leader != n->p.leader || h->nranks != (uint32_t)n->p.nranks ||
             h->local_size != (uint32_t)n->p.local_size || h->card_cap != (uint32_t)n->p.card_cap ||
             h->data_bytes != n->p.data_bytes)
        what = "its group (host, leader, sizes) is not this rank's";
    if (!what) return 0;
    return oobx__fail(n->p.log, OOBX_ERR_PROTOCOL,
                      "rank %d: host segment %s: %s (magic %016" PRIx64 ", job %016" PRIx64 "); not used", n->p.rank,
                      n->path, what, h->magic, h->job);
}

/* The creator's path: a private file, filled, then linked under the group's name. */
static int try_create(oobx__node_t *n, int *created)
{
    char tmp[600];
    /* ranks may be threads of one process: the rank and a random part keep the names apart */
    snprintf(tmp, sizeof(tmp), "%s/.oobx-%u-%d-%d-%016" PRIx64 ".tmp", n->p.dir, (unsigned)geteuid(), (int)getpid(),
             n->p.rank, oobx__random64());
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return oobx__fail(n->p.log, OOBX_ERR_SYSTEM, "rank %d: cannot create a host segment in %s: %s", n->p.rank,
                          n->p.dir, strerror(errno));
    int rc = 0;
    if (ftruncate(fd, (off_t)n->size) != 0) {
        rc = oobx__fail(n->p.log, OOBX_ERR_SYSTEM, "rank %d: host segment of %zu bytes in %s: %s", n->p.rank, n->size,
                        n->p.dir, strerror(errno));
    } else {
        void *m = mmap(NULL, n->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            rc = oobx__fail(n->p.log, OOBX_ERR_SYSTEM, "rank %d: mmap of a host segment: %s", n->p.rank,
                            strerror(errno));
        } else {
            n->base = m;
            fill_header(n);
            if (link(tmp, n->path) == 0) {
                *created = 1;
            } else {
                int e = errno;
                munmap(n->base, n->size);
                n->base = NULL;
                if (e != EEXIST)
                    rc = oobx__fail(n->p.log, OOBX_ERR_SYSTEM, "rank %d: cannot name the host segment %s: %s",
                                    n->p.rank, n->path, strerror(e));
            }
        }
    }
    close(fd);
    unlink(tmp);
    return rc;
}

/* Another member made it: open and check what is there. 1 (nothing
 * recorded) when absent_ok and there is no such file yet. */
static int open_existing(oobx__node_t *n, int absent_ok)
{
    int fd = open(n->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && absent_ok) return 1;
    if (fd < 0)
        return oobx__fail(n->p.log, errno == ELOOP ? OOBX_ERR_PROTOCOL : OOBX_ERR_SYSTEM,
                          "rank %d: cannot open the host segment %s: %s%s", n->p.rank, n->path, strerror(errno),
                          errno == ELOOP ? " (a symbolic link: not used)" : "");
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = oobx__fail(n->p.log, OOBX_ERR_SYSTEM, "rank %d: fstat %s: %s", n->p.rank, n->path, strerror(errno));
    } else if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
        rc = oobx__fail(n->p.log, OOBX_ERR_PROTOCOL,
                        "rank %d: host segment %s is owned by uid %u with mode %03o, not by this job's user %u with "
                        "mode 600: someone else's file; not used",
                        n->p.rank, n->path, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777), (unsigned)geteuid());
    } else if ((size_t)st.st_size != n->size) {
        rc = oobx__fail(n->p.log, OOBX_ERR_PROTOCOL, "rank %d: host segment %s has %lld bytes, this group needs %zu; not used",
                        n->p.rank, n->path, (long long)st.st_size, n->size);
    } else {
        void *m = mmap(NULL, n->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            rc = oobx__fail(n->p.log, OOBX_ERR_SYSTEM, "rank %d: mmap %s: %s", n->p.rank, n->path, strerror(errno));
        } else {
            n->base = m;
            rc = check_header(n);
            if (rc != 0) {
                munmap(n->base, n->size);
                n->base = NULL;
            }
        }
    }
    close(fd);
    return rc;
}

static void layout(oobx__node_t *n)
{
    n->heap_off = NODE_HDR_BYTES + members_bytes(n->p.local_size) + (size_t)n->p.nranks * sizeof(node_slot_t);
    n->heap_off = (n->heap_off + 4095) & ~(size_t)4095;
    n->heap_bytes = (size_t)n->p.nranks * ((n->p.card_cap + 7) & ~(size_t)7);
    n->ag_off = (n->heap_off + n->heap_bytes + 4095) & ~(size_t)4095;
    n->data_off = n->ag_off + ((sizeof(node_ag_t) + 4095) & ~(size_t)4095);
    n->size = n->data_off + 2 * ((n->p.data_bytes + 4095) & ~(size_t)4095);
}

size_t oobx__node_size(const oobx__node_params_t *p)
{
    oobx__node_t n = {.p = *p};
    layout(&n);
    return n.size;
}

/* One more member has the table mapped; once every member has, the name is
 * not needed any more. */
static void segment_mapped(oobx__node_t *n)
{
    if (__atomic_add_fetch(&hdr(n)->opened, 1, __ATOMIC_ACQ_REL) == (uint32_t)n->p.local_size && n->named)
        unlink(n->path);
}

/* Maps the host's table (creating it if first), or fails. */
static int segment_open(const oobx__node_params_t *p, oobx__node_t **out)
{
    oobx__node_t *n = calloc(1, sizeof(*n));
    if (!n) return oobx__fail(p->log, OOBX_ERR_NOMEM, "rank %d: out of memory", p->rank);
    n->p = *p;
    layout(n);
    int rc = 0;
    if (p->local_size == 1) {
        /* alone on its host: the table is private */
        snprintf(n->path, sizeof(n->path), "(private)");
        void *m = mmap(NULL, n->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) rc = oobx__fail(p->log, OOBX_ERR_NOMEM, "rank %d: %zu bytes for the card table: %s",
                                             p->rank, n->size, strerror(errno));
        else {
            n->base = m;
            fill_header(n);
        }
    } else {
        n->named = 1;
        snprintf(n->path, sizeof(n->path), "%s/oobx-%u-%016" PRIx64 "-%d", p->dir, (unsigned)geteuid(), p->epoch,
                 p->leader);
        /* the first member creates it; the others (most of them) find it made:
         * one lookup each instead of a create, a link and an unlink in the
         * shared directory, whose lock thousands of ranks would queue on */
        rc = open_existing(n, 1);
        if (rc == 1) {
            int created = 0;
            rc = try_create(n, &created);
            if (rc == 0 && !created) rc = open_existing(n, 0);
        }
    }
    if (rc != 0) {
        free(n);
        return rc;
    }
    *out = n;
    return 0;
}

int oobx__node_join(const oobx__node_params_t *p, const void *card, size_t len, oobx__node_t **out)
{
    if (len == 0 || len > p->card_cap)
        return oobx__fail(p->log, OOBX_ERR_INVALID, "rank %d: a card of %zu bytes (1..%zu)", p->rank, len, p->card_cap);
    oobx__node_t *n = NULL;
    int rc = segment_open(p, &n);
    if (rc != 0) return rc;
    node_member_t *me = member(n, p->local_index);
    __atomic_store_n(&me->rank, p->rank, __ATOMIC_RELAXED);
    __atomic_store_n(&me->pid, (uint32_t)getpid(), __ATOMIC_RELEASE);
    segment_mapped(n);
    rc = oobx__node_put(n, p->rank, card, len);
    if (rc != 0) {
        oobx__node_leave(n);
        return rc;
    }
    /* only the leader waits, for all of them: the last card in wakes it */
    if (__atomic_add_fetch(&hdr(n)->ready, 1, __ATOMIC_RELEASE) == (uint32_t)p->local_size) wake_all(&hdr(n)->ready);
    *out = n;
    return 0;
}

int oobx__node_put(oobx__node_t *n, int rank, const void *card, size_t len)
{
    if (rank < 0 || rank >= n->p.nranks || len == 0 || len > n->p.card_cap)
        return oobx__fail(n->p.log, OOBX_ERR_PROTOCOL, "rank %d: a card of %zu bytes for rank %d (job of %d, at most %zu bytes)",
                          n->p.rank, len, rank, n->p.nranks, n->p.card_cap);
    node_slot_t *s = slot(n, rank);
    uint32_t zero = 0;
    if (!__atomic_compare_exchange_n(&s->len, &zero, NODE_SLOT_BUSY, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return oobx__fail(n->p.log, OOBX_ERR_PROTOCOL, "rank %d: the card of rank %d came twice", n->p.rank, rank);
    size_t room = (len + 7) & ~(size_t)7;
    uint64_t off = __atomic_fetch_add(&hdr(n)->heap_used, room, __ATOMIC_ACQ_REL);
    if (off + room > n->heap_bytes) /* every rank has a card's room; more means a rank wrote twice */
        return oobx__fail(n->p.log, OOBX_ERR_INTERNAL, "rank %d: the host's card heap is full", n->p.rank);
    memcpy(n->base + n->heap_off + off, card, len);
    __atomic_store_n(&s->off, (uint32_t)(off / 8), __ATOMIC_RELAXED);
    __atomic_store_n(&s->len, (uint32_t)len, __ATOMIC_RELEASE);
    __atomic_add_fetch(&hdr(n)->ncards, 1, __ATOMIC_RELEASE);
    return 0;
}

const unsigned char *oobx__node_card(const oobx__node_t *n, int rank, size_t *len)
{
    if (rank < 0 || rank >= n->p.nranks) return NULL;
    const node_slot_t *s = slot(n, rank);
    uint32_t l = __atomic_load_n(&s->len, __ATOMIC_ACQUIRE);
    if (l == 0 || l > n->p.card_cap) return NULL; /* not in, or being written */
    size_t off = (size_t)__atomic_load_n(&s->off, __ATOMIC_RELAXED) * 8;
    if (off + l > n->heap_bytes) return NULL;
    *len = l;
    return n->base + n->heap_off + off;
}

int oobx__node_count(const oobx__node_t *n)
{
    return (int)__atomic_load_n(&hdr(n)->ncards, __ATOMIC_ACQUIRE);
}

/* 0, or the status of an abort or the deadline (the caller says what it waited for). */
static int cancelled(const oobx__node_t *n)
{
    return oobx__sock_cancel_status(n->p.cancel);
}

int oobx__node_wait_members(oobx__node_t *n, const int *members)
{
    node_hdr_t *h = hdr(n);
    uint64_t check_at = oobx__now_ns() + NODE_CHECK_NS;
    for (;;) {
        uint32_t r = __atomic_load_n(&h->ready, __ATOMIC_ACQUIRE);
        if (r >= (uint32_t)n->p.local_size) return 0;
        int32_t st = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE);
        if (st < 0) {
            /* a member's init failed after its root had placed it here: it said why */
            char text[NODE_ERROR_MAX];
            snprintf(text, sizeof(text), "%s", h->error);
            return oobx__fail(n->p.log, st, "rank %d, leader of this host's %d ranks: a member failed: %s", n->p.rank,
                              n->p.local_size, text);
        }
        int check = time_to_check(&check_at);
        for (int k = 0; check && k < n->p.local_size; k++) {
            node_member_t *m = member(n, k);
            uint32_t pid = __atomic_load_n(&m->pid, __ATOMIC_ACQUIRE);
            size_t l;
            if (!oobx__node_card(n, members[k], &l) && pid_dead(pid))
                return oobx__fail(n->p.log, OOBX_ERR_REMOTE,
                                  "rank %d (pid %u) on this host died before its card was in (rank %d leads the host's "
                                  "%d ranks)",
                                  members[k], pid, n->p.rank, n->p.local_size);
        }
        int rc = cancelled(n);
        if (rc) {
            char missing[400] = "";
            int nmiss = 0;
            for (int k = 0; k < n->p.local_size; k++) {
                size_t l;
                if (oobx__node_card(n, members[k], &l)) continue;
                if (nmiss++ < 16) oobx__appendf(missing, sizeof(missing), "%srank %d", missing[0] ? ", " : "", members[k]);
            }
            return oobx__fail(n->p.log, rc,
                              "rank %d, leader of this host's %d ranks: %s while %d of them had not written their card "
                              "(%s%s; dead or stopped?)",
                              n->p.rank, n->p.local_size, rc == OOBX_ERR_TIMEOUT ? "timed out" : "aborted", nmiss,
                              missing, nmiss > 16 ? ", ..." : "");
        }
        wait_slice(n, &h->ready, r);
    }
}

void oobx__node_set_summary(oobx__node_t *n, int hosts, int over)
{
    hdr(n)->hosts = (uint32_t)hosts;
    hdr(n)->over = over ? 1u : 0u;
}

void oobx__node_summary(const oobx__node_t *n, int *hosts, int *over)
{
    *hosts = (int)hdr(n)->hosts;
    *over = (int)hdr(n)->over;
}

void oobx__node_tell_failure(const oobx__node_params_t *p, int status, const char *text)
{
    oobx__node_t *n = NULL;
    if (p->local_size <= 1 || segment_open(p, &n) != 0) return;
    segment_mapped(n); /* counted as one that mapped it, never as ready */
    oobx__node_finish(n, status, text);
    wake_all(&hdr(n)->ready);
    oobx__node_leave(n);
}

void oobx__node_finish(oobx__node_t *n, int status, const char *text)
{
    node_hdr_t *h = hdr(n);
    if (status != 0) snprintf(h->error, sizeof(h->error), "%s", text ? text : oobx_strerror(status));
    __atomic_store_n(&h->state, status ? status : 1, __ATOMIC_RELEASE);
    wake_all((uint32_t *)&h->state);
}

int oobx__node_wait_finish(oobx__node_t *n)
{
    node_hdr_t *h = hdr(n);
    uint64_t check_at = oobx__now_ns() + NODE_CHECK_NS;
    for (;;) {
        int32_t st = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE);
        if (st == 1) return 0;
        if (st < 0) {
            char text[NODE_ERROR_MAX];
            snprintf(text, sizeof(text), "%s", h->error);
            return oobx__fail(n->p.log, st, "rank %d: the exchange of this host's ranks (led by rank %d) failed: %s",
                              n->p.rank, n->p.leader, text);
        }
        uint32_t lpid = __atomic_load_n(&member(n, 0)->pid, __ATOMIC_ACQUIRE);
        /* (the state read again: a leader that finished and exited since is not dead to this wait) */
        if (time_to_check(&check_at) && pid_dead(lpid) && __atomic_load_n(&h->state, __ATOMIC_ACQUIRE) != 1)
            return oobx__fail(n->p.log, OOBX_ERR_REMOTE,
                              "rank %d: rank %d (pid %u), the leader of this host's %d ranks, died during the exchange",
                              n->p.rank, n->p.leader, lpid, n->p.local_size);
        int rc = cancelled(n);
        if (rc)
            return oobx__fail(n->p.log, rc, "rank %d: %s waiting for rank %d, the leader of this host's %d ranks (%d of "
                                            "%d cards in)",
                              n->p.rank, rc == OOBX_ERR_TIMEOUT ? "timed out" : "aborted", n->p.leader,
                              n->p.local_size, oobx__node_count(n), n->p.nranks);
        wait_slice(n, (uint32_t *)&h->state, 0);
    }
}

void oobx__node_leave(oobx__node_t *n)
{
    if (!n) return;
    /* gone already when every member mapped it (the last one removed it).
     * Otherwise some member has not come yet: a table that holds a failure
     * keeps its name, so that a member coming later reads the failure
     * instead of making a fresh table and waiting out its timeout (the last
     * of them removes it; a member that never comes leaves the few pages
     * written, in OOBX_NODE_DIR); any other table nobody else needs. */
    if (n->named && n->base && __atomic_load_n(&hdr(n)->opened, __ATOMIC_ACQUIRE) < (uint32_t)n->p.local_size &&
        __atomic_load_n(&hdr(n)->state, __ATOMIC_ACQUIRE) >= 0)
        unlink(n->path);
    if (n->base) munmap(n->base, n->size);
    free(n);
}

void oobx__node_set_cancel(oobx__node_t *n, const oobx_cancel_t *cancel)
{
    n->p.cancel = cancel;
}

const char *oobx__node_path(const oobx__node_t *n)
{
    return n->path;
}

/* ---- the node-aware allgather ---- */

size_t oobx__node_data_bytes(const oobx__node_t *n)
{
    return n->p.data_bytes;
}

unsigned char *oobx__node_data(const oobx__node_t *n, int b)
{
    return n->base + n->data_off + (size_t)b * ((n->p.data_bytes + 4095) & ~(size_t)4095);
}

const char *oobx__node_ag_error(const oobx__node_t *n)
{
    const node_ag_t *a = ag(n);
    return __atomic_load_n(&a->fail, __ATOMIC_ACQUIRE) ? a->error : NULL;
}

static int ag_failed(const oobx__node_t *n)
{
    const node_ag_t *a = ag(n);
    int32_t f = __atomic_load_n(&a->fail, __ATOMIC_ACQUIRE);
    if (!f) return 0;
    char text[NODE_ERROR_MAX];
    snprintf(text, sizeof(text), "%s", a->error);
    return oobx__fail(n->p.log, f, "rank %d: a node-aware collective of this host failed: %s", n->p.rank, text);
}

/* The host's ranks that have not joined the allgather in progress: ";
 * not joined: rank 5 (pid 123, stopped)". */
static uint32_t ag_round(const oobx__node_t *n, int b)
{
    /* the newest use any member joined */
    uint32_t top = 0;
    for (int k = 0; k < n->p.local_size; k++) {
        uint32_t v = __atomic_load_n(&member(n, k)->ag_seen[b], __ATOMIC_ACQUIRE);
        if (v > top) top = v;
    }
    return top;
}

static void ag_late(const oobx__node_t *n, char *out, size_t len)
{
    int nl = 0;
    for (int b = 0; b < 2; b++) {
        uint32_t top = ag_round(n, b);
        for (int k = 0; k < n->p.local_size && top; k++) {
            node_member_t *m = member(n, k);
            if (__atomic_load_n(&m->ag_seen[b], __ATOMIC_ACQUIRE) >= top) continue;
            uint32_t pid = __atomic_load_n(&m->pid, __ATOMIC_ACQUIRE);
            if (nl++ < 8)
                oobx__appendf(out, len, "%srank %d (pid %u%s)", nl == 1 ? "; not joined: " : ", ",
                              __atomic_load_n(&m->rank, __ATOMIC_RELAXED), pid,
                              pid_stopped(pid) ? ", stopped" : pid_dead(pid) ? ", dead" : "");
        }
    }
    if (nl > 8) oobx__appendf(out, len, ", ...");
}

/* Waits until *word reaches want; what: for the timeout's text; watch: the
 * pid of the rank whose death would leave this wait hanging (0: none). */
static int ag_wait(const oobx__node_t *n, uint32_t *word, uint32_t want, const char *what, int watch_index)
{
    uint64_t check_at = oobx__now_ns() + NODE_CHECK_NS;
    for (;;) {
        uint32_t v = __atomic_load_n(word, __ATOMIC_ACQUIRE);
        if ((int32_t)(v - want) >= 0) return 0;
        int rc = ag_failed(n);
        if (rc) return rc;
        if (!time_to_check(&check_at)) {
            /* pids are looked at every NODE_CHECK_NS, not at every wake-up */
        } else {
            /* a rank that did its part and exited since the word was read is
             * not dead to this wait: the word is read again after its pid */
            int first = watch_index >= 0 ? watch_index : 0, last = watch_index >= 0 ? watch_index : n->p.local_size - 1;
            for (int k = first; k <= last; k++) {
                node_member_t *m = member(n, k);
                uint32_t pid = __atomic_load_n(&m->pid, __ATOMIC_ACQUIRE);
                if (!pid_dead(pid)) continue;
                if ((int32_t)(__atomic_load_n(word, __ATOMIC_ACQUIRE) - want) >= 0) return 0;
                return oobx__fail(n->p.log, OOBX_ERR_REMOTE, "rank %d: rank %d (pid %u) on this host died while %s",
                                  n->p.rank, __atomic_load_n(&m->rank, __ATOMIC_RELAXED), pid, what);
            }
        }
        const oobx_cancel_t *cc = n->p.cancel;
        char why[700];
        if (cc && cc->poll && (rc = cc->poll(cc->poll_arg, why, sizeof(why))) != 0)
            return oobx__fail(n->p.log, rc, "rank %d: %s: %s", n->p.rank, what, why);
        rc = cancelled(n);
        if (rc) {
            char late[400] = "";
            ag_late(n, late, sizeof(late));
            return oobx__fail(n->p.log, rc, "rank %d: %s while %s%s", n->p.rank,
                              rc == OOBX_ERR_TIMEOUT ? "timed out" : "aborted", what, late);
        }
        wait_slice(n, word, v);
    }
}

int oobx__node_ag_enter(oobx__node_t *n, int b, uint32_t use, uint64_t bpr)
{
    node_ag_t *a = ag(n);
    int rc = ag_failed(n);
    if (rc) return rc;
    /* the previous use of this buffer is drained */
    rc = ag_wait(n, &a->left[b], use * (uint32_t)n->p.local_size, "waiting for the host's ranks to leave the last "
                                                                   "allgather or barrier",
                 -1);
    if (rc) return rc;
    __atomic_store_n(&member(n, n->p.local_index)->ag_bpr[b], bpr, __ATOMIC_RELAXED);
    return 0;
}

void oobx__node_ag_arrive(oobx__node_t *n, int b, uint32_t use)
{
    __atomic_store_n(&member(n, n->p.local_index)->ag_seen[b], use + 1, __ATOMIC_RELEASE);
    uint32_t v = __atomic_add_fetch(&ag(n)->arrive[b], 1, __ATOMIC_RELEASE);
    /* only the leader waits, for all of them: the last to arrive wakes it
     * (a wake-up per member cost the leader a context switch each) */
    if (v == (use + 1) * (uint32_t)n->p.local_size) wake_all(&ag(n)->arrive[b]);
}

int oobx__node_ag_wait_arrivals(oobx__node_t *n, int b, uint32_t use, uint64_t bpr, const char *op,
                                int *mismatch_rank, uint64_t *mismatch_bpr)
{
    char what[96];
    snprintf(what, sizeof(what), "the leader waited for the host's ranks to join %s", op);
    int rc = ag_wait(n, &ag(n)->arrive[b], (use + 1) * (uint32_t)n->p.local_size, what, -1);
    if (rc) return rc;
    *mismatch_rank = -1;
    for (int k = 0; k < n->p.local_size; k++) {
        uint64_t v = __atomic_load_n(&member(n, k)->ag_bpr[b], __ATOMIC_RELAXED);
        if (v != bpr) {
            *mismatch_rank = __atomic_load_n(&member(n, k)->rank, __ATOMIC_RELAXED);
            *mismatch_bpr = v;
            break;
        }
    }
    return 0;
}

void oobx__node_ag_done(oobx__node_t *n, int b, int status, const char *text)
{
    node_ag_t *a = ag(n);
    if (status) {
        uint32_t zero = 0;
        if (!__atomic_compare_exchange_n(&a->claimed, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return; /* failed already: the first failure's text stays */
        snprintf(a->error, sizeof(a->error), "%s", text ? text : oobx_strerror(status));
        __atomic_store_n(&a->fail, status, __ATOMIC_RELEASE);
        for (int k = 0; k < 2; k++) {
            wake_all(&a->done[k]);
            wake_all(&a->arrive[k]);
            wake_all(&a->left[k]);
        }
        return;
    }
    __atomic_add_fetch(&a->done[b], 1, __ATOMIC_RELEASE);
    wake_all(&a->done[b]);
}

int oobx__node_ag_wait_done(oobx__node_t *n, int b, uint32_t use, const char *op)
{
    char what[96];
    snprintf(what, sizeof(what), "waiting for the leader of this host's ranks to finish %s", op);
    return ag_wait(n, &ag(n)->done[b], use + 1, what, 0);
}

void oobx__node_ag_leave(oobx__node_t *n, int b, uint32_t use)
{
    uint32_t v = __atomic_add_fetch(&ag(n)->left[b], 1, __ATOMIC_RELEASE);
    /* the buffer's next use waits for all of them: the last to leave wakes */
    if (v == (use + 1) * (uint32_t)n->p.local_size) wake_all(&ag(n)->left[b]);
}

void oobx__node_wake(oobx__node_t *n)
{
    if (!n) return;
    node_ag_t *a = ag(n);
    for (int k = 0; k < 2; k++) {
        wake_all(&a->done[k]);
        wake_all(&a->arrive[k]);
        wake_all(&a->left[k]);
    }
    wake_all(&hdr(n)->ready);
    wake_all((uint32_t *)&hdr(n)->state);
}
