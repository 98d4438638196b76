/* In-process transport: central variables and MA/BMUF round aggregation in
 * memory, shared by every engine (trainer) of one process. It plays the
 * parameter server's part for tests and single-process runs. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/finite.h"
#include "common/log.h"
#include "common/names.h"
#include "shadow/algorithms.h"
#include "shadow/codec.h"
#include "shadow/dense_checkpoint.h"
#include "shadow/inproc_transport.h"
#include "shadow/kernels.h"
#include "shadow/transport.h"

#include "shadow/inproc_internal.h"

const char *const ss__inproc_limit_names[SS_INPROC_LIMITS] = {"groups", "members", "total_floats"};

static _Thread_local char t_refusal[640];

const char *ss__inproc_transport_refusal(void) {
    return t_refusal;
}

/* Counts a refusal under its limit and says why, for the calling thread. */
static ss_status refuse_limit(inproc *ip, int limit, const char *fmt, unsigned long long have,
                              unsigned long long max) {
    atomic_fetch_add(&ip->refusals[limit], 1);
    snprintf(t_refusal, sizeof t_refusal, fmt, have, max);
    return SS_ERR_TOO_LARGE;
}

ss_status ss__inproc_charge(inproc *ip, uint64_t floats, const char *what) {
    const uint64_t had = atomic_fetch_add(&ip->used_floats, floats);
    if (ip->limits.max_total_floats && had + floats > ip->limits.max_total_floats) {
        atomic_fetch_sub(&ip->used_floats, floats);
        atomic_fetch_add(&ip->refusals[SS_INPROC_LIMIT_FLOATS], 1);
        snprintf(t_refusal, sizeof t_refusal,
                 "the PS holds %llu floats for dense groups (3 per float of a group, 2 more for "
                 "S-BMUF, 2 per compressed member); %s of %llu would pass its limit "
                 "(--max-total-floats %llu)",
                 (unsigned long long)had, what, (unsigned long long)floats,
                 (unsigned long long)ip->limits.max_total_floats);
        return SS_ERR_TOO_LARGE;
    }
    return SS_OK;
}

void ss__inproc_uncharge(inproc *ip, uint64_t floats) {
    atomic_fetch_sub(&ip->used_floats, floats);
}

/* Caller holds ip->lock: room for one more group of n floats? Charged
 * when there is (the caller gives it back if the group is not made). */
static ss_status room_for_group(inproc *ip, size_t n) {
    if (ip->limits.max_groups && ip->ngroups >= ip->limits.max_groups)
        return refuse_limit(ip, SS_INPROC_LIMIT_GROUPS,
                            "the PS holds %llu groups, its limit (--max-groups %llu)",
                            (unsigned long long)ip->ngroups, ip->limits.max_groups);
    return ss__inproc_charge(ip, SS_INPROC_GROUP_FLOATS(n), "a new group");
}

/* Caller holds ip->lock: links a new (charged) group in. */
void ss__inproc_add_group(inproc *ip, group *g) {
    g->next = ip->groups;
    ip->groups = g;
    ip->ngroups++;
}

/* Emulated wire time of one exchange: request and reply of `bytes` each. */
static void link_delay(const inproc *ip, size_t bytes) {
    uint64_t ns = 2 * ip->link_latency_ns + (uint64_t)(2.0 * (double)bytes * ip->link_ns_per_byte);
    if (ns)
        ss__sleep_ns(ns);
}

/* Caller holds ip->lock. */
group *ss__inproc_lookup_group(const inproc *ip, const char *name) {
    group *g = ip->groups;
    while (g && strcmp(g->name, name))
        g = g->next;
    return g;
}

static group *find_group(inproc *ip, const char *name) {
    pthread_mutex_lock(&ip->lock);
    group *g = ss__inproc_lookup_group(ip, name);
    pthread_mutex_unlock(&ip->lock);
    return g;
}

