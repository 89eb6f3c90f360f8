/* topo/: interface filter grammar, interface choice over fabricated lists,
 * and device ranking on fabricated machines (hwloc XML in tests/data/topo). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <net/if.h>
#include <sys/wait.h>
#include <unistd.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oobx.h"
#include "topo.h"
#include "util.h"

#define XML_TWO_SOCKET "tests/data/topo/two_socket.xml"
#define XML_GPU "tests/data/topo/gpu_switch.xml"
#define XML_NO_NET "tests/data/topo/no_network.xml"
#define XML_BROKEN "tests/data/topo/broken.xml"
#define XML_MISSING "tests/data/topo/does_not_exist.xml"

/* ---- helpers -------------------------------------------------------------- */

static topo_if_t mk_if(const char *name, const char *addr, int prefixlen)
{
    topo_if_t t;
    memset(&t, 0, sizeof(t));
    snprintf(t.name, sizeof(t.name), "%s", name);
    t.up = 1;
    t.prefixlen = prefixlen;
    if (strchr(addr, ':')) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&t.addr;
        s6->sin6_family = AF_INET6;
        assert_int_equal(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
        t.family = AF_INET6;
        t.addrlen = sizeof(*s6);
        t.linklocal = IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr);
        t.loopback = IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr);
        if (t.linklocal) s6->sin6_scope_id = 7;
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&t.addr;
        s4->sin_family = AF_INET;
        assert_int_equal(inet_pton(AF_INET, addr, &s4->sin_addr), 1);
        t.family = AF_INET;
        t.addrlen = sizeof(*s4);
        t.loopback = strncmp(addr, "127.", 4) == 0;
    }
    return t;
}

/* a socket address for subnet matching; storage provided by the caller */
static const struct sockaddr *mk_addr(struct sockaddr_storage *ss, socklen_t *len, const char *addr)
{
    memset(ss, 0, sizeof(*ss));
    if (strchr(addr, ':')) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        s6->sin6_family = AF_INET6;
        assert_int_equal(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
        *len = sizeof(*s6);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
        s4->sin_family = AF_INET;
        assert_int_equal(inet_pton(AF_INET, addr, &s4->sin_addr), 1);
        *len = sizeof(*s4);
    }
    return (const struct sockaddr *)ss;
}

static void if_addr_text(const topo_if_t *t, char *buf, size_t len)
{
    if (t->family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)&t->addr)->sin_addr, buf, (socklen_t)len);
    else
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)&t->addr)->sin6_addr, buf, (socklen_t)len);
}

#define assert_why_has(why, needle)                                                            \
    do {                                                                                       \
        if (!strstr((why), (needle))) fail_msg("'%s' not in why: %s", (needle), (why));        \
    } while (0)

/* picks from ifs and checks name and address */
/* oobx__topo_report's text for req (NULL: from the environment); the caller frees it. */
static char *report_text(const topo_request_t *req)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    oobx__topo_report(f, req);
    fclose(f);
    assert_non_null(text);
    return text;
}

static void expect_pick(const topo_if_t *ifs, int n, const topo_request_t *req, const char *name, const char *addr,
                        const char *why_part)
{
    topo_if_t out;
    char why[512] = "";
    int rc = oobx__topo_pick_if_from(ifs, n, req, &out, why, sizeof(why));
    if (rc != OOBX_SUCCESS) fail_msg("pick failed (%d) where %s was expected: %s", rc, name, why);
    char a[INET6_ADDRSTRLEN];
    if_addr_text(&out, a, sizeof(a));
    if (strcmp(out.name, name) != 0 || (addr && strcmp(a, addr) != 0))
        fail_msg("picked %s %s, expected %s %s: %s", out.name, a, name, addr ? addr : "", why);
    if (why_part) assert_why_has(why, why_part);
}

/* ---- the filter grammar ---------------------------------------------------- */

static void test_ifname_match_grammar(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *name;
        int want;
    } cases[] = {
        {NULL, "eth0", 1},
        {"", "eth0", 1},
        {"eth", "eth0", 1},
        {"eth", "eth10", 1},
        {"eth", "ib0", 0},
        {"eth", "et", 0},
        {"eth,ib", "ib0", 1},
        {"eth,ib", "eth3", 1},
        {"eth,ib", "lo", 0},
        {"eth,ib", "enp1s0", 0},
        {"^docker,lo", "docker0", 0},
        {"^docker,lo", "lo", 0},
        {"^docker,lo", "lo1", 0},
        {"^docker,lo", "eth0", 1},
        {"^docker,lo", "ib0", 1},
        {"=eth0", "eth0", 1},
        {"=eth0", "eth01", 0},
        {"=eth0", "eth", 0},
        {"=eth0,ib0", "ib0", 1},
        {"=eth0,ib0", "ib01", 0},
        {"^=eth0,eth1", "eth0", 0},
        {"^=eth0,eth1", "eth1", 0},
        {"^=eth0,eth1", "eth10", 1},
        {"^=eth0,eth1", "ib0", 1},
        {"^", "eth0", 1},
        {"^", "lo", 1},
        {"=", "eth0", 0},
        {" eth , ib ", "ib0", 1},
        {" eth , ib ", "eth2", 1},
        {",,eth,", "eth0", 1},
        {",,eth,", "lo", 0},
        {"ens1f0,ens2f0", "ens2f0", 1},
        {"ens1f0,ens2f0", "ens3f0", 0},
        {"^ens1", "ens1f1", 0},
        {"^ens1", "ens2f1", 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int got = oobx__topo_ifname_match(cases[i].spec, cases[i].name);
        if (got != cases[i].want)
            fail_msg("oobx__topo_ifname_match(\"%s\", \"%s\") = %d, want %d", cases[i].spec ? cases[i].spec : "(null)",
                     cases[i].name, got, cases[i].want);
    }
    /* the same spec over a list of names: which ones survive */
    const char *names[] = {"lo", "eth0", "eth1", "eth10", "ib0", "docker0", "virbr0", "veth12ab", "enp3s0"};
    static const struct {
        const char *spec, *kept;
    } lists[] = {
        {"eth", "eth0 eth1 eth10"},
        {"=eth1", "eth1"},
        {"^eth", "lo ib0 docker0 virbr0 veth12ab enp3s0"},
        {"^=eth1,lo", "eth0 eth10 ib0 docker0 virbr0 veth12ab enp3s0"},
        {"^docker,virbr,veth,lo", "eth0 eth1 eth10 ib0 enp3s0"},
        {"ib,enp", "ib0 enp3s0"},
        {"=eth1,eth10,lo", "lo eth1 eth10"},
    };
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        char kept[256] = "";
        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
            if (oobx__topo_ifname_match(lists[i].spec, names[k]))
                oobx__appendf(kept, sizeof(kept), "%s%s", kept[0] ? " " : "", names[k]);
        if (strcmp(kept, lists[i].kept) != 0)
            fail_msg("spec \"%s\" kept \"%s\", want \"%s\"", lists[i].spec, kept, lists[i].kept);
    }
}

