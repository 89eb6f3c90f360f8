/* Unit tests of the registered ring-buffer protocol (src/ringbuf.c): a sender
 * and a receiver joined by a plain memory buffer instead of a network. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ringbuf.h"

/* One link: the receiver's ring in local memory, doorbells in a queue. */
typedef struct link {
    ringbuf_tx_t tx;
    ringbuf_rx_t rx;
    unsigned char *ring;
    uint64_t db_seq[RINGBUF_SLOTS_MAX];
    uint32_t db_bytes[RINGBUF_SLOTS_MAX];
    unsigned db_head, db_tail; /* pending doorbells, a FIFO */
    uint64_t credits_sent;     /* credit messages the receiver returned */
} link_t;

static link_t *link_new(uint32_t slots, uint32_t slot_bytes, uint32_t batch)
{
    link_t *l = calloc(1, sizeof(*l));
    assert_non_null(l);
    l->ring = calloc(slots, slot_bytes);
    assert_non_null(l->ring);
    oobx__ringbuf_tx_init(&l->tx, slots, slot_bytes);
    oobx__ringbuf_rx_init(&l->rx, slots, slot_bytes, batch);
    return l;
}

static void link_free(link_t *l)
{
    free(l->ring);
    free(l);
}

/* Writes as many chunks of the current message as credits allow. */
static int link_write(link_t *l, const unsigned char *payload)
{
    ringbuf_chunk_t c;
    int n = 0;
    while (oobx__ringbuf_tx_next(&l->tx, &c)) {
        memcpy(l->ring + c.slot_off, c.head, c.head_len);
        if (c.pay_len) memcpy(l->ring + c.slot_off + c.head_len, payload + c.pay_off, c.pay_len);
        l->db_seq[l->db_tail % RINGBUF_SLOTS_MAX] = c.seq;
        l->db_bytes[l->db_tail % RINGBUF_SLOTS_MAX] = c.bytes;
        l->db_tail++;
        n++;
    }
    return n;
}

/* Receives every announced chunk into dst; returns the messages completed. */
static int link_read(link_t *l, unsigned char *dst, size_t cap, oobx_msg_hdr_t *last_hdr)
{
    int done = 0;
    while (l->db_head != l->db_tail) {
        ringbuf_rx_ev_t ev;
        char why[200];
        unsigned i = l->db_head % RINGBUF_SLOTS_MAX;
        int rc = oobx__ringbuf_rx_chunk(&l->rx, l->ring, l->db_seq[i], l->db_bytes[i], &ev, why, sizeof(why));
        if (rc) fail_msg("oobx__ringbuf_rx_chunk: %s", why);
        l->db_head++;
        assert_true(ev.off + ev.len <= cap);
        if (ev.len) memcpy(dst + ev.off, ev.data, ev.len);
        if (ev.last) {
            done++;
            if (last_hdr) *last_hdr = ev.hdr;
        }
        uint64_t credit;
        if (oobx__ringbuf_rx_release(&l->rx, &credit)) {
            assert_int_equal(oobx__ringbuf_tx_credit(&l->tx, credit), 0);
            l->credits_sent++;
        }
    }
    return done;
}

static oobx_msg_hdr_t mkhdr(uint64_t len, uint64_t tag)
{
    oobx_msg_hdr_t h = {.ctx = 0x1234, .tag = tag, .len = len, .src = 3, .kind = OOBX_MSG_COLL};
    return h;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 131u + seed * 7u + (i >> 8));
}

/* Sends one message through the link, interleaving writes and reads. */
static void send_one(link_t *l, size_t len, uint64_t tag)
{
    unsigned char *src = malloc(len + 1), *dst = malloc(len + 1);
    assert_non_null(src);
    assert_non_null(dst);
    fill(src, len, (unsigned)tag);
    memset(dst, 0xee, len + 1);
    oobx_msg_hdr_t h = mkhdr(len, tag), got;
    assert_int_equal(oobx__ringbuf_tx_msg_begin(&l->tx, &h), 0);
    int done = 0, rounds = 0;
    while (!done) {
        link_write(l, src);
        done = link_read(l, dst, len, &got);
        assert_true(++rounds < 1000000);
    }
    assert_int_equal(got.len, len);
    assert_int_equal(got.tag, tag);
    assert_int_equal(got.ctx, 0x1234);
    assert_int_equal(got.src, 3);
    assert_memory_equal(src, dst, len);
    assert_int_equal(dst[len], 0xee);
    free(src);
    free(dst);
}

