/* The dense centre's store (shadow/central.h): groups and their members,
 * the limits they are held within, and the centre's life. The exchanges
 * and rounds are central_rounds.c; checkpoints central_checkpoint.c. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/clock.h"
#include "common/grow.h"
#include "common/log.h"
#include "common/names.h"
#include "common/strbuf.h"
#include "shadow/central_internal.h"

const char *const ss__central_limit_names[SS_CENTRAL_LIMITS] = {"groups", "members",
                                                                "total_floats"};

static _Thread_local char t_refusal[640];

const char *ss__central_refusal(void) {
    return t_refusal;
}

void ss__central_refusal_clear(void) {
    t_refusal[0] = '\0';
}

void ss__central_say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_refusal, sizeof t_refusal, fmt, ap);
    va_end(ap);
}

void ss__central_refusals(const ss__central *c, uint64_t out[SS_CENTRAL_LIMITS]) {
    for (int i = 0; i < SS_CENTRAL_LIMITS; i++)
        out[i] = c ? atomic_load(&c->refusals[i]) : 0;
}

/* Counts a refusal under its limit and says why, for the calling thread. */
static ss_status refuse_limit(ss__central *c, int limit, const char *fmt, unsigned long long have,
                              unsigned long long max) {
    atomic_fetch_add(&c->refusals[limit], 1);
    snprintf(t_refusal, sizeof t_refusal, fmt, have, max);
    return SS_ERR_TOO_LARGE;
}

ss_status ss__central_charge(ss__central *c, uint64_t floats, const char *what) {
    const uint64_t had = atomic_fetch_add(&c->used_floats, floats);
    if (c->limits.max_total_floats && had + floats > c->limits.max_total_floats) {
        atomic_fetch_sub(&c->used_floats, floats);
        atomic_fetch_add(&c->refusals[SS_CENTRAL_LIMIT_FLOATS], 1);
        snprintf(t_refusal, sizeof t_refusal,
                 "the PS holds %llu floats for dense groups (3 per float of a group, 2 more for "
                 "S-BMUF, 2 per compressed member); %s of %llu would pass its limit "
                 "(--max-total-floats %llu)",
                 (unsigned long long)had, what, (unsigned long long)floats,
                 (unsigned long long)c->limits.max_total_floats);
        return SS_ERR_TOO_LARGE;
    }
    return SS_OK;
}

void ss__central_uncharge(ss__central *c, uint64_t floats) {
    atomic_fetch_sub(&c->used_floats, floats);
}

/* Caller holds c->lock: room for one more group of n floats? Charged
 * when there is (the caller gives it back if the group is not made). */
static ss_status room_for_group(ss__central *c, size_t n) {
    if (c->limits.max_groups && c->ngroups >= c->limits.max_groups)
        return refuse_limit(c, SS_CENTRAL_LIMIT_GROUPS,
                            "the PS holds %llu groups, its limit (--max-groups %llu)",
                            (unsigned long long)c->ngroups, c->limits.max_groups);
    return ss__central_charge(c, SS_CENTRAL_GROUP_FLOATS(n), "a new group");
}

void ss__central_add_group(ss__central *c, group *g) {
    g->next = c->groups;
    c->groups = g;
    c->ngroups++;
}

group *ss__central_lookup(const ss__central *c, const char *name) {
    group *g = c->groups;
    while (g && strcmp(g->name, name))
        g = g->next;
    return g;
}

group *ss__central_find(ss__central *c, const char *name) {
    pthread_mutex_lock(&c->lock);
    group *g = ss__central_lookup(c, name);
    pthread_mutex_unlock(&c->lock);
    return g;
}

static void slot_free(member_slot *m) {
    if (m->mirror && m->mirror_budget)
        atomic_fetch_sub(m->mirror_budget, 2 * (uint64_t)m->mirror->n);
    if (m->mirror)
        ss__codec_mirror_free(m->mirror);
    free(m->mirror);
}

/* A group's floats (centre, round sum and result; S-BMUF's state), freed. */
static void free_floats(group *g) {
    free(g->central); /* and sum, result */
    free(g->bmuf_w);  /* and bmuf_m */
    g->central = g->sum = g->result = NULL;
    g->bmuf_w = g->bmuf_m = NULL;
}

static void group_free(group *g) {
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->cond);
    for (size_t i = 0; i < g->nmembers; i++)
        slot_free(&g->members[i]);
    free(g->name);
    free(g->members);
    free_floats(g);
    free(g);
}

/* A member id is also the member's credential: whoever holds it may
 * submit snapshots, heartbeat or leave as that member. So it is 64 bits
 * from the kernel's CSPRNG (getrandom), not a counter a client could step
 * to its neighbour's; never 0, never one the group has now. Random ids also
 * keep a restarted PS from handing out an id an old member still uses. */
