/* Fuzz target: a root's reply to a rank (oobx__reply_decode). */
#include "fuzz.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    oobx_reply_t r;
    char why[FUZZ_WHY_BYTES];
    memset(why, 0, sizeof why);
    int rc = oobx__reply_decode(data, size, &r, why, sizeof why);
    fuzz_check_why(why, rc, "reply");
    if (rc == 0) {
        FUZZ_ASSERT(size >= OOBX_REPLY_BYTES, "accepted a reply of %zu bytes", size);
        FUZZ_ASSERT(r.status <= 0, "status %d", r.status);
        FUZZ_ASSERT(r.status < 0 ? r.len <= OOBX_REPLY_TEXT_MAX : r.len <= OOBX_PLACE_MAX(OOBX_NRANKS_MAX), "len %u for status %d",
                    r.len, r.status);
        FUZZ_ASSERT(r.origin >= -1 && r.origin < OOBX_NRANKS_MAX && (r.status < 0 || r.origin == -1),
                    "origin %d for status %d", r.origin, r.status);
        unsigned char out[OOBX_REPLY_BYTES];
        oobx__reply_encode(&r, out);
        FUZZ_ASSERT(memcmp(out, data, OOBX_REPLY_BYTES) == 0, "reply does not survive decode and encode");
    } else {
        FUZZ_ASSERT(rc == OOBX_ERR_PROTOCOL || rc == OOBX_ERR_MISMATCH, "unexpected code %d", rc);
    }
    return 0;
}
