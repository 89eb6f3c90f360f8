/*
 * Starting from the environment (oobx_comm_init_from_env): which launcher
 * started this process, following the nesting (oobx-run, then torchrun, then
 * Open MPI or MPICH hydra, then PMIx or Slurm: the innermost wins), the rank,
 * size and host's ranks it gives, the job identity, and the rendezvous:
 *   - a root list (OOBX_COMM_ID, or torchrun's MASTER_ADDR:MASTER_PORT+1);
 *   - unique ids published and fetched through the launcher's key-value
 *     store: PMIx (liboobx-pmix.so, loaded on demand) or hydra's PMI-1;
 *   - Slurm without PMI: roots on the step's nodes, at ports derived from the
 *     job and step ids in OOBX_SLURM_PORT_RANGE.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "auth.h"
#include "comm.h"
#include "launch.h"
#include "root.h"
#include "topo.h"
#include "tp_table.h"
#include "util.h"

#define L_(field) offsetof(oobx_launch_settings_t, field), sizeof(((oobx_launch_settings_t *)0)->field)
const oobx_setting_desc_t oobx__launch_settings_table[] = {
    {"OOBX_LAUNCHER", "auto", "launcher whose variables oobx_comm_init_from_env reads: auto (the innermost: oobx, torchrun, ompi or hydra, pmix, slurm), or one of those names", OOBX_SET_STR, L_(launcher), 0, 0},
    {"OOBX_SLURM_PORT_RANGE", "20000-29999", "ports of the roots of a Slurm step started without PMI: each step's port is derived from its job and step id within this range", OOBX_SET_STR, L_(slurm_ports), 0, 0},
    {"OOBX_MASTER_PORT_TRIES", "8", "torchrun: the root takes the first free port of MASTER_PORT+1 .. MASTER_PORT+this (a port there may be taken by another process), and the ranks try them in that order", OOBX_SET_INT, L_(master_port_tries), 1, 64},
    {"OOBX_LAUNCH_RANKS_PER_ROOT", "256", "jobs started by a launcher (PMIx, PMI-1, Slurm) get one root per this many ranks (a Slurm step at most one per node)", OOBX_SET_INT, L_(ranks_per_root), 1, 1 << 30},
    {NULL, NULL, NULL, 0, 0, 0, 0, 0},
};

const char *oobx__env_process(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
}

/* ---- detection ------------------------------------------------------------ */

typedef struct env {
    oobx_env_get_fn get;
    void *ctx;
    char *why;
    size_t whylen;
} env_t;

static const char *env_str(const env_t *e, const char *name)
{
    const char *v = e->get(e->ctx, name);
    return v && *v ? v : NULL;
}

/* 1 and *out when name is a number, 0 when unset, -1 (why set) otherwise. */
static int env_num(const env_t *e, const char *name, long *out)
{
    const char *v = env_str(e, name);
    if (!v) return 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || end == v) {
        snprintf(e->why, e->whylen, "%s=%s is not a number", name, v);
        return -1;
    }
    *out = x;
    return 1;
}

/* Both of a pair, as rank and size: 0, or -1 with why (half a pair, not a
 * number, out of range). */
static int env_pair(const env_t *e, const char *rname, const char *sname, const char *who, int *rank, int *size)
{
    long r = -1, s = -1;
    int a = env_num(e, rname, &r), b = env_num(e, sname, &s);
    if (a < 0 || b < 0) return -1;
    if (!a || !b) {
        snprintf(e->why, e->whylen, "%s: %s is %s but %s is %s (both or neither)", who, rname, a ? "set" : "unset",
                 sname, b ? "set" : "unset");
        return -1;
    }
    if (s < 1 || s > 0x7fffffff || r < 0 || r >= s) {
        snprintf(e->why, e->whylen, "%s: %s=%ld of %s=%ld is out of range", who, rname, r, sname, s);
        return -1;
    }
    *rank = (int)r;
    *size = (int)s;
    return 0;
}

/* The optional local pair (-1 each when unset). */
static int env_local(const env_t *e, const char *rname, const char *sname, const char *who, oobx_launch_t *l)
{
    l->local_rank = l->local_size = -1;
    if (!env_str(e, rname) && !env_str(e, sname)) return 0;
    if (env_pair(e, rname, sname, who, &l->local_rank, &l->local_size)) return -1;
    snprintf(l->local_vars, sizeof(l->local_vars), "%s/%s", rname, sname);
    return 0;
}

/* A Slurm step id that names a step of tasks (not the batch script's, the
 * extern or the interactive step's). */
static const char *slurm_step(const env_t *e)
{
    const char *v = env_str(e, "SLURM_STEP_ID");
    if (!v) v = env_str(e, "SLURM_STEPID");
    if (!v) return NULL;
    char *end;
    unsigned long x = strtoul(v, &end, 10);
    if (*end || end == v || x >= 0xfffffff0ul) return NULL;
    return v;
}

static int present(const env_t *e, oobx_launcher_t which)
{
    switch (which) {
    case OOBX_LAUNCH_OOBX: return env_str(e, "OOBX_RANK") || env_str(e, "OOBX_NRANKS");
    case OOBX_LAUNCH_TORCHRUN:
        return env_str(e, "WORLD_SIZE") ||
               (env_str(e, "RANK") && (env_str(e, "MASTER_ADDR") || env_str(e, "TORCHELASTIC_RUN_ID")));
    case OOBX_LAUNCH_OMPI: return env_str(e, "OMPI_COMM_WORLD_RANK") || env_str(e, "OMPI_COMM_WORLD_SIZE");
    case OOBX_LAUNCH_HYDRA:
        /* mpiexec -pmi-port: PMI_PORT and PMI_ID; rank and size come from the server */
        return env_str(e, "PMI_RANK") || env_str(e, "PMI_SIZE") || (env_str(e, "PMI_PORT") && env_str(e, "PMI_ID"));
    case OOBX_LAUNCH_PMIX: return env_str(e, "PMIX_RANK") || env_str(e, "PMIX_NAMESPACE");
    case OOBX_LAUNCH_SLURM: return env_str(e, "SLURM_PROCID") && slurm_step(e);
    default: return 0;
    }
}

static const struct {
    oobx_launcher_t id;
    const char *key;  /* OOBX_LAUNCHER */
    const char *name; /* in messages */
    const char *vars; /* what shows it */
} launchers[] = {
    {OOBX_LAUNCH_OOBX, "oobx", "oobx-run", "OOBX_RANK/OOBX_NRANKS"},
    {OOBX_LAUNCH_TORCHRUN, "torchrun", "torchrun", "RANK/WORLD_SIZE"},
    {OOBX_LAUNCH_OMPI, "ompi", "Open MPI", "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE"},
    {OOBX_LAUNCH_HYDRA, "hydra", "MPICH hydra", "PMI_RANK/PMI_SIZE"},
    {OOBX_LAUNCH_PMIX, "pmix", "PMIx", "PMIX_RANK/PMIX_NAMESPACE"},
    {OOBX_LAUNCH_SLURM, "slurm", "Slurm", "SLURM_PROCID/SLURM_STEP_ID"},
};

