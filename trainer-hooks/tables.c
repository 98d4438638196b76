/* Embedding tables of the trainer hooks: local, remote (EmbPS) and cached
 * (background row sync). See shadowsync.h for the contract. The public
 * calls, open and close are here; the background threads are in
 * table_threads.c, what both do with rows in table_rows.c
 * (tables_internal.h has what they share). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/finite.h"
#include "common/log.h"
#include "common/shard_map.h"
#include "embedding-store/emb_table.h"
#include "rpc/dense/grpc_transport.h"
#include "rpc/emb/emb_client.h"
#include "trainer-hooks/errors_internal.h"
#include "trainer-hooks/hooks_internal.h"
#include "trainer-hooks/settings_internal.h"
#include "trainer-hooks/tables_internal.h"

static ss_status table_flush(ss_table *tb);
static ss_status table_get_stats(ss_table *tb, ss_table_stats *out);

/* ---- loaders of the in-process table ---- */

/* A local table keeps what its own trainer reads (stored[] stays true):
 * only the trainer reads it. */
static ss_status init_loader(void *ctx, const uint64_t *ids, size_t n, float *rows, bool *stored) {
    ss_table *tb = ctx;
    if (tb->sweeper) /* bounded: a lookup does not keep a row; only a push does */
        memset(stored, 0, n * sizeof *stored);
    const size_t rf = ss__emb_row_floats(&tb->spec);
    const uint32_t tid = ss__emb_table_id(tb->spec.name);
    for (size_t i = 0; i < n; i++)
        ss__emb_row_init(tid, ids[i], tb->spec.init_scale, rows + i * rf, tb->spec.dim,
                         rf - tb->spec.dim);
    return SS_OK;
}

/* Rows this thread fetched ahead for a table (table_batch.c: the cached
 * tables' misses of a many-call, in one Batch lookup): its loader takes
 * them from here instead of calling the shards. */
static _Thread_local const ss__table_preload *t_preload;

void ss__table_set_preload(const ss__table_preload *p) {
    t_preload = p;
}

/* The preloaded row of id, searched from *from on (the loader asks for
 * the misses in the order the batch found them), or NULL. */
static const float *preloaded(const ss_table *tb, uint64_t id, size_t *from) {
    const ss__table_preload *p = t_preload;
    if (!p || p->tb != tb || !p->n)
        return NULL;
    for (size_t k = 0; k < p->n; k++) {
        const size_t at = (*from + k) % p->n;
        if (p->ids[at] == id) {
            *from = at + 1;
            return p->rows + at * tb->spec.dim;
        }
    }
    return NULL;
}

/* Rows of ids (n * dim) into data: those this thread preloaded for tb,
 * the rest from the shards; *fetched: how many came from them. */
static ss_status rows_of_misses(ss_table *tb, const uint64_t *ids, size_t n, float *data,
                                size_t *fetched) {
    const size_t dim = tb->spec.dim;
    *fetched = n;
    if (!t_preload || t_preload->tb != tb) /* the usual case: all from the shards */
        return ss__emb_client_lookup(tb->client, &tb->spec, ids, n, data);
    uint64_t *ask = malloc(n * sizeof *ask + 8);
    size_t *pos = malloc(n * sizeof *pos + 8);
    float *asked = malloc(n * dim * sizeof *asked + 4);
    ss_status st = ask && pos && asked ? SS_OK : SS_ERR_NO_MEMORY;
    size_t nask = 0, from = 0;
    for (size_t i = 0; st == SS_OK && i < n; i++) {
        const float *have = preloaded(tb, ids[i], &from);
        if (have) {
            memcpy(data + i * dim, have, dim * sizeof(float));
        } else {
            ask[nask] = ids[i];
            pos[nask++] = i;
        }
    }
    if (st == SS_OK && nask)
        st = ss__emb_client_lookup(tb->client, &tb->spec, ask, nask, asked);
    for (size_t k = 0; st == SS_OK && k < nask; k++)
        memcpy(data + pos[k] * dim, asked + k * dim, dim * sizeof(float));
    *fetched = nask;
    free(ask);
    free(pos);
    free(asked);
    return st;
}

/* Cache misses come from the shards (or from rows this thread fetched
 * ahead for them); optimizer state starts at zero. The cache keeps what
 * it fetched (stored[] stays true). */
