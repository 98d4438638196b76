/* The PS's shard map, watched (map_watch.h). */
#include "ps/map_watch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/shard_map.h"
#include "common/ticker.h"

#define WATCH_PERIOD_NS 200000000ull

struct ss__ps_map_watch {
    char path[4096];
    _Atomic uint64_t epoch;
    pthread_rwlock_t gate;    /* the server's map_gate: written to change epoch and map */
    pthread_mutex_t map_lock; /* the map's copy (not the gate: a handler that holds
                                 the gate may read the map) */
    ss__shard_map map;        /* the map of epoch */
    uint64_t ignored;         /* the older epoch last logged, so it is said once */
    ss__gauge *epoch_gauge;
    ss__ticker *ticker;
    void (*on_change)(void *arg); /* under map_lock */
    void *on_change_arg;
};

static void reread(void *arg) {
    ss__ps_map_watch *w = arg;
    ss__shard_map m;
    char why[400];
    if (ss__shard_map_read(w->path, &m, why, sizeof why) != SS_OK) {
        SS_LOG_WARNF("ps", "event=shard_map_unreadable why=\"%s\" note=\"serving epoch %llu\"", why,
                     (unsigned long long)atomic_load(&w->epoch));
        return;
    }
    uint64_t now = atomic_load(&w->epoch);
    if (m.epoch > now && !ss__shard_map_newer(now, m.epoch)) {
        if (m.epoch != w->ignored)
            SS_LOG_ERRORF("ps",
                          "event=shard_map_refused path=%s epoch=%llu serving=%llu "
                          "note=\"more than 2^32 past the epoch served: not a next map\"",
                          w->path, (unsigned long long)m.epoch, (unsigned long long)now);
        w->ignored = m.epoch;
    } else if (m.epoch > now) {
        pthread_rwlock_wrlock(&w->gate); /* calls of the old epoch finish first */
        pthread_mutex_lock(&w->map_lock);
        w->map = m;
        atomic_store(&w->epoch, m.epoch);
        void (*on_change)(void *) = w->on_change;
        void *on_change_arg = w->on_change_arg;
        pthread_mutex_unlock(&w->map_lock);
        pthread_rwlock_unlock(&w->gate);
        if (on_change)
            on_change(on_change_arg);
        ss__gauge_set(w->epoch_gauge, (double)m.epoch);
        SS_LOG_INFOF("ps", "event=shard_map_epoch epoch=%llu was=%llu ps=%s",
                     (unsigned long long)m.epoch, (unsigned long long)now, m.ps);
    } else if (m.epoch < now && m.epoch != w->ignored) {
        w->ignored = m.epoch;
        SS_LOG_WARNF("ps",
                     "event=shard_map_older path=%s epoch=%llu serving=%llu "
                     "note=\"an epoch never goes back: ignored\"",
                     w->path, (unsigned long long)m.epoch, (unsigned long long)now);
    }
}

ss_status ss__ps_map_watch_start(const char *path, ss__metrics *metrics, ss__ps_map_watch **out,
                                 char *why, size_t whylen) {
    ss__shard_map m;
    ss_status st = ss__shard_map_read(path, &m, why, whylen);
    if (st != SS_OK)
        return st;
    ss__ps_map_watch *w = calloc(1, sizeof *w);
    if (!w)
        return SS_ERR_NO_MEMORY;
    snprintf(w->path, sizeof w->path, "%s", path);
    w->map = m;
    atomic_store(&w->epoch, m.epoch);
    pthread_rwlockattr_t attr; /* a map change is not starved by a stream of calls */
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&w->gate, &attr);
    pthread_mutex_init(&w->map_lock, NULL);
    pthread_rwlockattr_destroy(&attr);
    if ((st = ss__metrics_gauge(metrics, "shadowsync_shard_map_epoch",
                                "The shard map epoch this PS serves (--shard-map).", NULL,
                                &w->epoch_gauge)) == SS_OK) {
        ss__gauge_set(w->epoch_gauge, (double)m.epoch);
        st = ss__ticker_start(WATCH_PERIOD_NS, reread, w, &w->ticker, NULL, 0);
    }
    if (st != SS_OK) {
        pthread_rwlock_destroy(&w->gate);
        pthread_mutex_destroy(&w->map_lock);
        free(w);
        return st;
    }
    *out = w;
    return SS_OK;
}

void ss__ps_map_watch_on_change(ss__ps_map_watch *w, void (*fn)(void *arg), void *arg) {
    if (!w)
        return;
    pthread_mutex_lock(&w->map_lock);
    w->on_change = fn;
    w->on_change_arg = arg;
    pthread_mutex_unlock(&w->map_lock);
}

const _Atomic uint64_t *ss__ps_map_watch_epoch(const ss__ps_map_watch *w) {
    return w ? &w->epoch : NULL;
}

pthread_rwlock_t *ss__ps_map_watch_gate(ss__ps_map_watch *w) {
    return w ? &w->gate : NULL;
}

void ss__ps_map_watch_get(ss__ps_map_watch *w, ss__shard_map *out) {
    pthread_mutex_lock(&w->map_lock);
    *out = w->map;
    pthread_mutex_unlock(&w->map_lock);
}

void ss__ps_map_watch_stop(ss__ps_map_watch *w) {
    if (!w)
        return;
    ss__ticker_stop(w->ticker);
    pthread_rwlock_destroy(&w->gate);
    pthread_mutex_destroy(&w->map_lock);
    free(w);
}
