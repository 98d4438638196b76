/* The remote tables of a many-call (table_many.c) in one Batch call per
 * shard (ss__emb_client_batch): a model's tables cost one round trip a
 * batch, not one each. A job holds its tables' pushes (prepared as a
 * single table's are) and their lookups' distinct ids; it runs in the
 * caller's thread (a lookup) or on its first table's fetcher (a push with
 * the next batch's fetch, a push alone). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/strbuf.h"
#include "trainer-hooks/tables_internal.h"

/* One table's part of a job. */
typedef struct batch_table {
    ss_table *tb;   /* NULL when not in the job */
    push_item push; /* its prepared push (n 0: none) */
    unique_ids u;   /* its lookup's distinct ids */
    size_t asked;   /* ids the lookup asked for (repeats too) */
    float *rows;    /* rows of u's ids */
} batch_table;

struct ss__table_batch {
    size_t ntables;         /* of the many-call */
    batch_table *t;         /* [ntables] */
    ss__emb_client *client; /* the first table's: every table's shards are its */
    ss_status st;
    char why[300]; /* the first failing table and why */
};

size_t ss__table_batch_pick(ss_table *const *tables, size_t ntables, ss_table_mode mode,
                            const size_t *counts, const size_t *push_counts, bool *in) {
    ss__emb_client *base = NULL;
    size_t n = 0;
    for (size_t k = 0; k < ntables; k++) {
        const size_t look = counts ? counts[k] : 0, push = push_counts ? push_counts[k] : 0;
        in[k] = tables[k]->cfg.mode == mode && (look || push) && look <= SS_EMB_CLIENT_CHUNK &&
                push <= SS_EMB_CLIENT_CHUNK &&
                (base ? ss__emb_client_batches_with(base, tables[k]->client)
                      : ss__emb_client_batches_with(tables[k]->client, tables[k]->client));
        if (in[k] && !base)
            base = tables[k]->client;
        n += in[k];
    }
    return n;
}

void ss__table_batch_free(void *job) {
    ss__table_batch *b = job;
    if (!b)
        return;
    for (size_t k = 0; b->t && k < b->ntables; k++) {
        ss__table_push_item_free(&b->t[k].push);
        ss__table_unique_free(&b->t[k].u);
        free(b->t[k].rows);
    }
    free(b->t);
    free(b);
}

/* Table k's part: its push prepared, its lookup's ids deduplicated. */
static ss_status take_table(ss__table_batch *b, size_t k, ss_table *tb, const uint64_t *push_ids,
                            size_t pn, const float *grads, const uint64_t *ids, size_t n) {
    ss_status st = pn ? ss__table_prepare_push(tb, push_ids, pn, grads, &b->t[k].push) : SS_OK;
    if (st == SS_OK && n)
        st = ss__table_dedup(ids, n, &b->t[k].u);
    if (st == SS_OK && n &&
        !(b->t[k].rows = malloc(b->t[k].u.m * tb->spec.dim * sizeof(float) + 4)))
        st = SS_ERR_NO_MEMORY;
    b->t[k].tb = tb;
    b->t[k].asked = n;
    return st;
}

ss_status ss__table_batch_create(ss_table *const *tables, size_t ntables, const bool *in,
                                 const uint64_t *push_ids, const size_t *push_counts,
                                 const float *grads, const uint64_t *ids, const size_t *counts,
                                 ss__table_batch **out, char *why, size_t whylen) {
    ss__table_batch *b = calloc(1, sizeof *b);
    if (!b)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for a batch of %zu tables",
                        ntables);
    b->ntables = ntables;
    b->t = calloc(ntables + 1, sizeof *b->t);
    ss_status st = b->t ? SS_OK : SS_ERR_NO_MEMORY;
    for (size_t k = 0; st == SS_OK && k < ntables; k++) {
        const size_t pn = push_counts ? push_counts[k] : 0, n = counts ? counts[k] : 0;
        if (in[k]) {
            st = take_table(b, k, tables[k], push_ids, pn, grads, ids, n);
            if (!b->client)
                b->client = tables[k]->client;
        }
        if (push_ids)
            push_ids += pn;
        if (grads)
            grads += pn * tables[k]->spec.dim;
        if (ids)
            ids += n;
    }
    if (st != SS_OK) {
        ss__table_batch_free(b);
        return ss__fail(why, whylen, st, "cannot start a batch of %zu tables: %s", ntables,
                        ss_strerror(st));
    }
    /* ss_table_flush of a table waits for the job's push to it. */
    for (size_t k = 0; k < ntables; k++)
        if (b->t[k].tb && b->t[k].push.n) {
            pthread_mutex_lock(&b->t[k].tb->lock);
            b->t[k].tb->fetch_pushes++;
            pthread_mutex_unlock(&b->t[k].tb->lock);
        }
    *out = b;
    return SS_OK;
}

/* After the call: table k's counters, and its push done (dropped when its
 * part failed: the next flush says so). */
static void settle(ss__table_batch *b, size_t k, const ss__emb_batch_part *p) {
    ss_table *tb = b->t[k].tb;
    if (b->t[k].asked) {
        atomic_fetch_add(&tb->lookups, b->t[k].asked);
        atomic_fetch_add(&tb->unique_lookups, b->t[k].u.m);
        if (p->status == SS_OK)
            atomic_fetch_add(&tb->remote_rows, b->t[k].u.m);
    }
    if (p->status != SS_OK) {
        atomic_fetch_add(&tb->failed_calls, 1);
        if (b->st == SS_OK) {
            b->st = p->status;
            snprintf(b->why, sizeof b->why, "table %s: %s", tb->spec.name, p->why);
        }
    }
    if (!b->t[k].push.n)
        return;
    pthread_mutex_lock(&tb->lock);
    if (p->status != SS_OK && tb->dropped++ == 0)
        tb->first_dropped = p->status;
    tb->fetch_pushes--;
    pthread_cond_broadcast(&tb->progress);
    pthread_mutex_unlock(&tb->lock);
}

