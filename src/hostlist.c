/*
 * Slurm's hostlist syntax and task layout: "n[1-3,7],gpu[01-02]-ib" names
 * n1 n2 n3 n7 gpu01-ib gpu02-ib; a name may hold several bracket groups
 * (rack[1-2]n[1-2]: rack1n1 rack1n2 rack2n1 rack2n2). Tasks per node:
 * "4(x2),3" is 4 4 3.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "util.h"

/* One range of a bracket group: lo..hi, printed with width digits. */
typedef struct hl_range {
    long lo, hi;
    int width;
} hl_range_t;

/* The ranges of the group text "1-3,07" (without brackets). Returns their
 * count (at most max), or -1. */
static int group_parse(const char *s, size_t len, hl_range_t *r, int max)
{
    int n = 0;
    size_t i = 0;
    while (i < len) {
        if (n == max) return -1;
        size_t a = i;
        while (i < len && s[i] >= '0' && s[i] <= '9') i++;
        if (i == a || i - a > 9) return -1;
        r[n].width = (int)(i - a);
        r[n].lo = strtol(s + a, NULL, 10);
        r[n].hi = r[n].lo;
        if (i < len && s[i] == '-') {
            size_t b = ++i;
            while (i < len && s[i] >= '0' && s[i] <= '9') i++;
            if (i == b || i - b > 9) return -1;
            r[n].hi = strtol(s + b, NULL, 10);
            if (r[n].hi < r[n].lo) return -1;
        }
        n++;
        if (i < len) {
            if (s[i] != ',' || i + 1 == len) return -1;
            i++;
        }
    }
    return n;
}

static long group_count(const hl_range_t *r, int n)
{
    long c = 0;
    for (int i = 0; i < n; i++) c += r[i].hi - r[i].lo + 1;
    return c;
}

#define HL_MAX_RANGES 256
#define HL_MAX_GROUPS 4

/* Walks one item (a name with up to HL_MAX_GROUPS bracket groups): its
 * count, and with out its idx-th name. Returns the count or -1. */
static long item_walk(const char *s, size_t len, long idx, char *out, size_t outlen)
{
    struct {
        size_t lit_at, lit_len; /* the literal before the group */
        hl_range_t r[HL_MAX_RANGES];
        int nr;
        long count;
    } g[HL_MAX_GROUPS];
    int ng = 0;
    size_t i = 0, lit = 0;
    while (i < len) {
        if (s[i] == ']') return -1;
        if (s[i] != '[') {
            i++;
            continue;
        }
        if (ng == HL_MAX_GROUPS) return -1;
        size_t open = i, close = i + 1;
        while (close < len && s[close] != ']') {
            if (s[close] == '[') return -1;
            close++;
        }
        if (close == len) return -1;
        g[ng].lit_at = lit;
        g[ng].lit_len = open - lit;
        g[ng].nr = group_parse(s + open + 1, close - open - 1, g[ng].r, HL_MAX_RANGES);
        if (g[ng].nr <= 0) return -1;
        g[ng].count = group_count(g[ng].r, g[ng].nr);
        ng++;
        i = lit = close + 1;
    }
    long total = 1;
    for (int k = 0; k < ng; k++) {
        if (total > INT_MAX / g[k].count) return -1;
        total *= g[k].count;
    }
    if (!out) return total;
    if (idx < 0 || idx >= total) return -1;
    /* mixed radix: the first group varies slowest */
    long digit[HL_MAX_GROUPS];
    for (int k = ng - 1; k >= 0; k--) {
        digit[k] = idx % g[k].count;
        idx /= g[k].count;
    }
    out[0] = '\0';
    for (int k = 0; k < ng; k++) {
        oobx__appendf(out, outlen, "%.*s", (int)g[k].lit_len, s + g[k].lit_at);
        long d = digit[k];
        for (int j = 0; j < g[k].nr; j++) {
            long c = g[k].r[j].hi - g[k].r[j].lo + 1;
            if (d < c) {
                oobx__appendf(out, outlen, "%0*ld", g[k].r[j].width, g[k].r[j].lo + d);
                break;
            }
            d -= c;
        }
    }
    oobx__appendf(out, outlen, "%.*s", (int)(len - lit), s + lit);
    return strlen(out) + 1 >= outlen ? -1 : total;
}

