/* A client's bulk streams per shard (bulk_pool.h). */
#include "rpc/bulk/bulk_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/names.h"

#define POOL_IDLE 4 /* idle streams kept per shard (one per concurrent batch) */
#define MAX_LANES 4

struct ss__bulk_pool {
    ss__bulk_pool_config cfg;
    ss__rpc_channel *ch[SS_BULK_POOL_MAX_SHARDS];
    char host[SS_BULK_POOL_MAX_SHARDS][256];
    ss__bulk_tls *tls; /* NULL: plain */
    pthread_mutex_t lock;
    /* guarded by lock: */
    ss__bulk_stream *idle[SS_BULK_POOL_MAX_SHARDS][POOL_IDLE];
    uint32_t nidle[SS_BULK_POOL_MAX_SHARDS];
    bool no_bulk[SS_BULK_POOL_MAX_SHARDS];
    uint64_t epoch;
    _Atomic uint64_t batches;
};

ss_status ss__bulk_pool_create(const ss__bulk_pool_config *cfg, ss__bulk_pool **out, char *why,
                               size_t whylen) {
    if (!cfg || !cfg->targets || !cfg->channels || !cfg->ticket || !out || cfg->shards == 0 ||
        cfg->shards > SS_BULK_POOL_MAX_SHARDS)
        return SS_ERR_INVALID_ARGUMENT;
    ss__bulk_pool *p = calloc(1, sizeof *p);
    char *list = strdup(cfg->targets), *save = NULL;
    if (!p || !list) {
        free(p);
        free(list);
        return SS_ERR_NO_MEMORY;
    }
    p->cfg = *cfg;
    p->epoch = cfg->epoch;
    pthread_mutex_init(&p->lock, NULL);
    uint32_t s = 0;
    for (char *tok = strtok_r(list, ",", &save); tok && s < cfg->shards;
         tok = strtok_r(NULL, ",", &save), s++) {
        unsigned port;
        p->ch[s] = cfg->channels[s];
        if (!ss__address_split(tok, p->host[s], sizeof p->host[s], &port))
            break;
    }
    free(list);
    ss_status st = SS_OK;
    if (s != cfg->shards) {
        if (why && whylen)
            snprintf(why, whylen,
                     "bulk streams: a target is not host:port, or fewer targets than shards");
        st = SS_ERR_INVALID_ARGUMENT;
    } else {
        st = ss__bulk_tls_create(cfg->tls, false, &p->tls, why, whylen); /* NULL: plain */
    }
    if (st != SS_OK) {
        ss__bulk_pool_destroy(p);
        return st;
    }
    p->cfg.targets = NULL; /* the caller's string: not kept */
    *out = p;
    return SS_OK;
}

