/* Embedding service handlers: unpack, check lengths, call the store, pack. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/emb_service.h"
#include "rpc/emb/embedding.pb-c.h"
#include "rpc/emb/spec_pb.h"
#include "rpc/rpc_pb.h"
#include "shadow/codec.h"

/* A refusal: status + message in the reply, counted by the store. */
static void refuse(ss__emb_service *svc, ss__rpc_reply *r, ss_status st, const char *reason,
                   const char *what) {
    r->status = ss__emb_store_refuse(svc->store, st, reason);
    snprintf(r->message, sizeof r->message, "%s", what);
}

/* A request that is not its method's message, counted by the store. */
static void refuse_garbage(void *ctx) {
    ss__emb_service *svc = ctx;
    ss__emb_store_refuse(svc->store, SS_ERR_PARSE, "garbage");
}

/* The store already counted its own refusals; only relay them. */
static void relay(ss__rpc_reply *r, ss_status st, const char *why) {
    r->status = st;
    snprintf(r->message, sizeof r->message, "%s", *why ? why : ss_strerror(st));
}

/* A row request: its table's spec, its ids copied to an aligned array, and
 * (when want_rows) its float payload of exactly n * dim values: read where
 * it lies when it came as aligned floats (the message's tail field,
 * rpc/pb_wire.h), else copied or, when it came encoded (enc,
 * shadow/codec.h), decoded row by row into `owned`. */
typedef struct row_request {
    ss__emb_spec spec;
    uint64_t *ids;
    const float *payload;
    float *owned; /* free it */
    size_t n;
} row_request;

static int parse_rows(ss__emb_service *svc, const char *table, const ProtobufCBinaryData *ids,
                      const ProtobufCBinaryData *payload, ss__encoding enc, row_request *rq,
                      ss__rpc_reply *r) {
    memset(rq, 0, sizeof *rq);
    char msg[200];
    if (!table || ss__emb_store_table_spec(svc->store, table, &rq->spec) != SS_OK) {
        snprintf(msg, sizeof msg, "unknown table %s", table && *table ? table : "(none)");
        refuse(svc, r, SS_ERR_NOT_FOUND, "unknown_table", msg);
        return 0;
    }
    if (ids->len % sizeof(uint64_t) != 0) {
        refuse(svc, r, SS_ERR_INVALID_ARGUMENT, "bad_ids",
               "ids must be whole little-endian uint64s");
        return 0;
    }
    rq->n = ids->len / sizeof(uint64_t);
    if (rq->n > ss__emb_store_max_batch(svc->store)) {
        snprintf(msg, sizeof msg, "batch of %zu ids is over the limit of %zu", rq->n,
                 ss__emb_store_max_batch(svc->store));
        refuse(svc, r, SS_ERR_NO_MEMORY, "batch_too_large", msg);
        return 0;
    }
    const size_t row_bytes = ss__codec_size(enc, rq->spec.dim);
    if (payload && payload->len != rq->n * row_bytes) {
        snprintf(msg, sizeof msg, "%zu payload bytes for %zu ids of dim %u in %s (want %zu)",
                 payload->len, rq->n, rq->spec.dim, ss__encoding_name(enc), rq->n * row_bytes);
        refuse(svc, r, SS_ERR_SIZE_MISMATCH, "dim_mismatch", msg);
        return 0;
    }
    const bool in_place = payload && enc == SS_ENC_F32 && payload->len &&
                          (uintptr_t)payload->data % _Alignof(float) == 0;
    rq->ids = malloc(rq->n ? rq->n * sizeof(uint64_t) : 1);
    rq->owned =
        payload && !in_place ? malloc(rq->n ? rq->n * rq->spec.dim * sizeof(float) : 1) : NULL;
    rq->payload = in_place ? (const float *)payload->data : rq->owned;
    if (!rq->ids || (payload && !rq->payload)) {
        free(rq->ids);
        free(rq->owned);
        r->status = SS_ERR_NO_MEMORY;
        snprintf(r->message, sizeof r->message, "out of memory");
        return 0;
    }
    if (ids->len) /* an empty bytes field has no data pointer */
        memcpy(rq->ids, ids->data, ids->len);
    if (payload && payload->len && enc == SS_ENC_F32 && !in_place)
        memcpy(rq->owned, payload->data, payload->len);
    for (size_t i = 0; payload && enc != SS_ENC_F32 && i < rq->n; i++)
        if (ss__codec_decode(enc, payload->data + i * row_bytes, row_bytes, rq->spec.dim,
                             rq->owned + i * rq->spec.dim) != SS_OK) {
            snprintf(msg, sizeof msg,
                     "row %zu does not decode as %s (a value is not finite, or "
                     "a block's min is over its max)",
                     i, ss__encoding_name(enc));
            refuse(svc, r, SS_ERR_INVALID_ARGUMENT, "bad_payload", msg);
            free(rq->ids);
            free(rq->owned);
            return 0;
        }
    ss_status st = svc->ensure && rq->n
                       ? svc->ensure(svc->moves, table, rq->ids, rq->n, msg, sizeof msg)
                       : SS_OK;
    if (st != SS_OK) { /* its rows are moving here and did not come */
        relay(r, st, msg);
        free(rq->ids);
        free(rq->owned);
        return 0;
    }
    return 1;
}

