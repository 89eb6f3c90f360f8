/*
 * A client of the PMI-1 wire protocol that MPICH's hydra serves on PMI_FD
 * (or on PMI_PORT, with PMI_ID): lines of "cmd=NAME key=value ...\n". Used
 * only for the rendezvous: init, get_maxes, get_my_kvsname, put, barrier_in,
 * get, finalize. Every wait is bounded by the caller's timeout (put's by the
 * one given to open).
 *
 * hydra ends a process's PMI_FD connection when the process finalizes, and
 * close finalizes: a process gets one exchange through PMI_FD, and a second
 * open says so (pmi_fd_closed) instead of failing on a broken pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "launch.h"
#include "oobx.h"
#include "sock.h"
#include "util.h"

struct oobx_kvs {
    int fd;
    int own_fd; /* connected from PMI_PORT (closed at close) */
    char kvsname[256];
    int vallen_max, keylen_max;
    int timeout_ms; /* open's, for put */
    char buf[4096]; /* received, not yet consumed */
    size_t have;
};

int oobx__pmi1_field(const char *line, const char *key, char *out, size_t outlen)
{
    size_t kl = strlen(key);
    const char *p = line;
    while (*p) {
        while (*p == ' ') p++;
        if (!strncmp(p, key, kl) && p[kl] == '=') {
            const char *v = p + kl + 1;
            size_t n = strcspn(v, " \n");
            /* a message (msg=) runs to the end of the line */
            if (!strcmp(key, "msg")) n = strcspn(v, "\n");
            if (n >= outlen) return -1;
            memcpy(out, v, n);
            out[n] = '\0';
            return 0;
        }
        p += strcspn(p, " \n");
        if (*p == '\n') break;
    }
    return -1;
}

static int pmi_send(oobx_kvs_t *k, const char *line, uint64_t deadline, char *why, size_t whylen)
{
    size_t len = strlen(line), off = 0;
    while (off < len) {
        ssize_t w = send(k->fd, line + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == ENOTSOCK) w = write(k->fd, line + off, len - off);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            snprintf(why, whylen, "PMI-1: sending \"%.*s\" to the PMI server on fd %d: %s", (int)strcspn(line, "\n"),
                     line, k->fd, strerror(errno));
            return OOBX_ERR_SYSTEM;
        }
        int ms = oobx__ms_left(deadline, -1);
        if (ms == 0) {
            snprintf(why, whylen, "PMI-1: the PMI server on fd %d takes nothing for the timeout", k->fd);
            return OOBX_ERR_TIMEOUT;
        }
        struct pollfd pf = {.fd = k->fd, .events = POLLOUT};
        poll(&pf, 1, ms);
    }
    return 0;
}

/* Reads one reply line into line (without the newline). */
static int pmi_recv(oobx_kvs_t *k, const char *what, char *line, size_t linelen, uint64_t deadline, char *why,
                    size_t whylen)
{
    for (;;) {
        char *nl = memchr(k->buf, '\n', k->have);
        if (nl) {
            size_t n = (size_t)(nl - k->buf);
            if (n >= linelen) {
                snprintf(why, whylen, "PMI-1: the answer to %s is longer than %zu bytes", what, linelen);
                return OOBX_ERR_PROTOCOL;
            }
            memcpy(line, k->buf, n);
            line[n] = '\0';
            k->have -= n + 1;
            memmove(k->buf, nl + 1, k->have);
            return 0;
        }
        if (k->have == sizeof(k->buf)) {
            snprintf(why, whylen, "PMI-1: the answer to %s has no end of line in %zu bytes", what, sizeof(k->buf));
            return OOBX_ERR_PROTOCOL;
        }
        int ms = oobx__ms_left(deadline, -1);
        if (ms == 0) {
            snprintf(why, whylen, "PMI-1: no answer to %s from the PMI server (fd %d) within the timeout "
                     "(OOBX_TIMEOUT_MS); did every rank of the job start?", what, k->fd);
            return OOBX_ERR_TIMEOUT;
        }
        struct pollfd pf = {.fd = k->fd, .events = POLLIN};
        int pr = poll(&pf, 1, ms);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) continue;
        ssize_t r = read(k->fd, k->buf + k->have, sizeof(k->buf) - k->have);
        if (r == 0) {
            snprintf(why, whylen, "PMI-1: the PMI server closed fd %d while this rank waited for the answer to %s",
                     k->fd, what);
            return OOBX_ERR_REMOTE;
        }
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            snprintf(why, whylen, "PMI-1: reading the answer to %s on fd %d: %s", what, k->fd, strerror(errno));
            return OOBX_ERR_SYSTEM;
        }
        k->have += (size_t)r;
    }
}

