/* Many tables in one call (ss_table_*_many, shadowsync.h): an embedding
 * model's features of a batch, one call from the training loop instead of
 * one per table (a DLRM has 26), so that the remote tables' round trips
 * overlap and a binding (Python's ctypes) crosses into C once a batch. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/finite.h"
#include "trainer-hooks/errors_internal.h"
#include "trainer-hooks/tables_internal.h"

struct ss_table_fetch_many {
    size_t ntables;
    ss_table **tables;       /* a copy of the caller's list (the tables outlive the fetch) */
    size_t *counts;          /* ids of each table */
    ss_table_fetch **f;      /* one per table (NULL: in the batch) */
    ss__table_batch *batch;  /* the remote tables that share shards: one Batch call */
    ss_table_fetch *batch_f; /* its run on its first table's fetcher */
};

static ss_status check_tables(ss_table *const *tables, size_t ntables, const size_t *counts,
                              const void *ids, const void *floats) {
    if (ntables && (!tables || !counts))
        return ss__err_set(SS_ERR_INVALID_ARGUMENT, "tables or counts: NULL");
    size_t n = 0;
    for (size_t k = 0; k < ntables; k++) {
        if (!tables[k])
            return ss__err_set(SS_ERR_INVALID_ARGUMENT, "tables[%zu]: NULL", k);
        n += counts[k];
    }
    if (n && (!ids || !floats))
        return ss__err_set(SS_ERR_INVALID_ARGUMENT, "%zu ids: ids or rows/grads NULL", n);
    return SS_OK;
}

/* A table's failure, named (the table's own call said why, or nothing). */
static ss_status table_failed(const ss_table *tb, ss_status st) {
    const char *said = ss_last_error();
    return ss__err_set(st, "table %s: %s", tb->spec.name, *said ? said : ss_strerror(st));
}

/* The remote tables that share their shards, in one Batch call made
 * here (in[k] marks them, batched says how many; *b their rows). A batch
 * that fails is dropped: those tables are looked up one by one after
 * (lookups only read). */
static void lookup_batched(ss_table *const *tables, size_t ntables, const uint64_t *ids,
                           const size_t *counts, size_t batched, bool *in, ss__table_batch **b) {
    *b = NULL;
    if (batched < 2 || ss__table_batch_create(tables, ntables, in, NULL, NULL, NULL, ids, counts, b,
                                              NULL, 0) != SS_OK) {
        memset(in, 0, ntables * sizeof *in);
        *b = NULL;
        return;
    }
    if (ss__table_batch_run(*b) != SS_OK) {
        ss__table_batch_free(*b);
        *b = NULL;
        memset(in, 0, ntables * sizeof *in);
    }
}

ss_status ss_table_lookup_many(ss_table *const *tables, size_t ntables, const uint64_t *ids,
                               const size_t *counts, float *rows) {
    ss__err_begin();
    ss_status st = check_tables(tables, ntables, counts, ids, rows);
    ss_table_fetch **f = st == SS_OK ? calloc(ntables + 1, sizeof *f) : NULL;
    bool *in = st == SS_OK ? calloc(ntables + 1, sizeof *in) : NULL;
    if (st == SS_OK && (!f || !in))
        st = SS_ERR_NO_MEMORY;
    /* The fetches of the other tables that may call the shards (cached
     * ones' misses, remote ones the batch cannot take) first, all in
     * flight on their fetchers; then the batch, and the local tables, in
     * this thread while they travel; then the fetched rows. A single such
     * table answers here (no hand-over to gain). */
    size_t batched =
        st == SS_OK ? ss__table_batch_pick(tables, ntables, SS_TABLE_REMOTE, counts, NULL, in) : 0;
    bool *fill = in ? calloc(ntables + 1, sizeof *fill) : NULL;
    size_t filled =
        fill ? ss__table_batch_pick(tables, ntables, SS_TABLE_CACHED, counts, NULL, fill) : 0;
    size_t calling = 0;
    for (size_t k = 0; st == SS_OK && k < ntables; k++)
        calling += tables[k]->cfg.mode != SS_TABLE_LOCAL && counts[k] && !(batched > 1 && in[k]) &&
                   !(filled > 1 && fill[k]);
    const uint64_t *at = ids;
    for (size_t k = 0; st == SS_OK && calling > 1 && k < ntables; at += counts[k], k++)
        if (tables[k]->cfg.mode != SS_TABLE_LOCAL && counts[k] && !(batched > 1 && in[k]) &&
            !(filled > 1 && fill[k]) &&
            (st = ss__table_prefetch(tables[k], at, counts[k], &f[k])) != SS_OK)
            table_failed(tables[k], st);
    ss__table_batch *b = NULL;
    if (st == SS_OK)
        lookup_batched(tables, ntables, ids, counts, batched, in, &b);
    /* The cached tables' misses in one Batch lookup, into their caches:
     * their lookups below then find every row (a failed fill leaves the
     * misses to them, one call each). */
    if (st == SS_OK && filled > 1)
        ss__table_batch_fill(tables, ntables, fill, ids, counts, false);
    free(fill);
    at = ids;
    float *out = rows;
    for (size_t k = 0; st == SS_OK && k < ntables; k++) {
        if (in[k])
            ss__table_batch_rows(b, k, out);
        else if (!f[k] && (st = ss__table_lookup(tables[k], at, counts[k], out)) != SS_OK)
            table_failed(tables[k], st);
        at += counts[k];
        out += counts[k] * tables[k]->spec.dim;
    }
    out = rows;
    for (size_t k = 0; f && k < ntables; k++) { /* every fetch waited for, also on error */
        if (f[k]) {
            ss_status s = ss__table_fetch_wait(f[k], st == SS_OK ? out : NULL);
            if (st == SS_OK && s != SS_OK)
                st = table_failed(tables[k], s);
        }
        out += counts[k] * tables[k]->spec.dim;
    }
    ss__table_batch_free(b);
    free(f);
    free(in);
    return ss__err_end(st);
}

