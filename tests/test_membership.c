/* The in-process backend's membership (expiry, heartbeats, rejoin) and its
 * checkpoints (bit-exact round trip, torn and corrupted files refused). */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "common/clock.h"
#include "shadow/engine.h"
#include "shadow/inproc_transport.h"
#include "shadow/transport.h"

static ss__transport *make(uint32_t deadline_ms, uint32_t timeout_ms) {
    ss__transport *t;
    ss__inproc_config cfg = {.round_deadline_ms = deadline_ms, .member_timeout_ms = timeout_ms};
    ck_assert_int_eq(ss__inproc_transport_create(&cfg, &t), SS_OK);
    return t;
}

START_TEST(test_member_timeout_must_cover_the_deadline) {
    ss__transport *t;
    ss__inproc_config cfg = {.round_deadline_ms = 500, .member_timeout_ms = 100};
    ck_assert_int_eq(ss__inproc_transport_create(&cfg, &t), SS_ERR_INVALID_ARGUMENT);
}
END_TEST

/* A member that goes silent is dropped: the first round after it still
 * waits for the deadline, later rounds close at once. */
START_TEST(test_silent_member_expires) {
    ss__transport *t = make(100, 150);
    uint64_t a, b;
    ck_assert_int_eq(ss__transport_join(t, "g", 1, &a), SS_OK);
    ck_assert_int_eq(ss__transport_join(t, "g", 1, &b), SS_OK);
    float avg;
    ss__round_result rr;
    ss__sleep_ns(200000000ull); /* both silent for longer than the timeout */
    uint64_t t0 = ss__now_ns();
    ck_assert_int_eq(ss__transport_allreduce_mean(t, "g", a, (const float[]){4}, &avg, 1, &rr),
                     SS_OK);
    ck_assert_uint_eq(rr.participants, 1);
    ck_assert_uint_ge(ss__now_ns() - t0, 90000000ull); /* waited the deadline */
    t0 = ss__now_ns();
    ck_assert_int_eq(ss__transport_allreduce_mean(t, "g", a, (const float[]){6}, &avg, 1, &rr),
                     SS_OK);
    ck_assert_uint_lt(ss__now_ns() - t0, 50000000ull); /* b is gone: no waiting */
    ck_assert_float_eq(avg, 6.0f);
    /* b comes back: not a member any more, so it joins again. */
    ck_assert_int_eq(ss__transport_heartbeat(t, "g", b), SS_ERR_NOT_FOUND);
    ck_assert_int_eq(ss__transport_join(t, "g", 1, &b), SS_OK);
    ck_assert_int_eq(ss__transport_heartbeat(t, "g", b), SS_OK);
    ss__transport_destroy(t);
}
END_TEST

/* Heartbeats keep an idle member in: rounds keep waiting for it. */
START_TEST(test_heartbeat_keeps_member) {
    ss__transport *t = make(100, 150);
    uint64_t a, b;
    ck_assert_int_eq(ss__transport_join(t, "g", 1, &a), SS_OK);
    ck_assert_int_eq(ss__transport_join(t, "g", 1, &b), SS_OK);
    for (int i = 0; i < 5; i++) {
        ss__sleep_ns(60000000ull);
        ck_assert_int_eq(ss__transport_heartbeat(t, "g", a), SS_OK);
        ck_assert_int_eq(ss__transport_heartbeat(t, "g", b), SS_OK);
    }
    ck_assert_int_eq(ss__transport_heartbeat(t, "g", b), SS_OK); /* still a member after 300 ms */
    ss__transport_destroy(t);
}
END_TEST

/* The engine joins again when the other side forgot it. */
START_TEST(test_engine_rejoins_after_expiry) {
    ss__transport *t = make(50, 60);
    ss__engine *e;
    ss__engine_config ecfg = {.transport = t, .threads = 1};
    ck_assert_int_eq(ss__engine_create(&ecfg, &e), SS_OK);
    ss__replica *r;
    ck_assert_int_eq(ss__replica_create(2, &r), SS_OK);
    ss__sync_params p = {.algo = SS_ALGO_EASGD, .alpha = 0.5f};
    ss__engine_group *g;
    ck_assert_int_eq(ss__engine_add_group(e, "g", r, &p, &g), SS_OK);
    uint64_t other;
    ck_assert_int_eq(ss__transport_join(t, "g", 2, &other), SS_OK);
    ck_assert_int_eq(ss__engine_run_round(e, g), SS_OK);
    ss__sleep_ns(100000000ull);
    /* Someone else's heartbeat makes the server notice the silent one. */
    ck_assert_int_eq(ss__transport_heartbeat(t, "g", other), SS_OK);
    ck_assert_int_eq(ss__engine_run_round(e, g), SS_ERR_NOT_FOUND); /* forgotten: rejoins */
    ck_assert_int_eq(ss__engine_run_round(e, g), SS_OK);
    ss__group_stats s;
    ck_assert_int_eq(ss__engine_group_stats(g, &s), SS_OK);
    ck_assert_uint_eq(s.rejoins, 1);
    ck_assert_uint_eq(s.rounds, 2);
    ck_assert_uint_eq(s.failed_rounds, 1);
    ss__engine_destroy(e);
    ss__replica_destroy(r);
    ss__transport_destroy(t);
}
END_TEST

