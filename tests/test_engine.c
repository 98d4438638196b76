/* shadow/: the engine and the in-process transport. */
#include <check.h>
#include <stdatomic.h>

#include "check_run.h"
#include "transport_checks.h"
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "shadow/engine.h"
#include "shadow/host_average_transport.h"
#include "shadow/inproc_transport.h"
#include "shadow/transport.h"

/* ---- a fake transport that plays a worker writing during the round ---- */

static float *fake_live; /* the replica the "worker" writes */
static size_t fake_n;
static ss_status fake_status; /* what every call returns */

static ss_status fake_join(void *impl, const char *g, size_t n, uint64_t key, uint64_t *m) {
    (void)impl, (void)g, (void)n, (void)key;
    *m = 1;
    return SS_OK;
}
static ss_status fake_leave(void *impl, const char *g, uint64_t m) {
    (void)impl, (void)g, (void)m;
    return SS_OK;
}
static void worker_writes_during_round(void) {
    for (size_t i = 0; i < fake_n; i++)
        fake_live[i] += 100.0f;
}
static size_t fake_applied; /* S-EASGD on an error: floats the other side still applied */
static ss_status fake_easgd(void *impl, const char *g, uint64_t m, const float *s, float alpha,
                            float *d, size_t n) {
    (void)impl, (void)g, (void)m;
    worker_writes_during_round();
    size_t applied = fake_status == SS_OK ? n : fake_applied;
    for (size_t i = 0; i < applied; i++)
        d[i] = alpha * s[i]; /* central variable 0; d stays zero past what was applied */
    return fake_status;
}
static ss__bmuf_params fake_bmuf_seen; /* the last round's S-BMUF parameters */
static bool fake_bmuf_was_set;
/* S-MA: the mean is s + 10; S-BMUF: the block start is s + 20. */
static ss_status fake_round(void *impl, const char *g, uint64_t m, const float *s,
                            const ss__bmuf_params *bmuf, float *out, size_t n,
                            ss__round_result *r) {
    (void)impl, (void)g, (void)m;
    fake_bmuf_was_set = bmuf != NULL;
    if (bmuf)
        fake_bmuf_seen = *bmuf;
    worker_writes_during_round();
    for (size_t i = 0; i < n; i++)
        out[i] = s[i] + (bmuf ? 20.0f : 10.0f);
    r->round = 0;
    r->participants = 2;
    return fake_status;
}
static ss_status fake_read(void *impl, const char *g, float *c, size_t n) {
    (void)impl, (void)g, (void)c, (void)n;
    return SS_ERR_STATE;
}
static void fake_destroy(void *impl) {
    (void)impl;
}
static const ss__transport_ops fake_ops = {.join = fake_join,
                                           .leave = fake_leave,
                                           .easgd_exchange = fake_easgd,
                                           .round = fake_round,
                                           .read_central = fake_read,
                                           .destroy = fake_destroy};

static void run_fake_round(ss__algo algo, ss_status transport_status, float *out_x) {
    ss__transport *t;
    ck_assert_int_eq(ss__transport_create(&fake_ops, NULL, &t, NULL, 0), SS_OK);
    ss__engine *e;
    ss__engine_config cfg = {.transport = t, .threads = 1};
    ck_assert_int_eq(ss__engine_create(&cfg, &e, NULL, 0), SS_OK);
    ss__replica *r;
    ck_assert_int_eq(ss__replica_create(4, &r, NULL, 0), SS_OK);
    float *x = ss__replica_data(r);
    for (int i = 0; i < 4; i++)
        x[i] = (float)(i + 1);
    fake_live = x;
    fake_n = 4;
    fake_status = transport_status;
    ss__sync_params p = {
        .algo = algo, .alpha = 0.5f, .bmuf = {.eta = 0.5f, .zeta = 1.0f, .nesterov = false}};
    ss__engine_group *g;
    ck_assert_int_eq(ss__engine_add_group(e, "dense", r, &p, &g), SS_OK);
    ck_assert_int_eq(ss__engine_run_round(e, g), transport_status);
    memcpy(out_x, x, 4 * sizeof(float));
    ss__group_stats st;
    ck_assert_int_eq(ss__engine_group_stats(g, &st), SS_OK);
    ck_assert_uint_eq(st.rounds, transport_status == SS_OK ? 1 : 0);
    ck_assert_uint_eq(st.failed_rounds, transport_status == SS_OK ? 0 : 1);
    ss__engine_destroy(e);
    ss__replica_destroy(r);
    ss__transport_destroy(t);
}

/* A fresh in-process transport whose rounds wait round_deadline_ms. */
static ss__transport *inproc_transport(int round_deadline_ms) {
    ss__inproc_config cfg = {.round_deadline_ms = round_deadline_ms};
    ss__transport *t;
    ck_assert_int_eq(ss__inproc_transport_create(&cfg, &t, NULL, 0), SS_OK);
    return t;
}

