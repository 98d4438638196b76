/* shadow/: the algorithms and kernels against hand-computed values. */
#include <check.h>

#include "check_run.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "common/finite.h"
#include "shadow/algorithms.h"
#include "shadow/kernels.h"

#define EPS 1e-6

static void assert_vec(const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabsf(got[i] - want[i]) < EPS, "element %zu: got %.7g want %.7g", i,
                      (double)got[i], (double)want[i]);
}

START_TEST(test_easgd_server) {
    const float s[] = {1, 2, 3};
    float c[] = {0, 4, 3}, d[3];
    ck_assert_int_eq(ss__easgd_server(s, c, d, 0.5f, 3), SS_OK);
    assert_vec(d, (const float[]){0.5f, -1.0f, 0.0f}, 3);
    assert_vec(c, (const float[]){0.5f, 3.0f, 3.0f}, 3);
    /* The agent applies x -= d: the replica moves toward c by alpha. */
    float x[] = {1, 2, 3};
    ss__kernel_live_add_scaled(x, d, -1.0f, 3);
    assert_vec(x, (const float[]){0.5f, 3.0f, 3.0f}, 3);
}
END_TEST

START_TEST(test_easgd_bad_input) {
    const float s[] = {1, 2};
    float c[] = {0, 0}, d[2];
    ck_assert_int_eq(ss__easgd_server(s, c, d, 0.0f, 2), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss__easgd_server(s, c, d, 1.5f, 2), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss__easgd_server(s, c, d, NAN, 2), SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss__easgd_server(NULL, c, d, 0.5f, 2), SS_ERR_INVALID_ARGUMENT);
    assert_vec(c, (const float[]){0, 0}, 2);
}
END_TEST

START_TEST(test_ma_delta) {
    const float avg[] = {2, 2}, s[] = {1, 3};
    float delta[2];
    ck_assert_int_eq(ss__ma_delta(avg, s, delta, 2), SS_OK);
    assert_vec(delta, (const float[]){1, -1}, 2);
    ck_assert_int_eq(ss__ma_delta(avg, s, delta, 0), SS_ERR_INVALID_ARGUMENT);
}
END_TEST

/* Rounds of S-BMUF on a 2-float group whose second float mirrors the
 * first; each row: the round mean, then the expected m, w and b. */
typedef struct bmuf_round {
    float avg, m, w, b;
} bmuf_round;

static void run_bmuf_rounds(const ss__bmuf_params *p, const bmuf_round *r, int rounds) {
    float w[2], m[2], b[2];
    for (int k = 0; k < rounds; k++) {
        const float avg[2] = {r[k].avg, -r[k].avg};
        ck_assert_int_eq(ss__bmuf_step(p, w, m, b, avg, 2, k == 0), SS_OK);
        assert_vec(m, (const float[]){r[k].m, -r[k].m}, 2);
        assert_vec(w, (const float[]){r[k].w, -r[k].w}, 2);
        assert_vec(b, (const float[]){r[k].b, -r[k].b}, 2);
    }
}

START_TEST(test_bmuf_nesterov_rounds) {
    /* eta 0.5, zeta 1. Round 1 starts the state at the mean (w = b = 2).
     * Round 2: G = 4 - 2 = 2, m = 2, w = 4, b = w + 0.5 m = 5.
     * Round 3: G = 6 - 5 = 1 (measured from b, not from w), m = 0.5*2 + 1 = 2,
     *          w = 6, b = 7.
     * Round 4: nothing moved (avg = b = 7): G = 0, m = 1, w = 7, b = 7.5. */
    ss__bmuf_params p = {.eta = 0.5f, .zeta = 1.0f, .nesterov = true};
    const bmuf_round r[] = {{2, 0, 2, 2}, {4, 2, 4, 5}, {6, 2, 6, 7}, {7, 1, 7, 7.5f}};
    run_bmuf_rounds(&p, r, 4);
}
END_TEST

