/* The dense half of the public API (shadowsync.h) as a user calls it:
 * config defaults and SHADOWSYNC_* variables, bad input, and
 * add_dense/step/finish/close in all three modes (none, foreground,
 * background in-process, background through a shadowsync-agent) against
 * a real shadowsync-ps. Expected values are worked out by hand. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_procs.h"
#include "check_run.h"
#include "procs.h"
#include "shadowsync/shadowsync.h"

static char tmpdir[] = "/tmp/ss-api-XXXXXX";

static void all_equal(const float *x, size_t n, float want) {
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(x[i] == want, "x[%zu] = %g, want %g", i, (double)x[i], (double)want);
}

static void fill(float *x, size_t n, float v) {
    for (size_t i = 0; i < n; i++)
        x[i] = v;
}

static pid_t start_ps(char *target, size_t len) {
    char log[300];
    snprintf(log, sizeof log, "%s/ps-%d.log", tmpdir, (int)getpid());
    char *extra[] = {"--http", "", "--round-deadline-ms", "2000", NULL};
    return proc_start_ps(log, target, len, "127.0.0.1:0", extra);
}

static void stop(pid_t pid) {
    kill(pid, SIGTERM);
    proc_wait(pid, 30);
}

START_TEST(test_config_defaults_and_environment) {
    ss_trainer_config c;
    ss_trainer_config_init(&c);
    ck_assert_int_eq(c.mode, SS_SYNC_BACKGROUND);
    ck_assert_str_eq(c.algo, "easgd");
    ck_assert_float_eq(c.alpha, 0.5f);
    ck_assert_uint_eq(c.sync_every, 10);
    ck_assert_ptr_null(c.ps);
    ck_assert_ptr_null(c.agent);

    setenv("SHADOWSYNC_PS", "127.0.0.1:1,127.0.0.1:2", 1);
    setenv("SHADOWSYNC_ALGO", "ma", 1);
    setenv("SHADOWSYNC_ALPHA", "0.25", 1);
    setenv("SHADOWSYNC_SYNC", "foreground", 1);
    setenv("SHADOWSYNC_SYNC_EVERY", "3", 1);
    ck_assert_int_eq(ss_trainer_config_from_env(&c), SS_OK);
    ck_assert_str_eq(c.ps, "127.0.0.1:1,127.0.0.1:2");
    ck_assert_str_eq(c.algo, "ma");
    ck_assert_float_eq(c.alpha, 0.25f);
    ck_assert_int_eq(c.mode, SS_SYNC_FOREGROUND);
    ck_assert_uint_eq(c.sync_every, 3);

    /* A malformed value: refused, and cfg is left as it was. */
    ss_trainer_config before = c;
    setenv("SHADOWSYNC_ALPHA", "a half", 1);
    ck_assert_int_eq(ss_trainer_config_from_env(&c), SS_ERR_INVALID_ARGUMENT);
    ck_assert_mem_eq(&c, &before, sizeof c);
    setenv("SHADOWSYNC_ALPHA", "0.5", 1);
    setenv("SHADOWSYNC_SYNC", "sometimes", 1);
    ck_assert_int_eq(ss_trainer_config_from_env(&c), SS_ERR_INVALID_ARGUMENT);
    ck_assert_mem_eq(&c, &before, sizeof c);
    const char *vars[] = {"SHADOWSYNC_PS", "SHADOWSYNC_ALGO", "SHADOWSYNC_ALPHA", "SHADOWSYNC_SYNC",
                          "SHADOWSYNC_SYNC_EVERY"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
    ck_assert_str_eq(ss_version(), SS_PROJECT_VERSION); /* CMakeLists.txt's, the one source */
}
END_TEST

