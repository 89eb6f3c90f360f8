/*
 * oobx: out-of-band bootstrap and transport for large parallel jobs.
 *
 * The whole public API. Every function returns OOBX_SUCCESS (0) or a negative
 * OOBX_ERR_* code; oobx_strerror() names a code and oobx_last_error() gives the
 * calling thread's detailed message for its last failure.
 */
#ifndef OOBX_H
#define OOBX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The one source of the version: the build reads these three lines for the
 * soname (liboobx.so.MAJOR), the file name and oobx.pc. */
#define OOBX_VERSION_MAJOR 1
#define OOBX_VERSION_MINOR 2
#define OOBX_VERSION_PATCH 0

#define OOBX_VERSION_STR_(x) #x
#define OOBX_VERSION_XSTR_(x) OOBX_VERSION_STR_(x)
#define OOBX_VERSION_STRING                                                          \
    OOBX_VERSION_XSTR_(OOBX_VERSION_MAJOR) "." OOBX_VERSION_XSTR_(OOBX_VERSION_MINOR) "." \
        OOBX_VERSION_XSTR_(OOBX_VERSION_PATCH)
/* (major << 16) | (minor << 8) | patch, the value of oobx_version_number() */
#define OOBX_VERSION_HEX ((OOBX_VERSION_MAJOR << 16) | (OOBX_VERSION_MINOR << 8) | OOBX_VERSION_PATCH)

/* Marks the calls the library exports; everything else in it is hidden. */
#if defined(OOBX_BUILDING_LIBRARY) && defined(__GNUC__)
#define OOBX_API __attribute__((visibility("default")))
#else
#define OOBX_API
#endif

#define OOBX_UNIQUE_ID_BYTES 128

/* X(name, value, description): the single source of the codes, their names
 * and their strings. */
#define OOBX_ERROR_MAP(X)                                                        \
    X(SUCCESS, 0, "success")                                                     \
    X(ERR_INVALID, -1, "invalid argument")                                       \
    X(ERR_NOMEM, -2, "out of memory")                                            \
    X(ERR_SYSTEM, -3, "system call failed")                                      \
    X(ERR_TIMEOUT, -4, "timed out")                                              \
    X(ERR_ABORTED, -5, "aborted")                                                \
    X(ERR_REMOTE, -6, "remote peer failed or closed the connection")            \
    X(ERR_PROTOCOL, -7, "protocol error: unexpected or malformed message")       \
    X(ERR_MISMATCH, -8, "mismatch between ranks (size, magic, version or call)") \
    X(ERR_TRUNCATED, -9, "message larger than the receive buffer")               \
    X(ERR_UNAVAILABLE, -10, "transport or device not available")                 \
    X(ERR_INTERNAL, -11, "internal error")

typedef enum {
#define OOBX_ERROR_ENUM_(name, value, desc) OOBX_##name = value,
    OOBX_ERROR_MAP(OOBX_ERROR_ENUM_)
#undef OOBX_ERROR_ENUM_
} oobx_status_t;

typedef struct {
    char internal[OOBX_UNIQUE_ID_BYTES];
} oobx_unique_id_t;

typedef struct oobx_comm *oobx_comm_t;

typedef struct {
    size_t struct_size;            /* set by OOBX_CONFIG_INIT; lets the struct grow */
    const char *transport;         /* "auto", "socket", "ucx", "verbs"; NULL: env or auto */
    int timeout_ms;                /* each blocking call; 0: env/default; -1: wait forever */
    volatile uint32_t *abort_flag; /* optional; non-zero ends blocking calls with OOBX_ERR_ABORTED */
    const char *topo_pci;          /* optional PCI bus id ("0000:3b:00.0") to pick the closest
                                      device for; NULL: OOBX_TOPO_PCI or this thread's CPUs */
} oobx_config_t;

#define OOBX_CONFIG_INIT                                                          \
    {                                                                             \
        .struct_size = sizeof(oobx_config_t), .transport = NULL, .timeout_ms = 0, \
        .abort_flag = NULL, .topo_pci = NULL                                      \
    }

/* Starts a root in this process (it serves until its ranks are answered, or
 * its deadline) and fills *id with its address and a fresh random magic. */
OOBX_API int oobx_get_unique_id(oobx_unique_id_t *id);

/* Collective over nranks processes. nids > 1 is the multi-root start: ids[i]
 * is root i, serving the contiguous block of ranks i. cfg may be NULL. */
OOBX_API int oobx_comm_init(oobx_comm_t *comm, int nranks, int rank, int nids,
                   const oobx_unique_id_t *ids, const oobx_config_t *cfg);

