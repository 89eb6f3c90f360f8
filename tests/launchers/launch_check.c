/*
 * launch-check: one rank of a job started by a real launcher (srun, mpirun,
 * mpiexec, a torchrun-style loop), with nothing of oobx set by hand. Joins
 * through oobx_comm_init_from_env and runs a quick conformance subset: the
 * allgather of every rank's card, a broadcast from every root, a ring of
 * point-to-point messages, barriers and a split by parity; each result is
 * checked. Prints "launch-check: rank R of N ok" or names what failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oobx.h"

typedef struct card {
    int rank, nranks;
    int pid;
    char host[64];
} card_t;

static int fail(int rank, const char *what, int rc)
{
    printf("launch-check: rank %d FAILED: %s: %s (%s)\n", rank, what, oobx_strerror(rc), oobx_last_error());
    return 1;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    oobx_comm_t comm;
    int rc = oobx_comm_init_from_env(&comm, NULL);
    if (rc) return fail(-1, "oobx_comm_init_from_env", rc);
    int rank, n;
    oobx_comm_rank(comm, &rank);
    oobx_comm_size(comm, &n);
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
    if ((rc = oobx_allgather(comm, cards, sizeof(*cards)))) return fail(rank, "allgather", rc);
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