/* Every gradient finite, before any table takes one. */
static ss_status check_finite(ss_table *const *tables, size_t ntables, const uint64_t *ids,
                              const size_t *counts, const float *grads) {
    for (size_t k = 0; k < ntables; k++) {
        const size_t dim = tables[k]->spec.dim;
        const size_t bad = ss__first_non_finite(grads, counts[k] * dim);
        if (bad < counts[k] * dim)
            return ss__err_set(SS_ERR_NON_FINITE,
                               "table %s: the gradient of id %llu (row %zu of its push) "
                               "holds NaN or Inf; no table took any of this push",
                               tables[k]->spec.name, (unsigned long long)ids[bad / dim], bad / dim);
        ids += counts[k];
        grads += counts[k] * dim;
    }
    return SS_OK;
}

ss_status ss_table_push_many(ss_table *const *tables, size_t ntables, const uint64_t *ids,
                             const size_t *counts, const float *grads) {
    ss__err_begin();
    ss_status st = check_tables(tables, ntables, counts, ids, grads);
    if (st == SS_OK)
        st = check_finite(tables, ntables, ids, counts, grads);
    bool *in = st == SS_OK ? calloc(ntables + 1, sizeof *in) : NULL;
    if (st == SS_OK && !in)
        st = SS_ERR_NO_MEMORY;
    /* The remote tables that share shards: one Batch call, sent by their
     * first table's fetcher (asynchronous, as a remote push is). */
    ss__table_batch *b = NULL;
    if (st == SS_OK &&
        ss__table_batch_pick(tables, ntables, SS_TABLE_REMOTE, NULL, counts, in) > 1) {
        size_t first = 0;
        while (!in[first])
            first++;
        st = ss__table_batch_create(tables, ntables, in, ids, counts, grads, NULL, NULL, &b, NULL,
                                    0);
        if (st == SS_OK && (st = ss__table_queue_job(tables[first], ss__table_batch_run,
                                                     ss__table_batch_free, b, NULL)) != SS_OK)
            ss__table_batch_free(b);
    } else if (in) {
        memset(in, 0, ntables * sizeof *in);
    }
    for (size_t k = 0; st == SS_OK && k < ntables; k++) {
        if (!in[k] && (st = ss__table_push(tables[k], ids, counts[k], grads)) != SS_OK)
            table_failed(tables[k], st);
        ids += counts[k];
        grads += counts[k] * tables[k]->spec.dim;
    }
    free(in);
    return ss__err_end(st);
}

static ss_status fetch_many_wait(ss_table_fetch_many *m, float *rows);

static void fetch_many_free(ss_table_fetch_many *m) {
    if (!m)
        return;
    free(m->tables);
    free(m->counts);
    free(m->f);
    free(m);
}

