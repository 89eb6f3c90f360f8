/*
 * The host's shared card table (src/node.c): ranks as forked processes, a
 * private segment directory, and the neighbours a host may have: a file of
 * the same name owned by another user, with loose permissions, holding
 * garbage or another job's table, or a symbolic link; a member that never
 * comes; a leader killed during the exchange.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "node.h"
#include "oobx.h"
#include "util.h"

#define CAP 64

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/oobx-node-test.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void card_of(int rank, unsigned char *card, size_t *len)
{
    *len = 16 + (size_t)(rank % 7);
    for (size_t i = 0; i < *len; i++) card[i] = (unsigned char)(rank * 31 + (int)i);
}

static oobx__node_params_t params(int rank, int nranks, int idx, int size, int leader, uint64_t epoch,
                                  const oobx_cancel_t *cancel)
{
    oobx__node_params_t p = {.job = 0x1234, .epoch = epoch, .host = 77, .rank = rank, .nranks = nranks,
                             .local_index = idx, .local_size = size, .leader = leader, .card_cap = CAP, .dir = dir,
                             .log = NULL, .cancel = cancel};
    return p;
}

static int all_cards_right(oobx__node_t *n, int nranks)
{
    for (int r = 0; r < nranks; r++) {
        unsigned char want[CAP];
        size_t wl, gl;
        card_of(r, want, &wl);
        const unsigned char *got = oobx__node_card(n, r, &gl);
        if (!got || gl != wl || memcmp(got, want, wl)) return 0;
    }
    return 1;
}

/* A member process: joins, waits for the leader, checks every card. Exit 0 when right. */
static int member_main(int rank, int nranks, int idx, int size, uint64_t epoch, int timeout_ms)
{
    oobx_cancel_t cancel = {.deadline_ns = oobx__deadline(timeout_ms)};
    oobx__node_params_t p = params(rank, nranks, idx, size, 0, epoch, &cancel);
    unsigned char card[CAP];
    size_t len;
    card_of(rank, card, &len);
    oobx__node_t *n;
    if (oobx__node_join(&p, card, len, &n) != 0) return 2;
    int rc = oobx__node_wait_finish(n);
    if (rc != 0) {
        fprintf(stderr, "  member %d: %s\n", rank, oobx_last_error());
        /* exit 3 when the leader's death was named */
        int named = strstr(oobx_last_error(), "leader") != NULL;
        oobx__node_leave(n);
        return named ? 3 : 4;
    }
    int ok = all_cards_right(n, nranks);
    oobx__node_leave(n);
    return ok ? 0 : 5;
}

static pid_t spawn_member(int rank, int nranks, int idx, int size, uint64_t epoch, int timeout_ms)
{
    pid_t pid = fork();
    if (pid == 0) _exit(member_main(rank, nranks, idx, size, epoch, timeout_ms));
    return pid;
}

/* One group of 4 (ranks 0, 2, 5, 6 of 8) with the leader writing the other
 * group's cards: every member reads all 8, byte for byte; the name is gone. */
