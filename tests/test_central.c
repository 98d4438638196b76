/* The in-process backend's membership (expiry, heartbeats, rejoin) and its
 * checkpoints (bit-exact round trip, torn and corrupted files refused). */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_run.h"
#include "common/clock.h"
#include "planted_link.h"
#include "ps/group_metrics.h"
#include "shadow/central.h"
#include "shadow/dense_checkpoint.h"
#include "shadow/engine.h"
#include "shadow/inproc_transport.h"
#include "shadow/transport.h"
#include "transport_checks.h"

static ss__transport *make(uint32_t deadline_ms, uint32_t timeout_ms) {
    ss__transport *t;
    ss__inproc_config cfg = {.round_deadline_ms = deadline_ms, .member_timeout_ms = timeout_ms};
    ck_assert_int_eq(ss__inproc_transport_create(&cfg, &t, NULL, 0), SS_OK);
    return t;
}

/* A centre whose rounds close after 100 ms and whose members expire after
 * 150 ms of silence, with two members of group "g" (1 float): a and b. */
static ss__transport *two_members(uint64_t *a, uint64_t *b) {
    ss__transport *t = make(100, 150);
    ck_assert_int_eq(ss__transport_join(t, "g", 1, a), SS_OK);
    ck_assert_int_eq(ss__transport_join(t, "g", 1, b), SS_OK);
    return t;
}

START_TEST(test_member_timeout_must_cover_the_deadline) {
    ss__transport *t;
    ss__inproc_config cfg = {.round_deadline_ms = 500, .member_timeout_ms = 100};
    ck_assert_int_eq(ss__inproc_transport_create(&cfg, &t, NULL, 0), SS_ERR_INVALID_ARGUMENT);
}
END_TEST

/* A member that goes silent is dropped: the first round after it still
 * waits for the deadline, later rounds close at once. */
