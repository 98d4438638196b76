/* Dense groups cut again while members keep syncing (rpc/dense/
 * recut_transport.h): two real shadowsync-ps on 127.0.0.1 follow one shard
 * map file; the fleet grows from one PS to two and shrinks back. Values
 * are counted by hand: a group of 10 floats in chunks of 4 whose S-EASGD
 * centre must be the same after each re-cut, on whichever PS holds each
 * chunk now. */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "common/clock.h"
#include "procs.h"
#include "rpc/dense/recut_transport.h"

enum { N = 10, CHUNK = 4 };
/* A late member's seed (alpha 1e-6) moves a chunk another one synced by
 * a few millionths; a lost or stale centre is off by 1 or more. */
#define TOL 1e-4f

static char g_dir[64], g_map[128], g_addr[2][64], g_both[160]; /* g_both: "a,b" */
static pid_t g_pid[2];
/* The fleet serves bulk streams and the members use them (the defaults),
 * or neither does (gRPC only); each test runs in a process of its own:
 * set by the test. */
static bool g_bulk;

/* Writes the map and waits until both PS serve its epoch (each reads it
 * every 200 ms; on a loaded machine later). */
static void write_map(uint64_t epoch, const char *ps, const char *from) {
    ss__check_write_map(g_map, epoch, ps, from);
    char line[64];
    snprintf(line, sizeof line, "event=shard_map_epoch epoch=%llu ", (unsigned long long)epoch);
    for (int i = 0; i < 2; i++) {
        char log[128];
        snprintf(log, sizeof log, "%s/ps%d.log", g_dir, i);
        ck_assert_msg(proc_wait_for(log, line, 60), "PS %d never served epoch %llu", i,
                      (unsigned long long)epoch);
    }
}

/* Two PS on the one map file; the map then names the first alone. */
static void start_fleet(void) {
    ss__check_tmpdir(g_dir, "ss-recut");
    snprintf(g_map, sizeof g_map, "%s/fleet.map", g_dir);
    ss__check_write_map(g_map, 1, "127.0.0.1:1", NULL); /* a placeholder: ports come later */
    for (int i = 0; i < 2; i++) {
        char log[128];
        snprintf(log, sizeof log, "%s/ps%d.log", g_dir, i);
        char bulk_at[32]; /* a buffer: gcc 12 misreads a literal here (-Wstring-compare) */
        snprintf(bulk_at, sizeof bulk_at, "%s", g_bulk ? "127.0.0.1:0" : "");
        /* 18: as many as proc_start_ps reads (gcc's -Warray-bounds) */
        char *extra[18] = {"--http",
                           "",
                           "--shard-map",
                           g_map,
                           "--round-deadline-ms",
                           "300",
                           "--member-timeout-ms",
                           "1000",
                           "--bulk-listen",
                           bulk_at};
        setenv("SHADOWSYNC_LOG_LEVEL", "info", 1); /* its map epochs: write_map waits on them */
        g_pid[i] = proc_start_ps(log, g_addr[i], sizeof g_addr[i], "127.0.0.1:0", extra);
        setenv("SHADOWSYNC_LOG_LEVEL", "warn", 1);
    }
    snprintf(g_both, sizeof g_both, "%s,%s", g_addr[0], g_addr[1]);
    write_map(2, g_addr[0], NULL);
}

static void stop_fleet(void) {
    for (int i = 0; i < 2; i++) {
        kill(g_pid[i], SIGTERM);
        ck_assert_int_eq(proc_wait(g_pid[i], 30), 0);
    }
    ss__check_rmdir(g_dir);
}

static ss__transport *member_transport(void) {
    const ss__grpc_transport_config cfg = {
        .timeout_ms = 3000, .round_wait_ms = 2000, .chunk_floats = CHUNK, .bulk = g_bulk};
    ss__transport *t;
    ck_assert_int_eq(ss__recut_transport_create(g_map, &cfg, &t, NULL, 0), SS_OK);
    return t;
}

static void check_centre(ss__transport *t, const float *want) {
    float c[N];
    ck_assert_int_eq(ss__transport_read_central(t, "w", c, N), SS_OK);
    for (int i = 0; i < N; i++)
        ck_assert_msg(fabsf(c[i] - want[i]) < TOL, "centre[%d] = %.7g, want %g", i, c[i], want[i]);
}

/* An exchange of snapshot c + lead: d = 0.5 lead everywhere when the
 * member's chunks hold centre c; then the centre moves to c + d. */
static ss_status exchange_ahead(ss__transport *t, uint64_t m, float *c, float lead) {
    float s[N], d[N];
    for (int i = 0; i < N; i++)
        s[i] = c[i] + lead;
    ss_status st = ss__transport_easgd_exchange(t, "w", m, s, 0.5f, d, N);
    for (int i = 0; i < N; i++) {
        if (st == SS_OK)
            ck_assert_msg(fabsf(d[i] - 0.5f * lead) < TOL, "d[%d] = %.7g, want %g", i, d[i],
                          0.5f * lead);
        else
            ck_assert_float_eq(d[i], 0.0f); /* a failed call applied nothing */
        c[i] += d[i];
    }
    return st;
}