static void test_group_exchange(void **state)
{
    (void)state;
    const int members[4] = {0, 2, 5, 6};
    uint64_t epoch = oobx__random64();
    pid_t kids[3];
    for (int k = 1; k < 4; k++) kids[k - 1] = spawn_member(members[k], 8, k, 4, epoch, 10000);
    oobx_cancel_t cancel = {.deadline_ns = oobx__deadline(10000)};
    oobx__node_params_t p = params(0, 8, 0, 4, 0, epoch, &cancel);
    unsigned char card[CAP];
    size_t len;
    card_of(0, card, &len);
    oobx__node_t *n;
    assert_int_equal(oobx__node_join(&p, card, len, &n), 0);
    assert_int_equal(oobx__node_wait_members(n, members), 0);
    assert_int_equal(oobx__node_count(n), 4);
    for (int r = 0; r < 8; r++) {
        if (r == 0 || r == 2 || r == 5 || r == 6) continue;
        card_of(r, card, &len);
        assert_int_equal(oobx__node_put(n, r, card, len), 0);
    }
    /* a second card for a rank is refused */
    assert_int_equal(oobx__node_put(n, 3, card, len), OOBX_ERR_PROTOCOL);
    oobx__node_finish(n, 0, NULL);
    assert_true(all_cards_right(n, 8));
    char path[600];
    snprintf(path, sizeof(path), "%s", oobx__node_path(n));
    oobx__node_leave(n);
    for (int k = 0; k < 3; k++) {
        int st;
        assert_int_equal(waitpid(kids[k], &st, 0), kids[k]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    assert_int_equal(access(path, F_OK), -1); /* removed once all had mapped it */
}

/* Path of the segment a group (leader 0, epoch) uses in dir. */
static void seg_path(char *out, size_t len, uint64_t epoch)
{
    snprintf(out, len, "%s/oobx-%u-%016llx-%d", dir, (unsigned)geteuid(), (unsigned long long)epoch, 0);
}

/* join as member 1 of 2 against whatever is at the path: the error text */
static int join_against(uint64_t epoch, char *msg, size_t msglen)
{
    oobx_cancel_t cancel = {.deadline_ns = oobx__deadline(2000)};
    oobx__node_params_t p = params(1, 2, 1, 2, 0, epoch, &cancel);
    unsigned char card[CAP];
    size_t len;
    card_of(1, card, &len);
    oobx__node_t *n = NULL;
    int rc = oobx__node_join(&p, card, len, &n);
    snprintf(msg, msglen, "%s", oobx_last_error());
    if (rc == 0) oobx__node_leave(n);
    return rc;
}

static void make_file(const char *path, size_t size, int fill, mode_t mode)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, mode);
    assert_true(fd >= 0);
    unsigned char *b = malloc(size);
    memset(b, fill, size);
    assert_int_equal(write(fd, b, size), (ssize_t)size);
    free(b);
    fchmod(fd, mode);
    close(fd);
}

/* The size a 2-rank group with CAP-byte slots needs (node.c's layout). */
static size_t group_size(void)
{
    oobx__node_params_t p = params(1, 2, 1, 2, 0, 1, NULL);
    return oobx__node_size(&p);
}

static void test_hostile_other_user(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "  [not root: cannot make a file of another user]\n");
        skip();
    }
    uint64_t epoch = oobx__random64();
    char path[600], msg[1200];
    seg_path(path, sizeof(path), epoch);
    make_file(path, group_size(), 0, 0600);
    assert_int_equal(chown(path, 65534, 65534), 0);
    assert_int_equal(join_against(epoch, msg, sizeof(msg)), OOBX_ERR_PROTOCOL);
    fprintf(stderr, "  [%s]\n", msg);
    assert_non_null(strstr(msg, "uid 65534"));
    assert_non_null(strstr(msg, "not used"));
    unlink(path);
}

static void test_hostile_mode(void **state)
{
    (void)state;
    uint64_t epoch = oobx__random64();
    char path[600], msg[1200];
    seg_path(path, sizeof(path), epoch);
    make_file(path, group_size(), 0, 0644);
    assert_int_equal(join_against(epoch, msg, sizeof(msg)), OOBX_ERR_PROTOCOL);
    assert_non_null(strstr(msg, "mode 644"));
    unlink(path);
}

static void test_hostile_garbage(void **state)
{
    (void)state;
    uint64_t epoch = oobx__random64();
    char path[600], msg[1200];
    seg_path(path, sizeof(path), epoch);
    make_file(path, group_size(), 0xa5, 0600);
    assert_int_equal(join_against(epoch, msg, sizeof(msg)), OOBX_ERR_PROTOCOL);
    assert_non_null(strstr(msg, "not an oobx host segment"));
    /* the wrong size is refused before it is read */
    make_file(path, 100, 0, 0600);
    assert_int_equal(join_against(epoch, msg, sizeof(msg)), OOBX_ERR_PROTOCOL);
    assert_non_null(strstr(msg, "bytes"));
    unlink(path);
}

static void test_hostile_other_job(void **state)
{
    (void)state;
    /* a real table of another job (job magic differs) under this group's name */
    uint64_t epoch = oobx__random64();
    oobx__node_params_t p = params(0, 2, 0, 2, 0, epoch, NULL);
    p.job = 0x9999;
    unsigned char card[CAP];
    size_t len;
    card_of(0, card, &len);
    oobx__node_t *other;
    assert_int_equal(oobx__node_join(&p, card, len, &other), 0);
    char msg[1200];
    assert_int_equal(join_against(epoch, msg, sizeof(msg)), OOBX_ERR_PROTOCOL);
    assert_non_null(strstr(msg, "another job"));
    oobx__node_finish(other, OOBX_ERR_ABORTED, "test over");
    oobx__node_leave(other);
}

