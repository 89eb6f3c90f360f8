/* Unit tests of mappable memory (src/mem.c): a forked child allocates
 * regions and publishes their descriptions; the parent maps and reads them,
 * and refuses descriptions that do not match what the child holds. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cma.h"
#include "mem.h"
#include "unit/fork_child.h"

#define NREG 70      /* more than the cache holds */
#define REG_BYTES 40000 /* not a page multiple: regions are rounded up */

/* What the child tells the parent through a pipe. */
typedef struct child {
    pid_t pid;
    unsigned char id[OOBX_CMA_ID_BYTES];
    oobx__mem_desc_t reg[NREG];
    oobx__mem_desc_t unsealed; /* a memfd of the right shape without seals */
    uint32_t pipe_fd;          /* a descriptor that is no memfd */
} child_t;

static unsigned char pat(int reg, size_t i)
{
    return (unsigned char)(i * 131u + 7u + (unsigned)reg * 29u);
}

/* In the child: NREG regions filled with their patterns, a memfd of the
 * right shape without seals, and the pipe's end (a descriptor that is no
 * memfd), described for the parent. */
static void publish(void *rec, int pipe_fd)
{
    static oobx__cma_self_t self;
    static oobx__mem_t m;
    oobx__cma_self_init(&self, 1);
    oobx__mem_init(&m);
    child_t *c = rec;
    c->pid = getpid();
    oobx__cma_encode(&self, c->id);
    char why[200];
    for (int k = 0; k < NREG; k++) {
        unsigned char *b;
        if (oobx__mem_alloc(&m, REG_BYTES, (void **)&b, why, sizeof(why)) != 0) _exit(1);
        for (size_t i = 0; i < REG_BYTES; i++) b[i] = pat(k, i);
        oobx__mem_describe(&m, b, REG_BYTES, &c->reg[k]);
    }
    int fd = (int)syscall(SYS_memfd_create, "plain", 0);
    if (fd < 0 || ftruncate(fd, c->reg[0].len) != 0) _exit(1);
    struct stat st;
    if (fstat(fd, &st) != 0) _exit(1);
    c->unsealed = c->reg[0];
    c->unsealed.fd = (uint32_t)fd;
    c->unsealed.ino = (uint64_t)st.st_ino;
    c->pipe_fd = (uint32_t)pipe_fd;
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

typedef struct fixture {
    oobx__cma_self_t self;
    oobx__mem_t m;
    child_t c;
    oobx__cma_peer_t peer;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    oobx__cma_self_init(&f->self, 1);
    oobx__mem_init(&f->m);
    f->c = child_start();
    oobx__cma_decode(&f->self, f->c.id, &f->peer);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    child_stop(&f->c);
    oobx__mem_fini(&f->m);
    free(f);
    return 0;
}

static void expect_slice(fixture_t *f, int k, size_t off, size_t len)
{
    unsigned char *got = malloc(len);
    assert_non_null(got);
    memset(got, 0, len);
    int rc = oobx__mem_read(&f->m, &f->peer, 1, &f->c.reg[k], got, f->c.reg[k].base + off, len);
    if (rc != 0) fail_msg("reading region %d: %s", k, f->peer.why);
    for (size_t i = 0; i < len; i++)
        if (got[i] != pat(k, off + i)) fail_msg("region %d byte %zu: %u, want %u", k, off + i, got[i], pat(k, off + i));
    free(got);
}

/* The child's regions read right through mappings, each made once. */
static void test_read_through_mapping(void **state)
{
    fixture_t *f = *state;
    if (!f->self.scope) skip();
    assert_true(oobx__cma_check(&f->peer));
    assert_int_equal(f->c.reg[0].len % 4096, 0);
    assert_true(f->c.reg[0].len >= REG_BYTES);
    expect_slice(f, 0, 0, REG_BYTES);
    expect_slice(f, 0, 1000, 5000);
    expect_slice(f, 1, 17, REG_BYTES - 17);
    assert_int_equal(f->m.nmaps, 2);
    assert_int_equal(f->m.mapped_reads, 3);
    /* every region, more than the cache holds: the cache stays bounded and
     * evicted regions are mapped again when read again */
    for (int k = 0; k < NREG; k++) expect_slice(f, k, 0, REG_BYTES);
    assert_int_equal(f->m.nmaps, OOBX_MEM_MAPS);
    expect_slice(f, 0, 0, REG_BYTES);
    assert_int_equal(f->peer.nomap, 0);
}

/* A description that does not match what the child holds is refused, the
 * peer is marked so that it is not tried again, and nothing is copied. */
static void refuse(fixture_t *f, const oobx__mem_desc_t *d, uint64_t src, size_t len, const char *why)
{
    assert_true(oobx__cma_check(&f->peer));
    f->peer.nomap = 0;
    unsigned char got[64];
    memset(got, 0xee, sizeof got);
    assert_int_equal(oobx__mem_read(&f->m, &f->peer, 1, d, got, src, len), -1);
    assert_int_equal(f->peer.nomap, 1);
    if (!strstr(f->peer.why, why)) fail_msg("why: \"%s\", want \"%s\" in it", f->peer.why, why);
    for (size_t i = 0; i < sizeof got; i++) assert_int_equal(got[i], 0xee);
    /* marked: the next read does not try */
    assert_int_equal(oobx__mem_read(&f->m, &f->peer, 1, &f->c.reg[2], got, f->c.reg[2].base, 8), -1);
}

static void test_wrong_descriptions_refused(void **state)
{
    fixture_t *f = *state;
    if (!f->self.scope) skip();
    oobx__mem_desc_t d = f->c.reg[3];
    refuse(f, &d, d.base + d.len - 8, 64, "outside the region");
    refuse(f, &d, d.base - 8, 16, "outside the region");
    d.ino ^= 1;
    refuse(f, &d, d.base, 64, "not the region it named");
    d = f->c.reg[3];
    d.len += 4096;
    refuse(f, &d, d.base, 64, "not the region it named");
    d = f->c.reg[3];
    d.fd = f->c.pipe_fd;
    refuse(f, &d, d.base, 64, "not the region it named");
    d.fd = 100000;
    refuse(f, &d, d.base, 64, "pidfd_getfd");
    refuse(f, &f->c.unsealed, f->c.unsealed.base, 64, "not sealed");
    assert_int_equal(f->m.nmaps, 0);
    assert_int_equal(f->m.mapped_reads, 0);
}

/* A peer that is gone (its pid may be another process's by now). */
static void test_dead_owner_refused(void **state)
{
    fixture_t *f = *state;
    if (!f->self.scope) skip();
    assert_true(oobx__cma_check(&f->peer));
    child_stop(&f->c);
    unsigned char got[64];
    assert_int_equal(oobx__mem_read(&f->m, &f->peer, 1, &f->c.reg[0], got, f->c.reg[0].base, 64), -1);
    assert_true(f->peer.why[0] != 0);
    f->c = child_start(); /* for the teardown */
}

/* This process's own regions: zero-filled, page-aligned, described only
 * for buffers wholly inside one, freed only by their start. */
static void test_own_regions(void **state)
{
    (void)state;
    oobx__mem_t m;
    oobx__mem_init(&m);
    char why[200];
    void *a, *b;
    assert_int_equal(oobx__mem_alloc(&m, 0, &a, why, sizeof why), -EINVAL);
    assert_int_equal(oobx__mem_alloc(&m, 3 * 4096 + 1, &a, why, sizeof why), 0);
    assert_int_equal(oobx__mem_alloc(&m, 100, &b, why, sizeof why), 0);
    assert_int_equal((uintptr_t)a % 4096, 0);
    for (size_t i = 0; i < 3 * 4096 + 1; i++) assert_int_equal(((unsigned char *)a)[i], 0);
    oobx__mem_desc_t d;
    oobx__mem_describe(&m, (char *)a + 4096, 2 * 4096, &d);
    assert_true(d.id != 0);
    assert_int_equal(d.base, (uint64_t)(uintptr_t)a);
    assert_int_equal(d.len, 4 * 4096);
    oobx__mem_describe(&m, (char *)a + 4096, 3 * 4096 + 1, &d); /* runs past its end */
    assert_int_equal(d.id, 0);
    int x;
    oobx__mem_describe(&m, &x, sizeof x, &d);
    assert_int_equal(d.id, 0);
    unsigned char enc[OOBX_MEM_DESC_BYTES];
    oobx__mem_desc_t e, back;
    memset(&back, 0, sizeof back);
    oobx__mem_describe(&m, b, 100, &e);
    oobx__mem_desc_encode(&e, enc);
    oobx__mem_desc_decode(enc, &back);
    assert_memory_equal(&e, &back, sizeof e);
    assert_int_equal(oobx__mem_free(&m, (char *)a + 1), -ENOENT);
    assert_int_equal(oobx__mem_free(&m, a), 0);
    assert_int_equal(oobx__mem_free(&m, a), -ENOENT);
    oobx__mem_describe(&m, a, 8, &d);
    assert_int_equal(d.id, 0);
    oobx__mem_fini(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_read_through_mapping, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_descriptions_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dead_owner_refused, setup, teardown),
        cmocka_unit_test(test_own_regions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
