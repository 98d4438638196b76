/* The client transport: an ss__transport over S shadowsync-ps shards.
 *
 * A group of n floats is cut into contiguous shard ranges (shard s holds
 * [n s / S, n (s+1) / S)) and each range into chunks of at most
 * chunk_floats; every chunk is a group of its own on its server, named
 * "<group>[<lo>:<hi>)". One exchange sends all of a group's chunks as
 * parallel unary calls (ss__rpc_call_many), so shards work at once and a
 * 100 MB group never needs a 100 MB message. Each chunk has its own member
 * id on its server; this file maps the engine's one member id to them. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/names.h"
#include "common/strbuf.h"
#include "rpc/dense/dense_sync.pb-c.h"
#include "rpc/dense/dense_wire.h"
#include "rpc/dense/grpc_transport.h"
#include "rpc/pb_wire.h"
#include "rpc/rpc_pb.h"

typedef struct part {
    char name[300];
    size_t lo, n;
    uint32_t shard;
} part;

/* One joined member: its group's cut and a server member id per chunk;
 * with compressed sync, a mirror per chunk and the buffers of its uploads
 * and replies (chunk i's at byte 4 lo of each: an encoded chunk is never
 * larger than its floats). */
typedef struct membership {
    struct membership *next;
    uint64_t id;
    char *group;
    size_t n;
    part *parts;
    uint64_t *ids;
    size_t nparts;
    uint64_t key;             /* the member's own (ss__transport_ops.join), for its joins again */
    ss__codec_mirror *codecs; /* NULL: float32 */
    uint8_t *upload, *replies;
    _Atomic uint64_t waiting_asked_ns; /* last ss__now_ns round_waiting asked the PS */
    _Atomic bool easgd_only;           /* its calls so far: S-EASGD exchanges only */
} membership;

typedef struct grpc_tp {
    ss__rpc_channel *ch[SS_GRPC_MAX_SHARDS];
    uint32_t nshards;
    size_t chunk;
    /* Chunk calls in flight per shard; adapted to the path when the config
     * gives none (see adapt_window). */
    _Atomic uint32_t window;
    bool window_fixed;
    ss__encoding encoding;
    uint32_t timeout_ms, round_wait_ms, retries;
    bool recut;           /* joins re-cut (JoinRequest.recut) */
    pthread_mutex_t lock; /* guards members and next_id */
    membership *members;
    uint64_t next_id;
} grpc_tp;

/* ---- the cut ---- */

static ss_status cut_group(const grpc_tp *t, const char *group, size_t n, part **out,
                           size_t *count) {
    size_t total = 0;
    for (uint32_t s = 0; s < t->nshards; s++) {
        size_t lo = n * s / t->nshards, hi = n * (s + 1) / t->nshards;
        total += (hi - lo + t->chunk - 1) / t->chunk;
    }
    part *p = calloc(total ? total : 1, sizeof *p);
    if (!p)
        return SS_ERR_NO_MEMORY;
    size_t k = 0;
    for (uint32_t s = 0; s < t->nshards; s++) {
        size_t lo = n * s / t->nshards, hi = n * (s + 1) / t->nshards;
        for (size_t at = lo; at < hi; at += t->chunk) {
            size_t end = hi - at < t->chunk ? hi : at + t->chunk;
            p[k] = (part){.lo = at, .n = end - at, .shard = s};
            if (snprintf(p[k].name, sizeof p[k].name, "%s[%zu:%zu)", group, at, end) >=
                (int)sizeof p[k].name) {
                free(p);
                return SS_ERR_INVALID_ARGUMENT;
            }
            k++;
        }
    }
    *out = p;
    *count = k;
    return SS_OK;
}

static membership *find_member(grpc_tp *t, const char *group, uint64_t id) {
    pthread_mutex_lock(&t->lock);
    membership *m = t->members;
    while (m && !(m->id == id && !strcmp(m->group, group)))
        m = m->next;
    pthread_mutex_unlock(&t->lock);
    return m;
}

/* The joined member a sync call (EASGD exchange, round) is for: NOT_FOUND
 * when it never joined here, SIZE_MISMATCH when its group has another n. */
static ss_status syncing_member(grpc_tp *t, const char *group, uint64_t id, size_t n,
                                const membership **out) {
    const membership *m = find_member(t, group, id);
    if (!m)
        return SS_ERR_NOT_FOUND;
    if (m->n != n)
        return SS_ERR_SIZE_MISMATCH;
    *out = m;
    return SS_OK;
}

static void membership_free(membership *m) {
    if (!m)
        return;
    for (size_t i = 0; m->codecs && i < m->nparts; i++)
        ss__codec_mirror_free(&m->codecs[i]);
    free(m->codecs);
    free(m->upload);
    free(m->replies);
    free(m->group);
    free(m->parts);
    free(m->ids);
    free(m);
}