void ss__bulk_pool_destroy(ss__bulk_pool *p) {
    if (!p)
        return;
    for (uint32_t s = 0; s < p->cfg.shards; s++)
        for (uint32_t k = 0; k < p->nidle[s]; k++)
            ss__bulk_stream_close(p->idle[s][k]);
    ss__bulk_tls_destroy(p->tls);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

void ss__bulk_pool_set_epoch(ss__bulk_pool *p, uint64_t epoch) {
    if (!p)
        return;
    ss__bulk_stream *old[SS_BULK_POOL_MAX_SHARDS * POOL_IDLE];
    size_t n = 0;
    pthread_mutex_lock(&p->lock);
    p->epoch = epoch;
    for (uint32_t s = 0; s < p->cfg.shards; s++) {
        for (uint32_t k = 0; k < p->nidle[s]; k++)
            old[n++] = p->idle[s][k];
        p->nidle[s] = 0;
    }
    pthread_mutex_unlock(&p->lock);
    for (size_t i = 0; i < n; i++)
        ss__bulk_stream_close(old[i]);
}

uint64_t ss__bulk_pool_batches(const ss__bulk_pool *p) {
    return p ? atomic_load_explicit(&p->batches, memory_order_relaxed) : 0;
}

/* A new stream to shard s: a ticket over its channel for epoch, then a
 * connection. NULL when it has none (said once: its PS has no bulk port
 * from now on) or the stream could not be opened (said each time). */
static ss__bulk_stream *open_stream(ss__bulk_pool *p, uint32_t s, uint64_t epoch) {
    uint8_t ticket[SS_BULK_TICKET_BYTES];
    uint32_t port = 0;
    char why[300] = "";
    ss__bulk_stream *b = NULL;
    ss_status st = p->cfg.ticket(p->ch[s], epoch, p->cfg.ticket_timeout_ms, ticket, &port);
    if (st != SS_OK)
        snprintf(why, sizeof why, "the ticket call over gRPC failed");
    else if (port == 0 || port >= 65536)
        st = SS_ERR_PARSE;
    if (st == SS_OK)
        st = ss__bulk_stream_open(p->host[s], port, p->tls, ticket, p->cfg.stream_timeout_ms,
                                  p->cfg.max_reply, &b, why, sizeof why);
    /* No bulk port there, or no ticket for this caller (a read-only
     * certificate: the stream carries writes): gRPC from now on. */
    if (st == SS_ERR_NOT_FOUND || st == SS_ERR_PARSE || st == SS_ERR_PERMISSION) {
        pthread_mutex_lock(&p->lock);
        p->no_bulk[s] = true;
        pthread_mutex_unlock(&p->lock);
        ss__log(SS_LOG_INFO, p->cfg.component,
                "event=bulk_off shard=%u host=%s reason=%s status=%s", s, p->host[s],
                st == SS_ERR_PERMISSION ? "not_a_writer" : "no_bulk_port", ss_status_name(st));
    } else if (st != SS_OK) {
        ss__log(SS_LOG_WARN, p->cfg.component,
                "event=bulk_open_failed shard=%u host=%s status=%s why=\"%s\"", s, p->host[s],
                ss_status_name(st), why);
    }
    return st == SS_OK ? b : NULL;
}

/* An idle stream to shard s, or a new one; *epoch: the stream's. */
static ss__bulk_stream *take_stream(ss__bulk_pool *p, uint32_t s, uint64_t *epoch) {
    pthread_mutex_lock(&p->lock);
    ss__bulk_stream *b = p->nidle[s] ? p->idle[s][--p->nidle[s]] : NULL;
    const bool off = p->no_bulk[s];
    *epoch = p->epoch;
    pthread_mutex_unlock(&p->lock);
    return b || off ? b : open_stream(p, s, *epoch);
}

/* A stream of epoch back to the idle ones of shard s (closed when broken,
 * when the channels route by another epoch now, or when there are
 * enough). */
static void put_stream(ss__bulk_pool *p, uint32_t s, ss__bulk_stream *b, uint64_t epoch,
                       bool broken) {
    pthread_mutex_lock(&p->lock);
    if (!broken && epoch == p->epoch && p->nidle[s] < POOL_IDLE) {
        p->idle[s][p->nidle[s]++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&p->lock);
    ss__bulk_stream_close(b);
}

typedef struct lane {
    ss__bulk_pool *p;
    uint32_t method, shard;
    ss__rpc_request *rq;
    size_t n;
    unsigned index, count;
    ss__bulk_stream *b;
    uint64_t epoch; /* b's */
    ss_status st;
} lane;

static void *run_lane(void *arg) {
    lane *l = arg;
    l->st =
        ss__bulk_call_many(l->b, l->method, l->rq, l->n, l->p->ch[l->shard], l->index, l->count);
    return NULL;
}

/* Up to `lanes` streams per shard the batch uses (one per call at most),
 * into ls; false when a shard has no stream (the streams taken are in
 * ls[0 .. *k)). */
static bool take_lanes(ss__bulk_pool *p, uint32_t method, ss__rpc_request *rq, size_t n,
                       unsigned lanes, lane *ls, size_t *k) {
    *k = 0;
    for (uint32_t s = 0; s < p->cfg.shards; s++) {
        size_t calls = 0;
        for (size_t i = 0; i < n; i++)
            calls += rq[i].ch == p->ch[s];
        const unsigned count = calls < lanes ? (unsigned)calls : lanes;
        for (unsigned l = 0; l < count; l++) {
            ls[*k] = (lane){
                .p = p, .method = method, .shard = s, .rq = rq, .n = n, .index = l, .count = count};
            ls[*k].b = take_stream(p, s, &ls[*k].epoch);
            if (!ls[*k].b)
                return false;
            (*k)++;
        }
    }
    return true;
}

bool ss__bulk_pool_call(ss__bulk_pool *p, uint32_t method, ss__rpc_request *rq, size_t n,
                        unsigned lanes, ss_status *st) {
    lane ls[SS_BULK_POOL_MAX_SHARDS * MAX_LANES];
    pthread_t th[SS_BULK_POOL_MAX_SHARDS * MAX_LANES];
    bool started[SS_BULK_POOL_MAX_SHARDS * MAX_LANES] = {false};
    size_t k;
    lanes = lanes < 1 ? 1 : lanes > MAX_LANES ? MAX_LANES : lanes;
    const bool ok = take_lanes(p, method, rq, n, lanes, ls, &k);
    for (size_t j = 1; ok && j < k; j++)
        started[j] = pthread_create(&th[j], NULL, run_lane, &ls[j]) == 0;
    if (ok && k)
        run_lane(&ls[0]);
    *st = SS_OK;
    for (size_t j = 0; j < k; j++) {
        if (ok && j > 0) {
            if (started[j])
                pthread_join(th[j], NULL);
            else
                run_lane(&ls[j]);
        }
        if (ok && *st == SS_OK)
            *st = ls[j].st;
        /* a call that failed in transit broke its stream (another lane's
         * is closed too: a stream is cheap to open again) */
        bool broken = false;
        for (size_t i = 0; ok && i < n; i++)
            broken |= rq[i].ch == p->ch[ls[j].shard] && rq[i].status == SS_ERR_IO;
        put_stream(p, ls[j].shard, ls[j].b, ls[j].epoch, broken);
    }
    if (ok)
        atomic_fetch_add_explicit(&p->batches, 1, memory_order_relaxed);
    return ok;
}