/* Room for a lookup's rows in the reply itself (ss__rpc_tail_reply_alloc):
 * the store writes them where they are sent from. */
static float *rows_out(size_t n, uint32_t dim, uint8_t **block, ss__rpc_reply *r) {
    float *out = ss__rpc_tail_reply_alloc(n * dim * sizeof(float), block);
    if (!out) {
        r->status = SS_ERR_NO_MEMORY;
        snprintf(r->message, sizeof r->message, "out of memory");
    }
    return out;
}

/* A lookup's reply: its rows (n of dim floats, in block), or why it
 * failed. Takes the block. */
static void reply_rows(ss__rpc_reply *reply, ss_status st, const char *why, uint8_t *block,
                       size_t n, uint32_t dim) {
    if (st != SS_OK) {
        free(block);
        relay(reply, st, why);
        return;
    }
    Shadowsync__V1__LookupReply head = SHADOWSYNC__V1__LOOKUP_REPLY__INIT;
    if (ss__rpc_tail_reply_seal(&head.base, 1, block, n * dim * sizeof(float), reply) != SS_OK)
        relay(reply, SS_ERR_INTERNAL, "");
}

static void serve_open(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__emb_service *svc = ctx;
    const Shadowsync__V1__OpenTableRequest *m = request;
    ss__emb_spec spec, stored;
    char why[200] = "";
    if (!ss__emb_spec_from_pb(m->spec, &spec)) {
        refuse(svc, reply, SS_ERR_INVALID_ARGUMENT, "bad_spec",
               "a table spec with a name is needed");
    } else {
        ss_status st = ss__emb_store_open_table(svc->store, &spec, &stored, why, sizeof why);
        if (st != SS_OK) {
            relay(reply, st, why);
        } else {
            Shadowsync__V1__TableSpec ts;
            ss__emb_spec_to_pb(&stored, &ts);
            Shadowsync__V1__OpenTableReply out = SHADOWSYNC__V1__OPEN_TABLE_REPLY__INIT;
            out.spec = &ts;
            out.table_id = ss__emb_table_id(stored.name);
            ss__rpc_reply_pack(&out.base, reply);
        }
    }
}

static const ss__rpc_request_type open_request = {&shadowsync__v1__open_table_request__descriptor,
                                                  serve_open, refuse_garbage, 0, 0};

static void serve_lookup(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__emb_service *svc = ctx;
    const Shadowsync__V1__LookupRequest *m = request;
    row_request rq;
    if (parse_rows(svc, m->table, &m->ids, NULL, SS_ENC_F32, &rq, reply)) {
        uint8_t *block;
        float *rows = rows_out(rq.n, rq.spec.dim, &block, reply);
        char why[200] = "";
        if (rows) {
            ss_status st =
                ss__emb_store_lookup(svc->store, m->table, rq.ids, rq.n, rows, why, sizeof why);
            reply_rows(reply, st, why, block, rq.n, rq.spec.dim);
        }
        free(rq.ids);
    }
}

static const ss__rpc_request_type lookup_request = {&shadowsync__v1__lookup_request__descriptor,
                                                    serve_lookup, refuse_garbage, 0, 0};

