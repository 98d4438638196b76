/* S-MA rounds up and down a forest of aggregation trees (tree_transport.h). */
#include "rpc/tree/tree_transport.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/finite.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "rpc/auth.h"
#include "rpc/pb_wire.h"
#include "rpc/peer/peer_list.h"
#include "rpc/rpc_pb.h"
#include "rpc/tree/tree_internal.h"
#include "rpc/tree/tree_sync.pb-c.h"
#include "shadow/algorithms.h"

#define MAX_MEMBERS SS_FOREST_MAX_MEMBERS

typedef struct push_job {
    uint32_t to, partition, kind, count;
    const float *data;
    size_t floats;
    uint8_t *head; /* the message but its floats, with their field's header */
    size_t head_len;
    bool done;
    bool overflowed; /* refused: its floats were not finite (a sum overflowed) */
} push_job;

/* The head of job pj's TreePush (the message, then its floats field's
 * header: the floats follow as the call's payload) into pj->head. */
static ss_status pack_head(const ss__tree *t, const ss__tree_group *tg, uint64_t epoch,
                           uint64_t round, ProtobufCBinaryData view, push_job *pj) {
    Shadowsync__V1__TreePush m = SHADOWSYNC__V1__TREE_PUSH__INIT;
    m.group = (char *)tg->name;
    m.round = round;
    m.partition = pj->partition;
    m.kind = pj->kind;
    m.from = t->mesh.rank;
    m.count = pj->count;
    m.size = tg->n;
    m.epoch = epoch;
    m.membership = view;
    size_t h1 = protobuf_c_message_get_packed_size(&m.base);
    if (!(pj->head = malloc(h1 + SS_PB_BYTES_HEADER_MAX)))
        return SS_ERR_NO_MEMORY;
    protobuf_c_message_pack(&m.base, pj->head);
    pj->head_len = h1 + ss__pb_bytes_header(8, pj->floats * 4, pj->head + h1);
    return SS_OK;
}

/* Sends every job not done, all at once; retries the refused ones (the
 * receiver not joined or behind, a peer away) until the deadline.
 * SS_ERR_TIMEOUT when some never got through; SS_ERR_STATE when the
 * membership changed meanwhile (the jobs are for trees that are gone). */