static int roots_from_addrs(const env_t *e, const char *comm_id, oobx_launch_t *l, int master_ok)
{
    if (comm_id && *comm_id) {
        snprintf(l->roots, sizeof(l->roots), "%s", comm_id);
        l->root_list_from_comm_id = 1;
        oobx__appendf(l->vars, sizeof(l->vars), ", roots from OOBX_COMM_ID=%s", comm_id);
        l->rdv = OOBX_RDV_ADDRS;
        return 0;
    }
    const char *host = env_str(e, "MASTER_ADDR"), *port = env_str(e, "MASTER_PORT");
    if (master_ok && host && port) {
        char *end;
        long p = strtol(port, &end, 10);
        if (*end || p < 1 || p > 65534) {
            snprintf(e->why, e->whylen, "MASTER_PORT=%s is not a port (1..65534)", port);
            return -1;
        }
        /* torchrun's store holds MASTER_PORT itself: the root takes the next port */
        snprintf(l->roots, sizeof(l->roots), strchr(host, ':') ? "[%s]:%ld" : "%s:%ld", host, p + 1);
        oobx__appendf(l->vars, sizeof(l->vars), ", root at MASTER_ADDR=%s MASTER_PORT=%s + 1", host, port);
        l->rdv = OOBX_RDV_ADDRS;
        return 0;
    }
    return 1;
}

