#include <errno.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/names.h"
#include "common/shard_map.h"
#include "common/strbuf.h"
#include "rpc/auth.h"
#include "rpc/message.h"
#include "rpc/rpc.h"
#include "rpc/rpc_internal.h"
#include "rpc/rpc_pb.h"
#include "rpc/server_internal.h"
#define PREPOSTED_PER_METHOD 4
#define GENERIC              ((size_t)-1) /* an unregistered method: UNIMPLEMENTED */
#define TEXT_OF_(x)          #x
#define TEXT_OF(x)           TEXT_OF_(x) /* a number's macro as a string literal */

/* The call whose handler this thread runs (ss__rpc_current_peer_host). */
static _Thread_local grpc_call *current_call;

/* Why gRPC could not listen on `where`: the address bound by hand, to
 * learn the system's reason (gRPC only says it failed). */
static void say_bind_failure(const char *where, char *why, size_t whylen) {
    char host[256], port[8];
    unsigned p = 0;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    bool found = ss__address_split(where, host, sizeof host, &p);
    snprintf(port, sizeof port, "%u", p);
    if (!found || getaddrinfo(host, port, &hints, &ai) != 0 || !ai) {
        ss__why(why, whylen, "cannot listen on %s: not an address here", where);
        return;
    }
    int err = 0, one = 1;
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0)
        err = errno;
    else if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
             bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1) != 0)
        err = errno;
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    ss__why(why, whylen, "cannot listen on %s: %s", where, err ? strerror(err) : "gRPC refused it");
}

static void request_call(ss__rpc_server *srv, size_t method, grpc_completion_queue *cq) {
    call_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        SS_LOG_ERRORF("rpc", "event=oom where=request_call");
        return;
    }
    c->srv = srv;
    c->method = method;
    c->cq = cq;
    c->state = CALL_REQUESTED;
    c->peer_slot = -1;
    grpc_metadata_array_init(&c->request_md);
    grpc_call_details_init(&c->details);
    atomic_fetch_add(&srv->live_calls, 1);
    grpc_call_error err =
        method == GENERIC
            ? grpc_server_request_call(srv->server, &c->call, &c->details, &c->request_md, cq, cq,
                                       c)
            : grpc_server_request_registered_call(srv->server, srv->slots[method].handle, &c->call,
                                                  &c->deadline, &c->request_md, NULL, cq, cq, c);
    if (err != GRPC_CALL_OK) {
        grpc_call_details_destroy(&c->details);
        grpc_metadata_array_destroy(&c->request_md);
        free(c);
        atomic_fetch_sub(&srv->live_calls, 1);
    }
}

/* The request's bytes leave srv->inflight (once). */
static void release_held(call_ctx *c) {
    if (c->held) {
        size_t now = atomic_fetch_sub(&c->srv->inflight, c->held) - c->held;
        if (c->srv->inflight_bytes)
            ss__gauge_set(c->srv->inflight_bytes, (double)now);
        c->held = 0;
    }
}

static void free_call(call_ctx *c) {
    ss__rpc_server *srv = c->srv;
    release_held(c);
    ss__rpc_read_done(c);
    if (c->payload)
        grpc_byte_buffer_destroy(c->payload);
    if (c->reply_bb)
        grpc_byte_buffer_destroy(c->reply_bb);
    grpc_slice_unref(c->status_details);
    grpc_metadata_array_destroy(&c->request_md);
    grpc_call_details_destroy(&c->details);
    if (c->call)
        grpc_call_unref(c->call);
    free(c);
    atomic_fetch_sub(&srv->live_calls, 1);
}

static grpc_status_code to_grpc_code(ss_status st) {
    switch (st) {
    case SS_OK:
        return GRPC_STATUS_OK;
    case SS_ERR_INVALID_ARGUMENT:
    case SS_ERR_PARSE:
    case SS_ERR_SIZE_MISMATCH:
    case SS_ERR_NON_FINITE:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case SS_ERR_NOT_FOUND:
        return GRPC_STATUS_NOT_FOUND;
    case SS_ERR_EXISTS:
        return GRPC_STATUS_ALREADY_EXISTS;
    case SS_ERR_STATE:
        return GRPC_STATUS_FAILED_PRECONDITION;
    case SS_ERR_TIMEOUT:
        return GRPC_STATUS_DEADLINE_EXCEEDED;
    case SS_ERR_NO_MEMORY:
    case SS_ERR_TOO_LARGE:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case SS_ERR_STOPPED:
    case SS_ERR_IO:
        return GRPC_STATUS_UNAVAILABLE;
    case SS_ERR_PERMISSION:
        return GRPC_STATUS_PERMISSION_DENIED;
    default:
        return GRPC_STATUS_INTERNAL;
    }
}

