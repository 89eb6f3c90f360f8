/*
 * The fault suite: ranks killed or stopped at each phase, stray clients on
 * every listening port, a second job with another magic on the same port,
 * abort while blocked, repeated init/destroy without growth. Socket transport
 * unless OOBX_TRANSPORT says otherwise.
 *
 *   OOBX_TEST_SCALE=small|normal|long   OOBX_TEST_FILTER=glob
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <malloc.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include "harness.h"
#include "oobx_debug.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define MAX_RANKS 256
#define CALL_TIMEOUT_MS 3000
#define SLACK_S 2.5
/* bytes argument of run_kill_test for the strict tests of the communicator-wide
 * notice; their bound covers detection (UCX watches same-host pids every
 * 300 ms) and the spread on an oversubscribed machine */
#define STRICT_NOTICE ((size_t)-1)
#define NOTICE_BOUND_S 3.0
/* bytes argument of run_kill_test: init must end within one timeout */
#define INIT_BOUND ((size_t)-2)
/* bytes argument of run_kill_test for a stopped (SIGSTOP) victim: 1 KiB
 * allgathers, the victim's predecessor waits on it, and every survivor's
 * error names it (the probe finds it silent and the communicator is told) */
#define STOP_NAMED ((size_t)-4)
/* bytes argument of run_kill_test: no data, but every survivor's error must
 * name the victim (a rank that never reached its root: the root names it to
 * the ranks it answers, and the rank whose answer waited on it passes that
 * round the ring) */
#define ALL_NAMED ((size_t)-5)

/* Shared between the parent and the ranks (MAP_SHARED). */
typedef struct fault_ctl {
    int victim;
    int phase;              /* FAULT_* */
    int count;              /* cycles */
    size_t bytes;
    volatile int ready[MAX_RANKS];
    volatile double kill_time; /* harness_now() of the kill, 0 before */
    volatile int stop;
    int init_bound;         /* survivors' init must end within one timeout of their call */
    int strict;             /* survivors must get OOBX_ERR_REMOTE naming the victim within bound_s */
    double bound_s;
    int own_hosts;          /* every rank an emulated host of its own, node-aware: the leaders' card trade */
} fault_ctl_t;

enum { FAULT_BEFORE_CONTACT = 1, FAULT_IN_INIT, FAULT_IN_ALLGATHER };

