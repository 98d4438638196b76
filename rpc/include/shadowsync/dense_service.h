/* The DenseSync service (rpc/proto/dense_sync.proto) on both sides.
 *
 * Server: ss_dense_service_methods() gives the method table for
 * ss_rpc_server_start; every request is validated (sizes, float payloads,
 * NaN/Inf via the backend) and served by a backend ss_transport, the
 * in-process one in shadowsync-ps: it holds the central variables and runs
 * the MA/BMUF rounds.
 *
 * Client: ss_grpc_transport_create gives an ss_transport that talks to one
 * shadowsync-ps, so the engine runs unchanged over the network. */
#ifndef SHADOWSYNC_DENSE_SERVICE_H
#define SHADOWSYNC_DENSE_SERVICE_H

#include "shadowsync/metrics.h"
#include "shadowsync/rpc.h"
#include "shadowsync/transport.h"

typedef struct ss_dense_service {
    ss_transport *backend; /* not owned */
    ss_counter *rejected;  /* optional: requests refused as invalid */
    size_t max_floats;     /* largest group accepted */
    /* Optional: the Checkpoint call writes the backend's state and names
     * where; NULL answers FAILED_PRECONDITION. */
    ss_status (*checkpoint)(void *ctx, char *path, size_t pathlen, size_t *groups);
    void *checkpoint_ctx;
} ss_dense_service;

/* Methods to serve; ctx for ss_rpc_server_start is the ss_dense_service. */
const ss_rpc_method *ss_dense_service_methods(size_t *count);

/* Floats per chunk when the config gives none: 1 MiB of payload (gRPC
 * moves several 1 MiB messages in parallel ~2x faster than one 4 MiB
 * message on loopback; see BENCHMARKS.md). Every
 * member of a group must use the same value (it names the chunks). */
#define SS_GRPC_CHUNK_FLOATS (1u << 18)
#define SS_GRPC_MAX_SHARDS   64

typedef struct ss_grpc_transport_config {
    /* "host:port[,host:port...]": the S shadowsync-ps shards, in the same
     * order on every trainer. Shard s holds floats [n s / S, n (s+1) / S)
     * of every group. */
    const char *targets;
    uint32_t timeout_ms; /* per call; RoundMean adds round_wait_ms */
    uint32_t round_wait_ms;
    size_t chunk_floats;   /* 0 = SS_GRPC_CHUNK_FLOATS */
    uint32_t retries;      /* idempotent calls (ReadCentral, Heartbeat, Leave)
                              retried this often on UNAVAILABLE, with backoff */
    const ss_rpc_tls *tls; /* optional */
} ss_grpc_transport_config;

ss_status ss_grpc_transport_create(const ss_grpc_transport_config *cfg, ss_transport **out);

/* Asks one shadowsync-ps to write its checkpoint now. */
ss_status ss_grpc_checkpoint(const char *target, const ss_rpc_tls *tls, uint32_t timeout_ms,
                             char *path, size_t pathlen, size_t *groups);

#endif
