/* The store: named tables over RocksDB, request checks, the write-behind
 * flusher, the memory cap, checkpoints. See emb_store.h. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "common/finite.h"
#include "common/id_set.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "embedding-store/checkpoints_internal.h"
#include "embedding-store/emb_db_internal.h"
#include "embedding-store/emb_store.h"
#include "embedding-store/store_internal.h"

#define FLUSH_BATCH      65536
#define FLUSH_MAX_ROUNDS 1024

static bool bounded(const ss__emb_store_config *cfg) {
    const ss__emb_bounds *b = &cfg->bounds;
    return b->admit_count > 1 || b->ttl_s || b->max_live_rows;
}

static const double k_seconds_bounds[] = {1e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1, 5, 30};

/* The reasons shadowsync_emb_rejected_total counts (the service adds
 * "garbage" for requests that do not parse). */
static const char *const k_refusal_reasons[] = {
    "bad_alpha",       "bad_spec",      "batch_too_large",     "duplicate_ids",
    "empty_batch",     "non_finite",    "unknown_table",       "garbage",
    "dim_mismatch",    "spec_mismatch", "bad_checkpoint_name", "reply_too_large",
    "too_many_tables", "bad_ids",       "too_many_rows",       "over_budget"};

static void count_refusal(ss__emb_store *st, const char *reason, uint64_t n) {
    ss__metrics_count(st->metrics, "shadowsync_emb_rejected_total",
                      "Embedding requests refused, by reason; no stored row changed.", "reason",
                      reason, n);
}

/* Counts a refused request under its reason and returns status. */
static ss_status refuse(ss__emb_store *st, ss_status status, const char *reason) {
    count_refusal(st, reason, 1);
    return status;
}

/* Rows from RocksDB, or their initial values: those are stored nowhere
 * (a lookup of them keeps nothing). */
static ss_status load_rows(void *ctx, const uint64_t *ids, size_t n, float *rows, bool *stored) {
    store_table *tb = ctx;
    const size_t rf = ss__emb_row_floats(&tb->spec);
    memset(stored, 0, n * sizeof *stored);
    ss_status s =
        tb->st->db ? ss__emb_db_get_rows(tb->st->db, tb->tid, ids, n, rf, rows, stored) : SS_OK;
    for (size_t i = 0; s == SS_OK && i < n; i++)
        if (!stored[i])
            ss__emb_row_init(tb->tid, ids[i], tb->spec.init_scale, rows + i * rf, tb->spec.dim,
                             rf - tb->spec.dim);
    return s;
}

/* A bounded table's series and bounds. */
static void bound_table(ss__emb_store *st, store_table *tb) {
    const char *l[] = {"table", tb->spec.name, NULL};
    const struct {
        const char *name, *help;
        ss__counter **counter;
    } series[] = {
        {"shadowsync_emb_admitted_total",
         "New ids given a row by admission (their --emb-admit-count-th push).", &tb->admitted},
        {"shadowsync_emb_not_admitted_total",
         "Updates of ids not admitted yet: counted, not stored.", &tb->not_admitted},
        {"shadowsync_emb_expired_rows_total",
         "Rows deleted (memory and RocksDB) after --emb-ttl-s without a push.", &tb->expired},
        {"shadowsync_emb_dropped_rows_total",
         "Least recently pushed rows deleted to keep --emb-max-live-rows.", &tb->dropped},
    };
    for (size_t i = 0; i < sizeof series / sizeof *series; i++)
        ss__metrics_counter(st->metrics, series[i].name, series[i].help, l, series[i].counter);
    (void)ss__emb_table_set_bounds(tb->t, &st->cfg.bounds,
                                   ss__unix_ms() / 1000); /* checked at create */
}

static ss_status add_table(ss__emb_store *st, const ss__emb_spec *spec, store_table **out) {
    if (st->ntables == SS_EMB_MAX_TABLES)
        return SS_ERR_NO_MEMORY;
    store_table *tb = calloc(1, sizeof *tb);
    if (!tb)
        return SS_ERR_NO_MEMORY;
    tb->spec = *spec;
    tb->tid = ss__emb_table_id(spec->name);
    tb->st = st;
    ss_status s = ss__emb_table_create(spec, load_rows, tb, &tb->t, NULL, 0);
    if (s != SS_OK) {
        free(tb);
        return s;
    }
    if (!st->db) /* no flusher: nothing collects dirty rows */
        ss__emb_table_skip_dirty_queue(tb->t);
    const char *l_lookup[] = {"table", spec->name, NULL};
    const char *l_push[] = {"table", spec->name, "kind", "gradient", NULL};
    const char *l_elastic[] = {"table", spec->name, "kind", "elastic", NULL};
    ss__metrics_counter(st->metrics, "shadowsync_emb_lookups_total", "Embedding rows looked up.",
                        l_lookup, &tb->lookups);
    ss__metrics_counter(st->metrics, "shadowsync_emb_updates_total",
                        "Embedding rows updated, by kind (gradient push or elastic sync).", l_push,
                        &tb->pushes);
    ss__metrics_counter(st->metrics, "shadowsync_emb_updates_total",
                        "Embedding rows updated, by kind (gradient push or elastic sync).",
                        l_elastic, &tb->elastic);
    if (bounded(&st->cfg))
        bound_table(st, tb);
    if (st->tracking)
        ss__emb_table_track_changes(tb->t);
    st->tables[st->ntables++] = tb;
    *out = tb;
    return SS_OK;
}