static ss_status remote_loader(void *ctx, const uint64_t *ids, size_t n, float *rows,
                               bool *stored) {
    ss_table *tb = ctx;
    (void)stored;
    const size_t dim = tb->spec.dim, rf = ss__emb_row_floats(&tb->spec);
    float *data = malloc(n * dim * sizeof *data + 4);
    if (!data)
        return SS_ERR_NO_MEMORY;
    size_t fetched;
    ss_status st = rows_of_misses(tb, ids, n, data, &fetched);
    if (st == SS_OK) {
        atomic_fetch_add(&tb->remote_rows, fetched);
        for (size_t i = 0; i < n; i++) {
            memcpy(rows + i * rf, data + i * dim, dim * sizeof(float));
            for (size_t j = dim; j < rf; j++)
                rows[i * rf + j] = 0.0f;
        }
    } else if (st != SS_ERR_NO_MEMORY) {
        atomic_fetch_add(&tb->failed_calls, 1);
    }
    free(data);
    return st;
}

/* Says which setting is wrong and why. */
static ss_status check_config(ss_trainer *t, const ss_table_config *c, ss__emb_spec *spec,
                              ss__hooks_endpoint *ep, ss__shard_map *map) {
#define BAD(...) ss__err_set(SS_ERR_INVALID_ARGUMENT, __VA_ARGS__)
    static const char *const modes[] = {"local", "remote", "cached"};
    if ((unsigned)c->mode > SS_TABLE_CACHED)
        return BAD("table %s: emb: unknown mode %d (local|remote|cached)", c->name, (int)c->mode);
    if (ss__emb_spec_init(spec, c->name, c->dim) != SS_OK)
        return BAD("table \"%s\" dim %u: the name is 1-63 characters of [A-Za-z0-9_.-] and dim "
                   "in [1, %u]",
                   c->name ? c->name : "(null)", c->dim, (unsigned)SS_EMB_MAX_DIM);
    spec->optimizer = (ss__emb_optimizer)c->optimizer;
    spec->lr = c->lr;
    spec->eps = c->eps;
    spec->init_scale = c->init_scale;
    char why[200];
    if (ss__emb_spec_check(spec, why, sizeof why) != SS_OK)
        return BAD("table %s: %s", c->name, why);
    *ep = (ss__hooks_endpoint){.timeout_ms = 10000};
    if (t)
        ss__hooks_endpoint_of(t, ep);
    if (c->ps && *c->ps && c->shard_map && *c->shard_map)
        return BAD("table %s: emb_ps=\"%s\" and emb_shard_map=%s: pick one (the map lists the "
                   "shards)",
                   c->name, c->ps, c->shard_map);
    if (c->ps)
        *ep = (ss__hooks_endpoint){
            .ps = c->ps, .tls = ep->tls, .timeout_ms = ep->timeout_ms, .bulk = ep->bulk};
    if (c->shard_map && *c->shard_map && c->mode != SS_TABLE_LOCAL) {
        char why[400];
        ss_status st = ss__shard_map_read(c->shard_map, map, why, sizeof why);
        if (st != SS_OK)
            return ss__err_set(st, "table %s: emb_shard_map: %s", c->name, why);
        *ep = (ss__hooks_endpoint){.ps = map->ps,
                                   .tls = ep->tls,
                                   .timeout_ms = ep->timeout_ms,
                                   .epoch = map->epoch,
                                   .shard_map = c->shard_map,
                                   .bulk = ep->bulk};
    }
    if (c->mode != SS_TABLE_LOCAL && (!ep->ps || !*ep->ps))
        return BAD("table %s: emb=%s needs shards: set emb_ps (SHADOWSYNC_EMB_PS), "
                   "emb_shard_map or the trainer's ps",
                   c->name, modes[c->mode]);
    if (c->mode != SS_TABLE_LOCAL && (c->admit_count > 1 || c->ttl_s || c->max_live_rows))
        return BAD("table %s: emb_admit_count, emb_ttl_s and emb_max_live_rows bound local "
                   "tables; a %s table's rows live on the PS: give the PS its --emb-admit-count, "
                   "--emb-ttl-s and --emb-max-live-rows (a cached table is bounded by "
                   "emb_cache_rows)",
                   c->name, modes[c->mode]);
    if (c->mode == SS_TABLE_REMOTE && c->push_queue == 0)
        return BAD("table %s: emb_push_queue=0: a remote table queues at least 1 push", c->name);
    if (c->mode == SS_TABLE_CACHED && c->cache_rows == 0)
        return BAD("table %s: emb_cache_rows=0: a cached table keeps at least 1 row", c->name);
    if (c->mode == SS_TABLE_CACHED && !ss__alpha_valid(c->alpha))
        return BAD(
            "table %s: emb_alpha=%g: the elastic rate of the row sync must be in " SS_ALPHA_RANGE,
            c->name, (double)c->alpha);
    if (c->mode == SS_TABLE_CACHED && c->sync_interval_ms == 0)
        return BAD("table %s: emb_sync_ms=0: the row sync pauses at least 1 ms", c->name);
    ss__encoding enc;
    if (c->encoding && !ss__encoding_parse(c->encoding, &enc))
        return BAD("table %s: emb_encoding=\"%s\": unknown encoding (f32|fp16|bf16|int8)", c->name,
                   c->encoding);
    return SS_OK;
#undef BAD
}

