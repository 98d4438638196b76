/* Decentralized averaging: pull gossip between members (gossip_transport.h). */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/finite.h"
#include "common/log.h"
#include "common/names.h"
#include "common/strbuf.h"
#include "rpc/auth.h"
#include "rpc/peer/gossip_transport.h"
#include "rpc/peer/peer_list.h"
#include "rpc/peer/peer_sync.pb-c.h"
#include "rpc/rpc_pb.h"
#include "shadow/kernels.h"

#define PULL_METHOD  "/shadowsync.v1.PeerSync/Pull"
#define LEAVE_METHOD "/shadowsync.v1.PeerSync/Leave"

/* One of this member's groups: the latest snapshot its engine sent, which
 * is what peers pull. */
typedef struct local_group {
    struct local_group *next;
    char *name;
    size_t n;
    float *latest;
    bool have; /* latest holds a snapshot */
    uint64_t rounds;
    uint8_t left[SS_GOSSIP_MAX_PEERS]; /* members that left the group for good */
} local_group;

typedef struct gossip {
    pthread_mutex_t lock; /* guards groups, the peer list and the channels */
    local_group *groups;
    ss__peer_mesh mesh;
    uint32_t timeout_ms;
    bool random;
    uint64_t rng, turn;
} gossip;

/* ---- the peer list ---- */

/* Splits "a,b,c" into the mesh's list; rank must be one of them. */
static ss_status parse_peers(gossip *g, const char *list, uint32_t rank) {
    char **peers;
    uint32_t n;
    ss_status st = ss__peer_list_parse(list, SS_GOSSIP_MAX_PEERS, &peers, &n);
    return st == SS_OK ? ss__peer_mesh_set(&g->mesh, peers, n, rank) : st;
}

/* The round's start in the schedule: the ring goes round the others, one
 * step further each round; the random schedule draws (xorshift). Caller
 * holds g->lock. */
static uint64_t round_start(gossip *g) {
    if (!g->random)
        return g->turn++;
    g->rng ^= g->rng << 13;
    g->rng ^= g->rng >> 7;
    g->rng ^= g->rng << 17;
    return g->rng;
}

/* The k-th peer to try in a round that starts at `start`: every other
 * member once, never this one. */
static uint32_t pick_peer(const gossip *g, uint64_t start, uint32_t k) {
    uint32_t others = g->mesh.npeers - 1;
    return (g->mesh.rank + 1 + (uint32_t)((start + k) % others)) % g->mesh.npeers;
}

static local_group *find_local(gossip *g, const char *name) {
    local_group *lg = g->groups;
    while (lg && strcmp(lg->name, name))
        lg = lg->next;
    return lg;
}

/* ---- serving pulls ---- */

static void serve_pull(void *ctx, void *request, ss__rpc_reply *reply) {
    gossip *g = ctx;
    const Shadowsync__V1__PullRequest *m = request;
    if (!ss__ps_group_name_valid(m->group)) {
        reply->status = SS_ERR_INVALID_ARGUMENT;
        snprintf(reply->message, sizeof reply->message, "group name must be " SS_PS_GROUP_RULE);
        return;
    }
    pthread_mutex_lock(&g->lock);
    local_group *lg = find_local(g, m->group);
    if (!lg || !lg->have) {
        reply->status = SS_ERR_NOT_FOUND;
        snprintf(reply->message, sizeof reply->message,
                 "no snapshot of this group here yet (the member has not synced it)");
    } else if (lg->n != m->size) {
        reply->status = SS_ERR_SIZE_MISMATCH;
        snprintf(reply->message, sizeof reply->message,
                 "a size of %llu floats is not this member's (refusals never say the group's)",
                 (unsigned long long)m->size);
    } else {
        Shadowsync__V1__PullReply r = SHADOWSYNC__V1__PULL_REPLY__INIT;
        r.round = lg->rounds;
        r.snapshot.data = (uint8_t *)lg->latest;
        r.snapshot.len = lg->n * sizeof(float);
        ss__rpc_reply_pack(&r.base, reply); /* copies the floats, under the lock */
    }
    pthread_mutex_unlock(&g->lock);
}

