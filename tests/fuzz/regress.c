/*
 * Runs a fuzz target as a plain program: over every file of the given
 * directories (the committed corpus), and over built-in short, empty and
 * all-ones inputs. Exit 0 when no input crashed or tripped a check.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "regress: %s: cannot open\n", path);
        return -1;
    }
    unsigned char *buf = malloc(1 << 20);
    if (!buf) {
        fclose(f);
        return -1;
    }
    size_t n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    /* an exact-size copy, so that reads past the end are caught under ASan */
    unsigned char *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int run_dir(const char *dir, int *count)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "regress: %s: not a directory\n", dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) break;
            names = nn;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(path) != 0) rc = -1;
            (*count)++;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    int count = 0, rc = 0;
    unsigned char ones[4096], zeros[4096];
    memset(ones, 0xff, sizeof ones);
    memset(zeros, 0, sizeof zeros);
    for (size_t len = 0; len <= 200; len++) {
        unsigned char *a = malloc(len ? len : 1), *b = malloc(len ? len : 1);
        if (!a || !b) return 1;
        memcpy(a, ones, len);
        memcpy(b, zeros, len);
        LLVMFuzzerTestOneInput(a, len);
        LLVMFuzzerTestOneInput(b, len);
        free(a);
        free(b);
        count += 2;
    }
    LLVMFuzzerTestOneInput(ones, sizeof ones);
    count++;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            if (run_dir(argv[i], &count) != 0) rc = 1;
        } else {
            if (run_file(argv[i]) != 0) rc = 1;
            count++;
        }
    }
    printf("%s: %d inputs, %s\n", argv[0], count, rc ? "some could not be read" : "all passed");
    return rc;
}