ss_status ss__emb_store_add_table_locked(ss__emb_store *st, const ss__emb_spec *spec,
                                         store_table **out) {
    ss_status s = st->db ? ss__emb_db_put_spec(st->db, spec) : SS_OK;
    return s == SS_OK ? add_table(st, spec, out) : s;
}

static ss_status restore_spec(void *ctx, const ss__emb_spec *spec) {
    store_table *tb;
    return add_table(ctx, spec, &tb);
}

store_table *ss__emb_store_find(ss__emb_store *st, const char *name) {
    store_table *found = NULL;
    pthread_rwlock_rdlock(&st->lock);
    for (size_t i = 0; i < st->ntables && !found; i++)
        if (strcmp(st->tables[i]->spec.name, name) == 0)
            found = st->tables[i];
    pthread_rwlock_unlock(&st->lock);
    return found; /* tables live as long as the store */
}

/* Writes every queued dirty row of a table. Callers hold flush_lock, so a
 * row collected by another flush is written (or requeued) before this one
 * looks: after this returns, every update acknowledged before the call is
 * in the database. */
static ss_status flush_table(ss__emb_store *st, store_table *tb, bool sync) {
    ss__emb_dirty *d = &st->scratch;
    const size_t rf = ss__emb_row_floats(&tb->spec);
    for (int round = 0; round < FLUSH_MAX_ROUNDS; round++) {
        ss_status s = ss__emb_table_collect_dirty(tb->t, d, FLUSH_BATCH);
        if (s != SS_OK || d->n == 0)
            return s;
        s = ss__emb_db_put_rows(st->db, tb->tid, d->ids, d->n, rf, d->rows, sync);
        if (s != SS_OK) {
            ss__emb_table_requeue(tb->t, d);
            return s;
        }
        ss__emb_table_settle(tb->t, d, NULL);
        ss__counter_add(st->flushed_rows, d->n);
        if (d->n < FLUSH_BATCH)
            break;
    }
    return SS_OK;
}

/* Writes every dirty row of every table, unless everything applied
 * before `needed_before` is already written (another caller's flush got
 * there while this one waited for flush_lock; 0 = always flush). */
static ss_status flush_all_needed(ss__emb_store *st, bool sync, uint64_t needed_before) {
    if (!st->db)
        return SS_OK;
    uint64_t t0 = ss__now_ns();
    pthread_mutex_lock(&st->flush_lock);
    if (needed_before && atomic_load(&st->written_before_ns) >= needed_before) {
        pthread_mutex_unlock(&st->flush_lock);
        return SS_OK;
    }
    const uint64_t started = ss__now_ns();
    pthread_rwlock_rdlock(&st->lock);
    size_t n = st->ntables;
    pthread_rwlock_unlock(&st->lock);
    ss_status s = SS_OK;
    for (size_t i = 0; i < n && s == SS_OK; i++)
        s = flush_table(st, st->tables[i], sync);
    if (s == SS_OK)
        atomic_store(&st->written_before_ns, started);
    pthread_mutex_unlock(&st->flush_lock);
    ss__counter_add(st->flushes, 1);
    ss__histogram_observe(st->flush_seconds, (double)(ss__now_ns() - t0) / 1e9);
    if (s != SS_OK)
        ss__log(SS_LOG_ERROR, "emb", "event=flush_failed status=%s", ss_status_name(s));
    return s;
}

static ss_status flush_all(ss__emb_store *st, bool sync) {
    return flush_all_needed(st, sync, 0);
}

/* Back-pressure for write-behind: when the oldest update that may still be
 * unwritten is older than the lag (the flusher has fallen behind: a slow
 * disk, more dirty rows than it writes in the lag), the pushing call
 * writes the backlog, its own rows included, before it is acknowledged.
 * Pushers then go at the disk's pace and the unwritten backlog stays
 * about one lag's worth of updates, instead of growing without bound. */
static ss_status wait_for_backlog(ss__emb_store *st) {
    const uint64_t now = ss__now_ns();
    if (now - atomic_load(&st->written_before_ns) <= (uint64_t)st->cfg.flush_lag_ms * 1000000ull)
        return SS_OK;
    ss__counter_add(st->write_waits, 1);
    ss_status s = flush_all_needed(st, false, now);
    ss__histogram_observe(st->write_wait_seconds, (double)(ss__now_ns() - now) / 1e9);
    return s;
}