/* ---- packing and fan-out ---- */

static uint8_t *pack_message(const ProtobufCMessage *m, size_t *len) {
    *len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(*len ? *len : 1);
    if (buf)
        protobuf_c_message_pack(m, buf);
    return buf;
}

/* A fan-out of one request per chunk. */
typedef struct fanout {
    ss__rpc_request *rq;
    size_t n;
    /* Its timing sizes the window (S-EASGD exchanges only: an MA round's
     * replies wait at the PS for the round to close, so when they end says
     * when the slowest member came, not what the path holds). */
    bool adapts_window;
    /* At least this many calls in flight per shard (an MA round's). */
    uint32_t min_window;
} fanout;

static ss_status fanout_init(fanout *f, size_t n) {
    f->rq = calloc(n ? n : 1, sizeof *f->rq);
    f->n = f->rq ? n : 0;
    return f->rq ? SS_OK : SS_ERR_NO_MEMORY;
}

static void fanout_free(fanout *f) {
    for (size_t i = 0; i < f->n; i++) {
        free((void *)f->rq[i].req);
        free(f->rq[i].resp);
    }
    free(f->rq);
}

/* Calls wait for the channel to be ready (up to their deadline) instead of
 * failing fast: a fail-fast call on a channel that lost its server ends at
 * once and takes the reconnect attempt with it (nothing polls it any
 * more), so a restarted PS would be found only by gRPC's backup poller,
 * seconds later. Waiting keeps the call's queue polling the connect. */
#define WAIT_FOR_READY  true
#define WAITING_POLL_NS 10000000ull /* tp_round_waiting asks the PS at most this often */

uint32_t ss__grpc_window_next(uint32_t cur, uint64_t rtt_ns, double interval_ns, size_t channels) {
    if (!rtt_ns || !(interval_ns > 0) || channels == 0)
        return cur;
    const double held = (double)rtt_ns / (interval_ns * (double)channels);
    /* A short path holds under half a chunk: the floor. A longer one gets
     * what it holds and a margin for the chunks being sent and answered. */
    double want = held < 0.5 ? SS_GRPC_WINDOW : SS_GRPC_WINDOW_MARGIN + floor(held + 0.5);
    if (want > SS_GRPC_WINDOW_MAX)
        want = SS_GRPC_WINDOW_MAX;
    const double half = ((double)cur + want) / 2; /* rounded toward want, so it gets there */
    return (uint32_t)(want >= cur ? ceil(half) : floor(half));
}

/* After a batch of chunk calls: the window for the next (see
 * ss__grpc_window_next), from the shortest round trip of its channels. */
static void adapt_window(grpc_tp *t, const fanout *f, const ss__rpc_batch_stats *bs) {
    if (t->window_fixed || bs->large_ok < 3)
        return;
    uint64_t rtt = 0;
    for (size_t i = 0; i < f->n; i++) {
        uint64_t r = ss__rpc_channel_rtt_ns(f->rq[i].ch);
        if (r && (!rtt || r < rtt))
            rtt = r;
    }
    const double interval =
        (double)(bs->last_end_ns - bs->first_end_ns) / (double)(bs->large_ok - 1);
    const uint32_t cur = atomic_load_explicit(&t->window, memory_order_relaxed);
    const uint32_t next = ss__grpc_window_next(cur, rtt, interval, bs->channels);
    atomic_store_explicit(&t->window, next, memory_order_relaxed);
    if (next != cur)
        SS_LOG_DEBUGF("rpc", "event=window window=%u was=%u rtt_us=%.0f interval_us=%.0f", next,
                      cur, (double)rtt / 1e3, interval / 1e3);
}

/* Largest message a chunk produces: its floats plus the envelope. */
static size_t chunk_message_bytes(size_t chunk) {
    return chunk * sizeof(float) + 4096;
}

/* Runs the fan-out (on the shards' bulk streams when the channels have
 * them: rpc/bulk/bulk_link.h); idempotent ones are retried on
 * UNAVAILABLE with backoff (50 ms, doubling), a fresh deadline each time. */
static ss_status fanout_run(grpc_tp *t, fanout *f, uint32_t timeout_ms, bool idempotent) {
    ss__rpc_batch_stats bs;
    uint32_t window = atomic_load_explicit(&t->window, memory_order_relaxed);
    if (window < f->min_window)
        window = f->min_window;
    ss_status st =
        ss__rpc_call_windowed_stats(f->rq, f->n, timeout_ms, WAIT_FOR_READY, window, &bs);
    for (uint32_t attempt = 0; idempotent && st == SS_ERR_IO && attempt < t->retries; attempt++) {
        ss__sleep_ns(50000000ull << (attempt < 5 ? attempt : 5));
        st = ss__rpc_call_windowed_stats(f->rq, f->n, timeout_ms, WAIT_FOR_READY, window, &bs);
    }
    if (st == SS_OK && f->adapts_window)
        adapt_window(t, f, &bs);
    return st;
}