static fault_ctl_t *ctl_new(void)
{
    fault_ctl_t *c = mmap(NULL, sizeof *c, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (c == MAP_FAILED) fail_msg("mmap of the shared control block: %s", strerror(errno));
    memset(c, 0, sizeof *c);
    return c;
}

static void ctl_free(fault_ctl_t *c) { munmap(c, sizeof *c); }

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int names_rank(const char *text, int rank)
{
    char key[32];
    int n = snprintf(key, sizeof key, "rank %d", rank);
    for (const char *p = text; (p = strstr(p, key)) != NULL; p += n)
        if (p[n] < '0' || p[n] > '9') return 1;
    return 0;
}

/* Waits until every rank except skip is ready, or the deadline; returns 1 when all are. */
static int wait_ready(harness_job_t *job, fault_ctl_t *ctl, int skip, double max_s)
{
    double end = harness_now() + max_s;
    while (harness_now() < end) {
        int all = 1;
        for (int i = 0; i < job->o.nranks; i++)
            if (i != skip && !ctl->ready[i]) all = 0;
        if (all) return 1;
        if (harness_job_poll(job, 10) < job->o.nranks - (skip >= 0 ? 0 : 0)) {
            /* someone ended early: the verdict will say who */
            for (int i = 0; i < job->o.nranks; i++)
                if (job->ended[i]) return 0;
        }
    }
    return 0;
}

/* A survivor's failed call: must be REMOTE or TIMEOUT, soon enough. */
static void judge_survivor(harness_rank_t *r, fault_ctl_t *ctl, int rc, double t_call, const char *what)
{
    double t = harness_now();
    const char *text = oobx_last_error();
    if (rc == OOBX_SUCCESS) H_FAIL(r, "%s succeeded although rank %d is gone", what, ctl->victim);
    if (ctl->init_bound && t - t_call > CALL_TIMEOUT_MS / 1000.0 + 0.8)
        H_FAIL(r, "%s returned %s %.2f s after the call: init gets one timeout of %d ms in all: %s", what,
               oobx_error_name(rc), t - t_call, CALL_TIMEOUT_MS, text);
    if (ctl->strict) {
        /* the communicator-wide notice: no timeout, the dead rank named, soon */
        double since = t - (ctl->kill_time > t_call ? ctl->kill_time : t_call);
        if (rc != OOBX_ERR_REMOTE)
            H_FAIL(r, "%s: got %s %.2f s after the kill, want OOBX_ERR_REMOTE: %s", what, oobx_error_name(rc), since,
                   text);
        if (!names_rank(text, ctl->victim))
            H_FAIL(r, "%s: the error does not name rank %d: %s", what, ctl->victim, text);
        if (since > ctl->bound_s)
            H_FAIL(r, "%s returned %.2f s after rank %d was killed (bound %.1f s): %s", what, since, ctl->victim,
                   ctl->bound_s, text);
        harness_note(r, "%s after %.2f s: %s", oobx_error_name(rc), since, text);
        return;
    }
    if (rc != OOBX_ERR_REMOTE && rc != OOBX_ERR_TIMEOUT)
        H_FAIL(r, "%s: got %s, want OOBX_ERR_REMOTE or OOBX_ERR_TIMEOUT: %s", what, oobx_error_name(rc), text);
    /* from the later of the call and the kill */
    double from = ctl->kill_time > t_call ? ctl->kill_time : t_call;
    double since = t - from;
    double bound = CALL_TIMEOUT_MS / 1000.0 + SLACK_S;
    if (since > bound)
        H_FAIL(r, "%s returned %s %.2f s after rank %d was killed (bound %.1f s)", what, oobx_error_name(rc), since,
               ctl->victim, bound);
    harness_note(r, "%s after %.2f s: %s", oobx_error_name(rc), since, text);
}

static int rank_killed_in_init(harness_rank_t *r)
{
    fault_ctl_t *ctl = r->arg;
    if (ctl->own_hosts) {
        /* each rank a process of its own: its settings are its own */
        char id[32];
        snprintf(id, sizeof id, "fault-host-%d", r->rank);
        setenv("OOBX_HOST_ID", id, 1);
        setenv("OOBX_NODE_AWARE_MIN", "2", 1);
    }
    if (r->rank == ctl->victim) {
        ctl->ready[r->rank] = 1;
        if (ctl->phase == FAULT_BEFORE_CONTACT) {
            for (;;) pause(); /* killed here, before it ever contacts a root */
        }
        oobx_comm_t c = NULL;
        harness_comm_init(r, &c); /* killed somewhere in here */
        for (;;) pause();
    }
    if (ctl->phase == FAULT_IN_INIT && !ctl->init_bound) sleep_ms(1000); /* the victim goes first */
    /* init_bound: the last rank comes 2 s late, so the root phase takes most of the budget */
    if (ctl->init_bound && r->rank == r->nranks - 1) sleep_ms(2000);
    ctl->ready[r->rank] = 1;
    oobx_comm_t c = NULL;
    double t0 = harness_now();
    int rc = harness_comm_init(r, &c);
    if (ctl->init_bound && rc == OOBX_SUCCESS) {
        /* a rank may finish: over shared memory the stopped rank's card and
         * its buffer can serve it. The bound is the test here. */
        harness_note(r, "init succeeded after %.2f s", harness_now() - t0);
        oobx_comm_destroy(c);
        return 0;
    }
    judge_survivor(r, ctl, rc, t0, "oobx_comm_init");
    return 0;
}

static int rank_killed_in_allgather(harness_rank_t *r)
{
    fault_ctl_t *ctl = r->arg;
    oobx_comm_t c = harness_comm_init_or_die(r);
    H_OK(r, oobx_barrier(c));
    size_t b = ctl->bytes;
    unsigned char *buf = malloc((size_t)r->nranks * b);
    if (!buf) H_FAIL(r, "out of memory");
    ctl->ready[r->rank] = 1;
    for (int k = 0; k < 100000; k++) {
        harness_fill(buf + (size_t)r->rank * b, b, r->rank, (unsigned)k);
        double t0 = harness_now();
        int rc = oobx_allgather(c, buf, b);
        if (rc != OOBX_SUCCESS) {
            if (r->rank == ctl->victim) H_FAIL(r, "the victim's allgather failed: %s", oobx_last_error());
            if (ctl->kill_time == 0)
                H_FAIL(r, "allgather %d failed before rank %d was harmed: %s: %s", k, ctl->victim,
                       oobx_error_name(rc), oobx_last_error());
            judge_survivor(r, ctl, rc, t0, "oobx_allgather");
            /* the rest of the calls fail too, and destroy still works */
            rc = oobx_barrier(c);
            if (rc == OOBX_SUCCESS) H_FAIL(r, "a barrier succeeded after rank %d was gone", ctl->victim);
            H_OK(r, oobx_comm_destroy(c));
            free(buf);
            return 0;
        }
        if (ctl->kill_time > 0 && harness_now() - ctl->kill_time > CALL_TIMEOUT_MS / 1000.0 + SLACK_S)
            H_FAIL(r, "allgathers still succeed %.1f s after rank %d was killed", harness_now() - ctl->kill_time,
                   ctl->victim);
    }
    H_FAIL(r, "100000 allgathers without the fault");
}

/* Every rank waits in oobx_recv for a message its live successor never
 * sends; then the victim is killed. Only the victim's neighbours have a link
 * to it: the others must hear of it from them. */
static int rank_blocked_on_live_peer(harness_rank_t *r)
{
    fault_ctl_t *ctl = r->arg;
    oobx_comm_t c = harness_comm_init_or_die(r);
    H_OK(r, oobx_barrier(c));
    ctl->ready[r->rank] = 1;
    int from = (r->rank + 1) % r->nranks;
    /* count 1: the victim's predecessor waits on it (the others on live peers) */
    if (from == ctl->victim && r->nranks > 2 && !ctl->count) from = (from + 1) % r->nranks;
    char b[8];
    double t0 = harness_now();
    int rc = oobx_recv(c, from, 77, b, sizeof b, NULL);
    if (r->rank == ctl->victim) H_FAIL(r, "the victim's receive returned: %s", oobx_last_error());
    judge_survivor(r, ctl, rc, t0, "oobx_recv from a live peer");
    rc = oobx_barrier(c);
    if (rc != OOBX_ERR_REMOTE) H_FAIL(r, "a barrier after the failure returned %s, want OOBX_ERR_REMOTE", oobx_error_name(rc));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* One call of a loop the victim dies in (k: its number); 0 or the call's code. */
typedef int (*loop_step_fn)(harness_rank_t *r, oobx_comm_t c, int k);

/* Runs step until it fails: the failure must come after the kill, on a
 * survivor, and is judged; what names the call. */
static int loop_until_fault(harness_rank_t *r, loop_step_fn step, const char *what)
{
    fault_ctl_t *ctl = r->arg;
    oobx_comm_t c = harness_comm_init_or_die(r);
    H_OK(r, oobx_barrier(c));
    ctl->ready[r->rank] = 1;
    for (int k = 0; k < 1000000; k++) {
        double t0 = harness_now();
        int rc = step(r, c, k);
        if (rc == OOBX_SUCCESS) continue;
        if (r->rank == ctl->victim) H_FAIL(r, "the victim's %s failed: %s", what, oobx_last_error());
        if (ctl->kill_time == 0) H_FAIL(r, "%s %d failed before the kill: %s", what, k, oobx_last_error());
        judge_survivor(r, ctl, rc, t0, what);
        H_OK(r, oobx_comm_destroy(c));
        return 0;
    }
    H_FAIL(r, "a million calls of %s without the fault", what);
}

static int barrier_step(harness_rank_t *r, oobx_comm_t c, int k)
{
    (void)r;
    (void)k;
    return oobx_barrier(c);
}

/* A 4 KiB broadcast from every root in turn, its data checked. */
static int bcast_step(harness_rank_t *r, oobx_comm_t c, int k)
{
    unsigned char buf[4096];
    int root = k % r->nranks;
    if (r->rank == root) harness_fill(buf, sizeof buf, root, (unsigned)k);
    int rc = oobx_bcast(c, root, buf, sizeof buf);
    if (rc == OOBX_SUCCESS) harness_verify(r, buf, sizeof buf, root, (unsigned)k, "broadcast %d from rank %d", k, root);
    return rc;
}

/* A 256 KiB broadcast of oobx_mem_alloc memory from every root in turn
 * (the direct broadcast, where the ranks share a host: every rank reads the
 * root's buffer through a mapping), checked. */
static int large_bcast_step(harness_rank_t *r, oobx_comm_t c, int k)
{
    const size_t b = 256 * 1024;
    unsigned char *buf = NULL;
    int rc = oobx_mem_alloc(c, b, (void **)&buf);
    if (rc) return rc;
    int root = k % r->nranks;
    if (r->rank == root) harness_fill(buf, b, root, (unsigned)k);
    rc = oobx_bcast(c, root, buf, b);
    if (rc == OOBX_SUCCESS) harness_verify(r, buf, b, root, (unsigned)k, "large broadcast %d from rank %d", k, root);
    oobx_mem_free(c, buf);
    return rc;
}

/* A barrier loop; the victim dies somewhere in it. */
static int rank_killed_in_barriers(harness_rank_t *r)
{
    return loop_until_fault(r, barrier_step, "oobx_barrier");
}

static int rank_killed_in_large_bcasts(harness_rank_t *r)
{
    return loop_until_fault(r, large_bcast_step, "oobx_bcast");
}

/* A loop of 4 KiB broadcasts from every root in turn; the victim dies in it. */
static int rank_killed_in_bcasts(harness_rank_t *r)
{
    return loop_until_fault(r, bcast_step, "oobx_bcast");
}

/* A loop of splits (two colours) with a barrier on each child; the victim
 * dies in it. A child made before the loop that does not contain the
 * victim still works afterwards: the failure is not its own. */
static int rank_killed_in_splits(harness_rank_t *r)
{
    fault_ctl_t *ctl = r->arg;
    oobx_comm_t c = harness_comm_init_or_die(r);
    int colour = r->rank % 2;
    oobx_comm_t keep;
    H_OK(r, oobx_comm_split(c, colour, r->rank, &keep));
    H_OK(r, oobx_barrier(c));
    ctl->ready[r->rank] = 1;
    for (int k = 0; k < 1000000; k++) {
        oobx_comm_t child;
        double t0 = harness_now();
        int rc = oobx_comm_split(c, colour, r->rank, &child);
        const char *what = "oobx_comm_split";
        if (rc == OOBX_SUCCESS) {
            t0 = harness_now();
            rc = oobx_barrier(child);
            what = "oobx_barrier on a child";
            int drc = oobx_comm_destroy(child);
            if (rc == OOBX_SUCCESS && drc != OOBX_SUCCESS) H_FAIL(r, "destroying a child: %s", oobx_last_error());
            if (rc == OOBX_SUCCESS) continue;
        }
        if (r->rank == ctl->victim) H_FAIL(r, "the victim's %s failed: %s", what, oobx_last_error());
        if (ctl->kill_time == 0) H_FAIL(r, "%s %d failed before the kill: %s", what, k, oobx_last_error());
        judge_survivor(r, ctl, rc, t0, what);
        if (colour != ctl->victim % 2) {
            rc = oobx_barrier(keep);
            if (rc != OOBX_SUCCESS)
                H_FAIL(r, "a barrier on a child without rank %d failed after its death: %s", ctl->victim,
                       oobx_last_error());
        } else {
            rc = oobx_barrier(keep);
            if (rc != OOBX_ERR_REMOTE)
                H_FAIL(r, "a barrier on a child with rank %d returned %s after its death", ctl->victim,
                       oobx_error_name(rc));
        }
        H_OK(r, oobx_comm_destroy(keep));
        H_OK(r, oobx_comm_destroy(c));
        return 0;
    }
    H_FAIL(r, "a million splits without the fault");
}

static int reached_our_listener(pid_t pid);

/* Runs a kill test: waits for the ranks to be ready, harms the victim with sig,
 * lets the survivors judge, and checks that one of them named the victim. */
static void run_kill_test_ctl(fault_ctl_t *ctl, const char *name, harness_fn fn, int n, int roots, int victim,
                              int phase, int sig, size_t bytes);
static void run_kill_test(const char *name, harness_fn fn, int n, int roots, int victim, int phase, int sig,
                          size_t bytes)
{
    run_kill_test_ctl(ctl_new(), name, fn, n, roots, victim, phase, sig, bytes);
}
static void run_kill_test_ctl(fault_ctl_t *ctl, const char *name, harness_fn fn, int n, int roots, int victim,
                              int phase, int sig, size_t bytes)
{
    ctl->victim = victim;
    ctl->phase = phase;
    ctl->bytes = bytes;
    int all_named = bytes == STOP_NAMED || bytes == ALL_NAMED;
    if (bytes == STOP_NAMED) {
        ctl->count = 1;
        ctl->bytes = bytes = 1024;
    }
    if (bytes == ALL_NAMED) ctl->bytes = bytes = 0;
    int strict = bytes == STRICT_NOTICE;
    if (bytes == INIT_BOUND) {
        ctl->init_bound = 1;
        ctl->bytes = 0;
    }
    if (strict) {
        /* long calls: a survivor that only times out fails the test */
        ctl->strict = 1;
        ctl->bound_s = NOTICE_BOUND_S;
        ctl->bytes = 0;
    }
    harness_job_opts_t o = {.name = name, .nranks = n, .nroots = roots, .fn = fn, .arg = ctl,
                            .call_timeout_ms = strict ? 30000 : CALL_TIMEOUT_MS, .deadline_s = 60, .keep_going = 1};
    harness_job_t job;
    if (harness_job_start(&job, &o) != 0) fail_msg("%s", job.msg);
    int ok;
    if (phase == FAULT_IN_INIT) {
        /* the victim is in init; the others are still asleep */
        double end = harness_now() + 10;
        while (!ctl->ready[victim] && !job.ended[victim] && harness_now() < end) harness_job_poll(&job, 5);
        ok = ctl->ready[victim];
    } else {
        ok = wait_ready(&job, ctl, -1, 20);
    }
    if (ok && phase == FAULT_IN_INIT) {
        /* in init means after its report reached the root: on a loaded host
         * the transport's set-up before it can take longer than any fixed
         * pause (killed earlier, only the root's timeout could tell) */
        double end = harness_now() + 10;
        while (!job.ended[victim] && !reached_our_listener(job.pids[victim]) && harness_now() < end)
            harness_job_poll(&job, 5);
    }
    if (ok) {
        sleep_ms(phase == FAULT_IN_ALLGATHER ? 200 : phase == FAULT_IN_INIT ? 150 : 300);
        ctl->kill_time = harness_now();
        harness_job_kill(&job, victim, sig);
    }
    /* the survivors end on their own; a stopped victim is killed afterwards */
    double end = harness_now() + 30;
    for (;;) {
        int running = 0;
        for (int i = 0; i < n; i++)
            if (i != victim && !job.ended[i]) running++;
        if (!running || harness_now() > end) break;
        harness_job_poll(&job, 200);
    }
    harness_job_kill(&job, victim, SIGKILL);
    int v = harness_job_wait(&job);
    char msg[8192];
    snprintf(msg, sizeof msg, "%s", job.msg);
    int named = 0;
    for (int i = 0; i < n; i++) {
        const char *m = job.shm + (size_t)i * HARNESS_MSG_BYTES;
        if (i != victim && names_rank(m, victim)) named++;
    }
    /* what each survivor saw */
    for (int i = 0; i < n && i < 16; i++) {
        if (i == victim) continue;
        print_message("    rank %d: %s\n", i, job.shm + (size_t)i * HARNESS_MSG_BYTES);
    }
    harness_job_free(&job);
    int ctl_init_bound = ctl->init_bound;
    ctl_free(ctl);
    if (!ok) fail_msg("%s: the ranks never got ready: %s", name, msg);
    if (v != HARNESS_PASS) fail_msg("%s", msg);
    if (!named && !ctl_init_bound)
        fail_msg("%s: no survivor's error names rank %d (each survivor's text is printed above)", name, victim);
    if ((strict || all_named) && named != n - 1)
        fail_msg("%s: %d of %d survivors named rank %d (each survivor's text is printed above)", name, named, n - 1,
                 victim);
    print_message("  %s: passed; %d of %d survivors named rank %d\n", name, named, n - 1, victim);
}

static void test_kill_before_contact(void **state)
{
    (void)state;
    run_kill_test("kill_before_contact_n8", rank_killed_in_init, 8, 1, 5, FAULT_BEFORE_CONTACT, SIGKILL, ALL_NAMED);
}
/* Strict (every survivor names the victim at once, the calls' own timeout
 * is 30 s) on both paths. Flat: the victim's ring predecessor finds it gone,
 * the notice goes back round the ring's links (over UCX, whose links go one
 * way, to the predecessor whose card came first, or came while this rank
 * lingers), and a rank that gives up stays reachable a moment for a
 * predecessor that connects late. Node-aware (OOBX_NODE_AWARE_MIN): a root
 * tells its block when a rank closes before its answer, a block's first rank
 * passes a refusal on to its other root (withdraw notice), and a rank placed
 * by one root but refused by the other tells its host's table. */
static size_t init_kill_rule(int n)
{
    (void)n;
    return STRICT_NOTICE;
}
static void test_kill_in_init(void **state)
{
    (void)state;
    run_kill_test("kill_in_init_n8", rank_killed_in_init, 8, 1, 5, FAULT_IN_INIT, SIGKILL, init_kill_rule(8));
}
static void test_kill_in_init_roots3(void **state)
{
    (void)state;
    run_kill_test("kill_in_init_n16_roots3", rank_killed_in_init, 16, 3, 6, FAULT_IN_INIT, SIGKILL,
                  init_kill_rule(16));
}
static void test_kill_in_allgather(void **state)
{
    (void)state;
    run_kill_test("kill_in_allgather_n8", rank_killed_in_allgather, 8, 1, 5, FAULT_IN_ALLGATHER, SIGKILL,
                  64 * 1024);
}
static void test_kill_in_allgather_small(void **state)
{
    (void)state;
    run_kill_test("kill_in_small_allgather_n16_roots2", rank_killed_in_allgather, 16, 2, 0, FAULT_IN_ALLGATHER,
                  SIGKILL, 100);
}
/* Eight one-rank hosts, node-aware: the victim, a leader, reports and is
 * stopped; the root answers every rank, and the other leaders' card trade
 * (by doubling, and by the ring) waits for a leader that never sends: every
 * survivor fails within the timeout, and one names it at least. */
static void stopped_leader(const char *name, const char *exchange)
{
    fault_ctl_t *ctl = ctl_new();
    ctl->own_hosts = 1;
    setenv("OOBX_NODE_EXCHANGE", exchange, 1);
    run_kill_test_ctl(ctl, name, rank_killed_in_init, 8, 1, 5, FAULT_IN_INIT, SIGSTOP, 0);
    unsetenv("OOBX_NODE_EXCHANGE");
}
static void test_stopped_leader_in_trade(void **state)
{
    (void)state;
    stopped_leader("stopped_leader_in_card_trade_n8_hosts8", "bruck");
}
static void test_stopped_leader_in_ring_trade(void **state)
{
    (void)state;
    stopped_leader("stopped_leader_in_card_ring_n8_hosts8", "ring");
}
/* A rank whose init must fail (the caller set var): the error and
 * how long init took go to the job's messages. */
static int init_must_fail(harness_rank_t *r, const char *var)
{
    double t0 = harness_now();
    oobx_comm_t c = NULL;
    int rc = harness_comm_init(r, &c);
    double took = harness_now() - t0;
    if (rc == OOBX_SUCCESS) H_FAIL(r, "init succeeded with %s=%s", var, getenv(var));
    harness_note(r, "%s after %.2f s: %s", oobx_error_name(rc), took, oobx_last_error());
    return 0;
}

/* What a job of n ranks whose inits must fail said: the ranks whose error
 * holds text (named; named_late of them took more than 5 s), the ranks that
 * took more than 5 s or said nothing of it (late), those that failed with
 * OOBX_ERR_MISMATCH, and the job's seconds. */
typedef struct refusal {
    int named, named_late, late, mismatch;
    int late_low; /* of the late, ranks below n / 2 */
    double seconds;
} refusal_t;

static refusal_t run_refusal(const char *name, int n, int nroots, harness_fn fn, const char *text)
{
    harness_job_opts_t o = {.name = name, .nranks = n, .nroots = nroots, .fn = fn, .call_timeout_ms = 15000,
                            .deadline_s = 40, .keep_going = 1};
    harness_job_t job;
    if (harness_job_start(&job, &o) != 0) fail_msg("%s", job.msg);
    int v = harness_job_wait(&job);
    refusal_t f = {.seconds = job.seconds};
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", job.msg);
    for (int i = 0; i < n; i++) {
        const char *m = job.shm + (size_t)i * HARNESS_MSG_BYTES;
        print_message("    rank %d: %s\n", i, m);
        double after = -1;
        const char *a = strstr(m, " after ");
        int slow = !a || sscanf(a, " after %lf s", &after) != 1 || after > 5.0;
        f.late += slow;
        f.late_low += slow && i < n / 2;
        if (strstr(m, text)) {
            f.named++;
            f.named_late += slow;
        }
        if (strncmp(m, "OOBX_ERR_MISMATCH", 17) == 0) f.mismatch++;
    }
    harness_job_free(&job);
    if (v != HARNESS_PASS) fail_msg("%s", msg);
    return f;
}

/* Eight one-rank hosts whose ranks disagree on OOBX_NODE_EXCHANGE: ranks
 * 0-3 trade init's cards by doubling, 4-7 by the ring. Where a leader's
 * previous leader trades the other way (4 after 3, 0 after 7) its first
 * message tells: that leader fails at once naming the setting and the
 * other leader, and tells the leaders it talked to, which pass it on: every
 * rank's init fails long before the timeout (UCX included, whose links do
 * not tell a peer's exit), most of them naming the setting. */
static int rank_exchange_mismatch(harness_rank_t *r)
{
    char id[32];
    snprintf(id, sizeof id, "fault-host-%d", r->rank);
    setenv("OOBX_HOST_ID", id, 1);
    setenv("OOBX_NODE_AWARE_MIN", "2", 1);
    setenv("OOBX_NODE_EXCHANGE", r->rank < r->nranks / 2 ? "bruck" : "ring", 1);
    return init_must_fail(r, "OOBX_NODE_EXCHANGE");
}
static void test_exchange_mismatch(void **state)
{
    (void)state;
    const char *name = "node_exchange_mismatch_n8_hosts8";
    int n = 8;
    refusal_t f = run_refusal(name, n, 1, rank_exchange_mismatch, "set OOBX_NODE_EXCHANGE the same on every rank");
    /* the two leaders after a boundary name it; the others hear of a failure */
    if (f.named < 2)
        fail_msg("%s: %d ranks named the setting, want the 2 leaders after a boundary at least", name, f.named);
    if (f.mismatch < 2) fail_msg("%s: %d ranks failed with OOBX_ERR_MISMATCH", name, f.mismatch);
    if (f.named_late)
        fail_msg("%s: %d of the ranks that named the setting took more than 5 s (call timeout 15 s)", name,
                 f.named_late);
    if (f.seconds > 10)
        fail_msg("%s: the job took %.1f s (call timeout 15 s): a rank waited for a leader that had failed", name,
                 f.seconds);
    print_message("  %s: passed in %.2f s; %d of %d ranks named the setting\n", name, f.seconds, f.named, n);
}
/* Ranks that disagree on what the whole job shares, here whether it is
 * node-aware (ranks 0-3 node-aware, 4-7 flat): the root refuses the ranks
 * that differ from the first reporter and tells every rank still waiting,
 * and every later reporter, the same reason at once. No rank, flat or
 * node-aware, is answered before its whole block is in, so every rank
 * fails within 5 s naming the settings, over UCX too (whose links do not
 * tell a peer's exit). In the second order the node-aware ranks report
 * 300 ms late, after the flat ones: before, a flat rank whose successor
 * had reported was answered at once, went on to its ring and failed there
 * on the refused ranks' exit, not naming the settings (over UCX possibly
 * only at the timeout). */
static int rank_job_refused(harness_rank_t *r)
{
    int node_aware = r->rank < r->nranks / 2;
    setenv("OOBX_NODE_AWARE_MIN", node_aware ? "2" : "1000", 1);
    if (node_aware && getenv("FAULT_NODE_AWARE_LATE")) usleep(300000);
    return init_must_fail(r, "OOBX_NODE_AWARE_MIN");
}
static void test_job_refused(void **state)
{
    (void)state;
    /* one root; then two, each block the same within but not as the
     * other: the report that stitches them is refused at both roots */
    for (int late = 0; late <= 1; late++) {
        if (late) setenv("FAULT_NODE_AWARE_LATE", "1", 1);
        for (int nroots = 1; nroots <= 2; nroots++) {
            char name[64];
            snprintf(name, sizeof name, "job_refused_%s_n8%s", late ? "flat_first" : "node_aware",
                     nroots == 2 ? "_roots2" : "");
            int n = 8;
            refusal_t f = run_refusal(name, n, nroots, rank_job_refused,
                                      "set OOBX_NODE_AWARE and OOBX_NODE_AWARE_MIN the same on every rank");
            if (f.named < n) fail_msg("%s: %d ranks named the settings, want all %d", name, f.named, n);
            if (f.late)
                fail_msg("%s: %d ranks (%d node-aware) took more than 5 s to fail (call timeout 15 s)", name, f.late,
                         f.late_low);
            print_message("  %s: passed in %.2f s; %d of %d ranks named the settings\n", name, f.seconds, f.named,
                          n);
        }
    }
    unsetenv("FAULT_NODE_AWARE_LATE");
}
/* The victim (rank 0) reports and is stopped; the last rank reports 2 s
 * late, so the others spend 2 s of their 3 s in the root phase and the rest
 * waiting for the victim's card: init must end within the one timeout. */
static void test_init_one_budget(void **state)
{
    (void)state;
    run_kill_test("init_within_one_timeout_n3", rank_killed_in_init, 3, 1, 0, FAULT_IN_INIT, SIGSTOP, INIT_BOUND);
}
/* The root is started (oobx_get_unique_id, in the parent) under
 * OOBX_TIMEOUT_MS=3000, the ranks pass timeout_ms = 12000 and the last one
 * comes 5 s late: once the first reports are in (well within the root's own
 * 2.7 s, UCX's start-up included), the ranks' budget rules and the root
 * waits for the last one. */
static int rank_plain(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}
static void test_root_follows_ranks_budget(void **state)
{
    (void)state;
    const char *old = getenv("OOBX_TIMEOUT_MS");
    char *saved = old ? strdup(old) : NULL;
    setenv("OOBX_TIMEOUT_MS", "3000", 1);
    HARNESS_RUN(.name = "root_follows_config_timeout_n4", .nranks = 4, .fn = rank_plain, .call_timeout_ms = 12000,
                .start_spread_ms = 5000, .deadline_s = 40);
    if (saved) setenv("OOBX_TIMEOUT_MS", saved, 1);
    else unsetenv("OOBX_TIMEOUT_MS");
    free(saved);
}
static void test_kill_blocked_on_live_peer(void **state)
{
    (void)state;
    int n = harness_scale() == 0 ? 8 : 16;
    run_kill_test(n == 8 ? "kill_while_all_wait_on_live_peers_n8" : "kill_while_all_wait_on_live_peers_n16",
                  rank_blocked_on_live_peer, n, 2, 5, FAULT_IN_ALLGATHER, SIGKILL, STRICT_NOTICE);
}
static void test_kill_in_barriers(void **state)
{
    (void)state;
    run_kill_test("kill_in_barriers_n8", rank_killed_in_barriers, 8, 1, 3, FAULT_IN_ALLGATHER, SIGKILL,
                  STRICT_NOTICE);
}
static void test_kill_in_bcasts(void **state)
{
    (void)state;
    run_kill_test("kill_in_bcasts_n8", rank_killed_in_bcasts, 8, 1, 6, FAULT_IN_ALLGATHER, SIGKILL, STRICT_NOTICE);
}
static void test_kill_in_large_bcasts(void **state)
{
    (void)state;
    run_kill_test("kill_in_large_bcasts_n8", rank_killed_in_large_bcasts, 8, 1, 6, FAULT_IN_ALLGATHER, SIGKILL,
                  STRICT_NOTICE);
}
static void test_kill_in_splits(void **state)
{
    (void)state;
    run_kill_test("kill_in_splits_n8", rank_killed_in_splits, 8, 2, 3, FAULT_IN_ALLGATHER, SIGKILL, STRICT_NOTICE);
}
static void test_stop_in_allgather(void **state)
{
    (void)state;
    run_kill_test("silent_peer_in_allgather_n8", rank_killed_in_allgather, 8, 1, 5, FAULT_IN_ALLGATHER, SIGSTOP,
                  STOP_NAMED);
}
static void test_stop_in_barriers(void **state)
{
    (void)state;
    run_kill_test("silent_peer_in_barriers_n8", rank_killed_in_barriers, 8, 1, 3, FAULT_IN_ALLGATHER, SIGSTOP,
                  STOP_NAMED);
}
static void test_stop_blocked_on_live_peer(void **state)
{
    (void)state;
    run_kill_test("silent_peer_while_all_wait_n8", rank_blocked_on_live_peer, 8, 2, 5, FAULT_IN_ALLGATHER, SIGSTOP,
                  STOP_NAMED);
}

/* ---- stray clients ------------------------------------------------------------------ */

typedef struct stray {
    int fds[4096];
    int nfds;
    unsigned ports[1024]; /* port | family << 16, already visited */
    int nports;
    int visits;
    uint64_t magic;       /* the job's magic when known (from a unique id), else 0 */
    int challenged;       /* connections that sent the challenge: the attacker spoke the protocol */
    int peer_refused;     /* forged peer hellos a rank's socket listener closed on without a word */
    int breaches;         /* answers an unauthenticated attacker must never get */
    int leaks;            /* replies that carried the magic */
    char breach[300];     /* the first of them */
    unsigned char addr[16]; /* the listener attacked now: its address as /proc/net/tcp shows it */
} stray_t;

static int socket_inodes(pid_t pid, unsigned long *ino, int max)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        char lp[320], target[128];
        snprintf(lp, sizeof lp, "%s/%s", path, e->d_name);
        ssize_t k = readlink(lp, target, sizeof target - 1);
        if (k <= 0) continue;
        target[k] = 0;
        unsigned long i;
        if (sscanf(target, "socket:[%lu]", &i) == 1) ino[n++] = i;
    }
    closedir(d);
    return n;
}

