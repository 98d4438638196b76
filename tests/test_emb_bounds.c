/* The bounds of an online table (emb_table.h): admission on the K-th
 * update, expiry after ttl_s without an update, the row budget deleting
 * the least recently updated rows; against hand-counted examples. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "common/metrics.h"
#include "embedding-store/emb_store.h"
#include "embedding-store/emb_table.h"

enum { DIM = 2 };

/* Rows stored nowhere: every row is new, initial value 0. */
static ss_status new_rows(void *ctx, const uint64_t *ids, size_t n, float *rows, bool *stored) {
    (void)ctx, (void)ids;
    memset(rows, 0, n * DIM * sizeof *rows);
    for (size_t i = 0; i < n; i++)
        stored[i] = false;
    return SS_OK;
}

static ss__emb_table *table_with(const ss__emb_bounds *b, uint64_t now_s) {
    ss__emb_spec spec;
    ss__emb_spec_init(&spec, "bounded", DIM);
    spec.lr = 1.0f; /* SGD: a gradient of 1 takes 1 off */
    ss__emb_table *t;
    ck_assert_int_eq(ss__emb_table_create(&spec, new_rows, NULL, &t, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_table_set_bounds(t, b, now_s), SS_OK);
    return t;
}

static void push(ss__emb_table *t, uint64_t id) {
    const float g[DIM] = {1.0f, 1.0f};
    size_t refused = 1;
    ck_assert_int_eq(ss__emb_table_apply_gradients(t, &id, 1, g, &refused), SS_OK);
    ck_assert_uint_eq(refused, 0);
}

static bool resident(ss__emb_table *t, uint64_t id) {
    return ss__emb_table_count_missing(t, &id, 1) == 0;
}

/* on_delete: the ids, in order. */
typedef struct gone {
    uint64_t ids[16];
    size_t n;
} gone;

static void record(void *ctx, const uint64_t *ids, size_t n) {
    gone *g = ctx;
    for (size_t i = 0; i < n && g->n < 16; i++)
        g->ids[g->n++] = ids[i];
}

START_TEST(test_admission_on_the_kth_push) {
    ss__emb_table *t = table_with(&(ss__emb_bounds){.admit_count = 3}, 0);
    push(t, 7);
    push(t, 7); /* counted, not stored */
    ck_assert(!resident(t, 7));
    float row[DIM] = {9, 9};
    ck_assert_int_eq(ss__emb_table_lookup(t, (uint64_t[]){7}, 1, row), SS_OK);
    ck_assert_float_eq(row[0], 0.0f); /* its initial row: the pushes left nothing */
    push(t, 7);                       /* the 3rd: stored, and applied */
    ck_assert(resident(t, 7));
    ck_assert_int_eq(ss__emb_table_lookup(t, (uint64_t[]){7}, 1, row), SS_OK);
    ck_assert_float_eq(row[0], -1.0f);
    push(t, 7); /* stored rows take every update */
    ck_assert_int_eq(ss__emb_table_lookup(t, (uint64_t[]){7}, 1, row), SS_OK);
    ck_assert_float_eq(row[1], -2.0f);
    push(t, 8); /* another id counts on its own */
    ck_assert(!resident(t, 8));
    ss__emb_table_stats st;
    ss__emb_table_get_stats(t, &st);
    ck_assert_uint_eq(st.admitted, 1);
    ck_assert_uint_eq(st.not_admitted, 3); /* 7 twice, 8 once */
    ck_assert_uint_eq(st.resident_rows, 1);
    /* An elastic step of an id not admitted: a zero delta, nothing kept. */
    float x[DIM] = {4, 4}, d[DIM] = {5, 5};
    size_t refused;
    ck_assert_int_eq(ss__emb_table_elastic(t, (uint64_t[]){9}, 1, x, 0.5f, d, &refused), SS_OK);
    ck_assert_float_eq(d[0], 0.0f);
    ck_assert(!resident(t, 9));
    ck_assert_int_eq(ss__emb_table_set_bounds(t, &(ss__emb_bounds){.admit_count = 70000}, 0),
                     SS_ERR_INVALID_ARGUMENT);
    ss__emb_table_destroy(t);
}
END_TEST

START_TEST(test_rows_expire_after_ttl) {
    ss__emb_table *t = table_with(&(ss__emb_bounds){.ttl_s = 10}, 1000);
    push(t, 1);
    push(t, 2);
    gone g = {0};
    ck_assert_uint_eq(ss__emb_table_sweep(t, 1005, record, &g), 0);
    push(t, 2); /* at 1005: 2 is 5 s younger than 1 */
    ck_assert_uint_eq(ss__emb_table_sweep(t, 1009, record, &g), 0); /* 1 is 9 s old */
    ck_assert_uint_eq(ss__emb_table_sweep(t, 1010, record, &g), 1); /* 10 s: gone */
    ck_assert_uint_eq(g.n, 1);
    ck_assert_uint_eq(g.ids[0], 1);
    ck_assert(!resident(t, 1));
    ck_assert(resident(t, 2));
    ck_assert_uint_eq(ss__emb_table_sweep(t, 1015, record, &g), 1); /* 2: 10 s after 1005 */
    ss__emb_table_stats st;
    ss__emb_table_get_stats(t, &st);
    ck_assert_uint_eq(st.expired, 2);
    ck_assert_uint_eq(st.resident_rows, 0);
    ck_assert_uint_eq(st.dirty_rows, 0); /* deleted dirty rows are not left counted */
    ss__emb_table_destroy(t);
}
END_TEST

START_TEST(test_budget_drops_least_recently_pushed) {
    ss__emb_table *t = table_with(&(ss__emb_bounds){.max_live_rows = 3}, 100);
    gone g = {0};
    for (uint64_t id = 1; id <= 5; id++) { /* id k pushed at 99 + k */
        ss__emb_table_sweep(t, 99 + id, NULL, NULL);
        push(t, id);
    }
    ss__emb_table_sweep(t, 104, NULL, NULL); /* 5 rows, 3 allowed: pushed at 100..104 */
    /* that sweep already cut the two oldest */
    ck_assert(!resident(t, 1));
    ck_assert(!resident(t, 2));
    for (uint64_t id = 3; id <= 5; id++)
        ck_assert(resident(t, id));
    push(t, 3); /* 3 is now the newest; 4 the oldest */
    ss__emb_table_sweep(t, 106, NULL, NULL);
    push(t, 6);
    ck_assert_uint_eq(ss__emb_table_sweep(t, 107, record, &g), 1);
    ck_assert_uint_eq(g.ids[0], 4);
    ss__emb_table_stats st;
    ss__emb_table_get_stats(t, &st);
    ck_assert_uint_eq(st.dropped, 3);
    ck_assert_uint_eq(st.resident_rows, 3);
    ss__emb_table_destroy(t);
}
END_TEST

/* A table nobody flushes (a PS without --emb-db) whose budget deletes
 * rows as fast as new ones come: its index stays the size its live rows
 * need. Every new row is queued as dirty; a deleted one's id used to stay
 * in the queue for good (8 bytes for every row ever made: 800 KB here). */
START_TEST(test_a_bounded_table_does_not_grow_with_rows_made) {
    ss__emb_table *t = table_with(&(ss__emb_bounds){.max_live_rows = 100}, 100);
    for (uint64_t id = 1; id <= 100000; id++) {
        push(t, id);
        if (id % 100 == 0)
            ss__emb_table_sweep(t, 100 + id, NULL, NULL);
    }
    ss__emb_table_stats st;
    ss__emb_table_get_stats(t, &st);
    ck_assert_uint_le(st.resident_rows, 200);
    /* 64 stripes' slots and queues: 83 KB; with every id ever made queued: 1 MB */
    ck_assert_msg(st.index_bytes < 256 * 1024, "index %llu bytes for %llu rows",
                  (unsigned long long)st.index_bytes, (unsigned long long)st.resident_rows);
    ss__emb_table_destroy(t);
}
END_TEST

/* A scratch directory and the path of a database in it. */
static void scratch_db(char dir[64], char db[80]) {
    ss__check_tmpdir(dir, "ss-bounds");
    snprintf(db, 80, "%s/db", dir);
}

/* The PS's store: an expired row leaves RocksDB too (a restart does not
 * bring it back), the bounded series are on /metrics, and rows stored
 * before a restart are held (and expire) after it. */
START_TEST(test_store_expiry_reaches_rocksdb) {
    char dir[64], db[80];
    scratch_db(dir, db);
    ss__metrics *m;
    ck_assert_int_eq(ss__metrics_create(&m, NULL, 0), SS_OK);
    /* max_rows (the PS's default is 50M) only refuses past it */
    ss__emb_store_config cfg = {
        .db_path = db, .metrics = m, .max_rows = 1000, .bounds = {.ttl_s = 2}};
    ss__emb_store *st;
    ck_assert_int_eq(ss__emb_store_create(&cfg, &st, NULL, 0), SS_OK);
    ss__emb_spec spec, stored;
    ss__emb_spec_init(&spec, "t", DIM);
    ck_assert_int_eq(ss__emb_store_open_table(st, &spec, &stored, NULL, 0), SS_OK);
    const float g[2 * DIM] = {1, 1, 1, 1};
    ck_assert_int_eq(ss__emb_store_push(st, "t", (uint64_t[]){5, 6}, 2, g, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_store_flush(st), SS_OK);
    ss__emb_store_destroy(st); /* a restart: both rows come back, held whole */
    ck_assert_int_eq(ss__emb_store_create(&cfg, &st, NULL, 0), SS_OK);
    ss__emb_store_stats ss;
    ck_assert_int_eq(ss__emb_store_stats_of(st, "t", &ss), SS_OK);
    ck_assert_uint_eq(ss.table.resident_rows, 2);
    for (int i = 0; i < 40 && ss.table.expired < 2; i++) { /* 2 s, swept once a second */
        usleep(100000);
        ck_assert_int_eq(ss__emb_store_stats_of(st, "t", &ss), SS_OK);
    }
    ck_assert_uint_eq(ss.table.expired, 2);
    usleep(1200000); /* the next sweep reports them */
    char *text;
    size_t len;
    ck_assert_int_eq(ss__metrics_render(m, &text, &len), SS_OK);
    ck_assert_ptr_nonnull(strstr(text, "shadowsync_emb_expired_rows_total{table=\"t\"} 2"));
    ck_assert_ptr_nonnull(strstr(text, "shadowsync_emb_resident_rows 0"));
    free(text);
    ss__emb_store_destroy(st);
    ck_assert_int_eq(ss__emb_store_create(&cfg, &st, NULL, 0), SS_OK); /* gone from RocksDB */
    float full[2 * 2 * DIM];
    bool found[2] = {true, true};
    ck_assert_int_eq(ss__emb_store_read_full(st, "t", (uint64_t[]){5, 6}, 2, full, found), SS_OK);
    ck_assert(!found[0] && !found[1]);
    ss__emb_store_destroy(st);
    cfg.mem_cap_bytes = 1 << 20; /* spilling and forgetting do not mix */
    ck_assert_int_eq(ss__emb_store_create(&cfg, &st, NULL, 0), SS_ERR_INVALID_ARGUMENT);
    ss__metrics_destroy(m);
    ss__check_rmdir(dir);
}
END_TEST

/* A flood of new ids under a row budget: the budget holds after every
 * request and at every moment two writers and a reader can see, not only
 * after the next sweep; the newest rows are the ones kept, and a request
 * with more new ids than the whole budget is refused, saying so. */
enum { BUDGET = 5000, FLOOD = 50000, BATCH = 1000 };

typedef struct flood {
    ss__emb_store *st;
    uint64_t first;
    _Atomic bool *done;
    uint64_t peak;
} flood;

static void *flood_writer(void *arg) {
    flood *f = arg;
    static const float g[BATCH * DIM]; /* zero gradients: every row is made */
    uint64_t ids[BATCH];
    for (uint64_t at = f->first; at < f->first + FLOOD / 2; at += BATCH) {
        for (size_t i = 0; i < BATCH; i++)
            ids[i] = at + i;
        ck_assert_int_eq(ss__emb_store_push(f->st, "t", ids, BATCH, g, NULL, 0), SS_OK);
    }
    return NULL;
}

static void *flood_watcher(void *arg) {
    flood *f = arg;
    ss__emb_store_stats ss;
    while (!atomic_load(f->done)) {
        ck_assert_int_eq(ss__emb_store_stats_of(f->st, "t", &ss), SS_OK);
        if (ss.table.resident_rows > f->peak)
            f->peak = ss.table.resident_rows;
    }
    return NULL;
}

START_TEST(test_budget_holds_at_every_moment_of_a_flood) {
    ss__emb_store_config cfg = {.bounds = {.max_live_rows = BUDGET}};
    ss__emb_store *st;
    ck_assert_int_eq(ss__emb_store_create(&cfg, &st, NULL, 0), SS_OK);
    ss__emb_spec spec;
    ss__emb_spec_init(&spec, "t", DIM);
    ck_assert_int_eq(ss__emb_store_open_table(st, &spec, NULL, NULL, 0), SS_OK);
    _Atomic bool done = false;
    flood w[2] = {{st, 1, &done, 0}, {st, 1 + FLOOD, &done, 0}}, watch = {st, 0, &done, 0};
    pthread_t tw[2], tr;
    ck_assert_int_eq(pthread_create(&tr, NULL, flood_watcher, &watch), 0);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&tw[i], NULL, flood_writer, &w[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(tw[i], NULL);
    atomic_store(&done, true);
    pthread_join(tr, NULL);
    ck_assert_msg(watch.peak <= BUDGET, "%llu rows resident under a budget of %d",
                  (unsigned long long)watch.peak, BUDGET);
    ss__emb_store_stats ss;
    ck_assert_int_eq(ss__emb_store_stats_of(st, "t", &ss), SS_OK);
    ck_assert_uint_le(ss.table.resident_rows, BUDGET);
    ck_assert_uint_ge(ss.table.resident_rows, BUDGET / 2);
    /* more new ids in one request than the budget */
    static uint64_t ids[BUDGET + 1];
    static const float g[(BUDGET + 1) * DIM];
    for (size_t i = 0; i <= BUDGET; i++)
        ids[i] = 10 * FLOOD + i;
    char why[200] = "";
    ck_assert_int_eq(ss__emb_store_push(st, "t", ids, BUDGET + 1, g, why, sizeof why),
                     SS_ERR_TOO_LARGE);
    ck_assert_msg(strstr(why, "5001 new ids") && strstr(why, "--emb-max-live-rows"), "%s", why);
    ss__emb_store_destroy(st);
}
END_TEST

/* --max-rows with a bounded table: past it a request is refused, the
 * table held whole (a bound deletes rows for good, so none may spill to
 * RocksDB and be read back past the bound's count). */
START_TEST(test_a_bounded_table_is_held_whole_under_max_rows) {
    char dir[64], db[80];
    scratch_db(dir, db);
    ss__emb_store_config cfg = {.db_path = db, .max_rows = 100, .bounds = {.ttl_s = 3600}};
    ss__emb_store *st;
    ck_assert_int_eq(ss__emb_store_create(&cfg, &st, NULL, 0), SS_OK);
    ss__emb_spec spec;
    ss__emb_spec_init(&spec, "t", DIM);
    ck_assert_int_eq(ss__emb_store_open_table(st, &spec, NULL, NULL, 0), SS_OK);
    static uint64_t ids[110];
    static const float g[110 * DIM];
    for (size_t i = 0; i < 110; i++)
        ids[i] = i + 1;
    ck_assert_int_eq(ss__emb_store_push(st, "t", ids, 100, g, NULL, 0), SS_OK);
    ck_assert_int_eq(ss__emb_store_flush(st), SS_OK); /* every row clean: evictable */
    char why[200] = "";
    ck_assert_int_eq(ss__emb_store_push(st, "t", ids + 100, 10, g, why, sizeof why),
                     SS_ERR_TOO_LARGE);
    ck_assert_msg(strstr(why, "--max-rows"), "%s", why);
    ss__emb_store_stats ss;
    ck_assert_int_eq(ss__emb_store_stats_of(st, "t", &ss), SS_OK);
    ck_assert_uint_eq(ss.table.resident_rows, 100);
    ss__emb_store_destroy(st);
    ss__check_rmdir(dir);
}
END_TEST

SS_CHECK_MAIN("emb_bounds", 30, NULL, NULL, test_admission_on_the_kth_push,
              test_rows_expire_after_ttl, test_budget_drops_least_recently_pushed,
              test_a_bounded_table_does_not_grow_with_rows_made, test_store_expiry_reaches_rocksdb,
              test_budget_holds_at_every_moment_of_a_flood,
              test_a_bounded_table_is_held_whole_under_max_rows)
