/* Socket interface choice: the name filter, the system's interface list, and
 * the pick (filters, the root's subnet, real before virtual before loopback,
 * then hwloc locality when several real ones qualify). */
#include "topo.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "oobx.h"

static int topo_spec_empty(const char *spec)
{
    return !spec || spec[0] == '\0';
}

int oobx__topo_ifname_match(const char *spec, const char *ifname)
{
    if (topo_spec_empty(spec)) return 1;
    if (!ifname) return 0;
    const char *p = spec;
    while (*p == ' ' || *p == '\t') p++;
    int exclude = 0, exact = 0;
    if (*p == '^') {
        exclude = 1;
        p++;
    }
    if (*p == '=') {
        exact = 1;
        p++;
    }
    size_t iflen = strlen(ifname);
    int found = 0;
    while (*p && !found) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *b = p, *e = end;
        while (b < e && (*b == ' ' || *b == '\t')) b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t')) e--;
        size_t len = (size_t)(e - b);
        if (len > 0) {
            if (exact)
                found = (iflen == len && memcmp(ifname, b, len) == 0);
            else
                found = (iflen >= len && memcmp(ifname, b, len) == 0);
        }
        p = *end ? end + 1 : end;
    }
    return exclude ? !found : found;
}

int oobx__topo_if_is_virtual(const char *ifname)
{
    static const char *const prefixes[] = {"docker", "virbr", "veth"};
    if (!ifname) return 0;
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
        if (strncmp(ifname, prefixes[i], strlen(prefixes[i])) == 0) return 1;
    return 0;
}

static int topo_mask_prefixlen(const struct sockaddr *mask, int family)
{
    const unsigned char *b;
    size_t len;
    if (!mask || mask->sa_family != family) return family == AF_INET ? 32 : 128;
    if (family == AF_INET) {
        b = (const unsigned char *)&((const struct sockaddr_in *)mask)->sin_addr;
        len = 4;
    } else {
        b = (const unsigned char *)&((const struct sockaddr_in6 *)mask)->sin6_addr;
        len = 16;
    }
    int bits = 0;
    for (size_t i = 0; i < len; i++)
        for (int k = 7; k >= 0; k--)
            if (b[i] & (1u << k)) bits++;
    return bits;
}

int oobx__topo_if_list(topo_if_t **out, int *n)
{
    if (!out || !n) return OOBX_ERR_INVALID;
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0) return OOBX_ERR_SYSTEM;
    int count = 0;
    for (struct ifaddrs *a = list; a; a = a->ifa_next)
        if (a->ifa_addr && (a->ifa_addr->sa_family == AF_INET || a->ifa_addr->sa_family == AF_INET6) &&
            (a->ifa_flags & IFF_UP))
            count++;
    topo_if_t *ifs = calloc(count > 0 ? (size_t)count : 1, sizeof(*ifs));
    if (!ifs) {
        freeifaddrs(list);
        return OOBX_ERR_NOMEM;
    }
    int k = 0;
    for (struct ifaddrs *a = list; a && k < count; a = a->ifa_next) {
        if (!a->ifa_addr || !(a->ifa_flags & IFF_UP)) continue;
        int fam = a->ifa_addr->sa_family;
        if (fam != AF_INET && fam != AF_INET6) continue;
        topo_if_t *t = &ifs[k++];
        snprintf(t->name, sizeof(t->name), "%s", a->ifa_name ? a->ifa_name : "?");
        t->family = fam;
        t->up = (a->ifa_flags & IFF_RUNNING) != 0;
        t->loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
        t->prefixlen = topo_mask_prefixlen(a->ifa_netmask, fam);
        if (fam == AF_INET) {
            struct sockaddr_in *sin = (struct sockaddr_in *)&t->addr;
            memcpy(sin, a->ifa_addr, sizeof(*sin));
            sin->sin_port = 0;
            t->addrlen = sizeof(*sin);
        } else {
            struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&t->addr;
            memcpy(sin6, a->ifa_addr, sizeof(*sin6));
            sin6->sin6_port = 0;
            t->addrlen = sizeof(*sin6);
            t->linklocal = IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr);
            if (t->linklocal && sin6->sin6_scope_id == 0) {
                /* the label of an alias ("eth0:1") is not a device name */
                char dev[TOPO_NAME_MAX];
                snprintf(dev, sizeof(dev), "%s", t->name);
                char *colon = strchr(dev, ':');
                if (colon) *colon = '\0';
                sin6->sin6_scope_id = if_nametoindex(dev);
            }
        }
    }
    freeifaddrs(list);
    *out = ifs;
    *n = k;
    return OOBX_SUCCESS;
}

