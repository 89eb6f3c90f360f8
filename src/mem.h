/*
 * Memory that ranks of one host can map (oobx_mem_alloc): one copy at
 * memcpy speed for large collectives within a host, without the kernel's
 * copy of process_vm_readv.
 *
 * A region is a sealed memfd (it can never shrink or grow: a peer that maps
 * it cannot be made to fault), mapped shared here. A rank tells its peers
 * what lies under the buffer of a call: the region's random id, its
 * address, length, inode and descriptor number in the owner. A peer that
 * passed the cross-memory identity check (cma.h) takes the descriptor from
 * the owner (pidfd_getfd, or /proc/<pid>/fd where that call is missing:
 * both need the same permission as process_vm_readv), checks that it is the
 * sealed file of that inode and length, maps it read-only, and keeps the
 * mapping in a small per-endpoint cache keyed by (rank, id): the
 * registration cache of the mapped path. A failure is never the call's:
 * the caller reads the slice with process_vm_readv instead, and stops
 * trying that peer's memory.
 */
#ifndef OOBX_MEM_H
#define OOBX_MEM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "cma.h"

#define OOBX_MEM_DESC_BYTES 40 /* id, base, length, inode (u64 each), descriptor (u32), 0 (u32) */
#define OOBX_MEM_MAPS 64       /* peers' regions kept mapped by one endpoint */

typedef struct oobx__mem_region {
    char *base;
    size_t len;
    int fd;
    uint64_t ino, id;
} oobx__mem_region_t;

/* What a rank says of the memory under a buffer: id 0 when it is not
 * within one region of its own. */
typedef struct oobx__mem_desc {
    uint64_t id, base, len, ino;
    uint32_t fd;
} oobx__mem_desc_t;

typedef struct oobx__mem_map {
    int er;            /* endpoint rank of the owner */
    uint64_t id, base; /* the owner's region id and address */
    size_t len;
    const char *at;    /* the mapping here */
    unsigned busy;     /* copies in progress: not evicted */
    uint64_t used;     /* tick of the last use (LRU) */
} oobx__mem_map_t;

typedef struct oobx__mem {
    pthread_mutex_t lock;
    oobx__mem_region_t *own;
    size_t nown, capown;
    oobx__mem_map_t maps[OOBX_MEM_MAPS];
    size_t nmaps;
    uint64_t tick;
    uint64_t mapped_reads; /* slices read through a mapping (oobx_debug_coll_counts) */
} oobx__mem_t;

void oobx__mem_init(oobx__mem_t *m);
/* Unmaps the peers' regions and frees this process's own. */
void oobx__mem_fini(oobx__mem_t *m);
/* 0, or -errno with why filled. */
int oobx__mem_alloc(oobx__mem_t *m, size_t bytes, void **ptr, char *why, size_t whylen);
/* 0, or -ENOENT when ptr is not the start of a region of m. */
int oobx__mem_free(oobx__mem_t *m, void *ptr);
/* What lies under [buf, buf + len). */
void oobx__mem_describe(oobx__mem_t *m, const void *buf, size_t len, oobx__mem_desc_t *d);
void oobx__mem_desc_encode(const oobx__mem_desc_t *d, unsigned char out[OOBX_MEM_DESC_BYTES]);
void oobx__mem_desc_decode(const unsigned char in[OOBX_MEM_DESC_BYTES], oobx__mem_desc_t *d);
/* Copies len bytes at the owner's address src, inside the region d names,
 * into dst through a mapping of it (made on first use, then cached). The
 * peer's identity must have been checked (oobx__cma_check). 0, or -1 with
 * peer->why saying what failed and peer->nomap set: read another way. */
int oobx__mem_read(oobx__mem_t *m, oobx__cma_peer_t *peer, int er, const oobx__mem_desc_t *d, void *dst,
                   uint64_t src, size_t len);

#endif
