/*
 * oobx-info: what oobx would do on this machine. The version and library,
 * each transport (built? usable here? why not), the one OOBX_TRANSPORT=auto
 * would take and why, the socket interface it would choose and why, every
 * setting with its default, value and doc (-c), and the device topology
 * report (-t).
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "launch.h"
#include "oobx.h"
#include "settings.h"
#include "topo.h"
#include "tp_module.h"
#include "tp_table.h"
#include "transport.h"
#include "util.h"

extern char **environ;


/* Environment variables read outside the settings table. */
static const char *const env_extra[] = {"OOBX_RANK", "OOBX_NRANKS", "OOBX_ROOT_FD", "OOBX_BOOT_AT", "OOBX_RUN_KEY",
                                        NULL};

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: oobx-info [-c] [-t] [-u] [-v] [-h]\n"
            "With no option: the version, each transport (built, usable here, or why not), the\n"
            "one OOBX_TRANSPORT=auto would take and why, and the socket interface oobx would\n"
            "choose, and why. Settings come from the OOBX_* environment variables, as in a job.\n"
            "  -c, --config     every setting: default, value in this environment, and doc\n"
            "  -t, --topology   devices, their locality, and what each transport would pick\n"
            "  -u, --usable     the names of the usable transports, one a line (for scripts)\n"
            "  -v, --version    the version only\n"
            "  -h, --help       this text\n");
}

/* ---- transports ----------------------------------------------------------- */

typedef struct tp_state {
    const oobx_tp_ops_t *ops;
    int built;         /* the module loads (or is built in) */
    int usable;        /* a one-rank instance could be created */
    char why[512];
} tp_state_t;

static void tp_check(const char *name, const oobx_settings_t *s, tp_state_t *st)
{
    const oobx_tp_ops_t *ops = NULL;
    memset(st, 0, sizeof *st);
    if (oobx__tp_lookup(name, s, &ops, st->why, sizeof st->why) != OOBX_SUCCESS) return;
    st->ops = ops;
    st->built = 1;
    st->why[0] = '\0';
    if (oobx__tp_probe(name, s, st->why, sizeof st->why) == OOBX_SUCCESS) st->usable = 1;
}

/* OOBX_TRANSPORT=auto: the transport it would take here and why. Without
 * an active RDMA device, socket first (oobx__tp_auto_socket_rule); with one,
 * auto tries the table's auto order (oobx__tp_auto_order, as init does) and
 * takes the first that loads and creates an instance; tp_check made a
 * one-rank one. */
static void print_auto_choice(const oobx__tp_entry_t *tab, int n, const tp_state_t *st, const oobx_settings_t *s)
{
    const oobx__tp_entry_t *order[8];
    int norder = oobx__tp_auto_order(order, (int)(sizeof order / sizeof order[0]));
    const oobx__tp_entry_t *pick = NULL, *sock = oobx__tp_find("socket");
    char names[128] = "", rdma[256];
    for (int k = 0; k < norder; k++) {
        size_t o = strlen(names);
        snprintf(names + o, sizeof names - o, "%s%s", k ? ", " : "", order[k]->name);
        int i = (int)(order[k] - tab);
        if (!pick && i >= 0 && i < n && st[i].usable) pick = order[k];
    }
    int nrdma = oobx__tp_rdma_active(s->rdma_sysfs, rdma, sizeof(rdma));
    int si = (int)(sock - tab);
    const oobx__tp_entry_t *take = nrdma == 0 && si >= 0 && si < n && st[si].usable ? sock : pick;
    printf("  OOBX_TRANSPORT=auto would use: %s\n", take ? take->name : "none, jobs will fail to start");
    if (nrdma == 0)
        printf("    why: no RDMA device with an active port in %s, so socket first: between hosts UCX\n"
               "    would run over TCP, slower to set up and no faster than the socket transport\n"
               "    (docs/design.md); with one, auto tries %s in turn and takes the first that\n"
               "    loads and starts here:\n",
               s->rdma_sysfs, names);
    else
        printf("    why: auto tries %s in turn and takes the first that loads and starts here\n"
               "    (RDMA devices with an active port in %s: %s):\n",
               names, s->rdma_sysfs, rdma);
    for (int k = 0; k < norder; k++) {
        int i = (int)(order[k] - tab);
        if (i < 0 || i >= n) continue;
        if (order[k] == pick) {
            printf("      %-7s starts (a one-rank instance was made here)\n", pick->name);
            break;
        }
        printf("      %-7s not used: %s\n", order[k]->name, st[i].why[0] ? st[i].why : "no reason given");
    }
    printf("    and a job whose launcher puts all of its ranks on this host takes socket first: there the\n"
           "    large collectives read the peers' memory over any transport, and UCX's set-up makes init\n"
           "    slower by more than its faster small messages give back (docs/design.md)\n");
    /* Run under a launcher (srun oobx-info, oobx-run -n 64 -- oobx-info): the
     * rule applied to the job it sees. */
    oobx_launch_settings_t ls;
    oobx_launch_t l;
    char why[1200];
    if (oobx__settings_parse(oobx__launch_settings_table, &ls, NULL) != 0 ||
        oobx__launch_detect(oobx__env_process, NULL, ls.launcher, getenv("OOBX_COMM_ID") ? getenv("OOBX_COMM_ID") : "",
                            &l, why, sizeof(why)) != 0)
        return;
    if (l.nranks < 1 || l.local_size < 1) {
        printf("    this process runs under %s, which does not say how many ranks share this host\n", l.name);
        return;
    }
    int ncpu = oobx__online_cpus(); /* as init counts them */
    char rule[400];
    int first = oobx__tp_auto_socket_rule(l.nranks, l.local_size, s->rdma_sysfs, rule, sizeof(rule));
    printf("    this job (%s: %d ranks, %d on this host of %d CPUs): auto takes %s%s%s\n", l.name, l.nranks,
           l.local_size, ncpu, first ? "socket first" : pick ? pick->name : "none", first ? ": " : "",
           first ? rule : "");
}

