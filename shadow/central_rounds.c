/* The dense centre's sync (shadow/central.h): S-EASGD exchanges against
 * the central variables, S-MA / S-BMUF rounds and their results, and the
 * server side of compressed members. The store and membership are
 * central_groups.c. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/finite.h"
#include "common/log.h"
#include "shadow/central_internal.h"

void ss__central_close_round(group *g) {
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

/* The start of a call on group name of n floats: the group, locked. NULL:
 * *st says why (the caller unlocks otherwise). With s, the member must be
 * one and its call counts as a sign of life, and the snapshot is checked
 * (finite) unless the caller's own arithmetic refuses what is not. */
static group *enter_call(ss__central *c, const char *name, uint64_t member, const float *s,
                         size_t n, bool s_checked_later, ss_status *st) {
    ss__central_refusal_clear();
    group *g = ss__central_find(c, name);
    if (!g) {
        *st = SS_ERR_NOT_FOUND;
        return NULL;
    }
    pthread_mutex_lock(&g->lock);
    *st = SS_OK;
    if (g->retired) /* by a re-cut since it was found */
        *st = SS_ERR_NOT_FOUND;
    else if (g->n != n)
        *st = SS_ERR_SIZE_MISMATCH;
    else if (s && ss__central_member_index(g, member) < 0)
        *st = SS_ERR_NOT_FOUND;
    else if (s && !s_checked_later && !ss__all_finite(s, n))
        *st = SS_ERR_NON_FINITE;
    if (*st != SS_OK) {
        pthread_mutex_unlock(&g->lock);
        return NULL;
    }
    if (s)
        ss__central_touch(g, member, ss__now_ns());
    return g;
}

/* The server side of an encoded upload: the member's mirror (made on its
 * first encoded call, and again if its encoding changes) takes it. Caller
 * holds g->lock; idx is the member's slot. */
static ss_status accept_upload(ss__central *c, group *g, size_t idx, const ss__codec_upload *up) {
    member_slot *m = &g->members[idx];
    if (up->enc == SS_ENC_F32 || !ss__encoding_name(up->enc))
        return SS_ERR_INVALID_ARGUMENT;
    if (m->mirror && m->mirror->enc != up->enc) {
        ss__central_uncharge(c, 2 * (uint64_t)m->mirror->n);
        ss__codec_mirror_free(m->mirror);
        free(m->mirror);
        m->mirror = NULL;
    }
    if (!m->mirror) {
        /* A mirror and its scratch: 2 n floats for as long as the member
         * stays, within the PS's budget for them. */
        const uint64_t want = 2 * (uint64_t)g->n;
        ss_status room = ss__central_charge(c, want, "a compressed member's mirror");
        if (room != SS_OK)
            return room;
        m->mirror = malloc(sizeof *m->mirror);
        if (!m->mirror) {
            ss__central_uncharge(c, want);
            return SS_ERR_NO_MEMORY;
        }
        m->mirror_budget = &c->used_floats;
        ss_status st = ss__codec_mirror_init(m->mirror, up->enc, g->n);
        if (st != SS_OK) {
            ss__central_uncharge(c, want);
            free(m->mirror);
            m->mirror = NULL;
            return st;
        }
        m->mirror->no_feedback = c->limits.no_error_feedback;
    }
    ss_status st = ss__codec_server_accept(m->mirror, up);
    if (st == SS_OK && !ss__all_finite(m->mirror->m, g->n)) {
        m->mirror->valid = false; /* only a reset can start it over */
        st = SS_ERR_NON_FINITE;
    }
    return st;
}

static void say_easgd_overflow(const group *g) {
    ss__central_say(
        "S-EASGD on %s: the exchange overflowed (not finite); the centre keeps its last value",
        g->name);
}

/* One exchange's bookkeeping. */
static void exchange_done(group *g) {
    g->exchanges++;
    g->last_done_ns = ss__now_ns();
}

/* Why an exchange of snapshot s was refused as not finite: s's own float
 * i (< n), or else the exchange's arithmetic. */
static void say_not_finite(const group *g, const float *s) {
    const size_t i = ss__first_non_finite(s, g->n);
    if (i < g->n)
        ss__central_say("%s: the snapshot's float %zu is %g (NaN or Inf); nothing applied", g->name,
                        i, (double)s[i]);
    else
        say_easgd_overflow(g);
}

