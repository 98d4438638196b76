/* The Deltas service (rpc/emb/embedding.proto) of a training PS with
 * --delta-dir: followers over the network (--follow host:port) read its
 * delta directory through it. Read-only (a certificate outside
 * --tls-writers may call it; the token is needed as for every call).
 * Paths are built from the sequence number and kind only. */
#ifndef SS_PS_DELTAS_SERVICE_H
#define SS_PS_DELTAS_SERVICE_H

#include "rpc/rpc.h"

#define SS_DELTAS_METHODS 2

typedef struct ss__deltas_service {
    const char *dir; /* --delta-dir; not owned */
    ss__rpc_method methods[SS_DELTAS_METHODS];
} ss__deltas_service;

/* Fills svc->methods (their ctx is svc) for ss__rpc_server_start. */
void ss__deltas_service_init(ss__deltas_service *svc, const char *dir);

#endif
