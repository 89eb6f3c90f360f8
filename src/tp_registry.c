/* Finding transports: the socket transport is built in; the others are
 * modules next to the library, loaded on first use. */
#include <dlfcn.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>

#include "oobx.h"
#include "transport.h"
#include "util.h"

int oobx__tp_ring_none(oobx_tp_t *tp, int prev, int next)
{
    (void)tp;
    (void)prev;
    (void)next;
    return 0;
}

/* The directory liboobx.so was loaded from, or "" when linked statically. */
static void library_dir(char *out, size_t len)
{
    Dl_info info;
    out[0] = '\0';
    if (dladdr((void *)library_dir, &info) && info.dli_fname) {
        char tmp[4096];
        snprintf(tmp, sizeof(tmp), "%s", info.dli_fname);
        snprintf(out, len, "%s", dirname(tmp));
    }
}

int oobx__tp_lookup(const char *name, const oobx_tp_ops_t **ops, char *why, size_t whylen)
{
    if (!strcmp(name, "socket")) {
        *ops = &oobx__socket_ops;
        return 0;
    }
    if (strcmp(name, "ucx") && strcmp(name, "verbs")) {
        snprintf(why, whylen, "no transport named \"%s\"", name);
        return OOBX_ERR_INVALID;
    }
    char dir[4096], path[4400], sym[64];
    library_dir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s%sliboobx-%s.so", dir, dir[0] ? "/" : "", name);
    snprintf(sym, sizeof(sym), "oobx_%s_ops", name);
    /* the same module stays loaded: dlopen counts references and returns the same handle */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, whylen, "module %s does not load: %s", path, dlerror());
        return OOBX_ERR_UNAVAILABLE;
    }
    const oobx_tp_ops_t *o = dlsym(h, sym);
    if (!o) {
        snprintf(why, whylen, "module %s has no %s", path, sym);
        dlclose(h);
        return OOBX_ERR_UNAVAILABLE;
    }
    if (o->version != OOBX_TP_VERSION) {
        snprintf(why, whylen, "module %s has interface version %d, the library %d", path, o->version, OOBX_TP_VERSION);
        dlclose(h);
        return OOBX_ERR_UNAVAILABLE;
    }
    *ops = o;
    return 0;
}

static void probe_failed(void *core, int peer, int status, const char *what)
{
    (void)core;
    (void)peer;
    (void)status;
    (void)what;
}

static void *probe_begin(void *core, const oobx_msg_hdr_t *hdr, void **cookie)
{
    (void)core;
    (void)hdr;
    *cookie = NULL;
    return NULL;
}

static void probe_end(void *core, void *cookie)
{
    (void)core;
    (void)cookie;
}

int oobx__tp_probe(const char *name, const oobx_settings_t *s, char *why, size_t whylen)
{
    const oobx_tp_ops_t *ops;
    int rc = oobx__tp_lookup(name, &ops, why, whylen);
    if (rc != 0) return rc;
    oobx_log_t log;
    oobx_settings_t quiet = *s;
    quiet.log_level = OOBX_LOG_NONE;
    oobx__log_open(&log, &quiet, "probe");
    oobx_tp_params_t p = {.rank = 0, .nranks = 1, .magic = oobx__random64(), .settings = &quiet, .log = &log,
                          .sink = {.core = NULL, .msg_begin = probe_begin, .msg_end = probe_end,
                                   .peer_failed = probe_failed},
                          .wake_fd = -1};
    oobx_tp_t *tp = NULL;
    rc = ops->create(&p, &tp);
    if (rc != 0) snprintf(why, whylen, "%s", oobx_last_error());
    else ops->destroy(tp);
    oobx__log_close(&log);
    return rc;
}
