#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "rpc/auth.h"
#include "rpc/bulk/bulk_link.h"
#include "rpc/message.h"
#include "rpc/rpc.h"
#include "rpc/rpc_internal.h"

struct ss__rpc_channel {
    grpc_channel *channel;
    char target[256];              /* host:port, for messages */
    char auth[SS_AUTH_HEADER_MAX]; /* "Bearer <token>" sent with every call; "" = none */
    char peer[SS_AUTH_HEADER_MAX]; /* the peer token, the same way (SS_RPC_PEER_KEY) */
    _Atomic uint64_t epoch;        /* the shard map's, sent with every call; 0 = none */
    /* The shortest call seen whose request and reply were both small: the
     * network's round trip plus a small call's software cost (0: none yet). */
    _Atomic uint64_t rtt_min_ns;
    /* Whether TCP connected when last asked (unreached_why), and when. */
    _Atomic uint64_t probed_ns;
    atomic_bool tcp_connects;
    ss__bulk_link *link; /* its bulk streams (rpc/bulk/bulk_link.h); NULL: none */
};

/* Calls no larger than this each way measure the round trip. */
#define SMALL_CALL_BYTES 4096

uint64_t ss__rpc_channel_rtt_ns(const ss__rpc_channel *ch) {
    return ch ? atomic_load_explicit(&((ss__rpc_channel *)ch)->rtt_min_ns, memory_order_relaxed)
              : 0;
}

static void note_rtt(ss__rpc_channel *ch, uint64_t ns) {
    uint64_t cur = atomic_load_explicit(&ch->rtt_min_ns, memory_order_relaxed);
    while ((cur == 0 || ns < cur) &&
           !atomic_compare_exchange_weak_explicit(&ch->rtt_min_ns, &cur, ns, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

void ss__rpc_channel_set_peer_auth(ss__rpc_channel *ch, const char *header) {
    snprintf(ch->peer, sizeof ch->peer, "%s", header ? header : "");
}

ss_status ss__rpc_channel_create(const char *target, size_t max_message_bytes,
                                 const ss__rpc_tls *tls, ss__rpc_channel **out, char *why,
                                 size_t whylen) {
    if (!target || !*target || !out)
        return ss__fail(why, whylen, SS_ERR_INVALID_ARGUMENT, "a channel needs a target");
    ss__rpc_channel *ch = calloc(1, sizeof *ch);
    if (!ch)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for a channel to %s", target);
    snprintf(ch->target, sizeof ch->target, "%s", target);
    char token[300];
    if (ss__auth_header_from_env(ch->auth, sizeof ch->auth, token, sizeof token) != SS_OK) {
        SS_LOG_ERRORF("rpc", "event=bad_setting name=SHADOWSYNC_AUTH_TOKEN_FILE why=\"%s\"", token);
        ss__why(why, whylen, "SHADOWSYNC_AUTH_TOKEN_FILE: %s", token);
        free(ch);
        return SS_ERR_INVALID_ARGUMENT;
    }
    ss__rpc_init();
    grpc_channel_credentials *creds;
    ss_status st = ss__rpc_client_credentials(tls, &creds, why, whylen);
    if (st != SS_OK) {
        free(ch);
        ss__rpc_shutdown();
        return st;
    }
    int max = (int)(max_message_bytes ? max_message_bytes : SS_RPC_DEFAULT_MAX_MESSAGE);
    grpc_arg args[8] = {
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = max},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, .value.integer = max},
        /* A restarted PS is back within a second or two; gRPC's default
         * reconnect backoff (1 s growing to 120 s) would keep a trainer
         * failing fast long after. */
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
         .value.integer = 100},
        /* In gRPC core this is not a backoff: it is the least time a
         * connection attempt gets (TCP, TLS, HTTP/2 settings) before it is
         * cut and tried again. At 100 ms, attempts were cut at the
         * 100-250 ms backoff: a PS 200 ms away was never reached (every
         * attempt cut), and a TLS handshake on a loaded machine failed
         * ("tcp handshaker shutdown"). test_long_rtt.sh. */
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
         .value.integer = SS_RPC_MIN_CONNECT_MS},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
         .value.integer = SS_RPC_RECONNECT_MAX_MS},
        /* Keepalive pings while calls are in flight (rpc_internal.h),
         * as many as it takes: a round waiting on its reply sends no data. */
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_KEEPALIVE_TIME_MS,
         .value.integer = SS_RPC_KEEPALIVE_MS},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
         .value.integer = SS_RPC_KEEPALIVE_TIMEOUT_MS},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA,
         .value.integer = 0},
    };
    grpc_channel_args cargs = {.num_args = 8, .args = args};
    ch->channel = grpc_channel_create(target, creds, &cargs);
    grpc_channel_credentials_release(creds);
    if (!ch->channel ||
        ss__bulk_link_create(target, tls, (size_t)max, &ch->link, why, whylen) != SS_OK) {
        if (!ch->channel)
            ss__why(why, whylen, "gRPC made no channel to %s", target);
        const ss_status failed = ch->channel ? SS_ERR_NO_MEMORY : SS_ERR_IO;
        if (ch->channel)
            grpc_channel_destroy(ch->channel);
        free(ch);
        ss__rpc_shutdown();
        return failed;
    }
    *out = ch;
    return SS_OK;
}

