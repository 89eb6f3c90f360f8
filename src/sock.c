#include "sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "oobx.h"
#include "util.h"

/* random ports a listener tries before the kernel searches for one */
#define SOCK_BIND_TRIES 16

int oobx__sock_cancelled(const oobx_cancel_t *c)
{
    if (!c) return 0;
    if (c->aborted && atomic_load(c->aborted)) return OOBX_ERR_ABORTED;
    if (c->user_abort && *c->user_abort) return OOBX_ERR_ABORTED;
    return 0;
}

int oobx__sock_wait_ms(const oobx_cancel_t *c)
{
    int cap = c && c->user_abort ? 50 : 1000;
    return oobx__ms_left(c ? c->deadline_ns : UINT64_MAX, cap);
}

int oobx__sock_cancel_status(const oobx_cancel_t *c)
{
    int rc = oobx__sock_cancelled(c);
    if (rc) return rc;
    if (c && c->deadline_ns != UINT64_MAX && oobx__now_ns() >= c->deadline_ns) return OOBX_ERR_TIMEOUT;
    return 0;
}

socklen_t oobx__sock_addr_len(const oobx_sockaddr_t *a)
{
    return a->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

int oobx__sock_addr_port(const oobx_sockaddr_t *a)
{
    return a->sa.sa_family == AF_INET6 ? ntohs(a->sin6.sin6_port) : ntohs(a->sin.sin_port);
}

void oobx__sock_addr_set_port(oobx_sockaddr_t *a, int port)
{
    if (a->sa.sa_family == AF_INET6) a->sin6.sin6_port = htons((uint16_t)port);
    else a->sin.sin_port = htons((uint16_t)port);
}

void oobx__sock_addr_format(const oobx_sockaddr_t *a, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN + 16] = "?";
    if (a->sa.sa_family == AF_INET) {
        inet_ntop(AF_INET, &a->sin.sin_addr, host, sizeof(host));
        snprintf(buf, len, "%s:%d", host, ntohs(a->sin.sin_port));
    } else if (a->sa.sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &a->sin6.sin6_addr, host, sizeof(host));
        if (a->sin6.sin6_scope_id)
            snprintf(buf, len, "[%s%%%u]:%d", host, a->sin6.sin6_scope_id, ntohs(a->sin6.sin6_port));
        else
            snprintf(buf, len, "[%s]:%d", host, ntohs(a->sin6.sin6_port));
    } else {
        snprintf(buf, len, "(address family %d)", a->sa.sa_family);
    }
}

int oobx__sock_addr_parse(const char *text, int family, oobx_sockaddr_t *out, char *why, size_t whylen)
{
    char host[256];
    const char *port = NULL;
    size_t tl = strlen(text);
    if (tl == 0 || tl >= sizeof(host)) {
        snprintf(why, whylen, "address \"%s\" is empty or too long", text);
        return OOBX_ERR_INVALID;
    }
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':' || !close[2]) {
            snprintf(why, whylen, "address \"%s\": expected [ipv6]:port", text);
            return OOBX_ERR_INVALID;
        }
        memcpy(host, text + 1, (size_t)(close - text - 1));
        host[close - text - 1] = '\0';
        port = close + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (!colon || !colon[1] || strchr(text, ':') != colon) {
            snprintf(why, whylen, "address \"%s\": expected host:port (or [ipv6]:port)", text);
            return OOBX_ERR_INVALID;
        }
        memcpy(host, text, (size_t)(colon - text));
        host[colon - text] = '\0';
        port = colon + 1;
    }
    char *end = NULL;
    long p = strtol(port, &end, 10);
    if (*end || p < 0 || p > 65535) {
        snprintf(why, whylen, "address \"%s\": port \"%s\" is not a number in 0..65535", text, port);
        return OOBX_ERR_INVALID;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res) {
        snprintf(why, whylen, "address \"%s\": cannot resolve \"%s\": %s", text, host, gai_strerror(rc));
        return OOBX_ERR_INVALID;
    }
    memset(out, 0, sizeof(*out));
    memcpy(out, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    oobx__sock_addr_set_port(out, (int)p);
    return OOBX_SUCCESS;
}

int oobx__sock_set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) return -1;
    return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void oobx__sock_set_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void oobx__sock_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

void oobx__sock_reserve_fds(int fd, int n)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (rlim_t)n > rl.rlim_cur)
        n = (int)rl.rlim_cur;
    if (n <= 64 || fd < 0) return;
    /* the lowest free descriptor at or above n - 1: the table grows to hold
     * it (and never takes a descriptor in use) */
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, n - 1);
    if (hi >= 0) close(hi);
}

/* The kernel's ephemeral range and the ports reserved in it, as this host's
 * settings say now (read per listener: no cached state). */
typedef struct port_range {
    int lo, hi;           /* ip_local_port_range */
    int nres;             /* reserved ranges read; -1: too many to honour */
    int res[32][2];       /* ip_local_reserved_ports */
} port_range_t;