/* The call's metadata `key` matches expected ("Bearer <token>"). */
static bool carries(const call_ctx *c, const char *key, const char *expected) {
    for (size_t i = 0; i < c->request_md.count; i++) {
        const grpc_metadata *m = &c->request_md.metadata[i];
        if (grpc_slice_str_cmp(m->key, key) == 0)
            return ss__auth_header_matches(expected, (const char *)GRPC_SLICE_START_PTR(m->value),
                                           GRPC_SLICE_LENGTH(m->value));
    }
    return false;
}

/* The call carries the server's "authorization: Bearer <token>". */
static bool authorized(const call_ctx *c) {
    return carries(c, "authorization", c->srv->auth);
}

/* A peers_only method's caller is a PS of the fleet: it carries the peer
 * token; a server without one serves such methods only where it serves
 * anyone (no token, no mutual TLS: --insecure-loopback). */
static bool peer_authorized(const call_ctx *c) {
    const ss__rpc_server *srv = c->srv;
    if (srv->peer_auth[0])
        return carries(c, SS_RPC_PEER_KEY, srv->peer_auth);
    return !srv->auth[0] && !srv->mtls;
}

/* The shard map epoch the call was routed by (its SS_RPC_EPOCH_KEY
 * metadata); false when it carries none (or not a number). */
static bool call_epoch(const call_ctx *c, uint64_t *epoch) {
    for (size_t i = 0; i < c->request_md.count; i++) {
        const grpc_metadata *m = &c->request_md.metadata[i];
        if (grpc_slice_str_cmp(m->key, SS_RPC_EPOCH_KEY) == 0)
            return ss__shard_map_epoch_parse((const char *)GRPC_SLICE_START_PTR(m->value),
                                             GRPC_SLICE_LENGTH(m->value), epoch);
    }
    return false;
}

/* Mutual TLS: the client's certificate names an identity of --tls-writers
 * (its subject alternative names, or its common name). who gets the
 * identity gRPC reports, for the refusal's message. */
static bool peer_may_write(const call_ctx *c, char *who, size_t wholen) {
    snprintf(who, wholen, "no certificate identity");
    grpc_auth_context *ctx = grpc_call_auth_context(c->call);
    if (!ctx)
        return false;
    bool ok = false;
    const char *const names[] = {GRPC_X509_SAN_PROPERTY_NAME, GRPC_X509_CN_PROPERTY_NAME};
    for (size_t k = 0; k < 2 && !ok; k++) {
        grpc_auth_property_iterator it = grpc_auth_context_find_properties_by_name(ctx, names[k]);
        const grpc_auth_property *p;
        while (!ok && (p = grpc_auth_property_iterator_next(&it))) {
            ok = ss__auth_identity_listed(c->srv->writers, p->value, p->value_length);
            snprintf(who, wholen, "%.*s", (int)p->value_length, p->value);
        }
    }
    grpc_auth_context_release(ctx);
    return ok;
}

/* A request in one buffer whose END is aligned (REQUEST_END_ALIGN): a bulk
 * field of floats runs to the end of its message (rpc/pb_wire.h), so it
 * lands aligned for floats and the handler reads it in place. One copy
 * out of gRPC's slices (a 1 MiB request arrives in ~17); before, gRPC's
 * readall gathered it and the handler copied the floats again to align
 * them. NULL: *st says why (a compressed message that does not inflate,
 * or no memory). */
#define REQUEST_END_ALIGN 64

static const uint8_t *gather_request(grpc_byte_buffer *payload, size_t *len, void **block,
                                     ss_status *st) {
    ss__rpc_message msg;
    *block = NULL;
    if ((*st = ss__rpc_message_open(payload, &msg, NULL, 0)) != SS_OK)
        return NULL;
    *st = SS_ERR_NO_MEMORY;
    size_t n = ss__rpc_message_length(&msg);
    size_t pad = (REQUEST_END_ALIGN - n % REQUEST_END_ALIGN) % REQUEST_END_ALIGN;
    uint8_t *buf = NULL;
    if ((*block = aligned_alloc(REQUEST_END_ALIGN, n + pad + REQUEST_END_ALIGN))) {
        buf = (uint8_t *)*block + pad;
        *st = ss__rpc_message_copy(&msg, 0, buf, n) ? SS_OK : SS_ERR_PARSE;
        if (*st != SS_OK)
            buf = NULL;
    }
    ss__rpc_message_close(&msg);
    *len = n;
    return buf;
}

