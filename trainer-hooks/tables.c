/* Embedding tables of the trainer hooks: local, remote (EmbPS) and cached
 * (background row sync). See shadowsync.h for the contract. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "embedding-store/emb_table.h"
#include "rpc/emb_client.h"
#include "trainer-hooks/hooks_internal.h"

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
    ss_table_fetch *next;
};

struct ss_table {
    ss_table_config cfg;
    ss_trainer *owner; /* NULL: a standalone table (ss_table_close) */
    ss__emb_spec spec;
    ss__emb_table *rows;    /* local mode: the table; cached mode: the cache */
    ss__emb_client *client; /* remote and cached modes */
    pthread_mutex_t lock;   /* push queue, fetch list, stop */
    pthread_cond_t changed; /* any of them changed */
    push_item *queue;       /* ring of cfg.push_queue items */
    size_t qhead, qlen;
    bool pusher_busy, stop;
    size_t fetch_pushes;     /* remote: fetches carrying a push, not yet done */
    uint64_t dropped;        /* remote: pushes lost since the last flush (under lock) */
    ss_status first_dropped; /* remote: the status of the first of them */
    ss_table_fetch *fetch_head, *fetch_tail;
    pthread_t pusher, fetcher, syncer;
    bool has_pusher, has_fetcher, has_syncer;
    pthread_mutex_t sync_lock; /* one row-sync pass at a time */
    ss__emb_dirty dirty;       /* under sync_lock */
    atomic_uint_fast64_t lookups, unique_lookups, pushes, remote_rows, synced_rows, sync_passes,
        failed_calls, push_waits;
};

void ss_table_config_init(ss_table_config *cfg, const char *name, uint32_t dim) {
    memset(cfg, 0, sizeof *cfg);
    cfg->name = name;
    cfg->dim = dim;
    cfg->mode = SS_TABLE_LOCAL;
    cfg->optimizer = SS_TABLE_SGD;
    cfg->lr = 0.05f;
    cfg->eps = 1e-8f;
    cfg->init_scale = 0.01f;
    cfg->push_queue = 16;
    cfg->cache_rows = 1u << 20;
    cfg->alpha = 0.5f;
    cfg->sync_interval_ms = 10;
}

/* ---- ids: deduplication ---- */

typedef struct unique_ids {
    uint64_t *ids; /* m distinct ids, in order of first appearance */
    size_t *map;   /* position i of the input -> index into ids */
    size_t m;
} unique_ids;

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    return x ^ (x >> 33);
}

static ss_status dedup(const uint64_t *ids, size_t n, unique_ids *u) {
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    size_t *slot = malloc(cap * sizeof *slot); /* index into u->ids, or SIZE_MAX */
    u->ids = malloc(n * sizeof *u->ids + 8);
    u->map = malloc(n * sizeof *u->map + 8);
    u->m = 0;
    if (!slot || !u->ids || !u->map) {
        free(slot);
        free(u->ids);
        free(u->map);
        return SS_ERR_NO_MEMORY;
    }
    memset(slot, 0xff, cap * sizeof *slot);
    for (size_t i = 0; i < n; i++) {
        size_t h = (size_t)mix(ids[i]) & (cap - 1);
        while (slot[h] != SIZE_MAX && u->ids[slot[h]] != ids[i])
            h = (h + 1) & (cap - 1);
        if (slot[h] == SIZE_MAX) {
            slot[h] = u->m;
            u->ids[u->m++] = ids[i];
        }
        u->map[i] = slot[h];
    }
    free(slot);
    return SS_OK;
}

static void unique_free(unique_ids *u) {
    free(u->ids);
    free(u->map);
}

/* ---- loaders of the in-process table ---- */

static ss_status init_loader(void *ctx, const uint64_t *ids, size_t n, float *rows) {
    ss_table *tb = ctx;
    const size_t rf = ss__emb_row_floats(&tb->spec);
    const uint32_t tid = ss__emb_table_id(tb->spec.name);
    for (size_t i = 0; i < n; i++)
        ss__emb_row_init(tid, ids[i], tb->spec.init_scale, rows + i * rf, tb->spec.dim,
                         rf - tb->spec.dim);
    return SS_OK;
}