START_TEST(test_easgd_delta_keeps_concurrent_update) {
    /* s = [1,2,3,4]; a worker adds 100 mid-round; d = 0.5 s;
     * x = s + 100 - d = 100 + 0.5 s. Overwriting with c would lose the 100. */
    float x[4];
    run_fake_round(SS_ALGO_EASGD, SS_OK, x);
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq_tol(x[i], 100.0f + 0.5f * (float)(i + 1), 1e-5f);
}
END_TEST

START_TEST(test_ma_delta_keeps_concurrent_update) {
    /* avg = s + 10, worker +100: x = s + 100 + (avg - s) = s + 110. */
    float x[4];
    run_fake_round(SS_ALGO_MA, SS_OK, x);
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq_tol(x[i], (float)(i + 1) + 110.0f, 1e-5f);
}
END_TEST

START_TEST(test_bmuf_moves_to_the_block_start) {
    /* The engine sends its parameters; the aggregator answers with the
     * block start b = s + 20; worker +100: x = s + 100 + (b - s). */
    float x[4];
    run_fake_round(SS_ALGO_BMUF, SS_OK, x);
    ck_assert(fake_bmuf_was_set);
    ck_assert_float_eq(fake_bmuf_seen.eta, 0.5f);
    ck_assert_float_eq(fake_bmuf_seen.zeta, 1.0f);
    ck_assert(!fake_bmuf_seen.nesterov);
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq_tol(x[i], (float)(i + 1) + 120.0f, 1e-5f);
    run_fake_round(SS_ALGO_MA, SS_OK, x);
    ck_assert(!fake_bmuf_was_set); /* S-MA asks for the plain mean */
}
END_TEST

START_TEST(test_partial_easgd_applies_what_the_ps_applied) {
    /* Two of four floats were applied on the PS (one chunk answered, one
     * timed out): the replica takes those deltas anyway, so x + c stays
     * conserved; the round still counts as failed. s = [1,2,3,4], +100:
     * x = s + 100 - 0.5 s on the first two, s + 100 on the others. */
    float x[4];
    fake_applied = 2;
    run_fake_round(SS_ALGO_EASGD, SS_ERR_TIMEOUT, x);
    fake_applied = 0;
    ck_assert_float_eq_tol(x[0], 100.5f, 1e-5f);
    ck_assert_float_eq_tol(x[1], 101.0f, 1e-5f);
    ck_assert_float_eq(x[2], 103.0f);
    ck_assert_float_eq(x[3], 104.0f);
}
END_TEST

/* A replica that holds NaN is not retried forever: the first round says
 * NON_FINITE (log, shadowsync_sync_diverged 1), the member leaves, and
 * later rounds, final rounds and the shadow threads skip it. */
START_TEST(test_diverged_replica_stops_and_says_so) {
    ss__transport *t = inproc_transport(200);
    ss__metrics *m;
    ck_assert_int_eq(ss__metrics_create(&m, NULL, 0), SS_OK);
    ss__engine *e;
    ss__engine_config cfg = {.transport = t, .metrics = m, .trainer = "t", .threads = 1};
    ck_assert_int_eq(ss__engine_create(&cfg, &e, NULL, 0), SS_OK);
    ss__replica *r;
    ck_assert_int_eq(ss__replica_create(2, &r, NULL, 0), SS_OK);
    ss__sync_params p = {.algo = SS_ALGO_MA};
    ss__engine_group *g;
    ck_assert_int_eq(ss__engine_add_group(e, "g", r, &p, &g), SS_OK);
    ss__replica_data(r)[1] = NAN;
    ck_assert_int_eq(ss__engine_run_round(e, g), SS_ERR_NON_FINITE);
    ck_assert_int_eq(ss__engine_run_round(e, g), SS_ERR_NON_FINITE);
    ss__group_stats st;
    ck_assert_int_eq(ss__engine_group_stats(g, &st), SS_OK);
    ck_assert_uint_eq(st.failed_rounds, 1); /* said once, not retried */
    ss__central_group_info info;
    size_t count;
    ck_assert_int_eq(ss__central_describe(ss__inproc_central(t), &info, 1, &count), SS_OK);
    ck_assert_uint_eq(info.members, 0); /* it left: nobody's round waits for it */
    char *text;
    size_t len;
    ck_assert_int_eq(ss__metrics_render(m, &text, &len), SS_OK);
    ck_assert_ptr_nonnull(
        strstr(text, "shadowsync_sync_diverged{trainer=\"t\",group=\"g\",algo=\"ma\"} 1"));
    free(text);
    ck_assert_int_eq(ss__engine_start(e, NULL, 0), SS_OK); /* the shadow thread skips it */
    ss__sleep_ns(50000000ull);
    ck_assert_int_eq(ss__engine_stop(e), SS_OK);
    ck_assert_int_eq(ss__engine_final_rounds(e, 3, 0), SS_ERR_NON_FINITE);
    ck_assert_int_eq(ss__engine_group_stats(g, &st), SS_OK);
    ck_assert_uint_eq(st.failed_rounds, 1);
    ss__engine_destroy(e);
    ss__replica_destroy(r);
    ss__metrics_destroy(m);
    ss__transport_destroy(t);
}
END_TEST