static ss_status start_thread(pthread_t *th, bool *has, void *(*fn)(void *), ss_table *tb) {
    if (pthread_create(th, NULL, fn, tb) != 0)
        return SS_ERR_NO_MEMORY;
    *has = true;
    return SS_OK;
}

static ss_status table_finish(void *obj) {
    return table_flush(obj);
}

static void table_destroy(void *obj) {
    ss_table *tb = obj;
    if (!tb)
        return;
    ss__ticker_stop(tb->sweeper);
    ss__ticker_stop(tb->syncer); /* a pass under way ends first */
    if (tb->shared_syncer)
        ss__table_syncer_remove(tb->shared_syncer, tb);
    pthread_mutex_lock(&tb->lock);
    tb->stop = true;
    pthread_cond_broadcast(&tb->push_ready);
    pthread_cond_broadcast(&tb->fetch_ready);
    pthread_cond_broadcast(&tb->progress);
    pthread_mutex_unlock(&tb->lock);
    if (tb->has_pusher)
        pthread_join(tb->pusher, NULL); /* sends what is queued first */
    if (tb->has_fetcher)
        pthread_join(tb->fetcher, NULL);
    for (size_t k = 0; k < tb->qlen; k++)
        ss__table_push_item_free(&tb->queue[(tb->qhead + k) % tb->cfg.push_queue]);
    free(tb->queue);
    ss__emb_dirty_free(&tb->dirty);
    ss__emb_table_destroy(tb->rows);
    ss__emb_client_destroy(tb->client);
    pthread_cond_destroy(&tb->push_ready);
    pthread_cond_destroy(&tb->fetch_ready);
    pthread_cond_destroy(&tb->progress);
    pthread_mutex_destroy(&tb->lock);
    pthread_mutex_destroy(&tb->sync_lock);
    free(tb);
}

/* The table's counters as series of its trainer's registry. */
static void table_export_metrics(void *obj, ss__metrics *reg, const char *trainer) {
    ss_table *tb = obj;
    ss_table_stats s;
    table_get_stats(tb, &s);
    const char *labels[] = {"trainer", trainer, "table", tb->spec.name, NULL};
    const struct {
        const char *name, *help;
        uint64_t value;
    } counters[] = {
        {"shadowsync_table_lookups_total", "ids looked up (before deduplication)", s.lookups},
        {"shadowsync_table_pushes_total", "ids pushed (before deduplication)", s.pushes},
        {"shadowsync_table_remote_rows_total", "rows fetched from the shards", s.remote_rows},
        {"shadowsync_table_synced_rows_total", "cached: rows synced by elastic averaging",
         s.synced_rows},
        {"shadowsync_table_failed_calls_total", "remote calls that failed", s.failed_calls},
        {"shadowsync_table_evictions_total", "cached: rows evicted", s.evictions},
        {"shadowsync_table_warmed_rows_total", "cached: rows loaded ahead by ss_table_warm",
         atomic_load(&tb->warmed_rows)},
        {"shadowsync_table_warms_skipped_total",
         "cached: ss_table_warm calls skipped (too many already waiting)",
         atomic_load(&tb->warms_skipped)},
    };
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        ss__counter *c;
        if (ss__metrics_counter(reg, counters[i].name, counters[i].help, labels, &c) != SS_OK)
            continue;
        uint64_t seen = ss__counter_value(c);
        if (counters[i].value > seen)
            ss__counter_add(c, counters[i].value - seen);
    }
    ss__gauge *g;
    if (ss__metrics_gauge(reg, "shadowsync_table_resident_rows", "local/cached: rows in memory",
                          labels, &g) == SS_OK)
        ss__gauge_set(g, (double)s.resident_rows);
}

