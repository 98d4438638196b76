/* What the embedding tables' files share: the table and its fetch
 * (tables.c: the public calls, open and close; table_threads.c: the
 * pusher, fetcher and row-sync threads; table_rows.c: what both do with
 * rows). Private to trainer-hooks/. */
#ifndef SS_TABLES_INTERNAL_H
#define SS_TABLES_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ticker.h"
#include "embedding-store/emb_table.h"
#include "rpc/emb/emb_client.h"
#include "shadowsync/shadowsync.h"

#define SYNC_BATCH 65536

typedef struct push_item {
    uint64_t *ids;
    float *grads;
    size_t n;
} push_item;

struct ss_table_fetch {
    ss_table *tb;
    uint64_t *ids;
    size_t n;
    float *rows;
    push_item push; /* remote: sent in the same call, before the lookup (n 0: none) */
    ss_status st;
    bool done;
    bool warm; /* ss_table_warm: load into the cache, nobody waits; the fetcher frees it */
    ss_table_fetch *next;
};

struct ss_table {
    ss_table_config cfg;
    ss_trainer *owner; /* NULL: a standalone table (ss_table_close) */
    ss__emb_spec spec;
    ss__encoding encoding;  /* cached: the row sync's (emb_encoding) */
    ss__emb_table *rows;    /* local mode: the table; cached mode: the cache */
    ss__emb_client *client; /* remote and cached modes */
    pthread_mutex_t lock;   /* push queue, fetch list, stop */
    /* One condition per kind of waiter: a broadcast on a shared one woke
     * the pusher, the fetcher and the syncer on every push and fetch (a
     * futex wake and two context switches each, several times a step),
     * which was most of what a cached table's threads cost beyond local. */
    pthread_cond_t push_ready;  /* the pusher: an item queued, or stop */
    pthread_cond_t fetch_ready; /* the fetcher: a fetch queued, or stop */
    pthread_cond_t progress;    /* callers: queue space, a fetch done, a push sent */
    push_item *queue;           /* ring of cfg.push_queue items */
    size_t qhead, qlen;
    bool pusher_busy, stop;
    size_t fetch_pushes;     /* remote: fetches carrying a push, not yet done */
    size_t warms_queued;     /* cached: ss_table_warm calls not yet done */
    uint64_t dropped;        /* remote: pushes lost since the last flush (under lock) */
    ss_status first_dropped; /* remote: the status of the first of them */
    ss_table_fetch *fetch_head, *fetch_tail;
    pthread_t pusher, fetcher;
    ss__ticker *sweeper; /* local and bounded: the bounds' sweep, once a second */
    ss__ticker *syncer;  /* cached: a row-sync pass every sync_interval_ms */
    bool has_pusher, has_fetcher;
    pthread_mutex_t sync_lock; /* one row-sync pass at a time */
    ss__emb_dirty dirty;       /* under sync_lock */
    atomic_uint_fast64_t lookups, unique_lookups, pushes, remote_rows, synced_rows, sync_passes,
        failed_calls, push_waits, warms_skipped, warmed_rows;
};

typedef struct unique_ids {
    uint64_t *ids; /* m distinct ids, in order of first appearance */
    size_t *map;   /* position i of the input -> index into ids */
    size_t m;
} unique_ids;

/* ids deduplicated (u->ids in order of first appearance, u->map from each
 * position to its index there); ss__table_unique_free frees them. */
ss_status ss__table_dedup(const uint64_t *ids, size_t n, unique_ids *u);
void ss__table_unique_free(unique_ids *u);
void ss__table_push_item_free(push_item *it);
/* rows of ids (n * dim): local, from the cache, or from the shards (a
 * remote table sends `push` first in the same call). */
ss_status ss__table_lookup_ids(ss_table *tb, const uint64_t *ids, size_t n, float *rows,
                               const push_item *push);

/* The public calls without their error bookkeeping (ss__err_begin/end),
 * for calls made of several (table_many.c). */
ss_status ss__table_lookup(ss_table *tb, const uint64_t *ids, size_t n, float *rows);
ss_status ss__table_push(ss_table *tb, const uint64_t *ids, size_t n, const float *grads);
ss_status ss__table_prefetch(ss_table *tb, const uint64_t *ids, size_t n, ss_table_fetch **out);
ss_status ss__table_push_prefetch(ss_table *tb, const uint64_t *push_ids, size_t pn,
                                  const float *grads, const uint64_t *ids, size_t n,
                                  ss_table_fetch **out);
ss_status ss__table_warm(ss_table *tb, const uint64_t *ids, size_t n);
ss_status ss__table_fetch_wait(ss_table_fetch *f, float *rows);

/* table_threads.c: the background threads (pthread mains, arg: the
 * table), the syncer's paced tick, and one row-sync pass of a cached
 * table (*synced: rows). */
void *ss__table_pusher_main(void *arg);
void *ss__table_fetcher_main(void *arg);
uint64_t ss__table_sync_tick(void *arg);
ss_status ss__table_sync_pass(ss_table *tb, size_t *synced);

#endif
