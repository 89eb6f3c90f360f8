/*
 * oobx-run: starts N local ranks of a program with the environment oobx reads
 * (OOBX_RANK, OOBX_NRANKS, OOBX_COMM_ID), prefixes each line they print with
 * their rank, and ends the job when a rank fails or the deadline passes,
 * naming the ranks that failed.
 *
 * A tree of two levels, so that no process holds a descriptor per rank of a
 * big job:
 *
 *   - the top process makes the roots' listening sockets (the port race:
 *     nobody can take a port that is already listening), forks one
 *     sub-launcher per block of at most --ranks-per-launcher ranks (1000),
 *     and keeps the verdict: the first failure, the deadline, signals, the
 *     SIGKILL after the grace, the summary. It holds two pipes a
 *     sub-launcher.
 *   - a sub-launcher (a fork of the top, no exec) starts and watches its
 *     block: two pipes a rank in one epoll set and a signalfd. It sends up
 *     one pipe a stream of frames: complete, prefixed lines (batched), and
 *     small records for "ranks started", "rank exited (status)" and "rank
 *     could not start". Lines and records travel in the order they happened,
 *     so a rank's last words come before the verdict on it. The top answers
 *     down a second pipe with one-byte commands: end (SIGTERM, start no
 *     more) and kill (SIGKILL).
 *
 * A rank that hosts a root inherits that root's listening socket (only that
 * rank; close-on-exec everywhere else) and finds it in OOBX_ROOT_FD.
 *
 * Unless OOBX_NODE_DIR is set, the ranks' host segments (node-aware
 * bootstrap) go in a directory of this run's own, mode 700 in /dev/shm,
 * which the top removes with whatever is left in it (a segment that a rank
 * killed early never unlinked) when the job ends.
 *
 * --hosts H emulates H hosts with network namespaces, one per host, wired by
 * veth pairs to a bridge that lives in a namespace of its own; the ranks of
 * host h run in namespace h (their sub-launcher enters it before it forks
 * them) and the roots listen on their hosts' addresses.
 *
 * No threads; every process sleeps in poll or epoll_wait. Needs nothing from
 * liboobx.
 */
#include <arpa/inet.h>
#include <net/if.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUN_KILL_GRACE_MS 2000   /* SIGTERM, then SIGKILL after this */
#define RUN_DRAIN_GRACE_MS 500   /* output still open after every rank exited */
#define RUN_LINE_MAX (64 * 1024) /* a longer line is printed in pieces of this */
#define RUN_READ_CHUNK (64 * 1024)
#define RUN_LIST_MAX 32          /* failed ranks named one by one */
#define RUN_PER_LAUNCHER 1000    /* ranks a sub-launcher watches, at most */
#define RUN_FD_MARGIN 64
#define RUN_START_BATCH 16       /* ranks a sub-launcher forks between two looks at its events */
#define RUN_FRAME_FLUSH (256 * 1024)                       /* a sub-launcher's batch */
#define RUN_OBUF_CAP (RUN_FRAME_FLUSH + RUN_LINE_MAX + 256) /* the largest batch */
#define RUN_IN_CAP (RUN_OBUF_CAP + 64 * 1024)               /* the top's buffer a sub-launcher */
#define RUN_MAX_HOSTS 1024
#define RUN_HOST_IF "oobx0"      /* a host's interface, inside its namespace */

enum { RANK_PENDING = 0, RANK_RUNNING, RANK_DONE };
enum { STREAM_OUT = 0, STREAM_ERR = 1 };

/* Frames up, from a sub-launcher to the top. */
enum { UP_DATA = 1, UP_STARTED, UP_EXIT, UP_NOSTART };
typedef struct up_hdr {
    uint32_t type;
    uint32_t len; /* payload bytes that follow (UP_DATA only) */
    int32_t a;    /* DATA: stream; STARTED: ranks of the block started so far; EXIT, NOSTART: rank in block */
    int32_t b;    /* EXIT: wait status */
    int32_t c;    /* EXIT: the launcher had signalled it */
    int32_t pad;
} up_hdr_t;
/* Commands down, one byte each. */
#define DOWN_END 'E'
#define DOWN_KILL 'K'

typedef struct run_opts {
    int nranks;
    int nroots;
    const char *transport;
    double timeout_s; /* 0: no deadline */
    int prefix;
    int stagger_ms;
    int ipv6;         /* roots on [::1] instead of 127.0.0.1 */
    int hosts;        /* 0: no namespaces */
    int per_launcher;
    char **argv;      /* program and its arguments */
} run_opts_t;

/* The top's view of a rank. */
typedef struct run_rank {
    unsigned char state;
    unsigned char signaled; /* oobx-run had sent it a signal before it ended */
    int status;             /* wait status once RANK_DONE */
} run_rank_t;

typedef struct run_root {
    int fd;   /* listening socket, until handed to the sub-launcher of its rank */
    int rank; /* the rank that hosts it */
    int host;
    int port;
} run_root_t;

typedef struct run_host {
    char ns[80];   /* namespace name */
    char addr[20]; /* 10.77.x.y */
    int nsfd;
    int made;
} run_host_t;

/* The top's record of a sub-launcher. */
typedef struct run_sub {
    pid_t pid;
    int first, count; /* its ranks */
    int host;
    int up_fd;        /* frames from it; -1 at EOF */
    int down_fd;      /* commands to it; -1 once closed */
    char *in;
    size_t len;
    int started;      /* ranks it reported started */
    int reaped;
    int status;       /* its own wait status once reaped */
    int done;         /* reaped, its frames read, its ranks accounted for */
} run_sub_t;

typedef struct run_job {
    run_opts_t opt;
    run_rank_t *ranks;
    run_root_t *roots;
    run_sub_t *subs;
    int nsubs;
    run_host_t *hosts;
    int nhosts;       /* opt.hosts, or 1 without namespaces */
    int orig_ns;      /* the top's network namespace, with --hosts */
    char brns[80];    /* the bridge's namespace */
    int brns_made;
    char tag[48];     /* "oobx-run-PID.START": names of this run's namespaces */
    char *comm_id;
    char run_key[33]; /* OOBX_RUN_KEY: random per run, the job identity the secret comes from */
    char node_dir[96]; /* this run's OOBX_NODE_DIR, made and removed by the top; "" when the user set it */
    int sigfd;
    int devnull;
    pid_t self;
    sigset_t orig_mask;
    sigset_t mask;
    int64_t t0_ms;
    int64_t deadline_ms;   /* -1: none */
    int64_t kill_at_ms;    /* -1: no SIGKILL scheduled */
    int64_t drain_until_ms;
    int started;           /* ranks started, as reported */
    int running;
    int ending;            /* the rest are being ended */
    int killed;            /* SIGKILL was sent */
    int timed_out;
    int interrupted;       /* signal received by oobx-run, or 0 */
    int failed_first;      /* first rank that failed on its own, or -1 */
    int internal;          /* a sub-launcher died or broke the protocol */
} run_job_t;

/* ---- a sub-launcher's state ----------------------------------------------- */

typedef struct leaf_stream {
    int fd;    /* read end of the rank's pipe; -1 once closed */
    char *buf; /* the partial line, RUN_LINE_MAX bytes once needed */
    size_t len;
} leaf_stream_t;

typedef struct leaf_rank {
    pid_t pid;
    int state;
    int signaled;
    int root_fd; /* the listening socket of the root it hosts, or -1 */
    leaf_stream_t io[2];
} leaf_rank_t;

typedef struct leaf {
    run_job_t *job;
    run_sub_t *sub;
    int first, count;
    leaf_rank_t *ranks;
    int epfd, sigfd, up_fd, down_fd;
    pid_t self;
    char *obuf; /* frames not yet written up */
    size_t olen;
    long frame; /* offset of the open DATA frame's header, -1: none */
    int frame_stream;
    char *scratch;
    int started, running, ending, nopen;
    int64_t drain_until_ms;
} leaf_t;

static leaf_t *g_leaf; /* set in a sub-launcher: its messages go up the pipe */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return; /* the reader is gone (EPIPE): drop the output, keep running */
        }
        p += w;
        n -= (size_t)w;
    }
}

static void leaf_data(leaf_t *L, int stream, int rank, const char *line, size_t n);

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char msg[4096];
    int n = snprintf(msg, sizeof msg, "oobx-run: ");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg + n, sizeof msg - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0) return;
    size_t len = strlen(msg);
    if (g_leaf) {
        leaf_data(g_leaf, STREAM_ERR, -1, msg, len);
        return;
    }
    msg[len++] = '\n';
    write_all(STDERR_FILENO, msg, len);
}

