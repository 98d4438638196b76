/* DenseSync server handlers (the client transport is grpc_transport.c). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/dense_service.h"

#include "common/log.h"
#include "common/names.h"
#include "rpc/dense/dense_sync.pb-c.h"
#include "rpc/dense/dense_wire.h"
#include "rpc/pb_wire.h"
#include "rpc/rpc_pb.h"
#include "shadow/central.h"

/* ---- server side ---- */

static void count_rejected(void *ctx) {
    const ss__dense_service *svc = ctx;
    if (svc->rejected)
        ss__counter_add(svc->rejected, 1);
}

static void reject(ss__dense_service *svc, ss__rpc_reply *r, ss_status st, const char *what) {
    r->status = st;
    snprintf(r->message, sizeof r->message, "%s", what);
    count_rejected(svc);
}

/* A refusal of the backend's, with its reason when it said one (a limit,
 * a result that overflowed, a group with no central model yet). */
static void fail(ss__dense_service *svc, ss__rpc_reply *r, ss_status st) {
    const char *why = ss__central_refusal();
    reject(svc, r, st,
           (st == SS_ERR_NON_FINITE || st == SS_ERR_STATE) && *why ? why : ss_strerror(st));
}

/* A float payload must be whole floats and within the group size limit. */
static int check_floats(ss__dense_service *svc, const ProtobufCBinaryData *b, ss__rpc_reply *r) {
    if (b->len == 0 || b->len % sizeof(float) != 0) {
        reject(svc, r, SS_ERR_INVALID_ARGUMENT,
               "float payload must be a non-empty multiple of 4 bytes");
        return 0;
    }
    if (b->len / sizeof(float) > svc->max_floats) {
        reject(svc, r, SS_ERR_SIZE_MISMATCH, "float payload larger than the server's group limit");
        return 0;
    }
    return 1;
}

static int check_group(ss__dense_service *svc, const char *group, ss__rpc_reply *r) {
    /* The one name rule of the project: names end up in /status, metric
     * labels and file names. */
    if (!ss__ps_group_name_valid(group)) {
        reject(svc, r, SS_ERR_INVALID_ARGUMENT, "group name must be " SS_PS_GROUP_RULE);
        return 0;
    }
    return 1;
}

/* A requested group size must be 1 .. the server's limit. */
static int check_size(ss__dense_service *svc, uint64_t size, ss__rpc_reply *r) {
    if (size == 0 || size > svc->max_floats) {
        reject(svc, r, SS_ERR_INVALID_ARGUMENT, "group size must be 1 .. server limit");
        return 0;
    }
    return 1;
}

/* The floats of a checked payload: in place when they are aligned for
 * floats (*owned = NULL), else copied into *owned. */
static const float *floats_of(ss__dense_service *svc, const ProtobufCBinaryData *b, float **owned,
                              ss__rpc_reply *r) {
    *owned = NULL;
    if ((uintptr_t)b->data % _Alignof(float) == 0)
        return (const float *)(const void *)b->data;
    if (!(*owned = malloc(b->len))) {
        fail(svc, r, SS_ERR_NO_MEMORY);
        return NULL;
    }
    memcpy(*owned, b->data, b->len);
    return *owned;
}

/* A reply with bulk floats built in place (ss__rpc_tail_reply_alloc):
 * the handler writes the floats there and bulk_reply_seal writes the
 * header right in front of them, so nothing is copied. */
static float *bulk_reply_alloc(ss__dense_service *svc, size_t bytes, uint8_t **block,
                               ss__rpc_reply *r) {
    float *x = ss__rpc_tail_reply_alloc(bytes, block);
    if (!x)
        fail(svc, r, SS_ERR_NO_MEMORY);
    return x;
}

/* head: the reply message without its tail field; field: that field's
 * number. Takes the block (freed with the reply). */
static void bulk_reply_seal(ss__dense_service *svc, const ProtobufCMessage *head, uint32_t field,
                            uint8_t *block, size_t bytes, ss__rpc_reply *r) {
    if (ss__rpc_tail_reply_seal(head, field, block, bytes, r) != SS_OK)
        fail(svc, r, SS_ERR_INTERNAL);
}

/* What both bulk handlers need before they compute: the group name and
 * the payload checked, the snapshot's floats (in place or in *owned) and
 * the reply block with room for as many floats (*block). NULL: refused,
 * reply set. */
static float *bulk_in_out(ss__dense_service *svc, const char *group,
                          const ProtobufCBinaryData *snap, const float **s, float **owned,
                          uint8_t **block, ss__rpc_reply *r) {
    if (!check_group(svc, group, r) || !check_floats(svc, snap, r) ||
        !(*s = floats_of(svc, snap, owned, r)))
        return NULL;
    return bulk_reply_alloc(svc, snap->len, block, r);
}