void ss__rpc_channel_destroy(ss__rpc_channel *ch) {
    if (!ch)
        return;
    ss__bulk_link_destroy(ch->link); /* before the channel it asks tickets on */
    grpc_channel_destroy(ch->channel);
    free(ch);
    ss__rpc_shutdown();
}

/* The server's text of the last call of this thread that it refused. */
static _Thread_local char last_failure[512];

const char *ss__rpc_last_failure(void) {
    return last_failure;
}

void ss__rpc_clear_failure(void) {
    last_failure[0] = '\0';
}

bool ss__rpc_refused_for_epoch(ss_status st, const char *msg) {
    return st == SS_ERR_STATE && msg && strstr(msg, SS_RPC_STALE_EPOCH) != NULL;
}

void ss__rpc_channel_set_epoch(ss__rpc_channel *ch, uint64_t epoch) {
    if (!ch)
        return;
    atomic_store(&ch->epoch, epoch);
    ss__bulk_link_set_epoch(ch->link, epoch);
}

void ss__rpc_channel_set_streams(ss__rpc_channel *ch, bool on) {
    if (ch)
        ss__bulk_link_enable(ch->link, on);
}

uint64_t ss__rpc_channel_stream_batches(const ss__rpc_channel *ch) {
    return ch ? ss__bulk_link_batches(ch->link) : 0;
}

ss__bulk_link *ss__rpc_channel_link(const ss__rpc_channel *ch) {
    return ch ? ch->link : NULL;
}

ss_status ss__rpc_channel_reachable(ss__rpc_channel *ch, const char *who, uint32_t timeout_ms) {
    if (grpc_channel_check_connectivity_state(ch->channel, 1) == GRPC_CHANNEL_READY)
        return SS_OK;
    /* Tried again every 100 ms until timeout_ms: a server starting at the
     * same time as its clients gets that long to listen. */
    char why[128] = "";
    uint64_t end = ss__now_ns() + (uint64_t)timeout_ms * 1000000;
    for (;;) {
        uint64_t now = ss__now_ns();
        uint32_t left = now < end ? (uint32_t)((end - now) / 1000000) : 0;
        if (ss__tcp_reachable(ch->target, left ? left : 1, why, sizeof why))
            return SS_OK;
        if (ss__now_ns() + 100000000 >= end)
            break;
        ss__sleep_ns(100000000);
    }
    snprintf(last_failure, sizeof last_failure, "cannot reach %s at %s (%s)", who, ch->target, why);
    return SS_ERR_IO;
}

static ss_status from_grpc(grpc_status_code code, const char *details) {
    /* Our servers name the exact ss_status: "ss=<name>: text". */
    if (details && strncmp(details, "ss=", 3) == 0) {
        for (int s = 0; s < SS_STATUS_COUNT_; s++) {
            const char *name = ss_status_name((ss_status)s);
            size_t n = strlen(name);
            if (strncmp(details + 3, name, n) == 0 && details[3 + n] == ':')
                return (ss_status)s;
        }
    }
    switch (code) {
    case GRPC_STATUS_OK:
        return SS_OK;
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_OUT_OF_RANGE:
        return SS_ERR_INVALID_ARGUMENT;
    case GRPC_STATUS_NOT_FOUND:
        return SS_ERR_NOT_FOUND;
    case GRPC_STATUS_ALREADY_EXISTS:
        return SS_ERR_EXISTS;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return SS_ERR_TIMEOUT;
    case GRPC_STATUS_FAILED_PRECONDITION:
        return SS_ERR_STATE;
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        return SS_ERR_NO_MEMORY;
    case GRPC_STATUS_UNAVAILABLE:
    case GRPC_STATUS_CANCELLED:
        return SS_ERR_IO;
    case GRPC_STATUS_UNIMPLEMENTED: /* a method the server does not serve */
        return SS_ERR_UNSUPPORTED;
    default:
        return SS_ERR_INTERNAL;
    }
}

