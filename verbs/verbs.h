/*
 * The raw verbs transport (librdmacm for connection set-up, libibverbs for
 * the data path): constants and wire formats shared by verbs.c, verbs_dev.c
 * and the unit test. docs/transports/verbs.md describes the protocol.
 */
#ifndef OOBX_VERBS_H
#define OOBX_VERBS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "settings.h"
#include "log.h"
#include "transport.h"

#define VERBS_BLOB_MAGIC 0x4f585642u  /* "BVXO": an address card of this transport */
#define VERBS_BLOB_VERSION 1
#define VERBS_CM_MAGIC 0x4f58434du    /* "MCXO": connect / accept / reject private data */
#define VERBS_CM_VERSION 1

#define VERBS_RECV_DEPTH 64u          /* receives posted per QP = send credits of the peer */
#define VERBS_BUF_BYTES 8192u         /* each receive buffer and send bounce buffer */
#define VERBS_SEND_SLOTS 32u          /* send bounce buffers per QP */
#define VERBS_READ_MAX 4u             /* RDMA READs in flight per QP (at most) */
#define VERBS_READ_PIECE (1ull << 30) /* largest RDMA READ (and the device's max_msg_sz) */
#define VERBS_CREDIT_BATCH 16u        /* an explicit credit message once this many are owed */
#define VERBS_CREDIT_RESERVE 1u       /* credits only a credit message may take */
#define VERBS_LINKS_MAX 1024          /* QPs per instance; sizes the shared CQ */
#define VERBS_RESOLVE_MS 2000         /* rdma_resolve_addr / rdma_resolve_route */
#define VERBS_COPY_MAX (256u << 10)   /* larger messages are copied at send and done at once, up to this */
#define VERBS_FLUSH_MS 200            /* destroy: bound on flushing queued sends */

/* Every SEND starts with this header. */
typedef struct verbs_wire {
    uint8_t type;     /* VERBS_T_* */
    uint8_t pad;
    uint16_t credits; /* receives the sender re-posted for the receiver since its last report */
    uint32_t pad2;
} verbs_wire_t;

enum {
    VERBS_T_EAGER = 1,   /* oobx_msg_hdr_t + payload */
    VERBS_T_RTS = 2,     /* oobx_msg_hdr_t + verbs_rts_t: read the payload */
    VERBS_T_FIN = 3,     /* uint64_t id: the payload of RTS id has been read */
    VERBS_T_CREDIT = 4,  /* nothing but the header's credits */
    VERBS_T_SETUP = 5,   /* verbs_setup_t: the receiver's ring buffer for the link sender -> receiver */
    VERBS_T_RCREDIT = 6, /* uint64_t: every ring chunk before this is free */
};

typedef struct verbs_rts {
    uint64_t addr;
    uint32_t rkey;
    uint32_t pad;
    uint64_t id;
} verbs_rts_t;

typedef struct verbs_setup {
    uint64_t addr;
    uint32_t rkey;
    uint32_t slots;
    uint32_t slot_bytes;
    uint32_t pad;
} verbs_setup_t;

#define VERBS_EAGER_MAX (VERBS_BUF_BYTES - (uint32_t)sizeof(verbs_wire_t) - (uint32_t)sizeof(oobx_msg_hdr_t))

/* The address card: this header, then dev_len bytes of device name. */
typedef struct verbs_blob {
    uint32_t magic;
    uint16_t version;
    uint16_t hdr_bytes;  /* sizeof(verbs_blob_t) */
    uint64_t host_id;    /* hash of the host name */
    uint32_t pid;
    uint16_t family;     /* AF_INET or AF_INET6 */
    uint16_t port;       /* listener's port, host order */
    uint8_t addr[16];    /* IPv4 (first 4 bytes) or IPv6 address, network order */
    uint32_t scope_id;   /* IPv6 scope */
    uint8_t dev_len;     /* 1..63 */
    uint8_t pad[3];
} verbs_blob_t;

#define VERBS_DEV_NAME_MAX 64

/* Private data of rdma_connect and rdma_accept (<= 56 bytes). */
typedef struct verbs_cm_hello {
    uint32_t cm_magic;   /* VERBS_CM_MAGIC */
    uint16_t version;    /* VERBS_CM_VERSION */
    uint16_t pad;
    uint64_t comm_magic; /* the communicator's magic */
    uint32_t rank;
    uint32_t nranks;
} verbs_cm_hello_t;

/* Private data of rdma_reject. */
typedef struct verbs_cm_reject {
    uint32_t cm_magic;
    uint32_t code;       /* VERBS_REJ_* */
} verbs_cm_reject_t;

enum {
    VERBS_REJ_MAGIC = 1,     /* not this protocol, or another communicator */
    VERBS_REJ_VERSION = 2,
    VERBS_REJ_RANK = 3,      /* rank out of range, or the listener's own */
    VERBS_REJ_CROSSED = 4,   /* both connected at once; the lower rank's connection is kept */
    VERBS_REJ_DUPLICATE = 5, /* a connection to that rank exists */
    VERBS_REJ_FAILED = 6,    /* that rank was declared failed here */
    VERBS_REJ_RESOURCES = 7, /* no QP could be made (VERBS_LINKS_MAX, memory) */
};

const char *verbs_reject_str(uint32_t code);

/* ---- device choice (verbs_dev.c) ---- */

typedef struct verbs_choice {
    char dev[VERBS_DEV_NAME_MAX];   /* device name */
    int port;                        /* port from "dev:port", or 0 */
    struct sockaddr_storage addr;    /* IP to bind (port 0) */
    socklen_t addrlen;
    char why_dev[256];
    char why_ip[512];
} verbs_choice_t;

/* Picks the device (OOBX_NET_DEVICE, else topology) and the IP for rdma_cm.
 * 0, or OOBX_ERR_UNAVAILABLE / OOBX_ERR_INVALID with the reason in why. */
int verbs_choose(const oobx_settings_t *s, const void *root_hint, unsigned root_hint_len, verbs_choice_t *out,
                 char *why, size_t whylen);

void verbs_addr_format(const struct sockaddr *sa, char *buf, size_t len);

/* Counters of an instance, for tests and debugging. */
typedef struct verbs_stats {
    int qps;                 /* QPs alive */
    int ring_tx_active;      /* sends to the ring successor go through its ring */
    uint64_t ring_chunks_tx; /* ring chunks written */
    uint64_t ring_chunks_rx; /* ring chunks received */
    uint64_t rndv_rx;        /* messages read with RDMA READ */
    uint64_t crossed;        /* own connection attempts given up for the peer's */
    uint64_t rejected;       /* connection requests refused */
} verbs_stats_t;
void verbs_tp_stats(oobx_tp_t *tp, verbs_stats_t *st);
/* The state of every link, for debugging. */
void verbs_tp_dump(oobx_tp_t *tp, FILE *out);

extern const oobx_tp_ops_t oobx_verbs_ops;
int oobx_verbs_describe(FILE *out, const oobx_settings_t *s);

#endif
