/*
 * launch-check: one rank of a job started by a real launcher (srun, mpirun,
 * mpiexec, a torchrun-style loop), with nothing of oobx set by hand. Joins
 * through oobx_comm_init_from_env and runs a quick conformance subset: the
 * allgather of every rank's card, a broadcast from every root, a ring of
 * point-to-point messages, barriers and a split by parity; each result is
 * checked. Prints "launch-check: rank R of N ok" or names what failed.
 *
 * LAUNCH_CHECK_NETNS=K: the ranks must span K network namespaces (emulated
 * nodes); LAUNCH_CHECK_LOCAL=L: L ranks must share this rank's host table of
 * the node-aware bootstrap.
 *
 * With LAUNCH_CHECK_SECOND set, a second oobx_comm_init_from_env is tried
 * while the first communicator lives, and its outcome printed.
 * "launch-check hold PORT" takes TCP port PORT on every address and holds it
 * (PORT 0: a free one, printed)
 * until killed (the test of the Slurm "port taken" error).
 */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oobx.h"
#include "oobx_debug.h"

typedef struct card {
    int rank, nranks;
    int pid;
    char host[64];
    unsigned long long netns; /* inode of the rank's network namespace */
} card_t;

static int fail(int rank, const char *what, int rc)
{
    printf("launch-check: rank %d FAILED: %s: %s (%s)\n", rank, what, oobx_strerror(rc), oobx_last_error());
    return 1;
}

