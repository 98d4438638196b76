/* Host-level averaging: a transport that averages the replicas of one
 * host's trainers first (a local S-MA round in memory) and sends one
 * exchange per local round to the real transport, so the PS sees one
 * member per host and its traffic drops by the number of local trainers.
 *
 * For S-EASGD a local round of snapshots s_i with mean m becomes one remote
 * exchange of m, which answers D = alpha (m - c). Each member is told
 * d_i = (s_i - m) + D, so the engine's x_i -= d_i pulls x_i to the host
 * mean and then the host mean towards the centre, as one delta. For
 * S-MA the remote round averages the host means and every local member
 * gets that average; for S-BMUF the PS's block step runs over the host
 * means and every local member gets the block start. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/strbuf.h"
#include "shadow/host_average_transport.h"
#include "shadow/inproc_transport.h"
#include "shadow/transport.h"

/* Longest a member waits for its local round's remote half. */
#define REMOTE_WAIT_NS (60ull * 1000000000ull)

typedef struct ha_group {
    struct ha_group *next;
    char *name;
    size_t n;
    uint32_t local_members;
    bool remote_joined;
    uint64_t remote_member;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    float *result;         /* D (EASGD) or the remote mean (MA/BMUF) of round done_round */
    uint64_t claimed;      /* last local round (+1) that has a leader */
    uint64_t started;      /* last local round (+1) whose remote half began */
    uint64_t done;         /* last local round (+1) whose remote half ended */
    ss_status done_status; /* of round done */
    uint32_t readers;      /* members of round done yet to read result */
} ha_group;

typedef struct host_avg {
    ss__transport *local;  /* in-process rounds among the host's members; owned */
    ss__transport *remote; /* the PS; not owned */
    pthread_mutex_t lock;  /* guards the list and membership counts */
    ha_group *groups;
} host_avg;

static ha_group *find(host_avg *h, const char *name) {
    pthread_mutex_lock(&h->lock);
    ha_group *g = h->groups;
    while (g && strcmp(g->name, name))
        g = g->next;
    pthread_mutex_unlock(&h->lock);
    return g;
}

static ss_status ha_join(void *impl, const char *name, size_t n, uint64_t key, uint64_t *member) {
    host_avg *h = impl;
    ss_status st = ss__transport_join_keyed(h->local, name, n, key, member);
    if (st != SS_OK)
        return st;
    pthread_mutex_lock(&h->lock);
    ha_group *g = h->groups;
    while (g && strcmp(g->name, name))
        g = g->next;
    if (!g && (g = calloc(1, sizeof *g))) {
        g->name = strdup(name);
        g->n = n;
        g->result = malloc(n * sizeof(float));
        pthread_mutex_init(&g->lock, NULL);
        ss__cond_init_monotonic(&g->cond);
        if (!g->name || !g->result) {
            free(g->name);
            free(g->result);
            free(g);
            g = NULL;
        } else {
            g->next = h->groups;
            h->groups = g;
        }
    }
    if (!g)
        st = SS_ERR_NO_MEMORY;
    else if (!g->remote_joined &&
             (st = ss__transport_join(h->remote, name, n, &g->remote_member)) == SS_OK)
        g->remote_joined = true;
    if (st == SS_OK)
        g->local_members++;
    pthread_mutex_unlock(&h->lock);
    if (st != SS_OK)
        ss__transport_leave(h->local, name, *member);
    return st;
}

static ss_status ha_leave(void *impl, const char *name, uint64_t member) {
    host_avg *h = impl;
    ss_status st = ss__transport_leave(h->local, name, member);
    pthread_mutex_lock(&h->lock);
    ha_group *g = h->groups;
    while (g && strcmp(g->name, name))
        g = g->next;
    if (g && st == SS_OK && g->local_members && --g->local_members == 0 && g->remote_joined) {
        ss__transport_leave(h->remote, name, g->remote_member); /* the host's last member */
        g->remote_joined = false;
    }
    pthread_mutex_unlock(&h->lock);
    return st;
}

