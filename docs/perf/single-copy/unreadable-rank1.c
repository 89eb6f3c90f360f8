/* LD_PRELOAD shim for docs/perf/single-copy/vm-2core-direct-skip-2026-12-04.txt:
 * gcc -shared -fPIC -O2 unreadable-rank1.c -o unreadable-rank1.so */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* rank 1 runs as nobody: the other ranks' memory is closed to it */
__attribute__((constructor)) static void shim(void)
{
    const char *r = getenv("OOBX_RANK");
    if (r && !strcmp(r, "1") && geteuid() == 0) (void)setresuid(65534, 65534, 65534);
}