START_TEST(test_silent_member_expires) {
    uint64_t a, b;
    ss__transport *t = two_members(&a, &b);
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

/* Member a's round (its snapshot 4) in a thread of its own, returned once
 * the snapshot is in: member b, which has not sent one, sees the round
 * wait for it. */
static void round_waiting_for(ss__transport *t, uint64_t a, uint64_t b, member_call *ra,
                              pthread_t *th) {
    *ra = (member_call){.t = t, .group = "g", .member = a, .s = 4};
    ck_assert_int_eq(pthread_create(th, NULL, member_call_main, ra), 0);
    while (!ss__transport_round_waiting(t, "g", b))
        ss__sleep_ns(1000000ull);
}

/* That round ended (since t0) before its 60 s deadline, a's snapshot alone
 * its mean. */
static void round_ended_alone(member_call *ra, pthread_t th, uint64_t t0) {
    pthread_join(th, NULL);
    ck_assert_uint_lt(ss__now_ns() - t0, 30000000000ull); /* not the deadline */
    ck_assert_int_eq(ra->st, SS_OK);
    ck_assert_float_eq(ra->out, 4.0f);
}

/* A join with the key of a member replaces it (an agent's trainer through
 * a restarted agent): an open round that waited for the old one closes,
 * the old id is gone, and other keys (and no key) are other members. No
 * expiry and a 60 s deadline: only the replacement ends the round. */
START_TEST(test_a_keyed_join_replaces_its_earlier_self) {
    ss__transport *t = make(60000, 0);
    uint64_t a, b, b2, c, d;
    ck_assert_int_eq(ss__transport_join(t, "g", 1, &a), SS_OK);
    ck_assert_int_eq(ss__transport_join_keyed(t, "g", 1, 7, &b), SS_OK);
    member_call ra;
    pthread_t th;
    round_waiting_for(t, a, b, &ra, &th);
    const uint64_t t0 = ss__now_ns();
    ck_assert_int_eq(ss__transport_join_keyed(t, "g", 1, 7, &b2), SS_OK);
    round_ended_alone(&ra, th, t0);
    ck_assert_int_eq(ss__transport_heartbeat(t, "g", b), SS_ERR_NOT_FOUND);
    ck_assert_int_eq(ss__transport_heartbeat(t, "g", b2), SS_OK);
    /* Another key and no key replace nobody. */
    ck_assert_int_eq(ss__transport_join_keyed(t, "g", 1, 8, &c), SS_OK);
    ck_assert_int_eq(ss__transport_join(t, "g", 1, &d), SS_OK);
    ck_assert_int_eq(ss__transport_join(t, "g", 1, &d), SS_OK);
    ck_assert_int_eq(ss__transport_heartbeat(t, "g", a), SS_OK);
    ck_assert_int_eq(ss__transport_heartbeat(t, "g", b2), SS_OK);
    ck_assert_int_eq(ss__transport_heartbeat(t, "g", c), SS_OK);
    ss__transport_destroy(t);
}
END_TEST

/* A new shard map closes the open rounds at once (ps/main.c): a member's
 * snapshot that is in gets its round's result (its own, alone) instead of
 * waiting out a 60 s deadline for members whose calls are now refused;
 * with no round open, nothing is closed. */
START_TEST(test_open_rounds_close_on_demand) {
    ss__transport *t = make(60000, 0);
    uint64_t a, b;
    ck_assert_int_eq(ss__transport_join(t, "g", 1, &a), SS_OK);
    ck_assert_int_eq(ss__transport_join(t, "g", 1, &b), SS_OK);
    ck_assert_uint_eq(ss__central_close_open_rounds(ss__inproc_central(t)), 0);
    member_call ra;
    pthread_t th;
    round_waiting_for(t, a, b, &ra, &th);
    const uint64_t t0 = ss__now_ns();
    ck_assert_uint_eq(ss__central_close_open_rounds(ss__inproc_central(t)), 1);
    round_ended_alone(&ra, th, t0);
    ck_assert(!ss__transport_round_waiting(t, "g", b)); /* the next round is empty */
    ck_assert_uint_eq(ss__central_close_open_rounds(ss__inproc_central(t)), 0);
    ss__transport_destroy(t);
}
END_TEST

/* Heartbeats keep an idle member in: rounds keep waiting for it. */
START_TEST(test_heartbeat_keeps_member) {
    uint64_t a, b;
    ss__transport *t = two_members(&a, &b);
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
    ck_assert_int_eq(ss__engine_create(&ecfg, &e, NULL, 0), SS_OK);
    ss__replica *r;
    ck_assert_int_eq(ss__replica_create(2, &r, NULL, 0), SS_OK);
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
    ck_assert_int_eq(ss__central_save(ss__inproc_central(t), path, &groups), SS_OK);
    ck_assert_uint_eq(groups, 2);
    ss__transport_destroy(t);

    t = make(100, 0);
    ck_assert_int_eq(ss__central_load(ss__inproc_central(t), path, &groups), SS_OK);
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

/* A delta holds only the groups changed since the last one; a base all of
 * them. Groups a and b exchange; base: both. b exchanges again: the delta
 * holds b only. Nothing changes: the next delta holds none. Loaded over a
 * fresh centre after the base, the delta brings b's new centre and leaves
 * a as the base had it. */
START_TEST(test_delta_holds_changed_groups_only) {
    ss__transport *t = make(100, 0);
    ss__central *c = ss__inproc_central(t);
    uint64_t ma, mb;
    float d[2];
    ck_assert_int_eq(ss__transport_join(t, "a", 2, &ma), SS_OK);
    ck_assert_int_eq(ss__transport_join(t, "b", 2, &mb), SS_OK);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "a", ma, (const float[]){1, 1}, 0.5f, d, 2),
                     SS_OK);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "b", mb, (const float[]){2, 2}, 0.5f, d, 2),
                     SS_OK);
    char base[128], delta[140], empty[140];
    tmp_path(base, sizeof base);
    snprintf(delta, sizeof delta, "%s.delta", base);
    snprintf(empty, sizeof empty, "%s.empty", base);
    size_t groups = 0;
    ck_assert_int_eq(ss__central_save_delta(c, base, true, &groups), SS_OK);
    ck_assert_uint_eq(groups, 2);
    /* b: centre 2, snapshot 4: d = 0.5 (4 - 2) = 1, centre 3 */
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "b", mb, (const float[]){4, 4}, 0.5f, d, 2),
                     SS_OK);
    ck_assert_int_eq(ss__central_save_delta(c, delta, false, &groups), SS_OK);
    ck_assert_uint_eq(groups, 1);
    ck_assert_int_eq(ss__central_save_delta(c, empty, false, &groups), SS_OK);
    ck_assert_uint_eq(groups, 0);
    ss__transport_destroy(t);

    t = make(100, 0);
    c = ss__inproc_central(t);
    ck_assert_int_eq(ss__central_load(c, base, &groups), SS_OK);
    ck_assert_int_eq(ss__central_load(c, delta, &groups), SS_OK);
    ck_assert_uint_eq(groups, 1);
    ck_assert_int_eq(ss__central_load(c, empty, &groups), SS_OK);
    float ca[2], cb[2];
    ck_assert_int_eq(ss__transport_read_central(t, "a", ca, 2), SS_OK);
    ck_assert_int_eq(ss__transport_read_central(t, "b", cb, 2), SS_OK);
    ck_assert_float_eq(ca[0], 1.0f);
    ck_assert_float_eq(cb[0], 3.0f);
    ss__transport_destroy(t);
    unlink(base);
    unlink(delta);
    unlink(empty);
}
END_TEST

