/* tools/ctr: the Criteo reader, NE/AUC, the model's gradients, the
 * synthetic ground truth. */
#include <check.h>

#include "check_run.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shadow/kernels.h"
#include "tools/ctr/cli.h"
#include "tools/ctr/criteo.h"
#include "tools/ctr/dlrm.h"
#include "tools/ctr/emb_path.h"
#include "tools/ctr/eval.h"
#include "tools/ctr/truth.h"

START_TEST(test_ne_hand_computed) {
    /* log loss = -(ln .9 + ln .8 + ln .6 + ln .7) / 4 = 0.29900115;
     * CTR 0.5 -> entropy ln 2 -> NE = 0.29900115 / 0.69314718 = 0.43136751. */
    const float p[] = {0.9f, 0.2f, 0.6f, 0.3f}, y[] = {1, 0, 1, 0};
    double ll, ne;
    ck_assert_int_eq(ss__ctr_logloss(p, y, 4, &ll), SS_OK);
    ck_assert_double_eq_tol(ll, 0.29900115, 1e-6);
    ck_assert_int_eq(ss__ctr_ne(p, y, 4, &ne), SS_OK);
    ck_assert_double_eq_tol(ne, 0.43136751, 1e-6);
    /* Predicting the base rate gives NE exactly 1. */
    const float base[] = {0.25f, 0.25f, 0.25f, 0.25f}, y2[] = {1, 0, 0, 0};
    ck_assert_int_eq(ss__ctr_ne(base, y2, 4, &ne), SS_OK);
    ck_assert_double_eq_tol(ne, 1.0, 1e-6);
    /* One class only: NE undefined. */
    const float y3[] = {0, 0, 0, 0};
    ck_assert_int_eq(ss__ctr_ne(base, y3, 4, &ne), SS_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_auc_hand_computed) {
    double auc;
    const float p1[] = {0.1f, 0.4f, 0.35f, 0.8f}, y1[] = {0, 0, 1, 1};
    ck_assert_int_eq(ss__ctr_auc(p1, y1, 4, &auc), SS_OK);
    ck_assert_double_eq_tol(auc, 0.75, 1e-12);
    /* Positive at 0.5 vs negatives 0.5 (tie: 1/2), 0.2 (win), 0.8 (loss). */
    const float p2[] = {0.5f, 0.5f, 0.2f, 0.8f}, y2[] = {1, 0, 0, 0};
    ck_assert_int_eq(ss__ctr_auc(p2, y2, 4, &auc), SS_OK);
    ck_assert_double_eq_tol(auc, 0.5, 1e-12);
    const float p3[] = {0.9f, 0.2f, 0.6f, 0.3f}, y3[] = {1, 0, 1, 0};
    ck_assert_int_eq(ss__ctr_auc(p3, y3, 4, &auc), SS_OK);
    ck_assert_double_eq_tol(auc, 1.0, 1e-12);
    const float y4[] = {1, 1, 1, 1};
    ck_assert_int_eq(ss__ctr_auc(p3, y4, 4, &auc), SS_ERR_INVALID_ARGUMENT);
}
END_TEST

START_TEST(test_reader_real_criteo_sample) {
    ss__ctr_dataset ds;
    ck_assert_int_eq(ss__ctr_dataset_load(SS_DATA_DIR "/criteo-kaggle-head-8000.tsv", 0, &ds),
                     SS_OK);
    ck_assert_uint_eq(ds.nrows, 8000);
    ck_assert_uint_eq(ds.skipped, 0);
    double clicks = 0;
    size_t missing_cat = 0, missing_int = 0;
    for (size_t i = 0; i < ds.nrows; i++) {
        clicks += ds.rows[i].label;
        missing_cat += (size_t)__builtin_popcount(ds.rows[i].cat_missing);
        for (int j = 0; j < SS_CTR_NUM_DENSE; j++) {
            ck_assert(isfinite(ds.rows[i].dense[j]) && ds.rows[i].dense[j] >= 0.0f);
            missing_int += ds.rows[i].dense[j] == 0.0f;
        }
    }
    ck_assert_double_eq_tol(clicks / 8000.0, 0.216, 1e-9);
    ck_assert_uint_gt(missing_cat, 0); /* the real format has empty categoricals */
    ck_assert_uint_gt(missing_int, 0);
    /* The first row of train.txt: 0, I1 = 1, I2 = 1, I3 = 5, C1 = 68fd1e64. */
    ck_assert_float_eq(ds.rows[0].label, 0.0f);
    ck_assert_float_eq_tol(ds.rows[0].dense[0], logf(2.0f), 1e-6f);
    ck_assert_float_eq_tol(ds.rows[0].dense[2], logf(6.0f), 1e-6f);
    ck_assert_uint_eq(ds.rows[0].cat[0], 0x68fd1e64u);
    ss__ctr_dataset_free(&ds);
    ck_assert_int_eq(ss__ctr_dataset_load(SS_DATA_DIR "/criteo-kaggle-head-8000.tsv", 100, &ds),
                     SS_OK);
    ck_assert_uint_eq(ds.nrows, 100);
    ss__ctr_dataset_free(&ds);
}
END_TEST

static void make_line(char *buf, size_t cap, const char *label, const char *int1, const char *cat1,
                      int fields) {
    size_t o = (size_t)snprintf(buf, cap, "%s", label);
    for (int f = 1; f < fields; f++) {
        const char *v = f == 1 ? int1 : (f == 14 ? cat1 : (f < 14 ? "3" : "0a1b2c3d"));
        o += (size_t)snprintf(buf + o, cap - o, "\t%s", v);
    }
}

START_TEST(test_reader_malformed_lines) {
    char path[] = "/tmp/ss__malformed_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    char line[1024];
    make_line(line, sizeof line, "1", "5", "deadbeef", 40);
    fprintf(f, "%s\n", line); /* good */
    make_line(line, sizeof line, "1", "5", "deadbeef", 39);
    fprintf(f, "%s\n", line); /* too few fields */
    make_line(line, sizeof line, "2", "5", "deadbeef", 40);
    fprintf(f, "%s\n", line); /* label not 0/1 */
    make_line(line, sizeof line, "0", "12a", "deadbeef", 40);
    fprintf(f, "%s\n", line); /* bad integer */
    make_line(line, sizeof line, "0", "5", "zzzz", 40);
    fprintf(f, "%s\n", line); /* bad hex */
    make_line(line, sizeof line, "0", "5", "123456789", 40);
    fprintf(f, "%s\n", line); /* too long a hash */
    fprintf(f, "\n");         /* empty line */
    fprintf(f, "\x01\x02garbage\xff\n");
    make_line(line, sizeof line, "0", "", "", 40);
    fprintf(f, "%s\r\n", line); /* good: missing values, CRLF */
    make_line(line, sizeof line, "1", "-2", "ABCDEF01", 41);
    fprintf(f, "%s", line); /* too many fields, no final newline */
    fclose(f);

    ss__ctr_dataset ds;
    ck_assert_int_eq(ss__ctr_dataset_load(path, 0, &ds), SS_OK);
    ck_assert_uint_eq(ds.nrows, 2);
    ck_assert_uint_eq(ds.skipped, 8);
    ck_assert_uint_eq(ds.first_bad_line, 2);
    ck_assert_ptr_nonnull(strstr(ds.first_error, "expected 40 tab-separated fields"));
    ck_assert_float_eq_tol(ds.rows[0].dense[0], logf(6.0f), 1e-6f);
    ck_assert_uint_eq(ds.rows[0].cat[0], 0xdeadbeefu);
    ck_assert_uint_eq(ds.rows[1].cat_missing & 1u, 1u);
    ck_assert_float_eq(ds.rows[1].dense[0], 0.0f);
    ss__ctr_dataset_free(&ds);
    unlink(path);

    char err[160];
    ss__ctr_example ex;
    make_line(line, sizeof line, "1", "-2", "ABCDEF01", 40);
    ck_assert_int_eq(ss__criteo_parse_line(line, strlen(line), &ex, err, sizeof err), SS_OK);
    ck_assert_float_eq(ex.dense[0], 0.0f); /* negative -> 0 */
    ck_assert_uint_eq(ex.cat[0], 0xabcdef01u);
    ck_assert_int_eq(ss__criteo_parse_line("1\t-", 3, &ex, err, sizeof err), SS_ERR_PARSE);
    ck_assert_int_eq(ss__ctr_dataset_load("/nonexistent/ss.tsv", 0, &ds), SS_ERR_IO);
}
END_TEST

START_TEST(test_truth_deterministic) {
    ss__ctr_truth *a, *b;
    ck_assert_int_eq(ss__ctr_truth_create(7, &a, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__ctr_truth_create(7, &b, NULL, 0), SS_OK);
    ss__rng ra, rb, rc;
    ss__rng_seed(&ra, 11);
    ss__rng_seed(&rb, 11);
    ss__rng_seed(&rc, 12);
    int differs = 0;
    double psum = 0, clicks = 0;
    for (int i = 0; i < 2000; i++) {
        ss__ctr_raw_row x, y, z;
        memset(&x, 0, sizeof x); /* padding too, for memcmp */
        memset(&y, 0, sizeof y);
        memset(&z, 0, sizeof z);
        double px, py, pz;
        ss__ctr_truth_sample(a, &ra, &x, &px);
        ss__ctr_truth_sample(b, &rb, &y, &py);
        ss__ctr_truth_sample(a, &rc, &z, &pz);
        ck_assert(memcmp(&x, &y, sizeof x) == 0);
        ck_assert(px == py);
        ck_assert(px > 0.0 && px < 1.0);
        differs += memcmp(&x, &z, sizeof x) != 0;
        psum += px;
        clicks += x.label;
    }
    ck_assert_int_gt(differs, 1900);
    /* Labels follow the probabilities: 2000 draws, |mean diff| < 4 sigma. */
    ck_assert_double_lt(fabs(clicks - psum) / 2000.0, 4.0 * sqrt(0.25 / 2000.0));
    ss__ctr_truth_destroy(a);
    ss__ctr_truth_destroy(b);
}
END_TEST

/* Loss of one example under the current parameters. */
static double example_loss(ss__ctr_worker *w, const float *dense, const ss__ctr_embeddings *emb,
                           const ss__ctr_example *ex) {
    double p = ss__ctr_predict(w, dense, emb, ex);
    return ex->label > 0.5f ? -log(p) : -log(1.0 - p);
}

START_TEST(test_model_gradients_match_finite_differences) {
    ss__ctr_model_config cfg = {
        .emb_dim = 3, .table_rows = 16, .bottom_hidden = 5, .top_hidden = 6};
    ss__ctr_layout L;
    ss__ctr_layout_of(&cfg, &L);
    ck_assert_uint_eq(L.interact, 3 + 351);
    float *dense = malloc(L.total * sizeof(float)), *after = malloc(L.total * sizeof(float));
    ss__ctr_dense_init(&cfg, dense, 3);
    for (size_t i = L.b1; i < L.w2; i++)
        dense[i] = 0.1f; /* positive biases keep ReLUs open */
    for (size_t i = L.b3; i < L.w4; i++)
        dense[i] = 0.1f;
    ss__ctr_embeddings emb, emb_after;
    ck_assert_int_eq(ss__ctr_embeddings_create(&cfg, 5, &emb, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__ctr_embeddings_create(&cfg, 5, &emb_after, NULL, 0), SS_OK);
    for (size_t i = 0; i < 26 * 16 * 3; i++)
        emb.data[i] = emb_after.data[i] = emb.data[i] * 10.0f; /* not too close to zero */
    ss__ctr_example ex = {.label = 1.0f};
    for (int j = 0; j < SS_CTR_NUM_DENSE; j++)
        ex.dense[j] = 0.1f * (float)(j + 1);
    for (int f = 0; f < SS_CTR_NUM_CAT; f++)
        ex.cat[f] = 0x1000u * (uint32_t)f + 7u;
    ex.cat_missing = 1u << 3;

    ss__ctr_worker *w;
    ck_assert_int_eq(ss__ctr_worker_create(&cfg, &w, NULL, 0), SS_OK);
    memcpy(after, dense, L.total * sizeof(float));
    const ss__ctr_example *batch[] = {&ex};
    double loss = 0;
    ss__ctr_dense_opt sgd;
    ck_assert_int_eq(ss__ctr_dense_opt_init(&sgd, SS_CTR_OPT_SGD, 1.0f, L.total), SS_OK);
    ck_assert_int_eq(ss__ctr_embeddings_set_optimizer(&emb_after, false, 1.0f), SS_OK);
    ss__ctr_train_batch(w, after, &sgd, &emb_after, batch, 1, &loss);
    ss__ctr_dense_opt_free(&sgd);
    ck_assert_double_eq_tol(loss, example_loss(w, dense, &emb, &ex), 1e-5);

    /* dense: analytic gradient = before - after (lr = 1). */
    const size_t probe[] = {L.w1 + 7,   L.b1 + 2, L.w2 + 4, L.b2 + 1, L.w3 + 3,
                            L.w3 + 300, L.b3 + 5, L.w4 + 2, L.b4};
    const double h = 1e-3;
    for (size_t k = 0; k < sizeof probe / sizeof *probe; k++) {
        size_t i = probe[k];
        float keep = dense[i];
        dense[i] = keep + (float)h;
        double up = example_loss(w, dense, &emb, &ex);
        dense[i] = keep - (float)h;
        double down = example_loss(w, dense, &emb, &ex);
        dense[i] = keep;
        double numeric = (up - down) / (2 * h), analytic = (double)(keep - after[i]);
        ck_assert_msg(fabs(numeric - analytic) < 2e-3 + 0.03 * fabs(numeric),
                      "dense param %zu: numeric %.6g analytic %.6g", i, numeric, analytic);
    }
    /* embeddings: fields 0 and 25, and the missing row of field 3. */
    const int fields[] = {0, 3, 25};
    for (int k = 0; k < 3; k++) {
        size_t row = ss__ctr_row_index(&cfg, fields[k], &ex);
        if (fields[k] == 3)
            ck_assert_uint_eq(row, 0);
        for (size_t d = 0; d < 3; d++) {
            size_t i = ((size_t)fields[k] * 16 + row) * 3 + d;
            float keep = emb.data[i];
            emb.data[i] = keep + (float)h;
            double up = example_loss(w, dense, &emb, &ex);
            emb.data[i] = keep - (float)h;
            double down = example_loss(w, dense, &emb, &ex);
            emb.data[i] = keep;
            double numeric = (up - down) / (2 * h), analytic = (double)(keep - emb_after.data[i]);
            ck_assert_msg(fabs(numeric - analytic) < 2e-3 + 0.03 * fabs(numeric),
                          "emb field %d dim %zu: numeric %.6g analytic %.6g", fields[k], d, numeric,
                          analytic);
        }
    }
    ss__ctr_worker_destroy(w);
    ss__ctr_embeddings_destroy(&emb);
    ss__ctr_embeddings_destroy(&emb_after);
    free(dense);
    free(after);
}
END_TEST

/* The dense optimizers by hand. Adam's first steps with a constant
 * gradient move by exactly lr (m / sqrt(v) = sign(g) after the bias
 * correction); Adagrad's by lr g / sqrt(sum g^2). */
START_TEST(test_dense_optimizers_by_hand) {
    float x[2] = {1.0f, -1.0f}, g[2] = {2.0f, -2.0f};
    ss__ctr_dense_opt o;
    ck_assert_int_eq(ss__ctr_dense_opt_init(&o, SS_CTR_OPT_ADAM, 0.1f, 2), SS_OK);
    ss__ctr_dense_opt_apply(&o, x, g, 0.5f); /* mean gradient (1, -1) */
    ck_assert_float_eq_tol(x[0], 0.9f, 1e-5f);
    ck_assert_float_eq_tol(x[1], -0.9f, 1e-5f);
    ck_assert_float_eq_tol(o.m[0], 0.1f, 1e-7f);   /* (1 - 0.9) * 1 */
    ck_assert_float_eq_tol(o.v[0], 0.001f, 1e-7f); /* (1 - 0.999) * 1 */
    ss__ctr_dense_opt_apply(&o, x, g, 0.5f);
    ck_assert_float_eq_tol(x[0], 0.8f, 1e-5f);
    ss__ctr_dense_opt_free(&o);

    x[0] = 1.0f;
    ck_assert_int_eq(ss__ctr_dense_opt_init(&o, SS_CTR_OPT_ADAGRAD, 0.1f, 1), SS_OK);
    ss__ctr_dense_opt_apply(&o, x, g, 1.0f); /* acc 4: x -= 0.1 * 2 / 2 */
    ck_assert_float_eq_tol(x[0], 0.9f, 1e-6f);
    ss__ctr_dense_opt_apply(&o, x, g, 1.0f); /* acc 8: x -= 0.1 * 2 / sqrt 8 */
    ck_assert_float_eq_tol(x[0], 0.9f - 0.2f / sqrtf(8.0f), 1e-6f);
    ss__ctr_dense_opt_free(&o);

    x[0] = 1.0f;
    ck_assert_int_eq(ss__ctr_dense_opt_init(&o, SS_CTR_OPT_SGD, 0.1f, 1), SS_OK);
    ss__ctr_dense_opt_apply(&o, x, g, 0.5f); /* x -= 0.1 * 1 */
    ck_assert_float_eq_tol(x[0], 0.9f, 1e-6f);
    ss__ctr_dense_opt_free(&o);
    ck_assert_int_eq(ss__ctr_dense_opt_init(&o, (ss__ctr_optimizer)9, 0.1f, 1),
                     SS_ERR_INVALID_ARGUMENT);
    ss__ctr_optimizer k;
    ck_assert_int_eq(ss__ctr_optimizer_parse("adam", &k), SS_OK);
    ck_assert_int_eq(k, SS_CTR_OPT_ADAM);
    ck_assert_int_eq(ss__ctr_optimizer_parse("lion", &k), SS_ERR_INVALID_ARGUMENT);
}
END_TEST

/* Row-wise Adagrad on the embedding array: one accumulator per row,
 * += mean(g^2) = (9 + 16) / 2 = 12.5; the row moves by lr g / sqrt 12.5. */
START_TEST(test_row_adagrad_by_hand) {
    float row[2] = {1.0f, 1.0f}, acc = 0.0f;
    const float g[2] = {3.0f, 4.0f};
    ss__kernel_live_adagrad_row(row, &acc, g, 0.1f, 1e-8f, 2);
    ck_assert_float_eq_tol(acc, 12.5f, 1e-6f);
    ck_assert_float_eq_tol(row[0], 1.0f - 0.3f / sqrtf(12.5f), 1e-6f);
    ck_assert_float_eq_tol(row[1], 1.0f - 0.4f / sqrtf(12.5f), 1e-6f);
}
END_TEST

/* Scores both ways: log loss of (0.9, 0.2, 0.4, 0.3) on (1, 0, 1, 0) is
 * -(ln .9 + ln .8 + ln .4 + ln .7) / 4 = 1.60146 / 4 = 0.40037; training
 * CTR 0.25: entropy 0.56233, NE 0.71197; the set's own CTR 0.5: entropy
 * ln 2, NE 0.57761. One class:
 * AUC and the own-CTR NE are undefined, the rest is still given. */
START_TEST(test_score_both_normalizations) {
    const float p[4] = {0.9f, 0.2f, 0.4f, 0.3f}, y[4] = {1, 0, 1, 0};
    ss__ctr_quality q;
    ck_assert_int_eq(ss__ctr_score(p, y, 4, 0.25, &q), SS_OK);
    ck_assert_double_eq_tol(q.logloss, 0.40037, 1e-5);
    ck_assert_double_eq_tol(q.ne, 0.71197, 1e-4);
    ck_assert_double_eq_tol(q.ne_own_ctr, 0.57761, 1e-4);
    ck_assert_double_eq_tol(q.auc, 1.0, 1e-9); /* both clicks above both non-clicks */
    ck_assert_double_eq_tol(q.mean_pred, 0.45, 1e-6);
    ck_assert_int_eq(q.one_class, -1);
    const float zeros[4] = {0, 0, 0, 0};
    ck_assert_int_eq(ss__ctr_score(p, zeros, 4, 0.25, &q), SS_OK);
    ck_assert_int_eq(q.one_class, 0);
    ck_assert(isnan(q.auc) && isnan(q.ne_own_ctr));
    ck_assert(q.ne > 0 && isfinite(q.ne));
    ck_assert_int_eq(ss__ctr_score(p, y, 4, 0.0, &q), SS_ERR_INVALID_ARGUMENT);
}
END_TEST

/* The output bias starts at the log-odds of the base rate. */
START_TEST(test_bias_starts_at_base_rate) {
    ss__ctr_model_config cfg = {.emb_dim = 2, .table_rows = 4, .bottom_hidden = 3, .top_hidden = 3};
    ss__ctr_layout L;
    ss__ctr_layout_of(&cfg, &L);
    float *dense = calloc(L.total, sizeof(float));
    ss__ctr_dense_init_bias(&cfg, dense, 0.25);
    ck_assert_float_eq_tol(dense[L.b4], logf(1.0f / 3.0f), 1e-6f);
    ss__ctr_dense_init_bias(&cfg, dense, 0.0); /* no base rate: unchanged */
    ck_assert_float_eq_tol(dense[L.b4], logf(1.0f / 3.0f), 1e-6f);
    free(dense);
}
END_TEST

/* The model and the example of the first-order weights' tests: a tiny
 * model, and a click whose integer feature 0 is 5 (log2(6) = 2.58: class
 * 2), the others 0, and whose fields each have their own row. */
static const ss__ctr_model_config wide_model = {
    .emb_dim = 2, .table_rows = 8, .bottom_hidden = 3, .top_hidden = 3, .wide_lr = 0.5f};

static ss__ctr_example wide_example(void) {
    ss__ctr_example ex = {.label = 1.0f};
    ex.dense[0] = logf(6.0f);
    for (int f = 0; f < SS_CTR_NUM_CAT; f++)
        ex.cat[f] = 100u + (uint32_t)f;
    return ex;
}

/* The first-order part by hand: with every dense weight 0 the MLP's logit
 * is 0, so p = sigmoid(sum of the example's first-order weights). One
 * example (label 1) from all-zero weights: p = 0.5, and each of its 26
 * rows' weights and the weight of its one non-zero integer feature's log2
 * class moves by -lr (p - y) = 0.5 * 0.5 = 0.25; then p = sigmoid(27 *
 * 0.25). A zero integer feature has no weight. */
START_TEST(test_first_order_weights_by_hand) {
    ss__ctr_model_config cfg = wide_model;
    ss__ctr_layout L;
    ss__ctr_layout_of(&cfg, &L);
    float *dense = calloc(L.total, sizeof(float));
    ss__ctr_embeddings emb;
    ck_assert_int_eq(ss__ctr_embeddings_create(&cfg, 1, &emb, NULL, 0), SS_OK);
    ck_assert_ptr_nonnull(emb.wide);
    ck_assert_uint_eq(ss__ctr_embeddings_floats(&emb), 26 * 8 * 2 + 26 * 8 + 13 * 32);
    ss__ctr_example ex = wide_example();
    ss__ctr_worker *w;
    ck_assert_int_eq(ss__ctr_worker_create(&cfg, &w, NULL, 0), SS_OK);
    ck_assert_float_eq_tol(ss__ctr_predict(w, dense, &emb, &ex), 0.5f, 1e-6f);
    ss__ctr_dense_opt sgd; /* a rate that leaves the dense part at 0 */
    ck_assert_int_eq(ss__ctr_dense_opt_init(&sgd, SS_CTR_OPT_SGD, 1e-9f, L.total), SS_OK);
    const ss__ctr_example *batch[] = {&ex};
    ss__ctr_train_batch(w, dense, &sgd, &emb, batch, 1, NULL);
    for (int f = 0; f < SS_CTR_NUM_CAT; f++)
        ck_assert_float_eq_tol(emb.wide[(size_t)f * 8 + ss__ctr_row_index(&cfg, f, &ex)], 0.25f,
                               1e-6f);
    const float *classes = emb.wide + 26 * 8;
    ck_assert_float_eq_tol(classes[2], 0.25f, 1e-6f); /* feature 0, class 2 */
    ck_assert_float_eq(classes[32 + 0], 0.0f);        /* feature 1 is 0: no weight */
    ck_assert_float_eq_tol(ss__ctr_predict(w, dense, &emb, &ex), 1.0f / (1.0f + expf(-6.75f)),
                           1e-5f);
    /* without them (wide_lr 0) nothing is allocated and the logit is the MLP's */
    ss__ctr_embeddings plain;
    cfg.wide_lr = 0.0f;
    ck_assert_int_eq(ss__ctr_embeddings_create(&cfg, 1, &plain, NULL, 0), SS_OK);
    ck_assert_ptr_null(plain.wide);
    ck_assert_float_eq_tol(ss__ctr_predict(w, dense, &plain, &ex), 0.5f, 1e-6f);
    cfg.wide_lr = 1.5f; /* past the range */
    ck_assert_int_eq(ss__ctr_model_config_check(&cfg), SS_ERR_INVALID_ARGUMENT);
    ss__ctr_dense_opt_free(&sgd);
    ss__ctr_worker_destroy(w);
    ss__ctr_embeddings_destroy(&emb);
    ss__ctr_embeddings_destroy(&plain);
    free(dense);
}
END_TEST

/* The same first-order weights through the table path (ctr-train --emb
 * local|remote|cached --wide-lr): a local table of rows and one of the
 * weights (one float per id, from 0, SGD at 0.5). Two copies of the
 * example in one batch from all-zero dense weights: p = 0.5 for both, so
 * each weight's summed gradient is 2 (p - y) = -1 and one push moves it
 * by 0.5; the model the tables give back predicts sigmoid(27 * 0.5). */
START_TEST(test_first_order_weights_through_tables) {
    ss__ctr_model_config cfg = wide_model;
    ss__ctr_layout L;
    ss__ctr_layout_of(&cfg, &L);
    float *dense = calloc(L.total, sizeof(float));
    ss_table_config tc;
    ss_table_config_init(&tc, "rows", 2);
    ss__ctr_tables t = {NULL, NULL};
    ck_assert_int_eq(ss_table_open(NULL, &tc, &t.rows), SS_OK);
    ss_table_config_init(&tc, "wide", 1);
    tc.lr = 0.5f;
    tc.init_scale = 0.0f;
    ck_assert_int_eq(ss_table_open(NULL, &tc, &t.wide), SS_OK);
    ss__ctr_example ex = wide_example();
    ss__ctr_worker *w;
    ck_assert_int_eq(ss__ctr_worker_create(&cfg, &w, NULL, 0), SS_OK);
    ss__ctr_dense_opt sgd;
    ck_assert_int_eq(ss__ctr_dense_opt_init(&sgd, SS_CTR_OPT_SGD, 1e-9f, L.total), SS_OK);
    ss__ctr_gather *g;
    ck_assert_int_eq(ss__ctr_gather_create(&cfg, 2, &g, NULL, 0), SS_OK);
    const ss__ctr_example *batch[] = {&ex, &ex};
    ck_assert_int_eq(ss__ctr_gather_begin(g, &t, batch, 2, false, NULL), SS_OK);
    double loss = 0;
    ck_assert_int_eq(ss__ctr_gather_train(g, w, dense, &sgd, &loss), SS_OK);
    ck_assert_double_eq_tol(loss, 2 * log(2.0), 1e-6); /* scored before the step */
    ck_assert_int_eq(ss__ctr_gather_push(g, &t), SS_OK);
    uint64_t ids[SS_CTR_NWIDE];
    ss__ctr_wide_ids(&cfg, &ex, ids);
    ck_assert_uint_eq(ids[SS_CTR_NUM_CAT], 26 * 8 + 2);
    ck_assert_uint_eq(ids[SS_CTR_NUM_CAT + 1], UINT64_MAX); /* feature 1 is 0 */
    float v[SS_CTR_NUM_CAT + 1];
    ck_assert_int_eq(ss_table_lookup(t.wide, ids, SS_CTR_NUM_CAT + 1, v), SS_OK);
    for (int k = 0; k <= SS_CTR_NUM_CAT; k++)
        ck_assert_float_eq_tol(v[k], 0.5f, 1e-6f);
    ss__ctr_embeddings emb;
    ck_assert_int_eq(ss__ctr_embeddings_create(&cfg, 1, &emb, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__ctr_emb_materialize(&t, &emb), SS_OK);
    ck_assert_float_eq_tol(ss__ctr_predict(w, dense, &emb, &ex), 1.0f / (1.0f + expf(-13.5f)),
                           1e-5f);
    /* The next batch reads them: its loss is 2 log(1 + e^-13.5). */
    ck_assert_int_eq(ss__ctr_gather_begin(g, &t, batch, 2, false, NULL), SS_OK);
    loss = 0;
    ck_assert_int_eq(ss__ctr_gather_train(g, w, dense, &sgd, &loss), SS_OK);
    ck_assert_double_eq_tol(loss, 2 * log1p(exp(-13.5)), 1e-6);
    ck_assert_int_eq(ss__ctr_gather_push(g, &t), SS_OK);
    /* a tables pair without the weights' table for a model with them */
    ss__ctr_tables rows_only = {t.rows, NULL};
    ck_assert_int_eq(ss__ctr_gather_begin(g, &rows_only, batch, 2, false, NULL),
                     SS_ERR_INVALID_ARGUMENT);
    ss__ctr_gather_destroy(g);
    ss__ctr_embeddings_destroy(&emb);
    ss__ctr_dense_opt_free(&sgd);
    ss__ctr_worker_destroy(w);
    ss_table_close(t.rows);
    ss_table_close(t.wide);
    free(dense);
}
END_TEST

/* ctr-train's command line resolved without a process (tools/ctr/cli.c):
 * from the given flags, a fresh cli with the library's keys at
 * ctr-train's defaults. */
static void cli_fresh(ss__ctr_cli *o, ss__flag *flags, size_t max, uint32_t trainers,
                      const char *train) {
    ss__ctr_cli_init(o);
    size_t n = 0;
    ck_assert_int_eq(ss__ctr_cli_add_settings(o, flags, &n, max), SS_OK);
    o->cfg.trainers = trainers;
    o->train_path = train;
    o->test_path = "test.tsv";
}

/* The "auto" values by mode, the dense lr's scaling, and refusals across
 * flags that name them. */
START_TEST(test_cli_resolves_by_mode) {
    ss__flag flags[128];
    ss__ctr_cli o;
    char why[256];
    /* One in-process trainer on a file: nothing to sync with, lr as given,
     * its replica scored, no first-order weights. */
    cli_fresh(&o, flags, 128, 1, "train.tsv");
    ck_assert_int_eq(ss__ctr_cli_resolve(&o, why, sizeof why), SS_OK);
    ck_assert_str_eq(o.sync, "none");
    ck_assert(!o.process && !o.online && !o.cfg.eval_central);
    ck_assert_float_eq(o.cfg.lr, (float)o.lr);
    ck_assert_float_eq(o.cfg.model.wide_lr, 0.0f);
    ck_assert_ptr_null(ss__ctr_cli_refusal(&o));
    ss__setting_flags_destroy(o.settings);
    /* Four on a stream: shadow sync, lr x 4 (linear), then x 2 (sqrt), the
     * central model scored, first-order weights at the online rate. */
    cli_fresh(&o, flags, 128, 4, "-");
    ck_assert_int_eq(ss__ctr_cli_resolve(&o, why, sizeof why), SS_OK);
    ck_assert_str_eq(o.sync, "shadow");
    ck_assert(o.online && o.cfg.eval_central);
    ck_assert_float_eq_tol(o.cfg.lr, 4.0f * (float)o.lr, 1e-9f);
    ck_assert_float_eq(o.cfg.model.wide_lr, 0.005f);
    ck_assert_ptr_null(ss__ctr_cli_refusal(&o));
    ss__setting_flags_destroy(o.settings);
    cli_fresh(&o, flags, 128, 4, "train.tsv");
    o.lr_scaling = "sqrt";
    ck_assert_int_eq(ss__ctr_cli_resolve(&o, why, sizeof why), SS_OK);
    ck_assert_float_eq_tol(o.cfg.lr, 2.0f * (float)o.lr, 1e-9f);
    ck_assert_float_eq(o.cfg.model.wide_lr, 0.0f); /* not a stream */
    ss__setting_flags_destroy(o.settings);
    /* A rate out of its range: refused, naming the flag. */
    cli_fresh(&o, flags, 128, 1, "-");
    ss__setting_flag_set(o.settings, "emb", "local");
    o.wide_lr = "1.5";
    ck_assert_int_eq(ss__ctr_cli_resolve(&o, why, sizeof why), SS_OK);
    ck_assert_ptr_nonnull(strstr(ss__ctr_cli_refusal(&o), "--wide-lr takes a rate in [0, 1]"));
    ss__setting_flags_destroy(o.settings);
    /* A PS means one trainer per process: 4 in one are refused. */
    cli_fresh(&o, flags, 128, 4, "train.tsv");
    ss__setting_flag_set(o.settings, "ps", "127.0.0.1:1");
    ck_assert_int_eq(ss__ctr_cli_resolve(&o, why, sizeof why), SS_OK);
    ck_assert(o.process);
    ck_assert_ptr_nonnull(strstr(ss__ctr_cli_refusal(&o), "needs --trainers 1"));
    ss__setting_flags_destroy(o.settings);
    /* A library key out of its range is refused by the library's door. */
    cli_fresh(&o, flags, 128, 1, "train.tsv");
    ss__setting_flag_set(o.settings, "alpha", "2");
    ck_assert_int_ne(ss__ctr_cli_resolve(&o, why, sizeof why), SS_OK);
    ck_assert_ptr_nonnull(strstr(why, "alpha"));
    ss__setting_flags_destroy(o.settings);
}
END_TEST

SS_CHECK_MAIN("ctr", 60, NULL, NULL, test_ne_hand_computed, test_auc_hand_computed,
              test_reader_real_criteo_sample, test_reader_malformed_lines, test_truth_deterministic,
              test_model_gradients_match_finite_differences, test_dense_optimizers_by_hand,
              test_row_adagrad_by_hand, test_score_both_normalizations,
              test_bias_starts_at_base_rate, test_first_order_weights_by_hand,
              test_first_order_weights_through_tables, test_cli_resolves_by_mode)
