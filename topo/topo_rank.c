/* Device ranking for the transports: which candidate is closest to the rank,
 * and the RDMA device closest to its target. The ranking itself is hwloc's,
 * in a module of its own (liboobx-topo.so, topo/topo_hwloc.c) that is loaded
 * only when a choice needs it; without the module every choice keeps the
 * order it was given and says why. */
#include "topo.h"
#include "tp_table.h"
#include "util.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oobx.h"

/* Where req's hwloc module is: its module directory's, the library's own when unset. */
static void topo_module_path(const topo_request_t *req, char *path, size_t len)
{
    const char *dir = req && req->module_dir && req->module_dir[0] ? req->module_dir : oobx__module_dir_builtin;
    snprintf(path, len, "%s/%s", dir, OOBX_TOPO_MODULE);
}

/* The hwloc module, or NULL with why; path (len bytes) gets the file it
 * was looked for in. A module that passes the checks is made RTLD_NODELETE:
 * once a process has ranked a device, hwloc stays mapped and the next
 * choice pays no load; one that fails them is unloaded again. */
static const oobx_topo_module_t *topo_module(const topo_request_t *req, char *path, size_t len, char *why,
                                             size_t whylen)
{
    topo_module_path(req, path, len);
    void *h = NULL;
    oobx_topo_module_init_fn init;
    int o = oobx__module_open(path, OOBX_TOPO_MODULE_INIT, "hwloc module", &h, (void **)&init, why, whylen);
    if (o == OOBX_MODULE_NO_LOAD && access(path, F_OK) != 0)
        oobx__topo_why(why, whylen, "no hwloc module: %s is not there (hwloc support not built or not installed)",
                       path);
    if (o != OOBX_MODULE_OPENED) return NULL;
    const oobx_topo_module_t *m = init();
    if (!m || m->version != OOBX_TOPO_MODULE_VERSION || m->req_size != sizeof(topo_request_t) ||
        m->dev_size != sizeof(topo_dev_t) || !m->rank_devices)
        oobx__topo_why(why, whylen, "hwloc module %s is of another build (interface %d, the library's %d)", path,
                       m ? m->version : 0, OOBX_TOPO_MODULE_VERSION);
    else {
        /* pinned: this handle's reference can go, the module stays */
        void *pin = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD | RTLD_NODELETE);
        if (pin) {
            dlclose(pin);
            dlclose(h);
        }
        return m; /* without the pin, h stays open: the module stays all the same */
    }
    dlclose(h);
    return NULL;
}

int oobx__topo_hwloc_loads(const topo_request_t *req, char *why, size_t whylen)
{
    char path[1024];
    if (!topo_module(req, path, sizeof(path), why, whylen)) return 0;
    oobx__topo_why(why, whylen, "%s", path);
    return 1;
}

int oobx__topo_rank_devices(const topo_request_t *req, int kind, topo_dev_t **out, int *n, char *why, size_t whylen)
{
    if (!out || !n || kind < 0 || kind > (TOPO_DEV_NET | TOPO_DEV_RDMA)) {
        oobx__topo_why(why, whylen, "device ranking: bad arguments (kind %d)", kind);
        return OOBX_ERR_INVALID;
    }
    /* a malformed target is the caller's error, module or not */
    unsigned d, b, v, f;
    if (req && req->pci_target && req->pci_target[0] && oobx__topo_pci_parse(req->pci_target, &d, &b, &v, &f) != 0) {
        oobx__topo_why(why, whylen, "OOBX_TOPO_PCI=%s is not a PCI bus id (want 0000:3b:00.0)", req->pci_target);
        return OOBX_ERR_INVALID;
    }
    char path[1024];
    const oobx_topo_module_t *m = topo_module(req, path, sizeof(path), why, whylen);
    if (!m) return OOBX_ERR_UNAVAILABLE;
    *out = NULL;
    *n = 0;
    return m->rank_devices(req, kind, out, n, why, whylen);
}

int oobx__topo_rank_names(const topo_request_t *req, const char *const *names, int n, int *closeness, char *why,
                          size_t whylen)
{
    if (!names || !closeness || n < 0) {
        oobx__topo_why(why, whylen, "device ranking: bad arguments");
        return OOBX_ERR_INVALID;
    }
    topo_dev_t *devs = NULL;
    int count = 0;
    int rc = oobx__topo_rank_devices(req, 0, &devs, &count, why, whylen);
    if (rc != OOBX_SUCCESS) return rc;
    for (int i = 0; i < n; i++) {
        closeness[i] = TOPO_CLOSE_UNKNOWN;
        if (!names[i]) continue;
        size_t base = strcspn(names[i], ":");
        int found = -1;
        for (int k = 0; k < count && found < 0; k++)
            if (strcmp(devs[k].name, names[i]) == 0) found = k;
        for (int k = 0; k < count && found < 0; k++)
            if (strlen(devs[k].name) == base && strncmp(devs[k].name, names[i], base) == 0) found = k;
        if (found >= 0) closeness[i] = devs[found].closeness;
    }
    free(devs);
    return OOBX_SUCCESS;
}