static void serve_push(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__emb_service *svc = ctx;
    const Shadowsync__V1__PushRequest *m = request;
    row_request rq;
    if (parse_rows(svc, m->table, &m->ids, &m->grads, SS_ENC_F32, &rq, reply)) {
        char why[200] = "";
        ss_status st =
            ss__emb_store_push(svc->store, m->table, rq.ids, rq.n, rq.payload, why, sizeof why);
        if (st != SS_OK) {
            relay(reply, st, why);
        } else {
            Shadowsync__V1__PushReply out = SHADOWSYNC__V1__PUSH_REPLY__INIT;
            out.applied = (uint32_t)rq.n;
            ss__rpc_reply_pack(&out.base, reply);
        }
        free(rq.ids);
        free(rq.owned);
    }
}

static const ss__rpc_request_type push_request = {&shadowsync__v1__push_request__descriptor,
                                                  serve_push, refuse_garbage, 3,
                                                  offsetof(Shadowsync__V1__PushRequest, grads)};

static void serve_push_lookup(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__emb_service *svc = ctx;
    const Shadowsync__V1__PushLookupRequest *m = request;
    row_request push, look;
    if (parse_rows(svc, m->table, &m->push_ids, &m->grads, SS_ENC_F32, &push, reply)) {
        if (parse_rows(svc, m->table, &m->ids, NULL, SS_ENC_F32, &look, reply)) {
            uint8_t *block;
            float *rows = rows_out(look.n, look.spec.dim, &block, reply);
            char why[200] = "";
            if (rows) {
                ss_status st =
                    ss__emb_store_push_lookup(svc->store, m->table, push.ids, push.n, push.payload,
                                              look.ids, look.n, rows, why, sizeof why);
                reply_rows(reply, st, why, block, look.n, look.spec.dim);
            }
            free(look.ids);
        }
        free(push.ids);
        free(push.owned);
    }
}

static const ss__rpc_request_type push_lookup_request = {
    &shadowsync__v1__push_lookup_request__descriptor, serve_push_lookup, refuse_garbage, 3,
    offsetof(Shadowsync__V1__PushLookupRequest, grads)};

static void serve_elastic(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__emb_service *svc = ctx;
    const Shadowsync__V1__ElasticRequest *m = request;
    if (m->encoding >= SS_ENC_COUNT) {
        char msg[96];
        snprintf(msg, sizeof msg, "encoding %u is not 0 (f32), 1 (fp16), 2 (bf16) or 3 (int8)",
                 m->encoding);
        refuse(svc, reply, SS_ERR_INVALID_ARGUMENT, "bad_encoding", msg);
        return;
    }
    const ss__encoding enc = (ss__encoding)m->encoding;
    row_request rq;
    if (parse_rows(svc, m->table, &m->ids, &m->rows, enc, &rq, reply)) {
        const size_t out_bytes = rq.n * ss__codec_size(enc, rq.spec.dim);
        /* The centre rows move by what the reply decodes to. */
        ss__encoding codec = enc;
        const ss__emb_delta_encoder encoder = {ss__codec_round_trip, &codec,
                                               ss__codec_size(enc, rq.spec.dim)};
        void *deltas = malloc(out_bytes + 1);
        char why[200] = "";
        ss_status st =
            !deltas ? SS_ERR_NO_MEMORY
            : enc == SS_ENC_F32
                ? ss__emb_store_elastic(svc->store, m->table, rq.ids, rq.n, rq.payload, m->alpha,
                                        deltas, why, sizeof why)
                : ss__emb_store_elastic_encoded(svc->store, m->table, rq.ids, rq.n, rq.payload,
                                                m->alpha, &encoder, deltas, why, sizeof why);
        if (st != SS_OK) {
            relay(reply, st, why);
        } else {
            Shadowsync__V1__ElasticReply out = SHADOWSYNC__V1__ELASTIC_REPLY__INIT;
            out.deltas.data = deltas;
            out.deltas.len = out_bytes;
            ss__rpc_reply_pack(&out.base, reply);
        }
        free(deltas);
        free(rq.ids);
        free(rq.owned);
    }
}

static const ss__rpc_request_type elastic_request = {&shadowsync__v1__elastic_request__descriptor,
                                                     serve_elastic, refuse_garbage, 0, 0};