/* Sends req and reads the answer, which must be cmd=want with rc=0 when it
 * has an rc. */
static int pmi_call(oobx_kvs_t *k, const char *req, const char *want, char *line, size_t linelen, int timeout_ms,
                    char *why, size_t whylen)
{
    uint64_t deadline = oobx__deadline(timeout_ms);
    char what[64];
    snprintf(what, sizeof(what), "%.*s", (int)strcspn(req + 4, " \n"), req + 4);
    int rc = pmi_send(k, req, deadline, why, whylen);
    if (rc == 0) rc = pmi_recv(k, what, line, linelen, deadline, why, whylen);
    if (rc != 0) return rc;
    char cmd[64], rcs[16];
    if (oobx__pmi1_field(line, "cmd", cmd, sizeof(cmd)) != 0 || strcmp(cmd, want)) {
        snprintf(why, whylen, "PMI-1: %s answered \"%s\", expected cmd=%s", what, line, want);
        return OOBX_ERR_PROTOCOL;
    }
    if (oobx__pmi1_field(line, "rc", rcs, sizeof(rcs)) == 0 && strcmp(rcs, "0")) {
        char msg[256] = "";
        oobx__pmi1_field(line, "msg", msg, sizeof(msg));
        snprintf(why, whylen, "PMI-1: %s failed with rc=%s%s%s", what, rcs, msg[0] ? ": " : "", msg);
        return OOBX_ERR_REMOTE;
    }
    return 0;
}

static int pmi_int(const char *line, const char *key, int *out)
{
    char v[32];
    if (oobx__pmi1_field(line, key, v, sizeof(v)) != 0) return -1;
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end) return -1;
    *out = (int)x;
    return 0;
}

/* 1 when the server has ended the connection on fd (end of file or hang-up
 * waiting, nothing else readable), 0 otherwise. Looks without waiting or
 * consuming. */
static int pmi_fd_closed(int fd)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pf, 1, 0) != 1) return 0;
    if (pf.revents & (POLLHUP | POLLRDHUP | POLLERR)) return 1;
    char c;
    return (pf.revents & POLLIN) && recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Why the server's end of PMI_FD is closed: after an earlier exchange of this
 * process, because hydra ends the connection when a process finalizes. */
static void pmi_closed_why(const oobx_launch_t *l, char *why, size_t whylen)
{
    if (l->kvs_seq == 0)
        snprintf(why, whylen, "PMI-1: the PMI server has closed PMI_FD=%d before this process's first exchange; is "
                 "this process one that mpiexec started?", l->pmi_fd);
    else
        snprintf(why, whylen, "PMI-1: the PMI server has closed PMI_FD=%d: hydra ends a process's PMI connection "
                 "when it finalizes, which oobx does at the end of each oobx_comm_init_from_env, so a process joins "
                 "one job through hydra's PMI-1 (this is its call %u); make more communicators with "
                 "oobx_comm_split, or with oobx_get_unique_id + oobx_comm_init and the ids sent over the first one",
                 l->pmi_fd, l->kvs_seq + 1);
}

static void pmi1_close(oobx_kvs_t *k)
{
    if (!k) return;
    if (k->fd >= 0) {
        char line[256], why[256];
        /* finalize tells hydra this rank leaves the PMI service in order */
        pmi_call(k, "cmd=finalize\n", "finalize_ack", line, sizeof(line), 2000, why, sizeof(why));
        if (k->own_fd) close(k->fd);
    }
    free(k);
}