/* ---- compressed sync (shadow/codec.h) ---- */

/* An encoded upload checked (encoding, chunk size, payload length) and its
 * reply block allocated; NULL: refused, reply set. */
static uint8_t *encoded_in_out(ss__dense_service *svc, const char *group, uint32_t enc, bool reset,
                               uint64_t seq, uint64_t size, const ProtobufCBinaryData *snap,
                               ss__codec_upload *up, uint8_t **block, ss__rpc_reply *r) {
    if (!check_group(svc, group, r))
        return NULL;
    if (!ss__encoding_name((ss__encoding)enc) || enc == SS_ENC_F32) {
        char why[128];
        snprintf(why, sizeof why, "unknown encoding %u (fp16 = 1, bf16 = 2, int8 = 3)", enc);
        reject(svc, r, SS_ERR_INVALID_ARGUMENT, why);
        return NULL;
    }
    if (!check_size(svc, size, r))
        return NULL;
    size_t want = reset ? ss__codec_size(SS_ENC_F32, size) : ss__codec_size(enc, size);
    if (snap->len != want) {
        char why[200];
        snprintf(why, sizeof why, "a %s payload of %llu floats is %zu bytes, not %zu",
                 reset ? "reset (f32)" : ss__encoding_name((ss__encoding)enc),
                 (unsigned long long)size, want, snap->len);
        reject(svc, r, SS_ERR_SIZE_MISMATCH, why);
        return NULL;
    }
    *up = (ss__codec_upload){.enc = (ss__encoding)enc,
                             .reset = reset,
                             .seq = seq,
                             .payload = snap->data,
                             .len = snap->len};
    return (uint8_t *)bulk_reply_alloc(svc, ss__codec_size(enc, size), block, r);
}

/* The refusals only compressed sync has, said so that an operator knows. */
static void fail_encoded(ss__dense_service *svc, ss__rpc_reply *r, ss_status st) {
    if (st == SS_ERR_STATE)
        reject(svc, r, st,
               "compressed sync: this member's mirror is out of step (a lost reply, a retried "
               "call or a restarted PS); send a reset");
    else if (st == SS_ERR_INVALID_ARGUMENT)
        reject(svc, r, st,
               "compressed sync: the payload does not decode (NaN/Inf, or an int8 "
               "block whose min is above its max), or bad alpha");
    else if (st == SS_ERR_TOO_LARGE && *ss__central_refusal())
        reject(svc, r, st, ss__central_refusal()); /* which limit */
    else
        fail(svc, r, st);
}

static void serve_join(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__dense_service *svc = ctx;
    const Shadowsync__V1__JoinRequest *m = request;
    if (check_group(svc, m->group, reply) && check_size(svc, m->size, reply)) {
        Shadowsync__V1__JoinReply out = SHADOWSYNC__V1__JOIN_REPLY__INIT;
        ss_status st =
            m->recut ? ss__central_join_recut(svc->centre, m->group, m->size, m->fresh,
                                              m->member_key, &out.member)
                     : ss__central_join(svc->centre, m->group, m->size, m->member_key, &out.member);
        if (st == SS_OK)
            ss__rpc_reply_pack(&out.base, reply);
        else if (*ss__central_refusal())
            reject(svc, reply, st, ss__central_refusal()); /* which limit, which clash */
        else
            fail(svc, reply, st);
    }
}

static const ss__rpc_request_type join_request = {&shadowsync__v1__join_request__descriptor,
                                                  serve_join, count_rejected, 0, 0};

static void serve_leave(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__dense_service *svc = ctx;
    const Shadowsync__V1__LeaveRequest *m = request;
    if (check_group(svc, m->group, reply)) {
        ss_status st = ss__central_leave(svc->centre, m->group, m->member);
        if (st == SS_OK && svc->left_the_map && svc->left_the_map(svc->map_ctx) &&
            ss__central_retire_empty(svc->centre, m->group))
            ss__log(SS_LOG_INFO, "ps", "event=chunk_retired group=%s why=\"not in the shard map\"",
                    m->group);
        Shadowsync__V1__LeaveReply out = SHADOWSYNC__V1__LEAVE_REPLY__INIT;
        if (st == SS_OK)
            ss__rpc_reply_pack(&out.base, reply);
        else
            fail(svc, reply, st);
    }
}

static const ss__rpc_request_type leave_request = {&shadowsync__v1__leave_request__descriptor,
                                                   serve_leave, count_rejected, 0, 0};

/* One EASGD or MA/BMUF call once its request is unpacked. The two differ
 * only in what the centre computes and in the reply's head; the snapshot
 * comes in f32 or encoded, and the answer goes out the same way. */
