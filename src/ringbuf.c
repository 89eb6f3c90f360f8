/* The registered ring-buffer protocol: see ringbuf.h. */
#include "ringbuf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int ringbuf_why(char *why, size_t whylen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int ringbuf_why(char *why, size_t whylen, int code, const char *fmt, ...)
{
    if (why && whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, whylen, fmt, ap);
        va_end(ap);
    }
    return code;
}

int oobx__ringbuf_geom_check(uint32_t slots, uint32_t slot_bytes, char *why, size_t whylen)
{
    if (slots < 2 || slots > RINGBUF_SLOTS_MAX)
        return ringbuf_why(why, whylen, OOBX_ERR_INVALID,
                           "ring buffer: %" PRIu32 " slots; use 2 to %u (OOBX_RING_SLOTS)", slots,
                           RINGBUF_SLOTS_MAX);
    if (slot_bytes < RINGBUF_SLOT_MIN || slot_bytes > RINGBUF_SLOT_MAX || slot_bytes % 8)
        return ringbuf_why(why, whylen, OOBX_ERR_INVALID,
                           "ring buffer: slot of %" PRIu32 " bytes; use a multiple of 8 from %u to "
                           "%u (OOBX_RING_SLOT_BYTES)",
                           slot_bytes, RINGBUF_SLOT_MIN, RINGBUF_SLOT_MAX);
    if ((uint64_t)slots * slot_bytes > RINGBUF_TOTAL_MAX)
        return ringbuf_why(why, whylen, OOBX_ERR_INVALID,
                           "ring buffer: %" PRIu32 " slots of %" PRIu32 " bytes exceed %llu bytes "
                           "per link (OOBX_RING_SLOTS, OOBX_RING_SLOT_BYTES)",
                           slots, slot_bytes, (unsigned long long)RINGBUF_TOTAL_MAX);
    return 0;
}

uint32_t oobx__ringbuf_first_payload(uint32_t slot_bytes)
{
    return slot_bytes - RINGBUF_HEAD_MAX;
}

uint32_t oobx__ringbuf_next_payload(uint32_t slot_bytes)
{
    return slot_bytes - RINGBUF_CHUNK_HDR_BYTES;
}

uint64_t oobx__ringbuf_msg_chunks(uint32_t slot_bytes, uint64_t len)
{
    uint64_t first = oobx__ringbuf_first_payload(slot_bytes), next = oobx__ringbuf_next_payload(slot_bytes);
    if (len <= first) return 1;
    return 1 + (len - first + next - 1) / next;
}

uint64_t oobx__ringbuf_slot_off(uint32_t slots, uint32_t slot_bytes, uint64_t seq)
{
    return (seq % slots) * (uint64_t)slot_bytes;
}

void oobx__ringbuf_clear_headers(void *ring, uint32_t slots, uint32_t slot_bytes)
{
    for (uint32_t k = 0; k < slots; k++)
        memset((char *)ring + oobx__ringbuf_slot_off(slots, slot_bytes, k), 0, RINGBUF_CHUNK_HDR_BYTES);
}

/* ---- sender ------------------------------------------------------------------- */

void oobx__ringbuf_tx_init(ringbuf_tx_t *tx, uint32_t slots, uint32_t slot_bytes)
{
    memset(tx, 0, sizeof(*tx));
    tx->slots = slots;
    tx->slot_bytes = slot_bytes;
}

uint32_t oobx__ringbuf_tx_free_slots(const ringbuf_tx_t *tx)
{
    return tx->slots - (uint32_t)(tx->next_seq - tx->credit_seq);
}

int oobx__ringbuf_tx_credit(ringbuf_tx_t *tx, uint64_t seq)
{
    if (seq > tx->next_seq) return OOBX_ERR_PROTOCOL;
    if (seq > tx->credit_seq) tx->credit_seq = seq;
    return 0;
}

int oobx__ringbuf_tx_msg_begin(ringbuf_tx_t *tx, const oobx_msg_hdr_t *hdr)
{
    if (tx->in_msg) return OOBX_ERR_INVALID;
    tx->hdr = *hdr;
    tx->off = 0;
    tx->in_msg = 1;
    return 0;
}

int oobx__ringbuf_tx_next(ringbuf_tx_t *tx, ringbuf_chunk_t *c)
{
    if (!tx->in_msg || oobx__ringbuf_tx_free_slots(tx) == 0) return 0;
    int first = tx->off == 0;
    uint64_t room = first ? oobx__ringbuf_first_payload(tx->slot_bytes) : oobx__ringbuf_next_payload(tx->slot_bytes);
    uint64_t left = tx->hdr.len - tx->off;
    uint32_t n = (uint32_t)(left < room ? left : room);
    int last = tx->off + n == tx->hdr.len;

    ringbuf_chunk_hdr_t ch = {
        .seq = tx->next_seq,
        .len = n,
        .flags = (uint32_t)((first ? RINGBUF_FIRST : 0) | (last ? RINGBUF_LAST : 0)),
    };
    memset(c, 0, sizeof(*c));
    c->seq = tx->next_seq;
    c->slot = (uint32_t)(tx->next_seq % tx->slots);
    c->slot_off = (uint64_t)c->slot * tx->slot_bytes;
    memcpy(c->head, &ch, sizeof(ch));
    c->head_len = RINGBUF_CHUNK_HDR_BYTES;
    if (first) {
        memcpy(c->head + c->head_len, &tx->hdr, sizeof(tx->hdr));
        c->head_len += RINGBUF_MSG_HDR_BYTES;
    }
    c->pay_off = tx->off;
    c->pay_len = n;
    c->bytes = c->head_len + n;
    c->first = first;
    c->last = last;

    tx->off += n;
    tx->next_seq++;
    if (last) tx->in_msg = 0;
    return 1;
}