/* Counts the call's result and starts the reply batch (the reply, or the
 * refusal in reply->status and message); its completion (CALL_REPLYING)
 * frees the context. */
static void finish(call_ctx *c, ss__rpc_reply *reply) {
    ss__rpc_server *srv = c->srv;
    release_held(c);
    ss__rpc_method_series_count(&srv->slots[c->method].series, reply->status,
                                c->payload ? grpc_byte_buffer_length(c->payload) : 0, reply->len,
                                c->arrived_ns);

    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    void *owned = reply->data_block ? reply->data_block : reply->data;
    if (reply->status == SS_OK) {
        grpc_slice s;
        if (reply->len) { /* no copy: gRPC frees the block with the slice */
            s = grpc_slice_new_with_user_data(reply->data, reply->len, free, owned);
        } else {
            free(owned);
            s = grpc_empty_slice();
        }
        c->reply_bb = grpc_raw_byte_buffer_create(&s, 1);
        grpc_slice_unref(s);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->reply_bb;
    } else {
        free(owned);
        char text[sizeof reply->message + 64];
        snprintf(text, sizeof text, "ss=%s: %s", ss_status_name(reply->status), reply->message);
        c->status_details = grpc_slice_from_copied_string(text);
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = to_grpc_code(reply->status);
    ops[n++].data.send_status_from_server.status_details =
        reply->status == SS_OK ? NULL : &c->status_details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    c->state = CALL_REPLYING;
    if (grpc_call_start_batch(c->call, ops, n, c, NULL) != GRPC_CALL_OK) {
        SS_LOG_ERRORF("rpc", "event=reply_batch_failed method=%s", srv->methods[c->method].path);
        free_call(c);
    }
}

void ss__rpc_reply_fail(ss__rpc_reply *r, ss_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    r->status = st;
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
}

/* A refusal with its reason, counted under `counter` (may be NULL). */
static void refuse(call_ctx *c, ss_status st, ss__counter *counter, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void refuse(call_ctx *c, ss_status st, ss__counter *counter, const char *fmt, ...) {
    ss__rpc_reply reply = {.status = st};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reply.message, sizeof reply.message, fmt, ap);
    va_end(ap);
    if (counter)
        ss__counter_add(counter, 1);
    finish(c, &reply);
}

/* The handler of a call, under the map gate when the call was routed by
 * an epoch: checked again there, since the map may have moved on while
 * the body was read; the gate keeps it from moving during the handler. */
static void run_handler(call_ctx *c, const uint8_t *req, size_t len, ss__rpc_reply *reply) {
    ss__rpc_server *srv = c->srv;
    uint64_t routed = 0;
    const bool by_map = srv->map_gate && call_epoch(c, &routed);
    current_call = c->call;
    if (!ss__rpc_run_routed(&srv->methods[c->method], srv->ctx, srv->map_epoch, srv->map_gate,
                            by_map, routed, false, req, len, reply))
        ss__counter_add(srv->stale_epoch, 1);
    current_call = NULL;
}

bool ss__rpc_current_peer_host(char *out, size_t outlen) {
    char *peer = current_call ? grpc_call_get_peer(current_call) : NULL;
    if (!peer)
        return false;
    /* "ipv4:127.0.0.1:5555", "ipv6:[::1]:5555": the scheme and the port off */
    const char *host = strchr(peer, ':') ? strchr(peer, ':') + 1 : peer;
    const char *port = strrchr(host, ':');
    size_t n = port ? (size_t)(port - host) : strlen(host);
    if (*host == '[' && n >= 2 && host[n - 1] == ']') {
        host++;
        n -= 2;
    }
    snprintf(out, outlen, "%.*s", (int)n, host);
    gpr_free(peer);
    return true;
}

void ss__rpc_method_run(const ss__rpc_method *m, void *server_ctx, const uint8_t *req, size_t len,
                        ss__rpc_reply *reply) {
    void *ctx = m->ctx ? m->ctx : server_ctx;
    if (m->request)
        ss__rpc_serve_request(m->request, ctx, req, len, reply);
    else
        m->handler(ctx, req, len, reply);
}

bool ss__rpc_run_routed(const ss__rpc_method *m, void *ctx, const _Atomic uint64_t *map_epoch,
                        pthread_rwlock_t *map_gate, bool by_map, uint64_t routed,
                        bool check_blocking, const uint8_t *req, size_t len, ss__rpc_reply *reply) {
    const bool checked = by_map && map_epoch && (check_blocking || !m->blocking);
    const bool gated = checked && map_gate && !m->blocking;
    if (gated)
        pthread_rwlock_rdlock(map_gate);
    const uint64_t serves = checked ? atomic_load(map_epoch) : 0;
    const bool stale = serves && routed != serves;
    if (stale) {
        reply->status = SS_ERR_STATE;
        snprintf(reply->message, sizeof reply->message, SS_RPC_STALE_EPOCH_TEXT, m->path,
                 (unsigned long long)routed, (unsigned long long)serves);
    } else {
        ss__rpc_method_run(m, ctx, req, len, reply);
    }
    if (gated)
        pthread_rwlock_unlock(map_gate);
    return !stale;
}

/* Runs the handler of a received call (unless refused: too many blocked
 * calls, or its deadline passed) and replies. holds_blocked_slot: a
 * blocking call's thread, whose slot in srv->blocked is given back before
 * the reply starts: once the reply completes the server may stop and free
 * srv (found by ASan: the slot was given back after, into a freed
 * server). */
static void serve_or_refuse(call_ctx *c, bool too_many_blocked, bool holds_blocked_slot) {
    ss__rpc_server *srv = c->srv;
    ss__rpc_reply reply = {.status = SS_OK};
    if (too_many_blocked) {
        reply.status = SS_ERR_TOO_LARGE;
        snprintf(reply.message, sizeof reply.message,
                 "%u calls already wait in the server, its limit (--max-blocked-calls)",
                 srv->max_blocked);
    } else if (gpr_time_cmp(c->deadline, gpr_now(c->deadline.clock_type)) <= 0) {
        reply.status = SS_ERR_TIMEOUT;
        snprintf(reply.message, sizeof reply.message, "deadline expired before the call ran");
    } else {
        size_t len;
        void *block;
        ss_status st;
        const uint8_t *req = gather_request(c->payload, &len, &block, &st);
        if (!req) {
            reply.status = st;
            snprintf(reply.message, sizeof reply.message, "request message: %s", ss_strerror(st));
        } else {
            run_handler(c, req, len, &reply);
        }
        free(block);
    }
    if (holds_blocked_slot)
        atomic_fetch_sub(&srv->blocked, 1);
    finish(c, &reply); /* gives the request's bytes back first */
}

/* Any method we did not register: UNIMPLEMENTED at once, instead of a call
 * that hangs until the client's deadline. */
static void serve_unimplemented(call_ctx *c) {
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->status_details = grpc_slice_from_static_string("ss=not_found: unknown method");
    ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[1].data.send_status_from_server.status = GRPC_STATUS_UNIMPLEMENTED;
    ops[1].data.send_status_from_server.status_details = &c->status_details;
    ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[2].data.recv_close_on_server.cancelled = &c->cancelled;
    c->state = CALL_REPLYING;
    if (grpc_call_start_batch(c->call, ops, 3, c, NULL) != GRPC_CALL_OK)
        free_call(c);
}

static void serve(call_ctx *c) {
    serve_or_refuse(c, false, false);
}

static void *blocking_serve(void *arg) {
    serve_or_refuse(arg, false, true); /* srv may be gone once it returns */
    return NULL;
}

/* A blocking handler gets a thread of its own while fewer than
 * max_blocked run; past that the call is refused, never queued. */
static void serve_blocking(call_ctx *c) {
    ss__rpc_server *srv = c->srv;
    if (atomic_fetch_add(&srv->blocked, 1) >= srv->max_blocked) {
        atomic_fetch_sub(&srv->blocked, 1);
        if (srv->blocked_refused)
            ss__counter_add(srv->blocked_refused, 1);
        serve_or_refuse(c, true, false);
        return;
    }
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, blocking_serve, c) != 0)
        serve_or_refuse(c, false, true);
    pthread_attr_destroy(&attr);
}

