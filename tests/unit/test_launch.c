/*
 * Unit tests of the launchers (src/launch.c, src/hostlist.c, src/pmi1.c):
 * Slurm hostlists and task layouts, the Slurm roots and their ports,
 * detection from tables of environment variables (the nesting, conflicts),
 * the PMI-1 client against a scripted server on a socketpair (hostile
 * replies fail clearly and within the deadline), jobs of forked ranks against
 * a fake hydra (two communicators in one process; calls that overlap), and
 * the Slurm "port taken" error.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "launch.h"
#include "oobx.h"
#include "util.h"

#define assert_contains(hay, needle)                                                                         \
    do {                                                                                                     \
        if (!strstr((hay), (needle))) fail_msg("\"%s\"\n  does not contain \"%s\"", (hay), (needle));        \
    } while (0)

/* ---- hostlists ---------------------------------------------------------------- */

static void expect_names(const char *list, const char *const *want, int n)
{
    char why[600] = "", name[256];
    int got = oobx__hostlist_count(list, why, sizeof(why));
    if (got != n) fail_msg("hostlist \"%s\": %d names, want %d (%s)", list, got, n, why);
    for (int i = 0; i < n; i++) {
        if (oobx__hostlist_nth(list, i, name, sizeof(name), why, sizeof(why)) != 0)
            fail_msg("hostlist \"%s\": name %d: %s", list, i, why);
        if (strcmp(name, want[i])) fail_msg("hostlist \"%s\": name %d is \"%s\", want \"%s\"", list, i, name, want[i]);
    }
    if (oobx__hostlist_nth(list, n, name, sizeof(name), why, sizeof(why)) == 0)
        fail_msg("hostlist \"%s\": name %d exists (\"%s\"), the list has %d", list, n, name, n);
    assert_contains(why, "names");
}

static void test_hostlist_expand(void **state)
{
    (void)state;
    expect_names("login", (const char *[]){"login"}, 1);
    expect_names("n[1-3,7],gpu[01-02]-ib,x",
                 (const char *[]){"n1", "n2", "n3", "n7", "gpu01-ib", "gpu02-ib", "x"}, 7);
    /* zero padding keeps the width of the range's text, also across a carry */
    expect_names("n[008-011]", (const char *[]){"n008", "n009", "n010", "n011"}, 4);
    expect_names("n[098-101]", (const char *[]){"n098", "n099", "n100", "n101"}, 4);
    expect_names("n[9-11]", (const char *[]){"n9", "n10", "n11"}, 3);
    /* several bracket groups: the first varies slowest */
    expect_names("rack[1-2]n[1-3]",
                 (const char *[]){"rack1n1", "rack1n2", "rack1n3", "rack2n1", "rack2n2", "rack2n3"}, 6);
    expect_names("r[1,3]-n[07-08]-ib", (const char *[]){"r1-n07-ib", "r1-n08-ib", "r3-n07-ib", "r3-n08-ib"}, 4);
    /* commas at both levels, single-number groups */
    expect_names("a[5],b,c[1-2,4]", (const char *[]){"a5", "b", "c1", "c2", "c4"}, 5);
    expect_names("node1,node2", (const char *[]){"node1", "node2"}, 2);
}

static void test_hostlist_malformed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",          ",",        "a,",        ",a",         "a,,b",     "n[",        "n[1-2",     "n]1",
        "n[]",       "n[2-1]",   "n[1,]",     "n[,1]",      "n[1--2]",  "n[a]",      "n[[1]]",    "n[1]]",
        "n[1-x]",    "n[-1]",    "n[1-2]x[1-2]y[1-2]z[1-2]w[1-2]", "n[1-9999999999]", "n[0-99999]m[0-99999]",
    };
    for (size_t i = 0; i < OOBX_ARRAY_SIZE(bad); i++) {
        char why[600] = "";
        int n = oobx__hostlist_count(bad[i], why, sizeof(why));
        if (n >= 0) fail_msg("hostlist \"%s\" is malformed, but counts %d names", bad[i], n);
        if (!why[0]) fail_msg("hostlist \"%s\": refused without a reason", bad[i]);
        assert_contains(why, "hostlist");
        char name[64];
        why[0] = '\0';
        assert_int_equal(oobx__hostlist_nth(bad[i], 0, name, sizeof(name), why, sizeof(why)), -1);
        assert_true(why[0] != '\0');
    }
    /* a name longer than the caller's buffer is an error, not a cut name */
    char small[6], why[300] = "";
    assert_int_equal(oobx__hostlist_nth("gpu[01-02]-ib", 1, small, sizeof(small), why, sizeof(why)), -1);
    assert_contains(why, "does not fit");
}

/* ---- task layouts --------------------------------------------------------------- */

static void test_tasks_per_node(void **state)
{
    (void)state;
    int c[8];
    char why[300];
    assert_int_equal(oobx__tasks_per_node("4(x2),3", c, 3, why, sizeof(why)), 0);
    assert_int_equal(c[0], 4);
    assert_int_equal(c[1], 4);
    assert_int_equal(c[2], 3);
    assert_int_equal(oobx__tasks_per_node("1", c, 1, why, sizeof(why)), 0);
    assert_int_equal(c[0], 1);
    assert_int_equal(oobx__tasks_per_node("2,1(x3),5", c, 5, why, sizeof(why)), 0);
    int want[] = {2, 1, 1, 1, 5};
    for (int i = 0; i < 5; i++) assert_int_equal(c[i], want[i]);
    static const char *const bad[] = {"4(x0)", "4(2)", "4(x2", "4,", ",4", "a", "-1", "4(x2)3", "4 ,3", "4(x)"};
    for (size_t i = 0; i < OOBX_ARRAY_SIZE(bad); i++) {
        why[0] = '\0';
        if (oobx__tasks_per_node(bad[i], c, 8, why, sizeof(why)) == 0) fail_msg("tasks per node \"%s\" accepted", bad[i]);
        assert_contains(why, bad[i]);
    }
    /* more or fewer nodes than the hostlist names */
    assert_int_equal(oobx__tasks_per_node("4(x3)", c, 2, why, sizeof(why)), -1);
    assert_contains(why, "more than the 2 nodes");
    assert_int_equal(oobx__tasks_per_node("4", c, 2, why, sizeof(why)), -1);
    assert_contains(why, "names 1 nodes, the step has 2");
}

static void test_task_node(void **state)
{
    (void)state;
    const int counts[] = {2, 3, 1};
    const int block[] = {0, 0, 1, 1, 1, 2}, cyclic[] = {0, 1, 2, 0, 1, 1};
    for (int r = 0; r < 6; r++) {
        assert_int_equal(oobx__task_node(counts, 3, r, NULL), block[r]);
        assert_int_equal(oobx__task_node(counts, 3, r, ""), block[r]);
        assert_int_equal(oobx__task_node(counts, 3, r, "block:cyclic"), block[r]);
        assert_int_equal(oobx__task_node(counts, 3, r, "cyclic"), cyclic[r]);
        assert_int_equal(oobx__task_node(counts, 3, r, "cyclic:block"), cyclic[r]);
        /* a layout the variables do not describe */
        assert_int_equal(oobx__task_node(counts, 3, r, "plane=2"), -1);
        assert_int_equal(oobx__task_node(counts, 3, r, "arbitrary"), -1);
    }
    assert_int_equal(oobx__task_node(counts, 3, 6, NULL), -1);
    assert_int_equal(oobx__task_node(counts, 3, 6, "cyclic"), -1);
    assert_int_equal(oobx__task_node(counts, 3, -1, NULL), -1);
}

/* ---- the Slurm roots and their ports -------------------------------------------- */

static void test_port_range(void **state)
{
    (void)state;
    int lo = -1, hi = -1;
    assert_int_equal(oobx__port_range_parse("20000-29999", &lo, &hi), 0);
    assert_int_equal(lo, 20000);
    assert_int_equal(hi, 29999);
    assert_int_equal(oobx__port_range_parse("1-65535", &lo, &hi), 0);
    assert_int_equal(oobx__port_range_parse("5000-5000", &lo, &hi), 0);
    assert_int_equal(lo, 5000);
    assert_int_equal(hi, 5000);
    static const char *const bad[] = {"",          "20000",      "20000-",    "-20000",     "0-100",
                                      "100-65536", "200-100",    "a-b",       "-1-5",       "100-200x",
                                      " 100-200",  "+100-200",   "100 - 200", "100-+200",   "100--200",
                                      "1e3-2e3",   "100-200-300", "0000100-200", "99999999999-1"};
    for (size_t i = 0; i < OOBX_ARRAY_SIZE(bad); i++) {
        lo = hi = -7;
        if (oobx__port_range_parse(bad[i], &lo, &hi) == 0) fail_msg("port range \"%s\" accepted: %d-%d", bad[i], lo, hi);
        assert_int_equal(lo, -7); /* outputs only on success */
    }
}

