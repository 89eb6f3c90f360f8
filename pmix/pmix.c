/*
 * liboobx-pmix.so: the key-value store of a PMIx server (Open MPI's mpirun,
 * srun --mpi=pmix) for oobx_comm_init_from_env's rendezvous, loaded on
 * demand so that liboobx itself links no PMIx. Exports one symbol,
 * oobx_kvs_module_init (launch.h).
 */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "oobx.h"

struct oobx_kvs {
    pmix_proc_t me;
};

static int timeout_s(int timeout_ms)
{
    return timeout_ms < 0 ? 0 : (timeout_ms + 999) / 1000; /* 0: PMIx waits forever */
}

static int get_u32(const pmix_proc_t *p, const char *key, uint32_t *out)
{
    pmix_value_t *v = NULL;
    if (PMIx_Get(p, key, NULL, 0, &v) != PMIX_SUCCESS || !v) return -1;
    int rc = 0;
    switch (v->type) {
    case PMIX_UINT32: *out = v->data.uint32; break;
    case PMIX_UINT16: *out = v->data.uint16; break;
    case PMIX_INT: *out = (uint32_t)v->data.integer; break;
    case PMIX_PROC_RANK: *out = v->data.rank; break;
    default: rc = -1;
    }
    PMIX_VALUE_RELEASE(v);
    return rc;
}

static int pmix_open(const oobx_launch_t *l, int timeout_ms, oobx_kvs_t **out, int *rank, int *size, int *local_rank,
                     int *local_size, char *job, size_t joblen, char *why, size_t whylen)
{
    (void)l;
    (void)timeout_ms;
    oobx_kvs_t *k = calloc(1, sizeof(*k));
    if (!k) return OOBX_ERR_NOMEM;
    pmix_status_t st = PMIx_Init(&k->me, NULL, 0);
    if (st != PMIX_SUCCESS) {
        snprintf(why, whylen, "PMIx_Init: %s (is the PMIx server of the launcher reachable?)", PMIx_Error_string(st));
        free(k);
        return OOBX_ERR_UNAVAILABLE;
    }
    pmix_proc_t wild;
    PMIX_LOAD_PROCID(&wild, k->me.nspace, PMIX_RANK_WILDCARD);
    uint32_t n = 0, lr = 0, ls = 0;
    if (get_u32(&wild, PMIX_JOB_SIZE, &n) != 0) {
        snprintf(why, whylen, "PMIx: the server gives no %s for namespace %s", PMIX_JOB_SIZE, k->me.nspace);
        PMIx_Finalize(NULL, 0);
        free(k);
        return OOBX_ERR_UNAVAILABLE;
    }
    *local_rank = get_u32(&k->me, PMIX_LOCAL_RANK, &lr) == 0 ? (int)lr : -1;
    *local_size = get_u32(&wild, PMIX_LOCAL_SIZE, &ls) == 0 ? (int)ls : -1;
    *rank = (int)k->me.rank;
    *size = (int)n;
    snprintf(job, joblen, "%s", k->me.nspace);
    *out = k;
    return 0;
}

static int pmix_put(oobx_kvs_t *k, const char *key, const char *value, char *why, size_t whylen)
{
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_STRING;
    v.data.string = (char *)value;
    pmix_status_t st = PMIx_Put(PMIX_GLOBAL, key, &v);
    (void)k;
    if (st != PMIX_SUCCESS) {
        snprintf(why, whylen, "PMIx_Put of %s: %s", key, PMIx_Error_string(st));
        return OOBX_ERR_REMOTE;
    }
    return 0;
}

static int pmix_fence(oobx_kvs_t *k, int timeout_ms, char *why, size_t whylen)
{
    (void)k;
    pmix_status_t st = PMIx_Commit();
    if (st != PMIX_SUCCESS) {
        snprintf(why, whylen, "PMIx_Commit: %s", PMIx_Error_string(st));
        return OOBX_ERR_REMOTE;
    }
    pmix_info_t info[2];
    bool collect = true;
    int t = timeout_s(timeout_ms);
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &t, PMIX_INT);
    st = PMIx_Fence(NULL, 0, info, t ? 2 : 1);
    if (st != PMIX_SUCCESS) {
        snprintf(why, whylen, "PMIx_Fence (timeout %d s): %s%s", t, PMIx_Error_string(st),
                 st == PMIX_ERR_TIMEOUT ? ": did every rank of the job start?" : "");
        return st == PMIX_ERR_TIMEOUT ? OOBX_ERR_TIMEOUT : OOBX_ERR_REMOTE;
    }
    return 0;
}

static int pmix_get(oobx_kvs_t *k, int rank, const char *key, char *value, size_t cap, int timeout_ms, char *why,
                    size_t whylen)
{
    pmix_proc_t p;
    PMIX_LOAD_PROCID(&p, k->me.nspace, (pmix_rank_t)rank);
    pmix_info_t info;
    int t = timeout_s(timeout_ms);
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &t, PMIX_INT);
    pmix_value_t *v = NULL;
    pmix_status_t st = PMIx_Get(&p, key, t ? &info : NULL, t ? 1 : 0, &v);
    if (st != PMIX_SUCCESS || !v) {
        snprintf(why, whylen, "PMIx_Get of %s from rank %d: %s", key, rank, PMIx_Error_string(st));
        return st == PMIX_ERR_TIMEOUT ? OOBX_ERR_TIMEOUT : OOBX_ERR_REMOTE;
    }
    int rc = 0;
    if (v->type != PMIX_STRING || !v->data.string || strlen(v->data.string) >= cap) {
        snprintf(why, whylen, "PMIx_Get of %s from rank %d: not a string of less than %zu bytes", key, rank, cap);
        rc = OOBX_ERR_PROTOCOL;
    } else {
        snprintf(value, cap, "%s", v->data.string);
    }
    PMIX_VALUE_RELEASE(v);
    return rc;
}

static void pmix_close(oobx_kvs_t *k)
{
    if (!k) return;
    PMIx_Finalize(NULL, 0);
    free(k);
}

static const oobx_kvs_ops_t pmix_ops = {
    .version = OOBX_KVS_VERSION,
    .name = "PMIx",
    .open = pmix_open,
    .put = pmix_put,
    .fence = pmix_fence,
    .get = pmix_get,
    .close = pmix_close,
};

__attribute__((visibility("default"))) int oobx_kvs_module_init(int version, const oobx_kvs_ops_t **ops, char *why,
                                                                size_t whylen)
{
    if (version != OOBX_KVS_VERSION) {
        snprintf(why, whylen, "liboobx-pmix.so: store interface version %d, this module has %d", version,
                 OOBX_KVS_VERSION);
        return OOBX_ERR_UNAVAILABLE;
    }
    *ops = &pmix_ops;
    return 0;
}
