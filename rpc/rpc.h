/* gRPC-core helpers: a unary-call server framework and a client channel.
 *
 * Server: one completion queue and thread per worker; each registered
 * method keeps requests pre-posted on every queue; a call's payload
 * arrives with it, the handler turns request bytes into reply bytes and a
 * status. Handlers marked `blocking` (e.g. a round that waits for other
 * members) run on a thread of their own so they never stall a queue.
 * Calls whose deadline has passed are answered DEADLINE_EXCEEDED without
 * running the handler. Shutdown follows rpc/../shared notes: stop
 * re-arming, shutdown_and_notify, cancel all calls, wait for the tag and
 * for every live call context, destroy the server, drain the queues.
 *
 * Errors carry the ss_status name in the status message ("ss=non_finite:
 * ..."), so a client gets the exact ss_status back (ss__rpc_call). */
#ifndef SHADOWSYNC_RPC_H
#define SHADOWSYNC_RPC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/metrics.h"
#include "shadowsync/status.h"

typedef struct ss__rpc_server ss__rpc_server;

/* What a handler returns: status (SS_OK or an error with a message) and,
 * on success, reply bytes malloc'd by the handler (freed by the server). */
typedef struct ss__rpc_reply {
    ss_status status;
    char message[512];
    uint8_t *data;
    size_t len;
    /* Optional: the malloc'd block data points into (a reply built with
     * its header in front of aligned floats); freed instead of data. */
    void *data_block;
} ss__rpc_reply;

typedef void (*ss__rpc_handler)(void *ctx, const uint8_t *req, size_t len, ss__rpc_reply *reply);

