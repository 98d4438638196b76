/* The embedding store: the math against hand-computed values, the table
 * (load, update, dirty tracking, eviction), shard routing, RocksDB round
 * trips and checkpoints, a table 4x over the memory cap, and the checks
 * every request gets (each refused, counted, nothing changed). */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check_run.h"
#include "embedding-store/emb_store.h"
#include "shadow/codec.h"

static char g_dir[64];

static void make_dir(void) {
    ss__check_tmpdir(g_dir, "ss-embstore");
}

static void remove_dir(void) {
    ss__check_rmdir(g_dir);
}

static ss__emb_spec spec_of(const char *name, uint32_t dim, ss__emb_optimizer opt, float lr,
                            float init_scale) {
    ss__emb_spec s;
    ck_assert_int_eq(ss__emb_spec_init(&s, name, dim), SS_OK);
    s.optimizer = opt;
    s.lr = lr;
    s.init_scale = init_scale;
    return s;
}

START_TEST(test_sgd_adagrad_elastic_by_hand) {
    ss__emb_spec sgd = spec_of("t", 2, SS_EMB_SGD, 0.1f, 0.0f);
    float row[3] = {1.0f, 2.0f, 0.0f}, g[2] = {0.5f, -1.0f};
    ss__emb_apply_gradient(&sgd, row, g);
    ck_assert_float_eq_tol(row[0], 0.95f, 1e-7f);
    ck_assert_float_eq_tol(row[1], 2.1f, 1e-7f);

    /* Row-wise Adagrad: a = (0.25 + 1) / 2 = 0.625; step = 0.1 / sqrt(0.625)
     * = 0.1264911; w = (1 - 0.0632456, 2 + 0.1264911). Then g = (1, 1):
     * a = 1.625; step = 0.1 / 1.2747549 = 0.0784465. */
    ss__emb_spec ada = spec_of("t", 2, SS_EMB_ADAGRAD, 0.1f, 0.0f);
    float r2[3] = {1.0f, 2.0f, 0.0f};
    ss__emb_apply_gradient(&ada, r2, g);
    ck_assert_float_eq_tol(r2[2], 0.625f, 1e-7f);
    ck_assert_float_eq_tol(r2[0], 0.9367544f, 1e-6f);
    ck_assert_float_eq_tol(r2[1], 2.1264911f, 1e-6f);
    float g2[2] = {1.0f, 1.0f};
    ss__emb_apply_gradient(&ada, r2, g2);
    ck_assert_float_eq_tol(r2[2], 1.625f, 1e-6f);
    ck_assert_float_eq_tol(r2[0], 0.9367544f - 0.0784465f, 1e-6f);
    ck_assert_float_eq_tol(r2[1], 2.1264911f - 0.0784465f, 1e-6f);

    /* dim 11, past the sum's block of 8 lanes: g = 1..11, mean of squares
     * 506 / 11 = 46; step = 0.1 / sqrt(46) = 0.0147442. */
    ss__emb_spec ada11 = spec_of("t", 11, SS_EMB_ADAGRAD, 0.1f, 0.0f);
    float r11[12] = {0}, g11[11];
    for (int j = 0; j < 11; j++)
        g11[j] = (float)(j + 1);
    ck_assert(ss__emb_apply_gradient(&ada11, r11, g11));
    ck_assert_float_eq_tol(r11[11], 46.0f, 1e-5f);
    ck_assert_float_eq_tol(r11[0], -0.0147442f, 1e-6f);
    ck_assert_float_eq_tol(r11[10], -11.0f * 0.0147442f, 1e-5f);

    /* A step whose result would not be finite is refused and the row kept
     * whole: 3e38 + 3e38 overflows, in the 8-lane block (value 0) and past
     * it (value 10 of 11); Adagrad's sum of squares overflowing too. */
    ss__emb_spec sgd11 = spec_of("t", 11, SS_EMB_SGD, 1.0f, 0.0f);
    for (int at = 0; at <= 10; at += 10) {
        float big[12] = {0}, before[12], gb[11] = {0};
        big[at] = 3e38f;
        big[1] = 5.0f;
        gb[at] = -3e38f;
        gb[1] = 1.0f;
        memcpy(before, big, sizeof big);
        ck_assert(!ss__emb_apply_gradient(&sgd11, big, gb));
        ck_assert_mem_eq(big, before, sizeof big);
        gb[at] = -1e38f; /* 4e38: still too far */
        ck_assert(!ss__emb_apply_gradient(&sgd11, big, gb));
        gb[at] = 1e38f; /* 2e38: fine */
        ck_assert(ss__emb_apply_gradient(&sgd11, big, gb));
        ck_assert_float_eq(big[at], 3e38f - 1e38f);
        ck_assert_float_eq(big[1], 4.0f);
    }
    float huge_g[11] = {[3] = 2e19f}, r_ada[12] = {0};
    ck_assert(!ss__emb_apply_gradient(&ada11, r_ada, huge_g)); /* (2e19)^2 overflows */
    ck_assert_float_eq(r_ada[11], 0.0f);

    /* Elastic: c = (1, 1), x = (3, -1), alpha 0.25: d = (0.5, -0.5). */
    float c[2] = {1.0f, 1.0f}, x[2] = {3.0f, -1.0f}, d[2];
    ss__emb_elastic(c, x, 0.25f, d, 2);
    ck_assert_float_eq(d[0], 0.5f);
    ck_assert_float_eq(d[1], -0.5f);
    ck_assert_float_eq(c[0], 1.5f);
    ck_assert_float_eq(c[1], 0.5f);
    ck_assert_uint_eq(ss__emb_row_floats(&ada), 3);
    ck_assert_uint_eq(ss__emb_row_floats(&sgd), 2);
}
END_TEST

