/* The transport interface: what a sync round needs from "the others".
 *
 * The engine only talks to this vtable. The in-process implementation
 * (ss_inproc_transport_create) keeps central variables and round
 * aggregation in memory; the gRPC implementation in rpc/ fits the same
 * interface. Every call is thread-safe and bounded in time. */
#ifndef SHADOWSYNC_TRANSPORT_H
#define SHADOWSYNC_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "shadowsync/status.h"

typedef struct ss_transport ss_transport;

typedef struct ss_round_result {
    uint64_t round;        /* id of the closed round the caller took part in */
    uint32_t participants; /* snapshots averaged into it */
} ss_round_result;

typedef struct ss_transport_ops {
    /* Registers a member of group `group` (n floats). All members of a
     * group must agree on n. Returns a member id unique in the group. */
    ss_status (*join)(void *impl, const char *group, size_t n, uint64_t *member);
    /* Removes a member; open rounds stop waiting for it. */
    ss_status (*leave)(void *impl, const char *group, uint64_t member);
    /* S-EASGD exchange: sends snapshot s, receives d = alpha (s - c) while
     * the central variable moves c += d. c starts as the first s received. */
    ss_status (*easgd_exchange)(void *impl, const char *group, uint64_t member, const float *s,
                                float alpha, float *d, size_t n);
    /* MA/BMUF: contributes s to the group's open round and blocks until the
     * round closes (all members contributed, or the round deadline passed);
     * writes the mean of the round's snapshots to avg. */
    ss_status (*allreduce_mean)(void *impl, const char *group, uint64_t member, const float *s,
                                float *avg, size_t n, ss_round_result *result);
    /* Copies the central variable (EASGD) or last round mean (MA/BMUF). */
    ss_status (*read_central)(void *impl, const char *group, float *c, size_t n);
    /* Optional (NULL: always SS_OK). Tells the other side a member is alive
     * while it has nothing to sync; SS_ERR_NOT_FOUND when the member was
     * dropped (expired, or the server restarted): join again. */
    ss_status (*heartbeat)(void *impl, const char *group, uint64_t member);
    void (*destroy)(void *impl);
} ss_transport_ops;

/* Wraps an implementation. Takes ownership of impl (ops->destroy frees it). */
ss_status ss_transport_create(const ss_transport_ops *ops, void *impl, ss_transport **out);
void ss_transport_destroy(ss_transport *t);

ss_status ss_transport_join(ss_transport *t, const char *group, size_t n, uint64_t *member);
ss_status ss_transport_leave(ss_transport *t, const char *group, uint64_t member);
ss_status ss_transport_easgd_exchange(ss_transport *t, const char *group, uint64_t member,
                                      const float *s, float alpha, float *d, size_t n);
ss_status ss_transport_allreduce_mean(ss_transport *t, const char *group, uint64_t member,
                                      const float *s, float *avg, size_t n,
                                      ss_round_result *result);
ss_status ss_transport_read_central(ss_transport *t, const char *group, float *c, size_t n);
ss_status ss_transport_heartbeat(ss_transport *t, const char *group, uint64_t member);

/* The implementation behind t when its ops are `ops`, else NULL: lets an
 * implementation offer calls beyond the vtable (checkpoints). */
void *ss_transport_impl(ss_transport *t, const ss_transport_ops *ops);

/* In-process transport: one instance shared by every engine of a process.
 * round_deadline_ms bounds how long an MA/BMUF round waits for missing
 * members after its first contribution. */
typedef struct ss_inproc_config {
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
} ss_inproc_config;

ss_status ss_inproc_transport_create(const ss_inproc_config *cfg, ss_transport **out);

/* Writes every group's central variable and last round mean to path,
 * atomically (path.tmp, fsync, rename, fsync of the directory). Members and
 * open rounds are not saved: after a restart trainers join again.
 * *groups = groups written. */
ss_status ss_inproc_transport_save(ss_transport *t, const char *path, size_t *groups);
/* Loads a checkpoint written by ss_inproc_transport_save into t (before
 * members join). SS_ERR_NOT_FOUND: no such file; SS_ERR_PARSE: torn or
 * corrupted (nothing of it is trusted); *groups = groups restored. */
ss_status ss_inproc_transport_load(ss_transport *t, const char *path, size_t *groups);

/* Host-level averaging over `remote` (not owned; must outlive the
 * result): the members of this process (one agent's trainers) first
 * average in memory (a local round closes when all have contributed or
 * local_deadline_ms after the first), then one exchange per local round
 * goes to `remote` as a single member for the whole host. */
ss_status ss_host_average_transport_create(ss_transport *remote, uint32_t local_deadline_ms,
                                           ss_transport **out);

/* What a PS holds, for /status. */
typedef struct ss_inproc_group_info {
    char name[128];
    size_t n;
    uint32_t members;      /* registered now */
    uint64_t exchanges;    /* S-EASGD exchanges served */
    uint64_t rounds;       /* MA/BMUF rounds closed */
    uint64_t last_done_ns; /* ss_now_ns() of the last of either (0: none) */
} ss_inproc_group_info;

/* Up to max groups into out; SS_ERR_TOO_LARGE when there were more. */
ss_status ss_inproc_transport_describe(ss_transport *t, ss_inproc_group_info *out, size_t max,
                                       size_t *count);

#endif
