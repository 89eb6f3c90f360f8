/*
 * The UCX transport: a loadable module (liboobx-ucx.so) whose one export,
 * oobx_tp_module_init, hands the core oobx_ucx_ops.
 * docs/transports/ucx.md describes it for users; this is the short form.
 *
 * One UCP context and one worker per instance. The address blob is a small
 * header (magic, version, host, pid) and the worker address, carried by the
 * core as a variable-length card. Endpoints are created lazily, on the first
 * send to a peer (and, for a peer on another host, on the first message from
 * it, so that UCX's error handling watches it).
 *
 * Messages travel as UCX tag messages. The 64-bit UCX tag holds
 *
 *     bit 63      DATA: the payload of a large message (received zero-copy)
 *     bits 62-59  type (EAGER, HDR, DOORBELL, CREDIT, SETUP)
 *     bits 58-32  sender rank
 *     bits 31-0   per-sender sequence number
 *
 * The core does the matching (context, user tag, source); the transport only
 * moves messages in order. Every message but DATA lands in one of
 * UCX_PREPOST receives kept posted (mask = DATA bit; ucx_prepost_*), or,
 * when they are all taken, is found by ucp_tag_probe_nb. A message of up to
 * UCX_EAGER_MAX payload bytes is one EAGER message (header + payload, copied
 * into one buffer when small, else an iov); a larger one is a HDR message and
 * then a DATA message that is received by ucp_tag_recv_nbx straight into the
 * buffer the core's msg_begin returned, matched exactly by (DATA, sender,
 * sequence).
 *
 * Ring links (OOBX_UCX_RING): the receiver of the link prev -> me maps a ring
 * buffer (ucp_mem_map) and sends its packed rkey to prev (SETUP). At its first
 * send to next the sender picks the path (ucx_ring_choose); on the ring it
 * writes the chunks of a message with ucp_put_nbx (or plain copies when the
 * ring is mapped here), fences, and rings one DOORBELL for them (puts do not
 * wake the receiver's event fd). The receiver copies each chunk out, frees the
 * slot and returns CREDITs in batches. The slot/credit bookkeeping is
 * src/ringbuf.c, shared with verbs/.
 *
 * Delivery order: records of every incoming message are kept per sender in
 * the order of the tag's sequence number (a posted receive of a rendezvous
 * message completes after later ones); msg_begin is called in that order,
 * for the next number only, as soon as the header is in, and msg_end in
 * that order once the payload is in place.
 *
 * Waiting: wait_prepare() arms the worker (ucp_worker_arm) and hands out
 * ucp_worker_get_efd(); it caps the sleep so that failure checks run while
 * the core sleeps: UCX's keepalive for peers on other hosts, a pid check for
 * peers on this host (UCX 1.13's shared-memory transports have no peer
 * failure handling).
 *
 * The files: ucx.c (this one: the ops, create and destroy, progress and
 * waiting, endpoints and peer failures), ucx_dev.c (devices, the address
 * card, ucx_describe), ucx_ring.c (the ring link), ucx_msg.c (tag
 * messages, the send and receive records), ucx_int.h (what they share),
 * ucx_wire.c (the parsers of what other processes send).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>

#include "log.h"
#include "transport.h"
#include "util.h"
#include "ucx_int.h"
#include "ucx_wire.h"

extern const oobx_tp_ops_t oobx_ucx_ops;

/* ---- peers and failures ------------------------------------------------------- */

/* ---- UCX's own log lines ----
 *
 * UCX logs through a process-wide list of handlers. The module pushes one,
 * once per process; it speaks for a transport only while this thread is
 * inside one of its ops (ucx_log_tp, set by the op wrappers at the end of
 * this file), and sends the line to that communicator's log:
 *  - inside create, at WARN: what UCX says of its configuration (an unknown
 *    transport in UCX_TLS, a device it cannot use) is for the user;
 *  - otherwise at DEBUG: a flush that fails because the peer closed first,
 *    a shared-memory FIFO of a peer that has left, a full listen backlog
 *    that UCX retries. A failure that matters comes back from UCX as a
 *    status, and oobx reports it itself, naming the rank.
 * Lines from threads outside our ops (another UCX user in the process,
 * UCX's async thread) and everything under UCX_LOG_LEVEL go to UCX's own
 * handler, as they would without oobx. */
/* initial-exec: the module is opened with dlopen, and the global-dynamic
 * model made every access (two an op, progress included) a call of
 * __tls_get_addr; one pointer fits the static TLS that glibc keeps for
 * modules loaded later */
static __thread ucx_tp_t *ucx_log_tp __attribute__((tls_model("initial-exec")));
static pthread_once_t ucx_log_once = PTHREAD_ONCE_INIT;

static ucs_log_func_rc_t ucx_log_handler(const char *file, unsigned line, const char *function,
                                         ucs_log_level_t level, const ucs_log_component_config_t *comp,
                                         const char *fmt, va_list ap)
{
    (void)function;
    (void)comp;
    ucx_tp_t *tp = ucx_log_tp;
    if (!tp || tp->ucx_log_user || level > UCS_LOG_LEVEL_WARN) return UCS_LOG_FUNC_RC_CONTINUE;
    char text[512];
    vsnprintf(text, sizeof(text), fmt, ap);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    const char *lv = level <= UCS_LOG_LEVEL_ERROR ? "error" : "warning";
    /* our own tcp and shared-memory settings, left unused where no such interface opens */
    int ours = (tp->tcp_put_off && strstr(text, "invalid configuration: PUT_ENABLE=")) ||
               (tp->mm_grow_set && strstr(text, "invalid configuration: MM_RX_BUFS_GROW="));
    if (tp->creating && !ours)
        OOBX_WARN(tp->log, "ucx: UCX %s (%s:%u): %s", lv, base, line, text);
    else
        OOBX_DEBUG(tp->log, "ucx: UCX %s (%s:%u)%s: %s", lv, base, line, tp->destroying ? " at destroy" : "", text);
    return UCS_LOG_FUNC_RC_STOP;
}

