/* What the gRPC server's files share (rpc/server.c, rpc/server_reads.c):
 * a call's context and the server's state. Not for other folders. */
#ifndef SS_RPC_SERVER_INTERNAL_H
#define SS_RPC_SERVER_INTERNAL_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/metrics.h"
#include "rpc/auth.h"
#include "rpc/method_series.h"
#include "rpc/rpc.h"

/* A call's life: its metadata arrives (REQUESTED: authorized or refused
 * there, its body not read), then its message (RECEIVING), then the
 * reply is sent (REPLYING). */
typedef enum { CALL_REQUESTED, CALL_RECEIVING, CALL_REPLYING } call_state;

typedef struct call_ctx {
    ss__rpc_server *srv;
    size_t method;
    grpc_completion_queue *cq;
    call_state state;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array request_md;
    grpc_call_details details; /* GENERIC calls only */
    grpc_byte_buffer *payload;
    grpc_byte_buffer *reply_bb;
    grpc_slice status_details;
    int cancelled;
    size_t held;                   /* request bytes counted in srv->inflight */
    int peer_slot;                 /* its read counted in srv->peers[peer_slot]; -1: none */
    uint64_t arrived_ns;           /* when the call was matched (ss__now_ns) */
    struct call_ctx *next_waiting; /* its connection's queue of reads past the share */
} call_ctx;

/* In-flight reads of one client connection (gRPC's peer string), and
 * the reads past its share waiting their turn, their bodies not read. */
#define PEER_SLOTS 256
typedef struct peer_reads {
    char peer[80];
    uint32_t reads, nwaiting;
    call_ctx *first, *last; /* waiting, oldest first */
} peer_reads;

typedef struct method_slot {
    void *handle;
    ss__rpc_method_series series;
} method_slot;

struct ss__rpc_server {
    grpc_server *server;
    const ss__rpc_method *methods;
    method_slot *slots;
    size_t nmethods;
    void *ctx;
    int port;
    size_t max_message; /* larger requests: RESOURCE_EXHAUSTED, counted */
    size_t max_inflight;
    _Atomic size_t inflight; /* request bytes received, their handlers not done */
    ss__counter *too_large, *inflight_refused, *unfair_refused, *reads_waited;
    uint32_t writer_queues; /* cqs[0 .. writer_queues) serve writers; the rest readers */
    /* cqs[writer_queues .. shared_queues) serve readers; a last queue,
     * when a method is peers_only, serves those alone (peer_queue) */
    uint32_t shared_queues, peer_queue;
    uint32_t reads_per_peer; /* in flight per connection */
    pthread_mutex_t peer_lock;
    peer_reads peers[PEER_SLOTS];
    ss__gauge *inflight_bytes;
    uint32_t nthreads;
    grpc_completion_queue **cqs;
    grpc_completion_queue *shutdown_cq;
    pthread_t *threads;
    _Atomic bool shutting_down;
    _Atomic long live_calls;
    uint32_t max_blocked;
    _Atomic uint32_t blocked; /* blocking handlers running now */
    ss__counter *blocked_refused;
    const _Atomic uint64_t *map_epoch; /* NULL: no shard map */
    pthread_rwlock_t *map_gate;        /* see ss__rpc_server_config */
    ss__counter *stale_epoch;
    char auth[SS_AUTH_HEADER_MAX];      /* "" = no authorization */
    char peer_auth[SS_AUTH_HEADER_MAX]; /* the PS fleet's peer token; "" = none */
    bool mtls;                          /* client certificates are demanded */
    char writers[SS_AUTH_WRITERS_MAX];  /* "" = every verified client may write */
    ss__counter *unauthorized;
};

/* A read of a server with readers' queues takes one of its connection's
 * reads_per_peer places. */
typedef enum { READ_GOES, READ_WAITS, READ_REFUSED } read_turn;
/* READ_GOES: counted, serve it now; READ_WAITS: queued behind its
 * connection's reads in flight (it is received when one of them ends);
 * READ_REFUSED: SS_RPC_WAITING_READS_PER_PEER are waiting already. */
read_turn ss__rpc_read_turn(call_ctx *c);
/* The call's read leaves its connection's count (once); the oldest read
 * waiting on that connection takes its place and is received. */
void ss__rpc_read_done(call_ctx *c);
/* At stop: every waiting read freed. */
void ss__rpc_reads_drop_waiting(ss__rpc_server *srv);

/* server.c's, for server_reads.c: post the receipt of an admitted call's
 * message; free a call's context. */
void ss__rpc_server_receive(call_ctx *c);
void ss__rpc_server_free_call(call_ctx *c);

#endif