/* A handler's refusal: status st and the message, printf-style. */
void ss__rpc_reply_fail(ss__rpc_reply *r, ss_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

struct ss__rpc_request_type; /* rpc/rpc_pb.h */

/* A method is raw (handler gets the request's bytes) or typed (request
 * names its message: the server unpacks it and the handler gets the
 * message; handler is then NULL). */
typedef struct ss__rpc_method {
    const char *path; /* "/package.Service/Method" */
    ss__rpc_handler handler;
    bool blocking;
    void *ctx; /* handler's ctx; NULL = the server's (one server, several services) */
    /* May a client certificate outside --tls-writers call it? (Every
     * method needs the token when the server has one.) */
    bool read_only;
    /* Largest request message; larger ones are refused, counted. 0 = the
     * server's max_message_bytes. (A Join is bytes, a chunk its floats.) */
    size_t max_request;
    const struct ss__rpc_request_type *request; /* typed: its request; NULL: raw */
    /* Only the PS of the fleet may call it (rows moving between shards):
     * the call must carry the server's peer token (peer_auth_header) in
     * SS_RPC_PEER_KEY metadata, besides the token; a server with a token
     * or mutual TLS but no peer token refuses it. */
    bool peers_only;
    /* Served on the bulk stream too (rpc/bulk/bulk.h), when the server has
     * one: a caller's call layer sends it there once the server's ticket
     * names it (the large requests and replies: dense chunks, rows). */
    bool streamed;
} ss__rpc_method;

/* The metadata key of the PS fleet's peer token ("Bearer <token>"), a
 * credential of the PS alone, apart from the trainers' token. */
#define SS_RPC_PEER_KEY "shadowsync-peer"

/* Runs method m on a request: its handler, or for a typed method its
 * request unpacked (rpc/rpc_pb.h). ctx: m->ctx, else server_ctx. */
void ss__rpc_method_run(const ss__rpc_method *m, void *server_ctx, const uint8_t *req, size_t len,
                        ss__rpc_reply *reply);

/* TLS from PEM files, on either side. Server: cert_file + key_file are
 * required; ca_file makes it demand and verify client certificates
 * (mutual TLS). Client: ca_file verifies the server (NULL: system roots);
 * cert_file + key_file present a client certificate. All NULL / a NULL
 * pointer to this struct = plain TCP. */
typedef struct ss__rpc_tls {
    const char *ca_file;
    const char *cert_file;
    const char *key_file;
} ss__rpc_tls;

typedef struct ss__rpc_server_config {
    const char *listen;       /* "127.0.0.1:0" picks a free port */
    uint32_t threads;         /* completion-queue threads, >= 1 */
    size_t max_message_bytes; /* receive limit; larger messages: RESOURCE_EXHAUSTED */
    ss__metrics *metrics;     /* optional: shadowsync_rpc_requests_total{method,result} */
    const ss__rpc_tls *tls;   /* optional */
    /* Blocking handlers (a round waiting for its members) each hold a
     * thread; past this many at once a call is refused at once with
     * SS_ERR_TOO_LARGE (RESOURCE_EXHAUSTED) and counted in
     * shadowsync_rpc_blocked_refused_total. 0 = SS_RPC_DEFAULT_MAX_BLOCKED. */
    uint32_t max_blocked_calls;
    /* "Bearer <token>" (rpc/auth.h): every call must carry it as its
     * authorization metadata, else PERMISSION_DENIED, counted in
     * shadowsync_rpc_unauthorized_total. It is checked on the call's
     * metadata, before the request's body is read: a refused client never
     * makes the server buffer its message. NULL or "" = no check. */
    const char *auth_header;
    /* Request bytes the server holds at once (received, their handlers
     * not yet done); a call that would pass it is refused
     * (RESOURCE_EXHAUSTED), counted. 0 = SS_RPC_DEFAULT_MAX_INFLIGHT. */
    size_t max_inflight_bytes;
    /* Calls of read_only methods (bulk reads: Lookup, ReadCentral) run on
     * completion queues and threads of their own, as many as `threads`,
     * so that writers (trainers' exchanges and rounds) never queue behind
     * them; and one client connection may have this many of them in
     * flight at once (its fair share); the next SS_RPC_WAITING_READS_PER_PEER
     * wait their turn (counted), and past those a read is refused at the
     * door (RESOURCE_EXHAUSTED, counted). 0 = SS_RPC_DEFAULT_READS_PER_PEER. */
    uint32_t reads_per_peer;
    /* The shard map's epoch this server serves, read at every call (it may
     * change while serving): a call routed by another (metadata
     * SS_RPC_EPOCH_KEY) is refused at the door, SS_ERR_STATE
     * (FAILED_PRECONDITION), saying both epochs, and counted in
     * shadowsync_rpc_stale_epoch_total; a call without one is served.
     * NULL, or 0 in it: no map. */
    const _Atomic uint64_t *map_epoch;
    /* Held for reading around the handler of every call that carries an
     * epoch (blocking handlers excepted), the epoch checked again under
     * it; whoever changes *map_epoch holds it for writing, so that once
     * the change is made no call routed by the old epoch is still being
     * served (rows can then move: ps/row_moves.h). NULL: none. */
    pthread_rwlock_t *map_gate;
    /* Mutual TLS (tls->ca_file): the client certificate identities that may
     * call methods not read_only, comma-separated (rpc/auth.h); other
     * verified clients are read-only: PERMISSION_DENIED, counted in
     * shadowsync_rpc_unauthorized_total. NULL or "" = every verified
     * client may. */
    const char *tls_writers;
    /* "Bearer <peer token>" (rpc/auth.h; --peer-token-file): what
     * peers_only methods need. NULL or "" = none. */
    const char *peer_auth_header;
} ss__rpc_server_config;

/* A member's MA round keeps up to SS_GRPC_ROUND_WINDOW (8) chunk calls
 * waiting at a PS, so 64 members of a 1M-float group on one PS park 512;
 * 1024 leaves room for twice that (a parked thread costs its stack, mostly
 * untouched). */
#define SS_RPC_DEFAULT_MAX_BLOCKED 1024
/* The limit of a request that carries names and numbers, no floats or
 * ids (a Join, a Leave, a Heartbeat, a Checkpoint): bytes, not megabytes. */
#define SS_RPC_SMALL_REQUEST 4096
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

/* A trainer's remote table has a lookup and a prefetch in flight. */
#define SS_RPC_DEFAULT_READS_PER_PEER 4
/* Reads of one connection past its share that wait their turn (their
 * messages not read); past these a read is refused. */
#define SS_RPC_WAITING_READS_PER_PEER 256
/* 1 GiB: 512 parked 512 KiB round chunks take a quarter of it. */
#define SS_RPC_DEFAULT_MAX_INFLIGHT ((size_t)1 << 30)

/* Binds and starts serving. methods must outlive the server. On a
 * failure, why (may be NULL) says it in words: the address and the
 * system's reason ("address already in use"), or the PEM file that could
 * not be read; "" when there is nothing more to say than the status. */
ss_status ss__rpc_server_start(const ss__rpc_server_config *cfg, const ss__rpc_method *methods,
                               size_t nmethods, void *ctx, ss__rpc_server **out, char *why,
                               size_t whylen);
int ss__rpc_server_port(const ss__rpc_server *srv);
/* Graceful shutdown; waits for calls in flight. */
void ss__rpc_server_stop(ss__rpc_server *srv);
/* Inside a handler the gRPC server runs: the caller's address without
 * its port ("127.0.0.1", "::1"), what a server budgets per client by
 * (a connection's port changes when it redials). false elsewhere, or
 * when gRPC gives no peer. */
bool ss__rpc_current_peer_host(char *out, size_t outlen);

typedef struct ss__rpc_channel ss__rpc_channel;

/* tls: optional (NULL = plain TCP). SS_ERR_IO when a PEM file cannot be
 * read (why says which and why). */
ss_status ss__rpc_channel_create(const char *target, size_t max_message_bytes,
                                 const ss__rpc_tls *tls, ss__rpc_channel **out, char *why,
                                 size_t whylen);
/* Sends the PS fleet's peer token ("Bearer <token>") with every call of
 * ch from now on (SS_RPC_PEER_KEY): a PS's channels to other PS. Set it
 * before the channel is shared. */
void ss__rpc_channel_set_peer_auth(ss__rpc_channel *ch, const char *header);
void ss__rpc_channel_destroy(ss__rpc_channel *ch);

/* The shard map's epoch (common/shard_map.h) this channel's calls are
 * routed by: each carries it as metadata SS_RPC_EPOCH_KEY; a server with
 * another refuses the call (SS_ERR_STATE, FAILED_PRECONDITION) saying
 * both. 0: none (never refused for it). */
#define SS_RPC_EPOCH_KEY "x-shadowsync-epoch"
/* In the message of a call refused for its epoch: a client that routes
 * by a map file reads it again and routes the call again. */
#define SS_RPC_STALE_EPOCH "shard map epoch"
/* Whether a failed call (its status and message) was refused for the
 * shard map epoch it carried: the caller routes again. */
bool ss__rpc_refused_for_epoch(ss_status st, const char *msg);
void ss__rpc_channel_set_epoch(ss__rpc_channel *ch, uint64_t epoch);

/* Calls of ch on its server's bulk streams (rpc/bulk/bulk_link.h) from
 * now on, for the methods the server streams, when it has a bulk port;
 * off: gRPC only (the default of a new channel). */
void ss__rpc_channel_set_streams(ss__rpc_channel *ch, bool on);
/* Batches of ch's calls that ran on streams so far. */
uint64_t ss__rpc_channel_stream_batches(const ss__rpc_channel *ch);

/* Whether a TCP connection to address ("host:port", "[ipv6]:port") can
 * be made within timeout_ms: false with why ("connection refused", "no
 * answer within 2000 ms", "no such host"). Addresses of another form
 * (gRPC URIs) are not probed: true. */
bool ss__tcp_reachable(const char *address, uint32_t timeout_ms, char *why, size_t whylen);
/* A TCP connection to address ("host:port", "[ipv6]:port") made within
 * timeout_ms (signals meanwhile do not end the wait): the blocking socket,
 * or -1 with why as ss__tcp_reachable says it. */
int ss__tcp_connect(const char *address, uint32_t timeout_ms, char *why, size_t whylen);
/* Liveness for a long-lived TCP connection outside gRPC (a bulk stream),
 * as gRPC's keepalive gives its own (SS_RPC_KEEPALIVE_MS, _TIMEOUT_MS):
 * probes after that much silence, and the connection given up when data
 * or probes go unacknowledged that long, so that a call on it fails
 * within seconds of a partition, not at its deadline, and a stream left
 * through one is not used again. */
void ss__tcp_keepalive(int fd);
/* A socket listening on address (port 0: the system picks one, said in
 * *port), or -1 with why (the system's reason). */
int ss__tcp_listen(const char *address, int *port, char *why, size_t whylen);

/* Whether ch's server can be reached: a READY channel is; otherwise
 * ss__tcp_reachable on its target, tried every 100 ms for timeout_ms
 * (a server may be starting beside its clients). SS_ERR_IO when not, and
 * ss__rpc_last_failure() says "cannot reach <who> at <target> (<why>)". */
ss_status ss__rpc_channel_reachable(ss__rpc_channel *ch, const char *who, uint32_t timeout_ms);

/* One unary call with a deadline. On SS_OK *resp (malloc'd, caller frees)
 * holds the reply. Otherwise the server's or the transport's error, with
 * its text in msg when given. wait_for_ready: wait for the server to come
 * up until the deadline instead of failing fast. */
/* What the server said when it last refused a call made from this thread
 * ("" when none since ss__rpc_clear_failure): for a caller's error
 * message. Calls completed on another thread set that thread's. */
const char *ss__rpc_last_failure(void);
void ss__rpc_clear_failure(void);

ss_status ss__rpc_call(ss__rpc_channel *ch, const char *method, const uint8_t *req, size_t len,
                       uint32_t timeout_ms, bool wait_for_ready, uint8_t **resp, size_t *resp_len,
                       char *msg, size_t msglen);

/* A received message read where gRPC keeps it (its slices), without
 * gathering it into one buffer first (rpc/message.c). */
typedef struct ss__rpc_message ss__rpc_message;
size_t ss__rpc_message_length(const ss__rpc_message *m);
/* Copies bytes [off, off + len) of m into dst; false when they are not all
 * inside m. */
bool ss__rpc_message_copy(const ss__rpc_message *m, size_t off, void *dst, size_t len);

struct ss__rpc_request;
/* Called with a call's reply as soon as it arrives, while the other calls
 * of its batch may still be in flight; returns the call's status. */
typedef ss_status (*ss__rpc_on_reply)(struct ss__rpc_request *rq, const ss__rpc_message *reply,
                                      void *arg);

/* One call of a batch: in fields set by the caller, out fields by
 * ss__rpc_call_many. */
typedef struct ss__rpc_request {
    ss__rpc_channel *ch;
    const char *method;
    const uint8_t *req;
    size_t len;
    /* Optional: bytes sent right after req, from where they lie (no copy;
     * they outlive the call): a bulk payload (rpc/pb_wire.h). */
    const uint8_t *payload;
    size_t payload_len;
    /* Optional: reads the reply from gRPC's slices (no copy into resp,
     * which stays NULL); runs in the thread of ss__rpc_call_many. */
    ss__rpc_on_reply on_reply;
    void *on_reply_arg;
    /* Optional, on a bulk stream only (rpc/bulk/bulk.h): a reply that ends in
     * bytes field into_field of exactly into_len bytes has them read from
     * the socket straight into `into`, and on_reply is not called; any
     * other reply takes the way above. One copy less: the rows of a
     * lookup whose ids are one run of the caller's. */
    void *into;
    size_t into_len;
    uint32_t into_field;
    /* The server holds the reply until other callers' calls come (an MA
     * round's): on streams, each such call of a batch gets its own, so
     * that they all wait at once (rpc/bulk/bulk_link.h). */
    bool waits;
    ss_status status; /* out */
    uint8_t *resp;    /* out: malloc'd reply of this call when it succeeded (kept even
                         when others failed: a partial fan-out can use what arrived) */
    size_t resp_len;  /* out */
    char msg[400];    /* out: the error text of a failed call */
} ss__rpc_request;

/* Runs n unary calls at once (one deadline for all) and waits for every
 * one. Returns the first failed call's status; each call has its own
 * status and, when it succeeded, its reply (the caller frees every resp). */
ss_status ss__rpc_call_many(ss__rpc_request *calls, size_t n, uint32_t timeout_ms,
                            bool wait_for_ready);

/* ss__rpc_call_many with at most `window` calls in flight per channel (0:
 * all at once); the next call on a channel starts when one of its calls
 * ends. Calls on one channel start in their order in `calls`. A window
 * keeps both directions of a connection busy: the server answers early
 * chunks while later ones are still being sent, instead of every call
 * finishing its upload at the end, interleaved with all the others. */
ss_status ss__rpc_call_windowed(ss__rpc_request *calls, size_t n, uint32_t timeout_ms,
                                bool wait_for_ready, uint32_t window);

/* What a batch's timing says about the path (for an adaptive window):
 * when its large calls (64 KiB or more sent) that succeeded ended, and over
 * how many channels the batch ran. */
typedef struct ss__rpc_batch_stats {
    size_t channels;
    size_t large_ok;
    uint64_t first_end_ns, last_end_ns; /* ss__now_ns() clock */
} ss__rpc_batch_stats;

/* ss__rpc_call_windowed that also fills *stats (optional). */
ss_status ss__rpc_call_windowed_stats(ss__rpc_request *calls, size_t n, uint32_t timeout_ms,
                                      bool wait_for_ready, uint32_t window,
                                      ss__rpc_batch_stats *stats);

/* The shortest round trip seen on ch: the quickest call whose request and
 * reply were both at most 4 KiB (a Join, a heartbeat), in nanoseconds,
 * from start to reply; 0 before any. */
uint64_t ss__rpc_channel_rtt_ns(const ss__rpc_channel *ch);

/* Brings gRPC up/down (reference counted by gRPC itself); every channel and
 * server of ours goes through these. At exit, once ours are all closed, the
 * process waits (at most 5 s) for the clean-up gRPC finishes on a thread of
 * its own, so OpenSSL is not torn down under it (library.c). */
void ss__rpc_init(void);
void ss__rpc_shutdown(void);

#endif