/* The encoded elastic step by hand. fp16: c = (1, 1), x = (3, -1), alpha
 * 0.25: d = (0.5, -0.5), exact in fp16; the reply decodes to it and c
 * moved by it. int8 over 4 floats: d = (0, 0.1, 0.2, 0.3), min 0, max
 * 0.3, codes 0, 85, 170, 255; c moves by exactly what the reply decodes
 * to, each within half a step (0.3 / 255 / 2) of d. A delta over fp16's
 * range (1e6) saturates at 65504, and c moves by that, as the trainer
 * will. */
static ss__emb_delta_encoder encoder_of(ss__encoding *e, size_t dim) {
    return (ss__emb_delta_encoder){ss__codec_round_trip, e, ss__codec_size(*e, dim)};
}

START_TEST(test_elastic_encoded_by_hand) {
    ss__encoding fp16 = SS_ENC_FP16, int8 = SS_ENC_INT8;
    const ss__emb_delta_encoder e16 = encoder_of(&fp16, 2), e8 = encoder_of(&int8, 4);
    float c[2] = {1.0f, 1.0f}, x[2] = {3.0f, -1.0f}, back[4];
    uint8_t out[64];
    ck_assert(ss__emb_elastic_encoded(c, x, 0.25f, &e16, out, 2));
    ck_assert_int_eq(ss__codec_decode(SS_ENC_FP16, out, 4, 2, back), SS_OK);
    ck_assert_float_eq(back[0], 0.5f);
    ck_assert_float_eq(back[1], -0.5f);
    ck_assert_float_eq(c[0], 1.5f);
    ck_assert_float_eq(c[1], 0.5f);

    float c4[4] = {0, 0, 0, 0}, x4[4] = {0.0f, 0.1f, 0.2f, 0.3f};
    ck_assert(ss__emb_elastic_encoded(c4, x4, 1.0f, &e8, out, 4));
    const size_t bytes = ss__codec_size(SS_ENC_INT8, 4);
    ck_assert_uint_eq(bytes, 8 + 4); /* min, max, one byte each */
    ck_assert_uint_eq(out[8], 0);
    ck_assert_uint_eq(out[9], 85);
    ck_assert_uint_eq(out[10], 170);
    ck_assert_uint_eq(out[11], 255);
    ck_assert_int_eq(ss__codec_decode(SS_ENC_INT8, out, bytes, 4, back), SS_OK);
    for (int j = 0; j < 4; j++) {
        ck_assert_float_eq(c4[j], back[j]); /* what the trainer applies */
        ck_assert_float_eq_tol(back[j], x4[j], 0.3f / 255 / 2 + 1e-7f);
    }

    float big_c[2] = {0, 0}, big_x[2] = {1e6f, 0};
    ck_assert(ss__emb_elastic_encoded(big_c, big_x, 1.0f, &e16, out, 2));
    ck_assert_int_eq(ss__codec_decode(SS_ENC_FP16, out, 4, 2, back), SS_OK);
    ck_assert_float_eq(back[0], 65504.0f);
    ck_assert_float_eq(big_c[0], 65504.0f);
}
END_TEST

START_TEST(test_init_deterministic) {
    float a[9], b[9], c[9];
    ss__emb_row_init(7, 42, 0.5f, a, 8, 1);
    ss__emb_row_init(7, 42, 0.5f, b, 8, 1);
    ss__emb_row_init(7, 43, 0.5f, c, 8, 1);
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert_int_ne(memcmp(a, c, 8 * sizeof(float)), 0);
    for (int j = 0; j < 8; j++)
        ck_assert(a[j] >= -0.5f && a[j] <= 0.5f);
    ck_assert_float_eq(a[8], 0.0f);
    /* Mean of many initial values is near 0, spread near scale/sqrt(3). */
    double sum = 0, sq = 0;
    for (uint64_t id = 0; id < 2000; id++) {
        ss__emb_row_init(1, id, 1.0f, a, 8, 0);
        for (int j = 0; j < 8; j++)
            sum += a[j], sq += a[j] * a[j];
    }
    ck_assert(fabs(sum / 16000) < 0.02);
    ck_assert(fabs(sqrt(sq / 16000) - 1 / sqrt(3.0)) < 0.02);
}
END_TEST