static void ucx_log_push(void) { ucs_log_push_handler(ucx_log_handler); }

/* Makes tp the transport this thread's UCX calls speak for; returns the one before. */
static ucx_tp_t *ucx_log_enter(ucx_tp_t *tp)
{
    ucx_tp_t *prev = ucx_log_tp;
    ucx_log_tp = tp;
    return prev;
}

static void ucx_log_leave(ucx_tp_t **prev) { ucx_log_tp = *prev; }

/* for the rest of the enclosing block */
#define UCX_LOG_SCOPE(tp) ucx_tp_t *ucx_log_prev_ __attribute__((cleanup(ucx_log_leave))) = ucx_log_enter(tp)

void ucx_mark_dirty(ucx_tp_t *tp, int peer)
{
    oobx__dirty_mark(&tp->peers[peer].dirty, tp->dirty, &tp->ndirty, peer);
}

/* Begins and ends, in order, what arrived from the peers marked dirty. */
static void ucx_drain_dirty(ucx_tp_t *tp)
{
    while (tp->ndirty > 0) {
        int peer = tp->dirty[--tp->ndirty];
        tp->peers[peer].dirty = 0;
        ucx_peer_drain(tp, peer);
    }
}

void ucx_peer_fail(ucx_tp_t *tp, int peer, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    oobx__peer_fail_vrecord(&tp->peers[peer].fail, &tp->fail_pending, status, fmt, ap);
    va_end(ap);
}

static void ucx_ep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    ucx_peer_t *p = arg;
    ucx_peer_fail(p->tp, p->rank, OOBX_ERR_REMOTE, "ucx: link to rank %d (%s pid %u) failed: %s",
                  p->rank, p->host, p->pid, ucs_status_string(status));
}

/* 0 when the process is gone or a zombie (its memory and files are gone). */
int ucx_pid_alive(uint32_t pid)
{
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : 1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *e = strrchr(buf, ')');
    if (e && e[1] == ' ' && (e[2] == 'Z' || e[2] == 'X')) return 0;
    /* a process being killed closes its files (its shared-memory fds among
     * them) before it is a zombie: the kernel's PF_EXITING flag (0x4, the
     * seventh field after the name) says so */
    unsigned long flags = 0;
    char state;
    if (e && sscanf(e + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) == 2 && (flags & 0x4ul)) return 0;
    return 1;
}

int ucx_peer_known(ucx_tp_t *tp, int peer)
{
    if (!tp->peers[peer].addr && tp->sink.need_peer) (void)tp->sink.need_peer(tp->sink.core, peer);
    return tp->peers[peer].addr != NULL;
}

/* Starts watching the pid of a peer on this host (see ucx_peer_ep). */
void ucx_peer_watch(ucx_tp_t *tp, int peer)
{
    ucx_peer_t *p = &tp->peers[peer];
    if (p->watch_pid || !p->addr || strcmp(p->host, tp->host) != 0) return;
    p->watch_pid = 1;
    tp->nwatch++;
}

ucp_ep_h ucx_peer_ep(ucx_tp_t *tp, int peer)
{
    ucx_peer_t *p = &tp->peers[peer];
    if (p->ep || p->fail.failed) return p->ep;
    if (!ucx_peer_known(tp, peer)) return NULL;
    /* UCX 1.13's shared-memory transports have no peer failure handling, and
     * an endpoint that asks for it is built without them (tcp only, or nothing
     * under UCX_TLS=posix,self). So a peer on this host gets an endpoint
     * without error handling, and its death is seen from its pid; a peer on
     * another host gets UCX's error handling (keepalive, connection errors).
     * (Error handling for same-host peers over tcp alone was tried: UCX 1.13's
     * tcp transport then hits an internal assertion when a connect to a dead
     * peer is refused, and aborts the process.) */
    int same_host = strcmp(p->host, tp->host) == 0;
    ucp_ep_params_t ep_params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address = p->addr,
        .err_mode = same_host ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER,
    };
    if (!same_host) {
        ep_params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
        ep_params.err_handler.cb = ucx_ep_err_cb;
        ep_params.err_handler.arg = p;
    }
    ucs_status_t st = ucp_ep_create(tp->worker, &ep_params, &p->ep);
    if (st != UCS_OK && !same_host) {
        OOBX_WARN(tp->log, "ucx: no transport with peer failure handling reaches rank %d (%s pid %u): %s; "
                  "a failure of rank %d is seen only by timeouts",
                  peer, p->host, p->pid, ucs_status_string(st), peer);
        ep_params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        ep_params.field_mask &= ~(uint64_t)UCP_EP_PARAM_FIELD_ERR_HANDLER;
        st = ucp_ep_create(tp->worker, &ep_params, &p->ep);
    }
    if (st != UCS_OK) {
        p->ep = NULL;
        if (same_host && !ucx_pid_alive(p->pid))
            /* its shared memory went with it: the peer died, not the settings */
            ucx_peer_fail(tp, peer, OOBX_ERR_REMOTE, "ucx: rank %d (%s pid %u) died: its process is gone (%s "
                          "creating an endpoint to it)",
                          peer, p->host, p->pid, ucs_status_string(st));
        else
            ucx_peer_fail(tp, peer, OOBX_ERR_REMOTE, "ucx: cannot create an endpoint to rank %d (%s pid %u): %s "
                          "(check UCX_TLS and UCX_NET_DEVICES)",
                          peer, p->host, p->pid, ucs_status_string(st));
        return NULL;
    }
    if (same_host) ucx_peer_watch(tp, peer);
    if (tp->log && tp->log->level >= OOBX_LOG_TRACE) {
        char *text = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&text, &n);
        if (f) {
            ucp_ep_print_info(p->ep, f);
            fclose(f);
            OOBX_TRACE(tp->log, "ucx: endpoint to rank %d:\n%s", peer, text);
            free(text);
        }
    }
    return p->ep;
}