static int port_range_read(port_range_t *pr)
{
    char buf[1024];
    pr->nres = 0;
    if (oobx__read_small_file("/proc/sys/net/ipv4/ip_local_port_range", buf, sizeof(buf)) < 0 ||
        sscanf(buf, "%d %d", &pr->lo, &pr->hi) != 2 || pr->lo < 1 || pr->hi > 65535 || pr->hi - pr->lo < 64)
        return -1;
    int n = oobx__read_small_file("/proc/sys/net/ipv4/ip_local_reserved_ports", buf, sizeof(buf));
    if (n < 0) return 0;
    if (n == (int)sizeof(buf) - 1) return pr->nres = -1, 0; /* longer than read: honour it by leaving it to the kernel */
    for (char *q = buf; *q && *q != '\n';) {
        char *end;
        long a = strtol(q, &end, 10), b = a;
        if (end == q) return pr->nres = -1, 0;
        if (*end == '-') b = strtol(end + 1, &end, 10);
        if (pr->nres == (int)(sizeof(pr->res) / sizeof(pr->res[0]))) return pr->nres = -1, 0;
        pr->res[pr->nres][0] = (int)a;
        pr->res[pr->nres][1] = (int)b;
        pr->nres++;
        q = *end == ',' ? end + 1 : end;
    }
    return 0;
}

static int port_reserved(const port_range_t *pr, int port)
{
    for (int i = 0; i < pr->nres; i++)
        if (port >= pr->res[i][0] && port <= pr->res[i][1]) return 1;
    return 0;
}

/* A socket bound to the address and listening, or -1 with errno; port
 * (0: the kernel picks) is the port to bind. */
