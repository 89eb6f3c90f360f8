/*
 * The emulated RDMA device, libibverbs side: devices, contexts, protection
 * domains, memory regions, completion queues and channels, and the device
 * thread that moves the data (emu_wire.c) and runs the connection manager
 * (emu_cm.c). docs/transports/verbs-emu.md describes the device.
 *
 * The definitions carry the names and prototypes of libibverbs, so that a
 * program linked with -libverbs runs on the emulation under LD_PRELOAD, or a
 * test links these objects instead of the library.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "emu.h"

struct emu_registry emu_reg = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .epfd = -1,
    .stopfd = -1,
    .join_epfd = -1,
    .join_stopfd = -1,
};

/* ---- locking, fork, logging ---------------------------------------------- */

static void emu_atfork_prepare(void) { pthread_mutex_lock(&emu_reg.lock); }
static void emu_atfork_parent(void) { pthread_mutex_unlock(&emu_reg.lock); }

/* The child has no device thread: it starts with an empty registry. Objects
 * opened before fork() are unusable in the child (documented). */
static void emu_atfork_child(void)
{
    /* the lock was taken by the forking thread in prepare: that is this thread now */
    if (emu_reg.epfd >= 0) close(emu_reg.epfd);
    if (emu_reg.stopfd >= 0) close(emu_reg.stopfd);
    emu_reg.users = 0;
    emu_reg.running = false;
    emu_reg.epfd = emu_reg.stopfd = -1;
    emu_reg.join_pending = false;
    emu_reg.join_epfd = emu_reg.join_stopfd = -1;
    emu_reg.grave = NULL;
    emu_reg.conns = NULL;
    memset(emu_reg.mr_hash, 0, sizeof(emu_reg.mr_hash));
    for (struct emu_dev *d = emu_reg.devs; d; d = d->next) d->cm_ctx = NULL;
    pthread_mutex_unlock(&emu_reg.lock);
}

void emu_lock(void)
{
    pthread_mutex_lock(&emu_reg.lock);
    if (!emu_reg.atfork_done) {
        emu_reg.atfork_done = true;
        pthread_atfork(emu_atfork_prepare, emu_atfork_parent, emu_atfork_child);
    }
}

void emu_unlock(void)
{
    bool join = emu_reg.join_pending;
    pthread_t t = emu_reg.join_thread;
    int epfd = emu_reg.join_epfd, stopfd = emu_reg.join_stopfd;
    emu_reg.join_pending = false;
    emu_reg.join_epfd = emu_reg.join_stopfd = -1;
    pthread_mutex_unlock(&emu_reg.lock);
    if (join) {
        pthread_join(t, NULL);
        close(epfd);
        close(stopfd);
    }
}

bool emu_debug(void)
{
    const char *s = getenv("OOBX_VERBS_EMU_DEBUG");
    return s && *s && strcmp(s, "0") != 0;
}

void emu_log(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "oobx-verbs-emu[%d]: %s\n", (int)getpid(), buf);
}

void emu_dlog(const char *fmt, ...)
{
    if (!emu_debug()) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "oobx-verbs-emu[%d]: %s\n", (int)getpid(), buf);
}

/* ---- eventfd helpers ------------------------------------------------------ */

void emu_fd_signal(int fd, bool *signaled, bool on)
{
    if (on && !*signaled) {
        uint64_t one = 1;
        if (write(fd, &one, sizeof(one)) == (ssize_t)sizeof(one)) *signaled = true;
    } else if (!on && *signaled) {
        uint64_t v;
        if (read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v)) *signaled = false;
    }
}

int emu_fd_wait(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) return -1;
    if (fl & O_NONBLOCK) {
        errno = EAGAIN;
        return -1;
    }
    struct pollfd p = { .fd = fd, .events = POLLIN };
    for (;;) {
        int r = poll(&p, 1, -1);
        if (r > 0) return 0;
        if (r < 0 && errno != EINTR) return -1;
    }
}

/* ---- the device thread ---------------------------------------------------- */

static void emu_poll_free(struct emu_poll *p)
{
    if (p->kind == EMU_POLL_CONN) {
        struct emu_conn *c = (struct emu_conn *)p;
        free(c->rbuf);
        free(c);
    } else {
        free(p);
    }
}

