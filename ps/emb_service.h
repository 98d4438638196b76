/* The Embedding service (rpc/emb/embedding.proto) over an ss__emb_store:
 * OpenTable, Lookup, Push, Elastic, Checkpoint, Stats. Payload lengths are
 * checked here (ids whole uint64s, rows n * dim floats, batch within the
 * store's limit before anything is allocated); the store checks the rest.
 * Every refusal is counted in shadowsync_emb_rejected_total{reason}. */
#ifndef SHADOWSYNC_EMB_SERVICE_H
#define SHADOWSYNC_EMB_SERVICE_H

#include "embedding-store/emb_store.h"
#include "rpc/rpc.h"

#define SS_EMB_METHODS 7

#define SS_EMB_M_OPEN        "/shadowsync.v1.Embedding/OpenTable"
#define SS_EMB_M_LOOKUP      "/shadowsync.v1.Embedding/Lookup"
#define SS_EMB_M_PUSH        "/shadowsync.v1.Embedding/Push"
#define SS_EMB_M_ELASTIC     "/shadowsync.v1.Embedding/Elastic"
#define SS_EMB_M_CHECKPOINT  "/shadowsync.v1.Embedding/Checkpoint"
#define SS_EMB_M_STATS       "/shadowsync.v1.Embedding/Stats"
#define SS_EMB_M_PUSH_LOOKUP "/shadowsync.v1.Embedding/PushLookup"

typedef struct ss__emb_service {
    ss__emb_store *store; /* not owned */
    ss__rpc_method methods[SS_EMB_METHODS];
} ss__emb_service;

/* Fills svc->methods (their ctx is svc) for ss__rpc_server_start. */
void ss__emb_service_init(ss__emb_service *svc, ss__emb_store *store);

#endif
