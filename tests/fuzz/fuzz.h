/* Shared by the fuzz targets: libFuzzer's entry point, and a check that a
 * parser's reason text is a terminated string. */
#ifndef OOBX_TESTS_FUZZ_H
#define OOBX_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_WHY_BYTES 256

/* A failed parse must leave a non-empty, terminated reason. */
static inline void fuzz_check_why(const char *why, int rc, const char *what)
{
    if (rc == 0) return;
    size_t n = strnlen(why, FUZZ_WHY_BYTES);
    if (n == 0 || n >= FUZZ_WHY_BYTES) {
        fprintf(stderr, "%s: rejected input (rc %d) without a reason text\n", what, rc);
        abort();
    }
}

#define FUZZ_ASSERT(cond, ...)                                      \
    do {                                                            \
        if (!(cond)) {                                              \
            fprintf(stderr, "fuzz check failed: %s: ", #cond);      \
            fprintf(stderr, __VA_ARGS__);                           \
            fprintf(stderr, "\n");                                  \
            abort();                                                \
        }                                                           \
    } while (0)

#endif
