/* A channel's bulk streams (bulk_link.h). */
#include "rpc/bulk/bulk_link.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/names.h"
#include "common/strbuf.h"
#include "rpc/bulk/bulk.h"
#include "rpc/bulk/bulk.pb-c.h"
#include "rpc/rpc_pb.h"

/* Idle streams kept per channel: the streams of the batches that run at
 * once (an agent's trainers' rounds share its channels), or each batch
 * would open its own (a ticket call and a connection). */
#define LINK_IDLE 16
#define MAX_LANES 8 /* streams a batch uses per channel, at most */
/* A channel's batch of CALLS_FOR_LANES calls or more (a dense group's
 * chunks) takes PIPELINE_LANES streams, so that the server computes one
 * call while it reads the next; fewer (a lookup's one or two chunks) go
 * on one stream: a second one cost a thread per batch, and the server's
 * two threads took the core the caller needs (lookups of 4,096 rows at
 * 0.3 of the throughput of one stream). Calls that wait at the server
 * (ss__rpc_request.waits) take one each, up to MAX_LANES: a stream's
 * server takes its calls one after another, so an MA round with a member
 * missing would wait for its deadline once per chunk a stream carries
 * instead of once (gRPC's window has them all wait at once). */
#define PIPELINE_LANES  2
#define CALLS_FOR_LANES 4
#define MAX_SERVERS     64             /* channels one batch may span on streams */
#define OFF_REFUSED_NS  60000000000ull /* no bulk port, no ticket for us: gRPC for a minute */
#define RETRY_MIN_NS    1000000000ull  /* a stream that did not open: gRPC for 1 s ... */
#define RETRY_MAX_NS    30000000000ull /* ... doubling up to 30 s */

struct ss__bulk_link {
    char host[256];
    char tls_ca[512], tls_cert[512], tls_key[512]; /* "": none */
    size_t max_reply;
    pthread_mutex_t lock;
    /* guarded by lock: */
    bool on;
    ss__bulk_tls *tls; /* loaded at the first stream; NULL: plain */
    bool tls_loaded;
    char *methods[SS_BULK_MAX_METHODS]; /* what the server streams, from its ticket */
    size_t nmethods;
    bool learned;
    uint64_t off_until_ns, retry_ns;
    ss__bulk_stream *idle[LINK_IDLE];
    uint32_t nidle;
    uint64_t epoch;
    _Atomic uint64_t batches;
};

ss_status ss__bulk_link_create(const char *target, const ss__rpc_tls *tls, size_t max_reply,
                               ss__bulk_link **out, char *why, size_t whylen) {
    *out = NULL;
    char host[256];
    unsigned port;
    if (!ss__address_split(target, host, sizeof host, &port))
        return SS_OK; /* a gRPC URI: no streams */
    ss__bulk_link *l = calloc(1, sizeof *l);
    if (!l)
        return ss__fail(why, whylen, SS_ERR_NO_MEMORY, "no memory for the bulk streams of %s",
                        target);
    snprintf(l->host, sizeof l->host, "%s", host);
    if (tls) {
        snprintf(l->tls_ca, sizeof l->tls_ca, "%s", tls->ca_file ? tls->ca_file : "");
        snprintf(l->tls_cert, sizeof l->tls_cert, "%s", tls->cert_file ? tls->cert_file : "");
        snprintf(l->tls_key, sizeof l->tls_key, "%s", tls->key_file ? tls->key_file : "");
    }
    l->max_reply = max_reply;
    l->retry_ns = RETRY_MIN_NS;
    pthread_mutex_init(&l->lock, NULL);
    *out = l;
    return SS_OK;
}

/* Takes the idle streams out (under l->lock) into out; how many. */
static uint32_t take_idle(ss__bulk_link *l, ss__bulk_stream **out) {
    const uint32_t n = l->nidle;
    memcpy(out, l->idle, n * sizeof *out);
    l->nidle = 0;
    return n;
}

static void close_all(ss__bulk_stream **b, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        ss__bulk_stream_close(b[i]);
}

