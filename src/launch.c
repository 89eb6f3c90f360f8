/*
 * Starting from the environment: which launcher started this process, the
 * rank and size it gives, and where the roots are (oobx_comm_init_from_env).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "auth.h"
#include "comm.h"
#include "root.h"
#include "util.h"
#include "wire.h"

static int env_int(const char *a, const char *b, int *out)
{
    const char *v = getenv(a);
    if (!v && b) v = getenv(b);
    if (!v) return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    /* a rank or a size: 0..OOBX_NRANKS_MAX, nothing that wraps */
    if (errno || *end || end == v || x < 0 || x > OOBX_NRANKS_MAX) return -1;
    *out = (int)x;
    return 1;
}

/* The launcher's identity of this job, "" when there is none. */
static void job_identity(char *out, size_t len)
{
    static const char *const vars[][2] = {
        {"OOBX_RUN_KEY", "oobx-run"},      {"TORCHELASTIC_RUN_ID", "torchelastic"},
        {"PMIX_NAMESPACE", "pmix"},        {"OMPI_MCA_ess_base_jobid", "ompi"},
        {"PMI_KVSNAME", "hydra"},          {"SLURM_JOB_ID", "slurm"},
    };
    out[0] = '\0';
    for (size_t i = 0; i < OOBX_ARRAY_SIZE(vars); i++) {
        const char *v = getenv(vars[i][0]);
        if (!v || !*v) continue;
        const char *step = strcmp(vars[i][1], "slurm") == 0 ? getenv("SLURM_STEP_ID") : NULL;
        snprintf(out, len, "%s:%s%s%s", vars[i][1], v, step ? "." : "", step ? step : "");
        return;
    }
}

/* The job key: OOBX_JOB_KEY, or the contents of OOBX_JOB_KEY_FILE (which no
 * one but its owner may read). *len 0: none. */
static int job_key(const oobx_settings_t *s, int rank, unsigned char *key, size_t cap, size_t *len)
{
    *len = 0;
    if (s->job_key[0]) {
        *len = strlen(s->job_key);
        memcpy(key, s->job_key, *len);
        return 0;
    }
    if (!s->job_key_file[0]) return 0;
    int fd = open(s->job_key_file, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return oobx__fail(NULL, OOBX_ERR_INVALID, "rank %d: OOBX_JOB_KEY_FILE=%s cannot be read: %s", rank,
                          s->job_key_file, strerror(e));
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077) || st.st_uid != geteuid()) {
        close(fd);
        return oobx__fail(NULL, OOBX_ERR_INVALID,
                          "rank %d: OOBX_JOB_KEY_FILE=%s is %s: a key file must be a regular file of this user that no "
                          "one else can read or write (chmod 600)",
                          rank, s->job_key_file,
                          !S_ISREG(st.st_mode) ? "not a regular file"
                          : st.st_uid != geteuid() ? "owned by another user"
                                                   : "open to others (mode allows group or others)");
    }
    ssize_t n = read(fd, key, cap);
    close(fd);
    if (n <= 0 || (size_t)n == cap)
        return oobx__fail(NULL, OOBX_ERR_INVALID, "rank %d: OOBX_JOB_KEY_FILE=%s holds %s (1 to %zu bytes wanted)", rank,
                          s->job_key_file, n <= 0 ? "no key" : "too long a key", cap - 1);
    *len = (size_t)n;
    return 0;
}