/* The PS forgot the host (it restarted, or expired us): join again. */
static ss_status remote_rejoin(host_avg *h, ha_group *g) {
    pthread_mutex_lock(&h->lock);
    if (g->remote_joined) /* leave first: the shards that did not forget keep a zombie */
        ss__transport_leave(h->remote, g->name, g->remote_member);
    ss_status st = ss__transport_join(h->remote, g->name, g->n, &g->remote_member);
    g->remote_joined = st == SS_OK;
    pthread_mutex_unlock(&h->lock);
    return st;
}

static ss_status ha_heartbeat(void *impl, const char *name, uint64_t member) {
    host_avg *h = impl;
    ss_status st = ss__transport_heartbeat(h->local, name, member);
    ha_group *g = find(h, name);
    if (st != SS_OK || !g)
        return st == SS_OK ? SS_ERR_NOT_FOUND : st;
    if (ss__transport_heartbeat(h->remote, name, g->remote_member) == SS_ERR_NOT_FOUND)
        remote_rejoin(h, g);
    return SS_OK;
}

/* The host's local round waits for this member (whatever the algorithm,
 * the local half is an S-MA round). */
static bool ha_round_waiting(void *impl, const char *name, uint64_t member) {
    host_avg *h = impl;
    return ss__transport_round_waiting(h->local, name, member);
}

static ss_status remote_easgd(host_avg *h, ha_group *g, const float *m, float alpha) {
    ss_status st = ss__transport_easgd_exchange(h->remote, g->name, g->remote_member, m, alpha,
                                                g->result, g->n);
    if (st == SS_ERR_NOT_FOUND && remote_rejoin(h, g) == SS_OK)
        st = ss__transport_easgd_exchange(h->remote, g->name, g->remote_member, m, alpha, g->result,
                                          g->n);
    return st;
}

static ss_status remote_round(host_avg *h, ha_group *g, const float *m,
                              const ss__bmuf_params *bmuf) {
    ss__round_result rr;
    ss_status st =
        ss__transport_round(h->remote, g->name, g->remote_member, m, bmuf, g->result, g->n, &rr);
    if (st == SS_ERR_NOT_FOUND && remote_rejoin(h, g) == SS_OK)
        st = ss__transport_round(h->remote, g->name, g->remote_member, m, bmuf, g->result, g->n,
                                 &rr);
    return st;
}

/* What a host round is: S-EASGD with alpha, S-MA (bmuf NULL) or S-BMUF. */
typedef struct round_kind {
    bool easgd;
    float alpha;
    const ss__bmuf_params *bmuf;
} round_kind;

/* Runs or waits for the remote half of local round res; on SS_OK out
 * holds the remote result (D, the remote mean or the block start). `m` is
 * the local mean. */
static ss_status remote_half(host_avg *h, ha_group *g, const ss__round_result *res, const float *m,
                             const round_kind *kind, float *out) {
    uint64_t id = res->round + 1;
    struct timespec until = ss__deadline_in(REMOTE_WAIT_NS);
    pthread_mutex_lock(&g->lock);
    if (g->claimed < id) { /* first back: the leader of this round */
        /* Claimed at once, so that no other member of this round also
         * leads it while the leader waits below. One remote call at a
         * time, and each result read before the next overwrites it: a
         * local round that closed on its deadline while the previous
         * remote half is still in flight (done < started) waits for it,
         * instead of a second leader calling the PS as the same member and
         * writing the same result buffer. */
        g->claimed = id;
        while (g->readers > 0 || g->done < g->started)
            if (pthread_cond_timedwait(&g->cond, &g->lock, &until) != 0) {
                pthread_mutex_unlock(&g->lock);
                return SS_ERR_TIMEOUT;
            }
        g->started = id;
        pthread_mutex_unlock(&g->lock);
        ss_status st =
            kind->easgd ? remote_easgd(h, g, m, kind->alpha) : remote_round(h, g, m, kind->bmuf);
        pthread_mutex_lock(&g->lock);
        g->done = id;
        g->done_status = st;
        g->readers = res->participants;
        pthread_cond_broadcast(&g->cond);
    }
    while (g->done < id)
        if (pthread_cond_timedwait(&g->cond, &g->lock, &until) != 0)
            break;
    ss_status st = g->done == id ? g->done_status : SS_ERR_TIMEOUT;
    if (g->done == id) {
        /* Also on an error: an S-EASGD D then holds what the PS applied
         * (zeros elsewhere), which the members must still take. */
        if (st == SS_OK || kind->easgd)
            memcpy(out, g->result, g->n * sizeof(float));
        if (g->readers && --g->readers == 0)
            pthread_cond_broadcast(&g->cond);
    }
    pthread_mutex_unlock(&g->lock);
    return st;
}