void ss__bulk_link_destroy(ss__bulk_link *l) {
    if (!l)
        return;
    close_all(l->idle, l->nidle);
    for (size_t i = 0; i < l->nmethods; i++)
        free(l->methods[i]);
    ss__bulk_tls_destroy(l->tls);
    pthread_mutex_destroy(&l->lock);
    free(l);
}

void ss__bulk_link_enable(ss__bulk_link *l, bool on) {
    if (!l)
        return;
    ss__bulk_stream *old[LINK_IDLE];
    pthread_mutex_lock(&l->lock);
    l->on = on;
    const uint32_t n = on ? 0 : take_idle(l, old);
    pthread_mutex_unlock(&l->lock);
    close_all(old, n);
}

void ss__bulk_link_set_epoch(ss__bulk_link *l, uint64_t epoch) {
    if (!l)
        return;
    ss__bulk_stream *old[LINK_IDLE];
    pthread_mutex_lock(&l->lock);
    const uint32_t n = epoch != l->epoch ? take_idle(l, old) : 0;
    l->epoch = epoch;
    pthread_mutex_unlock(&l->lock);
    close_all(old, n);
}

uint64_t ss__bulk_link_batches(const ss__bulk_link *l) {
    return l ? atomic_load_explicit(&((ss__bulk_link *)l)->batches, memory_order_relaxed) : 0;
}

/* Whether the server streams method (under l->lock; false before its
 * first ticket). */
static bool streams_method(const ss__bulk_link *l, const char *method) {
    for (size_t i = 0; i < l->nmethods; i++)
        if (strcmp(l->methods[i], method) == 0)
            return true;
    return false;
}

/* Whether call r may go on l's streams now (under l->lock): the link on
 * and not resting, and its method streamed, or not known yet (*learn: a
 * first stream opened asks; the ticket call itself never goes). */
static bool may_stream(const ss__bulk_link *l, const ss__rpc_request *r, uint64_t now,
                       bool *learn) {
    if (!l->on || now < l->off_until_ns || strcmp(r->method, SS_BULK_M_TICKET) == 0)
        return false;
    if (l->learned)
        return streams_method(l, r->method);
    *learn = true;
    return true;
}

/* The ticket reply's paths become what the server streams (under l->lock). */
static void learn_methods(ss__bulk_link *l, const Shadowsync__V1__BulkTicketReply *r) {
    for (size_t i = 0; i < l->nmethods; i++)
        free(l->methods[i]);
    l->nmethods = 0;
    for (size_t i = 0; i < r->n_methods && l->nmethods < SS_BULK_MAX_METHODS; i++)
        if ((l->methods[l->nmethods] = strdup(r->methods[i])))
            l->nmethods++;
    l->learned = true;
}

/* How a failed open rests the link (under l->lock): a server that has no
 * bulk port or gives us no ticket for a minute, any other failure for
 * retry_ns, doubling. */
static void rest(ss__bulk_link *l, ss_status st, uint64_t now) {
    const bool refused =
        st == SS_ERR_UNSUPPORTED || st == SS_ERR_NOT_FOUND || st == SS_ERR_PERMISSION;
    l->off_until_ns = now + (refused ? OFF_REFUSED_NS : l->retry_ns);
    if (!refused && l->retry_ns < RETRY_MAX_NS)
        l->retry_ns *= 2;
}