START_TEST(test_shard_routing) {
    enum { N = 20000 };
    uint32_t count[5] = {0};
    int moved = 0;
    for (uint64_t id = 0; id < N; id++) {
        uint32_t s4 = ss__emb_shard_of(9, id, 4), s5 = ss__emb_shard_of(9, id, 5);
        ck_assert_uint_eq(ss__emb_shard_of(9, id, 1), 0);
        ck_assert_uint_lt(s4, 4);
        ck_assert_uint_eq(s4, ss__emb_shard_of(9, id, 4)); /* a pure function */
        /* Adding a shard moves rows only onto the new shard. */
        ck_assert(s5 == s4 || s5 == 4);
        moved += s5 != s4;
        count[s5]++;
    }
    ck_assert(moved > N / 5 - N / 50 && moved < N / 5 + N / 50);
    for (int s = 0; s < 5; s++)
        ck_assert(count[s] > N / 5 - N / 25 && count[s] < N / 5 + N / 25);
    /* Another table routes the same id independently. */
    int same = 0;
    for (uint64_t id = 0; id < 1000; id++)
        same += ss__emb_shard_of(9, id, 4) == ss__emb_shard_of(10, id, 4);
    ck_assert(same > 150 && same < 350);
}
END_TEST

/* A loader that counts its calls and gives row value = id (all floats). */
static int g_loads;
static ss_status id_loader(void *ctx, const uint64_t *ids, size_t n, float *rows, bool *stored) {
    const ss__emb_spec *spec = ctx;
    (void)stored; /* kept on read, as a cache's loader */
    g_loads += (int)n;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < ss__emb_row_floats(spec); j++)
            rows[i * ss__emb_row_floats(spec) + j] = j < spec->dim ? (float)ids[i] : 0.0f;
    return SS_OK;
}

START_TEST(test_table_load_update_dirty_evict) {
    ss__emb_spec spec = spec_of("tbl", 4, SS_EMB_SGD, 0.5f, 0.0f);
    ss__emb_table *t;
    ck_assert_int_eq(ss__emb_table_create(&spec, id_loader, &spec, &t, NULL, 0), SS_OK);
    enum { N = 1000 };
    uint64_t ids[N];
    float rows[N * 4], grads[N * 4];
    for (int i = 0; i < N; i++)
        ids[i] = (uint64_t)i * 7919u + 1;
    g_loads = 0;
    ck_assert_int_eq(ss__emb_table_lookup(t, ids, N, rows), SS_OK);
    ck_assert_int_eq(g_loads, N);
    for (int i = 0; i < N; i++)
        ck_assert_float_eq(rows[i * 4 + 3], (float)ids[i]);
    ck_assert_int_eq(ss__emb_table_lookup(t, ids, N, rows), SS_OK);
    ck_assert_int_eq(g_loads, N); /* resident now: no second load */

    /* Update the first 100 rows: w -= 0.5 * 2 -> id - 1. */
    for (int i = 0; i < 100 * 4; i++)
        grads[i] = 2.0f;
    ck_assert_int_eq(ss__emb_table_apply_gradients(t, ids, 100, grads, NULL), SS_OK);
    ck_assert_int_eq(ss__emb_table_lookup(t, ids, 2, rows), SS_OK);
    ck_assert_float_eq(rows[0], (float)ids[0] - 1.0f);
    ss__emb_table_stats stats;
    ss__emb_table_get_stats(t, &stats);
    ck_assert_uint_eq(stats.resident_rows, N);
    ck_assert_uint_eq(stats.dirty_rows, 100);
    ck_assert_uint_gt(stats.arena_bytes, N * 4 * sizeof(float));

    /* Dirty rows are never evicted. */
    ck_assert_uint_eq(ss__emb_table_evict(t, 0), N - 100);
    ck_assert_uint_eq(ss__emb_table_resident(t, NULL), 100);

    /* Collect, update one row meanwhile, settle: that row stays dirty. */
    ss__emb_dirty d = {0};
    ck_assert_int_eq(ss__emb_table_collect_dirty(t, &d, 1000), SS_OK);
    ck_assert_uint_eq(d.n, 100);
    ck_assert_int_eq(ss__emb_table_apply_gradients(t, &d.ids[0], 1, grads, NULL), SS_OK);
    ss__emb_table_settle(t, &d, NULL);
    ss__emb_table_get_stats(t, &stats);
    ck_assert_uint_eq(stats.dirty_rows, 1);
    ck_assert_int_eq(ss__emb_table_collect_dirty(t, &d, 1000), SS_OK);
    ck_assert_uint_eq(d.n, 1);
    /* Settle with deltas subtracts them from the live row (cached mode). */
    float delta[4] = {0.25f, 0.25f, 0.25f, 0.25f}, before[4], after[4];
    bool found;
    ck_assert_int_eq(ss__emb_table_peek(t, d.ids, 1, before, &found), SS_OK);
    ss__emb_table_settle(t, &d, delta);
    ck_assert_int_eq(ss__emb_table_peek(t, d.ids, 1, after, &found), SS_OK);
    ck_assert(found);
    ck_assert_float_eq(after[0], before[0] - 0.25f);
    ss__emb_dirty_free(&d);

    ck_assert_uint_eq(ss__emb_table_evict(t, 0), 100);
    ck_assert_int_eq(ss__emb_table_peek(t, ids, 1, rows, &found), SS_OK);
    ck_assert(!found);
    g_loads = 0;
    ck_assert_int_eq(ss__emb_table_lookup(t, ids, N, rows), SS_OK);
    ck_assert_int_eq(g_loads, N); /* read back through the loader */
    for (int i = 0; i < N; i++)   /* into the rows eviction freed: nothing of theirs left */
        ck_assert_float_eq(rows[i * 4 + 0], (float)ids[i]);
    ss__emb_table_stats again;

    /* A batch of 3,000 (for_rows' one-pass path, above 1,024 ids), loaded
     * into the freed rows and new slab space, then read back as hits. */
    enum { M = 3000 };
    static uint64_t big[M];
    static float out[M * 4];
    ck_assert_uint_eq(ss__emb_table_evict(t, 0), N);
    for (int i = 0; i < M; i++)
        big[i] = (uint64_t)i * 104729u + 5;
    ck_assert_int_eq(ss__emb_table_lookup(t, big, M, out), SS_OK);
    memset(out, 0, sizeof out);
    g_loads = 0;
    ck_assert_int_eq(ss__emb_table_lookup(t, big, M, out), SS_OK);
    ck_assert_int_eq(g_loads, 0);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < 4; j++)
            ck_assert_float_eq(out[i * 4 + j], (float)big[i]);
    ss__emb_table_get_stats(t, &again);
    ck_assert_uint_eq(again.resident_rows, M);
    ck_assert_uint_eq(again.row_bytes, M * 4 * sizeof(float)); /* a row is its floats */
    ss__emb_table_destroy(t);
}
END_TEST