/* The door: a call's metadata is in, its body not yet read. Every call
 * needs the token when the server has one (a refused client never makes
 * the server buffer its message: a client without the token could
 * otherwise make a PS hold as many large requests as it sends); with
 * --tls-writers, a call that changes
 * state needs a writer's certificate. Refused: the reply goes out at once
 * and the message is never read. Else the message is read (RECEIVING). */
static void admit(call_ctx *c) {
    ss__rpc_server *srv = c->srv;
    c->arrived_ns = ss__now_ns();
    const ss__rpc_method *m = &srv->methods[c->method];
    char who[48];
    if (srv->writers[0] && !m->read_only && !peer_may_write(c, who, sizeof who)) {
        refuse(c, SS_ERR_PERMISSION, srv->unauthorized,
               "%s changes state: client certificate %s may only read (not in the server's "
               "--tls-writers)",
               m->path, who);
        return;
    }
    if (srv->auth[0] && !authorized(c)) {
        refuse(c, SS_ERR_PERMISSION, srv->unauthorized,
               "%s needs the server's token (authorization: Bearer; the client reads "
               "SHADOWSYNC_AUTH_TOKEN_FILE)",
               m->path);
        return;
    }
    if (m->peers_only && !peer_authorized(c)) {
        refuse(c, SS_ERR_PERMISSION, srv->unauthorized,
               srv->peer_auth[0]
                   ? "%s is for the PS of the fleet: it needs their peer token (" SS_RPC_PEER_KEY
                     " metadata; each PS reads --peer-token-file), which trainers do not hold"
                   : "%s is for the PS of the fleet, and this server has no peer token: start "
                     "every PS with --peer-token-file (a token of their own, not the trainers')",
               m->path);
        return;
    }
    uint64_t serves = srv->map_epoch ? atomic_load(srv->map_epoch) : 0, routed;
    if (serves && call_epoch(c, &routed) && routed != serves) {
        refuse(c, SS_ERR_STATE, srv->stale_epoch, SS_RPC_STALE_EPOCH_TEXT, m->path,
               (unsigned long long)routed, (unsigned long long)serves);
        return;
    }
    read_turn turn =
        m->read_only && srv->writer_queues < srv->shared_queues ? ss__rpc_read_turn(c) : READ_GOES;
    if (turn == READ_REFUSED) {
        refuse(c, SS_ERR_TOO_LARGE, srv->unfair_refused,
               "%s: this connection has %u reads in flight, its share of the server, and %u "
               "more waiting (reads never hold up writers; try again when one is done)",
               m->path, srv->reads_per_peer, SS_RPC_WAITING_READS_PER_PEER);
        return;
    }
    if (turn == READ_GOES)
        ss__rpc_server_receive(c);
}