/* frees the closed pollables no epoll result can name any more */
static void emu_grave_sweep(uint64_t epoch, uint64_t before_cycle, bool all_of_epoch)
{
    struct emu_poll **pp = &emu_reg.grave;
    while (*pp) {
        struct emu_poll *p = *pp;
        bool done = p->grave_epoch < epoch ||
                    (p->grave_epoch == epoch && (all_of_epoch || p->grave_cycle < before_cycle));
        if (done) {
            *pp = p->grave_next;
            emu_poll_free(p);
        } else {
            pp = &p->grave_next;
        }
    }
}

struct emu_thread_arg {
    int epfd;
    uint64_t epoch;
};

static void *emu_thread_main(void *argp)
{
    struct emu_thread_arg arg = *(struct emu_thread_arg *)argp;
    free(argp);
    struct epoll_event evs[64];
    for (;;) {
        pthread_mutex_lock(&emu_reg.lock);
        if (!emu_reg.running || emu_reg.epoch != arg.epoch) break;
        emu_reg.cycle++;
        emu_grave_sweep(arg.epoch, emu_reg.cycle, false);
        pthread_mutex_unlock(&emu_reg.lock);

        int n = epoll_wait(arg.epfd, evs, 64, -1);
        if (n < 0 && errno != EINTR) {
            emu_log("device thread: epoll_wait: %s", strerror(errno));
            pthread_mutex_lock(&emu_reg.lock);
            break;
        }
        pthread_mutex_lock(&emu_reg.lock);
        if (!emu_reg.running || emu_reg.epoch != arg.epoch) break;
        for (int i = 0; i < n; i++) {
            struct emu_poll *p = evs[i].data.ptr;
            if (p->dead) continue;
            if (p->kind == EMU_POLL_STOP) continue;
            if (p->kind == EMU_POLL_LISTENER)
                emu_listener_on_events((struct emu_listener *)p);
            else if (p->kind == EMU_POLL_CONN)
                emu_conn_on_events((struct emu_conn *)p, evs[i].events);
        }
        pthread_mutex_unlock(&emu_reg.lock);
    }
    /* lock held */
    if (emu_reg.epoch == arg.epoch) emu_grave_sweep(arg.epoch, 0, true);
    pthread_mutex_unlock(&emu_reg.lock);
    return NULL;
}

int emu_users_get(void)
{
    if (emu_reg.users++ > 0) return 0;
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    int stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct emu_thread_arg *arg = malloc(sizeof(*arg));
    int err = 0;
    if (epfd < 0 || stopfd < 0 || !arg) err = errno ? errno : ENOMEM;
    if (!err) {
        emu_reg.stop_poll.kind = EMU_POLL_STOP;
        emu_reg.stop_poll.fd = stopfd;
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &emu_reg.stop_poll };
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, stopfd, &ev) < 0) err = errno;
    }
    if (!err) {
        emu_reg.epoch++;
        emu_reg.cycle = 0;
        arg->epfd = epfd;
        arg->epoch = emu_reg.epoch;
        emu_reg.epfd = epfd;
        emu_reg.stopfd = stopfd;
        emu_reg.running = true;
        err = pthread_create(&emu_reg.thread, NULL, emu_thread_main, arg);
        if (err) emu_reg.running = false;
    }
    if (err) {
        emu_log("cannot start the device thread: %s", strerror(err));
        if (epfd >= 0) close(epfd);
        if (stopfd >= 0) close(stopfd);
        free(arg);
        emu_reg.epfd = emu_reg.stopfd = -1;
        emu_reg.users--;
        return err;
    }
    return 0;
}

void emu_users_put(void)
{
    if (--emu_reg.users > 0) return;
    /* an earlier stopped thread not yet joined: join it here, rarely needed */
    if (emu_reg.join_pending) {
        pthread_mutex_unlock(&emu_reg.lock);
        pthread_join(emu_reg.join_thread, NULL);
        pthread_mutex_lock(&emu_reg.lock);
        close(emu_reg.join_epfd);
        close(emu_reg.join_stopfd);
    }
    uint64_t one = 1;
    emu_reg.running = false;
    if (write(emu_reg.stopfd, &one, sizeof(one)) < 0) emu_log("stop device thread: %s", strerror(errno));
    emu_reg.join_pending = true;
    emu_reg.join_thread = emu_reg.thread;
    emu_reg.join_epfd = emu_reg.epfd;
    emu_reg.join_stopfd = emu_reg.stopfd;
    emu_reg.epfd = emu_reg.stopfd = -1;
}

