#include "wire.h"

#include <stdio.h>
#include <string.h>

#include "oobx.h"
#include "tp_table.h"

void oobx__put_u16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
void oobx__put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
void oobx__put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
uint16_t oobx__get_u16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
uint32_t oobx__get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
uint64_t oobx__get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int short_input(const char *what, size_t got, size_t want, char *why, size_t whylen)
{
    snprintf(why, whylen, "%s of %zu bytes is shorter than %zu", what, got, want);
    return OOBX_ERR_PROTOCOL;
}

void oobx__hello_encode(const oobx_hello_t *h, unsigned char out[OOBX_HELLO_BYTES])
{
    oobx__put_u32(out, h->proto_magic);
    oobx__put_u16(out + 4, h->version);
    oobx__put_u16(out + 6, h->type);
    oobx__put_u64(out + 8, h->comm_magic);
    oobx__put_u32(out + 16, (uint32_t)h->rank);
    oobx__put_u32(out + 20, (uint32_t)h->nranks);
    oobx__put_u64(out + 24, h->reserved);
}

int oobx__hello_decode(const unsigned char *in, size_t len, oobx_hello_t *h, char *why, size_t whylen)
{
    if (len < OOBX_HELLO_BYTES) return short_input("hello", len, OOBX_HELLO_BYTES, why, whylen);
    oobx_hello_t v;
    v.proto_magic = oobx__get_u32(in);
    v.version = oobx__get_u16(in + 4);
    v.type = oobx__get_u16(in + 6);
    v.comm_magic = oobx__get_u64(in + 8);
    v.rank = (int32_t)oobx__get_u32(in + 16);
    v.nranks = (int32_t)oobx__get_u32(in + 20);
    v.reserved = oobx__get_u64(in + 24);
    if (v.proto_magic != OOBX_WIRE_MAGIC) {
        snprintf(why, whylen, "not an oobx hello (protocol magic 0x%08x)", v.proto_magic);
        return OOBX_ERR_PROTOCOL;
    }
    if (v.version != OOBX_WIRE_VERSION) {
        snprintf(why, whylen, "oobx protocol version %u, this library speaks %u", v.version, OOBX_WIRE_VERSION);
        return OOBX_ERR_MISMATCH;
    }
    if (v.type < OOBX_HELLO_ROOT || v.type > OOBX_HELLO_ROOT_NODE_EXTRA) {
        snprintf(why, whylen, "unknown connection type %u", v.type);
        return OOBX_ERR_PROTOCOL;
    }
    if (v.nranks <= 0 || v.rank < 0 || v.rank > v.nranks) {
        snprintf(why, whylen, "rank %d of %d is out of range", v.rank, v.nranks);
        return OOBX_ERR_PROTOCOL;
    }
    *h = v;
    return OOBX_SUCCESS;
}

void oobx__report_encode(const oobx_report_t *r, unsigned char out[OOBX_REPORT_BYTES])
{
    oobx__put_u32(out, (uint32_t)r->rank);
    oobx__put_u32(out + 4, (uint32_t)r->nranks);
    oobx__put_u32(out + 8, (uint32_t)r->iroot);
    oobx__put_u32(out + 12, (uint32_t)r->nroots);
    oobx__put_u32(out + 16, r->tpid);
    oobx__put_u32(out + 20, r->blob_len);
    oobx__put_u32(out + 24, r->wait_ms);
}

int oobx__report_decode(const unsigned char *in, size_t len, oobx_report_t *r, char *why, size_t whylen)
{
    if (len < OOBX_REPORT_BYTES) return short_input("root report", len, OOBX_REPORT_BYTES, why, whylen);
    oobx_report_t v;
    v.rank = (int32_t)oobx__get_u32(in);
    v.nranks = (int32_t)oobx__get_u32(in + 4);
    v.iroot = (int32_t)oobx__get_u32(in + 8);
    v.nroots = (int32_t)oobx__get_u32(in + 12);
    v.tpid = oobx__get_u32(in + 16);
    v.blob_len = oobx__get_u32(in + 20);
    v.wait_ms = oobx__get_u32(in + 24);
    if (v.nranks <= 0 || v.rank < 0 || v.rank > v.nranks) {
        snprintf(why, whylen, "report of rank %d of %d: rank out of range", v.rank, v.nranks);
        return OOBX_ERR_PROTOCOL;
    }
    if (v.nroots <= 0 || v.nroots > v.nranks || v.iroot < 0 || v.iroot >= v.nroots) {
        snprintf(why, whylen, "report of rank %d: root %d of %d roots for %d ranks is out of range", v.rank,
                 v.iroot, v.nroots, v.nranks);
        return OOBX_ERR_PROTOCOL;
    }
    if (!oobx__tp_by_id(v.tpid)) {
        snprintf(why, whylen, "report of rank %d: unknown transport id %u", v.rank, v.tpid);
        return OOBX_ERR_PROTOCOL;
    }
    if (v.blob_len == 0 || v.blob_len > OOBX_ADDR_MAX) {
        snprintf(why, whylen, "report of rank %d: address of %u bytes (1..%d allowed)", v.rank, v.blob_len,
                 OOBX_ADDR_MAX);
        return OOBX_ERR_PROTOCOL;
    }
    *r = v;
    return OOBX_SUCCESS;
}

