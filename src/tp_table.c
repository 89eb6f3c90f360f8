/* The transport table, the module loader and the services the core hands
 * to modules. */
#include <dirent.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "oobx.h"
#include "tp_module.h"
#include "tp_common.h"
#include "tp_table.h"
#include "util.h"

static const oobx__tp_entry_t tp_table[] = {
    {.name = "ucx", .id = 2, .auto_order = 1, .builtin = NULL, .module = "liboobx-ucx.so"},
    {.name = "verbs", .id = 3, .auto_order = 2, .builtin = NULL, .module = "liboobx-verbs.so"},
    {.name = "socket", .id = 1, .auto_order = 3, .builtin = &oobx__socket_ops, .module = NULL},
};

const oobx__tp_entry_t *oobx__tp_table(int *n)
{
    *n = (int)OOBX_ARRAY_SIZE(tp_table);
    return tp_table;
}

const oobx__tp_entry_t *oobx__tp_find(const char *name)
{
    for (size_t i = 0; name && i < OOBX_ARRAY_SIZE(tp_table); i++)
        if (!strcmp(tp_table[i].name, name)) return &tp_table[i];
    return NULL;
}

const oobx__tp_entry_t *oobx__tp_by_id(uint32_t id)
{
    for (size_t i = 0; i < OOBX_ARRAY_SIZE(tp_table); i++)
        if (tp_table[i].id == id) return &tp_table[i];
    return NULL;
}

int oobx__tp_auto_socket_first(int nranks, int local_size)
{
    return nranks >= 1 && local_size == nranks;
}

int oobx__tp_rdma_active(const char *dir, char *names, size_t len)
{
    if (names && len) names[0] = '\0';
    DIR *d = dir && dir[0] ? opendir(dir) : NULL;
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char ports[1024];
        snprintf(ports, sizeof(ports), "%s/%s/ports", dir, e->d_name);
        DIR *pd = opendir(ports);
        if (!pd) continue;
        int active = 0;
        struct dirent *p;
        while (!active && (p = readdir(pd))) {
            if (p->d_name[0] == '.') continue;
            char path[1400], state[64] = "";
            snprintf(path, sizeof(path), "%s/%s/state", ports, p->d_name);
            if (oobx__read_small_file(path, state, sizeof(state)) <= 0) continue;
            int code = atoi(state); /* "4: ACTIVE" */
            active = code == 4 || code == 5;
        }
        closedir(pd);
        if (!active) continue;
        if (names && len) {
            size_t o = strlen(names);
            if (o + 1 < len) snprintf(names + o, len - o, "%s%s", o ? ", " : "", e->d_name);
        }
        n++;
    }
    closedir(d);
    return n;
}

int oobx__tp_auto_socket_rule(int nranks, int local_size, const char *rdma_dir, char *why, size_t len)
{
    if (oobx__tp_auto_socket_first(nranks, local_size)) {
        snprintf(why, len, "the launcher puts all %d ranks on this host", nranks);
        return 1;
    }
    if (oobx__tp_rdma_active(rdma_dir, NULL, 0) == 0) {
        snprintf(why, len, "no RDMA device with an active port in %s: between hosts UCX would run over TCP", rdma_dir);
        return 1;
    }
    return 0;
}

int oobx__tp_auto_order(const oobx__tp_entry_t **order, int max)
{
    int n = 0;
    for (size_t i = 0; i < OOBX_ARRAY_SIZE(tp_table) && n < max; i++) {
        if (tp_table[i].auto_order <= 0) continue;
        int k = n++; /* insertion: equal places keep the table's order */
        while (k > 0 && order[k - 1]->auto_order > tp_table[i].auto_order) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = &tp_table[i];
    }
    return n;
}

void oobx__tp_names(char *buf, size_t len)
{
    buf[0] = '\0';
    size_t o = 0;
    for (size_t i = 0; i < OOBX_ARRAY_SIZE(tp_table) && o < len; i++) {
        int k = snprintf(buf + o, len - o, "%s%s", i ? ", " : "", tp_table[i].name);
        if (k < 0) break;
        o += (size_t)k;
    }
}

const char *oobx__tp_module_dir(const oobx_settings_t *s)
{
    return s && s->module_dir[0] ? s->module_dir : oobx__module_dir_builtin;
}

