/* The in-process transport: central variables (S-EASGD) and MA/BMUF round
 * aggregation in memory. Trainers of one process share one instance, and
 * shadowsync-ps serves its DenseSync calls from one (ps/dense_service.c).
 * Its checkpoint file format is shadow/dense_checkpoint.h. */
#ifndef SS_SHADOW_INPROC_TRANSPORT_H
#define SS_SHADOW_INPROC_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "shadow/codec.h"
#include "shadow/transport.h"

/* In-process transport: one instance shared by every engine of a process.
 * round_deadline_ms bounds how long an MA/BMUF round waits for missing
 * members after its first contribution. */
typedef struct ss__inproc_config {
    uint32_t round_deadline_ms;
    /* A member not heard from (any call, heartbeats included) for this long
     * is dropped, so a killed trainer stops costing every round a deadline.
     * 0 = never; otherwise at least round_deadline_ms. */
    uint32_t member_timeout_ms;
    /* Optional link emulation, for benchmarks that need a round to cost
     * what it costs over a network: each exchange sleeps (never spins)
     * 2 x link_latency_us plus the payload's bytes, both ways, at
     * link_gbps, outside every lock. 0 and 0 = plain memory speed. */
    uint32_t link_latency_us;
    double link_gbps;
    /* What one PS holds at most; a Join past one is refused with
     * SS_ERR_TOO_LARGE, counted, and ss__inproc_transport_refusal says
     * which limit. 0 = no limit. */
    uint32_t max_groups;       /* groups (chunks of groups, for a client transport) */
    uint32_t max_members;      /* members of one group */
    uint64_t max_total_floats; /* floats of all groups together */
    /* Compressed sync for this process's own members (in-process trainers):
     * their calls go through the encoded bytes and the mirrors exactly as
     * over a wire (shadow/codec.h). SS_ENC_F32 (0): plain floats. */
    ss__encoding encoding;
    /* Benchmarks only: with an encoding, no error feedback (each upload is
     * the quantized snapshot itself; see ss__codec_mirror.no_feedback). */
    bool no_error_feedback;
} ss__inproc_config;

/* The limits a Join can hit, in the order of ss__inproc_transport_refusals. */
enum { SS_INPROC_LIMIT_GROUPS, SS_INPROC_LIMIT_MEMBERS, SS_INPROC_LIMIT_FLOATS, SS_INPROC_LIMITS };
extern const char *const ss__inproc_limit_names[SS_INPROC_LIMITS];

/* Why the calling thread's last Join was refused by a limit ("" if not). */
const char *ss__inproc_transport_refusal(void);
/* Joins refused per limit since the start. */
void ss__inproc_transport_refusals(ss__transport *t, uint64_t out[SS_INPROC_LIMITS]);

ss_status ss__inproc_transport_create(const ss__inproc_config *cfg, ss__transport **out);

/* Writes every group's central variable and last round mean to path,
 * atomically (path.tmp, fsync, rename, fsync of the directory). Members and
 * open rounds are not saved: after a restart trainers join again.
 * *groups = groups written. */
/* The server side of compressed sync, for a PS that holds its groups in
 * an in-process transport: an encoded upload from a remote member (up,
 * checked and decoded here into the member's mirror) and the reply in the
 * same encoding (ss__codec_size(up->enc, n) bytes). Status as the plain
 * calls', plus SS_ERR_STATE when the member's mirror is out of step (the
 * member must send a reset) and SS_ERR_INVALID_ARGUMENT for an encoding
 * or payload that does not decode. */
ss_status ss__inproc_easgd_encoded(ss__transport *t, const char *name, uint64_t member, size_t n,
                                   float alpha, const ss__codec_upload *up, uint8_t *reply);
ss_status ss__inproc_round_encoded(ss__transport *t, const char *name, uint64_t member, size_t n,
                                   const ss__codec_upload *up, const ss__bmuf_params *bmuf,
                                   uint8_t *reply, ss__round_result *result);

ss_status ss__inproc_transport_save(ss__transport *t, const char *path, size_t *groups);
/* Loads a checkpoint written by ss__inproc_transport_save into t (before
 * members join). SS_ERR_NOT_FOUND: no such file; SS_ERR_PARSE: torn or
 * corrupted (nothing of it is trusted); *groups = groups restored. */
ss_status ss__inproc_transport_load(ss__transport *t, const char *path, size_t *groups);

/* What a PS holds, for /status. */
typedef struct ss__inproc_group_info {
    char name[128];
    size_t n;
    uint32_t members;      /* registered now */
    uint32_t contributors; /* snapshots in the open MA/BMUF round */
    uint64_t exchanges;    /* S-EASGD exchanges served */
    uint64_t rounds;       /* MA/BMUF rounds closed */
    uint64_t last_done_ns; /* ss__now_ns() of the last of either (0: none) */
} ss__inproc_group_info;

/* Up to max groups into out; SS_ERR_TOO_LARGE when there were more. */
ss_status ss__inproc_transport_describe(ss__transport *t, ss__inproc_group_info *out, size_t max,
                                        size_t *count);

#endif
