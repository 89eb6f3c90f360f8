/*
 * Parsers and encoders of the UCX transport's wire messages (ucx_wire.h).
 * Pure functions: no UCX call, no transport instance, no allocation. Every
 * one of them is a fuzz target (tests/fuzz/fuzz_ucx_*.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "oobx.h"
#include "ringbuf.h"
#include "ucx_wire.h"
#include "tp_common.h"

/* ---- address card ---------------------------------------------------------------- */

size_t ucx_card_encode(uint32_t pid, const char *host, const unsigned char cma[OOBX_CMA_ID_BYTES], const void *addr,
                       size_t addr_len, void *out, size_t cap)
{
    size_t need = sizeof(ucx_blob_hdr_t) + addr_len;
    if (cap < need || addr_len > UINT32_MAX) return 0;
    ucx_blob_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.magic = UCX_BLOB_MAGIC;
    h.version = UCX_BLOB_VERSION;
    h.hdr_bytes = sizeof(h);
    h.pid = pid;
    h.addr_len = (uint32_t)addr_len;
    size_t hl = strnlen(host, sizeof(h.host) - 1);
    memcpy(h.host, host, hl);
    if (cma) memcpy(h.cma, cma, sizeof(h.cma));
    memcpy(out, &h, sizeof(h));
    if (addr_len) memcpy((char *)out + sizeof(h), addr, addr_len);
    return need;
}

int ucx_card_decode(const void *buf, size_t len, ucx_card_t *out, char *why, size_t whylen)
{
    ucx_blob_hdr_t h;
    int rc = oobx__card_open(buf, len, &h, sizeof(h), UCX_BLOB_MAGIC, UCX_BLOB_VERSION, "UCX", why, whylen);
    if (rc != 0) return rc;
    if (h.addr_len == 0 || h.addr_len != len - sizeof(h)) {
        snprintf(why, whylen, "%" PRIu32 " worker address bytes in a %zu-byte card", h.addr_len, len);
        return OOBX_ERR_PROTOCOL;
    }
    out->hdr = h;
    size_t hl = strnlen(h.host, sizeof(h.host) - 1);
    memcpy(out->host, h.host, hl);
    out->host[hl] = '\0';
    out->addr = (const char *)buf + sizeof(h);
    out->addr_len = h.addr_len;
    return 0;
}

/* ---- messages ------------------------------------------------------------------------ */

size_t ucx_type_max(int type)
{
    switch (type) {
    case UCX_T_EAGER: return sizeof(oobx_msg_hdr_t) + UCX_EAGER_MAX;
    case UCX_T_HDR: return sizeof(oobx_msg_hdr_t);
    case UCX_T_DOORBELL: return sizeof(ucx_doorbell_t);
    case UCX_T_CREDIT: return sizeof(uint64_t);
    case UCX_T_SETUP: return UCX_CTRL_MAX;
    case UCX_T_PULL: return sizeof(ucx_pull_t);
    case UCX_T_PULL_ACK: return sizeof(ucx_pull_ack_t);
    default: return 0;
    }
}

size_t ucx_msg_max(void)
{
    size_t m = 0;
    for (int t = 0; t <= (int)UCX_TAG_TYPE_MASK; t++)
        if (ucx_type_max(t) > m) m = ucx_type_max(t);
    return m;
}

int ucx_tag_check(uint64_t tag, size_t len, int self, int nranks, ucx_tag_info_t *out, char *why, size_t whylen)
{
    ucx_tag_info_t v = {.type = ucx_tag_type(tag), .peer = ucx_tag_rank(tag), .seq = ucx_tag_seq(tag)};
    size_t max = ucx_type_max(v.type);
    if (tag & UCX_TAG_DATA) {
        snprintf(why, whylen, "a payload tag where a message was expected");
        return OOBX_ERR_PROTOCOL;
    }
    if (max == 0) {
        snprintf(why, whylen, "unknown message type %d", v.type);
        return OOBX_ERR_PROTOCOL;
    }
    if (v.peer >= nranks || v.peer == self) {
        snprintf(why, whylen, "sender rank %d (this is rank %d of %d)", v.peer, self, nranks);
        return OOBX_ERR_PROTOCOL;
    }
    if (len > max) {
        snprintf(why, whylen, "a message of type %d and %zu bytes, more than its %zu", v.type, len, max);
        return OOBX_ERR_PROTOCOL;
    }
    *out = v;
    return 0;
}

static int ucx_bad(char *why, size_t whylen, const char *what)
{
    snprintf(why, whylen, "%s", what);
    return OOBX_ERR_PROTOCOL;
}

