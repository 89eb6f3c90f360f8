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
 * modified in the writer's cache); "pipelined": staged, but without the
 * barrier between the stage and the reads: each rank copies its slice in in
 * chunks (NT_CHUNK bytes, default 131072) and publishes how far it got, and
 * copies its peers' chunks out as they land, one of its own chunks, then
 * whatever its peers have published, in turn.
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
    _Atomic uint64_t staged[64]; /* pipelined: (call << 32) | bytes staged, per rank */
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
    const char *ce = getenv("NT_CHUNK");
    size_t chunk = ce ? strtoull(ce, NULL, 0) : 131072;
    if (chunk < 64 || chunk % 64) chunk = 131072;
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
            if (mode == 3) {
                /* pipelined: stage a chunk, copy out what the peers have staged, again */
                uint64_t stamp = (uint64_t)(uint32_t)(it + iters) << 32;
                size_t done[64] = {0}, mine = 0;
                int left = n - 1;
                while (left > 0 || mine < S) {
                    if (mine < S) {
                        size_t c = S - mine < chunk ? S - mine : chunk;
                        in(slices + (size_t)me * S + mine, own + mine, c);
                        mine += c;
                        atomic_store_explicit(&sh->staged[me], stamp | mine, memory_order_release);
                    }
                    int moved = 0;
                    for (int i = 1; i < n; i++) {
                        int q = (me + i) % n;
                        if (done[q] == S) continue;
                        uint64_t v = atomic_load_explicit(&sh->staged[q], memory_order_acquire);
                        if ((v & ~0xffffffffull) != stamp || (v & 0xffffffffull) <= done[q]) continue;
                        size_t upto = (size_t)(v & 0xffffffffull);
                        out(res + (size_t)q * S + done[q], slices + (size_t)q * S + done[q], upto - done[q]);
                        done[q] = upto;
                        moved = 1;
                        if (upto == S) left--;
                    }
                    if (!moved && mine == S) _mm_pause();
                }
                barrier(sh, n);
                continue;
            }
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
    const char *modes[] = {"mapped", "staged", "touch", "staged-ntin", "touch-ntin", "pipelined"};
    struct {
        const char *name;
        copy_fn fn;
    } stores[] = {{"memcpy", copy_libc}, {"nt-sse2", copy_nt_sse2}, {"nt-avx2", copy_nt_avx2}, {"movsb", copy_movsb}};
    int have_avx2 = __builtin_cpu_supports("avx2");
    int counts[] = {2, 4, 8};
    for (int ci = 0; ci < 3; ci++) {
        int n = counts[ci];
        if (n > sysconf(_SC_NPROCESSORS_ONLN)) continue;
        for (int m = 0; m < 6; m++)
            for (int s = 0; s < 4; s++) {
                if (s == 2 && !have_avx2) continue;
                copy_fn in = m == 3 || m == 4 ? (have_avx2 ? copy_nt_avx2 : copy_nt_sse2) : copy_libc;
                double t = run(n, S, iters, m == 5 ? 3 : m >= 3 ? m - 2 : m, in, stores[s].fn);
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