int oobx__topo_pick_device(const topo_request_t *req, const char *const *names, int nnames, char *why, size_t whylen)
{
    char scratch[8];
    if (!why || whylen == 0) {
        why = scratch;
        whylen = sizeof(scratch);
    }
    why[0] = '\0';
    if (!names || nnames <= 0) {
        oobx__topo_why(why, whylen, "device choice: no candidate device");
        return OOBX_ERR_INVALID;
    }
    for (int i = 0; i < nnames; i++)
        if (!names[i]) {
            oobx__topo_why(why, whylen, "device choice: candidate %d has no name", i);
            return OOBX_ERR_INVALID;
        }
    const char *want = req && req->net_device && req->net_device[0] ? req->net_device : NULL;
    if (want) {
        /* exact; then "mlx5_0" for "mlx5_0:1"; then "mlx5_0:1" for a candidate listed without port */
        size_t want_base = strcspn(want, ":");
        for (int pass = 0; pass < 3; pass++)
            for (int i = 0; i < nnames; i++) {
                size_t base = strcspn(names[i], ":");
                int hit = pass == 0   ? strcmp(names[i], want) == 0
                          : pass == 1 ? (!want[want_base] && base == want_base && strncmp(names[i], want, base) == 0)
                                      : (!names[i][base] && base == want_base && strncmp(names[i], want, base) == 0);
                if (hit) {
                    oobx__topo_why(why, whylen, "%s: named by OOBX_NET_DEVICE=%s", names[i], want);
                    return i;
                }
            }
        oobx__topo_why(why, whylen, "OOBX_NET_DEVICE=%s names none of the %d candidates:", want, nnames);
        for (int i = 0; i < nnames; i++) oobx__appendf(why, whylen, "%s %s", i ? "," : "", names[i]);
        return OOBX_ERR_UNAVAILABLE;
    }
    int *close = calloc((size_t)nnames, sizeof(*close));
    if (!close) {
        oobx__topo_why(why, whylen, "device choice: out of memory");
        return OOBX_ERR_NOMEM;
    }
    char rwhy[320] = "";
    int rc = oobx__topo_rank_names(req, names, nnames, close, rwhy, sizeof(rwhy));
    if (rc == OOBX_ERR_INVALID) {
        oobx__topo_why(why, whylen, "%s", rwhy);
        free(close);
        return rc;
    }
    if (rc != OOBX_SUCCESS) {
        oobx__topo_why(why, whylen, "%s: first candidate; %s, so the transport's order is kept", names[0], rwhy);
        free(close);
        return 0;
    }
    int best = 0;
    for (int i = 1; i < nnames; i++)
        if (close[i] < close[best]) best = i;
    if (close[best] == TOPO_CLOSE_UNKNOWN)
        oobx__topo_why(why, whylen,
                       "%s: first candidate; hwloc locates none of the %d, so the transport's order is kept",
                       names[best], nnames);
    else if (nnames == 1)
        oobx__topo_why(why, whylen, "%s: the only candidate (%s; %s)", names[best],
                       oobx__topo_closeness_name(close[best]), rwhy);
    else {
        int ties = 0;
        for (int i = 0; i < nnames; i++) ties += close[i] == close[best];
        if (ties > 1)
            oobx__topo_why(why, whylen, "%s: first of the candidates closest (%s), %d of %d; %s", names[best],
                           oobx__topo_closeness_name(close[best]), ties, nnames, rwhy);
        else
            oobx__topo_why(why, whylen, "%s: closest (%s) of %d candidates; %s", names[best],
                           oobx__topo_closeness_name(close[best]), nnames, rwhy);
    }
    free(close);
    return best;
}

int oobx__topo_closest_rdma(const topo_request_t *req, char *out, size_t outlen, char *why, size_t whylen)
{
    if (!out || outlen == 0) {
        oobx__topo_why(why, whylen, "device choice: no room for the device name");
        return OOBX_ERR_INVALID;
    }
    topo_dev_t *devs = NULL;
    int n = 0;
    char rwhy[320] = "";
    int rc = oobx__topo_rank_devices(req, TOPO_DEV_RDMA, &devs, &n, rwhy, sizeof(rwhy));
    if (rc != OOBX_SUCCESS) {
        oobx__topo_why(why, whylen, "%s", rwhy);
        return rc;
    }
    if (n < 2 || devs[0].closeness == devs[n - 1].closeness) {
        if (n == 0)
            oobx__topo_why(why, whylen, "hwloc sees no RDMA device; %s", rwhy);
        else if (n == 1)
            oobx__topo_why(why, whylen, "hwloc sees one RDMA device (%s); %s", devs[0].name, rwhy);
        else
            oobx__topo_why(why, whylen, "the %d RDMA devices are equally close (%s); %s", n,
                           oobx__topo_closeness_name(devs[0].closeness), rwhy);
        free(devs);
        return OOBX_ERR_UNAVAILABLE;
    }
    int ties = 0;
    for (int i = 0; i < n; i++) ties += devs[i].closeness == devs[0].closeness;
    snprintf(out, outlen, "%s", devs[0].name);
    if (ties > 1)
        oobx__topo_why(why, whylen, "%s: first of the RDMA devices closest (%s), %d of %d; %s", devs[0].name,
                       oobx__topo_closeness_name(devs[0].closeness), ties, n, rwhy);
    else
        oobx__topo_why(why, whylen, "%s: closest (%s) of %d RDMA devices; %s", devs[0].name,
                       oobx__topo_closeness_name(devs[0].closeness), n, rwhy);
    free(devs);
    return OOBX_SUCCESS;
}

