#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/random.h>
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

void oobx__prefault_write(void *p, size_t len)
{
#ifdef MADV_POPULATE_WRITE
    if (!p || len < OOBX_PREFAULT_MIN) return;
    long ps = sysconf(_SC_PAGESIZE);
    if (ps <= 0 || (ps & (ps - 1))) return;
    uintptr_t page = (uintptr_t)ps;
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), e = ((uintptr_t)p + len) & ~(page - 1);
    if (e <= a) return;
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
