/* Deltas of the embedding store: a base and the deltas after it, applied
 * to an empty store, give every row bit for bit (values and optimizer
 * state) and every deletion; a torn, truncated or corrupted file is
 * refused whole, the follower's state untouched. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "embedding-store/delta_file.h"
#include "embedding-store/emb_store.h"
#include "planted_link.h"

enum { DIM = 3, IDS = 200 };

static char g_dir[64];

static void setup(void) {
    ss__check_tmpdir(g_dir, "ss-deltas");
}

static void teardown(void) {
    ss__check_rmdir(g_dir);
}

static ss__emb_store *store(const ss__emb_bounds *b) {
    ss__emb_store_config cfg = {0};
    if (b)
        cfg.bounds = *b;
    ss__emb_store *st;
    ck_assert_int_eq(ss__emb_store_create(&cfg, &st, NULL, 0), SS_OK);
    return st;
}

/* Pushes ids from..to-1, each gradient a function of (id, round). */
static void push(ss__emb_store *st, uint64_t from, uint64_t to, int round) {
    for (uint64_t id = from; id < to; id++) {
        float g[DIM];
        for (int j = 0; j < DIM; j++)
            g[j] = 0.01f * (float)((id * 7 + (uint64_t)j + (uint64_t)round * 3) % 11) - 0.05f;
        ck_assert_int_eq(ss__emb_store_push(st, "t", &id, 1, g, NULL, 0), SS_OK);
    }
}

static ss__emb_delta_info write_delta(ss__emb_store *st, const char *name, uint64_t seq,
                                      bool base) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    ss__emb_delta_info info;
    ck_assert_int_eq(ss__emb_store_write_delta(st, path, seq, base, &info), SS_OK);
    return info;
}

static ss_status apply(ss__emb_store *st, const char *name, char *why) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    ss__emb_delta_file *f;
    ss_status s = ss__emb_delta_read(path, &f, why, 128);
    if (s != SS_OK)
        return s;
    s = ss__emb_store_apply_delta(st, f);
    ss__emb_delta_close(f);
    return s;
}

/* Every id's full row (data + Adagrad state) on both stores, bit for bit,
 * and the same ids present. */
static void assert_same(ss__emb_store *a, ss__emb_store *b) {
    static uint64_t ids[IDS];
    static float ra[IDS * (DIM + 1)], rb[IDS * (DIM + 1)];
    bool fa[IDS], fb[IDS];
    for (uint64_t i = 0; i < IDS; i++)
        ids[i] = i;
    ck_assert_int_eq(ss__emb_store_read_full(a, "t", ids, IDS, ra, fa), SS_OK);
    ck_assert_int_eq(ss__emb_store_read_full(b, "t", ids, IDS, rb, fb), SS_OK);
    for (size_t i = 0; i < IDS; i++) {
        ck_assert_msg(fa[i] == fb[i], "id %zu: present %d on the PS, %d on the follower", i, fa[i],
                      fb[i]);
        if (fa[i])
            ck_assert_msg(memcmp(ra + i * (DIM + 1), rb + i * (DIM + 1), (DIM + 1) * 4) == 0,
                          "id %zu differs", i);
    }
}

static void open_t(ss__emb_store *st) {
    ss__emb_spec spec;
    ss__emb_spec_init(&spec, "t", DIM);
    spec.optimizer = SS_EMB_ADAGRAD;
    ck_assert_int_eq(ss__emb_store_open_table(st, &spec, NULL, NULL, 0), SS_OK);
}

START_TEST(test_base_and_deltas_restore_bit_exact) {
    /* A budget of 120 rows makes deletions: tombstones in the deltas. */
    ss__emb_store *ps = store(&(ss__emb_bounds){.max_live_rows = 120});
    ss__emb_store_track_changes(ps);
    open_t(ps);
    push(ps, 0, 100, 0);
    ss__emb_delta_info b = write_delta(ps, "1.base", 1, true);
    ck_assert(b.base);
    ck_assert_uint_eq(b.rows, 100);
    push(ps, 50, 150, 1); /* 50 updated, 50 new: 150 rows, 30 over the budget */
    ss__emb_store_stats s;
    /* Deleted as the new rows come (the writer makes room: to 15/16 of the
     * budget at a time), so at least the 30. */
    ck_assert_int_eq(ss__emb_store_stats_of(ps, "t", &s), SS_OK);
    ck_assert_uint_ge(s.table.dropped, 30);
    ck_assert_uint_le(s.table.resident_rows, 120);
    ss__emb_delta_info d = write_delta(ps, "2.delta", 2, false);
    ck_assert(!d.base);
    ck_assert_uint_eq(d.deletions, s.table.dropped);
    ck_assert_uint_le(d.rows, 100); /* the updated and new rows still there, no others */
    push(ps, 140, 160, 2);
    write_delta(ps, "3.delta", 3, false);
    ss__emb_delta_info none = write_delta(ps, "4.delta", 4, false);
    ck_assert_uint_eq(none.rows, 0); /* nothing changed since */
    ck_assert_uint_eq(none.deletions, 0);

    ss__emb_store *follower = store(NULL);
    char why[128];
    ck_assert_int_eq(apply(follower, "1.base", why), SS_OK);
    ck_assert_int_eq(apply(follower, "2.delta", why), SS_OK);
    ck_assert_int_eq(apply(follower, "3.delta", why), SS_OK);
    ck_assert_int_eq(apply(follower, "4.delta", why), SS_OK);
    assert_same(ps, follower);
    ss__emb_store_destroy(follower);

    /* A base alone gives the same, and replaces what was there before. */
    write_delta(ps, "5.base", 5, true);
    follower = store(NULL);
    open_t(follower);
    push(follower, 180, 200, 9); /* rows the PS does not hold */
    ck_assert_int_eq(apply(follower, "5.base", why), SS_OK);
    assert_same(ps, follower);
    ss__emb_store_destroy(follower);
    ss__emb_store_destroy(ps);
}
END_TEST