/* Rows live in slabs (1 MiB: 1,024 rows of dim 256 per stripe); an
 * evicted row's space goes to the next row its stripe loads. 100 rounds of
 * 1,000 new ids, each evicted after, load 100,000 rows (~1,600 a stripe):
 * without reuse, every stripe would need a second slab. */
START_TEST(test_table_reuses_evicted_rows) {
    ss__emb_spec spec = spec_of("reuse", 256, SS_EMB_SGD, 0.5f, 0.0f);
    ss__emb_table *t;
    ck_assert_int_eq(ss__emb_table_create(&spec, id_loader, &spec, &t, NULL, 0), SS_OK);
    enum { N = 1000, ROUNDS = 100 };
    static uint64_t ids[N];
    static float rows[N * 256];
    uint64_t first = 0;
    for (int k = 0; k < ROUNDS; k++) {
        for (int i = 0; i < N; i++)
            ids[i] = (uint64_t)(k * N + i) * 7919u + 3;
        ck_assert_int_eq(ss__emb_table_lookup(t, ids, N, rows), SS_OK);
        for (int i = 0; i < N; i++)
            ck_assert_float_eq(rows[i * 256 + 255], (float)ids[i]);
        ss__emb_table_stats stats;
        ss__emb_table_get_stats(t, &stats);
        if (k == 0)
            first = stats.arena_bytes;
        ck_assert_uint_eq(stats.arena_bytes, first);
        ck_assert_uint_eq(ss__emb_table_evict(t, 0), N);
    }
    ck_assert_uint_gt(first, 0);
    ss__emb_table_destroy(t);
}
END_TEST

static char g_ckpt_root[160];

static ss__emb_store *open_store(const char *path, bool sync, uint64_t cap, ss__metrics *m) {
    ss__emb_store_config cfg = {.db_path = path,
                                .sync_writes = sync,
                                .flush_lag_ms = 20,
                                .mem_cap_bytes = cap,
                                .max_batch = 8192,
                                .metrics = m,
                                .checkpoint_root = g_ckpt_root,
                                .checkpoint_keep = 2};
    ss__emb_store *st;
    ck_assert_int_eq(ss__emb_store_create(&cfg, &st, NULL, 0), SS_OK);
    return st;
}

static void fill_ids(uint64_t *ids, size_t n, uint64_t base) {
    for (size_t i = 0; i < n; i++)
        ids[i] = base + i * 104729u;
}

