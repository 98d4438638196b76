/* Shared by the rpc/ sources; not installed. */
#ifndef SS_RPC_INTERNAL_H
#define SS_RPC_INTERNAL_H

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "rpc/rpc.h"

/* Receive/send limit when none is given. Dense groups travel in chunks
 * (SS_GRPC_CHUNK_FLOATS per call, see grpc_transport.c), so this only
 * bounds a single chunk plus its envelope. */
#define SS_RPC_DEFAULT_MAX_MESSAGE (64u << 20)

/* The servers accept pings this close together without data between
 * them (gRPC's default is 5 minutes, then a GOAWAY after two strikes: a
 * client pinging through a long MA round would be cut off). */
#define SS_RPC_MIN_PING_INTERVAL_MS 500
#define SS_RPC_RECONNECT_MAX_MS     250
/* The least time one connection attempt gets (gRPC core's "min
 * reconnect backoff" is its minimum connect timeout): room for a far PS
 * and a slow TLS handshake, while an attempt whose SYN a partition lost
 * is still started again within 2 s of the link coming back. */
#define SS_RPC_MIN_CONNECT_MS 2000

/* What a call routed by another epoch is told, by the gRPC server and on
 * a bulk stream alike (rpc.h SS_RPC_STALE_EPOCH is the part a client
 * looks for): the method's path, the call's epoch, the server's. */
#define SS_RPC_STALE_EPOCH_TEXT                                                                    \
    "%s was routed by " SS_RPC_STALE_EPOCH " %llu; this server serves epoch %llu: reload "         \
    "the shard map (SHADOWSYNC_SHARD_MAP) and route again"

/* Runs m's handler (with m->ctx, else ctx) for a call routed by the shard
 * map's epoch `routed` (when by_map) on a server that serves *map_epoch
 * (NULL: no map), as both servers do: a call of another epoch is refused,
 * saying both (SS_RPC_STALE_EPOCH_TEXT); a non-blocking handler runs
 * under map_gate, so that the map does not move meanwhile. A blocking
 * call is checked here only when check_blocking (the gRPC server checks
 * it at its door). false: refused for its epoch. */
bool ss__rpc_run_routed(const ss__rpc_method *m, void *ctx, const _Atomic uint64_t *map_epoch,
                        pthread_rwlock_t *map_gate, bool by_map, uint64_t routed,
                        bool check_blocking, const uint8_t *req, size_t len, ss__rpc_reply *reply);

/* Credentials for tls (NULL or all-NULL = insecure). SS_ERR_IO when a PEM
 * file cannot be read, SS_ERR_INVALID_ARGUMENT for an incomplete pair;
 * why names the file and the error. */
ss_status ss__rpc_client_credentials(const ss__rpc_tls *tls, grpc_channel_credentials **out,
                                     char *why, size_t whylen);
ss_status ss__rpc_server_credentials(const ss__rpc_tls *tls, grpc_server_credentials **out,
                                     char *why, size_t whylen);

#endif
