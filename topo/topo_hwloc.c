/* Device locality with hwloc: network and OpenFabrics OS devices, where they
 * hang in the PCI tree and which NUMA node and package they are local to,
 * ranked for a target (a PCI device such as a GPU, or a set of CPUs).
 * Closer means: same PCI switch, then same NUMA node, then same package,
 * then anywhere; ties keep their order. */
#include "topo.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "oobx.h"

#ifdef OOBX_HAVE_HWLOC
#include <hwloc.h>
#endif

const char *oobx__topo_closeness_name(int closeness)
{
    switch (closeness) {
    case TOPO_CLOSE_SWITCH: return "switch";
    case TOPO_CLOSE_NUMA: return "numa";
    case TOPO_CLOSE_PACKAGE: return "package";
    case TOPO_CLOSE_ANY: return "any";
    default: return "unknown";
    }
}

/* hex digits of s[0..], at most maxdigits, into *v; returns digits read */
static int topo_hex(const char *s, int maxdigits, unsigned *v)
{
    int k = 0;
    unsigned x = 0;
    while (k < maxdigits && isxdigit((unsigned char)s[k])) {
        char ch = (char)tolower((unsigned char)s[k]);
        x = x * 16 + (unsigned)(isdigit((unsigned char)ch) ? ch - '0' : ch - 'a' + 10);
        k++;
    }
    *v = x;
    return k;
}

int oobx__topo_pci_parse(const char *s, unsigned *domain, unsigned *bus, unsigned *dev, unsigned *func)
{
    if (!s) return OOBX_ERR_INVALID;
    while (*s == ' ') s++;
    unsigned part[4];
    int nparts = 0;
    const char *p = s;
    /* [domain:]bus:dev.func */
    for (;;) {
        int k = topo_hex(p, 8, &part[nparts]);
        if (k == 0) return OOBX_ERR_INVALID;
        p += k;
        nparts++;
        if (*p == ':' && nparts < 3) {
            p++;
            continue;
        }
        break;
    }
    if (nparts != 2 && nparts != 3) return OOBX_ERR_INVALID;
    if (*p != '.') return OOBX_ERR_INVALID;
    p++;
    unsigned fn;
    int k = topo_hex(p, 1, &fn);
    if (k != 1) return OOBX_ERR_INVALID;
    p += k;
    while (*p == ' ') p++;
    if (*p != '\0') return OOBX_ERR_INVALID;
    unsigned d = nparts == 3 ? part[0] : 0;
    unsigned b = part[nparts - 2], v = part[nparts - 1];
    if (d > 0xffff || b > 0xff || v > 0x1f || fn > 7) return OOBX_ERR_INVALID;
    *domain = d;
    *bus = b;
    *dev = v;
    *func = fn;
    return OOBX_SUCCESS;
}