/* S-BMUF's global state survives a PS restart: two rounds by hand (as in
 * check_bmuf_rounds_by_hand: b = 2, then G = 2, m = 2, w = 4, b = 5),
 * save, a fresh transport loads the file, the members join again, and the
 * next round at 6 gives G = 1, m = 2, w = 6, b = 7: the momentum went on.
 * (Without w and m in the file the state would restart at the mean: 6.)
 * The restored group keeps its parameters: others are refused. */
START_TEST(test_checkpoint_keeps_bmuf_state) {
    const ss__bmuf_params p = {.eta = 0.5f, .zeta = 1.0f, .nesterov = true};
    ss__transport *t = make(5000, 0);
    uint64_t m[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(ss__transport_join(t, "bmuf", 1, &m[i]), SS_OK);
    round_of(t, "bmuf", m, 2, (const float[]){1, 3}, &p, 2.0f);
    round_of(t, "bmuf", m, 2, (const float[]){4, 4}, &p, 5.0f);
    char path[128];
    tmp_path(path, sizeof path);
    size_t groups = 0;
    ck_assert_int_eq(ss__central_save(ss__inproc_central(t), path, &groups), SS_OK);
    ss__transport_destroy(t);

    t = make(5000, 0);
    ck_assert_int_eq(ss__central_load(ss__inproc_central(t), path, &groups), SS_OK);
    ck_assert_uint_eq(groups, 1);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(ss__transport_join(t, "bmuf", 1, &m[i]), SS_OK);
    ss__round_result rr;
    float out;
    const ss__bmuf_params other = {.eta = 0.25f, .zeta = 1.0f, .nesterov = true};
    ck_assert_int_eq(ss__transport_round(t, "bmuf", m[0], (const float[]){1}, &other, &out, 1, &rr),
                     SS_ERR_INVALID_ARGUMENT);
    round_of(t, "bmuf", m, 2, (const float[]){6, 6}, &p, 7.0f);
    ss__transport_destroy(t);
    unlink(path);
}
END_TEST

/* FNV-1a, as the file's trailer (shadow/dense_checkpoint.c). */
static uint64_t fnv1a(const unsigned char *b, size_t n) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* A checkpoint of the first layout ("SSDENSE1", no BMUF byte), written
 * byte by byte here, still loads: group "g" of 1 float, central 2.5. */
/* A file of the first layout ("SSDENSE1") with one group "g" of one float,
 * its hash right. */
static void write_first_layout(const char *path, float central) {
    unsigned char buf[64];
    size_t len = 0;
#define PUT(v)                                                                                     \
    do {                                                                                           \
        memcpy(buf + len, &(v), sizeof(v));                                                        \
        len += sizeof(v);                                                                          \
    } while (0)
    memcpy(buf, "SSDENSE1", 8);
    len = 8;
    uint32_t count = 1, namelen = 1;
    uint64_t n = 1, round = UINT64_MAX;
    uint8_t has_central = 1, has_mean = 0;
    PUT(count);
    PUT(namelen);
    buf[len++] = 'g';
    PUT(n);
    PUT(has_central);
    PUT(has_mean);
    PUT(round);
    PUT(central);
    uint64_t h = fnv1a(buf, len);
    PUT(h);
#undef PUT
    FILE *f = fopen(path, "wb");
    ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
}

START_TEST(test_checkpoint_reads_the_first_layout) {
    char path[128];
    tmp_path(path, sizeof path);
    write_first_layout(path, 2.5f);
    ss__transport *t = make(100, 0);
    size_t groups = 0;
    ck_assert_int_eq(ss__central_load(ss__inproc_central(t), path, &groups), SS_OK);
    ck_assert_uint_eq(groups, 1);
    float c;
    ck_assert_int_eq(ss__transport_read_central(t, "g", &c, 1), SS_OK);
    ck_assert_float_eq(c, 2.5f);
    ss__transport_destroy(t);
    unlink(path);
}
END_TEST

/* No NaN or Inf goes into a checkpoint or comes out of one: the EASGD
 * overflow attack (-3e38, then 3e38) is refused and the centre stays
 * finite through a save and a load; a writer given an Inf fails without
 * touching the file; a file with an Inf and a right hash (an older build,
 * or forged) is refused at restore. */
START_TEST(test_checkpoint_never_holds_inf) {
    ss__transport *t = make(100, 0);
    uint64_t m;
    float d[1], c;
    ck_assert_int_eq(ss__transport_join(t, "g", 1, &m), SS_OK);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", m, (const float[]){-3e38f}, 0.5f, d, 1),
                     SS_OK);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", m, (const float[]){3e38f}, 0.5f, d, 1),
                     SS_ERR_NON_FINITE);
    ck_assert_int_eq(ss__transport_read_central(t, "g", &c, 1), SS_OK);
    ck_assert_float_eq(c, -3e38f);
    char path[128];
    tmp_path(path, sizeof path);
    size_t groups;
    ck_assert_int_eq(ss__central_save(ss__inproc_central(t), path, &groups), SS_OK);
    ss__transport_destroy(t);
    t = make(100, 0);
    ck_assert_int_eq(ss__central_load(ss__inproc_central(t), path, &groups), SS_OK);
    ck_assert_int_eq(ss__transport_read_central(t, "g", &c, 1), SS_OK);
    ck_assert_float_eq(c, -3e38f);
    ss__transport_destroy(t);

    ss__dense_ckpt_writer *w;
    const float inf = INFINITY;
    ck_assert_int_eq(ss__dense_ckpt_begin(path, 1, &w), SS_OK);
    ss__dense_ckpt_put(w, &(ss__dense_ckpt_group){.name = "g", .n = 1, .central = &inf});
    ck_assert_int_eq(ss__dense_ckpt_commit(w), SS_ERR_NON_FINITE);
    t = make(100, 0);
    ck_assert_int_eq(ss__central_load(ss__inproc_central(t), path, &groups),
                     SS_OK); /* the last good one */
    ss__transport_destroy(t);

    write_first_layout(path, INFINITY);
    t = make(100, 0);
    ck_assert_int_eq(ss__central_load(ss__inproc_central(t), path, &groups), SS_ERR_NON_FINITE);
    ck_assert_int_eq(ss__transport_read_central(t, "g", &c, 1), SS_ERR_NOT_FOUND);
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
    ck_assert_int_eq(ss__central_save(ss__inproc_central(t), path, &groups), SS_OK);
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
        ck_assert_int_eq(ss__central_load(ss__inproc_central(t), path, &groups), SS_ERR_PARSE);
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
        ck_assert_int_eq(ss__central_load(ss__inproc_central(t), path, &groups), SS_ERR_PARSE);
        ss__transport_destroy(t);
    }
    unlink(path);
    t = make(100, 0);
    ck_assert_int_eq(ss__central_load(ss__inproc_central(t), path, &groups), SS_ERR_NOT_FOUND);
    ck_assert_int_eq(ss__central_save(ss__inproc_central(t), "/nonexistent-dir/x", &groups),
                     SS_ERR_IO);
    ss__transport_destroy(t);
}
END_TEST