START_TEST(test_bad_input_is_refused) {
    ss_trainer_config c;
    ss_trainer_config_init(&c);
    ss_trainer *t;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT); /* no PS */
    c.ps = "127.0.0.1:1";
    c.alpha = 1.5f;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    c.alpha = 0.5f;
    c.algo = "sgd";
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    c.algo = "bmuf";
    c.bmuf_eta = 1.0f;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    /* Addresses parsed strictly: a port past 65535 was a random port. */
    ss_trainer_config_init(&c);
    c.ps = "127.0.0.1:7070,127.0.0.1:99999";
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(ss_last_error(), "127.0.0.1:99999"));
    ck_assert_ptr_nonnull(strstr(ss_last_error(), "0-65535"));
    /* A TLS file that cannot be read is named, with the system's reason. */
    ss_trainer_config_init(&c);
    c.ps = "127.0.0.1:7070";
    c.tls_ca = "/nonexistent/ca.pem";
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_IO);
    ck_assert_msg(strstr(ss_last_error(), "/nonexistent/ca.pem") &&
                      strstr(ss_last_error(), "No such file"),
                  "%s", ss_last_error());
    /* So is a bad setting the agent client reads from the environment. */
    ss_trainer_config_init(&c);
    c.agent = "/nonexistent/agent.sock";
    setenv("SHADOWSYNC_AGENT_UID", "root", 1);
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    unsetenv("SHADOWSYNC_AGENT_UID");
    ck_assert_msg(strstr(ss_last_error(), "SHADOWSYNC_AGENT_UID=root: not a uid"), "%s",
                  ss_last_error());
    ss_trainer_config_init(&c);
    c.mode = SS_SYNC_NONE;
    c.name = "has space";
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_ERR_INVALID_ARGUMENT);
    c.name = "t0";
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_OK);
    ss_dense *g;
    /* One name rule in every mode: 1-63 characters of [A-Za-z0-9_.-], no leading ".". */
    char long_name[65];
    memset(long_name, 'a', 64);
    long_name[64] = '\0';
    const char *bad_names[] = {"", "a b", "a/b", "a:b", ".", "..", ".hidden", long_name};
    for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++)
        ck_assert_int_eq(ss_trainer_add_dense(t, bad_names[i], 4, NULL, &g),
                         SS_ERR_INVALID_ARGUMENT);
    long_name[63] = '\0';
    ck_assert_int_eq(ss_trainer_add_dense(t, long_name, 4, NULL, &g), SS_OK);
    ck_assert_int_eq(ss_trainer_add_dense(t, "w", 0, NULL, &g), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss_trainer_add_dense(t, "w", 4, NULL, NULL), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss_trainer_add_dense(NULL, "w", 4, NULL, &g), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
    ck_assert_int_eq(ss_trainer_step(NULL), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss_trainer_finish(NULL), SS_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_mode_none_only_counts) {
    ss_trainer_config c;
    ss_trainer_config_init(&c);
    c.mode = SS_SYNC_NONE;
    ss_trainer *t;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_OK);
    const float init[5] = {1, 2, 3, 4, 5};
    ss_dense *g;
    ck_assert_int_eq(ss_trainer_add_dense(t, "mlp.0", 5, init, &g), SS_OK);
    float *x = ss_dense_data(g);
    ck_assert_uint_eq((uintptr_t)x % 64, 0);
    ck_assert_uint_eq(ss_dense_size(g), 5);
    ck_assert_mem_eq(x, init, sizeof init);
    ck_assert_int_eq(ss_trainer_add_dense(t, "mlp.0", 5, NULL, &g), SS_ERR_EXISTS);
    float central[5];
    ck_assert_int_eq(ss_dense_read_central(g, central), SS_ERR_STATE); /* no PS: none */
    ck_assert_str_eq(ss_last_error(),
                     "group mlp.0: this trainer talks to no PS of its own (sync none, an agent, "
                     "or peers): there is no central model to read here");
    for (int i = 0; i < 7; i++)
        ck_assert_int_eq(ss_trainer_step(t), SS_OK);
    ck_assert_int_eq(ss_trainer_finish(t), SS_OK);
    ck_assert_int_eq(ss_trainer_finish(t), SS_OK); /* idempotent */
    ck_assert_int_eq(ss_trainer_close(t), SS_OK);
}
END_TEST

