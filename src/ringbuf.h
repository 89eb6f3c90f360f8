/*
 * The registered ring-buffer protocol, shared by the one-sided transports
 * (ucx/ with ucp_put_nbx, verbs/ with RDMA WRITE WITH IMMEDIATE).
 *
 * A ring link goes from a sender to a receiver. The receiver owns a buffer of
 * `slots` slots of `slot_bytes` bytes each, registered for remote writes. The
 * sender writes one chunk per slot, in sequence order: chunk seq goes to slot
 * seq % slots. A chunk is
 *
 *     ringbuf_chunk_hdr_t (16 B)  seq, payload length, flags
 *     oobx_msg_hdr_t      (32 B)  only in the first chunk of a message
 *     payload                     up to the rest of the slot
 *
 * After the write the sender tells the receiver that the chunk landed (a
 * doorbell: a small message after a fence on UCX, the immediate of the write on
 * verbs) carrying the chunk's sequence number and its total size. The receiver
 * checks the chunk against what it expects, hands its payload to the core,
 * frees the slot, and from time to time returns credits: "every chunk before
 * seq S is free". The sender never has more than `slots` chunks outstanding,
 * so it never overwrites a slot that the receiver has not freed, and no chunk
 * needs a per-step handshake.
 *
 * This file is pure bookkeeping: no I/O, no allocation. Byte order is the
 * host's (the ring only joins hosts of one job, which share an ABI).
 */
#ifndef OOBX_RINGBUF_H
#define OOBX_RINGBUF_H

#include <stddef.h>
#include <stdint.h>
#include "transport.h"

enum {
    RINGBUF_FIRST = 1, /* the chunk begins a message: an oobx_msg_hdr_t follows its header */
    RINGBUF_LAST = 2   /* the chunk ends its message */
};

typedef struct ringbuf_chunk_hdr {
    uint64_t seq;   /* chunk sequence number on this link, from 0 */
    uint32_t len;   /* payload bytes in this chunk (after the headers) */
    uint32_t flags; /* RINGBUF_FIRST | RINGBUF_LAST */
} ringbuf_chunk_hdr_t;

#define RINGBUF_CHUNK_HDR_BYTES ((uint32_t)sizeof(ringbuf_chunk_hdr_t))
#define RINGBUF_MSG_HDR_BYTES ((uint32_t)sizeof(oobx_msg_hdr_t))
#define RINGBUF_HEAD_MAX (RINGBUF_CHUNK_HDR_BYTES + RINGBUF_MSG_HDR_BYTES)
#define RINGBUF_SLOT_MIN 64u           /* bytes: headers plus at least 16 payload bytes */
#define RINGBUF_SLOT_MAX (64u << 20)   /* bytes */
#define RINGBUF_SLOTS_MAX 4096u
#define RINGBUF_TOTAL_MAX (1ull << 30) /* bytes registered per link */

/* 0 when the geometry is usable; else OOBX_ERR_INVALID with the reason in why. */
int oobx__ringbuf_geom_check(uint32_t slots, uint32_t slot_bytes, char *why, size_t whylen);

/* ---- sender side ------------------------------------------------------------ */

typedef struct ringbuf_tx {
    uint32_t slots;
    uint32_t slot_bytes;
    uint64_t next_seq;   /* sequence number of the next chunk */
    uint64_t credit_seq; /* the receiver has freed every chunk before this */
    int in_msg;          /* a message is being cut into chunks */
    oobx_msg_hdr_t hdr;  /* that message */
    uint64_t off;        /* payload bytes of it already cut */
} ringbuf_tx_t;

/* One chunk to write: head (head_len bytes) at slot_off in the remote ring,
 * then payload bytes [pay_off, pay_off + pay_len) of the message right after it
 * (at slot_off + head_len). */
typedef struct ringbuf_chunk {
    uint64_t seq;
    uint32_t slot;
    uint64_t slot_off;  /* slot * slot_bytes */
    unsigned char head[RINGBUF_HEAD_MAX];
    uint32_t head_len;
    uint64_t pay_off;
    uint32_t pay_len;
    uint32_t bytes;     /* head_len + pay_len: what the doorbell announces */
    int first;
    int last;           /* the message is fully cut after this chunk */
} ringbuf_chunk_t;

void oobx__ringbuf_tx_init(ringbuf_tx_t *tx, uint32_t slots, uint32_t slot_bytes);

