/* How the copy-out of a large allgather within one host should store.
 *
 * N processes (fork) each hold a slice of S bytes in a shared mapping (the
 * mapped buffers of oobx_mem_alloc, or the stage of a plain-memory call)
 * and copy the N - 1 other slices into a private result buffer of N * S
 * bytes, starting at the next rank, between two barriers, as oobx's direct
 * allgather does. Stores: glibc's memcpy, or non-temporal stores (SSE2
 * 16-byte, AVX2 32-byte) that skip reading the destination's lines first,
 * or the string move (rep movsb).
 * Modes: "mapped" (the slices unchanged between calls), "staged" (every
 * call first copies the rank's own slice from private memory into the
 * shared one, then the others read it), "touch" (staged, with the private
 * slice rewritten before every call: new data each time); "staged" and
 * "touch" once with the own slice copied in by memcpy, once by
 * non-temporal stores ("-ntin": the readers then find it in memory, not
 * modified in the writer's cache).
 *
 *   cc -O2 -o ntcopy docs/perf/single-copy/ntcopy.c
 *   ./ntcopy [S_BYTES] [ITERS]     prints one line per ranks x mode x store
 *
 * Bus bandwidth as oobx-bench reports it: (N - 1) * S / time per call.
 * A measurement program, not part of the library: its barrier spins (one
 * core per process is assumed). */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    _Atomic unsigned count;
    _Atomic unsigned gen;
    double result;
} shared_t;

static void barrier(shared_t *sh, int n)
{
    unsigned g = atomic_load(&sh->gen);
    if (atomic_fetch_add(&sh->count, 1) + 1 == (unsigned)n) {
        atomic_store(&sh->count, 0);
        atomic_fetch_add(&sh->gen, 1);
        return;
    }
    while (atomic_load(&sh->gen) == g) _mm_pause();
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* dst and src 64-byte aligned, len a multiple of 64 (the slices here are) */
static void copy_nt_sse2(void *dst, const void *src, size_t len)
{
    __m128i *d = dst;
    const __m128i *s = src;
    for (size_t i = 0; i < len / 16; i += 4) {
        __m128i a = _mm_load_si128(s + i), b = _mm_load_si128(s + i + 1);
        __m128i c = _mm_load_si128(s + i + 2), e = _mm_load_si128(s + i + 3);
        _mm_stream_si128(d + i, a);
        _mm_stream_si128(d + i + 1, b);
        _mm_stream_si128(d + i + 2, c);
        _mm_stream_si128(d + i + 3, e);
    }
    _mm_sfence();
}

__attribute__((target("avx2"))) static void copy_nt_avx2(void *dst, const void *src, size_t len)
{
    __m256i *d = dst;
    const __m256i *s = src;
    for (size_t i = 0; i < len / 32; i += 2) {
        __m256i a = _mm256_load_si256(s + i), b = _mm256_load_si256(s + i + 1);
        _mm256_stream_si256(d + i, a);
        _mm256_stream_si256(d + i + 1, b);
    }
    _mm_sfence();
}

typedef void (*copy_fn)(void *, const void *, size_t);

/* the string move, which glibc's memcpy may or may not pick for a size */
static void copy_movsb(void *dst, const void *src, size_t len)
{
    __asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(len) : : "memory");
}

static void copy_libc(void *dst, const void *src, size_t len)
{
    memcpy(dst, src, len);
}

static double run(int n, size_t S, int iters, int mode, copy_fn in, copy_fn out)
{
    size_t shl = (sizeof(shared_t) + 4095) & ~(size_t)4095;
    shared_t *sh = mmap(NULL, shl + (size_t)n * S, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return -1;
    memset(sh, 0, sizeof(*sh));
    unsigned char *slices = (unsigned char *)sh + shl;
    for (int r = 0; r < n; r++) memset(slices + (size_t)r * S, r + 1, S);
    for (int me = 0; me < n; me++) {
        pid_t p = fork();
        if (p < 0) return -1;
        if (p > 0) continue;
        unsigned char *res = aligned_alloc(64, (size_t)n * S);
        if (!res) _exit(1);
        memset(res, 0, (size_t)n * S);
        unsigned char *own = res + (size_t)me * S;
        memset(own, me + 1, S);
        double t0 = 0;
        for (int it = -iters / 10; it < iters; it++) {
            if (it == 0) {
                barrier(sh, n);
                t0 = now();
            }
            if (mode == 2) memset(own, (me + it) & 0xff, S); /* new data every call */
            if (mode >= 1) in(slices + (size_t)me * S, own, S);
            barrier(sh, n);
            for (int i = 1; i < n; i++) {
                int q = (me + i) % n;
                out(res + (size_t)q * S, slices + (size_t)q * S, S);
            }
            barrier(sh, n);
        }
        if (me == 0) sh->result = (now() - t0) / iters;
        _exit(0);
    }
    for (int i = 0; i < n; i++) wait(NULL);
    double t = sh->result;
    munmap(sh, shl + (size_t)n * S);
    return t;
}

int main(int argc, char **argv)
{
    size_t S = argc > 1 ? strtoull(argv[1], NULL, 0) : 1u << 20;
    int iters = argc > 2 ? atoi(argv[2]) : 200;
    if (S == 0 || S % 64) {
        fprintf(stderr, "ntcopy: S must be a positive multiple of 64\n");
        return 1;
    }
    const char *modes[] = {"mapped", "staged", "touch", "staged-ntin", "touch-ntin"};
    struct {
        const char *name;
        copy_fn fn;
    } stores[] = {{"memcpy", copy_libc}, {"nt-sse2", copy_nt_sse2}, {"nt-avx2", copy_nt_avx2}, {"movsb", copy_movsb}};
    int have_avx2 = __builtin_cpu_supports("avx2");
    int counts[] = {2, 4, 8};
    for (int ci = 0; ci < 3; ci++) {
        int n = counts[ci];
        if (n > sysconf(_SC_NPROCESSORS_ONLN)) continue;
        for (int m = 0; m < 5; m++)
            for (int s = 0; s < 4; s++) {
                if (s == 2 && !have_avx2) continue;
                copy_fn in = m >= 3 ? (have_avx2 ? copy_nt_avx2 : copy_nt_sse2) : copy_libc;
                double t = run(n, S, iters, m >= 3 ? m - 2 : m, in, stores[s].fn);
                if (t <= 0) {
                    printf("n%d %s %s failed\n", n, modes[m], stores[s].name);
                    continue;
                }
                printf("n%d %-11s %-7s %8.1f us  busbw %6.2f GB/s\n", n, modes[m], stores[s].name, t * 1e6,
                       (double)(n - 1) * (double)S / t / 1e9);
                fflush(stdout);
            }
    }
    return 0;
}
