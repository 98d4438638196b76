/* The transport interface: what a sync round needs from "the others".
 *
 * The engine only talks to this vtable. Implementations: the in-process
 * one (shadow/inproc_transport.h), an adapter over a dense centre in this
 * process (shadow/central.h, what a parameter server holds); the
 * host-averaging wrapper (shadow/host_average_transport.h); the gRPC
 * client in rpc/dense/grpc_transport.h. Every call is thread-safe and bounded in time. */
#ifndef SS_SHADOW_TRANSPORT_H
#define SS_SHADOW_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shadow/algorithms.h"
#include "shadowsync/status.h"

typedef struct ss__transport ss__transport;

typedef struct ss__round_result {
    uint64_t round;        /* id of the closed round the caller took part in */
    uint32_t participants; /* snapshots averaged into it */
} ss__round_result;

typedef struct ss__transport_ops {
    /* Registers a member of group `group` (n floats). All members of a
     * group must agree on n. Returns a member id unique in the group. key
     * (0: none) is the member's own, the same at each of its joins: a
     * join with the key of a member the group has replaces that member
     * (ss__central_join). */
    ss_status (*join)(void *impl, const char *group, size_t n, uint64_t key, uint64_t *member);
    /* Removes a member; open rounds stop waiting for it. */
    ss_status (*leave)(void *impl, const char *group, uint64_t member);
    /* S-EASGD exchange: sends snapshot s, receives d = alpha (s - c) while
     * the central variable moves c += d. c starts as the first s received.
     * d arrives uninitialized and the transport writes all of it: on an
     * error it holds the part of d the other side did apply (a sharded
     * transport may apply some chunks and not others) and zeros elsewhere,
     * so a caller that applies x -= d either way keeps x + c conserved. */
    ss_status (*easgd_exchange)(void *impl, const char *group, uint64_t member, const float *s,
                                float alpha, float *d, size_t n);
    /* MA/BMUF: contributes s to the group's open round and blocks until the
     * round closes (all members contributed, or the round deadline passed).
     * bmuf NULL (S-MA): writes the mean of the round's snapshots to out.
     * bmuf set (S-BMUF): the side that aggregates holds the group's block
     * state (ss__bmuf_step) and writes the new block start b to out. A
     * group runs one of the two, with one set of parameters, for good: a
     * call that disagrees is SS_ERR_INVALID_ARGUMENT. */
    ss_status (*round)(void *impl, const char *group, uint64_t member, const float *s,
                       const ss__bmuf_params *bmuf, float *out, size_t n, ss__round_result *result);
    /* Copies the central variable (EASGD) or last round mean (MA/BMUF). */
    ss_status (*read_central)(void *impl, const char *group, float *c, size_t n);
    /* Optional (NULL: always SS_OK). Tells the other side a member is alive
     * while it has nothing to sync; SS_ERR_NOT_FOUND when the member was
     * dropped (expired, or the server restarted): join again. */
    ss_status (*heartbeat)(void *impl, const char *group, uint64_t member);
    /* Optional (NULL: 4 n). Payload bytes n floats take each way on this
     * transport's wire: less with compressed sync (shadow/codec.h). */
    size_t (*wire_bytes)(void *impl, size_t n);
    /* Optional (NULL: false). True when the group has an MA/BMUF round open
     * that still waits for this member's snapshot. The engine then takes
     * part even if its replica has not moved since its last round: a member
     * that is idle (a trainer done with its share of an epoch, or out of
     * data) must not hold the others' rounds open until their deadline. */
    bool (*round_waiting)(void *impl, const char *group, uint64_t member);
    void (*destroy)(void *impl);
} ss__transport_ops;

/* Wraps an implementation. Takes ownership of impl (ops->destroy frees it). */
ss_status ss__transport_create(const ss__transport_ops *ops, void *impl, ss__transport **out,
                               char *why, size_t whylen);
void ss__transport_destroy(ss__transport *t);

ss_status ss__transport_join(ss__transport *t, const char *group, size_t n, uint64_t *member);
/* The same as a member with its own key (the ops' join). */
ss_status ss__transport_join_keyed(ss__transport *t, const char *group, size_t n, uint64_t key,
                                   uint64_t *member);
ss_status ss__transport_leave(ss__transport *t, const char *group, uint64_t member);
ss_status ss__transport_easgd_exchange(ss__transport *t, const char *group, uint64_t member,
                                       const float *s, float alpha, float *d, size_t n);
ss_status ss__transport_round(ss__transport *t, const char *group, uint64_t member, const float *s,
                              const ss__bmuf_params *bmuf, float *out, size_t n,
                              ss__round_result *result);
/* ss__transport_round of an S-MA group: avg = the round's mean. */
ss_status ss__transport_allreduce_mean(ss__transport *t, const char *group, uint64_t member,
                                       const float *s, float *avg, size_t n,
                                       ss__round_result *result);
ss_status ss__transport_read_central(ss__transport *t, const char *group, float *c, size_t n);
ss_status ss__transport_heartbeat(ss__transport *t, const char *group, uint64_t member);
size_t ss__transport_wire_bytes(ss__transport *t, size_t n);
bool ss__transport_round_waiting(ss__transport *t, const char *group, uint64_t member);

/* The implementation behind t when its ops are `ops`, else NULL: lets an
 * implementation offer calls beyond the vtable (checkpoints). */
void *ss__transport_impl(ss__transport *t, const ss__transport_ops *ops);

#endif
