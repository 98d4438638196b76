/* What the Embedding client's files share (emb_client.c: the calls of
 * one table; emb_batch.c: several tables' calls in one). Private to
 * rpc/emb/. */
#ifndef SS_EMB_CLIENT_INTERNAL_H
#define SS_EMB_CLIENT_INTERNAL_H

#include <pthread.h>

#include "rpc/emb/emb_client.h"

#define MAX_SHARDS 64

#define MAX_OPENED 64

struct ss__emb_client {
    pthread_rwlock_t lock; /* the channels: calls read them, a re-route replaces them */
    ss__rpc_channel *ch[MAX_SHARDS];
    uint32_t shards;
    uint32_t timeout_ms;
    uint64_t epoch;
    char tls_ca[4096], tls_cert[4096], tls_key[4096]; /* copies: channels are made again */
    char map[4096];                                   /* the shard map routed by; "" = none */
    char targets[4096];                               /* the channels' list */
    bool streams; /* the channels' calls on bulk streams (rpc.h ss__rpc_channel_set_streams) */
    ss__emb_spec opened[MAX_OPENED]; /* opened again on the shards of a new map */
    size_t nopened;
};

#endif
