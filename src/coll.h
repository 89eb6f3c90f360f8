/*
 * Collectives over an endpoint view: the pipelined ring and Bruck
 * allgathers, the dissemination barrier, the pipelined binomial broadcast.
 * Every algorithm runs over a group (a subset of the view's ranks, or all of
 * them). Called with the endpoint lock held.
 */
#ifndef OOBX_COLL_H
#define OOBX_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "ep.h"

typedef struct coll_group {
    int n, me;
    const int *members; /* view ranks, NULL: all */
    uint64_t gid;       /* 0: the whole view */
    uint32_t seq;
    unsigned op;        /* COLL_OP_*, set by the call (0 before) */
    int root;           /* the broadcast's root (group rank), 0 otherwise */
    /* the group's calls left that skip the direct allgather ([0]) and the
     * direct broadcast ([1]) after one fell back (the same counts on every
     * member: only the group's own calls change them), or NULL */
    uint32_t *direct_skip;
} coll_group_t;

/* After a direct allgather fell back to the ring, the group's next this
 * many direct-eligible allgathers take the ring at once; the one after
 * tries again. */
#define OOBX_DIRECT_RETRY_AFTER 63

/* the COLL_OP_* of a call, and collective tags: ep.h */

int oobx__coll_allgather(const oobx__ep_view_t *c, const coll_group_t *g, void *buf, size_t bpr, const char *algo);
int oobx__coll_barrier(const oobx__ep_view_t *c, const coll_group_t *g);
int oobx__coll_bcast(const oobx__ep_view_t *c, const coll_group_t *g, int root, void *buf, size_t bytes);
/* Ring allgather of variable-length items of at most cap bytes: items[i]
 * (cap bytes each) holds rank i's item, lens[i] its length; used at init.
 * landed (may be NULL) is told of each item as it arrives, before the call
 * ends (rank: the item's communicator rank), from the wait's progress. */
typedef void (*coll_landed_fn)(void *arg, int rank, const char *item, size_t len);
int oobx__coll_ring_allgatherv(const oobx__ep_view_t *c, const coll_group_t *g, char *items, size_t cap, size_t *lens,
                               coll_landed_fn landed, void *landed_arg);
/* The tag of the first message that call sends (its own item, to the next rank). */
uint64_t oobx__coll_ring_allgatherv_tag(const coll_group_t *g);

#endif
