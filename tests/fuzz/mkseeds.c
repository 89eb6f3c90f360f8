/* Writes the seed inputs of every fuzz target: valid messages made by the
 * encoders, plus a few near misses. Usage: mkseeds tests/fuzz/corpus */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "auth.h"
#include "ringbuf.h"
#include "root.h"
#include "ucx_wire.h"
#include "verbs_wire.h"
#include "tp_table.h"
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
        oobx__hello_encode(&h, b);
        char name[32];
        snprintf(name, sizeof name, "type%d", t);
        put("hello", name, b, sizeof b);
    }
    oobx_hello_t h = {.proto_magic = OOBX_WIRE_MAGIC, .version = OOBX_WIRE_VERSION + 1, .type = 1,
                      .comm_magic = 1, .rank = 0, .nranks = 1};
    oobx__hello_encode(&h, b);
    put("hello", "version2", b, sizeof b);
    put("hello", "short", b, 7);
}

static void reports(void)
{
    unsigned char b[OOBX_REPORT_BYTES];
    oobx_report_t r = {.rank = 5, .nranks = 16, .iroot = 1, .nroots = 3, .tpid = oobx__tp_find("socket")->id, .blob_len = 28};
    oobx__report_encode(&r, b);
    put("report", "rank5of16", b, sizeof b);
    r.rank = 16; /* the wrap-around extra report */
    r.tpid = oobx__tp_find("ucx")->id;
    r.blob_len = OOBX_ADDR_MAX;
    oobx__report_encode(&r, b);
    put("report", "extra", b, sizeof b);
    r.blob_len = OOBX_ADDR_MAX + 1;
    oobx__report_encode(&r, b);
    put("report", "blob-too-long", b, sizeof b);
}

static void replies(void)
{
    unsigned char b[OOBX_REPLY_BYTES];
    oobx_reply_t r = {.status = 0, .len = 28, .origin = -1};
    oobx__reply_encode(&r, b);
    put("reply", "ok", b, sizeof b);
    r.status = OOBX_ERR_MISMATCH;
    r.len = 100;
    oobx__reply_encode(&r, b);
    put("reply", "error", b, sizeof b);
    r.status = OOBX_ERR_TIMEOUT;
    r.origin = 12;
    oobx__reply_encode(&r, b);
    put("reply", "origin", b, sizeof b);
    r.origin = -1;
    r.status = 0;
    r.len = 0;
    oobx__reply_encode(&r, b);
    put("reply", "ack", b, sizeof b);
}

static void msghdrs(void)
{
    unsigned char b[OOBX_MSGHDR_BYTES];
    for (uint32_t k = OOBX_MSG_P2P; k <= OOBX_MSG_CTRL; k++) {
        oobx_msg_hdr_t h = {.ctx = 0xabcdefull, .tag = 42, .len = 4096, .src = 7, .kind = k};
        oobx__msghdr_encode(&h, b);
        char name[32];
        snprintf(name, sizeof name, "kind%u", k);
        put("msghdr", name, b, sizeof b);
    }
    oobx_msg_hdr_t h = {.ctx = 1, .tag = 1, .len = OOBX_MSG_MAX_LEN, .src = 0, .kind = OOBX_MSG_P2P};
    oobx__msghdr_encode(&h, b);
    put("msghdr", "maxlen", b, sizeof b);
    /* the single-copy frames: a rendezvous offering a pull, its answer */
    h = (oobx_msg_hdr_t){.ctx = 1, .tag = 3, .len = 1 << 20, .src = 2,
                         .kind = OOBX_MSG_P2P | OOBX_FRAME_RTS | OOBX_FRAME_CMA};
    oobx__msghdr_encode(&h, b);
    put("msghdr", "rts-cma", b, sizeof b);
    h = (oobx_msg_hdr_t){.ctx = 1, .tag = 3, .len = 0, .src = 2, .kind = OOBX_FRAME_CTS_DONE};
    oobx__msghdr_encode(&h, b);
    put("msghdr", "cts-done", b, sizeof b);
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
    oobx__root_handle_encode(&h, &id);
    {
        /* the handshake: a challenge, and a hello with a proof for the fuzz target's secret */
        static const unsigned char secret[OOBX_SECRET_BYTES] = "oobx-fuzz-secrt";
        oobx_auth_t a;
        unsigned char ch[OOBX_CHALLENGE_BYTES], first[OOBX_HELLO_BYTES + OOBX_PROOF_BYTES];
        oobx__auth_challenge(&a, ch);
        put("handshake", "challenge", ch, sizeof ch);
        oobx_hello_t hh = {.proto_magic = OOBX_WIRE_MAGIC, .version = OOBX_WIRE_VERSION, .type = OOBX_HELLO_PEER,
                           .comm_magic = 0x1234, .rank = 1, .nranks = 4};
        oobx__hello_encode(&hh, first);
        memset(a.nonce_a, 0x5a, sizeof a.nonce_a);
        oobx__auth_prove(secret, &a, first, first + OOBX_HELLO_BYTES);
        put("handshake", "hello-proof", first, sizeof first);
        oobx__auth_prove_counted(secret, &a, first, 7, first + OOBX_HELLO_BYTES);
        put("handshake", "hello-counted", first, sizeof first);
    }
    put("unique_id", "ipv4", id.internal, sizeof id.internal);
    memset(&h, 0, sizeof h);
    h.magic = 42;
    h.addr.sin6.sin6_family = AF_INET6;
    h.addr.sin6.sin6_addr = in6addr_loopback;
    h.addr.sin6.sin6_port = htons(29501);
    oobx__root_handle_encode(&h, &id);
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
    oobx__ringbuf_tx_init(&tx, slots, slot_bytes);
    uint64_t lens[] = {300, 0, 5};
    unsigned char payload[400];
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (unsigned char)(i * 7);
    for (size_t m = 0; m < 3; m++) {
        oobx_msg_hdr_t h = {.ctx = 9, .tag = m, .len = lens[m], .src = 1, .kind = OOBX_MSG_P2P};
        if (oobx__ringbuf_tx_msg_begin(&tx, &h) != 0) exit(1);
        ringbuf_chunk_t c;
        while (oobx__ringbuf_tx_next(&tx, &c) == 1) {
            out[n++] = 1;
            out[n++] = 0;
            out[n++] = (unsigned char)c.bytes;
            out[n++] = (unsigned char)(c.bytes >> 8);
            out[n++] = (unsigned char)c.bytes;
            out[n++] = (unsigned char)(c.bytes >> 8);
            memcpy(out + n, c.head, c.head_len);
            memcpy(out + n + c.head_len, payload + c.pay_off, c.pay_len);
            n += c.bytes;
            oobx__ringbuf_tx_credit(&tx, c.seq + 1);
            if (c.last) break;
        }
    }
    put("ringbuf", "three-messages", out, n);
}