/* ---- the ops ---- */

static ss_status call_one(grpc_tp *t, uint32_t shard, const char *method,
                          const ProtobufCMessage *req, const ProtobufCMessageDescriptor *desc,
                          ProtobufCMessage **reply) {
    return ss__rpc_call_message(t->ch[shard], method, req, t->timeout_ms, WAIT_FOR_READY, desc,
                                reply, NULL, 0);
}

/* Leaves each chunk; a shard that does not answer one is not asked about
 * its other chunks (each would wait the whole timeout for a PS that is
 * gone: its members expire there anyway). */
static void leave_parts(grpc_tp *t, const part *parts, const uint64_t *ids, size_t count) {
    bool gone[SS_GRPC_MAX_SHARDS] = {false};
    for (size_t i = 0; i < count; i++) {
        if (gone[parts[i].shard])
            continue;
        Shadowsync__V1__LeaveRequest req = SHADOWSYNC__V1__LEAVE_REQUEST__INIT;
        req.group = (char *)parts[i].name;
        req.member = ids[i];
        ProtobufCMessage *r;
        ss_status st = call_one(t, parts[i].shard, SS_DENSE_M_LEAVE, &req.base,
                                &shadowsync__v1__leave_reply__descriptor, &r);
        if (st == SS_OK)
            protobuf_c_message_free_unpacked(r, NULL);
        gone[parts[i].shard] = st == SS_ERR_IO || st == SS_ERR_TIMEOUT;
    }
}

/* Joins chunk i of m on its PS (m->ids[i] the PS's id for it); fresh: a
 * re-cutting member's (JoinRequest.fresh). */
static ss_status join_part(grpc_tp *t, membership *m, size_t i, bool fresh) {
    Shadowsync__V1__JoinRequest req = SHADOWSYNC__V1__JOIN_REQUEST__INIT;
    req.group = m->parts[i].name;
    req.size = m->parts[i].n;
    req.recut = t->recut;
    req.fresh = t->recut && fresh;
    req.member_key = m->key;
    ProtobufCMessage *r;
    ss_status st = call_one(t, m->parts[i].shard, SS_DENSE_M_JOIN, &req.base,
                            &shadowsync__v1__join_reply__descriptor, &r);
    if (st == SS_OK) {
        m->ids[i] = ((Shadowsync__V1__JoinReply *)r)->member;
        protobuf_c_message_free_unpacked(r, NULL);
    }
    return st;
}

static ss_status join_cut(grpc_tp *t, const char *group, size_t n, bool fresh, uint64_t key,
                          uint64_t *member) {
    membership *m = calloc(1, sizeof *m);
    if (!m)
        return SS_ERR_NO_MEMORY;
    ss_status st = cut_group(t, group, n, &m->parts, &m->nparts);
    m->group = strdup(group);
    m->n = n;
    m->key = key;
    m->ids = calloc(m->nparts ? m->nparts : 1, sizeof *m->ids);
    if (st == SS_OK && (!m->group || !m->ids))
        st = SS_ERR_NO_MEMORY;
    if (st == SS_OK && t->encoding != SS_ENC_F32) {
        m->codecs = calloc(m->nparts ? m->nparts : 1, sizeof *m->codecs);
        m->upload = malloc(n * sizeof(float));
        m->replies = malloc(n * sizeof(float));
        if (!m->codecs || !m->upload || !m->replies)
            st = SS_ERR_NO_MEMORY;
        for (size_t i = 0; st == SS_OK && i < m->nparts; i++)
            st = ss__codec_mirror_init(&m->codecs[i], t->encoding, m->parts[i].n);
    }
    /* A PS that cannot be reached is said so at once (a join would wait
     * for it until its deadline, and say only that the deadline passed). */
    for (size_t i = 0; st == SS_OK && i < m->nparts; i++)
        if (i == 0 || m->parts[i].shard != m->parts[i - 1].shard)
            st = ss__rpc_channel_reachable(t->ch[m->parts[i].shard], "the PS",
                                           t->timeout_ms < 2000 ? t->timeout_ms : 2000);
    /* One by one: a join that fails half way leaves the chunks it joined. */
    size_t joined = 0;
    for (; st == SS_OK && joined < m->nparts; joined++)
        st = join_part(t, m, joined, fresh);
    if (st != SS_OK) {
        if (joined > 0)
            leave_parts(t, m->parts, m->ids, joined - 1);
        membership_free(m);
        return st;
    }
    pthread_mutex_lock(&t->lock);
    m->id = t->next_id++;
    m->next = t->members;
    t->members = m;
    pthread_mutex_unlock(&t->lock);
    *member = m->id;
    return SS_OK;
}

