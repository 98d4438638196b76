/* common/: status strings, flags with env fallbacks, metrics rendering. */
#include <check.h>

#include "check_run.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd_io.h"
#include "common/flags.h"
#include "common/grow.h"
#include "common/hash.h"
#include "common/id_set.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/names.h"
#include "common/private_files.h"
#include "common/process_metrics.h"
#include "common/shard_map.h"
#include "common/ticker.h"
#include "ps/map_watch.h"
#include "shadowsync/status.h"

START_TEST(test_strerror_covers_every_code) {
    for (int s = 0; s < SS_STATUS_COUNT_; s++) {
        ck_assert_ptr_nonnull(ss_strerror((ss_status)s));
        ck_assert_str_ne(ss_strerror((ss_status)s), "unknown status code");
        ck_assert_str_ne(ss_status_name((ss_status)s), "unknown");
    }
    ck_assert_str_eq(ss_strerror(SS_ERR_NON_FINITE), "payload contains NaN or Inf");
    ck_assert_str_eq(ss_strerror((ss_status)999), "unknown status code");
    ck_assert_str_eq(ss_status_name(SS_ERR_SIZE_MISMATCH), "size_mismatch");
}
END_TEST

START_TEST(test_ps_group_names) {
    ck_assert(ss__ps_group_name_valid("mlp.w-1_x"));
    ck_assert(ss__ps_group_name_valid("mlp[0:1024)"));
    ck_assert(ss__ps_group_name_valid("m[12:5)")); /* ranges are checked by size, not here */
    ck_assert(!ss__ps_group_name_valid(NULL));
    ck_assert(!ss__ps_group_name_valid(""));
    ck_assert(!ss__ps_group_name_valid("[0:1)"));
    ck_assert(!ss__ps_group_name_valid("m[0:1"));
    ck_assert(!ss__ps_group_name_valid("m[:1)"));
    ck_assert(!ss__ps_group_name_valid("m[0:)"));
    ck_assert(!ss__ps_group_name_valid("m[0:1))"));
    ck_assert(!ss__ps_group_name_valid("m\"[0:1)"));
    ck_assert(!ss__ps_group_name_valid("a/b"));
    size_t base;
    uint64_t lo, hi;
    ck_assert(ss__ps_chunk_range("mlp.w[262144:524288)", &base, &lo, &hi));
    ck_assert_uint_eq(base, 5);
    ck_assert_uint_eq(lo, 262144);
    ck_assert_uint_eq(hi, 524288);
    ck_assert(!ss__ps_chunk_range("mlp.w", &base, &lo, &hi));   /* no range */
    ck_assert(!ss__ps_chunk_range("m[0:1))", &base, &lo, &hi)); /* not a group name */
    char long_name[80];
    memset(long_name, 'a', 70);
    long_name[70] = '\0';
    ck_assert(!ss__ps_group_name_valid(long_name));
}
END_TEST

/* A trainer's series leave with its last holder; others stay. */
START_TEST(test_metrics_drop_departed) {
    ss__metrics *m;
    ck_assert_int_eq(ss__metrics_create(&m, NULL, 0), SS_OK);
    ss__counter *a, *b, *c;
    const char *la[] = {"trainer", "t1", "group", "g", NULL};
    const char *lb[] = {"group", "g", "trainer", "t1", NULL};
    const char *lc[] = {"trainer", "t10", NULL};
    ck_assert_int_eq(ss__metrics_counter(m, "x_total", "x", la, &a), SS_OK);
    ck_assert_int_eq(ss__metrics_counter(m, "y_total", "y", lb, &b), SS_OK);
    ck_assert_int_eq(ss__metrics_counter(m, "x_total", "x", lc, &c), SS_OK);
    ss__counter_add(c, 7);
    ck_assert_int_eq(ss__metrics_hold(m, "trainer", "t1"), SS_OK);
    ck_assert_int_eq(ss__metrics_hold(m, "trainer", "t1"), SS_OK); /* a second engine, same name */
    ss__metrics_drop(m, "trainer", "t1");
    char *text;
    size_t len;
    ck_assert_int_eq(ss__metrics_render(m, &text, &len), SS_OK);
    ck_assert_ptr_nonnull(strstr(text, "trainer=\"t1\""));
    free(text);
    ss__metrics_drop(m, "trainer", "t1");
    ck_assert_int_eq(ss__metrics_render(m, &text, &len), SS_OK);
    ck_assert_ptr_null(strstr(text, "trainer=\"t1\""));
    ck_assert_ptr_nonnull(strstr(text, "x_total{trainer=\"t10\"} 7"));
    free(text);
    ss__metrics_drop(m, "trainer", "nobody"); /* no hold: nothing happens */
    ss__metrics_destroy(m);
}
END_TEST

START_TEST(test_log_level_parse) {
    ss__log_level l;
    ck_assert_int_eq(ss__log_level_parse("warn", &l), SS_OK);
    ck_assert_int_eq(l, SS_LOG_WARN);
    ck_assert_int_eq(ss__log_level_parse("loud", &l), SS_ERR_INVALID_ARGUMENT);
}
END_TEST

typedef struct parsed {
    int64_t k;
    double alpha;
    const char *mode;
    bool verbose;
} parsed;

static ss_status parse(parsed *p, int argc, char **argv, bool *help, char *err) {
    ss__flag flags[] = {
        {"sync-every", SS_FLAG_INT, &p->k, "K", NULL, 1, 100},
        {"alpha", SS_FLAG_DOUBLE, &p->alpha, "rate", NULL, 0, 1},
        {"mode", SS_FLAG_STRING, &p->mode, "mode", "none|shadow", 0, 0},
        {"verbose", SS_FLAG_BOOL, &p->verbose, "talk", NULL, 0, 0},
    };
    return ss__flags_parse(flags, 4, argc, argv, help, err, 256);
}

