/* The DenseSync client that re-cuts its groups when the shard map changes
 * (recut_transport.h): a gRPC transport per cut, the engine's member ids
 * mapped to the current cut's. */
#include "rpc/dense/recut_transport.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/shard_map.h"
#include "common/strbuf.h"

/* A failed call reads the map file at most this often. */
#define MAP_CHECK_NS 100000000ull
/* The old centre is a re-joining member's first snapshot: a chunk it
 * joined fresh starts there exactly; one that another member seeded and
 * synced since hardly moves. */
#define SEED_ALPHA 1e-6f

/* One joined member, as the engine knows it. */
typedef struct member_rec {
    struct member_rec *next;
    uint64_t id; /* the engine's */
    char *group;
    size_t n;
    uint64_t key;   /* its own (ss__transport_ops.join) */
    uint64_t inner; /* its id on the current cut; 0: not joined there yet */
    bool exchanged; /* it made S-EASGD exchanges ... */
    bool rounds;    /* ... or MA/BMUF rounds: only an S-EASGD group is seeded */
    float *seed;    /* the old cut's centre, until it joins the new cut */
    bool fresh;     /* its next join makes memberless chunks anew (a re-cut) */
} member_rec;

typedef struct recut_tp {
    char map_path[PATH_MAX];
    ss__grpc_transport_config cfg; /* every cut's settings but targets and epoch */
    ss__rpc_tls tls;               /* cfg.tls's copy, its files' names copied too */
    char *tls_files[3];
    char targets[SS_SHARD_MAP_PS_MAX];
    ss__transport *inner; /* the current cut */
    uint64_t epoch;
    pthread_rwlock_t cut; /* calls hold it for reading, a re-cut for writing */
    pthread_mutex_t lock; /* members, next_id; a member's joins on the cut */
    member_rec *members;
    uint64_t next_id;
    _Atomic uint64_t checked_ns; /* the map file was last read after a failure */
    _Atomic uint64_t recuts;
} recut_tp;

static ss_status read_map(const recut_tp *t, ss__shard_map *m) {
    char why[300];
    ss_status st = ss__shard_map_read(t->map_path, m, why, sizeof why);
    if (st != SS_OK)
        SS_LOG_WARNF("rpc", "event=bad_shard_map path=%s why=\"%s\"", t->map_path, why);
    return st;
}

/* A gRPC transport over map's list. Its joins are re-cuts, the first
 * cut's too: a trainer that starts after the fleet changed finds the old
 * cut's chunks, memberless, in the way. */
static ss_status open_cut(recut_tp *t, const ss__shard_map *m, ss__transport **out) {
    ss__grpc_transport_config c = t->cfg;
    c.targets = m->ps; /* copied by the transport */
    c.epoch = m->epoch;
    c.recut = true;
    ss_status st = ss__grpc_transport_create(&c, out, NULL, 0);
    if (st == SS_OK) /* the list of the cut in use */
        snprintf(t->targets, sizeof t->targets, "%s", m->ps);
    return st;
}

static void rec_free(member_rec *m) {
    free(m->seed);
    free(m->group);
    free(m);
}

/* The engine's member `id` of group, or NULL; t->lock held. */
static member_rec *lookup(const recut_tp *t, const char *group, uint64_t id) {
    member_rec *m = t->members;
    while (m && !(m->id == id && !strcmp(m->group, group)))
        m = m->next;
    return m;
}

/* Joins m on the current cut if it is not in it yet, seeding an S-EASGD
 * group with the old cut's centre (cut held for reading or writing,
 * t->lock held: one join at a time). */
static ss_status ensure_joined(recut_tp *t, member_rec *m) {
    ss_status st = SS_OK;
    if (!m->inner) {
        uint64_t inner = 0;
        st = m->fresh ? ss__grpc_transport_join_fresh(t->inner, m->group, m->n, m->key, &inner)
                      : ss__transport_join_keyed(t->inner, m->group, m->n, m->key, &inner);
        float *d = st == SS_OK && m->seed ? malloc(m->n * sizeof *d) : NULL;
        if (d) {
            ss_status seeded = ss__transport_easgd_exchange(t->inner, m->group, inner, m->seed,
                                                            SEED_ALPHA, d, m->n);
            SS_LOG_INFOF("rpc", "event=recut_seed group=%s epoch=%llu status=%s", m->group,
                         (unsigned long long)t->epoch, ss_status_name(seeded));
        }
        free(d);
        if (st == SS_OK) {
            m->inner = inner;
            m->fresh = false;
            free(m->seed);
            m->seed = NULL;
        } else {
            st = SS_ERR_STATE; /* not NOT_FOUND: the engine would join a second time */
        }
    }
    return st;
}