START_TEST(test_failed_round_is_abandoned_whole) {
    /* The transport fails: only the worker's +100 remains. */
    float x[4];
    run_fake_round(SS_ALGO_EASGD, SS_ERR_IO, x);
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(x[i], (float)(i + 1) + 100.0f);
    run_fake_round(SS_ALGO_MA, SS_ERR_TIMEOUT, x);
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(x[i], (float)(i + 1) + 100.0f);
}
END_TEST

/* ---- in-process transport ---- */

START_TEST(test_inproc_easgd_central_from_first) {
    ss__transport *t = inproc_transport(100);
    float c[2];
    ck_assert_int_eq(ss__transport_read_central(t, "g", c, 2), SS_ERR_NOT_FOUND);
    ck_assert_int_eq(ss__transport_join(t, "g", 2, &(uint64_t){0}), SS_OK);
    ck_assert_int_eq(ss__transport_read_central(t, "g", c, 2), SS_ERR_STATE); /* no centre yet */
    check_easgd_by_hand(t, "h");
    check_bmuf_rounds_by_hand(t, "bmuf");
    ss__transport_destroy(t);
}
END_TEST

START_TEST(test_inproc_bad_input_leaves_central) {
    ss__transport *t = inproc_transport(100);
    uint64_t a, x;
    ck_assert_int_eq(ss__transport_join(t, "g", 2, &a), SS_OK);
    ck_assert_int_eq(ss__transport_join(t, "g", 3, &x), SS_ERR_SIZE_MISMATCH);
    ck_assert_int_eq(ss__transport_join(t, "", 3, &x), SS_ERR_INVALID_ARGUMENT);
    float d[3], c[2], avg[2];
    ss__round_result rr;
    /* The first snapshot becomes the centre: not one with a NaN. */
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", a, (const float[]){1, NAN}, 0.5f, d, 2),
                     SS_ERR_NON_FINITE);
    ck_assert_int_eq(ss__transport_read_central(t, "g", c, 2), SS_ERR_STATE);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", a, (const float[]){1, 1}, 0.5f, d, 2),
                     SS_OK);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", a, (const float[]){NAN, 1}, 0.5f, d, 2),
                     SS_ERR_NON_FINITE);
    ck_assert_int_eq(
        ss__transport_easgd_exchange(t, "g", a, (const float[]){INFINITY, 1}, 0.5f, d, 2),
        SS_ERR_NON_FINITE);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", a, (const float[]){1, 1, 1}, 0.5f, d, 3),
                     SS_ERR_SIZE_MISMATCH);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "nope", a, (const float[]){1, 1}, 0.5f, d, 2),
                     SS_ERR_NOT_FOUND);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", 999, (const float[]){1, 1}, 0.5f, d, 2),
                     SS_ERR_NOT_FOUND);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", a, (const float[]){1, 1}, 2.0f, d, 2),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss__transport_allreduce_mean(t, "g", a, (const float[]){NAN, 0}, avg, 2, &rr),
                     SS_ERR_NON_FINITE);
    ck_assert_int_eq(ss__transport_read_central(t, "g", c, 2), SS_OK);
    ck_assert_float_eq(c[0], 1.0f); /* unchanged by every rejected call */
    ck_assert_float_eq(c[1], 1.0f);
    ck_assert_int_eq(ss__transport_leave(t, "g", 999), SS_ERR_NOT_FOUND);
    ck_assert_int_eq(ss__inproc_transport_create(&(ss__inproc_config){0}, &t, NULL, 0),
                     SS_ERR_INVALID_ARGUMENT);
    ss__transport_destroy(t);
}
END_TEST

static double two_i_plus_1(int i) {
    return 2 * i + 1; /* member k holds k, 3k: the means 1, 3 */
}

START_TEST(test_ma_round_across_three_engines) {
    ss__transport *t = inproc_transport(5000);
    ss__replica *r[3];
    round_arg args[3];
    const ss__sync_params p = {.algo = SS_ALGO_MA};
    for (int k = 0; k < 3; k++)
        start_round_member(t, "dense", &p, 2, k, two_i_plus_1, &r[k], &args[k]);
    run_rounds_together(args, 3, 1);
    for (int k = 0; k < 3; k++) {
        ck_assert_float_eq(ss__replica_data(r[k])[0], 1.0f);
        ck_assert_float_eq(ss__replica_data(r[k])[1], 3.0f);
    }
    float c[2];
    ck_assert_int_eq(ss__transport_read_central(t, "dense", c, 2), SS_OK);
    ck_assert_float_eq(c[1], 3.0f);
    stop_round_members(args, r, 3);
    ss__transport_destroy(t);
}
END_TEST