static const char *signal_name(int sig, char *buf, size_t len)
{
    static const struct {
        int sig;
        const char *name;
    } names[] = {
        {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
        {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
        {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
        {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
        {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].sig == sig) return names[i].name;
    snprintf(buf, len, "signal %d", sig);
    return buf;
}

/* "exit 1", "SIGSEGV" */
static const char *status_text(int status, char *buf, size_t len)
{
    char sb[32];
    if (WIFEXITED(status))
        snprintf(buf, len, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "%s%s", signal_name(WTERMSIG(status), sb, sizeof sb),
                 WCOREDUMP(status) ? ", core dumped" : "");
    else
        snprintf(buf, len, "status 0x%x", status);
    return buf;
}

static int status_ok(int status)
{
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Died of the SIGTERM or SIGKILL that oobx-run sent. */
static int ended_by_us(int signaled, int status)
{
    return signaled && WIFSIGNALED(status) && (WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGKILL);
}
static int failed(int signaled, int status)
{
    return !status_ok(status) && !ended_by_us(signaled, status);
}

static int is_running(const run_rank_t *rk) { return rk->state == RANK_RUNNING; }
static int is_pending(const run_rank_t *rk) { return rk->state == RANK_PENDING; }
static int is_failed(const run_rank_t *rk)
{
    return rk->state == RANK_DONE && failed(rk->signaled, rk->status);
}
static int is_ended(const run_rank_t *rk)
{
    return rk->state == RANK_DONE && ended_by_us(rk->signaled, rk->status);
}

/* Appends "0-2,4,7-9" for the ranks where pick() holds; returns the count. */
static int rank_list(const run_job_t *job, int (*pick)(const run_rank_t *), char *buf, size_t len)
{
    size_t used = 0;
    int count = 0;
    buf[0] = '\0';
    for (int r = 0; r < job->opt.nranks; r++) {
        if (!pick(&job->ranks[r])) continue;
        int e = r;
        while (e + 1 < job->opt.nranks && pick(&job->ranks[e + 1])) e++;
        count += e - r + 1;
        if (used + 32 < len) {
            int n = e == r ? snprintf(buf + used, len - used, "%s%d", used ? "," : "", r)
                           : snprintf(buf + used, len - used, "%s%d-%d", used ? "," : "", r, e);
            used += (size_t)n;
        } else if (used + 4 < len && strcmp(buf + used - 3, "...") != 0) {
            used += (size_t)snprintf(buf + used, len - used, ",...");
        }
        r = e;
    }
    return count;
}

/* Contiguous blocks, as the library splits ranks among roots. */
static int block_first(int b, int n, int nb)
{
    int per = n / nb, extra = n % nb;
    return b * per + (b < extra ? b : extra);
}
static int block_of(int r, int n, int nb)
{
    int per = n / nb, extra = n % nb;
    int big = extra * (per + 1);
    if (r < big) return r / (per + 1);
    return extra + (r - big) / per;
}

/* ---- the sub-launcher: frames up ------------------------------------------ */

static void leaf_flush(leaf_t *L)
{
    if (L->olen) write_all(L->up_fd, L->obuf, L->olen);
    L->olen = 0;
    L->frame = -1;
}

static void leaf_put_hdr(leaf_t *L, size_t at, const up_hdr_t *h)
{
    memcpy(L->obuf + at, h, sizeof *h);
}

/* One line (without its newline) of a rank (rank -1: the sub-launcher's own). */
static void leaf_data(leaf_t *L, int stream, int rank, const char *line, size_t n)
{
    size_t need = sizeof(up_hdr_t) + 32 + n + 1;
    if (L->olen + need > RUN_FRAME_FLUSH && L->olen > 0) leaf_flush(L);
    if (L->frame < 0 || L->frame_stream != stream) {
        up_hdr_t h = {.type = UP_DATA, .len = 0, .a = stream};
        L->frame = (long)L->olen;
        L->frame_stream = stream;
        leaf_put_hdr(L, L->olen, &h);
        L->olen += sizeof h;
    }
    size_t start = L->olen;
    if (rank >= 0 && L->job->opt.prefix) L->olen += (size_t)snprintf(L->obuf + L->olen, 32, "[%d] ", rank);
    memcpy(L->obuf + L->olen, line, n);
    L->olen += n;
    L->obuf[L->olen++] = '\n';
    up_hdr_t h;
    memcpy(&h, L->obuf + L->frame, sizeof h);
    h.len += (uint32_t)(L->olen - start);
    leaf_put_hdr(L, (size_t)L->frame, &h);
}

static void leaf_msg(leaf_t *L, uint32_t type, int a, int b, int c)
{
    if (L->olen + sizeof(up_hdr_t) > RUN_OBUF_CAP) leaf_flush(L);
    up_hdr_t h = {.type = type, .len = 0, .a = a, .b = b, .c = c};
    leaf_put_hdr(L, L->olen, &h);
    L->olen += sizeof h;
    L->frame = -1;
}

/* ---- the sub-launcher: the ranks' output -------------------------------------- */

/* Takes bytes a rank wrote: complete lines go up, the rest waits; a line
 * longer than RUN_LINE_MAX goes up in pieces of RUN_LINE_MAX. */
static void stream_take(leaf_t *L, int local, int stream, const char *p, size_t n)
{
    leaf_stream_t *s = &L->ranks[local].io[stream];
    int rank = L->first + local;
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t seg = nl ? (size_t)(nl - p) : n;
        if (s->len + seg > RUN_LINE_MAX) {
            size_t take = RUN_LINE_MAX - s->len;
            if (s->len == 0) {
                leaf_data(L, stream, rank, p, take);
            } else {
                memcpy(s->buf + s->len, p, take);
                leaf_data(L, stream, rank, s->buf, RUN_LINE_MAX);
                s->len = 0;
            }
            p += take;
            n -= take;
            continue;
        }
        if (!nl) {
            if (!s->buf && !(s->buf = malloc(RUN_LINE_MAX))) {
                say("out of memory buffering the output of rank %d", rank);
                return;
            }
            memcpy(s->buf + s->len, p, n);
            s->len += n;
            return;
        }
        if (s->len == 0) {
            leaf_data(L, stream, rank, p, seg);
        } else {
            memcpy(s->buf + s->len, p, seg);
            leaf_data(L, stream, rank, s->buf, s->len + seg);
            s->len = 0;
        }
        p += seg + 1;
        n -= seg + 1;
    }
}

static void stream_close(leaf_t *L, int local, int stream)
{
    leaf_stream_t *s = &L->ranks[local].io[stream];
    if (s->fd < 0) return;
    if (s->len) leaf_data(L, stream, L->first + local, s->buf, s->len);
    epoll_ctl(L->epfd, EPOLL_CTL_DEL, s->fd, NULL);
    close(s->fd);
    s->fd = -1;
    free(s->buf);
    s->buf = NULL;
    s->len = 0;
    L->nopen--;
}

/* Reads what is there without blocking, at most max_reads chunks (fairness
 * between busy ranks; the level-triggered set reports the rest). */
static void stream_read(leaf_t *L, int local, int stream, int max_reads)
{
    leaf_stream_t *s = &L->ranks[local].io[stream];
    for (int i = 0; s->fd >= 0 && i < max_reads; i++) {
        ssize_t n = read(s->fd, L->scratch, RUN_READ_CHUNK);
        if (n > 0) {
            stream_take(L, local, stream, L->scratch, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        stream_close(L, local, stream); /* EOF or error */
        return;
    }
}

/* ---- the sub-launcher: ranks ---------------------------------------------------- */

static void child_fail(int rank, const char *what, int err)
{
    char msg[512];
    int n = snprintf(msg, sizeof msg, "oobx-run: rank %d: %s: %s\n", rank, what, strerror(err));
    if (n > 0) write_all(STDERR_FILENO, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    _exit(127);
}

/* In the rank's process, after fork: never returns. */
static void child_exec(leaf_t *L, int local, int out_w, int err_w)
{
    run_job_t *job = L->job;
    int rank = L->first + local;
    char num[32];
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != L->self) _exit(127); /* the sub-launcher is already gone */
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &job->orig_mask, NULL);

    if (dup2(out_w, STDOUT_FILENO) < 0 || dup2(err_w, STDERR_FILENO) < 0) _exit(127);
    /* Rank 0 reads oobx-run's input, unless that is a terminal: in its own
     * process group it would be stopped (SIGTTIN) on the first read. */
    if ((rank != 0 || isatty(STDIN_FILENO)) && job->devnull >= 0) dup2(job->devnull, STDIN_FILENO);

    snprintf(num, sizeof num, "%d", rank);
    if (setenv("OOBX_RANK", num, 1) != 0) child_fail(rank, "setenv", errno);
    snprintf(num, sizeof num, "%d", job->opt.nranks);
    if (setenv("OOBX_NRANKS", num, 1) != 0) child_fail(rank, "setenv", errno);
    if (setenv("OOBX_COMM_ID", job->comm_id, 1) != 0) child_fail(rank, "setenv", errno);
    if (setenv("OOBX_RUN_KEY", job->run_key, 1) != 0) child_fail(rank, "setenv", errno);
    if (job->opt.transport && setenv("OOBX_TRANSPORT", job->opt.transport, 1) != 0)
        child_fail(rank, "setenv", errno);
    /* this rank's place among its host's ranks (the hosts hold contiguous blocks) */
    int hb = job->opt.hosts ? block_of(rank, job->opt.nranks, job->nhosts) : 0;
    int hfirst = job->opt.hosts ? block_first(hb, job->opt.nranks, job->nhosts) : 0;
    int hnext = job->opt.hosts ? block_first(hb + 1, job->opt.nranks, job->nhosts) : job->opt.nranks;
    snprintf(num, sizeof num, "%d", rank - hfirst);
    if (setenv("OOBX_LOCAL_RANK", num, 1) != 0) child_fail(rank, "setenv", errno);
    snprintf(num, sizeof num, "%d", hnext - hfirst);
    if (setenv("OOBX_LOCAL_SIZE", num, 1) != 0) child_fail(rank, "setenv", errno);
    if (job->opt.hosts) {
        if (setenv("OOBX_SOCKET_IFNAME", RUN_HOST_IF, 1) != 0) child_fail(rank, "setenv", errno);
        /* the namespaces share the machine's /dev/shm and host name: the host id
         * keeps each emulated host's ranks to their own table */
        snprintf(num, sizeof num, "%d", block_of(rank, job->opt.nranks, job->nhosts));
        if (setenv("OOBX_HOST_ID", num, 1) != 0) child_fail(rank, "setenv", errno);
    } else if (setenv("OOBX_SOCKET_IFNAME", "lo", 0) != 0) {
        child_fail(rank, "setenv", errno);
    }
    /* the root's socket: inherited by this rank only */
    int rfd = L->ranks[local].root_fd;
    if (rfd >= 0) {
        if (fcntl(rfd, F_SETFD, 0) != 0) child_fail(rank, "fcntl on the root socket", errno);
        snprintf(num, sizeof num, "%d", rfd);
        if (setenv("OOBX_ROOT_FD", num, 1) != 0) child_fail(rank, "setenv", errno);
    } else {
        unsetenv("OOBX_ROOT_FD");
    }

    execvp(job->opt.argv[0], job->opt.argv);
    char what[300];
    snprintf(what, sizeof what, "cannot run %s", job->opt.argv[0]);
    child_fail(rank, what, errno);
}

static int leaf_watch(leaf_t *L, int fd, uint64_t data)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = data};
    return epoll_ctl(L->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static int rank_start(leaf_t *L, int local)
{
    leaf_rank_t *rk = &L->ranks[local];
    int rank = L->first + local;
    int p_out[2], p_err[2];
    if (pipe2(p_out, O_CLOEXEC) != 0) {
        say("pipe for rank %d: %s (raise the open file limit?)", rank, strerror(errno));
        return -1;
    }
    if (pipe2(p_err, O_CLOEXEC) != 0) {
        say("pipe for rank %d: %s (raise the open file limit?)", rank, strerror(errno));
        close(p_out[0]);
        close(p_out[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        say("fork for rank %d: %s", rank, strerror(errno));
        close(p_out[0]);
        close(p_out[1]);
        close(p_err[0]);
        close(p_err[1]);
        return -1;
    }
    if (pid == 0) child_exec(L, local, p_out[1], p_err[1]);
    setpgid(pid, pid); /* also done by the child; whichever runs first */
    close(p_out[1]);
    close(p_err[1]);
    if (rk->root_fd >= 0) { /* handed over */
        close(rk->root_fd);
        rk->root_fd = -1;
    }
    fcntl(p_out[0], F_SETFL, O_NONBLOCK);
    fcntl(p_err[0], F_SETFL, O_NONBLOCK);
    rk->pid = pid;
    rk->state = RANK_RUNNING;
    rk->io[STREAM_OUT].fd = p_out[0];
    rk->io[STREAM_ERR].fd = p_err[0];
    L->nopen += 2;
    if (leaf_watch(L, p_out[0], (uint64_t)local * 2) != 0 || leaf_watch(L, p_err[0], (uint64_t)local * 2 + 1) != 0)
        say("epoll for rank %d: %s; its output is lost", rank, strerror(errno));
    L->running++;
    return 0;
}

static void leaf_signal_all(leaf_t *L, int sig)
{
    for (int i = 0; i < L->count; i++) {
        leaf_rank_t *rk = &L->ranks[i];
        if (rk->state != RANK_RUNNING) continue;
        if (kill(-rk->pid, sig) != 0) kill(rk->pid, sig);
        rk->signaled = 1;
    }
}

/* No more starts, SIGTERM to the running ranks. */
static void leaf_end(leaf_t *L)
{
    if (L->ending) return;
    L->ending = 1;
    leaf_signal_all(L, SIGTERM);
}

static void leaf_reaped(leaf_t *L, int local, int status)
{
    leaf_rank_t *rk = &L->ranks[local];
    rk->state = RANK_DONE;
    L->running--;
    /* its last words come before the verdict */
    stream_read(L, local, STREAM_OUT, 64);
    stream_read(L, local, STREAM_ERR, 64);
    leaf_msg(L, UP_EXIT, local, status, rk->signaled);
    /* the first failure ends the job: end this block at once, the top ends the others */
    if (failed(rk->signaled, status)) leaf_end(L);
}

static void leaf_reap(leaf_t *L)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) {
            if (pid < 0 && errno == EINTR) continue;
            return;
        }
        for (int i = 0; i < L->count; i++) {
            if (L->ranks[i].pid == pid && L->ranks[i].state == RANK_RUNNING) {
                leaf_reaped(L, i, status);
                break;
            }
        }
    }
}

static void leaf_signals(leaf_t *L)
{
    struct signalfd_siginfo si;
    for (;;) {
        ssize_t n = read(L->sigfd, &si, sizeof si);
        if (n != (ssize_t)sizeof si) break;
        if (si.ssi_signo == SIGCHLD || si.ssi_signo == SIGPIPE) continue;
        /* signalled directly rather than through the top: end, then kill */
        if (L->ending) leaf_signal_all(L, SIGKILL);
        leaf_end(L);
    }
    leaf_reap(L);
}

static void leaf_commands(leaf_t *L)
{
    char cmd[64];
    for (;;) {
        ssize_t n = read(L->down_fd, cmd, sizeof cmd);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return;
        if (n == 0) {
            /* the top is gone: nobody to report to */
            leaf_signal_all(L, SIGKILL);
            _exit(1);
        }
        for (ssize_t i = 0; i < n; i++) {
            if (cmd[i] == DOWN_END) leaf_end(L);
            else if (cmd[i] == DOWN_KILL) {
                leaf_end(L);
                leaf_signal_all(L, SIGKILL);
            }
        }
    }
}

static int64_t leaf_next_start(const leaf_t *L)
{
    if (L->ending || L->started >= L->count) return -1;
    return L->job->t0_ms + (int64_t)(L->first + L->started) * L->job->opt.stagger_ms;
}

static void leaf_close_streams(leaf_t *L)
{
    for (int i = 0; i < L->count; i++) {
        stream_close(L, i, STREAM_OUT);
        stream_close(L, i, STREAM_ERR);
    }
}

static void leaf_loop(leaf_t *L)
{
    struct epoll_event ev[256];
    for (;;) {
        int64_t now = now_ms();
        int batch = 0;
        /* a few at a time: commands, exits and output are seen between batches */
        while (!L->ending && L->started < L->count && leaf_next_start(L) <= now && batch < RUN_START_BATCH) {
            if (rank_start(L, L->started) != 0) {
                leaf_msg(L, UP_NOSTART, L->started, 0, 0);
                leaf_end(L);
                break;
            }
            L->started++;
            batch++;
            if (L->job->opt.stagger_ms > 0) break;
        }
        if (batch) leaf_msg(L, UP_STARTED, L->started, 0, 0);

        int timeout = -1;
        if (L->running == 0 && (L->ending || L->started == L->count)) {
            if (L->nopen == 0) return;
            /* something the ranks started still holds their output open */
            now = now_ms();
            if (L->drain_until_ms < 0) L->drain_until_ms = now + RUN_DRAIN_GRACE_MS;
            if (now >= L->drain_until_ms) {
                leaf_close_streams(L);
                return;
            }
            timeout = (int)(L->drain_until_ms - now);
        }
        int64_t next = leaf_next_start(L);
        if (next >= 0) {
            int64_t d = next - now_ms();
            if (d < 0) d = 0;
            if (timeout < 0 || d < timeout) timeout = (int)(d > INT_MAX ? INT_MAX : d);
        }
        leaf_flush(L);
        int n = epoll_wait(L->epfd, ev, (int)(sizeof ev / sizeof ev[0]), timeout);
        if (n < 0) {
            if (errno == EINTR) continue;
            say("epoll_wait: %s", strerror(errno));
            leaf_signal_all(L, SIGKILL);
            leaf_flush(L);
            _exit(1);
        }
        int sig = 0, cmd = 0;
        for (int i = 0; i < n; i++) {
            uint64_t d = ev[i].data.u64;
            if (d == UINT64_MAX) sig = 1;
            else if (d == UINT64_MAX - 1) cmd = 1;
            else stream_read(L, (int)(d / 2), (int)(d % 2), 4);
        }
        if (cmd) leaf_commands(L);
        if (sig) leaf_signals(L);
    }
}

/* The child of the top's fork for sub-launcher k: never returns. */
static void leaf_main(run_job_t *job, int k, int up_w, int down_r) __attribute__((noreturn));
static void leaf_main(run_job_t *job, int k, int up_w, int down_r)
{
    run_sub_t *sub = &job->subs[k];
    setpgid(0, 0); /* terminal signals go to the top alone; it forwards them */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != job->self) _exit(1);
    prctl(PR_SET_NAME, "oobx-run-sub");

    /* keep only what this block needs */
    for (int i = 0; i < k; i++) {
        if (job->subs[i].up_fd >= 0) close(job->subs[i].up_fd);
        if (job->subs[i].down_fd >= 0) close(job->subs[i].down_fd);
    }
    for (int i = 0; i < job->opt.nroots; i++) {
        run_root_t *rt = &job->roots[i];
        if (rt->fd >= 0 && (rt->rank < sub->first || rt->rank >= sub->first + sub->count)) {
            close(rt->fd);
            rt->fd = -1;
        }
    }
    if (job->opt.hosts && setns(job->hosts[sub->host].nsfd, CLONE_NEWNET) != 0) {
        char msg[256];
        int n = snprintf(msg, sizeof msg, "oobx-run: cannot enter the namespace %s: %s\n", job->hosts[sub->host].ns,
                         strerror(errno));
        write_all(STDERR_FILENO, msg, (size_t)n);
        _exit(1);
    }
    for (int h = 0; job->hosts && h < job->nhosts; h++)
        if (job->hosts[h].nsfd >= 0) close(job->hosts[h].nsfd);
    if (job->orig_ns >= 0) close(job->orig_ns);
    close(job->sigfd);

    static leaf_t leaf;
    leaf_t *L = &leaf;
    memset(L, 0, sizeof *L);
    L->job = job;
    L->sub = sub;
    L->first = sub->first;
    L->count = sub->count;
    L->up_fd = up_w;
    L->down_fd = down_r;
    L->self = getpid();
    L->frame = -1;
    L->drain_until_ms = -1;
    L->ranks = calloc((size_t)L->count, sizeof *L->ranks);
    L->obuf = malloc(RUN_OBUF_CAP);
    L->scratch = malloc(RUN_READ_CHUNK);
    L->sigfd = signalfd(-1, &job->mask, SFD_NONBLOCK | SFD_CLOEXEC);
    L->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!L->ranks || !L->obuf || !L->scratch || L->sigfd < 0 || L->epfd < 0) {
        const char msg[] = "oobx-run: a sub-launcher could not set up (memory, signalfd or epoll)\n";
        write_all(STDERR_FILENO, msg, sizeof msg - 1);
        _exit(1);
    }
    g_leaf = L;
    for (int i = 0; i < L->count; i++) {
        L->ranks[i].root_fd = -1;
        L->ranks[i].io[0].fd = L->ranks[i].io[1].fd = -1;
    }
    for (int i = 0; i < job->opt.nroots; i++)
        if (job->roots[i].fd >= 0) L->ranks[job->roots[i].rank - L->first].root_fd = job->roots[i].fd;
    fcntl(down_r, F_SETFL, O_NONBLOCK);
    if (leaf_watch(L, L->sigfd, UINT64_MAX) != 0 || leaf_watch(L, down_r, UINT64_MAX - 1) != 0) {
        say("epoll: %s", strerror(errno));
        leaf_flush(L);
        _exit(1);
    }
    leaf_loop(L);
    leaf_flush(L);
    _exit(0);
}

/* ---- the top: sub-launchers -------------------------------------------------- */

static void top_command(run_job_t *job, char cmd)
{
    for (int i = 0; i < job->nsubs; i++) {
        run_sub_t *s = &job->subs[i];
        if (s->down_fd < 0 || s->reaped) continue;
        ssize_t w;
        do w = write(s->down_fd, &cmd, 1);
        while (w < 0 && errno == EINTR);
    }
}

/* Ends the job: no more starts, SIGTERM now, SIGKILL after the grace. */
static void end_all(run_job_t *job)
{
    if (job->ending) return;
    job->ending = 1;
    top_command(job, DOWN_END);
    job->kill_at_ms = now_ms() + RUN_KILL_GRACE_MS;
}

static void top_rank_done(run_job_t *job, int rank, int status, int signaled)
{
    run_rank_t *rk = &job->ranks[rank];
    if (rk->state != RANK_RUNNING) return;
    rk->state = RANK_DONE;
    rk->status = status;
    rk->signaled = (unsigned char)(signaled != 0);
    job->running--;
    if (!is_failed(rk)) return;
    if (job->failed_first < 0) job->failed_first = rank;
    if (job->ending) return;
    char st[64];
    int others = job->running + (job->opt.nranks - job->started);
    if (WIFEXITED(status))
        say("rank %d exited with status %d; ending %d other rank%s", rank, WEXITSTATUS(status), others,
            others == 1 ? "" : "s");
    else
        say("rank %d was killed by %s; ending %d other rank%s", rank, status_text(status, st, sizeof st), others,
            others == 1 ? "" : "s");
    end_all(job);
}

/* Returns -1 when the frame makes no sense. */
static int top_frame(run_job_t *job, run_sub_t *s, const up_hdr_t *h, const char *payload)
{
    switch (h->type) {
    case UP_DATA:
        write_all(h->a == STREAM_ERR ? STDERR_FILENO : STDOUT_FILENO, payload, h->len);
        return 0;
    case UP_STARTED:
        if (h->a < s->started || h->a > s->count) return -1;
        for (int r = s->first + s->started; r < s->first + h->a; r++) {
            job->ranks[r].state = RANK_RUNNING;
            job->running++;
            job->started++;
        }
        s->started = h->a;
        return 0;
    case UP_EXIT:
        if (h->a < 0 || h->a >= s->started) return -1;
        top_rank_done(job, s->first + h->a, h->b, h->c);
        return 0;
    case UP_NOSTART:
        if (h->a < 0 || h->a >= s->count) return -1;
        if (job->failed_first < 0) job->failed_first = s->first + h->a;
        if (!job->ending) {
            say("could not start rank %d; ending the %d started rank%s", s->first + h->a, job->running,
                job->running == 1 ? "" : "s");
            end_all(job);
        }
        return 0;
    }
    return -1;
}

static void top_sub_broken(run_job_t *job, run_sub_t *s, const char *why)
{
    say("the sub-launcher of ranks %d-%d %s; ending it", s->first, s->first + s->count - 1, why);
    kill(s->pid, SIGKILL);
    if (s->up_fd >= 0) close(s->up_fd);
    s->up_fd = -1;
    job->internal = 1;
    end_all(job);
}

/* Reads the frames that are there (at most max_reads chunks). */
static void top_read(run_job_t *job, run_sub_t *s, int max_reads)
{
    for (int i = 0; s->up_fd >= 0 && i < max_reads; i++) {
        ssize_t n = read(s->up_fd, s->in + s->len, RUN_IN_CAP - s->len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n <= 0) {
            if (s->len) top_sub_broken(job, s, "ended in the middle of a message");
            if (s->up_fd >= 0) close(s->up_fd);
            s->up_fd = -1;
            return;
        }
        s->len += (size_t)n;
        size_t off = 0;
        while (s->len - off >= sizeof(up_hdr_t)) {
            up_hdr_t h;
            memcpy(&h, s->in + off, sizeof h);
            if (h.len > RUN_IN_CAP - sizeof h || (h.type != UP_DATA && h.len != 0)) {
                top_sub_broken(job, s, "sent a malformed message");
                return;
            }
            if (s->len - off < sizeof h + h.len) break;
            if (top_frame(job, s, &h, s->in + off + sizeof h) != 0) {
                top_sub_broken(job, s, "sent a message that makes no sense");
                return;
            }
            off += sizeof h + h.len;
        }
        memmove(s->in, s->in + off, s->len - off);
        s->len -= off;
    }
}

static void top_drain_all(run_job_t *job)
{
    for (int i = 0; i < job->nsubs; i++) top_read(job, &job->subs[i], 64);
}

/* A sub-launcher that is reaped and read to its end: any rank it left
 * unaccounted for died with it (its ranks get SIGKILL when it dies). */
static void top_sub_finish(run_job_t *job, run_sub_t *s)
{
    if (s->done || !s->reaped || s->up_fd >= 0) return;
    s->done = 1;
    if (s->down_fd >= 0) close(s->down_fd);
    s->down_fd = -1;
    free(s->in);
    s->in = NULL;
    int lost = 0;
    for (int r = s->first; r < s->first + s->started; r++)
        if (job->ranks[r].state == RANK_RUNNING) lost++;
    if (lost == 0 && status_ok(s->status)) return;
    char st[64];
    job->internal = 1;
    say("the sub-launcher of ranks %d-%d ended (%s)%s", s->first, s->first + s->count - 1,
        status_text(s->status, st, sizeof st), lost ? "; its running ranks died with it (SIGKILL)" : "");
    for (int r = s->first; r < s->first + s->started; r++)
        if (job->ranks[r].state == RANK_RUNNING) top_rank_done(job, r, SIGKILL, 0);
    end_all(job);
}

static void top_reap(run_job_t *job)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) {
            if (pid < 0 && errno == EINTR) continue;
            return;
        }
        for (int i = 0; i < job->nsubs; i++) {
            run_sub_t *s = &job->subs[i];
            if (s->pid == pid && !s->reaped) {
                s->reaped = 1;
                s->status = status;
                top_read(job, s, 1 << 20); /* everything it wrote before it ended */
                top_sub_finish(job, s);
                break;
            }
        }
    }
}

