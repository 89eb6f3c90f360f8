/*
 * The verbs transport: which device and which IP address this rank uses, and
 * verbs_describe() (the describe op) for `oobx-info -u`.
 *
 * The device is the one OOBX_NET_DEVICE names ("mlx5_0" or "mlx5_0:1"), else
 * the one the core's topo_pick_device() ranks closest to the rank (OOBX_TOPO_PCI, else
 * the calling thread's binding). rdma_cm binds to an IP address, and the
 * address decides the device: so the address is one of the chosen device's
 * own network interfaces (sysfs device/net, filtered by OOBX_SOCKET_IFNAME
 * and OOBX_SOCKET_FAMILY), or, when the device has none (an emulated device),
 * the interface the socket transport would pick.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "oobx.h"
#include "topo.h"
#include "util.h"
#include "verbs.h"

const char *verbs_reject_str(uint32_t code)
{
    switch (code) {
    case VERBS_REJ_MAGIC: return "wrong magic (another protocol or another communicator)";
    case VERBS_REJ_VERSION: return "protocol version mismatch";
    case VERBS_REJ_RANK: return "rank out of range";
    case VERBS_REJ_CROSSED: return "crossed connection (the lower rank's is kept)";
    case VERBS_REJ_DUPLICATE: return "a connection between the two ranks exists";
    case VERBS_REJ_FAILED: return "the connecting rank was declared failed";
    case VERBS_REJ_RESOURCES: return "no resources for another connection";
    default: return "unknown reason";
    }
}

void verbs_addr_format(const struct sockaddr *sa, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (!sa) {
        snprintf(buf, len, "address unknown");
        return;
    }
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
        snprintf(buf, len, "%s:%u", ip, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
        snprintf(buf, len, "[%s]:%u", ip, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, len, "family %d", sa->sa_family);
    }
}

/* Network interfaces of an RDMA device (sysfs), optionally of one port
 * (dev_port is 0-based). Returns the count written into names. */
static int verbs_dev_netdevs(const char *dev, int port, char names[][IF_NAMESIZE], int max)
{
    char path[512];
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/net", dev);
    DIR *d = opendir(path);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= IF_NAMESIZE) continue;
        if (port > 0) {
            char p2[768];
            snprintf(p2, sizeof(p2), "/sys/class/net/%s/dev_port", e->d_name);
            FILE *f = fopen(p2, "r");
            int dp = -1;
            if (f) {
                if (fscanf(f, "%d", &dp) != 1) dp = -1;
                fclose(f);
            }
            if (dp >= 0 && dp + 1 != port) continue;
        }
        snprintf(names[n++], IF_NAMESIZE, "%s", e->d_name);
    }
    closedir(d);
    return n;
}

/* The IP of the chosen device's own interfaces, if it has any that pass the filters. */
static int verbs_dev_ip(const oobx_core_api_t *core, const oobx_settings_t *s, const char *dev, int port, verbs_choice_t *out)
{
    char nd[16][IF_NAMESIZE];
    int nnd = verbs_dev_netdevs(dev, port, nd, 16);
    if (nnd == 0) return 0;
    topo_if_t *ifs = NULL;
    int nifs = 0;
    if (core->topo_if_list(&ifs, &nifs) != 0) return 0;
    int found = 0;
    for (int i = 0; i < nifs && !found; i++) {
        const topo_if_t *f = &ifs[i];
        int mine = 0;
        for (int k = 0; k < nnd; k++) mine |= strcmp(f->name, nd[k]) == 0;
        if (!mine || !core->topo_ifname_match(s->socket_ifname, f->name)) continue;
        if (s->socket_family != AF_UNSPEC && f->family != s->socket_family) continue;
        if (f->linklocal && !s->socket_linklocal) continue;
        memcpy(&out->addr, &f->addr, f->addrlen);
        out->addrlen = f->addrlen;
        char a[96];
        core->topo_if_format(f, a, sizeof(a));
        snprintf(out->why_ip, sizeof(out->why_ip), "%s %s: an interface of %s", f->name, a, dev);
        found = 1;
    }
    free(ifs);
    return found;
}

