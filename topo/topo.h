/* topo/: which network interface or RDMA device a rank should use.
 *
 * Two questions are answered here, both without touching process-wide state:
 * - the socket transport asks for an interface (name filter, address family,
 *   the root's subnet, then hwloc locality when several still qualify);
 * - UCX and verbs ask which of their candidate devices is closest to the rank
 *   (its CPU binding, or a PCI device such as the GPU it drives).
 * The hwloc part is a module of its own (liboobx-topo.so in the module
 * directory, built when hwloc is found), loaded only when a choice needs it,
 * so that a process that never ranks a device never maps hwloc. Without the
 * module, or when the topology cannot be loaded, every choice keeps the order
 * it was given and says so in its `why` text (callers log that text at info
 * level). */
#ifndef OOBX_TOPO_H
#define OOBX_TOPO_H

#include <stdio.h>
#include <stddef.h>
#include <sys/socket.h>
#include <netinet/in.h>

#define TOPO_NAME_MAX 64

typedef struct topo_if {
    char name[TOPO_NAME_MAX];
    int family;                      /* AF_INET or AF_INET6 */
    struct sockaddr_storage addr;    /* the interface address, port 0 (sin6_scope_id set for link-local) */
    socklen_t addrlen;
    int prefixlen;
    int up, loopback, linklocal;     /* up: IFF_UP and IFF_RUNNING; linklocal: IPv6 fe80::/10 */
} topo_if_t;

/* NCCL's grammar: a comma-separated list of name prefixes; a leading '^'
 * makes it an exclude list, a leading '=' (after the optional '^') makes the
 * entries exact names. NULL or "" matches everything. 1 match, 0 not. */
int oobx__topo_ifname_match(const char *spec, const char *ifname);

/* Interfaces that are administratively up and have an IPv4 or IPv6 address
 * (getifaddrs), one entry per address, in the system's order; `up` is 0 for
 * an interface without carrier. Caller frees *out. */
int oobx__topo_if_list(topo_if_t **out, int *n);

typedef struct topo_request {
    const char *ifname_spec;         /* OOBX_SOCKET_IFNAME, or NULL/"" */
    int family;                      /* AF_UNSPEC, AF_INET, AF_INET6 */
    int allow_linklocal;             /* IPv6 link-local allowed */
    const struct sockaddr *match;    /* root address for subnet matching, or NULL */
    socklen_t matchlen;
    const char *pci_target;          /* "0000:3b:00.0" or NULL/"" */
    const char *cpuset_target;       /* hwloc list string "0-3" (tests); NULL: calling thread's binding */
    const char *xml_path;            /* topology XML (tests); NULL: this machine */
    const char *net_device;          /* OOBX_NET_DEVICE or NULL/"": when set, oobx__topo_pick_device
                                        returns the candidate it names and oobx__topo_report says so */
    const char *module_dir;          /* where liboobx-topo.so is (OOBX_MODULE_DIR); NULL/"": the library's own */
} topo_request_t;

/* Picks the socket interface for req on this machine. Returns 0 (OOBX_SUCCESS) and *out, with a one-line
 * reason in why ("lo: subnet 127.0.0.0/8 holds the root 127.0.0.1"), or OOBX_ERR_UNAVAILABLE with why
 * naming what was found and what filtered it. OOBX_ERR_INVALID for a malformed pci_target or
 * cpuset_target. */
int oobx__topo_pick_if(const topo_request_t *req, topo_if_t *out, char *why, size_t whylen);
/* The same over a given list (for tests and for oobx__topo_pick_if itself). */
int oobx__topo_pick_if_from(const topo_if_t *ifs, int n, const topo_request_t *req, topo_if_t *out,
                      char *why, size_t whylen);

/* RDMA / network devices, ranked for the target (closest first); for UCX and verbs. */
enum { TOPO_DEV_NET = 1, TOPO_DEV_RDMA = 2 };
enum { TOPO_CLOSE_SWITCH = 0, TOPO_CLOSE_NUMA = 1, TOPO_CLOSE_PACKAGE = 2, TOPO_CLOSE_ANY = 3, TOPO_CLOSE_UNKNOWN = 4 };
typedef struct topo_dev {
    char name[TOPO_NAME_MAX];        /* "eth0", "mlx5_0" */
    int kind;                        /* TOPO_DEV_* */
    char pci[32];                    /* "0000:3b:00.0" or "" */
    int numa;                        /* NUMA node os index or -1 */
    int package;                     /* package os index or -1 */
    int closeness;                   /* TOPO_CLOSE_* for the request's target */
} topo_dev_t;
/* Lists devices of kind (0 = both) ranked for req's target (pci_target, else cpuset_target, else the
 * calling thread's binding; xml_path for tests). OOBX_ERR_UNAVAILABLE with why when hwloc is not built
 * in or the topology cannot be loaded; OOBX_ERR_INVALID for a malformed target. On success why says
 * what the target was. Caller frees *out (NULL when *n is 0). */