/* After a fan-out of m's chunks that some chunks' PS answered NOT_FOUND
 * while others were served (a PS restarted and forgot its members; the
 * others still hold this one): those chunks are joined again, and the
 * call counts as failed in transit (SS_ERR_IO: the engine tries at its
 * next round). NOT_FOUND would have the engine leave every PS and join
 * again, and the PS that did not restart would see its members leave
 * and come back while its rounds waited at their deadline for them.
 * When every chunk was forgotten (expired everywhere) or a join fails,
 * st stands. */
static ss_status rejoin_forgotten(grpc_tp *t, membership *m, const fanout *f, ss_status st) {
    size_t forgotten = 0;
    for (size_t i = 0; i < f->n; i++)
        forgotten += f->rq[i].status == SS_ERR_NOT_FOUND;
    if (st != SS_ERR_NOT_FOUND || forgotten == 0 || forgotten == m->nparts || f->n != m->nparts)
        return st;
    for (size_t i = 0; i < m->nparts; i++)
        if (f->rq[i].status == SS_ERR_NOT_FOUND && join_part(t, m, i, false) != SS_OK)
            return st;
    SS_LOG_INFOF("rpc", "event=chunks_rejoined group=%s chunks=%zu of=%zu", m->group, forgotten,
                 m->nparts);
    return SS_ERR_IO;
}

static ss_status tp_join(void *impl, const char *group, size_t n, uint64_t key, uint64_t *member) {
    return join_cut(impl, group, n, false, key, member);
}

static ss_status tp_leave(void *impl, const char *group, uint64_t member) {
    grpc_tp *t = impl;
    pthread_mutex_lock(&t->lock);
    membership **pp = &t->members;
    while (*pp && !((*pp)->id == member && !strcmp((*pp)->group, group)))
        pp = &(*pp)->next;
    membership *m = *pp;
    if (m)
        *pp = m->next;
    pthread_mutex_unlock(&t->lock);
    if (!m)
        return SS_ERR_NOT_FOUND;
    leave_parts(t, m->parts, m->ids, m->nparts);
    membership_free(m);
    return SS_OK;
}

/* How the replies of a fan-out of floats are read, each as it arrives: the
 * floats of chunk i go to out at its place, straight from gRPC's slices. */
typedef struct floats_reader {
    const part *parts;
    const ss__rpc_request *first; /* the fan-out's calls: chunk i = rq - first */
    float *out;
    /* Compressed sync: chunk i's encoded reply goes to raw + 4 lo. */
    uint8_t *raw;
    ss__encoding enc;
    const ProtobufCMessageDescriptor *desc; /* the reply type */
    uint32_t field;                         /* its float field, by number */
    size_t field_offset;                    /* and in the unpacked struct */
    /* Optional: sees each reply's small fields (a round's number). */
    void (*small)(const ProtobufCMessage *m, void *arg);
    void *small_arg;
} floats_reader;
static ss_status read_floats_reply(ss__rpc_request *rq, const ss__rpc_message *msg, void *arg);
static void reply_in_place(const floats_reader *br, const part *p, ss__rpc_request *rq);

/* Builds one request per chunk of m with build(i) and runs them; br
 * (optional) reads each reply as it arrives (read_floats_reply). */
typedef uint8_t *(*build_fn)(const membership *m, size_t i, const void *arg, size_t *len,
                             ss__rpc_request *rq);

static ss_status fan(grpc_tp *t, const membership *m, const char *method, build_fn build,
                     const void *arg, floats_reader *br, uint32_t timeout_ms, bool idempotent,
                     fanout *f) {
    ss_status st = fanout_init(f, m->nparts);
    if (br)
        br->first = f->rq;
    /* An MA/BMUF round's calls wait at the PS for the other members. */
    const bool round = strcmp(method, SS_DENSE_M_ROUND) == 0;
    for (size_t i = 0; st == SS_OK && i < m->nparts; i++) {
        f->rq[i].ch = t->ch[m->parts[i].shard];
        f->rq[i].method = method;
        f->rq[i].on_reply = br ? read_floats_reply : NULL;
        f->rq[i].on_reply_arg = br;
        if (br && !br->small) /* on a stream, read from the socket into place */
            reply_in_place(br, &m->parts[i], &f->rq[i]);
        f->rq[i].req = build(m, i, arg, &f->rq[i].len, &f->rq[i]);
        f->rq[i].waits = round;
        if (!f->rq[i].req)
            st = SS_ERR_NO_MEMORY;
    }
    f->adapts_window = strcmp(method, SS_DENSE_M_EASGD) == 0;
    f->min_window = round ? SS_GRPC_ROUND_WINDOW : 0;
    if (st == SS_OK)
        st = fanout_run(t, f, timeout_ms, idempotent);
    return st;
}