void emu_poll_set(struct emu_poll *p, uint32_t events)
{
    if (p->fd < 0 || emu_reg.epfd < 0) return;
    if (p->registered && p->events == events) return;
    struct epoll_event ev = { .events = events, .data.ptr = p };
    if (epoll_ctl(emu_reg.epfd, p->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, p->fd, &ev) < 0)
        emu_log("epoll_ctl on socket %d: %s", p->fd, strerror(errno));
    p->registered = true;
    p->events = events;
}

void emu_poll_kill(struct emu_poll *p)
{
    if (p->fd >= 0) {
        if (p->registered && emu_reg.epfd >= 0) epoll_ctl(emu_reg.epfd, EPOLL_CTL_DEL, p->fd, NULL);
        p->registered = false;
        close(p->fd);
        p->fd = -1;
    }
    p->dead = true;
    if (emu_reg.running) {
        p->grave_epoch = emu_reg.epoch;
        p->grave_cycle = emu_reg.cycle;
        p->grave_next = emu_reg.grave;
        emu_reg.grave = p;
    } else {
        emu_poll_free(p);
    }
}

/* ---- devices --------------------------------------------------------------- */

static uint64_t emu_name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static struct emu_dev *emu_dev_get(const char *name)
{
    int idx = 0;
    for (struct emu_dev *d = emu_reg.devs; d; d = d->next, idx++)
        if (strcmp(d->dev.name, name) == 0) return d;
    struct emu_dev *d = calloc(1, sizeof(*d));
    if (!d) return NULL;
    d->dev.node_type = IBV_NODE_CA;
    d->dev.transport_type = IBV_TRANSPORT_IB;
    snprintf(d->dev.name, sizeof(d->dev.name), "%s", name);
    snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", idx);
    snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "/sys/class/infiniband_verbs/uverbs%d", idx);
    snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "/sys/class/infiniband/%s", name);
    /* a stable, locally administered EUI-64 */
    d->guid = (emu_name_hash(name) & 0x00ffffffffffffffull) | 0x0200000000000000ull;
    struct emu_dev **pp = &emu_reg.devs;
    while (*pp) pp = &(*pp)->next;
    *pp = d;
    return d;
}

/* names of OOBX_VERBS_EMU_DEVICES (unset: "emu0"); fills out[], returns the count */
static int emu_dev_names(struct emu_dev **out, int max)
{
    const char *env = getenv("OOBX_VERBS_EMU_DEVICES");
    if (!env) env = "emu0";
    int n = 0;
    const char *s = env;
    while (*s && n < max) {
        size_t len = strcspn(s, ", ");
        if (len > 0 && len < IBV_SYSFS_NAME_MAX) {
            char name[IBV_SYSFS_NAME_MAX];
            memcpy(name, s, len);
            name[len] = 0;
            struct emu_dev *d = emu_dev_get(name);
            bool dup = false;
            for (int i = 0; i < n; i++) dup |= out[i] == d;
            if (d && !dup) out[n++] = d;
        }
        s += len;
        while (*s == ',' || *s == ' ') s++;
    }
    return n;
}

#define EMU_MAX_DEVS 32

struct emu_dev *emu_dev_for_addr(const struct sockaddr *sa)
{
    struct emu_dev *devs[EMU_MAX_DEVS];
    int n = emu_dev_names(devs, EMU_MAX_DEVS);
    if (n == 0) return NULL;
    const char *map = getenv("OOBX_VERBS_EMU_MAP");
    if (map && sa) {
        char want[INET6_ADDRSTRLEN] = "";
        if (sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, want, sizeof(want));
        else if (sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, want, sizeof(want));
        const char *s = map;
        while (*s) {
            size_t len = strcspn(s, ",");
            char item[256];
            if (len < sizeof(item)) {
                memcpy(item, s, len);
                item[len] = 0;
                char *eq = strchr(item, '=');
                if (eq) {
                    *eq = 0;
                    if (strcmp(eq + 1, want) == 0)
                        for (int i = 0; i < n; i++)
                            if (strcmp(devs[i]->dev.name, item) == 0) return devs[i];
                }
            }
            s += len;
            if (*s == ',') s++;
        }
    }
    return devs[0];
}