/* ---- the transports' wire messages (verbs_wire.h, ucx_wire.h) ---- */

static void verbs_cards(void)
{
    unsigned char b[VERBS_CARD_MAX];
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    in->sin_family = AF_INET;
    in->sin_port = htons(41233);
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    size_t n = verbs_card_encode(0x0123456789abcdefull, 4242, &ss, "emu0", b, sizeof b);
    put("verbs_card", "ipv4", b, n);
    put("verbs_card", "short", b, n - 1);
    put("verbs_card", "header-only", b, sizeof(verbs_blob_t));
    verbs_blob_t h;
    memcpy(&h, b, sizeof h);
    h.version = VERBS_BLOB_VERSION + 1;
    memcpy(b, &h, sizeof h);
    put("verbs_card", "version2", b, n);
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(41234);
    in6->sin6_addr = in6addr_loopback;
    in6->sin6_scope_id = 2;
    char dev[VERBS_DEV_NAME_MAX];
    memset(dev, 'm', sizeof dev - 1);
    dev[sizeof dev - 1] = '\0';
    n = verbs_card_encode(7, 1, &ss, dev, b, sizeof b);
    put("verbs_card", "ipv6-longest-name", b, n);
    n = verbs_card_encode(7, 1, &ss, "mlx5_0", b, sizeof b);
    memcpy(&h, b, sizeof h);
    h.port = 0;
    memcpy(b, &h, sizeof h);
    put("verbs_card", "port0", b, n);
}

static void verbs_cm(void)
{
    /* bytes 0-3 as fuzz_verbs_cm.c reads them: parser, nranks - 1, self, expected rank */
    unsigned char b[4 + 56];
    memset(b, 0, sizeof b);
    verbs_cm_hello_t h;
    verbs_cm_hello_encode(0x1122334455667788ull, 3, 8, &h);
    b[1] = 7;
    b[2] = 5;
    b[3] = 0xff;
    memcpy(b + 4, &h, sizeof h);
    put("verbs_cm", "request", b, 4 + sizeof h);
    put("verbs_cm", "request-padded", b, sizeof b); /* rdma_cm pads private data */
    put("verbs_cm", "request-short", b, 4 + sizeof h - 1);
    b[2] = 3;
    put("verbs_cm", "request-self", b, 4 + sizeof h);
    b[2] = 5;
    b[3] = 3;
    put("verbs_cm", "accept", b, 4 + sizeof h);
    verbs_cm_hello_encode(0x99ull, 3, 8, &h);
    memcpy(b + 4, &h, sizeof h);
    put("verbs_cm", "accept-other-comm", b, 4 + sizeof h);
    h.comm_magic = 0x1122334455667788ull;
    h.version = VERBS_CM_VERSION + 1;
    memcpy(b + 4, &h, sizeof h);
    put("verbs_cm", "accept-version2", b, 4 + sizeof h);
    verbs_cm_reject_t rj = {.cm_magic = VERBS_CM_MAGIC, .code = VERBS_REJ_CROSSED};
    memset(b, 0, sizeof b);
    b[0] = 1;
    memcpy(b + 4, &rj, sizeof rj);
    put("verbs_cm", "reject-crossed", b, 4 + sizeof rj);
    put("verbs_cm", "reject-padded", b, sizeof b);
    rj.cm_magic = 0;
    memcpy(b + 4, &rj, sizeof rj);
    put("verbs_cm", "reject-foreign", b, 4 + sizeof rj);
}

