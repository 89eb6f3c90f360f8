/*
 * Every message oobx puts on a socket, with its encoder and its parser.
 * Integers are little-endian, fixed width. docs/protocol.md describes the
 * same layouts; the parsers are the fuzz targets in tests/fuzz/.
 */
#ifndef OOBX_WIRE_H
#define OOBX_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include "transport.h"

#define OOBX_WIRE_MAGIC 0x5842304fu /* "O0BX" read as little-endian bytes 4f 30 42 58 */
#define OOBX_NRANKS_MAX (1 << 22) /* the most ranks a job may have on the wire */
#define OOBX_WIRE_VERSION 3 /* 2: node-aware root reports (HELLO_ROOT_NODE*) and placements; 3: the origin
                              of a refusal in the root's reply */

enum {
    OOBX_HELLO_ROOT = 1,       /* rank -> root: a report follows */
    OOBX_HELLO_ROOT_EXTRA = 2, /* first rank of a block -> previous root: a report follows */
    OOBX_HELLO_PEER = 3,       /* socket transport connection, connector side */
    OOBX_HELLO_PEER_ACK = 4,   /* socket transport connection, acceptor's answer */
    OOBX_HELLO_ROOT_NODE = 5,  /* rank -> root, node-aware: a report (blob: the rank's card) follows; the
                                  answer is a placement, sent once the root's whole block has reported */
    OOBX_HELLO_ROOT_NODE_EXTRA = 6, /* first rank of a block -> previous root, node-aware: the answer names
                                       the previous root's last group leader */
};



#define OOBX_HELLO_BYTES 32
typedef struct oobx_hello {
    uint32_t proto_magic;
    uint16_t version;
    uint16_t type;
    uint64_t comm_magic;
    int32_t rank;
    int32_t nranks;
    uint64_t reserved;
} oobx_hello_t;

#define OOBX_REPORT_BYTES 28
typedef struct oobx_report {
    int32_t rank;      /* as this root sees it (nranks for the wrap-around extra report) */
    int32_t nranks;
    int32_t iroot;
    int32_t nroots;
    uint32_t tpid;     /* transport id of the ring (tp_table.h) */
    uint32_t blob_len; /* followed by this many bytes of ring address */
    uint32_t wait_ms;  /* how long the rank will wait for the answer (OOBX_WAIT_FOREVER: no bound): the
                          root gives up, naming the ranks that never checked in, before the first rank does */
} oobx_report_t;
#define OOBX_WAIT_FOREVER 0xffffffffu

#define OOBX_REPLY_BYTES 12
typedef struct oobx_reply {
    int32_t status;   /* 0: the next rank's blob follows (none: an acknowledgement); < 0: an error text follows */
    uint32_t len;
    int32_t origin;   /* an error: the rank whose going or silence made the root refuse (it never checked in,
                         gave up, closed its connection), -1 when none did (the job's settings, this rank's own
                         report); an answer: -1 */
} oobx_reply_t;
#define OOBX_REPLY_TEXT_MAX 1024

/* Node-aware answer of a root to a rank (OOBX_HELLO_ROOT_NODE): where the
 * rank stands among the ranks of its host (its group: the ranks of the root's
 * block whose cards carry the same host id). Leaders (the lowest rank of each
 * group) also get the group's members and their ring neighbours among the
 * leaders; the next leader's card follows the members. */
#define OOBX_PLACE_BYTES 48
typedef struct oobx_place {
    uint64_t epoch;       /* random per root run: names the group's shared segment */
    uint64_t host;        /* the group's host id */
    int32_t local_index;  /* in the group, by rank */
    int32_t local_size;
    int32_t leader;       /* the group's leader (lowest rank) */
    int32_t next_leader;  /* leaders: the next group's leader (itself when it is the only group); else -1 */
    int32_t prev_leader;  /* leaders: the previous group's leader, -1 when another root knows it (the
                             first group of a block, with several roots) */
    uint32_t nmembers;    /* leaders: local_size member ranks (u32) follow; others 0 */
    uint32_t next_len;    /* leaders: bytes of the next leader's card after the members */
    uint32_t reserved;
} oobx_place_t;
/* the largest answer a root sends: the placement, the members, a card */
#define OOBX_PLACE_MAX(nranks) (OOBX_PLACE_BYTES + 4 * (size_t)(nranks) + OOBX_ADDR_MAX)

#define OOBX_MSGHDR_BYTES 32
/* Socket stream frames beside messages (in the kind field): a message whose
 * kind carries OOBX_FRAME_RTS sends its payload only after the receiver's
 * CTS_GO, in a DATA frame; after CTS_SKIP (the receiver does not want it)
 * the payload is never sent. CTS frames have no payload. */
#define OOBX_FRAME_RTS 0x100u
#define OOBX_FRAME_CTS_GO 0x200u
#define OOBX_FRAME_CTS_SKIP 0x201u
#define OOBX_FRAME_DATA 0x202u /* the payload of the rendezvous told to go (len: its size) */
/* With OOBX_FRAME_RTS: the receiver may pull the payload from the sender's
 * memory (cma.h); a 16-byte descriptor follows the header (u64 address, u64
 * length). The receiver answers CTS_DONE when it did, CTS_GO when it could
 * not (the payload comes in a DATA frame), CTS_SKIP when it drops it. */
#define OOBX_FRAME_CMA 0x400u
#define OOBX_FRAME_CTS_DONE 0x203u
#define OOBX_MSGHDR_CHECK 0x0b0bu
#define OOBX_MSG_MAX_LEN (1ull << 44) /* 16 TiB: anything above is garbage */

void oobx__hello_encode(const oobx_hello_t *h, unsigned char out[OOBX_HELLO_BYTES]);
/* 0, or OOBX_ERR_PROTOCOL / OOBX_ERR_MISMATCH with the reason in why */
int oobx__hello_decode(const unsigned char *in, size_t len, oobx_hello_t *h, char *why, size_t whylen);

void oobx__report_encode(const oobx_report_t *r, unsigned char out[OOBX_REPORT_BYTES]);
int oobx__report_decode(const unsigned char *in, size_t len, oobx_report_t *r, char *why, size_t whylen);

void oobx__reply_encode(const oobx_reply_t *r, unsigned char out[OOBX_REPLY_BYTES]);
int oobx__reply_decode(const unsigned char *in, size_t len, oobx_reply_t *r, char *why, size_t whylen);

void oobx__place_encode(const oobx_place_t *p, unsigned char out[OOBX_PLACE_BYTES]);
/* Checks a placement of len bytes (members and card included) for a job of
 * nranks: 0, or OOBX_ERR_PROTOCOL with why. */
int oobx__place_decode(const unsigned char *in, size_t len, int nranks, oobx_place_t *p, char *why, size_t whylen);

void oobx__msghdr_encode(const oobx_msg_hdr_t *h, unsigned char out[OOBX_MSGHDR_BYTES]);
int oobx__msghdr_decode(const unsigned char *in, size_t len, oobx_msg_hdr_t *h, char *why, size_t whylen);

/* little-endian helpers */
void oobx__put_u16(unsigned char *p, uint16_t v);
void oobx__put_u32(unsigned char *p, uint32_t v);
void oobx__put_u64(unsigned char *p, uint64_t v);
uint16_t oobx__get_u16(const unsigned char *p);
uint32_t oobx__get_u32(const unsigned char *p);
uint64_t oobx__get_u64(const unsigned char *p);

#endif
