/* Checks every transport must pass (the in-process one, the gRPC client
 * against a real PS), and rounds of several engines at once. */
#ifndef SS_TESTS_TRANSPORT_CHECKS_H
#define SS_TESTS_TRANSPORT_CHECKS_H

#include <check.h>
#include <pthread.h>

#include "rpc/dense/grpc_transport.h"
#include "shadow/engine.h"
#include "shadow/transport.h"

/* A gRPC transport to target with the bulk streams on, joined to a fresh
 * 2-float group "g" as *member, and its first S-EASGD exchange made. */
static inline ss__transport *stream_member(const char *target, uint32_t timeout_ms,
                                           size_t chunk_floats, uint64_t *member) {
    ss__grpc_transport_config cfg = {
        .targets = target, .timeout_ms = timeout_ms, .chunk_floats = chunk_floats, .bulk = true};
    ss__transport *t;
    ck_assert_int_eq(ss__grpc_transport_create(&cfg, &t, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__transport_join(t, "g", 2, member), SS_OK);
    float d[2];
    ck_assert_int_eq(
        ss__transport_easgd_exchange(t, "g", *member, (const float[]){1, 2}, 0.5f, d, 2), SS_OK);
    return t;
}

/* Two members of a fresh 2-float group, by hand: the centre starts as the
 * first snapshot [2,4] (d = 0); then s = [4,0] gives d = 0.5 (s - c) =
 * [1,-2] and c = [3,2]. */
static inline void check_easgd_by_hand(ss__transport *t, const char *group) {
    uint64_t a, b;
    ck_assert_int_eq(ss__transport_join(t, group, 2, &a), SS_OK);
    ck_assert_int_eq(ss__transport_join(t, group, 2, &b), SS_OK);
    ck_assert_uint_ne(a, b);
    float d[2], c[2];
    ck_assert_int_eq(ss__transport_easgd_exchange(t, group, a, (const float[]){2, 4}, 0.5f, d, 2),
                     SS_OK);
    ck_assert_float_eq(d[0], 0.0f);
    ck_assert_float_eq(d[1], 0.0f);
    ck_assert_int_eq(ss__transport_easgd_exchange(t, group, b, (const float[]){4, 0}, 0.5f, d, 2),
                     SS_OK);
    ck_assert_float_eq(d[0], 1.0f);
    ck_assert_float_eq(d[1], -2.0f);
    ck_assert_int_eq(ss__transport_read_central(t, group, c, 2), SS_OK);
    ck_assert_float_eq(c[0], 3.0f);
    ck_assert_float_eq(c[1], 2.0f);
}

/* One member's S-MA/S-BMUF round call, for running members at once. */
typedef struct member_call {
    ss__transport *t;
    const char *group;
    uint64_t member;
    float s;
    const ss__bmuf_params *bmuf;
    float out;
    ss_status st;
} member_call;

static inline void *member_call_main(void *p) {
    member_call *c = p;
    ss__round_result rr;
    c->st = ss__transport_round(c->t, c->group, c->member, &c->s, c->bmuf, &c->out, 1, &rr);
    return NULL;
}

/* k members contribute their snapshots s[i] at once; each must get want. */
static inline void round_of(ss__transport *t, const char *group, const uint64_t *members, size_t k,
                            const float *s, const ss__bmuf_params *bmuf, float want) {
    member_call c[8];
    pthread_t th[8];
    for (size_t i = 0; i < k; i++) {
        c[i] = (member_call){.t = t, .group = group, .member = members[i], .s = s[i], .bmuf = bmuf};
        pthread_create(&th[i], NULL, member_call_main, &c[i]);
    }
    for (size_t i = 0; i < k; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(c[i].st, SS_OK);
        ck_assert_float_eq(c[i].out, want);
    }
}

/* S-BMUF held by the aggregator, by hand (Nesterov, eta 0.5, zeta 1; a
 * 1-float group): round 1 of snapshots {1, 3} starts the state at the
 * mean, b = 2. Round 2, all at 4: G = 4 - 2 = 2, m = 2, w = 4, b = 5.
 * A third member joins late; round 3, all at 6: G = 6 - 5 = 1, m = 2,
 * w = 6, b = 7, and the late joiner gets the same b as the others. A call
 * with other parameters, or as S-MA, is refused. */
static inline void check_bmuf_rounds_by_hand(ss__transport *t, const char *group) {
    const ss__bmuf_params p = {.eta = 0.5f, .zeta = 1.0f, .nesterov = true};
    uint64_t m[3];
    ck_assert_int_eq(ss__transport_join(t, group, 1, &m[0]), SS_OK);
    ck_assert_int_eq(ss__transport_join(t, group, 1, &m[1]), SS_OK);
    round_of(t, group, m, 2, (const float[]){1, 3}, &p, 2.0f);
    round_of(t, group, m, 2, (const float[]){4, 4}, &p, 5.0f);
    ck_assert_int_eq(ss__transport_join(t, group, 1, &m[2]), SS_OK);
    round_of(t, group, m, 3, (const float[]){6, 6, 6}, &p, 7.0f);
    float b;
    ck_assert_int_eq(ss__transport_read_central(t, group, &b, 1), SS_OK);
    ck_assert_float_eq(b, 7.0f); /* the model a checkpoint or eval reads */
    ss__round_result rr;
    float out;
    const ss__bmuf_params other = {.eta = 0.25f, .zeta = 1.0f, .nesterov = true};
    ck_assert_int_eq(ss__transport_round(t, group, m[0], (const float[]){1}, &other, &out, 1, &rr),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss__transport_round(t, group, m[0], (const float[]){1}, NULL, &out, 1, &rr),
                     SS_ERR_INVALID_ARGUMENT);
}

/* Several engines run one round at once, one thread each (an MA/BMUF
 * round closes only when every member has contributed). */
typedef struct round_arg {
    ss__engine *e;
    ss__engine_group *g;
    ss_status st;
} round_arg;

/* Member k of a round test: an engine of one thread on t, and in it
 * group over a replica of n floats, float i of it k * mean(i) (over
 * members 0, 1 and 2 the mean is mean(i)); into a->e, a->g and *r. */
static inline void start_round_member(ss__transport *t, const char *group, const ss__sync_params *p,
                                      int n, int k, double (*mean)(int i), ss__replica **r,
                                      round_arg *a) {
    const ss__engine_config cfg = {.transport = t, .threads = 1};
    ck_assert_int_eq(ss__engine_create(&cfg, &a->e, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__replica_create((size_t)n, r, NULL, 0), SS_OK);
    for (int i = 0; i < n; i++)
        ss__replica_data(*r)[i] = (float)(k * mean(i));
    ck_assert_int_eq(ss__engine_add_group(a->e, group, *r, p, &a->g), SS_OK);
}

/* The engines and replicas of start_round_member's members. */
static inline void stop_round_members(round_arg *a, ss__replica **r, int members) {
    for (int k = 0; k < members; k++) {
        ss__engine_destroy(a[k].e);
        ss__replica_destroy(r[k]);
    }
}

/* pthread start routine: runs one round of a->g, its status in a->st. */
static inline void *run_one_round(void *p) {
    round_arg *a = p;
    a->st = ss__engine_run_round(a->e, a->g);
    return NULL;
}

/* `rounds` MA/BMUF rounds of `members` engines together (members <= 16),
 * each of which must succeed. */
static inline void run_rounds_together(round_arg *args, int members, int rounds) {
    pthread_t th[16];
    ck_assert_int_le(members, 16);
    for (int round = 0; round < rounds; round++) {
        for (int k = 0; k < members; k++)
            pthread_create(&th[k], NULL, run_one_round, &args[k]);
        for (int k = 0; k < members; k++) {
            pthread_join(th[k], NULL);
            ck_assert_int_eq(args[k].st, SS_OK);
        }
    }
}

/* After rounds together: the largest gap of a member's replica to member
 * 0's in *spread, and of member 0's to want(i) (the mean the round should
 * give) in *off, over n floats. */
static inline void replicas_agree(ss__replica *const *r, int members, int n, double (*want)(int),
                                  double *spread, double *off) {
    *spread = *off = 0;
    for (int i = 0; i < n; i++) {
        float x0 = ss__replica_data(r[0])[i];
        for (int k = 1; k < members; k++)
            *spread = fmax(*spread, fabs((double)ss__replica_data(r[k])[i] - x0));
        *off = fmax(*off, fabs((double)x0 - want(i)));
    }
}

/* A member whose replica stands still (an engine whose gap it never
 * reaches, its replica [2, 4, 6] never stepped) takes part in a round
 * another member opens (a foreground round of `opener`'s engine on to):
 * the round is the mean of both, [1, 2, 3] in both replicas, not the
 * opener's snapshot alone at the deadline, which must be long. to and ts
 * may be one transport. */
static inline void check_still_member_joins(ss__transport *to, ss__transport *ts) {
    ss__sync_params p = {.algo = SS_ALGO_MA};
    ss__engine *opener, *still;
    ss__replica *ro, *rs;
    ss__engine_group *go, *gs;
    ck_assert_int_eq(
        ss__engine_create(&(ss__engine_config){.transport = to, .threads = 1}, &opener, NULL, 0),
        SS_OK);
    ck_assert_int_eq(
        ss__engine_create(
            &(ss__engine_config){.transport = ts, .threads = 1, .min_round_gap = 1000000}, &still,
            NULL, 0),
        SS_OK);
    ck_assert_int_eq(ss__replica_create(3, &ro, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__replica_create(3, &rs, NULL, 0), SS_OK);
    for (int i = 0; i < 3; i++)
        ss__replica_data(rs)[i] = (float)(2 * (i + 1));
    ck_assert_int_eq(ss__engine_add_group(opener, "dense", ro, &p, &go), SS_OK);
    ck_assert_int_eq(ss__engine_add_group(still, "dense", rs, &p, &gs), SS_OK);
    /* No round open yet (1: a member id of the in-process transport; an
     * unknown one elsewhere, where the answer is no as well). */
    ck_assert(!ss__transport_round_waiting(ts, "dense", 1));
    ck_assert_int_eq(ss__engine_start(still, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__engine_run_round(opener, go), SS_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_float_eq(ss__replica_data(ro)[i], (float)(i + 1)); /* not its own: both */
    ss__engine_stop(still); /* its round's delta is applied by then */
    for (int i = 0; i < 3; i++)
        ck_assert_float_eq(ss__replica_data(rs)[i], (float)(i + 1));
    ss__engine_destroy(opener);
    ss__engine_destroy(still);
    ss__replica_destroy(ro);
    ss__replica_destroy(rs);
}

#endif