/* byte 0 as fuzz_verbs_msg.c reads it: the sender's rank */
static void verbs_msg_put(const char *name, const verbs_msg_t *m, int src, size_t cut)
{
    static unsigned char b[1 + VERBS_BUF_BYTES];
    b[0] = (unsigned char)src;
    size_t n = verbs_msg_encode(m, b + 1, VERBS_BUF_BYTES);
    if (n == 0) {
        fprintf(stderr, "mkseeds: verbs message %s does not encode\n", name);
        exit(1);
    }
    put("verbs_msg", name, b, 1 + n - cut);
}

static void verbs_msgs(void)
{
    static unsigned char pay[VERBS_EAGER_MAX];
    for (size_t i = 0; i < sizeof pay; i++) pay[i] = (unsigned char)(i * 13);
    verbs_msg_t m;
    memset(&m, 0, sizeof m);
    m.w.type = VERBS_T_EAGER;
    m.w.credits = 3;
    m.hdr = (oobx_msg_hdr_t){.ctx = 9, .tag = 1, .len = 100, .src = 2, .kind = OOBX_MSG_P2P};
    m.payload = pay;
    verbs_msg_put("eager", &m, 2, 0);
    verbs_msg_put("eager-cut", &m, 2, 1);
    verbs_msg_put("eager-other-sender", &m, 5, 0);
    m.hdr.len = VERBS_EAGER_MAX;
    verbs_msg_put("eager-max", &m, 2, 0);
    m.hdr.len = 0;
    verbs_msg_put("eager-empty", &m, 2, 0);
    m.w.type = VERBS_T_RTS;
    m.hdr.len = 1 << 20;
    m.rts = (verbs_rts_t){.addr = 0x7f0000001000ull, .rkey = 0x1234, .id = 77};
    verbs_msg_put("rts", &m, 2, 0);
    m.hdr.len = VERBS_EAGER_MAX;
    verbs_msg_put("rts-small", &m, 2, 0);
    m.w.type = VERBS_T_MOVED;
    m.rts = (verbs_rts_t){.addr = 0x7f0000800000ull, .rkey = 0x4321, .id = 77};
    verbs_msg_put("moved", &m, 2, 0);
    m.w.type = VERBS_T_FIN;
    m.value = 77;
    verbs_msg_put("fin", &m, 2, 0);
    m.w.type = VERBS_T_CREDIT;
    m.w.credits = VERBS_RECV_DEPTH;
    verbs_msg_put("credit", &m, 2, 0);
    m.w.credits = VERBS_RECV_DEPTH + 1;
    verbs_msg_put("credit-too-many", &m, 2, 0);
    m.w.credits = 0;
    m.w.type = VERBS_T_SETUP;
    m.setup = (verbs_setup_t){.addr = 0x7f0000100000ull, .rkey = 0x99, .slots = 64, .slot_bytes = 4096};
    verbs_msg_put("setup", &m, 2, 0);
    m.setup.slot_bytes = 4100;
    verbs_msg_put("setup-bad-slot", &m, 2, 0);
    m.w.type = VERBS_T_RCREDIT;
    m.value = 48;
    verbs_msg_put("rcredit", &m, 2, 0);
    m.w.type = VERBS_T_AUTH;
    for (size_t i = 0; i < sizeof m.mac; i++) m.mac[i] = (unsigned char)(i * 7 + 3);
    verbs_msg_put("auth", &m, 2, 0);
    m.w.type = 9;
    unsigned char b[1 + sizeof(verbs_wire_t)] = {2};
    memcpy(b + 1, &m.w, sizeof m.w);
    put("verbs_msg", "unknown-type", b, sizeof b);
}