/* Leaves the old cut (read first what an S-EASGD group's new cut starts
 * from), without an epoch: the PS serve the new map already. */
static void leave_old_cut(recut_tp *t, ss__transport *old) {
    ss__grpc_transport_set_epoch(old, 0);
    for (member_rec *m = t->members; m; m = m->next) {
        if (!m->inner)
            continue;
        if (m->exchanged && !m->rounds && !m->seed && (m->seed = malloc(m->n * sizeof(float))) &&
            ss__transport_read_central(old, m->group, m->seed, m->n) != SS_OK) {
            free(m->seed);
            m->seed = NULL; /* the first snapshot on the new cut starts its centre */
        }
        /* Without the old centre in hand, an S-EASGD chunk is kept as its
         * PS has it rather than made anew from a replica. */
        m->fresh = m->seed || !m->exchanged;
        ss__transport_leave(old, m->group, m->inner);
        m->inner = 0;
    }
}

/* After a failed call: true when the map file has a newer epoch and the
 * groups are cut again by it (by this call or another), so the call is
 * worth making again. */
static bool maybe_recut(recut_tp *t) {
    const uint64_t now = ss__now_ns(), was = atomic_load(&t->checked_ns);
    if (now - was < MAP_CHECK_NS ||
        !atomic_compare_exchange_strong(&t->checked_ns, &(uint64_t){was}, now))
        return false;
    ss__shard_map map;
    pthread_rwlock_rdlock(&t->cut);
    const uint64_t serving = t->epoch;
    pthread_rwlock_unlock(&t->cut);
    if (read_map(t, &map) != SS_OK || !ss__shard_map_newer(serving, map.epoch))
        return false;
    pthread_rwlock_wrlock(&t->cut);
    bool done = t->epoch >= map.epoch;
    ss__transport *next = NULL;
    if (!done && !strcmp(map.ps, t->targets)) { /* the same list: the same cut */
        ss__grpc_transport_set_epoch(t->inner, map.epoch);
        SS_LOG_INFOF("rpc", "event=reroute from=%llu epoch=%llu ps=%s (same list, same cut)",
                     (unsigned long long)t->epoch, (unsigned long long)map.epoch, map.ps);
        t->epoch = map.epoch;
        done = true;
    } else if (!done && open_cut(t, &map, &next) == SS_OK) {
        leave_old_cut(t, t->inner);
        ss__transport_destroy(t->inner);
        t->inner = next;
        const uint64_t from = t->epoch;
        t->epoch = map.epoch;
        size_t groups = 0, joined = 0;
        pthread_mutex_lock(&t->lock);
        for (member_rec *m = t->members; m; m = m->next, groups++)
            joined += ensure_joined(t, m) == SS_OK;
        pthread_mutex_unlock(&t->lock);
        atomic_fetch_add(&t->recuts, 1);
        SS_LOG_INFOF("rpc", "event=recut from=%llu epoch=%llu ps=%s groups=%zu joined=%zu",
                     (unsigned long long)from, (unsigned long long)map.epoch, map.ps, groups,
                     joined);
        done = true;
    }
    pthread_rwlock_unlock(&t->cut);
    return done;
}

/* ---- the ops: each on the current cut, made again once after a re-cut ---- */

static ss_status rt_join(void *impl, const char *group, size_t n, uint64_t key, uint64_t *member) {
    recut_tp *t = impl;
    member_rec *m = calloc(1, sizeof *m);
    if (!m || !(m->group = strdup(group))) {
        free(m);
        return SS_ERR_NO_MEMORY;
    }
    m->n = n;
    m->key = key;
    ss_status st;
    for (int attempt = 0;; attempt++) {
        pthread_rwlock_rdlock(&t->cut);
        st = ss__transport_join_keyed(t->inner, group, n, key, &m->inner);
        if (st == SS_OK) {
            pthread_mutex_lock(&t->lock);
            m->id = *member = t->next_id++;
            m->next = t->members;
            t->members = m;
            pthread_mutex_unlock(&t->lock);
        }
        pthread_rwlock_unlock(&t->cut);
        if (st == SS_OK || attempt > 0 || !maybe_recut(t))
            break;
    }
    if (st != SS_OK)
        rec_free(m);
    return st;
}