struct ibv_device **ibv_get_device_list(int *num_devices)
{
    emu_lock();
    struct emu_dev *devs[EMU_MAX_DEVS];
    int n = emu_dev_names(devs, EMU_MAX_DEVS);
    struct ibv_device **list = calloc((size_t)n + 1, sizeof(*list));
    if (list)
        for (int i = 0; i < n; i++) list[i] = &devs[i]->dev;
    emu_unlock();
    if (!list) {
        errno = ENOMEM;
        if (num_devices) *num_devices = 0;
        return NULL;
    }
    if (num_devices) *num_devices = n;
    return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
    return device ? device->name : NULL;
}

__be64 ibv_get_device_guid(struct ibv_device *device)
{
    return htobe64(((struct emu_dev *)device)->guid);
}

int ibv_fork_init(void)
{
    return 0;
}

/* ---- contexts and queries ------------------------------------------------ */

static void emu_port_fill(struct ibv_port_attr *a, bool with_flags2)
{
    a->state = IBV_PORT_ACTIVE;
    a->max_mtu = IBV_MTU_4096;
    a->active_mtu = IBV_MTU_4096;
    a->gid_tbl_len = 16;
    a->port_cap_flags = IBV_PORT_CM_SUP;
    a->max_msg_sz = (uint32_t)EMU_MAX_MSG;
    a->pkey_tbl_len = 1;
    a->lid = 0;
    a->sm_lid = 0;
    a->max_vl_num = 1;
    a->active_width = 2;  /* 4x */
    a->active_speed = 32; /* EDR-like */
    a->phys_state = 5;    /* LinkUp */
    a->link_layer = IBV_LINK_LAYER_ETHERNET;
    if (with_flags2) a->port_cap_flags2 = 0;
}

/* the verbs_context entry the ibv_query_port() header inline calls */
static int emu_query_port_ex(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr,
                             size_t len)
{
    (void)ctx;
    if (port != 1) return EINVAL;
    struct ibv_port_attr a;
    memset(&a, 0, sizeof(a));
    emu_port_fill(&a, true);
    memset(attr, 0, len);
    memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
    return 0;
}

#undef ibv_query_port
int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                   struct _compat_ibv_port_attr *port_attr)
{
    (void)context;
    if (port_num != 1) return EINVAL;
    /* the old layout ends before port_cap_flags2 */
    struct ibv_port_attr a;
    memset(&a, 0, sizeof(a));
    emu_port_fill(&a, false);
    memcpy(port_attr, &a, offsetof(struct ibv_port_attr, port_cap_flags2));
    return 0;
}

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *a)
{
    struct emu_dev *d = (struct emu_dev *)context->device;
    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "oobx-emu 1.0");
    a->node_guid = htobe64(d->guid);
    a->sys_image_guid = htobe64(d->guid);
    a->max_mr_size = EMU_MAX_MR_SIZE;
    a->page_size_cap = 4096;
    a->vendor_id = 0x1af4;
    a->max_qp = 65536;
    a->max_qp_wr = EMU_MAX_QP_WR;
    a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT;
    a->max_sge = EMU_MAX_SGE;
    a->max_sge_rd = EMU_MAX_SGE;
    a->max_cq = 65536;
    a->max_cqe = EMU_MAX_CQE;
    a->max_mr = 1 << 20;
    a->max_pd = 65536;
    a->max_qp_rd_atom = EMU_MAX_RD_ATOM;
    a->max_res_rd_atom = EMU_MAX_RD_ATOM * 65536;
    a->max_qp_init_rd_atom = EMU_MAX_RD_ATOM;
    a->atomic_cap = IBV_ATOMIC_NONE;
    a->max_pkeys = 1;
    a->local_ca_ack_delay = 16;
    a->phys_port_cnt = 1;
    return 0;
}