static int listen_on(oobx_sockaddr_t *addr, int port, int backlog)
{
    int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (addr->sa.sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    int keep = oobx__sock_addr_port(addr);
    oobx__sock_addr_set_port(addr, port);
    int ok = bind(fd, &addr->sa, oobx__sock_addr_len(addr)) == 0;
    oobx__sock_addr_set_port(addr, keep);
    /* listen() checks the port again: a port shared at bind() with a
     * socket that is not listening can be refused here */
    if (ok && listen(fd, backlog) == 0) return fd;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

/* Listens on the address; port 0 there means any free port. The kernel's
 * own search for one (bind to port 0) walks the ephemeral range port by port
 * and costs up to ~2 ms once thousands of ports of one address are taken
 * (10,240 ranks of one host: seconds of CPU in all). A few binds to random
 * odd ports of the same range, skipping the reserved ones, cost a few
 * microseconds each; the kernel's search stays the fallback. Odd ports, as
 * the kernel's bind() prefers, leave the even ones to its connect(). */
int oobx__sock_listen(oobx_sockaddr_t *addr, int backlog, int *fd_out, char *why, size_t whylen)
{
    char name[96];
    oobx__sock_addr_format(addr, name, sizeof(name));
    int port = oobx__sock_addr_port(addr), fd = -1;
    port_range_t pr;
    if (port == 0 && port_range_read(&pr) == 0 && pr.nres >= 0) {
        uint64_t seed = oobx__random64();
        int span = (pr.hi - pr.lo + 1) / 2;
        for (int tries = 0; tries < SOCK_BIND_TRIES && fd < 0; tries++) {
            int p = (pr.lo | 1) + 2 * (int)(oobx__mix64(seed, (uint64_t)tries) % (uint64_t)span);
            if (p > pr.hi || port_reserved(&pr, p)) continue;
            fd = listen_on(addr, p, backlog);
            if (fd < 0 && errno != EADDRINUSE) break;
        }
    }
    if (fd < 0) fd = listen_on(addr, port, backlog);
    if (fd < 0) {
        int e = errno;
        snprintf(why, whylen, "listen on %s: %s%s", name, strerror(e),
                 e == EADDRINUSE ? " (another job or process holds this address)" : "");
        return e == EADDRINUSE ? OOBX_ERR_UNAVAILABLE : OOBX_ERR_SYSTEM;
    }
    socklen_t sl = sizeof(*addr);
    getsockname(fd, &addr->sa, &sl);
    *fd_out = fd;
    return OOBX_SUCCESS;
}

int oobx__sock_connect_start(const oobx_sockaddr_t *a, int *fd_out)
{
    *fd_out = -1;
    int fd = socket(a->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    oobx__sock_set_nodelay(fd);
    if (connect(fd, &a->sa, oobx__sock_addr_len(a)) != 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        return e;
    }
    *fd_out = fd;
    return 0;
}

int oobx__sock_connect_result(int fd)
{
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    return err;
}

int oobx__sock_errno_retryable(int err)
{
    return err == ECONNREFUSED || err == ETIMEDOUT || err == ENETUNREACH || err == EHOSTUNREACH ||
           err == ECONNRESET || err == EAGAIN || err == ECONNABORTED || err == EADDRNOTAVAIL;
}

int oobx__sock_backoff_ms(int tries, uint64_t *rng)
{
    int base = 5;
    for (int i = 1; i < tries && base < 1000; i++) base *= 2;
    if (base > 1000) base = 1000;
    *rng = oobx__mix64(*rng, (uint64_t)tries);
    int jitter = (int)(*rng % (uint64_t)(base / 2 + 1)) - base / 4;
    int ms = base + jitter;
    return ms < 1 ? 1 : ms;
}

void oobx__sock_backoff_sleep(const oobx_cancel_t *c, int tries, uint64_t *rng)
{
    int ms = oobx__sock_backoff_ms(tries, rng);
    int left = oobx__ms_left(c ? c->deadline_ns : UINT64_MAX, ms);
    if (c && c->user_abort && left > 50) left = 50;
    struct timespec ts = {.tv_sec = left / 1000, .tv_nsec = (long)(left % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int oobx__sock_connect_wait(const oobx_sockaddr_t *a, const oobx_cancel_t *c, int *fd_out, int *stopped)
{
    *fd_out = -1;
    *stopped = 0;
    int fd, err = oobx__sock_connect_start(a, &fd);
    if (err != 0) return err;
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        if (poll(&pfd, 1, oobx__sock_wait_ms(c)) > 0) {
            err = oobx__sock_connect_result(fd);
            break;
        }
        if ((*stopped = oobx__sock_cancel_status(c)) != 0) {
            err = ETIMEDOUT;
            break;
        }
    }
    if (err == 0) {
        *fd_out = fd;
        return 0;
    }
    close(fd);
    return err;
}

int oobx__sock_connect_retry(const oobx_sockaddr_t *a, const oobx_cancel_t *c, int *fd_out, char *why, size_t whylen)
{
    char name[96];
    oobx__sock_addr_format(a, name, sizeof(name));
    uint64_t rng = oobx__random64();
    int tries = 0, last = 0;
    for (;;) {
        int rc = oobx__sock_cancel_status(c);
        if (rc) {
            snprintf(why, whylen, "connect to %s: %s after %d tries (last: %s)", name,
                     rc == OOBX_ERR_ABORTED ? "aborted" : "timed out", tries, last ? strerror(last) : "no answer");
            return rc;
        }
        tries++;
        int fd, err = oobx__sock_connect_wait(a, c, &fd, &rc);
        if (rc) {
            snprintf(why, whylen, "connect to %s: %s while connecting (try %d)", name,
                     rc == OOBX_ERR_ABORTED ? "aborted" : "timed out", tries);
            return rc;
        }
        if (err == 0) {
            *fd_out = fd;
            return OOBX_SUCCESS;
        }
        last = err;
        if (!oobx__sock_errno_retryable(err)) {
            snprintf(why, whylen, "connect to %s: %s", name, strerror(err));
            return OOBX_ERR_SYSTEM;
        }
        oobx__sock_backoff_sleep(c, tries, &rng);
    }
}

static int io_all(int fd, void *buf, size_t len, int sending, const oobx_cancel_t *c, char *why, size_t whylen,
                  size_t *done)
{
    size_t off = 0;
    if (done) *done = 0;
    while (off < len) {
        if (done) *done = off;
        ssize_t n = sending ? send(fd, (char *)buf + off, len - off, MSG_NOSIGNAL)
                            : recv(fd, (char *)buf + off, len - off, 0);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n == 0 && !sending) {
            snprintf(why, whylen, "connection closed by the other side after %zu of %zu bytes", off, len);
            return OOBX_ERR_REMOTE;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            snprintf(why, whylen, "%s failed after %zu of %zu bytes: %s", sending ? "send" : "receive", off, len,
                     strerror(errno));
            return OOBX_ERR_REMOTE;
        }
        int rc = oobx__sock_cancel_status(c);
        if (rc) {
            snprintf(why, whylen, "%s %s after %zu of %zu bytes", sending ? "send" : "receive",
                     rc == OOBX_ERR_ABORTED ? "aborted" : "timed out", off, len);
            return rc;
        }
        struct pollfd pfd = {.fd = fd, .events = sending ? POLLOUT : POLLIN};
        poll(&pfd, 1, oobx__sock_wait_ms(c));
    }
    return OOBX_SUCCESS;
}

int oobx__sock_send_all(int fd, const void *buf, size_t len, const oobx_cancel_t *c, char *why, size_t whylen)
{
    return io_all(fd, (void *)buf, len, 1, c, why, whylen, NULL);
}

int oobx__sock_recv_all(int fd, void *buf, size_t len, const oobx_cancel_t *c, char *why, size_t whylen)
{
    return io_all(fd, buf, len, 0, c, why, whylen, NULL);
}

int oobx__sock_recv_all_got(int fd, void *buf, size_t len, const oobx_cancel_t *c, char *why, size_t whylen,
                            size_t *got)
{
    return io_all(fd, buf, len, 0, c, why, whylen, got);
}
