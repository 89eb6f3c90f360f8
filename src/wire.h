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
#define OOBX_WIRE_VERSION 1

enum {
    OOBX_HELLO_ROOT = 1,       /* rank -> root: a report follows */
    OOBX_HELLO_ROOT_EXTRA = 2, /* first rank of a block -> previous root: a report follows */
    OOBX_HELLO_PEER = 3,       /* socket transport connection, connector side */
    OOBX_HELLO_PEER_ACK = 4,   /* socket transport connection, acceptor's answer */
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

#define OOBX_REPORT_BYTES 24
typedef struct oobx_report {
    int32_t rank;      /* as this root sees it (nranks for the wrap-around extra report) */
    int32_t nranks;
    int32_t iroot;
    int32_t nroots;
    uint32_t tpid;     /* transport id of the ring (tp_table.h) */
    uint32_t blob_len; /* followed by this many bytes of ring address */
} oobx_report_t;

#define OOBX_REPLY_BYTES 8
typedef struct oobx_reply {
    int32_t status;   /* 0: the next rank's blob follows (none: an acknowledgement); < 0: an error text follows */
    uint32_t len;
} oobx_reply_t;
#define OOBX_REPLY_TEXT_MAX 1024

#define OOBX_MSGHDR_BYTES 32
#define OOBX_MSGHDR_CHECK 0x0b0bu
#define OOBX_MSG_MAX_LEN (1ull << 44) /* 16 TiB: anything above is garbage */

void oobx__hello_encode(const oobx_hello_t *h, unsigned char out[OOBX_HELLO_BYTES]);
/* 0, or OOBX_ERR_PROTOCOL / OOBX_ERR_MISMATCH with the reason in why */
int oobx__hello_decode(const unsigned char *in, size_t len, oobx_hello_t *h, char *why, size_t whylen);

void oobx__report_encode(const oobx_report_t *r, unsigned char out[OOBX_REPORT_BYTES]);
int oobx__report_decode(const unsigned char *in, size_t len, oobx_report_t *r, char *why, size_t whylen);

void oobx__reply_encode(const oobx_reply_t *r, unsigned char out[OOBX_REPLY_BYTES]);
int oobx__reply_decode(const unsigned char *in, size_t len, oobx_reply_t *r, char *why, size_t whylen);

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