START_TEST(test_ma_round_deadline_drops_silent_member) {
    ss__transport *t = inproc_transport(100);
    uint64_t a, silent;
    ck_assert_int_eq(ss__transport_join(t, "g", 2, &a), SS_OK);
    ck_assert_int_eq(ss__transport_join(t, "g", 2, &silent), SS_OK);
    float avg[2];
    ss__round_result rr;
    ck_assert_int_eq(ss__transport_allreduce_mean(t, "g", a, (const float[]){4, 8}, avg, 2, &rr),
                     SS_OK);
    ck_assert_uint_eq(rr.participants, 1);
    ck_assert_float_eq(avg[0], 4.0f);
    ck_assert_float_eq(avg[1], 8.0f);
    /* Once the silent member leaves, rounds close at once with one member. */
    ck_assert_int_eq(ss__transport_leave(t, "g", silent), SS_OK);
    uint64_t t0 = ss__now_ns();
    ck_assert_int_eq(ss__transport_allreduce_mean(t, "g", a, (const float[]){2, 2}, avg, 2, &rr),
                     SS_OK);
    ck_assert_uint_eq(rr.round, 1);
    ck_assert_uint_eq(rr.participants, 1);
    ck_assert_msg(ss__now_ns() - t0 < 90000000ull, "round waited for a member that left");
    ss__transport_destroy(t);
}
END_TEST

/* ---- engine lifecycle ---- */

#define NGROUPS 3

static uint64_t total_rounds(ss__engine_group **g) {
    uint64_t sum = 0;
    for (int k = 0; k < NGROUPS; k++) {
        ss__group_stats st;
        ss__engine_group_stats(g[k], &st);
        sum += st.rounds;
    }
    return sum;
}

static int wait_each_group_rounds(ss__engine_group **g, uint64_t min_rounds, ss__replica **r) {
    uint64_t deadline = ss__now_ns() + 20000000000ull;
    while (ss__now_ns() < deadline) {
        int ok = 1;
        for (int k = 0; k < NGROUPS; k++) {
            ss__replica_tick(r[k], 1);
            ss__group_stats st;
            ss__engine_group_stats(g[k], &st);
            ok &= st.rounds >= min_rounds;
        }
        if (ok)
            return 1;
        ss__sleep_ns(1000000);
    }
    return 0;
}