struct emu_ctx *emu_ctx_new(struct emu_dev *dev)
{
    struct emu_ctx *c = calloc(1, sizeof(*c));
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    int err = emu_users_get();
    if (err) {
        free(c);
        errno = err;
        return NULL;
    }
    c->dev = dev;
    c->refs = 1;
    c->vctx.sz = sizeof(struct verbs_context);
    c->vctx.query_port = emu_query_port_ex;
    struct ibv_context *ctx = &c->vctx.context;
    ctx->device = &dev->dev;
    ctx->ops.post_send = emu_post_send_op;
    ctx->ops.post_recv = emu_post_recv_op;
    ctx->ops.poll_cq = emu_cq_poll_op;
    ctx->ops.req_notify_cq = emu_cq_notify_op;
    ctx->cmd_fd = -1;
    ctx->async_fd = -1;
    ctx->num_comp_vectors = 1;
    pthread_mutex_init(&ctx->mutex, NULL);
    ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
    return c;
}

void emu_ctx_put(struct emu_ctx *c)
{
    if (!c || --c->refs > 0) return;
    if (c->shared && c->dev->cm_ctx == c) c->dev->cm_ctx = NULL;
    free(c->hidden_pd);
    pthread_mutex_destroy(&c->vctx.context.mutex);
    free(c);
    emu_users_put();
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    if (!device) {
        errno = EINVAL;
        return NULL;
    }
    emu_lock();
    struct emu_ctx *c = emu_ctx_new((struct emu_dev *)device);
    int err = errno;
    emu_unlock();
    if (!c) {
        errno = err;
        return NULL;
    }
    return &c->vctx.context;
}

static struct emu_ctx *emu_ctx_of(struct ibv_context *ctx)
{
    return (struct emu_ctx *)((uint8_t *)ctx - offsetof(struct verbs_context, context));
}

int ibv_close_device(struct ibv_context *context)
{
    if (!context) return EINVAL;
    emu_lock();
    emu_ctx_put(emu_ctx_of(context));
    emu_unlock();
    return 0;
}

/* ---- protection domains and memory regions ------------------------------- */

struct emu_pd *emu_pd_new(struct emu_ctx *c, bool hidden)
{
    struct emu_pd *pd = calloc(1, sizeof(*pd));
    if (!pd) return NULL;
    pd->pd.context = &c->vctx.context;
    pd->pd.handle = ++emu_reg.next_key;
    pd->hidden = hidden;
    if (!hidden) c->refs++;
    return pd;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    emu_lock();
    struct emu_pd *pd = emu_pd_new(emu_ctx_of(context), false);
    emu_unlock();
    if (!pd) {
        errno = ENOMEM;
        return NULL;
    }
    return &pd->pd;
}

int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
    struct emu_pd *pd = (struct emu_pd *)ibpd;
    emu_lock();
    if (pd->refs > 0) {
        emu_unlock();
        return EBUSY;
    }
    struct emu_ctx *c = emu_ctx_of(ibpd->context);
    free(pd);
    emu_ctx_put(c);
    emu_unlock();
    return 0;
}

static unsigned emu_key_slot(uint32_t key)
{
    return (key * 2654435761u) >> 22; /* 1024 slots */
}

struct emu_mr *emu_mr_find(uint32_t key)
{
    for (struct emu_mr *m = emu_reg.mr_hash[emu_key_slot(key)]; m; m = m->hnext)
        if (m->mr.lkey == key) return m;
    return NULL;
}

void emu_mr_ref(struct emu_mr *m)
{
    if (m) m->refs++;
}

void emu_mr_unref(struct emu_mr *m)
{
    if (m && --m->refs == 0) free(m);
}

void emu_seg_release(struct emu_seg *s, int n)
{
    for (int i = 0; i < n; i++) {
        emu_mr_unref(s[i].mr);
        s[i].mr = NULL;
    }
}

/* keys: the pid in the high bits, so that a key of one process is unlikely to be valid in another */
static uint32_t emu_key_new(void)
{
    for (;;) {
        uint32_t k = ((uint32_t)(getpid() & 0xfff) << 20) | (++emu_reg.next_key & 0xfffff);
        if (k != 0 && !emu_mr_find(k)) return k;
    }
}