int oobx_comm_init_from_env(oobx_comm_t *comm, const oobx_config_t *cfg)
{
    if (!comm) return oobx__fail(NULL, OOBX_ERR_INVALID, "oobx_comm_init_from_env: comm is NULL");
    static const char *const pairs[][3] = {
        {"OOBX_RANK", "OOBX_NRANKS", "oobx"},
        {"SLURM_PROCID", "SLURM_NTASKS", "Slurm"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI"},
        {"PMI_RANK", "PMI_SIZE", "PMI"},
        {"RANK", "WORLD_SIZE", "torchrun"},
    };
    int rank = -1, nranks = -1;
    const char *from = NULL;
    for (size_t i = 0; i < OOBX_ARRAY_SIZE(pairs); i++) {
        int a = env_int(pairs[i][0], NULL, &rank), b = env_int(pairs[i][1], NULL, &nranks);
        if (a < 0 || b < 0)
            return oobx__fail(NULL, OOBX_ERR_INVALID, "%s=%s / %s=%s: not numbers in 0..%d", pairs[i][0],
                             getenv(pairs[i][0]) ? getenv(pairs[i][0]) : "", pairs[i][1],
                             getenv(pairs[i][1]) ? getenv(pairs[i][1]) : "", OOBX_NRANKS_MAX);
        if (a && b) {
            from = pairs[i][2];
            break;
        }
        rank = nranks = -1;
    }
    if (!from)
        return oobx__fail(NULL, OOBX_ERR_INVALID,
                         "oobx_comm_init_from_env: no rank and size in the environment (OOBX_RANK/OOBX_NRANKS, "
                         "SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/_SIZE, PMI_RANK/PMI_SIZE or RANK/WORLD_SIZE)");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return oobx__fail(NULL, OOBX_ERR_INVALID, "rank %d of %d from %s is out of range", rank, nranks, from);
    oobx_settings_t s;
    int rc = oobx__settings_load(&s, cfg);
    if (rc != 0) return rc;
    char list[1024];
    if (s.comm_id[0]) {
        snprintf(list, sizeof(list), "%s", s.comm_id);
    } else if (getenv("MASTER_ADDR") && getenv("MASTER_PORT")) {
        /* torchrun's store holds MASTER_PORT itself: the root takes the next port */
        int port = atoi(getenv("MASTER_PORT")) + 1;
        const char *host = getenv("MASTER_ADDR");
        snprintf(list, sizeof(list), strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    } else {
        return oobx__fail(NULL, OOBX_ERR_INVALID,
                         "rank %d: no root address: set OOBX_COMM_ID=host:port[,host:port...] (or MASTER_ADDR and MASTER_PORT)",
                         rank);
    }
    /* a launcher that made and bound the root's socket itself hands it over
     * to the rank hosting that root (oobx-run does, closing the port race) */
    int root_fd = -1;
    const char *rfd = getenv("OOBX_ROOT_FD");
    if (rfd && *rfd) {
        long v = 0;
        const char *p = rfd;
        for (; *p >= '0' && *p <= '9' && v <= 0x7fffffffL; p++) v = v * 10 + (*p - '0');
        if (*p || v > 0x7fffffffL)
            return oobx__fail(NULL, OOBX_ERR_INVALID, "rank %d: OOBX_ROOT_FD=%s is not a file descriptor number", rank,
                             rfd);
        root_fd = (int)v;
    }
    int nids = 1;
    for (const char *p = list; *p; p++)
        if (*p == ',') nids++;
    for (const char *p = list; *p; p++)
        if (*p == ',' && (p == list || p[1] == ',' || p[1] == '\0'))
            return oobx__fail(NULL, OOBX_ERR_INVALID, "rank %d: OOBX_COMM_ID=\"%s\" has an empty entry", rank, list);
    if (nids > nranks)
        return oobx__fail(NULL, OOBX_ERR_INVALID, "OOBX_COMM_ID lists %d roots for %d ranks", nids, nranks);
    /* the secret: from the launcher's job identity, the roots, the size and the
     * job key, the same on every rank; the magic is a one-way tag of it */
    char identity[300];
    unsigned char key[4096];
    size_t keylen = 0;
    job_identity(identity, sizeof(identity));
    rc = job_key(&s, rank, key, sizeof(key), &keylen);
    if (rc != 0) return rc;
    if (oobx__auth_init() != 0) return oobx__fail(NULL, OOBX_ERR_SYSTEM, "rank %d: libsodium cannot start", rank);
    if (!identity[0] && !keylen && rank == 0) {
        /* once per job: the rank that hosts the first root says it */
        oobx_log_t log;
        oobx__log_open(&log, &s, "oobx");
        oobx__log(&log, OOBX_LOG_WARN, "this job has no launcher identity and no OOBX_JOB_KEY / OOBX_JOB_KEY_FILE: any process that "
                        "can reach %s can join it (docs/security.md)", list);
        oobx__log_close(&log);
    }
    unsigned char secret[OOBX_SECRET_BYTES];
    oobx__auth_env_secret(identity, list, nranks, key, keylen, secret);
    memset(key, 0, sizeof(key));
    uint64_t magic = oobx__auth_tag(secret);
    root_handle_t *roots = calloc((size_t)nids, sizeof(*roots));
    oobx_unique_id_t *ids = calloc((size_t)nids, sizeof(*ids));
    if (!roots || !ids) {
        free(roots);
        free(ids);
        return oobx__fail(NULL, OOBX_ERR_NOMEM, "out of memory");
    }
    char *save = NULL;
    int i = 0;
    uint64_t hosted = 0;
    int hosts_root = -1;
    for (char *tok = strtok_r(list, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save), i++) {
        char why[600];
        rc = oobx__sock_addr_parse(tok, s.socket_family, &roots[i].addr, why, sizeof(why));
        if (rc != 0) {
            rc = oobx__fail(NULL, rc, "OOBX_COMM_ID entry %d: %s", i, why);
            break;
        }
        if (oobx__sock_addr_port(&roots[i].addr) == 0) {
            rc = oobx__fail(NULL, OOBX_ERR_INVALID, "OOBX_COMM_ID entry %d (%s) has port 0: a root needs a fixed port",
                            i, tok);
            break;
        }
        for (int k = 0; k < i; k++)
            if (oobx__sock_addr_len(&roots[k].addr) == oobx__sock_addr_len(&roots[i].addr) &&
                !memcmp(&roots[k].addr, &roots[i].addr, oobx__sock_addr_len(&roots[i].addr))) {
                rc = oobx__fail(NULL, OOBX_ERR_INVALID, "OOBX_COMM_ID lists %s twice (entries %d and %d): every root needs its own address",
                               tok, k, i);
                break;
            }
        if (rc != 0) break;
        roots[i].magic = oobx__mix64(magic, (uint64_t)i);
        memcpy(roots[i].secret, secret, OOBX_SECRET_BYTES);
        if (rank == oobx__root_first_rank(i, nranks, nids)) {
            root_handle_t h;
            if (root_fd >= 0)
                rc = oobx__root_start_fd(root_fd, "OOBX_ROOT_FD", &roots[i].addr, roots[i].magic, secret, &s, &h,
                                         why, sizeof(why));
            else
                rc = oobx__root_start(&roots[i].addr, roots[i].magic, secret, &s, &h, why, sizeof(why));
            if (rc != 0) {
                rc = oobx__fail(NULL, rc, "rank %d cannot host root %d at %s: %s", rank, i, tok, why);
                break;
            }
            hosted = roots[i].magic;
            hosts_root = i;
        }
    }
    if (rc == 0 && root_fd >= 0 && hosts_root < 0)
        rc = oobx__fail(NULL, OOBX_ERR_INVALID,
                        "rank %d: OOBX_ROOT_FD=%d is set, but this rank hosts none of the %d roots of OOBX_COMM_ID "
                        "(root i is hosted by the first rank of block i): the launcher set it for the wrong rank",
                        rank, root_fd, nids);
    if (rc == 0) rc = oobx__comm_init_common(comm, nranks, rank, nids, roots, &s, cfg, hosted);
    free(roots);
    free(ids);
    return rc;
}