/* A ticket for epoch over ch, the paths learned. */
static ss_status ask_ticket(ss__bulk_link *l, ss__rpc_channel *ch, uint64_t epoch,
                            uint32_t timeout_ms, uint8_t ticket[SS_BULK_TICKET_BYTES],
                            uint32_t *port, char *why, size_t whylen) {
    Shadowsync__V1__BulkTicketRequest req = SHADOWSYNC__V1__BULK_TICKET_REQUEST__INIT;
    req.epoch = epoch;
    ProtobufCMessage *msg = NULL;
    ss_status st =
        ss__rpc_call_message(ch, SS_BULK_M_TICKET, &req.base, timeout_ms, false,
                             &shadowsync__v1__bulk_ticket_reply__descriptor, &msg, why, whylen);
    const Shadowsync__V1__BulkTicketReply *r = (const Shadowsync__V1__BulkTicketReply *)msg;
    if (st == SS_OK && (r->ticket.len != SS_BULK_TICKET_BYTES || r->port == 0 || r->port > 65535))
        st = SS_ERR_PARSE;
    if (st == SS_OK) {
        memcpy(ticket, r->ticket.data, SS_BULK_TICKET_BYTES);
        *port = r->port;
        pthread_mutex_lock(&l->lock);
        learn_methods(l, r);
        pthread_mutex_unlock(&l->lock);
    }
    if (msg)
        protobuf_c_message_free_unpacked(msg, NULL);
    return st;
}

/* The link's TLS context, loaded once (under l->lock). */
static ss_status load_tls(ss__bulk_link *l, char *why, size_t whylen) {
    if (l->tls_loaded)
        return SS_OK;
    const ss__rpc_tls files = {*l->tls_ca ? l->tls_ca : NULL, *l->tls_cert ? l->tls_cert : NULL,
                               *l->tls_key ? l->tls_key : NULL};
    ss_status st = ss__bulk_tls_create(&files, false, &l->tls, why, whylen); /* NULL: plain */
    l->tls_loaded = st == SS_OK;
    return st;
}

/* A new stream to ch's server: a ticket for epoch, then a connection.
 * NULL when none could be opened (said; the link rests, unless the
 * stream was a spare: a batch's second or later on the channel, which
 * runs on the streams it has: a server with no room for one more now
 * still serves the first). */
static ss__bulk_stream *open_stream(ss__bulk_link *l, ss__rpc_channel *ch, uint64_t epoch,
                                    uint32_t timeout_ms, bool spare) {
    uint8_t ticket[SS_BULK_TICKET_BYTES];
    uint32_t port = 0;
    char why[300] = "";
    ss__bulk_stream *b = NULL;
    pthread_mutex_lock(&l->lock);
    ss_status st = load_tls(l, why, sizeof why);
    pthread_mutex_unlock(&l->lock);
    if (st == SS_OK &&
        (st = ask_ticket(l, ch, epoch, timeout_ms, ticket, &port, why, sizeof why)) != SS_OK &&
        !*why)
        snprintf(why, sizeof why, "the ticket call over gRPC failed");
    if (st == SS_OK)
        st = ss__bulk_stream_open(l->host, port, l->tls, ticket, timeout_ms, l->max_reply, &b, why,
                                  sizeof why);
    const uint64_t now = ss__now_ns();
    /* A ticket refused for a stale shard map epoch: the caller re-routes
     * (its gRPC call is refused the same way) and asks again at once. */
    const bool stale = st == SS_ERR_STATE;
    pthread_mutex_lock(&l->lock);
    if (st == SS_OK)
        l->retry_ns = RETRY_MIN_NS;
    else if (!stale && !spare)
        rest(l, st, now);
    const uint64_t rest_ms = st == SS_OK || stale || spare ? 0 : (l->off_until_ns - now) / 1000000;
    pthread_mutex_unlock(&l->lock);
    if (st == SS_ERR_UNSUPPORTED || st == SS_ERR_NOT_FOUND || st == SS_ERR_PERMISSION)
        ss__log(SS_LOG_INFO, "rpc", "event=bulk_off host=%s reason=%s status=%s grpc_for_ms=%llu",
                l->host, st == SS_ERR_PERMISSION ? "not_a_writer" : "no_bulk_port",
                ss_status_name(st), (unsigned long long)rest_ms);
    else if (st != SS_OK)
        ss__log(spare ? SS_LOG_INFO : SS_LOG_WARN, "rpc",
                "event=bulk_open_failed host=%s status=%s why=\"%s\" spare=%d grpc_for_ms=%llu",
                l->host, ss_status_name(st), why, spare, (unsigned long long)rest_ms);
    return b;
}

