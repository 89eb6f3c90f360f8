/*
 * Parsers and encoders of the verbs transport's wire messages (verbs_wire.h).
 * Pure functions: no verbs library, no transport instance, no allocation.
 * Every one of them is a fuzz target (tests/fuzz/fuzz_verbs_*.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>

#include "oobx.h"
#include "ringbuf.h"
#include "verbs_wire.h"
#include "tp_common.h"

/* ---- address card ---------------------------------------------------------------- */

size_t verbs_card_encode(uint64_t host_id, uint32_t pid, const struct sockaddr_storage *addr, const char *dev,
                         void *out, size_t cap)
{
    size_t dl = strnlen(dev, VERBS_DEV_NAME_MAX);
    size_t need = sizeof(verbs_blob_t) + dl;
    if (dl >= VERBS_DEV_NAME_MAX || cap < need) return 0;
    verbs_blob_t b;
    memset(&b, 0, sizeof(b));
    b.magic = VERBS_BLOB_MAGIC;
    b.version = VERBS_BLOB_VERSION;
    b.hdr_bytes = sizeof(b);
    b.host_id = host_id;
    b.pid = pid;
    b.family = addr->ss_family;
    if (b.family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        b.port = ntohs(in->sin_port);
        memcpy(b.addr, &in->sin_addr, 4);
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
        b.port = ntohs(in6->sin6_port);
        memcpy(b.addr, &in6->sin6_addr, 16);
        b.scope_id = in6->sin6_scope_id;
    }
    b.dev_len = (uint8_t)dl;
    memcpy(out, &b, sizeof(b));
    memcpy((char *)out + sizeof(b), dev, dl);
    return need;
}

int verbs_card_decode(const void *buf, size_t len, verbs_card_t *out, char *why, size_t whylen)
{
    verbs_blob_t b;
    int rc = oobx__card_open(buf, len, &b, sizeof(b), VERBS_BLOB_MAGIC, VERBS_BLOB_VERSION, "verbs", why, whylen);
    if (rc != 0) return rc;
    if (b.dev_len == 0 || b.dev_len >= VERBS_DEV_NAME_MAX || len != sizeof(b) + b.dev_len ||
        (b.family != AF_INET && b.family != AF_INET6) || b.port == 0) {
        snprintf(why, whylen, "malformed (family %u, port %u, device name of %u bytes in a %zu-byte card)", b.family,
                 b.port, b.dev_len, len);
        return OOBX_ERR_PROTOCOL;
    }
    if (memchr((const char *)buf + sizeof(b), '\0', b.dev_len)) {
        snprintf(why, whylen, "malformed (a NUL byte inside its %u-byte device name)", b.dev_len);
        return OOBX_ERR_PROTOCOL;
    }
    memset(out, 0, sizeof(*out));
    out->hdr = b;
    if (b.family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&out->addr;
        in->sin_family = AF_INET;
        in->sin_port = htons(b.port);
        memcpy(&in->sin_addr, b.addr, 4);
        out->addrlen = sizeof(*in);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&out->addr;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(b.port);
        memcpy(&in6->sin6_addr, b.addr, 16);
        in6->sin6_scope_id = b.scope_id;
        out->addrlen = sizeof(*in6);
    }
    memcpy(out->dev, (const char *)buf + sizeof(b), b.dev_len);
    out->dev[b.dev_len] = '\0';
    return 0;
}

/* ---- rdma_cm private data ------------------------------------------------------- */

void verbs_cm_hello_encode(uint64_t comm_magic, int rank, int nranks, verbs_cm_hello_t *out)
{
    memset(out, 0, sizeof(*out));
    out->cm_magic = VERBS_CM_MAGIC;
    out->version = VERBS_CM_VERSION;
    out->comm_magic = comm_magic;
    out->rank = (uint32_t)rank;
    out->nranks = (uint32_t)nranks;
}

