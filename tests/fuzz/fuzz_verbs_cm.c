/*
 * Fuzz target: the verbs transport's rdma_cm private data
 * (verbs_cm_hello_check, verbs_cm_reject_decode). Input: byte 0 bit 0 picks
 * the reject parser; byte 1 the number of ranks (1..64), byte 2 this rank,
 * byte 3 the rank expected (0xff: a connect request, from any rank); the rest
 * is the private data.
 */
#include "fuzz.h"
#include "oobx.h"
#include "verbs_wire.h"

#define FUZZ_COMM_MAGIC 0x1122334455667788ull

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4) return 0;
    char why[FUZZ_WHY_BYTES];
    memset(why, 0, sizeof why);
    const uint8_t *pd = data + 4;
    size_t len = size - 4;
    if (data[0] & 1) {
        verbs_cm_reject_t rj;
        int rc = verbs_cm_reject_decode(pd, len, &rj, why, sizeof why);
        fuzz_check_why(why, rc, "verbs reject");
        if (rc == 0) {
            FUZZ_ASSERT(len >= sizeof rj && rj.cm_magic == VERBS_CM_MAGIC, "accepted a reject of %zu bytes", len);
            FUZZ_ASSERT(memcmp(&rj, pd, sizeof rj) == 0, "reject is not what came");
        } else {
            FUZZ_ASSERT(rc == OOBX_ERR_PROTOCOL, "unexpected code %d", rc);
        }
        return 0;
    }
    verbs_cm_want_t want = {.comm_magic = FUZZ_COMM_MAGIC, .nranks = 1 + data[1] % 64};
    want.self = data[2] % want.nranks;
    want.peer = data[3] == 0xff ? -1 : data[3] % want.nranks;
    verbs_cm_hello_t h;
    uint32_t code = verbs_cm_hello_check(pd, len, &want, &h, why, sizeof why);
    fuzz_check_why(why, (int)code, "verbs hello");
    if (code != 0) {
        FUZZ_ASSERT(code == VERBS_REJ_MAGIC || code == VERBS_REJ_VERSION || code == VERBS_REJ_RANK,
                    "unexpected reject code %u", code);
        return 0;
    }
    FUZZ_ASSERT(len >= sizeof h, "accepted a hello of %zu bytes", len);
    FUZZ_ASSERT(h.cm_magic == VERBS_CM_MAGIC && h.version == VERBS_CM_VERSION && h.comm_magic == want.comm_magic,
                "accepted magic 0x%08x version %u", h.cm_magic, h.version);
    if (want.peer >= 0)
        FUZZ_ASSERT(h.rank == (uint32_t)want.peer, "accepted rank %u, expected %d", h.rank, want.peer);
    else
        FUZZ_ASSERT(h.rank < (uint32_t)want.nranks && h.rank != (uint32_t)want.self &&
                        h.nranks == (uint32_t)want.nranks,
                    "accepted rank %u of %u at rank %d of %d", h.rank, h.nranks, want.self, want.nranks);
    /* what is accepted re-encodes to the same bytes (but the padding) */
    verbs_cm_hello_t again;
    verbs_cm_hello_encode(h.comm_magic, (int)h.rank, (int)h.nranks, &again);
    again.pad = h.pad;
    FUZZ_ASSERT(memcmp(&again, pd, sizeof again) == 0, "hello does not survive decode and encode");
    return 0;
}
