/* Offline resharding (tools/reshard/): 2 shards' stores into 3 and back
 * into 2 give the same rows (values and optimizer state) on the shards
 * trainers route them to, and the same dense groups, bit for bit; a store
 * in use, a table with two specs, a dense group not fully covered and an
 * output that exists are refused, saying why. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_run.h"
#include "embedding-store/emb_store.h"
#include "shadow/dense_checkpoint.h"
#include "tools/reshard/reshard.h"

enum { IDS = 300, DENSE = 10, CHUNK = 3 };

static char g_dir[64];

static void setup(void) {
    ss__check_tmpdir(g_dir, "ss-reshard-test");
}

static void teardown(void) {
    ss__check_rmdir(g_dir);
}

static const char *path(const char *name) {
    static char bufs[16][128];
    static int k;
    char *p = bufs[k++ % 16];
    snprintf(p, 128, "%s/%s", g_dir, name);
    return p;
}

static void open_tables(ss__emb_store *st) {
    ss__emb_spec t, u;
    ss__emb_spec_init(&t, "t", 3);
    t.optimizer = SS_EMB_ADAGRAD;
    ss__emb_spec_init(&u, "u", 2);
    ck_assert_int_eq(ss__emb_store_open_table(st, &t, NULL, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_store_open_table(st, &u, NULL, NULL, 0), SS_OK);
}

/* Two shards as a cluster leaves them: each row pushed to the shard the
 * jump hash gives, each table on both. */
static void make_input_stores(void) {
    for (int s = 0; s < 2; s++) {
        ss__emb_store_config cfg = {.db_path = path(s ? "in1" : "in0")};
        ss__emb_store *st;
        ck_assert_int_eq(ss__emb_store_create(&cfg, &st, NULL, 0), SS_OK);
        open_tables(st);
        for (uint64_t id = 0; id < IDS; id++)
            for (int k = 0; k < 2; k++) {
                const char *table = k ? "u" : "t";
                const uint32_t dim = k ? 2 : 3;
                if (ss__emb_shard_of(ss__emb_table_id(table), id, 2) != (uint32_t)s)
                    continue;
                float g[3] = {0.01f * (float)(id % 7), -0.02f * (float)(id % 5), 0.5f};
                ck_assert_int_eq(ss__emb_store_push(st, table, &id, 1, g, NULL, 0), SS_OK);
                (void)dim;
            }
        ck_assert_int_eq(ss__emb_store_flush(st), SS_OK);
        ss__emb_store_destroy(st);
    }
}

/* Group "dense" of DENSE floats cut for 2 shards in chunks of CHUNK, with
 * a centre (i) and, on its chunks, a last round's result (100 + i). */
static void make_input_dense(void) {
    for (int s = 0; s < 2; s++) {
        const char *dir = path(s ? "c1" : "c0");
        ck_assert_int_eq(mkdir(dir, 0700), 0);
        char file[160];
        snprintf(file, sizeof file, "%s/dense.ckpt", dir);
        const size_t lo = DENSE * s / 2, hi = DENSE * (s + 1) / 2;
        ss__dense_ckpt_writer *w;
        ck_assert_int_eq(ss__dense_ckpt_begin(file, (uint32_t)((hi - lo + CHUNK - 1) / CHUNK), &w),
                         SS_OK);
        for (size_t at = lo; at < hi; at += CHUNK) {
            const size_t end = hi - at < CHUNK ? hi : at + CHUNK;
            float c[CHUNK], m[CHUNK];
            for (size_t i = at; i < end; i++) {
                c[i - at] = (float)i;
                m[i - at] = 100.0f + (float)i;
            }
            char name[64];
            snprintf(name, sizeof name, "dense[%zu:%zu)", at, end);
            const ss__dense_ckpt_group g = {
                .name = name, .n = end - at, .central = c, .mean = m, .mean_round = 4};
            ss__dense_ckpt_put(w, &g);
        }
        ck_assert_int_eq(ss__dense_ckpt_commit(w), SS_OK);
    }
}

