/*
 * oobx diagnostics: calls for tools, tests and benchmarks that look inside a
 * communicator. Exported and kept stable like oobx.h, but not needed by
 * applications. Include after oobx.h.
 */
#ifndef OOBX_DEBUG_H
#define OOBX_DEBUG_H

#include <stddef.h>

#include "oobx.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds spent in each phase of a communicator's init. The struct may grow
 * at its end in later versions: set struct_size (OOBX_INIT_TIMINGS_INIT does)
 * and the library fills only what fits. */
typedef struct oobx_init_timings {
    size_t struct_size;
    double total;     /* the whole oobx_comm_init */
    double create;    /* transport instance and listeners */
    double delay;     /* stagger before contacting the root */
    double root;      /* report to the root(s) and wait for the ring neighbour */
    double ring;      /* connect the ring */
    double allgather; /* exchange of every rank's address card */
    double local;     /* of allgather: the same-host part (0: not node-aware) */
    int hosts;        /* hosts the communicator spans */
    int local_ranks;  /* ranks on this rank's host */
    int leader;       /* 1: this rank led its host in the leaders' exchange (node-aware path; since 1.2) */
    double trade;     /* of allgather, a leader's: the trade with the other hosts' leaders and its check of
                       * the cards, from its host's last card to waking its ranks (0: not a leader; since 1.2) */
} oobx_init_timings_t;

#define OOBX_INIT_TIMINGS_INIT {.struct_size = sizeof(oobx_init_timings_t)}

/* Copies comm's init timings into *t (as much as t->struct_size holds; 0
 * there means the whole struct of this header). */
OOBX_API int oobx_comm_get_init_timings(oobx_comm_t comm, oobx_init_timings_t *t);

/* How a communicator's allgathers went. Counts of its endpoint: a split
 * child shares its parent's. The struct may grow at its end: set
 * struct_size (OOBX_COLL_COUNTS_INIT does). */
typedef struct oobx_coll_counts {
    size_t struct_size;
    unsigned long long direct;           /* allgathers whose slices were read straight from their owners' buffers */
    unsigned long long direct_fallbacks; /* allgathers that tried to and took the ring (a rank could not read a peer) */
    unsigned long long node;             /* allgathers through the host's shared buffer (node-aware path) */
    unsigned long long node_barrier;     /* barriers through it and the hosts' leaders (node-aware path) */
    unsigned long long direct_skipped;   /* allgathers and broadcasts that took the ring or tree at once (coll.h) */
    unsigned long long direct_mapped;    /* slices of direct allgathers copied through a mapping of a peer's
                                          * oobx_mem_alloc memory (since 1.2) */
    unsigned long long direct_bcast;     /* broadcasts every rank read from the root's buffer (since 1.2) */
    unsigned long long direct_bcast_fallbacks; /* broadcasts that tried to and took the tree (since 1.2) */
    unsigned long long direct_staged;    /* direct allgathers for which this rank copied its slice of plain
                                          * memory into its own mapped region first (OOBX_ALLGATHER_STAGE_MIN;
                                          * since 1.2) */
    unsigned long long node_fresh;       /* node-aware allgathers whose result the kernel wrote into fresh pages
                                          * as it mapped them (a crowded host, a buffer not yet in memory;
                                          * since 1.2) */
} oobx_coll_counts_t;
#define OOBX_COLL_COUNTS_INIT {.struct_size = sizeof(oobx_coll_counts_t)}
OOBX_API int oobx_debug_coll_counts(oobx_comm_t comm, oobx_coll_counts_t *counts);
/* Number of open file descriptors of this process (from /proc/self/fd), or -1. */
OOBX_API int oobx_debug_count_fds(void);

#ifdef __cplusplus
}
#endif

#endif /* OOBX_DEBUG_H */