static void test_virtual_names(void **state)
{
    (void)state;
    assert_true(oobx__topo_if_is_virtual("docker0"));
    assert_true(oobx__topo_if_is_virtual("virbr0"));
    assert_true(oobx__topo_if_is_virtual("veth9f3a"));
    assert_false(oobx__topo_if_is_virtual("eth0"));
    assert_false(oobx__topo_if_is_virtual("lo"));
    assert_false(oobx__topo_if_is_virtual("ib0"));
}

static void test_pci_parse(void **state)
{
    (void)state;
    unsigned d, b, v, f;
    assert_int_equal(oobx__topo_pci_parse("0000:3b:00.0", &d, &b, &v, &f), OOBX_SUCCESS);
    assert_int_equal(d, 0);
    assert_int_equal(b, 0x3b);
    assert_int_equal(v, 0);
    assert_int_equal(f, 0);
    assert_int_equal(oobx__topo_pci_parse("3B:1f.7", &d, &b, &v, &f), OOBX_SUCCESS);
    assert_int_equal(d, 0);
    assert_int_equal(b, 0x3b);
    assert_int_equal(v, 0x1f);
    assert_int_equal(f, 7);
    assert_int_equal(oobx__topo_pci_parse("0001:af:02.1", &d, &b, &v, &f), OOBX_SUCCESS);
    assert_int_equal(d, 1);
    assert_int_equal(b, 0xaf);
    assert_int_equal(v, 2);
    assert_int_equal(f, 1);
    const char *bad[] = {"", "x", "3b:00", "3b:00.8", "0000:3b:20.0", "0000:3b:00.0x", "1:2:3:4.0",
                         "0000:3b:00", "0000:100:00.0", "10000:3b:00.0", ":3b:00.0", "0000:3b:.0", NULL};
    for (int i = 0; bad[i]; i++)
        if (oobx__topo_pci_parse(bad[i], &d, &b, &v, &f) != OOBX_ERR_INVALID) fail_msg("\"%s\" parsed as a PCI id", bad[i]);
    assert_int_equal(oobx__topo_pci_parse(NULL, &d, &b, &v, &f), OOBX_ERR_INVALID);
}

/* 1 when ifc's subnet holds addr */
static int holds(const topo_if_t *ifc, const char *addr)
{
    struct sockaddr_storage ss;
    socklen_t len = 0;
    const struct sockaddr *sa = mk_addr(&ss, &len, addr);
    return oobx__topo_if_holds(ifc, sa, len);
}

static void test_subnet_holds(void **state)
{
    (void)state;
    topo_if_t eth = mk_if("eth0", "10.1.2.3", 16);
    assert_true(holds(&eth, "10.1.200.7"));
    assert_false(holds(&eth, "10.2.0.1"));
    assert_true(holds(&eth, "::ffff:10.1.0.9"));
    topo_if_t odd = mk_if("eth1", "192.168.5.130", 25);
    assert_true(holds(&odd, "192.168.5.200"));
    assert_false(holds(&odd, "192.168.5.100"));
    topo_if_t v6 = mk_if("eth0", "fd00:1:2::5", 64);
    assert_true(holds(&v6, "fd00:1:2::99"));
    assert_false(holds(&v6, "fd00:1:3::99"));
    assert_false(holds(&v6, "10.1.2.3"));
    topo_if_t lo6 = mk_if("lo", "::1", 128);
    assert_true(holds(&lo6, "::1"));
    /* a scoped link-local root is on one link only */
    topo_if_t ll7 = mk_if("eth0", "fe80::5", 64); /* scope id 7 */
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    mk_addr(&ss, &sl, "fe80::9");
    struct sockaddr_in6 *r6 = (struct sockaddr_in6 *)&ss;
    assert_true(oobx__topo_if_holds(&ll7, (struct sockaddr *)r6, sl)); /* unscoped */
    r6->sin6_scope_id = 7;
    assert_true(oobx__topo_if_holds(&ll7, (struct sockaddr *)r6, sl));
    r6->sin6_scope_id = 8;
    assert_false(oobx__topo_if_holds(&ll7, (struct sockaddr *)r6, sl));
    char buf[96];
    oobx__topo_if_format(&odd, buf, sizeof(buf));
    assert_string_equal(buf, "192.168.5.130/25");
    topo_if_t ll = mk_if("eth0", "fe80::1", 64);
    oobx__topo_if_format(&ll, buf, sizeof(buf));
    assert_string_equal(buf, "fe80::1%eth0/64");
}

/* ---- interface choice over fabricated lists ------------------------------- */

static void test_pick_if_default_order(void **state)
{
    (void)state;
    /* the machine of no_network.xml knows none of these names: hwloc cannot separate them */
    topo_request_t req = {.family = AF_UNSPEC, .xml_path = XML_NO_NET};
    topo_if_t ifs[] = {mk_if("lo", "127.0.0.1", 8), mk_if("docker0", "172.17.0.1", 16), mk_if("eth0", "10.0.0.5", 24),
                       mk_if("eth1", "10.9.0.5", 24)};
    expect_pick(ifs, 4, &req, "eth0", "10.0.0.5", "eth0 10.0.0.5/24");
    /* without real interfaces: the container bridge before loopback */
    expect_pick(ifs, 2, &req, "docker0", NULL, "container/VM bridge");
    /* loopback when nothing else is up */
    ifs[1].up = 0;
    expect_pick(ifs, 2, &req, "lo", "127.0.0.1", "loopback");
    /* a down interface is never taken */
    ifs[2].up = 0;
    expect_pick(ifs, 4, &req, "eth1", "10.9.0.5", "the only real interface");
    /* nothing at all */
    topo_if_t out;
    char why[512];
    assert_int_equal(oobx__topo_pick_if_from(ifs, 0, &req, &out, why, sizeof(why)), OOBX_ERR_UNAVAILABLE);
    assert_why_has(why, "no network interface is up");
}

static void test_pick_if_subnet(void **state)
{
    (void)state;
    struct sockaddr_storage ss;
    socklen_t len;
    topo_if_t ifs[] = {mk_if("lo", "127.0.0.1", 8), mk_if("eth0", "10.0.0.5", 24), mk_if("ib0", "10.1.0.5", 16),
                       mk_if("lo", "::1", 128), mk_if("eth0", "fd00::5", 64)};
    topo_request_t req = {.family = AF_UNSPEC, .xml_path = XML_NO_NET};
    req.match = mk_addr(&ss, &len, "10.1.2.3");
    req.matchlen = len;
    expect_pick(ifs, 5, &req, "ib0", "10.1.0.5", "ib0 10.1.0.5/16: subnet 10.1.0.0/16 holds the root 10.1.2.3");
    req.match = mk_addr(&ss, &len, "127.0.0.1");
    req.matchlen = len;
    {
        topo_if_t out;
        char why[512];
        assert_int_equal(oobx__topo_pick_if_from(ifs, 5, &req, &out, why, sizeof(why)), OOBX_SUCCESS);
        assert_string_equal(why, "lo 127.0.0.1/8: subnet 127.0.0.0/8 holds the root 127.0.0.1");
        assert_int_equal(out.family, AF_INET);
    }
    req.match = mk_addr(&ss, &len, "::1");
    req.matchlen = len;
    expect_pick(ifs, 5, &req, "lo", "::1", "subnet ::1/128 holds the root ::1");
    req.match = mk_addr(&ss, &len, "fd00::77");
    req.matchlen = len;
    expect_pick(ifs, 5, &req, "eth0", "fd00::5", "subnet fd00::/64");
    req.match = mk_addr(&ss, &len, "::ffff:10.1.9.9");
    req.matchlen = len;
    expect_pick(ifs, 5, &req, "ib0", "10.1.0.5", "holds the root 10.1.9.9");
    /* no subnet holds the root: the default order, and the reason says so */
    req.match = mk_addr(&ss, &len, "192.168.1.1");
    req.matchlen = len;
    expect_pick(ifs, 5, &req, "eth0", "10.0.0.5", "no interface's subnet holds the root 192.168.1.1");
    /* the filter applies before the subnet: lo excluded, so the root's loopback subnet cannot win */
    req.match = mk_addr(&ss, &len, "127.0.0.1");
    req.matchlen = len;
    req.ifname_spec = "^lo";
    expect_pick(ifs, 5, &req, "eth0", "10.0.0.5", "no interface's subnet holds the root 127.0.0.1");
}