/* Over the cap: evict clean rows of every table down to 90% of it, each
 * table in proportion to its share. */
static void enforce_cap(ss__emb_store *st) {
    if (!st->cfg.mem_cap_bytes)
        return;
    pthread_rwlock_rdlock(&st->lock);
    size_t n = st->ntables;
    pthread_rwlock_unlock(&st->lock);
    uint64_t total = 0, rows[SS_EMB_MAX_TABLES], bytes[SS_EMB_MAX_TABLES];
    for (size_t i = 0; i < n; i++) {
        rows[i] = ss__emb_table_resident(st->tables[i]->t, &bytes[i]);
        total += bytes[i];
    }
    if (total <= st->cfg.mem_cap_bytes)
        return;
    double keep = 0.9 * (double)st->cfg.mem_cap_bytes / (double)total;
    uint64_t after = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++) {
            ss__counter_add(st->evicted, ss__emb_table_evict(st->tables[i]->t,
                                                             (size_t)((double)rows[i] * keep)));
            uint64_t b;
            ss__emb_table_resident(st->tables[i]->t, &b);
            after += b;
        }
        /* Still over: the rest is dirty. Write it now (write-behind would
         * get there within its lag) so that it can go. */
        if (after <= st->cfg.mem_cap_bytes || !st->db || pass == 1)
            break;
        flush_all(st, st->cfg.sync_writes);
        after = 0;
    }
}

/* Rows resident in memory, all tables. */
static uint64_t resident_rows(ss__emb_store *st, size_t *ntables) {
    pthread_rwlock_rdlock(&st->lock);
    size_t n = st->ntables;
    pthread_rwlock_unlock(&st->lock);
    uint64_t rows = 0;
    for (size_t i = 0; i < n; i++)
        rows += ss__emb_table_resident(st->tables[i]->t, NULL);
    *ntables = n;
    return rows;
}

/* --max-rows: a request of n ids may create up to n rows. Past the limit,
 * clean rows (written, or never updated) are evicted, each table to 90% of
 * its share; rows not yet written stay, and then the request is refused.
 * The count is of rows in memory: with --emb-db the table itself may be
 * larger, on disk. */
static bool room_for_rows(ss__emb_store *st, store_table *tb, const uint64_t *ids, size_t n) {
    size_t ntables;
    uint64_t have = resident_rows(st, &ntables);
    if (have + n <= st->cfg.max_rows)
        return true;
    n = ss__emb_table_count_missing(tb->t, ids, n); /* near the limit: count exactly */
    if (have + n <= st->cfg.max_rows)
        return true;
    if (bounded(&st->cfg))
        return false; /* a bounded table is held whole: max_rows refuses, it does not spill */
    if (st->db)
        flush_all(st, st->cfg.sync_writes); /* dirty rows become evictable */
    const double keep =
        have ? 0.9 * (double)(st->cfg.max_rows > n ? st->cfg.max_rows - n : 0) / (double)have : 0;
    for (size_t i = 0; i < ntables; i++) {
        ss__emb_table *t = st->tables[i]->t;
        ss__counter_add(
            st->evicted,
            ss__emb_table_evict(t, (size_t)((double)ss__emb_table_resident(t, NULL) * keep)));
    }
    return resident_rows(st, &ntables) + n <= st->cfg.max_rows;
}

static void update_resident_gauge(ss__emb_store *st) {
    size_t ntables;
    ss__gauge_set(st->resident_rows, (double)resident_rows(st, &ntables));
}

/* Once a second: every table's bounds, under flush_lock so that no flush
 * writes back a row this deletes; then the series move by what changed. */
static void sweep_bounds(ss__emb_store *st) {
    const uint64_t now = ss__now_ns();
    if (!bounded(&st->cfg) || now - st->last_sweep_ns < 1000000000ull)
        return;
    st->last_sweep_ns = now;
    pthread_rwlock_rdlock(&st->lock);
    size_t n = st->ntables;
    pthread_rwlock_unlock(&st->lock);
    pthread_mutex_lock(&st->flush_lock);
    for (size_t i = 0; i < n; i++) {
        store_table *tb = st->tables[i];
        ss__emb_table_sweep(tb->t, ss__unix_ms() / 1000, ss__emb_store_delete_stored, tb);
        ss__emb_table_stats now_st;
        ss__emb_table_get_stats(tb->t, &now_st);
        ss__counter_add(tb->admitted, now_st.admitted - tb->reported.admitted);
        ss__counter_add(tb->not_admitted, now_st.not_admitted - tb->reported.not_admitted);
        ss__counter_add(tb->expired, now_st.expired - tb->reported.expired);
        ss__counter_add(tb->dropped, now_st.dropped - tb->reported.dropped);
        tb->reported = now_st;
    }
    pthread_mutex_unlock(&st->flush_lock);
}