static const ss__rpc_request_type pull_request = {&shadowsync__v1__pull_request__descriptor,
                                                  serve_pull, NULL, 0, 0};

static void serve_leave(void *ctx, void *request, ss__rpc_reply *reply) {
    gossip *g = ctx;
    const Shadowsync__V1__PeerLeaveRequest *m = request;
    pthread_mutex_lock(&g->lock);
    if (ss__peer_sender_ok(m->group, m->from, g->mesh.npeers, g->mesh.rank, reply)) {
        local_group *lg = find_local(g, m->group);
        if (lg)
            lg->left[m->from] = 1;
        Shadowsync__V1__PeerLeaveReply r = SHADOWSYNC__V1__PEER_LEAVE_REPLY__INIT;
        ss__rpc_reply_pack(&r.base, reply);
    }
    pthread_mutex_unlock(&g->lock);
}

static const ss__rpc_request_type leave_request = {&shadowsync__v1__peer_leave_request__descriptor,
                                                   serve_leave, NULL, 0, 0};

static const ss__rpc_method gossip_methods[] = {
    /* the model, and the membership: both need the token when one is set */
    {PULL_METHOD, NULL, false, NULL, false, 0, &pull_request, false,
     false}, /* the server's limit: 4 KiB */
    {LEAVE_METHOD, NULL, false, NULL, false, 0, &leave_request, false, false},
};

/* ---- the ops ---- */

static ss_status gp_join(void *impl, const char *group, size_t n, uint64_t key, uint64_t *member) {
    (void)key; /* one member per peer: nobody to replace */
    gossip *g = impl;
    pthread_mutex_lock(&g->lock);
    local_group *lg = find_local(g, group);
    ss_status st = SS_OK;
    if (lg) {
        st = lg->n == n ? SS_OK : SS_ERR_SIZE_MISMATCH;
    } else if (!(lg = calloc(1, sizeof *lg)) || !(lg->name = strdup(group)) ||
               !(lg->latest = calloc(n, sizeof(float)))) {
        if (lg)
            free(lg->name);
        free(lg);
        st = SS_ERR_NO_MEMORY;
    } else {
        lg->n = n;
        lg->next = g->groups;
        g->groups = lg;
    }
    pthread_mutex_unlock(&g->lock);
    if (st == SS_OK)
        *member = 1; /* one member per group here: this trainer */
    return st;
}

/* Tells the members still in the group that this one leaves it for good;
 * best effort, within a second. */
static void announce_leave(gossip *g, const char *group) {
    Shadowsync__V1__PeerLeaveRequest m = SHADOWSYNC__V1__PEER_LEAVE_REQUEST__INIT;
    m.group = (char *)group;
    pthread_mutex_lock(&g->lock);
    m.from = g->mesh.rank;
    local_group *lg = find_local(g, group);
    ss__rpc_channel **ch = lg ? calloc(g->mesh.npeers, sizeof *ch) : NULL;
    size_t k = 0;
    for (uint32_t i = 0; ch && i < g->mesh.npeers; i++)
        if (i != g->mesh.rank && !lg->left[i] && (ch[k] = ss__peer_mesh_channel(&g->mesh, i)))
            k++;
    pthread_mutex_unlock(&g->lock);
    ss__peer_tell_all(ch, k, LEAVE_METHOD, &m.base, g->timeout_ms);
    free(ch);
}

static ss_status gp_leave(void *impl, const char *group, uint64_t member) {
    gossip *g = impl;
    (void)member;
    announce_leave(g, group);
    pthread_mutex_lock(&g->lock);
    local_group **pp = &g->groups;
    while (*pp && strcmp((*pp)->name, group))
        pp = &(*pp)->next;
    local_group *lg = *pp;
    if (lg)
        *pp = lg->next;
    pthread_mutex_unlock(&g->lock);
    if (!lg)
        return SS_ERR_NOT_FOUND;
    free(lg->name);
    free(lg->latest);
    free(lg);
    return SS_OK;
}

static ss_status gp_easgd(void *impl, const char *group, uint64_t member, const float *s,
                          float alpha, float *d, size_t n) {
    (void)impl, (void)group, (void)member, (void)s, (void)alpha;
    memset(d, 0, n * sizeof *d);    /* nothing applied */
    return SS_ERR_INVALID_ARGUMENT; /* no central variable: S-MA only */
}

