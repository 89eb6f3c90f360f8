/* The hwloc module (liboobx-topo.so): device locality with hwloc. Network and
 * OpenFabrics OS devices, where they hang in the PCI tree and which NUMA node
 * and package they are local to, ranked for a target (a PCI device such as a
 * GPU, or a set of CPUs). Closer means: same PCI switch, then same NUMA node,
 * then same package, then anywhere; ties keep their order.
 *
 * A module, not part of liboobx.so: hwloc (with libudev and libm) costs every
 * process that maps it, and most never rank a device (one interface
 * qualifies, or OOBX_SOCKET_IFNAME decides). The core loads this file when a
 * choice needs it (topo/topo_rank.c) and calls the one op of its table. */
#include "topo.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <hwloc.h>

#include "oobx.h"



typedef struct topo_ctx {
    hwloc_topology_t topo;
    hwloc_obj_t target_pci;      /* the PCI target, or NULL */
    hwloc_bitmap_t target_cpus;  /* CPUs of the target */
    hwloc_bitmap_t target_nodes; /* NUMA nodes (os index) local to the target */
    hwloc_bitmap_t target_pkgs;  /* packages (os index) the target is on */
    char target_text[256];       /* "PCI 0000:3b:00.0 (NUMA 1, package 1)" */
} topo_ctx_t;

static void topo_ctx_close(topo_ctx_t *c)
{
    hwloc_bitmap_free(c->target_pkgs);
    hwloc_bitmap_free(c->target_nodes);
    hwloc_bitmap_free(c->target_cpus);
    if (c->topo) hwloc_topology_destroy(c->topo);
    memset(c, 0, sizeof(*c));
}

static int topo_is_io(hwloc_obj_t o)
{
    return o && (o->type == HWLOC_OBJ_BRIDGE || o->type == HWLOC_OBJ_PCI_DEVICE || o->type == HWLOC_OBJ_OS_DEVICE);
}

static hwloc_obj_t topo_obj_pcidev(hwloc_obj_t o)
{
    while (topo_is_io(o) && o->type != HWLOC_OBJ_PCI_DEVICE) o = o->parent;
    return topo_is_io(o) ? o : NULL;
}

/* The package holding the CPUs of locality obj, or NULL when none or several do. */
static hwloc_obj_t topo_obj_package(hwloc_topology_t topo, hwloc_obj_t obj)
{
    if (!obj) return NULL;
    if (obj->type == HWLOC_OBJ_PACKAGE) return obj;
    hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, obj);
    if (pkg) return pkg;
    hwloc_obj_t only = NULL;
    int count = 0;
    for (hwloc_obj_t p = NULL; (p = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PACKAGE, p));)
        if (obj->cpuset && hwloc_bitmap_intersects(p->cpuset, obj->cpuset)) {
            only = p;
            count++;
        }
    return count == 1 ? only : NULL;
}

/* "0", "0-1", or "none" */
static void topo_bitmap_text(hwloc_const_bitmap_t set, char *buf, size_t len)
{
    if (!set || hwloc_bitmap_iszero(set)) {
        snprintf(buf, len, "none");
        return;
    }
    if (hwloc_bitmap_list_snprintf(buf, len, set) < 0) snprintf(buf, len, "?");
}

static void topo_ctx_set_locality(topo_ctx_t *c, hwloc_const_cpuset_t cpus, hwloc_const_nodeset_t nodes)
{
    hwloc_bitmap_copy(c->target_cpus, cpus);
    if (nodes)
        hwloc_bitmap_copy(c->target_nodes, nodes);
    else
        hwloc_cpuset_to_nodeset(c->topo, cpus, c->target_nodes);
    hwloc_bitmap_zero(c->target_pkgs);
    for (hwloc_obj_t p = NULL; (p = hwloc_get_next_obj_by_type(c->topo, HWLOC_OBJ_PACKAGE, p));)
        if (hwloc_bitmap_intersects(p->cpuset, cpus)) hwloc_bitmap_set(c->target_pkgs, p->os_index);
}

