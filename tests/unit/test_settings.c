/* Unit tests of the settings table and its parser (src/settings.c), and of
 * the small helpers (src/util.c, the rate limiter of src/log.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <cmocka.h>

#include "log.h"
#include "settings.h"
#include "tp_table.h"
#include "util.h"

static void clear_env(void)
{
    for (const oobx_setting_desc_t *d = oobx__settings_table; d->name; d++) unsetenv(d->name);
}

static int setup(void **state)
{
    (void)state;
    clear_env();
    return 0;
}

static void test_table(void **state)
{
    (void)state;
    int n = 0;
    for (const oobx_setting_desc_t *d = oobx__settings_table; d->name; d++, n++) {
        if (strncmp(d->name, "OOBX_", 5) != 0) fail_msg("setting %s does not start with OOBX_", d->name);
        if (!d->def) fail_msg("%s has no default text", d->name);
        if (!d->doc || strlen(d->doc) < 10) fail_msg("%s has no doc line", d->name);
        for (const oobx_setting_desc_t *e = d + 1; e->name; e++)
            if (!strcmp(d->name, e->name)) fail_msg("%s is in the table twice", d->name);
    }
    assert_true(n >= 15);
}

static void test_defaults(void **state)
{
    (void)state;
    oobx_settings_t s;
    assert_int_equal(oobx__settings_load(&s, NULL), 0);
    assert_string_equal(s.transport, "auto");
    assert_int_equal(s.timeout_ms, 120000);
    assert_int_equal(s.stagger_rate, 7000);
    assert_int_equal(s.stagger_threshold, 256);
    assert_string_equal(s.allgather_algo, "auto");
    assert_int_equal(s.log_level, OOBX_LOG_WARN);
    assert_int_equal(s.socket_family, AF_UNSPEC);
}

static void test_env(void **state)
{
    (void)state;
    oobx_settings_t s;
    setenv("OOBX_TIMEOUT_MS", "500", 1);
    setenv("OOBX_CHUNK_BYTES", "64k", 1);
    setenv("OOBX_RING_SLOT_BYTES", "1MiB", 1);
    setenv("OOBX_LOG_LEVEL", "DEBUG", 1);
    setenv("OOBX_SOCKET_FAMILY", "6", 1);
    setenv("OOBX_ALLGATHER_ALGO", "bruck", 1);
    setenv("OOBX_NODE_EXCHANGE", "ring", 1);
    setenv("OOBX_SOCKET_IFNAME", "^docker,lo", 1);
    assert_int_equal(oobx__settings_load(&s, NULL), 0);
    assert_int_equal(s.timeout_ms, 500);
    assert_int_equal(s.chunk_bytes, 65536);
    assert_int_equal(s.ring_slot_bytes, 1 << 20);
    assert_int_equal(s.log_level, OOBX_LOG_DEBUG);
    assert_int_equal(s.socket_family, AF_INET6);
    assert_string_equal(s.allgather_algo, "bruck");
    assert_string_equal(s.node_exchange, "ring");
    assert_string_equal(s.socket_ifname, "^docker,lo");
    /* parsed again each time: nothing is cached */
    setenv("OOBX_TIMEOUT_MS", "777", 1);
    assert_int_equal(oobx__settings_load(&s, NULL), 0);
    assert_int_equal(s.timeout_ms, 777);
    unsetenv("OOBX_TIMEOUT_MS");
    assert_int_equal(oobx__settings_load(&s, NULL), 0);
    assert_int_equal(s.timeout_ms, 120000);
    clear_env();
}

static void test_config_overrides_env(void **state)
{
    (void)state;
    oobx_settings_t s;
    setenv("OOBX_TIMEOUT_MS", "500", 1);
    setenv("OOBX_TRANSPORT", "ucx", 1);
    oobx_config_t cfg = OOBX_CONFIG_INIT;
    cfg.timeout_ms = 700;
    cfg.transport = "socket";
    assert_int_equal(oobx__settings_load(&s, &cfg), 0);
    assert_int_equal(s.timeout_ms, 700);
    assert_string_equal(s.transport, "socket");
    cfg.timeout_ms = -5;
    assert_int_equal(oobx__settings_load(&s, &cfg), 0);
    assert_int_equal(s.timeout_ms, -1);
    cfg.timeout_ms = 0; /* 0: the environment's */
    assert_int_equal(oobx__settings_load(&s, &cfg), 0);
    assert_int_equal(s.timeout_ms, 500);
    cfg.struct_size = 4; /* not made with OOBX_CONFIG_INIT */
    assert_int_equal(oobx__settings_load(&s, &cfg), OOBX_ERR_INVALID);
    cfg = (oobx_config_t)OOBX_CONFIG_INIT;
    cfg.transport = "carrier-pigeon";
    assert_int_equal(oobx__settings_load(&s, &cfg), OOBX_ERR_INVALID);
    clear_env();
}