/* The flusher's tick, every flush_lag_ms / 2. */
static void flusher_tick(void *arg) {
    ss__emb_store *st = arg;
    /* Under sync writes the flusher's writes are synced too: rows it
     * marks clean must be durable, since the pusher that dirtied them
     * then finds nothing to flush and acknowledges. */
    flush_all(st, st->cfg.sync_writes);
    enforce_cap(st);
    sweep_bounds(st);
    update_resident_gauge(st);
}

static ss_status load_batch(void *ctx, const uint64_t *ids, const float *rows, size_t n) {
    (void)rows; /* read again through the loader, which inserts them */
    size_t loaded;
    return ss__emb_table_load(((store_table *)ctx)->t, ids, n, &loaded);
}

/* A bounded table at start-up: every stored row into memory, so that its
 * expiry and budget see it (stamped now: its clock starts again). */
static ss_status load_whole(ss__emb_store *st, store_table *tb) {
    ss_status s =
        ss__emb_db_each_row(st->db, tb->tid, ss__emb_row_floats(&tb->spec), 4096, load_batch, tb);
    if (s == SS_OK)
        ss__log(SS_LOG_INFO, "emb", "event=bounded_table_loaded table=%s rows=%llu", tb->spec.name,
                (unsigned long long)ss__emb_table_resident(tb->t, NULL));
    return s;
}

ss_status ss__emb_store_create(const ss__emb_store_config *cfg, ss__emb_store **out, char *why,
                               size_t whylen) {
    if (!cfg || !out || (cfg->flush_lag_ms && cfg->flush_lag_ms < 2) ||
        cfg->max_tables > SS_EMB_MAX_TABLES)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "flush lag must be 0 or at least 2 ms, and tables at most %d",
                        SS_EMB_MAX_TABLES);
    bool has_db = cfg->db_path && *cfg->db_path;
    if (cfg->sync_writes && !has_db)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "synced writes need a RocksDB path");
    if (bounded(cfg) && (cfg->mem_cap_bytes || cfg->bounds.admit_count > UINT16_MAX))
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, /* held whole (emb_store.h) */
                        "a bounded table takes no memory cap, and an admission count of at "
                        "most %u",
                        (unsigned)UINT16_MAX);
    ss__emb_store *st = calloc(1, sizeof *st);
    if (!st)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the embedding store");
    st->cfg = *cfg;
    if (!st->cfg.flush_lag_ms)
        st->cfg.flush_lag_ms = 200;
    if (!st->cfg.max_batch)
        st->cfg.max_batch = SS_EMB_DEFAULT_MAX_BATCH;
    if (!st->cfg.max_reply_bytes)
        st->cfg.max_reply_bytes = SS_EMB_DEFAULT_MAX_REPLY_BYTES;
    if (!st->cfg.max_tables)
        st->cfg.max_tables = SS_EMB_DEFAULT_MAX_TABLES;
    st->metrics = cfg->metrics;
    if (!st->metrics && ss__metrics_create(&st->own_metrics, why, whylen) != SS_OK) {
        free(st);
        return SS_ERR_NO_MEMORY; /* said by ss__metrics_create */
    }
    if (!st->metrics)
        st->metrics = st->own_metrics;
    pthread_rwlock_init(&st->lock, NULL);
    pthread_mutex_init(&st->flush_lock, NULL);
    ss__metrics_counter(st->metrics, "shadowsync_emb_flushed_rows_total",
                        "Rows written to RocksDB by flushes.", NULL, &st->flushed_rows);
    ss__metrics_counter(st->metrics, "shadowsync_emb_flushes_total", "Flushes to RocksDB.", NULL,
                        &st->flushes);
    ss__metrics_counter(st->metrics, "shadowsync_emb_evicted_rows_total",
                        "Clean rows evicted from memory by the memory cap.", NULL, &st->evicted);
    ss__metrics_histogram(st->metrics, "shadowsync_emb_flush_seconds",
                          "Time of one flush of dirty rows to RocksDB.", NULL, k_seconds_bounds,
                          sizeof k_seconds_bounds / sizeof *k_seconds_bounds, &st->flush_seconds);
    ss__metrics_histogram(st->metrics, "shadowsync_emb_checkpoint_seconds",
                          "Time of one RocksDB checkpoint (flush included).", NULL,
                          k_seconds_bounds, sizeof k_seconds_bounds / sizeof *k_seconds_bounds,
                          &st->checkpoint_seconds);
    ss__metrics_counter(st->metrics, "shadowsync_emb_write_waits_total",
                        "Updates that waited for their rows to be written because the "
                        "write-behind flusher was more than --flush-lag-ms behind.",
                        NULL, &st->write_waits);
    ss__metrics_histogram(st->metrics, "shadowsync_emb_write_wait_seconds",
                          "Time an update waited for the write-behind backlog to be written.", NULL,
                          k_seconds_bounds, sizeof k_seconds_bounds / sizeof *k_seconds_bounds,
                          &st->write_wait_seconds);
    atomic_init(&st->written_before_ns, ss__now_ns());
    ss__metrics_gauge(st->metrics, "shadowsync_emb_resident_rows", "Embedding rows held in memory.",
                      NULL, &st->resident_rows);
    /* Every reason exists from the start, at 0, so that rate() sees the
     * first refusal. */
    for (size_t i = 0; i < sizeof k_refusal_reasons / sizeof *k_refusal_reasons; i++)
        count_refusal(st, k_refusal_reasons[i], 0);
    ss_status s = SS_OK;
    char db_why[256] = "";
    if (has_db && (s = ss__emb_db_open(cfg->db_path, &st->db, db_why, sizeof db_why)) != SS_OK) {
        ss__log(SS_LOG_ERROR, "emb", "event=db_open_failed %s", db_why);
        ss__why(why, whylen, "%s", db_why);
    }
    if (s == SS_OK && st->db && (s = ss__emb_db_each_spec(st->db, restore_spec, st)) != SS_OK) {
        ss__log(SS_LOG_ERROR, "emb", "event=restore_failed status=%s", ss_status_name(s));
        ss__why(why, whylen, "cannot restore the tables of %s: %s", cfg->db_path, ss_strerror(s));
    }
    for (size_t i = 0; s == SS_OK && st->db && bounded(cfg) && i < st->ntables; i++)
        s = load_whole(st, st->tables[i]);
    /* Always: it also keeps shadowsync_emb_resident_rows current. */
    if (s == SS_OK) /* it waits on CLOCK_MONOTONIC: a clock step cannot stall it */
        s = ss__ticker_start((uint64_t)(st->cfg.flush_lag_ms / 2) * 1000000ull, flusher_tick, st,
                             &st->flusher, why, whylen);
    if (s != SS_OK) {
        ss__emb_store_destroy(st);
        return s;
    }
    *out = st;
    return SS_OK;
}

