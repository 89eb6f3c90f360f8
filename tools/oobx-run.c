/*
 * oobx-run: starts N local ranks of a program with the environment oobx reads
 * (OOBX_RANK, OOBX_NRANKS, OOBX_COMM_ID on free loopback ports), prefixes each
 * line they print with their rank, and ends the job when a rank fails or the
 * deadline passes, naming the ranks that failed.
 *
 * One poll loop over the ranks' pipes and a signalfd; no threads.
 * Needs nothing from liboobx.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUN_KILL_GRACE_MS 2000   /* SIGTERM, then SIGKILL after this */
#define RUN_DRAIN_GRACE_MS 500   /* output still open after every rank exited */
#define RUN_LINE_MAX (64 * 1024) /* a longer line is printed in pieces */
#define RUN_READ_CHUNK (64 * 1024)
#define RUN_LIST_MAX 32          /* failed ranks named one by one */

enum { RANK_PENDING = 0, RANK_RUNNING, RANK_DONE };
enum { STREAM_OUT = 0, STREAM_ERR = 1 };

typedef struct run_stream {
    int fd; /* read end of the rank's pipe; -1 once closed */
    char *buf;
    size_t len;
    size_t cap;
} run_stream_t;

typedef struct run_rank {
    pid_t pid;
    int state;
    int status;      /* wait status once RANK_DONE */
    int signaled;    /* oobx-run had sent it a signal before it ended */
    run_stream_t io[2];
} run_rank_t;

typedef struct run_opts {
    int nranks;
    int nroots;
    const char *transport;
    double timeout_s; /* 0: no deadline */
    int prefix;
    int stagger_ms;
    int ipv6;         /* roots on [::1] instead of 127.0.0.1 */
    char **argv;      /* program and its arguments */
} run_opts_t;

typedef struct run_job {
    run_opts_t opt;
    run_rank_t *ranks;
    int *port_fd;          /* per root: the socket holding its port until its host starts */
    int *port;
    char *comm_id;
    int sigfd;
    int devnull;
    pid_t self;
    sigset_t orig_mask;
    int64_t t0_ms;
    int64_t deadline_ms;   /* -1: none */
    int64_t kill_at_ms;    /* -1: no SIGKILL scheduled */
    int64_t drain_until_ms;
    int started;           /* ranks forked so far (in rank order) */
    int running;
    int ending;            /* the rest are being ended */
    int killed;            /* SIGKILL was sent */
    int timed_out;
    int interrupted;       /* signal received by oobx-run, or 0 */
    int failed_first;      /* first rank that failed on its own, or -1 */
    char *scratch;         /* one output line with its prefix */
} run_job_t;

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

static int is_running(const run_rank_t *rk) { return rk->state == RANK_RUNNING; }
static int is_pending(const run_rank_t *rk) { return rk->state == RANK_PENDING; }
/* Died of the SIGTERM or SIGKILL that oobx-run sent. */
static int ended_by_us(const run_rank_t *rk)
{
    return rk->signaled && WIFSIGNALED(rk->status) &&
           (WTERMSIG(rk->status) == SIGTERM || WTERMSIG(rk->status) == SIGKILL);
}
static int is_failed(const run_rank_t *rk)
{
    return rk->state == RANK_DONE && !status_ok(rk->status) && !ended_by_us(rk);
}
static int is_ended(const run_rank_t *rk)
{
    return rk->state == RANK_DONE && ended_by_us(rk);
}

/* ---- output ---------------------------------------------------------------- */

static void emit(run_job_t *job, int rank, int stream, const char *line, size_t n)
{
    int out = stream == STREAM_OUT ? STDOUT_FILENO : STDERR_FILENO;
    size_t off = 0;
    if (job->opt.prefix) off = (size_t)snprintf(job->scratch, 32, "[%d] ", rank);
    memcpy(job->scratch + off, line, n);
    job->scratch[off + n] = '\n';
    write_all(out, job->scratch, off + n + 1);
}