static ss_status new_member_id(const group *g, uint64_t *out) {
    for (;;) {
        uint64_t x;
        if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x)
            return SS_ERR_IO;
        bool taken = x == 0;
        for (size_t i = 0; i < g->nmembers && !taken; i++)
            taken = g->members[i].id == x;
        if (!taken) {
            *out = x;
            return SS_OK;
        }
    }
}

group *ss__central_group_new(const char *name, size_t n) {
    group *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->name = strdup(name);
    g->n = n;
    g->central = n <= SIZE_MAX / sizeof(float) / 3 ? calloc(3 * n, sizeof(float)) : NULL;
    g->sum = g->central ? g->central + n : NULL;
    g->result = g->central ? g->central + 2 * n : NULL;
    pthread_mutex_init(&g->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cond, &ca);
    pthread_condattr_destroy(&ca);
    g->result_round = NO_ROUND;
    if (!g->name || !g->central) {
        group_free(g);
        return NULL;
    }
    return g;
}

/* A chunk that overlaps another chunk of the same group with a different
 * range: its clients cut the group into chunks of another size than the
 * clients (or the checkpoint) that made the other. Both would sync, to
 * different groups, and the replicas would no longer be averaged
 * together; refused instead. Caller holds c->lock. */
static const group *chunking_clash(const ss__central *c, const char *name) {
    size_t len, glen;
    uint64_t lo, hi, glo, ghi;
    if (!ss__ps_chunk_range(name, &len, &lo, &hi) || lo >= hi)
        return NULL;
    for (const group *g = c->groups; g; g = g->next)
        if (ss__ps_chunk_range(g->name, &glen, &glo, &ghi) && glo < ghi && glen == len &&
            !strncmp(g->name, name, len) && glo < hi && lo < ghi)
            return g;
    return NULL;
}

/* Two chunks of one group that start at the same offset. */
static bool same_start(const char *a, const char *b) {
    size_t alen, blen;
    uint64_t alo, ahi, blo, bhi;
    return ss__ps_chunk_range(a, &alen, &alo, &ahi) && ss__ps_chunk_range(b, &blen, &blo, &bhi) &&
           alo == blo;
}

void ss__central_unpin(group *g) {
    pthread_mutex_lock(&g->lock);
    if (--g->pins == 0 && g->retired)
        free_floats(g);
    pthread_mutex_unlock(&g->lock);
}

/* Takes g off the list and gives its floats back (caller holds c->lock
 * and g->lock; g has no members, no round open or being read). A call
 * that found g before sees it retired; a checkpoint writing it now keeps
 * its floats until it is done (pins). */
static void retire_group(ss__central *c, group *g) {
    group **pp = &c->groups;
    while (*pp != g)
        pp = &(*pp)->next;
    *pp = g->next;
    c->ngroups--;
    ss__central_uncharge(c, SS_CENTRAL_GROUP_FLOATS(g->n) + (g->bmuf_w ? 2 * (uint64_t)g->n : 0));
    g->retired = true;
    if (!g->pins)
        free_floats(g);
    free(g->members); /* none left; a call that finds g retired reads no slot */
    g->members = NULL;
    g->capmembers = 0;
    g->next = c->retired;
    c->retired = g;
    pthread_cond_broadcast(&g->cond);
}

/* Retires g when nobody is in it (members not heard from for the member
 * timeout dropped first); true when it was. Caller holds c->lock. */
static bool retire_if_empty(ss__central *c, group *g) {
    pthread_mutex_lock(&g->lock);
    ss__central_expire(c, g, ss__now_ns());
    const bool empty = g->nmembers == 0 && g->contributors == 0 && g->readers_pending == 0;
    if (empty)
        retire_group(c, g);
    pthread_mutex_unlock(&g->lock);
    return empty;
}

/* A re-cutting join's clashes: each chunk of the group that overlaps name
 * with another range is retired when nobody is in it. The one that still
 * has members, or NULL. Caller holds c->lock. */
static const group *retire_clashes(ss__central *c, const char *name) {
    group *g;
    while ((g = (group *)chunking_clash(c, name)))
        if (!retire_if_empty(c, g))
            return g;
    return NULL;
}

/* The group called name, made (and charged) when it is new. NULL: *st
 * says why. */
