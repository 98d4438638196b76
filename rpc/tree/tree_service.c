/* The tree transport's service: pushes and leaves from the other members,
 * buffered for the rounds (tree_internal.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/finite.h"
#include "common/log.h"
#include "common/names.h"
#include "rpc/pb_wire.h"
#include "rpc/peer/peer_list.h"
#include "rpc/rpc_pb.h"
#include "rpc/tree/tree_internal.h"
#include "rpc/tree/tree_sync.pb-c.h"
#include "shadow/kernels.h"

/* ---- serving pushes ---- */

/* Checks a push against the group; SS_OK or the refusal in r. Caller
 * holds the lock. A refusal says what of the push is wrong, never the
 * group's size or shape (its floats, partitions, members). */
static bool push_fits(const ss__tree *t, const ss__tree_group *tg,
                      const Shadowsync__V1__TreePush *m, size_t bytes, ss__rpc_reply *r) {
    const ss__forest *f = &tg->forest;
    if (m->size != tg->n) {
        ss__rpc_reply_fail(r, SS_ERR_SIZE_MISMATCH,
                           "group %s: a size of %llu floats is not this member's", tg->name,
                           (unsigned long long)m->size);
    } else if (m->partition >= f->parts) {
        ss__rpc_reply_fail(r, SS_ERR_INVALID_ARGUMENT, "partition %u: no such partition",
                           m->partition);
    } else if (m->from >= t->mesh.npeers || m->from == t->mesh.rank) {
        ss__rpc_reply_fail(r, SS_ERR_INVALID_ARGUMENT, "from=%u: not another member", m->from);
    } else if (m->round == 0) {
        ss__rpc_reply_fail(r, SS_ERR_INVALID_ARGUMENT, "round 0: rounds count from 1");
    } else if (m->count == 0 || m->count > t->mesh.npeers) {
        ss__rpc_reply_fail(r, SS_ERR_INVALID_ARGUMENT, "count=%u: not a count of members",
                           m->count);
    } else if (m->kind == SS_TREE_KIND_SUM &&
               f->parent[(size_t)m->partition * f->members + m->from] != (int32_t)t->mesh.rank) {
        ss__rpc_reply_fail(r, SS_ERR_INVALID_ARGUMENT,
                           "member %u is not a child of member %u in tree %u", m->from,
                           t->mesh.rank, m->partition);
    } else if (m->kind == SS_TREE_KIND_MEAN &&
               f->parent[(size_t)m->partition * f->members + t->mesh.rank] != (int32_t)m->from) {
        ss__rpc_reply_fail(r, SS_ERR_INVALID_ARGUMENT,
                           "member %u is not the parent of member %u in tree %u", m->from,
                           t->mesh.rank, m->partition);
    } else if (m->kind != SS_TREE_KIND_SUM && m->kind != SS_TREE_KIND_MEAN) {
        ss__rpc_reply_fail(r, SS_ERR_INVALID_ARGUMENT,
                           "kind=%u: 1 (a subtree's sum) or 2 (the mean)", m->kind);
    } else if (bytes != 4 * (f->part_off[m->partition + 1] - f->part_off[m->partition])) {
        ss__rpc_reply_fail(r, SS_ERR_SIZE_MISMATCH, "%zu bytes: not the size of partition %u",
                           bytes, m->partition);
    } else {
        return true;
    }
    return false;
}

/* The sender's view of the membership merged into group tg's; false:
 * refused, reply says why (not joined yet, while starting: the sender
 * tries again; or a view that is not of this group). */
static bool view_merged(ss__tree *t, ss__tree_group *tg, const char *group,
                        const ProtobufCBinaryData *view, ss__rpc_reply *reply) {
    if (!tg) {
        ss__rpc_reply_fail(reply, SS_ERR_STATE, "member %u has not joined group %s yet",
                           t->mesh.rank, group);
        return false;
    }
    if (!ss__tree_view_merge(t, tg, view->data, view->len)) {
        ss__rpc_reply_fail(reply, SS_ERR_INVALID_ARGUMENT,
                           "a membership view of %zu bytes: not this group's", view->len);
        return false;
    }
    return true;
}