/* Where chunk p's reply floats (or encoded bytes) go, and how many. */
static uint8_t *reply_place(const floats_reader *br, const part *p, size_t *want) {
    *want = ss__codec_size(br->raw ? br->enc : SS_ENC_F32, p->n);
    return br->raw ? br->raw + p->lo * sizeof(float) : (uint8_t *)(br->out + p->lo);
}

static void reply_in_place(const floats_reader *br, const part *p, ss__rpc_request *rq) {
    rq->into = reply_place(br, p, &rq->into_len);
    rq->into_field = br->field;
}

static ss_status read_floats_reply(ss__rpc_request *rq, const ss__rpc_message *msg, void *arg) {
    const floats_reader *br = arg;
    size_t want;
    uint8_t *dest = reply_place(br, &br->parts[rq - br->first], &want);
    return ss__rpc_read_tail_reply(msg, br->desc, br->field, br->field_offset, dest, want,
                                   br->small, br->small_arg);
}

/* Compressed sync: chunk i of snapshot s, encoded against its mirror,
 * becomes the request's payload. */
static void encode_chunk(const membership *m, size_t i, const float *s, ss__codec_upload *up,
                         ss__rpc_request *rq) {
    const part *p = &m->parts[i];
    ss__codec_member_upload(&m->codecs[i], s + p->lo, m->upload + p->lo * sizeof(float), up);
    rq->payload = up->payload;
    rq->payload_len = up->len;
}

/* Compressed sync, after a fan-out: each chunk's reply decoded into out
 * (S-EASGD: d; MA/BMUF: the result) and its mirror moved; a chunk whose
 * call failed (or whose reply does not decode) starts over with a reset.
 * Returns the first decoding failure, else st. */
static ss_status decode_replies(const membership *m, const fanout *f, bool easgd, float *out,
                                ss_status st) {
    for (size_t i = 0; i < m->nparts; i++) {
        const part *p = &m->parts[i];
        if (i >= f->n || f->rq[i].status != SS_OK) {
            ss__codec_member_invalidate(&m->codecs[i]);
            continue;
        }
        const uint8_t *raw = m->replies + p->lo * sizeof(float);
        size_t len = ss__codec_size(m->codecs[i].enc, p->n);
        ss_status ds = easgd ? ss__codec_member_easgd_reply(&m->codecs[i], raw, len, out + p->lo)
                             : ss__codec_member_round_reply(&m->codecs[i], raw, len, out + p->lo);
        if (ds != SS_OK && st == SS_OK)
            st = ds;
    }
    return st;
}

/* A request's codec fields (EasgdRequest and RoundRequest name them alike). */
typedef struct upload_fields {
    Shadowsync__V1__Encoding *encoding;
    protobuf_c_boolean *mirror_reset;
    uint64_t *mirror_seq, *size;
} upload_fields;

/* Chunk i of s as rq's payload, sent last: encoded by the member's codec
 * (and the request's codec fields set to say how), or the floats
 * themselves in place (the fields left at their defaults). */
static void chunk_payload(const membership *m, size_t i, const float *s, ss__rpc_request *rq,
                          upload_fields f) {
    if (m->codecs) {
        ss__codec_upload up;
        encode_chunk(m, i, s, &up, rq);
        *f.encoding = (Shadowsync__V1__Encoding)up.enc;
        *f.mirror_reset = up.reset;
        *f.mirror_seq = up.seq;
        *f.size = m->parts[i].n;
        return;
    }
    rq->payload = (const uint8_t *)(s + m->parts[i].lo);
    rq->payload_len = m->parts[i].n * sizeof(float);
}

/* The fields of req, a request with the codec fields. */
#define UPLOAD_FIELDS(req)                                                                         \
    ((upload_fields){&(req).encoding, &(req).mirror_reset, &(req).mirror_seq, &(req).size})

typedef struct easgd_arg {
    const float *s;
    float alpha;
} easgd_arg;

/* The snapshot goes last, as a slice of the caller's floats. */
static uint8_t *build_easgd(const membership *m, size_t i, const void *arg, size_t *len,
                            ss__rpc_request *rq) {
    const easgd_arg *a = arg;
    Shadowsync__V1__EasgdRequest req = SHADOWSYNC__V1__EASGD_REQUEST__INIT;
    req.group = (char *)m->parts[i].name;
    req.member = m->ids[i];
    req.alpha = a->alpha;
    chunk_payload(m, i, a->s, rq, UPLOAD_FIELDS(req));
    return ss__rpc_pack_tail_head(&req.base, 4, rq->payload_len, len);
}