static void serve_checkpoint(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__emb_service *svc = ctx;
    const Shadowsync__V1__EmbCheckpointRequest *m = request;
    char why[200] = "", path[4096];
    ss_status st = ss__emb_store_checkpoint(svc->store, m->name ? m->name : "", path, sizeof path,
                                            why, sizeof why);
    if (st != SS_OK) {
        relay(reply, st, why);
    } else {
        Shadowsync__V1__EmbCheckpointReply out = SHADOWSYNC__V1__EMB_CHECKPOINT_REPLY__INIT;
        out.path = path;
        out.name = strrchr(path, '/') + 1;
        ss__rpc_reply_pack(&out.base, reply);
    }
}

static const ss__rpc_request_type checkpoint_request = {
    &shadowsync__v1__emb_checkpoint_request__descriptor, serve_checkpoint, refuse_garbage, 0, 0};

static void serve_stats(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__emb_service *svc = ctx;
    const Shadowsync__V1__TableStatsRequest *m = request;
    ss__emb_store_stats s;
    ss__emb_spec spec;
    if (!m->table || ss__emb_store_stats_of(svc->store, m->table, &s) != SS_OK ||
        ss__emb_store_table_spec(svc->store, m->table, &spec) != SS_OK) {
        refuse(svc, reply, SS_ERR_NOT_FOUND, "unknown_table", "unknown table");
    } else {
        Shadowsync__V1__TableStatsReply out = SHADOWSYNC__V1__TABLE_STATS_REPLY__INIT;
        out.dim = spec.dim;
        out.resident_rows = s.table.resident_rows;
        out.dirty_rows = s.table.dirty_rows;
        out.row_bytes = s.table.row_bytes;
        out.arena_bytes = s.table.arena_bytes;
        out.index_bytes = s.table.index_bytes;
        out.loads = s.table.loads;
        out.evictions = s.table.evictions;
        out.lookups = s.lookups;
        out.pushes = s.pushes;
        out.elastic = s.elastic;
        out.flushed_rows = s.flushed_rows;
        ss__rpc_reply_pack(&out.base, reply);
    }
}

static const ss__rpc_request_type stats_request = {&shadowsync__v1__table_stats_request__descriptor,
                                                   serve_stats, refuse_garbage, 0, 0};

/* Rows moving between shards: the mover's, when there is one. */
static void h_handoff(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply) {
    ss__emb_service *svc = ctx;
    if (svc->handoff) {
        svc->handoff(svc->moves, req, len, reply);
        return;
    }
    refuse(svc, reply, SS_ERR_STATE, "no_moves",
           "this PS moves no rows: it was started without --shard-map");
}

/* The methods' places in svc->methods. */
enum {
    M_OPEN,
    M_LOOKUP,
    M_PUSH,
    M_ELASTIC,
    M_CHECKPOINT,
    M_STATS,
    M_PUSH_LOOKUP,
    M_HANDOFF,
    M_BATCH
};

/* Calls a Batch carries at most (a model's tables, per shard). */
#define MAX_BATCH_CALLS 1024

/* A Batch: each call run by its method's own handler, as if it came
 * alone (its limit checked first), its reply or refusal kept in order. */
