/*
 * An application that defines functions named like common library
 * internals. Linked against liboobx.so or liboobx.a, it must still start and
 * run its 4 ranks: oobx's own internals are hidden or reserved (oobx__), so
 * none of these can replace or collide with them.
 */
#include <oobx.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* If the library called any of these, the job would fail loudly. */
int sock_listen(void *a, int b) { (void)a; (void)b; fprintf(stderr, "clash: application sock_listen called\n"); abort(); }
int ep_create(void *a, void *b, void *c) { (void)a; (void)b; (void)c; fprintf(stderr, "clash: application ep_create called\n"); abort(); }
int coll_allgather(void *a, void *b, void *c, size_t d, const char *e) { (void)a; (void)b; (void)c; (void)d; (void)e; fprintf(stderr, "clash: application coll_allgather called\n"); abort(); }
int ringbuf_init(void) { fprintf(stderr, "clash: application ringbuf_init called\n"); abort(); }
int root_start(void) { fprintf(stderr, "clash: application root_start called\n"); abort(); }
int topo_pick_if(void) { fprintf(stderr, "clash: application topo_pick_if called\n"); abort(); }
int settings_load(void) { fprintf(stderr, "clash: application settings_load called\n"); abort(); }

int main(void)
{
    oobx_comm_t comm;
    int rc = oobx_comm_init_from_env(&comm, NULL);
    if (rc) return fprintf(stderr, "clash: init: %s\n", oobx_last_error()), 1;
    int rank, n;
    oobx_comm_rank(comm, &rank);
    oobx_comm_size(comm, &n);
    int *v = calloc((size_t)n, sizeof *v);
    v[rank] = 1000 + rank;
    rc = oobx_allgather(comm, v, sizeof *v);
    for (int r = 0; rc == 0 && r < n; r++)
        if (v[r] != 1000 + r) {
            fprintf(stderr, "clash: rank %d: slot %d holds %d\n", rank, r, v[r]);
            rc = 1;
        }
    int token = rank == 0 ? 77 : 0;
    if (rc == 0) rc = oobx_bcast(comm, 0, &token, sizeof token);
    if (rc == 0 && token != 77) rc = 1;
    if (rc == 0) rc = oobx_barrier(comm);
    if (rc) fprintf(stderr, "clash: rank %d: %s\n", rank, oobx_last_error());
    else printf("clash: rank %d of %d over %s: ok (library %s)\n", rank, n, oobx_comm_transport(comm), oobx_version());
    free(v);
    oobx_comm_destroy(comm);
    return rc ? 1 : 0;
}