START_TEST(test_rocksdb_round_trip) {
    make_dir();
    ss__emb_store *st = open_store(g_dir, false, 0, NULL);
    ss__emb_spec spec = spec_of("clicks", 8, SS_EMB_ADAGRAD, 0.05f, 0.1f), stored;
    ck_assert_int_eq(ss__emb_store_open_table(st, &spec, &stored, NULL, 0), SS_OK);
    enum { N = 3000 };
    static uint64_t ids[N];
    static float g[N * 8], before[N * 9], after[N * 9], rows[N * 8];
    static bool found[N];
    fill_ids(ids, N, 5);
    for (size_t i = 0; i < N * 8; i++)
        g[i] = (float)((i * 37) % 11) / 10.0f - 0.5f;
    ck_assert_int_eq(ss__emb_store_push(st, "clicks", ids, N, g, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_store_push(st, "clicks", ids, N / 2, g, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_store_read_full(st, "clicks", ids, N, before, found), SS_OK);
    ss__emb_store_destroy(st); /* flushes */

    st = open_store(g_dir, false, 0, NULL);
    ck_assert_int_eq(ss__emb_store_table_spec(st, "clicks", &stored), SS_OK);
    ck_assert_uint_eq(stored.dim, 8);
    ck_assert_int_eq(stored.optimizer, SS_EMB_ADAGRAD);
    ck_assert_int_eq(ss__emb_store_read_full(st, "clicks", ids, N, after, found), SS_OK);
    for (size_t i = 0; i < N; i++)
        ck_assert(found[i]);
    ck_assert_mem_eq(before, after, sizeof before); /* data and Adagrad state, bit for bit */
    ck_assert_int_eq(ss__emb_store_lookup(st, "clicks", ids, N, rows, NULL, 0), SS_OK);
    for (size_t i = 0; i < N; i++)
        ck_assert_mem_eq(rows + i * 8, before + i * 9, 8 * sizeof(float));
    ss__emb_store_destroy(st);
    remove_dir();
}
END_TEST

/* Bytes of RocksDB's write-ahead log in dir (its NNNNNN.log files). */
static uint64_t wal_bytes(const char *dir) {
    uint64_t total = 0;
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));) {
        const size_t len = strlen(e->d_name);
        char path[512];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (len > 4 && !strcmp(e->d_name + len - 4, ".log") && stat(path, &sb) == 0)
            total += (uint64_t)sb.st_size;
    }
    closedir(d);
    return total;
}

/* What a PS restarted after a SIGKILL replays is the log of the rows not
 * yet in a table file: with RocksDB's default 64 MiB memtable, 17 MB of
 * rows (a burst of row moves) took 0.9 s to replay on a quiet machine and
 * 1-2 s on the loaded fault soak. 34 MB of synced rows leave a few MiB. */
START_TEST(test_a_restart_replays_a_short_log) {
    make_dir();
    ss__emb_store *st = open_store(g_dir, true, 0, NULL);
    ss__emb_spec spec = spec_of("w", 64, SS_EMB_SGD, 0.1f, 0.1f), stored;
    ck_assert_int_eq(ss__emb_store_open_table(st, &spec, &stored, NULL, 0), SS_OK);
    enum { B = 8192, PUSHES = 16 };
    static uint64_t ids[B];
    static float g[B * 64];
    for (int k = 0; k < PUSHES; k++) {
        for (size_t i = 0; i < B; i++)
            ids[i] = (uint64_t)k * B + i + 1;
        ck_assert_int_eq(ss__emb_store_push(st, "w", ids, B, g, NULL, 0), SS_OK);
    }
    const uint64_t wal = wal_bytes(g_dir);
    ck_assert_msg(wal < (16u << 20), "%llu bytes of log to replay", (unsigned long long)wal);
    ss__emb_store_destroy(st);
    remove_dir();
}
END_TEST