void ss__rpc_server_free_call(call_ctx *c) {
    free_call(c);
}

void ss__rpc_server_receive(call_ctx *c) {
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->payload;
    c->state = CALL_RECEIVING;
    if (grpc_call_start_batch(c->call, &op, 1, c, NULL) != GRPC_CALL_OK)
        free_call(c);
}

/* The message of an admitted call is in: bounded by its method's limit
 * and by the bytes the server holds at once, then served. */
static void received(call_ctx *c) {
    ss__rpc_server *srv = c->srv;
    const ss__rpc_method *m = &srv->methods[c->method];
    if (!c->payload) {
        refuse(c, SS_ERR_PARSE, NULL, "request without a message");
        return;
    }
    const size_t len = grpc_byte_buffer_length(c->payload);
    const size_t max = m->max_request ? m->max_request : srv->max_message;
    if (len > max) {
        refuse(c, SS_ERR_NO_MEMORY, srv->too_large,
               "request of %zu bytes over the limit of %zu for %s", len, max, m->path);
        return;
    }
    const size_t now = atomic_fetch_add(&srv->inflight, len) + len;
    c->held = len;
    if (now > srv->max_inflight && now != len) { /* one call alone always goes */
        refuse(c, SS_ERR_TOO_LARGE, srv->inflight_refused,
               "the server holds %zu request bytes, over its limit of %zu (--max-inflight-mb)",
               now - len, srv->max_inflight);
        return;
    }
    if (srv->inflight_bytes)
        ss__gauge_set(srv->inflight_bytes, (double)now);
    if (m->blocking)
        serve_blocking(c);
    else
        serve(c);
}

typedef struct cq_arg {
    ss__rpc_server *srv;
    grpc_completion_queue *cq;
    bool reader;
} cq_arg;

/* Reader queues: as many as the writers' when the server has both kinds
 * of method, else none (every queue serves every method). */
static uint32_t reader_queues(const ss__rpc_method *methods, size_t n, uint32_t threads) {
    bool reads = false, writes = false;
    for (size_t i = 0; i < n; i++) {
        reads = reads || methods[i].read_only;
        writes = writes || !methods[i].read_only;
    }
    return reads && writes ? threads : 0;
}