/* ---- failures, progress and waiting ----------------------------------------------- */

/* Drops every record of a failed peer (cancelling payload receives). */
static void ucx_peer_drop(ucx_tp_t *tp, int peer)
{
    ucx_peer_t *p = &tp->peers[peer];
    for (ucx_rrec_t *r = p->rx_head; r;) {
        ucx_rrec_t *next = r->next;
        if (r->data_ureq && !r->complete) ucp_request_cancel(tp->worker, r->data_ureq);
        if (r->ureq && !r->arrived) ucp_request_cancel(tp->worker, r->ureq);
        if ((r->data_ureq && !r->complete) || (r->ureq && !r->arrived)) {
            /* its callback is still to come: keep the record until then */
            r->next = tp->orphans;
            tp->orphans = r;
        } else {
            ucx_rrec_free(r);
        }
        r = next;
    }
    p->rx_head = p->rx_tail = NULL;
    ucx_pull_drop(tp, peer);
    /* Sends to it still in UCX's hands fail now: without error handling (same-host
     * peers) UCX may never complete them. The core's record is done; the UCX
     * request finishes (or is cancelled at destroy) on its own. */
    for (ucx_sreq_t *s = tp->live; s; s = s->live_next)
        if (s->peer == peer && s->req && !tp->destroying) {
            s->req->status = oobx__peer_fail_status(&p->fail);
            s->req->done = 1;
            s->req = NULL;
        }
    if (tp->rrx.cur && tp->rrx.peer == peer) tp->rrx.cur = NULL;
    if (tp->rtx.peer == peer) {
        for (ucx_sreq_t *s = tp->rtx.q_head; s;) {
            ucx_sreq_t *next = s->next;
            if (!s->status) s->status = oobx__peer_fail_status(&p->fail);
            s->next = NULL;
            ucx_sreq_issued(s);
            s = next;
        }
        tp->rtx.q_head = tp->rtx.q_tail = NULL;
        tp->rtx.active = 0;
    }
}

/* The departure board of this job on this host (ucx_int.h): one file in
 * /dev/shm per communicator magic and user, a byte per rank. Every rank maps
 * it at create (before any rank can leave: init needs all of them); the
 * first to leave removes the name. Without it (no /dev/shm) a same-host
 * peer's orderly exit looks like a death when no goodbye could reach. */
static void ucx_board_open(ucx_tp_t *tp)
{
    snprintf(tp->board_path, sizeof(tp->board_path), "/dev/shm/oobx-ucx-%016llx-%u", (unsigned long long)tp->magic,
             (unsigned)getuid());
    int fd = open(tp->board_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_uid != getuid() || !S_ISREG(st.st_mode)) {
        OOBX_DEBUG(tp->log, "ucx: no departure board at %s (%s): a same-host peer's exit after destroy may be "
                   "taken for a failure", tp->board_path, fd < 0 ? strerror(errno) : "not this user's file");
        if (fd >= 0) close(fd);
        return;
    }
    size_t len = (size_t)tp->nranks;
    void *m = MAP_FAILED;
    if ((size_t)st.st_size >= len || ftruncate(fd, (off_t)len) == 0)
        m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        OOBX_DEBUG(tp->log, "ucx: cannot map the departure board %s: %s", tp->board_path, strerror(errno));
        return;
    }
    tp->board = m;
    tp->board_len = len;
}

static void ucx_board_close(ucx_tp_t *tp)
{
    if (!tp->board) return;
    munmap(tp->board, tp->board_len);
    tp->board = NULL;
    unlink(tp->board_path); /* the first to leave; the others find it gone */
}

/* Peers on this host: a pid that is gone is a dead peer. */
static void ucx_watch_pids(ucx_tp_t *tp)
{
    /* the coarse clock (a tick's resolution against a period of
     * UCX_WATCH_MS), and only every UCX_WATCH_EVERY calls of a polling
     * rank: a clock read costs more than an idle pass. The first progress
     * after a sleep always looks (a sleep lasts at most UCX_WATCH_MS) */
    if (!tp->watch_now && ++tp->watch_turn % UCX_WATCH_EVERY) return;
    tp->watch_now = 0;
    uint64_t now = oobx__now_coarse_ns();
    if (now < tp->next_watch_ns) return;
    tp->next_watch_ns = now + (uint64_t)UCX_WATCH_MS * 1000000u;
    for (int i = 0; i < tp->nranks; i++) {
        ucx_peer_t *p = &tp->peers[i];
        if (!p->watch_pid || p->fail.failed) continue;
        /* kill(pid, 0) only: one cheap call per peer (a zombie is caught by
         * the next check, once its parent has reaped it) */
        if (kill((pid_t)p->pid, 0) != 0 && errno == ESRCH) {
            /* what it sent before it went (its goodbye among it) is here
             * already: take it in first, so that a rank that left in order
             * is not taken for a failed one */
            for (int n = 0; n < 256 && ucp_worker_progress(tp->worker); n++) {
            }
            ucx_probe(tp);
            ucx_drain_dirty(tp);
            if (p->fail.failed) continue;
            if (tp->board && __atomic_load_n(&tp->board[i], __ATOMIC_ACQUIRE)) {
                /* it left in order: a goodbye that could not come */
                if (tp->sink.peer_left) tp->sink.peer_left(tp->sink.core, i);
                ucx_peer_fail(tp, i, OOBX_ERR_REMOTE, "ucx: rank %d (%s pid %u) has exited after releasing its "
                              "communicator", i, p->host, p->pid);
            } else {
                ucx_peer_fail(tp, i, OOBX_ERR_REMOTE, "ucx: rank %d (%s pid %u) has exited", i, p->host, p->pid);
            }
        }
    }
}

