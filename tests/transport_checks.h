/* Checks every transport must pass (the in-process one, the gRPC client
 * against a real PS), and rounds of several engines at once. */
#ifndef SS_TESTS_TRANSPORT_CHECKS_H
#define SS_TESTS_TRANSPORT_CHECKS_H

#include <check.h>

#include "shadow/engine.h"
#include "shadow/transport.h"

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

/* Several engines run one round at once, one thread each (an MA/BMUF
 * round closes only when every member has contributed). */
typedef struct round_arg {
    ss__engine *e;
    ss__engine_group *g;
    ss_status st;
} round_arg;

/* pthread start routine: runs one round of a->g, its status in a->st. */
static inline void *run_one_round(void *p) {
    round_arg *a = p;
    a->st = ss__engine_run_round(a->e, a->g);
    return NULL;
}

#endif