static group *group_for_join(ss__central *c, const char *name, size_t n, bool recut, bool fresh,
                             ss_status *st) {
    pthread_mutex_lock(&c->lock);
    group *g = ss__central_lookup(c, name);
    if (g && recut && fresh && retire_if_empty(c, g))
        g = NULL; /* made anew below */
    const group *clash = g ? NULL : recut ? retire_clashes(c, name) : chunking_clash(c, name);
    if (clash) {
        /* Cut alike, two chunks from one offset end apart only where the
         * group ends: then the members' models differ in size. */
        const bool sizes = same_start(name, clash->name);
        snprintf(t_refusal, sizeof t_refusal,
                 "%schunk %s overlaps chunk %s that this PS holds: %s (give every member the same "
                 "chunk_floats / --chunk-floats; before 0.2 the default was 262144, now 131072)",
                 sizes ? "group size mismatch: " : "", name, clash->name,
                 sizes ? "they start alike and end apart: the members' models differ in size "
                         "(every member must build the same model, the same layers and sizes), "
                         "or they are cut into chunks of other sizes"
                       : "the group is cut into chunks of another size by other clients or by "
                         "the checkpoint it was restored from");
        pthread_mutex_unlock(&c->lock);
        *st = SS_ERR_INVALID_ARGUMENT;
        return NULL;
    }
    if (!g) {
        ss_status room = room_for_group(c, n);
        g = room == SS_OK ? ss__central_group_new(name, n) : NULL;
        if (!g) {
            if (room == SS_OK)
                ss__central_uncharge(c, SS_CENTRAL_GROUP_FLOATS(n));
            pthread_mutex_unlock(&c->lock);
            *st = room != SS_OK ? room : SS_ERR_NO_MEMORY;
            return NULL;
        }
        ss__central_add_group(c, g);
    }
    pthread_mutex_unlock(&c->lock);
    return g;
}

static void remove_member(group *g, size_t i);

/* The member of g with key (a trainer's earlier self, under g->lock) goes:
 * the one joining replaces it. */
static void replace_keyed(group *g, uint64_t key) {
    for (size_t i = 0; key && i < g->nmembers; i++)
        if (g->members[i].key == key) {
            ss__log(SS_LOG_INFO, "central", "event=member_replaced group=%s member=%llu", g->name,
                    (unsigned long long)g->members[i].id);
            remove_member(g, i);
            return;
        }
}

static ss_status join_as(ss__central *c, const char *name, size_t n, bool recut, bool fresh,
                         uint64_t key, uint64_t *member) {
    ss__central_refusal_clear();
    ss_status st = SS_OK;
    group *g = NULL;
    /* A group made by this join, retired by another member's re-cut before
     * this one got into it: looked up (or made) again. */
    for (int tries = 0; !g && tries < 4; tries++) {
        if (!(g = group_for_join(c, name, n, recut, fresh && tries == 0, &st)))
            return st;
        pthread_mutex_lock(&g->lock);
        if (g->retired) {
            pthread_mutex_unlock(&g->lock);
            g = NULL;
        }
    }
    if (!g) {
        ss__central_say("group %s: retired by other members' re-cuts while joining; try again",
                        name);
        return SS_ERR_STATE;
    }
    if (g->n != n) {
        st = SS_ERR_SIZE_MISMATCH;
        ss__central_say("group size mismatch: %s holds %zu floats here and %zu at the other "
                        "members (every member must build the same model, the same layers and "
                        "sizes)",
                        name, n, g->n);
    } else {
        replace_keyed(g, key);
        if (c->limits.max_members && g->nmembers >= c->limits.max_members) {
            st = refuse_limit(c, SS_CENTRAL_LIMIT_MEMBERS,
                              "the group has %llu members, the PS's limit (--max-members %llu)",
                              (unsigned long long)g->nmembers, c->limits.max_members);
        } else if (!SS_GROW(g->members, g->capmembers, g->nmembers, 8)) {
            st = SS_ERR_NO_MEMORY;
        }
        if (st == SS_OK)
            st = new_member_id(g, member);
        if (st == SS_OK)
            g->members[g->nmembers++] =
                (member_slot){.id = *member, .key = key, .last_seen = ss__now_ns()};
    }
    pthread_mutex_unlock(&g->lock);
    return st;
}

ss_status ss__central_join(ss__central *c, const char *name, size_t n, uint64_t key,
                           uint64_t *member) {
    return join_as(c, name, n, false, false, key, member);
}

ss_status ss__central_join_recut(ss__central *c, const char *name, size_t n, bool fresh,
                                 uint64_t key, uint64_t *member) {
    return join_as(c, name, n, true, fresh, key, member);
}

ssize_t ss__central_member_index(const group *g, uint64_t member) {
    for (size_t i = 0; i < g->nmembers; i++)
        if (g->members[i].id == member)
            return (ssize_t)i;
    return -1;
}