static void serve_batch(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__emb_service *svc = ctx;
    const Shadowsync__V1__BatchRequest *m = request;
    if (m->n_calls > MAX_BATCH_CALLS) {
        char msg[120];
        snprintf(msg, sizeof msg, "a batch of %zu calls: at most %d", m->n_calls, MAX_BATCH_CALLS);
        refuse(svc, reply, SS_ERR_TOO_LARGE, "batch_too_large", msg);
        return;
    }
    static const int method_of[] = {[SS_EMB_BATCH_LOOKUP] = M_LOOKUP,
                                    [SS_EMB_BATCH_PUSH] = M_PUSH,
                                    [SS_EMB_BATCH_PUSH_LOOKUP] = M_PUSH_LOOKUP,
                                    [SS_EMB_BATCH_ELASTIC] = M_ELASTIC};
    ss__rpc_reply *subs = calloc(m->n_calls + 1, sizeof *subs);
    Shadowsync__V1__BatchResult *res = calloc(m->n_calls + 1, sizeof *res);
    Shadowsync__V1__BatchResult **resp = calloc(m->n_calls + 1, sizeof *resp);
    if (!subs || !res || !resp) {
        reply->status = SS_ERR_NO_MEMORY;
        snprintf(reply->message, sizeof reply->message, "out of memory");
        m = &(Shadowsync__V1__BatchRequest){.n_calls = 0};
    }
    for (size_t i = 0; subs && res && resp && i < m->n_calls; i++) {
        const Shadowsync__V1__BatchCall *call = m->calls[i];
        const uint32_t k = call->method;
        const ss__rpc_method *mm = k >= SS_EMB_BATCH_LOOKUP && k <= SS_EMB_BATCH_ELASTIC
                                       ? &svc->methods[method_of[k]]
                                       : NULL;
        if (!mm)
            refuse(svc, &subs[i], SS_ERR_INVALID_ARGUMENT, "garbage", "unknown batch method");
        else if (mm->max_request && call->request.len > mm->max_request)
            refuse(svc, &subs[i], SS_ERR_TOO_LARGE, "batch_too_large",
                   "a call larger than its method's limit");
        else
            ss__rpc_method_run(mm, svc, call->request.data, call->request.len, &subs[i]);
        shadowsync__v1__batch_result__init(&res[i]);
        res[i].status = (uint32_t)subs[i].status;
        res[i].message = subs[i].status == SS_OK ? "" : subs[i].message;
        res[i].reply = (ProtobufCBinaryData){subs[i].len, subs[i].data};
        resp[i] = &res[i];
    }
    if (subs && res && resp) {
        Shadowsync__V1__BatchReply out = SHADOWSYNC__V1__BATCH_REPLY__INIT;
        out.n_results = m->n_calls;
        out.results = resp;
        ss__rpc_reply_pack(&out.base, reply);
    }
    for (size_t i = 0; subs && i < m->n_calls; i++)
        free(subs[i].data_block ? subs[i].data_block : subs[i].data);
    free(subs);
    free(res);
    free(resp);
}

static const ss__rpc_request_type batch_request = {&shadowsync__v1__batch_request__descriptor,
                                                   serve_batch, refuse_garbage, 0, 0};

void ss__emb_service_init(ss__emb_service *svc, ss__emb_store *store) {
    memset(svc, 0, sizeof *svc);
    svc->store = store;
    const size_t lookup_max = ss__emb_store_max_batch(store) * sizeof(uint64_t) + 4096;
    /* the last field: streamed, on the bulk stream too */
    const ss__rpc_method m[SS_EMB_METHODS] = {
        [M_OPEN] = {SS_EMB_M_OPEN, NULL, false, svc, false, SS_RPC_SMALL_REQUEST, &open_request,
                    false, false},
        /* ids only: the store's batch limit of them; rows come back */
        [M_LOOKUP] = {SS_EMB_M_LOOKUP, NULL, false, svc, true, lookup_max, &lookup_request, false,
                      true},
        /* rows: the server's limit */
        [M_PUSH] = {SS_EMB_M_PUSH, NULL, false, svc, false, 0, &push_request, false, true},
        [M_ELASTIC] = {SS_EMB_M_ELASTIC, NULL, false, svc, false, 0, &elastic_request, false,
                       false},
        /* a checkpoint waits for a flush and RocksDB: off the queue threads */
        [M_CHECKPOINT] = {SS_EMB_M_CHECKPOINT, NULL, true, svc, false, SS_RPC_SMALL_REQUEST,
                          &checkpoint_request, false, false},
        [M_STATS] = {SS_EMB_M_STATS, NULL, false, svc, true, SS_RPC_SMALL_REQUEST, &stats_request,
                     false, false},
        [M_PUSH_LOOKUP] = {SS_EMB_M_PUSH_LOOKUP, NULL, false, svc, false, 0, &push_lookup_request,
                           false, true},
        /* ids and done ids: two batches of them; raw, the mover's handler;
         * for other PS only, and blocking: the giver calls the taker back */
        [M_HANDOFF] = {SS_EMB_M_HANDOFF, h_handoff, true, svc, false,
                       2 * 65536 * sizeof(uint64_t) + 4096, NULL, true, false},
        /* several tables' lookups and pushes: the server's limit in all,
         * each call its own method's */
        [M_BATCH] = {SS_EMB_M_BATCH, NULL, false, svc, false, 0, &batch_request, false, true},
    };
    memcpy(svc->methods, m, sizeof m);
}