/* A TCP socket as /proc/PID/net/tcp(6) lists it. */
typedef struct tcp_sock {
    char local[64], remote[64]; /* hex address:port, each 32-bit word of the address in host order */
    unsigned st;                /* 0x0A LISTEN, 0x01 ESTABLISHED */
    int v6;
} tcp_sock_t;

/* Calls fn for each TCP socket in pid's network namespace whose inode is
 * one of ino[0..nino); the first nonzero answer of fn ends the walk and is
 * returned. */
static int tcp_sockets_each(pid_t pid, const unsigned long *ino, int nino, int (*fn)(tcp_sock_t *, void *),
                            void *arg)
{
    int rc = 0;
    for (int v6 = 0; v6 < 2 && !rc; v6++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/net/tcp%s", (int)pid, v6 ? "6" : "");
        FILE *f = fopen(path, "r");
        if (!f) continue;
        char line[512];
        while (!rc && fgets(line, sizeof line, f)) {
            tcp_sock_t t = {.v6 = v6};
            unsigned long inode;
            /* the heading line does not parse */
            if (sscanf(line, "%*d: %63s %63s %x %*s %*s %*s %*d %*d %lu", t.local, t.remote, &t.st, &inode) != 4)
                continue;
            for (int i = 0; i < nino; i++)
                if (ino[i] == inode) {
                    rc = fn(&t, arg);
                    break;
                }
        }
        fclose(f);
    }
    return rc;
}

