/*
 * Multi-rank test harness: runs a job of N ranks as forked processes of the
 * test program, each calling one rank function, under a deadline.
 *
 * The parent starts the roots (oobx_get_unique_id, root threads in the parent
 * serve the children) or, for the environment path, sets OOBX_COMM_ID to free
 * loopback ports that the first rank of each block will host. A rank returns
 * 0 (pass), HARNESS_SKIP (transport not usable here) or anything else (fail);
 * the checks below print both values and end the rank at once. Children
 * never return into the test framework: they always _exit().
 */
#ifndef OOBX_TESTS_HARNESS_H
#define OOBX_TESTS_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "oobx.h"

#define HARNESS_SKIP 77
#define HARNESS_MSG_BYTES 512

enum { HARNESS_PASS = 0, HARNESS_FAIL = 1, HARNESS_SKIPPED = 2 };

/* What a rank sees. */
typedef struct harness_rank {
    int rank;
    int nranks;
    int nroots;
    const oobx_unique_id_t *ids; /* nroots ids; NULL when from_env */
    int from_env;
    oobx_config_t cfg;           /* transport (OOBX_TRANSPORT) and call timeout */
    const char *transport;       /* requested transport name, "socket" by default */
    void *arg;                   /* the job's argument (memory of the parent, copied by fork) */
    char *msg;                   /* this rank's message slot, shared with the parent */
} harness_rank_t;

typedef int (*harness_fn)(harness_rank_t *r);

typedef struct harness_job_opts {
    const char *name;       /* for messages */
    int nranks;
    int nroots;             /* 0 means 1 */
    int from_env;           /* ranks call oobx_comm_init_from_env */
    int deadline_s;         /* whole job; 0: harness_default_deadline() */
    int call_timeout_ms;    /* cfg.timeout_ms of each rank; 0: 20000 */
    int start_spread_ms;    /* ranks start a random 0..spread ms late (rank 0 at once, the last rank at spread) */
    int keep_going;         /* do not kill the job when a rank fails (fault tests) */
    const char *const *env; /* NULL-terminated "NAME=value" list set in every rank */
    const char *comm_id;    /* from_env jobs: this OOBX_COMM_ID instead of free ports */
    int skip_is_failure;    /* harness_run_test: the transport was usable before, so a skip fails */
    harness_fn fn;
    void *arg;
} harness_job_opts_t;

typedef struct harness_job {
    harness_job_opts_t o;
    int nroots;
    oobx_unique_id_t *ids;
    char comm_id[1024];     /* OOBX_COMM_ID of from_env jobs */
    char run_key[40];       /* OOBX_RUN_KEY of from_env jobs: the launcher's job identity, random per job */
    pid_t *pids;
    int *pidfds;
    int *status;            /* wait status once ended */
    int *ended;
    int *order;             /* ranks in the order they ended */
    int *killed_by_test;    /* harness_job_kill was used on it */
    int nended;
    char *shm;              /* nranks message slots of HARNESS_MSG_BYTES */
    uint64_t start_ns;
    double seconds;         /* wall time of the job, set by harness_job_wait */
    int timed_out;
    char msg[4096];         /* the verdict, for failures and skips */
} harness_job_t;

/* Test scale from OOBX_TEST_SCALE: 0 small (sanitizers), 1 normal, 2 long. */
int harness_scale(void);
/* Transport under test: OOBX_TRANSPORT, else "socket". */
const char *harness_transport(void);
int harness_default_deadline(void);

/* Starts the roots and forks the ranks. 0, or -1 with job->msg set. */
int harness_job_start(harness_job_t *job, const harness_job_opts_t *o);
/* Sleeps until some rank ends or timeout_ms; returns how many still run. */
int harness_job_poll(harness_job_t *job, int timeout_ms);
/* Waits until rank has ended, at most timeout_ms. 1 ended, 0 still running. */
int harness_job_wait_rank(harness_job_t *job, int rank, int timeout_ms);
/* Sends sig to one rank; a rank killed this way does not fail the job. */
void harness_job_kill(harness_job_t *job, int rank, int sig);
/* Waits for every rank until the deadline, kills the stuck ones and returns
 * HARNESS_PASS, HARNESS_FAIL or HARNESS_SKIPPED with job->msg set. */
