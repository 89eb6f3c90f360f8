/* Unit tests of the multi-root block formulas (src/root.c) against brute
 * force, of the unique id encoding, of a root's room for descriptors, and of
 * the origin a root's refusal names (docs/protocol.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <arpa/inet.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "oobx.h"
#include "root.h"
#include "util.h"

/* The blocks built one rank at a time: the first nranks % nroots roots serve
 * nranks / nroots + 1 ranks, the others nranks / nroots, in rank order. */
static void brute_blocks(int nranks, int nroots, int *first, int *count, int *owner)
{
    int r = 0;
    for (int i = 0; i < nroots; i++) {
        first[i] = r;
        count[i] = nranks / nroots + (i < nranks % nroots ? 1 : 0);
        for (int k = 0; k < count[i]; k++) owner[r++] = i;
    }
}

static void test_block_formulas_brute_force(void **state)
{
    (void)state;
    enum { N = 300 };
    int first[N], count[N], owner[N];
    long checked = 0;
    for (int nranks = 1; nranks <= N; nranks++) {
        for (int nroots = 1; nroots <= nranks; nroots++) {
            brute_blocks(nranks, nroots, first, count, owner);
            for (int i = 0; i < nroots; i++) {
                int f = oobx__root_first_rank(i, nranks, nroots), c = oobx__root_nranks(i, nranks, nroots);
                if (f != first[i] || c != count[i])
                    fail_msg("%d ranks, %d roots, root %d: first rank %d (want %d), %d ranks (want %d)", nranks,
                             nroots, i, f, first[i], c, count[i]);
            }
            for (int r = 0; r < nranks; r++) {
                int o = oobx__root_of_rank(r, nranks, nroots);
                if (o != owner[r])
                    fail_msg("%d ranks, %d roots: rank %d belongs to root %d, want %d", nranks, nroots, r, o,
                             owner[r]);
                int l = oobx__root_local_id(r, o, nranks, nroots);
                if (l != r - first[o])
                    fail_msg("%d ranks, %d roots: rank %d is local id %d of root %d, want %d", nranks, nroots, r, l, o,
                             r - first[o]);
                checked++;
            }
        }
    }
    print_message("  %ld (rank, nroots, nranks) triples checked\n", checked);
}

/* Blocks tile the ranks exactly: contiguous, non-empty, in order. */
static void test_blocks_tile(void **state)
{
    (void)state;
    static const int sizes[] = {1, 2, 3, 7, 64, 1000, 4097, 10000, 65536, 100003};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int nranks = sizes[k];
        static const int roots[] = {1, 2, 3, 7, 16, 63, 64, 65, 128, 1000};
        for (size_t j = 0; j < sizeof roots / sizeof roots[0]; j++) {
            int nroots = roots[j];
            if (nroots > nranks) continue;
            int next = 0;
            for (int i = 0; i < nroots; i++) {
                int f = oobx__root_first_rank(i, nranks, nroots), c = oobx__root_nranks(i, nranks, nroots);
                if (f != next || c < 1)
                    fail_msg("%d ranks, %d roots: root %d starts at %d (want %d) with %d ranks", nranks, nroots, i, f,
                             next, c);
                if (oobx__root_of_rank(f, nranks, nroots) != i || oobx__root_of_rank(f + c - 1, nranks, nroots) != i)
                    fail_msg("%d ranks, %d roots: the ends of block %d map elsewhere", nranks, nroots, i);
                next = f + c;
            }
            assert_int_equal(next, nranks);
        }
    }
}

static void test_unique_id_round_trip(void **state)
{
    (void)state;
    root_handle_t h, back;
    memset(&h, 0, sizeof h);
    h.magic = 0xfedcba9876543210ull;
    h.addr.sin.sin_family = AF_INET;
    h.addr.sin.sin_port = htons(29500);
    h.addr.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    oobx_unique_id_t id;
    oobx__root_handle_encode(&h, &id);
    char why[256] = "";
    assert_int_equal(oobx__root_handle_decode(&id, &back, why, sizeof why), 0);
    assert_true(back.magic == h.magic);
    char a[128], b[128];
    oobx__sock_addr_format(&h.addr, a, sizeof a);
    oobx__sock_addr_format(&back.addr, b, sizeof b);
    assert_string_equal(a, b);

    memset(&h, 0, sizeof h);
    h.magic = 7;
    h.addr.sin6.sin6_family = AF_INET6;
    h.addr.sin6.sin6_port = htons(1234);
    h.addr.sin6.sin6_addr = in6addr_loopback;
    oobx__root_handle_encode(&h, &id);
    assert_int_equal(oobx__root_handle_decode(&id, &back, why, sizeof why), 0);
    oobx__sock_addr_format(&h.addr, a, sizeof a);
    oobx__sock_addr_format(&back.addr, b, sizeof b);
    assert_string_equal(a, b);
}