static void slot_free(member_slot *m) {
    if (m->mirror && m->mirror_budget)
        atomic_fetch_sub(m->mirror_budget, 2 * (uint64_t)m->mirror->n);
    if (m->mirror)
        ss__codec_mirror_free(m->mirror);
    if (m->member_side)
        ss__codec_mirror_free(m->member_side);
    free(m->mirror);
    free(m->member_side);
    free(m->wire);
}

static void group_free(group *g) {
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->cond);
    for (size_t i = 0; i < g->nmembers; i++)
        slot_free(&g->members[i]);
    free(g->name);
    free(g->members);
    free(g->central); /* and sum, result: one allocation */
    free(g->bmuf_w);  /* and bmuf_m */
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

group *ss__inproc_group_new(const char *name, size_t n) {
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
 * together; refused instead. Caller holds ip->lock. */
static const group *chunking_clash(const inproc *ip, const char *name) {
    size_t len, glen;
    uint64_t lo, hi, glo, ghi;
    if (!ss__ps_chunk_range(name, &len, &lo, &hi) || lo >= hi)
        return NULL;
    for (const group *g = ip->groups; g; g = g->next)
        if (ss__ps_chunk_range(g->name, &glen, &glo, &ghi) && glo < ghi && glen == len &&
            !strncmp(g->name, name, len) && glo < hi && lo < ghi)
            return g;
    return NULL;
}

static ss_status ip_join(void *impl, const char *name, size_t n, uint64_t *member) {
    inproc *ip = impl;
    t_refusal[0] = '\0';
    pthread_mutex_lock(&ip->lock);
    group *g = ss__inproc_lookup_group(ip, name);
    const group *clash = g ? NULL : chunking_clash(ip, name);
    if (clash) {
        snprintf(t_refusal, sizeof t_refusal,
                 "chunk %s overlaps chunk %s that this PS holds: the group is cut into chunks of "
                 "another size by other clients or by the checkpoint it was restored from (give "
                 "every member the same chunk_floats / --chunk-floats; before 0.2 the default "
                 "was 262144, now 131072)",
                 name, clash->name);
        pthread_mutex_unlock(&ip->lock);
        return SS_ERR_INVALID_ARGUMENT;
    }
    if (!g) {
        ss_status room = room_for_group(ip, n);
        g = room == SS_OK ? ss__inproc_group_new(name, n) : NULL;
        if (!g) {
            if (room == SS_OK)
                ss__inproc_uncharge(ip, SS_INPROC_GROUP_FLOATS(n));
            pthread_mutex_unlock(&ip->lock);
            return room != SS_OK ? room : SS_ERR_NO_MEMORY;
        }
        ss__inproc_add_group(ip, g);
    }
    pthread_mutex_unlock(&ip->lock);

    pthread_mutex_lock(&g->lock);
    ss_status st = SS_OK;
    if (g->n != n) {
        st = SS_ERR_SIZE_MISMATCH;
    } else {
        if (ip->limits.max_members && g->nmembers >= ip->limits.max_members) {
            st = refuse_limit(ip, SS_INPROC_LIMIT_MEMBERS,
                              "the group has %llu members, the PS's limit (--max-members %llu)",
                              (unsigned long long)g->nmembers, ip->limits.max_members);
        } else if (g->nmembers == g->capmembers) {
            size_t cap = g->capmembers ? g->capmembers * 2 : 8;
            member_slot *m = realloc(g->members, cap * sizeof *m);
            if (m) {
                g->members = m;
                g->capmembers = cap;
            } else {
                st = SS_ERR_NO_MEMORY;
            }
        }
        if (st == SS_OK)
            st = new_member_id(g, member);
        if (st == SS_OK) {
            g->members[g->nmembers++] = (member_slot){.id = *member, .last_seen = ss__now_ns()};
        }
    }
    pthread_mutex_unlock(&g->lock);
    return st;
}

static ssize_t member_index(const group *g, uint64_t member) {
    for (size_t i = 0; i < g->nmembers; i++)
        if (g->members[i].id == member)
            return (ssize_t)i;
    return -1;
}

/* Caller holds g->lock and has made sure readers_pending == 0. */
static void close_round(group *g) {
    /* The mean in place (contributors >= 1); for S-MA it becomes the
     * result by a swap of the buffers (one allocation: central frees
     * both), for S-BMUF the block step from it writes result = b. A mean
     * or a step that is not finite is no result: the members are told,
     * the result and the BMUF state keep their last values. */
    ss_status st = ss__mean_close(g->sum, g->contributors, g->sum, g->n);
    if (st == SS_OK && g->rounds_kind == ROUNDS_BMUF) {
        st = ss__bmuf_step(&g->bmuf, g->bmuf_w, g->bmuf_m, g->result, g->sum, g->n,
                           !g->bmuf_started);
        g->bmuf_started = g->bmuf_started || st == SS_OK;
    } else if (st == SS_OK) {
        float *mean = g->sum;
        g->sum = g->result;
        g->result = mean;
    }
    if (st != SS_OK)
        SS_LOG_WARNF("ps", "event=round_refused group=%s round=%llu status=%s", g->name,
                     (unsigned long long)g->open_round, ss_status_name(st));
    g->result_status = st;
    g->result_round = g->open_round;
    g->result_participants = g->contributors;
    g->readers_pending = g->contributors;
    memset(g->sum, 0, g->n * sizeof(float));
    g->contributors = 0;
    g->deadline_ns = 0;
    for (size_t i = 0; i < g->nmembers; i++)
        g->members[i].contributed = false;
    g->open_round++;
    g->rounds_done++;
    g->last_done_ns = ss__now_ns();
    pthread_cond_broadcast(&g->cond);
}

/* Caller holds g->lock. */
static void remove_member(group *g, size_t i) {
    slot_free(&g->members[i]);
    g->members[i] = g->members[--g->nmembers];
    /* The one removed may have been the last one the open round waited for. */
    if (g->contributors > 0 && g->readers_pending == 0 && g->contributors >= g->nmembers)
        close_round(g);
    pthread_cond_broadcast(&g->cond);
}

/* Drops members not heard from for member_timeout_ns (a killed trainer
 * never says goodbye), so later rounds stop waiting for them. Caller holds
 * g->lock. */
static void expire_members(const inproc *ip, group *g, uint64_t now) {
    if (ip->member_timeout_ns == 0)
        return;
    for (size_t i = 0; i < g->nmembers;) {
        uint64_t seen = g->members[i].last_seen;
        if (now > seen && now - seen > ip->member_timeout_ns)
            remove_member(g, i);
        else
            i++;
    }
}

/* Records a call of `member`; false when it is not a member. Caller holds
 * g->lock. */
static bool touch_member(group *g, uint64_t member, uint64_t now) {
    ssize_t i = member_index(g, member);
    if (i < 0)
        return false;
    g->members[i].last_seen = now;
    return true;
}

static ss_status ip_leave(void *impl, const char *name, uint64_t member) {
    group *g = find_group(impl, name);
    if (!g)
        return SS_ERR_NOT_FOUND;
    pthread_mutex_lock(&g->lock);
    ssize_t i = member_index(g, member);
    ss_status st = SS_ERR_NOT_FOUND;
    if (i >= 0) {
        remove_member(g, (size_t)i);
        st = SS_OK;
    }
    pthread_mutex_unlock(&g->lock);
    return st;
}

static ss_status ip_heartbeat(void *impl, const char *name, uint64_t member) {
    inproc *ip = impl;
    group *g = find_group(ip, name);
    if (!g)
        return SS_ERR_NOT_FOUND;
    pthread_mutex_lock(&g->lock);
    uint64_t now = ss__now_ns();
    ss_status st = touch_member(g, member, now) ? SS_OK : SS_ERR_NOT_FOUND;
    expire_members(ip, g, now);
    pthread_mutex_unlock(&g->lock);
    return st;
}

/* An open round (a snapshot in it, its result not being read) that this
 * member has not contributed to. */
static bool ip_round_waiting(void *impl, const char *name, uint64_t member) {
    group *g = find_group(impl, name);
    if (!g)
        return false;
    pthread_mutex_lock(&g->lock);
    ssize_t i = member_index(g, member);
    bool waiting =
        i >= 0 && g->contributors > 0 && g->readers_pending == 0 && !g->members[i].contributed;
    pthread_mutex_unlock(&g->lock);
    return waiting;
}

/* Validates a call and, when it is valid, counts it as a sign of life. */
static ss_status check_call(group *g, uint64_t member, const float *s, size_t n) {
    if (!g)
        return SS_ERR_NOT_FOUND;
    if (g->n != n)
        return SS_ERR_SIZE_MISMATCH;
    if (member_index(g, member) < 0)
        return SS_ERR_NOT_FOUND;
    if (!ss__all_finite(s, n))
        return SS_ERR_NON_FINITE;
    touch_member(g, member, ss__now_ns());
    return SS_OK;
}

/* The start of a bulk call (EASGD exchange, round): the emulated link's
 * delay, then the group, locked, and the call checked. NULL: no such group
 * (*st NOT_FOUND); otherwise the caller unlocks, whatever *st says. */
static group *enter_bulk_call(inproc *ip, const char *name, uint64_t member, const float *s,
                              size_t n, ss_status *st) {
    link_delay(ip, ss__codec_size(ip->encoding, n));
    t_refusal[0] = '\0';
    group *g = find_group(ip, name);
    if (!g) {
        *st = SS_ERR_NOT_FOUND;
        return NULL;
    }
    pthread_mutex_lock(&g->lock);
    *st = check_call(g, member, s, n);
    return g;
}

/* ---- compressed sync (shadow/codec.h) ---- */

/* The server side of an encoded upload: the member's mirror (made on its
 * first encoded call, and again if its encoding changes) takes it. Caller
 * holds g->lock; idx is the member's slot. */
static ss_status accept_upload(inproc *ip, group *g, size_t idx, const ss__codec_upload *up) {
    member_slot *m = &g->members[idx];
    if (up->enc == SS_ENC_F32 || !ss__encoding_name(up->enc))
        return SS_ERR_INVALID_ARGUMENT;
    if (m->mirror && m->mirror->enc != up->enc) {
        ss__inproc_uncharge(ip, 2 * (uint64_t)m->mirror->n);
        ss__codec_mirror_free(m->mirror);
        free(m->mirror);
        m->mirror = NULL;
    }
    if (!m->mirror) {
        /* A mirror and its scratch: 2 n floats for as long as the member
         * stays, within the PS's budget for them. */
        const uint64_t want = 2 * (uint64_t)g->n;
        ss_status room = ss__inproc_charge(ip, want, "a compressed member's mirror");
        if (room != SS_OK)
            return room;
        m->mirror = malloc(sizeof *m->mirror);
        if (!m->mirror) {
            ss__inproc_uncharge(ip, want);
            return SS_ERR_NO_MEMORY;
        }
        m->mirror_budget = &ip->used_floats;
        ss_status st = ss__codec_mirror_init(m->mirror, up->enc, g->n);
        if (st != SS_OK) {
            ss__inproc_uncharge(ip, want);
            free(m->mirror);
            m->mirror = NULL;
            return st;
        }
        m->mirror->no_feedback = ip->no_feedback;
    }
    ss_status st = ss__codec_server_accept(m->mirror, up);
    if (st == SS_OK && !ss__all_finite(m->mirror->m, g->n)) {
        m->mirror->valid = false; /* only a reset can start it over */
        st = SS_ERR_NON_FINITE;
    }
    return st;
}

/* An in-process member's own side of compressed sync and its buffer: an
 * upload (ss__codec_upload_max) then a reply. Caller holds g->lock. */
static ss__codec_mirror *member_side(inproc *ip, group *g, uint64_t member, uint8_t **wire) {
    ssize_t idx = member_index(g, member);
    if (idx < 0)
        return NULL;
    member_slot *m = &g->members[idx];
    if (!m->member_side) {
        m->member_side = malloc(sizeof *m->member_side);
        if (!m->member_side || ss__codec_mirror_init(m->member_side, ip->encoding, g->n) != SS_OK) {
            free(m->member_side);
            m->member_side = NULL;
            return NULL;
        }
        m->member_side->no_feedback = ip->no_feedback;
        m->wire = malloc(ss__codec_upload_max(m->member_side) + ss__codec_size(ip->encoding, g->n));
        if (!m->wire) {
            ss__codec_mirror_free(m->member_side);
            free(m->member_side);
            m->member_side = NULL;
            return NULL;
        }
    }
    *wire = m->wire;
    return m->member_side;
}

/* An in-process member's upload of snapshot s (into its buffer: up), and
 * where the reply goes. NULL: out of memory. Caller holds g->lock. */
static ss__codec_mirror *member_upload(inproc *ip, group *g, uint64_t member, const float *s,
                                       ss__codec_upload *up, uint8_t **reply) {
    uint8_t *wire;
    ss__codec_mirror *ms = member_side(ip, g, member, &wire);
    if (ms) {
        ss__codec_member_upload(ms, s, wire, up);
        *reply = wire + ss__codec_upload_max(ms);
    }
    return ms;
}

static void say_easgd_overflow(const group *g) {
    snprintf(t_refusal, sizeof t_refusal,
             "S-EASGD on %s: the exchange overflowed (not finite); the centre keeps its last value",
             g->name);
}

/* S-EASGD from an encoded upload; reply: the encoded d. Caller holds
 * g->lock. */
static ss_status easgd_encoded_locked(inproc *ip, group *g, uint64_t member,
                                      const ss__codec_upload *up, float alpha, uint8_t *reply) {
    if (!(alpha > 0.0f && alpha <= 1.0f))
        return SS_ERR_INVALID_ARGUMENT;
    ssize_t idx = member_index(g, member);
    if (idx < 0)
        return SS_ERR_NOT_FOUND;
    g->members[idx].last_seen = ss__now_ns();
    ss_status st = accept_upload(ip, g, (size_t)idx, up);
    if (st != SS_OK)
        return st;
    ss__codec_mirror *cm = g->members[idx].mirror;
    if (!g->central_init) {
        memcpy(g->central, cm->m, g->n * sizeof(float));
        g->central_init = true;
    }
    if (!ss__codec_server_easgd(cm, g->central, alpha, reply)) {
        say_easgd_overflow(g);
        return SS_ERR_NON_FINITE;
    }
    g->exchanges++;
    g->last_done_ns = ss__now_ns();
    return SS_OK;
}

/* The start of a PS's encoded call: its group of n floats, locked. NULL:
 * *st says why (the caller unlocks otherwise). */
static group *enter_encoded_call(inproc *ip, const char *name, size_t n, ss_status *st) {
    t_refusal[0] = '\0';
    group *g = find_group(ip, name);
    if (!g) {
        *st = SS_ERR_NOT_FOUND;
        return NULL;
    }
    pthread_mutex_lock(&g->lock);
    if (g->n != n) {
        pthread_mutex_unlock(&g->lock);
        *st = SS_ERR_SIZE_MISMATCH;
        return NULL;
    }
    return g;
}

ss_status ss__inproc_easgd_encoded(ss__transport *t, const char *name, uint64_t member, size_t n,
                                   float alpha, const ss__codec_upload *up, uint8_t *reply) {
    inproc *ip = ss__inproc_of(t);
    if (!ip || !name || !up || !reply || n == 0)
        return SS_ERR_INVALID_ARGUMENT;
    ss_status st;
    group *g = enter_encoded_call(ip, name, n, &st);
    if (!g)
        return st;
    st = easgd_encoded_locked(ip, g, member, up, alpha, reply);
    pthread_mutex_unlock(&g->lock);
    return st;
}

static ss_status ip_easgd(void *impl, const char *name, uint64_t member, const float *s,
                          float alpha, float *d, size_t n) {
    inproc *ip = impl;
    ss_status st;
    group *g = enter_bulk_call(ip, name, member, s, n, &st);
    if (!g) {
        memset(d, 0, n * sizeof *d); /* nothing applied */
        return st;
    }
    if (st == SS_OK && ip->encoding != SS_ENC_F32) {
        /* The member's side and the server's, through the encoded bytes. */
        ss__codec_upload up;
        uint8_t *reply;
        ss__codec_mirror *ms = member_upload(ip, g, member, s, &up, &reply);
        if (!ms) {
            st = SS_ERR_NO_MEMORY;
        } else {
            st = easgd_encoded_locked(ip, g, member, &up, alpha, reply);
            if (st == SS_OK)
                st = ss__codec_member_easgd_reply(ms, reply, ss__codec_size(ms->enc, n), d);
            else
                ss__codec_member_invalidate(ms);
        }
        if (st != SS_OK)
            memset(d, 0, n * sizeof *d);
        pthread_mutex_unlock(&g->lock);
        return st;
    }
    if (st == SS_OK) {
        if (!g->central_init) {
            memcpy(g->central, s, n * sizeof(float));
            g->central_init = true;
        }
        st = ss__easgd_server(s, g->central, d, alpha, n);
        if (st == SS_ERR_NON_FINITE)
            say_easgd_overflow(g);
    }
    if (st == SS_OK) {
        g->exchanges++;
        g->last_done_ns = ss__now_ns();
    } else {
        memset(d, 0, n * sizeof *d); /* nothing applied */
    }
    pthread_mutex_unlock(&g->lock);
    return st;
}

static struct timespec abs_monotonic(uint64_t ns) {
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    return ts;
}

/* The group's first round fixes what its rounds are; later ones must agree.
 * Caller holds g->lock. */
static ss_status check_round_kind(inproc *ip, group *g, const ss__bmuf_params *bmuf) {
    if (g->rounds_kind == ROUNDS_UNSET) {
        if (bmuf) {
            ss_status room = ss__inproc_charge(ip, 2 * (uint64_t)g->n, "S-BMUF's state");
            if (room != SS_OK)
                return room;
            g->bmuf_w = calloc(2 * g->n, sizeof(float));
            if (!g->bmuf_w) {
                ss__inproc_uncharge(ip, 2 * (uint64_t)g->n);
                return SS_ERR_NO_MEMORY;
            }
            g->bmuf_m = g->bmuf_w + g->n;
            g->bmuf = *bmuf;
        }
        g->rounds_kind = bmuf ? ROUNDS_BMUF : ROUNDS_MEAN;
        return SS_OK;
    }
    if ((g->rounds_kind == ROUNDS_BMUF) != (bmuf != NULL))
        return SS_ERR_INVALID_ARGUMENT; /* S-MA and S-BMUF members in one group */
    if (bmuf && (bmuf->eta != g->bmuf.eta || bmuf->zeta != g->bmuf.zeta ||
                 bmuf->nesterov != g->bmuf.nesterov))
        return SS_ERR_INVALID_ARGUMENT; /* members disagree on the block momentum */
    return SS_OK;
}

/* One member's part in an MA/BMUF round: its snapshot (s, or for an
 * encoded call the upload into its mirror) into the open round, then the
 * round's result when it closes: copied to avg, or encoded into reply.
 * Caller holds g->lock and has checked the call. */
static ss_status round_locked(inproc *ip, group *g, uint64_t member, const float *s,
                              const ss__codec_upload *up, const ss__bmuf_params *bmuf, float *avg,
                              uint8_t *reply, ss__round_result *result) {
    const size_t n = g->n;
    ss_status st = check_round_kind(ip, g, bmuf);
    if (st != SS_OK)
        return st;
    /* The previous round's mean must be copied out before a new one can
     * close over it; those readers are awake already, so this is short. */
    while (g->readers_pending > 0)
        pthread_cond_wait(&g->cond, &g->lock);
    ssize_t idx = member_index(g, member);
    if (idx < 0)
        return SS_ERR_NOT_FOUND;
    if (g->members[idx].contributed)
        return SS_ERR_STATE; /* one snapshot per member per round */
    if (up) {
        g->members[idx].last_seen = ss__now_ns();
        if ((st = accept_upload(ip, g, (size_t)idx, up)) != SS_OK)
            return st;
        s = g->members[idx].mirror->m;
    }
    if (g->contributors == 0)
        g->deadline_ns = ss__now_ns() + ip->deadline_ns;
    ss__mean_add(g->sum, s, n);
    g->members[idx].contributed = true;
    g->contributors++;
    uint64_t my_round = g->open_round;
    if (g->contributors >= g->nmembers)
        close_round(g);
    while (g->result_round != my_round) {
        struct timespec ts = abs_monotonic(g->deadline_ns);
        int rc = pthread_cond_timedwait(&g->cond, &g->lock, &ts);
        if (rc == ETIMEDOUT && g->open_round == my_round && g->readers_pending == 0 &&
            ss__now_ns() >= g->deadline_ns) {
            close_round(g); /* a slow or dead member must not stall the rest */
            expire_members(ip, g, ss__now_ns());
        }
    }
    if (g->result_status != SS_OK) {
        st = g->result_status;
        snprintf(t_refusal, sizeof t_refusal,
                 "round %llu of %s: its %s overflowed (not finite); the state keeps its last value",
                 (unsigned long long)my_round, g->name,
                 g->rounds_kind == ROUNDS_BMUF ? "mean or block step" : "mean");
    } else if (up) {
        /* The member may have expired while it waited (its slot moved). */
        idx = member_index(g, member);
        if (idx < 0 || !g->members[idx].mirror)
            st = SS_ERR_NOT_FOUND;
        else
            ss__codec_server_round_reply(g->members[idx].mirror, g->result, reply);
    } else {
        memcpy(avg, g->result, n * sizeof(float));
    }
    result->round = g->result_round;
    result->participants = g->result_participants;
    if (--g->readers_pending == 0)
        pthread_cond_broadcast(&g->cond);
    return st;
}

ss_status ss__inproc_round_encoded(ss__transport *t, const char *name, uint64_t member, size_t n,
                                   const ss__codec_upload *up, const ss__bmuf_params *bmuf,
                                   uint8_t *reply, ss__round_result *result) {
    inproc *ip = ss__inproc_of(t);
    if (!ip || !name || !up || !reply || !result || n == 0)
        return SS_ERR_INVALID_ARGUMENT;
    ss_status st;
    group *g = enter_encoded_call(ip, name, n, &st);
    if (!g)
        return st;
    st = round_locked(ip, g, member, NULL, up, bmuf, NULL, reply, result);
    pthread_mutex_unlock(&g->lock);
    return st;
}

static ss_status ip_round(void *impl, const char *name, uint64_t member, const float *s,
                          const ss__bmuf_params *bmuf, float *avg, size_t n,
                          ss__round_result *result) {
    inproc *ip = impl;
    ss_status st;
    group *g = enter_bulk_call(ip, name, member, s, n, &st);
    if (!g)
        return st;
    if (st == SS_OK && ip->encoding != SS_ENC_F32) {
        ss__codec_upload up;
        uint8_t *reply, *wire;
        ss__codec_mirror *ms = member_upload(ip, g, member, s, &up, &reply);
        if (!ms) {
            st = SS_ERR_NO_MEMORY;
        } else {
            st = round_locked(ip, g, member, NULL, &up, bmuf, NULL, reply, result);
            /* The member may have expired while the round waited. */
            ms = member_side(ip, g, member, &wire);
            reply = ms ? wire + ss__codec_upload_max(ms) : NULL;
            if (st == SS_OK && ms)
                st = ss__codec_member_round_reply(ms, reply, ss__codec_size(ms->enc, n), avg);
            else if (ms)
                ss__codec_member_invalidate(ms);
        }
    } else if (st == SS_OK) {
        st = round_locked(ip, g, member, s, NULL, bmuf, avg, NULL, result);
    }
    pthread_mutex_unlock(&g->lock);
    return st;
}

static ss_status ip_read_central(void *impl, const char *name, float *c, size_t n) {
    group *g = find_group(impl, name);
    if (!g)
        return SS_ERR_NOT_FOUND;
    pthread_mutex_lock(&g->lock);
    ss_status st = SS_OK;
    if (g->n != n)
        st = SS_ERR_SIZE_MISMATCH;
    else if (g->central_init)
        memcpy(c, g->central, n * sizeof(float));
    else if (g->result_round != NO_ROUND)
        memcpy(c, g->result, n * sizeof(float));
    else
        st = SS_ERR_STATE; /* nothing synced yet */
    pthread_mutex_unlock(&g->lock);
    return st;
}

static size_t ip_wire_bytes(void *impl, size_t n) {
    return ss__codec_size(((inproc *)impl)->encoding, n);
}

static void ip_destroy(void *impl) {
    inproc *ip = impl;
    group *g = ip->groups;
    while (g) {
        group *next = g->next;
        group_free(g);
        g = next;
    }
    pthread_mutex_destroy(&ip->lock);
    free(ip);
}

static const ss__transport_ops inproc_ops = {
    .join = ip_join,
    .leave = ip_leave,
    .easgd_exchange = ip_easgd,
    .round = ip_round,
    .read_central = ip_read_central,
    .heartbeat = ip_heartbeat,
    .wire_bytes = ip_wire_bytes,
    .round_waiting = ip_round_waiting,
    .destroy = ip_destroy,
};

ss_status ss__inproc_transport_create(const ss__inproc_config *cfg, ss__transport **out) {
    if (!out ||
        (cfg && (cfg->round_deadline_ms == 0 || !(cfg->link_gbps >= 0.0) ||
                 (cfg->member_timeout_ms && cfg->member_timeout_ms < cfg->round_deadline_ms) ||
                 cfg->link_latency_us > 10000000 || !ss__encoding_name(cfg->encoding))))
        return SS_ERR_INVALID_ARGUMENT;
    inproc *ip = calloc(1, sizeof *ip);
    if (!ip)
        return SS_ERR_NO_MEMORY;
    pthread_mutex_init(&ip->lock, NULL);
    ip->deadline_ns = (uint64_t)(cfg ? cfg->round_deadline_ms : 1000) * 1000000ull;
    if (cfg) {
        ip->member_timeout_ns = (uint64_t)cfg->member_timeout_ms * 1000000ull;
        ip->link_latency_ns = (uint64_t)cfg->link_latency_us * 1000ull;
        /* gbps Gbit/s = gbps/8 bytes per ns. */
        ip->link_ns_per_byte = cfg->link_gbps > 0.0 ? 8.0 / cfg->link_gbps : 0.0;
        ip->limits = *cfg;
        ip->encoding = cfg->encoding;
        ip->no_feedback = cfg->no_error_feedback;
    }
    ss_status st = ss__transport_create(&inproc_ops, ip, out);
    if (st != SS_OK)
        ip_destroy(ip);
    return st;
}

inproc *ss__inproc_of(ss__transport *t) {
    return ss__transport_impl(t, &inproc_ops);
}