/* The request body refers to the caller's bytes (no copy): the caller's
 * buffer outlives the call, which ends before ss__rpc_call_many returns. */
static void no_free(void *p) {
    (void)p;
}

/* Per-call state while a batch is in flight. */
typedef struct call_state {
    grpc_call *call;
    grpc_byte_buffer *send, *recv;
    grpc_metadata_array initial_md, trailing_md;
    grpc_metadata md[3]; /* authorization, peer, epoch: live until the batch completes */
    char epoch_text[24];
    grpc_status_code code;
    grpc_slice details;
    const char *error_string;
    bool started;
    uint64_t start_ns;
} call_state;

/* Copies a received message into one malloc'd buffer. */
static ss_status take_message(const ss__rpc_message *msg, uint8_t **out, size_t *out_len) {
    size_t n = ss__rpc_message_length(msg);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        return SS_ERR_NO_MEMORY;
    if (!ss__rpc_message_copy(msg, 0, buf, n)) {
        free(buf);
        return SS_ERR_PARSE;
    }
    *out = buf;
    *out_len = n;
    return SS_OK;
}

static void start_call(ss__rpc_request *rq, call_state *cs, grpc_completion_queue *cq,
                       gpr_timespec deadline, bool wait_for_ready) {
    memset(cs, 0, sizeof *cs);
    cs->start_ns = ss__now_ns();
    cs->code = GRPC_STATUS_UNKNOWN;
    cs->details = grpc_empty_slice();
    grpc_metadata_array_init(&cs->initial_md);
    grpc_metadata_array_init(&cs->trailing_md);
    grpc_slice path = grpc_slice_from_static_string(rq->method);
    cs->call = grpc_channel_create_call(rq->ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq, path,
                                        NULL, deadline, NULL);
    grpc_slice body[2];
    size_t nbody = 0;
    if (rq->len)
        body[nbody++] = grpc_slice_new((void *)rq->req, rq->len, no_free);
    if (rq->payload_len) /* a bulk payload travels as its own slice: not copied */
        body[nbody++] = grpc_slice_new((void *)rq->payload, rq->payload_len, no_free);
    if (!nbody)
        body[nbody++] = grpc_empty_slice();
    cs->send = grpc_raw_byte_buffer_create(body, nbody);
    for (size_t i = 0; i < nbody; i++)
        grpc_slice_unref(body[i]);

    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].flags = wait_for_ready ? GRPC_INITIAL_METADATA_WAIT_FOR_READY : 0;
    size_t nmd = 0;
    if (rq->ch->auth[0]) {
        cs->md[nmd].key = grpc_slice_from_static_string("authorization");
        cs->md[nmd++].value =
            grpc_slice_from_static_string(rq->ch->auth); /* the channel outlives it */
    }
    if (rq->ch->peer[0]) {
        cs->md[nmd].key = grpc_slice_from_static_string(SS_RPC_PEER_KEY);
        cs->md[nmd++].value = grpc_slice_from_static_string(rq->ch->peer);
    }
    uint64_t epoch = atomic_load_explicit(&rq->ch->epoch, memory_order_relaxed);
    if (epoch) {
        snprintf(cs->epoch_text, sizeof cs->epoch_text, "%llu", (unsigned long long)epoch);
        cs->md[nmd].key = grpc_slice_from_static_string(SS_RPC_EPOCH_KEY);
        cs->md[nmd++].value = grpc_slice_from_static_string(cs->epoch_text);
    }
    ops[0].data.send_initial_metadata.count = nmd;
    ops[0].data.send_initial_metadata.metadata = nmd ? cs->md : NULL;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = cs->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    /* Without RECV_INITIAL_METADATA a rejected call hangs to its deadline. */
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &cs->initial_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &cs->recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &cs->trailing_md;
    ops[5].data.recv_status_on_client.status = &cs->code;
    ops[5].data.recv_status_on_client.status_details = &cs->details;
    ops[5].data.recv_status_on_client.error_string = &cs->error_string;
    cs->started = grpc_call_start_batch(cs->call, ops, 6, cs, NULL) == GRPC_CALL_OK;
    rq->status = cs->started ? SS_OK : SS_ERR_INTERNAL;
}

/* What a failed call says of a channel with no connection. A refused
 * TLS handshake (a client certificate the server does not take, TLS on
 * one side only) looked like a server that was down; TCP tells them
 * apart. Asked at most once a second a channel, so that a failing batch
 * does not wait on a probe per call, and for at most 500 ms. */