/* Prints the complete lines in the stream's buffer; at_eof: the rest too. */
static void stream_flush(run_job_t *job, int rank, int stream, int at_eof)
{
    run_stream_t *s = &job->ranks[rank].io[stream];
    size_t start = 0;
    for (;;) {
        char *nl = s->len > start ? memchr(s->buf + start, '\n', s->len - start) : NULL;
        if (nl) {
            emit(job, rank, stream, s->buf + start, (size_t)(nl - (s->buf + start)));
            start = (size_t)(nl - s->buf) + 1;
            continue;
        }
        size_t rest = s->len - start;
        if (rest > 0 && (at_eof || rest >= RUN_LINE_MAX)) {
            emit(job, rank, stream, s->buf + start, rest);
            start = s->len;
        }
        break;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
}

static void stream_close(run_job_t *job, int rank, int stream)
{
    run_stream_t *s = &job->ranks[rank].io[stream];
    if (s->fd < 0) return;
    stream_flush(job, rank, stream, 1);
    close(s->fd);
    s->fd = -1;
    free(s->buf);
    s->buf = NULL;
    s->len = s->cap = 0;
}

/* Reads what is there without blocking. */
static void stream_read(run_job_t *job, int rank, int stream)
{
    run_stream_t *s = &job->ranks[rank].io[stream];
    while (s->fd >= 0) {
        if (s->cap - s->len < RUN_READ_CHUNK / 4) {
            size_t cap = s->cap ? s->cap * 2 : 4096;
            if (cap > RUN_LINE_MAX + RUN_READ_CHUNK) cap = RUN_LINE_MAX + RUN_READ_CHUNK;
            if (cap > s->cap) {
                char *nb = realloc(s->buf, cap);
                if (!nb) {
                    say("out of memory buffering the output of rank %d", rank);
                    stream_close(job, rank, stream);
                    return;
                }
                s->buf = nb;
                s->cap = cap;
            }
        }
        ssize_t n = read(s->fd, s->buf + s->len, s->cap - s->len);
        if (n > 0) {
            s->len += (size_t)n;
            stream_flush(job, rank, stream, 0);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        stream_close(job, rank, stream); /* EOF or error */
        return;
    }
}

/* ---- ports ----------------------------------------------------------------- */

/* Binds R sockets to free loopback ports and keeps them bound (so the ports are
 * distinct and nobody else takes them) until the rank hosting each root starts. */
static int ports_pick(run_job_t *job)
{
    int R = job->opt.nroots;
    size_t cap = (size_t)R * 24 + 1;
    const char *host = job->opt.ipv6 ? "[::1]" : "127.0.0.1";
    job->port_fd = calloc((size_t)R, sizeof(int));
    job->port = calloc((size_t)R, sizeof(int));
    job->comm_id = malloc(cap);
    if (!job->port_fd || !job->port || !job->comm_id) {
        say("out of memory");
        return -1;
    }
    size_t used = 0;
    job->comm_id[0] = '\0';
    for (int i = 0; i < R; i++) job->port_fd[i] = -1;
    for (int i = 0; i < R; i++) {
        int family = job->opt.ipv6 ? AF_INET6 : AF_INET;
        int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            say("socket() for root %d: %s", i, strerror(errno));
            return -1;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_storage ss;
        memset(&ss, 0, sizeof ss);
        socklen_t sl;
        if (job->opt.ipv6) {
            struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
            s6->sin6_family = AF_INET6;
            s6->sin6_addr = in6addr_loopback;
            sl = sizeof *s6;
        } else {
            struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
            s4->sin_family = AF_INET;
            s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            sl = sizeof *s4;
        }
        if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
            say("cannot find a free port on %s for root %d: %s", host, i, strerror(errno));
            close(fd);
            return -1;
        }
        job->port_fd[i] = fd;
        job->port[i] = ntohs(job->opt.ipv6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                           : ((struct sockaddr_in *)&ss)->sin_port);
        used += (size_t)snprintf(job->comm_id + used, cap - used, "%s%s:%d", i ? "," : "", host,
                                 job->port[i]);
    }
    return 0;
}

/* Rank that hosts root i: the first of block i, blocks split as the library does. */
static int root_host_rank(int iroot, int nranks, int nroots)
{
    int per = nranks / nroots, extra = nranks % nroots;
    return iroot * per + (iroot < extra ? iroot : extra);
}

/* Releases the ports of the roots hosted by rank, right before it starts. */
static void ports_release_for(run_job_t *job, int rank)
{
    for (int i = 0; i < job->opt.nroots; i++) {
        if (job->port_fd[i] >= 0 && root_host_rank(i, job->opt.nranks, job->opt.nroots) <= rank) {
            close(job->port_fd[i]);
            job->port_fd[i] = -1;
        }
    }
}

/* ---- ranks ----------------------------------------------------------------- */

static void child_fail(int rank, const char *what, int err)
{
    char msg[512];
    int n = snprintf(msg, sizeof msg, "oobx-run: rank %d: %s: %s\n", rank, what, strerror(err));
    if (n > 0) write_all(STDERR_FILENO, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    _exit(127);
}

/* In the child, after fork: never returns. */
static void child_exec(run_job_t *job, int rank, int out_w, int err_w)
{
    char num[32];
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != job->self) _exit(127); /* oobx-run is already gone */
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
    if (job->opt.transport && setenv("OOBX_TRANSPORT", job->opt.transport, 1) != 0)
        child_fail(rank, "setenv", errno);
    if (setenv("OOBX_SOCKET_IFNAME", "lo", 0) != 0) child_fail(rank, "setenv", errno);

    execvp(job->opt.argv[0], job->opt.argv);
    char what[300];
    snprintf(what, sizeof what, "cannot run %s", job->opt.argv[0]);
    child_fail(rank, what, errno);
}

static int rank_start(run_job_t *job, int rank)
{
    run_rank_t *rk = &job->ranks[rank];
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
    ports_release_for(job, rank);
    pid_t pid = fork();
    if (pid < 0) {
        say("fork for rank %d: %s", rank, strerror(errno));
        close(p_out[0]);
        close(p_out[1]);
        close(p_err[0]);
        close(p_err[1]);
        return -1;
    }
    if (pid == 0) child_exec(job, rank, p_out[1], p_err[1]);
    setpgid(pid, pid); /* also done by the child; whichever runs first */
    close(p_out[1]);
    close(p_err[1]);
    fcntl(p_out[0], F_SETFL, O_NONBLOCK);
    fcntl(p_err[0], F_SETFL, O_NONBLOCK);
    rk->pid = pid;
    rk->state = RANK_RUNNING;
    rk->io[STREAM_OUT].fd = p_out[0];
    rk->io[STREAM_ERR].fd = p_err[0];
    job->running++;
    return 0;
}

/* Signals every running rank's process group. */
static void signal_all(run_job_t *job, int sig)
{
    for (int r = 0; r < job->opt.nranks; r++) {
        run_rank_t *rk = &job->ranks[r];
        if (rk->state != RANK_RUNNING) continue;
        if (kill(-rk->pid, sig) != 0) kill(rk->pid, sig);
        rk->signaled = 1;
    }
}

/* Ends the job: no more starts, SIGTERM now, SIGKILL after the grace. */
static void end_all(run_job_t *job)
{
    if (job->ending) return;
    job->ending = 1;
    signal_all(job, SIGTERM);
    job->kill_at_ms = now_ms() + RUN_KILL_GRACE_MS;
}

static void rank_reaped(run_job_t *job, int rank, int status)
{
    run_rank_t *rk = &job->ranks[rank];
    rk->state = RANK_DONE;
    rk->status = status;
    job->running--;
    /* its last words come before our verdict */
    stream_read(job, rank, STREAM_OUT);
    stream_read(job, rank, STREAM_ERR);
    if (!is_failed(rk)) return;
    if (job->failed_first < 0) job->failed_first = rank;
    if (job->ending) return;
    char st[64];
    int others = job->running + (job->opt.nranks - job->started);
    if (WIFEXITED(status))
        say("rank %d exited with status %d; ending %d other rank%s", rank, WEXITSTATUS(status),
            others, others == 1 ? "" : "s");
    else
        say("rank %d was killed by %s; ending %d other rank%s", rank,
            status_text(status, st, sizeof st), others, others == 1 ? "" : "s");
    end_all(job);
}

static void reap(run_job_t *job)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) {
            if (pid < 0 && errno == EINTR) continue;
            return;
        }
        for (int r = 0; r < job->opt.nranks; r++) {
            if (job->ranks[r].pid == pid && job->ranks[r].state == RANK_RUNNING) {
                rank_reaped(job, r, status);
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
            int left = job->running;
            say("received %s; ending %d running rank%s", signal_name((int)si.ssi_signo, sb, sizeof sb),
                left, left == 1 ? "" : "s");
            end_all(job);
        } else if (!job->killed) {
            /* a second interrupt: do not wait for the grace */
            job->kill_at_ms = now_ms();
        }
    }
    reap(job);
}