uint32_t verbs_cm_hello_check(const void *pd, size_t len, const verbs_cm_want_t *want, verbs_cm_hello_t *h,
                              char *why, size_t whylen)
{
    verbs_cm_hello_t v;
    if (!pd || len < sizeof(v)) {
        snprintf(why, whylen, "private data of %zu bytes, shorter than a hello (%zu)", pd ? len : 0, sizeof(v));
        return VERBS_REJ_MAGIC;
    }
    memcpy(&v, pd, sizeof(v));
    if (v.cm_magic != VERBS_CM_MAGIC) {
        snprintf(why, whylen, "not an oobx verbs hello (magic 0x%08" PRIx32 ")", v.cm_magic);
        return VERBS_REJ_MAGIC;
    }
    if (v.comm_magic != want->comm_magic) {
        snprintf(why, whylen, "a hello of another communicator (magic 0x%016" PRIx64 ", this is 0x%016" PRIx64 ")",
                 v.comm_magic, want->comm_magic);
        return VERBS_REJ_MAGIC;
    }
    if (v.version != VERBS_CM_VERSION) {
        snprintf(why, whylen, "hello of version %u, this is %u", v.version, VERBS_CM_VERSION);
        return VERBS_REJ_VERSION;
    }
    if (want->peer >= 0) {
        if (v.rank != (uint32_t)want->peer) {
            snprintf(why, whylen, "a hello of rank %" PRIu32 ", expected rank %d", v.rank, want->peer);
            return VERBS_REJ_RANK;
        }
    } else if (v.rank >= (uint32_t)want->nranks || v.rank == (uint32_t)want->self ||
               v.nranks != (uint32_t)want->nranks) {
        snprintf(why, whylen, "a hello of rank %" PRIu32 " of %" PRIu32 " (this is rank %d of %d)", v.rank, v.nranks,
                 want->self, want->nranks);
        return VERBS_REJ_RANK;
    }
    *h = v;
    return 0;
}

int verbs_cm_reject_decode(const void *pd, size_t len, verbs_cm_reject_t *rj, char *why, size_t whylen)
{
    verbs_cm_reject_t v;
    if (!pd || len < sizeof(v)) {
        snprintf(why, whylen, "reject with %zu bytes of private data, not an oobx reject (%zu)", pd ? len : 0,
                 sizeof(v));
        return OOBX_ERR_PROTOCOL;
    }
    memcpy(&v, pd, sizeof(v));
    if (v.cm_magic != VERBS_CM_MAGIC) {
        snprintf(why, whylen, "reject with magic 0x%08" PRIx32 ", not an oobx reject", v.cm_magic);
        return OOBX_ERR_PROTOCOL;
    }
    *rj = v;
    return 0;
}

/* ---- SENDs of a connection -------------------------------------------------------- */

static int verbs_bad(char *why, size_t whylen, const char *what)
{
    snprintf(why, whylen, "%s", what);
    return OOBX_ERR_PROTOCOL;
}