static ss_status send_jobs(ss__tree *t, ss__tree_group *tg, uint64_t epoch, uint64_t round,
                           push_job *jobs, size_t njobs, uint64_t deadline_ns) {
    const char *group = tg->name;
    const size_t vb = ss__tree_view_bytes(t);
    ss__rpc_request *rq = calloc(njobs ? njobs : 1, sizeof *rq);
    size_t *which = calloc(njobs ? njobs : 1, sizeof *which);
    uint8_t *view = malloc(vb);
    bool *probed = calloc(t->mesh.npeers, sizeof *probed); /* once per member and call */
    if (!rq || !which || !view || !probed) {
        free(rq);
        free(which);
        free(view);
        free(probed);
        return SS_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&t->lock);
    ss__tree_view_pack(t, tg, view);
    pthread_mutex_unlock(&t->lock);
    ss_status st = SS_OK;
    for (size_t j = 0; j < njobs; j++) {
        jobs[j].head = NULL;
        jobs[j].overflowed = false;
    }
    for (size_t j = 0; j < njobs && st == SS_OK; j++)
        st = pack_head(t, tg, epoch, round, (ProtobufCBinaryData){vb, view}, &jobs[j]);
    for (; st == SS_OK;) {
        size_t k = 0;
        for (size_t j = 0; j < njobs; j++) {
            if (jobs[j].done)
                continue;
            ss__rpc_channel *ch = ss__tree_channel(t, jobs[j].to);
            if (!ch)
                continue;
            rq[k] = (ss__rpc_request){.ch = ch,
                                      .method = SS_TREE_PUSH_METHOD,
                                      .req = jobs[j].head,
                                      .len = jobs[j].head_len,
                                      .payload = (const uint8_t *)jobs[j].data,
                                      .payload_len = jobs[j].floats * 4};
            which[k++] = j;
        }
        uint64_t now = ss__now_ns();
        if (now >= deadline_ns) {
            st = SS_ERR_TIMEOUT;
            break;
        }
        uint32_t left_ms = (uint32_t)((deadline_ns - now) / 1000000u);
        ss__rpc_call_many(rq, k, left_ms ? left_ms : 1, false);
        bool all = true;
        for (size_t i = 0; i < k; i++) {
            free(rq[i].resp);
            const uint32_t to = jobs[which[i]].to;
            if (rq[i].status == SS_OK) {
                jobs[which[i]].done = true;
                continue;
            }
            if (rq[i].status == SS_ERR_NON_FINITE) { /* again would be refused again */
                jobs[which[i]].done = jobs[which[i]].overflowed = true;
                continue;
            }
            SS_LOG_DEBUGF("tree", "event=push_refused to=%u status=%s msg=\"%s\"", to,
                          ss_status_name(rq[i].status), rq[i].msg);
            /* Refused for its state (a membership that differs, not joined
             * yet, a round ahead): the two exchange views once. */
            if (rq[i].status == SS_ERR_STATE && !probed[to]) {
                probed[to] = true;
                uint64_t now2 = ss__now_ns();
                uint32_t ms = now2 < deadline_ns ? (uint32_t)((deadline_ns - now2) / 1000000u) : 0;
                ss__tree_probe(t, group, to, ms ? ms : 1);
            }
        }
        for (size_t j = 0; j < njobs; j++)
            all = all && jobs[j].done;
        if (all)
            break;
        pthread_mutex_lock(&t->lock);
        bool moved = tg->epoch != epoch;
        pthread_mutex_unlock(&t->lock);
        if (moved) { /* a member left: the round starts over on new trees */
            st = SS_ERR_STATE;
            break;
        }
        ss__sleep_ns(2000000); /* 2 ms, then the refused ones again */
    }
    for (size_t j = 0; j < njobs; j++)
        free(jobs[j].head);
    free(rq);
    free(which);
    free(view);
    free(probed);
    return st;
}

/* ---- the ops ---- */

static ss_status tr_join(void *impl, const char *group, size_t n, uint64_t key, uint64_t *member) {
    (void)key; /* one member per peer: nobody to replace */
    ss__tree *t = impl;
    pthread_mutex_lock(&t->lock);
    ss__tree_group *tg = ss__tree_find_group(t, group);
    ss_status st = SS_OK;
    if (tg) {
        st = tg->n == n ? SS_OK : SS_ERR_SIZE_MISMATCH;
    } else if (!(tg = calloc(1, sizeof *tg)) || !(tg->name = strdup(group)) ||
               !(tg->latest = malloc(n * sizeof *tg->latest)) ||
               !(tg->gone = calloc(t->mesh.npeers, 1)) ||
               !(tg->ver = calloc(t->mesh.npeers, sizeof *tg->ver))) {
        st = SS_ERR_NO_MEMORY;
    } else if ((tg->n = n, st = ss__tree_build_forest(t, tg)) == SS_OK) {
        const ss__forest *f = &tg->forest;
        for (int k = 0; st == SS_OK && k < 2; k++)
            st = ss__tree_slot_alloc(&tg->slots[k], n, f->parts, f->members);
        if (st == SS_OK) {
            tg->next = t->groups;
            t->groups = tg;
            SS_LOG_INFOF("tree",
                         "event=forest group=%s floats=%zu members=%u parts=%u "
                         "predicted_round_ms=%.3f topology=%s",
                         group, n, f->members, f->parts, f->bottleneck_s * 1e3,
                         t->topology_path[0] ? t->topology_path : "uniform");
        }
    }
    if (st != SS_OK && tg && tg != ss__tree_find_group(t, group)) {
        ss__tree_group_free(tg);
        tg = NULL;
    }
    pthread_mutex_unlock(&t->lock);
    if (st == SS_OK)
        *member = 1; /* one member per group here: this trainer */
    return st;
}