static struct ibv_mr *emu_reg_mr(struct ibv_pd *ibpd, void *addr, size_t length, uint64_t iova,
                                 unsigned access)
{
    if (!ibpd) {
        errno = EINVAL;
        return NULL;
    }
    if (length > EMU_MAX_MR_SIZE) {
        errno = EINVAL;
        return NULL;
    }
    if (!addr && length) {
        errno = EFAULT;
        return NULL;
    }
    /* as on hardware: remote write (and atomics) need local write */
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE)) {
        errno = EINVAL;
        return NULL;
    }
    struct emu_mr *m = calloc(1, sizeof(*m));
    if (!m) {
        errno = ENOMEM;
        return NULL;
    }
    emu_lock();
    struct emu_pd *pd = (struct emu_pd *)ibpd;
    m->mr.context = ibpd->context;
    m->mr.pd = ibpd;
    m->mr.addr = addr;
    m->mr.length = length;
    m->mr.lkey = m->mr.rkey = emu_key_new();
    m->mr.handle = m->mr.lkey;
    m->iova = iova;
    m->access = access;
    m->refs = 1;
    unsigned slot = emu_key_slot(m->mr.lkey);
    m->hnext = emu_reg.mr_hash[slot];
    emu_reg.mr_hash[slot] = m;
    pd->refs++;
    emu_unlock();
    return &m->mr;
}

#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    return emu_reg_mr(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

#undef ibv_reg_mr_iova
struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                               int access)
{
    return emu_reg_mr(pd, addr, length, iova, (unsigned)access);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                unsigned int access)
{
    return emu_reg_mr(pd, addr, length, iova, access);
}

int ibv_dereg_mr(struct ibv_mr *ibmr)
{
    if (!ibmr) return EINVAL;
    struct emu_mr *m = (struct emu_mr *)ibmr;
    emu_lock();
    struct emu_mr **pp = &emu_reg.mr_hash[emu_key_slot(ibmr->lkey)];
    while (*pp && *pp != m) pp = &(*pp)->hnext;
    if (!*pp) {
        emu_unlock();
        return EINVAL;
    }
    *pp = m->hnext;
    m->dead = true;
    ((struct emu_pd *)ibmr->pd)->refs--;
    emu_mr_unref(m);
    emu_unlock();
    return 0;
}

/* ---- completion channels and queues -------------------------------------- */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
    struct emu_cch *ch = calloc(1, sizeof(*ch));
    if (!ch) {
        errno = ENOMEM;
        return NULL;
    }
    ch->ch.fd = eventfd(0, EFD_CLOEXEC);
    if (ch->ch.fd < 0) {
        int err = errno;
        free(ch);
        errno = err;
        return NULL;
    }
    ch->ch.context = context;
    ch->ch.refcnt = 0;
    emu_lock();
    emu_ctx_of(context)->refs++;
    emu_unlock();
    return &ch->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    struct emu_cch *ch = (struct emu_cch *)channel;
    emu_lock();
    if (ch->ncq > 0) {
        emu_unlock();
        return EBUSY;
    }
    while (ch->head) {
        struct emu_cqev *e = ch->head;
        ch->head = e->next;
        free(e);
    }
    close(ch->ch.fd);
    struct emu_ctx *c = emu_ctx_of(channel->context);
    free(ch);
    emu_ctx_put(c);
    emu_unlock();
    return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int comp_vector)
{
    if (!context || cqe < 1 || cqe > EMU_MAX_CQE || comp_vector < 0 ||
        comp_vector >= context->num_comp_vectors) {
        errno = EINVAL;
        return NULL;
    }
    struct emu_cq *cq = calloc(1, sizeof(*cq));
    struct ibv_wc *ring = calloc((size_t)cqe, sizeof(*ring));
    if (!cq || !ring) {
        free(cq);
        free(ring);
        errno = ENOMEM;
        return NULL;
    }
    cq->ring = ring;
    cq->cap = cqe;
    cq->cq.context = context;
    cq->cq.channel = channel;
    cq->cq.cq_context = cq_context;
    cq->cq.cqe = cqe;
    pthread_mutex_init(&cq->cq.mutex, NULL);
    pthread_cond_init(&cq->cq.cond, NULL);
    emu_lock();
    emu_ctx_of(context)->refs++;
    if (channel) {
        ((struct emu_cch *)channel)->ncq++;
        channel->refcnt++;
    }
    emu_unlock();
    return &cq->cq;
}