static void handle_signals(run_job_t *job)
{
    struct signalfd_siginfo si;
    for (;;) {
        ssize_t n = read(job->sigfd, &si, sizeof si);
        if (n != (ssize_t)sizeof si) break;
        if (si.ssi_signo == SIGCHLD) continue; /* reaped below */
        if (si.ssi_signo == SIGPIPE) continue;
        char sb[32];
        if (!job->interrupted) {
            job->interrupted = (int)si.ssi_signo;
            top_drain_all(job);
            int left = job->running;
            say("received %s; ending %d running rank%s", signal_name((int)si.ssi_signo, sb, sizeof sb), left,
                left == 1 ? "" : "s");
            end_all(job);
        } else if (!job->killed) {
            /* a second interrupt: do not wait for the grace */
            job->kill_at_ms = now_ms();
        }
    }
    top_reap(job);
}

static void on_deadline(run_job_t *job)
{
    char list[1024];
    top_drain_all(job);
    job->timed_out = 1;
    int n = rank_list(job, is_running, list, sizeof list);
    int p = job->opt.nranks - job->started;
    say("the deadline of %g s passed; %d rank%s still running: %s%s", job->opt.timeout_s, n, n == 1 ? "" : "s",
        n ? list : "none", p ? " (and the ranks not started yet)" : "");
    end_all(job);
}

