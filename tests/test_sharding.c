/* The gRPC transport's cut: a group split over two shard servers and into
 * chunks, checked against hand-computed values and against what each
 * server holds; and a 100 MB group through one server. The servers run
 * the PS's service code over TCP on 127.0.0.1 in this process. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "ps/dense_service.h"
#include "rpc/dense/grpc_transport.h"
#include "shadow/inproc_transport.h"
#include "transport_checks.h"

typedef struct shard {
    ss__transport *backend;
    ss__dense_service svc;
    ss__rpc_server *srv;
    char target[64];
} shard;

static void shard_start_at(shard *s, size_t max_floats, const char *listen) {
    ss__inproc_config icfg = {.round_deadline_ms = 2000};
    ck_assert_int_eq(ss__inproc_transport_create(&icfg, &s->backend, NULL, 0), SS_OK);
    s->svc =
        (ss__dense_service){.centre = ss__inproc_central(s->backend), .max_floats = max_floats};
    size_t n;
    const ss__rpc_method *m = ss__dense_service_methods(&n);
    ss__rpc_server_config cfg = {
        .listen = listen, .threads = 2, .max_message_bytes = max_floats * 4 + 4096};
    ck_assert_int_eq(ss__rpc_server_start(&cfg, m, n, &s->svc, &s->srv, NULL, 0), SS_OK);
    snprintf(s->target, sizeof s->target, "127.0.0.1:%d", ss__rpc_server_port(s->srv));
}

static void shard_start(shard *s, size_t max_floats) {
    shard_start_at(s, max_floats, "127.0.0.1:0");
}

static void shard_stop(shard *s) {
    ss__rpc_server_stop(s->srv);
    ss__transport_destroy(s->backend);
}

/* Two shards of 1,000 floats each, and their targets as a list. */
static void start_two_shards(shard *a, shard *b, char targets[140]) {
    shard_start(a, 1000);
    shard_start(b, 1000);
    snprintf(targets, 140, "%s,%s", a->target, b->target);
}

/* Two shards as above and a client of both, cut in chunks of chunk floats. */
static ss__transport *two_shards_client(shard *a, shard *b, char targets[140], uint32_t timeout_ms,
                                        size_t chunk) {
    start_two_shards(a, b, targets);
    ss__grpc_transport_config cfg = {
        .targets = targets, .timeout_ms = timeout_ms, .chunk_floats = chunk};
    ss__transport *t;
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t, NULL, 0), SS_OK);
    return t;
}

START_TEST(test_cut_over_two_shards_and_chunks) {
    shard a, b;
    char targets[140];
    ss__transport *t = two_shards_client(&a, &b, targets, 5000, 3);
    uint64_t m1, m2;
    ck_assert_int_eq(ss__transport_join(t, "g", 10, &m1), SS_OK);
    ck_assert_int_eq(ss__transport_join(t, "g", 10, &m2), SS_OK);
    float s1[10], s2[10], d[10], c[10];
    for (int i = 0; i < 10; i++) {
        s1[i] = (float)i;
        s2[i] = (float)(3 * i);
    }
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", m1, s1, 0.5f, d, 10), SS_OK);
    for (int i = 0; i < 10; i++)
        ck_assert_float_eq(d[i], 0.0f); /* the first snapshot becomes c */
    /* c = i, s = 3i: d = 0.5 (3i - i) = i, and c becomes 2i. */
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", m2, s2, 0.5f, d, 10), SS_OK);
    ck_assert_int_eq(ss__transport_read_central(t, "g", c, 10), SS_OK);
    for (int i = 0; i < 10; i++) {
        ck_assert_float_eq(d[i], (float)i);
        ck_assert_float_eq(c[i], (float)(2 * i));
    }
    /* Shard 0 holds floats [0, 5) as chunks [0,3) and [3,5); shard 1 holds
     * [5, 10) as [5,8) and [8,10). */
    float part[3];
    ck_assert_int_eq(ss__transport_read_central(a.backend, "g[0:3)", part, 3), SS_OK);
    ck_assert_float_eq(part[2], 4.0f);
    ck_assert_int_eq(ss__transport_read_central(a.backend, "g[3:5)", part, 2), SS_OK);
    ck_assert_float_eq(part[1], 8.0f);
    ck_assert_int_eq(ss__transport_read_central(b.backend, "g[5:8)", part, 3), SS_OK);
    ck_assert_float_eq(part[0], 10.0f);
    ck_assert_int_eq(ss__transport_read_central(b.backend, "g[8:10)", part, 2), SS_OK);
    ck_assert_float_eq(part[1], 18.0f);
    ck_assert_int_eq(ss__transport_read_central(a.backend, "g[5:8)", part, 3), SS_ERR_NOT_FOUND);

    /* A wrong size is refused before anything is sent. */
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", m1, s1, 0.5f, d, 9),
                     SS_ERR_SIZE_MISMATCH);
    ck_assert_int_eq(ss__transport_leave(t, "g", m1), SS_OK);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", m1, s1, 0.5f, d, 10), SS_ERR_NOT_FOUND);
    ss__transport_destroy(t);
    shard_stop(&a);
    shard_stop(&b);
}
END_TEST

