/* Sharded Embedding calls: split by shard, pack, call all at once,
 * scatter the replies back into the caller's order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "rpc/emb_client.h"
#include "rpc/proto/embedding.pb-c.h"

#define MAX_SHARDS 64

struct ss__emb_client {
    ss__rpc_channel *ch[MAX_SHARDS];
    uint32_t shards;
    uint32_t timeout_ms;
};

ss_status ss__emb_client_create(const char *targets, const ss__rpc_tls *tls, uint32_t timeout_ms,
                                ss__emb_client **out) {
    if (!targets || !*targets || !out)
        return SS_ERR_INVALID_ARGUMENT;
    ss__emb_client *c = calloc(1, sizeof *c);
    char *list = strdup(targets);
    if (!c || !list) {
        free(c);
        free(list);
        return SS_ERR_NO_MEMORY;
    }
    c->timeout_ms = timeout_ms ? timeout_ms : 10000;
    ss_status st = SS_OK;
    char *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok && st == SS_OK;
         tok = strtok_r(NULL, ",", &save)) {
        if (c->shards == MAX_SHARDS)
            st = SS_ERR_INVALID_ARGUMENT;
        else
            st = ss__rpc_channel_create(tok, 0, tls, &c->ch[c->shards++]);
    }
    free(list);
    if (st == SS_OK && c->shards == 0)
        st = SS_ERR_INVALID_ARGUMENT;
    if (st != SS_OK) {
        ss__emb_client_destroy(c);
        return st;
    }
    *out = c;
    return SS_OK;
}

void ss__emb_client_destroy(ss__emb_client *c) {
    if (!c)
        return;
    for (uint32_t s = 0; s < c->shards; s++)
        ss__rpc_channel_destroy(c->ch[s]);
    free(c);
}

ss_status ss__emb_client_open_table(ss__emb_client *c, const ss__emb_spec *spec,
                                    ss__emb_spec *stored, char *why, size_t whylen) {
    Shadowsync__V1__TableSpec ts = SHADOWSYNC__V1__TABLE_SPEC__INIT;
    ts.name = (char *)spec->name;
    ts.dim = spec->dim;
    ts.optimizer = (uint32_t)spec->optimizer;
    ts.lr = spec->lr;
    ts.eps = spec->eps;
    ts.init_scale = spec->init_scale;
    Shadowsync__V1__OpenTableRequest m = SHADOWSYNC__V1__OPEN_TABLE_REQUEST__INIT;
    m.spec = &ts;
    size_t len = shadowsync__v1__open_table_request__get_packed_size(&m);
    uint8_t *buf = malloc(len + 1);
    if (!buf)
        return SS_ERR_NO_MEMORY;
    shadowsync__v1__open_table_request__pack(&m, buf);
    ss__rpc_request calls[MAX_SHARDS];
    memset(calls, 0, sizeof calls);
    for (uint32_t s = 0; s < c->shards; s++)
        calls[s] = (ss__rpc_request){
            .ch = c->ch[s], .method = "/shadowsync.v1.Embedding/OpenTable", .req = buf, .len = len};
    ss_status st = ss__rpc_call_many(calls, c->shards, c->timeout_ms, true);
    for (uint32_t s = 0; s < c->shards; s++) {
        if (st != SS_OK && calls[s].status != SS_OK && why && whylen)
            snprintf(why, whylen, "shard %u: %s", s, calls[s].msg);
        if (st == SS_OK && s == 0 && stored) {
            Shadowsync__V1__OpenTableReply *r =
                shadowsync__v1__open_table_reply__unpack(NULL, calls[s].resp_len, calls[s].resp);
            if (!r || !r->spec)
                st = SS_ERR_PARSE;
            else {
                *stored = *spec;
                stored->dim = r->spec->dim;
                stored->optimizer = (ss__emb_optimizer)r->spec->optimizer;
                stored->lr = r->spec->lr;
                stored->eps = r->spec->eps;
                stored->init_scale = r->spec->init_scale;
            }
            if (r)
                shadowsync__v1__open_table_reply__free_unpacked(r, NULL);
        }
        free(calls[s].resp);
    }
    free(buf);
    return st;
}

typedef enum row_op { OP_LOOKUP, OP_PUSH, OP_ELASTIC } row_op;

/* One chunk of one shard: positions (into the caller's arrays) of its ids. */
typedef struct chunk {
    const size_t *pos;
    size_t n;
} chunk;