static ss_status tp_easgd(void *impl, const char *group, uint64_t member, const float *s,
                          float alpha, float *d, size_t n) {
    grpc_tp *t = impl;
    const membership *m;
    ss_status st = syncing_member(t, group, member, n, &m);
    if (st != SS_OK) {
        memset(d, 0, n * sizeof *d);
        return st;
    }
    /* A group runs one algorithm for good (the PS refuses a mix). */
    atomic_store_explicit(&((membership *)m)->easgd_only, true, memory_order_relaxed);
    easgd_arg a = {s, alpha};
    fanout f;
    floats_reader br = {.parts = m->parts,
                        .out = d,
                        .desc = &shadowsync__v1__easgd_reply__descriptor,
                        .field = 1,
                        .field_offset = offsetof(Shadowsync__V1__EasgdReply, delta),
                        .raw = m->replies,
                        .enc = t->encoding};
    st = fan(t, m, SS_DENSE_M_EASGD, build_easgd, &a, &br, t->timeout_ms, false, &f);
    st = rejoin_forgotten(t, (membership *)m, &f, st);
    if (m->codecs)
        st = decode_replies(m, &f, true, d, st);
    /* Every chunk that came back was applied on its server and its delta
     * is in d; the others applied nothing: zero there (the contract). */
    for (size_t i = 0; i < m->nparts; i++)
        if (i >= f.n || f.rq[i].status != SS_OK)
            memset(d + m->parts[i].lo, 0, m->parts[i].n * sizeof *d);
    fanout_free(&f);
    return st;
}

typedef struct round_arg {
    const float *s;
    const ss__bmuf_params *bmuf; /* NULL: S-MA */
} round_arg;

static uint8_t *build_round(const membership *m, size_t i, const void *arg, size_t *len,
                            ss__rpc_request *rq) {
    const round_arg *a = arg;
    Shadowsync__V1__RoundRequest req = SHADOWSYNC__V1__ROUND_REQUEST__INIT;
    req.group = (char *)m->parts[i].name;
    req.member = m->ids[i];
    if (a->bmuf) {
        req.bmuf = true;
        req.bmuf_eta = a->bmuf->eta;
        req.bmuf_zeta = a->bmuf->zeta;
        req.bmuf_nesterov = a->bmuf->nesterov;
    }
    chunk_payload(m, i, a->s, rq, UPLOAD_FIELDS(req));
    return ss__rpc_pack_tail_head(&req.base, 3, rq->payload_len, len);
}

/* Chunks close their rounds independently (a deadline may close one
 * without a member the next one waited for): report the smallest. */
static void round_numbers(const ProtobufCMessage *msg, void *arg) {
    const Shadowsync__V1__RoundReply *r = (const Shadowsync__V1__RoundReply *)msg;
    ss__round_result *result = arg;
    if (r->round < result->round)
        result->round = r->round;
    if (r->participants < result->participants)
        result->participants = r->participants;
}

static ss_status tp_round(void *impl, const char *group, uint64_t member, const float *s,
                          const ss__bmuf_params *bmuf, float *avg, size_t n,
                          ss__round_result *result) {
    grpc_tp *t = impl;
    const membership *m;
    ss_status st = syncing_member(t, group, member, n, &m);
    if (st != SS_OK)
        return st;
    atomic_store_explicit(&((membership *)m)->easgd_only, false, memory_order_relaxed);
    result->round = UINT64_MAX;
    result->participants = UINT32_MAX;
    fanout f;
    round_arg a = {s, bmuf};
    floats_reader br = {.parts = m->parts,
                        .out = avg,
                        .desc = &shadowsync__v1__round_reply__descriptor,
                        .field = 3,
                        .field_offset = offsetof(Shadowsync__V1__RoundReply, mean),
                        .small = round_numbers,
                        .small_arg = result,
                        .raw = m->replies,
                        .enc = t->encoding};
    st = fan(t, m, SS_DENSE_M_ROUND, build_round, &a, &br, t->timeout_ms + t->round_wait_ms, false,
             &f);
    st = rejoin_forgotten(t, (membership *)m, &f, st);
    if (m->codecs)
        st = decode_replies(m, &f, false, avg, st);
    fanout_free(&f);
    return st;
}

static uint8_t *build_central(const membership *m, size_t i, const void *arg, size_t *len,
                              ss__rpc_request *rq) {
    (void)arg;
    (void)rq;
    Shadowsync__V1__ReadCentralRequest req = SHADOWSYNC__V1__READ_CENTRAL_REQUEST__INIT;
    req.group = (char *)m->parts[i].name;
    req.size = m->parts[i].n;
    return pack_message(&req.base, len);
}

