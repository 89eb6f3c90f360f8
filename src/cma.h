/*
 * Single-copy transfers between ranks of one host: the receiver reads a
 * large payload straight from the sender's buffer into its final place with
 * Linux cross-memory attach (process_vm_readv), one copy instead of the two
 * (or more) of a socket or a shared-memory ring.
 *
 * Each rank publishes its identity in its transport address: the kernel
 * instance and pid namespace it runs in (a hash of the boot id and of the
 * pid namespace), its pid, and the address and value of a random word of
 * its memory. A peer whose scope is the same checks the identity once, at
 * its first pull, by reading that word: the read must be allowed (same
 * user, no ptrace restriction such as Yama's ptrace_scope or a seccomp
 * filter) and must return the word (the pid is that rank's and no other
 * process's). Only then does it pull payloads; a failed check or pull makes
 * it fall back to the transport's ordinary path for that peer for good.
 *
 * Used by the socket transport (its rendezvous) and the UCX transport (its
 * large messages); docs/design.md says why and when.
 */
#ifndef OOBX_CMA_H
#define OOBX_CMA_H

#include <stddef.h>
#include <stdint.h>

#define OOBX_CMA_ID_BYTES 32 /* host byte order: cards stay within one job of one architecture */

/* This process's identity; lives as long as the transport instance (the
 * word is read by peers where it lies). */
typedef struct oobx__cma_self {
    uint64_t scope;         /* 0: cross-memory attach is not offered */
    uint32_t pid;
    volatile uint64_t word; /* random: what a peer must read at &word */
} oobx__cma_self_t;

enum { OOBX_CMA_UNKNOWN = 0, OOBX_CMA_OK = 1, OOBX_CMA_NO = -1 };

/* What a rank knows of a peer's identity. */
typedef struct oobx__cma_peer {
    int state;         /* OOBX_CMA_*: NO when the peer is elsewhere or a check failed */
    uint32_t pid;
    uint64_t word_addr, word;
    char why[120];     /* why the state is NO, once it was tried */
    int nomap;         /* mapping its memory failed once (mem.h): not tried again */
} oobx__cma_peer_t;

/* Fills self; enabled 0 leaves scope 0 (nothing offered). */
void oobx__cma_self_init(oobx__cma_self_t *self, int enabled);
void oobx__cma_encode(const oobx__cma_self_t *self, unsigned char out[OOBX_CMA_ID_BYTES]);
/* Reads a peer's identity: state UNKNOWN when it may be pulled from (same
 * scope), NO otherwise. */
void oobx__cma_decode(const oobx__cma_self_t *self, const unsigned char in[OOBX_CMA_ID_BYTES],
                      oobx__cma_peer_t *peer);
/* 1 when payloads may be pulled from peer, checking its identity the first
 * time (then state is OK or NO, and why says what failed). */
int oobx__cma_check(oobx__cma_peer_t *peer);
/* 1 when the process at the peer's pid still holds its word (it is still
 * that rank: no other process took the pid since). */
int oobx__cma_same(const oobx__cma_peer_t *peer);
/* Reads len bytes at the peer's address src into dst. 0, or -errno (a short
 * read is -EFAULT); a failure marks the peer NO with why. */
int oobx__cma_pull(oobx__cma_peer_t *peer, void *dst, uint64_t src, size_t len);

/* A pull's ticket: sits in the sender's memory beside its send record, and
 * its address and nonce go with the payload's address. The puller reads it
 * after the payload: the same nonce and address say the payload was still
 * the caller's when it was read; another address, that the sender's call
 * gave the buffer back and the payload is at that address now (the
 * sender's copy, read again); address 0 or another nonce, that the sender
 * let go of it without a copy (its link failed or it left). */
typedef struct oobx__cma_ticket {
    volatile uint64_t nonce;
    volatile uint64_t addr;
} oobx__cma_ticket_t;

void oobx__cma_ticket_init(oobx__cma_ticket_t *t, const void *payload);
/* The payload is at copy from here on (before the caller gets its buffer back). */
void oobx__cma_ticket_move(oobx__cma_ticket_t *t, const void *copy);
/* Nothing may be read any more (before the payload or the record goes). */
void oobx__cma_ticket_void(oobx__cma_ticket_t *t);
/* oobx__cma_pull checked against the ticket at ticket_addr: 0 in place; 1
 * withdrawn (nothing valid was read); -errno: the memory cannot be read
 * (the peer is marked NO, as by oobx__cma_pull). */
int oobx__cma_pull_ticket(oobx__cma_peer_t *peer, void *dst, uint64_t src, size_t len, uint64_t ticket_addr,
                          uint64_t nonce);

#endif
