/* Rows moving between shards (emb_store.h, "moves"): taken out of this
 * store whole, with their optimizer state, and put into another. Every
 * step runs under flush_lock, so that no flush writes back a row while it
 * leaves (as with the bounds' sweep). */
#include <stdlib.h>
#include <string.h>

#include "common/finite.h"
#include "embedding-store/store_internal.h"

/* The database walk of a take: ids of rows stored only there (spilled, or
 * taken earlier and not yet forgotten) that leave, up to max. */
typedef struct db_pick {
    store_table *tb;
    ss__emb_id_filter leaves;
    void *ctx;
    uint64_t *ids;
    size_t n, max;
} db_pick;

static ss_status pick_stored(void *arg, const uint64_t *ids, const float *rows, size_t n) {
    (void)rows;
    db_pick *p = arg;
    for (size_t i = 0; i < n && p->n < p->max; i++)
        if (p->leaves(p->ctx, ids[i]) && ss__emb_table_count_missing(p->tb->t, ids + i, 1) == 1)
            p->ids[p->n++] = ids[i];
    return p->n < p->max ? SS_OK : SS_ERR_EXISTS; /* full: the walk stops */
}

/* The ids of up to max rows that leave: resident ones first; when fewer,
 * those only in the database (a resident row that leaves was found
 * already). */
static ss_status pick_leaving(ss__emb_store *st, store_table *tb, ss__emb_id_filter leaves,
                              void *ctx, size_t max, uint64_t *ids, size_t *n) {
    *n = ss__emb_table_find_ids(tb->t, leaves, ctx, max, ids);
    if (*n == max || !st->db)
        return SS_OK;
    db_pick p = {tb, leaves, ctx, ids, *n, max};
    ss_status s =
        ss__emb_db_each_row(st->db, tb->tid, ss__emb_row_floats(&tb->spec), 1024, pick_stored, &p);
    *n = p.n;
    return s == SS_ERR_EXISTS ? SS_OK : s;
}

/* Keeps the ids whose row is stored, with their rows, at the front. */
static size_t keep_found(uint64_t *ids, float *rows, const bool *found, size_t n, size_t rf) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (found[i]) {
            ids[k] = ids[i];
            if (k != i)
                memcpy(rows + k * rf, rows + i * rf, rf * sizeof(float));
            k++;
        }
    return k;
}

ss_status ss__emb_store_take(ss__emb_store *st, const char *table, const uint64_t *ids, size_t n,
                             ss__emb_id_filter leaves, void *ctx, size_t max, uint64_t *out_ids,
                             float *out_rows, size_t *taken) {
    store_table *tb = st && table ? ss__emb_store_find(st, table) : NULL;
    *taken = 0;
    if (!tb)
        return SS_ERR_NOT_FOUND;
    if ((ids && n > max) || (!ids && !leaves))
        return SS_ERR_INVALID_ARGUMENT;
    const size_t rf = ss__emb_row_floats(&tb->spec);
    bool *found = malloc(max * sizeof *found + 1);
    if (!found)
        return SS_ERR_NO_MEMORY;
    pthread_mutex_lock(&st->flush_lock);
    ss_status s = SS_OK;
    if (ids)
        memcpy(out_ids, ids, n * sizeof *ids);
    else
        s = pick_leaving(st, tb, leaves, ctx, max, out_ids, &n);
    if (s == SS_OK && n)
        s = ss__emb_store_read_full(st, table, out_ids, n, out_rows, found);
    if (s == SS_OK) {
        n = keep_found(out_ids, out_rows, found, n, rf);
        /* The database keeps the newest copy until the taker says it holds
         * the row (ss__emb_store_forget): a taker that dies first gets it
         * again from there. */
        if (st->db && n)
            s = ss__emb_db_put_rows(st->db, tb->tid, out_ids, n, rf, out_rows, false);
    }
    if (s == SS_OK) {
        ss__emb_table_delete(tb->t, out_ids, n);
        *taken = n;
    }
    pthread_mutex_unlock(&st->flush_lock);
    free(found);
    return s;
}