static ss_trainer *open_trainer(const char *ps, const char *name, ss_sync_mode mode,
                                const char *algo) {
    ss_trainer_config c;
    ss_trainer_config_init(&c);
    c.ps = ps;
    c.name = name;
    c.mode = mode;
    c.algo = algo;
    c.sync_every = 2;
    c.final_rounds = 0;
    c.timeout_ms = 5000;
    ss_trainer *t;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_OK);
    return t;
}

/* Foreground S-EASGD, K = 2, alpha 0.5, by hand: A's round sets the
 * centre to its snapshot (1) and moves nothing; B's round gets
 * d = 0.5 (3 - 1) = 1, so B becomes 2 and the centre 2. Either trainer
 * reads the centre as the PS holds it. */
START_TEST(test_foreground_easgd_by_hand) {
    char ps[64];
    pid_t pid = start_ps(ps, sizeof ps);
    ss_trainer *a = open_trainer(ps, "a", SS_SYNC_FOREGROUND, "easgd");
    ss_trainer *b = open_trainer(ps, "b", SS_SYNC_FOREGROUND, "easgd");
    float init[8];
    ss_dense *ga, *gb;
    fill(init, 8, 1.0f);
    ck_assert_int_eq(ss_trainer_add_dense(a, "w", 8, init, &ga), SS_OK);
    fill(init, 8, 3.0f);
    ck_assert_int_eq(ss_trainer_add_dense(b, "w", 8, init, &gb), SS_OK);
    ck_assert_int_eq(ss_trainer_step(a), SS_OK); /* step 1: no round */
    ss_dense_stats st;
    ck_assert_int_eq(ss_dense_get_stats(ga, &st), SS_OK);
    ck_assert_uint_eq(st.rounds, 0);
    ck_assert_int_eq(ss_trainer_step(a), SS_OK); /* step 2: A's round */
    all_equal(ss_dense_data(ga), 8, 1.0f);
    float central[8];
    ck_assert_int_eq(ss_dense_read_central(gb, central), SS_OK); /* the PS's, not B's 3 */
    all_equal(central, 8, 1.0f);
    ck_assert_int_eq(ss_trainer_step(b), SS_OK);
    ck_assert_int_eq(ss_trainer_step(b), SS_OK); /* B's round */
    all_equal(ss_dense_data(gb), 8, 2.0f);
    ck_assert_int_eq(ss_dense_read_central(ga, central), SS_OK); /* A still holds 1 */
    all_equal(central, 8, 2.0f);
    ck_assert_int_eq(ss_dense_get_stats(gb, &st), SS_OK);
    ck_assert_uint_eq(st.rounds, 1);
    ck_assert_uint_eq(st.iterations, 2);
    ck_assert_int_eq(ss_trainer_close(a), SS_OK);
    ck_assert_int_eq(ss_trainer_close(b), SS_OK);
    stop(pid);
}
END_TEST

/* Keeps both trainers stepping (a round waits for progress) until both
 * replicas hold want everywhere. */
static void train_until_both(ss_trainer *const t[2], ss_dense *ga, ss_dense *gb, size_t n,
                             float want) {
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(ss_trainer_step(t[0]), SS_OK);
        ck_assert_int_eq(ss_trainer_step(t[1]), SS_OK);
        int ok = 1;
        for (size_t k = 0; k < n && ok; k++)
            ok = ss_dense_data(ga)[k] == want && ss_dense_data(gb)[k] == want;
        if (ok)
            return;
        usleep(10000);
    }
    ck_abort_msg("replicas did not reach %g in 10 s", (double)want);
}

static void *finish_thread(void *t) {
    return (void *)(intptr_t)ss_trainer_finish(t);
}

/* Two trainers, background S-MA: a round over both snapshots gives each
 * replica the mean, (1 + 3) / 2 = 2; with nothing training, it stays. */