static void sweep_tick(void *arg) {
    ss_table *tb = arg;
    ss__emb_table_sweep(tb->rows, ss__unix_ms() / 1000, NULL, NULL);
}

/* A bounded local table: its bounds, and a sweep once a second. */
static ss_status start_bounds(ss_table *tb) {
    const ss__emb_bounds b = {.admit_count = tb->cfg.admit_count,
                              .ttl_s = tb->cfg.ttl_s,
                              .max_live_rows = tb->cfg.max_live_rows};
    ss_status st = ss__emb_table_set_bounds(tb->rows, &b, ss__unix_ms() / 1000);
    return st == SS_OK ? ss__ticker_start(1000000000ull, sweep_tick, tb, &tb->sweeper, NULL, 0)
                       : st;
}

static ss_status table_open(ss_trainer *t, const ss_table_config *in, ss_table **out) {
    ss__emb_spec spec;
    ss__hooks_endpoint ep;
    if (!out)
        return ss__err_set(SS_ERR_INVALID_ARGUMENT, "out: NULL");
    ss_table_config c;
    ss_status st = ss__table_config_read(in, &c);
    const ss_table_config *cfg = &c;
    ss__shard_map map; /* emb_shard_map's: ep.ps points into it */
    if (st != SS_OK || (st = check_config(t, cfg, &spec, &ep, &map)) != SS_OK)
        return st;
    ss_table *tb = calloc(1, sizeof *tb);
    if (!tb)
        return SS_ERR_NO_MEMORY;
    tb->cfg = *cfg;
    tb->spec = spec;
    tb->cfg.name = tb->spec.name;
    tb->cfg.encoding = NULL; /* the caller's string; parsed once here */
    tb->encoding = SS_ENC_F32;
    if (cfg->encoding)
        ss__encoding_parse(cfg->encoding, &tb->encoding); /* checked by check_config */
    pthread_mutex_init(&tb->lock, NULL);
    ss__cond_init_monotonic(&tb->push_ready);
    ss__cond_init_monotonic(&tb->fetch_ready);
    ss__cond_init_monotonic(&tb->progress);
    pthread_mutex_init(&tb->sync_lock, NULL);
    char why[200] = "";
    if (cfg->mode != SS_TABLE_LOCAL) {
        st = ss__emb_client_create(ep.ps, &ep.tls, ep.timeout_ms, &tb->client, why, sizeof why);
        if (st == SS_OK)
            ss__emb_client_set_epoch(tb->client, ep.epoch);
        if (st == SS_OK && ep.shard_map)
            st = ss__emb_client_follow_map(tb->client, ep.shard_map);
        if (st == SS_OK)
            st = ss__emb_client_use_bulk(tb->client, ep.bulk);
        if (st == SS_OK)
            st = ss__emb_client_open_table(tb->client, &spec, NULL, why, sizeof why);
        if (st != SS_OK) {
            ss__log(SS_LOG_ERROR, "emb", "event=open_failed table=%s status=%s %s", spec.name,
                    ss_status_name(st), why);
            ss__err_set(st, "table %s on emb_ps=%s: %s", spec.name, ep.ps,
                        why[0] ? why : ss_strerror(st));
        }
    }
    if (st == SS_OK && cfg->mode != SS_TABLE_REMOTE)
        st = ss__emb_table_create(&spec, cfg->mode == SS_TABLE_LOCAL ? init_loader : remote_loader,
                                  tb, &tb->rows, NULL, 0);
    if (st == SS_OK && cfg->mode == SS_TABLE_LOCAL)
        ss__emb_table_skip_dirty_queue(tb->rows); /* only the cached mode's sync collects them */
    if (st == SS_OK && cfg->mode == SS_TABLE_LOCAL &&
        (cfg->admit_count > 1 || cfg->ttl_s || cfg->max_live_rows))
        st = start_bounds(tb);
    /* The pusher and the fetcher start with the first push or fetch they
     * are given: a model's tables batched together (table_many.c) use the
     * first one's fetcher only, and most of them never start threads. */
    if (st == SS_OK && cfg->mode == SS_TABLE_REMOTE)
        st = (tb->queue = calloc(cfg->push_queue, sizeof *tb->queue)) ? SS_OK : SS_ERR_NO_MEMORY;
    if (st == SS_OK && cfg->mode == SS_TABLE_CACHED && t) { /* the trainer's row-sync thread */
        tb->shared_syncer = ss__hooks_shared(t, ss__table_syncer_make, ss__table_syncer_destroy);
        st = tb->shared_syncer ? SS_OK : SS_ERR_NO_MEMORY;
    } else if (st == SS_OK && cfg->mode == SS_TABLE_CACHED) {
        st = ss__ticker_start_paced((uint64_t)cfg->sync_interval_ms * 1000000ull,
                                    ss__table_sync_tick, tb, &tb->syncer, NULL, 0);
    }
    tb->owner = t;
    if (st == SS_OK && tb->shared_syncer)
        st = ss__table_syncer_add(tb->shared_syncer, tb);
    if (st == SS_OK && t)
        st = ss__hooks_attach(t, &(ss__hooks_attachment){.obj = tb,
                                                         .finish = table_finish,
                                                         .destroy = table_destroy,
                                                         .export_metrics = table_export_metrics});
    if (st != SS_OK) {
        table_destroy(tb);
        return st;
    }
    *out = tb;
    return SS_OK;
}