static int all_streams_closed(const run_job_t *job)
{
    for (int r = 0; r < job->opt.nranks; r++)
        if (job->ranks[r].io[0].fd >= 0 || job->ranks[r].io[1].fd >= 0) return 0;
    return 1;
}

static void on_deadline(run_job_t *job)
{
    char list[1024];
    job->timed_out = 1;
    int n = rank_list(job, is_running, list, sizeof list);
    int p = job->opt.nranks - job->started;
    say("the deadline of %g s passed; %d rank%s still running: %s%s", job->opt.timeout_s, n,
        n == 1 ? "" : "s", n ? list : "none", p ? " (and the ranks not started yet)" : "");
    end_all(job);
}

static void on_kill_time(run_job_t *job)
{
    char list[1024];
    job->killed = 1;
    job->kill_at_ms = -1;
    int n = rank_list(job, is_running, list, sizeof list);
    if (n == 0) return;
    say("%d rank%s still running %.0f s after SIGTERM, sending SIGKILL: %s", n, n == 1 ? "" : "s",
        RUN_KILL_GRACE_MS / 1000.0, list);
    signal_all(job, SIGKILL);
}

static int64_t next_start_ms(const run_job_t *job)
{
    if (job->ending || job->started >= job->opt.nranks) return -1;
    return job->t0_ms + (int64_t)job->started * job->opt.stagger_ms;
}