START_TEST(test_flags_precedence_and_forms) {
    parsed p = {.k = 10, .alpha = 0.5, .mode = "none"};
    bool help;
    char err[256];
    unsetenv("SHADOWSYNC_SYNC_EVERY");
    setenv("SHADOWSYNC_ALPHA", "0.25", 1);
    char *argv[] = {"prog", "--sync-every", "7", "--mode=shadow", "--verbose", NULL};
    ck_assert_int_eq(parse(&p, 5, argv, &help, err), SS_OK);
    ck_assert(!help);
    ck_assert_int_eq(p.k, 7);
    ck_assert_double_eq(p.alpha, 0.25); /* from the environment */
    ck_assert_str_eq(p.mode, "shadow");
    ck_assert(p.verbose);
    /* The command line beats the environment. */
    char *argv2[] = {"prog", "--alpha", "0.75", NULL};
    ck_assert_int_eq(parse(&p, 3, argv2, &help, err), SS_OK);
    ck_assert_double_eq(p.alpha, 0.75);
    unsetenv("SHADOWSYNC_ALPHA");
    char env[64];
    ss__flags_env_name("round-deadline-ms", env, sizeof env);
    ck_assert_str_eq(env, "SHADOWSYNC_ROUND_DEADLINE_MS");
}
END_TEST

START_TEST(test_flags_bad_input) {
    parsed p = {.k = 10, .alpha = 0.5, .mode = "none"};
    bool help;
    char err[256];
    char *bad_int[] = {"prog", "--sync-every", "7x", NULL};
    ck_assert_int_eq(parse(&p, 3, bad_int, &help, err), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err, "not an integer"));
    ck_assert_int_eq(p.k, 10); /* unchanged */
    char *range[] = {"prog", "--sync-every=0", NULL};
    ck_assert_int_eq(parse(&p, 2, range, &help, err), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err, "outside"));
    char *choice[] = {"prog", "--mode", "sometimes", NULL};
    ck_assert_int_eq(parse(&p, 3, choice, &help, err), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err, "none|shadow"));
    char *unknown[] = {"prog", "--nope", NULL};
    ck_assert_int_eq(parse(&p, 2, unknown, &help, err), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err, "unknown flag"));
    char *missing[] = {"prog", "--alpha", NULL};
    ck_assert_int_eq(parse(&p, 2, missing, &help, err), SS_ERR_INVALID_ARGUMENT);
    char *nan[] = {"prog", "--alpha", "nan", NULL};
    ck_assert_int_eq(parse(&p, 3, nan, &help, err), SS_ERR_INVALID_ARGUMENT);
    char *positional[] = {"prog", "file.tsv", NULL};
    ck_assert_int_eq(parse(&p, 2, positional, &help, err), SS_ERR_INVALID_ARGUMENT);
    setenv("SHADOWSYNC_SYNC_EVERY", "many", 1);
    char *none[] = {"prog", NULL};
    ck_assert_int_eq(parse(&p, 1, none, &help, err), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(err, "SHADOWSYNC_SYNC_EVERY"));
    unsetenv("SHADOWSYNC_SYNC_EVERY");
    char *h[] = {"prog", "--bogus", "--help", NULL};
    ck_assert_int_eq(parse(&p, 3, h, &help, err), SS_OK);
    ck_assert(help);
}
END_TEST

/* Flags typed as the fields they set: a uint32_t and a float of a
 * program's config, with their own range and the type's. */