/* The remote tables that share shards, in one Batch job (their pushes
 * and the next batch's lookups) queued on their first table's fetcher;
 * the others go table by table. */
static ss_status queue_batch(ss_table_fetch_many *m, ss_table *const *tables, size_t ntables,
                             const uint64_t *push_ids, const size_t *push_counts,
                             const float *grads, const uint64_t *ids, const size_t *counts) {
    bool *in = calloc(ntables + 1, sizeof *in);
    if (!in)
        return SS_ERR_NO_MEMORY;
    ss_status st = SS_OK;
    if (ss__table_batch_pick(tables, ntables, SS_TABLE_REMOTE, counts, push_counts, in) > 1) {
        size_t first = 0;
        while (!in[first])
            first++;
        st = ss__table_batch_create(tables, ntables, in, push_ids, push_counts, grads, ids, counts,
                                    &m->batch, NULL, 0);
        if (st == SS_OK)
            st = ss__table_queue_job(tables[first], ss__table_batch_run, ss__table_batch_free,
                                     m->batch, &m->batch_f);
        if (st != SS_OK) {
            ss__table_batch_free(m->batch);
            m->batch = NULL;
        }
    }
    free(in);
    return st;
}

ss_status ss_table_push_prefetch_many(ss_table *const *tables, size_t ntables,
                                      const uint64_t *push_ids, const size_t *push_counts,
                                      const float *grads, const uint64_t *ids, const size_t *counts,
                                      ss_table_fetch_many **out) {
    ss__err_begin();
    if (!out)
        return ss__err_end(ss__err_set(SS_ERR_INVALID_ARGUMENT, "out: NULL"));
    ss_status st = check_tables(tables, ntables, push_counts, push_ids, grads);
    if (st == SS_OK)
        st = check_tables(tables, ntables, counts, ids, ids);
    if (st == SS_OK)
        st = check_finite(tables, ntables, push_ids, push_counts, grads);
    if (st != SS_OK)
        return ss__err_end(st);
    ss_table_fetch_many *m = calloc(1, sizeof *m);
    if (m) {
        *m = (ss_table_fetch_many){.ntables = ntables,
                                   .tables = malloc((ntables + 1) * sizeof *m->tables),
                                   .counts = malloc((ntables + 1) * sizeof *m->counts),
                                   .f = calloc(ntables + 1, sizeof *m->f)};
        if (!m->tables || !m->counts || !m->f) {
            fetch_many_free(m);
            m = NULL;
        }
    }
    if (!m)
        return ss__err_end(SS_ERR_NO_MEMORY);
    st = queue_batch(m, tables, ntables, push_ids, push_counts, grads, ids, counts);
    for (size_t k = 0; k < ntables; k++) {
        m->tables[k] = tables[k];
        m->counts[k] = counts[k];
        if (st == SS_OK && !(m->batch && ss__table_batch_has(m->batch, k)) &&
            (st = ss__table_push_prefetch(tables[k], push_ids, push_counts[k], grads, ids,
                                          counts[k], &m->f[k])) != SS_OK)
            table_failed(tables[k], st);
        push_ids += push_counts[k];
        grads += push_counts[k] * tables[k]->spec.dim;
        ids += counts[k];
    }
    if (st != SS_OK) {
        fetch_many_wait(m, NULL);
        return ss__err_end(st);
    }
    *out = m;
    return ss__err_end(SS_OK);
}

/* Every fetch of m waited for (also on error), rows (NULL: dropped) laid
 * out as the many-call's; frees m. */
static ss_status fetch_many_wait(ss_table_fetch_many *m, float *rows) {
    ss_status st = SS_OK;
    if (m->batch_f && (st = ss__table_fetch_wait(m->batch_f, NULL)) != SS_OK)
        ss__err_set(st, "%s", ss__table_batch_why(m->batch));
    float *out = rows;
    for (size_t k = 0; k < m->ntables; k++) {
        ss_status s = SS_OK;
        if (m->f[k])
            s = ss__table_fetch_wait(m->f[k], st == SS_OK ? out : NULL);
        else if (st == SS_OK && out && m->batch && ss__table_batch_has(m->batch, k))
            ss__table_batch_rows(m->batch, k, out);
        if (st == SS_OK && s != SS_OK)
            st = table_failed(m->tables[k], s);
        if (out)
            out += m->counts[k] * m->tables[k]->spec.dim;
    }
    ss__table_batch_free(m->batch);
    fetch_many_free(m);
    return st;
}

