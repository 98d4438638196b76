/* Sharded Embedding calls: split by shard, pack, call all at once,
 * scatter the replies back into the caller's order. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/shard_map.h"
#include "common/strbuf.h"
#include "rpc/emb/emb_client.h"
#include "rpc/emb/emb_client_internal.h"
#include "rpc/emb/emb_wire.h"
#include "rpc/emb/embedding.pb-c.h"
#include "rpc/emb/spec_pb.h"
#include "rpc/pb_wire.h"
#include "rpc/rpc_pb.h"

static void close_channels(ss__emb_client *c) {
    for (uint32_t s = 0; s < c->shards; s++)
        ss__rpc_channel_destroy(c->ch[s]);
    c->shards = 0;
}

/* A channel to every target of the comma-separated list. */
static ss_status open_channels(ss__emb_client *c, const char *targets, char *why, size_t whylen) {
    if (strlen(targets) >= sizeof c->targets)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "the PS list is over %zu bytes",
                        sizeof c->targets - 1);
    snprintf(c->targets, sizeof c->targets, "%s", targets);
    char *list = strdup(targets);
    if (!list)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the PS list");
    const ss__rpc_tls tls = {*c->tls_ca ? c->tls_ca : NULL, *c->tls_cert ? c->tls_cert : NULL,
                             *c->tls_key ? c->tls_key : NULL};
    ss_status st = SS_OK;
    char *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok && st == SS_OK;
         tok = strtok_r(NULL, ",", &save)) {
        if (c->shards == MAX_SHARDS)
            st = ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "more than %d PS shards",
                          MAX_SHARDS);
        else if ((st = ss__rpc_channel_create(tok, 0, &tls, &c->ch[c->shards], why, whylen)) ==
                 SS_OK) {
            ss__rpc_channel_set_epoch(c->ch[c->shards], c->epoch);
            ss__rpc_channel_set_streams(c->ch[c->shards++], c->streams);
        }
    }
    free(list);
    return st == SS_OK && c->shards == 0
               ? ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "no PS shard in \"%s\"", targets)
               : st;
}

ss_status ss__emb_client_create(const char *targets, const ss__rpc_tls *tls, uint32_t timeout_ms,
                                ss__emb_client **out, char *why, size_t whylen) {
    if (!targets || !*targets || !out)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "an embedding client needs its PS targets");
    ss__emb_client *c = calloc(1, sizeof *c);
    if (!c)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the embedding client");
    pthread_rwlock_init(&c->lock, NULL);
    c->timeout_ms = timeout_ms ? timeout_ms : 10000;
    if (tls) {
        snprintf(c->tls_ca, sizeof c->tls_ca, "%s", tls->ca_file ? tls->ca_file : "");
        snprintf(c->tls_cert, sizeof c->tls_cert, "%s", tls->cert_file ? tls->cert_file : "");
        snprintf(c->tls_key, sizeof c->tls_key, "%s", tls->key_file ? tls->key_file : "");
    }
    ss_status st = open_channels(c, targets, why, whylen);
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
    close_channels(c);
    pthread_rwlock_destroy(&c->lock);
    free(c);
}

void ss__emb_client_set_epoch(ss__emb_client *c, uint64_t epoch) {
    if (!c)
        return;
    pthread_rwlock_wrlock(&c->lock);
    c->epoch = epoch;
    for (uint32_t s = 0; s < c->shards; s++)
        ss__rpc_channel_set_epoch(c->ch[s], epoch);
    pthread_rwlock_unlock(&c->lock);
}

ss_status ss__emb_client_use_bulk(ss__emb_client *c, bool on) {
    if (!c)
        return SS_ERR_INVALID_ARGUMENT;
    pthread_rwlock_wrlock(&c->lock);
    c->streams = on;
    for (uint32_t s = 0; s < c->shards; s++)
        ss__rpc_channel_set_streams(c->ch[s], on);
    pthread_rwlock_unlock(&c->lock);
    return SS_OK;
}

uint64_t ss__emb_client_bulk_batches(ss__emb_client *c) {
    if (!c)
        return 0;
    pthread_rwlock_rdlock(&c->lock);
    uint64_t n = 0;
    for (uint32_t s = 0; s < c->shards; s++)
        n += ss__rpc_channel_stream_batches(c->ch[s]);
    pthread_rwlock_unlock(&c->lock);
    return n;
}