/* Tells the members still in the group (those not in gone) that this one
 * leaves it for good at `version`, so that they go on without it; best
 * effort, within a second or the round deadline. */
static void announce_leave(ss__tree *t, const char *group, const uint8_t *gone, uint64_t version) {
    Shadowsync__V1__TreeLeave m = SHADOWSYNC__V1__TREE_LEAVE__INIT;
    m.group = (char *)group;
    m.from = t->mesh.rank;
    m.version = version;
    ss__rpc_channel **ch = calloc(t->mesh.npeers, sizeof *ch);
    size_t k = 0;
    for (uint32_t i = 0; ch && i < t->mesh.npeers; i++)
        if (i != t->mesh.rank && !gone[i] && (ch[k] = ss__tree_channel(t, i)))
            k++;
    ss__peer_tell_all(ch, k, SS_TREE_LEAVE_METHOD, &m.base, t->timeout_ms);
    free(ch);
}

/* The group goes first, then the others hear of it: while they hear, some
 * already count this member gone and say so in their pushes and probes;
 * with the group still here, it read that as having been left out by
 * mistake and came back at a higher version, which the others then waited
 * for in their last rounds until the deadline. Pushes for the group now
 * find it not joined, and their senders try again until the leave is in. */
static ss_status tr_leave(void *impl, const char *group, uint64_t member) {
    ss__tree *t = impl;
    (void)member;
    pthread_mutex_lock(&t->lock);
    ss__tree_group **pp = &t->groups;
    while (*pp && strcmp((*pp)->name, group))
        pp = &(*pp)->next;
    ss__tree_group *tg = *pp;
    if (tg)
        *pp = tg->next;
    pthread_mutex_unlock(&t->lock);
    if (!tg)
        return SS_ERR_NOT_FOUND;
    announce_leave(t, group, tg->gone, tg->ver[t->mesh.rank] + 1);
    ss__tree_group_free(tg);
    return SS_OK;
}

static ss_status tr_easgd(void *impl, const char *group, uint64_t member, const float *s,
                          float alpha, float *d, size_t n) {
    (void)impl, (void)group, (void)member, (void)s, (void)alpha;
    memset(d, 0, n * sizeof *d);    /* nothing applied */
    return SS_ERR_INVALID_ARGUMENT; /* no central variable: S-MA only */
}

/* A partition's root: its mean (S-MA) or the block step from it (S-BMUF,
 * what goes down is b) into sl->mean. A mean or step that overflowed
 * (finite sums can) is refused before anything is stored: no mean goes
 * down, the block state keeps its value, and the round fails at its
 * deadline for every member. */
static ss_status root_mean(ss__tree_group *tg, ss__tree_slot *sl, const ss__bmuf_params *bmuf,
                           uint32_t p, size_t off, size_t pn, uint32_t count, float *up,
                           uint32_t rank) {
    const float inv = 1.0f / (float)count;
    ss_status st;
    if (!bmuf) {
        for (size_t i = 0; i < pn; i++)
            sl->mean[off + i] = up[off + i] * inv;
        st = ss__all_finite(sl->mean + off, pn) ? SS_OK : SS_ERR_NON_FINITE;
    } else {
        for (size_t i = 0; i < pn; i++)
            up[off + i] *= inv;
        const bool first = !tg->bmuf_started[p] || tg->bmuf_root[p] != rank;
        st = ss__all_finite(up + off, pn) ? ss__bmuf_step(bmuf, tg->bmuf_w + off, tg->bmuf_m + off,
                                                          tg->bmuf_b + off, up + off, pn, first)
                                          : SS_ERR_NON_FINITE;
        if (st == SS_OK) {
            memcpy(sl->mean + off, tg->bmuf_b + off, pn * sizeof *sl->mean);
            tg->bmuf_started[p] = true;
            tg->bmuf_root[p] = rank;
        }
    }
    if (st != SS_OK)
        SS_LOG_WARNF("tree",
                     "event=round_refused group=%s partition=%u status=%s why=\"the mean "
                     "overflowed: nothing goes down, the round fails at its deadline\"",
                     tg->name, p, ss_status_name(st));
    return st;
}