START_TEST(test_engine_start_pause_stop_several_groups) {
    ss__transport *t = inproc_transport(100);
    ss__metrics *m;
    ck_assert_int_eq(ss__metrics_create(&m, NULL, 0), SS_OK);
    ss__engine *e;
    ss__engine_config cfg = {.transport = t, .metrics = m, .trainer = "t0", .threads = 2};
    ck_assert_int_eq(ss__engine_create(&cfg, &e, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__engine_pause(e), SS_ERR_STATE); /* not running */
    ss__replica *r[NGROUPS];
    ss__engine_group *g[NGROUPS];
    ss__sync_params p = {.algo = SS_ALGO_EASGD, .alpha = 0.5f};
    const char *names[NGROUPS] = {"bottom", "top", "bias"};
    for (int k = 0; k < NGROUPS; k++) {
        ck_assert_int_eq(ss__replica_create(1000 * (size_t)(k + 1), &r[k], NULL, 0), SS_OK);
        ck_assert_int_eq(ss__engine_add_group(e, names[k], r[k], &p, &g[k]), SS_OK);
    }
    ss__engine_group *dup;
    ck_assert_int_eq(ss__engine_add_group(e, "top", r[0], &p, &dup), SS_ERR_EXISTS);
    ss__sync_params bad = {.algo = SS_ALGO_EASGD, .alpha = 0.0f};
    ck_assert_int_eq(ss__engine_add_group(e, "x", r[0], &bad, &dup), SS_ERR_INVALID_ARGUMENT);

    ck_assert_int_eq(ss__engine_start(e, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__engine_start(e, NULL, 0), SS_ERR_STATE);
    ck_assert_msg(wait_each_group_rounds(g, 5, r), "every group should get rounds");

    ck_assert_int_eq(ss__engine_pause(e), SS_OK);
    uint64_t paused_at = total_rounds(g);
    for (int i = 0; i < 20; i++) {
        for (int k = 0; k < NGROUPS; k++)
            ss__replica_tick(r[k], 1);
        ss__sleep_ns(2000000);
    }
    ck_assert_uint_eq(total_rounds(g), paused_at); /* no round while paused */

    ck_assert_int_eq(ss__engine_resume(e), SS_OK);
    ck_assert_msg(wait_each_group_rounds(g, paused_at / NGROUPS + 10, r) ||
                      total_rounds(g) > paused_at,
                  "rounds resume");
    ck_assert_uint_gt(total_rounds(g), paused_at);

    ck_assert_int_eq(ss__engine_stop(e), SS_OK);
    uint64_t stopped_at = total_rounds(g);
    ck_assert_uint_eq(ss__engine_rounds(e), stopped_at);
    for (int k = 0; k < NGROUPS; k++)
        ss__replica_tick(r[k], 10);
    ss__sleep_ns(20000000);
    ck_assert_uint_eq(total_rounds(g), stopped_at);
    ck_assert_int_eq(ss__engine_stop(e), SS_OK); /* idempotent */

    /* The counters reached the registry. */
    char *text;
    ck_assert_int_eq(ss__metrics_render(m, &text, NULL), SS_OK);
    ck_assert_ptr_nonnull(
        strstr(text, "shadowsync_sync_rounds_total{trainer=\"t0\",group=\"top\",algo=\"easgd\"}"));
    ck_assert_ptr_nonnull(strstr(text, "# TYPE shadowsync_sync_gap_iterations histogram"));
    free(text);
    ss__engine_destroy(e);
    for (int k = 0; k < NGROUPS; k++)
        ss__replica_destroy(r[k]);
    ss__metrics_destroy(m);
    ss__transport_destroy(t);
}
END_TEST

START_TEST(test_sync_gap_accounting) {
    ss__transport *t = inproc_transport(100);
    ss__engine *e;
    ss__engine_config cfg = {.transport = t, .threads = 1};
    ck_assert_int_eq(ss__engine_create(&cfg, &e, NULL, 0), SS_OK);
    ss__replica *r;
    ck_assert_int_eq(ss__replica_create(8, &r, NULL, 0), SS_OK);
    ss__replica_tick(r, 4); /* before registration: not part of any gap */
    ss__engine_group *g;
    ss__sync_params p = {.algo = SS_ALGO_EASGD, .alpha = 0.5f};
    ck_assert_int_eq(ss__engine_add_group(e, "dense", r, &p, &g), SS_OK);
    const uint64_t ticks[] = {3, 7, 2, 100};
    for (int i = 0; i < 4; i++) {
        ss__replica_tick(r, ticks[i]);
        ck_assert_int_eq(ss__engine_run_round(e, g), SS_OK);
    }
    ss__group_stats st;
    ck_assert_int_eq(ss__engine_group_stats(g, &st), SS_OK);
    ck_assert_uint_eq(st.rounds, 4);
    ck_assert_double_eq_tol(st.gap_mean, 28.0, 1e-12);
    ck_assert_uint_eq(st.gap_p50, 3); /* nearest rank of {2,3,7,100} */
    ck_assert_uint_eq(st.gap_p99, 100);
    ck_assert_uint_eq(st.gap_max, 100);
    ss__engine_destroy(e);
    ss__replica_destroy(r);
    ss__transport_destroy(t);
}
END_TEST

START_TEST(test_min_round_gap_waits_for_progress) {
    ss__transport *t = inproc_transport(100);
    ss__engine *e;
    ss__engine_config cfg = {.transport = t, .threads = 1, .min_round_gap = 5};
    ck_assert_int_eq(ss__engine_create(&cfg, &e, NULL, 0), SS_OK);
    ss__replica *r;
    ck_assert_int_eq(ss__replica_create(8, &r, NULL, 0), SS_OK);
    ss__engine_group *g;
    ss__sync_params p = {.algo = SS_ALGO_EASGD, .alpha = 0.5f};
    ck_assert_int_eq(ss__engine_add_group(e, "dense", r, &p, &g), SS_OK);
    ck_assert_int_eq(ss__engine_start(e, NULL, 0), SS_OK);
    ss__replica_tick(r, 4);
    ss__sleep_ns(50000000);
    ss__group_stats st;
    ss__engine_group_stats(g, &st);
    ck_assert_uint_eq(st.rounds, 0); /* 4 < 5 iterations: nothing to sync */
    ss__replica_tick(r, 1);
    uint64_t deadline = ss__now_ns() + 10000000000ull;
    do {
        ss__sleep_ns(1000000);
        ss__engine_group_stats(g, &st);
    } while (st.rounds == 0 && ss__now_ns() < deadline);
    ck_assert_uint_eq(st.rounds, 1);
    ck_assert_uint_eq(st.gap_max, 5);
    ss__engine_destroy(e);
    ss__replica_destroy(r);
    ss__transport_destroy(t);
}
END_TEST

/* A member whose replica stands still (a trainer done with its share of
 * an epoch) still takes part in a round the others opened, though its
 * replica is far from its gap (transport_checks.h). */
START_TEST(test_still_member_joins_an_open_round) {
    ss__transport *t;
    ck_assert_int_eq(
        ss__inproc_transport_create(&(ss__inproc_config){.round_deadline_ms = 3000}, &t, NULL, 0),
        SS_OK);
    check_still_member_joins(t, t);
    ss__transport_destroy(t);
}
END_TEST

/* The host-averaging wrapper says its local round waits for a member. */
typedef struct mean_call {
    ss__transport *t;
    uint64_t member;
    ss_status st;
} mean_call;

static void *contribute_ones(void *arg) {
    mean_call *c = arg;
    float avg[2];
    ss__round_result rr;
    c->st = ss__transport_allreduce_mean(c->t, "g", c->member, (const float[]){1, 1}, avg, 2, &rr);
    return NULL;
}

START_TEST(test_host_average_says_its_round_waits) {
    ss__transport *remote, *host;
    ck_assert_int_eq(ss__inproc_transport_create(&(ss__inproc_config){.round_deadline_ms = 5000},
                                                 &remote, NULL, 0),
                     SS_OK);
    ck_assert_int_eq(ss__host_average_transport_create(remote, 5000, &host, NULL, 0), SS_OK);
    uint64_t a, b;
    ck_assert_int_eq(ss__transport_join(host, "g", 2, &a), SS_OK);
    ck_assert_int_eq(ss__transport_join(host, "g", 2, &b), SS_OK);
    ck_assert(!ss__transport_round_waiting(host, "g", b));
    mean_call call = {.t = host, .member = a};
    pthread_t th;
    pthread_create(&th, NULL, contribute_ones, &call);
    uint64_t deadline = ss__now_ns() + 4000000000ull;
    while (!ss__transport_round_waiting(host, "g", b) && ss__now_ns() < deadline)
        ss__sleep_ns(1000000);
    ck_assert_msg(ss__transport_round_waiting(host, "g", b), "a's open round not seen as waiting");
    ck_assert(!ss__transport_round_waiting(host, "g", a)); /* a is in it already */
    mean_call mine = {.t = host, .member = b};
    contribute_ones(&mine);
    pthread_join(th, NULL);
    ck_assert_int_eq(call.st, SS_OK);
    ck_assert_int_eq(mine.st, SS_OK);
    ck_assert(!ss__transport_round_waiting(host, "g", b)); /* closed */
    ss__transport_destroy(host);
    ss__transport_destroy(remote);
}
END_TEST

/* Host-level averaging: two members of one host send snapshots; one
 * exchange per local round reaches the remote (the PS), and each member's
 * delta is (s_i - m) + alpha (m - c). Hand-computed values. */
typedef struct ha_call {
    ss__transport *t;
    uint64_t member;
    const float *s;
    float d[2];
    ss_status st;
    bool ma;
} ha_call;

static void *slow_member(void *arg) {
    ha_call *c = arg;
    ss__round_result res;
    c->st = c->ma ? ss__transport_allreduce_mean(c->t, "g", c->member, c->s, c->d, 2, &res)
                  : ss__transport_easgd_exchange(c->t, "g", c->member, c->s, 0.5f, c->d, 2);
    return NULL;
}

static void ha_round(ss__transport *t, const uint64_t member[2], const float *sa, const float *sb,
                     bool ma, float *da, float *db) {
    ha_call c[2] = {{.t = t, .member = member[0], .s = sa, .ma = ma},
                    {.t = t, .member = member[1], .s = sb, .ma = ma}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, slow_member, &c[i]);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(c[i].st, SS_OK);
    }
    memcpy(da, c[0].d, sizeof c[0].d);
    memcpy(db, c[1].d, sizeof c[1].d);
}

/* ---- a slow remote that counts the calls in flight ---- */

static ss__transport *slow_inner;
static _Atomic int slow_in_flight, slow_max_in_flight, slow_calls;

static void slow_enter(void) {
    int now = atomic_fetch_add(&slow_in_flight, 1) + 1;
    int max = atomic_load(&slow_max_in_flight);
    while (now > max && !atomic_compare_exchange_weak(&slow_max_in_flight, &max, now)) {
    }
    atomic_fetch_add(&slow_calls, 1);
    ss__sleep_ns(300000000ull); /* a slow link: 300 ms per remote call */
}
static ss_status slow_join(void *impl, const char *g, size_t n, uint64_t key, uint64_t *m) {
    (void)impl;
    return ss__transport_join_keyed(slow_inner, g, n, key, m);
}
static ss_status slow_leave(void *impl, const char *g, uint64_t m) {
    (void)impl;
    return ss__transport_leave(slow_inner, g, m);
}
static ss_status slow_round(void *impl, const char *g, uint64_t m, const float *s,
                            const ss__bmuf_params *bmuf, float *out, size_t n,
                            ss__round_result *r) {
    (void)impl;
    slow_enter();
    ss_status st = ss__transport_round(slow_inner, g, m, s, bmuf, out, n, r);
    atomic_fetch_sub(&slow_in_flight, 1);
    return st;
}
static ss_status slow_easgd(void *impl, const char *g, uint64_t m, const float *s, float alpha,
                            float *d, size_t n) {
    (void)impl;
    slow_enter();
    ss_status st = ss__transport_easgd_exchange(slow_inner, g, m, s, alpha, d, n);
    atomic_fetch_sub(&slow_in_flight, 1);
    return st;
}
static ss_status slow_read(void *impl, const char *g, float *c, size_t n) {
    (void)impl;
    return ss__transport_read_central(slow_inner, g, c, n);
}
static void slow_destroy(void *impl) {
    (void)impl;
}

typedef struct ha_peer {
    ss__transport *host;
    uint64_t id;
    float x;
    int rounds;
    ss_status last;
} ha_peer;

static void *ha_peer_rounds(void *p) {
    ha_peer *m = p;
    if (m->x == 3.0f) /* misses the first local round: opens the next one alone */
        ss__sleep_ns(100000000ull);
    for (int i = 0; i < m->rounds; i++) {
        float s[2] = {m->x, m->x}, out[2];
        ss__round_result r;
        m->last = ss__transport_round(m->host, "g", m->id, s, NULL, out, 2, &r);
        ss__sleep_ns((uint64_t)(m->x * 7e6)); /* members out of step: rounds close on deadlines */
    }
    return NULL;
}

/* Local rounds that close on their 20 ms deadline while the previous
 * round's remote half (300 ms) is in flight: never two remote calls at
 * once from one host (before: a second leader called the PS as the same
 * member, and both wrote the same result buffer). */
START_TEST(test_host_average_one_remote_call_at_a_time) {
    static const ss__transport_ops slow_ops = {.join = slow_join,
                                               .leave = slow_leave,
                                               .easgd_exchange = slow_easgd,
                                               .round = slow_round,
                                               .read_central = slow_read,
                                               .destroy = slow_destroy};
    ss__inproc_config rc = {.round_deadline_ms = 1000};
    ck_assert_int_eq(ss__inproc_transport_create(&rc, &slow_inner, NULL, 0), SS_OK);
    ss__transport *remote, *host;
    ck_assert_int_eq(ss__transport_create(&slow_ops, NULL, &remote, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__host_average_transport_create(remote, 20, &host, NULL, 0), SS_OK);
    ha_peer m[3];
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        m[i] = (ha_peer){.host = host, .x = (float)(i + 1), .rounds = 4};
        ck_assert_int_eq(ss__transport_join(host, "g", 2, &m[i].id), SS_OK);
    }
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, ha_peer_rounds, &m[i]), 0);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_ge(atomic_load(&slow_calls), 2);
    ck_assert_int_eq(atomic_load(&slow_max_in_flight), 1);
    ss__transport_destroy(host);
    ss__transport_destroy(remote);
    ss__transport_destroy(slow_inner);
}
END_TEST