ss_status ss__emb_client_follow_map(ss__emb_client *c, const char *path) {
    if (!c || !path || strlen(path) >= sizeof c->map)
        return SS_ERR_INVALID_ARGUMENT;
    pthread_rwlock_wrlock(&c->lock);
    snprintf(c->map, sizeof c->map, "%s", path);
    pthread_rwlock_unlock(&c->lock);
    return SS_OK;
}

/* OpenTable on every shard (c->lock held). */
static ss_status open_table_locked(ss__emb_client *c, const ss__emb_spec *spec,
                                   ss__emb_spec *stored, char *why, size_t whylen) {
    Shadowsync__V1__TableSpec ts;
    ss__emb_spec_to_pb(spec, &ts);
    Shadowsync__V1__OpenTableRequest m = SHADOWSYNC__V1__OPEN_TABLE_REQUEST__INIT;
    m.spec = &ts;
    size_t len = shadowsync__v1__open_table_request__get_packed_size(&m);
    uint8_t *buf = malloc(len + 1);
    if (!buf)
        return SS_ERR_NO_MEMORY;
    shadowsync__v1__open_table_request__pack(&m, buf);
    /* A shard that cannot be reached is said so at once, as a dense
     * group's join does (the call would wait until its deadline and say
     * only that it passed). */
    ss_status st = SS_OK;
    for (uint32_t s = 0; st == SS_OK && s < c->shards; s++)
        if ((st = ss__rpc_channel_reachable(
                 c->ch[s], "the PS", c->timeout_ms < 2000 ? c->timeout_ms : 2000)) != SS_OK &&
            why && whylen)
            snprintf(why, whylen, "%s", ss__rpc_last_failure());
    if (st != SS_OK) {
        free(buf);
        return st;
    }
    ss__rpc_request calls[MAX_SHARDS];
    memset(calls, 0, sizeof calls);
    for (uint32_t s = 0; s < c->shards; s++)
        calls[s] =
            (ss__rpc_request){.ch = c->ch[s], .method = SS_EMB_M_OPEN, .req = buf, .len = len};
    st = ss__rpc_call_many(calls, c->shards, c->timeout_ms, true);
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
                ss__emb_spec_numbers_from_pb(r->spec, stored);
            }
            if (r)
                shadowsync__v1__open_table_reply__free_unpacked(r, NULL);
        }
        free(calls[s].resp);
    }
    free(buf);
    return st;
}

ss_status ss__emb_client_open_table(ss__emb_client *c, const ss__emb_spec *spec,
                                    ss__emb_spec *stored, char *why, size_t whylen) {
    pthread_rwlock_wrlock(&c->lock);
    size_t i = 0;
    while (i < c->nopened && strcmp(c->opened[i].name, spec->name) != 0)
        i++;
    if (i == c->nopened && i < MAX_OPENED)
        c->opened[c->nopened++] = *spec;
    ss_status st = open_table_locked(c, spec, stored, why, whylen);
    pthread_rwlock_unlock(&c->lock);
    return st;
}

/* The shard map moved on (a call was refused for its epoch): routes by
 * the map file's list from now on and opens every table on its shards.
 * false when the file holds no newer epoch (yet: the servers may have
 * read it before this client). */
static bool reroute(ss__emb_client *c) {
    pthread_rwlock_wrlock(&c->lock);
    ss__shard_map m;
    char why[400];
    bool moved = *c->map && ss__shard_map_read(c->map, &m, why, sizeof why) == SS_OK &&
                 ss__shard_map_newer(c->epoch, m.epoch);
    if (moved) {
        close_channels(c);
        c->epoch = m.epoch;
        ss_status st = open_channels(c, m.ps, why, sizeof why);
        /* A shard that has not read the new map yet refuses; it will
         * within 200 ms. */
        const uint64_t until = ss__now_ns() + 3000000000ull;
        for (size_t i = 0; st == SS_OK && i < c->nopened; i++)
            while ((st = open_table_locked(c, &c->opened[i], NULL, why, sizeof why)) ==
                       SS_ERR_STATE &&
                   ss__now_ns() < until)
                ss__sleep_ns(100000000ull);
        ss__log(st == SS_OK ? SS_LOG_INFO : SS_LOG_WARN, "emb",
                "event=rerouted epoch=%llu ps=%s status=%s", (unsigned long long)m.epoch, m.ps,
                ss_status_name(st));
    }
    pthread_rwlock_unlock(&c->lock);
    return moved;
}