/* Caller holds g->lock. */
static void remove_member(group *g, size_t i) {
    slot_free(&g->members[i]);
    g->members[i] = g->members[--g->nmembers];
    /* The one removed may have been the last one the open round waited for. */
    if (g->contributors > 0 && g->readers_pending == 0 && g->contributors >= g->nmembers)
        ss__central_close_round(g);
    pthread_cond_broadcast(&g->cond);
}

void ss__central_expire(const ss__central *c, group *g, uint64_t now) {
    if (c->member_timeout_ns == 0)
        return;
    for (size_t i = 0; i < g->nmembers;) {
        uint64_t seen = g->members[i].last_seen;
        if (now > seen && now - seen > c->member_timeout_ns) {
            /* A trainer that died or went silent: the operator hears of it
             * (its rounds close without it from now on). */
            ss__log(SS_LOG_WARN, "central",
                    "event=member_expired group=%s member=%llu silent_ms=%llu", g->name,
                    (unsigned long long)g->members[i].id,
                    (unsigned long long)((now - seen) / 1000000u));
            remove_member(g, i);
        } else {
            i++;
        }
    }
}

bool ss__central_touch(group *g, uint64_t member, uint64_t now) {
    ssize_t i = ss__central_member_index(g, member);
    if (i < 0)
        return false;
    g->members[i].last_seen = now;
    return true;
}

/* The group called name, locked, and the member's slot in it (-1: not a
 * member). NULL: no such group. */
static group *lock_member(ss__central *c, const char *name, uint64_t member, ssize_t *slot) {
    group *g = ss__central_find(c, name);
    if (g) {
        pthread_mutex_lock(&g->lock);
        if (g->retired) {
            pthread_mutex_unlock(&g->lock);
            return NULL;
        }
        *slot = ss__central_member_index(g, member);
    }
    return g;
}

ss_status ss__central_leave(ss__central *c, const char *name, uint64_t member) {
    ssize_t i;
    group *g = lock_member(c, name, member, &i);
    if (!g)
        return SS_ERR_NOT_FOUND;
    if (i >= 0)
        remove_member(g, (size_t)i);
    pthread_mutex_unlock(&g->lock);
    return i >= 0 ? SS_OK : SS_ERR_NOT_FOUND;
}

bool ss__central_retire_empty(ss__central *c, const char *name) {
    pthread_mutex_lock(&c->lock);
    group *g = ss__central_lookup(c, name);
    const bool gone = g && retire_if_empty(c, g);
    pthread_mutex_unlock(&c->lock);
    return gone;
}

ss_status ss__central_heartbeat(ss__central *c, const char *name, uint64_t member) {
    ssize_t i;
    group *g = lock_member(c, name, member, &i);
    if (!g)
        return SS_ERR_NOT_FOUND;
    uint64_t now = ss__now_ns();
    if (i >= 0)
        g->members[i].last_seen = now;
    ss__central_expire(c, g, now);
    pthread_mutex_unlock(&g->lock);
    return i >= 0 ? SS_OK : SS_ERR_NOT_FOUND;
}

/* An open round (a snapshot in it, its result not being read) that this
 * member has not contributed to. */
bool ss__central_round_waiting(ss__central *c, const char *name, uint64_t member) {
    ssize_t i;
    group *g = lock_member(c, name, member, &i);
    if (!g)
        return false;
    bool waiting =
        i >= 0 && g->contributors > 0 && g->readers_pending == 0 && !g->members[i].contributed;
    pthread_mutex_unlock(&g->lock);
    return waiting;
}

ss_status ss__central_create(const ss__central_config *cfg, ss__central **out, char *why,
                             size_t whylen) {
    if (!out ||
        (cfg && (cfg->round_deadline_ms == 0 ||
                 (cfg->member_timeout_ms && cfg->member_timeout_ms < cfg->round_deadline_ms))))
        return ss__fail(
            why, whylen, SS_ERR_INVALID_ARGUMENT,
            "the round deadline must be > 0 and the member timeout 0 or at least the deadline");
    ss__central *c = calloc(1, sizeof *c);
    if (!c)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the dense centre");
    pthread_mutex_init(&c->lock, NULL);
    c->deadline_ns = (uint64_t)(cfg ? cfg->round_deadline_ms : 1000) * 1000000ull;
    if (cfg) {
        c->member_timeout_ns = (uint64_t)cfg->member_timeout_ms * 1000000ull;
        c->limits = *cfg;
    }
    *out = c;
    return SS_OK;
}

void ss__central_destroy(ss__central *c) {
    if (!c)
        return;
    for (int list = 0; list < 2; list++) {
        group *g = list ? c->retired : c->groups;
        while (g) {
            group *next = g->next;
            group_free(g);
            g = next;
        }
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
}
