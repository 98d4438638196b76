/* The dense centre: what a parameter server holds for dense sync. Its
 * store of groups (a group is a named float vector: one chunk of a
 * trainer's dense parameters) and their members, the S-EASGD central
 * variables, the S-MA / S-BMUF rounds and S-BMUF's block state, the
 * limits it holds them within, and its checkpoints.
 *
 * shadowsync-ps serves its DenseSync calls from one (ps/dense_service.c);
 * trainers of one process share one through the in-process transport
 * (shadow/inproc_transport.h), a thin adapter over it. The algorithms
 * themselves are shadow/algorithms.h; the checkpoint file format
 * shadow/dense_checkpoint.h.
 *
 * Files: central_groups.c (the store, membership, limits), central_rounds.c
 * (S-EASGD exchanges, rounds, compressed members), central_checkpoint.c
 * (save, load, describe); their shared state is central_internal.h. */
#ifndef SS_SHADOW_CENTRAL_H
#define SS_SHADOW_CENTRAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shadow/algorithms.h"
#include "shadow/codec.h"
#include "shadow/dense_checkpoint.h"
#include "shadow/transport.h"

typedef struct ss__central ss__central;

typedef struct ss__central_config {
    /* How long an MA/BMUF round waits for missing members after its first
     * contribution; > 0. */
    uint32_t round_deadline_ms;
    /* A member not heard from (any call, heartbeats included) for this long
     * is dropped, so a killed trainer stops costing every round a deadline.
     * 0 = never; otherwise at least round_deadline_ms. */
    uint32_t member_timeout_ms;
    /* What the centre holds at most; a Join past one is refused with
     * SS_ERR_TOO_LARGE, counted, and ss__central_refusal says which limit.
     * 0 = no limit. */
    uint32_t max_groups;       /* groups (chunks of groups, for a client transport) */
    uint32_t max_members;      /* members of one group */
    uint64_t max_total_floats; /* floats of all groups together (see central_internal.h) */
    /* Benchmarks only: compressed members' mirrors without error feedback
     * (see ss__codec_mirror.no_feedback). */
    bool no_error_feedback;
} ss__central_config;

/* NULL config: a deadline of 1 s, no timeout, no limits. SS_ERR_INVALID_ARGUMENT
 * names no field: the checks are the comments above. */
ss_status ss__central_create(const ss__central_config *cfg, ss__central **out, char *why,
                             size_t whylen);
void ss__central_destroy(ss__central *c);

/* The limits a Join can hit, in the order of ss__central_refusals. */
enum {
    SS_CENTRAL_LIMIT_GROUPS,
    SS_CENTRAL_LIMIT_MEMBERS,
    SS_CENTRAL_LIMIT_FLOATS,
    SS_CENTRAL_LIMITS
};
extern const char *const ss__central_limit_names[SS_CENTRAL_LIMITS];
/* Why the calling thread's last call was refused by a limit, a chunking
 * clash or an overflow ("" if not). */
const char *ss__central_refusal(void);
/* Joins refused per limit since the start. */
void ss__central_refusals(const ss__central *c, uint64_t out[SS_CENTRAL_LIMITS]);

/* ---- membership (the same contracts as ss__transport_ops) ---- */
/* key (0: none) is the member's own, the same each time it joins (an
 * agent's trainer through a restarted agent): a join with the key of a
 * member the group has replaces that member, so that the rounds do not
 * wait for the dead one until it expires. */
ss_status ss__central_join(ss__central *c, const char *name, size_t n, uint64_t key,
                           uint64_t *member);
/* The same for a member re-cutting its group (a shard map change): a
 * chunk of the group that overlaps name with another range and has no
 * member left (the old cut's, each member has left it) is retired (its
 * floats freed and given back to the budget) instead of refusing the
 * join; one that still has members refuses it, as a plain join does.
 * fresh: a group called name that has no members is retired too and made
 * anew (the member brings the centre it starts from). */
ss_status ss__central_join_recut(ss__central *c, const char *name, size_t n, bool fresh,
                                 uint64_t key, uint64_t *member);
ss_status ss__central_leave(ss__central *c, const char *name, uint64_t member);
/* Retires the group called name if nobody is in it (members not heard
 * from for the member timeout dropped first): its floats freed and given
 * back to the budget. For a PS the shard map has left, whose chunks no
 * trainer routes to after its last member leaves. True when it was. */