typedef struct dense_call {
    const char *group;
    uint64_t member;
    const ProtobufCBinaryData *snap;
    uint32_t encoding;
    bool mirror_reset;
    uint64_t mirror_seq;
    uint64_t size;
    bool round;                  /* false: EASGD */
    float alpha;                 /* EASGD */
    const ss__bmuf_params *bmuf; /* round: NULL = S-MA */
} dense_call;

/* The fields EasgdRequest and RoundRequest share, for a dense_call. */
#define DENSE_CALL_FIELDS(m, snapshot)                                                             \
    .group = (m)->group, .member = (m)->member, .snap = (snapshot), .encoding = (m)->encoding,     \
    .mirror_reset = (m)->mirror_reset, .mirror_seq = (m)->mirror_seq, .size = (m)->size

/* The centre's part: up != NULL for an encoded snapshot (its answer in
 * enc_out), else the f32 snapshot s of n floats (its answer in out). */
static ss_status centre_compute(ss__dense_service *svc, const dense_call *c, const float *s,
                                float *out, size_t n, const ss__codec_upload *up, uint8_t *enc_out,
                                ss__round_result *rr) {
    if (c->bmuf && !ss__bmuf_params_valid(c->bmuf))
        return SS_ERR_INVALID_ARGUMENT;
    if (up && c->round)
        return ss__central_round_encoded(svc->centre, c->group, c->member, c->size, up, c->bmuf,
                                         enc_out, rr);
    if (up)
        return ss__central_easgd_encoded(svc->centre, c->group, c->member, c->size, c->alpha, up,
                                         enc_out);
    if (c->round)
        return ss__central_round(svc->centre, c->group, c->member, s, c->bmuf, out, n, rr);
    return ss__central_easgd(svc->centre, c->group, c->member, s, c->alpha, out, n);
}

/* The reply: its head (a round's number and participants) and the answer's
 * bytes, which the reply takes over. */
static void dense_call_seal(ss__dense_service *svc, const dense_call *c, const ss__round_result *rr,
                            uint8_t *block, size_t bytes, ss__rpc_reply *reply) {
    if (c->round) {
        Shadowsync__V1__RoundReply head = SHADOWSYNC__V1__ROUND_REPLY__INIT;
        head.round = rr->round;
        head.participants = rr->participants;
        bulk_reply_seal(svc, &head.base, 3, block, bytes, reply);
    } else {
        Shadowsync__V1__EasgdReply head = SHADOWSYNC__V1__EASGD_REPLY__INIT;
        bulk_reply_seal(svc, &head.base, 1, block, bytes, reply);
    }
}

static void serve_dense_call(ss__dense_service *svc, const dense_call *c, ss__rpc_reply *reply) {
    float *owned = NULL, *out;
    const float *s;
    uint8_t *block = NULL, *enc_out;
    ss__codec_upload up;
    ss__round_result rr = {0};
    if (c->encoding != SHADOWSYNC__V1__ENCODING__F32) {
        if ((enc_out = encoded_in_out(svc, c->group, c->encoding, c->mirror_reset, c->mirror_seq,
                                      c->size, c->snap, &up, &block, reply))) {
            ss_status st = centre_compute(svc, c, NULL, NULL, 0, &up, enc_out, &rr);
            if (st == SS_OK) {
                dense_call_seal(svc, c, &rr, block, ss__codec_size(up.enc, c->size), reply);
                block = NULL; /* the reply's now */
            } else {
                fail_encoded(svc, reply, st);
            }
        }
    } else if ((out = bulk_in_out(svc, c->group, c->snap, &s, &owned, &block, reply))) {
        size_t n = c->snap->len / sizeof(float);
        ss_status st = centre_compute(svc, c, s, out, n, NULL, NULL, &rr);
        if (st == SS_OK) {
            dense_call_seal(svc, c, &rr, block, c->snap->len, reply);
            block = NULL;
        } else if (st == SS_ERR_INVALID_ARGUMENT && c->bmuf) {
            reject(svc, reply, st,
                   "bmuf needs eta in [0, 1) and zeta in (0, 1 / (1 - eta)], the same on every "
                   "member, and a group that no member runs with S-MA");
        } else {
            fail(svc, reply, st);
        }
    }
    free(owned);
    free(block);
}

/* EASGD and round requests: their snapshots are read in place when they
 * end the message. */
static void serve_easgd(void *ctx, void *request, ss__rpc_reply *reply) {
    const Shadowsync__V1__EasgdRequest *m = request;
    dense_call c = {DENSE_CALL_FIELDS(m, &m->snapshot), .alpha = m->alpha};
    serve_dense_call(ctx, &c, reply);
}

static const ss__rpc_request_type easgd_request = {
    &shadowsync__v1__easgd_request__descriptor, serve_easgd, count_rejected, 4,
    offsetof(Shadowsync__V1__EasgdRequest, snapshot)};

