/* The in-process transport's state, shared by inproc_transport.c (groups,
 * members, rounds, compressed sync) and inproc_checkpoint.c (saving and
 * restoring it, describing it). Not a public header. */
#ifndef SS_SHADOW_INPROC_INTERNAL_H
#define SS_SHADOW_INPROC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shadow/algorithms.h"
#include "shadow/codec.h"
#include "shadow/inproc_transport.h"

#define NO_ROUND UINT64_MAX

typedef struct member_slot {
    uint64_t id;
    uint64_t last_seen; /* ss__now_ns of its last call */
    bool contributed;   /* to the open round */
    /* Compressed sync (shadow/codec.h): this side's mirror of the member's
     * replica, from its first encoded call; for an in-process member of a
     * transport with an encoding, also the member's own side and its
     * message buffer (the calls go through the same bytes as on a wire). */
    ss__codec_mirror *mirror, *member_side;
    uint8_t *wire;
    _Atomic uint64_t *mirror_budget; /* the PS's count the mirror is in */
} member_slot;

typedef struct group {
    struct group *next;
    char *name;
    size_t n;
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

    uint64_t exchanges;    /* S-EASGD exchanges served */
    uint64_t rounds_done;  /* MA/BMUF rounds closed */
    uint64_t last_done_ns; /* ss__now_ns of the last exchange or closed round */
} group;

typedef struct inproc {
    pthread_mutex_t lock; /* guards the group list only */
    group *groups;
    uint64_t deadline_ns;
    uint64_t member_timeout_ns; /* 0 = members never expire */
    uint64_t link_latency_ns;
    double link_ns_per_byte; /* 0 = no bandwidth limit */
    ss__inproc_config limits;
    ss__encoding encoding; /* of this process's own members' calls */
    bool no_feedback;      /* their mirrors' (an ablation) */
    size_t ngroups;        /* under lock */
    _Atomic uint64_t refusals[SS_INPROC_LIMITS];
    /* Every float allocated for the dense groups, within
     * limits.max_total_floats: 3 n per group (centre, sum, result), 2 n
     * more for S-BMUF's state, 2 n per compressed member's mirror. (Before,
     * n per group was counted: a 128 MiB budget reached 804 MB.) */
    _Atomic uint64_t used_floats;
} inproc;

/* Takes `floats` from the budget, or refuses (SS_ERR_TOO_LARGE, counted,
 * the refusal saying what would not fit: `what`). */
ss_status ss__inproc_charge(inproc *ip, uint64_t floats, const char *what);
/* Gives floats back. */
void ss__inproc_uncharge(inproc *ip, uint64_t floats);
/* Floats a group of n takes when made: centre, round sum, round result. */
#define SS_INPROC_GROUP_FLOATS(n) (3 * (uint64_t)(n))

/* The transport's state, NULL when t is not an in-process transport. */
inproc *ss__inproc_of(ss__transport *t);
/* The group called name; caller holds ip->lock. */
group *ss__inproc_lookup_group(const inproc *ip, const char *name);
/* A new group of n floats (not yet listed), NULL when out of memory. */
group *ss__inproc_group_new(const char *name, size_t n);
/* Lists g; caller holds ip->lock. */
void ss__inproc_add_group(inproc *ip, group *g);

#endif