/* Does queue q take calls of method m? Writers' queues the methods that
 * change state, readers' queues the read-only ones (bulk reads never hold
 * a writer's thread), all of them when there are no readers' queues. The
 * peers' methods (the fleet's row moves) have a queue of their own: a PS
 * answers another's Handoff while each of its other queue threads waits
 * in a request for rows that the other is giving (ps/row_moves.h). */
static bool queue_serves(const ss__rpc_server *srv, uint32_t q, size_t m) {
    const bool peers = srv->methods[m].peers_only;
    if (srv->peer_queue < srv->nthreads && (peers || q == srv->peer_queue))
        return peers && q == srv->peer_queue;
    if (srv->writer_queues == srv->shared_queues)
        return true;
    return srv->methods[m].read_only == (q >= srv->writer_queues);
}

/* The queue of the peers' methods, when one is peers_only: after the
 * others (UINT32_MAX: none). */
static uint32_t peer_queue(const ss__rpc_method *methods, size_t n, uint32_t shared) {
    for (size_t i = 0; i < n; i++)
        if (methods[i].peers_only)
            return shared;
    return UINT32_MAX;
}

static void *cq_thread(void *arg) {
    cq_arg *a = arg;
    ss__rpc_server *srv = a->srv;
    grpc_completion_queue *cq = a->cq;
    /* A reader's thread yields the CPU to the writers' (a nice of its
     * own: on Linux a thread is a task): bulk reads use what the writers
     * leave. */
    if (a->reader)
        setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    free(a);
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        call_ctx *c = ev.tag;
        if (c->state == CALL_REPLYING || !ev.success) {
            /* reply sent, a pre-posted request ended by shutdown, or a
             * message that never came (the client went away) */
            free_call(c);
            continue;
        }
        if (c->state == CALL_RECEIVING) {
            received(c);
            continue;
        }
        /* Re-arm first so the method never runs out of posted requests. */
        if (!atomic_load(&srv->shutting_down))
            request_call(srv, c->method, cq);
        if (c->method == GENERIC)
            serve_unimplemented(c);
        else
            admit(c);
    }
    return NULL;
}

static void drain(grpc_completion_queue *cq) {
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
}

/* Last step of both a failed start and a stop, after grpc_server_destroy:
 * shut every queue down, let its thread (or we) drain it, free it all. */
static void release_queues(ss__rpc_server *srv, bool threads_running) {
    for (uint32_t i = 0; i < srv->nthreads; i++)
        grpc_completion_queue_shutdown(srv->cqs[i]);
    for (uint32_t i = 0; i < srv->nthreads; i++) {
        if (threads_running)
            pthread_join(srv->threads[i], NULL);
        else
            drain(srv->cqs[i]);
        grpc_completion_queue_destroy(srv->cqs[i]);
    }
    grpc_completion_queue_shutdown(srv->shutdown_cq);
    drain(srv->shutdown_cq);
    grpc_completion_queue_destroy(srv->shutdown_cq);
    free(srv->slots);
    free(srv->cqs);
    free(srv->threads);
    pthread_mutex_destroy(&srv->peer_lock);
    free(srv);
    ss__rpc_shutdown();
}

/* The server's series in m: its refusals and, per method, its calls and
 * bytes. */
static void register_metrics(ss__rpc_server *srv, ss__metrics *m) {
    ss__metrics_counter(m, "shadowsync_rpc_unauthorized_total",
                        "Calls refused at the door: a missing or wrong token, or a client "
                        "certificate that may only read calling one that changes state.",
                        NULL, &srv->unauthorized);
    ss__metrics_counter(m, "shadowsync_rpc_too_large_total",
                        "Requests refused for a message over their method's limit.", NULL,
                        &srv->too_large);
    ss__metrics_counter(
        m, "shadowsync_rpc_unfair_refused_total",
        "Reads refused because their connection already had its share "
        "(reads_per_peer) in flight and " TEXT_OF(SS_RPC_WAITING_READS_PER_PEER) " more waiting.",
        NULL, &srv->unfair_refused);
    ss__metrics_counter(m, "shadowsync_rpc_reads_waited_total",
                        "Reads that waited for their turn because their connection already "
                        "had its share (reads_per_peer) in flight.",
                        NULL, &srv->reads_waited);
    ss__metrics_counter(m, "shadowsync_rpc_inflight_refused_total",
                        "Requests refused because the server already held "
                        "--max-inflight-mb of request bytes.",
                        NULL, &srv->inflight_refused);
    ss__metrics_gauge(m, "shadowsync_rpc_inflight_bytes",
                      "Request bytes received whose handlers have not finished.", NULL,
                      &srv->inflight_bytes);
    ss__metrics_counter(m, "shadowsync_rpc_stale_epoch_total",
                        "Calls refused because they were routed by another shard map epoch "
                        "than the one this server serves.",
                        NULL, &srv->stale_epoch);
    ss__metrics_counter(m, "shadowsync_rpc_blocked_refused_total",
                        "Calls refused because --max-blocked-calls handlers were already "
                        "waiting (MA/BMUF rounds).",
                        NULL, &srv->blocked_refused);
    for (size_t i = 0; i < srv->nmethods; i++)
        ss__rpc_method_series_register(m, srv->methods[i].path, NULL, &srv->slots[i].series);
}