static uint8_t *pack_chunk(row_op op, const ss__emb_spec *spec, const uint64_t *ids,
                           const float *in, float alpha, const chunk *ck, size_t *len) {
    const size_t dim = spec->dim;
    uint64_t *cid = malloc(ck->n * sizeof *cid + 1);
    float *cin = in ? malloc(ck->n * dim * sizeof *cin + 1) : NULL;
    uint8_t *buf = NULL;
    if (!cid || (in && !cin))
        goto out;
    for (size_t k = 0; k < ck->n; k++) {
        cid[k] = ids[ck->pos[k]];
        if (in)
            memcpy(cin + k * dim, in + ck->pos[k] * dim, dim * sizeof(float));
    }
    ProtobufCBinaryData bid = {ck->n * sizeof *cid, (uint8_t *)cid};
    ProtobufCBinaryData bin = {in ? ck->n * dim * sizeof(float) : 0, (uint8_t *)cin};
    if (op == OP_LOOKUP) {
        Shadowsync__V1__LookupRequest m = SHADOWSYNC__V1__LOOKUP_REQUEST__INIT;
        m.table = (char *)spec->name;
        m.ids = bid;
        *len = shadowsync__v1__lookup_request__get_packed_size(&m);
        if ((buf = malloc(*len + 1)))
            shadowsync__v1__lookup_request__pack(&m, buf);
    } else if (op == OP_PUSH) {
        Shadowsync__V1__PushRequest m = SHADOWSYNC__V1__PUSH_REQUEST__INIT;
        m.table = (char *)spec->name;
        m.ids = bid;
        m.grads = bin;
        *len = shadowsync__v1__push_request__get_packed_size(&m);
        if ((buf = malloc(*len + 1)))
            shadowsync__v1__push_request__pack(&m, buf);
    } else {
        Shadowsync__V1__ElasticRequest m = SHADOWSYNC__V1__ELASTIC_REQUEST__INIT;
        m.table = (char *)spec->name;
        m.ids = bid;
        m.rows = bin;
        m.alpha = alpha;
        *len = shadowsync__v1__elastic_request__get_packed_size(&m);
        if ((buf = malloc(*len + 1)))
            shadowsync__v1__elastic_request__pack(&m, buf);
    }
out:
    free(cid);
    free(cin);
    return buf;
}

/* Copies a reply's rows (lookup) or deltas (elastic) to their positions. */
static ss_status scatter(row_op op, const ss__emb_spec *spec, const ss__rpc_request *call,
                         const chunk *ck, float *out) {
    const size_t want = ck->n * spec->dim * sizeof(float);
    ProtobufCBinaryData b = {0, NULL};
    Shadowsync__V1__LookupReply *lr = NULL;
    Shadowsync__V1__ElasticReply *er = NULL;
    if (op == OP_LOOKUP &&
        (lr = shadowsync__v1__lookup_reply__unpack(NULL, call->resp_len, call->resp)))
        b = lr->rows;
    else if (op == OP_ELASTIC &&
             (er = shadowsync__v1__elastic_reply__unpack(NULL, call->resp_len, call->resp)))
        b = er->deltas;
    ss_status st = b.len == want ? SS_OK : SS_ERR_PARSE;
    for (size_t k = 0; st == SS_OK && k < ck->n; k++)
        memcpy(out + ck->pos[k] * spec->dim, b.data + k * spec->dim * sizeof(float),
               spec->dim * sizeof(float));
    if (lr)
        shadowsync__v1__lookup_reply__free_unpacked(lr, NULL);
    if (er)
        shadowsync__v1__elastic_reply__free_unpacked(er, NULL);
    return st;
}

static const char *method_of(row_op op) {
    return op == OP_LOOKUP ? "/shadowsync.v1.Embedding/Lookup"
           : op == OP_PUSH ? "/shadowsync.v1.Embedding/Push"
                           : "/shadowsync.v1.Embedding/Elastic";
}