/* Cache misses come from the shards; optimizer state starts at zero. */
static ss_status remote_loader(void *ctx, const uint64_t *ids, size_t n, float *rows) {
    ss_table *tb = ctx;
    const size_t dim = tb->spec.dim, rf = ss__emb_row_floats(&tb->spec);
    float *data = malloc(n * dim * sizeof *data + 4);
    if (!data)
        return SS_ERR_NO_MEMORY;
    ss_status st = ss__emb_client_lookup(tb->client, &tb->spec, ids, n, data);
    if (st == SS_OK) {
        atomic_fetch_add(&tb->remote_rows, n);
        for (size_t i = 0; i < n; i++) {
            memcpy(rows + i * rf, data + i * dim, dim * sizeof(float));
            for (size_t j = dim; j < rf; j++)
                rows[i * rf + j] = 0.0f;
        }
    } else {
        atomic_fetch_add(&tb->failed_calls, 1);
    }
    free(data);
    return st;
}

static void push_item_free(push_item *it) {
    free(it->ids);
    free(it->grads);
    *it = (push_item){0};
}

/* ---- background threads ---- */

/* A remote push that failed: counted, and logged once per 100. */
static void log_dropped(ss_table *tb, size_t n, ss_status st) {
    if (atomic_fetch_add(&tb->failed_calls, 1) % 100 == 0)
        ss__log(SS_LOG_WARN, "emb", "event=push_dropped table=%s rows=%zu status=%s", tb->spec.name,
                n, ss_status_name(st));
}

static ss_status lookup_ids(ss_table *tb, const uint64_t *ids, size_t n, float *rows,
                            const push_item *push);

static void *pusher_main(void *arg) {
    ss_table *tb = arg;
    pthread_mutex_lock(&tb->lock);
    for (;;) {
        while (!tb->stop && tb->qlen == 0)
            pthread_cond_wait(&tb->changed, &tb->lock);
        if (tb->qlen == 0)
            break; /* stopping with nothing left */
        push_item it = tb->queue[tb->qhead];
        tb->qhead = (tb->qhead + 1) % tb->cfg.push_queue;
        tb->qlen--;
        tb->pusher_busy = true;
        pthread_cond_broadcast(&tb->changed);
        pthread_mutex_unlock(&tb->lock);
        ss_status st = ss__emb_client_push(tb->client, &tb->spec, it.ids, it.n, it.grads);
        if (st != SS_OK)
            log_dropped(tb, it.n, st);
        push_item_free(&it);
        pthread_mutex_lock(&tb->lock);
        if (st != SS_OK && tb->dropped++ == 0)
            tb->first_dropped = st; /* the next flush reports it */
        tb->pusher_busy = false;
        pthread_cond_broadcast(&tb->changed);
    }
    pthread_mutex_unlock(&tb->lock);
    return NULL;
}