static int min_timeout(int64_t now, int64_t at, int cur)
{
    if (at < 0) return cur;
    int64_t d = at - now;
    if (d < 0) d = 0;
    if (cur < 0 || d < cur) return (int)(d > INT_MAX ? INT_MAX : d);
    return cur;
}

static int job_loop(run_job_t *job)
{
    size_t maxfds = (size_t)job->opt.nranks * 2 + 1;
    struct pollfd *pfd = calloc(maxfds, sizeof *pfd);
    int *who = calloc(maxfds, sizeof *who); /* rank * 2 + stream */
    if (!pfd || !who) {
        free(pfd);
        free(who);
        say("out of memory");
        return -1;
    }
    for (;;) {
        int64_t now = now_ms();
        while (!job->ending && job->started < job->opt.nranks && next_start_ms(job) <= now) {
            if (rank_start(job, job->started) != 0) {
                say("could not start rank %d; ending the %d started rank%s", job->started,
                    job->running, job->running == 1 ? "" : "s");
                if (job->failed_first < 0) job->failed_first = job->started;
                end_all(job);
                break;
            }
            job->started++;
            if (job->opt.stagger_ms > 0) break;
        }
        now = now_ms();
        if (job->deadline_ms >= 0 && !job->timed_out && now >= job->deadline_ms) on_deadline(job);
        if (job->kill_at_ms >= 0 && now >= job->kill_at_ms) on_kill_time(job);

        int all_done = job->running == 0 && (job->ending || job->started == job->opt.nranks);
        if (all_done) {
            if (all_streams_closed(job)) break;
            /* something the ranks started still holds their output open */
            if (job->drain_until_ms < 0) job->drain_until_ms = now + RUN_DRAIN_GRACE_MS;
            if (now >= job->drain_until_ms) {
                for (int r = 0; r < job->opt.nranks; r++) {
                    stream_close(job, r, STREAM_OUT);
                    stream_close(job, r, STREAM_ERR);
                }
                break;
            }
        }

        int nfds = 0;
        pfd[nfds].fd = job->sigfd;
        pfd[nfds].events = POLLIN;
        who[nfds++] = -1;
        for (int r = 0; r < job->opt.nranks; r++) {
            for (int s = 0; s < 2; s++) {
                if (job->ranks[r].io[s].fd < 0) continue;
                pfd[nfds].fd = job->ranks[r].io[s].fd;
                pfd[nfds].events = POLLIN;
                who[nfds++] = r * 2 + s;
            }
        }
        int timeout = -1;
        timeout = min_timeout(now, next_start_ms(job), timeout);
        if (!job->timed_out) timeout = min_timeout(now, job->deadline_ms, timeout);
        timeout = min_timeout(now, job->kill_at_ms, timeout);
        if (all_done) timeout = min_timeout(now, job->drain_until_ms, timeout);

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
            stream_read(job, who[i] / 2, who[i] % 2);
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
            used += (size_t)snprintf(line + used, sizeof line - used, "%s%d (%s)", listed ? ", " : "",
                                     r, status_text(rk->status, st, sizeof st));
            listed++;
        }
        if (nfail > listed)
            snprintf(line + used, sizeof line - used, ", and %d more", nfail - listed);
        say("failed ranks: %s", line);
    }
    char list[1024];
    int nend = rank_list(job, is_ended, list, sizeof list);
    if (nend > 0) say("ended by oobx-run: rank%s %s", nend == 1 ? "" : "s", list);
    int npend = rank_list(job, is_pending, list, sizeof list);
    if (npend > 0 && (nfail || job->timed_out || job->interrupted))
        say("not started: rank%s %s", npend == 1 ? "" : "s", list);

    if (job->interrupted) return 128 + job->interrupted;
    if (nfail > 0 || job->failed_first >= 0) return 1;
    if (job->timed_out) return 124;
    for (int r = 0; r < job->opt.nranks; r++)
        if (job->ranks[r].state != RANK_DONE || !status_ok(job->ranks[r].status)) return 1;
    return 0;
}