ss_status ss_table_open(ss_trainer *t, const ss_table_config *cfg, ss_table **out) {
    ss__err_begin();
    return ss__err_end(table_open(t, cfg, out));
}

ss_status ss__table_lookup(ss_table *tb, const uint64_t *ids, size_t n, float *rows) {
    if (!tb || (n && (!ids || !rows)))
        return SS_ERR_INVALID_ARGUMENT;
    return ss__table_lookup_ids(tb, ids, n, rows, NULL);
}

ss_status ss__table_prepare_push(ss_table *tb, const uint64_t *ids, size_t n, const float *grads,
                                 push_item *out) {
    *out = (push_item){0};
    if (n == 0)
        return SS_OK;
    const size_t dim = tb->spec.dim;
    const size_t bad = ss__first_non_finite(grads, n * dim);
    if (bad < n * dim)
        return ss__err_set(SS_ERR_NON_FINITE,
                           "table %s: the gradient of id %llu (row %zu of the push) holds "
                           "NaN or Inf; nothing was pushed",
                           tb->spec.name, (unsigned long long)ids[bad / dim], bad / dim);
    atomic_fetch_add(&tb->pushes, n);
    unique_ids u;
    ss_status st = ss__table_dedup(ids, n, &u);
    if (st != SS_OK)
        return st;
    float *g = calloc(u.m * dim + 1, sizeof *g);
    if (!g) {
        ss__table_unique_free(&u);
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
        it->n ? ss__emb_table_apply_gradients(tb->rows, it->ids, it->n, it->grads, NULL) : SS_OK;
    ss__table_push_item_free(it);
    return st;
}

ss_status ss__table_push(ss_table *tb, const uint64_t *ids, size_t n, const float *grads) {
    if (!tb || (n && (!ids || !grads)))
        return SS_ERR_INVALID_ARGUMENT;
    push_item it;
    ss_status st = ss__table_prepare_push(tb, ids, n, grads, &it);
    if (st != SS_OK || it.n == 0)
        return st;
    if (tb->cfg.mode != SS_TABLE_REMOTE)
        return apply_local(tb, &it);
    pthread_mutex_lock(&tb->lock);
    if (!tb->stop && !tb->has_pusher)
        st = start_thread(&tb->pusher, &tb->has_pusher, ss__table_pusher_main, tb);
    if (tb->qlen == tb->cfg.push_queue)
        atomic_fetch_add(&tb->push_waits, 1);
    while (st == SS_OK && !tb->stop && tb->qlen == tb->cfg.push_queue) /* back-pressure */
        pthread_cond_wait(&tb->progress, &tb->lock);
    if (st == SS_OK && tb->stop)
        st = SS_ERR_STOPPED;
    if (st == SS_OK) {
        tb->queue[(tb->qhead + tb->qlen) % tb->cfg.push_queue] = it;
        tb->qlen++;
        pthread_cond_signal(&tb->push_ready);
    }
    pthread_mutex_unlock(&tb->lock);
    if (st != SS_OK)
        ss__table_push_item_free(&it);
    return st;
}

/* Puts f at the end of the fetcher's list (fetches and warm-ups, taken in
 * order) and wakes it, started first if it was not yet; refused once the
 * table stops (its fetcher may be gone). Caller holds tb->lock. */
static ss_status append_fetch(ss_table *tb, ss_table_fetch *f) {
    ss_status st = tb->stop ? SS_ERR_STOPPED : SS_OK;
    if (st == SS_OK && !tb->has_fetcher)
        st = start_thread(&tb->fetcher, &tb->has_fetcher, ss__table_fetcher_main, tb);
    if (st != SS_OK)
        return st;
    if (tb->fetch_tail)
        tb->fetch_tail->next = f;
    else
        tb->fetch_head = f;
    tb->fetch_tail = f;
    pthread_cond_signal(&tb->fetch_ready);
    return SS_OK;
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
        ss__table_push_item_free(push);
        return SS_ERR_NO_MEMORY;
    }
    if (n)
        memcpy(f->ids, ids, n * sizeof *ids);
    f->push = *push;
    pthread_mutex_lock(&tb->lock);
    ss_status st = append_fetch(tb, f);
    if (st == SS_OK && f->push.n)
        tb->fetch_pushes++; /* ss_table_flush waits for it */
    pthread_mutex_unlock(&tb->lock);
    if (st != SS_OK) {
        ss__table_push_item_free(&f->push);
        free(f->ids);
        free(f->rows);
        free(f);
        return st;
    }
    *out = f;
    return SS_OK;
}

