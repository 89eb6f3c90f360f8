/* Every rank publishes a small card and gets everyone's; rank 0 then sends
 * each rank a greeting. Run: build/bin/oobx-run -n 4 -- build/docs/hello */
#include <oobx.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    oobx_comm_t comm;
    int rank, n;
    if (oobx_comm_init_from_env(&comm, NULL) != OOBX_SUCCESS) {
        fprintf(stderr, "init: %s\n", oobx_last_error());
        return 1;
    }
    oobx_comm_rank(comm, &rank);
    oobx_comm_size(comm, &n);

    int *cards = calloc((size_t)n, sizeof(int));
    cards[rank] = 1000 + rank;                                 /* my business card */
    int rc = oobx_allgather(comm, cards, sizeof(int));         /* in place */
    if (rc == OOBX_SUCCESS && rank == 0)
        for (int peer = 1; peer < n && rc == OOBX_SUCCESS; peer++)
            rc = oobx_send(comm, peer, 7, &cards[peer], sizeof(int));
    int mine = 0;
    if (rc == OOBX_SUCCESS && rank != 0) rc = oobx_recv(comm, 0, 7, &mine, sizeof(mine), NULL);
    if (rc == OOBX_SUCCESS) rc = oobx_barrier(comm);
    if (rc != OOBX_SUCCESS) fprintf(stderr, "rank %d: %s\n", rank, oobx_last_error());
    else printf("rank %d of %d over %s: card %d\n", rank, n, oobx_comm_transport(comm), rank ? mine : cards[0]);
    free(cards);
    oobx_comm_destroy(comm);
    return rc == OOBX_SUCCESS ? 0 : 1;
}