int verbs_msg_decode(const void *buf, size_t len, int src, verbs_msg_t *m, char *why, size_t whylen)
{
    verbs_msg_t v;
    memset(&v, 0, sizeof(v));
    if (len < sizeof(v.w)) return verbs_bad(why, whylen, "a message shorter than its header");
    if (len > VERBS_BUF_BYTES) {
        snprintf(why, whylen, "a message of %zu bytes, larger than a receive buffer (%u)", len, VERBS_BUF_BYTES);
        return OOBX_ERR_PROTOCOL;
    }
    memcpy(&v.w, buf, sizeof(v.w));
    if (v.w.credits > VERBS_RECV_DEPTH) return verbs_bad(why, whylen, "more credits returned than receives exist");
    const unsigned char *body = (const unsigned char *)buf + sizeof(v.w);
    size_t blen = len - sizeof(v.w);
    switch (v.w.type) {
    case VERBS_T_EAGER:
        if (blen < sizeof(v.hdr)) return verbs_bad(why, whylen, "short message header");
        memcpy(&v.hdr, body, sizeof(v.hdr));
        if (v.hdr.src != src || v.hdr.len != blen - sizeof(v.hdr))
            return verbs_bad(why, whylen, "message header disagrees with its sender or length");
        v.payload = body + sizeof(v.hdr);
        break;
    case VERBS_T_RTS:
        if (blen != sizeof(v.hdr) + sizeof(v.rts)) return verbs_bad(why, whylen, "rendezvous request of the wrong size");
        memcpy(&v.hdr, body, sizeof(v.hdr));
        memcpy(&v.rts, body + sizeof(v.hdr), sizeof(v.rts));
        if (v.hdr.src != src || v.hdr.len <= VERBS_EAGER_MAX)
            return verbs_bad(why, whylen, "rendezvous header disagrees with its sender or length");
        break;
    case VERBS_T_MOVED:
        if (blen != sizeof(v.rts)) return verbs_bad(why, whylen, "moved rendezvous of the wrong size");
        memcpy(&v.rts, body, sizeof(v.rts));
        break;
    case VERBS_T_FIN:
        if (blen != sizeof(v.value)) return verbs_bad(why, whylen, "FIN of the wrong size");
        memcpy(&v.value, body, sizeof(v.value));
        break;
    case VERBS_T_CREDIT:
        if (blen != 0) return verbs_bad(why, whylen, "credit message with a body");
        break;
    case VERBS_T_SETUP:
        if (blen != sizeof(v.setup)) {
            snprintf(why, whylen, "ring setup of %zu bytes, expected %zu", blen, sizeof(v.setup));
            return OOBX_ERR_PROTOCOL;
        }
        memcpy(&v.setup, body, sizeof(v.setup));
        if (oobx__ringbuf_geom_check(v.setup.slots, v.setup.slot_bytes, why, whylen)) return OOBX_ERR_PROTOCOL;
        break;
    case VERBS_T_AUTH:
        if (blen != sizeof(v.mac)) return verbs_bad(why, whylen, "proof of the wrong size");
        memcpy(v.mac, body, sizeof(v.mac));
        break;
    case VERBS_T_RCREDIT:
        if (blen != sizeof(v.value)) {
            snprintf(why, whylen, "ring credit of %zu bytes, expected %zu", blen, sizeof(v.value));
            return OOBX_ERR_PROTOCOL;
        }
        memcpy(&v.value, body, sizeof(v.value));
        break;
    default:
        snprintf(why, whylen, "unknown message type %u", v.w.type);
        return OOBX_ERR_PROTOCOL;
    }
    *m = v;
    return 0;
}

size_t verbs_msg_encode(const verbs_msg_t *m, void *out, size_t cap)
{
    unsigned char *p = out;
    size_t n = sizeof(m->w), body;
    switch (m->w.type) {
    case VERBS_T_EAGER: body = sizeof(m->hdr) + m->hdr.len; break;
    case VERBS_T_RTS: body = sizeof(m->hdr) + sizeof(m->rts); break;
    case VERBS_T_MOVED: body = sizeof(m->rts); break;
    case VERBS_T_FIN:
    case VERBS_T_RCREDIT: body = sizeof(m->value); break;
    case VERBS_T_CREDIT: body = 0; break;
    case VERBS_T_SETUP: body = sizeof(m->setup); break;
    case VERBS_T_AUTH: body = sizeof(m->mac); break;
    default: return 0;
    }
    if (m->w.type == VERBS_T_EAGER && m->hdr.len > VERBS_EAGER_MAX) return 0;
    if (cap < n + body) return 0;
    memcpy(p, &m->w, sizeof(m->w));
    switch (m->w.type) {
    case VERBS_T_EAGER:
        memcpy(p + n, &m->hdr, sizeof(m->hdr));
        if (m->hdr.len) memcpy(p + n + sizeof(m->hdr), m->payload, m->hdr.len);
        break;
    case VERBS_T_RTS:
        memcpy(p + n, &m->hdr, sizeof(m->hdr));
        memcpy(p + n + sizeof(m->hdr), &m->rts, sizeof(m->rts));
        break;
    case VERBS_T_MOVED: memcpy(p + n, &m->rts, sizeof(m->rts)); break;
    case VERBS_T_FIN:
    case VERBS_T_RCREDIT: memcpy(p + n, &m->value, sizeof(m->value)); break;
    case VERBS_T_SETUP: memcpy(p + n, &m->setup, sizeof(m->setup)); break;
    case VERBS_T_AUTH: memcpy(p + n, m->mac, sizeof(m->mac)); break;
    default: break;
    }
    return n + body;
}
