/* Several tables' row calls in one call per shard (Embedding/Batch): a
 * model's features of a batch (a DLRM's 26 tables) cost one round trip,
 * where one call per table cost 26 of them, their gRPC work and the
 * shard's. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "rpc/emb/emb_client.h"
#include "rpc/emb/emb_client_internal.h"
#include "rpc/emb/emb_wire.h"
#include "rpc/emb/embedding.pb-c.h"
#include "rpc/rpc_pb.h"
#include "shadow/codec.h"

bool ss__emb_client_batches_with(ss__emb_client *c, ss__emb_client *other) {
    pthread_rwlock_rdlock(&c->lock);
    if (other != c) /* read locks: two callers in either order never wait on each other */
        pthread_rwlock_rdlock(&other->lock);
    const bool same = !*c->map && !*other->map && c->streams == other->streams &&
                      c->shards == other->shards && !strcmp(c->targets, other->targets);
    if (other != c)
        pthread_rwlock_unlock(&other->lock);
    pthread_rwlock_unlock(&c->lock);
    return same;
}

/* Positions of ids grouped by shard (a counting sort): shard s's are
 * pos[start[s] .. start[s + 1]). */
typedef struct routed {
    size_t *pos;
    size_t start[MAX_SHARDS + 1];
} routed;

static bool route(uint32_t shards, uint32_t tid, const uint64_t *ids, size_t n, routed *r) {
    memset(r->start, 0, sizeof r->start);
    r->pos = malloc(n * sizeof *r->pos + 1);
    uint32_t *shard = malloc(n * sizeof *shard + 1);
    if (!r->pos || !shard) {
        free(shard);
        return false;
    }
    size_t count[MAX_SHARDS + 1] = {0};
    for (size_t i = 0; i < n; i++)
        count[(shard[i] = ss__emb_shard_of(tid, ids[i], shards)) + 1]++;
    for (uint32_t s = 0; s < shards; s++)
        count[s + 1] += count[s];
    memcpy(r->start, count, sizeof r->start);
    for (size_t i = 0; i < n; i++)
        r->pos[count[shard[i]]++] = i;
    free(shard);
    return true;
}

static size_t on_shard(const routed *r, uint32_t s) {
    return r->start[s + 1] - r->start[s];
}

/* The ids (and, with floats, their rows of dim) at shard s's positions. */
static ProtobufCBinaryData gather(const routed *r, uint32_t s, const uint64_t *ids,
                                  const float *floats, size_t dim) {
    const size_t n = on_shard(r, s), *pos = r->pos + r->start[s];
    const size_t each = floats ? dim * sizeof(float) : sizeof(uint64_t);
    uint8_t *out = malloc(n * each + 1);
    for (size_t k = 0; out && k < n; k++)
        memcpy(out + k * each, floats ? (const void *)(floats + pos[k] * dim) : &ids[pos[k]], each);
    return (ProtobufCBinaryData){out ? n * each : 0, out};
}

/* An elastic part's call to shard s (its rows encoded as p->enc). */
static uint8_t *pack_elastic(const ss__emb_batch_part *p, const routed *look, uint32_t s,
                             ProtobufCBinaryData ids, size_t *len) {
    const size_t n = on_shard(look, s), dim = p->spec->dim, *pos = look->pos + look->start[s];
    const size_t row_bytes = ss__codec_size(p->enc, dim);
    uint8_t *rows = malloc(n * row_bytes + 1), *buf = NULL;
    for (size_t k = 0; rows && k < n; k++)
        ss__codec_encode(p->enc, p->x + pos[k] * dim, dim, rows + k * row_bytes);
    Shadowsync__V1__ElasticRequest m = SHADOWSYNC__V1__ELASTIC_REQUEST__INIT;
    m.table = (char *)p->spec->name;
    m.ids = ids;
    m.rows = (ProtobufCBinaryData){n * row_bytes, rows};
    m.alpha = p->alpha;
    m.encoding = (uint32_t)p->enc;
    if (rows && (buf = malloc((*len = shadowsync__v1__elastic_request__get_packed_size(&m)) + 1)))
        shadowsync__v1__elastic_request__pack(&m, buf);
    free(rows);
    return buf;
}