START_TEST(test_bmuf_classic_rounds) {
    /* eta 0.5, zeta 0.5, b = w. Round 1: w = b = 2.
     * Round 2: G = 4 - 2 = 2, m = 1, w = b = 3.
     * Round 3: G = 5 - 3 = 2, m = 0.5 + 1 = 1.5, w = b = 4.5.
     * Round 4: G = 4.5 - 4.5 = 0, m = 0.75, w = b = 5.25. */
    ss__bmuf_params p = {.eta = 0.5f, .zeta = 0.5f, .nesterov = false};
    const bmuf_round r[] = {
        {2, 0, 2, 2}, {4, 1, 3, 3}, {5, 1.5f, 4.5f, 4.5f}, {4.5f, 0.75f, 5.25f, 5.25f}};
    run_bmuf_rounds(&p, r, 4);
    float w[1], m[1], b[1];
    const float avg[1] = {1};
    ss__bmuf_params bad = {.eta = 1.0f, .zeta = 1.0f};
    ck_assert_int_eq(ss__bmuf_step(&bad, w, m, b, avg, 1, true), SS_ERR_INVALID_ARGUMENT);
    bad = (ss__bmuf_params){.eta = 0.5f, .zeta = 0.0f};
    ck_assert_int_eq(ss__bmuf_step(&bad, w, m, b, avg, 1, true), SS_ERR_INVALID_ARGUMENT);
    ck_assert(!ss__bmuf_params_valid(NULL));
}
END_TEST

START_TEST(test_mean_and_kernels) {
    const float a[] = {1, 2, 3}, b[] = {3, 6, -3};
    float sum[3] = {0}, avg[3];
    ss__mean_add(sum, a, 3);
    ss__mean_add(sum, b, 3);
    ck_assert_int_eq(ss__mean_close(sum, 2, avg, 3), SS_OK);
    assert_vec(avg, (const float[]){2, 4, 0}, 3);
    assert_vec(sum, (const float[]){4, 8, 0}, 3); /* the sum is kept */
    ck_assert_int_eq(ss__mean_close(sum, 0, avg, 3), SS_ERR_INVALID_ARGUMENT);
    double dist2, other2;
    ss__kernel_dist2_norm2(b, a, 3, &dist2, &other2);
    ck_assert_double_eq_tol(other2, 14.0, 1e-12);
    ck_assert_double_eq_tol(dist2, 4 + 16 + 36, 1e-12);
    /* 11 elements: a block of the kernels' 8 lanes and a tail of 3. x = 1..11
     * (sum of squares 11*12*23/6 = 506), y = 2x: |x - y|^2 = 506, |y|^2 = 2024. */
    float x11[11], y11[11], d11[11];
    for (int k = 0; k < 11; k++)
        x11[k] = (float)(k + 1), y11[k] = 2.0f * (float)(k + 1);
    ss__kernel_dist2_norm2(x11, y11, 11, &dist2, &other2);
    ck_assert_double_eq_tol(dist2, 506.0, 1e-12);
    ck_assert_double_eq_tol(other2, 2024.0, 1e-12);
    /* S-EASGD with alpha 0.5, snapshot x and a centre of ones: d = 0.5 (x - 1),
     * |s - c|^2 = 0^2 + ... + 10^2 = 385 and |c|^2 = 11. */
    for (int k = 0; k < 11; k++)
        d11[k] = 0.5f * (x11[k] - 1.0f);
    ss__kernel_easgd_divergence(x11, d11, 0.5f, 11, &dist2, &other2);
    ck_assert_double_eq_tol(dist2, 385.0, 1e-12);
    ck_assert_double_eq_tol(other2, 11.0, 1e-12);
    ck_assert(ss__all_finite(a, 3));
    const float bad[] = {1, INFINITY, 2}, bad2[] = {NAN};
    ck_assert(!ss__all_finite(bad, 3));
    ck_assert(!ss__all_finite(bad2, 1));
    /* Long runs go through the vector code (16 floats a step with AVX-512)
     * and its tail: one bad value anywhere is seen; the largest finite
     * values and the subnormals are finite. */
    enum { LONG = 1003 };
    static float run[LONG];
    for (int i = 0; i < LONG; i++)
        run[i] = i % 3 == 0 ? FLT_MAX : i % 3 == 1 ? -FLT_MIN / 8 : (float)i;
    ck_assert(ss__all_finite(run, LONG));
    ck_assert_uint_eq(ss__first_non_finite(run, LONG), LONG); /* none */
    ck_assert_uint_eq(ss__first_non_finite(run, 0), 0);
    const int at[] = {0, 15, 16, 17, 255, 511, 992, 1000, 1002};
    const float odd[] = {NAN, INFINITY, -INFINITY};
    for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
        const float keep = run[at[k]];
        run[at[k]] = odd[k % 3];
        ck_assert_msg(!ss__all_finite(run, LONG), "non-finite at %d", at[k]);
        ck_assert(ss__all_finite(run, (size_t)at[k])); /* the floats before it */
        ck_assert_uint_eq(ss__first_non_finite(run, LONG), (size_t)at[k]);
        run[at[k]] = keep;
    }
    /* W = [[1,2],[3,4]], b = [1,-1], x = [1,1] -> y = [4, 6]; W^T [1,1] = [4,6]. */
    const float W[] = {1, 2, 3, 4}, bias[] = {1, -1}, x[] = {1, 1};
    float y[2], dx[2];
    ss__kernel_live_matvec(W, bias, x, y, 2, 2);
    assert_vec(y, (const float[]){4, 6}, 2);
    ss__kernel_live_matvec_t(W, x, dx, 2, 2);
    assert_vec(dx, (const float[]){4, 6}, 2);
    /* A long row exercises the eight-lane path and its tail. */
    float w19[19], x19[19], y1;
    for (int i = 0; i < 19; i++) {
        w19[i] = (float)(i + 1);
        x19[i] = 1.0f;
    }
    ss__kernel_live_matvec(w19, NULL, x19, &y1, 1, 19);
    ck_assert_float_eq(y1, 190.0f);
}
END_TEST