/* One shard answers, the other is gone: the chunks that were applied on
 * the live shard come back in d (zeros for the lost ones), so a caller
 * that applies x -= d keeps x + c conserved chunk by chunk. */
START_TEST(test_partial_easgd_returns_the_applied_chunks) {
    shard a, b;
    char targets[140];
    ss__transport *t = two_shards_client(&a, &b, targets, 1000, 2);
    uint64_t m;
    ck_assert_int_eq(ss__transport_join(t, "g", 4, &m), SS_OK);
    float s0[4] = {1, 1, 1, 1}, s1[4] = {3, 3, 3, 3}, d[4];
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", m, s0, 0.5f, d, 4), SS_OK);
    ss__rpc_server_stop(b.srv); /* shard 1, floats [2, 4), is gone */
    for (int i = 0; i < 4; i++)
        d[i] = 99.0f; /* the transport writes all of d, whatever it held */
    ss_status st = ss__transport_easgd_exchange(t, "g", m, s1, 0.5f, d, 4);
    ck_assert_int_ne(st, SS_OK);
    /* Shard 0: c = 1, s = 3: d = 1 and c became 2; shard 1: nothing. */
    ck_assert_float_eq(d[0], 1.0f);
    ck_assert_float_eq(d[1], 1.0f);
    ck_assert_float_eq(d[2], 0.0f);
    ck_assert_float_eq(d[3], 0.0f);
    float c[2];
    ck_assert_int_eq(ss__transport_read_central(a.backend, "g[0:2)", c, 2), SS_OK);
    ck_assert_float_eq(c[0] + (s1[0] - d[0]), 1.0f + 3.0f); /* x + c as before the exchange */
    ss__transport_destroy(t);
    ss__transport_destroy(b.backend);
    shard_stop(&a);
}
END_TEST

/* Members a shard holds for one chunk group. */
static uint32_t members_on(shard *s, const char *chunk) {
    ss__central_group_info info[16];
    size_t count;
    ck_assert_int_eq(ss__central_describe(ss__inproc_central(s->backend), info, 16, &count), SS_OK);
    for (size_t i = 0; i < count; i++)
        if (!strcmp(info[i].name, chunk))
            return info[i].members;
    return 0;
}

/* One S-MA round of three engines at once; returns how many succeeded. */
static int round_of_three(round_arg args[3]) {
    pthread_t th[3];
    for (int k = 0; k < 3; k++)
        pthread_create(&th[k], NULL, run_one_round, &args[k]);
    int ok = 0;
    for (int k = 0; k < 3; k++) {
        pthread_join(th[k], NULL);
        ok += args[k].st == SS_OK;
    }
    return ok;
}

static double zero(int i) {
    (void)i;
    return 0;
}

/* Three S-MA trainers over two shards; shard b restarts empty. Each
 * trainer's next round gets NOT_FOUND from b only: the transport joins b
 * again and leaves a alone (its members stay, neither left nor doubled:
 * the engine never rejoined), and the round after goes through. */
START_TEST(test_a_restarted_shard_alone_is_joined_again) {
    shard a, b;
    char targets[140];
    start_two_shards(&a, &b, targets);
    ss__transport *t[3];
    ss__replica *r[3];
    round_arg args[3];
    const ss__sync_params p = {.algo = SS_ALGO_MA};
    for (int k = 0; k < 3; k++) {
        ss__grpc_transport_config cfg = {
            .targets = targets, .timeout_ms = 5000, .round_wait_ms = 3000, .chunk_floats = 2};
        ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t[k], NULL, 0), SS_OK);
        start_round_member(t[k], "g", &p, 4, k, zero, &r[k], &args[k]);
    }
    ck_assert_int_eq(round_of_three(args), 3);
    ck_assert_uint_eq(members_on(&a, "g[0:2)"), 3);
    char at[64];
    snprintf(at, sizeof at, "%s", b.target);
    shard_stop(&b);
    shard_start_at(&b, 1000, at);              /* the same address, nothing remembered */
    ck_assert_int_eq(round_of_three(args), 0); /* NOT_FOUND from b: joined there again */
    ck_assert_uint_eq(members_on(&a, "g[0:2)"), 3);
    ck_assert_uint_eq(members_on(&b, "g[2:4)"), 3);
    ck_assert_int_eq(round_of_three(args), 3);
    for (int k = 0; k < 3; k++) {
        ss__group_stats gs;
        ck_assert_int_eq(ss__engine_group_stats(args[k].g, &gs), SS_OK);
        ck_assert_uint_eq(gs.rejoins, 0);
    }
    stop_round_members(args, r, 3);
    for (int k = 0; k < 3; k++)
        ss__transport_destroy(t[k]);
    shard_stop(&a);
    shard_stop(&b);
}
END_TEST

