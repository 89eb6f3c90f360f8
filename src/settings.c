#include "settings.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "log.h"
#include "tp_table.h"
#include "wire.h"

#define S_(field) offsetof(oobx_settings_t, field), sizeof(((oobx_settings_t *)0)->field)

const oobx_setting_desc_t oobx__settings_table[] = {
    {"OOBX_TRANSPORT", "auto", "transport of the ring, allgather and p2p: auto, socket, ucx, verbs (auto: ucx when its module loads and a worker can be made, else verbs when its module loads and finds an RDMA device, else socket; socket first when the launcher puts the whole job on this host)", OOBX_SET_STR, S_(transport), 0, 0},
    {"OOBX_TIMEOUT_MS", "120000", "bound of each blocking call in ms, init included; -1 waits forever", OOBX_SET_INT, S_(timeout_ms), -1, INT_MAX},
    {"OOBX_SOCKET_IFNAME", "", "interfaces for sockets: prefix list (eth,ib), ^ excludes (^docker,lo), = exact (=eth0); empty: automatic", OOBX_SET_STR, S_(socket_ifname), 0, 0},
    {"OOBX_SOCKET_FAMILY", "", "address family for sockets: AF_INET or AF_INET6 (also 4, 6); empty: either", OOBX_SET_FAMILY, S_(socket_family), 0, 0},
    {"OOBX_SOCKET_LINKLOCAL", "0", "1 allows IPv6 link-local addresses", OOBX_SET_BOOL, S_(socket_linklocal), 0, 0},
    {"OOBX_COMM_ID", "", "fixed root addresses host:port[,host:port...] for oobx_comm_init_from_env; root i is hosted by the first rank of block i", OOBX_SET_STR, S_(comm_id), 0, 0},
    {"OOBX_JOB_KEY", "", "secret key mixed into the job secret of env-started jobs (with the launcher's job identity): only processes that know it can join", OOBX_SET_STR, S_(job_key), 0, 0},
    {"OOBX_JOB_KEY_FILE", "", "file holding the job key (mode 600, this user's), instead of OOBX_JOB_KEY", OOBX_SET_STR, S_(job_key_file), 0, 0},
    {"OOBX_UID_STAGGER_RATE", "7000", "connections per second to a root when staggering", OOBX_SET_INT, S_(stagger_rate), 1, 10000000},
    {"OOBX_UID_STAGGER_THRESHOLD", "256", "ranks per root above which ranks stagger their first contact", OOBX_SET_INT, S_(stagger_threshold), 0, OOBX_NRANKS_MAX},
    {"OOBX_NET_DEVICE", "", "device for the OOB ring on ucx/verbs (UCX device such as mlx5_0:1, or HCA); empty: closest by topology", OOBX_SET_STR, S_(net_device), 0, 0},
    {"OOBX_ALLGATHER_ALGO", "auto", "allgather algorithm: auto, direct, ring, bruck, tree (auto: direct for slices of OOBX_ALLGATHER_DIRECT_MIN bytes and more, ring for other large totals; for small ones Bruck, or tree (gather + broadcast, fewer messages) when a host runs more ranks than it has CPUs; direct: ranks of one host read each other's slices from their buffers, at every size, the ring where they cannot)", OOBX_SET_STR, S_(allgather_algo), 0, 0},
    {"OOBX_ALLGATHER_BRUCK_MAX", "65536", "auto picks Bruck while nranks*bytes_per_rank is at most this, else the ring", OOBX_SET_SIZE, S_(bruck_max_bytes), 0, 1ll << 40},
    {"OOBX_ALLGATHER_DIRECT_MIN", "64K", "auto picks the direct allgather for slices of at least this many bytes: when every rank is on one host, each reads the others' slices straight from their buffers (Linux cross-memory attach, one copy, any transport; the ring where the kernel does not allow it); 0: never", OOBX_SET_SIZE, S_(direct_min), 0, 1ll << 40},
    {"OOBX_ALLGATHER_STAGE_MIN", "4", "a direct allgather of at least this many ranks from plain memory first copies each rank's slice into a region of its own that the peers map, so that they read it at memcpy speed rather than through the kernel's copy (process_vm_readv); 0: never", OOBX_SET_INT, S_(stage_min), 0, OOBX_NRANKS_MAX},
    {"OOBX_CHUNK_BYTES", "262144", "pipeline chunk of the ring allgather and broadcast", OOBX_SET_SIZE, S_(chunk_bytes), 1024, 1ll << 30},
    {"OOBX_UNEXPECTED_MAX", "1g", "bytes of messages no receive was posted for that one sender may have waiting; more fails that sender", OOBX_SET_SIZE, S_(unexpected_max), 65536, 1ll << 44},
    {"OOBX_SPIN_US", "-1", "microseconds to poll without sleeping before blocking on file descriptors: -1 adapts (up to 50 us, from the recent waits, when no host runs more ranks than it has CPUs; never when one does), 0 never polls", OOBX_SET_INT, S_(spin_us), -1, 1000000},
    {"OOBX_TOPO_PCI", "", "PCI bus id (a GPU's) to pick the closest network device for; empty: this thread's CPUs", OOBX_SET_STR, S_(topo_pci), 0, 0},
    {"OOBX_RING_SLOT_BYTES", "65536", "slot size of a registered ring buffer", OOBX_SET_SIZE, S_(ring_slot_bytes), 256, 1ll << 24},
    {"OOBX_RING_SLOTS", "16", "slots per registered ring buffer", OOBX_SET_INT, S_(ring_slots), 2, 4096},
    {"OOBX_NODE_AWARE", "1", "1: ranks of one host share one card table in shared memory and only one leader per host trades cards with the other hosts; 0: every card travels the ring of all ranks", OOBX_SET_BOOL, S_(node_aware), 0, 0},
    {"OOBX_NODE_AWARE_MIN", "128", "communicators of fewer ranks use the flat bootstrap even with OOBX_NODE_AWARE=1 (below this size the ring is as fast)", OOBX_SET_INT, S_(node_aware_min), 1, OOBX_NRANKS_MAX},
    {"OOBX_HOST_ID", "", "names this rank's host for the node-aware bootstrap (ranks with the same id share memory); empty: the host name (set it for emulated hosts, or containers that share a host name but no /dev/shm)", OOBX_SET_STR, S_(host_id), 0, 0},
    {"OOBX_NODE_EXCHANGE", "bruck", "how the hosts' leaders trade init's cards and a node-aware allgather's slices: bruck (log2 of the hosts steps, each leader to the leaders 1, 2, 4... away; at init each step's partner tells the next one's address) or ring (both ways, about half the hosts hops); the same on every rank", OOBX_SET_STR, S_(node_exchange), 0, 0},
    {"OOBX_NODE_DIR", "/dev/shm", "directory of the host segments of the node-aware bootstrap (a tmpfs every rank of the host sees)", OOBX_SET_STR, S_(node_dir), 0, 0},
    {"OOBX_NODE_BUF", "4M", "bytes of each of the two shared buffers of the node-aware allgather: an allgather of at most this many bytes in all goes through the host's shared memory and its leader; 0: never", OOBX_SET_SIZE, S_(node_buf), 0, 1ll << 32},
    {"OOBX_CMA_MIN", "256K", "payloads of at least this many bytes to a rank of the same host are read by the receiver straight from the sender's buffer (Linux cross-memory attach, one copy; socket and UCX transports), where the kernel allows it; 0: never (and no direct allgather)", OOBX_SET_SIZE, S_(cma_min), 0, 1ll << 40},
    {"OOBX_MODULE_DIR", "", "directory of the transport modules (liboobx-ucx.so, liboobx-verbs.so); empty: the one fixed at build or install time", OOBX_SET_STR, S_(module_dir), 0, 0},
    {"OOBX_RDMA_SYSFS", "/sys/class/infiniband", "where OOBX_TRANSPORT=auto looks for RDMA devices (one directory each, with ports/N/state): a job over several hosts takes UCX only when this host has one with an active port; without one, UCX would carry everything over TCP, where the socket transport is faster", OOBX_SET_STR, S_(rdma_sysfs), 0, 0},
    {"OOBX_FAILURE", "job", "job: when a rank fails, every rank's blocked and later calls of the communicators that contain it return OOBX_ERR_REMOTE naming it (the news spreads in log2(N) steps); local: only the calls that wait on the failed rank fail", OOBX_SET_STR, S_(failure), 0, 0},
    {"OOBX_LOG_LEVEL", "warn", "none, error, warn, info, debug, trace", OOBX_SET_LEVEL, S_(log_level), 0, 0},
    {"OOBX_LOG_FILE", "", "log to this file instead of stderr; %h host, %p pid", OOBX_SET_STR, S_(log_file), 0, 0},
    {NULL, NULL, NULL, 0, 0, 0, 0, 0},
};