START_TEST(test_algo_names) {
    ss__algo a;
    ck_assert_int_eq(ss__algo_parse("bmuf", &a), SS_OK);
    ck_assert_int_eq(a, SS_ALGO_BMUF);
    ck_assert_str_eq(ss__algo_name(SS_ALGO_MA), "ma");
    ck_assert_int_eq(ss__algo_parse("sgd", &a), SS_ERR_INVALID_ARGUMENT);
}
END_TEST

/* Finite inputs whose result overflows are refused with the state as it
 * was: the EASGD overflow attack (a centre at -3e38, a snapshot at
 * 3e38: d = 0.5 (6e38) is Inf), an MA sum of two 3e38 snapshots, a BMUF
 * step whose momentum overflows; and zeta is bounded by 1 / (1 - eta). */
START_TEST(test_results_that_overflow_are_refused) {
    const float big = 3e38f;
    float c[] = {-big, 1.0f}, d[2];
    const float s[] = {big, 2.0f};
    ck_assert_int_eq(ss__easgd_server(s, c, d, 0.5f, 2), SS_ERR_NON_FINITE);
    ck_assert_float_eq(c[0], -big); /* untouched, the finite element too */
    ck_assert_float_eq(c[1], 1.0f);
    const float ok[] = {-big, 2.0f};
    ck_assert_int_eq(ss__easgd_server(ok, c, d, 0.5f, 2), SS_OK);
    assert_vec(c, (const float[]){-big, 1.5f}, 2);

    float sum[] = {0, 0}, avg[2];
    ss__mean_add(sum, (const float[]){big, 1.0f}, 2);
    ss__mean_add(sum, (const float[]){big, 3.0f}, 2);
    ck_assert_int_eq(ss__mean_close(sum, 2, avg, 2), SS_ERR_NON_FINITE);

    ss__bmuf_params p = {.eta = 0.5f, .zeta = 2.0f, .nesterov = true};
    ck_assert(ss__bmuf_params_valid(&p)); /* zeta = 1 / (1 - eta): the bound */
    float w[] = {0, 0}, m[] = {0, 0}, b[] = {0, 0};
    const float start[] = {-big, 1.0f}, far[] = {big, 1.0f};
    ck_assert_int_eq(ss__bmuf_step(&p, w, m, b, start, 2, true), SS_OK);
    ck_assert_int_eq(ss__bmuf_step(&p, w, m, b, far, 2, false), SS_ERR_NON_FINITE);
    assert_vec(w, start, 2);
    assert_vec(b, start, 2);
    assert_vec(m, (const float[]){0, 0}, 2);

    const ss__bmuf_params bad[] = {{.eta = 0.5f, .zeta = 2.01f},
                                   {.eta = 0.0f, .zeta = 1e38f},
                                   {.eta = 0.0f, .zeta = 0.0f},
                                   {.eta = 1.0f, .zeta = 1.0f},
                                   {.eta = 0.5f, .zeta = NAN}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!ss__bmuf_params_valid(&bad[i]), "eta %g zeta %g passed", (double)bad[i].eta,
                      (double)bad[i].zeta);
}
END_TEST

