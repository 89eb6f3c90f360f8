/*
 * The UCX transport's wire formats, and the parsers of everything it takes
 * from another process: the address card header, the tag of every message
 * and the messages it receives (EAGER, HDR, DOORBELL, CREDIT, SETUP). The
 * parsers (ucx_wire.c) are pure: bytes in, a checked struct out, or an error
 * code and the reason; they use no UCX call and no transport instance, so
 * tests/fuzz/ runs them without UCX headers. The caller names the rank.
 *
 * Byte order is the host's: the ranks of one job share an ABI.
 * docs/transports/ucx.md describes the layouts.
 */
#ifndef OOBX_UCX_WIRE_H
#define OOBX_UCX_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "cma.h"
#include "transport.h"

#define UCX_BLOB_MAGIC 0x5543584fu /* "OXCU" */
#define UCX_BLOB_VERSION 2 /* 2: the single-copy identity (cma.h) */
#define UCX_EAGER_MAX 8192u        /* payload bytes sent in one message */
#define UCX_RING_DIRECT_MIN (8u << 20) /* ring-link messages this large go as tag messages */
#define UCX_CTRL_MAX 4096u         /* largest control message (SETUP) */

/* The 64-bit UCX tag: DATA (bit 63), type (62-59), sender rank (58-32),
 * per-sender sequence number (31-0). */
#define UCX_TAG_DATA (1ull << 63)
#define UCX_TAG_TYPE_SHIFT 59
#define UCX_TAG_TYPE_MASK 0xfull
#define UCX_TAG_RANK_SHIFT 32
#define UCX_TAG_RANK_MASK ((1ull << 27) - 1)
#define UCX_RANKS_MAX ((int)UCX_TAG_RANK_MASK)

enum { UCX_T_EAGER = 1, UCX_T_HDR = 2, UCX_T_DOORBELL = 3, UCX_T_CREDIT = 4, UCX_T_SETUP = 5, UCX_T_PULL = 6,
       UCX_T_PULL_ACK = 7 };

static inline uint64_t ucx_tag(int type, int rank, uint32_t seq)
{
    return ((uint64_t)type << UCX_TAG_TYPE_SHIFT) | ((uint64_t)rank << UCX_TAG_RANK_SHIFT) | seq;
}

static inline int ucx_tag_type(uint64_t tag) { return (int)((tag >> UCX_TAG_TYPE_SHIFT) & UCX_TAG_TYPE_MASK); }
static inline int ucx_tag_rank(uint64_t tag) { return (int)((tag >> UCX_TAG_RANK_SHIFT) & UCX_TAG_RANK_MASK); }
static inline uint32_t ucx_tag_seq(uint64_t tag) { return (uint32_t)tag; }

/* The address card: this header, then addr_len bytes of UCX worker address. */
typedef struct ucx_blob_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t hdr_bytes;
    uint32_t pid;
    uint32_t addr_len;
    char host[48];
    unsigned char cma[OOBX_CMA_ID_BYTES]; /* the rank's single-copy identity */
} ucx_blob_hdr_t;

/* PULL: a message whose payload the receiver reads from the sender's memory
 * at addr (same host, cma.h), instead of HDR + DATA; then it reads the ticket
 * (moved: read again from the copy; void: the sender let go). */
typedef struct ucx_pull {
    oobx_msg_hdr_t hdr;
    uint64_t addr;
    uint64_t ticket;       /* where the pull's ticket lies (cma.h): read after the payload */
    uint64_t ticket_nonce; /* never 0 */
} ucx_pull_t;

/* PULL_ACK: the receiver's answer to the PULL of sequence number seq: push 0,
 * it has the payload (or dropped it); push 1, it could not read it: the
 * sender sends it as DATA with that sequence number. */
typedef struct ucx_pull_ack {
    uint32_t seq;
    uint32_t push;
} ucx_pull_ack_t;

