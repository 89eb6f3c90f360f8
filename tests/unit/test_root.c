/* Unit tests of the multi-root block formulas (src/root.c) against brute
 * force, of the unique id encoding, and of a root's room for descriptors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "oobx.h"
#include "root.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_formulas_brute_force),
        cmocka_unit_test(test_blocks_tile),
        cmocka_unit_test(test_unique_id_round_trip),
        cmocka_unit_test(test_unique_id_rejects),
        cmocka_unit_test(test_root_reserves_descriptors),
    };
    return cmocka_run_group_tests_name("root", tests, NULL, NULL);
}
