/*
 * Fuzz target: a message the UCX transport takes off the wire: its tag
 * (ucx_tag_check) and its bytes (ucx_msg_decode). Input: byte 0 is the
 * number of ranks less one, byte 1 this rank, bytes 2-9 the tag
 * (little-endian); the rest is the message.
 */
#include "fuzz.h"
#include "oobx.h"
#include "ringbuf.h"
#include "ucx_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 10) return 0;
    int nranks = 1 + data[0];
    int self = data[1] % nranks;
    uint64_t tag = 0;
    for (int i = 0; i < 8; i++) tag |= (uint64_t)data[2 + i] << (8 * i);
    size_t len = size - 10;
    unsigned char *buf = malloc(len ? len : 1); /* exact size: ASan sees any read past it */
    if (!buf) return 0;
    memcpy(buf, data + 10, len);
    char why[FUZZ_WHY_BYTES];
    memset(why, 0, sizeof why);
    ucx_tag_info_t ti;
    int rc = ucx_tag_check(tag, len, self, nranks, &ti, why, sizeof why);
    fuzz_check_why(why, rc, "ucx tag");
    if (rc == 0) {
        FUZZ_ASSERT(ti.peer >= 0 && ti.peer < nranks && ti.peer != self, "sender %d at rank %d of %d", ti.peer, self,
                    nranks);
        FUZZ_ASSERT(ti.type >= UCX_T_EAGER && ti.type <= UCX_T_PULL_ACK && len <= ucx_type_max(ti.type),
                    "type %d of %zu bytes", ti.type, len);
        FUZZ_ASSERT(ucx_tag(ti.type, ti.peer, ti.seq) == tag, "tag 0x%016llx does not survive decode and encode",
                    (unsigned long long)tag);
    } else {
        FUZZ_ASSERT(rc == OOBX_ERR_PROTOCOL, "unexpected code %d", rc);
    }
    /* the message parser guards itself, whatever the tag said */
    int type = ucx_tag_type(tag), src = ucx_tag_rank(tag);
    ucx_msg_t m;
    memset(why, 0, sizeof why);
    rc = ucx_msg_decode(type, buf, len, src, &m, why, sizeof why);
    fuzz_check_why(why, rc, "ucx message");
    if (rc != 0) {
        FUZZ_ASSERT(rc == OOBX_ERR_PROTOCOL, "unexpected code %d", rc);
        free(buf);
        return 0;
    }
    FUZZ_ASSERT(m.type == type && len <= ucx_type_max(type), "accepted type %d of %zu bytes", type, len);
    switch (type) {
    case UCX_T_EAGER: {
        const unsigned char *p = m.payload;
        FUZZ_ASSERT(m.hdr.src == src, "header names rank %d, sent by %d", m.hdr.src, src);
        FUZZ_ASSERT(p == buf + sizeof(oobx_msg_hdr_t) && m.hdr.len <= UCX_EAGER_MAX && p + m.hdr.len == buf + len,
                    "payload of %llu bytes outside the message", (unsigned long long)m.hdr.len);
        volatile unsigned char sum = 0;
        for (uint64_t i = 0; i < m.hdr.len; i++) sum ^= p[i];
        (void)sum;
        break;
    }
    case UCX_T_HDR:
        FUZZ_ASSERT(m.hdr.src == src && m.hdr.len > UCX_EAGER_MAX && len == sizeof(oobx_msg_hdr_t),
                    "header of %llu bytes from rank %d", (unsigned long long)m.hdr.len, m.hdr.src);
        break;
    case UCX_T_DOORBELL:
        FUZZ_ASSERT(m.db.count >= 1 && m.db.count <= RINGBUF_SLOTS_MAX, "doorbell for %u chunks", m.db.count);
        break;
    case UCX_T_CREDIT: break;
    case UCX_T_SETUP: {
        char w2[FUZZ_WHY_BYTES];
        FUZZ_ASSERT(oobx__ringbuf_geom_check(m.setup.slots, m.setup.slot_bytes, w2, sizeof w2) == 0,
                    "accepted a ring of %u slots of %u bytes", m.setup.slots, m.setup.slot_bytes);
        FUZZ_ASSERT(m.setup.rkey_len > 0 && m.rkey == buf + sizeof(ucx_setup_t) && m.rkey + m.setup.rkey_len == buf + len,
                    "key of %u bytes outside the %zu-byte setup", m.setup.rkey_len, len);
        break;
    }
    case UCX_T_PULL:
        FUZZ_ASSERT(m.hdr.src == src && m.hdr.len > UCX_EAGER_MAX && len == sizeof(ucx_pull_t),
                    "pull of %llu bytes from rank %d", (unsigned long long)m.hdr.len, m.hdr.src);
        break;
    case UCX_T_PULL_ACK:
        FUZZ_ASSERT(m.ack.push <= 1 && len == sizeof(ucx_pull_ack_t), "pull answer push=%u", m.ack.push);
        break;
    default: FUZZ_ASSERT(0, "accepted type %d", type);
    }
    unsigned char *out = malloc(len ? len : 1);
    if (!out) {
        free(buf);
        return 0;
    }
    size_t n = ucx_msg_encode(&m, out, len);
    FUZZ_ASSERT(n == len && memcmp(out, buf, n) == 0, "message of type %d does not survive decode and encode", type);
    free(out);
    free(buf);
    return 0;
}