static ss_status rt_leave(void *impl, const char *group, uint64_t member) {
    recut_tp *t = impl;
    pthread_rwlock_rdlock(&t->cut);
    pthread_mutex_lock(&t->lock);
    member_rec **pp = &t->members;
    while (*pp && !((*pp)->id == member && !strcmp((*pp)->group, group)))
        pp = &(*pp)->next;
    member_rec *m = *pp;
    if (m)
        *pp = m->next;
    pthread_mutex_unlock(&t->lock);
    ss_status st = !m         ? SS_ERR_NOT_FOUND
                   : m->inner ? ss__transport_leave(t->inner, group, m->inner)
                              : SS_OK;
    pthread_rwlock_unlock(&t->cut);
    if (m)
        rec_free(m);
    return st;
}

typedef enum { CALL_HEARTBEAT, CALL_EXCHANGE, CALL_ROUND } call_kind;

/* The member's id on the current cut, joined there first if it is not yet
 * (cut held for reading); its kind of call noted. */
static ss_status enter(recut_tp *t, const char *group, uint64_t member, call_kind kind,
                       uint64_t *inner) {
    pthread_mutex_lock(&t->lock);
    member_rec *m = lookup(t, group, member);
    ss_status st = m ? ensure_joined(t, m) : SS_ERR_NOT_FOUND;
    if (m) {
        m->exchanged = m->exchanged || kind == CALL_EXCHANGE;
        m->rounds = m->rounds || kind == CALL_ROUND;
        *inner = m->inner;
    }
    pthread_mutex_unlock(&t->lock);
    return st;
}

static ss_status rt_easgd(void *impl, const char *group, uint64_t member, const float *s,
                          float alpha, float *d, size_t n) {
    recut_tp *t = impl;
    for (int attempt = 0;; attempt++) {
        pthread_rwlock_rdlock(&t->cut);
        uint64_t inner;
        ss_status st = enter(t, group, member, CALL_EXCHANGE, &inner);
        if (st == SS_OK) {
            st = ss__transport_easgd_exchange(t->inner, group, inner, s, alpha, d, n);
        } else {
            memset(d, 0, n * sizeof *d); /* nothing applied (the contract) */
        }
        pthread_rwlock_unlock(&t->cut);
        if (st == SS_OK || st == SS_ERR_NOT_FOUND || attempt > 0 || !maybe_recut(t))
            return st;
    }
}

static ss_status rt_round(void *impl, const char *group, uint64_t member, const float *s,
                          const ss__bmuf_params *bmuf, float *out, size_t n,
                          ss__round_result *result) {
    recut_tp *t = impl;
    for (int attempt = 0;; attempt++) {
        pthread_rwlock_rdlock(&t->cut);
        uint64_t inner;
        ss_status st = enter(t, group, member, CALL_ROUND, &inner);
        if (st == SS_OK)
            st = ss__transport_round(t->inner, group, inner, s, bmuf, out, n, result);
        pthread_rwlock_unlock(&t->cut);
        if (st == SS_OK || st == SS_ERR_NOT_FOUND || attempt > 0 || !maybe_recut(t))
            return st;
    }
}

static ss_status rt_central(void *impl, const char *group, float *c, size_t n) {
    recut_tp *t = impl;
    for (int attempt = 0;; attempt++) {
        pthread_rwlock_rdlock(&t->cut);
        ss_status st = ss__transport_read_central(t->inner, group, c, n);
        pthread_rwlock_unlock(&t->cut);
        if (st == SS_OK || attempt > 0 || !maybe_recut(t))
            return st;
    }
}

static ss_status rt_heartbeat(void *impl, const char *group, uint64_t member) {
    recut_tp *t = impl;
    for (int attempt = 0;; attempt++) {
        pthread_rwlock_rdlock(&t->cut);
        uint64_t inner;
        ss_status st = enter(t, group, member, CALL_HEARTBEAT, &inner);
        if (st == SS_OK)
            st = ss__transport_heartbeat(t->inner, group, inner);
        pthread_rwlock_unlock(&t->cut);
        if (st == SS_OK || st == SS_ERR_NOT_FOUND || attempt > 0 || !maybe_recut(t))
            return st;
    }
}

