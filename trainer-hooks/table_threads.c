/* The embedding tables' background threads (tables_internal.h): the
 * pusher (a remote table's queued pushes), the fetcher (prefetches and
 * warm-ups) and the syncer (a cached table's elastic row sync). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "trainer-hooks/tables_internal.h"

/* A remote push that failed: counted, and logged once per 100. */
static void log_dropped(ss_table *tb, size_t n, ss_status st) {
    if (atomic_fetch_add(&tb->failed_calls, 1) % 100 == 0)
        ss__log(SS_LOG_WARN, "emb", "event=push_dropped table=%s rows=%zu status=%s", tb->spec.name,
                n, ss_status_name(st));
}

void *ss__table_pusher_main(void *arg) {
    ss_table *tb = arg;
    pthread_mutex_lock(&tb->lock);
    for (;;) {
        while (!tb->stop && tb->qlen == 0)
            pthread_cond_wait(&tb->push_ready, &tb->lock);
        if (tb->qlen == 0)
            break; /* stopping with nothing left */
        push_item it = tb->queue[tb->qhead];
        tb->qhead = (tb->qhead + 1) % tb->cfg.push_queue;
        tb->qlen--;
        tb->pusher_busy = true;
        pthread_cond_broadcast(&tb->progress); /* queue space */
        pthread_mutex_unlock(&tb->lock);
        ss_status st = ss__emb_client_push(tb->client, &tb->spec, it.ids, it.n, it.grads);
        if (st != SS_OK)
            log_dropped(tb, it.n, st);
        ss__table_push_item_free(&it);
        pthread_mutex_lock(&tb->lock);
        if (st != SS_OK && tb->dropped++ == 0)
            tb->first_dropped = st; /* the next flush reports it */
        tb->pusher_busy = false;
        pthread_cond_broadcast(&tb->progress);
    }
    pthread_mutex_unlock(&tb->lock);
    return NULL;
}

/* A warm-up: the ids' rows not in the cache come from the shards in one
 * call, ahead of the lookups that will want them. A failure costs nothing
 * but the call: those lookups load the rows themselves. Frees f. */
static void warm_rows(ss_table *tb, ss_table_fetch *f, bool stopping) {
    unique_ids u;
    if (!stopping && f->n && ss__table_dedup(f->ids, f->n, &u) == SS_OK) {
        size_t loaded = 0;
        if (ss__emb_table_load(tb->rows, u.ids, u.m, &loaded) == SS_OK)
            atomic_fetch_add(&tb->warmed_rows, loaded);
        else
            atomic_fetch_add(&tb->failed_calls, 1);
        ss__table_unique_free(&u);
    }
    free(f->ids);
    free(f);
}

void *ss__table_fetcher_main(void *arg) {
    ss_table *tb = arg;
    pthread_mutex_lock(&tb->lock);
    for (;;) {
        while (!tb->stop && !tb->fetch_head)
            pthread_cond_wait(&tb->fetch_ready, &tb->lock);
        ss_table_fetch *f = tb->fetch_head;
        if (!f)
            break;
        tb->fetch_head = f->next;
        if (!tb->fetch_head)
            tb->fetch_tail = NULL;
        const bool stopping = tb->stop; /* read under the lock */
        pthread_mutex_unlock(&tb->lock);
        if (f->warm) {
            warm_rows(tb, f, stopping);
            pthread_mutex_lock(&tb->lock);
            tb->warms_queued--;
            continue;
        }
        if (f->run) { /* a job of several tables: it goes out, stopping or not */
            ss_status st = f->run(f->arg);
            pthread_mutex_lock(&tb->lock);
            if (f->detached) {
                pthread_mutex_unlock(&tb->lock);
                f->release(f->arg);
                free(f);
                pthread_mutex_lock(&tb->lock);
                continue;
            }
            f->st = st;
            f->done = true;
            pthread_cond_broadcast(&tb->progress);
            continue;
        }
        ss_status pushed = SS_OK, st;
        if (stopping) { /* the push still goes out, as queued pushes do */
            st = SS_ERR_STOPPED;
            if (f->push.n)
                pushed = ss__emb_client_push(tb->client, &tb->spec, f->push.ids, f->push.n,
                                             f->push.grads);
        } else {
            st = pushed =
                ss__table_lookup_ids(tb, f->ids, f->n, f->rows, f->push.n ? &f->push : NULL);
        }
        if (f->push.n && pushed != SS_OK)
            log_dropped(tb, f->push.n, pushed);
        pthread_mutex_lock(&tb->lock);
        if (f->push.n) {
            if (pushed != SS_OK && tb->dropped++ == 0)
                tb->first_dropped = pushed;
            tb->fetch_pushes--;
        }
        f->st = st;
        f->done = true;
        pthread_cond_broadcast(&tb->progress);
    }
    pthread_mutex_unlock(&tb->lock);
    return NULL;
}

/* One pass of the cached mode's row sync: every row touched since its
 * last sync goes through S-EASGD with its shard (x -= alpha (x - c),
 * applied as a delta so updates made meanwhile are kept), then clean rows
 * beyond the capacity are evicted. Returns rows synced. */
ss_status ss__table_sync_pass(ss_table *tb, size_t *synced) {
    const size_t dim = tb->spec.dim, rf = ss__emb_row_floats(&tb->spec);
    ss_status st = SS_OK;
    *synced = 0;
    pthread_mutex_lock(&tb->sync_lock);
    ss__emb_dirty *d = &tb->dirty;
    for (;;) {
        if ((st = ss__emb_table_collect_dirty(tb->rows, d, SYNC_BATCH)) != SS_OK || d->n == 0)
            break;
        float *x = malloc(d->n * dim * sizeof *x), *delta = malloc(d->n * dim * sizeof *delta);
        if (!x || !delta) {
            free(x);
            free(delta);
            ss__emb_table_requeue(tb->rows, d);
            st = SS_ERR_NO_MEMORY;
            break;
        }
        for (size_t i = 0; i < d->n; i++)
            memcpy(x + i * dim, d->rows + i * rf, dim * sizeof(float));
        st = ss__emb_client_elastic(tb->client, &tb->spec, d->ids, d->n, x, tb->cfg.alpha,
                                    tb->encoding, delta);
        if (st == SS_OK) {
            ss__emb_table_settle(tb->rows, d, delta);
            *synced += d->n;
        } else {
            ss__emb_table_requeue(tb->rows, d);
            atomic_fetch_add(&tb->failed_calls, 1);
        }
        free(x);
        free(delta);
        if (st != SS_OK || d->n < SYNC_BATCH)
            break;
    }
    ss__emb_table_evict(tb->rows, tb->cfg.cache_rows);
    pthread_mutex_unlock(&tb->sync_lock);
    if (*synced) {
        atomic_fetch_add(&tb->synced_rows, *synced);
        atomic_fetch_add(&tb->sync_passes, 1);
    }
    return st;
}

/* A pass, then the whole interval's pause (a pass per push or fetch,
 * several per training step, cost a cached table more CPU than the
 * remote one); shards away: 100 ms more, and the rows stay dirty. */
uint64_t ss__table_sync_tick(void *arg) {
    ss_table *tb = arg;
    size_t synced;
    const uint64_t pause = (uint64_t)tb->cfg.sync_interval_ms * 1000000ull;
    return ss__table_sync_pass(tb, &synced) == SS_OK ? pause : pause + 100000000ull;
}

/* ---- the API ---- */
