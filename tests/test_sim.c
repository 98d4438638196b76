/* tools/sim: the simulator's event engine and its ShadowSync model, against
 * times worked out by hand. */
#include <check.h>

#include "check_run.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/sim/cluster_model.h"
#include "tools/sim/events.h"

/* ---- the engine ---- */

typedef struct finish_log {
    double t[8];
    int who[8];
    int n;
} finish_log;

typedef struct finish_arg {
    finish_log *log;
    int who;
} finish_arg;

static void record(ss_sim *sim, void *arg) {
    finish_arg *a = arg;
    a->log->t[a->log->n] = ss__sim_now(sim);
    a->log->who[a->log->n++] = a->who;
}

START_TEST(test_events_run_in_time_then_schedule_order) {
    ss_sim *sim = ss__sim_create();
    finish_log log = {0};
    finish_arg a = {&log, 1}, b = {&log, 2}, c = {&log, 3};
    ck_assert_int_eq(ss__sim_at(sim, 2.0, record, &a), 0);
    ck_assert_int_eq(ss__sim_at(sim, 1.0, record, &b), 0);
    ck_assert_int_eq(ss__sim_at(sim, 1.0, record, &c), 0);
    ck_assert_uint_eq(ss__sim_run(sim, 1.5), 2); /* the one at 2.0 waits */
    ck_assert_int_eq(log.who[0], 2);
    ck_assert_int_eq(log.who[1], 3);
    ck_assert_uint_eq(ss__sim_run(sim, 10), 1);
    ck_assert_double_eq(log.t[2], 2.0);
    ss__sim_destroy(sim);
}
END_TEST