static void tmp_path(char *buf, size_t len) {
    snprintf(buf, len, "/tmp/ss-ckpt-%d-%llu", (int)getpid(), (unsigned long long)ss__now_ns());
}

/* Central variables and round means come back bit for bit. */
START_TEST(test_checkpoint_round_trip_is_exact) {
    ss__transport *t = make(100, 0);
    uint64_t m;
    float d[3], avg[2];
    const float s1[3] = {1.0f / 3.0f, -7.25e-20f, 3.4e38f};
    ck_assert_int_eq(ss__transport_join(t, "easgd", 3, &m), SS_OK);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "easgd", m, s1, 0.5f, d, 3), SS_OK);
    ck_assert_int_eq(
        ss__transport_easgd_exchange(t, "easgd", m, (const float[]){0.1f, 2, -3}, 0.37f, d, 3),
        SS_OK);
    ss__round_result rr;
    ck_assert_int_eq(ss__transport_join(t, "ma", 2, &m), SS_OK);
    ck_assert_int_eq(
        ss__transport_allreduce_mean(t, "ma", m, (const float[]){1e-3f, 5}, avg, 2, &rr), SS_OK);
    float c_easgd[3], c_ma[2];
    ck_assert_int_eq(ss__transport_read_central(t, "easgd", c_easgd, 3), SS_OK);
    ck_assert_int_eq(ss__transport_read_central(t, "ma", c_ma, 2), SS_OK);

    char path[128];
    tmp_path(path, sizeof path);
    size_t groups = 0;
    ck_assert_int_eq(ss__inproc_transport_save(t, path, &groups), SS_OK);
    ck_assert_uint_eq(groups, 2);
    ss__transport_destroy(t);

    t = make(100, 0);
    ck_assert_int_eq(ss__inproc_transport_load(t, path, &groups), SS_OK);
    ck_assert_uint_eq(groups, 2);
    float back3[3], back2[2];
    ck_assert_int_eq(ss__transport_read_central(t, "easgd", back3, 3), SS_OK);
    ck_assert_int_eq(ss__transport_read_central(t, "ma", back2, 2), SS_OK);
    ck_assert_mem_eq(back3, c_easgd, sizeof back3);
    ck_assert_mem_eq(back2, c_ma, sizeof back2);
    /* Members are not restored: old ids are unknown, a size mismatch is
     * still refused. */
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "easgd", 1, s1, 0.5f, d, 3), SS_ERR_NOT_FOUND);
    ck_assert_int_eq(ss__transport_join(t, "easgd", 4, &m), SS_ERR_SIZE_MISMATCH);
    ss__transport_destroy(t);
    unlink(path);
}
END_TEST

START_TEST(test_checkpoint_refuses_torn_and_corrupt_files) {
    ss__transport *t = make(100, 0);
    uint64_t m;
    float d[4];
    ck_assert_int_eq(ss__transport_join(t, "g", 4, &m), SS_OK);
    ck_assert_int_eq(
        ss__transport_easgd_exchange(t, "g", m, (const float[]){1, 2, 3, 4}, 0.5f, d, 4), SS_OK);
    char path[128];
    tmp_path(path, sizeof path);
    size_t groups;
    ck_assert_int_eq(ss__inproc_transport_save(t, path, &groups), SS_OK);
    ss__transport_destroy(t);
    FILE *f = fopen(path, "rb");
    unsigned char buf[256];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);

    /* Torn: every prefix is refused. */
    for (size_t cut = 0; cut < len; cut += 7) {
        f = fopen(path, "wb");
        fwrite(buf, 1, cut, f);
        fclose(f);
        t = make(100, 0);
        ck_assert_int_eq(ss__inproc_transport_load(t, path, &groups), SS_ERR_PARSE);
        ss__transport_destroy(t);
    }
    /* Corrupt: one flipped bit anywhere is refused. */
    for (size_t at = 0; at < len; at += 5) {
        buf[at] ^= 0x10;
        f = fopen(path, "wb");
        fwrite(buf, 1, len, f);
        fclose(f);
        buf[at] ^= 0x10;
        t = make(100, 0);
        ck_assert_int_eq(ss__inproc_transport_load(t, path, &groups), SS_ERR_PARSE);
        ss__transport_destroy(t);
    }
    unlink(path);
    t = make(100, 0);
    ck_assert_int_eq(ss__inproc_transport_load(t, path, &groups), SS_ERR_NOT_FOUND);
    ck_assert_int_eq(ss__inproc_transport_save(t, "/nonexistent-dir/x", &groups), SS_ERR_IO);
    ss__transport_destroy(t);
}
END_TEST

int main(void) {
    return ss__check_tests(
        "membership", 60, NULL, NULL, test_member_timeout_must_cover_the_deadline,
        test_silent_member_expires, test_heartbeat_keeps_member, test_engine_rejoins_after_expiry,
        test_checkpoint_round_trip_is_exact, test_checkpoint_refuses_torn_and_corrupt_files);
}