/* What a module transport says about this host (its describe op). */
static void print_module_details(const oobx__tp_entry_t *e, const tp_state_t *st, const oobx_settings_t *s)
{
    printf("%s (%s/%s):\n", e->name, oobx__tp_module_dir(s), e->module);
    fflush(stdout);
    st->ops->describe(stdout, s, &oobx__core_api);
    fflush(stdout);
}

static void print_transports(const oobx_settings_t *s)
{
    int n;
    const oobx__tp_entry_t *tab = oobx__tp_table(&n);
    tp_state_t *st = calloc((size_t)n, sizeof(*st));
    if (!st) return;
    printf("transports (modules from %s):\n", oobx__tp_module_dir(s));
    for (int i = 0; i < n; i++) {
        tp_check(tab[i].name, s, &st[i]);
        const char *state = st[i].usable ? "usable" : st[i].built ? "built, not usable here" : "not built";
        if (st[i].why[0])
            printf("  %-7s %-24s %s\n", tab[i].name, state, st[i].why);
        else
            printf("  %-7s %s\n", tab[i].name, state);
    }
    if (!strcmp(s->transport, "auto")) {
        print_auto_choice(tab, n, st, s);
    } else {
        int i = 0;
        while (i < n && strcmp(tab[i].name, s->transport)) i++;
        printf("  OOBX_TRANSPORT=%s%s\n", s->transport,
               i < n && !st[i].usable ? ": not usable here, jobs will fail to start" : "");
    }
    for (int i = 0; i < n; i++)
        if (st[i].built && tab[i].module) print_module_details(&tab[i], &st[i], s);
    free(st);
}

static int print_usable(const oobx_settings_t *s)
{
    int n;
    const oobx__tp_entry_t *tab = oobx__tp_table(&n);
    tp_state_t st;
    for (int i = 0; i < n; i++) {
        tp_check(tab[i].name, s, &st);
        if (st.usable) printf("%s\n", tab[i].name);
    }
    return 0;
}

/* ---- interface --------------------------------------------------------------- */

/* The first root of OOBX_COMM_ID ("host:port", "[v6]:port"), resolved. */
static int comm_id_root(const char *comm_id, struct sockaddr_storage *ss, socklen_t *len,
                        char *host, size_t hostlen)
{
    char first[1024];
    snprintf(first, sizeof first, "%s", comm_id);
    char *comma = strchr(first, ',');
    if (comma) *comma = '\0';
    char *h = first, *colon;
    if (h[0] == '[') {
        char *close = strchr(h, ']');
        if (!close) return -1;
        *close = '\0';
        h++;
    } else if ((colon = strrchr(h, ':')) != NULL) {
        *colon = '\0';
    }
    size_t hl = strlen(h);
    if (hl == 0 || hl >= hostlen) return -1;
    memcpy(host, h, hl + 1);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(h, NULL, &hints, &res) != 0 || !res) return -1;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static void request_from_settings(const oobx_settings_t *s, topo_request_t *req,
                                  struct sockaddr_storage *root, char *roothost, size_t hostlen)
{
    memset(req, 0, sizeof *req);
    req->ifname_spec = s->socket_ifname;
    req->family = s->socket_family;
    req->allow_linklocal = s->socket_linklocal;
    req->pci_target = s->topo_pci;
    req->net_device = s->net_device;
    req->module_dir = s->module_dir;
    roothost[0] = '\0';
    socklen_t len = 0;
    if (s->comm_id[0]) {
        if (comm_id_root(s->comm_id, root, &len, roothost, hostlen) == 0) {
            req->match = (const struct sockaddr *)root;
            req->matchlen = len;
        } else {
            printf("  (cannot resolve the first root of OOBX_COMM_ID=%s; no subnet matching)\n",
                   s->comm_id);
        }
    }
}