static void test_pick_if_filters(void **state)
{
    (void)state;
    topo_if_t ifs[] = {mk_if("lo", "127.0.0.1", 8), mk_if("eth0", "10.0.0.5", 24), mk_if("eth0", "fe80::5", 64),
                       mk_if("eth0", "fd00::5", 64),  mk_if("ib0", "10.1.0.5", 16),  mk_if("docker0", "172.17.0.1", 16)};
    int n = 6;
    topo_request_t req = {.family = AF_UNSPEC, .xml_path = XML_NO_NET};
    req.family = AF_INET6;
    expect_pick(ifs, n, &req, "eth0", "fd00::5", NULL);
    /* link-local only when asked for */
    topo_if_t only_ll[] = {ifs[2]};
    topo_if_t out, untouched;
    char why[512];
    memset(&out, 0xab, sizeof(out));
    memset(&untouched, 0xab, sizeof(untouched));
    assert_int_equal(oobx__topo_pick_if_from(only_ll, 1, &req, &out, why, sizeof(why)), OOBX_ERR_UNAVAILABLE);
    assert_memory_equal(&out, &untouched, sizeof(out)); /* output set only on success */
    assert_why_has(why, "link-local");
    assert_why_has(why, "OOBX_SOCKET_LINKLOCAL");
    req.allow_linklocal = 1;
    expect_pick(only_ll, 1, &req, "eth0", "fe80::5", "fe80::5%eth0/64");
    req.allow_linklocal = 0;
    req.family = AF_INET;
    expect_pick(ifs, n, &req, "eth0", "10.0.0.5", NULL);
    req.family = AF_UNSPEC;
    /* exclude list: default preference among what is left */
    req.ifname_spec = "^eth";
    expect_pick(ifs, n, &req, "ib0", "10.1.0.5", "selected by OOBX_SOCKET_IFNAME=^eth");
    req.ifname_spec = "^eth,ib";
    expect_pick(ifs, n, &req, "docker0", NULL, NULL);
    /* include list: the user's names, in the system's order, loopback not demoted */
    req.ifname_spec = "lo,ib";
    expect_pick(ifs, n, &req, "lo", "127.0.0.1", "first interface selected by OOBX_SOCKET_IFNAME=lo,ib");
    req.ifname_spec = "=ib0";
    expect_pick(ifs, n, &req, "ib0", NULL, NULL);
    /* nothing matches: the reason names every interface and what filtered it */
    req.ifname_spec = "=eth";
    assert_int_equal(oobx__topo_pick_if_from(ifs, n, &req, &out, why, sizeof(why)), OOBX_ERR_UNAVAILABLE);
    assert_why_has(why, "no usable interface");
    assert_why_has(why, "eth0 10.0.0.5/24 (not selected by OOBX_SOCKET_IFNAME==eth)");
    assert_why_has(why, "lo 127.0.0.1/8");
    req.ifname_spec = "ib";
    req.family = AF_INET6;
    assert_int_equal(oobx__topo_pick_if_from(ifs, n, &req, &out, why, sizeof(why)), OOBX_ERR_UNAVAILABLE);
    assert_why_has(why, "ib0 10.1.0.5/16 (IPv4, OOBX_SOCKET_FAMILY asks for IPv6)");
    /* bad requests */
    req.ifname_spec = NULL;
    req.family = 12345;
    assert_int_equal(oobx__topo_pick_if_from(ifs, n, &req, &out, why, sizeof(why)), OOBX_ERR_INVALID);
    req.family = AF_UNSPEC;
    req.pci_target = "not-a-bus-id";
    assert_int_equal(oobx__topo_pick_if_from(ifs, n, &req, &out, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_why_has(why, "OOBX_TOPO_PCI=not-a-bus-id");
    assert_int_equal(oobx__topo_pick_if_from(ifs, n, NULL, &out, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_int_equal(oobx__topo_pick_if_from(NULL, 2, &req, &out, why, sizeof(why)), OOBX_ERR_INVALID);
}

#ifdef OOBX_HAVE_HWLOC

static void test_pick_if_hwloc_two_socket(void **state)
{
    (void)state;
    topo_if_t ifs[] = {mk_if("lo", "127.0.0.1", 8), mk_if("ens2f0", "10.2.0.5", 24), mk_if("ens1f0", "10.1.0.5", 24),
                       mk_if("docker0", "172.17.0.1", 16)};
    topo_request_t req = {.family = AF_UNSPEC, .xml_path = XML_TWO_SOCKET};
    req.cpuset_target = "0-3";
    expect_pick(ifs, 4, &req, "ens1f0", NULL, "closest (numa) of 2 interfaces by hwloc");
    req.cpuset_target = "4-7";
    expect_pick(ifs, 4, &req, "ens2f0", NULL, "closest (numa)");
    req.cpuset_target = "5";
    expect_pick(ifs, 4, &req, "ens2f0", NULL, NULL);
    /* unbound: every device is as close as any other, the system's order stays */
    req.cpuset_target = NULL;
    expect_pick(ifs, 4, &req, "ens2f0", NULL, "whole machine");
    /* the NIC's own PCI id as the target */
    req.pci_target = "0000:17:00.0";
    expect_pick(ifs, 4, &req, "ens1f0", NULL, "closest (switch)");
    req.pci_target = NULL;
    /* a user's filter wins over locality */
    req.cpuset_target = "0-3";
    req.ifname_spec = "ens";
    expect_pick(ifs, 4, &req, "ens2f0", NULL, "OOBX_SOCKET_IFNAME=ens");
    req.ifname_spec = "^ens2";
    expect_pick(ifs, 4, &req, "ens1f0", NULL, NULL);
    /* an interface hwloc does not know (a bond) goes after the located ones */
    topo_if_t with_bond[] = {mk_if("bond0", "10.5.0.5", 24), mk_if("ens2f0", "10.2.0.5", 24)};
    req.ifname_spec = NULL;
    expect_pick(with_bond, 2, &req, "ens2f0", NULL, "closest (any)");
}

static void test_pick_if_hwloc_gpu(void **state)
{
    (void)state;
    topo_if_t ifs[] = {mk_if("eno1", "192.168.0.5", 24), mk_if("ib0", "10.0.0.5", 16), mk_if("ib1", "10.1.0.5", 16),
                       mk_if("ib2", "10.2.0.5", 16), mk_if("ib3", "10.3.0.5", 16)};
    topo_request_t req = {.family = AF_UNSPEC, .xml_path = XML_GPU};
    static const struct {
        const char *gpu, *want, *level;
    } cases[] = {
        {"0000:18:00.0", "ib0", "switch"},
        {"0000:3d:00.0", "ib1", "switch"},
        {"0000:9a:00.0", "ib2", "switch"},
        {"0000:ca:00.0", "ib3", "numa"},
        {"ca:00.0", "ib3", "numa"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        req.pci_target = cases[i].gpu;
        char level[32];
        snprintf(level, sizeof(level), "closest (%s)", cases[i].level);
        expect_pick(ifs, 5, &req, cases[i].want, NULL, level);
    }
    /* the root's subnet still wins over locality */
    struct sockaddr_storage ss;
    socklen_t len;
    req.pci_target = "0000:18:00.0";
    req.match = mk_addr(&ss, &len, "10.3.7.7");
    req.matchlen = len;
    expect_pick(ifs, 5, &req, "ib3", NULL, "holds the root 10.3.7.7");
    /* CPUs of package 0: eno1, ib0, ib1 are all on NUMA 0: the system's order */
    req.match = NULL;
    req.pci_target = NULL;
    req.cpuset_target = "0-7";
    expect_pick(ifs, 5, &req, "eno1", NULL, "closest (numa)");
    req.cpuset_target = "12-15";
    expect_pick(ifs, 5, &req, "ib3", NULL, "closest (numa)");
}

static void expect_ranked(const topo_request_t *req, int kind, const char *want_order, const char *want_close)
{
    topo_dev_t *devs = NULL;
    int n = -1;
    char why[512];
    int rc = oobx__topo_rank_devices(req, kind, &devs, &n, why, sizeof(why));
    if (rc != OOBX_SUCCESS) fail_msg("oobx__topo_rank_devices failed (%d): %s", rc, why);
    char order[256] = "", close[256] = "";
    for (int i = 0; i < n; i++) {
        oobx__appendf(order, sizeof(order), "%s%s", i ? " " : "", devs[i].name);
        oobx__appendf(close, sizeof(close), "%s%s", i ? " " : "", oobx__topo_closeness_name(devs[i].closeness));
    }
    free(devs);
    if (strcmp(order, want_order) != 0 || strcmp(close, want_close) != 0)
        fail_msg("ranked \"%s\" (%s), want \"%s\" (%s); %s", order, close, want_order, want_close, why);
}

static void test_rank_two_socket(void **state)
{
    (void)state;
    topo_request_t req = {.xml_path = XML_TWO_SOCKET, .cpuset_target = "0-3"};
    expect_ranked(&req, TOPO_DEV_NET, "eno1 ens1f0 ens2f0", "numa numa any");
    req.cpuset_target = "4-7";
    expect_ranked(&req, TOPO_DEV_NET, "ens2f0 eno1 ens1f0", "numa any any");
    expect_ranked(&req, 0, "ens2f0 eno1 ens1f0", "numa any any");
    expect_ranked(&req, TOPO_DEV_RDMA, "", "");
    /* a target spanning both sockets: all are equally close */
    req.cpuset_target = "3-4";
    expect_ranked(&req, 0, "eno1 ens1f0 ens2f0", "numa numa numa");
    req.cpuset_target = NULL;
    expect_ranked(&req, 0, "eno1 ens1f0 ens2f0", "numa numa numa");
    req.pci_target = "0000:17:00.0";
    expect_ranked(&req, 0, "ens1f0 eno1 ens2f0", "switch numa any");
    req.pci_target = "0000:00:1f.6"; /* eno1 hangs off the host bridge: no switch shared with ens1f0 */
    expect_ranked(&req, 0, "eno1 ens1f0 ens2f0", "switch numa any");

    /* the fields of one device */
    topo_dev_t *devs = NULL;
    int n = 0;
    char why[512];
    req.pci_target = NULL;
    req.cpuset_target = "4";
    assert_int_equal(oobx__topo_rank_devices(&req, TOPO_DEV_NET, &devs, &n, why, sizeof(why)), OOBX_SUCCESS);
    assert_int_equal(n, 3);
    assert_string_equal(devs[0].name, "ens2f0");
    assert_string_equal(devs[0].pci, "0000:b1:00.0");
    assert_int_equal(devs[0].kind, TOPO_DEV_NET);
    assert_int_equal(devs[0].numa, 1);
    assert_int_equal(devs[0].package, 1);
    assert_int_equal(devs[1].numa, 0);
    assert_int_equal(devs[1].package, 0);
    assert_why_has(why, "CPUs 4, NUMA 1, package 1");
    free(devs);
}

static void test_rank_gpu_switch(void **state)
{
    (void)state;
    topo_request_t req = {.xml_path = XML_GPU};
    req.pci_target = "0000:18:00.0";
    expect_ranked(&req, TOPO_DEV_RDMA, "mlx5_0 mlx5_1 mlx5_2 mlx5_3", "switch numa any any");
    req.pci_target = "0000:3d:00.0";
    expect_ranked(&req, TOPO_DEV_RDMA, "mlx5_1 mlx5_0 mlx5_2 mlx5_3", "switch numa any any");
    req.pci_target = "0000:9a:00.0";
    expect_ranked(&req, TOPO_DEV_RDMA, "mlx5_2 mlx5_3 mlx5_0 mlx5_1", "switch package any any");
    req.pci_target = "0000:ca:00.0";
    expect_ranked(&req, TOPO_DEV_RDMA, "mlx5_3 mlx5_2 mlx5_0 mlx5_1", "numa package any any");
    expect_ranked(&req, TOPO_DEV_NET, "ib3 ib2 eno1 ib0 ib1", "numa package any any any");
    req.pci_target = NULL;
    req.cpuset_target = "12-15";
    expect_ranked(&req, TOPO_DEV_RDMA, "mlx5_3 mlx5_2 mlx5_0 mlx5_1", "numa package any any");
    req.cpuset_target = "8-11";
    expect_ranked(&req, TOPO_DEV_RDMA, "mlx5_2 mlx5_3 mlx5_0 mlx5_1", "numa package any any");
    req.cpuset_target = "8-15";
    expect_ranked(&req, TOPO_DEV_RDMA, "mlx5_2 mlx5_3 mlx5_0 mlx5_1", "numa numa any any");
    req.cpuset_target = "0-7";
    expect_ranked(&req, TOPO_DEV_RDMA, "mlx5_0 mlx5_1 mlx5_2 mlx5_3", "numa numa any any");

    topo_dev_t *devs = NULL;
    int n = 0;
    char why[512];
    req.cpuset_target = "12";
    assert_int_equal(oobx__topo_rank_devices(&req, TOPO_DEV_RDMA, &devs, &n, why, sizeof(why)), OOBX_SUCCESS);
    assert_int_equal(n, 4);
    assert_string_equal(devs[0].name, "mlx5_3");
    assert_string_equal(devs[0].pci, "0000:cb:00.0");
    assert_int_equal(devs[0].kind, TOPO_DEV_RDMA);
    assert_int_equal(devs[0].numa, 2);
    assert_int_equal(devs[0].package, 1);
    assert_string_equal(devs[1].name, "mlx5_2");
    assert_int_equal(devs[1].numa, 1);
    assert_int_equal(devs[1].package, 1);
    free(devs);
}

static void test_pick_device_gpu(void **state)
{
    (void)state;
    const char *const ucx_ib[] = {"mlx5_3:1", "mlx5_2:1", "mlx5_1:1", "mlx5_0:1"};
    const char *const verbs[] = {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"};
    const char *const ucx_tcp[] = {"lo", "eno1", "ib0", "ib1", "ib2", "ib3"};
    char why[512];
    topo_request_t req = {.xml_path = XML_GPU};
    static const struct {
        const char *gpu;
        int ucx_ib, verbs, tcp;
    } cases[] = {
        {"0000:18:00.0", 3, 0, 2},
        {"0000:3d:00.0", 2, 1, 3},
        {"0000:9a:00.0", 1, 2, 4},
        {"0000:ca:00.0", 0, 3, 5},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        req.pci_target = cases[i].gpu;
        int got = oobx__topo_pick_device(&req, ucx_ib, 4, why, sizeof(why));
        if (got != cases[i].ucx_ib) fail_msg("GPU %s: ucx picked %d, want %d: %s", cases[i].gpu, got, cases[i].ucx_ib, why);
        got = oobx__topo_pick_device(&req, verbs, 4, why, sizeof(why));
        if (got != cases[i].verbs) fail_msg("GPU %s: verbs picked %d, want %d: %s", cases[i].gpu, got, cases[i].verbs, why);
        got = oobx__topo_pick_device(&req, ucx_tcp, 6, why, sizeof(why));
        if (got != cases[i].tcp) fail_msg("GPU %s: tcp picked %d, want %d: %s", cases[i].gpu, got, cases[i].tcp, why);
    }
    req.pci_target = "0000:9a:00.0";
    assert_int_equal(oobx__topo_pick_device(&req, ucx_ib, 4, why, sizeof(why)), 1);
    assert_why_has(why, "mlx5_2:1: closest (switch) of 4 candidates; target PCI 0000:9a:00.0");
    /* the user's device wins */
    req.net_device = "mlx5_0";
    assert_int_equal(oobx__topo_pick_device(&req, ucx_ib, 4, why, sizeof(why)), 3);
    assert_why_has(why, "OOBX_NET_DEVICE=mlx5_0");
    req.net_device = "mlx5_1:1";
    assert_int_equal(oobx__topo_pick_device(&req, ucx_ib, 4, why, sizeof(why)), 2);
    req.net_device = "mlx5_1:2"; /* another port of a listed device */
    assert_int_equal(oobx__topo_pick_device(&req, ucx_ib, 4, why, sizeof(why)), OOBX_ERR_UNAVAILABLE);
    req.net_device = "mlx5_2:1"; /* verbs lists devices without port */
    assert_int_equal(oobx__topo_pick_device(&req, verbs, 4, why, sizeof(why)), 2);
    assert_why_has(why, "mlx5_2: named by OOBX_NET_DEVICE=mlx5_2:1");
    req.net_device = "mlx5_9";
    assert_int_equal(oobx__topo_pick_device(&req, ucx_ib, 4, why, sizeof(why)), OOBX_ERR_UNAVAILABLE);
    assert_why_has(why, "OOBX_NET_DEVICE=mlx5_9 names none of the 4 candidates: mlx5_3:1, mlx5_2:1");
    req.net_device = NULL;
    /* names hwloc does not list keep their order */
    const char *const shm[] = {"memory", "posix", "sysv"};
    assert_int_equal(oobx__topo_pick_device(&req, shm, 3, why, sizeof(why)), 0);
    assert_why_has(why, "locates none");
    /* a PCI target that is not there: ranked for the CPUs instead, and said */
    req.pci_target = "0000:ee:00.0";
    req.cpuset_target = "12-15";
    assert_int_equal(oobx__topo_pick_device(&req, verbs, 4, why, sizeof(why)), 3);
    assert_why_has(why, "PCI 0000:ee:00.0 is not in the topology");
    /* bad input */
    assert_int_equal(oobx__topo_pick_device(&req, NULL, 2, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_int_equal(oobx__topo_pick_device(&req, verbs, 0, why, sizeof(why)), OOBX_ERR_INVALID);
}

static void test_closest_rdma(void **state)
{
    (void)state;
    char dev[TOPO_NAME_MAX], why[512];
    topo_request_t req = {.xml_path = XML_GPU, .pci_target = "0000:3d:00.0"};
    assert_int_equal(oobx__topo_closest_rdma(&req, dev, sizeof(dev), why, sizeof(why)), OOBX_SUCCESS);
    assert_string_equal(dev, "mlx5_1");
    assert_why_has(why, "mlx5_1: closest (switch) of 4 RDMA devices");
    req.pci_target = NULL;
    req.cpuset_target = "0-7";
    assert_int_equal(oobx__topo_closest_rdma(&req, dev, sizeof(dev), why, sizeof(why)), OOBX_SUCCESS);
    assert_string_equal(dev, "mlx5_0");
    assert_why_has(why, "first of the RDMA devices closest (numa), 2 of 4");
    /* the whole machine: no choice to make */
    req.cpuset_target = NULL;
    assert_int_equal(oobx__topo_closest_rdma(&req, dev, sizeof(dev), why, sizeof(why)), OOBX_ERR_UNAVAILABLE);
    assert_why_has(why, "the 4 RDMA devices are equally close (numa)");
    req.xml_path = XML_TWO_SOCKET;
    assert_int_equal(oobx__topo_closest_rdma(&req, dev, sizeof(dev), why, sizeof(why)), OOBX_ERR_UNAVAILABLE);
    assert_why_has(why, "hwloc sees no RDMA device");
    req.xml_path = XML_BROKEN;
    assert_int_equal(oobx__topo_closest_rdma(&req, dev, sizeof(dev), why, sizeof(why)), OOBX_ERR_UNAVAILABLE);
    req.xml_path = XML_GPU;
    req.pci_target = "bad";
    assert_int_equal(oobx__topo_closest_rdma(&req, dev, sizeof(dev), why, sizeof(why)), OOBX_ERR_INVALID);
}

static void test_no_network(void **state)
{
    (void)state;
    topo_request_t req = {.xml_path = XML_NO_NET, .cpuset_target = "0-1"};
    topo_dev_t *devs = NULL;
    int n = -1;
    char why[512];
    assert_int_equal(oobx__topo_rank_devices(&req, 0, &devs, &n, why, sizeof(why)), OOBX_SUCCESS);
    assert_int_equal(n, 0);
    free(devs);
    const char *const names[] = {"mlx5_0", "mlx5_1"};
    assert_int_equal(oobx__topo_pick_device(&req, names, 2, why, sizeof(why)), 0);
    assert_why_has(why, "transport's order is kept");
    topo_if_t ifs[] = {mk_if("eth1", "10.1.0.5", 24), mk_if("eth0", "10.0.0.5", 24)};
    expect_pick(ifs, 2, &req, "eth1", NULL, NULL);
    /* the target's PCI device exists but is not a network device */
    req.pci_target = "0000:01:00.0";
    assert_int_equal(oobx__topo_rank_devices(&req, 0, &devs, &n, why, sizeof(why)), OOBX_SUCCESS);
    assert_int_equal(n, 0);
    assert_why_has(why, "PCI 0000:01:00.0");
    free(devs);
}

static void test_broken_topology(void **state)
{
    (void)state;
    const char *files[] = {XML_BROKEN, XML_MISSING};
    for (int i = 0; i < 2; i++) {
        topo_request_t req = {.xml_path = files[i]};
        topo_dev_t *devs = NULL;
        int n = 0;
        char why[512];
        assert_int_equal(oobx__topo_rank_devices(&req, 0, &devs, &n, why, sizeof(why)), OOBX_ERR_UNAVAILABLE);
        assert_why_has(why, files[i]);
        const char *const names[] = {"mlx5_1", "mlx5_0"};
        assert_int_equal(oobx__topo_pick_device(&req, names, 2, why, sizeof(why)), 0);
        assert_why_has(why, "the transport's order is kept");
        topo_if_t ifs[] = {mk_if("eth1", "10.1.0.5", 24), mk_if("eth0", "10.0.0.5", 24)};
        expect_pick(ifs, 2, &req, "eth1", NULL, "kept the system's order");
    }
}

static void test_bad_targets(void **state)
{
    (void)state;
    topo_dev_t *devs = NULL;
    int n = 0;
    char why[512];
    topo_request_t req = {.xml_path = XML_TWO_SOCKET, .pci_target = "3b:00"};
    assert_int_equal(oobx__topo_rank_devices(&req, 0, &devs, &n, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_why_has(why, "OOBX_TOPO_PCI=3b:00");
    const char *const names[] = {"ens1f0", "ens2f0"};
    assert_int_equal(oobx__topo_pick_device(&req, names, 2, why, sizeof(why)), OOBX_ERR_INVALID);
    req.pci_target = NULL;
    req.cpuset_target = "zero";
    assert_int_equal(oobx__topo_rank_devices(&req, 0, &devs, &n, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_why_has(why, "CPU list 'zero'");
    req.cpuset_target = "100-103";
    assert_int_equal(oobx__topo_rank_devices(&req, 0, &devs, &n, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_why_has(why, "holds no CPU of the topology (it has CPUs 0-7)");
    req.cpuset_target = NULL;
    assert_int_equal(oobx__topo_rank_devices(&req, 9, &devs, &n, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_int_equal(oobx__topo_rank_devices(&req, 0, NULL, &n, why, sizeof(why)), OOBX_ERR_INVALID);
}

static void test_report(void **state)
{
    (void)state;
    topo_request_t req = {.xml_path = XML_GPU, .pci_target = "0000:9a:00.0", .ifname_spec = "lo"};
    char *text = report_text(&req);
    assert_why_has(text, "source:   file " XML_GPU);
    assert_why_has(text, "target PCI 0000:9a:00.0 (CPUs 8-11, NUMA 1, package 1)");
    assert_why_has(text, "mlx5_2       rdma  0000:9b:00.0  1     1        switch");
    assert_why_has(text, "socket  lo 127.0.0.1/8: first interface selected by OOBX_SOCKET_IFNAME=lo");
    assert_why_has(text, "verbs   mlx5_2: closest (switch)");
    assert_why_has(text, "ucx     mlx5_2: closest (switch)");
    free(text);
    req.xml_path = XML_NO_NET;
    req.pci_target = NULL;
    req.net_device = "mlx5_4";
    text = report_text(&req);
    assert_why_has(text, "(no network or RDMA device)");
    assert_why_has(text, "verbs   mlx5_4 (named by OOBX_NET_DEVICE)");
    free(text);
}

/* oobx__topo_report(out, NULL) reads the OOBX_* settings of the environment */
static void test_report_from_env(void **state)
{
    (void)state;
    static const struct {
        const char *comm_id, *want;
    } cases[] = {
        {"127.0.0.1:29500", "socket  lo 127.0.0.1/8: subnet 127.0.0.0/8 holds the root 127.0.0.1"},
        {"[::1]:29500,127.0.0.1:29501", "socket  lo ::1/128: subnet ::1/128 holds the root ::1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        setenv("OOBX_SOCKET_IFNAME", "lo", 1);
        setenv("OOBX_COMM_ID", cases[i].comm_id, 1);
        char *text = report_text(NULL);
        unsetenv("OOBX_SOCKET_IFNAME");
        unsetenv("OOBX_COMM_ID");
        assert_why_has(text, cases[i].comm_id);
        assert_why_has(text, cases[i].want);
        free(text);
    }
    /* a malformed setting is reported, not ignored */
    setenv("OOBX_SOCKET_FAMILY", "AF_APPLETALK", 1);
    char *text = report_text(NULL);
    unsetenv("OOBX_SOCKET_FAMILY");
    assert_why_has(text, "do not parse");
    free(text);
}

#endif /* OOBX_HAVE_HWLOC */

/* ---- without the hwloc module ---------------------------------------------- */

/* Every choice made with req (module_dir already set) keeps the given order, and each
 * reason contains why_part. */
static void expect_orders_kept(topo_request_t *req, const char *why_part)
{
    topo_dev_t *devs = NULL;
    int n = 0;
    char why[512];
    assert_int_equal(oobx__topo_rank_devices(req, 0, &devs, &n, why, sizeof(why)), OOBX_ERR_UNAVAILABLE);
    assert_null(devs);
    assert_why_has(why, why_part);
    /* on the GPU machine mlx5_2 would be closest (test_pick_device_gpu); here the first stays */
    const char *const names[] = {"mlx5_3", "mlx5_2"};
    assert_int_equal(oobx__topo_pick_device(req, names, 2, why, sizeof(why)), 0);
    assert_why_has(why, why_part);
    assert_why_has(why, "transport's order is kept");
    int close[2] = {-1, -1};
    assert_int_equal(oobx__topo_rank_names(req, names, 2, close, why, sizeof(why)), OOBX_ERR_UNAVAILABLE);
    topo_if_t ifs[] = {mk_if("ib3", "10.3.0.5", 24), mk_if("ib2", "10.2.0.5", 24)};
    expect_pick(ifs, 2, req, "ib3", NULL, "kept the system's order");
    char dev[TOPO_NAME_MAX];
    assert_int_equal(oobx__topo_closest_rdma(req, dev, sizeof(dev), why, sizeof(why)), OOBX_ERR_UNAVAILABLE);
    assert_why_has(why, why_part);
    /* a malformed target is still the caller's error, module or not */
    topo_request_t bad = *req;
    bad.pci_target = "3b:00";
    assert_int_equal(oobx__topo_rank_devices(&bad, 0, &devs, &n, why, sizeof(why)), OOBX_ERR_INVALID);
    assert_why_has(why, "is not a PCI bus id");
    /* and the report names what is missing */
    char *text = report_text(req);
    assert_why_has(text, "hwloc:    none: ");
    assert_why_has(text, why_part);
    free(text);
}

static void test_without_module(void **state)
{
    (void)state;
    char dir[] = "/tmp/oobx-topo-mod.XXXXXX";
    assert_non_null(mkdtemp(dir));
    topo_request_t req = {.xml_path = XML_GPU, .pci_target = "0000:9a:00.0", .module_dir = dir};
    char path[sizeof(dir) + 32];
    snprintf(path, sizeof(path), "%s/%s", dir, OOBX_TOPO_MODULE);
    /* an empty module directory: no module */
    char want[sizeof(path) + 128];
    snprintf(want, sizeof(want), "%s is not there", path);
    expect_orders_kept(&req, want);
    /* a file of that name that is no shared object: refused, with the loader's word */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not an ELF file\n", f);
    fclose(f);
    snprintf(want, sizeof(want), "hwloc module %s does not load", path);
    expect_orders_kept(&req, want);
    /* a shared object without the entry point: the C library, wherever it is */
    unlink(path);
    Dl_info libc;
    assert_int_not_equal(dladdr((void *)fputs, &libc), 0);
    assert_int_equal(symlink(libc.dli_fname, path), 0);
    snprintf(want, sizeof(want), "hwloc module %s has no %s", path, OOBX_TOPO_MODULE_INIT);
    expect_orders_kept(&req, want);
    unlink(path);
    rmdir(dir);
}

/* The library maps hwloc only when a choice needs it: the unit test links the core's archive,
 * which no longer names libhwloc, so hwloc appears in this process's maps only after a ranking. */
static int maps_have(const char *needle)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[1024];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f)) found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

static void test_hwloc_mapped_on_demand(void **state)
{
    (void)state;
    /* cmocka runs the tests in order in one process: no test before this one ranked a device */
    assert_int_equal(maps_have("libhwloc"), 0);
    topo_if_t ifs[] = {mk_if("lo", "127.0.0.1", 8), mk_if("eth0", "10.0.0.5", 24)};
    topo_request_t req = {.family = AF_UNSPEC, .xml_path = XML_NO_NET, .ifname_spec = "eth0"};
    topo_if_t out;
    char why[512];
    /* a choice that the name filter decides loads nothing */
    assert_int_equal(oobx__topo_pick_if_from(ifs, 2, &req, &out, why, sizeof(why)), OOBX_SUCCESS);
    assert_int_equal(maps_have("libhwloc"), 0);
#ifdef OOBX_HAVE_HWLOC
    topo_dev_t *devs = NULL;
    int n = 0;
    assert_int_equal(oobx__topo_rank_devices(&req, 0, &devs, &n, why, sizeof(why)), OOBX_SUCCESS);
    free(devs);
    assert_int_equal(maps_have("libhwloc"), 1);
    assert_int_equal(maps_have(OOBX_TOPO_MODULE), 1);
#endif
}


/* ---- real interfaces in a network namespace of our own ------------------- */

/* Runs in a child inside a fresh network namespace: lo, a veth pair ens9/veth9
 * (a real-looking interface and a container-side one), a bridge docker0
 * and eth8, a veth whose peer is down (no carrier).
 * Returns NULL when all checks hold, else what failed. Nothing is sent. */
static const char *netns_checks(char *msg, size_t len)
{
    static const char *const setup =
        "ip link set lo up && "
        "ip link add ens9 type veth peer name veth9 && "
        "ip addr add 10.9.0.1/24 dev ens9 && ip -6 addr add fd09::1/64 dev ens9 nodad && "
        "ip addr add 172.18.0.1/16 dev veth9 && ip link set ens9 up && ip link set veth9 up && "
        "ip link add docker0 type bridge && ip addr add 172.17.0.1/16 dev docker0 && ip link set docker0 up && "
        "ip link add eth8 type veth peer name eth8p && ip addr add 10.8.0.1/24 dev eth8 && ip link set eth8 up && "
        /* a veth gets its carrier a moment after both ends are up */
        "for i in $(seq 100); do ip -o link show ens9 | grep -q LOWER_UP && "
        "ip -o link show veth9 | grep -q LOWER_UP && break; sleep 0.05; done";
    if (system(setup) != 0) return "SKIP: cannot build the interfaces (ip link add ... type veth/bridge)";
    topo_if_t *ifs = NULL;
    int n = 0;
    if (oobx__topo_if_list(&ifs, &n) != OOBX_SUCCESS) return "oobx__topo_if_list failed";
    int seen_ens9 = 0, seen_ll = 0, seen_docker = 0, seen_eth8 = 0;
    for (int i = 0; i < n; i++) {
        const topo_if_t *t = &ifs[i];
        if (strcmp(t->name, "ens9") == 0 && t->family == AF_INET) {
            seen_ens9 = t->up && t->prefixlen == 24 && !t->loopback;
        } else if (strcmp(t->name, "ens9") == 0 && t->linklocal) {
            seen_ll = ((const struct sockaddr_in6 *)&t->addr)->sin6_scope_id == if_nametoindex("ens9");
        } else if (strcmp(t->name, "docker0") == 0) {
            seen_docker = 1;
        } else if (strcmp(t->name, "eth8") == 0) {
            seen_eth8 = !t->up;
        }
    }
    free(ifs);
    if (!seen_ens9) return "ens9 10.9.0.1/24 not listed as up with prefix 24";
    if (!seen_docker) return "docker0 not listed";
    if (!seen_eth8) return "eth8 (peer down) not listed, or listed as up";
    (void)seen_ll; /* the kernel adds the link-local address only after the link is up: not always there yet */

    static const struct {
        const char *spec;
        int family;
        const char *root;
        const char *want; /* "name address", or "!" + a part of the error */
    } cases[] = {
        {NULL, AF_UNSPEC, NULL, "ens9 10.9.0.1"},
        {"^ens", AF_UNSPEC, NULL, "veth9 172.18.0.1"},
        {"^ens,veth,docker", AF_UNSPEC, NULL, "lo 127.0.0.1"},
        {NULL, AF_INET6, NULL, "ens9 fd09::1"},
        {NULL, AF_UNSPEC, "127.0.0.1", "lo 127.0.0.1"},
        {NULL, AF_UNSPEC, "::1", "lo ::1"},
        {NULL, AF_UNSPEC, "172.18.3.4", "veth9 172.18.0.1"},
        {"docker", AF_UNSPEC, NULL, "docker0 172.17.0.1"},
        {"^ens,veth9", AF_UNSPEC, NULL, "docker0 172.17.0.1"},
        {"=eth8", AF_UNSPEC, NULL, "!eth8 10.8.0.1/24 (down)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct sockaddr_storage ss;
        socklen_t sl = 0;
        topo_request_t req = {.ifname_spec = cases[i].spec, .family = cases[i].family};
        if (cases[i].root) {
            memset(&ss, 0, sizeof(ss));
            if (strchr(cases[i].root, ':')) {
                struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
                s6->sin6_family = AF_INET6;
                inet_pton(AF_INET6, cases[i].root, &s6->sin6_addr);
                sl = sizeof(*s6);
            } else {
                struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
                s4->sin_family = AF_INET;
                inet_pton(AF_INET, cases[i].root, &s4->sin_addr);
                sl = sizeof(*s4);
            }
            req.match = (const struct sockaddr *)&ss;
            req.matchlen = sl;
        }
        topo_if_t out;
        char why[768] = "", got[160];
        int rc = oobx__topo_pick_if(&req, &out, why, sizeof(why));
        if (cases[i].want[0] == '!') {
            if (rc != OOBX_ERR_UNAVAILABLE || !strstr(why, cases[i].want + 1)) {
                snprintf(msg, len, "spec %s: rc %d, want the error '%s': %s", cases[i].spec ? cases[i].spec : "-", rc,
                         cases[i].want + 1, why);
                return msg;
            }
            continue;
        }
        char a[INET6_ADDRSTRLEN] = "";
        if (rc == OOBX_SUCCESS) if_addr_text(&out, a, sizeof(a));
        snprintf(got, sizeof(got), "%s %s", rc == OOBX_SUCCESS ? out.name : "(none)", a);
        if (strcmp(got, cases[i].want) != 0) {
            snprintf(msg, len, "case %zu (spec %s, root %s): picked '%s', want '%s': %s", i,
                     cases[i].spec ? cases[i].spec : "-", cases[i].root ? cases[i].root : "-", got, cases[i].want, why);
            return msg;
        }
    }
    return NULL;
}

static void test_netns_interfaces(void **state)
{
    (void)state;
    if (access("/usr/sbin/ip", X_OK) != 0 && access("/sbin/ip", X_OK) != 0 && access("/usr/bin/ip", X_OK) != 0) {
        print_message("skipped: no ip command (iproute2)\n");
        skip();
    }
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        alarm(30);
        char msg[1024];
        const char *res;
        if (unshare(CLONE_NEWNET) != 0)
            res = "SKIP: cannot make a network namespace (needs CAP_SYS_ADMIN)";
        else
            res = netns_checks(msg, sizeof(msg));
        if (res && write(fds[1], res, strlen(res)) < 0) _exit(3);
        _exit(res ? 1 : 0);
    }
    close(fds[1]);
    char buf[1024];
    ssize_t k, got = 0;
    while (got < (ssize_t)sizeof(buf) - 1 && (k = read(fds[0], buf + got, sizeof(buf) - 1 - (size_t)got)) > 0) got += k;
    buf[got > 0 ? got : 0] = '\0';
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status)) fail_msg("the namespace child died of signal %d", WTERMSIG(status));
    if (strncmp(buf, "SKIP: ", 6) == 0) {
        print_message("skipped: %s\n", buf + 6);
        skip();
    }
    if (WEXITSTATUS(status) != 0) fail_msg("%s", buf[0] ? buf : "the namespace child failed");
}

/* ---- this machine (loopback only; nothing is sent) ------------------------ */

static void test_this_machine(void **state)
{
    (void)state;
    topo_if_t *ifs = NULL;
    int n = 0;
    assert_int_equal(oobx__topo_if_list(&ifs, &n), OOBX_SUCCESS);
    int lo4 = 0;
    for (int i = 0; i < n; i++)
        if (ifs[i].loopback && ifs[i].family == AF_INET) {
            lo4 = 1;
            assert_int_equal(ifs[i].prefixlen, 8);
            assert_int_equal(((struct sockaddr_in *)&ifs[i].addr)->sin_port, 0);
        }
    free(ifs);
    if (!lo4) skip();
    struct sockaddr_storage ss;
    socklen_t len;
    topo_request_t req = {.family = AF_UNSPEC};
    req.match = mk_addr(&ss, &len, "127.0.0.1");
    req.matchlen = len;
    topo_if_t out;
    char why[512];
    assert_int_equal(oobx__topo_pick_if(&req, &out, why, sizeof(why)), OOBX_SUCCESS);
    assert_true(out.loopback);
    assert_why_has(why, "holds the root 127.0.0.1");
    req.match = NULL;
    req.ifname_spec = "=lo";
    req.family = AF_INET;
    assert_int_equal(oobx__topo_pick_if(&req, &out, why, sizeof(why)), OOBX_SUCCESS);
    assert_string_equal(out.name, "lo");
    assert_int_equal(out.family, AF_INET);
    /* whatever this machine has, a ranking of its own devices works or says why not */
    topo_dev_t *devs = NULL;
    int nd = 0;
    req.ifname_spec = NULL;
    int rc = oobx__topo_rank_devices(&req, 0, &devs, &nd, why, sizeof(why));
    assert_true(rc == OOBX_SUCCESS || rc == OOBX_ERR_UNAVAILABLE);
    if (rc == OOBX_SUCCESS) assert_why_has(why, "target ");
    free(devs);
#ifdef OOBX_HAVE_HWLOC
    /* the default target is the calling thread's binding */
    cpu_set_t saved, one;
    if (rc == OOBX_SUCCESS && pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved) == 0 &&
        CPU_ISSET(0, &saved)) {
        CPU_ZERO(&one);
        CPU_SET(0, &one);
        assert_int_equal(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);
        rc = oobx__topo_rank_devices(&req, 0, &devs, &nd, why, sizeof(why));
        pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
        assert_int_equal(rc, OOBX_SUCCESS);
        assert_why_has(why, "this thread's CPU binding (CPUs 0,");
        free(devs);
    }
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hwloc_mapped_on_demand),
        cmocka_unit_test(test_ifname_match_grammar),
        cmocka_unit_test(test_virtual_names),
        cmocka_unit_test(test_pci_parse),
        cmocka_unit_test(test_subnet_holds),
        cmocka_unit_test(test_pick_if_default_order),
        cmocka_unit_test(test_pick_if_subnet),
        cmocka_unit_test(test_pick_if_filters),
#ifdef OOBX_HAVE_HWLOC
        cmocka_unit_test(test_pick_if_hwloc_two_socket),
        cmocka_unit_test(test_pick_if_hwloc_gpu),
        cmocka_unit_test(test_rank_two_socket),
        cmocka_unit_test(test_rank_gpu_switch),
        cmocka_unit_test(test_pick_device_gpu),
        cmocka_unit_test(test_closest_rdma),
        cmocka_unit_test(test_no_network),
        cmocka_unit_test(test_broken_topology),
        cmocka_unit_test(test_bad_targets),
        cmocka_unit_test(test_report),
        cmocka_unit_test(test_report_from_env),
#endif
        cmocka_unit_test(test_without_module),
        cmocka_unit_test(test_this_machine),
        cmocka_unit_test(test_netns_interfaces),
    };
    return cmocka_run_group_tests_name("topo", tests, NULL, NULL);
}
