/*
 * Launchers: which one started this process (following the nesting), what it
 * says about rank, size and the host's ranks, the job identity it gives, and
 * the key-value stores (PMIx, PMI-1) some of them serve for the rendezvous.
 */
#ifndef OOBX_LAUNCH_H
#define OOBX_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#include "settings.h"

/* In nesting order, outermost last: the first whose variables are present wins. */
typedef enum {
    OOBX_LAUNCH_NONE = 0,
    OOBX_LAUNCH_OOBX,     /* oobx-run, or OOBX_RANK/OOBX_NRANKS set by hand */
    OOBX_LAUNCH_TORCHRUN, /* RANK/WORLD_SIZE, MASTER_ADDR/MASTER_PORT */
    OOBX_LAUNCH_OMPI,     /* Open MPI's mpirun: OMPI_COMM_WORLD_*, PMIx */
    OOBX_LAUNCH_HYDRA,    /* MPICH's hydra: PMI_RANK/PMI_SIZE, PMI_FD or PMI_PORT */
    OOBX_LAUNCH_PMIX,     /* srun --mpi=pmix (or any PMIx server): PMIX_NAMESPACE/PMIX_RANK */
    OOBX_LAUNCH_SLURM,    /* srun: SLURM_PROCID/SLURM_STEP_NUM_TASKS of a job step */
} oobx_launcher_t;

/* How the roots are found. */
typedef enum {
    OOBX_RDV_ADDRS = 1, /* a root list (OOBX_COMM_ID, MASTER_ADDR:MASTER_PORT+1) in roots */
    OOBX_RDV_PMIX,      /* unique ids published and fetched through PMIx (liboobx-pmix.so) */
    OOBX_RDV_PMI1,      /* the same through hydra's PMI-1 wire protocol (pmi1.c) */
    OOBX_RDV_SLURM,     /* roots on the step's nodes at a port derived from job and step */
} oobx_rdv_t;

/* The detection result. rank/nranks: -1 where the launcher's store gives
 * them (PMIx without a size variable); local_rank/local_size: -1 unknown. */
typedef struct oobx_launch {
    oobx_launcher_t launcher;
    const char *name;   /* "oobx-run", "torchrun", "Open MPI", "MPICH hydra", "PMIx", "Slurm" */
    oobx_rdv_t rdv;
    int rank, nranks;
    int local_rank, local_size;
    char local_vars[64]; /* which variables (or which server) gave local_rank/local_size */
    /* The job identity, the same on every rank of the job and different
     * between jobs; the job secret and the magic derive from it
     * (launch_job_secret in launch.c):
     *   "oobx-run:<OOBX_RUN_KEY>"            OOBX_RANK/OOBX_NRANKS with OOBX_RUN_KEY
     *   "torchelastic:<TORCHELASTIC_RUN_ID>" torchrun
     *   "pmix:<PMIX_NAMESPACE>"              Open MPI's mpirun, srun --mpi=pmix
     *   "ompi:<OMPI_MCA_ess_base_jobid>"     Open MPI without PMIx (with OOBX_COMM_ID)
     *   "hydra:<kvsname>"                    MPICH hydra (the name comes from the PMI server;
     *                                        "hydra:" with OOBX_COMM_ID, where no store is opened)
     *   "slurm:<jobid>.<stepid>"             srun without PMI
     *   ""                                   none (plain OOBX_RANK/OOBX_NRANKS, torchrun without
     *                                        TORCHELASTIC_RUN_ID): rank 0 warns unless a job key is set */
    char job_id[256];
    char vars[512];     /* which variables gave rank, size, local rank and roots (logged at info) */
    char roots[1024];   /* OOBX_RDV_ADDRS: host:port[,host:port...] */
    int root_list_from_comm_id; /* roots came from OOBX_COMM_ID (else MASTER_ADDR/MASTER_PORT) */
    int root_alts;      /* the root may sit at up to this many ports after the listed one (root_handle_t.nalt) */
    char pmi_addr[128]; /* OOBX_RDV_PMI1: PMI_PORT (host:port) when there is no PMI_FD */
    int pmi_fd;         /* OOBX_RDV_PMI1: PMI_FD, or -1 */
    unsigned kvs_seq;   /* PMIx, PMI-1: which exchange of this process with the store (0: its first) */
    /* OOBX_RDV_SLURM */
    char slurm_job[32], slurm_step[32];
} oobx_launch_t;

/* The environment as a function, so that tests can give their own. */
typedef const char *(*oobx_env_get_fn)(void *ctx, const char *name);
const char *oobx__env_process(void *ctx, const char *name); /* getenv */

/* Detects the launcher from env. force: "" or "auto" follows the nesting,
 * else one of oobx, torchrun, ompi, hydra, pmix, slurm (OOBX_LAUNCHER).
 * comm_id: OOBX_COMM_ID ("" unset), which replaces a launcher's rendezvous
 * with a root list. 0, or OOBX_ERR_INVALID with why naming the variables
 * (none found, half a pair, not numbers, out of range, conflicting). */
int oobx__launch_detect(oobx_env_get_fn env, void *ctx, const char *force, const char *comm_id,
                        oobx_launch_t *out, char *why, size_t whylen);