static const char *unreached_why(ss__rpc_channel *ch) {
    const uint64_t now = ss__now_ns();
    if (now - atomic_load(&ch->probed_ns) > 1000000000ull) {
        atomic_store(&ch->probed_ns, now);
        char why[160];
        /* A target that is not host:port (a gRPC URI: unix:, dns:///) is
         * refused here, and keeps the plain words: TCP has no say. */
        int fd = ss__tcp_connect(ch->target, 500, why, sizeof why);
        if (fd >= 0)
            close(fd);
        atomic_store(&ch->tcp_connects, fd >= 0);
    }
    return atomic_load(&ch->tcp_connects)
               ? " (no connection: TCP connects, but no gRPC connection comes up: the server "
                 "does not answer, or the handshake fails: TLS on one side only, or a "
                 "certificate one side refuses)"
               : " (no connection: nothing listens there, or it cannot be reached)";
}

static void finish_call(ss__rpc_request *rq, call_state *cs, bool success) {
    if (rq->status == SS_OK && !success)
        rq->status = SS_ERR_IO;
    if (rq->status == SS_OK) {
        char *text = grpc_slice_to_c_string(cs->details);
        rq->status = from_grpc(cs->code, text);
        if (rq->status != SS_OK) {
            snprintf(rq->msg, sizeof rq->msg, "%s", text);
            /* Which server, and whether it was reached at all: a refused
             * connection shows as the deadline of a call that waited. */
            const bool unreached = grpc_channel_check_connectivity_state(rq->ch->channel, 0) ==
                                   GRPC_CHANNEL_TRANSIENT_FAILURE;
            snprintf(last_failure, sizeof last_failure, "%s%s: %s", rq->ch->target,
                     unreached ? unreached_why(rq->ch) : "", text);
        }
        gpr_free(text);
    }
    if (rq->status == SS_OK && rq->len + rq->payload_len <= SMALL_CALL_BYTES && cs->recv &&
        grpc_byte_buffer_length(cs->recv) <= SMALL_CALL_BYTES)
        note_rtt(rq->ch, ss__now_ns() - cs->start_ns);
    if (rq->status == SS_OK) {
        ss__rpc_message msg;
        rq->status = ss__rpc_message_open(cs->recv, &msg, NULL, 0);
        if (rq->status == SS_OK) {
            rq->status = rq->on_reply ? rq->on_reply(rq, &msg, rq->on_reply_arg)
                                      : take_message(&msg, &rq->resp, &rq->resp_len);
            ss__rpc_message_close(&msg);
        }
    }
    if (cs->recv)
        grpc_byte_buffer_destroy(cs->recv);
    grpc_byte_buffer_destroy(cs->send);
    grpc_slice_unref(cs->details);
    if (cs->error_string)
        gpr_free((void *)cs->error_string);
    grpc_metadata_array_destroy(&cs->initial_md);
    grpc_metadata_array_destroy(&cs->trailing_md);
    grpc_call_unref(cs->call);
}

/* The calls of one channel, started in order, at most `window` at once. */
typedef struct channel_queue {
    const ss__rpc_channel *ch;
    size_t next;      /* the next call of calls[] to look at */
    size_t in_flight; /* started, not yet ended */
} channel_queue;

typedef struct batch {
    ss__rpc_request *calls;
    call_state *cs;
    size_t n;
    channel_queue *queues;
    size_t *queue_of; /* call -> its channel's queue */
    grpc_completion_queue *cq;
    gpr_timespec deadline;
    bool wait_for_ready;
    size_t ended; /* calls whose status is final */
    ss__rpc_batch_stats *stats;
} batch;

/* Starts calls of queue q until it has `window` in flight or none left. A
 * call that cannot start has ended (its status says why). */
static void fill_queue(batch *b, size_t q, uint32_t window) {
    channel_queue *cq = &b->queues[q];
    while (cq->next < b->n && (window == 0 || cq->in_flight < window)) {
        size_t i = cq->next++;
        if (b->queue_of[i] != q)
            continue;
        start_call(&b->calls[i], &b->cs[i], b->cq, b->deadline, b->wait_for_ready);
        if (b->cs[i].started) {
            cq->in_flight++;
        } else {
            finish_call(&b->calls[i], &b->cs[i], false);
            b->ended++;
        }
    }
}

/* A bulk call (over 64 KiB each way at least one way) that succeeded. */
static void note_bulk_end(batch *b, size_t i) {
    ss__rpc_batch_stats *st = b->stats;
    const ss__rpc_request *rq = &b->calls[i];
    if (!st || rq->status != SS_OK || rq->len + rq->payload_len < (64u << 10))
        return;
    const uint64_t now = ss__now_ns();
    if (st->large_ok == 0)
        st->first_end_ns = now;
    st->last_end_ns = now;
    st->large_ok++;
}

