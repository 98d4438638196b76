/* The Embedding service (rpc/emb/embedding.proto) over an ss__emb_store:
 * OpenTable, Lookup, Push, Elastic, Checkpoint, Stats, Handoff. Payload lengths are
 * checked here (ids whole uint64s, rows n * dim floats, batch within the
 * store's limit before anything is allocated); the store checks the rest.
 * Every refusal is counted in shadowsync_emb_rejected_total{reason}. */
#ifndef SHADOWSYNC_EMB_SERVICE_H
#define SHADOWSYNC_EMB_SERVICE_H

#include "embedding-store/emb_store.h"
#include "rpc/emb/emb_wire.h"
#include "rpc/rpc.h"

#define SS_EMB_METHODS 9

typedef struct ss__emb_service {
    ss__emb_store *store; /* not owned */
    /* Rows moving between shards (ps/row_moves.h), set after init; NULL:
     * none. ensure runs on every row request's ids before the store sees
     * them (a failure fails the request); handoff serves Handoff (without
     * it Handoff is refused). Both get moves as their ctx. */
    ss_status (*ensure)(void *ctx, const char *table, const uint64_t *ids, size_t n, char *why,
                        size_t whylen);
    void (*handoff)(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply);
    void *moves;
    ss__rpc_method methods[SS_EMB_METHODS];
} ss__emb_service;

/* Fills svc->methods (their ctx is svc) for ss__rpc_server_start. */
void ss__emb_service_init(ss__emb_service *svc, ss__emb_store *store);

#endif