/* The fleet, and two members of group "w" on it. */
static void start_two_members(ss__transport *t[2], uint64_t m[2]) {
    start_fleet();
    for (int k = 0; k < 2; k++) {
        t[k] = member_transport();
        ck_assert_int_eq(ss__transport_join(t[k], "w", N, &m[k]), SS_OK);
    }
}

/* 1 -> 2 -> 1 PS with two members: the first to see the new map re-cuts
 * but cannot join the chunk that overlaps one the other member is still
 * in (its call fails, nothing applied); once the other re-cuts too, both
 * sync on the new cut from where the centre was: each chunk's centre
 * moved with it, whether its PS is new, its range new, or it sat unsynced
 * on the first PS while the fleet had two (chunk [8:10)). The PS the
 * map leaves retires its chunks as their last member leaves them. */
static void easgd_centres_move_with_their_ranges(void) {
    ss__transport *t[2];
    uint64_t m[2];
    start_two_members(t, m);
    float c[N], d[N];
    for (int i = 0; i < N; i++)
        c[i] = (float)(i + 1);
    ck_assert_int_eq(ss__transport_easgd_exchange(t[0], "w", m[0], c, 0.5f, d, N), SS_OK);
    ck_assert_int_eq(exchange_ahead(t[1], m[1], c, 2.0f), SS_OK); /* c: 2 .. 11 */
    check_centre(t[0], c);
    const char *fleets[2] = {g_both, g_addr[0]};
    for (int change = 0; change < 2; change++) {
        write_map(3 + (uint64_t)change, fleets[change], fleets[1 - change]);
        /* member 0 re-cuts; chunk [4:5) or [4:8) overlaps member 1's old one */
        ck_assert_int_eq(exchange_ahead(t[0], m[0], c, 4.0f), SS_ERR_STATE);
        ck_assert_uint_eq(ss__recut_transport_epoch(t[0]), 3 + (uint64_t)change);
        ck_assert_int_eq(exchange_ahead(t[1], m[1], c, 4.0f), SS_OK); /* re-cuts, joins */
        ck_assert_int_eq(exchange_ahead(t[0], m[0], c, 2.0f), SS_OK); /* now joins too */
        check_centre(t[0], c);
        check_centre(t[1], c);
        for (int k = 0; k < 2; k++)
            ck_assert_uint_eq(ss__recut_transport_recuts(t[k]), 1 + (uint64_t)change);
    }
    /* The second PS, out of the map now, retired its chunks as their last
     * member left (its floats freed while it still runs). */
    char log[128];
    snprintf(log, sizeof log, "%s/ps1.log", g_dir);
    ck_assert_msg(proc_wait_for(log, "event=chunk_retired group=w", 10),
                  "the PS the map left kept its chunks");
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(ss__transport_leave(t[k], "w", m[k]), SS_OK);
        ss__transport_destroy(t[k]);
    }
}

START_TEST(test_easgd_centres_move_with_their_ranges) {
    easgd_centres_move_with_their_ranges();
    stop_fleet();
}
END_TEST

/* The same on the fleet's bulk streams: a stream lives in the shard map
 * epoch of its ticket, so a call of the old epoch is refused on it as at
 * the gRPC door, and the members re-cut the same way, then open streams
 * of the new epoch (both PS say so in their logs). */
START_TEST(test_easgd_centres_move_on_bulk_streams) {
    g_bulk = true;
    easgd_centres_move_with_their_ranges();
    for (int i = 0; i < 2; i++) {
        char log[128];
        snprintf(log, sizeof log, "%s/ps%d.log", g_dir, i);
        ck_assert_msg(proc_wait_for(log, "event=stream_opened epoch=3", 1),
                      "PS %d served no bulk stream of epoch 3", i);
    }
    char log[128];
    snprintf(log, sizeof log, "%s/ps0.log", g_dir);
    ck_assert_msg(proc_wait_for(log, "event=stream_opened epoch=4", 1),
                  "the PS left in the map served no bulk stream of epoch 4");
    stop_fleet();
}
END_TEST

/* A member that died before it re-cut (it never calls again) holds its
 * old chunks until the PS's member timeout (1 s here) drops it; then the
 * live member's re-cut joins, seeded with the centre as it was. */
