/* The example of README.md, word for word (tests/abi/check-install.sh builds it
 * against an installed oobx with pkg-config). */
#include <oobx.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(void)
{
    oobx_comm_t comm;                       /* rank, size and roots from the environment: */
    if (oobx_comm_init_from_env(&comm, NULL)) /* OOBX_RANK/OOBX_NRANKS/OOBX_COMM_ID, Slurm, */
        return fprintf(stderr, "%s\n", oobx_last_error()), 1; /* Open MPI, PMI, torchrun */
    int rank, n;
    oobx_comm_rank(comm, &rank);
    oobx_comm_size(comm, &n);

    struct card { char host[64]; int dev; } *cards = calloc(n, sizeof *cards);
    gethostname(cards[rank].host, 64);
    oobx_allgather(comm, cards, sizeof *cards);            /* everyone's card, in place */

    int token = 0;
    if (rank == 0) oobx_send(comm, n - 1, 42, &token, sizeof token);
    if (rank == n - 1) oobx_recv(comm, 0, 42, &token, sizeof token, NULL);
    oobx_barrier(comm);
    oobx_comm_destroy(comm);
}