/* Rank and size from OOBX_RANK/OOBX_NRANKS, Slurm, Open MPI, PMI or torchrun;
 * roots from OOBX_COMM_ID=host:port[,host:port...] (else MASTER_ADDR/PORT). */
OOBX_API int oobx_comm_init_from_env(oobx_comm_t *comm, const oobx_config_t *cfg);

OOBX_API int oobx_comm_rank(oobx_comm_t comm, int *rank);
OOBX_API int oobx_comm_size(oobx_comm_t comm, int *nranks);
OOBX_API const char *oobx_comm_transport(oobx_comm_t comm); /* "socket", "ucx", "verbs" */

/* In place: buf holds nranks slices of bytes_per_rank; this rank's own slice
 * is at rank * bytes_per_rank. */
OOBX_API int oobx_allgather(oobx_comm_t comm, void *buf, size_t bytes_per_rank);

/* An allgather whose result is not copied into every rank (since 1.2):
 * mine is this rank's slice; *table is a read-only table of nranks slices
 * of bytes_per_rank. Where the ranks of a host take the node-aware path, it
 * is the host's shared buffer: one copy of the table per host, none per
 * rank, which is what start-up at many ranks a host needs. Otherwise a
 * buffer of the library. Release it with oobx_allgather_table_release (the
 * communicator's destroy releases what is left); a table held over two
 * more collective calls of the communicator makes the second fail with
 * OOBX_ERR_INVALID, as its buffer is the one held. Collective, like
 * oobx_allgather. */
OOBX_API int oobx_allgather_table(oobx_comm_t comm, const void *mine, size_t bytes_per_rank,
                                  const void **table);
OOBX_API int oobx_allgather_table_release(oobx_comm_t comm, const void *table); /* NULL is accepted */

/* Tagged point-to-point. Messages between a pair with the same tag are
 * received in the order they were sent. oobx_send returns once buf may be
 * reused. Safe from several threads of one communicator at once. */
OOBX_API int oobx_send(oobx_comm_t comm, int peer, int tag, const void *buf, size_t bytes);
OOBX_API int oobx_recv(oobx_comm_t comm, int peer, int tag, void *buf, size_t capacity,
              size_t *received); /* received NULL: the size must equal capacity */

OOBX_API int oobx_barrier(oobx_comm_t comm);
OOBX_API int oobx_bcast(oobx_comm_t comm, int root, void *buf, size_t bytes);

/* The same over a subset of ranks (ranks[] lists communicator ranks, the same
 * list in the same order on every member; the caller must be in it). */
OOBX_API int oobx_group_allgather(oobx_comm_t comm, const int *ranks, int n, void *buf,
                         size_t bytes_per_rank);
OOBX_API int oobx_group_barrier(oobx_comm_t comm, const int *ranks, int n);
OOBX_API int oobx_group_bcast(oobx_comm_t comm, const int *ranks, int n, int root_index,
                     void *buf, size_t bytes);

/* Memory for large collectives within a host (since 1.2). Buffers in it let
 * ranks of one host copy one another's slices once, at memcpy speed, where
 * other memory is read with the kernel's cross-memory copy (or sent through
 * the transport). *ptr is page-aligned, zero-filled, and usable with comm and
 * the communicators split from it; it lives until oobx_mem_free, or until
 * the last of those communicators is destroyed. Not collective. */
OOBX_API int oobx_mem_alloc(oobx_comm_t comm, size_t bytes, void **ptr);
OOBX_API int oobx_mem_free(oobx_comm_t comm, void *ptr); /* ptr as oobx_mem_alloc gave it; NULL is accepted */

/* Collective over parent. color < 0: this rank joins no child (*child = NULL).
 * Ranks of a child are ordered by key, then by parent rank. */
OOBX_API int oobx_comm_split(oobx_comm_t parent, int color, int key, oobx_comm_t *child);

/* From any thread: every blocked and later call on comm returns OOBX_ERR_ABORTED. */
OOBX_API int oobx_comm_abort(oobx_comm_t comm);

/* Releases every fd, thread and byte of comm. NULL is accepted. */
OOBX_API int oobx_comm_destroy(oobx_comm_t comm);

OOBX_API const char *oobx_strerror(int status);   /* "timed out" */
OOBX_API const char *oobx_error_name(int status); /* "OOBX_ERR_TIMEOUT" */
OOBX_API const char *oobx_last_error(void);       /* this thread's last detailed message */
OOBX_API const char *oobx_version(void);           /* "1.2.0", the library's, not the header's */
OOBX_API unsigned oobx_version_number(void); /* OOBX_VERSION_HEX of the library */

#ifdef __cplusplus
}
#endif

#endif /* OOBX_H */