/* A push's or leave's answer: the rounds this member has completed. */
static void reply_done(ss__rpc_reply *reply, uint64_t done) {
    if (reply->status != SS_OK)
        return;
    Shadowsync__V1__TreePushReply r = SHADOWSYNC__V1__TREE_PUSH_REPLY__INIT;
    r.done = done;
    ss__rpc_reply_pack(&r.base, reply);
}

static void serve_push(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__tree *t = ctx;
    const Shadowsync__V1__TreePush *m = request;
    const ProtobufCBinaryData bulk = m->data;
    /* The floats, aligned: in place when they are (the server aligns a
     * message's end), else copied. */
    float *owned = NULL;
    const float *x = (const float *)(const void *)bulk.data;
    if ((uintptr_t)bulk.data % _Alignof(float) != 0 || bulk.len % 4) {
        owned = malloc(bulk.len ? bulk.len : 1);
        if (owned)
            memcpy(owned, bulk.data, bulk.len);
        x = owned;
    }
    pthread_mutex_lock(&t->lock);
    ss__tree_group *tg =
        ss__ps_group_name_valid(m->group) ? ss__tree_find_group(t, m->group) : NULL;
    if (!x) {
        ss__rpc_reply_fail(reply, SS_ERR_NO_MEMORY, "no memory for a push of %zu bytes", bulk.len);
    } else if (!ss__ps_group_name_valid(m->group)) {
        ss__rpc_reply_fail(reply, SS_ERR_INVALID_ARGUMENT, "group name must be " SS_PS_GROUP_RULE);
    } else if (!view_merged(t, tg, m->group, &m->membership, reply)) {
        /* refused, reply says why */
    } else if (m->epoch != tg->epoch) {
        /* Someone left and one of the two has not heard yet: try again. */
        ss__rpc_reply_fail(reply, SS_ERR_STATE,
                           "member %u's membership of group %s differs from the sender's",
                           t->mesh.rank, m->group);
    } else if (!push_fits(t, tg, m, bulk.len, reply)) {
        /* refused, reply says why */
    } else if (!ss__all_finite(x, bulk.len / 4)) {
        ss__rpc_reply_fail(reply, SS_ERR_NON_FINITE, "NaN or Inf in partition %u from member %u",
                           m->partition, m->from);
    } else if (m->round > tg->done + 2) {
        if (m->round > tg->seen)
            tg->seen = m->round; /* this member is behind: its next round catches up */
        ss__rpc_reply_fail(reply, SS_ERR_STATE, "round %llu is ahead of member %u (done %llu)",
                           (unsigned long long)m->round, t->mesh.rank,
                           (unsigned long long)tg->done);
    } else if (m->round > tg->done) { /* else: a round over here; late, dropped */
        ss__tree_slot *s = &tg->slots[m->round % 2];
        if (s->round != m->round)
            ss__tree_slot_open(s, tg, m->round);
        if (m->round > tg->seen)
            tg->seen = m->round;
        const ss__forest *f = &tg->forest;
        const size_t off = f->part_off[m->partition], pn = bulk.len / 4;
        if (m->kind == SS_TREE_KIND_SUM) {
            uint8_t *got = &s->got[(size_t)m->partition * f->members + m->from];
            if (!*got) { /* a retried push is added once */
                *got = 1;
                s->got_n[m->partition]++;
                s->count[m->partition] += m->count;
                for (size_t i = 0; i < pn; i++)
                    s->sum[off + i] += x[i];
            }
        } else if (s->mean_count[m->partition] == 0) {
            memcpy(s->mean + off, x, pn * sizeof *x);
            s->mean_count[m->partition] = m->count;
        }
        pthread_cond_broadcast(&t->arrived);
    }
    uint64_t done = tg ? tg->done : 0;
    pthread_mutex_unlock(&t->lock);
    free(owned);
    reply_done(reply, done);
}

