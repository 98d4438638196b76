/* Rows moving between shards (emb_store.h, "moves"): taken out of this
 * store whole, with their optimizer state, and put into another. Every
 * step runs under flush_lock, so that no flush writes back a row while it
 * leaves (as with the bounds' sweep). */
#include <stdlib.h>
#include <string.h>

#include "common/finite.h"
#include "embedding-store/store_internal.h"

/* The database walk of a take: ids of the table's rows stored only there
 * (spilled) that leave, up to max. (Rows given away are in the given
 * space, which this walk does not see.) */
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
        if (p->leaves(p->ctx, ids[i]) && ss__emb_table_count_missing(p->tb->t, ids + i, 1) == 1) {
            p->ids[p->n++] = ids[i];
            if (p->n == p->max) /* full: the next walk starts after this row */
                p->tb->take_db_from = ids[i] + 1;
        }
    return p->n < p->max ? SS_OK : SS_ERR_EXISTS; /* full: the walk stops */
}

/* The ids of up to max rows that leave: resident ones first; when fewer,
 * those only in the database (a resident row that leaves was found
 * already). */
static ss_status pick_leaving(ss__emb_store *st, store_table *tb, ss__emb_id_filter leaves,
                              void *ctx, size_t max, uint64_t *ids, size_t *n) {
    *n = ss__emb_table_find_ids(tb->t, leaves, ctx, max, ids, &tb->take_pos);
    if (*n == max || !st->db)
        return SS_OK;
    db_pick p = {tb, leaves, ctx, ids, *n, max};
    ss_status s = ss__emb_db_each_row_from(st->db, tb->tid, ss__emb_row_floats(&tb->spec), 1024,
                                           tb->take_db_from, pick_stored, &p);
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

/* The database's given rows of this epoch that leave, up to max; given
 * rows of other epochs (moves the map has left behind) are deleted. */
typedef struct given_pick {
    ss__emb_id_filter leaves;
    void *ctx;
    uint64_t epoch, *ids;
    float *rows;
    size_t n, max, rf;
    uint64_t *stale, nstale_max;
    size_t nstale;
} given_pick;

static ss_status pick_given(void *arg, uint64_t id, uint64_t epoch, const float *row) {
    given_pick *p = arg;
    if (epoch != p->epoch) {
        if (p->nstale < p->nstale_max) /* the rest at the next walk */
            p->stale[p->nstale++] = id, p->stale[p->nstale++] = epoch;
        return SS_OK;
    }
    if (p->n < p->max && p->leaves(p->ctx, id)) {
        p->ids[p->n] = id;
        memcpy(p->rows + p->n * p->rf, row, p->rf * sizeof *row);
        p->n++;
    }
    return SS_OK;
}

/* Deletes the given rows of other epochs the walk found (id, epoch pairs). */
static ss_status drop_stale(ss__emb_store *st, store_table *tb, const given_pick *p) {
    ss_status s = SS_OK;
    for (size_t i = 0; i + 1 < p->nstale && s == SS_OK; i += 2)
        s = ss__emb_db_forget_given(st->db, tb->tid, p->stale[i + 1], &p->stale[i], 1);
    return s;
}

/* Rows given in this epoch and not yet said to be held: given again (the
 * taker died before it held them). ids: those asked for; else a walk. */
static ss_status regive(ss__emb_store *st, store_table *tb, uint64_t epoch, const uint64_t *ids,
                        size_t n, given_pick *p) {
    if (!st->db || p->n == p->max)
        return SS_OK;
    if (!ids) {
        uint64_t stale[256];
        p->stale = stale;
        p->nstale_max = 256;
        ss_status s = ss__emb_db_each_given(st->db, tb->tid, p->rf, pick_given, p);
        return s == SS_OK ? drop_stale(st, tb, p) : s;
    }
    bool *found = malloc(n * sizeof *found + 1);
    float *rows = malloc(n * p->rf * sizeof *rows + 1);
    ss_status s = found && rows
                      ? ss__emb_db_get_given(st->db, tb->tid, epoch, ids, n, p->rf, rows, found)
                      : SS_ERR_NO_MEMORY;
    for (size_t i = 0; s == SS_OK && i < n && p->n < p->max; i++)
        if (found[i]) {
            p->ids[p->n] = ids[i];
            memcpy(p->rows + p->n * p->rf, rows + i * p->rf, p->rf * sizeof *rows);
            p->n++;
        }
    free(found);
    free(rows);
    return s;
}

ss_status ss__emb_store_take(ss__emb_store *st, const char *table, uint64_t epoch,
                             const uint64_t *ids, size_t n, bool again, ss__emb_id_filter leaves,
                             void *ctx, size_t max, uint64_t *out_ids, float *out_rows,
                             size_t *taken) {
    store_table *tb = st && table ? ss__emb_store_find(st, table) : NULL;
    *taken = 0;
    if (!tb)
        return SS_ERR_NOT_FOUND;
    if ((ids && n > max) || (!ids && !leaves) || epoch == 0)
        return SS_ERR_INVALID_ARGUMENT;
    const size_t rf = ss__emb_row_floats(&tb->spec);
    bool *found = malloc(max * sizeof *found + 1);
    uint64_t *missing = ids ? malloc(n * sizeof *missing + 1) : NULL;
    if (!found || (ids && !missing)) {
        free(found);
        free(missing);
        return SS_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&st->flush_lock);
    /* Given before and not yet held, first (a taker that starts again),
     * so that the rows taken below are not found there again. */
    given_pick p = {leaves, ctx, epoch, out_ids, out_rows, 0, max, rf, NULL, 0, 0};
    ss_status s = !ids && again ? regive(st, tb, epoch, NULL, 0, &p) : SS_OK;
    uint64_t *fresh = out_ids + p.n;
    float *fresh_rows = out_rows + p.n * rf;
    if (s == SS_OK && ids)
        memcpy(fresh, ids, n * sizeof *ids);
    else if (s == SS_OK)
        s = pick_leaving(st, tb, leaves, ctx, max - p.n, fresh, &n);
    if (s == SS_OK && n)
        s = ss__emb_store_read_full(st, table, fresh, n, fresh_rows, found);
    size_t k = 0, nmiss = 0;
    for (size_t i = 0; s == SS_OK && ids && i < n; i++)
        if (!found[i])
            missing[nmiss++] = fresh[i];
    if (s == SS_OK) {
        k = keep_found(fresh, fresh_rows, found, n, rf);
        /* The rows (memory's newest copy) go to the given space in one
         * write with their row keys' deletion: never again read as rows
         * here, kept until the taker holds them (ss__emb_store_forget). */
        if (st->db && k)
            s = ss__emb_db_give_rows(st->db, tb->tid, epoch, fresh, k, rf, fresh_rows);
    }
    if (s == SS_OK)
        ss__emb_table_delete(tb->t, fresh, k);
    p.n += k;
    if (s == SS_OK && ids) /* asked for by a taker that does not hold them */
        s = regive(st, tb, epoch, missing, nmiss, &p);
    if (s == SS_OK)
        *taken = p.n;
    pthread_mutex_unlock(&st->flush_lock);
    free(found);
    free(missing);
    return s;
}

ss_status ss__emb_store_forget(ss__emb_store *st, const char *table, uint64_t epoch,
                               const uint64_t *ids, size_t n) {
    store_table *tb = st && table ? ss__emb_store_find(st, table) : NULL;
    if (!tb)
        return SS_ERR_NOT_FOUND;
    if (!st->db || n == 0)
        return SS_OK;
    pthread_mutex_lock(&st->flush_lock);
    ss_status s = ss__emb_db_forget_given(st->db, tb->tid, epoch, ids, n);
    pthread_mutex_unlock(&st->flush_lock);
    return s;
}

ss_status ss__emb_store_holds(ss__emb_store *st, const char *table, const uint64_t *ids, size_t n,
                              bool *found) {
    store_table *tb = st && table ? ss__emb_store_find(st, table) : NULL;
    if (!tb)
        return SS_ERR_NOT_FOUND;
    /* Resident rows are found in place (this runs on every call while rows
     * move); only the others are looked for in the database, one row
     * buffer for all. */
    ss_status s = ss__emb_table_holds(tb->t, ids, n, found);
    const size_t rf = ss__emb_row_floats(&tb->spec);
    float *row = NULL;
    for (size_t i = 0; s == SS_OK && st->db && i < n; i++)
        if (!found[i]) {
            if (!row && !(row = malloc(rf * sizeof *row)))
                s = SS_ERR_NO_MEMORY;
            else
                s = ss__emb_db_get_rows(st->db, tb->tid, ids + i, 1, rf, row, found + i);
        }
    free(row);
    return s;
}

ss_status ss__emb_store_holds_written(ss__emb_store *st, const char *table, const uint64_t *ids,
                                      size_t n, bool *found) {
    store_table *tb = st && table ? ss__emb_store_find(st, table) : NULL;
    if (!tb)
        return SS_ERR_NOT_FOUND;
    if (!st->db) /* memory is all there is */
        return ss__emb_table_holds(tb->t, ids, n, found);
    enum { CHUNK = 1024 };
    const size_t rf = ss__emb_row_floats(&tb->spec);
    float *rows = malloc(CHUNK * rf * sizeof *rows);
    ss_status s = rows ? SS_OK : SS_ERR_NO_MEMORY;
    for (size_t at = 0; s == SS_OK && at < n; at += CHUNK)
        s = ss__emb_db_get_rows(st->db, tb->tid, ids + at, n - at < CHUNK ? n - at : CHUNK, rf,
                                rows, found + at);
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