ss_status ss_table_fetch_many_wait(ss_table_fetch_many *m, float *rows) {
    ss__err_begin();
    if (!m)
        return ss__err_end(ss__err_set(SS_ERR_INVALID_ARGUMENT, "fetch: NULL"));
    return ss__err_end(fetch_many_wait(m, rows));
}

/* A warm-up of several cached tables: their misses in one Batch lookup,
 * run by the first one's fetcher; it owns copies of the call's lists. */
typedef struct warm_job {
    size_t ntables, first; /* the table whose fetcher runs it */
    ss_table **tables;
    bool *in;
    uint64_t *ids;
    size_t *counts;
} warm_job;

static ss_status warm_run(void *arg) {
    warm_job *w = arg;
    ss_status st = ss__table_batch_fill(w->tables, w->ntables, w->in, w->ids, w->counts, true);
    ss_table *first = w->tables[w->first];
    pthread_mutex_lock(&first->lock);
    first->warms_queued--;
    pthread_mutex_unlock(&first->lock);
    return st;
}

static void warm_free(void *arg) {
    warm_job *w = arg;
    free(w->tables);
    free(w->in);
    free(w->ids);
    free(w->counts);
    free(w);
}

/* The cached tables that share their shards (in[k]) warmed by one job on
 * the first one's fetcher. */
static ss_status warm_batched(ss_table *const *tables, size_t ntables, const bool *in,
                              const uint64_t *ids, const size_t *counts) {
    size_t n = 0, first = 0;
    for (size_t k = 0; k < ntables; k++)
        n += counts[k];
    while (!in[first])
        first++;
    warm_job *w = calloc(1, sizeof *w);
    if (w)
        *w = (warm_job){.ntables = ntables,
                        .tables = malloc((ntables + 1) * sizeof *w->tables),
                        .in = malloc((ntables + 1) * sizeof *w->in),
                        .ids = malloc((n + 1) * sizeof *w->ids),
                        .counts = malloc((ntables + 1) * sizeof *w->counts)};
    if (!w || !w->tables || !w->in || !w->ids || !w->counts) {
        if (w)
            warm_free(w);
        return SS_ERR_NO_MEMORY;
    }
    memcpy(w->tables, tables, ntables * sizeof *tables);
    memcpy(w->in, in, ntables * sizeof *in);
    memcpy(w->ids, ids, n * sizeof *ids);
    memcpy(w->counts, counts, ntables * sizeof *counts);
    w->first = first;
    ss_table *tb = tables[first];
    pthread_mutex_lock(&tb->lock);
    const bool skip = tb->warms_queued >= MAX_WARMS_QUEUED;
    tb->warms_queued += !skip;
    pthread_mutex_unlock(&tb->lock);
    if (skip) { /* a hint: the lookups load what it would have */
        atomic_fetch_add(&tb->warms_skipped, 1);
        warm_free(w);
        return SS_OK;
    }
    ss_status st = ss__table_queue_job(tb, warm_run, warm_free, w, NULL);
    if (st != SS_OK) {
        pthread_mutex_lock(&tb->lock);
        tb->warms_queued--;
        pthread_mutex_unlock(&tb->lock);
        warm_free(w);
    }
    return st;
}

ss_status ss_table_warm_many(ss_table *const *tables, size_t ntables, const uint64_t *ids,
                             const size_t *counts) {
    ss__err_begin();
    ss_status st = check_tables(tables, ntables, counts, ids, ids);
    bool *in = st == SS_OK ? calloc(ntables + 1, sizeof *in) : NULL;
    if (st == SS_OK && !in)
        st = SS_ERR_NO_MEMORY;
    if (st == SS_OK && ss__table_batch_pick(tables, ntables, SS_TABLE_CACHED, counts, NULL, in) > 1)
        st = warm_batched(tables, ntables, in, ids, counts);
    else if (in)
        memset(in, 0, ntables * sizeof *in);
    for (size_t k = 0; st == SS_OK && k < ntables; k++) {
        if (!in[k] && (st = ss__table_warm(tables[k], ids, counts[k])) != SS_OK)
            table_failed(tables[k], st);
        ids += counts[k];
    }
    free(in);
    return ss__err_end(st);
}