START_TEST(test_host_average_one_exchange_per_local_round) {
    ss__inproc_config rc = {.round_deadline_ms = 1000};
    ss__transport *remote, *host;
    ck_assert_int_eq(ss__inproc_transport_create(&rc, &remote, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__host_average_transport_create(remote, 5000, &host, NULL, 0), SS_OK);
    uint64_t m[2];
    ck_assert_int_eq(ss__transport_join(host, "g", 2, &m[0]), SS_OK);
    ck_assert_int_eq(ss__transport_join(host, "g", 2, &m[1]), SS_OK);
    ss__central_group_info info;
    size_t k;
    ck_assert_int_eq(ss__central_describe(ss__inproc_central(remote), &info, 1, &k), SS_OK);
    ck_assert_uint_eq(info.members, 1); /* one member for the whole host */

    /* Round 1: m = (2, 4) becomes the centre, D = 0: d = s - m. */
    float da[2], db[2];
    ha_round(host, m, (float[]){1, 3}, (float[]){3, 5}, false, da, db);
    ck_assert_float_eq(da[0], -1);
    ck_assert_float_eq(da[1], -1);
    ck_assert_float_eq(db[0], 1);
    ck_assert_float_eq(db[1], 1);
    /* Round 2: m = (5, 7), D = 0.5 ((5, 7) - (2, 4)) = 1.5, c = (3.5, 5.5). */
    ha_round(host, m, (float[]){4, 6}, (float[]){6, 8}, false, da, db);
    ck_assert_float_eq(da[0], 0.5f);
    ck_assert_float_eq(da[1], 0.5f);
    ck_assert_float_eq(db[0], 2.5f);
    ck_assert_float_eq(db[1], 2.5f);
    float c[2];
    ck_assert_int_eq(ss__transport_read_central(host, "g", c, 2), SS_OK);
    ck_assert_float_eq(c[0], 3.5f);
    ck_assert_float_eq(c[1], 5.5f);
    /* MA: the remote round's mean of the host means, to both members. */
    ha_round(host, m, (float[]){0, 2}, (float[]){2, 6}, true, da, db);
    ck_assert_float_eq(da[0], 1);
    ck_assert_float_eq(da[1], 4);
    ck_assert_float_eq(db[0], 1);
    ck_assert_float_eq(db[1], 4);
    ck_assert_int_eq(ss__central_describe(ss__inproc_central(remote), &info, 1, &k), SS_OK);
    ck_assert_uint_eq(info.exchanges, 2); /* not 4 */
    ck_assert_uint_eq(info.rounds, 1);    /* not 2 */
    /* The last local member leaving takes the host out of the remote. */
    ck_assert_int_eq(ss__transport_leave(host, "g", m[0]), SS_OK);
    ck_assert_int_eq(ss__central_describe(ss__inproc_central(remote), &info, 1, &k), SS_OK);
    ck_assert_uint_eq(info.members, 1);
    ck_assert_int_eq(ss__transport_leave(host, "g", m[1]), SS_OK);
    ck_assert_int_eq(ss__central_describe(ss__inproc_central(remote), &info, 1, &k), SS_OK);
    ck_assert_uint_eq(info.members, 0);
    /* Bad input: an unknown group, a size that is not the group's. */
    float s[3] = {0}, d[3];
    ck_assert_int_eq(ss__transport_easgd_exchange(host, "nope", m[0], s, 0.5f, d, 2),
                     SS_ERR_NOT_FOUND);
    ck_assert_int_eq(ss__transport_easgd_exchange(host, "g", m[0], s, 0.5f, d, 3),
                     SS_ERR_SIZE_MISMATCH);
    ss__transport_destroy(host);
    ss__transport_destroy(remote);
}
END_TEST

/* The mean of the members' starting values in the test below. */
static double tenth_of_i_mod_5(int i) {
    return 0.1 * (i % 5 + 1);
}

/* Compressed sync in process (an inproc transport with an encoding): the
 * members' calls go through the encoded bytes and both mirrors. MA rounds
 * of 3 engines agree after a few rounds; S-EASGD keeps x + c. */
START_TEST(test_inproc_compressed_rounds) {
    enum { N = 300 };
    for (ss__encoding enc = SS_ENC_FP16; enc <= SS_ENC_INT8; enc++) {
        ss__inproc_config icfg = {.round_deadline_ms = 5000, .encoding = enc};
        ss__transport *t;
        ck_assert_int_eq(ss__inproc_transport_create(&icfg, &t, NULL, 0), SS_OK);
        ck_assert_uint_eq(ss__transport_wire_bytes(t, N), ss__codec_size(enc, N));
        ss__replica *r[3];
        round_arg args[3];
        const ss__sync_params p = {.algo = SS_ALGO_MA};
        for (int k = 0; k < 3; k++)
            start_round_member(t, "dense", &p, N, k, tenth_of_i_mod_5, &r[k], &args[k]);
        run_rounds_together(args, 3, 4);
        double spread, off;
        replicas_agree(r, 3, N, tenth_of_i_mod_5, &spread, &off);
        ck_assert_msg(spread < 1e-5, "%s: replicas %g apart", ss__encoding_name(enc), spread);
        ck_assert_msg(off < 0.01, "%s: the mean is off by %g", ss__encoding_name(enc), off);
        stop_round_members(args, r, 3);
        /* S-EASGD, one member: x moves by -d, c by +d. */
        uint64_t m;
        float x[N], d[N], c[N];
        ck_assert_int_eq(ss__transport_join(t, "easgd", N, &m), SS_OK);
        for (int i = 0; i < N; i++)
            x[i] = 0.01f * (float)i;
        ck_assert_int_eq(ss__transport_easgd_exchange(t, "easgd", m, x, 0.5f, d, N), SS_OK);
        double sum0 = 0, sum = 0;
        for (int i = 0; i < N; i++) {
            float move = 0.3f * sinf((float)i); /* the trainer moves on, unevenly */
            x[i] += move;
            sum0 += 2.0 * (double)(0.01f * (float)i) + move;
        }
        for (int round = 0; round < 5; round++) {
            ck_assert_int_eq(ss__transport_easgd_exchange(t, "easgd", m, x, 0.5f, d, N), SS_OK);
            for (int i = 0; i < N; i++) {
                x[i] -= d[i];
                float step = 0.01f * cosf((float)(i + 7 * round)); /* and trains on */
                x[i] += step;
                sum0 += step;
            }
        }
        ck_assert_int_eq(ss__transport_read_central(t, "easgd", c, N), SS_OK);
        for (int i = 0; i < N; i++)
            sum += (double)x[i] + c[i];
        ck_assert_msg(fabs(sum - sum0) < 1e-4, "%s: x + c drifted by %g", ss__encoding_name(enc),
                      sum - sum0);
        ss__transport_destroy(t);
    }
}
END_TEST

SS_CHECK_MAIN("engine", 60, NULL, NULL, test_easgd_delta_keeps_concurrent_update,
              test_ma_delta_keeps_concurrent_update, test_bmuf_moves_to_the_block_start,
              test_failed_round_is_abandoned_whole, test_diverged_replica_stops_and_says_so,
              test_partial_easgd_applies_what_the_ps_applied, test_inproc_easgd_central_from_first,
              test_inproc_bad_input_leaves_central, test_ma_round_across_three_engines,
              test_ma_round_deadline_drops_silent_member,
              test_engine_start_pause_stop_several_groups, test_sync_gap_accounting,
              test_min_round_gap_waits_for_progress, test_still_member_joins_an_open_round,
              test_host_average_says_its_round_waits,
              test_host_average_one_exchange_per_local_round,
              test_host_average_one_remote_call_at_a_time, test_inproc_compressed_rounds)