/* An idle stream of l whose peer is still there (one that closed, a PS
 * that restarted, is closed here: sending on it would fail the batch),
 * or a new one (open_stream's spare); *epoch: the stream's. */
static ss__bulk_stream *take_stream(ss__bulk_link *l, ss__rpc_channel *ch, uint32_t timeout_ms,
                                    bool spare, uint64_t *epoch) {
    ss__bulk_stream *b = NULL;
    for (;;) {
        pthread_mutex_lock(&l->lock);
        b = l->nidle ? l->idle[--l->nidle] : NULL;
        *epoch = l->epoch;
        pthread_mutex_unlock(&l->lock);
        if (!b || ss__bulk_stream_alive(b))
            break;
        ss__bulk_stream_close(b);
    }
    if (b)
        ss__bulk_stream_set_timeout(b, timeout_ms);
    return b ? b : open_stream(l, ch, *epoch, timeout_ms, spare);
}

/* A stream of epoch back to l's idle ones (closed when broken, when the
 * channel routes by another epoch now, when streams are off, or when
 * there are enough). A broken one takes the idle ones with it: they are
 * to the same server, which most likely went away. */
static void put_stream(ss__bulk_link *l, ss__bulk_stream *b, uint64_t epoch, bool broken) {
    ss__bulk_stream *old[LINK_IDLE];
    uint32_t nold = 0;
    pthread_mutex_lock(&l->lock);
    if (broken) {
        nold = take_idle(l, old);
    } else if (l->on && epoch == l->epoch && l->nidle < LINK_IDLE) {
        l->idle[l->nidle++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&l->lock);
    ss__bulk_stream_close(b);
    close_all(old, nold);
}

typedef struct lane {
    ss__bulk_link *l;
    ss__rpc_channel *ch;
    ss__rpc_request *rq;
    size_t n;
    unsigned index, count;
    ss__bulk_stream *b;
    uint64_t epoch; /* b's */
    ss_status st;
} lane;

static void *run_lane(void *arg) {
    lane *ln = arg;
    ln->st = ss__bulk_call_many(ln->b, ln->rq, ln->n, ln->ch, ln->index, ln->count);
    return NULL;
}

/* The batch's channels (distinct, in order of first call) into chs, with
 * each one's call count and whether one of its calls waits at the server;
 * false when some call may not go on streams now (*learners: how many
 * links a stream would teach). */
static bool batch_channels(ss__rpc_request *rq, size_t n, ss__rpc_channel **chs, size_t *calls,
                           bool *waits, size_t *nch, size_t *learners) {
    const uint64_t now = ss__now_ns();
    *nch = *learners = 0;
    for (size_t i = 0; i < n; i++) {
        ss__bulk_link *l = ss__rpc_channel_link(rq[i].ch);
        if (!l)
            return false;
        size_t c = 0;
        while (c < *nch && chs[c] != rq[i].ch)
            c++;
        if (c == *nch) {
            if (c == MAX_SERVERS)
                return false;
            chs[(*nch)++] = rq[i].ch;
            calls[c] = 0;
            waits[c] = false;
        }
        calls[c]++;
        waits[c] = waits[c] || rq[i].waits;
        bool learn = false;
        pthread_mutex_lock(&l->lock);
        const bool ok = may_stream(l, &rq[i], now, &learn);
        pthread_mutex_unlock(&l->lock);
        if (!ok)
            return false;
        *learners += learn;
    }
    return true;
}

/* Whether every call's method is one its link's server streams (after a
 * first ticket taught it). */
static bool all_streamed(ss__rpc_request *rq, size_t n) {
    for (size_t i = 0; i < n; i++) {
        ss__bulk_link *l = ss__rpc_channel_link(rq[i].ch);
        pthread_mutex_lock(&l->lock);
        const bool ok = streams_method(l, rq[i].method);
        pthread_mutex_unlock(&l->lock);
        if (!ok)
            return false;
    }
    return true;
}

/* The streams a channel's calls of a batch run on (see CALLS_FOR_LANES);
 * waits: one of them waits at the server for other callers'. */
static unsigned lanes_for(size_t calls, bool waits) {
    if (waits)
        return (unsigned)(calls < MAX_LANES ? calls : MAX_LANES);
    return calls >= CALLS_FOR_LANES ? PIPELINE_LANES : 1;
}

/* The lanes' streams per channel (lanes_for, or as many of those as
 * open: at least one) into ls; false when a channel has none (the
 * streams taken are in ls[0 .. *k)). */
static bool take_lanes(ss__rpc_request *rq, size_t n, ss__rpc_channel **chs, const size_t *calls,
                       const bool *waits, size_t nch, uint32_t timeout_ms, lane *ls, size_t *k) {
    *k = 0;
    for (size_t c = 0; c < nch; c++) {
        const unsigned want = lanes_for(calls[c], waits[c]);
        lane *first = &ls[*k];
        unsigned got = 0;
        for (; got < want; got++) {
            ls[*k] = (lane){.l = ss__rpc_channel_link(chs[c]), .ch = chs[c], .rq = rq, .n = n};
            ls[*k].b = take_stream(ls[*k].l, chs[c], timeout_ms, got > 0, &ls[*k].epoch);
            if (!ls[*k].b)
                break;
            (*k)++;
        }
        if (got == 0)
            return false;
        for (unsigned j = 0; j < got; j++) {
            first[j].index = j;
            first[j].count = got;
        }
    }
    return true;
}

/* Runs the lanes, the first on this thread and each other on its own;
 * *st: the first failure. */
static void run_lanes(lane *ls, size_t k, ss_status *st) {
    pthread_t th[MAX_SERVERS * MAX_LANES];
    bool started[MAX_SERVERS * MAX_LANES] = {false};
    for (size_t j = 1; j < k; j++)
        started[j] = pthread_create(&th[j], NULL, run_lane, &ls[j]) == 0;
    if (k)
        run_lane(&ls[0]);
    for (size_t j = 1; j < k; j++) {
        if (started[j])
            pthread_join(th[j], NULL);
        else
            run_lane(&ls[j]);
    }
    *st = SS_OK;
    for (size_t j = 0; j < k && *st == SS_OK; j++)
        *st = ls[j].st;
}

/* Gives the lanes' streams back; a channel with a call that failed in
 * transit has its streams closed (another lane's too: a stream is cheap
 * to open again). */
static void put_lanes(ss__rpc_request *rq, size_t n, lane *ls, size_t k) {
    for (size_t j = 0; j < k; j++) {
        bool broken = false;
        for (size_t i = 0; i < n; i++)
            broken |= rq[i].ch == ls[j].ch && rq[i].status == SS_ERR_IO;
        put_stream(ls[j].l, ls[j].b, ls[j].epoch, broken);
    }
}

bool ss__bulk_links_call(ss__rpc_request *rq, size_t n, uint32_t timeout_ms, ss_status *st) {
    ss__rpc_channel *chs[MAX_SERVERS];
    size_t calls[MAX_SERVERS], nch, learners;
    bool waits[MAX_SERVERS];
    if (n == 0 || !batch_channels(rq, n, chs, calls, waits, &nch, &learners))
        return false;
    lane ls[MAX_SERVERS * MAX_LANES];
    size_t k;
    bool ok = take_lanes(rq, n, chs, calls, waits, nch, timeout_ms, ls, &k);
    if (ok && learners)
        ok = all_streamed(rq, n); /* the first tickets said what is streamed */
    if (!ok) {
        for (size_t j = 0; j < k; j++)
            put_stream(ls[j].l, ls[j].b, ls[j].epoch, false);
        return false;
    }
    run_lanes(ls, k, st);
    put_lanes(rq, n, ls, k);
    for (size_t c = 0; c < nch; c++)
        atomic_fetch_add_explicit(&ss__rpc_channel_link(chs[c])->batches, 1, memory_order_relaxed);
    return true;
}
