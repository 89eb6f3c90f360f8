/* Fuzz target: the unique id a user hands to every rank (oobx__root_handle_decode). */
#include "fuzz.h"
#include "root.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    oobx_unique_id_t id, again;
    memset(&id, 0, sizeof id);
    memcpy(id.internal, data, size < sizeof id.internal ? size : sizeof id.internal);
    root_handle_t h, h2;
    char why[FUZZ_WHY_BYTES];
    memset(why, 0, sizeof why);
    int rc = oobx__root_handle_decode(&id, &h, why, sizeof why);
    fuzz_check_why(why, rc, "unique id");
    if (rc == 0) {
        char a[128], b[128];
        oobx__sock_addr_format(&h.addr, a, sizeof a);
        oobx__root_handle_encode(&h, &again);
        memset(why, 0, sizeof why);
        rc = oobx__root_handle_decode(&again, &h2, why, sizeof why);
        FUZZ_ASSERT(rc == 0, "re-encoded id rejected: %s", why);
        oobx__sock_addr_format(&h2.addr, b, sizeof b);
        FUZZ_ASSERT(h.magic == h2.magic && strcmp(a, b) == 0, "id does not survive decode, encode, decode (%s, %s)",
                    a, b);
    } else {
        FUZZ_ASSERT(rc == OOBX_ERR_INVALID || rc == OOBX_ERR_MISMATCH, "unexpected code %d", rc);
    }
    return 0;
}
