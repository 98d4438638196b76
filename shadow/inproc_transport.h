/* The in-process transport: the ss__transport interface over a dense
 * centre (shadow/central.h) held in this process. Trainers of one process
 * share one instance; with an encoding their calls go through the same
 * encoded bytes and mirrors as they would to a PS. shadowsync-ps holds a
 * centre directly (ps/dense_service.c). */
#ifndef SS_SHADOW_INPROC_TRANSPORT_H
#define SS_SHADOW_INPROC_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shadow/central.h"
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
    /* The centre's limits (ss__central_config). */
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

ss_status ss__inproc_transport_create(const ss__inproc_config *cfg, ss__transport **out, char *why,
                                      size_t whylen);

/* The centre behind t (its checkpoints, /status, refusals), NULL when t is
 * not an in-process transport. */
ss__central *ss__inproc_central(ss__transport *t);

#endif