static void on_kill_time(run_job_t *job)
{
    char list[1024];
    top_drain_all(job);
    job->killed = 1;
    job->kill_at_ms = -1;
    int n = rank_list(job, is_running, list, sizeof list);
    if (n == 0) return;
    say("%d rank%s still running %.0f s after SIGTERM, sending SIGKILL: %s", n, n == 1 ? "" : "s",
        RUN_KILL_GRACE_MS / 1000.0, list);
    top_command(job, DOWN_KILL);
}

static int min_timeout(int64_t now, int64_t at, int cur)
{
    if (at < 0) return cur;
    int64_t d = at - now;
    if (d < 0) d = 0;
    if (cur < 0 || d < cur) return (int)(d > INT_MAX ? INT_MAX : d);
    return cur;
}

/* Forks sub-launcher k; hands it the roots of its block. */
static int sub_start(run_job_t *job, int k)
{
    run_sub_t *s = &job->subs[k];
    int up[2], down[2];
    s->in = malloc(RUN_IN_CAP);
    if (!s->in) {
        say("out of memory");
        return -1;
    }
    if (pipe2(up, O_CLOEXEC) != 0) {
        say("pipe for the sub-launcher of ranks %d-%d: %s", s->first, s->first + s->count - 1, strerror(errno));
        return -1;
    }
    if (pipe2(down, O_CLOEXEC) != 0) {
        say("pipe for the sub-launcher of ranks %d-%d: %s", s->first, s->first + s->count - 1, strerror(errno));
        close(up[0]);
        close(up[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        say("fork for the sub-launcher of ranks %d-%d: %s", s->first, s->first + s->count - 1, strerror(errno));
        close(up[0]);
        close(up[1]);
        close(down[0]);
        close(down[1]);
        return -1;
    }
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        leaf_main(job, k, up[1], down[0]);
    }
    setpgid(pid, pid);
    close(up[1]);
    close(down[0]);
    fcntl(up[0], F_SETFL, O_NONBLOCK);
    fcntl(down[1], F_SETFL, O_NONBLOCK);
    s->pid = pid;
    s->up_fd = up[0];
    s->down_fd = down[1];
    for (int i = 0; i < job->opt.nroots; i++) {
        run_root_t *rt = &job->roots[i];
        if (rt->fd >= 0 && rt->rank >= s->first && rt->rank < s->first + s->count) {
            close(rt->fd);
            rt->fd = -1;
        }
    }
    return 0;
}

static int job_loop(run_job_t *job)
{
    struct pollfd *pfd = calloc((size_t)job->nsubs + 1, sizeof *pfd);
    int *who = calloc((size_t)job->nsubs + 1, sizeof *who);
    if (!pfd || !who) {
        free(pfd);
        free(who);
        say("out of memory");
        return -1;
    }
    for (int k = 0; k < job->nsubs; k++) {
        if (sub_start(job, k) != 0) {
            /* the ranks of the blocks not started stay "not started" */
            if (job->failed_first < 0) job->failed_first = job->subs[k].first;
            job->internal = 1;
            for (int j = k; j < job->nsubs; j++) {
                job->subs[j].reaped = job->subs[j].done = 1;
                job->subs[j].up_fd = job->subs[j].down_fd = -1;
            }
            end_all(job);
            break;
        }
    }
    for (;;) {
        int64_t now = now_ms();
        if (job->deadline_ms >= 0 && !job->timed_out && now >= job->deadline_ms) on_deadline(job);
        if (job->kill_at_ms >= 0 && now >= job->kill_at_ms) on_kill_time(job);

        int live = 0, reading = 0;
        for (int k = 0; k < job->nsubs; k++) {
            if (!job->subs[k].reaped) live++;
            if (job->subs[k].up_fd >= 0) reading++;
        }
        if (live == 0) {
            if (reading == 0) break;
            /* a sub-launcher's pipe outlives it: give it the drain grace */
            if (job->drain_until_ms < 0) job->drain_until_ms = now + RUN_DRAIN_GRACE_MS;
            if (now >= job->drain_until_ms) {
                for (int k = 0; k < job->nsubs; k++) {
                    run_sub_t *s = &job->subs[k];
                    if (s->up_fd >= 0) close(s->up_fd);
                    s->up_fd = -1;
                    top_sub_finish(job, s);
                }
                break;
            }
        }

        int nfds = 0;
        pfd[nfds].fd = job->sigfd;
        pfd[nfds].events = POLLIN;
        who[nfds++] = -1;
        for (int k = 0; k < job->nsubs; k++) {
            if (job->subs[k].up_fd < 0) continue;
            pfd[nfds].fd = job->subs[k].up_fd;
            pfd[nfds].events = POLLIN;
            who[nfds++] = k;
        }
        int timeout = -1;
        if (!job->timed_out) timeout = min_timeout(now, job->deadline_ms, timeout);
        timeout = min_timeout(now, job->kill_at_ms, timeout);
        if (live == 0) timeout = min_timeout(now, job->drain_until_ms, timeout);

        int rc = poll(pfd, (nfds_t)nfds, timeout);
        if (rc < 0) {
            if (errno == EINTR) continue;
            say("poll: %s", strerror(errno));
            free(pfd);
            free(who);
            return -1;
        }
        for (int i = 1; i < nfds && rc > 0; i++) {
            if (!pfd[i].revents) continue;
            run_sub_t *s = &job->subs[who[i]];
            top_read(job, s, 8);
            top_sub_finish(job, s);
        }
        if (pfd[0].revents) handle_signals(job);
    }
    free(pfd);
    free(who);
    return 0;
}

/* ---- summary ------------------------------------------------------------------ */

static int report(run_job_t *job)
{
    int nfail = 0;
    for (int r = 0; r < job->opt.nranks; r++) {
        if (is_failed(&job->ranks[r])) nfail++;
    }
    if (nfail > 0) {
        char line[4096], st[64];
        size_t used = 0;
        int listed = 0;
        for (int r = 0; r < job->opt.nranks && listed < RUN_LIST_MAX; r++) {
            run_rank_t *rk = &job->ranks[r];
            if (!is_failed(rk)) continue;
            used += (size_t)snprintf(line + used, sizeof line - used, "%s%d (%s)", listed ? ", " : "", r,
                                     status_text(rk->status, st, sizeof st));
            listed++;
        }
        if (nfail > listed) snprintf(line + used, sizeof line - used, ", and %d more", nfail - listed);
        say("failed ranks: %s", line);
    }
    char list[1024];
    int nend = rank_list(job, is_ended, list, sizeof list);
    if (nend > 0) say("ended by oobx-run: rank%s %s", nend == 1 ? "" : "s", list);
    int npend = rank_list(job, is_pending, list, sizeof list);
    if (npend > 0 && (nfail || job->timed_out || job->interrupted || job->failed_first >= 0 || job->internal))
        say("not started: rank%s %s", npend == 1 ? "" : "s", list);

    if (job->interrupted) return 128 + job->interrupted;
    if (nfail > 0 || job->failed_first >= 0 || job->internal) return 1;
    if (job->timed_out) return 124;
    for (int r = 0; r < job->opt.nranks; r++)
        if (job->ranks[r].state != RANK_DONE || !status_ok(job->ranks[r].status)) return 1;
    return 0;
}

/* ---- emulated hosts: network namespaces ---------------------------------------- */

/* Runs `ip [-n NETNS] [-force] -batch -` on the commands in cmds, one a
 * line. 0 when it exits 0; otherwise says why. */
static int ip_batch(run_job_t *job, const char *netns, int force, const char *cmds)
{
    char out[2048];
    int in = memfd_create("oobx-run-ip", MFD_CLOEXEC);
    if (in < 0) {
        say("memfd_create: %s", strerror(errno));
        return -1;
    }
    write_all(in, cmds, strlen(cmds));
    lseek(in, 0, SEEK_SET);
    char *argv[8];
    int argc = 0;
    argv[argc++] = "ip";
    if (netns) {
        argv[argc++] = "-n";
        argv[argc++] = (char *)netns;
    }
    if (force) argv[argc++] = "-force";
    argv[argc++] = "-batch";
    argv[argc++] = "-";
    argv[argc] = NULL;
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        say("pipe: %s", strerror(errno));
        close(in);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        say("fork: %s", strerror(errno));
        close(in);
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &job->orig_mask, NULL);
        signal(SIGPIPE, SIG_DFL);
        dup2(in, STDIN_FILENO);
        dup2(p[1], STDOUT_FILENO);
        dup2(p[1], STDERR_FILENO);
        execvp("ip", argv);
        _exit(127);
    }
    close(in);
    close(p[1]);
    size_t used = 0;
    for (;;) {
        char sink[512];
        int full = used == sizeof out - 1; /* keep the start, drain the rest */
        ssize_t n = full ? read(p[0], sink, sizeof sink) : read(p[0], out + used, sizeof out - 1 - used);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (!full) used += (size_t)n;
    }
    close(p[0]);
    out[used] = '\0';
    while (used && (out[used - 1] == '\n' || out[used - 1] == ' ')) out[--used] = '\0';
    for (char *c = out; *c; c++)
        if (*c == '\n') *c = ' ';
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (status_ok(status)) return 0;
    char st[64];
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && !used)
        say("--hosts needs the ip command (iproute2): cannot run ip");
    else
        say("ip%s%s -batch: %s", netns ? " -n " : "", netns ? netns : "",
            used ? out : status_text(status, st, sizeof st));
    return -1;
}

