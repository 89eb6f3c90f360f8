/*
 * The UCX transport's devices and addresses: the (transport, device) pairs
 * UCX offers here and the RDMA device picked by locality when the user chose
 * none (used at create), ucx_describe() (the describe op) for `oobx-info`, and the address
 * card (this worker's address, a peer's checked card).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include "topo.h"

#include "log.h"
#include "transport.h"
#include "util.h"
#include "ucx_int.h"
#include "ucx_wire.h"

/* ---- devices ------------------------------------------------------------------------- */

typedef struct ucx_dev {
    char tl[UCT_TL_NAME_MAX];
    char dev[UCT_DEVICE_NAME_MAX];
    int type; /* uct_device_type_t */
} ucx_dev_t;

/* Every (transport, device) pair UCX offers in this process, whatever
 * UCX_TLS says. Returns the count (at most max), or -1. */
static int ucx_list_devices(ucx_dev_t *out, int max)
{
    uct_component_h *comps = NULL;
    unsigned ncomps = 0;
    int n = 0;
    if (uct_query_components(&comps, &ncomps) != UCS_OK) return -1;
    for (unsigned c = 0; c < ncomps; c++) {
        uct_component_attr_t ca = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                                 UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
        if (uct_component_query(comps[c], &ca) != UCS_OK || ca.md_resource_count == 0) continue;
        uct_md_resource_desc_t *mds = calloc(ca.md_resource_count, sizeof(*mds));
        if (!mds) continue;
        ca.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        ca.md_resources = mds;
        if (uct_component_query(comps[c], &ca) == UCS_OK) {
            for (unsigned m = 0; m < ca.md_resource_count; m++) {
                uct_md_config_t *mdc = NULL;
                uct_md_h md = NULL;
                if (uct_md_config_read(comps[c], NULL, NULL, &mdc) != UCS_OK) continue;
                ucs_status_t st = uct_md_open(comps[c], mds[m].md_name, mdc, &md);
                uct_config_release(mdc);
                if (st != UCS_OK) continue;
                uct_tl_resource_desc_t *tls = NULL;
                unsigned ntls = 0;
                if (uct_md_query_tl_resources(md, &tls, &ntls) == UCS_OK) {
                    for (unsigned t = 0; t < ntls && n < max; t++) {
                        snprintf(out[n].tl, sizeof(out[n].tl), "%s", tls[t].tl_name);
                        snprintf(out[n].dev, sizeof(out[n].dev), "%s", tls[t].dev_name);
                        out[n].type = (int)tls[t].dev_type;
                        n++;
                    }
                    uct_release_tl_resource_list(tls);
                }
                uct_md_close(md);
            }
        }
        free(mds);
    }
    uct_release_component_list(comps);
    return n;
}

/* RDMA network devices (not tcp), each name once. */
static int ucx_rdma_devices(const ucx_dev_t *devs, int n, const char **names, int max)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (devs[i].type != UCT_DEVICE_TYPE_NET || !strcmp(devs[i].tl, "tcp")) continue;
        int seen = 0;
        for (int j = 0; j < k; j++) seen |= !strcmp(names[j], devs[i].dev);
        if (!seen && k < max) names[k++] = devs[i].dev;
    }
    return k;
}

/* With several RDMA devices and no choice made by the user, the one closest
 * to this rank (the core's topo_pick_device). Fills dev (or leaves it empty). */
void ucx_pick_device(const oobx_settings_t *set, const oobx_log_t *log, char *dev, size_t len)
{
    dev[0] = '\0';
    ucx_dev_t devs[128];
    int n = ucx_list_devices(devs, (int)OOBX_ARRAY_SIZE(devs));
    const char *names[64];
    int k = n > 0 ? ucx_rdma_devices(devs, n, names, (int)OOBX_ARRAY_SIZE(names)) : 0;
    if (k < 2) return;
    topo_request_t req = {.pci_target = set->topo_pci[0] ? set->topo_pci : NULL, .module_dir = set->module_dir};
    char why[256] = "";
    int i = log->api->topo_pick_device(&req, names, k, why, sizeof(why));
    if (i < 0 || i >= k) {
        OOBX_INFO(log, "ucx: %d RDMA devices, none picked (%s); UCX chooses", k, why);
        return;
    }
    snprintf(dev, len, "%s", names[i]);
    OOBX_INFO(log, "ucx: network device %s of %d RDMA devices: %s", dev, k, why);
}

/* For oobx-info: whether UCX can run here, its transports and devices, and
 * what this transport would use. Returns 0 when a UCX worker can be made. */