static int hold_port(const char *text)
{
    int port = atoi(text), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 4) != 0) {
        perror("launch-check hold");
        return 1;
    }
    /* port 0: one the kernel picks, free at this moment (a fixed one may be
     * some other process's ephemeral port) */
    socklen_t alen = sizeof(a);
    if (port == 0 && getsockname(fd, (struct sockaddr *)&a, &alen) == 0) port = ntohs(a.sin_port);
    printf("launch-check: holding port %d\n", port);
    for (;;) pause();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && !strcmp(argv[1], "hold")) return hold_port(argv[2]);
    oobx_comm_t comm;
    int rc = oobx_comm_init_from_env(&comm, NULL);
    if (rc) return fail(-1, "oobx_comm_init_from_env", rc);
    int rank, n;
    oobx_comm_rank(comm, &rank);
    oobx_comm_size(comm, &n);
    /* LAUNCH_CHECK_SECOND: a second oobx_comm_init_from_env while the first
     * communicator lives; its outcome is printed, the first is checked as always */
    if (getenv("LAUNCH_CHECK_SECOND")) {
        oobx_comm_t second;
        int r2 = oobx_comm_init_from_env(&second, NULL);
        if (r2 == 0) {
            int sr = -1, sn = -1;
            oobx_comm_rank(second, &sr);
            oobx_comm_size(second, &sn);
            int *all = calloc((size_t)n, sizeof(int));
            all[rank] = rank + 1;
            int bad = sr != rank || sn != n || oobx_allgather(second, all, sizeof(int)) != 0;
            for (int r = 0; !bad && r < n; r++) bad = all[r] != r + 1;
            free(all);
            if (bad) return fail(rank, "the second communicator", OOBX_ERR_MISMATCH);
            printf("launch-check: rank %d second communicator ok\n", rank);
            oobx_comm_destroy(second);
        } else {
            printf("launch-check: rank %d second communicator refused: %s\n", rank, oobx_last_error());
        }
    }
    const char *want = getenv("LAUNCH_CHECK_NRANKS");
    if (want && atoi(want) != n) {
        printf("launch-check: rank %d FAILED: size %d, the launcher started %s\n", rank, n, want);
        return 1;
    }
    card_t *cards = calloc((size_t)n, sizeof(*cards));
    cards[rank].rank = rank;
    cards[rank].nranks = n;
    cards[rank].pid = (int)getpid();
    gethostname(cards[rank].host, sizeof(cards[rank].host) - 1);
    struct stat ns;
    if (stat("/proc/self/ns/net", &ns) == 0) cards[rank].netns = (unsigned long long)ns.st_ino;
    if ((rc = oobx_allgather(comm, cards, sizeof(*cards)))) return fail(rank, "allgather", rc);
    const char *want_ns = getenv("LAUNCH_CHECK_NETNS");
    if (want_ns) {
        int distinct = 0;
        for (int r = 0; r < n; r++) {
            int seen = 0;
            for (int q = 0; q < r && !seen; q++) seen = cards[q].netns == cards[r].netns;
            distinct += !seen;
        }
        if (distinct != atoi(want_ns)) {
            printf("launch-check: rank %d FAILED: the ranks span %d network namespaces, want %s\n", rank, distinct,
                   want_ns);
            return 1;
        }
    }
    const char *want_local = getenv("LAUNCH_CHECK_LOCAL");
    oobx_init_timings_t t = OOBX_INIT_TIMINGS_INIT;
    if (want_local && (oobx_comm_get_init_timings(comm, &t) != 0 || t.local_ranks != atoi(want_local))) {
        printf("launch-check: rank %d FAILED: %d ranks share its host table, want %s\n", rank, t.local_ranks,
               want_local);
        return 1;
    }
    for (int r = 0; r < n; r++)
        if (cards[r].rank != r || cards[r].nranks != n || cards[r].pid == 0) {
            printf("launch-check: rank %d FAILED: card %d says rank %d of %d, pid %d\n", rank, r, cards[r].rank,
                   cards[r].nranks, cards[r].pid);
            return 1;
        }
    for (int r = 0; r < n; r++)
        for (int q = r + 1; q < n; q++)
            if (cards[r].pid == cards[q].pid && !strcmp(cards[r].host, cards[q].host)) {
                printf("launch-check: rank %d FAILED: ranks %d and %d are one process (pid %d on %s)\n", rank, r, q,
                       cards[r].pid, cards[r].host);
                return 1;
            }
    for (int root = 0; root < n; root++) {
        long v = rank == root ? 1000L + root : -1;
        if ((rc = oobx_bcast(comm, root, &v, sizeof(v)))) return fail(rank, "bcast", rc);
        if (v != 1000L + root) {
            printf("launch-check: rank %d FAILED: bcast from %d gave %ld\n", rank, root, v);
            return 1;
        }
    }
    int token = rank, got = -1;
    if ((rc = oobx_send(comm, (rank + 1) % n, 7, &token, sizeof(token)))) return fail(rank, "send", rc);
    if ((rc = oobx_recv(comm, (rank + n - 1) % n, 7, &got, sizeof(got), NULL))) return fail(rank, "recv", rc);
    if (got != (rank + n - 1) % n) {
        printf("launch-check: rank %d FAILED: ring message %d, want %d\n", rank, got, (rank + n - 1) % n);
        return 1;
    }
    oobx_comm_t half;
    if ((rc = oobx_comm_split(comm, rank % 2, rank, &half))) return fail(rank, "split", rc);
    int hr, hn;
    oobx_comm_rank(half, &hr);
    oobx_comm_size(half, &hn);
    int *ranks = calloc((size_t)hn, sizeof(int));
    ranks[hr] = rank;
    if ((rc = oobx_allgather(half, ranks, sizeof(int)))) return fail(rank, "allgather in the split", rc);
    for (int i = 0; i < hn; i++)
        if (ranks[i] != 2 * i + rank % 2) {
            printf("launch-check: rank %d FAILED: split member %d is rank %d\n", rank, i, ranks[i]);
            return 1;
        }
    if ((rc = oobx_barrier(half)) || (rc = oobx_barrier(comm))) return fail(rank, "barrier", rc);
    oobx_comm_destroy(half);
    oobx_comm_destroy(comm);
    printf("launch-check: rank %d of %d ok\n", rank, n);
    free(ranks);
    free(cards);
    return 0;
}
