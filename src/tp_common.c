/* The pieces the module transports share (tp_common.h). */
#include "tp_common.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "oobx.h"
#include "tp_module.h"

int oobx__card_open(const void *buf, size_t len, void *hdr, size_t hdr_size, uint32_t magic, uint16_t version,
                    const char *name, char *why, size_t whylen)
{
    if (len < hdr_size || hdr_size < sizeof(oobx__card_head_t)) {
        snprintf(why, whylen, "%zu bytes, shorter than the %zu-byte header", len, hdr_size);
        return OOBX_ERR_PROTOCOL;
    }
    memcpy(hdr, buf, hdr_size);
    oobx__card_head_t h;
    memcpy(&h, hdr, sizeof(h));
    if (h.magic != magic) {
        snprintf(why, whylen, "not a %s address (magic 0x%08" PRIx32 "; do all ranks use the same transport?)", name,
                 h.magic);
        return OOBX_ERR_PROTOCOL;
    }
    if (h.version != version || h.hdr_bytes != hdr_size) {
        snprintf(why, whylen, "version %u with a %u-byte header, this is version %u with %zu", h.version, h.hdr_bytes,
                 version, hdr_size);
        return OOBX_ERR_MISMATCH;
    }
    return 0;
}

void oobx__peer_fail_vrecord(oobx__peer_fail_t *f, int *pending, int status, const char *fmt, va_list ap)
{
    if (f->failed) return;
    f->failed = 1;
    f->status = status;
    vsnprintf(f->why, sizeof(f->why), fmt, ap);
    *pending = 1;
}

void oobx__peer_fail_report(void *tp, int n, const oobx__peer_fail_ops_t *ops, const oobx_tp_sink_t *sink,
                            const oobx_log_t *log, int *pending)
{
    *pending = 0;
    for (int i = 0; i < n; i++) {
        oobx__peer_fail_t *f = ops->get(tp, i);
        if (!f->failed || f->reported) continue;
        f->reported = 1;
        /* through the log context: this file is linked into modules too */
        if (log && log->api && log->level >= OOBX_LOG_INFO) log->api->log(log, OOBX_LOG_INFO, "%s", f->why);
        ops->drop(tp, i);
        sink->peer_failed(sink->core, i, oobx__peer_fail_status(f), f->why);
    }
}

/* ---- a sink that takes nothing ---- */

static void *drop_msg_begin(void *core, const oobx_msg_hdr_t *hdr, void **cookie)
{
    (void)core;
    (void)hdr;
    *cookie = NULL;
    return NULL;
}

static void drop_msg_end(void *core, void *cookie)
{
    (void)core;
    (void)cookie;
}

static void drop_peer_failed(void *core, int peer, int status, const char *what)
{
    (void)core;
    (void)peer;
    (void)status;
    (void)what;
}

static int drop_need_peer(void *core, int peer)
{
    (void)core;
    (void)peer;
    return OOBX_ERR_REMOTE;
}

oobx_tp_sink_t oobx__tp_sink_drop(void)
{
    oobx_tp_sink_t s = {.core = NULL, .msg_begin = drop_msg_begin, .msg_end = drop_msg_end,
                        .peer_failed = drop_peer_failed, .need_peer = drop_need_peer, .peer_left = NULL};
    return s;
}