/* gRPC's server for srv's methods. Its own receive limit is twice the
 * largest method's: requests between the two reach received(), which
 * refuses and counts them; only the absurd ones are dropped by gRPC
 * (uncounted). Only authorized calls get that far. */
static grpc_server *create_grpc_server(const ss__rpc_server *srv) {
    size_t largest = 0;
    for (size_t i = 0; i < srv->nmethods; i++) {
        size_t m = srv->methods[i].max_request ? srv->methods[i].max_request : srv->max_message;
        largest = m > largest ? m : largest;
    }
    size_t hard = largest > (size_t)INT32_MAX / 2 ? (size_t)INT32_MAX : 2 * largest;
    grpc_arg arg[3] = {
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = (int)hard},
        /* gRPC sets SO_REUSEPORT by default: a second server on a taken
         * port would bind silently and steal half the connections. */
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_ALLOW_REUSEPORT, .value.integer = 0},
        /* Our clients' keepalive pings (rpc.h) are no strikes. */
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
         .value.integer = SS_RPC_MIN_PING_INTERVAL_MS},
    };
    grpc_channel_args args = {.num_args = 3, .args = arg};
    return grpc_server_create(&args, NULL);
}

ss_status ss__rpc_server_start(const ss__rpc_server_config *cfg, const ss__rpc_method *methods,
                               size_t nmethods, void *ctx, ss__rpc_server **out, char *why,
                               size_t whylen) {
    ss__why(why, whylen, "%s", "");
    if (!cfg || !cfg->listen || cfg->threads == 0 || cfg->threads > 64 || !methods ||
        nmethods == 0 || !out)
        return SS_ERR_INVALID_ARGUMENT;
    /* Writers are certificate identities: without client certificates
     * (mutual TLS) nobody could write. */
    if (cfg->tls_writers && *cfg->tls_writers &&
        (!cfg->tls || !cfg->tls->ca_file || strlen(cfg->tls_writers) >= SS_AUTH_WRITERS_MAX))
        return SS_ERR_INVALID_ARGUMENT;
    ss__rpc_server *srv = calloc(1, sizeof *srv);
    if (!srv)
        return SS_ERR_NO_MEMORY;
    srv->methods = methods;
    srv->nmethods = nmethods;
    srv->ctx = ctx;
    srv->writer_queues = cfg->threads;
    srv->shared_queues = cfg->threads + reader_queues(methods, nmethods, cfg->threads);
    srv->peer_queue = peer_queue(methods, nmethods, srv->shared_queues);
    srv->nthreads = srv->shared_queues + (srv->peer_queue != UINT32_MAX);
    srv->reads_per_peer = cfg->reads_per_peer ? cfg->reads_per_peer : SS_RPC_DEFAULT_READS_PER_PEER;
    srv->slots = calloc(nmethods, sizeof *srv->slots);
    srv->cqs = calloc(srv->nthreads, sizeof *srv->cqs);
    srv->threads = calloc(srv->nthreads, sizeof *srv->threads);
    if (!srv->slots || !srv->cqs || !srv->threads) {
        free(srv->slots);
        free(srv->cqs);
        free(srv->threads);
        free(srv);
        return SS_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&srv->peer_lock, NULL);
    ss__rpc_init();
    srv->max_message = cfg->max_message_bytes ? cfg->max_message_bytes : SS_RPC_DEFAULT_MAX_MESSAGE;
    srv->max_inflight =
        cfg->max_inflight_bytes ? cfg->max_inflight_bytes : SS_RPC_DEFAULT_MAX_INFLIGHT;
    srv->server = create_grpc_server(srv);
    srv->max_blocked = cfg->max_blocked_calls ? cfg->max_blocked_calls : SS_RPC_DEFAULT_MAX_BLOCKED;
    if (cfg->auth_header)
        snprintf(srv->auth, sizeof srv->auth, "%s", cfg->auth_header);
    if (cfg->peer_auth_header)
        snprintf(srv->peer_auth, sizeof srv->peer_auth, "%s", cfg->peer_auth_header);
    srv->mtls = cfg->tls && cfg->tls->ca_file && *cfg->tls->ca_file;
    srv->map_epoch = cfg->map_epoch;
    srv->map_gate = cfg->map_gate;
    if (cfg->tls_writers)
        snprintf(srv->writers, sizeof srv->writers, "%s", cfg->tls_writers);
    if (cfg->metrics)
        register_metrics(srv, cfg->metrics);
    for (size_t i = 0; i < nmethods; i++)
        srv->slots[i].handle = grpc_server_register_method(srv->server, methods[i].path, NULL,
                                                           GRPC_SRM_PAYLOAD_NONE, 0);
    for (uint32_t i = 0; i < srv->nthreads; i++) {
        srv->cqs[i] = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(srv->server, srv->cqs[i], NULL);
    }
    /* The shutdown notification needs a registered NEXT queue of its own. */
    srv->shutdown_cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(srv->server, srv->shutdown_cq, NULL);
    grpc_server_credentials *creds;
    ss_status cst = ss__rpc_server_credentials(cfg->tls, &creds, why, whylen);
    if (cst != SS_OK) {
        SS_LOG_ERRORF("rpc", "event=tls_failed status=%s", ss_status_name(cst));
        grpc_server_destroy(srv->server);
        release_queues(srv, false);
        return cst;
    }
    srv->port = grpc_server_add_http2_port(srv->server, cfg->listen, creds);
    grpc_server_credentials_release(creds);
    if (srv->port == 0) {
        char said[300];
        say_bind_failure(cfg->listen, said, sizeof said);
        ss__why(why, whylen, "%s", said);
        SS_LOG_ERRORF("rpc", "event=bind_failed listen=%s why=\"%s\"", cfg->listen, said);
        grpc_server_destroy(srv->server);
        release_queues(srv, false);
        return SS_ERR_IO;
    }
    grpc_server_start(srv->server);
    for (uint32_t i = 0; i < srv->nthreads; i++) {
        for (size_t m = 0; m < nmethods; m++)
            for (int k = 0; k < PREPOSTED_PER_METHOD && queue_serves(srv, i, m); k++)
                request_call(srv, m, srv->cqs[i]);
        if (i < srv->writer_queues)
            request_call(srv, GENERIC, srv->cqs[i]);
        cq_arg *a = malloc(sizeof *a);
        a->srv = srv;
        a->cq = srv->cqs[i];
        a->reader = i >= srv->writer_queues && i < srv->shared_queues;
        pthread_create(&srv->threads[i], NULL, cq_thread, a);
    }
    *out = srv;
    return SS_OK;
}

