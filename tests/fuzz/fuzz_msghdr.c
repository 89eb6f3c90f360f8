/* Fuzz target: the header of every message on a socket (oobx__msghdr_decode). */
#include "fuzz.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    oobx_msg_hdr_t h;
    char why[FUZZ_WHY_BYTES];
    memset(why, 0, sizeof why);
    int rc = oobx__msghdr_decode(data, size, &h, why, sizeof why);
    fuzz_check_why(why, rc, "message header");
    if (rc == 0) {
        FUZZ_ASSERT(size >= OOBX_MSGHDR_BYTES, "accepted a header of %zu bytes", size);
        /* a message kind, optionally flagged for rendezvous, or one of the
         * rendezvous frames (clear-to-send answers carry no payload), a
         * rendezvous optionally offering a pull (OOBX_FRAME_CMA) */
        unsigned base = h.kind & ~(OOBX_FRAME_RTS | OOBX_FRAME_CMA);
        int cts = h.kind == OOBX_FRAME_CTS_GO || h.kind == OOBX_FRAME_CTS_SKIP || h.kind == OOBX_FRAME_CTS_DONE;
        /* a pull descriptor rides only on a rendezvous */
        FUZZ_ASSERT(!(h.kind & OOBX_FRAME_CMA) || (h.kind & OOBX_FRAME_RTS), "pull flag without rendezvous, kind 0x%x",
                    h.kind);
        FUZZ_ASSERT(cts || h.kind == OOBX_FRAME_DATA || (base >= OOBX_MSG_P2P && base <= OOBX_MSG_CTRL), "kind %u", h.kind);
        FUZZ_ASSERT(!cts || h.len == 0, "clear-to-send frame with %llu bytes", (unsigned long long)h.len);
        FUZZ_ASSERT(h.len <= OOBX_MSG_MAX_LEN, "len %llu", (unsigned long long)h.len);
        FUZZ_ASSERT(h.src >= 0, "src %d", h.src);
        unsigned char out[OOBX_MSGHDR_BYTES];
        oobx__msghdr_encode(&h, out);
        FUZZ_ASSERT(memcmp(out, data, OOBX_MSGHDR_BYTES) == 0, "header does not survive decode and encode");
    } else {
        FUZZ_ASSERT(rc == OOBX_ERR_PROTOCOL || rc == OOBX_ERR_MISMATCH, "unexpected code %d", rc);
    }
    return 0;
}