static ss_status tp_central(void *impl, const char *group, float *c, size_t n) {
    grpc_tp *t = impl;
    /* Reading needs no membership: a temporary cut of the group. */
    membership m = {.group = (char *)group, .n = n};
    ss_status st = cut_group(t, group, n, &m.parts, &m.nparts);
    if (st != SS_OK)
        return st;
    fanout f;
    floats_reader br = {.parts = m.parts,
                        .out = c,
                        .desc = &shadowsync__v1__read_central_reply__descriptor,
                        .field = 1,
                        .field_offset = offsetof(Shadowsync__V1__ReadCentralReply, central)};
    st = fan(t, &m, SS_DENSE_M_CENTRAL, build_central, NULL, &br, t->timeout_ms, true, &f);
    fanout_free(&f);
    free(m.parts);
    return st;
}

static uint8_t *build_heartbeat(const membership *m, size_t i, const void *arg, size_t *len,
                                ss__rpc_request *rq) {
    (void)arg;
    (void)rq;
    Shadowsync__V1__HeartbeatRequest req = SHADOWSYNC__V1__HEARTBEAT_REQUEST__INIT;
    req.group = (char *)m->parts[i].name;
    req.member = m->ids[i];
    return pack_message(&req.base, len);
}

static ss_status tp_heartbeat(void *impl, const char *group, uint64_t member) {
    grpc_tp *t = impl;
    const membership *m = find_member(t, group, member);
    if (!m)
        return SS_ERR_NOT_FOUND;
    fanout f;
    ss_status st =
        fan(t, m, SS_DENSE_M_HEARTBEAT, build_heartbeat, NULL, NULL, t->timeout_ms, true, &f);
    st = rejoin_forgotten(t, (membership *)m, &f, st);
    fanout_free(&f);
    return st;
}

/* Whether chunk 0's open MA/BMUF round waits for this member: a heartbeat
 * to its shard, whose reply says so (every chunk's round opens with the
 * same member's call, so chunk 0 speaks for them). Asked at most every
 * WAITING_POLL_NS per member: an idle trainer calls each group's first
 * shard 100 times a second at most, and only while it stands still. A
 * member whose calls so far were S-EASGD exchanges (no barrier to hold)
 * is not asked about: it would cost the PS calls for nothing. */
static bool tp_round_waiting(void *impl, const char *group, uint64_t member) {
    grpc_tp *t = impl;
    membership *m = find_member(t, group, member);
    if (!m || m->nparts == 0 || atomic_load_explicit(&m->easgd_only, memory_order_relaxed))
        return false;
    const uint64_t now = ss__now_ns();
    uint64_t asked = atomic_load_explicit(&m->waiting_asked_ns, memory_order_relaxed);
    if (now - asked < WAITING_POLL_NS ||
        !atomic_compare_exchange_strong(&m->waiting_asked_ns, &asked, now))
        return false;
    Shadowsync__V1__HeartbeatRequest req = SHADOWSYNC__V1__HEARTBEAT_REQUEST__INIT;
    req.group = (char *)m->parts[0].name;
    req.member = m->ids[0];
    ProtobufCMessage *reply;
    if (ss__rpc_call_message(t->ch[m->parts[0].shard], SS_DENSE_M_HEARTBEAT, &req.base,
                             t->timeout_ms, false, &shadowsync__v1__heartbeat_reply__descriptor,
                             &reply, NULL, 0) != SS_OK)
        return false; /* the next heartbeat finds out what is wrong */
    const bool waiting = ((Shadowsync__V1__HeartbeatReply *)reply)->round_waiting;
    protobuf_c_message_free_unpacked(reply, NULL);
    return waiting;
}

static size_t tp_wire_bytes(void *impl, size_t n) {
    return ss__codec_size(((grpc_tp *)impl)->encoding, n);
}

