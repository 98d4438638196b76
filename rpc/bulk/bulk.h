/* The bulk path: unary calls of a method on a TCP stream (TLS when configured) beside
 * gRPC, for the large requests and replies of dense sync and embedding rows: gRPC's own
 * calls and copies cost a large share of what a socket moves.
 *
 * A call's bytes are its method's protobuf request and reply, exactly as
 * over gRPC, and the server runs the method's own handler: a request's
 * size bounds, finiteness and state checks are the method's, and the
 * gRPC path stays what a black-box .proto client speaks. What the stream
 * adds:
 *  - a ticket: the client asks for one over gRPC (a call through the
 *    server's door: its token, its writer certificate), then opens the
 *    stream with it. The server reads nothing from a stream but its first
 *    SS_BULK_TICKET_BYTES, and closes it unless they are a ticket it gave
 *    out in the last SS_BULK_TICKET_TTL_S seconds and nobody used yet;
 *    the TLS handshake and the ticket have a few seconds in all. Once it
 *    has taken the ticket the server says so (SS_BULK_OPENED_BYTES: the
 *    magic), and the client sends no call before that: a stream closed
 *    for want of room (too many connections waiting for their ticket
 *    from one address) fails to open, never with a call on it.
 *  - frames, little-endian:
 *      request: u32 SS_BULK_MAGIC, u32 path length, u64 length, then the
 *               method's path (as over gRPC), then the bytes
 *      reply:   u32 SS_BULK_MAGIC, u32 status, u32 message length,
 *               u64 length, then the message, then the bytes
 *    A request naming a method the stream does not serve, or longer than
 *    its method's limit, closes the stream before its bytes are read.
 *  - the shard map's epoch: a ticket is given for the epoch its call was
 *    routed by (0: none), and a stream lives in that epoch: once the
 *    server serves another, each of the stream's calls is refused as the
 *    gRPC door refuses a call routed by an old map (the same status and
 *    message), and the client opens a new stream for the new epoch.
 *  - TLS when TLS is configured (bulk_conn.h): the server's streams with
 *    its gRPC certificate (and, with a CA, a client certificate signed
 *    by it), a client's verifying the server's name as its channel does.
 * A stream carries its calls in order: the client sends a batch's
 * requests back to back from one thread while another reads the replies
 * as they come, so both directions stay busy. */
#ifndef SS_RPC_BULK_H
#define SS_RPC_BULK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rpc/bulk/bulk_conn.h"
#include "rpc/rpc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_BULK_MAGIC        0x32425353u /* "SSB2" */
#define SS_BULK_TICKET_BYTES 16
#define SS_BULK_TICKET_TTL_S 30
#define SS_BULK_OPENED_BYTES 4 /* the server's word that it took the ticket */
#define SS_BULK_REQ_HEAD     16
#define SS_BULK_REPLY_HEAD   20
#define SS_BULK_MESSAGE_MAX  511 /* a reply's message, as ss__rpc_reply's */
#define SS_BULK_PATH_MAX     128 /* a method's path in a request frame */
/* The gRPC method that gives tickets (rpc/bulk/bulk.proto). */
#define SS_BULK_M_TICKET "/shadowsync.v1.Bulk/Ticket"

/* ---- frames (pure functions: the fuzz target's) ---- */

/* The server's word that it took a stream's ticket, and whether in is it. */
void ss__bulk_opened(uint8_t out[SS_BULK_OPENED_BYTES]);
bool ss__bulk_opened_parse(const uint8_t in[SS_BULK_OPENED_BYTES]);
void ss__bulk_request_head(uint8_t out[SS_BULK_REQ_HEAD], uint32_t path_len, uint64_t len);
/* SS_OK when in is a request head whose path is 1 to SS_BULK_PATH_MAX
 * bytes long (*path_len; the path follows the head) and whose length is
 * at most max_len (the largest limit of the stream's methods; the
 * method's own is checked once its path is read); SS_ERR_PARSE
 * otherwise. */
ss_status ss__bulk_request_parse(const uint8_t in[SS_BULK_REQ_HEAD], uint64_t max_len,
                                 uint32_t *path_len, uint64_t *len);
void ss__bulk_reply_head(uint8_t out[SS_BULK_REPLY_HEAD], ss_status status, uint32_t msg_len,
                         uint64_t len);
/* SS_OK when in is a reply head with a known status, a message of at most
 * SS_BULK_MESSAGE_MAX bytes and a length of at most max_len. */
ss_status ss__bulk_reply_parse(const uint8_t in[SS_BULK_REPLY_HEAD], uint64_t max_len,
                               ss_status *status, uint32_t *msg_len, uint64_t *len);

/* ---- the server ---- */

typedef struct ss__bulk_server ss__bulk_server;