/* The address bytes of a, with an IPv4-mapped IPv6 address seen as IPv4. */
static int topo_addr_bytes(const struct sockaddr *a, socklen_t alen, unsigned char bytes[16], int *family)
{
    if (!a) return -1;
    if (a->sa_family == AF_INET && alen >= (socklen_t)sizeof(struct sockaddr_in)) {
        memcpy(bytes, &((const struct sockaddr_in *)a)->sin_addr, 4);
        *family = AF_INET;
        return 0;
    }
    if (a->sa_family == AF_INET6 && alen >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct in6_addr *in6 = &((const struct sockaddr_in6 *)a)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(in6)) {
            memcpy(bytes, &in6->s6_addr[12], 4);
            *family = AF_INET;
        } else {
            memcpy(bytes, in6, 16);
            *family = AF_INET6;
        }
        return 0;
    }
    return -1;
}

int oobx__topo_if_holds(const topo_if_t *ifc, const struct sockaddr *addr, socklen_t addrlen)
{
    unsigned char a[16], b[16];
    int fa, fb;
    if (!ifc || topo_addr_bytes(addr, addrlen, a, &fa) != 0) return 0;
    if (topo_addr_bytes((const struct sockaddr *)&ifc->addr, ifc->addrlen, b, &fb) != 0) return 0;
    if (fa != fb) return 0;
    /* every link has fe80::/64: a scoped link-local root names its link */
    if (fa == AF_INET6 && addr->sa_family == AF_INET6 && ifc->addr.ss_family == AF_INET6) {
        const struct sockaddr_in6 *r = (const struct sockaddr_in6 *)addr;
        const struct sockaddr_in6 *l = (const struct sockaddr_in6 *)&ifc->addr;
        if (IN6_IS_ADDR_LINKLOCAL(&r->sin6_addr) && r->sin6_scope_id != 0 && r->sin6_scope_id != l->sin6_scope_id)
            return 0;
    }
    int maxbits = fa == AF_INET ? 32 : 128;
    int bits = ifc->prefixlen < 0 ? 0 : (ifc->prefixlen > maxbits ? maxbits : ifc->prefixlen);
    int full = bits / 8, rest = bits % 8;
    if (memcmp(a, b, (size_t)full) != 0) return 0;
    if (rest) {
        unsigned char m = (unsigned char)(0xffu << (8 - rest));
        if ((a[full] & m) != (b[full] & m)) return 0;
    }
    return 1;
}

static void topo_addr_text(const struct sockaddr *a, socklen_t alen, char *buf, size_t len)
{
    unsigned char bytes[16];
    int fam;
    if (topo_addr_bytes(a, alen, bytes, &fam) != 0 ||
        !inet_ntop(fam, bytes, buf, (socklen_t)len))
        snprintf(buf, len, "(unknown address)");
}

void oobx__topo_if_format(const topo_if_t *ifc, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN];
    topo_addr_text((const struct sockaddr *)&ifc->addr, ifc->addrlen, host, sizeof(host));
    if (ifc->family == AF_INET6 && ifc->linklocal)
        snprintf(buf, len, "%s%%%s/%d", host, ifc->name, ifc->prefixlen);
    else
        snprintf(buf, len, "%s/%d", host, ifc->prefixlen);
}

/* "10.0.0.0/24": the network of ifc. */
static void topo_if_subnet(const topo_if_t *ifc, char *buf, size_t len)
{
    unsigned char b[16];
    int fam;
    if (topo_addr_bytes((const struct sockaddr *)&ifc->addr, ifc->addrlen, b, &fam) != 0) {
        snprintf(buf, len, "?");
        return;
    }
    int maxbits = fam == AF_INET ? 32 : 128;
    int bits = ifc->prefixlen < 0 ? 0 : (ifc->prefixlen > maxbits ? maxbits : ifc->prefixlen);
    for (int i = 0; i < maxbits / 8; i++) {
        int keep = bits - 8 * i;
        if (keep <= 0)
            b[i] = 0;
        else if (keep < 8)
            b[i] &= (unsigned char)(0xffu << (8 - keep));
    }
    char host[INET6_ADDRSTRLEN];
    if (!inet_ntop(fam, b, host, sizeof(host))) snprintf(host, sizeof(host), "?");
    snprintf(buf, len, "%s/%d", host, bits);
}

static const char *topo_family_name(int family)
{
    return family == AF_INET ? "IPv4" : family == AF_INET6 ? "IPv6" : "any family";
}