static void serve_round(void *ctx, void *request, ss__rpc_reply *reply) {
    const Shadowsync__V1__RoundRequest *m = request;
    ss__bmuf_params bp = {.eta = m->bmuf_eta, .zeta = m->bmuf_zeta, .nesterov = m->bmuf_nesterov};
    dense_call c = {DENSE_CALL_FIELDS(m, &m->snapshot), .round = true,
                    .bmuf = m->bmuf ? &bp : NULL};
    serve_dense_call(ctx, &c, reply);
}

static const ss__rpc_request_type round_request = {
    &shadowsync__v1__round_request__descriptor, serve_round, count_rejected, 3,
    offsetof(Shadowsync__V1__RoundRequest, snapshot)};

static void serve_central(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__dense_service *svc = ctx;
    const Shadowsync__V1__ReadCentralRequest *m = request;
    if (check_group(svc, m->group, reply) && check_size(svc, m->size, reply)) {
        float *c = malloc(m->size * sizeof(float));
        ss_status st = c ? ss__central_read(svc->centre, m->group, c, m->size) : SS_ERR_NO_MEMORY;
        if (st == SS_OK) {
            Shadowsync__V1__ReadCentralReply out = SHADOWSYNC__V1__READ_CENTRAL_REPLY__INIT;
            out.central.data = (uint8_t *)c;
            out.central.len = m->size * sizeof(float);
            ss__rpc_reply_pack(&out.base, reply);
        } else {
            fail(svc, reply, st);
        }
        free(c);
    }
}

static const ss__rpc_request_type central_request = {
    &shadowsync__v1__read_central_request__descriptor, serve_central, count_rejected, 0, 0};

static void serve_heartbeat(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__dense_service *svc = ctx;
    const Shadowsync__V1__HeartbeatRequest *m = request;
    if (check_group(svc, m->group, reply)) {
        ss_status st = ss__central_heartbeat(svc->centre, m->group, m->member);
        Shadowsync__V1__HeartbeatReply out = SHADOWSYNC__V1__HEARTBEAT_REPLY__INIT;
        out.round_waiting =
            st == SS_OK && ss__central_round_waiting(svc->centre, m->group, m->member);
        if (st == SS_OK)
            ss__rpc_reply_pack(&out.base, reply);
        else
            fail(svc, reply, st);
    }
}

static const ss__rpc_request_type heartbeat_request = {
    &shadowsync__v1__heartbeat_request__descriptor, serve_heartbeat, count_rejected, 0, 0};

static void serve_checkpoint(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__dense_service *svc = ctx;
    (void)request; /* no fields */
    if (!svc->checkpoint) {
        reply->status = SS_ERR_STATE;
        snprintf(reply->message, sizeof reply->message,
                 "this server has no checkpoint directory (--checkpoint-dir)");
        return;
    }
    char path[4096];
    size_t groups = 0;
    ss_status st = svc->checkpoint(svc->checkpoint_ctx, path, sizeof path, &groups);
    if (st != SS_OK) {
        fail(svc, reply, st);
        return;
    }
    Shadowsync__V1__CheckpointReply out = SHADOWSYNC__V1__CHECKPOINT_REPLY__INIT;
    out.path = path;
    out.groups = groups;
    ss__rpc_reply_pack(&out.base, reply);
}

static const ss__rpc_request_type checkpoint_request = {
    &shadowsync__v1__checkpoint_request__descriptor, serve_checkpoint, count_rejected, 0, 0};

static const ss__rpc_method dense_methods[] = {
    /* chunks: the server's limit (--max-group-floats); the rest: bytes */
    {SS_DENSE_M_JOIN, NULL, false, NULL, false, SS_RPC_SMALL_REQUEST, &join_request, false, false},
    {SS_DENSE_M_LEAVE, NULL, false, NULL, false, SS_RPC_SMALL_REQUEST, &leave_request, false,
     false},
    /* on the bulk stream too (the last true) */
    {SS_DENSE_M_EASGD, NULL, false, NULL, false, 0, &easgd_request, false, true},
    /* waits for the round to close (on a stream, on the stream's own thread) */
    {SS_DENSE_M_ROUND, NULL, true, NULL, false, 0, &round_request, false, true},
    /* only reads */
    {SS_DENSE_M_CENTRAL, NULL, false, NULL, true, SS_RPC_SMALL_REQUEST, &central_request, false,
     false},
    {SS_DENSE_M_HEARTBEAT, NULL, false, NULL, false, SS_RPC_SMALL_REQUEST, &heartbeat_request,
     false, false},
    /* writes a file */
    {SS_DENSE_M_CHECKPOINT, NULL, true, NULL, false, SS_RPC_SMALL_REQUEST, &checkpoint_request,
     false, false},
};

const ss__rpc_method *ss__dense_service_methods(size_t *count) {
    if (count)
        *count = sizeof dense_methods / sizeof *dense_methods;
    return dense_methods;
}