typedef enum row_op { OP_LOOKUP, OP_PUSH, OP_ELASTIC, OP_PUSH_LOOKUP } row_op;

/* One chunk of one shard: positions (into the caller's arrays) of its ids. */
typedef struct chunk {
    const size_t *pos;
    size_t n;
} chunk;

/* What one call carries: `main` is the lookup, push or elastic part;
 * OP_PUSH_LOOKUP also has `push` (main is then its lookup). */
typedef struct call_part {
    chunk main, push;
    uint8_t *owned; /* the call's payload when it was gathered */
} call_part;

/* The rows of one op: ids, and floats in (grads, rows) when it sends any. */
typedef struct id_set {
    const uint64_t *ids;
    size_t n;
    const float *in;
    ss__encoding enc; /* elastic: rows out and deltas back, row by row (shadow/codec.h) */
} id_set;

/* True when the chunk's positions are one run, in order (one shard's
 * whole batch is), and not empty. */
static bool consecutive(const chunk *ck) {
    if (ck->n == 0)
        return false;
    for (size_t k = 1; k < ck->n; k++)
        if (ck->pos[k] != ck->pos[0] + k)
            return false;
    return true;
}

/* True when the chunk's rows are the set's own floats in one run, in
 * order (f32): they can be sent from where they lie. */
static bool one_run(const id_set *set, const chunk *ck) {
    return set->in && set->enc == SS_ENC_F32 && consecutive(ck);
}

/* A chunk's ids (into bid) and payload (into bin, when the set has one)
 * gathered into arrays of their own; a NULL out is not gathered. */
static bool gather_chunk(const ss__emb_spec *spec, const id_set *set, const chunk *ck,
                         ProtobufCBinaryData *bid, ProtobufCBinaryData *bin) {
    const size_t dim = spec->dim, row_bytes = ss__codec_size(set->enc, dim);
    const bool in = set->in && bin;
    uint64_t *cid = bid ? malloc(ck->n * sizeof *cid + 1) : NULL;
    uint8_t *cin = in ? malloc(ck->n * row_bytes + 1) : NULL;
    if ((bid && !cid) || (in && !cin)) {
        free(cid);
        free(cin);
        return false;
    }
    for (size_t k = 0; k < ck->n; k++) {
        if (cid)
            cid[k] = set->ids[ck->pos[k]];
        if (in && set->enc == SS_ENC_F32)
            memcpy(cin + k * row_bytes, set->in + ck->pos[k] * dim, row_bytes);
        else if (in)
            ss__codec_encode(set->enc, set->in + ck->pos[k] * dim, dim, cin + k * row_bytes);
    }
    if (bid)
        *bid = (ProtobufCBinaryData){ck->n * sizeof *cid, (uint8_t *)cid};
    if (bin)
        *bin = (ProtobufCBinaryData){in ? ck->n * row_bytes : 0, cin};
    return true;
}

/* A push's gradients (f32: a push set's always are): sent after the
 * packed small fields as their trailing bytes field (rpc/pb_wire.h), from
 * the caller's floats when they are one run, else from a gathered copy
 * (*owned, the call's to free). */
static bool push_payload(const ss__emb_spec *spec, const id_set *set, const chunk *ck,
                         ss__rpc_request *call, uint8_t **owned) {
    ProtobufCBinaryData rows;
    if (one_run(set, ck)) {
        call->payload = (const uint8_t *)(set->in + ck->pos[0] * spec->dim);
        call->payload_len = ck->n * spec->dim * sizeof(float);
        return true;
    }
    if (!gather_chunk(spec, set, ck, NULL, &rows))
        return false;
    *owned = rows.data;
    call->payload = rows.data;
    call->payload_len = rows.len;
    return true;
}

/* The call of one chunk: its request in call->req (and, for a push, its
 * gradients as call->payload; *owned: a copy to free with the call). */
