/* Fuzz target: the verbs transport's address card (verbs_card_decode). */
#include <netinet/in.h>

#include "fuzz.h"
#include "oobx.h"
#include "verbs_wire.h"

/* Bytes of the card the parser does not read: the padding, and for IPv4 the
 * unused 12 address bytes and the scope id. */
static int ignored(const verbs_blob_t *b, size_t i)
{
    if (i >= offsetof(verbs_blob_t, pad) && i < sizeof(verbs_blob_t)) return 1;
    if (b->family == AF_INET && i >= offsetof(verbs_blob_t, addr) + 4 && i < offsetof(verbs_blob_t, dev_len))
        return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    verbs_card_t c, c2;
    char why[FUZZ_WHY_BYTES];
    memset(why, 0, sizeof why);
    int rc = verbs_card_decode(data, size, &c, why, sizeof why);
    fuzz_check_why(why, rc, "verbs card");
    if (rc != 0) {
        FUZZ_ASSERT(rc == OOBX_ERR_PROTOCOL || rc == OOBX_ERR_MISMATCH, "unexpected code %d", rc);
        return 0;
    }
    size_t dl = strnlen(c.dev, sizeof c.dev);
    FUZZ_ASSERT(dl >= 1 && dl < VERBS_DEV_NAME_MAX && dl == c.hdr.dev_len, "device name of %zu bytes, card says %u",
                dl, c.hdr.dev_len);
    FUZZ_ASSERT(size == sizeof(verbs_blob_t) + dl && size <= VERBS_CARD_MAX, "accepted a %zu-byte card", size);
    FUZZ_ASSERT(memcmp(c.dev, data + sizeof(verbs_blob_t), dl) == 0, "device name is not the card's");
    uint16_t port;
    if (c.addr.ss_family == AF_INET) {
        port = ntohs(((const struct sockaddr_in *)&c.addr)->sin_port);
        FUZZ_ASSERT(c.addrlen == sizeof(struct sockaddr_in), "IPv4 address of %u bytes", (unsigned)c.addrlen);
    } else {
        FUZZ_ASSERT(c.addr.ss_family == AF_INET6, "family %u", c.addr.ss_family);
        port = ntohs(((const struct sockaddr_in6 *)&c.addr)->sin6_port);
        FUZZ_ASSERT(c.addrlen == sizeof(struct sockaddr_in6), "IPv6 address of %u bytes", (unsigned)c.addrlen);
    }
    FUZZ_ASSERT(port != 0 && port == c.hdr.port, "port %u, card says %u", port, c.hdr.port);
    /* what the parser keeps re-encodes to the same bytes */
    unsigned char out[VERBS_CARD_MAX];
    size_t n = verbs_card_encode(c.hdr.host_id, c.hdr.pid, &c.addr, c.dev, out, sizeof out);
    FUZZ_ASSERT(n == size, "re-encoded card of %zu bytes, from %zu", n, size);
    for (size_t i = 0; i < n; i++)
        FUZZ_ASSERT(ignored(&c.hdr, i) || out[i] == data[i], "card byte %zu changes from 0x%02x to 0x%02x on re-encoding",
                    i, data[i], out[i]);
    rc = verbs_card_decode(out, n, &c2, why, sizeof why);
    FUZZ_ASSERT(rc == 0, "re-encoded card rejected: %s", why);
    FUZZ_ASSERT(memcmp(&c.addr, &c2.addr, sizeof c.addr) == 0 && strcmp(c.dev, c2.dev) == 0 &&
                c.hdr.pid == c2.hdr.pid && c.hdr.host_id == c2.hdr.host_id,
                "card does not survive decode, encode, decode");
    return 0;
}