int ss__rpc_server_port(const ss__rpc_server *srv) {
    return srv ? srv->port : 0;
}

void ss__rpc_server_stop(ss__rpc_server *srv) {
    if (!srv)
        return;
    atomic_store(&srv->shutting_down, true);
    grpc_server_shutdown_and_notify(srv->server, srv->shutdown_cq, srv);
    grpc_server_cancel_all_calls(srv->server);
    ss__rpc_reads_drop_waiting(srv); /* no event would ever end them */
    grpc_completion_queue_next(srv->shutdown_cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    /* The tag can come while calls are alive; wait for every context. */
    while (atomic_load(&srv->live_calls) > 0)
        ss__sleep_ns(1000000);
    grpc_server_destroy(srv->server);
    release_queues(srv, true);
}

void ss__rpc_reply_pack(const ProtobufCMessage *m, ss__rpc_reply *r) {
    r->len = protobuf_c_message_get_packed_size(m);
    r->data = malloc(r->len ? r->len : 1);
    if (!r->data) {
        r->status = SS_ERR_NO_MEMORY;
        snprintf(r->message, sizeof r->message, "out of memory");
        return;
    }
    protobuf_c_message_pack(m, r->data);
}

void *ss__rpc_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *req, size_t len,
                     ss__rpc_reply *reply) {
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, len, req);
    if (!m) {
        reply->status = SS_ERR_PARSE;
        snprintf(reply->message, sizeof reply->message, "request is not a valid %s message",
                 desc->name);
    }
    return m;
}
