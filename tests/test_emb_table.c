/* The in-memory embedding table under threads: a pusher, two readers and
 * an evictor on one table at once. Rows grow, get evicted, reloaded into
 * freed slab space, while other threads prefetch slots without a lock
 * (table.c's for_rows). Runs in the ThreadSanitizer build too: the table
 * has no Hogwild kernel, so any race there fails it. */
#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "check_run.h"
#include "embedding-store/emb_table.h"

enum { DIM = 8, HOT = 2000, PUSHES = 200, CHURN = 20000 };

static ss_status id_loader(void *ctx, const uint64_t *ids, size_t n, float *rows, bool *stored) {
    (void)ctx, (void)stored;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < DIM; j++)
            rows[i * DIM + j] = (float)ids[i];
    return SS_OK;
}

typedef struct shared {
    ss__emb_table *t;
    int pushes[HOT]; /* written by the pusher only, read after the join */
    int failures;    /* a reader's count of impossible values */
} shared;

/* Hot ids 0..HOT-1 are pushed (g = 1, lr = 1: each push takes exactly 1
 * off every float); churn ids come from far above and are never pushed. */
static uint64_t churn_id(unsigned i) {
    return 1000000u + i * 7u;
}

static void *pusher(void *arg) {
    shared *sh = arg;
    static float g[HOT * DIM];
    uint64_t ids[HOT];
    for (size_t i = 0; i < HOT * DIM; i++)
        g[i] = 1.0f;
    for (int k = 0; k < PUSHES; k++) {
        /* Alternately a small batch (two passes) and a big one (one pass). */
        const size_t n = k % 2 ? 32 : 1500, first = (size_t)k * 37 % HOT;
        for (size_t i = 0; i < n; i++)
            ids[i] = (first + i) % HOT;
        ck_assert_int_eq(ss__emb_table_apply_gradients(sh->t, ids, n, g, NULL), SS_OK);
        for (size_t i = 0; i < n; i++)
            sh->pushes[ids[i]]++;
    }
    return NULL;
}

