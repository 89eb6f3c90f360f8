/*
 * Root rendezvous: the first contact of a job, kept from NCCL's bootstrap.
 * nroots roots each serve a contiguous block of ranks; a rank reports its
 * ring address to its root, and the first rank of each block also to the
 * previous root, so that the roots together stitch one ring. A root answers
 * each rank with its ring successor's address once its whole block (with
 * the extra report) is in; a refusal names its origin (docs/protocol.md).
 */
#ifndef OOBX_ROOT_H
#define OOBX_ROOT_H

#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "oobx.h"
#include "settings.h"
#include "sock.h"
#include "wire.h"

/* The block formulas. root must be in [0, nroots); rank in [0, nranks). */
int oobx__root_first_rank(int root, int nranks, int nroots);
int oobx__root_of_rank(int rank, int nranks, int nroots);
int oobx__root_nranks(int root, int nranks, int nroots);
int oobx__root_local_id(int rank, int root, int nranks, int nroots);

/* What a unique id holds. */
typedef struct root_handle {
    uint64_t magic;                 /* public: tells jobs apart */
    unsigned char secret[16];       /* OOBX_SECRET_BYTES: what every connection proves (auth.h) */
    oobx_sockaddr_t addr;
    /* ports addr+1 .. addr+nalt may hold the root instead (torchrun's
     * MASTER_PORT+1 when that port was taken): the hosting rank takes the
     * first free one, the others try them in turn. Not in unique ids. */
    int nalt;
} root_handle_t;

void oobx__root_handle_encode(const root_handle_t *h, oobx_unique_id_t *id);
/* 0 or OOBX_ERR_INVALID with why (all zeros, not an oobx id, bad address). */
int oobx__root_handle_decode(const oobx_unique_id_t *id, root_handle_t *h, char *why, size_t whylen);

/* Starts a root thread listening on bind_addr (port 0: any free port), with
 * magic, admitting only ranks that prove secret (OOBX_SECRET_BYTES). It serves until all its ranks are answered, or until timeout_ms
 * (-1: forever) passes. *out gets the address it listens on. */
int oobx__root_start(const oobx_sockaddr_t *bind_addr, uint64_t magic, const unsigned char *secret,
                     const oobx_settings_t *s, root_handle_t *out, char *why, size_t whylen);

/* The same on a socket a launcher has already bound and listened on (fd,
 * named by the environment variable var in messages). It must be a listening
 * TCP socket bound to want (the address OOBX_COMM_ID names for the root), else
 * OOBX_ERR_INVALID / OOBX_ERR_MISMATCH with why naming var and both addresses.
 * The root owns fd from a successful call on (and closes it when it ends); a
 * process adopts a given fd once. */
int oobx__root_start_fd(int fd, const char *var, const oobx_sockaddr_t *want, uint64_t magic,
                        const unsigned char *secret, const oobx_settings_t *s, root_handle_t *out, char *why,
                        size_t whylen);

/* Joins root threads that have finished. wait_ms > 0 also waits that long for
 * the roots of magic (0: any) to finish. */
void oobx__root_registry_reap(uint64_t magic, int wait_ms);

/* A rank's side of the rendezvous. */
typedef struct root_client {
    int rank, nranks, nroots;
    const root_handle_t *roots;  /* nroots handles */
    uint32_t tpid;               /* transport id (tp_table.h) */
    const void *blob;            /* this rank's ring address */
    size_t blob_len;
    const oobx_settings_t *settings;
    const oobx_log_t *log;
    const oobx_cancel_t *cancel;
    int *origin; /* when not NULL, the exchange sets it: the rank a root's refusal names as its origin (one that
                    never checked in, gave up or closed its connection), -1 for none */
} root_client_t;

/* Reports to the root(s) and waits for the ring successor's address.
 * next: OOBX_ADDR_MAX bytes. delay_s: time spent staggering. */
int oobx__root_exchange(const root_client_t *c, void *next, size_t *next_len, double *delay_s);

/* The node-aware rendezvous (blob: the rank's whole card, whose header holds
 * its host id): the answer places the rank in its host's group. On failure,
 * out->placed_then_failed says whether out->place is valid all the same. */
typedef struct root_placement {
    oobx_place_t place;
    const unsigned char *members;   /* leaders: place.nmembers u32 ranks */
    const unsigned char *next_card; /* leaders: place.next_len bytes, the next leader's card */
    unsigned char *raw;             /* owns the answer */
    int placed_then_failed;         /* exchange failed (the other root refused this rank), yet its own root had
                                       placed it: place holds where, so that the host's ranks can be told */
} root_placement_t;
int oobx__root_exchange_node(const root_client_t *c, root_placement_t *out, double *delay_s);
void oobx__root_placement_free(root_placement_t *p);

#endif