static void test_hostile_symlink(void **state)
{
    (void)state;
    uint64_t epoch = oobx__random64();
    char path[600], target[600], msg[1200];
    seg_path(path, sizeof(path), epoch);
    snprintf(target, sizeof(target), "%s/elsewhere", dir);
    make_file(target, group_size(), 0, 0600);
    assert_int_equal(symlink(target, path), 0);
    assert_int_equal(join_against(epoch, msg, sizeof(msg)), OOBX_ERR_PROTOCOL);
    assert_non_null(strstr(msg, "symbolic link"));
    unlink(path);
    unlink(target);
}

/* A member that never comes: the leader times out naming it. */
static void test_member_missing(void **state)
{
    (void)state;
    const int members[3] = {0, 1, 2};
    uint64_t epoch = oobx__random64();
    pid_t kid = spawn_member(1, 3, 1, 3, epoch, 5000);
    oobx_cancel_t cancel = {.deadline_ns = oobx__deadline(600)};
    oobx__node_params_t p = params(0, 3, 0, 3, 0, epoch, &cancel);
    unsigned char card[CAP];
    size_t len;
    card_of(0, card, &len);
    oobx__node_t *n;
    assert_int_equal(oobx__node_join(&p, card, len, &n), 0);
    uint64_t t0 = oobx__now_ns();
    assert_int_equal(oobx__node_wait_members(n, members), OOBX_ERR_TIMEOUT);
    fprintf(stderr, "  [%s]\n", oobx_last_error());
    assert_true((oobx__now_ns() - t0) / 1000000 < 2000);
    assert_non_null(strstr(oobx_last_error(), "(rank 2;"));
    oobx__node_finish(n, OOBX_ERR_TIMEOUT, oobx_last_error());
    oobx__node_leave(n);
    int st;
    waitpid(kid, &st, 0);
    /* the member learnt the leader's failure */
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 3);
}

/* The leader is killed during the exchange: members fail naming it, soon. */
static void test_leader_killed(void **state)
{
    (void)state;
    uint64_t epoch = oobx__random64();
    int go[2];
    assert_int_equal(pipe(go), 0);
    pid_t leader = fork();
    if (leader == 0) {
        oobx__node_params_t p = params(0, 4, 0, 2, 0, epoch, NULL);
        unsigned char card[CAP];
        size_t len;
        card_of(0, card, &len);
        oobx__node_t *n;
        if (oobx__node_join(&p, card, len, &n) != 0) _exit(2);
        const int members[2] = {0, 3};
        if (oobx__node_wait_members(n, members) != 0) _exit(3);
        char b = 1;
        if (write(go[1], &b, 1) != 1) _exit(4);
        pause(); /* "trading" until killed */
        _exit(0);
    }
    pid_t member = spawn_member(3, 4, 1, 2, epoch, 20000);
    char b;
    assert_int_equal(read(go[0], &b, 1), 1);
    kill(leader, SIGKILL);
    waitpid(leader, NULL, 0);
    uint64_t t0 = oobx__now_ns();
    int st;
    assert_int_equal(waitpid(member, &st, 0), member);
    double waited = (oobx__now_ns() - t0) / 1e9;
    fprintf(stderr, "  [member saw the leader's death after %.2f s]\n", waited);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 3);
    assert_true(waited < 2.0);
    close(go[0]);
    close(go[1]);
    char path[600];
    seg_path(path, sizeof(path), epoch);
    unlink(path);
}

/* A member that comes after the failure was told: it must read the notice
 * (exit 0), not make a fresh table and wait out its timeout (exit 4). */