void oobx__reply_encode(const oobx_reply_t *r, unsigned char out[OOBX_REPLY_BYTES])
{
    oobx__put_u32(out, (uint32_t)r->status);
    oobx__put_u32(out + 4, r->len);
    oobx__put_u32(out + 8, (uint32_t)r->origin);
}

int oobx__reply_decode(const unsigned char *in, size_t len, oobx_reply_t *r, char *why, size_t whylen)
{
    if (len < OOBX_REPLY_BYTES) return short_input("root reply", len, OOBX_REPLY_BYTES, why, whylen);
    oobx_reply_t v;
    v.status = (int32_t)oobx__get_u32(in);
    v.len = oobx__get_u32(in + 4);
    v.origin = (int32_t)oobx__get_u32(in + 8);
    if (v.status > 0 || v.status < OOBX_ERR_INTERNAL) {
        snprintf(why, whylen, "root reply with unknown status %d", v.status);
        return OOBX_ERR_PROTOCOL;
    }
    if (v.status == 0 && v.len > OOBX_PLACE_MAX(OOBX_NRANKS_MAX)) {
        snprintf(why, whylen, "root reply of %u bytes (at most %zu)", v.len, OOBX_PLACE_MAX(OOBX_NRANKS_MAX));
        return OOBX_ERR_PROTOCOL;
    }
    if (v.status < 0 && v.len > OOBX_REPLY_TEXT_MAX) {
        snprintf(why, whylen, "root error reply of %u bytes (at most %d)", v.len, OOBX_REPLY_TEXT_MAX);
        return OOBX_ERR_PROTOCOL;
    }
    if (v.origin < -1 || v.origin >= OOBX_NRANKS_MAX || (v.status == 0 && v.origin != -1)) {
        snprintf(why, whylen, "root reply of status %d naming rank %d as the origin", v.status, v.origin);
        return OOBX_ERR_PROTOCOL;
    }
    *r = v;
    return OOBX_SUCCESS;
}

void oobx__place_encode(const oobx_place_t *p, unsigned char out[OOBX_PLACE_BYTES])
{
    oobx__put_u64(out, p->epoch);
    oobx__put_u64(out + 8, p->host);
    oobx__put_u32(out + 16, (uint32_t)p->local_index);
    oobx__put_u32(out + 20, (uint32_t)p->local_size);
    oobx__put_u32(out + 24, (uint32_t)p->leader);
    oobx__put_u32(out + 28, (uint32_t)p->next_leader);
    oobx__put_u32(out + 32, (uint32_t)p->prev_leader);
    oobx__put_u32(out + 36, p->nmembers);
    oobx__put_u32(out + 40, p->next_len);
    oobx__put_u32(out + 44, 0);
}

