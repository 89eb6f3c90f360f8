/* In-tree introspection for tools, tests and benchmarks (not part of the public API). */
#ifndef OOBX_COMM_DEBUG_H
#define OOBX_COMM_DEBUG_H

#include "oobx.h"

/* Seconds spent in each phase of this communicator's init. */
typedef struct oobx_init_timings {
    double total;     /* whole oobx_comm_init */
    double create;    /* transport instance and listeners */
    double delay;     /* stagger before contacting the root */
    double root;      /* report to the root(s) and wait for the ring neighbour */
    double ring;      /* connect the ring */
    double allgather; /* allgather of every rank's address */
} oobx_init_timings_t;

int oobx_comm_get_init_timings(oobx_comm_t comm, oobx_init_timings_t *t);

/* Number of open file descriptors of this process (from /proc/self/fd), or -1. */
int oobx_debug_count_fds(void);

#endif