static void *fetcher_main(void *arg) {
    ss_table *tb = arg;
    pthread_mutex_lock(&tb->lock);
    for (;;) {
        while (!tb->stop && !tb->fetch_head)
            pthread_cond_wait(&tb->changed, &tb->lock);
        ss_table_fetch *f = tb->fetch_head;
        if (!f)
            break;
        tb->fetch_head = f->next;
        if (!tb->fetch_head)
            tb->fetch_tail = NULL;
        pthread_mutex_unlock(&tb->lock);
        ss_status pushed = SS_OK, st;
        if (tb->stop) { /* the push still goes out, as queued pushes do */
            st = SS_ERR_STOPPED;
            if (f->push.n)
                pushed = ss__emb_client_push(tb->client, &tb->spec, f->push.ids, f->push.n,
                                             f->push.grads);
        } else {
            st = pushed = lookup_ids(tb, f->ids, f->n, f->rows, f->push.n ? &f->push : NULL);
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
        pthread_cond_broadcast(&tb->changed);
    }
    pthread_mutex_unlock(&tb->lock);
    return NULL;
}

/* One pass of the cached mode's row sync: every row touched since its
 * last sync goes through S-EASGD with its shard (x -= alpha (x - c),
 * applied as a delta so updates made meanwhile are kept), then clean rows
 * beyond the capacity are evicted. Returns rows synced. */
static ss_status sync_pass(ss_table *tb, size_t *synced) {
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
        st = ss__emb_client_elastic(tb->client, &tb->spec, d->ids, d->n, x, tb->cfg.alpha, delta);
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

static void *syncer_main(void *arg) {
    ss_table *tb = arg;
    pthread_mutex_lock(&tb->lock);
    while (!tb->stop) {
        /* The pause is the whole interval: `changed` is also broadcast by
         * every push and fetch, and a pass on each of those (several per
         * training step) cost a cached table more CPU than the remote one. */
        struct timespec ts = ss__deadline_in((uint64_t)tb->cfg.sync_interval_ms * 1000000ull);
        while (!tb->stop && pthread_cond_timedwait(&tb->changed, &tb->lock, &ts) != ETIMEDOUT) {
        }
        if (tb->stop)
            break;
        pthread_mutex_unlock(&tb->lock);
        size_t synced;
        ss_status st = sync_pass(tb, &synced);
        if (st != SS_OK)
            ss__sleep_ns(100000000ull); /* shards away: retry, rows stay dirty */
        pthread_mutex_lock(&tb->lock);
    }
    pthread_mutex_unlock(&tb->lock);
    return NULL;
}

/* ---- the API ---- */

static ss_status check_config(ss_trainer *t, const ss_table_config *c, ss__emb_spec *spec,
                              ss__hooks_endpoint *ep) {
    if (!c || !c->name || (unsigned)c->mode > SS_TABLE_CACHED)
        return SS_ERR_INVALID_ARGUMENT;
    if (ss__emb_spec_init(spec, c->name, c->dim) != SS_OK && strlen(c->name) >= SS_EMB_NAME_MAX)
        return SS_ERR_INVALID_ARGUMENT;
    spec->optimizer = (ss__emb_optimizer)c->optimizer;
    spec->lr = c->lr;
    spec->eps = c->eps;
    spec->init_scale = c->init_scale;
    if (ss__emb_spec_check(spec, NULL, 0) != SS_OK)
        return SS_ERR_INVALID_ARGUMENT;
    *ep = (ss__hooks_endpoint){.timeout_ms = 10000};
    if (t)
        ss__hooks_endpoint_of(t, ep);
    if (c->ps)
        ep->ps = c->ps;
    if (c->mode != SS_TABLE_LOCAL && (!ep->ps || !*ep->ps))
        return SS_ERR_INVALID_ARGUMENT; /* remote and cached need shards */
    if (c->mode == SS_TABLE_REMOTE && c->push_queue == 0)
        return SS_ERR_INVALID_ARGUMENT;
    if (c->mode == SS_TABLE_CACHED &&
        (c->cache_rows == 0 || !(c->alpha > 0.0f && c->alpha <= 1.0f) || c->sync_interval_ms == 0))
        return SS_ERR_INVALID_ARGUMENT;
    return SS_OK;
}

static ss_status start_thread(pthread_t *th, bool *has, void *(*fn)(void *), ss_table *tb) {
    if (pthread_create(th, NULL, fn, tb) != 0)
        return SS_ERR_NO_MEMORY;
    *has = true;
    return SS_OK;
}

static ss_status table_finish(void *obj) {
    return ss_table_flush(obj);
}

static void table_destroy(void *obj) {
    ss_table *tb = obj;
    if (!tb)
        return;
    pthread_mutex_lock(&tb->lock);
    tb->stop = true;
    pthread_cond_broadcast(&tb->changed);
    pthread_mutex_unlock(&tb->lock);
    if (tb->has_pusher)
        pthread_join(tb->pusher, NULL); /* sends what is queued first */
    if (tb->has_fetcher)
        pthread_join(tb->fetcher, NULL);
    if (tb->has_syncer)
        pthread_join(tb->syncer, NULL);
    for (size_t k = 0; k < tb->qlen; k++)
        push_item_free(&tb->queue[(tb->qhead + k) % tb->cfg.push_queue]);
    free(tb->queue);
    ss__emb_dirty_free(&tb->dirty);
    ss__emb_table_destroy(tb->rows);
    ss__emb_client_destroy(tb->client);
    pthread_cond_destroy(&tb->changed);
    pthread_mutex_destroy(&tb->lock);
    pthread_mutex_destroy(&tb->sync_lock);
    free(tb);
}

ss_status ss_table_open(ss_trainer *t, const ss_table_config *cfg, ss_table **out) {
    ss__emb_spec spec;
    ss__hooks_endpoint ep;
    if (!out)
        return SS_ERR_INVALID_ARGUMENT;
    ss_status st = check_config(t, cfg, &spec, &ep);
    if (st != SS_OK)
        return st;
    ss_table *tb = calloc(1, sizeof *tb);
    if (!tb)
        return SS_ERR_NO_MEMORY;
    tb->cfg = *cfg;
    tb->spec = spec;
    tb->cfg.name = tb->spec.name;
    pthread_mutex_init(&tb->lock, NULL);
    ss__cond_init_monotonic(&tb->changed);
    pthread_mutex_init(&tb->sync_lock, NULL);
    char why[200] = "";
    if (cfg->mode != SS_TABLE_LOCAL) {
        st = ss__emb_client_create(ep.ps, &ep.tls, ep.timeout_ms, &tb->client);
        if (st == SS_OK)
            st = ss__emb_client_open_table(tb->client, &spec, NULL, why, sizeof why);
        if (st != SS_OK)
            ss__log(SS_LOG_ERROR, "emb", "event=open_failed table=%s status=%s %s", spec.name,
                    ss_status_name(st), why);
    }
    if (st == SS_OK && cfg->mode != SS_TABLE_REMOTE)
        st = ss__emb_table_create(&spec, cfg->mode == SS_TABLE_LOCAL ? init_loader : remote_loader,
                                  tb, &tb->rows);
    if (st == SS_OK && cfg->mode == SS_TABLE_REMOTE) {
        tb->queue = calloc(cfg->push_queue, sizeof *tb->queue);
        st = tb->queue ? start_thread(&tb->pusher, &tb->has_pusher, pusher_main, tb)
                       : SS_ERR_NO_MEMORY;
    }
    if (st == SS_OK)
        st = start_thread(&tb->fetcher, &tb->has_fetcher, fetcher_main, tb);
    if (st == SS_OK && cfg->mode == SS_TABLE_CACHED)
        st = start_thread(&tb->syncer, &tb->has_syncer, syncer_main, tb);
    tb->owner = t;
    if (st == SS_OK && t)
        st = ss__hooks_attach(t, &(ss__hooks_attachment){
                                     .obj = tb, .finish = table_finish, .destroy = table_destroy});
    if (st != SS_OK) {
        table_destroy(tb);
        return st;
    }
    *out = tb;
    return SS_OK;
}

/* push (remote only; NULL: none) goes to the shards in the same calls,
 * applied before the lookup. A failed call fails both. */
static ss_status lookup_unique(ss_table *tb, const unique_ids *u, float *rows,
                               const push_item *push) {
    atomic_fetch_add(&tb->unique_lookups, u->m);
    if (tb->cfg.mode == SS_TABLE_REMOTE) {
        ss_status st = push ? ss__emb_client_push_lookup(tb->client, &tb->spec, push->ids, push->n,
                                                         push->grads, u->ids, u->m, rows)
                            : ss__emb_client_lookup(tb->client, &tb->spec, u->ids, u->m, rows);
        if (st == SS_OK)
            atomic_fetch_add(&tb->remote_rows, u->m);
        else if (!push) /* a failed push_lookup is counted as a dropped push */
            atomic_fetch_add(&tb->failed_calls, 1);
        return st;
    }
    return ss__emb_table_lookup(tb->rows, u->ids, u->m, rows);
}

ss_status ss_table_lookup(ss_table *tb, const uint64_t *ids, size_t n, float *rows) {
    if (!tb || (n && (!ids || !rows)))
        return SS_ERR_INVALID_ARGUMENT;
    return lookup_ids(tb, ids, n, rows, NULL);
}

static ss_status lookup_ids(ss_table *tb, const uint64_t *ids, size_t n, float *rows,
                            const push_item *push) {
    if (n == 0)
        return push ? ss__emb_client_push(tb->client, &tb->spec, push->ids, push->n, push->grads)
                    : SS_OK;
    atomic_fetch_add(&tb->lookups, n);
    const size_t dim = tb->spec.dim;
    unique_ids u;
    ss_status st = dedup(ids, n, &u);
    if (st != SS_OK)
        return st;
    if (u.m == n) { /* no repeats: u.ids is ids in order, straight into the caller's rows */
        st = lookup_unique(tb, &u, rows, push);
    } else {
        float *ur = malloc(u.m * dim * sizeof *ur);
        st = ur ? lookup_unique(tb, &u, ur, push) : SS_ERR_NO_MEMORY;
        for (size_t i = 0; st == SS_OK && i < n; i++)
            memcpy(rows + i * dim, ur + u.map[i] * dim, dim * sizeof(float));
        free(ur);
    }
    unique_free(&u);
    return st;
}

/* A push made ready to apply or send: checked (finite), its repeated ids'
 * gradients added up into one row each (out->n 0: nothing to push). */
static ss_status prepare_push(ss_table *tb, const uint64_t *ids, size_t n, const float *grads,
                              push_item *out) {
    *out = (push_item){0};
    if (n == 0)
        return SS_OK;
    const size_t dim = tb->spec.dim;
    for (size_t i = 0; i < n * dim; i++)
        if (!isfinite(grads[i]))
            return SS_ERR_NON_FINITE;
    atomic_fetch_add(&tb->pushes, n);
    unique_ids u;
    ss_status st = dedup(ids, n, &u);
    if (st != SS_OK)
        return st;
    float *g = calloc(u.m * dim + 1, sizeof *g);
    if (!g) {
        unique_free(&u);
        return SS_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < dim; j++)
            g[u.map[i] * dim + j] += grads[i * dim + j];
    free(u.map);
    *out = (push_item){.ids = u.ids, .grads = g, .n = u.m};
    return SS_OK;
}

/* Local and cached tables apply a push at once; takes the item. */
static ss_status apply_local(ss_table *tb, push_item *it) {
    ss_status st =
        it->n ? ss__emb_table_apply_gradients(tb->rows, it->ids, it->n, it->grads) : SS_OK;
    push_item_free(it);
    return st;
}

ss_status ss_table_push(ss_table *tb, const uint64_t *ids, size_t n, const float *grads) {
    if (!tb || (n && (!ids || !grads)))
        return SS_ERR_INVALID_ARGUMENT;
    push_item it;
    ss_status st = prepare_push(tb, ids, n, grads, &it);
    if (st != SS_OK || it.n == 0)
        return st;
    if (tb->cfg.mode != SS_TABLE_REMOTE)
        return apply_local(tb, &it);
    pthread_mutex_lock(&tb->lock);
    if (tb->qlen == tb->cfg.push_queue)
        atomic_fetch_add(&tb->push_waits, 1);
    while (!tb->stop && tb->qlen == tb->cfg.push_queue) /* back-pressure */
        pthread_cond_wait(&tb->changed, &tb->lock);
    if (tb->stop) {
        st = SS_ERR_STOPPED;
    } else {
        tb->queue[(tb->qhead + tb->qlen) % tb->cfg.push_queue] = it;
        tb->qlen++;
        pthread_cond_broadcast(&tb->changed);
    }
    pthread_mutex_unlock(&tb->lock);
    if (st != SS_OK)
        push_item_free(&it);
    return st;
}

/* Queues a fetch of ids for the fetcher, with a push to send in the same
 * calls (remote; push->n 0: none). Takes the push item, also on error. */
static ss_status queue_fetch(ss_table *tb, const uint64_t *ids, size_t n, push_item *push,
                             ss_table_fetch **out) {
    ss_table_fetch *f = calloc(1, sizeof *f);
    if (f) {
        f->tb = tb;
        f->n = n;
        f->ids = malloc(n * sizeof *f->ids + 8);
        f->rows = malloc(n * tb->spec.dim * sizeof *f->rows + 4);
        if (!f->ids || !f->rows) {
            free(f->ids);
            free(f->rows);
            free(f);
            f = NULL;
        }
    }
    if (!f) {
        push_item_free(push);
        return SS_ERR_NO_MEMORY;
    }
    if (n)
        memcpy(f->ids, ids, n * sizeof *ids);
    f->push = *push;
    pthread_mutex_lock(&tb->lock);
    if (f->push.n)
        tb->fetch_pushes++; /* ss_table_flush waits for it */
    if (tb->fetch_tail)
        tb->fetch_tail->next = f;
    else
        tb->fetch_head = f;
    tb->fetch_tail = f;
    pthread_cond_broadcast(&tb->changed);
    pthread_mutex_unlock(&tb->lock);
    *out = f;
    return SS_OK;
}

ss_status ss_table_prefetch(ss_table *tb, const uint64_t *ids, size_t n, ss_table_fetch **out) {
    if (!tb || !out || (n && !ids))
        return SS_ERR_INVALID_ARGUMENT;
    return queue_fetch(tb, ids, n, &(push_item){0}, out);
}

ss_status ss_table_push_prefetch(ss_table *tb, const uint64_t *push_ids, size_t pn,
                                 const float *grads, const uint64_t *ids, size_t n,
                                 ss_table_fetch **out) {
    if (!tb || !out || (pn && (!push_ids || !grads)) || (n && !ids))
        return SS_ERR_INVALID_ARGUMENT;
    push_item it;
    ss_status st = prepare_push(tb, push_ids, pn, grads, &it);
    if (st != SS_OK)
        return st;
    if (tb->cfg.mode != SS_TABLE_REMOTE && (st = apply_local(tb, &it)) != SS_OK)
        return st;
    return queue_fetch(tb, ids, n, &it, out);
}

ss_status ss_table_fetch_wait(ss_table_fetch *f, float *rows) {
    if (!f)
        return SS_ERR_INVALID_ARGUMENT;
    ss_table *tb = f->tb;
    pthread_mutex_lock(&tb->lock);
    while (!f->done)
        pthread_cond_wait(&tb->changed, &tb->lock);
    pthread_mutex_unlock(&tb->lock);
    ss_status st = f->st;
    if (st == SS_OK && rows)
        memcpy(rows, f->rows, f->n * tb->spec.dim * sizeof(float));
    free(f->ids);
    free(f->rows);
    push_item_free(&f->push);
    free(f);
    return st;
}

ss_status ss_table_flush(ss_table *tb) {
    if (!tb)
        return SS_ERR_INVALID_ARGUMENT;
    if (tb->cfg.mode == SS_TABLE_REMOTE) {
        pthread_mutex_lock(&tb->lock);
        while (tb->qlen || tb->pusher_busy || tb->fetch_pushes)
            pthread_cond_wait(&tb->changed, &tb->lock);
        uint64_t dropped = tb->dropped;
        ss_status st = dropped ? tb->first_dropped : SS_OK;
        tb->dropped = 0;
        pthread_mutex_unlock(&tb->lock);
        if (dropped)
            ss__log(SS_LOG_ERROR, "emb",
                    "event=flush_incomplete table=%s dropped_pushes=%llu status=%s", tb->spec.name,
                    (unsigned long long)dropped, ss_status_name(st));
        return st;
    }
    if (tb->cfg.mode != SS_TABLE_CACHED)
        return SS_OK;
    ss_status st = SS_OK;
    for (int pass = 0; pass < 64; pass++) {
        size_t synced;
        st = sync_pass(tb, &synced);
        if (st != SS_OK || synced == 0)
            break;
    }
    return st;
}

ss_status ss_table_get_stats(ss_table *tb, ss_table_stats *out) {
    if (!tb || !out)
        return SS_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    out->lookups = atomic_load(&tb->lookups);
    out->pushes = atomic_load(&tb->pushes);
    out->remote_rows = atomic_load(&tb->remote_rows);
    out->synced_rows = atomic_load(&tb->synced_rows);
    out->sync_passes = atomic_load(&tb->sync_passes);
    out->failed_calls = atomic_load(&tb->failed_calls);
    out->push_waits = atomic_load(&tb->push_waits);
    if (tb->rows) {
        ss__emb_table_stats ts;
        ss__emb_table_get_stats(tb->rows, &ts);
        out->resident_rows = ts.resident_rows;
        out->evictions = ts.evictions;
        uint64_t uniq = atomic_load(&tb->unique_lookups);
        if (tb->cfg.mode == SS_TABLE_CACHED)
            out->cache_hits = uniq > out->remote_rows ? uniq - out->remote_rows : 0;
    }
    return SS_OK;
}

ss_status ss_table_close(ss_table *tb) {
    if (!tb)
        return SS_ERR_INVALID_ARGUMENT;
    if (tb->owner)
        return SS_ERR_STATE; /* its trainer closes it */
    ss_status st = ss_table_flush(tb);
    table_destroy(tb);
    return st;
}