ss_status ss__emb_store_forget(ss__emb_store *st, const char *table, const uint64_t *ids,
                               size_t n) {
    store_table *tb = st && table ? ss__emb_store_find(st, table) : NULL;
    if (!tb)
        return SS_ERR_NOT_FOUND;
    if (!st->db || n == 0)
        return SS_OK;
    uint64_t *gone = malloc(n * sizeof *gone);
    if (!gone)
        return SS_ERR_NO_MEMORY;
    size_t k = 0;
    pthread_mutex_lock(&st->flush_lock);
    for (size_t i = 0; i < n; i++) /* a row made here again since stays */
        if (ss__emb_table_count_missing(tb->t, ids + i, 1) == 1)
            gone[k++] = ids[i];
    ss_status s = ss__emb_db_delete_rows(st->db, tb->tid, gone, k, false);
    pthread_mutex_unlock(&st->flush_lock);
    free(gone);
    return s;
}

ss_status ss__emb_store_holds(ss__emb_store *st, const char *table, const uint64_t *ids, size_t n,
                              bool *found) {
    store_table *tb = st && table ? ss__emb_store_find(st, table) : NULL;
    if (!tb)
        return SS_ERR_NOT_FOUND;
    float *rows = malloc(n * ss__emb_row_floats(&tb->spec) * sizeof *rows + 1);
    if (!rows)
        return SS_ERR_NO_MEMORY;
    ss_status s = ss__emb_store_read_full(st, table, ids, n, rows, found);
    free(rows);
    return s;
}

ss_status ss__emb_store_put_absent(ss__emb_store *st, const char *table, const uint64_t *ids,
                                   size_t n, const float *rows, bool sync, size_t *put) {
    store_table *tb = st && table ? ss__emb_store_find(st, table) : NULL;
    *put = 0;
    if (!tb)
        return SS_ERR_NOT_FOUND;
    const size_t rf = ss__emb_row_floats(&tb->spec);
    bool *found = malloc(n * sizeof *found + 1);
    uint64_t *new_ids = malloc(n * sizeof *new_ids + 1);
    float *new_rows = malloc(n * rf * sizeof *new_rows + 1);
    ss_status s = found && new_ids && new_rows ? SS_OK : SS_ERR_NO_MEMORY;
    if (s == SS_OK && !ss__all_finite(rows, n * rf))
        s = SS_ERR_NON_FINITE; /* nothing is put */
    if (s == SS_OK)
        s = ss__emb_store_holds(st, table, ids, n, found);
    size_t k = 0;
    for (size_t i = 0; s == SS_OK && i < n; i++)
        if (!found[i]) {
            new_ids[k] = ids[i];
            memcpy(new_rows + k * rf, rows + i * rf, rf * sizeof(float));
            k++;
        }
    if (s == SS_OK && k)
        s = ss__emb_table_put_full(tb->t, new_ids, k, new_rows);
    /* Durable now (these rows alone, synced, not a flush of every dirty
     * row); the flusher writes them again later, as they are then. */
    if (s == SS_OK && k && st->db && sync)
        s = ss__emb_db_put_rows(st->db, tb->tid, new_ids, k, rf, new_rows, true);
    if (s == SS_OK)
        *put = k;
    free(found);
    free(new_ids);
    free(new_rows);
    return s;
}

size_t ss__emb_store_tables(ss__emb_store *st, ss__emb_spec *out, size_t max) {
    pthread_rwlock_rdlock(&st->lock);
    size_t n = 0;
    for (; n < st->ntables && n < max; n++)
        out[n] = st->tables[n]->spec;
    pthread_rwlock_unlock(&st->lock);
    return n;
}

uint64_t ss__emb_store_durable_before(ss__emb_store *st) {
    return st->db ? atomic_load(&st->written_before_ns) : UINT64_MAX;
}