ss_status ss__central_easgd(ss__central *c, const char *name, uint64_t member, const float *s,
                            float alpha, float *d, size_t n) {
    ss_status st = SS_ERR_INVALID_ARGUMENT;
    /* The snapshot is not read a pass of its own to check it: a NaN or Inf
     * makes d so, which the exchange refuses (one pass less over each
     * chunk on the PS). The first one, which becomes the centre, is. */
    group *g = c && name && s && d ? enter_call(c, name, member, s, n, true, &st) : NULL;
    if (!g) {
        if (d)
            memset(d, 0, n * sizeof *d); /* nothing applied */
        return st;
    }
    if (!g->central_init && ss__all_finite(s, n)) {
        memcpy(g->central, s, n * sizeof(float));
        g->central_init = true;
    }
    st = g->central_init ? ss__easgd_server(s, g->central, d, alpha, n) : SS_ERR_NON_FINITE;
    if (st == SS_ERR_NON_FINITE)
        say_not_finite(g, s);
    if (st == SS_OK)
        exchange_done(g);
    else
        memset(d, 0, n * sizeof *d); /* nothing applied */
    pthread_mutex_unlock(&g->lock);
    return st;
}

/* S-EASGD from an encoded upload; reply: the encoded d. Caller holds
 * g->lock. */
static ss_status easgd_encoded_locked(ss__central *c, group *g, uint64_t member,
                                      const ss__codec_upload *up, float alpha, uint8_t *reply) {
    if (!ss__alpha_valid(alpha))
        return SS_ERR_INVALID_ARGUMENT;
    ssize_t idx = ss__central_member_index(g, member);
    if (idx < 0)
        return SS_ERR_NOT_FOUND;
    g->members[idx].last_seen = ss__now_ns();
    ss_status st = accept_upload(c, g, (size_t)idx, up);
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
    exchange_done(g);
    return SS_OK;
}