static void test_slurm_port(void **state)
{
    (void)state;
    /* deterministic, in the range, root i + 1 one port above root i (wrapping) */
    int p0 = oobx__slurm_port("slurm:4242.0", 20000, 29999, 0);
    assert_int_equal(oobx__slurm_port("slurm:4242.0", 20000, 29999, 0), p0);
    for (int i = 0; i < 20; i++) {
        int p = oobx__slurm_port("slurm:4242.0", 20000, 29999, i);
        assert_true(p >= 20000 && p <= 29999);
        assert_int_equal(p, 20000 + (p0 - 20000 + i) % 10000);
    }
    int w = oobx__slurm_port("slurm:4242.0", 41000, 41001, 0);
    assert_true(w == 41000 || w == 41001);
    assert_int_equal(oobx__slurm_port("slurm:4242.0", 41000, 41001, 1), w == 41000 ? 41001 : 41000);
    assert_int_equal(oobx__slurm_port("slurm:1.2", 30000, 30000, 0), 30000);
    /* steps and jobs spread over the range: 200 identities, few collisions */
    int *seen = calloc(10000, sizeof(int)), distinct = 0;
    assert_non_null(seen);
    for (int job = 0; job < 20; job++)
        for (int step = 0; step < 10; step++) {
            char id[64];
            snprintf(id, sizeof(id), "slurm:%d.%d", 100000 + job, step);
            int p = oobx__slurm_port(id, 20000, 29999, 0);
            assert_true(p >= 20000 && p <= 29999);
            if (!seen[p - 20000]++) distinct++;
        }
    free(seen);
    if (distinct < 190) fail_msg("200 job.step identities take only %d distinct ports of 10000", distinct);
    assert_int_not_equal(oobx__slurm_port("slurm:4242.0", 20000, 29999, 0),
                         oobx__slurm_port("slurm:4242.1", 20000, 29999, 0));
}

static void test_slurm_roots(void **state)
{
    (void)state;
    oobx_slurm_roots_t r;
    char why[1200] = "", want[1024] = "";
    const char *id = "slurm:4242.0";
    /* block: one root per 2 ranks, one per node */
    assert_int_equal(oobx__slurm_roots(id, 8, "node[1-4]", "2(x4)", NULL, "20000-29999", 2, &r, why, sizeof(why)), 0);
    assert_int_equal(r.nnodes, 4);
    assert_int_equal(r.nroots, 4);
    for (int i = 0; i < 4; i++) {
        char n[16];
        snprintf(n, sizeof(n), "node%d", i + 1);
        assert_string_equal(r.names[i], n);
        assert_int_equal(r.ports[i], oobx__slurm_port(id, 20000, 29999, i));
        oobx__appendf(want, sizeof(want), "%s%s:%d", i ? "," : "", n, r.ports[i]);
    }
    assert_string_equal(r.list, want);
    oobx__slurm_roots_free(&r);
    /* cyclic: the first ranks of the blocks (0, 2, 4, 6) run on nodes 1, 3, 1, 3 */
    assert_int_equal(oobx__slurm_roots(id, 8, "node[1-4]", "2(x4)", "cyclic", "20000-29999", 2, &r, why, sizeof(why)),
                     0);
    assert_int_equal(r.nroots, 4);
    assert_string_equal(r.names[0], "node1");
    assert_string_equal(r.names[1], "node3");
    assert_string_equal(r.names[2], "node1");
    assert_string_equal(r.names[3], "node3");
    oobx__slurm_roots_free(&r);
    /* uneven layout: 3+1 tasks, 2 roots: ranks 0 and 2 are both on node a */
    assert_int_equal(oobx__slurm_roots(id, 4, "a,b", "3,1", "block", "20000-29999", 2, &r, why, sizeof(why)), 0);
    assert_int_equal(r.nroots, 2);
    assert_string_equal(r.names[0], "a");
    assert_string_equal(r.names[1], "a");
    oobx__slurm_roots_free(&r);
    /* the default: one root per 256 ranks; at most one root per node */
    assert_int_equal(oobx__slurm_roots(id, 8, "node[1-4]", "2(x4)", NULL, "20000-29999", 256, &r, why, sizeof(why)),
                     0);
    assert_int_equal(r.nroots, 1);
    oobx__slurm_roots_free(&r);
    assert_int_equal(oobx__slurm_roots(id, 8, "node[1-4]", "2(x4)", NULL, "20000-29999", 1, &r, why, sizeof(why)), 0);
    assert_int_equal(r.nroots, 4);
    oobx__slurm_roots_free(&r);
    /* and at most one per port of the range */
    assert_int_equal(oobx__slurm_roots(id, 8, "node[1-4]", "2(x4)", NULL, "41000-41001", 1, &r, why, sizeof(why)), 0);
    assert_int_equal(r.nroots, 2);
    assert_int_not_equal(r.ports[0], r.ports[1]);
    assert_true(r.ports[0] >= 41000 && r.ports[0] <= 41001 && r.ports[1] >= 41000 && r.ports[1] <= 41001);
    oobx__slurm_roots_free(&r);
    assert_int_equal(oobx__slurm_roots(id, 1, "127.0.0.1", "1", NULL, "30000-30000", 256, &r, why, sizeof(why)), 0);
    assert_string_equal(r.list, "127.0.0.1:30000");
    oobx__slurm_roots_free(&r);
}

static void expect_roots_error(const char *nodes, const char *tpn, const char *dist, const char *range, int nranks,
                               const char *want1, const char *want2)
{
    oobx_slurm_roots_t r;
    char why[1200] = "";
    int rc = oobx__slurm_roots("slurm:1.0", nranks, nodes, tpn, dist, range, 1, &r, why, sizeof(why));
    oobx__slurm_roots_free(&r);
    if (rc != OOBX_ERR_INVALID)
        fail_msg("nodes %s, tasks %s, dist %s, range %s: rc %d, want OOBX_ERR_INVALID", nodes ? nodes : "(null)",
                 tpn ? tpn : "(null)", dist ? dist : "(null)", range ? range : "(null)", rc);
    assert_contains(why, want1);
    if (want2) assert_contains(why, want2);
}

static void test_slurm_roots_errors(void **state)
{
    (void)state;
    static const char *const ranges[] = {"", "20000", "0-10", "10-70000", "300-200", "x-y", "100-200 "};
    for (size_t i = 0; i < OOBX_ARRAY_SIZE(ranges); i++) {
        char want[64];
        snprintf(want, sizeof(want), "OOBX_SLURM_PORT_RANGE=%s is not lo-hi", ranges[i]);
        expect_roots_error("n[1-2]", "1(x2)", NULL, ranges[i], 2, want, "1 <= lo <= hi <= 65535");
    }
    expect_roots_error("n[1-", "1(x2)", NULL, "20000-29999", 2, "SLURM_STEP_NODELIST", "n[1-");
    expect_roots_error("n[1-2]", "4,3", NULL, "20000-29999", 8, "SLURM_STEP_TASKS_PER_NODE=4,3 holds 7 tasks",
                       "the step 8");
    expect_roots_error("n[1-2]", "2(x3)", NULL, "20000-29999", 6, "SLURM_STEP_TASKS_PER_NODE", "more than the 2 nodes");
    expect_roots_error("n[1-2]", "2(x2)", "plane=2", "20000-29999", 4, "SLURM_DISTRIBUTION=plane=2",
                       "srun --mpi=pmix");
    expect_roots_error(NULL, "2", NULL, "20000-29999", 2, "SLURM_STEP_NODELIST (unset)", NULL);
    expect_roots_error("n1", NULL, NULL, "20000-29999", 2, "SLURM_STEP_TASKS_PER_NODE (unset)", NULL);
}

/* ---- detection from tables of variables --------------------------------------------- */

static const char *table_get(void *ctx, const char *name)
{
    size_t n = strlen(name);
    for (const char *const *p = ctx; *p; p++)
        if (!strncmp(*p, name, n) && (*p)[n] == '=') return *p + n + 1;
    return NULL;
}

static int detect(const char *const *env, const char *force, const char *comm_id, oobx_launch_t *l, char *why,
                  size_t whylen)
{
    why[0] = '\0';
    memset(l, 0x5a, sizeof(*l));
    return oobx__launch_detect(table_get, (void *)env, force, comm_id ? comm_id : "", l, why, whylen);
}

/* srun -n 8 on node[1-2]: this task is rank 5, the second on node2 */
#define SRUN_8 "SLURM_JOB_ID=4242", "SLURM_STEP_ID=0", "SLURM_PROCID=5", "SLURM_NTASKS=8", \
    "SLURM_STEP_NUM_TASKS=8", "SLURM_LOCALID=1", "SLURM_STEP_NODELIST=node[1-2]", \
    "SLURM_STEP_TASKS_PER_NODE=4(x2)", "SLURMD_NODENAME=node2"
/* what a batch script sees, and what a daemon step that mpirun or mpiexec
 * starts with srun passes on to the ranks: SLURM_PROCID 0 of the outer step */
