/* Unit tests of listening on any port (src/sock.c): the listener picks
 * random ports of the ephemeral range itself before the kernel searches, and
 * must honour what the kernel honours. The tests run in a network namespace
 * of their own (root only), where they narrow the range and reserve ports. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "oobx.h"
#include "sock.h"

#define LO 40000
#define HI 40127 /* 128 ports */
#define MAXL 256

static int in_own_netns;

static void write_sysctl(const char *path, const char *val)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, val, strlen(val)), (ssize_t)strlen(val));
    close(fd);
}

static int reserved(int p, const int (*res)[2], int nres)
{
    for (int i = 0; i < nres; i++)
        if (p >= res[i][0] && p <= res[i][1]) return 1;
    return 0;
}

/* Opens listeners on 127.0.0.1, port 0, until one fails; returns how many,
 * with their ports, and the last failure's code and text. */
static int fill(int *fds, int *ports, int *rc_out, char *why, size_t whylen)
{
    int n = 0;
    for (; n < MAXL; n++) {
        oobx_sockaddr_t a;
        memset(&a, 0, sizeof(a));
        a.sin.sin_family = AF_INET;
        a.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int rc = oobx__sock_listen(&a, 16, &fds[n], why, whylen);
        if (rc != 0) {
            *rc_out = rc;
            break;
        }
        ports[n] = ntohs(a.sin.sin_port);
    }
    return n;
}

/* Every port of the range that is not reserved is handed out once, none that
 * is reserved, and then a clear error; the first ones are odd (the kernel's
 * bind() parity, leaving even ports to its connect()). */
static void check_range(const char *res_text, const int (*res)[2], int nres)
{
    if (!in_own_netns) skip();
    char range[32];
    snprintf(range, sizeof(range), "%d %d", LO, HI);
    write_sysctl("/proc/sys/net/ipv4/ip_local_port_range", range);
    write_sysctl("/proc/sys/net/ipv4/ip_local_reserved_ports", res_text);
    int fds[MAXL], ports[MAXL], rc = 0, free_ports = 0;
    char why[256] = "";
    for (int p = LO; p <= HI; p++) free_ports += !reserved(p, res, nres);
    int n = fill(fds, ports, &rc, why, sizeof(why));
    assert_int_equal(n, free_ports);
    assert_int_equal(rc, OOBX_ERR_UNAVAILABLE);
    assert_non_null(strstr(why, "127.0.0.1:0"));
    assert_non_null(strstr(why, "Address already in use"));
    unsigned char seen[HI - LO + 1] = {0};
    for (int i = 0; i < n; i++) {
        assert_in_range(ports[i], LO, HI);
        assert_false(reserved(ports[i], res, nres));
        assert_int_equal(seen[ports[i] - LO]++, 0);
        if (i < 8) assert_int_equal(ports[i] & 1, 1);
    }
    for (int i = 0; i < n; i++) close(fds[i]);
}

static void test_whole_range_used(void **state)
{
    (void)state;
    check_range("", NULL, 0);
}

static void test_reserved_ports_skipped(void **state)
{
    (void)state;
    /* a quarter of the odd ports and a few even ones, as ranges and singles */
    static const int res[][2] = {{40001, 40031}, {40041, 40041}, {40100, 40110}};
    check_range("40001-40031,40041,40100-40110", res, 3);
}

/* With every odd port taken by another listener, the random tries all fail
 * and the kernel's search hands out even ones. (Not all of them: with
 * SO_REUSEADDR the kernel gives up before its range is full.) */
static void test_kernel_search_fallback(void **state)
{
    (void)state;
    if (!in_own_netns) skip();
    write_sysctl("/proc/sys/net/ipv4/ip_local_port_range", "40000 40127");
    write_sysctl("/proc/sys/net/ipv4/ip_local_reserved_ports", "");
    int taken[72], nt = 0;
    for (int p = LO | 1; p <= HI; p += 2) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(listen(fd, 1), 0);
        taken[nt++] = fd;
    }
    for (int i = 0; i < 8; i++) {
        oobx_sockaddr_t a;
        memset(&a, 0, sizeof(a));
        a.sin.sin_family = AF_INET;
        a.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        char why[256] = "";
        int fd = -1;
        assert_int_equal(oobx__sock_listen(&a, 16, &fd, why, sizeof(why)), 0);
        int p = ntohs(a.sin.sin_port);
        assert_in_range(p, LO, HI);
        assert_int_equal(p & 1, 0);
        taken[nt++] = fd;
    }
    for (int i = 0; i < nt; i++) close(taken[i]);
}

int main(void)
{
    /* a network namespace of its own, with its loopback up */
    if (unshare(CLONE_NEWNET) == 0) {
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct ifreq ifr;
        memset(&ifr, 0, sizeof(ifr));
        snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
        if (s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
            ifr.ifr_flags |= IFF_UP;
            in_own_netns = ioctl(s, SIOCSIFFLAGS, &ifr) == 0;
        }
        if (s >= 0) close(s);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_range_used),
        cmocka_unit_test(test_reserved_ports_skipped),
        cmocka_unit_test(test_kernel_search_fallback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
