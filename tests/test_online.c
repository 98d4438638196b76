/* Online training's pieces: the stream reader (chunks, a rank's share, a
 * followed directory, stop), the drifting generator (turnover, drift, the
 * row format) and progressive NE from sums, against hand-counted values. */
#include <check.h>

#include "check_run.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/ctr/drift.h"
#include "tools/ctr/eval.h"
#include "tools/ctr/stream.h"

/* Writes n rows whose first integer field is its row number (label: odd
 * rows click) to path. */
static void write_numbered(const char *path, int first, int n) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = first; i < first + n; i++) {
        fprintf(f, "%d\t%d", i % 2, i);
        for (int j = 1; j < 13; j++)
            fputc('\t', f);
        for (int j = 0; j < 26; j++)
            fprintf(f, "\t%08x", (unsigned)(i * 31 + j));
        fputc('\n', f);
    }
    fclose(f);
}

/* The row number a row carries: expm1 of its log1p-transformed field. */
static int number_of(const ss__ctr_example *ex) {
    return (int)lround(expm1((double)ex->dense[0]));
}

static void publish(const char *dir, const char *name, int first, int n) {
    char tmp[256], path[256];
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_numbered(tmp, first, n);
    ck_assert_int_eq(rename(tmp, path), 0);
}

START_TEST(test_stream_chunks_and_rank_share) {
    char path[] = "/tmp/ss-online-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    write_numbered(path, 0, 10);
    /* chunks of 4: 4, 4, 2, then the end */
    ss__ctr_stream *s;
    ss__ctr_stream_config cfg = {.path = path, .chunk_rows = 4};
    ck_assert_int_eq(ss__ctr_stream_open(&cfg, &s, NULL, 0), SS_OK);
    const ss__ctr_dataset *c;
    const size_t want[] = {4, 4, 2, 0};
    int next = 0;
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(ss__ctr_stream_next(s, &c), SS_OK);
        ck_assert_uint_eq(c->nrows, want[k]);
        for (size_t i = 0; i < c->nrows; i++)
            ck_assert_int_eq(number_of(&c->rows[i]), next++);
    }
    ss__ctr_stream_stats st;
    ss__ctr_stream_get_stats(s, &st);
    ck_assert_uint_eq(st.rows, 10);
    ss__ctr_stream_close(s);
    /* rank 1 of 3: rows 1, 4, 7 */
    cfg = (ss__ctr_stream_config){.path = path, .chunk_rows = 100, .rank = 1, .world = 3};
    ck_assert_int_eq(ss__ctr_stream_open(&cfg, &s, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__ctr_stream_next(s, &c), SS_OK);
    ck_assert_uint_eq(c->nrows, 3);
    ck_assert_int_eq(number_of(&c->rows[0]), 1);
    ck_assert_int_eq(number_of(&c->rows[1]), 4);
    ck_assert_int_eq(number_of(&c->rows[2]), 7);
    ss__ctr_stream_close(s);
    cfg = (ss__ctr_stream_config){.path = path, .follow_dir = "/tmp", .chunk_rows = 1};
    ck_assert_int_eq(ss__ctr_stream_open(&cfg, &s, NULL, 0), SS_ERR_INVALID_ARGUMENT);
    cfg = (ss__ctr_stream_config){.path = "/nonexistent/rows.tsv", .chunk_rows = 1};
    ck_assert_int_eq(ss__ctr_stream_open(&cfg, &s, NULL, 0), SS_ERR_IO);
    unlink(path);
}
END_TEST

