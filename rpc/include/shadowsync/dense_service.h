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
} ss_dense_service;

/* Methods to serve; ctx for ss_rpc_server_start is the ss_dense_service. */
const ss_rpc_method *ss_dense_service_methods(size_t *count);

typedef struct ss_grpc_transport_config {
    const char *target;  /* "host:port" of a shadowsync-ps */
    uint32_t timeout_ms; /* per call; RoundMean adds round_wait_ms */
    uint32_t round_wait_ms;
} ss_grpc_transport_config;

ss_status ss_grpc_transport_create(const ss_grpc_transport_config *cfg, ss_transport **out);

#endif