static void topo_ctx_describe(topo_ctx_t *c, const char *head)
{
    char cpus[96], nodes[64], pkgs[64];
    topo_bitmap_text(c->target_cpus, cpus, sizeof(cpus));
    topo_bitmap_text(c->target_nodes, nodes, sizeof(nodes));
    topo_bitmap_text(c->target_pkgs, pkgs, sizeof(pkgs));
    snprintf(c->target_text, sizeof(c->target_text), "%s (CPUs %s, NUMA %s, package %s)", head, cpus, nodes,
             pkgs);
}

/* Loads the topology (this machine, or req->xml_path) and resolves the target. */
static int topo_ctx_open(topo_ctx_t *c, const topo_request_t *req, char *why, size_t whylen)
{
    memset(c, 0, sizeof(*c));
    const char *pci = req && req->pci_target && req->pci_target[0] ? req->pci_target : NULL;
    const char *cpulist = req && req->cpuset_target && req->cpuset_target[0] ? req->cpuset_target : NULL;
    const char *xml = req && req->xml_path && req->xml_path[0] ? req->xml_path : NULL;
    unsigned dom = 0, bus = 0, dev = 0, fn = 0;
    if (pci && oobx__topo_pci_parse(pci, &dom, &bus, &dev, &fn) != OOBX_SUCCESS) {
        oobx__topo_why(why, whylen, "OOBX_TOPO_PCI=%s is not a PCI bus id (want 0000:3b:00.0)", pci);
        return OOBX_ERR_INVALID;
    }
    c->target_cpus = hwloc_bitmap_alloc();
    c->target_nodes = hwloc_bitmap_alloc();
    c->target_pkgs = hwloc_bitmap_alloc();
    if (!c->target_cpus || !c->target_nodes || !c->target_pkgs) {
        topo_ctx_close(c);
        oobx__topo_why(why, whylen, "hwloc: out of memory");
        return OOBX_ERR_NOMEM;
    }
    if (hwloc_topology_init(&c->topo) != 0) {
        c->topo = NULL;
        topo_ctx_close(c);
        oobx__topo_why(why, whylen, "hwloc: cannot initialise a topology: %s", strerror(errno));
        return OOBX_ERR_UNAVAILABLE;
    }
    /* Only packages, NUMA nodes, PCI devices and the network/OpenFabrics OS
     * devices matter here. GPU components are not needed (a GPU is located by
     * its PCI bus id), and gl may try to reach an X display. On Linux the linux
     * component reads the CPU and PCI trees from sysfs itself: the libpciaccess
     * one adds nothing and leaks at each load, and the x86 one moves the thread
     * over every CPU to read CPUID (cache details nobody here needs). */
    static const char *const unneeded[] = {"gl", "opencl", "cuda", "nvml", "rsmi", "levelzero",
#ifdef __linux__
                                           "pci", "x86",
#endif
    };
    for (size_t i = 0; i < sizeof(unneeded) / sizeof(unneeded[0]); i++)
        (void)hwloc_topology_set_components(c->topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, unneeded[i]);
    hwloc_topology_set_io_types_filter(c->topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    /* any PCI device may be the target, not only those hwloc deems important */
    if (pci) hwloc_topology_set_type_filter(c->topo, HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (xml && hwloc_topology_set_xml(c->topo, xml) != 0) {
        int err = errno;
        topo_ctx_close(c);
        oobx__topo_why(why, whylen, "hwloc cannot read the topology file %s: %s", xml, strerror(err));
        return OOBX_ERR_UNAVAILABLE;
    }
    if (hwloc_topology_load(c->topo) != 0) {
        int err = errno;
        topo_ctx_close(c);
        oobx__topo_why(why, whylen, "hwloc cannot load the topology%s%s: %s", xml ? " file " : " of this machine",
                       xml ? xml : "", err ? strerror(err) : "unknown error");
        return OOBX_ERR_UNAVAILABLE;
    }
    hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(c->topo);
    char note[160] = "";
    if (pci) {
        c->target_pci = hwloc_get_pcidev_by_busid(c->topo, dom, bus, dev, fn);
        if (c->target_pci) {
            hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(c->topo, c->target_pci);
            topo_ctx_set_locality(c, anc && anc->cpuset ? anc->cpuset : all, anc ? anc->nodeset : NULL);
            char head[64];
            snprintf(head, sizeof(head), "PCI %04x:%02x:%02x.%x", dom, bus, dev, fn);
            topo_ctx_describe(c, head);
            return OOBX_SUCCESS;
        }
        snprintf(note, sizeof(note), "PCI %04x:%02x:%02x.%x is not in the topology; ", dom, bus, dev, fn);
    }
    if (cpulist) {
        if (hwloc_bitmap_list_sscanf(c->target_cpus, cpulist) != 0 || hwloc_bitmap_iszero(c->target_cpus)) {
            topo_ctx_close(c);
            oobx__topo_why(why, whylen, "CPU list '%s' is not a list of CPU numbers such as 0-3,8", cpulist);
            return OOBX_ERR_INVALID;
        }
        if (!hwloc_bitmap_intersects(c->target_cpus, all)) {
            char have[96];
            topo_bitmap_text(all, have, sizeof(have));
            topo_ctx_close(c);
            oobx__topo_why(why, whylen, "CPU list '%s' holds no CPU of the topology (it has CPUs %s)", cpulist, have);
            return OOBX_ERR_INVALID;
        }
        hwloc_bitmap_t cpus = hwloc_bitmap_dup(c->target_cpus);
        if (!cpus) {
            topo_ctx_close(c);
            oobx__topo_why(why, whylen, "hwloc: out of memory");
            return OOBX_ERR_NOMEM;
        }
        hwloc_bitmap_and(cpus, cpus, all);
        topo_ctx_set_locality(c, cpus, NULL);
        hwloc_bitmap_free(cpus);
        char head[224];
        snprintf(head, sizeof(head), "%sthe given CPUs", note);
        topo_ctx_describe(c, head);
        return OOBX_SUCCESS;
    }
    /* the calling thread's binding; a topology read from a file has none */
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
    const char *head = "the whole machine (topology from a file)";
    int own = !xml && hwloc_topology_is_thissystem(c->topo);
    if (cpus && own) {
        head = "this thread's CPU binding";
        if ((hwloc_get_cpubind(c->topo, cpus, HWLOC_CPUBIND_THREAD) != 0 &&
             hwloc_get_cpubind(c->topo, cpus, HWLOC_CPUBIND_PROCESS) != 0) ||
            !hwloc_bitmap_intersects(cpus, all)) {
            hwloc_bitmap_copy(cpus, all);
            head = "the whole machine (the CPU binding is unknown)";
        }
        hwloc_bitmap_and(cpus, cpus, all);
    }
    topo_ctx_set_locality(c, cpus && own ? cpus : all, NULL);
    hwloc_bitmap_free(cpus);
    char text[224];
    snprintf(text, sizeof(text), "%s%s", note, head);
    topo_ctx_describe(c, text);
    return OOBX_SUCCESS;
}

static int topo_osdev_kind(hwloc_obj_t o)
{
    if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK) return TOPO_DEV_NET;
    if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) return TOPO_DEV_RDMA;
    return 0;
}