/* 0 real, 1 container/VM bridge, 2 loopback: the default preference. */
static int topo_if_class(const topo_if_t *ifc)
{
    if (ifc->loopback) return 2;
    return oobx__topo_if_is_virtual(ifc->name) ? 1 : 0;
}

int oobx__topo_pick_if_from(const topo_if_t *ifs, int n, const topo_request_t *req, topo_if_t *out,
                      char *why, size_t whylen)
{
    char scratch[8];
    if (!why || whylen == 0) {
        why = scratch;
        whylen = sizeof(scratch);
    }
    why[0] = '\0';
    if (!req || !out || n < 0 || (n > 0 && !ifs)) {
        snprintf(why, whylen, "interface choice: missing request, output or interface list");
        return OOBX_ERR_INVALID;
    }
    if (req->family != AF_UNSPEC && req->family != AF_INET && req->family != AF_INET6) {
        snprintf(why, whylen, "interface choice: address family %d is neither IPv4 nor IPv6", req->family);
        return OOBX_ERR_INVALID;
    }
    if (req->pci_target && req->pci_target[0]) {
        unsigned d, b, v, f;
        if (oobx__topo_pci_parse(req->pci_target, &d, &b, &v, &f) != 0) {
            snprintf(why, whylen, "OOBX_TOPO_PCI=%s is not a PCI bus id (want 0000:3b:00.0)", req->pci_target);
            return OOBX_ERR_INVALID;
        }
    }
    const char *spec = topo_spec_empty(req->ifname_spec) ? NULL : req->ifname_spec;
    /* an include list names what the user wants: its matches are taken in the system's order */
    int named = spec && spec[strspn(spec, " \t")] != '^';

    if (n == 0) {
        snprintf(why, whylen, "no network interface is up with an IPv4 or IPv6 address");
        return OOBX_ERR_UNAVAILABLE;
    }
    int *cand = malloc((size_t)n * sizeof(*cand));
    if (!cand) {
        snprintf(why, whylen, "interface choice: out of memory");
        return OOBX_ERR_NOMEM;
    }
    char rejected[768] = "";
    int ncand = 0;
    for (int i = 0; i < n; i++) {
        const topo_if_t *t = &ifs[i];
        char addr[INET6_ADDRSTRLEN + TOPO_NAME_MAX + 8];
        oobx__topo_if_format(t, addr, sizeof(addr));
        const char *reason = NULL;
        char rbuf[300];
        if (!t->up) {
            reason = "down";
        } else if (!oobx__topo_ifname_match(spec, t->name)) {
            snprintf(rbuf, sizeof(rbuf), "not selected by OOBX_SOCKET_IFNAME=%s", spec);
            reason = rbuf;
        } else if (req->family != AF_UNSPEC && t->family != req->family) {
            snprintf(rbuf, sizeof(rbuf), "%s, OOBX_SOCKET_FAMILY asks for %s", topo_family_name(t->family),
                     topo_family_name(req->family));
            reason = rbuf;
        } else if (t->family == AF_INET6 && t->linklocal && !req->allow_linklocal) {
            reason = "IPv6 link-local, allowed only with OOBX_SOCKET_LINKLOCAL=1";
        }
        if (reason)
            oobx__appendf(rejected, sizeof(rejected), "%s%s %s (%s)", rejected[0] ? "; " : "", t->name, addr,
                         reason);
        else
            cand[ncand++] = i;
    }
    if (ncand == 0) {
        snprintf(why, whylen, "no usable interface: %s", rejected);
        free(cand);
        return OOBX_ERR_UNAVAILABLE;
    }

    /* the root's subnet wins */
    char root[INET6_ADDRSTRLEN] = "";
    int subnet = 0;
    if (req->match) {
        topo_addr_text(req->match, req->matchlen, root, sizeof(root));
        int k = 0;
        for (int j = 0; j < ncand; j++)
            if (oobx__topo_if_holds(&ifs[cand[j]], req->match, req->matchlen)) cand[k++] = cand[j];
        if (k > 0) {
            ncand = k;
            subnet = 1;
        }
    }

    /* real interfaces, then container/VM bridges, then loopback (unless named by the user) */
    int best_class = 0;
    if (!named) {
        best_class = 2;
        for (int j = 0; j < ncand; j++) {
            int c = topo_if_class(&ifs[cand[j]]);
            if (c < best_class) best_class = c;
        }
        int k = 0;
        for (int j = 0; j < ncand; j++)
            if (topo_if_class(&ifs[cand[j]]) == best_class) cand[k++] = cand[j];
        ncand = k;
    }

    int pick = cand[0];
    int distinct = 0; /* how many interface names are left (one may have several addresses) */
    for (int j = 0; j < ncand; j++) {
        int seen = 0;
        for (int m = 0; m < j && !seen; m++) seen = strcmp(ifs[cand[m]].name, ifs[cand[j]].name) == 0;
        if (!seen) distinct++;
    }
    char hwloc_note[320] = "";
    int closeness = -1, tied = 0;
    if (!spec && best_class == 0 && distinct > 1) {
        const char **names = malloc((size_t)ncand * sizeof(*names));
        int *close = malloc((size_t)ncand * sizeof(*close));
        if (names && close) {
            for (int j = 0; j < ncand; j++) names[j] = ifs[cand[j]].name;
            char rwhy[256] = "";
            int rc = oobx__topo_rank_names(req, names, ncand, close, rwhy, sizeof(rwhy));
            if (rc == OOBX_SUCCESS) {
                int bj = 0;
                for (int j = 1; j < ncand; j++)
                    if (close[j] < close[bj]) bj = j;
                pick = cand[bj];
                closeness = close[bj];
                for (int j = 0; j < ncand; j++) /* other names as close: a tie kept in order */
                    if (close[j] == closeness && strcmp(ifs[cand[j]].name, ifs[pick].name) != 0) tied++;
                oobx__appendf(hwloc_note, sizeof(hwloc_note), "%s", rwhy);
            } else if (rc == OOBX_ERR_INVALID) {
                snprintf(why, whylen, "%s", rwhy);
                free(names);
                free(close);
                free(cand);
                return rc;
            } else {
                snprintf(hwloc_note, sizeof(hwloc_note), "%s; kept the system's order", rwhy);
            }
        } else {
            snprintf(hwloc_note, sizeof(hwloc_note), "out of memory for hwloc ranking; kept the system's order");
        }
        free(names);
        free(close);
    }

    const topo_if_t *p = &ifs[pick];
    char addr[INET6_ADDRSTRLEN + TOPO_NAME_MAX + 8];
    oobx__topo_if_format(p, addr, sizeof(addr));
    if (subnet) {
        char net[INET6_ADDRSTRLEN + 8];
        topo_if_subnet(p, net, sizeof(net));
        snprintf(why, whylen, "%s %s: subnet %s holds the root %s", p->name, addr, net, root);
    } else {
        snprintf(why, whylen, "%s %s: ", p->name, addr);
        if (req->match)
            oobx__appendf(why, whylen, "no interface's subnet holds the root %s, so ", root);
        if (named) {
            oobx__appendf(why, whylen, "first interface selected by OOBX_SOCKET_IFNAME=%s", spec);
        } else if (closeness >= 0) {
            if (tied)
                oobx__appendf(why, whylen, "first of the interfaces closest (%s) by hwloc, %d of %d",
                             oobx__topo_closeness_name(closeness), tied + 1, distinct);
            else
                oobx__appendf(why, whylen, "closest (%s) of %d interfaces by hwloc", oobx__topo_closeness_name(closeness),
                             distinct);
            if (hwloc_note[0]) oobx__appendf(why, whylen, " (%s)", hwloc_note);
        } else {
            const char *what = best_class == 2 ? "loopback, the only kind left"
                             : best_class == 1 ? "container/VM bridge, no other interface left"
                             : distinct > 1 ? "first of the real interfaces"
                                            : "the only real interface";
            oobx__appendf(why, whylen, "%s", what);
            if (spec) oobx__appendf(why, whylen, " selected by OOBX_SOCKET_IFNAME=%s", spec);
            if (hwloc_note[0]) oobx__appendf(why, whylen, " (%s)", hwloc_note);
        }
    }
    *out = *p;
    free(cand);
    return OOBX_SUCCESS;
}

int oobx__topo_pick_if(const topo_request_t *req, topo_if_t *out, char *why, size_t whylen)
{
    topo_if_t *ifs = NULL;
    int n = 0;
    int rc = oobx__topo_if_list(&ifs, &n);
    if (rc != OOBX_SUCCESS) {
        int err = errno;
        if (why && whylen)
            snprintf(why, whylen, "cannot list network interfaces: %s",
                     rc == OOBX_ERR_SYSTEM ? strerror(err) : "out of memory");
        return rc;
    }
    rc = oobx__topo_pick_if_from(ifs, n, req, out, why, whylen);
    free(ifs);
    return rc;
}