/* Field 22 of /proc/PID/stat: when the process started, in clock ticks. */
static unsigned long long proc_start_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the name may hold spaces */
    if (!p) return 0;
    unsigned long long v = 0;
    int field = 2;
    for (char *t = p + 1; *t; t++) {
        if (*t != ' ') continue;
        field++;
        if (field == 22) {
            v = strtoull(t + 1, NULL, 10);
            break;
        }
    }
    return v;
}

/* A growing text of ip commands. */
typedef struct cmdbuf {
    char *s;
    size_t len, cap;
} cmdbuf_t;

static void cmd_add(cmdbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cmd_add(cmdbuf_t *b, const char *fmt, ...)
{
    if (b->cap - b->len < 512) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        char *ns = realloc(b->s, cap);
        if (!ns) return; /* ip reports the missing lines' effects */
        b->s = ns;
        b->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < b->cap - b->len) b->len += (size_t)n;
}

/* Removes the namespaces of earlier runs whose oobx-run is gone: their names
 * carry the pid and the start time of the oobx-run that made them. */
static void net_remove_stale(run_job_t *job)
{
    DIR *d = opendir("/run/netns");
    if (!d) return;
    struct dirent *e;
    cmdbuf_t b = {0};
    int n = 0;
    while ((e = readdir(d))) {
        int pid;
        unsigned long long start;
        char rest[64];
        if (sscanf(e->d_name, "oobx-run-%d.%llu-%63s", &pid, &start, rest) != 3) continue;
        if (pid == (int)job->self) continue;
        if (pid > 0 && proc_start_ticks(pid) == start) continue; /* still running */
        cmd_add(&b, "netns del %s\n", e->d_name);
        n++;
    }
    closedir(d);
    if (n && ip_batch(job, NULL, 1, b.s) == 0)
        say("removed %d network namespace%s left by an oobx-run that is gone", n, n == 1 ? "" : "s");
    free(b.s);
}