/* ---- setup --------------------------------------------------------------------- */

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: oobx-run -n N [options] [--] PROGRAM [ARGS...]\n"
            "Starts N local ranks of PROGRAM with OOBX_RANK, OOBX_NRANKS and OOBX_COMM_ID set\n"
            "(R roots on free loopback ports) and prints each line they write as \"[rank] line\".\n"
            "When a rank fails or the deadline passes, the others get SIGTERM, then SIGKILL\n"
            "after 2 s, and the failed ranks are named.\n"
            "\n"
            "  -n, --nranks N       number of ranks (required)\n"
            "  -r, --roots R        number of roots, each hosted by the first rank of its\n"
            "                       block (default 1)\n"
            "  -t, --transport T    sets OOBX_TRANSPORT=T (auto, socket, ucx, verbs)\n"
            "  -T, --timeout S      deadline for the whole job in seconds (default 300; 0: none)\n"
            "      --stagger-ms M   start rank i at i*M ms (default 0: all at once)\n"
            "  -6, --ipv6           roots on [::1] instead of 127.0.0.1\n"
            "      --no-prefix      print the ranks' lines without the \"[rank] \" prefix\n"
            "      --tag-output     print the prefix (the default)\n"
            "  -h, --help           this text\n"
            "\n"
            "OOBX_SOCKET_IFNAME is set to \"lo\" unless already set. Exit status: 0 when every\n"
            "rank exited 0; 1 when a rank failed; 124 when the deadline passed; 128+signal\n"
            "when oobx-run was interrupted; 2 for a usage error.\n");
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
    enum { OPT_STAGGER = 256, OPT_NOPREFIX, OPT_TAG };
    static const struct option longopts[] = {
        {"nranks", required_argument, NULL, 'n'},
        {"np", required_argument, NULL, 'n'},
        {"roots", required_argument, NULL, 'r'},
        {"transport", required_argument, NULL, 't'},
        {"timeout", required_argument, NULL, 'T'},
        {"stagger-ms", required_argument, NULL, OPT_STAGGER},
        {"no-prefix", no_argument, NULL, OPT_NOPREFIX},
        {"tag-output", no_argument, NULL, OPT_TAG},
        {"ipv6", no_argument, NULL, '6'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (run_opts_t){.nranks = 0, .nroots = 1, .timeout_s = 300, .prefix = 1};
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
    if (optind >= argc) {
        say("no program to run (usage: oobx-run -n N [options] -- PROGRAM [ARGS...])");
        return -1;
    }
    o->argv = argv + optind;
    return 0;
}

/* Two pipes a rank, the signalfd, the root ports and a margin. */
static int raise_fd_limit(int nranks, int nroots)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)nranks * 2 + (rlim_t)nroots + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    if (rl.rlim_cur >= need) return 0;
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < need) {
        say("%d ranks need about %llu open files, and the hard limit is %llu (ulimit -Hn)", nranks,
            (unsigned long long)need, (unsigned long long)rl.rlim_max);
        return -1;
    }
    return 0;
}

