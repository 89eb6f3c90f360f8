/*
 * Who may join: every connection proves knowledge of the job's secret both
 * ways, by challenge and response over fresh nonces (keyed BLAKE2b from
 * libsodium). docs/security.md has the threat model and the protocol.
 *
 * A connection: the acceptor sends a challenge (its nonce) as soon as it
 * accepts; the connector answers with its hello, its nonce and its proof
 * (mac 'C' over both nonces and the hello, which names its rank); only then
 * does the acceptor prove itself (mac 'A' over the same) in its answer.
 * Nothing sent before the connector's proof is checked depends on the secret
 * (a socket listener sends nothing at all before it).
 *
 * A socket peer connection (socket.c) saves the challenge's trip: the
 * acceptor's nonce is its listener's instance nonce, which the connector
 * already has from the acceptor's address (learnt from the root or the
 * allgather, both authenticated). Its own nonce starts with a count that
 * grows with every connection it opens; the acceptor takes a proof only
 * with a count above the last one it took from that rank, so a recorded
 * hello is no use to anyone a second time.
 */
#ifndef OOBX_AUTH_H
#define OOBX_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define OOBX_SECRET_BYTES 16
#define OOBX_NONCE_BYTES 16
#define OOBX_MAC_BYTES 32
#define OOBX_CHALLENGE_BYTES 32 /* u32 wire magic, u16 version, u16 type, nonce, 8 zero bytes */
#define OOBX_PROOF_BYTES (OOBX_NONCE_BYTES + OOBX_MAC_BYTES) /* the connector's nonce and mac */

typedef struct oobx_auth {
    unsigned char nonce_a[OOBX_NONCE_BYTES]; /* the acceptor's */
    unsigned char nonce_c[OOBX_NONCE_BYTES]; /* the connector's */
    unsigned char hello[32];                 /* the connector's hello, as sent */
} oobx_auth_t;

/* 0, or OOBX_ERR_SYSTEM when libsodium cannot start (no entropy source). */
int oobx__auth_init(void);
/* n bytes from the system's secure random source. */
void oobx__auth_random(void *buf, size_t n);

/* mac = keyed BLAKE2b-256(secret; role, nonce_a, nonce_c, hello). role: 'C' or 'A'. */
void oobx__auth_mac(const unsigned char *secret, char role, const oobx_auth_t *a, unsigned char mac[OOBX_MAC_BYTES]);
/* 1 when mac is role's proof for a (compared in constant time). */
int oobx__auth_check(const unsigned char *secret, char role, const oobx_auth_t *a, const unsigned char *mac);

/* The acceptor's challenge: a fresh nonce into a->nonce_a, encoded into out. */
void oobx__auth_challenge(oobx_auth_t *a, unsigned char out[OOBX_CHALLENGE_BYTES]);
/* The connector's side: reads a challenge into a->nonce_a (0, or OOBX_ERR_PROTOCOL
 * with why), then makes its nonce and proof: out gets nonce_c and mac 'C' over
 * hello (which the caller has encoded). */
int oobx__auth_challenge_decode(const unsigned char *in, size_t len, oobx_auth_t *a, char *why, size_t whylen);
void oobx__auth_prove(const unsigned char *secret, oobx_auth_t *a, const unsigned char hello[32],
                      unsigned char out[OOBX_PROOF_BYTES]);

/* The counted proof: a->nonce_a is the acceptor's instance nonce (the caller
 * sets it); a->nonce_c gets count (8 bytes, little-endian) and 8 random bytes;
 * out gets nonce_c and mac 'C' over hello. */
void oobx__auth_prove_counted(const unsigned char *secret, oobx_auth_t *a, const unsigned char hello[32], uint64_t count,
                              unsigned char out[OOBX_PROOF_BYTES]);
/* The count in a counted proof's nonce. */
uint64_t oobx__auth_count(const oobx_auth_t *a);

/* The secret of a job started from the environment: keyed BLAKE2b-128 over the
 * launcher's job identity, the root list and the size, keyed with key (the
 * job key; keylen 0: none). */
void oobx__auth_env_secret(const char *identity, const char *list, int nranks, const void *key, size_t keylen,
                           unsigned char out[OOBX_SECRET_BYTES]);
/* A public 64-bit tag of a secret (one-way): the magic that tells jobs apart. */
uint64_t oobx__auth_tag(const unsigned char *secret);

#endif