static void net_cleanup(run_job_t *job)
{
    if (!job->hosts) return;
    cmdbuf_t b = {0};
    for (int h = 0; h < job->nhosts; h++) {
        run_host_t *ho = &job->hosts[h];
        if (ho->nsfd >= 0) close(ho->nsfd);
        ho->nsfd = -1;
        if (ho->made) cmd_add(&b, "netns del %s\n", ho->ns);
        ho->made = 0;
    }
    if (job->brns_made) cmd_add(&b, "netns del %s\n", job->brns);
    job->brns_made = 0;
    if (b.len) ip_batch(job, NULL, 1, b.s);
    free(b.s);
    if (job->orig_ns >= 0) close(job->orig_ns);
    job->orig_ns = -1;
}

static int if_up(int s, const char *name)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
    if (ioctl(s, SIOCGIFFLAGS, &ifr) != 0) return -1;
    ifr.ifr_flags |= IFF_UP;
    return ioctl(s, SIOCSIFFLAGS, &ifr);
}

/* Inside host h's namespace: its address on RUN_HOST_IF, which goes up with lo. */
static int host_configure(run_job_t *job, int h)
{
    run_host_t *ho = &job->hosts[h];
    if (setns(ho->nsfd, CLONE_NEWNET) != 0) {
        say("cannot enter the namespace %s: %s", ho->ns, strerror(errno));
        return -1;
    }
    int rc = -1;
    const char *what = "socket";
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s >= 0) {
        struct ifreq ifr;
        memset(&ifr, 0, sizeof ifr);
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", RUN_HOST_IF);
        struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
        sin->sin_family = AF_INET;
        inet_pton(AF_INET, ho->addr, &sin->sin_addr);
        if (ioctl(s, SIOCSIFADDR, &ifr) != 0) {
            what = "setting the address";
        } else {
            sin->sin_addr.s_addr = htonl(0xffff0000u);
            if (ioctl(s, SIOCSIFNETMASK, &ifr) != 0) what = "setting the netmask";
            else if (if_up(s, RUN_HOST_IF) != 0) what = "bringing " RUN_HOST_IF " up";
            else if (if_up(s, "lo") != 0) what = "bringing lo up";
            else rc = 0;
        }
    }
    int err = errno;
    if (s >= 0) close(s);
    if (setns(job->orig_ns, CLONE_NEWNET) != 0) {
        say("cannot go back to the launcher's namespace: %s", strerror(errno));
        return -1;
    }
    if (rc != 0) say("namespace %s: %s %s/16: %s", ho->ns, what, ho->addr, strerror(err));
    return rc;
}

/* One namespace per host and one for the bridge; host h is 10.77.x.y/16 on
 * RUN_HOST_IF, x.y = h + 1. Nothing touches the launcher's own namespace. */
