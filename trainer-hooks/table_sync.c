/* One row-sync thread for every cached table of a trainer (a DLRM has
 * 26): each pass takes every table's dirty rows and syncs those of the
 * tables that share their shards in one Batch call per shard (Elastic
 * for each table), where a thread per table made a call per table every
 * interval (104 threads and thousands of calls a second for 4 trainers of
 * 26 tables). A standalone cached table keeps a thread of its own. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "trainer-hooks/tables_internal.h"

/* Rounds of a pass at most: tables with more dirty rows than a batch
 * part holds (SS_EMB_CLIENT_CHUNK) go on in the next round. */
#define MAX_ROUNDS 16

struct ss__table_syncer {
    pthread_mutex_t lock; /* the tables; held through a pass */
    ss_table **tables;
    size_t n, cap;
    ss__ticker *ticker;
};

void *ss__table_syncer_make(void) {
    ss__table_syncer *s = calloc(1, sizeof *s);
    if (s)
        pthread_mutex_init(&s->lock, NULL);
    return s;
}

void ss__table_syncer_destroy(void *obj) {
    ss__table_syncer *s = obj;
    ss__ticker_stop(s->ticker);
    pthread_mutex_destroy(&s->lock);
    free(s->tables);
    free(s);
}

/* Table k's part of a round: its dirty rows (under its sync_lock, held
 * until settle_part). False: nothing dirty (the lock is let go). */
static bool take_part(ss_table *tb, ss__emb_batch_part *p, float **x) {
    const size_t dim = tb->spec.dim, rf = ss__emb_row_floats(&tb->spec);
    ss__emb_dirty *d = &tb->dirty;
    pthread_mutex_lock(&tb->sync_lock);
    if (ss__emb_table_collect_dirty(tb->rows, d, SS_EMB_CLIENT_CHUNK) != SS_OK || d->n == 0) {
        pthread_mutex_unlock(&tb->sync_lock);
        return false;
    }
    *x = malloc(d->n * dim * sizeof **x * 2 + 4); /* the rows, then their deltas */
    if (!*x) {
        ss__emb_table_requeue(tb->rows, d);
        pthread_mutex_unlock(&tb->sync_lock);
        return false;
    }
    for (size_t i = 0; i < d->n; i++)
        memcpy(*x + i * dim, d->rows + i * rf, dim * sizeof(float));
    *p = (ss__emb_batch_part){.spec = &tb->spec,
                              .ids = d->ids,
                              .n = d->n,
                              .x = *x,
                              .rows = *x + d->n * dim,
                              .alpha = tb->cfg.alpha,
                              .enc = tb->encoding};
    return true;
}

/* The round's result for a table: deltas applied (or the rows left dirty
 * for the next pass), clean rows past the capacity evicted. True when it
 * had a full part (more may be dirty). */
static bool settle_part(ss_table *tb, const ss__emb_batch_part *p, float *x) {
    ss__emb_dirty *d = &tb->dirty;
    const bool full = d->n == SS_EMB_CLIENT_CHUNK;
    if (p->status == SS_OK) {
        ss__emb_table_settle(tb->rows, d, p->rows);
        atomic_fetch_add(&tb->synced_rows, d->n);
        atomic_fetch_add(&tb->sync_passes, 1);
    } else {
        ss__emb_table_requeue(tb->rows, d);
        atomic_fetch_add(&tb->failed_calls, 1);
    }
    ss__emb_table_evict(tb->rows, tb->cfg.cache_rows);
    pthread_mutex_unlock(&tb->sync_lock);
    free(x);
    return full && p->status == SS_OK;
}

/* One round over the tables (s->lock held); true: another is needed.
 * *failed: the call failed. */
static bool sync_round(ss__table_syncer *s, ss__emb_batch_part *parts, float **xs, size_t *which,
                       bool *failed) {
    size_t np = 0;
    ss__emb_client *base = NULL;
    bool more = false;
    for (size_t k = 0; k < s->n; k++) {
        ss_table *tb = s->tables[k];
        const bool with = base ? ss__emb_client_batches_with(base, tb->client)
                               : ss__emb_client_batches_with(tb->client, tb->client);
        if (!with) { /* a table the batch cannot take: its own pass */
            size_t synced;
            ss__table_sync_pass(tb, &synced);
            continue;
        }
        if (take_part(tb, &parts[np], &xs[np])) {
            base = base ? base : tb->client;
            which[np++] = k;
        }
    }
    ss_status st = np ? ss__emb_client_batch(base, parts, np) : SS_OK;
    if (st != SS_OK) {
        *failed = true;
        ss__log(SS_LOG_WARN, "emb", "event=row_sync_failed tables=%zu status=%s %s", np,
                ss_status_name(st), parts[0].why);
    }
    for (size_t j = 0; j < np; j++)
        more |= settle_part(s->tables[which[j]], &parts[j], xs[j]);
    return more;
}

/* A pass over every table, then its pause: the smallest interval of the
 * tables (100 ms more when a call failed: the shards may be away). */
static uint64_t sync_tick(void *arg) {
    ss__table_syncer *s = arg;
    pthread_mutex_lock(&s->lock);
    ss__emb_batch_part *parts = calloc(s->n + 1, sizeof *parts);
    float **xs = calloc(s->n + 1, sizeof *xs);
    size_t *which = calloc(s->n + 1, sizeof *which);
    uint64_t ms = UINT32_MAX;
    for (size_t k = 0; k < s->n; k++)
        if (s->tables[k]->cfg.sync_interval_ms < ms)
            ms = s->tables[k]->cfg.sync_interval_ms;
    bool failed = false;
    for (int round = 0; parts && xs && which && round < MAX_ROUNDS; round++)
        if (!sync_round(s, parts, xs, which, &failed))
            break;
    pthread_mutex_unlock(&s->lock);
    free(parts);
    free(xs);
    free(which);
    return (ms == UINT32_MAX ? 10 : ms) * 1000000ull + (failed ? 100000000ull : 0);
}

ss_status ss__table_syncer_add(ss__table_syncer *s, ss_table *tb) {
    pthread_mutex_lock(&s->lock);
    ss_status st = SS_OK;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        ss_table **t = realloc(s->tables, cap * sizeof *t);
        if (t) {
            s->tables = t;
            s->cap = cap;
        } else {
            st = SS_ERR_NO_MEMORY;
        }
    }
    if (st == SS_OK)
        s->tables[s->n++] = tb;
    if (st == SS_OK && !s->ticker)
        st = ss__ticker_start_paced((uint64_t)tb->cfg.sync_interval_ms * 1000000ull, sync_tick, s,
                                    &s->ticker, NULL, 0);
    pthread_mutex_unlock(&s->lock);
    return st;
}

void ss__table_syncer_remove(ss__table_syncer *s, ss_table *tb) {
    pthread_mutex_lock(&s->lock); /* a pass under way ends first */
    for (size_t k = 0; k < s->n; k++)
        if (s->tables[k] == tb) {
            s->tables[k] = s->tables[--s->n];
            break;
        }
    pthread_mutex_unlock(&s->lock);
}