static void ucx_cards(void)
{
    unsigned char b[sizeof(ucx_blob_hdr_t) + 200];
    unsigned char addr[200];
    for (size_t i = 0; i < sizeof addr; i++) addr[i] = (unsigned char)(i * 31 + 1);
    size_t n = ucx_card_encode(4242, "node017.cluster", NULL, addr, sizeof addr, b, sizeof b);
    put("ucx_card", "card", b, n);
    put("ucx_card", "short", b, n - 1);
    put("ucx_card", "header-only", b, sizeof(ucx_blob_hdr_t));
    n = ucx_card_encode(1, "a-host-name-longer-than-the-forty-seven-bytes-a-card-holds", NULL, addr, 16, b, sizeof b);
    put("ucx_card", "long-host", b, n);
    ucx_blob_hdr_t h;
    memcpy(&h, b, sizeof h);
    h.version = UCX_BLOB_VERSION + 1;
    memcpy(b, &h, sizeof h);
    put("ucx_card", "version2", b, n);
    h.magic = VERBS_BLOB_MAGIC;
    memcpy(b, &h, sizeof h);
    put("ucx_card", "verbs-magic", b, n);
}

/* bytes 0-9 as fuzz_ucx_ctrl.c reads them: nranks - 1, self, tag */
static void ucx_ctrl_put(const char *name, const ucx_msg_t *m, int src, size_t cut)
{
    static unsigned char b[10 + UCX_CTRL_MAX + UCX_EAGER_MAX];
    uint64_t tag = ucx_tag(m->type, src, 12345);
    b[0] = 15;
    b[1] = 0;
    for (int i = 0; i < 8; i++) b[2 + i] = (unsigned char)(tag >> (8 * i));
    size_t n = ucx_msg_encode(m, b + 10, sizeof b - 10);
    if (n == 0) {
        fprintf(stderr, "mkseeds: ucx message %s does not encode\n", name);
        exit(1);
    }
    put("ucx_ctrl", name, b, 10 + n - cut);
}

static void ucx_ctrls(void)
{
    static unsigned char pay[UCX_EAGER_MAX];
    for (size_t i = 0; i < sizeof pay; i++) pay[i] = (unsigned char)(i * 7);
    ucx_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = UCX_T_EAGER;
    m.hdr = (oobx_msg_hdr_t){.ctx = 5, .tag = 2, .len = 200, .src = 3, .kind = OOBX_MSG_P2P};
    m.payload = pay;
    ucx_ctrl_put("eager", &m, 3, 0);
    ucx_ctrl_put("eager-cut", &m, 3, 1);
    ucx_ctrl_put("eager-from-self", &m, 0, 0);
    m.hdr.len = UCX_EAGER_MAX;
    ucx_ctrl_put("eager-max", &m, 3, 0);
    m.type = UCX_T_HDR;
    m.hdr.len = 1 << 20;
    ucx_ctrl_put("hdr", &m, 3, 0);
    m.hdr.len = UCX_EAGER_MAX;
    ucx_ctrl_put("hdr-small", &m, 3, 0);
    m.type = UCX_T_DOORBELL;
    m.db = (ucx_doorbell_t){.seq = 40, .count = 3};
    ucx_ctrl_put("doorbell", &m, 3, 0);
    m.db.count = 0;
    ucx_ctrl_put("doorbell-empty", &m, 3, 0);
    m.type = UCX_T_CREDIT;
    m.credit = 64;
    ucx_ctrl_put("credit", &m, 3, 0);
    static unsigned char key[300];
    for (size_t i = 0; i < sizeof key; i++) key[i] = (unsigned char)(i ^ 0x5a);
    m.type = UCX_T_SETUP;
    m.setup = (ucx_setup_t){.slots = 64, .slot_bytes = 16384, .raddr = 0x7f0000200000ull, .rkey_len = sizeof key};
    m.rkey = key;
    ucx_ctrl_put("setup", &m, 3, 0);
    ucx_ctrl_put("setup-cut", &m, 3, 1);
    m.setup.slots = 1;
    ucx_ctrl_put("setup-one-slot", &m, 3, 0);
    m.setup.slots = 64;
    m.setup.rkey_len = 0;
    ucx_ctrl_put("setup-no-key", &m, 3, 0);
    m.type = UCX_T_PULL;
    m.hdr = (oobx_msg_hdr_t){.ctx = 5, .tag = 2, .len = 1 << 20, .src = 3, .kind = OOBX_MSG_P2P};
    m.pull_addr = 0x7f0000400000ull;
    m.pull_ticket = 0x7f0000500010ull;
    m.pull_nonce = 0x9e3779b97f4a7c15ull;
    ucx_ctrl_put("pull", &m, 3, 0);
    ucx_ctrl_put("pull-cut", &m, 3, 1);
    m.type = UCX_T_PULL_ACK;
    m.ack = (ucx_pull_ack_t){.seq = 9, .push = 1};
    ucx_ctrl_put("pull-ack", &m, 3, 0);
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
    verbs_cards();
    verbs_cm();
    verbs_msgs();
    ucx_cards();
    ucx_ctrls();
    return 0;
}