/* What a round does next, found under the lock: sums whose children are
 * all in go up (or, at a root, become the mean), means that came down go
 * on to the children. Returns the jobs queued; *finished when every
 * partition's mean is in out. */
static size_t next_jobs(ss__tree *t, ss__tree_group *tg, ss__tree_slot *sl, const float *s,
                        const ss__bmuf_params *bmuf, float *out, float *up, bool *sent_sum,
                        bool *sent_mean, push_job *jobs, bool *finished) {
    const ss__forest *f = &tg->forest;
    const uint32_t N = f->members;
    size_t nj = 0;
    *finished = true;
    for (uint32_t p = 0; p < f->parts; p++) {
        const size_t off = f->part_off[p], pn = f->part_off[p + 1] - off;
        /* A partition whose mean is already here needs no sum sent up (a
         * round kept across new trees, tree_membership.c). */
        if (!sent_sum[p] && sl->mean_count[p] == 0 && sl->got_n[p] == tg->nkids[p]) {
            const uint32_t count = sl->count[p] + 1;
            for (size_t i = 0; i < pn; i++)
                up[off + i] = sl->sum[off + i] + s[off + i];
            if (f->root[p] == t->mesh.rank) {
                if (sl->mean_count[p] == 0) { /* a retried round keeps the mean it sent */
                    if (root_mean(tg, sl, bmuf, p, off, pn, count, up, t->mesh.rank) == SS_OK)
                        sl->mean_count[p] = count;
                    else /* the next try takes the children's new sums */
                        ss__tree_slot_forget(sl, tg, p);
                }
            } else {
                jobs[nj++] = (push_job){.to = (uint32_t)f->parent[(size_t)p * N + t->mesh.rank],
                                        .partition = p,
                                        .kind = SS_TREE_KIND_SUM,
                                        .count = count,
                                        .data = up + off,
                                        .floats = pn};
            }
            sent_sum[p] = true;
        }
        if (!sent_mean[p] && sl->mean_count[p]) {
            for (uint32_t k = 0; k < tg->nkids[p]; k++)
                jobs[nj++] = (push_job){.to = tg->kids[(size_t)p * N + k],
                                        .partition = p,
                                        .kind = SS_TREE_KIND_MEAN,
                                        .count = sl->mean_count[p],
                                        .data = sl->mean + off,
                                        .floats = pn};
            memcpy(out + off, sl->mean + off, pn * sizeof *out);
            sent_mean[p] = true;
        }
        *finished = *finished && sent_mean[p];
    }
    return nj;
}

/* The members a round that ran out of time was waiting for: children
 * whose sums did not come up, parents whose means did not come down.
 * Caller holds the lock. */
static uint32_t waited_for(const ss__tree *t, const ss__tree_group *tg, const ss__tree_slot *sl,
                           const bool *flags, uint32_t *out) {
    const ss__forest *f = &tg->forest;
    const uint32_t N = f->members;
    uint32_t k = 0;
    uint8_t *seen = calloc(N, 1);
    if (!seen)
        return 0;
    for (uint32_t p = 0; p < f->parts; p++) {
        const bool sent_sum = flags[p], sent_mean = flags[f->parts + p];
        for (uint32_t c = 0; !sent_sum && sl->round && c < tg->nkids[p]; c++) {
            const uint32_t kid = tg->kids[(size_t)p * N + c];
            if (!sl->got[(size_t)p * N + kid] && !seen[kid])
                seen[kid] = 1, out[k++] = kid;
        }
        const int32_t up = f->parent[(size_t)p * N + t->mesh.rank];
        if (sent_sum && !sent_mean && up >= 0 && !seen[up])
            seen[up] = 1, out[k++] = (uint32_t)up;
    }
    free(seen);
    return k;
}