void ss__emb_store_destroy(ss__emb_store *st) {
    if (!st)
        return;
    ss__ticker_stop(st->flusher);
    if (st->db)
        flush_all(st, true);
    for (size_t i = 0; i < st->ntables; i++) {
        ss__emb_table_destroy(st->tables[i]->t);
        free(st->tables[i]);
    }
    ss__emb_db_close(st->db);
    ss__emb_dirty_free(&st->scratch);
    pthread_rwlock_destroy(&st->lock);
    pthread_mutex_destroy(&st->flush_lock);
    ss__metrics_destroy(st->own_metrics);
    free(st);
}

ss_status ss__emb_store_open_table(ss__emb_store *st, const ss__emb_spec *spec,
                                   ss__emb_spec *stored, char *why, size_t whylen) {
    char bad[128];
    if (!st || !spec)
        return SS_ERR_INVALID_ARGUMENT;
    if (ss__emb_spec_check(spec, bad, sizeof bad) != SS_OK) {
        ss__why(why, whylen, "bad table spec: %s", bad);
        return refuse(st, SS_ERR_INVALID_ARGUMENT, "bad_spec");
    }
    pthread_rwlock_wrlock(&st->lock);
    store_table *tb = NULL;
    ss_status s = SS_OK;
    for (size_t i = 0; i < st->ntables && !tb; i++)
        if (strcmp(st->tables[i]->spec.name, spec->name) == 0)
            tb = st->tables[i];
    for (size_t i = 0; i < st->ntables && !tb; i++)
        if (st->tables[i]->tid == ss__emb_table_id(spec->name)) {
            ss__why(why, whylen, "table %s has the id of table %s; rename it", spec->name,
                    st->tables[i]->spec.name);
            s = SS_ERR_EXISTS;
        }
    if (s == SS_OK && !tb && st->read_only) {
        ss__why(why, whylen,
                "table %s does not exist here, and this PS is a read-only follower: tables are "
                "created on the training PS",
                spec->name);
        s = SS_ERR_STATE;
    } else if (s == SS_OK && !tb && st->ntables >= st->cfg.max_tables) {
        ss__why(why, whylen, "the store holds %zu tables, its limit (--max-tables)", st->ntables);
        s = SS_ERR_TOO_LARGE;
    } else if (s == SS_OK && !tb) {
        s = ss__emb_store_add_table_locked(st, spec, &tb);
        if (s == SS_OK)
            ss__log(SS_LOG_INFO, "emb", "event=table_created table=%s dim=%u optimizer=%s",
                    spec->name, spec->dim, spec->optimizer == SS_EMB_ADAGRAD ? "adagrad" : "sgd");
        else
            ss__why(why, whylen, "cannot create table %s: %s", spec->name, ss_strerror(s));
    } else if (tb && tb->spec.dim != spec->dim) {
        ss__why(why, whylen, "table %s has dim %u, not %u", spec->name, tb->spec.dim, spec->dim);
        s = SS_ERR_SIZE_MISMATCH;
    } else if (tb && !ss__emb_spec_same(&tb->spec, spec)) {
        ss__why(why, whylen, "table %s exists with another optimizer, lr, eps or init_scale",
                spec->name);
        s = SS_ERR_EXISTS;
    }
    if (tb && stored)
        *stored = tb->spec;
    pthread_rwlock_unlock(&st->lock);
    if (s == SS_ERR_SIZE_MISMATCH)
        return refuse(st, s, "dim_mismatch");
    if (s == SS_ERR_EXISTS)
        return refuse(st, s, "spec_mismatch");
    if (s == SS_ERR_TOO_LARGE)
        return refuse(st, s, "too_many_tables");
    return s;
}