static int parse_size(const char *v, size_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 0);
    if (errno || end == v || v[0] == '-') return -1;
    while (*end == ' ') end++;
    unsigned long long mult = 1;
    if (*end) {
        switch (*end) {
        case 'k': case 'K': mult = 1ull << 10; break;
        case 'm': case 'M': mult = 1ull << 20; break;
        case 'g': case 'G': mult = 1ull << 30; break;
        default: return -1;
        }
        end++;
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'b' || *end == 'B') end++;
        if (*end) return -1;
    }
    if (n > SIZE_MAX / mult) return -1;
    *out = (size_t)(n * mult);
    return 0;
}

static int parse_one(void *s, const oobx_setting_desc_t *d, const char *v)
{
    char *field = (char *)s + d->offset;
    char *end = NULL;
    long n;
    switch (d->type) {
    case OOBX_SET_STR:
        if (strlen(v) >= d->size) return -1;
        memcpy(field, v, strlen(v) + 1);
        return 0;
    case OOBX_SET_INT:
    case OOBX_SET_BOOL:
        errno = 0;
        n = strtol(v, &end, 10);
        if (errno || end == v || *end || n < INT_MIN || n > INT_MAX) return -1;
        if (d->type == OOBX_SET_BOOL && n != 0 && n != 1) return -1;
        *(int *)field = (int)n;
        return 0;
    case OOBX_SET_SIZE:
        return parse_size(v, (size_t *)field);
    case OOBX_SET_LEVEL: {
        static const char *const names[] = {"none", "error", "warn", "info", "debug", "trace"};
        for (int i = 0; i < 6; i++)
            if (!strcasecmp(v, names[i])) {
                *(int *)field = i;
                return 0;
            }
        if (!strcasecmp(v, "warning")) {
            *(int *)field = OOBX_LOG_WARN;
            return 0;
        }
        return -1;
    }
    case OOBX_SET_FAMILY:
        if (!v[0]) *(int *)field = AF_UNSPEC;
        else if (!strcasecmp(v, "AF_INET") || !strcmp(v, "4") || !strcasecmp(v, "ipv4")) *(int *)field = AF_INET;
        else if (!strcasecmp(v, "AF_INET6") || !strcmp(v, "6") || !strcasecmp(v, "ipv6")) *(int *)field = AF_INET6;
        else return -1;
        return 0;
    }
    return -1;
}