int verbs_choose(const oobx_core_api_t *core, const oobx_settings_t *s, const void *root_hint, unsigned root_hint_len, verbs_choice_t *out,
                 char *why, size_t whylen)
{
    memset(out, 0, sizeof(*out));
    int ndev = 0;
    struct ibv_device **list = ibv_get_device_list(&ndev);
    if (!list || ndev <= 0) {
        if (list) ibv_free_device_list(list);
        snprintf(why, whylen, "no RDMA device (ibv_get_device_list found none)");
        return OOBX_ERR_UNAVAILABLE;
    }
    const char **names = calloc((size_t)ndev, sizeof(*names));
    char (*copy)[VERBS_DEV_NAME_MAX] = calloc((size_t)ndev, sizeof(*copy));
    if (!names || !copy) {
        free(names);
        free(copy);
        ibv_free_device_list(list);
        snprintf(why, whylen, "out of memory");
        return OOBX_ERR_NOMEM;
    }
    for (int i = 0; i < ndev; i++) {
        const char *nm = ibv_get_device_name(list[i]);
        snprintf(copy[i], VERBS_DEV_NAME_MAX, "%s", nm ? nm : "?");
        names[i] = copy[i];
    }
    ibv_free_device_list(list);
    topo_request_t req = {
        .pci_target = s->topo_pci[0] ? s->topo_pci : NULL,
        .net_device = s->net_device[0] ? s->net_device : NULL,
        .module_dir = s->module_dir,
    };
    char pwhy[512] = "";
    int idx = core->topo_pick_device(&req, names, ndev, pwhy, sizeof(pwhy));
    if (idx < 0 || idx >= ndev) {
        int rc = idx < 0 ? idx : OOBX_ERR_INTERNAL;
        if (s->net_device[0]) {
            char all[512] = "";
            for (int i = 0; i < ndev; i++) core->appendf(all, sizeof(all), "%s%s", i ? ", " : "", names[i]);
            snprintf(why, whylen, "OOBX_NET_DEVICE=%s names no RDMA device here (found: %s)", s->net_device, all);
            rc = OOBX_ERR_UNAVAILABLE;
        } else {
            snprintf(why, whylen, "no RDMA device picked: %s", pwhy);
        }
        free(names);
        free(copy);
        return rc;
    }
    snprintf(out->dev, sizeof(out->dev), "%s", names[idx]);
    snprintf(out->why_dev, sizeof(out->why_dev), "%s (%d device%s found)", pwhy, ndev, ndev == 1 ? "" : "s");
    free(names);
    free(copy);
    const char *colon = s->net_device[0] ? strchr(s->net_device, ':') : NULL;
    if (colon) out->port = atoi(colon + 1);

    if (verbs_dev_ip(core, s, out->dev, out->port, out)) return 0;
    topo_request_t ireq = {
        .ifname_spec = s->socket_ifname,
        .family = s->socket_family,
        .allow_linklocal = s->socket_linklocal,
        .match = root_hint,
        .matchlen = root_hint_len,
        .pci_target = s->topo_pci[0] ? s->topo_pci : NULL,
        .module_dir = s->module_dir,
    };
    topo_if_t ifc;
    char iwhy[400] = "";
    int rc = core->topo_pick_if(&ireq, &ifc, iwhy, sizeof(iwhy));
    if (rc != 0) {
        snprintf(why, whylen, "device %s has no network interface of its own and no interface qualifies: %s",
                 out->dev, iwhy);
        return rc;
    }
    memcpy(&out->addr, &ifc.addr, ifc.addrlen);
    out->addrlen = ifc.addrlen;
    snprintf(out->why_ip, sizeof(out->why_ip), "%s (device %s has no network interface in sysfs; "
             "the socket transport's choice)", iwhy, out->dev);
    return 0;
}

static const char *verbs_port_state_str(int st)
{
    switch (st) {
    case IBV_PORT_DOWN: return "down";
    case IBV_PORT_INIT: return "init";
    case IBV_PORT_ARMED: return "armed";
    case IBV_PORT_ACTIVE: return "active";
    case IBV_PORT_ACTIVE_DEFER: return "active (defer)";
    default: return "unknown";
    }
}

static const char *verbs_link_layer_str(int ll)
{
    switch (ll) {
    case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET: return "Ethernet (RoCE)";
    default: return "unspecified";
    }
}