void ucx_describe(FILE *out, const oobx_settings_t *set, const oobx_core_api_t *core)
{
    ucx_settings_t own;
    oobx_log_t quiet = {.level = OOBX_LOG_NONE, .fp = NULL, .api = core};
    if (core->settings_parse(ucx_settings_table, &own, &quiet) != 0) snprintf(own.ring, sizeof(own.ring), "(invalid)");
    unsigned major = 0, minor = 0, release = 0;
    ucp_get_version(&major, &minor, &release);
    fprintf(out, "UCX %u.%u.%u (built against %d.%d)\n", major, minor, release, UCP_API_MAJOR, UCP_API_MINOR);
    ucx_dev_t devs[128];
    int n = ucx_list_devices(devs, (int)OOBX_ARRAY_SIZE(devs));
    if (n < 0) {
        fprintf(out, "  no UCX components\n");
        return;
    }
    fprintf(out, "  transports and devices UCX offers here:\n");
    for (int i = 0; i < n; i++)
        fprintf(out, "    %-10s %-16s %s\n", devs[i].tl, devs[i].dev,
                devs[i].type == UCT_DEVICE_TYPE_NET ? "network" :
                devs[i].type == UCT_DEVICE_TYPE_SHM ? "shared memory" :
                devs[i].type == UCT_DEVICE_TYPE_SELF ? "loopback in process" : "other");
    const char *tls = getenv("UCX_TLS"), *nd = getenv("UCX_NET_DEVICES");
    fprintf(out, "  UCX_TLS=%s UCX_NET_DEVICES=%s OOBX_NET_DEVICE=%s OOBX_UCX_RING=%s\n", tls ? tls : "(all)",
            nd ? nd : "(all)", set && set->net_device[0] ? set->net_device : "(unset)",
            own.ring);
    if (set && !set->net_device[0] && !nd) {
        char dev[64];
        ucx_pick_device(set, &quiet, dev, sizeof(dev));
        if (dev[0]) fprintf(out, "  device picked by locality: %s\n", dev);
    }
    ucp_config_t *cfg = NULL;
    ucp_context_h ctx = NULL;
    ucp_worker_h worker = NULL;
    int rc = OOBX_ERR_UNAVAILABLE;
    if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK) return;
    if (set && set->net_device[0]) ucp_config_modify(cfg, "NET_DEVICES", set->net_device);
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP};
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    ucs_status_t st = ucp_init(&params, cfg, &ctx);
    ucp_config_release(cfg);
    if (st == UCS_OK) st = ucp_worker_create(ctx, &wp, &worker);
    if (st == UCS_OK) {
        ucp_address_t *a = NULL;
        size_t alen = 0;
        if (ucp_worker_get_address(worker, &a, &alen) == UCS_OK) {
            fprintf(out, "  usable: yes (worker address %zu bytes, card %zu of at most %d)\n", alen,
                    alen + sizeof(ucx_blob_hdr_t), OOBX_ADDR_MAX);
            ucp_worker_release_address(worker, a);
            rc = 0;
        }
    } else {
        fprintf(out, "  usable: no (%s)\n", ucs_status_string(st));
    }
    if (worker) ucp_worker_destroy(worker);
    if (ctx) ucp_cleanup(ctx);
    (void)rc;
}

/* ---- address cards ------------------------------------------------------------------- */

int ucx_address(oobx_tp_t *base, void *blob, size_t *len)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    size_t need = sizeof(ucx_blob_hdr_t) + tp->my_addr_len;
    if (*len < need)
        return oobx__fail(tp->log, OOBX_ERR_INVALID, "ucx: address needs %zu bytes, %zu given", need, *len);
    unsigned char cma[OOBX_CMA_ID_BYTES];
    oobx__cma_encode(&tp->cma, cma);
    *len = ucx_card_encode((uint32_t)getpid(), tp->host, cma, tp->my_addr, tp->my_addr_len, blob, *len);
    return 0;
}

int ucx_set_peer(oobx_tp_t *base, int peer, const void *blob, size_t len)
{
    ucx_tp_t *tp = (ucx_tp_t *)base;
    ucx_card_t card;
    char why[200];
    if (peer < 0 || peer >= tp->nranks)
        return oobx__fail(tp->log, OOBX_ERR_INVALID, "ucx: address for rank %d of %d", peer, tp->nranks);
    int rc = ucx_card_decode(blob, len, &card, why, sizeof(why));
    if (rc) return oobx__fail(tp->log, rc, "ucx: address of rank %d: %s", peer, why);
    ucx_peer_t *p = &tp->peers[peer];
    void *copy = malloc(card.addr_len);
    if (!copy) return oobx__fail(tp->log, OOBX_ERR_NOMEM, "ucx: out of memory");
    memcpy(copy, card.addr, card.addr_len);
    free(p->addr);
    p->addr = copy;
    p->addr_len = card.addr_len;
    snprintf(p->host, sizeof(p->host), "%s", card.host);
    p->pid = card.hdr.pid;
    oobx__cma_decode(&tp->cma, card.hdr.cma, &p->cma);
    return 0;
}