/* The port of a /proc address ("0100007F:1F90"), or -1. */
static long tcp_port(const char *addr)
{
    const char *colon = strchr(addr, ':');
    return colon ? (long)strtoul(colon + 1, NULL, 16) : -1;
}

typedef struct listeners {
    long ports[256];
    int n;
} listeners_t;

static int note_listener(tcp_sock_t *t, void *arg)
{
    listeners_t *l = arg;
    long port = tcp_port(t->local);
    if (t->st == 0x0A && port >= 0 && l->n < 256) l->ports[l->n++] = port;
    return 0;
}

static int connected_to_listener(tcp_sock_t *t, void *arg)
{
    const listeners_t *l = arg;
    if (t->st != 0x01) return 0;
    for (int i = 0; i < l->n; i++)
        if (l->ports[i] == tcp_port(t->remote)) return 1;
    return 0;
}

/* 1 when pid holds an established TCP connection to a port that this
 * process listens on (the roots of a job that is not from_env live here):
 * the rank has contacted its root. */
static int reached_our_listener(pid_t pid)
{
    unsigned long mine[256], theirs[256];
    int nmine = socket_inodes(getpid(), mine, 256), ntheirs = socket_inodes(pid, theirs, 256);
    listeners_t l = {.n = 0};
    tcp_sockets_each(getpid(), mine, nmine, note_listener, &l);
    return l.n > 0 && tcp_sockets_each(pid, theirs, ntheirs, connected_to_listener, &l);
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* The wire version the library speaks (docs/protocol.md); a hello of another
 * is refused for its version before its proof is looked at. */
#define WIRE_VERSION 3

/* The documented hello layout (docs/protocol.md), written by hand here. */
static void hello_bytes(unsigned char *b, uint32_t proto, uint16_t version, uint16_t type, uint64_t magic, int rank,
                        int nranks)
{
    memset(b, 0, 32);
    put32(b, proto);
    b[4] = (unsigned char)version;
    b[5] = (unsigned char)(version >> 8);
    b[6] = (unsigned char)type;
    b[7] = (unsigned char)(type >> 8);
    put64(b + 8, magic);
    put32(b + 16, (uint32_t)rank);
    put32(b + 20, (uint32_t)nranks);
}

static int stray_connect(const stray_t *s, int family, unsigned port)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int rc;
    if (family == AF_INET) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        memcpy(&a.sin_addr, s->addr, 4);
        rc = connect(fd, (struct sockaddr *)&a, sizeof a);
    } else {
        struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
        memcpy(&a.sin6_addr, s->addr, 16);
        rc = connect(fd, (struct sockaddr *)&a, sizeof a);
    }
    if (rc != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void stray_keep(stray_t *s, int fd)
{
    if (fd < 0) return;
    if (s->nfds < (int)(sizeof s->fds / sizeof s->fds[0]))
        s->fds[s->nfds++] = fd;
    else
        close(fd);
}

/* Reads what the other side says within ms (at most cap bytes); returns the
 * count; *closed (when not NULL) says whether it closed (or reset) within ms. */
static size_t read_some_closed(int fd, unsigned char *buf, size_t cap, int ms, int *closed)
{
    size_t got = 0;
    double until = harness_now() + ms / 1000.0;
    if (closed) *closed = 0;
    while (got < cap) {
        int left = (int)((until - harness_now()) * 1000);
        if (left <= 0) break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0) break;
        ssize_t n = recv(fd, buf + got, cap - got, MSG_DONTWAIT);
        if (n <= 0) {
            if (closed && (n == 0 || (errno != EAGAIN && errno != EINTR))) *closed = 1;
            if (n == 0 || (errno != EAGAIN && errno != EINTR)) break;
            continue;
        }
        got += (size_t)n;
    }
    return got;
}


static int has_magic(const unsigned char *b, size_t n, uint64_t magic)
{
    unsigned char m[8];
    put64(m, magic);
    for (size_t i = 0; magic && i + 8 <= n; i++)
        if (!memcmp(b + i, m, 8)) return 1;
    return 0;
}