/* The names of the required ops that are NULL in o, or "" when complete. */
static void missing_ops(const oobx_tp_ops_t *o, char *out, size_t len)
{
    out[0] = '\0';
#define OOBX_CHECK_OP_(op) \
    if (!o->op) oobx__appendf(out, len, "%s%s", out[0] ? ", " : "", #op);
    OOBX_CHECK_OP_(create)
    OOBX_CHECK_OP_(address)
    OOBX_CHECK_OP_(set_peer)
    OOBX_CHECK_OP_(ring)
    OOBX_CHECK_OP_(send)
    OOBX_CHECK_OP_(release)
    OOBX_CHECK_OP_(progress)
    OOBX_CHECK_OP_(wait_prepare)
    OOBX_CHECK_OP_(sleep)
    OOBX_CHECK_OP_(describe)
    OOBX_CHECK_OP_(peer_name)
    OOBX_CHECK_OP_(destroy)
    OOBX_CHECK_OP_(settings)
#undef OOBX_CHECK_OP_
}

int oobx__module_open(const char *path, const char *entry, const char *what, void **handle, void **entry_fn,
                      char *why, size_t whylen)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *err = dlerror();
        snprintf(why, whylen, "%s %s does not load: %s", what, path, err ? err : "unknown error");
        return OOBX_MODULE_NO_LOAD;
    }
    void *fn = dlsym(h, entry);
    if (!fn) {
        snprintf(why, whylen, "%s %s has no %s", what, path, entry);
        dlclose(h);
        return OOBX_MODULE_NO_ENTRY;
    }
    *handle = h;
    *entry_fn = fn;
    return OOBX_MODULE_OPENED;
}

int oobx__tp_lookup(const char *name, const oobx_settings_t *s, const oobx_tp_ops_t **ops, char *why, size_t whylen)
{
    const oobx__tp_entry_t *e = oobx__tp_find(name);
    if (!e) {
        char names[128];
        oobx__tp_names(names, sizeof(names));
        snprintf(why, whylen, "no transport named \"%s\" (there are %s)", name, names);
        return OOBX_ERR_INVALID;
    }
    if (e->builtin) {
        *ops = e->builtin;
        return 0;
    }
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", oobx__tp_module_dir(s), e->module);
    /* the same module stays loaded: dlopen counts references and returns the same handle */
    void *h = NULL;
    oobx_tp_module_init_fn init;
    if (oobx__module_open(path, OOBX_TP_MODULE_INIT, "module", &h, (void **)&init, why, whylen) != OOBX_MODULE_OPENED)
        return OOBX_ERR_UNAVAILABLE;
    const oobx_tp_ops_t *o = NULL;
    char mwhy[400] = "";
    int rc = init(&oobx__core_api, &o, mwhy, sizeof(mwhy));
    if (rc != 0 || !o) {
        snprintf(why, whylen, "module %s refuses this library: %s", path, mwhy[0] ? mwhy : "no reason given");
        dlclose(h);
        return OOBX_ERR_UNAVAILABLE;
    }
    char missing[160];
    if (o->version != OOBX_TP_VERSION) {
        snprintf(why, whylen, "module %s has interface version %d, the library %d", path, o->version, OOBX_TP_VERSION);
    } else if (!o->name || strcmp(o->name, e->name)) {
        snprintf(why, whylen, "module %s is the \"%s\" transport, not \"%s\"", path, o->name ? o->name : "(null)",
                 e->name);
    } else {
        missing_ops(o, missing, sizeof(missing));
        if (!missing[0]) {
            *ops = o;
            return 0;
        }
        snprintf(why, whylen, "module %s leaves ops unset: %s", path, missing);
    }
    dlclose(h);
    return OOBX_ERR_UNAVAILABLE;
}

int oobx__tp_probe(const char *name, const oobx_settings_t *s, char *why, size_t whylen)
{
    const oobx_tp_ops_t *ops;
    int rc = oobx__tp_lookup(name, s, &ops, why, whylen);
    if (rc != 0) return rc;
    oobx_log_t log;
    oobx_settings_t quiet = *s;
    quiet.log_level = OOBX_LOG_NONE;
    oobx__log_open(&log, &quiet, "probe");
    oobx_tp_params_t p = {.rank = 0, .nranks = 1, .magic = oobx__random64(), .settings = &quiet, .log = &log,
                          .sink = oobx__tp_sink_drop(),
                          .wake_fd = -1, .core = &oobx__core_api};
    oobx_tp_t *tp = NULL;
    rc = ops->create(&p, &tp);
    if (rc != 0) snprintf(why, whylen, "%s", oobx_last_error());
    else ops->destroy(tp);
    oobx__log_close(&log);
    return rc;
}

/* ---- what modules get ---- */

const oobx_core_api_t oobx__core_api = {
    .version = OOBX_CORE_API_VERSION,
    .size = sizeof(oobx_core_api_t),
    .log = oobx__log,
    .fail = oobx__fail,
    .set_last_error = oobx__set_last_error,
    .last_error = oobx_last_error,
    .strerror = oobx_strerror,
    .settings_parse = oobx__settings_parse,
    .topo_pick_device = oobx__topo_pick_device,
    .topo_pick_if = oobx__topo_pick_if,
    .topo_if_list = oobx__topo_if_list,
    .topo_ifname_match = oobx__topo_ifname_match,
    .topo_if_format = oobx__topo_if_format,
    .appendf = oobx__appendf,
};