ss_status ss__emb_store_table_spec(ss__emb_store *st, const char *table, ss__emb_spec *out) {
    store_table *tb = st && table ? ss__emb_store_find(st, table) : NULL;
    if (!tb)
        return SS_ERR_NOT_FOUND;
    *out = tb->spec;
    return SS_OK;
}

/* The checks every row request gets. */
static ss_status check_request(ss__emb_store *st, const char *table, const uint64_t *ids, size_t n,
                               const float *payload, store_table **out, char *why, size_t whylen) {
    store_table *tb = table ? ss__emb_store_find(st, table) : NULL;
    if (!tb) {
        ss__why(why, whylen, "unknown table %s", table ? table : "(none)");
        return refuse(st, SS_ERR_NOT_FOUND, "unknown_table");
    }
    if (n == 0 || !ids) {
        ss__why(why, whylen, "empty batch");
        return refuse(st, SS_ERR_INVALID_ARGUMENT, "empty_batch");
    }
    if (n > st->cfg.max_batch) {
        ss__why(why, whylen, "batch of %zu ids is over the limit of %zu", n, st->cfg.max_batch);
        return refuse(st, SS_ERR_NO_MEMORY, "batch_too_large");
    }
    /* The reply (or the payload) holds n rows of dim floats: bounded
     * before any row is created or any buffer allocated. */
    if ((uint64_t)n * tb->spec.dim * sizeof(float) > st->cfg.max_reply_bytes) {
        ss__why(
            why, whylen,
            "%zu rows of dim %u are %llu bytes, over the server's limit of %zu bytes per request "
            "(--max-reply-mb); send fewer ids per call",
            n, tb->spec.dim, (unsigned long long)n * tb->spec.dim * sizeof(float),
            st->cfg.max_reply_bytes);
        return refuse(st, SS_ERR_TOO_LARGE, "reply_too_large");
    }
    if (payload && !ss__all_finite(payload, n * tb->spec.dim)) {
        const size_t i = ss__first_non_finite(payload, n * tb->spec.dim);
        ss__why(why, whylen, "value %zu of row %zu is not finite", i % tb->spec.dim,
                i / tb->spec.dim);
        return refuse(st, SS_ERR_NON_FINITE, "non_finite");
    }
    uint64_t dup = 0;
    const int twice = ss__ids_find_duplicate(ids, n, &dup);
    if (twice < 0)
        return SS_ERR_NO_MEMORY;
    if (twice) {
        ss__why(why, whylen, "id %llu appears more than once", (unsigned long long)dup);
        return refuse(st, SS_ERR_INVALID_ARGUMENT, "duplicate_ids");
    }
    if (st->cfg.max_rows && !room_for_rows(st, tb, ids, n)) {
        ss__why(why, whylen,
                "the store holds its limit of %llu rows in memory (--max-rows) and none can be "
                "evicted (they are not yet written)",
                (unsigned long long)st->cfg.max_rows);
        return refuse(st, SS_ERR_TOO_LARGE, "too_many_rows");
    }
    *out = tb;
    return SS_OK;
}

/* After an update: fsync'd write in sync mode, back-pressure in
 * write-behind mode, then the memory cap. */
static ss_status after_update(ss__emb_store *st, store_table *tb) {
    ss_status s = SS_OK;
    if (st->cfg.sync_writes) {
        pthread_mutex_lock(&st->flush_lock);
        s = flush_table(st, tb, true);
        pthread_mutex_unlock(&st->flush_lock);
    } else if (st->db) {
        s = wait_for_backlog(st);
    }
    enforce_cap(st);
    return s;
}

/* The read of a checked lookup (check_request passed). */
static ss_status read_rows(ss__emb_store *st, store_table *tb, const uint64_t *ids, size_t n,
                           float *rows) {
    ss_status s = ss__emb_table_lookup(tb->t, ids, n, rows);
    if (s == SS_OK) {
        ss__counter_add(tb->lookups, n);
        enforce_cap(st);
    }
    return s;
}

/* The update of a checked push (check_request passed). */
/* The status of an update whose table call said st, `refused` of its n
 * rows left alone because their result would not be finite: the rows
 * that did change are counted and written as usual. */