static void breach(stray_t *s, unsigned port, const char *what)
{
    if (!s->breaches++) snprintf(s->breach, sizeof s->breach, "port %u: %s", port, what);
}

/* 1 when b holds a root's challenge (docs/protocol.md: wire magic, version, "HC"). */
static int is_challenge(const unsigned char *b, size_t n)
{
    return n >= 32 && b[0] == 0x4f && b[1] == 0x30 && b[2] == 0x42 && b[3] == 0x58 && b[6] == 0x48 && b[7] == 0x43;
}

/* An attacker that knows the protocol, the job's size, ports and magic, but
 * not its secret: it sends a hello with a forged proof at once, claiming a
 * rank, as a root client (with a report of 10^8 ranks) and as a peer (with a
 * message header of 2^43 bytes behind it). A root answers with its
 * challenge, then must refuse; a rank's socket listener (which sends no
 * challenge: its nonce is in its address) must close without a word.
 * Whatever comes back must be a refusal that carries no magic. Returns 0
 * when the port neither challenged nor closed (not an oobx listener: a UCX
 * one, say). */
static int proto_attack(stray_t *s, int family, unsigned port, int type, int claim)
{
    int fd = stray_connect(s, family, port);
    if (fd < 0) return 0;
    unsigned char b[512], in[2048];
    memset(b, 0, sizeof b);
    hello_bytes(b, 0x5842304fu, WIRE_VERSION, (uint16_t)type, s->magic, claim, type == 3 ? 8 : 100000000);
    for (int i = 32; i < 80; i++) b[i] = (unsigned char)(i * 131 + claim); /* nonce and a forged mac */
    size_t len = 80;
    if (type == 3) {
        /* a message header from the claimed rank: 2^43 payload bytes */
        put64(b + 80 + 16, 1ull << 43);
        put32(b + 80 + 24, (uint32_t)claim);
        b[80 + 28] = 1;
        b[80 + 30] = 0x0b;
        b[80 + 31] = 0x0b;
        len = 80 + 32 + 64;
    } else {
        put32(b + 80, (uint32_t)claim);
        put32(b + 84, 100000000);
        put32(b + 88, 0);
        put32(b + 92, 1);
        put32(b + 96, 1);
        put32(b + 100, 24);
        put32(b + 104, 5000);
        len = 80 + 28 + 24;
    }
    (void)!send(fd, b, len, MSG_NOSIGNAL);
    int closed = 0;
    size_t n = read_some_closed(fd, in, sizeof in, 1500, &closed);
    int challenged = is_challenge(in, n);
    if (challenged) {
        s->challenged++;
        memmove(in, in + 32, n - 32);
        n -= 32;
    } else if (closed && n == 0 && type == 3) {
        s->peer_refused++;
    } else if (!closed) {
        close(fd);
        return 0;
    }
    if (has_magic(in, n, s->magic)) {
        s->leaks++;
        breach(s, port, "a reply to an unauthenticated client carried the job's magic");
    }
    if (type == 3 && n >= 32 && in[6] == 4) breach(s, port, "a forged peer hello was acknowledged");
    if (type != 3 && n >= 8 && (in[0] | in[1] | in[2] | in[3]) == 0)
        breach(s, port, "a forged root report got an answer with status 0");
    if (type != 3 && n >= 8 && (in[0] | in[1] | in[2] | in[3]) != 0 && !memmem(in + 8, n - 8, "not authenticated", 17))
        breach(s, port, "the root's refusal does not say that the client is not authenticated");
    close(fd);
    return 1;
}

/* Everything a confused or hostile client might do, on one port. */
static void stray_attack(stray_t *s, int family, unsigned port)
{
    unsigned char b[256];
    int fd;
    s->visits++;
    /* silent clients */
    stray_keep(s, stray_connect(s, family, port));
    stray_keep(s, stray_connect(s, family, port));
    /* garbage, kept open */
    if ((fd = stray_connect(s, family, port)) >= 0) {
        for (size_t i = 0; i < sizeof b; i++) b[i] = (unsigned char)(i * 37 + port);
        (void)!send(fd, b, sizeof b, MSG_NOSIGNAL);
        stray_keep(s, fd);
    }
    /* garbage, then gone */
    if ((fd = stray_connect(s, family, port)) >= 0) {
        (void)!send(fd, "GET / HTTP/1.0\r\n\r\n", 18, MSG_NOSIGNAL);
        close(fd);
    }
    /* half a hello, kept open */
    if ((fd = stray_connect(s, family, port)) >= 0) {
        hello_bytes(b, 0x5842304fu, 1, 1, s->magic, 0, 8);
        (void)!send(fd, b, 13, MSG_NOSIGNAL);
        stray_keep(s, fd);
    }
    /* hellos: wrong version, wrong magic, right magic with absurd ranks */
    if ((fd = stray_connect(s, family, port)) >= 0) {
        hello_bytes(b, 0x5842304fu, 99, 1, s->magic, 0, 8);
        (void)!send(fd, b, 32, MSG_NOSIGNAL);
        stray_keep(s, fd);
    }
    if ((fd = stray_connect(s, family, port)) >= 0) {
        hello_bytes(b, 0x5842304fu, 1, 3, s->magic ^ 0x5a5a5a5a5a5aull, 1, 8);
        (void)!send(fd, b, 32, MSG_NOSIGNAL);
        stray_keep(s, fd);
    }
    if (s->magic && (fd = stray_connect(s, family, port)) >= 0) {
        /* a root hello with the real magic, then a report with an absurd address size */
        hello_bytes(b, 0x5842304fu, 1, 1, s->magic, 7, 1 << 30);
        put32(b + 32, 7);
        put32(b + 36, 8);
        put32(b + 40, 0);
        put32(b + 44, 1);
        put32(b + 48, 1);
        put32(b + 52, 0x7fffffff);
        (void)!send(fd, b, 56, MSG_NOSIGNAL);
        stray_keep(s, fd);
    }
    /* the protocol spoken right, with everything but the secret: a root
     * report squatting rank 0 and another rank, peer hellos claiming them */
    int other = 1 + s->visits % 7;
    if (proto_attack(s, family, port, 1, 0)) {
        proto_attack(s, family, port, 5, other);
        proto_attack(s, family, port, 3, 0);
        proto_attack(s, family, port, 3, other);
    }
    /* a flood of clients that take the challenge and say nothing */
    for (int i = 0; i < 64; i++) {
        if ((fd = stray_connect(s, family, port)) < 0) break;
        stray_keep(s, fd);
    }
    if (s->magic && (fd = stray_connect(s, family, port)) >= 0) {
        /* a peer hello with the real magic from a rank that does not exist */
        hello_bytes(b, 0x5842304fu, 1, 3, s->magic, 1000, 8);
        (void)!send(fd, b, 32, MSG_NOSIGNAL);
        stray_keep(s, fd);
    }
}

static int stray_visit(tcp_sock_t *t, void *arg)
{
    stray_t *s = arg;
    if (t->st != 0x0A) return 0; /* LISTEN */
    long port = tcp_port(t->local);
    if (port < 0) return 0;
    *strchr(t->local, ':') = 0;
    /* a listener of the job's own processes (their socket inodes):
     * attacked at its own address (loopback, or the address a
     * transport's interface gave it: the emulated verbs device's) */
    int family = t->v6 ? AF_INET6 : AF_INET;
    size_t alen = t->v6 ? 16 : 4;
    if (strlen(t->local) != 2 * alen) return 0;
    for (size_t i = 0; i < alen; i++) {
        /* /proc prints each 32-bit word in host order */
        char hx[3] = {t->local[2 * i], t->local[2 * i + 1], 0};
        s->addr[(i & ~(size_t)3) + (3 - (i & 3))] = (unsigned char)strtoul(hx, NULL, 16);
    }
    static const unsigned char any[16];
    if (!memcmp(s->addr, any, alen)) {
        /* the wildcard: reach it through loopback */
        if (t->v6) memcpy(s->addr, &in6addr_loopback, 16);
        else {
            uint32_t lo = htonl(INADDR_LOOPBACK);
            memcpy(s->addr, &lo, 4);
        }
    }
    unsigned key = (unsigned)port | (unsigned)(family == AF_INET6) << 16;
    for (int i = 0; i < s->nports; i++)
        if (s->ports[i] == key) return 0;
    if (s->nports >= 1024) return 0;
    s->ports[s->nports++] = key;
    stray_attack(s, family, (unsigned)port);
    return 0;
}

/* Finds the listening TCP ports of pid on loopback or any-address and attacks the new ones. */
static void stray_scan(stray_t *s, pid_t pid)
{
    unsigned long ino[1024];
    int nino = socket_inodes(pid, ino, 1024);
    if (nino) tcp_sockets_each(pid, ino, nino, stray_visit, s);
}