int ucx_msg_decode(int type, const void *buf, size_t len, int src, ucx_msg_t *m, char *why, size_t whylen)
{
    ucx_msg_t v;
    memset(&v, 0, sizeof(v));
    v.type = type;
    if (len > ucx_type_max(type)) {
        if (ucx_type_max(type) == 0) return ucx_bad(why, whylen, "unknown message type");
        snprintf(why, whylen, "a message of type %d and %zu bytes, more than its %zu", type, len, ucx_type_max(type));
        return OOBX_ERR_PROTOCOL;
    }
    const unsigned char *p = buf;
    switch (type) {
    case UCX_T_EAGER:
    case UCX_T_HDR:
        if (len < sizeof(v.hdr)) return ucx_bad(why, whylen, "short message header");
        memcpy(&v.hdr, p, sizeof(v.hdr));
        if (v.hdr.src != src) return ucx_bad(why, whylen, "message header names another sender");
        if (type == UCX_T_EAGER ? v.hdr.len != len - sizeof(v.hdr)
                                : (len != sizeof(v.hdr) || v.hdr.len <= UCX_EAGER_MAX))
            return ucx_bad(why, whylen, "message length disagrees with its header");
        if (type == UCX_T_EAGER) v.payload = p + sizeof(v.hdr);
        break;
    case UCX_T_DOORBELL:
        if (len != sizeof(v.db)) {
            snprintf(why, whylen, "ring doorbell of %zu bytes, expected %zu", len, sizeof(v.db));
            return OOBX_ERR_PROTOCOL;
        }
        memcpy(&v.db, p, sizeof(v.db));
        if (v.db.count == 0 || v.db.count > RINGBUF_SLOTS_MAX)
            return ucx_bad(why, whylen, "ring doorbell for no chunk or more than the ring holds");
        break;
    case UCX_T_CREDIT:
        if (len != sizeof(v.credit)) {
            snprintf(why, whylen, "ring credit of %zu bytes, expected %zu", len, sizeof(v.credit));
            return OOBX_ERR_PROTOCOL;
        }
        memcpy(&v.credit, p, sizeof(v.credit));
        break;
    case UCX_T_SETUP:
        if (len < sizeof(v.setup)) {
            snprintf(why, whylen, "ring setup of %zu bytes, shorter than its %zu-byte header", len, sizeof(v.setup));
            return OOBX_ERR_PROTOCOL;
        }
        memcpy(&v.setup, p, sizeof(v.setup));
        if (v.setup.rkey_len != len - sizeof(v.setup)) return ucx_bad(why, whylen, "ring setup of the wrong size");
        /* ucp_ep_rkey_unpack takes no length: an empty key would be read past the message */
        if (v.setup.rkey_len == 0) return ucx_bad(why, whylen, "ring setup without a remote key");
        if (oobx__ringbuf_geom_check(v.setup.slots, v.setup.slot_bytes, why, whylen)) return OOBX_ERR_PROTOCOL;
        v.rkey = p + sizeof(v.setup);
        break;
    case UCX_T_PULL: {
        ucx_pull_t pl;
        if (len != sizeof(pl)) return ucx_bad(why, whylen, "pull message of the wrong size");
        memcpy(&pl, p, sizeof(pl));
        if (pl.hdr.src != src) return ucx_bad(why, whylen, "message header names another sender");
        if (pl.hdr.len <= UCX_EAGER_MAX) return ucx_bad(why, whylen, "pull message for a small payload");
        if (pl.ticket_nonce == 0) return ucx_bad(why, whylen, "pull message without a ticket");
        v.hdr = pl.hdr;
        v.pull_addr = pl.addr;
        v.pull_ticket = pl.ticket;
        v.pull_nonce = pl.ticket_nonce;
        break;
    }
    case UCX_T_PULL_ACK:
        if (len != sizeof(v.ack)) return ucx_bad(why, whylen, "pull answer of the wrong size");
        memcpy(&v.ack, p, sizeof(v.ack));
        if (v.ack.push > 1) return ucx_bad(why, whylen, "pull answer that is neither done nor push");
        break;
    default:
        return ucx_bad(why, whylen, "unknown message type");
    }
    *m = v;
    return 0;
}

size_t ucx_msg_encode(const ucx_msg_t *m, void *out, size_t cap)
{
    unsigned char *p = out;
    size_t n;
    switch (m->type) {
    case UCX_T_EAGER:
        if (m->hdr.len > UCX_EAGER_MAX) return 0;
        n = sizeof(m->hdr) + m->hdr.len;
        break;
    case UCX_T_HDR: n = sizeof(m->hdr); break;
    case UCX_T_DOORBELL: n = sizeof(m->db); break;
    case UCX_T_CREDIT: n = sizeof(m->credit); break;
    case UCX_T_SETUP: n = sizeof(m->setup) + m->setup.rkey_len; break;
    case UCX_T_PULL: n = sizeof(ucx_pull_t); break;
    case UCX_T_PULL_ACK: n = sizeof(m->ack); break;
    default: return 0;
    }
    if (cap < n) return 0;
    switch (m->type) {
    case UCX_T_EAGER:
        memcpy(p, &m->hdr, sizeof(m->hdr));
        if (m->hdr.len) memcpy(p + sizeof(m->hdr), m->payload, m->hdr.len);
        break;
    case UCX_T_HDR: memcpy(p, &m->hdr, sizeof(m->hdr)); break;
    case UCX_T_DOORBELL: memcpy(p, &m->db, sizeof(m->db)); break;
    case UCX_T_CREDIT: memcpy(p, &m->credit, sizeof(m->credit)); break;
    case UCX_T_SETUP:
        memcpy(p, &m->setup, sizeof(m->setup));
        if (m->setup.rkey_len) memcpy(p + sizeof(m->setup), m->rkey, m->setup.rkey_len);
        break;
    case UCX_T_PULL: {
        ucx_pull_t pl = {.hdr = m->hdr, .addr = m->pull_addr, .ticket = m->pull_ticket, .ticket_nonce = m->pull_nonce};
        memcpy(p, &pl, sizeof(pl));
        break;
    }
    case UCX_T_PULL_ACK: memcpy(p, &m->ack, sizeof(m->ack)); break;
    default: break;
    }
    return n;
}
