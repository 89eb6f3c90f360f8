/* Unit tests of single-copy pulls between processes (src/cma.c): a forked
 * child publishes its identity and a buffer, the parent checks and pulls. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cma.h"
#include "unit/fork_child.h"

#define BUF_BYTES (3u << 20)

/* What the child tells the parent through a pipe. */
typedef struct child {
    pid_t pid;
    unsigned char id[OOBX_CMA_ID_BYTES];
    uint64_t buf;
} child_t;

static void pattern(unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i * 131u + 7u);
}

/* In the child: fills a buffer and publishes its identity and address. */
static void publish(void *rec, int pipe_fd)
{
    (void)pipe_fd;
    static oobx__cma_self_t self;
    oobx__cma_self_init(&self, 1);
    unsigned char *b = malloc(BUF_BYTES);
    if (!b) _exit(1);
    pattern(b, BUF_BYTES);
    child_t *c = rec;
    *c = (child_t){.pid = getpid(), .buf = (uint64_t)(uintptr_t)b};
    oobx__cma_encode(&self, c->id);
}

static child_t child_start(void)
{
    child_t c;
    child_fork(publish, &c, sizeof c);
    return c;
}

static void child_stop(const child_t *c)
{
    child_kill(c->pid);
}

static void test_pull_from_child(void **state)
{
    (void)state;
    oobx__cma_self_t self;
    oobx__cma_self_init(&self, 1);
    if (!self.scope) skip(); /* no /proc: nothing is offered */
    child_t c = child_start();
    oobx__cma_peer_t peer;
    oobx__cma_decode(&self, c.id, &peer);
    assert_int_equal(peer.state, OOBX_CMA_UNKNOWN);
    assert_true(oobx__cma_check(&peer));
    assert_int_equal(peer.state, OOBX_CMA_OK);
    unsigned char *want = malloc(BUF_BYTES), *got = malloc(BUF_BYTES);
    assert_non_null(want);
    assert_non_null(got);
    pattern(want, BUF_BYTES);
    memset(got, 0, BUF_BYTES);
    assert_int_equal(oobx__cma_pull(&peer, got, c.buf, BUF_BYTES), 0);
    assert_memory_equal(got, want, BUF_BYTES);
    /* a piece from the middle */
    memset(got, 0, 1000);
    assert_int_equal(oobx__cma_pull(&peer, got, c.buf + 12345, 1000), 0);
    assert_memory_equal(got, want + 12345, 1000);
    /* an address the child has not mapped: an error, and no more pulls */
    assert_int_equal(oobx__cma_pull(&peer, got, 16, 100), -EFAULT);
    assert_int_equal(peer.state, OOBX_CMA_NO);
    assert_non_null(strstr(peer.why, "process_vm_readv"));
    assert_false(oobx__cma_check(&peer));
    free(want);
    free(got);
    child_stop(&c);
}

/* A published word that the pid's memory does not hold: another process. */
static void test_wrong_word_refused(void **state)
{
    (void)state;
    oobx__cma_self_t self;
    oobx__cma_self_init(&self, 1);
    if (!self.scope) skip();
    child_t c = child_start();
    uint64_t word;
    memcpy(&word, c.id + 24, 8);
    word ^= 0x5a5a;
    memcpy(c.id + 24, &word, 8);
    oobx__cma_peer_t peer;
    oobx__cma_decode(&self, c.id, &peer);
    assert_false(oobx__cma_check(&peer));
    assert_int_equal(peer.state, OOBX_CMA_NO);
    assert_non_null(strstr(peer.why, "is not the rank"));
    child_stop(&c);
}

/* A peer that is gone: refused, not read. */
static void test_dead_peer_refused(void **state)
{
    (void)state;
    oobx__cma_self_t self;
    oobx__cma_self_init(&self, 1);
    if (!self.scope) skip();
    child_t c = child_start();
    child_stop(&c);
    oobx__cma_peer_t peer;
    oobx__cma_decode(&self, c.id, &peer);
    assert_false(oobx__cma_check(&peer));
    assert_non_null(strstr(peer.why, "process_vm_readv"));
}

/* Another scope (host or pid namespace), this process, or single copies off
 * on either side: never tried. */
static void test_scopes(void **state)
{
    (void)state;
    oobx__cma_self_t self, off;
    oobx__cma_self_init(&self, 1);
    oobx__cma_self_init(&off, 0);
    assert_int_equal(off.scope, 0);
    if (!self.scope) skip();
    unsigned char id[OOBX_CMA_ID_BYTES];
    oobx__cma_peer_t peer;
    oobx__cma_encode(&self, id);
    oobx__cma_decode(&self, id, &peer);
    assert_int_equal(peer.state, OOBX_CMA_NO);
    assert_string_equal(peer.why, "the same process");
    oobx__cma_self_t other = self;
    other.pid = self.pid + 1;
    other.scope ^= 1;
    oobx__cma_encode(&other, id);
    oobx__cma_decode(&self, id, &peer);
    assert_int_equal(peer.state, OOBX_CMA_NO);
    assert_string_equal(peer.why, "another host or pid namespace");
    oobx__cma_encode(&self, id);
    oobx__cma_decode(&off, id, &peer);
    assert_int_equal(peer.state, OOBX_CMA_NO);
    oobx__cma_encode(&off, id);
    oobx__cma_decode(&self, id, &peer);
    assert_int_equal(peer.state, OOBX_CMA_NO);
    assert_string_equal(peer.why, "off");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pull_from_child),
        cmocka_unit_test(test_wrong_word_refused),
        cmocka_unit_test(test_dead_peer_refused),
        cmocka_unit_test(test_scopes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
