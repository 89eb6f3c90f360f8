/* Pure helpers of topo/ (PCI bus ids, closeness names, reasons), linked into
 * the core library and into the hwloc module (liboobx-topo.so) alike. */
#include "topo.h"

#include <ctype.h>
#include <stdarg.h>

#include "oobx.h"

const char *oobx__topo_closeness_name(int closeness)
{
    switch (closeness) {
    case TOPO_CLOSE_SWITCH: return "switch";
    case TOPO_CLOSE_NUMA: return "numa";
    case TOPO_CLOSE_PACKAGE: return "package";
    case TOPO_CLOSE_ANY: return "any";
    default: return "unknown";
    }
}

/* hex digits of s[0..], at most maxdigits, into *v; returns digits read */
static int topo_hex(const char *s, int maxdigits, unsigned *v)
{
    int k = 0;
    unsigned x = 0;
    while (k < maxdigits && isxdigit((unsigned char)s[k])) {
        char ch = (char)tolower((unsigned char)s[k]);
        x = x * 16 + (unsigned)(isdigit((unsigned char)ch) ? ch - '0' : ch - 'a' + 10);
        k++;
    }
    *v = x;
    return k;
}

int oobx__topo_pci_parse(const char *s, unsigned *domain, unsigned *bus, unsigned *dev, unsigned *func)
{
    if (!s) return OOBX_ERR_INVALID;
    while (*s == ' ') s++;
    unsigned part[4];
    int nparts = 0;
    const char *p = s;
    /* [domain:]bus:dev.func */
    for (;;) {
        int k = topo_hex(p, 8, &part[nparts]);
        if (k == 0) return OOBX_ERR_INVALID;
        p += k;
        nparts++;
        if (*p == ':' && nparts < 3) {
            p++;
            continue;
        }
        break;
    }
    if (nparts != 2 && nparts != 3) return OOBX_ERR_INVALID;
    if (*p != '.') return OOBX_ERR_INVALID;
    p++;
    unsigned fn;
    int k = topo_hex(p, 1, &fn);
    if (k != 1) return OOBX_ERR_INVALID;
    p += k;
    while (*p == ' ') p++;
    if (*p != '\0') return OOBX_ERR_INVALID;
    unsigned d = nparts == 3 ? part[0] : 0;
    unsigned b = part[nparts - 2], v = part[nparts - 1];
    if (d > 0xffff || b > 0xff || v > 0x1f || fn > 7) return OOBX_ERR_INVALID;
    *domain = d;
    *bus = b;
    *dev = v;
    *func = fn;
    return OOBX_SUCCESS;
}

void oobx__topo_why(char *why, size_t whylen, const char *fmt, ...)
{
    if (!why || whylen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
}