static size_t rt_wire_bytes(void *impl, size_t n) {
    recut_tp *t = impl;
    pthread_rwlock_rdlock(&t->cut);
    size_t b = ss__transport_wire_bytes(t->inner, n);
    pthread_rwlock_unlock(&t->cut);
    return b;
}

static bool rt_round_waiting(void *impl, const char *group, uint64_t member) {
    recut_tp *t = impl;
    pthread_rwlock_rdlock(&t->cut);
    pthread_mutex_lock(&t->lock);
    const member_rec *m = lookup(t, group, member);
    const uint64_t inner = m ? m->inner : 0; /* read under the lock: a join may set it */
    pthread_mutex_unlock(&t->lock);
    bool waiting = inner && ss__transport_round_waiting(t->inner, group, inner);
    pthread_rwlock_unlock(&t->cut);
    return waiting;
}

static void rt_destroy(void *impl) {
    recut_tp *t = impl;
    while (t->members) {
        member_rec *m = t->members;
        t->members = m->next;
        rec_free(m);
    }
    ss__transport_destroy(t->inner);
    for (int i = 0; i < 3; i++)
        free(t->tls_files[i]);
    pthread_rwlock_destroy(&t->cut);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

static const ss__transport_ops recut_ops = {
    .join = rt_join,
    .leave = rt_leave,
    .easgd_exchange = rt_easgd,
    .round = rt_round,
    .read_central = rt_central,
    .heartbeat = rt_heartbeat,
    .wire_bytes = rt_wire_bytes,
    .round_waiting = rt_round_waiting,
    .destroy = rt_destroy,
};

ss_status ss__recut_transport_create(const char *map_path, const ss__grpc_transport_config *cfg,
                                     ss__transport **out, char *why, size_t whylen) {
    if (!map_path || !*map_path || strlen(map_path) >= PATH_MAX || !cfg || !out)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT,
                        "a re-cut transport needs a shard map path shorter than %d bytes",
                        PATH_MAX);
    recut_tp *t = calloc(1, sizeof *t);
    if (!t)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the re-cut transport");
    snprintf(t->map_path, sizeof t->map_path, "%s", map_path);
    t->cfg = *cfg;
    t->next_id = 1;
    bool copied = true; /* every later cut makes its channels with them */
    if (cfg->tls) {
        const char *files[3] = {cfg->tls->ca_file, cfg->tls->cert_file, cfg->tls->key_file};
        for (int i = 0; i < 3; i++)
            copied = copied && (!files[i] || (t->tls_files[i] = strdup(files[i])));
        t->tls = (ss__rpc_tls){
            .ca_file = t->tls_files[0], .cert_file = t->tls_files[1], .key_file = t->tls_files[2]};
        t->cfg.tls = &t->tls;
    }
    /* A re-cut waiting for the calls in flight is not passed by new ones. */
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&t->cut, &ra);
    pthread_rwlockattr_destroy(&ra);
    pthread_mutex_init(&t->lock, NULL);
    ss__shard_map map;
    ss_status st = copied ? read_map(t, &map) : SS_ERR_NO_MEMORY;
    if (st != SS_OK)
        ss__why(why, whylen, "cannot read the shard map %s: %s", map_path, ss_strerror(st));
    if (st == SS_OK && (st = open_cut(t, &map, &t->inner)) == SS_OK)
        t->epoch = map.epoch;
    if (st == SS_OK)
        st = ss__transport_create(&recut_ops, t, out, why, whylen);
    if (st != SS_OK)
        rt_destroy(t);
    return st;
}

uint64_t ss__recut_transport_epoch(ss__transport *tp) {
    recut_tp *t = ss__transport_impl(tp, &recut_ops);
    if (!t)
        return 0;
    pthread_rwlock_rdlock(&t->cut);
    const uint64_t e = t->epoch;
    pthread_rwlock_unlock(&t->cut);
    return e;
}

uint64_t ss__recut_transport_recuts(ss__transport *tp) {
    recut_tp *t = ss__transport_impl(tp, &recut_ops);
    return t ? atomic_load(&t->recuts) : 0;
}
