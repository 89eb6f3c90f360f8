/* The unique-id start, in one process: rank 0 makes the id, every rank is a
 * thread here (in a real job the id travels by MPI, a file or a launcher). */
#include <oobx.h>
#include <pthread.h>
#include <stdio.h>

#define NRANKS 4
static oobx_unique_id_t id;

static void *rank_main(void *arg)
{
    int rank = (int)(long)arg, value = rank * 10;
    oobx_comm_t comm;
    oobx_config_t cfg = OOBX_CONFIG_INIT;
    cfg.transport = "socket";
    cfg.timeout_ms = 30000;
    if (oobx_comm_init(&comm, NRANKS, rank, 1, &id, &cfg) != OOBX_SUCCESS) {
        fprintf(stderr, "rank %d: %s\n", rank, oobx_last_error());
        return (void *)1;
    }
    oobx_bcast(comm, 2, &value, sizeof(value)); /* everyone gets rank 2's value */
    printf("rank %d: value %d\n", rank, value);
    oobx_comm_destroy(comm);
    return value == 20 ? NULL : (void *)1;
}

int main(void)
{
    pthread_t t[NRANKS];
    if (oobx_get_unique_id(&id) != OOBX_SUCCESS) return 1;
    for (long r = 0; r < NRANKS; r++) pthread_create(&t[r], NULL, rank_main, (void *)r);
    int bad = 0;
    for (int r = 0; r < NRANKS; r++) {
        void *ret;
        pthread_join(t[r], &ret);
        bad |= ret != NULL;
    }
    return bad;
}
