#include "auth.h"

#include <stdio.h>
#include <string.h>
#include <sodium.h>

#include "oobx.h"
#include "wire.h"

/* little-endian, kept here so that the modules that take this object need no other */
static void put16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static void put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

int oobx__auth_init(void)
{
    /* idempotent and thread-safe; libsodium's own state, not oobx's */
    return sodium_init() < 0 ? OOBX_ERR_SYSTEM : 0;
}

void oobx__auth_random(void *buf, size_t n)
{
    randombytes_buf(buf, n);
}

void oobx__auth_mac(const unsigned char *secret, char role, const oobx_auth_t *a, unsigned char mac[OOBX_MAC_BYTES])
{
    crypto_generichash_state st;
    unsigned char label[8] = {'o', 'o', 'b', 'x', '-', 'a', 'u', (unsigned char)role};
    crypto_generichash_init(&st, secret, OOBX_SECRET_BYTES, OOBX_MAC_BYTES);
    crypto_generichash_update(&st, label, sizeof(label));
    crypto_generichash_update(&st, a->nonce_a, sizeof(a->nonce_a));
    crypto_generichash_update(&st, a->nonce_c, sizeof(a->nonce_c));
    crypto_generichash_update(&st, a->hello, sizeof(a->hello));
    crypto_generichash_final(&st, mac, OOBX_MAC_BYTES);
}

int oobx__auth_check(const unsigned char *secret, char role, const oobx_auth_t *a, const unsigned char *mac)
{
    unsigned char want[OOBX_MAC_BYTES];
    oobx__auth_mac(secret, role, a, want);
    return crypto_verify_32(want, mac) == 0;
}

#define AUTH_CHALLENGE_TYPE 0x4348u /* "HC" */

void oobx__auth_challenge(oobx_auth_t *a, unsigned char out[OOBX_CHALLENGE_BYTES])
{
    randombytes_buf(a->nonce_a, sizeof(a->nonce_a));
    memset(out, 0, OOBX_CHALLENGE_BYTES);
    put32(out, OOBX_WIRE_MAGIC);
    put16(out + 4, OOBX_WIRE_VERSION);
    put16(out + 6, AUTH_CHALLENGE_TYPE);
    memcpy(out + 8, a->nonce_a, OOBX_NONCE_BYTES);
}

int oobx__auth_challenge_decode(const unsigned char *in, size_t len, oobx_auth_t *a, char *why, size_t whylen)
{
    if (len < OOBX_CHALLENGE_BYTES) {
        snprintf(why, whylen, "challenge of %zu bytes, want %d", len, OOBX_CHALLENGE_BYTES);
        return OOBX_ERR_PROTOCOL;
    }
    if (get32(in) != OOBX_WIRE_MAGIC || get16(in + 6) != AUTH_CHALLENGE_TYPE) {
        snprintf(why, whylen, "the other side does not speak oobx (no challenge)");
        return OOBX_ERR_PROTOCOL;
    }
    if (get16(in + 4) != OOBX_WIRE_VERSION) {
        snprintf(why, whylen, "the other side speaks oobx wire version %u, this rank %u", get16(in + 4),
                 OOBX_WIRE_VERSION);
        return OOBX_ERR_MISMATCH;
    }
    for (int i = 24; i < OOBX_CHALLENGE_BYTES; i++)
        if (in[i]) {
            snprintf(why, whylen, "challenge with nonzero reserved bytes");
            return OOBX_ERR_PROTOCOL;
        }
    memcpy(a->nonce_a, in + 8, OOBX_NONCE_BYTES);
    return 0;
}

/* The connector's proof once a->nonce_c is made: out gets it and mac 'C' over hello. */
static void prove_with_nonce(const unsigned char *secret, oobx_auth_t *a, const unsigned char hello[32],
                             unsigned char out[OOBX_PROOF_BYTES])
{
    memcpy(a->hello, hello, sizeof(a->hello));
    memcpy(out, a->nonce_c, OOBX_NONCE_BYTES);
    oobx__auth_mac(secret, 'C', a, out + OOBX_NONCE_BYTES);
}

void oobx__auth_prove(const unsigned char *secret, oobx_auth_t *a, const unsigned char hello[32],
                      unsigned char out[OOBX_PROOF_BYTES])
{
    randombytes_buf(a->nonce_c, sizeof(a->nonce_c));
    prove_with_nonce(secret, a, hello, out);
}

void oobx__auth_prove_counted(const unsigned char *secret, oobx_auth_t *a, const unsigned char hello[32], uint64_t count,
                              unsigned char out[OOBX_PROOF_BYTES])
{
    for (int i = 0; i < 8; i++) a->nonce_c[i] = (unsigned char)(count >> (8 * i));
    randombytes_buf(a->nonce_c + 8, sizeof(a->nonce_c) - 8);
    prove_with_nonce(secret, a, hello, out);
}

uint64_t oobx__auth_count(const oobx_auth_t *a)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)a->nonce_c[i] << (8 * i);
    return v;
}

void oobx__auth_env_secret(const char *identity, const char *list, int nranks, const void *key, size_t keylen,
                           unsigned char out[OOBX_SECRET_BYTES])
{
    /* BLAKE2b takes keys of 16..64 bytes: a key of another length is hashed first */
    unsigned char k[crypto_generichash_KEYBYTES];
    crypto_generichash(k, sizeof(k), key, keylen, NULL, 0);
    crypto_generichash_state st;
    crypto_generichash_init(&st, k, sizeof(k), OOBX_SECRET_BYTES);
    char n[32];
    int nl = snprintf(n, sizeof(n), "|%d", nranks);
    crypto_generichash_update(&st, (const unsigned char *)"oobx-env|", 9);
    crypto_generichash_update(&st, (const unsigned char *)identity, strlen(identity));
    crypto_generichash_update(&st, (const unsigned char *)"|", 1);
    crypto_generichash_update(&st, (const unsigned char *)list, strlen(list));
    crypto_generichash_update(&st, (const unsigned char *)n, (size_t)nl);
    crypto_generichash_final(&st, out, OOBX_SECRET_BYTES);
    sodium_memzero(k, sizeof(k));
}

uint64_t oobx__auth_tag(const unsigned char *secret)
{
    unsigned char h[8];
    crypto_generichash(h, sizeof(h), (const unsigned char *)"oobx-tag", 8, secret, OOBX_SECRET_BYTES);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)h[i] << (8 * i);
    return v ? v : 1;
}