/* A pull's reply read where gRPC keeps it: the snapshot is the reply's
 * last field, copied once, straight into place. */
typedef struct pull_reader {
    float *out;
    size_t n;
} pull_reader;

static ss_status read_pull(ss__rpc_request *rq, const ss__rpc_message *msg, void *arg) {
    (void)rq;
    const pull_reader *pr = arg;
    return ss__rpc_read_tail_reply(msg, &shadowsync__v1__pull_reply__descriptor, 2,
                                   offsetof(Shadowsync__V1__PullReply, snapshot), pr->out,
                                   pr->n * sizeof(float), NULL, NULL);
}

/* One pull from peer i: its snapshot into peer (n floats). */
static ss_status pull(gossip *g, uint32_t i, const char *group, size_t n, float *peer) {
    pthread_mutex_lock(&g->lock);
    ss__rpc_channel *ch = ss__peer_mesh_channel(&g->mesh, i);
    pthread_mutex_unlock(&g->lock);
    if (!ch)
        return SS_ERR_IO;
    Shadowsync__V1__PullRequest req = SHADOWSYNC__V1__PULL_REQUEST__INIT;
    req.group = (char *)group;
    req.size = n;
    uint8_t buf[512];
    if (protobuf_c_message_get_packed_size(&req.base) > sizeof buf)
        return SS_ERR_INVALID_ARGUMENT; /* group names are shorter */
    pull_reader pr = {peer, n};
    ss__rpc_request rq = {.ch = ch,
                          .method = PULL_METHOD,
                          .req = buf,
                          .len = protobuf_c_message_pack(&req.base, buf),
                          .on_reply = read_pull,
                          .on_reply_arg = &pr};
    ss_status st = ss__rpc_call_windowed(&rq, 1, g->timeout_ms, false, 1);
    free(rq.resp);
    if (st != SS_OK)
        return st;
    return ss__all_finite(peer, n) ? SS_OK : SS_ERR_NON_FINITE; /* NaN or Inf from a peer */
}

static ss_status gp_round(void *impl, const char *group, uint64_t member, const float *s,
                          const ss__bmuf_params *bmuf, float *out, size_t n,
                          ss__round_result *result) {
    gossip *g = impl;
    (void)member;
    if (bmuf)
        return SS_ERR_INVALID_ARGUMENT; /* no member holds a global block state */
    pthread_mutex_lock(&g->lock);
    local_group *lg = find_local(g, group);
    if (!lg || lg->n != n) {
        pthread_mutex_unlock(&g->lock);
        return lg ? SS_ERR_SIZE_MISMATCH : SS_ERR_NOT_FOUND;
    }
    memcpy(lg->latest, s, n * sizeof(float)); /* what peers pull from now on */
    lg->have = true;
    uint64_t start = round_start(g);
    uint32_t others = g->mesh.npeers - 1;
    pthread_mutex_unlock(&g->lock);
    /* Try the others in schedule order until one answers; those that left
     * are passed over, and with all of them gone the member is alone: its
     * round is its own snapshot (as a PS's round with one member). */
    ss_status st = SS_ERR_IO;
    uint32_t tried = 0;
    for (uint32_t k = 0; k < others; k++) {
        pthread_mutex_lock(&g->lock);
        uint32_t i = pick_peer(g, start, k);
        lg = find_local(g, group);
        bool left = lg && lg->left[i];
        pthread_mutex_unlock(&g->lock);
        if (left)
            continue;
        tried++;
        if ((st = pull(g, i, group, n, out)) == SS_OK)
            break;
        /* A peer without the group is not this member being unknown (which
         * NOT_FOUND tells an engine: join again): say "not yet". */
        if (st == SS_ERR_NOT_FOUND)
            st = SS_ERR_STATE;
        SS_LOG_DEBUGF("gossip", "event=pull_failed peer=%u status=%s", i, ss_strerror(st));
    }
    if (tried == 0) {
        memcpy(out, s, n * sizeof *out);
    } else if (st != SS_OK) {
        return st;
    } else {
        for (size_t k = 0; k < n; k++)
            out[k] = 0.5f * (s[k] + out[k]);
    }
    pthread_mutex_lock(&g->lock);
    lg = find_local(g, group);
    uint64_t rounds = lg ? ++lg->rounds : 0;
    pthread_mutex_unlock(&g->lock);
    result->round = rounds;
    result->participants = tried ? 2 : 1;
    return SS_OK;
}