/* Inputs whose step is finite but whose result is not: each result is
 * checked, not only the step (each case kills a guard that checked the
 * step alone). */
START_TEST(test_finite_steps_with_results_that_overflow) {
    /* S-EASGD, alpha 1: d = s - c is finite, c + d rounds to Inf. */
    float c[] = {0x1.0a650ep+126f}, d[1];
    const float s[] = {FLT_MAX};
    ck_assert(isfinite(s[0] - c[0]));
    ck_assert_int_eq(ss__easgd_server(s, c, d, 1.0f, 1), SS_ERR_NON_FINITE);
    ck_assert_float_eq(c[0], 0x1.0a650ep+126f);
    /* S-BMUF from 3e38: m = 2 (3.4e38 - 3e38) is finite, w = 3e38 + m is not. */
    const ss__bmuf_params p = {.eta = 0.5f, .zeta = 2.0f};
    float w[1], m[1], b[1];
    ck_assert_int_eq(ss__bmuf_step(&p, w, m, b, (const float[]){3e38f}, 1, true), SS_OK);
    ck_assert_int_eq(ss__bmuf_step(&p, w, m, b, (const float[]){3.4e38f}, 1, false),
                     SS_ERR_NON_FINITE);
    ck_assert_float_eq(w[0], 3e38f);
    ck_assert_float_eq(m[0], 0.0f);
    /* Nesterov from 3e38 to 3.2e38: m and w = 3.4e38 finite, b = w + m / 2 not. */
    const ss__bmuf_params nbm = {.eta = 0.5f, .zeta = 2.0f, .nesterov = true};
    ck_assert_int_eq(ss__bmuf_step(&nbm, w, m, b, (const float[]){3e38f}, 1, true), SS_OK);
    ck_assert_int_eq(ss__bmuf_step(&nbm, w, m, b, (const float[]){3.2e38f}, 1, false),
                     SS_ERR_NON_FINITE);
    ck_assert_float_eq(b[0], 3e38f);
    /* Classic (CBM) takes the same step: b = w. */
    ck_assert_int_eq(ss__bmuf_step(&p, w, m, b, (const float[]){3e38f}, 1, true), SS_OK);
    ck_assert_int_eq(ss__bmuf_step(&p, w, m, b, (const float[]){3.2e38f}, 1, false), SS_OK);
    ck_assert_float_eq(b[0], w[0]);
}
END_TEST

SS_CHECK_MAIN("algorithms", 0, NULL, NULL, test_easgd_server, test_easgd_bad_input, test_ma_delta,
              test_bmuf_nesterov_rounds, test_bmuf_classic_rounds, test_mean_and_kernels,
              test_algo_names, test_results_that_overflow_are_refused,
              test_finite_steps_with_results_that_overflow)