/* A link planted where the writer used to put its temporary file
 * (dense.ckpt.tmp) is never written through: a root PS overwrote the
 * link's target before. The checkpoint is written, the target is not. */
START_TEST(test_checkpoint_does_not_follow_a_planted_link) {
    char path[128], planted[160], target[160];
    tmp_path(path, sizeof path);
    snprintf(planted, sizeof planted, "%s.tmp", path);
    snprintf(target, sizeof target, "%s.target", path);
    plant_link(planted, target);
    ss__transport *t = make(100, 0);
    uint64_t m;
    float d[2];
    ck_assert_int_eq(ss__transport_join(t, "g", 2, &m), SS_OK);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, "g", m, (const float[]){1, 2}, 0.5f, d, 2),
                     SS_OK);
    size_t groups;
    ck_assert_int_eq(ss__central_save(ss__inproc_central(t), path, &groups), SS_OK);
    ss__transport_destroy(t);
    assert_not_written_through(target);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 0777, 0600);
    unlink(path);
    unlink(planted);
    unlink(target);
}
END_TEST

/* The PS's /metrics text after a refresh of gm (caller frees). */
static char *scrape(ss__ps_group_metrics *gm, ss__metrics *m) {
    ss__ps_group_metrics_refresh(gm);
    char *text = NULL;
    size_t len;
    ck_assert_int_eq(ss__metrics_render(m, &text, &len), SS_OK);
    return text;
}