static ss_status gp_central(void *impl, const char *group, float *c, size_t n) {
    gossip *g = impl;
    pthread_mutex_lock(&g->lock);
    local_group *lg = find_local(g, group);
    ss_status st = !lg          ? SS_ERR_NOT_FOUND
                   : lg->n != n ? SS_ERR_SIZE_MISMATCH
                   : !lg->have  ? SS_ERR_STATE
                                : SS_OK;
    if (st == SS_OK) /* no central variable: this member's own latest snapshot */
        memcpy(c, lg->latest, n * sizeof(float));
    pthread_mutex_unlock(&g->lock);
    return st;
}

static void gp_destroy(void *impl) {
    gossip *g = impl;
    ss__peer_mesh_stop(&g->mesh);
    while (g->groups) {
        local_group *lg = g->groups;
        g->groups = lg->next;
        free(lg->name);
        free(lg->latest);
        free(lg);
    }
    ss__peer_mesh_clear(&g->mesh);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

static const ss__transport_ops gossip_ops = {
    .join = gp_join,
    .leave = gp_leave,
    .easgd_exchange = gp_easgd,
    .round = gp_round,
    .read_central = gp_central,
    .destroy = gp_destroy,
};

ss_status ss__gossip_transport_create(const ss__gossip_config *cfg, ss__transport **out,
                                      char *why_out, size_t whylen) {
    ss__why(why_out, whylen, "%s", "");
    if (!cfg || !out || cfg->timeout_ms == 0) {
        ss__why(why_out, whylen, "no config, or a timeout of 0");
        return SS_ERR_INVALID_ARGUMENT;
    }
    gossip *g = calloc(1, sizeof *g);
    if (!g)
        return SS_ERR_NO_MEMORY;
    pthread_mutex_init(&g->lock, NULL);
    g->timeout_ms = cfg->timeout_ms;
    g->random = cfg->random;
    g->rng = cfg->seed ? cfg->seed : 0x9e3779b97f4a7c15ull + cfg->rank;
    char why[256] = "";
    ss_status st = ss__peer_mesh_init(&g->mesh, cfg->tls, why, sizeof why);
    if (st == SS_OK && (st = parse_peers(g, cfg->peers, cfg->rank)) == SS_ERR_INVALID_ARGUMENT)
        snprintf(why, sizeof why,
                 "peers must be 2 to %d host:port, and rank %u one of them (from 0)",
                 SS_GOSSIP_MAX_PEERS, cfg->rank);
    const char *listen = cfg->listen && *cfg->listen ? cfg->listen : NULL;
    if (st == SS_OK &&
        (st = ss__peer_mesh_serve(&g->mesh, "gossip member", listen, cfg->insecure_loopback, 1,
                                  4096, gossip_methods, 2, g, why, sizeof why)) != SS_OK)
        SS_LOG_ERRORF("gossip", "event=refused listen=%s why=\"%s\"",
                      listen ? listen : g->mesh.peers[g->mesh.rank], why);
    if (st == SS_OK)
        st = ss__transport_create(&gossip_ops, g, out, why, sizeof why);
    if (st != SS_OK)
        ss__why(why_out, whylen, "%s", why);
    if (st != SS_OK)
        gp_destroy(g);
    return st;
}

int ss__gossip_transport_port(ss__transport *t) {
    gossip *g = ss__transport_impl(t, &gossip_ops);
    return g ? ss__peer_mesh_port(&g->mesh) : 0;
}

ss_status ss__gossip_transport_set_peers(ss__transport *t, const char *peers) {
    gossip *g = ss__transport_impl(t, &gossip_ops);
    if (!g)
        return SS_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&g->lock);
    ss_status st = parse_peers(g, peers, g->mesh.rank);
    pthread_mutex_unlock(&g->lock);
    return st;
}