ss_status ss__table_queue_job(ss_table *tb, ss_status (*run)(void *arg), void (*release)(void *arg),
                              void *arg, ss_table_fetch **out) {
    ss_table_fetch *f = calloc(1, sizeof *f);
    if (!f)
        return SS_ERR_NO_MEMORY;
    *f = (ss_table_fetch){
        .tb = tb, .run = run, .release = release, .arg = arg, .detached = out == NULL};
    pthread_mutex_lock(&tb->lock);
    ss_status st = append_fetch(tb, f);
    pthread_mutex_unlock(&tb->lock);
    if (st != SS_OK) {
        free(f);
        return st;
    }
    if (out)
        *out = f;
    return SS_OK;
}

ss_status ss__table_prefetch(ss_table *tb, const uint64_t *ids, size_t n, ss_table_fetch **out) {
    if (!tb || !out || (n && !ids))
        return SS_ERR_INVALID_ARGUMENT;
    return queue_fetch(tb, ids, n, &(push_item){0}, out);
}

ss_status ss__table_push_prefetch(ss_table *tb, const uint64_t *push_ids, size_t pn,
                                  const float *grads, const uint64_t *ids, size_t n,
                                  ss_table_fetch **out) {
    if (!tb || !out || (pn && (!push_ids || !grads)) || (n && !ids))
        return SS_ERR_INVALID_ARGUMENT;
    push_item it;
    ss_status st = ss__table_prepare_push(tb, push_ids, pn, grads, &it);
    if (st != SS_OK)
        return st;
    if (tb->cfg.mode != SS_TABLE_REMOTE && (st = apply_local(tb, &it)) != SS_OK)
        return st;
    return queue_fetch(tb, ids, n, &it, out);
}

ss_status ss__table_warm(ss_table *tb, const uint64_t *ids, size_t n) {
    if (!tb || (n && !ids))
        return SS_ERR_INVALID_ARGUMENT;
    if (tb->cfg.mode != SS_TABLE_CACHED || n == 0)
        return SS_OK; /* local rows are made on the spot; remote tables keep no rows */
    ss_table_fetch *f = calloc(1, sizeof *f);
    uint64_t *copy = malloc(n * sizeof *copy);
    if (!f || !copy) {
        free(f);
        free(copy);
        return SS_ERR_NO_MEMORY;
    }
    memcpy(copy, ids, n * sizeof *ids);
    *f = (ss_table_fetch){.tb = tb, .ids = copy, .n = n, .warm = true};
    ss_status st = SS_OK;
    pthread_mutex_lock(&tb->lock);
    if (tb->stop) {
        st = SS_ERR_STOPPED;
    } else if (tb->warms_queued >= MAX_WARMS_QUEUED) {
        atomic_fetch_add(&tb->warms_skipped, 1);
    } else if ((st = append_fetch(tb, f)) == SS_OK) {
        tb->warms_queued++;
        f = NULL;
    }
    pthread_mutex_unlock(&tb->lock);
    if (f) {
        free(f->ids);
        free(f);
    }
    return st;
}