/* ---- receiver ----------------------------------------------------------------- */

void oobx__ringbuf_rx_init(ringbuf_rx_t *rx, uint32_t slots, uint32_t slot_bytes, uint32_t credit_batch)
{
    memset(rx, 0, sizeof(*rx));
    rx->slots = slots;
    rx->slot_bytes = slot_bytes;
    if (credit_batch == 0) credit_batch = slots / 4;
    if (credit_batch == 0) credit_batch = 1;
    if (credit_batch > slots) credit_batch = slots;
    rx->credit_batch = credit_batch;
}

int oobx__ringbuf_rx_chunk(ringbuf_rx_t *rx, const void *ring, uint64_t seq, uint32_t bytes,
                     ringbuf_rx_ev_t *ev, char *why, size_t whylen)
{
    if (seq != rx->next_seq)
        return ringbuf_why(why, whylen, OOBX_ERR_PROTOCOL,
                           "ring chunk %" PRIu64 " announced, %" PRIu64 " expected", seq,
                           rx->next_seq);
    if (rx->next_seq - rx->freed_seq >= rx->slots)
        return ringbuf_why(why, whylen, OOBX_ERR_PROTOCOL,
                           "ring chunk %" PRIu64 " overruns the %" PRIu32
                           " slots (sender ignored credits)",
                           seq, rx->slots);
    if (bytes < RINGBUF_CHUNK_HDR_BYTES || bytes > rx->slot_bytes)
        return ringbuf_why(why, whylen, OOBX_ERR_PROTOCOL,
                           "ring chunk %" PRIu64 " of %" PRIu32 " bytes (slot %" PRIu32 ")", seq,
                           bytes, rx->slot_bytes);

    const unsigned char *slot =
        (const unsigned char *)ring + oobx__ringbuf_slot_off(rx->slots, rx->slot_bytes, seq);
    ringbuf_chunk_hdr_t ch;
    memcpy(&ch, slot, sizeof(ch));
    if (ch.seq != seq)
        return ringbuf_why(why, whylen, OOBX_ERR_PROTOCOL,
                           "ring slot holds chunk %" PRIu64 ", doorbell said %" PRIu64, ch.seq, seq);
    if (ch.flags & ~(uint32_t)(RINGBUF_FIRST | RINGBUF_LAST))
        return ringbuf_why(why, whylen, OOBX_ERR_PROTOCOL, "ring chunk %" PRIu64 " flags 0x%x",
                           seq, ch.flags);
    int first = (ch.flags & RINGBUF_FIRST) != 0;
    uint32_t head = RINGBUF_CHUNK_HDR_BYTES + (first ? RINGBUF_MSG_HDR_BYTES : 0);
    if ((uint64_t)head + ch.len != bytes)
        return ringbuf_why(why, whylen, OOBX_ERR_PROTOCOL,
                           "ring chunk %" PRIu64 ": %" PRIu32 " payload bytes in %" PRIu32
                           " announced bytes",
                           seq, ch.len, bytes);
    if (first == rx->in_msg)
        return ringbuf_why(why, whylen, OOBX_ERR_PROTOCOL,
                           first ? "ring chunk %" PRIu64 " begins a message inside another"
                                 : "ring chunk %" PRIu64 " continues no message",
                           seq);

    memset(ev, 0, sizeof(*ev));
    if (first) {
        memcpy(&rx->hdr, slot + RINGBUF_CHUNK_HDR_BYTES, sizeof(rx->hdr));
        rx->off = 0;
        rx->in_msg = 1;
    }
    if (ch.len > rx->hdr.len - rx->off)
        return ringbuf_why(why, whylen, OOBX_ERR_PROTOCOL,
                           "ring chunk %" PRIu64 " carries %" PRIu32 " bytes past the %" PRIu64
                           "-byte message",
                           seq, ch.len, rx->hdr.len);
    int last = (ch.flags & RINGBUF_LAST) != 0;
    if (last != (rx->off + ch.len == rx->hdr.len))
        return ringbuf_why(why, whylen, OOBX_ERR_PROTOCOL,
                           "ring chunk %" PRIu64 ": end of message flag disagrees with its length",
                           seq);

    ev->first = first;
    ev->last = last;
    ev->hdr = rx->hdr;
    ev->data = slot + head;
    ev->len = ch.len;
    ev->off = rx->off;
    rx->off += ch.len;
    if (last) rx->in_msg = 0;
    rx->next_seq++;
    return 0;
}

uint32_t oobx__ringbuf_rx_peek_bytes(const ringbuf_rx_t *rx, const void *ring, uint64_t seq)
{
    ringbuf_chunk_hdr_t ch;
    memcpy(&ch, (const unsigned char *)ring + oobx__ringbuf_slot_off(rx->slots, rx->slot_bytes, seq), sizeof(ch));
    if (ch.seq != seq || (ch.flags & ~(uint32_t)(RINGBUF_FIRST | RINGBUF_LAST))) return 0;
    uint64_t bytes = (uint64_t)RINGBUF_CHUNK_HDR_BYTES + ((ch.flags & RINGBUF_FIRST) ? RINGBUF_MSG_HDR_BYTES : 0) + ch.len;
    return bytes <= rx->slot_bytes ? (uint32_t)bytes : 0;
}

int oobx__ringbuf_rx_release(ringbuf_rx_t *rx, uint64_t *credit)
{
    if (rx->freed_seq < rx->next_seq) rx->freed_seq++;
    if (rx->freed_seq - rx->credited_seq >= rx->credit_batch) {
        rx->credited_seq = rx->freed_seq;
        *credit = rx->freed_seq;
        return 1;
    }
    return 0;
}