static oobx__peer_fail_t *ucx_fail_of(void *base, int peer)
{
    return &((ucx_tp_t *)base)->peers[peer].fail;
}

/* Before the core hears of it: the peer's records go, and its endpoint. */
static void ucx_fail_drop(void *base, int peer)
{
    ucx_tp_t *tp = base;
    ucx_peer_t *p = &tp->peers[peer];
    ucx_peer_drop(tp, peer);
    if (p->ep) {
        ucp_request_param_t prm = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
            .flags = UCP_EP_CLOSE_FLAG_FORCE,
        };
        ucs_status_ptr_t ptr = ucp_ep_close_nbx(p->ep, &prm);
        if (ptr && !UCS_PTR_IS_ERR(ptr)) {
            for (int k = 0; k < 1000 && ucp_request_check_status(ptr) == UCS_INPROGRESS; k++)
                ucp_worker_progress(tp->worker);
            ucp_request_free(ptr);
        }
        p->ep = NULL;
    }
}

void ucx_report_failures(ucx_tp_t *tp)
{
    static const oobx__peer_fail_ops_t ops = {.get = ucx_fail_of, .drop = ucx_fail_drop};
    oobx__peer_fail_report(tp, tp->nranks, &ops, &tp->sink, tp->log, &tp->fail_pending);
}

static void ucx_orphans_sweep(ucx_tp_t *tp)
{
    for (ucx_rrec_t **pp = &tp->orphans; *pp;) {
        ucx_rrec_t *r = *pp;
        if ((r->data_ureq && !r->complete) || (r->ureq && !r->arrived)) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        ucx_rrec_free(r);
    }
}

/* Sleeps on the worker's event fd and the core's wake fd in one call (no
 * endpoint lock held: touches only what it records). */
static int ucx_sleep(oobx_tp_t *base, struct pollfd *fds, int nfds, int timeout_ms)
{
    (void)fds; /* the wake fd is in sleep_fd's set, and the worker's fd is what wait_prepare gave */
    (void)nfds;
    ucx_tp_t *tp = (ucx_tp_t *)base;
    struct epoll_event evs[2];
    int n = epoll_wait(tp->sleep_fd, evs, 2, timeout_ms);
    for (int i = 0; i < n; i++)
        if (evs[i].data.u32 == 1) tp->woken = 1;
    return 0;
}

static int ucx_progress(oobx_tp_t *base)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    if (tp->woken) {
        uint64_t v;
        ssize_t r = read(tp->wake_fd, &v, sizeof(v));
        (void)r;
        tp->woken = 0;
    }
    if (tp->fatal) return tp->fatal;
    if (tp->orphans) ucx_orphans_sweep(tp);
    /* one pass: wait_prepare() finds anything that came in meanwhile (arm
     * says busy) and the core calls progress() again */
    /* until a kept receive has a message: it goes to the core now, what
     * else UCX holds at the next pass */
    for (int n = 0; n < 256 && !tp->pp_done_head && ucp_worker_progress(tp->worker); n++) {
    }
    ucx_probe(tp);
    if (tp->fatal) return tp->fatal;
    unsigned ctrl_sent = tp->ctrl_sent;
    ucx_drain_dirty(tp);
    /* what the drain sent (credits, pull answers) leaves now: arming the
     * worker does not count sends UCX still holds, and a peer may wait on them */
    if (tp->ctrl_sent != ctrl_sent)
        for (int n = 0; n < 256 && ucp_worker_progress(tp->worker); n++) {
        }
    if (tp->nwatch) ucx_watch_pids(tp);
    if (tp->fail_pending) ucx_report_failures(tp);
    return 0;
}

static int ucx_wait_prepare(oobx_tp_t *base, struct pollfd *fds, int max, int *nfds, int *timeout_ms)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    *nfds = 0;
    ucx_prepost_refill(tp); /* all of them posted before a sleep (one that completes at once: busy) */
    if (tp->fatal || tp->ndirty || tp->fail_pending || tp->pp_done_head) return 1;
    if (max < 1) return 1;
    ucs_status_t st = ucp_worker_arm(tp->worker);
    if (st == UCS_ERR_BUSY) return 1;
    if (st != UCS_OK) {
        tp->fatal = oobx__fail(tp->log, OOBX_ERR_INTERNAL, "ucx: ucp_worker_arm: %s", ucs_status_string(st));
        return 1;
    }
    /* a message UCX took in outside progress() (endpoint creation and sends
     * may progress internally) waits in its unexpected queue and raises no
     * event: look once more */
    ucp_tag_recv_info_t info;
    if (tp->ndirty) return 1;
    if (ucp_tag_probe_nb(tp->worker, 0, UCX_TAG_DATA, 0, &info) != NULL) {
        tp->probe_due = 1; /* progress() takes it */
        return 1;
    }
    fds[0].fd = tp->efd;
    fds[0].events = POLLIN;
    fds[0].revents = 0;
    *nfds = 1;
    int cap = tp->nwatch ? UCX_WATCH_MS : UCX_KEEPALIVE_MS;
    if (*timeout_ms < 0 || *timeout_ms > cap) *timeout_ms = cap;
    tp->watch_now = 1;
    return 0;
}

