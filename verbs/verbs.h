/*
 * The raw verbs transport (librdmacm for connection set-up, libibverbs for
 * the data path): constants shared by verbs.c, verbs_dev.c and the unit test.
 * The wire formats and their parsers are verbs_wire.h; docs/transports/verbs.md
 * describes the protocol.
 */
#ifndef OOBX_VERBS_H
#define OOBX_VERBS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "settings.h"
#include "log.h"
#include "tp_module.h"
#include "transport.h"
#include "verbs_wire.h"

#define VERBS_SEND_SLOTS 32u          /* send bounce buffers per QP */
#define VERBS_READ_MAX 4u             /* RDMA READs in flight per QP (at most) */
#define VERBS_READ_PIECE (1ull << 30) /* largest RDMA READ (and the device's max_msg_sz) */
#define VERBS_CREDIT_BATCH 16u        /* an explicit credit message once this many are owed */
#define VERBS_CREDIT_RESERVE 1u       /* credits only a credit message may take */
#define VERBS_LINKS_MAX 1024          /* QPs per instance; sizes the shared CQ */
#define VERBS_RESOLVE_MS 2000         /* rdma_resolve_addr / rdma_resolve_route */
#define VERBS_COPY_MAX (256u << 10)   /* larger messages are copied at send and done at once, up to this */
#define VERBS_RELEASE_MS 2000         /* bound on the device's work on a buffer a failed call gives back */
#define VERBS_RING_DIRECT_MIN (8u << 20) /* ring-link messages this large go by RDMA READ */
#define VERBS_FLUSH_MS 200            /* destroy: bound on flushing queued sends */

const char *verbs_reject_str(uint32_t code);

/* ---- device choice (verbs_dev.c) ---- */

typedef struct verbs_choice {
    char dev[VERBS_DEV_NAME_MAX];   /* device name */
    int port;                        /* port from "dev:port", or 0 */
    struct sockaddr_storage addr;    /* IP to bind (port 0) */
    socklen_t addrlen;
    char why_dev[256];
    char why_ip[512];
} verbs_choice_t;

/* Picks the device (OOBX_NET_DEVICE, else topology) and the IP for rdma_cm.
 * 0, or OOBX_ERR_UNAVAILABLE / OOBX_ERR_INVALID with the reason in why. */
int verbs_choose(const oobx_core_api_t *core, const oobx_settings_t *s, const void *root_hint, unsigned root_hint_len, verbs_choice_t *out,
                 char *why, size_t whylen);

void verbs_addr_format(const struct sockaddr *sa, char *buf, size_t len);

/* Counters of an instance, for tests and debugging. */
typedef struct verbs_stats {
    int qps;                 /* QPs alive */
    int ring_tx_active;      /* sends to the ring successor go through its ring */
    uint64_t ring_chunks_tx; /* ring chunks written */
    uint64_t ring_chunks_rx; /* ring chunks received */
    uint64_t rndv_rx;        /* messages read with RDMA READ */
    uint64_t crossed;        /* own connection attempts given up for the peer's */
    uint64_t rejected;       /* connection requests refused */
} verbs_stats_t;
void verbs_tp_stats(oobx_tp_t *tp, verbs_stats_t *st);
/* The state of every link, for debugging. */
void verbs_tp_dump(oobx_tp_t *tp, FILE *out);

extern const oobx_tp_ops_t oobx_verbs_ops;
/* the describe op: devices, ports and the choice, for oobx-info -u */
void verbs_describe(FILE *out, const oobx_settings_t *s, const oobx_core_api_t *core);

#endif