static int net_setup(run_job_t *job)
{
    if (geteuid() != 0) {
        say("--hosts needs root: it makes network namespaces");
        return -1;
    }
    job->orig_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (job->orig_ns < 0) {
        say("/proc/self/ns/net: %s", strerror(errno));
        return -1;
    }
    snprintf(job->tag, sizeof job->tag, "oobx-run-%d.%llu", (int)job->self, proc_start_ticks(job->self));
    net_remove_stale(job);
    snprintf(job->brns, sizeof job->brns, "%s-br", job->tag);
    cmdbuf_t b = {0};
    cmd_add(&b, "netns add %s\n", job->brns);
    for (int h = 0; h < job->nhosts; h++) {
        run_host_t *ho = &job->hosts[h];
        snprintf(ho->ns, sizeof ho->ns, "%s-h%d", job->tag, h);
        snprintf(ho->addr, sizeof ho->addr, "10.77.%d.%d", (h + 1) >> 8, (h + 1) & 255);
        cmd_add(&b, "netns add %s\n", ho->ns);
    }
    /* marked made before: a half-made set is removed at exit all the same */
    job->brns_made = 1;
    for (int h = 0; h < job->nhosts; h++) job->hosts[h].made = 1;
    int rc = ip_batch(job, NULL, 0, b.s);
    b.len = 0;
    if (rc == 0) {
        cmd_add(&b, "link add name br0 type bridge\nlink set dev br0 up\nlink set dev lo up\n");
        for (int h = 0; h < job->nhosts; h++)
            cmd_add(&b, "link add v%d type veth peer name %s netns %s\nlink set dev v%d master br0 up\n", h,
                    RUN_HOST_IF, job->hosts[h].ns, h);
        rc = ip_batch(job, job->brns, 0, b.s);
    }
    free(b.s);
    if (rc != 0) return -1;
    for (int h = 0; h < job->nhosts; h++) {
        run_host_t *ho = &job->hosts[h];
        char path[128];
        snprintf(path, sizeof path, "/run/netns/%s", ho->ns);
        ho->nsfd = open(path, O_RDONLY | O_CLOEXEC);
        if (ho->nsfd < 0) {
            say("%s: %s", path, strerror(errno));
            return -1;
        }
        if (host_configure(job, h) != 0) return -1;
    }
    return 0;
}

/* ---- roots ----------------------------------------------------------------- */

/* Makes R listening sockets on free ports: on loopback, or on their hosts'
 * addresses inside their namespaces. They listen from now on, so no other
 * socket can take their ports; each is handed to the rank that hosts it. */
static int roots_make(run_job_t *job)
{
    int R = job->opt.nroots;
    size_t cap = (size_t)R * 64 + 1;
    job->roots = calloc((size_t)R, sizeof *job->roots);
    job->comm_id = malloc(cap);
    if (!job->roots || !job->comm_id) {
        say("out of memory");
        return -1;
    }
    size_t used = 0;
    job->comm_id[0] = '\0';
    /* a fresh job identity per run: two runs on one address never merge, and
     * only processes that were given it can join */
    unsigned char key[16];
    if (getrandom(key, sizeof key, 0) != (ssize_t)sizeof key) {
        say("getrandom: %s", strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < sizeof key; i++) snprintf(job->run_key + 2 * i, 3, "%02x", key[i]);
    for (int i = 0; i < R; i++) job->roots[i].fd = -1;
    for (int i = 0; i < R; i++) {
        run_root_t *rt = &job->roots[i];
        rt->rank = block_first(i, job->opt.nranks, R);
        rt->host = job->opt.hosts ? block_of(rt->rank, job->opt.nranks, job->nhosts) : 0;
        int family = job->opt.ipv6 ? AF_INET6 : AF_INET;
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof ss);
        socklen_t sl;
        char host[64];
        if (job->opt.ipv6) {
            struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
            s6->sin6_family = AF_INET6;
            s6->sin6_addr = in6addr_loopback;
            sl = sizeof *s6;
            snprintf(host, sizeof host, "[::1]");
        } else {
            struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
            s4->sin_family = AF_INET;
            const char *a = job->opt.hosts ? job->hosts[rt->host].addr : "127.0.0.1";
            inet_pton(AF_INET, a, &s4->sin_addr);
            sl = sizeof *s4;
            snprintf(host, sizeof host, "%s", a);
        }
        if (job->opt.hosts && setns(job->hosts[rt->host].nsfd, CLONE_NEWNET) != 0) {
            say("cannot enter the namespace %s: %s", job->hosts[rt->host].ns, strerror(errno));
            return -1;
        }
        int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int err = fd < 0 ? errno : 0;
        if (fd >= 0 && (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 16384) != 0 ||
                        getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)) {
            err = errno;
            close(fd);
            fd = -1;
        }
        if (job->opt.hosts && setns(job->orig_ns, CLONE_NEWNET) != 0) {
            say("cannot go back to the launcher's namespace: %s", strerror(errno));
            if (fd >= 0) close(fd);
            return -1;
        }
        if (fd < 0) {
            say("cannot listen on a free port of %s for root %d: %s", host, i, strerror(err));
            return -1;
        }
        rt->fd = fd;
        rt->port = ntohs(job->opt.ipv6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                       : ((struct sockaddr_in *)&ss)->sin_port);
        used += (size_t)snprintf(job->comm_id + used, cap - used, "%s%s:%d", i ? "," : "", host, rt->port);
    }
    return 0;
}

/* ---- setup --------------------------------------------------------------------- */

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: oobx-run -n N [options] [--] PROGRAM [ARGS...]\n"
            "Starts N local ranks of PROGRAM with OOBX_RANK, OOBX_NRANKS and OOBX_COMM_ID set\n"
            "(R roots listening on free loopback ports) and prints each line they write as\n"
            "\"[rank] line\". When a rank fails or the deadline passes, the others get SIGTERM,\n"
            "then SIGKILL after 2 s, and the failed ranks are named.\n"
            "\n"
            "  -n, --nranks N       number of ranks (required)\n"
            "  -r, --roots R        number of roots, each hosted by the first rank of its\n"
            "                       block, which inherits its listening socket (OOBX_ROOT_FD)\n"
            "                       (default 1)\n"
            "  -t, --transport T    sets OOBX_TRANSPORT=T (auto, socket, ucx, verbs)\n"
            "  -T, --timeout S      deadline for the whole job in seconds (default 300; 0: none)\n"
            "      --stagger-ms M   start rank i at i*M ms (default 0: all at once)\n"
            "  -6, --ipv6           roots on [::1] instead of 127.0.0.1\n"
            "      --hosts H        spread the ranks over H emulated hosts, one network\n"
            "                       namespace each (10.77.0.h+1 on %s; needs root and ip)\n"
            "      --ranks-per-launcher K\n"
            "                       ranks watched by one sub-launcher (default %d)\n"
            "      --no-prefix      print the ranks' lines without the \"[rank] \" prefix\n"
            "      --tag-output     print the prefix (the default)\n"
            "  -h, --help           this text\n"
            "\n"
            "OOBX_SOCKET_IFNAME is set to \"lo\" unless already set (to %s with --hosts).\n"
            "Exit status: 0 when every rank exited 0; 1 when a rank failed; 124 when the\n"
            "deadline passed; 128+signal when oobx-run was interrupted; 2 for a usage error\n"
            "or a job that cannot be set up (open files, roots' sockets, namespaces).\n",
            RUN_HOST_IF, RUN_PER_LAUNCHER, RUN_HOST_IF);
}