/* ---- life cycle ---------------------------------------------------------------------- */

static void ucx_destroy(oobx_tp_t *base);

static int ucx_parse_ring_mode(const char *s)
{
    if (!s || !*s || !strcmp(s, "auto")) return UCX_RING_AUTO;
    if (!strcmp(s, "put")) return UCX_RING_PUT;
    if (!strcmp(s, "tag")) return UCX_RING_TAG;
    return -1;
}

/* "Cannot run here" is not an error under OOBX_TRANSPORT=auto (the core
 * falls back to sockets and says why): recorded, logged at info level. */
static int ucx_unavailable(const oobx_log_t *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int ucx_unavailable(const oobx_log_t *log, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log->api->set_last_error("%s", msg);
    OOBX_INFO(log, "%s", msg);
    return OOBX_ERR_UNAVAILABLE;
}

int ucx_mm_pools_sized_by_user(void)
{
    return getenv("UCX_MM_RX_BUFS_GROW") || getenv("UCX_POSIX_RX_BUFS_GROW") || getenv("UCX_SYSV_RX_BUFS_GROW");
}

static int ucx_create(const oobx_tp_params_t *p, oobx_tp_t **out)
{
    const oobx_settings_t *set = p->settings;
    if (p->nranks < 1 || p->nranks > UCX_RANKS_MAX || p->rank < 0 || p->rank >= p->nranks)
        return oobx__fail(p->log, OOBX_ERR_INVALID, "ucx: rank %d of %d (at most %d ranks)", p->rank,
                         p->nranks, UCX_RANKS_MAX);
    ucx_settings_t own;
    int rc0 = p->core->settings_parse(ucx_settings_table, &own, p->log);
    if (rc0 != 0) return rc0;
    int mode = ucx_parse_ring_mode(own.ring);
    if (mode < 0)
        return oobx__fail(p->log, OOBX_ERR_INVALID, "ucx: OOBX_UCX_RING=%s; use auto, put or tag", own.ring);
    ucx_tp_t *tp = calloc(1, sizeof(*tp));
    if (!tp) return oobx__fail(p->log, OOBX_ERR_NOMEM, "ucx: out of memory");
    tp->base.ops = &oobx_ucx_ops;
    tp->rank = p->rank;
    tp->nranks = p->nranks;
    tp->magic = p->magic;
    tp->settings = set;
    tp->cma_min = own.pull ? set->cma_min : 0;
    oobx__cma_self_init(&tp->cma, tp->cma_min > 0);
    tp->log = p->log;
    tp->sink = p->sink;
    tp->efd = -1;
    tp->sleep_fd = -1;
    tp->wake_fd = p->wake_fd;
    tp->ring_mode = mode;
    UCX_LOG_SCOPE(tp);
    tp->creating = 1;
    tp->ucx_log_user = getenv("UCX_LOG_LEVEL") != NULL;
    pthread_once(&ucx_log_once, ucx_log_push);
    tp->rrx.peer = -1;
    tp->rtx.peer = -1;
    tp->rtx.early_peer = -1;
    if (gethostname(tp->host, sizeof(tp->host)) != 0) snprintf(tp->host, sizeof(tp->host), "?");
    tp->host[sizeof(tp->host) - 1] = '\0';
    tp->peers = calloc((size_t)p->nranks, sizeof(*tp->peers));
    tp->dirty = calloc((size_t)p->nranks, sizeof(*tp->dirty));
    if (!tp->peers || !tp->dirty) {
        ucx_destroy(&tp->base);
        return oobx__fail(p->log, OOBX_ERR_NOMEM, "ucx: out of memory for %d peers", p->nranks);
    }
    for (int i = 0; i < p->nranks; i++) {
        tp->peers[i].tp = tp;
        tp->peers[i].rank = i;
    }
    ucx_board_open(tp);

    int rc = OOBX_ERR_UNAVAILABLE;
    ucp_config_t *cfg = NULL;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) {
        rc = ucx_unavailable(p->log, "ucx: cannot read the UCX configuration: %s",
                       ucs_status_string(st));
        goto out_destroy;
    }
    /* OOBX_NET_DEVICE narrows this communicator only; UCX_NET_DEVICES and
     * UCX_TLS of the user are kept otherwise (ucp_config_read read them). */
    if (set->net_device[0]) {
        st = ucp_config_modify(cfg, "NET_DEVICES", set->net_device);
        if (st != UCS_OK) {
            ucp_config_release(cfg);
            rc = oobx__fail(p->log, OOBX_ERR_INVALID, "ucx: OOBX_NET_DEVICE=%s refused by UCX: %s",
                           set->net_device, ucs_status_string(st));
            goto out_destroy;
        }
        OOBX_INFO(p->log, "ucx: network device %s (OOBX_NET_DEVICE)", set->net_device);
    } else if (!getenv("UCX_NET_DEVICES")) {
        char dev[64];
        ucx_pick_device(set, p->log, dev, sizeof(dev));
        if (dev[0] && ucp_config_modify(cfg, "NET_DEVICES", dev) != UCS_OK)
            OOBX_WARN(p->log, "ucx: UCX refused device %s; UCX chooses", dev);
    }
    /* UCX finds dead peers by keepalive; its default period (20 s) is longer
     * than a bootstrap should wait to hear of one. */
    if (!getenv("UCX_KEEPALIVE_INTERVAL")) ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", UCX_KEEPALIVE_DEFAULT);
    /* UCX 1.13's cma transport (rendezvous by process_vm_readv) treats a
     * peer that died during a transfer as a fatal error and aborts this
     * process: a surviving rank must get OOBX_ERR_REMOTE instead. So cma is
     * left out unless the user chose the transports. */
    /* UCX 1.13's tcp transport fails an internal assertion (tcp_ep.c:939,
     * a put acknowledgement it no longer waits for) and aborts a surviving
     * rank when a rendezvous put meets a peer's death; without put zcopy its
     * rendezvous goes by active messages, which fail cleanly. */
    if (!getenv("UCX_TCP_PUT_ENABLE")) {
        /* an interface setting: named without its transport's prefix */
        if (ucp_config_modify(cfg, "PUT_ENABLE", "n") == UCS_OK)
            tp->tcp_put_off = 1;
        else
            OOBX_DEBUG(p->log, "ucx: UCX refused PUT_ENABLE=n for tcp");
    }
    /* UCX's shared-memory transports take 512 receive buffers of 8 KiB
     * each (4 MiB of /dev/shm a rank) and write every one at worker
     * creation: most of the worker's start-up (VM: 18 of 32 ms) for a
     * channel that holds a few messages at a time. 64 to begin with; the
     * pool still grows by 64 when more are held. */
    if (!ucx_mm_pools_sized_by_user()) {
        if (ucp_config_modify(cfg, "MM_RX_BUFS_GROW", UCX_MM_RX_GROW_DEFAULT) == UCS_OK)
            tp->mm_grow_set = 1;
        else
            OOBX_DEBUG(p->log, "ucx: UCX refused MM_RX_BUFS_GROW=%s", UCX_MM_RX_GROW_DEFAULT);
    }
    const char *user_tls = getenv("UCX_TLS");
    if (!user_tls) {
        /* sysv is a second shared-memory transport beside posix, with a
         * receive pool of its own to set up, and nothing posix lacks */
        if (ucp_config_modify(cfg, "TLS", "^cma,sysv") != UCS_OK)
            OOBX_WARN(p->log, "ucx: UCX refused TLS=^cma,sysv; a peer dying during a shared-memory rendezvous may "
                      "abort this process");
    } else if (strstr(user_tls, "cma") && user_tls[0] != '^') {
        OOBX_INFO(p->log, "ucx: UCX_TLS=%s includes cma: with UCX 1.13 a peer dying during a rendezvous over cma "
                  "aborts this process", user_tls);
    }

    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
        .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP,
        .mt_workers_shared = 0,
        .estimated_num_eps = (size_t)p->nranks,
    };
    st = ucp_init(&params, cfg, &tp->ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        tp->ctx = NULL;
        const char *tls = getenv("UCX_TLS"), *nd = getenv("UCX_NET_DEVICES");
        rc = ucx_unavailable(p->log, "ucx: ucp_init failed: %s (UCX_TLS=%s, UCX_NET_DEVICES=%s, OOBX_NET_DEVICE=%s; "
                             "`ucx_info -d` lists the transports and devices)",
                             ucs_status_string(st), tls ? tls : "(all)", nd ? nd : "(all)",
                             set->net_device[0] ? set->net_device : "(unset)");
        goto out_destroy;
    }
    ucp_worker_params_t wp = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SERIALIZED,
    };
    st = ucp_worker_create(tp->ctx, &wp, &tp->worker);
    if (st != UCS_OK) {
        tp->worker = NULL;
        rc = ucx_unavailable(p->log, "ucx: cannot create a worker: %s", ucs_status_string(st));
        goto out_destroy;
    }
    st = ucp_worker_get_efd(tp->worker, &tp->efd);
    if (st != UCS_OK) {
        rc = ucx_unavailable(p->log, "ucx: worker has no event fd: %s", ucs_status_string(st));
        goto out_destroy;
    }
    /* one epoll set for both fds: a sleep is one epoll_wait, with no wait
     * queues to register and remove per call as poll() has */
    tp->sleep_fd = epoll_create1(EPOLL_CLOEXEC);
    if (tp->sleep_fd < 0) {
        rc = ucx_unavailable(p->log, "ucx: epoll_create1: %s", strerror(errno));
        goto out_destroy;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 0};
    int erc = epoll_ctl(tp->sleep_fd, EPOLL_CTL_ADD, tp->efd, &ev);
    if (erc == 0 && tp->wake_fd >= 0) {
        ev.data.u32 = 1;
        erc = epoll_ctl(tp->sleep_fd, EPOLL_CTL_ADD, tp->wake_fd, &ev);
    }
    if (erc != 0) {
        rc = ucx_unavailable(p->log, "ucx: epoll_ctl: %s", strerror(errno));
        goto out_destroy;
    }
    st = ucp_worker_get_address(tp->worker, &tp->my_addr, &tp->my_addr_len);
    if (st != UCS_OK) {
        tp->my_addr = NULL;
        rc = ucx_unavailable(p->log, "ucx: no worker address: %s", ucs_status_string(st));
        goto out_destroy;
    }
    if (sizeof(ucx_blob_hdr_t) + tp->my_addr_len > OOBX_ADDR_MAX) {
        rc = ucx_unavailable(p->log,
                       "ucx: the worker address is %zu bytes, more than the %d an address card holds; "
                       "narrow UCX_TLS or OOBX_NET_DEVICE",
                       tp->my_addr_len, OOBX_ADDR_MAX - (int)sizeof(ucx_blob_hdr_t));
        goto out_destroy;
    }
    rc = ucx_prepost_start(tp);
    if (rc) goto out_destroy;
    OOBX_DEBUG(p->log, "ucx: worker ready, address of %zu bytes, ring %s", tp->my_addr_len,
               ucx_ring_mode_name(mode));
    tp->creating = 0;
    *out = &tp->base;
    return 0;

