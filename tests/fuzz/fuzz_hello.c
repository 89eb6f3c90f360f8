/* Fuzz target: the connection hello (oobx__hello_decode). */
#include "fuzz.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    oobx_hello_t h;
    char why[FUZZ_WHY_BYTES];
    memset(why, 0, sizeof why);
    int rc = oobx__hello_decode(data, size, &h, why, sizeof why);
    fuzz_check_why(why, rc, "hello");
    if (rc == 0) {
        FUZZ_ASSERT(size >= OOBX_HELLO_BYTES, "accepted a hello of %zu bytes", size);
        FUZZ_ASSERT(h.nranks > 0 && h.rank >= 0 && h.rank <= h.nranks, "rank %d of %d", h.rank, h.nranks);
        unsigned char out[OOBX_HELLO_BYTES];
        oobx__hello_encode(&h, out);
        FUZZ_ASSERT(memcmp(out, data, OOBX_HELLO_BYTES) == 0, "hello does not survive decode and encode");
    } else {
        FUZZ_ASSERT(rc == OOBX_ERR_PROTOCOL || rc == OOBX_ERR_MISMATCH, "unexpected code %d", rc);
    }
    return 0;
}
