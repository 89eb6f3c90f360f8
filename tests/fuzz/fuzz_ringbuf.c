/*
 * Fuzz target: the ring-buffer receiver (oobx__ringbuf_rx_chunk) fed with garbage
 * slots and doorbells. Input: byte 0 picks the slot count (2..16), byte 1 the
 * slot size (64..1040 bytes); then records of
 *   u8 op (bit 0: release after a good chunk), u8 seq delta (0: the expected
 *   chunk; else expected + delta - 128), u16 announced bytes (little-endian),
 *   u16 n, then n bytes written at the start of that chunk's slot.
 */
#include "fuzz.h"
#include "ringbuf.h"

static unsigned get16(const uint8_t *p) { return (unsigned)p[0] | ((unsigned)p[1] << 8); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    uint32_t slots = 2u + data[0] % 15u;
    uint32_t slot_bytes = 64u + (data[1] % 125u) * 8u;
    char why[FUZZ_WHY_BYTES];
    if (oobx__ringbuf_geom_check(slots, slot_bytes, why, sizeof why) != 0) return 0;
    size_t ring_bytes = (size_t)slots * slot_bytes;
    unsigned char *ring = malloc(ring_bytes); /* exact size: ASan sees any read past it */
    if (!ring) return 0;
    memset(ring, 0, ring_bytes);
    ringbuf_rx_t rx;
    oobx__ringbuf_rx_init(&rx, slots, slot_bytes, 0);
    size_t off = 2;
    while (off + 6 <= size) {
        unsigned op = data[off], delta = data[off + 1];
        uint32_t bytes = get16(data + off + 2);
        size_t n = get16(data + off + 4);
        off += 6;
        if (n > size - off) n = size - off;
        uint64_t seq = delta == 0 ? rx.next_seq : rx.next_seq + delta - 128u;
        uint64_t slot_off = oobx__ringbuf_slot_off(slots, slot_bytes, seq);
        FUZZ_ASSERT(slot_off + slot_bytes <= ring_bytes, "slot offset %llu outside the ring",
                    (unsigned long long)slot_off);
        memcpy(ring + slot_off, data + off, n < slot_bytes ? n : slot_bytes);
        off += n;
        ringbuf_rx_ev_t ev;
        memset(why, 0, sizeof why);
        int rc = oobx__ringbuf_rx_chunk(&rx, ring, seq, bytes, &ev, why, sizeof why);
        fuzz_check_why(why, rc, "ring chunk");
        if (rc != 0) {
            FUZZ_ASSERT(rc == OOBX_ERR_PROTOCOL, "unexpected code %d", rc);
            break; /* a link that saw a bad chunk is dead */
        }
        const unsigned char *d = ev.data;
        FUZZ_ASSERT(ev.len == 0 || (d >= ring + slot_off && d + ev.len <= ring + slot_off + slot_bytes),
                    "payload of %u bytes outside its slot", ev.len);
        FUZZ_ASSERT(ev.off + ev.len <= ev.hdr.len, "payload past the message end");
        if (ev.len) {
            volatile unsigned char sum = 0;
            for (uint32_t i = 0; i < ev.len; i++) sum ^= d[i];
            (void)sum;
        }
        if (op & 1) {
            uint64_t credit;
            (void)oobx__ringbuf_rx_release(&rx, &credit);
        }
    }
    free(ring);
    return 0;
}
