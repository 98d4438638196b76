/* The trainer side of the Embedding service (internal to trainer-hooks):
 * channels to the S shards, rows routed by ss__emb_shard_of, one call per
 * shard (cut into chunks of at most SS_EMB_CLIENT_CHUNK ids) all in flight
 * at once. Ids passed here must be distinct (callers deduplicate). A
 * chunk stays within every server limit of at least 4096 ids. */
#ifndef SS_EMB_CLIENT_H
#define SS_EMB_CLIENT_H

#include "embedding-store/emb_table.h"
#include "rpc/rpc.h"
#include "shadow/codec.h"

#define SS_EMB_CLIENT_CHUNK 4096
/* With streams on (ss__emb_client_use_bulk), smaller: the PS looks up or
 * applies one chunk while the next crosses the socket. Batches of 4,096
 * (shadowsync-bench-emb, alternating builds): lookups 0.46-0.76 of the
 * in-process store in chunks of 2,048 against 0.40-0.56 in one call,
 * pushes 0.40-0.70 against 0.37-0.46; 512 was slower than either. */
#define SS_EMB_BULK_CHUNK 2048

typedef struct ss__emb_client ss__emb_client;

ss_status ss__emb_client_create(const char *targets, const ss__rpc_tls *tls, uint32_t timeout_ms,
                                ss__emb_client **out, char *why, size_t whylen);
void ss__emb_client_destroy(ss__emb_client *c);
/* The shard map epoch every call carries (ss__rpc_channel_set_epoch). */
void ss__emb_client_set_epoch(ss__emb_client *c, uint64_t epoch);
/* Routes by the shard map at path (common/shard_map.h) when the servers
 * move on: a call refused for its epoch makes the client read the map
 * again, open its channels to the new list (and every table it opened on
 * them) and send the refused part again, until it goes through or the
 * client's timeout passes. Only refused parts go again: a row is never
 * updated twice. */
ss_status ss__emb_client_follow_map(ss__emb_client *c, const char *path);
/* The channels' calls on the shards' bulk streams from now on (on) or
 * gRPC only (rpc.h ss__rpc_channel_set_streams): lookups, pushes and
 * push-lookups, the methods a PS streams; a shard whose PS has no bulk
 * port gets them over gRPC, as do Elastic and OpenTable. Same bounds,
 * checks and replies as over gRPC: the PS runs the same handlers. */
ss_status ss__emb_client_use_bulk(ss__emb_client *c, bool on);
/* Batches of calls that went on bulk streams so far. */
uint64_t ss__emb_client_bulk_batches(ss__emb_client *c);

/* OpenTable on every shard; *stored gets the shards' spec. */
ss_status ss__emb_client_open_table(ss__emb_client *c, const ss__emb_spec *spec,
                                    ss__emb_spec *stored, char *why, size_t whylen);
/* rows: n * dim out. A lookup that failed with SS_ERR_IO (a connection
 * lost mid-call, a shard that could not reach another) is made again, up
 * to 3 times within the client's timeout; pushes never are. */
ss_status ss__emb_client_lookup(ss__emb_client *c, const ss__emb_spec *spec, const uint64_t *ids,
                                size_t n, float *rows);
/* Each shard checks and applies its calls (chunks) on its own: a push
 * refused for one (a non-finite gradient, a limit) may have been applied
 * by the others. Callers that want all or nothing check first, as the
 * trainer's tables do (trainer-hooks/tables.c). */
ss_status ss__emb_client_push(ss__emb_client *c, const ss__emb_spec *spec, const uint64_t *ids,
                              size_t n, const float *grads);
/* A push of pn rows and a lookup of n rows (rows: n * dim out) in one
 * call per shard and chunk: the shards apply the push first. On an error
 * the push may have been applied on some shards and not others, as with
 * ss__emb_client_push. */
ss_status ss__emb_client_push_lookup(ss__emb_client *c, const ss__emb_spec *spec,
                                     const uint64_t *push_ids, size_t pn, const float *grads,
                                     const uint64_t *ids, size_t n, float *rows);
/* One table's part of a batch (ss__emb_client_batch): a push of pn rows
 * (push_ids, grads; pn 0: none), applied first, and a lookup of n rows
 * (ids; rows: n * dim out; n 0: none); or, with x, an elastic sync of the
 * n rows x (rows: their deltas out, as ss__emb_client_elastic). Ids
 * distinct within each. status and why say how the part went (set by
 * the call). */
typedef struct ss__emb_batch_part {
    const ss__emb_spec *spec;
    const uint64_t *push_ids;
    size_t pn;
    const float *grads;
    const uint64_t *ids;
    size_t n;
    float *rows;
    const float *x;
    float alpha;
    ss__encoding enc;
    ss_status status;
    char why[200];
} ss__emb_batch_part;

/* True when c can carry a batch for a table whose own client is other:
 * the same shards, no shard map followed (a call routed by an old map is
 * refused whole and goes again table by table, which a batch that pushes
 * cannot), no bulk streams. */
bool ss__emb_client_batches_with(ss__emb_client *c, ss__emb_client *other);
/* Every part at once, each shard's share of every table in one call to
 * it (a Batch: the shard runs each part as its Lookup, Push or PushLookup
 * handler would), all shards' calls in flight together: one round trip
 * for a model's tables instead of one per table. SS_OK when every part
 * went through, else the first part's failure (each part's status says
 * which; a push that failed on one shard may have been applied on the
 * others, as with ss__emb_client_push). A part of more than
 * SS_EMB_CLIENT_CHUNK ids (either kind) is refused (SS_ERR_TOO_LARGE)
 * before anything is sent: send it alone. */
ss_status ss__emb_client_batch(ss__emb_client *c, ss__emb_batch_part *parts, size_t nparts);

/* x: n * dim in; deltas: n * dim out. enc: how rows go out and deltas
 * come back (shadow/codec.h; SS_ENC_F32 plain): each shard moves its
 * centre row by the decoded delta it sends, so x + c stays conserved. */
ss_status ss__emb_client_elastic(ss__emb_client *c, const ss__emb_spec *spec, const uint64_t *ids,
                                 size_t n, const float *x, float alpha, ss__encoding enc,
                                 float *deltas);

#endif