static ss_status sharded(ss__emb_client *c, row_op op, const ss__emb_spec *spec,
                         const uint64_t *ids, size_t n, const float *in, float alpha, float *out) {
    if (n == 0)
        return SS_OK;
    const uint32_t tid = ss__emb_table_id(spec->name);
    /* Counting sort of positions by shard. */
    size_t count[MAX_SHARDS + 1] = {0};
    uint32_t *shard = malloc(n * sizeof *shard);
    size_t *pos = malloc(n * sizeof *pos);
    if (!shard || !pos) {
        free(shard);
        free(pos);
        return SS_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++) {
        shard[i] = ss__emb_shard_of(tid, ids[i], c->shards);
        count[shard[i] + 1]++;
    }
    for (uint32_t s = 0; s < c->shards; s++)
        count[s + 1] += count[s];
    size_t start[MAX_SHARDS];
    memcpy(start, count, sizeof start);
    for (size_t i = 0; i < n; i++)
        pos[count[shard[i]]++] = i;
    size_t nchunks = 0;
    for (uint32_t s = 0; s < c->shards; s++) {
        size_t m = (s + 1 < c->shards ? start[s + 1] : n) - start[s];
        nchunks += (m + SS_EMB_CLIENT_CHUNK - 1) / SS_EMB_CLIENT_CHUNK;
    }
    chunk *ck = calloc(nchunks, sizeof *ck);
    ss__rpc_request *calls = calloc(nchunks, sizeof *calls);
    ss_status st = ck && calls ? SS_OK : SS_ERR_NO_MEMORY;
    size_t k = 0;
    for (uint32_t s = 0; st == SS_OK && s < c->shards; s++) {
        size_t end = s + 1 < c->shards ? start[s + 1] : n;
        for (size_t off = start[s]; off < end && st == SS_OK; off += SS_EMB_CLIENT_CHUNK, k++) {
            ck[k].pos = pos + off;
            ck[k].n = end - off < SS_EMB_CLIENT_CHUNK ? end - off : SS_EMB_CLIENT_CHUNK;
            calls[k].ch = c->ch[s];
            calls[k].method = method_of(op);
            calls[k].req = pack_chunk(op, spec, ids, in, alpha, &ck[k], &calls[k].len);
            if (!calls[k].req)
                st = SS_ERR_NO_MEMORY;
        }
    }
    if (st == SS_OK)
        st = ss__rpc_call_many(calls, nchunks, c->timeout_ms, true);
    if (st != SS_OK && calls) {
        for (size_t j = 0; j < nchunks; j++)
            if (calls[j].status != SS_OK && calls[j].msg[0]) {
                ss__log(SS_LOG_WARN, "emb", "event=call_failed method=%s status=%s msg=\"%s\"",
                        method_of(op), ss_status_name(calls[j].status), calls[j].msg);
                break;
            }
    }
    for (size_t j = 0; st == SS_OK && j < nchunks && op != OP_PUSH; j++)
        st = scatter(op, spec, &calls[j], &ck[j], out);
    for (size_t j = 0; calls && j < nchunks; j++) {
        free((void *)calls[j].req);
        free(calls[j].resp);
    }
    free(calls);
    free(ck);
    free(shard);
    free(pos);
    return st;
}

ss_status ss__emb_client_lookup(ss__emb_client *c, const ss__emb_spec *spec, const uint64_t *ids,
                                size_t n, float *rows) {
    return sharded(c, OP_LOOKUP, spec, ids, n, NULL, 0.0f, rows);
}

ss_status ss__emb_client_push(ss__emb_client *c, const ss__emb_spec *spec, const uint64_t *ids,
                              size_t n, const float *grads) {
    return sharded(c, OP_PUSH, spec, ids, n, grads, 0.0f, NULL);
}

ss_status ss__emb_client_elastic(ss__emb_client *c, const ss__emb_spec *spec, const uint64_t *ids,
                                 size_t n, const float *x, float alpha, float *deltas) {
    return sharded(c, OP_ELASTIC, spec, ids, n, x, alpha, deltas);
}