int oobx__topo_rank_devices(const topo_request_t *req, int kind, topo_dev_t **out, int *n, char *why, size_t whylen);
/* For UCX/verbs: picks the device among the candidate names (as the transport lists them) closest to the
 * target; keeps candidate order when hwloc cannot tell. Returns index into names, and why.
 * A candidate "mlx5_0:1" (device:port) is located by its device part. When req->net_device is set, the
 * candidate it names is returned: the same name, or "mlx5_0" naming "mlx5_0:1", or "mlx5_0:1" naming a
 * candidate listed without port ("mlx5_0"); OOBX_ERR_UNAVAILABLE when it names none.
 * OOBX_ERR_INVALID for no candidates or a malformed target. */
int oobx__topo_pick_device(const topo_request_t *req, const char *const *names, int nnames, char *why, size_t whylen);
/* For a transport that cannot list its devices before it starts (UCX narrows
 * NET_DEVICES before ucp_init): the RDMA device hwloc ranks closest to req's target.
 * OOBX_SUCCESS with its name in out only when there is a choice to make (several
 * RDMA devices, not all equally close); otherwise OOBX_ERR_UNAVAILABLE, with why
 * saying why the library's own order should be kept. OOBX_ERR_INVALID for a
 * malformed target. */
int oobx__topo_closest_rdma(const topo_request_t *req, char *out, size_t outlen, char *why, size_t whylen);
/* For `oobx-info -t`: prints devices, their locality, and what socket/ucx/verbs would pick, and why.
 * req NULL: the request is built from the OOBX_* settings of the environment. */
void oobx__topo_report(FILE *out, const topo_request_t *req);

/* ---- the hwloc module: liboobx-topo.so, topo/topo_hwloc.c ---- */
#define OOBX_TOPO_MODULE "liboobx-topo.so"
#define OOBX_TOPO_MODULE_INIT "oobx_topo_module_init"
#define OOBX_TOPO_MODULE_VERSION 1
typedef struct oobx_topo_module {
    int version;                     /* OOBX_TOPO_MODULE_VERSION */
    size_t req_size, dev_size;       /* sizeof(topo_request_t), sizeof(topo_dev_t) as the module was built */
    /* oobx__topo_rank_devices' work, once the core has checked the arguments */
    int (*rank_devices)(const topo_request_t *req, int kind, topo_dev_t **out, int *n, char *why, size_t whylen);
} oobx_topo_module_t;
typedef const oobx_topo_module_t *(*oobx_topo_module_init_fn)(void);
/* 1 when req's module directory has a hwloc module this library can use (why: its path), else 0 (why:
 * what is missing or wrong). For `oobx-info -t`. */
int oobx__topo_hwloc_loads(const topo_request_t *req, char *why, size_t whylen);

/* ---- shared inside topo/ (and reachable by the unit tests) ---- */

/* "0000:3b:00.0", "3b:00.0" (domain 0), any case. 0 and the parts, or OOBX_ERR_INVALID. */
int oobx__topo_pci_parse(const char *s, unsigned *domain, unsigned *bus, unsigned *dev, unsigned *func);
/* Closeness of each name (a device or interface name; "dev:port" is located by "dev") for req's
 * target: closeness[i] = TOPO_CLOSE_*, TOPO_CLOSE_UNKNOWN for a name hwloc does not list.
 * OOBX_ERR_UNAVAILABLE with why when hwloc cannot tell. */
int oobx__topo_rank_names(const topo_request_t *req, const char *const *names, int n, int *closeness,
                    char *why, size_t whylen);
/* printf into why (whylen bytes); nothing when why is NULL or whylen 0 */
void oobx__topo_why(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "switch", "numa", "package", "any", "unknown" */
const char *oobx__topo_closeness_name(int closeness);
/* 1 when the interface is a container or VM bridge (docker*, virbr*, veth*): chosen after real ones. */
int oobx__topo_if_is_virtual(const char *ifname);
/* "10.0.0.7/24" or "fe80::1%eth0/64" */
void oobx__topo_if_format(const topo_if_t *ifc, char *buf, size_t len);
/* 1 when addr lies in ifc's subnet (an IPv4-mapped IPv6 addr counts as IPv4). */
int oobx__topo_if_holds(const topo_if_t *ifc, const struct sockaddr *addr, socklen_t addrlen);

#endif /* OOBX_TOPO_H */