/* One host round for a member: the local mean m of the host's snapshots,
 * then the remote half (remote_half). S-EASGD: out = d_i = (s_i - m) + D;
 * S-MA: out = the remote mean; S-BMUF: out = the PS's block start. */
static ss_status host_round(host_avg *h, const char *name, uint64_t member, const float *s,
                            size_t n, const round_kind *kind, float *out, ss__round_result *res) {
    const bool easgd = kind->easgd;
    if (easgd) /* S-EASGD writes all of out: zero until something is applied */
        memset(out, 0, n * sizeof *out);
    ha_group *g = find(h, name);
    if (!g || g->n != n)
        return g ? SS_ERR_SIZE_MISMATCH : SS_ERR_NOT_FOUND;
    float *m = calloc((easgd ? 2 : 1) * n, sizeof(float));
    if (!m)
        return SS_ERR_NO_MEMORY;
    float *remote = easgd ? m + n : out; /* S-EASGD: D, zero where the PS applied nothing */
    ss_status st = ss__transport_allreduce_mean(h->local, name, member, s, m, n, res);
    if (st == SS_OK) {
        st = remote_half(h, g, res, m, kind, remote);
        /* S-EASGD: to the host mean, then by what the PS applied, even when
         * the exchange failed in part (x + c stays conserved). */
        if (easgd)
            for (size_t i = 0; i < n; i++)
                out[i] = (s[i] - m[i]) + remote[i];
    }
    free(m);
    return st;
}

static ss_status ha_easgd(void *impl, const char *name, uint64_t member, const float *s,
                          float alpha, float *d, size_t n) {
    ss__round_result res;
    return host_round(impl, name, member, s, n, &(round_kind){.easgd = true, .alpha = alpha}, d,
                      &res);
}

static ss_status ha_round(void *impl, const char *name, uint64_t member, const float *s,
                          const ss__bmuf_params *bmuf, float *avg, size_t n,
                          ss__round_result *result) {
    ss__round_result res;
    ss_status st = host_round(impl, name, member, s, n, &(round_kind){.bmuf = bmuf}, avg, &res);
    if (st == SS_OK && result)
        *result = res;
    return st;
}

static ss_status ha_read_central(void *impl, const char *name, float *c, size_t n) {
    return ss__transport_read_central(((host_avg *)impl)->remote, name, c, n);
}

static void ha_destroy(void *impl) {
    host_avg *h = impl;
    for (ha_group *g = h->groups, *next; g; g = next) {
        next = g->next;
        if (g->remote_joined)
            ss__transport_leave(h->remote, g->name, g->remote_member);
        pthread_mutex_destroy(&g->lock);
        pthread_cond_destroy(&g->cond);
        free(g->result);
        free(g->name);
        free(g);
    }
    ss__transport_destroy(h->local);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

static const ss__transport_ops host_avg_ops = {.join = ha_join,
                                               .leave = ha_leave,
                                               .easgd_exchange = ha_easgd,
                                               .round = ha_round,
                                               .read_central = ha_read_central,
                                               .heartbeat = ha_heartbeat,
                                               .round_waiting = ha_round_waiting,
                                               .destroy = ha_destroy};

ss_status ss__host_average_transport_create(ss__transport *remote, uint32_t local_deadline_ms,
                                            ss__transport **out, char *why, size_t whylen) {
    if (!remote || !out || local_deadline_ms == 0)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "host averaging needs a remote transport and a local deadline");
    host_avg *h = calloc(1, sizeof *h);
    if (!h)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for host averaging");
    pthread_mutex_init(&h->lock, NULL);
    h->remote = remote;
    ss__inproc_config lc = {.round_deadline_ms = local_deadline_ms};
    ss_status st = ss__inproc_transport_create(&lc, &h->local, why, whylen);
    if (st == SS_OK && (st = ss__transport_create(&host_avg_ops, h, out, why, whylen)) != SS_OK)
        ss__transport_destroy(h->local);
    if (st != SS_OK) {
        pthread_mutex_destroy(&h->lock);
        free(h);
    }
    return st;
}
