/* Deltas of the store (emb_store.h): every table's changed rows and
 * deletions into one delta file, a base with every row; and a follower
 * applying one. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "embedding-store/delta_file.h"
#include "embedding-store/store_internal.h"

void ss__emb_store_track_changes(ss__emb_store *st) {
    pthread_rwlock_wrlock(&st->lock);
    st->tracking = true;
    for (size_t i = 0; i < st->ntables; i++)
        ss__emb_table_track_changes(st->tables[i]->t);
    pthread_rwlock_unlock(&st->lock);
}

void ss__emb_store_set_read_only(ss__emb_store *st) {
    pthread_rwlock_wrlock(&st->lock);
    st->read_only = true;
    pthread_rwlock_unlock(&st->lock);
}

/* A base with a database: its rows that are not resident (spilled by the
 * memory cap) go to the writer too. */
typedef struct spilled_ctx {
    ss__emb_table *t;
    ss__emb_delta_writer *w;
} spilled_ctx;

static ss_status put_spilled(void *ctx, const uint64_t *ids, const float *rows, size_t n) {
    spilled_ctx *c = ctx;
    const size_t rf = ss__emb_row_floats(ss__emb_table_spec(c->t));
    ss_status st = SS_OK;
    for (size_t i = 0; i < n && st == SS_OK; i++)
        if (ss__emb_table_count_missing(c->t, &ids[i], 1) == 1)
            st = ss__emb_delta_put(c->w, &ids[i], rows + i * rf, 1);
    return st;
}

ss_status ss__emb_store_write_delta(ss__emb_store *st, const char *path, uint64_t seq, bool base,
                                    ss__emb_delta_info *out) {
    if (!st->tracking)
        return SS_ERR_STATE;
    ss__emb_delta_writer *w;
    ss_status s = ss__emb_delta_begin(path, seq, base, ss__unix_ms(), &w);
    if (s != SS_OK)
        return s;
    pthread_rwlock_rdlock(&st->lock);
    const size_t n = st->ntables;
    pthread_rwlock_unlock(&st->lock);
    for (size_t i = 0; i < n && s == SS_OK; i++) {
        store_table *tb = st->tables[i]; /* tables are only added, never removed */
        ss__emb_delta_table(w, &tb->spec);
        s = ss__emb_table_take_changes(tb->t, base, ss__emb_delta_put, w);
        if (s == SS_OK && base && st->db) {
            spilled_ctx c = {tb->t, w};
            s = ss__emb_db_each_row(st->db, tb->tid, ss__emb_row_floats(&tb->spec), 4096,
                                    put_spilled, &c);
        }
    }
    if (s != SS_OK) {
        ss__emb_delta_abort(w);
        return s;
    }
    if (out) /* counted as written: the file is not read back */
        ss__emb_delta_written(w, out);
    return ss__emb_delta_commit(w);
}

/* Applying: the table of the records being walked. */
typedef struct apply_ctx {
    ss__emb_store *st;
    store_table *tb;
    bool base;
    /* A base empties each table once: a file may name a table in several
     * records (one per input of a reshard). */
    store_table **emptied;
    size_t nemptied;
} apply_ctx;

static bool first_time(apply_ctx *a, store_table *tb) {
    for (size_t i = 0; i < a->nemptied; i++)
        if (a->emptied[i] == tb)
            return false;
    store_table **n = realloc(a->emptied, (a->nemptied + 1) * sizeof *n);
    if (!n)
        return true; /* emptied again: only a reshard's file names a table twice */
    a->emptied = n;
    a->emptied[a->nemptied++] = tb;
    return true;
}

static ss_status collect_ids(void *ctx, const uint64_t *ids, const float *rows, size_t n) {
    if (!rows) /* a take hands out its tombstones first: not rows */
        return SS_OK;
    ss__emb_table *t = ctx;
    ss__emb_table_delete(t, ids, n);
    return SS_OK;
}

/* Rows of spec b can be put in a table of spec a: the same dim and
 * optimizer state. */
static bool same_rows(const ss__emb_spec *a, const ss__emb_spec *b) {
    return a->dim == b->dim && a->optimizer == b->optimizer;
}

static ss_status apply_table(void *ctx, const ss__emb_spec *spec) {
    apply_ctx *a = ctx;
    ss__emb_store *st = a->st;
    pthread_rwlock_wrlock(&st->lock);
    a->tb = NULL;
    for (size_t i = 0; i < st->ntables && !a->tb; i++)
        if (!strcmp(st->tables[i]->spec.name, spec->name))
            a->tb = st->tables[i];
    ss_status s = SS_OK;
    if (!a->tb)
        s = ss__emb_store_add_table_locked(st, spec, &a->tb);
    else if (!same_rows(&a->tb->spec, spec))
        s = SS_ERR_SIZE_MISMATCH; /* a delta of another table of that name */
    pthread_rwlock_unlock(&st->lock);
    /* A base replaces the table: what it does not hold goes. */
    if (s == SS_OK && a->base && first_time(a, a->tb))
        s = ss__emb_table_take_changes(a->tb->t, true, collect_ids, a->tb->t);
    return s;
}

static ss_status apply_rows(void *ctx, const uint64_t *ids, const float *rows, size_t n) {
    apply_ctx *a = ctx;
    if (!rows) {
        ss__emb_table_delete(a->tb->t, ids, n);
        return SS_OK;
    }
    return ss__emb_table_put_full(a->tb->t, ids, n, rows);
}

/* Checking: a table of the file's name held here with another spec. */
static ss_status table_fits(void *ctx, const ss__emb_spec *spec) {
    const store_table *tb = ss__emb_store_find(ctx, spec->name);
    return !tb || same_rows(&tb->spec, spec) ? SS_OK : SS_ERR_SIZE_MISMATCH;
}

static ss_status rows_fit(void *ctx, const uint64_t *ids, const float *rows, size_t n) {
    (void)ctx, (void)ids, (void)rows, (void)n;
    return SS_OK;
}

ss_status ss__emb_store_check_delta(ss__emb_store *st, const ss__emb_delta_file *f) {
    const ss__emb_delta_visitor v = {table_fits, rows_fit, st};
    return ss__emb_delta_walk(f, &v);
}

ss_status ss__emb_store_apply_delta(ss__emb_store *st, const ss__emb_delta_file *f) {
    ss__emb_delta_info info;
    ss__emb_delta_info_of(f, &info);
    apply_ctx a = {.st = st, .base = info.base};
    const ss__emb_delta_visitor v = {apply_table, apply_rows, &a};
    ss_status s = ss__emb_delta_walk(f, &v);
    free(a.emptied);
    return s;
}