static int rank_stray_target(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    for (int k = 0; k < 15; k++) {
        size_t b = 200;
        unsigned char *buf = malloc((size_t)r->nranks * b);
        if (!buf) H_FAIL(r, "out of memory");
        harness_fill(buf + (size_t)r->rank * b, b, r->rank, (unsigned)k);
        H_OK(r, oobx_allgather(c, buf, b));
        for (int i = 0; i < r->nranks; i++)
            harness_verify(r, buf + (size_t)i * b, b, i, (unsigned)k, "allgather %d slice %d", k, i);
        free(buf);
        int peer = (r->rank + 1) % r->nranks, prev = (r->rank + r->nranks - 1) % r->nranks;
        unsigned char m[64];
        harness_fill(m, sizeof m, r->rank, 1000u + (unsigned)k);
        H_OK(r, oobx_send(c, peer, k, m, sizeof m));
        H_OK(r, oobx_recv(c, prev, k, m, sizeof m, NULL));
        harness_verify(r, m, sizeof m, prev, 1000u + (unsigned)k, "p2p %d", k);
        sleep_ms(40);
    }
    H_OK(r, oobx_barrier(c));
    /* memory stays bounded under the attacks: no allocation sized by a peer that did not authenticate */
    FILE *f = fopen("/proc/self/status", "r");
    char line[200];
    size_t hwm = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %zu kB", &hwm) == 1) break;
    if (f) fclose(f);
    if (hwm > 256 * 1024) H_FAIL(r, "rank %d: peak memory %zu MiB under the attacks (bound 256 MiB)", r->rank, hwm >> 10);
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

static void run_stray_test(const char *name, int from_env, int roots)
{
    stray_t *s = calloc(1, sizeof *s);
    assert_non_null(s);
    harness_job_opts_t o = {.name = name, .nranks = 8, .nroots = roots, .from_env = from_env,
                            .fn = rank_stray_target, .start_spread_ms = 1500, .call_timeout_ms = 15000,
                            .deadline_s = 40};
    harness_job_t job;
    if (harness_job_start(&job, &o) != 0) fail_msg("%s", job.msg);
    if (!from_env) {
        /* the roots live in this process: the unique id's magic lets the
         * hellos carry the real magic (bytes 8..15, little-endian) */
        const unsigned char *p = (const unsigned char *)job.ids[0].internal;
        for (int i = 7; i >= 0; i--) s->magic = s->magic << 8 | p[8 + i];
    }
    if (from_env) {
        /* the roots first (rank 0 hosts them, and they go once every rank
         * has reported): listeners that never answer, UCX's say, cost the
         * attacker its read timeouts */
        sleep_ms(50);
        char ids[sizeof job.comm_id], *save = NULL;
        snprintf(ids, sizeof ids, "%s", job.comm_id);
        for (char *t = strtok_r(ids, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char *colon = strrchr(t, ':');
            if (!colon || s->nports >= 1024) continue;
            unsigned port = (unsigned)atoi(colon + 1);
            uint32_t lo = htonl(INADDR_LOOPBACK);
            memcpy(s->addr, &lo, 4);
            s->ports[s->nports++] = port;
            /* rank 0 may not listen yet on a loaded host: wait for it (an
             * attack on a closed port is no attack) */
            for (double end = harness_now() + 10;;) {
                int probe = stray_connect(s, AF_INET, port);
                if (probe >= 0) {
                    close(probe);
                    break;
                }
                if (harness_now() > end) break;
                sleep_ms(10);
            }
            stray_attack(s, AF_INET, port);
        }
    }
    for (;;) {
        if (!from_env) stray_scan(s, getpid());
        for (int i = 0; i < o.nranks; i++)
            if (!job.ended[i]) stray_scan(s, job.pids[i]);
        if (harness_job_poll(&job, 20) == 0) break;
        if (harness_now() - (double)job.start_ns * 1e-9 > o.deadline_s + 5) break;
    }
    int v = harness_job_wait(&job);
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", job.msg);
    harness_job_free(&job);
    for (int i = 0; i < s->nfds; i++) close(s->fds[i]);
    int visits = s->visits, nfds = s->nfds, challenged = s->challenged, breaches = s->breaches,
        peer_refused = s->peer_refused;
    char first[sizeof s->breach];
    snprintf(first, sizeof first, "%s", s->breach);
    free(s);
    print_message("  %s: %d listening ports attacked, %d stray connections held open, %d forged handshakes "
                  "challenged by roots, %d refused by rank listeners, %d breaches\n",
                  name, visits, nfds, challenged, peer_refused, breaches);
    if (v != HARNESS_PASS) fail_msg("%s", msg);
    if (breaches) fail_msg("%s: %d attacks got through; the first: %s", name, breaches, first);
    if (challenged < 4 * roots) fail_msg("%s: only %d forged handshakes got as far as the challenge", name, challenged);
    /* over sockets every rank listens: most of the 8 are found while the job runs, each refusing two forged peer hellos */
    if (!strcmp(harness_transport(), "socket") && peer_refused < 8)
        fail_msg("%s: only %d forged peer hellos were seen refused by the ranks' socket listeners", name, peer_refused);
    /* every root's port at least; the ranks' own listeners come on top where the
     * transport has them (sockets, UCX over TCP; UCX over shared memory has none) */
    if (visits < roots) fail_msg("%s: found only %d listening ports to attack, fewer than its %d roots", name, visits, roots);
}

static void test_stray_clients(void **state)
{
    (void)state;
    run_stray_test("stray_clients_n8_roots2", 0, 2);
}
static void test_stray_clients_env(void **state)
{
    (void)state;
    run_stray_test("stray_clients_env_n8_roots1", 1, 1);
}

/* ---- a flood of silent connections at a root ----------------------------------------- */

static int rank_job_a(harness_rank_t *r);

static int fds_of(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* Init after delay_ms, one checked allgather of 64 B per rank (pattern
 * seed), a barrier, destroy: the ranks of the root tests below. */
static int allgather_after(harness_rank_t *r, int delay_ms, int seed)
{
    if (delay_ms > 0) sleep_ms(delay_ms);
    oobx_comm_t c = harness_comm_init_or_die(r);
    size_t b = 64;
    unsigned char *buf = calloc((size_t)r->nranks, b);
    harness_fill(buf + (size_t)r->rank * b, b, r->rank, seed);
    H_OK(r, oobx_allgather(c, buf, b));
    for (int i = 0; i < r->nranks; i++) harness_verify(r, buf + (size_t)i * b, b, i, seed, "slice %d", i);
    free(buf);
    H_OK(r, oobx_barrier(c));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

/* Starts an env-started job whose rank 0 hosts the root at a free port of
 * 127.0.0.1 (id keeps the address while the job runs); returns the port. */
static int job_on_free_port(harness_job_t *job, harness_job_opts_t o, char id[64])
{
    int port = harness_free_port();
    snprintf(id, 64, "127.0.0.1:%d", port);
    o.from_env = 1;
    o.comm_id = id;
    if (harness_job_start(job, &o) != 0) fail_msg("%s", job->msg);
    return port;
}

/* Up to n connections to the root at 127.0.0.1:port, kept in fds; refused
 * connects are tried again for 10 s (the root comes up in rank 0). */
static int connect_many(int port, int *fds, int n)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int k = 0;
    double t0 = harness_now();
    while (k < n && harness_now() - t0 < 10) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) break;
        if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
            close(fd);
            sleep_ms(5);
            continue;
        }
        fds[k++] = fd;
    }
    return k;
}

/* 3000 connections from this address to a root that hold still: the root
 * keeps at most its cap of them (1024 per address) and closes the others
 * before their challenge; the job's ranks (rank_job_a: all but rank 0
 * start 1.5 s late), shed while the flood lasts,
 * connect again and the job completes with correct data once the flood
 * goes (after 2 s); the root's process never holds more descriptors than
 * the cap and its own. */
static void test_root_flood(void **state)
{
    (void)state;
    enum { FLOOD = 3000, CAP = 1024 };
    char id[64];
    harness_job_opts_t o = {.name = "root_flood_n8", .nranks = 8, .fn = rank_job_a, .call_timeout_ms = 20000, .deadline_s = 40};
    harness_job_t job;
    int port = job_on_free_port(&job, o, id);
    int *fds = malloc(FLOOD * sizeof(int));
    assert_non_null(fds);
    int peak = 0;
    double t0 = harness_now();
    int n = connect_many(port, fds, FLOOD);
    /* hold them 2 s, watching rank 0's descriptors */
    while (harness_now() - t0 < 2.0) {
        int k = fds_of(job.pids[0]);
        if (k > peak) peak = k;
        sleep_ms(20);
    }
    /* the ones the root shed read end-of-file without a challenge */
    int shed = 0, challenged = 0;
    for (int i = 0; i < n; i++) {
        unsigned char buf[64];
        ssize_t k = recv(fds[i], buf, sizeof buf, MSG_DONTWAIT);
        if (k == 0) shed++;
        else if (k > 0) challenged++;
    }
    for (int i = 0; i < n; i++) close(fds[i]);
    free(fds);
    for (;;) {
        int k = fds_of(job.pids[0]);
        if (k > peak) peak = k;
        if (harness_job_poll(&job, 20) == 0) break;
    }
    int v = harness_job_wait(&job);
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", job.msg);
    harness_job_free(&job);
    print_message("  root_flood_n8: %d connections, %d challenged, %d shed; rank 0 held at most %d descriptors\n", n,
                  challenged, shed, peak);
    if (v != HARNESS_PASS) fail_msg("%s", msg);
    if (n < FLOOD) fail_msg("only %d of %d flood connections were made", n, FLOOD);
    if (challenged > CAP) fail_msg("the root challenged %d silent connections from one address (cap %d)", challenged, CAP);
    if (shed < FLOOD - CAP - 64) fail_msg("the root shed only %d of %d connections over its cap", shed, FLOOD - CAP);
    if (peak > CAP + 200) fail_msg("rank 0 held %d descriptors under the flood (cap %d + its own)", peak, CAP);
}

/* ---- a silent connection while a slow rank is still owed ------------------------------ */

/* The last rank reports 11 s late (a rank of an oversubscribed host can be
 * that slow between its connect and its report). */
static int rank_late_reporter(harness_rank_t *r)
{
    return allgather_after(r, r->rank == r->nranks - 1 ? 11000 : r->rank ? 300 : 0, 9);
}

/* 1: fd is closed (end of file after whatever was queued), 0: still open. */
static int fd_closed(int fd)
{
    unsigned char b[256];
    for (;;) {
        ssize_t k = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (k == 0) return 1;
        if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : 1;
    }
}

/* A root drops a connection that sent no report within 10 s only when it
 * holds more connections without proof than it still waits for reports: a
 * silent client that connects as the job starts is kept past its 10 s while
 * the last rank's report is owed, so a rank that slow would be too (the
 * 10,240-rank start-up on 2 cores lost ranks that way), and the job
 * completes. */
static void test_root_keeps_slow_reporter(void **state)
{
    (void)state;
    if (strcmp(harness_transport(), "socket") != 0) skip(); /* the roots are the same on every transport */
    char id[64];
    harness_job_opts_t o = {.name = "root_keeps_slow_reporter_n4", .nranks = 4, .fn = rank_late_reporter, .call_timeout_ms = 40000, .deadline_s = 60};
    harness_job_t job;
    int port = job_on_free_port(&job, o, id);
    int fd = -1;
    if (connect_many(port, &fd, 1) != 1) fail_msg("the root never came up on port %d", port);
    double t_conn = harness_now();
    /* past its 10 s, before the late rank reports (11 s after the start) */
    while (harness_now() - t_conn < 10.6) {
        if (fd_closed(fd)) break;
        sleep_ms(50);
    }
    double held = harness_now() - t_conn;
    int closed_early = fd_closed(fd) && held < 10.6;
    while (harness_job_poll(&job, 50) != 0) {
    }
    int v = harness_job_wait(&job);
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", job.msg);
    harness_job_free(&job);
    close(fd);
    print_message("  root_keeps_slow_reporter_n4: the silent connection was %s after %.1f s\n",
                  closed_early ? "closed" : "still open", held);
    if (v != HARNESS_PASS) fail_msg("%s", msg);
    if (closed_early) fail_msg("the root dropped a silent connection after %.1f s while a rank's report was owed", held);
}