int harness_job_wait(harness_job_t *job);
void harness_job_free(harness_job_t *job);
/* Describes how rank ended ("exited with status 1", "killed by signal 9 (Killed)"). */
void harness_describe_status(int status, char *buf, size_t len);

/* start + wait + free. Returns HARNESS_*; msg (may be NULL) gets the verdict. */
int harness_run(const harness_job_opts_t *o, char *msg, size_t len);

/* For cmocka tests: runs the job; fails the test with the verdict, or skips it
 * with the reason printed. */
void harness_run_test(const harness_job_opts_t *o);
#define HARNESS_RUN(...)                                  \
    do {                                                  \
        harness_job_opts_t harness_o_ = {__VA_ARGS__};    \
        harness_run_test(&harness_o_);                    \
    } while (0)

/* ---- inside a rank ------------------------------------------------------ */

/* oobx_comm_init (or _from_env) as the job says, with r->cfg; checks the
 * transport. Returns the oobx status; on failure the message is in r->msg. */
int harness_comm_init(harness_rank_t *r, oobx_comm_t *comm);
/* Same, ends the rank on failure (HARNESS_SKIP when the transport is unavailable). */
oobx_comm_t harness_comm_init_or_die(harness_rank_t *r);

/* Records and prints "rank R: message (file:line)" and ends the rank with 1. */
void harness_fail(harness_rank_t *r, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), noreturn));
/* Records the reason and ends the rank with HARNESS_SKIP. */
void harness_skip(harness_rank_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* Records a message without ending the rank (the last one is kept). */
void harness_note(harness_rank_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define H_FAIL(r, ...) harness_fail((r), __FILE__, __LINE__, __VA_ARGS__)
#define H_CHECK(r, cond, ...)                                    \
    do {                                                         \
        if (!(cond)) harness_fail((r), __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
/* An oobx call that must succeed. */
#define H_OK(r, call)                                                                     \
    do {                                                                                  \
        int h_rc_ = (call);                                                               \
        if (h_rc_ != OOBX_SUCCESS)                                                        \
            harness_fail((r), __FILE__, __LINE__, "%s: %s (%s): %s", #call,               \
                         oobx_error_name(h_rc_), oobx_strerror(h_rc_), oobx_last_error()); \
    } while (0)
/* An oobx call that must return want. */
#define H_RC(r, call, want)                                                                  \
    do {                                                                                     \
        int h_rc_ = (call), h_want_ = (want);                                                \
        if (h_rc_ != h_want_)                                                                \
            harness_fail((r), __FILE__, __LINE__, "%s: got %s, want %s (last error: %s)", #call, \
                         oobx_error_name(h_rc_), oobx_error_name(h_want_), oobx_last_error()); \
    } while (0)
#define H_EQ(r, got, want, what)                                                              \
    do {                                                                                      \
        long long h_g_ = (long long)(got), h_w_ = (long long)(want);                          \
        if (h_g_ != h_w_)                                                                     \
            harness_fail((r), __FILE__, __LINE__, "%s: got %lld, want %lld", (what), h_g_, h_w_); \
    } while (0)

/* Test data: byte i of the slice written by rank src with salt. */
static inline unsigned char harness_byte(int src, uint64_t i, unsigned salt)
{
    uint64_t x = (uint64_t)src * 0x9E3779B97F4A7C15ull + i * 131u + salt * 7919u;
    return (unsigned char)((x >> 7) ^ (x >> 29) ^ (x >> 3) ^ 0x35);
}
void harness_fill(void *buf, size_t bytes, int src, unsigned salt);
/* Checks buf against harness_fill(src, salt); on mismatch fails the rank with
 * "rank R: <what> byte B: got 0xGG, want 0xWW". */
void harness_verify(harness_rank_t *r, const void *buf, size_t bytes, int src, unsigned salt,
                    const char *what_fmt, ...) __attribute__((format(printf, 6, 7)));

double harness_now(void); /* seconds, monotonic */
/* A free TCP port on 127.0.0.1 (bound and released). */
int harness_free_port(void);
/* First rank of root block i, as the multi-root start splits ranks. */
int harness_block_first(int i, int nranks, int nroots);

#endif