#define SBATCH_8 "SLURM_JOB_ID=4242", "SLURM_PROCID=0", "SLURM_NTASKS=8", "SLURM_NODELIST=node1", \
    "SLURM_TASKS_PER_NODE=8"
#define DAEMON_STEP "SLURM_STEP_ID=0", "SLURM_STEP_NUM_TASKS=1", "SLURM_STEP_NODELIST=node1", \
    "SLURM_STEP_TASKS_PER_NODE=1", "SLURM_LOCALID=0", "SLURMD_NODENAME=node1"

static void test_detect_slurm(void **state)
{
    (void)state;
    oobx_launch_t l;
    char why[1200];
    const char *srun[] = {SRUN_8, NULL};
    assert_int_equal(detect(srun, "auto", NULL, &l, why, sizeof(why)), 0);
    assert_int_equal(l.launcher, OOBX_LAUNCH_SLURM);
    assert_int_equal(l.rdv, OOBX_RDV_SLURM);
    assert_int_equal(l.rank, 5);
    assert_int_equal(l.nranks, 8);
    assert_int_equal(l.local_rank, 1);
    assert_int_equal(l.local_size, 4);
    assert_string_equal(l.job_id, "slurm:4242.0");
    assert_string_equal(l.slurm_job, "4242");
    assert_string_equal(l.slurm_step, "0");
    assert_contains(l.vars, "rank from SLURM_PROCID, size from SLURM_STEP_NUM_TASKS");
    assert_contains(l.vars, "local rank from SLURM_LOCALID");
    assert_contains(l.vars, "roots on SLURM_STEP_NODELIST=node[1-2]");
    /* OOBX_COMM_ID replaces the derived roots; the identity stays the step's */
    assert_int_equal(detect(srun, "", "10.0.0.1:5000", &l, why, sizeof(why)), 0);
    assert_int_equal(l.rdv, OOBX_RDV_ADDRS);
    assert_string_equal(l.roots, "10.0.0.1:5000");
    assert_string_equal(l.job_id, "slurm:4242.0");
    /* the batch script is no step of tasks */
    const char *batch[] = {SBATCH_8, NULL};
    assert_int_equal(detect(batch, "auto", NULL, &l, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_contains(why, "no launcher in the environment");
    assert_contains(why, "SLURM_PROCID is the batch script's");
    const char *batch_step[] = {SBATCH_8, "SLURM_STEP_ID=4294967291", NULL};
    assert_int_equal(detect(batch_step, "auto", NULL, &l, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_contains(why, "batch script's");
    /* a step without its job id, a rank past the size */
    const char *nojob[] = {"SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_STEP_NUM_TASKS=2", NULL};
    assert_int_equal(detect(nojob, "auto", NULL, &l, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_contains(why, "SLURM_JOB_ID is not");
    const char *past[] = {"SLURM_JOB_ID=1", "SLURM_STEP_ID=0", "SLURM_PROCID=2", "SLURM_STEP_NUM_TASKS=2",
                          "SLURM_STEP_NODELIST=n1", "SLURM_STEP_TASKS_PER_NODE=2", NULL};
    assert_int_equal(detect(past, "auto", NULL, &l, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_contains(why, "SLURM_PROCID=2 of SLURM_STEP_NUM_TASKS=2 is out of range");
    const char *nolist[] = {"SLURM_JOB_ID=1", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_STEP_NUM_TASKS=2", NULL};
    assert_int_equal(detect(nolist, "auto", NULL, &l, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_contains(why, "SLURM_STEP_NODELIST (unset)");
}

static void expect_refused(const char *const *env, const char *force, const char *comm_id, const char *want1,
                           const char *want2);

static void test_detect_nesting(void **state)
{
    (void)state;
    oobx_launch_t l;
    char why[1200];
    /* sbatch + mpirun: Open MPI's variables, not the daemon step's SLURM_PROCID=0 */
    const char *mpirun[] = {SBATCH_8, DAEMON_STEP, "OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=8",
                            "OMPI_COMM_WORLD_LOCAL_RANK=5", "OMPI_COMM_WORLD_LOCAL_SIZE=8", "PMIX_RANK=5",
                            "PMIX_NAMESPACE=prterun-node1-77@1", NULL};
    assert_int_equal(detect(mpirun, "auto", NULL, &l, why, sizeof(why)), 0);
    assert_int_equal(l.launcher, OOBX_LAUNCH_OMPI);
    assert_string_equal(l.name, "Open MPI");
    assert_int_equal(l.rdv, OOBX_RDV_PMIX);
    assert_int_equal(l.rank, 5);
    assert_int_equal(l.nranks, 8);
    assert_int_equal(l.local_rank, 5);
    assert_int_equal(l.local_size, 8);
    assert_string_equal(l.job_id, "pmix:prterun-node1-77@1");
    assert_contains(l.vars, "rank from OMPI_COMM_WORLD_RANK");
    assert_contains(l.vars, "outer launchers passed over: Slurm");
    /* sbatch + mpiexec: hydra's PMI_RANK, PMI-1 on PMI_FD */
    const char *mpiexec[] = {SBATCH_8, DAEMON_STEP, "PMI_RANK=6", "PMI_SIZE=8", "PMI_FD=9", "MPI_LOCALRANKID=6",
                             "MPI_LOCALNRANKS=8", NULL};
    assert_int_equal(detect(mpiexec, "auto", NULL, &l, why, sizeof(why)), 0);
    assert_int_equal(l.launcher, OOBX_LAUNCH_HYDRA);
    assert_int_equal(l.rdv, OOBX_RDV_PMI1);
    assert_int_equal(l.rank, 6);
    assert_int_equal(l.nranks, 8);
    assert_int_equal(l.local_rank, 6);
    assert_int_equal(l.pmi_fd, 9);
    assert_string_equal(l.job_id, "hydra:"); /* the kvsname comes from the server */
    assert_contains(l.vars, "outer launchers passed over: Slurm");
    /* srun -n 1 running 4 torchrun-style ranks: RANK/WORLD_SIZE, not the step's 1 task */
    const char *torch[] = {"SLURM_JOB_ID=4242", "SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=1",
                           "SLURM_STEP_NUM_TASKS=1", "SLURM_STEP_NODELIST=node1", "SLURM_STEP_TASKS_PER_NODE=1",
                           "RANK=2", "WORLD_SIZE=4", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1",
                           "MASTER_PORT=29500", "TORCHELASTIC_RUN_ID=slurm-4242", NULL};
    assert_int_equal(detect(torch, "auto", NULL, &l, why, sizeof(why)), 0);
    assert_int_equal(l.launcher, OOBX_LAUNCH_TORCHRUN);
    assert_int_equal(l.rdv, OOBX_RDV_ADDRS);
    assert_int_equal(l.rank, 2);
    assert_int_equal(l.nranks, 4);
    assert_int_equal(l.local_rank, 2);
    assert_int_equal(l.local_size, 4);
    assert_string_equal(l.roots, "127.0.0.1:29501");
    assert_string_equal(l.job_id, "torchelastic:slurm-4242");
    assert_contains(l.vars, "root at MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 + 1");
    assert_contains(l.vars, "passed over: Slurm");
    /* asked for, the outer launcher is read */
    assert_int_equal(detect(torch, "slurm", NULL, &l, why, sizeof(why)), 0);
    assert_int_equal(l.launcher, OOBX_LAUNCH_SLURM);
    assert_int_equal(l.nranks, 1);
    /* srun --mpi=pmix: PMIx over the step's variables, which must agree */
    const char *pmix[] = {SRUN_8, "PMIX_RANK=5", "PMIX_NAMESPACE=slurm.pmix.4242.0", NULL};
    assert_int_equal(detect(pmix, "auto", NULL, &l, why, sizeof(why)), 0);
    assert_int_equal(l.launcher, OOBX_LAUNCH_PMIX);
    assert_int_equal(l.rdv, OOBX_RDV_PMIX);
    assert_int_equal(l.rank, 5);
    assert_int_equal(l.nranks, -1); /* from the PMIx server */
    assert_string_equal(l.job_id, "pmix:slurm.pmix.4242.0");
    /* oobx-run's variables win over everything */
    const char *run[] = {SRUN_8, "RANK=2", "WORLD_SIZE=4", "MASTER_ADDR=h", "MASTER_PORT=1", "OOBX_RANK=1",
                         "OOBX_NRANKS=3", "OOBX_RUN_KEY=abc", NULL};
    assert_int_equal(detect(run, "auto", "127.0.0.1:4000", &l, why, sizeof(why)), 0);
    assert_int_equal(l.launcher, OOBX_LAUNCH_OOBX);
    assert_int_equal(l.rank, 1);
    assert_int_equal(l.nranks, 3);
    assert_string_equal(l.roots, "127.0.0.1:4000");
    assert_string_equal(l.job_id, "oobx-run:abc");
    assert_contains(l.vars, "passed over: torchrun, Slurm");
    assert_int_equal(l.local_rank, -1);
    /* oobx-run's host pair, named for the log and the node-aware bootstrap */
    const char *run_local[] = {"OOBX_RANK=5", "OOBX_NRANKS=8", "OOBX_LOCAL_RANK=1", "OOBX_LOCAL_SIZE=4", NULL};
    assert_int_equal(detect(run_local, "auto", "127.0.0.1:4000", &l, why, sizeof(why)), 0);
    assert_int_equal(l.local_rank, 1);
    assert_int_equal(l.local_size, 4);
    assert_string_equal(l.local_vars, "OOBX_LOCAL_RANK/OOBX_LOCAL_SIZE");
    assert_int_equal(detect(torch, "auto", NULL, &l, why, sizeof(why)), 0);
    assert_string_equal(l.local_vars, "LOCAL_RANK/LOCAL_WORLD_SIZE");
    /* mpiexec -pmi-port: PMI_PORT and PMI_ID only; rank and size from the server */
    const char *port_model[] = {"PMI_PORT=vm:4321", "PMI_ID=3", "MPI_LOCALRANKID=3", "MPI_LOCALNRANKS=4", NULL};
    assert_int_equal(detect(port_model, "auto", NULL, &l, why, sizeof(why)), 0);
    assert_int_equal(l.launcher, OOBX_LAUNCH_HYDRA);
    assert_int_equal(l.rdv, OOBX_RDV_PMI1);
    assert_int_equal(l.rank, -1);
    assert_int_equal(l.nranks, -1);
    assert_int_equal(l.pmi_fd, -1);
    assert_string_equal(l.pmi_addr, "vm:4321");
    assert_int_equal(l.local_rank, 3);
    assert_contains(l.vars, "rank and size from the PMI server (PMI_ID)");
    expect_refused(port_model, "auto", "127.0.0.1:5000", "PMI_PORT model", "OOBX_COMM_ID");
    /* PMI_PORT alone (no PMI_ID) is no launcher */
    const char *port_only[] = {"PMI_PORT=vm:4321", NULL};
    expect_refused(port_only, "auto", NULL, "no launcher in the environment", NULL);
    /* plain environment: no identity */
    const char *plain[] = {"OOBX_RANK=0", "OOBX_NRANKS=2", NULL};
    assert_int_equal(detect(plain, "", "h1:5000,h2:5000", &l, why, sizeof(why)), 0);
    assert_string_equal(l.job_id, "");
    assert_string_equal(l.roots, "h1:5000,h2:5000");
    /* torchrun without TORCHELASTIC_RUN_ID, IPv6 master */
    const char *torch6[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=fd00::1", "MASTER_PORT=29500", NULL};
    assert_int_equal(detect(torch6, "auto", NULL, &l, why, sizeof(why)), 0);
    assert_string_equal(l.roots, "[fd00::1]:29501");
    assert_string_equal(l.job_id, "");
    assert_int_equal(l.local_rank, -1);
}

static void expect_refused(const char *const *env, const char *force, const char *comm_id, const char *want1,
                           const char *want2)
{
    oobx_launch_t l;
    char why[1200];
    int rc = detect(env, force, comm_id, &l, why, sizeof(why));
    if (rc != OOBX_ERR_INVALID) fail_msg("rc %d, want OOBX_ERR_INVALID (want \"%s\"; why \"%s\")", rc, want1, why);
    assert_contains(why, want1);
    if (want2) assert_contains(why, want2);
}

static void test_detect_conflicts(void **state)
{
    (void)state;
    const char *both[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "PMI_RANK=0", "PMI_SIZE=2", "PMI_FD=4",
                          NULL};
    expect_refused(both, "auto", NULL, "OMPI_COMM_WORLD_RANK=1 (Open MPI) and PMI_RANK=0 (MPICH hydra)",
                   "OOBX_LAUNCHER=ompi or hydra");
    oobx_launch_t l;
    char why[600];
    assert_int_equal(detect(both, "hydra", NULL, &l, why, sizeof(why)), 0);
    assert_int_equal(l.launcher, OOBX_LAUNCH_HYDRA);
    assert_int_equal(l.rank, 0);
    const char *ompi_pmix[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "PMIX_RANK=0",
                               "PMIX_NAMESPACE=x", NULL};
    expect_refused(ompi_pmix, "auto", NULL, "OMPI_COMM_WORLD_RANK=1 and PMIX_RANK=0 disagree", NULL);
    const char *pmix_slurm[] = {SRUN_8, "PMIX_RANK=4", "PMIX_NAMESPACE=slurm.pmix.4242.0", NULL};
    expect_refused(pmix_slurm, "auto", NULL, "PMIX_RANK=4 and SLURM_PROCID=5", "disagree");
    /* half pairs, not numbers, out of range */
    const char *half[] = {"OOBX_RANK=1", NULL};
    expect_refused(half, "auto", "h:1", "OOBX_RANK is set but OOBX_NRANKS is unset", NULL);
    const char *half_local[] = {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "MASTER_ADDR=h", "MASTER_PORT=5", NULL};
    expect_refused(half_local, "auto", NULL, "LOCAL_RANK is set but LOCAL_WORLD_SIZE is unset", NULL);
    const char *big_local[] = {"RANK=0", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=3", "MASTER_ADDR=h",
                               "MASTER_PORT=5", NULL};
    expect_refused(big_local, "auto", NULL, "LOCAL_RANK/LOCAL_WORLD_SIZE says 3 ranks on this host, but the job has 2",
                   NULL);
    const char *bad_local[] = {"OOBX_RANK=0", "OOBX_NRANKS=2", "OOBX_LOCAL_RANK=2", "OOBX_LOCAL_SIZE=2", NULL};
    expect_refused(bad_local, "auto", "h:1", "OOBX_LOCAL_RANK=2 of OOBX_LOCAL_SIZE=2 is out of range", NULL);
    const char *nan[] = {"RANK=x", "WORLD_SIZE=4", "MASTER_ADDR=h", "MASTER_PORT=5", NULL};
    expect_refused(nan, "auto", NULL, "RANK=x is not a number", NULL);
    const char *range[] = {"OOBX_RANK=4", "OOBX_NRANKS=4", NULL};
    expect_refused(range, "auto", "h:1", "OOBX_RANK=4 of OOBX_NRANKS=4 is out of range", NULL);
    const char *port[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=65535", NULL};
    expect_refused(port, "auto", NULL, "MASTER_PORT=65535 is not a port", NULL);
    /* a launcher that gives no roots */
    const char *noaddr[] = {"OOBX_RANK=0", "OOBX_NRANKS=2", NULL};
    expect_refused(noaddr, "auto", NULL, "OOBX_RANK/OOBX_NRANKS are set but not OOBX_COMM_ID", NULL);
    const char *nomaster[] = {"RANK=0", "WORLD_SIZE=2", NULL};
    expect_refused(nomaster, "auto", NULL, "MASTER_ADDR/MASTER_PORT are not", NULL);
    const char *nopmi[] = {"PMI_RANK=0", "PMI_SIZE=2", NULL};
    expect_refused(nopmi, "auto", NULL, "neither PMI_FD nor PMI_PORT", NULL);
    const char *ompi_nopmix[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", NULL};
    expect_refused(ompi_nopmix, "auto", NULL, "PMIX_NAMESPACE unset", "OOBX_COMM_ID");
    /* OOBX_LAUNCHER */
    expect_refused(nopmi, "mpich", NULL, "OOBX_LAUNCHER=mpich: not auto, oobx, torchrun, ompi, hydra, pmix or slurm",
                   NULL);
    expect_refused(nopmi, "ompi", NULL, "OOBX_LAUNCHER=ompi, but OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE is not",
                   NULL);
    /* nothing at all */
    const char *none[] = {"HOME=/root", NULL};
    expect_refused(none, "auto", NULL, "no launcher in the environment", "SLURM_PROCID of a step (srun)");
}

/* ---- the PMI-1 client against a scripted server ---------------------------------- */

enum { SAY, SPLIT, SILENT, HANGUP, HOLD };
typedef struct step {
    const char *cmd;   /* the request expected (cmd=...) */
    const char *reply; /* what the server answers */
    int how;           /* SAY it; SPLIT it in two writes; SILENT: answer nothing;
                        * HANGUP: close; HOLD: say it once the test releases it */
} step_t;

typedef struct script {
    int fd;
    const step_t *steps;
    int nsteps;
    char got[16][600]; /* the requests, without their newline */
    int ngot;
    int mismatch; /* index + 1 of the first request that was not its step's */
    int held[2], release[2]; /* HOLD: the server writes to held, then reads release */
} script_t;

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

static void *script_serve(void *arg)
{
    script_t *sc = arg;
    char buf[8192];
    size_t have = 0;
    int step = 0, quiet = 0;
    for (;;) {
        char *nl = memchr(buf, '\n', have);
        if (!nl) {
            if (have == sizeof(buf)) break;
            ssize_t r = read(sc->fd, buf + have, sizeof(buf) - have);
            if (r <= 0) break;
            have += (size_t)r;
            continue;
        }
        *nl = '\0';
        if (sc->ngot < 16) snprintf(sc->got[sc->ngot++], sizeof(sc->got[0]), "%.599s", buf);
        size_t used = (size_t)(nl - buf) + 1;
        if (!quiet && step < sc->nsteps) {
            const step_t *s = &sc->steps[step++];
            size_t cl = strlen(s->cmd);
            if ((strncmp(buf, "cmd=", 4) || strncmp(buf + 4, s->cmd, cl) || (buf[4 + cl] && buf[4 + cl] != ' ')) &&
                !sc->mismatch)
                sc->mismatch = sc->ngot;
            if (s->how == HANGUP) {
                close(sc->fd);
                sc->fd = -1;
                return NULL;
            }
            if (s->how == SILENT) quiet = 1;
            if (s->how == HOLD) {
                char c = 1;
                write_all(sc->held[1], &c, 1);
                if (read(sc->release[0], &c, 1) != 1) break;
            }
            if (s->how == SPLIT) {
                size_t half = strlen(s->reply) / 2;
                write_all(sc->fd, s->reply, half);
                usleep(30000);
                write_all(sc->fd, s->reply + half, strlen(s->reply) - half);
            } else if (s->how != SILENT) {
                write_all(sc->fd, s->reply, strlen(s->reply));
            }
        }
        else if (!quiet && !strcmp(buf, "cmd=finalize")) {
            /* past the script: the finalize of close is answered */
            write_all(sc->fd, "cmd=finalize_ack\n", 17);
        }
        memmove(buf, buf + used, have - used);
        have -= used;
    }
    return NULL;
}

typedef struct served {
    script_t sc;
    pthread_t thread;
    int client;
} served_t;

static void serve_start(served_t *sv, const step_t *steps, int n)
{
    int sp[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    memset(&sv->sc, 0, sizeof(sv->sc));
    sv->sc.fd = sp[1];
    sv->sc.steps = steps;
    sv->sc.nsteps = n;
    assert_int_equal(pipe(sv->sc.held), 0);
    assert_int_equal(pipe(sv->sc.release), 0);
    sv->client = sp[0];
    assert_int_equal(pthread_create(&sv->thread, NULL, script_serve, &sv->sc), 0);
}

static void serve_end(served_t *sv)
{
    close(sv->client);
    close(sv->sc.release[1]); /* a held server goes on */
    pthread_join(sv->thread, NULL);
    if (sv->sc.fd >= 0) close(sv->sc.fd);
    close(sv->sc.held[0]);
    close(sv->sc.held[1]);
    close(sv->sc.release[0]);
}

static oobx_launch_t pmi_launch(int fd)
{
    oobx_launch_t l;
    memset(&l, 0, sizeof(l));
    l.launcher = OOBX_LAUNCH_HYDRA;
    l.name = "MPICH hydra";
    l.rdv = OOBX_RDV_PMI1;
    l.rank = 1;
    l.nranks = 4;
    l.local_rank = l.local_size = -1;
    l.pmi_fd = fd;
    return l;
}

#define OPEN_OK                                                                                                 \
    {"init", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n", SAY},                                \
    {"get_maxes", "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n", SPLIT},                          \
    {"get_my_kvsname", "cmd=my_kvsname kvsname=kvs_4711_0\n", SAY}

static void test_pmi1_exchange(void **state)
{
    (void)state;
    static const step_t steps[] = {
        OPEN_OK,
        {"put", "cmd=put_result rc=0 msg=success\n", SAY},
        {"barrier_in", "cmd=barrier_out\n", SPLIT},
        {"get", "cmd=get_result rc=0 msg=success value=00ffee\n", SAY},
        {"finalize", "cmd=finalize_ack\n", SAY},
    };
    served_t sv;
    serve_start(&sv, steps, OOBX_ARRAY_SIZE(steps));
    oobx_launch_t l = pmi_launch(sv.client);
    const oobx_kvs_ops_t *ops = &oobx__pmi1_ops;
    oobx_kvs_t *k = NULL;
    int rank = -1, size = -1, lr = 9, ls = 9;
    char job[64] = "", why[600] = "", val[64] = "";
    assert_int_equal(ops->open(&l, 5000, &k, &rank, &size, &lr, &ls, job, sizeof(job), why, sizeof(why)), 0);
    assert_int_equal(rank, 1);
    assert_int_equal(size, 4);
    assert_int_equal(lr, -1);
    assert_string_equal(job, "kvs_4711_0");
    assert_int_equal(ops->put(k, "oobx.0.root.0", "00ffee", why, sizeof(why)), 0);
    assert_int_equal(ops->fence(k, 5000, why, sizeof(why)), 0);
    assert_int_equal(ops->get(k, 0, "oobx.0.root.0", val, sizeof(val), 5000, why, sizeof(why)), 0);
    assert_string_equal(val, "00ffee");
    ops->close(k);
    serve_end(&sv);
    assert_int_equal(sv.sc.mismatch, 0);
    static const char *const want[] = {"cmd=init pmi_version=1 pmi_subversion=1",
                                       "cmd=get_maxes",
                                       "cmd=get_my_kvsname",
                                       "cmd=put kvsname=kvs_4711_0 key=oobx.0.root.0 value=00ffee",
                                       "cmd=barrier_in",
                                       "cmd=get kvsname=kvs_4711_0 key=oobx.0.root.0",
                                       "cmd=finalize"};
    assert_int_equal(sv.sc.ngot, OOBX_ARRAY_SIZE(want));
    for (size_t i = 0; i < OOBX_ARRAY_SIZE(want); i++) assert_string_equal(sv.sc.got[i], want[i]);
}

/* What a hostile or broken server makes of each call: its error and how long it took. */
typedef struct hostile {
    const char *name;
    step_t steps[5];
    int nsteps;
    int op; /* 0 open, 1 put, 2 fence, 3 get */
    int want_rc;
    const char *want_why;
} hostile_t;

static void test_pmi1_hostile(void **state)
{
    (void)state;
    char long_line[3000], no_end[6000], long_value[200];
    memset(long_line, 'a', sizeof(long_line));
    memcpy(long_line, "cmd=maxes x=", 12);
    long_line[sizeof(long_line) - 2] = '\n';
    long_line[sizeof(long_line) - 1] = '\0';
    memset(no_end, 'b', sizeof(no_end) - 1);
    no_end[sizeof(no_end) - 1] = '\0';
    snprintf(long_value, sizeof(long_value), "cmd=get_result rc=0 value=%0150d\n", 7);
    const hostile_t cases[] = {
        {"init refused", {{"init", "cmd=response_to_init rc=-1 msg=version 1.1 unsupported\n", SAY}}, 1, 0,
         OOBX_ERR_REMOTE, "init failed with rc=-1: version 1.1 unsupported"},
        {"wrong cmd", {{"init", "cmd=barrier_out\n", SAY}}, 1, 0, OOBX_ERR_PROTOCOL,
         "init answered \"cmd=barrier_out\", expected cmd=response_to_init"},
        {"no cmd", {{"init", "rc=0\n", SAY}}, 1, 0, OOBX_ERR_PROTOCOL, "expected cmd=response_to_init"},
        {"too long a line", {{"init", "cmd=response_to_init rc=0\n", SAY}, {"get_maxes", long_line, SAY}}, 2, 0,
         OOBX_ERR_PROTOCOL, "the answer to get_maxes is longer than 1024 bytes"},
        {"no end of line", {{"init", no_end, SAY}}, 1, 0, OOBX_ERR_PROTOCOL,
         "the answer to init has no end of line in 4096 bytes"},
        {"silent", {{"init", "", SILENT}}, 1, 0, OOBX_ERR_TIMEOUT, "no answer to init from the PMI server"},
        {"hang-up", {{"init", "", HANGUP}}, 1, 0, OOBX_ERR_REMOTE, "the PMI server closed fd"},
        {"no maxes", {{"init", "cmd=response_to_init rc=0\n", SAY}, {"get_maxes", "cmd=maxes kvsname_max=9\n", SAY}},
         2, 0, OOBX_ERR_PROTOCOL, "no vallen_max/keylen_max"},
        {"no kvsname",
         {{"init", "cmd=response_to_init rc=0\n", SAY},
          {"get_maxes", "cmd=maxes keylen_max=64 vallen_max=1024\n", SAY},
          {"get_my_kvsname", "cmd=my_kvsname\n", SAY}},
         3, 0, OOBX_ERR_PROTOCOL, "get_my_kvsname answered \"cmd=my_kvsname\""},
        {"put refused", {OPEN_OK, {"put", "cmd=put_result rc=-1 msg=duplicate key\n", SAY}}, 4, 1, OOBX_ERR_REMOTE,
         "put failed with rc=-1: duplicate key"},
        {"put unanswered", {OPEN_OK, {"put", "", SILENT}}, 4, 1, OOBX_ERR_TIMEOUT, "no answer to put"},
        {"barrier unanswered", {OPEN_OK, {"barrier_in", "", SILENT}}, 4, 2, OOBX_ERR_TIMEOUT,
         "no answer to barrier_in"},
        {"barrier hang-up", {OPEN_OK, {"barrier_in", "", HANGUP}}, 4, 2, OOBX_ERR_REMOTE,
         "closed fd"},
        {"get not found", {OPEN_OK, {"get", "cmd=get_result rc=-1 msg=key_oobx.0.root.0_not_found\n", SAY}}, 4, 3,
         OOBX_ERR_REMOTE, "get failed with rc=-1: key_oobx.0.root.0_not_found"},
        {"get without value", {OPEN_OK, {"get", "cmd=get_result rc=0\n", SAY}}, 4, 3, OOBX_ERR_PROTOCOL,
         "get of oobx.0.root.0 answered \"cmd=get_result rc=0\""},
        {"get too long a value", {OPEN_OK, {"get", long_value, SAY}}, 4, 3, OOBX_ERR_PROTOCOL,
         "get of oobx.0.root.0 answered"},
        {"get wrong cmd", {OPEN_OK, {"get", "cmd=put_result rc=0\n", SAY}}, 4, 3, OOBX_ERR_PROTOCOL,
         "expected cmd=get_result"},
    };
    for (size_t c = 0; c < OOBX_ARRAY_SIZE(cases); c++) {
        const hostile_t *h = &cases[c];
        served_t sv;
        serve_start(&sv, h->steps, h->nsteps);
        oobx_launch_t l = pmi_launch(sv.client);
        const oobx_kvs_ops_t *ops = &oobx__pmi1_ops;
        oobx_kvs_t *k = NULL;
        int rank, size, lr, ls, rc;
        char job[64], why[1200] = "", val[64];
        enum { TMO = 400 };
        uint64_t t0 = oobx__now_ns();
        rc = ops->open(&l, TMO, &k, &rank, &size, &lr, &ls, job, sizeof(job), why, sizeof(why));
        if (h->op > 0) {
            if (rc != 0) fail_msg("%s: open failed: %s", h->name, why);
            t0 = oobx__now_ns();
            if (h->op == 1) rc = ops->put(k, "oobx.0.root.0", "00ff", why, sizeof(why));
            if (h->op == 2) rc = ops->fence(k, TMO, why, sizeof(why));
            if (h->op == 3) rc = ops->get(k, 0, "oobx.0.root.0", val, sizeof(val), TMO, why, sizeof(why));
        }
        double ms = (double)(oobx__now_ns() - t0) / 1e6;
        if (rc != h->want_rc) fail_msg("%s: rc %d (%s), want %d", h->name, rc, why, h->want_rc);
        if (!strstr(why, h->want_why)) fail_msg("%s: \"%s\" does not contain \"%s\"", h->name, why, h->want_why);
        /* no hang: an unanswered call ends at its deadline, the others at once */
        if (ms > TMO + 1500) fail_msg("%s: took %.0f ms, the deadline is %d ms", h->name, ms, TMO);
        if (rc == OOBX_ERR_TIMEOUT && ms < TMO - 50) fail_msg("%s: timed out after %.0f ms of %d", h->name, ms, TMO);
        if (k) {
            uint64_t c0 = oobx__now_ns();
            ops->close(k); /* finalize: unanswered or refused, close still ends */
            if ((oobx__now_ns() - c0) / 1000000 > 3000) fail_msg("%s: close took more than 3 s", h->name);
        }
        serve_end(&sv);
        if (sv.sc.mismatch) fail_msg("%s: request %d was \"%s\"", h->name, sv.sc.mismatch, sv.sc.got[sv.sc.mismatch - 1]);
    }
}

static void test_pmi1_limits(void **state)
{
    (void)state;
    /* a value over the server's vallen_max is refused before it is sent */
    static const step_t steps[] = {
        {"init", "cmd=response_to_init rc=0\n", SAY},
        {"get_maxes", "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=8\n", SAY},
        {"get_my_kvsname", "cmd=my_kvsname kvsname=k\n", SAY},
        {"finalize", "cmd=finalize_ack\n", SAY},
    };
    served_t sv;
    serve_start(&sv, steps, OOBX_ARRAY_SIZE(steps));
    oobx_launch_t l = pmi_launch(sv.client);
    oobx_kvs_t *k = NULL;
    int rank, size, lr, ls;
    char job[64], why[600] = "";
    assert_int_equal(oobx__pmi1_ops.open(&l, 2000, &k, &rank, &size, &lr, &ls, job, sizeof(job), why, sizeof(why)), 0);
    assert_int_equal(oobx__pmi1_ops.put(k, "oobx.0.root.0", "0123456789", why, sizeof(why)), OOBX_ERR_INVALID);
    assert_contains(why, "exceeds the server's vallen_max 8");
    oobx__pmi1_ops.close(k);
    serve_end(&sv);
    assert_int_equal(sv.sc.ngot, 4);
    assert_string_equal(sv.sc.got[3], "cmd=finalize");
    /* PMI_FD that is no descriptor of this process */
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    close(fds[0]);
    close(fds[1]);
    l = pmi_launch(fds[0]);
    assert_int_equal(oobx__pmi1_ops.open(&l, 500, &k, &rank, &size, &lr, &ls, job, sizeof(job), why, sizeof(why)),
                     OOBX_ERR_INVALID);
    char want[64];
    snprintf(want, sizeof(want), "PMI_FD=%d is not an open descriptor", fds[0]);
    assert_contains(why, want);
    /* the field parser: a value that does not fit is absent, msg= runs to the end of the line */
    char out[8];
    assert_int_equal(oobx__pmi1_field("cmd=x value=1234567 rc=0", "value", out, sizeof(out)), 0);
    assert_string_equal(out, "1234567");
    assert_int_equal(oobx__pmi1_field("cmd=x value=12345678", "value", out, sizeof(out)), -1);
    assert_int_equal(oobx__pmi1_field("cmd=x xvalue=1", "value", out, sizeof(out)), -1);
    char msg[64];
    assert_int_equal(oobx__pmi1_field("cmd=x rc=1 msg=a b c", "msg", msg, sizeof(msg)), 0);
    assert_string_equal(msg, "a b c");
}

/* ---- jobs of forked ranks against a fake hydra ----------------------------------------- */

static const char *const launcher_vars[] = {
    "OOBX_RANK",     "OOBX_NRANKS",     "OOBX_COMM_ID",         "OOBX_LAUNCHER",   "OOBX_ROOT_FD",
    "OOBX_RUN_KEY",  "OOBX_JOB_KEY",    "OOBX_JOB_KEY_FILE",    "OOBX_SLURM_PORT_RANGE",
    "RANK",          "WORLD_SIZE",      "LOCAL_RANK",           "LOCAL_WORLD_SIZE", "MASTER_ADDR",
    "MASTER_PORT",   "TORCHELASTIC_RUN_ID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "PMIX_RANK",     "PMIX_NAMESPACE",  "PMI_RANK",             "PMI_SIZE",        "PMI_FD",
    "PMI_PORT",      "PMI_ID",          "MPI_LOCALRANKID",      "MPI_LOCALNRANKS", "SLURM_PROCID",
    "SLURM_STEP_ID", "SLURM_STEPID",    "SLURM_JOB_ID",         "SLURM_NTASKS",    "SLURM_STEP_NUM_TASKS",
    "SLURM_LOCALID", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE", "SLURMD_NODENAME", "SLURM_DISTRIBUTION",
};

/* In a forked rank: the environment of a job with no launcher but the one given. */
static void child_env(void)
{
    for (size_t i = 0; i < OOBX_ARRAY_SIZE(launcher_vars); i++) unsetenv(launcher_vars[i]);
    setenv("OOBX_TRANSPORT", "socket", 1);
    setenv("OOBX_SOCKET_IFNAME", "lo", 1);
    setenv("OOBX_TIMEOUT_MS", "20000", 1);
}

#define CHILD_CHECK(cond, ...)                                                                              \
    do {                                                                                                    \
        if (!(cond)) {                                                                                      \
            fprintf(stderr, "  child %d, line %d: ", (int)getpid(), __LINE__);                              \
            fprintf(stderr, __VA_ARGS__);                                                                   \
            fputc('\n', stderr);                                                                            \
            return 1;                                                                                       \
        }                                                                                                   \
    } while (0)

/* Waits for pid until deadline_s; kills it past that. Its exit status, or -1. */
static int wait_child(pid_t pid, int deadline_s)
{
    uint64_t end = oobx__deadline(deadline_s * 1000);
    for (;;) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (w < 0) return -1;
        if (oobx__ms_left(end, -1) == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(10000);
    }
}

static void run_in_child(int (*fn)(void *), void *arg, int deadline_s)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(fn(arg));
    int st = wait_child(pid, deadline_s);
    if (st == -1) fail_msg("the child did not end within %d s", deadline_s);
    assert_int_equal(st, 0);
}

enum { MAXR = 4 };
typedef struct fake_hydra {
    int n;
    int fd[MAXR];
    char buf[MAXR][4096];
    size_t have[MAXR];
    int close_after_finalize; /* as hydra does */
    int waiting[MAXR], nwaiting;
    char keys[32][64], vals[32][1100];
    int nkv;
    int inits, finalizes, barriers;
} fake_hydra_t;

static void hydra_say(fake_hydra_t *h, int i, const char *line)
{
    if (h->fd[i] >= 0) write_all(h->fd[i], line, strlen(line));
}

/* The value of key in a request line (the test's own parse, not pmi1.c's). */
static const char *req_field(const char *line, const char *key, char *out, size_t cap)
{
    char pat[32];
    snprintf(pat, sizeof(pat), " %s=", key);
    const char *p = strstr(line, pat);
    if (!p) return NULL;
    p += strlen(pat);
    size_t n = strcspn(p, " ");
    if (n >= cap) return NULL;
    memcpy(out, p, n);
    out[n] = '\0';
    return out;
}

static void hydra_line(fake_hydra_t *h, int i, const char *line)
{
    char key[64], val[1100], reply[1300];
    if (!strncmp(line, "cmd=init ", 9)) {
        h->inits++;
        hydra_say(h, i, "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
    } else if (!strcmp(line, "cmd=get_maxes")) {
        hydra_say(h, i, "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n");
    } else if (!strcmp(line, "cmd=get_my_kvsname")) {
        hydra_say(h, i, "cmd=my_kvsname kvsname=kvs_fake_0\n");
    } else if (!strncmp(line, "cmd=put ", 8) && req_field(line, "key", key, sizeof(key)) &&
               req_field(line, "value", val, sizeof(val)) && h->nkv < 32) {
        snprintf(h->keys[h->nkv], sizeof(h->keys[0]), "%s", key);
        snprintf(h->vals[h->nkv++], sizeof(h->vals[0]), "%s", val);
        hydra_say(h, i, "cmd=put_result rc=0 msg=success\n");
    } else if (!strcmp(line, "cmd=barrier_in")) {
        h->waiting[h->nwaiting++] = i;
        if (h->nwaiting == h->n) {
            h->barriers++;
            for (int k = 0; k < h->n; k++) hydra_say(h, h->waiting[k], "cmd=barrier_out\n");
            h->nwaiting = 0;
        }
    } else if (!strncmp(line, "cmd=get ", 8) && req_field(line, "key", key, sizeof(key))) {
        int found = -1;
        for (int k = 0; k < h->nkv; k++)
            if (!strcmp(h->keys[k], key)) found = k; /* the latest */
        if (found < 0) snprintf(reply, sizeof(reply), "cmd=get_result rc=-1 msg=key_%s_not_found\n", key);
        else snprintf(reply, sizeof(reply), "cmd=get_result rc=0 msg=success value=%s\n", h->vals[found]);
        hydra_say(h, i, reply);
    } else if (!strcmp(line, "cmd=finalize")) {
        h->finalizes++;
        hydra_say(h, i, "cmd=finalize_ack\n");
        if (h->close_after_finalize) {
            close(h->fd[i]);
            h->fd[i] = -1;
        }
    } else {
        hydra_say(h, i, "cmd=unknown rc=-1\n");
    }
}

/* Serves until every rank has closed its end, or the deadline. */
static void hydra_serve(fake_hydra_t *h, int deadline_s)
{
    uint64_t end = oobx__deadline(deadline_s * 1000);
    for (;;) {
        struct pollfd pf[MAXR];
        int open = 0;
        for (int i = 0; i < h->n; i++) {
            pf[i].fd = h->fd[i];
            pf[i].events = POLLIN;
            if (h->fd[i] >= 0) open++;
        }
        if (!open || oobx__ms_left(end, -1) == 0) return;
        if (poll(pf, (nfds_t)h->n, 100) <= 0) continue;
        for (int i = 0; i < h->n; i++) {
            if (h->fd[i] < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t r = read(h->fd[i], h->buf[i] + h->have[i], sizeof(h->buf[i]) - h->have[i]);
            if (r <= 0) {
                close(h->fd[i]);
                h->fd[i] = -1;
                continue;
            }
            h->have[i] += (size_t)r;
            char *nl;
            while (h->fd[i] >= 0 && (nl = memchr(h->buf[i], '\n', h->have[i]))) {
                *nl = '\0';
                hydra_line(h, i, h->buf[i]);
                size_t used = (size_t)(nl - h->buf[i]) + 1;
                memmove(h->buf[i], h->buf[i] + used, h->have[i] - used);
                h->have[i] -= used;
            }
        }
    }
}

enum { TWO_COMMS, SECOND_REFUSED };

/* One rank: two oobx_comm_init_from_env in a row, the first communicator kept. */
static int hydra_rank(int rank, int n, int fd, int mode)
{
    child_env();
    char v[16];
    snprintf(v, sizeof(v), "%d", fd);
    setenv("PMI_FD", v, 1);
    snprintf(v, sizeof(v), "%d", rank);
    setenv("PMI_RANK", v, 1);
    snprintf(v, sizeof(v), "%d", n);
    setenv("PMI_SIZE", v, 1);
    oobx_comm_t a, b;
    int rc = oobx_comm_init_from_env(&a, NULL);
    CHILD_CHECK(rc == 0, "rank %d: first init: %s", rank, oobx_last_error());
    int got_rank = -1, got_n = -1;
    oobx_comm_rank(a, &got_rank);
    oobx_comm_size(a, &got_n);
    CHILD_CHECK(got_rank == rank && got_n == n, "rank %d of %d is rank %d of %d", rank, n, got_rank, got_n);
    rc = oobx_comm_init_from_env(&b, NULL);
    if (mode == TWO_COMMS) {
        CHILD_CHECK(rc == 0, "rank %d: second init: %s", rank, oobx_last_error());
        int vals[MAXR] = {0};
        vals[rank] = 200 + rank;
        CHILD_CHECK(oobx_allgather(b, vals, sizeof(int)) == 0, "allgather on the second: %s", oobx_last_error());
        for (int r = 0; r < n; r++) CHILD_CHECK(vals[r] == 200 + r, "second: card %d is %d", r, vals[r]);
        oobx_comm_destroy(b);
    } else {
        const char *e = oobx_last_error();
        CHILD_CHECK(rc == OOBX_ERR_UNAVAILABLE, "rank %d: second init gave %d (%s)", rank, rc, e);
        CHILD_CHECK(strstr(e, "MPICH hydra (rank") && strstr(e, "has closed PMI_FD=") &&
                        strstr(e, "one job through hydra's PMI-1") && strstr(e, "oobx_comm_split"),
                    "rank %d: unclear error: %s", rank, e);
    }
    /* the first communicator is unharmed */
    int vals[MAXR] = {0};
    vals[rank] = 100 + rank;
    CHILD_CHECK(oobx_allgather(a, vals, sizeof(int)) == 0, "allgather on the first: %s", oobx_last_error());
    for (int r = 0; r < n; r++) CHILD_CHECK(vals[r] == 100 + r, "first: card %d is %d", r, vals[r]);
    CHILD_CHECK(oobx_barrier(a) == 0, "barrier: %s", oobx_last_error());
    oobx_comm_destroy(a);
    return 0;
}

static void hydra_job(fake_hydra_t *h, int n, int mode)
{
    memset(h, 0, sizeof(*h));
    h->n = n;
    h->close_after_finalize = mode == SECOND_REFUSED;
    int client[MAXR];
    for (int i = 0; i < n; i++) {
        int sp[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
        h->fd[i] = sp[0];
        client[i] = sp[1];
    }
    fflush(NULL);
    pid_t pid[MAXR];
    for (int i = 0; i < n; i++) {
        pid[i] = fork();
        assert_true(pid[i] >= 0);
        if (pid[i] == 0) {
            for (int k = 0; k < n; k++) {
                close(h->fd[k]);
                if (k != i) close(client[k]);
            }
            _exit(hydra_rank(i, n, client[i], mode));
        }
    }
    for (int i = 0; i < n; i++) close(client[i]);
    hydra_serve(h, 60);
    for (int i = 0; i < n; i++) {
        int st = wait_child(pid[i], 30);
        if (st != 0) fail_msg("rank %d ended with %d", i, st);
    }
    for (int i = 0; i < n; i++)
        if (h->fd[i] >= 0) close(h->fd[i]);
}

static void test_hydra_two_comms(void **state)
{
    (void)state;
    fake_hydra_t *h = calloc(1, sizeof(*h));
    assert_non_null(h);
    /* a PMI-1 server that lets a process init again: both communicators work,
     * and the second exchange's keys are not the first's */
    hydra_job(h, 3, TWO_COMMS);
    assert_int_equal(h->inits, 6);
    assert_int_equal(h->finalizes, 6);
    assert_int_equal(h->barriers, 2);
    assert_int_equal(h->nkv, 2); /* one root per exchange (3 ranks < OOBX_LAUNCH_RANKS_PER_ROOT) */
    unsigned s0, s1;
    assert_int_equal(sscanf(h->keys[0], "oobx.%u.root.0", &s0), 1);
    assert_int_equal(sscanf(h->keys[1], "oobx.%u.root.0", &s1), 1);
    assert_int_equal(s1, s0 + 1);
    assert_int_equal(strlen(h->vals[0]), 2 * OOBX_UNIQUE_ID_BYTES);
    assert_string_not_equal(h->vals[0], h->vals[1]);
    /* hydra closes PMI_FD at finalize: the second call says so, the first communicator goes on */
    hydra_job(h, 3, SECOND_REFUSED);
    assert_int_equal(h->inits, 3);
    assert_int_equal(h->finalizes, 3);
    assert_int_equal(h->nkv, 1);
    free(h);
}

/* Two threads of one process: the second call, while the first holds the
 * store, fails at once; after the first ends, the store serves again. */
typedef struct overlap {
    int rc;
    char err[1024];
} overlap_t;

static void *overlap_first(void *arg)
{
    overlap_t *o = arg;
    oobx_comm_t c;
    o->rc = oobx_comm_init_from_env(&c, NULL);
    snprintf(o->err, sizeof(o->err), "%s", oobx_last_error());
    if (o->rc == 0) oobx_comm_destroy(c);
    return NULL;
}

static int overlap_child(void *arg)
{
    (void)arg;
    static const step_t steps[] = {
        OPEN_OK,
        {"put", "cmd=put_result rc=0\n", SAY},
        {"barrier_in", "cmd=barrier_out rc=-1 msg=released_by_the_test\n", HOLD},
        {"finalize", "cmd=finalize_ack\n", SAY},
        {"init", "cmd=response_to_init rc=-1 msg=third_call_served\n", SAY},
    };
    int sp[2];
    CHILD_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0, "socketpair");
    script_t *sc = calloc(1, sizeof(*sc));
    CHILD_CHECK(sc && pipe(sc->held) == 0 && pipe(sc->release) == 0, "pipes");
    sc->fd = sp[1];
    sc->steps = steps;
    sc->nsteps = OOBX_ARRAY_SIZE(steps);
    pthread_t server, first;
    CHILD_CHECK(pthread_create(&server, NULL, script_serve, sc) == 0, "server thread");
    child_env();
    char v[16];
    snprintf(v, sizeof(v), "%d", sp[0]);
    setenv("PMI_FD", v, 1);
    setenv("PMI_RANK", "0", 1);
    setenv("PMI_SIZE", "2", 1);
    overlap_t o = {.rc = 99};
    CHILD_CHECK(pthread_create(&first, NULL, overlap_first, &o) == 0, "first thread");
    struct pollfd pf = {.fd = sc->held[0], .events = POLLIN};
    CHILD_CHECK(poll(&pf, 1, 10000) == 1, "the first call never reached the barrier");
    oobx_comm_t c;
    int rc = oobx_comm_init_from_env(&c, NULL);
    CHILD_CHECK(rc == OOBX_ERR_INVALID, "overlapping call: %d (%s)", rc, oobx_last_error());
    CHILD_CHECK(strstr(oobx_last_error(), "another oobx_comm_init_from_env of this process is using the launcher's "
                                          "PMI-1 connection now"),
                "overlapping call: %s", oobx_last_error());
    char go = 1;
    CHILD_CHECK(write(sc->release[1], &go, 1) == 1, "release");
    pthread_join(first, NULL);
    CHILD_CHECK(o.rc == OOBX_ERR_REMOTE && strstr(o.err, "barrier_in failed with rc=-1: released_by_the_test"),
                "first call: %d (%s)", o.rc, o.err);
    rc = oobx_comm_init_from_env(&c, NULL);
    CHILD_CHECK(rc == OOBX_ERR_REMOTE && strstr(oobx_last_error(), "third_call_served"), "third call: %d (%s)", rc,
                oobx_last_error());
    close(sp[0]);
    pthread_join(server, NULL);
    CHILD_CHECK(sc->mismatch == 0, "request %d was %s", sc->mismatch, sc->got[sc->mismatch - 1]);
    return 0;
}

static void test_kvs_overlap(void **state)
{
    (void)state;
    run_in_child(overlap_child, NULL, 60);
}

/* ---- Slurm: the derived port is taken ------------------------------------------------ */

/* The range sits below the kernel's ephemeral ports (32768-60999 by
 * default), which the other suites' connections hold at random; and a job
 * whose port is taken all the same (a listener of another test) gives way
 * to the next job id. */
#define TAKEN_LO 21000
#define TAKEN_HI 21999

static int port_taken_child(void *arg)
{
    (void)arg;
    child_env();
    char job[32] = "", range[32];
    snprintf(range, sizeof(range), "%d-%d", TAKEN_LO, TAKEN_HI);
    setenv("SLURM_STEP_ID", "3", 1);
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "1", 1);
    setenv("SLURM_STEP_NUM_TASKS", "1", 1);
    setenv("SLURM_LOCALID", "0", 1);
    setenv("SLURM_STEP_NODELIST", "127.0.0.1", 1);
    setenv("SLURM_STEP_TASKS_PER_NODE", "1", 1);
    setenv("SLURMD_NODENAME", "127.0.0.1", 1);
    setenv("OOBX_SLURM_PORT_RANGE", range, 1);
    int port = -1, fd = -1, err = 0;
    for (int id = 987654; id < 987654 + 20 && fd < 0; id++) {
        snprintf(job, sizeof(job), "%d", id);
        char name[64];
        snprintf(name, sizeof(name), "slurm:%d.3", id);
        port = oobx__slurm_port(name, TAKEN_LO, TAKEN_HI, 0);
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        /* past the TIME_WAIT of an earlier run's connections to this root; a
         * listening socket keeps the port all the same */
        int one = 1;
        if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (fd >= 0 && (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 4) != 0)) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    CHILD_CHECK(fd >= 0, "cannot take port %d (nor 19 others) for the test: %s", port, strerror(err));
    setenv("SLURM_JOB_ID", job, 1);
    oobx_comm_t c;
    int rc = oobx_comm_init_from_env(&c, NULL);
    const char *e = oobx_last_error();
    CHILD_CHECK(rc == OOBX_ERR_UNAVAILABLE, "init with port %d taken: %d (%s)", port, rc, e);
    char want[96];
    snprintf(want, sizeof(want), "port %d is taken", port);
    CHILD_CHECK(strstr(e, want), "no \"%s\" in: %s", want, e);
    snprintf(want, sizeof(want), "Slurm job %s step 3", job);
    CHILD_CHECK(strstr(e, want), "no \"%s\" in: %s", want, e);
    snprintf(want, sizeof(want), "OOBX_SLURM_PORT_RANGE=%s", range);
    CHILD_CHECK(strstr(e, want), "no \"%s\" in: %s", want, e);
    CHILD_CHECK(strstr(e, "Address already in use"), "no cause in: %s", e);
    /* freed, the same port serves the step's root: it was that port */
    close(fd);
    rc = oobx_comm_init_from_env(&c, NULL);
    CHILD_CHECK(rc == 0, "init with port %d free: %s", port, oobx_last_error());
    oobx_comm_destroy(c);
    /* a malformed range fails naming it, before any port is tried */
    setenv("OOBX_SLURM_PORT_RANGE", "41000-99999", 1);
    rc = oobx_comm_init_from_env(&c, NULL);
    CHILD_CHECK(rc == OOBX_ERR_INVALID && strstr(oobx_last_error(), "OOBX_SLURM_PORT_RANGE=41000-99999 is not lo-hi"),
                "malformed range: %d (%s)", rc, oobx_last_error());
    return 0;
}

static void test_slurm_port_taken(void **state)
{
    (void)state;
    run_in_child(port_taken_child, NULL, 60);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostlist_expand),
        cmocka_unit_test(test_hostlist_malformed),
        cmocka_unit_test(test_tasks_per_node),
        cmocka_unit_test(test_task_node),
        cmocka_unit_test(test_port_range),
        cmocka_unit_test(test_slurm_port),
        cmocka_unit_test(test_slurm_roots),
        cmocka_unit_test(test_slurm_roots_errors),
        cmocka_unit_test(test_detect_slurm),
        cmocka_unit_test(test_detect_nesting),
        cmocka_unit_test(test_detect_conflicts),
        cmocka_unit_test(test_pmi1_exchange),
        cmocka_unit_test(test_pmi1_hostile),
        cmocka_unit_test(test_pmi1_limits),
        cmocka_unit_test(test_hydra_two_comms),
        cmocka_unit_test(test_kvs_overlap),
        cmocka_unit_test(test_slurm_port_taken),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