static void tp_destroy(void *impl) {
    grpc_tp *t = impl;
    while (t->members) {
        membership *m = t->members;
        t->members = m->next;
        membership_free(m);
    }
    for (uint32_t s = 0; s < t->nshards; s++)
        ss__rpc_channel_destroy(t->ch[s]);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

static const ss__transport_ops grpc_ops = {
    .join = tp_join,
    .leave = tp_leave,
    .easgd_exchange = tp_easgd,
    .round = tp_round,
    .read_central = tp_central,
    .heartbeat = tp_heartbeat,
    .wire_bytes = tp_wire_bytes,
    .round_waiting = tp_round_waiting,
    .destroy = tp_destroy,
};

ss_status ss__grpc_transport_create(const ss__grpc_transport_config *cfg, ss__transport **out,
                                    char *why, size_t whylen) {
    if (!cfg || !cfg->targets || !*cfg->targets || cfg->timeout_ms == 0 || !out ||
        cfg->chunk_floats > SS_GRPC_MAX_CHUNK_FLOATS)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "a gRPC transport needs targets, a timeout and chunks of at most %u floats",
                        (unsigned)SS_GRPC_MAX_CHUNK_FLOATS);
    grpc_tp *t = calloc(1, sizeof *t);
    if (!t)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the gRPC transport");
    pthread_mutex_init(&t->lock, NULL);
    t->timeout_ms = cfg->timeout_ms;
    t->round_wait_ms = cfg->round_wait_ms;
    t->retries = cfg->retries;
    t->chunk = cfg->chunk_floats ? cfg->chunk_floats : SS_GRPC_CHUNK_FLOATS;
    /* Adapted: starts where a round's window is (4 MiB in flight, as 4
     * chunks of 1 MiB were before 0.2): a long path grows from there, a
     * short one comes down to the floor by halves in a few batches. */
    t->window = cfg->window ? cfg->window : SS_GRPC_ROUND_WINDOW;
    t->window_fixed = cfg->window != 0;
    t->encoding = cfg->encoding;
    t->recut = cfg->recut;
    if (!ss__encoding_name(t->encoding)) {
        tp_destroy(t);
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "encoding %d is none the codec knows",
                        (int)cfg->encoding);
    }
    t->next_id = 1;
    ss_status st = SS_OK;
    char *list = strdup(cfg->targets), *save = NULL;
    if (!list)
        st = SS_ERR_NO_MEMORY;
    for (char *tok = list ? strtok_r(list, ",", &save) : NULL; st == SS_OK && tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (t->nshards == SS_GRPC_MAX_SHARDS)
            st = ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "ps: more than %d shards",
                          SS_GRPC_MAX_SHARDS);
        else if (!ss__address_valid(tok, "ps", why, whylen))
            st = SS_ERR_INVALID_ARGUMENT;
        else
            st = ss__rpc_channel_create(tok, chunk_message_bytes(t->chunk), cfg->tls,
                                        &t->ch[t->nshards], why, whylen);
        if (st == SS_OK) {
            ss__rpc_channel_set_epoch(t->ch[t->nshards], cfg->epoch);
            ss__rpc_channel_set_streams(t->ch[t->nshards++], cfg->bulk);
        }
    }
    free(list);
    if (st == SS_OK && t->nshards == 0)
        st = ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "ps: no parameter servers given");
    if (st == SS_OK)
        st = ss__transport_create(&grpc_ops, t, out, why, whylen);
    if (st != SS_OK)
        tp_destroy(t);
    return st;
}

ss_status ss__grpc_checkpoint(const char *target, const ss__rpc_tls *tls, uint32_t timeout_ms,
                              char *path, size_t pathlen, size_t *groups) {
    if (!target || !path || !pathlen || !groups || timeout_ms == 0)
        return SS_ERR_INVALID_ARGUMENT;
    ss__rpc_channel *ch;
    ss_status st = ss__rpc_channel_create(target, 0, tls, &ch, NULL, 0);
    if (st != SS_OK)
        return st;
    Shadowsync__V1__CheckpointRequest req = SHADOWSYNC__V1__CHECKPOINT_REQUEST__INIT;
    ProtobufCMessage *msg;
    st = ss__rpc_call_message(ch, SS_DENSE_M_CHECKPOINT, &req.base, timeout_ms, false,
                              &shadowsync__v1__checkpoint_reply__descriptor, &msg, NULL, 0);
    if (st == SS_OK) {
        Shadowsync__V1__CheckpointReply *r = (Shadowsync__V1__CheckpointReply *)msg;
        snprintf(path, pathlen, "%s", r->path);
        *groups = r->groups;
        protobuf_c_message_free_unpacked(msg, NULL);
    }
    ss__rpc_channel_destroy(ch);
    return st;
}

ss_status ss__grpc_transport_join_fresh(ss__transport *tp, const char *group, size_t n,
                                        uint64_t key, uint64_t *member) {
    grpc_tp *t = ss__transport_impl(tp, &grpc_ops);
    return t ? join_cut(t, group, n, true, key, member) : SS_ERR_INVALID_ARGUMENT;
}

void ss__grpc_transport_set_epoch(ss__transport *tp, uint64_t epoch) {
    grpc_tp *t = ss__transport_impl(tp, &grpc_ops);
    if (!t)
        return;
    for (uint32_t s = 0; s < t->nshards; s++)
        ss__rpc_channel_set_epoch(t->ch[s], epoch);
}

uint32_t ss__grpc_transport_window(ss__transport *tp) {
    grpc_tp *t = ss__transport_impl(tp, &grpc_ops);
    return t ? atomic_load_explicit(&t->window, memory_order_relaxed) : 0;
}

uint64_t ss__grpc_transport_bulk_batches(ss__transport *tp) {
    grpc_tp *t = ss__transport_impl(tp, &grpc_ops);
    uint64_t n = 0;
    for (uint32_t s = 0; t && s < t->nshards; s++)
        n += ss__rpc_channel_stream_batches(t->ch[s]);
    return n;
}