/* Part p's call to shard s, packed into call->request; false: no memory. */
static bool pack_part(const ss__emb_batch_part *p, const routed *look, const routed *push,
                      uint32_t s, Shadowsync__V1__BatchCall *call) {
    const size_t dim = p->spec->dim;
    ProtobufCBinaryData ids = gather(look, s, p->ids, NULL, dim),
                        pids = gather(push, s, p->push_ids, NULL, dim),
                        grads = gather(push, s, NULL, p->grads, dim);
    bool ok = ids.data && pids.data && grads.data;
    size_t len = 0;
    uint8_t *buf = NULL;
    if (ok && p->x) {
        call->method = SS_EMB_BATCH_ELASTIC;
        buf = pack_elastic(p, look, s, ids, &len);
    } else if (ok && on_shard(push, s) && on_shard(look, s)) {
        Shadowsync__V1__PushLookupRequest m = SHADOWSYNC__V1__PUSH_LOOKUP_REQUEST__INIT;
        m.table = (char *)p->spec->name;
        m.push_ids = pids;
        m.grads = grads;
        m.ids = ids;
        call->method = SS_EMB_BATCH_PUSH_LOOKUP;
        if ((buf = malloc((len = shadowsync__v1__push_lookup_request__get_packed_size(&m)) + 1)))
            shadowsync__v1__push_lookup_request__pack(&m, buf);
    } else if (ok && on_shard(push, s)) {
        Shadowsync__V1__PushRequest m = SHADOWSYNC__V1__PUSH_REQUEST__INIT;
        m.table = (char *)p->spec->name;
        m.ids = pids;
        m.grads = grads;
        call->method = SS_EMB_BATCH_PUSH;
        if ((buf = malloc((len = shadowsync__v1__push_request__get_packed_size(&m)) + 1)))
            shadowsync__v1__push_request__pack(&m, buf);
    } else if (ok) {
        Shadowsync__V1__LookupRequest m = SHADOWSYNC__V1__LOOKUP_REQUEST__INIT;
        m.table = (char *)p->spec->name;
        m.ids = ids;
        call->method = SS_EMB_BATCH_LOOKUP;
        if ((buf = malloc((len = shadowsync__v1__lookup_request__get_packed_size(&m)) + 1)))
            shadowsync__v1__lookup_request__pack(&m, buf);
    }
    free(ids.data);
    free(pids.data);
    free(grads.data);
    call->request = (ProtobufCBinaryData){len, buf};
    return buf != NULL;
}

/* The first failure of a part is what it says. */
static void part_failed(ss__emb_batch_part *p, ss_status st, const char *why) {
    if (p->status != SS_OK)
        return;
    p->status = st;
    snprintf(p->why, sizeof p->why, "%s", *why ? why : ss_strerror(st));
}

/* A part's reply from shard s: its rows (a lookup) or deltas (an
 * elastic sync, decoded and checked) to their positions. */
static void take_rows(ss__emb_batch_part *p, const routed *look, uint32_t s,
                      const ProtobufCBinaryData *reply) {
    const size_t n = on_shard(look, s), dim = p->spec->dim, *pos = look->pos + look->start[s];
    const ss__encoding enc = p->x ? p->enc : SS_ENC_F32;
    const size_t row_bytes = ss__codec_size(enc, dim);
    Shadowsync__V1__LookupReply *lr = NULL;
    Shadowsync__V1__ElasticReply *er = NULL;
    ProtobufCBinaryData b = {0, NULL};
    if (p->x && (er = shadowsync__v1__elastic_reply__unpack(NULL, reply->len, reply->data)))
        b = er->deltas;
    else if (!p->x && (lr = shadowsync__v1__lookup_reply__unpack(NULL, reply->len, reply->data)))
        b = lr->rows;
    if (b.len != n * row_bytes)
        part_failed(p, SS_ERR_PARSE, "a batch's reply of another size than asked");
    for (size_t k = 0; p->status == SS_OK && k < n; k++)
        if (ss__codec_decode(enc, b.data + k * row_bytes, row_bytes, dim, p->rows + pos[k] * dim) !=
            SS_OK)
            part_failed(p, SS_ERR_PARSE, "a batch's reply with a row that does not decode");
    if (lr)
        shadowsync__v1__lookup_reply__free_unpacked(lr, NULL);
    if (er)
        shadowsync__v1__elastic_reply__free_unpacked(er, NULL);
}

/* Shard s's reply: each of its calls' results to its part. order[k]: the
 * part of call k. */
static void take_reply(ss__emb_batch_part *parts, const routed *look, uint32_t s,
                       const size_t *order, size_t ncalls, const ss__rpc_request *rq) {
    if (rq->status != SS_OK) {
        for (size_t k = 0; k < ncalls; k++)
            part_failed(&parts[order[k]], rq->status, rq->msg);
        return;
    }
    Shadowsync__V1__BatchReply *r =
        shadowsync__v1__batch_reply__unpack(NULL, rq->resp_len, rq->resp);
    for (size_t k = 0; k < ncalls; k++) {
        ss__emb_batch_part *p = &parts[order[k]];
        const Shadowsync__V1__BatchResult *res = r && r->n_results == ncalls ? r->results[k] : NULL;
        if (!res)
            part_failed(p, SS_ERR_PARSE, "a batch reply that is not one result per call");
        else if (res->status != SS_OK)
            part_failed(p, res->status < SS_STATUS_COUNT_ ? (ss_status)res->status : SS_ERR_PARSE,
                        res->message ? res->message : "");
        else if (on_shard(&look[order[k]], s))
            take_rows(p, &look[order[k]], s, &res->reply);
    }
    if (r)
        shadowsync__v1__batch_reply__free_unpacked(r, NULL);
}