/* Copies file name to copy, then truncates it to len (0: keep) or flips
 * the byte at flip (-1: none). */
static void damaged_copy(const char *name, const char *copy, long len, long flip) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cp '%s/%s' '%s/%s'", g_dir, name, g_dir, copy);
    ck_assert_int_eq(system(cmd), 0);
    char path[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, copy);
    if (len)
        ck_assert_int_eq(truncate(path, len), 0);
    if (flip >= 0) {
        FILE *f = fopen(path, "r+b");
        ck_assert_ptr_nonnull(f);
        fseek(f, flip, SEEK_SET);
        int c = fgetc(f);
        fseek(f, flip, SEEK_SET);
        fputc(c ^ 0x40, f);
        fclose(f);
    }
}

START_TEST(test_damaged_deltas_are_refused_whole) {
    ss__emb_store *ps = store(NULL);
    ss__emb_store_track_changes(ps);
    open_t(ps);
    push(ps, 0, 50, 0);
    write_delta(ps, "1.base", 1, true);
    push(ps, 0, 10, 1);
    write_delta(ps, "2.delta", 2, false);
    ss__emb_store *follower = store(NULL);
    char why[128] = "";
    ck_assert_int_eq(apply(follower, "1.base", why), SS_OK);
    damaged_copy("2.delta", "cut", 100, -1);
    damaged_copy("2.delta", "flipped", 0, 60);
    damaged_copy("2.delta", "header", 0, 2);
    ck_assert_int_eq(apply(follower, "cut", why), SS_ERR_PARSE);
    ck_assert_ptr_nonnull(strstr(why, "checksum"));
    ck_assert_int_eq(apply(follower, "flipped", why), SS_ERR_PARSE);
    ck_assert_int_eq(apply(follower, "header", why), SS_ERR_PARSE);
    ck_assert_ptr_nonnull(strstr(why, "not a delta file"));
    ck_assert_int_eq(apply(follower, "missing", why), SS_ERR_NOT_FOUND);
    /* still the base's state: the PS's before its second push */
    ss__emb_store *at_base = store(NULL);
    ck_assert_int_eq(apply(at_base, "1.base", why), SS_OK);
    assert_same(at_base, follower);
    ck_assert_int_eq(apply(follower, "2.delta", why), SS_OK); /* the good one applies */
    assert_same(ps, follower);
    /* A table of the same name and another dim: refused. */
    ss__emb_store *other = store(NULL);
    ss__emb_spec spec;
    ss__emb_spec_init(&spec, "t", DIM + 1);
    ck_assert_int_eq(ss__emb_store_open_table(other, &spec, NULL, NULL, 0), SS_OK);
    ck_assert_int_eq(apply(other, "1.base", why), SS_ERR_SIZE_MISMATCH);
    /* A follower creates no table on request. */
    ss__emb_store_set_read_only(follower);
    ss__emb_spec_init(&spec, "new", DIM);
    ck_assert_int_eq(ss__emb_store_open_table(follower, &spec, NULL, why, sizeof why),
                     SS_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(why, "read-only follower"));
    ss__emb_store_destroy(other);
    ss__emb_store_destroy(at_base);
    ss__emb_store_destroy(follower);
    ss__emb_store_destroy(ps);
}
END_TEST

/* A NaN row under a correct checksum (a writer's bug, or a file made to
 * pass the CRC) is refused whole: a follower never serves it. */
START_TEST(test_non_finite_row_is_refused) {
    char path[256], why[128] = "";
    snprintf(path, sizeof path, "%s/nan.delta", g_dir);
    ss__emb_delta_writer *w;
    ck_assert_int_eq(ss__emb_delta_begin(path, 1, true, 0, &w), SS_OK);
    ss__emb_spec spec;
    ss__emb_spec_init(&spec, "t", DIM);
    ss__emb_delta_table(w, &spec);
    const uint64_t ids[2] = {1, 2};
    float rows[2 * DIM] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
    rows[DIM + 1] = __builtin_nanf("");
    ck_assert_int_eq(ss__emb_delta_put(w, ids, rows, 2), SS_OK);
    ck_assert_int_eq(ss__emb_delta_commit(w), SS_OK);
    ss__emb_store *follower = store(NULL);
    ck_assert_int_eq(apply(follower, "nan.delta", why), SS_ERR_PARSE);
    ck_assert_msg(strstr(why, "NaN or Inf"), "%s", why);
    ss__emb_store_destroy(follower);
}
END_TEST

/* A delta file is made new: a link planted at its name is not written
 * through (nor is an existing file truncated). */
START_TEST(test_delta_file_never_written_through_a_link) {
    char planted[256], target[256];
    snprintf(planted, sizeof planted, "%s/planted.delta", g_dir);
    snprintf(target, sizeof target, "%s/precious", g_dir);
    plant_link(planted, target);
    ss__emb_delta_writer *w = NULL;
    ck_assert_int_eq(ss__emb_delta_begin(planted, 1, true, 0, &w), SS_ERR_IO);
    assert_not_written_through(target);
    ck_assert_int_eq(ss__emb_delta_begin(target, 1, true, 0, &w), SS_ERR_IO);
    assert_not_written_through(target);
}
END_TEST

SS_CHECK_MAIN("deltas", 60, setup, teardown, test_base_and_deltas_restore_bit_exact,
              test_damaged_deltas_are_refused_whole, test_non_finite_row_is_refused,
              test_delta_file_never_written_through_a_link)