static bool pack_chunk(row_op op, const ss__emb_spec *spec, const id_set *main, const id_set *push,
                       float alpha, const call_part *cp, ss__rpc_request *call, uint8_t **owned) {
    ProtobufCBinaryData bid = {0}, bin = {0}, pid = {0};
    uint8_t *buf = NULL;
    size_t *len = &call->len;
    *owned = NULL;
    /* a push's gradients go as the payload (push_payload), not gathered here */
    if (!gather_chunk(spec, main, &cp->main, &bid, op == OP_PUSH ? NULL : &bin) ||
        (op == OP_PUSH_LOOKUP && !gather_chunk(spec, push, &cp->push, &pid, NULL)))
        goto out;
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
        if (push_payload(spec, main, &cp->main, call, owned))
            buf = ss__rpc_pack_tail_head(&m.base, 3, call->payload_len, len);
    } else if (op == OP_PUSH_LOOKUP) {
        Shadowsync__V1__PushLookupRequest m = SHADOWSYNC__V1__PUSH_LOOKUP_REQUEST__INIT;
        m.table = (char *)spec->name;
        m.push_ids = pid;
        m.ids = bid;
        if (push_payload(spec, push, &cp->push, call, owned))
            buf = ss__rpc_pack_tail_head(&m.base, 3, call->payload_len, len);
    } else {
        Shadowsync__V1__ElasticRequest m = SHADOWSYNC__V1__ELASTIC_REQUEST__INIT;
        m.table = (char *)spec->name;
        m.ids = bid;
        m.rows = bin;
        m.alpha = alpha;
        m.encoding = (uint32_t)main->enc;
        *len = shadowsync__v1__elastic_request__get_packed_size(&m);
        if ((buf = malloc(*len + 1)))
            shadowsync__v1__elastic_request__pack(&m, buf);
    }
out:
    free(bid.data);
    free(bin.data);
    free(pid.data);
    call->req = buf;
    return buf != NULL;
}

/* Copies a reply's rows (lookup) or deltas (elastic) to their positions. */
static ss_status scatter(row_op op, const ss__emb_spec *spec, ss__encoding enc,
                         const ss__rpc_request *call, const chunk *ck, float *out) {
    const size_t row_bytes = ss__codec_size(op == OP_ELASTIC ? enc : SS_ENC_F32, spec->dim);
    const size_t want = ck->n * row_bytes;
    ProtobufCBinaryData b = {0, NULL};
    Shadowsync__V1__LookupReply *lr = NULL;
    Shadowsync__V1__ElasticReply *er = NULL;
    if ((op == OP_LOOKUP || op == OP_PUSH_LOOKUP) &&
        (lr = shadowsync__v1__lookup_reply__unpack(NULL, call->resp_len, call->resp)))
        b = lr->rows;
    else if (op == OP_ELASTIC &&
             (er = shadowsync__v1__elastic_reply__unpack(NULL, call->resp_len, call->resp)))
        b = er->deltas;
    ss_status st = b.len == want ? SS_OK : SS_ERR_PARSE;
    for (size_t k = 0; st == SS_OK && k < ck->n; k++)
        if (row_bytes == spec->dim * sizeof(float))
            memcpy(out + ck->pos[k] * spec->dim, b.data + k * row_bytes, row_bytes);
        else /* checks what came from the network: finite, a sane block */
            st = ss__codec_decode(enc, b.data + k * row_bytes, row_bytes, spec->dim,
                                  out + ck->pos[k] * spec->dim) == SS_OK
                     ? SS_OK
                     : SS_ERR_PARSE;
    if (lr)
        shadowsync__v1__lookup_reply__free_unpacked(lr, NULL);
    if (er)
        shadowsync__v1__elastic_reply__free_unpacked(er, NULL);
    return st;
}

/* Where a lookup reply's rows go: straight from gRPC's slices. */
typedef struct scatter_arg {
    const ss__emb_spec *spec;
    const chunk *ck;
    float *out;
} scatter_arg;

/* A lookup reply read in place (rq->on_reply): its rows field ends the
 * message (rpc/pb_wire.h), so each row is copied from gRPC's slices to its
 * place, once; before, the reply was gathered into one buffer, unpacked
 * (a second copy of the rows) and then scattered. A reply in another
 * field order takes that way still. */
