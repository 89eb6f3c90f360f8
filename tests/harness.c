/* Multi-rank test harness: see harness.h. */
#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

double harness_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int harness_scale(void)
{
    const char *s = getenv("OOBX_TEST_SCALE");
    if (!s || !*s || !strcmp(s, "normal")) return 1;
    if (!strcmp(s, "small")) return 0;
    if (!strcmp(s, "long")) return 2;
    fprintf(stderr, "OOBX_TEST_SCALE=%s: want small, normal or long; using normal\n", s);
    return 1;
}

const char *harness_transport(void)
{
    const char *t = getenv("OOBX_TRANSPORT");
    return (t && *t) ? t : "socket";
}

int harness_default_deadline(void)
{
    const char *s = getenv("OOBX_TEST_DEADLINE_S");
    if (s && atoi(s) > 0) return atoi(s);
    return 60;
}

int harness_block_first(int i, int nranks, int nroots)
{
    return i * (nranks / nroots) + (i < nranks % nroots ? i : nranks % nroots);
}

static int bind_port(int port, int *fd_out)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    *fd_out = -1;
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    socklen_t len = sizeof a;
    int got = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        got = ntohs(a.sin_port);
    if (got < 0)
        close(fd);
    else
        *fd_out = fd;
    return got;
}

/* Binds a socket to a free loopback port and keeps it: *fd. The port is
 * taken below the kernel's ephemeral range, so that no listener or
 * connection of the ranks (port 0) can be handed the same port between the
 * moment it is chosen here and the moment a rank binds it as a root. */
static int bind_free_port(int *fd_out)
{
    int lo = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d", &lo) != 1) lo = 32768;
        fclose(f);
    }
    if (lo > 12000) {
        int span = lo - 10000;
        unsigned x = (unsigned)getpid() * 2654435761u ^ (unsigned)now_ns();
        for (int tries = 0; tries < 200; tries++) {
            x = x * 1103515245u + 12345u;
            int port = 10000 + (int)((x >> 8) % (unsigned)span);
            int got = bind_port(port, fd_out);
            if (got > 0) return got;
        }
    }
    return bind_port(0, fd_out);
}

int harness_free_port(void)
{
    int fd, port = bind_free_port(&fd);
    if (fd >= 0) close(fd);
    return port;
}

void harness_describe_status(int status, char *buf, size_t len)
{
    if (WIFEXITED(status)) {
        int c = WEXITSTATUS(status);
        snprintf(buf, len, c == HARNESS_SKIP ? "skipped (exit %d)" : "exited with status %d", c);
    } else if (WIFSIGNALED(status)) {
        snprintf(buf, len, "killed by signal %d (%s)%s", WTERMSIG(status), strsignal(WTERMSIG(status)),
                 WCOREDUMP(status) ? ", core dumped" : "");
    } else {
        snprintf(buf, len, "ended with wait status 0x%x", (unsigned)status);
    }
}

/* ---- inside a rank ---------------------------------------------------------- */

static void rank_record(harness_rank_t *r, const char *text)
{
    if (r && r->msg) {
        snprintf(r->msg, HARNESS_MSG_BYTES, "%s", text);
    }
}