static void background_ma(const char *ps, const char *agent) {
    ss_trainer *t[2];
    ss_dense *g[2];
    for (int i = 0; i < 2; i++) {
        ss_trainer_config c;
        ss_trainer_config_init(&c);
        c.ps = ps;
        c.agent = agent;
        c.name = i ? "b" : "a";
        c.algo = "ma";
        c.min_round_gap = 1;
        c.final_rounds = 1;
        ck_assert_int_eq(ss_trainer_open(&c, &t[i]), SS_OK);
        float init[16];
        fill(init, 16, i ? 3.0f : 1.0f);
        ck_assert_int_eq(ss_trainer_add_dense(t[i], "w", 16, init, &g[i]), SS_OK);
    }
    train_until_both(t, g[0], g[1], 16, 2.0f);
    /* finish() runs the final rounds; both must take part in them. */
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, finish_thread, t[i]);
    for (int i = 0; i < 2; i++) {
        void *rc;
        pthread_join(th[i], &rc);
        ck_assert_int_eq((int)(intptr_t)rc, SS_OK);
        ss_dense_stats st;
        ck_assert_int_eq(ss_dense_get_stats(g[i], &st), SS_OK);
        ck_assert_uint_ge(st.rounds, 1);
        ck_assert_uint_ge(st.iterations, 1);
    }
    all_equal(ss_dense_data(g[0]), 16, 2.0f); /* still readable after finish */
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(ss_trainer_close(t[i]), SS_OK);
}

START_TEST(test_background_in_process_ma) {
    char ps[64];
    pid_t pid = start_ps(ps, sizeof ps);
    background_ma(ps, NULL);
    stop(pid);
}
END_TEST

START_TEST(test_background_through_the_agent_ma) {
    char ps[64], sock[300], log[300], http[128];
    pid_t pid = start_ps(ps, sizeof ps);
    snprintf(sock, sizeof sock, "%s/run/agent.sock", tmpdir);
    snprintf(log, sizeof log, "%s/agent.log", tmpdir);
    char *extra[] = {"--min-round-gap", "1", NULL};
    pid_t agent = agent_start(log, sock, ps, http, sizeof http, extra);
    background_ma(ps, sock);
    stop(agent);
    stop(pid);
}
END_TEST

/* A PS that stops answering: finish() and a remote table's flush() say so
 * instead of reporting success. */
START_TEST(test_finish_and_flush_tell_the_truth) {
    char ps[64];
    pid_t pid = start_ps(ps, sizeof ps);
    ss_trainer_config c;
    ss_trainer_config_init(&c);
    c.ps = ps;
    c.name = "t";
    c.timeout_ms = 300;
    c.final_rounds = 1;
    ss_trainer *t;
    ck_assert_int_eq(ss_trainer_open(&c, &t), SS_OK);
    ss_dense *g;
    ck_assert_int_eq(ss_trainer_add_dense(t, "w", 4, NULL, &g), SS_OK);
    ss_table_config tc;
    ss_table_config_init(&tc, "emb", 2);
    tc.mode = SS_TABLE_REMOTE;
    ss_table *tb;
    ck_assert_int_eq(ss_table_open(t, &tc, &tb), SS_OK);
    const uint64_t ids[2] = {1, 2};
    const float grads[4] = {1, 1, 1, 1};
    ck_assert_int_eq(ss_table_push(tb, ids, 2, grads), SS_OK);
    ck_assert_int_eq(ss_table_flush(tb), SS_OK);
    /* Alive, but it answers nothing. Statuses first, asserts after the PS
     * runs again, so a failing check leaves no stopped process behind. */
    proc_freeze(pid);
    ss_status pushed = ss_table_push(tb, ids, 2, grads); /* only queued */
    ss_status flushed = ss_table_flush(tb);
    ss_status flushed_again = ss_table_flush(tb); /* reported once; nothing pending */
    ss_status finished = ss_trainer_finish(t);
    kill(pid, SIGCONT);
    ss_trainer_close(t);
    stop(pid);
    ck_assert_int_eq(pushed, SS_OK);
    ck_assert_msg(flushed == SS_ERR_TIMEOUT || flushed == SS_ERR_IO, "flush said %s",
                  ss_status_name(flushed));
    ck_assert_int_eq(flushed_again, SS_OK);
    ck_assert_msg(finished == SS_ERR_TIMEOUT || finished == SS_ERR_IO, "finish said %s",
                  ss_status_name(finished));
}
END_TEST