START_TEST(test_pool_shares_servers_equally) {
    /* One server, two jobs of 1 s at 0: each runs at half speed, both end
     * at 2 s, and the server was busy for 2 s. */
    ss_sim *sim = ss__sim_create();
    ss__sim_pool *one = ss__sim_pool_create(sim, 1);
    finish_log log = {0};
    finish_arg a = {&log, 1}, b = {&log, 2};
    ss__sim_pool_submit(one, 1.0, record, &a);
    ss__sim_pool_submit(one, 1.0, record, &b);
    ss__sim_run(sim, 100);
    ck_assert_int_eq(log.n, 2);
    ck_assert_double_eq_tol(log.t[0], 2.0, 1e-12);
    ck_assert_double_eq_tol(log.t[1], 2.0, 1e-12);
    ck_assert_double_eq_tol(ss__sim_pool_busy(one), 2.0, 1e-12);
    ss__sim_destroy(sim);

    /* Two servers, three jobs of 1 s: each gets 2/3 of a server, all end
     * at 1.5 s; busy 3 server-seconds. */
    sim = ss__sim_create();
    ss__sim_pool *two = ss__sim_pool_create(sim, 2);
    log = (finish_log){0};
    finish_arg c = {&log, 3};
    ss__sim_pool_submit(two, 1.0, record, &a);
    ss__sim_pool_submit(two, 1.0, record, &b);
    ss__sim_pool_submit(two, 1.0, record, &c);
    ss__sim_run(sim, 100);
    ck_assert_int_eq(log.n, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_double_eq_tol(log.t[i], 1.5, 1e-12);
    ck_assert_double_eq_tol(ss__sim_pool_busy(two), 3.0, 1e-12);
    ss__sim_destroy(sim);
}
END_TEST

static void submit_later(ss_sim *sim, void *arg) {
    (void)sim;
    void **p = arg;
    ss__sim_pool_submit(p[0], 1.0, record, p[1]);
}

START_TEST(test_pool_job_arriving_later) {
    /* One server: A (2 s of work) at 0, B (1 s) at 1. A alone until 1 (1 s
     * left), then both at half speed: both end at 3. */
    ss_sim *sim = ss__sim_create();
    ss__sim_pool *one = ss__sim_pool_create(sim, 1);
    finish_log log = {0};
    finish_arg a = {&log, 1}, b = {&log, 2};
    void *later[2] = {one, &b};
    ss__sim_pool_submit(one, 2.0, record, &a);
    ss__sim_at(sim, 1.0, submit_later, later);
    ss__sim_run(sim, 100);
    ck_assert_int_eq(log.n, 2);
    ck_assert_double_eq_tol(log.t[0], 3.0, 1e-12);
    ck_assert_double_eq_tol(log.t[1], 3.0, 1e-12);
    /* A job shorter than the rest leaves first: C (0.5) and D (2) at 0 on
     * one server: C ends at 1, D has 1.5 left alone: ends at 2.5. */
    log = (finish_log){0};
    finish_arg c = {&log, 3}, d = {&log, 4};
    ss__sim_pool_submit(one, 0.5, record, &c);
    ss__sim_pool_submit(one, 2.0, record, &d);
    ss__sim_run(sim, 100);
    ck_assert_int_eq(log.who[0], 3);
    ck_assert_double_eq_tol(log.t[0], 3.0 + 1.0, 1e-12);
    ck_assert_double_eq_tol(log.t[1], 3.0 + 2.5, 1e-12);
    ck_assert_ptr_null(ss__sim_pool_create(sim, 0)); /* no servers */
    ss__sim_destroy(sim);
}
END_TEST

START_TEST(test_gate_is_first_come_first_served) {
    /* One slot: A holds it, B and C queue in that order. */
    ss_sim *sim = ss__sim_create();
    ss__sim_gate *g = ss__sim_gate_create(sim, 1);
    finish_log log = {0};
    finish_arg a = {&log, 1}, b = {&log, 2}, c = {&log, 3};
    ck_assert_int_eq(ss__sim_gate_acquire(g, record, &a), 0);
    ck_assert_int_eq(ss__sim_gate_acquire(g, record, &b), 0);
    ck_assert_int_eq(ss__sim_gate_acquire(g, record, &c), 0);
    ss__sim_run(sim, 1);
    ck_assert_int_eq(log.n, 1); /* only A got in */
    ss__sim_gate_release(g);
    ss__sim_run(sim, 1);
    ck_assert_int_eq(log.n, 2);
    ck_assert_int_eq(log.who[1], 2);
    ss__sim_gate_release(g);
    ss__sim_run(sim, 1);
    ck_assert_int_eq(log.who[2], 3);
    ck_assert_ptr_null(ss__sim_gate_create(sim, 0));
    ss__sim_destroy(sim);
}
END_TEST

/* ---- the model ---- */

/* No CPU costs: a round is the RPC's software cost, two transfers and two
 * latencies. 1.25M floats = 5 MB per direction at 10 Gbit/s = 4 ms. */
static void bare_config(ss__sim_config *c) {
    ss__sim_config_init(c);
    c->dense_floats = 1250000;
    c->costs = (ss__sim_costs){0, 0, 0, 200e-6};
    c->latency_s = 50e-6;
    c->link_bytes_per_s = 10e9 / 8;
    c->chunk_floats = 1e9; /* one chunk per shard */
    c->start_spread_s = 0; /* every trainer's first step at 10 ms */
    c->seconds = 2;
}

START_TEST(test_one_trainer_easgd_round_by_hand) {
    ss__sim_config c;
    bare_config(&c);
    ss__sim_result r;
    char why[200] = "";
    ck_assert_int_eq(ss__sim_cluster(&c, &r, why, sizeof why), SS_OK);
    /* 0.2 ms + 2 x 0.05 ms + 2 x 4 ms = 8.3 ms; it starts after the 4th
     * step (40 ms) and ends before the 5th: the gap is 4 steps. */
    ck_assert_double_eq_tol(r.round_s_mean, 8.3e-3, 1e-9);
    ck_assert_double_eq(r.gap_p50, 4);
    ck_assert_double_eq(r.gap_max, 4);
    /* Background: the trainer never waits (199 or 200 of the 200 steps:
     * the last one falls on the end, to rounding). */
    ck_assert_double_eq_tol(r.efficiency, 1.0, 0.006);
    /* Rounds after steps 4, 8, ..., 196 (the one after 200 ends late). */
    ck_assert_double_eq(r.rounds, 49);
    /* The PS's link carried 5 MB per round each way: 49 x 4 ms of 2 s. */
    ck_assert_double_eq_tol(r.ps_link_util, 49 * 4e-3 / 2, 1e-9);
}
END_TEST

START_TEST(test_foreground_waits_for_its_round) {
    ss__sim_config c;
    bare_config(&c);
    c.mode = SS_SIM_FOREGROUND;
    c.sync_every = 1;
    ss__sim_result r;
    ck_assert_int_eq(ss__sim_cluster(&c, &r, NULL, 0), SS_OK);
    /* A step (10 ms) then its round (8.3 ms): 10 / 18.3 of the rate. */
    ck_assert_double_eq_tol(r.efficiency, 10.0 / 18.3, 0.01);
    ck_assert_double_eq(r.gap_p50, 1);
    c.sync_every = 10; /* 100 / 108.3 */
    ck_assert_int_eq(ss__sim_cluster(&c, &r, NULL, 0), SS_OK);
    ck_assert_double_eq_tol(r.efficiency, 100.0 / 108.3, 0.01);
}
END_TEST

START_TEST(test_ma_round_shares_the_ps_link) {
    /* Two trainers on two hosts, S-MA, one PS: both send 5 MB at once into
     * the PS's link (8 ms for both), wait for each other, and get their
     * replies out of it (8 ms): 0.2 + 0.1 + 16 = 16.3 ms. */
    ss__sim_config c;
    bare_config(&c);
    c.mode = SS_SIM_MA;
    c.trainers = 2;
    c.per_host = 1;
    ss__sim_result r;
    ck_assert_int_eq(ss__sim_cluster(&c, &r, NULL, 0), SS_OK);
    ck_assert_double_eq_tol(r.round_s_mean, 16.3e-3, 1e-9);
    /* From step 4 (40 ms) to 56.3 ms: the 5th step fell inside. */
    ck_assert_double_eq(r.gap_p50, 5);
    /* Two PS shards halve each transfer and share nothing: 0.3 + 2 x 4. */
    c.ps = 2;
    ck_assert_int_eq(ss__sim_cluster(&c, &r, NULL, 0), SS_OK);
    ck_assert_double_eq_tol(r.round_s_mean, 8.3e-3, 1e-9);
}
END_TEST

START_TEST(test_cpu_costs_and_a_saturated_ps) {
    /* CPU only: 1M floats, client 2 ns/float (1 ms before, 1 ms after),
     * PS 10 ns/float (10.5 ms), no network cost: 12.5 ms per round. */
    ss__sim_config c;
    bare_config(&c);
    c.dense_floats = 1048576;
    c.link_bytes_per_s = 1e18;
    c.latency_s = 0;
    c.costs = (ss__sim_costs){0, 2e-9, 10e-9, 0};
    ss__sim_result r;
    ck_assert_int_eq(ss__sim_cluster(&c, &r, NULL, 0), SS_OK);
    ck_assert_double_eq_tol(r.round_s_mean, 12 * 1048576e-9, 1e-9);
    /* 64 trainers on a PS of one core: it can do 1 / 10.5 ms = 95 rounds/s,
     * so each trainer gets ~1.5 rounds/s and a gap near 100 steps / 1.5. */
    c.trainers = 64;
    c.ps_cores = 1;
    c.seconds = 10;
    ck_assert_int_eq(ss__sim_cluster(&c, &r, NULL, 0), SS_OK);
    ck_assert_double_eq_tol(r.rounds / c.seconds, 1.0 / 10.48576e-3, 3);
    ck_assert_double_eq_tol(r.ps_cpu_util, 1.0, 0.02);
    ck_assert(r.gap_p50 > 55 && r.gap_p50 < 80);
    ck_assert_double_eq_tol(r.efficiency, 1.0, 0.006); /* the trainers never wait */
}
END_TEST

START_TEST(test_chunks_pipeline_client_and_ps) {
    /* 2M floats in 2 chunks of 1M, CPU only: the client's thread spends
     * 1 ms per chunk each way, a PS thread 3 ms per chunk. One PS thread:
     * send A [0,1], send B [1,2]; PS A [1,4], PS B [4,7]; apply A [4,5],
     * apply B [7,8]: 8 ms, not the 10 of one 2M-float chunk. */
    ss__sim_config c;
    bare_config(&c);
    c.dense_floats = 2e6;
    c.chunk_floats = 1e6;
    c.link_bytes_per_s = 1e18;
    c.latency_s = 0;
    c.costs = (ss__sim_costs){0, 2e-9, 3e-9, 0};
    c.ps_threads = 1;
    ss__sim_result r;
    ck_assert_int_eq(ss__sim_cluster(&c, &r, NULL, 0), SS_OK);
    ck_assert_double_eq_tol(r.round_s_mean, 8e-3, 1e-9);
    /* A window of one chunk per shard: B starts when A's reply is in.
     * send A [0,1], PS A [1,4], apply A [4,5]; B [5,6], [6,9], [9,10]. */
    c.window = 1;
    ck_assert_int_eq(ss__sim_cluster(&c, &r, NULL, 0), SS_OK);
    ck_assert_double_eq_tol(r.round_s_mean, 10e-3, 1e-9);
    c.window = 0; /* all at once */
    ck_assert_int_eq(ss__sim_cluster(&c, &r, NULL, 0), SS_OK);
    ck_assert_double_eq_tol(r.round_s_mean, 8e-3, 1e-9);
    c.window = 2;
    /* Two PS threads: PS A [1,4], PS B [2,5]; apply A [4,5], B [5,6]. */
    c.ps_threads = 2;
    ck_assert_int_eq(ss__sim_cluster(&c, &r, NULL, 0), SS_OK);
    ck_assert_double_eq_tol(r.round_s_mean, 6e-3, 1e-9);
    /* One chunk: send 2, PS 6, apply 2. */
    c.chunk_floats = 2e6;
    ck_assert_int_eq(ss__sim_cluster(&c, &r, NULL, 0), SS_OK);
    ck_assert_double_eq_tol(r.round_s_mean, 10e-3, 1e-9);
}
END_TEST

START_TEST(test_bad_configs_say_which_setting) {
    ss__sim_config c;
    ss__sim_result r;
    char why[200] = "";
    ss__sim_config_init(&c);
    c.trainers = 0;
    ck_assert_int_eq(ss__sim_cluster(&c, &r, why, sizeof why), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(why, "trainers"));
    ss__sim_config_init(&c);
    c.link_bytes_per_s = 0;
    ck_assert_int_eq(ss__sim_cluster(&c, &r, why, sizeof why), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(why, "link"));
    ss__sim_config_init(&c);
    c.costs.ps_cpu_s_per_float = NAN;
    ck_assert_int_eq(ss__sim_cluster(&c, &r, why, sizeof why), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(why, "costs"));
    ss__sim_config_init(&c);
    c.host_cores = 0;
    ck_assert_int_eq(ss__sim_cluster(&c, &r, why, sizeof why), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(why, "cores"));
    c.shared_cores = 2; /* one machine: per-host cores do not matter */
    ck_assert_int_eq(ss__sim_cluster(&c, &r, why, sizeof why), SS_OK);
    ck_assert_int_eq(ss__sim_cluster(NULL, &r, why, sizeof why), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss__sim_mode_parse("bmuf"), SS_SIM_BMUF);
    ck_assert_int_eq(ss__sim_mode_parse("fg"), SS_SIM_FOREGROUND);
    ck_assert_int_eq(ss__sim_mode_parse("sgd"), -1);
}
END_TEST

SS_CHECK_MAIN("sim", 0, NULL, NULL, test_events_run_in_time_then_schedule_order,
              test_pool_shares_servers_equally, test_pool_job_arriving_later,
              test_gate_is_first_come_first_served, test_one_trainer_easgd_round_by_hand,
              test_foreground_waits_for_its_round, test_ma_round_shares_the_ps_link,
              test_cpu_costs_and_a_saturated_ps, test_chunks_pipeline_client_and_ps,
              test_bad_configs_say_which_setting)