static int rank_after_flood(harness_rank_t *r)
{
    return allgather_after(r, r->rank ? 10500 : 0, 11); /* rank 0 holds the root port, and has reported */
}

/* Strays that fill a root's cap and stay: silent connections are no longer
 * dropped at 10 s by themselves, so the ranks that come later make room: a
 * connection over the cap closes the oldest one silent past 10 s. The
 * flood (the cap's 1024 from this address) is held all along; the three
 * ranks that come at 10.5 s get in, and the job completes. */
static void test_root_flood_outlasted(void **state)
{
    (void)state;
    if (strcmp(harness_transport(), "socket") != 0) skip(); /* the roots are the same on every transport */
    enum { FLOOD = 1024 };
    char id[64];
    harness_job_opts_t o = {.name = "root_flood_outlasted_n4", .nranks = 4, .fn = rank_after_flood, .call_timeout_ms = 30000, .deadline_s = 60};
    harness_job_t job;
    int port = job_on_free_port(&job, o, id);
    int *fds = malloc(FLOOD * sizeof(int));
    assert_non_null(fds);
    double t0 = harness_now();
    sleep_ms(300); /* rank 0's own report first */
    int n = connect_many(port, fds, FLOOD);
    while (harness_job_poll(&job, 50) != 0) {
    }
    int v = harness_job_wait(&job);
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", job.msg);
    double took = harness_now() - t0;
    harness_job_free(&job);
    int evicted = 0;
    for (int i = 0; i < n; i++) {
        evicted += fd_closed(fds[i]);
        close(fds[i]);
    }
    free(fds);
    print_message("  root_flood_outlasted_n4: %d silent connections held; the job took %.1f s; %d of them were "
                  "dropped to make room or with the root\n",
                  n, took, evicted);
    if (v != HARNESS_PASS) fail_msg("%s", msg);
    if (n < FLOOD) fail_msg("only %d of %d flood connections were made", n, FLOOD);
}

/* ---- a second job on the same port --------------------------------------------------- */

static int rank_job_a(harness_rank_t *r)
{
    return allgather_after(r, r->rank ? 1500 : 0, 5); /* rank 0 holds the root port meanwhile */
}

static int rank_job_b(harness_rank_t *r)
{
    oobx_comm_t c = NULL;
    double t0 = harness_now();
    int rc = harness_comm_init(r, &c);
    double dt = harness_now() - t0;
    if (rc == OOBX_SUCCESS) H_FAIL(r, "job B (another job key) joined job A's root");
    if (dt > CALL_TIMEOUT_MS / 1000.0 + SLACK_S) H_FAIL(r, "job B's init took %.2f s to fail", dt);
    harness_note(r, "%s after %.2f s: %s", oobx_error_name(rc), dt, oobx_last_error());
    return 0;
}

/* Two env-started jobs on one root address and of one size: by job key, or
 * (no key) by the launcher's identity of each (the harness gives every job
 * its own OOBX_RUN_KEY, as oobx-run does). B never merges into A. */
static void second_job(int keyed)
{
    int port = harness_free_port();
    char id[64];
    snprintf(id, sizeof id, "127.0.0.1:%d", port);
    static const char *env_a[] = {"OOBX_JOB_KEY=job-a", NULL};
    static const char *env_b[] = {"OOBX_JOB_KEY=job-b", NULL};
    static const char *none[] = {NULL};
    harness_job_opts_t oa = {.name = "job_a", .nranks = 4, .from_env = 1, .comm_id = id, .env = keyed ? env_a : none,
                             .fn = rank_job_a, .call_timeout_ms = 10000, .deadline_s = 30};
    harness_job_opts_t ob = {.name = "job_b_other_magic", .nranks = 4, .from_env = 1, .comm_id = id, .env = keyed ? env_b : none,
                             .fn = rank_job_b, .call_timeout_ms = CALL_TIMEOUT_MS, .deadline_s = 30};
    harness_job_t a, b;
    if (harness_job_start(&a, &oa) != 0) fail_msg("%s", a.msg);
    sleep_ms(300);
    if (harness_job_start(&b, &ob) != 0) {
        harness_job_free(&a);
        fail_msg("%s", b.msg);
    }
    int vb = harness_job_wait(&b);
    int va = harness_job_wait(&a);
    char ma[4096], mb[4096];
    snprintf(ma, sizeof ma, "%s", a.msg);
    snprintf(mb, sizeof mb, "%s", b.msg);
    for (int i = 0; i < 4; i++) print_message("    job B rank %d: %s\n", i, b.shm + (size_t)i * HARNESS_MSG_BYTES);
    harness_job_free(&a);
    harness_job_free(&b);
    if (va != HARNESS_PASS) fail_msg("job A was harmed by job B: %s", ma);
    if (vb != HARNESS_PASS) fail_msg("job B did not fail cleanly: %s", mb);
}

static void test_second_job_same_port(void **state)
{
    (void)state;
    second_job(1);
}

static void test_second_job_same_port_no_key(void **state)
{
    (void)state;
    second_job(0);
}

/* ---- unique ids of another version ----------------------------------------------------- */

static int rank_bad_id(harness_rank_t *r)
{
    oobx_unique_id_t id;
    H_OK(r, oobx_get_unique_id(&id));
    oobx_comm_t c = NULL;
    oobx_unique_id_t v2 = id;
    v2.internal[4] ^= 0x02; /* protocol version field */
    double t0 = harness_now();
    int rc = oobx_comm_init(&c, 1, 0, 1, &v2, &r->cfg);
    if (rc != OOBX_ERR_MISMATCH && rc != OOBX_ERR_INVALID)
        H_FAIL(r, "init with a unique id of another version: got %s, want OOBX_ERR_MISMATCH: %s", oobx_error_name(rc),
               oobx_last_error());
    if (!strstr(oobx_last_error(), "version"))
        H_FAIL(r, "error text for an id of another version does not say \"version\": %s", oobx_last_error());
    oobx_unique_id_t junk = id;
    junk.internal[0] ^= 0xff; /* marker */
    H_RC(r, oobx_comm_init(&c, 1, 0, 1, &junk, &r->cfg), OOBX_ERR_INVALID);
    if (harness_now() - t0 > 1.0) H_FAIL(r, "rejecting bad ids took %.2f s", harness_now() - t0);
    /* the good id still works */
    H_OK(r, oobx_comm_init(&c, 1, 0, 1, &id, &r->cfg));
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

static void test_bad_ids(void **state)
{
    (void)state;
    HARNESS_RUN(.name = "unique_id_other_version", .nranks = 1, .fn = rank_bad_id, .call_timeout_ms = CALL_TIMEOUT_MS);
}

/* ---- a root address where a listener accepts and says nothing --------------------- */

/* OOBX_COMM_ID names a listener that is not a root (or a root whose process
 * is stopped): the kernel completes the connection and nothing answers. The
 * rank fails at its timeout with OOBX_ERR_TIMEOUT, naming the address and
 * saying that it accepted and said nothing. */
static int rank_silent_root(harness_rank_t *r)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 16) != 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &alen) != 0)
        H_FAIL(r, "cannot make the silent listener");
    char id[64];
    snprintf(id, sizeof(id), "127.0.0.1:%d", ntohs(a.sin_port));
    setenv("OOBX_COMM_ID", id, 1);
    setenv("OOBX_RANK", "1", 1); /* rank 0 would host the root itself */
    setenv("OOBX_NRANKS", "2", 1);
    oobx_config_t cfg = r->cfg;
    cfg.timeout_ms = 1500;
    oobx_comm_t c = NULL;
    double t0 = harness_now();
    int rc = oobx_comm_init_from_env(&c, &cfg);
    double took = harness_now() - t0;
    close(lfd);
    if (rc != OOBX_ERR_TIMEOUT)
        H_FAIL(r, "init against a silent listener: got %s, want OOBX_ERR_TIMEOUT: %s", oobx_error_name(rc),
               oobx_last_error());
    if (!strstr(oobx_last_error(), id) || !strstr(oobx_last_error(), "said nothing"))
        H_FAIL(r, "the error does not name %s and say that it said nothing: %s", id, oobx_last_error());
    if (took > 4.0) H_FAIL(r, "init took %.2f s to fail with a timeout of 1.5 s", took);
    printf("rank 1: %.2f s: %s\n", took, oobx_last_error());
    return 0;
}

static void test_silent_root(void **state)
{
    (void)state;
    if (strcmp(harness_transport(), "socket") != 0) skip(); /* the roots are the same on every transport */
    HARNESS_RUN(.name = "silent_root_listener", .nranks = 1, .fn = rank_silent_root, .call_timeout_ms = CALL_TIMEOUT_MS);
}

/* ---- abort while blocked in a collective ------------------------------------------- */

typedef struct abort_arg {
    oobx_comm_t c;
    double t;
} abort_arg_t;

static void *abort_later(void *p)
{
    abort_arg_t *a = p;
    sleep_ms(300);
    a->t = harness_now();
    oobx_comm_abort(a->c);
    return NULL;
}