bool ss__central_retire_empty(ss__central *c, const char *name);
ss_status ss__central_heartbeat(ss__central *c, const char *name, uint64_t member);
/* An open round this member has not contributed to yet. */
bool ss__central_round_waiting(ss__central *c, const char *name, uint64_t member);

/* ---- sync ---- */
/* S-EASGD: d = alpha (s - centre), centre += d. d is all written (zeros
 * when nothing was applied). */
ss_status ss__central_easgd(ss__central *c, const char *name, uint64_t member, const float *s,
                            float alpha, float *d, size_t n);
/* One member's part of an S-MA round (bmuf NULL) or S-BMUF round: its
 * snapshot in, the round's result (the mean, or the block start) into avg
 * when the round closes or its deadline passes. */
ss_status ss__central_round(ss__central *c, const char *name, uint64_t member, const float *s,
                            const ss__bmuf_params *bmuf, float *avg, size_t n,
                            ss__round_result *result);
/* Closes every open MA/BMUF round now, with the members that contributed
 * (as its deadline would). For a shard map change: the other members'
 * calls of the old epoch are refused from then on, so these rounds would
 * only wait out their deadline before their members learn of the change.
 * Returns how many rounds it closed. */
size_t ss__central_close_open_rounds(ss__central *c);
/* The same from a compressed member: an encoded upload (checked and decoded
 * here into the member's mirror) and the reply in the same encoding
 * (ss__codec_size(up->enc, n) bytes). SS_ERR_STATE when the member's mirror
 * is out of step (it must send a reset); SS_ERR_INVALID_ARGUMENT for an
 * encoding or payload that does not decode. */
ss_status ss__central_easgd_encoded(ss__central *c, const char *name, uint64_t member, size_t n,
                                    float alpha, const ss__codec_upload *up, uint8_t *reply);
ss_status ss__central_round_encoded(ss__central *c, const char *name, uint64_t member, size_t n,
                                    const ss__codec_upload *up, const ss__bmuf_params *bmuf,
                                    uint8_t *reply, ss__round_result *result);
/* The centre of a group: its S-EASGD variable, else its last round's
 * result; SS_ERR_STATE before either. */
ss_status ss__central_read(ss__central *c, const char *name, float *out, size_t n);

/* ---- checkpoints and /status (central_checkpoint.c) ---- */
/* Writes every group's central variable, last round result and S-BMUF
 * state to path, atomically (a private temporary file, fsync, rename,
 * fsync of the directory). Members and open rounds are not saved: after a
 * restart trainers join again. *groups = groups written. */
ss_status ss__central_save(ss__central *c, const char *path, size_t *groups);
/* The same for a delta (ps/deltas.h): a base writes every group, a delta
 * only those changed (an exchange served, a round closed) since the last
 * delta or base; a reader upserts the groups a file holds. A failed write
 * must be followed by a base (what changed may be in neither). */
ss_status ss__central_save_delta(ss__central *c, const char *path, bool base, size_t *groups);
/* Loads a checkpoint written by ss__central_save (before members join).
 * SS_ERR_NOT_FOUND: no such file; SS_ERR_PARSE: torn or corrupted (nothing
 * of it is trusted); *groups = groups restored. */
ss_status ss__central_load(ss__central *c, const char *path, size_t *groups);
/* The same from a file already read and checked (a follower's, fetched
 * over the network). */
ss_status ss__central_load_file(ss__central *c, const ss__dense_ckpt_file *f, size_t *groups);
/* Whether ss__central_load_file would take f, changing nothing: every
 * group of it fits (SS_ERR_SIZE_MISMATCH: a group of that name and another
 * size), so that a follower applies a delta's rows and dense groups both
 * or neither. */
ss_status ss__central_check_file(ss__central *c, const ss__dense_ckpt_file *f);

typedef struct ss__central_group_info {
    char name[128];
    size_t n;
    uint32_t members;      /* registered now */
    uint32_t contributors; /* snapshots in the open MA/BMUF round */
    uint64_t exchanges;    /* S-EASGD exchanges served */
    uint64_t rounds;       /* MA/BMUF rounds closed */
    uint64_t last_done_ns; /* ss__now_ns() of the last of either (0: none) */
} ss__central_group_info;
/* Up to max groups into out; SS_ERR_TOO_LARGE when there were more. */
ss_status ss__central_describe(ss__central *c, ss__central_group_info *out, size_t max,
                               size_t *count);

#endif
