/* The Embedding protocol (rpc/emb/embedding.proto): what its client
 * (rpc/emb/emb_client.c) and its server (ps/emb_service.c) must agree on
 * beyond the messages themselves. */
#ifndef SS_RPC_EMB_WIRE_H
#define SS_RPC_EMB_WIRE_H

#define SS_EMB_M_OPEN        "/shadowsync.v1.Embedding/OpenTable"
#define SS_EMB_M_LOOKUP      "/shadowsync.v1.Embedding/Lookup"
#define SS_EMB_M_PUSH        "/shadowsync.v1.Embedding/Push"
#define SS_EMB_M_ELASTIC     "/shadowsync.v1.Embedding/Elastic"
#define SS_EMB_M_CHECKPOINT  "/shadowsync.v1.Embedding/Checkpoint"
#define SS_EMB_M_STATS       "/shadowsync.v1.Embedding/Stats"
#define SS_EMB_M_PUSH_LOOKUP "/shadowsync.v1.Embedding/PushLookup"
#define SS_EMB_M_HANDOFF     "/shadowsync.v1.Embedding/Handoff"
#define SS_EMB_M_BATCH       "/shadowsync.v1.Embedding/Batch"

/* BatchCall.method: which request a call of a Batch carries. */
#define SS_EMB_BATCH_LOOKUP      1
#define SS_EMB_BATCH_PUSH        2
#define SS_EMB_BATCH_PUSH_LOOKUP 3
#define SS_EMB_BATCH_ELASTIC     4

#endif