static void print_interface(const oobx_settings_t *s)
{
    topo_request_t req;
    struct sockaddr_storage root;
    char roothost[256], why[1024], addr[128];
    topo_if_t ifc;
    printf("socket interface");
    if (s->socket_ifname[0]) printf(" (OOBX_SOCKET_IFNAME=%s)", s->socket_ifname);
    printf(":\n");
    request_from_settings(s, &req, &root, roothost, sizeof roothost);
    why[0] = '\0';
    int rc = oobx__topo_pick_if(&req, &ifc, why, sizeof why);
    if (rc == OOBX_SUCCESS) {
        oobx__topo_if_format(&ifc, addr, sizeof addr);
        printf("  %s %s\n  why: %s\n", ifc.name, addr, why);
    } else {
        printf("  none: %s (%s)\n", why[0] ? why : oobx_last_error(), oobx_error_name(rc));
    }
    if (roothost[0]) printf("  matched against the first root of OOBX_COMM_ID: %s\n", roothost);
}

/* ---- settings ---------------------------------------------------------------- */

/* The settings tables: the core's, the launchers' (oobx_comm_init_from_env),
 * then each transport's that loads. */
static int settings_tables(const oobx_settings_t *s, const oobx_setting_desc_t **out, const char **owner, int max)
{
    int k = 0, n;
    out[k] = oobx__settings_table;
    owner[k++] = "core";
    out[k] = oobx__launch_settings_table;
    owner[k++] = "launcher";
    const oobx__tp_entry_t *tab = oobx__tp_table(&n);
    for (int i = 0; i < n && k < max; i++) {
        const oobx_tp_ops_t *ops;
        char why[512];
        if (oobx__tp_lookup(tab[i].name, s, &ops, why, sizeof why) != OOBX_SUCCESS) continue;
        if (!ops->settings[0].name) continue;
        out[k] = ops->settings;
        owner[k++] = tab[i].name;
    }
    return k;
}

static int known_name(const oobx_setting_desc_t *const *tables, int ntables, const char *name, size_t len)
{
    for (int t = 0; t < ntables; t++)
        for (const oobx_setting_desc_t *d = tables[t]; d->name; d++)
            if (strlen(d->name) == len && !strncmp(d->name, name, len)) return 1;
    for (int i = 0; env_extra[i]; i++)
        if (strlen(env_extra[i]) == len && !strncmp(env_extra[i], name, len)) return 1;
    return 0;
}

/* The value as a shell word: quoted unless it is plain. */
static void print_shell_word(const char *v)
{
    if (v[0] && strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.,:/^=+-%@") == strlen(v)) {
        fputs(v, stdout);
        return;
    }
    putchar('\'');
    for (const char *p = v; *p; p++) {
        if (*p == '\'') fputs("'\\''", stdout);
        else putchar(*p);
    }
    putchar('\'');
}

static void print_settings(const oobx_settings_t *s)
{
    const oobx_setting_desc_t *tables[8];
    const char *owner[8];
    int nt = settings_tables(s, tables, owner, 8);
    printf("# oobx %s settings: default, value in this environment, and doc\n", oobx_version());
    for (int t = 0; t < nt; t++) {
        if (t && !strcmp(owner[t], "launcher"))
            printf("\n# ---- launchers: oobx_comm_init_from_env under srun, mpirun, mpiexec, torchrun "
                   "(docs/launchers.md)\n");
        else if (t) printf("\n# ---- the %s transport's own settings\n", owner[t]);
        for (const oobx_setting_desc_t *d = tables[t]; d->name; d++) {
            const char *v = getenv(d->name);
            printf("\n# %s\n", d->doc);
            printf("# default: %s\n", d->def[0] ? d->def : "(empty)");
            printf("%s=", d->name);
            print_shell_word(v ? v : d->def);
            printf(v ? "    # set in the environment\n" : "\n");
        }
    }
    int header = 0;
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "OOBX_", 5) != 0) continue;
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        if (known_name(tables, nt, *e, len)) continue;
        if (!header) printf("\n# not oobx settings (misspelt?):\n");
        header = 1;
        printf("#   %s\n", *e);
    }
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"config", no_argument, NULL, 'c'},   {"topology", no_argument, NULL, 't'},
        {"usable", no_argument, NULL, 'u'},   {"version", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},     {NULL, 0, NULL, 0},
    };
    int want_config = 0, want_topo = 0, want_usable = 0, c;
    while ((c = getopt_long(argc, argv, "ctuvh", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': want_config = 1; break;
        case 't': want_topo = 1; break;
        case 'u': want_usable = 1; break;
        case 'v': printf("%s\n", oobx_version()); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "oobx-info: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return 2;
    }

    oobx_settings_t s;
    int bad = oobx__settings_load(&s, NULL);
    /* a malformed setting was reported by the library (on stderr) */
    if (bad != OOBX_SUCCESS && !want_config) return 1;
    if (want_usable) return print_usable(&s);
    if (want_config) {
        print_settings(&s);
        return bad == OOBX_SUCCESS ? 0 : 1;
    }

    printf("oobx %s\n", oobx_version());
    print_transports(&s);
    print_interface(&s);
    if (want_topo) {
        printf("\ntopology:\n");
        topo_request_t req;
        struct sockaddr_storage root;
        char roothost[256];
        request_from_settings(&s, &req, &root, roothost, sizeof roothost);
        fflush(stdout);
        oobx__topo_report(stdout, &req);
    }
    return 0;
}