static void test_geometry(void **state)
{
    (void)state;
    char why[200];
    assert_int_equal(oobx__ringbuf_geom_check(16, 65536, why, sizeof(why)), 0);
    assert_int_equal(oobx__ringbuf_geom_check(1, 65536, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_non_null(strstr(why, "OOBX_RING_SLOTS"));
    assert_int_equal(oobx__ringbuf_geom_check(16, 60, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_non_null(strstr(why, "OOBX_RING_SLOT_BYTES"));
    assert_int_equal(oobx__ringbuf_geom_check(16, 1001, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_int_equal(oobx__ringbuf_geom_check(4096, 64u << 20, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_int_equal(oobx__ringbuf_msg_chunks(64, 0), 1);
    assert_int_equal(oobx__ringbuf_msg_chunks(64, 16), 1);
    assert_int_equal(oobx__ringbuf_msg_chunks(64, 17), 2);
    assert_int_equal(oobx__ringbuf_msg_chunks(64, 16 + 48), 2);
    assert_int_equal(oobx__ringbuf_msg_chunks(64, 16 + 49), 3);
}

static void test_zero_length(void **state)
{
    (void)state;
    link_t *l = link_new(4, 128, 0);
    for (int i = 0; i < 10; i++) send_one(l, 0, (uint64_t)i);
    assert_int_equal(l->tx.next_seq, 10);
    link_free(l);
}

static void test_sizes_that_do_not_divide_the_slot(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 7, 79, 80, 81, 111, 112, 113, 1000, 4099, 65537};
    link_t *l = link_new(3, 128, 1);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint64_t before = l->tx.next_seq;
        send_one(l, sizes[i], 100 + i);
        assert_int_equal(l->tx.next_seq - before, oobx__ringbuf_msg_chunks(128, sizes[i]));
    }
    link_free(l);
}

static void test_wrap_around(void **state)
{
    (void)state;
    /* thousands of chunks over 5 slots: every slot is reused many times */
    link_t *l = link_new(5, 256, 2);
    for (int i = 0; i < 300; i++) send_one(l, (size_t)(i * 37) % 2000, (uint64_t)i);
    assert_true(l->tx.next_seq > 5 * 100);
    assert_int_equal(l->rx.next_seq, l->tx.next_seq);
    link_free(l);
}

static void test_credits_exhausted(void **state)
{
    (void)state;
    link_t *l = link_new(4, 64, 4);
    unsigned char src[1000], dst[1000];
    fill(src, sizeof(src), 9);
    oobx_msg_hdr_t h = mkhdr(sizeof(src), 77);
    assert_int_equal(oobx__ringbuf_tx_msg_begin(&l->tx, &h), 0);
    /* a second message cannot start while the first is being cut */
    assert_int_equal(oobx__ringbuf_tx_msg_begin(&l->tx, &h), OOBX_ERR_INVALID);
    assert_int_equal(link_write(l, src), 4);
    assert_int_equal(oobx__ringbuf_tx_free_slots(&l->tx), 0);
    ringbuf_chunk_t c;
    assert_int_equal(oobx__ringbuf_tx_next(&l->tx, &c), 0);
    /* the receiver consumes three chunks: batch 4 is not reached, no credit yet */
    for (int i = 0; i < 3; i++) {
        ringbuf_rx_ev_t ev;
        unsigned j = l->db_head++ % RINGBUF_SLOTS_MAX;
        assert_int_equal(oobx__ringbuf_rx_chunk(&l->rx, l->ring, l->db_seq[j], l->db_bytes[j], &ev, NULL, 0), 0);
        memcpy(dst + ev.off, ev.data, ev.len);
        uint64_t credit;
        assert_int_equal(oobx__ringbuf_rx_release(&l->rx, &credit), 0);
    }
    assert_int_equal(oobx__ringbuf_tx_free_slots(&l->tx), 0);
    oobx_msg_hdr_t got;
    int done = link_read(l, dst, sizeof(dst), &got);
    assert_int_equal(done, 0);
    assert_int_equal(l->credits_sent, 1);
    assert_int_equal(oobx__ringbuf_tx_free_slots(&l->tx), 4);
    while (!done) {
        link_write(l, src);
        done = link_read(l, dst, sizeof(dst), &got);
    }
    assert_memory_equal(src, dst, sizeof(src));
    link_free(l);
}

static void test_bad_chunks(void **state)
{
    (void)state;
    link_t *l = link_new(4, 128, 0);
    unsigned char src[300];
    fill(src, sizeof(src), 1);
    oobx_msg_hdr_t h = mkhdr(sizeof(src), 5);
    assert_int_equal(oobx__ringbuf_tx_msg_begin(&l->tx, &h), 0);
    assert_int_equal(link_write(l, src), 3);
    ringbuf_rx_ev_t ev;
    char why[200];
    /* out of order */
    assert_int_equal(oobx__ringbuf_rx_chunk(&l->rx, l->ring, 1, l->db_bytes[1], &ev, why, sizeof(why)),
                     OOBX_ERR_PROTOCOL);
    assert_non_null(strstr(why, "expected"));
    /* wrong size */
    assert_int_equal(oobx__ringbuf_rx_chunk(&l->rx, l->ring, 0, l->db_bytes[0] - 1, &ev, why, sizeof(why)),
                     OOBX_ERR_PROTOCOL);
    assert_int_equal(oobx__ringbuf_rx_chunk(&l->rx, l->ring, 0, 129, &ev, why, sizeof(why)), OOBX_ERR_PROTOCOL);
    /* a slot overwritten with another sequence number */
    ringbuf_chunk_hdr_t ch;
    memcpy(&ch, l->ring, sizeof(ch));
    ch.seq = 42;
    memcpy(l->ring, &ch, sizeof(ch));
    assert_int_equal(oobx__ringbuf_rx_chunk(&l->rx, l->ring, 0, l->db_bytes[0], &ev, why, sizeof(why)),
                     OOBX_ERR_PROTOCOL);
    assert_non_null(strstr(why, "42"));
    ch.seq = 0;
    memcpy(l->ring, &ch, sizeof(ch));
    assert_int_equal(oobx__ringbuf_rx_chunk(&l->rx, l->ring, 0, l->db_bytes[0], &ev, why, sizeof(why)), 0);
    /* a continuation claiming to begin a message */
    memcpy(&ch, l->ring + 128, sizeof(ch));
    ch.flags |= RINGBUF_FIRST;
    memcpy(l->ring + 128, &ch, sizeof(ch));
    assert_int_equal(oobx__ringbuf_rx_chunk(&l->rx, l->ring, 1, l->db_bytes[1], &ev, why, sizeof(why)),
                     OOBX_ERR_PROTOCOL);
    /* credits for chunks never sent */
    assert_int_equal(oobx__ringbuf_tx_credit(&l->tx, 99), OOBX_ERR_PROTOCOL);
    assert_int_equal(oobx__ringbuf_tx_credit(&l->tx, 0), 0);
    link_free(l);
}

static void test_peek_bytes(void **state)
{
    (void)state;
    link_t *l = link_new(4, 128, 0);
    unsigned char src[200];
    fill(src, sizeof(src), 3);
    oobx_msg_hdr_t h = mkhdr(sizeof(src), 1);
    assert_int_equal(oobx__ringbuf_tx_msg_begin(&l->tx, &h), 0);
    assert_int_equal(link_write(l, src), 3);
    for (unsigned i = 0; i < 3; i++)
        assert_int_equal(oobx__ringbuf_rx_peek_bytes(&l->rx, l->ring, i), l->db_bytes[i]);
    /* a slot that holds another chunk, or garbage */
    assert_int_equal(oobx__ringbuf_rx_peek_bytes(&l->rx, l->ring, 3), 0);
    assert_int_equal(oobx__ringbuf_rx_peek_bytes(&l->rx, l->ring, 4), 0);
    memset(l->ring + 128, 0xff, 16);
    assert_int_equal(oobx__ringbuf_rx_peek_bytes(&l->rx, l->ring, 1), 0);
    link_free(l);
}

static void test_overrun_detected(void **state)
{
    (void)state;
    /* a sender that ignores credits: the fifth chunk over 4 slots is refused */
    link_t *l = link_new(4, 64, 0);
    ringbuf_rx_ev_t ev;
    char why[200];
    for (uint64_t s = 0; s < 5; s++) {
        oobx_msg_hdr_t h = mkhdr(0, s);
        ringbuf_chunk_hdr_t ch = {.seq = s, .len = 0, .flags = RINGBUF_FIRST | RINGBUF_LAST};
        unsigned char *slot = l->ring + oobx__ringbuf_slot_off(4, 64, s);
        memcpy(slot, &ch, sizeof(ch));
        memcpy(slot + sizeof(ch), &h, sizeof(h));
        int rc = oobx__ringbuf_rx_chunk(&l->rx, l->ring, s, RINGBUF_HEAD_MAX, &ev, why, sizeof(why));
        if (s < 4)
            assert_int_equal(rc, 0);
        else {
            assert_int_equal(rc, OOBX_ERR_PROTOCOL);
            assert_non_null(strstr(why, "overruns"));
        }
    }
    link_free(l);
}

/* A fresh receive buffer: every slot's chunk header cleared, nothing else
 * written (the payload bytes stay as they were). */
static void test_clear_headers(void **state)
{
    (void)state;
    const uint32_t slots = 6, slot_bytes = 4096;
    unsigned char *ring = malloc((size_t)slots * slot_bytes);
    assert_non_null(ring);
    memset(ring, 0xa5, (size_t)slots * slot_bytes);
    oobx__ringbuf_clear_headers(ring, slots, slot_bytes);
    size_t zero = 0;
    for (uint32_t k = 0; k < slots; k++) {
        uint64_t off = oobx__ringbuf_slot_off(slots, slot_bytes, k);
        for (uint32_t i = 0; i < RINGBUF_CHUNK_HDR_BYTES; i++) assert_int_equal(ring[off + i], 0);
    }
    for (size_t i = 0; i < (size_t)slots * slot_bytes; i++) zero += ring[i] == 0;
    assert_int_equal(zero, (size_t)slots * RINGBUF_CHUNK_HDR_BYTES);
    free(ring);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_geometry),
        cmocka_unit_test(test_clear_headers),
        cmocka_unit_test(test_zero_length),
        cmocka_unit_test(test_sizes_that_do_not_divide_the_slot),
        cmocka_unit_test(test_wrap_around),
        cmocka_unit_test(test_credits_exhausted),
        cmocka_unit_test(test_bad_chunks),
        cmocka_unit_test(test_overrun_detected),
        cmocka_unit_test(test_peek_bytes),
    };
    return cmocka_run_group_tests_name("ringbuf", tests, NULL, NULL);
}