START_TEST(test_a_dead_member_holds_a_recut_only_until_it_expires) {
    ss__transport *t[2];
    uint64_t m[2];
    start_two_members(t, m);
    float c[N], d[N];
    for (int i = 0; i < N; i++)
        c[i] = (float)(2 * i);
    ck_assert_int_eq(ss__transport_easgd_exchange(t[1], "w", m[1], c, 0.5f, d, N), SS_OK);
    write_map(3, g_both, g_addr[0]);
    ck_assert_int_eq(exchange_ahead(t[0], m[0], c, 4.0f), SS_ERR_STATE); /* t[1] is in [4:8) */
    const uint64_t until = ss__now_ns() + 30000000000ull; /* a loaded machine: well past 1 s */
    ss_status st;
    while ((st = exchange_ahead(t[0], m[0], c, 4.0f)) != SS_OK && ss__now_ns() < until)
        usleep(200000); /* t[1] is silent: dropped after 1 s */
    ck_assert_int_eq(st, SS_OK);
    check_centre(t[0], c);
    ss__transport_destroy(t[0]);
    ss__transport_destroy(t[1]);
    stop_fleet();
}
END_TEST

/* An S-MA member's rounds form again on the new cut; a new epoch with the
 * same list keeps the cut. */
START_TEST(test_rounds_form_again_on_the_new_cut) {
    start_fleet();
    ss__transport *t = member_transport();
    uint64_t m;
    ck_assert_int_eq(ss__transport_join(t, "w", N, &m), SS_OK);
    float s[N], avg[N];
    for (int i = 0; i < N; i++)
        s[i] = (float)(3 * i);
    ss__round_result r;
    ck_assert_int_eq(ss__transport_allreduce_mean(t, "w", m, s, avg, N, &r), SS_OK);
    write_map(3, g_both, g_addr[0]);
    for (int i = 0; i < N; i++)
        s[i] += 1.0f;
    ck_assert_int_eq(ss__transport_allreduce_mean(t, "w", m, s, avg, N, &r), SS_OK);
    for (int i = 0; i < N; i++) /* one member: the mean is its snapshot */
        ck_assert_float_eq(avg[i], s[i]);
    ck_assert_uint_eq(ss__recut_transport_recuts(t), 1);
    write_map(4, g_both, NULL); /* a new epoch, the same list: the same cut, no re-cut */
    ck_assert_int_eq(ss__transport_allreduce_mean(t, "w", m, s, avg, N, &r), SS_OK);
    ck_assert_float_eq(avg[N - 1], s[N - 1]);
    ck_assert_uint_eq(ss__recut_transport_epoch(t), 4);
    ck_assert_uint_eq(ss__recut_transport_recuts(t), 1);
    ck_assert_int_eq(ss__transport_leave(t, "w", m), SS_OK);
    ss__transport_destroy(t);
    stop_fleet();
}
END_TEST

/* Only a re-cutting join retires chunks of another cut, and only those
 * nobody is in: a plain join that overlaps them is still refused (two
 * chunk sizes on one group are a setting mistake, not a re-cut). */
START_TEST(test_only_a_recut_retires_a_memberless_chunk) {
    start_fleet();
    ss__transport *t[3];
    const size_t chunks[3] = {4, 3, 3};
    for (int k = 0; k < 3; k++) {
        const ss__grpc_transport_config cfg = {
            .targets = g_addr[0], .timeout_ms = 3000, .chunk_floats = chunks[k], .recut = k == 2};
        ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t[k], NULL, 0), SS_OK);
    }
    uint64_t m;
    uint64_t first;
    ck_assert_int_eq(ss__transport_join(t[0], "v", 8, &first), SS_OK);
    ck_assert_int_eq(ss__transport_join(t[2], "v", 8, &m), SS_ERR_INVALID_ARGUMENT); /* in use */
    ck_assert_int_eq(ss__transport_leave(t[0], "v", first), SS_OK);
    ck_assert_int_eq(ss__transport_join(t[1], "v", 8, &m), SS_ERR_INVALID_ARGUMENT); /* plain */
    ck_assert_int_eq(ss__transport_join(t[2], "v", 8, &m), SS_OK);
    float c[8];
    ck_assert_int_eq(ss__transport_easgd_exchange(
                         t[2], "v", m, (const float[8]){1, 2, 3, 4, 5, 6, 7, 8}, 0.5f, c, 8),
                     SS_OK);
    ck_assert_int_eq(ss__transport_read_central(t[2], "v", c, 8), SS_OK);
    ck_assert_float_eq(c[7], 8.0f); /* a fresh centre: the old one was retired */
    for (int k = 0; k < 3; k++)
        ss__transport_destroy(t[k]);
    stop_fleet();
}
END_TEST

SS_CHECK_MAIN("dense_recut", 120, NULL, NULL, test_easgd_centres_move_with_their_ranges,
              test_easgd_centres_move_on_bulk_streams,
              test_a_dead_member_holds_a_recut_only_until_it_expires,
              test_rounds_form_again_on_the_new_cut, test_only_a_recut_retires_a_memberless_chunk)