static ss_status reshard(const char *const *in_db, size_t nin, const char *const *out_db,
                         size_t nout, const char *const *in_c, const char *const *out_c,
                         ss__reshard_report *rep, char *why) {
    const ss__reshard_config cfg = {.in_db = in_db,
                                    .out_db = out_db,
                                    .in_ckpt = in_c,
                                    .out_ckpt = out_c,
                                    .n_in_db = nin,
                                    .n_out_db = nout,
                                    .n_in_ckpt = in_c ? nin : 0,
                                    .n_out_ckpt = out_c ? nout : 0,
                                    .chunk_floats = CHUNK};
    return ss__reshard(&cfg, rep, why, 512);
}

/* Every id of both tables: its full row on the shard it routes to among
 * the stores a, and the same bytes in the stores b. */
static void assert_same_rows(const char *const *a, size_t na, const char *const *b, size_t nb) {
    ss__emb_store *sa[4], *sb[4];
    for (size_t i = 0; i < na; i++) {
        ss__emb_store_config c = {.db_path = a[i]};
        ck_assert_int_eq(ss__emb_store_create(&c, &sa[i], NULL, 0), SS_OK);
    }
    for (size_t i = 0; i < nb; i++) {
        ss__emb_store_config c = {.db_path = b[i]};
        ck_assert_int_eq(ss__emb_store_create(&c, &sb[i], NULL, 0), SS_OK);
    }
    for (int k = 0; k < 2; k++) {
        const char *table = k ? "u" : "t";
        const size_t rf = k ? 2 : 4; /* u: SGD dim 2; t: Adagrad dim 3 + 1 */
        for (uint64_t id = 0; id < IDS; id++) {
            const uint32_t tid = ss__emb_table_id(table);
            float ra[4], rb[4];
            bool fa = false, fb = false;
            ck_assert_int_eq(ss__emb_store_read_full(sa[ss__emb_shard_of(tid, id, (uint32_t)na)],
                                                     table, &id, 1, ra, &fa),
                             SS_OK);
            ck_assert_int_eq(ss__emb_store_read_full(sb[ss__emb_shard_of(tid, id, (uint32_t)nb)],
                                                     table, &id, 1, rb, &fb),
                             SS_OK);
            ck_assert_msg(fa && fb, "%s id %llu: on its shard in a %d, in b %d", table,
                          (unsigned long long)id, fa, fb);
            ck_assert_msg(memcmp(ra, rb, rf * sizeof(float)) == 0, "%s id %llu differs", table,
                          (unsigned long long)id);
        }
    }
    for (size_t i = 0; i < na; i++)
        ss__emb_store_destroy(sa[i]);
    for (size_t i = 0; i < nb; i++)
        ss__emb_store_destroy(sb[i]);
}

/* The whole "dense" group, centre and result, from the dense.ckpt files
 * of dirs. */
static void read_dense(const char *const *dirs, size_t n, float *central, float *mean) {
    for (size_t i = 0; i < n; i++) {
        char file[160];
        snprintf(file, sizeof file, "%s/dense.ckpt", dirs[i]);
        ss__dense_ckpt_file *f;
        ck_assert_int_eq(ss__dense_ckpt_read(file, &f), SS_OK);
        for (size_t k = 0; k < ss__dense_ckpt_count(f); k++) {
            const ss__dense_ckpt_group *g = ss__dense_ckpt_group_at(f, k);
            size_t lo, hi;
            ck_assert_int_eq(sscanf(g->name, "dense[%zu:%zu)", &lo, &hi), 2);
            ck_assert_uint_le(hi - lo, CHUNK);
            memcpy(central + lo, g->central, g->n * sizeof(float));
            memcpy(mean + lo, g->mean, g->n * sizeof(float));
            ck_assert_uint_eq(g->mean_round, 4);
        }
        ss__dense_ckpt_close(f);
    }
}