START_TEST(test_checkpoint_restore_bit_for_bit) {
    make_dir();
    char db[128], ckpt[4096];
    snprintf(db, sizeof db, "%s/db", g_dir);
    snprintf(g_ckpt_root, sizeof g_ckpt_root, "%s/ckpts", g_dir);
    ck_assert_int_eq(mkdir(g_ckpt_root, 0700), 0);
    ss__emb_store *st = open_store(db, false, 0, NULL);
    ss__emb_spec spec = spec_of("ads", 16, SS_EMB_ADAGRAD, 0.1f, 0.05f);
    ck_assert_int_eq(ss__emb_store_open_table(st, &spec, NULL, NULL, 0), SS_OK);
    enum { N = 4096 };
    static uint64_t ids[N];
    static float g[N * 16], at_ckpt[N * 17], restored[N * 17], later[N * 17];
    static bool found[N];
    fill_ids(ids, N, 11);
    for (size_t i = 0; i < N * 16; i++)
        g[i] = sinf((float)i);
    ck_assert_int_eq(ss__emb_store_push(st, "ads", ids, N, g, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_store_read_full(st, "ads", ids, N, at_ckpt, found), SS_OK);
    char why[256], other[4096];
    ck_assert_int_eq(ss__emb_store_checkpoint(st, "ckpt-1", ckpt, sizeof ckpt, why, sizeof why),
                     SS_OK);
    char want[4096];
    snprintf(want, sizeof want, "%s/ckpt-1", g_ckpt_root);
    ck_assert_str_eq(ckpt, want);
    /* A second checkpoint of the same name is refused; a name is never a
     * place. */
    ck_assert_int_eq(ss__emb_store_checkpoint(st, "ckpt-1", other, sizeof other, why, sizeof why),
                     SS_ERR_EXISTS);
    const char *bad[] = {"../escape", "/tmp/abs", "a/b", "..", "x\"y"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_eq(ss__emb_store_checkpoint(st, bad[i], other, sizeof other, why, sizeof why),
                         SS_ERR_INVALID_ARGUMENT);
        ck_assert_ptr_nonnull(strstr(why, "name"));
    }
    ck_assert_int_eq(ss__emb_store_push(st, "ads", ids, N, g, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_store_read_full(st, "ads", ids, N, later, found), SS_OK);
    ck_assert_int_ne(memcmp(at_ckpt, later, sizeof later), 0);
    ss__emb_store_destroy(st);

    st = open_store(ckpt, false, 0, NULL); /* a checkpoint opens as a database */
    ck_assert_int_eq(ss__emb_store_read_full(st, "ads", ids, N, restored, found), SS_OK);
    for (size_t i = 0; i < N; i++)
        ck_assert(found[i]);
    ck_assert_mem_eq(at_ckpt, restored, sizeof restored);
    ss__emb_store_destroy(st);

    /* Retention: with keep = 2, three more checkpoints (one named by the
     * time) leave the newest two; what is not a checkpoint stays. */
    char notes[200];
    snprintf(notes, sizeof notes, "%s/notes", g_ckpt_root);
    ck_assert_int_eq(mkdir(notes, 0700), 0);
    st = open_store(db, false, 0, NULL);
    const char *next[] = {"", "ckpt-2", "ckpt-3"};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(
            ss__emb_store_checkpoint(st, next[i], other, sizeof other, why, sizeof why), SS_OK);
    ss__emb_store_destroy(st);
    struct stat sb;
    ck_assert_int_ne(stat(ckpt, &sb), 0); /* ckpt-1: the oldest, removed */
    snprintf(want, sizeof want, "%s/ckpt-2", g_ckpt_root);
    ck_assert_int_eq(stat(want, &sb), 0);
    ck_assert_int_eq(stat(other, &sb), 0); /* ckpt-3 */
    ck_assert_int_eq(stat(notes, &sb), 0);
    g_ckpt_root[0] = '\0';
    remove_dir();
}
END_TEST

START_TEST(test_table_4x_over_memory_cap) {
    make_dir();
    ss__metrics *m;
    ck_assert_int_eq(ss__metrics_create(&m, NULL, 0), SS_OK);
    /* Row of dim 16 (SGD) ~ 96 B + slots; cap ~ 2500 rows' worth, table
     * of 10000 rows. Every row gets k known gradients. */
    const uint64_t cap = 2500 * (96 + 23);
    ss__emb_store *st = open_store(g_dir, false, cap, m);
    ss__emb_spec spec = spec_of("big", 16, SS_EMB_SGD, 1.0f, 0.0f);
    ck_assert_int_eq(ss__emb_store_open_table(st, &spec, NULL, NULL, 0), SS_OK);
    enum { N = 10000, B = 500, PASSES = 3 };
    static uint64_t ids[N];
    static float g[B * 16], rows[N * 16];
    fill_ids(ids, N, 3);
    for (int pass = 0; pass < PASSES; pass++)
        for (size_t off = 0; off < N; off += B) {
            for (size_t i = 0; i < B * 16; i++)
                g[i] = -(float)(((off + i / 16) % 5) + 1); /* row r gains (r % 5) + 1 */
            ck_assert_int_eq(ss__emb_store_push(st, "big", ids + off, B, g, NULL, 0), SS_OK);
        }
    ss__emb_store_stats stats;
    ck_assert_int_eq(ss__emb_store_stats_of(st, "big", &stats), SS_OK);
    ck_assert_uint_gt(stats.table.evictions, N / 2);
    ck_assert_uint_lt(stats.table.resident_rows, N / 2);
    for (size_t off = 0; off < N; off += 2000)
        ck_assert_int_eq(ss__emb_store_lookup(st, "big", ids + off, 2000, rows + off * 16, NULL, 0),
                         SS_OK);
    for (size_t r = 0; r < N; r++)
        for (int j = 0; j < 16; j++)
            ck_assert_float_eq(rows[r * 16 + j], (float)(PASSES * ((r % 5) + 1)));
    ss__emb_store_destroy(st);
    ss__metrics_destroy(m);
    remove_dir();
}
END_TEST

static uint64_t rejected(ss__metrics *m, const char *reason) {
    const char *labels[] = {"reason", reason, NULL};
    ss__counter *c;
    ck_assert_int_eq(ss__metrics_counter(m, "shadowsync_emb_rejected_total",
                                         "Embedding requests refused, by reason; no stored row "
                                         "changed.",
                                         labels, &c),
                     SS_OK);
    return ss__counter_value(c);
}

START_TEST(test_bad_input_refused_counted_unchanged) {
    make_dir();
    ss__metrics *m;
    ck_assert_int_eq(ss__metrics_create(&m, NULL, 0), SS_OK);
    ss__emb_store *st = open_store(g_dir, true, 0, m);
    ss__emb_spec spec = spec_of("t", 4, SS_EMB_SGD, 0.1f, 0.1f);
    ck_assert_int_eq(ss__emb_store_open_table(st, &spec, NULL, NULL, 0), SS_OK);
    uint64_t ids[4] = {1, 2, 3, 4};
    float g[16], before[16], after[16], out[16];
    bool found[4];
    for (int i = 0; i < 16; i++)
        g[i] = 1.0f;
    ck_assert_int_eq(ss__emb_store_push(st, "t", ids, 4, g, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_store_read_full(st, "t", ids, 4, before, found), SS_OK);
    char why[256];

    ss__emb_spec other = spec;
    other.dim = 8;
    ck_assert_int_eq(ss__emb_store_open_table(st, &other, NULL, why, sizeof why),
                     SS_ERR_SIZE_MISMATCH);
    ck_assert_ptr_nonnull(strstr(why, "dim 4"));
    ck_assert_uint_eq(rejected(m, "dim_mismatch"), 1);
    other = spec;
    other.lr = 0.2f;
    ck_assert_int_eq(ss__emb_store_open_table(st, &other, NULL, why, sizeof why), SS_ERR_EXISTS);
    ck_assert_uint_eq(rejected(m, "spec_mismatch"), 1);
    other = spec;
    other.dim = 0;
    ck_assert_int_eq(ss__emb_store_open_table(st, &other, NULL, why, sizeof why),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(rejected(m, "bad_spec"), 1);

    ck_assert_int_eq(ss__emb_store_lookup(st, "nope", ids, 4, out, why, sizeof why),
                     SS_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(why, "unknown table"));
    ck_assert_int_eq(ss__emb_store_push(st, "nope", ids, 4, g, why, sizeof why), SS_ERR_NOT_FOUND);
    ck_assert_uint_eq(rejected(m, "unknown_table"), 2);

    ck_assert_int_eq(ss__emb_store_push(st, "t", ids, 0, g, why, sizeof why),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss__emb_store_lookup(st, "t", ids, 0, out, why, sizeof why),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(rejected(m, "empty_batch"), 2);

    static uint64_t many[8193];
    static float many_g[8193 * 4];
    for (int i = 0; i < 8193; i++)
        many[i] = (uint64_t)i;
    ck_assert_int_eq(ss__emb_store_push(st, "t", many, 8193, many_g, why, sizeof why),
                     SS_ERR_NO_MEMORY);
    ck_assert_ptr_nonnull(strstr(why, "over the limit"));
    ck_assert_uint_eq(rejected(m, "batch_too_large"), 1);

    uint64_t dup[4] = {1, 2, 3, 1};
    ck_assert_int_eq(ss__emb_store_push(st, "t", dup, 4, g, why, sizeof why),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ss__emb_store_lookup(st, "t", dup, 4, out, why, sizeof why),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(rejected(m, "duplicate_ids"), 2);
    /* A large batch: 4096 distinct ids pass the duplicate check (its hash
     * set then holds collisions: a lookup, so no push is counted); the same
     * batch with one id repeated far apart is refused, naming that id. */
    static uint64_t big[4096];
    static float big_g[4096 * 4], big_out[4096 * 4]; /* zero gradients */
    for (int i = 0; i < 4096; i++)
        big[i] = (uint64_t)i * 1000003u + ((uint64_t)i << 40);
    ck_assert_int_eq(ss__emb_store_lookup(st, "t", big, 4096, big_out, why, sizeof why), SS_OK);
    big[4095] = big[17];
    ck_assert_int_eq(ss__emb_store_push(st, "t", big, 4096, big_g, why, sizeof why),
                     SS_ERR_INVALID_ARGUMENT);
    char want[64];
    snprintf(want, sizeof want, "id %llu appears more than once", (unsigned long long)big[17]);
    ck_assert_ptr_nonnull(strstr(why, want));
    ck_assert_uint_eq(rejected(m, "duplicate_ids"), 3);

    g[13] = NAN;
    ck_assert_int_eq(ss__emb_store_push(st, "t", ids, 4, g, why, sizeof why), SS_ERR_NON_FINITE);
    ck_assert_ptr_nonnull(strstr(why, "value 1 of row 3 is not finite")); /* g[13], dim 4 */
    g[13] = INFINITY;
    ck_assert_int_eq(ss__emb_store_push(st, "t", ids, 4, g, why, sizeof why), SS_ERR_NON_FINITE);
    g[13] = 1.0f;
    g[0] = -INFINITY;
    ck_assert_int_eq(ss__emb_store_elastic(st, "t", ids, 4, g, 0.5f, out, why, sizeof why),
                     SS_ERR_NON_FINITE);
    ck_assert_uint_eq(rejected(m, "non_finite"), 3);
    g[0] = 1.0f;
    ck_assert_int_eq(ss__emb_store_elastic(st, "t", ids, 4, g, 1.5f, out, why, sizeof why),
                     SS_ERR_INVALID_ARGUMENT);
    ck_assert_uint_eq(rejected(m, "bad_alpha"), 1);

    ck_assert_int_eq(ss__emb_store_read_full(st, "t", ids, 4, after, found), SS_OK);
    ck_assert_mem_eq(before, after, sizeof before);
    ss__emb_store_stats stats;
    ck_assert_int_eq(ss__emb_store_stats_of(st, "t", &stats), SS_OK);
    ck_assert_uint_eq(stats.pushes, 4); /* only the first push */
    ss__emb_store_destroy(st);
    ss__metrics_destroy(m);
    remove_dir();
}
END_TEST

/* --max-rows without a database: lookups of never-updated rows make room
 * for themselves (those rows re-initialize identically), pushed rows stay,
 * and once only pushed rows fill the limit a request that could add rows
 * is refused (too_many_rows), naming the flag. With a database the pushed
 * rows are written and evicted instead, and the request goes through. */
START_TEST(test_row_limit) {
    ss__metrics *m;
    ck_assert_int_eq(ss__metrics_create(&m, NULL, 0), SS_OK);
    ss__emb_store_config cfg = {.max_rows = 1000, .metrics = m, .max_batch = 8192};
    ss__emb_store *st;
    ck_assert_int_eq(ss__emb_store_create(&cfg, &st, NULL, 0), SS_OK);
    ss__emb_spec spec = spec_of("r", 4, SS_EMB_SGD, 0.1f, 0.1f);
    ck_assert_int_eq(ss__emb_store_open_table(st, &spec, NULL, NULL, 0), SS_OK);
    static uint64_t ids[4000];
    static float rows[4000 * 4], g[4000 * 4];
    fill_ids(ids, 4000, 1);
    for (int k = 0; k < 4; k++) /* 4000 distinct rows looked up, 1000 at a time */
        ck_assert_int_eq(ss__emb_store_lookup(st, "r", ids + k * 1000, 1000, rows, NULL, 0), SS_OK);
    ss__emb_store_stats stats;
    ck_assert_int_eq(ss__emb_store_stats_of(st, "r", &stats), SS_OK);
    ck_assert_uint_le(stats.table.resident_rows, 1000);
    ck_assert_int_eq(ss__emb_store_push(st, "r", ids, 900, g, NULL, 0), SS_OK);
    char why[256] = "";
    ck_assert_int_eq(ss__emb_store_push(st, "r", ids + 2000, 200, g, why, sizeof why),
                     SS_ERR_TOO_LARGE);
    ck_assert_ptr_nonnull(strstr(why, "--max-rows"));
    ck_assert_int_eq(ss__emb_store_lookup(st, "r", ids, 900, rows, NULL, 0), SS_OK); /* held */
    ss__emb_store_destroy(st);

    make_dir();
    cfg.db_path = g_dir;
    ck_assert_int_eq(ss__emb_store_create(&cfg, &st, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_store_open_table(st, &spec, NULL, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_store_push(st, "r", ids, 900, g, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_store_push(st, "r", ids + 2000, 200, g, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_store_stats_of(st, "r", &stats), SS_OK);
    ck_assert_uint_le(stats.table.resident_rows, 1000);
    ss__emb_store_destroy(st);
    ss__metrics_destroy(m);
    remove_dir();
}
END_TEST

/* One table limit, checked before the spec is persisted: a writer that
 * opens one table past the default limit is refused, naming the flag, and
 * the store reopens with every table it admitted (before, the default
 * 1024 was above a compile-time 256: table 257's spec was persisted, its
 * creation failed, and the store never opened again). A limit above the
 * store's own is refused at create. */
START_TEST(test_table_limit_keeps_the_store_reopenable) {
    make_dir();
    ss__emb_store_config cfg = {.db_path = g_dir, .max_batch = 64};
    ss__emb_store *st;
    ck_assert_int_eq(ss__emb_store_create(&cfg, &st, NULL, 0), SS_OK);
    char name[32], why[256] = "";
    for (int i = 0; i < SS_EMB_DEFAULT_MAX_TABLES; i++) {
        snprintf(name, sizeof name, "t%d", i);
        ss__emb_spec spec = spec_of(name, 2, SS_EMB_SGD, 0.1f, 0.0f);
        ck_assert_int_eq(ss__emb_store_open_table(st, &spec, NULL, why, sizeof why), SS_OK);
    }
    ss__emb_spec over = spec_of("one-too-many", 2, SS_EMB_SGD, 0.1f, 0.0f);
    ck_assert_int_eq(ss__emb_store_open_table(st, &over, NULL, why, sizeof why), SS_ERR_TOO_LARGE);
    ck_assert_ptr_nonnull(strstr(why, "--max-tables"));
    ss__emb_store_destroy(st);
    ck_assert_int_eq(ss__emb_store_create(&cfg, &st, NULL, 0), SS_OK);
    ss__emb_spec got;
    ck_assert_int_eq(ss__emb_store_table_spec(st, "t0", &got), SS_OK);
    snprintf(name, sizeof name, "t%d", SS_EMB_DEFAULT_MAX_TABLES - 1);
    ck_assert_int_eq(ss__emb_store_table_spec(st, name, &got), SS_OK);
    ck_assert_int_eq(ss__emb_store_table_spec(st, "one-too-many", &got), SS_ERR_NOT_FOUND);
    ss__emb_store_destroy(st);
    cfg.max_tables = SS_EMB_MAX_TABLES + 1;
    ck_assert_int_eq(ss__emb_store_create(&cfg, &st, NULL, 0), SS_ERR_INVALID_ARGUMENT);
    remove_dir();
}
END_TEST

SS_CHECK_MAIN("embstore", 120, NULL, NULL, test_sgd_adagrad_elastic_by_hand,
              test_elastic_encoded_by_hand, test_init_deterministic, test_shard_routing,
              test_table_load_update_dirty_evict, test_table_reuses_evicted_rows,
              test_rocksdb_round_trip, test_a_restart_replays_a_short_log,
              test_checkpoint_restore_bit_for_bit, test_table_4x_over_memory_cap,
              test_bad_input_refused_counted_unchanged, test_row_limit,
              test_table_limit_keeps_the_store_reopenable)