/* Slots the sender may fill now. */
uint32_t oobx__ringbuf_tx_free_slots(const ringbuf_tx_t *tx);

/* Credits from the receiver: every chunk before seq is free. Stale credits are
 * ignored; credits for chunks never sent are OOBX_ERR_PROTOCOL. */
int oobx__ringbuf_tx_credit(ringbuf_tx_t *tx, uint64_t seq);

/* Begins cutting a message of hdr->len payload bytes. One message at a time:
 * OOBX_ERR_INVALID when the previous one is not fully cut. */
int oobx__ringbuf_tx_msg_begin(ringbuf_tx_t *tx, const oobx_msg_hdr_t *hdr);

/* Cuts the next chunk of the current message into *c and takes its slot.
 * Returns 1 with a chunk, 0 when no slot is free (wait for credits) or no
 * message is being cut. A zero-length message is one chunk with no payload. */
int oobx__ringbuf_tx_next(ringbuf_tx_t *tx, ringbuf_chunk_t *c);

/* Payload bytes the first chunk and the following ones carry. */
uint32_t oobx__ringbuf_first_payload(uint32_t slot_bytes);
uint32_t oobx__ringbuf_next_payload(uint32_t slot_bytes);
/* Chunks a message of len payload bytes takes. */
uint64_t oobx__ringbuf_msg_chunks(uint32_t slot_bytes, uint64_t len);

/* ---- receiver side ---------------------------------------------------------- */

typedef struct ringbuf_rx {
    uint32_t slots;
    uint32_t slot_bytes;
    uint32_t credit_batch; /* return credits once this many slots are free */
    uint64_t next_seq;     /* the chunk expected next */
    uint64_t freed_seq;    /* every chunk before this has been consumed */
    uint64_t credited_seq; /* what the sender was last told */
    int in_msg;            /* a message is being assembled */
    oobx_msg_hdr_t hdr;    /* that message */
    uint64_t off;          /* payload bytes of it received */
} ringbuf_rx_t;

/* What a landed chunk holds. */
typedef struct ringbuf_rx_ev {
    int first;          /* a message begins: hdr is its header */
    int last;           /* the message is complete after this piece */
    oobx_msg_hdr_t hdr; /* the current message (valid in every event) */
    const void *data;   /* payload piece ... */
    uint32_t len;       /* ... of len bytes ... */
    uint64_t off;       /* ... at this offset in the message */
} ringbuf_rx_ev_t;

/* credit_batch 0: a quarter of the slots. */
void oobx__ringbuf_rx_init(ringbuf_rx_t *rx, uint32_t slots, uint32_t slot_bytes, uint32_t credit_batch);

/* Offset in the ring of the slot that chunk seq lands in. */
uint64_t oobx__ringbuf_slot_off(uint32_t slots, uint32_t slot_bytes, uint64_t seq);

/* Makes a fresh receive buffer ready: clears the slots' chunk headers only.
 * A chunk is read after its doorbell, and the payload bytes are the
 * sender's to write, so clearing the whole buffer would only touch every
 * page of it at set-up. */
void oobx__ringbuf_clear_headers(void *ring, uint32_t slots, uint32_t slot_bytes);

/* A doorbell said chunk seq of bytes bytes landed; ring is the receive buffer.
 * Checks it (sequence, size, headers, message boundaries) and describes it in
 * *ev. The slot stays owned by the receiver until oobx__ringbuf_rx_release().
 * Returns 0, or OOBX_ERR_PROTOCOL with the reason in why. */
int oobx__ringbuf_rx_chunk(ringbuf_rx_t *rx, const void *ring, uint64_t seq, uint32_t bytes,
                     ringbuf_rx_ev_t *ev, char *why, size_t whylen);

/* The size chunk seq announces in its own header: for doorbells that carry a
 * count of chunks rather than each size (writes are ordered before the
 * doorbell). 0 when the slot does not hold a well-formed chunk seq; then
 * oobx__ringbuf_rx_chunk() refuses it. */
uint32_t oobx__ringbuf_rx_peek_bytes(const ringbuf_rx_t *rx, const void *ring, uint64_t seq);

/* The oldest landed chunk has been consumed: frees its slot. Returns 1 and
 * *credit (send it to the sender) when a credit update is due, else 0. */
int oobx__ringbuf_rx_release(ringbuf_rx_t *rx, uint64_t *credit);

#endif
