#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#ifdef __linux__
#include <linux/userfaultfd.h>
#endif
#include <unistd.h>
#include <time.h>
#include <unistd.h>

uint64_t oobx__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t oobx__now_coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t oobx__deadline(int timeout_ms)
{
    if (timeout_ms < 0) return UINT64_MAX;
    return oobx__now_ns() + (uint64_t)timeout_ms * 1000000ull;
}

int oobx__ms_left(uint64_t deadline_ns, int cap_ms)
{
    if (deadline_ns == UINT64_MAX) return cap_ms;
    uint64_t now = oobx__now_ns();
    if (now >= deadline_ns) return 0;
    uint64_t left = (deadline_ns - now + 999999ull) / 1000000ull;
    if (cap_ms >= 0 && left > (uint64_t)cap_ms) return cap_ms;
    if (left > 0x7fffffff) left = 0x7fffffff;
    return (int)left;
}

int oobx__int_cmp(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

uint64_t oobx__mix64(uint64_t a, uint64_t b)
{
    uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

uint64_t oobx__random64(void)
{
    uint64_t v = 0;
    ssize_t n = getrandom(&v, sizeof(v), GRND_NONBLOCK);
    if (n == (ssize_t)sizeof(v) && v != 0) return v;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    v = oobx__mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20), (uint64_t)getpid());
    v = oobx__mix64(v, oobx__now_ns());
    return v ? v : 1;
}

int oobx__read_small_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n < 0) return -1;
    buf[n] = '\0';
    return (int)n;
}

uint64_t oobx__hash64(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int oobx__ratelimit_ok(oobx_ratelimit_t *rl)
{
    uint64_t now = oobx__now_ns();
    if (now - rl->window_start_ns > 10ull * 1000000000ull) {
        rl->window_start_ns = now;
        rl->count = 0;
    }
    if (rl->count < 5) {
        rl->count++;
        return 1;
    }
    rl->suppressed++;
    return 0;
}

void oobx__appendf(char *buf, size_t len, const char *fmt, ...)
{
    if (!buf || len == 0) return;
    size_t used = strnlen(buf, len);
    if (used >= len - 1) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

int oobx__online_cpus(void)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1) ncpu = 1;
    if (ncpu > 65535) ncpu = 65535;
    return (int)ncpu;
}

int oobx__in_range(const void *p, const void *base, size_t len)
{
    return p && (const char *)p >= (const char *)base && (const char *)p < (const char *)base + len;
}

/* The whole pages [*a, *e) of a large copy's [p, p + len): the page size, or 0 when p is NULL, len is
 * under OOBX_PREFAULT_MIN, the page size is not a power of two or no whole page lies inside. */
static inline uintptr_t whole_pages(const void *p, size_t len, uintptr_t *a, uintptr_t *e)
{
    long ps = sysconf(_SC_PAGESIZE);
    if (!p || len < OOBX_PREFAULT_MIN || ps <= 0 || (ps & (ps - 1))) return 0;
    uintptr_t page = (uintptr_t)ps;
    *a = ((uintptr_t)p + page - 1) & ~(page - 1);
    *e = ((uintptr_t)p + len) & ~(page - 1);
    return *e > *a ? page : 0;
}

void oobx__prefault_write(void *p, size_t len)
{
#ifdef MADV_POPULATE_WRITE
    uintptr_t a = 0, e = 0, page = whole_pages(p, len, &a, &e);
    if (!page) return;
    /* memory in use already (the same buffer again) is left alone: asking
     * again walks its page tables for nothing, most of a copy's time */
    unsigned char first = 0, last = 0;
    if (mincore((void *)a, page, &first) == 0 && mincore((void *)(e - page), page, &last) == 0 && (first & 1) &&
        (last & 1))
        return;
    (void)madvise((void *)a, e - a, MADV_POPULATE_WRITE);
#else
    (void)p;
    (void)len;
#endif
}