/* A group's series on the PS's /metrics follow the group: its members as
 * they join and leave, and once the chunk is retired (a re-cut, on a PS
 * the shard map left) no series at all, not its last values for ever;
 * made again, it has them again. */
START_TEST(test_group_series_go_with_their_group) {
    ss__metrics *m;
    ss__central *c;
    ss__ps_group_metrics *gm;
    ck_assert_int_eq(ss__metrics_create(&m, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__central_create(NULL, &c, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__ps_group_metrics_create(m, c, 16, &gm, NULL, 0), SS_OK);
    uint64_t id;
    ck_assert_int_eq(ss__central_join(c, "dense[0:4)", 4, 0, &id), SS_OK);
    char *text = scrape(gm, m);
    ck_assert_ptr_nonnull(strstr(text, "shadowsync_ps_members{group=\"dense[0:4)\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(text, "shadowsync_ps_dense_floats 4\n"));
    free(text);
    ck_assert_int_eq(ss__central_leave(c, "dense[0:4)", id), SS_OK);
    text = scrape(gm, m);
    ck_assert_ptr_nonnull(strstr(text, "shadowsync_ps_members{group=\"dense[0:4)\"} 0\n"));
    free(text);
    ck_assert(ss__central_retire_empty(c, "dense[0:4)"));
    text = scrape(gm, m);
    ck_assert_msg(!strstr(text, "group=\"dense[0:4)\""), "a retired group's series:\n%s", text);
    ck_assert_ptr_nonnull(strstr(text, "shadowsync_ps_dense_floats 0\n"));
    free(text);
    ck_assert_int_eq(ss__central_join(c, "dense[0:4)", 4, 0, &id), SS_OK);
    text = scrape(gm, m);
    ck_assert_ptr_nonnull(strstr(text, "shadowsync_ps_members{group=\"dense[0:4)\"} 1\n"));
    free(text);
    ss__ps_group_metrics_destroy(gm);
    ss__central_destroy(c);
    ss__metrics_destroy(m);
}
END_TEST

SS_CHECK_MAIN("membership", 60, NULL, NULL, test_member_timeout_must_cover_the_deadline,
              test_silent_member_expires, test_heartbeat_keeps_member,
              test_engine_rejoins_after_expiry, test_a_keyed_join_replaces_its_earlier_self,
              test_open_rounds_close_on_demand, test_checkpoint_keeps_bmuf_state,
              test_checkpoint_reads_the_first_layout, test_checkpoint_round_trip_is_exact,
              test_delta_holds_changed_groups_only, test_checkpoint_refuses_torn_and_corrupt_files,
              test_checkpoint_never_holds_inf, test_checkpoint_does_not_follow_a_planted_link,
              test_group_series_go_with_their_group)
