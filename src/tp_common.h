/*
 * What the module transports (ucx/, verbs/) share: the head of an address
 * card and the bookkeeping of peer failures and of peers with work to do.
 * Pure code with no call into the core: each module links tp_common.c into
 * itself (hidden), the core links it too.
 */
#ifndef OOBX_TP_COMMON_H
#define OOBX_TP_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "transport.h"

/* ---- address cards ---- */

/* Every transport's card starts with these 8 bytes (host byte order: cards
 * stay within one job of one architecture). */
typedef struct oobx__card_head {
    uint32_t magic;
    uint16_t version;
    uint16_t hdr_bytes; /* the size of the transport's whole header */
} oobx__card_head_t;

/* Copies the hdr_size-byte header of a card of len bytes into hdr and checks
 * its head: long enough, the transport's magic (else OOBX_ERR_PROTOCOL: "not
 * a <name> address"), its version and header size (else OOBX_ERR_MISMATCH).
 * 0, or the error with why. */
int oobx__card_open(const void *buf, size_t len, void *hdr, size_t hdr_size, uint32_t magic, uint16_t version,
                    const char *name, char *why, size_t whylen);

/* ---- peer failures ---- */

typedef struct oobx__peer_fail {
    int failed;   /* the link is gone */
    int reported; /* sink.peer_failed was called */
    int status;   /* OOBX_ERR_*, 0: OOBX_ERR_REMOTE */
    char why[384];
} oobx__peer_fail_t;

/* Records the first failure of a peer (later ones are ignored) and sets
 * *pending, so that the next progress reports it. */
void oobx__peer_fail_vrecord(oobx__peer_fail_t *f, int *pending, int status, const char *fmt, va_list ap);
/* The status to report for a failed peer. */
static inline int oobx__peer_fail_status(const oobx__peer_fail_t *f)
{
    return f->status ? f->status : OOBX_ERR_REMOTE;
}

/* The transport's side of reporting: its record of peer i, and what it
 * drops of peer i before the core hears of the failure. */
typedef struct oobx__peer_fail_ops {
    oobx__peer_fail_t *(*get)(void *tp, int peer);
    void (*drop)(void *tp, int peer);
} oobx__peer_fail_ops_t;

/* Reports each failed, unreported peer of 0..n-1 once: logs why at info
 * level, drops it, tells the sink. Clears *pending. */
void oobx__peer_fail_report(void *tp, int n, const oobx__peer_fail_ops_t *ops, const oobx_tp_sink_t *sink,
                            const oobx_log_t *log, int *pending);

/* ---- peers with work ---- */

/* Puts peer on list (capacity: every peer) unless *flag says it is there. */
static inline void oobx__dirty_mark(int *flag, int *list, int *n, int peer)
{
    if (!*flag) {
        *flag = 1;
        list[(*n)++] = peer;
    }
}

/* ---- a sink that takes nothing ---- */

/* Messages are dropped (msg_begin gives no buffer and no cookie: the
 * transport consumes the payload, a rendezvous is told to skip), failures go
 * unreported, need_peer knows no address: for a probe instance, and for a
 * transport whose destroy still takes events after the core stopped listening. */
oobx_tp_sink_t oobx__tp_sink_drop(void);

#endif