typedef struct ss__bulk_server_config {
    const char *listen; /* host:port (port 0: the system picks one) */
    /* streams served at once (0 and most: 1024, and at most half the soft
     * RLIMIT_NOFILE); more are closed at once, as are connections past
     * the few that may wait for their ticket (in all, and per source) */
    uint32_t max_streams;
    size_t max_message; /* a method's limit when its max_request is 0 */
    /* request bytes held at once over all streams, counted as they
     * arrive (0: no bound beyond max_streams x the limits); a request
     * past it closes its stream */
    size_t max_inflight_bytes;
    /* The shard map's epoch the server serves and the gate around calls
     * of an epoch, as the gRPC server's (rpc.h ss__rpc_server_config):
     * the same for both servers of a process. NULL: no map. */
    const _Atomic uint64_t *map_epoch;
    pthread_rwlock_t *map_gate;
    /* optional: shadowsync_bulk_streams_total{result="opened|refused"},
     * and each method's calls in the gRPC server's per-method series
     * (rpc/method_series.h) with transport="bulk" */
    struct ss__metrics *metrics;
    /* optional: TLS on every stream, from the gRPC server's own PEM files
     * (with a CA, each client shows a certificate signed by it) */
    const ss__rpc_tls *tls;
} ss__bulk_server_config;

/* Serves the methods of the table marked streamed (rpc.h ss__rpc_method;
 * the same table the gRPC server serves), each frame naming its method
 * by path, each handler with its ctx or else ctx. A thread accepts; each
 * stream has a thread of its own. SS_ERR_INVALID_ARGUMENT when no method
 * is streamed; SS_ERR_IO with why (the address, the system's reason)
 * when it cannot listen. */
ss_status ss__bulk_server_start(const ss__bulk_server_config *cfg, const ss__rpc_method *methods,
                                size_t nmethods, void *ctx, ss__bulk_server **out, char *why,
                                size_t whylen);
int ss__bulk_server_port(const ss__bulk_server *s);
/* The gRPC method that gives s's tickets (SS_BULK_M_TICKET: one for the
 * caller's host, the port, the streamed paths), for the gRPC server's
 * table beside the methods s serves. */
ss__rpc_method ss__bulk_server_ticket_method(ss__bulk_server *s);
/* The most paths a ticket's reply names. */
#define SS_BULK_MAX_METHODS 16
/* A new ticket for one stream whose calls are routed by the shard map's
 * epoch (0: by none), given to writer (the caller's address: a writer
 * holds at most a few live tickets, its oldest given up for a new one;
 * when all are out, the oldest of all goes). SS_ERR_IO: no randomness. */
ss_status ss__bulk_server_ticket(ss__bulk_server *s, uint64_t epoch, const char *writer,
                                 uint8_t ticket[SS_BULK_TICKET_BYTES]);
/* Streams closed so far for their ticket, a frame, a deadline or want of
 * room. */
uint64_t ss__bulk_server_refused(const ss__bulk_server *s);
/* Times the acceptor waited for a file descriptor (EMFILE) so far. */
uint64_t ss__bulk_server_backoffs(const ss__bulk_server *s);
/* Stops accepting, ends every stream (a call in a handler finishes
 * first) and frees the server. */
void ss__bulk_server_stop(ss__bulk_server *s);

/* ---- the client ---- */

typedef struct ss__bulk_stream ss__bulk_stream;

/* Connects to host:port (over TLS with tls, a client's context from
 * bulk_conn.h; NULL: plain TCP), presents the ticket and waits for the
 * server to take it (ss__bulk_opened). timeout_ms
 * bounds the connect and handshake and, later, each wait for the peer's
 * bytes; max_reply bounds a reply's bytes (a longer one breaks the stream
 * before anything is allocated for it), as a gRPC channel's largest
 * message does. SS_ERR_IO with why on failure. */
ss_status ss__bulk_stream_open(const char *host, unsigned port, const ss__bulk_tls *tls,
                               const uint8_t ticket[SS_BULK_TICKET_BYTES], uint32_t timeout_ms,
                               size_t max_reply, ss__bulk_stream **out, char *why, size_t whylen);
void ss__bulk_stream_close(ss__bulk_stream *b);
/* Whether an idle stream's peer is still there: false once it closed or
 * reset it (a PS that restarted), without reading anything. */
bool ss__bulk_stream_alive(const ss__bulk_stream *b);
/* Each wait for the peer's bytes from now on bounded by timeout_ms (0:
 * none): a batch's deadline. */
void ss__bulk_stream_set_timeout(ss__bulk_stream *b, uint32_t timeout_ms);
/* A stream over a connected socket whose ticket was taken (the fuzz
 * target's); the stream owns fd from now on. */
ss_status ss__bulk_stream_wrap(int fd, size_t max_reply, ss__bulk_stream **out);
/* The calls rq[i] with rq[i].ch == ch, each as its own method (its
 * path); of those, the lane-th of every `lanes` (so that several streams
 * to one server share a batch: lanes 0 and 1 of 2 take every other call).
 * Each request is req then payload (as over gRPC); each reply goes to
 * rq[i].into (its trailing field, when the reply is shaped so), else to
 * rq[i].on_reply (read from one buffer) or into rq[i].resp. The caller's
 * thread sends what the socket takes; a writer thread sends the rest
 * while the caller reads the replies (no thread when all fit). Every such
 * call gets its status and message. Returns the first failure; a broken
 * stream fails the calls not answered yet (SS_ERR_IO), and the stream is
 * then useless (close it). */
ss_status ss__bulk_call_many(ss__bulk_stream *b, ss__rpc_request *rq, size_t n,
                             const ss__rpc_channel *ch, unsigned lane, unsigned lanes);

#ifdef __cplusplus
}
#endif

#endif
