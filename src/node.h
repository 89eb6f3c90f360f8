/*
 * The ranks of one host: a shared table of the job's cards, one per group
 * (the ranks of a root's block on one host), in a file of /dev/shm that
 * only the job's user can open.
 *
 * Every member maps the group's segment, writes its card into its slot and
 * says so; the leader (the group's lowest rank) waits for all of them, trades
 * the group's cards with the other leaders, writes theirs into the table and
 * marks it complete; the members wait for that and read every card from the
 * table. Waiting is a futex on the shared words, in slices, so that a dead
 * member or leader is seen (its pid) and the deadline and aborts hold.
 */
#ifndef OOBX_NODE_H
#define OOBX_NODE_H

#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "sock.h"

typedef struct oobx__node oobx__node_t;

typedef struct oobx__node_params {
    uint64_t job;        /* the communicator magic */
    uint64_t epoch;      /* from the root: this run */
    uint64_t host;       /* the group's host id */
    int rank, nranks;
    int local_index, local_size;
    int leader;          /* global rank */
    size_t card_cap;     /* bytes per card slot */
    size_t data_bytes;   /* each of the two buffers of the node-aware allgather (0: none) */
    const char *dir;     /* where segments live ("/dev/shm") */
    const oobx_log_t *log;
    const oobx_cancel_t *cancel; /* deadline and aborts */
} oobx__node_params_t;

/* Maps (creating it if this rank is first) the group's segment, checks that it
 * belongs to this job and this user, writes this rank's card and pid, and says
 * it is ready. OOBX_ERR_* with the message recorded on failure. */
int oobx__node_join(const oobx__node_params_t *p, const void *card, size_t len, oobx__node_t **out);

/* Leader: waits until every member is ready. members: the group's ranks. */
int oobx__node_wait_members(oobx__node_t *n, const int *members);

/* Writes rank's card into the table (leader: the cards of other groups). */
int oobx__node_put(oobx__node_t *n, int rank, const void *card, size_t len);

/* The card of rank, or NULL while it is not in the table. */
const unsigned char *oobx__node_card(const oobx__node_t *n, int rank, size_t *len);

/* Cards in the table. */
int oobx__node_count(const oobx__node_t *n);

/* Leader, before finishing: what every member learns with the table (the
 * number of hosts the cards name; whether some host is oversubscribed), so
 * that no member reads all N cards. */
void oobx__node_set_summary(oobx__node_t *n, int hosts, int over);
/* After oobx__node_wait_finish (or the leader's own set_summary). */
void oobx__node_summary(const oobx__node_t *n, int *hosts, int *over);

/* Leader: the table is complete (status 0), or the exchange failed (status
 * < 0, text says why): wakes the members. */
void oobx__node_finish(oobx__node_t *n, int status, const char *text);
/* A rank that its root placed in this host's table but whose init failed
 * before it joined (the other root refused it) marks the table failed with
 * text: the leader's and the members' waits end with it at once. */
void oobx__node_tell_failure(const oobx__node_params_t *p, int status, const char *text);

/* Member: waits until the leader finishes; its failure becomes this rank's. */
int oobx__node_wait_finish(oobx__node_t *n);

/* Unmaps; the last rank to leave... the name is already gone (removed once
 * every member has mapped it). NULL is accepted. */
void oobx__node_leave(oobx__node_t *n);

/* ---- the node-aware allgather ----
 * Use k of buffer b (b = use & 1 alternates): each member waits until the
 * previous use of b is drained (ag_enter), writes its slice into
 * node_data(b) and arrives; the leader waits for all (ag_wait_arrivals: it
 * also compares every member's bytes per rank), trades the host's slices
 * with the other leaders, writes theirs, and marks the use done; members
 * wait for it, copy the result out and leave. A failure is sticky: every
 * later call of the host's ranks fails with the leader's text. use: the use
 * of buffer b (0, 1, ...): the communicator's node-aware allgathers so far,
 * halved. A timeout names the host's ranks that have not joined. The
 * same steps with no slices (bpr: a signature no allgather has) are the
 * node-aware barrier; op ("an allgather", "a barrier") names the call in
 * the errors of the waits. */
size_t oobx__node_data_bytes(const oobx__node_t *n);
unsigned char *oobx__node_data(const oobx__node_t *n, int b);
int oobx__node_ag_enter(oobx__node_t *n, int b, uint32_t use, uint64_t bpr);
void oobx__node_ag_arrive(oobx__node_t *n, int b, uint32_t use);
int oobx__node_ag_wait_arrivals(oobx__node_t *n, int b, uint32_t use, uint64_t bpr, const char *op,
                                int *mismatch_rank, uint64_t *mismatch_bpr);
void oobx__node_ag_done(oobx__node_t *n, int b, int status, const char *text);
/* The text of the host's allgather failure (the first one's), or NULL. */
const char *oobx__node_ag_error(const oobx__node_t *n);
int oobx__node_ag_wait_done(oobx__node_t *n, int b, uint32_t use, const char *op);
void oobx__node_ag_leave(oobx__node_t *n, int b, uint32_t use);
/* Wakes every waiter of the host's segment (they look at their aborts). */
void oobx__node_wake(oobx__node_t *n);

/* What ends the segment's waits from now on (the params' cancel lives only as
 * long as the call that joined). */
void oobx__node_set_cancel(oobx__node_t *n, const oobx_cancel_t *cancel);

/* The bytes of a group's segment (for tests). */
size_t oobx__node_size(const oobx__node_params_t *p);

/* The path of the segment (for messages and tests). */
const char *oobx__node_path(const oobx__node_t *n);

#endif