/* count chunks from seq have landed (their sizes are in their headers) */
typedef struct ucx_doorbell {
    uint64_t seq;
    uint32_t count;
    uint32_t pad;
} ucx_doorbell_t;

/* The receiver's ring for the link sender -> receiver; rkey_len bytes of packed key follow. */
typedef struct ucx_setup {
    uint32_t slots;
    uint32_t slot_bytes;
    uint64_t raddr;
    uint32_t rkey_len;
    uint32_t pad;
} ucx_setup_t;

/* Not exported from the module (the fuzz targets link the object). */
#pragma GCC visibility push(hidden)

/* ---- address card ---------------------------------------------------------------- */

/* A checked card. */
typedef struct ucx_card {
    ucx_blob_hdr_t hdr; /* the header as it came */
    char host[48];      /* the host name, terminated */
    const void *addr;   /* the worker address, inside the card */
    size_t addr_len;    /* > 0 */
} ucx_card_t;

/* Writes the card of a worker address of process pid on host (cut to 47
 * bytes). Returns its length, or 0 when cap is too small. */
size_t ucx_card_encode(uint32_t pid, const char *host, const unsigned char cma[OOBX_CMA_ID_BYTES], const void *addr,
                       size_t addr_len, void *out, size_t cap);

/* 0; OOBX_ERR_PROTOCOL for a card that is not this transport's or is
 * malformed; OOBX_ERR_MISMATCH for another version. The reason goes to why. */
int ucx_card_decode(const void *buf, size_t len, ucx_card_t *out, char *why, size_t whylen);

/* ---- messages ------------------------------------------------------------------------ */

/* Largest message of a type, 0 for a type that does not exist. */
size_t ucx_type_max(int type);
/* The largest message of any type (what a kept receive must hold). */
size_t ucx_msg_max(void);

/* The tag of a probed message of len bytes, at rank self of nranks. */
typedef struct ucx_tag_info {
    int type;     /* UCX_T_* */
    int peer;     /* the sender: in range, not self */
    uint32_t seq;
} ucx_tag_info_t;

/* 0, or OOBX_ERR_PROTOCOL (a DATA tag, an unknown type, a sender out of range
 * or self, too long for its type) with the reason in why. */
int ucx_tag_check(uint64_t tag, size_t len, int self, int nranks, ucx_tag_info_t *out, char *why, size_t whylen);

/* A checked message. */
typedef struct ucx_msg {
    int type;
    oobx_msg_hdr_t hdr;           /* EAGER, HDR */
    const unsigned char *payload; /* EAGER: hdr.len bytes inside the message */
    ucx_doorbell_t db;            /* DOORBELL: 1..RINGBUF_SLOTS_MAX chunks */
    uint64_t credit;              /* CREDIT */
    ucx_setup_t setup;            /* SETUP: a usable geometry ... */
    const unsigned char *rkey;    /* ... and setup.rkey_len > 0 bytes of key inside the message */
    uint64_t pull_addr;           /* PULL (its header in hdr) */
    uint64_t pull_ticket, pull_nonce;
    ucx_pull_ack_t ack;           /* PULL_ACK */
} ucx_msg_t;

/* A message of type type and len bytes from rank src. Checks what needs no
 * state: the size of each type, that a message header names src and the
 * length that came, that a HDR message is above the eager size, a doorbell's
 * count, a setup's geometry and key length. 0, or OOBX_ERR_PROTOCOL with the
 * reason in why. */
int ucx_msg_decode(int type, const void *buf, size_t len, int src, ucx_msg_t *m, char *why, size_t whylen);

/* Writes m as it travels (EAGER: hdr and hdr.len bytes from payload; SETUP:
 * setup and setup.rkey_len bytes from rkey). Returns the length, or 0 when it
 * does not fit cap or the type is unknown. */
size_t ucx_msg_encode(const ucx_msg_t *m, void *out, size_t cap);

#pragma GCC visibility pop

#endif