void harness_fail(harness_rank_t *r, const char *file, int line, const char *fmt, ...)
{
    char text[HARNESS_MSG_BYTES], full[HARNESS_MSG_BYTES + 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    snprintf(full, sizeof full, "rank %d: %s (%s:%d)", r ? r->rank : -1, text, base ? base + 1 : file,
             line);
    rank_record(r, full);
    fprintf(stderr, "%s\n", full);
    _exit(1);
}

void harness_skip(harness_rank_t *r, const char *fmt, ...)
{
    char text[HARNESS_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    rank_record(r, text);
    _exit(HARNESS_SKIP);
}

void harness_note(harness_rank_t *r, const char *fmt, ...)
{
    char text[HARNESS_MSG_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    rank_record(r, text);
}

void harness_fill(void *buf, size_t bytes, int src, unsigned salt)
{
    unsigned char *p = buf;
    for (size_t i = 0; i < bytes; i++) p[i] = harness_byte(src, i, salt);
}

void harness_verify(harness_rank_t *r, const void *buf, size_t bytes, int src, unsigned salt,
                    const char *what_fmt, ...)
{
    const unsigned char *p = buf;
    for (size_t i = 0; i < bytes; i++) {
        unsigned char want = harness_byte(src, i, salt);
        if (p[i] != want) {
            char what[256];
            va_list ap;
            va_start(ap, what_fmt);
            vsnprintf(what, sizeof what, what_fmt, ap);
            va_end(ap);
            harness_fail(r, __FILE__, __LINE__, "%s byte %zu: got 0x%02x, want 0x%02x", what, i, p[i],
                         want);
        }
    }
}

int harness_comm_init(harness_rank_t *r, oobx_comm_t *comm)
{
    int rc;
    if (r->from_env)
        rc = oobx_comm_init_from_env(comm, &r->cfg);
    else
        rc = oobx_comm_init(comm, r->nranks, r->rank, r->nroots, r->ids, &r->cfg);
    if (rc != OOBX_SUCCESS) {
        char t[HARNESS_MSG_BYTES];
        snprintf(t, sizeof t, "rank %d: %s(%d ranks, %d roots, transport %s): %s: %s", r->rank,
                 r->from_env ? "oobx_comm_init_from_env" : "oobx_comm_init", r->nranks, r->nroots,
                 r->transport, oobx_error_name(rc), oobx_last_error());
        rank_record(r, t);
        return rc;
    }
    return OOBX_SUCCESS;
}

oobx_comm_t harness_comm_init_or_die(harness_rank_t *r)
{
    oobx_comm_t comm = NULL;
    int rc = harness_comm_init(r, &comm);
    if (rc == OOBX_ERR_UNAVAILABLE)
        harness_skip(r, "transport %s is not usable here: %s", r->transport, oobx_last_error());
    if (rc != OOBX_SUCCESS) {
        fprintf(stderr, "%s\n", r->msg);
        _exit(1);
    }
    const char *t = oobx_comm_transport(comm);
    if (strcmp(r->transport, "auto") != 0 && (!t || strcmp(t, r->transport) != 0))
        H_FAIL(r, "oobx_comm_transport() = %s, want %s", t ? t : "(null)", r->transport);
    int got = -1;
    H_OK(r, oobx_comm_rank(comm, &got));
    H_EQ(r, got, r->rank, "oobx_comm_rank");
    H_OK(r, oobx_comm_size(comm, &got));
    H_EQ(r, got, r->nranks, "oobx_comm_size");
    return comm;
}

/* ---- the parent ---------------------------------------------------------------- */

static void quiesce_threads(int max_ms);

static void child_main(harness_job_t *job, int rank, const int go[2])
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* wait until every rank is forked: see harness_job_start */
    close(go[1]);
    char c;
    while (read(go[0], &c, 1) < 0 && errno == EINTR) {
    }
    close(go[0]);
    /* cmocka's handlers would longjmp a crashing rank back into the test
     * loop of the parent's copy: a crash must end the rank instead. */
    static const int crash_sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGSYS, SIGABRT};
    for (size_t i = 0; i < sizeof crash_sigs / sizeof crash_sigs[0]; i++) signal(crash_sigs[i], SIG_DFL);
    for (int j = 0; j < rank; j++)
        if (job->pidfds[j] >= 0) close(job->pidfds[j]);

    harness_rank_t r;
    memset(&r, 0, sizeof r);
    r.rank = rank;
    r.nranks = job->o.nranks;
    r.nroots = job->nroots;
    r.ids = job->o.from_env ? NULL : job->ids;
    r.from_env = job->o.from_env;
    r.transport = harness_transport();
    oobx_config_t cfg = OOBX_CONFIG_INIT;
    r.cfg = cfg;
    r.cfg.transport = r.transport;
    r.cfg.timeout_ms = job->o.call_timeout_ms ? job->o.call_timeout_ms : 20000;
    r.arg = job->o.arg;
    r.msg = job->shm + (size_t)rank * HARNESS_MSG_BYTES;

    if (job->o.from_env) {
        char v[32];
        snprintf(v, sizeof v, "%d", rank);
        setenv("OOBX_RANK", v, 1);
        snprintf(v, sizeof v, "%d", job->o.nranks);
        setenv("OOBX_NRANKS", v, 1);
        setenv("OOBX_COMM_ID", job->comm_id, 1);
        setenv("OOBX_RUN_KEY", job->run_key, 1);
    }
    for (const char *const *e = job->o.env; e && *e; e++) {
        char name[128];
        const char *eq = strchr(*e, '=');
        if (!eq || (size_t)(eq - *e) >= sizeof name) continue;
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = 0;
        setenv(name, eq + 1, 1);
    }
    if (job->o.start_spread_ms > 0) {
        unsigned x = (unsigned)rank * 2654435761u ^ (unsigned)getpid();
        unsigned ms = x % (unsigned)(job->o.start_spread_ms + 1);
        if (rank == job->o.nranks - 1) ms = (unsigned)job->o.start_spread_ms; /* someone is last */
        else if (rank == 0) ms = 0;                                          /* and someone first */
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    int rc = job->o.fn(&r);
    fflush(stdout);
    fflush(stderr);
    _exit(rc == 0 ? 0 : rc == HARNESS_SKIP ? HARNESS_SKIP : (rc & 0xff) ? (rc & 0xff) : 1);
}

int harness_job_start(harness_job_t *job, const harness_job_opts_t *o)
{
    memset(job, 0, sizeof *job);
    job->o = *o;
    if (!job->o.name) job->o.name = "job";
    if (!job->o.deadline_s) job->o.deadline_s = harness_default_deadline();
    job->nroots = o->nroots > 0 ? o->nroots : 1;
    unsigned char key[12];
    if (getrandom(key, sizeof key, 0) != (ssize_t)sizeof key) memset(key, 0x5a, sizeof key);
    for (size_t i = 0; i < sizeof key; i++) snprintf(job->run_key + 2 * i, 3, "%02x", key[i]);
    int n = o->nranks;
    if (n <= 0 || !o->fn) {
        snprintf(job->msg, sizeof job->msg, "%s: bad job (nranks %d)", job->o.name, n);
        return -1;
    }
    job->pids = calloc((size_t)n, sizeof *job->pids);
    job->pidfds = calloc((size_t)n, sizeof *job->pidfds);
    job->status = calloc((size_t)n, sizeof *job->status);
    job->ended = calloc((size_t)n, sizeof *job->ended);
    job->order = calloc((size_t)n, sizeof *job->order);
    job->killed_by_test = calloc((size_t)n, sizeof *job->killed_by_test);
    job->ids = calloc((size_t)job->nroots, sizeof *job->ids);
    job->shm = mmap(NULL, (size_t)n * HARNESS_MSG_BYTES, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (!job->pids || !job->pidfds || !job->status || !job->ended || !job->order || !job->killed_by_test || !job->ids ||
        job->shm == MAP_FAILED) {
        if (job->shm == MAP_FAILED) job->shm = NULL;
        snprintf(job->msg, sizeof job->msg, "%s: out of memory for %d ranks", job->o.name, n);
        return -1;
    }
    for (int i = 0; i < n; i++) job->pidfds[i] = -1;

    if (o->from_env && o->comm_id) {
        snprintf(job->comm_id, sizeof job->comm_id, "%s", o->comm_id);
    } else if (o->from_env) {
        /* every port stays bound until all are chosen, so no two roots get the same one */
        size_t off = 0;
        int held[64], nheld = 0, bad = 0;
        for (int i = 0; i < job->nroots && i < 64; i++) {
            int fd, port = bind_free_port(&fd);
            if (port < 0) {
                snprintf(job->msg, sizeof job->msg, "%s: no free loopback port: %s", job->o.name,
                         strerror(errno));
                bad = 1;
                break;
            }
            held[nheld++] = fd;
            off += (size_t)snprintf(job->comm_id + off, sizeof job->comm_id - off, "%s127.0.0.1:%d",
                                    i ? "," : "", port);
        }
        for (int i = 0; i < nheld; i++) close(held[i]);
        if (bad) return -1;
    } else {
        for (int i = 0; i < job->nroots; i++) {
            int rc = oobx_get_unique_id(&job->ids[i]);
            if (rc != OOBX_SUCCESS) {
                snprintf(job->msg, sizeof job->msg, "%s: oobx_get_unique_id (root %d): %s: %s",
                         job->o.name, i, oobx_error_name(rc), oobx_last_error());
                return -1;
            }
        }
    }

    /* The ranks start together once all are forked. Until then no rank has
     * contacted the roots, so their threads in this process sit idle in
     * poll() while it forks: a thread busy in an allocator during a fork
     * leaves its lock held in the child (glibc's malloc guards against that,
     * the sanitizers' allocators do not). */
    quiesce_threads(200);
    int go[2];
    if (pipe2(go, O_CLOEXEC) != 0) {
        snprintf(job->msg, sizeof job->msg, "%s: pipe: %s", job->o.name, strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            snprintf(job->msg, sizeof job->msg, "%s: fork of rank %d: %s", job->o.name, i,
                     strerror(errno));
            close(go[0]);
            close(go[1]);
            for (int j = 0; j < i; j++) kill(job->pids[j], SIGKILL);
            for (int j = 0; j < i; j++) {
                waitpid(job->pids[j], &job->status[j], 0);
                job->ended[j] = 1;
            }
            return -1;
        }
        if (pid == 0) child_main(job, i, go);
        job->pids[i] = pid;
        job->pidfds[i] = (int)syscall(SYS_pidfd_open, pid, 0);
    }
    close(go[0]);
    job->start_ns = now_ns();
    close(go[1]); /* go */
    return 0;
}

static void reap(harness_job_t *job, int rank, int block)
{
    if (job->ended[rank]) return;
    int st = 0;
    pid_t p;
    do {
        p = waitpid(job->pids[rank], &st, block ? 0 : WNOHANG);
    } while (p < 0 && errno == EINTR);
    if (p == job->pids[rank]) {
        job->ended[rank] = 1;
        job->status[rank] = st;
        job->order[job->nended++] = rank;
        if (job->pidfds[rank] >= 0) close(job->pidfds[rank]);
        job->pidfds[rank] = -1;
    }
}

/* Sleeps until one of the running ranks (or just `only`, when >= 0) ends, or
 * timeout_ms. Then reaps whoever ended. */
static void wait_some(harness_job_t *job, int only, int timeout_ms)
{
    int n = job->o.nranks;
    struct pollfd *fds = calloc((size_t)n, sizeof *fds);
    int *who = calloc((size_t)n, sizeof *who);
    int nf = 0, nopid = 0;
    for (int i = 0; i < n && fds && who; i++) {
        if (job->ended[i] || (only >= 0 && i != only)) continue;
        if (job->pidfds[i] < 0) {
            nopid = 1;
            continue;
        }
        fds[nf].fd = job->pidfds[i];
        fds[nf].events = POLLIN;
        who[nf++] = i;
    }
    if (!fds || !who || nopid) {
        /* no pidfd: fall back to a slow check */
        if (timeout_ms > 20) timeout_ms = 20;
    }
    if (nf > 0 || timeout_ms > 0) poll(fds, (nfds_t)nf, timeout_ms);
    free(fds);
    free(who);
    for (int i = 0; i < n; i++)
        if (!job->ended[i] && (only < 0 || i == only)) reap(job, i, 0);
}

int harness_job_wait_rank(harness_job_t *job, int rank, int timeout_ms)
{
    uint64_t end = now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (!job->ended[rank]) {
        uint64_t t = now_ns();
        if (t >= end) break;
        wait_some(job, rank, (int)((end - t) / 1000000ull) + 1);
    }
    return job->ended[rank];
}

void harness_job_kill(harness_job_t *job, int rank, int sig)
{
    if (!job->ended[rank]) {
        job->killed_by_test[rank] = 1;
        kill(job->pids[rank], sig);
    }
}

int harness_job_poll(harness_job_t *job, int timeout_ms)
{
    int running = 0;
    for (int i = 0; i < job->o.nranks; i++) running += !job->ended[i];
    if (!running) return 0;
    wait_some(job, -1, timeout_ms);
    running = 0;
    for (int i = 0; i < job->o.nranks; i++) running += !job->ended[i];
    return running;
}

static int ok_status(int st) { return WIFEXITED(st) && WEXITSTATUS(st) == 0; }
static int skip_status(int st) { return WIFEXITED(st) && WEXITSTATUS(st) == HARNESS_SKIP; }

static size_t append(char *buf, size_t len, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static size_t append(char *buf, size_t len, size_t off, const char *fmt, ...)
{
    if (off >= len) return off;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + off, len - off, fmt, ap);
    va_end(ap);
    if (k < 0) return off;
    return off + (size_t)k >= len ? len - 1 : off + (size_t)k;
}

/* Waits (at most max_ms) until every other thread of this process sleeps,
 * twice in a row: root threads that were just started may still be setting
 * themselves up (allocating) and a fork at that moment would copy a held
 * allocator lock into the child. glibc's malloc is safe against that, the
 * sanitizers' allocators are not. */
static void quiesce_threads(int max_ms)
{
    pid_t self = (pid_t)syscall(SYS_gettid);
    int calm = 0;
    for (int waited = 0; waited < max_ms && calm < 2; waited++) {
        int busy = 0;
        DIR *d = opendir("/proc/self/task");
        if (!d) return;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.' || atoi(e->d_name) == self) continue;
            char path[300], buf[512];
            snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
            FILE *f = fopen(path, "r");
            if (!f) continue;
            size_t k = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[k] = 0;
            const char *rp = strrchr(buf, ')');
            if (rp && rp[1] == ' ' && rp[2] != 'S') busy = 1;
        }
        closedir(d);
        calm = busy ? 0 : calm + 1;
        if (calm < 2) {
            struct timespec ts = {0, 1000000L};
            nanosleep(&ts, NULL);
        }
    }
}

/* Where are the stuck ranks? The stacks of the first two, when gdb is there
 * (OOBX_TEST_STACKS=0 turns this off). */
static void dump_stacks(harness_job_t *job, const int *stuck)
{
    const char *want = getenv("OOBX_TEST_STACKS");
    if (want && !strcmp(want, "0")) return;
    if (system("command -v gdb >/dev/null 2>&1") != 0) return;
    int shown = 0;
    for (int i = 0; i < job->o.nranks && shown < 2; i++) {
        if (!stuck[i]) continue;
        char cmd[256];
        fprintf(stderr, "---- %s: stack of stuck rank %d (pid %d)\n", job->o.name, i, (int)job->pids[i]);
        snprintf(cmd, sizeof cmd,
                 "timeout 30 gdb -p %d -batch -nx -q -ex 'thread apply all bt 30' 2>/dev/null | "
                 "grep -E '^(Thread|#)' | head -n 120 >&2",
                 (int)job->pids[i]);
        if (system(cmd) != 0) fprintf(stderr, "(gdb could not attach)\n");
        shown++;
    }
}

static void kill_rest(harness_job_t *job, int *killed)
{
    for (int i = 0; i < job->o.nranks; i++)
        if (!job->ended[i]) {
            kill(job->pids[i], SIGKILL);
            killed[i] = 1;
        }
    for (int i = 0; i < job->o.nranks; i++) reap(job, i, 1);
}

int harness_job_wait(harness_job_t *job)
{
    int n = job->o.nranks;
    int *killed = calloc((size_t)n, sizeof *killed);
    int *stuck = calloc((size_t)n, sizeof *stuck);
    if (!killed || !stuck) {
        free(killed);
        free(stuck);
        return HARNESS_FAIL;
    }
    uint64_t deadline = job->start_ns + (uint64_t)job->o.deadline_s * 1000000000ull;
    int bad_seen = 0;
    for (;;) {
        int running = 0;
        for (int i = 0; i < n; i++) running += !job->ended[i];
        if (!running) break;
        if (!job->o.keep_going && !bad_seen) {
            for (int k = 0; k < job->nended; k++)
                if (!ok_status(job->status[job->order[k]]) && !job->killed_by_test[job->order[k]])
                    bad_seen = 1;
            if (bad_seen) {
                kill_rest(job, killed);
                break;
            }
        }
        uint64_t t = now_ns();
        if (t >= deadline) {
            job->timed_out = 1;
            for (int i = 0; i < n; i++) stuck[i] = !job->ended[i];
            dump_stacks(job, stuck);
            kill_rest(job, killed);
            break;
        }
        uint64_t left = (deadline - t) / 1000000ull + 1;
        wait_some(job, -1, left > 1000 ? 1000 : (int)left);
    }
    job->seconds = (double)(now_ns() - job->start_ns) * 1e-9;

    /* verdict */
    int nfail = 0, nskip = 0, first_fail = -1, first_skip = -1;
    for (int k = 0; k < job->nended; k++) {
        int i = job->order[k];
        if (killed[i] || job->killed_by_test[i]) continue;
        if (ok_status(job->status[i])) continue;
        if (skip_status(job->status[i])) {
            nskip++;
            if (first_skip < 0) first_skip = i;
        } else {
            nfail++;
            if (first_fail < 0) first_fail = i;
        }
    }
    int nstuck = 0;
    for (int i = 0; i < n; i++) nstuck += stuck[i];

    char hdr[256];
    snprintf(hdr, sizeof hdr, "%s (%d ranks, %d root%s%s, transport %s)", job->o.name, n, job->nroots,
             job->nroots == 1 ? "" : "s", job->o.from_env ? ", from env" : "", harness_transport());
    size_t off = 0;
    int verdict;
    if (nfail == 0 && nstuck == 0 && nskip == 0) {
        verdict = HARNESS_PASS;
        off = append(job->msg, sizeof job->msg, off, "%s: passed in %.2f s", hdr, job->seconds);
    } else if (nfail == 0 && nstuck == 0) {
        verdict = HARNESS_SKIPPED;
        const char *why = job->shm + (size_t)first_skip * HARNESS_MSG_BYTES;
        off = append(job->msg, sizeof job->msg, off, "%s: %s", hdr, *why ? why : "skipped");
    } else {
        verdict = HARNESS_FAIL;
        off = append(job->msg, sizeof job->msg, off, "%s: ", hdr);
        if (first_fail >= 0) {
            char how[128];
            harness_describe_status(job->status[first_fail], how, sizeof how);
            const char *m = job->shm + (size_t)first_fail * HARNESS_MSG_BYTES;
            off = append(job->msg, sizeof job->msg, off, "rank %d %s%s%s", first_fail, how, *m ? ": " : "",
                         m);
            if (nfail > 1) {
                off = append(job->msg, sizeof job->msg, off, "; then rank%s", nfail > 2 ? "s" : "");
                int shown = 0;
                for (int k = 0; k < job->nended; k++) {
                    int i = job->order[k];
                    if (i == first_fail || killed[i] || job->killed_by_test[i] || ok_status(job->status[i]) ||
                        skip_status(job->status[i]))
                        continue;
                    if (shown++ < 16) off = append(job->msg, sizeof job->msg, off, "%s %d", shown > 1 ? "," : "", i);
                }
                if (shown > 16) off = append(job->msg, sizeof job->msg, off, " ...");
                off = append(job->msg, sizeof job->msg, off, " failed too");
            }
        }
        if (nstuck) {
            off = append(job->msg, sizeof job->msg, off, "%srank%s", first_fail >= 0 ? "; " : "",
                         nstuck > 1 ? "s" : "");
            int shown = 0;
            for (int i = 0; i < n; i++)
                if (stuck[i] && shown++ < 32)
                    off = append(job->msg, sizeof job->msg, off, "%s %d", shown > 1 ? "," : "", i);
            if (nstuck > 32) off = append(job->msg, sizeof job->msg, off, " ... (%d in all)", nstuck);
            off = append(job->msg, sizeof job->msg, off, " still running after %d s (killed)",
                         job->o.deadline_s);
            /* the last words of the stuck ranks help */
            for (int i = 0, shown2 = 0; i < n && shown2 < 4; i++) {
                const char *m = job->shm + (size_t)i * HARNESS_MSG_BYTES;
                if (stuck[i] && *m) {
                    off = append(job->msg, sizeof job->msg, off, "; rank %d last noted: %s", i, m);
                    shown2++;
                }
            }
        }
    }
    (void)off;
    free(killed);
    free(stuck);
    return verdict;
}

void harness_job_free(harness_job_t *job)
{
    if (job->pids && job->ended) {
        for (int i = 0; i < job->o.nranks; i++)
            if (!job->ended[i] && job->pids[i] > 0) {
                kill(job->pids[i], SIGKILL);
                reap(job, i, 1);
            }
    }
    if (job->pidfds)
        for (int i = 0; i < job->o.nranks; i++)
            if (job->pidfds[i] >= 0) close(job->pidfds[i]);
    if (job->shm) munmap(job->shm, (size_t)job->o.nranks * HARNESS_MSG_BYTES);
    free(job->pids);
    free(job->pidfds);
    free(job->status);
    free(job->ended);
    free(job->order);
    free(job->killed_by_test);
    free(job->ids);
    job->pids = NULL;
    job->pidfds = NULL;
    job->status = job->ended = job->order = job->killed_by_test = NULL;
    job->ids = NULL;
    job->shm = NULL;
}

int harness_run(const harness_job_opts_t *o, char *msg, size_t len)
{
    harness_job_t job;
    int v;
    if (harness_job_start(&job, o) != 0)
        v = HARNESS_FAIL;
    else
        v = harness_job_wait(&job);
    if (msg && len) snprintf(msg, len, "%s", job.msg);
    harness_job_free(&job);
    return v;
}

void harness_run_test(const harness_job_opts_t *o)
{
    char msg[4096];
    int v = harness_run(o, msg, sizeof msg);
    if (v == HARNESS_PASS) {
        print_message("  %s\n", msg);
        return;
    }
    if (v == HARNESS_SKIPPED && o->skip_is_failure)
        fail_msg("%s (the transport was usable when the suite started)", msg);
    if (v == HARNESS_SKIPPED) {
        print_message("  skipped: %s\n", msg);
        skip();
        return;
    }
    fail_msg("%s", msg);
}
