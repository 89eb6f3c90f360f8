/*
 * What a transport module (liboobx-ucx.so, liboobx-verbs.so) and the core
 * give each other. A module links nothing of the core: it exports one
 * symbol, oobx_tp_module_init, which the core calls once at load with its
 * table of services; each instance gets the same table again in
 * oobx_tp_params_t.core, and every log context carries it (log->api), so
 * logging and error recording go to the core that loaded the module, for a
 * shared or a static application alike.
 *
 * Versioning: a module refuses a core whose api->version is not the one it
 * was built for or whose api->size is smaller than it needs; the core
 * refuses ops tables of another OOBX_TP_VERSION.
 */
#ifndef OOBX_TP_MODULE_H
#define OOBX_TP_MODULE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "oobx.h"

#include "log.h"
#include "settings.h"
#include "topo.h"
#include "transport.h"

/* 2: topo_request_t gained module_dir (the hwloc module's directory) */
#define OOBX_CORE_API_VERSION 2

typedef struct oobx_core_api {
    uint32_t version; /* OOBX_CORE_API_VERSION */
    uint32_t size;    /* sizeof(oobx_core_api_t) of the core: grows only at the end */
    /* logging and errors (log.h) */
    void (*log)(const oobx_log_t *log, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
    int (*fail)(const oobx_log_t *log, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
    void (*set_last_error)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
    const char *(*last_error)(void);
    const char *(*strerror)(int status);
    /* settings a transport owns: defaults, then the environment (settings.h) */
    int (*settings_parse)(const oobx_setting_desc_t *table, void *base, const oobx_log_t *log);
    /* topology and interfaces (topo.h) */
    int (*topo_pick_device)(const topo_request_t *req, const char *const *names, int nnames, char *why,
                            size_t whylen);
    int (*topo_pick_if)(const topo_request_t *req, topo_if_t *out, char *why, size_t whylen);
    int (*topo_if_list)(topo_if_t **out, int *n);
    int (*topo_ifname_match)(const char *spec, const char *ifname);
    void (*topo_if_format)(const topo_if_t *ifc, char *buf, size_t len);
    void (*appendf)(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
} oobx_core_api_t;

/* The core's table (tp_table.c). */
extern const oobx_core_api_t oobx__core_api;

/* The one symbol a module exports. Checks api, and returns 0 with *ops (a
 * complete table of OOBX_TP_VERSION), or an error with the reason in why. */
typedef int (*oobx_tp_module_init_fn)(const oobx_core_api_t *api, const oobx_tp_ops_t **ops, char *why,
                                      size_t whylen);
#define OOBX_TP_MODULE_INIT "oobx_tp_module_init"

/* A module's check of the core it is loaded into: 0, or OOBX_ERR_UNAVAILABLE
 * with why. */
static inline int oobx__module_accepts(const oobx_core_api_t *api, const char *name, char *why, size_t whylen)
{
    if (api && api->version == OOBX_CORE_API_VERSION && api->size >= sizeof(oobx_core_api_t)) return 0;
    snprintf(why, whylen, "%s: core interface version %u (%u bytes), this module needs %d (%zu bytes)", name,
             api ? api->version : 0, api ? api->size : 0, OOBX_CORE_API_VERSION, sizeof(oobx_core_api_t));
    return OOBX_ERR_UNAVAILABLE;
}

#ifdef OOBX_MODULE
/* Inside a module the core's logging calls are reached through the log
 * context: the same spelling as in the core. log is never NULL here. */
#undef OOBX_LOG
#define OOBX_LOG(lg, lvl, ...)                                                       \
    do {                                                                             \
        if ((lg) && (lg)->level >= (lvl)) (lg)->api->log((lg), (lvl), __VA_ARGS__); \
    } while (0)
#define oobx__fail(lg, ...) ((lg)->api->fail((lg), __VA_ARGS__))
#define oobx__module_export __attribute__((visibility("default")))
#endif

#endif