/* Walks the list: the count, or with out the idx-th name. */
static long list_walk(const char *list, long idx, char *out, size_t outlen, char *why, size_t whylen)
{
    long total = 0;
    const char *p = list;
    if (!*p) {
        snprintf(why, whylen, "the hostlist is empty");
        return -1;
    }
    while (*p) {
        const char *q = p;
        int depth = 0;
        while (*q && (depth || *q != ',')) {
            if (*q == '[') depth++;
            else if (*q == ']') depth--;
            if (depth < 0 || depth > 1) break;
            q++;
        }
        if (q == p || depth != 0 || (*q && *q != ',')) {
            snprintf(why, whylen, "hostlist \"%s\" is malformed at \"%s\"", list, p);
            return -1;
        }
        long n = item_walk(p, (size_t)(q - p), 0, NULL, 0);
        if (n < 0) {
            snprintf(why, whylen, "hostlist \"%s\": \"%.*s\" is malformed", list, (int)(q - p), p);
            return -1;
        }
        if (out && idx < total + n) {
            if (item_walk(p, (size_t)(q - p), idx - total, out, outlen) < 0) {
                snprintf(why, whylen, "hostlist \"%s\": name %ld does not fit in %zu bytes", list, idx, outlen);
                return -1;
            }
            return total + n;
        }
        total += n;
        if (total > INT_MAX) {
            snprintf(why, whylen, "hostlist \"%s\" names too many hosts", list);
            return -1;
        }
        p = *q ? q + 1 : q;
        if (*q && !*p) {
            snprintf(why, whylen, "hostlist \"%s\" ends with a comma", list);
            return -1;
        }
    }
    if (out) {
        snprintf(why, whylen, "hostlist \"%s\" names %ld hosts, not %ld", list, total, idx + 1);
        return -1;
    }
    return total;
}

int oobx__hostlist_count(const char *list, char *why, size_t whylen)
{
    return (int)list_walk(list, 0, NULL, 0, why, whylen);
}

int oobx__hostlist_nth(const char *list, int idx, char *out, size_t outlen, char *why, size_t whylen)
{
    /* the whole list is checked first: a name from a malformed list is no answer */
    if (list_walk(list, 0, NULL, 0, why, whylen) < 0) return -1;
    return list_walk(list, idx, out, outlen, why, whylen) < 0 ? -1 : 0;
}

int oobx__tasks_per_node(const char *spec, int *counts, int n, char *why, size_t whylen)
{
    int k = 0;
    const char *p = spec;
    while (*p) {
        char *end;
        long c = strtol(p, &end, 10);
        long rep = 1;
        if (end == p || c < 0 || c > INT_MAX) goto bad;
        p = end;
        if (*p == '(') {
            if (p[1] != 'x') goto bad;
            rep = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || rep < 1) goto bad;
            p = end + 1;
        }
        for (long r = 0; r < rep; r++) {
            if (k == n) {
                snprintf(why, whylen, "tasks per node \"%s\" names more than the %d nodes of the step", spec, n);
                return -1;
            }
            counts[k++] = (int)c;
        }
        if (*p == ',') {
            p++;
            if (!*p) goto bad;
        } else if (*p) {
            goto bad;
        }
    }
    if (k != n) {
        snprintf(why, whylen, "tasks per node \"%s\" names %d nodes, the step has %d", spec, k, n);
        return -1;
    }
    return 0;
bad:
    snprintf(why, whylen, "tasks per node \"%s\" is malformed at \"%s\"", spec, p);
    return -1;
}

int oobx__task_node(const int *counts, int nnodes, int rank, const char *dist)
{
    if (rank < 0) return -1;
    if (!dist || !*dist || !strncmp(dist, "block", 5)) {
        for (int j = 0, first = 0; j < nnodes; first += counts[j], j++)
            if (rank < first + counts[j]) return j;
        return -1;
    }
    if (!strncmp(dist, "cyclic", 6)) {
        /* round robin: pass after pass, each node with room takes the next rank */
        int placed = 0;
        for (int pass = 0;; pass++) {
            int any = 0;
            for (int j = 0; j < nnodes; j++) {
                if (counts[j] <= pass) continue;
                any = 1;
                if (placed++ == rank) return j;
            }
            if (!any) return -1;
        }
    }
    return -1;
}

int oobx__slurm_port(const char *job_id, int lo, int hi, int root)
{
    uint64_t width = (uint64_t)(hi - lo + 1);
    uint64_t h = oobx__hash64(job_id, strlen(job_id), 0x706f7274ull);
    return lo + (int)((h + (uint64_t)root) % width);
}

/* Digits only: no sign, no space, at most 5 of them. */
static int port_digits(const char *p, const char **end, long *out)
{
    long v = 0;
    const char *q = p;
    for (; *q >= '0' && *q <= '9' && q - p < 6; q++) v = v * 10 + (*q - '0');
    if (q == p || q - p > 5) return -1;
    *end = q;
    *out = v;
    return 0;
}

int oobx__port_range_parse(const char *text, int *lo, int *hi)
{
    const char *end;
    long a, z;
    if (port_digits(text, &end, &a) != 0 || *end != '-') return -1;
    if (port_digits(end + 1, &end, &z) != 0 || *end) return -1;
    if (a < 1 || z > 65535 || a > z) return -1;
    *lo = (int)a;
    *hi = (int)z;
    return 0;
}