int ibv_destroy_cq(struct ibv_cq *ibcq)
{
    struct emu_cq *cq = (struct emu_cq *)ibcq;
    emu_lock();
    if (cq->nqp > 0 || cq->unacked > 0) {
        emu_unlock();
        return EBUSY;
    }
    struct emu_cch *ch = (struct emu_cch *)ibcq->channel;
    if (ch) {
        struct emu_cqev **pp = &ch->head;
        ch->tail = NULL;
        while (*pp) {
            if ((*pp)->cq == cq) {
                struct emu_cqev *e = *pp;
                *pp = e->next;
                free(e);
            } else {
                ch->tail = *pp;
                pp = &(*pp)->next;
            }
        }
        if (!ch->head) emu_fd_signal(ch->ch.fd, &ch->signaled, false);
        ch->ncq--;
        ch->ch.refcnt--;
    }
    struct emu_ctx *c = emu_ctx_of(ibcq->context);
    pthread_mutex_destroy(&ibcq->mutex);
    pthread_cond_destroy(&ibcq->cond);
    free(cq->ring);
    free(cq);
    emu_ctx_put(c);
    emu_unlock();
    return 0;
}

void emu_cq_push(struct emu_cq *cq, const struct ibv_wc *wc)
{
    if (cq->broken) return;
    if (cq->count == cq->cap) {
        emu_log("CQ overrun on device %s: the CQ (%d entries) is full; completion of wr_id %llu "
                "(QP %u, status %s) is lost and the CQ is broken (ibv_poll_cq returns -1)",
                cq->cq.context->device->name, cq->cap, (unsigned long long)wc->wr_id, wc->qp_num,
                ibv_wc_status_str(wc->status));
        cq->broken = true;
        return;
    }
    cq->ring[(cq->first + cq->count) % cq->cap] = *wc;
    cq->count++;
    if (cq->armed && cq->cq.channel) {
        struct emu_cch *ch = (struct emu_cch *)cq->cq.channel;
        struct emu_cqev *e = malloc(sizeof(*e));
        if (!e) return; /* stays armed: the next completion tries again */
        cq->armed = false;
        e->cq = cq;
        e->next = NULL;
        if (ch->tail) ch->tail->next = e;
        else ch->head = e;
        ch->tail = e;
        emu_fd_signal(ch->ch.fd, &ch->signaled, true);
    }
}

int emu_cq_poll_op(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
    struct emu_cq *cq = (struct emu_cq *)ibcq;
    emu_lock();
    if (cq->broken) {
        emu_unlock();
        return -1;
    }
    int got = 0;
    while (got < n && cq->count > 0) {
        wc[got++] = cq->ring[cq->first];
        cq->first = (cq->first + 1) % cq->cap;
        cq->count--;
    }
    emu_unlock();
    return got;
}

int emu_cq_notify_op(struct ibv_cq *ibcq, int solicited_only)
{
    (void)solicited_only;
    struct emu_cq *cq = (struct emu_cq *)ibcq;
    emu_lock();
    cq->armed = true;
    emu_unlock();
    return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
    struct emu_cch *ch = (struct emu_cch *)channel;
    for (;;) {
        emu_lock();
        struct emu_cqev *e = ch->head;
        if (e) {
            ch->head = e->next;
            if (!ch->head) {
                ch->tail = NULL;
                emu_fd_signal(ch->ch.fd, &ch->signaled, false);
            }
            e->cq->unacked++;
            *cq = &e->cq->cq;
            *cq_context = e->cq->cq.cq_context;
            emu_unlock();
            free(e);
            return 0;
        }
        emu_unlock();
        if (emu_fd_wait(channel->fd) < 0) return -1;
    }
}