/* Launcher settings (their own table, as a transport's): */
typedef struct oobx_launch_settings {
    char launcher[16];        /* OOBX_LAUNCHER */
    char slurm_ports[32];     /* OOBX_SLURM_PORT_RANGE: lo-hi */
    int ranks_per_root;       /* OOBX_LAUNCH_RANKS_PER_ROOT */
    int master_port_tries;    /* OOBX_MASTER_PORT_TRIES */
} oobx_launch_settings_t;
extern const oobx_setting_desc_t oobx__launch_settings_table[];

/* ---- hostlists and task layouts (hostlist.c) ---- */

/* The number of names in a Slurm hostlist ("n[1-3,7],gpu[01-02]-ib,x"), or
 * -1 with why when it is malformed. */
int oobx__hostlist_count(const char *list, char *why, size_t whylen);
/* The idx-th name (0-based) into out. 0, or -1 with why. */
int oobx__hostlist_nth(const char *list, int idx, char *out, size_t outlen, char *why, size_t whylen);
/* Expands SLURM_STEP_TASKS_PER_NODE ("4(x2),3") into counts[0..n-1] (n names
 * expected). 0, or -1 with why (malformed, more or fewer nodes than n). */
int oobx__tasks_per_node(const char *spec, int *counts, int n, char *why, size_t whylen);
/* The node index of rank under distribution dist ("" or block*: consecutive
 * ranks share a node; cyclic*: round robin over the nodes that still have
 * room), or -1 for a distribution whose layout cannot be computed. */
int oobx__task_node(const int *counts, int nnodes, int rank, const char *dist);
/* The port of root i of a Slurm step in [lo, hi]: from the job identity. */
int oobx__slurm_port(const char *job_id, int lo, int hi, int root);
/* "lo-hi" (digits only) into *lo, *hi (1..65535, lo <= hi). 0 or -1. */
int oobx__port_range_parse(const char *text, int *lo, int *hi);

/* The roots of a Slurm step started without PMI (launch.c). */
typedef struct oobx_slurm_roots {
    int nnodes;           /* names in SLURM_STEP_NODELIST */
    int nroots;           /* ceil(nranks / ranks_per_root), at most one per node and per port of the range */
    int port_lo, port_hi; /* OOBX_SLURM_PORT_RANGE */
    char **names;         /* [nroots]: the node that runs the first rank of root i's block */
    int *ports;           /* [nroots]: oobx__slurm_port(job_id, lo, hi, i) */
    char list[1024];      /* name:port[,name:port...] ([name]:port for a name with a colon) */
} oobx_slurm_roots_t;
/* From the step's variables (nodes: SLURM_STEP_NODELIST, tpn:
 * SLURM_STEP_TASKS_PER_NODE, dist: SLURM_DISTRIBUTION or NULL) and the
 * settings (range: OOBX_SLURM_PORT_RANGE). 0, or OOBX_ERR_INVALID /
 * OOBX_ERR_NOMEM with why naming the variable and its value. Free out with
 * oobx__slurm_roots_free (also after a failure). */
int oobx__slurm_roots(const char *job_id, int nranks, const char *nodes, const char *tpn, const char *dist,
                      const char *range, int ranks_per_root, oobx_slurm_roots_t *out, char *why, size_t whylen);
void oobx__slurm_roots_free(oobx_slurm_roots_t *r);

/* ---- key-value stores: PMIx (module) and PMI-1 (pmi1.c) ---- */

typedef struct oobx_kvs oobx_kvs_t;
typedef struct oobx_kvs_ops {
    int version; /* OOBX_KVS_VERSION */
    const char *name;
    /* Connects; fills rank, size, local rank/size (-1 unknown) and the job
     * name (PMIx namespace, PMI-1 kvsname). why gets the reason of a failure. */
    int (*open)(const oobx_launch_t *l, int timeout_ms, oobx_kvs_t **out, int *rank, int *size, int *local_rank,
                int *local_size, char *job, size_t joblen, char *why, size_t whylen);
    /* Publishes key=value (value: printable text of at most 255 bytes);
     * bounded by open's timeout. */
    int (*put)(oobx_kvs_t *k, const char *key, const char *value, char *why, size_t whylen);
    /* Commits what was put and waits for every rank to do the same. */
    int (*fence)(oobx_kvs_t *k, int timeout_ms, char *why, size_t whylen);
    /* The value rank published under key. */
    int (*get)(oobx_kvs_t *k, int rank, const char *key, char *value, size_t cap, int timeout_ms, char *why,
               size_t whylen);
    /* Disconnects (finalize); accepts NULL. */
    void (*close)(oobx_kvs_t *k);
} oobx_kvs_ops_t;
#define OOBX_KVS_VERSION 1
/* What liboobx-pmix.so exports. */
typedef int (*oobx_kvs_module_init_fn)(int version, const oobx_kvs_ops_t **ops, char *why, size_t whylen);
#define OOBX_KVS_MODULE_INIT "oobx_kvs_module_init"
#define OOBX_PMIX_MODULE "liboobx-pmix.so"

extern const oobx_kvs_ops_t oobx__pmi1_ops; /* pmi1.c */

/* PMI-1 reply parsing (pmi1.c), for tests: the value of key in a reply line
 * "cmd=x key=value ...\n" into out. 0, or -1 when absent or too long. */
int oobx__pmi1_field(const char *line, const char *key, char *out, size_t outlen);

#endif