static ss_status after_rows(ss__emb_store *st, store_table *tb, ss__counter *counter, size_t n,
                            ss_status s, size_t refused, char *why, size_t whylen) {
    if (s != SS_OK && s != SS_ERR_NON_FINITE)
        return s;
    ss__counter_add(counter, n - refused);
    ss_status w = after_update(st, tb);
    if (s == SS_ERR_NON_FINITE) {
        ss__why(why, whylen,
                "%zu of %zu rows: the update overflowed (not finite); those rows keep their last "
                "value",
                refused, n);
        count_refusal(st, "non_finite", 1);
    }
    return w != SS_OK ? w : s;
}

/* Room for the rows an update of ids may create (the live-row budget),
 * or the refusal counted; *held as ss__emb_budget_reserve's. */
static ss_status reserve_rows(ss__emb_store *st, store_table *tb, const uint64_t *ids, size_t n,
                              uint64_t *held, char *why, size_t whylen) {
    const ss_status s = ss__emb_budget_reserve(st, tb, ids, n, held, why, whylen);
    return s == SS_OK ? s : refuse(st, s, "over_budget");
}

static ss_status apply_push(ss__emb_store *st, store_table *tb, const uint64_t *ids, size_t n,
                            const float *grads, char *why, size_t whylen) {
    size_t refused = 0;
    uint64_t held;
    ss_status s = reserve_rows(st, tb, ids, n, &held, why, whylen);
    if (s != SS_OK)
        return s;
    s = ss__emb_table_apply_gradients(tb->t, ids, n, grads, &refused);
    ss__emb_budget_release(tb, held);
    return after_rows(st, tb, tb->pushes, n, s, refused, why, whylen);
}

ss_status ss__emb_store_lookup(ss__emb_store *st, const char *table, const uint64_t *ids, size_t n,
                               float *rows, char *why, size_t whylen) {
    store_table *tb;
    if (!st || !rows)
        return SS_ERR_INVALID_ARGUMENT;
    ss_status s = check_request(st, table, ids, n, NULL, &tb, why, whylen);
    return s == SS_OK ? read_rows(st, tb, ids, n, rows) : s;
}

ss_status ss__emb_store_push(ss__emb_store *st, const char *table, const uint64_t *ids, size_t n,
                             const float *grads, char *why, size_t whylen) {
    store_table *tb;
    if (!st || !grads)
        return SS_ERR_INVALID_ARGUMENT;
    ss_status s = check_request(st, table, ids, n, grads, &tb, why, whylen);
    return s == SS_OK ? apply_push(st, tb, ids, n, grads, why, whylen) : s;
}

ss_status ss__emb_store_push_lookup(ss__emb_store *st, const char *table, const uint64_t *push_ids,
                                    size_t pn, const float *grads, const uint64_t *ids, size_t n,
                                    float *rows, char *why, size_t whylen) {
    store_table *tb;
    if (!st || (pn && !grads) || (n && !rows))
        return SS_ERR_INVALID_ARGUMENT;
    if (pn == 0 && n == 0) {
        ss__why(why, whylen, "empty batch: neither rows to push nor rows to look up");
        return refuse(st, SS_ERR_INVALID_ARGUMENT, "empty_batch");
    }
    /* Both parts checked first: a refused call changes nothing. */
    ss_status s = SS_OK;
    if (pn)
        s = check_request(st, table, push_ids, pn, grads, &tb, why, whylen);
    if (s == SS_OK && n)
        s = check_request(st, table, ids, n, NULL, &tb, why, whylen);
    if (s == SS_OK && pn)
        s = apply_push(st, tb, push_ids, pn, grads, why, whylen);
    if (s == SS_OK && n)
        s = read_rows(st, tb, ids, n, rows);
    return s;
}

/* Elastic rows: plain deltas (enc NULL, into deltas) or encoded (into
 * encoded). */
static ss_status store_elastic(ss__emb_store *st, const char *table, const uint64_t *ids, size_t n,
                               const float *x, float alpha, const ss__emb_delta_encoder *enc,
                               float *deltas, uint8_t *encoded, char *why, size_t whylen) {
    store_table *tb;
    if (!st || !x || (enc ? !encoded || !enc->fn : !deltas))
        return SS_ERR_INVALID_ARGUMENT;
    ss_status s = check_request(st, table, ids, n, x, &tb, why, whylen);
    if (s == SS_OK && !ss__alpha_valid(alpha)) {
        ss__why(why, whylen, "alpha must be in " SS_ALPHA_RANGE);
        s = refuse(st, SS_ERR_INVALID_ARGUMENT, "bad_alpha");
    }
    if (s != SS_OK)
        return s;
    size_t not_held = 0, refused = 0;
    uint64_t held;
    if ((s = reserve_rows(st, tb, ids, n, &held, why, whylen)) != SS_OK)
        return s;
    s = enc ? ss__emb_table_elastic_encoded(tb->t, ids, n, x, alpha, enc, encoded, &not_held)
            : ss__emb_table_elastic(tb->t, ids, n, x, alpha, deltas, &refused);
    ss__emb_budget_release(tb, held);
    return after_rows(st, tb, tb->elastic, n - not_held, s, refused, why, whylen);
}