static void test_unique_id_rejects(void **state)
{
    (void)state;
    oobx_unique_id_t id;
    root_handle_t h;
    char why[256];
    memset(&id, 0, sizeof id);
    why[0] = 0;
    assert_int_equal(oobx__root_handle_decode(&id, &h, why, sizeof why), OOBX_ERR_INVALID);
    assert_non_null(strstr(why, "zero"));
    memset(&id, 0x41, sizeof id);
    why[0] = 0;
    assert_int_equal(oobx__root_handle_decode(&id, &h, why, sizeof why), OOBX_ERR_INVALID);
    assert_true(strlen(why) > 0);
    /* a good id of another protocol version */
    root_handle_t g;
    memset(&g, 0, sizeof g);
    g.magic = 1;
    g.addr.sin.sin_family = AF_INET;
    g.addr.sin.sin_port = htons(1);
    g.addr.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    oobx__root_handle_encode(&g, &id);
    id.internal[4] ^= 3;
    why[0] = 0;
    assert_int_equal(oobx__root_handle_decode(&id, &h, why, sizeof why), OOBX_ERR_MISMATCH);
    assert_non_null(strstr(why, "version"));
    /* an unknown address family */
    oobx__root_handle_encode(&g, &id);
    id.internal[16] = 99;
    id.internal[17] = 0;
    why[0] = 0;
    assert_int_not_equal(oobx__root_handle_decode(&id, &h, why, sizeof why), 0);
    assert_true(strlen(why) > 0);
}