int oobx__place_decode(const unsigned char *in, size_t len, int nranks, oobx_place_t *p, char *why, size_t whylen)
{
    if (len < OOBX_PLACE_BYTES) return short_input("placement", len, OOBX_PLACE_BYTES, why, whylen);
    oobx_place_t v;
    v.epoch = oobx__get_u64(in);
    v.host = oobx__get_u64(in + 8);
    v.local_index = (int32_t)oobx__get_u32(in + 16);
    v.local_size = (int32_t)oobx__get_u32(in + 20);
    v.leader = (int32_t)oobx__get_u32(in + 24);
    v.next_leader = (int32_t)oobx__get_u32(in + 28);
    v.prev_leader = (int32_t)oobx__get_u32(in + 32);
    v.nmembers = oobx__get_u32(in + 36);
    v.next_len = oobx__get_u32(in + 40);
    v.reserved = 0;
    if (v.local_size < 1 || v.local_size > nranks || v.local_index < 0 || v.local_index >= v.local_size ||
        v.leader < 0 || v.leader >= nranks) {
        snprintf(why, whylen, "placement: index %d of %d, leader %d, in a job of %d ranks", v.local_index,
                 v.local_size, v.leader, nranks);
        return OOBX_ERR_PROTOCOL;
    }
    int leader = v.local_index == 0;
    if (leader ? (v.nmembers != (uint32_t)v.local_size || v.next_leader < 0 || v.next_leader >= nranks ||
                  v.prev_leader < -1 || v.prev_leader >= nranks || v.next_len == 0 || v.next_len > OOBX_ADDR_MAX)
               : (v.nmembers != 0 || v.next_len != 0)) {
        snprintf(why, whylen, "placement of %s: %u members, next leader %d (%u bytes), previous %d",
                 leader ? "a leader" : "a member", v.nmembers, v.next_leader, v.next_len, v.prev_leader);
        return OOBX_ERR_PROTOCOL;
    }
    if (len != OOBX_PLACE_BYTES + 4 * (size_t)v.nmembers + v.next_len) {
        snprintf(why, whylen, "placement of %zu bytes for %u members and a %u-byte card", len, v.nmembers, v.next_len);
        return OOBX_ERR_PROTOCOL;
    }
    for (uint32_t k = 0; k < v.nmembers; k++) {
        uint32_t m = oobx__get_u32(in + OOBX_PLACE_BYTES + 4 * k);
        if (m >= (uint32_t)nranks || (k > 0 && m <= oobx__get_u32(in + OOBX_PLACE_BYTES + 4 * (k - 1))) ||
            (k == 0 && (int32_t)m != v.leader)) {
            snprintf(why, whylen, "placement: member %u is rank %u (members go up from the leader %d)", k, m, v.leader);
            return OOBX_ERR_PROTOCOL;
        }
    }
    *p = v;
    return OOBX_SUCCESS;
}

void oobx__msghdr_encode(const oobx_msg_hdr_t *h, unsigned char out[OOBX_MSGHDR_BYTES])
{
    oobx__put_u64(out, h->ctx);
    oobx__put_u64(out + 8, h->tag);
    oobx__put_u64(out + 16, h->len);
    oobx__put_u32(out + 24, (uint32_t)h->src);
    oobx__put_u16(out + 28, (uint16_t)h->kind);
    oobx__put_u16(out + 30, OOBX_MSGHDR_CHECK);
}

int oobx__msghdr_decode(const unsigned char *in, size_t len, oobx_msg_hdr_t *h, char *why, size_t whylen)
{
    if (len < OOBX_MSGHDR_BYTES) return short_input("message header", len, OOBX_MSGHDR_BYTES, why, whylen);
    oobx_msg_hdr_t v;
    v.ctx = oobx__get_u64(in);
    v.tag = oobx__get_u64(in + 8);
    v.len = oobx__get_u64(in + 16);
    v.src = (int32_t)oobx__get_u32(in + 24);
    v.kind = oobx__get_u16(in + 28);
    if (oobx__get_u16(in + 30) != OOBX_MSGHDR_CHECK) {
        snprintf(why, whylen, "message header check 0x%04x is not 0x%04x: stream out of step",
                 oobx__get_u16(in + 30), OOBX_MSGHDR_CHECK);
        return OOBX_ERR_PROTOCOL;
    }
    uint32_t base = v.kind & ~(uint32_t)(OOBX_FRAME_RTS | OOBX_FRAME_CMA);
    if ((v.kind & OOBX_FRAME_CMA) && !(v.kind & OOBX_FRAME_RTS)) {
        snprintf(why, whylen, "pull descriptor without a rendezvous (kind 0x%x)", v.kind);
        return OOBX_ERR_PROTOCOL;
    }
    if (v.kind == OOBX_FRAME_CTS_GO || v.kind == OOBX_FRAME_CTS_SKIP || v.kind == OOBX_FRAME_CTS_DONE) {
        if (v.len != 0) {
            snprintf(why, whylen, "clear-to-send frame with %llu payload bytes", (unsigned long long)v.len);
            return OOBX_ERR_PROTOCOL;
        }
    } else if (v.kind != OOBX_FRAME_DATA && (base < OOBX_MSG_P2P || base > OOBX_MSG_CTRL)) {
        snprintf(why, whylen, "message of unknown kind %u", v.kind);
        return OOBX_ERR_PROTOCOL;
    }
    if (v.len > OOBX_MSG_MAX_LEN) {
        snprintf(why, whylen, "message of %llu bytes is over the limit", (unsigned long long)v.len);
        return OOBX_ERR_PROTOCOL;
    }
    if (v.src < 0) {
        snprintf(why, whylen, "message from rank %d", v.src);
        return OOBX_ERR_PROTOCOL;
    }
    *h = v;
    return OOBX_SUCCESS;
}
