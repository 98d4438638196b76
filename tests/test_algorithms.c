/* shadow/: the algorithms and kernels against hand-computed values. */
#include <check.h>

#include "check_run.h"
#include <math.h>
#include <stdlib.h>

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

START_TEST(test_bmuf_nesterov) {
    /* G = avg - w = [1,-1]; m = 0.5*[0.2,0] + 1*G = [1.1,-1]; w = [2.1,0];
     * target = w + 0.5 m = [2.65,-0.5]; delta = target - s = [1.15,-1.5]. */
    ss__bmuf_params p = {.eta = 0.5f, .zeta = 1.0f, .nesterov = true};
    float w[] = {1, 1}, m[] = {0.2f, 0};
    const float avg[] = {2, 0}, s[] = {1.5f, 1};
    float delta[2];
    ck_assert_int_eq(ss__bmuf_delta(&p, w, m, avg, s, delta, 2), SS_OK);
    assert_vec(m, (const float[]){1.1f, -1.0f}, 2);
    assert_vec(w, (const float[]){2.1f, 0.0f}, 2);
    assert_vec(delta, (const float[]){1.15f, -1.5f}, 2);
}
END_TEST

START_TEST(test_bmuf_plain) {
    /* zeta = 0.5: G = [1,-1]; m = 0.5*[0.2,0] + 0.5*G = [0.6,-0.5];
     * w = [1.6,0.5]; target = w; delta = [0.1,-0.5]. */
    ss__bmuf_params p = {.eta = 0.5f, .zeta = 0.5f, .nesterov = false};
    float w[] = {1, 1}, m[] = {0.2f, 0};
    const float avg[] = {2, 0}, s[] = {1.5f, 1};
    float delta[2];
    ck_assert_int_eq(ss__bmuf_delta(&p, w, m, avg, s, delta, 2), SS_OK);
    assert_vec(m, (const float[]){0.6f, -0.5f}, 2);
    assert_vec(w, (const float[]){1.6f, 0.5f}, 2);
    assert_vec(delta, (const float[]){0.1f, -0.5f}, 2);
    ss__bmuf_params bad = {.eta = 1.0f, .zeta = 1.0f};
    ck_assert_int_eq(ss__bmuf_delta(&bad, w, m, avg, s, delta, 2), SS_ERR_INVALID_ARGUMENT);
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
    ck_assert_double_eq_tol(ss__kernel_norm2_sq(a, 3), 14.0, 1e-12);
    ck_assert_double_eq_tol(ss__kernel_dist2_sq(a, b, 3), 4 + 16 + 36, 1e-12);
    ck_assert(ss__kernel_all_finite(a, 3));
    const float bad[] = {1, INFINITY, 2}, bad2[] = {NAN};
    ck_assert(!ss__kernel_all_finite(bad, 3));
    ck_assert(!ss__kernel_all_finite(bad2, 1));
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

int main(void) {
    return ss__check_tests("algorithms", 0, NULL, NULL, test_easgd_server, test_easgd_bad_input,
                           test_ma_delta, test_bmuf_nesterov, test_bmuf_plain,
                           test_mean_and_kernels, test_algo_names);
}
