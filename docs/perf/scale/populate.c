/* What fresh memory costs this machine: maps MiB mebibytes of anonymous
 * memory and fills its page tables (MADV_POPULATE_WRITE), twice, then maps
 * 1.25 MiB (the result of a 10,240-rank allgather of 128-byte cards) fifty
 * times, populates it and copies into it.
 *   cc -O2 -o populate docs/perf/scale/populate.c && ./populate 12000 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    size_t big = (size_t)atol(argc > 1 ? argv[1] : "1024") << 20;
    for (int i = 0; i < 2; i++) {
        char *p = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return 1;
        double t0 = now();
        madvise(p, big, MADV_POPULATE_WRITE);
        double t1 = now();
        printf("%zu MiB populated in %.3f s: %.2f us a 4 KiB page\n", big >> 20, t1 - t0,
               (t1 - t0) * 1e6 / (double)(big / 4096));
        munmap(p, big);
    }
    size_t n = 10240 * 128;
    char *src = malloc(n);
    if (!src) return 1;
    memset(src, 1, n);
    double a = 0, b = 0;
    for (int i = 0; i < 50; i++) {
        char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return 1;
        double t0 = now();
        madvise(p, n, MADV_POPULATE_WRITE);
        double t1 = now();
        memcpy(p, src, n);
        double t2 = now();
        a += t1 - t0;
        b += t2 - t1;
        munmap(p, n);
    }
    printf("1.25 MiB: populate %.0f us, copy into it %.0f us (means of 50)\n", a / 50 * 1e6, b / 50 * 1e6);
    free(src);
    return 0;
}