/* Shard s's request: every part with ids there, in part order (order[k]
 * gets call k's part). NULL req: no memory. */
static void pack_shard(const ss__emb_batch_part *parts, size_t nparts, const routed *look,
                       const routed *push, uint32_t s, size_t *order, size_t *ncalls,
                       ss__rpc_request *rq) {
    Shadowsync__V1__BatchCall *calls = calloc(nparts + 1, sizeof *calls);
    Shadowsync__V1__BatchCall **cp = calloc(nparts + 1, sizeof *cp);
    bool ok = calls && cp;
    size_t k = 0;
    for (size_t i = 0; ok && i < nparts; i++) {
        if (!on_shard(&look[i], s) && !on_shard(&push[i], s))
            continue;
        shadowsync__v1__batch_call__init(&calls[k]);
        ok = pack_part(&parts[i], &look[i], &push[i], s, &calls[k]);
        cp[k] = &calls[k];
        order[k++] = i;
    }
    Shadowsync__V1__BatchRequest m = SHADOWSYNC__V1__BATCH_REQUEST__INIT;
    m.n_calls = k;
    m.calls = cp;
    uint8_t *buf =
        ok ? malloc((rq->len = shadowsync__v1__batch_request__get_packed_size(&m)) + 1) : NULL;
    if (buf)
        shadowsync__v1__batch_request__pack(&m, buf);
    rq->req = buf;
    *ncalls = k;
    for (size_t j = 0; calls && j < k; j++)
        free(calls[j].request.data);
    free(calls);
    free(cp);
}

ss_status ss__emb_client_batch(ss__emb_client *c, ss__emb_batch_part *parts, size_t nparts) {
    for (size_t i = 0; i < nparts; i++) {
        parts[i].status = SS_OK;
        parts[i].why[0] = '\0';
        if (parts[i].n > SS_EMB_CLIENT_CHUNK || parts[i].pn > SS_EMB_CLIENT_CHUNK)
            return SS_ERR_TOO_LARGE;
    }
    routed *look = calloc(nparts + 1, sizeof *look), *push = calloc(nparts + 1, sizeof *push);
    size_t *order = calloc((size_t)MAX_SHARDS * (nparts + 1), sizeof *order);
    ss__rpc_request calls[MAX_SHARDS];
    size_t ncalls[MAX_SHARDS] = {0};
    uint32_t at[MAX_SHARDS];
    memset(calls, 0, sizeof calls);
    pthread_rwlock_rdlock(&c->lock);
    const uint32_t shards = c->shards;
    ss_status st = look && push && order ? SS_OK : SS_ERR_NO_MEMORY;
    for (size_t i = 0; st == SS_OK && i < nparts; i++) {
        const uint32_t tid = ss__emb_table_id(parts[i].spec->name);
        if (!route(shards, tid, parts[i].ids, parts[i].n, &look[i]) ||
            !route(shards, tid, parts[i].push_ids, parts[i].pn, &push[i]))
            st = SS_ERR_NO_MEMORY;
    }
    size_t j = 0; /* calls: one per shard with anything to do */
    for (uint32_t s = 0; st == SS_OK && s < shards; s++) {
        pack_shard(parts, nparts, look, push, s, order + (size_t)s * (nparts + 1), &ncalls[s],
                   &calls[j]);
        if (!calls[j].req)
            st = SS_ERR_NO_MEMORY;
        else if (ncalls[s]) {
            calls[j].ch = c->ch[s];
            calls[j].method = SS_EMB_M_BATCH;
            at[j++] = s;
        } else {
            free((void *)calls[j].req);
            calls[j].req = NULL;
        }
    }
    if (st == SS_OK && j)
        ss__rpc_call_many(calls, j, c->timeout_ms, true);
    for (size_t k = 0; st == SS_OK && k < j; k++)
        take_reply(parts, look, at[k], order + (size_t)at[k] * (nparts + 1), ncalls[at[k]],
                   &calls[k]);
    pthread_rwlock_unlock(&c->lock);
    for (size_t k = 0; k < MAX_SHARDS; k++) {
        free((void *)calls[k].req);
        free(calls[k].resp);
    }
    for (size_t i = 0; look && push && i < nparts; i++) {
        free(look[i].pos);
        free(push[i].pos);
        if (st == SS_OK && parts[i].status != SS_OK)
            st = parts[i].status;
    }
    free(look);
    free(push);
    free(order);
    return st;
}