ss_status ss__table_fetch_wait(ss_table_fetch *f, float *rows) {
    if (!f)
        return SS_ERR_INVALID_ARGUMENT;
    ss_table *tb = f->tb;
    pthread_mutex_lock(&tb->lock);
    while (!f->done)
        pthread_cond_wait(&tb->progress, &tb->lock);
    pthread_mutex_unlock(&tb->lock);
    ss_status st = f->st;
    if (st == SS_OK && rows)
        memcpy(rows, f->rows, f->n * tb->spec.dim * sizeof(float));
    free(f->ids);
    free(f->rows);
    ss__table_push_item_free(&f->push);
    free(f);
    return st;
}

static ss_status table_flush(ss_table *tb) {
    if (!tb)
        return SS_ERR_INVALID_ARGUMENT;
    if (tb->cfg.mode == SS_TABLE_REMOTE) {
        pthread_mutex_lock(&tb->lock);
        while (tb->qlen || tb->pusher_busy || tb->fetch_pushes)
            pthread_cond_wait(&tb->progress, &tb->lock);
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
        st = ss__table_sync_pass(tb, &synced);
        if (st != SS_OK || synced == 0)
            break;
    }
    return st;
}

static ss_status table_get_stats(ss_table *tb, ss_table_stats *out) {
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
        /* Rows loaded by warm-ups are hits of the lookups that follow. */
        uint64_t warmed = atomic_load(&tb->warmed_rows);
        uint64_t missed = out->remote_rows > warmed ? out->remote_rows - warmed : 0;
        if (tb->cfg.mode == SS_TABLE_CACHED)
            out->cache_hits = uniq > missed ? uniq - missed : 0;
    }
    return SS_OK;
}

static ss_status table_close(ss_table *tb) {
    if (!tb)
        return SS_ERR_INVALID_ARGUMENT;
    if (tb->owner)
        return ss__err_set(SS_ERR_STATE,
                           "table %s belongs to a trainer: its ss_trainer_close() closes it",
                           tb->spec.name);
    ss_status st = table_flush(tb);
    table_destroy(tb);
    return st;
}

/* ---- the public calls: each says why it failed (ss_last_error) ---- */

ss_status ss_table_lookup(ss_table *tb, const uint64_t *ids, size_t n, float *rows) {
    ss__err_begin();
    return ss__err_end(ss__table_lookup(tb, ids, n, rows));
}

ss_status ss_table_push(ss_table *tb, const uint64_t *ids, size_t n, const float *grads) {
    ss__err_begin();
    return ss__err_end(ss__table_push(tb, ids, n, grads));
}

ss_status ss_table_prefetch(ss_table *tb, const uint64_t *ids, size_t n, ss_table_fetch **out) {
    ss__err_begin();
    return ss__err_end(ss__table_prefetch(tb, ids, n, out));
}

ss_status ss_table_push_prefetch(ss_table *tb, const uint64_t *push_ids, size_t pn,
                                 const float *grads, const uint64_t *ids, size_t n,
                                 ss_table_fetch **out) {
    ss__err_begin();
    return ss__err_end(ss__table_push_prefetch(tb, push_ids, pn, grads, ids, n, out));
}

ss_status ss_table_warm(ss_table *tb, const uint64_t *ids, size_t n) {
    ss__err_begin();
    return ss__err_end(ss__table_warm(tb, ids, n));
}

ss_status ss_table_fetch_wait(ss_table_fetch *f, float *rows) {
    ss__err_begin();
    return ss__err_end(ss__table_fetch_wait(f, rows));
}

ss_status ss_table_flush(ss_table *tb) {
    ss__err_begin();
    return ss__err_end(table_flush(tb));
}

ss_status ss_table_get_stats(ss_table *tb, ss_table_stats *out) {
    ss__err_begin();
    return ss__err_end(table_get_stats(tb, out));
}

ss_status ss_table_close(ss_table *tb) {
    ss__err_begin();
    return ss__err_end(table_close(tb));
}