static void job_free(run_job_t *job)
{
    if (job->ranks) {
        for (int r = 0; r < job->opt.nranks; r++) {
            for (int s = 0; s < 2; s++) {
                if (job->ranks[r].io[s].fd >= 0) close(job->ranks[r].io[s].fd);
                free(job->ranks[r].io[s].buf);
            }
        }
    }
    if (job->port_fd)
        for (int i = 0; i < job->opt.nroots; i++)
            if (job->port_fd[i] >= 0) close(job->port_fd[i]);
    if (job->sigfd >= 0) close(job->sigfd);
    if (job->devnull >= 0) close(job->devnull);
    free(job->ranks);
    free(job->port_fd);
    free(job->port);
    free(job->comm_id);
    free(job->scratch);
}

int main(int argc, char **argv)
{
    run_job_t job;
    memset(&job, 0, sizeof job);
    job.sigfd = -1;
    job.devnull = -1;
    job.failed_first = -1;
    job.kill_at_ms = -1;
    job.drain_until_ms = -1;
    if (parse_opts(argc, argv, &job.opt) != 0) return 2;
    if (raise_fd_limit(job.opt.nranks, job.opt.nroots) != 0) return 2;

    job.self = getpid();
    job.ranks = calloc((size_t)job.opt.nranks, sizeof *job.ranks);
    job.scratch = malloc(RUN_LINE_MAX + RUN_READ_CHUNK + 64);
    if (!job.ranks || !job.scratch) {
        say("out of memory for %d ranks", job.opt.nranks);
        job_free(&job);
        return 2;
    }
    for (int r = 0; r < job.opt.nranks; r++) job.ranks[r].io[0].fd = job.ranks[r].io[1].fd = -1;
    if (ports_pick(&job) != 0) {
        job_free(&job);
        return 2;
    }

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGQUIT);
    if (sigprocmask(SIG_BLOCK, &mask, &job.orig_mask) != 0 ||
        (job.sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
        say("signalfd: %s", strerror(errno));
        job_free(&job);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill the launcher */
    job.devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

    job.t0_ms = now_ms();
    job.deadline_ms = job.opt.timeout_s > 0 ? job.t0_ms + (int64_t)(job.opt.timeout_s * 1000.0) : -1;
    int rc = job_loop(&job);
    if (rc != 0) {
        signal_all(&job, SIGKILL);
        while (job.running > 0 && waitpid(-1, NULL, 0) > 0) job.running--;
        job_free(&job);
        return 1;
    }
    rc = report(&job);
    job_free(&job);
    return rc;
}