static ss_status scatter_in_place(ss__rpc_request *rq, const ss__rpc_message *msg, void *arg) {
    (void)rq;
    const scatter_arg *a = arg;
    const size_t row_bytes = a->spec->dim * sizeof(float), len = ss__rpc_message_length(msg);
    uint8_t head[64];
    size_t have = len < sizeof head ? len : sizeof head, prefix, off;
    if (ss__rpc_message_copy(msg, 0, head, have) &&
        ss__pb_find_trailing_bytes_in(head, have, len, 1, &prefix, &off)) {
        if (len - off != a->ck->n * row_bytes)
            return SS_ERR_PARSE;
        for (size_t k = 0; k < a->ck->n; k++)
            if (!ss__rpc_message_copy(msg, off + k * row_bytes,
                                      a->out + a->ck->pos[k] * a->spec->dim, row_bytes))
                return SS_ERR_PARSE;
        return SS_OK;
    }
    ss__rpc_request whole = {.resp_len = len, .resp = malloc(len ? len : 1)};
    ss_status st = whole.resp && ss__rpc_message_copy(msg, 0, whole.resp, len)
                       ? scatter(OP_LOOKUP, a->spec, SS_ENC_F32, &whole, a->ck, a->out)
                       : SS_ERR_NO_MEMORY;
    free(whole.resp);
    return st;
}

/* A lookup chunk whose rows are one run of out: a bulk stream reads them
 * from the socket into their place (ss__rpc_request's into), where they
 * were read into a buffer and copied (1 MiB a batch of 4,096 rows). */
static void rows_straight_in(const ss__emb_spec *spec, const chunk *ck, float *out,
                             ss__rpc_request *call) {
    if (!consecutive(ck))
        return;
    call->into = out + ck->pos[0] * spec->dim;
    call->into_len = ck->n * spec->dim * sizeof(float);
    call->into_field = 1; /* LookupReply.rows */
}

static const char *method_of(row_op op) {
    switch (op) {
    case OP_LOOKUP:
        return SS_EMB_M_LOOKUP;
    case OP_PUSH:
        return SS_EMB_M_PUSH;
    case OP_PUSH_LOOKUP:
        return SS_EMB_M_PUSH_LOOKUP;
    default:
        return SS_EMB_M_ELASTIC;
    }
}

/* Positions of a set's ids grouped by shard (a counting sort): shard s's
 * are pos[start[s] .. start[s + 1]). */
typedef struct by_shard {
    size_t *pos;
    size_t start[MAX_SHARDS + 1];
    size_t chunk; /* ids a call, at most */
} by_shard;

static ss_status split(const ss__emb_client *c, uint32_t tid, const id_set *set, by_shard *b) {
    memset(b->start, 0, sizeof b->start);
    b->pos = malloc(set->n * sizeof *b->pos + 1);
    uint32_t *shard = malloc(set->n * sizeof *shard + 1);
    if (!b->pos || !shard) {
        free(shard);
        return SS_ERR_NO_MEMORY;
    }
    size_t count[MAX_SHARDS + 1] = {0};
    for (size_t i = 0; i < set->n; i++) {
        shard[i] = ss__emb_shard_of(tid, set->ids[i], c->shards);
        count[shard[i] + 1]++;
    }
    for (uint32_t s = 0; s < c->shards; s++)
        count[s + 1] += count[s];
    memcpy(b->start, count, sizeof b->start);
    for (size_t i = 0; i < set->n; i++)
        b->pos[count[shard[i]]++] = i;
    free(shard);
    return SS_OK;
}

static size_t chunks_in(const by_shard *b, uint32_t s) {
    return (b->start[s + 1] - b->start[s] + b->chunk - 1) / b->chunk;
}

/* Calls to shard s: chunk k of the main part and chunk k of the push part
 * (none unless OP_PUSH_LOOKUP: its by_shard is all zero) share call k. */
static size_t calls_to(const by_shard *bm, const by_shard *bp, uint32_t s) {
    const size_t m = chunks_in(bm, s), p = chunks_in(bp, s);
    return m > p ? m : p;
}