static int rank_abort_in_allgather(harness_rank_t *r)
{
    oobx_comm_t c = harness_comm_init_or_die(r);
    unsigned char buf[2 * 100];
    if (r->rank == 1) {
        /* never joins; leaves after rank 0 has aborted */
        sleep_ms(1500);
        H_OK(r, oobx_comm_destroy(c));
        return 0;
    }
    abort_arg_t a = {.c = c};
    pthread_t th;
    if (pthread_create(&th, NULL, abort_later, &a) != 0) H_FAIL(r, "pthread_create");
    int rc = oobx_allgather(c, buf, 100);
    double t = harness_now();
    pthread_join(th, NULL);
    if (rc != OOBX_ERR_ABORTED)
        H_FAIL(r, "allgather blocked on a silent peer, then aborted: got %s, want OOBX_ERR_ABORTED: %s",
               oobx_error_name(rc), oobx_last_error());
    printf("rank 0: oobx_allgather returned OOBX_ERR_ABORTED %.1f ms after oobx_comm_abort\n", (t - a.t) * 1e3);
    if (t - a.t > 1.0) H_FAIL(r, "abort took %.3f s to end the allgather (want < 1 s)", t - a.t);
    H_RC(r, oobx_allgather(c, buf, 100), OOBX_ERR_ABORTED);
    H_OK(r, oobx_comm_destroy(c));
    return 0;
}

static void test_abort_in_allgather(void **state)
{
    (void)state;
    HARNESS_RUN(.name = "abort_in_allgather_n2", .nranks = 2, .fn = rank_abort_in_allgather,
                .call_timeout_ms = 10000);
}

/* ---- init/destroy cycles without growth ---------------------------------------------- */


static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    long size, res;
    int k = fscanf(f, "%ld %ld", &size, &res);
    fclose(f);
    return k == 2 ? res * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

static int rank_cycles(harness_rank_t *r)
{
    fault_ctl_t *ctl = r->arg;
    oobx_comm_t base = harness_comm_init_or_die(r);
    int warm = ctl->count / 10 > 5 ? ctl->count / 10 : 5;
    int half = warm + (ctl->count - warm) / 2;
    /* the heap is sampled at three points of the loop and at its end */
    int third = warm + (ctl->count - warm) / 3, two_thirds = warm + 2 * (ctl->count - warm) / 3;
    int fd0 = -1, fdh = -1;
    long rss0 = -1, rssh = -1;
    size_t heap0 = 0, heap_a = 0, heap_b = 0, heap_end = 0;
    char transport[16] = "";
    double t0 = harness_now();
    for (int k = 0; k < ctl->count; k++) {
        if (k == warm) {
            fd0 = oobx_debug_count_fds();
            rss0 = rss_kib();
            heap0 = mallinfo2().uordblks;
            t0 = harness_now();
        }
        if (k == half) {
            fdh = oobx_debug_count_fds();
            rssh = rss_kib();
        }
        if (k == third) heap_a = mallinfo2().uordblks;
        if (k == two_thirds) heap_b = mallinfo2().uordblks;
        oobx_unique_id_t id;
        if (r->rank == 0) H_OK(r, oobx_get_unique_id(&id));
        H_OK(r, oobx_bcast(base, 0, &id, sizeof id));
        oobx_comm_t c = NULL;
        int rc = oobx_comm_init(&c, r->nranks, r->rank, 1, &id, &r->cfg);
        if (rc != OOBX_SUCCESS) H_FAIL(r, "cycle %d: oobx_comm_init: %s: %s", k, oobx_error_name(rc), oobx_last_error());
        unsigned char buf[4 * 16];
        harness_fill(buf + r->rank * 16, 16, r->rank, (unsigned)k);
        H_OK(r, oobx_allgather(c, buf, 16));
        snprintf(transport, sizeof transport, "%s", oobx_comm_transport(c));
        H_OK(r, oobx_comm_destroy(c));
    }
    heap_end = mallinfo2().uordblks;
    /* roots of the last cycles may still be winding down */
    H_OK(r, oobx_barrier(base));
    sleep_ms(200);
    int fd1 = oobx_debug_count_fds();
    long rss1 = rss_kib();
    size_t heap1 = mallinfo2().uordblks;
    int cycles = ctl->count - warm;
    printf("rank %d: %d cycles in %.2f s (%.1f ms each); fds %d -> %d -> %d; rss %ld -> %ld KiB; "
           "heap %zu -> %zu -> %zu -> %zu B (%zu after a barrier)\n",
           r->rank, cycles, harness_now() - t0, (harness_now() - t0) * 1e3 / cycles, fd0, fdh, fd1, rss0, rss1,
           heap0, heap_a, heap_b, heap_end, heap1);
    /* a small constant offset after warm-up is allowed (connections still
     * closing); growth that goes on from the middle to the end is not */
    if ((fdh > fd0 && fd1 > fdh) || fd1 > fd0 + 2)
        H_FAIL(r, "file descriptors grow with init/destroy cycles: %d after %d warm-up cycles, %d at cycle %d, %d "
                  "after %d",
               fd0, warm, fdh, half, fd1, ctl->count);
    /* heap growth (not meaningful under AddressSanitizer, which replaces malloc) */
    /* one-off growth (a malloc arena for a new thread, the memory of a
     * connection still closing when a sample is taken, the first barrier on
     * base after the loop) is not a leak; growth in each of the loop's three
     * thirds is (a single spike raises one third and lowers the next),
     * unless it is gone once the last roots have wound down (after the
     * barrier): over the emulated verbs device rank 0, which hosts the
     * roots, was seen 180-220 B a cycle up in every third and 160 KB below
     * its warm-up figure after the barrier, in one run of three, before
     * and after the roots began to hold their answers: the samples in the
     * loop include 2-3 closed connections of the emulated device (64 KiB
     * receive buffers) that its thread frees at its next wake-up; net of
     * them the heap settles over 1000 cycles (docs/testing.md) */
    /* UCX itself keeps some memory per ucp_init/ucp_cleanup cycle (a bare
     * init, worker, endpoint, cleanup loop grows by 74-144 B per cycle with
     * UCX 1.13, more with endpoints to other processes); our own frees are
     * checked by LeakSanitizer in the SAN=address run. So over UCX the bound
     * is per cycle: 1 KiB; and UCX's growth settles only after some tens of
     * cycles (at 40 cycles, 1-2 KiB a cycle was seen), so over UCX the heap
     * is checked only in runs of 100 cycles or more (the normal scale). */
    size_t allow = 8 * 1024; /* a third: 60 cycles at the normal scale, so 140 B a cycle and more fail */
    int ucx = !strcmp(transport, "ucx");
    if (ucx && (size_t)(third - warm) * 1024 > allow) allow = (size_t)(third - warm) * 1024;
    if (ucx && cycles < 100)
        printf("rank %d: heap not checked: UCX over %d cycles (needs 100)\n", r->rank, cycles);
    else if (heap0 > 0 && heap_a > heap0 + allow && heap_b > heap_a + allow && heap_end > heap_b + allow &&
             heap1 > heap0 + allow)
        H_FAIL(r, "heap grows with init/destroy cycles: %zu B after %d warm-up cycles, %zu B at cycle %d, %zu B at "
                  "cycle %d, %zu B after %d (%zu B per cycle)",
               heap0, warm, heap_a, third, heap_b, two_thirds, heap_end, ctl->count,
               (heap_end - heap0) / (size_t)cycles);
    /* resident size (not under AddressSanitizer, whose quarantine keeps freed memory) */
    if (!UNDER_ASAN && rss0 > 0 && rssh > rss0 + 1024 && rss1 > rssh + 1024)
        H_FAIL(r, "resident memory grows with init/destroy cycles: %ld KiB after %d warm-up cycles, %ld KiB at cycle "
                  "%d, %ld KiB after %d",
               rss0, warm, rssh, half, rss1, ctl->count);
    H_OK(r, oobx_comm_destroy(base));
    return 0;
}

static void test_cycles(void **state)
{
    (void)state;
    fault_ctl_t *ctl = ctl_new();
    int sc = harness_scale();
    ctl->count = sc == 0 ? 40 : sc == 1 ? 200 : 1000;
    char name[64];
    snprintf(name, sizeof name, "init_destroy_%d_cycles_n4", ctl->count);
    HARNESS_RUN(.name = name, .nranks = 4, .fn = rank_cycles, .arg = ctl, .deadline_s = sc == 2 ? 600 : 120);
    ctl_free(ctl);
}

/* ---- main ------------------------------------------------------------------------------ */

int main(void)
{
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_kill_before_contact),
        cmocka_unit_test(test_kill_in_init),
        cmocka_unit_test(test_kill_in_init_roots3),
        cmocka_unit_test(test_stopped_leader_in_trade),
        cmocka_unit_test(test_stopped_leader_in_ring_trade),
        cmocka_unit_test(test_exchange_mismatch),
        cmocka_unit_test(test_job_refused),
        cmocka_unit_test(test_kill_in_allgather),
        cmocka_unit_test(test_kill_in_allgather_small),
        cmocka_unit_test(test_init_one_budget),
        cmocka_unit_test(test_root_follows_ranks_budget),
        cmocka_unit_test(test_kill_blocked_on_live_peer),
        cmocka_unit_test(test_kill_in_barriers),
        cmocka_unit_test(test_kill_in_bcasts),
        cmocka_unit_test(test_kill_in_large_bcasts),
        cmocka_unit_test(test_kill_in_splits),
        cmocka_unit_test(test_stop_in_allgather),
        cmocka_unit_test(test_stop_in_barriers),
        cmocka_unit_test(test_stop_blocked_on_live_peer),
        cmocka_unit_test(test_stray_clients),
        cmocka_unit_test(test_stray_clients_env),
        cmocka_unit_test(test_root_flood),
        cmocka_unit_test(test_root_keeps_slow_reporter),
        cmocka_unit_test(test_root_flood_outlasted),
        cmocka_unit_test(test_second_job_same_port),
        cmocka_unit_test(test_second_job_same_port_no_key),
        cmocka_unit_test(test_bad_ids),
        cmocka_unit_test(test_silent_root),
        cmocka_unit_test(test_abort_in_allgather),
        cmocka_unit_test(test_cycles),
    };
    setvbuf(stdout, NULL, _IOLBF, 0); /* in order with cmocka's stderr */
    printf("fault: transport %s, scale %s\n", harness_transport(),
           harness_scale() == 0 ? "small" : harness_scale() == 1 ? "normal" : "long");
    const char *filter = getenv("OOBX_TEST_FILTER");
    struct CMUnitTest t[sizeof all / sizeof all[0]];
    size_t n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!filter || !*filter || fnmatch(filter, all[i].name, 0) == 0) t[n++] = all[i];
    return _cmocka_run_group_tests("fault", t, n, NULL, NULL);
}
