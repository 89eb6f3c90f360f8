/* Memory that ranks of one host can map (mem.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mem.h"
#include "util.h"
#include "wire.h"

/* System call numbers where the headers are older than the calls (the
 * numbers are the same on every architecture that has them). */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING 0x0002U
#endif

#define MEM_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

void oobx__mem_init(oobx__mem_t *m)
{
    memset(m, 0, sizeof(*m));
    pthread_mutex_init(&m->lock, NULL);
}

static void region_drop(oobx__mem_region_t *r)
{
    munmap(r->base, r->len);
    close(r->fd);
}

void oobx__mem_fini(oobx__mem_t *m)
{
    for (size_t i = 0; i < m->nmaps; i++) munmap((void *)m->maps[i].at, m->maps[i].len);
    for (size_t i = 0; i < m->nown; i++) region_drop(&m->own[i]);
    free(m->own);
    pthread_mutex_destroy(&m->lock);
}

int oobx__mem_alloc(oobx__mem_t *m, size_t bytes, void **ptr, char *why, size_t whylen)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t len = (bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
    if (bytes == 0 || len < bytes) {
        snprintf(why, whylen, "%zu bytes cannot be allocated", bytes);
        return -EINVAL;
    }
    oobx__mem_region_t r = {.fd = (int)syscall(SYS_memfd_create, "oobx-mem", MFD_CLOEXEC | MFD_ALLOW_SEALING)};
    const char *step = "memfd_create";
    struct stat st;
    if (r.fd < 0) goto fail;
    step = "ftruncate";
    if (ftruncate(r.fd, (off_t)len) != 0) goto fail;
    step = "sealing it";
    if (fcntl(r.fd, F_ADD_SEALS, MEM_SEALS) != 0) goto fail;
    step = "fstat";
    if (fstat(r.fd, &st) != 0) goto fail;
    step = "mmap";
    r.base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd, 0);
    if (r.base == MAP_FAILED) goto fail;
    r.len = len;
    r.ino = (uint64_t)st.st_ino;
    r.id = oobx__random64() | 1;
    pthread_mutex_lock(&m->lock);
    if (m->nown == m->capown) {
        size_t cap = m->capown ? 2 * m->capown : 8;
        oobx__mem_region_t *own = realloc(m->own, cap * sizeof(*own));
        if (!own) {
            pthread_mutex_unlock(&m->lock);
            region_drop(&r);
            snprintf(why, whylen, "out of memory for the list of regions");
            return -ENOMEM;
        }
        m->own = own;
        m->capown = cap;
    }
    m->own[m->nown++] = r;
    pthread_mutex_unlock(&m->lock);
    *ptr = r.base;
    return 0;
fail:;
    int e = errno;
    snprintf(why, whylen, "%s for %zu bytes of shared memory: %s", step, len, strerror(e));
    if (r.fd >= 0) close(r.fd);
    return -e;
}

int oobx__mem_free(oobx__mem_t *m, void *ptr)
{
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nown; i++) {
        if (m->own[i].base != ptr) continue;
        oobx__mem_region_t r = m->own[i];
        m->own[i] = m->own[--m->nown];
        pthread_mutex_unlock(&m->lock);
        region_drop(&r);
        return 0;
    }
    pthread_mutex_unlock(&m->lock);
    return -ENOENT;
}

void oobx__mem_describe(oobx__mem_t *m, const void *buf, size_t len, oobx__mem_desc_t *d)
{
    memset(d, 0, sizeof(*d));
    uintptr_t b = (uintptr_t)buf;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nown; i++) {
        const oobx__mem_region_t *r = &m->own[i];
        uintptr_t rb = (uintptr_t)r->base;
        if (b < rb || b - rb > r->len || len > r->len - (b - rb)) continue;
        d->id = r->id;
        d->base = (uint64_t)rb;
        d->len = r->len;
        d->ino = r->ino;
        d->fd = (uint32_t)r->fd;
        break;
    }
    pthread_mutex_unlock(&m->lock);
}

void oobx__mem_desc_encode(const oobx__mem_desc_t *d, unsigned char out[OOBX_MEM_DESC_BYTES])
{
    oobx__put_u64(out, d->id);
    oobx__put_u64(out + 8, d->base);
    oobx__put_u64(out + 16, d->len);
    oobx__put_u64(out + 24, d->ino);
    oobx__put_u32(out + 32, d->fd);
    oobx__put_u32(out + 36, 0);
}

void oobx__mem_desc_decode(const unsigned char in[OOBX_MEM_DESC_BYTES], oobx__mem_desc_t *d)
{
    d->id = oobx__get_u64(in);
    d->base = oobx__get_u64(in + 8);
    d->len = oobx__get_u64(in + 16);
    d->ino = oobx__get_u64(in + 24);
    d->fd = oobx__get_u32(in + 32);
}

/* The owner's descriptor d->fd, as a descriptor of this process: -1 with
 * why. pidfd_getfd where the kernel has it; else the owner's /proc entry.
 * The word is read again after the pid is pinned (pidfd) or the file
 * opened (/proc), so that a process that took a dead rank's pid is never
 * the one read from. */
