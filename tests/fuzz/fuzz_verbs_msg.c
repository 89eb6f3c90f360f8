/*
 * Fuzz target: a SEND received on a verbs connection (verbs_msg_decode).
 * Input: byte 0 is the sender's rank; the rest is the received buffer.
 */
#include "fuzz.h"
#include "oobx.h"
#include "ringbuf.h"
#include "verbs_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int src = data[0];
    size_t len = size - 1;
    /* an exact-size copy: ASan sees any read past the message */
    unsigned char *buf = malloc(len ? len : 1);
    if (!buf) return 0;
    memcpy(buf, data + 1, len);
    verbs_msg_t m;
    char why[FUZZ_WHY_BYTES];
    memset(why, 0, sizeof why);
    int rc = verbs_msg_decode(buf, len, src, &m, why, sizeof why);
    fuzz_check_why(why, rc, "verbs message");
    if (rc != 0) {
        FUZZ_ASSERT(rc == OOBX_ERR_PROTOCOL, "unexpected code %d", rc);
        free(buf);
        return 0;
    }
    FUZZ_ASSERT(len >= sizeof(verbs_wire_t) && len <= VERBS_BUF_BYTES, "accepted a message of %zu bytes", len);
    FUZZ_ASSERT(m.w.credits <= VERBS_RECV_DEPTH, "accepted %u credits", m.w.credits);
    switch (m.w.type) {
    case VERBS_T_EAGER: {
        const unsigned char *p = m.payload;
        FUZZ_ASSERT(m.hdr.src == src, "header names rank %d, sent by %d", m.hdr.src, src);
        FUZZ_ASSERT(p == buf + sizeof(verbs_wire_t) + sizeof(oobx_msg_hdr_t) && m.hdr.len <= VERBS_EAGER_MAX &&
                        p + m.hdr.len == buf + len,
                    "payload of %llu bytes outside the message", (unsigned long long)m.hdr.len);
        volatile unsigned char sum = 0;
        for (uint64_t i = 0; i < m.hdr.len; i++) sum ^= p[i];
        (void)sum;
        break;
    }
    case VERBS_T_RTS:
        FUZZ_ASSERT(m.hdr.src == src && m.hdr.len > VERBS_EAGER_MAX, "rendezvous of %llu bytes from rank %d",
                    (unsigned long long)m.hdr.len, m.hdr.src);
        break;
    case VERBS_T_SETUP: {
        char w2[FUZZ_WHY_BYTES];
        FUZZ_ASSERT(oobx__ringbuf_geom_check(m.setup.slots, m.setup.slot_bytes, w2, sizeof w2) == 0,
                    "accepted a ring of %u slots of %u bytes", m.setup.slots, m.setup.slot_bytes);
        break;
    }
    case VERBS_T_MOVED:
        FUZZ_ASSERT(len == sizeof(verbs_wire_t) + sizeof(m.rts), "moved rendezvous in a message of %zu bytes", len);
        break;
    case VERBS_T_FIN:
    case VERBS_T_CREDIT:
    case VERBS_T_RCREDIT: break;
    case VERBS_T_AUTH:
        FUZZ_ASSERT(len == sizeof(verbs_wire_t) + sizeof(m.mac), "proof in a message of %zu bytes", len);
        break;
    default: FUZZ_ASSERT(0, "accepted type %u", m.w.type);
    }
    unsigned char out[VERBS_BUF_BYTES];
    size_t n = verbs_msg_encode(&m, out, sizeof out);
    FUZZ_ASSERT(n == len && memcmp(out, buf, n) == 0, "message of type %u does not survive decode and encode",
                m.w.type);
    free(buf);
    return 0;
}
