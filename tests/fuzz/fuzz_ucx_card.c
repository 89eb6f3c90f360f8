/* Fuzz target: the UCX transport's address card (ucx_card_decode). */
#include "fuzz.h"
#include "oobx.h"
#include "ucx_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ucx_card_t c, c2;
    char why[FUZZ_WHY_BYTES];
    memset(why, 0, sizeof why);
    int rc = ucx_card_decode(data, size, &c, why, sizeof why);
    fuzz_check_why(why, rc, "ucx card");
    if (rc != 0) {
        FUZZ_ASSERT(rc == OOBX_ERR_PROTOCOL || rc == OOBX_ERR_MISMATCH, "unexpected code %d", rc);
        return 0;
    }
    size_t hl = strnlen(c.host, sizeof c.host);
    FUZZ_ASSERT(hl < sizeof c.host, "host name not terminated");
    const uint8_t *a = c.addr;
    FUZZ_ASSERT(c.addr_len > 0 && a == data + sizeof(ucx_blob_hdr_t) && a + c.addr_len == data + size,
                "worker address of %zu bytes outside the %zu-byte card", c.addr_len, size);
    volatile unsigned char sum = 0;
    for (size_t i = 0; i < c.addr_len; i++) sum ^= a[i];
    (void)sum;
    /* re-encoded, the card is the same but for the host name's bytes after its end */
    unsigned char *out = malloc(size);
    if (!out) return 0;
    size_t n = ucx_card_encode(c.hdr.pid, c.host, c.hdr.cma, c.addr, c.addr_len, out, size);
    FUZZ_ASSERT(n == size, "re-encoded card of %zu bytes, from %zu", n, size);
    size_t skip_from = offsetof(ucx_blob_hdr_t, host) + hl, skip_to = sizeof(ucx_blob_hdr_t);
    for (size_t i = 0; i < n; i++)
        FUZZ_ASSERT((i >= skip_from && i < skip_to) || out[i] == data[i],
                    "card byte %zu changes from 0x%02x to 0x%02x on re-encoding", i, data[i], out[i]);
    rc = ucx_card_decode(out, n, &c2, why, sizeof why);
    FUZZ_ASSERT(rc == 0, "re-encoded card rejected: %s", why);
    FUZZ_ASSERT(strcmp(c.host, c2.host) == 0 && c.hdr.pid == c2.hdr.pid && c.addr_len == c2.addr_len,
                "card does not survive decode, encode, decode");
    free(out);
    return 0;
}