ss_status ss__table_batch_run(void *job) {
    ss__table_batch *b = job;
    ss__emb_batch_part *parts = calloc(b->ntables + 1, sizeof *parts);
    size_t np = 0;
    for (size_t k = 0; parts && k < b->ntables; k++)
        if (b->t[k].tb)
            parts[np++] = (ss__emb_batch_part){.spec = &b->t[k].tb->spec,
                                               .push_ids = b->t[k].push.ids,
                                               .pn = b->t[k].push.n,
                                               .grads = b->t[k].push.grads,
                                               .ids = b->t[k].u.ids,
                                               .n = b->t[k].asked ? b->t[k].u.m : 0,
                                               .rows = b->t[k].rows};
    ss_status st = parts ? ss__emb_client_batch(b->client, parts, np) : SS_ERR_NO_MEMORY;
    for (size_t k = 0, j = 0; k < b->ntables; k++)
        if (b->t[k].tb)
            settle(b, k,
                   parts ? &parts[j++]
                         : &(ss__emb_batch_part){.status = st, .why = "out of memory"});
    if (st != SS_OK)
        ss__log(SS_LOG_WARN, "emb", "event=batch_failed tables=%zu status=%s %s", np,
                ss_status_name(st), b->why);
    free(parts);
    return st;
}

const char *ss__table_batch_why(const ss__table_batch *b) {
    return b->why;
}

bool ss__table_batch_has(const ss__table_batch *b, size_t k) {
    return b->t[k].tb != NULL;
}

void ss__table_batch_rows(const ss__table_batch *b, size_t k, float *out) {
    const size_t dim = b->t[k].tb->spec.dim;
    for (size_t i = 0; i < b->t[k].asked; i++)
        memcpy(out + i * dim, b->t[k].rows + b->t[k].u.map[i] * dim, dim * sizeof(float));
}

/* A cached table's ids that its cache does not hold (distinct, in order
 * of first appearance): into *missing (malloc'd), *nm of them. */
static ss_status missing_of(ss_table *tb, const uint64_t *ids, size_t n, uint64_t **missing,
                            size_t *nm) {
    unique_ids u;
    ss_status st = ss__table_dedup(ids, n, &u);
    if (st != SS_OK)
        return st;
    float *rows = malloc(u.m * tb->spec.dim * sizeof *rows + 4);
    bool *found = calloc(u.m + 1, sizeof *found);
    st = rows && found ? ss__emb_table_peek(tb->rows, u.ids, u.m, rows, found) : SS_ERR_NO_MEMORY;
    *nm = 0;
    for (size_t i = 0; st == SS_OK && i < u.m; i++)
        if (!found[i])
            u.ids[(*nm)++] = u.ids[i];
    free(rows);
    free(found);
    free(u.map);
    *missing = u.ids;
    if (st != SS_OK) {
        free(u.ids);
        *missing = NULL;
    }
    return st;
}

ss_status ss__table_batch_fill(ss_table *const *tables, size_t ntables, const bool *in,
                               const uint64_t *ids, const size_t *counts, bool warm) {
    ss__emb_batch_part *parts = calloc(ntables + 1, sizeof *parts);
    size_t *which = calloc(ntables + 1, sizeof *which);
    ss_status st = parts && which ? SS_OK : SS_ERR_NO_MEMORY;
    ss__emb_client *base = NULL;
    size_t np = 0;
    for (size_t k = 0; st == SS_OK && k < ntables; ids += counts[k], k++) {
        uint64_t *missing;
        size_t nm;
        if (!in[k] || (st = missing_of(tables[k], ids, counts[k], &missing, &nm)) != SS_OK)
            continue;
        float *rows = nm ? malloc(nm * tables[k]->spec.dim * sizeof *rows) : NULL;
        if (!nm || !rows) {
            free(missing);
            st = nm ? SS_ERR_NO_MEMORY : SS_OK;
            continue;
        }
        parts[np] =
            (ss__emb_batch_part){.spec = &tables[k]->spec, .ids = missing, .n = nm, .rows = rows};
        base = base ? base : tables[k]->client;
        which[np++] = k;
    }
    if (st == SS_OK && np)
        st = ss__emb_client_batch(base, parts, np);
    for (size_t j = 0; j < np; j++) {
        ss_table *tb = tables[which[j]];
        if (st == SS_OK) { /* the cache loads them, its loader taking the batch's rows */
            const ss__table_preload pre = {tb, parts[j].ids, parts[j].n, parts[j].rows};
            size_t loaded = 0;
            ss__table_set_preload(&pre);
            ss__emb_table_load(tb->rows, parts[j].ids, parts[j].n, &loaded);
            ss__table_set_preload(NULL);
            atomic_fetch_add(&tb->remote_rows, parts[j].n);
            if (warm)
                atomic_fetch_add(&tb->warmed_rows, parts[j].n);
        } else {
            atomic_fetch_add(&tb->failed_calls, 1);
        }
        free((void *)parts[j].ids);
        free(parts[j].rows);
    }
    free(parts);
    free(which);
    return st;
}