/* A malformed value is OOBX_ERR_INVALID, and the message names the variable. */
static void test_malformed(void **state)
{
    (void)state;
    char longname[400];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    const char *bad[][2] = {
        {"OOBX_TIMEOUT_MS", "abc"},        {"OOBX_TIMEOUT_MS", "99999999999"}, {"OOBX_TIMEOUT_MS", "10s"},
        {"OOBX_CHUNK_BYTES", "-1"},        {"OOBX_CHUNK_BYTES", "12q"},        {"OOBX_CHUNK_BYTES", "99999999999999999999"},
        {"OOBX_SOCKET_LINKLOCAL", "2"},    {"OOBX_LOG_LEVEL", "loud"},         {"OOBX_SOCKET_FAMILY", "AF_UNIX"},
        {"OOBX_UID_STAGGER_RATE", "fast"}, {"OOBX_ALLGATHER_ALGO", "bogus"},   {"OOBX_TRANSPORT", "carrier-pigeon"},
        {"OOBX_SOCKET_IFNAME", longname},  {"OOBX_RING_SLOTS", ""},         {"OOBX_NODE_EXCHANGE", "tree"},
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        clear_env();
        setenv(bad[i][0], bad[i][1], 1);
        oobx_settings_t s;
        int rc = oobx__settings_load(&s, NULL);
        if (rc != OOBX_ERR_INVALID) {
            print_error("%s=\"%.40s\": got %d, want OOBX_ERR_INVALID\n", bad[i][0], bad[i][1], rc);
            failures++;
        } else if (!strstr(oobx_last_error(), bad[i][0])) {
            print_error("%s=\"%.40s\": the message does not name the variable: \"%s\"\n", bad[i][0], bad[i][1],
                        oobx_last_error());
            failures++;
        }
    }
    clear_env();
    if (failures) fail_msg("%d malformed settings not reported as they should be (listed above)", failures);
}

static void test_deadlines(void **state)
{
    (void)state;
    assert_true(oobx__deadline(-1) == UINT64_MAX);
    assert_int_equal(oobx__ms_left(UINT64_MAX, -1), -1);
    assert_int_equal(oobx__ms_left(UINT64_MAX, 50), 50);
    uint64_t d = oobx__deadline(1000);
    int left = oobx__ms_left(d, -1);
    assert_true(left > 900 && left <= 1000);
    assert_int_equal(oobx__ms_left(d, 10), 10);
    assert_int_equal(oobx__ms_left(oobx__now_ns() - 1, -1), 0);
    assert_int_equal(oobx__ms_left(oobx__deadline(0), -1), 0);
    uint64_t a = oobx__now_ns(), b = oobx__now_ns();
    assert_true(b >= a);
}

static void test_hash_random(void **state)
{
    (void)state;
    assert_true(oobx__hash64("abc", 3, 1) == oobx__hash64("abc", 3, 1));
    assert_true(oobx__hash64("abc", 3, 1) != oobx__hash64("abc", 3, 2));
    assert_true(oobx__hash64("abc", 3, 1) != oobx__hash64("abd", 3, 1));
    assert_true(oobx__mix64(1, 2) != oobx__mix64(2, 1));
    uint64_t r1 = oobx__random64(), r2 = oobx__random64();
    assert_true(r1 != r2);
}

static void test_ratelimit(void **state)
{
    (void)state;
    oobx_ratelimit_t rl;
    memset(&rl, 0, sizeof rl);
    int ok = 0;
    for (int i = 0; i < 100; i++) ok += oobx__ratelimit_ok(&rl);
    assert_int_equal(ok, 5);
    assert_int_equal(rl.suppressed, 95);
}

/* OOBX_TRANSPORT=auto takes the socket first only for a whole job on one
 * host, as its launcher says, whatever its CPU count. */