START_TEST(test_stream_follows_a_directory) {
    char dir[] = "/tmp/ss-follow-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    publish(dir, "001.tsv", 0, 3);
    char junk[300];
    snprintf(junk, sizeof junk, "%s/_SUCCESS", dir); /* not data */
    write_numbered(junk, 100, 5);
    snprintf(junk, sizeof junk, "%s/002.tsv.tmp", dir); /* being written */
    write_numbered(junk, 200, 5);
    ss__ctr_stream *s;
    const ss__ctr_stream_config cfg = {.follow_dir = dir, .chunk_rows = 100, .poll_ms = 10};
    ck_assert_int_eq(ss__ctr_stream_open(&cfg, &s, NULL, 0), SS_OK);
    const ss__ctr_dataset *c;
    /* what is there is handed out at once, without waiting for more */
    ck_assert_int_eq(ss__ctr_stream_next(s, &c), SS_OK);
    ck_assert_uint_eq(c->nrows, 3);
    ck_assert_int_eq(number_of(&c->rows[2]), 2);
    publish(dir, "002.tsv", 3, 2);
    publish(dir, "003.tsv", 5, 1);
    char done[300];
    snprintf(done, sizeof done, "%s/_DONE", dir);
    fclose(fopen(done, "w"));
    int next = 3;
    for (;;) {
        ck_assert_int_eq(ss__ctr_stream_next(s, &c), SS_OK);
        if (c->nrows == 0)
            break;
        for (size_t i = 0; i < c->nrows; i++)
            ck_assert_int_eq(number_of(&c->rows[i]), next++);
    }
    ck_assert_int_eq(next, 6); /* 0..5: every published row once, no junk */
    ss__ctr_stream_stats st;
    ss__ctr_stream_get_stats(s, &st);
    ck_assert_uint_eq(st.files, 3);
    ck_assert(!st.stopped);
    ss__ctr_stream_close(s);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(test_stream_stop_ends_a_waiting_follower) {
    char dir[] = "/tmp/ss-follow-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ss__ctr_stream *s;
    const ss__ctr_stream_config cfg = {.follow_dir = dir, .chunk_rows = 10, .poll_ms = 10};
    ck_assert_int_eq(ss__ctr_stream_open(&cfg, &s, NULL, 0), SS_OK);
    usleep(50000); /* the reader is polling an empty directory */
    ss__ctr_stream_stop(s);
    const ss__ctr_dataset *c;
    ck_assert_int_eq(ss__ctr_stream_next(s, &c), SS_OK);
    ck_assert_uint_eq(c->nrows, 0);
    ss__ctr_stream_stats st;
    ss__ctr_stream_get_stats(s, &st);
    ck_assert(st.stopped);
    ss__ctr_stream_close(s);
    rmdir(dir);
}
END_TEST

/* Draws row index of a drifting truth with a fresh rng of seed 7. */
static void draw(ss__ctr_drift *d, uint64_t index, ss__ctr_raw_row *row, double *p) {
    ss__rng rng;
    ss__rng_seed(&rng, 7);
    ss__ctr_drift_sample(d, &rng, index, row, p);
}

START_TEST(test_drift_turnover_and_rate) {
    ss__ctr_drift *still, *turning, *renewing;
    ss__ctr_drift_config cfg = {.model_seed = 42};
    ck_assert_int_eq(ss__ctr_drift_create(&cfg, &still, NULL, 0), SS_OK);
    cfg.rate = 1e6; /* a radian per row */
    ck_assert_int_eq(ss__ctr_drift_create(&cfg, &turning, NULL, 0), SS_OK);
    cfg = (ss__ctr_drift_config){.model_seed = 42, .turnover = 1e6}; /* every id, every row */
    ck_assert_int_eq(ss__ctr_drift_create(&cfg, &renewing, NULL, 0), SS_OK);
    ss__ctr_raw_row a, b;
    double pa, pb;
    /* Neither turnover nor drift: the same draw is the same row at any index. */
    draw(still, 0, &a, &pa);
    draw(still, 1000000000, &b, &pb);
    ck_assert(memcmp(a.cats, b.cats, sizeof a.cats) == 0);
    ck_assert_double_eq(pa, pb);
    /* Drift: the same ids, another probability (the weights turned). */
    draw(turning, 0, &a, &pa);
    draw(turning, 3, &b, &pb);
    ck_assert(memcmp(a.cats, b.cats, sizeof a.cats) == 0);
    ck_assert_double_ne(pa, pb);
    /* Turnover: every present field has a new id. */
    draw(renewing, 0, &a, &pa);
    draw(renewing, 1, &b, &pb);
    int present = 0;
    for (int f = 0; f < SS_CTR_NUM_CAT; f++) {
        ck_assert_int_eq(a.cat_missing[f], b.cat_missing[f]);
        if (a.cat_missing[f])
            continue;
        present++;
        ck_assert_uint_ne(a.cats[f], b.cats[f]);
    }
    ck_assert_int_gt(present, 10);
    cfg.turnover = -1;
    ss__ctr_drift *bad;
    ck_assert_int_eq(ss__ctr_drift_create(&cfg, &bad, NULL, 0), SS_ERR_INVALID_ARGUMENT);
    ss__ctr_drift_destroy(still);
    ss__ctr_drift_destroy(turning);
    ss__ctr_drift_destroy(renewing);
}
END_TEST

START_TEST(test_categorical_shape_and_row_format) {
    ss__ctr_drift *d;
    const ss__ctr_drift_config cfg = {.model_seed = 3, .categorical = true};
    ck_assert_int_eq(ss__ctr_drift_create(&cfg, &d, NULL, 0), SS_OK);
    ss__rng rng;
    ss__rng_seed(&rng, 11);
    for (int i = 0; i < 200; i++) {
        ss__ctr_raw_row row;
        double p;
        ss__ctr_drift_sample(d, &rng, (uint64_t)i, &row, &p);
        for (int j = 0; j < SS_CTR_NUM_DENSE; j++)
            ck_assert(row.int_missing[j]); /* no integer fields */
        if (i == 0) {                      /* negative and large integers format too */
            row.int_missing[0] = row.int_missing[1] = false;
            row.ints[0] = -42;
            row.ints[1] = 1234567890123;
        }
        /* the fast formatter writes what fprintf writes */
        char fast[SS_CTR_ROW_MAX], *slow = NULL;
        size_t n = ss__ctr_raw_row_format(&row, fast), slow_len = 0;
        FILE *m = open_memstream(&slow, &slow_len);
        ck_assert_int_eq(ss__ctr_raw_row_write(m, &row), 0);
        fclose(m);
        ck_assert_uint_eq(n, slow_len);
        ck_assert(memcmp(fast, slow, n) == 0);
        free(slow);
    }
    ss__ctr_drift_destroy(d);
}
END_TEST

START_TEST(test_ne_from_sums) {
    /* 4 examples, 1 click, summed log loss 2.0: ctr 0.25, entropy
     * -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.5623351446; NE = 0.5 / that. */
    ck_assert_double_eq_tol(ss__ctr_ne_of(2.0, 4, 1), 0.5 / 0.5623351446188083, 1e-12);
    ck_assert(isnan(ss__ctr_ne_of(1.0, 4, 0))); /* one class */
    ck_assert(isnan(ss__ctr_ne_of(0.0, 0, 0))); /* nothing */
}
END_TEST

SS_CHECK_MAIN("online", 60, NULL, NULL, test_stream_chunks_and_rank_share,
              test_stream_follows_a_directory, test_stream_stop_ends_a_waiting_follower,
              test_drift_turnover_and_rate, test_categorical_shape_and_row_format,
              test_ne_from_sums)