#if defined(__linux__) && defined(SYS_userfaultfd) && defined(UFFD_USER_MODE_ONLY) && defined(UFFDIO_COPY)
/* The kernel fills [a, a + len) from src (whole pages, registered, missing when looked at); a page found in
 * memory meanwhile is copied here. 0, or -1 when it stopped at `*off` for another reason. */
static int uffd_fill(int fd, unsigned char *a, const unsigned char *src, size_t len, size_t page, size_t *off)
{
    while (*off < len) {
        struct uffdio_copy cp = {.dst = (uintptr_t)(a + *off), .src = (uintptr_t)(src + *off), .len = len - *off};
        if (ioctl(fd, UFFDIO_COPY, &cp) == 0) {
            *off = len;
            break;
        }
        int err = errno;
        size_t done = cp.copy > 0 ? (size_t)cp.copy : 0;
        *off += done;
        if (err == EEXIST && *off < len) {
            memcpy(a + *off, src + *off, page);
            *off += page;
        } else if (err != EAGAIN || done == 0) {
            return -1;
        }
    }
    return 0;
}

/* The whole pages [a, a + n * page) of dst from src: runs of pages in memory (in[k] & 1) by memcpy, runs of
 * missing pages filled by the kernel. 1 when it ran (every byte written), 0 when userfaultfd would not start
 * (nothing written). */
static int copy_uffd(unsigned char *a, size_t n, const unsigned char *src, size_t page, const unsigned char *in)
{
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0) return 0;
    size_t len = n * page;
    struct uffdio_api api = {.api = UFFD_API};
    struct uffdio_register reg = {.range = {(uintptr_t)a, len}, .mode = UFFDIO_REGISTER_MODE_MISSING};
    if (ioctl(fd, UFFDIO_API, &api) != 0 || ioctl(fd, UFFDIO_REGISTER, &reg) != 0 ||
        !(reg.ioctls & ((uint64_t)1 << _UFFDIO_COPY))) {
        close(fd);
        return 0;
    }
    size_t k = 0, stop = len;
    while (k < n && stop == len) {
        size_t j = k;
        while (j < n && (in[j] & 1) == (in[k] & 1)) j++;
        if (in[k] & 1) {
            memcpy(a + k * page, src + k * page, (j - k) * page);
        } else {
            size_t off = 0;
            if (uffd_fill(fd, a + k * page, src + k * page, (j - k) * page, page, &off) != 0) stop = k * page + off;
        }
        k = j;
    }
    struct uffdio_range r = {(uintptr_t)a, len};
    (void)ioctl(fd, UFFDIO_UNREGISTER, &r);
    close(fd);
    /* stopped for a reason other than a page in memory: the rest the ordinary way */
    if (stop < len) memcpy(a + stop, src + stop, len - stop);
    return 1;
}
#endif

int oobx__copy_fresh(void *dst, const void *src, size_t len)
{
    int all_in = 0; /* every whole page seen in memory: nothing to map ahead (a buffer used before) */
#if defined(__linux__) && defined(SYS_userfaultfd) && defined(UFFD_USER_MODE_ONLY) && defined(UFFDIO_COPY)
    uintptr_t ua = 0, ue = 0, page = whole_pages(dst, len, &ua, &ue);
    if (page && src) {
        unsigned char *d = dst, *a = (unsigned char *)ua, *e = (unsigned char *)ue;
        const unsigned char *s = src;
        size_t n = (size_t)(e - a) / page, missing = 0;
        unsigned char *in = malloc(n);
        if (in && mincore(a, n * page, in) == 0) {
            for (size_t k = 0; k < n; k++) missing += !(in[k] & 1);
            all_in = missing == 0;
        }
        /* mostly fresh (a buffer used before is copied the ordinary way) */
        int done = in && missing * 2 > n && copy_uffd(a, n, s + (a - d), page, in);
        free(in);
        if (done) {
            memcpy(d, s, (size_t)(a - d));
            memcpy(e, s + (e - d), len - (size_t)(e - d));
            return 1;
        }
    }
#endif
    /* oobx__prefault_write would look at the first and last page again to find them in use */
    if (!all_in) oobx__prefault_write(dst, len);
    memcpy(dst, src, len);
    return 0;
}