/* 1 when a and b are one device, or share a PCI bridge below the host bridge. */
static int topo_pci_share_switch(hwloc_obj_t a, hwloc_obj_t b)
{
    if (!a || !b) return 0;
    if (a == b) return 1;
    for (hwloc_obj_t x = a; topo_is_io(x); x = x->parent)
        for (hwloc_obj_t y = b; topo_is_io(y); y = y->parent)
            if (x == y)
                return x->type == HWLOC_OBJ_BRIDGE && x->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI;
    return 0;
}

static void topo_dev_fill(const topo_ctx_t *c, hwloc_obj_t osdev, topo_dev_t *d)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof(d->name), "%s", osdev->name ? osdev->name : "?");
    d->kind = topo_osdev_kind(osdev);
    hwloc_obj_t pcidev = topo_obj_pcidev(osdev);
    if (pcidev)
        snprintf(d->pci, sizeof(d->pci), "%04x:%02x:%02x.%x", (unsigned)pcidev->attr->pcidev.domain,
                 (unsigned)pcidev->attr->pcidev.bus, (unsigned)pcidev->attr->pcidev.dev,
                 (unsigned)pcidev->attr->pcidev.func);
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(c->topo, osdev);
    d->numa = -1;
    if (anc && anc->nodeset && hwloc_bitmap_weight(anc->nodeset) == 1) d->numa = hwloc_bitmap_first(anc->nodeset);
    hwloc_obj_t pkg = topo_obj_package(c->topo, anc);
    d->package = pkg ? (int)pkg->os_index : -1;
    if (c->target_pci && topo_pci_share_switch(c->target_pci, pcidev))
        d->closeness = TOPO_CLOSE_SWITCH;
    else if (d->numa >= 0 && hwloc_bitmap_isset(c->target_nodes, (unsigned)d->numa))
        d->closeness = TOPO_CLOSE_NUMA;
    else if (d->package >= 0 && hwloc_bitmap_isset(c->target_pkgs, (unsigned)d->package))
        d->closeness = TOPO_CLOSE_PACKAGE;
    else
        d->closeness = TOPO_CLOSE_ANY;
}

