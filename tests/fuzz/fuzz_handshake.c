/* Fuzz target: the first bytes of a connection, both ways. Read as the
 * connector's first message (hello and proof, checked against a fixed secret
 * and nonce as an acceptor would; a socket peer's counted proof is the same
 * message, whose nonce starts with the count) and as an acceptor's challenge
 * (oobx__auth_challenge_decode). */
#include "auth.h"
#include "fuzz.h"
#include "wire.h"

static const unsigned char fuzz_secret[OOBX_SECRET_BYTES] = "oobx-fuzz-secrt";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[FUZZ_WHY_BYTES];
    memset(why, 0, sizeof why);
    oobx_auth_t a;
    memset(&a, 0, sizeof a);
    int rc = oobx__auth_challenge_decode(data, size, &a, why, sizeof why);
    fuzz_check_why(why, rc, "challenge");
    if (rc == 0) {
        FUZZ_ASSERT(size >= OOBX_CHALLENGE_BYTES, "accepted a challenge of %zu bytes", size);
        FUZZ_ASSERT(memcmp(a.nonce_a, data + 8, OOBX_NONCE_BYTES) == 0, "the nonce is not the challenge's");
    } else {
        FUZZ_ASSERT(rc == OOBX_ERR_PROTOCOL || rc == OOBX_ERR_MISMATCH, "unexpected code %d", rc);
    }
    /* the acceptor's side */
    if (size < OOBX_HELLO_BYTES + OOBX_PROOF_BYTES) return 0;
    oobx_hello_t h;
    memset(why, 0, sizeof why);
    rc = oobx__hello_decode(data, size, &h, why, sizeof why);
    fuzz_check_why(why, rc, "hello");
    if (rc != 0) return 0;
    memset(a.nonce_a, 0x5a, sizeof a.nonce_a);
    memcpy(a.hello, data, OOBX_HELLO_BYTES);
    memcpy(a.nonce_c, data + OOBX_HELLO_BYTES, OOBX_NONCE_BYTES);
    int ok = oobx__auth_check(fuzz_secret, 'C', &a, data + OOBX_HELLO_BYTES + OOBX_NONCE_BYTES);
    unsigned char mac[OOBX_MAC_BYTES];
    oobx__auth_mac(fuzz_secret, 'C', &a, mac);
    FUZZ_ASSERT(ok == !memcmp(mac, data + OOBX_HELLO_BYTES + OOBX_NONCE_BYTES, OOBX_MAC_BYTES),
                "the proof check disagrees with the mac");
    /* the same proof never passes as the other side's */
    if (ok) FUZZ_ASSERT(!oobx__auth_check(fuzz_secret, 'A', &a, mac), "a connector's proof passes as the acceptor's");
    /* the count an acceptor compares is the nonce's first 8 bytes, little-endian */
    uint64_t count = 0;
    for (int i = 7; i >= 0; i--) count = count << 8 | data[OOBX_HELLO_BYTES + i];
    FUZZ_ASSERT(oobx__auth_count(&a) == count, "the count read is not the nonce's");
    return 0;
}