/* A local table of dim, standalone. */
static ss_table *local_table(const char *name, uint32_t dim) {
    ss_table_config tc;
    ss_table_config_init(&tc, name, dim);
    tc.lr = 0.5f;
    ss_table *tb;
    ck_assert_int_eq(ss_table_open(NULL, &tc, &tb), SS_OK);
    return tb;
}

/* Many tables in one call give what one call each gives; a push with a
 * NaN anywhere is taken by no table; a push-prefetch applies first. */
START_TEST(test_many_tables_in_one_call) {
    ss_table *t[2] = {local_table("a", 2), local_table("b", 3)};
    const uint64_t ids[5] = {1, 2, 7, 7, 8}; /* 2 for a, 3 for b */
    const size_t counts[2] = {2, 3};
    float rows[13], one[9];
    ck_assert_int_eq(ss_table_lookup_many(t, 2, ids, counts, rows), SS_OK);
    ck_assert_int_eq(ss_table_lookup(t[0], ids, 2, one), SS_OK);
    ck_assert_int_eq(memcmp(rows, one, 4 * sizeof(float)), 0);
    ck_assert_int_eq(ss_table_lookup(t[1], ids + 2, 3, one), SS_OK);
    ck_assert_int_eq(memcmp(rows + 4, one, 9 * sizeof(float)), 0);
    float grads[13] = {1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2};
    grads[12] = 0.0f / 0.0f;
    ck_assert_int_eq(ss_table_push_many(t, 2, ids, counts, grads), SS_ERR_NON_FINITE);
    ck_assert_ptr_nonnull(strstr(ss_last_error(), "table b: the gradient of id 8"));
    float after[13];
    ck_assert_int_eq(ss_table_lookup_many(t, 2, ids, counts, after), SS_OK);
    ck_assert_int_eq(memcmp(rows, after, sizeof after), 0); /* table a took nothing either */
    grads[12] = 2;
    ss_table_fetch_many *f;
    ck_assert_int_eq(ss_table_push_prefetch_many(t, 2, ids, counts, grads, ids, counts, &f), SS_OK);
    ck_assert_int_eq(ss_table_fetch_many_wait(f, after), SS_OK);
    /* SGD at 0.5: a's rows moved by -0.5, b's row 7 (twice) by -2, 8 by -1 */
    const float moved[13] = {0.5, 0.5, 0.5, 0.5, 2, 2, 2, 2, 2, 2, 1, 1, 1};
    for (int i = 0; i < 13; i++)
        ck_assert_float_eq_tol(rows[i] - after[i], moved[i], 1e-6);
    ck_assert_int_eq(ss_table_warm_many(t, 2, ids, counts), SS_OK); /* local: nothing to do */
    ss_table *null_table[2] = {t[0], NULL};
    ck_assert_int_eq(ss_table_lookup_many(null_table, 2, ids, counts, rows),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_str_eq(ss_last_error(), "tables[1]: NULL");
    ck_assert_int_eq(ss_table_close(t[0]), SS_OK);
    ck_assert_int_eq(ss_table_close(t[1]), SS_OK);
}
END_TEST

int main(void) {
    if (proc_main_start(tmpdir))
        return EXIT_FAILURE;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = ss__check_tests("api", 120, NULL, NULL, test_config_defaults_and_environment,
                             test_bad_input_is_refused, test_mode_none_only_counts,
                             test_foreground_easgd_by_hand, test_background_in_process_ma,
                             test_background_through_the_agent_ma,
                             test_finish_and_flush_tell_the_truth, test_many_tables_in_one_call);
    proc_remove_tree(tmpdir);
    return rc;
}