static int pmi1_open(const oobx_launch_t *l, int timeout_ms, oobx_kvs_t **out, int *rank, int *size,
                     int *local_rank, int *local_size, char *job, size_t joblen, char *why, size_t whylen)
{
    oobx_kvs_t *k = calloc(1, sizeof(*k));
    if (!k) {
        snprintf(why, whylen, "out of memory");
        return OOBX_ERR_NOMEM;
    }
    k->fd = -1;
    char line[1024];
    int rc = 0, port_rank = -1, port_size = -1;
    k->timeout_ms = timeout_ms;
    if (l->pmi_fd >= 0) {
        if (fcntl(l->pmi_fd, F_GETFD) < 0) {
            snprintf(why, whylen, "PMI-1: PMI_FD=%d is not an open descriptor in this process (rank %d): %s",
                     l->pmi_fd, l->rank, strerror(errno));
            rc = OOBX_ERR_INVALID;
            goto fail;
        }
        if (pmi_fd_closed(l->pmi_fd)) {
            pmi_closed_why(l, why, whylen);
            rc = OOBX_ERR_UNAVAILABLE;
            goto fail;
        }
        k->fd = l->pmi_fd;
    } else if (l->kvs_seq > 0) {
        /* hydra's mpiexec fails (and ends the job) when one PMI_ID connects
         * again after its finalize: refused here instead */
        snprintf(why, whylen, "PMI-1: hydra serves one PMI connection per process at PMI_PORT=%s, and this process's "
                 "was used by an earlier oobx_comm_init_from_env (this is its call %u); make more communicators with "
                 "oobx_comm_split, or with oobx_get_unique_id + oobx_comm_init and the ids sent over the first one",
                 l->pmi_addr, l->kvs_seq + 1);
        rc = OOBX_ERR_UNAVAILABLE;
        goto fail;
    } else {
        oobx_sockaddr_t a;
        rc = oobx__sock_addr_parse(l->pmi_addr, AF_UNSPEC, &a, why, whylen);
        if (rc != 0) goto fail;
        int fd = socket(a.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, &a.sa, oobx__sock_addr_len(&a)) != 0) {
            snprintf(why, whylen, "PMI-1: connect to PMI_PORT=%s: %s", l->pmi_addr, strerror(errno));
            if (fd >= 0) close(fd);
            rc = OOBX_ERR_UNAVAILABLE;
            goto fail;
        }
        k->fd = fd;
        k->own_fd = 1;
        const char *id = getenv("PMI_ID");
        char req[128];
        snprintf(req, sizeof(req), "cmd=initack pmiid=%s\n", id ? id : "");
        rc = pmi_call(k, req, "initack", line, sizeof(line), timeout_ms, why, whylen);
        /* the server then sets size, rank and debug: in this model they are
         * not in the environment (PMI_ID only) */
        uint64_t deadline = oobx__deadline(timeout_ms);
        for (int i = 0; rc == 0 && i < 3; i++) {
            rc = pmi_recv(k, "initack", line, sizeof(line), deadline, why, whylen);
            char cmd[16];
            if (rc == 0 && (oobx__pmi1_field(line, "cmd", cmd, sizeof(cmd)) != 0 || strcmp(cmd, "set"))) {
                snprintf(why, whylen, "PMI-1: after initack the server sent \"%s\", expected cmd=set", line);
                rc = OOBX_ERR_PROTOCOL;
            }
            if (rc == 0) {
                pmi_int(line, "size", &port_size);
                pmi_int(line, "rank", &port_rank);
            }
        }
        if (rc == 0 && (port_size < 1 || port_rank < 0 || port_rank >= port_size)) {
            snprintf(why, whylen, "PMI-1: the PMI_PORT server set rank %d of %d", port_rank, port_size);
            rc = OOBX_ERR_PROTOCOL;
        }
    }
    if (rc == 0) {
        rc = pmi_call(k, "cmd=init pmi_version=1 pmi_subversion=1\n", "response_to_init", line, sizeof(line),
                      timeout_ms, why, whylen);
        /* the server may close the descriptor just after its last finalize_ack */
        if ((rc == OOBX_ERR_SYSTEM || rc == OOBX_ERR_REMOTE) && !k->own_fd && l->kvs_seq > 0 &&
            pmi_fd_closed(k->fd)) {
            pmi_closed_why(l, why, whylen);
            rc = OOBX_ERR_UNAVAILABLE;
        }
    }
    if (rc == 0) rc = pmi_call(k, "cmd=get_maxes\n", "maxes", line, sizeof(line), timeout_ms, why, whylen);
    if (rc == 0 && (pmi_int(line, "vallen_max", &k->vallen_max) || pmi_int(line, "keylen_max", &k->keylen_max))) {
        snprintf(why, whylen, "PMI-1: get_maxes answered \"%s\" (no vallen_max/keylen_max)", line);
        rc = OOBX_ERR_PROTOCOL;
    }
    if (rc == 0) rc = pmi_call(k, "cmd=get_my_kvsname\n", "my_kvsname", line, sizeof(line), timeout_ms, why, whylen);
    if (rc == 0 && oobx__pmi1_field(line, "kvsname", k->kvsname, sizeof(k->kvsname)) != 0) {
        snprintf(why, whylen, "PMI-1: get_my_kvsname answered \"%s\"", line);
        rc = OOBX_ERR_PROTOCOL;
    }
    if (rc != 0) goto fail;
    /* the PMI_PORT model's rank and size, where the environment has none */
    *rank = l->rank >= 0 ? l->rank : port_rank;
    *size = l->nranks > 0 ? l->nranks : port_size;
    if (l->rank >= 0 && port_size > 0 && (port_rank != l->rank || port_size != l->nranks)) {
        snprintf(why, whylen, "PMI-1: PMI_RANK=%d/PMI_SIZE=%d, but the PMI_PORT server set rank %d of %d", l->rank,
                 l->nranks, port_rank, port_size);
        rc = OOBX_ERR_INVALID;
        goto fail;
    }
    *local_rank = l->local_rank;
    *local_size = l->local_size;
    snprintf(job, joblen, "%s", k->kvsname);
    *out = k;
    return 0;