static int late_member_main(int rank, int nranks, int idx, int size, uint64_t epoch)
{
    oobx_cancel_t cancel = {.deadline_ns = oobx__deadline(8000)};
    oobx__node_params_t p = params(rank, nranks, idx, size, 0, epoch, &cancel);
    unsigned char card[CAP];
    size_t len;
    card_of(rank, card, &len);
    oobx__node_t *n;
    if (oobx__node_join(&p, card, len, &n) != 0) return 2;
    uint64_t t0 = oobx__now_ns();
    int rc = oobx__node_wait_finish(n);
    double waited = (oobx__now_ns() - t0) / 1e9;
    fprintf(stderr, "  member %d after %.2f s: %s\n", rank, waited, rc ? oobx_last_error() : "(no error)");
    int told = rc == OOBX_ERR_REMOTE && strstr(oobx_last_error(), "refused by root 1 (unit test)") != NULL;
    oobx__node_leave(n);
    if (rc == 0) return 5;
    return told && waited < 2.0 ? 0 : 4;
}

/* A rank of the group whose init failed after its root had placed it tells
 * the group's table before any other rank opened it (teller: its index).
 * Every other rank, each coming only after the one before it left, fails at
 * once with the teller's text; once all have read it the name is gone. */
static void failure_told_first(int teller)
{
    const int size = 4, members[4] = {0, 1, 2, 3};
    uint64_t epoch = oobx__random64();
    oobx__node_params_t tp = params(teller, size, teller, size, 0, epoch, NULL);
    oobx__node_tell_failure(&tp, OOBX_ERR_REMOTE, "rank 9: refused by root 1 (unit test)");
    char path[600];
    seg_path(path, sizeof(path), epoch);
    assert_int_equal(access(path, F_OK), 0); /* kept for the ranks to come */
    for (int k = 0; k < size; k++) {
        if (k == teller) continue;
        if (k == 0) {
            /* the leader, waiting for its members, is told too */
            oobx_cancel_t cancel = {.deadline_ns = oobx__deadline(8000)};
            oobx__node_params_t p = params(0, size, 0, size, 0, epoch, &cancel);
            unsigned char card[CAP];
            size_t len;
            card_of(0, card, &len);
            oobx__node_t *n;
            assert_int_equal(oobx__node_join(&p, card, len, &n), 0);
            uint64_t t0 = oobx__now_ns();
            assert_int_equal(oobx__node_wait_members(n, members), OOBX_ERR_REMOTE);
            fprintf(stderr, "  leader: %s\n", oobx_last_error());
            assert_non_null(strstr(oobx_last_error(), "refused by root 1 (unit test)"));
            assert_true((oobx__now_ns() - t0) / 1000000 < 2000);
            oobx__node_leave(n);
            continue;
        }
        pid_t pid = fork();
        if (pid == 0) _exit(late_member_main(k, size, k, size, epoch));
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    assert_int_equal(access(path, F_OK), -1); /* the last of them removed it */
}

static void test_failure_told_by_leader(void **state)
{
    (void)state;
    failure_told_first(0);
}

static void test_failure_told_by_member(void **state)
{
    (void)state;
    failure_told_first(2);
}

/* Cards that do not fit are refused. */
static void test_bad_cards(void **state)
{
    (void)state;
    oobx__node_params_t p = params(0, 2, 0, 1, 0, oobx__random64(), NULL);
    unsigned char card[CAP + 8] = {1};
    oobx__node_t *n;
    assert_int_equal(oobx__node_join(&p, card, CAP + 1, &n), OOBX_ERR_INVALID);
    assert_int_equal(oobx__node_join(&p, card, 20, &n), 0);
    assert_int_equal(oobx__node_put(n, 2, card, 20), OOBX_ERR_PROTOCOL);
    assert_int_equal(oobx__node_put(n, 1, card, CAP + 1), OOBX_ERR_PROTOCOL);
    size_t len;
    assert_null(oobx__node_card(n, 1, &len));
    assert_null(oobx__node_card(n, -1, &len));
    oobx__node_leave(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_exchange),   cmocka_unit_test(test_hostile_other_user),
        cmocka_unit_test(test_hostile_mode),     cmocka_unit_test(test_hostile_garbage),
        cmocka_unit_test(test_hostile_other_job), cmocka_unit_test(test_hostile_symlink),
        cmocka_unit_test(test_member_missing),   cmocka_unit_test(test_leader_killed),
        cmocka_unit_test(test_bad_cards),
        cmocka_unit_test(test_failure_told_by_leader), cmocka_unit_test(test_failure_told_by_member),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
