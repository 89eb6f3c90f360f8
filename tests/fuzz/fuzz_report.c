/* Fuzz target: a rank's report to its root (oobx__report_decode). */
#include "fuzz.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    oobx_report_t r;
    char why[FUZZ_WHY_BYTES];
    memset(why, 0, sizeof why);
    int rc = oobx__report_decode(data, size, &r, why, sizeof why);
    fuzz_check_why(why, rc, "report");
    if (rc == 0) {
        FUZZ_ASSERT(size >= OOBX_REPORT_BYTES, "accepted a report of %zu bytes", size);
        FUZZ_ASSERT(r.blob_len > 0 && r.blob_len <= OOBX_ADDR_MAX, "blob of %u bytes", r.blob_len);
        FUZZ_ASSERT(r.nroots > 0 && r.nroots <= r.nranks && r.iroot >= 0 && r.iroot < r.nroots,
                    "root %d of %d for %d ranks", r.iroot, r.nroots, r.nranks);
        FUZZ_ASSERT(r.rank >= 0 && r.rank <= r.nranks, "rank %d of %d", r.rank, r.nranks);
        unsigned char out[OOBX_REPORT_BYTES];
        oobx__report_encode(&r, out);
        FUZZ_ASSERT(memcmp(out, data, OOBX_REPORT_BYTES) == 0, "report does not survive decode and encode");
    } else {
        FUZZ_ASSERT(rc == OOBX_ERR_PROTOCOL || rc == OOBX_ERR_MISMATCH, "unexpected code %d", rc);
    }
    return 0;
}