ss_status ss__rpc_call_windowed(ss__rpc_request *calls, size_t n, uint32_t timeout_ms,
                                bool wait_for_ready, uint32_t window) {
    return ss__rpc_call_windowed_stats(calls, n, timeout_ms, wait_for_ready, window, NULL);
}

ss_status ss__rpc_call_windowed_stats(ss__rpc_request *calls, size_t n, uint32_t timeout_ms,
                                      bool wait_for_ready, uint32_t window,
                                      ss__rpc_batch_stats *stats) {
    if (stats)
        *stats = (ss__rpc_batch_stats){0};
    if ((!calls && n) || timeout_ms == 0)
        return SS_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < n; i++) {
        calls[i].resp = NULL;
        calls[i].resp_len = 0;
        calls[i].msg[0] = '\0';
        if (!calls[i].ch || !calls[i].method || (!calls[i].req && calls[i].len) ||
            (!calls[i].payload && calls[i].payload_len))
            return SS_ERR_INVALID_ARGUMENT;
    }
    if (n == 0)
        return SS_OK;
    ss_status streamed;
    if (ss__bulk_links_call(calls, n, timeout_ms, &streamed)) {
        for (size_t i = 0; i < n; i++) /* what the server said, as a gRPC call's */
            if (calls[i].status != SS_OK && calls[i].msg[0])
                snprintf(last_failure, sizeof last_failure, "%s: %s", calls[i].ch->target,
                         calls[i].msg);
        return streamed;
    }
    batch b = {.calls = calls, .n = n, .wait_for_ready = wait_for_ready, .stats = stats};
    b.cs = calloc(n, sizeof *b.cs);
    b.queues = calloc(n, sizeof *b.queues);
    b.queue_of = calloc(n, sizeof *b.queue_of);
    if (!b.cs || !b.queues || !b.queue_of) {
        free(b.cs);
        free(b.queues);
        free(b.queue_of);
        return SS_ERR_NO_MEMORY;
    }
    size_t nqueues = 0;
    for (size_t i = 0; i < n; i++) {
        size_t q = 0;
        while (q < nqueues && b.queues[q].ch != calls[i].ch)
            q++;
        if (q == nqueues)
            b.queues[nqueues++] = (channel_queue){.ch = calls[i].ch, .next = i};
        b.queue_of[i] = q;
    }
    if (stats)
        stats->channels = nqueues;
    b.cq = grpc_completion_queue_create_for_next(NULL);
    b.deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                              gpr_time_from_millis((int64_t)timeout_ms, GPR_TIMESPAN));
    for (size_t q = 0; q < nqueues; q++)
        fill_queue(&b, q, window);
    /* Each started call ends with exactly one event (its deadline bounds
     * it); the calls are ours, so their tags are their states. */
    while (b.ended < n) {
        grpc_event ev = grpc_completion_queue_next(b.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        size_t i = (size_t)((call_state *)ev.tag - b.cs);
        finish_call(&calls[i], &b.cs[i], ev.success);
        note_bulk_end(&b, i);
        b.ended++;
        b.queues[b.queue_of[i]].in_flight--;
        fill_queue(&b, b.queue_of[i], window);
    }
    grpc_completion_queue_shutdown(b.cq);
    while (grpc_completion_queue_next(b.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(b.cq);
    free(b.cs);
    free(b.queues);
    free(b.queue_of);
    ss_status first = SS_OK;
    for (size_t i = 0; i < n && first == SS_OK; i++)
        first = calls[i].status;
    return first;
}

ss_status ss__rpc_call_many(ss__rpc_request *calls, size_t n, uint32_t timeout_ms,
                            bool wait_for_ready) {
    return ss__rpc_call_windowed(calls, n, timeout_ms, wait_for_ready, 0);
}

ss_status ss__rpc_call(ss__rpc_channel *ch, const char *method, const uint8_t *req, size_t len,
                       uint32_t timeout_ms, bool wait_for_ready, uint8_t **resp, size_t *resp_len,
                       char *msg, size_t msglen) {
    if (!ch || !method || (!req && len) || !resp || !resp_len || timeout_ms == 0)
        return SS_ERR_INVALID_ARGUMENT;
    ss__rpc_request rq = {.ch = ch, .method = method, .req = req, .len = len};
    ss_status st = ss__rpc_call_many(&rq, 1, timeout_ms, wait_for_ready);
    if (st != SS_OK && msg && msglen)
        snprintf(msg, msglen, "%s", rq.msg);
    *resp = rq.resp;
    *resp_len = rq.resp_len;
    return st;
}