/* Chunk k of shard s (empty past the end). */
static chunk chunk_at(const by_shard *b, uint32_t s, size_t k) {
    const size_t lo = b->start[s] + k * b->chunk, end = b->start[s + 1];
    if (lo >= end)
        return (chunk){NULL, 0};
    return (chunk){b->pos + lo, end - lo < b->chunk ? end - lo : b->chunk};
}

/* Marks the positions of a chunk (a call refused for its epoch). */
static void mark(const chunk *ck, bool *marks) {
    for (size_t k = 0; marks && k < ck->n; k++)
        marks[ck->pos[k]] = true;
}

/* One op over the shards: each shard's ids cut into chunks, one call per
 * chunk (OP_PUSH_LOOKUP: chunk k of the push and chunk k of the lookup in
 * call k of the shard), all in flight at once. Calls refused for their
 * shard map epoch mark their positions in stale_main / stale_push (when
 * given), and *stale says whether those were the only failures: the
 * other calls' work is done (rows and deltas in out). c->lock held. */
static ss_status sharded_once(ss__emb_client *c, row_op op, const ss__emb_spec *spec,
                              const id_set *main, const id_set *push, float alpha, float *out,
                              bool *stale_main, bool *stale_push, bool *stale) {
    const uint32_t tid = ss__emb_table_id(spec->name);
    const size_t chunk = c->streams ? SS_EMB_BULK_CHUNK : SS_EMB_CLIENT_CHUNK;
    by_shard bm = {.chunk = chunk}, bp = {.chunk = chunk};
    ss_status st = split(c, tid, main, &bm);
    if (st == SS_OK && op == OP_PUSH_LOOKUP)
        st = split(c, tid, push, &bp);
    size_t ncalls = 0;
    for (uint32_t s = 0; st == SS_OK && s < c->shards; s++)
        ncalls += calls_to(&bm, &bp, s);
    call_part *cp = calloc(ncalls + 1, sizeof *cp);
    ss__rpc_request *calls = calloc(ncalls + 1, sizeof *calls);
    scatter_arg *sa = calloc(ncalls + 1, sizeof *sa);
    if (st == SS_OK && (!cp || !calls || !sa))
        st = SS_ERR_NO_MEMORY;
    const bool rows_back = op == OP_LOOKUP || op == OP_PUSH_LOOKUP; /* read in place */
    size_t j = 0;
    for (uint32_t s = 0; st == SS_OK && s < c->shards; s++) {
        const size_t nk = calls_to(&bm, &bp, s);
        for (size_t k = 0; k < nk && st == SS_OK; k++, j++) {
            cp[j].main = chunk_at(&bm, s, k);
            if (op == OP_PUSH_LOOKUP)
                cp[j].push = chunk_at(&bp, s, k);
            calls[j].ch = c->ch[s];
            calls[j].method = method_of(op);
            if (!pack_chunk(op, spec, main, push, alpha, &cp[j], &calls[j], &cp[j].owned))
                st = SS_ERR_NO_MEMORY;
            if (rows_back) {
                sa[j] = (scatter_arg){spec, &cp[j].main, out};
                calls[j].on_reply = scatter_in_place;
                calls[j].on_reply_arg = &sa[j];
                rows_straight_in(spec, &cp[j].main, out, &calls[j]);
            }
        }
    }
    const bool built = st == SS_OK;
    if (st == SS_OK)
        st = ss__rpc_call_many(calls, ncalls, c->timeout_ms, true); /* streams: bulk_link.h */
    *stale = built && st != SS_OK && stale_main;
    for (size_t i = 0; *stale && i < ncalls; i++) {
        if (calls[i].status == SS_OK)
            continue;
        if (ss__rpc_refused_for_epoch(calls[i].status, calls[i].msg)) {
            mark(&cp[i].main, stale_main);
            mark(&cp[i].push, stale_push);
        } else {
            *stale = false;
        }
    }
    if (st != SS_OK && calls && !*stale) {
        for (size_t i = 0; i < ncalls; i++)
            if (calls[i].status != SS_OK && calls[i].msg[0]) {
                ss__log(SS_LOG_WARN, "emb", "event=call_failed method=%s status=%s msg=\"%s\"",
                        method_of(op), ss_status_name(calls[i].status), calls[i].msg);
                break;
            }
    }
    for (size_t i = 0; (st == SS_OK || *stale) && i < ncalls && op == OP_ELASTIC; i++)
        if (calls[i].status == SS_OK) {
            ss_status e = scatter(op, spec, main->enc, &calls[i], &cp[i].main, out);
            if (e != SS_OK) {
                st = e;
                *stale = false;
            }
        }
    for (size_t i = 0; calls && i < ncalls; i++) {
        free((void *)calls[i].req);
        free(calls[i].resp);
        if (cp)
            free(cp[i].owned);
    }
    free(calls);
    free(cp);
    free(sa);
    free(bm.pos);
    free(bp.pos);
    return st;
}