void ibv_ack_cq_events(struct ibv_cq *ibcq, unsigned int nevents)
{
    struct emu_cq *cq = (struct emu_cq *)ibcq;
    emu_lock();
    cq->unacked -= (int)nevents;
    if (cq->unacked < 0) cq->unacked = 0;
    ibcq->comp_events_completed += nevents;
    emu_unlock();
}

/* ---- QPs through libibverbs (the transport uses rdma_create_qp) ------------ */

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    (void)pd;
    (void)attr;
    errno = EOPNOTSUPP; /* the emulation's QPs are made with rdma_create_qp */
    return NULL;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
    (void)qp;
    return EOPNOTSUPP;
}

int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask)
{
    if (!(mask & IBV_QP_STATE) || attr->qp_state != IBV_QPS_ERR) return EOPNOTSUPP;
    emu_lock();
    emu_qp_error((struct emu_qp *)ibqp, 0);
    emu_unlock();
    return 0;
}

int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask,
                 struct ibv_qp_init_attr *init)
{
    (void)mask;
    struct emu_qp *qp = (struct emu_qp *)ibqp;
    emu_lock();
    memset(attr, 0, sizeof(*attr));
    attr->qp_state = ibqp->state;
    attr->cur_qp_state = ibqp->state;
    attr->path_mtu = IBV_MTU_4096;
    attr->dest_qp_num = qp->peer_qpn;
    attr->cap = qp->cap;
    attr->max_rd_atomic = EMU_MAX_RD_ATOM;
    attr->max_dest_rd_atomic = EMU_MAX_RD_ATOM;
    attr->rnr_retry = 7;
    attr->retry_cnt = 7;
    attr->port_num = 1;
    if (init) {
        memset(init, 0, sizeof(*init));
        init->qp_context = ibqp->qp_context;
        init->send_cq = ibqp->send_cq;
        init->recv_cq = ibqp->recv_cq;
        init->cap = qp->cap;
        init->qp_type = IBV_QPT_RC;
        init->sq_sig_all = qp->sig_all;
    }
    emu_unlock();
    return 0;
}

/* ---- strings ------------------------------------------------------------ */

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    static const char *const names[] = {
        [IBV_WC_SUCCESS] = "success",
        [IBV_WC_LOC_LEN_ERR] = "local length error",
        [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
        [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
        [IBV_WC_LOC_PROT_ERR] = "local protection error",
        [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
        [IBV_WC_MW_BIND_ERR] = "memory management operation error",
        [IBV_WC_BAD_RESP_ERR] = "bad response error",
        [IBV_WC_LOC_ACCESS_ERR] = "local access error",
        [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
        [IBV_WC_REM_ACCESS_ERR] = "remote access error",
        [IBV_WC_REM_OP_ERR] = "remote operation error",
        [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
        [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
        [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
        [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
        [IBV_WC_REM_ABORT_ERR] = "aborted error",
        [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
        [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
        [IBV_WC_FATAL_ERR] = "fatal error",
        [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
        [IBV_WC_GENERAL_ERR] = "general error",
        [IBV_WC_TM_ERR] = "TM error",
        [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
    };
    if ((unsigned)status < sizeof(names) / sizeof(names[0]) && names[status]) return names[status];
    return "unknown";
}

const char *ibv_event_type_str(enum ibv_event_type event)
{
    static const char *const names[] = {
        [IBV_EVENT_CQ_ERR] = "CQ error",
        [IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
        [IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
        [IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
        [IBV_EVENT_COMM_EST] = "communication established",
        [IBV_EVENT_SQ_DRAINED] = "send queue drained",
        [IBV_EVENT_PATH_MIG] = "path migrated",
        [IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
        [IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
        [IBV_EVENT_PORT_ACTIVE] = "port active",
        [IBV_EVENT_PORT_ERR] = "port error",
        [IBV_EVENT_LID_CHANGE] = "LID change",
        [IBV_EVENT_PKEY_CHANGE] = "P_Key change",
        [IBV_EVENT_SM_CHANGE] = "SM change",
        [IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
        [IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
        [IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
        [IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
        [IBV_EVENT_GID_CHANGE] = "GID table change",
        [IBV_EVENT_WQ_FATAL] = "WQ fatal",
    };
    if ((unsigned)event < sizeof(names) / sizeof(names[0]) && names[event]) return names[event];
    return "unknown";
}