/* Probes the members a failed round waited for; one that does not answer
 * (its process gone, its host away) is left out of the trees, here and,
 * as the views travel with the pushes, everywhere. One that answers (it
 * is only slow, or waiting itself) stays. */
static void leave_out_the_unreachable(ss__tree *t, const char *group, const uint32_t *suspects,
                                      uint32_t n) {
    const uint32_t ms = t->timeout_ms < 1000 ? t->timeout_ms : 1000;
    for (uint32_t i = 0; i < n; i++) {
        ss_status st = ss__tree_probe(t, group, suspects[i], ms);
        if (st != SS_ERR_IO && st != SS_ERR_TIMEOUT)
            continue;
        pthread_mutex_lock(&t->lock);
        ss__tree_group *tg = ss__tree_find_group(t, group);
        if (tg)
            ss__tree_mark(t, tg, suspects[i], true, 0, "unreachable");
        pthread_mutex_unlock(&t->lock);
    }
}

static ss_status tr_round(void *impl, const char *group, uint64_t member, const float *s,
                          const ss__bmuf_params *bmuf, float *out, size_t n,
                          ss__round_result *result) {
    ss__tree *t = impl;
    (void)member;
    if (bmuf && !ss__bmuf_params_valid(bmuf))
        return SS_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&t->lock);
    ss__tree_group *tg = ss__tree_find_group(t, group);
    if (!tg || tg->n != n) {
        pthread_mutex_unlock(&t->lock);
        return tg ? SS_ERR_SIZE_MISMATCH : SS_ERR_NOT_FOUND;
    }
    const ss__forest *f = &tg->forest;
    if (bmuf && !tg->bmuf_w) {
        tg->bmuf_w = malloc(3 * n * sizeof *tg->bmuf_w);
        tg->bmuf_started = calloc(f->parts, sizeof *tg->bmuf_started);
        tg->bmuf_root = calloc(f->parts, sizeof *tg->bmuf_root);
        if (!tg->bmuf_w || !tg->bmuf_started || !tg->bmuf_root) {
            free(tg->bmuf_w);
            free(tg->bmuf_started);
            free(tg->bmuf_root);
            tg->bmuf_w = NULL;
            tg->bmuf_started = NULL;
            tg->bmuf_root = NULL;
            pthread_mutex_unlock(&t->lock);
            return SS_ERR_NO_MEMORY;
        }
        tg->bmuf_m = tg->bmuf_w + n;
        tg->bmuf_b = tg->bmuf_w + 2 * n;
    }
    /* Round numbers advance only when a round succeeds, so members that
     * fail a round together retry the same one. A member that finds
     * others a round or more ahead (restarted, or it gave up on a round
     * the others finished) joins theirs. */
    if (tg->seen >= tg->done + 2) {
        SS_LOG_INFOF("tree", "event=catch_up group=%s from_round=%llu to_round=%llu", group,
                     (unsigned long long)(tg->done + 1), (unsigned long long)tg->seen);
        tg->done = tg->seen - 1;
    }
    const uint64_t round = tg->done + 1;
    ss__tree_slot *sl = &tg->slots[round % 2];
    if (sl->round != round)
        ss__tree_slot_open(sl, tg, round);
    pthread_mutex_unlock(&t->lock);
    float *up = malloc(n * sizeof *up);
    bool *flags = calloc(2 * (size_t)f->parts, sizeof *flags);
    push_job *jobs = calloc((size_t)f->parts * (f->members + 1), sizeof *jobs);
    ss_status st = up && flags && jobs ? SS_OK : SS_ERR_NO_MEMORY;
    const uint64_t deadline = ss__now_ns() + (uint64_t)t->timeout_ms * 1000000ull;
    struct timespec ts = ss__deadline_in((uint64_t)t->timeout_ms * 1000000ull);
    bool finished = false;
    pthread_mutex_lock(&t->lock);
    uint64_t epoch = tg->epoch;
    while (st == SS_OK) {
        if (tg->epoch != epoch) { /* a member left: this round again, on the new trees */
            epoch = tg->epoch;
            memset(flags, 0, 2 * (size_t)f->parts * sizeof *flags);
            if (sl->round != round)
                ss__tree_slot_open(sl, tg, round);
        }
        size_t nj =
            next_jobs(t, tg, sl, s, bmuf, out, up, flags, flags + f->parts, jobs, &finished);
        if (nj) {
            pthread_mutex_unlock(&t->lock);
            st = send_jobs(t, tg, epoch, round, jobs, nj, deadline);
            if (st == SS_ERR_STATE)
                st = SS_OK; /* the membership moved: the loop starts the round over */
            pthread_mutex_lock(&t->lock);
            for (size_t j = 0; j < nj; j++) /* a sum that overflowed: taken again next try */
                if (jobs[j].overflowed && jobs[j].kind == SS_TREE_KIND_SUM && sl->round == round)
                    ss__tree_slot_forget(sl, tg, jobs[j].partition);
            continue; /* more may have arrived meanwhile */
        }
        if (finished)
            break;
        if (pthread_cond_timedwait(&t->arrived, &t->lock, &ts) != 0 && ss__now_ns() >= deadline)
            st = SS_ERR_TIMEOUT;
    }
    if (st == SS_OK) {
        memcpy(tg->latest, out, n * sizeof *out);
        tg->have = true;
        result->round = round;
        result->participants = ss__tree_slot_fewest(sl, f->parts);
        tg->done = round;
        sl->round = 0;
    } else {
        /* What arrived stays: the next try of this round uses it (a retried
         * push is added once), and late arrivals still count. */
        SS_LOG_WARNF("tree", "event=round_failed group=%s round=%llu status=%s", group,
                     (unsigned long long)round, ss_status_name(st));
    }
    uint32_t *suspects =
        st == SS_ERR_TIMEOUT && flags ? malloc(t->mesh.npeers * sizeof *suspects) : NULL;
    const uint32_t nsuspects = suspects ? waited_for(t, tg, sl, flags, suspects) : 0;
    pthread_mutex_unlock(&t->lock);
    free(up);
    free(flags);
    free(jobs);
    leave_out_the_unreachable(t, group, suspects, nsuspects);
    free(suspects);
    return st;
}

