/*
 * The verbs transport's wire formats, and the parsers of everything it takes
 * from another process: the address card, the rdma_cm private data (hello,
 * reject) and the SENDs of a connection. The parsers (verbs_wire.c) are pure:
 * bytes in, a checked struct out, or an error code and the reason; they touch
 * no verbs library and no transport instance, so tests/fuzz/ runs them
 * without RDMA headers. The caller names the rank, address and device.
 *
 * Byte order is the host's: the ranks of one job share an ABI.
 * docs/transports/verbs.md describes the layouts.
 */
#ifndef OOBX_VERBS_WIRE_H
#define OOBX_VERBS_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "transport.h"

#define VERBS_BLOB_MAGIC 0x4f585642u  /* "BVXO": an address card of this transport */
#define VERBS_BLOB_VERSION 1
#define VERBS_CM_MAGIC 0x4f58434du    /* "MCXO": connect / accept / reject private data */
#define VERBS_CM_VERSION 2 /* 2: the private data carries a nonce after the hello; AUTH */

#define VERBS_RECV_DEPTH 64u          /* receives posted per QP = send credits of the peer */
#define VERBS_BUF_BYTES 8192u         /* each receive buffer and send bounce buffer */

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
    VERBS_T_AUTH = 7,    /* a 32-byte mac: the first message each side sends (docs/security.md) */
    VERBS_T_MOVED = 8,   /* verbs_rts_t: the payload of rendezvous id is read from here on, from its start */
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

/* Not exported from the module (the fuzz targets link the object). */
#pragma GCC visibility push(hidden)

/* ---- address card ---------------------------------------------------------------- */

/* The card's largest size: header and a 63-byte device name. */
#define VERBS_CARD_MAX (sizeof(verbs_blob_t) + VERBS_DEV_NAME_MAX - 1)

/* A checked address card. */
typedef struct verbs_card {
    verbs_blob_t hdr;             /* the header as it came */
    struct sockaddr_storage addr; /* the listener: AF_INET or AF_INET6, port in network order */
    socklen_t addrlen;
    char dev[VERBS_DEV_NAME_MAX]; /* the device name, 1..63 characters, terminated */
} verbs_card_t;

/* Writes the card of a listener at addr (AF_INET, else taken as AF_INET6) on
 * device dev, for host host_id and process pid. Returns its length, or 0 when
 * cap is too small or dev is longer than 63 bytes. */
size_t verbs_card_encode(uint64_t host_id, uint32_t pid, const struct sockaddr_storage *addr, const char *dev,
                         void *out, size_t cap);

/* 0; OOBX_ERR_PROTOCOL for a card that is not this transport's or is
 * malformed; OOBX_ERR_MISMATCH for another version. The reason goes to why. */
int verbs_card_decode(const void *buf, size_t len, verbs_card_t *out, char *why, size_t whylen);

/* ---- rdma_cm private data ------------------------------------------------------- */

/* What a hello has to say to be accepted. */
typedef struct verbs_cm_want {
    uint64_t comm_magic; /* this communicator's */
    int self;            /* this rank */
    int nranks;
    int peer;            /* >= 0: the hello must be that rank's (the answer to our connect);
                          * -1: any rank of the communicator but self (a connect request) */
} verbs_cm_want_t;

void verbs_cm_hello_encode(uint64_t comm_magic, int rank, int nranks, verbs_cm_hello_t *out);

/* Checks the private data of a connect request or of an accept (len may
 * exceed the hello: rdma_cm pads it). Returns 0 with *h filled, or the
 * VERBS_REJ_* code a listener answers with (MAGIC, VERSION, RANK) and the
 * reason in why. */
uint32_t verbs_cm_hello_check(const void *pd, size_t len, const verbs_cm_want_t *want, verbs_cm_hello_t *h,
                              char *why, size_t whylen);

/* The private data of a reject: 0 with *rj filled (any code: an unknown one is
 * reported as such), or OOBX_ERR_PROTOCOL when it is not this transport's. */
int verbs_cm_reject_decode(const void *pd, size_t len, verbs_cm_reject_t *rj, char *why, size_t whylen);

/* ---- SENDs of a connection -------------------------------------------------------- */

/* A checked message. */
typedef struct verbs_msg {
    verbs_wire_t w;
    oobx_msg_hdr_t hdr;           /* EAGER, RTS */
    const unsigned char *payload; /* EAGER: hdr.len bytes inside the received buffer */
    verbs_rts_t rts;              /* RTS, MOVED */
    uint64_t value;               /* FIN: the rendezvous id; RCREDIT: the ring credit */
    verbs_setup_t setup;          /* SETUP: a usable ring geometry */
    unsigned char mac[32];        /* AUTH */
} verbs_msg_t;

/* A SEND of len bytes that arrived from rank src. Checks everything that
 * needs no connection state: the size of each type, that a message header
 * names src and the length that came, that a rendezvous is above the eager
 * size, no more credits than receives exist, a usable ring geometry. 0, or
 * OOBX_ERR_PROTOCOL with the reason in why. */
int verbs_msg_decode(const void *buf, size_t len, int src, verbs_msg_t *m, char *why, size_t whylen);

/* Writes m as it travels (for EAGER, m->hdr.len bytes from m->payload).
 * Returns the length, or 0 when it does not fit cap or the type is unknown. */
size_t verbs_msg_encode(const verbs_msg_t *m, void *out, size_t cap);

#pragma GCC visibility pop

#endif