/* The kernel's size of this process's descriptor table (/proc/self/status FDSize), or -1. */
static long fd_table_size(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "FDSize: %ld", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

/* A root grows its process's descriptor table before its thread starts
 * (sock.h: each growth in a threaded process waits for an RCU grace period,
 * which held a root's accept of a 64-rank burst up for 12-42 ms). In a fresh
 * child: the table is small, then after oobx_get_unique_id (which starts a
 * root) it holds min(open-file limit, 65536). */
static void test_root_reserves_descriptors(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        long before = fd_table_size();
        oobx_unique_id_t id;
        if (oobx_get_unique_id(&id) != OOBX_SUCCESS) _exit(2);
        long after = fd_table_size();
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        long want = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 65536 ? 65536 : (long)rl.rlim_cur;
        fprintf(stderr, "  descriptor table %ld before the root, %ld after (limit %ld)\n", before, after, want);
        _exit(before >= 0 && before < want && after >= want ? 0 : 1);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- the origin of a refusal ---- */

typedef struct origin_client {
    int rank, nranks, nroots;
    const root_handle_t *roots;
    const oobx_settings_t *s;
    double start_s;                /* after this many seconds */
    int timeout_ms;                /* 0: 20 s */
    volatile uint32_t abort_flag;  /* set: the rank gives up (closes without a word) */
    int rc, origin;
    char err[1024];
    pthread_t th;
} origin_client_t;

static void *origin_client_main(void *arg)
{
    origin_client_t *o = arg;
    if (o->start_s > 0) usleep((useconds_t)(o->start_s * 1e6));
    unsigned char blob[16] = {(unsigned char)o->rank};
    oobx_cancel_t cancel = {.deadline_ns = oobx__deadline(o->timeout_ms ? o->timeout_ms : 20000),
                            .user_abort = &o->abort_flag};
    oobx_log_t quiet = {.level = OOBX_LOG_NONE, .fp = stderr}; /* the refusals are the test's to judge */
    root_client_t c = {.rank = o->rank, .nranks = o->nranks, .nroots = o->nroots, .roots = o->roots, .tpid = 1,
                       .blob = blob, .blob_len = sizeof(blob), .settings = o->s, .log = &quiet, .cancel = &cancel,
                       .origin = &o->origin};
    unsigned char next[OOBX_ADDR_MAX];
    size_t len = 0;
    double delay = 0;
    o->origin = -7; /* the exchange must set it */
    o->rc = oobx__root_exchange(&c, next, &len, &delay);
    snprintf(o->err, sizeof(o->err), "%s", o->rc ? oobx_last_error() : "");
    return NULL;
}

/* Runs a job of nranks over nroots roots (each with a 20 s timeout) whose
 * ranks are o[0 .. nranks - 1], those of rank -1 never starting; o[quit],
 * if quit >= 0, gives up 0.3 s in (OOBX_ERR_ABORTED, checked here). */
static void origin_job(int nranks, int nroots, origin_client_t *o, int quit)
{
    oobx_settings_t rs[2], cs;
    root_handle_t h[2];
    assert_true(nroots <= 2);
    for (int i = 0; i < nroots; i++) {
        assert_int_equal(oobx__settings_load(&rs[i], NULL), 0);
        rs[i].timeout_ms = 20000;
        rs[i].log_level = OOBX_LOG_NONE;
        oobx_sockaddr_t a;
        char why[256];
        assert_int_equal(oobx__sock_addr_parse("127.0.0.1:0", AF_INET, &a, why, sizeof why), 0);
        unsigned char secret[16];
        for (int k = 0; k < 16; k++) secret[k] = (unsigned char)(k * 29 + i);
        int rc = oobx__root_start(&a, 0x4f524947494e00ull + (uint64_t)i, secret, &rs[i], &h[i], why, sizeof why);
        if (rc != 0) fail_msg("root %d: %s", i, why);
    }
    assert_int_equal(oobx__settings_load(&cs, NULL), 0);
    for (int i = 0; i < nranks; i++) {
        if (o[i].rank < 0) continue;
        o[i].nranks = nranks, o[i].nroots = nroots, o[i].roots = h, o[i].s = &cs;
        assert_int_equal(pthread_create(&o[i].th, NULL, origin_client_main, &o[i]), 0);
    }
    if (quit >= 0) {
        usleep(300000);
        o[quit].abort_flag = 1;
    }
    for (int i = 0; i < nranks; i++)
        if (o[i].rank >= 0) pthread_join(o[i].th, NULL);
    oobx__root_registry_reap(0, 2000);
    if (quit >= 0 && o[quit].rc != OOBX_ERR_ABORTED)
        fail_msg("rank %d: %s; want OOBX_ERR_ABORTED", quit, oobx_error_name(o[quit].rc));
}

/* Ranks 0 .. n - 1 were refused with status, naming origin. */
static void origin_expect(const origin_client_t *o, int n, int status, int origin)
{
    for (int i = 0; i < n; i++)
        if (o[i].rc != status || o[i].origin != origin)
            fail_msg("rank %d: %s, origin %d; want %s, origin %d: %s", i, oobx_error_name(o[i].rc), o[i].origin,
                     oobx_error_name(status), origin, o[i].err);
}

/* One root, three ranks; rank 2 never checks in: at its deadline (90 % of
 * the ranks' 3 s) the root refuses both others with OOBX_ERR_TIMEOUT, naming
 * rank 2 as the origin. */
static void test_origin_never_checked_in(void **state)
{
    (void)state;
    origin_client_t o[3] = {{.rank = 0, .timeout_ms = 3000}, {.rank = 1, .timeout_ms = 3000}, {.rank = -1}};
    origin_job(3, 1, o, -1);
    origin_expect(o, 2, OOBX_ERR_TIMEOUT, 2);
}

/* One root, three ranks; rank 2 reports, then gives up and closes without
 * a word: rank 0, waiting, and rank 1, reporting later, are refused with
 * OOBX_ERR_REMOTE naming rank 2 as the origin. */
static void test_origin_closed(void **state)
{
    (void)state;
    origin_client_t o[3] = {{.rank = 0}, {.rank = 1, .start_s = 0.6}, {.rank = 2}};
    origin_job(3, 1, o, 2);
    origin_expect(o, 2, OOBX_ERR_REMOTE, 2);
}

/* Two roots, four ranks: root 0 serves ranks 0-1, root 1 ranks 2-3, and the
 * first rank of each block also reports to the other root. Rank 3 reports,
 * then gives up without a word: root 1 refuses rank 2 naming rank 3, and
 * rank 2 withdraws from root 0 with that origin. Ranks 0 and 1, reporting
 * later, are refused naming rank 3, not rank 2, which only passed it on to
 * root 0. */
static void test_origin_passed_on(void **state)
{
    (void)state;
    origin_client_t o[4] = {{.rank = 0, .start_s = 0.6}, {.rank = 1, .start_s = 0.6}, {.rank = 2}, {.rank = 3}};
    origin_job(4, 2, o, 3);
    origin_expect(o, 3, OOBX_ERR_REMOTE, 3);
    /* rank 1 heard it from root 0 alone, through a withdraw notice (rank
     * 2's; rank 0's too on a slow machine: it also reports to root 1, the
     * previous root of its block) */
    if (!strstr(o[1].err, "(passed on by rank "))
        fail_msg("rank 1: the refusal does not say that a rank passed it on: %s", o[1].err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_formulas_brute_force),
        cmocka_unit_test(test_blocks_tile),
        cmocka_unit_test(test_unique_id_round_trip),
        cmocka_unit_test(test_unique_id_rejects),
        cmocka_unit_test(test_origin_never_checked_in),
        cmocka_unit_test(test_origin_closed),
        cmocka_unit_test(test_origin_passed_on),
        cmocka_unit_test(test_root_reserves_descriptors),
    };
    return cmocka_run_group_tests_name("root", tests, NULL, NULL);
}