/* The rows of a set at marked positions, packed: ids, their floats in,
 * and where each came from. */
typedef struct subset {
    id_set set;
    uint64_t *ids;
    float *in;
    size_t *pos;
    bool *marks; /* the retry's own stale marks */
} subset;

static bool pick(const id_set *from, const bool *marks, size_t dim, subset *out) {
    memset(out, 0, sizeof *out);
    if (!from)
        return true;
    size_t n = 0;
    for (size_t i = 0; i < from->n; i++)
        n += marks[i];
    out->ids = malloc(n * sizeof *out->ids + 1);
    out->pos = malloc(n * sizeof *out->pos + 1);
    out->marks = calloc(n + 1, sizeof *out->marks);
    out->in = from->in ? malloc(n * dim * sizeof *out->in + 1) : NULL;
    if (!out->ids || !out->pos || !out->marks || (from->in && !out->in))
        return false;
    size_t k = 0;
    for (size_t i = 0; i < from->n; i++)
        if (marks[i]) {
            out->ids[k] = from->ids[i];
            out->pos[k] = i;
            if (from->in)
                memcpy(out->in + k * dim, from->in + i * dim, dim * sizeof(float));
            k++;
        }
    out->set = (id_set){out->ids, n, out->in, from->enc};
    return true;
}

static void subset_free(subset *s) {
    free(s->ids);
    free(s->in);
    free(s->pos);
    free(s->marks);
}

/* Marks again what the retry found stale once more (its own marks). */
static void remark(const subset *s, bool *marks, size_t n) {
    memset(marks, 0, n * sizeof *marks);
    for (size_t k = 0; k < s->set.n; k++)
        marks[s->pos[k]] = s->marks[k];
}

/* The marked part of an op once more, routed by the channels now. */
static ss_status retry_marked(ss__emb_client *c, row_op op, const ss__emb_spec *spec,
                              const id_set *main, const id_set *push, float alpha, float *out,
                              bool *sm, bool *sp, bool *stale) {
    subset m, p;
    const size_t dim = spec->dim;
    ss_status st = pick(main, sm, dim, &m) && pick(push, sp, dim, &p) ? SS_OK : SS_ERR_NO_MEMORY;
    float *o = out && m.set.n ? malloc(m.set.n * dim * sizeof *o) : NULL;
    if (st == SS_OK && out && m.set.n && !o)
        st = SS_ERR_NO_MEMORY;
    *stale = false;
    if (st == SS_OK) {
        pthread_rwlock_rdlock(&c->lock);
        if (op == OP_PUSH_LOOKUP && m.set.n && p.set.n)
            st = sharded_once(c, op, spec, &m.set, &p.set, alpha, o, m.marks, p.marks, stale);
        else if (op == OP_PUSH_LOOKUP && p.set.n)
            st = sharded_once(c, OP_PUSH, spec, &p.set, NULL, alpha, NULL, p.marks, NULL, stale);
        else if (m.set.n)
            st = sharded_once(c, op == OP_PUSH_LOOKUP ? OP_LOOKUP : op, spec, &m.set, NULL, alpha,
                              o, m.marks, NULL, stale);
        pthread_rwlock_unlock(&c->lock);
    }
    for (size_t k = 0; o && (st == SS_OK || *stale) && k < m.set.n; k++)
        if (!m.marks[k])
            memcpy(out + m.pos[k] * dim, o + k * dim, dim * sizeof(float));
    if (*stale) {
        remark(&m, sm, main->n);
        if (push)
            remark(&p, sp, push->n);
    }
    free(o);
    subset_free(&m);
    subset_free(&p);
    return st;
}

