/* `oobx-info -t`: the devices hwloc sees, their locality, and what each
 * transport would pick for this process, with the reason. */
#include "topo.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "oobx.h"
#include "settings.h"

static const char *topo_kind_name(int kind)
{
    return kind == TOPO_DEV_RDMA ? "rdma" : kind == TOPO_DEV_NET ? "net" : "?";
}

/* The first root of OOBX_COMM_ID ("host:port[,host:port...]", "[v6]:port") as an address. */
static int topo_comm_id_addr(const char *comm_id, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[256];
    if (!comm_id || !comm_id[0]) return -1;
    size_t first = strcspn(comm_id, ",");
    if (first >= sizeof(host)) return -1;
    memcpy(host, comm_id, first);
    host[first] = '\0';
    char *h = host;
    if (h[0] == '[') {
        char *close = strchr(h, ']');
        if (!close) return -1;
        *close = '\0';
        h++;
    } else {
        char *colon = strrchr(h, ':');
        if (colon && strchr(h, ':') == colon) *colon = '\0';
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(h, NULL, &hints, &res) != 0 || !res) return -1;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static void topo_report_pick(FILE *out, const char *transport, const topo_request_t *req, const topo_dev_t *devs,
                             int ndev, int kind, const char *none)
{
    int n = 0;
    const char **names = ndev > 0 ? calloc((size_t)ndev, sizeof(*names)) : NULL;
    for (int i = 0; i < ndev && names; i++)
        if (devs[i].kind == kind) names[n++] = devs[i].name;
    if (n == 0) {
        if (req->net_device && req->net_device[0])
            fprintf(out, "  %-7s %s (named by OOBX_NET_DEVICE)\n", transport, req->net_device);
        else
            fprintf(out, "  %-7s %s\n", transport, none);
        free(names);
        return;
    }
    char why[512];
    int idx = oobx__topo_pick_device(req, names, n, why, sizeof(why));
    if (idx >= 0)
        fprintf(out, "  %-7s %s\n", transport, why);
    else if (idx == OOBX_ERR_UNAVAILABLE && req->net_device && req->net_device[0])
        fprintf(out, "  %-7s %s (named by OOBX_NET_DEVICE; hwloc does not list it)\n", transport, req->net_device);
    else
        fprintf(out, "  %-7s none: %s\n", transport, why);
    free(names);
}

static void topo_report_req(FILE *out, const topo_request_t *req)
{
    const char *hwloc_xml = getenv("HWLOC_XMLFILE");
    if (req->xml_path && req->xml_path[0])
        fprintf(out, "source:   file %s\n", req->xml_path);
    else if (hwloc_xml && hwloc_xml[0])
        fprintf(out, "source:   file %s (HWLOC_XMLFILE)\n", hwloc_xml);
    else
        fprintf(out, "source:   this machine\n");
    char mod[1100];
    if (oobx__topo_hwloc_loads(req, mod, sizeof(mod)))
        fprintf(out, "hwloc:    module %s\n", mod);
    else
        fprintf(out, "hwloc:    none: %s; devices cannot be ranked, every choice keeps the system's order\n", mod);
    if (req->ifname_spec && req->ifname_spec[0]) fprintf(out, "OOBX_SOCKET_IFNAME=%s\n", req->ifname_spec);
    if (req->family != AF_UNSPEC)
        fprintf(out, "OOBX_SOCKET_FAMILY=%s\n", req->family == AF_INET ? "AF_INET" : "AF_INET6");
    if (req->pci_target && req->pci_target[0]) fprintf(out, "OOBX_TOPO_PCI=%s\n", req->pci_target);
    if (req->net_device && req->net_device[0]) fprintf(out, "OOBX_NET_DEVICE=%s\n", req->net_device);

    topo_dev_t *devs = NULL;
    int ndev = 0;
    char why[512];
    int rc = oobx__topo_rank_devices(req, 0, &devs, &ndev, why, sizeof(why));
    int ranked = rc == OOBX_SUCCESS;
    fprintf(out, "\ndevices, closest first:\n");
    if (rc != OOBX_SUCCESS) {
        fprintf(out, "  unknown: %s\n", why);
        ndev = 0;
    } else {
        fprintf(out, "  %s\n", why);
        if (ndev == 0) fprintf(out, "  (no network or RDMA device)\n");
        else
            fprintf(out, "  %-12s %-5s %-13s %-5s %-8s %s\n", "name", "kind", "pci", "numa", "package",
                    "closeness");
        for (int i = 0; i < ndev; i++) {
            char numa[16], pkg[16];
            snprintf(numa, sizeof(numa), "%d", devs[i].numa);
            snprintf(pkg, sizeof(pkg), "%d", devs[i].package);
            fprintf(out, "  %-12s %-5s %-13s %-5s %-8s %s\n", devs[i].name, topo_kind_name(devs[i].kind),
                    devs[i].pci[0] ? devs[i].pci : "-", devs[i].numa >= 0 ? numa : "-",
                    devs[i].package >= 0 ? pkg : "-", oobx__topo_closeness_name(devs[i].closeness));
        }
    }

    topo_if_t *ifs = NULL;
    int nif = 0;
    fprintf(out, "\ninterfaces (up, with an address):\n");
    if (oobx__topo_if_list(&ifs, &nif) != OOBX_SUCCESS) {
        fprintf(out, "  cannot list the interfaces\n");
        nif = 0;
    }
    for (int i = 0; i < nif; i++) {
        char addr[INET6_ADDRSTRLEN + TOPO_NAME_MAX + 8];
        oobx__topo_if_format(&ifs[i], addr, sizeof(addr));
        fprintf(out, "  %-12s %-44s%s%s%s%s\n", ifs[i].name, addr, ifs[i].loopback ? " loopback" : "",
                oobx__topo_if_is_virtual(ifs[i].name) ? " virtual" : "", ifs[i].linklocal ? " link-local" : "",
                ifs[i].up ? "" : " no-carrier");
    }
    if (nif == 0) fprintf(out, "  (none)\n");

    fprintf(out, "\nwhat each transport would pick for this process:\n");
    topo_if_t pick;
    rc = oobx__topo_pick_if_from(ifs, nif, req, &pick, why, sizeof(why));
    fprintf(out, "  %-7s %s%s\n", "socket", rc == OOBX_SUCCESS ? "" : "none: ", why);
    free(ifs);
    int nrdma = 0;
    for (int i = 0; i < ndev; i++) nrdma += devs[i].kind == TOPO_DEV_RDMA;
    if (!ranked) {
        if (req->net_device && req->net_device[0]) {
            fprintf(out, "  %-7s %s (named by OOBX_NET_DEVICE)\n", "ucx", req->net_device);
            fprintf(out, "  %-7s %s (named by OOBX_NET_DEVICE)\n", "verbs", req->net_device);
        } else {
            fprintf(out, "  %-7s the first device UCX lists (hwloc cannot rank them)\n", "ucx");
            fprintf(out, "  %-7s the first device libibverbs lists (hwloc cannot rank them)\n", "verbs");
        }
    } else {
        topo_report_pick(out, "ucx", req, devs, ndev, nrdma ? TOPO_DEV_RDMA : TOPO_DEV_NET,
                         "the first device UCX lists (hwloc sees no network device)");
        topo_report_pick(out, "verbs", req, devs, ndev, TOPO_DEV_RDMA,
                         "the first device libibverbs lists (hwloc sees no RDMA device; "
                         "oobx-info -u shows what the verbs transport finds)");
    }
    free(devs);
}

void oobx__topo_report(FILE *out, const topo_request_t *req)
{
    if (!out) return;
    if (req) {
        topo_report_req(out, req);
        return;
    }
    oobx_settings_t *s = calloc(1, sizeof(*s));
    if (!s) {
        fprintf(out, "out of memory\n");
        return;
    }
    int rc = oobx__settings_load(s, NULL);
    if (rc != OOBX_SUCCESS) {
        fprintf(out, "the OOBX_* settings do not parse (%s); fix them first\n", oobx_last_error());
        free(s);
        return;
    }
    struct sockaddr_storage root;
    socklen_t rootlen = 0;
    topo_request_t r = {
        .ifname_spec = s->socket_ifname,
        .family = s->socket_family,
        .allow_linklocal = s->socket_linklocal,
        .pci_target = s->topo_pci,
        .net_device = s->net_device,
        .module_dir = s->module_dir,
    };
    if (topo_comm_id_addr(s->comm_id, &root, &rootlen) == 0) {
        r.match = (const struct sockaddr *)&root;
        r.matchlen = rootlen;
        fprintf(out, "OOBX_COMM_ID=%s\n", s->comm_id);
    }
    topo_report_req(out, &r);
    free(s);
}
