/* src/util.c: the result buffers of the node-aware allgather. oobx__prefault_write
 * (pages mapped ahead) and oobx__copy_fresh, the copy of a result into memory
 * that may be fresh (the kernel fills missing pages as it maps them, by
 * userfaultfd). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cmocka.h>

#ifdef __linux__
#include <linux/userfaultfd.h>
#endif

#include "util.h"

#define LEN ((size_t)1 << 20)

static size_t page(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* Whether this process may use userfaultfd for its own user-mode faults (a
 * kernel from 5.11, no sandbox that forbids the call). */
static int uffd_works(void)
{
#if defined(__linux__) && defined(SYS_userfaultfd) && defined(UFFD_USER_MODE_ONLY)
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
    if (fd < 0) return 0;
    close(fd);
    return 1;
#else
    return 0;
#endif
}

static unsigned char *src_new(size_t len, unsigned seed)
{
    unsigned char *s = malloc(len);
    assert_non_null(s);
    for (size_t i = 0; i < len; i++) s[i] = (unsigned char)(i * 131 + seed + (i >> 12));
    return s;
}

/* Pages of [p, p + len) in memory (p need not be page-aligned: its page counts) */
static int resident_pages(const void *p, size_t len)
{
    size_t ps = page(), lead = (uintptr_t)p & (ps - 1);
    len += lead;
    size_t n = (len + ps - 1) / ps;
    unsigned char *v = malloc(n);
    assert_non_null(v);
    assert_int_equal(mincore((char *)p - lead, len, v), 0);
    int in = 0;
    for (size_t i = 0; i < n; i++) in += v[i] & 1;
    free(v);
    return in;
}

static unsigned char *fresh_map(size_t len)
{
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    return m;
}

/* A fresh mapping, the copy starting mid-page (as malloc's large blocks do) and
 * ending mid-page: every byte right, the pages now in memory, and the kernel's
 * fill used where userfaultfd works. */
static void test_fresh_unaligned(void **state)
{
    (void)state;
    size_t ps = page(), len = LEN + 100;
    unsigned char *m = fresh_map(len + 2 * ps);
    unsigned char *dst = m + 16;
    m[0] = 1; /* the head page in memory, as malloc's header puts it */
    unsigned char *s = src_new(len, 3);
    int filled = oobx__copy_fresh(dst, s, len);
    assert_int_equal(filled, uffd_works());
    assert_memory_equal(dst, s, len);
    assert_int_equal(m[0], 1);
    assert_int_equal(dst[len], 0); /* nothing past the end */
    assert_true((size_t)resident_pages(dst, len) >= len / ps);
    /* the same buffer again (now in memory): an ordinary copy, the new data */
    unsigned char *s2 = src_new(len, 77);
    assert_int_equal(oobx__copy_fresh(dst, s2, len), 0);
    assert_memory_equal(dst, s2, len);
    free(s2);
    free(s);
    munmap(m, len + 2 * ps);
}

/* Pages in memory inside the range (the program wrote there first): the
 * kernel's fill stops at each, the copy goes on around them. */
static void test_fresh_with_holes(void **state)
{
    (void)state;
    size_t ps = page();
    unsigned char *m = fresh_map(LEN);
    m[LEN / 2] = 9;            /* one page mid-way */
    m[LEN / 4 + ps + 1] = 9;   /* and another */
    m[LEN / 4 + 2 * ps] = 9;   /* next to it */
    unsigned char *s = src_new(LEN, 5);
    int filled = oobx__copy_fresh(m, s, LEN);
    assert_int_equal(filled, uffd_works());
    assert_memory_equal(m, s, LEN);
    assert_int_equal(resident_pages(m, LEN), LEN / ps);
    free(s);
    munmap(m, LEN);
}

/* Memory userfaultfd cannot fill (a file's shared mapping) and copies too
 * small to bother: the ordinary copy, right. */
static void test_fresh_refused(void **state)
{
    (void)state;
    char path[] = "/tmp/oobx-fresh.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    assert_int_equal(ftruncate(fd, (off_t)LEN), 0);
    unsigned char *f = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(f != MAP_FAILED);
    unsigned char *s = src_new(LEN, 11);
    assert_int_equal(oobx__copy_fresh(f, s, LEN), 0);
    assert_memory_equal(f, s, LEN);
    munmap(f, LEN);
    close(fd);
    unsigned char *m = fresh_map(OOBX_PREFAULT_MIN);
    assert_int_equal(oobx__copy_fresh(m, s, OOBX_PREFAULT_MIN - 1), 0);
    assert_memory_equal(m, s, OOBX_PREFAULT_MIN - 1);
    munmap(m, OOBX_PREFAULT_MIN);
    free(s);
}

/* The node-aware allgather maps a fresh result buffer before its copy
 * (util.c, oobx__prefault_write): the pages are there afterwards, a small buffer is left alone,
 * and memory the kernel cannot populate costs nothing but the try. */
static void test_prefault(void **state)
{
    (void)state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), len = OOBX_PREFAULT_MIN + 4 * page;
    unsigned char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    assert_int_equal(resident_pages(m, len), 0);
    oobx__prefault_write(m, OOBX_PREFAULT_MIN / 2); /* below the minimum: nothing */
    assert_int_equal(resident_pages(m, len), 0);
    /* from the middle of a page: only whole pages of the range */
    oobx__prefault_write(m + page / 2, OOBX_PREFAULT_MIN + page);
#ifdef MADV_POPULATE_WRITE
    int want = (int)(OOBX_PREFAULT_MIN / page);
    /* a kernel before 5.14 says EINVAL and maps nothing: only then may it be 0 */
    unsigned char *probe = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(probe != MAP_FAILED);
    int supported = madvise(probe, page, MADV_POPULATE_WRITE) == 0;
    munmap(probe, page);
    assert_int_equal(resident_pages(m, len), supported ? want : 0);
    unsigned char v = 1;
    assert_int_equal(mincore(m, page, &v), 0);
    assert_int_equal(v & 1, 0); /* the partial first page is not the call's */
    /* used memory is left as it is: a second call changes nothing */
    oobx__prefault_write(m + page / 2, OOBX_PREFAULT_MIN + page);
    assert_int_equal(resident_pages(m, len), supported ? want : 0);
#endif
    for (size_t i = 0; i < len; i++) assert_int_equal(m[i], 0);
    /* read-only memory: the kernel refuses, the call returns */
    assert_int_equal(mprotect(m, len, PROT_READ), 0);
    oobx__prefault_write(m, len);
    munmap(m, len);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefault),
        cmocka_unit_test(test_fresh_unaligned),
        cmocka_unit_test(test_fresh_with_holes),
        cmocka_unit_test(test_fresh_refused),
    };
    if (!uffd_works()) printf("userfaultfd is not usable here: every copy checks the ordinary path\n");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