ss_status ss__emb_store_elastic(ss__emb_store *st, const char *table, const uint64_t *ids, size_t n,
                                const float *x, float alpha, float *deltas, char *why,
                                size_t whylen) {
    return store_elastic(st, table, ids, n, x, alpha, NULL, deltas, NULL, why, whylen);
}

ss_status ss__emb_store_elastic_encoded(ss__emb_store *st, const char *table, const uint64_t *ids,
                                        size_t n, const float *x, float alpha,
                                        const ss__emb_delta_encoder *enc, uint8_t *deltas,
                                        char *why, size_t whylen) {
    if (!enc)
        return SS_ERR_INVALID_ARGUMENT;
    return store_elastic(st, table, ids, n, x, alpha, enc, NULL, deltas, why, whylen);
}

ss_status ss__emb_store_read_full(ss__emb_store *st, const char *table, const uint64_t *ids,
                                  size_t n, float *rows, bool *found) {
    store_table *tb = st && table ? ss__emb_store_find(st, table) : NULL;
    if (!tb)
        return SS_ERR_NOT_FOUND;
    ss_status s = ss__emb_table_read_full(tb->t, ids, n, rows, found);
    if (s != SS_OK || !st->db)
        return s;
    const size_t rf = ss__emb_row_floats(&tb->spec);
    for (size_t i = 0; i < n && s == SS_OK; i++)
        if (!found[i])
            s = ss__emb_db_get_rows(st->db, tb->tid, ids + i, 1, rf, rows + i * rf, found + i);
    return s;
}

ss_status ss__emb_store_refuse(ss__emb_store *st, ss_status status, const char *reason) {
    return refuse(st, status, reason);
}

size_t ss__emb_store_max_batch(const ss__emb_store *st) {
    return st->cfg.max_batch;
}

ss_status ss__emb_store_flush(ss__emb_store *st) {
    return st ? flush_all(st, true) : SS_ERR_INVALID_ARGUMENT;
}

ss_status ss__emb_store_checkpoint(ss__emb_store *st, const char *name, char *path, size_t pathlen,
                                   char *why, size_t whylen) {
    if (!st || !name || !path || !pathlen)
        return SS_ERR_INVALID_ARGUMENT;
    if (!st->db) {
        ss__why(why, whylen, "this store has no database (start with a RocksDB path)");
        return SS_ERR_STATE;
    }
    char dir[4096];
    ss_status bad = ss__emb_ckpt_path(st->cfg.checkpoint_root, name, dir, sizeof dir, why, whylen);
    if (bad != SS_OK)
        return refuse(st, bad, "bad_checkpoint_name");
    uint64_t t0 = ss__now_ns();
    /* Writes are held while the checkpoint is cut so that it holds every
     * update acknowledged before it started. */
    pthread_rwlock_rdlock(&st->lock);
    size_t n = st->ntables;
    pthread_rwlock_unlock(&st->lock);
    pthread_mutex_lock(&st->flush_lock);
    ss_status s = SS_OK;
    for (size_t i = 0; i < n && s == SS_OK; i++)
        s = flush_table(st, st->tables[i], true);
    if (s == SS_OK)
        s = ss__emb_db_checkpoint(st->db, dir, why, whylen);
    pthread_mutex_unlock(&st->flush_lock);
    double secs = (double)(ss__now_ns() - t0) / 1e9;
    ss__histogram_observe(st->checkpoint_seconds, secs);
    ss__log(s == SS_OK ? SS_LOG_INFO : SS_LOG_ERROR, "emb",
            "event=checkpoint dir=%s seconds=%.3f status=%s", dir, secs, ss_status_name(s));
    if (s == SS_OK) {
        snprintf(path, pathlen, "%s", dir);
        if (st->cfg.checkpoint_keep)
            ss__emb_ckpt_prune(st->cfg.checkpoint_root, st->cfg.checkpoint_keep);
    }
    return s;
}

ss_status ss__emb_store_stats_of(ss__emb_store *st, const char *table, ss__emb_store_stats *out) {
    store_table *tb = st && table && out ? ss__emb_store_find(st, table) : NULL;
    if (!tb)
        return SS_ERR_NOT_FOUND;
    memset(out, 0, sizeof *out);
    ss__emb_table_get_stats(tb->t, &out->table);
    out->lookups = ss__counter_value(tb->lookups);
    out->pushes = ss__counter_value(tb->pushes);
    out->elastic = ss__counter_value(tb->elastic);
    out->flushed_rows = ss__counter_value(st->flushed_rows);
    out->flushes = ss__counter_value(st->flushes);
    return SS_OK;
}
