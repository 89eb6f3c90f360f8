/* Socket helpers shared by the root rendezvous and the socket transport. */
#ifndef OOBX_SOCK_H
#define OOBX_SOCK_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef union oobx_sockaddr {
    struct sockaddr sa;
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;
    struct sockaddr_storage ss;
} oobx_sockaddr_t;

/* What ends a blocking helper early: a deadline and two abort flags. */
typedef struct oobx_cancel {
    uint64_t deadline_ns;             /* UINT64_MAX: none */
    const volatile uint32_t *user_abort; /* oobx_config_t.abort_flag, may be NULL */
    const atomic_int *aborted;        /* oobx_comm_abort(), may be NULL */
    /* may be NULL: called at each slice of a wait outside the endpoint (the
     * host's shared memory), so that the endpoint keeps answering; nonzero:
     * the communicator failed, why says how */
    int (*poll)(void *arg, char *why, size_t len);
    void *poll_arg;
} oobx_cancel_t;

/* OOBX_ERR_ABORTED when either flag is set, else 0. */
int oobx__sock_cancelled(const oobx_cancel_t *c);
/* The same, or OOBX_ERR_TIMEOUT once the deadline has passed (c may be NULL). */
int oobx__sock_cancel_status(const oobx_cancel_t *c);
/* poll timeout for one sleep: time left, capped to 50 ms when a user flag must be watched. */
int oobx__sock_wait_ms(const oobx_cancel_t *c);

socklen_t oobx__sock_addr_len(const oobx_sockaddr_t *a);
int oobx__sock_addr_port(const oobx_sockaddr_t *a);
void oobx__sock_addr_set_port(oobx_sockaddr_t *a, int port);
/* "127.0.0.1:4000", "[::1]:4000" */
void oobx__sock_addr_format(const oobx_sockaddr_t *a, char *buf, size_t len);
/* Parses "host:port", "[v6]:port" or "v6addr" with port given separately; resolves names.
 * family: AF_UNSPEC or a preferred family. 0 or OOBX_ERR_INVALID with why. */
int oobx__sock_addr_parse(const char *text, int family, oobx_sockaddr_t *out, char *why, size_t whylen);

int oobx__sock_set_nonblock(int fd);
void oobx__sock_set_nodelay(int fd);
/* Raises RLIMIT_NOFILE to its hard limit (once is enough; harmless to repeat). */
void oobx__sock_raise_nofile(void);
/* Grows this process's descriptor table now to hold n (at most the open-file
 * limit), duplicating fd once high and closing the copy. Linux grows the
 * table as descriptors are taken, and in a process of several threads each
 * growth waits for an RCU grace period: tens of milliseconds on the GPU host
 * (one accept4 of a root's burst of 64 took 12-42 ms, the root thread
 * reading nothing meanwhile). Done before the root thread starts, while the
 * process often has one thread, it costs microseconds. */
void oobx__sock_reserve_fds(int fd, int n);

/* Binds and listens on addr (port 0: any); fills addr with the bound address.
 * Non-blocking, close-on-exec. 0 or an error with why. */
int oobx__sock_listen(oobx_sockaddr_t *addr, int backlog, int *fd, char *why, size_t whylen);

/* Starts a non-blocking connect. 0 with *fd (connected or in progress), or the
 * errno of an immediate failure (positive) with *fd = -1. */
int oobx__sock_connect_start(const oobx_sockaddr_t *a, int *fd);
/* errno of a finished connect (0: connected), read with SO_ERROR. */
int oobx__sock_connect_result(int fd);
/* One connect, waited for: 0 with *fd, or its errno (positive); when c's
 * abort or deadline comes first, ETIMEDOUT with *stopped its status. */
int oobx__sock_connect_wait(const oobx_sockaddr_t *a, const oobx_cancel_t *c, int *fd, int *stopped);
/* errnos worth another try: refused, timed out, unreachable, reset */
int oobx__sock_errno_retryable(int err);
/* Next backoff in ms after try number `tries` (1, 2, ...): 5 ms doubling to 1 s, +-25% jitter. */
int oobx__sock_backoff_ms(int tries, uint64_t *rng);
/* Sleeps the backoff of try number tries, within c's deadline (and 50 ms at
 * most when a user abort flag is watched). */
void oobx__sock_backoff_sleep(const oobx_cancel_t *c, int tries, uint64_t *rng);

/* Blocking connect with retries and backoff until c's deadline. 0 with a
 * connected blocking-mode-free (non-blocking) fd, or an error with why. */
int oobx__sock_connect_retry(const oobx_sockaddr_t *a, const oobx_cancel_t *c, int *fd, char *why, size_t whylen);

/* Full send / receive on a non-blocking fd, sleeping in poll; honours c.
 * Returns 0, OOBX_ERR_REMOTE (closed / reset; why says which), TIMEOUT, ABORTED. */
int oobx__sock_send_all(int fd, const void *buf, size_t len, const oobx_cancel_t *c, char *why, size_t whylen);
int oobx__sock_recv_all(int fd, void *buf, size_t len, const oobx_cancel_t *c, char *why, size_t whylen);
/* The same; *got: the bytes read before a failure (0: the peer closed or
 * reset the connection before sending anything). */
int oobx__sock_recv_all_got(int fd, void *buf, size_t len, const oobx_cancel_t *c, char *why, size_t whylen,
                            size_t *got);

#endif