/* A push's floats are read in place when they end the message. */
static const ss__rpc_request_type push_request = {&shadowsync__v1__tree_push__descriptor,
                                                  serve_push, NULL, 8,
                                                  offsetof(Shadowsync__V1__TreePush, data)};

static void serve_leave(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__tree *t = ctx;
    const Shadowsync__V1__TreeLeave *m = request;
    pthread_mutex_lock(&t->lock);
    ss__tree_group *tg =
        ss__ps_group_name_valid(m->group) ? ss__tree_find_group(t, m->group) : NULL;
    if (!ss__peer_sender_ok(m->group, m->from, t->mesh.npeers, t->mesh.rank, reply)) {
        /* refused, reply says why */
    } else if (tg) {
        ss_status st = ss__tree_mark(t, tg, m->from, true, m->version, "left");
        if (st == SS_ERR_INVALID_ARGUMENT)
            ss__rpc_reply_fail(
                reply, st, "leave of member %u at version %llu: more than %u past the known %llu",
                m->from, (unsigned long long)m->version, SS_TREE_MAX_VERSION_STEP,
                (unsigned long long)tg->ver[m->from]);
        else if (st != SS_OK)
            ss__rpc_reply_fail(reply, st, "cannot build the trees without member %u", m->from);
    }
    uint64_t done = tg ? tg->done : 0;
    pthread_mutex_unlock(&t->lock);
    reply_done(reply, done);
}

static const ss__rpc_request_type leave_request = {&shadowsync__v1__tree_leave__descriptor,
                                                   serve_leave, NULL, 0, 0};

/* Another member asks whether this one is there: merge its view, answer
 * with this one's. */
static void serve_probe(void *ctx, void *request, ss__rpc_reply *reply) {
    ss__tree *t = ctx;
    const Shadowsync__V1__TreeProbe *m = request;
    const size_t vb = ss__tree_view_bytes(t);
    uint8_t *view = malloc(vb);
    pthread_mutex_lock(&t->lock);
    ss__tree_group *tg =
        ss__ps_group_name_valid(m->group) ? ss__tree_find_group(t, m->group) : NULL;
    if (!view) {
        ss__rpc_reply_fail(reply, SS_ERR_NO_MEMORY, "no memory for a view of %zu bytes", vb);
    } else if (!ss__peer_sender_ok(m->group, m->from, t->mesh.npeers, t->mesh.rank, reply)) {
        /* refused, reply says why */
    } else if (!view_merged(t, tg, m->group, &m->membership, reply)) {
        /* refused, reply says why */
    } else {
        ss__tree_view_pack(t, tg, view);
    }
    uint64_t done = tg ? tg->done : 0;
    pthread_mutex_unlock(&t->lock);
    if (reply->status == SS_OK) {
        Shadowsync__V1__TreePushReply r = SHADOWSYNC__V1__TREE_PUSH_REPLY__INIT;
        r.done = done;
        r.membership = (ProtobufCBinaryData){vb, view};
        ss__rpc_reply_pack(&r.base, reply);
    }
    free(view);
}

static const ss__rpc_request_type probe_request = {&shadowsync__v1__tree_probe__descriptor,
                                                   serve_probe, NULL, 0, 0};

const ss__rpc_method ss__tree_methods[3] = {
    /* the model, and the membership: all need the token when one is set */
    /* a partition: the server's limit */
    {SS_TREE_PUSH_METHOD, NULL, false, NULL, false, 0, &push_request, false, false},
    {SS_TREE_LEAVE_METHOD, NULL, false, NULL, false, SS_RPC_SMALL_REQUEST, &leave_request, false,
     false},
    /* a view: 8 bytes a member */
    {SS_TREE_PROBE_METHOD, NULL, false, NULL, false, 0, &probe_request, false, false},
};
