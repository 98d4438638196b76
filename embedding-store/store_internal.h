/* What store.c (requests, the flusher, checkpoints) and store_deltas.c
 * (delta files out, and applied by a follower) share: the store and its
 * tables. Private to embedding-store/. */
#ifndef SS_EMB_STORE_INTERNAL_H
#define SS_EMB_STORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/ticker.h"
#include "embedding-store/emb_db_internal.h"
#include "embedding-store/emb_store.h"

typedef struct store_table {
    ss__emb_table *t;
    ss__emb_spec spec;
    uint32_t tid;
    struct ss__emb_store *st;
    ss__counter *lookups, *pushes, *elastic;
    /* bounds: the table's counters as last reported, and the series */
    ss__emb_table_stats reported;
    ss__counter *admitted, *not_admitted, *expired, *dropped;
    ss__emb_scan_pos take_pos; /* where the next take's walk starts (under flush_lock) */
    uint64_t take_db_from;     /* the same for its walk of the database's rows */
    _Atomic uint64_t reserved; /* rows writers may be creating now (store_budget.c) */
} store_table;

struct ss__emb_store {
    ss__emb_store_config cfg;
    ss__metrics *metrics, *own_metrics;
    ss__emb_db *db;
    pthread_rwlock_t lock; /* the table list */
    store_table *tables[SS_EMB_MAX_TABLES];
    size_t ntables;
    pthread_mutex_t flush_lock; /* one flush at a time (see flush_table) */
    ss__emb_dirty scratch;      /* under flush_lock */
    ss__ticker *flusher;        /* every flush_lag_ms / 2 */
    /* Every update applied before this time (CLOCK_MONOTONIC ns) is in the
     * database: the start of the last flush of every table that ended
     * well. Pushes read it to see whether the flusher keeps up. */
    _Atomic uint64_t written_before_ns;
    ss__counter *flushed_rows, *flushes, *evicted, *write_waits;
    ss__histogram *flush_seconds, *checkpoint_seconds, *write_wait_seconds;
    ss__gauge *resident_rows;
    uint64_t last_sweep_ns;
    /* deltas (store_deltas.c) */
    bool tracking;  /* every table tracks its changes */
    bool read_only; /* a follower: no table is created by a request */
};

/* Creates a table (its spec persisted first when there is a database);
 * the caller holds st->lock for writing. */
ss_status ss__emb_store_add_table_locked(ss__emb_store *st, const ss__emb_spec *spec,
                                         store_table **out);

/* The table of that name (NULL: none); tables live as long as the store. */
store_table *ss__emb_store_find(ss__emb_store *st, const char *name);

/* ---- the live-row budget (store_budget.c) ---- */
/* An on_delete for the table's bounds: the ids deleted from the database. */
void ss__emb_store_delete_stored(void *ctx, const uint64_t *ids, size_t n);
/* Before an update of ids that may create rows in tb: room for its new
 * ids within the budget, made now (the oldest rows deleted) when the rows
 * held and reserved would pass it; *held: rows reserved, given back by
 * ss__emb_budget_release once the update is done. SS_ERR_TOO_LARGE, with
 * why, for more new ids than the whole budget. */
ss_status ss__emb_budget_reserve(ss__emb_store *st, store_table *tb, const uint64_t *ids, size_t n,
                                 uint64_t *held, char *why, size_t whylen);
void ss__emb_budget_release(store_table *tb, uint64_t held);

#endif
