/* The trainer side of the Embedding service (internal to trainer-hooks):
 * channels to the S shards, rows routed by ss_emb_shard_of, one call per
 * shard (cut into chunks of at most SS_EMB_CLIENT_CHUNK ids) all in flight
 * at once. Ids passed here must be distinct (callers deduplicate). A
 * chunk stays within every server limit of at least 4096 ids. */
#ifndef SS_EMB_CLIENT_H
#define SS_EMB_CLIENT_H

#include "shadowsync/emb_table.h"
#include "shadowsync/rpc.h"

#define SS_EMB_CLIENT_CHUNK 4096

typedef struct ss_emb_client ss_emb_client;

ss_status ss_emb_client_create(const char *targets, const ss_rpc_tls *tls, uint32_t timeout_ms,
                               ss_emb_client **out);
void ss_emb_client_destroy(ss_emb_client *c);

/* OpenTable on every shard; *stored gets the shards' spec. */
ss_status ss_emb_client_open_table(ss_emb_client *c, const ss_emb_spec *spec, ss_emb_spec *stored,
                                   char *why, size_t whylen);
/* rows: n * dim out. */
ss_status ss_emb_client_lookup(ss_emb_client *c, const ss_emb_spec *spec, const uint64_t *ids,
                               size_t n, float *rows);
ss_status ss_emb_client_push(ss_emb_client *c, const ss_emb_spec *spec, const uint64_t *ids,
                             size_t n, const float *grads);
/* x: n * dim in; deltas: n * dim out. */
ss_status ss_emb_client_elastic(ss_emb_client *c, const ss_emb_spec *spec, const uint64_t *ids,
                                size_t n, const float *x, float alpha, float *deltas);

#endif