fail:
    if (k->own_fd && k->fd >= 0) close(k->fd);
    free(k);
    return rc;
}

static int pmi1_put(oobx_kvs_t *k, const char *key, const char *value, char *why, size_t whylen)
{
    if ((int)strlen(value) >= k->vallen_max || (int)strlen(key) >= k->keylen_max) {
        snprintf(why, whylen, "PMI-1: %s (%zu bytes) exceeds the server's vallen_max %d or keylen_max %d", key,
                 strlen(value), k->vallen_max, k->keylen_max);
        return OOBX_ERR_INVALID;
    }
    char req[1024], line[512];
    snprintf(req, sizeof(req), "cmd=put kvsname=%s key=%s value=%s\n", k->kvsname, key, value);
    return pmi_call(k, req, "put_result", line, sizeof(line), k->timeout_ms, why, whylen);
}

static int pmi1_fence(oobx_kvs_t *k, int timeout_ms, char *why, size_t whylen)
{
    char line[256];
    return pmi_call(k, "cmd=barrier_in\n", "barrier_out", line, sizeof(line), timeout_ms, why, whylen);
}

static int pmi1_get(oobx_kvs_t *k, int rank, const char *key, char *value, size_t cap, int timeout_ms, char *why,
                    size_t whylen)
{
    (void)rank; /* PMI-1 keys are job-wide: the key names its publisher */
    char req[512], line[1400];
    snprintf(req, sizeof(req), "cmd=get kvsname=%s key=%s\n", k->kvsname, key);
    int rc = pmi_call(k, req, "get_result", line, sizeof(line), timeout_ms, why, whylen);
    if (rc != 0) return rc;
    if (oobx__pmi1_field(line, "value", value, cap) != 0) {
        snprintf(why, whylen, "PMI-1: get of %s answered \"%s\"", key, line);
        return OOBX_ERR_PROTOCOL;
    }
    return 0;
}

const oobx_kvs_ops_t oobx__pmi1_ops = {
    .version = OOBX_KVS_VERSION,
    .name = "PMI-1",
    .open = pmi1_open,
    .put = pmi1_put,
    .fence = pmi1_fence,
    .get = pmi1_get,
    .close = pmi1_close,
};