ss_status ss__central_easgd_encoded(ss__central *c, const char *name, uint64_t member, size_t n,
                                    float alpha, const ss__codec_upload *up, uint8_t *reply) {
    if (!c || !name || !up || !reply || n == 0)
        return SS_ERR_INVALID_ARGUMENT;
    ss_status st;
    group *g = enter_call(c, name, member, NULL, n, false, &st);
    if (!g)
        return st;
    st = easgd_encoded_locked(c, g, member, up, alpha, reply);
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
static ss_status check_round_kind(ss__central *c, group *g, const ss__bmuf_params *bmuf) {
    if (g->rounds_kind == ROUNDS_UNSET) {
        if (bmuf) {
            ss_status room = ss__central_charge(c, 2 * (uint64_t)g->n, "S-BMUF's state");
            if (room != SS_OK)
                return room;
            g->bmuf_w = calloc(2 * g->n, sizeof(float));
            if (!g->bmuf_w) {
                ss__central_uncharge(c, 2 * (uint64_t)g->n);
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

/* Waits, g->lock held, until round my_round has a result; a round whose
 * deadline passes is closed without the members it still waits for. */
static void await_result(ss__central *c, group *g, uint64_t my_round) {
    while (g->result_round != my_round) {
        struct timespec ts = abs_monotonic(g->deadline_ns);
        int rc = pthread_cond_timedwait(&g->cond, &g->lock, &ts);
        if (rc == ETIMEDOUT && g->open_round == my_round && g->readers_pending == 0 &&
            ss__now_ns() >= g->deadline_ns) {
            ss__central_close_round(g); /* a slow or dead member must not stall the rest */
            ss__central_expire(c, g, ss__now_ns());
        }
    }
}

/* The member's snapshot (s, or for an encoded call the upload into its
 * mirror) into the open round. Caller holds g->lock. */
static ss_status contribute(ss__central *c, group *g, uint64_t member, const float *s,
                            const ss__codec_upload *up) {
    /* The previous round's mean must be copied out before a new one can
     * close over it; those readers are awake already, so this is short. */
    while (g->readers_pending > 0)
        pthread_cond_wait(&g->cond, &g->lock);
    ssize_t idx = ss__central_member_index(g, member);
    if (idx < 0)
        return SS_ERR_NOT_FOUND;
    if (g->members[idx].contributed)
        return SS_ERR_STATE; /* one snapshot per member per round */
    if (up) {
        g->members[idx].last_seen = ss__now_ns();
        ss_status st = accept_upload(c, g, (size_t)idx, up);
        if (st != SS_OK)
            return st;
        s = g->members[idx].mirror->m;
    }
    if (g->contributors == 0)
        g->deadline_ns = ss__now_ns() + c->deadline_ns;
    ss__mean_add(g->sum, s, g->n);
    g->members[idx].contributed = true;
    g->contributors++;
    return SS_OK;
}

/* One member's part in an MA/BMUF round: its snapshot into the open round,
 * then the round's result when it closes: copied to avg, or encoded into
 * reply. Caller holds g->lock and has checked the call. */
static ss_status round_locked(ss__central *c, group *g, uint64_t member, const float *s,
                              const ss__codec_upload *up, const ss__bmuf_params *bmuf, float *avg,
                              uint8_t *reply, ss__round_result *result) {
    ss_status st = check_round_kind(c, g, bmuf);
    if (st == SS_OK)
        st = contribute(c, g, member, s, up);
    if (st != SS_OK)
        return st;
    uint64_t my_round = g->open_round;
    if (g->contributors >= g->nmembers)
        ss__central_close_round(g);
    await_result(c, g, my_round);
    if (g->result_status != SS_OK) {
        st = g->result_status;
        ss__central_say(
            "round %llu of %s: its %s overflowed (not finite); the state keeps its last value",
            (unsigned long long)my_round, g->name,
            g->rounds_kind == ROUNDS_BMUF ? "mean or block step" : "mean");
    } else if (up) {
        /* The member may have expired while it waited (its slot moved). */
        ssize_t idx = ss__central_member_index(g, member);
        if (idx < 0 || !g->members[idx].mirror)
            st = SS_ERR_NOT_FOUND;
        else
            ss__codec_server_round_reply(g->members[idx].mirror, g->result, reply);
    } else {
        memcpy(avg, g->result, g->n * sizeof(float));
    }
    result->round = g->result_round;
    result->participants = g->result_participants;
    if (--g->readers_pending == 0)
        pthread_cond_broadcast(&g->cond);
    return st;
}

/* A round call, plain (s, avg) or encoded (up, reply). */
static ss_status round_call(ss__central *c, const char *name, uint64_t member, size_t n,
                            const float *s, const ss__codec_upload *up, const ss__bmuf_params *bmuf,
                            float *avg, uint8_t *reply, ss__round_result *result) {
    if (!c || !name || !result || n == 0 || (up ? !reply : !s || !avg))
        return SS_ERR_INVALID_ARGUMENT;
    ss_status st;
    group *g = enter_call(c, name, member, s, n, false, &st);
    if (!g)
        return st;
    st = round_locked(c, g, member, s, up, bmuf, avg, reply, result);
    pthread_mutex_unlock(&g->lock);
    return st;
}

ss_status ss__central_round(ss__central *c, const char *name, uint64_t member, const float *s,
                            const ss__bmuf_params *bmuf, float *avg, size_t n,
                            ss__round_result *result) {
    return round_call(c, name, member, n, s, NULL, bmuf, avg, NULL, result);
}

ss_status ss__central_round_encoded(ss__central *c, const char *name, uint64_t member, size_t n,
                                    const ss__codec_upload *up, const ss__bmuf_params *bmuf,
                                    uint8_t *reply, ss__round_result *result) {
    return round_call(c, name, member, n, NULL, up, bmuf, NULL, reply, result);
}

size_t ss__central_close_open_rounds(ss__central *c) {
    size_t closed = 0;
    if (!c)
        return 0;
    pthread_mutex_lock(&c->lock); /* the list, then each group: as a join takes them */
    for (group *g = c->groups; g; g = g->next) {
        pthread_mutex_lock(&g->lock);
        /* readers_pending > 0: the last result is still being copied out,
         * and no snapshot of a new round is in yet. */
        if (g->contributors > 0 && g->readers_pending == 0) {
            ss__central_close_round(g);
            closed++;
        }
        pthread_mutex_unlock(&g->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return closed;
}

ss_status ss__central_read(ss__central *c, const char *name, float *out, size_t n) {
    ss__central_refusal_clear();
    ss_status st = SS_ERR_INVALID_ARGUMENT;
    group *g = c && name && out ? enter_call(c, name, 0, NULL, n, false, &st) : NULL;
    if (!g)
        return st;
    if (g->central_init)
        memcpy(out, g->central, n * sizeof(float));
    else if (g->result_round != NO_ROUND)
        memcpy(out, g->result, n * sizeof(float));
    else {
        st = SS_ERR_STATE;
        ss__central_say("group %s: no round has completed yet, so the PS holds no central model "
                        "(it has one after the first round)",
                        name);
    }
    pthread_mutex_unlock(&g->lock);
    return st;
}
