/* A client's bulk streams (rpc/bulk/bulk.h) to the S shards it has gRPC
 * channels to, shared by its batches: idle streams kept per shard, each of
 * the shard map epoch it was opened in; a ticket asked for over the
 * shard's channel when none is idle; a batch's calls run on up to `lanes`
 * streams per shard at once. A shard whose PS has no bulk port (its
 * ticket call said NOT_FOUND) is not asked again: its calls go over gRPC.
 * Used by the dense transport (rpc/dense) and the embedding client
 * (rpc/emb); what a ticket call is belongs to the protocol that asks. */
#ifndef SS_RPC_BULK_POOL_H
#define SS_RPC_BULK_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc/bulk/bulk.h"
#include "rpc/rpc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_BULK_POOL_MAX_SHARDS 64

/* Asks the PS behind ch for a ticket of the shard map's epoch (0: none);
 * *port: its bulk port. SS_ERR_NOT_FOUND: it has no bulk port. */
typedef ss_status (*ss__bulk_ticket_fn)(ss__rpc_channel *ch, uint64_t epoch, uint32_t timeout_ms,
                                        uint8_t ticket[SS_BULK_TICKET_BYTES], uint32_t *port);

typedef struct ss__bulk_pool_config {
    const char *targets;              /* "host:port,...": shard i's address */
    ss__rpc_channel *const *channels; /* shard i's channel (the caller's; outlive the pool) */
    uint32_t shards;
    const ss__rpc_tls *tls; /* the channels' files: TLS streams (NULL or none: plain) */
    uint32_t ticket_timeout_ms;
    uint32_t stream_timeout_ms; /* connect, handshake, each wait for a reply's bytes */
    size_t max_reply;           /* a reply's largest bytes (rpc/bulk/bulk.h) */
    uint64_t epoch;
    ss__bulk_ticket_fn ticket;
    const char *component; /* of its log lines ("dense", "emb") */
} ss__bulk_pool_config;

typedef struct ss__bulk_pool ss__bulk_pool;

/* SS_ERR_INVALID_ARGUMENT with why when a target is not host:port;
 * SS_ERR_IO with why when the TLS files do not load. */
ss_status ss__bulk_pool_create(const ss__bulk_pool_config *cfg, ss__bulk_pool **out, char *why,
                               size_t whylen);
void ss__bulk_pool_destroy(ss__bulk_pool *p);
/* The channels route by epoch now: idle streams of the old one are
 * closed (one in use is closed when it comes back). */
void ss__bulk_pool_set_epoch(ss__bulk_pool *p, uint64_t epoch);
/* Runs the calls rq[0 .. n) (each rq[i].ch one of the pool's channels)
 * as method index `method` of the streams, on up to `lanes` streams per
 * shard (a thread per stream past the first). false when a shard with
 * calls has no stream: nothing was sent (send them over gRPC). Else *st
 * is the first failure (each call has its own status, as
 * ss__rpc_call_many's); a call that failed in transit closes its
 * shard's streams. */
bool ss__bulk_pool_call(ss__bulk_pool *p, uint32_t method, ss__rpc_request *rq, size_t n,
                        unsigned lanes, ss_status *st);
/* Batches that went on streams so far. */
uint64_t ss__bulk_pool_batches(const ss__bulk_pool *p);

#ifdef __cplusplus
}
#endif

#endif
