/* Many tables in one call (ss_table_*_many, shadowsync.h): an embedding
 * model's features of a batch, one call from the training loop instead of
 * one per table (a DLRM has 26), so that the remote tables' round trips
 * overlap and a binding (Python's ctypes) crosses into C once a batch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainer-hooks/errors_internal.h"
#include "trainer-hooks/tables_internal.h"

struct ss_table_fetch_many {
    size_t ntables;
    ss_table **tables;       /* a copy of the caller's list (the tables outlive the fetch) */
    size_t *counts;          /* ids of each table */
    ss_table_fetch **f;      /* one per table (NULL: nothing asked of it) */
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

ss_status ss_table_lookup_many(ss_table *const *tables, size_t ntables, const uint64_t *ids,
                               const size_t *counts, float *rows) {
    ss__err_begin();
    ss_status st = check_tables(tables, ntables, counts, ids, rows);
    ss_table_fetch **f = st == SS_OK ? calloc(ntables + 1, sizeof *f) : NULL;
    if (st == SS_OK && !f)
        st = SS_ERR_NO_MEMORY;
    /* The fetches of the tables that may call the shards (remote, and
     * cached ones' misses) first, all in flight on their fetchers; then
     * the local tables in this thread while they travel; then the fetched
     * rows. A single such table answers here (no hand-over to gain). */
    size_t calling = 0;
    for (size_t k = 0; st == SS_OK && k < ntables; k++)
        calling += tables[k]->cfg.mode != SS_TABLE_LOCAL && counts[k];
    const uint64_t *at = ids;
    for (size_t k = 0; st == SS_OK && calling > 1 && k < ntables; at += counts[k], k++)
        if (tables[k]->cfg.mode != SS_TABLE_LOCAL && counts[k] &&
            (st = ss__table_prefetch(tables[k], at, counts[k], &f[k])) != SS_OK)
            table_failed(tables[k], st);
    at = ids;
    float *out = rows;
    for (size_t k = 0; st == SS_OK && k < ntables; k++) {
        if (!f[k] && (st = ss__table_lookup(tables[k], at, counts[k], out)) != SS_OK)
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
    free(f);
    return ss__err_end(st);
}

/* Every gradient finite, before any table takes one. */
static ss_status check_finite(ss_table *const *tables, size_t ntables, const uint64_t *ids,
                              const size_t *counts, const float *grads) {
    for (size_t k = 0; k < ntables; k++) {
        const size_t dim = tables[k]->spec.dim;
        for (size_t i = 0; i < counts[k] * dim; i++)
            if (!isfinite(grads[i]))
                return ss__err_set(SS_ERR_NON_FINITE,
                                   "table %s: the gradient of id %llu (row %zu of its push) "
                                   "holds NaN or Inf; no table took any of this push",
                                   tables[k]->spec.name, (unsigned long long)ids[i / dim],
                                   i / dim);
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
    for (size_t k = 0; st == SS_OK && k < ntables; k++) {
        if ((st = ss__table_push(tables[k], ids, counts[k], grads)) != SS_OK)
            table_failed(tables[k], st);
        ids += counts[k];
        grads += counts[k] * tables[k]->spec.dim;
    }
    return ss__err_end(st);
}

static void fetch_many_free(ss_table_fetch_many *m) {
    if (!m)
        return;
    free(m->tables);
    free(m->counts);
    free(m->f);
    free(m);
}

ss_status ss_table_push_prefetch_many(ss_table *const *tables, size_t ntables,
                                      const uint64_t *push_ids, const size_t *push_counts,
                                      const float *grads, const uint64_t *ids,
                                      const size_t *counts, ss_table_fetch_many **out) {
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
    for (size_t k = 0; k < ntables; k++) {
        m->tables[k] = tables[k];
        m->counts[k] = counts[k];
        if (st == SS_OK && (st = ss__table_push_prefetch(tables[k], push_ids, push_counts[k], grads,
                                                         ids, counts[k], &m->f[k])) != SS_OK)
            table_failed(tables[k], st);
        push_ids += push_counts[k];
        grads += push_counts[k] * tables[k]->spec.dim;
        ids += counts[k];
    }
    if (st != SS_OK) {
        for (size_t k = 0; k < ntables; k++)
            if (m->f[k])
                ss__table_fetch_wait(m->f[k], NULL);
        fetch_many_free(m);
        return ss__err_end(st);
    }
    *out = m;
    return ss__err_end(SS_OK);
}

ss_status ss_table_fetch_many_wait(ss_table_fetch_many *m, float *rows) {
    ss__err_begin();
    if (!m)
        return ss__err_end(ss__err_set(SS_ERR_INVALID_ARGUMENT, "fetch: NULL"));
    ss_status st = SS_OK;
    float *out = rows;
    for (size_t k = 0; k < m->ntables; k++) { /* every table's waited for, also on error */
        ss_status s = ss__table_fetch_wait(m->f[k], st == SS_OK ? out : NULL);
        if (st == SS_OK && s != SS_OK)
            st = table_failed(m->tables[k], s);
        if (out)
            out += m->counts[k] * m->tables[k]->spec.dim;
    }
    fetch_many_free(m);
    return ss__err_end(st);
}

ss_status ss_table_warm_many(ss_table *const *tables, size_t ntables, const uint64_t *ids,
                             const size_t *counts) {
    ss__err_begin();
    ss_status st = check_tables(tables, ntables, counts, ids, ids);
    for (size_t k = 0; st == SS_OK && k < ntables; k++) {
        if ((st = ss__table_warm(tables[k], ids, counts[k])) != SS_OK)
            table_failed(tables[k], st);
        ids += counts[k];
    }
    return ss__err_end(st);
}
