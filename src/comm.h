/*
 * The communicator: what oobx_comm_t points at. The public calls live in
 * comm.c (init, queries, collectives, split, abort, destroy) and p2p.c
 * (send, receive); both reach the endpoint only through the view v.
 */
#ifndef OOBX_COMM_H
#define OOBX_COMM_H

#include <stdatomic.h>
#include <stdint.h>

#include "ep.h"
#include "log.h"
#include "oobx.h"
#include "oobx_debug.h"
#include "settings.h"
#include "sock.h"

struct oobx_comm {
    oobx__ep_view_t v;  /* endpoint, context, rank and size, rank map, log, cancellation */
    int *ep_rank;       /* owned rank map of a split child (v.ep_rank), or NULL */
    uint32_t coll_seq;
    uint64_t prev_card_tag; /* init, flat path: the tag of the card the ring predecessor sends first */
    int prev_card_taken;    /* its address went to the transport */
    uint32_t split_seq;
    uint32_t direct_skip[2]; /* the whole view's (coll.h): allgathers, broadcasts */
    struct group_seq {
        uint64_t gid;
        uint32_t seq;
        uint32_t direct_skip[2]; /* the group's (coll.h) */
    } *gseq;
    int ngseq, capgseq;
    oobx_settings_t settings;
    oobx_log_t log;
    atomic_int aborted;
    oobx_init_timings_t timings;
    int ncpu; /* this host's online CPUs, read once at init (its card says it; polling or not); a split child has its parent's */
    uint64_t root_magic; /* of a root this process hosts for this comm, to reap */
    char transport[16];
    char auto_note[440]; /* under auto: why the transport came first (" (OOBX_TRANSPORT=auto...)"), for errors */
    struct {
        struct oobx__node *seg; /* the host's card table and allgather buffers (node.h); NULL: none */
        int leader;             /* this rank leads its host's ranks */
        int local_size, next, prev; /* the host's ranks; leaders: their ring neighbours among the leaders */
        int crowded;            /* this host runs more ranks than it has CPUs: no result mapped ahead (comm.c) */
        int *members;           /* leaders: the host's ranks */
        int *leaders, nleaders, lindex; /* leaders: every host's leader, by rank (from init's trade), and this one's index */
        uint32_t uses;          /* node-aware allgathers so far */
        oobx_cancel_t cancel;   /* the deadline of the call in progress, and the aborts */
    } node;
    /* tables of oobx_allgather_table not released yet */
    struct held_table {
        const void *table;
        int b;        /* the host's shared buffer it is (and use k of it); -1: own memory (own) */
        uint32_t k;
        void *own;
    } *tables;
    int ntables, captables;
};

struct root_handle;
/* Joins the roots (their handles decoded already) and builds the communicator:
 * the common part of oobx_comm_init and oobx_comm_init_from_env. hosted_magic:
 * the magic of a root this process started for it (0: none). */
int oobx__comm_init_common(oobx_comm_t *out, int nranks, int rank, int nids, const struct root_handle *roots,
                           const oobx_settings_t *s, const oobx_config_t *cfg, uint64_t hosted_magic);

/* 0, or the error (recorded) when c is NULL or aborted; fn names the call. */
int oobx__comm_check(struct oobx_comm *c, const char *fn);

/* A call that fails: the failure notices this rank sent leave before its
 * caller has the error (oobx__ep_flush_notices, at most OOBX_NOTICE_FLUSH_MS
 * or a tenth of the timeout); the thread's last error stays the call's.
 * Takes the endpoint lock (not held by the caller). */
void oobx__comm_flush_notices(struct oobx_comm *c);

#endif