/* An op over the shards; the part refused for its shard map epoch is
 * routed again by the map file (when the client follows one) until it
 * goes through or the client's timeout passes: each row is applied once,
 * by the shard that owns it under the newest map. */
static ss_status sharded(ss__emb_client *c, row_op op, const ss__emb_spec *spec, const id_set *main,
                         const id_set *push, float alpha, float *out) {
    pthread_rwlock_rdlock(&c->lock);
    const bool follows = *c->map != '\0';
    bool *sm = follows ? calloc(main->n + 1, sizeof *sm) : NULL;
    bool *sp = follows && push ? calloc(push->n + 1, sizeof *sp) : NULL;
    bool stale = false;
    ss_status st = follows && (!sm || (push && !sp))
                       ? SS_ERR_NO_MEMORY
                       : sharded_once(c, op, spec, main, push, alpha, out, sm, sp, &stale);
    pthread_rwlock_unlock(&c->lock);
    const uint64_t deadline = ss__now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
    while (stale && ss__now_ns() < deadline) {
        if (!reroute(c))
            ss__sleep_ns(100000000ull); /* the servers read the new map within 200 ms */
        st = retry_marked(c, op, spec, main, push, alpha, out, sm, sp, &stale);
    }
    free(sm);
    free(sp);
    return st;
}

/* Lookups only read (a row a shard does not hold is not made): one that
 * failed in transit or on its server's way to another (SS_ERR_IO: a
 * connection reset mid-call, an old shard not reached during a move) is
 * made again, after 50 ms and then twice as long, up to LOOKUP_RETRIES
 * times while the client's timeout allows. Nothing that writes is: a
 * push applied twice would train twice. */
#define LOOKUP_RETRIES 3

ss_status ss__emb_client_lookup(ss__emb_client *c, const ss__emb_spec *spec, const uint64_t *ids,
                                size_t n, float *rows) {
    if (n == 0)
        return SS_OK;
    const uint64_t until = ss__now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
    ss_status st;
    for (unsigned attempt = 0;; attempt++) {
        st = sharded(c, OP_LOOKUP, spec, &(id_set){ids, n, NULL, SS_ENC_F32}, NULL, 0.0f, rows);
        const uint64_t pause = 50000000ull << attempt;
        if (st != SS_ERR_IO || attempt == LOOKUP_RETRIES || ss__now_ns() + pause > until)
            return st;
        ss__log(SS_LOG_WARN, "emb", "event=lookup_retried table=%s attempt=%u status=%s",
                spec->name, attempt + 1, ss_status_name(st));
        ss__sleep_ns(pause);
    }
}

ss_status ss__emb_client_push(ss__emb_client *c, const ss__emb_spec *spec, const uint64_t *ids,
                              size_t n, const float *grads) {
    if (n == 0)
        return SS_OK;
    return sharded(c, OP_PUSH, spec, &(id_set){ids, n, grads, SS_ENC_F32}, NULL, 0.0f, NULL);
}

ss_status ss__emb_client_push_lookup(ss__emb_client *c, const ss__emb_spec *spec,
                                     const uint64_t *push_ids, size_t pn, const float *grads,
                                     const uint64_t *ids, size_t n, float *rows) {
    if (pn == 0)
        return ss__emb_client_lookup(c, spec, ids, n, rows);
    if (n == 0)
        return ss__emb_client_push(c, spec, push_ids, pn, grads);
    return sharded(c, OP_PUSH_LOOKUP, spec, &(id_set){ids, n, NULL, SS_ENC_F32},
                   &(id_set){push_ids, pn, grads, SS_ENC_F32}, 0.0f, rows);
}

ss_status ss__emb_client_elastic(ss__emb_client *c, const ss__emb_spec *spec, const uint64_t *ids,
                                 size_t n, const float *x, float alpha, ss__encoding enc,
                                 float *deltas) {
    if (n == 0)
        return SS_OK;
    return sharded(c, OP_ELASTIC, spec, &(id_set){ids, n, x, enc}, NULL, alpha, deltas);
}
