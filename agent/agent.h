/* The shadowsync-agent core: a unix socket that trainer processes of this
 * host connect to (libshadowsync in agent mode), and a shadow pool per
 * trainer, run by the same engine code as in-process mode, over replicas
 * that live in the trainers' memfds.
 *
 * Protocol: rpc/agent/agent.proto, framed by rpc/agent/agent_wire.h. A trainer
 * says Hello, registers each dense group (its memfd rides along with
 * SCM_RIGHTS), and says Finish when training is over; closing the socket
 * (or dying) drops it at once: its rounds stop and it leaves the PS. */
#ifndef SS_AGENT_H
#define SS_AGENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/metrics.h"
#include "shadow/transport.h"
#include "shadowsync/status.h"

typedef struct ss__agent ss__agent;

typedef struct ss__agent_config {
    const char *socket_path;  /* created; its directory too (0700, or 0750 with group) */
    const char *socket_group; /* NULL/"": only the agent's uid; else this group may connect */
    const uid_t *allow_uids;  /* peers allowed besides the agent's own uid */
    size_t nallow;
    ss__transport *transport; /* to the PS (or a host-averaging wrapper); not owned */
    ss__metrics *metrics;     /* not owned */
    uint32_t shadow_threads;  /* per trainer */
    uint64_t min_round_gap;
    uint64_t round_interval_us;
    uint32_t heartbeat_ms;
    uint32_t max_sessions; /* refused beyond this (0 = 256) */
    /* Per trainer: registered groups (each a memfd the agent maps) and
     * their floats * 4 in all; refused beyond, reason "too_large".
     * 0 = AGENT_MAX_GROUPS (64), 0 = SS_AGENT_DEFAULT_MAX_TRAINER_BYTES. */
    uint32_t max_trainer_groups;
    uint64_t max_trainer_bytes;
} ss__agent_config;

#define SS_AGENT_MAX_TRAINER_GROUPS        64
#define SS_AGENT_DEFAULT_MAX_TRAINER_BYTES (8ull << 30)

/* Binds the socket (a stale socket file is replaced; a live agent on it is
 * SS_ERR_EXISTS) and starts accepting. */
ss_status ss__agent_create(const ss__agent_config *cfg, ss__agent **out, char *why, size_t whylen);
/* Stops accepting, drops every trainer (their rounds stop, they leave the
 * PS; their replicas are theirs), removes the socket file. */
void ss__agent_destroy(ss__agent *a);

/* JSON: {"sessions":[...], "groups":[...]} with members, last round per
 * group, sync gap and divergence (caller frees). */
ss_status ss__agent_status_json(ss__agent *a, bool detail, char **out, size_t *len);
/* Writes each group's replica (of its first trainer) to dir/<group>.f32,
 * atomically. */
ss_status ss__agent_checkpoint(ss__agent *a, const char *dir, size_t *groups);
/* Rounds completed by every trainer's engine since start. */
uint64_t ss__agent_rounds(ss__agent *a);

#endif