typedef struct mean_arg {
    ss__transport *t;
    uint64_t m;
    float s[7], avg[7];
    ss__round_result rr;
    ss_status st;
} mean_arg;

static void *contribute(void *p) {
    mean_arg *a = p;
    a->st = ss__transport_allreduce_mean(a->t, "r", a->m, a->s, a->avg, 7, &a->rr);
    return NULL;
}

START_TEST(test_round_mean_over_shards_and_chunks) {
    shard a, b;
    char targets[140];
    start_two_shards(&a, &b, targets);
    ss__grpc_transport_config cfg = {
        .targets = targets, .timeout_ms = 5000, .round_wait_ms = 3000, .chunk_floats = 2};
    mean_arg args[3];
    pthread_t th[3];
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(ss__grpc_transport_create(&cfg, &args[k].t, NULL, 0), SS_OK);
        ck_assert_int_eq(ss__transport_join(args[k].t, "r", 7, &args[k].m), SS_OK);
        for (int i = 0; i < 7; i++)
            args[k].s[i] = (float)(k * (i + 1)); /* mean over k = 0,1,2: i + 1 */
    }
    for (int k = 0; k < 3; k++)
        pthread_create(&th[k], NULL, contribute, &args[k]);
    for (int k = 0; k < 3; k++) {
        pthread_join(th[k], NULL);
        ck_assert_int_eq(args[k].st, SS_OK);
        ck_assert_uint_eq(args[k].rr.participants, 3);
        for (int i = 0; i < 7; i++)
            ck_assert_float_eq(args[k].avg[i], (float)(i + 1));
    }
    for (int k = 0; k < 3; k++)
        ss__transport_destroy(args[k].t);
    shard_stop(&a);
    shard_stop(&b);
}
END_TEST

/* 100 MB (25M floats) in one exchange: 100 chunks of 1 MiB in parallel. */
START_TEST(test_100mb_group) {
    const size_t n = 25u << 20;
    shard a;
    shard_start(&a, SS_GRPC_CHUNK_FLOATS);
    ss__grpc_transport_config cfg = {.targets = a.target, .timeout_ms = 60000};
    ss__transport *t;
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t, NULL, 0), SS_OK);
    float *s = malloc(n * sizeof *s), *d = malloc(n * sizeof *d);
    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_nonnull(d);
    for (size_t i = 0; i < n; i++)
        s[i] = (float)(i % 1000);
    uint64_t m;
    ck_assert_int_eq(ss__transport_join(t, "big", n, &m), SS_OK);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "big", m, s, 0.5f, d, n), SS_OK);
    for (size_t i = 0; i < n; i++)
        s[i] += 2.0f;
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "big", m, s, 0.5f, d, n), SS_OK);
    for (size_t i = 0; i < n; i += 4099)
        ck_assert_float_eq(d[i], 1.0f); /* 0.5 * (s - c) */
    ck_assert_float_eq(d[n - 1], 1.0f);
    free(s);
    free(d);
    ss__transport_destroy(t);
    shard_stop(&a);
}
END_TEST

START_TEST(test_bad_target_lists) {
    ss__transport *t;
    ss__grpc_transport_config cfg = {.targets = "", .timeout_ms = 100};
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t, NULL, 0), SS_ERR_INVALID_ARGUMENT);
    cfg.targets = ",,";
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t, NULL, 0), SS_ERR_INVALID_ARGUMENT);
    cfg.targets = "127.0.0.1:1";
    cfg.timeout_ms = 0;
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t, NULL, 0), SS_ERR_INVALID_ARGUMENT);
}
END_TEST

SS_CHECK_MAIN("sharding", 120, NULL, NULL, test_cut_over_two_shards_and_chunks,
              test_partial_easgd_returns_the_applied_chunks, test_round_mean_over_shards_and_chunks,
              test_100mb_group, test_bad_target_lists, test_a_restarted_shard_alone_is_joined_again)