static int fetch_fd(const oobx__cma_peer_t *peer, uint32_t fd, char *why, size_t whylen)
{
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)peer->pid, 0);
    if (pidfd >= 0) {
        int got = -1;
        if (!oobx__cma_same(peer)) {
            snprintf(why, whylen, "pid %u is no longer the rank that published it", peer->pid);
        } else {
            got = (int)syscall(SYS_pidfd_getfd, pidfd, (int)fd, 0);
            if (got < 0)
                snprintf(why, whylen, "pidfd_getfd of descriptor %u of pid %u: %s", fd, peer->pid, strerror(errno));
        }
        close(pidfd);
        if (got >= 0) fcntl(got, F_SETFD, FD_CLOEXEC);
        return got;
    }
    if (errno != ENOSYS) {
        snprintf(why, whylen, "pidfd_open of pid %u: %s", peer->pid, strerror(errno));
        return -1;
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/%u/fd/%u", peer->pid, fd);
    int got = open(path, O_RDONLY | O_CLOEXEC);
    if (got < 0) {
        snprintf(why, whylen, "open %s: %s", path, strerror(errno));
        return -1;
    }
    if (!oobx__cma_same(peer)) {
        close(got);
        snprintf(why, whylen, "pid %u is no longer the rank that published it", peer->pid);
        return -1;
    }
    return got;
}

/* Maps the region d of endpoint rank er read-only: NULL with why. */
static const char *map_region(const oobx__cma_peer_t *peer, const oobx__mem_desc_t *d, char *why, size_t whylen)
{
    int fd = fetch_fd(peer, d->fd, why, whylen);
    if (fd < 0) return NULL;
    struct stat st;
    const char *at = NULL;
    int seals = fcntl(fd, F_GET_SEALS);
    if (fstat(fd, &st) != 0) {
        snprintf(why, whylen, "fstat of its region: %s", strerror(errno));
    } else if (!S_ISREG(st.st_mode) || (uint64_t)st.st_ino != d->ino || (uint64_t)st.st_size != d->len) {
        snprintf(why, whylen, "descriptor %u of pid %u is not the region it named (inode %llu, %llu bytes)", d->fd,
                 peer->pid, (unsigned long long)d->ino, (unsigned long long)d->len);
    } else if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_SEAL)) != (F_SEAL_SHRINK | F_SEAL_SEAL)) {
        snprintf(why, whylen, "the region of pid %u is not sealed against shrinking", peer->pid);
    } else {
        void *p = mmap(NULL, (size_t)d->len, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) snprintf(why, whylen, "mmap of %llu bytes: %s", (unsigned long long)d->len, strerror(errno));
        else at = p;
    }
    close(fd);
    return at;
}

/* The cached mapping of (er, d), made and inserted when missing, marked
 * busy: NULL with why. *temp 1 when it could not be cached (every entry
 * busy): the caller unmaps it after use. Under m->lock. */
static oobx__mem_map_t *map_get(oobx__mem_t *m, const oobx__cma_peer_t *peer, int er, const oobx__mem_desc_t *d,
                                oobx__mem_map_t *tmp, int *temp, char *why, size_t whylen)
{
    *temp = 0;
    m->tick++;
    oobx__mem_map_t *lru = NULL;
    for (size_t i = 0; i < m->nmaps; i++) {
        oobx__mem_map_t *e = &m->maps[i];
        if (e->er == er && e->id == d->id && e->base == d->base && e->len == d->len) {
            e->busy++;
            e->used = m->tick;
            return e;
        }
        if (!e->busy && (!lru || e->used < lru->used)) lru = e;
    }
    const char *at = map_region(peer, d, why, whylen);
    if (!at) return NULL;
    oobx__mem_map_t *e;
    if (m->nmaps < OOBX_MEM_MAPS) {
        e = &m->maps[m->nmaps++];
    } else if (lru) {
        munmap((void *)lru->at, lru->len);
        e = lru;
    } else {
        e = tmp;
        *temp = 1;
    }
    *e = (oobx__mem_map_t){.er = er, .id = d->id, .base = d->base, .len = (size_t)d->len, .at = at, .busy = 1,
                           .used = m->tick};
    return e;
}

int oobx__mem_read(oobx__mem_t *m, oobx__cma_peer_t *peer, int er, const oobx__mem_desc_t *d, void *dst,
                   uint64_t src, size_t len)
{
    if (peer->nomap) return -1;
    if (src < d->base || src - d->base > d->len || len > d->len - (src - d->base)) {
        peer->nomap = 1;
        snprintf(peer->why, sizeof(peer->why), "its slice lies outside the region it named");
        return -1;
    }
    oobx__mem_map_t tmp;
    int temp;
    pthread_mutex_lock(&m->lock);
    oobx__mem_map_t *e = map_get(m, peer, er, d, &tmp, &temp, peer->why, sizeof(peer->why));
    pthread_mutex_unlock(&m->lock);
    if (!e) {
        peer->nomap = 1;
        return -1;
    }
    memcpy(dst, e->at + (src - d->base), len);
    if (temp) munmap((void *)e->at, e->len);
    pthread_mutex_lock(&m->lock);
    if (!temp) e->busy--;
    m->mapped_reads++;
    pthread_mutex_unlock(&m->lock);
    return 0;
}
