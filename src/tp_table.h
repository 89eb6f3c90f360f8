/*
 * The one table of transports: {name, wire id, auto order, built-in ops or
 * module file}. Settings, init, the root, the wire parsers and oobx-info all
 * read it; no other place names a transport.
 */
#ifndef OOBX_TP_TABLE_H
#define OOBX_TP_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "settings.h"
#include "transport.h"

typedef struct oobx__tp_entry {
    const char *name;            /* "socket", "ucx", "verbs": OOBX_TRANSPORT and oobx_comm_transport() */
    uint32_t id;                 /* on the wire (root reports): 1.. */
    int auto_order;              /* place in OOBX_TRANSPORT=auto, 1 first; 0: never by auto */
    const oobx_tp_ops_t *builtin; /* linked into the core, or NULL */
    const char *module;          /* file in the module directory, or NULL */
} oobx__tp_entry_t;

/* Every transport, in auto order; *n gets the count. */
const oobx__tp_entry_t *oobx__tp_table(int *n);
const oobx__tp_entry_t *oobx__tp_find(const char *name); /* NULL: no such transport */
const oobx__tp_entry_t *oobx__tp_by_id(uint32_t id);      /* NULL: no such id */
/* "socket, ucx, verbs" */
void oobx__tp_names(char *buf, size_t len);
/* The transports OOBX_TRANSPORT=auto tries, in the order it tries them
 * (auto_order 1 first; those with 0 left out): auto takes the first that
 * loads and creates an instance. Writes at most max; returns how many. */
int oobx__tp_auto_order(const oobx__tp_entry_t **order, int max);

/* 1 when OOBX_TRANSPORT=auto takes the socket transport first for a job of
 * nranks: the launcher puts the whole job on this host (local_size ==
 * nranks). Within one host the large collectives read peers' memory
 * directly over any transport, so what UCX adds there is only the latency
 * of small messages (a few µs each, with a core per rank), while its
 * set-up (its libraries, context, worker and endpoints) makes every init
 * several ms slower than sockets: more than thousands of small calls give
 * back (docs/perf/auto/). The same answer on every rank of the job: one
 * host, one launcher. */
int oobx__tp_auto_socket_first(int nranks, int local_size);

/* The RDMA devices (InfiniBand, RoCE, iWARP, soft RoCE) under dir, a sysfs
 * class directory (/sys/class/infiniband): how many have a port whose state
 * is ACTIVE (4) or ACTIVE_DEFER (5); names gets their names, comma-separated
 * (may be NULL). 0 when dir is absent or unreadable. */
int oobx__tp_rdma_active(const char *dir, char *names, size_t len);

/* OOBX_TRANSPORT=auto's rules before its order, for a job of nranks of which
 * the launcher puts local_size on this host (-1: unknown): 1 when it takes
 * the socket transport first, with why (a phrase) filled; 0 when it keeps
 * the order (UCX first). Socket first when the whole job is on this host
 * (oobx__tp_auto_socket_first), and when this host has no active RDMA
 * device under rdma_dir: between hosts UCX would then run over TCP, where
 * its set-up makes init slower and oobx's own sockets are as fast or faster
 * for p2p and for most collectives (docs/perf/auto/). The ranks of one job
 * agree when its hosts are alike; hosts that differ (RDMA on some only)
 * choose differently and init fails naming both transports. */
int oobx__tp_auto_socket_rule(int nranks, int local_size, const char *rdma_dir, char *why, size_t len);

/* The module directory in effect for s: OOBX_MODULE_DIR, else the one fixed
 * when the library was built (the build tree) or installed ($(LIBDIR)/oobx). */
const char *oobx__tp_module_dir(const oobx_settings_t *s);

/* Every module file (transport, PMIx, hwloc) opens the same way: dlopen of
 * path (RTLD_NOW | RTLD_LOCAL), then its entry. OOBX_MODULE_OPENED and
 * *handle, *entry_fn; OOBX_MODULE_NO_LOAD with why "<what> <path> does not
 * load: <the loader's reason>"; OOBX_MODULE_NO_ENTRY with why "<what> <path>
 * has no <entry>" and the file closed again. */
enum { OOBX_MODULE_OPENED = 0, OOBX_MODULE_NO_LOAD = 1, OOBX_MODULE_NO_ENTRY = 2 };
int oobx__module_open(const char *path, const char *entry, const char *what, void **handle, void **entry_fn,
                      char *why, size_t whylen);

/* Finds a transport's ops, loading its module from the module directory when
 * needed; the table is checked (version, every op set). Returns 0 and *ops,
 * OOBX_ERR_INVALID for an unknown name, or OOBX_ERR_UNAVAILABLE with why
 * naming the file and the reason. */
int oobx__tp_lookup(const char *name, const oobx_settings_t *s, const oobx_tp_ops_t **ops, char *why,
                    size_t whylen);

/* Checks that transport name can run here: loads it and creates and destroys
 * a one-rank instance. 0, or an error with the reason in why. */
int oobx__tp_probe(const char *name, const oobx_settings_t *s, char *why, size_t whylen);

extern const oobx_tp_ops_t oobx__socket_ops; /* built in (socket.c) */

/* The module directory compiled into this copy of the library (moddir.c). */
extern const char oobx__module_dir_builtin[];

#endif
