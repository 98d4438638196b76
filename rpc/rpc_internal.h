/* Shared by the rpc/ sources; not installed. */
#ifndef SS_RPC_INTERNAL_H
#define SS_RPC_INTERNAL_H

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>

#include "rpc/rpc.h"

/* Receive/send limit when none is given. Dense groups travel in chunks
 * (SS_GRPC_CHUNK_FLOATS per call, see grpc_transport.c), so this only
 * bounds a single chunk plus its envelope. */
#define SS_RPC_DEFAULT_MAX_MESSAGE (64u << 20)

/* HTTP/2 keepalive while calls are in flight: a ping after this long
 * without one, and the connection given up when its ack has not come
 * this long after. Without it a connection that lived through a network
 * partition stays "ready" to gRPC, and its calls wait on TCP's
 * retransmission backoff (0.2 s doubling: 2-6 s after a 10 s partition
 * heals). Given up, it is redialled every SS_RPC_RECONNECT_MAX_MS while the
 * partition lasts, so the first call after it heals gets through. The
 * timeout is long next to a ping's round trip on a loaded host (the
 * servers' completion-queue threads ack pings even while every handler
 * thread is parked in an MA round). */
#define SS_RPC_KEEPALIVE_MS         1000
#define SS_RPC_KEEPALIVE_TIMEOUT_MS 4000
/* The servers accept pings this close together without data between
 * them (gRPC's default is 5 minutes, then a GOAWAY after two strikes: a
 * client pinging through a long MA round would be cut off). */
#define SS_RPC_MIN_PING_INTERVAL_MS 500
#define SS_RPC_RECONNECT_MAX_MS     250

/* Credentials for tls (NULL or all-NULL = insecure). SS_ERR_IO when a PEM
 * file cannot be read, SS_ERR_INVALID_ARGUMENT for an incomplete pair. */
ss_status ss__rpc_client_credentials(const ss__rpc_tls *tls, grpc_channel_credentials **out);
ss_status ss__rpc_server_credentials(const ss__rpc_tls *tls, grpc_server_credentials **out);

#endif