int oobx__settings_parse(const oobx_setting_desc_t *table, void *base, const oobx_log_t *log)
{
    for (const oobx_setting_desc_t *d = table; d->name; d++)
        if (parse_one(base, d, d->def) != 0)
            return oobx__fail(log, OOBX_ERR_INTERNAL, "default of %s (%s) does not parse", d->name, d->def);
    for (const oobx_setting_desc_t *d = table; d->name; d++) {
        const char *v = getenv(d->name);
        if (!v) continue;
        if (parse_one(base, d, v) != 0)
            return oobx__fail(log, OOBX_ERR_INVALID, "%s=\"%s\" is not valid: %s (default %s)", d->name, v, d->doc,
                             d->def[0] ? d->def : "empty");
        if (d->min == 0 && d->max == 0) continue;
        const char *field = (const char *)base + d->offset;
        long long x = d->type == OOBX_SET_SIZE ? (long long)*(const size_t *)field : (long long)*(const int *)field;
        if (d->type == OOBX_SET_SIZE && *(const size_t *)field > (size_t)LLONG_MAX) x = LLONG_MAX;
        if (x < d->min || x > d->max)
            return oobx__fail(log, OOBX_ERR_INVALID, "%s=\"%s\" is out of range: %lld..%lld allowed (%s; default %s)",
                              d->name, v, d->min, d->max, d->doc, d->def[0] ? d->def : "empty");
    }
    return OOBX_SUCCESS;
}

