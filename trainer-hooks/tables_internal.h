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
/* Warm-ups waiting for a table's fetcher, at most: a warm-up is a hint,
 * and one that would queue behind this many is skipped rather than held. */
#define MAX_WARMS_QUEUED 4

typedef struct push_item {
    uint64_t *ids;
    float *grads;
    size_t n;
} push_item;

struct ss_table_fetch {
    ss_table *tb;
    /* A job of several tables (table_many.c: one Batch call for them) run
     * by tb's fetcher in place of a lookup: run(arg) gives the status;
     * detached: nobody waits, the fetcher frees the fetch and calls
     * release(arg) after. */
    ss_status (*run)(void *arg);
    void (*release)(void *arg);
    void *arg;
    bool detached;
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
    ss__ticker *syncer;  /* cached, standalone: a row-sync pass every sync_interval_ms */
    struct ss__table_syncer *shared_syncer; /* cached, a trainer's: its tables' one */
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
/* A push made ready to apply or send: checked (finite), its repeated ids'
 * gradients added up into one row each (out->n 0: nothing to push). */
ss_status ss__table_prepare_push(ss_table *tb, const uint64_t *ids, size_t n, const float *grads,
                                 push_item *out);
/* Queues a job (ss_table_fetch's run) on tb's fetcher; *out (NULL:
 * detached) gets the fetch to wait for. */
ss_status ss__table_queue_job(ss_table *tb, ss_status (*run)(void *arg), void (*release)(void *arg),
                              void *arg, ss_table_fetch **out);

/* Rows of ids a thread fetched ahead for tb (n of them, dim floats
 * each): while set, tb's cache loader takes a miss's row from here. */
typedef struct ss__table_preload {
    const ss_table *tb;
    const uint64_t *ids;
    size_t n;
    const float *rows;
} ss__table_preload;
void ss__table_set_preload(const ss__table_preload *p);

/* table_batch.c: the remote tables of a many-call in one Batch call per
 * shard. pick marks in[k] for the tables that can share one (remote, with
 * work, the same shards as the first) and returns how many; create makes
 * their job from the many-call's arguments (pushes prepared, lookups'
 * ids deduplicated; push_ids or ids NULL: none of that kind); run (a
 * fetcher's run, or the caller's) makes the call and settles each table's
 * counters and pushes; rows gives table k's looked-up rows. */
typedef struct ss__table_batch ss__table_batch;
size_t ss__table_batch_pick(ss_table *const *tables, size_t ntables, ss_table_mode mode,
                            const size_t *counts, const size_t *push_counts, bool *in);
/* The cached tables' (in[k]) rows of ids they do not hold, in one Batch
 * lookup, loaded into their caches (counted as warm-ups when warm). */
ss_status ss__table_batch_fill(ss_table *const *tables, size_t ntables, const bool *in,
                               const uint64_t *ids, const size_t *counts, bool warm);
ss_status ss__table_batch_create(ss_table *const *tables, size_t ntables, const bool *in,
                                 const uint64_t *push_ids, const size_t *push_counts,
                                 const float *grads, const uint64_t *ids, const size_t *counts,
                                 ss__table_batch **out, char *why, size_t whylen);
ss_status ss__table_batch_run(void *job);
void ss__table_batch_free(void *job);
bool ss__table_batch_has(const ss__table_batch *b, size_t k);
const char *ss__table_batch_why(const ss__table_batch *b);
void ss__table_batch_rows(const ss__table_batch *b, size_t k, float *out);

/* table_sync.c: one row-sync thread for a trainer's cached tables (the
 * trainer's shared object, ss__hooks_shared: make and destroy); add
 * starts it with the first table, remove waits for a pass under way. */
typedef struct ss__table_syncer ss__table_syncer;
void *ss__table_syncer_make(void);
void ss__table_syncer_destroy(void *obj);
ss_status ss__table_syncer_add(ss__table_syncer *s, ss_table *tb);
void ss__table_syncer_remove(ss__table_syncer *s, ss_table *tb);

/* table_threads.c: the background threads (pthread mains, arg: the
 * table), the syncer's paced tick, and one row-sync pass of a cached
 * table (*synced: rows). */
void *ss__table_pusher_main(void *arg);
void *ss__table_fetcher_main(void *arg);
uint64_t ss__table_sync_tick(void *arg);
ss_status ss__table_sync_pass(ss_table *tb, size_t *synced);

#endif