/* Every network and OpenFabrics OS device of kind (0: both), in topology order. */
static int topo_ctx_devices(const topo_ctx_t *c, int kind, topo_dev_t **out, int *n)
{
    int count = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(c->topo, o));) {
        int k = topo_osdev_kind(o);
        if (k && (kind == 0 || (kind & k))) count++;
    }
    topo_dev_t *devs = count ? calloc((size_t)count, sizeof(*devs)) : NULL;
    if (count && !devs) return OOBX_ERR_NOMEM;
    int i = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(c->topo, o)) && i < count;) {
        int k = topo_osdev_kind(o);
        if (k && (kind == 0 || (kind & k))) topo_dev_fill(c, o, &devs[i++]);
    }
    *out = devs;
    *n = i;
    return OOBX_SUCCESS;
}

static int topo_hwloc_rank_devices(const topo_request_t *req, int kind, topo_dev_t **out, int *n, char *why,
                                   size_t whylen)
{
    if (!out || !n || kind < 0 || kind > (TOPO_DEV_NET | TOPO_DEV_RDMA)) {
        oobx__topo_why(why, whylen, "device ranking: bad arguments (kind %d)", kind);
        return OOBX_ERR_INVALID;
    }
    topo_ctx_t c;
    int rc = topo_ctx_open(&c, req, why, whylen);
    if (rc != OOBX_SUCCESS) return rc;
    topo_dev_t *devs = NULL;
    int count = 0;
    rc = topo_ctx_devices(&c, kind, &devs, &count);
    if (rc != OOBX_SUCCESS) {
        topo_ctx_close(&c);
        oobx__topo_why(why, whylen, "device ranking: out of memory");
        return rc;
    }
    /* stable insertion sort: ties keep the topology's order */
    for (int i = 1; i < count; i++) {
        topo_dev_t d = devs[i];
        int j = i - 1;
        while (j >= 0 && devs[j].closeness > d.closeness) {
            devs[j + 1] = devs[j];
            j--;
        }
        devs[j + 1] = d;
    }
    oobx__topo_why(why, whylen, "target %s", c.target_text);
    topo_ctx_close(&c);
    *out = devs;
    *n = count;
    return OOBX_SUCCESS;
}

static const oobx_topo_module_t topo_hwloc_module = {
    .version = OOBX_TOPO_MODULE_VERSION,
    .req_size = sizeof(topo_request_t),
    .dev_size = sizeof(topo_dev_t),
    .rank_devices = topo_hwloc_rank_devices,
};

__attribute__((visibility("default"))) const oobx_topo_module_t *oobx_topo_module_init(void);
const oobx_topo_module_t *oobx_topo_module_init(void)
{
    return &topo_hwloc_module;
}