static void test_auto_socket_first(void **state)
{
    (void)state;
    assert_true(oobx__tp_auto_socket_first(64, 64));
    assert_true(oobx__tp_auto_socket_first(17, 17));
    assert_true(oobx__tp_auto_socket_first(16, 16)); /* a core per rank too: UCX's set-up costs more than it gives */
    assert_true(oobx__tp_auto_socket_first(2, 2));
    assert_false(oobx__tp_auto_socket_first(64, 32)); /* two hosts: UCX for the network between them */
    assert_false(oobx__tp_auto_socket_first(64, 63));
    assert_false(oobx__tp_auto_socket_first(64, -1)); /* no launcher word */
    assert_false(oobx__tp_auto_socket_first(64, 0));
    assert_true(oobx__tp_auto_socket_first(1, 1)); /* one rank: no messages, no set-up wanted */
    assert_false(oobx__tp_auto_socket_first(0, 0));
}

static void put_file(const char *dir, const char *rel, const char *text)
{
    char path[512], cmd[700];
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
    assert_int_equal(system(cmd), 0);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The RDMA rule: a device counts when one of its ports is ACTIVE (4) or
 * ACTIVE_DEFER (5); without one, a job over several hosts takes the socket
 * first, and the reason names the directory. */
static void test_auto_rdma_rule(void **state)
{
    (void)state;
    char dir[] = "/tmp/oobx-rdma-XXXXXX", names[64], why[400];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(oobx__tp_rdma_active(dir, names, sizeof(names)), 0); /* empty */
    assert_string_equal(names, "");
    assert_int_equal(oobx__tp_rdma_active("/nonexistent/oobx", names, sizeof(names)), 0);
    put_file(dir, "mlx5_0/ports/1/state", "1: DOWN\n");
    put_file(dir, "mlx5_0/ports/2/state", "2: INIT\n");
    put_file(dir, "noports/node_type", "1: CA\n"); /* no ports directory */
    put_file(dir, "garbage/ports/1/state", "ACTIVE but no number\n");
    assert_int_equal(oobx__tp_rdma_active(dir, names, sizeof(names)), 0);
    assert_int_equal(oobx__tp_auto_socket_rule(64, 32, dir, why, sizeof(why)), 1);
    assert_non_null(strstr(why, "no RDMA device with an active port in "));
    assert_non_null(strstr(why, dir));
    assert_int_equal(oobx__tp_auto_socket_rule(64, -1, dir, why, sizeof(why)), 1); /* no launcher word: the same */
    put_file(dir, "rxe0/ports/1/state", "4: ACTIVE\n");
    assert_int_equal(oobx__tp_rdma_active(dir, names, sizeof(names)), 1);
    assert_string_equal(names, "rxe0");
    put_file(dir, "mlx5_0/ports/2/state", "5: ACTIVE_DEFER\n");
    assert_int_equal(oobx__tp_rdma_active(dir, names, sizeof(names)), 2);
    assert_non_null(strstr(names, "mlx5_0"));
    assert_non_null(strstr(names, "rxe0"));
    assert_int_equal(oobx__tp_rdma_active(dir, names, 4), 2); /* names cut short, the count whole */
    assert_true(strlen(names) < 4);
    assert_int_equal(oobx__tp_auto_socket_rule(64, 32, dir, why, sizeof(why)), 0); /* two hosts, RDMA: the order */
    assert_int_equal(oobx__tp_auto_socket_rule(64, -1, dir, why, sizeof(why)), 0);
    assert_int_equal(oobx__tp_auto_socket_rule(64, 64, dir, why, sizeof(why)), 1); /* one host wins */
    assert_string_equal(why, "the launcher puts all 64 ranks on this host");
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_table, setup),
        cmocka_unit_test_setup(test_defaults, setup),
        cmocka_unit_test_setup(test_env, setup),
        cmocka_unit_test_setup(test_config_overrides_env, setup),
        cmocka_unit_test_setup(test_malformed, setup),
        cmocka_unit_test(test_deadlines),
        cmocka_unit_test(test_hash_random),
        cmocka_unit_test(test_ratelimit),
        cmocka_unit_test(test_auto_socket_first),
        cmocka_unit_test(test_auto_rdma_rule),
    };
    return cmocka_run_group_tests_name("settings", tests, NULL, NULL);
}
