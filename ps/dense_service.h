/* The DenseSync service (rpc/dense/dense_sync.proto), the parameter
 * server's side; the client is rpc/dense/grpc_transport.h.
 *
 * ss__dense_service_methods() gives the method table for
 * ss__rpc_server_start; every request is validated (sizes, float payloads,
 * NaN/Inf via the centre) and served by the PS's dense centre
 * (shadow/central.h): its central variables, rounds and S-BMUF state.
 */
#ifndef SS_PS_DENSE_SERVICE_H
#define SS_PS_DENSE_SERVICE_H

#include "common/metrics.h"
#include "rpc/rpc.h"
#include "shadow/central.h"

typedef struct ss__dense_service {
    ss__central *centre;   /* not owned */
    ss__counter *rejected; /* optional: requests refused as invalid */
    size_t max_floats;     /* largest group accepted */
    /* Optional: the Checkpoint call writes the centre's state and names
     * where; NULL answers FAILED_PRECONDITION. */
    ss_status (*checkpoint)(void *ctx, char *path, size_t pathlen, size_t *groups);
    void *checkpoint_ctx;
    /* Optional: true when the shard map no longer names this PS. Then a
     * chunk whose last member leaves (a trainer re-cutting away) is
     * retired at once, its floats freed: no trainer routes here now. */
    bool (*left_the_map)(void *ctx);
    void *map_ctx;
} ss__dense_service;

/* Methods to serve; ctx for ss__rpc_server_start is the ss__dense_service.
 * EasgdExchange and RoundMean are streamed (rpc/bulk/bulk.h) too. */
const ss__rpc_method *ss__dense_service_methods(size_t *count);

#endif
