/* The dense centre's state (shadow/central.h), shared by central_groups.c
 * (the store, membership, limits), central_rounds.c (exchanges, rounds,
 * compressed members) and central_checkpoint.c (saving, restoring,
 * describing it). Not a public header. */
#ifndef SS_SHADOW_CENTRAL_INTERNAL_H
#define SS_SHADOW_CENTRAL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shadow/algorithms.h"
#include "shadow/central.h"
#include "shadow/codec.h"

#define NO_ROUND UINT64_MAX

typedef struct member_slot {
    uint64_t id;
    uint64_t key;       /* the member's own key (0: none): a join with it replaces this one */
    uint64_t last_seen; /* ss__now_ns of its last call */
    bool contributed;   /* to the open round */
    /* Compressed sync (shadow/codec.h): this side's mirror of the member's
     * replica, from its first encoded call. */
    ss__codec_mirror *mirror;
    _Atomic uint64_t *mirror_budget; /* the PS's count the mirror is in */
} member_slot;

typedef struct group {
    struct group *next;
    char *name;
    size_t n;
    /* Retired (ss__central_join_recut): off the list, its floats freed
     * (or once pins is 0); a call that found it before then treats it as
     * gone. The struct lives until the centre does (a caller may hold it). */
    bool retired;
    uint32_t pins; /* checkpoints writing it now (under the centre's lock) */
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */

    member_slot *members; /* the active ones */
    size_t nmembers, capmembers;

    float *central; /* S-EASGD central variable */
    bool central_init;

    uint64_t open_round;   /* round now accepting snapshots */
    float *sum;            /* sum of the open round's snapshots */
    uint32_t contributors; /* snapshots in sum */
    uint64_t deadline_ns;  /* set by the round's first snapshot */

    float *result; /* of round result_round: the mean (S-MA) or the block start b (S-BMUF) */
    /* What the group's rounds are, fixed by its first contribution. */
    enum { ROUNDS_UNSET, ROUNDS_MEAN, ROUNDS_BMUF } rounds_kind;
    ss__bmuf_params bmuf;   /* S-BMUF: the group's parameters */
    float *bmuf_w, *bmuf_m; /* S-BMUF: the global model and momentum (one allocation) */
    bool bmuf_started;      /* the first round set w = b = mean */
    uint64_t result_round;
    /* SS_OK, or why round result_round has no result: its mean or block
     * step was not finite (result and the BMUF state kept their values). */
    ss_status result_status;
    uint32_t result_participants;
    uint32_t readers_pending; /* contributors yet to copy result */

    uint64_t exchanges;     /* S-EASGD exchanges served */
    uint64_t rounds_done;   /* MA/BMUF rounds closed */
    uint64_t delta_changes; /* exchanges + rounds_done when the last delta chose it */
    uint64_t last_done_ns;  /* ss__now_ns of the last exchange or closed round */
} group;

struct ss__central {
    pthread_mutex_t lock; /* guards the group list only */
    group *groups;
    size_t ngroups; /* under lock */
    group *retired; /* retired groups, freed with the centre */
    uint64_t deadline_ns;
    uint64_t member_timeout_ns; /* 0 = members never expire */
    ss__central_config limits;
    _Atomic uint64_t refusals[SS_CENTRAL_LIMITS];
    /* Every float allocated for the dense groups, within
     * limits.max_total_floats: 3 n per group (centre, sum, result), 2 n
     * more for S-BMUF's state, 2 n per compressed member's mirror. (Before,
     * n per group was counted: a 128 MiB budget reached 804 MB.) */
    _Atomic uint64_t used_floats;
};

/* Takes `floats` from the budget, or refuses (SS_ERR_TOO_LARGE, counted,
 * the refusal saying what would not fit: `what`). */
ss_status ss__central_charge(ss__central *c, uint64_t floats, const char *what);
/* Gives floats back. */
void ss__central_uncharge(ss__central *c, uint64_t floats);
/* Floats a group of n takes when made: centre, round sum, round result. */
#define SS_CENTRAL_GROUP_FLOATS(n) (3 * (uint64_t)(n))

/* Says why the calling thread's call was refused (ss__central_refusal). */
void ss__central_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Forgets the calling thread's last refusal (the start of a call). */
void ss__central_refusal_clear(void);
/* The group called name; caller holds c->lock. */
group *ss__central_lookup(const ss__central *c, const char *name);
/* The group called name, or NULL; takes and drops c->lock. */
group *ss__central_find(ss__central *c, const char *name);
/* Drops a checkpoint's pin on g (takes g->lock): a retired group's
 * floats are freed once nothing pins it. */
void ss__central_unpin(group *g);
/* A new group of n floats (not yet listed), NULL when out of memory. */
group *ss__central_group_new(const char *name, size_t n);
/* Lists g; caller holds c->lock. */
void ss__central_add_group(ss__central *c, group *g);

/* The member's slot index in g, or -1. Caller holds g->lock. */
ssize_t ss__central_member_index(const group *g, uint64_t member);
/* Records a call of member at now; false when it is not a member. */
bool ss__central_touch(group *g, uint64_t member, uint64_t now);
/* Drops members not heard from for the member timeout. Caller holds g->lock. */
void ss__central_expire(const ss__central *c, group *g, uint64_t now);
/* Closes g's open round (the mean, or the S-BMUF block step). Caller holds
 * g->lock and has made sure readers_pending == 0. */
void ss__central_close_round(group *g);

#endif