static int detect_one(const env_t *e, oobx_launcher_t which, const char *comm_id, oobx_launch_t *l)
{
    const char *v;
    int r;
    long x;
    switch (which) {
    case OOBX_LAUNCH_OOBX:
        if (env_pair(e, "OOBX_RANK", "OOBX_NRANKS", "oobx-run", &l->rank, &l->nranks)) return -1;
        snprintf(l->vars, sizeof(l->vars), "rank from OOBX_RANK, size from OOBX_NRANKS");
        if (env_local(e, "OOBX_LOCAL_RANK", "OOBX_LOCAL_SIZE", "oobx-run", l)) return -1;
        if (l->local_rank >= 0) oobx__appendf(l->vars, sizeof(l->vars), ", local rank from OOBX_LOCAL_RANK/_SIZE");
        if ((r = roots_from_addrs(e, comm_id, l, 1)) != 0) {
            if (r > 0)
                snprintf(e->why, e->whylen,
                         "OOBX_RANK/OOBX_NRANKS are set but not OOBX_COMM_ID=host:port[,host:port...]");
            return -1;
        }
        if ((v = env_str(e, "OOBX_RUN_KEY"))) snprintf(l->job_id, sizeof(l->job_id), "oobx-run:%s", v);
        return 0;
    case OOBX_LAUNCH_TORCHRUN:
        if (env_pair(e, "RANK", "WORLD_SIZE", "torchrun", &l->rank, &l->nranks)) return -1;
        if (env_local(e, "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun", l)) return -1;
        snprintf(l->vars, sizeof(l->vars), "rank from RANK, size from WORLD_SIZE%s",
                 l->local_rank >= 0 ? ", local rank from LOCAL_RANK/LOCAL_WORLD_SIZE" : "");
        if ((r = roots_from_addrs(e, comm_id, l, 1)) != 0) {
            /* r < 0: MASTER_PORT is no port, and why says so */
            if (r > 0)
                snprintf(e->why, e->whylen, "torchrun: RANK/WORLD_SIZE are set but MASTER_ADDR/MASTER_PORT are not "
                         "(nor OOBX_COMM_ID)");
            return -1;
        }
        if ((v = env_str(e, "TORCHELASTIC_RUN_ID"))) snprintf(l->job_id, sizeof(l->job_id), "torchelastic:%s", v);
        return 0;
    case OOBX_LAUNCH_OMPI:
        if (env_pair(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI", &l->rank, &l->nranks)) return -1;
        if (env_local(e, "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "Open MPI", l)) return -1;
        snprintf(l->vars, sizeof(l->vars), "rank from OMPI_COMM_WORLD_RANK, size from OMPI_COMM_WORLD_SIZE%s",
                 l->local_rank >= 0 ? ", local rank from OMPI_COMM_WORLD_LOCAL_RANK/_LOCAL_SIZE" : "");
        if ((v = env_str(e, "PMIX_RANK")) && env_num(e, "PMIX_RANK", &x) == 1 && x != l->rank) {
            snprintf(e->why, e->whylen, "Open MPI: OMPI_COMM_WORLD_RANK=%d and PMIX_RANK=%s disagree", l->rank, v);
            return -1;
        }
        if ((v = env_str(e, "PMIX_NAMESPACE"))) snprintf(l->job_id, sizeof(l->job_id), "pmix:%s", v);
        else snprintf(l->job_id, sizeof(l->job_id), "ompi:%s",
                      env_str(e, "OMPI_MCA_ess_base_jobid") ? env_str(e, "OMPI_MCA_ess_base_jobid") : "");
        if (roots_from_addrs(e, comm_id, l, 0) == 0) return 0;
        if (!v) {
            snprintf(e->why, e->whylen, "Open MPI: mpirun gave no PMIx server (PMIX_NAMESPACE unset); set "
                     "OOBX_COMM_ID=host:port");
            return -1;
        }
        l->rdv = OOBX_RDV_PMIX;
        oobx__appendf(l->vars, sizeof(l->vars), ", roots through PMIx (PMIX_NAMESPACE=%s)", v);
        return 0;
    case OOBX_LAUNCH_HYDRA: {
        int port_model = !env_str(e, "PMI_RANK") && !env_str(e, "PMI_SIZE");
        if (port_model) {
            /* PMI_PORT and PMI_ID: the PMI server says rank and size */
            l->rank = l->nranks = -1;
            if (comm_id && *comm_id) {
                snprintf(e->why, e->whylen, "MPICH hydra (PMI_PORT model): rank and size come from the PMI server, "
                         "which OOBX_COMM_ID replaces; unset OOBX_COMM_ID, or run mpiexec without -pmi-port");
                return -1;
            }
        } else if (env_pair(e, "PMI_RANK", "PMI_SIZE", "MPICH hydra", &l->rank, &l->nranks)) {
            return -1;
        }
        if (env_local(e, "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "MPICH hydra", l)) return -1;
        snprintf(l->vars, sizeof(l->vars), "%s%s",
                 port_model ? "rank and size from the PMI server (PMI_ID)" : "rank from PMI_RANK, size from PMI_SIZE",
                 l->local_rank >= 0 ? ", local rank from MPI_LOCALRANKID/MPI_LOCALNRANKS" : "");
        snprintf(l->job_id, sizeof(l->job_id), "hydra:");
        if (roots_from_addrs(e, comm_id, l, 0) == 0) return 0;
        l->pmi_fd = -1;
        int fdset = env_num(e, "PMI_FD", &x);
        if (fdset < 0) return -1;
        if (fdset) {
            if (x < 0 || x > 0x7fffffff) {
                snprintf(e->why, e->whylen, "PMI_FD=%ld is not a file descriptor", x);
                return -1;
            }
            l->pmi_fd = (int)x;
            oobx__appendf(l->vars, sizeof(l->vars), ", roots through PMI-1 on PMI_FD=%ld", x);
        } else if ((v = env_str(e, "PMI_PORT"))) {
            snprintf(l->pmi_addr, sizeof(l->pmi_addr), "%s", v);
            oobx__appendf(l->vars, sizeof(l->vars), ", roots through PMI-1 at PMI_PORT=%s", v);
        } else {
            snprintf(e->why, e->whylen, "MPICH hydra: PMI_RANK/PMI_SIZE are set but neither PMI_FD nor PMI_PORT "
                     "(nor OOBX_COMM_ID)");
            return -1;
        }
        l->rdv = OOBX_RDV_PMI1;
        return 0;
    }
    case OOBX_LAUNCH_PMIX: {
        v = env_str(e, "PMIX_NAMESPACE");
        int r = env_num(e, "PMIX_RANK", &x);
        if (r < 0) return -1;
        if (!v || !r || x < 0) {
            snprintf(e->why, e->whylen, "PMIx: PMIX_RANK%s and PMIX_NAMESPACE%s must both be set",
                     r ? "" : " (unset)", v ? "" : " (unset)");
            return -1;
        }
        l->rank = (int)x;
        l->nranks = -1;
        l->local_rank = l->local_size = -1;
        snprintf(l->job_id, sizeof(l->job_id), "pmix:%s", v);
        snprintf(l->vars, sizeof(l->vars), "rank from PMIX_RANK, size and local rank from PMIx");
        /* srun --mpi=pmix: the step's own variables say the same */
        long sp;
        if (slurm_step(e) && env_num(e, "SLURM_PROCID", &sp) == 1 && sp != x) {
            snprintf(e->why, e->whylen, "PMIX_RANK=%ld and SLURM_PROCID=%ld of the same Slurm step disagree", x, sp);
            return -1;
        }
        if (roots_from_addrs(e, comm_id, l, 0) == 0) {
            long s;
            if (env_num(e, "SLURM_STEP_NUM_TASKS", &s) == 1 && slurm_step(e)) l->nranks = (int)s;
            if (l->nranks < 1) {
                snprintf(e->why, e->whylen, "PMIx with OOBX_COMM_ID: no size (SLURM_STEP_NUM_TASKS) in the environment");
                return -1;
            }
            return 0;
        }
        l->rdv = OOBX_RDV_PMIX;
        oobx__appendf(l->vars, sizeof(l->vars), ", roots through PMIx (PMIX_NAMESPACE=%s)", v);
        return 0;
    }
    case OOBX_LAUNCH_SLURM: {
        const char *step = slurm_step(e), *job = env_str(e, "SLURM_JOB_ID");
        const char *ntasks = env_str(e, "SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
        if (!step) {
            snprintf(e->why, e->whylen, "Slurm: SLURM_PROCID is set but SLURM_STEP_ID names no step of tasks");
            return -1;
        }
        if (!job) {
            snprintf(e->why, e->whylen, "Slurm: SLURM_STEP_ID=%s is set but SLURM_JOB_ID is not", step);
            return -1;
        }
        if (env_pair(e, "SLURM_PROCID", ntasks, "Slurm", &l->rank, &l->nranks)) return -1;
        l->local_rank = l->local_size = -1;
        long lr;
        if (env_num(e, "SLURM_LOCALID", &lr) < 0) return -1;
        snprintf(l->slurm_job, sizeof(l->slurm_job), "%s", job);
        snprintf(l->slurm_step, sizeof(l->slurm_step), "%s", step);
        snprintf(l->job_id, sizeof(l->job_id), "slurm:%s.%s", job, step);
        snprintf(l->vars, sizeof(l->vars), "rank from SLURM_PROCID, size from %s", ntasks);
        /* the host's ranks: this node's count in the step's layout */
        const char *nodes = env_str(e, "SLURM_STEP_NODELIST"), *tpn = env_str(e, "SLURM_STEP_TASKS_PER_NODE");
        const char *me = env_str(e, "SLURMD_NODENAME");
        if (env_num(e, "SLURM_LOCALID", &lr) == 1 && nodes && tpn && me) {
            char w[256];
            int n = oobx__hostlist_count(nodes, w, sizeof(w));
            int *counts = n > 0 ? calloc((size_t)n, sizeof(int)) : NULL;
            if (counts && oobx__tasks_per_node(tpn, counts, n, w, sizeof(w)) == 0) {
                for (int j = 0; j < n; j++) {
                    char name[256];
                    if (oobx__hostlist_nth(nodes, j, name, sizeof(name), w, sizeof(w)) == 0 && !strcmp(name, me)) {
                        l->local_rank = (int)lr;
                        l->local_size = counts[j];
                        snprintf(l->local_vars, sizeof(l->local_vars), "SLURM_LOCALID/SLURM_STEP_TASKS_PER_NODE");
                        oobx__appendf(l->vars, sizeof(l->vars), ", local rank from SLURM_LOCALID and "
                                      "SLURM_STEP_TASKS_PER_NODE");
                        break;
                    }
                }
            }
            free(counts);
        }
        if (roots_from_addrs(e, comm_id, l, 0) == 0) return 0;
        if (!nodes || !tpn) {
            snprintf(e->why, e->whylen, "Slurm: SLURM_STEP_NODELIST%s and SLURM_STEP_TASKS_PER_NODE%s are needed "
                     "for the roots", nodes ? "" : " (unset)", tpn ? "" : " (unset)");
            return -1;
        }
        l->rdv = OOBX_RDV_SLURM;
        oobx__appendf(l->vars, sizeof(l->vars), ", roots on SLURM_STEP_NODELIST=%s (SLURM_STEP_TASKS_PER_NODE=%s)",
                      nodes, tpn);
        return 0;
    }
    default:
        return -1;
    }
}

int oobx__launch_detect(oobx_env_get_fn get, void *ctx, const char *force, const char *comm_id, oobx_launch_t *out,
                        char *why, size_t whylen)
{
    env_t e = {.get = get, .ctx = ctx, .why = why, .whylen = whylen};
    oobx_launch_t l;
    memset(&l, 0, sizeof(l));
    l.pmi_fd = -1;
    int pick = -1;
    char fwhy[600];
    if (force && *force && strcasecmp(force, "auto")) {
        for (size_t i = 0; i < OOBX_ARRAY_SIZE(launchers); i++)
            if (!strcasecmp(force, launchers[i].key)) pick = (int)i;
        if (pick < 0) {
            snprintf(why, whylen, "OOBX_LAUNCHER=%s: not auto, oobx, torchrun, ompi, hydra, pmix or slurm", force);
            return OOBX_ERR_INVALID;
        }
        if (!present(&e, launchers[pick].id)) {
            snprintf(why, whylen, "OOBX_LAUNCHER=%s, but %s is not in the environment", force, launchers[pick].vars);
            return OOBX_ERR_INVALID;
        }
    } else {
        for (size_t i = 0; i < OOBX_ARRAY_SIZE(launchers) && pick < 0; i++)
            if (present(&e, launchers[i].id)) pick = (int)i;
        if (pick < 0) {
            const char *batch = env_str(&e, "SLURM_PROCID") && !slurm_step(&e)
                                    ? " (SLURM_PROCID is the batch script's, not a step's: start the ranks with srun, "
                                      "mpirun or mpiexec)"
                                    : "";
            snprintf(why, whylen, "oobx_comm_init_from_env: no launcher in the environment: none of OOBX_RANK/"
                     "OOBX_NRANKS, RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK/_SIZE (mpirun), PMI_RANK/PMI_SIZE "
                     "(mpiexec), PMIX_RANK (PMIx), SLURM_PROCID of a step (srun)%s",
                     batch);
            return OOBX_ERR_INVALID;
        }
        /* Open MPI and hydra never nest each other: one set is left over */
        if (launchers[pick].id == OOBX_LAUNCH_OMPI && present(&e, OOBX_LAUNCH_HYDRA)) {
            snprintf(why, whylen, "conflicting launchers: OMPI_COMM_WORLD_RANK=%s (Open MPI) and PMI_RANK=%s (MPICH "
                     "hydra) are both set; unset the stale ones or set OOBX_LAUNCHER=ompi or hydra",
                     env_str(&e, "OMPI_COMM_WORLD_RANK") ? env_str(&e, "OMPI_COMM_WORLD_RANK") : "(unset)",
                     env_str(&e, "PMI_RANK") ? env_str(&e, "PMI_RANK") : "(unset)");
            return OOBX_ERR_INVALID;
        }
    }
    l.launcher = launchers[pick].id;
    l.name = launchers[pick].name;
    if (detect_one(&e, l.launcher, comm_id, &l) != 0) {
        snprintf(fwhy, sizeof(fwhy), "%s", why);
        snprintf(why, whylen, "%s", fwhy);
        return OOBX_ERR_INVALID;
    }
    if (l.local_size > 0 && l.nranks > 0 && l.local_size > l.nranks) {
        snprintf(why, whylen, "%s: %s says %d ranks on this host, but the job has %d", l.name, l.local_vars,
                 l.local_size, l.nranks);
        return OOBX_ERR_INVALID;
    }
    /* the outer launchers whose variables were passed over */
    int first = 1;
    for (size_t i = (size_t)pick + 1; i < OOBX_ARRAY_SIZE(launchers); i++) {
        if (!present(&e, launchers[i].id)) continue;
        if (l.launcher == OOBX_LAUNCH_OMPI && launchers[i].id == OOBX_LAUNCH_PMIX) continue; /* mpirun's own */
        oobx__appendf(l.vars, sizeof(l.vars), "%s%s", first ? "; outer launchers passed over: " : ", ",
                      launchers[i].name);
        first = 0;
    }
    *out = l;
    return 0;
}

/* ---- the magic --------------------------------------------------------------- */

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

/* The job's secret and magic: from the launcher's job identity (l->job_id),
 * the root list ("" when the roots travel through the launcher's store), the
 * size and the job key (OOBX_JOB_KEY or OOBX_JOB_KEY_FILE), the same on every
 * rank of the job and different between jobs; the magic is a one-way tag of
 * the secret. The one place they are derived. */
static int launch_job_secret(const oobx_launch_t *l, const char *list, int nranks, const oobx_settings_t *s,
                             unsigned char secret[OOBX_SECRET_BYTES], uint64_t *magic)
{
    unsigned char key[4096];
    size_t keylen = 0;
    int rc = job_key(s, l->rank, key, sizeof(key), &keylen);
    if (rc != 0) return rc;
    if (oobx__auth_init() != 0) return oobx__fail(NULL, OOBX_ERR_SYSTEM, "rank %d: libsodium cannot start", l->rank);
    if (!l->job_id[0] && !keylen && l->rank == 0) {
        /* once per job: the rank that hosts the first root says it */
        oobx_log_t log;
        oobx__log_open(&log, s, "oobx");
        oobx__log(&log, OOBX_LOG_WARN, "this job has no launcher identity and no OOBX_JOB_KEY / OOBX_JOB_KEY_FILE: any "
                  "process that can reach %s can join it (docs/security.md)", list);
        oobx__log_close(&log);
    }
    oobx__auth_env_secret(l->job_id, list, nranks, key, keylen, secret);
    memset(key, 0, sizeof(key));
    *magic = oobx__auth_tag(secret);
    return 0;
}

/* ---- rendezvous: a root list ------------------------------------------------ */

/* Parses the list, starts the roots this rank hosts, and joins. slurm: for
 * a Slurm step, the node each root is on (the hosting rank checks it runs
 * there) and slurm_range the OOBX_SLURM_PORT_RANGE its ports come from;
 * NULL otherwise. */
static int init_addrs(oobx_comm_t *comm, const oobx_launch_t *l, const char *list_in, const oobx_settings_t *s,
                      const oobx_config_t *cfg, const oobx_slurm_roots_t *slurm, const char *slurm_range,
                      const char *what)
{
    char **slurm_nodes = slurm ? slurm->names : NULL;
    int nnodes = slurm ? slurm->nnodes : 0;
    char list[1024];
    snprintf(list, sizeof(list), "%s", list_in);
    int rank = l->rank, nranks = l->nranks, rc = 0;
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
    if (nids > nranks)
        return oobx__fail(NULL, OOBX_ERR_INVALID, "%s lists %d roots for %d ranks", what, nids, nranks);
    for (const char *p = list; *p; p++)
        if (*p == ',' && (p == list || p[1] == ',' || p[1] == '\0'))
            return oobx__fail(NULL, OOBX_ERR_INVALID, "rank %d: %s \"%s\" has an empty entry", rank, what, list);
    unsigned char secret[OOBX_SECRET_BYTES];
    uint64_t magic;
    rc = launch_job_secret(l, list, nranks, s, secret, &magic);
    if (rc != 0) return rc;
    root_handle_t *roots = calloc((size_t)nids, sizeof(*roots));
    if (!roots) return oobx__fail(NULL, OOBX_ERR_NOMEM, "out of memory");
    char *save = NULL;
    int i = 0;
    uint64_t hosted = 0;
    int hosts_root = -1;
    for (char *tok = strtok_r(list, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save), i++) {
        char why[600];
        rc = oobx__sock_addr_parse(tok, s->socket_family, &roots[i].addr, why, sizeof(why));
        if (rc != 0) {
            rc = oobx__fail(NULL, rc, "%s entry %d: %s", what, i, why);
            break;
        }
        for (int k = 0; k < i; k++)
            if (oobx__sock_addr_len(&roots[k].addr) == oobx__sock_addr_len(&roots[i].addr) &&
                !memcmp(&roots[k].addr, &roots[i].addr, oobx__sock_addr_len(&roots[i].addr))) {
                rc = oobx__fail(NULL, OOBX_ERR_INVALID, "%s lists %s twice (entries %d and %d): every root needs its "
                                "own address", what, tok, k, i);
                break;
            }
        if (rc != 0) break;
        if (oobx__sock_addr_port(&roots[i].addr) == 0) {
            rc = oobx__fail(NULL, OOBX_ERR_INVALID, "%s entry %d (%s) has port 0: a root needs a fixed port", what, i,
                            tok);
            break;
        }
        const struct sockaddr *sa = &roots[i].addr.sa;
        int loop = (sa->sa_family == AF_INET &&
                    (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127) ||
                   (sa->sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr));
        if (slurm_nodes && nnodes > 1 && loop) {
            char at[96];
            oobx__sock_addr_format(&roots[i].addr, at, sizeof(at));
            rc = oobx__fail(NULL, OOBX_ERR_INVALID, "rank %d: Slurm node %s (root %d) resolves to the loopback address "
                            "%s here, which the step's other nodes cannot reach: fix its entry in /etc/hosts or DNS, "
                            "or set OOBX_COMM_ID", rank, slurm_nodes[i], i, at);
            break;
        }
        roots[i].magic = oobx__mix64(magic, (uint64_t)i);
        memcpy(roots[i].secret, secret, OOBX_SECRET_BYTES);
        roots[i].nalt = l->root_alts;
        if (roots[i].nalt > 0 && oobx__sock_addr_port(&roots[i].addr) + roots[i].nalt > 65535)
            roots[i].nalt = 65535 - oobx__sock_addr_port(&roots[i].addr);
        if (rank == oobx__root_first_rank(i, nranks, nids)) {
            if (slurm_nodes) {
                const char *me = getenv("SLURMD_NODENAME");
                if (me && strcmp(me, slurm_nodes[i])) {
                    rc = oobx__fail(NULL, OOBX_ERR_INVALID, "rank %d runs on %s, but the step's task layout "
                                    "(SLURM_STEP_TASKS_PER_NODE, SLURM_DISTRIBUTION=%s) puts it on %s, where it hosts "
                                    "root %d: use srun --mpi=pmix or set OOBX_COMM_ID", rank, me,
                                    getenv("SLURM_DISTRIBUTION") ? getenv("SLURM_DISTRIBUTION") : "(unset)",
                                    slurm_nodes[i], i);
                    break;
                }
            }
            root_handle_t h;
            if (root_fd >= 0)
                rc = oobx__root_start_fd(root_fd, "OOBX_ROOT_FD", &roots[i].addr, roots[i].magic, secret, s, &h,
                                         why, sizeof(why));
            else
                rc = oobx__root_start(&roots[i].addr, roots[i].magic, secret, s, &h, why, sizeof(why));
            /* taken: the next ports of the window, which the ranks try in the same order */
            for (int k = 1; rc == OOBX_ERR_UNAVAILABLE && root_fd < 0 && k <= roots[i].nalt; k++) {
                oobx_sockaddr_t alt = roots[i].addr;
                oobx__sock_addr_set_port(&alt, oobx__sock_addr_port(&roots[i].addr) + k);
                char why2[600];
                rc = oobx__root_start(&alt, roots[i].magic, secret, s, &h, why2, sizeof(why2));
                if (rc == 0) {
                    oobx_log_t lg;
                    oobx_log_t *lgp = &lg;
                    oobx__log_open(lgp, s, "oobx");
                    OOBX_INFO(lgp, "rank %d: root %d at port %d, not %d (%.200s)", rank, i,
                              oobx__sock_addr_port(&alt), oobx__sock_addr_port(&roots[i].addr), why);
                    oobx__log_close(lgp);
                    roots[i].addr = alt;
                    roots[i].nalt -= k;
                } else if (rc == OOBX_ERR_UNAVAILABLE && k == roots[i].nalt) {
                    size_t wl = strlen(why);
                    snprintf(why + wl, sizeof(why) - wl, "; and ports +1..+%d: %.200s", k, why2);
                }
            }
            if (rc == OOBX_ERR_UNAVAILABLE && slurm_nodes && root_fd < 0) {
                rc = oobx__fail(NULL, rc, "rank %d cannot host root %d of Slurm job %s step %s at %s: port %d is "
                                "taken (%s); the port comes from the job and step id within OOBX_SLURM_PORT_RANGE=%s: "
                                "set OOBX_SLURM_PORT_RANGE to a range that is free on the step's nodes, or use srun "
                                "--mpi=pmix", rank, i, l->slurm_job, l->slurm_step, tok,
                                oobx__sock_addr_port(&roots[i].addr), why, slurm_range);
                break;
            }
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
                        "rank %d: OOBX_ROOT_FD=%d is set, but this rank hosts none of the %d roots of %s "
                        "(root i is hosted by the first rank of block i): the launcher set it for the wrong rank",
                        rank, root_fd, nids, what);
    if (rc == 0) rc = oobx__comm_init_common(comm, nranks, rank, nids, roots, s, cfg, hosted);
    free(roots);
    memset(secret, 0, sizeof(secret));
    return rc;
}

/* Roots for nranks at OOBX_LAUNCH_RANKS_PER_ROOT = ranks_per_root (256 when unset). */
static int nroots_for(int nranks, int ranks_per_root)
{
    int per = ranks_per_root > 0 ? ranks_per_root : 256;
    int n = (nranks + per - 1) / per;
    return n < 1 ? 1 : n > nranks ? nranks : n;
}

/* ---- rendezvous: Slurm without PMI --------------------------------------------- */

void oobx__slurm_roots_free(oobx_slurm_roots_t *r)
{
    if (!r) return;
    for (int i = 0; r->names && i < r->nroots; i++) free(r->names[i]);
    free(r->names);
    free(r->ports);
    r->names = NULL;
    r->ports = NULL;
}

int oobx__slurm_roots(const char *job_id, int nranks, const char *nodes, const char *tpn, const char *dist,
                      const char *range, int ranks_per_root, oobx_slurm_roots_t *out, char *why, size_t whylen)
{
    memset(out, 0, sizeof(*out));
    int lo, hi;
    if (!range || oobx__port_range_parse(range, &lo, &hi) != 0) {
        snprintf(why, whylen, "OOBX_SLURM_PORT_RANGE=%s is not lo-hi with 1 <= lo <= hi <= 65535", range ? range : "");
        return OOBX_ERR_INVALID;
    }
    char w[600];
    if (!nodes || !tpn) {
        snprintf(why, whylen, "Slurm: SLURM_STEP_NODELIST%s and SLURM_STEP_TASKS_PER_NODE%s are needed for the roots",
                 nodes ? "" : " (unset)", tpn ? "" : " (unset)");
        return OOBX_ERR_INVALID;
    }
    int nn = oobx__hostlist_count(nodes, w, sizeof(w));
    if (nn < 1) {
        snprintf(why, whylen, "SLURM_STEP_NODELIST: %s", w);
        return OOBX_ERR_INVALID;
    }
    int *counts = calloc((size_t)nn, sizeof(int));
    if (!counts) {
        snprintf(why, whylen, "out of memory");
        return OOBX_ERR_NOMEM;
    }
    int rc = 0;
    if (oobx__tasks_per_node(tpn, counts, nn, w, sizeof(w)) != 0) {
        snprintf(why, whylen, "SLURM_STEP_TASKS_PER_NODE: %s", w);
        rc = OOBX_ERR_INVALID;
        goto out_counts;
    }
    long total = 0;
    for (int j = 0; j < nn; j++) total += counts[j];
    if (total != nranks) {
        snprintf(why, whylen, "SLURM_STEP_TASKS_PER_NODE=%s holds %ld tasks, the step %d", tpn, total, nranks);
        rc = OOBX_ERR_INVALID;
        goto out_counts;
    }
    int nroots = nroots_for(nranks, ranks_per_root);
    if (nroots > nn) nroots = nn;
    if (nroots > hi - lo + 1) nroots = hi - lo + 1;
    out->nnodes = nn;
    out->port_lo = lo;
    out->port_hi = hi;
    out->names = calloc((size_t)nroots, sizeof(char *));
    out->ports = calloc((size_t)nroots, sizeof(int));
    if (!out->names || !out->ports) {
        snprintf(why, whylen, "out of memory");
        rc = OOBX_ERR_NOMEM;
        goto out_counts;
    }
    out->nroots = nroots;
    for (int i = 0; i < nroots; i++) {
        int first = oobx__root_first_rank(i, nranks, nroots);
        int node = oobx__task_node(counts, nn, first, dist);
        if (node < 0) {
            snprintf(why, whylen, "SLURM_DISTRIBUTION=%s: the task layout does not say which node runs rank %d; use "
                     "srun --mpi=pmix, a block or cyclic distribution, or set OOBX_COMM_ID", dist ? dist : "", first);
            rc = OOBX_ERR_INVALID;
            break;
        }
        char name[256];
        if (oobx__hostlist_nth(nodes, node, name, sizeof(name), w, sizeof(w)) != 0) {
            snprintf(why, whylen, "SLURM_STEP_NODELIST: %s", w);
            rc = OOBX_ERR_INVALID;
            break;
        }
        if (!(out->names[i] = strdup(name))) {
            snprintf(why, whylen, "out of memory");
            rc = OOBX_ERR_NOMEM;
            break;
        }
        out->ports[i] = oobx__slurm_port(job_id, lo, hi, i);
        size_t used = strlen(out->list);
        if (used + strlen(name) + 10 >= sizeof(out->list)) {
            snprintf(why, whylen, "Slurm step: %d roots do not fit in a root list of %zu bytes; lower their number "
                     "with OOBX_LAUNCH_RANKS_PER_ROOT or set OOBX_COMM_ID", nroots, sizeof(out->list));
            rc = OOBX_ERR_INVALID;
            break;
        }
        snprintf(out->list + used, sizeof(out->list) - used, strchr(name, ':') ? "%s[%s]:%d" : "%s%s:%d",
                 i ? "," : "", name, out->ports[i]);
    }
out_counts:
    free(counts);
    return rc;
}

static int init_slurm(oobx_comm_t *comm, const oobx_launch_t *l, const oobx_settings_t *s,
                      const oobx_launch_settings_t *ls, const oobx_config_t *cfg)
{
    oobx_slurm_roots_t r;
    char why[1200];
    int rc = oobx__slurm_roots(l->job_id, l->nranks, getenv("SLURM_STEP_NODELIST"),
                               getenv("SLURM_STEP_TASKS_PER_NODE"), getenv("SLURM_DISTRIBUTION"), ls->slurm_ports,
                               ls->ranks_per_root, &r, why, sizeof(why));
    if (rc != 0) {
        oobx__slurm_roots_free(&r);
        return oobx__fail(NULL, rc, "rank %d: %s", l->rank, why);
    }
    if (l->rank == 0) {
        oobx_log_t lg;
        oobx__log_open(&lg, s, "launch");
        oobx_log_t *lgp = &lg;
        OOBX_INFO(lgp, "Slurm job %s step %s: %d roots at %s (ports from OOBX_SLURM_PORT_RANGE=%s)", l->slurm_job,
                  l->slurm_step, r.nroots, r.list, ls->slurm_ports);
        oobx__log_close(&lg);
    }
    rc = init_addrs(comm, l, r.list, s, cfg, &r, ls->slurm_ports, "the Slurm step's root list");
    oobx__slurm_roots_free(&r);
    return rc;
}

/* ---- rendezvous: a key-value store (PMIx, PMI-1) --------------------------------- */

static int kvs_load_pmix(const oobx_settings_t *s, const oobx_kvs_ops_t **ops, char *why, size_t whylen)
{
    char path[400];
    snprintf(path, sizeof(path), "%.350s/%s", oobx__tp_module_dir(s), OOBX_PMIX_MODULE);
    /* stays loaded, as transport modules do (dlopen counts references) */
    void *h = NULL;
    oobx_kvs_module_init_fn init;
    int o = oobx__module_open(path, OOBX_KVS_MODULE_INIT, "the PMIx module", &h, (void **)&init, why, whylen);
    if (o == OOBX_MODULE_NO_LOAD)
        oobx__appendf(why, whylen, " (build it with libpmix-dev installed, or set OOBX_COMM_ID)");
    if (o != OOBX_MODULE_OPENED) return OOBX_ERR_UNAVAILABLE;
    char mwhy[300] = "";
    int rc = init(OOBX_KVS_VERSION, ops, mwhy, sizeof(mwhy));
    if (rc != 0 || !*ops || (*ops)->version != OOBX_KVS_VERSION) {
        snprintf(why, whylen, "the PMIx module %s refuses this library: %s", path, mwhy[0] ? mwhy : "wrong version");
        dlclose(h);
        return OOBX_ERR_UNAVAILABLE;
    }
    return 0;
}

static void hex_encode(const void *p, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_decode(const char *s, void *p, size_t n)
{
    unsigned char *b = p;
    if (strlen(s) != 2 * n) return -1;
    for (size_t i = 0; i < 2 * n; i++) {
        int c = s[i], v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return -1;
        if (i & 1) b[i / 2] |= (unsigned char)v;
        else b[i / 2] = (unsigned char)(v << 4);
    }
    return 0;
}

/* The launcher's store belongs to the process, not to a communicator: the
 * PMIx client library and hydra's PMI_FD are one per process, so their state
 * is process-wide by nature and is kept here, in atomics, rather than in a
 * communicator that does not exist yet:
 *   - exchanges: which exchange of this process with the store this is. The
 *     keys of the n-th oobx_comm_init_from_env through the store are
 *     oobx.<n>.root.<i>, so that a second call (PMIx allows it) reads no
 *     stale root of the first; every rank makes the same calls in the same
 *     order, so every rank counts the same n. Counted at the start of each
 *     call, failed or not.
 *   - busy: set while a call uses the store. Two threads of one process
 *     would interleave their PMI-1 lines on one descriptor, or their fences,
 *     and might count n in different orders on different ranks: a call that
 *     finds the store busy fails at once (OOBX_ERR_INVALID) instead. */
static struct {
    atomic_uint exchanges;
    atomic_flag busy;
} kvs_process = {0, ATOMIC_FLAG_INIT};

/* The exchange itself: the roots this job's ranks published, in roots[nroots]
 * (the caller frees them), *hosted the magic of the root this rank serves. */
static int kvs_exchange(oobx_launch_t *l, const oobx_settings_t *s, const oobx_launch_settings_t *ls,
                        unsigned seq, root_handle_t **roots_out, int *nroots_out, uint64_t *hosted_out)
{
    const oobx_kvs_ops_t *ops = &oobx__pmi1_ops;
    char why[800] = "";
    int rc = 0;
    if (l->rdv == OOBX_RDV_PMIX && (rc = kvs_load_pmix(s, &ops, why, sizeof(why))) != 0)
        return oobx__fail(NULL, rc, "%s (rank %d): %s", l->name, l->rank, why);
    oobx_kvs_t *k = NULL;
    int rank = -1, size = -1, lr = -1, lsz = -1, tmo = s->timeout_ms;
    char job[256] = "";
    rc = ops->open(l, tmo, &k, &rank, &size, &lr, &lsz, job, sizeof(job), why, sizeof(why));
    if (rc != 0 && l->rank < 0 && getenv("PMI_ID")) /* the PMI_PORT model: no rank before the server's */
        return oobx__fail(NULL, rc, "%s (PMI_ID=%s): %s", l->name, getenv("PMI_ID"), why);
    if (rc != 0) return oobx__fail(NULL, rc, "%s (rank %d): %s", l->name, l->rank, why);
    if ((l->rank >= 0 && rank != l->rank) || (l->nranks > 0 && size != l->nranks)) {
        ops->close(k);
        return oobx__fail(NULL, OOBX_ERR_INVALID, "%s: the environment says rank %d of %d, the %s server rank %d of %d",
                          l->name, l->rank, l->nranks, ops->name, rank, size);
    }
    if (size < 1 || rank < 0 || rank >= size) {
        ops->close(k);
        return oobx__fail(NULL, OOBX_ERR_INVALID, "%s: the %s server gives rank %d of %d", l->name, ops->name, rank,
                          size);
    }
    l->rank = rank;
    l->nranks = size;
    if (l->local_rank < 0 && lr >= 0 && lsz > lr) {
        l->local_rank = lr;
        l->local_size = lsz;
        snprintf(l->local_vars, sizeof(l->local_vars), "the %s server's local rank", ops->name);
    }
    if (l->launcher == OOBX_LAUNCH_HYDRA) snprintf(l->job_id, sizeof(l->job_id), "hydra:%s", job);
    oobx_log_t lg;
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "rank %d/%d", rank, size);
    oobx__log_open(&lg, s, prefix);
    oobx_log_t *lgp = &lg;
    OOBX_INFO(lgp, "launcher %s (job %s): rank %d of %d, local rank %d of %d: %s", l->name, l->job_id, rank, size,
              l->local_rank, l->local_size, l->vars);
    oobx__log_close(&lg);

    unsigned char secret[OOBX_SECRET_BYTES];
    uint64_t magic;
    if ((rc = launch_job_secret(l, "", size, s, secret, &magic)) != 0) {
        ops->close(k);
        return rc;
    }
    int nroots = nroots_for(size, ls->ranks_per_root);
    uint64_t hosted = 0;
    char key[64], val[2 * OOBX_UNIQUE_ID_BYTES + 512];
    for (int i = 0; i < nroots && rc == 0; i++) {
        if (oobx__root_first_rank(i, size, nroots) != rank) continue;
        /* the root listens where a socket would: the interface chosen as for sockets */
        topo_request_t req = {.ifname_spec = s->socket_ifname, .family = s->socket_family,
                              .allow_linklocal = s->socket_linklocal,
                              .pci_target = s->topo_pci[0] ? s->topo_pci : NULL,
                              .module_dir = s->module_dir};
        topo_if_t ifc;
        oobx_sockaddr_t bind_addr;
        root_handle_t h;
        char rwhy[600];
        memset(&bind_addr, 0, sizeof(bind_addr));
        int r = oobx__topo_pick_if(&req, &ifc, rwhy, sizeof(rwhy));
        if (r == 0) {
            memcpy(&bind_addr, &ifc.addr, ifc.addrlen);
            oobx__sock_addr_set_port(&bind_addr, 0);
            r = oobx__root_start(&bind_addr, oobx__mix64(magic, (uint64_t)i), secret, s, &h, rwhy,
                                 sizeof(rwhy));
        }
        snprintf(key, sizeof(key), "oobx.%u.root.%d", seq, i);
        if (r == 0) {
            oobx_unique_id_t id;
            oobx__root_handle_encode(&h, &id);
            hex_encode(&id, sizeof(id), val);
            hosted = h.magic;
        } else {
            /* the others learn why at once instead of waiting for the timeout */
            snprintf(val, sizeof(val), "error:%.200s", rwhy);
            for (char *p = val; *p; p++)
                if (*p == ' ' || *p == '=' || *p == '\n') *p = '_';
            rc = oobx__fail(NULL, r, "rank %d cannot host root %d: %s", rank, i, rwhy);
        }
        int pr = ops->put(k, key, val, why, sizeof(why));
        if (pr != 0 && rc == 0) rc = oobx__fail(NULL, pr, "%s (rank %d): %s", l->name, rank, why);
    }
    if (rc == 0 && (rc = ops->fence(k, tmo, why, sizeof(why))) != 0)
        rc = oobx__fail(NULL, rc, "%s (rank %d): %s", l->name, rank, why);
    root_handle_t *roots = rc == 0 ? calloc((size_t)nroots, sizeof(*roots)) : NULL;
    if (rc == 0 && !roots) rc = oobx__fail(NULL, OOBX_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nroots && rc == 0; i++) {
        int host = oobx__root_first_rank(i, size, nroots);
        snprintf(key, sizeof(key), "oobx.%u.root.%d", seq, i);
        if ((rc = ops->get(k, host, key, val, sizeof(val), tmo, why, sizeof(why))) != 0) {
            rc = oobx__fail(NULL, rc, "%s (rank %d): root %d of rank %d: %s", l->name, rank, i, host, why);
            break;
        }
        if (!strncmp(val, "error:", 6)) {
            rc = oobx__fail(NULL, OOBX_ERR_REMOTE, "rank %d could not host root %d: %s", host, i, val + 6);
            break;
        }
        oobx_unique_id_t id;
        char dwhy[300];
        if (hex_decode(val, &id, sizeof(id)) != 0 ||
            oobx__root_handle_decode(&id, &roots[i], dwhy, sizeof(dwhy)) != 0) {
            rc = oobx__fail(NULL, OOBX_ERR_PROTOCOL, "%s: root %d of rank %d (key %s) is not a unique id", l->name, i,
                            host, key);
            break;
        }
        if (roots[i].magic != oobx__mix64(magic, (uint64_t)i)) {
            rc = oobx__fail(NULL, OOBX_ERR_MISMATCH, "rank %d: root %d of rank %d has another magic than job %s with "
                            "this rank's OOBX_JOB_KEY gives: do all ranks share OOBX_JOB_KEY?", rank, i, host,
                            l->job_id);
            break;
        }
    }
    ops->close(k);
    memset(secret, 0, sizeof(secret));
    if (rc != 0) {
        free(roots);
        return rc;
    }
    *roots_out = roots;
    *nroots_out = nroots;
    *hosted_out = hosted;
    return 0;
}

/* What the launcher says of this rank's host goes into the node-aware
 * bootstrap (the card's header; comm.c, root.c). */
static void take_local(oobx_settings_t *s, const oobx_launch_t *l)
{
    if (l->local_rank < 0 || l->local_size <= l->local_rank) return;
    s->local_rank = l->local_rank;
    s->local_size = l->local_size;
    snprintf(s->local_vars, sizeof(s->local_vars), "%s", l->local_vars);
}

static int init_kvs(oobx_comm_t *comm, oobx_launch_t *l, const oobx_settings_t *s, const oobx_launch_settings_t *ls,
                    const oobx_config_t *cfg)
{
    unsigned seq = atomic_fetch_add(&kvs_process.exchanges, 1);
    if (atomic_flag_test_and_set(&kvs_process.busy))
        return oobx__fail(NULL, OOBX_ERR_INVALID, "%s (rank %d): another oobx_comm_init_from_env of this process is "
                          "using the launcher's %s now; calls through the launcher must come one after the other, in "
                          "the same order on every rank", l->name, l->rank,
                          l->rdv == OOBX_RDV_PMIX ? "PMIx client" : "PMI-1 connection");
    root_handle_t *roots = NULL;
    int nroots = 0;
    uint64_t hosted = 0;
    l->kvs_seq = seq;
    int rc = kvs_exchange(l, s, ls, seq, &roots, &nroots, &hosted);
    atomic_flag_clear(&kvs_process.busy);
    oobx_settings_t sl = *s;
    take_local(&sl, l);
    if (rc == 0) rc = oobx__comm_init_common(comm, l->nranks, l->rank, nroots, roots, &sl, cfg, hosted);
    free(roots);
    return rc;
}

/* ---- the call --------------------------------------------------------------- */

int oobx_comm_init_from_env(oobx_comm_t *comm, const oobx_config_t *cfg)
{
    if (!comm) return oobx__fail(NULL, OOBX_ERR_INVALID, "oobx_comm_init_from_env: comm is NULL");
    oobx_settings_t s;
    int rc = oobx__settings_load(&s, cfg);
    if (rc != 0) return rc;
    oobx_launch_settings_t ls;
    rc = oobx__settings_parse(oobx__launch_settings_table, &ls, NULL);
    if (rc != 0) return oobx__fail(NULL, rc, "%s", oobx_last_error());
    oobx_launch_t l;
    char why[1200];
    rc = oobx__launch_detect(oobx__env_process, NULL, ls.launcher, s.comm_id, &l, why, sizeof(why));
    if (rc != 0) return oobx__fail(NULL, rc, "%s", why);
    if (l.rdv == OOBX_RDV_PMIX || l.rdv == OOBX_RDV_PMI1) return init_kvs(comm, &l, &s, &ls, cfg);
    take_local(&s, &l);
    oobx_log_t lg;
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "rank %d/%d", l.rank, l.nranks);
    oobx__log_open(&lg, &s, prefix);
    oobx_log_t *lgp = &lg;
    OOBX_INFO(lgp, "launcher %s (job %s): %s", l.name, l.job_id, l.vars);
    oobx__log_close(&lg);
    /* torchrun's MASTER_PORT+1 may be taken: a window of ports after it */
    if (l.launcher == OOBX_LAUNCH_TORCHRUN && !l.root_list_from_comm_id) l.root_alts = ls.master_port_tries - 1;
    if (l.rdv == OOBX_RDV_SLURM) return init_slurm(comm, &l, &s, &ls, cfg);
    return init_addrs(comm, &l, l.roots, &s, cfg, NULL, NULL,
                      l.root_list_from_comm_id ? "OOBX_COMM_ID" : "the root list");
}
