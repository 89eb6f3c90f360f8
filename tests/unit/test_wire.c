/* Unit tests of every wire parser (src/wire.c) on good, short, long and
 * wrong input. The layouts are written out by hand here, as docs/protocol.md
 * gives them, so an encoder and its parser cannot drift together. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tp_table.h"
#include "wire.h"

static void le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void le16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void hello_bytes(unsigned char *b, uint32_t proto, uint16_t version, uint16_t type, uint64_t magic,
                        int32_t rank, int32_t nranks)
{
    memset(b, 0, OOBX_HELLO_BYTES);
    le32(b, proto);
    le16(b + 4, version);
    le16(b + 6, type);
    le64(b + 8, magic);
    le32(b + 16, (uint32_t)rank);
    le32(b + 20, (uint32_t)nranks);
}

/* A rejected input leaves *out untouched and a reason. */
#define EXPECT_REJECT(call, out, code)                                              \
    do {                                                                            \
        char why_[256] = "";                                                        \
        unsigned char before_[sizeof(out)];                                         \
        memset(&(out), 0xa5, sizeof(out));                                          \
        memcpy(before_, &(out), sizeof(out));                                       \
        int rc_ = call;                                                             \
        if (rc_ != (code))                                                          \
            fail_msg("%s: got %d, want %d (%s)", #call, rc_, (code), why_);         \
        if (strlen(why_) == 0) fail_msg("%s: no reason given", #call);              \
        if (memcmp(before_, &(out), sizeof(out)) != 0) fail_msg("%s: output changed on failure", #call); \
    } while (0)
#define WHY why_, sizeof why_

static void test_hello(void **state)
{
    (void)state;
    unsigned char b[64];
    oobx_hello_t h;
    hello_bytes(b, OOBX_WIRE_MAGIC, OOBX_WIRE_VERSION, OOBX_HELLO_PEER, 0x1122334455667788ull, 3, 8);
    char why[256];
    assert_int_equal(oobx__hello_decode(b, OOBX_HELLO_BYTES, &h, why, sizeof why), 0);
    assert_int_equal(h.rank, 3);
    assert_int_equal(h.nranks, 8);
    assert_int_equal(h.type, OOBX_HELLO_PEER);
    assert_true(h.comm_magic == 0x1122334455667788ull);
    /* longer input: only the first 32 bytes count */
    memset(b + OOBX_HELLO_BYTES, 0xff, sizeof b - OOBX_HELLO_BYTES);
    assert_int_equal(oobx__hello_decode(b, sizeof b, &h, why, sizeof why), 0);
    /* encoder writes the same bytes */
    unsigned char e[OOBX_HELLO_BYTES];
    oobx__hello_encode(&h, e);
    assert_memory_equal(e, b, OOBX_HELLO_BYTES);
    /* short */
    for (size_t len = 0; len < OOBX_HELLO_BYTES; len++) EXPECT_REJECT(oobx__hello_decode(b, len, &h, WHY), h, OOBX_ERR_PROTOCOL);
    /* wrong magic, version, type, ranks */
    hello_bytes(b, 0x12345678u, OOBX_WIRE_VERSION, 1, 1, 0, 1);
    EXPECT_REJECT(oobx__hello_decode(b, OOBX_HELLO_BYTES, &h, WHY), h, OOBX_ERR_PROTOCOL);
    hello_bytes(b, OOBX_WIRE_MAGIC, OOBX_WIRE_VERSION + 1, 1, 1, 0, 1);
    EXPECT_REJECT(oobx__hello_decode(b, OOBX_HELLO_BYTES, &h, WHY), h, OOBX_ERR_MISMATCH);
    hello_bytes(b, OOBX_WIRE_MAGIC, OOBX_WIRE_VERSION, 0, 1, 0, 1);
    EXPECT_REJECT(oobx__hello_decode(b, OOBX_HELLO_BYTES, &h, WHY), h, OOBX_ERR_PROTOCOL);
    hello_bytes(b, OOBX_WIRE_MAGIC, OOBX_WIRE_VERSION, 77, 1, 0, 1);
    EXPECT_REJECT(oobx__hello_decode(b, OOBX_HELLO_BYTES, &h, WHY), h, OOBX_ERR_PROTOCOL);
    hello_bytes(b, OOBX_WIRE_MAGIC, OOBX_WIRE_VERSION, 1, 1, -1, 4);
    EXPECT_REJECT(oobx__hello_decode(b, OOBX_HELLO_BYTES, &h, WHY), h, OOBX_ERR_PROTOCOL);
    hello_bytes(b, OOBX_WIRE_MAGIC, OOBX_WIRE_VERSION, 1, 1, 0, 0);
    EXPECT_REJECT(oobx__hello_decode(b, OOBX_HELLO_BYTES, &h, WHY), h, OOBX_ERR_PROTOCOL);
    hello_bytes(b, OOBX_WIRE_MAGIC, OOBX_WIRE_VERSION, 1, 1, 5, 4);
    EXPECT_REJECT(oobx__hello_decode(b, OOBX_HELLO_BYTES, &h, WHY), h, OOBX_ERR_PROTOCOL);
    hello_bytes(b, OOBX_WIRE_MAGIC, OOBX_WIRE_VERSION, 1, 1, 0, -5);
    EXPECT_REJECT(oobx__hello_decode(b, OOBX_HELLO_BYTES, &h, WHY), h, OOBX_ERR_PROTOCOL);
}

static void report_bytes(unsigned char *b, int32_t rank, int32_t nranks, int32_t iroot, int32_t nroots, uint32_t tpid,
                         uint32_t blob_len)
{
    le32(b, (uint32_t)rank);
    le32(b + 4, (uint32_t)nranks);
    le32(b + 8, (uint32_t)iroot);
    le32(b + 12, (uint32_t)nroots);
    le32(b + 16, tpid);
    le32(b + 20, blob_len);
    le32(b + 24, 5000); /* wait_ms */
}

static void test_report(void **state)
{
    (void)state;
    unsigned char b[64];
    oobx_report_t r;
    char why[256];
    report_bytes(b, 5, 16, 1, 3, oobx__tp_find("socket")->id, 28);
    assert_int_equal(oobx__report_decode(b, OOBX_REPORT_BYTES, &r, why, sizeof why), 0);
    assert_int_equal(r.rank, 5);
    assert_int_equal(r.nranks, 16);
    assert_int_equal(r.iroot, 1);
    assert_int_equal(r.nroots, 3);
    assert_int_equal(r.blob_len, 28);
    unsigned char e[OOBX_REPORT_BYTES];
    oobx__report_encode(&r, e);
    assert_memory_equal(e, b, OOBX_REPORT_BYTES);
    assert_int_equal(oobx__report_decode(b, sizeof b, &r, why, sizeof why), 0);
    /* the wrap-around extra report carries rank == nranks */
    report_bytes(b, 16, 16, 2, 3, oobx__tp_find("ucx")->id, OOBX_ADDR_MAX);
    assert_int_equal(oobx__report_decode(b, OOBX_REPORT_BYTES, &r, why, sizeof why), 0);
    for (size_t len = 0; len < OOBX_REPORT_BYTES; len++)
        EXPECT_REJECT(oobx__report_decode(b, len, &r, WHY), r, OOBX_ERR_PROTOCOL);
    static const int32_t bad[][6] = {
        {-1, 16, 0, 1, 1, 10}, {17, 16, 0, 1, 1, 10}, {0, 0, 0, 1, 1, 10},  {0, 16, 1, 1, 1, 10},
        {0, 16, -1, 2, 1, 10}, {0, 16, 0, 0, 1, 10},  {0, 16, 0, 17, 1, 10}, {0, 16, 0, 1, 0, 10},
        {0, 16, 0, 1, 9, 10},  {0, 16, 0, 1, 1, 0},   {0, 16, 0, 1, 1, OOBX_ADDR_MAX + 1},
        {0, 16, 0, 1, 1, -1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        report_bytes(b, bad[i][0], bad[i][1], bad[i][2], bad[i][3], (uint32_t)bad[i][4], (uint32_t)bad[i][5]);
        EXPECT_REJECT(oobx__report_decode(b, OOBX_REPORT_BYTES, &r, WHY), r, OOBX_ERR_PROTOCOL);
    }
}

static void test_reply(void **state)
{
    (void)state;
    unsigned char b[16];
    oobx_reply_t r;
    char why[256];
    le32(b, 0);
    le32(b + 4, 100);
    le32(b + 8, (uint32_t)-1);
    assert_int_equal(oobx__reply_decode(b, OOBX_REPLY_BYTES, &r, why, sizeof why), 0);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.len, 100);
    assert_int_equal(r.origin, -1);
    le32(b + 8, 7); /* an answer names no origin */
    EXPECT_REJECT(oobx__reply_decode(b, OOBX_REPLY_BYTES, &r, WHY), r, OOBX_ERR_PROTOCOL);
    le32(b, (uint32_t)OOBX_ERR_MISMATCH);
    le32(b + 4, 50);
    le32(b + 8, (uint32_t)-1);
    assert_int_equal(oobx__reply_decode(b, OOBX_REPLY_BYTES, &r, why, sizeof why), 0);
    assert_int_equal(r.status, OOBX_ERR_MISMATCH);
    assert_int_equal(r.origin, -1);
    le32(b, (uint32_t)OOBX_ERR_TIMEOUT); /* a refusal that names the rank that never checked in */
    le32(b + 8, 4095);
    assert_int_equal(oobx__reply_decode(b, OOBX_REPLY_BYTES, &r, why, sizeof why), 0);
    assert_int_equal(r.origin, 4095);
    le32(b + 8, (uint32_t)-2);
    EXPECT_REJECT(oobx__reply_decode(b, OOBX_REPLY_BYTES, &r, WHY), r, OOBX_ERR_PROTOCOL);
    le32(b + 8, (uint32_t)OOBX_NRANKS_MAX);
    EXPECT_REJECT(oobx__reply_decode(b, OOBX_REPLY_BYTES, &r, WHY), r, OOBX_ERR_PROTOCOL);
    le32(b + 8, (uint32_t)-1);
    for (size_t len = 0; len < OOBX_REPLY_BYTES; len++)
        EXPECT_REJECT(oobx__reply_decode(b, len, &r, WHY), r, OOBX_ERR_PROTOCOL);
    le32(b, 1);
    EXPECT_REJECT(oobx__reply_decode(b, OOBX_REPLY_BYTES, &r, WHY), r, OOBX_ERR_PROTOCOL);
    le32(b, (uint32_t)-1000);
    EXPECT_REJECT(oobx__reply_decode(b, OOBX_REPLY_BYTES, &r, WHY), r, OOBX_ERR_PROTOCOL);
    le32(b, 0);
    le32(b + 4, (uint32_t)OOBX_PLACE_MAX(OOBX_NRANKS_MAX) + 1); /* more than any placement */
    EXPECT_REJECT(oobx__reply_decode(b, OOBX_REPLY_BYTES, &r, WHY), r, OOBX_ERR_PROTOCOL);
    le32(b, (uint32_t)OOBX_ERR_REMOTE);
    le32(b + 4, OOBX_REPLY_TEXT_MAX + 1);
    EXPECT_REJECT(oobx__reply_decode(b, OOBX_REPLY_BYTES, &r, WHY), r, OOBX_ERR_PROTOCOL);
    le32(b + 4, 0xffffffffu);
    EXPECT_REJECT(oobx__reply_decode(b, OOBX_REPLY_BYTES, &r, WHY), r, OOBX_ERR_PROTOCOL);
}

static void msghdr_bytes(unsigned char *b, uint64_t ctx, uint64_t tag, uint64_t len, int32_t src, uint16_t kind,
                         uint16_t check)
{
    le64(b, ctx);
    le64(b + 8, tag);
    le64(b + 16, len);
    le32(b + 24, (uint32_t)src);
    le16(b + 28, kind);
    le16(b + 30, check);
}

static void test_msghdr(void **state)
{
    (void)state;
    unsigned char b[48];
    oobx_msg_hdr_t h;
    char why[256];
    msghdr_bytes(b, 0xabcdef0123ull, 42, 1u << 20, 7, OOBX_MSG_P2P, OOBX_MSGHDR_CHECK);
    assert_int_equal(oobx__msghdr_decode(b, OOBX_MSGHDR_BYTES, &h, why, sizeof why), 0);
    assert_true(h.ctx == 0xabcdef0123ull && h.tag == 42 && h.len == (1u << 20) && h.src == 7 && h.kind == OOBX_MSG_P2P);
    unsigned char e[OOBX_MSGHDR_BYTES];
    oobx__msghdr_encode(&h, e);
    assert_memory_equal(e, b, OOBX_MSGHDR_BYTES);
    msghdr_bytes(b, 0, 0, OOBX_MSG_MAX_LEN, 0, OOBX_MSG_CTRL, OOBX_MSGHDR_CHECK);
    assert_int_equal(oobx__msghdr_decode(b, OOBX_MSGHDR_BYTES, &h, why, sizeof why), 0);
    for (size_t len = 0; len < OOBX_MSGHDR_BYTES; len++)
        EXPECT_REJECT(oobx__msghdr_decode(b, len, &h, WHY), h, OOBX_ERR_PROTOCOL);
    msghdr_bytes(b, 0, 0, 10, 0, OOBX_MSG_P2P, 0x1234);
    EXPECT_REJECT(oobx__msghdr_decode(b, OOBX_MSGHDR_BYTES, &h, WHY), h, OOBX_ERR_PROTOCOL);
    msghdr_bytes(b, 0, 0, 10, 0, 0, OOBX_MSGHDR_CHECK);
    EXPECT_REJECT(oobx__msghdr_decode(b, OOBX_MSGHDR_BYTES, &h, WHY), h, OOBX_ERR_PROTOCOL);
    msghdr_bytes(b, 0, 0, 10, 0, 9, OOBX_MSGHDR_CHECK);
    EXPECT_REJECT(oobx__msghdr_decode(b, OOBX_MSGHDR_BYTES, &h, WHY), h, OOBX_ERR_PROTOCOL);
    msghdr_bytes(b, 0, 0, OOBX_MSG_MAX_LEN + 1, 0, OOBX_MSG_P2P, OOBX_MSGHDR_CHECK);
    EXPECT_REJECT(oobx__msghdr_decode(b, OOBX_MSGHDR_BYTES, &h, WHY), h, OOBX_ERR_PROTOCOL);
    msghdr_bytes(b, 0, 0, UINT64_MAX, 0, OOBX_MSG_P2P, OOBX_MSGHDR_CHECK);
    EXPECT_REJECT(oobx__msghdr_decode(b, OOBX_MSGHDR_BYTES, &h, WHY), h, OOBX_ERR_PROTOCOL);
    msghdr_bytes(b, 0, 0, 10, -3, OOBX_MSG_P2P, OOBX_MSGHDR_CHECK);
    EXPECT_REJECT(oobx__msghdr_decode(b, OOBX_MSGHDR_BYTES, &h, WHY), h, OOBX_ERR_PROTOCOL);
}

/* A reason buffer of 1 byte, or a tiny one, is still terminated. */
static void test_small_why(void **state)
{
    (void)state;
    unsigned char b[4] = {1, 2, 3, 4};
    oobx_hello_t h;
    char why[8];
    memset(why, 'x', sizeof why);
    assert_int_not_equal(oobx__hello_decode(b, sizeof b, &h, why, 5), 0);
    assert_true(memchr(why, 0, 5) != NULL);
    assert_int_equal(why[5], 'x');
}

/* Node-aware placements: a leader's with members and a card, a member's, and what is refused. */
static void test_place(void **state)
{
    (void)state;
    unsigned char b[OOBX_PLACE_BYTES + 4 * 3 + 40];
    char why[300];
    oobx_place_t p = {.epoch = 7, .host = 9, .local_index = 0, .local_size = 3, .leader = 4, .next_leader = 8,
                      .prev_leader = 1, .nmembers = 3, .next_len = 40};
    oobx__place_encode(&p, b);
    le32(b + OOBX_PLACE_BYTES, 4);
    le32(b + OOBX_PLACE_BYTES + 4, 5);
    le32(b + OOBX_PLACE_BYTES + 8, 7);
    memset(b + OOBX_PLACE_BYTES + 12, 0xab, 40);
    oobx_place_t q;
    assert_int_equal(oobx__place_decode(b, sizeof b, 16, &q, why, sizeof why), 0);
    assert_int_equal(q.leader, 4);
    assert_int_equal(q.next_leader, 8);
    assert_int_equal(q.nmembers, 3);
    assert_true(q.epoch == 7 && q.host == 9);
    /* the sizes must add up */
    assert_int_equal(oobx__place_decode(b, sizeof b - 1, 16, &q, why, sizeof why), OOBX_ERR_PROTOCOL);
    /* members go up from the leader, inside the job */
    le32(b + OOBX_PLACE_BYTES + 8, 5);
    assert_int_equal(oobx__place_decode(b, sizeof b, 16, &q, why, sizeof why), OOBX_ERR_PROTOCOL);
    le32(b + OOBX_PLACE_BYTES + 8, 16);
    assert_int_equal(oobx__place_decode(b, sizeof b, 16, &q, why, sizeof why), OOBX_ERR_PROTOCOL);
    le32(b + OOBX_PLACE_BYTES + 8, 7);
    /* a job smaller than the leader */
    assert_int_equal(oobx__place_decode(b, sizeof b, 4, &q, why, sizeof why), OOBX_ERR_PROTOCOL);
    /* a leader without a next leader, or with a card too large */
    p.next_leader = -1;
    oobx__place_encode(&p, b);
    assert_int_equal(oobx__place_decode(b, sizeof b, 16, &q, why, sizeof why), OOBX_ERR_PROTOCOL);
    /* a member carries nothing more, and its index is inside the group */
    oobx_place_t m = {.epoch = 7, .host = 9, .local_index = 2, .local_size = 3, .leader = 4, .next_leader = -1,
                      .prev_leader = -1};
    oobx__place_encode(&m, b);
    assert_int_equal(oobx__place_decode(b, OOBX_PLACE_BYTES, 16, &q, why, sizeof why), 0);
    assert_int_equal(q.local_index, 2);
    assert_int_equal(oobx__place_decode(b, OOBX_PLACE_BYTES + 4, 16, &q, why, sizeof why), OOBX_ERR_PROTOCOL);
    m.local_index = 3;
    oobx__place_encode(&m, b);
    assert_int_equal(oobx__place_decode(b, OOBX_PLACE_BYTES, 16, &q, why, sizeof why), OOBX_ERR_PROTOCOL);
    for (size_t len = 0; len < OOBX_PLACE_BYTES; len++)
        assert_int_equal(oobx__place_decode(b, len, 16, &q, why, sizeof why), OOBX_ERR_PROTOCOL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello), cmocka_unit_test(test_report), cmocka_unit_test(test_reply), cmocka_unit_test(test_place),
        cmocka_unit_test(test_msghdr), cmocka_unit_test(test_small_why),
    };
    return cmocka_run_group_tests_name("wire", tests, NULL, NULL);
}