START_TEST(test_flags_typed_fields) {
    struct {
        uint32_t batch, guard;
        float lr;
    } cfg = {.batch = 32, .guard = 0xfeedu, .lr = 0.5f};
    const ss__flag flags[] = {
        {"batch", SS_FLAG_U32, &cfg.batch, "rows", NULL, 0, 0},
        {"small", SS_FLAG_U32, &cfg.guard, "bounded", NULL, 1, 100},
        {"lr", SS_FLAG_FLOAT, &cfg.lr, "rate", NULL, 0, 10},
    };
    bool help;
    char err[256];
    char *ok[] = {"prog", "--batch", "4294967295", "--lr", "0.25", NULL};
    ck_assert_int_eq(ss__flags_parse(flags, 3, 5, ok, &help, err, sizeof err), SS_OK);
    ck_assert_uint_eq(cfg.batch, 4294967295u);
    ck_assert_float_eq(cfg.lr, 0.25f);
    ck_assert_uint_eq(cfg.guard, 0xfeedu); /* no neighbour written */
    const char *const bad[][2] = {{"--batch", "4294967296"}, {"--batch", "-1"},
                                  {"--small", "101"},        {"--lr", "11"},
                                  {"--lr", "inf"},           {"--batch", "1.5"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *argv[] = {"prog", (char *)bad[i][0], (char *)bad[i][1], NULL};
        ck_assert_int_eq(ss__flags_parse(flags, 3, 3, argv, &help, err, sizeof err),
                         SS_ERR_INVALID_ARGUMENT);
        ck_assert_ptr_nonnull(strstr(err, bad[i][0] + 2));
    }
    ck_assert_uint_eq(cfg.batch, 4294967295u); /* the refused values left it */
    ck_assert_uint_eq(cfg.guard, 0xfeedu);
    ck_assert_float_eq(cfg.lr, 0.25f);
    FILE *out = tmpfile();
    ss__flags_print_help(out, "prog", "typed", flags, 3);
    rewind(out);
    char text[1024] = {0};
    ck_assert_uint_gt(fread(text, 1, sizeof text - 1, out), 0);
    fclose(out);
    ck_assert_ptr_nonnull(strstr(text, "default: 4294967295"));
    ck_assert_ptr_nonnull(strstr(text, "default: 0.25"));
}
END_TEST

START_TEST(test_metrics_render_exact) {
    ss__metrics *m;
    ck_assert_int_eq(ss__metrics_create(&m, NULL, 0), SS_OK);
    ss__counter *c, *c2;
    const char *labels[] = {"group", "dense \"a\"", NULL};
    ck_assert_int_eq(ss__metrics_counter(m, "shadowsync_sync_rounds_total", "Rounds.", labels, &c),
                     SS_OK);
    ck_assert_int_eq(ss__metrics_counter(m, "shadowsync_sync_rounds_total", "Rounds.", labels, &c2),
                     SS_OK);
    ck_assert_ptr_eq(c, c2); /* same series */
    ss__counter_add(c, 3);
    ss__counter_add(c2, 2);
    ss__gauge *g;
    ck_assert_int_eq(ss__metrics_gauge(m, "shadowsync_replica_divergence_ratio", "Div.", NULL, &g),
                     SS_OK);
    ss__gauge_set(g, 0.5);
    ss__gauge_add(g, 0.25);
    ss__histogram *h;
    const double bounds[] = {1, 10};
    ck_assert_int_eq(
        ss__metrics_histogram(m, "shadowsync_sync_gap_iterations", "Gap.", NULL, bounds, 2, &h),
        SS_OK);
    ss__histogram_observe(h, 0.5);
    ss__histogram_observe(h, 1.0); /* le="1" is inclusive */
    ss__histogram_observe(h, 7);
    ss__histogram_observe(h, 100);
    char *text;
    size_t len;
    ck_assert_int_eq(ss__metrics_render(m, &text, &len), SS_OK);
    const char *want = "# HELP shadowsync_sync_rounds_total Rounds.\n"
                       "# TYPE shadowsync_sync_rounds_total counter\n"
                       "shadowsync_sync_rounds_total{group=\"dense \\\"a\\\"\"} 5\n"
                       "# HELP shadowsync_replica_divergence_ratio Div.\n"
                       "# TYPE shadowsync_replica_divergence_ratio gauge\n"
                       "shadowsync_replica_divergence_ratio 0.75\n"
                       "# HELP shadowsync_sync_gap_iterations Gap.\n"
                       "# TYPE shadowsync_sync_gap_iterations histogram\n"
                       "shadowsync_sync_gap_iterations_bucket{le=\"1\"} 2\n"
                       "shadowsync_sync_gap_iterations_bucket{le=\"10\"} 3\n"
                       "shadowsync_sync_gap_iterations_bucket{le=\"+Inf\"} 4\n"
                       "shadowsync_sync_gap_iterations_sum 108.5\n"
                       "shadowsync_sync_gap_iterations_count 4\n";
    ck_assert_str_eq(text, want);
    ck_assert_uint_eq(len, strlen(want));
    free(text);
    ss__metrics_destroy(m);
}
END_TEST

START_TEST(test_metrics_bad_input) {
    ss__metrics *m;
    ck_assert_int_eq(ss__metrics_create(&m, NULL, 0), SS_OK);
    ss__counter *c;
    ss__gauge *g;
    ss__histogram *h;
    ck_assert_int_eq(ss__metrics_counter(m, "9starts_with_digit", "x", NULL, &c),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss__metrics_counter(m, "has-dash", "x", NULL, &c), SS_ERR_INVALID_ARGUMENT);
    const char *bad_label[] = {"bad-key", "v", NULL};
    ck_assert_int_eq(ss__metrics_counter(m, "ok_total", "x", bad_label, &c),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss__metrics_counter(m, "ok_total", "x", NULL, &c), SS_OK);
    /* Same name, other type: refused, the first one stays. */
    ck_assert_int_eq(ss__metrics_gauge(m, "ok_total", "x", NULL, &g), SS_ERR_EXISTS);
    const double unsorted[] = {2, 1};
    ck_assert_int_eq(ss__metrics_histogram(m, "h", "x", NULL, unsorted, 2, &h),
                     SS_ERR_INVALID_ARGUMENT);
    char *text;
    ck_assert_int_eq(ss__metrics_render(m, &text, NULL), SS_OK);
    ck_assert_str_eq(text, "# HELP ok_total x\n# TYPE ok_total counter\nok_total 0\n");
    free(text);
    ss__metrics_destroy(m);
}
END_TEST

/* Addresses as every flag takes them, and a log level nobody knows: each
 * refused, naming what is wrong (127.0.0.1:99999 listened on a random
 * port, 127.0.0.1 on 443, and "verbose" was ignored, before). */
START_TEST(test_addresses_and_log_levels_refused_with_why) {
    const char *good[] = {"127.0.0.1:0", "127.0.0.1:7070", "localhost:65535", "[::1]:80",
                          "ps-0.ps.svc:7070"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        ck_assert_msg(ss__address_valid(good[i], "--listen", NULL, 0), "%s refused", good[i]);
    const char *bad[][2] = {{"127.0.0.1:99999", "0-65535"},
                            {"127.0.0.1", "no port"},
                            {":7070", "no host"},
                            {"::1:80", "brackets"},
                            {"127.0.0.1:", "0-65535"},
                            {"127.0.0.1:80x", "0-65535"},
                            {"", "empty"},
                            {"a b:1", "space"},
                            {"127.0.0.1:-1", "0-65535"},
                            {"[::1:80", "brackets"}};
    char why[300];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_msg(!ss__address_valid(bad[i][0], "--listen", why, sizeof why), "%s passed",
                      bad[i][0]);
        ck_assert_msg(strstr(why, bad[i][1]) && strstr(why, "--listen"), "%s: %s", bad[i][0], why);
    }
    /* The host as written, brackets and all; the whole of a bare host. */
    ck_assert_uint_eq(ss__address_host_len("127.0.0.1:7070"), 9);
    ck_assert_uint_eq(ss__address_host_len("[::1]:80"), 5);
    ck_assert_uint_eq(ss__address_host_len("localhost"), 9);
    char host[8];
    unsigned port = 0;
    ck_assert(ss__address_split("[::1]:80", host, sizeof host, &port));
    ck_assert_str_eq(host, "::1");
    ck_assert_uint_eq(port, 80);
    static const ss__program prog = {"test-prog", "a test"};
    char *argv[] = {"test-prog", NULL};
    int64_t n = 1;
    const ss__flag flags[] = {{"n", SS_FLAG_INT, &n, "a number", NULL, 0, 0}};
    setenv("SHADOWSYNC_LOG_LEVEL", "debug", 1);
    ck_assert_int_eq(ss__flags_cli(&prog, flags, 1, 1, argv), -1);
    setenv("SHADOWSYNC_LOG_LEVEL", "verbose", 1);
    ck_assert_int_eq(ss__flags_cli(&prog, flags, 1, 1, argv), 2);
    unsetenv("SHADOWSYNC_LOG_LEVEL");
}
END_TEST

/* A log line in each format: text as it always was; json one object
 * with every key=value a member (quotes and backslashes of a quoted
 * value undone, then escaped for JSON), and text that is not key=value
 * whole in "msg"; --log-format refuses what it does not know. */
START_TEST(test_log_lines_as_text_and_json) {
    char out[512];
    const char *msg = "event=agent_unreachable socket=/tmp/a b=\"say \\\"hi\\\"\\\\\" n=3";
    size_t n = ss__log_render(SS_LOG_TEXT, "T", SS_LOG_WARN, "hooks", msg, out, sizeof out);
    ck_assert_str_eq(out,
                     "T warn hooks event=agent_unreachable socket=/tmp/a b=\"say \\\"hi\\\"\\\\\" "
                     "n=3\n");
    ck_assert_uint_eq(n, strlen(out));
    ss__log_render(SS_LOG_JSON, "T", SS_LOG_WARN, "hooks", msg, out, sizeof out);
    ck_assert_str_eq(out,
                     "{\"ts\":\"T\",\"level\":\"warn\",\"component\":\"hooks\",\"event\":"
                     "\"agent_unreachable\",\"socket\":\"/tmp/a\",\"b\":\"say \\\"hi\\\"\\\\\","
                     "\"n\":\"3\"}\n");
    ss__log_render(SS_LOG_JSON, "T", SS_LOG_ERROR, NULL, "plain words\there", out, sizeof out);
    ck_assert_str_eq(out, "{\"ts\":\"T\",\"level\":\"error\",\"component\":\"-\",\"msg\":"
                          "\"plain words\\u0009here\"}\n");
    ss__log_render(SS_LOG_JSON, "T", SS_LOG_INFO, "c", "a=\"unterminated", out, sizeof out);
    ck_assert_str_eq(out, "{\"ts\":\"T\",\"level\":\"info\",\"component\":\"c\",\"msg\":"
                          "\"a=\\\"unterminated\"}\n");
    char small[16];
    n = ss__log_render(SS_LOG_JSON, "T", SS_LOG_INFO, "c", "a=b", small, sizeof small);
    ck_assert_uint_eq(n, strlen(small));
    ck_assert_int_eq(small[n - 1], '\n');
    static const ss__program prog = {"test-prog", "a test"};
    char *good[] = {"test-prog", "--log-format", "json", NULL};
    char *bad[] = {"test-prog", "--log-format", "xml", NULL};
    int64_t k = 1;
    const ss__flag flags[] = {{"k", SS_FLAG_INT, &k, "a number", NULL, 0, 0}};
    ck_assert_int_eq(ss__flags_cli(&prog, flags, 1, 3, good), -1);
    ck_assert_int_eq(ss__flags_cli(&prog, flags, 1, 3, bad), 2);
    ss__log_set_format(SS_LOG_TEXT);
}
END_TEST

/* The shard map file: epoch and ps in any order, comments and blank lines
 * skipped; each bad file refused naming its line and what is wrong. */
START_TEST(test_shard_map_file) {
    char path[] = "/tmp/ss-map-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    const char *cases[][2] = {
        {"# fleet\n\nps a:1,[::1]:2\nepoch 7\nfrom a:1\n", NULL},
        {"epoch 7\n", "no \"ps\" line"},
        {"ps a:1\n", "no \"epoch\" line"},
        {"epoch 0\nps a:1\n", "line 1: epoch \"0\": a whole number from 1 to 2^53"},
        {"epoch 9007199254740993\nps a:1\n", "epoch \"9007199254740993\": a whole number from 1"},
        {"epoch 18446744073709551615\nps a:1\n", "a whole number from 1 to 2^53"},
        {"epoch 2\nps a:1,b\n", "line 2: ps \"b\": no port"},
        {"epoch 2\nepoch 3\nps a:1\n", "line 2: \"epoch\" given twice"},
        {"epoch 2\nps\n", "line 2: \"ps\" is not \"epoch N\""},
        {"epoch 2\nps a:1\nfrom a:1\nfrom b:2\n", "line 4: \"from\" given twice"},
        {"epoch 2\nps a:1\nfrom a\n", "line 3: from \"a\": no port"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        FILE *f = fopen(path, "w");
        fputs(cases[i][0], f);
        fclose(f);
        ss__shard_map m;
        char why[400] = "";
        ss_status st = ss__shard_map_read(path, &m, why, sizeof why);
        if (!cases[i][1]) {
            ck_assert_int_eq(st, SS_OK);
            ck_assert_uint_eq(m.epoch, 7);
            ck_assert_str_eq(m.ps, "a:1,[::1]:2");
            ck_assert_str_eq(m.from, "a:1");
            ck_assert_int_eq(ss__shard_map_index(m.ps, "[::1]:2"), 1);
            ck_assert_int_eq(ss__shard_map_index(m.ps, "a:1"), 0);
            ck_assert_int_eq(ss__shard_map_index(m.ps, "a:2"), -1);
        } else {
            ck_assert_int_eq(st, SS_ERR_INVALID_ARGUMENT);
            ck_assert_msg(strstr(why, cases[i][1]) && strstr(why, path), "%s: %s", cases[i][0],
                          why);
        }
    }
    unlink(path);
    ss__shard_map m;
    char why[400];
    ck_assert_int_eq(ss__shard_map_read(path, &m, why, sizeof why), SS_ERR_NOT_FOUND);
    /* The epoch a call carries: digits, >= 1, in 64 bits; nothing else. */
    uint64_t e = 0;
    ck_assert(ss__shard_map_epoch_parse("18446744073709551615", 20, &e));
    ck_assert_uint_eq(e, UINT64_MAX);
    const char *bad[] = {"", "0", "-1", "7x", " 7", "18446744073709551616", "+7"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!ss__shard_map_epoch_parse(bad[i], strlen(bad[i]), &e), "%s", bad[i]);
}
END_TEST

/* A shard map file another user could have written is refused, saying
 * why: writable by others, another uid's, a link (other than a Kubernetes
 * volume's layout, which is read), in a directory others can write; and
 * a map's epoch moves up by at most 2^32 at a time. */
START_TEST(test_shard_map_file_owner_and_links) {
    char dir[64], path[128], why[400];
    ss__check_tmpdir(dir, "ss-mapown");
    snprintf(path, sizeof path, "%s/fleet.map", dir);
    ss__check_write_map(path, 3, "a:1", NULL);
    ss__shard_map m;
    ck_assert_int_eq(ss__shard_map_read(path, &m, why, sizeof why), SS_OK);
    ck_assert_int_eq(chmod(path, 0666), 0);
    ck_assert_int_eq(ss__shard_map_read(path, &m, why, sizeof why), SS_ERR_PERMISSION);
    ck_assert_msg(strstr(why, "writable by others") && strstr(why, path), "%s", why);
    ck_assert_int_eq(chmod(path, 0644), 0);
    if (geteuid() == 0) { /* another user's file */
        ck_assert_int_eq(chown(path, 65534, 65534), 0);
        ck_assert_int_eq(ss__shard_map_read(path, &m, why, sizeof why), SS_ERR_PERMISSION);
        ck_assert_msg(strstr(why, "belongs to another user"), "%s", why);
        ck_assert_int_eq(chown(path, 0, 0), 0);
    }
    /* A link to it: refused; the same through Kubernetes' layout: read. */
    char link[160], real[160], data[200];
    snprintf(link, sizeof link, "%s/linked.map", dir);
    ck_assert_int_eq(symlink(path, link), 0);
    ck_assert_int_eq(ss__shard_map_read(link, &m, why, sizeof why), SS_ERR_PERMISSION);
    ck_assert_msg(strstr(why, "symbolic link"), "%s", why);
    snprintf(real, sizeof real, "%s/..2026_11_28_00_00_00.1", dir);
    ck_assert_int_eq(mkdir(real, 0755), 0);
    snprintf(data, sizeof data, "%s/fleet.map", real);
    ss__check_write_map(data, 4, "a:1", NULL);
    snprintf(data, sizeof data, "%s/..data", dir);
    ck_assert_int_eq(symlink("..2026_11_28_00_00_00.1", data), 0);
    snprintf(link, sizeof link, "%s/k8s.map", dir);
    ck_assert_int_eq(symlink("..data/fleet.map", link), 0);
    /* (the link's name must be the file's own) */
    ck_assert_int_eq(ss__shard_map_read(link, &m, why, sizeof why), SS_ERR_PERMISSION);
    unlink(link);
    snprintf(link, sizeof link, "%s/fleet.map", dir);
    unlink(link);
    ck_assert_int_eq(symlink("..data/fleet.map", link), 0);
    ck_assert_int_eq(ss__shard_map_read(link, &m, why, sizeof why), SS_OK);
    ck_assert_uint_eq(m.epoch, 4);
    /* A directory others can write (no sticky bit): the file could be replaced. */
    char open_dir[96], in_open[128];
    snprintf(open_dir, sizeof open_dir, "%s/open", dir);
    ck_assert_int_eq(mkdir(open_dir, 0777), 0);
    ck_assert_int_eq(chmod(open_dir, 0777), 0);
    snprintf(in_open, sizeof in_open, "%s/fleet.map", open_dir);
    ss__check_write_map(in_open, 3, "a:1", NULL);
    ck_assert_int_eq(ss__shard_map_read(in_open, &m, why, sizeof why), SS_ERR_PERMISSION);
    ck_assert_msg(strstr(why, "another user replace it"), "%s", why);
    ck_assert_int_eq(chmod(open_dir, 01777), 0); /* sticky, as /tmp: nobody else may */
    ck_assert_int_eq(ss__shard_map_read(in_open, &m, why, sizeof why), SS_OK);
    /* Epochs: up by at most 2^32. */
    ck_assert(ss__shard_map_newer(2, 3));
    ck_assert(ss__shard_map_newer(2, 2 + SS_SHARD_MAP_EPOCH_JUMP));
    ck_assert(!ss__shard_map_newer(2, 3 + SS_SHARD_MAP_EPOCH_JUMP));
    ck_assert(!ss__shard_map_newer(5, 5));
    ck_assert(!ss__shard_map_newer(5, 4));
    ss__check_rmdir(dir);
}
END_TEST

static void count_change(void *arg) {
    atomic_fetch_add((_Atomic int *)arg, 1);
}

/* A PS's map: an epoch of 2^64 - 1 (refused as a value) or one more than
 * 2^32 past the one served (refused as a jump) changes nothing, and the
 * next true map is still taken, and said to the on_change hook once. */
START_TEST(test_map_watch_refuses_epoch_jumps) {
    char dir[64], path[128], why[400] = "";
    ss__check_tmpdir(dir, "ss-mapjump");
    snprintf(path, sizeof path, "%s/fleet.map", dir);
    ss__check_write_map(path, 2, "a:1", NULL);
    ss__metrics *metrics;
    ck_assert_int_eq(ss__metrics_create(&metrics, NULL, 0), SS_OK);
    ss__ps_map_watch *w;
    ck_assert_int_eq(ss__ps_map_watch_start(path, metrics, &w, why, sizeof why), SS_OK);
    const _Atomic uint64_t *epoch = ss__ps_map_watch_epoch(w);
    _Atomic int changes = 0;
    ss__ps_map_watch_on_change(w, count_change, &changes);
    const uint64_t forged[] = {UINT64_MAX, 3 + SS_SHARD_MAP_EPOCH_JUMP};
    for (size_t i = 0; i < 2; i++) {
        ss__check_write_map(path, forged[i], "a:1,b:2", NULL);
        ss__sleep_ns(600000000ull); /* read every 200 ms */
        ck_assert_uint_eq(atomic_load(epoch), 2);
    }
    ck_assert_int_eq(atomic_load(&changes), 0);
    ss__check_write_map(path, 3, "a:1,b:2", NULL);
    for (int i = 0; i < 50 && atomic_load(&changes) != 1; i++)
        ss__sleep_ns(100000000ull);
    ck_assert_uint_eq(atomic_load(epoch), 3);
    ck_assert_int_eq(atomic_load(&changes), 1);
    ss__ps_map_watch_stop(w);
    ss__metrics_destroy(metrics);
    ss__check_rmdir(dir);
}
END_TEST

/* The process_* series: there, and plausible for this very process. */
START_TEST(test_process_metrics) {
    ss__metrics *m;
    ck_assert_int_eq(ss__metrics_create(&m, NULL, 0), SS_OK);
    ss__process_metrics_refresh(m);
    char *text;
    size_t len;
    ck_assert_int_eq(ss__metrics_render(m, &text, &len), SS_OK);
    double rss = 0, fds = 0, threads = 0, start = 0;
    const char *p = strstr(text, "\nprocess_resident_memory_bytes ");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(sscanf(p, "\nprocess_resident_memory_bytes %lf", &rss), 1);
    ck_assert_int_eq(sscanf(strstr(text, "\nprocess_open_fds "), "\nprocess_open_fds %lf", &fds),
                     1);
    ck_assert_int_eq(sscanf(strstr(text, "\nprocess_threads "), "\nprocess_threads %lf", &threads),
                     1);
    ck_assert_int_eq(sscanf(strstr(text, "\nprocess_start_time_seconds "),
                            "\nprocess_start_time_seconds %lf", &start),
                     1);
    ck_assert_ptr_nonnull(strstr(text, "\nprocess_cpu_seconds_total "));
    ck_assert_double_gt(rss, 1 << 20); /* more than a MiB */
    ck_assert_double_ge(fds, 3);       /* stdin, stdout, stderr at least */
    ck_assert_double_ge(threads, 1);
    ck_assert_double_gt(start, 1.7e9); /* after 2023, seconds since the epoch */
    ck_assert_double_le(start, (double)time(NULL) + 1);
    free(text);
    ss__metrics_destroy(m);
}
END_TEST

static void count_tick(void *ctx) {
    __atomic_add_fetch((int *)ctx, 1, __ATOMIC_RELAXED);
}

START_TEST(test_ticker_ticks_until_stopped) {
    int ticks = 0;
    ss__ticker *t;
    ck_assert_int_eq(ss__ticker_start(0, count_tick, &ticks, &t, NULL, 0), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss__ticker_start(50000000, count_tick, &ticks, &t, NULL, 0),
                     SS_OK); /* 50 ms */
    usleep(20000);
    ck_assert_int_eq(__atomic_load_n(&ticks, __ATOMIC_RELAXED), 0); /* a period first */
    while (__atomic_load_n(&ticks, __ATOMIC_RELAXED) < 3)
        usleep(10000);
    ss__ticker_stop(t);
    const int at_stop = __atomic_load_n(&ticks, __ATOMIC_RELAXED);
    usleep(120000);
    ck_assert_int_eq(__atomic_load_n(&ticks, __ATOMIC_RELAXED), at_stop); /* none after */
    ss__ticker_stop(NULL);
}
END_TEST

/* Three ticks 1 ms apart, then the tick asks for an hour's wait. */
static uint64_t paced_tick(void *ctx) {
    const int n = __atomic_add_fetch((int *)ctx, 1, __ATOMIC_RELAXED);
    return n < 3 ? 1000000ull : 3600ull * 1000000000ull;
}

START_TEST(test_paced_ticker_waits_what_its_tick_says) {
    int ticks = 0;
    ss__ticker *t;
    ck_assert_int_eq(ss__ticker_start_paced(0, NULL, &ticks, &t, NULL, 0), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss__ticker_start_paced(0, paced_tick, &ticks, &t, NULL, 0),
                     SS_OK); /* at once */
    while (__atomic_load_n(&ticks, __ATOMIC_RELAXED) < 3)
        usleep(1000);
    usleep(100000);
    ck_assert_int_eq(__atomic_load_n(&ticks, __ATOMIC_RELAXED), 3); /* the hour's wait */
    ss__ticker_stop(t); /* ends the wait: the test would time out otherwise */
    ck_assert_int_eq(__atomic_load_n(&ticks, __ATOMIC_RELAXED), 3);
}
END_TEST

/* A thread's end of a socket pair: n bytes of p to write or read. */
typedef struct io_arg {
    int fd;
    uint8_t *p;
    size_t n;
    bool ok;
} io_arg;

static void *write_then_close(void *arg) {
    io_arg *a = arg;
    a->ok = ss__write_all(a->fd, a->p, a->n);
    close(a->fd);
    return NULL;
}

static void on_interrupt(int sig) {
    (void)sig;
}

typedef struct interrupter {
    pthread_t target;
    atomic_bool stop;
} interrupter;

static void *interrupt_every_ms(void *arg) {
    interrupter *in = arg;
    while (!atomic_load(&in->stop)) {
        pthread_kill(in->target, SIGUSR1); /* joinable: a done writer drops it */
        usleep(1000);
    }
    return NULL;
}

/* A 4 MiB write through a socket pair arrives whole and in order while
 * another thread interrupts the writer every millisecond with a signal
 * whose handler has no SA_RESTART: a blocked write returns what it moved
 * so far (a short write) or EINTR. The reader reads whatever has arrived
 * (short reads). A read past the writer's end says so with errno 0. */
START_TEST(test_whole_reads_and_writes) {
    enum { N = 4 << 20 };
    uint8_t *out = malloc(N), *in = malloc(N + 1);
    for (size_t i = 0; i < N; i++)
        out[i] = (uint8_t)(i * 2654435761u >> 13);
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct sigaction sa = {.sa_handler = on_interrupt}, old;
    sigaction(SIGUSR1, &sa, &old);
    io_arg a = {sv[1], out, N, false};
    interrupter intr = {.stop = false};
    pthread_t writer, irq;
    pthread_create(&writer, NULL, write_then_close, &a);
    intr.target = writer;
    pthread_create(&irq, NULL, interrupt_every_ms, &intr);
    usleep(20000);                            /* the writer fills the buffer and blocks */
    ck_assert(ss__read_all(sv[0], in, 1000)); /* pieces of any size */
    ck_assert(ss__read_all(sv[0], in + 1000, N - 1000));
    errno = EINVAL;
    ck_assert(!ss__read_all(sv[0], in + N, 1)); /* the writer is done */
    ck_assert_int_eq(errno, 0);
    atomic_store(&intr.stop, true);
    pthread_join(irq, NULL);
    pthread_join(writer, NULL);
    sigaction(SIGUSR1, &old, NULL);
    ck_assert(a.ok);
    ck_assert(memcmp(in, out, N) == 0);
    close(sv[0]);
    ck_assert(!ss__write_all(-1, out, 1)); /* an error, not a loop */
    free(out);
    free(in);
}
END_TEST

/* ss__grow: first capacity, then doubling, only when full; the items
 * kept; a size past SIZE_MAX bytes refused with the array as it was. */
START_TEST(test_arrays_grow_by_doubling) {
    int *a = NULL;
    size_t cap = 0;
    ck_assert(SS_GROW(a, cap, 0, 3));
    ck_assert_uint_eq(cap, 3);
    for (int i = 0; i < 3; i++)
        a[i] = i;
    int *before = a;
    ck_assert(SS_GROW(a, cap, 2, 3)); /* room left: nothing moves */
    ck_assert_ptr_eq(a, before);
    ck_assert_uint_eq(cap, 3);
    ck_assert(SS_GROW(a, cap, 3, 3));
    ck_assert_uint_eq(cap, 6);
    ck_assert_int_eq(a[0] + a[1] + a[2], 3);
    ck_assert(SS_GROW(a, cap, 6, 3));
    ck_assert_uint_eq(cap, 12);
    before = a;
    size_t huge = SIZE_MAX / 2 / sizeof *a + 3;
    ck_assert(!ss__grow(&a, &huge, huge, sizeof *a, 1)); /* 2 x huge x 4 bytes: past SIZE_MAX */
    ck_assert_ptr_eq(a, before);
    ck_assert_uint_eq(huge, SIZE_MAX / 2 / sizeof *a + 3);
    free(a);
}
END_TEST

static void *read_n(void *arg) {
    io_arg *r = arg;
    r->ok = ss__read_all(r->fd, r->p, r->n);
    return NULL;
}

/* ss__send_iov: pieces sent in order across their bounds, empty ones
 * passed over; without waiting, it stops where the socket is full and
 * says which piece is under way (advanced past what went out), and the
 * rest then goes with a wait; a closed peer is -1, not a SIGPIPE. */
START_TEST(test_iovec_sends) {
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    char a[] = "head", b[] = "body", got[16] = {0};
    struct iovec iov[4] = {{a, 4}, {NULL, 0}, {b, 4}, {NULL, 0}};
    ck_assert_int_eq(ss__send_iov(sv[0], iov, 4, false), 4);
    ck_assert(ss__read_all(sv[1], got, 8));
    ck_assert_str_eq(got, "headbody");
    enum { BIG = 8 << 20 };
    uint8_t *out = malloc(BIG), *in = malloc(BIG);
    for (size_t i = 0; i < BIG; i++)
        out[i] = (uint8_t)(i * 2654435761u >> 11);
    struct iovec big[3] = {{out, 10}, {out + 10, BIG - 20}, {out + BIG - 10, 10}};
    ck_assert_int_eq(ss__send_iov(sv[0], big, 3, true), 1); /* no reader yet: the socket fills */
    const uint8_t *at = big[1].iov_base;
    ck_assert(at > out + 10 && at + big[1].iov_len == out + BIG - 10); /* part of piece 1 went */
    io_arg r = {sv[1], in, BIG, false};
    pthread_t th;
    pthread_create(&th, NULL, read_n, &r);
    ck_assert_int_eq(ss__send_iov(sv[0], big + 1, 2, false), 2);
    pthread_join(th, NULL);
    ck_assert(r.ok);
    ck_assert(memcmp(in, out, BIG) == 0);
    free(out);
    free(in);
    close(sv[1]);
    struct iovec one = {a, 4};
    ck_assert_int_eq(ss__send_iov(sv[0], &one, 1, false), -1); /* EPIPE, no signal */
    close(sv[0]);
}
END_TEST

/* The one name-table lookup: an index, by hand; -1 for another word, a
 * prefix, a different case, NULL and an empty table; holes skipped. */
/* The one id set: distinct ids in order of first appearance, each
 * position's index among them, duplicates found; a call never sees the
 * last call's ids (its slots are stamped, not cleared). And the mixer is
 * splitmix64: its first output from state 0 is 0xe220a8397b1dcdaf. */
START_TEST(test_id_set_and_mixer) {
    const uint64_t ids[] = {5, 9, 5, 7, 9, 5};
    uint64_t uniq[6];
    size_t map[6], m = 0;
    ck_assert_int_eq(ss__ids_unique(ids, 6, uniq, map, &m), SS_OK);
    ck_assert_uint_eq(m, 3);
    const uint64_t want_uniq[] = {5, 9, 7};
    const size_t want_map[] = {0, 1, 0, 2, 1, 0};
    for (size_t i = 0; i < 3; i++)
        ck_assert_uint_eq(uniq[i], want_uniq[i]);
    for (size_t i = 0; i < 6; i++)
        ck_assert_uint_eq(map[i], want_map[i]);
    ck_assert_int_eq(ss__ids_unique((const uint64_t[]){9}, 1, uniq, map, &m), SS_OK);
    ck_assert_uint_eq(m, 1);
    ck_assert_uint_eq(uniq[0], 9);
    ck_assert_uint_eq(map[0], 0);
    uint64_t dup = 0;
    ck_assert_int_eq(ss__ids_find_duplicate((const uint64_t[]){1, 2, 3}, 3, &dup), 0);
    ck_assert_int_eq(ss__ids_find_duplicate((const uint64_t[]){1, 2, 3}, 3, &dup), 0);
    ck_assert_int_eq(ss__ids_find_duplicate((const uint64_t[]){4, 2, 8, 2}, 4, &dup), 1);
    ck_assert_uint_eq(dup, 2);
    /* A set grown for many ids, then a small call again. */
    uint64_t *many = malloc(100000 * sizeof *many);
    ck_assert_ptr_nonnull(many);
    for (size_t i = 0; i < 100000; i++)
        many[i] = i * 1000003ull;
    ck_assert_int_eq(ss__ids_find_duplicate(many, 100000, &dup), 0);
    many[99999] = many[12345];
    ck_assert_int_eq(ss__ids_find_duplicate(many, 100000, &dup), 1);
    ck_assert_uint_eq(dup, 12345 * 1000003ull);
    free(many);
    ck_assert_int_eq(ss__ids_find_duplicate((const uint64_t[]){12345 * 1000003ull}, 1, &dup), 0);
    ck_assert_uint_eq(ss__splitmix64(0), 0xe220a8397b1dcdafull);
    ck_assert_uint_eq(ss__mix64(0), 0);
}
END_TEST

START_TEST(test_name_index) {
    static const char *const t[] = {"f32", "fp16", "bf16"};
    ck_assert_int_eq(ss__name_index("f32", t, 3), 0);
    ck_assert_int_eq(ss__name_index("bf16", t, 3), 2);
    ck_assert_int_eq(ss__name_index("bf16", t, 2), -1); /* past n */
    ck_assert_int_eq(ss__name_index("fp", t, 3), -1);
    ck_assert_int_eq(ss__name_index("F32", t, 3), -1);
    ck_assert_int_eq(ss__name_index(NULL, t, 3), -1);
    ck_assert_int_eq(ss__name_index("f32", t, 0), -1);
    static const char *const holes[] = {NULL, "ma", NULL, "bmuf"}; /* a table with holes */
    ck_assert_int_eq(ss__name_index("bmuf", holes, 4), 3);
    ck_assert_int_eq(ss__name_index("ma", holes, 4), 1);
}
END_TEST

SS_CHECK_MAIN("common", 0, NULL, NULL, test_name_index, test_id_set_and_mixer,
              test_strerror_covers_every_code, test_ps_group_names, test_metrics_drop_departed,
              test_log_level_parse, test_flags_precedence_and_forms, test_flags_bad_input,
              test_flags_typed_fields, test_metrics_render_exact, test_metrics_bad_input,
              test_addresses_and_log_levels_refused_with_why, test_log_lines_as_text_and_json,
              test_shard_map_file, test_shard_map_file_owner_and_links,
              test_map_watch_refuses_epoch_jumps, test_ticker_ticks_until_stopped,
              test_paced_ticker_waits_what_its_tick_says, test_process_metrics,
              test_whole_reads_and_writes, test_arrays_grow_by_doubling, test_iovec_sends)