int oobx__settings_load(oobx_settings_t *s, const oobx_config_t *cfg)
{
    memset(s, 0, sizeof(*s));
    s->local_rank = s->local_size = -1;
    int rc = oobx__settings_parse(oobx__settings_table, s, NULL);
    if (rc != 0) return rc;
    if (cfg) {
        if (cfg->struct_size < offsetof(oobx_config_t, abort_flag) + sizeof(cfg->abort_flag))
            return oobx__fail(NULL, OOBX_ERR_INVALID,
                             "oobx_config_t.struct_size is %zu; initialize the config with OOBX_CONFIG_INIT",
                             cfg->struct_size);
        if (cfg->transport) {
            if (strlen(cfg->transport) >= sizeof(s->transport))
                return oobx__fail(NULL, OOBX_ERR_INVALID, "config transport \"%s\" is too long", cfg->transport);
            strcpy(s->transport, cfg->transport);
        }
        if (cfg->timeout_ms != 0) s->timeout_ms = cfg->timeout_ms < 0 ? -1 : cfg->timeout_ms;
        if (cfg->struct_size >= offsetof(oobx_config_t, topo_pci) + sizeof(cfg->topo_pci) && cfg->topo_pci) {
            if (strlen(cfg->topo_pci) >= sizeof(s->topo_pci))
                return oobx__fail(NULL, OOBX_ERR_INVALID, "config topo_pci \"%s\" is too long", cfg->topo_pci);
            strcpy(s->topo_pci, cfg->topo_pci);
        }
    }
    if (s->timeout_ms == 0) s->timeout_ms = 120000;
    if (strcmp(s->transport, "auto") && !oobx__tp_find(s->transport)) {
        char names[128];
        oobx__tp_names(names, sizeof(names));
        return oobx__fail(NULL, OOBX_ERR_INVALID, "%s=\"%s\" is not one of auto, %s",
                         cfg && cfg->transport ? "oobx_config_t.transport" : "OOBX_TRANSPORT", s->transport, names);
    }
    if (strcmp(s->allgather_algo, "auto") && strcmp(s->allgather_algo, "ring") && strcmp(s->allgather_algo, "bruck") &&
        strcmp(s->allgather_algo, "tree") && strcmp(s->allgather_algo, "direct"))
        return oobx__fail(NULL, OOBX_ERR_INVALID, "OOBX_ALLGATHER_ALGO=\"%s\" is not one of auto, direct, ring, bruck, tree",
                         s->allgather_algo);
    if (strcmp(s->node_exchange, "bruck") && strcmp(s->node_exchange, "ring"))
        return oobx__fail(NULL, OOBX_ERR_INVALID, "OOBX_NODE_EXCHANGE=\"%s\" is not one of bruck, ring", s->node_exchange);
    if (strcmp(s->failure, "job") && strcmp(s->failure, "local"))
        return oobx__fail(NULL, OOBX_ERR_INVALID, "OOBX_FAILURE=\"%s\" is not one of job, local", s->failure);
    return OOBX_SUCCESS;
}