static void *reader(void *arg) {
    shared *sh = arg;
    static _Thread_local float rows[2048 * DIM];
    uint64_t ids[2048];
    for (int k = 0; k < 300; k++) {
        const size_t n = k % 3 ? 48 : 2048;
        for (size_t i = 0; i < n; i++) /* half hot, half churn, all distinct */
            ids[i] = i % 2 ? churn_id((unsigned)(k * 331 + i) % CHURN) : (i * 13 + (size_t)k) % HOT;
        ck_assert_int_eq(ss__emb_table_lookup(sh->t, ids, n, rows), SS_OK);
        for (size_t i = 0; i < n; i++) {
            const float v = rows[i * DIM + DIM - 1];
            const float lost = (float)ids[i] - v; /* pushes seen: 0 for churn rows */
            const bool ok =
                ids[i] < HOT ? (lost >= 0 && lost <= PUSHES && lost == (int)lost) : lost == 0;
            if (!ok)
                __atomic_add_fetch(&sh->failures, 1, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

static void *evictor(void *arg) {
    shared *sh = arg;
    for (int k = 0; k < 1000; k++)
        ss__emb_table_evict(sh->t, 500); /* clean rows only: pushed rows stay */
    return NULL;
}

START_TEST(test_threads_push_read_evict_at_once) {
    ss__emb_spec spec;
    ck_assert_int_eq(ss__emb_spec_init(&spec, "threads", DIM), SS_OK);
    spec.lr = 1.0f;
    shared *sh = calloc(1, sizeof *sh);
    ck_assert_ptr_nonnull(sh);
    ck_assert_int_eq(ss__emb_table_create(&spec, id_loader, NULL, &sh->t, NULL, 0), SS_OK);
    pthread_t th[4];
    void *(*fn[4])(void *) = {pusher, reader, reader, evictor};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, fn[i], sh), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    ck_assert_int_eq(sh->failures, 0);
    /* Every push landed exactly once, none lost to an eviction. */
    static uint64_t ids[HOT];
    static float rows[HOT * DIM];
    for (int i = 0; i < HOT; i++)
        ids[i] = (uint64_t)i;
    ck_assert_int_eq(ss__emb_table_lookup(sh->t, ids, HOT, rows), SS_OK);
    int pushed = 0;
    for (int i = 0; i < HOT; i++) {
        pushed += sh->pushes[i] > 0;
        for (int j = 0; j < DIM; j++)
            ck_assert_float_eq(rows[i * DIM + j], (float)(i - sh->pushes[i]));
    }
    ck_assert_int_gt(pushed, HOT / 2);
    ss__emb_table_destroy(sh->t);
    free(sh);
}
END_TEST

static bool any_id(void *ctx, uint64_t id) {
    (void)ctx, (void)id;
    return true;
}

static bool every_third(void *ctx, uint64_t id) {
    (void)ctx;
    return id % 3 == 0;
}

/* A move's walk (find_ids with a position) goes on where the last batch
 * stopped: ten batches of 100 over 1000 rows that all match return every
 * row once (without the position, the same 100 ten times); the eleventh
 * wraps around. Taking every third row out batch by batch finds each
 * once, and a batch short of max means none is left. */
START_TEST(test_a_walk_goes_on_where_it_stopped) {
    ss__emb_spec spec;
    ss__emb_spec_init(&spec, "walk", DIM);
    ss__emb_table *t;
    ck_assert_int_eq(ss__emb_table_create(&spec, id_loader, NULL, &t, NULL, 0), SS_OK);
    enum { ROWS = 1000, BATCH = 100 };
    static uint64_t ids[ROWS];
    static float g[ROWS * DIM];
    for (uint64_t i = 0; i < ROWS; i++)
        ids[i] = i;
    ck_assert_int_eq(ss__emb_table_apply_gradients(t, ids, ROWS, g, NULL), SS_OK);
    static unsigned seen[ROWS];
    ss__emb_scan_pos pos = {0, 0};
    uint64_t batch[BATCH];
    for (int k = 0; k < ROWS / BATCH; k++) {
        ck_assert_uint_eq(ss__emb_table_find_ids(t, any_id, NULL, BATCH, batch, &pos), BATCH);
        for (int i = 0; i < BATCH; i++)
            seen[batch[i]]++;
    }
    for (int i = 0; i < ROWS; i++)
        ck_assert_msg(seen[i] == 1, "row %d found %u times in one walk", i, seen[i]);
    ck_assert_uint_eq(ss__emb_table_find_ids(t, any_id, NULL, BATCH, batch, &pos), BATCH);
    size_t taken = 0, n;
    while ((n = ss__emb_table_find_ids(t, every_third, NULL, 7, batch, &pos)) > 0) {
        for (size_t i = 0; i < n; i++)
            ck_assert_uint_eq(batch[i] % 3, 0);
        ck_assert_uint_eq(ss__emb_table_delete(t, batch, n), n);
        taken += n;
        if (n < 7)
            break;
    }
    ck_assert_uint_eq(taken, (ROWS + 2) / 3);
    ck_assert_uint_eq(ss__emb_table_find_ids(t, every_third, NULL, 7, batch, &pos), 0);
    ss__emb_table_destroy(t);
}
END_TEST

/* Index bytes of a table after 10,000 rows were pushed once. */
static uint64_t index_after_pushes(bool skip_queue) {
    ss__emb_spec spec;
    ss__emb_spec_init(&spec, "queue", DIM);
    ss__emb_table *t;
    ck_assert_int_eq(ss__emb_table_create(&spec, id_loader, NULL, &t, NULL, 0), SS_OK);
    if (skip_queue)
        ss__emb_table_skip_dirty_queue(t);
    enum { ROWS = 10000 };
    static uint64_t ids[ROWS];
    static float g[ROWS * DIM];
    for (uint64_t i = 0; i < ROWS; i++)
        ids[i] = i;
    ck_assert_int_eq(ss__emb_table_apply_gradients(t, ids, ROWS, g, NULL), SS_OK);
    ss__emb_table_stats st;
    ss__emb_table_get_stats(t, &st);
    ck_assert_uint_eq(st.dirty_rows, ROWS); /* dirty all the same */
    ss__emb_table_destroy(t);
    return st.index_bytes;
}

/* A table whose dirty rows nobody collects (a PS without a database)
 * keeps no queue of them: 8 bytes a row less (80 KB here, more with the
 * queue's doubling). */
START_TEST(test_a_table_nobody_flushes_queues_no_ids) {
    const uint64_t queued = index_after_pushes(false), not_queued = index_after_pushes(true);
    ck_assert_msg(queued >= not_queued + 10000 * sizeof(uint64_t), "index %llu vs %llu bytes",
                  (unsigned long long)queued, (unsigned long long)not_queued);
}
END_TEST

SS_CHECK_MAIN("emb_table", 300, NULL, NULL, test_threads_push_read_evict_at_once,
              test_a_walk_goes_on_where_it_stopped, test_a_table_nobody_flushes_queues_no_ids)
