/* Writes the seed inputs of every fuzz target: valid messages made by the
 * encoders, plus a few near misses. Usage: mkseeds tests/fuzz/corpus */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ringbuf.h"
#include "root.h"
#include "wire.h"

static const char *top;

static void put(const char *target, const char *name, const void *data, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", top, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
    snprintf(path, sizeof path, "%s/%s/seed-%s", top, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static void hellos(void)
{
    unsigned char b[OOBX_HELLO_BYTES];
    for (int t = OOBX_HELLO_ROOT; t <= OOBX_HELLO_PEER_ACK; t++) {
        oobx_hello_t h = {.proto_magic = OOBX_WIRE_MAGIC, .version = OOBX_WIRE_VERSION, .type = (uint16_t)t,
                          .comm_magic = 0x1122334455667788ull, .rank = 3, .nranks = 8};
        oobx_hello_encode(&h, b);
        char name[32];
        snprintf(name, sizeof name, "type%d", t);
        put("hello", name, b, sizeof b);
    }
    oobx_hello_t h = {.proto_magic = OOBX_WIRE_MAGIC, .version = OOBX_WIRE_VERSION + 1, .type = 1,
                      .comm_magic = 1, .rank = 0, .nranks = 1};
    oobx_hello_encode(&h, b);
    put("hello", "version2", b, sizeof b);
    put("hello", "short", b, 7);
}

static void reports(void)
{
    unsigned char b[OOBX_REPORT_BYTES];
    oobx_report_t r = {.rank = 5, .nranks = 16, .iroot = 1, .nroots = 3, .tpid = OOBX_TPID_SOCKET, .blob_len = 28};
    oobx_report_encode(&r, b);
    put("report", "rank5of16", b, sizeof b);
    r.rank = 16; /* the wrap-around extra report */
    r.tpid = OOBX_TPID_UCX;
    r.blob_len = OOBX_ADDR_MAX;
    oobx_report_encode(&r, b);
    put("report", "extra", b, sizeof b);
    r.blob_len = OOBX_ADDR_MAX + 1;
    oobx_report_encode(&r, b);
    put("report", "blob-too-long", b, sizeof b);
}

static void replies(void)
{
    unsigned char b[OOBX_REPLY_BYTES];
    oobx_reply_t r = {.status = 0, .len = 28};
    oobx_reply_encode(&r, b);
    put("reply", "ok", b, sizeof b);
    r.status = OOBX_ERR_MISMATCH;
    r.len = 100;
    oobx_reply_encode(&r, b);
    put("reply", "error", b, sizeof b);
    r.status = 0;
    r.len = 0;
    oobx_reply_encode(&r, b);
    put("reply", "ack", b, sizeof b);
}

static void msghdrs(void)
{
    unsigned char b[OOBX_MSGHDR_BYTES];
    for (uint32_t k = OOBX_MSG_P2P; k <= OOBX_MSG_CTRL; k++) {
        oobx_msg_hdr_t h = {.ctx = 0xabcdefull, .tag = 42, .len = 4096, .src = 7, .kind = k};
        oobx_msghdr_encode(&h, b);
        char name[32];
        snprintf(name, sizeof name, "kind%u", k);
        put("msghdr", name, b, sizeof b);
    }
    oobx_msg_hdr_t h = {.ctx = 1, .tag = 1, .len = OOBX_MSG_MAX_LEN, .src = 0, .kind = OOBX_MSG_P2P};
    oobx_msghdr_encode(&h, b);
    put("msghdr", "maxlen", b, sizeof b);
}

static void ids(void)
{
    oobx_unique_id_t id;
    root_handle_t h;
    memset(&h, 0, sizeof h);
    h.magic = 0x0123456789abcdefull;
    h.addr.sin.sin_family = AF_INET;
    h.addr.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    h.addr.sin.sin_port = htons(29500);
    root_handle_encode(&h, &id);
    put("unique_id", "ipv4", id.internal, sizeof id.internal);
    memset(&h, 0, sizeof h);
    h.magic = 42;
    h.addr.sin6.sin6_family = AF_INET6;
    h.addr.sin6.sin6_addr = in6addr_loopback;
    h.addr.sin6.sin6_port = htons(29501);
    root_handle_encode(&h, &id);
    put("unique_id", "ipv6", id.internal, sizeof id.internal);
    id.internal[4] = 9; /* another protocol version */
    put("unique_id", "version9", id.internal, sizeof id.internal);
}

static void ring(void)
{
    /* 4 slots of 128 bytes: bytes 0 and 1 as fuzz_ringbuf.c reads them */
    unsigned char out[8192];
    size_t n = 0;
    out[n++] = 2;
    out[n++] = 8;
    uint32_t slots = 4, slot_bytes = 128;
    ringbuf_tx_t tx;
    ringbuf_tx_init(&tx, slots, slot_bytes);
    uint64_t lens[] = {300, 0, 5};
    unsigned char payload[400];
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (unsigned char)(i * 7);
    for (size_t m = 0; m < 3; m++) {
        oobx_msg_hdr_t h = {.ctx = 9, .tag = m, .len = lens[m], .src = 1, .kind = OOBX_MSG_P2P};
        if (ringbuf_tx_msg_begin(&tx, &h) != 0) exit(1);
        ringbuf_chunk_t c;
        while (ringbuf_tx_next(&tx, &c) == 1) {
            out[n++] = 1;
            out[n++] = 0;
            out[n++] = (unsigned char)c.bytes;
            out[n++] = (unsigned char)(c.bytes >> 8);
            out[n++] = (unsigned char)c.bytes;
            out[n++] = (unsigned char)(c.bytes >> 8);
            memcpy(out + n, c.head, c.head_len);
            memcpy(out + n + c.head_len, payload + c.pay_off, c.pay_len);
            n += c.bytes;
            ringbuf_tx_credit(&tx, c.seq + 1);
            if (c.last) break;
        }
    }
    put("ringbuf", "three-messages", out, n);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    top = argv[1];
    mkdir(top, 0755);
    hellos();
    reports();
    replies();
    msghdrs();
    ids();
    ring();
    return 0;
}
