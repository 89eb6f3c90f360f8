/* Small helpers shared by the core and the transports. */
#ifndef OOBX_UTIL_H
#define OOBX_UTIL_H

#include <stdint.h>
#include <stddef.h>

uint64_t oobx__now_ns(void);                     /* CLOCK_MONOTONIC */
uint64_t oobx__now_coarse_ns(void);              /* CLOCK_MONOTONIC_COARSE: a tick's resolution, a fraction of the cost */
int oobx__online_cpus(void);                      /* CPUs online, 1..65535 (a card holds a u16) */
/* deadline_ns for a timeout in ms from now; UINT64_MAX for timeout_ms < 0 */
uint64_t oobx__deadline(int timeout_ms);
/* ms left until deadline, clamped to [0, cap_ms]; cap_ms < 0: no cap; -1 for no deadline */
int oobx__ms_left(uint64_t deadline_ns, int cap_ms);
int oobx__read_small_file(const char *path, char *buf, size_t cap); /* one read, NUL-ended: bytes or -1 */
uint64_t oobx__random64(void);                   /* getrandom(), else time^pid mix */
uint64_t oobx__hash64(const void *data, size_t len, uint64_t seed); /* FNV-1a 64 */
uint64_t oobx__mix64(uint64_t a, uint64_t b);
int oobx__int_cmp(const void *a, const void *b);  /* qsort order of ints, ascending */
/* 1 when p (not NULL) lies in [base, base + len): memory a failed call gives back (transport.h, release) */
int oobx__in_range(const void *p, const void *base, size_t len);
/* Asks the kernel to map the whole pages of [p, p + len) writable now
 * (MADV_POPULATE_WRITE), when len is at least OOBX_PREFAULT_MIN: one system
 * call instead of a page fault for every page a large copy then touches.
 * Skipped when its first and last whole pages are mapped (a buffer used
 * before). Best effort: a kernel without it, or memory it cannot populate (a device
 * mapping), leaves the copy to fault as before. */
#define OOBX_PREFAULT_MIN ((size_t)256 << 10)
void oobx__prefault_write(void *p, size_t len);
/* memcpy(dst, src, len) for a result buffer that may be fresh memory. When
 * len is at least OOBX_PREFAULT_MIN and most whole pages of dst are not in
 * memory yet (a buffer the program just allocated, perhaps with its own
 * slice written), the kernel fills the missing ones with the data as it
 * allocates them (userfaultfd's UFFDIO_COPY, on an object of this call
 * alone, user-mode faults only): no zeroing pass, no fault a page; the pages
 * in memory are copied here. A buffer mostly in memory, a kernel or a
 * sandbox without userfaultfd, memory it refuses (a device or file mapping):
 * memcpy, after oobx__prefault_write. Returns 1 when the kernel filled
 * pages, else 0. The caller owns dst for the call: another thread that
 * touches it meanwhile waits for the copy (user mode) or gets EFAULT (a
 * system call). */
int oobx__copy_fresh(void *dst, const void *src, size_t len);

/* A rate limiter for warnings triggered from outside (stray clients). */
typedef struct oobx_ratelimit {
    uint64_t window_start_ns;
    unsigned count;
    unsigned suppressed;
} oobx_ratelimit_t;
/* 1 when this event may be logged (at most 5 per 10 s); counts the rest. */
int oobx__ratelimit_ok(oobx_ratelimit_t *rl);

/* Appends printf output to the string in buf (len bytes in all), truncating. */
void oobx__appendf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define OOBX_MIN(a, b) ((a) < (b) ? (a) : (b))
#define OOBX_MAX(a, b) ((a) > (b) ? (a) : (b))
#define OOBX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