out_destroy:
    tp->creating = 0;
    ucx_destroy(&tp->base);
    return rc;
}

static void ucx_peer_name(oobx_tp_t *base, int peer, char *buf, size_t len)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    if (peer >= 0 && peer < tp->nranks && ucx_peer_known(tp, peer))
        snprintf(buf, len, "rank %d (ucx %s pid %u)", peer, tp->peers[peer].host, tp->peers[peer].pid);
    else
        snprintf(buf, len, "rank %d (ucx)", peer);
}

/* Progresses the worker until req completes or ms pass. */
void ucx_wait_req(ucx_tp_t *tp, ucs_status_ptr_t req, int ms)
{
    if (req == NULL || UCS_PTR_IS_ERR(req)) return;
    uint64_t deadline = oobx__deadline(ms);
    while (ucp_request_check_status(req) == UCS_INPROGRESS && oobx__now_ns() < deadline)
        ucp_worker_progress(tp->worker);
    if (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_request_cancel(tp->worker, req);
    ucp_request_free(req);
}

/* Takes and drops the messages still queued in UCX (so none is left
 * unmatched), up to the first that may be a rendezvous request: the
 * endpoints are closed by now, and receiving such a request makes UCX 1.13
 * look up its endpoint, which may be half gone (a close that did not finish
 * in time was cancelled): an assertion in UCX's worker. What is left goes
 * with the worker. */
#define UCX_DISCARD_EAGER_MAX 1024
static void ucx_discard_unexpected(ucx_tp_t *tp)
{
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    for (int k = 0; k < 100000 && ucp_tag_probe_nb(tp->worker, 0, 0, 0, &info) != NULL; k++) {
        if (info.length > UCX_DISCARD_EAGER_MAX) {
            OOBX_DEBUG(tp->log, "ucx: at destroy, left a queued message of %zu bytes (tag 0x%016" PRIx64 ") to the worker",
                       info.length, info.sender_tag);
            break;
        }
        if ((msg = ucp_tag_probe_nb(tp->worker, 0, 0, 1, &info)) == NULL) break;
        void *buf = malloc(info.length ? info.length : 1);
        ucp_request_param_t prm = {.op_attr_mask = 0};
        ucs_status_ptr_t ptr = buf ? ucp_tag_msg_recv_nbx(tp->worker, buf, info.length, msg, &prm)
                                   : ucp_tag_msg_recv_nbx(tp->worker, NULL, 0, msg, &prm);
        ucx_wait_req(tp, ptr, 100);
        free(buf);
    }
}

static void ucx_destroy(oobx_tp_t *base)
{
    if (!base) return;
    ucx_tp_t *tp = (ucx_tp_t *)base;
    tp->destroying = 1;
    /* before any link goes down: the peers on this host that see this pid
     * go read that it left */
    if (tp->board) __atomic_store_n(&tp->board[tp->rank], 1, __ATOMIC_RELEASE);
    if (tp->worker && tp->peers) {
        /* give sends in flight a short bound to finish */
        uint64_t deadline = oobx__deadline(200);
        while (tp->rtx.q_head && oobx__now_ns() < deadline) {
            ucp_worker_progress(tp->worker);
            ucx_probe(tp);
            ucx_drain_dirty(tp);
        }
        for (int i = 0; i < tp->nranks; i++) {
            ucx_peer_t *p = &tp->peers[i];
            if (!p->fail.failed) p->fail.status = OOBX_ERR_ABORTED;
            p->fail.failed = 1;
            ucx_peer_drop(tp, i);
        }
        /* let connection set-up messages that peers are waiting for go out
         * (UCX 1.13 cannot drop a pending wireup reply at worker destroy) */
        uint64_t quiet_deadline = oobx__deadline(UCX_QUIESCE_MS);
        int idle = 0;
        while (idle < 20 && oobx__now_ns() < quiet_deadline) {
            if (ucp_worker_progress(tp->worker))
                idle = 0;
            else
                idle++;
        }
        /* close every endpoint at once (flushing what is queued), then give
         * them a common bound */
        void **closing = calloc((size_t)tp->nranks, sizeof(*closing));
        int nclosing = 0;
        for (int i = 0; i < tp->nranks; i++) {
            ucx_peer_t *p = &tp->peers[i];
            if (!p->ep) continue;
            ucp_request_param_t prm = {
                .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                .flags = p->fail.reported || !closing ? UCP_EP_CLOSE_FLAG_FORCE : 0,
            };
            ucs_status_ptr_t req = ucp_ep_close_nbx(p->ep, &prm);
            p->ep = NULL;
            if (req && !UCS_PTR_IS_ERR(req)) {
                if (closing)
                    closing[nclosing++] = req;
                else
                    ucx_wait_req(tp, req, 100);
            }
        }
        uint64_t close_deadline = oobx__deadline(UCX_CLOSE_MS);
        for (int i = 0; i < nclosing; i++) {
            while (ucp_request_check_status(closing[i]) == UCS_INPROGRESS && oobx__now_ns() < close_deadline)
                ucp_worker_progress(tp->worker);
            if (ucp_request_check_status(closing[i]) == UCS_INPROGRESS) ucp_request_cancel(tp->worker, closing[i]);
            ucp_request_free(closing[i]);
        }
        free(closing);
        for (int n = 0; n < 64 && ucp_worker_progress(tp->worker); n++) {
        }
        /* receives cancelled above whose callbacks came: their requests go
         * back to UCX before the worker does */
        ucx_orphans_sweep(tp);
        ucx_prepost_stop(tp);
        ucx_discard_unexpected(tp);
    }
    if (tp->rtx.rkey) ucp_rkey_destroy(tp->rtx.rkey);
    free(tp->rtx.setup);
    free(tp->rtx.early);
    free(tp->rtx.heads);
    if (tp->rrx.memh) ucp_mem_unmap(tp->ctx, tp->rrx.memh);
    if (tp->my_addr) ucp_worker_release_address(tp->worker, tp->my_addr);
    if (tp->sleep_fd >= 0) close(tp->sleep_fd);
    ucx_board_close(tp);
    if (tp->worker) ucp_worker_destroy(tp->worker);
    for (int i = 0; i < UCX_PREPOST; i++) free(tp->pp[i].buf);
    if (tp->ctx) ucp_cleanup(tp->ctx);
    /* what UCX never completed: the worker is gone, so are its requests */
    while (tp->live) {
        ucx_sreq_t *s = tp->live;
        tp->live = s->live_next;
        free(s);
    }
    while (tp->orphans) {
        ucx_rrec_t *r = tp->orphans;
        tp->orphans = r->next;
        if (r->buf != r->small) free(r->buf);
        free(r);
    }
    while (tp->sreq_pool) {
        ucx_sreq_t *s = tp->sreq_pool;
        tp->sreq_pool = s->next;
        free(s);
    }
    while (tp->rrec_pool) {
        ucx_rrec_t *r = tp->rrec_pool;
        tp->rrec_pool = r->next;
        free(r);
    }
    if (tp->peers)
        for (int i = 0; i < tp->nranks; i++) free(tp->peers[i].addr);
    free(tp->peers);
    free(tp->dirty);
    free(tp);
}

/* The settings this transport owns (parsed at create, listed by oobx-info -c). */
const oobx_setting_desc_t ucx_settings_table[] = {
    {"OOBX_UCX_RING", "auto", "UCX ring link: put (registered ring buffer), tag (tag messages), auto (put where the ring is in shared memory or RMA is native)", OOBX_SET_STR, offsetof(ucx_settings_t, ring), sizeof(((ucx_settings_t *)0)->ring), 0, 0},
    {"OOBX_UCX_PULL", "0", "1: payloads of OOBX_CMA_MIN bytes or more to a rank of the same host that do not take the ring are read by the receiver from the sender's memory (one copy); 0: UCX's rendezvous carries them (measured faster or as fast, docs/transports/ucx.md)", OOBX_SET_BOOL, offsetof(ucx_settings_t, pull), 0, 0, 0},
    {NULL, NULL, NULL, 0, 0, 0, 0, 0},
};

/* The ops as the core calls them: UCX's log lines during each speak for this
 * transport (see ucx_log_handler). */
static int op_address(oobx_tp_t *b, void *blob, size_t *len)
{
    UCX_LOG_SCOPE((ucx_tp_t *)b);
    return ucx_address(b, blob, len);
}
static int op_set_peer(oobx_tp_t *b, int peer, const void *blob, size_t len)
{
    UCX_LOG_SCOPE((ucx_tp_t *)b);
    return ucx_set_peer(b, peer, blob, len);
}
static int op_ring(oobx_tp_t *b, int prev, int next)
{
    UCX_LOG_SCOPE((ucx_tp_t *)b);
    return ucx_ring(b, prev, next);
}
static int op_send(oobx_tp_t *b, int peer, const oobx_msg_hdr_t *hdr, const void *payload, oobx_tp_req_t *req)
{
    UCX_LOG_SCOPE((ucx_tp_t *)b);
    return ucx_send(b, peer, hdr, payload, req);
}
static int op_progress(oobx_tp_t *b)
{
    UCX_LOG_SCOPE((ucx_tp_t *)b);
    return ucx_progress(b);
}
static int op_wait_prepare(oobx_tp_t *b, struct pollfd *fds, int max, int *nfds, int *timeout_ms)
{
    UCX_LOG_SCOPE((ucx_tp_t *)b);
    return ucx_wait_prepare(b, fds, max, nfds, timeout_ms);
}
static int op_sleep(oobx_tp_t *b, struct pollfd *fds, int nfds, int timeout_ms)
{
    UCX_LOG_SCOPE((ucx_tp_t *)b);
    return ucx_sleep(b, fds, nfds, timeout_ms);
}
static void op_peer_name(oobx_tp_t *b, int peer, char *buf, size_t len)
{
    UCX_LOG_SCOPE((ucx_tp_t *)b);
    ucx_peer_name(b, peer, buf, len);
}
static void op_destroy(oobx_tp_t *b)
{
    if (!b) return;
    UCX_LOG_SCOPE((ucx_tp_t *)b);
    ucx_destroy(b);
}

const oobx_tp_ops_t oobx_ucx_ops = {
    .version = OOBX_TP_VERSION,
    .name = "ucx",
    .settings = ucx_settings_table,
    .create = ucx_create,
    .address = op_address,
    .set_peer = op_set_peer,
    .ring = op_ring,
    .send = op_send,
    .release = ucx_release,
    .progress = op_progress,
    .wait_prepare = op_wait_prepare,
    .sleep = op_sleep,
    .describe = ucx_describe,
    .peer_name = op_peer_name,
    .destroy = op_destroy,
};

oobx__module_export int oobx_tp_module_init(const oobx_core_api_t *api, const oobx_tp_ops_t **ops, char *why,
                                            size_t whylen)
{
    int rc = oobx__module_accepts(api, "ucx", why, whylen);
    if (rc == 0) *ops = &oobx_ucx_ops;
    return rc;
}