void verbs_describe(FILE *out, const oobx_settings_t *s, const oobx_core_api_t *core)
{
    int ndev = 0;
    struct ibv_device **list = ibv_get_device_list(&ndev);
    fprintf(out, "verbs (librdmacm + libibverbs)\n");
    if (!list || ndev <= 0) {
        if (list) ibv_free_device_list(list);
        fprintf(out, "  no RDMA device (ibv_get_device_list found none)\n  usable: no\n");
        return;
    }
    fprintf(out, "  devices:\n");
    for (int i = 0; i < ndev; i++) {
        const char *nm = ibv_get_device_name(list[i]);
        unsigned long long guid = (unsigned long long)be64toh(ibv_get_device_guid(list[i]));
        fprintf(out, "    %-12s guid %016llx", nm ? nm : "?", guid);
        struct ibv_context *ctx = ibv_open_device(list[i]);
        if (!ctx) {
            fprintf(out, "  (cannot open: %s)\n", strerror(errno));
            continue;
        }
        struct ibv_device_attr da;
        if (ibv_query_device(ctx, &da) == 0) {
            fprintf(out, "  %d port%s, max_qp %d, max_cqe %d, max_qp_rd_atom %d\n", da.phys_port_cnt,
                    da.phys_port_cnt == 1 ? "" : "s", da.max_qp, da.max_cqe, da.max_qp_rd_atom);
            for (int p = 1; p <= da.phys_port_cnt; p++) {
                struct ibv_port_attr pa;
                if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0) {
                    fprintf(out, "      port %d: cannot query\n", p);
                    continue;
                }
                fprintf(out, "      port %d: %s, link layer %s, max message %u bytes\n", p,
                        verbs_port_state_str(pa.state), verbs_link_layer_str(pa.link_layer), pa.max_msg_sz);
            }
        } else {
            fprintf(out, "  (cannot query)\n");
        }
        char nd[16][IF_NAMESIZE];
        int nnd = verbs_dev_netdevs(nm ? nm : "?", 0, nd, 16);
        fprintf(out, "      network interfaces:");
        for (int k = 0; k < nnd; k++) fprintf(out, " %s", nd[k]);
        fprintf(out, "%s\n", nnd ? "" : " none in sysfs");
        ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
    oobx_settings_t dflt;
    if (!s) {
        memset(&dflt, 0, sizeof(dflt));
        s = &dflt;
    }
    fprintf(out, "  OOBX_NET_DEVICE=%s OOBX_SOCKET_IFNAME=%s\n", s->net_device[0] ? s->net_device : "(unset)",
            s->socket_ifname[0] ? s->socket_ifname : "(unset)");
    verbs_choice_t ch;
    char why[600];
    int rc = verbs_choose(core, s, NULL, 0, &ch, why, sizeof(why));
    if (rc != 0) {
        fprintf(out, "  usable: no (%s)\n", why);
        return;
    }
    char a[96];
    verbs_addr_format((const struct sockaddr *)&ch.addr, a, sizeof(a));
    char *colon = strrchr(a, ':');
    if (colon) *colon = '\0';
    fprintf(out, "  this process would use device %s: %s\n", ch.dev, ch.why_dev);
    fprintf(out, "  and listen on %s: %s\n", a, ch.why_ip);
    /* what rdma_cm makes of that address */
    struct rdma_event_channel *ec = rdma_create_event_channel();
    struct rdma_cm_id *id = NULL;
    rc = OOBX_ERR_UNAVAILABLE;
    if (!ec) {
        fprintf(out, "  usable: no (rdma_create_event_channel: %s)\n", strerror(errno));
    } else if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP)) {
        id = NULL;
        fprintf(out, "  usable: no (rdma_create_id: %s)\n", strerror(errno));
    } else if (rdma_bind_addr(id, (struct sockaddr *)&ch.addr)) {
        fprintf(out, "  usable: no (rdma_bind_addr(%s): %s)\n", a, strerror(errno));
    } else {
        const char *bound = id->verbs ? ibv_get_device_name(id->verbs->device) : NULL;
        if (!bound)
            fprintf(out, "  usable: no (rdma_cm maps %s to no RDMA device)\n", a);
        else if (strcmp(bound, ch.dev) != 0)
            fprintf(out, "  usable: no (rdma_cm maps %s to %s, not %s)\n", a, bound, ch.dev);
        else {
            fprintf(out, "  usable: yes (rdma_cm maps %s to %s port %u)\n", a, bound, id->port_num);
            rc = 0;
        }
    }
    if (id) rdma_destroy_id(id);
    if (ec) rdma_destroy_event_channel(ec);
    return;
}