static int parse_int(const char *s, const char *what, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        say("%s must be an integer in [%d, %d], not \"%s\"", what, lo, hi, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_opts(int argc, char **argv, run_opts_t *o)
{
    enum { OPT_STAGGER = 256, OPT_NOPREFIX, OPT_TAG, OPT_HOSTS, OPT_PER };
    static const struct option longopts[] = {
        {"nranks", required_argument, NULL, 'n'},
        {"np", required_argument, NULL, 'n'},
        {"roots", required_argument, NULL, 'r'},
        {"transport", required_argument, NULL, 't'},
        {"timeout", required_argument, NULL, 'T'},
        {"stagger-ms", required_argument, NULL, OPT_STAGGER},
        {"hosts", required_argument, NULL, OPT_HOSTS},
        {"ranks-per-launcher", required_argument, NULL, OPT_PER},
        {"no-prefix", no_argument, NULL, OPT_NOPREFIX},
        {"tag-output", no_argument, NULL, OPT_TAG},
        {"ipv6", no_argument, NULL, '6'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (run_opts_t){.nranks = 0, .nroots = 1, .timeout_s = 300, .prefix = 1, .per_launcher = RUN_PER_LAUNCHER};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+n:r:t:T:h6", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (parse_int(optarg, "-n", 1, 1 << 20, &o->nranks)) return -1;
            break;
        case 'r':
            if (parse_int(optarg, "--roots", 1, 1 << 20, &o->nroots)) return -1;
            break;
        case 't':
            o->transport = optarg;
            break;
        case 'T': {
            char *end;
            errno = 0;
            o->timeout_s = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(o->timeout_s >= 0) || o->timeout_s > 1e7) {
                say("--timeout must be a number of seconds >= 0, not \"%s\"", optarg);
                return -1;
            }
            break;
        }
        case OPT_STAGGER:
            if (parse_int(optarg, "--stagger-ms", 0, 3600 * 1000, &o->stagger_ms)) return -1;
            break;
        case OPT_HOSTS:
            if (parse_int(optarg, "--hosts", 1, RUN_MAX_HOSTS, &o->hosts)) return -1;
            break;
        case OPT_PER:
            if (parse_int(optarg, "--ranks-per-launcher", 1, 1 << 20, &o->per_launcher)) return -1;
            break;
        case '6':
            o->ipv6 = 1;
            break;
        case OPT_NOPREFIX:
            o->prefix = 0;
            break;
        case OPT_TAG:
            o->prefix = 1;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            if (optopt && optopt < 256 && strchr("nrtT", optopt))
                say("%s needs a value (see oobx-run -h)", argv[optind - 1]);
            else if (optopt && optopt < 256)
                say("option -%c is unknown (see oobx-run -h)", optopt);
            else
                say("unknown option or missing value: %s (see oobx-run -h)", argv[optind - 1]);
            return -1;
        }
    }
    if (o->nranks <= 0) {
        say("-n N is required (see oobx-run -h)");
        return -1;
    }
    if (o->nroots > o->nranks) {
        say("--roots %d is more than the %d ranks", o->nroots, o->nranks);
        return -1;
    }
    if (o->hosts > o->nranks) {
        say("--hosts %d is more than the %d ranks", o->hosts, o->nranks);
        return -1;
    }
    if (o->hosts && o->ipv6) {
        say("--hosts and --ipv6 do not go together (the emulated hosts have IPv4 addresses)");
        return -1;
    }
    if (optind >= argc) {
        say("no program to run (usage: oobx-run -n N [options] -- PROGRAM [ARGS...])");
        return -1;
    }
    o->argv = argv + optind;
    return 0;
}

/* Sizes the blocks so that no process needs more descriptors than the hard
 * limit allows: a sub-launcher two pipes a rank (and the roots of its
 * block), the top two pipes a sub-launcher (and the roots until handed
 * over). Raises the soft limit when that is not enough. */
static int plan(run_job_t *job)
{
    struct rlimit rl;
    rlim_t lim = 1024, hard = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        lim = rl.rlim_cur;
        hard = rl.rlim_max;
    }
    int N = job->opt.nranks, R = job->opt.nroots, H = job->nhosts;
    int per = job->opt.per_launcher;
    /* a sub-launcher: 2 a rank, at most one root a rank */
    rlim_t room = hard > RUN_FD_MARGIN * 2 ? hard - RUN_FD_MARGIN : RUN_FD_MARGIN;
    if ((rlim_t)per * 3 > room) per = (int)(room / 3);
    if (per < 1) per = 1;
    int nsubs = 0;
    for (int h = 0; h < H; h++) {
        int hn = block_first(h + 1, N, H) - block_first(h, N, H);
        nsubs += (hn + per - 1) / per;
    }
    int maxblock = 0;
    job->subs = calloc((size_t)nsubs, sizeof *job->subs);
    if (!job->subs) {
        say("out of memory");
        return -1;
    }
    int k = 0;
    for (int h = 0; h < H; h++) {
        int hf = block_first(h, N, H), hn = block_first(h + 1, N, H) - hf;
        int ns = (hn + per - 1) / per;
        for (int j = 0; j < ns; j++, k++) {
            run_sub_t *s = &job->subs[k];
            s->first = hf + block_first(j, hn, ns);
            s->count = block_first(j + 1, hn, ns) - block_first(j, hn, ns);
            s->host = h;
            s->up_fd = s->down_fd = -1;
            if (s->count > maxblock) maxblock = s->count;
        }
    }
    job->nsubs = nsubs;
    int maxroots = 0; /* roots in one block */
    for (int i = 0, cur = -1, n = 0; i < R; i++) {
        int b = -1, r = block_first(i, N, R);
        for (int j = 0; j < nsubs; j++)
            if (r >= job->subs[j].first && r < job->subs[j].first + job->subs[j].count) b = j;
        n = b == cur ? n + 1 : 1;
        cur = b;
        if (n > maxroots) maxroots = n;
    }
    rlim_t need_leaf = (rlim_t)maxblock * 2 + (rlim_t)maxroots + RUN_FD_MARGIN;
    rlim_t need_top = (rlim_t)nsubs * 2 + (rlim_t)R + (rlim_t)(job->opt.hosts ? H : 0) + RUN_FD_MARGIN;
    rlim_t need = need_leaf > need_top ? need_leaf : need_top;
    if (lim >= need) return 0;
    if (hard < need) {
        say("%d ranks and %d roots need about %llu open files in one process, and the hard limit is %llu "
            "(ulimit -Hn)", N, R, (unsigned long long)need, (unsigned long long)hard);
        return -1;
    }
    rl.rlim_cur = hard;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        say("cannot raise the open file limit to %llu: %s", (unsigned long long)hard, strerror(errno));
        return -1;
    }
    return 0;
}

/* This run's directory for the ranks' host segments (OOBX_NODE_DIR), in
 * /dev/shm: private to the user, and removed with what is left in it at the
 * end. None (and the library's default) where /dev/shm cannot take it. */
static void node_dir_make(run_job_t *job)
{
    if (getenv("OOBX_NODE_DIR")) return; /* the user's choice */
    snprintf(job->node_dir, sizeof job->node_dir, "/dev/shm/oobx-run-%u-%d-XXXXXX", (unsigned)getuid(), (int)getpid());
    if (!mkdtemp(job->node_dir) || setenv("OOBX_NODE_DIR", job->node_dir, 1) != 0) {
        if (job->node_dir[0] == '/' && !strstr(job->node_dir, "XXXXXX")) rmdir(job->node_dir);
        job->node_dir[0] = 0;
    }
}

/* Removes the directory and the files in it (the top only: sub-launchers are forks). */
static void node_dir_remove(run_job_t *job)
{
    if (!job->node_dir[0] || getpid() != job->self) return;
    DIR *d = opendir(job->node_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    if (rmdir(job->node_dir) != 0 && errno != ENOENT)
        say("cannot remove %s: %s", job->node_dir, strerror(errno));
    job->node_dir[0] = 0;
}

static void job_free(run_job_t *job)
{
    if (job->roots)
        for (int i = 0; i < job->opt.nroots; i++)
            if (job->roots[i].fd >= 0) close(job->roots[i].fd);
    if (job->subs)
        for (int k = 0; k < job->nsubs; k++) {
            if (job->subs[k].up_fd >= 0) close(job->subs[k].up_fd);
            if (job->subs[k].down_fd >= 0) close(job->subs[k].down_fd);
            free(job->subs[k].in);
        }
    net_cleanup(job);
    node_dir_remove(job);
    if (job->sigfd >= 0) close(job->sigfd);
    if (job->devnull >= 0) close(job->devnull);
    free(job->ranks);
    free(job->roots);
    free(job->subs);
    free(job->hosts);
    free(job->comm_id);
}

int main(int argc, char **argv)
{
    /* descriptors 0-2 open, so that no socket or pipe of ours lands there */
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0) open("/dev/null", O_RDWR);

    static run_job_t job;
    job.sigfd = -1;
    job.devnull = -1;
    job.orig_ns = -1;
    job.failed_first = -1;
    job.kill_at_ms = -1;
    job.drain_until_ms = -1;
    if (parse_opts(argc, argv, &job.opt) != 0) return 2;
    job.nhosts = job.opt.hosts ? job.opt.hosts : 1;
    job.self = getpid();
    if (plan(&job) != 0) {
        job_free(&job);
        return 2;
    }
    job.ranks = calloc((size_t)job.opt.nranks, sizeof *job.ranks);
    if (job.opt.hosts) {
        job.hosts = calloc((size_t)job.nhosts, sizeof *job.hosts);
        if (job.hosts)
            for (int h = 0; h < job.nhosts; h++) job.hosts[h].nsfd = -1;
    }
    if (!job.ranks || (job.opt.hosts && !job.hosts)) {
        say("out of memory for %d ranks", job.opt.nranks);
        job_free(&job);
        return 2;
    }

    sigemptyset(&job.mask);
    sigaddset(&job.mask, SIGCHLD);
    sigaddset(&job.mask, SIGINT);
    sigaddset(&job.mask, SIGTERM);
    sigaddset(&job.mask, SIGHUP);
    sigaddset(&job.mask, SIGQUIT);
    if (sigprocmask(SIG_BLOCK, &job.mask, &job.orig_mask) != 0 ||
        (job.sigfd = signalfd(-1, &job.mask, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
        say("signalfd: %s", strerror(errno));
        job_free(&job);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill the launcher */
    job.devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

    if (job.opt.hosts && net_setup(&job) != 0) {
        job_free(&job);
        return 2;
    }
    if (roots_make(&job) != 0) {
        job_free(&job);
        return 2;
    }
    node_dir_make(&job);

    job.t0_ms = now_ms();
    job.deadline_ms = job.opt.timeout_s > 0 ? job.t0_ms + (int64_t)(job.opt.timeout_s * 1000.0) : -1;
    int rc = job_loop(&job);
    if (rc != 0) {
        for (int k = 0; k < job.nsubs; k++)
            if (job.subs[k].pid > 0 && !job.subs[k].reaped) kill(job.subs[k].pid, SIGKILL);
        while (waitpid(-1, NULL, 0) > 0) {
        }
        job_free(&job);
        return 1;
    }
    rc = report(&job);
    job_free(&job);
    return rc;
}