static void topo_why(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void topo_why(char *why, size_t whylen, const char *fmt, ...)
{
    if (!why || whylen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
}

#ifdef OOBX_HAVE_HWLOC

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
        topo_why(why, whylen, "OOBX_TOPO_PCI=%s is not a PCI bus id (want 0000:3b:00.0)", pci);
        return OOBX_ERR_INVALID;
    }
    c->target_cpus = hwloc_bitmap_alloc();
    c->target_nodes = hwloc_bitmap_alloc();
    c->target_pkgs = hwloc_bitmap_alloc();
    if (!c->target_cpus || !c->target_nodes || !c->target_pkgs) {
        topo_ctx_close(c);
        topo_why(why, whylen, "hwloc: out of memory");
        return OOBX_ERR_NOMEM;
    }
    if (hwloc_topology_init(&c->topo) != 0) {
        c->topo = NULL;
        topo_ctx_close(c);
        topo_why(why, whylen, "hwloc: cannot initialise a topology: %s", strerror(errno));
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
        topo_why(why, whylen, "hwloc cannot read the topology file %s: %s", xml, strerror(err));
        return OOBX_ERR_UNAVAILABLE;
    }
    if (hwloc_topology_load(c->topo) != 0) {
        int err = errno;
        topo_ctx_close(c);
        topo_why(why, whylen, "hwloc cannot load the topology%s%s: %s", xml ? " file " : " of this machine",
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
            topo_why(why, whylen, "CPU list '%s' is not a list of CPU numbers such as 0-3,8", cpulist);
            return OOBX_ERR_INVALID;
        }
        if (!hwloc_bitmap_intersects(c->target_cpus, all)) {
            char have[96];
            topo_bitmap_text(all, have, sizeof(have));
            topo_ctx_close(c);
            topo_why(why, whylen, "CPU list '%s' holds no CPU of the topology (it has CPUs %s)", cpulist, have);
            return OOBX_ERR_INVALID;
        }
        hwloc_bitmap_t cpus = hwloc_bitmap_dup(c->target_cpus);
        if (!cpus) {
            topo_ctx_close(c);
            topo_why(why, whylen, "hwloc: out of memory");
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

int oobx__topo_rank_devices(const topo_request_t *req, int kind, topo_dev_t **out, int *n, char *why, size_t whylen)
{
    if (!out || !n || kind < 0 || kind > (TOPO_DEV_NET | TOPO_DEV_RDMA)) {
        topo_why(why, whylen, "device ranking: bad arguments (kind %d)", kind);
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
        topo_why(why, whylen, "device ranking: out of memory");
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
    topo_why(why, whylen, "target %s", c.target_text);
    topo_ctx_close(&c);
    *out = devs;
    *n = count;
    return OOBX_SUCCESS;
}

int oobx__topo_rank_names(const topo_request_t *req, const char *const *names, int n, int *closeness, char *why,
                    size_t whylen)
{
    if (!names || !closeness || n < 0) {
        topo_why(why, whylen, "device ranking: bad arguments");
        return OOBX_ERR_INVALID;
    }
    topo_ctx_t c;
    int rc = topo_ctx_open(&c, req, why, whylen);
    if (rc != OOBX_SUCCESS) return rc;
    topo_dev_t *devs = NULL;
    int count = 0;
    rc = topo_ctx_devices(&c, 0, &devs, &count);
    if (rc != OOBX_SUCCESS) {
        topo_ctx_close(&c);
        topo_why(why, whylen, "device ranking: out of memory");
        return rc;
    }
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
    topo_why(why, whylen, "target %s", c.target_text);
    free(devs);
    topo_ctx_close(&c);
    return OOBX_SUCCESS;
}

#else /* !OOBX_HAVE_HWLOC */

int oobx__topo_rank_devices(const topo_request_t *req, int kind, topo_dev_t **out, int *n, char *why, size_t whylen)
{
    if (!out || !n || kind < 0 || kind > (TOPO_DEV_NET | TOPO_DEV_RDMA)) {
        topo_why(why, whylen, "device ranking: bad arguments (kind %d)", kind);
        return OOBX_ERR_INVALID;
    }
    unsigned d, b, v, f;
    if (req && req->pci_target && req->pci_target[0] && oobx__topo_pci_parse(req->pci_target, &d, &b, &v, &f) != 0) {
        topo_why(why, whylen, "OOBX_TOPO_PCI=%s is not a PCI bus id (want 0000:3b:00.0)", req->pci_target);
        return OOBX_ERR_INVALID;
    }
    topo_why(why, whylen, "hwloc support is not built in");
    return OOBX_ERR_UNAVAILABLE;
}

int oobx__topo_rank_names(const topo_request_t *req, const char *const *names, int n, int *closeness, char *why,
                    size_t whylen)
{
    if (!names || !closeness || n < 0) {
        topo_why(why, whylen, "device ranking: bad arguments");
        return OOBX_ERR_INVALID;
    }
    topo_dev_t *devs = NULL;
    int count = 0;
    return oobx__topo_rank_devices(req, 0, &devs, &count, why, whylen);
}

#endif /* OOBX_HAVE_HWLOC */

int oobx__topo_pick_device(const topo_request_t *req, const char *const *names, int nnames, char *why, size_t whylen)
{
    char scratch[8];
    if (!why || whylen == 0) {
        why = scratch;
        whylen = sizeof(scratch);
    }
    why[0] = '\0';
    if (!names || nnames <= 0) {
        topo_why(why, whylen, "device choice: no candidate device");
        return OOBX_ERR_INVALID;
    }
    for (int i = 0; i < nnames; i++)
        if (!names[i]) {
            topo_why(why, whylen, "device choice: candidate %d has no name", i);
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
                    topo_why(why, whylen, "%s: named by OOBX_NET_DEVICE=%s", names[i], want);
                    return i;
                }
            }
        topo_why(why, whylen, "OOBX_NET_DEVICE=%s names none of the %d candidates:", want, nnames);
        for (int i = 0; i < nnames; i++) oobx__appendf(why, whylen, "%s %s", i ? "," : "", names[i]);
        return OOBX_ERR_UNAVAILABLE;
    }
    int *close = calloc((size_t)nnames, sizeof(*close));
    if (!close) {
        topo_why(why, whylen, "device choice: out of memory");
        return OOBX_ERR_NOMEM;
    }
    char rwhy[320] = "";
    int rc = oobx__topo_rank_names(req, names, nnames, close, rwhy, sizeof(rwhy));
    if (rc == OOBX_ERR_INVALID) {
        topo_why(why, whylen, "%s", rwhy);
        free(close);
        return rc;
    }
    if (rc != OOBX_SUCCESS) {
        topo_why(why, whylen, "%s: first candidate; %s, so the transport's order is kept", names[0], rwhy);
        free(close);
        return 0;
    }
    int best = 0;
    for (int i = 1; i < nnames; i++)
        if (close[i] < close[best]) best = i;
    if (close[best] == TOPO_CLOSE_UNKNOWN)
        topo_why(why, whylen, "%s: first candidate; hwloc locates none of the %d, so the transport's order is kept",
                 names[best], nnames);
    else if (nnames == 1)
        topo_why(why, whylen, "%s: the only candidate (%s; %s)", names[best], oobx__topo_closeness_name(close[best]), rwhy);
    else {
        int ties = 0;
        for (int i = 0; i < nnames; i++) ties += close[i] == close[best];
        if (ties > 1)
            topo_why(why, whylen, "%s: first of the candidates closest (%s), %d of %d; %s", names[best],
                     oobx__topo_closeness_name(close[best]), ties, nnames, rwhy);
        else
            topo_why(why, whylen, "%s: closest (%s) of %d candidates; %s", names[best],
                     oobx__topo_closeness_name(close[best]), nnames, rwhy);
    }
    free(close);
    return best;
}

int oobx__topo_closest_rdma(const topo_request_t *req, char *out, size_t outlen, char *why, size_t whylen)
{
    if (!out || outlen == 0) {
        topo_why(why, whylen, "device choice: no room for the device name");
        return OOBX_ERR_INVALID;
    }
    topo_dev_t *devs = NULL;
    int n = 0;
    char rwhy[320] = "";
    int rc = oobx__topo_rank_devices(req, TOPO_DEV_RDMA, &devs, &n, rwhy, sizeof(rwhy));
    if (rc != OOBX_SUCCESS) {
        topo_why(why, whylen, "%s", rwhy);
        return rc;
    }
    if (n < 2 || devs[0].closeness == devs[n - 1].closeness) {
        if (n == 0)
            topo_why(why, whylen, "hwloc sees no RDMA device; %s", rwhy);
        else if (n == 1)
            topo_why(why, whylen, "hwloc sees one RDMA device (%s); %s", devs[0].name, rwhy);
        else
            topo_why(why, whylen, "the %d RDMA devices are equally close (%s); %s", n,
                     oobx__topo_closeness_name(devs[0].closeness), rwhy);
        free(devs);
        return OOBX_ERR_UNAVAILABLE;
    }
    int ties = 0;
    for (int i = 0; i < n; i++) ties += devs[i].closeness == devs[0].closeness;
    snprintf(out, outlen, "%s", devs[0].name);
    if (ties > 1)
        topo_why(why, whylen, "%s: first of the RDMA devices closest (%s), %d of %d; %s", devs[0].name,
                 oobx__topo_closeness_name(devs[0].closeness), ties, n, rwhy);
    else
        topo_why(why, whylen, "%s: closest (%s) of %d RDMA devices; %s", devs[0].name,
                 oobx__topo_closeness_name(devs[0].closeness), n, rwhy);
    free(devs);
    return OOBX_SUCCESS;
}