static ss_status tr_central(void *impl, const char *group, float *c, size_t n) {
    ss__tree *t = impl;
    pthread_mutex_lock(&t->lock);
    ss__tree_group *tg = ss__tree_find_group(t, group);
    ss_status st = !tg          ? SS_ERR_NOT_FOUND
                   : tg->n != n ? SS_ERR_SIZE_MISMATCH
                   : !tg->have  ? SS_ERR_STATE
                                : SS_OK;
    if (st == SS_OK) /* no central variable: the last round's mean */
        memcpy(c, tg->latest, n * sizeof(float));
    pthread_mutex_unlock(&t->lock);
    return st;
}

static void tr_destroy(void *impl) {
    ss__tree *t = impl;
    ss__peer_mesh_stop(&t->mesh);
    while (t->groups) {
        ss__tree_group *tg = t->groups;
        t->groups = tg->next;
        ss__tree_group_free(tg);
    }
    ss__peer_mesh_clear(&t->mesh);
    ss__topology_free(&t->topo);
    pthread_cond_destroy(&t->arrived);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

/* A push named a round this member has not finished: the others are in
 * it and wait for this member's sums. Only a member that is some tree's
 * parent or root hears of a round before it joins one: one that is a
 * leaf in every tree is not told, and the others' round waits for it to
 * their deadline as before. */
static bool tr_round_waiting(void *impl, const char *group, uint64_t member) {
    ss__tree *t = impl;
    (void)member;
    pthread_mutex_lock(&t->lock);
    const ss__tree_group *tg = ss__tree_find_group(t, group);
    const bool waiting = tg && tg->seen > tg->done;
    pthread_mutex_unlock(&t->lock);
    return waiting;
}

static const ss__transport_ops tree_ops = {
    .join = tr_join,
    .leave = tr_leave,
    .easgd_exchange = tr_easgd,
    .round = tr_round,
    .read_central = tr_central,
    .round_waiting = tr_round_waiting,
    .destroy = tr_destroy,
};

/* The member list and the topology over it. Caller holds no lock. */
static ss_status set_members(ss__tree *t, const char *list, uint32_t rank, char *why,
                             size_t whylen) {
    char **peers;
    uint32_t n;
    ss_status st = ss__peer_list_parse(list, MAX_MEMBERS, &peers, &n);
    if (st != SS_OK || rank >= n) {
        if (st == SS_OK)
            ss__peer_list_free(peers, n);
        snprintf(why, whylen, "peers: 2 .. %d host:port, and this member's rank among them",
                 MAX_MEMBERS);
        return SS_ERR_INVALID_ARGUMENT;
    }
    ss__topology topo;
    st = t->topology_path[0] ? ss__topology_load(t->topology_path, (const char *const *)peers, n,
                                                 &topo, why, whylen)
                             : ss__topology_uniform(n, 10.0, &topo);
    if (st != SS_OK) {
        ss__peer_list_free(peers, n);
        return st;
    }
    pthread_mutex_lock(&t->lock);
    if ((st = ss__peer_mesh_set(&t->mesh, peers, n, rank)) == SS_OK) {
        ss__topology_free(&t->topo);
        t->topo = topo;
    } else {
        ss__topology_free(&topo);
    }
    pthread_mutex_unlock(&t->lock);
    return st;
}

ss_status ss__tree_transport_create(const ss__tree_config *cfg, ss__transport **out, char *why,
                                    size_t whylen) {
    char scratch[8];
    if (!why) {
        why = scratch;
        whylen = sizeof scratch;
    }
    why[0] = '\0';
    if (!cfg || !out || cfg->timeout_ms == 0)
        return SS_ERR_INVALID_ARGUMENT;
    ss__tree *t = calloc(1, sizeof *t);
    if (!t)
        return SS_ERR_NO_MEMORY;
    pthread_mutex_init(&t->lock, NULL);
    ss__cond_init_monotonic(&t->arrived);
    t->timeout_ms = cfg->timeout_ms;
    t->parts = cfg->parts;
    if (cfg->topology)
        snprintf(t->topology_path, sizeof t->topology_path, "%s", cfg->topology);
    ss_status st = ss__peer_mesh_init(&t->mesh, cfg->tls, why, whylen);
    if (st == SS_OK)
        st = set_members(t, cfg->peers, cfg->rank, why, whylen);
    const char *listen = cfg->listen && *cfg->listen ? cfg->listen : NULL;
    /* A push is one partition: up to 64M floats. */
    if (st == SS_OK && !(listen && !strcmp(listen, "-")))
        st =
            ss__peer_mesh_serve(&t->mesh, "tree member", listen, cfg->insecure_loopback, 2,
                                ((size_t)64 << 20) * 4 + 4096, ss__tree_methods, 3, t, why, whylen);
    if (st == SS_OK)
        st = ss__transport_create(&tree_ops, t, out, why, whylen);
    if (st != SS_OK)
        tr_destroy(t);
    return st;
}

int ss__tree_transport_port(ss__transport *tp) {
    ss__tree *t = ss__transport_impl(tp, &tree_ops);
    return t ? ss__peer_mesh_port(&t->mesh) : 0;
}

ss_status ss__tree_transport_set_peers(ss__transport *tp, const char *peers) {
    ss__tree *t = ss__transport_impl(tp, &tree_ops);
    if (!t)
        return SS_ERR_INVALID_ARGUMENT;
    char why[256];
    return set_members(t, peers, t->mesh.rank, why, sizeof why);
}

void ss__tree_transport_serve(ss__transport *tp, int method, const uint8_t *req, size_t len,
                              ss__rpc_reply *reply) {
    ss__tree *t = ss__transport_impl(tp, &tree_ops);
    if (t && method >= 0 && method < 3)
        ss__rpc_method_run(&ss__tree_methods[method], t, req, len, reply);
}

const ss__forest *ss__tree_transport_forest(ss__transport *tp, const char *group) {
    ss__tree *t = ss__transport_impl(tp, &tree_ops);
    if (!t || !group)
        return NULL;
    pthread_mutex_lock(&t->lock);
    ss__tree_group *tg = ss__tree_find_group(t, group);
    pthread_mutex_unlock(&t->lock);
    return tg ? &tg->forest : NULL;
}

/* The group of a tree transport, with its lock held (NULL, unlocked: none). */
static ss__tree_group *locked_group(ss__transport *tp, const char *group, ss__tree **out) {
    ss__tree *t = ss__transport_impl(tp, &tree_ops);
    if (!t || !group)
        return NULL;
    pthread_mutex_lock(&t->lock);
    ss__tree_group *tg = ss__tree_find_group(t, group);
    if (!tg)
        pthread_mutex_unlock(&t->lock);
    *out = t;
    return tg;
}

int ss__tree_transport_counts_gone(ss__transport *tp, const char *group, uint32_t m) {
    ss__tree *t;
    ss__tree_group *tg = locked_group(tp, group, &t);
    if (!tg)
        return -1;
    int gone = m < t->mesh.npeers ? tg->gone[m] != 0 : -1;
    pthread_mutex_unlock(&t->lock);
    return gone;
}

ss_status ss__tree_transport_probe(ss__transport *tp, const char *group, uint32_t m,
                                   uint32_t timeout_ms) {
    ss__tree *t = ss__transport_impl(tp, &tree_ops);
    return t ? ss__tree_probe(t, group, m, timeout_ms) : SS_ERR_INVALID_ARGUMENT;
}

ss_status ss__tree_transport_buffer_means(ss__transport *tp, const char *group, uint64_t round,
                                          const float *mean, uint32_t parts_in, uint32_t count) {
    ss__tree *t;
    ss__tree_group *tg = locked_group(tp, group, &t);
    if (!tg)
        return SS_ERR_NOT_FOUND;
    ss__tree_slot *s = &tg->slots[round % 2];
    ss__tree_slot_open(s, tg, round);
    memcpy(s->mean, mean, tg->n * sizeof *mean);
    for (uint32_t p = 0; p < parts_in && p < tg->forest.parts; p++)
        s->mean_count[p] = count;
    pthread_mutex_unlock(&t->lock);
    return SS_OK;
}

bool ss__tree_transport_buffered(ss__transport *tp, const char *group, uint64_t round,
                                 uint32_t from, uint32_t *means_in, uint32_t *fewest,
                                 bool *sum_from) {
    ss__tree *t;
    ss__tree_group *tg = locked_group(tp, group, &t);
    if (!tg)
        return false;
    const ss__tree_slot *s = &tg->slots[round % 2];
    const bool here = s->round == round;
    *means_in = 0;
    *fewest = here ? ss__tree_slot_fewest(s, tg->forest.parts) : 0;
    *sum_from = false;
    for (uint32_t p = 0; here && p < tg->forest.parts; p++) {
        *means_in += s->mean_count[p] != 0;
        if (from < tg->forest.members && s->got[(size_t)p * tg->forest.members + from])
            *sum_from = true;
    }
    pthread_mutex_unlock(&t->lock);
    return here;
}