START_TEST(test_two_to_three_and_back_bit_exact) {
    make_input_stores();
    make_input_dense();
    const char *in[] = {path("in0"), path("in1")}, *mid[] = {path("m0"), path("m1"), path("m2")},
               *back[] = {path("b0"), path("b1")};
    const char *in_c[] = {path("c0"), path("c1")},
               *mid_c[] = {path("mc0"), path("mc1"), path("mc2")},
               *back_c[] = {path("bc0"), path("bc1")};
    ss__reshard_report rep;
    char why[512] = "";
    ck_assert_msg(reshard(in, 2, mid, 3, in_c, mid_c, &rep, why) == SS_OK, "%s", why);
    ck_assert_uint_eq(rep.tables, 2);
    ck_assert_uint_eq(rep.rows, 2 * IDS);
    ck_assert_uint_eq(rep.groups, 1);
    ck_assert_uint_eq(rep.floats, DENSE);
    assert_same_rows(in, 2, mid, 3);
    const uint64_t checksum = rep.checksum;
    ck_assert_msg(reshard(mid, 3, back, 2, mid_c, back_c, &rep, why) == SS_OK, "%s", why);
    ck_assert_uint_eq(rep.checksum, checksum);
    assert_same_rows(in, 2, back, 2);
    float c_in[DENSE], m_in[DENSE], c_mid[DENSE], m_mid[DENSE], c_back[DENSE], m_back[DENSE];
    read_dense(in_c, 2, c_in, m_in);
    read_dense(mid_c, 3, c_mid, m_mid);
    read_dense(back_c, 2, c_back, m_back);
    for (int i = 0; i < DENSE; i++) {
        ck_assert_float_eq(c_in[i], (float)i);
        ck_assert_float_eq(m_in[i], 100.0f + (float)i);
    }
    ck_assert(memcmp(c_in, c_mid, sizeof c_in) == 0 && memcmp(c_in, c_back, sizeof c_in) == 0);
    ck_assert(memcmp(m_in, m_mid, sizeof m_in) == 0 && memcmp(m_in, m_back, sizeof m_in) == 0);
}
END_TEST

START_TEST(test_refusals_say_why) {
    make_input_stores();
    make_input_dense();
    const char *in[] = {path("in0"), path("in1")}, *out[] = {path("o0"), path("o1"), path("o2")};
    ss__reshard_report rep;
    char why[512] = "";
    /* a store in use (a running PS holds RocksDB's lock) */
    ss__emb_store_config c = {.db_path = in[1]};
    ss__emb_store *busy;
    ck_assert_int_eq(ss__emb_store_create(&c, &busy, NULL, 0), SS_OK);
    ck_assert_int_ne(reshard(in, 2, out, 3, NULL, NULL, &rep, why), SS_OK);
    ck_assert_ptr_nonnull(strstr(why, "still running"));
    ss__emb_store_destroy(busy);
    /* an output that exists */
    const char *taken[] = {path("in0")};
    ck_assert_int_eq(reshard(in, 2, taken, 1, NULL, NULL, &rep, why), SS_ERR_EXISTS);
    ck_assert_ptr_nonnull(strstr(why, "not empty"));
    /* a table of two specs */
    ss__emb_store_config oc = {.db_path = path("other")};
    ss__emb_store *other;
    ck_assert_int_eq(ss__emb_store_create(&oc, &other, NULL, 0), SS_OK);
    ss__emb_spec t;
    ss__emb_spec_init(&t, "t", 5);
    ck_assert_int_eq(ss__emb_store_open_table(other, &t, NULL, NULL, 0), SS_OK);
    ss__emb_store_destroy(other);
    const char *mixed[] = {path("in0"), path("other")}, *out2[] = {path("p0")};
    ck_assert_int_eq(reshard(mixed, 2, out2, 1, NULL, NULL, &rep, why), SS_ERR_EXISTS);
    ck_assert_ptr_nonnull(strstr(why, "another dim"));
    /* a dense group whose chunks do not cover it: the second shard's file only */
    const char *one_c[] = {path("c1")}, *out_c[] = {path("q0")};
    const ss__reshard_config dc = {.in_ckpt = one_c,
                                   .out_ckpt = out_c,
                                   .n_in_ckpt = 1,
                                   .n_out_ckpt = 1,
                                   .chunk_floats = CHUNK};
    ck_assert_int_eq(ss__reshard(&dc, &rep, why, sizeof why), SS_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(why, "cover"));
    /* nothing asked, or half a pair */
    const ss__reshard_config none = {0};
    ck_assert_int_eq(ss__reshard(&none, &rep, why, sizeof why), SS_ERR_INVALID_ARGUMENT);
    const ss__reshard_config half = {.in_db = in, .n_in_db = 2};
    ck_assert_int_eq(ss__reshard(&half, &rep, why, sizeof why), SS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(why, "give both"));
}
END_TEST

SS_CHECK_MAIN("reshard", 120, setup, teardown, test_two_to_three_and_back_bit_exact,
              test_refusals_say_why)
