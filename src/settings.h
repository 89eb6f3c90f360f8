/* Per-communicator settings: one table of OOBX_* variables, parsed at init. */
#ifndef OOBX_SETTINGS_H
#define OOBX_SETTINGS_H

#include <stddef.h>
#include <stdint.h>
#include "oobx.h"

enum { OOBX_LOG_NONE = 0, OOBX_LOG_ERROR, OOBX_LOG_WARN, OOBX_LOG_INFO, OOBX_LOG_DEBUG, OOBX_LOG_TRACE };

typedef struct oobx_settings {
    char transport[16];        /* OOBX_TRANSPORT: auto, socket, ucx, verbs */
    int timeout_ms;            /* OOBX_TIMEOUT_MS; -1: forever */
    char socket_ifname[256];   /* OOBX_SOCKET_IFNAME */
    int socket_family;         /* OOBX_SOCKET_FAMILY: AF_UNSPEC, AF_INET, AF_INET6 */
    int socket_linklocal;      /* OOBX_SOCKET_LINKLOCAL: allow IPv6 link-local */
    char comm_id[1024];        /* OOBX_COMM_ID */
    char job_key[256];         /* OOBX_JOB_KEY, mixed into the secret of env-started jobs */
    char job_key_file[256];    /* OOBX_JOB_KEY_FILE */
    int stagger_rate;          /* OOBX_UID_STAGGER_RATE: connections per second */
    int stagger_threshold;     /* OOBX_UID_STAGGER_THRESHOLD: ranks per root */
    char net_device[128];      /* OOBX_NET_DEVICE */
    char allgather_algo[16];   /* OOBX_ALLGATHER_ALGO: auto, direct, ring, bruck, tree */
    char node_exchange[16];    /* OOBX_NODE_EXCHANGE: bruck, ring (the leaders' part of a node-aware allgather) */
    size_t bruck_max_bytes;    /* OOBX_ALLGATHER_BRUCK_MAX: auto picks Bruck up to this total */
    size_t chunk_bytes;        /* OOBX_CHUNK_BYTES: pipeline chunk */
    int spin_us;               /* OOBX_SPIN_US: progress spin before blocking */
    size_t unexpected_max;     /* OOBX_UNEXPECTED_MAX: unexpected bytes held per sender */
    char topo_pci[64];         /* OOBX_TOPO_PCI */
    size_t ring_slot_bytes;    /* OOBX_RING_SLOT_BYTES: registered ring buffer slot */
    int ring_slots;            /* OOBX_RING_SLOTS: slots per ring link */
    int node_aware;            /* OOBX_NODE_AWARE */
    int node_aware_min;        /* OOBX_NODE_AWARE_MIN: fewer ranks use the flat bootstrap */
    char host_id[128];         /* OOBX_HOST_ID */
    char node_dir[256];        /* OOBX_NODE_DIR */
    size_t node_buf;           /* OOBX_NODE_BUF */
    size_t direct_min;         /* OOBX_ALLGATHER_DIRECT_MIN: auto's direct allgather from this slice size */
    size_t cma_min;            /* OOBX_CMA_MIN: single-copy pulls between ranks of one host from this size */
    int stage_min;             /* OOBX_ALLGATHER_STAGE_MIN: direct allgathers of this many ranks stage plain memory */
    char module_dir[512];      /* OOBX_MODULE_DIR: where transport modules are loaded from */
    char rdma_sysfs[256];      /* OOBX_RDMA_SYSFS: where auto looks for RDMA devices */
    int log_level;             /* OOBX_LOG_LEVEL */
    char log_file[256];        /* OOBX_LOG_FILE (%h host, %p pid) */
    char failure[16];          /* OOBX_FAILURE: job (a failure fails every call of the communicator), local */
    /* Not variables of the table: what the launcher says of this rank's host
     * (oobx_comm_init_from_env), -1 each when unknown; local_vars names the
     * variables that gave them. */
    int local_rank, local_size;
    char local_vars[64];
} oobx_settings_t;

enum { OOBX_SET_STR, OOBX_SET_INT, OOBX_SET_SIZE, OOBX_SET_LEVEL, OOBX_SET_FAMILY, OOBX_SET_BOOL };

typedef struct oobx_setting_desc {
    const char *name;      /* "OOBX_TIMEOUT_MS" */
    const char *def;       /* default, as text */
    const char *doc;       /* one line */
    int type;              /* OOBX_SET_* */
    size_t offset;         /* of the field in oobx_settings_t */
    size_t size;           /* of the field (strings) */
    long long min, max;    /* numbers: the values allowed (both 0: any the type holds) */
} oobx_setting_desc_t;

/* The table, terminated by a NULL name; read-only. */
extern const oobx_setting_desc_t oobx__settings_table[];

struct oobx__log;
/* Fills the struct at base from table's defaults, then the environment. A
 * malformed value is an OOBX_ERR_INVALID naming the variable, logged to log
 * (may be NULL). Transports parse their own tables with it. */
int oobx__settings_parse(const oobx_setting_desc_t *table, void *base, const struct oobx__log *log);

/* Fills s from defaults, then the environment, then cfg (may be NULL).
 * A malformed value is an OOBX_ERR_INVALID naming the variable. */
int oobx__settings_load(oobx_settings_t *s, const oobx_config_t *cfg);

#endif
