/* Single-copy transfers between ranks of one host (cma.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cma.h"
#include "util.h"

/* The kernel instance and the pid namespace: ranks that share both can name
 * each other's pids. 0 when either cannot be read. */
static uint64_t cma_scope(void)
{
    char boot[64] = "", ns[64] = "";
    if (oobx__read_small_file("/proc/sys/kernel/random/boot_id", boot, sizeof(boot)) <= 0) boot[0] = 0;
    ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
    if (n > 0) ns[n] = 0;
    else ns[0] = 0;
    if (!boot[0] || !ns[0]) return 0;
    uint64_t h = oobx__hash64(boot, strlen(boot), 0x636d61ull);
    h = oobx__hash64(ns, strlen(ns), h);
    return h ? h : 1;
}

void oobx__cma_self_init(oobx__cma_self_t *self, int enabled)
{
    self->scope = enabled ? cma_scope() : 0;
    self->pid = (uint32_t)getpid();
    self->word = oobx__random64() | 1;
}

void oobx__cma_encode(const oobx__cma_self_t *self, unsigned char out[OOBX_CMA_ID_BYTES])
{
    uint64_t addr = (uint64_t)(uintptr_t)&self->word, word = self->word;
    uint32_t zero = 0;
    memcpy(out, &self->scope, 8);
    memcpy(out + 8, &self->pid, 4);
    memcpy(out + 12, &zero, 4);
    memcpy(out + 16, &addr, 8);
    memcpy(out + 24, &word, 8);
}

void oobx__cma_decode(const oobx__cma_self_t *self, const unsigned char in[OOBX_CMA_ID_BYTES],
                      oobx__cma_peer_t *peer)
{
    memset(peer, 0, sizeof(*peer));
    uint64_t scope;
    memcpy(&scope, in, 8);
    memcpy(&peer->pid, in + 8, 4);
    memcpy(&peer->word_addr, in + 16, 8);
    memcpy(&peer->word, in + 24, 8);
    if (!self->scope || scope != self->scope || peer->pid == 0 || peer->pid == self->pid) {
        peer->state = OOBX_CMA_NO;
        snprintf(peer->why, sizeof(peer->why), "%s",
                 !self->scope || !scope ? "off" : scope != self->scope ? "another host or pid namespace"
                                                                       : "the same process");
    }
}

static ssize_t cma_read(uint32_t pid, void *dst, uint64_t src, size_t len)
{
    struct iovec l = {dst, len}, r = {(void *)(uintptr_t)src, len};
    ssize_t n;
    do n = process_vm_readv((pid_t)pid, &l, 1, &r, 1, 0);
    while (n < 0 && errno == EINTR);
    return n;
}

int oobx__cma_check(oobx__cma_peer_t *peer)
{
    if (peer->state != OOBX_CMA_UNKNOWN) return peer->state == OOBX_CMA_OK;
    uint64_t w = 0;
    ssize_t n = cma_read(peer->pid, &w, peer->word_addr, sizeof(w));
    if (n != (ssize_t)sizeof(w)) {
        peer->state = OOBX_CMA_NO;
        snprintf(peer->why, sizeof(peer->why), "process_vm_readv of pid %u: %s", peer->pid,
                 n < 0 ? strerror(errno) : "short read");
    } else if (w != peer->word) {
        peer->state = OOBX_CMA_NO;
        snprintf(peer->why, sizeof(peer->why), "pid %u is not the rank that published it", peer->pid);
    } else {
        peer->state = OOBX_CMA_OK;
    }
    return peer->state == OOBX_CMA_OK;
}

int oobx__cma_same(const oobx__cma_peer_t *peer)
{
    uint64_t w = 0;
    return cma_read(peer->pid, &w, peer->word_addr, sizeof(w)) == (ssize_t)sizeof(w) && w == peer->word;
}

/* Reads len bytes at src into dst: 0, or -errno with the bytes it had left. */
static int cma_read_all(uint32_t pid, void *dst, uint64_t src, size_t len, size_t *left)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = cma_read(pid, (char *)dst + got, src + got, len - got);
        if (n <= 0) {
            *left = len - got;
            return n < 0 ? -errno : -EFAULT;
        }
        got += (size_t)n;
    }
    return 0;
}

static int cma_pull_failed(oobx__cma_peer_t *peer, int rc, size_t left)
{
    peer->state = OOBX_CMA_NO;
    snprintf(peer->why, sizeof(peer->why), "process_vm_readv of %zu bytes from pid %u: %s", left, peer->pid,
             strerror(-rc));
    return rc;
}

int oobx__cma_pull(oobx__cma_peer_t *peer, void *dst, uint64_t src, size_t len)
{
    size_t left = 0;
    int rc = cma_read_all(peer->pid, dst, src, len, &left);
    return rc ? cma_pull_failed(peer, rc, left) : 0;
}

void oobx__cma_ticket_init(oobx__cma_ticket_t *t, const void *payload)
{
    t->nonce = oobx__random64() | 1; /* never 0 */
    t->addr = (uint64_t)(uintptr_t)payload;
}

/* The caller writes its buffer (or frees the record) only after the store
 * is seen: a puller that still reads the old address reads it before. */
void oobx__cma_ticket_move(oobx__cma_ticket_t *t, const void *copy)
{
    __atomic_store_n(&t->addr, (uint64_t)(uintptr_t)copy, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

void oobx__cma_ticket_void(oobx__cma_ticket_t *t)
{
    oobx__cma_ticket_move(t, NULL);
}

/* The ticket as it is now; 0 when it cannot be read. */
static int ticket_read(const oobx__cma_peer_t *peer, uint64_t at, oobx__cma_ticket_t *out)
{
    uint64_t w[2];
    size_t left = 0;
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* after the payload's read */
    if (cma_read_all(peer->pid, w, at, sizeof(w), &left) != 0) return 0;
    out->nonce = w[0];
    out->addr = w[1];
    return 1;
}

int oobx__cma_pull_ticket(oobx__cma_peer_t *peer, void *dst, uint64_t src, size_t len, uint64_t ticket_addr,
                          uint64_t nonce)
{
    size_t left = 0;
    int rc = cma_read_all(peer->pid, dst, src, len, &left);
    oobx__cma_ticket_t tk;
    if (!ticket_read(peer, ticket_addr, &tk)) return rc ? cma_pull_failed(peer, rc, left) : 1; /* the record is gone */
    if (tk.nonce != nonce || tk.addr == 0) return 1;
    if (tk.addr != src) {
        /* moved to the sender's copy, which stays as it is until the answer */
        uint64_t copy = tk.addr;
        rc = cma_read_all(peer->pid, dst, copy, len, &left);
        if (!ticket_read(peer, ticket_addr, &tk) || tk.nonce != nonce || tk.addr != copy) return 1;
    }
    return rc ? cma_pull_failed(peer, rc, left) : 0;
}
